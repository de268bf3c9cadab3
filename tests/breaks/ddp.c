// ddp.c — a DDP that forgets to use one bucket's sum (tests/test_ddp.c must catch it).
//
// Bucket 0's all-reduce runs and sends its bytes as always, but when the lab waits for it the
// bucket's buffer holds this rank's own gradients again: the lab unpacks them in place of the
// sum. So every rank updates that part of the model with its own gradient, and the replicas
// drift apart from step 1. The lab starts and waits for its buckets' all-reduces with
// dist_all_reduce_start() and dist_wait() (common/comm/dist.c); the buckets are tagged with their
// index, and no other call of the lab carries tag 0. In every --sync mode (per-tensor: the
// first tensor's gradient, all-reduced in place, keeps its local values).
#include <stdlib.h>

#include "breaks.h"
#include "common/comm/dist.h"
#include "common/harness/check.h"

const char BREAK_WHAT[] = "bucket 0's sum is not used";

void __real_dist_all_reduce_start(DistGroup *g, float *buf, size_t n, int tag, DistWork *w);
void __real_dist_wait(DistWork *w);

static DistWork *bucket0;  // bucket 0's all-reduce, under way
static const Device *dev;
static float *local, *buf0;  // its buffer's values before the all-reduce (host), and the buffer
static size_t n0;

void __wrap_dist_all_reduce_start(DistGroup *g, float *buf, size_t n, int tag, DistWork *w) {
    if (tag == 0) {
        dev = g->dist->dev, buf0 = buf, n0 = n, bucket0 = w;
        local = realloc_check(local, (n ? n : 1) * sizeof(float));
        device_to_host(dev, local, buf, n * sizeof(float));
    }
    __real_dist_all_reduce_start(g, buf, n, tag, w);
}

void __wrap_dist_wait(DistWork *w) {
    __real_dist_wait(w);
    if (w != bucket0) return;
    device_from_host(dev, buf0, local, n0 * sizeof(float));  // the sum, thrown away
    bucket0 = NULL;
}
