// shm.c — see shm.h: the segment, its layout (shm_internal.h), creating it with or without a
// name, a name held by one job at a time, sweeping the names a killed run left behind,
// attaching and detaching. The channel calls and their waits are in shm_chan.c.
#include "shm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/harness/check.h"
#include "common/harness/hash.h"
#include "shm_internal.h"

#define SHM_MAGIC 0x62616c6472616873ull  // "shardlab"

size_t shm_header_bytes(void) { return (sizeof(ShmHeader) + 4095) & ~(size_t)4095; }

size_t shm_segment_bytes(int world) { return shm_header_bytes() + (size_t)world * world * sizeof(ShmChan); }

// ---------------------------------------------------------------------------------------
// Processes: who made a segment, and whether it still runs
// ---------------------------------------------------------------------------------------

double shm_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);  // one clock for every process of the machine
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int shm_process_alive(int pid) { return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH); }

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

// A process's state letter from /proc/<pid>/stat ('T': stopped), or 0 if unknown.
char shm_process_state(int pid) {
    char text[1024];
    const char *p = proc_stat_fields(pid, text, sizeof text);
    return p ? p[0] : 0;
}

// The process that created the segment still runs: same pid, and it started when the
// creator did (else the pid now belongs to someone else).
static int creator_alive(const ShmHeader *h) {
    if (!shm_process_alive(h->creator_pid)) return 0;
    uint64_t start = process_start(h->creator_pid);
    return !h->creator_start || !start || start == h->creator_start;
}

// ---------------------------------------------------------------------------------------
// Making memory: the header written whole, its magic last
// ---------------------------------------------------------------------------------------

// Size fd to `bytes` and map its header. NULL, with a message, if it cannot.
static ShmHeader *map_new(int fd, const char *what, size_t bytes, char *err, size_t nerr) {
    if (ftruncate(fd, (off_t)bytes) != 0) {
        snprintf(err, nerr, "cannot size shared memory %s to %zu bytes: %s", what, bytes, strerror(errno));
        return NULL;
    }
    // Only the header is touched here; channel pages stay unallocated until a pair of ranks
    // first talks (ftruncate gives zero-filled memory: every counter starts at 0).
    ShmHeader *h = mmap(NULL, shm_header_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) {
        snprintf(err, nerr, "cannot map shared memory %s: %s", what, strerror(errno));
        return NULL;
    }
    return h;
}

// The creator's part of the header, then the magic: the memory is ready. Unmaps h.
static void header_ready(ShmHeader *h, int world) {
    h->world = world;
    h->creator_pid = (int32_t)getpid();
    h->creator_start = process_start(getpid());
    h->layout = SHM_LAYOUT;
    atomic_store(&h->magic, SHM_MAGIC);
    munmap(h, shm_header_bytes());
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
    ShmHeader *h = map_new(fd, "(memfd)", shm_segment_bytes(world), err, nerr);
    if (!h) {
        close(fd);
        return -1;
    }
    header_ready(h, world);
    return fd;
}

// What rank 0 writes of its job into a named segment's header.
static void record_job(ShmJobRecord *r, const ShmJob *job) {
    r->created_unix = (int64_t)time(NULL);
    snprintf(r->lab, sizeof r->lab, "%s", job->lab);
    r->args_hash = fnv1a64(job->args_len ? job->args : "", job->args_len, FNV1A64_INIT);
    r->args_len = (uint32_t)(job->args_len < sizeof r->args ? job->args_len : sizeof r->args);
    if (r->args_len) memcpy(r->args, job->args, r->args_len);
    if (!getcwd(r->cwd, sizeof r->cwd)) r->cwd[0] = 0;
    snprintf(r->run_dir, sizeof r->run_dir, "%s", job->run_dir ? job->run_dir : "");
}

// ---------------------------------------------------------------------------------------
// Names: one job at a time (shm.h)
// ---------------------------------------------------------------------------------------

// The file behind a name: glibc's shm_open opens /dev/shm/<name> (a name starts with '/').
static void name_path(const char *name, char *out, size_t n) { snprintf(out, n, "/dev/shm%s", name); }

// Whether `name` still holds the file that st describes, not one made since under that name.
static int holds(const char *name, const struct stat *st) {
    char path[320];
    struct stat now;
    name_path(name, path, sizeof path);
    return lstat(path, &now) == 0 && now.st_ino == st->st_ino && now.st_dev == st->st_dev;
}

// Remove `name` if it still holds the file open on fd. Whoever removes or replaces a name
// holds that file's lock from this check to the unlink, so two processes that both found
// one dead segment cannot remove it one after the other: the second would take away the
// segment that the first made in between.
static void remove_if_held(const char *name, int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0 || flock(fd, LOCK_EX) != 0) return;
    if (holds(name, &st) && shm_unlink(name) != 0 && errno != ENOENT)
        fprintf(stderr, "%s: warning: cannot remove /dev/shm%s: %s\n", check_context(), name, strerror(errno));
    flock(fd, LOCK_UN);
}

// A new file under a name of this process alone, /shardlab-<uid>-new-<pid>-<n> (shm_sweep
// finds it should we die), to be written whole before it gets its real name (publish).
// Returns its descriptor, or -1 with a message.
static int create_unlisted(char *tmp, size_t ntmp, char *err, size_t nerr) {
    for (int n = 0; n < 100; n++) {
        snprintf(tmp, ntmp, "/shardlab-%d-new-%d-%d", (int)getuid(), (int)getpid(), n);
        int fd = shm_open(tmp, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (fd >= 0) return fd;
        if (errno != EEXIST) break;
    }
    snprintf(err, nerr, "cannot create shared memory /dev/shm%s: %s", tmp, strerror(errno));
    return -1;
}

// Give the file at tmp the name `name` too, unless a file has it: a link is made whole or
// not at all, so nobody ever sees a segment under `name` whose header is not written yet.
// 0 done, 1 the name is taken, -1 with a message.
static int publish(const char *tmp, const char *name, char *err, size_t nerr) {
    char from[320], to[320];
    name_path(tmp, from, sizeof from);
    name_path(name, to, sizeof to);
    if (link(from, to) == 0) return 0;
    if (errno == EEXIST) return 1;
    snprintf(err, nerr, "cannot name shared memory /dev/shm%s: %s", name, strerror(errno));
    return -1;
}

typedef enum { NAME_BUSY, NAME_DEAD, NAME_UNKNOWN } NameState;

// What the file open on fd is: the segment (or page) of a job whose creator runs, its
// header mapped read-only at *h for the caller to unmap; one whose creator is gone; or
// nothing to judge: another user's file, not a regular one, or a header not written yet
// (by another build: this one names a segment only once written), unless that has been so
// for a minute, when its maker must have died.
static NameState judge(int fd, struct stat *st, ShmHeader **h) {
    *h = NULL;
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode) || st->st_uid != geteuid()) return NAME_UNKNOWN;
    NameState unwritten = time(NULL) - st->st_mtime > 60 ? NAME_DEAD : NAME_UNKNOWN;
    if ((size_t)st->st_size < shm_header_bytes()) return unwritten;
    ShmHeader *m = mmap(NULL, shm_header_bytes(), PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return NAME_UNKNOWN;
    NameState state = atomic_load(&m->magic) != SHM_MAGIC ? unwritten : creator_alive(m) ? NAME_BUSY : NAME_DEAD;
    if (state == NAME_BUSY) *h = m;
    else munmap(m, shm_header_bytes());
    return state;
}

void shm_sweep(void) {
    DIR *dir = opendir("/dev/shm");
    for (struct dirent *e; dir && (e = readdir(dir));) {
        if (strncmp(e->d_name, "shardlab-", 9) != 0 || strlen(e->d_name) > 200) continue;
        char name[300];
        snprintf(name, sizeof name, "/%s", e->d_name);
        // O_NONBLOCK: a FIFO someone put there must not hang us (judge refuses it).
        int fd = shm_open(name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK, 0);
        if (fd < 0) continue;
        struct stat st;
        ShmHeader *h;
        NameState state = judge(fd, &st, &h);
        if (h) munmap(h, shm_header_bytes());
        if (state == NAME_DEAD) remove_if_held(name, fd);
        close(fd);
    }
    if (dir) closedir(dir);
}

void shm_note_stop(int fd, int sig) {
    ShmHeader *h = mmap(NULL, shm_header_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) return;  // only the wording of the ranks' messages depends on it
    atomic_store(&h->stop_signal, sig);
    munmap(h, shm_header_bytes());
}

// ---------------------------------------------------------------------------------------
// Telling a rank why it may not join
// ---------------------------------------------------------------------------------------

// The run directory of a job's rank 0: the folder of the rank-0.jsonl it holds open, as
// /proc/<pid>/fd shows (known once it has made it), else the one it was given, else "".
static void job_run_dir(const ShmHeader *h, char *out, size_t n) {
    snprintf(out, n, "%.*s", (int)strnlen(h->job.run_dir, sizeof h->job.run_dir), h->job.run_dir);
    char fds[64];
    snprintf(fds, sizeof fds, "/proc/%d/fd", (int)h->creator_pid);
    DIR *dir = opendir(fds);
    const char *tail = "/rank-0.jsonl";
    size_t tail_len = strlen(tail);
    for (struct dirent *e; dir && (e = readdir(dir));) {
        char link[128], target[1024];
        snprintf(link, sizeof link, "%s/%.32s", fds, e->d_name);
        ssize_t len = readlink(link, target, sizeof target - 1);
        if (len <= (ssize_t)tail_len) continue;
        target[len] = 0;
        if (strcmp(target + len - tail_len, tail) != 0) continue;
        size_t keep = (size_t)len - tail_len < n ? (size_t)len - tail_len : n - 1;  // (a message's, cut if long)
        memcpy(out, target, keep);
        out[keep] = 0;
        break;
    }
    if (dir) closedir(dir);
}

// The job a header records, for a message: "ddp with 2 ranks (1 joined so far), rank 0 is
// process 1234, started 2026-12-02 14:02:11 in /home/me/shardlab, run directory ...".
static void describe_job(const ShmHeader *h, char *out, size_t n) {
    if (h->layout != SHM_LAYOUT) {
        snprintf(out, n, "a job of another build of shardlab, whose rank 0 is process %d", (int)h->creator_pid);
        return;
    }
    int joined = 0;
    for (int r = 0; r < h->world && r < SHM_MAX_RANKS; r++) joined += atomic_load(&h->pid[r]) != 0;
    char state[48] = "all joined", when[32] = "at an unknown time", dir[512];
    if (!h->joined && joined < h->world) snprintf(state, sizeof state, "%d joined so far", joined);
    time_t t = (time_t)h->job.created_unix;
    struct tm tm;
    if (localtime_r(&t, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    job_run_dir(h, dir, sizeof dir);
    snprintf(out, n, "%.*s with %d ranks (%s), rank 0 is process %d, started %s in %.160s%s%.200s",
             (int)strnlen(h->job.lab, sizeof h->job.lab), h->job.lab, (int)h->world, state, (int)h->creator_pid,
             when, h->job.cwd[0] ? h->job.cwd : "?", dir[0] ? ", run directory " : "", dir);
}

// Argument i of args (len bytes, each argument ending in NUL), or NULL past the end (or
// where a cut made it incomplete).
static const char *arg_at(const char *args, size_t len, int i) {
    size_t at = 0;
    for (int k = 0; at < len; k++) {
        size_t l = strnlen(args + at, len - at);
        if (at + l >= len) return NULL;
        if (k == i) return args + at;
        at += l + 1;
    }
    return NULL;
}

// Argument i for a message, after the option it is the value of ("--seed 2"), or "nothing".
static void show_arg(const char *args, size_t len, int i, char *out, size_t n) {
    const char *a = arg_at(args, len, i), *before = i > 0 ? arg_at(args, len, i - 1) : NULL;
    if (!a) snprintf(out, n, "nothing");
    else if (before && before[0] == '-' && a[0] != '-') snprintf(out, n, "'%.60s %.60s'", before, a);
    else snprintf(out, n, "'%.60s'", a);
}

// Adds "; " and a formatted clause to the text at out (n bytes in all).
static void add_clause(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add_clause(char *out, size_t n, const char *fmt, ...) {
    size_t len = strlen(out);
    if (len && len + 2 < n) strcpy(out + len, "; "), len += 2;
    va_list ap;
    va_start(ap, fmt);
    if (len < n) vsnprintf(out + len, n - len, fmt, ap);
    va_end(ap);
}

// What makes the job in h another one than this rank's, in words: "" when nothing does.
static void job_difference(const ShmHeader *h, const ShmJob *job, int world, char *out, size_t n) {
    out[0] = 0;
    if (h->layout != SHM_LAYOUT) {
        snprintf(out, n, "it was made by another build of shardlab (header layout %d, this build's %d)", (int)h->layout,
                 SHM_LAYOUT);
        return;
    }
    const ShmJobRecord *r = &h->job;
    if (strncmp(r->lab, job->lab, sizeof r->lab) != 0)
        add_clause(out, n, "it runs %.*s, this rank %s", (int)strnlen(r->lab, sizeof r->lab), r->lab, job->lab);
    if (h->world != world) add_clause(out, n, "it has %d ranks, this rank's WORLD_SIZE is %d", (int)h->world, world);
    if (fnv1a64(job->args_len ? job->args : "", job->args_len, FNV1A64_INIT) != r->args_hash) {
        int i = 0;
        for (;; i++) {
            const char *there = arg_at(r->args, r->args_len, i), *here = arg_at(job->args, job->args_len, i);
            if (!there || !here || strcmp(there, here) != 0) break;
        }
        char there[140], here[140];
        show_arg(r->args, r->args_len, i, there, sizeof there);
        show_arg(job->args, job->args_len, i, here, sizeof here);
        if (!arg_at(r->args, r->args_len, i) && r->args_len == sizeof r->args)
            add_clause(out, n, "its arguments differ from this rank's after the first %zu bytes", sizeof r->args);
        else
            add_clause(out, n, "its arguments differ from this rank's at argument %d: %s there, %s here", i + 1, there,
                       here);
    }
}

// A rank 0 finding its name held by a job that runs: stop, and leave that job alone.
static void name_taken(const ShmHeader *h, const char *name, const ShmJob *job) __attribute__((noreturn));
static void name_taken(const ShmHeader *h, const char *name, const ShmJob *job) {
    char desc[600], hint[300];
    describe_job(h, desc, sizeof desc);
    snprintf(hint, sizeof hint,
             "start every rank of this job with %s; a job's shared memory is never taken from it while its rank 0 runs",
             job->fix);
    die(hint, "rank 0: %s is taken: another job uses its shared memory /dev/shm%s: %s", job->key, name, desc);
}

// A rank reaching another job's segment.
static void other_job(const ShmHeader *h, const ShmJob *job, int rank, const char *diff) __attribute__((noreturn));
static void other_job(const ShmHeader *h, const ShmJob *job, int rank, const char *diff) {
    char desc[600], hint[300];
    describe_job(h, desc, sizeof desc);
    snprintf(hint, sizeof hint,
             "start every rank of a job with the same lab, WORLD_SIZE and arguments; to run a second job beside that one, "
             "start all its ranks with %s",
             job->fix);
    die(hint, "rank %d: the job on %s is another one: %s. That job: %s", rank, job->key, diff, desc);
}

// A rank whose place in its job's segment another process holds.
static void place_taken(const ShmHeader *h, const ShmJob *job, int rank, int holder) __attribute__((noreturn));
static void place_taken(const ShmHeader *h, const ShmJob *job, int rank, int holder) {
    char desc[600], hint[300];
    describe_job(h, desc, sizeof desc);
    snprintf(hint, sizeof hint,
             "give each process of a job its own RANK; if this is a second job, start all its ranks with %s", job->fix);
    die(hint, "rank %d: the job on %s has its rank %d already: process %d%s; this process (%d) cannot be a second one. "
              "That job: %s",
        rank, job->key, rank, holder, shm_process_alive(holder) ? "" : " (it has exited since)", (int)getpid(), desc);
}

// ---------------------------------------------------------------------------------------
// Attaching
// ---------------------------------------------------------------------------------------

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

// This rank's place is claimed once, by one process. job: a named segment's, for the message
// (NULL: the launcher's memory).
static void attach_end(Shm *s, const ShmJob *job) {
    s->bytes = shm_segment_bytes(s->world);
    int32_t expected = 0;
    if (!atomic_compare_exchange_strong(&s->hdr->pid[s->rank], &expected, (int32_t)getpid())) {
        if (job) place_taken(s->hdr, job, s->rank, expected);
        die("give each process its own RANK", "rank %d is already taken by process %d", s->rank, expected);
    }
    s->scratch = malloc_check(SHM_PIECE_FLOATS * sizeof(float));
}

// Rank 0: make the job's segment and give it the name, unless a job that runs has it.
static void make_named(Shm *s, const char *name, const ShmJob *job, double deadline) {
    char tmp[64], err[256];
    size_t bytes = shm_segment_bytes(s->world);
    int fd = create_unlisted(tmp, sizeof tmp, err, sizeof err);
    ShmHeader *h = fd < 0 ? NULL : map_new(fd, tmp, bytes, err, sizeof err);
    if (!h) {
        if (fd >= 0) shm_unlink(tmp);
        die("is /dev/shm mounted and writable?", "rank 0: %s", err);
    }
    record_job(&h->job, job);
    header_ready(h, s->world);
    int replaced = 0;
    for (;;) {
        int rc = publish(tmp, name, err, sizeof err);
        if (rc == 0) break;
        if (rc < 0) {
            shm_unlink(tmp);
            die("is /dev/shm mounted and writable?", "rank 0: %s", err);
        }
        // Taken: by a job whose rank 0 runs (never removed: we stop), or by one that is gone.
        int other = shm_open(name, O_RDONLY | O_NOFOLLOW, 0);
        if (other < 0 && errno == ENOENT && ++replaced <= 3) continue;  // removed since: try again
        struct stat st;
        ShmHeader *oh = NULL;
        NameState state = other < 0 ? NAME_UNKNOWN : judge(other, &st, &oh);
        if (state == NAME_BUSY) {
            shm_unlink(tmp);
            name_taken(oh, name, job);
        }
        if (state == NAME_DEAD) remove_if_held(name, other);
        if (other >= 0) close(other);
        if (state == NAME_DEAD && ++replaced <= 3) continue;  // (a few times: another rank 0 may be at it too)
        if (shm_now_s() > deadline) {
            shm_unlink(tmp);
            if (state == NAME_DEAD)
                die("remove it (rm) and start the job again", "rank 0: cannot replace /dev/shm%s, left by a job that is gone",
                    name);
            die("if no job of yours uses it, remove it (rm) and start the job again",
                "rank 0: /dev/shm%s is there, and is no shared memory of a job that can be told alive or gone", name);
        }
        usleep(10000);
    }
    shm_unlink(tmp);  // the memory keeps its real name
    struct stat st;
    if (fstat(fd, &st) == 0) s->name_dev = (uint64_t)st.st_dev, s->name_ino = (uint64_t)st.st_ino;
    s->created = 1;
    s->hdr = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (s->hdr == MAP_FAILED)
        die("is /dev/shm full?", "rank 0 cannot map shared memory /dev/shm%s (%zu bytes): %s", name, bytes, strerror(errno));
}

// Every other rank: wait for the job's segment, and map it if it is this rank's job.
static void join_named(Shm *s, const char *name, const ShmJob *job, double deadline) {
    size_t bytes = shm_segment_bytes(s->world);
    for (;;) {
        int fd = shm_open(name, O_RDWR, 0);
        struct stat st;
        ShmHeader *h = NULL;
        // A segment whose creator is gone waits to be replaced by our rank 0.
        if (fd >= 0 && judge(fd, &st, &h) == NAME_BUSY) {
            char diff[600];
            job_difference(h, job, s->world, diff, sizeof diff);
            if (diff[0]) other_job(h, job, s->rank, diff);
            if (h->joined) place_taken(h, job, s->rank, atomic_load(&h->pid[s->rank]));
            munmap(h, shm_header_bytes());
            if ((size_t)st.st_size == bytes) {
                s->hdr = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
                close(fd);
                if (s->hdr == MAP_FAILED)
                    die("is /dev/shm full?", "rank %d cannot map shared memory /dev/shm%s (%zu bytes): %s", s->rank,
                        name, bytes, strerror(errno));
                return;
            }
        }
        if (fd >= 0) close(fd);
        if (shm_now_s() > deadline)
            die("start every rank with the same WORLD_SIZE, MASTER_ADDR and MASTER_PORT, or use 'shardlab run'",
                "rank %d: shared memory /dev/shm%s for %d ranks did not appear within %.0f s", s->rank, name, s->world,
                s->timeout_s);
        usleep(10000);
    }
}

void shm_attach(Shm *s, const char *name, const ShmJob *job, int rank, int world, double timeout_s, int create) {
    attach_begin(s, name, rank, world, timeout_s);
    double deadline = shm_now_s() + timeout_s;
    if (create) make_named(s, name, job, deadline);
    else join_named(s, name, job, deadline);
    attach_end(s, job);
}

void shm_joined(Shm *s) {
    if (!s->created) return;
    char tmp[64], err[256];
    int fd = create_unlisted(tmp, sizeof tmp, err, sizeof err);
    ShmHeader *p = fd < 0 ? NULL : map_new(fd, tmp, shm_header_bytes(), err, sizeof err);
    if (!p) {
        // The segment keeps the name: the port stays taken, at the cost of its memory if
        // every rank is SIGKILLed.
        fprintf(stderr, "%s: warning: %s\n", check_context(), err);
        if (fd >= 0) shm_unlink(tmp), close(fd);
        return;
    }
    p->job = s->hdr->job;
    for (int r = 0; r < s->world; r++) atomic_store(&p->pid[r], atomic_load(&s->hdr->pid[r]));
    p->joined = 1;
    header_ready(p, s->world);
    // The swap, under our segment's lock (remove_if_held says why).
    char from[320], to[320];
    name_path(tmp, from, sizeof from);
    name_path(s->name, to, sizeof to);
    int cur = shm_open(s->name, O_RDONLY, 0);
    struct stat st, page;
    if (cur >= 0 && fstat(cur, &st) == 0 && (uint64_t)st.st_ino == s->name_ino && (uint64_t)st.st_dev == s->name_dev &&
        flock(cur, LOCK_EX) == 0) {
        if (holds(s->name, &st) && fstat(fd, &page) == 0 && rename(from, to) == 0)
            s->name_dev = (uint64_t)page.st_dev, s->name_ino = (uint64_t)page.st_ino;
        flock(cur, LOCK_UN);
    }
    if (cur >= 0) close(cur);
    shm_unlink(tmp);  // if the swap did not happen
    close(fd);
}

void shm_release_name(Shm *s) {
    if (!s->created) return;
    s->created = 0;
    int fd = shm_open(s->name, O_RDONLY, 0);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && (uint64_t)st.st_ino == s->name_ino && (uint64_t)st.st_dev == s->name_dev)
        remove_if_held(s->name, fd);
    if (fd >= 0) close(fd);
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
    attach_end(s, NULL);
}

void shm_detach(Shm *s) {
    if (s->hdr) munmap(s->hdr, s->bytes);
    free(s->scratch);
    memset(s, 0, sizeof *s);
}
