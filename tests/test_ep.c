// test_ep.c — the expert-parallel lab (labs/19-ep/) graded from its run logs, against single.
//
// usage: test_ep OPTIMIZED_EP OPTIMIZED_SINGLE SANITIZED_EP
//
// What is checked, every expected figure computed here from the model's shapes:
//   - the same training: for n = 1, 2, 3, 4 and 8 ranks, dropless and with a capacity (which
//     drops tokens at these shapes), top 1, 2 and 3, --accum 2 and --aux-weight 0, every step's
//     loss equals single's with the same --moe on the same global batch within 1e-5, and the
//     gradient norm within 1e-4 relative (each expert counted once);
//   - the routing is single's to the token: every step's aux loss (1e-6), the assignments the
//     capacity dropped and every block's load per expert, exactly;
//   - the replicated parameters hold the same bits on every rank after every step;
//   - memory after every step: params 4 (Psi_rep + L E/n Psi_exp), grads the same, optim twice,
//     the rows in flight and the counts 4 (R C + n (K E + 2E)), the activations single's at
//     B/n with the experts' rows where they run, 8 L R (C + H) (R: the rows this rank's experts
//     may serve, dropless n B' T min(K, E/n), or the capacity's if fewer);
//   - bytes: the rows every rank says it sent each rank add up to the assignments served
//     (every assignment but the dropped ones, from the routing statistics); each rank's bytes
//     are four trips of 4 C bytes a row between ranks (dispatch, combine, and both backwards:
//     its rows out, the rows it got back) and the counts' all-gather, 4 (n-1)(K E + 2E), per
//     block and micro-batch;
//   - bad input exits 2 with one line; the sanitized lab runs clean.
// Broken on purpose (by hand, once): the experts' gradients all-reduced with the replicated
// ones, or the global capacity replaced by a per-rank one, fail the first two checks.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/runfiles/json.h"
#include "labtest.h"
#include "test.h"

static const char *ep, *single, *ep_san;
static const int STEPS = 10;
#include "shardtest.h"

// The labs' default model: B 8 sequences of T 64, C 64, L 2, NH 4, V 256, flash attention.
enum { B = 8, T = 64, C = 64, L = 2, NH = 4, V = 256 };

typedef struct {
    const char *name;
    int n, E, K, accum;
    double capacity, aux;
    int batch;
} Case;

// The routing of one step, from single's or a rank's step event.
typedef struct {
    int n;
    double aux[MAX_STEPS];
    long dropped[MAX_STEPS], assignments[MAX_STEPS];
    long load[MAX_STEPS][L][64];
    long rows_to[MAX_STEPS][8];
    double bytes[MAX_STEPS], acts[MAX_STEPS];
} Routing;

static void read_routing(const char *dir, int rank, int E, Routing *r) {
    memset(r, 0, sizeof *r);
    Events ev;
    load_rank_events(dir, rank, &ev);
    for (int i = 0; i < ev.n && r->n < MAX_STEPS; i++) {
        const JsonValue *e = ev.lines[i];
        if (strcmp(kind(e), "step")) continue;
        int s = r->n++;
        r->aux[s] = num(e, "aux_loss");
        r->dropped[s] = (long)num(e, "dropped"), r->assignments[s] = (long)num(e, "assignments");
        const JsonValue *load = json_get(e, "expert_load"), *rows = json_get(e, "expert_rows_sent");
        for (int l = 0; load && l < L && l < (int)load->count; l++)
            for (int x = 0; x < E && x < (int)load->items[l].count; x++) r->load[s][l][x] = (long)load->items[l].items[x].number;
        for (int q = 0; rows && q < (int)rows->count && q < 8; q++) r->rows_to[s][q] = (long)rows->items[q].number;
        r->bytes[s] = json_get(e, "expert_bytes_sent") ? num(e, "expert_bytes_sent") : NAN;
        r->acts[s] = num(json_get(e, "mem"), "acts");
    }
    free_events(&ev);
}

static char *fmt(char *buf, size_t n, double x) { return snprintf(buf, n, "%.9g", x), buf; }

// single with the case's --moe, its run directory's routing and log.
static void run_single(const Case *k, RankLog *log, Routing *routing) {
    char dir[512], steps[8], E[8], K[8], acc[8], cap[32], aux[32];
    snprintf(dir, sizeof dir, "%s/single-%s", tmp, k->name);
    snprintf(steps, sizeof steps, "%d", STEPS), snprintf(E, sizeof E, "%d", k->E), snprintf(K, sizeof K, "%d", k->K);
    snprintf(acc, sizeof acc, "%d", k->accum);
    char batch[8];
    snprintf(batch, sizeof batch, "%d", k->batch);
    char *argv[] = {(char *)single, "--steps", steps, "--moe", E, "--topk", K, "--accum", acc, "--capacity",
                    fmt(cap, sizeof cap, k->capacity), "--aux-weight", fmt(aux, sizeof aux, k->aux), "--batch", batch,
                    "--run-dir", dir, NULL};
    EXPECT(run(argv, "single") == 0, "the single-rank reference of %s runs", k->name);
    read_rank(dir, 0, log);
    read_routing(dir, 0, k->E, routing);
}

static double ceil_div_capacity(double F, double tokens, int K, int E) { return ceil(F * tokens * K / E); }

static void check_case(const Case *k) {
    char what[160], E[8], K[8], acc[8], cap[32], aux[32];
    snprintf(what, sizeof what, "ep %s: n=%d --moe %d --topk %d%s --capacity %g --aux-weight %g", k->name, k->n, k->E,
             k->K, k->accum > 1 ? " --accum 2" : "", k->capacity, k->aux);
    snprintf(E, sizeof E, "%d", k->E), snprintf(K, sizeof K, "%d", k->K), snprintf(acc, sizeof acc, "%d", k->accum);
    char batch[8];
    snprintf(batch, sizeof batch, "%d", k->batch);
    char *args[] = {"--moe", E, "--topk", K, "--accum", acc, "--capacity", fmt(cap, sizeof cap, k->capacity),
                    "--aux-weight", fmt(aux, sizeof aux, k->aux), "--batch", batch, NULL};
    RankLog ref;
    Routing want;
    run_single(k, &ref, &want);
    Run out;
    run_lab(&out, ep, k->name, k->n, args, NULL);
    if (!ran_clean(&out, what)) return;

    int at;
    double worst = worst_vs(&out.r[0], &ref, &at), norm = 0;
    for (int s = 0; s < out.r[0].n && s < ref.n; s++)
        norm = fmax(norm, fabs(out.r[0].grad_norm[s] - ref.grad_norm[s]) / ref.grad_norm[s]);
    EXPECT(worst <= 1e-5 && norm <= 1e-4 && out.r[0].n == STEPS && ref.n == STEPS,
           "%s: every step's loss equals single's within 1e-5 (worst %.2g at step %d), the gradient norm within 1e-4 "
           "relative (worst %.2g)", what, worst, at, norm);
    EXPECT(replicas_equal(&out), "%s: the replicated parameters hold the same bits on every rank after every step", what);

    // The routing, rank by rank: single's, to the token.
    Routing got[8];
    int routing_ok = 1;
    char say[300] = "";
    for (int r = 0; r < k->n; r++) {
        read_routing(out.dir, r, k->E, &got[r]);
        for (int s = 0; s < STEPS; s++) {
            int same = fabs(got[r].aux[s] - want.aux[s]) <= 1e-6 && got[r].dropped[s] == want.dropped[s] &&
                       got[r].assignments[s] == want.assignments[s] &&
                       !memcmp(got[r].load[s], want.load[s], sizeof want.load[s]);
            if (!same && routing_ok)
                routing_ok = 0, snprintf(say, sizeof say, "rank %d step %d: aux %.9g dropped %ld, single's %.9g and %ld", r,
                                         s + 1, got[r].aux[s], got[r].dropped[s], want.aux[s], want.dropped[s]);
        }
    }
    EXPECT(routing_ok && want.dropped[0] >= 0, "%s: aux loss, dropped assignments and every block's load per expert are "
           "single's on every rank and step (step 1 dropped %ld) %s", what, want.dropped[0], say);

    // Memory, by the formulas, on every rank.
    int El = k->E / k->n, micro = (k->batch) / (k->n * k->accum), H = 4 * C, BT = micro * T;
    double psi_rep = 256.0 * C + (double)T * C + L * (8.0 * C + 4.0 * C * C + (double)k->E * C) + 2.0 * C + 256.0 * C;
    double psi_exp = 2.0 * H * C + H + C, psi = psi_rep + (double)L * El * psi_exp;
    double R = (double)k->n * BT * (k->K < El ? k->K : El);
    if (k->capacity > 0) R = fmin(R, El * fmin(ceil_div_capacity(k->capacity, (double)k->n * BT, k->K, k->E), (double)k->n * BT));
    double comm = 4.0 * (R * C + k->n * (k->K * k->E + 2.0 * k->E));
    double acts = 4.0 * BT * (2.0 * C + 2 + V + L * (8.0 * C + 4 + NH + k->E + 4.0 * k->K + 2.0 * k->K * C)) +
                  8.0 * L * R * (C + H);
    int mem_ok = 1;
    for (int r = 0; r < k->n; r++)
        for (int s = 0; s < out.r[r].n; s++)
            mem_ok &= out.r[r].params[s] == 4 * psi && out.r[r].grads[s] == 4 * psi && out.r[r].optim[s] == 8 * psi &&
                      out.r[r].comm[s] == comm && got[r].acts[s] == acts;
    EXPECT(mem_ok, "%s: memory after every step: params 4 (Psi_rep + L E/n Psi_exp) = %.0f, grads, optim 8 (..), comm "
           "4 (R C + n (K E + 2E)) = %.0f, acts = %.0f with R = %.0f (rank 0: %.0f %.0f %.0f)", what, 4 * psi, comm, acts,
           R, out.r[0].params[0], out.r[0].comm[0], got[0].acts[0]);

    // Bytes: the rows add up to the served assignments, and each rank's bytes are its rows'.
    int bytes_ok = 1;
    say[0] = 0;
    for (int s = 0; s < STEPS; s++) {
        long rows = 0;
        for (int r = 0; r < k->n; r++)
            for (int q = 0; q < k->n; q++) rows += got[r].rows_to[s][q];
        if (rows != want.assignments[s] - want.dropped[s] && bytes_ok)
            bytes_ok = 0, snprintf(say, sizeof say, "step %d: %ld rows sent, %ld assignments served", s + 1, rows,
                                   want.assignments[s] - want.dropped[s]);
        for (int r = 0; r < k->n; r++) {
            double out_rows = 0, in_rows = 0;
            for (int q = 0; q < k->n; q++)
                if (q != r) out_rows += got[r].rows_to[s][q], in_rows += got[q].rows_to[s][r];
            double expect = 2 * 4.0 * C * (out_rows + in_rows) +
                            (double)L * k->accum * 4.0 * (k->n - 1) * (k->K * k->E + 2.0 * k->E);
            if (got[r].bytes[s] != expect && bytes_ok)
                bytes_ok = 0, snprintf(say, sizeof say, "rank %d step %d: %.0f bytes, the rows give %.0f", r, s + 1,
                                       got[r].bytes[s], expect);
        }
    }
    EXPECT(bytes_ok, "%s: the rows sent add up to the assignments served, and every rank's bytes are 8 C its rows out "
           "and back plus the counts' all-gather %s", what, say);
}

static void check_training(void) {
    static const Case cases[] = {
        {"n1", 1, 8, 2, 1, 0, 0.01, B},         {"n2", 2, 8, 2, 1, 0, 0.01, B},     {"n4", 4, 8, 2, 1, 0, 0.01, B},
        {"n8", 8, 8, 2, 1, 0, 0.01, B},         {"cap2", 2, 8, 2, 1, 1.25, 0.01, B}, {"cap4", 4, 8, 2, 1, 1.0, 0.01, B},
        {"acc2", 2, 8, 2, 2, 1.25, 0.01, B},    {"top1", 4, 8, 1, 1, 0.9, 0.01, B},  {"top3-n3", 3, 6, 3, 1, 0, 0.01, 6},
        {"aux0", 4, 8, 2, 1, 0, 0, B},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(&cases[i]);
}

static void check_bad_input(void) {
    char *split[] = {"--steps", "1", "--moe", "6", NULL}, *dense[] = {"--steps", "1", "--moe", "0", NULL},
         *topk[] = {"--steps", "1", "--topk", "9", NULL}, *batch[] = {"--steps", "1", "--batch", "6", NULL},
         *cap[] = {"--steps", "1", "--capacity", "-1", NULL}, *save[] = {"--steps", "1", "--save-every", "1", NULL};
    exits_2_with_one_line(ep, 4, split, "--moe 6 over 4 ranks", "bad-split");
    exits_2_with_one_line(ep, 2, dense, "--moe 0", "bad-dense");
    exits_2_with_one_line(ep, 2, topk, "--topk 9 of 8 experts", "bad-topk");
    exits_2_with_one_line(ep, 4, batch, "--batch 6 over 4 ranks", "bad-batch");
    exits_2_with_one_line(ep, 2, cap, "--capacity -1", "bad-capacity");
    exits_2_with_one_line(ep, 2, save, "--save-every (no checkpoints yet)", "bad-save");
}

static void check_sanitized(void) {
    char *args[] = {"--steps", "2", "--capacity", "1.0", "--accum", "2", NULL};
    char dir[512];
    snprintf(dir, sizeof dir, "%s/san", tmp);
    int status = run_ranks(ep_san, 4, "san", dir, args, NULL);
    EXPECT(status == 0, "the sanitized ep on 4 ranks (--capacity 1.0 --accum 2) runs clean (exit %d)", status);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: test_ep OPTIMIZED_EP OPTIMIZED_SINGLE SANITIZED_EP\n");
        return 2;
    }
    ep = argv[1], single = argv[2], ep_san = argv[3];
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-ep-XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    check_training();
    check_bad_input();
    check_sanitized();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (test_failed == 0 && system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    if (test_failed) printf("# kept %s\n", tmp);
    return test_done();
}
