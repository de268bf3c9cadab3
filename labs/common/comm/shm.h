// shm.h — the shared-memory transport under the shm backend: channels between rank processes.
//
// The ranks of a run are processes on one machine. They share one POSIX shared-memory
// segment (/dev/shm/<name>) holding a header and a CHANNEL for every ordered pair of ranks
// (from, to). A channel is a little queue of SHM_SLOTS slots, each holding one PIECE of up to
// SHM_PIECE_FLOATS floats:
//
//        rank 'from'                         channel from -> to                  rank 'to'
//     shm_reserve() a free slot   ->   [ slot 0 | slot 1 | slot 2 | slot 3 ]   ->  shm_peek() the oldest piece
//     write the piece into it           head: pieces written (by 'from')           read it (or add it) in place
//     shm_commit()                      tail: pieces read    (by 'to')             shm_release()
//
// Every collective (ring.c, direct.c) is written with these four calls. A big message goes
// through in pieces, so sender and receiver work at the same time (pipelining), and the
// channel needs only a few slots whatever the message size.
//
// Waiting: a rank that finds the slot it needs full (or the piece it needs not yet there)
// first polls (up to 200 us, yielding the core between polls), then sleeps in the kernel
// (futex) until the peer wakes it. Sleeping matters when ranks outnumber cores: a spinning
// waiter would steal the core from the very rank it waits for. Every wait has a deadline ($SHARDLAB_TIMEOUT_S, default 120 s); the
// message then names this rank, the collective, its step and the rank that holds it up: the
// peer it waited for, or, when that peer itself waits, the first rank down the chain of
// waiters that is not waiting or not running (a stopped rank holds up the whole ring). A wait
// also ends early, with a clear message, if the peer process is gone or another rank aborted.
#ifndef SHARDLAB_SHM_H
#define SHARDLAB_SHM_H

#include <stddef.h>
#include <stdint.h>

#define SHM_MAX_RANKS 8
#define SHM_SLOTS 4
#define SHM_PIECE_FLOATS (64 * 1024)  // 256 KiB: 4x fewer handoffs than 64 KiB, 2x the busbw here

typedef struct ShmHeader ShmHeader;
typedef struct ShmChan ShmChan;

// What this rank is doing, for the message of a wait that times out.
typedef struct {
    const char *coll;   // "all_reduce"
    const char *phase;  // "ring reduce-scatter", "direct", ...
    int step, nsteps;   // step of phase (1-based; 0: no steps)
} ShmWhat;

typedef struct {
    ShmHeader *hdr;
    size_t bytes;          // mapping size
    int rank, world;
    double timeout_s;
    double spin_s;         // seconds to poll before sleeping
    ShmWhat what;
    uint64_t bytes_sent, bytes_recv;  // totals over the life of the mapping
    float *scratch;        // one piece of private scratch for the algorithms
    int created;           // we made the name and have not removed it yet
    uint64_t name_dev, name_ino;  // what the name holds then: our segment, or its page (shm_joined)
    char name[64];
} Shm;

size_t shm_segment_bytes(int world);

// Where the memory lives. A name in /dev/shm outlives every process that could remove it
// if they are all killed (SIGKILL) before one does: 16 MiB for 4 ranks, until reboot. So:
//   - 'shardlab run' makes memory with no name (memfd) and hands it to its ranks as an
//     inherited descriptor (SHARDLAB_SHM_FD): it goes with the last process that holds it;
//   - ranks started by mpirun, srun or a shell meet at a name (/dev/shm/shardlab-<uid>-<job>)
//     that rank 0 makes. A name holds one job at a time, from rank 0's start to its end:
//
//       rank 0 makes the segment under a name of its own, writes its header (who it is: pid
//       and start time; the job: lab, world, arguments) and only then links it to the name,
//       which fails if the name is taken. A taken name is never removed while its maker
//       runs: rank 0 stops, naming the job that has it. One whose maker is gone is replaced.
//       Every other rank maps it and stops if it is another job's (lab, world or arguments
//       differ) or if its rank's place is taken (each is claimed once, by one process).
//       Once every rank is in, rank 0 swaps the segment's name for one page that holds the
//       same header: the channels' memory goes with the last rank, however the run ends,
//       while the name stays taken until rank 0 ends (shm_release_name), so a second job on
//       that port stops rather than meeting the first one's late ranks.
//
//     SIGKILL leaves that page (or, before everyone joined, the segment): the next rank 0 on
//     that name replaces it, and shm_sweep() (at each 'shardlab run') removes this user's
//     shardlab-* names whose creator is gone.
// Create memory for `world` ranks with no name; returns its descriptor (close-on-exec: the
// caller clears that in the ranks it starts), or -1 with a message in err.
int shm_create_unnamed(int world, char *err, size_t nerr);
// Remove this user's /dev/shm/shardlab-* segments whose creator is gone: the pid in the
// header runs no more, or runs a process that started later (the pid was reused).
void shm_sweep(void);

// Who joins a named segment: rank 0 records it in the header, every other rank is compared
// with it; the messages of the ranks turned away quote key and fix.
typedef struct {
    const char *lab;       // "ddp"
    const char *args;      // this rank's arguments, the program's name left out, each ending in NUL
    size_t args_len;       // bytes at args
    const char *run_dir;   // the run directory given at start (SHARDLAB_RUN_DIR), or NULL
    const char *key;       // what named the segment: "MASTER_PORT=29501", "MASTER_PORT 29500 (the default)"
    const char *fix;       // what gives a second job a name of its own: "MASTER_PORT=29501 (free here)"
} ShmJob;

// Map the segment `name` as `rank`, waiting up to timeout_s for it to appear; rank 0 makes
// it when `create` is set (see above). Dies with a clear message if it cannot, if the name
// is another job's, or if this rank's place in it is taken.
void shm_attach(Shm *s, const char *name, const ShmJob *job, int rank, int world, double timeout_s, int create);
// The maker, once every rank has mapped the segment: its name now holds one page (above).
void shm_joined(Shm *s);
// The maker, as it ends or fails: remove the name, if it still holds our segment or page.
void shm_release_name(Shm *s);
// Map the memory behind descriptor fd (shm_create_unnamed in the launcher), and close fd.
void shm_attach_fd(Shm *s, int fd, int rank, int world, double timeout_s);
void shm_detach(Shm *s);
// Tell every other rank that this one failed (they stop waiting and report msg).
void shm_abort(Shm *s, const char *msg);
// The launcher, before it passes a stop signal (Ctrl-C, SIGTERM, SIGHUP) on to the ranks:
// a rank then waiting for a peer that already stopped says it was interrupted, not that
// the peer failed (each stops at the end of its own step, not all at once).
void shm_note_stop(int fd, int sig);

static inline size_t shm_pieces(size_t n) { return (n + SHM_PIECE_FLOATS - 1) / SHM_PIECE_FLOATS; }

// Sending to rank `to`: wait for a free slot, fill it (up to SHM_PIECE_FLOATS floats), commit.
float *shm_reserve(Shm *s, int to);
void shm_commit(Shm *s, int to, size_t nfloats);
// Receiving from rank `from`: wait for the next piece, which must hold exactly nfloats
// floats (else the ranks disagree about the collective: die), use it, release it.
const float *shm_peek(Shm *s, int from, size_t nfloats);
void shm_release(Shm *s, int from);

// The same without waiting, for code that moves several messages at once (dist_p2p): NULL
// when the slot is not free or the piece not there yet.
float *shm_try_reserve(Shm *s, int to);
const float *shm_try_peek(Shm *s, int from, size_t nfloats);
// Such code calls shm_idle() each time a pass over its messages moved nothing: it polls
// (yielding the core), then sleeps a little longer each time (up to 1 ms), and has the same
// deadline and checks as every other wait. Zero the ShmIdle when something moved, and call
// shm_idle_done() when every message has moved (this rank no longer waits for anyone).
typedef struct {
    double t0;
    int rounds;
} ShmIdle;
void shm_idle(Shm *s, ShmIdle *idle, int peer, const char *waiting_for);
void shm_idle_done(Shm *s);

static inline void shm_set_what(Shm *s, const char *coll, const char *phase, int step, int nsteps) {
    s->what = (ShmWhat){coll, phase, step, nsteps};
}

#endif
