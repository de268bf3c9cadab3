// shm.c — see shm.h: the segment, its channels, and waits that sleep and have deadlines.
#include "shm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define SHM_MAGIC 0x62616c6472616873ull  // "shardlab"

struct ShmHeader {
    _Atomic uint64_t magic;          // written last by the creator: the segment is ready
    int32_t world;
    int32_t creator_pid;
    uint64_t creator_start;          // when the creator started (/proc/<pid>/stat): a pid is reused
    _Atomic int32_t pid[SHM_MAX_RANKS];  // each rank's process, 0 until it attached
    _Atomic int32_t aborted;         // 0, or 1 + the rank that failed
    char abort_msg[512];
    // Who waits for whom, so a timed-out wait can name the rank that holds everyone up and
    // not just its neighbour (in a ring, rank 1 waits for rank 0, which waits for the stuck
    // rank 3): waiting[r] is 1 + the rank r sleeps waiting for (0: none), beat_us[r] when r
    // last woke up in that wait (it wakes every 50 ms, so a stale beat means it is not running).
    _Atomic int32_t waiting[SHM_MAX_RANKS];
    _Atomic int64_t beat_us[SHM_MAX_RANKS];
    _Atomic int32_t stop_signal;     // the launcher is stopping the run on this signal (Ctrl-C...)
};

// One direction between two ranks. head and tail live on their own cache lines: the sender
// writes one, the receiver the other.
struct ShmChan {
    _Alignas(64) _Atomic uint32_t head;  // pieces committed by the sender
    _Atomic uint32_t head_sleepers;      // receivers asleep on head (0 or 1)
    _Alignas(64) _Atomic uint32_t tail;  // pieces released by the receiver
    _Atomic uint32_t tail_sleepers;
    _Alignas(64) uint32_t len[SHM_SLOTS];  // floats in each slot's piece
    _Alignas(64) float data[SHM_SLOTS][SHM_PIECE_FLOATS];
};

static size_t header_bytes(void) { return (sizeof(ShmHeader) + 4095) & ~(size_t)4095; }

size_t shm_segment_bytes(int world) { return header_bytes() + (size_t)world * world * sizeof(ShmChan); }

static ShmChan *chan(const Shm *s, int from, int to) {
    return (ShmChan *)((char *)s->hdr + header_bytes()) + (size_t)from * s->world + to;
}

// ---------------------------------------------------------------------------------------
// Creating and attaching
// ---------------------------------------------------------------------------------------

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);  // one clock for every process of the machine
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int process_alive(int pid) { return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH); }

// /proc/<pid>/stat read into text, from its third field on (the state letter): the name
// before it, in parentheses, may hold anything, spaces and parentheses included. NULL if unknown.
static const char *proc_stat_fields(int pid, char *text, size_t n) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t got = fread(text, 1, n - 1, f);
    fclose(f);
    text[got] = 0;
    char *paren = strrchr(text, ')');
    return paren && paren[1] == ' ' ? paren + 2 : NULL;
}

// When process pid started, in clock ticks since boot (field 22 of /proc/<pid>/stat), or 0.
static uint64_t process_start(int pid) {
    char text[1024];
    const char *p = proc_stat_fields(pid, text, sizeof text);
    for (int field = 3; p && field < 22; field++) p = strchr(p, ' '), p = p ? p + 1 : NULL;
    return p ? strtoull(p, NULL, 10) : 0;
}

// The process that created the segment still runs: same pid, and it started when the
// creator did (else the pid now belongs to someone else).
static int creator_alive(const ShmHeader *h) {
    if (!process_alive(h->creator_pid)) return 0;
    uint64_t start = process_start(h->creator_pid);
    return !h->creator_start || !start || start == h->creator_start;
}

// Size a new segment's memory and write its header. Returns 0, or -1 with a message.
static int shm_init(int fd, const char *what, int world, char *err, size_t nerr) {
    size_t bytes = shm_segment_bytes(world);
    if (ftruncate(fd, (off_t)bytes) != 0) {
        snprintf(err, nerr, "cannot size shared memory %s to %zu bytes: %s", what, bytes, strerror(errno));
        return -1;
    }
    // Only the header is touched here; channel pages stay unallocated until a pair of ranks
    // first talks (ftruncate gives zero-filled memory: every counter starts at 0).
    ShmHeader *h = mmap(NULL, header_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) {
        snprintf(err, nerr, "cannot map shared memory %s: %s", what, strerror(errno));
        return -1;
    }
    h->world = world;
    h->creator_pid = (int32_t)getpid();
    h->creator_start = process_start(getpid());
    atomic_store(&h->magic, SHM_MAGIC);
    munmap(h, header_bytes());
    return 0;
}

int shm_create(const char *name, int world, char *err, size_t nerr) {
    if (world < 1 || world > SHM_MAX_RANKS) {
        snprintf(err, nerr, "world size %d is outside 1..%d", world, SHM_MAX_RANKS);
        return -1;
    }
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        snprintf(err, nerr, "cannot create shared memory /dev/shm%s: %s", name, strerror(errno));
        return -1;
    }
    char what[96];
    snprintf(what, sizeof what, "/dev/shm%s", name);
    int rc = shm_init(fd, what, world, err, nerr);
    close(fd);
    if (rc != 0) shm_unlink(name);
    return rc;
}

int shm_create_unnamed(int world, char *err, size_t nerr) {
    if (world < 1 || world > SHM_MAX_RANKS) {
        snprintf(err, nerr, "world size %d is outside 1..%d", world, SHM_MAX_RANKS);
        return -1;
    }
    int fd = memfd_create("shardlab", MFD_CLOEXEC);
    if (fd < 0) {
        snprintf(err, nerr, "cannot create shared memory (memfd_create): %s", strerror(errno));
        return -1;
    }
    if (shm_init(fd, "(memfd)", world, err, nerr) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

void shm_sweep(void) {
    DIR *dir = opendir("/dev/shm");
    for (struct dirent *e; dir && (e = readdir(dir));) {
        if (strncmp(e->d_name, "shardlab-", 9) != 0 || strlen(e->d_name) > 200) continue;
        char name[300];
        snprintf(name, sizeof name, "/%s", e->d_name);
        // O_NONBLOCK: a FIFO someone put there must not hang us (it is then refused below).
        int fd = shm_open(name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0);
        struct stat st;
        if (fd < 0) continue;
        if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
            close(fd);  // not a segment, or another user's: not ours to judge
            continue;
        }
        int dead;
        if ((size_t)st.st_size >= header_bytes()) {
            ShmHeader *h = mmap(NULL, header_bytes(), PROT_READ, MAP_SHARED, fd, 0);
            if (h == MAP_FAILED) {
                close(fd);
                continue;
            }
            // A header not written yet is a segment being made; unless it stayed so long
            // that its maker must have died in between.
            dead = atomic_load(&h->magic) == SHM_MAGIC ? !creator_alive(h) : time(NULL) - st.st_mtime > 60;
            munmap(h, header_bytes());
        } else {
            dead = time(NULL) - st.st_mtime > 60;
        }
        close(fd);
        // Still the file we looked at (not one made since under the same name)?
        struct stat now;
        char path[300];
        snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
        if (dead && lstat(path, &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev) shm_unlink(name);
    }
    if (dir) closedir(dir);
}

void shm_note_stop(int fd, int sig) {
    ShmHeader *h = mmap(NULL, header_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) return;  // only the wording of the ranks' messages depends on it
    atomic_store(&h->stop_signal, sig);
    munmap(h, header_bytes());
}

void shm_remove(const char *name) {
    if (shm_unlink(name) != 0 && errno != ENOENT)
        fprintf(stderr, "%s: warning: cannot remove /dev/shm%s: %s\n", check_context(), name, strerror(errno));
}

// What both ways of attaching do first and last.
static void attach_begin(Shm *s, const char *name, int rank, int world, double timeout_s) {
    memset(s, 0, sizeof *s);
    snprintf(s->name, sizeof s->name, "%s", name);
    s->rank = rank;
    s->world = world;
    s->timeout_s = timeout_s;
    // Poll for up to 200 us before sleeping: a piece takes ~20 us to copy, and a futex sleep
    // and wake-up costs more than that (1 MiB all-reduce on 2 ranks: 7 GB/s busbw with a 5 us
    // spin, 17 GB/s with 200 us). Not when ranks outnumber cores: then the peer we wait for
    // may need this very core, and we sleep almost at once.
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    s->spin_s = world <= cores ? 200e-6 : 0.5e-6;
}

static void attach_end(Shm *s) {
    s->bytes = shm_segment_bytes(s->world);
    int32_t expected = 0;
    if (!atomic_compare_exchange_strong(&s->hdr->pid[s->rank], &expected, (int32_t)getpid()))
        die("give each process its own RANK", "rank %d is already taken by process %d", s->rank, expected);
    s->scratch = malloc_check(SHM_PIECE_FLOATS * sizeof(float));
}

void shm_attach(Shm *s, const char *name, int rank, int world, double timeout_s, int create) {
    attach_begin(s, name, rank, world, timeout_s);
    char err[256];
    if (create) {
        shm_remove(name);  // a segment left by a crashed run with the same name
        if (shm_create(name, world, err, sizeof err) != 0) die("is /dev/shm mounted and writable?", "%s", err);
        s->created = 1;
    }
    size_t bytes = shm_segment_bytes(world);
    double deadline = now_s() + timeout_s;
    for (;;) {
        int fd = shm_open(name, O_RDWR, 0);
        if (fd >= 0) {
            struct stat st;
            if (fstat(fd, &st) == 0 && (size_t)st.st_size == bytes) {
                s->hdr = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                close(fd);
                if (s->hdr == MAP_FAILED)
                    die("is /dev/shm full?", "rank %d cannot map shared memory /dev/shm%s (%zu bytes): %s", rank,
                        name, bytes, strerror(errno));
                // Ready, for our world size, and made by a live process (not a stale segment).
                if (atomic_load(&s->hdr->magic) == SHM_MAGIC && s->hdr->world == world && creator_alive(s->hdr))
                    break;
                munmap(s->hdr, bytes);
                s->hdr = NULL;
            } else {
                close(fd);
            }
        }
        if (now_s() > deadline)
            die("start every rank with the same WORLD_SIZE, MASTER_ADDR and MASTER_PORT, or use 'shardlab run'",
                "rank %d: shared memory /dev/shm%s for %d ranks did not appear within %.0f s", rank, name, world,
                timeout_s);
        usleep(10000);
    }
    attach_end(s);
}

void shm_attach_fd(Shm *s, int fd, int rank, int world, double timeout_s) {
    attach_begin(s, "(from the launcher)", rank, world, timeout_s);
    size_t bytes = shm_segment_bytes(world);
    struct stat st;
    const char *hint = "SHARDLAB_SHM_FD is set by 'shardlab run' for its ranks; unset it";
    if (fstat(fd, &st) != 0) die(hint, "rank %d: SHARDLAB_SHM_FD=%d is not open: %s", rank, fd, strerror(errno));
    if (!S_ISREG(st.st_mode) || (size_t)st.st_size != bytes)
        die(hint, "rank %d: SHARDLAB_SHM_FD=%d is not the shared memory of %d ranks (%lld bytes, expected %zu)", rank,
            fd, world, (long long)st.st_size, bytes);
    s->hdr = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (s->hdr == MAP_FAILED)
        die("is memory short?", "rank %d cannot map the shared memory (%zu bytes): %s", rank, bytes, strerror(errno));
    close(fd);  // the mapping keeps the memory; no process after us needs the descriptor
    if (atomic_load(&s->hdr->magic) != SHM_MAGIC || s->hdr->world != world)
        die(hint, "rank %d: SHARDLAB_SHM_FD=%d holds no shared memory of %d ranks", rank, fd, world);
    attach_end(s);
}

void shm_detach(Shm *s) {
    if (s->hdr) munmap(s->hdr, s->bytes);
    free(s->scratch);
    memset(s, 0, sizeof *s);
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

// A process's state letter from /proc/<pid>/stat ('T': stopped), or 0 if unknown.
static char process_state(int pid) {
    char text[1024];
    const char *p = proc_stat_fields(pid, text, sizeof text);
    return p ? p[0] : 0;
}

static void note_waiting(Shm *s, int peer) {
    atomic_store(&s->hdr->beat_us[s->rank], (int64_t)(now_s() * 1e6));
    atomic_store(&s->hdr->waiting[s->rank], peer + 1);
}

static void note_done_waiting(Shm *s) { atomic_store(&s->hdr->waiting[s->rank], 0); }

// The rank that holds this wait up: follow who waits for whom from `peer` until a rank that
// is not waiting (computing, or stuck outside a collective), is not running (stopped: its
// beat is stale) or is gone. A cycle of live waiters (ranks calling different collectives)
// has no such rank: then it is `peer`. chain gets "rank 0 for rank 3, " for the message.
static int stuck_rank(const Shm *s, int peer, char *chain, size_t n) {
    double stale_s = s->timeout_s / 4 < 0.5 ? s->timeout_s / 4 : 0.5;
    int64_t now_us = (int64_t)(now_s() * 1e6);
    chain[0] = 0;
    int r = peer;
    for (int hops = 0; hops < s->world; hops++) {
        int32_t pid = atomic_load(&s->hdr->pid[r]), next = atomic_load(&s->hdr->waiting[r]) - 1;
        int running = now_us - atomic_load(&s->hdr->beat_us[r]) < (int64_t)(stale_s * 1e6);
        if (!pid || !process_alive(pid) || next < 0 || next >= s->world || next == r || !running) return r;
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
    if (pid && !process_alive(pid) && stop) {
        // Every rank got the signal; each stops at the end of its step, and the peer reached
        // its end first. Not a failure of the peer: say it as the interruption it is.
        describe(s, what, sizeof what);
        die("the run was stopped on purpose; 'shardlab run' exits 128 + the signal",
            "rank %d: interrupted by signal %d in %s: rank %d stopped first, at the end of its step", s->rank,
            (int)stop, what, peer);
    }
    if (pid && !process_alive(pid)) {
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
        if (stuck_pid && process_state(stuck_pid) == 'T')
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
    double t0 = now_s();
    for (int i = 0;; i++) {
        if (atomic_load_explicit(word, memory_order_acquire) != old) return;
        cpu_relax();
        if ((i & 15) == 15) {
            if (now_s() - t0 > s->spin_s) break;
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
        check_peers(s, peer, waiting_for, now_s() - t0);
    }
}

static void wake(_Atomic uint32_t *word, _Atomic uint32_t *sleepers) {
    if (atomic_load(sleepers) > 0) syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
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
    if (idle->rounds++ == 0) idle->t0 = now_s();
    double waited = now_s() - idle->t0;
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
