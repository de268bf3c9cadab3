// optimizer.c — see optimizer.h.
#include "optimizer.h"

#include <math.h>
#include <stdlib.h>

#include "common/harness/check.h"  // defines: calloc_check(), malloc_check()
#include "common/model/device.h"   // defines: device_sync(), device_to_host(), ...

// ---- AdamW on the two parts ------------------------------------------------------------

void tp_adamw_create(TpAdamW *o, const Tp *tp, const TrainArgs *a) {
    o->hyper = (AdamW){.lr = (float)a->lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                       .weight_decay = (float)a->weight_decay};
    for (int p = 0; p < 2; p++) {
        o->m[p] = calloc_check((size_t)tp->nlayers, sizeof(float *));
        o->v[p] = calloc_check((size_t)tp->nlayers, sizeof(float *));
        for (int l = 0; l < tp->nlayers; l++)
            if (tp_part_floats(tp, p, l)) {
                o->m[p][l] = mem_alloc_floats(tp->mem, MEM_OPTIM, tp_part_floats(tp, p, l), "AdamW first moment");
                o->v[p][l] = mem_alloc_floats(tp->mem, MEM_OPTIM, tp_part_floats(tp, p, l), "AdamW second moment");
            }
    }
}

void tp_adamw_destroy(TpAdamW *o, Tp *tp) {
    for (int p = 0; p < 2; p++) mem_free_array(tp->mem, o->m[p], tp->nlayers), mem_free_array(tp->mem, o->v[p], tp->nlayers);
}

double tp_clip_and_update(Tp *tp, TpAdamW *o, double clip, double lr, int64_t step) {
    o->hyper.lr = (float)lr;
    const Ops *ops = tp->ops;
    // Each part's sum over the layers in layer order: both parts' layers in one read
    // (sum_of_squares_buffers), each layer's sum kept, added per part from 0 in layer order.
    int L = tp->nlayers;
    double sq[2] = {0.0, 0.0}, *each = malloc_check(2 * (size_t)L * sizeof *each);
    const float **bufs = malloc_check(2 * (size_t)L * sizeof *bufs);
    size_t *len = malloc_check(2 * (size_t)L * sizeof *len);
    for (int p = 0; p < 2; p++)
        for (int l = 0; l < L; l++)
            bufs[p * L + l] = tp_part(tp->rep_grad, tp->split_grad, p, l), len[p * L + l] = tp_part_floats(tp, p, l);
    ops->sum_of_squares_buffers(2 * L, bufs, len, each);
    for (int p = 0; p < 2; p++)
        for (int l = 0; l < L; l++) sq[p] += each[p * L + l];
    free(bufs), free(len), free(each);
    if (tp->t > 1) {
        sq[1] = dist_sum_over_ranks(tp->group, sq[1]);  // the same bits on every rank: the same clip
        tp_log_collectives(tp, "tp", "grad_norm", "", -1, NULL);
    }
    double norm = sqrt(sq[0] + sq[1]);
    for (int p = 0; p < 2; p++)
        for (int l = 0; l < tp->nlayers; l++) {
            size_t n = tp_part_floats(tp, p, l);
            if (!n) continue;
            float *g = tp_part(tp->rep_grad, tp->split_grad, p, l);
            if (clip > 0 && norm > clip) ops->scale_floats(g, n, (float)(clip / norm));
            ops->adamw_update(&o->hyper, step, tp_part(tp->rep, tp->split, p, l), g, o->m[p][l], o->v[p][l], n);
        }
    device_sync(tp->mem->dev);
    return norm;
}

// ---- checkpoints, through whole units -------------------------------------------------

// The device buffers of a kind's parts (part 0 replicated, 1 split) of layer l.
static float *tp_state_of(Tp *tp, TpAdamW *o, int kind, int part, int l) {
    return kind == DCP_PARAMS ? tp_part(tp->rep, tp->split, part, l) : kind == DCP_M ? o->m[part][l] : o->v[part][l];
}

void tp_ckpt_create(TpCkpt *k, const Tp *tp) {
    size_t most_rep = 0, most_split = 0;
    for (int l = 0; l < tp->nlayers; l++) {
        most_rep = tp->rep_n[l] > most_rep ? tp->rep_n[l] : most_rep;
        most_split = tp->split_n[l] > most_split ? tp->split_n[l] : most_split;
    }
    for (int kind = 0; kind < DCP_KINDS; kind++) {
        k->whole[kind] = calloc_check((size_t)tp->nlayers, sizeof(float *));
        for (int l = 0; l < tp->nlayers; l++) k->whole[kind][l] = calloc_check(gpt_layer_size(&tp->cfg, l), sizeof(float));
    }
    k->rep = malloc_check((most_rep + 1) * sizeof(float));
    k->split = malloc_check((most_split * (size_t)tp->t + 1) * sizeof(float));
    k->most_split = most_split;
}

void tp_ckpt_destroy(TpCkpt *k, Tp *tp) {
    for (int kind = 0; kind < DCP_KINDS; kind++) {
        for (int l = 0; l < tp->nlayers; l++) free(k->whole[kind][l]);
        free(k->whole[kind]);
    }
    free(k->rep), free(k->split);
}

// The whole units from the group's parts (every rank of the group calls it).
void tp_ckpt_gather(TpCkpt *k, Tp *tp, TpAdamW *o) {
    k->gathered = k->most_split ? mem_alloc_floats(tp->mem, MEM_COMM, k->most_split * (size_t)tp->t, "checkpoint gather")
                                : NULL;
    for (int kind = 0; kind < DCP_KINDS; kind++)
        for (int l = 0; l < tp->nlayers; l++) {
            size_t nr = tp->rep_n[l], ns = tp->split_n[l];
            if (nr) device_to_host(tp->mem->dev, k->rep, tp_state_of(tp, o, kind, 0, l), nr * sizeof(float));
            if (ns) {
                tp->mem->dev->ops->copy(k->gathered + (size_t)tp->r * ns, tp_state_of(tp, o, kind, 1, l), ns);
                dist_all_gather(tp->group, k->gathered + (size_t)tp->r * ns, k->gathered, ns * (size_t)tp->t);
                device_to_host(tp->mem->dev, k->split, k->gathered, ns * (size_t)tp->t * sizeof(float));
            }
            for (int r = 0; r < tp->t; r++)
                tp_layer_slice(&tp->cfg, tp->vp, tp->t, r, l, k->whole[kind][l], k->rep, k->split + (size_t)r * ns, 0);
        }
    if (k->gathered) mem_free(tp->mem, k->gathered);
    k->gathered = NULL;
}

// This rank's parts cut out of the whole units.
void tp_ckpt_scatter(TpCkpt *k, Tp *tp, TpAdamW *o) {
    for (int kind = 0; kind < DCP_KINDS; kind++)
        for (int l = 0; l < tp->nlayers; l++) {
            tp_layer_slice(&tp->cfg, tp->vp, tp->t, tp->r, l, k->whole[kind][l], k->rep, k->split, 1);
            if (tp->rep_n[l])
                device_from_host(tp->mem->dev, tp_state_of(tp, o, kind, 0, l), k->rep, tp->rep_n[l] * sizeof(float));
            if (tp->split_n[l])
                device_from_host(tp->mem->dev, tp_state_of(tp, o, kind, 1, l), k->split, tp->split_n[l] * sizeof(float));
        }
}

// The whole units as pieces: chunk `part` of `parts` of each.
void tp_ckpt_pieces(DcpState *s, TpCkpt *k, const GptConfig *c, int part, int parts) {
    for (int l = 0; l < gpt_layer_count(c); l++) {
        size_t off, len;
        dist_chunk(gpt_layer_size(c, l), parts, part, &off, &len);
        for (int kind = 0; kind < DCP_KINDS; kind++) dcp_state_add(s, (DcpKind)kind, l, off, len, k->whole[kind][l] + off, 1);
    }
}
