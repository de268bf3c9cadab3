// dashboard.c — the frame: header, banner, panels, footer (see dashboard.h). The loss chart
// is in lossplot.c, the collectives' in busbwplot.c, the memory panel and bars in memview.c,
// the timeline in timeline.c.
#include "dashboard.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common/harness/mem.h"  // format_bytes

#define STALLED_S 15  // no new event for this long, and no end: the run may be dead

static const char *PANEL_NAMES[PANEL_COUNT] = {"overview", "memory", "timeline", "log"};

const char *dash_panel_name(Panel p) { return p < PANEL_COUNT ? PANEL_NAMES[p] : "?"; }

// ---------------------------------------------------------------------------------------
// The run's state
// ---------------------------------------------------------------------------------------

static int failed_rank(const RunView *v) {
    // The rank whose error is the cause: one that does not blame another rank's failure
    // ("rank 2 failed, so rank 0 stops ..."), else the first with an error.
    int first = -1;
    for (int r = 0; r < v->nranks; r++) {
        const RunRank *rk = &v->ranks[r];
        int bad = rk->error[0] || (rk->ended && strcmp(rk->status, "error") == 0);
        if (!bad) continue;
        if (first < 0) first = r;
        if (rk->error[0] && run_blamed_rank(rk->error) < 0) return r;
    }
    return first;
}

const char *dash_status(const RunView *v, int64_t now_us) {
    if (failed_rank(v) >= 0 || (v->has_summary == 1 && strcmp(v->status, "ok") != 0)) return "failed";
    if (runview_ended(v)) return "finished";
    if (now_us > 0 && v->last_change_us > 0 && now_us - v->last_change_us > (int64_t)STALLED_S * 1000000) return "stalled";
    if (v->nloss == 0 && v->nbusbw == 0) return "starting";  // (the collectives log measurements, not steps)
    return "live";
}

static void count_checks(const RunView *v, long *checks, long *failed) {
    *checks = *failed = 0;
    for (int r = 0; r < v->nranks; r++) *checks += v->ranks[r].checks, *failed += v->ranks[r].checks_failed;
}

static const char *clock_text(char *buf, size_t n, double secs) {
    long s = secs > 0 && secs < 1e9 ? (long)lround(secs) : 0;
    if (s >= 3600) snprintf(buf, n, "%ld:%02ld:%02ld", s / 3600, s / 60 % 60, s % 60);
    else snprintf(buf, n, "%ld:%02ld", s / 60, s % 60);
    return buf;
}

static const char *rate_text(char *buf, size_t n, double per_s) {
    if (per_s >= 1e6) snprintf(buf, n, "%.2fM", per_s / 1e6);
    else if (per_s >= 1e3) snprintf(buf, n, "%.1fk", per_s / 1e3);
    else snprintf(buf, n, "%.0f", per_s);
    return buf;
}

// ---------------------------------------------------------------------------------------
// Header, banner, footer
// ---------------------------------------------------------------------------------------

static void header(Canvas *c, const RunView *v, const DashState *s, const char *status) {
    int w = c->w;
    const char *sep = s->utf8 ? " \xc2\xb7 " : " | ";
    int world = runview_world(v);
    canvas_fill(c, 0, 0, w, ' ', COLOR_TITLE, ATTR_REVERSE);
    int x = 1 + canvas_text(c, 1, 0, -1, COLOR_TITLE, ATTR_REVERSE | ATTR_BOLD, "shardlab");
    x += canvas_printf(c, x, 0, -1, COLOR_TITLE, ATTR_REVERSE, "%s%s%s%d rank%s%s%s%s%s", sep, v->lab[0] ? v->lab : "?",
                       sep, world, world == 1 ? "" : "s", sep, v->device[0] ? v->device : "?", sep,
                       v->backend[0] ? v->backend : "?");
    char badge[32];
    snprintf(badge, sizeof badge, " %s%s ", status, s->paused ? ", view paused" : "");
    for (char *p = badge; *p; p++) *p = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
    int color = strcmp(status, "failed") == 0 ? COLOR_BAD : strcmp(status, "finished") == 0 ? COLOR_OK
              : strcmp(status, "stalled") == 0 ? COLOR_WARN : COLOR_TITLE;
    canvas_text(c, w - (int)strlen(badge) - 1, 0, -1, color, ATTR_REVERSE | ATTR_BOLD, badge);

    // Row 1: progress. A lab that does not train (collectives) has no steps: its checks.
    int64_t step = v->nloss ? v->loss[v->nloss - 1].step : 0, total = v->steps_total;
    if (!v->nloss && !total) {
        long checks, failed;
        count_checks(v, &checks, &failed);
        canvas_printf(c, 1, 1, -1, failed ? COLOR_BAD : COLOR_NONE, ATTR_BOLD, "%ld check%s, %ld failed", checks,
                      checks == 1 ? "" : "s", failed);
        x = 1;
        goto panels;
    }
    x = 1 + canvas_printf(c, 1, 1, -1, COLOR_NONE, ATTR_BOLD, "step %lld", (long long)step);
    if (total > 0) {
        x += canvas_printf(c, x, 1, -1, COLOR_NONE, 0, "/%lld ", (long long)total);
        int bw = w / 4 < 40 ? w / 4 : 40;
        double f = (double)step / (double)total;
        if (f > 1) f = 1;
        int full = (int)floor(f * bw * 8 + 0.5);  // in eighths of a cell
        canvas_put(c, x, 1, '[', COLOR_DIM, 0);
        for (int i = 0; i < bw; i++) {
            int eighths = full - 8 * i;
            uint32_t ch = eighths >= 8 ? (s->utf8 ? 0x2588 : '#')
                        : eighths > 0 ? (s->utf8 ? 0x2590 - (uint32_t)eighths : '#')  // U+258F..U+2589: 1/8..7/8
                        : (s->utf8 ? 0x2591 : '.');
            canvas_put(c, x + 1 + i, 1, ch, eighths > 0 ? COLOR_OK : COLOR_DIM, 0);
        }
        canvas_put(c, x + 1 + bw, 1, ']', COLOR_DIM, 0);
        x += bw + 3;
        x += canvas_printf(c, x, 1, -1, COLOR_NONE, 0, "%5.1f%%", 100 * f);
    }
    char eta[32], rate[32];
    double ms = runview_ms_per_step(v, 20);
    int ended = runview_ended(v);
    if (total > step && ms > 0 && !ended)
        x += canvas_printf(c, x, 1, -1, COLOR_NONE, 0, "  ETA %s", clock_text(eta, sizeof eta, (double)(total - step) * ms / 1000));
    double tps = ended && v->has_summary == 1 && v->tokens_per_s > 0 ? v->tokens_per_s : runview_tokens_per_s(v, 20);
    if (tps > 0) x += canvas_printf(c, x, 1, -1, COLOR_NONE, 0, "  %s tok/s", rate_text(rate, sizeof rate, tps));
    if (ms > 0) x += canvas_printf(c, x, 1, -1, COLOR_NONE, 0, "  %.2f ms/step", ms);
    if (v->nloss) canvas_printf(c, x, 1, -1, COLOR_NONE, 0, "  loss %.4f", v->loss[v->nloss - 1].loss);

panels:  // Row 2: the panels.
    x = 1;
    for (int p = 0; p < PANEL_COUNT; p++) {
        int on = (int)s->panel == p;
        x += canvas_printf(c, x, 2, -1, on ? COLOR_TITLE : COLOR_DIM, on ? ATTR_REVERSE | ATTR_BOLD : 0, " %d %s ", p + 1,
                           PANEL_NAMES[p]) + 1;
    }
}

// Returns the rows it used (0 or 1).
static int banner(Canvas *c, const RunView *v, const DashState *s, const char *status, int y) {
    char text[768], b[32];
    int bad = failed_rank(v);
    if (bad >= 0) {
        const RunRank *rk = &v->ranks[bad];
        snprintf(text, sizeof text, " %s rank %d failed: %s ", s->utf8 ? "\xe2\x9c\x96" : "X", bad,
                 rk->error[0] ? rk->error : "its end event says error");
        canvas_fill(c, 0, y, c->w, ' ', COLOR_BAD, ATTR_REVERSE);
        canvas_text(c, 0, y, c->w, COLOR_BAD, ATTR_REVERSE | ATTR_BOLD, text);
        return 1;
    }
    if (strcmp(status, "finished") == 0) {
        const char *mark = s->utf8 ? "\xe2\x9c\x94" : "OK";
        int n;
        if (v->nloss) {
            // The summary's figures when it has them (it is what graders read), else the log's.
            int64_t steps = v->loss[v->nloss - 1].step;
            double first = isfinite(v->first_loss) && v->has_summary == 1 ? v->first_loss : v->loss[0].loss;
            double last = isfinite(v->final_loss) && v->has_summary == 1 ? v->final_loss : v->loss[v->nloss - 1].loss;
            n = snprintf(text, sizeof text, " %s finished: %lld steps, loss %.4f -> %.4f", mark, (long long)steps, first, last);
            if (v->has_floor) n += snprintf(text + n, sizeof text - (size_t)n, " (floor %.4f)", v->loss_floor);
        } else {
            long checks, failed;
            count_checks(v, &checks, &failed);
            n = snprintf(text, sizeof text, " %s finished: %ld check%s, %ld failed", mark, checks, checks == 1 ? "" : "s", failed);
        }
        if (v->has_summary == 1 && v->wall_s > 0 && v->mem_peak > 0)
            snprintf(text + n, sizeof text - (size_t)n, ", %.1f s, peak %s/rank ", v->wall_s,
                     format_bytes(b, sizeof b, v->mem_peak));  // tokens/s: in the header
        canvas_fill(c, 0, y, c->w, ' ', COLOR_OK, ATTR_REVERSE);
        canvas_text(c, 0, y, c->w, COLOR_OK, ATTR_REVERSE | ATTR_BOLD, text);
        return 1;
    }
    if (strcmp(status, "stalled") == 0) {
        canvas_printf(c, 0, y, c->w, COLOR_WARN, ATTR_BOLD, " no new events for %.0f s and no end event: is the run still alive?",
                      (double)(s->now_us - v->last_change_us) / 1e6);
        return 1;
    }
    return 0;
}

static void footer(Canvas *c, const RunView *v, const DashState *s) {
    int y = c->h - 1;
    const char *keys = s->attached
        ? "q leave the view (the run goes on)  p pause  tab/1-4 panels  l lexicon  ? help"
        : "q quit  p pause  tab/1-4 panels  l lexicon  ? help";
    if (s->message) canvas_text(c, 1, y, c->w - 2, COLOR_WARN, ATTR_BOLD, s->message);
    else if (s->dump) canvas_printf(c, 1, y, c->w - 2, COLOR_DIM, 0, "run %s", v->dir);
    else canvas_text(c, 1, y, c->w - 2, COLOR_DIM, 0, keys);
    if (v->malformed) {
        char t[64];
        int n = snprintf(t, sizeof t, " %ld malformed line%s skipped ", v->malformed, v->malformed == 1 ? "" : "s");
        canvas_text(c, c->w - n - 1, y, n, COLOR_WARN, ATTR_REVERSE, t);
    }
}

// ---------------------------------------------------------------------------------------
// Panel 1: overview
// ---------------------------------------------------------------------------------------

static uint32_t rank_mark(const RunRank *rk, const DashState *s) {
    if (rk->error[0] || (rk->ended && strcmp(rk->status, "error") == 0)) return s->utf8 ? 0x2716 : 'x';
    if (rk->ended) return s->utf8 ? 0x2714 : '+';
    return ' ';
}

static void rank_rows(Canvas *c, const RunView *v, const DashState *s, int y, int h) {
    int w = c->w, world = runview_world(v);
    const int cb = 12;                   // the compute|comm bar
    int with_time_bar = w >= 96;
    int mb = w - 1 - 5 - 7 - 9 - (with_time_bar ? cb + 3 : 0) - 11 - 2 - 21;  // the memory bar
    int with_figures = mb >= 16;  // narrow: the bar keeps the room, the memory panel has the bytes
    if (!with_figures) mb += 21;
    double ms_max = 0, scale = dash_mem_scale(v);
    for (int r = 0; r < v->nranks; r++)
        if (v->ranks[r].last.ms_step > ms_max) ms_max = v->ranks[r].last.ms_step;
    int x = 1;
    canvas_text(c, x, y, -1, COLOR_DIM, ATTR_BOLD, "rank  step  ms/step");
    x = 22;
    if (with_time_bar) {
        canvas_put(c, x, y, dash_glyph(s, '='), COLOR_FWD, 0);
        canvas_text(c, x + 1, y, -1, COLOR_DIM, ATTR_BOLD, "compute");
        canvas_put(c, x + 9, y, dash_glyph(s, '~'), COLOR_ALL_REDUCE, 0);
        canvas_text(c, x + 10, y, -1, COLOR_DIM, ATTR_BOLD, "comm");  // (exposed: the legend below says it)
        x += cb + 3;
    }
    canvas_text(c, x, y, -1, COLOR_DIM, ATTR_BOLD, "sent/step");
    x += 11;
    canvas_text(c, x + 1, y, mb, COLOR_DIM, ATTR_BOLD, "memory by category, to scale");
    if (with_figures) canvas_text(c, x + mb + 3, y, -1, COLOR_DIM, ATTR_BOLD, "in use / peak");
    int row = y + 1, shown = 0;
    for (int r = 0; r < world && row < y + h - 1; r++, row++, shown++) {
        const RunRank *rk = r < v->nranks ? &v->ranks[r] : NULL;
        canvas_printf(c, 1, row, -1, COLOR_NONE, ATTR_BOLD, "r%-2d", r);
        if (!rk || !rk->has_step) {
            canvas_put(c, 4, row, rk ? rank_mark(rk, s) : ' ', rk && rk->error[0] ? COLOR_BAD : COLOR_OK, 0);
            canvas_text(c, 6, row, -1, COLOR_DIM, 0, !rk || !rk->started ? "not started" : rk->ended ? "ended; no step events"
                                                                                           : "started, no step yet");
            continue;
        }
        const RunStep *st = &rk->last;
        canvas_put(c, 4, row, rank_mark(rk, s), rk->error[0] || strcmp(rk->status, "error") == 0 ? COLOR_BAD : COLOR_OK, 0);
        canvas_printf(c, 6, row, -1, COLOR_NONE, 0, "%6lld %8.2f", (long long)st->step, st->ms_step);
        x = 22;
        if (with_time_bar) {
            canvas_put(c, x, row, '[', COLOR_DIM, 0);
            if (ms_max > 0) {
                // Compute, then the communication the step waited for (exposed); the part of
                // the communication that ran during compute (hidden) marks the end of compute.
                double total_ms = 0, hidden_ms = 0;
                dash_comm_ms(v, r, &total_ms, &hidden_ms);
                int a = (int)lround(cb * st->ms_compute / ms_max), b = (int)lround(cb * (st->ms_compute + st->ms_comm) / ms_max);
                int hid = (int)lround(cb * hidden_ms / ms_max);
                for (int i = 0; i < cb; i++) {
                    int comp = i < a, hidden = comp && i >= a - hid, comm = !comp && i < b;
                    uint32_t ch = hidden ? (s->utf8 ? 0x2592 : '%') : comp ? dash_glyph(s, '=') : comm ? dash_glyph(s, '~') : ' ';
                    canvas_put(c, x + 1 + i, row, ch, hidden ? COLOR_ALL_REDUCE : comp ? COLOR_FWD : COLOR_ALL_REDUCE, 0);
                }
            }
            canvas_put(c, x + cb + 1, row, ']', COLOR_DIM, 0);
            x += cb + 3;
        }
        char b1[32], b2[32];
        canvas_printf(c, x, row, 10, COLOR_NONE, 0, "%10s", format_bytes(b1, sizeof b1, st->sent));
        x += 11;
        canvas_put(c, x, row, '[', COLOR_DIM, 0);
        dash_mem_bar(c, v, s, st, x + 1, row, mb, scale);
        canvas_put(c, x + mb + 1, row, ']', COLOR_DIM, 0);
        double total = dash_mem_in_use(v, st);
        if (with_figures)
            canvas_printf(c, x + mb + 3, row, -1, COLOR_NONE, 0, "%s / %s", format_bytes(b1, sizeof b1, total),
                          format_bytes(b2, sizeof b2, st->peak));
    }
    if (shown < world) canvas_printf(c, 1, row++, -1, COLOR_DIM, 0, "... %d more rank(s): make the terminal taller", world - shown);
    if (row < y + h && v->nmem) dash_mem_legend(c, v, s, 1, row++, w - 2);
    // Communication, named both ways: what the step waited for, and all of it (for a lab
    // with steps: the collectives have none).
    int steps = 0;
    for (int r = 0; r < v->nranks; r++) steps |= v->ranks[r].has_step;
    if (with_time_bar && steps && row < y + h) {
        double total_ms = 0, hidden_ms = 0;
        int x0 = 1;
        canvas_put(c, x0, row, dash_glyph(s, '='), COLOR_FWD, 0);
        x0 += 2 + canvas_text(c, x0 + 2, row, -1, COLOR_DIM, 0, "compute");
        canvas_put(c, x0 + 2, row, dash_glyph(s, '~'), COLOR_ALL_REDUCE, 0);
        x0 += 4 + canvas_text(c, x0 + 4, row, -1, COLOR_DIM, 0, "communication the step waited for (exposed)");
        canvas_put(c, x0 + 2, row, s->utf8 ? 0x2592 : '%', COLOR_ALL_REDUCE, 0);
        x0 += 4 + canvas_text(c, x0 + 4, row, -1, COLOR_DIM, 0, "hidden behind compute");
        if (dash_comm_ms(v, 0, &total_ms, &hidden_ms) && total_ms > 0)
            canvas_printf(c, x0, row, -1, COLOR_DIM, 0, "; r0: %.2f ms in all, %.0f%% hidden", total_ms, 100 * hidden_ms / total_ms);
    }
}

// The last lines of s->log_text that fit in rows [y, y + h), from column x.
static void log_lines(Canvas *c, const DashState *s, int x, int y, int h) {
    if (!s->log_text || h <= 0) return;
    const char *end = s->log_text + strlen(s->log_text), *p = end;
    if (p > s->log_text && p[-1] == '\n') p--;
    int lines = 0;
    while (p > s->log_text && lines < h) {
        p--;
        if (*p == '\n') lines++;
    }
    if (lines == h) p++;  // p is at a newline: the line after it is the first shown
    for (int row = y; p < end && row < y + h; row++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), p);
        canvas_text(c, x, row, c->w - x - 1, COLOR_NONE, 0, line);
        p += n + 1;
    }
}

// The ranks on one line, each with its mark and where it is: for a lab without steps, whose
// rows of step time, bytes and memory would stay empty.
static void rank_line(Canvas *c, const RunView *v, const DashState *s, int y) {
    int x = 1 + canvas_text(c, 1, y, -1, COLOR_DIM, ATTR_BOLD, "ranks");
    for (int r = 0; r < runview_world(v) && x < c->w - 12; r++) {
        const RunRank *rk = r < v->nranks ? &v->ranks[r] : NULL;
        int bad = rk && (rk->error[0] || (rk->ended && strcmp(rk->status, "error") == 0));
        x += 2 + canvas_printf(c, x + 2, y, -1, COLOR_NONE, ATTR_BOLD, "r%d", r);
        if (rk && rk->ended) canvas_put(c, x + 1, y, rank_mark(rk, s), bad ? COLOR_BAD : COLOR_OK, 0), x += 2;
        x += 1 + canvas_text(c, x + 1, y, -1, COLOR_DIM, 0, !rk || !rk->started ? "not started" : bad ? "failed"
                                                         : rk->ended ? "ended" : "running");
    }
}

static void overview(Canvas *c, const RunView *v, const DashState *s, int y, int h) {
    int world = runview_world(v);
    if (v->nloss == 0 && v->nbusbw > 0 && h - 2 >= 8) {
        // The collectives: their picture takes the panel, the ranks a line under it.
        dash_busbw_chart(c, v, s, 1, y, c->w - 2, h - 2);
        rank_line(c, v, s, y + h - 1);
        return;
    }
    int ranks_h = world + 2 + (c->w >= 96);  // header, rows, legends (the time bar's when it is drawn)
    if (ranks_h > h / 2) ranks_h = h / 2;
    int chart_h = h - ranks_h - 1;
    if (v->nloss == 0 && s->log_text && s->log_text[0]) {
        // No step yet (or a lab without steps): what rank 0 said (its memory table, the
        // collectives' table) is the news.
        canvas_printf(c, 1, y, c->w - 2, COLOR_TITLE, ATTR_BOLD, "rank %d's output (%s)", s->log_rank,
                      v->steps_total ? "the loss chart starts with the first step" : "this lab logs no training steps");
        log_lines(c, s, 3, y + 1, chart_h - 1);
    } else {
        dash_loss_chart(c, v, s, 0, y, c->w - 1, chart_h);
    }
    rank_rows(c, v, s, y + chart_h + 1, ranks_h);
}

// ---------------------------------------------------------------------------------------
// Panel 4: log
// ---------------------------------------------------------------------------------------

static void log_panel(Canvas *c, const RunView *v, const DashState *s, int y, int h) {
    int row = y, w = c->w, world = runview_world(v);
    char b[32];
    if (v->has_summary == 1 && isfinite(v->first_loss))
        canvas_printf(c, 1, row++, w - 2, COLOR_OK, ATTR_BOLD,
                      "summary: %s, %lld steps, loss %.4f -> %.4f, %.0f tok/s, %.2f s, peak %s per rank", v->status,
                      (long long)v->summary_steps, v->first_loss, v->final_loss, v->tokens_per_s, v->wall_s,
                      format_bytes(b, sizeof b, v->mem_peak));
    for (int r = 0; r < world && row < y + h - 4; r++) {
        const RunRank *rk = r < v->nranks ? &v->ranks[r] : NULL;
        if (!rk) {
            canvas_printf(c, 1, row++, w - 2, COLOR_DIM, 0, "r%-2d no events yet", r);
            continue;
        }
        int bad = rk->error[0] || rk->checks_failed || (rk->ended && strcmp(rk->status, "error") == 0);
        int x = 1 + canvas_printf(c, 1, row, -1, bad ? COLOR_BAD : COLOR_NONE, ATTR_BOLD, "r%-2d", r);
        x += canvas_printf(c, x + 1, row, -1, COLOR_NONE, 0, "%s, %ld events, %ld checks (%ld failed)%s",
                           rk->ended ? (strcmp(rk->status, "ok") == 0 ? "ended ok" : "ended with an error") : "running",
                           rk->lines, rk->checks, rk->checks_failed, rk->malformed ? "," : "") + 1;
        if (rk->malformed) canvas_printf(c, x + 1, row, -1, COLOR_WARN, 0, "%ld malformed", rk->malformed);
        row++;
        if (rk->error[0]) canvas_printf(c, 5, row++, w - 6, COLOR_BAD, 0, "error: %s", rk->error);
        if (rk->checks_failed) canvas_printf(c, 5, row++, w - 6, COLOR_BAD, 0, "failed check: %s", rk->failed_check);
    }
    if (v->problem[0]) canvas_printf(c, 1, row++, w - 2, COLOR_WARN, 0, "skipped: %s", v->problem);
    row++;
    canvas_printf(c, 1, row++, w - 2, COLOR_TITLE, ATTR_BOLD, "rank %d's output (rank-%d.log; r: next rank)", s->log_rank,
                  s->log_rank);
    log_lines(c, s, 3, row, y + h - row);
}

// ---------------------------------------------------------------------------------------
// Help, and the frame
// ---------------------------------------------------------------------------------------

static void help_box(Canvas *c, const DashState *s) {
    static const char *lines[] = {
        "shardlab tui: keys",
        "",
        "  1 2 3 4, tab   overview, memory, timeline, log (shift-tab: back)",
        "  p              pause the view (the run goes on); p again catches up",
        "  l              the lexicon's entry for this lab, in a pager",
        "  r              log panel: the next rank's output",
        "  q              quit the view; a run started with it goes on",
        "  ?              this help (any key closes it)",
        "",
        "Every figure is read from the run directory's files; the view",
        "never talks to the ranks, so it cannot slow them down.",
    };
    int n = (int)(sizeof lines / sizeof lines[0]), bw = 74, bh = n + 2;
    if (bw > c->w - 2) bw = c->w - 2;
    int x0 = (c->w - bw) / 2, y0 = (c->h - bh) / 2;
    for (int y = 0; y < bh; y++) canvas_fill(c, x0, y0 + y, bw, ' ', COLOR_TITLE, ATTR_REVERSE);
    for (int i = 0; i < n; i++) canvas_text(c, x0 + 2, y0 + 1 + i, bw - 4, COLOR_TITLE, ATTR_REVERSE | (i == 0 ? ATTR_BOLD : 0), lines[i]);
    (void)s;
}

void dash_render(Canvas *c, const RunView *v, const DashState *s) {
    canvas_clear(c);
    if (c->w < DASH_MIN_W || c->h < DASH_MIN_H) {
        canvas_printf(c, 0, 0, c->w, COLOR_WARN, ATTR_BOLD, "terminal too small: %dx%d", c->w, c->h);
        canvas_printf(c, 0, 1, c->w, COLOR_NONE, 0, "the dashboard needs %dx%d;", DASH_MIN_W, DASH_MIN_H);
        canvas_text(c, 0, 2, c->w, COLOR_NONE, 0, "enlarge it, or q to quit");
        return;
    }
    const char *status = dash_status(v, s->paused ? 0 : s->now_us);  // paused: nothing is read, nothing is stalled
    header(c, v, s, status);
    int y = 3;
    y += banner(c, v, s, status, y);
    int h = c->h - 1 - y;  // the footer takes the last row
    switch (s->panel) {
    case PANEL_OVERVIEW: overview(c, v, s, y, h); break;
    case PANEL_MEMORY: dash_memory(c, v, s, y, h); break;
    case PANEL_TIMELINE: dash_timeline(c, v, s, 1, y, c->w - 2, h); break;
    default: log_panel(c, v, s, y, h); break;
    }
    footer(c, v, s);
    if (s->help) help_box(c, s);
}
