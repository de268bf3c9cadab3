// test_tp.c — the tensor-parallel lab graded from its run logs, against single and against itself.
//
// usage: test_tp OPTIMIZED_TP OPTIMIZED_SINGLE SANITIZED_TP BROKEN_TP
//
// Every formula here is computed from the model's shapes (default C = 64, T = 64, L = 2,
// NH = 4, V = 256, global batch B = 8), not by the lab's code. N ranks form D data-parallel
// replicas of t tensor-parallel ranks (rank = d t + r); K micro-batches of B' = B/(D K)
// sequences per replica, BT = B' T rows. What is checked, for t = 1, 2, 4; --sp at t = 2, 4
// (also with rows that start inside a sequence); D x t = 2x2, 2x4, 4x2; --vocab-parallel at
// t = 2, 4, with --sp, and all of it at once with --accum 2:
//   - the same training: the loss equals single's on the same global batch at every one of
//     the 10 steps within 1e-5 (single with --accum D K, so that both see the same
//     micro-batches). Only the order of fp32 additions differs (the row-parallel sums,
//     the vocabulary-parallel softmax). Measured: at most 6e-8 (1e-7 with
//     --vocab-parallel), the log's last digits; a TP whose f skips one backward all-reduce is
//     off by 1e-3, one that adds a row-parallel bias on every rank by 1.7e-3. And the loss
//     falls by > 1, and every rank logs the same (global) loss;
//   - the starting weights are single's bit for bit, and the whole model gathered at the end
//     is what --save writes: with --lr 0 the summary's hash equals single's; a run's saved
//     file, loaded by single --init, hashes as the run's summary;
//   - replicas: param_hash (the replicated parameters) is the same on every rank at every
//     step; shard_hash is the same on the ranks of a data-parallel group and differs between
//     tensor-parallel ranks; the last step's model_hash is the same on every rank and is the
//     summary's param_hash;
//   - parameters per rank: split_param_bytes x t = the bytes of the split tensors, whole
//     (4 (L (12C^2 + 7C) [+ V C])), and replicated_param_bytes = 4 ((V+T)C + 6LC + 2C [+ V C]);
//   - memory after every step, every rank: params and grads 4 (Psi_rep + Psi_split/t), optim
//     8 (...), comm 0, acts summed here tensor by tensor from what each layer keeps (R = BT
//     or BT/t rows of the residual stream with --sp); and --sp's acts below plain TP's, below
//     single's;
//   - collectives, from the span events of every rank: without --sp exactly 2 all-reduces
//     forward and 2 backward per block per micro-batch, with --sp 2 all-gathers + 2
//     reduce-scatters forward and the same backward, and nothing else in a block; each with
//     the ring's bytes (all-reduce 4 ((n - own chunk) + (n - next chunk)), reduce-scatter
//     4 (n - own), all-gather 4 (n - next), n = BT C: 2 (t-1)/t 4 BT C and (t-1)/t 4 BT C);
//     --vocab-parallel's head: an all-gather of t BT maxima and an all-reduce of 2 BT sums
//     forward, f's all-reduce (--sp: all-gather, reduce-scatter) of BT C; --sp: one
//     all-reduce of each layer's replicated gradients per step over the group; --dp: one
//     all-reduce per gradient buffer per step over the replicas, with the ring's bytes;
//   - the memory table's "DDP: X per rank" (check mem.ddp_total) is the total the ddp lab's
//     own table prints on the same N = D t ranks with the same --accum: DDP's activations of
//     B/(N K) sequences and its bucket buffers, not single's (where N K divides B: else DDP
//     cannot run that configuration);
//   - the graders catch a deliberately broken TP (BROKEN_TP, tests/breaks/tp.c: block 0's
//     attention f skips its backward all-reduce);
//   - bad input exits 2 with one line; the sanitized lab runs clean (N=2 --sp, and N=4 with
//     --dp 2 --sp --vocab-parallel --accum 2).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/runfiles/json.h"
#include "labtest.h"
#include "test.h"

static const char *tp_bin, *single, *tp_san, *tp_broken;
static const int STEPS = 10;
static const double LOSS_TOL = 1e-5;
#include "shardtest.h"

enum { C = 64, T = 64, L = 2, NH = 4, V = 256, BATCH = 8, MAX_MB = 4, LAYERS = L + 2 };
// The attention of every run here (--attn; flash is the labs' default, and ddp's table, run
// with the defaults, is compared as it stands): per token a block keeps NH/t log-sum-exps.
#define ATTN "flash"

typedef struct {
    const char *name, *what;
    int n, D, K, sp, vp;
} Config;

static int tp_of(const Config *c) { return c->n / c->D; }
static int rows_of(const Config *c) { return BATCH / (c->D * c->K) * T; }  // BT

// ---------------------------------------------------------------------------------------
// The formulas
// ---------------------------------------------------------------------------------------

// dist.h's chunks: n floats over p ranks, the first n % p chunks one float longer.
static double chunk(double n, int p, int c) { return floor(n / p) + (c < fmod(n, p) ? 1 : 0); }

// Bytes a ring collective of n floats sends from group rank r of p.
static double ring_bytes(const char *name, double n, int p, int r) {
    double mine = chunk(n, p, r), next = chunk(n, p, (r + 1) % p);
    if (strcmp(name, "all_reduce") == 0) return 4 * ((n - mine) + (n - next));
    if (strcmp(name, "reduce_scatter") == 0) return 4 * (n - mine);
    return 4 * (n - next);  // all_gather
}

// Floats per layer: replicated, and split (whole: a rank holds 1/t).
static double replicated_floats(int layer, int vp) {
    if (layer == 0) return (double)(V + T) * C;           // wte, wpe
    if (layer <= L) return 6.0 * C;                       // ln_1, ln_2, attn.c_proj.bias, mlp.c_proj.bias
    return 2.0 * C + (vp ? 0 : (double)V * C);            // ln_f, lm_head
}
static double split_floats(int layer, int vp) {
    if (layer == 0) return 0;
    // c_attn w (3C^2) and b (3C), attn.c_proj w (C^2), c_fc w (4C^2) and b (4C), mlp.c_proj w (4C^2)
    if (layer <= L) return 12.0 * C * C + 7.0 * C;
    return vp ? (double)V * C : 0;                        // lm_head, split by vocabulary rows
}

typedef struct {
    double rep, split;  // floats
} Params;

static Params params_of(int vp) {
    Params p = {0, 0};
    for (int l = 0; l < LAYERS; l++) p.rep += replicated_floats(l, vp), p.split += split_floats(l, vp);
    return p;
}

// What the forward pass keeps, tensor by tensor (floats), for a rank of config c.
static double acts_floats(const Config *c) {
    double t = tp_of(c), BT = rows_of(c), Bm = BT / T, R = c->sp ? BT / t : BT, H = c->vp ? BT : R;
    double Vh = c->vp ? V / t : V;
    double block = BT * C          // ln_1 output, all rows (the column-parallel c_attn reads it)
                   + 2 * R         // its mean and rstd, this rank's rows
                   + BT * 3 * C / t  // q, k, v of this rank's heads
                   + Bm * (NH / t) * T      // their attention rows' log-sum-exps (NH/t T T probabilities with --attn naive)
                   + BT * C / t    // attention output of its heads
                   + R * C         // res1
                   + BT * C + 2 * R  // ln_2 output, all rows; mean, rstd
                   + 2 * BT * 4 * C / t  // c_fc output before and after GELU, its 4C/t units
                   + R * C;        // the block's output
    return R * C + L * block + H * C + 2 * R + H * Vh;  // embedding output, blocks, ln_f, logits
}

// ---------------------------------------------------------------------------------------
// Reading a rank's TP-specific fields and spans
// ---------------------------------------------------------------------------------------

typedef struct {
    double split_bytes, rep_bytes, acts[MAX_STEPS];
    char shard[MAX_STEPS][17], model_hash[17];
    int coll[MAX_STEPS][3];  // the step event's tp_collectives: all_reduce, reduce_scatter, all_gather
    // Spans of f, g and the vocabulary-parallel loss: [step][mb][layer][fwd, bwd][kind]
    int spans[MAX_STEPS][MAX_MB][LAYERS][2][3];
    int rep_calls[MAX_STEPS], dp_calls[MAX_STEPS], other_calls;
    int bad_bytes;
    char bad[400];
} TpRank;

static int kind_of(const char *name) {
    return strcmp(name, "all_reduce") == 0       ? 0
           : strcmp(name, "reduce_scatter") == 0 ? 1
           : strcmp(name, "all_gather") == 0     ? 2
                                                 : -1;
}

static const char *str(const JsonValue *e, const char *key) {
    const JsonValue *v = json_get(e, key);
    return v && v->type == JSON_STRING ? v->string : "";
}

// The bytes a collective span of config c should have sent from world rank k, or -1 if it is
// not one whose bytes are checked.
static double expected_span_bytes(const Config *c, int k, const JsonValue *e) {
    int t = tp_of(c), r = k % t, d = k / t, layer = numi(e, "layer");
    const char *name = str(e, "name"), *op = str(e, "op"), *at = str(e, "at");
    double BT = rows_of(c);
    if (strcmp(op, "f") == 0 || strcmp(op, "g") == 0) return ring_bytes(name, BT * C, t, r);
    if (strcmp(op, "vocab_ce") == 0) return ring_bytes(name, strcmp(name, "all_gather") == 0 ? t * BT : 2 * BT, t, r);
    if (strcmp(op, "replicated_grads") == 0) return ring_bytes(name, replicated_floats(layer, c->vp), t, r);
    if (strcmp(op, "dp_grads") == 0)
        return ring_bytes(name, strcmp(at, "split") == 0 ? split_floats(layer, c->vp) / t : replicated_floats(layer, c->vp),
                          c->D, d);
    return -1;
}

static void read_tp(const char *dir, int k, const Config *c, TpRank *x) {
    memset(x, 0, sizeof *x);
    Events ev;
    load_rank_events(dir, k, &ev);
    int s = 0;
    for (int i = 0; i < ev.n; i++) {
        const JsonValue *e = ev.lines[i];
        if (strcmp(kind(e), "step") == 0 && s < MAX_STEPS) {
            x->split_bytes = num(e, "split_param_bytes"), x->rep_bytes = num(e, "replicated_param_bytes");
            x->acts[s] = num(json_get(e, "mem"), "acts");
            snprintf(x->shard[s], 17, "%s", str(e, "shard_hash"));
            if (json_get(e, "model_hash")) snprintf(x->model_hash, 17, "%s", str(e, "model_hash"));
            const JsonValue *tc = json_get(e, "tp_collectives");
            x->coll[s][0] = numi(tc, "all_reduce"), x->coll[s][1] = numi(tc, "reduce_scatter");
            x->coll[s][2] = numi(tc, "all_gather");
            s++;
            continue;
        }
        if (strcmp(kind(e), "span") != 0 || !json_get(e, "group")) continue;
        int step = numi(e, "step") - 1, mb = numi(e, "mb"), layer = numi(e, "layer");
        int kd = kind_of(str(e, "name")), bwd = strcmp(str(e, "pass"), "bwd") == 0;
        const char *op = str(e, "op");
        if (step < 0 || step >= MAX_STEPS) continue;
        int model = strcmp(op, "f") == 0 || strcmp(op, "g") == 0 || strcmp(op, "vocab_ce") == 0;
        if (model && mb >= 0 && mb < MAX_MB && layer >= 0 && layer < LAYERS && kd >= 0) x->spans[step][mb][layer][bwd][kd]++;
        else if (model) x->other_calls++;  // a model collective outside any micro-batch or layer
        if (strcmp(op, "replicated_grads") == 0) x->rep_calls[step]++;
        if (strcmp(op, "dp_grads") == 0) x->dp_calls[step]++;
        double want = expected_span_bytes(c, k, e), got = num(e, "bytes");
        if (want >= 0 && got != want && !x->bad_bytes++)
            snprintf(x->bad, sizeof x->bad, "step %d %s %s at %s layer %d (%s): %.0f bytes, the ring sends %.0f", step + 1,
                     str(e, "name"), op, str(e, "at"), layer, str(e, "pass"), got, want);
    }
    free_events(&ev);
}

// ---------------------------------------------------------------------------------------
// One configuration, every check
// ---------------------------------------------------------------------------------------

static RankLog references[5];  // single with --accum 1, 2, 4
static char reference_hash_lr0[17];

static const RankLog *reference(int accum) {
    int i = accum == 1 ? 0 : accum == 2 ? 1 : 2;
    if (references[i].n) return &references[i];
    char dir[512], acc[16], steps[16], tag[32];
    snprintf(dir, sizeof dir, "%s/single-accum%d", tmp, accum);
    snprintf(acc, sizeof acc, "%d", accum);
    snprintf(steps, sizeof steps, "%d", STEPS);
    snprintf(tag, sizeof tag, "single-accum%d", accum);
    char *argv[] = {(char *)single, "--steps", steps, "--accum", acc, "--attn", ATTN, "--run-dir", dir, NULL};
    EXPECT(run(argv, tag) == 0, "single --accum %d (the reference) runs", accum);
    read_rank(dir, 0, &references[i]);
    return &references[i];
}

// Every span of f and g and of the head's vocabulary-parallel loss, per step, micro-batch,
// block and pass, by kind.
static int collectives_are_formula(const Config *c, const TpRank *x, int k) {
    int ok = 1;
    char why[300] = "";
    for (int s = 0; s < STEPS; s++)
        for (int mb = 0; mb < MAX_MB; mb++)
            for (int l = 0; l < LAYERS; l++)
                for (int p = 0; p < 2; p++) {
                    int want[3] = {0, 0, 0};
                    if (mb < c->K && l >= 1 && l <= L) {
                        if (c->sp) want[1] = want[2] = 2;  // f and g: 2 reduce-scatters + 2 all-gathers
                        else want[0] = 2;                  // f and g: 2 all-reduces
                    }
                    if (mb < c->K && l == L + 1 && c->vp) {
                        if (p == 0) want[2] += 1, want[0] += 1;  // the row maxima; the sums of exp and target logits
                        if (c->sp) want[p == 0 ? 2 : 1] += 1;    // f before the head: all-gather / reduce-scatter
                        else if (p == 1) want[0] += 1;           // f's backward all-reduce
                    }
                    const int *got = x->spans[s][mb][l][p];
                    if ((got[0] != want[0] || got[1] != want[1] || got[2] != want[2]) && ok) {
                        snprintf(why, sizeof why, "rank %d step %d mb %d layer %d %s: %d all-reduces, %d reduce-scatters, "
                                                  "%d all-gathers; the formula: %d, %d, %d", k, s + 1, mb, l, p ? "bwd" : "fwd",
                                 got[0], got[1], got[2], want[0], want[1], want[2]);
                        ok = 0;
                    }
                }
    // The step event's own counts say the same.
    int per_step[3] = {0, 0, 0}, fields_ok = 1;
    for (int mb = 0; mb < c->K; mb++)
        for (int l = 0; l < LAYERS; l++)
            for (int p = 0; p < 2; p++)
                for (int kd = 0; kd < 3; kd++) per_step[kd] += x->spans[0][mb][l][p][kd];
    for (int s = 0; s < STEPS; s++)
        for (int kd = 0; kd < 3; kd++) fields_ok &= x->coll[s][kd] == per_step[kd];
    EXPECT(fields_ok, "%s: the step events' tp_collectives count them: %d all-reduces, %d reduce-scatters, %d all-gathers "
                      "per step", c->what, per_step[0], per_step[1], per_step[2]);
    return EXPECT(ok && x->other_calls == 0,
                  "%s: per block and micro-batch exactly %s forward and the same backward%s, at every step (%s)", c->what,
                  c->sp ? "2 all-gathers + 2 reduce-scatters" : "2 all-reduces",
                  c->vp ? ", and the vocabulary-parallel head's" : "", ok ? "rank 0's spans" : why);
}

static void check_config(const Config *c) {
    char name[64];
    snprintf(name, sizeof name, "%s", c->name);
    char dp[8], acc[8];
    snprintf(dp, sizeof dp, "%d", c->D);
    snprintf(acc, sizeof acc, "%d", c->K);
    char *args[12];
    int n = 0;
    args[n++] = "--dp", args[n++] = dp, args[n++] = "--accum", args[n++] = acc, args[n++] = "--attn", args[n++] = ATTN;
    if (c->sp) args[n++] = "--sp";
    if (c->vp) args[n++] = "--vocab-parallel";
    args[n] = NULL;
    Run run;
    run_lab(&run, tp_bin, name, c->n, args, NULL);
    if (!ran_clean(&run, c->what)) return;
    int t = tp_of(c);
    if (BATCH % (c->n * c->K) == 0) {
        double ddp = ddp_lab_total(tp_bin, c->n, c->K);
        EXPECT(run.r[0].ddp_total == ddp, "%s: \"DDP: X per rank\" is the total of ddp's own table on %d rank(s) with "
                                          "--accum %d (micro-batch %d, buckets included): %.0f bytes (ddp: %.0f)",
               c->what, c->n, c->K, BATCH / (c->n * c->K), run.r[0].ddp_total, ddp);
    }

    // The training: single's, up to the order of fp32 additions; and it trains (10 steps inside
    // the learning rate's 100-step warmup take the loss from 5.55 to 5.27).
    const RankLog *ref = reference(c->D * c->K);
    int at;
    double worst = worst_vs(&run.r[0], ref, &at);
    const RankLog *r0 = &run.r[0];
    EXPECT(worst <= LOSS_TOL && r0->loss[STEPS - 1] < r0->loss[0] - 0.15,
           "%s: loss equals single --accum %d's within %g at every step (worst %.2g at step %d) and falls (%.3f -> %.3f)",
           c->what, c->D * c->K, LOSS_TOL, worst, at, r0->loss[0], r0->loss[STEPS - 1]);

    int same_loss = 1;
    for (int k = 1; k < c->n; k++) same_loss &= same_losses(&run.r[k], r0);
    EXPECT(same_loss, "%s: every rank logs the same loss, the global batch's, at every step", c->what);

    // Replicas and slices.
    EXPECT(replicas_equal(&run), "%s: the replicated parameters are bitwise equal on all %d ranks after every step "
                                 "(param_hash), with no communication for them%s", c->what, c->n,
           c->sp ? " but the gradient all-reduce" : "");
    TpRank *x = malloc(c->n * sizeof *x);
    for (int k = 0; k < c->n; k++) read_tp(run.dir, k, c, &x[k]);
    int dp_same = 1, tp_differ = t > 1, model_same = strlen(run.final_hash) == 16;
    for (int k = 0; k < c->n; k++) {
        for (int s = 0; s < STEPS; s++) {
            dp_same &= strcmp(x[k].shard[s], x[k % t].shard[s]) == 0;  // rank k and rank r of replica 0
            if (k % t) tp_differ &= strcmp(x[k].shard[s], x[k - 1].shard[s]) != 0;
        }
        model_same &= strcmp(x[k].model_hash, run.final_hash) == 0;
    }
    EXPECT(dp_same && (t == 1 || tp_differ), "%s: shard_hash (the slices) equal on the ranks of each data-parallel group "
                                             "(D = %d), different between tensor-parallel ranks (t = %d)", c->what, c->D, t);
    EXPECT(model_same, "%s: the whole model gathered at the end hashes the same on every rank, as summary.json says (%s)",
           c->what, run.final_hash);

    // Parameters and memory, from the shapes.
    Params p = params_of(c->vp);
    int bytes_ok = 1;
    for (int k = 0; k < c->n; k++) bytes_ok &= x[k].split_bytes * t == 4 * p.split && x[k].rep_bytes == 4 * p.rep;
    EXPECT(bytes_ok, "%s: every rank holds 1/%d of the split tensors' %.0f bytes (%.0f) and all %.0f replicated bytes "
                     "(rank 0: %.0f, %.0f)",
           c->what, t, 4 * p.split, 4 * p.split / t, 4 * p.rep, x[0].split_bytes, x[0].rep_bytes);
    double mine = p.rep + p.split / t, acts = 4 * acts_floats(c);
    int mem_ok = 1, bad_rank = -1, bad_step = 0;
    for (int k = 0; k < c->n; k++)
        for (int s = 0; s < run.r[k].n; s++) {
            const RankLog *q = &run.r[k];
            int good = q->params[s] == 4 * mine && q->grads[s] == 4 * mine && q->optim[s] == 8 * mine && q->comm[s] == 0;
            if (!good && mem_ok) bad_rank = k, bad_step = s;
            mem_ok &= good;
        }
    const RankLog *q = &run.r[bad_rank < 0 ? 0 : bad_rank];
    EXPECT(mem_ok, "%s: memory after every step = params %.0f, grads %.0f, optim %.0f, comm 0 (4, 4, 8 x (Psi_rep + "
                   "Psi_split/t)); %s rank %d step %d: %.0f %.0f %.0f %.0f", c->what, 4 * mine, 4 * mine, 8 * mine,
           mem_ok ? "measured" : "first mismatch", bad_rank < 0 ? 0 : bad_rank, bad_step + 1, q->params[bad_step],
           q->grads[bad_step], q->optim[bad_step], q->comm[bad_step]);
    int acts_ok = 1;
    for (int k = 0; k < c->n; k++)
        for (int s = 0; s < STEPS; s++) acts_ok &= x[k].acts[s] == acts;
    EXPECT(acts_ok, "%s: activations after every step, every rank: %.0f bytes, what each layer keeps summed tensor by "
                    "tensor (rank 0, step 1: %.0f)", c->what, acts, x[0].acts[0]);

    // Communication, from every rank's spans.
    int coll_ok = 1, bytes_span_ok = 1, rep_ok = 1, dp_ok = 1;
    const char *bad = "";
    int dp_buffers = 0;
    for (int l = 0; l < LAYERS; l++) dp_buffers += (replicated_floats(l, c->vp) > 0) + (split_floats(l, c->vp) > 0);
    for (int k = 0; k < c->n; k++) {
        coll_ok &= k == 0 ? collectives_are_formula(c, &x[k], k) : 1;
        if (k > 0) {  // the other ranks: the same tallies as rank 0 (each checked against the formula via rank 0)
            int same = memcmp(x[k].spans, x[0].spans, sizeof x[0].spans) == 0;
            if (!same && coll_ok) coll_ok = EXPECT(0, "%s: rank %d's collectives differ from rank 0's", c->what, k);
        }
        if (x[k].bad_bytes && bytes_span_ok) bytes_span_ok = 0, bad = x[k].bad;
        for (int s = 0; s < STEPS; s++) {
            rep_ok &= x[k].rep_calls[s] == (c->sp ? LAYERS : 0);
            dp_ok &= x[k].dp_calls[s] == (c->D > 1 ? dp_buffers : 0);
        }
    }
    EXPECT(bytes_span_ok, "%s: every collective sent the ring's bytes (n = BT C = %d floats for f and g%s)%s%s", c->what,
           rows_of(c) * C, t > 1 ? "" : "; 0 in a group of one", bytes_span_ok ? "" : ": ", bad);
    if (c->sp)
        EXPECT(rep_ok, "%s: one all-reduce of each layer's replicated gradients per step over the group (%d)", c->what, LAYERS);
    else
        EXPECT(rep_ok, "%s: no communication for the replicated parameters' gradients", c->what);
    if (c->D > 1)
        EXPECT(dp_ok, "%s: one all-reduce per gradient buffer per step over the %d replicas (%d)", c->what, c->D, dp_buffers);
    else
        EXPECT(dp_ok, "%s: no data-parallel all-reduces with one replica", c->what);
    free(x);
}

// ---------------------------------------------------------------------------------------
// Weights: the start is single's, the end is what --save writes
// ---------------------------------------------------------------------------------------

static int summary_hash(const char *dir, char out[17]) {
    JsonValue *s = load_json_file(dir, "summary.json");
    const JsonValue *h = s ? json_get(s, "param_hash") : NULL;
    int ok = h && h->type == JSON_STRING;
    snprintf(out, 17, "%s", ok ? h->string : "");
    json_free(s);
    return ok;
}

static void check_weights(void) {
    char dir[512], hash[17];
    snprintf(dir, sizeof dir, "%s/single-lr0", tmp);
    char *sargv[] = {(char *)single, "--steps", "1", "--lr", "0", "--run-dir", dir, NULL};
    EXPECT(run(sargv, "single-lr0") == 0 && summary_hash(dir, reference_hash_lr0), "single --lr 0 --steps 1 runs");
    struct {
        int n;
        char *args[10];
        const char *what;
    } cases[] = {
        {4, {"--lr", "0", "--steps", "1", NULL}, "t=4"},
        {4, {"--lr", "0", "--steps", "1", "--dp", "2", "--sp", "--vocab-parallel", NULL}, "D=2 t=2 --sp --vocab-parallel"},
    };
    for (int i = 0; i < 2; i++) {
        char tag[32];
        snprintf(tag, sizeof tag, "lr0-%d", i);
        snprintf(dir, sizeof dir, "%s/%s", tmp, tag);
        int status = run_ranks(tp_bin, cases[i].n, tag, dir, cases[i].args, NULL);
        EXPECT(status == 0 && summary_hash(dir, hash) && strcmp(hash, reference_hash_lr0) == 0,
               "%s --lr 0: the whole model, sliced over the ranks and gathered back, is single's starting model bit for "
               "bit (hash %s, single's %s)", cases[i].what, hash, reference_hash_lr0);
    }
    // A trained model, saved in GPT-2 names from the gathered slices, loads into single.
    char save[600], run_dir[512], init_dir[512];
    snprintf(save, sizeof save, "%s/tp.safetensors", tmp);
    snprintf(run_dir, sizeof run_dir, "%s/save", tmp);
    char *targs[] = {"--steps", "10", "--dp", "2", "--sp", "--vocab-parallel", "--save", save, NULL};
    int status = run_ranks(tp_bin, 4, "save", run_dir, targs, NULL);
    char trained[17] = "";
    summary_hash(run_dir, trained);
    snprintf(init_dir, sizeof init_dir, "%s/single-init", tmp);
    char *iargv[] = {(char *)single, "--steps", "1", "--lr", "0", "--init", save, "--run-dir", init_dir, NULL};
    EXPECT(status == 0 && run(iargv, "single-init") == 0 && summary_hash(init_dir, hash) && strcmp(hash, trained) == 0,
           "D=2 t=2 --sp --vocab-parallel --save: single --init loads the file, and its weights hash as the run's "
           "gathered model (%s vs %s)", hash, trained);
}

// ---------------------------------------------------------------------------------------
// The graders' own test, bad input, sanitizers
// ---------------------------------------------------------------------------------------

static void check_broken_is_caught(void) {
    char *args[] = {NULL};
    Run run;
    run_lab(&run, tp_broken, "broken", 2, args, NULL);
    EXPECT(run.status == 0 && run.r[0].n == STEPS,
           "the deliberately broken lab (f skips one backward all-reduce) runs to the end");
    int at;
    double worst = worst_vs(&run.r[0], reference(1), &at);
    int loss_caught = worst > LOSS_TOL, replica_caught = !replicas_equal(&run);
    EXPECT(loss_caught || replica_caught, "broken TP: caught (loss off single's by %.2g at step %d: %s; replicated "
                                          "parameters differ between the ranks: %s)", worst, at,
           loss_caught ? "caught" : "missed", replica_caught ? "caught" : "missed");
}

static void check_bad_input(void) {
    struct {
        int n;
        char *args[10];
        const char *what;
    } cases[] = {
        {3, {NULL}, "3 tensor-parallel ranks, --heads 4"},
        {4, {"--dp", "3", NULL}, "--dp 3 on 4 ranks"},
        {4, {"--dp", "2", "--batch", "3", NULL}, "--batch 3 over 2 replicas"},
        {2, {"--sp", "--seq", "5", "--batch", "1", NULL}, "--sp, 2 ranks, 5 token rows"},
        {2, {"--sp", "--seq", "5", "--batch", "2", "--accum", "2", NULL}, "--sp, 2 ranks, B T/accum = 5"},
        {3, {"--heads", "3", "--dim", "63", "--vocab-parallel", NULL}, "--vocab-parallel, 3 ranks, V = 256"},
        {2, {"--dp", "0", NULL}, "--dp 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char tag[32];
        snprintf(tag, sizeof tag, "bad%zu", i);
        exits_2_with_one_line(tp_bin, cases[i].n, cases[i].args, cases[i].what, tag);
    }
}

static void check_sanitized(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/san", tmp);
    char *args[] = {"--sp", "--steps", "3", NULL};
    int status = run_ranks(tp_san, 2, "san", dir, args, NULL);
    EXPECT(status == 0, "the sanitized lab (N=2 --sp, 3 steps) exits 0 (status %d)", status);
    snprintf(dir, sizeof dir, "%s/san4", tmp);
    char *args4[] = {"--dp", "2", "--sp", "--vocab-parallel", "--accum", "2", "--steps", "2", NULL};
    status = run_ranks(tp_san, 4, "san4", dir, args4, NULL);
    EXPECT(status == 0, "the sanitized lab (N=4 --dp 2 --sp --vocab-parallel --accum 2, 2 steps) exits 0 (status %d)", status);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s OPTIMIZED_TP OPTIMIZED_SINGLE SANITIZED_TP BROKEN_TP\n", argv[0]);
        return 2;
    }
    tp_bin = argv[1], single = argv[2], tp_san = argv[3], tp_broken = argv[4];
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-tp-XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    static const Config configs[] = {
        {"t1", "t=1", 1, 1, 1, 0, 0},
        {"t2", "t=2", 2, 1, 1, 0, 0},
        {"t4", "t=4", 4, 1, 1, 0, 0},
        {"sp2", "t=2 --sp", 2, 1, 1, 1, 0},
        {"sp4", "t=4 --sp", 4, 1, 1, 1, 0},
        {"sp4-accum4", "t=4 --sp --accum 4 (128 rows: each rank's 32 start or end inside a sequence)", 4, 1, 4, 1, 0},
        {"dp2-t2", "D=2 x t=2", 4, 2, 1, 0, 0},
        {"dp2-t4", "D=2 x t=4", 8, 2, 1, 0, 0},
        {"dp4-t2", "D=4 x t=2", 8, 4, 1, 0, 0},
        {"vp2", "t=2 --vocab-parallel", 2, 1, 1, 0, 1},
        {"vp4", "t=4 --vocab-parallel", 4, 1, 1, 0, 1},
        {"vp2-sp", "t=2 --vocab-parallel --sp", 2, 1, 1, 1, 1},
        {"all", "D=2 x t=2 --sp --vocab-parallel --accum 2", 4, 2, 2, 1, 1},
    };
    for (size_t i = 0; i < sizeof configs / sizeof configs[0]; i++) check_config(&configs[i]);
    // Sequence parallelism's point: the residual stream's activations are 1/t the size.
    double single_acts = 4.0 * BATCH * T * (2 * C + 2 + V + L * (16 * C + 4 + NH));  // flash attention
    double plain = 4 * acts_floats(&configs[2]), seq = 4 * acts_floats(&configs[4]);
    EXPECT(seq < plain && plain < single_acts, "t=4: activations single %.0f > tensor-parallel %.0f > with --sp %.0f bytes",
           single_acts, plain, seq);
    check_weights();
    check_broken_is_caught();
    check_bad_input();
    check_sanitized();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (test_failed == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return test_done();
}
