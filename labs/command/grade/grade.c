// grade.c — the `shardlab grade` command: the rubric printed and written as grade.json and
// JUnit XML, and the graded configurations of a student's copy of the labs (the reference
// runs the checks compare with: refs.c).
//
//   shardlab grade RUN_DIR [--ref DIR]      one run: its lab's rubric; grade.json and
//                                           grade.xml written into RUN_DIR
//   shardlab grade --labs DIR [--only L,..] every lab's graded configurations run with the
//                  [--out DIR]              programs in DIR (a student's build), each graded;
//                  [--deadline S]           a rubric per configuration, a total per lab; each
//                                           run in the sandbox (sandbox.h), ended after S s
// Exit status: 0 every check passed, 1 a check failed (or no report could be written), 2 bad arguments.
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/harness/args.h"
#include "common/harness/catalog.h"
#include "common/harness/check.h"
#include "common/runfiles/runlog.h"
#include "grade.h"
#include "grade_internal.h"

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

// lead as it is, then s as a JSON string, or as text escaped for XML.
static void put_json(StrBuf *sb, const char *lead, const char *s) {
    sb_printf(sb, "%s", lead);
    sb_json_string(sb, s);
}
static void put_markup(StrBuf *sb, const char *lead, const char *s) {
    sb_printf(sb, "%s", lead);
    sb_markup_text(sb, s);
}

void grade_to_json(const Grade *g, StrBuf *sb) {
    put_json(sb, "{\"run_dir\":", g->run_dir);
    put_json(sb, ",\"lab\":", g->lab);
    put_json(sb, ",\"label\":", g->label);
    sb_printf(sb, ",\"points\":%d,\"max\":%d,\"failed\":%d,\"pass\":%s,\"checks\":[", g->points, g->max, g->failed,
              g->failed ? "false" : "true");
    for (int i = 0; i < g->n; i++) {
        const GradeCheck *c = &g->checks[i];
        put_json(sb, i ? ",{\"name\":" : "{\"name\":", c->name);
        sb_printf(sb, ",\"result\":\"%s\",\"points\":%d,\"max\":%d", c->skipped ? "SKIP" : c->pass ? "PASS" : "FAIL",
                  c->points, c->max);
        put_json(sb, ",\"what\":", c->what);
        put_json(sb, ",\"measured\":", c->measured);
        put_json(sb, ",\"expected\":", c->expected);
        put_json(sb, ",\"reason\":", c->reason);
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
    put_markup(sb, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"", suite);
    sb_printf(sb, "\" tests=\"%d\" failures=\"%d\" skipped=\"%d\">\n", tests, failures, skipped);
    for (int i = 0; i < n; i++) {
        const Grade *g = grades[i];
        put_markup(sb, "  <testsuite name=\"", g->label);
        sb_printf(sb, "\" tests=\"%d\" failures=\"%d\">\n", g->n, g->failed);
        for (int k = 0; k < g->n; k++) {
            const GradeCheck *c = &g->checks[k];
            put_markup(sb, "    <testcase classname=\"shardlab.", g->label);
            put_markup(sb, "\" name=\"", c->name);
            sb_printf(sb, "\">");
            if (c->skipped) {
                put_markup(sb, "<skipped message=\"", c->reason);
                sb_printf(sb, "\"/>");
            } else if (!c->pass) {
                put_markup(sb, "<failure message=\"", c->reason);
                put_markup(sb, "\">measured: ", c->measured);
                put_markup(sb, "\nexpected: ", c->expected);
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
    StrBuf path, tmp_path;
    sb_init(&path), sb_init(&tmp_path);
    sb_printf(&path, "%s/%s", dir, name);
    sb_printf(&tmp_path, "%s.tmp", path.data);
    FILE *f = grade_fopen_fresh(tmp_path.data);
    int ok = f != NULL;
    if (f) {
        ok = fwrite(sb->data, 1, sb->len, f) == sb->len;
        ok &= fflush(f) == 0;  // (a full disk says so here, or at fclose)
        ok &= fclose(f) == 0;
        ok = ok && rename(tmp_path.data, path.data) == 0;
        int err = errno;
        if (!ok) unlink(tmp_path.data);
        errno = err;
    }
    int err = errno;
    sb_free(&path), sb_free(&tmp_path);
    errno = err;
    return ok ? 0 : -1;
}

// The report in dir (grade.json, grade.xml) removed: before a grade, so that a grade that
// does not finish leaves none; after a failed write, so that an earlier one (perhaps not even
// the grader's) is never read as this grade. 0, or -1 with errno set.
static int remove_report(const char *dir) {
    static const char *const names[] = {"grade.json", "grade.xml"};
    int rc = 0;
    for (int i = 0; i < 2; i++) {
        StrBuf path;
        sb_init(&path);
        sb_printf(&path, "%s/%s", dir, names[i]);
        if (unlink(path.data) != 0 && errno != ENOENT) rc = -1;
        int err = errno;
        sb_free(&path);
        errno = err;
    }
    return rc;
}

// grade.json (one grade, or {"grades":[...]} with totals) and grade.xml into dir. Returns 0,
// or -1 with the reason on stderr, and no report left in dir.
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
        int err = errno;
        // Both or neither: a grade.json without its grade.xml (or one from before) is no report.
        if (remove_report(dir) != 0)
            fprintf(stderr, "shardlab grade: cannot write grade.json and grade.xml into %s: %s; and the report there "
                            "could not be removed (%s): do not read it\n", dir, strerror(err), strerror(errno));
        else
            fprintf(stderr, "shardlab grade: cannot write grade.json and grade.xml into %s: %s; no report is left there\n",
                    dir, strerror(err));
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
    remove_report(out_dir);  // (an earlier grade's: this one writes its own, or none)
    Grade *grades = calloc_check((size_t)catalog_ngraded, sizeof *grades);
    const Grade **list = calloc_check((size_t)catalog_ngraded, sizeof *list);
    int n = 0;
    for (int i = 0; i < catalog_ngraded; i++) {
        const CatGraded *gc = &catalog_graded[i];
        if (only && !in_list(only, gc->lab) && !in_list(only, gc->label)) continue;
        char dir[PATH_MAX], log_path[PATH_MAX], prog[PATH_MAX];  // (main checked that --out and --labs fit)
        snprintf(dir, sizeof dir, "%s/%s", out_dir, gc->label);
        snprintf(log_path, sizeof log_path, "%s/%s.log", out_dir, gc->label);
        snprintf(prog, sizeof prog, "%s/%s", labs, gc->lab);
        file_remove_tree(dir);
        // The configuration's arguments, with --steps N (the course's length) in place of its own.
        const char *args[16] = {0};
        char args_text[256] = "";
        for (int a = 0; gc->args[a]; a++) {
            args[a] = steps && a > 0 && !strcmp(gc->args[a - 1], "--steps") ? steps : gc->args[a];
            snprintf(args_text + strlen(args_text), sizeof args_text - strlen(args_text), " %s", args[a]);
        }
        fprintf(stderr, "shardlab grade: [%d/%d] %s: %s -n %d%s\n", i + 1, catalog_ngraded, gc->label, gc->lab, gc->n, args_text);
        // A student's programs: in the sandbox, ended at the deadline (refs.c).
        int timed_out = 0;
        int rc = access(prog, X_OK) == 0 ? grade_start_run(labs, gc->lab, gc->n, (char *const *)args, dir, log_path,
                                                           refs->deadline_s, &timed_out)
                                         : -1;
        grade_rubric(&grades[n], dir, gc->lab, gc->config, refs);
        snprintf(grades[n].label, sizeof grades[n].label, "%s", gc->label);
        GradeCheck *first = &grades[n].checks[0];
        if (rc == -1) snprintf(first->reason, sizeof first->reason, "%.250s: no such program: the lab did not build",
                               prog);
        else if (timed_out) {  // a run stopped at its deadline is not complete, whatever its logs say
            char was[sizeof first->reason];
            memcpy(was, first->reason, sizeof was);
            snprintf(first->reason, sizeof first->reason, "ran out of time: stopped after %d s, the deadline of each "
                     "run (make grade DEADLINE=<seconds> gives more)%s%.400s", refs->deadline_s, was[0] ? "; " : "", was);
            if (first->pass) {
                first->pass = 0, grades[n].failed++, grades[n].points -= first->points, first->points = 0;
                snprintf(first->measured, sizeof first->measured, "stopped at the deadline");
            }
        } else if (rc != 0 && first->pass == 0) {
            char last[200];
            grade_last_line(log_path, last, sizeof last);
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
    int written = write_outputs(out_dir, list, n, labs_json.data) == 0;
    if (written) printf("grade.json and grade.xml written to %s\n", out_dir);
    sb_free(&labs_json);
    free(grades), free(list);
    return failed || !written ? 1 : 0;
}

// ---- the command -------------------------------------------------------------------------------

// How long a run of a student's programs may take by default: the graded configurations take
// seconds at the course's length, minutes at --steps 1000.
#define GRADE_DEADLINE_S 600

static const char USAGE[] =
    "usage: shardlab grade RUN_DIR [--ref DIR] [--refs DIR] [--quiet]\n"
    "       shardlab grade --labs DIR [--only LAB,...] [--steps N] [--out DIR] [--refs DIR] [--deadline S]\n"
    "\n"
    "Checks a run against its lab's invariants and prints the rubric: each check, PASS or\n"
    "FAIL, measured against expected, and its points. Writes grade.json and grade.xml (JUnit)\n"
    "next to the run. The references are independent of the run: the single-rank run on the\n"
    "same global batch, which the grader starts into RUN_DIR/ref-<lab> with its reference\n"
    "programs (build/labs/ref: the labs with the grader's own code in each student region\n"
    "they reach), or the finished run given with --ref; and the paper's formulas.\n"
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
    "  --deadline S  end each run of the programs in DIR after S seconds (default 600): they\n"
    "                are a student's, so each runs in a sandbox, with no network and none of\n"
    "                your files (labs/command/grade/sandbox.h; SHARDLAB_SANDBOX=off for debugging)\n"
    "\n"
    "Rubrics: run.complete on every lab, then\n"
    "  single       loss.reference, mem.formula\n"
    "  collectives  collectives.correct\n"
    "  ddp zero fsdp  replicas.equal, loss.reference, grads.reference, mem.formula, comm.bytes\n"
    "  tp           loss.reference, grads.reference, comm.bytes\n"
    "  pp           loss.reference, grads.reference, mem.formula, schedule.in_flight, schedule.bubble\n"
    "  ckpt         replicas.equal, loss.reference, recompute.bitwise, recompute.count, mem.formula\n"
    "  shard        replicas.equal, loss.reference, data.coverage\n"
    "  cp           replicas.equal, loss.reference, grads.reference, mem.formula, comm.bytes,\n"
    "               layout.positions\n"
    "  ep           replicas.equal, loss.reference, grads.reference, mem.formula, comm.bytes,\n"
    "               experts.routing\n"
    "Exit status: 0 every check passed, 1 a check failed (or the run is not gradable, or another\n"
    "job holds it, or the report could not be written: then none is left), 2 bad arguments.\n";

int grade_main(int argc, char **argv, const char *prog_dir) {
    const char *dir = NULL, *labs = NULL, *only = NULL, *out = NULL, *steps = NULL, *deadline = NULL;
    GradeRefs refs = {.deadline_s = GRADE_DEADLINE_S};
    snprintf(refs.labs_dir, sizeof refs.labs_dir, "%s/labs", prog_dir);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        int has_value = i + 1 < argc;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return fputs(USAGE, stdout), 0;
        else if (!strcmp(a, "--quiet")) refs.quiet = 1;
        else if (!strcmp(a, "--ref") || !strcmp(a, "--refs") || !strcmp(a, "--labs") || !strcmp(a, "--only") ||
                 !strcmp(a, "--out") || !strcmp(a, "--steps") || !strcmp(a, "--deadline")) {
            if (!has_value || !argv[i + 1][0]) usage_error("shardlab grade", "%s needs a value", a);
            const char **slot = !strcmp(a, "--ref")      ? &refs.ref_dir
                              : !strcmp(a, "--refs")     ? &refs.cache_dir
                              : !strcmp(a, "--labs")     ? &labs
                              : !strcmp(a, "--only")     ? &only
                              : !strcmp(a, "--steps")    ? &steps
                              : !strcmp(a, "--deadline") ? &deadline
                                                         : &out;
            *slot = argv[++i];
        } else if (a[0] == '-') usage_error("shardlab grade", "unknown option '%s'", a);
        else if (dir) usage_error("shardlab grade", "one run directory at a time ('%s' and '%s')", dir, a);
        else dir = a;
    }
    if (labs && dir) usage_error("shardlab grade", "give a run directory or --labs, not both");
    if (!labs && (only || out || steps || deadline))
        usage_error("shardlab grade", "--only, --steps, --out and --deadline go with --labs");
    if (deadline) {
        char *end;
        long v = strtol(deadline, &end, 10);
        if (*end || end == deadline || v < 1 || v > 86400)
            usage_error("shardlab grade", "--deadline must be a whole number of seconds from 1 to 86400 (got '%s')", deadline);
        refs.deadline_s = (int)v;
    }
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
        // The configurations' runs go in --out, each with its references and files inside:
        // room for them, so that no path is cut; the programs' paths come from --labs.
        StrBuf why;
        sb_init(&why);
        if (runlog_check_path("--out", out, RUNLOG_ROOM + 64, &why) != 0 || runlog_check_path("--labs", labs, 64, &why) != 0 ||
            (refs.cache_dir && runlog_check_path("--refs", refs.cache_dir, RUNLOG_ROOM + 64, &why) != 0)) {
            fprintf(stderr, "shardlab grade: %s\n", why.data);
            sb_free(&why);
            return 2;
        }
        sb_free(&why);
        refs.run_labs_dir = labs;
        return grade_labs(labs, only, out, steps, &refs);
    }
    // Its references and report go in it: room for theirs, and the path whole in every buffer.
    StrBuf why;
    sb_init(&why);
    if (runlog_check_path("the run directory", dir, RUNLOG_ROOM + 32, &why) != 0 ||
        (refs.ref_dir && runlog_check_path("--ref", refs.ref_dir, RUNLOG_ROOM, &why) != 0) ||
        (refs.cache_dir && runlog_check_path("--refs", refs.cache_dir, RUNLOG_ROOM + 64, &why) != 0)) {
        fprintf(stderr, "shardlab grade: %s\n", why.data);
        return 2;
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "shardlab grade: %s: %s\n", dir, errno == ENOENT ? "no such directory" : "not a directory");
        return 2;
    }
    // Held while graded: the grader writes into it (its references, its report), and a run
    // still going (its job holds it) is not graded halfway. A folder the grader may not write
    // is graded all the same; then its report cannot be written, and the exit status says so.
    JobLock lock;
    int busy;
    if (joblock_take(&lock, "the run directory", dir, 0, argv, &why, &busy) != 0 && busy) {
        fprintf(stderr, "shardlab grade: %s: grade it once that job has ended\n", why.data);
        return 1;
    }
    sb_free(&why);
    remove_report(dir);  // (an earlier grade's: this one writes its own, or none)
    static Grade g;
    grade_rubric(&g, dir, NULL, NULL, &refs);
    grade_print(&g, stdout);
    int written = grade_write_run(&g) == 0;
    if (written) printf("grade.json and grade.xml written to %s\n", dir);
    joblock_release(&lock);
    return g.failed || !written ? 1 : 0;
}
