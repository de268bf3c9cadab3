// gpt.c — see gpt.h: the activations and the passes (the parameters' layout: gpt_params.c).
#include "gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/harness/check.h"
#include "common/harness/hash.h"
#include "ops.h"
#include "rng.h"

// ---------------------------------------------------------------------------------------
// Activations
// ---------------------------------------------------------------------------------------

const char *gpt_attn_name(int attn) { return attn == GPT_ATTN_FLASH ? "flash" : "naive"; }

MoeConfig gpt_moe_config(const GptConfig *c) {
    // The layer runs in fp32 (moe.c): the labs refuse --moe with --mixed (train.c).
    if (c->mixed) die("this is a bug in shardlab", "--moe with --mixed reached the model");
    return (MoeConfig){.C = c->dim, .E = c->experts, .K = c->topk, .H = c->expert_dim, .capacity = c->capacity,
                       .ranks = c->expert_ranks, .rank = c->expert_rank};
}

int gpt_attn_parse(const char *name) {
    if (!strcmp(name, "naive")) return GPT_ATTN_NAIVE;
    if (!strcmp(name, "flash")) return GPT_ATTN_FLASH;
    return -1;
}

size_t gpt_attn_saved_floats(const GptConfig *c, int B, int heads) {
    size_t rows = (size_t)B * heads * c->seq;  // one per (sequence, head, query)
    return c->attn == GPT_ATTN_FLASH ? rows : rows * c->seq;
}

// A block's activations kept in bf16 under --mixed (gpt.h): ln1 (C), atty (C), ln2 (C), fch
// and fch_gelu (4C each) per token, and with flash attention qkv (3C). The head's is lnf (C).
int gpt_keeps_qkv_bf16(const GptConfig *c) { return c->mixed && c->attn == GPT_ATTN_FLASH; }

static size_t block_bf16_per_token(const GptConfig *c) {
    return c->mixed ? (11 + 3 * (size_t)gpt_keeps_qkv_bf16(c)) * (size_t)c->dim : 0;
}

// A block's bytes a token outside the MoE layer: with --moe, the dense MLP's 8C floats
// (fch and fch_gelu) are the layer's instead (moe_acts_bytes, which expert parallelism's
// capacity makes no multiple of the tokens: gpt_block_acts_bytes).
static size_t block_bytes_per_token_but_moe(const GptConfig *c) {
    size_t floats = 16 * (size_t)c->dim + 4 + gpt_attn_saved_floats(c, 1, c->heads) / c->seq;
    if (c->experts > 0) floats -= 8 * (size_t)c->dim;
    size_t halves = block_bf16_per_token(c);
    return 4 * (floats - halves) + 2 * halves;
}

size_t gpt_block_acts_bytes(const GptConfig *c, int B) {
    size_t BT = (size_t)B * c->seq, bytes = BT * block_bytes_per_token_but_moe(c);
    if (c->experts > 0) {
        MoeConfig m = gpt_moe_config(c);
        bytes += moe_acts_bytes(&m, (int)BT);
    }
    return bytes;
}

size_t gpt_block_acts_bytes_per_token(const GptConfig *c) { return gpt_block_acts_bytes(c, 1) / c->seq; }

size_t gpt_head_acts_bytes_per_token(const GptConfig *c) {
    size_t C = (size_t)c->dim, floats = 2 + (size_t)c->vocab;  // lnf's mean and rstd, the probabilities
    return c->mixed ? 2 * C + 4 * floats : 4 * (C + floats);
}

size_t gpt_acts_layers_bytes(const GptConfig *c, int B, int first, int last) {
    int blocks = (last < c->layers ? last : c->layers) - (first > 1 ? first : 1) + 1;
    size_t per_token = 4 * (size_t)c->dim  // x0, or the input
                       + (last == c->layers + 1 ? gpt_head_acts_bytes_per_token(c) : 0);
    return (size_t)B * c->seq * per_token + (size_t)(blocks > 0 ? blocks : 0) * gpt_block_acts_bytes(c, B);
}

size_t gpt_acts_bytes(const GptConfig *c, int B) { return gpt_acts_layers_bytes(c, B, 0, c->layers + 1); }

float *gpt_carve_floats(GptCarve *k, size_t n) {
    float *p = k->floats ? k->floats + k->nfloats : NULL;
    k->nfloats += n;
    return p;
}

bf16 *gpt_carve_halves(GptCarve *k, size_t n) {
    bf16 *p = k->halves ? k->halves + k->nhalves : NULL;
    k->nhalves += n;
    return p;
}

void gpt_carve_block(BlockActs *b, GptCarve *k, const GptConfig *c, int B) {
    size_t BT = (size_t)B * c->seq, C = c->dim;
    int m = c->mixed;
    b->ln1 = m ? NULL : gpt_carve_floats(k, BT * C);
    b->ln1_bf16 = m ? gpt_carve_halves(k, BT * C) : NULL;
    b->ln1_mean = gpt_carve_floats(k, BT);
    b->ln1_rstd = gpt_carve_floats(k, BT);
    b->qkv = gpt_keeps_qkv_bf16(c) ? NULL : gpt_carve_floats(k, BT * 3 * C);
    b->qkv_bf16 = gpt_keeps_qkv_bf16(c) ? gpt_carve_halves(k, BT * 3 * C) : NULL;
    b->lse = b->att = NULL;
    if (c->attn == GPT_ATTN_FLASH) b->lse = gpt_carve_floats(k, gpt_attn_saved_floats(c, B, c->heads));
    else b->att = gpt_carve_floats(k, gpt_attn_saved_floats(c, B, c->heads));
    b->atty = m ? NULL : gpt_carve_floats(k, BT * C);
    b->atty_bf16 = m ? gpt_carve_halves(k, BT * C) : NULL;
    b->res1 = gpt_carve_floats(k, BT * C);
    b->ln2 = m ? NULL : gpt_carve_floats(k, BT * C);
    b->ln2_bf16 = m ? gpt_carve_halves(k, BT * C) : NULL;
    b->ln2_mean = gpt_carve_floats(k, BT);
    b->ln2_rstd = gpt_carve_floats(k, BT);
    memset(&b->moe, 0, sizeof b->moe);
    if (c->experts > 0) {  // the experts' rows in place of the MLP's hidden layer (fp32: gpt_moe_config)
        MoeConfig mc = gpt_moe_config(c);
        float *f = gpt_carve_floats(k, moe_acts_floats(&mc, (int)BT));
        int *n = (int *)gpt_carve_floats(k, moe_acts_ints(&mc, (int)BT));  // ints, 4 bytes as the floats
        if (f) moe_acts_carve(&b->moe, &mc, (int)BT, f, n);
        b->fch = b->fch_gelu = NULL, b->fch_bf16 = b->fch_gelu_bf16 = NULL;
        return;
    }
    b->fch = m ? NULL : gpt_carve_floats(k, BT * 4 * C);
    b->fch_bf16 = m ? gpt_carve_halves(k, BT * 4 * C) : NULL;
    b->fch_gelu = m ? NULL : gpt_carve_floats(k, BT * 4 * C);
    b->fch_gelu_bf16 = m ? gpt_carve_halves(k, BT * 4 * C) : NULL;
}

void gpt_carve_head(HeadActs *h, GptCarve *k, const GptConfig *c, int B) {
    size_t BT = (size_t)B * c->seq, C = c->dim;
    h->lnf = c->mixed ? NULL : gpt_carve_floats(k, BT * C);
    h->lnf_bf16 = c->mixed ? gpt_carve_halves(k, BT * C) : NULL;
    h->lnf_mean = gpt_carve_floats(k, BT);
    h->lnf_rstd = gpt_carve_floats(k, BT);
    h->probs = gpt_carve_floats(k, BT * c->vocab);
}

// The layout of layers first..last (gpt_acts_alloc_layers) from k.
static void carve_layers(GptActs *a, GptCarve *k, const GptConfig *c, int B, int first, int last) {
    size_t BTC = (size_t)B * c->seq * c->dim;
    // The first layer's input: the embedding's output x0 (layers 0 and 1), else what block
    // first-2 would have written.
    if (first <= 1) a->x0 = gpt_carve_floats(k, BTC);
    else a->blocks[first - 2].out = gpt_carve_floats(k, BTC);
    for (int l = first > 1 ? first : 1; l <= last && l <= c->layers; l++) {
        gpt_carve_block(&a->blocks[l - 1], k, c, B);
        a->blocks[l - 1].out = gpt_carve_floats(k, BTC);
    }
    if (last == c->layers + 1) gpt_carve_head(&a->head, k, c, B);
}

void gpt_acts_alloc_layers(GptActs *a, const GptConfig *c, int B, int first, int last, Mem *mem) {
    if (first < 0 || last > c->layers + 1 || first > last)
        die("this is a bug in shardlab", "activations of layers %d..%d of a model of %d", first, last, c->layers + 2);
    memset(a, 0, sizeof *a);
    a->B = B;
    a->blocks = calloc_check((size_t)(c->layers > 0 ? c->layers : 1), sizeof *a->blocks);
    GptCarve count = {0};
    carve_layers(a, &count, c, B, first, last);
    size_t bytes = 4 * count.nfloats + 2 * count.nhalves;
    if (bytes != gpt_acts_layers_bytes(c, B, first, last))
        die("this is a bug in shardlab", "activation layout (%zu bytes) disagrees with gpt_acts_layers_bytes (%zu)",
            bytes, gpt_acts_layers_bytes(c, B, first, last));
    a->buffer = mem_alloc(mem, MEM_ACTS, bytes, "activations");
    GptCarve k = {.floats = a->buffer, .halves = (bf16 *)(a->buffer + count.nfloats)};
    carve_layers(a, &k, c, B, first, last);
}

void gpt_acts_alloc(GptActs *a, const GptConfig *c, int B, Mem *mem) {
    gpt_acts_alloc_layers(a, c, B, 0, c->layers + 1, mem);
}

float *gpt_layer_output(const GptConfig *c, const GptActs *a, int layer) {
    if (layer == 0) return a->x0;
    if (layer <= c->layers) return a->blocks[layer - 1].out;
    return NULL;
}

void gpt_acts_free(GptActs *a, Mem *mem) {
    mem_free(mem, a->buffer);
    free(a->blocks);
    memset(a, 0, sizeof *a);
}

size_t gpt_attn_scratch_floats(const GptConfig *c, int hs) {
    return c->attn == GPT_ATTN_FLASH ? FLASH_SCRATCH_FLOATS(c->seq, hs) : 2 * (size_t)c->seq;
}

// The most scratch any of the model's Linear layers asks for (ops.h: linear_scratch_floats).
static size_t linear_scratch_max(const GptConfig *c, int B) {
    int N = B * c->seq, C = c->dim, shapes[][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, c->vocab}};
    size_t m = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        size_t s = linear_scratch_floats(N, shapes[i][0], shapes[i][1], c->mixed);
        if (s > m) m = s;
    }
    return m;
}

// --mixed with naive attention: its output atty [BT,C] in fp32, before it is kept in bf16 (the
// rest of what --mixed keeps in bf16 is written so by the op that computes it).
static size_t kept_bf16_scratch(const GptConfig *c, int B) {
    return c->mixed && c->attn != GPT_ATTN_FLASH ? (size_t)B * c->seq * c->dim : 0;
}

size_t gpt_scratch_floats(const GptConfig *c, int B) {
    size_t BT = (size_t)B * c->seq, C = c->dim, V = c->vocab, lin = linear_scratch_max(c, B);
    size_t kept = kept_bf16_scratch(c, B);
    size_t fwd = lin + kept;                                  // a Linear's (a transposed weight)
    size_t block_bwd = 6 * BT * C + gpt_attn_scratch_floats(c, c->dim / c->heads);  // see gpt_block_backward
    size_t head_bwd = BT * V + BT * C;                       // dlogits, dlnf
    if (c->mixed) block_bwd += lin, head_bwd += lin;  // then a Linear's bf16 operands
    if (c->experts > 0) {  // the MoE layer's forward and backward work where the attention's does
        MoeConfig mc = gpt_moe_config(c);
        size_t moe = moe_scratch_floats(&mc, (int)BT, 0), att = gpt_attn_scratch_floats(c, c->dim / c->heads);
        fwd = fwd > moe ? fwd : moe;
        block_bwd = 6 * BT * C + (moe > att ? moe : att);
    }
    size_t m = fwd > block_bwd ? fwd : block_bwd;
    return m > head_bwd ? m : head_bwd;
}

// The kernels' part starts at a multiple of 64 floats (256 bytes, as cudaMalloc aligns).
static size_t kernel_workspace_at(const GptConfig *c, int B) { return (gpt_scratch_floats(c, B) + 63) / 64 * 64; }

static size_t kernel_workspace_bytes(const GptConfig *c, int B) {
    return ops_gpu_workspace_bytes(B, c->seq, c->dim, c->heads, c->vocab, c->attn == GPT_ATTN_FLASH);
}

size_t gpt_pass_scratch_floats(const GptConfig *c, int B, int gpu) {
    if (!gpu) return gpt_scratch_floats(c, B);
    return kernel_workspace_at(c, B) + (kernel_workspace_bytes(c, B) + sizeof(float) - 1) / sizeof(float);
}

void gpt_pass_buffers_alloc(GptPassBuffers *p, const GptConfig *c, int B, Mem *mem) {
    size_t n = (size_t)B * c->seq;
    p->tokens = malloc_check(n), p->targets = malloc_check(n);
    p->scratch = mem_alloc_floats(mem, MEM_ACTS, gpt_pass_scratch_floats(c, B, mem->dev->kind == DEVICE_CUDA), "workspace");
    p->dx = mem_alloc_floats(mem, MEM_ACTS, n * (size_t)c->dim, "residual gradient");
}

void gpt_pass_buffers_free(GptPassBuffers *p, Mem *mem) {
    mem_free(mem, p->dx);
    mem_free(mem, p->scratch);
    free(p->tokens);
    free(p->targets);
}

// Hand the GPU's kernels their part of the pass's scratch for one layer's work (and take it
// back after: the scratch may be freed once the pass is over).
static void kernel_workspace_begin(const Ops *ops, const GptConfig *c, int B, float *scratch) {
    if (ops->use_workspace) ops->use_workspace(scratch + kernel_workspace_at(c, B), kernel_workspace_bytes(c, B));
}

static void kernel_workspace_end(const Ops *ops) {
    if (ops->use_workspace) ops->use_workspace(NULL, 0);
}

// ---------------------------------------------------------------------------------------
// Forward and backward, one layer at a time
// ---------------------------------------------------------------------------------------

void gpt_embed_forward(const Ops *ops, const GptConfig *c, const float *params, const uint8_t *tokens, int B,
                       float *x0) {
    EmbedView w = gpt_embed_view(c, (float *)params);
    ops->embedding_forward(x0, tokens, w.wte, w.wpe, B, c->seq, c->dim);
}

void gpt_block_forward(const Ops *ops, const GptConfig *c, const float *params, const float *x_in, BlockActs *a,
                       int B, float *scratch) {
    BlockView w = gpt_block_view(c, (float *)params);
    int N = B * c->seq, C = c->dim, m = c->mixed;
    // Under --mixed what is kept in bf16 (gpt.h) is written rounded by the op that computes it,
    // the same bits as rounding its fp32 result, with no fp32 copy written and read back:
    // LayerNorm (layernorm_forward_bf16), c_attn (with flash) and c_fc, whose outputs are
    // autocast's (linear_forward_bf16_out: the bias rounded to bf16, the sum rounded once), flash
    // attention and GELU. Only naive attention's output is computed in fp32, in the scratch
    // (kept), and saved rounded.
    float *kept = scratch + linear_scratch_max(c, B);
    // x + attention(ln_1(x))
    if (m) ops->layernorm_forward_bf16(a->ln1_bf16, a->ln1_mean, a->ln1_rstd, x_in, w.ln1_w, w.ln1_b, N, C);
    else ops->layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, x_in, w.ln1_w, w.ln1_b, N, C);
    float *atty = m ? kept : a->atty;
    if (a->qkv_bf16) {  // --mixed with flash: q, k, v and o in bf16 from end to end
        ops->linear_forward_bf16_out(a->qkv_bf16, a->ln1_bf16, w.qkv_w, w.qkv_b, N, C, 3 * C, scratch);
        ops->flash_attention_forward_bf16(a->atty_bf16, a->lse, a->qkv_bf16, B, c->seq, C, c->heads);
    } else {
        gpt_linear_forward(ops, a->qkv, a->ln1, a->ln1_bf16, w.qkv_w, w.qkv_b, N, C, 3 * C, m, scratch);
        if (c->attn == GPT_ATTN_FLASH) ops->flash_attention_forward(atty, a->lse, a->qkv, B, c->seq, C, c->heads, 0);
        else ops->attention_forward(atty, a->att, a->qkv, B, c->seq, C, c->heads);
        if (m) ops->to_bf16(a->atty_bf16, atty, (size_t)N * C);
    }
    gpt_linear_forward(ops, a->res1, atty, a->atty_bf16, w.aproj_w, w.aproj_b, N, C, C, m, scratch);
    ops->residual_add(a->res1, a->res1, x_in, N * C);
    // + mlp(ln_2(.)), or the experts' (moe.h)
    if (c->experts > 0) {
        MoeConfig mc = gpt_moe_config(c);
        ops->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res1, w.ln2_w, w.ln2_b, N, C);
        ops->moe_forward(ops, &mc, w.moe, a->ln2, a->out, &a->moe, 0, scratch);
        ops->residual_add(a->out, a->out, a->res1, N * C);
        return;
    }
    if (m) {
        ops->layernorm_forward_bf16(a->ln2_bf16, a->ln2_mean, a->ln2_rstd, a->res1, w.ln2_w, w.ln2_b, N, C);
        ops->linear_forward_bf16_out(a->fch_bf16, a->ln2_bf16, w.fc_w, w.fc_b, N, C, 4 * C, scratch);
        ops->gelu_forward_bf16(a->fch_gelu_bf16, a->fch_bf16, N * 4 * C);
    } else {
        ops->layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res1, w.ln2_w, w.ln2_b, N, C);
        ops->linear_forward(a->fch, a->ln2, w.fc_w, w.fc_b, N, C, 4 * C, 0, scratch);
        ops->gelu_forward(a->fch_gelu, a->fch, N * 4 * C);
    }
    gpt_linear_forward(ops, a->out, a->fch_gelu, a->fch_gelu_bf16, w.mproj_w, w.mproj_b, N, 4 * C, C, m, scratch);
    ops->residual_add(a->out, a->out, a->res1, N * C);
}

double gpt_head_forward(const Ops *ops, const GptConfig *c, const float *params, const float *x, HeadActs *a,
                        const uint8_t *targets, int B, float *scratch) {
    HeadView w = gpt_head_view(c, (float *)params);
    int N = B * c->seq, C = c->dim, m = c->mixed;
    if (m) ops->layernorm_forward_bf16(a->lnf_bf16, a->lnf_mean, a->lnf_rstd, x, w.lnf_w, w.lnf_b, N, C);
    else ops->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x, w.lnf_w, w.lnf_b, N, C);
    gpt_linear_forward(ops, a->probs, a->lnf, a->lnf_bf16, w.head_w, NULL, N, C, c->vocab, m, scratch);
    return ops->crossentropy_forward(a->probs, targets, N, c->vocab);
}

void gpt_linear_forward(const Ops *ops, float *out, const float *inp, const bf16 *kept, const float *weight,
                        const float *bias, int N, int IC, int OC, int bf16_in, float *scratch) {
    if (kept) ops->linear_forward_bf16(out, kept, weight, bias, N, IC, OC, scratch);
    else ops->linear_forward(out, inp, weight, bias, N, IC, OC, bf16_in, scratch);
}

void gpt_linear_backward(const Ops *ops, float *dinp, float *dweight, float *dbias, const float *dout,
                         const float *inp, const bf16 *kept, const float *weight, int N, int IC, int OC, int bf16_in,
                         float *scratch) {
    if (kept) ops->linear_backward_bf16(dinp, dweight, dbias, dout, kept, weight, N, IC, OC, scratch);
    else ops->linear_backward(dinp, dweight, dbias, dout, inp, weight, N, IC, OC, bf16_in, scratch);
}

void gpt_head_backward(const Ops *ops, const GptConfig *c, const float *params, float *grads, const float *x,
                       const HeadActs *a, const uint8_t *targets, int B, float loss_scale,
                       float *dx, float *scratch) {
    HeadView w = gpt_head_view(c, (float *)params), g = gpt_head_view(c, grads);
    int N = B * c->seq, C = c->dim, V = c->vocab;
    float *dlogits = scratch, *dlnf = scratch + (size_t)N * V, *lin = dlnf + (size_t)N * C;
    ops->crossentropy_backward(dlogits, a->probs, targets, N, V, loss_scale);
    gpt_linear_backward(ops, dlnf, g.head_w, NULL, dlogits, a->lnf, a->lnf_bf16, w.head_w, N, C, V, c->mixed, lin);
    ops->zero(dx, (size_t)N * C);
    ops->layernorm_backward(dx, g.lnf_w, g.lnf_b, dlnf, x, w.lnf_w, a->lnf_mean, a->lnf_rstd, N, C);
}

float gpt_moe_aux_scale(const GptConfig *c, float loss_scale, int ntokens) {
    return (float)(c->aux_weight / c->layers * loss_scale * ntokens);
}

void gpt_block_backward(const Ops *ops, const GptConfig *c, const float *params, float *grads, const float *x_in,
                        const BlockActs *a, int B, float loss_scale, float *dx, float *scratch) {
    BlockView w = gpt_block_view(c, (float *)params), g = gpt_block_view(c, grads);
    size_t N = (size_t)B * c->seq, C = c->dim;
    // The MLP's dfch is dead before the attention's datty and dqkv are written: they share its
    // 4C floats a token (6 N C in all, where 10 N C held each apart).
    float *dfch = scratch;        // [N,4C]  the MLP's, until c_fc's backward has read it
    float *datty = scratch;       // [N,C]   then the attention's, in the same place
    float *dqkv = datty + N * C;  // [N,3C]
    float *dln = dfch + N * 4 * C;  // [N,C]  gradient at a LayerNorm output
    float *dres1 = dln + N * C;   // [N,C]  gradient at res1
    float *att_scratch = dres1 + N * C;  // the attention backward's (gpt_scratch_floats)
    float *lin = att_scratch + gpt_attn_scratch_floats(c, (int)C / c->heads);  // a Linear's (--mixed)
    int bf = c->mixed;

    // out = res1 + c_proj(gelu(c_fc(ln_2(res1)))): dout flows to res1 directly and
    // through the MLP (or the experts, whose router also takes the aux loss's gradient).
    if (c->experts > 0) {
        MoeConfig mc = gpt_moe_config(c);
        ops->moe_backward(ops, &mc, w.moe, g.moe, a->ln2, dx, &a->moe, gpt_moe_aux_scale(c, loss_scale, a->moe.ntokens),
                          dln, 0, att_scratch);
    } else {
        gpt_linear_backward(ops, dfch, g.mproj_w, g.mproj_b, dx, a->fch_gelu, a->fch_gelu_bf16, w.mproj_w, (int)N,
                            4 * (int)C, (int)C, bf, lin);
        if (bf) ops->gelu_backward_bf16(dfch, a->fch_bf16, dfch, (int)(N * 4 * C));
        else ops->gelu_backward(dfch, a->fch, dfch, (int)(N * 4 * C));
        gpt_linear_backward(ops, dln, g.fc_w, g.fc_b, dfch, a->ln2, a->ln2_bf16, w.fc_w, (int)N, (int)C, 4 * (int)C,
                            bf, lin);
    }
    ops->copy(dres1, dx, N * C);
    ops->layernorm_backward(dres1, g.ln2_w, g.ln2_b, dln, a->res1, w.ln2_w, a->ln2_mean, a->ln2_rstd,
                       (int)N, (int)C);
    // res1 = x + c_proj(attention(c_attn(ln_1(x)))): the same again.
    gpt_linear_backward(ops, datty, g.aproj_w, g.aproj_b, dres1, a->atty, a->atty_bf16, w.aproj_w, (int)N, (int)C,
                        (int)C, bf, lin);
    if (a->qkv_bf16)  // --mixed: from the bf16 q, k, v and o it kept (D = do . o from the bf16 o)
        ops->flash_attention_backward_bf16(dqkv, datty, a->qkv_bf16, a->atty_bf16, a->lse, B, c->seq, (int)C, c->heads,
                                           att_scratch);
    else if (c->attn == GPT_ATTN_FLASH)
        ops->flash_attention_backward(dqkv, datty, a->qkv, a->atty, a->lse, B, c->seq, (int)C, c->heads, bf,
                                      att_scratch);
    else
        ops->attention_backward(dqkv, datty, a->qkv, a->att, B, c->seq, (int)C, c->heads, att_scratch);
    gpt_linear_backward(ops, dln, g.qkv_w, g.qkv_b, dqkv, a->ln1, a->ln1_bf16, w.qkv_w, (int)N, (int)C, 3 * (int)C,
                        bf, lin);
    ops->copy(dx, dres1, N * C);
    ops->layernorm_backward(dx, g.ln1_w, g.ln1_b, dln, x_in, w.ln1_w, a->ln1_mean, a->ln1_rstd, (int)N,
                       (int)C);
}

void gpt_embed_backward(const Ops *ops, const GptConfig *c, float *grads, const uint8_t *tokens, int B,
                        const float *dx0) {
    EmbedView g = gpt_embed_view(c, grads);
    ops->embedding_backward(g.wte, g.wpe, dx0, tokens, B, c->seq, c->dim);
}

// ---------------------------------------------------------------------------------------
// The whole model on one rank
// ---------------------------------------------------------------------------------------

void gpt_create(Gpt *g, const GptConfig *c, Mem *mem, uint64_t seed) {
    g->cfg = *c;
    g->nlayers = gpt_layer_count(c);
    g->mem = mem;
    g->params = calloc_check((size_t)g->nlayers, sizeof *g->params);
    g->grads = calloc_check((size_t)g->nlayers, sizeof *g->grads);
    for (int l = 0; l < g->nlayers; l++) {
        g->params[l] = mem_alloc_floats(mem, MEM_PARAMS, gpt_layer_size(c, l), "parameters");
        g->grads[l] = mem_alloc_floats(mem, MEM_GRADS, gpt_layer_size(c, l), "gradients");
    }
    memset(&g->moe, 0, sizeof g->moe);
    if (c->experts > 0) g->moe.load = calloc_check((size_t)c->layers * c->experts, sizeof *g->moe.load);
    // Initialized on the host (the seeded streams of gpt_init_layer), then copied to the device.
    float *host = NULL;
    for (int l = 0; l < g->nlayers; l++) {
        size_t n = gpt_layer_size(c, l);
        host = realloc_check(host, n * sizeof(float));
        gpt_init_layer(c, l, host, seed);
        device_from_host(mem->dev, g->params[l], host, n * sizeof(float));
    }
    free(host);
}

void gpt_destroy(Gpt *g) {
    mem_free_array(g->mem, g->params, g->nlayers);
    mem_free_array(g->mem, g->grads, g->nlayers);
    free(g->moe.load);
    memset(g, 0, sizeof *g);
}

void gpt_zero_grads(Gpt *g) {
    for (int l = 0; l < g->nlayers; l++)
        g->mem->dev->ops->zero(g->grads[l], gpt_layer_size(&g->cfg, l));
}

// The layer's start mark (taken before its work is queued) and, here, its end mark. No wait
// for a GPU: the span logger reads the marks at the step's end, and a hook that starts a
// collective queues it behind the layer's kernels (nccl.cu waits for the compute stream
// through an event; the shm backend's copy to the host runs on the compute stream).
static DeviceMark layer_start(const Gpt *g, const GptHooks *h) {
    return h ? device_mark(g->mem->dev) : (DeviceMark){0, -1};
}

static void layer_done(const Gpt *g, const GptHooks *h, GptPhase phase, int layer, DeviceMark m0) {
    if (!h) return;
    DeviceMark m1 = device_mark(g->mem->dev);
    if (h->layer_span) h->layer_span(h->ctx, g->mem->dev, phase, layer, m0, m1);
    if (h->layer_done) h->layer_done(h->ctx, phase, layer, m0.us, m1.us);
}

// The input of layer l's forward pass: the previous layer's output.
static const float *layer_input(const GptConfig *c, const GptActs *a, int layer) {
    if (layer <= 1) return a->x0;  // block 0 reads the embedding (layer 0 reads tokens)
    return a->blocks[layer - 2].out;
}

double gpt_layer_forward(const Ops *ops, const GptConfig *c, int layer, const float *params, GptActs *a,
                         const uint8_t *tokens, const uint8_t *targets, float *scratch) {
    double loss = 0;
    kernel_workspace_begin(ops, c, a->B, scratch);
    if (layer == 0)
        gpt_embed_forward(ops, c, params, tokens, a->B, a->x0);
    else if (layer <= c->layers)
        gpt_block_forward(ops, c, params, layer_input(c, a, layer), &a->blocks[layer - 1], a->B, scratch);
    else
        loss = gpt_head_forward(ops, c, params, layer_input(c, a, layer), &a->head, targets, a->B, scratch);
    kernel_workspace_end(ops);
    return loss;
}

void gpt_layer_backward(const Ops *ops, const GptConfig *c, int layer, const float *params, float *grads,
                        const GptActs *a, const uint8_t *tokens, const uint8_t *targets, float loss_scale,
                        float *dx, float *scratch) {
    kernel_workspace_begin(ops, c, a->B, scratch);
    if (layer == 0)
        gpt_embed_backward(ops, c, grads, tokens, a->B, dx);
    else if (layer <= c->layers)
        gpt_block_backward(ops, c, params, grads, layer_input(c, a, layer), &a->blocks[layer - 1], a->B, loss_scale, dx,
                           scratch);
    else
        gpt_head_backward(ops, c, params, grads, layer_input(c, a, layer), &a->head, targets, a->B, loss_scale, dx,
                          scratch);
    kernel_workspace_end(ops);
}

double gpt_forward(Gpt *g, GptActs *a, const uint8_t *tokens, const uint8_t *targets,
                   const GptHooks *hooks) {
    const GptConfig *c = &g->cfg;
    const Ops *ops = g->mem->dev->ops;
    float *scratch = mem_alloc_floats(g->mem, MEM_ACTS, gpt_pass_scratch_floats(c, a->B, g->mem->dev->kind == DEVICE_CUDA), "workspace");
    double loss_sum = 0;
    for (int l = 0; l < g->nlayers; l++) {
        DeviceMark m0 = layer_start(g, hooks);
        loss_sum += gpt_layer_forward(ops, c, l, g->params[l], a, tokens, targets, scratch);
        layer_done(g, hooks, GPT_FWD, l, m0);
    }
    mem_free(g->mem, scratch);
    if (c->experts > 0) gpt_moe_stats_add(&g->moe, c, a, 1, c->layers);
    return loss_sum;
}

void gpt_backward(Gpt *g, GptActs *a, const uint8_t *tokens, const uint8_t *targets,
                  float loss_scale, const GptHooks *hooks) {
    const GptConfig *c = &g->cfg;
    const Ops *ops = g->mem->dev->ops;
    float *scratch = mem_alloc_floats(g->mem, MEM_ACTS, gpt_pass_scratch_floats(c, a->B, g->mem->dev->kind == DEVICE_CUDA), "workspace");
    float *dx = mem_alloc_floats(g->mem, MEM_ACTS, (size_t)a->B * c->seq * c->dim, "residual gradient");
    for (int l = g->nlayers - 1; l >= 0; l--) {
        DeviceMark m0 = layer_start(g, hooks);
        gpt_layer_backward(ops, c, l, g->params[l], g->grads[l], a, tokens, targets, loss_scale, dx, scratch);
        layer_done(g, hooks, GPT_BWD, l, m0);
    }
    mem_free(g->mem, dx);
    mem_free(g->mem, scratch);
}

void gpt_moe_stats_reset(GptMoeStats *s, const GptConfig *c) {
    int64_t *load = s->load;
    memset(s, 0, sizeof *s);
    s->load = load;
    if (load) memset(load, 0, (size_t)c->layers * c->experts * sizeof *load);
}

void gpt_moe_stats_add(GptMoeStats *s, const GptConfig *c, const GptActs *a, int first, int last) {
    MoeConfig m = gpt_moe_config(c);
    double aux = 0;
    for (int l = first; l <= last; l++) {
        const MoeActs *x = &a->blocks[l - 1].moe;
        aux += moe_aux_loss(&m, x->routed, x->prob_sum, x->ntokens);
        s->dropped += x->dropped;
        s->assignments += (int64_t)x->ntokens * m.K;
        for (int e = 0; e < m.E; e++) s->load[(size_t)(l - 1) * m.E + e] += x->routed[e];
    }
    s->aux_sum += aux / c->layers;
    s->passes++;
}

uint64_t gpt_param_hash(const Gpt *g) {
    // Hashed where the bytes are (on a GPU by a kernel, all layers at once: nothing is
    // copied to the host but the chunks' hashes).
    const void **bufs = calloc_check((size_t)g->nlayers, sizeof *bufs);
    size_t *bytes = calloc_check((size_t)g->nlayers, sizeof *bytes);
    for (int l = 0; l < g->nlayers; l++) {
        bufs[l] = g->params[l];
        bytes[l] = gpt_layer_size(&g->cfg, l) * sizeof(float);
    }
    uint64_t h = device_param_hash(g->mem->dev, g->nlayers, bufs, bytes, PARAM_HASH_INIT);
    free(bufs);
    free(bytes);
    return h;
}
