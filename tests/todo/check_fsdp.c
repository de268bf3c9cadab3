// check_fsdp.c — the checks of FSDP's three regions in labs/09-fsdp/fsdp.c: `make check TODO=fsdp-gather`,
// `make check TODO=fsdp-backward` and `make check TODO=fsdp-replicas`. The file is included (main renamed) to reach its static
// functions; the layout of shards is written here (shard_layout_init is another region).
//
// fsdp-gather: unit_start_gather() on 1 to 4 ranks (2 first), fp32 and bf16, on three units
//   whose lengths do not divide by N (one of a single element). Element k of rank q's shard is
//   1000 q + k (bf16: 64 q + k), so a wrong element of the gathered unit names the rank and the
//   element it came from. Checked: the buffer (x->full, n e bytes of "params" memory, nothing
//   else), that the gather is started and left in flight (x->in_flight, x->gather) rather than
//   run to the end, the one all-gather it ran (unit, length), the gathered values, and that a
//   second call, while the gather is on its way and once the weights are here, does nothing.
//   Two units are then started before either is waited for, as --prefetch does.
// fsdp-backward: forward_backward() of a tiny GPT (2 blocks, dim 8: units of 2112, 872, 872
//   and 2064 parameters) on 1 to 3 ranks, with and without --prefetch, two micro-batches per
//   rank. Every rank's gradient shards are compared with the gradient of the same global batch
//   computed here on one process by the core model (gpt_create, train_accumulate: no lab code);
//   a wrong shard is also compared with the rank's own unsummed gradient and with multiples of
//   the right one. While each unit computes its backward (the "bwd" span the lab writes to its
//   run log, watched here), the check looks at which units' gathered weights are held: a unit
//   above still held was resharded late; with --prefetch the unit below must already be on its
//   way. Afterwards: nothing gathered left, no gradient buffer left, the peak of "params"
//   memory, and the collectives in order (an all-gather of a unit's summed gradient is extra).
//   If fsdp-gather is not written yet, the check gathers for it (todo_stand_in below), so
//   that the backward can be checked alone.
// fsdp-replicas: sum_over_replicas() on meshes of R replicas x S shards (2 x 1, 2 x 2, 3 x 2,
//   2 x 3), fp32 and bf16, three units. Element k of the gradient shard of replica d, shard
//   r is 8 (d + 1) + r + k mod 16 (whole numbers, exact in bf16), so every rank of a column
//   must end with the column's sum. A wrong element is compared with the rank's own value
//   (not summed), the mean (averaged), and the sum over the row (the wrong group). Then the
//   calls: on the replica group only, tagged SHARDED_REPLICA_TAG + the unit, 2 s/R
//   elements sent per unit, and no "comm" memory left.
// The collectives run DIST_ALGO_DIRECT: these regions call them, they do not depend on the ring.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/harness/check.h"
#include "todo.h"

// A region's stub in the copy (todo(), check.h) dies "not written yet". In unit_start_gather
// (fsdp-gather), while the backward is checked, the check stands in for it instead; the
// stubs of every other place, and this one in its own check, die as they do in the labs.
static int todo_stand_in(const char *what, void *f, int u) __attribute__((unused));
#undef todo
#define todo(what)                                                                                             \
    do {                                                                                                       \
        if (!todo_stand_in((what), f, u))                                                                      \
            die("write it where the TODO is (the file and line above), then check it alone: make check",       \
                "not written yet: %s", (what));                                                                \
    } while (0)

#define main fsdp_lab_main
#include "09-fsdp/fsdp.c"
#undef main

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

static int stand_in_gather;  // set while fsdp-backward runs

static int todo_stand_in(const char *what, void *fp, int u) {
    if (!stand_in_gather || strncmp(what, "start the all-gather", 20) != 0) return 0;
    Fsdp *f = fp;
    FsdpUnit *x = &f->unit[u];
    if (x->full) return 1;
    size_t n = shard_padded(&f->lay, u);
    x->full = mem_alloc(f->mem, MEM_PARAMS, n * f->e, "gathered flat parameter");
    sharded_all_gather(f->group, f->prec, x->shard, x->full, n, u, &x->gather);
    x->in_flight = 1;
    return 1;
}

#define MAX_RECORDS 256

static void drain(Dist *d) {
    DistRecord rec[16];
    while (dist_drain_records(d, rec, 16) > 0) {}
}

// ---- fsdp-gather ----------------------------------------------------------------------------

#define UNITS 3

static void make_layout(ShardLayout *s, int units, const size_t *counts, int world, int rank, int align) {
    memset(s, 0, sizeof *s);
    s->units = units, s->world = world, s->rank = rank, s->align = align;
    s->count = calloc_check((size_t)units, sizeof *s->count);
    s->shard = calloc_check((size_t)units, sizeof *s->shard);
    for (int u = 0; u < units; u++) {
        s->count[u] = counts[u];
        s->shard[u] = ceil_div(ceil_div(counts[u], (size_t)world), (size_t)align) * (size_t)align;
        s->psi += s->count[u];
        s->shard_total += s->shard[u];
    }
    s->psi_padded = (size_t)world * s->shard_total;
}

static float code(Precision p, int q, size_t k) {
    return p == PREC_BF16 ? (float)(64 * q) + (float)(k % 64) : (float)(1000 * q) + (float)(k % 1000);
}

static float get(Precision p, const void *buf, size_t i) {
    return p == PREC_BF16 ? bf16_to_float(((const bf16 *)buf)[i]) : ((const float *)buf)[i];
}

static void check_gathered(Fsdp *f, int u, const char *where) {
    size_t s = f->lay.shard[u], n = shard_padded(&f->lay, u);
    for (size_t e = 0; e < n; e++) {
        int q = (int)(e / s);
        float want = code(f->prec, q, e % s), got = get(f->prec, f->unit[u].full, e);
        if (got == want) continue;
        char head[400];
        snprintf(head, sizeof head,
                 "%s: rank %d, unit %d (%zu elements in shards of %zu): element %zu of the gathered unit is element "
                 "%zu of rank %d's shard, expected %.0f, got %.0f",
                 where, f->group->rank, u, n, s, e, e % s, q, want, got);
        if (got == 0)
            todo_fail("%s\nnothing arrived there: all-gather every rank's shard (x->shard) into x->full, the whole "
                      "padded unit (shard_padded() elements)",
                      head);
        int scale = f->prec == PREC_BF16 ? 64 : 1000;
        todo_fail("%s\nthat is element %d of rank %d's shard: rank q's shard goes at q x shard[u] in the gathered unit",
                  head, (int)got % scale, (int)got / scale);
    }
}

static void gather_rank(Dist *d, void *arg) {
    Precision prec = *(const Precision *)arg;
    int p = d->world, r = d->rank;
    size_t counts[UNITS] = {1, 3 * (size_t)p + 1, 10};
    ShardLayout lay;
    make_layout(&lay, UNITS, counts, p, r, prec == PREC_BF16 ? 2 : 1);
    float *init[UNITS];
    for (int u = 0; u < UNITS; u++) {
        size_t s = lay.shard[u], n = shard_padded(&lay, u);
        init[u] = calloc_check(n, sizeof(float));
        for (size_t e = 0; e < n; e++) init[u][e] = code(prec, (int)(e / s), e % s);
    }
    Mem mem;
    mem_init(&mem, NULL);
    Fsdp f;
    DistGroup alone;  // no replicas
    dist_group(d, &alone, &r, 1);
    fsdp_create(&f, &lay, prec, 0, 1, &d->world_group, &alone, &mem, init);
    for (int u = 0; u < UNITS; u++) free(init[u]);
    drain(d);
    char where[120];
    snprintf(where, sizeof where, "unit_start_gather() on %d ranks (%s)", p, precision_name(prec));
    todo_context("%s", where);
    DistRecord rec[MAX_RECORDS];
    for (int u = 0; u < UNITS; u++) {
        FsdpUnit *x = &f.unit[u];
        size_t n = shard_padded(&f.lay, u), bytes = n * f.e, before[MEM_CATEGORIES];
        for (int c = 0; c < MEM_CATEGORIES; c++) before[c] = mem_in_use(&mem, (MemCategory)c);
        unit_start_gather(&f, u);
        if (!x->full)
            todo_fail("%s: rank %d, unit %d: x->full is still NULL: allocate the gathered unit (%zu elements of %zu "
                      "bytes, mem_alloc(f->mem, MEM_PARAMS, ...)) and point x->full at it",
                      where, r, u, n, f.e);
        for (int c = 0; c < MEM_CATEGORIES; c++) {
            size_t now = mem_in_use(&mem, (MemCategory)c), want = before[c] + (c == MEM_PARAMS ? bytes : 0);
            if (now != want)
                todo_fail("%s: rank %d, unit %d: \"%s\" memory went from %zu to %zu bytes, expected %zu: the gathered "
                          "unit is %zu elements x %zu bytes = %zu bytes of \"params\" memory (mem_alloc(f->mem, "
                          "MEM_PARAMS, n * f->e, ...)), and nothing else",
                          where, r, u, mem_category_name((MemCategory)c), before[c], now, want, n, f.e, bytes);
        }
        if (x->gather.group == NULL)
            todo_fail("%s: rank %d, unit %d: the all-gather was not started on x->gather: start it with &x->gather as "
                      "its DistWork (sharded_all_gather(..., u, &x->gather)), so that unit_materialize() waits for it "
                      "and --prefetch overlaps it with compute",
                      where, r, u);
        if (x->in_flight != 1)
            todo_fail("%s: rank %d, unit %d: x->in_flight is %d after the gather was started, expected 1: "
                      "unit_materialize() waits only for a gather in flight, and would compute with weights that "
                      "have not arrived",
                      where, r, u, x->in_flight);
        void *full = x->full;
        unit_start_gather(&f, u);  // on its way: nothing to do
        if (x->full != full || mem_in_use(&mem, MEM_PARAMS) != before[MEM_PARAMS] + bytes)
            todo_fail("%s: rank %d, unit %d: a second call while the gather is on its way allocated again (\"params\" "
                      "memory %zu bytes, expected %zu): with x->full set, unit_start_gather() must do nothing",
                      where, r, u, mem_in_use(&mem, MEM_PARAMS), before[MEM_PARAMS] + bytes);
        unit_materialize(&f, u);
        unit_start_gather(&f, u);  // here: nothing to do
        size_t k = dist_drain_records(d, rec, MAX_RECORDS);
        uint64_t sent = 0;
        for (size_t i = 0; i < k; i++) sent += rec[i].bytes_sent;
        if (k > 1)
            todo_fail("%s: rank %d, unit %d was all-gathered %zu times (%llu bytes sent where %llu suffice): once its "
                      "weights are here or on their way (x->full set), unit_start_gather() must do nothing",
                      where, r, u, k, (unsigned long long)sent, (unsigned long long)rec[0].bytes_sent);
        if (k == 0 || rec[0].coll != DIST_ALL_GATHER)
            todo_fail("%s: rank %d, unit %d: expected one all-gather, got %s", where, r, u,
                      k ? dist_coll_name(rec[0].coll) : "no collective");
        if (rec[0].count != n)
            todo_fail("%s: rank %d, unit %d: the all-gather ran on %zu elements; the whole padded unit is %zu "
                      "(shard_padded())",
                      where, r, u, rec[0].count, n);
        if (rec[0].tag != u)
            todo_fail("%s: rank %d: the all-gather of unit %d is tagged %d: tag it with its unit (the run log's spans "
                      "name the unit from it)",
                      where, r, u, rec[0].tag);
        if (x->full != full || mem_in_use(&mem, MEM_PARAMS) != before[MEM_PARAMS] + bytes)
            todo_fail("%s: rank %d, unit %d: a call once the weights are here allocated again: with x->full set, "
                      "unit_start_gather() must do nothing",
                      where, r, u);
        check_gathered(&f, u, where);
        unit_reshard(&f, u);
    }
    // As --prefetch does: two units on their way at once, waited for in turn.
    snprintf(where, sizeof where, "unit_start_gather() of units 2 and 1, both in flight, on %d ranks (%s)", p,
             precision_name(prec));
    todo_context("%s", where);
    unit_start_gather(&f, 2);
    unit_start_gather(&f, 1);
    unit_materialize(&f, 2);
    unit_materialize(&f, 1);
    check_gathered(&f, 2, where);
    check_gathered(&f, 1, where);
    fsdp_destroy(&f);
    mem_destroy(&mem);
}

static void check_gather(void) {
    static const int worlds[] = {2, 3, 4, 1};
    for (int prec = 0; prec < 2; prec++)
        for (int i = 0; i < 4; i++) {
            Precision pr = prec ? PREC_BF16 : PREC_FP32;
            todo_context("unit_start_gather() on %d ranks (%s)", worlds[i], precision_name(pr));
            todo_ranks(worlds[i], DIST_ALGO_DIRECT, 5, gather_rank, &pr);
        }
}

// ---- fsdp-backward --------------------------------------------------------------------------

#define PER_RANK 2  // sequences per rank, one per micro-batch
#define SEED 7

static TrainArgs args;      // the tiny model and its batch
static GptConfig cfg;
static Corpus corpus;
static float **ref_grad;    // [unit] the gradient of the global batch, computed on one process
static float **own_grad[4]; // [rank][unit] each rank's sequences alone
static int world, prefetch;

static float **reference(int first, int count, float loss_scale) {
    Mem mem;
    mem_init(&mem, NULL);
    Gpt g;
    gpt_create(&g, &cfg, &mem, SEED);
    GptActs acts;
    gpt_acts_alloc(&acts, &cfg, 1, &mem);
    gpt_zero_grads(&g);
    train_accumulate(&g, &acts, &corpus, &args, 1, first, count, loss_scale, NULL, NULL);
    float **out = calloc_check((size_t)g.nlayers, sizeof *out);
    for (int u = 0; u < g.nlayers; u++) {
        size_t n = gpt_layer_size(&cfg, u);
        out[u] = malloc_check(n * sizeof(float));
        memcpy(out[u], g.grads[u], n * sizeof(float));
    }
    gpt_acts_free(&acts, &mem);
    gpt_destroy(&g);
    mem_destroy(&mem);
    return out;
}

// The run log's events, watched: each "bwd" span (written right after a unit's backward
// computed, before it is resharded) is the moment to look at what the rank holds.
static Fsdp *watched;

static void held_check(int layer, int mb) {
    Fsdp *f = watched;
    int U = f->lay.units, r = f->group->rank;
    char where[160];
    snprintf(where, sizeof where, "FSDP backward on %d ranks%s, rank %d, micro-batch %d", world,
             prefetch ? " with --prefetch" : "", r, mb);
    for (int v = U - 1; v >= 0; v--) {
        size_t bytes = shard_padded(&f->lay, v) * f->e;
        int held = f->unit[v].full != NULL;
        if (v > layer && held)
            todo_fail("%s: after unit %d's backward, its gathered weights (%zu bytes) were still held while unit %d "
                      "computed its backward: reshard each unit (unit_reshard(f, u)) right after its own backward, "
                      "so that a rank holds one gathered unit at a time%s",
                      where, v, bytes, layer, prefetch ? " (two with --prefetch: it and the one below)" : "");
        if (v == layer - 1 && prefetch && !held)
            todo_fail("%s: --prefetch: unit %d's all-gather should have been started during unit %d's backward, "
                      "before it computed; it was not: the prefetch of the unit below (unit_start_gather(f, u - 1) "
                      "when f->prefetch) is forgotten in the backward pass",
                      where, v, layer);
        if (v == layer - 1 && !prefetch && held)
            todo_fail("%s: without --prefetch, unit %d was gathered already while unit %d computed its backward: "
                      "that prefetch is only for f->prefetch (it costs a second gathered unit of memory)",
                      where, v, layer);
        if (v < layer - 1 && held)
            todo_fail("%s: unit %d's weights were gathered while unit %d computed its backward: a unit is gathered "
                      "right before its own backward (with --prefetch, during the backward of the unit above)",
                      where, v, layer);
    }
    size_t want = f->lay.shard_total * f->e + shard_padded(&f->lay, layer) * f->e;
    if (prefetch && layer > 0) want += shard_padded(&f->lay, layer - 1) * f->e;
    size_t got = mem_in_use(f->mem, MEM_PARAMS);
    if (got != want)
        todo_fail("%s: while unit %d computed its backward, %zu bytes of \"params\" memory were held, expected %zu "
                  "(the shards, %zu bytes, and unit %d's gathered weights%s)",
                  where, layer, got, want, f->lay.shard_total * f->e, layer,
                  prefetch && layer > 0 ? ", and the unit below's, prefetched" : "");
}

static ssize_t watch_write(void *cookie, const char *buf, size_t size) {
    (void)cookie;
    char line[512];
    size_t n = size < sizeof line - 1 ? size : sizeof line - 1;
    memcpy(line, buf, n);
    line[n] = 0;
    const char *name = strstr(line, "\"name\":\""), *mb = strstr(line, "\"mb\":"), *layer = strstr(line, "\"layer\":");
    if (name && mb && layer) {
        int is_bwd = !strncmp(name + 8, "bwd\"", 4), u = atoi(layer + 8), m = atoi(mb + 5);
        if (is_bwd) held_check(u, m);
        todo_context("FSDP %s on %d ranks%s, micro-batch %d, after unit %d's %s", is_bwd ? "backward" : "forward",
                     world, prefetch ? " with --prefetch" : "", m, u, is_bwd ? "backward" : "forward");
    }
    return (ssize_t)size;
}

static const char *coll_words(const DistRecord *r) {
    return r->coll == DIST_ALL_GATHER ? "all-gather" : r->coll == DIST_REDUCE_SCATTER ? "reduce-scatter"
                                                                                       : dist_coll_name(r->coll);
}

// The collectives of one micro-batch, in order: forward, all-gather of units 0..U-1; backward,
// all-gather U-1, reduce-scatter U-1, all-gather U-2, ... (--prefetch: all-gather u-1 comes
// before the reduce-scatter of u).
static void check_collectives(Dist *d, Fsdp *f, int micro_batches) {
    int U = f->lay.units, r = d->rank, nwant = 0;
    DistColl want[64];
    int tag[64];
    for (int mb = 0; mb < micro_batches; mb++) {
        for (int u = 0; u < U; u++) want[nwant] = DIST_ALL_GATHER, tag[nwant++] = u;
        for (int u = U - 1; u >= 0; u--) {
            if (u == U - 1) want[nwant] = DIST_ALL_GATHER, tag[nwant++] = u;
            if (prefetch && u > 0) want[nwant] = DIST_ALL_GATHER, tag[nwant++] = u - 1;
            want[nwant] = DIST_REDUCE_SCATTER, tag[nwant++] = u;
            if (!prefetch && u > 0) want[nwant] = DIST_ALL_GATHER, tag[nwant++] = u - 1;
        }
    }
    DistRecord rec[MAX_RECORDS];
    size_t n = dist_drain_records(d, rec, MAX_RECORDS);
    uint64_t sent = 0, needed = 0;
    for (size_t i = 0; i < n; i++) {
        sent += rec[i].bytes_sent;
        int gathered_back = i > 0 && rec[i].coll == DIST_ALL_GATHER && rec[i - 1].coll == DIST_REDUCE_SCATTER &&
                            rec[i].tag == rec[i - 1].tag;
        if (!gathered_back) needed += rec[i].bytes_sent;
    }
    char where[120];
    snprintf(where, sizeof where, "FSDP forward and backward on %d ranks%s, rank %d", world,
             prefetch ? " with --prefetch" : "", r);
    int j = 0;
    for (size_t i = 0; i < n; i++) {
        const DistRecord *x = &rec[i];
        if (j < nwant && x->coll == want[j] && x->tag == tag[j] && x->count == shard_padded(&f->lay, tag[j])) {
            j++;
            continue;
        }
        int mb = j / (3 * U);  // (forward U, backward 2U per micro-batch)
        if (i > 0 && x->coll == DIST_ALL_GATHER && rec[i - 1].coll == DIST_REDUCE_SCATTER && x->tag == rec[i - 1].tag) {
            todo_fail("%s, micro-batch %d: after unit %d's gradient was reduce-scattered, it was all-gathered as well "
                      "(%llu bytes sent in all where %llu suffice): each rank keeps only its shard of the summed "
                      "gradient (its optimizer updates that shard alone); FSDP never gathers gradients back",
                      where, mb, x->tag, (unsigned long long)sent, (unsigned long long)needed);
        }
        if (j < nwant)
            todo_fail("%s, micro-batch %d: collective %d of the micro-batch should be the %s of unit %d, got a%s %s of "
                      "unit %d (%zu elements)\nthe backward of unit u: its all-gather (with --prefetch, then unit "
                      "u-1's), its gradient, its reshard, then the reduce-scatter of its gradient",
                      where, mb, j % (3 * U) + 1, want[j] == DIST_ALL_GATHER ? "all-gather" : "reduce-scatter", tag[j],
                      x->coll == DIST_ALL_GATHER ? "n" : "", coll_words(x), x->tag, x->count);
        todo_fail("%s: an extra %s of unit %d (%llu bytes sent in all where %llu suffice)", where, coll_words(x),
                  x->tag, (unsigned long long)sent, (unsigned long long)needed);
    }
    if (j < nwant)
        todo_fail("%s, micro-batch %d: the %s of unit %d never ran", where, j / (3 * U),
                  want[j] == DIST_ALL_GATHER ? "all-gather" : "reduce-scatter", tag[j]);
}

static void check_gradients(Fsdp *f) {
    int r = f->group->rank;
    for (int u = f->lay.units - 1; u >= 0; u--) {
        size_t s = f->lay.shard[u], count = f->lay.count[u];
        double scale = 0;
        for (size_t e = 0; e < count; e++) scale = fmax(scale, fabs(ref_grad[u][e]));
        const float *got = f->unit[u].grad_shard;
        for (size_t k = 0; k < s; k++) {
            size_t e = (size_t)r * s + k;
            double want = e < count ? ref_grad[u][e] : 0, g = got[k];
            if (fabs(g - want) <= 1e-4 * scale + 1e-4 * fabs(want)) continue;
            char head[400];
            snprintf(head, sizeof head,
                     "FSDP backward on %d ranks%s: rank %d's gradient shard of unit %d (elements %zu..%zu) is wrong at "
                     "element %zu%s: expected %.6g (the gradient of the global batch, computed on one process), got %.6g",
                     world, prefetch ? " with --prefetch" : "", r, u, (size_t)r * s, (size_t)r * s + s - 1, e,
                     e < count ? "" : " (padding)", want, g);
            int zero = 1;
            for (size_t i = 0; i < s; i++) zero &= got[i] == 0;
            if (zero)
                todo_fail("%s\nthe whole shard is zero: unit %d's gradient never reached it (reduce-scatter g32 into "
                          "f->unit[u].grad_shard: sharded_reduce_gradient)",
                          head, u);
            if (e < count && fabs(g - own_grad[r][u][e]) <= 1e-4 * scale && world > 1)
                todo_fail("%s\nthat is rank %d's own gradient (its %d micro-batches alone), %.6g: the sum over the "
                          "ranks is missing",
                          head, r, PER_RANK, own_grad[r][u][e]);
            for (int m = 2; m <= 4; m++)
                if (fabs(g - m * want) <= 1e-4 * m * scale)
                    todo_fail("%s\n%d times the expected gradient: the unit's gradient was added %d times", head, m, m);
            todo_fail("%s", head);
        }
    }
}

static void backward_rank(Dist *d, void *arg) {
    (void)arg;
    int p = d->world, r = d->rank, U = gpt_layer_count(&cfg);
    size_t counts[8];
    for (int u = 0; u < U; u++) counts[u] = gpt_layer_size(&cfg, u);
    ShardLayout lay;
    make_layout(&lay, U, counts, p, r, 1);
    float *init[8] = {0};
    for (int u = 0; u < U; u++) {
        init[u] = calloc_check(shard_padded(&lay, u), sizeof(float));
        gpt_init_layer(&cfg, u, init[u], SEED);
    }
    Mem mem;
    mem_init(&mem, NULL);
    Fsdp f;
    DistGroup alone;  // no replicas
    dist_group(d, &alone, &r, 1);
    fsdp_create(&f, &lay, PREC_FP32, prefetch, 1, &d->world_group, &alone, &mem, init);
    for (int u = 0; u < U; u++) free(init[u]);
    GptActs acts;
    gpt_acts_alloc(&acts, &cfg, 1, &mem);
    RunLog log;
    memset(&log, 0, sizeof log);
    log.rank = r;
    log.events = fopencookie(NULL, "w", (cookie_io_functions_t){.write = watch_write});
    setvbuf(log.events, NULL, _IOLBF, 0);
    Batch b = {&corpus, &args, &acts, &log, r * PER_RANK, PER_RANK, 0};
    watched = &f;
    drain(d);
    mem_reset_peak(&mem);
    todo_context("FSDP forward and backward on %d ranks%s", p, prefetch ? " with --prefetch" : "");
    forward_backward(&f, &b, 1, (float)(1.0 / ((double)p * PER_RANK * args.seq)));
    char where[120];
    snprintf(where, sizeof where, "FSDP backward on %d ranks%s, rank %d", p, prefetch ? " with --prefetch" : "", r);
    todo_context("%s, after the backward pass", where);
    for (int u = 0; u < U; u++)
        if (f.unit[u].full)
            todo_fail("%s: after the backward pass, unit %d's gathered weights (%zu bytes) were still held: every "
                      "unit is resharded after its backward",
                      where, u, shard_padded(&f.lay, u) * f.e);
    check_gradients(&f);
    check_collectives(d, &f, PER_RANK);
    size_t grads = mem_in_use(&mem, MEM_GRADS), want_grads = f.lay.shard_total * f.e;
    if (grads != want_grads)
        todo_fail("%s: after the backward pass %zu bytes of \"grads\" memory were held, expected %zu (the gradient "
                  "shards): a unit's full gradient (g32) was not freed after its reduce-scatter",
                  where, grads, want_grads);
    size_t peak_want = 0;
    for (int u = 0; u < U; u++) {
        size_t held = shard_padded(&f.lay, u) + (prefetch && u + 1 < U ? shard_padded(&f.lay, u + 1) : 0);
        peak_want = held > peak_want ? held : peak_want;
    }
    peak_want = (peak_want + f.lay.shard_total) * f.e;
    if (mem_peak_in(&mem, MEM_PARAMS) != peak_want)
        todo_fail("%s: peak \"params\" memory %zu bytes, expected %zu (the shards and %s)", where,
                  mem_peak_in(&mem, MEM_PARAMS), peak_want,
                  prefetch ? "two neighbouring gathered units" : "one gathered unit at a time");
    fclose(log.events);
    gpt_acts_free(&acts, &mem);
    fsdp_destroy(&f);
    mem_destroy(&mem);
}

static void check_backward(void) {
    args = (TrainArgs){.seq = 8, .layers = 2, .dim = 8, .heads = 2, .attn = "naive", .accum = PER_RANK, .seed = SEED};
    cfg = train_model_config(&args);
    corpus_synthetic(&corpus, SEED, 4096, SYNTH_ORDER, SYNTH_ALPHABET, args.seq);
    stand_in_gather = 1;
    static const int worlds[] = {2, 3, 1};
    for (int i = 0; i < 3; i++) {
        world = worlds[i];
        args.batch = world * PER_RANK;
        float scale = (float)(1.0 / ((double)world * PER_RANK * args.seq));
        ref_grad = reference(0, world * PER_RANK, scale);
        for (int q = 0; q < world; q++) own_grad[q] = reference(q * PER_RANK, PER_RANK, scale);
        for (prefetch = 0; prefetch <= 1; prefetch++) {
            todo_context("FSDP forward and backward of a 4-unit GPT on %d ranks%s", world,
                         prefetch ? " with --prefetch" : "");
            todo_ranks(world, DIST_ALGO_DIRECT, 5, backward_rank, NULL);
        }
    }
}

// ---- fsdp-replicas --------------------------------------------------------------------------

static int mesh_R, mesh_S;  // the mesh of the case running

static float replica_grad(int d, int r, size_t k) { return (float)(8 * (d + 1) + r) + (float)(k % 16); }

static void replicas_rank(Dist *dist, void *arg) {
    Precision prec = *(const Precision *)arg;
    int R = mesh_R, S = mesh_S, q = dist->rank, d = q / S, r = q % S;
    DistGroup shard_group, replica_group;
    build_mesh(dist, R, S, q, &shard_group, &replica_group);
    size_t counts[UNITS] = {1, 3 * (size_t)S + 1, 10};
    ShardLayout lay;
    make_layout(&lay, UNITS, counts, S, r, (prec == PREC_BF16 ? 2 : 1) * R);
    float *init[UNITS];
    for (int u = 0; u < UNITS; u++) init[u] = calloc_check(shard_padded(&lay, u), sizeof(float));
    Mem mem;
    mem_init(&mem, NULL);
    Fsdp f;
    fsdp_create(&f, &lay, prec, 0, 1, &shard_group, &replica_group, &mem, init);
    for (int u = 0; u < UNITS; u++) {  // this rank's gradient shards, as a backward pass leaves them
        size_t n = f.lay.shard[u];
        for (size_t k = 0; k < n; k++) init[u][k] = replica_grad(d, r, k);
        sharded_load(&mem, prec, f.unit[u].grad_shard, init[u], n);
        free(init[u]);
    }
    drain(dist);
    char where[160];
    snprintf(where, sizeof where, "sum_over_replicas() on a %d x %d mesh (replicas x shards, %s), rank %d (replica %d, shard %d)", R,
             S, precision_name(prec), q, d, r);
    todo_context("%s", where);
    sum_over_replicas(&f);
    for (int u = 0; u < UNITS; u++) {
        size_t n = f.lay.shard[u];
        for (size_t k = 0; k < n; k++) {
            float want = 0, row = 0, got = get(prec, f.unit[u].grad_shard, k);
            for (int e = 0; e < R; e++) want += replica_grad(e, r, k);
            for (int e = 0; e < S; e++) row += replica_grad(d, e, k);
            if (got == want) continue;
            const char *why = got == replica_grad(d, r, k) ? "it is this rank's own value: the shard was not summed "
                                                            "across the replicas (f->replicas)"
                            : got == want / (float)R ? "it is the mean: sum, do not average (the loss scale already "
                                                      "divides by the global batch)"
                            : got == row && S > 1 ? "it is the sum over the shard group: sum down the column "
                                                   "(f->replicas), not along the row (f->group)"
                                                 : "sum unit u's gradient shard over f->replicas, every element once";
            todo_fail("%s: unit %d, element %zu of the gradient shard: expected %.0f (the sum over the %d replicas), got "
                      "%.0f: %s", where, u, k, want, R, got, why);
        }
    }
    DistRecord rec[MAX_RECORDS];
    size_t nrec = dist_drain_records(dist, rec, MAX_RECORDS);
    uint64_t sent[UNITS] = {0};
    for (size_t i = 0; i < nrec; i++) {
        int u = rec[i].tag - SHARDED_REPLICA_TAG;
        if (u < 0 || u >= UNITS)
            todo_fail("%s: a %s was tagged %d: tag each unit's sum SHARDED_REPLICA_TAG + u (%d + the unit), so that the "
                      "run log tells it from the shard group's calls", where, dist_coll_name(rec[i].coll), rec[i].tag,
                      SHARDED_REPLICA_TAG);
        sent[u] += rec[i].bytes_sent;
    }
    for (int u = 0; u < UNITS; u++) {
        uint64_t want = 2 * (uint64_t)(R - 1) * (f.lay.shard[u] / (size_t)R) * f.e;
        if (sent[u] != want)
            todo_fail("%s: unit %d's sum sent %llu bytes, expected %llu: one all-reduce of its shard of %zu elements over "
                      "the %d replicas, 2 (R-1) pieces of s/R, once", where, u, (unsigned long long)sent[u],
                      (unsigned long long)want, f.lay.shard[u], R);
    }
    if (mem_in_use(&mem, MEM_COMM))
        todo_fail("%s: %zu bytes of \"comm\" memory still held after the sums: free the piece each sum needs", where,
                  mem_in_use(&mem, MEM_COMM));
    fsdp_destroy(&f);
    mem_destroy(&mem);
}

static void check_replicas(void) {
    static const int meshes[][2] = {{2, 1}, {2, 2}, {3, 2}, {2, 3}};
    for (int prec = 0; prec < 2; prec++)
        for (int i = 0; i < 4; i++) {
            Precision pr = prec ? PREC_BF16 : PREC_FP32;
            mesh_R = meshes[i][0], mesh_S = meshes[i][1];
            todo_context("sum_over_replicas() on a %d x %d mesh (replicas x shards, %s)", mesh_R, mesh_S, precision_name(pr));
            todo_ranks(mesh_R * mesh_S, DIST_ALGO_DIRECT, 5, replicas_rank, &pr);
        }
}

int main(int argc, char **argv) {
    static const TodoCheck checks[] = {
        {"fsdp-gather", check_gather}, {"fsdp-backward", check_backward}, {"fsdp-replicas", check_replicas}};
    return todo_main(argc, argv, checks, 3);
}
