// schedule.h — the pipeline lab's schedules: how the model's depth is cut into chunks, and
// each stage's order of forwards and backwards (labs/12-pp/pp.c runs them).
//
// A schedule is checked before it runs: every stage's order is simulated with forward cost 1
// and backward cost 2 and free messages (timeline_build), which must not deadlock and must
// leave the bubble of the formula (p-1)/(v m + p-1); pp.c compares that with what each rank
// measured.
#ifndef SHARDLAB_PP_SCHEDULE_H
#define SHARDLAB_PP_SCHEDULE_H

#include "common/harness/args.h"     // defines: TrainArgs
#include "common/runfiles/runlog.h"  // defines: RunLog

typedef enum { SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED } Schedule;
extern const char *const SCHEDULE_NAMES[3];  // "gpipe", "1f1b", "interleaved"

#define MAX_CHUNKS 64
#define MAX_SPLIT_BLOCKS 256  // --layers' own bound (common/harness/catalog.c)

typedef struct {
    Schedule sched;
    int p, v, m, K;           // stages, chunks per rank, micro-batches, K = p v chunks
    int first[MAX_CHUNKS];    // chunk k holds layers first[k]..last[k] (0: embedding, L+1: head)
    int last[MAX_CHUNKS];
} Pipe;

// Chunk k runs on stage k mod p, as that rank's local chunk k / p.
static inline int stage_of(const Pipe *pp, int k) { return k % pp->p; }

typedef struct {
    int bwd, mb, k;  // backward?, micro-batch, global chunk
} Op;

// Stage s's operations, in order (2 m v of them): forwards and backwards of micro-batches in
// increasing order within each chunk, as `single --accum m` runs them.
int schedule_ops(const Pipe *pp, int s, Op *out);
// How many (micro-batch, chunk) activations stage s holds at most under the schedule.
int expected_in_flight(const Pipe *pp, int s);
// The bubble fraction of the step: (p-1) / (v m + p-1).
double bubble_formula(const Pipe *pp);

// The pipeline over N ranks in dp pipelines (pp's sched, v and m set): its stages and chunks,
// the model's depth (a->layers) and each chunk's layers. Exits 2 on what does not make a
// pipeline.
void lay_out_pipe(Pipe *pp, TrainArgs *a, const char *split, int dp, int N);

// Every rank's order of work (a rank sends in the order its neighbours ask), and its
// simulation with costs 1 and 2: when each op starts, the makespan, the bubble it leaves.
typedef struct {
    Op **ops;     // [p][nops]
    int **start;  // [p][nops]
    int nops, makespan;
    double bubble;
} Timeline;

// Every stage's order and its simulation; dies if the schedule deadlocks (a bug).
void timeline_build(Timeline *tl, const Pipe *pp);
void timeline_free(Timeline *tl, const Pipe *pp);
// The schedule of a step as a timeline, and its bubble three ways (formula, simulated, and
// measured, the mean over ranks and steps).
void report_schedule(RunLog *log, const Pipe *pp, const Timeline *tl, double measured);
// The same timeline as summary.json's members: "timeline" (a row of letters and dots per
// stage, as report_schedule prints it, at most 600 columns) and "timeline_cut" (it was
// longer), for the web's schedule chart.
void timeline_json(StrBuf *out, const Pipe *pp, const Timeline *tl);

#endif
