// shm_chan.c — see shm.h: the four channel calls, their forms that do not wait, and the
// waits under them: poll, then sleep on a futex, with a deadline, and a message naming the
// rank that holds the run up when it passes.
#include "shm.h"

#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/harness/check.h"
#include "shm_internal.h"

// The channel from rank `from` to rank `to`: the channels follow the header, row by row.
static ShmChan *chan(const Shm *s, int from, int to) {
    return (ShmChan *)((char *)s->hdr + shm_header_bytes()) + (size_t)from * s->world + to;
}

// ---------------------------------------------------------------------------------------
// Waiting: poll for up to spin_s, yielding the core between polls (when another process of
// the run, or our own compute thread, shares this core, it runs at once instead of after our
// time slice), then sleep on the futex; wake up every 50 ms to check the deadline, the peer's
// process and the abort flag.
// ---------------------------------------------------------------------------------------

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static void describe(const Shm *s, char *buf, size_t n) {
    if (s->what.nsteps > 0)
        snprintf(buf, n, "%s (%s, step %d of %d)", s->what.coll, s->what.phase, s->what.step, s->what.nsteps);
    else
        snprintf(buf, n, "%s (%s)", s->what.coll ? s->what.coll : "setup", s->what.phase ? s->what.phase : "attach");
}

static void note_waiting(Shm *s, int peer) {
    atomic_store(&s->hdr->beat_us[s->rank], (int64_t)(shm_now_s() * 1e6));
    atomic_store(&s->hdr->waiting[s->rank], peer + 1);
}

static void note_done_waiting(Shm *s) { atomic_store(&s->hdr->waiting[s->rank], 0); }

// The rank that holds this wait up: follow who waits for whom from `peer` until a rank that
// is not waiting (computing, or stuck outside a collective), is not running (stopped: its
// beat is stale) or is gone. A cycle of live waiters (ranks calling different collectives)
// has no such rank: then it is `peer`. chain gets "rank 0 for rank 3, " for the message.
static int stuck_rank(const Shm *s, int peer, char *chain, size_t n) {
    double stale_s = s->timeout_s / 4 < 0.5 ? s->timeout_s / 4 : 0.5;
    int64_t now_us = (int64_t)(shm_now_s() * 1e6);
    chain[0] = 0;
    int r = peer;
    for (int hops = 0; hops < s->world; hops++) {
        int32_t pid = atomic_load(&s->hdr->pid[r]), next = atomic_load(&s->hdr->waiting[r]) - 1;
        int running = now_us - atomic_load(&s->hdr->beat_us[r]) < (int64_t)(stale_s * 1e6);
        if (!pid || !shm_process_alive(pid) || next < 0 || next >= s->world || next == r || !running) return r;
        size_t len = strlen(chain);
        snprintf(chain + len, n - len, "%srank %d for rank %d", len ? ", " : "", r, next);
        r = next;
    }
    chain[0] = 0;
    return peer;
}

static void check_peers(Shm *s, int peer, const char *waiting_for, double waited_s) {
    char what[160];
    int32_t failed = atomic_load(&s->hdr->aborted);
    if (failed && failed - 1 != s->rank) {
        describe(s, what, sizeof what);
        die("the first rank to fail has the cause in its log (rank-N.log)", "rank %d failed, so rank %d stops in %s: %s",
            failed - 1, s->rank, what, s->hdr->abort_msg);
    }
    int32_t pid = atomic_load(&s->hdr->pid[peer]), stop = atomic_load(&s->hdr->stop_signal);
    if (pid && !shm_process_alive(pid) && stop) {
        // Every rank got the signal; each stops at the end of its step, and the peer reached
        // its end first. Not a failure of the peer: say it as the interruption it is.
        describe(s, what, sizeof what);
        die("the run was stopped on purpose; 'shardlab run' exits 128 + the signal",
            "rank %d: interrupted by signal %d in %s: rank %d stopped first, at the end of its step", s->rank,
            (int)stop, what, peer);
    }
    if (pid && !shm_process_alive(pid)) {
        describe(s, what, sizeof what);
        die("the rank that died has the cause in its log (rank-N.log)",
            "rank %d: rank %d (pid %d) is gone; it exited while rank %d waited for it %s in %s", s->rank, peer,
            (int)pid, s->rank, waiting_for, what);
    }
    if (waited_s > s->timeout_s) {
        describe(s, what, sizeof what);
        char chain[256], how[96] = "";
        int stuck = stuck_rank(s, peer, chain, sizeof chain);
        int32_t stuck_pid = atomic_load(&s->hdr->pid[stuck]);
        if (stuck_pid && shm_process_state(stuck_pid) == 'T')
            snprintf(how, sizeof how, " (pid %d is stopped: SIGSTOP, Ctrl-Z or a debugger)", (int)stuck_pid);
        if (stuck == peer)
            die("a rank is stuck, or far slower than the others; raise SHARDLAB_TIMEOUT_S if that is expected",
                "rank %d: %s timed out after %.0f s waiting for rank %d %s%s", s->rank, what, s->timeout_s, peer,
                waiting_for, how);
        die("a rank is stuck, or far slower than the others; raise SHARDLAB_TIMEOUT_S if that is expected",
            "rank %d: %s timed out after %.0f s waiting for rank %d%s, which holds up the ranks in between (rank %d "
            "waited for rank %d %s, %s)",
            s->rank, what, s->timeout_s, stuck, how, s->rank, peer, waiting_for, chain);
    }
}

// Wait until *word no longer holds `old`.
static void wait_change(Shm *s, _Atomic uint32_t *word, _Atomic uint32_t *sleepers, uint32_t old, int peer,
                        const char *waiting_for) {
    double t0 = shm_now_s();
    for (int i = 0;; i++) {
        if (atomic_load_explicit(word, memory_order_acquire) != old) return;
        cpu_relax();
        if ((i & 15) == 15) {
            if (shm_now_s() - t0 > s->spin_s) break;
            sched_yield();  // a peer waiting for this core gets it now
        }
    }
    for (;;) {
        note_waiting(s, peer);
        // Announce the sleep before the last look, so a waker that changes *word after our
        // look must see sleepers > 0 and wake us (both sides use sequentially consistent
        // atomics, so one of them sees the other).
        atomic_fetch_add(sleepers, 1);
        if (atomic_load(word) == old) {
            struct timespec ts = {0, 50 * 1000 * 1000};
            syscall(SYS_futex, word, FUTEX_WAIT, old, &ts, NULL, 0);
        }
        atomic_fetch_sub(sleepers, 1);
        if (atomic_load_explicit(word, memory_order_acquire) != old) {
            note_done_waiting(s);
            return;
        }
        check_peers(s, peer, waiting_for, shm_now_s() - t0);
    }
}

static void wake(_Atomic uint32_t *word, _Atomic uint32_t *sleepers) {
    if (atomic_load(sleepers) > 0) syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void shm_abort(Shm *s, const char *msg) {
    if (!s->hdr) return;
    int32_t none = 0;
    if (atomic_compare_exchange_strong(&s->hdr->aborted, &none, s->rank + 1)) {
        snprintf(s->hdr->abort_msg, sizeof s->hdr->abort_msg, "%s", msg);
        // Wake every sleeper: each checks the abort flag when it wakes.
        for (int a = 0; a < s->world; a++)
            for (int b = 0; b < s->world; b++) {
                ShmChan *c = chan(s, a, b);
                syscall(SYS_futex, &c->head, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
                syscall(SYS_futex, &c->tail, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
            }
    }
}

// ---------------------------------------------------------------------------------------
// The four channel calls
// ---------------------------------------------------------------------------------------

float *shm_reserve(Shm *s, int to) {
    ShmChan *c = chan(s, s->rank, to);
    uint32_t head = atomic_load_explicit(&c->head, memory_order_relaxed);  // only we write it
    for (;;) {
        uint32_t tail = atomic_load_explicit(&c->tail, memory_order_acquire);
        if (head - tail < SHM_SLOTS) break;
        wait_change(s, &c->tail, &c->tail_sleepers, tail, to, "to make room (read what we sent)");
    }
    return c->data[head % SHM_SLOTS];
}

void shm_commit(Shm *s, int to, size_t nfloats) {
    ShmChan *c = chan(s, s->rank, to);
    uint32_t head = atomic_load_explicit(&c->head, memory_order_relaxed);
    c->len[head % SHM_SLOTS] = (uint32_t)nfloats;
    atomic_store(&c->head, head + 1);  // publishes the piece and its length
    wake(&c->head, &c->head_sleepers);
    s->bytes_sent += nfloats * sizeof(float);
}

const float *shm_peek(Shm *s, int from, size_t nfloats) {
    ShmChan *c = chan(s, from, s->rank);
    uint32_t tail = atomic_load_explicit(&c->tail, memory_order_relaxed);  // only we write it
    for (;;) {
        uint32_t head = atomic_load_explicit(&c->head, memory_order_acquire);
        if (head != tail) break;
        wait_change(s, &c->head, &c->head_sleepers, head, from, "to send");
    }
    uint32_t got = c->len[tail % SHM_SLOTS];
    if (got != nfloats) {
        char what[160];
        describe(s, what, sizeof what);
        die("every rank must call the same collectives, in the same order, with the same sizes",
            "rank %d in %s expected a piece of %zu floats from rank %d and got %u", s->rank, what, nfloats, from,
            got);
    }
    return c->data[tail % SHM_SLOTS];
}

void shm_release(Shm *s, int from) {
    ShmChan *c = chan(s, from, s->rank);
    uint32_t tail = atomic_load_explicit(&c->tail, memory_order_relaxed);
    s->bytes_recv += (size_t)c->len[tail % SHM_SLOTS] * sizeof(float);
    atomic_store(&c->tail, tail + 1);
    wake(&c->tail, &c->tail_sleepers);
}

float *shm_try_reserve(Shm *s, int to) {
    ShmChan *c = chan(s, s->rank, to);
    uint32_t head = atomic_load_explicit(&c->head, memory_order_relaxed);
    if (head - atomic_load_explicit(&c->tail, memory_order_acquire) >= SHM_SLOTS) return NULL;
    return c->data[head % SHM_SLOTS];
}

const float *shm_try_peek(Shm *s, int from, size_t nfloats) {
    ShmChan *c = chan(s, from, s->rank);
    uint32_t tail = atomic_load_explicit(&c->tail, memory_order_relaxed);
    if (atomic_load_explicit(&c->head, memory_order_acquire) == tail) return NULL;
    return shm_peek(s, from, nfloats);  // there: checks its length, without waiting
}

void shm_idle(Shm *s, ShmIdle *idle, int peer, const char *waiting_for) {
    if (idle->rounds++ == 0) idle->t0 = shm_now_s();
    double waited = shm_now_s() - idle->t0;
    if (waited < s->spin_s) {
        cpu_relax();
        sched_yield();
        return;
    }
    long us = 20L << (idle->rounds / 64 < 6 ? idle->rounds / 64 : 6);  // 20 us .. 1.28 ms
    struct timespec ts = {0, (us > 1000 ? 1000 : us) * 1000};
    note_waiting(s, peer);
    nanosleep(&ts, NULL);
    check_peers(s, peer, waiting_for, waited);
}

void shm_idle_done(Shm *s) { note_done_waiting(s); }
