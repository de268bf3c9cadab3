// dist_backend.h — what a collectives backend is to dist.c, as Ops is to the model: a struct
// of functions that dist_shm.c (shared memory, on the CPU or staged through the host for ranks
// sharing a GPU) and dist_nccl.c (NCCL, a GPU per rank) fill. Private to dist*.c: labs call
// dist.h.
//
#ifndef SHARDLAB_DIST_BACKEND_H
#define SHARDLAB_DIST_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "dist.h"

struct DistBackend {
    const char *name;     // what the run log calls it: "shm" (staged or not), "nccl"
    int one_rank_groups;  // runs the calls of a group of one itself (else dist.c copies)
    // Meets the other ranks and waits until all are there (dist_init, the world's group built).
    void (*join)(Dist *d, const char *lab);
    // A new group's own resources, its ranks known (NCCL: a communicator split from the
    // world's). NULL: none.
    void (*group)(Dist *d, DistGroup *g);
    // One call on w->group: returns the algorithm's name, and the bytes this rank sent and
    // received.
    const char *(*run)(Dist *d, DistWork *w, uint64_t *sent, uint64_t *recv);
    // A batch of sends and receives (dist_p2p_progress's meaning of until; ops[i].moved
    // counts what is done).
    void (*p2p)(Dist *d, DistGroup *g, DistP2p *ops, int nops, int until);
    // Tells the other ranks this one failed: their waits end with msg instead of a timeout.
    void (*abort)(Dist *d, const char *msg);
    // Lets go of what join and run kept.
    void (*destroy)(Dist *d);
};

extern const DistBackend dist_shm_backend, dist_shm_staged_backend, dist_nccl_backend;

// A call's buffer in the 4-byte words the shm algorithms move (algos.h): n floats, or n/2
// words of two bf16s each (the bf16 entry points made sure n is even).
static inline size_t dist_work_words(const DistWork *w) { return w->dtype == DIST_BF16 ? w->n / 2 : w->n; }
// How many words of in and out a call reads and writes on this rank.
void dist_call_lengths(const DistWork *w, size_t *in_len, size_t *out_len);
// die()'s hook once a rank has joined: every other rank hears why this one stopped.
void dist_on_die(const char *msg, void *arg);
// MASTER_PORT (default 29500), and what names this job when no launcher made its shared
// memory: MASTER_PORT, else the job mpirun or srun started (in words too, in what).
long dist_master_port(void);
void dist_job_key(char *out, size_t n, char *what, size_t nwhat);

#endif
