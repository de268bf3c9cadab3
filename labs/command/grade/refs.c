// refs.c — the runs the grader starts and compares with: the single-rank reference on the same
// global batch, ckpt's --policy none twin, and the replays from a run's own replay points
// (grade_internal.h: ctx_reference(), ctx_replays()); and starting any run through the
// launcher, into files the grader creates afresh.
//
// The single-rank reference and the replays run the grader's reference programs, ref/ beside
// its lab programs (build/labs/ref/<lab>): the labs linked with the grader's own code for every
// student region they reach (solutions.c). A self-grade in a student's copy, whose shardlab
// is the copy's own build, then compares the student's runs with the same references as the
// instructor's `make grade LABS=<copy>`, not with the student's regions again.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "04-data-sharding/dataset.h"
#include "command/launch.h"
#include "common/harness/catalog.h"
#include "common/harness/check.h"
#include "common/runfiles/runlog.h"
#include "grade.h"
#include "grade_internal.h"
#include "sandbox.h"

// ---- files the grader writes ------------------------------------------------------------------

// Creates path anew for writing. The run directory is the student's: a grade.json.tmp or a
// ref-single.log already there may be a link to any file of the grader's user (or a hard
// link to one), so what is there is unlinked, never written through, and the new file is
// created exclusively, not following a link. Returns the descriptor, or -1 (errno set).
int grade_create_fresh(const char *path) {
    if (unlink(path) != 0 && errno != ENOENT) return -1;
    return open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
}

FILE *grade_fopen_fresh(const char *path) {
    int fd = grade_create_fresh(path);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    if (fd >= 0 && !f) close(fd);
    return f;
}

// ---- starting a run through the launcher ----------------------------------------------------

// `shardlab run <lab> -n N --ui none args... --run-dir DIR` (launch.h) with the lab programs of labs_dir;
// the launcher's output goes to log_path. Returns its exit status (127: could not start).
//
// A student's programs run in the sandbox (sandbox.h), the launcher with them: it sees this
// program and the student's programs, read-only, and writes the run directory, nothing else;
// the grader's reference programs and references (build/labs/ref, --refs) are not there. The
// deadline ends the launcher, its ranks and whatever they started.
int grade_start_run(const char *labs_dir, const char *lab, int n, char *const *args, const char *dir,
                    const char *log_path, int student_deadline_s, int *timed_out) {
    if (timed_out) *timed_out = 0;
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) return 127;
    exe[k] = 0;
    // This very program, even if a rebuild replaced its file; its output to a fresh log.
    LaunchOpts o = {.exe = "/proc/self/exe", .argv0 = exe, .labs_dir = labs_dir, .out_fd = grade_create_fresh(log_path)};
    int rc;
    if (student_deadline_s > 0) {
        Sandbox box;
        sandbox_init(&box, "shardlab grade", student_deadline_s);
        sandbox_read(&box, exe);
        sandbox_read(&box, labs_dir);
        sandbox_write(&box, dir);
        char labs_env[PATH_MAX + 32];
        snprintf(labs_env, sizeof labs_env, "SHARDLAB_LABS=%s", labs_dir);
        sandbox_setenv(&box, labs_env);
        box.out_fd = box.err_fd = o.out_fd;
        o.exe = exe;  // the path the sandbox shows it at
        char nbuf[16], *argv[LAUNCH_MAX_ARGS];
        launch_argv(&o, lab, n, args, dir, argv, nbuf);
        rc = sandbox_run(&box, argv, timed_out);
    } else {
        rc = launch_run_wait(&o, lab, n, args, dir);
    }
    if (o.out_fd >= 0) close(o.out_fd);
    return rc;
}

// The launcher's reason when a run failed, from its output: its last line that names an error
// ("shardlab: rank 0 failed (exit 1): single rank 0: error: ... No space left on device"),
// else its last non-empty line ("shardlab: single stopped; run written to ...").
void grade_last_line(const char *path, char *out, size_t n) {
    StrBuf sb;
    sb_init(&sb);
    out[0] = 0;
    int said_error = 0;
    if (sb_read_file(&sb, path, 1 << 20) >= 0 && sb.data)
        for (char *line = sb.data, *next; *line; line = next) {
            next = line + strcspn(line, "\n");
            if (*next) *next++ = 0;
            size_t len = strlen(line);
            while (len && line[len - 1] == ' ') line[--len] = 0;
            int error = strstr(line, "error") != NULL;
            if (len && (error || !said_error)) snprintf(out, n, "%s", line), said_error |= error;
        }
    sb_free(&sb);
}

// ---- reference runs ----------------------------------------------------------------------------

// A reference run's command: which lab, how many ranks, the arguments (args[0..na), owned),
// and the same as one line of text (what grade-args.txt keeps, to know when to reuse it).
// Every value taken from the run's config has passed the labs' own check of its option
// (catalog_check_option, catalog.h: its type and bounds in the catalog); the first that did
// not is in `refused` ("" if none), and then the command is not run.
typedef struct {
    const char *lab;
    int world;
    char *args[64];
    int na;
    StrBuf text;
    char accum[32];
    char refused[600];
} RefCmd;

static void add_str(RefCmd *c, const char *opt, const char *value) {
    if (c->na + 2 > 62) return;  // (a fixed command: never this long)
    c->args[c->na++] = strdup(opt);
    c->args[c->na++] = strdup(value);
    sb_printf(&c->text, "%s %s ", opt, value);
}
static void add_flag(RefCmd *c, const char *opt) {
    if (c->na + 1 > 62) return;
    c->args[c->na++] = strdup(opt);
    sb_printf(&c->text, "%s ", opt);
}
static void ref_cmd_free(RefCmd *c) {
    for (int i = 0; i < c->na; i++) free(c->args[i]);
    sb_free(&c->text);
}

// A number as option text that reads back as the same double: a whole number with all its
// digits (what an integer option's parser reads), else the shortest %g that does.
static void number_text(double v, char *buf, size_t n) {
    if (v == floor(v) && fabs(v) < 1e19) {
        snprintf(buf, n, "%.0f", v);
        return;
    }
    for (int digits = 6; digits <= 17; digits++) {
        snprintf(buf, n, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) break;
    }
}

// "--opt value" for the run's config[key] given as text, once the labs' parser would take
// it for --opt; else the refusal, naming the key and the value.
static void add_checked(RefCmd *c, const char *key, const char *opt, const char *value) {
    char why[500];
    if (c->refused[0]) return;
    if (catalog_check_option(c->lab, opt + 2, value, why, sizeof why) != 0) {
        snprintf(c->refused, sizeof c->refused, "meta.json's config \"%s\" is '%.120s', which the labs refuse (%.300s): no "
                 "reference runs on it", key, value, why);
        return;
    }
    add_str(c, opt, value);
}

// config[key] as option text: a number (dflt when absent; dflt NULL: it must be there), or
// for a string option (want_string) a string (dflt when absent or null). Anything else is
// refused.
static void add_cfg(RefCmd *c, const GradeRun *run, const char *key, const char *opt, const char *dflt, int want_string) {
    const JsonValue *v = json_get(run->config, key);
    char buf[64];
    const char *text = NULL;
    if (!v || (want_string && v->type == JSON_NULL)) text = dflt;
    else if (!want_string && v->type == JSON_NUMBER && isfinite(v->number)) number_text(v->number, buf, sizeof buf), text = buf;
    else if (want_string && v->type == JSON_STRING) text = v->string;
    if (!text && !c->refused[0]) {
        snprintf(c->refused, sizeof c->refused, "meta.json's config \"%s\": %s expected, found %s: no reference runs on it",
                 key, want_string ? "a string" : "a number", v ? json_type_name(v->type) : "nothing");
        return;
    }
    add_checked(c, key, opt, text);
}

// shard's own options, each checked alone with the others at their defaults (dataset.h), so
// that a refusal names its key: the strategy's name, --items, the weights with the temperature.
// The reference reads its batches with --strategy slice, whatever the run's: the three
// strategies feed the ranks the same sequences in the same order and train bit for bit alike
// (shard.c), and slice runs none of the sampler's read (shard.c's student region). The run's
// strategy is still checked, so a config no lab takes is refused as before.
static void add_shard(RefCmd *c, const GradeRun *run) {
    ShardArgs sa, dflt;
    shard_args_defaults(&dflt);
    size_t before = (size_t)c->na;
    if (c->refused[0]) return;
    RefCmd given = {.lab = c->lab};  // the run's strategy, checked on its own
    sb_init(&given.text);
    add_cfg(&given, run, "strategy", "--strategy", "sampler", 1);
    memcpy(c->refused, given.refused, sizeof c->refused);
    ref_cmd_free(&given);
    if (c->refused[0]) return;
    add_str(c, "--strategy", "slice");
    add_cfg(c, run, "items", "--items", NULL, 0);
    const JsonValue *w = json_get(run->config, "weights");
    if (w && w->type != JSON_NULL) {
        add_cfg(c, run, "weights", "--weights", NULL, 1);
        add_cfg(c, run, "temperature", "--temperature", "1", 0);
    }
    if (c->refused[0]) return;
    static const char *const keys[] = {"strategy", "items", "weights"};
    for (int k = 0; k < 3; k++) {
        sa = dflt;
        for (int i = (int)before; i + 1 < c->na; i += 2) {
            const char *opt = c->args[i] + 2, *value = c->args[i + 1];
            if (!strcmp(opt, keys[k])) *(k == 0 ? &sa.strategy : k == 1 ? &sa.items : &sa.weights) = value;
            if (k == 2 && !strcmp(opt, "temperature")) sa.temperature = strtod(value, NULL);
        }
        int strategy;
        long long items;
        Mixture mix;
        char why[500];
        if (shard_args_check(&sa, &strategy, &items, &mix, why, sizeof why) != 0) {
            snprintf(c->refused, sizeof c->refused, "meta.json's config \"%s\" is not what shard takes (%.300s): no reference "
                     "runs on it", keys[k], why);
            return;
        }
    }
}

// The reference of kind k for this run: the run's model, data, optimizer, schedule and global
// batch, split into micro-batches as the run split it (the same fp32 sums). resume: a replay
// point of the run (a checkpoint directory) to start from, running `steps` steps in all.
// Returns 0, or -1 with c->refused saying which config value no lab takes.
static int ref_command(const GradeRun *run, RefKind k, const char *resume, int64_t steps, RefCmd *c) {
    memset(c, 0, sizeof *c);
    sb_init(&c->text);
    c->lab = "single", c->world = 1;
    double dp = grade_cfg_num(run, "dp", 1);
    double accum = grade_cfg_num(run, "accum", 1);
    if (!strcmp(run->lab, "ddp") || !strcmp(run->lab, "zero") || !strcmp(run->lab, "fsdp") ||
        !strcmp(run->lab, "ckpt") || !strcmp(run->lab, "shard"))
        accum *= run->world;
    else if (!strcmp(run->lab, "tp") || !strcmp(run->lab, "cp")) accum *= dp;  // (cp: every rank of a group the same sequences)
    else if (!strcmp(run->lab, "pp")) accum = grade_cfg_num(run, "micro", 1) * dp;
    if (!strcmp(run->lab, "shard")) c->lab = "shard";
    if (k == REF_CKPT_NONE) c->lab = "ckpt", c->world = run->world, accum = grade_cfg_num(run, "accum", 1);
    // ZeRO's and FSDP's --mixed also keep the weights and gradients in bf16 (single keeps them
    // in fp32): their single-rank run is ZeRO stage 0 on one rank, the same storage.
    int mixed = grade_cfg_int(run, "mixed", 0) != 0;
    int bf16_storage = mixed && k == REF_SINGLE && (!strcmp(run->lab, "zero") || !strcmp(run->lab, "fsdp"));
    if (bf16_storage) c->lab = "zero";
    sb_printf(&c->text, "%s -n %d ", c->lab, c->world);
    if (bf16_storage) add_str(c, "--stage", "0");

    static const char *const nums[][2] = {{"batch", "--batch"}, {"seq", "--seq"},   {"layers", "--layers"},
                                          {"dim", "--dim"},     {"heads", "--heads"}, {"lr", "--lr"},
                                          {"weight_decay", "--weight-decay"},        {"clip", "--clip"},
                                          {"seed", "--seed"}};
    char text[64];
    number_text((double)steps, text, sizeof text);
    add_checked(c, "steps", "--steps", text);
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) add_cfg(c, run, nums[i][0], nums[i][1], NULL, 0);
    // The learning-rate schedule as the run resolved it (a run from before schedules had a
    // constant rate from step 1). Its horizon is the run's, whatever steps the reference runs.
    if (json_get(run->config, "warmup")) {
        add_cfg(c, run, "lr_schedule", "--lr-schedule", "cosine", 1);
        add_cfg(c, run, "warmup", "--warmup", NULL, 0);
        add_cfg(c, run, "lr_min", "--lr-min", NULL, 0);
        number_text((double)run->steps, text, sizeof text);
        add_cfg(c, run, "decay_steps", "--decay-steps", text, 0);
    } else {
        add_str(c, "--lr-schedule", "constant"), add_str(c, "--warmup", "0");
    }
    number_text(accum, c->accum, sizeof c->accum);
    add_checked(c, "accum", "--accum", c->accum);
    add_cfg(c, run, "data", "--data", "synthetic", 1);
    add_cfg(c, run, "attn", "--attn", "naive", 1);  // a run from before --attn ran naive attention
    if (mixed) add_flag(c, "--mixed");  // the same bf16 operands
    if (json_get(run->config, "moe")) {  // a mixture of experts: the reference trains the same layer
        static const char *const moe[][2] = {{"moe", "--moe"}, {"topk", "--topk"}, {"expert_dim", "--expert-dim"},
                                             {"capacity", "--capacity"}, {"aux_weight", "--aux-weight"}};
        for (size_t i = 0; i < sizeof moe / sizeof moe[0]; i++) add_cfg(c, run, moe[i][0], moe[i][1], NULL, 0);
    }
    const JsonValue *init = json_get(run->config, "init");
    if (init && init->type != JSON_NULL) add_cfg(c, run, "init", "--init", NULL, 1);
    if (!strcmp(c->lab, "shard")) add_shard(c, run);
    if (k == REF_CKPT_NONE) add_str(c, "--policy", "none"), add_str(c, "--compare", "0");
    add_str(c, "--replay-every", "0");  // a reference needs no replay points of its own
    if (resume) add_str(c, "--resume", resume);
    return c->refused[0] ? -1 : 0;
}

// FNV-1a 64 of a file's bytes (0 if unreadable): which build a cached reference came from.
static uint64_t file_hash(const char *path) {
    StrBuf sb;
    sb_init(&sb);
    uint64_t h = sb_read_file(&sb, path, 64u << 20) == 0 && sb.data ? fnv1a64(sb.data, sb.len, FNV1A64_INIT) : 0;
    sb_free(&sb);
    return h;
}

// Runs c into dir with the lab programs of labs_dir. cached: dir is in the grader's own --refs
// folder, and what is there is reused when it ran with the same command and is whole. A
// reference inside the run directory is never reused: whoever handed the run in could have
// written it (and its grade-args.txt) to agree with a wrong run. 0 with out loaded, or -1 with
// the reason in problem.
static int ref_run(const Ctx *x, const RefCmd *c, const char *dir, int cached, const char *labs_dir, GradeRun *out,
                   char *problem, size_t n) {
    char log_path[PATH_MAX + 96], args_path[PATH_MAX + 96];  // (dir is shorter than PATH_MAX: ctx_reference)
    snprintf(log_path, sizeof log_path, "%s.log", dir);
    snprintf(args_path, sizeof args_path, "%s/grade-args.txt", dir);
    StrBuf old;
    sb_init(&old);
    int same = cached && sb_read_file(&old, args_path, 1 << 16) == 0 && old.data && !strcmp(old.data, c->text.data);
    sb_free(&old);
    if (same && grade_run_load(out, dir) == 0) return 0;
    grade_run_free(out);
    file_remove_tree(dir);
    char prog[PATH_MAX + 96];
    snprintf(prog, sizeof prog, "%s/%s", labs_dir, c->lab);
    if (access(prog, X_OK) != 0) {
        snprintf(problem, n, "the grader's reference program %.500s: %s (make builds it beside the labs)", prog,
                 strerror(errno));
        return -1;
    }
    if (!x->refs->quiet) fprintf(stderr, "shardlab grade: starting the reference: %s\n", c->text.data);
    // The ckpt twin of a --labs run is the student's own program: in the sandbox, like the run.
    int student = x->refs->run_labs_dir && !strcmp(labs_dir, x->refs->run_labs_dir), timed_out;
    int rc = grade_start_run(labs_dir, c->lab, c->world, c->args, dir, log_path, student ? x->refs->deadline_s : 0,
                             &timed_out);
    char last[200];
    grade_last_line(log_path, last, sizeof last);
    if (rc != 0 && timed_out) {
        snprintf(problem, n, "the reference run ran out of time: stopped after %d s, the deadline of each run (make "
                 "grade DEADLINE=<seconds> gives more)", x->refs->deadline_s);
        return -1;
    }
    if (rc != 0) {
        snprintf(problem, n, "the reference run failed (exit %d): %s", rc, last);
        return -1;
    }
    if (grade_run_load(out, dir) < 0) {
        char whole[sizeof out->problem];
        memcpy(whole, out->problem, sizeof whole);
        snprintf(problem, n, "the reference run is not whole: %.500s", whole);
        return -1;
    }
    FILE *f = grade_fopen_fresh(args_path);
    if (f) fputs(c->text.data, f), fclose(f);
    return 0;
}

// The programs a reference of kind k runs. Only programs the grader's own command line names
// ever run, never one the run directory names (meta.json's argv is the student's to write):
//   REF_SINGLE and the replays: the grader's reference programs, labs_dir/ref (solutions.c),
//     which run none of a student's regions, in a student's copy as in the instructor's tree.
//   REF_CKPT_NONE: the build that made the runs (--labs DIR), or for a run directory the
//     grader's own lab programs. This twin is no reference of what is right: recompute.bitwise
//     asks whether recomputing changed a bit of what the same program computes without it
//     (another compiler or flags may round differently), so it runs the student's regions
//     (AdamW, the ring) as the run did. With the grader's AdamW in it, a wrong AdamW would
//     lose recompute.bitwise too, a check of something else (loss.reference takes it). Both
//     make grades, the student's own and the instructor's LABS=<copy>, grade --labs, so the
//     twin is the same program in both, and so is the grade.
static void ref_programs(const GradeRefs *refs, RefKind k, char *out, size_t n) {
    if (k == REF_CKPT_NONE) snprintf(out, n, "%s", refs->run_labs_dir ? refs->run_labs_dir : refs->labs_dir);
    else snprintf(out, n, "%s/ref", refs->labs_dir);
}

const GradeRun *ctx_reference(Ctx *x, RefKind k, char *why, size_t n) {
    if (x->tried[k]) {
        if (!x->ok[k]) snprintf(why, n, "%s", x->ref_problem[k]);
        return x->ok[k] ? &x->ref[k] : NULL;
    }
    x->tried[k] = 1;
    const GradeRun *run = x->run;
    if (k == REF_SINGLE && x->refs->ref_dir) {  // --ref: a finished run given
        snprintf(x->ref_label[k], sizeof x->ref_label[k], "the reference run %s", x->refs->ref_dir);
        if (grade_run_load(&x->ref[k], x->refs->ref_dir) < 0)
            snprintf(x->ref_problem[k], sizeof x->ref_problem[k], "--ref %.100s: %.500s", x->refs->ref_dir,
                     x->ref[k].problem);
        else x->ok[k] = 1;
        if (!x->ok[k]) snprintf(why, n, "%s", x->ref_problem[k]);
        return x->ok[k] ? &x->ref[k] : NULL;
    }

    RefCmd c;
    if (ref_command(run, k, NULL, run->steps, &c) != 0) {
        snprintf(x->ref_label[k], sizeof x->ref_label[k], "%s -n %d (not started)", c.lab, c.world);
        snprintf(x->ref_problem[k], sizeof x->ref_problem[k], "%s", c.refused);
        if (!x->refs->quiet) fprintf(stderr, "shardlab grade: %s\n", c.refused);
        ref_cmd_free(&c);
        snprintf(why, n, "%s", x->ref_problem[k]);
        return NULL;
    }
    char dir[PATH_MAX + 64], ref_labs[PATH_MAX + 8];  // (each folder's length checked by grade_main)
    ref_programs(x->refs, k, ref_labs, sizeof ref_labs);
    if (k == REF_SINGLE && x->refs->cache_dir) {
        // The same reference serves every run of the same configuration (every student's):
        // kept under the cache, named by its command and the reference program's bytes.
        char prog[PATH_MAX + 96];
        snprintf(prog, sizeof prog, "%s/%s", ref_labs, c.lab);
        uint64_t key = fnv1a64(c.text.data, c.text.len, file_hash(prog));
        char failed[PATH_MAX];
        if (runlog_try_make_dirs(x->refs->cache_dir, failed, sizeof failed) != 0) {
            snprintf(x->ref_problem[k], sizeof x->ref_problem[k], "--refs %.200s: cannot create %.200s: %s",
                     x->refs->cache_dir, failed, strerror(errno));
            ref_cmd_free(&c);
            snprintf(why, n, "%s", x->ref_problem[k]);
            return NULL;
        }
        snprintf(dir, sizeof dir, "%s/%s-%016llx", x->refs->cache_dir, c.lab, (unsigned long long)key);
    } else {
        snprintf(dir, sizeof dir, "%s/ref-%s", run->dir, k == REF_SINGLE ? c.lab : "ckpt-none");
    }
    snprintf(x->ref_label[k], sizeof x->ref_label[k], "%s -n %d --accum %s%s (%.300s, its arguments in grade-args.txt)",
             c.lab, c.world, c.accum, k == REF_CKPT_NONE ? " --policy none" : "", dir);
    x->ok[k] = ref_run(x, &c, dir, k == REF_SINGLE && x->refs->cache_dir, ref_labs, &x->ref[k], x->ref_problem[k], sizeof x->ref_problem[k]) == 0;
    ref_cmd_free(&c);
    if (!x->ok[k]) snprintf(why, n, "%s", x->ref_problem[k]);
    return x->ok[k] ? &x->ref[k] : NULL;
}

// ---- replays: the reference restarted from the run's own state --------------------------------

static int by_step(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

// The run's replay points: RUN_DIR/replay/step-<s>, real directories (no links) with a manifest,
// for steps the run went past, in order.
static int find_replays(const GradeRun *run, int64_t *steps, int max) {
    char dir[sizeof run->dir + 16];
    snprintf(dir, sizeof dir, "%s/replay", run->dir);
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        long long s;
        char tail, path[sizeof dir + NAME_MAX + 2];
        if (sscanf(e->d_name, "step-%lld%c", &s, &tail) != 1 || s < 1 || s >= run->last_step) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        steps[n++] = s;
    }
    closedir(d);
    qsort(steps, (size_t)n, sizeof *steps, by_step);
    return n;
}

const GradeReplay *ctx_replays(Ctx *x, int *count) {
    if (!x->replays_tried) {
        x->replays_tried = 1;
        const GradeRun *run = x->run;
        int64_t steps[GRADE_MAX_REPLAYS];
        x->nreplays = x->refs->ref_dir ? 0 : find_replays(run, steps, GRADE_MAX_REPLAYS);
        char ref_labs[PATH_MAX + 8];
        ref_programs(x->refs, REF_SINGLE, ref_labs, sizeof ref_labs);
        for (int i = 0; i < x->nreplays; i++) {
            GradeReplay *r = &x->replays[i];
            r->from = steps[i];
            r->to = steps[i] + GRADE_REPLAY_STEPS < run->last_step ? steps[i] + GRADE_REPLAY_STEPS : run->last_step;
            char resume[sizeof run->dir + 64], dir[sizeof run->dir + 64];
            snprintf(resume, sizeof resume, "%s/replay/step-%08lld", run->dir, (long long)r->from);
            snprintf(dir, sizeof dir, "%s/ref-replay-%08lld", run->dir, (long long)r->from);
            RefCmd c;
            if (ref_command(run, REF_SINGLE, resume, r->to, &c) != 0) snprintf(r->problem, sizeof r->problem, "%s", c.refused);
            else r->ok = ref_run(x, &c, dir, 0, ref_labs, &r->ref, r->problem, sizeof r->problem) == 0;
            ref_cmd_free(&c);
        }
    }
    *count = x->nreplays;
    return x->replays;
}

void ctx_free(Ctx *x) {
    for (int k = 0; k < REF_COUNT; k++) grade_run_free(&x->ref[k]);
    for (int i = 0; i < x->nreplays; i++) grade_run_free(&x->replays[i].ref);
}
