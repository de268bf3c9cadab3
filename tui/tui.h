// tui.h — the terminal dashboard (ncurses): `shardlab tui`, and `shardlab run --ui tui`.
//
// Defines: TuiOptions, Tui, tui_open(), tui_tick(), tui_wait_quit(), tui_close(),
//          tui_restore_terminal(), tui_main(), tui_find_root().
//
// The dashboard only reads the run directory (runread.h) and draws it (dashboard.h); it
// never talks to the ranks. tui_tick() does one bounded piece of work and returns, so the
// launcher can call it from the loop in which it watches its ranks: it reads the keys that
// were pressed, reads what the ranks appended, and redraws at most ten times a second.
#ifndef SHARDLAB_TUI_H
#define SHARDLAB_TUI_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int attached;        // started by `shardlab run`: q leaves the view, the run goes on
    int color;           // 1 on, 0 off, -1 auto (off when NO_COLOR is set or the terminal has none)
    int ascii;           // 1: no UTF-8 even if the locale has it
    const char *ref;     // a reference run to draw beside the loss (NULL: the run's own config "ref")
    int panel;           // the panel to open on (0-3)
} TuiOptions;

typedef struct Tui Tui;

// Takes over the terminal (stdin and stdout must be one). NULL with the reason in err.
Tui *tui_open(const char *run_dir, const TuiOptions *o, char *err, size_t errlen);
// One pass: keys, the run's new events, a redraw if due. Returns TUI_QUIT when the user
// asked to quit (q), TUI_HANGUP when the terminal is gone (closed: no key can come, and the
// kernel signals only the terminal's foreground group, which is the pager's while one is
// open), else 0. Never blocks for more than a few milliseconds.
enum { TUI_QUIT = 1, TUI_HANGUP = 2 };
int tui_tick(Tui *t, int64_t now_us);
// For the end of a run the dashboard started: reads the last events, shows the banner, and
// waits for q (or another quit key). `why` goes in the footer ("run finished: q to leave").
// Returns what tui_tick returned, or 0 as soon as *signals differs from its value at the
// call (the caller's count of SIGINT, SIGTERM and SIGHUP: nobody may be there to press q).
int tui_wait_quit(Tui *t, const char *why, volatile sig_atomic_t *signals);
// Gives the terminal back and frees t; a pager still open is ended, with everything it
// started (its process group gets SIGTERM, then SIGKILL if it is not gone within 0.5 s).
void tui_close(Tui *t);
// Gives the terminal back if a dashboard holds it (for error paths: die() hooks).
void tui_restore_terminal(void);

// The project's root (where lexicon/ and lessons/ are): $SHARDLAB_ROOT, else the first
// folder above this program that has labs/common (build/shardlab -> the checkout).
void tui_find_root(char *out, size_t n);

// `shardlab tui [RUN_DIR] [options]`; returns the exit status.
int tui_main(int argc, char **argv);

#endif
