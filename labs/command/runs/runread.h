// runread.h — reading a run directory while it grows, or long after it ended.
//
// The dashboards read only the files of labs/DESIGN.md, The run directory: meta.json,
// rank-<r>.jsonl, summary.json.
// A RunView keeps, for each rank, how far it has read its file and what the events said
// (the last step, the spans of the last complete step, the end, the first error); for the
// run, rank 0's loss at every step and, if the run names one (config "ref", or --ref), the
// loss curve of a reference run to draw beside it.
//
// Reading is incremental (each poll reads only what was appended: logtail.h, the tail the
// web server reads with too) and never trusts the file: a line that is not JSON, or is JSON but not an event of the schema (runschema.h),
// is skipped and counted in `malformed`, with the first problem kept in `problem`; half a
// line is kept until its end arrives, and counted as malformed if the file stops growing
// for RUN_PARTIAL_S seconds without it (a writer that died mid-line).
#ifndef SHARDLAB_RUNREAD_H
#define SHARDLAB_RUNREAD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "logtail.h"

#define RUN_MAX_MEM 8        // memory categories shown: the five of mem.h and any a lab adds
#define RUN_MAX_SPANS 4096   // spans kept per rank and step (more are counted, not kept)
#define RUN_MAX_RANKS 4096   // a larger world_size in meta.json is refused as malformed
#define RUN_PARTIAL_S 2      // a line without its end for this long is given up
#define RUN_MAX_BUSBW 1024   // the collectives' measurements kept (more are dropped)

// What a rank's latest step event said.
typedef struct {
    int64_t step, tokens;
    double loss, lr;
    double ms_step, ms_compute, ms_comm;
    double sent, recv;            // bytes in collectives during the step
    double mem[RUN_MAX_MEM];      // bytes by category, in RunView.mem_names order
    double peak;
    char hash[17];
} RunStep;

typedef struct {
    char name[24];                // fwd, bwd, recompute, optim, all_reduce, ...
    char group[16];               // the group a collective ran in, where the lab says ("tp", "dp", "replicate"), else ""
    int mb, layer;
    int chunk;                    // pp: the model chunk a forward or backward ran (-1: none)
    int64_t t0_us, t1_us;
    int64_t waited_from_us;       // communication: from then to t1_us the rank waited for it (0: it did not)
    double bytes;
} RunSpan;

typedef struct {
    RunSpan *items;
    size_t n, cap;
    size_t dropped;               // beyond RUN_MAX_SPANS
    int64_t step;                 // the step they belong to; -1: none
} RunSpans;

typedef struct {
    int present;                  // rank-<r>.jsonl exists
    int started;                  // a start event was read
    char device[32], backend[16];
    int has_step;
    RunStep last;
    RunSpans pending;             // spans of the step in progress
    RunSpans done, prev;          // spans of the last two steps that have their step event
    int ended;
    char status[16];              // of the end event: "ok" or "error"
    int64_t end_steps;
    char error[512];              // the first error event's message ("" if none)
    long checks, checks_failed;
    char failed_check[160];       // the first failed check: "mem.acts: 123 (expected 456)"
    LogTail tail;                 // reading the file (logtail.h)
    long lines, malformed;
} RunRank;

typedef struct {
    int64_t step;
    double loss;
} RunPoint;

// One measurement of the collectives lab: rank 0's check event "<coll>.<bytes>.busbw".
typedef struct {
    char coll[24];                // all_reduce, reduce_scatter, ...
    double bytes, gbps;           // the message size, and the bus bandwidth in GB/s
} RunBusbw;

typedef struct {
    char dir[4096];
    // meta.json (rank 0 writes it at start; absent until then)
    int has_meta;
    char lab[32], device[32], backend[16];
    int world;                    // 0 until known (meta.json or a start event)
    int64_t steps_total;          // config "steps"; 0 if unknown
    int64_t batch_tokens;         // config batch x seq: tokens in one global batch; 0 if unknown
    int64_t start_unix_us;
    int has_floor;
    double loss_floor;
    // ranks
    RunRank *ranks;
    int nranks;
    // memory categories in the order first seen (params, grads, optim, acts, comm, ...)
    char mem_names[RUN_MAX_MEM][16];
    int nmem;
    // rank 0's loss at each step, and rank 0's step time at each step (for rates)
    RunPoint *loss;
    double *ms;
    size_t nloss, cap;
    // the reference run
    char ref_dir[4096];
    RunPoint *ref;
    size_t nref;
    char ref_problem[256];        // why the reference named could not be read ("" if fine)
    // the collectives' bus bandwidth by collective and size, in the order measured, and the
    // machine's memory-copy rate its summary.json gives (0: none)
    RunBusbw *busbw;
    size_t nbusbw, busbw_cap;
    double memcpy_gbps;
    // summary.json (rank 0 writes it at the end); a field a lab did not write is NaN or 0
    int has_summary;              // 1 read, -1 unreadable, 0 not there (yet)
    char status[16];
    double first_loss, final_loss, wall_s, tokens_per_s, mem_peak;
    int64_t summary_steps;
    // what could not be read
    long malformed;               // lines skipped over all ranks
    char problem[256];            // the first: "rank-1.jsonl line 7: expected ':' ..."
    int meta_bad;                 // meta.json exists but is not valid
    int64_t last_change_us;       // when a poll last found something new
} RunView;

void runview_init(RunView *v);
// Checks that dir is a directory that holds a run (meta.json or a rank-<r>.jsonl) and reads
// what is there. Returns 0, or -1 with the reason in err ("runs/x: no such directory").
int runview_open(RunView *v, const char *dir, char *err, size_t errlen);
// Reads what was appended since the last poll. now_us: the caller's clock (runlog_now_us()).
// Returns 1 if anything changed.
int runview_poll(RunView *v, int64_t now_us);
// One line of rank-<rank>.jsonl (without its newline), as the poll would read it. The
// fuzzer calls this directly.
void runview_feed_line(RunView *v, int rank, const char *line, size_t len);
// Draw dir's loss curve (its rank 0) beside ours. Returns 0, or -1 with the reason.
int runview_set_reference(RunView *v, const char *dir, char *err, size_t errlen);
void runview_free(RunView *v);

// Every rank of a known world has written its end event.
int runview_ended(const RunView *v);
// The number of ranks to show: the world size, or the ranks whose files exist.
int runview_world(const RunView *v);
// Tokens of the global batch per second over rank 0's last `window` steps (0 if unknown).
double runview_tokens_per_s(const RunView *v, int window);
// Rank 0's mean step time over its last `window` steps, in ms (0 if none yet).
double runview_ms_per_step(const RunView *v, int window);
// The step whose spans the timeline shows: the latest step that every rank with spans has
// completed. -1 if none.
int64_t runview_timeline_step(const RunView *v);
// The spans of `step` on rank r, or NULL.
const RunSpans *runview_spans(const RunView *v, int r, int64_t step);

// Finding runs (runfind.c). The newest run directory under runs_dir (by its meta.json's modification time, or, while
// it starts, its rank 0 log's; a run that ended before it started is skipped). Returns 0, or
// -1 with the reason.
int runview_latest_run(const char *runs_dir, char *out, size_t n, char *err, size_t errlen);

// The rank an error message blames: when one rank fails, the others stop too, saying
// "rank 2 failed, so rank 0 stops ..." or "rank 1 (pid 4242) is gone" (common/comm/shm_chan.c), so the
// cause of a failure is the rank nobody's message leads past. -1: it blames nobody.
int run_blamed_rank(const char *msg);

#endif
