// nccl.cu — the NCCL half of gpu.h: communicators, their stream, and waits with a deadline.
//
// Defines (see gpu.h): CudaComm, cuda_nccl_version(), cuda_nccl_unique_id(), cuda_nccl_init(),
//          cuda_nccl_split(), cuda_nccl_destroy(), cuda_nccl_abort(), cuda_nccl_call(),
//          cuda_nccl_group_start(), cuda_nccl_group_end(), cuda_nccl_wait().
//
// This is the "nccl" backend of dist.h: one GPU per rank, one or many machines.
//
// Why a separate stream. Every kernel and cuBLAS call of a rank runs on its COMPUTE stream
// (device.cu). If NCCL ran there too, the all-reduce of layer 5's gradients would wait behind
// the backward pass of layer 4, and nothing would overlap. So each communicator has its own
// stream, and two CUDA events tie the two streams together where they share buffers:
//
//     compute  ... bwd layer 5 ─┬─ bwd layer 4 ─── bwd layer 3 ───────────┬── optimizer ...
//                    (ready) record                                       wait
//                               │                                          │
//     comm                      └─wait─ all_reduce(grads 5) ─ record (done) ┘
//
//   cuda_nccl_call()  records `ready` on the compute stream and makes the comm stream wait
//                     for it: NCCL reads the gradients only once the kernels that wrote them
//                     are done. The compute stream is not held up.
//   cuda_nccl_wait()  records `done` on the comm stream, waits for it on the host (with a
//                     deadline, below), then makes the compute stream wait for it too: the
//                     optimizer's kernels see the reduced gradients.
//
// Why non-blocking communicators, polled. A plain ncclCommInitRank blocks until every rank
// has joined; if one rank died, the others would hang there forever, and a collective whose
// peer died spins on the GPU forever. labs/DESIGN.md, Faults, says every wait has a deadline
// ($SHARDLAB_TIMEOUT_S, default 120 s) and ends with a message. So communicators are created
// with config.blocking = 0: NCCL calls return at once (perhaps with ncclInProgress) and we
// poll ncclCommGetAsyncError, sleeping briefly between polls, until the communicator is ready,
// reports an error, or the deadline passes. On error or timeout we call ncclCommAbort, which
// stops NCCL's kernels and threads, so the process can report and exit instead of hanging.
//
// Many nodes. ncclGetUniqueId makes the id every rank passes to ncclCommInitRankConfig; it
// names the bootstrap address where rank 0 listens. With NCCL_COMM_ID=host:port in the
// environment (the launcher or the user sets it from MASTER_ADDR), every rank computes the
// same id by itself and rank 0 runs the bootstrap at host:port, so ranks on other machines
// find it without shardlab sending the id around. That is how `mpirun`/`srun` runs work.
//
// Errors. Setup calls that cannot reasonably fail (creating a stream or an event) go through
// cudaCheck/ncclCheck, which die() with a HINT line, as llm.c does. Everything that can fail
// because of another rank or the network returns -1 with the reason in err, so dist.c can
// name the rank, the collective and the peer.
#include <cuda_runtime.h>
#include <nccl.h>

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "context.cuh"  // cudaCheck

extern "C" {
#include "common/harness/check.h"
#include "gpu.h"
}

// ---------------------------------------------------------------------------------------
// Checked calls for setup that cannot reasonably fail
// ---------------------------------------------------------------------------------------

// cudaCheck comes from context.cuh.
static void nccl_check_at(ncclResult_t r, const char *what, const char *file, int line) {
    if (r != ncclSuccess)
        die_at(file, line, "run with NCCL_DEBUG=WARN (or INFO) to see NCCL's own account", "NCCL error in %s: %s (%s)",
               what, ncclGetErrorString(r), ncclGetLastError(NULL));
}
#define ncclCheck(call) nccl_check_at((call), #call, __FILE__, __LINE__)

// ---------------------------------------------------------------------------------------
// The communicator
// ---------------------------------------------------------------------------------------

struct CudaComm {
    ncclComm_t comm;     // NULL once aborted after an error: later calls fail at once
    cudaStream_t stream; // where this communicator's NCCL calls run
    cudaEvent_t ready;   // recorded on the compute stream before each call
    cudaEvent_t done;    // recorded on this stream by cuda_nccl_wait()
    int rank, size;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

// The deadline of calls that take none (cuda_nccl_call, group_end, destroy), as
// labs/DESIGN.md, Faults, has it: $SHARDLAB_TIMEOUT_S, default 120 s. dist.c has already rejected a malformed value.
static double default_timeout_s(void) {
    const char *t = getenv("SHARDLAB_TIMEOUT_S");
    double s = t && *t ? strtod(t, NULL) : 0.0;
    return s > 0 ? s : 120.0;
}

// "<what>: <NCCL's name for r> (<NCCL's last message>)" into err.
static void nccl_error(char *err, size_t nerr, const char *what, ncclResult_t r) {
    const char *last = ncclGetLastError(NULL);
    snprintf(err, nerr, "%s: %s%s%s%s", what, ncclGetErrorString(r), last && *last ? " (" : "", last ? last : "",
             last && *last ? ")" : "");
}

// Poll a non-blocking communicator until it leaves ncclInProgress. state is what the NCCL
// call that started the work returned. Returns 0 when it reached ncclSuccess; -1 with the
// reason in err on an error or when the deadline passes (the caller aborts the communicator).
static int poll_until_ready(ncclComm_t comm, ncclResult_t state, double deadline, double timeout_s,
                            long pause_us, const char *what, char *err, size_t nerr) {
    while (state == ncclInProgress) {
        if (now_s() > deadline) {
            snprintf(err, nerr, "%s: timed out after %.0f s (a rank did not join or is stuck; "
                                "NCCL_DEBUG=INFO shows where)", what, timeout_s);
            return -1;
        }
        sleep_us(pause_us);
        ncclResult_t r = ncclCommGetAsyncError(comm, &state);
        if (r != ncclSuccess) state = r;
    }
    if (state != ncclSuccess) {
        nccl_error(err, nerr, what, state);
        return -1;
    }
    return 0;
}

// The stream and the events around a communicator that is ready.
static CudaComm *comm_wrap(ncclComm_t comm, int rank, int size) {
    CudaComm *c = (CudaComm *)calloc_check(1, sizeof *c);
    c->comm = comm;
    c->rank = rank;
    c->size = size;
    cudaCheck(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
    // Events for ordering only: no timestamps, so recording them costs next to nothing.
    cudaCheck(cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming));
    return c;
}

static void comm_free(CudaComm *c) {
    // No checks: this also runs after a failure, when the context may hold a sticky error.
    (void)cudaEventDestroy(c->ready);
    (void)cudaEventDestroy(c->done);
    (void)cudaStreamDestroy(c->stream);
    free(c);
}

// After an NCCL error or a timeout the communicator cannot be trusted: abort it (this stops
// its kernels), keep the struct so later calls fail with a message instead of a crash.
static void comm_abort_nccl(CudaComm *c) {
    if (c->comm) (void)ncclCommAbort(c->comm);
    c->comm = NULL;
}

static ncclConfig_t nonblocking_config(void) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    return cfg;
}

// ---------------------------------------------------------------------------------------
// Creation and destruction
// ---------------------------------------------------------------------------------------

extern "C" const char *cuda_nccl_version(void) {
    static char text[32];
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) return "none";
    // NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9, major*1000 + ... before.
    if (v >= 10000) snprintf(text, sizeof text, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    else snprintf(text, sizeof text, "%d.%d.%d", v / 1000, v / 100 % 10, v % 100);
    return text;
}

extern "C" int cuda_nccl_unique_id(unsigned char id[CUDA_NCCL_ID_BYTES], char *err, size_t nerr) {
    static_assert(sizeof(ncclUniqueId) == CUDA_NCCL_ID_BYTES, "CUDA_NCCL_ID_BYTES must be NCCL_UNIQUE_ID_BYTES");
    ncclUniqueId uid;
    ncclResult_t r = ncclGetUniqueId(&uid);
    if (r != ncclSuccess) {
        const char *addr = getenv("NCCL_COMM_ID");
        char what[160];
        snprintf(what, sizeof what, "ncclGetUniqueId%s%s%s", addr ? " (NCCL_COMM_ID=" : "", addr ? addr : "",
                 addr ? ")" : "");
        nccl_error(err, nerr, what, r);
        return -1;
    }
    memcpy(id, &uid, CUDA_NCCL_ID_BYTES);
    return 0;
}

extern "C" CudaComm *cuda_nccl_init(const unsigned char id[CUDA_NCCL_ID_BYTES], int nranks, int rank,
                                    double timeout_s, char *err, size_t nerr) {
    ncclUniqueId uid;
    memcpy(&uid, id, CUDA_NCCL_ID_BYTES);
    ncclConfig_t cfg = nonblocking_config();
    ncclComm_t comm = NULL;
    double deadline = now_s() + timeout_s;
    // Returns at once; the joining (bootstrap, topology, connections) goes on in NCCL's
    // threads while we poll, so a rank that never comes cannot hang us.
    ncclResult_t r = ncclCommInitRankConfig(&comm, nranks, uid, rank, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
        char what[96];
        snprintf(what, sizeof what, "ncclCommInitRankConfig (rank %d of %d)", rank, nranks);
        nccl_error(err, nerr, what, r);
        if (comm) (void)ncclCommAbort(comm);
        return NULL;
    }
    char what[96];
    snprintf(what, sizeof what, "NCCL init of rank %d of %d", rank, nranks);
    if (poll_until_ready(comm, r, deadline, timeout_s, 1000, what, err, nerr) != 0) {
        (void)ncclCommAbort(comm);
        return NULL;
    }
    return comm_wrap(comm, rank, nranks);
}

extern "C" CudaComm *cuda_nccl_split(CudaComm *parent, int color, int key, double timeout_s, char *err,
                                     size_t nerr) {
    // A negative color is NCCL_SPLIT_NOCOLOR: this rank joins no communicator, and gets NULL
    // with an empty err (it still has to take part in the split, which is collective).
    if (err && nerr) err[0] = '\0';
    if (!parent->comm) {
        snprintf(err, nerr, "ncclCommSplit: the parent communicator was aborted after an earlier error");
        return NULL;
    }
    ncclConfig_t cfg = nonblocking_config();
    ncclComm_t comm = NULL;
    double deadline = now_s() + timeout_s;
    ncclResult_t r = ncclCommSplit(parent->comm, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &comm, &cfg);
    char what[96];
    snprintf(what, sizeof what, "ncclCommSplit (rank %d, color %d, key %d)", parent->rank, color, key);
    if (r != ncclSuccess && r != ncclInProgress) {
        nccl_error(err, nerr, what, r);
        if (comm) (void)ncclCommAbort(comm);
        return NULL;
    }
    // The split is collective over the parent: wait for the parent to finish its part, then
    // for the new communicator to be ready.
    ncclResult_t parent_state = ncclSuccess;
    if (ncclCommGetAsyncError(parent->comm, &parent_state) != ncclSuccess) parent_state = ncclInternalError;
    if (poll_until_ready(parent->comm, parent_state, deadline, timeout_s, 1000, what, err, nerr) != 0 ||
        (comm && poll_until_ready(comm, r, deadline, timeout_s, 1000, what, err, nerr) != 0)) {
        if (comm) (void)ncclCommAbort(comm);
        return NULL;
    }
    if (!comm) return NULL;  // NCCL_SPLIT_NOCOLOR
    int rank = 0, size = 0;
    ncclCheck(ncclCommUserRank(comm, &rank));
    ncclCheck(ncclCommCount(comm, &size));
    return comm_wrap(comm, rank, size);
}

extern "C" void cuda_nccl_destroy(CudaComm *c) {
    if (!c) return;
    if (c->comm) {
        // Finalize flushes what is queued and tells the peers we are leaving; non-blocking, so
        // it is polled like the rest. If it fails or takes too long, abort instead.
        double timeout_s = default_timeout_s();
        char err[256];
        ncclResult_t r = ncclCommFinalize(c->comm);
        if (r == ncclSuccess || r == ncclInProgress) {
            if (poll_until_ready(c->comm, r, now_s() + timeout_s, timeout_s, 1000, "ncclCommFinalize", err,
                                 sizeof err) == 0)
                r = ncclSuccess;
            else
                r = ncclInternalError;
        }
        if (r == ncclSuccess) (void)ncclCommDestroy(c->comm);
        else (void)ncclCommAbort(c->comm);
        c->comm = NULL;
    }
    comm_free(c);
}

extern "C" void cuda_nccl_abort(CudaComm *c) {
    if (!c) return;
    comm_abort_nccl(c);
    comm_free(c);
}

// ---------------------------------------------------------------------------------------
// Calls
// ---------------------------------------------------------------------------------------

// Between cuda_nccl_group_start() and _end() calls only queue: with non-blocking
// communicators ncclGroupEnd may return ncclInProgress, and then every communicator used in
// the group must be polled. So the group remembers them (a rank has a handful). NCCL's groups
// belong to the calling thread, and so does this record.
#define GROUP_MAX_COMMS 16
static thread_local struct {
    int depth;
    int n;
    CudaComm *comms[GROUP_MAX_COMMS];
} group;

static void group_remember(CudaComm *c) {
    for (int i = 0; i < group.n; i++)
        if (group.comms[i] == c) return;
    if (group.n == GROUP_MAX_COMMS)
        die("this is a bug in shardlab: a group uses more communicators than any lab needs",
            "more than %d communicators in one NCCL group", GROUP_MAX_COMMS);
    group.comms[group.n++] = c;
}

static const char *op_name(CudaNcclOp op) {
    switch (op) {
    case CUDA_NCCL_ALL_REDUCE: return "ncclAllReduce";
    case CUDA_NCCL_REDUCE_SCATTER: return "ncclReduceScatter";
    case CUDA_NCCL_ALL_GATHER: return "ncclAllGather";
    case CUDA_NCCL_BROADCAST: return "ncclBroadcast";
    case CUDA_NCCL_REDUCE: return "ncclReduce";
    case CUDA_NCCL_SEND: return "ncclSend";
    case CUDA_NCCL_RECV: return "ncclRecv";
    }
    return "NCCL call";
}

extern "C" int cuda_nccl_call(CudaComm *c, CudaNcclOp op, CudaNcclType type, const void *in, void *out, size_t n,
                              int peer, char *err, size_t nerr) {
    const char *elements = type == CUDA_NCCL_BF16 ? "bf16s" : "floats";
    ncclDataType_t t = type == CUDA_NCCL_BF16 ? ncclBfloat16 : ncclFloat;
    char what[128];
    snprintf(what, sizeof what, "%s of %zu %s on rank %d of %d (peer %d)", op_name(op), n, elements, c->rank, c->size,
             peer);
    if (!c->comm) {
        snprintf(err, nerr, "%s: the communicator was aborted after an earlier error", what);
        return -1;
    }
    if ((op == CUDA_NCCL_REDUCE_SCATTER || op == CUDA_NCCL_ALL_GATHER) && n % (size_t)c->size != 0) {
        snprintf(err, nerr, "%s: %zu %s do not split into %d equal chunks", what, n, elements, c->size);
        return -1;
    }
    // Order this call after everything the compute stream has queued so far (the kernels that
    // wrote `in`, or last read `out`), without making the compute stream wait for us.
    cudaStream_t compute = (cudaStream_t)cuda_compute_stream();
    cudaError_t e = cudaEventRecord(c->ready, compute);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(c->stream, c->ready, 0);
    if (e != cudaSuccess) {
        snprintf(err, nerr, "%s: ordering after the compute stream: %s", what, cudaGetErrorString(e));
        return -1;
    }

    size_t chunk = n / (size_t)c->size;
    ncclResult_t r = ncclInvalidUsage;
    switch (op) {
    case CUDA_NCCL_ALL_REDUCE: r = ncclAllReduce(in, out, n, t, ncclSum, c->comm, c->stream); break;
    case CUDA_NCCL_REDUCE_SCATTER: r = ncclReduceScatter(in, out, chunk, t, ncclSum, c->comm, c->stream); break;
    case CUDA_NCCL_ALL_GATHER: r = ncclAllGather(in, out, chunk, t, c->comm, c->stream); break;
    case CUDA_NCCL_BROADCAST:
        // In place when in == out (or in is NULL): the root's out is the source.
        r = ncclBroadcast(in ? in : out, out, n, t, peer, c->comm, c->stream);
        break;
    case CUDA_NCCL_REDUCE: r = ncclReduce(in, out, n, t, ncclSum, peer, c->comm, c->stream); break;
    case CUDA_NCCL_SEND: r = ncclSend(in, n, t, peer, c->comm, c->stream); break;
    case CUDA_NCCL_RECV: r = ncclRecv(out, n, t, peer, c->comm, c->stream); break;
    }
    if (group.depth > 0) {
        // Inside a group the call is only recorded; ncclGroupEnd launches it.
        group_remember(c);
        if (r == ncclSuccess || r == ncclInProgress) return 0;
        nccl_error(err, nerr, what, r);
        return -1;
    }
    if (r == ncclSuccess) return 0;
    if (r != ncclInProgress) {
        nccl_error(err, nerr, what, r);
        return -1;
    }
    // Non-blocking: NCCL is still queueing the call (connecting to a peer the first time, for
    // instance). It is on the stream only once the communicator leaves ncclInProgress.
    double timeout_s = default_timeout_s();
    if (poll_until_ready(c->comm, r, now_s() + timeout_s, timeout_s, 20, what, err, nerr) != 0) {
        comm_abort_nccl(c);
        return -1;
    }
    return 0;
}

extern "C" int cuda_nccl_group_start(char *err, size_t nerr) {
    ncclResult_t r = ncclGroupStart();
    if (r != ncclSuccess) {
        nccl_error(err, nerr, "ncclGroupStart", r);
        return -1;
    }
    if (group.depth++ == 0) group.n = 0;
    return 0;
}

extern "C" int cuda_nccl_group_end(char *err, size_t nerr) {
    if (group.depth == 0)
        die("this is a bug in shardlab: every cuda_nccl_group_end() needs a group_start() before it",
            "cuda_nccl_group_end() without cuda_nccl_group_start()");
    ncclResult_t r = ncclGroupEnd();
    if (--group.depth > 0) {
        // An inner group: NCCL launches nothing until the outermost ends.
        if (r == ncclSuccess || r == ncclInProgress) return 0;
        nccl_error(err, nerr, "ncclGroupEnd", r);
        return -1;
    }
    if (r != ncclSuccess && r != ncclInProgress) {
        nccl_error(err, nerr, "ncclGroupEnd", r);
        return -1;
    }
    // Non-blocking: the grouped calls are on their streams once each communicator used in the
    // group has left ncclInProgress.
    double timeout_s = default_timeout_s(), deadline = now_s() + timeout_s;
    int failed = 0;
    for (int i = 0; i < group.n; i++) {
        CudaComm *c = group.comms[i];
        if (!c->comm) continue;
        ncclResult_t state = ncclSuccess;
        if (ncclCommGetAsyncError(c->comm, &state) != ncclSuccess) state = ncclInternalError;
        char what[96];
        snprintf(what, sizeof what, "ncclGroupEnd on rank %d of %d", c->rank, c->size);
        if (!failed && poll_until_ready(c->comm, state, deadline, timeout_s, 20, what, err, nerr) != 0) {
            comm_abort_nccl(c);
            failed = 1;
        }
    }
    group.n = 0;
    return failed ? -1 : 0;
}

// ---------------------------------------------------------------------------------------
// Waiting, with a deadline
// ---------------------------------------------------------------------------------------

extern "C" int cuda_nccl_wait(CudaComm *c, double timeout_s, char *err, size_t nerr) {
    if (!c->comm) {
        snprintf(err, nerr, "NCCL wait on rank %d of %d: the communicator was aborted after an earlier error",
                 c->rank, c->size);
        return -1;
    }
    // `done` completes when every call queued on this stream so far has finished.
    cudaError_t e = cudaEventRecord(c->done, c->stream);
    if (e != cudaSuccess) {
        snprintf(err, nerr, "NCCL wait on rank %d of %d: %s", c->rank, c->size, cudaGetErrorString(e));
        return -1;
    }
    double t0 = now_s(), deadline = t0 + timeout_s;
    for (;;) {
        e = cudaEventQuery(c->done);
        if (e == cudaSuccess) {
            // Later kernels on the compute stream read what NCCL wrote.
            e = cudaStreamWaitEvent((cudaStream_t)cuda_compute_stream(), c->done, 0);
            if (e == cudaSuccess) return 0;
        }
        if (e != cudaErrorNotReady) {
            snprintf(err, nerr, "NCCL wait on rank %d of %d: %s", c->rank, c->size, cudaGetErrorString(e));
            return -1;
        }
        // Still running: is NCCL reporting a failure (a peer gone, a network error)?
        ncclResult_t state = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(c->comm, &state);
        if (r != ncclSuccess) state = r;
        if (state != ncclSuccess && state != ncclInProgress) {
            char what[96];
            snprintf(what, sizeof what, "NCCL wait on rank %d of %d", c->rank, c->size);
            nccl_error(err, nerr, what, state);
            comm_abort_nccl(c);
            return -1;
        }
        double t = now_s();
        if (t > deadline) {
            snprintf(err, nerr, "NCCL wait on rank %d of %d: timed out after %.0f s (a peer is stuck or gone; "
                                "raise SHARDLAB_TIMEOUT_S if that is expected)",
                     c->rank, c->size, timeout_s);
            comm_abort_nccl(c);
            return -1;
        }
        // Short collectives finish within microseconds: yield the core at first, then sleep
        // between polls so a long wait does not burn a CPU the other ranks may need.
        if (t - t0 < 200e-6) sched_yield();
        else sleep_us(20);
    }
}
