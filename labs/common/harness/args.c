// args.c — see args.h.
#include "args.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "batchsplit.h"
#include "check.h"
#include "common/model/gpt.h"
#include "common/runfiles/dcp.h"

enum { MAX_OPTIONS = 64 };  // shared and a lab's own, together

// Where each shared option's value goes (the catalog's catalog_train[], in its order).
static int shared_slots(TrainArgs *a, CatSlot out[]) {
    const struct { const char *name; void *value; } bind[] = {
        {"steps", &a->steps}, {"batch", &a->batch}, {"seq", &a->seq}, {"layers", &a->layers}, {"dim", &a->dim},
        {"heads", &a->heads}, {"attn", &a->attn}, {"mixed", &a->mixed}, {"accum", &a->accum}, {"lr", &a->lr},
        {"lr-schedule", &a->lr_schedule}, {"warmup", &a->warmup}, {"lr-min", &a->lr_min},
        {"decay-steps", &a->decay_steps}, {"weight-decay", &a->weight_decay}, {"clip", &a->clip}, {"seed", &a->seed},
        {"data", &a->data}, {"init", &a->init}, {"save", &a->save}, {"run-dir", &a->run_dir},
        {"overwrite", &a->overwrite}, {"ref", &a->ref},
        {"device", &a->device}, {"link", &a->link}, {"link-scale", &a->link_scale}, {"tf32", &a->tf32}, {"save-every", &a->save_every}, {"ckpt", &a->ckpt},
        {"resume", &a->resume}, {"replay-every", &a->replay_every}, {"log-every", &a->log_every},
    };
    int n = (int)(sizeof bind / sizeof bind[0]);
    if (n != catalog_ntrain) die("this is a bug in shardlab", "args.c binds %d shared options, the catalog has %d", n, catalog_ntrain);
    for (int i = 0; i < n; i++) {
        if (strcmp(bind[i].name, catalog_train[i].name) != 0)
            die("this is a bug in shardlab", "args.c binds --%s where the catalog has --%s", bind[i].name, catalog_train[i].name);
        out[i] = (CatSlot){&catalog_train[i], bind[i].value, 0};
    }
    return n;
}

void train_args_defaults(TrainArgs *a) {
    *a = (TrainArgs){0};
    CatSlot slots[MAX_OPTIONS];
    int n = shared_slots(a, slots);
    for (int i = 0; i < n; i++) catalog_default(slots[i].opt, slots[i].value);
}

// The schedule's checks, and its defaults where none was given: the warmup is 100 steps, whatever
// the run's length (the loss reaches its first plateau around step 30; at the full rate there,
// Adam's young second-moment estimate lets one step blow the loss up to 8-13 nats: measured at
// steps 25-57 with 20 to 50 warmup steps, never with 100; so a 50-step run stays inside the
// warmup rather than rush to the full rate), the cosine ends at a tenth of --lr at the last
// step (or at the warmup's end, for a run shorter than it). A warmup given longer than the run
// is taken as the automatic one is: the run ends inside it, below --lr (as PyTorch's LinearLR
// and Hugging Face's warmup schedules do; nothing here shortens what was asked for).
static void resolve_schedule(TrainArgs *a, const char *prog) {
    if (a->lr_min > a->lr)
        usage_error(prog, "--lr-min %g is above --lr %g: the cosine decays from --lr down to --lr-min", a->lr_min, a->lr);
    if (a->decay_steps > 0 && a->warmup > a->decay_steps)
        usage_error(prog, "--warmup %d is longer than --decay-steps %d: the cosine would end before the warmup does",
                    a->warmup, a->decay_steps);
    if (a->warmup < 0) a->warmup = CATALOG_WARMUP_AUTO;
    if (a->lr_min < 0) a->lr_min = a->lr / CATALOG_LR_MIN_DIVISOR;
    if (a->decay_steps < 0) a->decay_steps = a->steps > a->warmup ? a->steps : a->warmup;
}

// Replay points by default when a run is long enough to have steps after the first ten that
// a grader compares anyway, and the state small enough to keep a few copies of it.
static void resolve_replay(TrainArgs *a) {
    if (a->replay_every >= 0) return;
    GptConfig c = {.vocab = GPT_VOCAB, .seq = a->seq, .layers = a->layers, .dim = a->dim, .heads = a->heads,
                   .experts = a->moe, .topk = a->topk, .expert_dim = a->expert_dim};
    double state_bytes = 12.0 * (double)gpt_num_params(&c);  // params, m, v in fp32
    a->replay_every =
        a->steps >= CATALOG_REPLAY_MIN_STEPS && state_bytes <= CATALOG_REPLAY_MAX_MIB * 1048576.0 ? a->steps / 5 : 0;
}

// --moe's automatic values and its checks: one line and exit 2 for a shape the layer cannot
// have (moe.h's moe_config_check names the option and its range).
static void resolve_moe(TrainArgs *a, const char *prog) {
    if (a->moe <= 0) return;
    if (a->topk < 0) a->topk = a->moe < 2 ? a->moe : 2;
    if (a->expert_dim < 0) a->expert_dim = 4 * a->dim;
    MoeConfig m = {.C = a->dim, .E = a->moe, .K = a->topk, .H = a->expert_dim, .capacity = a->capacity};
    const char *why = moe_config_check(&m);
    if (*why) usage_error(prog, "%s", why);
    if (a->mixed) usage_error(prog, "--moe runs in fp32: drop --mixed (the experts have no bf16 path yet)");
    if (!strcmp(a->device, "cuda"))
        usage_error(prog, "--moe runs on the CPU only (its router and experts are host loops): use --device cpu");
}

void train_args_resolve_layers(TrainArgs *a, int layers) {
    if (a->layers == TRAIN_LAYERS_AUTO) a->layers = layers;
    resolve_replay(a);
}

LrSchedule train_lr_schedule(const TrainArgs *a) {
    return (LrSchedule){.shape = strcmp(a->lr_schedule, "constant") == 0 ? LR_CONSTANT : LR_COSINE,
                        .lr = a->lr, .lr_min = a->lr_min, .warmup = a->warmup, .steps = a->decay_steps};
}

double train_lr(const TrainArgs *a, int64_t step) {
    LrSchedule s = train_lr_schedule(a);
    return lr_schedule_at(&s, step);
}

void train_args_parse(TrainArgs *a, int argc, char **argv, const CatLab *lab, const LabBind *own, int nown) {
    if (!lab || !lab->trains) die("this is a bug in shardlab", "train_args_parse: not a training lab of the catalog");
    const char *prog = lab->name;
    train_args_defaults(a);
    CatSlot slots[MAX_OPTIONS];
    int ncommon = shared_slots(a, slots);
    if (ncommon + nown > MAX_OPTIONS) die("this is a bug in shardlab", "%s: too many options", prog);
    int n = ncommon + catalog_bind(lab, own, nown, slots + ncommon);
    for (int i = ncommon; i < n; i++)  // a lab's option may not hide a shared one
        if (catalog_find(NULL, slots[i].opt->name))
            die("this is a bug in shardlab: rename the lab's option", "%s: option --%s is also a shared option", prog,
                slots[i].opt->name);
    if (lab->layers) a->layers = !strcmp(lab->layers, "auto") ? TRAIN_LAYERS_AUTO : atoi(lab->layers);
    catalog_parse(prog, lab->about, slots, n, ncommon, "training options (shared by every lab)", argc, argv);
    static const struct { const char *name; unsigned bit; } given[] = {
        {"lr-schedule", TRAIN_GIVEN_LR_SCHEDULE}, {"warmup", TRAIN_GIVEN_WARMUP}, {"lr-min", TRAIN_GIVEN_LR_MIN},
        {"decay-steps", TRAIN_GIVEN_DECAY_STEPS}};
    for (int i = 0; i < ncommon; i++)
        for (size_t g = 0; g < sizeof given / sizeof given[0]; g++)
            if (slots[i].given && !strcmp(slots[i].opt->name, given[g].name)) a->given |= given[g].bit;

    // What can be checked before anything runs.
    if (a->dim % a->heads != 0)
        usage_error(prog, "--heads %d does not divide --dim %d", a->heads, a->dim);
    if ((int64_t)a->batch * a->seq > CATALOG_MAX_BATCH_TOKENS)
        usage_error(prog, "--batch %d x --seq %d is %lld tokens a step, more than %d: lower --batch or --seq", a->batch,
                    a->seq, (long long)a->batch * a->seq, CATALOG_MAX_BATCH_TOKENS);
    BatchSplit split = batch_split_of(NULL, a, 1);  // every lab's micro-batches (batchsplit.h)
    char why[768];
    if (batch_split_check(&split, why, sizeof why) != 0) usage_error(prog, "%s", why);
    resolve_schedule(a, prog);
    resolve_moe(a, prog);
    if (a->layers != TRAIN_LAYERS_AUTO) resolve_replay(a);  // else train_args_resolve_layers() does
    if (a->ckpt && !a->save_every) usage_error(prog, "--ckpt %s: nothing to save there without --save-every K", a->ckpt);
    dcp_check_paths(a, prog);  // a checkpoint's paths fit the system's limits, or nothing starts
    if (a->resume) {  // a directory with a manifest; dcp_open() checks the rest
        char manifest[PATH_MAX + 32];
        snprintf(manifest, sizeof manifest, "%s/manifest.json", a->resume);
        if (access(a->resume, F_OK) != 0) usage_error(prog, "--resume: '%s': %s", a->resume, strerror(errno));
        if (access(manifest, R_OK) != 0)
            usage_error(prog, "--resume: no checkpoint in '%s' (no readable manifest.json: no save completed there)",
                        a->resume);
    }
    if (a->ref) {  // a run directory, recorded as an absolute path so any reader finds it
        static char ref[PATH_MAX];
        char events[PATH_MAX + 16];
        if (!realpath(a->ref, ref)) usage_error(prog, "--ref: '%s': %s", a->ref, strerror(errno));
        snprintf(events, sizeof events, "%s/rank-0.jsonl", ref);
        if (access(events, R_OK) != 0) usage_error(prog, "--ref: '%s' is not a run directory (no rank-0.jsonl)", a->ref);
        a->ref = ref;
    }
}
