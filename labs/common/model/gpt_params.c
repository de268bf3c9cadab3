// gpt_params.c — see gpt.h: the parameters' layout (each layer's tensors in buffer order,
// their names, the views into a layer's flat buffer) and their seeded initialization.
#include "gpt.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/harness/check.h"
#include "rng.h"

// ---------------------------------------------------------------------------------------
// Parameter layout
// ---------------------------------------------------------------------------------------

enum { INIT_ZERO, INIT_ONE, INIT_NORMAL, INIT_RESIDUAL };

typedef struct {
    const char *name;
    int rows, cols;  // cols 0 for a vector
    int init;
    int stack;       // the experts' tensors (--moe): the experts held, of [rows, cols] stacked; else 0
    int skip;        // experts held elsewhere before them (lab-ep): their init values are drawn, not kept
} TensorSpec;

static TensorSpec tensor(const char *name, int rows, int cols, int init) {
    return (TensorSpec){name, rows, cols, init, 0, 0};
}
// The experts this model holds (moe.h: all E, or under expert parallelism E / ranks from
// the first it holds).
static TensorSpec stacked(const char *name, const MoeConfig *m, int rows, int cols, int init) {
    return (TensorSpec){name, rows, cols, init, moe_local_experts(m), moe_first_expert(m)};
}

// The tensors of each kind of layer, in buffer order.
static int layer_specs(const GptConfig *c, int layer, TensorSpec out[GPT_MAX_TENSORS]) {
    int C = c->dim, V = c->vocab, T = c->seq;
    int n = 0;
    if (layer == 0) {
        out[n++] = tensor("wte", V, C, INIT_NORMAL);
        out[n++] = tensor("wpe", T, C, INIT_NORMAL);
    } else if (layer <= c->layers) {
        out[n++] = tensor("ln_1.weight", C, 0, INIT_ONE);
        out[n++] = tensor("ln_1.bias", C, 0, INIT_ZERO);
        out[n++] = tensor("attn.c_attn.weight", 3 * C, C, INIT_NORMAL);
        out[n++] = tensor("attn.c_attn.bias", 3 * C, 0, INIT_ZERO);
        out[n++] = tensor("attn.c_proj.weight", C, C, INIT_RESIDUAL);
        out[n++] = tensor("attn.c_proj.bias", C, 0, INIT_ZERO);
        out[n++] = tensor("ln_2.weight", C, 0, INIT_ONE);
        out[n++] = tensor("ln_2.bias", C, 0, INIT_ZERO);
        if (c->experts > 0) {  // moe.h's flat layout: the router, then the experts' four, stacked
            MoeConfig m = gpt_moe_config(c);
            int H = c->expert_dim;
            out[n++] = tensor("mlp.router.weight", m.E, C, INIT_NORMAL);
            out[n++] = stacked("mlp.experts.c_fc.weight", &m, H, C, INIT_NORMAL);
            out[n++] = stacked("mlp.experts.c_fc.bias", &m, H, 0, INIT_ZERO);
            out[n++] = stacked("mlp.experts.c_proj.weight", &m, C, H, INIT_RESIDUAL);
            out[n++] = stacked("mlp.experts.c_proj.bias", &m, C, 0, INIT_ZERO);
            return n;
        }
        out[n++] = tensor("mlp.c_fc.weight", 4 * C, C, INIT_NORMAL);
        out[n++] = tensor("mlp.c_fc.bias", 4 * C, 0, INIT_ZERO);
        out[n++] = tensor("mlp.c_proj.weight", C, 4 * C, INIT_RESIDUAL);
        out[n++] = tensor("mlp.c_proj.bias", C, 0, INIT_ZERO);
    } else {
        out[n++] = tensor("ln_f.weight", C, 0, INIT_ONE);
        out[n++] = tensor("ln_f.bias", C, 0, INIT_ZERO);
        out[n++] = tensor("lm_head.weight", V, C, INIT_NORMAL);
    }
    return n;
}

int gpt_layer_count(const GptConfig *c) { return c->layers + 2; }

int gpt_layer_tensors(const GptConfig *c, int layer, GptTensor out[GPT_MAX_TENSORS]) {
    TensorSpec spec[GPT_MAX_TENSORS];
    int n = layer_specs(c, layer, spec);
    size_t offset = 0;
    for (int i = 0; i < n; i++) {
        const TensorSpec *p = &spec[i];
        size_t count = (size_t)(p->stack ? p->stack : 1) * p->rows * (p->cols ? (size_t)p->cols : 1);
        out[i] = (GptTensor){p->name, offset, count, (p->cols ? 2 : 1) + (p->stack > 0), {0}};
        int d = 0;
        if (p->stack) out[i].shape[d++] = p->stack;
        out[i].shape[d++] = p->rows;
        if (p->cols) out[i].shape[d++] = p->cols;
        offset += count;
    }
    return n;
}

size_t gpt_layer_size(const GptConfig *c, int layer) {
    GptTensor t[GPT_MAX_TENSORS];
    int n = gpt_layer_tensors(c, layer, t);
    return t[n - 1].offset + t[n - 1].count;
}

size_t gpt_num_params(const GptConfig *c) {
    size_t total = 0;
    for (int l = 0; l < gpt_layer_count(c); l++) total += gpt_layer_size(c, l);
    return total;
}

void gpt_tensor_name(char *buf, size_t n, const GptConfig *c, int layer, const GptTensor *t) {
    if (layer >= 1 && layer <= c->layers) snprintf(buf, n, "h.%d.%s", layer - 1, t->name);
    else snprintf(buf, n, "%s", t->name);
}

// The views follow the order of layer_specs; the offsets come from the same table, built
// once per view.
EmbedView gpt_embed_view(const GptConfig *c, float *flat) {
    GptTensor t[GPT_MAX_TENSORS];
    gpt_layer_tensors(c, 0, t);
    return (EmbedView){flat + t[0].offset, flat + t[1].offset};
}

BlockView gpt_block_view(const GptConfig *c, float *flat) {
    GptTensor t[GPT_MAX_TENSORS];
    gpt_layer_tensors(c, 1, t);
    BlockView v = {0};
    float **field[] = {&v.ln1_w, &v.ln1_b, &v.qkv_w, &v.qkv_b, &v.aproj_w, &v.aproj_b,
                       &v.ln2_w, &v.ln2_b, &v.fc_w,  &v.fc_b,  &v.mproj_w, &v.mproj_b};
    int n = c->experts > 0 ? 8 : 12;  // --moe: the router and the experts follow ln_2, one flat layer (moe.h)
    for (int i = 0; i < n; i++) *field[i] = flat + t[i].offset;
    if (c->experts > 0) v.moe = flat + t[8].offset;
    return v;
}

HeadView gpt_head_view(const GptConfig *c, float *flat) {
    GptTensor t[GPT_MAX_TENSORS];
    gpt_layer_tensors(c, c->layers + 1, t);
    return (HeadView){flat + t[0].offset, flat + t[1].offset, flat + t[2].offset};
}

void gpt_init_layer(const GptConfig *c, int layer, float *flat, uint64_t seed) {
    TensorSpec spec[GPT_MAX_TENSORS];
    GptTensor t[GPT_MAX_TENSORS];
    int n = layer_specs(c, layer, spec);
    gpt_layer_tensors(c, layer, t);
    double residual_std = 0.02 / sqrt(2.0 * c->layers);
    for (int i = 0; i < n; i++) {
        float *p = flat + t[i].offset;
        Rng rng;
        rng_seed(&rng, rng_hash(seed, (uint64_t)layer, (uint64_t)i));
        // An expert-parallel rank draws the values of the experts before its own and drops
        // them: its experts start as the same rows of one model's stacked tensor.
        size_t skip = (size_t)spec[i].skip * spec[i].rows * (spec[i].cols ? (size_t)spec[i].cols : 1);
        if (spec[i].init == INIT_NORMAL || spec[i].init == INIT_RESIDUAL)
            for (size_t j = 0; j < skip; j++) (void)rng_normal(&rng);
        for (size_t j = 0; j < t[i].count; j++) {
            switch (spec[i].init) {
            case INIT_ZERO: p[j] = 0.0f; break;
            case INIT_ONE: p[j] = 1.0f; break;
            case INIT_NORMAL: p[j] = (float)(0.02 * rng_normal(&rng)); break;
            default: p[j] = (float)(residual_std * rng_normal(&rng)); break;
            }
        }
    }
}
