// dist.h — collectives between ranks: the one API every distributed lab calls.
//
// What it gives a lab: a Dist per rank (dist_init) and groups of its ranks (dist_group); on
// a group, blocking collectives (dist_all_reduce() and the others below), asynchronous ones
// (dist_all_reduce_start() ... dist_wait()), bf16 versions for mixed precision, point to
// point (dist_send, dist_recv, dist_p2p), and the records of every call (dist_drain_records).
//
// The path of one call, an all-reduce on the CPU. Only the _start calls use the
// communication thread. A blocking call waits for that thread's queue to empty, then runs
// on the caller's thread, so the calls run in call order either way. Each row names its file from labs/:
//
//   common/comm/dist.c       dist_all_reduce_start()                  dist_all_reduce()
//                                |                                        |
//   common/comm/dist.c       start() -> submit(): w joins the queue   run_now(): drain_queue(),
//                                |    (the first call starts the thread)  |  then on the caller's thread
//   common/comm/dist.c       comm_thread(): one call at a time, in order  |
//                                +---------------> run_work() <-----------+
//                                                     |  d->be->run, the backend's function (dist_backend.h)
//   common/comm/dist_shm.c   run_host() -> run_counted() -> run_shm()
//   common/comm/dist_shm.c   use_direct(): the direct sum up to direct_max_bytes, else the ring
//                                                     |
//   03-collectives/ring.c    ring_all_reduce() = ring_reduce_scatter() + ring_all_gather()
//   03-collectives/direct.c  direct_all_reduce(): every rank adds all buffers, in one step
//                                                     |
//   common/comm/shm_chan.c   shm_reserve(), shm_commit() to the right neighbour;
//                            shm_peek(), shm_release() from the left one
//
// Under NCCL, d->be->run is common/comm/dist_nccl.c's run_nccl() instead. labs/DESIGN.md,
// Collectives, draws the same path and says more.
//
// A rank learns who it is from the environment, as under torchrun: RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT ('shardlab run' sets them; so can a
// shell). Under mpirun (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE) or srun
// (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, ...) their variables stand in for the missing
// ones (dist_env). Without any, the process is a world of one.
//
// Collectives act on float buffers of any length, within a GROUP of ranks (the world, or a
// subset, so that a tensor-parallel group and a data-parallel group can coexist). Every rank
// of the group must call the same collectives in the same order with the same sizes. Sums
// are bitwise identical on every rank of the group.
//
//   all_reduce      buf[n] <- sum over ranks of buf[n]                     (in place)
//   reduce_scatter  out[chunk r] <- sum over ranks of in[n], chunk r only
//   all_gather      out[n] <- every rank's chunk, in[chunk r] from rank r
//   broadcast       buf[n] <- root's buf[n]
//   reduce          out[n] on root <- sum over ranks of in[n]
//   all_to_all      out[block q] <- rank q's in[block r]: block q of in goes to rank q
//                   (n/p floats each; all_to_allv: counts of each rank's own)
//   send, recv      n floats to / from one peer
//   p2p             several sends and receives at once, none waiting for another
//   barrier         nobody leaves before everybody arrived
//
// Chunks: n floats split over p ranks, the first n % p chunks one float longer (dist_chunk),
// so any n works, even n < p (some chunks are then empty).
//
// bf16 (bf16.h), for mixed precision: reduce_scatter and all_gather also move bf16 buffers,
// with the float versions' meaning. n counts bf16 elements and must divide by 2p, so every
// chunk is n/p elements, an even number: the shm algorithms move 4-byte words, two bf16s to
// a word, and only their additions change (each hop adds in fp32 and rounds to bf16, nearest
// even, as NCCL does). The callers (ZeRO, FSDP) pad their buffers; any other n dies with a
// message. Buffers start on a 4-byte boundary (malloc and cuda_alloc give that, and chunk
// offsets are even), which is checked too.
//
// Backends, chosen by the rank's device (dist_init), each a struct of functions
// (dist_backend.h) in a file of its own:
//   "shm"   on the CPU, and on GPUs that ranks share: processes on one machine share memory
//           (shm.h; the algorithms in 03-collectives/ring.c and 03-collectives/direct.c;
//           common/comm/dist_shm.c). Buffers in GPU memory are staged through host memory
//           around each call.
//   "nccl"  one GPU per rank, on one or many nodes (gpu.h): NCCL's collectives on a
//           communication stream; host buffers (a loss, a name) are staged through the GPU
//           (common/comm/dist_nccl.c).
// Buffers are the caller's device memory (or host memory) either way. An asynchronous
// collective runs on the rank's communication thread, in the order the calls were made, while
// the caller computes; with NCCL that thread queues the call on NCCL's stream and waits for it
// with the deadline, polling NCCL's asynchronous errors.
//
// Accounting: every call, synchronous or not, adds the bytes this rank sent and received to
// d->stats and leaves a DistRecord (name, algorithm, dtype, times, bytes) that the lab drains into
// span events of its run log.
#ifndef SHARDLAB_DIST_H
#define SHARDLAB_DIST_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/cuda/gpu.h"
#include "common/model/bf16.h"
#include "common/model/device.h"
#include "links.h"
#include "shm.h"

#define DIST_MAX_RANKS SHM_MAX_RANKS

typedef enum { DIST_ALGO_AUTO, DIST_ALGO_RING, DIST_ALGO_DIRECT } DistAlgo;

typedef enum {
    DIST_ALL_REDUCE,
    DIST_REDUCE_SCATTER,
    DIST_ALL_GATHER,
    DIST_BROADCAST,
    DIST_REDUCE,
    DIST_ALL_TO_ALL,
    DIST_SEND,
    DIST_RECV,
    DIST_BARRIER,
} DistColl;

// The element type of a call's buffers.
typedef enum { DIST_F32, DIST_BF16 } DistDtype;

typedef struct Dist Dist;
typedef struct DistBackend DistBackend;  // dist_backend.h: the backends, private to dist*.c

typedef struct {
    Dist *dist;
    int rank, size;               // this rank's place in the group, and the group's size
    int ranks[DIST_MAX_RANKS];    // group rank -> world rank
    CudaComm *nccl;               // backend "nccl": the group's communicator
} DistGroup;

// One finished call, for a span event.
typedef struct {
    DistColl coll;
    const char *algo;          // "ring", "direct", "chain", "p2p"
    int tag;                   // the caller's label (e.g. a bucket index), -1 if none
    DistDtype dtype;           // dist_dtype_name(): "f32" or "bf16"
    size_t count;              // elements of dtype in the call's buffer (n)
    int64_t issued_us;         // when the caller asked for it (dist_*_start, or the blocking call)
    int64_t t0_us, t1_us;      // when it ran: wall clock, us since the epoch
    int64_t waited_from_us;    // from when until t1_us the caller waited for it, not computing
                               // (a blocking call: issued_us; dist_wait, a waiting p2p call: when
                               // it began); 0: the caller never waited for it
    uint64_t bytes_sent, bytes_recv;
} DistRecord;

typedef struct {
    uint64_t calls, bytes_sent, bytes_recv;
} DistStats;

// An asynchronous collective: the caller owns it and must not touch its buffers until
// dist_wait() returns.
typedef struct DistWork {
    DistColl coll;
    DistGroup *group;
    DistDtype dtype;
    const void *in;            // float * or bf16 *, as dtype says
    void *out;
    size_t n;                  // elements of dtype
    int peer;                  // root or peer
    const size_t *send_counts, *recv_counts;  // all_to_all: floats to and from each group rank
    int tag;
    int64_t issued_us;
    int64_t waited_from_us;    // dist_wait: when the caller began to wait (0: not yet)
    DistRecord rec;            // filled when done
    _Atomic int done;
    struct DistWork *next;
} DistWork;

// Who this rank is, from the environment (see the top of this file).
typedef struct {
    int rank, world, local_rank, local_world;
    const char *source;        // "torchrun", "Open MPI", "Slurm" or "none": who set them
} DistEnv;

struct Dist {
    int rank, world, local_rank, local_world;
    const char *backend;       // "shm" or "nccl"
    DistAlgo algo;             // DIST_ALGO_AUTO: direct up to direct_max_bytes, ring above
    size_t direct_max_bytes;
    double timeout_s;          // every wait's deadline ($SHARDLAB_TIMEOUT_S, default 120)
    DistGroup world_group;
    DistStats stats;           // totals since dist_init, finished calls only

    const Link *link;          // --link: the interconnect each call is stretched to (links.h), or NULL
    double link_scale;         // --link-scale
    int64_t link_busy_us[DIST_MAX_RANKS];  // --link: when the link to each world rank is free again

    // ---- private ----
    const DistBackend *be;     // shm, shm staged through the host, or nccl (dist_backend.h)
    const Device *dev;
    Shm shm;
    CudaComm *nccl;            // the world's communicator (backend "nccl")
    float *stage_host;         // shm on a GPU: host copies of device buffers
    size_t stage_host_n;
    float *stage_dev[4];       // nccl: device copies of host buffers, padded chunks
    size_t stage_dev_n[4];
    int64_t calls_started;     // for the hang test hook
    int hang_at;               // $SHARDLAB_TEST_HANG "rank:call": this rank stops at that call
    pthread_mutex_t lock;
    pthread_cond_t cond;
    pthread_t thread;
    int thread_running, stopping;
    DistWork *queue_head, *queue_tail;
    DistRecord *records;
    size_t nrecords, cap_records;
};

// Reads the environment; dies with a clear message if it is inconsistent ("WORLD_SIZE=9: ...").
DistEnv dist_env(const char *lab);
// Joins the other ranks and waits until all are there. dev is the rank's device (NULL: the
// CPU): a GPU of its own -> nccl; the CPU or a shared GPU -> shm (all ranks on one machine).
// lab names the run in messages.
void dist_init(Dist *d, const char *lab, const Device *dev);
// --link: every call from now on takes at least k alpha + bytes / beta of link l (links.h: its
// ring's steps over the call's group, the bytes this rank sent), times scale; the backend's own
// time counts toward it. The spans then show the emulated link. NULL: the backend as it is.
void dist_emulate_link(Dist *d, const Link *l, double scale);
void dist_destroy(Dist *d);
// Tell the other ranks this one failed (dist_init arranges for die() to do it).
void dist_abort(Dist *d, const char *msg);

// A group of `size` world ranks, listed in group order; this rank must be one of them.
void dist_group(Dist *d, DistGroup *g, const int *world_ranks, int size);

// Chunk c of n floats split over p ranks: offset and length in floats.
void dist_chunk(size_t n, int p, int c, size_t *off, size_t *len);

// "auto", "ring", "direct" -> DistAlgo; -1 if none of them.
int dist_algo_parse(const char *s);
const char *dist_coll_name(DistColl c);
// "f32", "bf16"
const char *dist_dtype_name(DistDtype t);

void dist_all_reduce(DistGroup *g, float *buf, size_t n);
void dist_reduce_scatter(DistGroup *g, const float *in, float *out, size_t n);
void dist_all_gather(DistGroup *g, const float *in, float *out, size_t n);
void dist_broadcast(DistGroup *g, float *buf, size_t n, int root);
void dist_reduce(DistGroup *g, const float *in, float *out, size_t n, int root);
void dist_send(DistGroup *g, const float *buf, size_t n, int peer);
void dist_recv(DistGroup *g, float *buf, size_t n, int peer);
void dist_barrier(DistGroup *g);
// in[n] holds p blocks of n/p floats (n a multiple of p), block q for group rank q; out[n]
// gets block r of every rank's in, in rank order: a transpose of the group's blocks. out and
// in do not overlap.
void dist_all_to_all(DistGroup *g, const float *in, float *out, size_t n);
// The same with a count per rank (expert parallelism's dispatch: tokens routed to each rank):
// in holds send_counts[q] floats for rank q, one block after the other, and out gets
// recv_counts[q] from rank q; recv_counts[q] must equal what rank q sends to this one. Any
// count may be 0.
void dist_all_to_allv(DistGroup *g, const float *in, const size_t *send_counts, float *out, const size_t *recv_counts);

// The sum over the group's ranks of one double per rank (a loss, a squared norm), in rank
// order, the same bits on every rank. Collectives move floats: each rank sends x as a float
// and the float of the remainder; the pairs are added up in double. The _local form is the
// same sum over values one rank already holds (x[r] for each rank r), for code that must
// agree with it bitwise.
double dist_sum_over_ranks(DistGroup *g, double x);
double dist_sum_over_ranks_local(const double *x, int n);

// Asynchronous: start now, complete later with dist_wait(w). tag labels the record.
void dist_all_reduce_start(DistGroup *g, float *buf, size_t n, int tag, DistWork *w);
void dist_reduce_scatter_start(DistGroup *g, const float *in, float *out, size_t n, int tag, DistWork *w);
void dist_all_gather_start(DistGroup *g, const float *in, float *out, size_t n, int tag, DistWork *w);
void dist_wait(DistWork *w);

// bf16 buffers (see the top of this file): n bf16 elements, n divisible by 2 * g->size.
// In place as for floats: reduce_scatter's out may be in + r*n/p, all_gather's in may be
// out + r*n/p.
void dist_reduce_scatter_bf16(DistGroup *g, const bf16 *in, bf16 *out, size_t n);
void dist_all_gather_bf16(DistGroup *g, const bf16 *in, bf16 *out, size_t n);
void dist_reduce_scatter_bf16_start(DistGroup *g, const bf16 *in, bf16 *out, size_t n, int tag, DistWork *w);
void dist_all_gather_bf16_start(DistGroup *g, const bf16 *in, bf16 *out, size_t n, int tag, DistWork *w);

// Point to point, batched (NCCL's ncclGroupStart/End, torch's batch_isend_irecv): the sends
// and receives of ops[] all progress together, and the call returns when all are done. Two
// pipeline neighbours that send each other a big message at the same moment (an activation
// one way, a gradient the other) would wait for each other forever with a blocking send each;
// in one batch they cannot. Messages between two ranks are matched in order: the k-th message
// rank a sends to rank b is the k-th that b receives from a, so both must agree on that
// order. peer is a rank of the group other than this one; tag labels the record.
#define DIST_P2P_MAX 16
typedef struct {
    int send;      // 1: buf[0..n) goes to peer; 0: buf[0..n) is filled from peer
    int peer;
    float *buf;
    size_t n;
    int tag;
    size_t moved;  // dist_p2p_progress(): floats moved so far (0 to start)
    int64_t issued_us, t0_us;  // its record's times (set by the first call that sees it)
    int64_t link_ready_us;     // --link: when the emulated link delivers it (a send; 0: not yet known)
    int queued;                // nccl: on the communicator's stream, not yet waited for
} DistP2p;
void dist_p2p(DistGroup *g, const DistP2p *ops, int nops);
// The same, in steps that need not finish: moves what it can of every op (ops[i].moved keeps
// count across calls) and returns after one pass that waits for nothing if until < 0, else
// when ops[until] is done (until = nops: all of them). An op leaves its record when done. A
// pipeline stage keeps its outgoing messages moving this way while it computes, and blocks
// only in a receive, or at the end of a step. With NCCL the ops not yet queued go on the
// communicator's stream as one group; until < 0 returns at once (they move while the GPU
// computes on its own stream), any other until waits for all of them. Ranks sharing a GPU
// (the shm backend, staging through the host) finish every call's ops.
void dist_p2p_progress(DistGroup *g, DistP2p *ops, int nops, int until);

// Moves up to max finished-call records (oldest first) into out; returns how many.
size_t dist_drain_records(Dist *d, DistRecord *out, size_t max);

#endif
