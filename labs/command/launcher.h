// launcher.h — `shardlab run`'s parts (labs/command/shardlab.c is the launcher; this is what its
// files share): the run's context, and what shows a run and watches its ranks.
//
// shardlab.c (the run's files), launcher_view.c (rank 0's log, the status line, the
// dashboard) and launcher_ranks.c (how ranks ended, which one caused a failure, end events).
#ifndef SHARDLAB_LAUNCHER_H
#define SHARDLAB_LAUNCHER_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "command/runs/logtail.h"
#include "common/comm/shm.h"
#include "common/runfiles/joblock.h"
#include "common/runfiles/json.h"
#include "tui.h"

#define MAX_RANKS SHM_MAX_RANKS
#define POLL_US 20000          // how often we look at the ranks and their logs
#define BLAME_WAIT_US 500000   // how long we wait for the rank another one blames (see find_cause)
#define FAIL_GRACE_US 1000000  // after a failure: SIGTERM, then SIGKILL this much later
#define STOP_GRACE_US 2000000  // after Ctrl-C: time for the ranks to write their end events
#define ERROR_HOLD_US 2000000  // how long rank 0's error line waits for rank 0 to exit (echo_text)

// The launcher's one context: the run, its ranks, and how far we have read rank 0's files.
typedef struct {
    const char *lab;
    char lab_path[PATH_MAX + 64];
    char **lab_argv;           // [lab_path, passthrough options..., NULL]
    int n, status_line;
    int want_tui;              // --ui tui, or auto on a terminal
    Tui *tui;                  // the dashboard while it is open
    StrBuf said;               // what we had to say while the dashboard held the terminal
    char run_dir[PATH_MAX];
    JobLock run_lock;          // the run directory, held for the job; its ranks inherit it
    int shm_fd;                // the ranks' shared memory (no name: shm.h); -1 when N = 1
    int port;
    pid_t launcher, pgid;
    pid_t pid[MAX_RANKS];
    int done[MAX_RANKS], wstatus[MAX_RANKS];
    char errline[MAX_RANKS][512];  // the rank's last ": error: " line, read when it failed
    int usage_said;            // a rank's usage error was passed on as ours (exit 2)
    int dir_made;              // we named and made the run directory (no --run-dir)
    int error_said;            // rank 0 failed and our line quoted its error line
    int64_t error_held_us;     // since when echo_text holds back an error line of rank 0
    off_t log_start[MAX_RANKS], jsonl_start[MAX_RANKS];  // what an earlier run in DIR left
    int64_t t0_us;
    off_t echo_off;             // rank 0's log, read up to here
    LogTail events;             // rank 0's events, read as they come (logtail.h)
    long step, steps_total;
    double loss, ms_step;
    char shown[256];           // the status line on screen now
} Launch;

// <run dir>/rank-<r>.<ext>, and a file's size (0 if it cannot be read).
void launcher_rank_file(const Launch *L, int r, const char *ext, char *out, size_t n);
off_t launcher_file_size(const char *path);

// ---- launcher_view.c ----
// The status line off the screen; rank 0's new output echoed and the status line redrawn
// (final: everything left, and no status line).
void launcher_clear_status(Launch *L);
void launcher_show_progress(Launch *L, int final);
// A line for the user's terminal (stderr): now, or when the dashboard gives the terminal back.
void launcher_say(Launch *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// The dashboard on the terminal, when --ui asks for it.
void launcher_open_tui(Launch *L);
// The dashboard gives the terminal back; the run goes on with rank 0's output and the status
// line, starting with everything rank 0 printed so far.
void launcher_close_tui(Launch *L);
// Whether make started us (it sets MAKELEVEL for its commands): the user typed `make
// lab-<name>`, and what we suggest is said in make's words.
int launcher_under_make(void);
// A lab's usage error about the model's depth ("4 stages need at least 4 blocks ... (--layers
// 2)") is one option away from running: name it as the user would type it, in make's ARGS
// when make started us, else as a lab option.
void launcher_hint_layers(Launch *L, const char *msg);

// ---- launcher_ranks.c ----
// An exit status in words ("exit 2", "killed by SIGKILL"); whether it is a failure.
void launcher_describe_exit(int status, char *out, size_t n);
int launcher_failed(int status);
// What the rank said about its failure: the last line of its log that says ": error: "
// (die() writes one), else, if it exited on its own, its last line (a usage error, a
// sanitizer's summary). A rank killed by a signal said nothing about it.
void launcher_read_error_line(Launch *L, int r);
// The cause of a failure is the first rank to fail, which is not always the first we reap:
// when rank 2 dies, ranks 0 and 1 stop too and may exit first. So from the first failure we
// reaped, we follow who blames whom. Returns the cause, or -1 to look again after a while
// (the blamed rank has not exited yet; we wait for it up to BLAME_WAIT_US).
int launcher_find_cause(Launch *L, int first, int64_t first_seen_us);
// The ranks not reaped yet.
int launcher_count_running(const Launch *L);
// A rank that died without an "end" event gets an error and an end event from us: it is
// dead, so nobody else writes to its file now. The error names how it ended and, where it
// said why (launcher_read_error_line), its own line. Returns the first rank that exited 0
// but whose log does not say it ended ok (no end event, or one with another status), with
// what happened in its errline, or -1: an exit status alone does not make a run whole.
int launcher_end_event_logs(Launch *L);
// A run whose ranks stopped at a usage error before any of them started (no meta.json) is
// not a run: the directory we made for it goes, with the ranks' logs (the launcher has said
// the error). Anything else in it, or a directory the user named, stays.
void launcher_remove_unstarted(Launch *L);

#endif
