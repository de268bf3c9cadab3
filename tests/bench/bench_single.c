// bench_single.c — how fast one rank computes: the matmul kernel against the textbook loop,
// then a whole training step of the GPT.
//
// Run it:   make bench-single [ARGS="--dim 128 --layers 4"]
//           build/bench/bench_single --help
//
// A benchmark, not a test: it asserts nothing and exits 0. Output in the spirit of
// nccl-tests: '#' lines are comments and column headers, every other line is one measurement
// of whitespace-separated columns (grep -v '^#' | awk ...).
//
// Part 1, matmul_acc (cache-blocked) vs matmul_acc_naive (the triple loop), both from
// common/model/ops.c, on the shapes one training step of the configured model calls (Ntok = B*T/accum
// rows per micro-batch) and one 512^3 square product:
//     C[M,N] += op(A)[M,K] B[K,N]      GFLOP/s = 2 M N K / t  (a multiply and an add per term)
//     t       median time of one call over >= 3 calls and >= --min-time seconds of calls
//     relerr  max|C_blocked - C_naive| / max|C_naive|, one call each on the same inputs
//
// Part 2, one optimizer step as labs/01-single/single.c takes it (zero grads, forward + backward per
// micro-batch, clip, AdamW; no run log): median of --steps steps after --untimed. The FLOP
// count is the standard one (Kaplan et al. 2020; PaLM appendix B; nanoGPT's MFU estimate):
//     FLOP/step = 6 Psi_mm tokens + 12 L B T^2 C
//   - Psi_mm: the weights that take part in a matmul, 12 L C^2 + V C: per block c_attn 3C*C,
//     attn.c_proj C*C, mlp.c_fc 4C*C, mlp.c_proj C*4C, and lm_head V*C. Not counted: wte and
//     wpe (a row lookup, no multiply), biases and LayerNorm weights (element-wise, O(N C)).
//     Each such weight does one multiply-add per token forward (2 FLOP) and two backward
//     (dX = dY W and dW += dY^T X: 4 FLOP) — every Linear computes dX, even the first, whose
//     gradient flows on to ln_1 and the embedding. Hence 6 per weight per token.
//   - attention, per layer: Q K^T and att V are each 2 T^2 hs FLOP per head and sequence, so
//     4 B T^2 C forward (NH hs = C) and twice that backward: 12 B T^2 C. This counts the full
//     T x T matrix, as is conventional; the causal kernel skips the masked upper half, so the
//     attention part overstates the work it does by about 2x. Element-wise work (LayerNorm,
//     GELU, softmax, AdamW) is not counted: it is memory-bound.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/harness/args.h"
#include "common/harness/check.h"
#include "common/harness/mem.h"
#include "common/harness/train.h"
#include "common/model/adamw.h"
#include "common/model/gpt.h"
#include "common/model/ops.h"
#include "common/model/rng.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int compare_doubles(const void *a, const void *b) {
    return (*(const double *)a > *(const double *)b) - (*(const double *)a < *(const double *)b);
}

// Sorts t[0..n) and returns its median.
static double median(double *t, int n) {
    qsort(t, (size_t)n, sizeof *t, compare_doubles);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

// "model name" from /proc/cpuinfo, or "unknown" (not Linux, or an ARM kernel that omits it).
static void cpu_model(char *out, size_t n) {
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512], *colon;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "model name", 10) == 0 && (colon = strchr(line, ':'))) {
            snprintf(out, n, "%s", colon + 1 + strspn(colon + 1, " \t"));
            out[strcspn(out, "\n")] = 0;
            break;
        }
    fclose(f);
}

// ---- Part 1: the matmul kernel ------------------------------------------------------------

typedef void (*MatmulFn)(float *C, const float *A, const float *B, int M, int N, int K, int a_trans);
typedef struct { const char *name; int M, N, K, a_trans; } Shape;  // name: the call with this shape
enum { MAX_REPS = 1 << 16 };

// Median seconds of one call of f; *reps says how many calls it took.
static double time_matmul(MatmulFn f, const Shape *s, float *C, const float *A, const float *B,
                          double min_time, double *times, int *reps) {
    int n = 0;
    for (double total = 0; n < MAX_REPS && (n < 3 || total < min_time); total += times[n++]) {
        double t0 = now_s();
        f(C, A, B, s->M, s->N, s->K, s->a_trans);  // accumulates into C: harmless for timing
        times[n] = now_s() - t0;
    }
    *reps = n;
    return median(times, n);
}

static void bench_matmul(const Shape *s, double min_time, double *times, double *worst_relerr) {
    size_t na = (size_t)s->M * s->K, nb = (size_t)s->K * s->N, nc = (size_t)s->M * s->N;
    float *A = malloc_check(na * sizeof(float)), *B = malloc_check(nb * sizeof(float));
    float *C_blk = calloc_check(nc, sizeof(float)), *C_ref = calloc_check(nc, sizeof(float));
    Rng rng = {1234};
    for (size_t i = 0; i < na; i++) A[i] = (float)(2 * rng_uniform(&rng) - 1);
    for (size_t i = 0; i < nb; i++) B[i] = (float)(2 * rng_uniform(&rng) - 1);

    // Correctness first: one call of each from C = 0 on the same inputs.
    matmul_acc(C_blk, A, B, s->M, s->N, s->K, s->a_trans);
    matmul_acc_naive(C_ref, A, B, s->M, s->N, s->K, s->a_trans);
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < nc; i++) {
        max_diff = fmax(max_diff, fabs((double)C_blk[i] - C_ref[i]));
        max_ref = fmax(max_ref, fabs((double)C_ref[i]));
    }
    double relerr = max_ref > 0 ? max_diff / max_ref : max_diff;
    *worst_relerr = fmax(*worst_relerr, relerr);

    int reps_blk, reps_ref;
    double t_blk = time_matmul(matmul_acc, s, C_blk, A, B, min_time, times, &reps_blk);
    double t_ref = time_matmul(matmul_acc_naive, s, C_ref, A, B, min_time, times, &reps_ref);
    double flop = 2.0 * s->M * s->N * s->K;
    printf("%-14s %5d %5d %5d %5d %8d %10.4f %9.2f %8d %10.4f %9.2f %7.2f %9.2e\n", s->name, s->M, s->N,
           s->K, s->a_trans, reps_blk, t_blk * 1e3, flop / t_blk * 1e-9, reps_ref, t_ref * 1e3,
           flop / t_ref * 1e-9, t_ref / t_blk, relerr);
    free(A), free(B), free(C_blk), free(C_ref);
}

// ---- Part 2: one training step ------------------------------------------------------------

static void bench_step(const TrainArgs *a, int warmup) {
    Mem mem;
    mem_init(&mem, NULL);
    GptConfig cfg = train_model_config(a);
    Gpt model;
    gpt_create(&model, &cfg, &mem, a->seed);
    GptAdamW adam;
    gpt_adamw_create(&adam, &model, a);
    int micro = a->batch / a->accum;
    GptActs acts;
    gpt_acts_alloc(&acts, &cfg, micro, &mem);
    Corpus corpus;
    train_corpus(&corpus, a);
    const double tokens_per_step = (double)a->batch * a->seq;
    double *ms = calloc_check((size_t)a->steps, sizeof *ms), first_loss = 0, loss = 0;  // ms: timed steps
    for (int64_t step = 1; step <= warmup + a->steps; step++) {
        double t0 = now_s();
        // The step of labs/01-single/single.c: sum the micro-batches' gradients, clip, AdamW per layer.
        gpt_zero_grads(&model);
        double loss_sum = train_accumulate(&model, &acts, &corpus, a, step, 0, a->batch,
                                           (float)(1.0 / tokens_per_step), NULL, NULL);
        train_clip_and_update(&model, &adam, a->clip, train_lr(a, step), step);
        if (step > warmup) ms[step - warmup - 1] = (now_s() - t0) * 1e3;
        loss = loss_sum / tokens_per_step;
        if (step == 1) first_loss = loss;
    }

    // The FLOP count of the header comment. Psi_mm is cross-checked against the layout of
    // common/model/gpt.h: the 2-D tensors outside the embedding layer are exactly the Linear weights.
    double B = a->batch, T = a->seq, C = a->dim, L = a->layers, V = cfg.vocab;
    double psi_mm = 12 * L * C * C + V * C, psi_layout = 0;
    for (int l = 1; l < model.nlayers; l++) {
        GptTensor t[GPT_MAX_TENSORS];
        for (int i = 0, n = gpt_layer_tensors(&cfg, l, t); i < n; i++) psi_layout += t[i].ndim == 2 ? t[i].count : 0;
    }
    double flop_step = 6 * psi_mm * tokens_per_step + 12 * L * B * T * T * C;
    double med = median(ms, a->steps);  // sorts ms: ms[0] is the fastest step, ms[steps-1] the slowest
    printf("#\n# training step: zero grads, forward + backward of %d micro-batch(es) of %d, clip, AdamW\n"
           "# FLOP/step = 6 Psi_mm tokens + 12 L B T^2 C, Psi_mm = 12 L C^2 + V C = %.0f of Psi = %zu parameters"
           " (Linear weights in the layout: %.0f, %s)\n", a->accum, micro, psi_mm, gpt_num_params(&cfg), psi_layout,
           psi_layout == psi_mm ? "the same" : "MISMATCH");
    printf("#   = 6 * %.0f * %.0f + 12 * %.0f * %.0f * %.0f^2 * %.0f = %.4g\n", psi_mm, tokens_per_step, L, B, T,
           C, flop_step);
    printf("# %6s %6s %8s %11s %10s %10s %10s %11s %8s %9s %9s\n", "warmup", "steps", "tokens", "flop",
           "ms_median", "ms_min", "ms_max", "tokens/s", "GFLOP/s", "loss_1", "loss_last");
    printf("  %6d %6d %8.0f %11.4e %10.3f %10.3f %10.3f %11.0f %8.2f %9.4f %9.4f\n", warmup, a->steps,
           tokens_per_step, flop_step, med, ms[0], ms[a->steps - 1], tokens_per_step / (med * 1e-3),
           flop_step / (med * 1e-3) * 1e-9, first_loss, loss);

    free(ms);
    gpt_adamw_destroy(&adam);
    gpt_acts_free(&acts, &mem);
    gpt_destroy(&model);
    mem_destroy(&mem);
    corpus_free(&corpus);
}

int main(int argc, char **argv) {
    TrainArgs a;
    train_args_defaults(&a);
    a.steps = 20;  // timed steps: the default --help shows
    static const CatOption options[] = {
        {"untimed", OPT_INT, 0, 1e6, NULL, "3", "N", "untimed steps before the --steps timed ones", 0, NULL},
        {"min-time", OPT_DOUBLE, 0, 60, NULL, "0.2", "SEC", "time each matmul for at least SEC seconds (and 3 calls)", 0, NULL},
    };
    static const CatLab bench = {
        "bench_single", "a benchmark",
        "Benchmark, single thread: GFLOP/s of the blocked matmul vs the naive loop on the\n"
        "shapes of a training step, then ms/step, tokens/s and GFLOP/s of a whole step.\n"
        "--steps is the number of timed steps. Writes no run log.",
        NULL, 1, 1, NULL, options, 2};
    int warmup;
    double min_time;
    LabBind own[] = {{"untimed", &warmup}, {"min-time", &min_time}};
    train_args_parse(&a, argc, argv, &bench, own, 2);
    check_set_context("bench_single");
    if (strcmp(a.device, "cuda") == 0) usage_error("bench_single", "a CPU benchmark: --device cuda is tests/gpu/check.sh's");

    int ntok = a.batch / a.accum * a.seq, C = a.dim, V = GPT_VOCAB;
    printf("# shardlab bench_single (one thread; kernels of labs/common/model/ops.c)\n");
    char cpu[256];
    cpu_model(cpu, sizeof cpu);
    printf("# cpu: %s\n# compiler version: %s\n", cpu, __VERSION__);
    printf("# config: batch %d seq %d dim %d layers %d heads %d vocab %d accum %d -> Ntok %d rows per micro-batch\n",
           a.batch, a.seq, a.dim, a.layers, a.heads, V, a.accum, ntok);
    printf("#\n# matmul C[M,N] += op(A)[M,K] B[K,N] (trans 1: A stored [K,M]); GFLOP/s = 2MNK / median time;\n"
           "# relerr = max|blocked - naive| / max|naive|; speedup = naive time / blocked time\n");
    printf("# %-12s %5s %5s %5s %5s %8s %10s %9s %8s %10s %9s %7s %9s\n", "name", "M", "N", "K", "trans",
           "blk_reps", "blk_ms", "blk_GF/s", "nv_reps", "nv_ms", "nv_GF/s", "speedup", "relerr");
    const Shape shapes[] = {
        {"c_attn.fwd", ntok, 3 * C, C, 0},   // x [Ntok,C] . W^T [C,3C]
        {"c_fc.fwd", ntok, 4 * C, C, 0},     // [Ntok,C] . [C,4C]
        {"mlp_proj.fwd", ntok, C, 4 * C, 0}, // [Ntok,4C] . [4C,C]
        {"lm_head.fwd", ntok, V, C, 0},      // [Ntok,C] . [C,V]
        {"c_attn.dx", ntok, C, 3 * C, 0},    // dX = dY [Ntok,3C] . W [3C,C]
        {"c_fc.dW", 4 * C, C, ntok, 1},      // dW += dY^T [4C,Ntok] . X [Ntok,C]
        {"lm_head.dW", V, C, ntok, 1},       // [V,Ntok] . [Ntok,C]
        {"square", 512, 512, 512, 0},        // larger than any above: where blocking matters
    };
    double *times = malloc_check(MAX_REPS * sizeof *times), worst = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) bench_matmul(&shapes[i], min_time, times, &worst);
    free(times);
    // Both kernels add each element's k terms in the same order, so they agree to a few
    // roundings (fused multiply-adds may differ); 1e-5 is far above that, far below a bug.
    printf("# matmul: max relerr %.2e (%s)\n", worst, worst <= 1e-5 ? "OK: blocked agrees with naive" : "WRONG: results differ");

    bench_step(&a, warmup);
    return 0;
}
