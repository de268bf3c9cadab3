// memview.c — memory in the dashboard: the bars the overview and the memory panel share, and
// the memory panel (see dashboard.h).
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/harness/mem.h"  // format_bytes
#include "dashboard.h"

// The glyph of memory category k: a coloured block, or its initial without colour.
uint32_t dash_mem_glyph(const RunView *v, const DashState *s, int k) {
    char ch = v->mem_names[k][0];
    return dash_glyph(s, (uint32_t)(ch >= 'a' && ch <= 'z' ? ch - 32 : ch ? ch : '?'));
}

// The bytes a rank holds after its step: the sum of its categories.
double dash_mem_in_use(const RunView *v, const RunStep *st) {
    double total = 0;
    for (int k = 0; k < v->nmem; k++) total += st->mem[k];
    return total;
}

double dash_mem_scale(const RunView *v) {
    double scale = 0;
    for (int r = 0; r < v->nranks; r++) {
        const RunStep *st = &v->ranks[r].last;
        double total = dash_mem_in_use(v, st);
        if (st->peak > scale) scale = st->peak;
        if (total > scale) scale = total;
    }
    return scale;
}

// Rank r's memory, stacked by category in mem_names order, then the headroom up to its peak,
// on a bar where `scale` bytes fill `w` columns. Category k takes round(w * bytes_k / scale)
// columns, each rounded on its own, so equal amounts (params and grads in fp32) always get
// equal bars; the headroom runs to round(w * peak / scale).
void dash_mem_bar(Canvas *c, const RunView *v, const DashState *s, const RunStep *st, int x, int y, int w, double scale) {
    if (scale <= 0) return;
    int col = 0;
    for (int k = 0; k < v->nmem; k++) {
        int cells = (int)lround(w * st->mem[k] / scale);
        for (int i = 0; i < cells && col < w; i++, col++) canvas_put(c, x + col, y, dash_mem_glyph(v, s, k), COLOR_MEM0 + k, 0);
    }
    int peak_end = (int)lround(w * st->peak / scale);
    for (; col < peak_end && col < w; col++) canvas_put(c, x + col, y, s->utf8 ? 0x2591 : '.', COLOR_DIM, 0);
}

void dash_mem_legend(Canvas *c, const RunView *v, const DashState *s, int x, int y, int w) {
    int lx = x;
    for (int k = 0; k < v->nmem && lx < x + w; k++) {
        canvas_put(c, lx, y, dash_mem_glyph(v, s, k), COLOR_MEM0 + k, 0);
        lx += 2 + canvas_text(c, lx + 2, y, x + w - lx - 2, COLOR_NONE, 0, v->mem_names[k]) + 1;
    }
    canvas_put(c, lx, y, s->utf8 ? 0x2591 : '.', COLOR_DIM, 0);
    canvas_text(c, lx + 2, y, x + w - lx - 2, COLOR_NONE, 0, "transient, up to the peak");
}

// ---------------------------------------------------------------------------------------
// Panel 2: memory
// ---------------------------------------------------------------------------------------

// The ranks side by side in rows [y, y + h): each a column stacked by category from the
// bottom, in the legend's order, then shaded up to its peak, on the scale of the bars above.
// A tall terminal has the rows, and the ranks' differences (ZeRO's shards, a pipeline's
// stages) show at a glance. Category k ends at row round(ch * (bytes of categories 0..k) /
// scale) from the bottom, so the column's height is its in-use bytes, rounded once.
static void mem_columns(Canvas *c, const RunView *v, const DashState *s, int y, int h, double scale) {
    const int label = 10;  // " 8.58 MiB┤"
    int world = runview_world(v), ch = h - 2, cw = (c->w - 2 - label) / (world > 0 ? world : 1) - 1;
    if (cw > 8) cw = 8;
    if (ch < 6 || cw < 2 || !(scale > 0)) return;
    double all = 0;
    for (int r = 0; r < v->nranks; r++)
        if (v->ranks[r].has_step) all += dash_mem_in_use(v, &v->ranks[r].last);
    char b[32];
    canvas_printf(c, 1, y, c->w - 2, COLOR_TITLE, ATTR_BOLD, "the ranks side by side, to the same scale; all ranks together hold %s",
                  format_bytes(b, sizeof b, all));
    int bottom = y + ch;  // the columns' lowest row
    uint32_t tick = s->utf8 ? 0x2524 : '+', rule = s->utf8 ? 0x2502 : '|';
    for (int j = 0; j < ch; j++) canvas_put(c, label, bottom - j, rule, COLOR_DIM, 0);
    int marks[3] = {ch - 1, (ch - 1) / 2, 0};  // rows from the bottom: the top, the middle, 0
    for (int i = 0; i < 3; i++) {
        canvas_printf(c, 1, bottom - marks[i], label - 1, COLOR_DIM, 0, "%*s", label - 1,
                      format_bytes(b, sizeof b, scale * (marks[i] ? marks[i] + 1 : 0) / ch));
        canvas_put(c, label, bottom - marks[i], tick, COLOR_DIM, 0);
    }
    for (int r = 0; r < world; r++) {
        int x0 = label + 2 + r * (cw + 1);
        canvas_printf(c, x0, bottom + 1, cw, COLOR_NONE, ATTR_BOLD, "r%d", r);
        if (r >= v->nranks || !v->ranks[r].has_step) continue;
        const RunStep *st = &v->ranks[r].last;
        double sum = 0;
        int from = 0;
        for (int k = 0; k < v->nmem; k++) {
            sum += st->mem[k];
            int to = (int)lround(ch * sum / scale);
            for (int j = from; j < to && j < ch; j++) canvas_fill(c, x0, bottom - j, cw, dash_mem_glyph(v, s, k), COLOR_MEM0 + k, 0);
            from = to;
        }
        for (int j = from; j < (int)lround(ch * st->peak / scale) && j < ch; j++)
            canvas_fill(c, x0, bottom - j, cw, s->utf8 ? 0x2591 : '.', COLOR_DIM, 0);
    }
}

void dash_memory(Canvas *c, const RunView *v, const DashState *s, int y, int h) {
    char b[32];
    double scale = dash_mem_scale(v);
    int world = runview_world(v), w = c->w;
    canvas_printf(c, 1, y, w - 2, COLOR_TITLE, ATTR_BOLD, "device memory each rank holds after its last step; full width = %s",
                  format_bytes(b, sizeof b, scale));
    dash_mem_legend(c, v, s, 1, y + 1, w - 2);
    int row = y + 3, shown = 0;
    for (int r = 0; r < world && row + 3 <= y + h; r++, shown++) {
        const RunRank *rk = r < v->nranks ? &v->ranks[r] : NULL;
        if (!rk || !rk->has_step) {
            canvas_printf(c, 1, row, -1, COLOR_DIM, 0, "r%-2d no step yet", r);
            row += 2;
            continue;
        }
        const RunStep *st = &rk->last;
        double total = dash_mem_in_use(v, st);
        char b1[32], b2[32], b3[32];
        int x = 1 + canvas_printf(c, 1, row, -1, COLOR_NONE, ATTR_BOLD, "r%-2d", r);
        x += canvas_printf(c, x + 1, row, -1, COLOR_NONE, 0, "in use %s, peak %s (%s transient) after step %lld",
                           format_bytes(b1, sizeof b1, total), format_bytes(b2, sizeof b2, st->peak),
                           format_bytes(b3, sizeof b3, st->peak > total ? st->peak - total : 0), (long long)st->step) + 1;
        if (rk->checks)
            canvas_printf(c, x + 2, row, -1, rk->checks_failed ? COLOR_BAD : COLOR_OK, 0, "%ld check%s, %ld failed",
                          rk->checks, rk->checks == 1 ? "" : "s", rk->checks_failed);
        dash_mem_bar(c, v, s, st, 5, row + 1, w - 7, scale);
        x = 5;
        for (int k = 0; k < v->nmem; k++) {
            canvas_put(c, x, row + 2, dash_mem_glyph(v, s, k), COLOR_MEM0 + k, 0);
            x += 2 + canvas_printf(c, x + 2, row + 2, -1, COLOR_NONE, 0, "%s %s", v->mem_names[k],
                                   format_bytes(b1, sizeof b1, st->mem[k])) + 2;
        }
        row += 4;
    }
    if (shown < world) canvas_printf(c, 1, row, -1, COLOR_DIM, 0, "... %d more rank(s): make the terminal taller", world - shown);
    else mem_columns(c, v, s, row, y + h - row, scale);
}

