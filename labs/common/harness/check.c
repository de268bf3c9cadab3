// check.c — see check.h.
#include "check.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char context[64] = "shardlab";
#define MAX_DIE_HOOKS 8
static struct {
    DieHook fn;
    void *arg;
} die_hooks[MAX_DIE_HOOKS];
static int ndie_hooks;

void check_set_context(const char *who) { snprintf(context, sizeof context, "%s", who); }
const char *check_context(void) { return context; }

void check_on_die(DieHook hook, void *arg) {
    if (ndie_hooks == MAX_DIE_HOOKS) {
        fprintf(stderr, "%s: error: more than %d die hooks (a bug in shardlab)\n", context, MAX_DIE_HOOKS);
        exit(1);
    }
    die_hooks[ndie_hooks].fn = hook;
    die_hooks[ndie_hooks].arg = arg;
    ndie_hooks++;
}

void check_forget_die(DieHook hook, void *arg) {
    for (int i = 0; i < ndie_hooks; i++)
        if (die_hooks[i].fn == hook && die_hooks[i].arg == arg) {
            memmove(&die_hooks[i], &die_hooks[i + 1], (size_t)(ndie_hooks - i - 1) * sizeof die_hooks[0]);
            ndie_hooks--;
            return;
        }
}

static atomic_flag dying = ATOMIC_FLAG_INIT;
// This thread is inside die_at (a hook failed and called die again), and whether it already
// called exit() (an atexit handler died).
static _Thread_local int dying_here, exiting_here;

void die_at(const char *file, int line, const char *hint, const char *fmt, ...) {
    // Two threads failing at once (a rank's communication thread and its main thread): the
    // first one reports and exits; the second waits for that exit, a few seconds at most.
    if (!dying_here && atomic_flag_test_and_set(&dying)) {
        for (int i = 0; i < 500; i++) usleep(10000);
        _exit(1);
    }
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fflush(stdout);
    // A second failure on this thread, while reporting the first (the disk is full, so the
    // hook that writes the error event fails too): say it, and end now, never wait. Hooks
    // that are left still run: each runs once (the loop below takes it off before calling).
    fprintf(stderr, "%s: error: %s (%s:%d)\n", context, msg, file, line);
    if (hint && !dying_here) fprintf(stderr, "HINT: %s\n", hint);
    if (exiting_here) _exit(1);  // exit() is running already: calling it again is undefined
    dying_here = 1;
    while (ndie_hooks > 0) {
        ndie_hooks--;
        die_hooks[ndie_hooks].fn(msg, die_hooks[ndie_hooks].arg);
    }
    exiting_here = 1;
    exit(1);
}

// The command that shows prog's help, as the user can type it: shardlab's own commands by the
// path it was started as ("build/shardlab run --help"); a lab by what its launcher says
// (SHARDLAB_USAGE_HELP: "make lab-ddp ARGS=--help", "build/shardlab run ddp --help"), else by
// its own path ("build/labs/ddp --help", as a lab run by hand or by mpirun was started).
static void help_command(const char *prog, char *out, size_t n) {
    const char *launcher = getenv("SHARDLAB_USAGE_HELP");
    int own = strncmp(prog, "shardlab", 8) == 0 && (prog[8] == 0 || prog[8] == ' ');
    if (own) snprintf(out, n, "%s%s --help", program_invocation_name, prog + 8);
    else if (launcher && *launcher) snprintf(out, n, "%s", launcher);
    else snprintf(out, n, "%s --help", program_invocation_name);
}

void usage_error(const char *prog, const char *fmt, ...) {
    va_list ap;
    char help[1024];
    help_command(prog, help, sizeof help);
    fflush(stdout);
    fprintf(stderr, "%s: ", prog);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (try '%s')\n", help);  // check_is_usage_line() knows this ending
    exit(2);
}

// usage_error()'s line ends " (try '<command>--help')" (the command: "build/labs/ddp ",
// "make lab-ddp ARGS=").
int check_is_usage_line(const char *line, size_t len) {
    static const char head[] = " (try '", tail[] = "--help')";
    size_t nh = sizeof head - 1, nt = sizeof tail - 1;
    if (len > 0 && line[len - 1] == '\n') len--;
    if (len < nh + nt || memcmp(line + len - nt, tail, nt) != 0) return 0;
    for (size_t i = 0; i + nh + nt <= len; i++)
        if (memcmp(line + i, head, nh) == 0) return 1;
    return 0;
}

void *malloc_check_at(size_t size, const char *file, int line) {
    void *p = malloc(size ? size : 1);
    if (!p) die_at(file, line, "lower --batch, --seq or --dim", "out of memory allocating %zu bytes", size);
    return p;
}

void *calloc_check_at(size_t count, size_t size, const char *file, int line) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        die_at(file, line, "lower --batch, --seq or --dim", "out of memory allocating %zu x %zu bytes",
               count, size);
    return p;
}

void *realloc_check_at(void *ptr, size_t size, const char *file, int line) {
    void *p = realloc(ptr, size ? size : 1);
    if (!p) die_at(file, line, "lower --batch, --seq or --dim", "out of memory allocating %zu bytes", size);
    return p;
}

FILE *fopen_check_at(const char *path, const char *mode, const char *file, int line) {
    FILE *f = fopen(path, mode);
    if (!f)
        die_at(file, line, "check that the path exists and that you may read or write it",
               "cannot open '%s' (mode %s): %s", path, mode, strerror(errno));
    return f;
}

void fread_check_at(void *dst, size_t size, size_t count, FILE *f, const char *what,
                    const char *file, int line) {
    size_t got = fread(dst, size, count, f);
    if (got != count) {
        if (feof(f))
            die_at(file, line, "the file is truncated or not what was expected",
                   "unexpected end of file reading %s (%zu of %zu items)", what, got, count);
        die_at(file, line, NULL, "read error on %s: %s", what, strerror(errno));
    }
}

void fwrite_check_at(const void *src, size_t size, size_t count, FILE *f, const char *what,
                     const char *file, int line) {
    if (fwrite(src, size, count, f) != count)
        die_at(file, line, "is the disk full?", "write error on %s: %s", what, strerror(errno));
}

void fclose_check_at(FILE *f, const char *what, const char *file, int line) {
    if (fclose(f) != 0)
        die_at(file, line, "is the disk full?", "error closing %s: %s", what, strerror(errno));
}
