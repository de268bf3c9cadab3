// tensor_parallel.c — see tensor_parallel.h.
#include "tensor_parallel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/harness/check.h"  // defines: malloc_check()
#include "common/harness/train.h"
#include "tp_internal.h"           // defines: tp_take(), tp_linear_floats(), tp_kept_floats()

// A rank's slices, its state, its activations' and its workspace's layout are slices.c
// (tp_internal.h); here is what runs.

// ---------------------------------------------------------------------------------------
// The record of every collective
// ---------------------------------------------------------------------------------------

void tp_log_collectives(Tp *tp, const char *group, const char *op, const char *at, int layer, TpCount *count) {
    size_t k;
    while ((k = dist_drain_records(tp->dist, tp->records, 64)) > 0)
        for (size_t i = 0; i < k; i++) {
            const DistRecord *x = &tp->records[i];
            char extra[256];
            snprintf(extra, sizeof extra,
                     "\"group\":\"%s\",\"op\":\"%s\",\"at\":\"%s\",\"pass\":\"%s\",\"count\":%zu,\"algo\":\"%s\","
                     "\"issued_us\":%lld",
                     group, op, at, tp->pass, x->count, x->algo, (long long)x->issued_us);
            runlog_comm_span(tp->log, tp->step, dist_coll_name(x->coll), tp->mb, layer, x->t0_us, x->t1_us,
                             x->bytes_sent, x->waited_from_us, extra);
            tp->comm_us += x->t1_us - x->t0_us;
            int kind = x->coll == DIST_ALL_REDUCE ? TP_ALL_REDUCE : x->coll == DIST_REDUCE_SCATTER ? TP_REDUCE_SCATTER
                     : x->coll == DIST_ALL_GATHER ? TP_ALL_GATHER : -1;
            if (count && kind >= 0) count->calls[kind]++;
            if (count) count->bytes += x->bytes_sent;
        }
}

// ---------------------------------------------------------------------------------------
// LayerNorm, then f (f and g themselves are f_and_g.c's)
// ---------------------------------------------------------------------------------------

// ln(x) then f forward under --mixed, into out16 [BT,C]: the bf16 copy the column-parallel
// Linear reads and the backward pass keeps (no fp32 form is needed). LayerNorm writes its rows
// rounded (layernorm_forward_bf16: the bits of to_bf16 after layernorm_forward); with SP they
// travel rounded (rows16: R C bf16s of scratch). With SP where the rows cannot go as bf16
// (tp_gathers_bf16() is 0), LayerNorm's fp32 rows (rows: R C floats) gather into wide [BT,C]
// and are rounded after.
static void layernorm_f_forward_bf16(Tp *tp, bf16 *out16, float *mean, float *rstd, const float *x, const float *w,
                                     const float *b, float *rows, float *wide, bf16 *rows16, int layer, const char *at) {
    const Ops *ops = tp->ops;
    int R = tp->rows, C = tp->cfg.dim;
    if (!tp->sp) {  // every rank holds all rows: f is the identity
        ops->layernorm_forward_bf16(out16, mean, rstd, x, w, b, R, C);
    } else if (tp_gathers_bf16(tp)) {
        ops->layernorm_forward_bf16(rows16, mean, rstd, x, w, b, R, C);
        dist_all_gather_bf16(tp->group, rows16, out16, (size_t)tp->BT * C);
        tp_log_collectives(tp, "tp", "f", at, layer, &tp->model);
    } else {
        ops->layernorm_forward(rows, mean, rstd, x, w, b, R, C);
        tp_f_forward(tp, rows, wide, layer, at);
        ops->to_bf16(out16, wide, (size_t)tp->BT * C);
    }
}

// ---------------------------------------------------------------------------------------
// Biases after a sum, and their gradients
// ---------------------------------------------------------------------------------------
// A row-parallel linear's bias is added ONCE, after g, so it is replicated. "Add b to every
// row" is the outer product ones[rows] x b[C]: a Linear with one input, whose weight is b;
// its gradient, the column sums of dY, is that Linear's weight gradient. (1 x b and
// 1 x dY are exact, so these are plain adds, in row order.)

static void add_bias_rows(Tp *tp, float *y, const float *bias, int rows, float *tmp, float *wt) {
    int C = tp->cfg.dim;
    tp->ops->linear_forward(tmp, tp->ones, bias, NULL, rows, 1, C, 0, wt);
    tp->ops->residual_add(y, y, tmp, rows * C);
}

static void bias_backward(Tp *tp, float *dbias, const float *dy, int rows) {
    tp->ops->linear_backward(NULL, dbias, NULL, dy, tp->ones, dbias, rows, 1, tp->cfg.dim, 0, NULL);
}

// ---------------------------------------------------------------------------------------
// A block
// ---------------------------------------------------------------------------------------

// The tensors of a block on one rank, read from its two parts (device pointers, never read here).
typedef struct {
    float *ln1_w, *ln1_b, *aproj_b, *ln2_w, *ln2_b, *mproj_b;  // replicated
    float *qkv_w, *qkv_b, *aproj_w, *fc_w, *fc_b, *mproj_w;    // this rank's slices
} TpBlockView;

static TpBlockView block_view(const Tp *tp, float *rep, float *split) {
    size_t C = (size_t)tp->cfg.dim, Cl = C / (size_t)tp->t, Fl = 4 * C / (size_t)tp->t;
    TpBlockView v;
    v.ln1_w = rep, v.ln1_b = rep + C, v.aproj_b = rep + 2 * C, v.ln2_w = rep + 3 * C, v.ln2_b = rep + 4 * C;
    v.mproj_b = rep + 5 * C;
    v.qkv_w = split;
    v.qkv_b = v.qkv_w + 3 * Cl * C;
    v.aproj_w = v.qkv_b + 3 * Cl;
    v.fc_w = v.aproj_w + C * Cl;
    v.fc_b = v.fc_w + Fl * C;
    v.mproj_w = v.fc_b + Fl;
    return v;
}

static void block_forward(Tp *tp, int layer, const float *x, TpBlockActs *a) {
    TpBlockView w = block_view(tp, tp->rep[layer], tp->split[layer]);
    const Ops *ops = tp->ops;
    int B = tp->B, T = tp->cfg.seq, BT = tp->BT, R = tp->rows, C = tp->cfg.dim;
    int Cl = C / tp->t, Fl = 4 * C / tp->t, heads = tp->cfg.heads / tp->t;
    float *cur = tp->scratch;
    float *wt = tp_take(&cur, tp_linear_floats(tp));  // a Linear's scratch
    int bf = tp->cfg.mixed;
    float *ln_rows = tp_take(&cur, (size_t)R * C), *partial = tp_take(&cur, (size_t)BT * C);
    float *bias_rows = tp_take(&cur, (size_t)R * C);
    // --mixed: naive attention's fp32 output before a keeps it as bf16 (tensor_parallel.h), and
    // with SP where f's rows cannot go as bf16, their fp32 gather
    float *kept = tp_take(&cur, tp_kept_floats(tp));

    // res1 = x + g(c_proj_r(attention_r(c_attn_r(f(ln_1(x)))))) + c_proj.bias
    if (bf) {  // --mixed: ln_1's output only in bf16, rounded as LayerNorm writes it
        layernorm_f_forward_bf16(tp, a->ln1_bf16, a->ln1_mean, a->ln1_rstd, x, w.ln1_w, w.ln1_b, ln_rows, kept,
                                 (bf16 *)partial, layer, "attn");
    } else {
        float *ln = tp->sp ? ln_rows : a->ln1;  // on all rows: what the column-parallel Linear reads
        ops->layernorm_forward(ln, a->ln1_mean, a->ln1_rstd, x, w.ln1_w, w.ln1_b, R, C);
        tp_f_forward(tp, ln, a->ln1, layer, "attn");
    }
    float *atty = bf ? kept : a->atty;  // --mixed with naive attention: its fp32 output, then kept as bf16s
    if (a->qkv_bf16) {  // --mixed with flash: its heads' q, k, v and o in bf16 from end to end
        ops->linear_forward_bf16_out(a->qkv_bf16, a->ln1_bf16, w.qkv_w, w.qkv_b, BT, C, 3 * Cl, wt);
        ops->flash_attention_forward_bf16(a->atty_bf16, a->lse, a->qkv_bf16, B, T, Cl, heads);  // NH/t heads
    } else {
        gpt_linear_forward(ops, a->qkv, a->ln1, a->ln1_bf16, w.qkv_w, w.qkv_b, BT, C, 3 * Cl, bf, wt);
        if (tp->cfg.attn == GPT_ATTN_FLASH) ops->flash_attention_forward(atty, a->lse, a->qkv, B, T, Cl, heads, 0);
        else ops->attention_forward(atty, a->att, a->qkv, B, T, Cl, heads);
        if (bf) ops->to_bf16(a->atty_bf16, atty, (size_t)BT * Cl);
    }
    float *sum = tp->sp ? partial : a->res1;
    gpt_linear_forward(ops, sum, atty, a->atty_bf16, w.aproj_w, NULL, BT, Cl, C, bf, wt);  // partial: its heads' share
    tp_g_forward(tp, sum, a->res1, layer, "attn");
    add_bias_rows(tp, a->res1, w.aproj_b, R, bias_rows, wt);
    ops->residual_add(a->res1, a->res1, x, R * C);

    // out = res1 + g(c_proj_r(gelu(c_fc_r(f(ln_2(res1)))))) + c_proj.bias
    if (bf) {  // c_fc's 4C/t columns in bf16 (its output as autocast's); GELU is pointwise: local
        layernorm_f_forward_bf16(tp, a->ln2_bf16, a->ln2_mean, a->ln2_rstd, a->res1, w.ln2_w, w.ln2_b, ln_rows, kept,
                                 (bf16 *)partial, layer, "mlp");  // (partial is free again)
        ops->linear_forward_bf16_out(a->fch_bf16, a->ln2_bf16, w.fc_w, w.fc_b, BT, C, Fl, wt);
        ops->gelu_forward_bf16(a->fch_gelu_bf16, a->fch_bf16, BT * Fl);
    } else {
        float *ln = tp->sp ? ln_rows : a->ln2;
        ops->layernorm_forward(ln, a->ln2_mean, a->ln2_rstd, a->res1, w.ln2_w, w.ln2_b, R, C);
        tp_f_forward(tp, ln, a->ln2, layer, "mlp");
        ops->linear_forward(a->fch, a->ln2, w.fc_w, w.fc_b, BT, C, Fl, 0, wt);
        ops->gelu_forward(a->fch_gelu, a->fch, BT * Fl);
    }
    sum = tp->sp ? partial : a->out;
    gpt_linear_forward(ops, sum, a->fch_gelu, a->fch_gelu_bf16, w.mproj_w, NULL, BT, Fl, C, bf, wt);
    tp_g_forward(tp, sum, a->out, layer, "mlp");
    add_bias_rows(tp, a->out, w.mproj_b, R, bias_rows, wt);
    ops->residual_add(a->out, a->out, a->res1, R * C);
}

// dx: on entry the gradient at the block's output rows, on return at its input rows.
static void block_backward(Tp *tp, int layer, const float *x, const TpBlockActs *a, float *dx) {
    TpBlockView w = block_view(tp, tp->rep[layer], tp->split[layer]);
    TpBlockView g = block_view(tp, tp->rep_grad[layer], tp->split_grad[layer]);
    const Ops *ops = tp->ops;
    int B = tp->B, T = tp->cfg.seq, BT = tp->BT, R = tp->rows, C = tp->cfg.dim;
    int Cl = C / tp->t, Fl = 4 * C / tp->t, heads = tp->cfg.heads / tp->t;
    float *cur = tp->scratch;
    float *dfch = tp_take(&cur, (size_t)BT * Fl), *dpart = tp_take(&cur, (size_t)BT * C), *dres1 = tp_take(&cur, (size_t)R * C);
    float *datty = tp_take(&cur, (size_t)BT * Cl), *dqkv = tp_take(&cur, (size_t)BT * 3 * Cl);
    float *att_scratch = tp_take(&cur, gpt_attn_scratch_floats(&tp->cfg, C / tp->cfg.heads));
    float *dall = tp_take(&cur, (size_t)BT * C), *dshard = tp_take(&cur, (size_t)R * C);
    float *lin = tp_take(&cur, tp->cfg.mixed ? tp_linear_floats(tp) : 0);  // a Linear's bf16 operands (--mixed)
    float *wide = cur;  // --mixed: g's gather of bf16 rows (below)
    int bf = tp->cfg.mixed;

    // The MLP: the bias saw this rank's rows; g hands every rank all rows of dout; f sums
    // the ranks' partial gradients of ln_2's output.
    bias_backward(tp, g.mproj_b, dx, R);
    float *dy = tp->sp ? dall : dx;
    bf16 *all16 = bf ? (bf16 *)wide : NULL, *rows16 = bf ? all16 + (size_t)BT * C : NULL;  // --mixed: g's gather
    if (bf) tp_g_backward_bf16(tp, dx, dy, rows16, all16, layer, "mlp");
    else tp_g_backward(tp, dx, dy, layer, "mlp");
    gpt_linear_backward(ops, dfch, g.mproj_w, NULL, dy, a->fch_gelu, a->fch_gelu_bf16, w.mproj_w, BT, Fl, C, bf, lin);
    if (bf) ops->gelu_backward_bf16(dfch, a->fch_bf16, dfch, BT * Fl);
    else ops->gelu_backward(dfch, a->fch, dfch, BT * Fl);
    gpt_linear_backward(ops, dpart, g.fc_w, g.fc_b, dfch, a->ln2, a->ln2_bf16, w.fc_w, BT, C, Fl, bf, lin);
    float *dln = tp->sp ? dshard : dpart;
    tp_f_backward(tp, dpart, dln, layer, "mlp");
    ops->copy(dres1, dx, (size_t)R * C);  // the residual path
    ops->layernorm_backward(dres1, g.ln2_w, g.ln2_b, dln, a->res1, w.ln2_w, a->ln2_mean, a->ln2_rstd, R, C);

    // The attention, the same way.
    bias_backward(tp, g.aproj_b, dres1, R);
    dy = tp->sp ? dall : dres1;
    if (bf) tp_g_backward_bf16(tp, dres1, dy, rows16, all16, layer, "attn");
    else tp_g_backward(tp, dres1, dy, layer, "attn");
    gpt_linear_backward(ops, datty, g.aproj_w, NULL, dy, a->atty, a->atty_bf16, w.aproj_w, BT, Cl, C, bf, lin);
    if (a->qkv_bf16)  // --mixed: from the kept bf16 q, k, v and o
        ops->flash_attention_backward_bf16(dqkv, datty, a->qkv_bf16, a->atty_bf16, a->lse, B, T, Cl, heads, att_scratch);
    else if (tp->cfg.attn == GPT_ATTN_FLASH)
        ops->flash_attention_backward(dqkv, datty, a->qkv, a->atty, a->lse, B, T, Cl, heads, bf, att_scratch);
    else
        ops->attention_backward(dqkv, datty, a->qkv, a->att, B, T, Cl, heads, att_scratch);
    gpt_linear_backward(ops, dpart, g.qkv_w, g.qkv_b, dqkv, a->ln1, a->ln1_bf16, w.qkv_w, BT, C, 3 * Cl, bf, lin);
    tp_f_backward(tp, dpart, dln, layer, "attn");
    ops->copy(dx, dres1, (size_t)R * C);
    ops->layernorm_backward(dx, g.ln1_w, g.ln1_b, dln, x, w.ln1_w, a->ln1_mean, a->ln1_rstd, R, C);
}

// ---------------------------------------------------------------------------------------
// The embedding: this rank's rows, in pieces that stay within one sequence (position t of
// row n is n mod T; with SP a rank's rows may start or end inside a sequence)
// ---------------------------------------------------------------------------------------

static void embed(Tp *tp, const uint8_t *tokens, float *x0, const float *dx0) {
    EmbedView w = gpt_embed_view(&tp->cfg, tp->rep[0]), g = gpt_embed_view(&tp->cfg, tp->rep_grad[0]);
    int T = tp->cfg.seq, C = tp->cfg.dim;
    for (int n = tp->row0; n < tp->row0 + tp->rows;) {
        int pos = n % T, len = T - pos < tp->row0 + tp->rows - n ? T - pos : tp->row0 + tp->rows - n;
        size_t at = (size_t)(n - tp->row0) * C;
        if (x0) tp->ops->embedding_forward(x0 + at, tokens + n, w.wte, w.wpe + (size_t)pos * C, 1, len, C);
        else tp->ops->embedding_backward(g.wte, g.wpe + (size_t)pos * C, dx0 + at, tokens + n, 1, len, C);
        n += len;
    }
}

// ---------------------------------------------------------------------------------------
// The head, and the vocabulary-parallel cross-entropy
// ---------------------------------------------------------------------------------------
// With --vocab-parallel, rank r holds the logits of vocabulary entries [r V/t, (r+1) V/t)
// for every row. The loss of a row, log(sum_v e^{z_v}) - z_target, needs all V entries:
//   1. the row's max M, for a stable exp: each rank's row maxima, all-gathered (t BT floats);
//      the max of maxima is exact in any order
//   2. sum_v e^{z_v - M}: each rank's partial sums, and the target's logit from the rank
//      that owns it (0 from the others), in ONE all-reduce of 2 BT floats
// Then every rank has the loss of every row and the probabilities of its own vocabulary
// slice, from which its dlogits come with no further communication.

static double vocab_parallel_crossentropy(Tp *tp, float *logits, const uint8_t *targets, int rows) {
    int t = tp->t, Vl = tp->cfg.vocab / t, v0 = tp->r * Vl;
    size_t n = (size_t)rows * Vl;
    float *z = malloc_check(n * sizeof(float)), *maxima = malloc_check((size_t)rows * sizeof(float));
    float *all = malloc_check((size_t)t * rows * sizeof(float)), *sums = malloc_check(2 * (size_t)rows * sizeof(float));
    device_to_host(tp->mem->dev, z, logits, n * sizeof(float));
    for (int i = 0; i < rows; i++) {
        float m = z[(size_t)i * Vl];
        for (int v = 1; v < Vl; v++) m = z[(size_t)i * Vl + v] > m ? z[(size_t)i * Vl + v] : m;
        maxima[i] = m;
    }
    dist_all_gather(tp->group, maxima, all, (size_t)t * rows);
    tp_log_collectives(tp, "tp", "vocab_ce", "head", tp->cfg.layers + 1, &tp->model);
    for (int i = 0; i < rows; i++) {
        float m = all[i], *zi = z + (size_t)i * Vl, s = 0.0f;
        for (int k = 1; k < t; k++) m = all[(size_t)k * rows + i] > m ? all[(size_t)k * rows + i] : m;
        int target = targets[i] - v0;
        sums[rows + i] = target >= 0 && target < Vl ? zi[target] : 0.0f;
        for (int v = 0; v < Vl; v++) {
            zi[v] = expf(zi[v] - m);
            s += zi[v];
        }
        sums[i] = s;
        maxima[i] = m;
    }
    dist_all_reduce(tp->group, sums, 2 * (size_t)rows);
    tp_log_collectives(tp, "tp", "vocab_ce", "head", tp->cfg.layers + 1, &tp->model);
    double loss = 0;
    for (int i = 0; i < rows; i++) {
        float inv = 1.0f / sums[i];
        for (int v = 0; v < Vl; v++) z[(size_t)i * Vl + v] *= inv;
        loss += log((double)sums[i]) + (double)maxima[i] - (double)sums[rows + i];
    }
    device_from_host(tp->mem->dev, logits, z, n * sizeof(float));  // now this slice's probabilities
    free(z), free(maxima), free(all), free(sums);
    return loss;
}

// dlogits = (p - onehot(target)) scale on this rank's slice: the one-hot only where it owns the target.
static void vocab_parallel_dlogits(Tp *tp, float *dlogits, const float *probs, const uint8_t *targets, int rows,
                                   float scale) {
    int Vl = tp->cfg.vocab / tp->t, v0 = tp->r * Vl;
    size_t n = (size_t)rows * Vl;
    float *d = malloc_check(n * sizeof(float));
    device_to_host(tp->mem->dev, d, probs, n * sizeof(float));
    for (int i = 0; i < rows; i++) {
        for (int v = 0; v < Vl; v++) d[(size_t)i * Vl + v] *= scale;
        int target = targets[i] - v0;
        if (target >= 0 && target < Vl) d[(size_t)i * Vl + target] -= scale;
    }
    device_from_host(tp->mem->dev, dlogits, d, n * sizeof(float));
    free(d);
}

static double head_forward(Tp *tp, const float *x, TpActs *a, const uint8_t *targets) {
    int L = tp->cfg.layers, R = tp->rows, C = tp->cfg.dim, V = tp->cfg.vocab;
    float *lnf_w = tp->rep[L + 1], *lnf_b = lnf_w + C, *head_w = tp->vp ? tp->split[L + 1] : lnf_w + 2 * C;
    float *cur = tp->scratch;
    float *wt = tp_take(&cur, tp_linear_floats(tp)), *ln_rows = tp_take(&cur, (size_t)R * C);
    int bf = tp->cfg.mixed;
    float *wide = bf ? tp_take(&cur, tp_kept_floats(tp)) : NULL;  // --mixed with SP: f's fp32 gather (if any)
    if (!tp->vp) {  // replicated head: the loss of this rank's rows (with SP: 1/t of them)
        if (bf) tp->ops->layernorm_forward_bf16(a->lnf_bf16, a->lnf_mean, a->lnf_rstd, x, lnf_w, lnf_b, R, C);
        else tp->ops->layernorm_forward(a->lnf, a->lnf_mean, a->lnf_rstd, x, lnf_w, lnf_b, R, C);
        gpt_linear_forward(tp->ops, a->probs, a->lnf, a->lnf_bf16, head_w, NULL, R, C, V, bf, wt);
        return tp->ops->crossentropy_forward(a->probs, targets + tp->row0, R, V);
    }
    // Vocabulary-parallel: a column-parallel linear like c_fc, so f before it; logits [BT, V/t].
    if (bf) {
        layernorm_f_forward_bf16(tp, a->lnf_bf16, a->lnf_mean, a->lnf_rstd, x, lnf_w, lnf_b, ln_rows, wide, (bf16 *)wt,
                                 L + 1, "head");  // (wt is free until the Linear)
    } else {
        float *ln = tp->sp ? ln_rows : a->lnf;
        tp->ops->layernorm_forward(ln, a->lnf_mean, a->lnf_rstd, x, lnf_w, lnf_b, R, C);
        tp_f_forward(tp, ln, a->lnf, L + 1, "head");
    }
    gpt_linear_forward(tp->ops, a->probs, a->lnf, a->lnf_bf16, head_w, NULL, tp->BT, C, V / tp->t, bf, wt);
    return vocab_parallel_crossentropy(tp, a->probs, targets, tp->BT);
}

static void head_backward(Tp *tp, const float *x, const TpActs *a, const uint8_t *targets, float scale, float *dx) {
    int L = tp->cfg.layers, R = tp->rows, BT = tp->BT, C = tp->cfg.dim, V = tp->cfg.vocab;
    float *lnf_w = tp->rep[L + 1], *head_w = tp->vp ? tp->split[L + 1] : lnf_w + 2 * C;
    float *glnf_w = tp->rep_grad[L + 1], *glnf_b = glnf_w + C;
    float *ghead_w = tp->vp ? tp->split_grad[L + 1] : glnf_w + 2 * C;
    float *cur = tp->scratch, *dln;
    if (!tp->vp) {
        float *dlogits = tp_take(&cur, (size_t)R * V);
        dln = tp_take(&cur, (size_t)R * C);
        tp->ops->crossentropy_backward(dlogits, a->probs, targets + tp->row0, R, V, scale);
        float *lin = tp_take(&cur, tp->cfg.mixed ? tp_linear_floats(tp) : 0);
        gpt_linear_backward(tp->ops, dln, ghead_w, NULL, dlogits, a->lnf, a->lnf_bf16, head_w, R, C, V, tp->cfg.mixed,
                            lin);
    } else {
        int Vl = V / tp->t;
        float *dlogits = tp_take(&cur, (size_t)BT * Vl), *dpart = tp_take(&cur, (size_t)BT * C);
        float *dshard = tp_take(&cur, (size_t)R * C);
        vocab_parallel_dlogits(tp, dlogits, a->probs, targets, BT, scale);
        float *lin = tp_take(&cur, tp->cfg.mixed ? tp_linear_floats(tp) : 0);
        gpt_linear_backward(tp->ops, dpart, ghead_w, NULL, dlogits, a->lnf, a->lnf_bf16, head_w, BT, C, Vl,
                            tp->cfg.mixed, lin);
        dln = tp->sp ? dshard : dpart;
        tp_f_backward(tp, dpart, dln, L + 1, "head");  // the head input's gradient, summed over the vocabulary slices
    }
    tp->ops->zero(dx, (size_t)R * C);
    tp->ops->layernorm_backward(dx, glnf_w, glnf_b, dln, x, lnf_w, a->lnf_mean, a->lnf_rstd, R, C);
}

// ---------------------------------------------------------------------------------------
// Layer by layer
// ---------------------------------------------------------------------------------------

static const float *layer_input(const Tp *tp, const TpActs *a, int layer) {
    return layer <= 1 ? a->x0 : a->blocks[layer - 2].out;
}

double tp_layer_forward(Tp *tp, int layer, TpActs *a, const uint8_t *tokens, const uint8_t *targets) {
    if (layer == 0) {
        embed(tp, tokens, a->x0, NULL);
        return 0;
    }
    if (layer <= tp->cfg.layers) {
        block_forward(tp, layer, layer_input(tp, a, layer), &a->blocks[layer - 1]);
        return 0;
    }
    return head_forward(tp, layer_input(tp, a, layer), a, targets);
}

void tp_layer_backward(Tp *tp, int layer, TpActs *a, const uint8_t *tokens, const uint8_t *targets,
                       float loss_scale, float *dx) {
    if (layer == 0) embed(tp, tokens, NULL, dx);
    else if (layer <= tp->cfg.layers) block_backward(tp, layer, layer_input(tp, a, layer), &a->blocks[layer - 1], dx);
    else head_backward(tp, layer_input(tp, a, layer), a, targets, loss_scale, dx);
}
