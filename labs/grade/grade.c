// grade.c — the `shardlab grade` command: reference runs, the rubric printed and written as
// grade.json and JUnit XML, and the graded configurations of a student's copy of the labs.
//
//   shardlab grade RUN_DIR [--ref DIR]      one run: its lab's rubric; grade.json and
//                                           grade.xml written into RUN_DIR
//   shardlab grade --labs DIR [--only L,..] every lab's graded configurations run with the
//                  [--out DIR]              programs in DIR (a student's build), each graded;
//                                           a rubric per configuration, a total per lab
// Exit status: 0 every check passed, 1 a check failed, 2 bad arguments.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "args.h"
#include "catalog.h"
#include "check.h"
#include "shard/dataset.h"
#include "launch.h"
#include "runlog.h"
#include "grade.h"
#include "grade_internal.h"

// ---- files the grader writes ------------------------------------------------------------------

// Creates path anew for writing. The run directory is the student's: a grade.json.tmp or a
// ref-single.log already there may be a link to any file of the grader's user (or a hard
// link to one), so what is there is unlinked, never written through, and the new file is
// created exclusively, not following a link. Returns the descriptor, or -1 (errno set).
static int create_fresh(const char *path) {
    if (unlink(path) != 0 && errno != ENOENT) return -1;
    return open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
}

static FILE *fopen_fresh(const char *path) {
    int fd = create_fresh(path);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "w");
    if (fd >= 0 && !f) close(fd);
    return f;
}

// ---- starting a run through the launcher ----------------------------------------------------

// `shardlab run <lab> -n N --ui none args... --run-dir DIR` (launch.h) with the lab programs of labs_dir;
// the launcher's output goes to log_path. Returns its exit status (127: could not start).
static int start_run(const char *labs_dir, const char *lab, int n, char *const *args, const char *dir,
                     const char *log_path) {
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) return 127;
    exe[k] = 0;
    // This very program, even if a rebuild replaced its file; its output to a fresh log.
    LaunchOpts o = {.exe = "/proc/self/exe", .argv0 = exe, .labs_dir = labs_dir, .out_fd = create_fresh(log_path)};
    pid_t pid = launch_run(&o, lab, n, args, dir);
    if (o.out_fd >= 0) close(o.out_fd);
    if (pid < 0) return 127;
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return 127;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}
static void remove_tree(const char *dir) { nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

// The last non-empty line of a file (the launcher's reason when a run failed).
static void last_line(const char *path, char *out, size_t n) {
    StrBuf sb;
    sb_init(&sb);
    out[0] = 0;
    if (sb_read_file(&sb, path, 1 << 20) >= 0 && sb.data) {
        char *end = sb.data + sb.len;
        while (end > sb.data && (end[-1] == '\n' || end[-1] == ' ')) *--end = 0;
        char *start = strrchr(sb.data, '\n');
        snprintf(out, n, "%s", start ? start + 1 : sb.data);
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
static void add_shard(RefCmd *c, const GradeRun *run) {
    ShardArgs sa, dflt;
    shard_args_defaults(&dflt);
    size_t before = (size_t)c->na;
    add_cfg(c, run, "strategy", "--strategy", "sampler", 1);
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
    else if (!strcmp(run->lab, "tp")) accum *= dp;
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
    char log_path[2500], args_path[2500];
    snprintf(log_path, sizeof log_path, "%s.log", dir);
    snprintf(args_path, sizeof args_path, "%s/grade-args.txt", dir);
    StrBuf old;
    sb_init(&old);
    int same = cached && sb_read_file(&old, args_path, 1 << 16) == 0 && old.data && !strcmp(old.data, c->text.data);
    sb_free(&old);
    if (same && grade_run_load(out, dir) == 0) return 0;
    grade_run_free(out);
    remove_tree(dir);
    if (!x->refs->quiet) fprintf(stderr, "shardlab grade: starting the reference: %s\n", c->text.data);
    int rc = start_run(labs_dir, c->lab, c->world, c->args, dir, log_path);
    char last[200];
    last_line(log_path, last, sizeof last);
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
    FILE *f = fopen_fresh(args_path);
    if (f) fputs(c->text.data, f), fclose(f);
    return 0;
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
    char dir[2400];
    // Only programs the grader's own command line names ever run: its own build, or for
    // --policy none the build that made the runs (--labs DIR: "recomputation changes no bit"
    // compares two runs of one build, as other compilers or flags may round differently).
    // Never a program the run directory names (meta.json's argv is the student's to write).
    const char *ref_labs = k == REF_CKPT_NONE && x->refs->run_labs_dir ? x->refs->run_labs_dir : x->refs->labs_dir;
    if (k == REF_SINGLE && x->refs->cache_dir) {
        // The same reference serves every run of the same configuration (every student's):
        // kept under the cache, named by its command and the reference program's bytes.
        char prog[2200];
        snprintf(prog, sizeof prog, "%s/%s", ref_labs, c.lab);
        uint64_t key = fnv1a64(c.text.data, c.text.len, file_hash(prog));
        char failed[2048];
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
    char dir[2200];
    snprintf(dir, sizeof dir, "%s/replay", run->dir);
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        long long s;
        char tail, path[2600];
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
        for (int i = 0; i < x->nreplays; i++) {
            GradeReplay *r = &x->replays[i];
            r->from = steps[i];
            r->to = steps[i] + GRADE_REPLAY_STEPS < run->last_step ? steps[i] + GRADE_REPLAY_STEPS : run->last_step;
            char resume[2400], dir[2400];
            snprintf(resume, sizeof resume, "%s/replay/step-%08lld", run->dir, (long long)r->from);
            snprintf(dir, sizeof dir, "%s/ref-replay-%08lld", run->dir, (long long)r->from);
            RefCmd c;
            if (ref_command(run, REF_SINGLE, resume, r->to, &c) != 0) snprintf(r->problem, sizeof r->problem, "%s", c.refused);
            else r->ok = ref_run(x, &c, dir, 0, x->refs->labs_dir, &r->ref, r->problem, sizeof r->problem) == 0;
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

// ---- output ---------------------------------------------------------------------------------

void grade_print(const Grade *g, FILE *out) {
    fprintf(out, "\nshardlab grade: %s (%s)\n", g->run_dir, g->label);
    for (int i = 0; i < g->n; i++) {
        const GradeCheck *c = &g->checks[i];
        fprintf(out, "  %-4s  %-20s %2d/%-2d  %s\n", c->skipped ? "SKIP" : c->pass ? "PASS" : "FAIL", c->name, c->points,
                c->max, c->what);
        if (c->skipped) {
            fprintf(out, "        %s\n", c->reason);
            continue;
        }
        fprintf(out, "        measured: %s\n        expected: %s\n", c->measured, c->expected);
        if (!c->pass) fprintf(out, "        why: %s\n", c->reason);
    }
    fprintf(out, "  total %d/%d%s", g->points, g->max, g->failed ? "" : ": every check passed\n");
    if (g->failed) fprintf(out, ": %d check%s failed\n", g->failed, g->failed == 1 ? "" : "s");
}

void grade_to_json(const Grade *g, StrBuf *sb) {
    sb_printf(sb, "{\"run_dir\":");
    sb_json_string(sb, g->run_dir);
    sb_printf(sb, ",\"lab\":");
    sb_json_string(sb, g->lab);
    sb_printf(sb, ",\"label\":");
    sb_json_string(sb, g->label);
    sb_printf(sb, ",\"points\":%d,\"max\":%d,\"failed\":%d,\"pass\":%s,\"checks\":[", g->points, g->max, g->failed,
              g->failed ? "false" : "true");
    for (int i = 0; i < g->n; i++) {
        const GradeCheck *c = &g->checks[i];
        sb_printf(sb, "%s{\"name\":", i ? "," : "");
        sb_json_string(sb, c->name);
        sb_printf(sb, ",\"result\":\"%s\",\"points\":%d,\"max\":%d,\"what\":", c->skipped ? "SKIP" : c->pass ? "PASS" : "FAIL",
                  c->points, c->max);
        sb_json_string(sb, c->what);
        sb_printf(sb, ",\"measured\":");
        sb_json_string(sb, c->measured);
        sb_printf(sb, ",\"expected\":");
        sb_json_string(sb, c->expected);
        sb_printf(sb, ",\"reason\":");
        sb_json_string(sb, c->reason);
        sb_printf(sb, "}");
    }
    sb_printf(sb, "]}");
}

void grade_to_junit(const Grade *const *grades, int n, const char *suite, StrBuf *sb) {
    int tests = 0, failures = 0, skipped = 0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < grades[i]->n; k++) {
            tests++;
            failures += !grades[i]->checks[k].pass;
            skipped += grades[i]->checks[k].skipped;
        }
    sb_printf(sb, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"");
    sb_markup_text(sb, suite);
    sb_printf(sb, "\" tests=\"%d\" failures=\"%d\" skipped=\"%d\">\n", tests, failures, skipped);
    for (int i = 0; i < n; i++) {
        const Grade *g = grades[i];
        sb_printf(sb, "  <testsuite name=\"");
        sb_markup_text(sb, g->label);
        sb_printf(sb, "\" tests=\"%d\" failures=\"%d\">\n", g->n, g->failed);
        for (int k = 0; k < g->n; k++) {
            const GradeCheck *c = &g->checks[k];
            sb_printf(sb, "    <testcase classname=\"shardlab.");
            sb_markup_text(sb, g->label);
            sb_printf(sb, "\" name=\"");
            sb_markup_text(sb, c->name);
            sb_printf(sb, "\">");
            if (c->skipped) {
                sb_printf(sb, "<skipped message=\"");
                sb_markup_text(sb, c->reason);
                sb_printf(sb, "\"/>");
            } else if (!c->pass) {
                sb_printf(sb, "<failure message=\"");
                sb_markup_text(sb, c->reason);
                sb_printf(sb, "\">measured: ");
                sb_markup_text(sb, c->measured);
                sb_printf(sb, "\nexpected: ");
                sb_markup_text(sb, c->expected);
                sb_printf(sb, "</failure>");
            }
            sb_printf(sb, "</testcase>\n");
        }
        sb_printf(sb, "  </testsuite>\n");
    }
    sb_printf(sb, "</testsuites>\n");
}

// Writes text to dir/name through a temporary file; returns 0 or -1 (errno set).
static int write_file(const char *dir, const char *name, const StrBuf *sb) {
    char path[2400], tmp_path[2500];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp_path, sizeof tmp_path, "%s.tmp", path);
    FILE *f = fopen_fresh(tmp_path);
    if (!f) return -1;
    int ok = fwrite(sb->data, 1, sb->len, f) == sb->len;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp_path, path) != 0) return unlink(tmp_path), -1;
    return 0;
}

// grade.json (one grade, or {"grades":[...]} with totals) and grade.xml into dir.
static int write_outputs(const char *dir, const Grade *const *grades, int n, const char *labs_json) {
    StrBuf js, xml;
    sb_init(&js), sb_init(&xml);
    if (n == 1 && !labs_json) {
        grade_to_json(grades[0], &js);
    } else {
        int points = 0, max = 0, failed = 0;
        for (int i = 0; i < n; i++) points += grades[i]->points, max += grades[i]->max, failed += grades[i]->failed;
        sb_printf(&js, "{\"points\":%d,\"max\":%d,\"failed\":%d,\"pass\":%s,\"labs\":%s,\"grades\":[", points, max, failed,
                  failed ? "false" : "true", labs_json ? labs_json : "[]");
        for (int i = 0; i < n; i++) {
            if (i) sb_printf(&js, ",");
            grade_to_json(grades[i], &js);
        }
        sb_printf(&js, "]}");
    }
    sb_printf(&js, "\n");
    grade_to_junit(grades, n, "shardlab grade", &xml);
    int rc = 0;
    if (write_file(dir, "grade.json", &js) < 0 || write_file(dir, "grade.xml", &xml) < 0) {
        fprintf(stderr, "shardlab grade: cannot write grade.json and grade.xml into %s: %s\n", dir, strerror(errno));
        rc = -1;
    }
    sb_free(&js), sb_free(&xml);
    return rc;
}

int grade_write_run(const Grade *g) {
    const Grade *list[1] = {g};
    return write_outputs(g->run_dir, list, 1, NULL);
}

// ---- the graded configurations of `make grade LABS=dir` (catalog.c: catalog_graded) -----------

static int in_list(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return 1;
        p = comma ? comma + 1 : NULL;
    }
    return 0;
}

static int grade_labs(const char *labs, const char *only, const char *out_dir, const char *steps, const GradeRefs *refs) {
    // Every name in --only must be a lab or a configuration.
    for (const char *p = only; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        int known = 0;
        for (int i = 0; i < catalog_ngraded; i++)
            known |= (strlen(catalog_graded[i].lab) == len && !strncmp(catalog_graded[i].lab, p, len)) ||
                     (strlen(catalog_graded[i].label) == len && !strncmp(catalog_graded[i].label, p, len));
        if (!known) usage_error("shardlab grade", "--only: '%.*s' is not a lab or a graded configuration", (int)len, p);
        p = comma ? comma + 1 : NULL;
    }
    char bad_dir[2048];
    if (runlog_try_make_dirs(out_dir, bad_dir, sizeof bad_dir) != 0) {
        fprintf(stderr, "shardlab grade: --out %s: cannot create %s: %s\n", out_dir, bad_dir, strerror(errno));
        return 2;
    }
    Grade *grades = calloc_check((size_t)catalog_ngraded, sizeof *grades);
    const Grade **list = calloc_check((size_t)catalog_ngraded, sizeof *list);
    int n = 0;
    for (int i = 0; i < catalog_ngraded; i++) {
        const CatGraded *gc = &catalog_graded[i];
        if (only && !in_list(only, gc->lab) && !in_list(only, gc->label)) continue;
        char dir[2400], log_path[2500], prog[2400];
        snprintf(dir, sizeof dir, "%s/%s", out_dir, gc->label);
        snprintf(log_path, sizeof log_path, "%s/%s.log", out_dir, gc->label);
        snprintf(prog, sizeof prog, "%s/%s", labs, gc->lab);
        remove_tree(dir);
        // The configuration's arguments, with --steps N (the course's length) in place of its own.
        const char *args[16] = {0};
        char args_text[256] = "";
        for (int a = 0; gc->args[a]; a++) {
            args[a] = steps && a > 0 && !strcmp(gc->args[a - 1], "--steps") ? steps : gc->args[a];
            snprintf(args_text + strlen(args_text), sizeof args_text - strlen(args_text), " %s", args[a]);
        }
        fprintf(stderr, "shardlab grade: [%d/%d] %s: %s -n %d%s\n", i + 1, catalog_ngraded, gc->label, gc->lab, gc->n, args_text);
        int rc = access(prog, X_OK) == 0 ? start_run(labs, gc->lab, gc->n, (char *const *)args, dir, log_path) : -1;
        grade_rubric(&grades[n], dir, gc->lab, gc->config, refs);
        snprintf(grades[n].label, sizeof grades[n].label, "%s", gc->label);
        GradeCheck *first = &grades[n].checks[0];
        if (rc == -1) snprintf(first->reason, sizeof first->reason, "%.250s: no such program: the lab did not build",
                               prog);
        else if (rc != 0 && first->pass == 0) {
            char last[200];
            last_line(log_path, last, sizeof last);
            size_t used = strlen(first->reason);
            snprintf(first->reason + used, sizeof first->reason - used, " (exit %d: %s)", rc, last);
        }
        grade_print(&grades[n], stdout);
        list[n] = &grades[n];
        n++;
    }

    // The totals per lab.
    StrBuf labs_json;
    sb_init(&labs_json);
    sb_printf(&labs_json, "[");
    printf("\nshardlab grade: %s\n  %-12s %8s  %s\n", labs, "lab", "points", "configurations");
    int points = 0, max = 0, failed = 0, nl = 0;
    for (int i = 0; i < catalog_ngraded; i++) {
        int seen = 0;
        for (int k = 0; k < i; k++) seen |= !strcmp(catalog_graded[k].lab, catalog_graded[i].lab);
        if (seen) continue;
        int lp = 0, lm = 0, lf = 0, configs = 0;
        char names[200] = "";
        for (int g = 0; g < n; g++)
            if (!strcmp(grades[g].lab, catalog_graded[i].lab)) {
                lp += grades[g].points, lm += grades[g].max, lf += grades[g].failed, configs++;
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", configs > 1 ? ", " : "", list[g]->label);
            }
        if (!configs) continue;
        printf("  %-12s %3d/%-4d  %s%s\n", catalog_graded[i].lab, lp, lm, names, lf ? "  (FAIL)" : "");
        sb_printf(&labs_json, "%s{\"lab\":\"%s\",\"points\":%d,\"max\":%d,\"failed\":%d}", nl++ ? "," : "", catalog_graded[i].lab,
                  lp, lm, lf);
        points += lp, max += lm, failed += lf;
    }
    sb_printf(&labs_json, "]");
    printf("  %-12s %3d/%-4d  %s\n", "total", points, max, failed ? "" : "every check passed");
    if (failed) printf("  %d check%s failed\n", failed, failed == 1 ? "" : "s");
    write_outputs(out_dir, list, n, labs_json.data);
    printf("grade.json and grade.xml written to %s\n", out_dir);
    sb_free(&labs_json);
    free(grades), free(list);
    return failed ? 1 : 0;
}

// ---- the command -------------------------------------------------------------------------------

static const char USAGE[] =
    "usage: shardlab grade RUN_DIR [--ref DIR] [--refs DIR] [--quiet]\n"
    "       shardlab grade --labs DIR [--only LAB,...] [--steps N] [--out DIR] [--refs DIR]\n"
    "\n"
    "Checks a run against its lab's invariants and prints the rubric: each check, PASS or\n"
    "FAIL, measured against expected, and its points. Writes grade.json and grade.xml (JUnit)\n"
    "next to the run. The references are independent of the run: the single-rank run on the\n"
    "same global batch, which the grader starts with its own lab programs (build/labs) into\n"
    "RUN_DIR/ref-<lab>, or the finished run given with --ref; and the paper's formulas.\n"
    "\n"
    "  --ref DIR     a finished single-rank run on the same global batch to compare with\n"
    "  --refs DIR    keep the single-rank references here and reuse them for every run of\n"
    "                the same configuration (every student's), instead of in each run\n"
    "  --quiet       no progress lines on stderr\n"
    "  --labs DIR    run every lab's graded configurations with the lab programs in DIR\n"
    "                (a student's build: make grade LABS=<student copy> builds and runs this)\n"
    "  --only LIST   only these labs or configurations (comma-separated: ddp,zero-3,...)\n"
    "  --steps N     run the training labs' configurations for N steps (default: a few)\n"
    "  --out DIR     where the graded runs, grade.json and grade.xml go (default\n"
    "                runs/grade-<time>)\n"
    "\n"
    "Rubrics: run.complete on every lab, then\n"
    "  single       loss.reference, mem.formula\n"
    "  collectives  collectives.correct\n"
    "  ddp zero fsdp  replicas.equal, loss.reference, grads.reference, mem.formula, comm.bytes\n"
    "  tp           loss.reference, grads.reference, comm.bytes\n"
    "  pp           loss.reference, grads.reference, mem.formula, schedule.in_flight, schedule.bubble\n"
    "  ckpt         replicas.equal, loss.reference, recompute.bitwise, recompute.count, mem.formula\n"
    "  shard        replicas.equal, loss.reference, data.coverage\n"
    "Exit status: 0 every check passed, 1 a check failed (or the run is not gradable), 2 bad\n"
    "arguments.\n";

int grade_main(int argc, char **argv, const char *prog_dir) {
    const char *dir = NULL, *labs = NULL, *only = NULL, *out = NULL, *steps = NULL;
    GradeRefs refs = {0};
    snprintf(refs.labs_dir, sizeof refs.labs_dir, "%s/labs", prog_dir);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return fputs(USAGE, stdout), 0;
        else if (!strcmp(a, "--quiet")) refs.quiet = 1;
        else if (!strcmp(a, "--ref") || !strcmp(a, "--refs") || !strcmp(a, "--labs") || !strcmp(a, "--only") ||
                 !strcmp(a, "--out") || !strcmp(a, "--steps")) {
            if (!has_value || !argv[i + 1][0]) usage_error("shardlab grade", "%s needs a value", a);
            const char **slot = !strcmp(a, "--ref")    ? &refs.ref_dir
                              : !strcmp(a, "--refs")   ? &refs.cache_dir
                              : !strcmp(a, "--labs")   ? &labs
                              : !strcmp(a, "--only")   ? &only
                              : !strcmp(a, "--steps")  ? &steps
                                                       : &out;
            *slot = argv[++i];
        } else if (a[0] == '-') usage_error("shardlab grade", "unknown option '%s'", a);
        else if (dir) usage_error("shardlab grade", "one run directory at a time ('%s' and '%s')", dir, a);
        else dir = a;
    }
    if (labs && dir) usage_error("shardlab grade", "give a run directory or --labs, not both");
    if (!labs && (only || out || steps)) usage_error("shardlab grade", "--only, --steps and --out go with --labs");
    if (steps) {
        char *end;
        long v = strtol(steps, &end, 10);
        if (*end || end == steps || v < 1 || v > 10000000)
            usage_error("shardlab grade", "--steps must be a whole number from 1 to 10000000 (got '%s')", steps);
    }
    if (refs.ref_dir && refs.cache_dir) usage_error("shardlab grade", "--ref gives the reference; --refs keeps references: one or the other");
    if (!labs && !dir) usage_error("shardlab grade", "expected a run directory (or --labs DIR)");
    if (labs) {
        if (refs.ref_dir) usage_error("shardlab grade", "--ref goes with one run directory, not --labs");
        struct stat st;
        if (stat(labs, &st) != 0 || !S_ISDIR(st.st_mode))
            usage_error("shardlab grade", "--labs %s: not a directory of lab programs", labs);
        char out_buf[256];
        if (!out) {
            time_t now = time(NULL);
            struct tm tm;
            localtime_r(&now, &tm);
            const char *runs = getenv("SHARDLAB_RUNS");
            runs = runs && *runs ? runs : "runs";
            mkdir(runs, 0755);
            snprintf(out_buf, sizeof out_buf, "%s/grade-%04d%02d%02d-%02d%02d%02d", runs, tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
            out = out_buf;
        }
        refs.run_labs_dir = labs;
        return grade_labs(labs, only, out, steps, &refs);
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "shardlab grade: %s: %s\n", dir, errno == ENOENT ? "no such directory" : "not a directory");
        return 2;
    }
    static Grade g;
    grade_rubric(&g, dir, NULL, NULL, &refs);
    grade_print(&g, stdout);
    if (grade_write_run(&g) == 0) printf("grade.json and grade.xml written to %s\n", dir);
    return g.failed ? 1 : 0;
}
