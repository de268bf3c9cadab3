// sharded.c — see sharded.h.
#include "sharded.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <stdio.h>

#include "common/harness/check.h"         // defines: calloc_check(), malloc_check(), die()
#include "common/harness/train.h"         // defines: train_load_weights(), ...
#include "common/runfiles/safetensors.h"  // defines: StTensor, safetensors_save()

// ---------------------------------------------------------------------------------------
// Precision
// ---------------------------------------------------------------------------------------

const char *precision_name(Precision p) { return p == PREC_BF16 ? "bf16" : "fp32"; }

size_t precision_bytes(Precision p) { return p == PREC_BF16 ? sizeof(bf16) : sizeof(float); }

void precision_to_fp32(const Ops *ops, Precision p, float *dst, const void *src, size_t n) {
    if (p == PREC_BF16) ops->from_bf16(dst, src, n);
    else ops->copy(dst, src, n);
}

void precision_from_fp32(const Ops *ops, Precision p, void *dst, const float *src, size_t n) {
    if (p == PREC_BF16) ops->to_bf16(dst, src, n);
    else ops->copy(dst, src, n);
}

void precision_accumulate(const Ops *ops, Precision p, void *acc, const float *x, size_t n) {
    if (p == PREC_BF16) ops->acc_bf16(acc, x, n);
    else ops->residual_add(acc, acc, x, (int)n);
}

void precision_add(const Ops *ops, Precision p, void *acc, const void *x, size_t n) {
    if (p == PREC_BF16) ops->add_bf16(acc, x, n);
    else ops->residual_add(acc, acc, x, (int)n);
}

double precision_sum_of_squares(const Ops *ops, Precision p, int n, const void *const *x, const size_t *len,
                                double *each) {
    if (p == PREC_BF16) return ops->sum_of_squares_buffers_bf16(n, (const bf16 *const *)x, len, each);
    return ops->sum_of_squares_buffers(n, (const float *const *)x, len, each);
}

// ---------------------------------------------------------------------------------------
// Layout
// ---------------------------------------------------------------------------------------

void shard_layout_init(ShardLayout *s, const GptConfig *c, int world, int rank, int align) {
    memset(s, 0, sizeof *s);
    s->units = gpt_layer_count(c);
    s->world = world;
    s->rank = rank;
    s->align = align;
    s->count = calloc_check((size_t)s->units, sizeof *s->count);
    s->shard = calloc_check((size_t)s->units, sizeof *s->shard);
    for (int u = 0; u < s->units; u++) {
        s->count[u] = gpt_layer_size(c, u);
        // The length of every rank's shard of unit u (sharded.h): ceil(count / N), rounded up
        // to a multiple of align, so that N shards cover the unit and its padding.
        /* BEGIN SOLUTION: the shard length of unit u, s->shard[u] */
        size_t per_rank = (s->count[u] + (size_t)world - 1) / (size_t)world;  // ceil(count / N)
        s->shard[u] = (per_rank + (size_t)align - 1) / (size_t)align * (size_t)align;
        /* END SOLUTION */
        s->psi += s->count[u];
        s->shard_total += s->shard[u];
    }
    s->psi_padded = (size_t)world * s->shard_total;
}

void shard_layout_free(ShardLayout *s) {
    free(s->count);
    free(s->shard);
    memset(s, 0, sizeof *s);
}

size_t shard_padded(const ShardLayout *s, int u) { return (size_t)s->world * s->shard[u]; }

// ---------------------------------------------------------------------------------------
// Collectives in either precision
// ---------------------------------------------------------------------------------------

void sharded_all_gather(DistGroup *g, Precision p, const void *shard, void *full, size_t n, int tag, DistWork *w) {
    DistWork now;
    DistWork *work = w ? w : &now;
    if (p == PREC_BF16) dist_all_gather_bf16_start(g, shard, full, n, tag, work);
    else dist_all_gather_start(g, shard, full, n, tag, work);
    if (!w) dist_wait(&now);
}

void sharded_reduce_scatter(DistGroup *g, Precision p, const void *full, void *shard, size_t n, int tag,
                            DistWork *w) {
    DistWork now;
    DistWork *work = w ? w : &now;
    if (p == PREC_BF16) dist_reduce_scatter_bf16_start(g, full, shard, n, tag, work);
    else dist_reduce_scatter_start(g, full, shard, n, tag, work);
    if (!w) dist_wait(&now);
}

const float *sharded_widen(Mem *mem, Precision p, const void *full, size_t n, float **copy) {
    *copy = NULL;
    if (p == PREC_FP32) return full;
    *copy = mem_alloc_floats(mem, MEM_PARAMS, n, "fp32 copy of bf16 weights");
    precision_to_fp32(mem->dev->ops, p, *copy, full, n);
    return *copy;
}

void sharded_reduce_gradient(DistGroup *g, Precision p, Mem *mem, const float *g32, void *shard_acc, size_t n,
                             int tag) {
    const Ops *ops = mem->dev->ops;
    size_t e = precision_bytes(p);
    void *whole = (void *)g32, *rounded = NULL;
    if (p == PREC_BF16) {
        whole = rounded = mem_alloc(mem, MEM_GRADS, n * e, "bf16 gradient of one unit");
        precision_from_fp32(ops, p, rounded, g32, n);
    }
    size_t s = n / (size_t)g->size;
    void *summed = mem_alloc(mem, MEM_COMM, s * e, "reduce-scatter output");
    sharded_reduce_scatter(g, p, whole, summed, n, tag, NULL);
    precision_add(ops, p, shard_acc, summed, s);
    mem_free(mem, summed);
    mem_free(mem, rounded);
}

uint64_t sharded_log_collectives(RunLog *log, Dist *d, DistRecord *records, size_t max, int64_t step,
                                 int64_t *comm_us, uint64_t *replica_bytes) {
    uint64_t unit_bytes = 0;
    size_t k;
    while ((k = dist_drain_records(d, records, max)) > 0) {
        for (size_t i = 0; i < k; i++) {
            int replica = records[i].tag >= SHARDED_REPLICA_TAG, unit = records[i].tag - (replica ? SHARDED_REPLICA_TAG : 0);
            char extra[160];
            snprintf(extra, sizeof extra, "\"unit\":%d,\"algo\":\"%s\",\"dtype\":\"%s\",\"issued_us\":%lld%s", unit,
                     records[i].algo, dist_dtype_name(records[i].dtype), (long long)records[i].issued_us,
                     replica ? ",\"group\":\"replicate\"" : "");
            runlog_comm_span(log, step, dist_coll_name(records[i].coll), -1, unit, records[i].t0_us, records[i].t1_us,
                             records[i].bytes_sent, records[i].waited_from_us, extra);
            if (replica && replica_bytes) *replica_bytes += records[i].bytes_sent;
            else if (!replica && records[i].tag >= 0) unit_bytes += records[i].bytes_sent;
            if (comm_us) *comm_us += records[i].t1_us - records[i].t0_us;
        }
    }
    return unit_bytes;
}

// ---------------------------------------------------------------------------------------
// Weights at start and at the end
// ---------------------------------------------------------------------------------------

void sharded_layout_fields(char *out, size_t n, const ShardLayout *s, Precision prec) {
    snprintf(out, n, "\"precision\":\"%s\",\"psi_padded\":%zu,\"padding\":%zu,\"units\":%d", precision_name(prec),
             s->psi_padded, s->psi_padded - s->psi, s->units);
}

float **sharded_init_weights(const ShardLayout *s, const GptConfig *c, const TrainArgs *a, DistGroup *g) {
    // The whole model once on the host, as `single` builds it, then cut up by the caller.
    Mem host;
    mem_init(&host, NULL);
    Gpt model;
    gpt_create(&model, c, &host, a->seed);
    if (a->init) train_load_weights(&model, a->init);
    float **units = calloc_check((size_t)s->units, sizeof *units);
    for (int u = 0; u < s->units; u++) {
        dist_broadcast(g, model.params[u], s->count[u], 0);  // rank 0's weights, as DDP starts
        units[u] = calloc_check(shard_padded(s, u), sizeof(float));  // the padding stays zero
        memcpy(units[u], model.params[u], s->count[u] * sizeof(float));
    }
    gpt_destroy(&model);
    mem_destroy(&host);
    return units;
}

void sharded_free_weights(const ShardLayout *s, float **units) {
    for (int u = 0; u < s->units; u++) free(units[u]);
    free(units);
}

void sharded_load(Mem *mem, Precision p, void *dst, const float *host, size_t n) {
    float *in32 = mem_alloc_floats(mem, MEM_COMM, n, "starting weights");
    device_from_host(mem->dev, in32, host, n * sizeof(float));
    precision_from_fp32(mem->dev->ops, p, dst, in32, n);
    mem_free(mem, in32);
}

// ---------------------------------------------------------------------------------------
// AdamW on this rank's slices
// ---------------------------------------------------------------------------------------

size_t sharded_slice_len(const ShardedAdamW *o, int u) {
    return o->sharded ? o->lay->shard[u] : shard_padded(o->lay, u);
}

static size_t slice_offset(const ShardedAdamW *o, int u) {
    return o->sharded ? (size_t)o->lay->rank * o->lay->shard[u] : 0;
}

void sharded_adamw_create(ShardedAdamW *o, const ShardLayout *lay, Precision prec, int sharded, int offload,
                          const TrainArgs *a, Mem *mem, Mem *host, float *const *init) {
    memset(o, 0, sizeof *o);
    o->hyper = (AdamW){.lr = (float)a->lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
                       .weight_decay = (float)a->weight_decay};
    o->lay = lay;
    o->prec = prec;
    o->sharded = sharded;
    o->offload = offload;
    o->mem = mem;
    o->host = offload ? host : NULL;
    Mem *where = offload ? host : mem;
    o->m = calloc_check((size_t)lay->units, sizeof *o->m);
    o->v = calloc_check((size_t)lay->units, sizeof *o->v);
    // Master weights: needed when the parameters are bf16 (updates smaller than bf16's step
    // would be lost), and when the update runs on the host, away from the parameters.
    if (prec == PREC_BF16 || offload) o->master = calloc_check((size_t)lay->units, sizeof *o->master);
    for (int u = 0; u < lay->units; u++) {
        size_t n = sharded_slice_len(o, u);
        o->m[u] = mem_alloc_floats(where, MEM_OPTIM, n, "AdamW first moment");
        o->v[u] = mem_alloc_floats(where, MEM_OPTIM, n, "AdamW second moment");
        if (!o->master) continue;
        o->master[u] = mem_alloc_floats(where, MEM_OPTIM, n, "fp32 master weights");
        device_from_host(where->dev, o->master[u], init[u] + slice_offset(o, u), n * sizeof(float));
    }
}

void sharded_adamw_destroy(ShardedAdamW *o) {
    Mem *where = o->offload ? o->host : o->mem;
    for (int u = 0; u < o->lay->units; u++) {
        mem_free(where, o->m[u]);
        mem_free(where, o->v[u]);
        if (o->master) mem_free(where, o->master[u]);
    }
    free(o->m);
    free(o->v);
    free(o->master);
    memset(o, 0, sizeof *o);
}

// The fp32 gradient of slice u where the update runs: the stored gradient itself (fp32 on the
// device), else widened into tmp (from the device's bf16, or from the host's staged copy).
static float *grad_fp32(ShardedAdamW *o, void *const *grads, char *staged, size_t staged_off, int u, float *tmp) {
    size_t n = sharded_slice_len(o, u);
    if (o->offload) {
        precision_to_fp32(&ops_cpu, o->prec, tmp, staged + staged_off, n);
        return tmp;
    }
    if (o->prec == PREC_FP32) return grads[u];
    precision_to_fp32(o->mem->dev->ops, o->prec, tmp, grads[u], n);
    return tmp;
}

double sharded_adamw_step(ShardedAdamW *o, DistGroup *g, void *const *params, void *const *grads, double clip, double lr,
                          int64_t step) {
    o->hyper.lr = (float)lr;
    const ShardLayout *lay = o->lay;
    const Ops *dops = o->mem->dev->ops;
    const Ops *ops = o->offload ? &ops_cpu : dops;  // where the update runs
    size_t e = precision_bytes(o->prec), max_slice = 0, total = 0;
    for (int u = 0; u < lay->units; u++) {
        size_t n = sharded_slice_len(o, u);
        max_slice = n > max_slice ? n : max_slice;
        total += n;
    }
    o->bytes_d2h = o->bytes_h2d = 0;

    // Offload: the gradient slices travel to the host once, in storage precision.
    char *staged = NULL;
    if (o->offload) {
        staged = mem_alloc(o->host, MEM_GRADS, total * e, "offloaded gradients");
        size_t off = 0;
        for (int u = 0; u < lay->units; off += sharded_slice_len(o, u) * e, u++)
            device_to_host(o->mem->dev, staged + off, grads[u], sharded_slice_len(o, u) * e);
        o->bytes_d2h = total * e;
    }
    float *tmp = NULL;
    if (o->offload) tmp = mem_alloc_floats(o->host, MEM_GRADS, max_slice, "fp32 gradient for the update");
    else if (o->prec == PREC_BF16) tmp = mem_alloc_floats(o->mem, MEM_GRADS, max_slice, "fp32 gradient for the update");

    // 1. The global gradient norm: the sum of squares of every rank's shard of every unit,
    //    then over ranks in rank order. A rank holding whole units (stage 0) computes the
    //    very same sums shard by shard, so that clipping is bitwise the same in every stage.
    //    Every shard's sum in one read of where the gradients lie (the device, or the host's
    //    staged copy under offload), in their storage precision (bf16s widened as they are read).
    double part[DIST_MAX_RANKS] = {0};
    int per = o->sharded ? 1 : lay->world, nbuf = lay->units * per;
    const void **bufs = malloc_check((size_t)nbuf * sizeof *bufs);
    size_t *len = malloc_check((size_t)nbuf * sizeof *len), off = 0;
    double *each = malloc_check((size_t)nbuf * sizeof *each);
    for (int u = 0; u < lay->units; off += sharded_slice_len(o, u) * e, u++) {
        const char *slice = o->offload ? staged + off : (const char *)grads[u];
        for (int r = 0; r < per; r++)
            bufs[u * per + r] = slice + (size_t)r * lay->shard[u] * e, len[u * per + r] = lay->shard[u];
    }
    precision_sum_of_squares(ops, o->prec, nbuf, bufs, len, each);
    for (int u = 0; u < lay->units; u++)
        for (int r = 0; r < per; r++) part[r] += each[u * per + r];
    free(bufs), free(len), free(each);
    double norm_sq = o->sharded ? dist_sum_over_ranks(g, part[0]) : dist_sum_over_ranks_local(part, lay->world);
    double norm = sqrt(norm_sq);

    // 2. Clip and update each slice: the parameters themselves (fp32 on the device), else the
    //    fp32 master weights, rounded back into the parameters' precision.
    off = 0;
    for (int u = 0; u < lay->units; off += sharded_slice_len(o, u) * e, u++) {
        size_t n = sharded_slice_len(o, u);
        float *g32 = grad_fp32(o, grads, staged, off, u, tmp);
        if (clip > 0 && norm > clip) ops->scale_floats(g32, n, (float)(clip / norm));
        float *target = o->master ? o->master[u] : params[u];
        ops->adamw_update(&o->hyper, step, target, g32, o->m[u], o->v[u], n);
        if (!o->master) continue;
        if (o->offload) {
            precision_from_fp32(&ops_cpu, o->prec, staged + off, o->master[u], n);
            device_from_host(o->mem->dev, params[u], staged + off, n * e);
            o->bytes_h2d += n * e;
        } else {
            precision_from_fp32(dops, o->prec, params[u], o->master[u], n);
        }
    }
    device_sync(o->mem->dev);
    if (o->offload) {
        mem_free(o->host, tmp);
        mem_free(o->host, staged);
    } else {
        mem_free(o->mem, tmp);
    }
    return norm;
}

uint64_t sharded_hash(const ShardLayout *s, Precision p, const Device *dev, void *const *bufs, int whole) {
    size_t *bytes = calloc_check((size_t)s->units, sizeof *bytes);
    for (int u = 0; u < s->units; u++) bytes[u] = (whole ? s->count[u] : s->shard[u]) * precision_bytes(p);
    uint64_t h = device_param_hash(dev, s->units, (const void *const *)bufs, bytes, PARAM_HASH_INIT);
    free(bytes);
    return h;
}

uint64_t sharded_model_hash(const ShardLayout *s, Precision p, Mem *mem, DistGroup *g, void *const *bufs, int whole) {
    if (whole) return sharded_hash(s, p, mem->dev, bufs, 1);
    uint64_t h = PARAM_HASH_INIT;
    size_t e = precision_bytes(p);
    for (int u = 0; u < s->units; u++) {
        void *full = mem_alloc(mem, MEM_PARAMS, shard_padded(s, u) * e, "gathered unit");
        sharded_all_gather(g, p, bufs[u], full, shard_padded(s, u), u, NULL);
        size_t bytes = s->count[u] * e;
        const void *whole_unit = full;
        h = device_param_hash(mem->dev, 1, &whole_unit, &bytes, h);
        mem_free(mem, full);
    }
    return h;
}

void sharded_save_weights(const char *path, const GptConfig *c, ShardedAdamW *o, DistGroup *g,
                          void *const *params) {
    const ShardLayout *lay = o->lay;
    Mem host;
    mem_init(&host, NULL);
    Gpt model;  // rank 0 assembles the whole model on the host, then writes it
    if (g->rank == 0) gpt_create(&model, c, &host, 0);
    for (int u = 0; u < lay->units; u++) {
        // The fp32 weights of our slice: the master (on the host with offload), else the parameters.
        size_t n = sharded_slice_len(o, u), full_n = shard_padded(lay, u);
        const Device *src_dev = o->master && o->offload ? &device_cpu : o->mem->dev;
        const float *src = o->master ? o->master[u] : params[u];
        float *slice = malloc_check(n * sizeof(float)), *full = malloc_check(full_n * sizeof(float));
        device_to_host(src_dev, slice, src, n * sizeof(float));
        if (o->sharded) dist_all_gather(g, slice, full, full_n);
        else memcpy(full, slice, full_n * sizeof(float));
        if (g->rank == 0) memcpy(model.params[u], full, lay->count[u] * sizeof(float));
        free(slice);
        free(full);
    }
    if (g->rank == 0) {
        train_save_weights(&model, path);
        gpt_destroy(&model);
    }
    mem_destroy(&host);
}

void sharded_save_optim(const char *path, const ShardedAdamW *o) {
    const ShardLayout *lay = o->lay;
    int per_unit = o->master ? 3 : 2, n = 0;
    StTensor *t = calloc_check((size_t)(lay->units * per_unit), sizeof *t);
    char (*names)[32] = calloc_check((size_t)(lay->units * per_unit), 32);
    const Device *where = o->offload ? &device_cpu : o->mem->dev;
    for (int u = 0; u < lay->units; u++) {
        size_t len = sharded_slice_len(o, u);
        float *const src[3] = {o->m[u], o->v[u], o->master ? o->master[u] : NULL};
        static const char *const what[3] = {"m", "v", "master"};
        for (int k = 0; k < per_unit; k++, n++) {
            snprintf(names[n], 32, "%s.%d", what[k], u);
            t[n] = (StTensor){.name = names[n], .ndim = 1, .shape = {(int64_t)len},
                              .data = malloc_check((len ? len : 1) * sizeof(float))};
            device_to_host(where, t[n].data, src[k], len * sizeof(float));
        }
    }
    char meta[256], err[1024];
    snprintf(meta, sizeof meta,
             "{\"format\":\"shardlab-adamw-slices\",\"world\":\"%d\",\"rank\":\"%d\",\"sharded\":\"%d\","
             "\"precision\":\"%s\"}",
             lay->world, lay->rank, o->sharded, precision_name(o->prec));
    if (safetensors_save(path, t, n, meta, err, sizeof err) != 0) die("check that the run directory is writable", "%s", err);
    for (int i = 0; i < n; i++) free(t[i].data);
    free(t);
    free(names);
}

// ---------------------------------------------------------------------------------------
// Distributed checkpoints

void sharded_dcp_state(DcpState *s, const ShardedAdamW *o, void *const *params, int part, int parts) {
    const ShardLayout *lay = o->lay;
    for (int u = 0; u < lay->units; u++) {
        size_t first = slice_offset(o, u), n = sharded_slice_len(o, u), count = lay->count[u];
        if (first >= count) continue;  // all padding
        size_t real = first + n > count ? count - first : n;  // the slice's elements before the padding
        size_t from, len;  // within the slice
        dist_chunk(real, parts, part, &from, &len);
        if (!len) continue;
        float *weights = o->master ? o->master[u] : params[u];
        int host = o->offload;  // m, v and master live on the host with offload
        dcp_state_add(s, DCP_PARAMS, u, first + from, len, weights + from, o->master ? host : 0);
        dcp_state_add(s, DCP_M, u, first + from, len, o->m[u] + from, host);
        dcp_state_add(s, DCP_V, u, first + from, len, o->v[u] + from, host);
    }
}

void sharded_dcp_loaded(ShardedAdamW *o, void *const *params) {
    if (!o->master) return;  // fp32 on the device: the parameters were loaded themselves
    size_t e = precision_bytes(o->prec);
    for (int u = 0; u < o->lay->units; u++) {
        size_t n = sharded_slice_len(o, u);
        if (o->offload) {
            char *tmp = malloc_check(n * e + 1);
            precision_from_fp32(&ops_cpu, o->prec, tmp, o->master[u], n);
            device_from_host(o->mem->dev, params[u], tmp, n * e);
            free(tmp);
        } else {
            precision_from_fp32(o->mem->dev->ops, o->prec, params[u], o->master[u], n);
        }
    }
    device_sync(o->mem->dev);
}
