// bench_ops.c — the GPU's attention kernels (naive and flash), LayerNorm's backward and a
// Linear forward and backward (fp32, and with --mixed's bf16 operands; the forward with its
// bias added by cuBLASLt's epilogue and the other way, written across the output first) timed alone, at one model shape (default: GPT-2 small's, B=8 T=1024 C=768
// NH=12), with the two variants of attention checked against each other at that size.
//
// Usage: bench_ops [B T C NH]   (on a machine with a GPU; without one it says so, exit 0)
//
// Each row is the median of REPS runs after WARMUP, each run timed on the host around the
// kernels with the stream drained before and after (the kernels run for milliseconds, so the
// launch and the drain are noise). Attention's rate counts the causal half of the T x T
// products a pass needs at the least: the forward pass S = Q K^T and O = P V (2 products),
// the backward pass dV, dP, dS's dQ and dK (4); flash's recomputation of S is not counted, so
// its rate is comparable with the naive one's.
//
// The check: flash's out and dqkv against naive's, normwise (max |a - b| / max |b|), on the
// same random qkv and dout at the full shape: small shapes are tests/gpu/test_cuda_ops.c's.
// The flash rows in fp32 are 3xTF32 on the tensor cores where the head fits them (flash_tc.cuh);
// then fp32 flash on the ordinary cores (cuda_set_fp32_tc(0)), the same with TF32 on
// (cuda_set_tf32), and with bf16 operands (--mixed), each checked and timed.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/cuda/gpu.h"
#include "common/harness/check.h"
#include "common/model/ops.h"
#include "common/model/rng.h"

enum { WARMUP = 2, REPS = 10 };

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static float *device_random(size_t n, uint64_t seed, double lo, double hi) {
    float *h = malloc_check(n * sizeof(float));
    Rng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) h[i] = (float)(lo + (hi - lo) * rng_uniform(&r));
    float *d = cuda_alloc(n * sizeof(float));
    if (!d) die("use a smaller shape", "the GPU is out of memory (%zu floats)", n);
    cuda_copy(d, h, n * sizeof(float));
    free(h);
    return d;
}

static float *device_floats(size_t n) {
    float *d = cuda_alloc(n * sizeof(float));
    if (!d) die("use a smaller shape", "the GPU is out of memory (%zu floats)", n);
    return d;
}

// max |a - b| / max |b| over n device floats.
static double normwise(const float *d_a, const float *d_b, size_t n) {
    float *a = malloc_check(n * sizeof(float)), *b = malloc_check(n * sizeof(float));
    cuda_copy(a, d_a, n * sizeof(float));
    cuda_copy(b, d_b, n * sizeof(float));
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= num)) num = d;  // a NaN sticks
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    free(a);
    free(b);
    return den > 0 ? num / den : num;
}

// The ops to time, one at a time: every field a pass may need.
typedef struct {
    const Ops *ops;
    int B, T, C, NH;
    float *qkv, *out, *att, *lse, *dout, *dqkv;
    float *x, *w, *mean, *rstd, *dx, *dw, *db, *dy, *wide_w, *wide_dw, *wide_db;
    float *lin;   // a Linear's scratch for bf16 operands (linear_scratch_floats)
    float *wide;  // a Linear's [N, 4C] output
    bf16 *x16, *wide16;  // --mixed: x kept in bf16, and c_fc's output in bf16
    int bf16;    // flash's products on bf16 operands (--mixed: flash_tc.cu)
} Bench;

typedef enum {
    NAIVE_FWD, NAIVE_BWD, FLASH_FWD, FLASH_BWD, LN_BWD, LINEAR_FWD, LINEAR_FWD_BF16, LINEAR_BWD, LINEAR_BWD_BF16,
    LINEAR_FWD_KEPT_ROUNDED, LINEAR_FWD_BF16_OUT
} Op;

static void run_op(Bench *b, Op op) {
    const Ops *o = b->ops;
    int N = b->B * b->T, C = b->C;
    switch (op) {
    case NAIVE_FWD: o->attention_forward(b->out, b->att, b->qkv, b->B, b->T, C, b->NH); break;
    case NAIVE_BWD: o->attention_backward(b->dqkv, b->dout, b->qkv, b->att, b->B, b->T, C, b->NH, NULL); break;
    case FLASH_FWD: o->flash_attention_forward(b->out, b->lse, b->qkv, b->B, b->T, C, b->NH, b->bf16); break;
    case FLASH_BWD:
        o->flash_attention_backward(b->dqkv, b->dout, b->qkv, b->out, b->lse, b->B, b->T, C, b->NH, b->bf16, NULL);
        break;
    case LN_BWD: o->layernorm_backward(b->dx, b->dw, b->db, b->dy, b->x, b->w, b->mean, b->rstd, N, C); break;
    case LINEAR_FWD:  // mlp.c_fc: [N, C] -> [N, 4C], with its bias
        o->linear_forward(b->wide, b->x, b->wide_w, b->wide_db, N, C, 4 * C, 0, NULL);
        break;
    case LINEAR_FWD_BF16:
        o->linear_forward(b->wide, b->x, b->wide_w, b->wide_db, N, C, 4 * C, 1, b->lin);
        break;
    case LINEAR_BWD:  // mlp.c_fc: [N, C] -> [N, 4C], with its bias' column sums
        o->linear_backward(b->dx, b->wide_dw, b->wide_db, b->dqkv, b->x, b->wide_w, N, C, 4 * C, 0, NULL);
        break;
    case LINEAR_BWD_BF16:  // the same with --mixed's bf16 operands (their copies included)
        o->linear_backward(b->dx, b->wide_dw, b->wide_db, b->dqkv, b->x, b->wide_w, N, C, 4 * C, 1, b->lin);
        break;
    case LINEAR_FWD_KEPT_ROUNDED:  // --mixed's c_fc before its output was bf16: fp32 out, then rounded
        o->linear_forward_bf16(b->wide, b->x16, b->wide_w, b->wide_db, N, C, 4 * C, b->lin);
        o->to_bf16(b->wide16, b->wide, (size_t)N * 4 * C);
        break;
    case LINEAR_FWD_BF16_OUT:  // --mixed's c_fc: the output written in bf16 by the GEMM
        o->linear_forward_bf16_out(b->wide16, b->x16, b->wide_w, b->wide_db, N, C, 4 * C, b->lin);
        break;
    }
}

// Flash's out and dqkv, computed afresh into b, against naive's kept in naive_out and
// naive_dqkv, normwise; one line saying so. 1 when within the tolerances.
static int check_flash(Bench *b, const float *naive_out, const float *naive_dqkv, double tol_out, double tol_dqkv,
                       const char *what) {
    size_t nout = (size_t)b->B * b->T * b->C, nqkv = 3 * nout;
    cuda_memset0(b->out, nout * sizeof(float));
    cuda_memset0(b->dqkv, nqkv * sizeof(float));
    run_op(b, FLASH_FWD);
    run_op(b, FLASH_BWD);
    cuda_sync();
    double err_out = normwise(b->out, naive_out, nout), err_dqkv = normwise(b->dqkv, naive_dqkv, nqkv);
    int ok = err_out < tol_out && err_dqkv < tol_dqkv;
    printf("%s at this shape: out %.2e, dqkv %.2e (normwise) %s (within %g / %g)\n", what, err_out, err_dqkv,
           ok ? "ok" : "FAIL", tol_out, tol_dqkv);
    return ok;
}

static double time_op(Bench *b, Op op) {
    double ms[REPS];
    for (int i = 0; i < WARMUP; i++) run_op(b, op);
    for (int i = 0; i < REPS; i++) {
        cuda_sync();
        double t0 = now_ms();
        run_op(b, op);
        cuda_sync();
        ms[i] = now_ms() - t0;
    }
    qsort(ms, REPS, sizeof ms[0], cmp_double);
    return (ms[REPS / 2 - 1] + ms[REPS / 2]) / 2;
}

int main(int argc, char **argv) {
    int B = 8, T = 1024, C = 768, NH = 12;
    if (argc == 5) {
        B = atoi(argv[1]), T = atoi(argv[2]), C = atoi(argv[3]), NH = atoi(argv[4]);
    } else if (argc != 1) {
        fprintf(stderr, "usage: bench_ops [B T C NH]\n");
        return 2;
    }
    if (B < 1 || T < 1 || C < 1 || NH < 1 || C % NH != 0) {
        fprintf(stderr, "bench_ops: B, T, C, NH must be positive and NH must divide C\n");
        return 2;
    }
    char why[256] = "", desc[256], err[256];
    if (cuda_device_count(why, sizeof why) == 0) {
        printf("SKIP: no usable GPU (%s)\n", why);
        return 0;
    }
    if (cuda_open(0, 0, desc, sizeof desc, err, sizeof err) != 0) die("", "cuda_open(0): %s", err);
    printf("# %s; B=%d T=%d C=%d NH=%d (hs %d); median of %d runs, ms\n", desc, B, T, C, NH, C / NH, REPS);

    size_t N = (size_t)B * T;
    Bench b = {.ops = cuda_ops(), .B = B, .T = T, .C = C, .NH = NH};
    b.qkv = device_random(N * 3 * C, 1, -1, 1);
    b.dout = device_random(N * C, 2, -1, 1);
    b.out = device_floats(N * C);
    b.att = device_floats((size_t)B * NH * T * T);
    b.lse = device_floats((size_t)B * NH * T);
    b.dqkv = device_floats(N * 4 * C);  // also the Linear's [N, 4C] dout
    b.x = device_random(N * C, 3, -1, 1), b.dy = device_random(N * C, 4, -1, 1), b.dx = device_floats(N * C);
    b.w = device_random(C, 5, 0.5, 1.5), b.dw = device_floats(C), b.db = device_floats(C);
    b.mean = device_random(N, 6, -0.1, 0.1), b.rstd = device_random(N, 7, 0.9, 1.1);
    b.wide_w = device_random((size_t)4 * C * C, 8, -0.05, 0.05);
    b.wide_dw = device_floats((size_t)4 * C * C), b.wide_db = device_random((size_t)4 * C, 9, -1, 1);
    b.lin = device_floats(linear_scratch_floats((int)N, C, 4 * C, 1));
    b.wide = device_floats(N * 4 * C);
    b.x16 = (bf16 *)device_floats(N * C / 2 + 1), b.wide16 = (bf16 *)device_floats(N * 4 * C / 2 + 1);
    b.ops->to_bf16(b.x16, b.x, N * C);
    // The kernels' own workspace, planned as a lab's pass plans it (naive's dS is the largest).
    size_t ws_bytes = ops_gpu_workspace_bytes(B, T, C, NH, 256, 0);
    b.ops->use_workspace(device_floats(ws_bytes / sizeof(float) + 1), ws_bytes);

    // The check at full size: naive's results first, kept, then flash's against them.
    size_t nout = N * C, nqkv = N * 3 * C;
    float *naive_out = device_floats(nout), *naive_dqkv = device_floats(nqkv);
    run_op(&b, NAIVE_FWD);
    run_op(&b, NAIVE_BWD);
    cuda_copy(naive_out, b.out, nout * sizeof(float));
    cuda_copy(naive_dqkv, b.dqkv, nqkv * sizeof(float));
    int ok = check_flash(&b, naive_out, naive_dqkv, 1e-4, 1e-3, "flash vs naive");

    double pairs = (double)B * NH * ((double)T * (T + 1) / 2);  // (t, u) pairs with u <= t
    double product = 2.0 * pairs * (C / NH);                    // FLOPs of one causal T x T x hs product
    struct {
        const char *name;
        Op op;
        double flops;
    } rows[] = {
        {"attention naive forward", NAIVE_FWD, 2 * product},
        {"attention naive backward", NAIVE_BWD, 4 * product},
        {"attention flash forward, fp32 (3xTF32 where the head fits)", FLASH_FWD, 2 * product},
        {"attention flash backward, fp32 (3xTF32 where the head fits)", FLASH_BWD, 4 * product},
        {"layernorm backward", LN_BWD, 0},
        {"linear forward C->4C (with bias)", LINEAR_FWD, 2.0 * N * C * 4 * C},
        {"linear forward C->4C, bf16 operands (--mixed)", LINEAR_FWD_BF16, 2.0 * N * C * 4 * C},
        {"linear backward C->4C (with bias)", LINEAR_BWD, 2.0 * 2 * N * C * 4 * C},
        {"linear backward C->4C, bf16 operands (--mixed)", LINEAR_BWD_BF16, 2.0 * 2 * N * C * 4 * C},
        {"linear forward C->4C, bf16 input, fp32 output then rounded (--mixed's c_fc before)", LINEAR_FWD_KEPT_ROUNDED,
         2.0 * N * C * 4 * C},
        {"linear forward C->4C, bf16 input and output (--mixed's c_fc)", LINEAR_FWD_BF16_OUT, 2.0 * N * C * 4 * C},
    };
    printf("| op | ms | TFLOP/s |\n|---|---|---|\n");
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        double ms = time_op(&b, rows[i].op);
        if (rows[i].flops > 0) printf("| %s | %.3f | %.1f |\n", rows[i].name, ms, rows[i].flops / ms / 1e9);
        else printf("| %s | %.3f | |\n", rows[i].name, ms);
    }

    // The Linear forward's bias written across out first and the product added to it (beta =
    // 1), beside the rows above, whose bias cuBLASLt's epilogue adds as the product is stored
    // (lt.cu): the two ways' results compared (they differ by which kernel sums the product),
    // then the other way timed.
    size_t nwide = N * 4 * C;
    float *epilogue = device_floats(nwide), *epilogue_bf16 = device_floats(nwide);
    run_op(&b, LINEAR_FWD);
    cuda_copy(epilogue, b.wide, nwide * sizeof(float));
    run_op(&b, LINEAR_FWD_BF16);
    cuda_copy(epilogue_bf16, b.wide, nwide * sizeof(float));
    cuda_set_bias_epilogue(0);
    run_op(&b, LINEAR_FWD);
    cuda_sync();
    double lin_err = normwise(epilogue, b.wide, nwide);
    run_op(&b, LINEAR_FWD_BF16);
    cuda_sync();
    double lin_err_bf16 = normwise(epilogue_bf16, b.wide, nwide);
    int lin_ok = lin_err < 1e-4 && lin_err_bf16 < 1e-4;
    printf("linear forward, the bias by epilogue vs written first: fp32 %.2e, bf16 operands %.2e (normwise) %s "
           "(within 1e-4)\n", lin_err, lin_err_bf16, lin_ok ? "ok" : "FAIL");
    double ms_l = time_op(&b, LINEAR_FWD), ms_lb = time_op(&b, LINEAR_FWD_BF16);
    printf("| linear forward C->4C, the bias written first | %.3f | %.1f |\n", ms_l, rows[5].flops / ms_l / 1e9);
    printf("| linear forward C->4C, bf16 operands, the bias written first | %.3f | %.1f |\n", ms_lb,
           rows[6].flops / ms_lb / 1e9);
    cuda_set_bias_epilogue(1);

    // fp32 flash on the ordinary cores (the rows above take the tensor cores as 3xTF32 where
    // the head fits them): checked the same way, and timed beside them.
    cuda_set_fp32_tc(0);
    int simt_ok = check_flash(&b, naive_out, naive_dqkv, 1e-4, 1e-3, "flash fp32 on the ordinary cores vs naive");
    double ms_f = time_op(&b, FLASH_FWD), ms_b = time_op(&b, FLASH_BWD);
    printf("| attention flash forward, fp32 on the ordinary cores | %.3f | %.1f |\n", ms_f, rows[2].flops / ms_f / 1e9);
    printf("| attention flash backward, fp32 on the ordinary cores | %.3f | %.1f |\n", ms_b, rows[3].flops / ms_b / 1e9);
    cuda_set_fp32_tc(1);

    // With TF32 (--tf32): flash on the tensor cores where the head fits them, checked against
    // the fp32 naive results above (TF32 keeps 10 bits of mantissa: within 1e-2), then timed.
    cuda_set_tf32(1);
    int tf_ok = check_flash(&b, naive_out, naive_dqkv, 1e-2, 1e-2, "flash TF32 vs naive fp32");
    ms_f = time_op(&b, FLASH_FWD), ms_b = time_op(&b, FLASH_BWD);
    printf("| attention flash forward, TF32 | %.3f | %.1f |\n", ms_f, rows[2].flops / ms_f / 1e9);
    printf("| attention flash backward, TF32 | %.3f | %.1f |\n", ms_b, rows[3].flops / ms_b / 1e9);
    double ms_nf = time_op(&b, NAIVE_FWD), ms_nb = time_op(&b, NAIVE_BWD);  // cuBLAS's products in TF32
    printf("| attention naive forward, TF32 | %.3f | %.1f |\n", ms_nf, rows[0].flops / ms_nf / 1e9);
    printf("| attention naive backward, TF32 | %.3f | %.1f |\n", ms_nb, rows[1].flops / ms_nb / 1e9);
    cuda_set_tf32(0);

    // With bf16 operands (--mixed): flash's products on the tensor cores in bf16 (8 bits of
    // mantissa: within 2e-2 of the fp32 naive results), checked, then timed.
    b.bf16 = 1;
    int bf_ok = check_flash(&b, naive_out, naive_dqkv, 2e-2, 2e-2, "flash bf16 vs naive fp32");
    ms_f = time_op(&b, FLASH_FWD), ms_b = time_op(&b, FLASH_BWD);
    printf("| attention flash forward, bf16 (--mixed) | %.3f | %.1f |\n", ms_f, rows[2].flops / ms_f / 1e9);
    printf("| attention flash backward, bf16 (--mixed) | %.3f | %.1f |\n", ms_b, rows[3].flops / ms_b / 1e9);
    cuda_close();
    return ok && lin_ok && simt_ok && tf_ok && bf_ok ? 0 : 1;
}
