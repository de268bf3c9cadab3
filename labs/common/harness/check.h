// check.h — checked wrappers for every call that can fail.
//
// One style everywhere: a function that takes __FILE__/__LINE__, and a macro that passes
// them. A failure prints what failed, where, which rank, and a HINT line saying what to
// try, then exits 1. Bad command-line input is not a crash: usage_error() prints one line
// and exits 2.
#ifndef SHARDLAB_CHECK_H
#define SHARDLAB_CHECK_H

#include <stddef.h>
#include <stdio.h>

// Who is speaking in error messages, e.g. "single rank 0". Set once at start.
void check_set_context(const char *who);
const char *check_context(void);

// Hooks called once with the message before die() exits, newest first: the run log writes
// an "error" event, the communicator tells the other ranks. Up to 8 per process.
typedef void (*DieHook)(const char *msg, void *arg);
void check_on_die(DieHook hook, void *arg);
void check_forget_die(DieHook hook, void *arg);

// Print "<who>: error: <message> (file:line)" and "HINT: <hint>", then exit(1).
// hint may be NULL.
void die_at(const char *file, int line, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 4, 5), noreturn));
#define die(hint, ...) die_at(__FILE__, __LINE__, (hint), __VA_ARGS__)

// Starter code (make starter): where a student writes part of an algorithm, the stub that
// stands in for it. It dies naming the place, so a lab run before the part is written fails
// loudly (an error event in the run log, a FAIL in the grade), never quietly wrong.
#define todo(what) \
    die("write it where the TODO is (the file and line above), then check it alone: make check", \
        "not written yet: %s", (what))

// Print "<prog>: <message> (try '<prog> --help')" on one line, then exit(2). The command to
// try is one the user can type: shardlab's own ("shardlab run") by the path shardlab was
// started as, a lab's by what SHARDLAB_USAGE_HELP says (its launcher sets it: "make lab-ddp
// ARGS=--help" under make, else "build/shardlab run ddp --help"), else by the lab's own path.
void usage_error(const char *prog, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));
// Whether the len bytes at line (a trailing newline allowed) are a line usage_error() wrote:
// the launcher passes a lab's usage error on as its own, and so does not echo it as well.
int check_is_usage_line(const char *line, size_t len);

void *malloc_check_at(size_t size, const char *file, int line);
void *calloc_check_at(size_t count, size_t size, const char *file, int line);
void *realloc_check_at(void *ptr, size_t size, const char *file, int line);
FILE *fopen_check_at(const char *path, const char *mode, const char *file, int line);
void fread_check_at(void *dst, size_t size, size_t count, FILE *f, const char *what,
                    const char *file, int line);
void fwrite_check_at(const void *src, size_t size, size_t count, FILE *f, const char *what,
                     const char *file, int line);
void fclose_check_at(FILE *f, const char *what, const char *file, int line);

#define malloc_check(size) malloc_check_at((size), __FILE__, __LINE__)
#define calloc_check(count, size) calloc_check_at((count), (size), __FILE__, __LINE__)
#define realloc_check(ptr, size) realloc_check_at((ptr), (size), __FILE__, __LINE__)
#define fopen_check(path, mode) fopen_check_at((path), (mode), __FILE__, __LINE__)
#define fread_check(dst, size, count, f, what) \
    fread_check_at((dst), (size), (count), (f), (what), __FILE__, __LINE__)
#define fwrite_check(src, size, count, f, what) \
    fwrite_check_at((src), (size), (count), (f), (what), __FILE__, __LINE__)
#define fclose_check(f, what) fclose_check_at((f), (what), __FILE__, __LINE__)

#endif
