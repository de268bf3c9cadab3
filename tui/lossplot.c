// lossplot.c — the loss chart of the overview panel: rank 0's loss per step in braille, the
// loss floor the data allows, and a reference run's curve if the run names one.
//
//     5.552 ┤⡀
//           │⠈⠢⣀
//     3.409 ┤   ⠉⠒⠤⢄⣀⣀⡀
//           │           ⠉⠉⠉⠑⠒⠒⠒⠤⠤⠤⣀⣀⣀⣀
//     1.266 ┤⠤⠤⠤⠤⠤⠤⠤⠤⠤⠤⠤⠤⠤⠤⠤⠤⠤⠤⠤⠤⠤⠤⠤⠤⠤⠤⠤⠤⠤⠤  floor
//            1                          1000
//
// The x axis runs over every planned step (config "steps"), so the curve also shows how far
// the run has come; the y axis spans the lowest and highest values drawn, floor included.
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dashboard.h"

#define LABEL_W 9  // "  5.552 ┤"

typedef struct {
    double lo, hi;
    int64_t xmax;
    int dots_w, dots_h;
} Scale;

static int dot_x(const Scale *sc, int64_t step) {
    if (sc->xmax <= 1) return 0;
    double f = (double)(step - 1) / (double)(sc->xmax - 1);
    if (f < 0) f = 0;
    if (f > 1) f = 1;
    return (int)lround(f * (sc->dots_w - 1));
}

static int dot_y(const Scale *sc, double loss) {
    double f = (sc->hi - loss) / (sc->hi - sc->lo);
    if (!(f >= 0)) f = 0;  // also NaN
    if (f > 1) f = 1;
    return (int)lround(f * (sc->dots_h - 1));
}

static void widen(Scale *sc, double x) {
    if (!isfinite(x)) return;
    if (x < sc->lo) sc->lo = x;
    if (x > sc->hi) sc->hi = x;
}

// dotted: a dot every third dot-column at most, so that without colour the curve reads as a
// dotted line beside the run's solid one however many steps it has.
static void draw_curve(Braille *b, const Scale *sc, const RunPoint *p, size_t n, int color, int dotted) {
    int px = -1, py = -1;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(p[i].loss)) continue;
        int x = dot_x(sc, p[i].step), y = dot_y(sc, p[i].loss);
        if (dotted) {
            if (px >= 0 && x - px < 3) continue;
            braille_dot(b, x, y, color);
        } else if (px < 0) braille_dot(b, x, y, color);
        else braille_line(b, px, py, x, y, color);
        px = x, py = y;
    }
}

void dash_loss_chart(Canvas *c, const RunView *v, const DashState *s, int x, int y, int w, int h) {
    int pw = w - LABEL_W - 1, ph = h - 2;  // the plot, between the y labels and the two rows below
    if (pw < 10 || ph < 2) return;
    if (v->nloss == 0) {
        canvas_text(c, x + 2, y + h / 2, w - 2, COLOR_DIM, 0, "loss: waiting for the first step event ...");
        return;
    }
    Scale sc = {INFINITY, -INFINITY, v->steps_total, 2 * pw, 4 * ph};
    for (size_t i = 0; i < v->nloss; i++) widen(&sc, v->loss[i].loss);
    for (size_t i = 0; i < v->nref; i++) widen(&sc, v->ref[i].loss);
    if (v->has_floor) widen(&sc, v->loss_floor);
    if (!isfinite(sc.lo)) sc.lo = 0, sc.hi = 1;
    if (sc.hi - sc.lo < 1e-6) sc.hi = sc.lo + 1e-6;
    int64_t last = v->loss[v->nloss - 1].step;
    if (sc.xmax < last) sc.xmax = last;
    if (v->nref && sc.xmax < v->ref[v->nref - 1].step) sc.xmax = v->ref[v->nref - 1].step;
    if (sc.xmax < 1) sc.xmax = 1;

    Braille b;
    braille_init(&b, pw, ph);
    if (v->has_floor) {  // a dotted line: one dot in every other column
        int fy = dot_y(&sc, v->loss_floor);
        for (int dx = 0; dx < sc.dots_w; dx += 2) braille_dot(&b, dx, fy, COLOR_FLOOR);
    }
    draw_curve(&b, &sc, v->ref, v->nref, COLOR_REF, !s->color);  // without colour: dots, not a line
    draw_curve(&b, &sc, v->loss, v->nloss, COLOR_LOSS, 0);
    braille_draw(&b, c, x + LABEL_W, y, s->utf8);
    braille_free(&b);

    // The y axis: the top, the middle and the bottom of the range, on the rows they fall on.
    uint32_t tick = s->utf8 ? 0x2524 : '+', rule = s->utf8 ? 0x2502 : '|';
    for (int r = 0; r < ph; r++) canvas_put(c, x + LABEL_W - 1, y + r, rule, COLOR_DIM, 0);
    // hi is the top dot of the first row, lo the bottom dot of the last; a row in between
    // stands for the value at its middle (dot row 4r + 1.5).
    canvas_printf(c, x, y, LABEL_W - 1, COLOR_DIM, 0, "%8.3f", sc.hi);
    canvas_printf(c, x, y + ph - 1, LABEL_W - 1, COLOR_DIM, 0, "%8.3f", sc.lo);
    canvas_put(c, x + LABEL_W - 1, y, tick, COLOR_DIM, 0);
    canvas_put(c, x + LABEL_W - 1, y + ph - 1, tick, COLOR_DIM, 0);
    if (ph >= 5) {
        int mid = (ph - 1) / 2;
        canvas_printf(c, x, y + mid, LABEL_W - 1, COLOR_DIM, 0, "%8.3f",
                      sc.hi - (sc.hi - sc.lo) * (4.0 * mid + 1.5) / (sc.dots_h - 1));
        canvas_put(c, x + LABEL_W - 1, y + mid, tick, COLOR_DIM, 0);
    }
    // The x axis: first and last step, and the step we are at.
    char right[32];
    snprintf(right, sizeof right, "%lld", (long long)sc.xmax);
    canvas_text(c, x + LABEL_W, y + ph, -1, COLOR_DIM, 0, "1");
    canvas_text(c, x + LABEL_W + pw - (int)strlen(right), y + ph, -1, COLOR_DIM, 0, right);
    int at = x + LABEL_W + dot_x(&sc, last) / 2;
    char here[48];
    snprintf(here, sizeof here, "step %lld", (long long)last);
    int hx = at - (int)strlen(here) / 2;
    if (hx > x + LABEL_W + 2 && hx + (int)strlen(here) < x + LABEL_W + pw - (int)strlen(right) - 1)
        canvas_text(c, hx, y + ph, -1, COLOR_DIM, 0, here);

    // The legend, with the numbers it refers to.
    int lx = x + 1, ly = y + ph + 1;
    uint32_t mark = s->utf8 ? 0x28ff : '*';
    canvas_put(c, lx, ly, mark, COLOR_LOSS, 0);
    lx += 2 + canvas_printf(c, lx + 2, ly, -1, COLOR_NONE, 0, "loss %.4f (step %lld)", v->loss[v->nloss - 1].loss,
                            (long long)last);
    if (v->has_floor) {
        canvas_put(c, lx + 2, ly, s->utf8 ? 0x2812 : '-', COLOR_FLOOR, 0);
        lx += 4 + canvas_printf(c, lx + 4, ly, -1, COLOR_NONE, 0, "floor %.4f", v->loss_floor);
    }
    if (v->nref) {
        const char *name = strrchr(v->ref_dir, '/');
        name = name && name[1] ? name + 1 : v->ref_dir;
        canvas_put(c, lx + 2, ly, s->utf8 ? 0x2811 : '+', COLOR_REF, 0);
        lx += 4 + canvas_printf(c, lx + 4, ly, x + w - lx - 4, COLOR_NONE, 0, "reference %s", name);
    } else if (v->ref_problem[0]) {
        canvas_printf(c, lx + 2, ly, x + w - lx - 2, COLOR_WARN, 0, "reference: %s", v->ref_problem);
    }
}
