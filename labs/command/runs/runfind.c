// runfind.c — finding runs and the rank to blame: runview_latest_run() and
// run_blamed_rank() of runread.h, which read directories and messages, not a RunView.
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/runfiles/json.h"
#include "runread.h"
#include "runschema.h"

int run_blamed_rank(const char *msg) {
    for (const char *p = msg; (p = strstr(p, "rank ")) != NULL; p += 5) {
        int r, end = 0;
        if (sscanf(p, "rank %d failed, so%n", &r, &end) == 1 && end) return r;
        if (sscanf(p, "rank %d (pid %*d) is gone%n", &r, &end) == 1 && end) return r;
    }
    return -1;
}


// Whether rank 0's events (a run without meta.json) already end: the run stopped before it
// started (a failed start the launcher ended), so it is no one's newest run.
static int run_ended_unstarted(const char *events) {
    int fd = file_open_regular(events);
    if (fd < 0) return 0;
    char buf[4096];
    ssize_t got = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    buf[got > 0 ? got : 0] = 0;
    for (char *line = buf; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (runschema_line_is(line, strlen(line), "end")) return 1;
    return 0;
}

int runview_latest_run(const char *runs_dir, char *out, size_t n, char *err, size_t errlen) {
    DIR *d = opendir(runs_dir);
    if (!d) return snprintf(err, errlen, "%s: %s (no runs yet? start one with 'make lab-ddp')", runs_dir, strerror(errno)), -1;
    struct dirent *e;
    double best = -1;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char path[4096 + 300];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s/meta.json", runs_dir, e->d_name);
        if (stat(path, &st) != 0) {  // not started yet, or never: only the first counts
            snprintf(path, sizeof path, "%s/%s/rank-0.jsonl", runs_dir, e->d_name);
            if (stat(path, &st) != 0 || run_ended_unstarted(path)) continue;
        }
        double t = (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9;
        if (t > best && strlen(runs_dir) + strlen(e->d_name) + 2 <= n) {
            best = t;
            snprintf(out, n, "%s/%s", runs_dir, e->d_name);
        }
    }
    closedir(d);
    if (best < 0) return snprintf(err, errlen, "%s: no run directories in it (start one with 'make lab-ddp')", runs_dir), -1;
    return 0;
}
