// ranks.h — real rank processes for the collective tests (test_dist.c, test_bf16.c).
//
// Defines: report(), fork_ranks().
//
// fork_ranks(p, body, arg) forks p processes that join through dist_init() exactly as a lab's
// ranks do (RANK, WORLD_SIZE, ... in the environment; rank 0 creates the shared segment).
// Each runs body(p, arg), which calls report() once per check, then exits 0. Reports travel
// to the parent through a pipe, one line each; the parent prints one ok/not ok line per
// check name, over all ranks (a check fails if any rank failed it), then one line for the
// world size and one saying whether every rank exited 0.
#ifndef SHARDLAB_RANKS_H
#define SHARDLAB_RANKS_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/comm/dist.h"
#include "test.h"

static int report_fd;  // in a rank: the write end of the pipe to the parent

// One check's outcome from one rank: "name<TAB>ok<TAB>detail".
static void report(const char *name, int ok, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void report(const char *name, int ok, const char *fmt, ...) {
    char detail[200] = "", line[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    int len = snprintf(line, sizeof line, "%s\t%d\t%s\n", name, ok, detail);
    if (len >= (int)sizeof line) len = (int)sizeof line - 1, line[len - 1] = '\n';  // cut, still one line
    if (write(report_fd, line, (size_t)len) != len) _exit(3);  // < PIPE_BUF: one atomic write
}

typedef struct {
    char name[512];
    int fails, reports;
    char detail[200];
} RankCheck;

// Runs body on p forked ranks; returns the number of checks that failed on some rank.
static int fork_ranks(int p, void (*body)(int p, void *arg), void *arg) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    char port[16];
    snprintf(port, sizeof port, "%d", 40000 + (int)(getpid() % 20000));
    fflush(stdout);  // or every child would print what is still buffered
    pid_t pids[DIST_MAX_RANKS];
    for (int r = 0; r < p; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            close(fds[0]);
            report_fd = fds[1];
            char rs[16], ws[16];
            snprintf(rs, sizeof rs, "%d", r);
            snprintf(ws, sizeof ws, "%d", p);
            setenv("RANK", rs, 1), setenv("LOCAL_RANK", rs, 1), setenv("WORLD_SIZE", ws, 1);
            setenv("MASTER_ADDR", "127.0.0.1", 1), setenv("MASTER_PORT", port, 1);
            setenv("SHARDLAB_TIMEOUT_S", "60", 1);
            unsetenv("SHARDLAB_SHM");
            body(p, arg);
            _exit(0);
        }
    }
    close(fds[1]);
    // Gather the reports: one line per check per rank.
    static RankCheck checks[4096];
    int nchecks = 0;
    memset(checks, 0, sizeof checks);
    FILE *in = fdopen(fds[0], "r");
    char line[512];
    while (fgets(line, sizeof line, in)) {
        char *tab1 = strchr(line, '\t'), *tab2 = tab1 ? strchr(tab1 + 1, '\t') : NULL;
        if (!tab2) continue;
        *tab1 = *tab2 = 0;
        line[strcspn(line, "\n")] = 0;
        tab2[1 + strcspn(tab2 + 1, "\n")] = 0;
        int i;
        for (i = 0; i < nchecks && strcmp(checks[i].name, line) != 0; i++) {}
        if (i == nchecks && nchecks < 4096) snprintf(checks[nchecks++].name, sizeof checks[0].name, "%s", line);
        checks[i].reports++;
        if (tab1[1] != '1' && checks[i].fails++ == 0) snprintf(checks[i].detail, sizeof checks[i].detail, "%s", tab2 + 1);
    }
    fclose(in);
    int exits_ok = 1;
    for (int r = 0; r < p; r++) {
        int status;
        waitpid(pids[r], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) exits_ok = 0;
    }
    int failures = 0, passes = 0;
    for (int i = 0; i < nchecks; i++) {
        if (checks[i].fails) {
            EXPECT(0, "p=%d %s: %d rank(s) failed, e.g. %s", p, checks[i].name, checks[i].fails, checks[i].detail);
            failures++;
        } else {
            passes++;
        }
    }
    // One summary line per world size keeps the output short; failures are listed above.
    EXPECT(failures == 0 && nchecks > 0, "p=%d: %d checks passed on every rank", p, passes);
    EXPECT(exits_ok, "p=%d: every rank exited 0", p);
    return failures;
}

#endif
