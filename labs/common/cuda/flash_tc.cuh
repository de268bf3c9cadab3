// flash_tc.cuh — flash attention on the tensor cores: flash.cu's algorithm with every product a
// tensor-core instruction and the online softmax done where the products leave their results,
// in each lane's registers (FlashAttention-2's layout). Three formats of operands:
//   bf16   (--mixed, ops.h's bf16_in = 1): rounded to bf16 as the CPU rounds them (attention.c
//          says which), so the two agree to their sums' order;
//   TF32   (--tf32): fp32 rounded to TF32's 10 bits of mantissa as they enter a product, as
//          --tf32's cuBLAS products do (not emulated on the CPU: test_cuda_ops bounds it);
//   3xTF32 (fp32, the default): each fp32 operand split into two TF32s and each product taken
//          as three, which is as close to fp32's own product as fp32's rounding (Tf32x3 says
//          how), at three tensor-core instructions where fp32 on the ordinary cores is many.
// Everything else (the softmax's max, sum, lse and D, the accumulators) is fp32.
//
// flash_tc.cu launches these kernels. tests/gpu/emulate.h runs the very same kernels on the
// CPU (SHARDLAB_EMULATE: a thread per GPU thread, the tensor cores' instructions by their
// documented layouts), so that CI checks them without a GPU (tests/gpu/test_flash_tc.cc).
//
// Before including it: FULL_MASK, FLASH_KEYS_BF16 and bf16.h (ops.h), and for nvcc <cuda_bf16.h>;
// or, emulated, emulate.h.
//
// ONE INSTRUCTION. A warp multiplies a 16 x K tile A by a K x 8 tile B and adds the product to
// a 16 x 8 fp32 tile C (mma.sync: K = 16 for bf16, 8 for TF32). Each lane holds a fixed piece of
// each tile, by its group g = lane / 4 (a row) and its place q = lane % 4 in the group:
//
//     C (16 x 8, 4 floats)      A, bf16 (16 x 16, 4 words       A, TF32 (16 x 8, 4 words
//         cols 2q, 2q+1            of two bf16)                    of one tf32)
//     row g     c[0] c[1]             cols 2q,2q+1 | 2q+8,2q+9        col q | col q+4
//     row g+8   c[2] c[3]      row g     a[0]      | a[2]         row g    a[0]  | a[2]
//                              row g+8   a[1]      | a[3]         row g+8  a[1]  | a[3]
//
// B is A's transpose in layout: column g, rows 2q,2q+1 and 2q+8,2q+9 (bf16) or q and q+4 (TF32).
// So a lane's floats of C lie in the same rows as its words of A: the scores S = Q K^T that come
// out as C tiles (16 rows x 8 keys each) become the A operand of the next product P V in the
// lane's own registers. In bf16, two C tiles side by side are exactly A's layout once each pair
// is rounded and packed into a word. In TF32, C holds keys 2q and 2q+1 where A wants q and q+4;
// a sum over the keys does not care in which order they come, so the product P V takes A's
// column q as key 2q and column q+4 as key 2q+1, and reads B's rows in the same order
// (load_b_held). P never leaves the registers. The four lanes of a group hold all of rows g and
// g+8, so a row's max and sum are each lane's own over its 2 x (keys / 8) scores, then two
// shuffles within the group.
//
// THE BLOCK. 4 warps, 64 rows of one head (16 a warp): queries forward and for dq, keys for
// dk and dv. The other side comes in tiles of 64 rows, staged by the whole block into shared
// memory in the format (rounded once, as they are read from the fp32 qkv), in two layouts:
//
//     rows    [64][HSP + pad]   a row per token (the products with K^T, V^T, Q^T, dO^T read
//                               B's columns as rows: a word one or two channels of one token)
//     columns [HSP][64 + 8]     the same tile transposed (P V, dS K, P^T dO, dS^T Q read B's
//                               columns as channels: of one channel, consecutive tokens)
//
// The padding (8 bf16 or 4 tf32: 4 words, and 8 elements a column row) puts the 8 groups of a
// warp reading their words in 32 different banks. The block's own rows are staged the same
// way, once, and every A operand is read from them (fp32 accumulators are the only per-lane
// arrays).
//
// The causal mask and the ragged ends are by value, as in flash.cu: a key a row must not see
// gets a score of -inf forward, a probability of 0 backward; rows past T compute on zeros and
// write nothing. Heads are padded with zero channels to HSP = 16, 32, 64 or 128. Determinism:
// fixed orders everywhere and two backward kernels that each own what they write (dq by query
// rows, dk and dv by key rows), no atomics.
#ifndef SHARDLAB_FLASH_TC_CUH
#define SHARDLAB_FLASH_TC_CUH

#include <math.h>
#include <stdint.h>

// A kernel's dynamic shared memory (the emulation hands each block its own).
#ifdef SHARDLAB_EMULATE
#define TC_SHARED(name) unsigned char *name = emu_shared()
#else
#define TC_SHARED(name) extern __shared__ __align__(16) unsigned char name[]
#endif

namespace tc {

const int WARPS = 4, THREADS = 32 * WARPS;
const int ROWS = 16 * WARPS;       // the block's own rows
const int TILE = FLASH_KEYS_BF16;  // rows of the other side per step: 64, the CPU's with bf16 (ops.h)

__device__ inline int lane_group() { return threadIdx.x % 32 / 4; }
__device__ inline int lane_place() { return threadIdx.x % 4; }

// The 32-bit word at element i of a tile (i even for bf16: two elements).
template <typename E>
__device__ uint32_t word(const E *tile, int i) { return *reinterpret_cast<const uint32_t *>(tile + i); }

// One mma.sync, c += a b, by its PTX name (both formats take four words of A, two of B and
// four floats of C); on the emulator, emu's instruction of the same shape. Compute capability
// 8.0 and later only: the build targets those (Makefile: CUDA_ARCHS), and usable() says so
// before a kernel runs.
#if defined(SHARDLAB_EMULATE)
#define TC_MMA_SYNC(name, emulated, c, a, b) emulated(c, a, b)
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
#define TC_MMA_SYNC(name, emulated, c, a, b)                                                      \
    asm volatile(name " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                 \
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                \
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))
#else
#define TC_MMA_SYNC(name, emulated, c, a, b) __trap()
#endif

// bf16: two operands to a word, one instruction 16 x 16 by 16 x 8.
struct Bf16 {
    typedef uint16_t Elem;
    typedef uint32_t A[4];  // a lane's words of A and of B
    typedef uint32_t B[2];
    static const int K = 16;
    static const int LDC = TILE + 8;  // a row of a transposed tile, in elements
    template <int HSP>
    __host__ __device__ static constexpr int ldr() { return HSP + 8; }

    // Two floats rounded to bf16 (to nearest even, as bf16.h) and packed: lo in the low half.
    __device__ static uint32_t pack(float lo, float hi) {
#ifdef SHARDLAB_EMULATE
        return (uint32_t)bf16_from_float(lo) | (uint32_t)bf16_from_float(hi) << 16;
#else
        __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
        return *reinterpret_cast<uint32_t *>(&v);
#endif
    }
    __device__ static void store2(Elem *at, float x0, float x1) { *reinterpret_cast<uint32_t *>(at) = pack(x0, x1); }

    // A's words for rows 0..15 of tile (row length ld), its columns k0..k0+15.
    __device__ static void load_a(uint32_t (&a)[4], const Elem *tile, int ld, int k0) {
        const int g = lane_group(), q = lane_place();
        a[0] = word(tile, g * ld + k0 + 2 * q), a[1] = word(tile, (g + 8) * ld + k0 + 2 * q);
        a[2] = word(tile, g * ld + k0 + 8 + 2 * q), a[3] = word(tile, (g + 8) * ld + k0 + 8 + 2 * q);
    }
    // B's words for a 16 x 8 tile whose column n is row n of tile (row length ld), rows k0..k0+15.
    __device__ static void load_b(uint32_t (&b)[2], const Elem *tile, int ld, int k0) {
        const int g = lane_group(), q = lane_place();
        b[0] = word(tile, g * ld + k0 + 2 * q), b[1] = word(tile, g * ld + k0 + 8 + 2 * q);
    }
    __device__ static void load_b_held(uint32_t (&b)[2], const Elem *tile, int ld, int k0) { load_b(b, tile, ld, k0); }
    // A from the C tiles p[2kk] and p[2kk+1] (keys 16kk .. 16kk+15), rounded and packed.
    template <int NT>
    __device__ static void a_held(uint32_t (&a)[4], const float (&p)[NT][4], int kk) {
        a[0] = pack(p[2 * kk][0], p[2 * kk][1]), a[1] = pack(p[2 * kk][2], p[2 * kk][3]);
        a[2] = pack(p[2 * kk + 1][0], p[2 * kk + 1][1]), a[3] = pack(p[2 * kk + 1][2], p[2 * kk + 1][3]);
    }
    __device__ static void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
        TC_MMA_SYNC("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", emu_mma_bf16, c, a, b);
    }
};

// TF32: an fp32 rounded to 10 bits of mantissa in each word, one instruction 16 x 8 by 8 x 8.
struct Tf32 {
    typedef uint32_t Elem;
    typedef uint32_t A[4];
    typedef uint32_t B[2];
    static const int K = 8;
    static const int LDC = TILE + 8;
    template <int HSP>
    __host__ __device__ static constexpr int ldr() { return HSP + 4; }

    // x rounded to TF32 (to nearest, ties away from zero, as the tensor cores' conversion).
    __device__ static uint32_t round(float x) {
        uint32_t r;
#if defined(SHARDLAB_EMULATE)
        r = emu_tf32_round(x);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
        asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(x));
#else
        r = __float_as_uint(x);
#endif
        return r;
    }
    __device__ static void store2(Elem *at, float x0, float x1) { at[0] = round(x0), at[1] = round(x1); }

    __device__ static void load_a(uint32_t (&a)[4], const Elem *tile, int ld, int k0) {
        const int g = lane_group(), q = lane_place();
        a[0] = tile[g * ld + k0 + q], a[1] = tile[(g + 8) * ld + k0 + q];
        a[2] = tile[g * ld + k0 + q + 4], a[3] = tile[(g + 8) * ld + k0 + q + 4];
    }
    __device__ static void load_b(uint32_t (&b)[2], const Elem *tile, int ld, int k0) {
        const int g = lane_group(), q = lane_place();
        b[0] = tile[g * ld + k0 + q], b[1] = tile[g * ld + k0 + q + 4];
    }
    // For a product with P held in registers: A's column q is key 2q, column q+4 key 2q+1.
    // (One 8-byte load: the half-warps' words then fall in 32 banks.)
    __device__ static void load_b_held(uint32_t (&b)[2], const Elem *tile, int ld, int k0) {
        const int g = lane_group(), q = lane_place();
        uint2 w = *reinterpret_cast<const uint2 *>(tile + g * ld + k0 + 2 * q);
        b[0] = w.x, b[1] = w.y;
    }
    // A from the C tile p[kk] (keys 8kk .. 8kk+7), in load_b_held's order.
    template <int NT>
    __device__ static void a_held(uint32_t (&a)[4], const float (&p)[NT][4], int kk) {
        a[0] = round(p[kk][0]), a[1] = round(p[kk][2]), a[2] = round(p[kk][1]), a[3] = round(p[kk][3]);
    }
    __device__ static void mma(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
        TC_MMA_SYNC("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", emu_mma_tf32, c, a, b);
    }
};

// fp32 as three TF32 products ("3xTF32"). Each fp32 operand x is split into two TF32s,
//     big = tf32(x),  small = tf32(x - big)      (x - big is exact in fp32)
// so x = big + small to 22 bits of mantissa, and a product a b is taken as
//     a b ~= small_a big_b + big_a small_b + big_a big_b      (the small terms first)
// three instructions, each exact in its products and summed in fp32. What it drops (small_a
// small_b, and small's own rounding) is about 2^-22 of |a b|, where one TF32 product misses by
// 2^-11 and fp32's rounding of a product is 2^-24: so the sums agree with fp32's to within a
// few of fp32's roundings (test_flash_tc measures it against the CPU's fp32 flash). It is also
// what PyTorch's fp32 scaled_dot_product_attention does on these GPUs (its memory-efficient
// kernels multiply fp32 as 3xTF32 from compute capability 8.0 on), so the fp32 comparison in
// bench-gpu sets like against like. The tiles hold the fp32 values as they are, in Tf32's
// layout; a fragment is split as it is read, once for every product it takes part in.
struct Tf32x3 {
    typedef uint32_t Elem;  // an fp32's bits
    struct A {
        uint32_t big[4], small[4];
    };
    struct B {
        uint32_t big[2], small[2];
    };
    static const int K = Tf32::K;
    static const int LDC = Tf32::LDC;
    template <int HSP>
    __host__ __device__ static constexpr int ldr() { return Tf32::ldr<HSP>(); }

    template <int N>
    __device__ static void split(uint32_t (&big)[N], uint32_t (&small)[N], const uint32_t (&x)[N]) {
#pragma unroll
        for (int i = 0; i < N; i++) {
            big[i] = Tf32::round(__uint_as_float(x[i]));
            small[i] = Tf32::round(__uint_as_float(x[i]) - __uint_as_float(big[i]));
        }
    }
    __device__ static void store2(Elem *at, float x0, float x1) { at[0] = __float_as_uint(x0), at[1] = __float_as_uint(x1); }

    __device__ static void load_a(A &a, const Elem *tile, int ld, int k0) {
        uint32_t x[4];
        Tf32::load_a(x, tile, ld, k0);
        split(a.big, a.small, x);
    }
    __device__ static void load_b(B &b, const Elem *tile, int ld, int k0) {
        uint32_t x[2];
        Tf32::load_b(x, tile, ld, k0);
        split(b.big, b.small, x);
    }
    __device__ static void load_b_held(B &b, const Elem *tile, int ld, int k0) {
        uint32_t x[2];
        Tf32::load_b_held(x, tile, ld, k0);
        split(b.big, b.small, x);
    }
    template <int NT>
    __device__ static void a_held(A &a, const float (&p)[NT][4], int kk) {
        const uint32_t x[4] = {__float_as_uint(p[kk][0]), __float_as_uint(p[kk][2]), __float_as_uint(p[kk][1]),
                               __float_as_uint(p[kk][3])};  // Tf32::a_held's order
        split(a.big, a.small, x);
    }
    __device__ static void mma(float (&c)[4], const A &a, const B &b) {
#ifdef SHARDLAB_EMULATE
        emu_mma_tf32x3(c, a.big, a.small, b.big, b.small);  // the same three, one exchange
#else
        Tf32::mma(c, a.small, b.big);
        Tf32::mma(c, a.big, b.small);
        Tf32::mma(c, a.big, b.big);
#endif
    }
};

// acc (16 x N) += A B^T, A the warp's 16 rows of K columns (a, row length lda), B N rows of K
// columns (b, row length ldb): scores, as in S = Q K^T.
template <typename F, int N, int K>
__device__ void mma_rows(float (&acc)[N / 8][4], const typename F::Elem *a, int lda, const typename F::Elem *b,
                         int ldb) {
#pragma unroll
    for (int k0 = 0; k0 < K; k0 += F::K) {
        typename F::A af;
        F::load_a(af, a, lda, k0);
#pragma unroll
        for (int j = 0; j < N / 8; j++) {
            typename F::B bf;
            F::load_b(bf, b + 8 * j * ldb, ldb, k0);
            F::mma(acc[j], af, bf);
        }
    }
}

// acc (16 x N) += P B, P (16 x K) the warp's C tiles p[K/8] (rounded to the format here), B
// (K x N) given transposed (bt: N rows of K, row length ldbt): as in O += P V.
template <typename F, int N, int K>
__device__ void mma_held(float (&acc)[N / 8][4], const float (&p)[K / 8][4], const typename F::Elem *bt, int ldbt) {
#pragma unroll
    for (int kk = 0; kk < K / F::K; kk++) {
        typename F::A af;
        F::a_held(af, p, kk);
#pragma unroll
        for (int n = 0; n < N / 8; n++) {
            typename F::B bf;
            F::load_b_held(bf, bt + 8 * n * ldbt, ldbt, F::K * kk);
            F::mma(acc[n], af, bf);
        }
    }
}

template <int N, int M>
__device__ void zero(float (&x)[N][M]) {
#pragma unroll
    for (int i = 0; i < N; i++)
#pragma unroll
        for (int j = 0; j < M; j++) x[i][j] = 0.0f;
}

// An input as fp32: an fp32 as it is, or a bf16 number --mixed keeps (q, k, v and the
// attention's output: gpt.h), widened exactly.
__device__ inline float widen(float x) { return x; }
__device__ inline float widen(uint16_t x) { return bf16_to_float(x); }
// An output as stored: fp32 as it is, or rounded to bf16 (to_bf16's bits: --mixed keeps the
// attention's output so).
__device__ inline void put(float *p, float x) { *p = x; }
__device__ inline void put(uint16_t *p, float x) { *p = bf16_from_float(x); }

// rows[r][c] = the head's channel c of token u0 + r in the format, for r < n, from src (token u
// of batch b at src + (b T + u) stride); 0 past hs and past T. Consecutive threads take
// consecutive pairs of channels of a token.
template <typename F, int HSP, typename In>
__device__ void stage_rows(typename F::Elem *rows, int n, const In *src, size_t stride, int b, int u0, int T, int hs) {
    constexpr int LDR = F::template ldr<HSP>();
    for (int i = threadIdx.x; i < n * HSP / 2; i += THREADS) {
        int r = i / (HSP / 2), c = 2 * (i % (HSP / 2)), u = u0 + r;
        float x0 = 0.0f, x1 = 0.0f;
        if (u < T) {
            const In *row = src + ((size_t)b * T + u) * stride;
            if (c < hs) x0 = widen(row[c]);
            if (c + 1 < hs) x1 = widen(row[c + 1]);
        }
        F::store2(rows + r * LDR + c, x0, x1);
    }
}

// cols[c][r] = rows[r][c] for TILE rows: the tile transposed (already rounded: a copy).
template <typename F, int HSP>
__device__ void transpose(typename F::Elem *cols, const typename F::Elem *rows) {
    constexpr int LDR = F::template ldr<HSP>();
    for (int i = threadIdx.x; i < HSP * TILE; i += THREADS) {
        int c = i / TILE, r = i % TILE;
        cols[c * F::LDC + r] = rows[r * LDR + c];
    }
}

// The sum or max over a group's four lanes (lanes 4g .. 4g+3 hold one row's scores).
__device__ inline float group_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(FULL_MASK, x, 1));
    return fmaxf(x, __shfl_xor_sync(FULL_MASK, x, 2));
}
__device__ inline float group_sum(float x) {
    x += __shfl_xor_sync(FULL_MASK, x, 1);
    return x + __shfl_xor_sync(FULL_MASK, x, 2);
}

// Where the head's part (0 q, 1 k, 2 v) of token 0 of batch 0 starts: rows of 3C values.
template <typename In>
__device__ inline const In *qkv_part(const In *qkv, int part, int C, int h, int hs) {
    return qkv + (size_t)part * C + (size_t)h * hs;
}

// Shared memory of each kernel, in bytes: the tiles, and backward's lse and D (floats).
template <typename F, int HSP>
constexpr size_t forward_bytes() {
    return sizeof(typename F::Elem) * ((size_t)(ROWS + 2 * TILE) * F::template ldr<HSP>() + (size_t)HSP * F::LDC);
}
template <typename F, int HSP>
constexpr size_t dq_bytes() {
    return sizeof(typename F::Elem) * ((size_t)(2 * ROWS + 2 * TILE) * F::template ldr<HSP>() + (size_t)HSP * F::LDC);
}
template <typename F, int HSP>
constexpr size_t dkv_bytes() {
    return sizeof(typename F::Elem) * ((size_t)(2 * ROWS + 2 * TILE) * F::template ldr<HSP>() + 2 * (size_t)HSP * F::LDC) +
           2 * TILE * sizeof(float);
}

// The block's run of 64 rows: the last runs first (forward and dq: the rows with the most keys
// start first, so the short ones fill in at the end).
__device__ inline int last_first_row0() { return (gridDim.y - 1 - blockIdx.y) * ROWS; }

// ---- forward: per row t, o_t = softmax(s[t, 0..t]) V with the online softmax ----

// qkv: In = float, or bf16 (--mixed's kept numbers: the operands they round to, as they are);
// out: Out = float, or bf16 (rounded as it is written). The same arithmetic either way.
template <typename F, int HSP, typename In, typename Out>
__global__ void __launch_bounds__(THREADS) forward_kernel(Out *out, float *lse, const In *qkv, int T, int C, int NH,
                                                          float scale) {
    typedef typename F::Elem E;
    constexpr int LDR = F::template ldr<HSP>(), LDC = F::LDC;
    TC_SHARED(smem_bytes);
    E *smem = reinterpret_cast<E *>(smem_bytes);
    E *q_rows = smem, *k_rows = q_rows + ROWS * LDR, *v_rows = k_rows + TILE * LDR;
    E *v_cols = v_rows + TILE * LDR;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH, hs = C / NH;
    const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, q = threadIdx.x % 4;
    const int row0 = last_first_row0(), last = min(T - 1, row0 + ROWS - 1);
    const int t_lo = row0 + 16 * warp + g, t_hi = t_lo + 8;  // this lane's two rows
    const size_t stride = 3 * (size_t)C;

    stage_rows<F, HSP>(q_rows, ROWS, qkv_part(qkv, 0, C, h, hs), stride, b, row0, T, hs);
    float o[HSP / 8][4];
    zero(o);
    // Each row's running max (the group's) and the lane's share of its running sum.
    float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;

    for (int u0 = 0; u0 <= last; u0 += TILE) {
        __syncthreads();  // the block is done with the last tiles
        stage_rows<F, HSP>(k_rows, TILE, qkv_part(qkv, 1, C, h, hs), stride, b, u0, T, hs);
        stage_rows<F, HSP>(v_rows, TILE, qkv_part(qkv, 2, C, h, hs), stride, b, u0, T, hs);
        __syncthreads();
        transpose<F, HSP>(v_cols, v_rows);
        __syncthreads();

        float s[TILE / 8][4];  // S = Q K^T: rows t_lo (s[j][0..1]) and t_hi (s[j][2..3])
        zero(s);
        mma_rows<F, TILE, HSP>(s, q_rows + 16 * warp * LDR, LDR, k_rows, LDR);
        float max_lo = -INFINITY, max_hi = -INFINITY;
#pragma unroll
        for (int j = 0; j < TILE / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int u = u0 + 8 * j + 2 * q + e;
                s[j][e] = u <= t_lo && u < T ? s[j][e] * scale : -INFINITY;
                s[j][2 + e] = u <= t_hi && u < T ? s[j][2 + e] * scale : -INFINITY;
                max_lo = fmaxf(max_lo, s[j][e]), max_hi = fmaxf(max_hi, s[j][2 + e]);
            }
        // Key 0 is in every row's first tile: the new max is finite from the first tile on.
        float new_lo = fmaxf(m_lo, group_max(max_lo)), new_hi = fmaxf(m_hi, group_max(max_hi));
        float corr_lo = expf(m_lo - new_lo), corr_hi = expf(m_hi - new_hi);  // 0 on the first tile
        float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
        for (int j = 0; j < TILE / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                s[j][e] = expf(s[j][e] - new_lo), sum_lo += s[j][e];  // 0 for a masked key
                s[j][2 + e] = expf(s[j][2 + e] - new_hi), sum_hi += s[j][2 + e];
            }
        l_lo = l_lo * corr_lo + sum_lo, l_hi = l_hi * corr_hi + sum_hi;
        m_lo = new_lo, m_hi = new_hi;
#pragma unroll
        for (int n = 0; n < HSP / 8; n++) o[n][0] *= corr_lo, o[n][1] *= corr_lo, o[n][2] *= corr_hi, o[n][3] *= corr_hi;
        mma_held<F, HSP, TILE>(o, s, v_cols, LDC);  // O += P V
    }
    l_lo = group_sum(l_lo), l_hi = group_sum(l_hi);
    const float inv_lo = 1.0f / l_lo, inv_hi = 1.0f / l_hi;
#pragma unroll
    for (int n = 0; n < HSP / 8; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            int c = 8 * n + 2 * q + e;
            if (c >= hs) continue;
            if (t_lo < T) put(&out[((size_t)b * T + t_lo) * C + (size_t)h * hs + c], o[n][e] * inv_lo);
            if (t_hi < T) put(&out[((size_t)b * T + t_hi) * C + (size_t)h * hs + c], o[n][2 + e] * inv_hi);
        }
    if (q == 0 && t_lo < T) lse[(size_t)bh * T + t_lo] = m_lo + logf(l_lo);
    if (q == 0 && t_hi < T) lse[(size_t)bh * T + t_hi] = m_hi + logf(l_hi);
}

// ---- backward, step 1, by query rows: D_t = do_t . o_t (fp32); dq_t = scale sum_u ds[t,u] k_u ----
// with p = exp(s - lse_t), dp = do_t . v_u and ds = p (dp - D_t), rounded as it enters the product.
// The backward kernels read qkv and out as In: fp32, or (--mixed) the bf16 numbers kept for them.

template <typename F, int HSP, typename In>
__global__ void __launch_bounds__(THREADS) backward_dq_kernel(float *dqkv, float *D, const float *dout, const In *qkv,
                                                              const In *out, const float *lse, int T, int C, int NH,
                                                              float scale) {
    typedef typename F::Elem E;
    constexpr int LDR = F::template ldr<HSP>(), LDC = F::LDC;
    TC_SHARED(smem_bytes);
    E *smem = reinterpret_cast<E *>(smem_bytes);
    E *q_rows = smem, *do_rows = q_rows + ROWS * LDR, *k_rows = do_rows + ROWS * LDR;
    E *v_rows = k_rows + TILE * LDR, *k_cols = v_rows + TILE * LDR;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH, hs = C / NH;
    const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, q = threadIdx.x % 4;
    const int row0 = last_first_row0(), last = min(T - 1, row0 + ROWS - 1);
    const int t_lo = row0 + 16 * warp + g, t_hi = t_lo + 8;
    const size_t stride = 3 * (size_t)C;

    stage_rows<F, HSP>(q_rows, ROWS, qkv_part(qkv, 0, C, h, hs), stride, b, row0, T, hs);
    stage_rows<F, HSP>(do_rows, ROWS, dout + (size_t)h * hs, (size_t)C, b, row0, T, hs);
    // D of the lane's two rows, from the fp32 do and o: the group's four lanes take every
    // fourth channel, then sum.
    float d_lo = 0.0f, d_hi = 0.0f;
    for (int c = q; c < hs; c += 4) {
        size_t lo = ((size_t)b * T + t_lo) * C + (size_t)h * hs + c, hi = ((size_t)b * T + t_hi) * C + (size_t)h * hs + c;
        if (t_lo < T) d_lo += dout[lo] * widen(out[lo]);
        if (t_hi < T) d_hi += dout[hi] * widen(out[hi]);
    }
    const float D_lo = group_sum(d_lo), D_hi = group_sum(d_hi);
    if (q == 0 && t_lo < T) D[(size_t)bh * T + t_lo] = D_lo;
    if (q == 0 && t_hi < T) D[(size_t)bh * T + t_hi] = D_hi;
    const float lse_lo = t_lo < T ? lse[(size_t)bh * T + t_lo] : 0.0f;
    const float lse_hi = t_hi < T ? lse[(size_t)bh * T + t_hi] : 0.0f;

    float dq[HSP / 8][4];
    zero(dq);
    for (int u0 = 0; u0 <= last; u0 += TILE) {
        __syncthreads();
        stage_rows<F, HSP>(k_rows, TILE, qkv_part(qkv, 1, C, h, hs), stride, b, u0, T, hs);
        stage_rows<F, HSP>(v_rows, TILE, qkv_part(qkv, 2, C, h, hs), stride, b, u0, T, hs);
        __syncthreads();
        transpose<F, HSP>(k_cols, k_rows);
        __syncthreads();

        float s[TILE / 8][4], dp[TILE / 8][4];  // S = Q K^T, dP = dO V^T
        zero(s), zero(dp);
        mma_rows<F, TILE, HSP>(s, q_rows + 16 * warp * LDR, LDR, k_rows, LDR);
        mma_rows<F, TILE, HSP>(dp, do_rows + 16 * warp * LDR, LDR, v_rows, LDR);
#pragma unroll
        for (int j = 0; j < TILE / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {  // dS = P (dP - D), in place of S (rounded by mma_held)
                int u = u0 + 8 * j + 2 * q + e;
                float p_lo = t_lo < T && u <= t_lo ? expf(s[j][e] * scale - lse_lo) : 0.0f;
                float p_hi = t_hi < T && u <= t_hi ? expf(s[j][2 + e] * scale - lse_hi) : 0.0f;
                s[j][e] = p_lo * (dp[j][e] - D_lo);
                s[j][2 + e] = p_hi * (dp[j][2 + e] - D_hi);
            }
        mma_held<F, HSP, TILE>(dq, s, k_cols, LDC);  // dQ += dS K
    }
#pragma unroll
    for (int n = 0; n < HSP / 8; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            int c = 8 * n + 2 * q + e;
            if (c >= hs) continue;
            if (t_lo < T) dqkv[((size_t)b * T + t_lo) * 3 * C + (size_t)h * hs + c] = dq[n][e] * scale;
            if (t_hi < T) dqkv[((size_t)b * T + t_hi) * 3 * C + (size_t)h * hs + c] = dq[n][2 + e] * scale;
        }
}

// ---- backward, step 2, by key rows: dv_u = sum_t p[t,u] do_t, dk_u = scale sum_t ds[t,u] q_t ----
// over the queries t >= u, the warp's 16 keys as rows: S^T = K Q^T and dP^T = V dO^T.

template <typename F, int HSP, typename In>
__global__ void __launch_bounds__(THREADS) backward_dkv_kernel(float *dqkv, const float *D, const float *dout,
                                                               const In *qkv, const float *lse, int T, int C, int NH,
                                                               float scale) {
    typedef typename F::Elem E;
    constexpr int LDR = F::template ldr<HSP>(), LDC = F::LDC;
    TC_SHARED(smem_bytes);
    E *smem = reinterpret_cast<E *>(smem_bytes);
    E *k_rows = smem, *v_rows = k_rows + ROWS * LDR, *q_rows = v_rows + ROWS * LDR;
    E *do_rows = q_rows + TILE * LDR, *q_cols = do_rows + TILE * LDR, *do_cols = q_cols + HSP * LDC;
    float *lse_tile = reinterpret_cast<float *>(do_cols + HSP * LDC), *D_tile = lse_tile + TILE;
    const int bh = blockIdx.x, b = bh / NH, h = bh % NH, hs = C / NH;
    const int warp = threadIdx.x / 32, g = threadIdx.x % 32 / 4, q = threadIdx.x % 4;
    const int row0 = blockIdx.y * ROWS;  // the first keys see the most queries: they start first
    const int u_lo = row0 + 16 * warp + g, u_hi = u_lo + 8;  // this lane's two keys
    const size_t stride = 3 * (size_t)C;

    stage_rows<F, HSP>(k_rows, ROWS, qkv_part(qkv, 1, C, h, hs), stride, b, row0, T, hs);
    stage_rows<F, HSP>(v_rows, ROWS, qkv_part(qkv, 2, C, h, hs), stride, b, row0, T, hs);
    float dk[HSP / 8][4], dv[HSP / 8][4];
    zero(dk), zero(dv);
    for (int t0 = row0; t0 < T; t0 += TILE) {  // queries before row0 see none of these keys
        __syncthreads();
        stage_rows<F, HSP>(q_rows, TILE, qkv_part(qkv, 0, C, h, hs), stride, b, t0, T, hs);
        stage_rows<F, HSP>(do_rows, TILE, dout + (size_t)h * hs, (size_t)C, b, t0, T, hs);
        for (int i = threadIdx.x; i < TILE; i += THREADS) {
            bool in = t0 + i < T;
            lse_tile[i] = in ? lse[(size_t)bh * T + t0 + i] : 0.0f;
            D_tile[i] = in ? D[(size_t)bh * T + t0 + i] : 0.0f;
        }
        __syncthreads();
        transpose<F, HSP>(q_cols, q_rows);
        transpose<F, HSP>(do_cols, do_rows);
        __syncthreads();

        float st[TILE / 8][4], dpt[TILE / 8][4];  // S^T = K Q^T, dP^T = V dO^T: keys by queries
        zero(st), zero(dpt);
        mma_rows<F, TILE, HSP>(st, k_rows + 16 * warp * LDR, LDR, q_rows, LDR);
        mma_rows<F, TILE, HSP>(dpt, v_rows + 16 * warp * LDR, LDR, do_rows, LDR);
#pragma unroll
        for (int j = 0; j < TILE / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {  // P^T in place of S^T, dS^T in place of dP^T
                int i = 8 * j + 2 * q + e, t = t0 + i;
                float p_lo = u_lo < T && t < T && t >= u_lo ? expf(st[j][e] * scale - lse_tile[i]) : 0.0f;
                float p_hi = u_hi < T && t < T && t >= u_hi ? expf(st[j][2 + e] * scale - lse_tile[i]) : 0.0f;
                st[j][e] = p_lo, dpt[j][e] = p_lo * (dpt[j][e] - D_tile[i]);
                st[j][2 + e] = p_hi, dpt[j][2 + e] = p_hi * (dpt[j][2 + e] - D_tile[i]);
            }
        mma_held<F, HSP, TILE>(dv, st, do_cols, LDC);  // dV += P^T dO
        mma_held<F, HSP, TILE>(dk, dpt, q_cols, LDC);  // dK += dS^T Q
    }
#pragma unroll
    for (int n = 0; n < HSP / 8; n++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            int c = 8 * n + 2 * q + e;
            if (c >= hs) continue;
            if (u_lo < T) {
                float *row = dqkv + ((size_t)b * T + u_lo) * 3 * C + C + (size_t)h * hs;
                row[c] = dk[n][e] * scale, row[C + c] = dv[n][e];
            }
            if (u_hi < T) {
                float *row = dqkv + ((size_t)b * T + u_hi) * 3 * C + C + (size_t)h * hs;
                row[c] = dk[n][2 + e] * scale, row[C + c] = dv[n][2 + e];
            }
        }
}

}  // namespace tc

#endif
