// test_ckpt.c — the activation-checkpointing lab graded from its run logs, against single.
//
// usage: test_ckpt OPTIMIZED_CKPT OPTIMIZED_SINGLE SANITIZED_CKPT BROKEN_CKPT
//
// What is checked (a model of L = 6 blocks, C = 32, T = 16, global batch 8 in 2 micro-batches
// per rank; 6 blocks so that every policy differs: c = 6, 3, 2 checkpointed blocks for every,
// 2, 3, and sqrt's segments of s = 3). The formulas are computed here from the model's shapes
// and the policies' definitions, not read from the lab:
//   - recomputation changes memory and time, never results: for none, every, sqrt, 2 and 3, at
//     N = 1 and N = 2, the loss of every step and the param_hash of every step on every rank
//     are BITWISE those of --policy none at the same N; the N = 2 replicas are bitwise equal;
//   - the training is single's: at N = 1, --policy none (micro-batches of 4) is bitwise
//     `single --accum 2`; at N = 2 (micro-batches of 2, all-reduced) within 1e-6 of it over 6
//     steps. The tolerance: the all-reduce and the split into micro-batches add fp32 numbers
//     in another order, nothing else (measured: about 1e-8); a lost or doubled gradient moves
//     the loss by 1e-3 within two steps;
//   - memory: the acts category between steps is exactly the policy's saved activations
//       none 4BT(2C+2+V+Lb), K 4BT(2C+2+V+(L-c)b+cC+b-C), every 4BT(2C+2+V+LC+b-C),
//       sqrt 4BT(2C+2+V+nC+sb-C), b = 16C+4+NH T,
//     and its peak in a step is that plus the pass's workspace W = 4 (S + B T C) (S: the
//     scratch of gpt_scratch_floats, written out below), to the byte; so the peak is strictly
//     ordered none > 3 > 2 > sqrt > every here (the test asks for none > sqrt >= every);
//   - the spans show the recompute: for each step and micro-batch, the compute spans are
//     exactly fwd 0..L+1, then from the head down, before the backward of a segment's last
//     block, "recompute" of the segment's blocks in order: none has none, K exactly blocks K,
//     2K, ..., every and sqrt all blocks, once per micro-batch;
//   - the comparison table: each policy's row (none, every, sqrt, and K) left its two check
//     events (peak = formula + W, no layer's gradients differ from none's), all ok;
//   - the graders catch a lab that skips the recompute (BROKEN_CKPT, tests/breaks/ckpt.c):
//     with the comparison pass off, the bitwise check against none fails; with it on, the
//     lab's own check fails it;
//   - bad input exits 2 with one line; the sanitized lab runs clean.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/runfiles/json.h"
#include "labtest.h"
#include "test.h"

static const char *ckpt, *single, *ckpt_san, *ckpt_broken;
static const int STEPS = 6;
#include "shardtest.h"

// The model of every run here, as command-line options and as numbers.
// The attention these runs use (--attn): flash, the default, for the whole suite; naive once
// more at the end (check_naive), for policy none and sqrt, against single with naive.
static const char *attn = "flash";
#define MODEL "--layers", "6", "--dim", "32", "--heads", "4", "--seq", "16", "--batch", "8", "--accum", "2", \
              "--attn", (char *)attn
enum { L = 6, C = 32, NH = 4, T = 16, V = 256, BATCH = 8, ACCUM = 2 };

// ---------------------------------------------------------------------------------------
// The policies, from their definitions
// ---------------------------------------------------------------------------------------

typedef struct {
    const char *name;  // --policy
    int K;             // 0 for none and sqrt
    int nseg, first[L], last[L];
} Policy;

static Policy policy(const char *name) {
    Policy p = {.name = name};
    if (strcmp(name, "sqrt") == 0) {
        int s = 1;
        while (s * s < L) s++;
        for (int l = 1; l <= L; l += s) p.first[p.nseg] = l, p.last[p.nseg++] = l + s - 1 < L ? l + s - 1 : L;
    } else if (strcmp(name, "none") != 0) {
        p.K = strcmp(name, "every") == 0 ? 1 : atoi(name);
        for (int l = p.K; l <= L; l += p.K) p.first[p.nseg] = p.last[p.nseg] = l, p.nseg++;
    }
    return p;
}

static int recomputed(const Policy *p) {
    int r = 0;
    for (int i = 0; i < p->nseg; i++) r += p->last[i] - p->first[i] + 1;
    return r;
}

// Saved activations, bytes, for micro-batches of B sequences (the lab's top comment).
static double acts_bytes(const Policy *p, int B) {
    // b: a block's floats per token, NH T attention probabilities (naive) or NH log-sum-exps (flash)
    double b = 16.0 * C + 4 + (strcmp(attn, "flash") ? (double)NH * T : NH), per_token = 2.0 * C + 2 + V;
    if (strcmp(p->name, "none") == 0) per_token += L * b;
    else if (strcmp(p->name, "sqrt") == 0) {
        double s = ceil(sqrt(L)), n = ceil(L / s);
        per_token += n * C + s * b - C;
    } else {
        double c = floor((double)L / p->K);
        per_token += (L - c) * b + c * C + b - C;
    }
    return 4.0 * B * T * per_token;
}

// The pass's workspace: gpt_scratch_floats (a transposed weight, the block backward's
// 6 B T C + 2 T (dfch [B T, 4C], where datty and dqkv go once it is read, dln and dres1
// [B T, C]), the head backward's B T (V + C), whichever is largest) and the residual
// gradient B T C.
static double workspace_bytes(int B) {
    double BT = (double)B * T, fwd = fmax(4.0 * C * C, (double)V * C);
    // the attention backward's scratch: 2T (naive), or flash's D [T], P and dS tiles and the
    // key tile's dK and dV (ops.h, FLASH_SCRATCH_FLOATS with 32-row tiles and hs = C/NH)
    double att = strcmp(attn, "flash") ? 2.0 * T : T + 2.0 * 32 * 32 + 2.0 * 32 * (C / NH);
    double scratch = fmax(fmax(fwd, 6 * BT * C + att), BT * V + BT * C);
    return 4.0 * (scratch + BT * C);
}

// ---------------------------------------------------------------------------------------
// Reading a run: memory, the compute spans' order, the comparison table's checks
// ---------------------------------------------------------------------------------------

typedef struct {
    double acts[MAX_STEPS], peak_acts[MAX_STEPS];
    int recomputed_field[MAX_STEPS], policy_field_ok;
    int spans_ok;
    char spans_problem[200];
    int table_checks, table_checks_ok;  // "ckpt.<policy>.*" check events
} CkptLog;

// The compute spans one micro-batch must leave, in order: (name, layer).
static int expected_spans(const Policy *p, const char **name, int *layer) {
    int n = 0;
    for (int l = 0; l <= L + 1; l++) name[n] = "fwd", layer[n++] = l;
    for (int l = L + 1; l >= 0; l--) {
        for (int i = 0; i < p->nseg; i++)
            if (p->last[i] == l)
                for (int j = p->first[i]; j <= l; j++) name[n] = "recompute", layer[n++] = j;
        name[n] = "bwd", layer[n++] = l;
    }
    return n;
}

static void read_ckpt(const char *dir, int rank, const Policy *p, CkptLog *r) {
    memset(r, 0, sizeof *r);
    r->spans_ok = r->policy_field_ok = 1;
    const char *want_name[64];
    int want_layer[64], nwant = expected_spans(p, want_name, want_layer);
    static Events ev;
    load_rank_events(dir, rank, &ev);
    // seen[step][mb]: how many compute spans of that micro-batch so far
    int seen[MAX_STEPS + 1][ACCUM] = {{0}}, steps = 0;
    for (int i = 0; i < ev.n; i++) {
        const JsonValue *e = ev.lines[i];
        const char *k = kind(e);
        if (strcmp(k, "step") == 0 && steps < MAX_STEPS) {
            r->acts[steps] = num(json_get(e, "mem"), "acts");
            r->peak_acts[steps] = num(json_get(e, "peak_by"), "acts");
            r->recomputed_field[steps] = numi(e, "recomputed_blocks");
            const JsonValue *pol = json_get(e, "policy");
            r->policy_field_ok &= pol && pol->type == JSON_STRING && strcmp(pol->string, p->name) == 0;
            steps++;
        } else if (strcmp(k, "check") == 0 && strncmp(json_get(e, "name")->string, "ckpt.", 5) == 0) {
            r->table_checks++;
            r->table_checks_ok += json_get(e, "ok")->boolean;
        } else if (strcmp(k, "span") == 0) {
            const char *name = json_get(e, "name")->string;
            if (strcmp(name, "fwd") && strcmp(name, "bwd") && strcmp(name, "recompute")) continue;
            int s = numi(e, "step"), mb = numi(e, "mb"), layer = numi(e, "layer");
            int at = s >= 1 && s <= MAX_STEPS && mb >= 0 && mb < ACCUM ? seen[s][mb]++ : nwant;
            if (r->spans_ok && (at >= nwant || strcmp(name, want_name[at]) || layer != want_layer[at])) {
                r->spans_ok = 0;
                snprintf(r->spans_problem, sizeof r->spans_problem, "step %d mb %d span %d: %s of layer %d, expected %s of layer %d",
                         s, mb, at, name, layer, at < nwant ? want_name[at] : "nothing", at < nwant ? want_layer[at] : -1);
            }
        }
    }
    for (int s = 1; s <= STEPS && r->spans_ok; s++)
        for (int mb = 0; mb < ACCUM; mb++)
            if (seen[s][mb] != nwant && r->spans_ok) {
                r->spans_ok = 0;
                snprintf(r->spans_problem, sizeof r->spans_problem, "step %d mb %d: %d compute spans, expected %d", s,
                         mb, seen[s][mb], nwant);
            }
    free_events(&ev);
}

// ---------------------------------------------------------------------------------------
// The checks
// ---------------------------------------------------------------------------------------

static const char *POLICIES[] = {"none", "every", "sqrt", "2", "3"};
enum { NPOL = 5 };
static Run runs[2][NPOL];  // [N-1][policy]
static Run ref;            // single --accum 2

static void run_policy(Run *run, const char *bin, const char *pol, int n, const char *compare) {
    char name[64];
    snprintf(name, sizeof name, "%s-n%d-%s%s", pol, n, bin == ckpt_broken ? "broken-" : "", compare);
    char *args[] = {MODEL, "--policy", (char *)pol, "--compare", (char *)compare, NULL};
    run_lab(run, bin, name, n, args, NULL);
}

// The bitwise check: every step's loss and every rank's param_hash after every step are
// those of policy none at the same N, and so are the final weights.
static int bitwise_equal(const Run *run, const Run *none, char *why, size_t n) {
    if (!same_losses(&run->r[0], &none->r[0])) {
        int at;
        double worst = worst_vs(&run->r[0], &none->r[0], &at);
        snprintf(why, n, "loss off by %.3g at step %d", worst, at);
        return 0;
    }
    for (int k = 0; k < run->n; k++)
        for (int s = 0; s < STEPS; s++)
            if (strcmp(run->r[k].hash[s], none->r[k].hash[s]) != 0) {
                snprintf(why, n, "rank %d's param_hash differs at step %d (%s vs %s)", k, s + 1, run->r[k].hash[s],
                         none->r[k].hash[s]);
                return 0;
            }
    if (strcmp(run->final_hash, none->final_hash) != 0) {
        snprintf(why, n, "final hash %s vs %s", run->final_hash, none->final_hash);
        return 0;
    }
    snprintf(why, n, "final hash %s", run->final_hash);
    return 1;
}

static void grade(int n, int pi) {
    Run *run = &runs[n - 1][pi], *none = &runs[n - 1][0];
    Policy p = policy(POLICIES[pi]);
    char what[64], why[200];
    snprintf(what, sizeof what, "--policy %s at N=%d", p.name, n);
    if (!ran_clean(run, what)) return;
    // Recomputation writes the same bits: the whole training is policy none's.
    EXPECT(bitwise_equal(run, none, why, sizeof why), "%s: losses and every rank's param_hash at every step bitwise "
           "those of --policy none (%s)", what, why);
    // Data parallelism underneath: the replicas take the same steps from the same gradient.
    if (n > 1) EXPECT(replicas_equal(run), "%s: the %d replicas' param_hash equal after every step", what, n);

    int micro = BATCH / n / ACCUM, mem_ok = 1, spans_ok = 1, fields_ok = 1, table_ok = 1;
    double want = acts_bytes(&p, micro), W = workspace_bytes(micro);
    char detail[300] = "";
    for (int k = 0; k < n; k++) {
        CkptLog c;
        read_ckpt(run->dir, k, &p, &c);
        for (int s = 0; s < STEPS; s++) {
            if ((c.acts[s] != want || c.peak_acts[s] != want + W) && mem_ok) {
                snprintf(detail, sizeof detail, "rank %d step %d: acts %.0f peak %.0f; ", k, s + 1, c.acts[s],
                         c.peak_acts[s]);
                mem_ok = 0;
            }
            fields_ok &= c.recomputed_field[s] == recomputed(&p);
        }
        fields_ok &= c.policy_field_ok;
        if (!c.spans_ok && spans_ok) {
            snprintf(detail + strlen(detail), sizeof detail - strlen(detail), "rank %d: %s", k, c.spans_problem);
            spans_ok = 0;
        }
        // none, every, sqrt (and K when K is the policy): two checks a row
        int rows = p.K > 1 ? 4 : 3;
        table_ok &= c.table_checks == 2 * rows && c.table_checks_ok == 2 * rows;
    }
    // Memory: the saved activations are the formula, and the step's peak adds only W.
    EXPECT(mem_ok, "%s: acts between steps = %s = %.0f B, its peak in a step = that + W (%.0f B), every step, every "
           "rank %s", what, p.K > 1 ? "4BT(2C+2+V+(L-c)b+cC+b-C)" : strcmp(p.name, "every") == 0 ?
           "4BT(2C+2+V+LC+b-C)" : strcmp(p.name, "sqrt") == 0 ? "4BT(2C+2+V+nC+sb-C)" : "4BT(2C+2+V+Lb)",
           want, W, detail);
    // The spans show the recompute, in its place, once per micro-batch, and only where it is due.
    EXPECT(spans_ok, "%s: every micro-batch's spans are fwd 0..%d, then per layer from the head down, recompute "
           "of the segment ending there (%d block(s) in all), then bwd %s", what, L + 1, recomputed(&p), detail);
    EXPECT(fields_ok, "%s: step events carry \"policy\":\"%s\" and \"recomputed_blocks\":%d", what, p.name,
           recomputed(&p));
    // The comparison table: each row's memory and gradient checks, all ok, on every rank.
    EXPECT(table_ok, "%s: the comparison table's check events (2 per policy row) all present and ok", what);
}

static void check_peaks(int n) {
    int micro = BATCH / n / ACCUM, ordered = 1;
    double peak[NPOL];
    for (int i = 0; i < NPOL; i++) {
        CkptLog c;
        Policy p = policy(POLICIES[i]);
        read_ckpt(runs[n - 1][i].dir, 0, &p, &c);
        peak[i] = c.peak_acts[0];
        ordered &= peak[i] == acts_bytes(&p, micro) + workspace_bytes(micro);
    }
    // Checkpointing buys memory, never results (labs/DESIGN.md, Determinism): none > 3 > 2 > sqrt >= every here.
    EXPECT(ordered && peak[0] > peak[2] && peak[2] >= peak[1] && peak[0] > peak[4] && peak[4] > peak[3] &&
           peak[3] > peak[2], "N=%d: peak activation memory none %.0f > 3 %.0f > 2 %.0f > sqrt %.0f >= every %.0f, "
           "each = its formula + W", n, peak[0], peak[4], peak[3], peak[2], peak[1]);
}

static void check_single(void) {
    // N = 1, --policy none, micro-batches of 4: the same kernels on the same micro-batches as
    // single --accum 2, in the same order: bit for bit.
    EXPECT(same_losses(&runs[0][0].r[0], &ref.r[0]) && strcmp(runs[0][0].final_hash, ref.final_hash) == 0,
           "N=1 --policy none: losses and final weights bitwise those of single --accum 2 (%s vs %s)",
           runs[0][0].final_hash, ref.final_hash);
    // N = 2: the all-reduce adds the ranks' gradients in another order; 1e-6 (see the top).
    int at;
    double worst = worst_vs(&runs[1][0].r[0], &ref.r[0], &at);
    EXPECT(runs[1][0].r[0].n == STEPS && worst <= 1e-6,
           "N=2 --policy none: loss within 1e-6 of single on the same global batch (worst %.3g at step %d)", worst, at);
}

// Naive attention: the same lab, the same formulas with b = 16C+4+NH T. Policy none at N=1
// is single's training bit for bit, sqrt is none's, and both hold their formula to the byte.
static void check_naive(void) {
    attn = "naive";
    char *ref_args[] = {MODEL, NULL};
    run_lab(&ref, single, "single-naive", 1, ref_args, NULL);
    run_policy(&runs[0][0], ckpt, "none", 1, "1");
    run_policy(&runs[0][2], ckpt, "sqrt", 1, "1");
    grade(1, 0);
    grade(1, 2);
    EXPECT(same_losses(&runs[0][0].r[0], &ref.r[0]) && strcmp(runs[0][0].final_hash, ref.final_hash) == 0,
           "--attn naive, N=1 --policy none: losses and final weights bitwise those of single --attn naive --accum 2");
    attn = "flash";
}

static void check_broken_is_caught(void) {
    // The comparison pass off, so that the broken lab trains to the end: the bitwise check
    // above must fail it.
    Run run;
    char why[200];
    run_policy(&run, ckpt_broken, "every", 2, "0");
    CkptLog c;
    Policy p = policy("every");
    read_ckpt(run.dir, 0, &p, &c);
    int equal = bitwise_equal(&run, &runs[1][0], why, sizeof why);
    EXPECT(run.status == 0 && run.r[0].n == STEPS && c.spans_ok && !equal,
           "the bitwise check catches a lab that skips the recompute while logging its spans (status %d, spans %s; %s)",
           run.status, c.spans_ok ? "as due" : "wrong", why);
    // With the comparison pass, the lab's own gradient check stops it before training.
    run_policy(&run, ckpt_broken, "every", 2, "1");
    read_ckpt(run.dir, 0, &p, &c);
    EXPECT(run.status != 0 && run.r[0].n == 0 && c.table_checks_ok < c.table_checks,
           "and its comparison pass fails a check event and exits non-zero (status %d, %d of %d ckpt checks ok)",
           run.status, c.table_checks_ok, c.table_checks);
}

static void check_bad_input(void) {
    char *bogus[] = {"--policy", "bogus", NULL};
    exits_2_with_one_line(ckpt, 1, bogus, "--policy bogus", "bad-bogus");
    char *zero[] = {"--policy", "0", NULL};
    exits_2_with_one_line(ckpt, 1, zero, "--policy 0", "bad-zero");
    char *neg[] = {"--policy", "-3", NULL};
    exits_2_with_one_line(ckpt, 1, neg, "--policy -3", "bad-neg");
    char *big[] = {"--layers", "4", "--policy", "5", NULL};
    exits_2_with_one_line(ckpt, 1, big, "--policy 5 with 4 blocks", "bad-big");
}

static void check_sanitized(void) {
    char *args[] = {"--steps", "2", MODEL, "--policy", "sqrt", "--compare", "1", NULL};
    char dir[512];
    snprintf(dir, sizeof dir, "%s/san", tmp);
    int status = run_ranks(ckpt_san, 2, "san", dir, args, NULL);
    char *err = captured("san.r0", "err");
    EXPECT(status == 0 && !strstr(err, "Sanitizer"), "the sanitized lab (sqrt, N=2, 2 steps) exits 0, no sanitizer "
           "report (status %d)", status);
    free(err);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: test_ckpt OPTIMIZED_CKPT OPTIMIZED_SINGLE SANITIZED_CKPT BROKEN_CKPT\n");
        return 2;
    }
    ckpt = argv[1], single = argv[2], ckpt_san = argv[3], ckpt_broken = argv[4];
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-ckpt-XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    char *ref_args[] = {MODEL, NULL};
    run_lab(&ref, single, "single", 1, ref_args, NULL);
    EXPECT(ref.status == 0 && ref.r[0].n == STEPS, "single --accum 2: %d steps (status %d)", ref.r[0].n, ref.status);
    for (int n = 1; n <= 2; n++)
        for (int i = 0; i < NPOL; i++)  // comparison passes: the median of 2 timed passes at N=1, of 1 at N=2
            run_policy(&runs[n - 1][i], ckpt, POLICIES[i], n, n == 1 ? "2" : "1");
    for (int n = 1; n <= 2; n++)
        for (int i = 0; i < NPOL; i++) grade(n, i);
    check_peaks(1);
    check_peaks(2);
    check_single();
    check_naive();
    check_broken_is_caught();
    check_bad_input();
    check_sanitized();
    return test_done();
}
