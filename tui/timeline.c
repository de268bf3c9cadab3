// timeline.c — the timeline panel: the last complete step of every rank as a Gantt chart.
//
//   step 30: 9.2 ms from the first span to the last; a column is 0.14 ms
//   r0 compute │FFFFFFFFFFFFFFFFFFFFFFBBBBBBBBBBBBBBBBBBBBBBBBBB      OOOO│ busy 88%
//      comm    │                           AAAAAAAAAAAAAAAAAAAAAAA A  A   │ 61% hidden
//   r1 compute │FFFFFFFFFFFFFFFFFFFFFFBBBBBBBBBBBBBBBBBBBBBBBBBBBB     OOOO│ busy 89%
//      comm    │                            AAAAAAAAAAAAAAAAAAAAAAA A  A  │ 58% hidden
//
// Compute (fwd, bwd, recompute, optim) and communication get a line each, because with
// overlap they happen at the same time. The figures on the right are exact (interval
// arithmetic on the spans, not counted columns): "busy" is the part of the step's time
// span on which the rank computed or communicated (the rest is idle: a pipeline bubble, or
// waiting for a slower rank); "hidden" is the part of the communication time that ran
// while the same rank computed (what overlap buys). A collective between replicas (fsdp
// --replicate's sums, tp --dp's gradient all-reduces: the spans' group says so) is drawn in
// lowercase, in a colour of its own: on a cluster it is the one that crosses the network.
// Context parallelism's K/V exchange (the ring's blocks, or --kv all-gather's: group "cp") is
// drawn as K, whatever collective carries it: it is attention's own traffic, not a gradient's.
// Where a rank waited for communication inside a compute span (a span's waited_from_us), the
// compute line shows a dot: that time is neither compute nor hidden.
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "command/runs/spantime.h"
#include "dashboard.h"

static const struct {
    int color;
    char letter;  // without colour, the letter is the legend
    const char *label;
} KIND[SPAN_KINDS] = {
    {COLOR_FWD, 'F', "fwd"},         {COLOR_BWD, 'B', "bwd"},          {COLOR_RECOMPUTE, 'R', "recompute"},
    {COLOR_OPTIM, 'O', "optim"},     {COLOR_ALL_REDUCE, 'A', "all-reduce"}, {COLOR_SHARD, 'S', "reduce-scatter"},
    {COLOR_SHARD, 'G', "all-gather"}, {COLOR_P2P, 'P', "send/recv"},   {COLOR_COLL, 'C', "other collective"},
};

SpanKind span_kind(const char *name) {
    static const char *names[] = {"fwd", "bwd", "recompute", "optim", "all_reduce", "reduce_scatter", "all_gather"};
    for (int k = 0; k < 7; k++)
        if (strcmp(name, names[k]) == 0) return (SpanKind)k;
    if (strcmp(name, "send") == 0 || strcmp(name, "recv") == 0) return SPAN_P2P;
    return SPAN_OTHER_COMM;
}

typedef struct {
    double busy, hidden;         // fractions; hidden < 0 when there was no communication
    int64_t comm_us, hidden_us;  // the communication's time, and the part of it while computing
} RankTime;

// Exact figures (spantime.h): busy over the step's time span t0..t1, hidden over the
// communication time.
static RankTime rank_time(const RunSpans *sp, int64_t t0, int64_t t1) {
    SpanTime st = span_time(sp);
    RankTime t = {0, -1, st.comm_us, st.hidden_us};
    if (t1 > t0) t.busy = (double)st.busy_us / (double)(t1 - t0);
    if (st.comm_us > 0) t.hidden = (double)st.hidden_us / (double)st.comm_us;
    return t;
}

// Attention's keys and values moving between a context-parallel group's ranks.
static int kv_exchange(const RunSpan *span, SpanKind k) { return !SPAN_IS_COMPUTE(k) && !strcmp(span->group, "cp"); }

// Its glyph: K without colour; in colour a shaded block (send/recv's colour, but not its solid
// block), so that the two read apart on a terminal too.
static uint32_t kv_glyph(const DashState *s) { return s->color && s->utf8 ? 0x2593 : 'K'; }

// A collective of the mesh's outer axis: between the replicas, not within one.
static int across_replicas(const RunSpan *span, SpanKind k) {
    return !SPAN_IS_COMPUTE(k) && k != SPAN_P2P && (!strcmp(span->group, "replicate") || !strcmp(span->group, "dp"));
}

// ---------------------------------------------------------------------------------------
// Drawing
// ---------------------------------------------------------------------------------------

// Returns what it drew besides the kinds the legend always lists: DREW_ACROSS, a collective
// across replicas; DREW_KV, context parallelism's K/V exchange; DREW_WAIT, a wait.
enum { DREW_ACROSS = 1, DREW_KV = 2, DREW_WAIT = 4 };

static uint32_t wait_glyph(const DashState *s) { return s->utf8 ? 0x00b7 : '.'; }

// On the compute line, a column whose middle the rank spent waiting for communication (a
// blocking collective inside a forward, a ring step's transfer not yet in, a blocking call
// between passes) is a dot: the rank was not computing then, even inside a compute span, so
// "hidden" does not count that time.
static int draw_waits(Canvas *c, const DashState *s, const RunSpans *sp, int x, int y, int w, int64_t t0,
                      double span) {
    int drew = 0;
    for (int col = 0; col < w; col++) {
        double mid = (double)t0 + (col + 0.5) * span / w;
        for (size_t i = 0; i < sp->n; i++) {
            const RunSpan *q = &sp->items[i];
            if (!q->waited_from_us || mid < (double)q->waited_from_us || mid >= (double)q->t1_us) continue;
            canvas_put(c, x + col, y, wait_glyph(s), COLOR_DIM, 0);
            drew = DREW_WAIT;
            break;
        }
    }
    return drew;
}
static int draw_row(Canvas *c, const DashState *s, const RunSpans *sp, int compute, int x, int y, int w,
                    int64_t t0, int64_t t1) {
    int across = 0;
    double span = (double)(t1 - t0 > 0 ? t1 - t0 : 1);
    for (size_t i = 0; i < sp->n; i++) {
        SpanKind k = span_kind(sp->items[i].name);
        if (SPAN_IS_COMPUTE(k) != compute) continue;
        // Columns [a, b): every column the span touches, at least one.
        int a = (int)floor((double)(sp->items[i].t0_us - t0) / span * w);
        int b = (int)ceil((double)(sp->items[i].t1_us - t0) / span * w);
        if (a < 0) a = 0;
        if (b > w) b = w;
        if (b <= a) b = a + 1;
        if (a >= w) a = w - 1, b = w;
        int out = across_replicas(&sp->items[i], k), kv = kv_exchange(&sp->items[i], k);
        across |= (out ? DREW_ACROSS : 0) | (kv ? DREW_KV : 0);
        uint32_t ch = kv ? kv_glyph(s) : dash_glyph(s, (uint32_t)(out ? tolower(KIND[k].letter) : KIND[k].letter));
        for (int col = a; col < b; col++) canvas_put(c, x + col, y, ch, kv ? COLOR_P2P : out ? COLOR_ACROSS : KIND[k].color, 0);
    }
    if (compute) across |= draw_waits(c, s, sp, x, y, w, t0, span);
    return across;
}

int dash_comm_ms(const RunView *v, int r, double *total_ms, double *hidden_ms) {
    int64_t step = runview_timeline_step(v);
    const RunSpans *sp = step >= 0 ? runview_spans(v, r, step) : NULL;
    if (!sp) return 0;
    RankTime t = rank_time(sp, 0, 0);
    *total_ms = (double)t.comm_us / 1000.0, *hidden_ms = (double)t.hidden_us / 1000.0;
    return 1;
}

void dash_timeline(Canvas *c, const RunView *v, const DashState *s, int x, int y, int w, int h) {
    int64_t step = runview_timeline_step(v);
    int world = runview_world(v);
    if (step < 0) {
        canvas_text(c, x + 2, y + 1, w - 2, COLOR_DIM, 0, "timeline: waiting for a step's spans ...");
        return;
    }
    int64_t t0 = INT64_MAX, t1 = INT64_MIN;
    for (int r = 0; r < world; r++) {
        const RunSpans *sp = runview_spans(v, r, step);
        for (size_t i = 0; sp && i < sp->n; i++) {
            if (sp->items[i].t0_us < t0) t0 = sp->items[i].t0_us;
            if (sp->items[i].t1_us > t1) t1 = sp->items[i].t1_us;
        }
    }
    if (t1 <= t0) t1 = t0 + 1;
    const int label = 12, stats = 12;
    int pw = w - label - 2 - stats;
    if (pw < 10) return;
    double ms = (double)(t1 - t0) / 1000.0;
    canvas_printf(c, x, y, w, COLOR_TITLE, ATTR_BOLD, "step %lld: %.3f ms from the first span to the last; a column is %.3f ms",
                  (long long)step, ms, ms / pw);
    uint32_t left = s->utf8 ? 0x2502 : '|', right = left;
    int row = y + 1, shown = 0, across = 0;
    for (int r = 0; r < world && row + 2 <= y + h - 3; r++, shown++, row += 2) {
        const RunSpans *sp = runview_spans(v, r, step);
        canvas_printf(c, x, row, label, COLOR_NONE, ATTR_BOLD, "r%-2d", r);
        canvas_text(c, x + 4, row, label - 4, COLOR_DIM, 0, "compute");
        canvas_text(c, x + 4, row + 1, label - 4, COLOR_DIM, 0, "comm");
        for (int k = 0; k < 2; k++) {
            canvas_put(c, x + label, row + k, left, COLOR_DIM, 0);
            canvas_put(c, x + label + 1 + pw, row + k, right, COLOR_DIM, 0);
        }
        if (!sp) {
            canvas_text(c, x + label + 2, row, pw - 2, COLOR_DIM, 0, "(no spans for this step yet)");
            continue;
        }
        across |= draw_row(c, s, sp, 1, x + label + 1, row, pw, t0, t1);
        across |= draw_row(c, s, sp, 0, x + label + 1, row + 1, pw, t0, t1);
        RankTime t = rank_time(sp, t0, t1);
        canvas_printf(c, x + label + 3 + pw, row, stats, COLOR_NONE, 0, "busy %3.0f%%", 100 * t.busy);
        if (t.hidden >= 0) canvas_printf(c, x + label + 3 + pw, row + 1, stats, COLOR_NONE, 0, "%3.0f%% hidden", 100 * t.hidden);
        if (sp->dropped)
            canvas_printf(c, x + label + 2, row + 1, pw - 2, COLOR_WARN, 0, "(%zu spans not kept)", sp->dropped);
    }
    if (shown < world) canvas_printf(c, x, row++, w, COLOR_DIM, 0, "... %d more rank(s) do not fit", world - shown);
    // The time axis, then the legend.
    char end[32];
    snprintf(end, sizeof end, "%.3f ms", ms);
    canvas_text(c, x + label + 1, row, -1, COLOR_DIM, 0, "0");
    canvas_text(c, x + label + 1 + pw - (int)strlen(end), row, -1, COLOR_DIM, 0, end);
    int lx = x, ly = row + 1;
    for (int k = 0; k < SPAN_KINDS; k++) {
        int need = 3 + (int)strlen(KIND[k].label);
        if (lx + need > x + w) lx = x, ly++;
        if (ly >= y + h) break;
        uint32_t ch = dash_glyph(s, (uint32_t)KIND[k].letter);
        canvas_put(c, lx, ly, ch, KIND[k].color, 0);
        lx += 2 + canvas_text(c, lx + 2, ly, -1, COLOR_NONE, 0, KIND[k].label) + 1;
    }
    // Only where the step has them: a run without replicas or a ring keeps its legend.
    static const char across_label[] = "a s g across replicas", kv_label[] = "K/V blocks of attention (cp)";
    if ((across & DREW_ACROSS) && lx + (int)sizeof across_label > x + w) lx = x, ly++;
    if ((across & DREW_ACROSS) && ly < y + h) lx += 1 + canvas_text(c, lx, ly, -1, COLOR_ACROSS, 0, across_label) + 1;
    if ((across & DREW_KV) && lx + 2 + (int)sizeof kv_label > x + w) lx = x, ly++;
    if ((across & DREW_KV) && ly < y + h) {
        canvas_put(c, lx, ly, kv_glyph(s), COLOR_P2P, 0);
        lx += 2 + canvas_text(c, lx + 2, ly, -1, COLOR_NONE, 0, kv_label) + 1;
    }
    static const char wait_label[] = "waiting for communication";
    if ((across & DREW_WAIT) && lx + 2 + (int)sizeof wait_label > x + w) lx = x, ly++;
    if ((across & DREW_WAIT) && ly < y + h) {
        canvas_put(c, lx, ly, wait_glyph(s), COLOR_DIM, 0);
        canvas_text(c, lx + 2, ly, -1, COLOR_NONE, 0, wait_label);
    }
}
