// busbwplot.c — the collectives lab's picture: bus bandwidth against message size, a letter
// per collective, and the memory-copy ceiling the shared-memory backend runs into.
//
//     bus bandwidth by message size, rank 0 (GB/s): latency-bound on the left, bandwidth on the right
//         8.15 ┤╌╌ memcpy ceiling 8.15 ╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌╌
//              │                                                   G  AG
//         4.07 ┤                                         A  AS G S        S
//              │                               A  AS GS
//         0.00 ┤A S  A  A  AS  AGS  AGS GS  GS
//               4B              1K                  64K                   1M
//      A all-reduce  S reduce-scatter  G all-gather  B broadcast  R reduce
//      ╌ memcpy ceiling, 8.15 GB/s: one core copying a buffer larger than its caches
//      Points can pass it: shared memory splits each byte's copy between its sender and ...
//
// The x axis is log2 of the size, from the smallest size measured to the largest; the y axis
// is linear from 0, as nccl-tests' tables read: small messages cost a fixed time whatever
// their size, so their bandwidth sits near 0, and large ones climb to what the links (here:
// one core copying memory) allow. The letters are those of the timeline panel.
//
// The ceiling's words and why points may pass it are the web page's (run_collectives.js), so
// the terminal and the browser say the same; the browser test holds the two to each other.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dashboard.h"

#define LABEL_W 9  // "    8.15 ┤"

// What the ceiling is, after "memcpy ceiling, 8.15 GB/s: ".
static const char CEILING_WHAT[] = "one core copying a buffer larger than its caches";
// Why points may pass it. busbw counts each byte a rank's link carries once (nccl-tests'
// factors), while through shared memory a byte is copied twice, into a channel by its sender
// and out by its receiver, each on its own core, and the channel's 256 KiB pieces stay in the
// caches. A ring rank sends and receives every byte busbw counts, so its core does both
// copies, as much as a memcpy; at either end of the broadcast and reduce chains a rank only
// sends or only receives, half of that.
static const char CEILING_NOTE[] =
    "Points can pass it: shared memory splits each byte's copy between its sender and its receiver, on two cores at once "
    "through the caches, and at either end of a broadcast's or reduce's chain a rank does only one half, where every "
    "rank of the other collectives does both.";

// The lines text takes wrapped at w columns, each drawn from (x, y) on when c is not NULL.
static int wrapped(Canvas *c, int x, int y, int w, int color, const char *text) {
    const char *p = text;
    int lines = 0;
    while (*p && w > 0) {
        int n = (int)strlen(p);
        if (n > w) {  // the last space that lets the line fit, else a cut mid-word
            n = w;
            while (n > 0 && p[n] != ' ') n--;
            if (n == 0) n = w;
        }
        if (c) canvas_printf(c, x, y + lines, w, color, 0, "%.*s", n, p);
        lines++;
        p += n;
        while (*p == ' ') p++;
    }
    return lines;
}

static const struct {
    const char *coll, *label;
    char letter;
} COLL[] = {
    {"all_reduce", "all-reduce", 'A'}, {"reduce_scatter", "reduce-scatter", 'S'}, {"all_gather", "all-gather", 'G'},
    {"broadcast", "broadcast", 'B'},   {"reduce", "reduce", 'R'},                 {"all_to_all", "all-to-all", 'T'},
};
#define NCOLL ((int)(sizeof COLL / sizeof COLL[0]))
#define MAX_SHOWN 8  // collectives drawn: the known ones, then up to two others (as '1', '2')

// A collective's place in the legend, in the order first measured.
typedef struct {
    char coll[24];
    char letter;
    const char *label;
} Series;

static int series_of(Series *s, int *n, const char *coll) {
    for (int i = 0; i < *n; i++)
        if (strcmp(s[i].coll, coll) == 0) return i;
    if (*n == MAX_SHOWN) return -1;
    Series *x = &s[*n];
    snprintf(x->coll, sizeof x->coll, "%s", coll);
    x->letter = 0, x->label = x->coll;
    for (int k = 0; k < NCOLL; k++)
        if (strcmp(COLL[k].coll, coll) == 0) x->letter = COLL[k].letter, x->label = COLL[k].label;
    if (!x->letter) {  // a collective this file does not know: a digit, and the name as logged
        int others = 0;
        for (int i = 0; i < *n; i++) others += s[i].letter >= '1' && s[i].letter <= '9';
        if (others == 2) return -1;
        x->letter = (char)('1' + others);
    }
    return (*n)++;
}

static int is_marker(const Canvas *c, int x, int y) {
    uint32_t ch = c->cells[y * c->w + x].ch;
    return (ch >= 'A' && ch <= 'Z') || (ch >= '1' && ch <= '9');
}

// "4B", "1K", "64M": a size on the axis.
static void size_label(char *out, size_t n, double bytes) {
    const char *unit = "BKMGT";
    int u = 0;
    while (bytes >= 1024 && u < 4) bytes /= 1024, u++;
    snprintf(out, n, "%g%c", bytes, unit[u]);
}

void dash_busbw_chart(Canvas *c, const RunView *v, const DashState *s, int x, int y, int w, int h) {
    // The plot, below the title and above the axis and the legend; then, once the ceiling is
    // known (the run's summary), a line saying what it is and the note on why points may pass
    // it, where the rows allow (else the line alone).
    char what[160];
    snprintf(what, sizeof what, "memcpy ceiling, %.2f GB/s: %s", v->memcpy_gbps, CEILING_WHAT);
    int pw = w - LABEL_W - 1, what_h = v->memcpy_gbps > 0 ? wrapped(NULL, 0, 0, w - 4, 0, what) : 0;
    int notes = what_h ? what_h + wrapped(NULL, 0, 0, w - 2, 0, CEILING_NOTE) : 0;
    if (notes > what_h && h - 3 - notes < 5) notes = what_h;
    int ph = h - 3 - notes;
    if (pw < 16 || ph < 3 || v->nbusbw == 0) return;
    Series series[MAX_SHOWN];
    int nseries = 0;
    double lo = INFINITY, hi = -INFINITY, top = v->memcpy_gbps;
    for (size_t i = 0; i < v->nbusbw; i++) {
        const RunBusbw *m = &v->busbw[i];
        if (series_of(series, &nseries, m->coll) < 0) continue;
        lo = fmin(lo, log2(m->bytes)), hi = fmax(hi, log2(m->bytes));
        top = fmax(top, m->gbps);
    }
    if (nseries == 0) return;
    if (!(top > 0)) top = 1;
    canvas_text(c, x, y, w, COLOR_TITLE, ATTR_BOLD,
                "bus bandwidth by message size, rank 0 (GB/s): latency-bound on the left, bandwidth-bound on the right");

    // A size's column: spread over the plot by log2, leaving each collective its own column
    // beside the others when the sizes are far enough apart, else all on one.
    int px = x + LABEL_W + 1, py = y + 1;
    int sizes = (int)lround(hi - lo) + 1, side = pw / (sizes > 0 ? sizes : 1) >= nseries;
    int span = side ? pw - nseries : pw - 1;
    #define COLUMN(lg) (hi > lo ? (int)lround(span * ((lg) - lo) / (hi - lo)) : span / 2)
    #define ROW(g) ((int)lround((ph - 1) * (1 - (g) / top)))

    // The y axis (top, middle, 0) and the ceiling first: the measurements are drawn over them.
    uint32_t tick = s->utf8 ? 0x2524 : '+', rule = s->utf8 ? 0x2502 : '|';
    for (int r = 0; r < ph; r++) canvas_put(c, px - 1, py + r, rule, COLOR_DIM, 0);
    int mid = (ph - 1) / 2;
    int rows[3] = {0, mid, ph - 1};
    for (int i = 0; i < 3; i++) {
        canvas_printf(c, x, py + rows[i], LABEL_W - 1, COLOR_DIM, 0, "%8.2f", top * (1 - (double)rows[i] / (ph - 1)));
        canvas_put(c, px - 1, py + rows[i], tick, COLOR_DIM, 0);
    }
    if (v->memcpy_gbps > 0) {  // named at its left end, high above the small sizes' letters
        int row = py + ROW(v->memcpy_gbps);
        for (int i = 0; i < pw; i++) canvas_put(c, px + i, row, s->utf8 ? 0x254C : '-', COLOR_FLOOR, 0);
        canvas_printf(c, px + 2, row, pw - 4, COLOR_FLOOR, 0, " memcpy ceiling %.2f ", v->memcpy_gbps);
    }

    // The measurements: a letter where a cell is free; a collective whose cell another holds
    // (the small sizes, all near 0) takes the free cell beside it if there is one.
    for (size_t i = 0; i < v->nbusbw; i++) {
        const RunBusbw *m = &v->busbw[i];
        int k = series_of(series, &nseries, m->coll);
        if (k < 0) continue;
        int col = COLUMN(log2(m->bytes)) + (side ? k : 0), row = ROW(m->gbps), at = col;
        if (!side)
            for (int d = 0; d < 3; d++) {
                int cx = col + (d == 2 ? -1 : d);
                if (cx >= 0 && cx < pw && !is_marker(c, px + cx, py + row)) {
                    at = cx;
                    break;
                }
            }
        canvas_put(c, px + at, py + row, (uint32_t)series[k].letter, COLOR_MEM0 + k, ATTR_BOLD);
    }

    // The x axis: the smallest and largest sizes, and each power of 1024 between that fits.
    char label[16];
    int axis = py + ph, used = 0;
    size_label(label, sizeof label, exp2(lo));
    used = canvas_text(c, px, axis, -1, COLOR_DIM, 0, label);
    size_label(label, sizeof label, exp2(hi));
    int right = px + pw - (int)strlen(label);
    if (right > px + used) canvas_text(c, right, axis, -1, COLOR_DIM, 0, label);
    for (double p = ceil(lo / 10) * 10; p < hi; p += 10) {
        if (p <= lo) continue;
        size_label(label, sizeof label, exp2(p));
        int at = px + COLUMN(p) - (int)strlen(label) / 2;
        if (at > px + used + 1 && at + (int)strlen(label) < right - 1) used = at - px + canvas_text(c, at, axis, -1, COLOR_DIM, 0, label);
    }

    // The legend.
    int lx = x + 1, ly = axis + 1;
    for (int k = 0; k < nseries; k++) {
        canvas_put(c, lx, ly, (uint32_t)series[k].letter, COLOR_MEM0 + k, ATTR_BOLD);
        lx += 2 + canvas_text(c, lx + 2, ly, x + w - lx - 2, COLOR_NONE, 0, series[k].label) + 2;
    }
    // The ceiling, on a line of its own: what it is, and why points may pass it.
    if (notes > 0) {
        canvas_put(c, x + 1, ly + 1, s->utf8 ? 0x254C : '-', COLOR_FLOOR, 0);
        wrapped(c, x + 3, ly + 1, w - 4, COLOR_NONE, what);
        if (notes > what_h) wrapped(c, x + 1, ly + 1 + what_h, w - 2, COLOR_DIM, CEILING_NOTE);
    }
    #undef COLUMN
    #undef ROW
}
