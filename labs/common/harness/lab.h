// lab.h — the lab harness: what every training lab does around its algorithm, written once,
// so that a lab's main reads as its options, its algorithm's setup, and its step loop.
//
// A lab goes through it in this order:
//     lab_open(&L, "ddp", &a, argc, argv, 0);       who and where: the ranks' environment, the
//                                                   device, the planner's check, collectives
//     ... the lab's own checks (train_check_batch, its mesh, its layers) ...
//     lab_begin(&L, "%d rank(s) on %s ...", ...);   the model's config, the checkpoint folders
//                                                   held, a --resume checkpoint opened, the
//                                                   run directory held and its log (the
//                                                   first line: "<lab>: " what it is given,
//                                                   "; run directory <dir>"), the corpus, the
//                                                   memory allocator
//     ... the model, the optimizer, the activations ...
//     lab_start(&L, params, lab_fields);           meta.json and the start event
//     ... the memory table ...
//     first = lab_first_step(&L, &whole_state);    resumed or 1; checkpoint saver, progress,
//                                                   the wall clock, Ctrl-C
//     for (step = first; step <= a.steps; step++) {
//         if ((rc = lab_step_begin(&L, step))) return rc;   (interrupted: the exit status)
//         ... the algorithm's step ...
//         lab_step_end(&L, &record, &chunk_state);   the step event, progress, a checkpoint
//     }
//     lab_finish(&L, param_hash, extra);            the last line, end event, summary.json
//     ... the lab frees what it made ...
//     lab_close(&L);                                collectives down, the log closed, the rest
#ifndef SHARDLAB_LAB_H
#define SHARDLAB_LAB_H

#include <stdint.h>

#include "args.h"
#include "common/comm/dist.h"
#include "common/model/device.h"
#include "common/model/gpt.h"
#include "common/runfiles/dcp.h"
#include "common/runfiles/json.h"
#include "common/runfiles/runlog.h"
#include "data.h"
#include "mem.h"
#include "train.h"

enum {
    LAB_ONE_RANK = 1,   // one rank and no collectives (single): no Dist, backend "none"
    LAB_NO_CORPUS = 2,  // the lab reads its data itself (shard): lab_begin leaves the corpus
};

typedef struct {
    const char *name;      // "ddp": the program, the run directory's prefix, every message's
    TrainArgs *a;          // the lab's parsed options (dcp_open may set the schedule's)
    unsigned flags;        // LAB_*
    int argc;
    char **argv;
    DistEnv env;           // RANK, WORLD_SIZE, ... as the rank found them
    Device dev;
    Dist dist;             // the collectives (not with LAB_ONE_RANK)
    const char *backend;   // dist.backend, or "none"
    int world, rank;
    GptConfig cfg;         // lab_begin: train_model_config(a)
    Dcp resume;            // lab_begin: the --resume checkpoint, opened and checked
    JobLock run_lock;      // the run directory, held for the job (lab_run_dir)
    JobLock ckpt_lock;     // the folder --save-every writes, held by rank 0 for the job
    JobLock resume_lock;   // --resume's folder, held shared by rank 0 when only read
    RunLog log;
    Corpus corpus;
    double floor;          // the synthetic corpus' loss floor, -1 for file data
    Mem mem;               // the rank's device memory, counted
    StrBuf config;         // meta.json's config (lab_start)
    DistRecord *records;   // the collectives' records, drained as spans (LAB_MAX_RECORDS)
    DcpSaver saver;
    Progress progress;
    TrainTally tally;
    double tokens_per_step;   // B T of the global batch
    int64_t step, t0_us;      // the step under way, and when it began (lab_step_begin)
    int64_t t1_us;            // when a replica's update ended (lab_replica_update)
    uint64_t sent0, recv0;    // the collectives' byte counters then
    int64_t profile_step;     // SHARDLAB_PROFILE_STEP, 0 when unset
} Lab;
#define LAB_MAX_RECORDS 4096

// The run directory every rank writes to, held for this job (joblock.h): dir if given, else
// $SHARDLAB_RUN_DIR (the launcher sets it), else a new runs/<lab>-<time>-<hex> that rank 0
// creates and broadcasts, so ranks started by hand or by mpirun share one run. A path too
// long is a usage error. Under `shardlab run` the launcher holds it (JOBLOCK_FD_ENV) and every
// rank adopts its lock; else rank 0 holds it (runlog_hold_dir: one job at a time, no run
// appended to an earlier one unless overwrite) and tells the others before any of them
// writes. Writes it to out; the lock into *lock. d: NULL for a one-rank lab; argv: the
// command, for the lock file. (lab_begin calls it; so does the collectives lab.)
void lab_run_dir(Dist *d, const char *dir, int overwrite, const char *lab, char *const *argv, char *out, size_t n,
                 JobLock *lock);
// Who and where: the ranks' environment, the device (train_device), the planner's check that
// the configuration fits (memfit.h, before anything is allocated), the collectives' backend,
// and "<lab> rank <r>" as every message's context.
void lab_open(Lab *L, const char *name, TrainArgs *a, int argc, char **argv, unsigned flags);
// The model's config, the checkpoint folders held for the job (--save-every's exclusively,
// a --resume only read shared: joblock.h), --resume's checkpoint opened (before anything is
// written), the run directory held (lab_run_dir) and its log with its first line ("<lab>: "
// + what + "; run directory <dir>"), where the rank computes, the corpus (unless
// LAB_NO_CORPUS) and the memory allocator.
void lab_begin(Lab *L, const char *what, ...) __attribute__((format(printf, 2, 3)));
// meta.json and the start event: the shared options and lab_fields (NULL or "\"k\":v,..."),
// the model's parameter count.
void lab_start(Lab *L, uint64_t params, const char *lab_fields);
// The first step: --resume's, its state loaded into `load` (NULL: no checkpoint to resume),
// else 1. Then the checkpoint saver (collective over `save_group`, NULL on one rank), the
// progress line, the wall clock, and Ctrl-C asking for a stop at the next step.
int64_t lab_first_step(Lab *L, const DcpState *load, DistGroup *save_group);
// The start of a step: 0, or, when a stop was asked for, the exit status the lab returns.
// With SHARDLAB_PROFILE_STEP=S in the environment, step S starts a profiler's capture
// (device_profile: on a GPU, cudaProfilerStart), which lab_step_end stops once the step's
// event is written, so that Nsight Compute (--profile-from-start off) sees one whole step,
// the time between steps included (tests/gpu/profile.sh).
int lab_step_begin(Lab *L, int64_t step);
// The end of a step: rec's wall-clock time (the tally), the bytes the collectives moved since
// lab_step_begin (unless set), the memory, then the step event, the progress line (rank 0),
// the profiler's capture stopped (SHARDLAB_PROFILE_STEP) and, when due, a checkpoint of `save`
// (NULL: none) whose collectives are not the next step's. Returns the step's wall-clock ms.
double lab_step_end(Lab *L, StepRecord *rec, const DcpState *save);
// A whole replica of the model (single, ddp, ckpt, shard): created from the seed, or --init's
// weights, then rank 0's broadcast to every rank (DDP's first step), with its AdamW state.
void lab_replica_create(Lab *L, Gpt *model, GptAdamW *adam);
// Its update, the same on every replica: clip the global gradient norm, one AdamW step at the
// schedule's rate (returned in *lr), timed as the step's "optim" span; L->t1_us is its end.
// Returns the norm before clipping.
double lab_replica_update(Lab *L, Gpt *model, GptAdamW *adam, double *lr);
// The memory table of a rank that holds a whole replica, against its formulas: parameters
// 4 Psi, gradients 4 Psi, AdamW's two moments 8 Psi, the activations of a micro-batch of
// `micro` sequences (acts_formula and acts_bytes; NULL: train_acts_formula's) and, where
// replicas all-reduce their gradients (replicas != 0), no communication buffer.
void lab_replica_memory(Lab *L, int micro, const char *acts_formula, double acts_bytes, int replicas);
// The end of a replica's step: rec holds the step, the loss, the update's lr and norm, the
// tokens this rank trained on and the lab's extra fields; the harness adds the time from
// lab_step_begin to the update's end (L->t1_us), comm_us of it communicating and the rest
// computing, and the replica's param_hash, then ends the step (lab_step_end).
double lab_replica_step_end(Lab *L, const Gpt *model, StepRecord *rec, int64_t comm_us, const DcpState *save);
// The end of a replica's run: --save (rank 0 writes the weights and says so), the summary
// with the replica's param_hash and extra (lab_finish), then the model, its AdamW state and
// its activations freed, and lab_close.
void lab_replica_close(Lab *L, Gpt *model, GptAdamW *adam, GptActs *acts, const char *extra);
// The end of a run that trained (train_finish): after the lab's own reports and --save.
void lab_finish(Lab *L, uint64_t param_hash, const char *extra);
// Every rank waits for the others, then the collectives, the log, the allocator, the device
// and the corpus go (the lab has freed what it allocated).
void lab_close(Lab *L);

#endif
