// fsdp.c — an FSDP that forgets one unit's reduce-scatter (tests/test_fsdp.c must catch it).
//
// After each unit's backward, fsdp.c sums the unit's gradient over the ranks into this rank's
// gradient shard with 08-zero/sharded.c's sharded_reduce_gradient, tagged with the unit. Here
// unit 0's is skipped: its shard keeps the zeros it started the step with, so AdamW updates
// the embedding without its gradient. The loss drifts from single's, and the bytes sent for
// unit 0 are short by its reduce-scatter.
#include "08-zero/sharded.h"
#include "breaks.h"

const char BREAK_WHAT[] = "unit 0's gradient is not reduce-scattered";

void __real_sharded_reduce_gradient(DistGroup *g, Precision p, Mem *mem, const float *g32, void *shard_acc, size_t n,
                                    int tag);

void __wrap_sharded_reduce_gradient(DistGroup *g, Precision p, Mem *mem, const float *g32, void *shard_acc, size_t n,
                                    int tag) {
    if (tag == 0) return;
    __real_sharded_reduce_gradient(g, p, mem, g32, shard_acc, n, tag);
}
