// args.h — the command-line options every training lab shares, parsed from one table.
//
// Every lab takes the same model/data/optimizer options with the same defaults, so a run at
// N ranks is comparable with the single-rank run. What each option is (type, bounds, default,
// help) is written once, in the catalog (catalog.h); a lab binds its own options to its
// variables with LabBind. Bad input never crashes: one line on stderr naming the option and
// what was wrong, and exit status 2. --help prints every option with its default and exits 0.
#ifndef SHARDLAB_ARGS_H
#define SHARDLAB_ARGS_H

#include <stdint.h>

#include "catalog.h"
#include "common/model/adamw.h"

typedef struct {
    int steps;            // optimizer steps
    int batch;            // B: sequences in the global batch of one step
    int seq;              // T: tokens per sequence
    int layers, dim, heads;
    const char *attn;     // "flash" or "naive": how attention runs (gpt.h's GptAttn)
    int mixed;            // --mixed: bf16 operands into the Linear layers' products (ops.h)
    int accum;            // micro-batches per step (gradient accumulation)
    double lr, weight_decay, clip;  // clip: max global gradient norm, 0 = off
    // The learning-rate schedule (adamw.h): warmup steps, then cosine decay to lr_min, or
    // constant. Left to their defaults (given = 0) they are derived from --steps and --lr
    // after parsing, and a resumed run takes its checkpoint's (dcp.h).
    const char *lr_schedule;  // "cosine" or "constant"
    int warmup;
    double lr_min;
    int decay_steps;       // the step where the cosine reaches lr_min (default: steps)
    unsigned given;        // TRAIN_GIVEN_* bits: schedule options set on the command line
    uint64_t seed;
    const char *data;     // "synthetic" or a file path
    const char *init;     // safetensors file to start from, or NULL
    const char *save;     // safetensors file to write at the end, or NULL
    const char *run_dir;  // where the run directory goes, or NULL for runs/<lab>-<time>-<hex>
    int overwrite;        // --overwrite: run_dir may hold an earlier run, which is removed first
    const char *ref;      // a run to compare with (dashboards draw its loss beside ours), or NULL
    const char *device;   // auto | cpu | cuda
    const char *link;     // an interconnect to emulate (links.h), or "none"
    double link_scale;    // its times multiplied by this
    int tf32;             // CUDA: TF32 tensor-core matrix products (off: fp32, matching the CPU)
    int log_every;        // a progress line every N steps when output is not a terminal (0: auto)
    // Distributed checkpoints (dcp.h): every save_every steps (0: never) into ckpt (NULL: the
    // resume directory, else <run dir>/checkpoints); resume: a checkpoint directory to go on from.
    int save_every;
    const char *ckpt;
    const char *resume;
    // Replay points (dcp.h): the training state every replay_every steps (0: never) kept in
    // <run dir>/replay/step-<s>/, so that a grader can restart the reference from the run's
    // own state and compare the next steps exactly, at any length.
    int replay_every;
    // --moe (lab-single's option; moe.h): every block's MLP a mixture of `moe` experts, each
    // token routed to `topk` of them (0 experts: the dense MLP). train_args_parse resolves
    // topk and expert_dim's automatic values (2 at most E; 4 --dim) and checks the shape.
    int moe, topk, expert_dim;
    double capacity, aux_weight;
} TrainArgs;

enum { TRAIN_GIVEN_LR_SCHEDULE = 1, TRAIN_GIVEN_WARMUP = 2, TRAIN_GIVEN_LR_MIN = 4, TRAIN_GIVEN_DECAY_STEPS = 8 };

// The shared options' defaults, from the catalog.
void train_args_defaults(TrainArgs *a);
// The schedule of these arguments (adamw.h), and the rate of one step.
LrSchedule train_lr_schedule(const TrainArgs *a);
double train_lr(const TrainArgs *a, int64_t step);

// Sets a to train_args_defaults, then parses argv[1..argc) into it and the lab's own options, each
// bound in own to its variable (which takes the catalog's default first): every option the
// catalog gives the lab must be bound, and nothing else. The lab's own default depth (the
// catalog's CatLab.layers) replaces the shared one. Exits 0 after --help and 2 on any bad
// argument; checks what can be checked before the run starts (heads divides dim, accum
// divides batch, --data/--init files readable, ...).
void train_args_parse(TrainArgs *a, int argc, char **argv, const CatLab *lab, const LabBind *own, int nown);

// A lab whose model depth follows what it learns only after parsing (pp: one block per
// pipeline stage) has "auto" as its catalog depth (a->layers = TRAIN_LAYERS_AUTO; its --help
// then says "auto"), and gives the depth with train_args_resolve_layers() once it knows it;
// --layers on the command line is kept as given. What depends on the depth (the replay
// points) is derived then. The depth the run uses is what its meta.json config records.
#define TRAIN_LAYERS_AUTO 0
void train_args_resolve_layers(TrainArgs *a, int layers);

#endif
