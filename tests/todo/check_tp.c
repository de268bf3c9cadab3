// check_tp.c — the checks of tensor parallelism's two sums (labs/10-tp/f_and_g.c):
// `make check TODO=tp-f-backward`, `make check TODO=tp-g-forward`.
//
// Both regions do the same thing at two places of a block: every rank of the tensor-parallel
// group holds a PARTIAL value at all BT token rows (f backward: the input's gradient, one term
// per rank's column slice; g forward: the row-parallel linear's output), and the region sums
// them over the group. Without --sp every rank needs the sum at all rows: an all-reduce, in
// place in `in`. With --sp each rank keeps only its own rows, row0 .. row0 + rows - 1: a
// reduce-scatter into `out`, which sends half of what a ring all-reduce sends.
//
// Each check calls the region alone (tp_f_backward / tp_g_forward on a Tp built by hand, on
// t = 2, 3, 4 and then 1 ranks, the collectives' algorithm forced to `direct` so that the
// ring, a region of its own, plays no part):
//   - without --sp, BT = 1, t + 1 and 2t + 3 rows (rarely a multiple of t: nothing in the
//     sum depends on it); with --sp, BT = t, 2t and 3t rows (the lab asks t to divide BT, so
//     that every rank holds the same number of rows); C = 3 columns;
//   - rank q's partial value at element e (row e / C, column e % C) is 2^q + 16 e, so a sum
//     says which ranks were added (its low four bits) and at which element (the rest): a
//     wrong value names the ranks that are missing, or the row it was taken from;
//   - `out` starts as -7 (never a sum), so a row never written is told apart;
//   - then the collectives the region ran, counted by kind with the bytes they sent (what
//     tp_log_collectives drains after the region): the right numbers through the wrong
//     collective (an all-reduce, then the rank's own rows copied out) are still a mistake,
//     since it sends t times what the reduce-scatter sends (direct algorithm; twice with
//     the ring). At t = 1 nothing is sent either way, so only the values are checked there,
//     and last: a region that never sums passes there.
// The reference is the sum computed here.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "10-tp/tensor_parallel.h"
#include "common/comm/dist.h"
#include "common/model/ops.h"
#include "common/runfiles/runlog.h"
#include "todo.h"

#define C 3
#define UNWRITTEN (-7.0f)

typedef enum { F_BACKWARD, G_FORWARD } Op;

static const char *const OP_WORDS[] = {"f's backward", "g's forward"};
static const char *const OP_WHAT[] = {"the input gradient", "the row-parallel linear's output"};

static float partial(int q, size_t e) { return (float)(1u << q) + 16.0f * (float)e; }

// Why `got` is not the sum at element e, in words (or "" if it cannot tell).
static void explain(char *why, size_t n, Op op, const Tp *tp, size_t e, float got) {
    int t = tp->t, r = tp->r;
    why[0] = 0;
    if (got == UNWRITTEN) {
        snprintf(why, n,
                 "\nnothing was written there: with --sp, %s puts this rank's rows of the sum (rows %d..%d) into "
                 "`out`: a reduce-scatter of `in` into `out`",
                 OP_WORDS[op], tp->row0, tp->row0 + tp->rows - 1);
        return;
    }
    if (got == partial(r, e)) {
        snprintf(why, n, "\nthat is rank %d's own partial value: it was never summed over the %d ranks%s", r, t,
                 tp->sp ? " (with --sp: reduce-scatter `in` into `out`)" : " (without --sp: all-reduce `in` in place)");
        return;
    }
    long g = (long)got;
    if ((float)g != got || g < 0) return;
    unsigned mask = (unsigned)(g & 15);
    int k = __builtin_popcount(mask);
    if (!k || (g - (long)mask) % (16L * k)) return;
    size_t at = (size_t)((g - (long)mask) / (16L * k));
    char had[32], all[32];
    todo_ranks_list(mask, t, had, sizeof had);
    todo_ranks_list((1u << t) - 1, t, all, sizeof all);
    if (at != e)
        snprintf(why, n, "\nthat is the sum (over ranks %s) at row %zu, column %zu: %s", had, at / C, at % C,
                 tp->sp ? "this rank's rows of the sum are rows row0 .. row0 + rows - 1 of all BT rows (the "
                          "reduce-scatter's chunk r of the BT C floats)"
                        : "each row's sum belongs at that row");
    else if (mask != (1u << t) - 1)
        snprintf(why, n, "\nthat sums ranks %s of %s: every rank's partial value belongs in the sum", had, all);
}

typedef struct {
    Op op;
} TpArg;

static void one_call(Dist *d, Op op, int sp, int BT) {
    int t = d->world, r = d->rank;
    RunLog log;
    memset(&log, 0, sizeof log);
    log.rank = r, log.world = t;
    if (!(log.events = fopen("/dev/null", "w"))) todo_fail("rank %d: cannot open /dev/null", r);
    Tp tp;
    memset(&tp, 0, sizeof tp);
    tp.cfg.dim = C, tp.cfg.vocab = GPT_VOCAB, tp.cfg.heads = 1, tp.cfg.layers = 1, tp.cfg.seq = BT;
    tp.t = t, tp.r = r, tp.sp = sp, tp.group = &d->world_group, tp.ops = &ops_cpu, tp.nlayers = 3;
    tp.B = 1, tp.BT = BT, tp.rows = sp ? BT / t : BT, tp.row0 = sp ? r * tp.rows : 0;
    tp.log = &log, tp.dist = d, tp.step = 1, tp.mb = 0, tp.pass = op == F_BACKWARD ? "bwd" : "fwd";

    size_t n = (size_t)BT * C, mine = (size_t)tp.rows * C;
    float *in = malloc(n * sizeof(float)), *outbuf = malloc((mine + 1) * sizeof(float));
    for (size_t e = 0; e < n; e++) in[e] = partial(r, e);
    for (size_t j = 0; j <= mine; j++) outbuf[j] = UNWRITTEN;
    float *out = sp ? outbuf : in;
    const char *at = op == F_BACKWARD ? "attn" : "mlp";
    todo_context("%s on %d rank(s), %d rows of %d columns%s", OP_WORDS[op], t, BT, C, sp ? ", with --sp" : "");
    if (op == F_BACKWARD) tp_f_backward(&tp, in, out, 1, at);
    else tp_g_forward(&tp, in, out, 1, at);

    char head[400];
    snprintf(head, sizeof head, "%s, %d rank(s), BT = %d rows of C = %d%s", OP_WORDS[op], t, BT, C,
             sp ? ", with --sp" : ", without --sp");

    // What ran: the collectives by kind and their bytes (direct algorithm: an all-reduce sends
    // all n floats to each of the t - 1 others; a reduce-scatter sends chunk q to rank q only).
    const TpCount *c = &tp.model;
    int ar = c->calls[TP_ALL_REDUCE], rs = c->calls[TP_REDUCE_SCATTER], ag = c->calls[TP_ALL_GATHER];
    size_t off, len;
    dist_chunk(n, t, r, &off, &len);
    unsigned long long want_ar = 4ull * (unsigned long long)(t - 1) * n, want_rs = 4ull * (n - len);
    unsigned long long sent = (unsigned long long)c->bytes, want_sent = sp ? want_rs : want_ar;
    int kinds_ok = sp ? (ar == 0 && rs == 1 && ag == 0) : (ar == 1 && rs == 0 && ag == 0);
    char ran[300] = "";
    if (t > 1 && !kinds_ok)
        snprintf(ran, sizeof ran,
                 "\nand the collectives it ran are not the one it needs: %d all-reduce(s), %d reduce-scatter(s), %d "
                 "all-gather(s), %llu bytes sent, where one %s sends %llu",
                 ar, rs, ag, sent, sp ? "reduce-scatter into `out`" : "all-reduce in place", want_sent);

    // The values: the sum over the ranks, at all rows (in place) or at this rank's rows (out).
    unsigned full = (1u << t) - 1;
    size_t written = 0;  // how many of this rank's floats hold something (a prefix, if not all)
    while (written < mine && out[written] != UNWRITTEN && out[written] != partial(r, (size_t)tp.row0 * C + written))
        written++;
    for (size_t j = 0; j < mine; j++) {
        size_t e = (size_t)tp.row0 * C + j;
        double want = (double)full + 16.0 * t * (double)e;
        if (out[j] == want) continue;
        char why[600], cover[300] = "";
        explain(why, sizeof why, op, &tp, e, out[j]);
        if (written > 0 && written == j)
            snprintf(cover, sizeof cover,
                     "\nthe first %zu of this rank's %zu floats are sums, none after: the collective covers all BT C "
                     "= %d x %d = %zu floats",
                     j, mine, BT, C, n);
        if (sp && out[j] == UNWRITTEN && t > 1 && in[e] == want)
            snprintf(cover, sizeof cover, "\n`in` holds the sum there: it was all-reduced in place, but with --sp "
                                          "this rank's rows of the sum go to `out`");
        todo_fail("%s: rank %d, row %zu, column %zu of %s should hold the sum over the ranks, %.0f; got %g%s%s%s",
                  head, r, e / C, e % C, OP_WHAT[op], want, out[j], why, cover, ran);
    }
    if (sp && outbuf[mine] != UNWRITTEN)
        todo_fail("%s: rank %d wrote past its %d rows in `out` (row %d is not its own): with --sp, `out` holds "
                  "rows %d..%d only",
                  head, r, tp.rows, tp.row0 + tp.rows, tp.row0, tp.row0 + tp.rows - 1);

    // The right numbers through the wrong collective, or through more than one.
    if (t > 1) {
        if (sp && ar > 0)
            todo_fail("%s: rank %d: with --sp, %s reduce-scatters (each rank keeps its rows): you all-reduced, "
                      "sending %llu bytes where %llu suffice\n"
                      "every rank got the sum at all %d rows and kept %d of them; dist_reduce_scatter(group, in, "
                      "out, BT * C) gives rank r only its rows",
                      head, r, OP_WORDS[op], sent, want_rs, BT, tp.rows);
        if (!sp && rs > 0)
            todo_fail("%s: rank %d: without --sp, every rank needs the sum at all %d rows: an all-reduce in place "
                      "(dist_all_reduce(group, in, BT * C)); you ran %d reduce-scatter(s), which leave each rank "
                      "1/%d of the rows",
                      head, r, BT, rs, t);
        if (ag > 0)
            todo_fail("%s: rank %d ran %d all-gather(s): the ranks' partial values are SUMMED (%s), not gathered",
                      head, r, ag, sp ? "a reduce-scatter" : "an all-reduce");
        if (ar + rs != 1)
            todo_fail("%s: rank %d ran %d all-reduce(s) and %d reduce-scatter(s): one %s of the BT C floats does it",
                      head, r, ar, rs, sp ? "reduce-scatter" : "all-reduce");
        if (sent != want_sent)
            todo_fail("%s: rank %d: the %s sent %llu bytes; over BT C = %zu floats it sends %llu: did it cover "
                      "exactly the %d rows of C = %d floats?",
                      head, r, sp ? "reduce-scatter" : "all-reduce", sent, n, want_sent, BT, C);
    }
    free(in), free(outbuf);
    fclose(log.events);
    sb_free(&log.line);
}

static void tp_rank(Dist *d, void *arg) {
    Op op = ((const TpArg *)arg)->op;
    int t = d->world;
    const int plain[] = {1, t + 1, 2 * t + 3};  // without --sp: any BT
    for (int i = 0; i < 3; i++) one_call(d, op, 0, plain[i]);
    for (int k = 1; k <= 3; k++) one_call(d, op, 1, k * t);  // with --sp: t divides BT
}

static void check_op(Op op) {
    TpArg arg = {op};
    static const int worlds[] = {2, 3, 4, 1};  // t = 1 last: there a missing sum does not show
    for (int i = 0; i < 4; i++) todo_ranks(worlds[i], DIST_ALGO_DIRECT, 5, tp_rank, &arg);
}

static void check_f_backward(void) { check_op(F_BACKWARD); }
static void check_g_forward(void) { check_op(G_FORWARD); }

int main(int argc, char **argv) {
    static const TodoCheck checks[] = {{"tp-f-backward", check_f_backward}, {"tp-g-forward", check_g_forward}};
    return todo_main(argc, argv, checks, 2);
}
