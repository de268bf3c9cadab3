// comm.c — comm.bytes: every byte a step sends, against the count of the method's algorithm
// (DDP's buckets, ZeRO's and FSDP's units, Megatron's f and g, the ring's K/V blocks, the
// experts' rows), FSDP's prefetch order, cp's positions and ep's routing statistics.
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "common/comm/dist.h"
#include "common/harness/cp_layout.h"
#include "common/harness/memplan.h"
#include "common/harness/tp_layout.h"
#include "common/model/gpt.h"
#include "grade.h"
#include "grade_internal.h"

// ---- comm.bytes --------------------------------------------------------------------------
//
// Every byte a step sends is accounted for: the algorithm's collectives, counted from the
// span events, and then everything else the rank sent in the step (its step event's
// bytes.sent): the scalar sums of the loss and the gradient norm, one all-gather of a float
// pair per rank, 8 (N-1) bytes a rank. An extra collective, or a chunk sent twice, shows as
// bytes the algorithm does not send, even when every number it computes is right.

// Rank r's step event of `step` (NULL if missing), and what it says it sent.
static const JsonValue *rank_step(const GradeRun *run, int r, int64_t step) {
    size_t n;
    const JsonValue **s = grade_steps(run, r, &n);
    int64_t i = step - run->first_step;
    return i >= 0 && (size_t)i < n ? s[i] : NULL;
}
static double step_sent(const GradeRun *run, int r, int64_t step) { return ev_num2(rank_step(run, r, step), "bytes", "sent"); }

// The scalar sums of a step (dist_sum_over_ranks: an all-gather of one float pair per rank).
#define SUM_BYTES(p) (8.0 * ((p) - 1))

// Which way a count is off, for the reasons below: a rank that sends too little is wrong too
// (a sum left out, or sent at a smaller size than the algorithm's), and must not be told it
// sent too much.
static const char *more_or_fewer(double got, double want) { return got > want ? "more" : "fewer"; }
static void reason_other_bytes(GradeCheck *c, const char *who, double got, double want) {
    if (got > want) REASON("%s sent more than the algorithm needs: a collective too many, or bytes sent twice", who);
    else REASON("%s sent fewer bytes than the algorithm needs: a sum left out, or sent smaller than the algorithm "
                "sends it (each sum is one float pair per rank, all-gathered)", who);
}

// The bytes a ring collective of n floats sends from group rank r of p (dist.h's chunks):
// an all-reduce every chunk but its own in the reduce-scatter and all but r+1's in the
// all-gather.
typedef enum { RING_ALL_REDUCE, RING_REDUCE_SCATTER, RING_ALL_GATHER } RingKind;
static double ring_bytes(RingKind kind, size_t n, int p, int r) {
    if (p == 1) return 0;
    size_t off, mine, next;
    dist_chunk(n, p, r, &off, &mine);
    dist_chunk(n, p, (r + 1) % p, &off, &next);
    size_t words = kind == RING_ALL_REDUCE ? (n - mine) + (n - next) : kind == RING_REDUCE_SCATTER ? n - mine : n - next;
    return 4.0 * (double)words;
}

// DDP: every gradient element all-reduced exactly once per step. A bucket's all-reduce of n
// floats sends 2(N-1) n floats summed over the ranks with the ring, N(N-1) n with the direct
// algorithm; so the buckets' bytes, summed over ranks, say how many elements each reduced.
// Besides the buckets, a step sends the loss's sum, nothing else.
static int comm_ddp(Ctx *x, GradeCheck *c, int64_t step, double psi) {
    const GradeRun *run = x->run;
    int N = run->world;
    double total[1024] = {0}, buckets = 0, sent = 0, other_reduce = 0;
    const char *algo[1024] = {0};
    int nb = 0;
    for (int r = 0; r < N; r++) {
        size_t n;
        const JsonValue **sp = grade_spans(run, r, step, &n);
        for (size_t i = 0; i < n; i++) {
            const JsonValue *ev = sp[i];
            if (strcmp(ev_str(ev, "name"), "all_reduce") != 0) continue;
            double b = ev_num(ev, "bucket");
            if (!(b >= 0 && b < 1024)) {  // an all-reduce that is no gradient bucket
                other_reduce += ev_num(ev, "bytes");
                continue;
            }
            int k = (int)b;
            total[k] += ev_num(ev, "bytes");
            algo[k] = ev_str(ev, "algo");
            if (k + 1 > nb) nb = k + 1;
        }
        sent += step_sent(run, r, step);
    }
    double elements = 0;
    for (int k = 0; k < nb; k++) {
        double f = algo[k] && !strcmp(algo[k], "direct") ? (double)N * (N - 1) : 2.0 * (N - 1);
        elements += total[k] / (4 * f);
        buckets += total[k];
    }
    if (elements != psi) {
        MEASURED("step %lld: the buckets' all-reduces sent %.0f bytes over the ranks: %.1f gradient elements' worth (%d "
                 "buckets)", (long long)step, buckets, elements, nb);
        EXPECTED("Psi = %.0f: each gradient once; ring 2(N-1)/N x 4 bytes per element per rank", psi);
        if (elements > psi) REASON("the gradient all-reduces moved more than each gradient element once: a bucket sent twice, "
                                   "or larger than its gradients");
        else REASON("the gradient all-reduces moved fewer elements than the gradients have: a bucket left out, or cut short");
        return 0;
    }
    if (sent - buckets != N * SUM_BYTES(N)) {
        MEASURED("step %lld: %.0f bytes sent over the ranks besides the gradient buckets'%s", (long long)step,
                 sent - buckets, other_reduce ? " (all-reduces that are no bucket's among them)" : "");
        EXPECTED("%.0f: the loss's sum, one float pair per rank all-gathered (8 (N-1) bytes a rank)", N * SUM_BYTES(N));
        reason_other_bytes(c, "the ranks", sent - buckets, N * SUM_BYTES(N));
        return 0;
    }
    MEASURED("every step: Psi = %.0f elements in %d buckets, and the loss's sum", psi, nb);
    EXPECTED("Psi = %.0f; ring 2(N-1)/N x 4 Psi bytes per rank", psi);
    return 1;
}

// FSDP --prefetch: each unit's all-gather is asked for before the unit before it (in the
// order of the pass) starts computing, so that it travels while that unit computes. From the
// spans: for the compute span of unit u (forward: its successor v = u+1 is next; backward:
// v = u-1, unless --no-reshard kept v's weights from the forward pass), the all-gather that
// brought v's weights for v's compute span of the same pass and micro-batch (the last one of
// unit v issued before that span started) must have been issued before u's span started.
// Program order, not timing: a gather asked for only when it is v's turn is not prefetched.
static int fsdp_prefetched(const GradeRun *run, GradeCheck *c, int r, int64_t step, int U, int reshard) {
    size_t n;
    const JsonValue **sp = grade_spans(run, r, step, &n);
    for (size_t i = 0; i < n; i++) {
        const char *name = ev_str(sp[i], "name");
        int fwd = !strcmp(name, "fwd");
        if (!fwd && (strcmp(name, "bwd") != 0 || !reshard)) continue;
        int u = (int)ev_num(sp[i], "layer"), v = fwd ? u + 1 : u - 1;
        if (v < 0 || v >= U) continue;
        double next_t0 = NAN, issued = NAN;  // (none found: NaN, which fails below)
        for (size_t k = 0; k < n; k++)  // v's compute span of this pass and micro-batch
            if (!strcmp(ev_str(sp[k], "name"), name) && ev_num(sp[k], "layer") == v &&
                ev_num(sp[k], "mb") == ev_num(sp[i], "mb"))
                next_t0 = ev_num(sp[k], "t0_us");
        for (size_t k = 0; k < n; k++) {  // the gather that brought v's weights for it
            double t = ev_num(sp[k], "issued_us");
            if (!strcmp(ev_str(sp[k], "name"), "all_gather") && ev_num(sp[k], "unit") == v && t <= next_t0 &&
                !(t <= issued))
                issued = t;
        }
        if (!(issued <= ev_num(sp[i], "t0_us"))) {
            MEASURED("rank %d, step %lld: unit %d's all-gather was asked for after unit %d's %s had started", r,
                     (long long)step, v, u, fwd ? "forward" : "backward");
            EXPECTED("--prefetch: the next unit's all-gather issued before the current unit computes, forward and "
                     "backward");
            REASON("--prefetch did not prefetch: the next unit's weights were asked for only when it was its turn, so "
                   "nothing travelled while a unit computed");
            return 0;
        }
    }
    return 1;
}

// Psi'/N: the sum of the units' padded shards (memplan_unit_shard).
static double padded_shard_sum(const GptConfig *m, int N, int align) {
    double sum = 0;
    for (int u = 0; u < gpt_layer_count(m); u++) sum += memplan_unit_shard(m, u, N, align);
    return sum;
}

// ZeRO and FSDP: every rank sends (N-1) shards of every unit per reduce-scatter or
// all-gather of it (ring or direct alike), and a step does `passes` of them per unit and
// micro-batch; besides, the loss's sum and (sharded optimizer) the gradient norm's. HSDP
// (fsdp --replicate R): the same in a shard group of S = N/R ranks, shards padded to a
// multiple of R (2R in bf16); once a step, each shard summed across the replicas, a
// reduce-scatter and an all-gather of pieces of s/R each (spans of group "replicate");
// the loss summed over all N, the gradient norm over the S ranks of the shard group.
static int comm_sharded(Ctx *x, GradeCheck *c, int64_t step, const GptConfig *m) {
    const GradeRun *run = x->run;
    int world = run->world, mixed = grade_cfg_int(run, "mixed", 0), K = grade_cfg_count(run, "accum", 1, 1 << 16);
    int fsdp = !strcmp(run->lab, "fsdp"), reshard = grade_cfg_int(run, "reshard_after_forward", 1);
    int R = fsdp ? grade_cfg_int(run, "replicate", 1) : 1;
    if (R < 1 || world % R) {
        MEASURED("replicate %d over %d ranks", R, world);
        REASON("the config's replicate does not divide the ranks into replicas");
        return 0;
    }
    int N = world / R;  // the shard group
    int stage = fsdp ? 3 : grade_cfg_int(run, "stage", 0), passes, sums = stage == 0 ? 1 : 2;
    if (!K) {
        MEASURED("accum %g", grade_cfg_num(run, "accum", NAN));
        REASON("the config's accum is not a number of micro-batches");
        return 0;
    }
    if (fsdp) passes = reshard ? 3 * K : 2 * K;
    else passes = stage == 3 ? 3 * K : stage == 2 ? K + 1 : 2;
    double shards = padded_shard_sum(m, N, (mixed ? 2 : 1) * R);
    double want = passes * (double)(N - 1) * (mixed ? 2 : 4) * shards;
    double want_replica = 2.0 * (R - 1) * (mixed ? 2 : 4) * (shards / R), sums_want = SUM_BYTES(world);
    if (sums == 2) sums_want += SUM_BYTES(N);
    for (int r = 0; r < world; r++) {
        double sent = 0, replica = 0;
        size_t n;
        const JsonValue **sp = grade_spans(run, r, step, &n);
        for (size_t i = 0; i < n; i++) {
            const char *name = ev_str(sp[i], "name"), *group = ev_str(sp[i], "group");
            if (!(!strcmp(name, "all_gather") || !strcmp(name, "reduce_scatter")) || !(ev_num(sp[i], "unit") >= 0)) continue;
            if (group && !strcmp(group, "replicate")) replica += ev_num(sp[i], "bytes");
            else sent += ev_num(sp[i], "bytes");
        }
        if (sent != want) {
            MEASURED("rank %d, step %lld: %.0f bytes in all-gathers and reduce-scatters", r, (long long)step, sent);
            EXPECTED("%.0f = %d x (N-1) x %d x Psi'/N", want, passes, mixed ? 2 : 4);
            REASON("the units' all-gathers and reduce-scatters sent %s bytes than the method's: a unit gathered or "
                   "reduced %s times than it says, or a shard %s than Psi'/N", more_or_fewer(sent, want),
                   more_or_fewer(sent, want), sent > want ? "longer" : "shorter");
            return 0;
        }
        if (replica != want_replica) {
            MEASURED("rank %d, step %lld: %.0f bytes in the sums across replicas", r, (long long)step, replica);
            EXPECTED("%.0f = 2 (R-1) x %d x Psi'/S / R, R = %d", want_replica, mixed ? 2 : 4, R);
            REASON(replica < want_replica ? "the gradient shards were not summed across the replicas (each replica then "
                                            "steps on its own data's gradient alone)"
                                          : "the replicas' sums sent more than one all-reduce of each shard per step");
            return 0;
        }
        double other = step_sent(run, r, step) - sent - replica;
        if (other != sums_want) {
            MEASURED("rank %d, step %lld: %.0f bytes sent besides the units' all-gathers and reduce-scatters", r,
                     (long long)step, other);
            EXPECTED("%.0f: the loss's sum%s, a float pair per rank all-gathered (8 (N-1) bytes each%s)", sums_want,
                     sums == 2 ? " and the gradient norm's" : "", R > 1 ? "; the norm's over the S ranks of a shard group" : "");
            reason_other_bytes(c, "the rank", other, sums_want);
            return 0;
        }
        if (fsdp && grade_cfg_num(run, "prefetch", 0) && !fsdp_prefetched(run, c, r, step, gpt_layer_count(m), reshard))
            return 0;
    }
    MEASURED("%.0f bytes per rank per step in the units' collectives%s", want,
             fsdp && grade_cfg_num(run, "prefetch", 0) ? ", each all-gather prefetched" : "");
    if (R > 1)
        EXPECTED("%d x (S-1) x %d x Psi'/S = %.0f in the shard group of S = %d; %.0f across the %d replicas", passes,
                 mixed ? 2 : 4, want, N, want_replica, R);
    else EXPECTED("%d x (N-1) x %d x Psi'/N = %.0f", passes, mixed ? 2 : 4, want);
    return 1;
}

// Megatron TP (one tensor-parallel group: no --dp, no --vocab-parallel). Per micro-batch and
// block, f and g: without --sp, 2 all-reduces forward (g) and 2 backward (f) of B' T C floats;
// with --sp each becomes an all-gather and a reduce-scatter of the same B' T C floats (f:
// all-gather forward, reduce-scatter backward; g: reduce-scatter forward, all-gather
// backward): the same bytes in twice the calls. With --sp the replicated parameters saw only
// the rank's rows: once per step their gradients are all-reduced over the group, one call per
// layer. Besides: the gradient norm's sum and, with --sp, the loss's.
static int comm_tp(Ctx *x, GradeCheck *c, int64_t step, const GptConfig *m) {
    const GradeRun *run = x->run;
    int t = run->world, K = grade_cfg_count(run, "accum", 1, 1 << 16), B = grade_cfg_count(run, "batch", 0, 1 << 16);
    int sp = grade_cfg_int(run, "sp", 0), L = m->layers, calls = 4 * L * K;
    if (!K || !B || B % K) {
        MEASURED("batch %d, accum %d", B, K);
        REASON("the config's batch does not split into its micro-batches");
        return 0;
    }
    size_t n = (size_t)(B / K) * (size_t)m->seq * (size_t)m->dim;
    // --mixed --sp: f's and g's all-gathers move bf16 where the rows split into pairs
    // (tensor_parallel.h, tp_gathers_bf16): half their bytes.
    double gather = sp && grade_cfg_int(run, "mixed", 0) && n % (2 * (size_t)t) == 0 ? 0.5 : 1;
    for (int r = 0; r < t; r++) {
        double fg_sent = 0, fg_want = 0, rep_sent = 0, rep_want = 0;
        int ar = 0, rs = 0, ag = 0, reps = 0;
        size_t nsp;
        const JsonValue **spans = grade_spans(run, r, step, &nsp);
        for (size_t i = 0; i < nsp; i++) {
            const JsonValue *ev = spans[i];
            const char *name = ev_str(ev, "name"), *op = ev_str(ev, "op");
            if (strcmp(ev_str(ev, "group"), "tp") != 0) continue;
            if (!strcmp(op, "replicated_grads")) reps++, rep_sent += ev_num(ev, "bytes");
            if (strcmp(op, "f") != 0 && strcmp(op, "g") != 0) continue;
            fg_sent += ev_num(ev, "bytes");
            ar += !strcmp(name, "all_reduce"), rs += !strcmp(name, "reduce_scatter"), ag += !strcmp(name, "all_gather");
        }
        if (sp) {
            fg_want = calls * (gather * ring_bytes(RING_ALL_GATHER, n, t, r) + ring_bytes(RING_REDUCE_SCATTER, n, t, r));
            for (int l = 0; l < gpt_layer_count(m); l++)
                rep_want += ring_bytes(RING_ALL_REDUCE, tp_replicated_floats(m, 0, l), t, r);
        } else {
            fg_want = calls * ring_bytes(RING_ALL_REDUCE, n, t, r);
        }
        int kinds_ok = sp ? ar == 0 && rs == calls && ag == calls : ar == calls && rs == 0 && ag == 0;
        if (!kinds_ok || fg_sent != fg_want) {
            MEASURED("rank %d, step %lld: f and g made %d all-reduces, %d reduce-scatters, %d all-gathers, %.0f bytes", r,
                     (long long)step, ar, rs, ag, fg_sent);
            if (sp)
                EXPECTED("--sp: 4 L K = %d all-gathers (of bf16s with --mixed) and %d reduce-scatters of B' T C values, "
                         "%.0f bytes", calls, calls, fg_want);
            else
                EXPECTED("4 L K = %d all-reduces of B' T C floats, %.0f bytes", calls, fg_want);
            if (kinds_ok)
                REASON("f and g sent %s bytes than Megatron's operators: a sum %s than B' T C values", more_or_fewer(fg_sent, fg_want),
                       fg_sent > fg_want ? "larger" : "smaller");
            else
                REASON(sp ? "sequence parallelism's f and g are an all-gather and a reduce-scatter each, exactly where "
                            "Megatron's all-reduces were"
                          : "the activations were not all-reduced exactly where Megatron's f and g operators are");
            return 0;
        }
        if (sp && (reps != gpt_layer_count(m) || rep_sent != rep_want)) {
            MEASURED("rank %d, step %lld: %d all-reduces of the replicated parameters' gradients, %.0f bytes", r,
                     (long long)step, reps, rep_sent);
            EXPECTED("--sp: one per layer, L + 2 = %d, %.0f bytes", gpt_layer_count(m), rep_want);
            REASON("with --sp each rank's replicated parameters saw only its rows: their gradients are summed over the "
                   "group once per step");
            return 0;
        }
        double sums = (t > 1) * SUM_BYTES(t) * (sp ? 2 : 1), other = step_sent(run, r, step) - fg_sent - rep_sent;
        if (other != sums) {
            MEASURED("rank %d, step %lld: %.0f bytes sent besides f and g%s", r, (long long)step, other,
                     sp ? " and the replicated gradients" : "");
            EXPECTED("%.0f: the gradient norm's sum%s, a float pair per rank all-gathered (8 (t-1) bytes each)", sums,
                     sp ? " and the loss's" : "");
            reason_other_bytes(c, "the rank", other, sums);
            return 0;
        }
    }
    MEASURED(sp ? "--sp: 4 L K = %d all-gathers and reduce-scatters per rank per step, the replicated gradients once"
                : "4 L K = %d all-reduces per rank per step", calls);
    EXPECTED(sp ? "4 L K all-gathers and 4 L K reduce-scatters of B' T C floats" : "4 L K all-reduces of B' T C floats");
    return 1;
}

// CP: per rank and step, the passes' transfers (the spans of phase "attention": the ring's
// sends, or --kv all-gather's collectives) equal cp_ring_bytes() for every layer and
// micro-batch; every layer's gradient all-reduced once over all N ranks (the ring's count);
// and the loss's sum. Nothing else.
static int comm_cp(Ctx *x, GradeCheck *c, int64_t step, const GptConfig *m) {
    const GradeRun *run = x->run;
    int N = run->world, dp = grade_cfg_int(run, "dp", 1), K = grade_cfg_count(run, "accum", 1, 1 << 16);
    int B = grade_cfg_count(run, "batch", 0, 1 << 16), kind = cp_layout_parse(grade_cfg_str(run, "layout", ""));
    int kv = !strcmp(grade_cfg_str(run, "kv", "ring"), "all-gather") ? CP_KV_ALL_GATHER : CP_KV_RING;
    CpLayout l;
    if (dp < 1 || N % dp || !K || !B || B % (dp * K) || kind < 0 || cp_layout_init(&l, kind, m->seq, N / dp) != 0) {
        MEASURED("%d ranks in %d group(s), batch %d, accum %d, layout \"%s\"", N, dp, B, K, grade_cfg_str(run, "layout", ""));
        REASON("the config does not describe a context-parallel layout");
        return 0;
    }
    int n = N / dp, micro = B / (dp * K);
    for (int r = 0; r < N; r++) {
        size_t ns;
        const JsonValue **sp = grade_spans(run, r, step, &ns);
        double ring = 0, grads = 0;
        int reduces = 0;
        for (size_t i = 0; i < ns; i++) {
            if (!strcmp(ev_str(sp[i], "phase"), "attention")) ring += ev_num(sp[i], "bytes");
            else if (!strcmp(ev_str(sp[i], "name"), "all_reduce")) grads += ev_num(sp[i], "bytes"), reduces++;
        }
        double want_ring = 0, want_grads = 0;
        for (int layer = 0; layer < m->layers; layer++)
            want_ring += (double)K * (double)(cp_ring_bytes(&l, kv, r % n, micro, m->dim, 0) +
                                              cp_ring_bytes(&l, kv, r % n, micro, m->dim, 1));
        for (int layer = 0; layer < gpt_layer_count(m); layer++)
            want_grads += ring_bytes(RING_ALL_REDUCE, gpt_layer_size(m, layer), N, r);
        if (ring != want_ring) {
            MEASURED("rank %d, step %lld: the attention's transfers sent %.0f bytes", r, (long long)step, ring);
            EXPECTED("%.0f: %s, for %d layers and %d micro-batch(es)", want_ring,
                     kv == CP_KV_RING ? "each K/V block handed on once a step of the ring, dK dV with it and home"
                                      : "K/V all-gathered forward and backward, dK dV reduce-scattered",
                     m->layers, K);
            REASON("the ring moved %s than its blocks: a block sent twice or left out, or dK dV not travelling with "
                   "their block", more_or_fewer(ring, want_ring));
            return 0;
        }
        if (grads != want_grads) {
            MEASURED("rank %d, step %lld: %d all-reduces sent %.0f bytes", r, (long long)step, reduces, grads);
            EXPECTED("%.0f: each layer's gradient all-reduced once over all %d ranks (ring)", want_grads, N);
            REASON("the gradients were summed over %s than every rank once: over one group only, twice, or not at all",
                   more_or_fewer(grads, want_grads));
            return 0;
        }
        double other = step_sent(run, r, step) - ring - grads;
        if (other != SUM_BYTES(N)) {
            MEASURED("rank %d, step %lld: %.0f bytes sent besides the ring and the gradients", r, (long long)step, other);
            EXPECTED("%.0f: the loss's sum, one float pair per rank all-gathered", SUM_BYTES(N));
            reason_other_bytes(c, "the rank", other, SUM_BYTES(N));
            return 0;
        }
    }
    MEASURED("every step: the ring's blocks, each layer's gradient all-reduced once, the loss's sum");
    EXPECTED("cp_ring_bytes x L x K, 2 (N-1)/N x 4 Psi, 8 (N-1) per rank");
    return 1;
}

// ---- expert parallelism: the rows each rank sends, and the router's statistics ------------

// The floats of layer `layer` every ep rank holds alike (m: the whole model, every expert):
// all of the embeddings and the head; of a block, all but its E experts.
static double ep_replicated_floats(const GptConfig *m, int layer) {
    double all = (double)gpt_layer_size(m, layer);
    if (layer == 0 || layer > m->layers) return all;
    MoeConfig x = gpt_moe_config(m);
    return all - (double)m->experts * (double)moe_expert_floats(&x);
}

// A step's whole-run routing numbers from rank r's step event: assignments, dropped, and
// expert_load [L][E] as one flat row (NaN where absent). 0 if the event has no such fields.
static int ep_routing(const GradeRun *run, int r, int64_t step, const GptConfig *m, double *assigned, double *dropped,
                      double *load) {
    const JsonValue *ev = rank_step(run, r, step), *rows = json_get(ev, "expert_load");
    *assigned = ev_num(ev, "assignments"), *dropped = ev_num(ev, "dropped");
    if (!rows || rows->type != JSON_ARRAY || rows->count != (size_t)m->layers) return 0;
    for (int l = 0; l < m->layers; l++) {
        const JsonValue *row = json_at(rows, (size_t)l);
        if (!row || row->type != JSON_ARRAY || row->count != (size_t)m->experts) return 0;
        for (int e = 0; e < m->experts; e++) load[l * m->experts + e] = ev_num_at(row, (size_t)e);
    }
    return isfinite(*assigned) && isfinite(*dropped);
}

// Expert parallelism. Per block and micro-batch each rank all-gathers its counts, K E + 2 E
// floats (4 (N-1) (K E + 2 E) bytes on the ring), and its rows travel: 4 C bytes a row, out
// to the experts' ranks and back (dispatch, combine), and the same again in the backward. So
// a rank sends 8 C (rows out + rows in) bytes of rows, its own rows kept in memory. The rows
// each rank says it sent each rank (expert_rows_sent) must add up to the assignments the
// capacity served, assignments - dropped (experts.routing checks those). Then the replicated
// gradients, each layer's all-reduced once over every rank (the experts' not at all: each
// is on one rank, and its gradient already covers every rank's tokens); the sums of the loss
// and of the experts' share of the gradient norm, 8 (N-1) bytes each.
static int comm_ep(Ctx *x, GradeCheck *c, int64_t step, const GptConfig *m) {
    const GradeRun *run = x->run;
    int N = run->world, passes = grade_cfg_count(run, "accum", 1, 1 << 16);
    if (N > DIST_MAX_RANKS || m->experts < 1 || passes < 1) {
        MEASURED("%d ranks, %d experts, accum %d", N, m->experts, passes);
        REASON("the config does not describe an expert-parallel layout");
        return 0;
    }
    double rows[DIST_MAX_RANKS][DIST_MAX_RANKS], served = 0;
    for (int r = 0; r < N; r++) {
        const JsonValue *sent = json_get(rank_step(run, r, step), "expert_rows_sent");
        for (int q = 0; q < N; q++) {
            rows[r][q] = sent && sent->type == JSON_ARRAY && sent->count == (size_t)N ? ev_num_at(sent, (size_t)q) : NAN;
            served += rows[r][q];
        }
    }
    double assigned = ev_num(rank_step(run, 0, step), "assignments"), dropped = ev_num(rank_step(run, 0, step), "dropped");
    if (!(served == assigned - dropped)) {
        MEASURED("step %lld: the ranks say they sent %.0f rows in all (expert_rows_sent)", (long long)step, served);
        EXPECTED("%.0f: every assignment the capacity served (%.0f routed, %.0f dropped) sent once", assigned - dropped,
                 assigned, dropped);
        REASON("the dispatch sent other rows than the served assignments: a dropped token sent anyway, a row "
               "sent twice or left out, or the step events do not say what was sent");
        return 0;
    }
    double counts = (double)m->layers * passes * 4.0 * (N - 1) * (m->topk * m->experts + 2.0 * m->experts);
    for (int r = 0; r < N; r++) {
        size_t ns;
        const JsonValue **sp = grade_spans(run, r, step, &ns);
        double experts = 0, grads = 0, out = 0, in = 0;
        int reduces = 0;
        for (size_t i = 0; i < ns; i++) {
            if (!strcmp(ev_str(sp[i], "phase"), "experts")) experts += ev_num(sp[i], "bytes");
            else if (!strcmp(ev_str(sp[i], "name"), "all_reduce")) grads += ev_num(sp[i], "bytes"), reduces++;
        }
        for (int q = 0; q < N; q++)
            if (q != r) out += rows[r][q], in += rows[q][r];
        double want_experts = 8.0 * m->dim * (out + in) + counts, want_grads = 0;
        for (int layer = 0; layer < gpt_layer_count(m); layer++)
            want_grads += ring_bytes(RING_ALL_REDUCE, (size_t)ep_replicated_floats(m, layer), N, r);
        if (experts != want_experts) {
            MEASURED("rank %d, step %lld: the experts' exchanges sent %.0f bytes", r, (long long)step, experts);
            EXPECTED("%.0f: 8 C x (%.0f rows out + %.0f rows back) and the counts' all-gather, 4 (N-1) (K E + 2 E) "
                     "for %d blocks and %d micro-batch(es)", want_experts, out, in, m->layers, passes);
            REASON("the dispatch moved %s than its rows: a row sent twice or left out, a trip missing (the combine "
                   "or a backward), or the counts gathered more than once a block", more_or_fewer(experts, want_experts));
            return 0;
        }
        if (grads != want_grads) {
            MEASURED("rank %d, step %lld: %d all-reduces sent %.0f bytes", r, (long long)step, reduces, grads);
            EXPECTED("%.0f: each layer's replicated gradients all-reduced once over all %d ranks (ring), the experts' "
                     "not at all", want_grads, N);
            REASON(grads > want_grads ? "the all-reduces moved more than the replicated gradients: the experts' "
                                        "gradients summed over the ranks too (each already covers every rank's tokens), "
                                        "or a layer reduced twice"
                                      : "the all-reduces moved fewer bytes than the replicated gradients: a layer left out");
            return 0;
        }
        double other = step_sent(run, r, step) - experts - grads;
        if (other != 2 * SUM_BYTES(N)) {
            MEASURED("rank %d, step %lld: %.0f bytes sent besides the experts' exchanges and the gradients", r,
                     (long long)step, other);
            EXPECTED("%.0f: the loss's sum and the experts' share of the gradient norm, one float pair per rank "
                     "all-gathered each", 2 * SUM_BYTES(N));
            reason_other_bytes(c, "the rank", other, 2 * SUM_BYTES(N));
            return 0;
        }
    }
    MEASURED("every step: the served rows out and back, the counts, each replicated layer all-reduced once, two sums");
    EXPECTED("8 C (rows out + rows in) + 4 (N-1)(K E + 2E) L K, 2 (N-1)/N x 4 Psi_rep, 16 (N-1) per rank");
    return 1;
}

// experts.routing: the router's statistics, logged by every rank for the whole pass (every
// rank learns every rank's counts before a token moves), obey what routing and the capacity
// rule say, whatever the weights: every rank logs the same numbers; each block routed each
// of the B T tokens to K experts; and an expert serves at most ceil(F B' T K / E) of a pass of
// B' T tokens (B' = B / accum: every rank's part of a micro-batch), so with one pass a step
// the drops are the sum over blocks and experts of max(0, load - that).
// Step 1's first block, from the same weights and embeddings, routes as the single-rank run's.
void check_routing(Ctx *x, GradeCheck *c) {
    const GradeRun *run = x->run;
    GptConfig m;
    if (!grade_model_or_say(run, &m, c)) return;
    int N = run->world, passes = grade_cfg_count(run, "accum", 1, 1 << 16), B = grade_cfg_count(run, "batch", 0, 1 << 16);
    if (m.experts < 1 || m.experts > 64 || m.layers > 64 || !passes || !B || B % passes) {
        MEASURED("%d experts, %d blocks, batch %d, accum %d", m.experts, m.layers, B, passes);
        REASON("the config does not describe a mixture of experts shardlab builds");
        return;
    }
    double pass = (double)(B / passes) * m.seq, want_assigned = (double)m.layers * m.topk * B * m.seq;
    double cap = m.capacity == 0 ? pass : fmin(pass, ceil(m.capacity * pass * m.topk / m.experts));
    EXPECTED("the same on every rank; %.0f assignments a step (K B T a block); %s (capacity %.0f of a pass's %.0f "
             "tokens); step 1's first block as the single-rank run's", want_assigned,
             m.capacity == 0 ? "none dropped (dropless)"
             : passes == 1   ? "the drops sum_b,e max(0, load - capacity)"
                             : "the drops between sum_b,e max(0, load - passes x capacity) and max(0, load - capacity)",
             cap, pass);
    double load[64 * 64], load0[64 * 64];
    for (int64_t step = run->first_step; step <= run->last_step; step++) {
        double a0, d0;
        if (!ep_routing(run, 0, step, &m, &a0, &d0, load0)) {
            MEASURED("rank 0, step %lld: no assignments, dropped and expert_load [%d][%d] in the step event", (long long)step,
                     m.layers, m.experts);
            REASON("the step events do not say how the tokens were routed");
            return;
        }
        for (int r = 1; r < N; r++) {
            double a, d;
            int ok = ep_routing(run, r, step, &m, &a, &d, load) && a == a0 && d == d0;
            for (int i = 0; ok && i < m.layers * m.experts; i++) ok = load[i] == load0[i];
            if (!ok) {
                MEASURED("rank %d, step %lld: its routing numbers differ from rank 0's", r, (long long)step);
                REASON("the ranks disagree on the pass's routing: each must count every rank's tokens (the counts' "
                       "all-gather), not only its own");
                return;
            }
        }
        // The rule's drops. With several passes a step the loads are the passes' sums, and an
        // expert's drops lie between its excess over all the passes' capacity and over one's.
        double least = 0, most = 0;
        for (int l = 0; l < m.layers; l++) {
            double sum = 0;
            for (int e = 0; e < m.experts; e++) {
                double v = load0[l * m.experts + e];
                sum += v, least += fmax(0, v - passes * cap), most += fmax(0, v - cap);
            }
            if (sum != (double)m.topk * B * m.seq) {
                MEASURED("step %lld, block %d: %.0f assignments", (long long)step, l, sum);
                EXPECTED("%.0f: each of the step's %d x %d tokens to K = %d experts", (double)m.topk * B * m.seq, B, m.seq,
                         m.topk);
                REASON("the router did not send every token to K experts");
                return;
            }
        }
        if (m.capacity == 0) least = most = 0;
        if (a0 != want_assigned || d0 < least || d0 > most) {
            MEASURED("step %lld: %.0f assignments, %.0f dropped", (long long)step, a0, d0);
            if (least == most)
                EXPECTED("%.0f assignments, %.0f dropped: every load above the capacity %.0f", want_assigned, least, cap);
            else
                EXPECTED("%.0f assignments, %.0f to %.0f dropped (%d passes, capacity %.0f each)", want_assigned, least,
                         most, passes, cap);
            REASON("the capacity dropped other assignments than the rule's: it is global (every rank's tokens of the "
                   "pass against one capacity), not one each rank applies to its own tokens");
            return;
        }
    }
    // Step 1's first block: the same weights and the same tokens' embeddings, so the router
    // must choose what the single-rank run's chose, whatever the later blocks do.
    if (run->first_step == 1) {
        const GradeRun *ref = ctx_reference(x, REF_SINGLE, c->reason, sizeof c->reason);
        if (!ref) {
            MEASURED("no reference");
            return;
        }
        double a, d;
        if (!ep_routing(ref, 0, 1, &m, &a, &d, load)) {
            MEASURED("the reference has no routing numbers at step 1");
            REASON("the reference run does not log its routing");
            return;
        }
        ep_routing(run, 0, 1, &m, &a, &d, load0);
        for (int e = 0; e < m.experts; e++)
            if (load0[e] != load[e]) {
                MEASURED("step 1, block 0: expert %d was given %.0f assignments", e, load0[e]);
                EXPECTED("%.0f, as %s", load[e], x->ref_label[REF_SINGLE]);
                REASON("from the same weights and tokens the first block's router chose other experts than the "
                       "single-rank run's: its top K, or the tokens each rank routes, are not the model's");
                return;
            }
    }
    MEASURED("every step: the ranks agree, K B T assignments a block, the rule's drops; step 1's first block as the "
             "reference");
    c->pass = 1;
}

// ---- layout.positions: each rank holds the tokens its layout gives it -----------------------
// A wrong zig-zag that still covers every position once (rank r taking chunks r and n + r)
// trains exactly as well: only the balance of the work is lost. So the grader reads each
// rank's positions from its step events and compares them with the layout's.
void check_positions(Ctx *x, GradeCheck *c) {
    const GradeRun *run = x->run;
    GptConfig m;
    if (!grade_model_or_say(run, &m, c)) return;
    int N = run->world, dp = grade_cfg_int(run, "dp", 1), kind = cp_layout_parse(grade_cfg_str(run, "layout", ""));
    CpLayout l;
    if (dp < 1 || N % dp || kind < 0 || cp_layout_init(&l, kind, m.seq, N / dp) != 0) {
        MEASURED("%d ranks in %d group(s), layout \"%s\", %d tokens", N, dp, grade_cfg_str(run, "layout", ""), m.seq);
        REASON("the config does not describe a context-parallel layout");
        return;
    }
    EXPECTED("%s over %d rank(s) a group: rank r holds %s", cp_layout_name(kind), N / dp,
             kind == CP_ZIGZAG ? "chunks r and 2n-1-r of 2n" : "chunk r of n");
    for (int r = 0; r < N; r++) {
        char want[64];
        cp_layout_ranges(&l, r % (N / dp), want, sizeof want);
        size_t ns;
        const JsonValue **s = grade_steps(run, r, &ns);
        for (size_t i = 0; i < ns; i++) {
            const char *got = ev_str(s[i], "positions");
            if (!strcmp(got, want)) continue;
            MEASURED("rank %d, step %.0f: positions %s", r, ev_num(s[i], "step"), got[0] ? got : "(none logged)");
            EXPECTED("%s (%s, context-parallel rank %d of %d)", want, cp_layout_name(kind), r % (N / dp), N / dp);
            REASON(kind == CP_ZIGZAG ? "the rank holds other chunks than the zig-zag's: with chunks r and 2n-1-r every "
                                       "rank does the same attention work; any other pair leaves it uneven"
                                     : "the rank holds another chunk than its own: rank r holds chunk r of n");
            return;
        }
    }
    MEASURED("every rank, every step: the layout's positions");
    c->pass = 1;
}

void check_comm(Ctx *x, GradeCheck *c) {
    const GradeRun *run = x->run;
    GptConfig m;
    if (!grade_model_or_say(run, &m, c)) return;
    if (run->world == 1) {
        MEASURED("a world of one: nothing to send");
        EXPECTED("0 bytes");
        c->pass = 1;
        return;
    }
    for (int64_t step = run->first_step; step <= run->last_step; step++) {
        int ok = !strcmp(run->lab, "ddp")  ? comm_ddp(x, c, step, (double)gpt_num_params(&m))
                 : !strcmp(run->lab, "tp") ? comm_tp(x, c, step, &m)
                 : !strcmp(run->lab, "cp") ? comm_cp(x, c, step, &m)
                 : !strcmp(run->lab, "ep") ? comm_ep(x, c, step, &m)
                                           : comm_sharded(x, c, step, &m);
        if (!ok) return;
    }
    c->pass = 1;
}
