// shm.c — see shm.h: the segment, its layout (shm_internal.h), creating it with or without a
// name, sweeping the ones a killed run left behind, attaching and detaching. The channel
// calls and their waits are in shm_chan.c.
#include "shm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "shm_internal.h"

#define SHM_MAGIC 0x62616c6472616873ull  // "shardlab"

size_t shm_header_bytes(void) { return (sizeof(ShmHeader) + 4095) & ~(size_t)4095; }

size_t shm_segment_bytes(int world) { return shm_header_bytes() + (size_t)world * world * sizeof(ShmChan); }

// ---------------------------------------------------------------------------------------
// Creating and attaching
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

// Size a new segment's memory and write its header. Returns 0, or -1 with a message.
static int shm_init(int fd, const char *what, int world, char *err, size_t nerr) {
    size_t bytes = shm_segment_bytes(world);
    if (ftruncate(fd, (off_t)bytes) != 0) {
        snprintf(err, nerr, "cannot size shared memory %s to %zu bytes: %s", what, bytes, strerror(errno));
        return -1;
    }
    // Only the header is touched here; channel pages stay unallocated until a pair of ranks
    // first talks (ftruncate gives zero-filled memory: every counter starts at 0).
    ShmHeader *h = mmap(NULL, shm_header_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) {
        snprintf(err, nerr, "cannot map shared memory %s: %s", what, strerror(errno));
        return -1;
    }
    h->world = world;
    h->creator_pid = (int32_t)getpid();
    h->creator_start = process_start(getpid());
    atomic_store(&h->magic, SHM_MAGIC);
    munmap(h, shm_header_bytes());
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
        if ((size_t)st.st_size >= shm_header_bytes()) {
            ShmHeader *h = mmap(NULL, shm_header_bytes(), PROT_READ, MAP_SHARED, fd, 0);
            if (h == MAP_FAILED) {
                close(fd);
                continue;
            }
            // A header not written yet is a segment being made; unless it stayed so long
            // that its maker must have died in between.
            dead = atomic_load(&h->magic) == SHM_MAGIC ? !creator_alive(h) : time(NULL) - st.st_mtime > 60;
            munmap(h, shm_header_bytes());
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
    ShmHeader *h = mmap(NULL, shm_header_bytes(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (h == MAP_FAILED) return;  // only the wording of the ranks' messages depends on it
    atomic_store(&h->stop_signal, sig);
    munmap(h, shm_header_bytes());
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
    double deadline = shm_now_s() + timeout_s;
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
        if (shm_now_s() > deadline)
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
