// spantime.h — a rank's step from its spans, exactly: how long it computed, communicated, and
// communicated while it computed (interval arithmetic on the spans, not sampled). The
// dashboard's timeline and `shardlab whatif` read a step the same way.
//
#ifndef SHARDLAB_SPANTIME_H
#define SHARDLAB_SPANTIME_H

#include <stdint.h>

#include "runread.h"

typedef struct {
    int64_t compute_us;  // the union of the compute spans (fwd, bwd, recompute, optim), less the
                         // waits inside them: a blocking collective in a forward is not compute
    int64_t comm_us;     // the union of the others (the collectives, send and recv)
    int64_t hidden_us;   // the part of comm_us inside compute_us: communication overlap hid
    int64_t busy_us;     // the union of all of them
    int64_t waited_us;   // the union of the waits: each communication span's waited_from_us..t1_us
    int64_t window_us;   // the compute after the first communication began: the most that
                         // communication, however long, could have hidden
} SpanTime;

// fwd, bwd, recompute and optim are compute; every other span is communication.
int span_is_compute(const char *name);
SpanTime span_time(const RunSpans *sp);

#endif
