// test_fsdp.c — the FSDP lab graded from its run logs, against single and against ZeRO-3.
//
// usage: test_fsdp OPTIMIZED_FSDP OPTIMIZED_ZERO OPTIMIZED_SINGLE SANITIZED_FSDP BROKEN_FSDP
//
// What is checked (Psi' and the units' padded sizes computed here from the model's shapes):
//   - the same training: at N = 2, 4, 8 the loss equals single's within 5e-5 (fp32) and
//     within 1e-2 with --mixed (bf16, as test_zero.c measures it), and
//     with or without --prefetch and --no-reshard, fp32 or --mixed, the losses and final
//     weights are BITWISE those of `zero --stage 3` at the same N: FSDP is ZeRO-3 by units;
//   - memory after every step: params e Psi'/N, grads e Psi'/N, optim k Psi'/N, comm 0;
//   - the most weight memory held at once (peak_by.params), exactly, from walking the
//     schedule here: shards plus the gathered units of the fullest moment: one unit (plus its
//     fp32 copy with bf16), two neighbours with --prefetch, every unit gathered so far with
//     --no-reshard. So --no-reshard raises it by e (Psi' - the largest unit);
//   - bytes per step per rank: 3 K (N-1)/N Psi' e, and 2 K (N-1)/N Psi' e with --no-reshard;
//   - the "DDP: X per rank" line (check mem.ddp_total) is the total the ddp lab's own table
//     prints at the same N and --accum (its bucket buffers and activations included), 2 Psi
//     less with --mixed (DDP in bf16);
//   - --prefetch: in every step, forward and backward, the next unit's all-gather is issued
//     (the span's issued_us) before the current unit computes, and without it only after;
//     the timeline shows the overlap: unit 1's gather running while unit 0 computes (in at
//     least one step: when it runs is the scheduler's; never without --prefetch);
//   - HSDP (--replicate R) on 4 and 6 ranks, fp32 and --mixed, with --accum 2: the loss and the
//     gradient norm (counted once, not once per replica) equal single's; a shard's R replicas
//     hash the same after every step; memory is FSDP's at S = N/R with units padded to S
//     shards of a multiple of R (2R in bf16); per step the shard group's collectives send
//     3 K (S-1)/S Psi' e and the sums across replicas 2 (R-1)/R Psi'/S e; --replicate 3 on 4
//     ranks exits 2 naming the values that divide;
//   - the graders catch an FSDP that skips one unit's reduce-scatter (BROKEN_FSDP,
//     tests/breaks/fsdp.c);
//   - bad input exits 2 with one line; the sanitized lab runs clean.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/runfiles/json.h"
#include "labtest.h"
#include "test.h"

static const char *fsdp, *zero, *single, *fsdp_san, *fsdp_broken;
static const int STEPS = 10;
static const double LOSS_TOL = 5e-5;  // test_ddp.c explains it: fp32 addition order only
#include "shardtest.h"

static RankLog reference;

static void run_reference(void) {
    char dir[512], steps[16];
    snprintf(dir, sizeof dir, "%s/single", tmp);
    snprintf(steps, sizeof steps, "%d", STEPS);
    char *argv[] = {(char *)single, "--steps", steps, "--run-dir", dir, NULL};
    EXPECT(run(argv, "single") == 0, "the single-rank reference run succeeds");
    read_rank(dir, 0, &reference);
}

// The most weight memory the schedule holds at once: the shards, plus at each unit's forward
// and backward the units gathered at that moment, plus the fp32 copy (bf16) of the running one.
static double schedule_peak_params(Layout lay, int N, int mixed, int prefetch, int reshard) {
    double e = mixed ? 2 : 4, w = mixed ? 4 : 0, worst = 0;
    int U = lay.units;
    for (int u = 0; u < U; u++) {
        // forward of u: u gathered, u+1 too with prefetch; without resharding, 0..u as well.
        double held = lay.unit[u] + (prefetch && u + 1 < U ? lay.unit[u + 1] : 0);
        if (!reshard)
            for (int v = 0; v < u; v++) held += lay.unit[v];
        worst = fmax(worst, e * held + w * lay.unit[u]);
        // backward of u (from the head down): u, u-1 with prefetch; without resharding every
        // unit below u is still held from the forward pass.
        held = lay.unit[u] + (prefetch && u > 0 ? lay.unit[u - 1] : 0);
        if (!reshard)
            for (int v = 0; v < u; v++) held += prefetch && v == u - 1 ? 0 : lay.unit[v];
        worst = fmax(worst, e * held + w * lay.unit[u]);
    }
    return e * lay.padded / N + worst;
}

static void grade(const Run *run, const char *what, int mixed, int prefetch, int reshard, int K, const Run *zero3) {
    Layout lay = layout(run->n, mixed ? 2 : 1, 64, 64, 2);
    double N = run->n, e = mixed ? 2 : 4, k = mixed ? 12 : 8;
    int mem_ok = 1, bytes_ok = 1, peak_ok = 1;
    double bytes = (reshard ? 3.0 : 2.0) * K * (N - 1) / N * lay.padded * e;
    double peak = schedule_peak_params(lay, run->n, mixed, prefetch, reshard);
    for (int r = 0; r < run->n; r++) {
        for (int s = 0; s < run->r[r].n; s++) {
            const RankLog *x = &run->r[r];
            mem_ok &= x->params[s] == e * lay.padded / N && x->grads[s] == e * lay.padded / N &&
                      x->optim[s] == k * lay.padded / N && x->comm[s] == 0;
            bytes_ok &= x->unit_bytes[s] == bytes;
        }
        peak_ok &= run->r[r].peak_params == peak;
    }
    EXPECT(mem_ok, "%s: memory after every step = params %g Psi'/N, grads %g Psi'/N, optim %g Psi'/N, comm 0 "
                   "(rank 0: %.0f %.0f %.0f)", what, e, e, k, run->r[0].params[0], run->r[0].grads[0], run->r[0].optim[0]);
    EXPECT(bytes_ok, "%s: every rank sends %.0f bytes per step (%d K (N-1)/N Psi' e; rank 0: %.0f)", what, bytes,
           reshard ? 3 : 2, run->r[0].unit_bytes[0]);
    EXPECT(peak_ok, "%s: the most weight memory held at once is the schedule's %.0f bytes (rank 0: %.0f)", what, peak,
           run->r[0].peak_params);
    if (zero3)
        EXPECT(same_losses(&run->r[0], &zero3->r[0]) && strcmp(run->final_hash, zero3->final_hash) == 0 &&
                   run->final_hash[0],
               "%s: losses and final weights bitwise equal to zero --stage 3 at N=%d", what, run->n);
}

static void check_variants(void) {
    static const struct {
        const char *name, *flags[3];
        int mixed, prefetch, reshard;
    } v[] = {
        {"plain", {NULL}, 0, 0, 1},
        {"prefetch", {"--prefetch", NULL}, 0, 1, 1},
        {"no-reshard", {"--no-reshard", NULL}, 0, 0, 0},
        {"prefetch+no-reshard", {"--prefetch", "--no-reshard", NULL}, 0, 1, 0},
        {"mixed", {"--mixed", NULL}, 1, 0, 1},
        {"mixed+prefetch", {"--mixed", "--prefetch", NULL}, 1, 1, 1},
        {"mixed+no-reshard", {"--mixed", "--no-reshard", NULL}, 1, 0, 0},
    };
    Run z3[2];
    char *fp32_args[] = {"--stage", "3", NULL}, *mixed_args[] = {"--stage", "3", "--mixed", NULL};
    run_lab(&z3[0], zero, "zero3", 4, fp32_args, NULL);
    run_lab(&z3[1], zero, "zero3-mixed", 4, mixed_args, NULL);
    ran_clean(&z3[0], "zero --stage 3 N=4 (the reference)");
    ran_clean(&z3[1], "zero --stage 3 --mixed N=4 (the reference)");
    Run plain, kept;
    memset(&plain, 0, sizeof plain);
    memset(&kept, 0, sizeof kept);
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char name[64], what[64];
        snprintf(name, sizeof name, "v-%s", v[i].name);
        snprintf(what, sizeof what, "FSDP %s N=4", v[i].name);
        Run run;
        run_lab(&run, fsdp, name, 4, (char *const *)v[i].flags, NULL);
        if (!ran_clean(&run, what)) continue;
        grade(&run, what, v[i].mixed, v[i].prefetch, v[i].reshard, 1, &z3[v[i].mixed]);
        if (i == 0) plain = run;
        if (i == 2) kept = run;
    }
    // --no-reshard holds every unit at the end of the forward pass; resharded, one unit at a
    // time (the largest, at worst). The difference is the rest of the model, e (Psi' - largest).
    Layout lay = layout(4, 1, 64, 64, 2);
    double raised = 4 * (lay.padded - lay.max_unit);
    EXPECT(kept.r[0].peak_params - plain.r[0].peak_params == raised,
           "--no-reshard raises the weight peak by the units it keeps gathered: %.0f bytes (got %.0f)", raised,
           kept.r[0].peak_params - plain.r[0].peak_params);
}

static void check_world_sizes(void) {
    char *none[] = {NULL};
    for (int N = 2; N <= 8; N *= 2) {
        char name[32], what[32];
        snprintf(name, sizeof name, "n%d", N);
        snprintf(what, sizeof what, "FSDP N=%d", N);
        Run run;
        run_lab(&run, fsdp, name, N, none, NULL);
        if (!ran_clean(&run, what)) continue;
        int at;
        double worst = worst_vs(&run.r[0], &reference, &at);
        EXPECT(worst <= LOSS_TOL, "%s: loss equals single's within %g at every step (worst %.2g at step %d)", what,
               LOSS_TOL, worst, at);
        grade(&run, what, 0, 0, 1, 1, NULL);
        double ddp = ddp_lab_total(fsdp, N, 1), psi = layout(N, 1, 64, 64, 2).psi;
        EXPECT(run.r[0].ddp_total == ddp, "%s: \"DDP: X per rank\" is the total of ddp's own table at N=%d, buckets "
                                          "and activations included: %.0f bytes (ddp: %.0f)", what, N, run.r[0].ddp_total, ddp);
        // --mixed at the same N: bf16 close to fp32 single, and the loss falls (10 steps inside
        // the learning rate's 100-step warmup: 5.55 to about 5.27).
        char *mixed[] = {"--mixed", NULL};
        snprintf(name, sizeof name, "n%d-mixed", N);
        snprintf(what, sizeof what, "FSDP --mixed N=%d", N);
        run_lab(&run, fsdp, name, N, mixed, NULL);
        if (!ran_clean(&run, what)) continue;
        worst = worst_vs(&run.r[0], &reference, &at);
        EXPECT(worst <= 1e-2 && run.r[0].loss[STEPS - 1] < run.r[0].loss[0] - 0.15,
               "%s: loss within 1e-2 of fp32 single (worst %.3g at step %d; test_zero.c says why) and falling", what,
               worst, at);
        grade(&run, what, 1, 0, 1, 1, NULL);
        double want = ddp - 2 * psi - mixed_acts_saving(N, 1);
        EXPECT(run.r[0].ddp_total == want, "%s: DDP's total in bf16, 2 Psi less than fp32's (2 bytes instead of 4 for "
                                           "weights, gradients and buckets, 12 instead of 8 of optimizer state), and "
                                           "less its activations kept in bf16: %.0f bytes (expected %.0f)", what,
               run.r[0].ddp_total, want);
    }
    char *accum[] = {"--accum", "2", "--prefetch", NULL};
    Run run;
    run_lab(&run, fsdp, "accum", 2, accum, NULL);
    if (ran_clean(&run, "FSDP --accum 2 --prefetch N=2")) {
        grade(&run, "FSDP --accum 2 --prefetch N=2", 0, 1, 1, 2, NULL);
        double ddp = ddp_lab_total(fsdp, 2, 2);
        EXPECT(run.r[0].ddp_total == ddp, "FSDP --accum 2 N=2: \"DDP: X per rank\" is what ddp --accum 2 totals (its "
                                          "micro-batch of 2 sequences): %.0f bytes (ddp: %.0f)", run.r[0].ddp_total, ddp);
    }
    char *pad[] = {"--batch", "6", "--mixed", NULL};
    run_lab(&run, fsdp, "pad", 3, pad, NULL);
    if (ran_clean(&run, "FSDP --mixed N=3 (padded)")) grade(&run, "FSDP --mixed N=3 (padded)", 1, 0, 1, 1, NULL);
}

// HSDP: R replicas x S shards.
static void check_hsdp(void) {
    static const struct {
        int N, R, mixed, K;
        const char *batch;
    } cases[] = {{4, 2, 0, 1, "8"}, {4, 4, 0, 1, "8"}, {6, 3, 0, 1, "6"}, {4, 2, 0, 2, "8"}, {6, 2, 1, 1, "6"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int N = cases[i].N, R = cases[i].R, S = N / R, mixed = cases[i].mixed, K = cases[i].K;
        char name[32], what[96], rep[8], accum[8];
        snprintf(name, sizeof name, "hsdp%zu", i);
        snprintf(what, sizeof what, "HSDP %d x %d (N=%d%s%s)", R, S, N, mixed ? ", --mixed" : "", K > 1 ? ", --accum 2" : "");
        snprintf(rep, sizeof rep, "%d", R);
        snprintf(accum, sizeof accum, "%d", K);
        char *args[] = {"--replicate", rep, "--batch", (char *)cases[i].batch, "--accum", accum, mixed ? "--mixed" : NULL, NULL};
        Run hs;
        run_lab(&hs, fsdp, name, N, args, NULL);
        if (!ran_clean(&hs, what)) continue;
        // The reference: single on the same global batch (the default's, or --batch 6).
        RankLog ref = reference;
        if (strcmp(cases[i].batch, "8") != 0) {
            char dir[512], steps[16];
            snprintf(dir, sizeof dir, "%s/single-b%s-%zu", tmp, cases[i].batch, i);  // a run directory is written once
            snprintf(steps, sizeof steps, "%d", STEPS);
            char *argv[] = {(char *)single, "--steps", steps, "--batch", (char *)cases[i].batch, "--run-dir", dir, NULL};
            EXPECT(run(argv, "single-b6") == 0, "the single-rank reference on --batch %s runs", cases[i].batch);
            read_rank(dir, 0, &ref);
        }
        int at;
        double worst = worst_vs(&hs.r[0], &ref, &at), norm = 0;
        for (int s = 0; s < hs.r[0].n && s < ref.n; s++)
            norm = fmax(norm, fabs(hs.r[0].grad_norm[s] - ref.grad_norm[s]) / ref.grad_norm[s]);
        double tol = mixed ? 1e-2 : 1e-5, norm_tol = mixed ? 5e-2 : 1e-4;  // (fp32: every step within 1e-5 of single)
        EXPECT(worst <= tol && norm <= norm_tol, "%s: loss equals single's within %g (worst %.2g at step %d), the gradient "
               "norm within %g relative (worst %.2g): counted once, not once per replica", what, tol, worst, at,
               norm_tol, norm);
        Layout lay = layout(S, (mixed ? 2 : 1) * R, 64, 64, 2);
        double e = mixed ? 2 : 4, k = mixed ? 12 : 8;
        double bytes = 3.0 * K * (S - 1) / S * lay.padded * e, across = 2.0 * (R - 1) / R * lay.padded / S * e;
        int mem_ok = 1, bytes_ok = 1, same = 1;
        for (int r = 0; r < N; r++) {
            const RankLog *x = &hs.r[r];
            for (int s = 0; s < x->n; s++) {
                mem_ok &= x->params[s] == e * lay.padded / S && x->grads[s] == e * lay.padded / S &&
                          x->optim[s] == k * lay.padded / S && x->comm[s] == 0;
                bytes_ok &= x->unit_bytes[s] == bytes && x->replica_bytes[s] == across;
                same &= strcmp(x->hash[s], hs.r[r % S].hash[s]) == 0;  // replica 0's rank of the same shard
            }
        }
        EXPECT(mem_ok, "%s: memory after every step = params %g Psi'/S, grads %g Psi'/S, optim %g Psi'/S, comm 0, "
               "Psi' = %.0f (rank 0: %.0f %.0f %.0f)", what, e, e, k, lay.padded, hs.r[0].params[0], hs.r[0].grads[0],
               hs.r[0].optim[0]);
        EXPECT(bytes_ok, "%s: every rank sends %.0f bytes in its shard group (3 K (S-1)/S Psi' e) and %.0f across the "
               "replicas (2 (R-1)/R Psi'/S e) per step (rank 0: %.0f, %.0f)", what, bytes, across,
               hs.r[0].unit_bytes[0], hs.r[0].replica_bytes[0]);
        EXPECT(same, "%s: the R ranks that hold a shard hold the same bits after every step", what);
    }
    char *bad[] = {"--replicate", "3", NULL};
    exits_2_with_one_line(fsdp, 4, bad, "--replicate 3 over 4 ranks", "bad-replicate");
}

// What one rank's spans say about the order of gathers and compute, step by step. Each unit
// is gathered twice a step (forward, then backward: the default reshards after forward), so
// a unit's gathers in order of issue are the forward's and the backward's.
#define MAX_UNITS 8
typedef struct {
    int steps, units;
    int issued_ahead;   // steps in which EVERY next unit's gather was issued before the current unit computed
    int issued_after;   // steps in which every next unit's gather was issued only after the current unit computed
    int ran_during;     // steps in which unit 1's gather was running while unit 0's forward computed
} Order;

static Order gather_order(const char *dir) {
    Events ev;
    load_rank_events(dir, 0, &ev);
    double span[MAX_STEPS][2][MAX_UNITS][2] = {{{{0}}}};  // [step][fwd 0, bwd 1][unit][t0, t1]
    double issued[MAX_STEPS][MAX_UNITS][2], ran[MAX_STEPS][MAX_UNITS][2];  // per gather of the unit: issued, t0
    int gathers[MAX_STEPS][MAX_UNITS] = {{0}};
    Order o = {0};
    for (int i = 0; i < ev.n; i++) {
        const JsonValue *e = ev.lines[i];
        if (strcmp(kind(e), "span") != 0) continue;
        int s = numi(e, "step") - 1, u = numi(e, "layer");
        if (s < 0 || s >= MAX_STEPS || u < 0 || u >= MAX_UNITS) continue;
        if (u + 1 > o.units) o.units = u + 1;
        const char *name = json_get(e, "name")->string;
        int pass = strcmp(name, "fwd") == 0 ? 0 : strcmp(name, "bwd") == 0 ? 1 : -1;
        if (pass >= 0) {
            span[s][pass][u][0] = num(e, "t0_us");
            span[s][pass][u][1] = num(e, "t1_us");
        } else if (strcmp(name, "all_gather") == 0 && gathers[s][u] < 2) {
            const JsonValue *at = json_get(e, "issued_us");
            issued[s][u][gathers[s][u]] = at ? at->number : -1;
            ran[s][u][gathers[s][u]++] = num(e, "t0_us");
        }
    }
    free_events(&ev);
    for (int s = 0; s < MAX_STEPS; s++) {
        if (span[s][0][0][1] == 0) continue;
        o.steps++;
        // The records of one step drain in the order they ran, which is the order of issue.
        for (int u = 0; u < o.units; u++)
            if (gathers[s][u] == 2 && issued[s][u][1] < issued[s][u][0]) {
                double t = issued[s][u][0];
                issued[s][u][0] = issued[s][u][1], issued[s][u][1] = t;
                t = ran[s][u][0], ran[s][u][0] = ran[s][u][1], ran[s][u][1] = t;
            }
        int ahead = 1, after = 1;
        for (int u = 0; u + 1 < o.units; u++) {
            if (gathers[s][u + 1] < 2 || gathers[s][u] < 2 || issued[s][u + 1][0] < 0) {
                ahead = after = 0;
                continue;
            }
            // forward, unit u computing: unit u+1's forward gather
            ahead &= issued[s][u + 1][0] < span[s][0][u][0];
            after &= issued[s][u + 1][0] >= span[s][0][u][1];
            // backward, unit u+1 computing: unit u's backward gather
            ahead &= issued[s][u][1] < span[s][1][u + 1][0];
            after &= issued[s][u][1] >= span[s][1][u + 1][1];
        }
        o.issued_ahead += ahead;
        o.issued_after += after;
        o.ran_during += gathers[s][1] > 0 && ran[s][1][0] < span[s][0][0][1];
    }
    return o;
}

static void check_overlap(void) {
    char *pre[] = {"--prefetch", NULL}, *none[] = {NULL};
    Run a, b;
    run_lab(&a, fsdp, "ov-prefetch", 2, pre, NULL);
    run_lab(&b, fsdp, "ov-plain", 2, none, NULL);
    Order p = gather_order(a.dir), q = gather_order(b.dir);
    int U = layout(2, 1, 64, 64, 2).units;
    // The order of issue is the program's, so it is asked for in every step.
    EXPECT(p.steps == STEPS && p.units == U && p.issued_ahead == STEPS,
           "--prefetch: every next unit's all-gather is issued before the current unit computes, forward and "
           "backward (%d of %d steps, %d units)", p.issued_ahead, p.steps, p.units);
    EXPECT(q.steps == STEPS && q.units == U && q.issued_after == STEPS,
           "without --prefetch: each unit's all-gather is issued only after the previous unit computed (%d of %d "
           "steps)", q.issued_after, q.steps);
    // When it runs is the machine's: on 2 shared cores the communication thread may not get a
    // core while both ranks compute, so the timeline's overlap is asked for in one step.
    EXPECT(p.ran_during >= 1, "--prefetch: unit 1's all-gather ran while unit 0's forward computed (in %d of %d steps)",
           p.ran_during, p.steps);
    EXPECT(q.ran_during == 0, "without --prefetch it never does (%d of %d steps)", q.ran_during, q.steps);
}

static void check_broken_is_caught(void) {
    char *args[] = {NULL};
    Run run, ok;
    run_lab(&run, fsdp_broken, "broken", 2, args, NULL);
    run_lab(&ok, fsdp, "unbroken", 2, args, NULL);
    EXPECT(run.status == 0 && run.r[0].n == STEPS, "the deliberately broken lab runs to the end");
    int at;
    double worst = worst_vs(&run.r[0], &reference, &at);
    EXPECT(worst > LOSS_TOL, "broken FSDP: the loss check catches it (off by %.2g at step %d)", worst, at);
    EXPECT(run.r[0].unit_bytes[0] != ok.r[0].unit_bytes[0],
           "broken FSDP: the byte count catches it (%.0f bytes instead of %.0f)", run.r[0].unit_bytes[0],
           ok.r[0].unit_bytes[0]);
}

static void check_bad_input(void) {
    struct {
        char *args[6];
        const char *what;
    } cases[] = {
        {{"--batch", "5", NULL}, "batch 5 over 2 ranks"},
        {{"--prefetch=yes", NULL}, "--prefetch=yes"},
        {{"--stage", "3", NULL}, "--stage (a zero option)"},
        {{"--accum", "3", NULL}, "accum 3 over 4 sequences per rank"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char tag[32];
        snprintf(tag, sizeof tag, "bad%zu", i);
        exits_2_with_one_line(fsdp, 2, cases[i].args, cases[i].what, tag);
    }
}

static void check_sanitized(void) {
    char *args[] = {"--mixed", "--prefetch", "--accum", "2", "--batch", "6", "--steps", "2", NULL};
    char dir[512];
    snprintf(dir, sizeof dir, "%s/san", tmp);
    int status = run_ranks(fsdp_san, 3, "san", dir, args, NULL);
    EXPECT(status == 0, "the sanitized lab (--mixed --prefetch --accum 2, N=3) exits 0 (status %d)", status);
    char *kept[] = {"--no-reshard", "--steps", "2", NULL};
    snprintf(dir, sizeof dir, "%s/san2", tmp);
    status = run_ranks(fsdp_san, 2, "san2", dir, kept, NULL);
    EXPECT(status == 0, "the sanitized lab (--no-reshard, N=2) exits 0 (status %d)", status);
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: test_fsdp OPTIMIZED_FSDP OPTIMIZED_ZERO OPTIMIZED_SINGLE SANITIZED_FSDP BROKEN_FSDP\n");
        return 2;
    }
    fsdp = argv[1], zero = argv[2], single = argv[3], fsdp_san = argv[4], fsdp_broken = argv[5];
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-fsdp-XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    run_reference();
    check_variants();
    check_world_sizes();
    check_overlap();
    check_hsdp();
    check_broken_is_caught();
    check_bad_input();
    check_sanitized();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (test_failed == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return test_done();
}
