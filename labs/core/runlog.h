// runlog.h — the run directory: the one interface between labs, dashboards and graders.
//
// Defines: RunLog, StepRecord, RUNLOG_ROOM, runlog_check_path(), runlog_hold_dir(), runlog_make_dirs(),
//          runlog_try_make_dirs(), runlog_new_dir(), runlog_try_new_dir(), runlog_open(), runlog_close(),
//          runlog_printf(), runlog_meta(),
//          runlog_start(), runlog_step(), runlog_span(), runlog_span_extra(), runlog_check(), runlog_self_check(), runlog_end(),
//          runlog_error(), runlog_summary(), runlog_now_us().
//
// ===================================== THE SCHEMA =======================================
// runs/<lab>-<YYYYmmdd-HHMMSS>-<4 hex>/
//   meta.json       written once by rank 0 at start:
//                   {"lab","argv":[...],"world_size","device","backend","config":{...},
//                    "start_time":"2026-11-21T10:00:00Z","start_unix_us","host","pid"}
//                   config holds every training option; "ref" (a run directory given with
//                   --ref, absolute, or null) names a run the dashboards draw beside this one
//   rank-<r>.jsonl  each rank's events, one JSON object per line, "ev" first, flushed per line
//   rank-<r>.log    the rank's stdout and stderr
//   summary.json    written by rank 0 at the end:
//                   {"lab","status","world_size","steps","first_loss","final_loss",
//                    "loss_floor","tokens","wall_s","tokens_per_s","param_hash",
//                    "mem_peak","end_time"}
//   lock            held by the job writing the run (joblock.h: flock, which the kernel drops
//                   when the job ends); its one line names that job: "pid P on HOST since
//                   TIME: COMMAND". One job at a time: a second one is refused, naming it, and
//                   a directory that holds a run already is refused unless --overwrite
//                   (runlog_hold_dir)
//
// Events (every field shown is always present; labs may add fields, never rename these):
//   {"ev":"start","rank":0,"world":2,"lab":"ddp","device":"cpu","backend":"shm",
//    "params":N,"config":{...},"loss_floor":F}                  loss_floor: null for file data
//   {"ev":"step","rank":0,"step":3,"loss":2.31,"lr":0.001,"tokens":2048,
//    "ms":{"step":..,"work":..,"compute":..,"comm":..},"bytes":{"sent":..,"recv":..},
//    "mem":{"params":B,"grads":B,"optim":B,"acts":B,"comm":B,"peak":B},
//    "param_hash":"16 hex","grad_norm":G}
//   {"ev":"span","rank":0,"step":3,"name":"fwd","mb":k,"layer":l,"t0_us":..,"t1_us":..,
//    "bytes":..}
//   {"ev":"check","rank":0,"name":"...","ok":true,"value":..,"expect":..}
//   {"ev":"end","rank":0,"status":"ok","steps":S}
//   start and end also carry "device_mem":{"free":B,"total":B} on a GPU: the device's own
//   figure (cudaMemGetInfo), which includes what the categories of "mem" do not (the CUDA
//   context, library workspace) and other processes on the same GPU.
//   {"ev":"error","rank":1,"msg":"..."}
//
// Non-finite numbers: JSON has none, so a float that is NaN or infinite is written as the
// string "NaN", "Infinity" or "-Infinity" wherever a number would go (json.h: json_number()
// reads both). A step whose loss, lr or grad_norm is not finite is still written; then the
// lab stops: an error event naming the step and the quantity, with a hint, and an end event
// with status "error" (exit status 1).
//
// Units and meanings:
//   step      1-based optimizer step; "loss" is the mean cross-entropy (nats/token) over
//             the step's whole global batch, as the model was BEFORE the update; "lr" the
//             learning rate of its update (the schedule, adamw.h); "grad_norm" the global
//             gradient norm of the whole batch, before clipping
//   tokens    tokens this rank processed in the step
//   ms        "step": wall clock per step, everything between the previous step's record and
//             this one's (the first step: since the training loop began), so the steps add
//             up to the run's time and tokens/s = tokens / step; "work": the timed region,
//             the step's forward, backward, communication and update without the loop's
//             bookkeeping (logging, hashing, checkpoints); compute + comm = work, comm the
//             part spent in (or waiting for) collectives (single rank: 0)
//   bytes     bytes this rank sent and received in collectives during the step
//   mem       bytes of device memory this rank holds by category after the step (mem.h);
//             peak: high-water mark of the total since start, transient buffers included;
//             "host" (labs that offload): bytes of host memory held for the device's work,
//             not part of peak
//   peak_by   (after mem) each category's own high-water mark since start: "params" is the
//             most weight memory held at once, gathered copies included (ZeRO-3, FSDP)
//   param_hash a hash of the bytes of the parameters this rank holds in full, as 16 lower-case
//             hex digits: each layer's buffer (layer 0 first) cut into 64 KiB chunks, the last
//             shorter; FNV-1a 64 of each chunk; then FNV-1a 64 over all the chunks' hashes in
//             order, each as 8 bytes least significant first (hash.h). Defined so that a GPU
//             computes it where the bytes are, a thread per chunk; the same bytes give the
//             same value on the CPU and on a GPU
//   span      a timed piece of work: name is fwd, bwd, recompute, optim, or a collective
//             (all_reduce, reduce_scatter, all_gather, broadcast, send, recv, ...); mb the
//             micro-batch (-1 if none), layer the model layer (0 embedding, 1..L blocks,
//             L+1 head; -1 if none); t0_us/t1_us wall clock in microseconds since the Unix
//             epoch (so ranks on one machine share a timeline); bytes moved (0 for compute);
//             a collective of the sharded labs (zero, fsdp) adds "issued_us", when the
//             program asked for it: t0_us - issued_us is the time it queued behind others
//   check     an invariant the lab verified on itself (value measured, expect formula)
//   status    "ok" or "error"
// ========================================================================================
#ifndef SHARDLAB_RUNLOG_H
#define SHARDLAB_RUNLOG_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "joblock.h"
#include "json.h"
#include "mem.h"

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
