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

#include "check.h"
#include "gpt.h"

// The schedule's defaults (chosen by measurement: see README, "The recipe").
#define WARMUP_AUTO 100
#define WARMUP_AUTO_TEXT "100 (a shorter run ends inside it)"
#define LR_MIN_AUTO 10
#define LR_MIN_AUTO_TEXT "10"
#define REPLAY_AUTO_MIN_STEPS 50
#define REPLAY_AUTO_MAX_BYTES (16.0 * 1024 * 1024)
#define REPLAY_AUTO_TEXT "a fifth of --steps when --steps >= 50 and the state (12 bytes a parameter) fits 16 MiB, else 0"

void train_args_defaults(TrainArgs *a) {
    // Chosen so that `make lab-single` on a 2-core laptop shows the loss falling from
    // ln(256) = 5.55 to near the synthetic corpus' floor within about half a minute.
    *a = (TrainArgs){
        .steps = 1000,
        .batch = 8,
        .seq = 64,
        .layers = 2,
        .dim = 64,
        .heads = 4,
        .attn = "flash",  // chosen by measurement: see README, "Attention: --attn"
        .accum = 1,
        .lr = 3e-3,
        .lr_schedule = "cosine",
        .warmup = -1,  // auto: see resolve_schedule()
        .lr_min = -1,  // auto
        .decay_steps = -1,  // auto: --steps
        .replay_every = -1,  // auto
        .weight_decay = 0.01,
        .clip = 1.0,
        .seed = 1337,
        .data = "synthetic",
        .device = "auto",
    };
}

// The options every lab shares, pointing into a.
static int common_options(TrainArgs *a, LabOption out[]) {
    int n = 0;
    out[n++] = (LabOption){"steps", OPT_INT, &a->steps, 1, 1e7, "N", "optimizer steps"};
    out[n++] = (LabOption){"batch", OPT_INT, &a->batch, 1, 1 << 16, "B", "sequences in the global batch of a step"};
    out[n++] = (LabOption){"seq", OPT_INT, &a->seq, 1, 4096, "T", "tokens per sequence (context length)"};
    out[n++] = (LabOption){"layers", OPT_INT, &a->layers, 1, 256, "L", "transformer blocks"};
    out[n++] = (LabOption){"dim", OPT_INT, &a->dim, 1, 16384, "C", "model width"};
    out[n++] = (LabOption){"heads", OPT_INT, &a->heads, 1, 256, "NH", "attention heads (must divide --dim)"};
    out[n++] = (LabOption){"attn", OPT_STRING, &a->attn, 0, 0, "ALGO", "attention: flash (tiles, online softmax: keeps NH floats per token) or naive (keeps the NH x T probabilities per token); same math, same weights"};
    out[n++] = (LabOption){"mixed", OPT_FLAG, &a->mixed, 0, 0, "", "mixed precision: the Linear layers' matrix products take bf16 operands and sum in fp32 (tensor cores on a GPU); master weights, AdamW, LayerNorm and softmax stay fp32 (zero and fsdp also store weights and gradients in bf16)"};
    out[n++] = (LabOption){"accum", OPT_INT, &a->accum, 1, 1 << 16, "K", "micro-batches per step (gradient accumulation; must divide the batch)"};
    out[n++] = (LabOption){"lr", OPT_DOUBLE, &a->lr, 0, 10, "LR", "AdamW learning rate"};
    out[n++] = (LabOption){"lr-schedule", OPT_STRING, &a->lr_schedule, 0, 0, "S", "learning-rate schedule: cosine (warmup, then cosine decay to --lr-min) or constant (warmup, then --lr)"};
    out[n++] = (LabOption){"warmup", OPT_INT, &a->warmup, 0, 1e7, "N", "steps of linear warmup to --lr; auto: " WARMUP_AUTO_TEXT};
    out[n++] = (LabOption){"lr-min", OPT_DOUBLE, &a->lr_min, 0, 10, "LR", "where the cosine ends; auto: --lr / " LR_MIN_AUTO_TEXT};
    out[n++] = (LabOption){"decay-steps", OPT_INT, &a->decay_steps, 1, 1e7, "N", "the step where the cosine reaches --lr-min (after it, --lr-min); auto: --steps, or the warmup if longer"};
    out[n++] = (LabOption){"weight-decay", OPT_DOUBLE, &a->weight_decay, 0, 10, "WD", "AdamW decoupled weight decay"};
    out[n++] = (LabOption){"clip", OPT_DOUBLE, &a->clip, 0, 1e9, "NORM", "clip the global gradient norm to NORM (0: off)"};
    out[n++] = (LabOption){"seed", OPT_U64, &a->seed, 0, 0, "S", "seed for weights, corpus and batches"};
    out[n++] = (LabOption){"data", OPT_STRING, &a->data, 0, 0, "PATH", "'synthetic' (Markov corpus with a known loss floor) or any file's bytes"};
    out[n++] = (LabOption){"init", OPT_STRING, &a->init, 0, 0, "FILE", "start from these weights (safetensors)"};
    out[n++] = (LabOption){"save", OPT_STRING, &a->save, 0, 0, "FILE", "write the final weights here (safetensors)"};
    out[n++] = (LabOption){"run-dir", OPT_STRING, &a->run_dir, 0, 0, "DIR", "write the run here (default runs/<lab>-<time>-<hex>)"};
    out[n++] = (LabOption){"ref", OPT_STRING, &a->ref, 0, 0, "DIR", "a finished run to compare with: the dashboards draw its loss beside this one's"};
    out[n++] = (LabOption){"device", OPT_STRING, &a->device, 0, 0, "DEV", "auto (cuda when a GPU is usable), cpu or cuda"};
    out[n++] = (LabOption){"tf32", OPT_FLAG, &a->tf32, 0, 0, "", "CUDA: TF32 tensor cores for matrix products, flash attention's included (faster; results then differ from the CPU's)"};
    out[n++] = (LabOption){"save-every", OPT_INT, &a->save_every, 1, 1e7, "K", "save a distributed checkpoint every K steps and at the last step (--ckpt)"};
    out[n++] = (LabOption){"ckpt", OPT_STRING, &a->ckpt, 0, 0, "DIR", "where --save-every writes checkpoints (default: the --resume dir, else <run dir>/checkpoints)"};
    out[n++] = (LabOption){"resume", OPT_STRING, &a->resume, 0, 0, "DIR", "go on from the checkpoint in DIR, at any number of ranks"};
    out[n++] = (LabOption){"replay-every", OPT_INT, &a->replay_every, 0, 1e7, "K", "keep the training state every K steps in <run dir>/replay, for the grader's replays (0: never); auto: " REPLAY_AUTO_TEXT};
    out[n++] = (LabOption){"log-every", OPT_INT, &a->log_every, 0, 1e7, "N", "progress line every N steps when not on a terminal (0: auto)"};
    return n;
}
enum { MAX_OPTIONS = 64 };
static void check_shared_value(const char *prog, const char *name, const char *text);

// The schedule's checks, and its defaults where none was given: the warmup is 100 steps, whatever
// the run's length (the loss reaches its first plateau around step 30; at the full rate there,
// Adam's young second-moment estimate lets one step blow the loss up to 8-13 nats: measured at
// steps 25-57 with 20 to 50 warmup steps, never with 100; so a 50-step run stays inside the
// warmup rather than rush to the full rate), the cosine ends at a tenth of --lr at the last
// step (or at the warmup's end, for a run shorter than it).
static void resolve_schedule(TrainArgs *a, const char *prog) {
    check_shared_value(prog, "lr-schedule", a->lr_schedule);
    if (a->warmup > a->steps && a->decay_steps < 0)
        usage_error(prog, "--warmup %d is longer than the run (--steps %d): the learning rate would never reach --lr",
                    a->warmup, a->steps);
    if (a->lr_min > a->lr)
        usage_error(prog, "--lr-min %g is above --lr %g: the cosine decays from --lr down to --lr-min", a->lr_min, a->lr);
    if (a->decay_steps > 0 && a->warmup > a->decay_steps)
        usage_error(prog, "--warmup %d is longer than --decay-steps %d: the cosine would end before the warmup does",
                    a->warmup, a->decay_steps);
    if (a->warmup < 0) a->warmup = WARMUP_AUTO;
    if (a->lr_min < 0) a->lr_min = a->lr / LR_MIN_AUTO;
    if (a->decay_steps < 0) a->decay_steps = a->steps > a->warmup ? a->steps : a->warmup;
}

// Replay points by default when a run is long enough to have steps after the first ten that
// a grader compares anyway, and the state small enough to keep a few copies of it.
static void resolve_replay(TrainArgs *a) {
    if (a->replay_every >= 0) return;
    GptConfig c = {.vocab = GPT_VOCAB, .seq = a->seq, .layers = a->layers, .dim = a->dim, .heads = a->heads};
    double state_bytes = 12.0 * (double)gpt_num_params(&c);  // params, m, v in fp32
    a->replay_every = a->steps >= REPLAY_AUTO_MIN_STEPS && state_bytes <= REPLAY_AUTO_MAX_BYTES ? a->steps / 5 : 0;
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

static void print_default(const LabOption *o) {
    // A numeric default below the option's range means "derived after parsing".
    if ((o->kind == OPT_INT && *(int *)o->value < o->min) || (o->kind == OPT_DOUBLE && *(double *)o->value < o->min)) {
        printf("auto");
        return;
    }
    switch (o->kind) {
    case OPT_INT: printf("%d", *(int *)o->value); break;
    case OPT_DOUBLE: printf("%g", *(double *)o->value); break;
    case OPT_U64: printf("%llu", (unsigned long long)*(uint64_t *)o->value); break;
    case OPT_STRING: printf("%s", *(const char **)o->value ? *(const char **)o->value : "none"); break;
    case OPT_FLAG: printf("%s", *(int *)o->value ? "on" : "off"); break;
    }
}

static void print_help(const char *prog, const char *about, const LabOption *opts, int n, int ncommon) {
    printf("usage: %s [options]\n\n%s\n", prog, about);
    for (int i = 0; i < n; i++) {
        if (i == 0) printf("\ntraining options (shared by every lab):\n");
        if (i == ncommon) printf("\n%s options:\n", prog);
        char left[64];
        const char *metavar = opts[i].metavar ? opts[i].metavar : "";  // flags may have none
        snprintf(left, sizeof left, "--%s%s%s", opts[i].name, metavar[0] ? " " : "", metavar);
        printf("  %-22s %s (default: ", left, opts[i].help);
        print_default(&opts[i]);
        printf(")\n");
    }
    printf("  %-22s %s\n", "--help", "show this help and exit");
    printf("\nEnvironment: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT as torchrun\n"
           "sets them (or mpirun's OMPI_COMM_WORLD_* and srun's SLURM_* in their place); NCCL_COMM_ID;\n"
           "SHARDLAB_RUN_DIR; SHARDLAB_TIMEOUT_S (every wait's deadline, default 120 s).\n");
}

// Checks text as o's value, by its type and bounds, and stores it when `store`. 0, or -1
// with the reason in why (the one place these rules are written: the parser below and
// train_option_check, the grader's check of a run's config, both come here).
static int take_value(const LabOption *o, const char *text, int store, char *why, size_t n) {
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case OPT_INT: {
        long long v = strtoll(text, &end, 10);
        if (end == text || *end || errno) return snprintf(why, n, "--%s: '%s' is not a whole number", o->name, text), -1;
        if (v < o->min || v > o->max)
            return snprintf(why, n, "--%s must be between %.0f and %.0f (got %s)", o->name, o->min, o->max, text), -1;
        if (store) *(int *)o->value = (int)v;
        break;
    }
    case OPT_DOUBLE: {
        double v = strtod(text, &end);
        if (end == text || *end || errno || !isfinite(v))
            return snprintf(why, n, "--%s: '%s' is not a number", o->name, text), -1;
        if (v < o->min || v > o->max)
            return snprintf(why, n, "--%s must be between %g and %g (got %s)", o->name, o->min, o->max, text), -1;
        if (store) *(double *)o->value = v;
        break;
    }
    case OPT_U64: {
        unsigned long long v = text[0] == '-' ? 0 : strtoull(text, &end, 10);
        if (text[0] == '-' || end == text || *end || errno)
            return snprintf(why, n, "--%s: '%s' is not a non-negative whole number", o->name, text), -1;
        if (store) *(uint64_t *)o->value = v;
        break;
    }
    case OPT_STRING:
        if (!text[0]) return snprintf(why, n, "--%s: empty value", o->name), -1;
        if (store) *(const char **)o->value = text;
        break;
    case OPT_FLAG:
        if (store) *(int *)o->value = 1;
        break;
    }
    return 0;
}

static void parse_value(const char *prog, const LabOption *o, const char *text) {
    char why[600];
    if (take_value(o, text, 1, why, sizeof why) != 0) usage_error(prog, "%s", why);
}

// --data and --init: a regular file this process can read (a FIFO or a device would be read
// forever, or wait for a writer). 0, or -1 with the reason in why.
static int readable_file(const char *option, const char *path, char *why, size_t n) {
    struct stat st;
    if (access(path, R_OK) != 0 || stat(path, &st) != 0)
        return snprintf(why, n, "--%s: cannot read '%s': %s", option, path, strerror(errno)), -1;
    if (!S_ISREG(st.st_mode)) return snprintf(why, n, "--%s: '%s' is not a regular file", option, path), -1;
    return 0;
}

// What a shared string option's value must be besides not empty: the names --lr-schedule,
// --attn and --device take, --data and --init readable files. 0, or -1 with the reason in why.
static int shared_value_check(const char *name, const char *text, char *why, size_t n) {
    if (!strcmp(name, "lr-schedule") && strcmp(text, "cosine") != 0 && strcmp(text, "constant") != 0)
        return snprintf(why, n, "--lr-schedule must be cosine or constant (got '%s')", text), -1;
    if (!strcmp(name, "attn") && gpt_attn_parse(text) < 0)
        return snprintf(why, n, "--attn must be flash or naive (got '%s')", text), -1;
    if (!strcmp(name, "device") && strcmp(text, "auto") != 0 && strcmp(text, "cpu") != 0 && strcmp(text, "cuda") != 0)
        return snprintf(why, n, "--device must be auto, cpu or cuda (got '%s')", text), -1;
    if ((!strcmp(name, "data") && strcmp(text, "synthetic") != 0) || !strcmp(name, "init"))
        return readable_file(name, text, why, n);
    return 0;
}

static void check_shared_value(const char *prog, const char *name, const char *text) {
    char why[600];
    if (shared_value_check(name, text, why, sizeof why) != 0) usage_error(prog, "%s", why);
}

int train_option_check(const char *name, const char *text, const LabOption *extra, int nextra, char *why, size_t n) {
    TrainArgs scratch;  // the table's values point here; nothing is stored
    train_args_defaults(&scratch);
    LabOption opts[MAX_OPTIONS];
    int ncommon = common_options(&scratch, opts);
    const LabOption *o = NULL;
    int shared = 0;
    for (int k = 0; k < ncommon && !o; k++)
        if (!strcmp(opts[k].name, name)) o = &opts[k], shared = 1;
    for (int k = 0; k < nextra && !o; k++)
        if (!strcmp(extra[k].name, name)) o = &extra[k];
    if (!o) return snprintf(why, n, "--%s: no such option", name), -1;
    if (o->kind == OPT_FLAG) return snprintf(why, n, "--%s takes no value", name), -1;
    if (text[0] == '-' && o->kind == OPT_STRING)
        return snprintf(why, n, "--%s: '%s' would read as an option", name, text), -1;
    if (take_value(o, text, 0, why, n) != 0) return -1;
    return shared ? shared_value_check(name, text, why, n) : 0;
}

void train_args_parse(TrainArgs *a, int argc, char **argv, const char *prog, const char *about,
                      const LabOption *extra, int nextra) {
    LabOption opts[MAX_OPTIONS];
    int ncommon = common_options(a, opts);
    if (ncommon + nextra > MAX_OPTIONS) die("this is a bug in shardlab", "too many options");
    for (int i = 0; i < nextra; i++) {
        for (int k = 0; k < ncommon; k++)  // a lab's option may not hide a shared one
            if (strcmp(extra[i].name, opts[k].name) == 0)
                die("this is a bug in shardlab: rename the lab's option", "%s: option --%s is also a shared option", prog,
                    extra[i].name);
        opts[ncommon + i] = extra[i];
    }
    int n = ncommon + nextra;

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            print_help(prog, about, opts, n, ncommon);
            exit(0);
        }
        if (strncmp(arg, "--", 2) != 0) usage_error(prog, "unexpected argument '%s'", arg);
        const char *name = arg + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const LabOption *o = NULL;
        for (int k = 0; k < n && !o; k++)
            if (strlen(opts[k].name) == len && strncmp(opts[k].name, name, len) == 0) o = &opts[k];
        if (!o) usage_error(prog, "unknown option '--%.*s'", (int)len, name);
        const char *value = eq ? eq + 1 : NULL;
        if (o->kind == OPT_FLAG) {
            if (value) usage_error(prog, "--%s takes no value (got '%s')", o->name, value);
            parse_value(prog, o, "");
            continue;
        }
        if (!value) {
            if (i + 1 >= argc) usage_error(prog, "--%s needs a value (%s)", o->name, o->metavar);
            value = argv[++i];
        }
        parse_value(prog, o, value);
        a->given |= o->value == (void *)&a->lr_schedule   ? TRAIN_GIVEN_LR_SCHEDULE
                  : o->value == (void *)&a->warmup      ? TRAIN_GIVEN_WARMUP
                  : o->value == (void *)&a->lr_min      ? TRAIN_GIVEN_LR_MIN
                  : o->value == (void *)&a->decay_steps ? TRAIN_GIVEN_DECAY_STEPS
                                                        : 0;
    }

    // What can be checked before anything runs.
    if (a->dim % a->heads != 0)
        usage_error(prog, "--heads %d does not divide --dim %d", a->heads, a->dim);
    if (a->batch % a->accum != 0)
        usage_error(prog, "--accum %d does not divide --batch %d (each micro-batch must have the same size)",
                    a->accum, a->batch);
    resolve_schedule(a, prog);
    if (a->layers != TRAIN_LAYERS_AUTO) resolve_replay(a);  // else train_args_resolve_layers() does
    check_shared_value(prog, "attn", a->attn);
    check_shared_value(prog, "device", a->device);
    check_shared_value(prog, "data", a->data);
    if (a->init) check_shared_value(prog, "init", a->init);
    if (a->ckpt && !a->save_every) usage_error(prog, "--ckpt %s: nothing to save there without --save-every K", a->ckpt);
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
