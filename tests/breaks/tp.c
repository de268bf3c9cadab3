// tp.c — a tensor parallelism whose f forgets one backward sum (tests/test_tp.c must catch it).
//
// f's backward (10-tp/f_and_g.c's tp_f_backward) sums the ranks' partial gradients of a
// column-parallel linear's input: an all-reduce, or with --sp a reduce-scatter. Here block 0's
// attention (layer 1, "attn") skips it: each rank takes its own partial gradient for the sum
// (with --sp, its own rows of it). The gradients of everything below that f are wrong, and
// the loss leaves single's. The passes of 10-tp/tensor_parallel.c call f from another file.
#include <string.h>

#include "10-tp/tensor_parallel.h"
#include "breaks.h"

const char BREAK_WHAT[] = "block 0's attention f skips its backward all-reduce (--sp: reduce-scatter)";

void __real_tp_f_backward(Tp *tp, float *in, float *out, int layer, const char *at);

void __wrap_tp_f_backward(Tp *tp, float *in, float *out, int layer, const char *at) {
    if (layer != 1 || strcmp(at, "attn") != 0) {
        __real_tp_f_backward(tp, in, out, layer, at);
        return;
    }
    if (tp->sp) tp->ops->copy(out, in + (size_t)tp->row0 * tp->cfg.dim, (size_t)tp->rows * tp->cfg.dim);
}
