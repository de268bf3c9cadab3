// todo.h — what a check of one TODO region is made of (`make check TODO=<name>`).
//
// Defines: TodoCheck, todo_main(), todo_fail(), todo_context(), todo_ranks(), todo_rank_count(), todo_close(),
//          todo_ranks_list().
//
// A check program (tests/todo/check_<lab>.c) is built against the student's copy of labs/,
// like `make grade` builds its labs, and holds the checks of that copy's regions: each
// exercises one region on small, adversarial inputs and compares with a reference written in
// the check itself, never with the solution's code. Where the region lives in a static
// function of a lab file, the check includes that file (`#define main ..._lab_main`, then
// `#include "05-ddp/ddp.c"`), so that it can call the function alone.
//
// A check runs in a process of its own (todo_main forks it), so that whatever the region does
// (a crash, a rank that never sends, a todo() stub) ends in a message, never in a crash of the
// check or a hang. It reports through todo_fail() ("rank 2, chunk 1 (elements 6..8): expected
// 10, got 6"), which ends it; a check that returns has passed. The stub of an unwritten
// region ends it too: the program says "not written yet: <what> (file:line)".
//
// The program's answer to `check_<lab> NAME`: exit 0 passed, 1 failed, 3 not written yet,
// 2 a usage error; what it says, on stdout, is the message (its first line the headline).
#ifndef SHARDLAB_TODO_H
#define SHARDLAB_TODO_H

#include <stddef.h>

#include "common/comm/dist.h"

typedef struct {
    const char *name;   // the region's name in `make check TODO=<name>` (tests/todo/regions.c)
    void (*run)(void);  // returns when the region is right; todo_fail()s otherwise
} TodoCheck;

enum { TODO_PASSED = 0, TODO_FAILED = 1, TODO_USAGE = 2, TODO_NOT_WRITTEN = 3 };

// main() of a check program: `prog NAME` runs that check, `prog --list` names them all.
int todo_main(int argc, char **argv, const TodoCheck *checks, int n);

// Says what is wrong, in the student's terms (which rank, chunk, round, micro-batch,
// expected versus got), and ends the check as failed. In a rank of todo_ranks(), the message
// is that rank's; the first rank to fail speaks for the check.
void todo_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

// What the check is doing now ("3 ranks, 10 elements"): it begins any message that comes from
// below the check (a communicator's timeout, a crash), which cannot know it.
void todo_context(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// |got - want| <= tol * max(1, |want|), for the floating-point comparisons of a check.
int todo_close(double got, double want, double tol);

// The ranks of mask's set bits among the first p, as "0,2,3" (or "none"), into out[n]: which
// ranks a wrong sum holds.
void todo_ranks_list(unsigned mask, int p, char *out, size_t n);

// Runs body on `world` processes that join as a lab's ranks do (dist_init on the shared-memory
// backend), each given its Dist. algo picks the collectives' algorithm: DIST_ALGO_DIRECT for a
// check whose region only calls collectives (so that it does not depend on the student's ring),
// DIST_ALGO_RING for the ring's own checks. Every rank has timeout_s seconds; a rank that
// waits longer for another ends the check with the communicator's account of who waited for
// whom. Returns when every rank returned from body; a rank's todo_fail() (or a stub, or a
// crash) ends the check with its message.
void todo_ranks(int world, DistAlgo algo, double timeout_s, void (*body)(Dist *d, void *arg), void *arg);

#endif
