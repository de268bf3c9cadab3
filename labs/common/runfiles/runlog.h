// runlog.h — the run directory: the one interface between labs, dashboards and graders.
//
// This file writes the run directory; labs/DESIGN.md, The run directory, says what it holds
// and labs/DESIGN.md, Events, what each event means: the one place the schema is written
// down (runschema.c checks it, tests/test_design.c holds the two together). In short:
//   runs/<lab>-<YYYYmmdd-HHMMSS>-<4 hex>/
//     meta.json       rank 0, at the start (runlog_meta)
//     rank-<r>.jsonl  each rank's events, one JSON object per line, "ev" first, flushed per line
//     rank-<r>.log    the rank's stdout and stderr (runlog_printf)
//     summary.json    rank 0, at the end of a run that finished (runlog_summary)
//     lock            held by the job writing the run (runlog_hold_dir, joblock.h)
// A float that is NaN or infinite is written as the string "NaN", "Infinity" or "-Infinity"
// (JSON has none); a step whose loss, lr or grad_norm is not finite is written, then the lab
// stops (runlog_step).
#ifndef SHARDLAB_RUNLOG_H
#define SHARDLAB_RUNLOG_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "common/harness/mem.h"
#include "joblock.h"
#include "json.h"

// What a run directory's path leaves under PATH_MAX for the paths inside it: the longest a
// run and its grade write ("replay/step-00000012/step-00000012/rank-7-of-8.safetensors.tmp.<pid>",
// "ref-replay-00000012/summary.json.tmp.<pid>") with room to spare. A longer run directory is
// refused before anything starts, so that no path derived from it is ever too long.
#define RUNLOG_ROOM 256

typedef struct {
    char dir[PATH_MAX];
    char lab[32];
    int rank, world;
    FILE *events;  // rank-<r>.jsonl
    FILE *log;     // rank-<r>.log, or NULL when a launcher already captures our output
    StrBuf line;
    int ended;     // an end event was written
    int64_t steps_logged;  // the last step event's step, for the end event after a failure
    int64_t step_events;   // how many step events this rank wrote
    const Device *dev;     // from runlog_start: its memory figure goes into start and end
} RunLog;

typedef struct {
    int64_t step;
    double loss, lr, grad_norm;  // grad_norm: the global gradient norm, before clipping
    int64_t tokens;
    double ms_step;              // wall clock since the previous step's record (the schema)
    double ms_work, ms_compute, ms_comm;  // the step's own work, and its two parts
    uint64_t bytes_sent, bytes_recv;
    const Mem *mem;       // the mem object is filled from this
    const Mem *host_mem;  // NULL, or host memory the lab keeps for the device (ZeRO-Offload):
                          // its total goes into "mem" as "host", outside "peak"
    uint64_t param_hash;
    const char *extra;    // NULL, or more fields to append: "\"grad_norm\":1.2" (no braces)
} StepRecord;

// Whether path fits the system as a folder of `what` ("--run-dir") that keeps paths up to
// room bytes long below it: shorter than PATH_MAX - room, no part of it longer than NAME_MAX.
// 0, or -1 with one line appended to why that names the length and the limit.
int runlog_check_path(const char *what, const char *path, size_t room, StrBuf *why);
// Holds dir, a run directory, for this job before anything is written into it: checks its
// path (runlog_check_path), makes it (mkdir -p), takes its lock (joblock.h; argv: the job's
// command), and refuses a directory that holds a run already (meta.json, summary.json, or a
// rank's events) unless overwrite, which first removes that run's files: those a run, its
// grade and its trace write, by name (nothing else in the folder goes). 0 when held; else the
// status to exit with and one line in why: 2 when the options ask for what cannot be (a path
// too long, a run there without --overwrite), 1 otherwise (another job holds it: *busy is 1;
// the folder cannot be made or locked: a full disk).
int runlog_hold_dir(JobLock *lock, const char *dir, int overwrite, char *const *argv, StrBuf *why, int *busy);
// Opens (creating as needed) the run directory: dir if given, else $SHARDLAB_RUN_DIR, else
// a new runs/<lab>-<YYYYmmdd-HHMMSS>-<4 hex> (under $SHARDLAB_RUNS if set). Opens
// rank-<r>.jsonl and, unless $SHARDLAB_LOG_CAPTURED is set, rank-<r>.log. Registers a hook
// so that die() writes an error event and an end event with status "error".
void runlog_open(RunLog *r, const char *lab, int rank, int world, const char *dir);
// mkdir -p; dies with a clear message if a directory cannot be made.
void runlog_make_dirs(const char *path);
// mkdir -p without dying: 0, or -1 with errno set and the directory that failed in failed.
int runlog_try_make_dirs(const char *path, char *failed, size_t n);
// Creates a new, unique runs/<lab>-<YYYYmmdd-HHMMSS>-<4 hex> (under $SHARDLAB_RUNS if set,
// the time in UTC) and writes its path to out (the launcher names the run before it starts
// the ranks). Dies with a message if it cannot.
void runlog_new_dir(char *out, size_t n, const char *lab);
// The same under root, without dying: 0, or -1 with the reason in why (the web server's).
int runlog_try_new_dir(char *out, size_t n, const char *root, const char *lab, char *why, size_t whylen);
void runlog_close(RunLog *r);

// printf to stdout and to rank-<r>.log.
void runlog_printf(RunLog *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// config_json: a JSON object (the lab's configuration), used in meta.json and the start event.
void runlog_meta(RunLog *r, int argc, char **argv, const char *device, const char *backend,
                 const char *config_json);
void runlog_start(RunLog *r, const Device *dev, const char *backend, uint64_t params,
                  const char *config_json, double loss_floor /* < 0: null */);
// Writes the step event. If its loss, lr or grad_norm is not finite, the training diverged:
// the step is written all the same, then the lab stops through die() (an error event naming
// the step and the quantity, with a hint; the end event; exit status 1).
void runlog_step(RunLog *r, const StepRecord *s);
void runlog_span(RunLog *r, int64_t step, const char *name, int mb, int layer, int64_t t0_us,
                 int64_t t1_us, uint64_t bytes);
// extra: NULL, or more fields without braces, e.g. "\"bucket\":3,\"algo\":\"ring\"".
void runlog_span_extra(RunLog *r, int64_t step, const char *name, int mb, int layer, int64_t t0_us,
                       int64_t t1_us, uint64_t bytes, const char *extra);
// A communication span, as runlog_span_extra, with "waited_from_us" where waited_from_us > 0:
// from then to t1_us the rank waited for the call instead of computing (the dashboards and
// `shardlab whatif` take it out of the compute it overlaps, so a blocking call inside a
// forward is not counted as hidden). DistRecord.waited_from_us says it.
void runlog_comm_span(RunLog *r, int64_t step, const char *name, int mb, int layer, int64_t t0_us, int64_t t1_us,
                      uint64_t bytes, int64_t waited_from_us, const char *extra);
void runlog_check(RunLog *r, const char *name, int ok, double value, double expect);
// A self-check of something a student's code can get wrong without making the run
// meaningless: the bytes its collectives moved, the memory it held after a step or at a peak
// (the memory table's rows), the data it read. The check event, and when it failed a
// "warning: ..." line (fmt: what was measured against what) on stdout and in the rank's log;
// then the run GOES ON, so that `shardlab grade` takes exactly the points of the check
// concerned (comm.bytes, mem.formula, data.coverage) and not every point of a run that
// stopped. In shardlab's own labs these checks never fail (the lab tests fail on a failed
// check event), so the warning is how a developer sees a shardlab bug. Invariants whose
// failure makes the run meaningless (a schedule that deadlocks, pieces of the wrong size
// between ranks, an activation layout against its own size) still die. Returns ok.
int runlog_self_check(RunLog *r, const char *name, int ok, double value, double expect, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
void runlog_end(RunLog *r, const char *status, int64_t steps);
void runlog_error(RunLog *r, const char *msg);
// summary_json: a JSON object; written to summary.json atomically (temp file + rename).
void runlog_summary(RunLog *r, const char *summary_json);

int64_t runlog_now_us(void);  // wall clock, microseconds since the Unix epoch

#endif
