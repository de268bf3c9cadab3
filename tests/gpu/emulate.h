// emulate.h — runs CUDA kernels written for flash_tc.cuh on the CPU, so that a machine with no
// GPU (CI) checks them: the same source, compiled by the host's C++ compiler.
//
// Defines: SHARDLAB_EMULATE, the CUDA words those kernels use (threadIdx, blockIdx, gridDim,
//          __syncthreads, __shfl_xor_sync, __float_as_uint, uint2, uint4, __global__ and the
//          like), the tensor cores' instructions they call (emu_mma_bf16, emu_mma_tf32,
//          emu_mma_tf32x3, emu_tf32_round), emu_shared(), and emu_launch().
//
// The model. A block's threads are fibers, one per CUDA thread, on one OS thread, one block at
// a time: each runs until it waits at a barrier, then the next runs. __syncthreads() is a
// barrier over the block; a warp's shuffle and its matrix instruction are barriers over its 32
// threads, around a shared slot per lane:
//
//     __shfl_xor_sync(v, m)   each lane puts v in its slot; wait; read slot[lane ^ m]
//     mma.sync (c += a b)     each lane puts its fragments of A and B in its slots; wait; each
//                             lane rebuilds A and B from all 32 lanes' fragments, by the layout
//                             PTX's ISA documents for the instruction, and computes its own
//                             four floats of C
//
// Which fiber runs next: the lowest-numbered one that can (thread 0 first, as soon as the
// barrier it waits at opens). So thread 0 runs as far ahead of the others as the barriers let
// it: a missing __syncthreads() between some threads writing shared memory and thread 0 reading
// it shows, as a read of memory no thread has written yet. Shared memory starts as all-ones
// bytes (a NaN in fp32, bf16 and TF32), so such a read spreads NaNs into the results. A barrier
// some threads never reach (a deadlock on a GPU) stops the program with a message. What this
// cannot show: speed, and whether the hardware's layouts are the ones documented
// (test_cuda_ops, on a GPU, shows that).
#ifndef SHARDLAB_EMULATE_H
#define SHARDLAB_EMULATE_H

#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#endif

#define SHARDLAB_EMULATE 1
#define __global__
#define __device__
#define __host__
#define __launch_bounds__(...)
#define __align__(n)

using std::max;
using std::min;

static const unsigned FULL_MASK = 0xffffffffu;

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
    dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
struct uint2 {
    unsigned x, y;
};
struct alignas(16) uint4 {
    unsigned x, y, z, w;
};

// One CUDA thread: its context and stack (one of emu_stacks()), and what it waits for.
struct EmuFiber {
    ucontext_t context;
    char *stack = nullptr;
    unsigned exchanges = 0;  // its warp's exchanges so far (emu_deposit, __shfl_xor_sync)
    bool done = false;
    int waits_on = NONE;  // BLOCK, a warp's number, or NONE
    unsigned waits_gen = 0;
    enum { NONE = -2, BLOCK = -1 };
};

// A block's threads and what they share: shared memory, the barriers, the warps' slots.
struct EmuBlock {
    enum { MAX_WARPS = 32, STACK = 256 * 1024 };
    std::vector<unsigned char> shared;
    std::vector<EmuFiber> fibers;
    int current = 0;
    ucontext_t scheduler;
    std::function<void()> kernel;
    // Barriers: how many have arrived, and the generation (one more each time it opens).
    int block_count = 0, warp_count[MAX_WARPS] = {};
    unsigned block_gen = 0, warp_gen[MAX_WARPS] = {};
    // The warps' slots, two of each: a warp's k-th exchange (shuffle or matrix instruction)
    // uses set k % 2, so a lane may fill the next set while others still read this one, and
    // one barrier an exchange suffices (none can fill a set again before all have passed the
    // barrier that follows their reading it).
    float shfl[2][MAX_WARPS][32];
    uint32_t a[2][MAX_WARPS][32][8], b[2][MAX_WARPS][32][4];  // room for 3xTF32's two halves

    EmuBlock(int threads, size_t shared_bytes) : shared(shared_bytes + 16, 0xff), fibers(threads) {}
    unsigned gen_of(int which) const { return which == EmuFiber::BLOCK ? block_gen : warp_gen[which]; }
    bool runnable(const EmuFiber &f) const {
        return !f.done && (f.waits_on == EmuFiber::NONE || gen_of(f.waits_on) != f.waits_gen);
    }
};

static dim3 threadIdx, blockIdx, gridDim, blockDim;  // threadIdx: the running fiber's
static EmuBlock *emu_block;

static inline EmuFiber &emu_fiber() { return emu_block->fibers[emu_block->current]; }

// Switching between the scheduler's stack and a fiber's, told to AddressSanitizer (which
// must know which stack is live): emu_enter() from the scheduler into fiber f, emu_leave()
// from the running fiber back (for good when it is done).
#ifdef EMU_ASAN
static const void *emu_scheduler_stack;  // the bounds of the scheduler's stack, as ASan gave them
static size_t emu_scheduler_stack_size;
#endif

static inline void emu_enter(EmuBlock &blk, EmuFiber &f) {
#ifdef EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f.stack, EmuBlock::STACK);
    swapcontext(&blk.scheduler, &f.context);
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#else
    swapcontext(&blk.scheduler, &f.context);
#endif
}

static inline void emu_leave(bool done) {
    EmuFiber &f = emu_fiber();
#ifdef EMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(done ? nullptr : &fake, emu_scheduler_stack, emu_scheduler_stack_size);
    swapcontext(&f.context, &emu_block->scheduler);
    __sanitizer_finish_switch_fiber(fake, &emu_scheduler_stack, &emu_scheduler_stack_size);
#else
    (void)done;
    swapcontext(&f.context, &emu_block->scheduler);
#endif
}

// Wait at a barrier over the block (which = BLOCK) or over warp `which`'s 32 threads.
static inline void emu_barrier(int which) {
    EmuBlock *blk = emu_block;
    int n = which == EmuFiber::BLOCK ? (int)blk->fibers.size() : 32;
    int &count = which == EmuFiber::BLOCK ? blk->block_count : blk->warp_count[which];
    unsigned &gen = which == EmuFiber::BLOCK ? blk->block_gen : blk->warp_gen[which];
    if (++count == n) {  // the last to arrive opens it, and goes on
        count = 0, gen++;
        return;
    }
    emu_fiber().waits_on = which, emu_fiber().waits_gen = gen;
    emu_leave(false);
    emu_fiber().waits_on = EmuFiber::NONE;
}

static inline unsigned char *emu_shared() {
    uintptr_t p = (uintptr_t)emu_block->shared.data();
    return (unsigned char *)((p + 15) / 16 * 16);  // 16-byte aligned, as a GPU's
}

static inline void __syncthreads() { emu_barrier(EmuFiber::BLOCK); }

static inline int emu_warp() { return (int)threadIdx.x / 32; }
static inline int emu_lane() { return (int)threadIdx.x % 32; }

static inline float __shfl_xor_sync(unsigned mask, float v, int lane_mask) {
    (void)mask;
    EmuBlock *blk = emu_block;
    int w = emu_warp(), l = emu_lane(), set = emu_fiber().exchanges++ % 2;
    blk->shfl[set][w][l] = v;
    emu_barrier(w);
    return blk->shfl[set][w][l ^ lane_mask];
}

static inline float emu_float(uint32_t bits) {
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}
static inline float __uint_as_float(uint32_t bits) { return emu_float(bits); }
static inline uint32_t __float_as_uint(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

// Rounded to TF32 as cvt.rna.tf32.f32: to nearest, ties away from zero, 13 low bits cleared;
// infinities and NaNs as they are.
static inline uint32_t emu_tf32_round(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u) return u;
    return (u + 0x1000u) & 0xffffe000u;
}

// A matrix instruction's exchange: each lane's fragments into its slots (a2, b2: a second
// pair after the first, for the three instructions of one 3xTF32 product, exchanged once);
// when all 32 are in, the set every lane reads A and B from.
static inline int emu_deposit(const uint32_t (&a)[4], const uint32_t (&b)[2], const uint32_t *a2 = nullptr,
                              const uint32_t *b2 = nullptr) {
    EmuBlock *blk = emu_block;
    int w = emu_warp(), l = emu_lane(), set = emu_fiber().exchanges++ % 2;
    memcpy(blk->a[set][w][l], a, sizeof a);
    memcpy(blk->b[set][w][l], b, sizeof b);
    if (a2) memcpy(blk->a[set][w][l] + 4, a2, sizeof a), memcpy(blk->b[set][w][l] + 2, b2, sizeof b);
    emu_barrier(w);
    return set;
}

// The lane's floats of C, c[2r + j] at row g + 8r and column 2q + j, plus its rows of A
// (ra[r]) times its columns of B (cb[.][j]), summed in fp32.
template <int K>
static void emu_product(float (&c)[4], const float (&ra)[2][K], const float (&cb)[K][2]) {
    for (int i = 0; i < 4; i++) {
        float sum = c[i];
        for (int k = 0; k < K; k++) sum += ra[i / 2][k] * cb[k][i % 2];
        c[i] = sum;
    }
}

static inline float emu_lo(uint32_t x) { return emu_float(x << 16); }          // a word's bf16s
static inline float emu_hi(uint32_t x) { return emu_float(x & 0xffff0000u); }
static inline float emu_tf32(uint32_t x) { return emu_float(x & 0xffffe000u); }  // its 13 low bits ignored

// mma.sync.m16n8k16 .bf16: two elements a word, the lower index in the low half. Lane (g, q)
// holds A's rows g and g + 8 at columns 2q, 2q + 1 (a[0], a[1]) and 2q + 8, 2q + 9 (a[2],
// a[3]); B's column g at rows 2q, 2q + 1 (b[0]) and 2q + 8, 2q + 9 (b[1]). So a lane's rows
// of A are in its group's four lanes, and column n of B in group n's.
static inline void emu_mma_bf16(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    int set = emu_deposit(a, b), w = emu_warp(), g = emu_lane() / 4, q = emu_lane() % 4;
    float ra[2][16], cb[16][2];
    for (int p = 0; p < 4; p++) {
        const uint32_t *la = emu_block->a[set][w][4 * g + p];
        for (int r = 0; r < 2; r++) {  // a[r]: row g + 8r, columns 2p, 2p+1; a[2 + r]: 2p+8, 2p+9
            ra[r][2 * p] = emu_lo(la[r]), ra[r][2 * p + 1] = emu_hi(la[r]);
            ra[r][2 * p + 8] = emu_lo(la[2 + r]), ra[r][2 * p + 9] = emu_hi(la[2 + r]);
        }
        for (int j = 0; j < 2; j++) {  // column 2q + j: group 2q + j's lanes
            const uint32_t *lb = emu_block->b[set][w][4 * (2 * q + j) + p];
            cb[2 * p][j] = emu_lo(lb[0]), cb[2 * p + 1][j] = emu_hi(lb[0]);
            cb[2 * p + 8][j] = emu_lo(lb[1]), cb[2 * p + 9][j] = emu_hi(lb[1]);
        }
    }
    emu_product<16>(c, ra, cb);
}

// mma.sync.m16n8k8 .tf32: one element a word. Lane (g, q) holds A's rows g and g + 8 at column
// q (a[0], a[1]) and q + 4 (a[2], a[3]); B's column g at rows q (b[0]) and q + 4 (b[1]).
// From the slots of an exchanged set, A's first (ia = 0) or second (ia = 4) fragments and B's
// (ib = 0 or 2), as this lane's C needs them.
static inline void emu_gather_tf32(float (&ra)[2][8], float (&cb)[8][2], int set, int ia, int ib) {
    int w = emu_warp(), g = emu_lane() / 4, q = emu_lane() % 4;
    for (int p = 0; p < 4; p++) {
        const uint32_t *la = emu_block->a[set][w][4 * g + p] + ia;
        for (int r = 0; r < 2; r++) ra[r][p] = emu_tf32(la[r]), ra[r][p + 4] = emu_tf32(la[2 + r]);
        for (int j = 0; j < 2; j++) {
            const uint32_t *lb = emu_block->b[set][w][4 * (2 * q + j) + p] + ib;
            cb[p][j] = emu_tf32(lb[0]), cb[p + 4][j] = emu_tf32(lb[1]);
        }
    }
}

static inline void emu_mma_tf32(float (&c)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    int set = emu_deposit(a, b);
    float ra[2][8], cb[8][2];
    emu_gather_tf32(ra, cb, set, 0, 0);
    emu_product<8>(c, ra, cb);
}

// The three instructions of a 3xTF32 product (flash_tc.cuh's Tf32x3::mma), in its order:
// small A by big B, big A by small B, big A by big B; the same sums as three emu_mma_tf32
// calls, with one exchange instead of three (a third of the emulated warps' switching).
static inline void emu_mma_tf32x3(float (&c)[4], const uint32_t (&a_big)[4], const uint32_t (&a_small)[4],
                                  const uint32_t (&b_big)[2], const uint32_t (&b_small)[2]) {
    int set = emu_deposit(a_big, b_big, a_small, b_small);
    float ra[2][8], cb[8][2];
    emu_gather_tf32(ra, cb, set, 4, 0), emu_product<8>(c, ra, cb);
    emu_gather_tf32(ra, cb, set, 0, 2), emu_product<8>(c, ra, cb);
    emu_gather_tf32(ra, cb, set, 0, 0), emu_product<8>(c, ra, cb);
}

// A fiber's body: the kernel, then back to the scheduler for good.
static void emu_fiber_main() {
#ifdef EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &emu_scheduler_stack, &emu_scheduler_stack_size);
#endif
    emu_block->kernel();
    emu_fiber().done = true;
    emu_leave(true);
}

// The fibers' stacks, one per thread of a block, made once and lent to every block after
// (a block's fibers are all done before the next block starts). A fiber never returns from
// its first frame, so ASan is told its stack is clean again before the next one takes it.
static char *emu_stack(int thread) {
    static std::vector<std::unique_ptr<char[]>> stacks;
    while ((int)stacks.size() <= thread) stacks.emplace_back(new char[EmuBlock::STACK]);
#ifdef EMU_ASAN
    __asan_unpoison_memory_region(stacks[thread].get(), EmuBlock::STACK);
#endif
    return stacks[thread].get();
}

// Fiber f, ready to start the kernel on stack. (Out of line, as are emu_run's switches:
// getcontext and swapcontext return twice, and the callers' locals stay their own.)
__attribute__((noinline)) static void emu_make_fiber(EmuFiber &f, char *stack) {
    f.stack = stack;
    getcontext(&f.context);
    f.context.uc_stack.ss_sp = f.stack, f.context.uc_stack.ss_size = EmuBlock::STACK;
    f.context.uc_link = nullptr;
    makecontext(&f.context, emu_fiber_main, 0);
}

// Runs a block's fibers until all are done: the lowest-numbered runnable one each time.
__attribute__((noinline)) static void emu_run(EmuBlock &blk) {
    for (size_t t = 0; t < blk.fibers.size(); t++) emu_make_fiber(blk.fibers[t], emu_stack((int)t));
    const int threads = (int)blk.fibers.size();
    for (;;) {
        int next = -1, done = 0;
        for (int t = 0; t < threads; t++) {
            done += blk.fibers[t].done;
            if (next < 0 && blk.runnable(blk.fibers[t])) next = t;
        }
        if (done == threads) return;
        if (next < 0) {
            fprintf(stderr, "emulate.h: block (%u, %u): %d threads wait at barriers the others never reach "
                            "(a deadlock on a GPU)\n", blockIdx.x, blockIdx.y, threads - done);
            abort();
        }
        blk.current = next, threadIdx = dim3((unsigned)next);
        emu_enter(blk, blk.fibers[next]);
    }
}

// kernel() on every thread of every block of grid, threads a block, shared_bytes of dynamic
// shared memory each, one block after another.
template <typename Kernel>
static void emu_launch(dim3 grid, int threads, size_t shared_bytes, Kernel kernel) {
    gridDim = grid, blockDim = dim3((unsigned)threads);
    for (unsigned y = 0; y < grid.y; y++)
        for (unsigned x = 0; x < grid.x; x++) {
            EmuBlock blk(threads, shared_bytes);
            blk.kernel = kernel;
            emu_block = &blk, blockIdx = dim3(x, y);
            emu_run(blk);
        }
}

#endif
