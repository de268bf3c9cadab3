// sandbox_cmd.c — the `sandbox` program (build/sandbox): a command run in the sandbox of
// sandbox.h. The Makefile builds a student's copy with it (make grade LABS=, make check
// LABS=); shardlab's grader and make check's driver start a student's programs through the
// same module, linked in.
//
//   sandbox [--read PATH]... [--write DIR]... [--deadline S] [--what NAME] -- COMMAND [ARG...]
//   sandbox --status
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/harness/check.h"
#include "sandbox.h"

static const char USAGE[] =
    "usage: sandbox [--read PATH]... [--write DIR]... [--deadline S] [--what NAME] -- COMMAND [ARG...]\n"
    "       sandbox --status\n"
    "\n"
    "Runs COMMAND where a student's code can do no harm (labs/command/grade/sandbox.h): no network, the\n"
    "system read-only, PATH read-only and DIR writable (each --read and --write), a private /tmp\n"
    "and /dev/shm, a throwaway HOME, nothing else of the file system; limits on processes, CPU\n"
    "time, file size and memory; and every process it starts ended when it ends.\n"
    "\n"
    "  --read PATH    a file or folder it may read (up to 16)\n"
    "  --write DIR    a folder it may write, created if absent (up to 16)\n"
    "  --deadline S   end it, and everything it started, after S seconds (default: none)\n"
    "  --what NAME    who runs it, for messages (default: sandbox)\n"
    "  --status       say which sandbox works here (bwrap, unshare, limits or off) and why\n"
    "\n"
    "SHARDLAB_SANDBOX=off runs COMMAND without the sandbox, with the deadline only (for\n"
    "debugging); =bwrap, =unshare or =limits asks for one.\n"
    "Exit status: COMMAND's; 124 when its deadline ended it; 127 when it could not start; 2 bad\n"
    "arguments.\n";

// make's jobserver descriptors ("--jobserver-auth=3,4" in MAKEFLAGS), kept open for a make
// run in the sandbox, so that it shares the jobs of the make that started it.
static void keep_jobserver(Sandbox *s) {
    const char *flags = getenv("MAKEFLAGS");
    static const char *const KEYS[] = {"--jobserver-auth=", "--jobserver-fds="};
    for (size_t i = 0; flags && i < sizeof KEYS / sizeof *KEYS; i++) {
        const char *at = strstr(flags, KEYS[i]);
        int r, w;
        if (at && sscanf(at + strlen(KEYS[i]), "%d,%d", &r, &w) == 2 && r >= 0 && w >= 0)
            sandbox_keep_fd(s, r), sandbox_keep_fd(s, w);
    }
}

int main(int argc, char **argv) {
    Sandbox s;
    sandbox_init(&s, "sandbox", 0);
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return fputs(USAGE, stdout), 0;
        if (!strcmp(a, "--")) {
            i++;
            break;
        }
        if (!strcmp(a, "--status")) {
            char why[800];
            const char *mode = sandbox_mode("sandbox", why, sizeof why);
            printf("%s%s%s\n", mode, why[0] ? ": " : "", why[0] ? why : ": no network, your files out of reach, every "
                   "process it starts ended with it (bubblewrap)");
            return 0;
        }
        if (i + 1 >= argc || argv[i + 1][0] == 0) usage_error("sandbox", "%s needs a value", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--read")) {
            if (sandbox_read(&s, v) != 0) usage_error("sandbox", "more than %d --read paths", SANDBOX_MAX_PATHS);
        } else if (!strcmp(a, "--write")) {
            if (sandbox_write(&s, v) != 0) usage_error("sandbox", "more than %d --write folders", SANDBOX_MAX_PATHS);
        } else if (!strcmp(a, "--what")) {
            s.what = v;
        } else if (!strcmp(a, "--deadline")) {
            char *end;
            long d = strtol(v, &end, 10);
            if (*end || d < 1 || d > 1000000)
                usage_error("sandbox", "--deadline must be a whole number of seconds from 1 to 1000000 (got '%s')", v);
            s.deadline_s = (int)d;
        } else {
            usage_error("sandbox", "unknown option '%s'", a);
        }
    }
    if (i >= argc) usage_error("sandbox", "say what to run: sandbox [options] -- COMMAND [ARG...]");
    keep_jobserver(&s);
    int timed_out;
    int rc = sandbox_run(&s, argv + i, &timed_out);
    if (timed_out) fprintf(stderr, "%s: ran out of time: %s was stopped after %d s, its deadline\n", s.what, argv[i], s.deadline_s);
    return rc;
}
