// trace.h — a run's timeline as Chrome trace-event JSON, to open in Perfetto (ui.perfetto.dev)
// or chrome://tracing: `shardlab trace RUN_DIR`, and the web server's GET /api/runs/<id>/trace.
//
// What the trace holds (the "JSON Object Format": {"traceEvents":[...],"displayTimeUnit":"ms"}):
//   - one process per rank (pid = rank, named "rank N", sorted by rank);
//   - in each, one thread per kind of work: "compute" (fwd, bwd, recompute, optim and any
//     span name a lab adds), "communication" (the collectives of dist.h: all_reduce,
//     reduce_scatter, all_gather, broadcast, reduce, send, recv, barrier) and "checkpoint I/O"
//     (save, load), and "communication across replicas" (a collective whose span's group is
//     "replicate", fsdp --replicate's sums, or "dp", tp --dp's all-reduces: on a cluster the
//     traffic between nodes). Each span is a complete event ("ph":"X", ts and dur in microseconds)
//     whose args carry the step, bytes, layer and micro-batch ("mb", when the span has one)
//     and whatever fields the lab added (bucket, algo, unit, chunk, stage...; "issued_us"
//     becomes "queued_us", how long the collective waited behind others; "waited_from_us"
//     becomes "waited_us", how long the rank waited for it, not computing). The viewers draw
//     only spans that nest, so spans of one kind that overlap in time (two collectives in
//     flight) go to a second thread of that kind: "communication (2)";
//   - counters ("ph":"C") from each step event: "memory" (bytes by category: params, grads,
//     optim, acts, comm, and any a lab adds; the viewer stacks them), "peak memory",
//     "host memory" (labs that offload) and "loss". A step event has no time of its own: its
//     counters sit at the end of that step's last span on the rank (the step event is
//     written right after the step's work).
//
// The clock: a span's t0_us/t1_us are the wall clock (gettimeofday, runlog.h) in microseconds
// since the Unix epoch, on each rank. Ranks on one machine read the same clock, so their
// order across ranks is the true one; ranks on several machines are as far apart as their
// hosts' clocks are (NTP keeps that to about a millisecond), which the trace does not
// correct. The trace starts at 0: every timestamp is less the run's earliest t0_us (kept in
// "otherData" as origin_unix_us).
//
// The run directory is untrusted input (runread.h): a line that is not an event of the schema
// (runschema.h), longer than LOGTAIL_MAX_LINE, cut off, or of another rank is skipped and
// counted, a rank whose file is missing is named and counted, every string written is
// escaped, and a number that is not finite is left out. Only a run that cannot be read at
// all (no directory, no valid meta.json, no rank file) is an error.
#ifndef SHARDLAB_TRACE_H
#define SHARDLAB_TRACE_H

#include <stddef.h>

#include "common/runfiles/json.h"

// The most spans a trace holds, shared equally by the ranks (each keeps its first ones and
// counts the rest): about 150 MiB of JSON, which a browser still opens.
#define TRACE_MAX_SPANS (1 << 19)

typedef struct {
    int world;             // meta.json's world_size
    long spans;            // complete events written ("ph":"X"): one per span kept
    long counters;         // counter events written ("ph":"C")
    long metadata;         // metadata events written ("ph":"M")
    long events;           // all of them
    long ranks_missing;    // ranks whose rank-<r>.jsonl could not be read
    long skipped_lines;    // lines that are no event of this rank (see above)
    long spans_dropped;    // spans past a rank's share of TRACE_MAX_SPANS
    long steps_untimed;    // step events whose step has no span to place their counters at
    long nonfinite;        // counter values left out because they were NaN or infinite
    char problem[400];     // the first thing skipped: "rank-1.jsonl line 7: expected ':' ..."
} TraceStats;

// The trace of the run directory dir, appended to out. Returns 0, or -1 with the reason in
// err when the run cannot be read at all; err names the run's files, not dir itself
// ("meta.json: missing ..."), so the web server may show it.
int trace_run(const char *dir, StrBuf *out, TraceStats *st, char *err, size_t errlen);

// `shardlab trace RUN_DIR [-o FILE]`: writes the trace (default RUN_DIR/trace.json, - for
// stdout) and one line saying where, how many events, and what opens it. Exit status 0, 1
// when the run cannot be read or the file written, 2 on bad arguments.
int trace_main(int argc, char **argv);

#endif
