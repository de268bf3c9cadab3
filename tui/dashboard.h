// dashboard.h — what the terminal dashboard draws, as a pure function of a run.
//
// Defines: Panel, DashState, DASH_MIN_W, DASH_MIN_H, dash_render(), dash_panel_name(),
//          dash_timeline(), dash_loss_chart(), dash_busbw_chart(), dash_status(), SpanKind,
//          span_kind(), dash_mem_*(), dash_memory().
//
// dash_render() draws one frame of a RunView (runread.h) into a Canvas (canvas.h): a header
// (lab, world, device and backend, step / total with a progress bar, ETA, tokens/s), a
// banner when a rank failed or the run ended, one of four panels, and a footer with the
// keys. It reads no files and keeps no state, so the same run always draws the same frame:
// `shardlab tui --dump` prints it, and the tests compare it with the run's numbers.
//
// Panels (keys 1-4, tab):
//   1 overview   the loss chart (floor and reference run included; for the collectives lab,
//                the bus bandwidth by message size instead) and a row per rank:
//                step time split into compute and communication, bytes sent per step,
//                memory as a bar stacked by category against the peak
//   2 memory     each rank's memory by category, in bytes and to scale; below, on a terminal
//                with the rows, the ranks side by side as columns stacked by category
//   3 timeline   the last complete step of every rank as a Gantt chart: compute on one
//                line, communication on the next, so overlap and idle time show
//   4 log        the summary, each rank's end, errors and failed checks, and the tail of a
//                rank's output (rank-<r>.log)
#ifndef SHARDLAB_DASHBOARD_H
#define SHARDLAB_DASHBOARD_H

#include <stdint.h>

#include "canvas.h"
#include "command/runs/runread.h"

#define DASH_MIN_W 60
#define DASH_MIN_H 16

typedef enum { PANEL_OVERVIEW, PANEL_MEMORY, PANEL_TIMELINE, PANEL_LOG, PANEL_COUNT } Panel;

typedef struct {
    Panel panel;
    int utf8;               // the terminal shows UTF-8 (braille, blocks); else ASCII
    int color;              // colours are on; without them bars use letters
    int paused, help;       // the view is frozen; the help box is open
    int attached;           // started by `shardlab run`: q leaves the view, the run goes on
    int dump;               // a still frame (--dump): the footer names the run, not keys
    int64_t now_us;
    const char *message;    // one line for the footer (a key's answer), or NULL
    const char *log_text;   // panel 4: the last lines of rank log_rank's output, or NULL
    int log_rank;
} DashState;

const char *dash_panel_name(Panel p);
void dash_render(Canvas *c, const RunView *v, const DashState *s);

// The run's state in a word: "starting", "live", "stalled", "finished", "failed".
const char *dash_status(const RunView *v, int64_t now_us);

// What a span is, for the timeline and its legend.
typedef enum { SPAN_FWD, SPAN_BWD, SPAN_RECOMPUTE, SPAN_OPTIM,            // compute
               SPAN_ALL_REDUCE, SPAN_REDUCE_SCATTER, SPAN_ALL_GATHER, SPAN_P2P,  // communication
               SPAN_OTHER_COMM, SPAN_KINDS } SpanKind;
#define SPAN_IS_COMPUTE(k) ((k) <= SPAN_OPTIM)
SpanKind span_kind(const char *name);

// A full block in colour (the colour tells what it is), else `letter` (the letter does).
static inline uint32_t dash_glyph(const DashState *s, uint32_t letter) {
    return s->color ? (s->utf8 ? 0x2588 : '#') : letter;
}

// The pieces, for the panels that share them (timeline.c, lossplot.c).
void dash_loss_chart(Canvas *c, const RunView *v, const DashState *s, int x, int y, int w, int h);
// The collectives lab's bus bandwidth by message size (busbwplot.c); nothing without measurements.
void dash_busbw_chart(Canvas *c, const RunView *v, const DashState *s, int x, int y, int w, int h);
void dash_timeline(Canvas *c, const RunView *v, const DashState *s, int x, int y, int w, int h);
// Rank r's communication in the timeline's step (the last every rank finished), from its
// spans: all of it, and the part that ran while the rank computed (hidden), in ms. 0: no
// spans for it yet.
int dash_comm_ms(const RunView *v, int r, double *total_ms, double *hidden_ms);

// Memory (memview.c): category k's glyph; the bytes a step's categories add up to; the
// scale every rank's bar shares (the largest of any rank's peak and in-use); a rank's bar,
// stacked by category, then the transient part up to its peak; the legend; panel 2.
uint32_t dash_mem_glyph(const RunView *v, const DashState *s, int k);
double dash_mem_in_use(const RunView *v, const RunStep *st);
double dash_mem_scale(const RunView *v);
void dash_mem_bar(Canvas *c, const RunView *v, const DashState *s, const RunStep *st, int x, int y, int w, double scale);
void dash_mem_legend(Canvas *c, const RunView *v, const DashState *s, int x, int y, int w);
void dash_memory(Canvas *c, const RunView *v, const DashState *s, int y, int h);

#endif
