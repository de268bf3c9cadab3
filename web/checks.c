// checks.c — a starter copy's TODO regions on the lab pages: the section "Your TODO regions" of
// /labs/<lab>, and POST /api/checks?lab=<lab>, which runs `make check`'s programs on that lab's
// regions and answers what they found (web/static/checks.js draws it as a table).
//
// The programs are those `make web` builds for LABS (make check's, into
// build/student/<hash>/todo) and names on the command line: `shardlab web --checks DIR`, DIR
// holding the driver (check) and the check programs (check_<program>). A request names a lab,
// nothing else; without --checks the lab pages show no regions and the API is 404.
//
// A lab's regions: those of its own check program, and those its graded configurations run
// (tests/todo/regions.c says which configurations run a region; common/harness/catalog.c which lab each
// configuration is). So the ddp page lists DDP's two regions and also AdamW's and the ring's,
// which every DDP step runs; fsdp's lists ZeRO's shard length, whose shards FSDP gathers.
//
// Checking starts processes, so it is a POST with the server's token from its own pages
// (web_may_act), as starting a lab is; one check at a time (429). The driver is executed, never
// through a shell, as `DIR/check --bin DIR --deadline S --json NAME...` with the names from the
// table, in a session of its own. It runs each check program, the student's code, in the
// sandbox (labs/command/grade/sandbox.h: no network, none of the server's files, every process it
// starts ended with it) and ends it after S seconds, a share of CHECKS_TIMEOUT_S, so that
// every region gets its line even when each hangs. The answer is read up to
// CHECKS_MAX_OUTPUT, and the driver is stopped, with every check under it, after
// CHECKS_TIMEOUT_S.
#include <civetweb.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/harness/catalog.h"
#include "regions.h"
#include "web_internal.h"

// Each check stops itself after 30 s (tests/todo/todo.c), and the driver ends it at its deadline
// (one that hangs before main, say): each region's share of two minutes, at most the
// driver's own 60 s. A lab has at most 6 regions: 18 s each.
#define CHECKS_TIMEOUT_S 120
#define CHECKS_MAX_OUTPUT (1 << 20)

// 1 if the lab runs region r: r is its own check program's, or one of its graded
// configurations runs r.
static int lab_runs(const CatLab *lab, const TodoRegion *r) {
    if (!strcmp(r->program, lab->name)) return 1;
    for (int i = 0; i < catalog_ngraded; i++)
        if (!strcmp(catalog_graded[i].lab, lab->name) && todo_region_runs_in(r, catalog_graded[i].label)) return 1;
    return 0;
}

// The lab's regions in the order of the lessons, into out[]; returns how many.
static int lab_regions(const CatLab *lab, const TodoRegion **out, int max) {
    int n = 0;
    for (int i = 0; i < TODO_NREGIONS && n < max; i++)
        if (lab_runs(lab, &TODO_REGIONS[i])) out[n++] = &TODO_REGIONS[i];
    return n;
}

// ---- the page's section ---------------------------------------------------------------------

void web_checks_section(Web *w, StrBuf *b, const char *lab_name) {
    const CatLab *lab = catalog_lab(lab_name);
    const TodoRegion *regions[64];
    int n = lab ? lab_regions(lab, regions, 64) : 0;
    if (!w->checks[0] || n == 0) return;
    sb_printf(b, "<section id=\"checks\"><h2>Your TODO regions</h2><p>The regions of your copy that this lab runs, "
                 "each checked alone on small inputs, in seconds, as <code>make check TODO=");
    for (int i = 0; i < n; i++) sb_printf(b, "%s%s", i ? "," : "", regions[i]->name);
    sb_printf(b, "</code> does in a terminal (the points are those of the graded configurations that run the region)."
                 "</p><table class=\"data checks-table\" id=\"checks-table\"><thead><tr><th>status</th><th>region</th>"
                 "<th>file</th><th class=\"num\">points</th></tr></thead><tbody>");
    for (int i = 0; i < n; i++) {
        const TodoRegion *r = regions[i];
        sb_printf(b, "<tr data-region=\"%s\"><td class=\"st st-unknown\">not checked</td><td><code>%s</code><br><small>",
                  r->name, r->name);
        sb_markup_text(b, r->what);
        sb_printf(b, "</small></td><td><code>labs/");
        sb_markup_text(b, r->file);
        sb_printf(b, "</code></td><td class=\"num\">%d</td></tr>", todo_region_points(r));
    }
    sb_printf(b, "</tbody></table><form id=\"checks-form\" method=\"post\" action=\"/api/checks?lab=%s\">"
                 "<button type=\"submit\">Check them</button> <span id=\"checks-status\" role=\"status\"></span></form>"
                 "<p id=\"checks-next\"></p></section>\n",
              lab->name);
}

// ---- running the driver ---------------------------------------------------------------------

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// Runs dir/check --bin dir --json NAME... : 0 with its answer in out, or -1 with why.
static int run_driver(const char *dir, const TodoRegion **regions, int n, StrBuf *out, char *why, size_t nwhy) {
    char prog[4200], deadline[16];
    snprintf(prog, sizeof prog, "%s/check", dir);
    int share = (CHECKS_TIMEOUT_S - 10) / (n > 0 ? n : 1);
    snprintf(deadline, sizeof deadline, "%d", share > 60 ? 60 : share < 5 ? 5 : share);
    char *argv[64 + 7] = {prog, "--bin", (char *)dir, "--deadline", deadline, "--json"};
    for (int i = 0; i < n; i++) argv[6 + i] = (char *)regions[i]->name;
    argv[6 + n] = NULL;
    int fds[2];
    if (pipe(fds) != 0) return snprintf(why, nwhy, "could not start %s: %s", prog, strerror(errno)), -1;
    pid_t pid = fork();
    if (pid == 0) {
        // The child: its own session (so that a stop reaches every check program under it),
        // stdout into the pipe, nothing else of ours (no socket of the server's).
        setsid();
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) dup2(null, 0), dup2(null, 2);
        dup2(fds[1], 1);
        for (int fd = 3; fd < 1024; fd++) close(fd);
        execv(prog, argv);
        _exit(127);
    }
    close(fds[1]);
    if (pid < 0) {
        close(fds[0]);
        return snprintf(why, nwhy, "could not start %s: %s", prog, strerror(errno)), -1;
    }
    double t0 = seconds_now();
    int stopped = 0, too_long = 0;
    char chunk[4096];
    for (;;) {
        double left = CHECKS_TIMEOUT_S - (seconds_now() - t0);
        if (left <= 0) {
            stopped = 1;
            break;
        }
        struct pollfd p = {.fd = fds[0], .events = POLLIN};
        int ready = poll(&p, 1, (int)(left * 1000) + 1);
        if (ready < 0 && errno == EINTR) continue;
        if (ready <= 0) continue;
        ssize_t k = read(fds[0], chunk, sizeof chunk);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        if (out->len + (size_t)k > CHECKS_MAX_OUTPUT) {
            too_long = 1;
            break;
        }
        sb_append(out, chunk, (size_t)k);
    }
    close(fds[0]);
    if (stopped || too_long) kill(-pid, SIGKILL), kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    if (stopped) return snprintf(why, nwhy, "the checks took longer than %d s and were stopped", CHECKS_TIMEOUT_S), -1;
    if (too_long) return snprintf(why, nwhy, "the checks said more than %d bytes", CHECKS_MAX_OUTPUT), -1;
    int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (rc != 0 && rc != 1)
        return snprintf(why, nwhy, "%s ended with status %d (is it make check's driver? make web builds it)", prog, rc), -1;
    char err[128];
    JsonValue *v = out->len ? json_parse(out->data, out->len, err, sizeof err) : NULL;
    if (!v) return snprintf(why, nwhy, "%s did not answer JSON", prog), -1;
    json_free(v);
    return 0;
}

static pthread_mutex_t checks_lock = PTHREAD_MUTEX_INITIALIZER;

int web_api_checks(Web *w, struct mg_connection *c, const char *method, const char *qs) {
    if (strcmp(method, "POST") != 0) return web_reply_json_error(c, 405, "POST only: checking runs your copy's code");
    if (!web_may_act(w, c))
        return web_reply_json_error(c, 403, "checking your TODO regions runs your copy's code: it needs this server's "
                                            "token (open the URL it printed) and a request from its own pages");
    if (!w->checks[0])
        return web_reply_json_error(c, 404, "this server checks no TODO regions: make web starts it with them "
                                            "(shardlab web --checks DIR)");
    char name[64];
    if (!qs || mg_get_var(qs, strlen(qs), "lab", name, sizeof name) <= 0)
        return web_reply_json_error(c, 400, "say which lab: /api/checks?lab=ddp");
    const CatLab *lab = catalog_lab(name);
    if (!lab) {
        char why[120];
        snprintf(why, sizeof why, "no lab called '%.40s'", name);
        return web_reply_json_error(c, 404, why);
    }
    const TodoRegion *regions[64];
    int n = lab_regions(lab, regions, 64);
    if (n == 0) return web_reply_json_error(c, 404, "this lab runs no TODO region");
    if (pthread_mutex_trylock(&checks_lock) != 0) return web_reply_busy(c);
    StrBuf out;
    sb_init(&out);
    char why[4400];
    int rc = run_driver(w->checks, regions, n, &out, why, sizeof why);
    pthread_mutex_unlock(&checks_lock);
    int st = 200;
    if (rc != 0) st = web_reply_json_error(c, 500, why);
    else web_reply(c, 200, "application/json", out.data, out.len, NULL);
    sb_free(&out);
    return st;
}
