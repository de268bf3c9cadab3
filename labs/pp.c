// pp.c — pipeline parallelism from scratch: the model split by depth, micro-batches in flight.
//
// The L blocks are split into stages, one per rank: rank 0 also holds the embedding, the last
// rank the head. A micro-batch's activations flow forward from stage to stage (send/recv), its
// gradients flow back. With one micro-batch at a time every stage but one would wait: the
// global batch is cut into m micro-batches and a SCHEDULE decides, on every stage, in which
// order their forward (F) and backward (B) passes run. The waiting that remains is the
// pipeline BUBBLE.
//
// Run it:   make lab-pp NGPU=4 SCHEDULE=1f1b MICRO=8
//           build/shardlab run pp -n 4 --schedule interleaved --chunks 2 --micro 8 --layers 16
//           build/labs/pp --help
//
// The model: every lab's GPT, except its depth when --layers is not given: a stage needs a
// block, so the pipeline takes one block per model chunk (stages x chunks; --split's sum
// when given), and at least the 2 of every other lab (at p <= 2 the model is single's). The
// run's config (meta.json) records the depth it used, which the graders' references follow.
//
// Lexicon: pipeline parallelism, micro-batch, pipeline bubble, GPipe, 1F1B, interleaved 1F1B,
//          send/recv (point-to-point), 2D parallelism.
//
// The schedules (p stages, m micro-batches; s = this rank's stage, 0-based):
//   gpipe        every forward, then every backward. Stage s holds the activations of all m
//                micro-batches at once.
//   1f1b         warm-up: p-s-1 forwards; steady state: one forward, one backward; cool-down:
//                the last backwards. The same bubble as GPipe, but stage s never holds more
//                than p-s micro-batches' activations (GPipe: m).
//   interleaved  each rank holds v model CHUNKS (--chunks v), chunk k of the p v on rank k mod
//                p (Megatron-LM's interleaved 1F1B): a micro-batch goes round the ranks v
//                times, and the warm-up and cool-down shrink v-fold. Needs m a multiple of p.
// With forward cost 1 and backward 2 (per chunk), the bubble fraction of the step is
//     gpipe, 1f1b:   (p-1) / (m+p-1)          interleaved:   (p-1) / (v m + p-1)
// which the lab checks against its own schedule (simulated with those costs) and prints
// beside the fraction it measured.
//
// Messages: after F on chunk k, the output goes to chunk k+1's rank; after B, the gradient
// at the chunk's input goes to chunk k-1's rank. A rank sends to each neighbour in the order
// that neighbour will ask (its schedule is known to everyone), and every receive goes in one
// batch (dist_p2p) with the sends that are ready, as Megatron-LM's batched send/recv does:
// two neighbours that send each other something at the same moment cannot deadlock.
//
// --dp D (2-D, PP x DP): N = p D ranks, rank = s D + d: stage s of pipeline d. The global
// batch is split over the D pipelines; after the backward passes the D replicas of a stage
// all-reduce their gradients.
//
// What it is graded against (tests/test_pp.c):
//   loss and final weights  without --dp, BITWISE those of `single --accum m` (the same
//                  micro-batches, each layer's gradient accumulated in the same order, the
//                  gradient norm summed layer by layer in the same order); with --dp, equal
//                  within fp32 reordering
//   memory         params 4 Psi_s, grads 4 Psi_s, optim 8 Psi_s (Psi_s: this stage's
//                  parameters); activations: (micro-batches in flight) x (one micro-batch's
//                  activations of this stage's layers), plus the workspace
//   schedule       the bubble fraction from the span order (costs 1 and 2) equals the
//                  formula; GPipe holds m micro-batches, 1F1B at most p-s
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "check.h"
#include "data.h"
#include "dcp.h"
#include "dist.h"
#include "gpt.h"
#include "lab.h"
#include "mem.h"
#include "runlog.h"
#include "train.h"

// ---------------------------------------------------------------------------------------
// The pipeline: which layers each chunk holds, and each rank's order of work
// ---------------------------------------------------------------------------------------

typedef enum { SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED } Schedule;
static const char *schedule_names[] = {"gpipe", "1f1b", "interleaved"};

#define MAX_CHUNKS 64
#define MAX_SPLIT_BLOCKS 256  // --layers' own bound (core/catalog.c)

typedef struct {
    Schedule sched;
    int p, v, m, K;           // stages, chunks per rank, micro-batches, K = p v chunks
    int first[MAX_CHUNKS];    // chunk k holds layers first[k]..last[k] (0: embedding, L+1: head)
    int last[MAX_CHUNKS];
} Pipe;

// Chunk k runs on stage k mod p, as that rank's local chunk k / p.
static int stage_of(const Pipe *pp, int k) { return k % pp->p; }

typedef struct {
    int bwd, mb, k;  // backward?, micro-batch, global chunk
} Op;

// Stage s's operations, in order (2 m v of them). Forward and backward of micro-batches
// go in increasing order within each chunk, as `single --accum m` runs them.
static int schedule_ops(const Pipe *pp, int s, Op *out) {
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
static int expected_in_flight(const Pipe *pp, int s) {
    int p = pp->p, m = pp->m, v = pp->v;
    if (pp->sched == SCHED_GPIPE) return m;
    if (pp->sched == SCHED_1F1B) return p - s < m ? p - s : m;
    int warmup = m == p ? m * v : 2 * (p - s - 1) + (v - 1) * p;
    return warmup + 1 < m * v ? warmup + 1 : m * v;
}

static double bubble_formula(const Pipe *pp) { return (double)(pp->p - 1) / (pp->v * pp->m + pp->p - 1); }

// The schedule as text, one row per stage, one character per unit of time: forward of
// micro-batch 0, 1, ... as a b c ..., backward as A B C ... (two units), '.' for the bubble.
static void print_timeline(RunLog *log, const Pipe *pp, Op **ops, int nops, int **start, int makespan) {
    int width = makespan < 150 ? makespan : 150;
    char *row = malloc_check((size_t)makespan + 1);
    for (int s = 0; s < pp->p; s++) {
        memset(row, '.', (size_t)makespan);
        row[makespan] = 0;
        for (int i = 0; i < nops; i++) {
            char c = (char)((ops[s][i].bwd ? 'A' : 'a') + ops[s][i].mb % 26);
            for (int t = 0; t < (ops[s][i].bwd ? 2 : 1); t++) row[start[s][i] + t] = c;
        }
        runlog_printf(log, "  stage %d |%.*s%s|\n", s, width, row, makespan > width ? "..." : "");
    }
    free(row);
}

// ---------------------------------------------------------------------------------------
// One rank's stage: its layers' weights, gradients and AdamW state
// ---------------------------------------------------------------------------------------

typedef struct {
    GptConfig cfg;
    int nlayers;            // L + 2
    float **params, **grads, **m, **v;  // [nlayers]; NULL for layers of other stages
    size_t psi;             // this stage's parameters
} Stage;

static int holds(const Stage *st, int l) { return st->params[l] != NULL; }

static void stage_create(Stage *st, const Pipe *pp, int s, const GptConfig *c, const TrainArgs *a, Mem *mem) {
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

static void stage_destroy(Stage *st, Mem *mem) {
    for (int l = 0; l < st->nlayers; l++) {
        mem_free(mem, st->params[l]);
        mem_free(mem, st->grads[l]);
        mem_free(mem, st->m[l]);
        mem_free(mem, st->v[l]);
    }
    free(st->params), free(st->grads), free(st->m), free(st->v);
}

// The param_hash (hash.h) of this stage's layers, in layer order, on the device.
static uint64_t stage_hash(const Stage *st, const Mem *mem) {
    const void **bufs = calloc_check((size_t)st->nlayers, sizeof *bufs);
    size_t *bytes = calloc_check((size_t)st->nlayers, sizeof *bytes);
    int n = 0;
    for (int l = 0; l < st->nlayers; l++)
        if (holds(st, l)) {
            bufs[n] = st->params[l];
            bytes[n++] = gpt_layer_size(&st->cfg, l) * sizeof(float);
        }
    uint64_t h = device_param_hash(mem->dev, n, bufs, bytes, PARAM_HASH_INIT);
    free(bufs);
    free(bytes);
    return h;
}

// ---------------------------------------------------------------------------------------
// Running the schedule
// ---------------------------------------------------------------------------------------

// A message this rank sends: the output of F on chunk k (to chunk k+1's rank) or the
// gradient at the input of chunk k after B (to chunk k-1's rank).
typedef struct {
    int bwd, mb, k;   // the operation that produces it
    int to;           // the receiving stage
    DistP2p x;        // set when produced (a gradient is copied to a buffer of its own)
    int ready, sent;
} Msg;

typedef struct {
    const Pipe *pp;
    int s;                       // this rank's stage
    Msg *out;                    // what this stage sends, in the order its receivers ask for it
    int nout;
    DistGroup *pipe;             // this pipeline's ranks, group rank = stage
    Mem *mem;
    size_t msg_floats;           // B T C: every message is one micro-batch's [B T, C]
    GptActs *acts;               // [v * m]: (local chunk, micro-batch)'s activations while alive
    int broken;                  // SHARDLAB_TEST_BREAK=pp-drop-grad
    int live, live_max;          // micro-batches (x chunks) whose activations are held
    size_t live_bytes, live_bytes_max;
} Runner;

// Every message this stage sends, ordered as each receiver consumes them: receiver r's
// operations in its order, those whose input comes from this stage.
static void plan_messages(Runner *r) {
    const Pipe *pp = r->pp;
    int nops = 2 * pp->m * pp->v;
    Op *theirs = malloc_check((size_t)nops * sizeof *theirs);
    r->out = malloc_check((size_t)nops * sizeof *r->out);
    r->nout = 0;
    for (int to = 0; to < pp->p; to++) {
        if (to == r->s) continue;  // chunks on this rank hand over in memory
        schedule_ops(pp, to, theirs);
        for (int i = 0; i < nops; i++) {
            Op o = theirs[i];
            int from = o.bwd ? o.k + 1 : o.k - 1;  // the chunk that produces its input
            if (from < 0 || from >= pp->K || (o.bwd && o.k == pp->K - 1) || stage_of(pp, from) != r->s) continue;
            r->out[r->nout++] = (Msg){.bwd = o.bwd, .mb = o.mb, .k = from, .to = to};
        }
    }
    free(theirs);
}

static Msg *find_msg(Runner *r, int bwd, int mb, int k) {
    for (int i = 0; i < r->nout; i++)
        if (r->out[i].bwd == bwd && r->out[i].mb == mb && r->out[i].k == k) return &r->out[i];
    return NULL;
}

// Moves this stage's outgoing messages along, in each receiver's order: those under way and
// those next in line and ready. With `recv`, until it has arrived; else one pass that waits
// for nothing (finish = 0: the stage goes back to computing while the rest waits in the
// channels) or until every one of them is delivered (finish = 1). A gradient's own buffer is
// freed once it is delivered.
static void exchange(Runner *r, DistP2p *recv, int finish) {
    DistP2p ops[DIST_P2P_MAX] = {{0}};
    Msg *src[DIST_P2P_MAX] = {0};
    int n = 0;
    for (int to = 0; to < r->pp->p; to++) {
        if (to == r->s) continue;
        for (int i = 0; i < r->nout && n < DIST_P2P_MAX - 1; i++) {
            Msg *q = &r->out[i];
            if (q->to != to || q->sent) continue;
            if (!q->ready) break;  // the next one this receiver wants is not made yet
            ops[n] = q->x;
            src[n++] = q;
        }
    }
    int sends = n, until = finish ? n : -1;
    if (recv) ops[n] = *recv, until = n++;
    dist_p2p_progress(r->pipe, ops, n, until);
    for (int i = 0; i < sends; i++) {
        src[i]->x = ops[i];
        if (ops[i].moved < ops[i].n) continue;
        src[i]->sent = 1;
        if (src[i]->bwd) mem_free(r->mem, src[i]->x.buf);
    }
}

static int unsent(const Runner *r) {
    for (int i = 0; i < r->nout; i++)
        if (!r->out[i].sent) return 1;
    return 0;
}

typedef struct {
    const Corpus *corpus;
    const TrainArgs *a;
    RunLog *log;
    int first, micro;          // this pipeline's sequences start at `first`; micro-batches of `micro`
    float loss_scale;
    int64_t step;
    float *scratch, *dx;       // workspace
    int64_t busy_us;           // time in F and B this step
    int64_t t_end_us;          // when the last operation ended
} StepCtx;

static GptActs *slot(Runner *r, int k, int mb) { return &r->acts[(k / r->pp->p) * r->pp->m + mb]; }

// Runs one operation; returns the loss sum (forward of the last chunk), else 0.
static double run_op(Runner *r, Stage *st, StepCtx *x, Op o, uint8_t *tokens, uint8_t *targets) {
    const Pipe *pp = r->pp;
    const GptConfig *c = &st->cfg;
    const Ops *ops = r->mem->dev->ops;
    int k = o.k, lo = pp->first[k], hi = pp->last[k], K = pp->K;
    GptActs *a = slot(r, k, o.mb);
    if (lo == 0 || hi == c->layers + 1)  // only the embedding reads tokens, only the head targets
        train_micro_batch(x->corpus, x->a, x->step, x->first + o.mb * x->micro, x->micro, tokens, targets);
    char extra[64];
    snprintf(extra, sizeof extra, "\"chunk\":%d,\"stage\":%d", k, r->s);
    double loss = 0;
    if (!o.bwd) {
        // Activations for this chunk's layers, and its input: received, or handed over.
        gpt_acts_alloc_layers(a, c, x->micro, lo, hi, r->mem);
        size_t bytes = gpt_acts_layers_bytes(c, x->micro, lo, hi);
        r->live++, r->live_bytes += bytes;
        if (r->live > r->live_max) r->live_max = r->live;
        if (r->live_bytes > r->live_bytes_max) r->live_bytes_max = r->live_bytes;
        if (k > 0) {
            float *in = gpt_layer_output(c, a, lo - 1);
            if (stage_of(pp, k - 1) == r->s) {
                ops->copy(in, gpt_layer_output(c, slot(r, k - 1, o.mb), pp->last[k - 1]), r->msg_floats);
                exchange(r, NULL, 0);
            } else {
                DistP2p recv = {.send = 0, .peer = stage_of(pp, k - 1), .buf = in, .n = r->msg_floats, .tag = o.mb};
                exchange(r, &recv, 0);
            }
        } else {
            exchange(r, NULL, 0);
        }
        int64_t t0 = runlog_now_us();
        for (int l = lo; l <= hi; l++) loss += gpt_layer_forward(ops, c, l, st->params[l], a, tokens, targets, x->scratch);
        device_sync(r->mem->dev);
        int64_t t1 = runlog_now_us();
        runlog_span_extra(x->log, x->step, "fwd", o.mb, lo, t0, t1, 0, extra);
        x->busy_us += t1 - t0, x->t_end_us = t1;
        if (k < K - 1 && stage_of(pp, k + 1) != r->s) {
            Msg *q = find_msg(r, 0, o.mb, k);
            q->x = (DistP2p){.send = 1, .peer = q->to, .buf = gpt_layer_output(c, a, hi), .n = r->msg_floats, .tag = o.mb};
            q->ready = 1;
        }
    } else {
        // The gradient at this chunk's output: the head makes its own; else received, or
        // handed over from the next chunk on this rank (still in dx).
        if (k < K - 1 && stage_of(pp, k + 1) != r->s) {
            DistP2p recv = {.send = 0, .peer = stage_of(pp, k + 1), .buf = x->dx, .n = r->msg_floats, .tag = o.mb};
            exchange(r, &recv, 0);
        } else {
            exchange(r, NULL, 0);
        }
        int64_t t0 = runlog_now_us();
        for (int l = hi; l >= lo; l--)
            gpt_layer_backward(ops, c, l, st->params[l], st->grads[l], a, tokens, targets, x->loss_scale, x->dx,
                               x->scratch);
        device_sync(r->mem->dev);
        int64_t t1 = runlog_now_us();
        runlog_span_extra(x->log, x->step, "bwd", o.mb, lo, t0, t1, 0, extra);
        x->busy_us += t1 - t0, x->t_end_us = t1;
        if (k > 0 && stage_of(pp, k - 1) != r->s) {
            Msg *q = find_msg(r, 1, o.mb, k);
            float *buf = mem_alloc_floats(r->mem, MEM_COMM, r->msg_floats, "gradient on its way");
            ops->copy(buf, x->dx, r->msg_floats);
            if (r->broken && o.mb == 0) ops->zero(buf, r->msg_floats);  // the graders' own test
            q->x = (DistP2p){.send = 1, .peer = q->to, .buf = buf, .n = r->msg_floats, .tag = o.mb};
            q->ready = 1;
        }
        r->live--, r->live_bytes -= gpt_acts_layers_bytes(c, x->micro, lo, hi);
        gpt_acts_free(a, r->mem);
    }
    return loss;
}

// ---------------------------------------------------------------------------------------
// The lab
// ---------------------------------------------------------------------------------------

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
static void lay_out_pipe(Pipe *pp, TrainArgs *a, const char *split, int dp, int N) {
    if (N % dp != 0) usage_error("pp", "--dp %d does not divide the %d ranks", dp, N);
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
    if (pp->sched == SCHED_INTERLEAVED && (pp->m < pp->p || pp->m % pp->p != 0))
        usage_error("pp", "interleaved 1F1B sends micro-batches round the ranks in groups of %d: --micro %d must be "
                          "a multiple of the %d stages", pp->p, pp->m, pp->p);
    if (a->batch % (dp * pp->m) != 0)
        usage_error("pp", "--batch %d does not split into %d pipeline(s) x %d micro-batches of equal size", a->batch,
                    dp, pp->m);
    // Blocks per chunk: --split, or as even as can be (the first chunks take the remainder).
    if (!split)
        for (int k = 0; k < pp->K; k++) blocks[k] = L / pp->K + (k < L % pp->K);
    for (int k = 0, l = 1; k < pp->K; k++) {
        pp->first[k] = k == 0 ? 0 : l;  // chunk 0 starts with the embedding
        l += blocks[k];
        pp->last[k] = k == pp->K - 1 ? L + 1 : l - 1;  // the last chunk ends with the head
    }
}

// Every rank's order of work (a rank sends in the order its neighbours ask), and its
// simulation with costs 1 and 2: when each op starts, the makespan, the bubble it leaves.
typedef struct {
    Op **ops;     // [p][nops]
    int **start;  // [p][nops]
    int nops, makespan;
    double bubble;
} Timeline;

static void timeline_build(Timeline *tl, const Pipe *pp) {
    tl->nops = 2 * pp->m * pp->v;
    tl->ops = malloc_check((size_t)pp->p * sizeof *tl->ops);
    tl->start = malloc_check((size_t)pp->p * sizeof *tl->start);
    for (int t = 0; t < pp->p; t++) {
        tl->ops[t] = malloc_check((size_t)tl->nops * sizeof(Op));
        tl->start[t] = malloc_check((size_t)tl->nops * sizeof(int));
        schedule_ops(pp, t, tl->ops[t]);
    }
    tl->makespan = simulate(pp, tl->ops, tl->nops, tl->start);
    if (tl->makespan < 0) die("this is a bug in shardlab's schedules", "the %s schedule deadlocks", schedule_names[pp->sched]);
    tl->bubble = 1.0 - 3.0 * pp->m * pp->v / (double)tl->makespan;
}

static void timeline_free(Timeline *tl, const Pipe *pp) {
    for (int t = 0; t < pp->p; t++) free(tl->ops[t]), free(tl->start[t]);
    free(tl->ops), free(tl->start);
}

// One step's pipeline phase on this stage: its ops in order, messages in between, then what is
// still on its way. Returns the sum of its token losses; *measured: the bubble this rank saw,
// the part of the phase (from t0) it spent not computing.
static double run_schedule(Runner *run, Stage *st, StepCtx *x, const Op *ops, int nops, uint8_t *tokens,
                           uint8_t *targets, int64_t t0, double *measured) {
    x->busy_us = 0, x->t_end_us = t0;
    for (int i = 0; i < run->nout; i++) run->out[i].ready = run->out[i].sent = 0;
    run->live = 0, run->live_max = 0, run->live_bytes = 0, run->live_bytes_max = 0;
    double loss_sum = 0;
    for (int i = 0; i < nops; i++) loss_sum += run_op(run, st, x, ops[i], tokens, targets);
    while (unsent(run)) exchange(run, NULL, 1);
    *measured = 1.0 - (double)x->busy_us / (double)(x->t_end_us - t0 > 0 ? x->t_end_us - t0 : 1);
    return loss_sum;
}

// The lab's own invariants, as check events (at the first step): the simulated schedule's
// bubble is the formula's, and the micro-batches this stage held at once the schedule's bound.
static void check_schedule(RunLog *log, const Pipe *pp, const Timeline *tl, const Runner *run) {
    runlog_check(log, "bubble of this schedule (costs 1 and 2) = formula", fabs(tl->bubble - bubble_formula(pp)) < 1e-12,
                 tl->bubble, bubble_formula(pp));
    runlog_check(log, "micro-batch activations held at once = the schedule's",
                 run->live_max == expected_in_flight(pp, run->s), run->live_max, expected_in_flight(pp, run->s));
}

// The schedule of a step as a timeline, and its bubble three ways (rank 0, at the end).
static void report_schedule(RunLog *log, const Pipe *pp, const Timeline *tl, double measured) {
    char v_text[32];
    snprintf(v_text, sizeof v_text, ", v=%d chunks per rank", pp->v);
    runlog_printf(log, "\nthe %s schedule, p=%d m=%d%s (one column per unit of time: forward 1, backward 2; "
                       "a b c .. forward, A B C .. backward of micro-batch 0 1 2 .., '.' idle):\n",
                  schedule_names[pp->sched], pp->p, pp->m, pp->v > 1 ? v_text : "");
    print_timeline(log, pp, tl->ops, tl->nops, tl->start, tl->makespan);
    runlog_printf(log, "bubble: formula (p-1)/(%sm+p-1) = %.4f, this schedule with costs 1 and 2: %.4f, "
                       "measured (mean over ranks and steps): %.4f\n",
                  pp->v > 1 ? "v " : "", bubble_formula(pp), tl->bubble, measured);
}

// The stage's runner (its messages planned, a slot for the activations of each chunk and
// micro-batch) and the step's workspace: one pass's scratch, and the gradient flowing down
// through this rank's layers. Returns the workspace's bytes.
static size_t runner_create(Runner *run, StepCtx *x, const Pipe *pp, int s, DistGroup *pipe, const GptConfig *c, Mem *mem) {
    *run = (Runner){.pp = pp, .s = s, .pipe = pipe, .mem = mem, .msg_floats = (size_t)x->micro * c->seq * c->dim};
    const char *test_break = getenv("SHARDLAB_TEST_BREAK");
    run->broken = test_break && strcmp(test_break, "pp-drop-grad") == 0;
    if (run->broken)
        runlog_printf(x->log, "SHARDLAB_TEST_BREAK: deliberately broken: micro-batch 0's gradient is sent as zeros\n");
    plan_messages(run);
    run->acts = calloc_check((size_t)pp->v * pp->m, sizeof *run->acts);
    x->scratch = mem_alloc_floats(mem, MEM_ACTS, gpt_pass_scratch_floats(c, x->micro, mem->dev->kind == DEVICE_CUDA), "workspace");
    x->dx = mem_alloc_floats(mem, MEM_ACTS, run->msg_floats, "residual gradient");
    return mem_in_use(mem, MEM_ACTS);
}

// The global gradient norm, layer by layer in layer order as `single` sums it: each stage's
// per-layer sums of squares travel over the pipeline as raw bits (an all-gather copies words).
// layer_stage[l]: the stage that holds layer l.
static double global_grad_norm(const Stage *st, const GptConfig *c, const Mem *mem, DistGroup *pipe, int p,
                               const int *layer_stage) {
    int L2 = st->nlayers;
    double *sq = malloc_check((size_t)L2 * sizeof *sq), *sq_all = malloc_check((size_t)L2 * p * sizeof *sq_all);
    for (int l = 0; l < L2; l++)
        sq[l] = holds(st, l) ? mem->dev->ops->sum_of_squares(st->grads[l], gpt_layer_size(c, l)) : 0;
    dist_all_gather(pipe, (const float *)sq, (float *)sq_all, 2 * (size_t)L2 * p);
    double norm_sq = 0;
    for (int l = 0; l < L2; l++) norm_sq += sq_all[layer_stage[l] * L2 + l];
    free(sq), free(sq_all);
    return sqrt(norm_sq);
}

// AdamW on this stage's layers, with the global clip factor, at rate lr.
static void stage_update(Stage *st, const GptConfig *c, const Mem *mem, const TrainArgs *a, double norm, double lr,
                         int64_t step) {
    AdamW hyper = {.lr = (float)lr, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = (float)a->weight_decay};
    for (int l = 0; l < st->nlayers; l++) {
        if (!holds(st, l)) continue;
        size_t n = gpt_layer_size(c, l);
        if (a->clip > 0 && norm > a->clip) mem->dev->ops->scale_floats(st->grads[l], n, (float)(a->clip / norm));
        mem->dev->ops->adamw_update(&hyper, step, st->params[l], st->grads[l], st->m[l], st->v[l], n);
    }
    device_sync(mem->dev);
}

// The step's messages and collectives as spans (sends and receives with the time they were
// asked for); returns the time they took.
static int64_t log_comm_spans(RunLog *log, Dist *dist, DistRecord *records, int64_t step) {
    size_t k;
    int64_t comm_us = 0;
    while ((k = dist_drain_records(dist, records, LAB_MAX_RECORDS)) > 0)
        for (size_t i = 0; i < k; i++) {
            char extra[96] = "";
            if (records[i].coll == DIST_SEND || records[i].coll == DIST_RECV)
                snprintf(extra, sizeof extra, "\"issued_us\":%lld", (long long)records[i].issued_us);
            runlog_span_extra(log, step, dist_coll_name(records[i].coll), records[i].tag, -1, records[i].t0_us,
                              records[i].t1_us, records[i].bytes_sent + records[i].bytes_recv, extra);
            comm_us += records[i].t1_us - records[i].t0_us;
        }
    return comm_us;
}

// The whole model on rank 0 (pipeline 0's stages send it their layers) into whole, which rank
// 0 creates in host: for the summary's hash and --save. Returns rank 0's hash (0 elsewhere).
static uint64_t gather_whole_model(Gpt *whole, Mem *host, const Stage *st, const GptConfig *c, Mem *mem,
                                   DistGroup *pipe, int s, int d, int rank, const int *layer_stage, uint64_t seed) {
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
static void report_memory(RunLog *log, const Stage *st, const Pipe *pp, const GptConfig *c, const Mem *mem, int s,
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

int main(int argc, char **argv) {
    TrainArgs a;
    train_args_defaults(&a);
    // The options' types, bounds and defaults: core/catalog.c (--layers defaults to auto here:
    // see "The model's depth" in lay_out_pipe(); --chunks auto is -1).
    const char *sched_name, *split;
    int micro_batches, chunks, dp;
    LabBind own[] = {{"schedule", &sched_name}, {"micro", &micro_batches}, {"chunks", &chunks}, {"split", &split},
                     {"dp", &dp}};
    train_args_parse(&a, argc, argv, catalog_lab("pp"), own, 5);
    Pipe pp = {.m = micro_batches};
    for (int i = 0; i < 3; i++)
        if (strcmp(sched_name, schedule_names[i]) == 0) pp.sched = (Schedule)i;
    if (chunks > 0 && pp.sched != SCHED_INTERLEAVED)
        usage_error("pp", "--chunks is for --schedule interleaved (got --schedule %s)", sched_name);
    if (a.accum != 1)
        usage_error("pp", "the pipeline's micro-batches are its gradient accumulation: use --micro %d, not --accum",
                    a.accum);
    pp.v = pp.sched == SCHED_INTERLEAVED ? (chunks > 0 ? chunks : 2) : 1;

    Lab L;  // the harness (core/lab.h): ranks, device, collectives, run log, corpus, memory
    lab_open(&L, "pp", &a, argc, argv, 0);
    int N = L.world, rank = L.rank;
    lay_out_pipe(&pp, &a, split, dp, N);
    int s = rank / dp, d = rank % dp;  // this rank: stage s of pipeline d

    // Groups: pipeline d (its stages in order) and the data-parallel replicas of stage s.
    // Every rank builds both, in the same order (NCCL splits communicators collectively).
    int members[DIST_MAX_RANKS];
    DistGroup pipe, replicas;
    for (int t = 0; t < pp.p; t++) members[t] = t * dp + d;
    dist_group(&L.dist, &pipe, members, pp.p);
    for (int e = 0; e < dp; e++) members[e] = s * dp + e;
    dist_group(&L.dist, &replicas, members, dp);

    lab_begin(&L, "%d stage(s) x %d pipeline(s), schedule %s, %d micro-batches%s on %s, backend %s", pp.p, dp,
              schedule_names[pp.sched], pp.m, pp.v > 1 ? " (interleaved chunks)" : "", L.dev.name, L.backend);
    RunLog *log = &L.log;
    GptConfig cfg = L.cfg;
    Mem *mem = &L.mem;
    Stage st;
    stage_create(&st, &pp, s, &cfg, &a, mem);
    int per_pipe = a.batch / dp, micro = per_pipe / pp.m;
    Timeline tl;
    timeline_build(&tl, &pp);

    StrBuf fields;  // meta.json's: the schedule, and each model chunk's layers
    sb_init(&fields);
    sb_printf(&fields, "\"schedule\":\"%s\",\"micro\":%d,\"chunks\":%d,\"stages\":%d,\"dp\":%d,\"chunk_layers\":[",
              schedule_names[pp.sched], pp.m, pp.v, pp.p, dp);
    for (int k = 0; k < pp.K; k++) sb_printf(&fields, "%s[%d,%d]%s", k ? "," : "", pp.first[k], pp.last[k], k == pp.K - 1 ? "]" : "");
    lab_start(&L, gpt_num_params(&cfg), fields.data);
    sb_free(&fields);
    report_memory(log, &st, &pp, &cfg, mem, s, micro);
    runlog_printf(log, "\nrank %d is stage %d of pipeline %d; the pipeline trains on sequences %d..%d of each global "
                       "batch of %d, in %d micro-batches of %d\n",
                  rank, s, d, d * per_pipe, (d + 1) * per_pipe - 1, a.batch, pp.m, micro);

    Runner run;
    StepCtx x = {.corpus = &L.corpus, .a = &a, .log = log, .first = d * per_pipe, .micro = micro};
    size_t workspace = runner_create(&run, &x, &pp, s, &pipe, &cfg, mem);
    mem_reset_peak(mem);
    uint8_t *tokens = malloc_check((size_t)micro * a.seq), *targets = malloc_check((size_t)micro * a.seq);

    // Distributed checkpoints (dcp.h): a stage loads its layers whole; saving, the dp
    // replicas of a stage each write a 1/dp chunk of them.
    DcpState my_layers = {0}, my_chunk = {0};
    dcp_add_units(&my_layers, &cfg, st.params, st.m, st.v, 0, 1);
    dcp_add_units(&my_chunk, &cfg, st.params, st.m, st.v, d, dp);
    int64_t first_step = lab_first_step(&L, &my_layers, &L.dist.world_group);
    snprintf(L.saver.layout, sizeof L.saver.layout, "pp: %d stage(s) x %d pipeline(s); a stage's replicas each a 1/%d "
             "chunk of its layers", pp.p, dp, dp);
    double measured_sum = 0;
    int *layer_stage = malloc_check((size_t)st.nlayers * sizeof *layer_stage);  // which stage holds layer l
    for (int k = 0; k < pp.K; k++) for (int l = pp.first[k]; l <= pp.last[k]; l++) layer_stage[l] = stage_of(&pp, k);

    for (int64_t step = first_step; step <= a.steps; step++) {
        int interrupted = lab_step_begin(&L, step);
        if (interrupted) return interrupted;
        for (int l = 0; l < st.nlayers; l++)
            if (holds(&st, l)) mem->dev->ops->zero(st.grads[l], gpt_layer_size(&cfg, l));

        // 1. The schedule: this stage's forwards and backwards, messages in between.
        x.step = step, x.loss_scale = (float)(1.0 / L.tokens_per_step);
        double measured, loss_sum = run_schedule(&run, &st, &x, tl.ops[s], tl.nops, tokens, targets, L.t0_us, &measured);

        // 2. PP x DP: the replicas of this stage sum their gradients.
        if (dp > 1)
            for (int l = 0; l < st.nlayers; l++)
                if (holds(&st, l)) dist_all_reduce(&replicas, st.grads[l], gpt_layer_size(&cfg, l));

        // 3. The global gradient norm, over the pipeline's stages.
        double norm = global_grad_norm(&st, &cfg, mem, &pipe, pp.p, layer_stage);

        // 4. The loss of the global batch (the last stages have it) and the bubble, for the log.
        double loss = dist_sum_over_ranks(&L.dist.world_group, loss_sum) / L.tokens_per_step;
        double measured_mean = dist_sum_over_ranks(&L.dist.world_group, measured) / N;

        // 5. AdamW on this stage's layers, with the global clip factor, at the schedule's rate.
        double lr = train_lr(&a, step);
        int64_t t_opt = runlog_now_us();
        stage_update(&st, &cfg, mem, &a, norm, lr, step);
        int64_t t1 = runlog_now_us();
        runlog_span(log, step, "optim", -1, -1, t_opt, t1, 0);
        log_comm_spans(log, &L.dist, L.records, step);

        if (step == first_step) check_schedule(log, &pp, &tl, &run);
        double ms = (double)(t1 - L.t0_us) / 1000.0, busy_ms = (double)x.busy_us / 1000.0;
        measured_sum += measured_mean;
        char extra[320];
        snprintf(extra, sizeof extra,
                 "\"stage\":%d,\"pipeline\":%d,\"inflight_max\":%d,\"acts_held_max\":%zu,"
                 "\"workspace\":%zu,\"bubble\":{\"formula\":%.6f,\"logical\":%.6f,\"measured\":%.6f,"
                 "\"measured_rank\":%.6f}",
                 s, d, run.live_max, run.live_bytes_max, workspace, bubble_formula(&pp), tl.bubble, measured_mean, measured);
        StepRecord rec = {.step = step, .loss = loss, .lr = lr, .grad_norm = norm, .tokens = (int64_t)(per_pipe * a.seq),
                          .ms_work = ms, .ms_compute = busy_ms, .ms_comm = ms - busy_ms > 0 ? ms - busy_ms : 0,
                          .param_hash = stage_hash(&st, mem), .extra = extra};
        lab_step_end(&L, &rec, &my_chunk);
    }
    dcp_state_free(&my_layers);
    dcp_state_free(&my_chunk);
    const double measured = measured_sum / (double)(a.steps - first_step + 1);

    if (rank == 0) report_schedule(log, &pp, &tl, measured);

    Mem host;
    mem_init(&host, NULL);
    Gpt whole;
    uint64_t whole_hash = gather_whole_model(&whole, &host, &st, &cfg, mem, &pipe, s, d, rank, layer_stage, a.seed);
    if (a.save && rank == 0) {
        train_save_weights(&whole, a.save);
        runlog_printf(log, "weights: saved to %s\n", a.save);
    }
    char extra[256];
    snprintf(extra, sizeof extra,
             "\"schedule\":\"%s\",\"stages\":%d,\"micro\":%d,\"chunks\":%d,\"dp\":%d,\"bubble\":{\"formula\":%.6f,"
             "\"logical\":%.6f,\"measured\":%.6f}",
             schedule_names[pp.sched], pp.p, pp.m, pp.v, dp, bubble_formula(&pp), tl.bubble, measured);
    lab_finish(&L, whole_hash, extra);

    if (rank == 0) gpt_destroy(&whole);
    mem_destroy(&host);
    timeline_free(&tl, &pp);
    free(layer_stage), free(tokens), free(targets), free(run.out), free(run.acts);
    mem_free(mem, x.scratch);
    mem_free(mem, x.dx);
    stage_destroy(&st, mem);
    lab_close(&L);
    return 0;
}
