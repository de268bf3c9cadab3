// test_cp.c — the context-parallel lab (labs/18-cp/) graded from its run logs, against single.
//
// usage: test_cp OPTIMIZED_CP OPTIMIZED_SINGLE SANITIZED_CP
//
// What is checked, with every expected figure computed here from the model's shapes and the
// layout's rule (chunks by dist_chunk; rank r: chunk r of n, or chunks r and 2n-1-r of 2n):
//   - the same training: for n = 1..8 ranks, zig-zag and contiguous, the ring and --kv
//     all-gather, --dp 2, --accum 2, a T that the chunks do not divide, and --mixed, the loss
//     of every step equals single's on the same global batch within 1e-5 (fp32; 1e-2 with
//     --mixed, whose bf16 probabilities are rounded per block, not per tile), and so does the
//     gradient norm (1e-4 relative): the group's gradients are summed once;
//   - the ring and the all-gather give bitwise the same first loss: the blocks merge in the
//     same order;
//   - each rank's logged positions are its layout's, and its step events count exactly the
//     ring's bytes: forward, n-1 hand-overs of a block (8 C B' bytes a token); backward the
//     same with dK dV (16 C B') and a last hop home (8 C B' T'_(r+1)); all-gather 8 C B' M (n-1)
//     forward, twice that backward; per layer and micro-batch;
//   - memory after every step: a replica (4, 4, 8 Psi), the activations of single's formula at
//     T' tokens a sequence (per rank: uneven T' when n does not divide), and the ring's blocks:
//     32 B' M C bytes, or 16 n B' M C with --kv all-gather;
//   - the replicas hold the same bits after every step;
//   - bad input exits 2 with one line; the sanitized lab runs clean (--mixed, all-gather, --dp).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/runfiles/json.h"
#include "labtest.h"
#include "test.h"

static const char *cp, *single, *cp_san;
static const int STEPS = 10;
#include "shardtest.h"

// The default model: B 8 sequences, C 64, L 2, NH 4, V 256.
enum { B = 8, C = 64, L = 2, NH = 4, V = 256 };

// Rank r's positions under the layout (zigzag = 1) over n ranks of T tokens; how many.
static int positions(int zigzag, int T, int n, int r, int *pos) {
    int chunks = zigzag ? 2 * n : n, k = 0;
    for (int c = 0; c < chunks; c++) {
        if (c != r && !(zigzag && c == 2 * n - 1 - r)) continue;
        int len = T / chunks + (c < T % chunks), off = c * (T / chunks) + (c < T % chunks ? c : T % chunks);
        for (int t = 0; t < len; t++) pos[k++] = off + t;
    }
    return k;
}

// Positions as the lab logs them: runs of consecutive ones, "0-7,56-63".
static void runs_text(const int *pos, int n, char *out, size_t cap) {
    size_t at = 0;
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        int j = i;
        while (j + 1 < n && pos[j + 1] == pos[j] + 1) j++;
        at += (size_t)snprintf(out + at, cap - at, "%s%d-%d", at ? "," : "", pos[i], pos[j]);
        i = j;
    }
}

// Single's saved activations at T tokens a sequence, micro-batch b (gpt.h: flash attention).
static double acts_bytes(int b, int T, int mixed) {
    if (mixed) return (double)b * T * (4.0 * C + 4.0 * (2 + V) + 2.0 * C + L * (4.0 * (2 * C + 4 + NH) + 2.0 * 14 * C));
    return 4.0 * b * T * (2.0 * C + 2 + V + L * (16.0 * C + 4 + NH));
}

typedef struct {
    const char *name;
    int n, zigzag, gather, dp, accum, T, mixed;
} Case;

static RankLog single_at(int T, int mixed) {
    static RankLog known[2][4096 + 1];
    static int have[2][4096 + 1];
    if (!have[mixed][T]) {
        char dir[512], steps[16], seq[16];
        snprintf(dir, sizeof dir, "%s/single-T%d%s", tmp, T, mixed ? "-mixed" : "");
        snprintf(steps, sizeof steps, "%d", STEPS);
        snprintf(seq, sizeof seq, "%d", T);
        char *argv[] = {(char *)single, "--steps", steps, "--seq", seq, "--run-dir", dir, mixed ? "--mixed" : NULL, NULL};
        EXPECT(run(argv, "single") == 0, "the single-rank reference at T = %d%s runs", T, mixed ? ", --mixed" : "");
        read_rank(dir, 0, &known[mixed][T]);
        have[mixed][T] = 1;
    }
    return known[mixed][T];
}

// A rank's logged positions and ring bytes, from its first step event.
static void first_step_fields(const char *dir, int r, char *pos, size_t n, double *ring) {
    Events ev;
    load_rank_events(dir, r, &ev);
    pos[0] = 0, *ring = NAN;
    for (int i = 0; i < ev.n; i++)
        if (!strcmp(kind(ev.lines[i]), "step")) {
            const JsonValue *p = json_get(ev.lines[i], "positions");
            if (p && p->type == JSON_STRING) snprintf(pos, n, "%s", p->string);
            *ring = num(ev.lines[i], "ring_bytes_sent");
            break;
        }
    free_events(&ev);
}

static void check_case(const Case *k, Run *out) {
    char what[160], T[16], dp[8], accum[8];
    snprintf(what, sizeof what, "cp %s n=%d%s%s%s T=%d%s", k->zigzag ? "zigzag" : "contiguous", k->n,
             k->gather ? ", --kv all-gather" : "", k->dp > 1 ? ", --dp 2" : "", k->accum > 1 ? ", --accum 2" : "", k->T,
             k->mixed ? ", --mixed" : "");
    snprintf(T, sizeof T, "%d", k->T), snprintf(dp, sizeof dp, "%d", k->dp), snprintf(accum, sizeof accum, "%d", k->accum);
    char *args[] = {"--seq", T, "--dp", dp, "--accum", accum, "--layout", k->zigzag ? "zigzag" : "contiguous", "--kv",
                    k->gather ? "all-gather" : "ring", k->mixed ? "--mixed" : NULL, NULL};
    run_lab(out, cp, k->name, k->n, args, NULL);
    if (!ran_clean(out, what)) return;
    RankLog ref = single_at(k->T, k->mixed);
    int at;
    double worst = worst_vs(&out->r[0], &ref, &at), norm = 0;
    for (int s = 0; s < out->r[0].n && s < ref.n; s++)
        norm = fmax(norm, fabs(out->r[0].grad_norm[s] - ref.grad_norm[s]) / ref.grad_norm[s]);
    double tol = k->mixed ? 1e-2 : 1e-5, norm_tol = k->mixed ? 5e-2 : 1e-4;
    EXPECT(worst <= tol && norm <= norm_tol && out->r[0].n == STEPS,
           "%s: every step's loss equals single's within %g (worst %.2g at step %d), the gradient norm within %g "
           "relative (worst %.2g)", what, tol, worst, at, norm_tol, norm);
    EXPECT(replicas_equal(out), "%s: every rank holds the same weights after every step", what);

    // The layout, the bytes and the memory, rank by rank.
    int n = k->n / k->dp, micro = B / (k->dp * k->accum), pos[4096], count[8], M = 0;
    for (int q = 0; q < n; q++) {
        count[q] = positions(k->zigzag, k->T, n, q, pos);
        if (count[q] > M) M = count[q];
    }
    double psi = 256.0 * C + (double)k->T * C + L * (12.0 * C * C + 13.0 * C) + 2.0 * C + 256.0 * C;
    int pos_ok = 1, bytes_ok = 1, mem_ok = 1;
    char say[300] = "";
    for (int r = 0; r < k->n; r++) {
        int q = r % n, Tq = positions(k->zigzag, k->T, n, q, pos);
        char want[64], got[64];
        double ring;
        runs_text(pos, Tq, want, sizeof want);
        first_step_fields(out->dir, r, got, sizeof got, &ring);
        if (strcmp(want, got) && pos_ok) pos_ok = 0, snprintf(say, sizeof say, "rank %d: %s, expected %s", r, got, want);
        double token = 4.0 * micro * C, fwd = 0, bwd = 0;
        if (n > 1 && k->gather) fwd = 2 * token * M * (n - 1), bwd = 2 * fwd;
        for (int s = 0; n > 1 && !k->gather && s < n; s++) {
            int held = count[((q - s) % n + n) % n];
            if (s < n - 1) fwd += 2 * token * held, bwd += 4 * token * held;
            else bwd += 2 * token * held;
        }
        double want_ring = (double)k->accum * L * (fwd + bwd);
        if (ring != want_ring && bytes_ok)
            bytes_ok = 0, snprintf(say + strlen(say), sizeof say - strlen(say), " rank %d ring %.0f, expected %.0f", r, ring,
                                   want_ring);
        double comm = k->gather ? 16.0 * n * micro * M * C : 32.0 * micro * M * C;
        const RankLog *x = &out->r[r];
        for (int s = 0; s < x->n; s++)
            mem_ok &= x->params[s] == 4 * psi && x->grads[s] == 4 * psi && x->optim[s] == 8 * psi && x->comm[s] == comm;
    }
    EXPECT(pos_ok, "%s: each rank logs its layout's positions %s", what, say);
    EXPECT(bytes_ok, "%s: each rank's ring sends its formula's bytes per step %s", what, say);
    EXPECT(mem_ok, "%s: memory after every step: 4, 4, 8 Psi and the ring's blocks, %s (rank 0 comm %.0f)", what,
           k->gather ? "16 n B' M C" : "32 B' M C", out->r[0].comm[0]);
}

// The activations after a step: single's formula at the rank's T' tokens (read from the step
// event's mem.acts, which read_rank does not keep).
static void check_acts(const Case *k, const Run *run) {
    int n = k->n / k->dp, micro = B / (k->dp * k->accum), pos[4096], ok = 1;
    double first = NAN;
    for (int r = 0; r < k->n; r++) {
        int Tq = positions(k->zigzag, k->T, n, r % n, pos);
        Events ev;
        load_rank_events(run->dir, r, &ev);
        for (int i = 0; i < ev.n; i++)
            if (!strcmp(kind(ev.lines[i]), "step")) {
                double got = num(json_get(ev.lines[i], "mem"), "acts");
                if (r == 0 && isnan(first)) first = got;
                ok &= got == acts_bytes(micro, Tq, k->mixed);
            }
        free_events(&ev);
    }
    EXPECT(ok, "cp %s n=%d T=%d: acts after every step = single's formula at each rank's T' tokens (rank 0: %.0f, "
           "expected %.0f)", k->zigzag ? "zigzag" : "contiguous", k->n, k->T, first,
           acts_bytes(micro, positions(k->zigzag, k->T, n, 0, pos), k->mixed));
}

static void check_training(void) {
    static const Case cases[] = {
        {"z1", 1, 1, 0, 1, 1, 64, 0},  {"z2", 2, 1, 0, 1, 1, 64, 0},  {"z3", 3, 1, 0, 1, 1, 64, 0},
        {"z4", 4, 1, 0, 1, 1, 64, 0},  {"z5", 5, 1, 0, 1, 1, 64, 0},  {"z8", 8, 1, 0, 1, 1, 64, 0},
        {"c3", 3, 0, 0, 1, 1, 64, 0},  {"c4", 4, 0, 0, 1, 1, 64, 0},  {"c7", 7, 0, 0, 1, 1, 64, 0},
        {"g4", 4, 1, 1, 1, 1, 64, 0},  {"gc3", 3, 0, 1, 1, 1, 64, 0}, {"dp4", 4, 1, 0, 2, 1, 64, 0},
        {"acc4", 4, 1, 0, 1, 2, 64, 0}, {"odd4", 4, 1, 0, 1, 1, 37, 0}, {"oddc3", 3, 0, 1, 1, 1, 37, 0},
        {"mix4", 4, 1, 0, 1, 1, 64, 1}, {"mixg2", 2, 1, 1, 1, 1, 64, 1},
    };
    Run runs[sizeof cases / sizeof cases[0]];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_case(&cases[i], &runs[i]);
        if (runs[i].status == 0) check_acts(&cases[i], &runs[i]);
    }
    // The ring and the all-gather merge the blocks in the same order: the forward pass, and so
    // the first loss, is the same bits. (The gradients' dK dV are summed in another order: the
    // ring adds rank by rank as the block travels, the reduce-scatter by its own ring.)
    EXPECT(runs[3].r[0].n && runs[9].r[0].n && runs[3].r[0].loss[0] == runs[9].r[0].loss[0],
           "cp n=4: --kv all-gather's first loss is bitwise the ring's (%.9g, %.9g)", runs[3].r[0].loss[0],
           runs[9].r[0].loss[0]);
}

static void check_bad_input(void) {
    char *seq[] = {"--steps", "1", "--seq", "7", NULL}, *dp[] = {"--steps", "1", "--dp", "3", NULL},
         *attn[] = {"--steps", "1", "--attn", "naive", NULL}, *layout[] = {"--steps", "1", "--layout", "mirror", NULL},
         *kv[] = {"--steps", "1", "--kv", "gather", NULL}, *batch[] = {"--steps", "1", "--dp", "4", "--batch", "6", NULL};
    exits_2_with_one_line(cp, 4, seq, "--seq 7 over 4 zig-zag ranks (8 chunks)", "bad-seq");
    exits_2_with_one_line(cp, 4, dp, "--dp 3 over 4 ranks", "bad-dp");
    exits_2_with_one_line(cp, 2, attn, "--attn naive", "bad-attn");
    exits_2_with_one_line(cp, 2, layout, "--layout mirror", "bad-layout");
    exits_2_with_one_line(cp, 2, kv, "--kv gather", "bad-kv");
    exits_2_with_one_line(cp, 4, batch, "--batch 6 over 4 groups", "bad-batch");
}

static void check_sanitized(void) {
    static const char *const sets[][8] = {{"--mixed", "--kv", "all-gather", NULL},
                                          {"--dp", "2", "--accum", "2", "--seq", "37", NULL},
                                          {"--layout", "contiguous", NULL}};
    static const int ranks[] = {3, 4, 2};
    for (int i = 0; i < 3; i++) {
        char name[32], *args[12];
        int a = 0;
        args[a++] = "--steps", args[a++] = "2";
        for (int j = 0; sets[i][j]; j++) args[a++] = (char *)sets[i][j];
        args[a] = NULL;
        snprintf(name, sizeof name, "san%d", i);
        char dir[512];
        snprintf(dir, sizeof dir, "%s/%s", tmp, name);
        int status = run_ranks(cp_san, ranks[i], name, dir, args, NULL);
        EXPECT(status == 0, "the sanitized cp on %d ranks (%s%s%s) runs clean (exit %d)", ranks[i], sets[i][0],
               sets[i][1] ? " " : "", sets[i][1] ? sets[i][1] : "", status);
    }
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: test_cp OPTIMIZED_CP OPTIMIZED_SINGLE SANITIZED_CP\n");
        return 2;
    }
    cp = argv[1], single = argv[2], cp_san = argv[3];
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-cp-XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    check_training();
    check_bad_input();
    check_sanitized();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (test_failed == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return test_done();
}
