// pp.c — a pipeline that loses one gradient between stages (tests/test_pp.c must catch it).
//
// After B on a chunk, its stage posts the gradient at the chunk's input for the stage before
// (12-pp/messages.c's outbox_post, from pp.c). Here micro-batch 0's goes as zeros: the stage
// before runs its backward of micro-batch 0 on a zero gradient: its layers' gradients miss
// that micro-batch's share, and the weights leave single's.
#include "12-pp/messages.h"
#include "breaks.h"

const char BREAK_WHAT[] = "micro-batch 0's gradient is sent as zeros";

void __real_outbox_post(Outbox *o, int bwd, int mb, int k, float *buf);

void __wrap_outbox_post(Outbox *o, int bwd, int mb, int k, float *buf) {
    if (bwd && mb == 0) o->mem->dev->ops->zero(buf, o->n);
    __real_outbox_post(o, bwd, mb, k, buf);
}
