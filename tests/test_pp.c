// test_pp.c — the pipeline-parallel lab graded from its run logs, against single.
//
// usage: test_pp OPTIMIZED_PP OPTIMIZED_SINGLE SANITIZED_PP BROKEN_PP
//
// What is checked (a model of 8 blocks, C = 32, global batch 16; the formulas are computed
// here from the model's shapes and the schedules' definitions, not read from the lab):
//   - the same training: without --dp, every schedule at p = 2, 4, 8 (interleaved with v = 2
//     at p = 2, 4) gives losses within 1e-9 of `single --accum m` and final weights BITWISE
//     equal to its (the same micro-batches, the same gradient accumulation order, the same
//     layer-by-layer norm). The loss differs only by its trip through the ranks' float-pair
//     sum (48 bits of mantissa), hence 1e-9 rather than 0. With --dp D (p x D = 4 and 8) the
//     loss is within 5e-5 (the DP all-reduce adds in another order, as test_ddp.c states)
//     and the D replicas of each stage are bitwise equal after every step;
//   - the bubble: the fwd/bwd spans of every rank, replayed with forward cost 1 and backward
//     cost 2, give (p-1)/(m+p-1) for GPipe and 1F1B and (p-1)/(v m+p-1) interleaved, and the
//     lab's own "logical" figure agrees;
//   - activations in flight, from the span order (a micro-batch's chunk is held from the
//     start of its forward to the end of its backward): GPipe m on every stage, 1F1B
//     min(p-s, m) on stage s (so at most p-s), interleaved 2(p-s-1)+(v-1)p+1; and peak_by.acts
//     is exactly the workspace plus the most bytes those held chunks take, each chunk's bytes
//     computed here from its layers (C + blocks (16C + 4 + NH, or NH T with --attn naive) (+ C + 2 + V with the head)
//     floats per token);
//   - memory: params 4 Psi_s, grads 4 Psi_s, optim 8 Psi_s for each stage's layers;
//   - deadlock-freedom: every schedule at every (p, m), 1 <= p <= 8, 1 <= m <= 16 that the lab
//     accepts finishes a step (the deadline is SHARDLAB_TIMEOUT_S=20: a hang fails there);
//     interleaved is refused (exit 2) exactly when m is not a multiple of p;
//   - the timeline: rank 0 prints one row per stage and the bubble line;
//   - the graders catch a lab that drops micro-batch 0's gradient between stages (BROKEN_PP,
//     tests/breaks/pp.c);
//   - bad input exits 2 with one line; the sanitized lab runs clean.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/runfiles/json.h"
#include "labtest.h"
#include "test.h"

static const char *pp, *single, *pp_san, *pp_broken;
static const int STEPS = 6;
#include "shardtest.h"

// The model of every run here, as command-line options and as numbers.
// The attention (--attn): flash, the default, for the suite; naive for one schedule at the end.
static const char *attn = "flash";
#define MODEL "--layers", "8", "--dim", "32", "--heads", "4", "--seq", "16", "--batch", "16", "--attn", (char *)attn
enum { L = 8, C = 32, NH = 4, T = 16, V = 256, BATCH = 16 };

static double layer_floats(int l) {
    if (l == 0) return (double)V * C + (double)T * C;
    if (l <= L) return 12.0 * C * C + 13.0 * C;
    return 2.0 * C + (double)V * C;
}

// One micro-batch's activations of a chunk holding layers lo..hi, in bytes.
static double chunk_act_bytes(int lo, int hi, int micro) {
    int first_block = lo > 1 ? lo : 1, last_block = hi < L ? hi : L;
    int blocks = last_block - first_block + 1;
    double att = strcmp(attn, "flash") ? (double)NH * T : NH;  // attention probabilities, or log-sum-exps
    double per_token = C + (blocks > 0 ? blocks : 0) * (16.0 * C + 4 + att) + (hi == L + 1 ? C + 2.0 + V : 0);
    return 4.0 * micro * T * per_token;
}

// ---------------------------------------------------------------------------------------
// Reading a run: the fwd/bwd spans of step 1 on every rank, and the chunk layout
// ---------------------------------------------------------------------------------------

typedef struct {
    int bwd, mb, k;
} Op;

typedef struct {
    int p, m, v, K, dp;
    int first[64], last[64];
    Op ops[8][512];   // step 1's operations per stage (pipeline 0), in the order they ran
    int nops[8];
    double peak_acts[8], workspace[8], held_max[8];  // step 1
    double logical;   // the lab's own figure
    int timeline_rows, bubble_line;
} PipeRun;

static void read_pipe(const char *dir, int n, int dp, PipeRun *pr) {
    memset(pr, 0, sizeof *pr);
    pr->dp = dp;
    pr->p = n / dp;
    JsonValue *meta = load_json_file(dir, "meta.json");
    const JsonValue *cfg = meta ? json_get(meta, "config") : NULL;
    if (cfg) {
        pr->m = numi(cfg, "micro"), pr->v = numi(cfg, "chunks");
        const JsonValue *cl = json_get(cfg, "chunk_layers");
        pr->K = cl ? (int)cl->count : 0;
        for (int k = 0; k < pr->K && k < 64; k++) {
            pr->first[k] = (int)json_at(json_at(cl, (size_t)k), 0)->number;
            pr->last[k] = (int)json_at(json_at(cl, (size_t)k), 1)->number;
        }
    }
    json_free(meta);
    for (int s = 0; s < pr->p; s++) {
        Events ev;
        load_rank_events(dir, s * dp, &ev);  // stage s of pipeline 0
        for (int i = 0; i < ev.n; i++) {
            const JsonValue *e = ev.lines[i];
            const char *k = kind(e);
            if (strcmp(k, "span") == 0 && num(e, "step") == 1) {
                const char *name = json_get(e, "name")->string;
                int bwd = strcmp(name, "bwd") == 0;
                if ((bwd || strcmp(name, "fwd") == 0) && pr->nops[s] < 512)
                    pr->ops[s][pr->nops[s]++] = (Op){bwd, numi(e, "mb"), numi(e, "chunk")};
            } else if (strcmp(k, "step") == 0 && num(e, "step") == 1) {
                pr->peak_acts[s] = num(json_get(e, "peak_by"), "acts");
                pr->workspace[s] = num(e, "workspace");
                pr->held_max[s] = num(e, "acts_held_max");
                pr->logical = num(json_get(e, "bubble"), "logical");
            }
        }
        free_events(&ev);
    }
    char path[600];
    snprintf(path, sizeof path, "%s/rank-0.log", dir);
    char *log = read_file(path, NULL);
    if (log) {
        for (const char *q = log; (q = strstr(q, "  stage ")); q++) pr->timeline_rows += strstr(q, " |") != NULL;
        pr->bubble_line = strstr(log, "bubble: formula") != NULL;
    }
    free(log);
}

// The spans replayed with forward cost 1 and backward cost 2 and free messages: the bubble
// fraction 1 - (busy time) / (p x makespan), or -1 if the order cannot run.
static double replay_bubble(const PipeRun *pr) {
    int p = pr->p, m = pr->m, K = pr->K;
    static int done[2][64][64];
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < 64; i++)
            for (int k = 0; k < 64; k++) done[b][i][k] = -1;
    int pos[8] = {0}, free_at[8] = {0}, makespan = 0, busy = 0;
    for (int progress = 1; progress;) {
        progress = 0;
        for (int s = 0; s < p; s++)
            while (pos[s] < pr->nops[s]) {
                Op o = pr->ops[s][pos[s]];
                if (o.mb < 0 || o.mb >= m || o.k < 0 || o.k >= K) return -1;
                int ready = !o.bwd ? (o.k == 0 ? 0 : done[0][o.mb][o.k - 1])
                                   : (o.k == K - 1 ? done[0][o.mb][o.k] : done[1][o.mb][o.k + 1]);
                if (ready < 0) break;
                int t0 = free_at[s] > ready ? free_at[s] : ready, cost = o.bwd ? 2 : 1;
                free_at[s] = done[o.bwd][o.mb][o.k] = t0 + cost;
                busy += cost;
                if (free_at[s] > makespan) makespan = free_at[s];
                pos[s]++, progress = 1;
            }
    }
    for (int s = 0; s < p; s++)
        if (pos[s] < pr->nops[s] || pr->nops[s] != 2 * m * pr->v) return -1;
    return 1.0 - (double)busy / ((double)p * makespan);
}

// The most (micro-batch, chunk) activations stage s held at once, and their bytes.
static int held_from_spans(const PipeRun *pr, int s, int micro, double *bytes_max) {
    int held = 0, most = 0;
    double bytes = 0;
    *bytes_max = 0;
    for (int i = 0; i < pr->nops[s]; i++) {
        Op o = pr->ops[s][i];
        double b = chunk_act_bytes(pr->first[o.k], pr->last[o.k], micro);
        if (!o.bwd) held++, bytes += b;  // from the start of its forward
        if (held > most) most = held;
        if (bytes > *bytes_max) *bytes_max = bytes;
        if (o.bwd) held--, bytes -= b;  // to the end of its backward
    }
    return most;
}

static int expected_held(const PipeRun *pr, const char *sched, int s) {
    int p = pr->p, m = pr->m, v = pr->v;
    if (strcmp(sched, "gpipe") == 0) return m;
    if (strcmp(sched, "1f1b") == 0) return p - s < m ? p - s : m;
    int w = m == p ? m * v : 2 * (p - s - 1) + (v - 1) * p + 1;
    return w < m * v ? w : m * v;
}

// ---------------------------------------------------------------------------------------
// The checks
// ---------------------------------------------------------------------------------------

static Run ref8, ref4, ref2;  // single --accum 8, 4, 2

static void run_single(Run *run, const char *name, const char *accum) {
    char *args[] = {MODEL, "--accum", (char *)accum, NULL};
    run_lab(run, single, name, 1, args, NULL);
    EXPECT(run->status == 0 && run->r[0].n == STEPS, "single --accum %s: %d steps (status %d)", accum, run->r[0].n,
           run->status);
}

static void grade_schedule(const char *sched, int n, int m, int v) {
    char ms[8], vs[8], name[64], what[96];
    snprintf(ms, sizeof ms, "%d", m);
    snprintf(vs, sizeof vs, "%d", v);
    snprintf(name, sizeof name, "%s-p%d-m%d-v%d", sched, n, m, v);
    snprintf(what, sizeof what, "%s p=%d m=%d%s%s", sched, n, m, v > 1 ? " v=" : "", v > 1 ? vs : "");
    char *with_chunks[] = {MODEL, "--schedule", (char *)sched, "--micro", ms, "--chunks", vs, NULL};
    char *plain[] = {MODEL, "--schedule", (char *)sched, "--micro", ms, NULL};
    Run run;
    run_lab(&run, pp, name, n, v > 1 ? with_chunks : plain, NULL);
    if (!ran_clean(&run, what)) return;
    Run *ref = m == 8 ? &ref8 : m == 4 ? &ref4 : &ref2;
    int at;
    double worst = worst_vs(&run.r[0], &ref->r[0], &at);
    EXPECT(worst <= 1e-9, "%s: loss within 1e-9 of single --accum %d at every step (worst %.3g at step %d)", what, m,
           worst, at);
    EXPECT(strcmp(run.final_hash, ref->final_hash) == 0, "%s: final weights bitwise those of single --accum %d (%s vs %s)",
           what, m, run.final_hash, ref->final_hash);
    // (6 steps inside the learning rate's 100-step warmup: 5.549 to 5.479.)
    EXPECT(run.r[0].loss[STEPS - 1] < run.r[0].loss[0] - 0.03, "%s: the loss falls (%.4f -> %.4f)", what, run.r[0].loss[0],
           run.r[0].loss[STEPS - 1]);

    PipeRun pr;
    read_pipe(run.dir, n, 1, &pr);
    double formula = (double)(pr.p - 1) / (v * m + pr.p - 1), replay = replay_bubble(&pr);
    EXPECT(fabs(replay - formula) < 1e-12 && fabs(pr.logical - formula) < 1e-5,
           "%s: the spans' order with costs 1 and 2 gives the bubble %.4f = (p-1)/(%sm+p-1) = %.4f (lab: %.4f)", what,
           replay, v > 1 ? "v " : "", formula, pr.logical);
    int micro = BATCH / m, held_ok = 1, peak_ok = 1;
    char detail[200] = "";
    for (int s = 0; s < pr.p; s++) {
        double bytes;
        int held = held_from_spans(&pr, s, micro, &bytes), want = expected_held(&pr, sched, s);
        if (held != want && held_ok) {
            snprintf(detail, sizeof detail, "stage %d holds %d, the schedule %d", s, held, want);
            held_ok = 0;
        }
        if ((pr.peak_acts[s] != pr.workspace[s] + bytes || pr.held_max[s] != bytes) && peak_ok) {
            snprintf(detail + strlen(detail), sizeof detail - strlen(detail),
                     " stage %d: peak_by.acts %.0f, workspace %.0f + held %.0f (lab says held %.0f)", s,
                     pr.peak_acts[s], pr.workspace[s], bytes, pr.held_max[s]);
            peak_ok = 0;
        }
    }
    EXPECT(held_ok, "%s: micro-batches in flight from the span order = the schedule's (%s on stage 0: %d) %s", what,
           strcmp(sched, "gpipe") == 0 ? "m" : strcmp(sched, "1f1b") == 0 ? "min(p-s, m)" : "2(p-s-1)+(v-1)p+1",
           expected_held(&pr, sched, 0), detail);
    EXPECT(peak_ok, "%s: peak activation memory = workspace + the held chunks' bytes from the shapes %s", what, detail);
    // Memory of the weights: each stage's layers.
    int mem_ok = 1;
    for (int s = 0; s < pr.p; s++) {
        double psi_s = 0;
        for (int k = s; k < pr.K; k += pr.p)
            for (int l = pr.first[k]; l <= pr.last[k]; l++) psi_s += layer_floats(l);
        const RankLog *r = &run.r[s];
        mem_ok &= r->params[0] == 4 * psi_s && r->grads[0] == 4 * psi_s && r->optim[0] == 8 * psi_s;
    }
    EXPECT(mem_ok, "%s: params 4 Psi_s, grads 4 Psi_s, optim 8 Psi_s on every stage (stage 0: %.0f %.0f %.0f)", what,
           run.r[0].params[0], run.r[0].grads[0], run.r[0].optim[0]);
    EXPECT(pr.timeline_rows == pr.p && pr.bubble_line, "%s: rank 0 prints the timeline (%d rows for %d stages) and "
           "the bubble line", what, pr.timeline_rows, pr.p);
}

static void check_with_dp(int n, int dp, int m) {
    char ds[8], ms[8], name[64], what[64];
    snprintf(ds, sizeof ds, "%d", dp);
    snprintf(ms, sizeof ms, "%d", m);
    snprintf(name, sizeof name, "dp-n%d-d%d", n, dp);
    snprintf(what, sizeof what, "1f1b p=%d x dp=%d m=%d", n / dp, dp, m);
    char *args[] = {MODEL, "--dp", ds, "--micro", ms, NULL};
    Run run;
    run_lab(&run, pp, name, n, args, NULL);
    if (!ran_clean(&run, what)) return;
    int at;
    double worst = worst_vs(&run.r[0], &ref8.r[0], &at);  // dp x m = 8 micro-batches of 2
    EXPECT(worst <= 5e-5, "%s: loss within 5e-5 of single --accum 8 (worst %.3g at step %d)", what, worst, at);
    int same = 1;
    for (int s = 0; s < n / dp; s++)
        for (int d = 1; d < dp; d++)
            for (int t = 0; t < STEPS; t++) same &= strcmp(run.r[s * dp + d].hash[t], run.r[s * dp].hash[t]) == 0;
    EXPECT(same, "%s: the %d replicas of every stage hold bitwise equal weights after every step", what, dp);
}

// Every (schedule, p, m) finishes, or is refused with exit 2 exactly where it must be.
static void check_no_deadlock(void) {
    const char *scheds[] = {"gpipe", "1f1b", "interleaved"};
    int ran = 0, finished = 0, refused_ok = 1;
    char bad[300] = "";
    for (int si = 0; si < 3; si++)
        for (int p = 1; p <= 8; p++)
            for (int m = 1; m <= 16; m++) {
                int accepts = si < 2 || m % p == 0;
                char ms[16], name[64], bs[16];
                snprintf(ms, sizeof ms, "%d", m);
                snprintf(bs, sizeof bs, "%d", m);
                snprintf(name, sizeof name, "sweep-%s-%d-%d", scheds[si], p, m);
                char *args[] = {"--steps", "1", "--layers", "16", "--dim", "16", "--heads", "2", "--seq", "8", "--batch",
                                bs, "--micro", ms, "--schedule", (char *)scheds[si], NULL};
                char dir[512];
                snprintf(dir, sizeof dir, "%s/%s", tmp, name);
                int status = run_ranks(pp, p, name, dir, args, "SHARDLAB_TIMEOUT_S=20");
                if (accepts) {
                    ran++;
                    finished += status == 0;
                    if (status != 0 && !bad[0])
                        snprintf(bad, sizeof bad, "%s p=%d m=%d exited %d", scheds[si], p, m, status);
                } else if (status != 2) {
                    refused_ok = 0;
                    if (!bad[0]) snprintf(bad, sizeof bad, "%s p=%d m=%d: exit %d, not 2", scheds[si], p, m, status);
                }
            }
    EXPECT(finished == ran && ran == 2 * 8 * 16 + 42,
           "every schedule at every accepted (p, m), 1<=p<=8, 1<=m<=16, finishes a step (%d of %d) %s", finished, ran, bad);
    EXPECT(refused_ok, "interleaved with m not a multiple of p exits 2 %s", bad);
}

static void check_broken_is_caught(void) {
    char *args[] = {MODEL, "--micro", "4", NULL};
    Run run;
    run_lab(&run, pp_broken, "broken", 2, args, NULL);
    int at;
    double worst = worst_vs(&run.r[0], &ref4.r[0], &at);
    EXPECT(run.status == 0 && (strcmp(run.final_hash, ref4.final_hash) != 0 || worst > 1e-9),
           "the graders catch a pipeline that drops micro-batch 0's gradient between stages (status %d; hash %s vs "
           "%s, loss %.3g off)", run.status, run.final_hash, ref4.final_hash, worst);
}

static void check_bad_input(void) {
    char *dp[] = {"--dp", "2", NULL};
    exits_2_with_one_line(pp, 3, dp, "--dp 2 on 3 ranks", "bad-dp");
    char *deep[] = {"--layers", "2", NULL};
    exits_2_with_one_line(pp, 4, deep, "4 stages, 2 blocks", "bad-deep");
    char *few[] = {"--layers", "8", "--schedule", "interleaved", "--micro", "2", NULL};
    exits_2_with_one_line(pp, 4, few, "interleaved with m=2 < p=4", "bad-few");
    char *split[] = {"--layers", "4", "--split", "1,2", NULL};
    exits_2_with_one_line(pp, 2, split, "--split 1,2 for 4 blocks", "bad-split");
    char *chunks[] = {"--chunks", "2", NULL};
    exits_2_with_one_line(pp, 2, chunks, "--chunks with 1f1b", "bad-chunks");
    char *many[] = {"--layers", "200", "--schedule", "interleaved", "--chunks", "40", "--micro", "2", NULL};
    exits_2_with_one_line(pp, 2, many, "2 stages x 40 chunks: more chunks than the lab holds", "bad-many");
    char *accum[] = {"--accum", "2", NULL};
    exits_2_with_one_line(pp, 2, accum, "--accum instead of --micro", "bad-accum");
    char *sched[] = {"--schedule", "zigzag", NULL};
    exits_2_with_one_line(pp, 2, sched, "--schedule zigzag", "bad-sched");
}

static void check_sanitized(void) {
    char *args[] = {"--steps", "2", MODEL, "--schedule", "interleaved", "--micro", "4", NULL};
    char dir[512];
    snprintf(dir, sizeof dir, "%s/san", tmp);
    int status = run_ranks(pp_san, 2, "san", dir, args, NULL);
    EXPECT(status == 0, "the sanitized lab (interleaved, p=2, m=4) exits 0 (status %d)", status);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: test_pp OPTIMIZED_PP OPTIMIZED_SINGLE SANITIZED_PP BROKEN_PP\n");
        return 2;
    }
    pp = argv[1], single = argv[2], pp_san = argv[3], pp_broken = argv[4];
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-pp-XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    run_single(&ref8, "single8", "8");
    run_single(&ref4, "single4", "4");
    run_single(&ref2, "single2", "2");
    grade_schedule("gpipe", 2, 4, 1);
    grade_schedule("gpipe", 4, 8, 1);
    grade_schedule("1f1b", 2, 8, 1);
    grade_schedule("1f1b", 4, 8, 1);
    grade_schedule("1f1b", 8, 2, 1);
    grade_schedule("gpipe", 8, 8, 1);
    grade_schedule("interleaved", 2, 4, 2);
    grade_schedule("interleaved", 4, 8, 2);
    check_with_dp(4, 2, 4);
    check_with_dp(8, 2, 4);
    check_with_dp(8, 4, 2);
    // Naive attention: one schedule against single --attn naive, the same checks. Then
    // single's flash run is ref4 again: the broken run below (flash) is held to it.
    Run flash4 = ref4;
    attn = "naive";
    run_single(&ref4, "single4-naive", "4");
    grade_schedule("1f1b", 2, 4, 1);
    attn = "flash";
    ref4 = flash4;
    check_broken_is_caught();
    check_bad_input();
    check_sanitized();
    check_no_deadlock();
    // A passing run leaves nothing behind; a failing one keeps its run directories to read.
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (test_failed == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    if (test_failed) printf("# kept %s\n", tmp);
    return test_done();
}
