// check_zero.c — the checks of ZeRO's three regions: `make check TODO=zero-shard-length`
// (labs/08-zero/sharded.c), `make check TODO=zero-reduce-scatter` and `TODO=zero-all-gather`
// (labs/08-zero/zero.c, whose static functions are reached by including the file, main renamed).
//
// zero-shard-length: shard_layout_init() on models whose units have 2, 3, 7, 8, 16, 24, 25,
//   74 and a few thousand parameters, on 1 to 8 ranks, with align 1 (fp32), 2 (bf16) and 4:
//   units smaller than the world (a one-element shard, the rest padding), units that split
//   evenly (24 on 1, 2, 3, 4, 6 and 8 ranks: no padding at all) and ones that do not. Each
//   unit's shard is compared with ceil(ceil(count / N) / align) * align computed here.
// zero-reduce-scatter: reduce_gradients() at every stage, on 1 to 4 ranks (the world of 2
//   first, where every collective sends bytes), fp32 and bf16, three units whose lengths do
//   not divide by N (one of a single element). Rank q's gradient element e is 2^q + 16 (e mod
//   64) (bf16: e mod 4, so that sums stay exact), so a sum holds the bits of the ranks that
//   went into it (low 4 bits) and the element they were added at: a wrong value says which
//   ranks are missing or which element it came from. Stage 0 must leave the summed gradient
//   everywhere, stage 1 only in the rank's shard, and the collectives that ran (their record:
//   kind, unit, length, bytes) must be one reduce-scatter per unit, followed at stage 0 only
//   by an all-gather; stages 2 and 3 must do nothing here.
// zero-all-gather: gather_updated_weights() at every stage on 1 to 4 ranks, fp32 and bf16:
//   element k of rank q's updated shard is 1000 q + k (bf16: 64 q + k), the rest of the unit
//   is -1, so a wrong element names the rank and the element it came from, and -1 says
//   nothing arrived. Stages 1 and 2 must all-gather each unit once (tagged with the unit),
//   stages 0 and 3 must not communicate.
// The collectives run DIST_ALGO_DIRECT: these regions call them, they do not depend on the ring.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "todo.h"

#define main zero_lab_main
#include "08-zero/zero.c"
#undef main

// ---- zero-shard-length ----------------------------------------------------------------------

static size_t ceil_div(size_t a, size_t b) { return (a + b - 1) / b; }

static void check_shard_length(void) {
    // {vocab, seq, layers, dim}: units (vocab + seq) dim, 12 dim^2 + 13 dim per block, (vocab + 2) dim.
    static const int models[][4] = {{1, 1, 1, 1}, {5, 3, 1, 1}, {6, 6, 1, 2}, {256, 16, 2, 16}};
    static const int aligns[] = {2, 1, 4}, worlds[] = {3, 2, 4, 5, 6, 7, 8, 1};
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
        GptConfig c = {.vocab = models[mi][0], .seq = models[mi][1], .layers = models[mi][2], .dim = models[mi][3],
                       .heads = 1};
        for (int wi = 0; wi < 8; wi++)
            for (size_t ai = 0; ai < sizeof aligns / sizeof aligns[0]; ai++) {
                int align = aligns[ai], world = worlds[wi];
                for (int rank = 0; rank < world; rank += world > 1 ? world - 1 : 1) {
                    ShardLayout s;
                    todo_context("shard_layout_init on %d ranks, align %d", world, align);
                    shard_layout_init(&s, &c, world, rank, align);
                    for (int u = 0; u < s.units; u++) {
                        size_t count = gpt_layer_size(&c, u), per_rank = ceil_div(count, (size_t)world);
                        size_t want = ceil_div(per_rank, (size_t)align) * (size_t)align, got = s.shard[u];
                        if (got == want) continue;
                        char head[400];
                        snprintf(head, sizeof head,
                                 "unit %d (%zu parameters) on %d ranks, align %d: each rank's shard should be %zu "
                                 "elements (ceil(%zu / %d) = %zu, rounded up to a multiple of %d), got %zu",
                                 u, count, world, align, want, count, world, per_rank, align, got);
                        if (got * (size_t)world < count)
                            todo_fail("%s\n%d shards of %zu cover only %zu of the unit's %zu elements: round the "
                                      "division up, ceil(count / N) = (count + N - 1) / N",
                                      head, world, got, got * (size_t)world, count);
                        if (got == per_rank)
                            todo_fail("%s\nthat is ceil(count / N) not rounded up to a multiple of align", head);
                        if (got % (size_t)align)
                            todo_fail("%s\n%zu is not a multiple of %d: every shard's length must be a multiple of "
                                      "align (bf16: a whole number of 4-byte words)",
                                      head, got, align);
                        todo_fail("%s\nlonger than needed: %d shards of %zu pad the unit with %zu elements where "
                                  "%zu suffice (the smallest multiple of %d that is at least ceil(count / N))",
                                  head, world, got, got * (size_t)world - count, want * (size_t)world - count, align);
                    }
                    shard_layout_free(&s);
                }
            }
    }
}

// ---- a Zero built by hand ---------------------------------------------------------------------

#define UNITS 3

// Unit lengths that do not divide by the world (and one of a single element), the shard
// length written here (ceil, rounded up to align), not by shard_layout_init (another region).
static void make_layout(ShardLayout *s, int world, int rank, int align) {
    static const size_t counts[UNITS] = {1, 0, 10};
    memset(s, 0, sizeof *s);
    s->units = UNITS, s->world = world, s->rank = rank, s->align = align;
    s->count = calloc_check(UNITS, sizeof *s->count);
    s->shard = calloc_check(UNITS, sizeof *s->shard);
    for (int u = 0; u < UNITS; u++) {
        s->count[u] = counts[u] ? counts[u] : 3 * (size_t)world + 1;
        s->shard[u] = ceil_div(ceil_div(s->count[u], (size_t)world), (size_t)align) * (size_t)align;
        s->psi += s->count[u];
        s->shard_total += s->shard[u];
    }
    s->psi_padded = (size_t)world * s->shard_total;
}

static void zero_make(Zero *z, Mem *mem, Dist *d, int stage, Precision prec) {
    ShardLayout lay;
    make_layout(&lay, d->world, d->rank, prec == PREC_BF16 ? 2 : 1);
    float *init[UNITS];
    for (int u = 0; u < UNITS; u++) init[u] = calloc_check(shard_padded(&lay, u), sizeof(float));
    memset(z, 0, sizeof *z);
    zero_create(z, stage, prec, &lay, &d->world_group, mem, init);
    for (int u = 0; u < UNITS; u++) free(init[u]);
    DistRecord rec[8];
    while (dist_drain_records(d, rec, 8) > 0) {}  // (zero_create does not communicate; nothing is counted before the region)
}

static float get(const Zero *z, void *buf, size_t i) {
    return z->prec == PREC_BF16 ? bf16_to_float(((bf16 *)buf)[i]) : ((float *)buf)[i];
}
static void put(const Zero *z, void *buf, size_t i, float x) {
    if (z->prec == PREC_BF16) ((bf16 *)buf)[i] = bf16_from_float(x);
    else ((float *)buf)[i] = x;
}

static const char *STAGE_WORDS[] = {"stage 0 (DDP)", "stage 1", "stage 2", "stage 3"};

#define MAX_RECORDS 64

// What ran since the last drain, against the expected list of (kind, unit), in order: a
// collective of the list that never ran, one that ran on the wrong length or with the wrong
// tag, or one that is not on the list at all (with the bytes it cost) ends the check.
static int record_is(const DistRecord *r, const Zero *z, DistColl coll, int tag) {
    return r->coll == coll && r->tag == tag && r->count == shard_padded(&z->lay, tag);
}

static void check_records(Dist *d, const Zero *z, const DistColl *want, const int *want_tag, int nwant,
                          const char *where, const char *extra_hint, const char *missing_hint) {
    DistRecord rec[MAX_RECORDS];
    size_t n = dist_drain_records(d, rec, MAX_RECORDS);
    int p = z->lay.world, r = z->lay.rank, j = 0, extra = -1;
    uint64_t sent = 0, needed = 0;
    for (size_t i = 0; i < n; i++) {
        sent += rec[i].bytes_sent;
        if (j < nwant && record_is(&rec[i], z, want[j], want_tag[j])) {
            needed += rec[i].bytes_sent, j++;
            continue;
        }
        if (j < nwant && rec[i].coll == want[j] && rec[i].tag == want_tag[j])
            todo_fail("%s on %d ranks, rank %d: the %s of unit %d ran on %zu elements; the whole padded unit is %zu "
                      "(shard_padded(): N x shard[u])",
                      where, p, r, dist_coll_name(want[j]), want_tag[j], rec[i].count, shard_padded(&z->lay, want_tag[j]));
        if (j < nwant && rec[i].coll == want[j] && rec[i].count == shard_padded(&z->lay, want_tag[j]))
            todo_fail("%s on %d ranks, rank %d: the %s of unit %d is tagged %d: tag each collective with its unit "
                      "(the run log's spans name the unit from it)",
                      where, p, r, dist_coll_name(want[j]), want_tag[j], rec[i].tag);
        for (int k = j + 1; k < nwant; k++)
            if (record_is(&rec[i], z, want[k], want_tag[k]))
                todo_fail("%s on %d ranks, rank %d: the %s of unit %d never ran (the %s of unit %d came next)\n%s",
                          where, p, r, dist_coll_name(want[j]), want_tag[j], dist_coll_name(want[k]), want_tag[k],
                          missing_hint);
        if (extra < 0) extra = (int)i;
    }
    if (j < nwant && extra >= 0)
        todo_fail("%s on %d ranks, rank %d: the %s of unit %d never ran; a%s %s of %zu elements (tag %d) ran "
                  "instead\n%s",
                  where, p, r, dist_coll_name(want[j]), want_tag[j], rec[extra].coll == DIST_ALL_GATHER ||
                  rec[extra].coll == DIST_ALL_REDUCE ? "n" : "", dist_coll_name(rec[extra].coll), rec[extra].count,
                  rec[extra].tag, missing_hint);
    if (j < nwant)
        todo_fail("%s on %d ranks, rank %d: the %s of unit %d never ran\n%s", where, p, r, dist_coll_name(want[j]),
                  want_tag[j], missing_hint);
    if (extra >= 0)
        todo_fail("%s on %d ranks, rank %d: unit %d was %s as well (%llu bytes sent where %llu suffice)\n%s", where, p,
                  r, rec[extra].tag,
                  rec[extra].coll == DIST_ALL_GATHER       ? "all-gathered"
                  : rec[extra].coll == DIST_REDUCE_SCATTER ? "reduce-scattered"
                  : rec[extra].coll == DIST_ALL_REDUCE     ? "all-reduced"
                                                           : dist_coll_name(rec[extra].coll),
                  (unsigned long long)sent, (unsigned long long)needed, extra_hint);
}

// ---- zero-reduce-scatter --------------------------------------------------------------------

typedef struct {
    int stage;
    Precision prec;
} ZeroCase;

static float grad_code(const Zero *z, int q, size_t e) {
    return (float)(1 << q) + 16.0f * (float)(e % (z->prec == PREC_BF16 ? 4 : 64));
}

static void reduce_scatter_rank(Dist *d, void *arg) {
    const ZeroCase *c = arg;
    Mem mem;
    mem_init(&mem, NULL);
    Zero z;
    zero_make(&z, &mem, d, c->stage, c->prec);
    int p = d->world, r = d->rank, full_mask = (1 << p) - 1;
    // The gradient each stage holds after the backward pass: whole units at 0-1, shards at 2-3.
    for (int u = 0; u < UNITS; u++) {
        size_t n = c->stage <= 1 ? shard_padded(&z.lay, u) : z.lay.shard[u];
        for (size_t e = 0; e < n; e++) put(&z, z.grads[u], e, grad_code(&z, r, e));
    }
    todo_context("reduce_gradients() at %s, %s, on %d ranks", STAGE_WORDS[c->stage], precision_name(c->prec), p);
    reduce_gradients(&z);
    char where[120];
    snprintf(where, sizeof where, "reduce_gradients() at %s (%s)", STAGE_WORDS[c->stage], precision_name(c->prec));
    for (int u = 0; u < UNITS; u++) {
        size_t s = z.lay.shard[u], n = shard_padded(&z.lay, u);
        size_t from = c->stage == 1 ? (size_t)r * s : 0, to = c->stage == 1 ? from + s : n;
        if (c->stage >= 2) from = 0, to = s;
        for (size_t e = from; e < to; e++) {
            size_t k = e;  // element of the unit (stages 2-3: of the shard)
            float got = get(&z, z.grads[u], e);
            double want = c->stage >= 2 ? grad_code(&z, r, k) : 0;
            if (c->stage <= 1)
                for (int q = 0; q < p; q++) want += grad_code(&z, q, k);
            if (got == want) continue;
            int owner = (int)(e / s);
            char head[500];
            if (c->stage >= 2)
                todo_fail("%s on %d ranks, rank %d, unit %d: the gradient shard changed at element %zu: expected %.0f "
                          "(untouched), got %.0f\nstages 2-3 reduce-scattered each unit's gradient in the backward "
                          "pass: reduce_gradients() has nothing to do for them",
                          where, p, r, u, e, want, got);
            snprintf(head, sizeof head,
                     "%s on %d ranks: rank %d, unit %d (%zu elements, shards of %zu), element %zu (in rank %d's "
                     "shard) should hold the sum over the ranks, %.0f, got %.0f",
                     where, p, r, u, n, s, e, owner, want, got);
            int mask = (int)got & 15;
            double rest = (got - mask) / 16.0;
            if (got == grad_code(&z, r, k))
                todo_fail("%s\nthat is rank %d's own gradient, unsummed: %s", head, r,
                          owner == r ? "the reduce-scatter's output is the rank's shard of the unit, at r x shard[u] "
                                       "(at(z->grads[u], r * shard, e))"
                                     : "stage 0 all-gathers the summed shards back, so that every element is summed");
            if ((float)mask + 16.0f * (float)rest == got && mask != full_mask && rest >= 0) {
                char had[40] = "", all[40] = "";
                for (int q = 0; q < p; q++) {
                    if (mask >> q & 1) snprintf(had + strlen(had), sizeof had - strlen(had), "%s%d", had[0] ? "," : "", q);
                    snprintf(all + strlen(all), sizeof all - strlen(all), "%s%d", q ? "," : "", q);
                }
                todo_fail("%s\nthe value holds ranks %s of %s: the sum is over every rank of the group", head,
                          had[0] ? had : "none", all);
            }
            todo_fail("%s\nthe sum of another element or another unit: rank r's shard of unit u starts r x "
                      "shard[u] elements into z->grads[u], and the collective runs on the whole padded unit",
                      head);
        }
    }
    DistColl want[2 * UNITS];
    int tag[2 * UNITS], nwant = 0;
    for (int u = 0; u < UNITS && c->stage <= 1; u++) {
        want[nwant] = DIST_REDUCE_SCATTER, tag[nwant++] = u;
        if (c->stage == 0) want[nwant] = DIST_ALL_GATHER, tag[nwant++] = u;
    }
    const char *extra = c->stage == 1 ? "stage 1 keeps only its shard of the summed gradient: its optimizer updates "
                                        "that shard alone, and the all-gather after the step carries the updated "
                                        "WEIGHTS (gather_updated_weights), not gradients"
                        : c->stage == 0 ? "stage 0 is DDP's all-reduce: one reduce-scatter, then one all-gather per unit"
                                        : "stages 2-3 reduce-scattered each unit in the backward pass: nothing to do here";
    check_records(d, &z, want, tag, nwant,
                  c->stage == 1 ? "stage 1 keeps only its shard of the summed gradient" : where, extra,
                  c->stage == 0 ? "stage 0 reduce-scatters each unit, then all-gathers the summed shards back "
                                  "(DDP's all-reduce in its two halves)"
                                : "stage 1 reduce-scatters each unit in place; nothing else");
    zero_destroy(&z);
    mem_destroy(&mem);
}

static void check_reduce_scatter(void) {
    static const int worlds[] = {2, 3, 4, 1};
    for (int stage = 0; stage <= 3; stage++)
        for (int prec = 0; prec < 2; prec++)
            for (int i = 0; i < 4; i++) {
                ZeroCase c = {stage, prec ? PREC_BF16 : PREC_FP32};
                if (prec && worlds[i] == 3) continue;  // (bf16 at 2, 4 and 1 ranks is enough)
                todo_context("reduce_gradients() at %s, %s, on %d ranks", STAGE_WORDS[stage], precision_name(c.prec),
                             worlds[i]);
                todo_ranks(worlds[i], DIST_ALGO_DIRECT, 5, reduce_scatter_rank, &c);
            }
}

// ---- zero-all-gather --------------------------------------------------------------------------

static float weight_code(const Zero *z, int q, size_t k) {
    return z->prec == PREC_BF16 ? (float)(64 * q) + (float)(k % 64) : (float)(1000 * q) + (float)(k % 1000);
}

static void all_gather_rank(Dist *d, void *arg) {
    const ZeroCase *c = arg;
    Mem mem;
    mem_init(&mem, NULL);
    Zero z;
    zero_make(&z, &mem, d, c->stage, c->prec);
    int p = d->world, r = d->rank;
    // The unit as the optimizer left it: the rank's slice updated, the rest stale (-1).
    for (int u = 0; u < UNITS; u++) {
        size_t s = z.lay.shard[u], n = c->stage == 3 ? s : shard_padded(&z.lay, u);
        for (size_t e = 0; e < n; e++) put(&z, z.params[u], e, -1.0f);
        for (size_t k = 0; k < (c->stage == 0 ? n : s); k++) put(&z, z.param_slice[u], k, weight_code(&z, r, k));
    }
    todo_context("gather_updated_weights() at %s, %s, on %d ranks", STAGE_WORDS[c->stage], precision_name(c->prec), p);
    gather_updated_weights(&z);
    char where[120];
    snprintf(where, sizeof where, "gather_updated_weights() at %s (%s)", STAGE_WORDS[c->stage], precision_name(c->prec));
    for (int u = 0; u < UNITS; u++) {
        size_t s = z.lay.shard[u], n = c->stage == 3 ? s : shard_padded(&z.lay, u);
        for (size_t e = 0; e < n; e++) {
            int owner = c->stage == 1 || c->stage == 2 ? (int)(e / s) : r;
            size_t k = c->stage == 1 || c->stage == 2 ? e % s : e;
            float want = c->stage == 0 ? weight_code(&z, r, e)
                         : c->stage == 3 ? weight_code(&z, r, e)
                         : weight_code(&z, owner, k);
            float got = get(&z, z.params[u], e);
            if (got == want) continue;
            if (c->stage == 0 || c->stage == 3)
                todo_fail("%s on %d ranks, rank %d, unit %d: element %zu changed: expected %.0f (untouched), got "
                          "%.0f\n%s",
                          where, p, r, u, e, want, got,
                          c->stage == 0 ? "stage 0 updated the whole unit on every rank: nothing to gather"
                                        : "stage 3 gathers a unit's weights when it runs: nothing to gather here");
            char head[400];
            snprintf(head, sizeof head,
                     "%s on %d ranks: rank %d, unit %d (shards of %zu): element %zu is element %zu of rank %d's "
                     "updated shard, expected %.0f, got %.0f",
                     where, p, r, u, s, e, k, owner, want, got);
            if (got == -1.0f)
                todo_fail("%s\nnothing arrived there: all-gather every rank's z->param_slice[u] into z->params[u] "
                          "(the whole padded unit, shard_padded() elements)%s",
                          head, u == 0 ? "" : "; every unit, not only the first");
            int scale = c->prec == PREC_BF16 ? 64 : 1000, from = (int)got / scale;
            size_t at = (size_t)((int)got % scale);
            todo_fail("%s\nthat is element %zu of rank %d's shard: rank q's shard goes at q x shard[u] in the "
                      "whole unit",
                      head, at, from);
        }
    }
    DistColl want[UNITS];
    int tag[UNITS], nwant = 0;
    for (int u = 0; u < UNITS && (c->stage == 1 || c->stage == 2); u++) want[nwant] = DIST_ALL_GATHER, tag[nwant++] = u;
    check_records(d, &z, want, tag, nwant, where,
                  c->stage == 0 || c->stage == 3 ? "stages 0 and 3 have nothing to gather after the step"
                                                 : "one all-gather per unit is all it takes",
                  "stages 1 and 2 all-gather every unit's updated shard once");
    zero_destroy(&z);
    mem_destroy(&mem);
}

static void check_all_gather(void) {
    static const int worlds[] = {2, 3, 4, 1};
    for (int stage = 0; stage <= 3; stage++)
        for (int prec = 0; prec < 2; prec++)
            for (int i = 0; i < 4; i++) {
                ZeroCase c = {stage, prec ? PREC_BF16 : PREC_FP32};
                if (prec && worlds[i] == 3) continue;
                todo_context("gather_updated_weights() at %s, %s, on %d ranks", STAGE_WORDS[stage],
                             precision_name(c.prec), worlds[i]);
                todo_ranks(worlds[i], DIST_ALGO_DIRECT, 5, all_gather_rank, &c);
            }
}

int main(int argc, char **argv) {
    static const TodoCheck checks[] = {{"zero-shard-length", check_shard_length},
                                       {"zero-reduce-scatter", check_reduce_scatter},
                                       {"zero-all-gather", check_all_gather}};
    return todo_main(argc, argv, checks, 3);
}
