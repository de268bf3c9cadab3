// test_shard.c — the data-sharding lab graded from its run logs and its per-epoch index lists.
//
// usage: test_shard OPTIMIZED_SHARD OPTIMIZED_SINGLE SANITIZED_SHARD BROKEN_SHARD
//
// The runs: a GPT of 1 block (C = 16, T = 12, so an item is T+1 = 13 bytes), global batch
// B = 6, and D = 40 items (--items 40): an epoch has floor(40/6) = 6 steps and drop_last
// leaves D mod B = 4 items out of each, so the rule is exercised. 14 steps cover two whole
// epochs and the start of a third. A part is P = (B/N)(T+1) = 39 bytes at N = 2 and 26 at
// N = 3: neither is a multiple of 4, so dispatch's padding to 4-byte words is exercised too.
// The formulas below are computed here from the configuration, not read from the lab.
//
// What is checked:
//   - the epoch lists: within each whole epoch, the ranks' positions are disjoint and their
//     union is exactly positions 0 .. floor(D/B) B - 1, each once; rank r's lie in
//     [b B + r B/N, b B + (r+1) B/N) of batch b; every index is the global sampler's at that
//     position (labs/04-data-sharding/dataset.h, recomputed here); the steps are the epoch's; the items never
//     consumed in the epoch are exactly the last D mod B of its order (drop_last);
//   - the same global batches: slice, sampler and dispatch give every rank the same indices
//     hash at every step, and so BITWISE the same losses and param_hash; the hashes are those
//     of the lists' indices; N = 1 consumes, step by step, the N = 2 ranks' indices one after
//     the other, and its losses are within 1e-6 of N = 2's (N = 1 runs --accum 2, so its
//     micro-batches are the two ranks' parts and only the place where their gradients are
//     added differs: fp32 rounding, measured at 2e-8 over these 14 steps);
//   - dispatch moves exactly the batches' bytes: rank 0 sends (N-1) 4 ceil(P/4) bytes a step
//     (payload (N-1) P), every other rank receives 4 ceil(P/4) (payload P); slice and sampler
//     move none;
//   - held bytes: slice D(T+1) on every rank, sampler floor(D/B)(B/N)(T+1), dispatch D(T+1)
//     on rank 0 and 0 elsewhere; summed over ranks slice holds N D(T+1), and with D a multiple
//     of B (D = 36) exactly N times what the sampler holds;
//   - --weights 1,3,0 --temperature 2 (D = 4800, B = 48, one whole epoch): every rank's items
//     are the global draws at its positions; draws repeat (with replacement); the empirical
//     source frequencies over the epoch are within 0.025 of w^(1/tau) normalised, computed
//     here (4800 draws: 0.025 is more than 3.4 binomial standard deviations, and the seed is
//     fixed, so the outcome is too), and the weight-0 source is never drawn;
//   - the loss floor the lab reports is single's (the same synthetic corpus); --data FILE of
//     20 (T+1) + 5 bytes is 20 items, the last 5 bytes unused;
//   - the graders catch a lab whose ranks overlap (BROKEN_SHARD, tests/breaks/shard.c);
//   - bad input exits 2 with one line; the sanitized lab runs clean under ASan/UBSan.
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "04-data-sharding/dataset.h"
#include "common/runfiles/json.h"
#include "labtest.h"
#include "test.h"

static const char *shard, *single, *shard_san, *shard_broken;
static const int STEPS = 14;
#include "shardtest.h"  // exits_2_with_one_line()

enum { B = 6, T = 12, S = T + 1, D = 40, E = D / B };
static const uint64_t SEED = 1337;  // the labs' default
#define MODEL "--layers", "1", "--dim", "16", "--heads", "2", "--seq", "12", "--batch", "6"

// ---------------------------------------------------------------------------------------
// Reading a run: every rank's step events and its "data" object
// ---------------------------------------------------------------------------------------

enum { MAX_RUN_STEPS = 128 };
typedef struct {
    int n;  // step events
    double loss[MAX_RUN_STEPS], held[MAX_RUN_STEPS], recv[MAX_RUN_STEPS], sent[MAX_RUN_STEPS];
    double payload_recv[MAX_RUN_STEPS], payload_sent[MAX_RUN_STEPS], epoch[MAX_RUN_STEPS];
    char hash[MAX_RUN_STEPS][17], indices[MAX_RUN_STEPS][17];
    double loss_floor;
    int checks, checks_failed, ended_ok, schema_errors;
} ShardRank;

typedef struct {
    int n, status, steps;
    ShardRank r[8];
    char dir[512];
} ShardRun;

static void read_shard_rank(const char *dir, int rank, ShardRank *r) {
    memset(r, 0, sizeof *r);
    Events ev;
    load_rank_events(dir, rank, &ev);
    r->schema_errors = ev.bad_lines;
    for (int i = 0; i < ev.n; i++) {
        const JsonValue *e = ev.lines[i];
        const char *k = kind(e);
        if (strcmp(k, "start") == 0) {
            r->loss_floor = num(e, "loss_floor");
        } else if (strcmp(k, "step") == 0 && r->n < MAX_RUN_STEPS) {
            int s = r->n++;
            const JsonValue *d = json_get(e, "data");
            r->loss[s] = num(e, "loss");
            snprintf(r->hash[s], 17, "%s", json_get(e, "param_hash")->string);
            if (!d) continue;
            r->held[s] = num(d, "held"), r->recv[s] = num(d, "recv"), r->sent[s] = num(d, "sent");
            r->payload_recv[s] = num(d, "payload_recv"), r->payload_sent[s] = num(d, "payload_sent");
            r->epoch[s] = num(d, "epoch");
            const JsonValue *h = json_get(d, "indices_hash");
            snprintf(r->indices[s], 17, "%s", h && h->type == JSON_STRING ? h->string : "");
        } else if (strcmp(k, "check") == 0) {
            r->checks++;
            r->checks_failed += !json_get(e, "ok")->boolean;
        } else if (strcmp(k, "end") == 0) {
            r->ended_ok = strcmp(json_get(e, "status")->string, "ok") == 0;
        }
    }
    free_events(&ev);
}

// The lab on n ranks for `steps` steps (args end with NULL); env1: one more variable or NULL.
static void run_shard(ShardRun *run, const char *bin, const char *name, int n, int steps, char *const args[],
                      const char *env1) {
    memset(run, 0, sizeof *run);
    run->n = n, run->steps = steps;
    snprintf(run->dir, sizeof run->dir, "%s/%s", tmp, name);
    char steps_text[16], *argv[40];
    snprintf(steps_text, sizeof steps_text, "%d", steps);
    int a = 0;
    argv[a++] = "--steps", argv[a++] = steps_text;
    for (int i = 0; args[i]; i++) argv[a++] = args[i];
    argv[a] = NULL;
    run->status = run_ranks(bin, n, name, run->dir, argv, env1);
    for (int k = 0; k < n; k++) read_shard_rank(run->dir, k, &run->r[k]);
}

// Every rank exited 0 with every step logged, schema-valid, an ok end, and its own checks
// (memory table, held bytes, bytes moved) passed.
static int clean(const ShardRun *run, const char *what) {
    int ok = run->status == 0;
    for (int k = 0; k < run->n; k++) {
        const ShardRank *r = &run->r[k];
        ok &= r->n == run->steps && r->ended_ok && r->checks >= 7 && r->checks_failed == 0 && r->schema_errors == 0;
    }
    return EXPECT(ok, "%s: all %d ranks exit 0 with %d schema-valid steps, an ok end and their own checks passed "
                      "(status %d, rank 0: %d steps, %d checks, %d failed)",
                  what, run->n, run->steps, run->status, run->r[0].n, run->r[0].checks, run->r[0].checks_failed);
}

// ---------------------------------------------------------------------------------------
// The epoch lists: indices-rank-<r>-epoch-<e>.txt, "step position index" under a header
// ---------------------------------------------------------------------------------------

typedef struct {
    int64_t step, pos, idx;
} Line;

// Rank r's list for epoch e: its lines (up to max); the header (first line) into header.
static int read_list(const char *dir, int r, int e, Line *out, int max, char *header, size_t hn) {
    char path[700];
    snprintf(path, sizeof path, "%s/indices-rank-%d-epoch-%d.txt", dir, r, e);
    FILE *f = fopen(path, "r");
    if (header) header[0] = 0;
    if (!f) return -1;
    char line[4096];
    int n = 0;
    while (fgets(line, sizeof line, f)) {
        long long s, p, i;
        if (line[0] == '#') {
            if (header) snprintf(header, hn, "%s", line);
        } else if (sscanf(line, "%lld %lld %lld", &s, &p, &i) == 3 && n < max) {
            out[n++] = (Line){s, p, i};
        }
    }
    fclose(f);
    return n;
}

typedef struct {
    int disjoint, covered, in_slices, agree, steps_ok, dropped_ok, header_ok;
    int64_t dropped;
    char why[300];
} EpochCheck;

// Epoch e of a run on N ranks, against the sampler's order for (d items, batch b, mix).
static EpochCheck check_epoch(const char *dir, int N, int e, int64_t d, int b, const Mixture *mix) {
    EpochCheck c = {1, 1, 1, 1, 1, 1, 1, 0, ""};
    int64_t epoch_steps = d / b, used = epoch_steps * b, per = b / N;
    int64_t *order = malloc(sizeof *order * (size_t)d);
    sampler_epoch(order, d, SEED, e, mix);
    int *seen = calloc((size_t)d, sizeof *seen), *consumed = calloc((size_t)d, sizeof *consumed);
    Line *lines = malloc(sizeof *lines * (size_t)d);
    for (int r = 0; r < N; r++) {
        char header[2048];
        int n = read_list(dir, r, e, lines, (int)d, header, sizeof header);
        if (n < 0) {
            c.covered = c.disjoint = 0;
            snprintf(c.why, sizeof c.why, "no list for rank %d epoch %d", r, e);
            continue;
        }
        c.header_ok &= strstr(header, "drop_last") != NULL && strstr(header, "step position index") != NULL;
        for (int i = 0; i < n; i++) {
            Line l = lines[i];
            if (l.pos < 0 || l.pos >= used || l.idx < 0 || l.idx >= d) {
                c.covered = 0;
                if (!c.why[0]) snprintf(c.why, sizeof c.why, "rank %d: position %lld / index %lld out of range", r,
                                        (long long)l.pos, (long long)l.idx);
                continue;
            }
            if (seen[l.pos]++ && c.disjoint) {
                c.disjoint = 0;
                snprintf(c.why, sizeof c.why, "position %lld taken twice (again by rank %d)", (long long)l.pos, r);
            }
            consumed[l.idx] = 1;
            int64_t in_batch = l.pos % b;
            c.in_slices &= in_batch >= r * per && in_batch < (r + 1) * per;
            c.agree &= l.idx == order[l.pos];
            c.steps_ok &= l.step == (int64_t)e * epoch_steps + l.pos / b + 1;
        }
    }
    for (int64_t p = 0; p < used; p++)
        if (seen[p] != 1) {
            c.covered = 0;
            if (!c.why[0]) snprintf(c.why, sizeof c.why, "position %lld taken %d times", (long long)p, seen[p]);
        }
    // drop_last: the items nobody consumed are the last d mod b of the order.
    for (int64_t i = 0; i < d; i++) c.dropped += !consumed[i];
    if (!mix)
        for (int64_t p = used; p < d; p++) c.dropped_ok &= !consumed[order[p]];
    c.dropped_ok &= mix || c.dropped == d % b;
    free(order), free(seen), free(consumed), free(lines);
    return c;
}

static void grade_epochs(const ShardRun *run, const char *what, int epochs) {
    for (int e = 0; e < epochs; e++) {
        EpochCheck c = check_epoch(run->dir, run->n, e, D, B, NULL);
        // Each position of the used part of the epoch's order is consumed exactly once, by one rank.
        EXPECT(c.disjoint && c.covered, "%s, epoch %d: the ranks' positions are disjoint and cover positions 0..%d "
               "exactly once %s", what, e, E * B - 1, c.why);
        // Rank r's positions are its slice of each batch, and its items the sampler's at them.
        EXPECT(c.in_slices && c.agree && c.steps_ok, "%s, epoch %d: rank r takes [b B + r B/N, b B + (r+1) B/N) of "
               "batch b at step e E + b + 1, and each index is the global order's at its position", what, e);
        // drop_last: exactly D mod B = 4 items wait for another epoch: the order's last four.
        EXPECT(c.dropped_ok && c.header_ok, "%s, epoch %d: %lld items not consumed = D mod B = %d, the order's last "
               "%d; the header states the rule", what, e, (long long)c.dropped, D % B, D % B);
    }
}

// The indices of `step` that rank r listed, in order: n of them into out.
static int step_indices(const char *dir, int r, int step, int64_t *out) {
    static Line lines[4096];
    int n = read_list(dir, r, (step - 1) / E, lines, 4096, NULL, 0), k = 0;
    for (int i = 0; i < n; i++)
        if (lines[i].step == step) out[k++] = lines[i].idx;
    return k;
}

// ---------------------------------------------------------------------------------------
// The checks
// ---------------------------------------------------------------------------------------

static ShardRun slice2, sampler2, dispatch2, sampler1, dispatch3, sampler3;

static void check_same_batches(void) {
    const ShardRun *runs[] = {&slice2, &sampler2, &dispatch2};
    int same = 1, hashes_match = 1;
    for (int k = 1; k < 3; k++)
        for (int r = 0; r < 2; r++)
            for (int s = 0; s < STEPS; s++)
                same &= strcmp(runs[k]->r[r].indices[s], slice2.r[r].indices[s]) == 0 &&
                        runs[k]->r[r].loss[s] == slice2.r[r].loss[s] &&
                        strcmp(runs[k]->r[r].hash[s], slice2.r[r].hash[s]) == 0;
    // The hash in each step event is the FNV-1a of the indices the rank listed for that step.
    for (int r = 0; r < 2; r++)
        for (int s = 1; s <= STEPS; s++) {
            int64_t idx[B];
            char hex[17];
            int n = step_indices(sampler2.dir, r, s, idx);
            snprintf(hex, sizeof hex, "%016llx", (unsigned long long)indices_hash(idx, n));
            hashes_match &= n == B / 2 && strcmp(hex, sampler2.r[r].indices[s - 1]) == 0;
        }
    // The strategies change where the bytes come from, never which: same batches, same training, bit for bit.
    EXPECT(same, "slice, sampler and dispatch at N=2: the same indices hash on every rank at every step, and so bitwise "
                 "the same losses and param_hash (step %d: %.9f %.9f %.9f)", STEPS, slice2.r[0].loss[STEPS - 1],
           sampler2.r[0].loss[STEPS - 1], dispatch2.r[0].loss[STEPS - 1]);
    // The hash in the events and the lists on disk describe the same consumption.
    EXPECT(hashes_match, "every step event's indices_hash is the FNV-1a 64 of the indices its rank listed for the step");
    int replicas = 1;
    for (int s = 0; s < STEPS; s++) replicas &= strcmp(dispatch3.r[1].hash[s], dispatch3.r[0].hash[s]) == 0 &&
                                                strcmp(dispatch3.r[2].hash[s], dispatch3.r[0].hash[s]) == 0;
    // Dispatched parts feed a correct DDP: the replicas stay equal.
    EXPECT(replicas, "dispatch at N=3: the replicas hold bitwise equal weights after every step");
    int same3 = 1;
    for (int r = 0; r < 3; r++)
        for (int s = 0; s < STEPS; s++)
            same3 &= strcmp(sampler3.r[r].indices[s], dispatch3.r[r].indices[s]) == 0 &&
                     sampler3.r[r].loss[s] == dispatch3.r[r].loss[s];
    // At N=3 too (padded parts), dispatch feeds each rank what the sampler would have read.
    EXPECT(same3, "sampler and dispatch at N=3: the same indices and bitwise the same losses");

    // N = 1 takes the same global batch: its indices of a step are rank 0's then rank 1's at N = 2.
    int concat = 1;
    for (int s = 1; s <= STEPS; s++) {
        int64_t one[B], a[B], b[B];
        int n1 = step_indices(sampler1.dir, 0, s, one), na = step_indices(sampler2.dir, 0, s, a),
            nb = step_indices(sampler2.dir, 1, s, b);
        concat &= n1 == B && na == B / 2 && nb == B / 2 && memcmp(one, a, sizeof a[0] * 3) == 0 &&
                  memcmp(one + 3, b, sizeof b[0] * 3) == 0;
    }
    EXPECT(concat, "N=1 consumes at each step the N=2 ranks' indices, rank 0's then rank 1's: the same global batches");
    double worst = 0;
    for (int s = 0; s < STEPS; s++) worst = fmax(worst, fabs(sampler1.r[0].loss[s] - sampler2.r[0].loss[s]));
    // The global batch, not N, decides the training: N=1 and N=2 differ by fp32 rounding only.
    EXPECT(worst <= 1e-6, "N=1 (--accum 2) vs N=2: losses within 1e-6 at every step (worst %.3g): fp32 rounding only",
           worst);
}

static void check_bytes(const ShardRun *run, const char *what) {
    int N = run->n, per = B / N, P = per * S, moved = 4 * ((P + 3) / 4), ok = 1, others = 1;
    for (int s = 0; s < STEPS; s++) {
        double recv_sum = 0;
        ok &= run->r[0].sent[s] == (double)(N - 1) * moved && run->r[0].payload_sent[s] == (double)(N - 1) * P &&
              run->r[0].recv[s] == 0;
        for (int r = 1; r < N; r++) {
            ok &= run->r[r].recv[s] == moved && run->r[r].payload_recv[s] == P && run->r[r].sent[s] == 0;
            recv_sum += run->r[r].recv[s];
        }
        others &= recv_sum == run->r[0].sent[s];
    }
    // Dispatch's data traffic is the parts of the global batch, as 4-byte words, and nothing else.
    EXPECT(ok && others, "%s: rank 0 sends (N-1) 4 ceil(P/4) = %d bytes a step (payload (N-1) P = %d, P = (B/N)(T+1) = "
           "%d), every other rank receives 4 ceil(P/4) = %d (payload %d); what rank 0 sent is what the others received",
           what, (N - 1) * moved, (N - 1) * P, P, moved, P);
}

static double held_total(const ShardRun *run) {
    double t = 0;
    for (int r = 0; r < run->n; r++) t += run->r[r].held[0];
    return t;
}

static void check_held(void) {
    int ok = 1;
    for (int r = 0; r < 2; r++)
        for (int s = 0; s < STEPS; s++)
            ok &= slice2.r[r].held[s] == D * S && sampler2.r[r].held[s] == E * (B / 2) * S &&
                  dispatch2.r[r].held[s] == (r == 0 ? D * S : 0) && slice2.r[r].recv[s] == 0 &&
                  slice2.r[r].sent[s] == 0 && sampler2.r[r].recv[s] == 0 && sampler2.r[r].sent[s] == 0;
    // What each rank holds is its strategy's formula at every step; slice and sampler move nothing.
    EXPECT(ok, "held: slice D(T+1) = %d on every rank, sampler floor(D/B)(B/N)(T+1) = %d, dispatch %d on rank 0 and 0 "
           "elsewhere; slice and sampler send and receive nothing", D * S, E * (B / 2) * S, D * S);
    // Summed over ranks: slice pays N copies, the sampler one (less what drop_last leaves out).
    EXPECT(held_total(&slice2) == 2.0 * D * S && held_total(&sampler2) == (double)E * B * S,
           "summed over ranks: slice N D(T+1) = %d, sampler floor(D/B) B (T+1) = %d (measured %.0f, %.0f)", 2 * D * S,
           E * B * S, held_total(&slice2), held_total(&sampler2));

    // With D a multiple of B nothing is dropped, and slice holds exactly N times the sampler's bytes.
    char *args36[] = {MODEL, "--items", "36", "--strategy", "slice", NULL};
    ShardRun slice36, sampler36;
    run_shard(&slice36, shard, "slice36", 2, 2, args36, NULL);
    args36[13] = "sampler";
    run_shard(&sampler36, shard, "sampler36", 2, 2, args36, NULL);
    EXPECT(slice36.status == 0 && sampler36.status == 0 && held_total(&slice36) == 2 * held_total(&sampler36) &&
               held_total(&sampler36) == 36.0 * S,
           "D = 36 (a multiple of B): slice holds N = 2 times the sampler's dataset bytes in total (%.0f vs %.0f)",
           held_total(&slice36), held_total(&sampler36));
}

static void check_weights(void) {
    const int WD = 4800, WB = 48;
    char *args[] = {"--layers", "1", "--dim", "16", "--heads", "2", "--seq", "12", "--batch", "48", "--items", "4800",
                    "--weights", "1,3,0", "--temperature", "2", "--strategy", "sampler", NULL};
    ShardRun run;
    run_shard(&run, shard, "weights", 2, WD / WB, args, NULL);
    if (!clean(&run, "--weights 1,3,0 --temperature 2")) return;
    Mixture mix;
    char err[256];
    int parsed = mixture_parse(&mix, "1,3,0", 2.0, err, sizeof err) == 0 && mixture_layout(&mix, WD, err, sizeof err) == 0;
    EpochCheck c = check_epoch(run.dir, 2, 0, WD, WB, &mix);
    // Each rank's items are the global draws at its positions, and together they use the whole epoch.
    EXPECT(parsed && c.agree && c.disjoint && c.covered && c.in_slices, "--weights: every rank's item at each position "
           "is the global draw there; the ranks cover the epoch's %d positions once %s", WD, c.why);
    // The empirical frequencies, against w^(1/tau) normalised computed here: 1, sqrt(3), 0.
    double w[3] = {1, 3, 0}, p[3], total = 0, count[3] = {0};
    for (int s = 0; s < 3; s++) total += p[s] = pow(w[s], 1 / 2.0);
    static Line lines[4800];
    int *times = calloc(WD, sizeof *times), repeats = 0;
    for (int r = 0; r < 2; r++) {
        int n = read_list(run.dir, r, 0, lines, WD, NULL, 0);
        for (int i = 0; i < n; i++) {
            int source = (int)(lines[i].idx / (WD / 3));  // 3 equal sources of 1600 items
            count[source < 3 ? source : 2]++;
            repeats += times[lines[i].idx]++ == 1;
        }
    }
    double worst = 0;
    for (int s = 0; s < 3; s++) worst = fmax(worst, fabs(count[s] / WD - p[s] / total));
    EXPECT(worst <= 0.025 && count[2] == 0, "--weights 1,3,0 --temperature 2: source frequencies %.4f %.4f %.4f vs "
           "w^(1/tau) normalised %.4f %.4f %.4f (worst %.4f <= 0.025); the weight-0 source is never drawn",
           count[0] / WD, count[1] / WD, count[2] / WD, p[0] / total, p[1] / total, p[2] / total, worst);
    // The mixture samples with replacement: within one epoch some items come back.
    EXPECT(repeats > 0, "--weights draws with replacement: %d items are drawn more than once in the epoch", repeats);
    free(times);
}

static void check_floor(void) {
    char *args[] = {"--steps", "1", MODEL, NULL};
    char dir[512];
    snprintf(dir, sizeof dir, "%s/single", tmp);
    int status = run_ranks(single, 1, "single", dir, args, NULL);
    ShardRank r;
    read_shard_rank(dir, 0, &r);
    // The lab writes the same synthetic corpus as every other lab, so the same loss floor.
    EXPECT(status == 0 && r.loss_floor > 0 && r.loss_floor == sampler2.r[0].loss_floor,
           "the loss floor of shard's synthetic dataset is single's (%.9f vs %.9f)", sampler2.r[0].loss_floor,
           r.loss_floor);
}

// --data PATH: the file is the dataset; the bytes after its last whole item are never used.
static void check_file_data(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/data.txt", tmp);
    FILE *f = fopen(path, "wb");
    for (int i = 0; f && i < 20 * S + 5; i++) fputc("abcdefghij"[(i * 7 + i / 3) % 10], f);
    if (f) fclose(f);
    char *args[] = {MODEL, "--data", path, "--strategy", "slice", NULL};
    ShardRun run;
    run_shard(&run, shard, "file", 2, 4, args, NULL);
    JsonValue *meta = load_json_file(run.dir, "meta.json");
    const JsonValue *cfg = meta ? json_get(meta, "config") : NULL;
    double items = cfg ? num(cfg, "items") : -1;
    json_free(meta);
    // The file's whole items are the dataset, and file data has no known loss floor.
    EXPECT(clean(&run, "--data FILE") && items == 20 && run.r[0].held[0] == 20 * S && isnan(run.r[0].loss_floor),
           "--data FILE of 20 (T+1) + 5 bytes: D = 20 items, slice holds 20 (T+1) = %d bytes (%.0f), no loss floor",
           20 * S, run.r[0].held[0]);
}

static void check_broken_is_caught(void) {
    char *args[] = {MODEL, "--items", "40", "--strategy", "sampler", NULL};
    ShardRun run;
    run_shard(&run, shard_broken, "broken", 2, E, args, NULL);
    EpochCheck c = check_epoch(run.dir, 2, 0, D, B, NULL);
    // The broken lab runs to the end (its own checks cannot see the overlap); the grader's
    // disjointness check must.
    EXPECT(run.status == 0 && !c.disjoint, "the disjointness check catches ranks that overlap "
           "(tests/breaks/shard.c, status %d): %s", run.status, c.why);
}

// Every bad option is refused up front, on one line, with exit status 2 (never a crash).
static void check_bad_input(void) {
    char *strategy[] = {"--strategy", "bogus", NULL};
    exits_2_with_one_line(shard, 2, strategy, "--strategy bogus", "bad-strategy");
    char *junk[] = {"--weights", "junk", NULL};
    exits_2_with_one_line(shard, 2, junk, "--weights junk", "bad-weights");
    char *negative[] = {"--weights", "1,-2", NULL};
    exits_2_with_one_line(shard, 2, negative, "--weights 1,-2", "bad-negative");
    char *zero[] = {"--weights", "0,0", NULL};
    exits_2_with_one_line(shard, 2, zero, "--weights 0,0", "bad-zero");
    char *empty[] = {"--weights", "", NULL};
    exits_2_with_one_line(shard, 2, empty, "--weights ''", "bad-empty");
    char *items[] = {"--items", "0", NULL};
    exits_2_with_one_line(shard, 2, items, "--items 0", "bad-items");
    char *too_many[] = {"--items", "99999999", NULL};  // more than the data holds: refused, not capped
    exits_2_with_one_line(shard, 2, too_many, "--items beyond the data", "bad-too-many");
    char *few[] = {"--items", "5", "--batch", "8", NULL};
    exits_2_with_one_line(shard, 2, few, "--items 5 with --batch 8: no whole batch", "bad-few");
    char *tau[] = {"--temperature", "2", NULL};
    exits_2_with_one_line(shard, 2, tau, "--temperature without --weights", "bad-tau");
    char *sources[] = {"--items", "8", "--batch", "2", "--weights", "1,1,1,1,1,1,1,1,1", NULL};
    exits_2_with_one_line(shard, 2, sources, "9 sources of 8 items", "bad-sources");
}

// Weights and temperatures at the ends of their ranges: w^(1/tau) overflows a double long
// before the weights stop being a valid mixture (1e308,1e308 is 1:1), and underflows for a
// source that can then never be drawn. The probabilities stay finite and add up to 1; a
// source whose chance is below what a double holds is refused, and so is a temperature that is
// not a positive number (the grader reads it from a run's meta.json, which anyone can edit).
static void check_weight_ranges(void) {
    Mixture mix;
    char err[512] = "";
    int parsed = mixture_parse(&mix, "1e308,1e308", 1.0, err, sizeof err) == 0;
    EXPECT(parsed && mix.prob[0] == 0.5 && mix.prob[1] == 0.5,
           "--weights 1e308,1e308: each source drawn with probability 1/2 (%s: %g, %g)", parsed ? "parsed" : err,
           parsed ? mix.prob[0] : NAN, parsed ? mix.prob[1] : NAN);
    parsed = mixture_parse(&mix, "1e300,1e299,0", 0.5, err, sizeof err) == 0;
    double sum = parsed ? mix.prob[0] + mix.prob[1] + mix.prob[2] : NAN;
    EXPECT(parsed && fabs(mix.prob[0] - 1 / 1.01) < 1e-12 && fabs(mix.prob[1] - 0.01 / 1.01) < 1e-12 &&
               mix.prob[2] == 0 && fabs(sum - 1) < 1e-12,
           "--weights 1e300,1e299,0 --temperature 0.5: probabilities 1/1.01, 0.01/1.01 and 0 (%s: %g %g %g)",
           parsed ? "parsed" : err, parsed ? mix.prob[0] : NAN, parsed ? mix.prob[1] : NAN, parsed ? mix.prob[2] : NAN);
    double taus[] = {0, -1, NAN, INFINITY};
    int refused = 0;
    for (int i = 0; i < 4; i++) refused += mixture_parse(&mix, "1,3", taus[i], err, sizeof err) != 0;
    EXPECT(refused == 4, "a temperature of 0, -1, NaN or inf is refused (%d of 4)", refused);
    char *under[] = {"--steps", "1", "--weights", "1000000000,1", "--temperature", "0.01", NULL};
    exits_2_with_one_line(shard, 2, under, "--weights 1000000000,1 --temperature 0.01: the second source's chance "
                          "is 1e-900", "bad-underflow");
    char *over[] = {"--steps", "1", "--weights", "1e308,1e308", "--temperature", "0.01", "--items", "40", NULL};
    char dir[512];
    snprintf(dir, sizeof dir, "%s/weights-huge", tmp);
    int status = run_ranks(shard, 2, "weights-huge", dir, over, NULL);
    EXPECT(status == 0, "--weights 1e308,1e308 --temperature 0.01 trains (a 1:1 mixture) (status %d)", status);
}

// A --data file larger than the machine's memory (1 TiB, sparse: no disk is used): slice
// would read all of it into every rank, and any strategy keeps each epoch's order, 8 bytes an
// item. Refused before it is read, with exit 2 and the figures, not killed by the kernel.
static void check_data_too_big(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/huge.bin", tmp);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int made = fd >= 0 && ftruncate(fd, (off_t)1 << 40) == 0;
    if (fd >= 0) close(fd);
    char *args[] = {"--steps", "1", "--data", path, "--strategy", "slice", NULL};
    EXPECT(made, "a sparse 1 TiB --data file");
    if (made) exits_2_with_one_line(shard, 2, args, "--data of 1 TiB, slice: more than the memory there is", "bad-huge");
    char err[600];
    snprintf(err, sizeof err, "%s/bad-huge.r0.err", tmp);
    char *text = read_file(err, NULL);
    EXPECT(made && text && strstr(text, "TiB") && strstr(text, "available") && strstr(text, "--items"),
           "the refusal of a 1 TiB --data gives what slice would hold, what is available, and --items (%s)",
           text ? one_line(text) : "(no stderr)");
    free(text);
    unlink(path);
}

static void check_sanitized(void) {
    char *dispatch[] = {"--steps", "3", MODEL, "--items", "40", "--strategy", "dispatch", "--weights", "2,1", NULL};
    char dir[512];
    snprintf(dir, sizeof dir, "%s/san-dispatch", tmp);
    int status = run_ranks(shard_san, 3, "san-dispatch", dir, dispatch, NULL);
    // ASan/UBSan abort on the first error (-fno-sanitize-recover) and LeakSanitizer fails the exit: 0 means clean.
    EXPECT(status == 0, "the sanitized lab (dispatch with --weights, N=3, padded parts) exits 0 (status %d)", status);
    char *sampler[] = {"--steps", "3", MODEL, "--items", "13", "--strategy", "sampler", "--accum", "3", NULL};
    snprintf(dir, sizeof dir, "%s/san-sampler", tmp);
    status = run_ranks(shard_san, 2, "san-sampler", dir, sampler, NULL);
    // The sampler re-reads its items at an epoch boundary, under the sanitizers.
    EXPECT(status == 0, "the sanitized lab (sampler across an epoch boundary, --accum 3) exits 0 (status %d)", status);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: test_shard OPTIMIZED_SHARD OPTIMIZED_SINGLE SANITIZED_SHARD BROKEN_SHARD\n");
        return 2;
    }
    shard = argv[1], single = argv[2], shard_san = argv[3], shard_broken = argv[4];
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-shard-XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    char *args[] = {MODEL, "--items", "40", "--strategy", "slice", NULL};
    run_shard(&slice2, shard, "slice2", 2, STEPS, args, NULL);
    args[13] = "sampler";
    run_shard(&sampler2, shard, "sampler2", 2, STEPS, args, NULL);
    run_shard(&sampler3, shard, "sampler3", 3, STEPS, args, NULL);
    args[13] = "dispatch";
    run_shard(&dispatch2, shard, "dispatch2", 2, STEPS, args, NULL);
    run_shard(&dispatch3, shard, "dispatch3", 3, STEPS, args, NULL);
    char *one[] = {MODEL, "--items", "40", "--strategy", "sampler", "--accum", "2", NULL};
    run_shard(&sampler1, shard, "sampler1", 1, STEPS, one, NULL);
    int ok = clean(&slice2, "slice N=2") & clean(&sampler2, "sampler N=2") & clean(&dispatch2, "dispatch N=2") &
             clean(&sampler1, "sampler N=1") & clean(&dispatch3, "dispatch N=3") & clean(&sampler3, "sampler N=3");
    if (ok) {
        grade_epochs(&sampler2, "sampler N=2", 2);
        grade_epochs(&dispatch3, "dispatch N=3", 2);
        grade_epochs(&slice2, "slice N=2", 2);
        check_same_batches();
        check_bytes(&dispatch2, "dispatch N=2");
        check_bytes(&dispatch3, "dispatch N=3");
        check_held();
        check_floor();
    }
    check_weights();
    check_broken_is_caught();
    check_bad_input();
    check_weight_ranges();
    check_data_too_big();
    check_file_data();
    check_sanitized();
    tmp_finish(test_failed);  // each run holds a 1 MiB dataset.bin: keep only a failure's evidence
    return test_done();
}
