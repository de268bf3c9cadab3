// dcp.h — distributed checkpoints: every rank saves the pieces of the training state it
// holds, rank 0 a manifest that names them all; any lab at any number of ranks loads them
// back, each rank reading just the ranges its own layout needs (resharding).
//
// The logical state. Whatever the lab, training state is the same three fp32 tensors per unit
// of gpt.h (embedding, each block, head: gpt_layer_size() elements each):
//     params   the weights (the fp32 master weights under --mixed)
//     m, v     AdamW's moments
// plus the step t that AdamW's bias correction and the batch sampler read. A lab holds ranges
// of these flat tensors: a replica all of them, a ZeRO rank its shard [r s, (r+1) s), a
// pipeline stage its layers. It lists what it holds as DcpPieces (kind, unit, offset, count,
// where the numbers are) and both saving and loading speak in those terms, so a checkpoint
// saved by ZeRO-2 at N = 4 loads into DDP at N = 2, or into a pipeline of 3 stages.
//
// On disk (format "shardlab-checkpoint/2"):
//     DIR/manifest.json                          rank 0, written last (the commit point)
//     DIR/step-00000012/rank-0-of-4.safetensors  one file per rank: its pieces, each a 1-D
//     DIR/step-00000012/rank-1-of-4.safetensors  F32 tensor named "<kind>.<unit>.<offset>"
// The manifest: format, lab, step, world, the save's identity, the model's shape, every
// unit's length, AdamW's settings and t, the sampler's state (the batch of step s is a hash
// of (seed, s, index): next_step is all it needs; a lab adds its own, e.g. an epoch), the
// run's config, how the lab laid the state out (one line), and per file its rank, size and
// FNV-1a 64 checksum. Which pieces a file holds is in its own header, under that checksum. The
// manifest's last field is the FNV-1a 64 of every byte before it.
//
// One save of one run. Each save has an identity: "run", the run directory of the job that
// saved, and "save", 16 hex digits rank 0 draws at random for this save and broadcasts. Each
// rank writes both into its file's metadata (with its rank, world and step), rank 0 into the
// manifest. Each rank's checksum is of the bytes it wrote, hashed as it wrote them: read back
// after the rename, the name might already hold another job's file. So a file of another save
// (two jobs saving into one folder, a file copied from another checkpoint) never passes for
// one of this save, even with equal bytes of weights.
//
// Crash safety. A save writes each rank's file under a temporary name, fsyncs it and renames
// it into place; then (barrier) rank 0 writes manifest.json.tmp, fsyncs, renames it over
// manifest.json and fsyncs the directory. Until that rename the old manifest, and the files
// it names, are untouched: a run killed at any moment of a save leaves the previous
// checkpoint complete and loadable. Only after it does rank 0 delete older step-* dirs.
//
// Loading refuses anything that does not add up, naming the file and the check: manifest
// checksum, format, model shape, units, world vs files, each file's size and checksum, its
// safetensors header and metadata (rank, world, step, run and save) against the manifest,
// that every tensor's pieces tile it exactly once, and what must hold of the values: weights
// and moments finite, v >= 0 (saving refuses such a state too, keeping the last checkpoint).
// Nothing is written before all of that passed.
//
// Paths. A checkpoint's paths are never cut: a directory whose paths would pass PATH_MAX
// (with the names a save adds, DCP_PATH_TAIL), whose step folder runlog_make_dirs() cannot
// hold, or with a component over NAME_MAX, is refused up front, its length named
// (dcp_check_paths).
#ifndef SHARDLAB_DCP_H
#define SHARDLAB_DCP_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "common/comm/dist.h"
#include "common/harness/args.h"
#include "common/harness/train.h"
#include "common/model/device.h"
#include "common/model/gpt.h"
#include "json.h"
#include "runlog.h"

#define DCP_MANIFEST "manifest.json"

typedef enum { DCP_PARAMS, DCP_M, DCP_V, DCP_KINDS } DcpKind;
const char *dcp_kind_name(DcpKind k);  // "params", "m", "v"

// count fp32 elements [offset, offset + count) of tensor `kind` of unit `unit`, held at data:
// device memory (the device of the saver or loader), or host memory if host = 1.
typedef struct {
    DcpKind kind;
    int unit;
    size_t offset, count;
    float *data;
    int host;
} DcpPiece;

typedef struct {
    DcpPiece *p;
    int n, cap;
} DcpState;

void dcp_state_add(DcpState *s, DcpKind kind, int unit, size_t offset, size_t count, float *data, int host);
void dcp_state_free(DcpState *s);
// Whole units held in per-unit buffers (a replica: single, DDP; a pipeline stage), params[u]
// NULL for units not held: chunk `part` of `parts` (dist_chunk) of each held unit's
// parameters and AdamW moments. Loading lists the whole units (part 0 of 1); saving, the
// replicas of the same units each list their own chunk (part r of R), so that R replicas
// write the state once between them.
void dcp_add_units(DcpState *s, const GptConfig *c, float *const *params, float *const *m, float *const *v, int part,
                   int parts);

// ---- paths ------------------------------------------------------------------------------

// Before anything is written: every directory the options put checkpoints in (--ckpt,
// --resume, the run directory's checkpoints/ and replay/) leaves room under PATH_MAX for the
// files a save writes there and for its folders in runlog_make_dirs(), and has no component
// over NAME_MAX. Else a usage error naming the option and the length.
void dcp_check_paths(const TrainArgs *a, const char *prog);

// ---- saving -----------------------------------------------------------------------------

typedef struct {
    const char *lab;
    const TrainArgs *args;
    GptConfig cfg;
    const Device *dev;
    DistGroup *world;      // all ranks (each saves a file); NULL: a world of one
    RunLog *log;
    char dir[PATH_MAX];        // where checkpoints go
    char replay_dir[PATH_MAX]; // <run dir>/replay: replay points, each a checkpoint directory
    char run[PATH_MAX];        // the run directory: the "run" of each save's identity
    char layout[256];      // one line for the manifest: how this lab holds the state
    const char *sampler_name;  // the manifest's "sampler.name" (dcp_saver_init: the hash sampler's)
    char sampler[256];     // "" or more fields for the manifest's "sampler" object: "\"epoch\":3"
    const char *config;    // the run's config object (train_config_json), the caller's to keep
    int64_t bytes_written; // by this rank, all saves
    int saves;
} DcpSaver;

// dir: args->ckpt, else args->resume, else <run_dir>/checkpoints. config: the run's config
// JSON (meta.json's), kept by the caller while it saves. The lab may fill layout and sampler
// afterwards. Dies if a directory's paths could pass PATH_MAX (dcp_check_paths refuses that
// up front for the options).
void dcp_saver_init(DcpSaver *s, const char *lab, const TrainArgs *a, const GptConfig *c, const Device *dev,
                    DistGroup *world, RunLog *log, const char *run_dir, const char *config);
// Is a save due after `step`? A checkpoint every --save-every steps and after the last; a
// replay point every --replay-every steps before the last.
int dcp_due(const TrainArgs *a, int64_t step);
// Every rank of the world calls it with the pieces it holds (pieces of the same tensor must
// not overlap across ranks: replicas each list their own chunk, dcp_add_units), when dcp_due()
// says so: it writes what is due, the checkpoint into dir (replacing the previous one) and
// the replay point into replay_dir/step-<s>/ (kept: each is a checkpoint directory of its
// own, which --resume takes). Logs a "save" span and one line on rank 0 for each. Dies on
// any I/O error, and on a state that cannot be right (a weight or moment not finite, v < 0):
// the previous checkpoint stays intact.
void dcp_save(DcpSaver *s, int64_t step, const DcpState *state);

// ---- loading ----------------------------------------------------------------------------

typedef struct {
    char name[64];         // under the checkpoint: step-<step>/rank-<r>-of-<N>.safetensors
    char *file;            // its path (malloc'd)
    int rank;
    uint64_t bytes, fnv;
    DcpPiece *pieces;      // offsets into the file's tensors (data unused)
    int npieces;
} DcpFile;

typedef struct {
    char dir[PATH_MAX];
    char lab[32];
    int64_t step;
    int world;
    const char *run, *save;  // the save's identity (in the manifest's JSON)
    DcpFile *files;
    JsonValue *manifest;   // the parsed manifest (sampler, config, optimizer, ...)
    char notes[1024];
} Dcp;

// Opens and checks the checkpoint in dir against this run's model (see the top of this file);
// prog names the lab in the message. Any failure: one line naming the file and the check
// (for a value: the tensor and the element), and exit 2. Call it before anything is written.
// ck->notes: "" or lines for the run log naming training settings (batch, lr, seed, ...) that
// differ from the saved run's, so that this run goes on differently from how the saved one
// would have. The learning-rate schedule's settings that a left to their defaults are
// restored from the checkpoint into a.
void dcp_open(Dcp *ck, const char *dir, const GptConfig *c, TrainArgs *a, const char *prog);
// Fills every piece of state (this rank's layout, any N) from the checkpoint's files.
void dcp_load(Dcp *ck, const Device *dev, const DcpState *state);
void dcp_close(Dcp *ck);
// What a lab does with an opened checkpoint: dcp_load(), a line in the log (where from, the
// saving lab and world, ck->notes), a "resume" check event, dcp_close(). Returns the first
// step to train: the checkpoint's step + 1.
int64_t dcp_resume(Dcp *ck, const Device *dev, const DcpState *state, RunLog *log);

#endif
