// todo.c — see todo.h.
//
// Three kinds of process: the program (todo_main), which starts the check and waits for it
// with a deadline; the check, a child in a process group of its own; and, for a check that
// needs ranks, the check's children (todo_ranks). All of them speak through one pipe, a
// message per write (at most PIPE_BUF bytes, so messages never interleave): its first byte
// says what it is ('F' failed, 'T' a stub: not written yet), the rest is what to print. The
// program prints the first message it gets; whatever else a failing rank takes down with it
// (the other ranks' timeouts, their "rank 1 is gone") comes later and is not read.
#include "todo.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/harness/check.h"

#define MESSAGE_MAX 2048  // < PIPE_BUF: one write, never split
#define CHECK_TIMEOUT_S 30

static int result_fd = -1;  // the write end, in the check and its ranks

// todo_context(): what the check is doing now, in memory shared with the program (todo_main
// maps it before the fork), which says it when the check runs out of time.
#define CONTEXT_MAX 300
static char context_here[CONTEXT_MAX];
static char *context = context_here;

// One message: its kind, the text, a NUL that ends it (a read may return several).
static void say(char kind, const char *text) {
    char msg[MESSAGE_MAX];
    int len = snprintf(msg, sizeof msg - 1, "%c%s", kind, text);
    if (len >= (int)sizeof msg - 1) len = (int)sizeof msg - 2;
    msg[len++] = 0;
    if (result_fd >= 0 && write(result_fd, msg, (size_t)len) != len) _exit(TODO_FAILED);
}

void todo_context(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(context, CONTEXT_MAX, fmt, ap);
    va_end(ap);
}

void todo_fail(const char *fmt, ...) {
    char text[MESSAGE_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    say('F', text);
    _exit(TODO_FAILED);
}

int todo_close(double got, double want, double tol) {
    return isfinite(got) && fabs(got - want) <= tol * fmax(1.0, fabs(want));
}

void todo_ranks_list(unsigned mask, int p, char *out, size_t n) {
    size_t used = 0;
    out[0] = 0;
    for (int q = 0; q < p; q++)
        if (mask >> q & 1) used += (size_t)snprintf(out + used, n - used, "%s%d", used ? "," : "", q);
    if (!used) snprintf(out, n, "none");
}

// die() in the region or below it: a todo() stub ("not written yet: ...") or any other error
// the labs' code raises (a communicator's timeout, a failed allocation), reported as it is.
static void on_die(const char *msg, void *arg) {
    (void)arg;
    if (strncmp(msg, "not written yet: ", 17) == 0) return say('T', msg);
    char text[MESSAGE_MAX];
    snprintf(text, sizeof text, "%s%s%s", context, context[0] ? ": " : "", msg);
    say('F', text);
}

static const char *signal_words(int sig) {
    switch (sig) {
    case SIGSEGV: return "a segmentation fault: memory read or written outside a buffer, or through a bad pointer";
    case SIGBUS: return "a bus error: memory read or written outside a mapping";
    case SIGFPE: return "an arithmetic error: an integer divided by zero?";
    case SIGABRT: return "an abort: a failed assert, or the C library found the heap damaged";
    case SIGILL: return "an illegal instruction";
    default: return strsignal(sig);
    }
}

// ---- ranks -----------------------------------------------------------------------------------

void todo_ranks(int world, DistAlgo algo, double timeout_s, void (*body)(Dist *d, void *arg), void *arg) {
    static int worlds;  // a fresh shared segment for every call
    char port[16], rs[16], ws[16], ts[32];
    snprintf(port, sizeof port, "%d", 20000 + (int)((getpid() * 64L + worlds++) % 40000));
    snprintf(ws, sizeof ws, "%d", world);
    snprintf(ts, sizeof ts, "%g", timeout_s);
    pid_t pids[DIST_MAX_RANKS];
    fflush(stdout);
    for (int r = 0; r < world; r++) {
        if ((pids[r] = fork()) < 0) todo_fail("could not start rank %d: %s", r, strerror(errno));
        if (pids[r] > 0) continue;
        snprintf(rs, sizeof rs, "%d", r);
        setenv("RANK", rs, 1), setenv("LOCAL_RANK", rs, 1), setenv("WORLD_SIZE", ws, 1);
        setenv("LOCAL_WORLD_SIZE", ws, 1), setenv("MASTER_ADDR", "127.0.0.1", 1), setenv("MASTER_PORT", port, 1);
        setenv("SHARDLAB_TIMEOUT_S", ts, 1);
        unsetenv("SHARDLAB_SHM"), unsetenv("SHARDLAB_SHM_FD");
        char who[32];
        snprintf(who, sizeof who, "rank %d", r);
        check_set_context(who);
        Dist d;
        dist_init(&d, "check", NULL);
        d.algo = algo;
        body(&d, arg);
        dist_destroy(&d);
        _exit(TODO_PASSED);
    }
    // Wait for all; the first rank that did not pass ends the others.
    int left = world, failed = 0;
    while (left > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0 && errno == EINTR) continue;
        if (pid < 0) break;
        int r = 0;
        while (r < world && pids[r] != pid) r++;
        if (r == world) continue;
        left--, pids[r] = 0;
        if (WIFEXITED(status) && WEXITSTATUS(status) == TODO_PASSED) continue;
        if (WIFSIGNALED(status) && !failed) {
            char text[600];
            snprintf(text, sizeof text, "%s%srank %d of %d crashed: %s", context, context[0] ? ": " : "", r, world,
                     signal_words(WTERMSIG(status)));
            say('F', text);
        }
        if (!failed) {  // the message is in the pipe; stop the others and fail
            failed = 1;
            for (int k = 0; k < world; k++)
                if (pids[k] > 0) kill(pids[k], SIGKILL);
        }
    }
    if (failed) _exit(TODO_FAILED);
}

// ---- the program -----------------------------------------------------------------------------

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// The last lines the check wrote to stderr, for a crash nothing else explains.
static void print_tail(FILE *err) {
    char buf[4096];
    long size = (fflush(err), fseek(err, 0, SEEK_END), ftell(err));
    if (size <= 0) return;
    long from = size > (long)sizeof buf - 1 ? size - (long)sizeof buf + 1 : 0;
    fseek(err, from, SEEK_SET);
    size_t n = fread(buf, 1, sizeof buf - 1, err);
    buf[n] = 0;
    char *start = buf;
    for (int lines = 0, i = (int)n - 1; i >= 0; i--)
        if (buf[i] == '\n' && ++lines > 8) { start = buf + i + 1; break; }
    printf("  what it printed last:\n");
    for (char *line = strtok(start, "\n"); line; line = strtok(NULL, "\n")) printf("    %s\n", line);
}

int todo_main(int argc, char **argv, const TodoCheck *checks, int n) {
    const char *prog = argc > 0 ? argv[0] : "check";
    if (argc == 2 && !strcmp(argv[1], "--list")) {
        for (int i = 0; i < n; i++) printf("%s\n", checks[i].name);
        return TODO_PASSED;
    }
    int which = -1;
    for (int i = 0; argc == 2 && i < n; i++)
        if (!strcmp(argv[1], checks[i].name)) which = i;
    if (which < 0) {
        fprintf(stderr, "usage: %s NAME (one of:", prog);
        for (int i = 0; i < n; i++) fprintf(stderr, " %s", checks[i].name);
        fprintf(stderr, "), or %s --list\n", prog);
        return TODO_USAGE;
    }
    const char *t = getenv("TODO_TIMEOUT_S");
    double timeout_s = t && atof(t) > 0 ? atof(t) : CHECK_TIMEOUT_S;

    char *shared = mmap(NULL, CONTEXT_MAX, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared != MAP_FAILED) context = shared, context[0] = 0;
    int fds[2];
    FILE *err = tmpfile();
    if (pipe(fds) != 0 || !err) return perror(prog), TODO_FAILED;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return perror(prog), TODO_FAILED;
    if (pid == 0) {
        setpgid(0, 0);
        close(fds[0]);
        result_fd = fds[1];
        dup2(fileno(err), STDERR_FILENO);
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0) dup2(devnull, STDOUT_FILENO);
        check_set_context("check");
        check_on_die(on_die, NULL);
        checks[which].run();
        _exit(TODO_PASSED);
    }
    close(fds[1]);
    setpgid(pid, pid);

    // The first message, while waiting for the check with a deadline.
    char msg[MESSAGE_MAX + 1] = "";
    ssize_t got = 0;
    int status = 0, done = 0, timed_out = 0;
    double deadline = now_s() + timeout_s;
    while (!done) {
        fd_set in;
        FD_ZERO(&in);
        FD_SET(fds[0], &in);
        struct timeval tv = {0, 50000};
        if (got == 0 && select(fds[0] + 1, &in, NULL, NULL, &tv) > 0) {
            ssize_t k = read(fds[0], msg, MESSAGE_MAX);
            if (k > 0) got = k, msg[k] = 0;
            else if (k == 0) got = -1;  // every writer is gone
        } else if (got != 0) {
            usleep(20000);
        }
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) done = 1;
        else if (now_s() > deadline) timed_out = done = 1;
    }
    kill(-pid, SIGKILL);  // the ranks a failed check leaves behind
    if (timed_out) waitpid(pid, &status, 0);
    if (got == 0) {       // a message written just before the exit
        ssize_t k = read(fds[0], msg, MESSAGE_MAX);
        if (k > 0) got = k, msg[k] = 0;
    }
    close(fds[0]);
    msg[strnlen(msg, MESSAGE_MAX)] = 0;  // the first message only
    if (timed_out) {
        printf("%s%sit did not finish in %.0f s: a loop that never ends, or a rank waiting for a message no rank sends\n",
               context, context[0] ? ": " : "", timeout_s);
        return TODO_FAILED;
    }
    if (got > 0 && msg[0] == 'T') return printf("%s\n", msg + 1), TODO_NOT_WRITTEN;
    if (got > 0 && msg[0] == 'F') return printf("%s\n", msg + 1), TODO_FAILED;
    if (WIFEXITED(status) && WEXITSTATUS(status) == TODO_PASSED) return TODO_PASSED;
    if (WIFSIGNALED(status)) printf("the check crashed: %s\n", signal_words(WTERMSIG(status)));
    else printf("the check stopped (exit %d) without saying why\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    print_tail(err);
    return TODO_FAILED;
}
