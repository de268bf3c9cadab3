// slices.c — tensor parallelism's state on one rank (tensor_parallel.h): which slices of each
// layer it holds, made from the whole model as `single` builds it, its gradients, its hash,
// the model gathered back whole, and its activations' and workspace's layout.
#include "tensor_parallel.h"  // defines: tp_layer_slice(), tp_create(), Tp, tp_destroy(), ...
#include "tp_internal.h"      // defines: tp_take(), tp_linear_floats(), tp_kept_floats()

#include <stdlib.h>
#include <string.h>

#include "common/harness/check.h"  // defines: die(), calloc_check(), malloc_check()
#include "common/harness/train.h"  // defines: train_load_weights()

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
    mem_free_array(tp->mem, tp->rep, tp->nlayers);
    mem_free_array(tp->mem, tp->rep_grad, tp->nlayers);
    mem_free_array(tp->mem, tp->split, tp->nlayers);
    mem_free_array(tp->mem, tp->split_grad, tp->nlayers);
    free(tp->rep_n), free(tp->split_n);
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
// Activations
// ---------------------------------------------------------------------------------------

// A float activation, or (--mixed, kept) its bf16 copy in *h.
static float *take_activation(GptCarve *k, size_t n, int kept, bf16 **h) {
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
        b->ln1 = take_activation(k, x.BT * C, m, &b->ln1_bf16);
        b->ln1_mean = gpt_carve_floats(k, x.R);
        b->ln1_rstd = gpt_carve_floats(k, x.R);
        b->qkv = take_activation(k, x.BT * 3 * C / ts, gpt_keeps_qkv_bf16(c), &b->qkv_bf16);
        b->att = b->lse = NULL;
        if (c->attn == GPT_ATTN_FLASH) b->lse = gpt_carve_floats(k, gpt_attn_saved_floats(c, B, c->heads / tp->t));
        else b->att = gpt_carve_floats(k, gpt_attn_saved_floats(c, B, c->heads / tp->t));
        b->atty = take_activation(k, x.BT * C / ts, m, &b->atty_bf16);
        b->res1 = gpt_carve_floats(k, x.R * C);
        b->ln2 = take_activation(k, x.BT * C, m, &b->ln2_bf16);
        b->ln2_mean = gpt_carve_floats(k, x.R);
        b->ln2_rstd = gpt_carve_floats(k, x.R);
        b->fch = take_activation(k, x.BT * 4 * C / ts, m, &b->fch_bf16);
        b->fch_gelu = take_activation(k, x.BT * 4 * C / ts, m, &b->fch_gelu_bf16);
        b->out = gpt_carve_floats(k, x.R * C);
    }
    a->lnf = take_activation(k, x.H * C, m, &a->lnf_bf16);
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

void tp_acts_free(TpActs *a, Tp *tp) {
    mem_free(tp->mem, a->buffer);
    free(a->blocks);
    memset(a, 0, sizeof *a);
}

// ---------------------------------------------------------------------------------------
// The workspace
// ---------------------------------------------------------------------------------------

// Hand out the next n floats of one big buffer.
float *tp_take(float **cursor, size_t n) {
    float *p = *cursor;
    *cursor += n;
    return p;
}

static size_t max2(size_t a, size_t b) { return a > b ? a : b; }

static size_t tp_kernel_workspace_bytes(const Tp *tp) {
    return ops_gpu_workspace_bytes(tp->B, tp->cfg.seq, tp->cfg.dim, tp->cfg.heads, tp->cfg.vocab,
                                   tp->cfg.attn == GPT_ATTN_FLASH);
}

// The most scratch one of this rank's Linear layers asks for (ops.h: linear_scratch_floats):
// W^T on the CPU, and with --mixed the bf16 operands. The bias rows' Linear (add_bias_rows)
// is fp32 on every setting.
size_t tp_linear_floats(const Tp *tp) {
    const GptConfig *c = &tp->cfg;
    TpRows x = tp_rows(c, tp->t, tp->sp, tp->vp, tp->B);
    int C = c->dim, Cl = C / tp->t, Fl = 4 * C / tp->t, BT = (int)x.BT;
    int shapes[][3] = {{BT, C, 3 * Cl}, {BT, Cl, C}, {BT, C, Fl}, {BT, Fl, C}, {(int)x.H, C, (int)x.Vh}};
    size_t m = linear_scratch_floats((int)x.R, 1, C, 0);
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        m = max2(m, linear_scratch_floats(shapes[i][0], shapes[i][1], shapes[i][2], c->mixed));
    return m;
}

// --mixed: in the forward pass, naive attention's fp32 output before it is kept in bf16, or with
// SP f's fp32 gather of LayerNorm's rows where they cannot travel as bf16 (the rest is written
// in bf16 by the op that computes it); in the backward pass (whose Linears multiply the kept
// bf16s themselves) g's gathers of bf16 rows, (BT + R) C bf16s.
size_t tp_kept_floats(const Tp *tp) {
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
