// schedule.c — see schedule.h.
#include "schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/harness/batchsplit.h"  // defines: BatchSplit, batch_split_of(), ...
#include "common/harness/check.h"       // defines: malloc_check(), calloc_check(), ...
#include "common/harness/memplan.h"     // defines: memplan_pp_chunk()

const char *const SCHEDULE_NAMES[3] = {"gpipe", "1f1b", "interleaved"};

// Stage s's operations, in order (2 m v of them). Forward and backward of micro-batches
// go in increasing order within each chunk, as `single --accum m` runs them.
int schedule_ops(const Pipe *pp, int s, Op *out) {
    int p = pp->p, m = pp->m, v = pp->v, n = 0;
    if (pp->sched != SCHED_INTERLEAVED) {
        // One chunk per stage (chunk s). Warm-up: forwards only (GPipe all m; 1F1B p-s-1, at
        // most m); steady state: one forward, then one backward, until every forward is out;
        // cool-down: the backwards left. Each op is (Op){bwd, micro-batch, chunk}, appended
        // to out[n++].
        /* BEGIN SOLUTION: stage s's order of forwards and backwards under GPipe and 1F1B */
        int warmup = pp->sched == SCHED_GPIPE ? m : (p - s - 1 < m ? p - s - 1 : m);
        int f = 0, b = 0;
        while (f < warmup) out[n++] = (Op){0, f++, s};
        while (f < m) {  // steady state: one forward, one backward
            out[n++] = (Op){0, f++, s};
            out[n++] = (Op){1, b++, s};
        }
        while (b < m) out[n++] = (Op){1, b++, s};
        /* END SOLUTION */
        return n;
    }
    // Interleaved: the i-th forward of a rank is micro-batch (i / pv) p + i mod p of its local
    // chunk (i / p) mod v: p micro-batches through chunk 0, the same p through chunk 1, ...;
    // backwards the same with the chunks in reverse.
    int total = m * v, warmup = m == p ? total : (p - s - 1) * 2 + (v - 1) * p;
    if (warmup > total) warmup = total;
#define FWD(i) (Op){0, ((i) / (p * v)) * p + (i) % p, (((i) / p) % v) * p + s}
#define BWD(i) (Op){1, ((i) / (p * v)) * p + (i) % p, (v - 1 - ((i) / p) % v) * p + s}
    int f = 0, b = 0;
    while (f < warmup) out[n++] = FWD(f), f++;
    while (f < total) {
        out[n++] = FWD(f), f++;
        out[n++] = BWD(b), b++;
    }
    while (b < total) out[n++] = BWD(b), b++;
#undef FWD
#undef BWD
    return n;
}

// The schedule with forward cost 1 and backward cost 2 and free messages: each operation
// starts when its rank is free and its input exists (the previous chunk's forward of the
// micro-batch, or the next chunk's backward; the last chunk's backward needs its own
// forward). Fills start[s][i]; returns the makespan, or -1 if the schedule deadlocks (an
// operation waits for one that waits for it).
static int simulate(const Pipe *pp, Op **ops, int nops, int **start) {
    int p = pp->p, m = pp->m, K = pp->K, makespan = 0;
    int *done = malloc_check(2 * (size_t)m * K * sizeof *done);  // end time of (bwd, mb, k), -1: not yet
    for (int i = 0; i < 2 * m * K; i++) done[i] = -1;
#define DONE(b, mb, k) done[((b) * m + (mb)) * K + (k)]
    int *pos = calloc_check((size_t)p, sizeof *pos), *free_at = calloc_check((size_t)p, sizeof *free_at);
    for (int progress = 1; progress;) {
        progress = 0;
        for (int s = 0; s < p; s++)
            while (pos[s] < nops) {
                Op o = ops[s][pos[s]];
                int ready = 0;
                if (!o.bwd) ready = o.k == 0 ? 0 : DONE(0, o.mb, o.k - 1);
                else ready = o.k == K - 1 ? DONE(0, o.mb, o.k) : DONE(1, o.mb, o.k + 1);
                if (ready < 0) break;
                int t0 = free_at[s] > ready ? free_at[s] : ready;
                start[s][pos[s]] = t0;
                free_at[s] = DONE(o.bwd, o.mb, o.k) = t0 + (o.bwd ? 2 : 1);
                if (free_at[s] > makespan) makespan = free_at[s];
                pos[s]++;
                progress = 1;
            }
    }
    for (int s = 0; s < p; s++)
        if (pos[s] < nops) makespan = -1;
#undef DONE
    free(done), free(pos), free(free_at);
    return makespan;
}

// How many (micro-batch, chunk) activations stage s holds at most: GPipe all m; 1F1B its
// warm-up p-s-1 plus the one in the steady state; interleaved likewise, its warm-up
// 2 (p-s-1) + (v-1) p forwards plus one (all m v when m = p).
int expected_in_flight(const Pipe *pp, int s) {
    int p = pp->p, m = pp->m, v = pp->v;
    if (pp->sched == SCHED_GPIPE) return m;
    if (pp->sched == SCHED_1F1B) return p - s < m ? p - s : m;
    int warmup = m == p ? m * v : 2 * (p - s - 1) + (v - 1) * p;
    return warmup + 1 < m * v ? warmup + 1 : m * v;
}

double bubble_formula(const Pipe *pp) { return (double)(pp->p - 1) / (pp->v * pp->m + pp->p - 1); }

// The schedule as text, one row per stage, one character per unit of time: forward of
// micro-batch 0, 1, ... as a b c ..., backward as A B C ... (two units), '.' for the bubble.
static void timeline_row(const Timeline *tl, int s, char *row) {
    memset(row, '.', (size_t)tl->makespan);
    row[tl->makespan] = 0;
    for (int i = 0; i < tl->nops; i++) {
        const Op *o = &tl->ops[s][i];
        char c = (char)((o->bwd ? 'A' : 'a') + o->mb % 26);
        for (int t = 0; t < (o->bwd ? 2 : 1); t++) row[tl->start[s][i] + t] = c;
    }
}

static void print_timeline(RunLog *log, const Pipe *pp, const Timeline *tl) {
    int width = tl->makespan < 150 ? tl->makespan : 150;
    char *row = malloc_check((size_t)tl->makespan + 1);
    for (int s = 0; s < pp->p; s++) {
        timeline_row(tl, s, row);
        runlog_printf(log, "  stage %d |%.*s%s|\n", s, width, row, tl->makespan > width ? "..." : "");
    }
    free(row);
}

void timeline_json(StrBuf *out, const Pipe *pp, const Timeline *tl) {
    enum { MAX_COLUMNS = 600 };
    char *row = malloc_check((size_t)tl->makespan + 1);
    sb_printf(out, "\"timeline\":[");
    for (int s = 0; s < pp->p; s++) {
        timeline_row(tl, s, row);
        sb_printf(out, "%s\"%.*s\"", s ? "," : "", MAX_COLUMNS, row);  // letters and dots only
    }
    sb_printf(out, "],\"timeline_cut\":%s", tl->makespan > MAX_COLUMNS ? "true" : "false");
    free(row);
}

// "2,3,3" -> blocks per stage; returns how many blocks that is. Exits 2 on anything else.
static int parse_split(const char *text, int p, int *blocks) {
    const char *q = text;
    int sum = 0;
    for (int s = 0; s < p; s++) {
        char *end;
        long b = strtol(q, &end, 10);
        if (end == q || b < 1 || b > MAX_SPLIT_BLOCKS)
            usage_error("pp", "--split takes %d block counts from 1 to %d, comma-separated (got '%s')", p,
                        MAX_SPLIT_BLOCKS, text);
        blocks[s] = (int)b, sum += (int)b;
        q = end;
        if (s < p - 1) {
            if (*q != ',') usage_error("pp", "--split takes %d block counts, one per stage (got '%s')", p, text);
            q++;
        }
    }
    if (*q) usage_error("pp", "--split takes %d block counts, one per stage (got '%s')", p, text);
    return sum;
}

// The pipeline over N ranks in dp pipelines: its stages and chunks, the model's depth and each
// chunk's layers. Exits 2 on what does not make a pipeline.
void lay_out_pipe(Pipe *pp, TrainArgs *a, const char *split, int dp, int N) {
    // The pipelines and the micro-batches divide (common/harness/batchsplit.c: --dp over the ranks,
    // interleaving's groups of p, the batch into D x m micro-batches), else one line naming
    // what would.
    BatchSplit s = batch_split_of("pp", a, N);
    s.dp = dp, s.micro = pp->m, s.chunks = pp->v, s.interleaved = pp->sched == SCHED_INTERLEAVED;
    s.layers = a->layers == TRAIN_LAYERS_AUTO ? 0 : a->layers;
    char why[768];
    if (batch_split_check(&s, why, sizeof why) != 0) usage_error("pp", "%s", why);
    pp->p = N / dp;
    pp->K = pp->p * pp->v;
    if (pp->K > MAX_CHUNKS)
        usage_error("pp", "%d stages x %d chunks make %d model chunks; at most %d", pp->p, pp->v, pp->K, MAX_CHUNKS);
    int blocks[MAX_CHUNKS], split_blocks = 0;
    if (split) {
        if (pp->v > 1) usage_error("pp", "--split is for one chunk per stage (not --schedule interleaved)");
        split_blocks = parse_split(split, pp->p, blocks);
    }
    // The model's depth, unless --layers gives it: --split's blocks, else one block per model
    // chunk, so that a pipeline of any length runs as typed (`make lab-pp NGPU=4` trains 4
    // blocks), and never fewer than every other lab's 2 (at p <= 2 the model is single's).
    train_args_resolve_layers(a, split ? split_blocks : (pp->K > 2 ? pp->K : 2));
    int L = a->layers;
    if (pp->K > L) {
        if (pp->v > 1)
            usage_error("pp", "%d stages x %d chunks need at least %d blocks (--layers %d)", pp->p, pp->v, pp->K, L);
        usage_error("pp", "%d stages need at least %d blocks, one per stage (--layers %d)", pp->p, pp->p, L);
    }
    if (split && split_blocks != L)
        usage_error("pp", "--split '%s' gives %d blocks; the model has --layers %d", split, split_blocks, L);
    // Blocks per chunk: as even as can be (memplan_pp_chunk: the first chunks take the
    // remainder, the layout the memory formulas assume), or --split's.
    for (int k = 0, l = 1; k < pp->K; k++) {
        if (!split) {
            memplan_pp_chunk(L, pp->K, k, &pp->first[k], &pp->last[k]);
            continue;
        }
        pp->first[k] = k == 0 ? 0 : l;  // chunk 0 starts with the embedding
        l += blocks[k];
        pp->last[k] = k == pp->K - 1 ? L + 1 : l - 1;  // the last chunk ends with the head
    }
}

void timeline_build(Timeline *tl, const Pipe *pp) {
    tl->nops = 2 * pp->m * pp->v;
    tl->ops = malloc_check((size_t)pp->p * sizeof *tl->ops);
    tl->start = malloc_check((size_t)pp->p * sizeof *tl->start);
    for (int t = 0; t < pp->p; t++) {
        tl->ops[t] = malloc_check((size_t)tl->nops * sizeof(Op));
        tl->start[t] = malloc_check((size_t)tl->nops * sizeof(int));
        schedule_ops(pp, t, tl->ops[t]);
    }
    tl->makespan = simulate(pp, tl->ops, tl->nops, tl->start);
    if (tl->makespan < 0) die("this is a bug in shardlab's schedules", "the %s schedule deadlocks", SCHEDULE_NAMES[pp->sched]);
    tl->bubble = 1.0 - 3.0 * pp->m * pp->v / (double)tl->makespan;
}

void timeline_free(Timeline *tl, const Pipe *pp) {
    for (int t = 0; t < pp->p; t++) free(tl->ops[t]), free(tl->start[t]);
    free(tl->ops), free(tl->start);
}

// The schedule of a step as a timeline, and its bubble three ways (rank 0, at the end).
void report_schedule(RunLog *log, const Pipe *pp, const Timeline *tl, double measured) {
    char v_text[32];
    snprintf(v_text, sizeof v_text, ", v=%d chunks per rank", pp->v);
    runlog_printf(log, "\nthe %s schedule, p=%d m=%d%s (one column per unit of time: forward 1, backward 2; "
                       "a b c .. forward, A B C .. backward of micro-batch 0 1 2 .., '.' idle):\n",
                  SCHEDULE_NAMES[pp->sched], pp->p, pp->m, pp->v > 1 ? v_text : "");
    print_timeline(log, pp, tl);
    runlog_printf(log, "bubble: formula (p-1)/(%sm+p-1) = %.4f, this schedule with costs 1 and 2: %.4f, "
                       "measured (mean over ranks and steps): %.4f\n",
                  pp->v > 1 ? "v " : "", bubble_formula(pp), tl->bubble, measured);
}
