// collectives.c — every collective timed and checked, nccl-tests style: latency vs bandwidth.
//
// Every rank calls each collective of common/comm/dist.h on buffers from a few
// bytes to tens of megabytes and the lab prints, per collective, nccl-tests' table: how long
// a call takes, the bandwidth the application sees (algbw) and the bandwidth the links carry
// (busbw). Small messages cost a fixed time per step whatever their size (latency); big ones
// cost their bytes over the bandwidth. That is why dist.c sends small buffers in one direct
// step and big ones around a ring (the algo column says which it chose; --algo forces one).
//
// The algorithms it times:
//   the ring: labs/03-collectives/ring.c, ring_reduce_scatter(), ring_all_gather(), ring_all_reduce()
//   the chains: labs/03-collectives/ring.c, chain_broadcast(), chain_reduce()
//   one step: labs/03-collectives/direct.c, direct_all_reduce(), direct_all_gather(), direct_broadcast()
//   the transpose: labs/03-collectives/pairwise.c, pairwise_all_to_all()
//   the choice between them: labs/common/comm/dist_shm.c, use_direct()
// labs/common/comm/dist.h draws the way from dist_all_reduce() down to them.
//
// Run it:   make lab-collectives NGPU=4 [ARGS="--colls all_reduce --max-bytes 16M"]
//           build/shardlab run collectives -n 4 [options]
//           build/labs/collectives --help
//
// Lexicon: all-reduce, reduce-scatter, all-gather, ring all-reduce, bus bandwidth,
//          latency vs bandwidth.
//
// The columns (one table per collective, one row per size; lines starting with '#' are not
// rows, so the output is easy to parse):
//   size      bytes of the WHOLE buffer: the all-reduced, broadcast or reduced buffer, the
//             gathered output of all_gather, the unscattered input of reduce_scatter, a
//             rank's p blocks of all_to_all (rounded down to a multiple of p floats)
//   count     floats in that buffer; type: float
//   time(us)  the slowest rank's mean time per call over --iters calls
//   algbw     size / time, GB/s (1e9 bytes/s): the speed the caller sees
//   busbw     algbw x factor: the speed at which each rank's link must move data under the
//             best algorithm, so one number compares collectives, rank counts and hardware
//   #wrong    elements that differ from the answer computed serially, summed over ranks
//   algo      what dist chose: direct (one step), ring, chain, local (a world of one)
//
// What it is graded against (p ranks, nccl-tests' factors):
//   all_reduce      busbw = algbw * 2(p-1)/p   ring: every rank sends 2(p-1) chunks of size/p
//   reduce_scatter  busbw = algbw * (p-1)/p    every rank receives p-1 chunks of size/p
//   all_gather      busbw = algbw * (p-1)/p    the same, the other way round
//   broadcast       busbw = algbw              the whole buffer must reach every rank
//   reduce          busbw = algbw              every rank's whole buffer must reach the root
//   all_to_all      busbw = algbw * (p-1)/p    every rank sends p-1 of its p blocks, each once
//                                             (pairwise exchange: labs/03-collectives/pairwise.c)
// and #wrong = 0 on every row: rank r's value at index i is (hash(r, i) % 1024) / 8, a
// multiple of 1/8 below 128, so any sum of up to 8 of them is exact in fp32 in any order, and
// a chunk in the wrong place (or counted twice) changes the answer.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/comm/dist.h"        // defines: dist_all_reduce(), DistColl, dist_coll_name(), ...
#include "common/harness/catalog.h"  // defines: CatLab, catalog_lab(), LabBind, CatSlot, ...
#include "common/harness/check.h"    // defines: usage_error(), malloc_check(), ...
#include "common/harness/lab.h"      // defines: lab_run_dir()
#include "common/model/rng.h"        // defines: rng_hash()
#include "common/runfiles/json.h"    // defines: StrBuf, sb_printf(), sb_init(), sb_append(), ...
#include "common/runfiles/runlog.h"  // defines: RunLog, runlog_span(), runlog_check(), ...

#define PROG "collectives"
#define NCOLLS 6  // DistColl 0..5: all_reduce, reduce_scatter, all_gather, broadcast, reduce, all_to_all
#define ROOT 0    // of broadcast and reduce, as in nccl-tests

typedef struct {
    uint64_t min_bytes, max_bytes;
    int factor, iters, warmup, check, overwrite;
    unsigned colls;  // bit c set: run DistColl c
    const char *algo, *device, *run_dir;
} Options;

// ---------------------------------------------------------------------------------------
// Options
// ---------------------------------------------------------------------------------------

static unsigned parse_colls(const char *text) {
    unsigned mask = 0;
    char list[256];
    snprintf(list, sizeof list, "%s", text);
    for (char *save, *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        int c = 0;
        while (c < NCOLLS && strcmp(name, dist_coll_name((DistColl)c)) != 0) c++;
        if (c == NCOLLS)
            usage_error(PROG, "--colls: unknown collective '%s' (choose from all_reduce,reduce_scatter,all_gather,broadcast,reduce,"
                        "all_to_all)", name);
        mask |= 1u << c;
    }
    if (!mask) usage_error(PROG, "--colls needs at least one collective");
    return mask;
}

// The options' types, bounds, defaults and help: common/harness/catalog.c.
static void parse_options(Options *o, int argc, char **argv) {
    const CatLab *lab = catalog_lab(PROG);
    const char *colls = NULL;
    const LabBind own[] = {
        {"min-bytes", &o->min_bytes}, {"max-bytes", &o->max_bytes}, {"factor", &o->factor}, {"iters", &o->iters},
        {"steps", &o->iters},         {"warmup", &o->warmup},       {"colls", &colls},      {"algo", &o->algo},
        {"check", &o->check},         {"run-dir", &o->run_dir},     {"device", &o->device},
        {"overwrite", &o->overwrite},
    };
    enum { NOPTIONS = sizeof own / sizeof own[0] };
    CatSlot slots[NOPTIONS];
    catalog_bind(lab, own, NOPTIONS, slots);
    catalog_parse(PROG, lab->about, slots, NOPTIONS, 0, NULL, argc, argv);
    o->colls = strcmp(colls, "all") == 0 ? (1u << NCOLLS) - 1 : parse_colls(colls);
    if (o->min_bytes > o->max_bytes)
        usage_error(PROG, "--min-bytes %llu is above --max-bytes %llu", (unsigned long long)o->min_bytes,
                    (unsigned long long)o->max_bytes);
}

// ---------------------------------------------------------------------------------------
// One collective on count floats: what goes in, what must come out
// ---------------------------------------------------------------------------------------

// The busbw factor (see the top of the file).
static double bus_factor(DistColl c, int p) {
    switch (c) {
    case DIST_ALL_REDUCE: return 2.0 * (p - 1) / p;
    case DIST_REDUCE_SCATTER:
    case DIST_ALL_GATHER:
    case DIST_ALL_TO_ALL: return (double)(p - 1) / p;
    default: return 1.0;
    }
}

// send holds this rank's input (for all_gather: its chunk only), recv gets the output (for
// reduce_scatter: its chunk only); all_reduce and broadcast work in place on recv.
static void run_coll(DistGroup *g, DistColl c, float *send, float *recv, size_t n) {
    switch (c) {
    case DIST_ALL_REDUCE: dist_all_reduce(g, recv, n); break;
    case DIST_REDUCE_SCATTER: dist_reduce_scatter(g, send, recv, n); break;
    case DIST_ALL_GATHER: dist_all_gather(g, send, recv, n); break;
    case DIST_BROADCAST: dist_broadcast(g, recv, n, ROOT); break;
    case DIST_ALL_TO_ALL: dist_all_to_all(g, send, recv, n); break;
    default: dist_reduce(g, send, recv, n, ROOT); break;
    }
}

// Rank r's value at index i, and the sum of all p ranks' values there.
static float value(int r, size_t i) { return (float)(rng_hash(2024, (uint64_t)r, i) % 1024) / 8.0f; }
static float sum_of_values(int p, size_t i) {
    float s = 0;
    for (int q = 0; q < p; q++) s += value(q, i);
    return s;
}

// What index i of rank r's whole output must hold.
static float expected(DistColl c, size_t n, int p, int r, size_t i) {
    if (c == DIST_BROADCAST) return value(ROOT, i);
    if (c == DIST_ALL_TO_ALL) {  // block q came from rank q: its block for rank r
        size_t b = n / (size_t)p, q = i / b;
        return value((int)q, (size_t)r * b + i % b);
    }
    if (c != DIST_ALL_GATHER) return sum_of_values(p, i);
    int q = 0;  // all_gather: index i comes from the rank whose chunk holds it
    size_t off, len;
    dist_chunk(n, p, q, &off, &len);
    while (i >= off + len) dist_chunk(n, p, ++q, &off, &len);
    return value(q, i);
}

// The buffers of the calls, on the rank's device, and host copies to fill and check them.
typedef struct {
    const Device *dev;
    float *send, *recv;    // device
    float *hsend, *hrecv;  // host
} Buffers;

// One call on known data, separate from the timed ones; returns this rank's wrong elements.
static size_t check_once(DistGroup *g, DistColl c, const Buffers *b, size_t n) {
    int p = g->size, r = g->rank;
    size_t off, len;
    dist_chunk(n, p, r, &off, &len);
    float *send = b->hsend, *recv = b->hrecv;
    for (size_t i = 0; i < n; i++) {
        send[i] = c == DIST_ALL_GATHER ? (i < len ? value(r, off + i) : -1) : value(r, i);
        recv[i] = c == DIST_ALL_REDUCE || c == DIST_BROADCAST ? value(r, i) : -1;  // -1: no rank sends it
    }
    device_from_host(b->dev, b->send, send, n * sizeof(float));
    device_from_host(b->dev, b->recv, recv, n * sizeof(float));
    run_coll(g, c, b->send, b->recv, n);
    device_to_host(b->dev, recv, b->recv, n * sizeof(float));
    // The part of the output this rank holds: its chunk for reduce_scatter, nothing off the
    // root for reduce, else all of it.
    size_t first = c == DIST_REDUCE_SCATTER ? off : 0;
    size_t m = c == DIST_REDUCE_SCATTER ? len : c == DIST_REDUCE && r != ROOT ? 0 : n;
    size_t wrong = 0;
    for (size_t j = 0; j < m; j++) wrong += recv[j] != expected(c, n, p, r, first + j);
    return wrong;
}

// ---------------------------------------------------------------------------------------
// Measuring one row
// ---------------------------------------------------------------------------------------

typedef struct {
    DistColl coll;
    size_t count;
    double time_us, algbw, busbw, wrong;  // wrong < 0: not checked
    const char *algo;
} Row;

// Wall clock in nanoseconds since the epoch: fine enough to time one call of a few floats,
// and on the same timeline as the run log's microseconds.
static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

// Empties dist's records (it keeps one per call); returns the last one's algorithm.
static const char *drain_records(Dist *d) {
    DistRecord recs[64];
    const char *algo = "none";
    for (size_t k; (k = dist_drain_records(d, recs, 64)) > 0;) algo = recs[k - 1].algo;
    return algo;
}

// One row: a checked call, --warmup calls, then --iters calls timed between barriers.
static Row measure(Dist *d, RunLog *log, const Options *o, DistColl c, size_t n, const Buffers *b, int64_t row) {
    DistGroup *g = &d->world_group;
    Row x = {.coll = c, .count = n, .wrong = -1};
    size_t wrong = o->check ? check_once(g, c, b, n) : 0;
    // The timed calls run on zeros: repeated in place, an all-reduce multiplies its data by p
    // each time and would overflow to inf; zeros cost the same to add.
    float *send = b->send, *recv = b->recv;
    device_zero(b->dev, send, n * sizeof(float));
    device_zero(b->dev, recv, n * sizeof(float));
    for (int i = 0; i < o->warmup; i++) run_coll(g, c, send, recv, n);
    dist_barrier(g);  // everyone starts the clock together
    drain_records(d);
    uint64_t sent0 = d->stats.bytes_sent;
    int64_t t0 = now_ns();
    for (int i = 0; i < o->iters; i++) run_coll(g, c, send, recv, n);
    int64_t t1 = now_ns();
    x.algo = drain_records(d);
    runlog_span(log, row, dist_coll_name(c), -1, -1, t0 / 1000, t1 / 1000, d->stats.bytes_sent - sent0);
    dist_barrier(g);

    // Every rank learns every rank's time and wrong count (an all_gather of two floats each):
    // the row reports the slowest rank, as a collective is only done when all ranks are.
    float mine[2] = {(float)((double)(t1 - t0) / 1e3 / o->iters), (float)wrong}, all[2 * DIST_MAX_RANKS];
    dist_all_gather(g, mine, all, 2 * (size_t)g->size);
    drain_records(d);
    double total_wrong = 0;
    for (int q = 0; q < g->size; q++) {
        x.time_us = fmax(x.time_us, all[2 * q]);
        total_wrong += all[2 * q + 1];
    }
    if (o->check) x.wrong = total_wrong;
    x.algbw = x.time_us > 0 ? (double)(n * sizeof(float)) / (x.time_us * 1e3) : 0;  // bytes per ns = GB/s
    x.busbw = x.algbw * bus_factor(c, g->size);
    return x;
}

// One row: on rank 0's terminal and log, as check events in every rank's run log (the
// wrong count; and the busbw with its formula, so the jsonl holds the table too), and in
// the summary's rows.
static void log_row(RunLog *log, const Row *x, int p, StrBuf *rows_json) {
    const char *coll = dist_coll_name(x->coll);
    size_t size = x->count * sizeof(float);
    char name[64], wrong[16] = "N/A", wrong_json[16] = "null";
    if (x->wrong >= 0) {
        snprintf(wrong, sizeof wrong, "%.0f", x->wrong);
        snprintf(wrong_json, sizeof wrong_json, "%.0f", x->wrong);
        snprintf(name, sizeof name, "%s.%zu.wrong", coll, size);
        runlog_check(log, name, x->wrong == 0, x->wrong, 0);
    }
    snprintf(name, sizeof name, "%s.%zu.busbw", coll, size);
    runlog_check(log, name, 1, x->busbw, x->algbw * bus_factor(x->coll, p));
    if (log->rank == 0)
        runlog_printf(log, "  %10zu %12zu %6s %10.2f %12.2f %12.2f %7s  %s\n", size, x->count, "float", x->time_us,
                      x->algbw, x->busbw, wrong, x->algo);
    sb_printf(rows_json, "%s{\"coll\":\"%s\",\"size\":%zu,\"count\":%zu,\"time_us\":%.3f,\"algbw\":%.6g,\"busbw\":%.6g,"
                         "\"wrong\":%s,\"algo\":\"%s\"}",
              rows_json->len ? "," : "", coll, size, x->count, x->time_us, x->algbw, x->busbw, wrong_json, x->algo);
}

// ---------------------------------------------------------------------------------------
// The lab
// ---------------------------------------------------------------------------------------

// How fast this machine copies memory, GB/s: the best of 3 copies of 32 MiB (larger than the
// caches, so the copy streams through memory as the ranks' large messages do).
static double memcpy_rate_gbps(void) {
    size_t n = (size_t)32 << 20;
    char *a = malloc_check(n), *b = malloc_check(n);
    memset(a, 1, n), memset(b, 2, n);
    double best = 0;
    for (int i = 0; i < 3; i++) {
        int64_t t0 = runlog_now_us();
        memcpy(b, a, n);
        int64_t us = runlog_now_us() - t0;
        if (us > 0 && (double)n / ((double)us * 1e3) > best) best = (double)n / ((double)us * 1e3);
        a[i] = b[n - 1 - (size_t)i];  // (keeps the copies from being optimised away)
    }
    free(a), free(b);
    return best;
}

int main(int argc, char **argv) {
    Options o;
    parse_options(&o, argc, argv);
    DistEnv env = dist_env(PROG);
    Device dev;
    char err[512];
    if (device_open(&dev, o.device, env.local_rank, env.local_world, 0, err, sizeof err) != 0) usage_error(PROG, "%s", err);
    Dist d;
    dist_init(&d, PROG, &dev);
    d.algo = (DistAlgo)dist_algo_parse(o.algo);
    char who[48];
    snprintf(who, sizeof who, "%s rank %d", PROG, d.rank);
    check_set_context(who);
    RunLog log;
    char run_dir[PATH_MAX];
    JobLock run_lock;  // (held to the end: the kernel lets go at exit)
    lab_run_dir(&d, o.run_dir, o.overwrite, PROG, argv, run_dir, sizeof run_dir, &run_lock);
    runlog_open(&log, PROG, d.rank, d.world, run_dir);

    StrBuf config, rows_json, summary;
    sb_init(&config);
    sb_init(&rows_json);
    sb_init(&summary);
    sb_append(&rows_json, "", 0);
    sb_printf(&config, "{\"min_bytes\":%llu,\"max_bytes\":%llu,\"factor\":%d,\"iters\":%d,\"warmup\":%d,\"check\":%d,"
                       "\"algo\":\"%s\",\"direct_max_bytes\":%zu,\"colls\":[",
              (unsigned long long)o.min_bytes, (unsigned long long)o.max_bytes, o.factor, o.iters, o.warmup, o.check,
              o.algo, d.direct_max_bytes);
    for (int c = 0, first = 1; c < NCOLLS; c++)
        if (o.colls >> c & 1) sb_printf(&config, "%s\"%s\"", first ? "" : ",", dist_coll_name((DistColl)c)), first = 0;
    sb_printf(&config, "]}");
    runlog_meta(&log, argc, argv, dev.name, d.backend, config.data);
    runlog_start(&log, &dev, d.backend, 0, config.data, -1);

    if (d.rank == 0) {
        runlog_printf(&log, "# %s: %d rank%s on %s, backend %s", PROG, d.world, d.world == 1 ? "" : "s", dev.name,
                      d.backend);
        if (strcmp(d.backend, "shm") == 0) runlog_printf(&log, ", algo %s", o.algo);
        if (strcmp(d.backend, "shm") == 0 && d.algo == DIST_ALGO_AUTO)
            runlog_printf(&log, " (direct up to %zu bytes, ring above)", d.direct_max_bytes);
        runlog_printf(&log, "\n# device: %s%s", dev.desc,
                      dev.shared ? " (shared by the ranks of this node: shm backend, staged via host memory)" : "");
        runlog_printf(&log, "\n# sizes %llu to %llu bytes, x%d; warmup %d, iters %d, check %d; run directory %s\n",
                      (unsigned long long)o.min_bytes, (unsigned long long)o.max_bytes, o.factor, o.warmup, o.iters,
                      o.check, log.dir);
        runlog_printf(&log, "# time: the slowest rank's mean per call; algbw = size/time; busbw = algbw x factor\n");
    }
    size_t max_n = o.max_bytes < sizeof(float) ? 1 : (size_t)o.max_bytes / sizeof(float);
    Buffers bufs = {&dev, device_alloc(&dev, max_n * sizeof(float)), device_alloc(&dev, max_n * sizeof(float)),
                    malloc_check(max_n * sizeof(float)), malloc_check(max_n * sizeof(float))};
    if (!bufs.send || !bufs.recv) die("lower --max-bytes", "out of %s memory for two buffers of %zu floats", dev.name, max_n);
    int64_t rows = 0;
    double busbw_sum = 0, wrong_sum = 0;

    for (int c = 0; c < NCOLLS; c++) {
        if (!(o.colls >> c & 1)) continue;
        DistColl coll = (DistColl)c;
        if (d.rank == 0)
            runlog_printf(&log, "#\n# %s  busbw factor %.4f\n# %10s %12s %6s %10s %12s %12s %7s  %s\n",
                          dist_coll_name(coll), bus_factor(coll, d.world), "size", "count", "type", "time(us)",
                          "algbw(GB/s)", "busbw(GB/s)", "#wrong", "algo");
        size_t last = 0;
        for (uint64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= (uint64_t)o.factor) {
            size_t n = bytes < sizeof(float) ? 1 : (size_t)bytes / sizeof(float);  // whole floats, at least one
            // all_to_all: p equal blocks, as nccl-tests rounds its count down to them (at least one float each)
            if (coll == DIST_ALL_TO_ALL) n = n < (size_t)d.world ? (size_t)d.world : n - n % (size_t)d.world;
            if (n == last) continue;  // 1, 2 and 3 bytes all round to one float
            last = n;
            Row x = measure(&d, &log, &o, coll, n, &bufs, ++rows);
            log_row(&log, &x, d.world, &rows_json);
            busbw_sum += x.busbw;
            wrong_sum += fmax(x.wrong, 0);
        }
    }

    int ok = wrong_sum == 0;
    double avg = rows ? busbw_sum / (double)rows : 0;
    // The ceiling the shm backend's bus bandwidth is drawn against: how fast one core of this
    // machine copies a buffer larger than its caches (the ranks' collectives are copies and
    // sums through shared memory). On a GPU the ceiling is the device's and the links': none here.
    double memcpy_gbps = d.rank == 0 && dev.kind == DEVICE_CPU ? memcpy_rate_gbps() : 0;
    if (d.rank == 0) {
        if (o.check) runlog_printf(&log, "#\n# Out of bounds values : %.0f %s\n", wrong_sum, ok ? "OK" : "FAILED");
        else runlog_printf(&log, "#\n# Out of bounds values : N/A (--check 0)\n");
        runlog_printf(&log, "# Avg bus bandwidth    : %.4g\n", avg);
    }
    sb_printf(&summary, "{\"lab\":\"%s\",\"status\":\"ok\",\"world_size\":%d,\"steps\":%lld,\"avg_busbw\":%.6g,"
                        "\"wrong\":%.0f,\"memcpy_gbps\":",
              PROG, d.world, (long long)rows, avg, wrong_sum);
    if (memcpy_gbps > 0) sb_printf(&summary, "%.4g", memcpy_gbps);
    else sb_printf(&summary, "null");
    sb_printf(&summary, ",\"rows\":[%s],\"run_dir\":", rows_json.data);
    sb_json_string(&summary, log.dir);
    sb_printf(&summary, "}");
    runlog_summary(&log, summary.data);
    // Wrong values are what this lab measures, as nccl-tests' #wrong column: every row ran and
    // says where (its check event), so the run ends as a run that ran to its end does, with a
    // warning, and `shardlab grade` takes collectives.correct's points, not every point.
    if (!ok && d.rank == 0)
        runlog_printf(&log, "warning: %.0f wrong values (the #wrong column says where): a collective of labs/03-collectives/ring.c "
                            "or direct.c is wrong; rerun with --algo ring or --algo direct to see which. The run ends: "
                            "`shardlab grade` judges it\n", wrong_sum);
    runlog_end(&log, "ok", rows);

    device_free(&dev, bufs.send);
    device_free(&dev, bufs.recv);
    free(bufs.hsend);
    free(bufs.hrecv);
    sb_free(&config);
    sb_free(&rows_json);
    sb_free(&summary);
    dist_barrier(&d.world_group);  // nobody leaves while another rank still reads its memory
    runlog_close(&log);
    dist_destroy(&d);
    device_close(&dev);
    return 0;
}
