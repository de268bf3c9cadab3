// dist_shm.c — the shm backend (dist_backend.h): ranks on one machine meet in shared memory
// (shm.h) and run the algorithms written out in ring.c and direct.c (algos.h). Ranks sharing
// a GPU run the same algorithms on host copies of their buffers (dist_shm_staged_backend).
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "03-collectives/algorithms.h"
#include "common/cuda/gpu.h"
#include "common/harness/check.h"
#include "dist_backend.h"

// A descriptor number from SHARDLAB_SHM_FD, or -1 when it is not set.
static int launcher_shm_fd(void) {
    const char *v = getenv("SHARDLAB_SHM_FD");
    if (!v || !*v) return -1;
    char *end;
    errno = 0;
    long fd = strtol(v, &end, 10);
    if (errno || *end || fd < 3 || fd > 65535)
        die("SHARDLAB_SHM_FD is set by 'shardlab run' for its ranks; unset it", "SHARDLAB_SHM_FD=%s is not a descriptor", v);
    return (int)fd;
}

// This rank's arguments, the program's name left out, each ending in NUL, as
// /proc/self/cmdline holds them; their length. mpirun, srun and torchrun start one command
// N times, and so does a shell loop, so the ranks of one job share them: two jobs that
// differ in any argument are told apart when they meet at one name (shm_attach).
static size_t own_args(char *buf, size_t n) {
    FILE *f = fopen("/proc/self/cmdline", "r");
    if (!f) return 0;
    size_t got = fread(buf, 1, n, f);
    fclose(f);
    size_t program = strnlen(buf, got);
    if (program + 1 >= got) return 0;
    memmove(buf, buf + program + 1, got - program - 1);
    return got - program - 1;
}

// A port after `port` whose name no job of this user holds now (0 if none is near): what a
// rank turned away from a taken name is told to use.
static long free_port(long port) {
    for (long p = port + 1; p <= 65535 && p <= port + 1000; p++) {
        char path[96];
        snprintf(path, sizeof path, "/dev/shm/shardlab-%d-%ld", (int)getuid(), p);
        if (access(path, F_OK) != 0 && errno == ENOENT) return p;
    }
    return 0;
}

static void join_shm(Dist *d, const char *lab) {
    if (d->world == 1) return;  // nobody to meet
    if (d->local_world != d->world)
        die("run every rank on one machine, or give each rank its own GPU (NCCL reaches other machines)",
            "%s: the shm backend needs all %d ranks on one machine, but LOCAL_WORLD_SIZE=%d", lab, d->world,
            d->local_world);
    // The memory (shm.h says why two ways): 'shardlab run' made it without a name and we
    // inherited it (SHARDLAB_SHM_FD); ranks started some other way (mpirun, srun, a shell)
    // meet at a name from their job's key (or SHARDLAB_SHM), rank 0 making it.
    int fd = launcher_shm_fd();
    if (fd >= 0) {
        shm_attach_fd(&d->shm, fd, d->rank, d->world, d->timeout_s);
        check_on_die(dist_on_die, d);
        return;
    }
    const char *name = getenv("SHARDLAB_SHM");
    char own[96], key[48], what[128], fix[96];
    if (!name || !*name) {
        dist_job_key(key, sizeof key, what, sizeof what);
        snprintf(own, sizeof own, "/shardlab-%d-%.40s", (int)getuid(), key);
        name = own;
        long port = free_port(dist_master_port());
        if (port) snprintf(fix, sizeof fix, "MASTER_PORT=%ld (no job here uses it now)", port);
        else snprintf(fix, sizeof fix, "a MASTER_PORT that no job here uses");
    } else {
        snprintf(what, sizeof what, "SHARDLAB_SHM=%.80s", name);
        snprintf(fix, sizeof fix, "another SHARDLAB_SHM");
    }
    if (name[0] != '/' || strlen(name) >= sizeof d->shm.name || strchr(name + 1, '/'))
        die("SHARDLAB_SHM names a segment in /dev/shm, e.g. /shardlab-job1; unset it", "SHARDLAB_SHM=%s is not a valid shared memory name", name);
    char args[16384];
    ShmJob job = {.lab = lab, .args = args, .args_len = own_args(args, sizeof args),
                  .run_dir = getenv("SHARDLAB_RUN_DIR"), .key = what, .fix = fix};
    shm_attach(&d->shm, name, &job, d->rank, d->world, d->timeout_s, d->rank == 0);
    check_on_die(dist_on_die, d);
    // Everyone is here. The channels' memory can lose its name and go with the last rank,
    // however the run ends; rank 0 keeps the name, on one page, until it ends, so that no
    // second job takes it meanwhile and meets this one's late ranks (shm.h).
    dist_barrier(&d->world_group);
    if (d->rank == 0) shm_joined(&d->shm);
}

static int use_direct(const Dist *d, const DistWork *w) {
    if (d->algo == DIST_ALGO_DIRECT) return 1;
    if (d->algo == DIST_ALGO_RING) return 0;
    return dist_work_words(w) * sizeof(float) <= d->direct_max_bytes;
}

// The algorithms see n words and the dtype, which only the additions need.
static const char *run_shm(Dist *d, DistWork *w) {
    Shm *s = &d->shm;
    DistGroup *g = w->group;
    DistDtype t = w->dtype;
    const float *in = w->in;
    float *out = w->out;
    size_t n = dist_work_words(w);
    int direct = use_direct(d, w);
    switch (w->coll) {
    case DIST_ALL_REDUCE:
        if (direct) direct_all_reduce(s, g, t, out, n);
        else ring_all_reduce(s, g, t, out, n);
        break;
    case DIST_REDUCE_SCATTER:
        if (direct) direct_reduce_scatter(s, g, t, in, out, n);
        else ring_reduce_scatter(s, g, t, in, out, n);
        break;
    case DIST_ALL_GATHER:
        if (direct) direct_all_gather(s, g, in, out, n);
        else ring_all_gather(s, g, in, out, n);
        break;
    case DIST_BROADCAST:
        if (direct) direct_broadcast(s, g, out, n, w->peer);
        else chain_broadcast(s, g, out, n, w->peer);
        return direct ? "direct" : "chain";
    case DIST_REDUCE:
        if (direct) direct_reduce(s, g, t, in, out, n, w->peer);
        else chain_reduce(s, g, t, in, out, n, w->peer);
        return direct ? "direct" : "chain";
    case DIST_ALL_TO_ALL:
        pairwise_all_to_all(s, g, in, w->send_counts, out, w->recv_counts);
        return "pairwise";
    case DIST_SEND:
        p2p_send(s, g, in, n, w->peer);
        return "p2p";
    case DIST_RECV:
        p2p_recv(s, g, out, n, w->peer);
        return "p2p";
    case DIST_BARRIER:
        direct_barrier(s, g);
        return "dissemination";
    }
    return direct ? "direct" : "ring";
}

// Ranks that share a GPU talk through host memory: a call on GPU buffers runs the shm
// algorithm on host copies (in and out side by side in one staging buffer, counted in words,
// so a bf16 call stages 2 bytes per element).
static const char *run_shm_staged(Dist *d, DistWork *w) {
    size_t in_len, out_len;
    dist_call_lengths(w, &in_len, &out_len);
    int in_dev = w->in && cuda_is_device_ptr(w->in), out_dev = w->out && cuda_is_device_ptr(w->out);
    if (!in_dev && !out_dev) return run_shm(d, w);
    if (d->stage_host_n < in_len + out_len) {
        d->stage_host = realloc_check(d->stage_host, (in_len + out_len) * sizeof(float));
        d->stage_host_n = in_len + out_len;
    }
    DistWork h = *w;
    int in_place = w->in == w->out;
    if (in_dev) {
        h.in = d->stage_host;
        cuda_copy(d->stage_host, w->in, in_len * sizeof(float));
    }
    if (out_dev) h.out = in_place ? d->stage_host : d->stage_host + in_len;
    const char *algo = run_shm(d, &h);
    if (out_dev && out_len) cuda_copy(w->out, h.out, out_len * sizeof(float));
    return algo;
}

// The backends' run: the shm channels count what this rank sent and received.
static const char *run_counted(Dist *d, DistWork *w, uint64_t *sent, uint64_t *recv,
                               const char *(*how)(Dist *, DistWork *)) {
    uint64_t sent0 = d->shm.bytes_sent, recv0 = d->shm.bytes_recv;
    const char *algo = how(d, w);
    *sent = d->shm.bytes_sent - sent0, *recv = d->shm.bytes_recv - recv0;
    return algo;
}
static const char *run_host(Dist *d, DistWork *w, uint64_t *sent, uint64_t *recv) {
    return run_counted(d, w, sent, recv, run_shm);
}
static const char *run_staged(Dist *d, DistWork *w, uint64_t *sent, uint64_t *recv) {
    return run_counted(d, w, sent, recv, run_shm_staged);
}

static void p2p_shm(Dist *d, DistGroup *g, DistP2p *ops, int nops, int until) {
    size_t moved[DIST_P2P_MAX];
    for (int i = 0; i < nops; i++) moved[i] = ops[i].moved;
    p2p_batch(&d->shm, g, ops, moved, nops, until);
    for (int i = 0; i < nops; i++) ops[i].moved = moved[i];
}

// Ranks sharing a GPU: the batch runs on host copies of its buffers, to the end.
static void p2p_shm_staged(Dist *d, DistGroup *g, DistP2p *ops, int nops, int until) {
    (void)until;  // every call finishes the batch
    DistP2p host[DIST_P2P_MAX] = {{0}};  // (nops of them used: check_p2p_batch)
    size_t moved[DIST_P2P_MAX];
    for (int i = 0; i < nops; i++) {
        host[i] = ops[i];
        moved[i] = ops[i].moved;
        host[i].buf = malloc_check((ops[i].n ? ops[i].n : 1) * sizeof(float));
        if (ops[i].send && ops[i].n) cuda_copy(host[i].buf, ops[i].buf, ops[i].n * sizeof(float));
    }
    p2p_batch(&d->shm, g, host, moved, nops, nops);
    for (int i = 0; i < nops; i++) {
        if (!ops[i].send && ops[i].n) cuda_copy(ops[i].buf, host[i].buf, ops[i].n * sizeof(float));
        free(host[i].buf);
        ops[i].moved = ops[i].n;
    }
}

static void abort_shm(Dist *d, const char *msg) {
    shm_abort(&d->shm, msg);
    shm_release_name(&d->shm);  // rank 0 made the name: nobody else would remove it
}

static void destroy_shm(Dist *d) {
    shm_release_name(&d->shm);
    shm_detach(&d->shm);
    free(d->stage_host);
}

const DistBackend dist_shm_backend = {"shm", 0, join_shm, NULL, run_host, p2p_shm, abort_shm, destroy_shm};
const DistBackend dist_shm_staged_backend = {"shm", 0, join_shm, NULL, run_staged, p2p_shm_staged, abort_shm, destroy_shm};
