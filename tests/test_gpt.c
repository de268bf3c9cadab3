// test_gpt.c — the model's gradients against central finite differences (with naive and with
// flash attention), its layout, the flash attention kernels against the naive ones and a
// double-precision reference, and the Linear layers' bf16 operands (--mixed) against a
// double-precision product of the rounded operands.
//
// What this proves: every backward function in common/model/ computes the derivative of the loss the
// forward computes. For each parameter tensor of each layer we compare the analytic
// directional derivative <grad, u> along a random direction u with the central difference
// (L(p + eps u) - L(p - eps u)) / (2 eps), and a few single elements the same way.
//
// Tolerance: fp32 forward passes carry rounding noise of about 1e-7 relative on a loss near
// 5; divided by 2*eps = 2e-3 that is ~1e-4 absolute at worst, and the truncation error of the
// central difference is O(eps^2) ~ 1e-6. We use weights 10x larger than the default init so
// that every gradient is well above that noise, and require
//     |numeric - analytic| <= 2e-3 * max(|numeric|, |analytic|) + 2e-4.
// A wrong sign, a missing term or a factor of 2 anywhere breaks this by orders of magnitude.
#include <stdlib.h>
#include <string.h>

#include "attention_ref.h"
#include "common/model/gpt.h"
#include "common/model/ops.h"
#include "common/model/rng.h"
#include "test.h"

// The model the finite differences run on: T = 5 fits in one flash tile; T = 37 spans two
// (FLASH_TILE 32), so the online softmax's rescaling and the skipped tile are in the check.
static GptConfig cfg = {.vocab = GPT_VOCAB, .seq = 5, .layers = 2, .dim = 8, .heads = 2};
enum { B = 3, MAX_SEQ = 37 };

static uint8_t tokens[B * MAX_SEQ], targets[B * MAX_SEQ];

// The training loss: the mean cross-entropy, plus with --moe the weighted load-balancing loss
// of the pass (the mean over blocks, gpt.h's GptMoeStats).
static double loss_of(Gpt *g, GptActs *a) {
    gpt_moe_stats_reset(&g->moe, &cfg);
    double ce = gpt_forward(g, a, tokens, targets, NULL) / (B * cfg.seq);
    return cfg.experts > 0 ? ce + cfg.aux_weight * g->moe.aux_sum / g->moe.passes : ce;
}

static int close_enough(double num, double ana) {
    double m = fabs(num) > fabs(ana) ? fabs(num) : fabs(ana);
    return fabs(num - ana) <= 2e-3 * m + 2e-4;
}

// moe: NULL, the dense MLP; else the experts of every block (E, K, H, capacity, aux weight).
static void check_gradients(int attn, int seq, const GptConfig *moe) {
    cfg.attn = attn;
    cfg.seq = seq;
    cfg.experts = moe ? moe->experts : 0, cfg.topk = moe ? moe->topk : 0, cfg.expert_dim = moe ? moe->expert_dim : 0;
    cfg.capacity = moe ? moe->capacity : 0, cfg.aux_weight = moe ? moe->aux_weight : 0;
    printf("# finite differences, %s attention, T = %d%s\n", gpt_attn_name(attn), seq, moe ? ", experts" : "");
    Mem mem;
    mem_init(&mem, NULL);
    Gpt g;
    gpt_create(&g, &cfg, &mem, 7);
    GptActs a;
    gpt_acts_alloc(&a, &cfg, B, &mem);
    Rng rng;
    rng_seed(&rng, 42);
    // Tokens from a small range so that wte rows are hit several times; random targets.
    for (int i = 0; i < B * cfg.seq; i++) {
        tokens[i] = (uint8_t)(rng_u64(&rng) % 6);
        targets[i] = (uint8_t)(rng_u64(&rng) % 6);
    }
    // Larger, non-trivial weights (LayerNorm gains and biases too), see the header comment.
    for (int l = 0; l < g.nlayers; l++)
        for (size_t i = 0; i < gpt_layer_size(&cfg, l); i++) g.params[l][i] = (float)(0.3 * rng_normal(&rng)) + g.params[l][i];

    gpt_zero_grads(&g);
    gpt_forward(&g, &a, tokens, targets, NULL);
    gpt_backward(&g, &a, tokens, targets, 1.0f / (B * cfg.seq), NULL);
    if (moe) {  // the routing is one the checks bite on
        EXPECT(moe->capacity == 0 ? g.moe.dropped == 0 : g.moe.dropped > 0,
               "experts E=%d K=%d capacity %g: %lld of %lld assignments dropped", cfg.experts, cfg.topk, cfg.capacity,
               (long long)g.moe.dropped, (long long)g.moe.assignments);
    }

    const float eps = 1e-3f;
    for (int l = 0; l < g.nlayers; l++) {
        GptTensor t[GPT_MAX_TENSORS];
        int n = gpt_layer_tensors(&cfg, l, t);
        for (int k = 0; k < n; k++) {
            char name[64];
            gpt_tensor_name(name, sizeof name, &cfg, l, &t[k]);
            float *p = g.params[l] + t[k].offset;
            const float *grad = g.grads[l] + t[k].offset;
            // Directional derivative along a random direction over the whole tensor.
            float *u = malloc(t[k].count * sizeof(float));
            double ana = 0.0;
            for (size_t i = 0; i < t[k].count; i++) {
                u[i] = (float)rng_normal(&rng);
                ana += (double)grad[i] * u[i];
            }
            float *saved = malloc(t[k].count * sizeof(float));
            memcpy(saved, p, t[k].count * sizeof(float));
            for (size_t i = 0; i < t[k].count; i++) p[i] = saved[i] + eps * u[i];
            double lp = loss_of(&g, &a);
            for (size_t i = 0; i < t[k].count; i++) p[i] = saved[i] - eps * u[i];
            double lm = loss_of(&g, &a);
            memcpy(p, saved, t[k].count * sizeof(float));
            double num = (lp - lm) / (2.0 * eps);
            EXPECT(close_enough(num, ana), "%s attention, T=%d, %s: directional derivative, analytic %.6g vs numeric %.6g",
                   gpt_attn_name(attn), seq, name, ana, num);

            // Three single elements: catches an error that a random direction could average out.
            int all_ok = 1;
            double worst = -1, worst_a = 0, worst_n = 0;
            for (int s = 0; s < 3; s++) {
                size_t i = rng_u64(&rng) % t[k].count;
                float keep = p[i];
                p[i] = keep + eps;
                double lp1 = loss_of(&g, &a);
                p[i] = keep - eps;
                double lm1 = loss_of(&g, &a);
                p[i] = keep;
                double n1 = (lp1 - lm1) / (2.0 * eps);
                all_ok &= close_enough(n1, grad[i]);
                if (fabs(n1 - grad[i]) > worst) {
                    worst = fabs(n1 - grad[i]);
                    worst_a = grad[i];
                    worst_n = n1;
                }
            }
            EXPECT(all_ok, "%s attention, T=%d, %s: 3 single elements match finite differences (worst: analytic %.6g, "
                   "numeric %.6g)", gpt_attn_name(attn), seq, name, worst_a, worst_n);
            free(u);
            free(saved);
        }
    }
    gpt_acts_free(&a, &mem);
    gpt_destroy(&g);
    EXPECT(mem_total(&mem) == 0, "every buffer the model allocated was freed");
    mem_destroy(&mem);
    cfg.experts = 0;
}

// One expert chosen by every token, as wide as the dense MLP, is the dense MLP: the same
// weights give the same loss and the same gradients, bit for bit (its weight is exactly 1,
// and the router's softmax over one expert has no gradient at all, aux loss included).
static void check_one_expert_is_dense(void) {
    GptConfig d = {.vocab = GPT_VOCAB, .seq = 7, .layers = 2, .dim = 8, .heads = 2, .attn = GPT_ATTN_FLASH};
    GptConfig m = d;
    m.experts = 1, m.topk = 1, m.expert_dim = 4 * d.dim, m.aux_weight = 0.5;
    Mem mem;
    mem_init(&mem, NULL);
    Gpt gd, gm;
    gpt_create(&gd, &d, &mem, 3);
    gpt_create(&gm, &m, &mem, 3);
    GptTensor td[GPT_MAX_TENSORS], tm[GPT_MAX_TENSORS];
    int nd = gpt_layer_tensors(&d, 1, td), nm = gpt_layer_tensors(&m, 1, tm);
    EXPECT(nd == 12 && nm == 13 && !strcmp(tm[8].name, "mlp.router.weight") && tm[9].ndim == 3 && tm[9].shape[0] == 1 &&
               tm[9].shape[1] == 4 * d.dim && tm[9].shape[2] == d.dim,
           "a block of one expert has the router after ln_2, then the experts' c_fc [1, 4C, C] and the rest");
    EXPECT(gpt_layer_size(&m, 1) == gpt_layer_size(&d, 1) + (size_t)d.dim, "and is the dense block plus the router's C floats");
    // The dense weights into the MoE model: the block's tensors before the MLP, then the MLP's
    // four after the router's C floats (the same order and shapes, E = 1).
    for (int l = 0; l < gd.nlayers; l++) {
        if (l >= 1 && l <= d.layers) {
            size_t before = td[8].offset, mlp = gpt_layer_size(&d, 1) - before;
            memcpy(gm.params[l], gd.params[l], before * sizeof(float));
            memcpy(gm.params[l] + before + d.dim, gd.params[l] + before, mlp * sizeof(float));
        } else {
            memcpy(gm.params[l], gd.params[l], gpt_layer_size(&d, l) * sizeof(float));
        }
    }
    GptActs ad, am;
    gpt_acts_alloc(&ad, &d, B, &mem);
    gpt_acts_alloc(&am, &m, B, &mem);
    Rng rng;
    rng_seed(&rng, 5);
    for (int i = 0; i < B * d.seq; i++) tokens[i] = (uint8_t)(rng_u64(&rng) % 256), targets[i] = (uint8_t)(rng_u64(&rng) % 256);
    gpt_zero_grads(&gd), gpt_zero_grads(&gm);
    gpt_moe_stats_reset(&gm.moe, &m);
    double ld = gpt_forward(&gd, &ad, tokens, targets, NULL), lm = gpt_forward(&gm, &am, tokens, targets, NULL);
    gpt_backward(&gd, &ad, tokens, targets, 1.0f / (B * d.seq), NULL);
    gpt_backward(&gm, &am, tokens, targets, 1.0f / (B * d.seq), NULL);
    EXPECT(ld == lm, "one expert: the loss sum %.9g equals the dense MLP's %.9g", lm, ld);
    EXPECT(gm.moe.aux_sum == 1.0 && gm.moe.dropped == 0, "one expert: the aux loss is exactly 1 (%.9g), nothing dropped",
           gm.moe.aux_sum);
    int same = 1, router_zero = 1;
    for (int l = 0; l < gd.nlayers; l++) {
        if (l >= 1 && l <= d.layers) {
            size_t before = td[8].offset, mlp = gpt_layer_size(&d, 1) - before;
            same &= !memcmp(gm.grads[l], gd.grads[l], before * sizeof(float)) &&
                    !memcmp(gm.grads[l] + before + d.dim, gd.grads[l] + before, mlp * sizeof(float));
            for (int c = 0; c < d.dim; c++) router_zero &= gm.grads[l][before + c] == 0.0f;
        } else {
            same &= !memcmp(gm.grads[l], gd.grads[l], gpt_layer_size(&d, l) * sizeof(float));
        }
    }
    EXPECT(same, "one expert: every gradient equals the dense model's, bit for bit");
    EXPECT(router_zero, "one expert: the router's gradient is exactly 0");
    gpt_acts_free(&ad, &mem), gpt_acts_free(&am, &mem);
    gpt_destroy(&gd), gpt_destroy(&gm);
    mem_destroy(&mem);
}

static void check_layout(void) {
    // Psi = wte + wpe + L * (12C^2 + 13C) + ln_f + lm_head, the closed form of labs/DESIGN.md, The model
    GptConfig c = {.vocab = 256, .seq = 64, .layers = 3, .dim = 48, .heads = 4};
    size_t V = 256, T = 64, L = 3, C = 48;
    size_t psi = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C + V * C;
    EXPECT(gpt_num_params(&c) == psi, "parameter count %zu equals the closed form %zu", gpt_num_params(&c), psi);
    EXPECT(gpt_layer_size(&c, 1) == 12 * C * C + 13 * C, "a block holds 12C^2 + 13C parameters");
    // The named views point where the tensor table says.
    float *base = malloc(gpt_num_params(&c) * sizeof *base);  // room for any view's pointers
    BlockView v = gpt_block_view(&c, base);
    EXPECT(v.qkv_w - base == (ptrdiff_t)(2 * C), "c_attn.weight follows ln_1 weight and bias");
    EXPECT(v.mproj_b - base == (ptrdiff_t)(12 * C * C + 12 * C), "mlp.c_proj.bias is the last C floats of a block");
    HeadView h = gpt_head_view(&c, base);
    EXPECT(h.head_w - base == (ptrdiff_t)(2 * C), "lm_head.weight follows ln_f");
    free(base);
    char name[64];
    GptTensor t[GPT_MAX_TENSORS];
    gpt_layer_tensors(&c, 2, t);
    gpt_tensor_name(name, sizeof name, &c, 2, &t[8]);
    EXPECT(strcmp(name, "h.1.mlp.c_fc.weight") == 0, "layer 2 tensor 8 is named h.1.mlp.c_fc.weight (got %s)", name);
    // Activations: per token C (embedding) + L(16C + 4 + NH*T) + C + 2 + V (head).
    size_t per_token = C + L * (16 * C + 4 + 4 * T) + C + 2 + V;
    EXPECT(gpt_acts_bytes(&c, 5) == 4 * 5 * T * per_token, "activation bytes equal the closed form");
    // Flash attention keeps one log-sum-exp per head and token instead of NH*T probabilities.
    c.attn = GPT_ATTN_FLASH;
    size_t flash_per_token = C + L * (16 * C + 4 + 4) + C + 2 + V;
    EXPECT(gpt_acts_bytes(&c, 5) == 4 * 5 * T * flash_per_token, "flash: activation bytes equal 4 L(16C+4+NH) per token");
    EXPECT(gpt_acts_bytes(&c, 5) + 4 * 5 * T * L * 4 * (T - 1) == 4 * 5 * T * per_token,
           "flash saves exactly B T L NH (T-1) floats fewer than naive");
    // --mixed keeps a block's ln1, atty, ln2, fch, fch_gelu (11C), with flash qkv (3C), and the
    // head's lnf (C) as bf16s: 2 bytes a value fewer each.
    c.mixed = 1;
    EXPECT(gpt_acts_bytes(&c, 5) == 4 * 5 * T * flash_per_token - 2 * 5 * T * (L * 14 * C + C),
           "--mixed: 2 B T (14 L C + C) bytes fewer (ln1, qkv, atty, ln2, fch, fch_gelu, lnf as bf16s)");
    c.attn = GPT_ATTN_NAIVE;
    EXPECT(gpt_acts_bytes(&c, 5) == 4 * 5 * T * per_token - 2 * 5 * T * (L * 11 * C + C),
           "--mixed --attn naive: 2 B T (11 L C + C) bytes fewer (qkv stays fp32: naive attention's products are)");
}

static void check_matmul(void) {
    // The blocked kernel against the textbook loop, on sizes that leave partial tiles
    // everywhere, both with A and with A transposed. Same order of summation per element,
    // so they agree to within a few ulps (FMA contraction may differ).
    int M = 7, N = 130, K = 300;
    Rng rng;
    rng_seed(&rng, 3);
    float *A = malloc(sizeof(float) * M * K), *Bm = malloc(sizeof(float) * K * N);
    float *C1 = malloc(sizeof(float) * M * N), *C2 = malloc(sizeof(float) * M * N);
    for (int i = 0; i < M * K; i++) A[i] = (float)rng_normal(&rng);
    for (int i = 0; i < K * N; i++) Bm[i] = (float)rng_normal(&rng);
    for (int trans = 0; trans <= 1; trans++) {
        for (int i = 0; i < M * N; i++) C1[i] = C2[i] = (float)i * 0.01f;  // += must keep what was there
        matmul_acc(C1, A, Bm, M, N, K, trans);
        matmul_acc_naive(C2, A, Bm, M, N, K, trans);
        double worst = 0;
        for (int i = 0; i < M * N; i++) {
            double d = fabs((double)C1[i] - C2[i]) / (1.0 + fabs((double)C2[i]));
            if (d > worst) worst = d;
        }
        EXPECT(worst < 1e-5, "blocked matmul equals the naive loop (a_trans=%d, worst rel diff %.2g)", trans, worst);
    }
    free(A); free(Bm); free(C1); free(C2);
}

// ---- flash attention against naive attention and against double precision ------------------

// A shape's random inputs and its reference: q, k, v of a few units (the softmax neither
// uniform nor one-hot) and do, and attention_reference_as()'s out, lse and dqkv.
typedef struct {
    float *qkv, *dout;
    double *out, *lse, *dqkv;
} AttnCase;

static void attention_inputs(AttnCase *a, Rng *rng, int Bn, int T, int C) {
    size_t nqkv = (size_t)Bn * T * 3 * C, nout = (size_t)Bn * T * C;
    a->qkv = malloc(sizeof(float) * nqkv), a->dout = malloc(sizeof(float) * nout);
    for (size_t i = 0; i < nqkv; i++) a->qkv[i] = (float)(1.5 * rng_normal(rng));
    for (size_t i = 0; i < nout; i++) a->dout[i] = (float)rng_normal(rng);
}

static void attention_expect(AttnCase *a, const float *qkv, const float *dout, int Bn, int T, int C, int NH,
                             int rounded) {
    a->out = malloc(sizeof(double) * Bn * T * C), a->lse = malloc(sizeof(double) * Bn * NH * T);
    a->dqkv = malloc(sizeof(double) * Bn * T * 3 * C);
    attention_reference_as(a->out, a->lse, a->dqkv, qkv, dout, Bn, T, C, NH, rounded);
}

static void attention_case_free(AttnCase *a) {
    free(a->qkv), free(a->dout), free(a->out), free(a->lse), free(a->dqkv);
    memset(a, 0, sizeof *a);
}

// The largest |x - ref| / (1 + |ref|) over n elements, and how many x are not finite (a
// kernel that leaves an element unwritten leaves the NaN it was poisoned with).
static double worst_rel(const float *x, const double *ref, size_t n, size_t *nonfinite) {
    double worst = 0;
    *nonfinite = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) {
            (*nonfinite)++;
            continue;
        }
        double d = fabs((double)x[i] - ref[i]) / (1.0 + fabs(ref[i]));
        if (d > worst) worst = d;
    }
    return worst;
}

static float *floats_of(size_t n, float fill) {
    float *p = malloc(sizeof(float) * (n ? n : 1));
    for (size_t i = 0; i < n; i++) p[i] = fill;
    return p;
}

// Tolerance: every output is a sum of at most T products of fp32 values of order 1, each
// rounded (~6e-8 relative); over T <= 130 terms and the exp/log of the softmax that stays
// well under 1e-5 relative to 1 + |value|, while a wrong scale, a missed rescale or a skipped
// tile is off by 1e-2 or more.
#define ATTN_TOL 1e-5

static void check_flash_attention(void) {
    struct { int B, T, C, NH; const char *why; } shapes[] = {
        {1, 1, 4, 1, "T = 1: one query, one key"},
        {2, 5, 6, 2, "T inside one tile, hs = 3 (odd), B = 2"},
        {1, 32, 8, 2, "T exactly one tile"},
        {1, 33, 8, 2, "T one more than a tile"},
        {2, 70, 6, 3, "T over three tiles (the last partial), hs = 2, B = 2, NH = 3"},
        {1, 96, 3, 3, "hs = 1, three full tiles"},
        {3, 130, 10, 2, "B = 3, hs = 5, five tiles"},
    };
    Rng rng;
    rng_seed(&rng, 11);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int Bn = shapes[si].B, T = shapes[si].T, C = shapes[si].C, NH = shapes[si].NH, hs = C / NH;
        size_t nqkv = (size_t)Bn * T * 3 * C, nout = (size_t)Bn * T * C, nlse = (size_t)Bn * NH * T;
        AttnCase ac;
        attention_inputs(&ac, &rng, Bn, T, C);
        attention_expect(&ac, ac.qkv, ac.dout, Bn, T, C, NH, 0);
        const float *qkv = ac.qkv, *dout = ac.dout;
        const double *out_d = ac.out, *lse_d = ac.lse, *dqkv_d = ac.dqkv;

        float *out_n = floats_of(nout, NAN), *att = floats_of((size_t)Bn * NH * T * T, NAN);
        float *dqkv_n = floats_of(nqkv, NAN), *scratch_n = floats_of(2 * (size_t)T, NAN);
        attention_forward(out_n, att, qkv, Bn, T, C, NH);
        attention_backward(dqkv_n, dout, qkv, att, Bn, T, C, NH, scratch_n);

        // Poisoned with NaN: an output element the kernels do not write stays NaN. The
        // scratch is exactly FLASH_SCRATCH_FLOATS (the sanitizer catches a write past it).
        float *out_f = floats_of(nout, NAN), *lse = floats_of(nlse, NAN), *dqkv_f = floats_of(nqkv, NAN);
        float *scratch = floats_of(FLASH_SCRATCH_FLOATS(T, hs), NAN);
        flash_attention_forward(out_f, lse, qkv, Bn, T, C, NH, 0);
        flash_attention_backward(dqkv_f, dout, qkv, out_f, lse, Bn, T, C, NH, 0, scratch);

        size_t bad_out, bad_lse, bad_dqkv, bad_n;
        double w_out = worst_rel(out_f, out_d, nout, &bad_out);
        double w_lse = worst_rel(lse, lse_d, nlse, &bad_lse);
        double w_dqkv = worst_rel(dqkv_f, dqkv_d, nqkv, &bad_dqkv);
        EXPECT(bad_out + bad_lse + bad_dqkv == 0,
               "flash (B=%d T=%d C=%d NH=%d; %s): every element of out, lse and dqkv written (%zu, %zu, %zu left NaN)",
               Bn, T, C, NH, shapes[si].why, bad_out, bad_lse, bad_dqkv);
        EXPECT(w_out < ATTN_TOL && w_lse < ATTN_TOL && w_dqkv < ATTN_TOL,
               "flash (B=%d T=%d C=%d NH=%d) equals double precision: worst relative error out %.2g, lse %.2g, dqkv %.2g",
               Bn, T, C, NH, w_out, w_lse, w_dqkv);
        double n_out = worst_rel(out_n, out_d, nout, &bad_n);
        double n_dqkv = worst_rel(dqkv_n, dqkv_d, nqkv, &bad_n);
        // Against the naive kernels: both are within ATTN_TOL of the reference, so within
        // 2 ATTN_TOL of each other; compared directly, element by element.
        double w_fn = 0;
        for (size_t i = 0; i < nout; i++) {
            double d = fabs((double)out_f[i] - out_n[i]) / (1.0 + fabs((double)out_n[i]));
            if (!(d <= w_fn)) w_fn = d;
        }
        for (size_t i = 0; i < nqkv; i++) {
            double d = fabs((double)dqkv_f[i] - dqkv_n[i]) / (1.0 + fabs((double)dqkv_n[i]));
            if (!(d <= w_fn)) w_fn = d;
        }
        EXPECT(w_fn < 2 * ATTN_TOL && n_out < ATTN_TOL && n_dqkv < ATTN_TOL,
               "flash (B=%d T=%d C=%d NH=%d) equals naive attention to fp32 rounding: worst %.2g (naive vs double: "
               "out %.2g, dqkv %.2g)", Bn, T, C, NH, w_fn, n_out, n_dqkv);

        // Deterministic: a second run gives the same bits.
        float *out_2 = floats_of(nout, NAN), *lse_2 = floats_of(nlse, NAN), *dqkv_2 = floats_of(nqkv, NAN);
        flash_attention_forward(out_2, lse_2, qkv, Bn, T, C, NH, 0);
        flash_attention_backward(dqkv_2, dout, qkv, out_2, lse_2, Bn, T, C, NH, 0, scratch);
        EXPECT(!memcmp(out_2, out_f, nout * sizeof(float)) && !memcmp(lse_2, lse, nlse * sizeof(float)) &&
                   !memcmp(dqkv_2, dqkv_f, nqkv * sizeof(float)),
               "flash (B=%d T=%d C=%d NH=%d) gives the same bits twice", Bn, T, C, NH);

        attention_case_free(&ac);
        free(out_n); free(att); free(dqkv_n); free(scratch_n);
        free(out_f); free(lse); free(dqkv_f); free(scratch);
        free(out_2); free(lse_2); free(dqkv_2);
    }
}

// Flash with bf16 operands (bf16_in = 1, --mixed) against the double-precision definition
// with the same roundings (attention_reference_as, bf16 = 1). Forward, the kernel also rounds P
// against each tile's running max, which the definition does not: each term of o off by at
// most 2^-9 of itself, so o within ATTN_BF16_TOL of it. Backward, every rounding is the
// definition's, so the two differ only where an fp32 value and its double land on two sides
// of a bf16 rounding boundary (a term of dq off by 2^-8 of itself, in sums that cancel), and
// through o's own difference in D: ATTN_BF16_TOL too (measured at worst: o 2e-3, dqkv 1.1e-2).
// The roundings must be there: the fp32 kernel on the same inputs, and the bf16 kernel against
// the unrounded definition, are each several times further (measured: 4 to 10 times).
#define ATTN_BF16_TOL 2e-2

static void check_flash_attention_bf16(void) {
    struct { int B, T, C, NH; } shapes[] = {{1, 1, 4, 1}, {2, 70, 6, 3}, {1, 96, 16, 2}, {3, 130, 10, 2}};
    Rng rng;
    rng_seed(&rng, 12);
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int Bn = shapes[si].B, T = shapes[si].T, C = shapes[si].C, NH = shapes[si].NH, hs = C / NH;
        size_t nqkv = (size_t)Bn * T * 3 * C, nout = (size_t)Bn * T * C, nlse = (size_t)Bn * NH * T;
        AttnCase ac, unrounded = {0};
        attention_inputs(&ac, &rng, Bn, T, C);
        attention_expect(&ac, ac.qkv, ac.dout, Bn, T, C, NH, 1);
        attention_expect(&unrounded, ac.qkv, ac.dout, Bn, T, C, NH, 0);
        const float *qkv = ac.qkv, *dout = ac.dout;
        const double *out_d = ac.out, *lse_d = ac.lse, *dqkv_d = ac.dqkv, *out_u = unrounded.out;
        const double *dqkv_u = unrounded.dqkv;

        float *scratch = floats_of(FLASH_SCRATCH_FLOATS(T, hs), NAN);
        float *out_b = floats_of(nout, NAN), *lse_b = floats_of(nlse, NAN), *dqkv_b = floats_of(nqkv, NAN);
        flash_attention_forward(out_b, lse_b, qkv, Bn, T, C, NH, 1);
        flash_attention_backward(dqkv_b, dout, qkv, out_b, lse_b, Bn, T, C, NH, 1, scratch);
        float *out_f = floats_of(nout, NAN), *lse_f = floats_of(nlse, NAN), *dqkv_f = floats_of(nqkv, NAN);
        flash_attention_forward(out_f, lse_f, qkv, Bn, T, C, NH, 0);
        flash_attention_backward(dqkv_f, dout, qkv, out_f, lse_f, Bn, T, C, NH, 0, scratch);

        size_t bad[3] = {0, 0, 0}, ignored;
        double b_out = worst_rel(out_b, out_d, nout, &bad[0]), b_lse = worst_rel(lse_b, lse_d, nlse, &bad[1]);
        double b_dqkv = worst_rel(dqkv_b, dqkv_d, nqkv, &bad[2]);
        double worst_b = fmax(b_out, fmax(b_lse, b_dqkv));
        EXPECT(bad[0] + bad[1] + bad[2] == 0 && worst_b < ATTN_BF16_TOL,
               "flash, bf16 operands (B=%d T=%d C=%d NH=%d): within %g of double precision with the same roundings "
               "(out %.2g, lse %.2g, dqkv %.2g; %zu not finite)",
               Bn, T, C, NH, ATTN_BF16_TOL, b_out, b_lse, b_dqkv, bad[0] + bad[1] + bad[2]);
        double f_out = worst_rel(out_f, out_d, nout, &ignored), f_dqkv = worst_rel(dqkv_f, dqkv_d, nqkv, &ignored);
        double u_out = worst_rel(out_b, out_u, nout, &ignored), u_dqkv = worst_rel(dqkv_b, dqkv_u, nqkv, &ignored);
        EXPECT(f_out > 2 * b_out && f_dqkv > 2 * b_dqkv && u_out > 2 * b_out && u_dqkv > 2 * b_dqkv,
               "flash, bf16 operands (B=%d T=%d C=%d NH=%d) rounds them: out %.2g and dqkv %.2g from the rounded "
               "definition; the fp32 kernel %.2g and %.2g; the bf16 kernel from the unrounded definition %.2g and %.2g",
               Bn, T, C, NH, b_out, b_dqkv, f_out, f_dqkv, u_out, u_dqkv);
        attention_case_free(&ac), attention_case_free(&unrounded);
        free(scratch); free(out_b); free(lse_b); free(dqkv_b); free(out_f); free(lse_f); free(dqkv_f);
    }
}

// ---- bf16 operands (--mixed) ------------------------------------------------------------
// linear_forward and linear_backward with bf16_in = 1 against double-precision sums of the
// bf16-rounded operands (bf16_round, computed here element by element): a product of two
// bf16s is exact, so the kernels may differ from the reference only by their fp32 sums
// (K <= 70 terms: well under 1e-5 normwise). The bias and its gradient are fp32: the
// gradient is the column sums of the unrounded dout. And the rounding must matter: the fp32
// kernels, on the same inputs, are far (> 1e-4) from the bf16 reference.

// Largest |x - ref| over the largest |ref|.
static double normwise(const float *x, const double *ref, size_t n) {
    double d = 0, m = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)x[i] - ref[i]);
        if (!(e <= d)) d = e;  // a NaN makes it NaN
        if (fabs(ref[i]) > m) m = fabs(ref[i]);
    }
    return d / (m > 0 ? m : 1);
}

static void check_linear_bf16(void) {
    const int shapes[][3] = {{37, 19, 70}, {8, 64, 64}, {1, 3, 1}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int N = shapes[si][0], IC = shapes[si][1], OC = shapes[si][2];
        size_t ni = (size_t)N * IC, nw = (size_t)OC * IC, no = (size_t)N * OC;
        Rng r;
        rng_seed(&r, 77 + si);
        float *inp = floats_of(ni, 0), *w = floats_of(nw, 0), *bias = floats_of(OC, 0), *dout = floats_of(no, 0);
        for (size_t i = 0; i < ni; i++) inp[i] = (float)(2 * rng_uniform(&r) - 1);
        for (size_t i = 0; i < nw; i++) w[i] = (float)(2 * rng_uniform(&r) - 1);
        for (int i = 0; i < OC; i++) bias[i] = (float)(2 * rng_uniform(&r) - 1);
        for (size_t i = 0; i < no; i++) dout[i] = (float)(2 * rng_uniform(&r) - 1);
        double *out_d = calloc(no, sizeof *out_d), *dinp_d = calloc(ni, sizeof *dinp_d);
        double *dw_d = calloc(nw, sizeof *dw_d), *db_d = calloc((size_t)OC, sizeof *db_d);
        for (int n = 0; n < N; n++)
            for (int o = 0; o < OC; o++) {
                double s = bias[o];
                for (int k = 0; k < IC; k++)
                    s += (double)bf16_round(inp[(size_t)n * IC + k]) * bf16_round(w[(size_t)o * IC + k]);
                out_d[(size_t)n * OC + o] = s;
            }
        for (int n = 0; n < N; n++)
            for (int k = 0; k < IC; k++) {
                double s = 0;
                for (int o = 0; o < OC; o++)
                    s += (double)bf16_round(dout[(size_t)n * OC + o]) * bf16_round(w[(size_t)o * IC + k]);
                dinp_d[(size_t)n * IC + k] = s;
            }
        for (int o = 0; o < OC; o++) {
            for (int k = 0; k < IC; k++) {
                double s = 1.0;  // dweight starts at 1: the kernel adds to it
                for (int n = 0; n < N; n++)
                    s += (double)bf16_round(dout[(size_t)n * OC + o]) * bf16_round(inp[(size_t)n * IC + k]);
                dw_d[(size_t)o * IC + k] = s;
            }
            double s = 1.0;
            for (int n = 0; n < N; n++) s += dout[(size_t)n * OC + o];
            db_d[o] = s;
        }

        float *scratch = floats_of(linear_scratch_floats(N, IC, OC, 1), NAN);
        float *out = floats_of(no, NAN), *dinp = floats_of(ni, NAN), *dw = floats_of(nw, 1), *db = floats_of(OC, 1);
        linear_forward(out, inp, w, bias, N, IC, OC, 1, scratch);
        linear_backward(dinp, dw, db, dout, inp, w, N, IC, OC, 1, scratch);
        double e_out = normwise(out, out_d, no), e_dinp = normwise(dinp, dinp_d, ni);
        double e_dw = normwise(dw, dw_d, nw), e_db = normwise(db, db_d, (size_t)OC);
        EXPECT(e_out < 1e-5 && e_dinp < 1e-5 && e_dw < 1e-5 && e_db < 1e-6,
               "linear with bf16 operands (N=%d IC=%d OC=%d) equals double sums of the rounded operands: out %.2g, "
               "dinp %.2g, dweight %.2g; dbias (fp32 dout) %.2g", N, IC, OC, e_out, e_dinp, e_dw, e_db);

        // The same inputs through the fp32 kernels: the rounding is what the bf16 path adds.
        // (Not at N = 1: there dweight's starting 1 outweighs the few terms added to it.)
        float *wt = floats_of(linear_scratch_floats(N, IC, OC, 0), NAN);
        float *out32 = floats_of(no, NAN), *dinp32 = floats_of(ni, NAN), *dw32 = floats_of(nw, 1), *db32 = floats_of(OC, 1);
        linear_forward(out32, inp, w, bias, N, IC, OC, 0, wt);
        linear_backward(dinp32, dw32, db32, dout, inp, w, N, IC, OC, 0, NULL);
        double f_out = normwise(out32, out_d, no), f_dinp = normwise(dinp32, dinp_d, ni), f_dw = normwise(dw32, dw_d, nw);
        EXPECT(f_out > 1e-4 && f_dinp > 1e-4 && (N == 1 || f_dw > 1e-4) && !memcmp(db32, db, (size_t)OC * sizeof(float)),
               "linear in fp32 (N=%d IC=%d OC=%d) is off the bf16 reference (out %.2g, dinp %.2g, dweight %.2g: the "
               "rounding happens), its dbias has the bf16 path's bits", N, IC, OC, f_out, f_dinp, f_dw);

        // The input given as bf16 (an activation kept so, gpt.h): the very same bits.
        bf16 *inp16 = malloc(sizeof(bf16) * (ni ? ni : 1));
        to_bf16(inp16, inp, ni);
        float *out16 = floats_of(no, NAN), *dinp16 = floats_of(ni, NAN), *dw16 = floats_of(nw, 1);
        float *db16 = floats_of(OC, 1);
        linear_forward_bf16(out16, inp16, w, bias, N, IC, OC, scratch);
        linear_backward_bf16(dinp16, dw16, db16, dout, inp16, w, N, IC, OC, scratch);
        EXPECT(!memcmp(out16, out, no * sizeof(float)) && !memcmp(dinp16, dinp, ni * sizeof(float)) &&
                   !memcmp(dw16, dw, nw * sizeof(float)) && !memcmp(db16, db, (size_t)OC * sizeof(float)),
               "linear_forward_bf16 and linear_backward_bf16 (N=%d IC=%d OC=%d) on the input's bf16s: the bits of "
               "bf16_in = 1 on the fp32 input", N, IC, OC);
        // The output in bf16 too (c_attn's and c_fc's under --mixed, as autocast's): the sum
        // linear_forward_bf16 takes with the bias rounded to bf16 first, rounded once.
        bf16 *y16 = malloc(sizeof(bf16) * (no ? no : 1)), *want16 = malloc(sizeof(bf16) * (no ? no : 1));
        float *bias_r = floats_of(OC, 0), *out_r = floats_of(no, NAN);
        for (int o = 0; o < OC; o++) bias_r[o] = bf16_round(bias[o]);
        linear_forward_bf16(out_r, inp16, w, bias_r, N, IC, OC, scratch);
        to_bf16(want16, out_r, no);
        linear_forward_bf16_out(y16, inp16, w, bias, N, IC, OC, scratch);
        size_t unrounded_bias = 0;  // where rounding the sum with the fp32 bias would differ
        for (size_t i = 0; i < no; i++) unrounded_bias += bf16_from_float(out16[i]) != want16[i];
        EXPECT(!memcmp(y16, want16, no * sizeof(bf16)) && (no < 64 || unrounded_bias > 0),
               "linear_forward_bf16_out (N=%d IC=%d OC=%d): bf16 of the sum with the bias rounded to bf16, bit for bit "
               "(with the fp32 bias %zu of %zu outputs would differ)", N, IC, OC, unrounded_bias, no);
        free(y16); free(want16); free(bias_r); free(out_r);
        free(inp16); free(out16); free(dinp16); free(dw16); free(db16);
        free(inp); free(w); free(bias); free(dout); free(out_d); free(dinp_d); free(dw_d); free(db_d);
        free(scratch); free(out); free(dinp); free(dw); free(db);
        free(wt); free(out32); free(dinp32); free(dw32); free(db32);
    }
}

int main(void) {
    check_layout();
    check_matmul();
    check_flash_attention();
    check_flash_attention_bf16();
    check_linear_bf16();
    check_gradients(GPT_ATTN_NAIVE, 5, NULL);
    check_gradients(GPT_ATTN_FLASH, 5, NULL);
    check_gradients(GPT_ATTN_FLASH, MAX_SEQ, NULL);
    // --moe: four experts, two a token, narrower than the dense MLP, and a large aux weight so
    // that its gradient counts; then one a token with a capacity that drops some.
    check_gradients(GPT_ATTN_FLASH, 5, &(GptConfig){.experts = 4, .topk = 2, .expert_dim = 12, .aux_weight = 0.5});
    check_gradients(GPT_ATTN_NAIVE, 5, &(GptConfig){.experts = 3, .topk = 1, .expert_dim = 16, .capacity = 1.0,
                                                   .aux_weight = 0.1});
    check_one_expert_is_dense();
    return test_done();
}
