// runs_internal.h — what the web server's runs files share: a run as the server reads it
// (runs.c: its events indexed, its status), which the live stream (runs_stream.c) follows,
// and the launchers the server started (runs_start.c adds them).
//
// Defines: MAX_RUN_RANKS, Run, get_run(), poll_run(), run_status(), run_exists(), launched_add(),
//          launched_running().
#ifndef SHARDLAB_RUNS_INTERNAL_H
#define SHARDLAB_RUNS_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "command/runs/logtail.h"
#include "web.h"

#define MAX_RUN_RANKS 64

// A run as the server has read it so far (runs.c caches up to MAX_CACHED_RUNS of them).
typedef struct {
    char id[256], dir[4400];
    int world;                      // rank files looked for
    int world_known;                // world came from meta.json: no need to read it again
    LogTail tail[MAX_RUN_RANKS];    // how far each rank's file was read (logtail.h)
    int ended[MAX_RUN_RANKS];
    char status[16];                // "running", then "ok" / "error" when every rank ended
    char **lines;                   // every event so far, in index order
    long n, cap;
    int64_t polled_us;
    pthread_mutex_t lock;
} Run;

// The cached run (created on first use), LOCKED (the caller unlocks r->lock), or NULL if there
// is no such run.
Run *get_run(Web *w, const char *id);
// What the rank files gained since the last poll (r->lock held).
void poll_run(Run *r);
// "running", "ok", "error" or "stopped" (r->lock held; see runs.c).
const char *run_status(Run *r);
// A run is a directory under w->runs: 1 with it in dir, 0 if there is none or id is not a plain name.
int run_exists(Web *w, const char *id, char *dir, size_t n);
// Remembers a launcher runs_start() started (runs_reap() reaps it; run_status() asks): planned,
// the bytes its ranks hold at their planned peak; out, the read end of the pipe of its stdout
// and stderr (non-blocking; runs_reap() drains and closes it), or -1.
void launched_add(pid_t pid, const char *id, double planned, int out);
// The launchers this server started that still run (reaped first), oldest first, at most max:
// their runs' ids in ids[], and in planned[] the bytes each run's ranks hold at their planned
// peak. Returns how many.
int launched_running(char (*ids)[256], double *planned, int max);

#endif
