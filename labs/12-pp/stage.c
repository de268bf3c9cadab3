// stage.c — see stage.h.
#include "stage.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/harness/check.h"  // defines: calloc_check(), malloc_check()
#include "common/harness/hash.h"   // defines: PARAM_HASH_INIT
#include "common/harness/train.h"  // defines: train_load_weights(), MemRow, ...
#include "common/model/device.h"   // defines: device_from_host(), device_param_hash(), ...

void stage_create(Stage *st, const Pipe *pp, int s, const GptConfig *c, const TrainArgs *a, Mem *mem) {
    memset(st, 0, sizeof *st);
    st->cfg = *c;
    st->nlayers = gpt_layer_count(c);
    st->params = calloc_check((size_t)st->nlayers, sizeof(float *));
    st->grads = calloc_check((size_t)st->nlayers, sizeof(float *));
    st->m = calloc_check((size_t)st->nlayers, sizeof(float *));
    st->v = calloc_check((size_t)st->nlayers, sizeof(float *));
    // The whole model once on the host, as `single` builds it (or --init); keep our layers.
    Mem host;
    mem_init(&host, NULL);
    Gpt model;
    gpt_create(&model, c, &host, a->seed);
    if (a->init) train_load_weights(&model, a->init);
    for (int k = s; k < pp->K; k += pp->p)
        for (int l = pp->first[k]; l <= pp->last[k]; l++) {
            size_t n = gpt_layer_size(c, l);
            st->params[l] = mem_alloc_floats(mem, MEM_PARAMS, n, "parameters");
            st->grads[l] = mem_alloc_floats(mem, MEM_GRADS, n, "gradients");
            st->m[l] = mem_alloc_floats(mem, MEM_OPTIM, n, "AdamW first moment");
            st->v[l] = mem_alloc_floats(mem, MEM_OPTIM, n, "AdamW second moment");
            device_from_host(mem->dev, st->params[l], model.params[l], n * sizeof(float));
            st->psi += n;
        }
    gpt_destroy(&model);
    mem_destroy(&host);
}

void stage_destroy(Stage *st, Mem *mem) {
    mem_free_array(mem, st->params, st->nlayers);
    mem_free_array(mem, st->grads, st->nlayers);
    mem_free_array(mem, st->m, st->nlayers);
    mem_free_array(mem, st->v, st->nlayers);
}

// The param_hash (hash.h) of this stage's layers, in layer order, on the device.
uint64_t stage_hash(const Stage *st, const Mem *mem) {
    const void **bufs = calloc_check((size_t)st->nlayers, sizeof *bufs);
    size_t *bytes = calloc_check((size_t)st->nlayers, sizeof *bytes);
    int n = 0;
    for (int l = 0; l < st->nlayers; l++)
        if (stage_holds(st, l)) {
            bufs[n] = st->params[l];
            bytes[n++] = gpt_layer_size(&st->cfg, l) * sizeof(float);
        }
    uint64_t h = device_param_hash(mem->dev, n, bufs, bytes, PARAM_HASH_INIT);
    free(bufs);
    free(bytes);
    return h;
}

// The global gradient norm, layer by layer in layer order as `single` sums it: each stage's
// per-layer sums of squares travel over the pipeline as raw bits (an all-gather copies words).
// layer_stage[l]: the stage that holds layer l.
double stage_grad_norm(const Stage *st, const GptConfig *c, const Mem *mem, DistGroup *pipe, int p,
                       const int *layer_stage) {
    int L2 = st->nlayers;
    double *sq = malloc_check((size_t)L2 * sizeof *sq), *sq_all = malloc_check((size_t)L2 * p * sizeof *sq_all);
    // Every layer's sum in one read (sum_of_squares_buffers); a layer held elsewhere counts as
    // an empty buffer here, whose sum is 0.
    const float **bufs = malloc_check((size_t)L2 * sizeof *bufs);
    size_t *len = malloc_check((size_t)L2 * sizeof *len);
    for (int l = 0; l < L2; l++) {
        int held = stage_holds(st, l);
        bufs[l] = held ? st->grads[l] : NULL, len[l] = held ? gpt_layer_size(c, l) : 0;
    }
    mem->dev->ops->sum_of_squares_buffers(L2, bufs, len, sq);
    free(bufs), free(len);
    dist_all_gather(pipe, (const float *)sq, (float *)sq_all, 2 * (size_t)L2 * p);
    double norm_sq = 0;
    for (int l = 0; l < L2; l++) norm_sq += sq_all[layer_stage[l] * L2 + l];
    free(sq), free(sq_all);
    return sqrt(norm_sq);
}

// AdamW on this stage's layers, with the global clip factor, at rate lr.
void stage_update(Stage *st, const GptConfig *c, const Mem *mem, const TrainArgs *a, double norm, double lr,
                  int64_t step) {
    AdamW hyper = {.lr = (float)lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = (float)a->weight_decay};
    for (int l = 0; l < st->nlayers; l++) {
        if (!stage_holds(st, l)) continue;
        size_t n = gpt_layer_size(c, l);
        if (a->clip > 0 && norm > a->clip) mem->dev->ops->scale_floats(st->grads[l], n, (float)(a->clip / norm));
        mem->dev->ops->adamw_update(&hyper, step, st->params[l], st->grads[l], st->m[l], st->v[l], n);
    }
    device_sync(mem->dev);
}

// The whole model on rank 0 (pipeline 0's stages send it their layers) into whole, which rank
// 0 creates in host: for the summary's hash and --save. Returns rank 0's hash (0 elsewhere).
uint64_t stage_gather_model(Gpt *whole, Mem *host, const Stage *st, const GptConfig *c, Mem *mem, DistGroup *pipe,
                            int s, int d, int rank, const int *layer_stage, uint64_t seed) {
    if (rank == 0) gpt_create(whole, c, host, seed);
    if (d != 0) return 0;
    for (int l = 0; l < st->nlayers; l++) {
        size_t n = gpt_layer_size(c, l);
        int owner = layer_stage[l];
        if (owner == 0 && s == 0) {
            device_to_host(mem->dev, whole->params[l], st->params[l], n * sizeof(float));
        } else if (s == owner) {
            DistP2p send = {.send = 1, .peer = 0, .buf = st->params[l], .n = n, .tag = l};
            dist_p2p(pipe, &send, 1);
        } else if (s == 0) {
            float *tmp = mem_alloc_floats(mem, MEM_COMM, n, "layer on its way to rank 0");
            DistP2p recv = {.send = 0, .peer = owner, .buf = tmp, .n = n, .tag = l};
            dist_p2p(pipe, &recv, 1);
            device_to_host(mem->dev, whole->params[l], tmp, n * sizeof(float));
            mem_free(mem, tmp);
        }
    }
    return rank == 0 ? gpt_param_hash(whole) : 0;
}

// Where this rank's memory goes: its layers (Psi_s), and per micro-batch in flight the
// activations of its chunks' layers.
void stage_report_memory(RunLog *log, const Stage *st, const Pipe *pp, const GptConfig *c, const Mem *mem, int s,
                         int micro) {
    double psi_s = (double)st->psi;
    MemRow rows[] = {
        {.cat = MEM_PARAMS, .formula = "4 Psi_s (this stage's layers)", .expect = 4 * psi_s},
        {.cat = MEM_GRADS, .formula = "4 Psi_s", .expect = 4 * psi_s},
        {.cat = MEM_OPTIM, .formula = "8 Psi_s (AdamW m and v)", .expect = 8 * psi_s},
        {.cat = MEM_ACTS, .formula = "0 between steps (see below)", .expect = 0},
        {.cat = MEM_COMM, .formula = "0 between steps", .expect = 0},
    };
    train_report_memory(log, mem, NULL, c, micro, rows, 5);
    char text[64];
    runlog_printf(log, "stage %d holds layers", s);
    for (int k = s; k < pp->K; k += pp->p) {
        runlog_printf(log, " %d..%d (chunk %d: %s per micro-batch in flight)", pp->first[k], pp->last[k], k,
                      format_bytes(text, sizeof text, (double)gpt_acts_layers_bytes(c, micro, pp->first[k], pp->last[k])));
    }
}
