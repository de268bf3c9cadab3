// check_pp.c — the check of the pipeline lab's schedule region (labs/12-pp/schedule.c): `make check
// TODO=pp-schedule`.
//
// schedule_ops() for GPipe and 1F1B (one chunk per stage; interleaved is not the region: its
// order is written in full below the region and is not checked here), every stage s of
// p = 1..8 stages, m = 1..12 micro-batches: m < p included, where 1F1B's warm-up is capped
// at m, and m = 1, where both schedules are F0 B0. Two cases come first because their
// messages read best (4 stages and 8 micro-batches; 4 stages and 2 micro-batches). Each
// stage's list is compared op by op with the schedule written here from its definition:
//   GPipe: F0 .. F(m-1), then B0 .. B(m-1);
//   1F1B: a warm-up of w = min(p - s - 1, m) forwards, then a steady state of one forward and
//     one backward in turn until every forward is out, then the cool-down, the backwards left:
//     op i is F(i) for i < w; F(w + t/2) or B(t/2) for the t-th op after the warm-up while
//     t < 2 (m - w) (even t forward, odd t backward); B(i - m) after that.
// Every op is (Op){bwd, micro-batch, chunk s}, 2 m of them. At the first op that differs the
// message gives the stage, the op's index, the op expected and the one written, the part of
// the schedule it falls in, how many micro-batches the written list holds in flight there
// (forwarded, not yet backwarded) against the schedule's bound (GPipe m, 1F1B min(p - s, m)),
// the first rule of any schedule the list breaks (a micro-batch that does not exist, another
// stage's chunk, a backward before its forward, forwards or backwards out of order), and the
// length of the written warm-up when it is not the schedule's (one forward too many: p - s; not
// capped at m; a GPipe that does not forward everything first). The output buffer is larger
// than 2 m and filled with a sentinel, so a list that runs long is reported, not a crash.
#include <stdio.h>
#include <string.h>

#include "12-pp/schedule.h"
#include "todo.h"

#define MAX_P 8
#define MAX_M 12
#define CAP (4 * (MAX_M + MAX_P) + 64)  // room for a list that runs long

static const char *sched_name(Schedule s) { return s == SCHED_GPIPE ? "GPipe" : "1F1B"; }

static int min_int(int a, int b) { return a < b ? a : b; }

// 1F1B's warm-up at stage s: the forwards before the first backward (GPipe: all m).
static int warmup_of(Schedule sched, int p, int m, int s) { return sched == SCHED_GPIPE ? m : min_int(p - s - 1, m); }

// Op i of stage s, from the definitions in the header comment.
static Op want_op(Schedule sched, int p, int m, int s, int i) {
    int w = warmup_of(sched, p, m, s);
    if (i < w) return (Op){0, i, s};
    int t = i - w;
    if (t < 2 * (m - w)) return t % 2 == 0 ? (Op){0, w + t / 2, s} : (Op){1, t / 2, s};
    return (Op){1, i - m, s};
}

static void op_text(Op o, int s, char *out, size_t n) {
    if (o.bwd != 0 && o.bwd != 1) snprintf(out, n, "(Op){bwd %d, mb %d, chunk %d}", o.bwd, o.mb, o.k);
    else if (o.k != s) snprintf(out, n, "%c%d of chunk %d", o.bwd ? 'B' : 'F', o.mb, o.k);
    else snprintf(out, n, "%c%d", o.bwd ? 'B' : 'F', o.mb);
}

// Which part of the schedule op i of the expected list is in, in words.
static void part_text(Schedule sched, int p, int m, int s, int i, char *out, size_t n) {
    int w = warmup_of(sched, p, m, s);
    if (sched == SCHED_GPIPE)
        snprintf(out, n, "GPipe: all m = %d forwards, then all %d backwards", m, m);
    else if (i < w)
        snprintf(out, n, "the warm-up: w = min(p - s - 1, m) = %d forwards before the first backward", w);
    else if (i < w + 2 * (m - w))
        snprintf(out, n, "the steady state: after the warm-up of w = min(p - s - 1, m) = %d forwards, one forward "
                         "then one backward",
                 w);
    else
        snprintf(out, n, "the cool-down: every forward is out, the backwards left; the warm-up is w = min(p - s - 1, "
                         "m) = %d forwards",
                 w);
}

// The first rule of any schedule that ops[0..n) breaks, in words (empty if none): at index *at.
static void first_broken_rule(const Op *ops, int n, int m, int s, int *at, char *out, size_t len) {
    int fwd = 0, bwd = 0, done[MAX_M] = {0};  // done: 1 forwarded, 2 backwarded
    out[0] = 0;
    *at = -1;
    for (int i = 0; i < n; i++) {
        Op o = ops[i];
        const char *what = NULL;
        char text[300];
        if (o.bwd != 0 && o.bwd != 1) {
            snprintf(text, sizeof text, "bwd is %d: 0 for a forward, 1 for a backward", o.bwd);
            what = text;
        } else if (o.mb < 0 || o.mb >= m) {
            snprintf(text, sizeof text, "micro-batch %d does not exist: there are m = %d (0..%d)", o.mb, m, m - 1);
            what = text;
        } else if (o.k != s) {
            snprintf(text, sizeof text, "chunk %d is not this stage's: stage s runs chunk s = %d, (Op){bwd, mb, s}", o.k, s);
            what = text;
        } else if (!o.bwd && done[o.mb]) {
            snprintf(text, sizeof text, "micro-batch %d is forwarded a second time", o.mb);
            what = text;
        } else if (o.bwd && done[o.mb] == 0) {
            snprintf(text, sizeof text, "B%d comes before F%d: a backward needs its forward's activations", o.mb, o.mb);
            what = text;
        } else if (o.bwd && done[o.mb] == 2) {
            snprintf(text, sizeof text, "micro-batch %d is backwarded a second time", o.mb);
            what = text;
        } else if (!o.bwd && o.mb != fwd) {
            snprintf(text, sizeof text, "F%d comes where F%d should: forwards go in micro-batch order", o.mb, fwd);
            what = text;
        } else if (o.bwd && o.mb != bwd) {
            snprintf(text, sizeof text, "B%d comes where B%d should: backwards go in micro-batch order", o.mb, bwd);
            what = text;
        }
        if (what) {
            *at = i;
            snprintf(out, len, "op %d breaks a rule of every schedule: %s", i, what);
            return;
        }
        if (o.bwd) done[o.mb] = 2, bwd++;
        else done[o.mb] = 1, fwd++;
    }
}

static void check_stage(Schedule sched, int p, int m, int s) {
    Pipe pp = {.sched = sched, .p = p, .v = 1, .m = m, .K = p};
    for (int k = 0; k < p; k++) pp.first[k] = k, pp.last[k] = k;  // not read by the region
    static Op ops[CAP];
    for (int i = 0; i < CAP; i++) ops[i] = (Op){-9, -9, -9};
    char head[160];
    snprintf(head, sizeof head, "%s, %d stage%s, %d micro-batch%s, stage %d", sched_name(sched), p, p == 1 ? "" : "s",
             m, m == 1 ? "" : "es", s);
    todo_context("%s", head);
    int n = schedule_ops(&pp, s, ops);
    int limit = sched == SCHED_GPIPE ? m : min_int(p - s, m), w = warmup_of(sched, p, m, s);
    const char *limit_words = sched == SCHED_GPIPE ? "GPipe holds at most m" : "1F1B holds at most min(p - s, m)";

    // n is what the region counted (out[n++]); the sentinel shows what it wrote past that.
    int written = n;
    if (n < 0 || n > CAP) todo_fail("%s: schedule_ops returned n = %d; stage s has 2 m = %d ops (out[n++] for each)", head, n, 2 * m);
    while (written < CAP && ops[written].bwd != -9) written++;

    for (int i = 0; i < 2 * m || i < n; i++) {
        Op want = want_op(sched, p, m, s, i);
        if (i < n && i < 2 * m && !memcmp(&ops[i], &want, sizeof want)) continue;
        char want_text[64], got_text[80], part[200], rule[400], in_flight[300] = "", warm[800] = "";
        op_text(want, s, want_text, sizeof want_text);
        if (i >= 2 * m) {
            op_text(ops[i], s, got_text, sizeof got_text);
            todo_fail("%s: the list has %d ops, op %d is %s; stage s has exactly 2 m = %d: each micro-batch forwarded "
                      "once and backwarded once",
                      head, n, i, got_text, 2 * m);
        }
        if (i >= n) {
            if (written > n)
                todo_fail("%s: schedule_ops counted n = %d ops but wrote %d: append each with out[n++] (n is what it "
                          "returns; stage s has 2 m = %d)",
                          head, n, written, 2 * m);
            todo_fail("%s: op %d should be %s (%s), but the list ends after %d ops; stage s has 2 m = %d: each "
                      "micro-batch forwarded once and backwarded once",
                      head, i, want_text, (part_text(sched, p, m, s, i, part, sizeof part), part), n, 2 * m);
        }
        op_text(ops[i], s, got_text, sizeof got_text);
        part_text(sched, p, m, s, i, part, sizeof part);

        // How many micro-batches the written list holds in flight once op i has run.
        int flight = 0;
        for (int k = 0; k <= i; k++) flight += ops[k].bwd == 0 ? 1 : ops[k].bwd == 1 ? -1 : 0;
        if (flight > limit)
            snprintf(in_flight, sizeof in_flight, "; after it %d micro-batches are in flight (forwarded, not yet "
                                                  "backwarded), and %s = %d",
                     flight, limit_words, limit);

        // The first rule of any schedule the list breaks, if it breaks one by op i.
        int at;
        first_broken_rule(ops, n, m, s, &at, rule, sizeof rule);
        if (at < 0 || at > i) rule[0] = 0;

        // The forwards the list runs before its first backward, against the schedule's: GPipe all
        // m; 1F1B its warm-up w and the steady state's first forward, min(w + 1, m).
        int lead = 0, lead_want = sched == SCHED_GPIPE ? m : min_int(w + 1, m);
        while (lead < n && ops[lead].bwd == 0) lead++;
        if (lead != lead_want) {
            const char *why = "";
            if (sched == SCHED_GPIPE)
                why = "GPipe forwards every micro-batch before the first backward";
            else if (lead > m)
                why = "more forwards than micro-batches: p - s - 1 is capped at m; with fewer micro-batches than "
                      "stages, the warm-up is all m of them";
            else if (lead == w && w < m)
                why = "the warm-up is right, but the steady state starts with a forward: one forward, then one "
                      "backward";
            else if (lead == lead_want + 1)
                why = "one forward too many, a warm-up of p - s: micro-batch 0 comes back to stage s once it has gone "
                      "through the p - s - 1 stages after it and back; stage s forwards p - s - 1 more meanwhile, and "
                      "then must run B0";
            else if (lead - 1 == min_int(s, m))
                why = "a warm-up of s forwards; the warm-up shrinks as s grows, p - s - 1: the first stages wait "
                      "longest for their first backward";
            else if (lead == lead_want - 1)
                why = "one forward too few: the warm-up is p - s - 1 forwards, and the steady state starts with one more";
            char rule_words[200];
            if (sched == SCHED_GPIPE) snprintf(rule_words, sizeof rule_words, "GPipe runs all m = %d", m);
            else if (w < m)
                snprintf(rule_words, sizeof rule_words, "1F1B runs %d, its warm-up of w = min(p - s - 1, m) = %d and "
                                                        "the steady state's first forward",
                         lead_want, w);
            else snprintf(rule_words, sizeof rule_words, "1F1B runs all m = %d here (w = min(p - s - 1, m) = m)", m);
            snprintf(warm, sizeof warm, "\nthe list runs %d forward%s before its first backward; %s%s%s", lead,
                     lead == 1 ? "" : "s", rule_words, why[0] ? "\n" : "", why);
        }
        todo_fail("%s: op %d should be %s (%s), got %s%s%s%s%s", head, i, want_text, part, got_text, in_flight,
                  rule[0] ? "\n" : "", rule, warm);
    }
}

static void check_schedule(void) {
    static const Schedule SCHEDS[] = {SCHED_1F1B, SCHED_GPIPE};
    static const int FIRST[][2] = {{4, 8}, {4, 2}};  // (p, m): the cases whose messages read best
    for (int c = 0; c < 2; c++)
        for (int k = 0; k < 2; k++)
            for (int s = 0; s < FIRST[c][0]; s++) check_stage(SCHEDS[k], FIRST[c][0], FIRST[c][1], s);
    for (int k = 0; k < 2; k++)
        for (int p = 1; p <= MAX_P; p++)
            for (int m = 1; m <= MAX_M; m++)
                for (int s = 0; s < p; s++) check_stage(SCHEDS[k], p, m, s);
}

int main(int argc, char **argv) {
    static const TodoCheck checks[] = {{"pp-schedule", check_schedule}};
    return todo_main(argc, argv, checks, 1);
}
