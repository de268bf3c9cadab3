// test_cuda_ops.c — every entry of cuda_ops() (labs/common/cuda/ops.cu) against ops_cpu.
//
// What it proves:
//   - each GPU kernel computes what its CPU twin computes, on random inputs of awkward sizes
//     (37 rows, 48 channels, 53 outputs, 3 heads of 16, T = 19 and 67: nothing a multiple
//     of 32, and both fewer and more keys than a warp has lanes);
//   - the contract of ops.h, not just the formula: outputs that are OVERWRITTEN start from
//     garbage (7.0) and must not keep it; outputs that ACCUMULATE start from random values
//     and must keep them; NULL outputs are skipped; gelu_backward may write over dout;
//   - the host-side answers: crossentropy_forward's summed loss and sum_of_squares' double;
//   - AdamW over several steps (bias corrections change with t);
//   - determinism: an op run twice on the same inputs gives the same bits (replicas are
//     compared by hashing their parameters, so this is what the graders rely on);
//   - the device functions of gpu.h the ops rest on: zero-filled allocation, copies both
//     ways, pointer kinds, memory figures;
//   - flash attention (flash.cu) against the CPU's flash and naive attention, at every head size
//     the GPU kernels instantiate;
//   - the Linear forward's bias added by cuBLASLt's epilogue (lt.cu) and the other way, each
//     against the CPU and the other, aligned and not, in fp32, TF32 and bf16;
//   - LayerNorm's output rounded to bf16 as it is written (layernorm_forward_bf16);
//   - the Linear layers with bf16 operands, the input given in fp32 or as bf16 (--mixed's kept
//     activations: linear_forward_bf16, linear_backward_bf16), the output in bf16 too
//     (linear_forward_bf16_out, both ways), and GELU on a kept bf16 input (gelu_forward_bf16,
//     gelu_backward_bf16);
//   - the bf16 kernels (to_bf16, from_bf16, add_bf16, acc_bf16) give the CPU's bits, on every
//     bf16 pattern, on fp32 patterns at and around every halfway point, and on random ones;
//   - the param_hash computed on the device (hash.cu) is the CPU's (hash.c) for the same bytes,
//     at every awkward length and alignment, for one buffer and for lists of them;
//   - ring attention's kernels (ring.cu) against the cp lab's CPU block (labs/18-cp/ring_attention.c):
//     a zig-zag rank's queries against two blocks merged, their backward, and the copies.
// Without a usable GPU it checks only that cuBLAS loads (no GPU needed), prints one "ok -
// skipped" line and exits 0, so it can run anywhere.
//
// Tolerances. fp32 keeps 24 bits (one rounding: 6e-8 relative). The GPU adds in another order
// (cuBLAS tiles, warp trees), fuses a*b+c into one rounding, and its expf/tanhf are within 2
// units in the last place rather than glibc's 1. We compare a whole buffer at once: the
// largest |gpu - cpu| relative to the largest |cpu| ("normwise"), because an element that
// cancels to near zero has a meaningless relative error of its own. Bounds, with K terms
// summed and inputs of size ~1:
//   TOL_ELEMENTWISE 1e-5  one formula per element (GELU, softmax, the loss gradient): a few
//                         roundings, plus libm differences that tanh's 1 - th^2 can amplify
//                         about tenfold.
//   TOL_SUM         1e-5  one sum of K <= 67 terms in a different order: the worst case is
//                         K * 6e-8 = 4e-6 of the sum of |terms|, typically sqrt(K) * 6e-8.
//   TOL_CHAIN       1e-4  backward passes that chain several such sums (LayerNorm's dx,
//                         attention's ds then dq, dk): the worst cases multiply.
// A wrong index, a missing term or an overwrite where the contract says accumulate is off
// by order 1, so even 1e-4 tells right from wrong by four orders of magnitude. Where the GPU
// adds exactly the CPU's terms in the CPU's order (the token embedding's gradient) or does
// one rounding per element (residual add, scaling, embedding lookup, the bf16 kernels), we
// demand the same bits.
//
// The sums over rows (bias gradients, LayerNorm's dw and db) add in a tree of partial sums
// (ops.cu, "Column sums"). Over 8195 rows a normwise tolerance is either loose enough to miss
// a dropped row or tight enough to fail on the CPU's own rounding, so test_column_sums holds
// each column to the exact sum (in double) with the tree's worst-case bound: a sum whose
// terms pass through at most d additions is within d * 2^-24 of sum |terms| (Higham,
// "Accuracy and Stability of Numerical Algorithms", 4.2); a dropped row (terms ~0.5) is over
// 20 times that bound at 8195 rows, thousands of times at 37.
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"
#include "common/cuda/gpu.h"
#include "common/harness/check.h"
#include "common/harness/hash.h"
#include "common/model/ops.h"
#include "common/model/rng.h"
#include "18-cp/ring_block.h"

#define TOL_ELEMENTWISE 1e-5
#define TOL_SUM 1e-5
#define TOL_CHAIN 1e-4
#define TOL_TF32_OUT 5e-3
#define TOL_TF32_GRAD 2e-2
#define TOL_BF16_OUT 1e-2
#define TOL_BF16_GRAD 2e-2
#define NAIVE_BF16 5.0

enum { ROWS = 37, CH = 48, OC = 53, V = 256 };
static const float GARBAGE = 7.0f;  // what an overwritten output holds before the call

static const Ops *gpu;

// ---------------------------------------------------------------------------------------
// Buffers: every one a test makes is freed together at its end.
// ---------------------------------------------------------------------------------------

enum { MAX_BUFFERS = 64 };
static void *host_buffers[MAX_BUFFERS], *device_buffers[MAX_BUFFERS];
static int nhost, ndevice;

static void free_buffers(void) {
    while (nhost > 0) free(host_buffers[--nhost]);
    while (ndevice > 0) cuda_free(device_buffers[--ndevice]);
}

static void *host_bytes(size_t bytes) {
    if (nhost == MAX_BUFFERS) die("free_buffers() at the end of each test", "too many host buffers");
    return host_buffers[nhost++] = malloc_check(bytes);
}

static float *host_floats(size_t n) { return host_bytes(n * sizeof(float)); }

static float *random_floats(size_t n, uint64_t seed, double lo, double hi) {
    float *x = host_floats(n);
    Rng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) x[i] = (float)(lo + (hi - lo) * rng_uniform(&r));
    return x;
}

static float *filled(size_t n, float value) {
    float *x = host_floats(n);
    for (size_t i = 0; i < n; i++) x[i] = value;
    return x;
}

static void *device_copy_of(const void *host, size_t bytes) {
    if (ndevice == MAX_BUFFERS) die("free_buffers() at the end of each test", "too many device buffers");
    void *d = cuda_alloc(bytes);
    if (!d) die("is another process using the GPU's memory?", "cuda_alloc(%zu bytes) failed", bytes);
    cuda_copy(d, host, bytes);
    return device_buffers[ndevice++] = d;
}

static float *to_device(const float *host, size_t n) { return device_copy_of(host, n * sizeof(float)); }

static void *host_copy_of(const void *dev, size_t bytes) {
    void *h = host_bytes(bytes);
    cuda_copy(h, dev, bytes);
    return h;
}

static float *to_host(const float *dev, size_t n) { return host_copy_of(dev, n * sizeof(float)); }

// ---------------------------------------------------------------------------------------
// Comparisons
// ---------------------------------------------------------------------------------------

// Normwise: max |gpu - cpu| <= tol * max |cpu|, and every GPU value finite.
static void expect_close(const char *what, const float *cpu, const float *gpu_dev, size_t n, double tol) {
    const float *g = to_host(gpu_dev, n);
    double max_diff = 0, max_ref = 0;
    int finite = 1;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(g[i])) finite = 0;
        double d = fabs((double)g[i] - (double)cpu[i]);
        if (d > max_diff) max_diff = d;
        if (fabs(cpu[i]) > max_ref) max_ref = fabs(cpu[i]);
    }
    EXPECT(finite && max_diff <= tol * max_ref, "%s: max |gpu - cpu| %.3g <= %.0e * max |cpu| %.3g%s", what, max_diff,
           tol, max_ref, finite ? "" : " (the GPU gave a NaN or inf)");
}

static size_t differing_floats(const float *a, const float *b, size_t n) {
    size_t count = 0;
    for (size_t i = 0; i < n; i++) count += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return count;
}

static void expect_same_bits(const char *what, const float *cpu, const float *gpu_dev, size_t n) {
    size_t count = differing_floats(cpu, to_host(gpu_dev, n), n);
    EXPECT(count == 0, "%s: the CPU's bits (%zu of %zu floats differ)", what, count, n);
}

// Two GPU runs of the same op on the same inputs.
static void expect_same_run(const char *what, const float *dev_a, const float *dev_b, size_t n) {
    size_t count = differing_floats(to_host(dev_a, n), to_host(dev_b, n), n);
    EXPECT(count == 0, "%s: a second run gives the same bits (%zu of %zu floats differ)", what, count, n);
}

// ---------------------------------------------------------------------------------------
// The tests, one per group of ops
// ---------------------------------------------------------------------------------------

static void test_device(void) {
    float *ones = filled(1000, 1.0f), *d = to_device(ones, 1000);
    EXPECT(cuda_is_device_ptr(d) && !cuda_is_device_ptr(ones), "cuda_is_device_ptr tells device from host memory");
    float *fresh = cuda_alloc(1000 * sizeof(float));
    EXPECT(fresh != NULL, "cuda_alloc of 4000 bytes");
    if (fresh) {
        expect_same_bits("cuda_alloc gives zero-filled memory", filled(1000, 0.0f), fresh, 1000);
        cuda_free(fresh);
    }
    cuda_memset0(d, 500 * sizeof(float));
    const float *h = to_host(d, 1000);
    EXPECT(h[0] == 0.0f && h[499] == 0.0f && h[500] == 1.0f, "cuda_memset0 zeroes exactly the bytes asked for");
    size_t free_bytes = 0, total_bytes = 0;
    int info = cuda_mem_info(&free_bytes, &total_bytes);
    EXPECT(info == 0 && free_bytes > 0 && free_bytes <= total_bytes, "cuda_mem_info: %zu of %zu bytes free",
           free_bytes, total_bytes);
    EXPECT(strcmp(gpu->name, "cuda") == 0, "cuda_ops() is the table named \"cuda\" (got \"%s\")", gpu->name);
    free_buffers();
}

// bf16_in = 1: --mixed's bf16 operands (ops.h). Both sides round the operands with bf16.h's
// bits and a product of two bf16s is exact in fp32, so the GPU's tensor cores and the CPU's
// loops still differ only in the order of their fp32 sums: the same tolerance as fp32. And
// the rounding must really happen on the GPU: its bf16 result is far from the CPU's fp32 one.
static void test_linear(int bf16_in) {
    const int N = ROWS, IC = CH;
    const char *p = bf16_in ? "bf16 operands: " : "";
    float *inp = random_floats((size_t)N * IC, 1, -1, 1), *w = random_floats((size_t)OC * IC, 2, -1, 1);
    float *bias = random_floats(OC, 3, -1, 1), *out = host_floats((size_t)N * OC);
    size_t ns = linear_scratch_floats(N, IC, OC, bf16_in);
    float *scratch = host_floats(ns), *d_scratch = to_device(filled(ns, GARBAGE), ns);
    float *d_inp = to_device(inp, (size_t)N * IC), *d_w = to_device(w, (size_t)OC * IC),
          *d_bias = to_device(bias, OC);
    float *d_out = to_device(filled((size_t)N * OC, GARBAGE), (size_t)N * OC);
    char what[160];

    ops_cpu.linear_forward(out, inp, w, bias, N, IC, OC, bf16_in, scratch);
    gpu->linear_forward(d_out, d_inp, d_w, d_bias, N, IC, OC, bf16_in, d_scratch);
    snprintf(what, sizeof what, "%slinear_forward with bias (out overwritten)", p);
    expect_close(what, out, d_out, (size_t)N * OC, TOL_SUM);
    if (bf16_in) {
        float *fp32_out = host_floats((size_t)N * OC), *wt = host_floats((size_t)IC * OC);
        ops_cpu.linear_forward(fp32_out, inp, w, bias, N, IC, OC, 0, wt);
        const float *g = to_host(d_out, (size_t)N * OC);
        double worst = 0;
        for (size_t i = 0; i < (size_t)N * OC; i++) worst = fmax(worst, fabs(g[i] - fp32_out[i]));
        EXPECT(worst > 1e-3, "bf16 operands: the GPU rounds them (its result is %.3g from fp32's, more than 1e-3)",
               worst);
    }
    ops_cpu.linear_forward(out, inp, w, NULL, N, IC, OC, bf16_in, scratch);
    gpu->linear_forward(d_out, d_inp, d_w, NULL, N, IC, OC, bf16_in, d_scratch);
    snprintf(what, sizeof what, "%slinear_forward without bias", p);
    expect_close(what, out, d_out, (size_t)N * OC, TOL_SUM);

    // Backward: dinp starts as garbage (overwritten), dweight and dbias as random values
    // (accumulated). A second GPU run starts from the same values.
    float *dout = random_floats((size_t)N * OC, 4, -1, 1), *dinp = filled((size_t)N * IC, GARBAGE);
    float *dw = random_floats((size_t)OC * IC, 5, -1, 1), *db = random_floats(OC, 6, -1, 1);
    float *d_dout = to_device(dout, (size_t)N * OC);
    float *d_dinp[2], *d_dw[2], *d_db[2];
    for (int run = 0; run < 2; run++) {
        d_dinp[run] = to_device(dinp, (size_t)N * IC);
        d_dw[run] = to_device(dw, (size_t)OC * IC);
        d_db[run] = to_device(db, OC);
        gpu->linear_backward(d_dinp[run], d_dw[run], d_db[run], d_dout, d_inp, d_w, N, IC, OC, bf16_in, d_scratch);
    }
    ops_cpu.linear_backward(dinp, dw, db, dout, inp, w, N, IC, OC, bf16_in, scratch);
    snprintf(what, sizeof what, "%slinear_backward dinp (overwritten)", p);
    expect_close(what, dinp, d_dinp[0], (size_t)N * IC, TOL_SUM);
    snprintf(what, sizeof what, "%slinear_backward dweight (added to its previous value)", p);
    expect_close(what, dw, d_dw[0], (size_t)OC * IC, TOL_SUM);
    snprintf(what, sizeof what, "%slinear_backward dbias (added to its previous value)", p);
    expect_close(what, db, d_db[0], OC, TOL_SUM);
    expect_same_run("linear_backward dbias", d_db[0], d_db[1], OC);
    expect_same_run("linear_backward dinp", d_dinp[0], d_dinp[1], (size_t)N * IC);
    expect_same_run("linear_backward dweight", d_dw[0], d_dw[1], (size_t)OC * IC);

    // NULL dinp and dbias are skipped; dweight accumulates a second time.
    ops_cpu.linear_backward(NULL, dw, NULL, dout, inp, w, N, IC, OC, bf16_in, scratch);
    gpu->linear_backward(NULL, d_dw[0], NULL, d_dout, d_inp, d_w, N, IC, OC, bf16_in, d_scratch);
    snprintf(what, sizeof what, "%slinear_backward with dinp and dbias NULL: dweight accumulates again", p);
    expect_close(what, dw, d_dw[0], (size_t)OC * IC, TOL_SUM);
    free_buffers();
}

// The Linear forward's two ways of adding its bias: cuBLASLt's epilogue as the product is
// stored (lt.cu, the default) and the bias written across out first, the product added to it
// (cuda_set_bias_epilogue(0)). Each against the CPU's, and against the other (the same
// operands, the product summed by another kernel: TOL_CHAIN covers sums of up to 3072 terms
// of products of size 1; TF32's tolerance where the kernels take TF32, which they may round
// or truncate), in fp32, TF32 and bf16 operands, at test_linear's awkward shape, at
// a tiny one, and at GPT-2 small's c_attn and c_proj shapes cut to 256 tokens (the epilogue
// kernels a step runs); with every pointer 256-byte aligned (cudaMalloc's) and with every one
// a float past that (the epilogue must pick a kernel that needs no more). Out starts as
// garbage (beta = 0 must not read it); a second run gives the same bits.
static void test_bias_epilogue(void) {
    const int shapes[][3] = {{ROWS, CH, OC}, {4, 5, 3}, {256, 768, 2304}, {256, 3072, 768}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int N = shapes[s][0], IC = shapes[s][1], OC_ = shapes[s][2];
        size_t ni = (size_t)N * IC, nw = (size_t)OC_ * IC, no = (size_t)N * OC_;
        // One float more than needed each, so that `skew` 1 moves every pointer off alignment.
        float *inp = random_floats(ni + 1, 11, -1, 1), *w = random_floats(nw + 1, 12, -1, 1);
        float *bias = random_floats((size_t)OC_ + 1, 13, -1, 1);
        float *d_inp = to_device(inp, ni + 1), *d_w = to_device(w, nw + 1), *d_bias = to_device(bias, (size_t)OC_ + 1);
        float *d_out[3];
        for (int i = 0; i < 3; i++) d_out[i] = to_device(filled(no + 1, GARBAGE), no + 1);
        size_t ns = linear_scratch_floats(N, IC, OC_, 1);
        float *scratch = host_floats(ns), *d_scratch = to_device(filled(ns, GARBAGE), ns);
        float *out = host_floats(no);
        for (int format = 0; format < 3; format++) {  // fp32, TF32, bf16 operands
            int bf16_in = format == 2;
            const char *name = format == 0 ? "fp32" : format == 1 ? "TF32" : "bf16 operands";
            double tol_cpu = format == 1 ? TOL_TF32_OUT : TOL_CHAIN;
            for (int skew = 0; skew < 2; skew++) {
                ops_cpu.linear_forward(out, inp + skew, w + skew, bias + skew, N, IC, OC_, bf16_in, scratch);
                cuda_set_tf32(format == 1);
                for (int way = 0; way < 3; way++) {  // the epilogue twice, then the bias written first
                    cuda_set_bias_epilogue(way < 2);
                    gpu->linear_forward(d_out[way] + skew, d_inp + skew, d_w + skew, d_bias + skew, N, IC, OC_,
                                        bf16_in, d_scratch);
                }
                cuda_set_bias_epilogue(1);
                cuda_set_tf32(0);
                char where[120], what[200];
                snprintf(where, sizeof where, "linear_forward %dx%d->%d, %s, %s", N, IC, OC_, name,
                         skew ? "pointers a float off alignment" : "pointers aligned");
                snprintf(what, sizeof what, "%s: the bias by epilogue, against the CPU", where);
                expect_close(what, out, d_out[0] + skew, no, tol_cpu);
                snprintf(what, sizeof what, "%s: the bias written first, against the CPU", where);
                expect_close(what, out, d_out[2] + skew, no, tol_cpu);
                const float *other = to_host(d_out[2] + skew, no);
                snprintf(what, sizeof what, "%s: the two ways agree", where);
                expect_close(what, other, d_out[0] + skew, no, tol_cpu);  // TF32: the kernels may round differently
                snprintf(what, sizeof what, "%s, by epilogue", where);
                expect_same_run(what, d_out[0] + skew, d_out[1] + skew, no);
            }
        }
        free_buffers();
    }
}

// linear_forward_bf16 and linear_backward_bf16: the input given as bf16 (an activation kept so
// under --mixed), made on each device by its to_bf16 (the same bits: test_bf16); against the
// CPU's, with test_linear(1)'s tolerance.
static void test_linear_kept(void) {
    const int N = ROWS, IC = CH;
    size_t ni = (size_t)N * IC, no = (size_t)N * OC, nw = (size_t)OC * IC, ns = linear_scratch_floats(N, IC, OC, 1);
    float *inp = random_floats(ni, 1, -1, 1), *w = random_floats(nw, 2, -1, 1), *bias = random_floats(OC, 3, -1, 1);
    float *dout = random_floats(no, 4, -1, 1), *out = host_floats(no), *dinp = host_floats(ni);
    float *dw = random_floats(nw, 5, -1, 1), *db = random_floats(OC, 6, -1, 1);
    float *scratch = host_floats(ns), *d_scratch = to_device(filled(ns, GARBAGE), ns);
    bf16 *inp16 = (bf16 *)host_floats(ni / 2 + 1), *d_inp16 = (bf16 *)to_device(filled(ni / 2 + 1, 0), ni / 2 + 1);
    float *d_inp = to_device(inp, ni), *d_w = to_device(w, nw), *d_bias = to_device(bias, OC);
    float *d_dout = to_device(dout, no), *d_out = to_device(filled(no, GARBAGE), no);
    float *d_dinp = to_device(filled(ni, GARBAGE), ni), *d_dw = to_device(dw, nw), *d_db = to_device(db, OC);
    ops_cpu.to_bf16(inp16, inp, ni);
    gpu->to_bf16(d_inp16, d_inp, ni);
    ops_cpu.linear_forward_bf16(out, inp16, w, bias, N, IC, OC, scratch);
    gpu->linear_forward_bf16(d_out, d_inp16, d_w, d_bias, N, IC, OC, d_scratch);
    expect_close("linear_forward_bf16 (the input kept as bf16; out overwritten)", out, d_out, no, TOL_SUM);
    ops_cpu.linear_backward_bf16(dinp, dw, db, dout, inp16, w, N, IC, OC, scratch);
    gpu->linear_backward_bf16(d_dinp, d_dw, d_db, d_dout, d_inp16, d_w, N, IC, OC, d_scratch);
    expect_close("linear_backward_bf16 dinp (overwritten)", dinp, d_dinp, ni, TOL_SUM);
    expect_close("linear_backward_bf16 dweight (added to its previous value)", dw, d_dw, nw, TOL_SUM);
    expect_close("linear_backward_bf16 dbias (added to its previous value)", db, d_db, OC, TOL_SUM);
    free_buffers();
}

// linear_forward_bf16_out (--mixed's c_attn and c_fc, ops.h): the output in bf16 with the bias
// rounded to bf16, by cuBLASLt's epilogue and by the other way (the bias's bf16s written
// first, then cublasGemmEx with a bf16 C), each against the CPU's. The sums differ by the
// order of their terms, so their roundings by a bf16 step where a sum straddles a boundary:
// within TOL_BF16_STEP of the largest; the epilogue twice for the same bits. Shapes:
// test_linear's, a tiny one, c_attn's and c_fc's cut to 256 tokens.
#define TOL_BF16_STEP (1.0 / 128)
static void test_linear_bf16_out(void) {
    const int shapes[][3] = {{ROWS, CH, OC}, {4, 5, 3}, {256, 768, 2304}, {256, 768, 3072}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        const int N = shapes[s][0], IC = shapes[s][1], OC_ = shapes[s][2];
        size_t ni = (size_t)N * IC, nw = (size_t)OC_ * IC, no = (size_t)N * OC_;
        size_t ns = linear_scratch_floats(N, IC, OC_, 1);
        float *inp = random_floats(ni, 21, -1, 1), *w = random_floats(nw, 22, -1, 1);
        float *bias = random_floats((size_t)OC_, 23, -1, 1), *scratch = host_floats(ns), *out = host_floats(no);
        bf16 *inp16 = (bf16 *)host_floats(ni / 2 + 1), *out16 = (bf16 *)host_floats(no / 2 + 1);
        ops_cpu.to_bf16(inp16, inp, ni);
        ops_cpu.linear_forward_bf16_out(out16, inp16, w, bias, N, IC, OC_, scratch);
        ops_cpu.from_bf16(out, out16, no);
        bf16 *d_inp16 = (bf16 *)device_copy_of(inp16, ni * sizeof(bf16));
        float *d_w = to_device(w, nw), *d_bias = to_device(bias, (size_t)OC_);
        float *d_scratch = to_device(filled(ns, GARBAGE), ns), *d_wide[3];
        for (int way = 0; way < 3; way++) {  // the epilogue twice, then the bias written first
            bf16 *d_out16 = (bf16 *)to_device(filled(no / 2 + 1, GARBAGE), no / 2 + 1);
            cuda_set_bias_epilogue(way < 2);
            gpu->linear_forward_bf16_out(d_out16, d_inp16, d_w, d_bias, N, IC, OC_, d_scratch);
            d_wide[way] = to_device(filled(no, GARBAGE), no);
            gpu->from_bf16(d_wide[way], d_out16, no);
        }
        cuda_set_bias_epilogue(1);
        char what[160];
        snprintf(what, sizeof what, "linear_forward_bf16_out %dx%d->%d, the bias by epilogue, against the CPU", N, IC,
                 OC_);
        expect_close(what, out, d_wide[0], no, TOL_BF16_STEP);
        snprintf(what, sizeof what, "linear_forward_bf16_out %dx%d->%d, the bias written first, against the CPU", N,
                 IC, OC_);
        expect_close(what, out, d_wide[2], no, TOL_BF16_STEP);
        snprintf(what, sizeof what, "linear_forward_bf16_out %dx%d->%d, by epilogue", N, IC, OC_);
        expect_same_run(what, d_wide[0], d_wide[1], no);
        free_buffers();
    }
}

// --mixed's GELU on c_fc's output kept in bf16 (the same bf16s on both devices): GELU of the
// widened input rounded to bf16 may differ from the CPU's by one bf16 step where the fp32
// GELUs (tanhf on each side) straddle a rounding boundary: within 2^-8 of the largest; the
// backward from the same kept input, as the fp32 one.
static void test_gelu_bf16(void) {
    const int n = 1001;
    float *x = random_floats(n, 32, -6, 6), *dout = random_floats(n, 33, -1, 1), *dinp = host_floats(n);
    float *out = host_floats(n);
    bf16 *out16 = (bf16 *)host_floats(n / 2 + 1), *kept16 = (bf16 *)host_floats(n / 2 + 1);
    ops_cpu.to_bf16(kept16, x, n);
    float *d_dout = to_device(dout, n), *d_dinp = to_device(filled(n, GARBAGE), n);
    float *d_out = to_device(filled(n, GARBAGE), n);
    bf16 *d_out16 = (bf16 *)to_device(filled(n / 2 + 1, GARBAGE), n / 2 + 1);
    bf16 *d_kept16 = (bf16 *)device_copy_of(kept16, n * sizeof(bf16));
    ops_cpu.gelu_forward_bf16(out16, kept16, n);
    gpu->gelu_forward_bf16(d_out16, d_kept16, n);
    ops_cpu.from_bf16(out, out16, n), gpu->from_bf16(d_out, d_out16, n);
    expect_close("gelu_forward_bf16: GELU of the bf16 input, in bf16", out, d_out, n, 1.0 / 256);
    ops_cpu.gelu_backward_bf16(dinp, kept16, dout, n);
    gpu->gelu_backward_bf16(d_dinp, d_kept16, d_dout, n);
    expect_close("gelu_backward_bf16: the slope at the kept input", dinp, d_dinp, n, TOL_ELEMENTWISE);
    gpu->gelu_backward_bf16(d_dout, d_kept16, d_dout, n);  // dinp is dout: ops.h allows it
    expect_same_run("gelu_backward_bf16 written over its own dout gives what a separate output gets", d_dinp, d_dout,
                    n);
    free_buffers();
}

static void test_layernorm(void) {
    const int N = ROWS;
    size_t n = (size_t)N * CH;
    // Rows with a mean far from zero, so forgetting to subtract it shows.
    float *inp = random_floats(n, 10, 1, 5), *w = random_floats(CH, 11, 0.5, 1.5), *b = random_floats(CH, 12, -1, 1);
    float *out = host_floats(n), *mean = host_floats(N), *rstd = host_floats(N);
    float *d_inp = to_device(inp, n), *d_w = to_device(w, CH), *d_b = to_device(b, CH);
    float *d_out = to_device(filled(n, GARBAGE), n), *d_mean = to_device(filled(N, GARBAGE), N);
    float *d_rstd = to_device(filled(N, GARBAGE), N);
    ops_cpu.layernorm_forward(out, mean, rstd, inp, w, b, N, CH);
    gpu->layernorm_forward(d_out, d_mean, d_rstd, d_inp, d_w, d_b, N, CH);
    expect_close("layernorm_forward out", out, d_out, n, TOL_SUM);
    expect_close("layernorm_forward mean", mean, d_mean, N, TOL_SUM);
    expect_close("layernorm_forward rstd", rstd, d_rstd, N, TOL_SUM);
    // --mixed's: the output rounded to bf16 as it is written, against the GPU's own fp32 output
    // rounded by to_bf16 (the same kernel's arithmetic: the same bits) and the CPU's within one
    // bf16 step (2^-8 of the largest), mean and rstd the fp32 kernel's bits.
    float *d_mean16 = to_device(filled(N, GARBAGE), N), *d_rstd16 = to_device(filled(N, GARBAGE), N);
    float *d_out16w = to_device(filled(n, GARBAGE), n), *d_ref16w = to_device(filled(n, GARBAGE), n);
    bf16 *d_out16 = (bf16 *)to_device(filled(n / 2 + 1, GARBAGE), n / 2 + 1);
    bf16 *d_ref16 = (bf16 *)to_device(filled(n / 2 + 1, GARBAGE), n / 2 + 1);
    gpu->layernorm_forward_bf16(d_out16, d_mean16, d_rstd16, d_inp, d_w, d_b, N, CH);
    gpu->to_bf16(d_ref16, d_out, n);
    gpu->from_bf16(d_out16w, d_out16, n), gpu->from_bf16(d_ref16w, d_ref16, n);
    expect_same_run("layernorm_forward_bf16 out: layernorm_forward's rounded by to_bf16", d_ref16w, d_out16w, n);
    expect_same_run("layernorm_forward_bf16 mean: layernorm_forward's", d_mean, d_mean16, N);
    expect_same_run("layernorm_forward_bf16 rstd: layernorm_forward's", d_rstd, d_rstd16, N);
    bf16 *out16 = (bf16 *)host_floats(n / 2 + 1);
    float *out16w = host_floats(n), *mean16 = host_floats(N), *rstd16 = host_floats(N);
    ops_cpu.layernorm_forward_bf16(out16, mean16, rstd16, inp, w, b, N, CH);
    ops_cpu.from_bf16(out16w, out16, n);
    expect_close("layernorm_forward_bf16 out against the CPU's (one bf16 step)", out16w, d_out16w, n, 1.0 / 256);

    // Backward from the CPU's statistics, so both sides see the same inputs. dinp, dw and db
    // all ACCUMULATE: they start from random values.
    float *dout = random_floats(n, 13, -1, 1), *dinp = random_floats(n, 14, -1, 1);
    float *dw = random_floats(CH, 15, -1, 1), *db = random_floats(CH, 16, -1, 1);
    float *d_dout = to_device(dout, n), *d_mean_cpu = to_device(mean, N), *d_rstd_cpu = to_device(rstd, N);
    float *d_dinp[2], *d_dw[2], *d_db[2];
    for (int run = 0; run < 2; run++) {
        d_dinp[run] = to_device(dinp, n);
        d_dw[run] = to_device(dw, CH);
        d_db[run] = to_device(db, CH);
        gpu->layernorm_backward(d_dinp[run], d_dw[run], d_db[run], d_dout, d_inp, d_w, d_mean_cpu, d_rstd_cpu, N, CH);
    }
    ops_cpu.layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, N, CH);
    expect_close("layernorm_backward dinp (accumulated)", dinp, d_dinp[0], n, TOL_CHAIN);
    expect_close("layernorm_backward dw (accumulated)", dw, d_dw[0], CH, TOL_SUM);
    expect_close("layernorm_backward db (accumulated)", db, d_db[0], CH, TOL_SUM);
    expect_same_run("layernorm_backward db", d_db[0], d_db[1], CH);
    expect_same_run("layernorm_backward dinp", d_dinp[0], d_dinp[1], n);
    expect_same_run("layernorm_backward dw", d_dw[0], d_dw[1], CH);
    free_buffers();
}

// The column sums' tree (ops.cu): rows y, y+8, ... of a slab of 256 in each of 8 row lanes,
// the lanes added, then the slabs; the initial value added last. The additions any one term
// passes through, at most: its lane's, the lanes', the slabs', the initial value's.
static double tree_depth(int N) {
    int slab = N < 256 ? N : 256;
    return (double)((slab + 7) / 8 + 8 + (N + 255) / 256 + 1);
}

// Each column of gpu_dev against the exact sum init[o] + sum_n terms[n, o] (double), within
// depth * 2^-24 of |init| + sum |terms| (plus `extra` roundings per term, e.g. a product's).
static void expect_column_sums(const char *what, const float *gpu_dev, const float *init, const double *exact,
                               const double *abs_sum, int N, int cols, double extra) {
    const float *g = to_host(gpu_dev, (size_t)cols);
    double units = tree_depth(N) + extra, worst = 0;
    int bad = -1;
    for (int o = 0; o < cols; o++) {
        double err = fabs((double)g[o] - exact[o]), bound = units * 0x1p-24 * (fabs(init[o]) + abs_sum[o]);
        if (bound > 0 && err / bound > worst) worst = err / bound;
        if (!(err <= bound) && bad < 0) bad = o;
    }
    EXPECT(bad < 0, "%s (N=%d, %d columns): every column within %.0f roundings of the exact sum (worst: %.2f of "
           "its bound%s)", what, N, cols, units, worst, bad < 0 ? "" : "; some column is outside it");
}

// linear_backward's dbias and layernorm_backward's dw and db at shapes that end mid-strip
// and mid-slab, one row, one column, and many slabs.
static void test_column_sums(int N, int C) {
    size_t n = (size_t)N * C;
    float *dout = random_floats(n, 90 + (uint64_t)N, -1, 1), *inp = random_floats(n, 91, 1, 5);
    float *mean = random_floats((size_t)N, 92, 1, 5), *rstd = random_floats((size_t)N, 93, 0.5, 2);
    float *init_w = random_floats((size_t)C, 94, -1, 1), *init_b = random_floats((size_t)C, 95, -1, 1);
    double *exact_w = host_bytes((size_t)C * sizeof(double)), *exact_b = host_bytes((size_t)C * sizeof(double));
    double *abs_w = host_bytes((size_t)C * sizeof(double)), *abs_b = host_bytes((size_t)C * sizeof(double));
    for (int o = 0; o < C; o++) {
        exact_w[o] = init_w[o], exact_b[o] = init_b[o];
        abs_w[o] = abs_b[o] = 0;
    }
    for (int r = 0; r < N; r++)
        for (int o = 0; o < C; o++) {
            // xhat in float, as the kernel computes it; the product and the sums exactly.
            float xhat = (inp[(size_t)r * C + o] - mean[r]) * rstd[r];
            double dy = dout[(size_t)r * C + o], prod = dy * (double)xhat;
            exact_b[o] += dy, abs_b[o] += fabs(dy);
            exact_w[o] += prod, abs_w[o] += fabs(prod);
        }
    float *d_dout = to_device(dout, n), *d_inp = to_device(inp, n), *d_mean = to_device(mean, (size_t)N);
    float *d_rstd = to_device(rstd, (size_t)N), *d_w = to_device(filled((size_t)C, 1.0f), (size_t)C);
    float *d_dinp = to_device(filled(n, 0.0f), n);
    float *d_dw[2], *d_db[2];
    for (int run = 0; run < 2; run++) {
        d_dw[run] = to_device(init_w, (size_t)C);
        d_db[run] = to_device(init_b, (size_t)C);
        gpu->layernorm_backward(d_dinp, d_dw[run], d_db[run], d_dout, d_inp, d_w, d_mean, d_rstd, N, C);
    }
    // dw's terms carry two roundings of their own: xhat's (the kernel may fuse it
    // differently) and the product's.
    expect_column_sums("layernorm_backward dw", d_dw[0], init_w, exact_w, abs_w, N, C, 2);
    expect_column_sums("layernorm_backward db", d_db[0], init_b, exact_b, abs_b, N, C, 0);
    expect_same_run("layernorm_backward dw (tree sums)", d_dw[0], d_dw[1], (size_t)C);
    expect_same_run("layernorm_backward db (tree sums)", d_db[0], d_db[1], (size_t)C);

    // A Linear with IC = 1: its bias gradient is dout's column sums (dweight is not tested here).
    float *d_x = to_device(filled((size_t)N, 1.0f), (size_t)N), *d_weight = to_device(filled((size_t)C, 0.5f), (size_t)C);
    float *d_dweight = to_device(filled((size_t)C, 0.0f), (size_t)C), *d_dbias = to_device(init_b, (size_t)C);
    gpu->linear_backward(NULL, d_dweight, d_dbias, d_dout, d_x, d_weight, N, 1, C, 0, NULL);
    expect_column_sums("linear_backward dbias", d_dbias, init_b, exact_b, abs_b, N, C, 0);
    free_buffers();
}

// Twice: T = 19 and hs = 16 (each lane of a warp owns at most one key, half the lanes own no
// channel), then T = 67 and hs = 48 (lanes loop over keys and channels, with ragged ends).
static char attention_shape[64];  // "T=19, hs=16", named in each line this test prints

static const char *with_shape(const char *what) {
    static char line[160];
    snprintf(line, sizeof line, "%s (%s)", what, attention_shape);
    return line;
}

static void test_attention(int B, int T, int C, int NH) {
    snprintf(attention_shape, sizeof attention_shape, "B=%d, T=%d, hs=%d", B, T, C / NH);
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, natt = (size_t)B * NH * T * T;
    float *qkv = random_floats(nqkv, 20, -2, 2), *out = host_floats(nout), *att = host_floats(natt);
    float *d_qkv = to_device(qkv, nqkv), *d_out = to_device(filled(nout, GARBAGE), nout);
    float *d_att = to_device(filled(natt, GARBAGE), natt);
    ops_cpu.attention_forward(out, att, qkv, B, T, C, NH);
    gpu->attention_forward(d_out, d_att, d_qkv, B, T, C, NH);
    expect_close(with_shape("attention_forward out"), out, d_out, nout, TOL_SUM);
    expect_close(with_shape("attention_forward att (softmax probabilities)"), att, d_att, natt, TOL_ELEMENTWISE);
    const float *g_att = to_host(d_att, natt);
    size_t nonzero_future = 0;  // causal: a token never attends to a later one
    for (size_t r = 0; r < (size_t)B * NH * T; r++)
        for (int u = (int)(r % T) + 1; u < T; u++) nonzero_future += g_att[r * T + u] != 0.0f;
    EXPECT(nonzero_future == 0, "attention_forward att is exactly 0 above the diagonal (%s; %zu entries are not)",
           attention_shape, nonzero_future);

    // Backward from the CPU's probabilities; dqkv is OVERWRITTEN, so it starts as garbage.
    float *dout = random_floats(nout, 21, -1, 1), *dqkv = host_floats(nqkv), *scratch = host_floats(2 * T);
    float *d_dout = to_device(dout, nout), *d_att_cpu = to_device(att, natt);
    float *d_dqkv[2];
    for (int run = 0; run < 2; run++) {
        d_dqkv[run] = to_device(filled(nqkv, GARBAGE), nqkv);
        gpu->attention_backward(d_dqkv[run], d_dout, d_qkv, d_att_cpu, B, T, C, NH, NULL);
    }
    ops_cpu.attention_backward(dqkv, dout, qkv, att, B, T, C, NH, scratch);
    expect_close(with_shape("attention_backward dqkv (overwritten: dq, dk and dv)"), dqkv, d_dqkv[0], nqkv,
                 TOL_CHAIN);
    expect_same_run(with_shape("attention_backward dqkv"), d_dqkv[0], d_dqkv[1], nqkv);
    free_buffers();
}

// Flash attention against the CPU's flash (the same algorithm) and the CPU's naive attention
// (the same function): out and lse, then the backward pass from the CPU's out and lse. The
// shapes reach every padded head size the GPU kernels instantiate (hs 1 to 1000: 16, 64,
// 128, 256 and 1024, with the lanes-per-row groups of 1 to 32 they bring), T = 1, and T past
// one block of rows (128) and past one tile of keys (64), none of them a multiple of either.
// tol_out and tol_grad: TOL_SUM and TOL_CHAIN in fp32 (3xTF32 included: test_flash_tc measures
// it against the exact values as close as the CPU's fp32); with TF32 (cuda_set_tf32(1): the tensor
// cores' kernels) the products keep 10 bits of each operand's mantissa, 5e-4 relative, so a
// sum of them is off by about that and a chain of them by a few times it: TOL_TF32_OUT and
// TOL_TF32_GRAD. With bf16 operands (bf16_in = 1, --mixed: flash_tc.cu) the CPU rounds the
// same operands (and P against the same tiles' running max), so the two differ by their sums'
// order, and where that puts an fp32 value on the other side of a bf16 rounding boundary (a
// term off by 2^-8 of itself): TOL_BF16_OUT and TOL_BF16_GRAD; from naive attention on the
// unrounded operands, NAIVE_BF16 times that. A wrong index or a missing tile is still off by
// order 1.
static void test_flash_attention_tol(int B, int T, int C, int NH, int bf16_in, double tol_out, double tol_grad,
                                     const char *what) {
    snprintf(attention_shape, sizeof attention_shape, "%s, B=%d, T=%d, hs=%d", what, B, T, C / NH);
    int hs = C / NH;
    size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    size_t natt = (size_t)B * NH * T * T;
    float *qkv = random_floats(nqkv, 40 + (uint64_t)T, -2, 2), *out = host_floats(nout), *lse = host_floats(nlse);
    float *naive_out = host_floats(nout), *att = host_floats(natt);
    float *d_qkv = to_device(qkv, nqkv), *d_out = to_device(filled(nout, GARBAGE), nout);
    float *d_lse = to_device(filled(nlse, GARBAGE), nlse);
    ops_cpu.flash_attention_forward(out, lse, qkv, B, T, C, NH, bf16_in);
    ops_cpu.attention_forward(naive_out, att, qkv, B, T, C, NH);
    gpu->flash_attention_forward(d_out, d_lse, d_qkv, B, T, C, NH, bf16_in);
    expect_close(with_shape("flash_attention_forward out vs the CPU's flash"), out, d_out, nout, tol_out);
    // The naive kernels take the operands unrounded: with bf16_in, NAIVE_BF16 times further.
    const double vs_naive = bf16_in ? NAIVE_BF16 : 1.0;
    expect_close(with_shape("flash_attention_forward out vs the CPU's naive attention"), naive_out, d_out, nout,
                 tol_out * vs_naive);
    expect_close(with_shape("flash_attention_forward lse (row log-sum-exp)"), lse, d_lse, nlse, tol_out);

    // Backward from the CPU's out and lse; dqkv is OVERWRITTEN, so it starts as garbage.
    float *dout = random_floats(nout, 41, -1, 1), *dqkv = host_floats(nqkv), *naive_dqkv = host_floats(nqkv);
    float *scratch = host_floats(FLASH_SCRATCH_FLOATS(T, hs) + 2 * (size_t)T);
    float *d_dout = to_device(dout, nout), *d_out_cpu = to_device(out, nout), *d_lse_cpu = to_device(lse, nlse);
    float *d_dqkv[2];
    for (int run = 0; run < 2; run++) {
        d_dqkv[run] = to_device(filled(nqkv, GARBAGE), nqkv);
        gpu->flash_attention_backward(d_dqkv[run], d_dout, d_qkv, d_out_cpu, d_lse_cpu, B, T, C, NH, bf16_in, NULL);
    }
    ops_cpu.flash_attention_backward(dqkv, dout, qkv, out, lse, B, T, C, NH, bf16_in, scratch);
    ops_cpu.attention_backward(naive_dqkv, dout, qkv, att, B, T, C, NH, scratch);
    expect_close(with_shape("flash_attention_backward dqkv vs the CPU's flash (overwritten: dq, dk and dv)"), dqkv,
                 d_dqkv[0], nqkv, tol_grad);
    expect_close(with_shape("flash_attention_backward dqkv vs the CPU's naive attention"), naive_dqkv, d_dqkv[0],
                 nqkv, tol_grad * vs_naive);
    expect_same_run(with_shape("flash_attention_backward dqkv"), d_dqkv[0], d_dqkv[1], nqkv);
    if (bf16_in) {  // --mixed's backward from q, k, v and o kept as bf16s, made by each device's to_bf16
        bf16 *qkv16 = (bf16 *)host_floats(nqkv / 2 + 1), *out16 = (bf16 *)host_floats(nout / 2 + 1);
        bf16 *d_qkv16 = (bf16 *)to_device(filled(nqkv / 2 + 1, 0), nqkv / 2 + 1);
        bf16 *d_out16 = (bf16 *)to_device(filled(nout / 2 + 1, 0), nout / 2 + 1);
        ops_cpu.to_bf16(qkv16, qkv, nqkv), ops_cpu.to_bf16(out16, out, nout);
        gpu->to_bf16(d_qkv16, d_qkv, nqkv), gpu->to_bf16(d_out16, d_out_cpu, nout);
        float *d_kept = to_device(filled(nqkv, GARBAGE), nqkv);
        gpu->flash_attention_backward_bf16(d_kept, d_dout, d_qkv16, d_out16, d_lse_cpu, B, T, C, NH, NULL);
        ops_cpu.flash_attention_backward_bf16(dqkv, dout, qkv16, out16, lse, B, T, C, NH, scratch);
        expect_close(with_shape("flash_attention_backward_bf16 dqkv (from the kept bf16 q, k, v and o) vs the CPU's"),
                     dqkv, d_kept, nqkv, tol_grad);
        // The forward pass from the kept q, k, v into a kept o: the GPU's fp32-input o (above,
        // from the same operands) rounded by to_bf16, bit for bit, with its lse; and the CPU's.
        bf16 *d_o16 = (bf16 *)to_device(filled(nout / 2 + 1, GARBAGE), nout / 2 + 1);
        bf16 *d_want16 = (bf16 *)to_device(filled(nout / 2 + 1, GARBAGE), nout / 2 + 1);
        float *d_lse16 = to_device(filled(nlse, GARBAGE), nlse);
        float *d_o16w = to_device(filled(nout, GARBAGE), nout), *d_want16w = to_device(filled(nout, GARBAGE), nout);
        gpu->flash_attention_forward_bf16(d_o16, d_lse16, d_qkv16, B, T, C, NH);
        gpu->to_bf16(d_want16, d_out, nout);
        gpu->from_bf16(d_o16w, d_o16, nout), gpu->from_bf16(d_want16w, d_want16, nout);
        expect_same_run(with_shape("flash_attention_forward_bf16 o: the fp32-input kernel's, rounded"), d_want16w,
                        d_o16w, nout);
        expect_same_run(with_shape("flash_attention_forward_bf16 lse: the fp32-input kernel's"), d_lse, d_lse16, nlse);
        float *o16w = host_floats(nout);
        ops_cpu.flash_attention_forward_bf16(out16, lse, qkv16, B, T, C, NH);
        ops_cpu.from_bf16(o16w, out16, nout);
        expect_close(with_shape("flash_attention_forward_bf16 o vs the CPU's"), o16w, d_o16w, nout, tol_out);
    }
    free_buffers();
}

// fp32 both ways: as 3xTF32 on the tensor cores (the default, for heads up to 128 channels on
// compute capability 8.0 on) and on the ordinary cores (cuda_set_fp32_tc(0)); the same bounds.
static void test_flash_attention(int B, int T, int C, int NH) {
    test_flash_attention_tol(B, T, C, NH, 0, TOL_SUM, TOL_CHAIN, "flash fp32");
    cuda_set_fp32_tc(0);
    test_flash_attention_tol(B, T, C, NH, 0, TOL_SUM, TOL_CHAIN, "flash fp32, ordinary cores");
    cuda_set_fp32_tc(1);
}


static void test_elementwise(void) {
    const int n = 1001;
    // GELU over [-6, 6]: both tails, where tanh saturates and 1 - th^2 cancels.
    float *x = random_floats(n, 30, -6, 6), *y = random_floats(n, 31, -1, 1), *out = host_floats(n);
    float *d_x = to_device(x, n), *d_y = to_device(y, n), *d_out = to_device(filled(n, GARBAGE), n);
    ops_cpu.gelu_forward(out, x, n);
    gpu->gelu_forward(d_out, d_x, n);
    expect_close("gelu_forward", out, d_out, n, TOL_ELEMENTWISE);
    ops_cpu.gelu_backward(out, x, y, n);
    gpu->gelu_backward(d_out, d_x, d_y, n);
    expect_close("gelu_backward", out, d_out, n, TOL_ELEMENTWISE);
    float *d_inplace = to_device(y, n);  // dinp is dout: ops.h allows it
    gpu->gelu_backward(d_inplace, d_x, d_inplace, n);
    expect_same_run("gelu_backward written over its own dout gives what a separate output gets", d_out, d_inplace, n);

    ops_cpu.residual_add(out, x, y, n);
    gpu->residual_add(d_out, d_x, d_y, n);
    expect_same_bits("residual_add (one rounding per element)", out, d_out, n);
    gpu->residual_add(d_x, d_x, d_y, n);  // out is a: allowed
    expect_same_bits("residual_add written over its first input", out, d_x, n);

    ops_cpu.scale_floats(y, n, 0.3f);
    gpu->scale_floats(d_y, n, 0.3f);
    expect_same_bits("scale_floats", y, d_y, n);
    gpu->copy(d_out, d_y, n);
    expect_same_bits("copy", y, d_out, n);
    gpu->zero(d_out, n);
    expect_same_bits("zero", filled(n, 0.0f), d_out, n);
    free_buffers();
}

static void test_embedding(void) {
    enum { B = 2, T = 19 };
    size_t nout = (size_t)B * T * CH;
    // Tokens from a small range, so rows repeat and their gradients must add up; one 255, the
    // last row of the table.
    uint8_t tokens[B * T];
    Rng r;
    rng_seed(&r, 40);
    for (int i = 0; i < B * T; i++) tokens[i] = (uint8_t)(rng_u64(&r) % 7);
    tokens[5] = 255;
    float *wte = random_floats((size_t)V * CH, 41, -1, 1), *wpe = random_floats((size_t)T * CH, 42, -1, 1);
    float *out = host_floats(nout);
    float *d_wte = to_device(wte, (size_t)V * CH), *d_wpe = to_device(wpe, (size_t)T * CH);
    float *d_out = to_device(filled(nout, GARBAGE), nout);
    ops_cpu.embedding_forward(out, tokens, wte, wpe, B, T, CH);
    gpu->embedding_forward(d_out, tokens, d_wte, d_wpe, B, T, CH);  // tokens stay in host memory
    expect_same_bits("embedding_forward (one addition per element)", out, d_out, nout);

    // dwte and dwpe ACCUMULATE: they start from the random tables above.
    float *dout = random_floats(nout, 43, -1, 1), *d_dout = to_device(dout, nout);
    gpu->embedding_backward(d_wte, d_wpe, d_dout, tokens, B, T, CH);
    ops_cpu.embedding_backward(wte, wpe, dout, tokens, B, T, CH);
    expect_same_bits("embedding_backward dwte: each row's tokens added in the CPU's order", wte, d_wte,
                     (size_t)V * CH);
    expect_close("embedding_backward dwpe: the batch's rows added up", wpe, d_wpe, (size_t)T * CH, TOL_SUM);
    free_buffers();
}

static void test_crossentropy(void) {
    const int N = ROWS;
    size_t n = (size_t)N * V;
    uint8_t targets[ROWS];
    Rng r;
    rng_seed(&r, 50);
    for (int i = 0; i < N; i++) targets[i] = (uint8_t)(rng_u64(&r) % V);
    float *logits = random_floats(n, 51, -4, 4);
    float *d_probs[2];
    double loss_gpu[2];
    for (int run = 0; run < 2; run++) {
        d_probs[run] = to_device(logits, n);
        loss_gpu[run] = gpu->crossentropy_forward(d_probs[run], targets, N, V);
    }
    double loss_cpu = ops_cpu.crossentropy_forward(logits, targets, N, V);  // logits -> probs
    expect_close("crossentropy_forward probabilities (in place)", logits, d_probs[0], n, TOL_ELEMENTWISE);
    // Each row's loss is log(sum) + max - z: the sum of exps carries the only fp32 rounding
    // difference (~1e-7 of it, so ~1e-7 absolute in the log), and the rows add in double.
    EXPECT(fabs(loss_gpu[0] - loss_cpu) <= 1e-6 * fabs(loss_cpu),
           "crossentropy_forward returns the summed loss: %.12g vs %.12g (relative 1e-6)", loss_gpu[0], loss_cpu);
    EXPECT(memcmp(&loss_gpu[0], &loss_gpu[1], sizeof(double)) == 0,
           "crossentropy_forward: a second run returns the same bits");
    expect_same_run("crossentropy_forward probabilities", d_probs[0], d_probs[1], n);

    float scale = 1.0f / (float)N, *dlogits = host_floats(n);
    float *d_probs_cpu = to_device(logits, n), *d_dlogits = to_device(filled(n, GARBAGE), n);
    ops_cpu.crossentropy_backward(dlogits, logits, targets, N, V, scale);
    gpu->crossentropy_backward(d_dlogits, d_probs_cpu, targets, N, V, scale);
    expect_close("crossentropy_backward (overwritten)", dlogits, d_dlogits, n, TOL_ELEMENTWISE);
    free_buffers();
}

static void test_optimizer(void) {
    const size_t n = 4099;
    const AdamW opt = {.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
    float *p = random_floats(n, 60, -1, 1), *m = filled(n, 0.0f), *v = filled(n, 0.0f);
    float *d_p = to_device(p, n), *d_m = to_device(m, n), *d_v = to_device(v, n);
    for (int64_t t = 1; t <= 5; t++) {  // new gradients every step; every 97th exactly zero
        float *g = random_floats(n, 60 + (uint64_t)t, -1, 1);
        for (size_t i = 0; i < n; i += 97) g[i] = 0.0f;
        float *d_g = to_device(g, n);
        ops_cpu.adamw_update(&opt, t, p, g, m, v, n);
        gpu->adamw_update(&opt, t, d_p, d_g, d_m, d_v, n);
    }
    // Per step, p, m and v each differ from the CPU's by a rounding or two, where a*b+c is
    // fused (on the CPU, fusing or not moves them by 1.2e-7 of their size after these 5
    // steps), so we allow 1e-6. A missing bias correction is off by 4e-2.
    expect_close("adamw_update params after 5 steps", p, d_p, n, 1e-6);
    expect_close("adamw_update m after 5 steps", m, d_m, n, 1e-6);
    expect_close("adamw_update v after 5 steps", v, d_v, n, 1e-6);

    // sum_of_squares: every square of a float is exact in double, so only the order of the
    // additions differs: at most n * 1.1e-16 relative, 1e-11 for 100003 terms.
    const size_t sizes[] = {5, 8192, 100003};  // one partial block, exactly one, many and ragged
    for (int k = 0; k < 3; k++) {
        float *x = random_floats(sizes[k], 70 + (uint64_t)k, -3, 3), *d_x = to_device(x, sizes[k]);
        double cpu = ops_cpu.sum_of_squares(x, sizes[k]);
        double g1 = gpu->sum_of_squares(d_x, sizes[k]), g2 = gpu->sum_of_squares(d_x, sizes[k]);
        EXPECT(fabs(g1 - cpu) <= 1e-10 * cpu, "sum_of_squares of %zu floats: %.17g vs %.17g (relative 1e-10)",
               sizes[k], g1, cpu);
        EXPECT(memcmp(&g1, &g2, sizeof(double)) == 0,
               "sum_of_squares of %zu floats: a second run gives the same bits", sizes[k]);
    }
    // sum_of_squares_buffers: one read for all (an empty buffer among them), the bits of the
    // per-buffer loop on the GPU, and the CPU's within the same bound.
    const size_t lens[] = {100003, 0, 5, 8192, 77};
    const float *dev_bufs[5];
    double loop = 0.0, cpu = 0.0, one[5], each[5] = {-1, -1, -1, -1, -1};
    for (int k = 0; k < 5; k++) {
        float *x = random_floats(lens[k] + 1, 80 + (uint64_t)k, -3, 3);
        dev_bufs[k] = to_device(x, lens[k] + 1);
        one[k] = gpu->sum_of_squares(dev_bufs[k], lens[k]);
        loop += one[k];
        cpu += ops_cpu.sum_of_squares(x, lens[k]);
    }
    double batched = gpu->sum_of_squares_buffers(5, dev_bufs, lens, each);
    EXPECT(memcmp(&batched, &loop, sizeof loop) == 0 && fabs(batched - cpu) <= 1e-10 * cpu,
           "sum_of_squares_buffers over 5 buffers: %.17g, the per-buffer loop's bits (%.17g) and the CPU's %.17g "
           "(relative 1e-10)", batched, loop, cpu);
    EXPECT(memcmp(each, one, sizeof one) == 0, "sum_of_squares_buffers' each: every buffer's sum_of_squares, bit for bit");
    // Its bf16 twin (zero's and fsdp's --mixed gradients): the bits of widening each buffer on
    // the GPU (from_bf16) and summing the floats, and the CPU's twin within the same bound.
    const bf16 *dev_halves[5];
    const float *dev_wide[5];
    double wide_each[5], half_each[5], half_cpu = 0.0;
    for (int k = 0; k < 5; k++) {
        float *x = random_floats(lens[k] + 1, 90 + (uint64_t)k, -3, 3);
        bf16 *h = host_bytes((lens[k] + 1) * sizeof *h);
        ops_cpu.to_bf16(h, x, lens[k] + 1);
        const bf16 *hk = h;
        half_cpu += ops_cpu.sum_of_squares_buffers_bf16(1, &hk, &lens[k], NULL);
        bf16 *d_h = device_copy_of(h, (lens[k] + 1) * sizeof *h);
        float *d_w = to_device(x, lens[k] + 1);  // overwritten: the GPU's widening of d_h
        gpu->from_bf16(d_w, d_h, lens[k] + 1);
        dev_halves[k] = d_h, dev_wide[k] = d_w;
    }
    double wide = gpu->sum_of_squares_buffers(5, dev_wide, lens, wide_each);
    double halves = gpu->sum_of_squares_buffers_bf16(5, dev_halves, lens, half_each);
    EXPECT(memcmp(&halves, &wide, sizeof wide) == 0 && memcmp(half_each, wide_each, sizeof wide_each) == 0 &&
               fabs(halves - half_cpu) <= 1e-10 * half_cpu,
           "sum_of_squares_buffers_bf16 over 5 buffers: %.17g, the bits of the widened floats' (%.17g), each buffer's "
           "too, and the CPU's %.17g (relative 1e-10)", halves, wide, half_cpu);
    free_buffers();
}

// ---------------------------------------------------------------------------------------
// Mixed precision: both sides run bf16.h's bit arithmetic, so the bits must match. One
// exception, in the adds only: when the sum is a NaN (an input NaN, inf - inf), which NaN the
// fp32 add returns is the hardware's choice (x86 passes an input's payload on, the GPU returns
// its canonical NaN), so there a NaN is all we ask for.
// ---------------------------------------------------------------------------------------

static int bf16_is_nan(bf16 h) { return (h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0; }

// How many of n bf16s differ; a NaN matches any NaN when nan_any is set.
static size_t differing_bf16(const bf16 *cpu, const bf16 *gpu_host, size_t n, int nan_any) {
    size_t count = 0;
    for (size_t i = 0; i < n; i++)
        count += nan_any && bf16_is_nan(cpu[i]) ? !bf16_is_nan(gpu_host[i]) : cpu[i] != gpu_host[i];
    return count;
}

// fp32 patterns that test the rounding: every sign, exponent and mantissa top (all 65536
// high halves) with the low halves that decide it (exact, just below halfway, halfway, just
// above, all ones), then random patterns.
enum { BF16_LOWS = 5, BF16_RANDOM = 1 << 20, BF16_N = 65536 * BF16_LOWS + BF16_RANDOM };

static float *rounding_patterns(uint64_t seed) {
    static const uint32_t lows[BF16_LOWS] = {0x0000, 0x7FFF, 0x8000, 0x8001, 0xFFFF};
    float *f = host_floats(BF16_N);
    Rng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < BF16_N; i++) {
        uint32_t u = i < 65536 * BF16_LOWS ? (uint32_t)(i / BF16_LOWS) << 16 | lows[i % BF16_LOWS]
                                           : (uint32_t)rng_u64(&r);
        memcpy(&f[i], &u, sizeof u);
    }
    return f;
}

// Pairs that round (and tie) often: b's exponent within 8 of a's; now and then b is any
// pattern at all (infinities, NaNs, subnormals).
static void bf16_pairs(bf16 *a, bf16 *b, size_t n, uint64_t seed) {
    Rng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) {
        uint64_t bits = rng_u64(&r);
        a[i] = (bf16)bits;
        int e = (a[i] >> 7) & 0xFF, eb = e + (int)(bits >> 16 & 0xFF) % 17 - 8;
        eb = eb < 0 ? 0 : eb > 255 ? 255 : eb;
        b[i] = (bf16)((bits >> 32 & 0x807F) | (uint64_t)eb << 7);
        if (i % 97 == 0) b[i] = (bf16)(bits >> 48);
    }
}

static void test_bf16(void) {
    // to_bf16 OVERWRITES dst, which starts as garbage: rounding to nearest even, NaNs kept
    // quiet with their sign.
    float *f = rounding_patterns(80);
    bf16 *h_cpu = host_bytes(BF16_N * sizeof(bf16));
    memset(h_cpu, 0x77, BF16_N * sizeof(bf16));
    bf16 *d_h = device_copy_of(h_cpu, BF16_N * sizeof(bf16));
    ops_cpu.to_bf16(h_cpu, f, BF16_N);
    gpu->to_bf16(d_h, to_device(f, BF16_N), BF16_N);
    size_t count = differing_bf16(h_cpu, host_copy_of(d_h, BF16_N * sizeof(bf16)), BF16_N, 0);
    EXPECT(count == 0, "to_bf16 on %d fp32 patterns: the CPU's bits, NaNs included (%zu differ)", BF16_N, count);

    // from_bf16: every pattern, exactly.
    bf16 *all = host_bytes(65536 * sizeof(bf16));
    for (uint32_t i = 0; i < 65536; i++) all[i] = (bf16)i;
    float *wide = host_floats(65536), *d_wide = to_device(filled(65536, GARBAGE), 65536);
    ops_cpu.from_bf16(wide, all, 65536);
    gpu->from_bf16(d_wide, device_copy_of(all, 65536 * sizeof(bf16)), 65536);
    expect_same_bits("from_bf16 on all 65536 patterns", wide, d_wide, 65536);

    // add_bf16 and acc_bf16 ACCUMULATE into acc: both sides start from the same values.
    enum { PAIRS = 1 << 20 };
    bf16 *acc = host_bytes(PAIRS * sizeof(bf16)), *x = host_bytes(PAIRS * sizeof(bf16));
    bf16_pairs(acc, x, PAIRS, 81);
    bf16 *d_acc = device_copy_of(acc, PAIRS * sizeof(bf16));
    gpu->add_bf16(d_acc, device_copy_of(x, PAIRS * sizeof(bf16)), PAIRS);
    ops_cpu.add_bf16(acc, x, PAIRS);
    count = differing_bf16(acc, host_copy_of(d_acc, PAIRS * sizeof(bf16)), PAIRS, 1);
    EXPECT(count == 0, "add_bf16 on %d pairs: the CPU's bits (a NaN sum: any NaN) (%zu differ)", PAIRS, count);

    // acc_bf16's x is fp32 with bits below bf16's, which must be added, not dropped.
    float *xf = host_floats(PAIRS);
    for (size_t i = 0; i < PAIRS; i++) xf[i] = bf16_to_float(x[i]) * (1.0f + 0x1p-12f * (float)(i % 7));
    d_acc = device_copy_of(acc, PAIRS * sizeof(bf16));
    gpu->acc_bf16(d_acc, to_device(xf, PAIRS), PAIRS);
    ops_cpu.acc_bf16(acc, xf, PAIRS);
    count = differing_bf16(acc, host_copy_of(d_acc, PAIRS * sizeof(bf16)), PAIRS, 1);
    EXPECT(count == 0, "acc_bf16 on %d fp32 values: the CPU's bits (a NaN sum: any NaN) (%zu differ)", PAIRS, count);
    free_buffers();
}

// The param_hash on the device (hash.cu) against the CPU's (hash.c): random bytes at every
// awkward length (empty, under one 16-byte load, around a chunk, a ragged end), at aligned
// addresses (the 16-byte loads) and at odd ones (the byte loop), one buffer and a list of
// them in one launch; and more buffers than one launch takes.
static void test_param_hash(void) {
    const size_t sizes[] = {0, 1, 7, 15, 16, 17, 65535, 65536, 65537, 3 * 65536 + 12345, (5u << 20) + 3};
    enum { NSIZES = sizeof sizes / sizeof sizes[0] };
    const void *dev[NSIZES], *host[NSIZES];
    size_t bytes[NSIZES];
    uint64_t chained = PARAM_HASH_INIT;
    for (int i = 0; i < NSIZES; i++) {
        unsigned char *p = host_bytes(sizes[i] + 3);
        Rng r;
        rng_seed(&r, 200 + (uint64_t)i);
        for (size_t j = 0; j < sizes[i] + 3; j++) p[j] = (unsigned char)rng_u64(&r);
        unsigned char *d = device_copy_of(p, sizes[i] + 3);
        for (int shift = 0; shift <= 3; shift += 3) {  // cudaMalloc's alignment, then 3 bytes off it
            const void *one = d + shift;
            uint64_t g = cuda_param_hash(1, &one, &sizes[i], PARAM_HASH_INIT);
            uint64_t c = param_hash_bytes(p + shift, sizes[i], PARAM_HASH_INIT);
            EXPECT(g == c, "param_hash of %zu bytes at cudaMalloc's address + %d: the GPU's equals the CPU's "
                   "(%016llx vs %016llx)", sizes[i], shift, (unsigned long long)g, (unsigned long long)c);
        }
        dev[i] = d, host[i] = p, bytes[i] = sizes[i];
        chained = param_hash_bytes(p, sizes[i], chained);
    }
    uint64_t listed = cuda_param_hash(NSIZES, dev, bytes, PARAM_HASH_INIT);
    EXPECT(listed == chained, "param_hash of %d buffers in one launch: the CPU's, buffer after buffer", NSIZES);
    EXPECT(cuda_param_hash(NSIZES, dev, bytes, PARAM_HASH_INIT) == listed, "param_hash: a second run, the same value");

    // 150 buffers (three launches of at most 64): the 7-byte one and the 65537-byte one, alternating.
    enum { MANY = 150 };
    const void *many[MANY];
    size_t many_bytes[MANY];
    uint64_t many_cpu = PARAM_HASH_INIT;
    for (int i = 0; i < MANY; i++) {
        int k = i % 2 ? 2 : 8;
        many[i] = dev[k], many_bytes[i] = bytes[k];
        many_cpu = param_hash_bytes(host[k], bytes[k], many_cpu);
    }
    EXPECT(cuda_param_hash(MANY, many, many_bytes, PARAM_HASH_INIT) == many_cpu,
           "param_hash of %d buffers (several launches): the CPU's", MANY);
    free_buffers();
}

// Ring attention (ring.cu): rank 1 of a zig-zag ring of 2 holds chunks 1 and 2 of 4, so its
// queries see all of its own block and part of rank 0's: the forward of both blocks merged (in
// the ring's order), then each block's backward, accumulating onto values already there.
static void test_ring_block(int B, int T, int C, int NH, int bf16_in) {
    snprintf(attention_shape, sizeof attention_shape, "ring %s, B=%d, T=%d, hs=%d", bf16_in ? "bf16" : "fp32", B, T,
             C / NH);
    CpLayout l;
    if (cp_layout_init(&l, CP_ZIGZAG, T, 2) != 0) die("use T >= 4", "test_ring_block: T = %d", T);
    int *pos[2], cnt[2], *d_pos[2];
    float *qkv[2], *kv[2], *d_qkv[2], *d_kv[2];
    for (int r = 0; r < 2; r++) {
        pos[r] = host_bytes(sizeof(int) * (size_t)T);
        cnt[r] = ring_rank_positions(&l, r, pos[r]);
        d_pos[r] = device_copy_of(pos[r], sizeof(int) * (size_t)cnt[r]);
        size_t n = (size_t)B * cnt[r];
        qkv[r] = random_floats(n * 3 * C, 60 + (uint64_t)r, -2, 2);
        if (bf16_in)
            for (size_t i = 0; i < n * 3 * C; i++) qkv[r][i] = bf16_round(qkv[r][i]);
        kv[r] = host_floats(n * 2 * C);
        ring_kv_pack(kv[r], qkv[r], B, cnt[r], C);
        d_qkv[r] = to_device(qkv[r], n * 3 * C), d_kv[r] = to_device(filled(n * 2 * C, GARBAGE), n * 2 * C);
        cuda_ring_kv_pack(d_kv[r], d_qkv[r], B, cnt[r], C);
        expect_same_bits(with_shape("cuda_ring_kv_pack: qkv's k | v columns"), kv[r], d_kv[r], n * 2 * C);
    }
    const int me = 1, Tq = cnt[me];
    size_t nout = (size_t)B * Tq * C, nlse = (size_t)B * NH * Tq;
    float *out = filled(nout, 0), *lse = filled(nlse, -INFINITY), *scores = host_floats((size_t)T + C);
    float *d_out = to_device(filled(nout, GARBAGE), nout), *d_lse = to_device(filled(nlse, GARBAGE), nlse);
    cuda_ring_fill(d_out, nout, 0.0f), cuda_ring_fill(d_lse, nlse, -INFINITY);
    expect_same_bits(with_shape("cuda_ring_fill: -inf everywhere"), lse, d_lse, nlse);
    for (int src = me, s = 0; s < 2; s++, src = 1 - src) {
        ring_block_forward(out, lse, qkv[me], pos[me], Tq, kv[src], pos[src], cnt[src], B, C, NH, bf16_in, scores);
        cuda_ring_block_forward(d_out, d_lse, d_qkv[me], d_pos[me], Tq, d_kv[src], d_pos[src], cnt[src], B, C, NH,
                                bf16_in, NULL);
    }
    double tol_out = bf16_in ? TOL_BF16_OUT : TOL_SUM, tol_grad = bf16_in ? TOL_BF16_GRAD : TOL_CHAIN;
    expect_close(with_shape("cuda_ring_block_forward out, two blocks merged, vs the CPU's"), out, d_out, nout, tol_out);
    expect_close(with_shape("cuda_ring_block_forward lse vs the CPU's"), lse, d_lse, nlse, tol_out);
    // The backward from the CPU's out and lse, so both sides start from the same numbers.
    float *dout = random_floats(nout, 62, -1, 1), *D = host_floats(nlse);
    float *d_dout = to_device(dout, nout), *d_outc = to_device(out, nout), *d_lsec = to_device(lse, nlse);
    float *d_D = to_device(filled(nlse, GARBAGE), nlse);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int t = 0; t < Tq; t++) {
                size_t at = ((size_t)b * Tq + t) * C + (size_t)h * (C / NH);
                float sum = 0.0f;
                for (int i = 0; i < C / NH; i++) sum += dout[at + i] * out[at + i];
                D[((size_t)b * NH + h) * Tq + t] = sum;
            }
    cuda_ring_do_dot_o(d_D, d_dout, d_outc, B, Tq, C, NH);
    expect_close(with_shape("cuda_ring_do_dot_o D = do . o vs the CPU's"), D, d_D, nlse, TOL_SUM);
    float *d_Dc = to_device(D, nlse);
    float *dqkv = random_floats((size_t)B * Tq * 3 * C, 63, -0.1, 0.1);
    float *d_dqkv[2] = {to_device(dqkv, (size_t)B * Tq * 3 * C), to_device(dqkv, (size_t)B * Tq * 3 * C)};
    for (int src = 0; src < 2; src++) {
        size_t nkv = (size_t)B * cnt[src] * 2 * C;
        float *dkv = random_floats(nkv, 64 + (uint64_t)src, -0.1, 0.1);
        float *d_dkv[2] = {to_device(dkv, nkv), to_device(dkv, nkv)};
        ring_block_backward(dqkv, dkv, dout, D, lse, qkv[me], pos[me], Tq, kv[src], pos[src], cnt[src], B, C, NH,
                            bf16_in, scores);
        for (int run = 0; run < 2; run++)
            cuda_ring_block_backward(d_dqkv[run], d_dkv[run], d_dout, d_Dc, d_lsec, d_qkv[me], d_pos[me], Tq, d_kv[src],
                                     d_pos[src], cnt[src], B, C, NH, bf16_in, NULL);
        expect_close(with_shape("cuda_ring_block_backward dk dv (accumulated) vs the CPU's"), dkv, d_dkv[0], nkv,
                     tol_grad);
        expect_same_run(with_shape("cuda_ring_block_backward dk dv"), d_dkv[0], d_dkv[1], nkv);
    }
    expect_close(with_shape("cuda_ring_block_backward dq (accumulated over both blocks) vs the CPU's"), dqkv, d_dqkv[0],
                 (size_t)B * Tq * 3 * C, tol_grad);
    expect_same_run(with_shape("cuda_ring_block_backward dq"), d_dqkv[0], d_dqkv[1], (size_t)B * Tq * 3 * C);
    // dK | dV home: dqkv's k | v columns, its q columns kept.
    float *home = to_host(d_dqkv[0], (size_t)B * Tq * 3 * C), *want = host_floats((size_t)B * Tq * 3 * C);
    memcpy(want, home, sizeof(float) * (size_t)B * Tq * 3 * C);
    for (size_t n = 0; n < (size_t)B * Tq; n++) memcpy(want + n * 3 * C + C, kv[me] + n * 2 * C, sizeof(float) * 2 * C);
    cuda_ring_kv_unpack(d_dqkv[0], d_kv[me], B, Tq, C);
    expect_same_bits(with_shape("cuda_ring_kv_unpack: dqkv's k | v columns"), want, d_dqkv[0], (size_t)B * Tq * 3 * C);
    free_buffers();
}

int main(void) {
    char why[256] = "";
    // cuBLAS is not linked but loaded by cuda_open; finding it needs no GPU, so CI checks it.
    EXPECT(cuda_load_blas(why, sizeof why) == 0, "cuBLAS and cuBLASLt load and have every function the backend calls%s%s",
           why[0] ? ": " : "", why);
    if (cuda_device_count(why, sizeof why) == 0) {
        printf("ok - skipped: no usable GPU (%s)\n", why);
        return test_done();
    }
    char desc[256], err[256];
    if (cuda_open(0, 0, desc, sizeof desc, err, sizeof err) != 0) {
        EXPECT(0, "cuda_open(0): %s", err);
        return test_done();
    }
    printf("# GPU 0: %s\n", desc);
    gpu = cuda_ops();
    test_device();
    test_linear(0);
    test_linear(1);
    test_linear_kept();
    test_bias_epilogue();
    cuda_set_bias_epilogue(0);  // the Linears' other way, under test_linear's checks too
    test_linear(0);
    test_linear(1);
    test_linear_kept();
    cuda_set_bias_epilogue(1);
    test_linear_bf16_out();
    test_gelu_bf16();
    test_layernorm();
    // Column sums: ragged strip and slab, one row, one column, one row short of a slab, both
    // one, and many slabs (8195 = 32 * 256 + 3 rows).
    const int sum_shapes[][2] = {{37, 53}, {1, 53}, {300, 1}, {255, 33}, {1, 1}, {8195, 769}};
    for (size_t k = 0; k < sizeof sum_shapes / sizeof sum_shapes[0]; k++)
        test_column_sums(sum_shapes[k][0], sum_shapes[k][1]);
    test_attention(2, 19, 48, 3);
    test_attention(1, 67, 96, 2);
    test_flash_attention(2, 19, 48, 3);    // hs 16: one lane a row
    test_flash_attention(1, 300, 96, 2);   // hs 48 (padded to 64), three blocks of rows, five tiles of keys
    test_flash_attention(2, 130, 256, 2);  // hs 128: groups of 2 and 4 lanes
    test_flash_attention(1, 33, 200, 1);   // hs 200 (padded to 256)
    test_flash_attention(1, 9, 1000, 1);   // hs 1000 (padded to 1024): groups of 16 and 32 lanes
    test_flash_attention(3, 1, 12, 4);     // T = 1, hs 3
    test_flash_attention(1, 200, 3, 3);    // hs 1
    // With TF32, heads up to 128 channels take the tensor cores' kernels (64 rows a block,
    // tiles of 64): hs 16, 48 (padded to 64) and 128, T = 1, and T past one block and tile.
    cuda_set_tf32(1);
    test_flash_attention_tol(2, 19, 48, 3, 0, TOL_TF32_OUT, TOL_TF32_GRAD, "flash TF32");
    test_flash_attention_tol(1, 300, 96, 2, 0, TOL_TF32_OUT, TOL_TF32_GRAD, "flash TF32");
    test_flash_attention_tol(2, 130, 256, 2, 0, TOL_TF32_OUT, TOL_TF32_GRAD, "flash TF32");
    test_flash_attention_tol(3, 1, 12, 4, 0, TOL_TF32_OUT, TOL_TF32_GRAD, "flash TF32");
    test_flash_attention_tol(1, 70, 64, 2, 0, TOL_TF32_OUT, TOL_TF32_GRAD, "flash TF32");  // hs 32
    cuda_set_tf32(0);
    // With bf16 operands (--mixed), heads up to 128 channels on flash_tc.cu's bf16 kernels (64
    // rows a block, tiles of 64 keys), against the CPU's flash with the same roundings: hs 16,
    // 48 (padded to 64), 128 and 32, T = 1, T past one block and tile, B > 1, NH > 1.
    test_flash_attention_tol(2, 19, 48, 3, 1, TOL_BF16_OUT, TOL_BF16_GRAD, "flash bf16");
    test_flash_attention_tol(1, 300, 96, 2, 1, TOL_BF16_OUT, TOL_BF16_GRAD, "flash bf16");
    test_flash_attention_tol(2, 130, 256, 2, 1, TOL_BF16_OUT, TOL_BF16_GRAD, "flash bf16");
    test_flash_attention_tol(3, 1, 12, 4, 1, TOL_BF16_OUT, TOL_BF16_GRAD, "flash bf16");
    test_flash_attention_tol(1, 70, 64, 2, 1, TOL_BF16_OUT, TOL_BF16_GRAD, "flash bf16");
    test_elementwise();
    test_embedding();
    test_crossentropy();
    test_optimizer();
    test_bf16();
    test_param_hash();
    test_ring_block(2, 70, 96, 2, 0);   // hs 48: lanes owning one and two channels; blocks past 32 keys
    test_ring_block(1, 16, 48, 3, 0);   // hs 16
    test_ring_block(2, 70, 96, 2, 1);   // --mixed's roundings
    cuda_close();
    return test_done();
}
