// test_gpt.c — the model's gradients against central finite differences, and its layout.
//
// What this proves: every backward function in core/ computes the derivative of the loss the
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

#include "gpt.h"
#include "ops.h"
#include "rng.h"
#include "test.h"

static const GptConfig cfg = {.vocab = GPT_VOCAB, .seq = 5, .layers = 2, .dim = 8, .heads = 2};
enum { B = 3 };

static uint8_t tokens[B * 5], targets[B * 5];

static double loss_of(Gpt *g, GptActs *a) {
    return gpt_forward(g, a, tokens, targets, NULL) / (B * cfg.seq);
}

static int close_enough(double num, double ana) {
    double m = fabs(num) > fabs(ana) ? fabs(num) : fabs(ana);
    return fabs(num - ana) <= 2e-3 * m + 2e-4;
}

static void check_gradients(void) {
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
            EXPECT(close_enough(num, ana), "%s: directional derivative, analytic %.6g vs numeric %.6g", name, ana, num);

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
            EXPECT(all_ok, "%s: 3 single elements match finite differences (worst: analytic %.6g, numeric %.6g)",
                   name, worst_a, worst_n);
            free(u);
            free(saved);
        }
    }
    gpt_acts_free(&a, &mem);
    gpt_destroy(&g);
    EXPECT(mem_total(&mem) == 0, "every buffer the model allocated was freed");
    mem_destroy(&mem);
}

static void check_layout(void) {
    // Psi = wte + wpe + L * (12C^2 + 13C) + ln_f + lm_head, the closed form of DESIGN.md's model
    GptConfig c = {.vocab = 256, .seq = 64, .layers = 3, .dim = 48, .heads = 4};
    size_t V = 256, T = 64, L = 3, C = 48;
    size_t psi = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C + V * C;
    EXPECT(gpt_num_params(&c) == psi, "parameter count %zu equals the closed form %zu", gpt_num_params(&c), psi);
    EXPECT(gpt_layer_size(&c, 1) == 12 * C * C + 13 * C, "a block holds 12C^2 + 13C parameters");
    // The named views point where the tensor table says.
    float *base = (float *)0 + 1000;
    BlockView v = gpt_block_view(&c, base);
    EXPECT(v.qkv_w - base == (ptrdiff_t)(2 * C), "c_attn.weight follows ln_1 weight and bias");
    EXPECT(v.mproj_b - base == (ptrdiff_t)(12 * C * C + 12 * C), "mlp.c_proj.bias is the last C floats of a block");
    HeadView h = gpt_head_view(&c, base);
    EXPECT(h.head_w - base == (ptrdiff_t)(2 * C), "lm_head.weight follows ln_f");
    char name[64];
    GptTensor t[GPT_MAX_TENSORS];
    gpt_layer_tensors(&c, 2, t);
    gpt_tensor_name(name, sizeof name, &c, 2, &t[8]);
    EXPECT(strcmp(name, "h.1.mlp.c_fc.weight") == 0, "layer 2 tensor 8 is named h.1.mlp.c_fc.weight (got %s)", name);
    // Activations: per token C (embedding) + L(16C + 4 + NH*T) + C + 2 + V (head).
    size_t per_token = C + L * (16 * C + 4 + 4 * T) + C + 2 + V;
    EXPECT(gpt_acts_floats(&c, 5) == 5 * T * per_token, "activation floats equal the closed form");
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

int main(void) {
    check_layout();
    check_matmul();
    check_gradients();
    return test_done();
}
