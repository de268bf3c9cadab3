// tensor_parallel.c — see tensor_parallel.h.
#include "tensor_parallel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "train.h"

// ---------------------------------------------------------------------------------------
// The layout of a rank's slices
// ---------------------------------------------------------------------------------------

// `rows` rows of `width` floats between the full buffer (rows `ld` apart) and the part (packed).
// Returns the part's next free float.
static float *slice_rows(float *full, size_t ld, float *part, size_t rows, size_t width, int to_parts) {
    for (size_t i = 0; i < rows; i++) {
        if (to_parts) memcpy(part + i * width, full + i * ld, width * sizeof(float));
        else memcpy(full + i * ld, part + i * width, width * sizeof(float));
    }
    return part + rows * width;
}

void tp_layer_slice(const GptConfig *c, int vp, int t, int r, int layer, float *full, float *rep, float *split,
                    int to_parts) {
    size_t C = (size_t)c->dim, V = (size_t)c->vocab, Cl = C / (size_t)t, Fl = 4 * C / (size_t)t;
    size_t R = (size_t)r;
    float *p = rep, *s = split;
    if (layer == 0) {
        p = slice_rows(full, 0, p, 1, tp_replicated_floats(c, vp, 0), to_parts);
    } else if (layer <= c->layers) {
        BlockView w = gpt_block_view(c, full);
        p = slice_rows(w.ln1_w, 0, p, 1, C, to_parts);
        p = slice_rows(w.ln1_b, 0, p, 1, C, to_parts);
        p = slice_rows(w.aproj_b, 0, p, 1, C, to_parts);
        p = slice_rows(w.ln2_w, 0, p, 1, C, to_parts);
        p = slice_rows(w.ln2_b, 0, p, 1, C, to_parts);
        p = slice_rows(w.mproj_b, 0, p, 1, C, to_parts);
        // c_attn by heads: rank r's rows of q, then of k, then of v (each C rows in the full weight).
        for (size_t part = 0; part < 3; part++)
            s = slice_rows(w.qkv_w + (part * C + R * Cl) * C, C, s, Cl, C, to_parts);
        for (size_t part = 0; part < 3; part++) s = slice_rows(w.qkv_b + part * C + R * Cl, 0, s, 1, Cl, to_parts);
        s = slice_rows(w.aproj_w + R * Cl, C, s, C, Cl, to_parts);              // columns of attn.c_proj
        s = slice_rows(w.fc_w + R * Fl * C, C, s, Fl, C, to_parts);              // rows of c_fc
        s = slice_rows(w.fc_b + R * Fl, 0, s, 1, Fl, to_parts);
        s = slice_rows(w.mproj_w + R * Fl, 4 * C, s, C, Fl, to_parts);           // columns of mlp.c_proj
    } else {
        HeadView w = gpt_head_view(c, full);
        p = slice_rows(w.lnf_w, 0, p, 1, C, to_parts);
        p = slice_rows(w.lnf_b, 0, p, 1, C, to_parts);
        if (vp) s = slice_rows(w.head_w + R * (V / (size_t)t) * C, C, s, V / (size_t)t, C, to_parts);  // vocabulary rows
        else p = slice_rows(w.head_w, C, p, V, C, to_parts);
    }
    if ((size_t)(p - rep) != tp_replicated_floats(c, vp, layer) || (size_t)(s - split) != tp_split_floats(c, vp, t, layer))
        die("this is a bug in shardlab's tensor parallelism",
            "layer %d sliced into %zu + %zu floats, the layout says %zu + %zu", layer, (size_t)(p - rep),
            (size_t)(s - split), tp_replicated_floats(c, vp, layer), tp_split_floats(c, vp, t, layer));
}

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

// ---------------------------------------------------------------------------------------
// The state of one rank
// ---------------------------------------------------------------------------------------

void tp_create(Tp *tp, const GptConfig *c, int t, int r, int sp, int vp, DistGroup *g, Dist *d, Mem *mem,
               const TrainArgs *a) {
    memset(tp, 0, sizeof *tp);
    tp->cfg = *c;
    tp->t = t, tp->r = r, tp->sp = sp, tp->vp = vp;
    tp->group = g;
    tp->dist = d;
    tp->mem = mem;
    tp->ops = mem->dev->ops;
    tp->nlayers = gpt_layer_count(c);
    tp->mb = -1;
    tp->pass = "step";
    int n = tp->nlayers;
    tp->rep_n = calloc_check((size_t)n, sizeof(size_t));
    tp->split_n = calloc_check((size_t)n, sizeof(size_t));
    tp->rep = calloc_check((size_t)n, sizeof(float *));
    tp->split = calloc_check((size_t)n, sizeof(float *));
    tp->rep_grad = calloc_check((size_t)n, sizeof(float *));
    tp->split_grad = calloc_check((size_t)n, sizeof(float *));
    // The whole model on the host, as `single` builds it (the same seeded streams, or --init):
    // every rank makes the same one and keeps its parts, so no broadcast is needed.
    Mem host;
    mem_init(&host, NULL);
    Gpt full;
    gpt_create(&full, c, &host, a->seed);
    if (a->init) train_load_weights(&full, a->init);
    for (int l = 0; l < n; l++) {
        size_t nr = tp_replicated_floats(c, vp, l), ns = tp_split_floats(c, vp, t, l);
        tp->rep_n[l] = nr, tp->split_n[l] = ns;
        float *rep_h = malloc_check(nr * sizeof(float)), *split_h = malloc_check((ns ? ns : 1) * sizeof(float));
        tp_layer_slice(c, vp, t, r, l, full.params[l], rep_h, split_h, 1);
        tp->rep[l] = mem_alloc_floats(mem, MEM_PARAMS, nr, "replicated parameters");
        tp->rep_grad[l] = mem_alloc_floats(mem, MEM_GRADS, nr, "replicated gradients");
        device_from_host(mem->dev, tp->rep[l], rep_h, nr * sizeof(float));
        if (ns) {
            tp->split[l] = mem_alloc_floats(mem, MEM_PARAMS, ns, "tensor-parallel slices");
            tp->split_grad[l] = mem_alloc_floats(mem, MEM_GRADS, ns, "tensor-parallel slices' gradients");
            device_from_host(mem->dev, tp->split[l], split_h, ns * sizeof(float));
        }
        free(rep_h);
        free(split_h);
    }
    gpt_destroy(&full);
    mem_destroy(&host);
}

void tp_destroy(Tp *tp) {
    for (int l = 0; l < tp->nlayers; l++) {
        mem_free(tp->mem, tp->rep[l]);
        mem_free(tp->mem, tp->rep_grad[l]);
        mem_free(tp->mem, tp->split[l]);
        mem_free(tp->mem, tp->split_grad[l]);
    }
    free(tp->rep_n), free(tp->split_n), free(tp->rep), free(tp->split), free(tp->rep_grad), free(tp->split_grad);
    memset(tp, 0, sizeof *tp);
}

void tp_zero_grads(Tp *tp) {
    for (int l = 0; l < tp->nlayers; l++) {
        tp->ops->zero(tp->rep_grad[l], tp->rep_n[l]);
        if (tp->split_n[l]) tp->ops->zero(tp->split_grad[l], tp->split_n[l]);
    }
}

uint64_t tp_hash(const Tp *tp, int split) {
    const void **bufs = calloc_check((size_t)tp->nlayers, sizeof *bufs);
    size_t *bytes = calloc_check((size_t)tp->nlayers, sizeof *bytes);
    for (int l = 0; l < tp->nlayers; l++) {
        bufs[l] = split ? tp->split[l] : tp->rep[l];
        bytes[l] = (split ? tp->split_n[l] : tp->rep_n[l]) * sizeof(float);  // 0: no chunks, h unchanged
    }
    uint64_t h = device_param_hash(tp->mem->dev, tp->nlayers, bufs, bytes, PARAM_HASH_INIT);
    free(bufs);
    free(bytes);
    return h;
}

void tp_gather_model(Tp *tp, Gpt *full) {
    for (int l = 0; l < tp->nlayers; l++) {
        size_t nr = tp->rep_n[l], ns = tp->split_n[l];
        float *rep_h = malloc_check(nr * sizeof(float)), *mine = malloc_check((ns ? ns : 1) * sizeof(float));
        float *all = malloc_check((ns ? ns : 1) * (size_t)tp->t * sizeof(float));
        device_to_host(tp->mem->dev, rep_h, tp->rep[l], nr * sizeof(float));
        if (ns) {
            device_to_host(tp->mem->dev, mine, tp->split[l], ns * sizeof(float));
            dist_all_gather(tp->group, mine, all, ns * (size_t)tp->t);  // rank k's slices at k ns
            tp_log_collectives(tp, "tp", "gather_model", "", l, NULL);
        }
        for (int k = 0; k < tp->t; k++)
            tp_layer_slice(&tp->cfg, tp->vp, tp->t, k, l, full->params[l], rep_h, all + k * ns, 0);
        free(rep_h), free(mine), free(all);
    }
}

// ---------------------------------------------------------------------------------------
// Activations and workspace
// ---------------------------------------------------------------------------------------

// A float activation, or (--mixed, kept) its bf16 copy in *h.
static float *take_linear_input(GptCarve *k, size_t n, int kept, bf16 **h) {
    *h = kept ? gpt_carve_halves(k, n) : NULL;
    return kept ? NULL : gpt_carve_floats(k, n);
}

static void carve_acts(TpActs *a, GptCarve *k, const Tp *tp, TpRows x, int B) {
    const GptConfig *c = &tp->cfg;
    size_t C = (size_t)c->dim, ts = (size_t)tp->t;
    int m = c->mixed;
    a->x0 = gpt_carve_floats(k, x.R * C);
    for (int l = 0; l < c->layers; l++) {
        TpBlockActs *b = &a->blocks[l];
        b->ln1 = take_linear_input(k, x.BT * C, m, &b->ln1_bf16);
        b->ln1_mean = gpt_carve_floats(k, x.R);
        b->ln1_rstd = gpt_carve_floats(k, x.R);
        b->qkv = gpt_carve_floats(k, x.BT * 3 * C / ts);
        b->att = b->lse = NULL;
        if (c->attn == GPT_ATTN_FLASH) b->lse = gpt_carve_floats(k, gpt_attn_saved_floats(c, B, c->heads / tp->t));
        else b->att = gpt_carve_floats(k, gpt_attn_saved_floats(c, B, c->heads / tp->t));
        b->atty = gpt_carve_floats(k, x.BT * C / ts);
        b->res1 = gpt_carve_floats(k, x.R * C);
        b->ln2 = take_linear_input(k, x.BT * C, m, &b->ln2_bf16);
        b->ln2_mean = gpt_carve_floats(k, x.R);
        b->ln2_rstd = gpt_carve_floats(k, x.R);
        b->fch = gpt_carve_floats(k, x.BT * 4 * C / ts);
        b->fch_gelu = take_linear_input(k, x.BT * 4 * C / ts, m, &b->fch_gelu_bf16);
        b->out = gpt_carve_floats(k, x.R * C);
    }
    a->lnf = take_linear_input(k, x.H * C, m, &a->lnf_bf16);
    a->lnf_mean = gpt_carve_floats(k, x.R);
    a->lnf_rstd = gpt_carve_floats(k, x.R);
    a->probs = gpt_carve_floats(k, x.H * x.Vh);
}

void tp_acts_alloc(TpActs *a, Tp *tp, int B) {
    const GptConfig *c = &tp->cfg;
    TpRows x = tp_rows(c, tp->t, tp->sp, tp->vp, B);
    tp->B = B, tp->BT = (int)x.BT, tp->rows = (int)x.R, tp->row0 = tp->sp ? tp->r * (int)x.R : 0;
    a->blocks = calloc_check((size_t)c->layers, sizeof *a->blocks);
    GptCarve count = {0};
    carve_acts(a, &count, tp, x, B);
    size_t bytes = 4 * count.nfloats + 2 * count.nhalves, total = tp_acts_bytes(c, tp->t, tp->sp, tp->vp, B);
    if (bytes != total)
        die("this is a bug in shardlab", "tensor-parallel activation layout (%zu bytes) disagrees with tp_acts_bytes (%zu)",
            bytes, total);
    a->buffer = mem_alloc(tp->mem, MEM_ACTS, bytes, "activations");
    GptCarve k = {.floats = a->buffer, .halves = (bf16 *)(a->buffer + count.nfloats)};
    carve_acts(a, &k, tp, x, B);
}

// Hand out the next n floats of one big buffer.
static float *take(float **cursor, size_t n) {
    float *p = *cursor;
    *cursor += n;
    return p;
}

void tp_acts_free(TpActs *a, Tp *tp) {
    mem_free(tp->mem, a->buffer);
    free(a->blocks);
    memset(a, 0, sizeof *a);
}

static size_t max2(size_t a, size_t b) { return a > b ? a : b; }

static size_t tp_kernel_workspace_bytes(const Tp *tp) {
    return ops_gpu_workspace_bytes(tp->B, tp->cfg.seq, tp->cfg.dim, tp->cfg.heads, tp->cfg.vocab,
                                   tp->cfg.attn == GPT_ATTN_FLASH);
}

// The most scratch one of this rank's Linear layers asks for (ops.h: linear_scratch_floats):
// W^T on the CPU, and with --mixed the bf16 operands. The bias rows' Linear (add_bias_rows)
// is fp32 on every setting.
static size_t tp_linear_floats(const Tp *tp) {
    const GptConfig *c = &tp->cfg;
    TpRows x = tp_rows(c, tp->t, tp->sp, tp->vp, tp->B);
    int C = c->dim, Cl = C / tp->t, Fl = 4 * C / tp->t, BT = (int)x.BT;
    int shapes[][3] = {{BT, C, 3 * Cl}, {BT, Cl, C}, {BT, C, Fl}, {BT, Fl, C}, {(int)x.H, C, (int)x.Vh}};
    size_t m = linear_scratch_floats((int)x.R, 1, C, 0);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        m = max2(m, linear_scratch_floats(shapes[i][0], shapes[i][1], shapes[i][2], c->mixed));
    return m;
}

// --mixed: the fp32 form of an activation kept in bf16 (ln1 or ln2 on all rows, fch_gelu's
// share, lnf), as the forward pass computes it and the backward pass widens it back.
static size_t tp_kept_floats(const Tp *tp) {
    TpRows x = tp_rows(&tp->cfg, tp->t, tp->sp, tp->vp, tp->B);
    return tp->cfg.mixed ? max2(x.BT * (size_t)tp->cfg.dim, x.BT * 4 * (size_t)tp->cfg.dim / (size_t)tp->t) : 0;
}

size_t tp_workspace_floats(const Tp *tp) {
    const GptConfig *c = &tp->cfg;
    TpRows x = tp_rows(c, tp->t, tp->sp, tp->vp, tp->B);
    size_t C = (size_t)c->dim, Cl = C / (size_t)tp->t, Fl = 4 * C / (size_t)tp->t;
    size_t lin = tp_linear_floats(tp), kept = tp_kept_floats(tp);
    size_t lin_bwd = c->mixed ? lin + kept : 0;                          // fp32's backward needs none
    size_t block_fwd = lin + x.R * C + x.BT * C + x.R * C + kept;        // LN rows, partial sum, bias rows
    size_t block_bwd = x.BT * Fl + x.BT * C + x.R * C + x.BT * Cl + x.BT * 3 * Cl + gpt_attn_scratch_floats(c, c->dim / c->heads)
                       + x.BT * C + x.R * C + lin_bwd;                   // see block_backward
    size_t head_fwd = lin + x.R * C + kept;
    size_t head_bwd = x.H * x.Vh + x.H * C + x.R * C + lin_bwd;
    size_t cpu = x.BT + max2(max2(block_fwd, block_bwd), max2(head_fwd, head_bwd));  // ones, then the largest
    if (!tp->ops->use_workspace) return cpu;
    // On a GPU, the kernels' own after it, sized for the whole model's shape (a rank's heads,
    // columns and rows are at most that), from a multiple of 64 floats.
    return (cpu + 63) / 64 * 64 + (tp_kernel_workspace_bytes(tp) + sizeof(float) - 1) / sizeof(float);
}

void tp_workspace_begin(Tp *tp) {
    float *ws = mem_alloc_floats(tp->mem, MEM_ACTS, tp_workspace_floats(tp), "workspace");
    float *ones = malloc_check((size_t)tp->BT * sizeof(float));
    for (int i = 0; i < tp->BT; i++) ones[i] = 1.0f;
    device_from_host(tp->mem->dev, ws, ones, (size_t)tp->BT * sizeof(float));
    free(ones);
    tp->ones = ws;
    tp->scratch = ws + tp->BT;
    if (tp->ops->use_workspace)  // the GPU kernels' part: the last bytes of the workspace
        tp->ops->use_workspace(ws + tp_workspace_floats(tp) - tp_kernel_workspace_bytes(tp) / sizeof(float),
                               tp_kernel_workspace_bytes(tp));
}

void tp_workspace_end(Tp *tp) {
    if (tp->ops->use_workspace) tp->ops->use_workspace(NULL, 0);
    mem_free(tp->mem, tp->ones);
    tp->ones = tp->scratch = NULL;
}

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
            runlog_span_extra(tp->log, tp->step, dist_coll_name(x->coll), tp->mb, layer, x->t0_us, x->t1_us,
                              x->bytes_sent, extra);
            tp->comm_us += x->t1_us - x->t0_us;
            int kind = x->coll == DIST_ALL_REDUCE ? TP_ALL_REDUCE : x->coll == DIST_REDUCE_SCATTER ? TP_REDUCE_SCATTER
                     : x->coll == DIST_ALL_GATHER ? TP_ALL_GATHER : -1;
            if (count && kind >= 0) count->calls[kind]++;
            if (count) count->bytes += x->bytes_sent;
        }
}

// ---------------------------------------------------------------------------------------
// The conjugate operators f and g
// ---------------------------------------------------------------------------------------
// A column-parallel linear Y_r = X A_r needs all of X on every rank, and gives each rank a
// slice of the outputs; a row-parallel linear Z = sum_r Y_r B_r gives each rank a PARTIAL
// sum. Chained (attention: c_attn then c_proj; MLP: c_fc then c_proj), the slice Y_r is
// exactly what the row-parallel half reads, so nothing moves in between: one collective
// before (f) and one after (g), and their gradients mirror each other.

static void check_rows(const Tp *tp, const void *in, const void *out, const char *which) {
    if (!tp->sp && in != out)
        die("this is a bug in shardlab's tensor parallelism", "%s without sequence parallelism works in place", which);
}

// f forward. Without SP every rank already holds all of X, the same bits: identity. With SP
// rank r holds its rows of X: all-gather them, and every rank has all rows.
void tp_f_forward(Tp *tp, const float *in, float *out, int layer, const char *at) {
    check_rows(tp, in, out, "f");
    if (!tp->sp) return;
    dist_all_gather(tp->group, in, out, (size_t)tp->BT * tp->cfg.dim);
    tp_log_collectives(tp, "tp", "f", at, layer, &tp->model);
}

// --mixed with --sp: the all-gathers of f forward and g backward move bf16. What they gather
// is only ever read by a Linear, which rounds it to bf16 anyway (a column-parallel Linear's
// input, a row-parallel Linear's output gradient), so rounding the rows before they travel
// changes no number and halves the bytes. dist.h's bf16 collectives want the rows to split
// into whole pairs: BT C divisible by 2t; else they go as fp32 (and are rounded after).
int tp_gathers_bf16(const Tp *tp) {
    return tp->sp && tp->cfg.mixed && (size_t)tp->BT * tp->cfg.dim % (2 * (size_t)tp->t) == 0;
}

// f forward under --mixed: out16 gets the input's bf16 rounding on all BT rows (the copy a
// keeps), out its fp32 widening (what the Linear is given); rows16 holds R C bf16s on the way.
void tp_f_forward_bf16(Tp *tp, const float *in, float *out, bf16 *out16, bf16 *rows16, int layer, const char *at) {
    size_t n = (size_t)tp->BT * tp->cfg.dim;
    if (!tp_gathers_bf16(tp)) {
        tp_f_forward(tp, in, out, layer, at);
        tp->ops->to_bf16(out16, out, n);
        return;
    }
    tp->ops->to_bf16(rows16, in, (size_t)tp->rows * tp->cfg.dim);
    dist_all_gather_bf16(tp->group, rows16, out16, n);
    tp_log_collectives(tp, "tp", "f", at, layer, &tp->model);
    tp->ops->from_bf16(out, out16, n);
}

// g backward under --mixed: out gets all BT rows of the gradient, gathered as bf16 (rows16:
// R C bf16s, all16: BT C bf16s on the way) and widened.
void tp_g_backward_bf16(Tp *tp, const float *in, float *out, bf16 *rows16, bf16 *all16, int layer, const char *at) {
    if (!tp_gathers_bf16(tp)) {
        tp_g_backward(tp, in, out, layer, at);
        return;
    }
    size_t n = (size_t)tp->BT * tp->cfg.dim;
    tp->ops->to_bf16(rows16, in, (size_t)tp->rows * tp->cfg.dim);
    dist_all_gather_bf16(tp->group, rows16, all16, n);
    tp_log_collectives(tp, "tp", "g", at, layer, &tp->model);
    tp->ops->from_bf16(out, all16, n);
}

// f backward. X fed every rank's slice of the linear, so its gradient is the SUM of the
// ranks' partial gradients dX_r = dY_r A_r^T. Without SP: all-reduce it, every rank gets all
// rows. With SP: reduce-scatter, rank r keeps the summed gradient of its own rows.
void tp_f_backward(Tp *tp, float *in, float *out, int layer, const char *at) {
    check_rows(tp, in, out, "f");
    if (tp->broken && layer == 1 && strcmp(at, "attn") == 0) {
        // SHARDLAB_TEST_BREAK=tp-skip-f: this rank's partial gradient taken for the sum.
        if (tp->sp) tp->ops->copy(out, in + (size_t)tp->row0 * tp->cfg.dim, (size_t)tp->rows * tp->cfg.dim);
        return;
    }
    // The gradient at all BT rows of X, BT C floats: in is this rank's partial; the sum goes
    // in place (without SP), or rank r's rows of it into out (with SP).
    /* BEGIN SOLUTION: f backward: sum the ranks' partial input gradients (SP: reduce-scatter) */
    size_t n = (size_t)tp->BT * tp->cfg.dim;
    if (tp->sp) dist_reduce_scatter(tp->group, in, out, n);
    else dist_all_reduce(tp->group, in, n);
    /* END SOLUTION */
    tp_log_collectives(tp, "tp", "f", at, layer, &tp->model);
}

// g forward. Each rank's row-parallel linear gives a partial output Z_r = Y_r B_r: the output
// is their sum. Without SP: all-reduce, every rank gets all rows of the sum. With SP:
// reduce-scatter, rank r gets its rows of the sum (the pointwise work after g, bias, residual
// and the next LayerNorm, then runs on 1/t of the rows).
void tp_g_forward(Tp *tp, float *in, float *out, int layer, const char *at) {
    check_rows(tp, in, out, "g");
    // in: this rank's partial output at all BT rows, BT C floats; the sum goes in place
    // (without SP), or rank r's rows of it into out (with SP).
    /* BEGIN SOLUTION: g forward: sum the ranks' partial outputs of the row-parallel linear (SP: reduce-scatter) */
    size_t n = (size_t)tp->BT * tp->cfg.dim;
    if (tp->sp) dist_reduce_scatter(tp->group, in, out, n);
    else dist_all_reduce(tp->group, in, n);
    /* END SOLUTION */
    tp_log_collectives(tp, "tp", "g", at, layer, &tp->model);
}

// g backward. The gradient of a sum is the same for every term: each rank's Z_r gets dZ.
// Without SP every rank holds all of dZ already: identity. With SP: all-gather the rows.
void tp_g_backward(Tp *tp, const float *in, float *out, int layer, const char *at) {
    check_rows(tp, in, out, "g");
    if (!tp->sp) return;
    dist_all_gather(tp->group, in, out, (size_t)tp->BT * tp->cfg.dim);
    tp_log_collectives(tp, "tp", "g", at, layer, &tp->model);
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

static void block_forward(Tp *tp, int layer, const float *x, TpBlockActs *a) {
    TpBlockView w = block_view(tp, tp->rep[layer], tp->split[layer]);
    const Ops *ops = tp->ops;
    int B = tp->B, T = tp->cfg.seq, BT = tp->BT, R = tp->rows, C = tp->cfg.dim;
    int Cl = C / tp->t, Fl = 4 * C / tp->t, heads = tp->cfg.heads / tp->t;
    float *cur = tp->scratch;
    float *wt = take(&cur, tp_linear_floats(tp));  // a Linear's scratch
    int bf = tp->cfg.mixed;
    float *ln_rows = take(&cur, (size_t)R * C), *partial = take(&cur, (size_t)BT * C);
    float *bias_rows = take(&cur, (size_t)R * C);
    // --mixed: a Linear's input computed here in fp32, kept in a as bf16 (tensor_parallel.h)
    float *kept = take(&cur, tp_kept_floats(tp));

    // res1 = x + g(c_proj_r(attention_r(c_attn_r(f(ln_1(x)))))) + c_proj.bias
    float *ln1 = bf ? kept : a->ln1;  // on all rows: what the column-parallel Linear reads
    float *ln = tp->sp ? ln_rows : ln1;
    ops->layernorm_forward(ln, a->ln1_mean, a->ln1_rstd, x, w.ln1_w, w.ln1_b, R, C);
    if (bf) tp_f_forward_bf16(tp, ln, ln1, a->ln1_bf16, (bf16 *)partial, layer, "attn");
    else tp_f_forward(tp, ln, ln1, layer, "attn");
    ops->linear_forward(a->qkv, ln1, w.qkv_w, w.qkv_b, BT, C, 3 * Cl, bf, wt);  // this rank's heads' q, k, v
    if (tp->cfg.attn == GPT_ATTN_FLASH)                                          // NH/t heads of C/NH each
        ops->flash_attention_forward(a->atty, a->lse, a->qkv, B, T, Cl, heads);
    else
        ops->attention_forward(a->atty, a->att, a->qkv, B, T, Cl, heads);
    float *sum = tp->sp ? partial : a->res1;
    ops->linear_forward(sum, a->atty, w.aproj_w, NULL, BT, Cl, C, bf, wt);          // partial: its heads' share
    tp_g_forward(tp, sum, a->res1, layer, "attn");
    add_bias_rows(tp, a->res1, w.aproj_b, R, bias_rows, wt);
    ops->residual_add(a->res1, a->res1, x, R * C);

    // out = res1 + g(c_proj_r(gelu(c_fc_r(f(ln_2(res1)))))) + c_proj.bias
    float *ln2 = bf ? kept : a->ln2;
    ln = tp->sp ? ln_rows : ln2;
    ops->layernorm_forward(ln, a->ln2_mean, a->ln2_rstd, a->res1, w.ln2_w, w.ln2_b, R, C);
    if (bf) tp_f_forward_bf16(tp, ln, ln2, a->ln2_bf16, (bf16 *)partial, layer, "mlp");  // (partial is free again)
    else tp_f_forward(tp, ln, ln2, layer, "mlp");
    ops->linear_forward(a->fch, ln2, w.fc_w, w.fc_b, BT, C, Fl, bf, wt);          // its 4C/t columns
    float *fch_gelu = bf ? kept : a->fch_gelu;
    ops->gelu_forward(fch_gelu, a->fch, BT * Fl);                                // pointwise: local
    if (bf) ops->to_bf16(a->fch_gelu_bf16, fch_gelu, (size_t)BT * Fl);
    sum = tp->sp ? partial : a->out;
    ops->linear_forward(sum, fch_gelu, w.mproj_w, NULL, BT, Fl, C, bf, wt);
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
    float *dfch = take(&cur, (size_t)BT * Fl), *dpart = take(&cur, (size_t)BT * C), *dres1 = take(&cur, (size_t)R * C);
    float *datty = take(&cur, (size_t)BT * Cl), *dqkv = take(&cur, (size_t)BT * 3 * Cl);
    float *att_scratch = take(&cur, gpt_attn_scratch_floats(&tp->cfg, C / tp->cfg.heads));
    float *dall = take(&cur, (size_t)BT * C), *dshard = take(&cur, (size_t)R * C);
    float *lin = take(&cur, tp->cfg.mixed ? tp_linear_floats(tp) : 0);  // a Linear's bf16 operands (--mixed)
    float *wide = cur;  // --mixed: an input kept in bf16, widened back
    int bf = tp->cfg.mixed;

    // The MLP: the bias saw this rank's rows; g hands every rank all rows of dout; f sums
    // the ranks' partial gradients of ln_2's output.
    bias_backward(tp, g.mproj_b, dx, R);
    float *dy = tp->sp ? dall : dx;
    bf16 *all16 = bf ? (bf16 *)wide : NULL, *rows16 = bf ? all16 + (size_t)BT * C : NULL;  // --mixed: g's gather
    if (bf) tp_g_backward_bf16(tp, dx, dy, rows16, all16, layer, "mlp");
    else tp_g_backward(tp, dx, dy, layer, "mlp");
    const float *fch_gelu = gpt_saved_input(ops, a->fch_gelu, a->fch_gelu_bf16, wide, (size_t)BT * Fl);
    ops->linear_backward(dfch, g.mproj_w, NULL, dy, fch_gelu, w.mproj_w, BT, Fl, C, bf, lin);
    ops->gelu_backward(dfch, a->fch, dfch, BT * Fl);
    const float *ln2 = gpt_saved_input(ops, a->ln2, a->ln2_bf16, wide, (size_t)BT * C);
    ops->linear_backward(dpart, g.fc_w, g.fc_b, dfch, ln2, w.fc_w, BT, C, Fl, bf, lin);
    float *dln = tp->sp ? dshard : dpart;
    tp_f_backward(tp, dpart, dln, layer, "mlp");
    ops->copy(dres1, dx, (size_t)R * C);  // the residual path
    ops->layernorm_backward(dres1, g.ln2_w, g.ln2_b, dln, a->res1, w.ln2_w, a->ln2_mean, a->ln2_rstd, R, C);

    // The attention, the same way.
    bias_backward(tp, g.aproj_b, dres1, R);
    dy = tp->sp ? dall : dres1;
    if (bf) tp_g_backward_bf16(tp, dres1, dy, rows16, all16, layer, "attn");
    else tp_g_backward(tp, dres1, dy, layer, "attn");
    ops->linear_backward(datty, g.aproj_w, NULL, dy, a->atty, w.aproj_w, BT, Cl, C, bf, lin);
    if (tp->cfg.attn == GPT_ATTN_FLASH)
        ops->flash_attention_backward(dqkv, datty, a->qkv, a->atty, a->lse, B, T, Cl, heads, att_scratch);
    else
        ops->attention_backward(dqkv, datty, a->qkv, a->att, B, T, Cl, heads, att_scratch);
    const float *ln1 = gpt_saved_input(ops, a->ln1, a->ln1_bf16, wide, (size_t)BT * C);
    ops->linear_backward(dpart, g.qkv_w, g.qkv_b, dqkv, ln1, w.qkv_w, BT, C, 3 * Cl, bf, lin);
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
    float *wt = take(&cur, tp_linear_floats(tp)), *ln_rows = take(&cur, (size_t)R * C);
    int bf = tp->cfg.mixed;
    float *lnf = bf ? take(&cur, tp_kept_floats(tp)) : a->lnf;  // --mixed: kept in a as bf16
    if (!tp->vp) {  // replicated head: the loss of this rank's rows (with SP: 1/t of them)
        tp->ops->layernorm_forward(lnf, a->lnf_mean, a->lnf_rstd, x, lnf_w, lnf_b, R, C);
        if (bf) tp->ops->to_bf16(a->lnf_bf16, lnf, (size_t)R * C);
        tp->ops->linear_forward(a->probs, lnf, head_w, NULL, R, C, V, bf, wt);
        return tp->ops->crossentropy_forward(a->probs, targets + tp->row0, R, V);
    }
    // Vocabulary-parallel: a column-parallel linear like c_fc, so f before it; logits [BT, V/t].
    float *ln = tp->sp ? ln_rows : lnf;
    tp->ops->layernorm_forward(ln, a->lnf_mean, a->lnf_rstd, x, lnf_w, lnf_b, R, C);
    if (bf) tp_f_forward_bf16(tp, ln, lnf, a->lnf_bf16, (bf16 *)wt, L + 1, "head");  // (wt is free until the Linear)
    else tp_f_forward(tp, ln, lnf, L + 1, "head");
    tp->ops->linear_forward(a->probs, lnf, head_w, NULL, tp->BT, C, V / tp->t, bf, wt);
    return vocab_parallel_crossentropy(tp, a->probs, targets, tp->BT);
}

static void head_backward(Tp *tp, const float *x, const TpActs *a, const uint8_t *targets, float scale, float *dx) {
    int L = tp->cfg.layers, R = tp->rows, BT = tp->BT, C = tp->cfg.dim, V = tp->cfg.vocab;
    float *lnf_w = tp->rep[L + 1], *head_w = tp->vp ? tp->split[L + 1] : lnf_w + 2 * C;
    float *glnf_w = tp->rep_grad[L + 1], *glnf_b = glnf_w + C;
    float *ghead_w = tp->vp ? tp->split_grad[L + 1] : glnf_w + 2 * C;
    float *cur = tp->scratch, *dln;
    if (!tp->vp) {
        float *dlogits = take(&cur, (size_t)R * V);
        dln = take(&cur, (size_t)R * C);
        tp->ops->crossentropy_backward(dlogits, a->probs, targets + tp->row0, R, V, scale);
        float *lin = take(&cur, tp->cfg.mixed ? tp_linear_floats(tp) : 0);
        const float *lnf = gpt_saved_input(tp->ops, a->lnf, a->lnf_bf16, cur, (size_t)R * C);
        tp->ops->linear_backward(dln, ghead_w, NULL, dlogits, lnf, head_w, R, C, V, tp->cfg.mixed, lin);
    } else {
        int Vl = V / tp->t;
        float *dlogits = take(&cur, (size_t)BT * Vl), *dpart = take(&cur, (size_t)BT * C);
        float *dshard = take(&cur, (size_t)R * C);
        vocab_parallel_dlogits(tp, dlogits, a->probs, targets, BT, scale);
        float *lin = take(&cur, tp->cfg.mixed ? tp_linear_floats(tp) : 0);
        const float *lnf = gpt_saved_input(tp->ops, a->lnf, a->lnf_bf16, cur, (size_t)BT * C);
        tp->ops->linear_backward(dpart, ghead_w, NULL, dlogits, lnf, head_w, BT, C, Vl, tp->cfg.mixed, lin);
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
