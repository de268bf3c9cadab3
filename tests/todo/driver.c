// driver.c — `make check [TODO=<name>]`: the student's regions checked one by one, with a line
// each saying passed, failed or not written yet, and what to do next.
//
// Usage: check --bin DIR [--labs DIR] [--deadline S] [--json] [NAME ...]
//   DIR holds the check programs (check_<program>) built against the student's labs and the
//   build's log (build.log). Each runs in the sandbox (labs/command/grade/sandbox.h): DIR read-only, no
//   network, nothing else of yours; it is ended, with all it started, after S seconds (default
//   60: a check stops itself after 30, tests/todo/todo.c, but not if it hangs before main).
//   NAME is a region (tests/todo/regions.c), or a lab's program
//   (zero: its three regions), or several, comma- or space-separated; none: every region in
//   the order of the lessons. One region alone: its whole message; several: each failure's
//   first lines, then the totals and the next command to run. Exit 0 when every region asked
//   for passed, 1 otherwise, 2 for a usage error.
//   --json: the same as one JSON object, every message whole (what the web's lab pages draw,
//   web/checks.c):
//     {"labs": "labs", "regions": [{"name", "file", "what", "status": "passed" | "failed" |
//      "not written yet" | "does not build", "message", "reread", "points",
//      "configurations": ["ddp", ...]}, ...], "passed": N, "failed": N (those that do not
//      build included), "not_written": N, "does_not_build": N,
//      "next": the next command, as the text says it, "next_region": its region or null}
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "command/grade/sandbox.h"
#include "common/runfiles/json.h"
#include "regions.h"

enum { PASSED, FAILED, USAGE, NOT_WRITTEN, NO_BUILD };

static void usage(const char *fmt, const char *arg) {
    fprintf(stderr, "check: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (the regions:");
    for (int i = 0; i < TODO_NREGIONS; i++) fprintf(stderr, " %s", TODO_REGIONS[i].name);
    fprintf(stderr, ")\n");
    exit(USAGE);
}

#define CHECK_DEADLINE_S 60

// Runs bin/check_<program> <name> in the sandbox, ended after deadline_s; its message into msg.
// Returns PASSED, FAILED, NOT_WRITTEN or NO_BUILD (no program: the build failed).
static int run_check(const char *bin, const TodoRegion *r, int deadline_s, char *msg, size_t n) {
    char prog[1200];
    snprintf(prog, sizeof prog, "%s/check_%s", bin, r->program);
    msg[0] = 0;
    if (access(prog, X_OK) != 0) return NO_BUILD;
    int fds[2];
    if (pipe(fds) != 0) return snprintf(msg, n, "could not start %s", prog), FAILED;
    Sandbox box;
    sandbox_init(&box, "make check", deadline_s);
    sandbox_read(&box, bin);
    box.out_fd = fds[1];
    char *argv[] = {prog, (char *)r->name, NULL};
    pid_t pid = sandbox_start(&box, argv);
    close(fds[1]);
    size_t used = 0;
    ssize_t k;
    while ((k = read(fds[0], msg + used, n - 1 - used > 0 ? n - 1 - used : 0)) > 0) used += (size_t)k;
    msg[used] = 0;
    char sink[512];
    while (read(fds[0], sink, sizeof sink) > 0) {}
    close(fds[0]);
    int timed_out;
    int rc = sandbox_wait(pid, &timed_out);
    while (used > 0 && msg[used - 1] == '\n') msg[--used] = 0;
    if (timed_out) {
        snprintf(msg + used, n - used, "%sran out of time: stopped after %d s, the deadline of a check (make check "
                 "DEADLINE=<seconds> gives more); a check stops itself after 30 s, so this one hung where it could not "
                 "(before main, say)", used ? "\n" : "", deadline_s);
        return FAILED;
    }
    if (rc == PASSED || rc == NOT_WRITTEN) return rc;
    if (rc == 127) snprintf(msg, n, "could not run %s", prog);
    return FAILED;
}

// The first compiler errors in bin/build.log, or what to look at.
static void build_errors(const char *bin, char *msg, size_t n) {
    char path[1200], line[1024];
    snprintf(path, sizeof path, "%s/build.log", bin);
    FILE *f = fopen(path, "r");
    size_t used = 0;
    int shown = 0;
    msg[0] = 0;
    while (f && shown < 3 && fgets(line, sizeof line, f))
        if (strstr(line, "error:")) {
            used += (size_t)snprintf(msg + used, n - used, "%s", line);
            if (used >= n) used = n - 1;
            shown++;
        }
    if (f) fclose(f);
    while (used > 0 && msg[used - 1] == '\n') msg[--used] = 0;
    if (!shown) snprintf(msg, n, "its check program did not build (see %s)", path);
}

// Prints msg's lines indented, at most max of them (0: all).
static void indented(const char *msg, int max) {
    int lines = 0;
    for (const char *p = msg; *p;) {
        size_t len = strcspn(p, "\n");
        if (max && lines == max) {
            printf("      ...\n");
            break;
        }
        printf("      %.*s\n", (int)len, p);
        lines++;
        p += len + (p[len] == '\n');
    }
}

// ---- --json ---------------------------------------------------------------------------------
// A message holds what a check or the compiler said: quotes, backslashes, newlines, and bytes
// that need not be UTF-8. Control characters become \u00XX; a byte that does not start a
// whole, valid UTF-8 sequence is read as Latin-1 (\u00XX), so the string is always valid JSON.

// s as a JSON string on stdout (json.h: any bytes, a compiler's message too, make valid JSON).
static void json_string(const char *s) {
    StrBuf b;
    sb_init(&b);
    sb_json_string(&b, s);
    fwrite(b.data, 1, b.len, stdout);
    sb_free(&b);
}

// The graded configurations that run r, as a JSON array: ["ddp","ddp-accum"]; their number.
static int json_configs(const TodoRegion *r, int print) {
    int n = 0;
    if (print) putchar('[');
    for (int i = 0; i < TODO_NCONFIGS; i++) {
        if (!todo_region_runs_in(r, TODO_CONFIGS[i].label)) continue;
        if (print) printf("%s\"%s\"", n ? "," : "", TODO_CONFIGS[i].label);  // (labels: letters, digits, '-')
        n++;
    }
    if (print) putchar(']');
    return n;
}

int main(int argc, char **argv) {
    const char *bin = NULL, *labs = "labs";
    int picked[64] = {0}, npicked = 0, json = 0, deadline_s = CHECK_DEADLINE_S;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: make check [TODO=<name>[,<name>...]] [LABS=<your copy>] [DEADLINE=<seconds>]\n"
                   "  each region of the starter (make starter) checked alone, in seconds: passed, failed (with\n"
                   "  which rank, chunk, round or micro-batch, expected against got) or not written yet.\n"
                   "  TODO=<lab> checks that lab's regions (ring, zero, fsdp, ...); no TODO: all, in the lessons' order.\n"
                   "  each runs in the sandbox (no network, none of your files) and is stopped after DEADLINE\n"
                   "  seconds (default %d)\n"
                   "  (this program: check --bin DIR [--labs DIR] [--deadline S] [--json] [NAME ...]; --json: one JSON object)\n"
                   "  the regions:\n", CHECK_DEADLINE_S);
            for (int k = 0; k < TODO_NREGIONS; k++)
                printf("    %-20s labs/%s\n", TODO_REGIONS[k].name, TODO_REGIONS[k].file);
            return PASSED;
        }
        if (!strcmp(argv[i], "--bin") && i + 1 < argc) {
            bin = argv[++i];
            continue;
        }
        if (!strcmp(argv[i], "--labs") && i + 1 < argc) {
            labs = argv[++i];
            continue;
        }
        if (!strcmp(argv[i], "--json")) {
            json = 1;
            continue;
        }
        if (!strcmp(argv[i], "--deadline") && i + 1 < argc) {
            char *end;
            long d = strtol(argv[++i], &end, 10);
            if (*end || d < 1 || d > 86400) usage("--deadline must be a whole number of seconds from 1 to 86400, not '%s'", argv[i]);
            deadline_s = (int)d;
            continue;
        }
        if (argv[i][0] == '-') usage("unknown option %s", argv[i]);
        char words[256];
        snprintf(words, sizeof words, "%s", argv[i]);
        for (char *w = strtok(words, ", "); w; w = strtok(NULL, ", ")) {
            int found = 0;
            for (int k = 0; k < TODO_NREGIONS; k++)
                if (!strcmp(TODO_REGIONS[k].name, w) || !strcmp(TODO_REGIONS[k].program, w)) {
                    if (!picked[k]) npicked++;
                    picked[k] = found = 1;
                }
            if (!found) usage("no TODO region is called '%s'", w);
        }
    }
    if (!bin) usage("say where the check programs are: --bin DIR%s", "");
    if (!npicked)
        for (int k = 0; k < TODO_NREGIONS; k++) picked[k] = 1, npicked++;

    int alone = npicked == 1, counts[5] = {0};
    const char *next = NULL;
    static char msg[16384];
    static const char *const WORDS[] = {"passed", "FAILED", "", "not written yet", "does not build"};
    if (json) printf("{\"labs\":"), json_string(labs), printf(",\"regions\":[");
    else if (!alone) printf("make check: the %d TODO regions of %s, in the order of the lessons\n", npicked, labs);
    for (int k = 0, shown = 0; k < TODO_NREGIONS; k++) {
        if (!picked[k]) continue;
        const TodoRegion *r = &TODO_REGIONS[k];
        int rc = run_check(bin, r, deadline_s, msg, sizeof msg);
        if (rc == NO_BUILD) build_errors(bin, msg, sizeof msg);
        counts[rc]++;
        if (rc != PASSED && !next) next = r->name;
        int configs = json_configs(r, 0);
        if (json) {
            printf("%s{\"name\":", shown++ ? "," : "");
            json_string(r->name);
            char file[300];
            snprintf(file, sizeof file, "labs/%s", r->file);
            printf(",\"file\":");
            json_string(file);
            printf(",\"what\":");
            json_string(r->what);
            printf(",\"status\":\"%s\",\"message\":", rc == FAILED ? "failed" : WORDS[rc]);
            json_string(msg);
            printf(",\"reread\":");
            json_string(r->reread);
            printf(",\"points\":%d,\"configurations\":", todo_region_points(r));
            json_configs(r, 1);
            printf("}");
            continue;
        }
        printf("  %-16s %-20s labs/%-32s %2d configuration%s, %3d points\n", WORDS[rc], r->name, r->file, configs,
               configs == 1 ? " " : "s", todo_region_points(r));
        if (rc == FAILED || rc == NO_BUILD || (alone && rc == NOT_WRITTEN)) {
            indented(msg, alone ? 0 : 4);
            if (rc == FAILED) printf("      reread: %s\n", r->reread);
        }
        fflush(stdout);
    }
    if (json)
        printf("],\"passed\":%d,\"failed\":%d,\"not_written\":%d,\"does_not_build\":%d", counts[PASSED],
               counts[FAILED] + counts[NO_BUILD], counts[NOT_WRITTEN], counts[NO_BUILD]);
    else if (!alone) {
        printf("%d passed, %d failed, %d not written yet", counts[PASSED], counts[FAILED] + counts[NO_BUILD],
               counts[NOT_WRITTEN]);
        if (counts[NO_BUILD]) printf(" (%d do not build)", counts[NO_BUILD]);
        printf("\n");
    }
    // The next command: the first region that did not pass, or the labs and the grade.
    const char *other = strcmp(labs, "labs") ? " LABS=" : "", *copy = strcmp(labs, "labs") ? labs : "";
    char line[1400];
    if (next)
        snprintf(line, sizeof line, "make check TODO=%s%s%s, then the lab on the dashboard, then make grade", next, other, copy);
    else
        snprintf(line, sizeof line, "the labs on the dashboard (make lab-<name>), then make grade%s%s", other, copy);
    if (json) {
        printf(",\"next\":");
        json_string(line);
        printf(",\"next_region\":");
        if (next) json_string(next);
        else printf("null");
        printf("}\n");
    } else {
        printf("next: %s\n", line);
    }
    return npicked == counts[PASSED] ? PASSED : FAILED;
}
