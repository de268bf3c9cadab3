// f_and_g.c — see tensor_parallel.h: the two conjugate operators f and g, which carry all the
// communication of tensor parallelism (the passes that call them are tensor_parallel.c's).
#include "tensor_parallel.h"  // defines: Tp, tp_f_forward(), tp_log_collectives(), ...

#include "common/harness/check.h"  // defines: die()

// A column-parallel linear Y_r = X A_r needs all of X on every rank, and gives each rank a
// slice of the outputs; a row-parallel linear Z = sum_r Y_r B_r gives each rank a PARTIAL
// sum. Chained (attention: c_attn then c_proj; MLP: c_fc then c_proj), the slice Y_r is
// exactly what the row-parallel half reads, so nothing moves in between: one collective
// before (f) and one after (g), and their gradients mirror each other.

static void check_rows(const Tp *tp, const void *in, const void *out, const char *which) {
    if (!tp->sp && in != out)
        die("this is a bug in shardlab's tensor parallelism", "%s without sequence parallelism works in place", which);
}

// f forward. Without SP every rank already holds all of X, the same bits: identity. With SP
// rank r holds its rows of X: all-gather them, and every rank has all rows.
void tp_f_forward(Tp *tp, const float *in, float *out, int layer, const char *at) {
    check_rows(tp, in, out, "f");
    if (!tp->sp) return;
    dist_all_gather(tp->group, in, out, (size_t)tp->BT * tp->cfg.dim);
    tp_log_collectives(tp, "tp", "f", at, layer, &tp->model);
}

// --mixed with --sp: the all-gathers of f forward and g backward move bf16. What they gather
// is only ever read by a Linear, which rounds it to bf16 anyway (a column-parallel Linear's
// input, a row-parallel Linear's output gradient), so rounding the rows before they travel
// changes no number and halves the bytes. dist.h's bf16 collectives want the rows to split
// into whole pairs: BT C divisible by 2t; else they go as fp32 (and are rounded after).
int tp_gathers_bf16(const Tp *tp) {
    return tp->sp && tp->cfg.mixed && (size_t)tp->BT * tp->cfg.dim % (2 * (size_t)tp->t) == 0;
}

// g backward under --mixed: out gets all BT rows of the gradient, gathered as bf16 (rows16:
// R C bf16s, all16: BT C bf16s on the way) and widened.
void tp_g_backward_bf16(Tp *tp, const float *in, float *out, bf16 *rows16, bf16 *all16, int layer, const char *at) {
    if (!tp_gathers_bf16(tp)) {
        tp_g_backward(tp, in, out, layer, at);
        return;
    }
    size_t n = (size_t)tp->BT * tp->cfg.dim;
    tp->ops->to_bf16(rows16, in, (size_t)tp->rows * tp->cfg.dim);
    dist_all_gather_bf16(tp->group, rows16, all16, n);
    tp_log_collectives(tp, "tp", "g", at, layer, &tp->model);
    tp->ops->from_bf16(out, all16, n);
}

// f backward. X fed every rank's slice of the linear, so its gradient is the SUM of the
// ranks' partial gradients dX_r = dY_r A_r^T. Without SP: all-reduce it, every rank gets all
// rows. With SP: reduce-scatter, rank r keeps the summed gradient of its own rows.
void tp_f_backward(Tp *tp, float *in, float *out, int layer, const char *at) {
    check_rows(tp, in, out, "f");
    // The gradient at all BT rows of X, BT C floats: in is this rank's partial; the sum goes
    // in place (without SP), or rank r's rows of it into out (with SP).
    /* BEGIN SOLUTION: f backward: sum the ranks' partial input gradients (SP: reduce-scatter) */
    size_t n = (size_t)tp->BT * tp->cfg.dim;
    if (tp->sp) dist_reduce_scatter(tp->group, in, out, n);
    else dist_all_reduce(tp->group, in, n);
    /* END SOLUTION */
    tp_log_collectives(tp, "tp", "f", at, layer, &tp->model);
}

// g forward. Each rank's row-parallel linear gives a partial output Z_r = Y_r B_r: the output
// is their sum. Without SP: all-reduce, every rank gets all rows of the sum. With SP:
// reduce-scatter, rank r gets its rows of the sum (the pointwise work after g, bias, residual
// and the next LayerNorm, then runs on 1/t of the rows).
void tp_g_forward(Tp *tp, float *in, float *out, int layer, const char *at) {
    check_rows(tp, in, out, "g");
    // in: this rank's partial output at all BT rows, BT C floats; the sum goes in place
    // (without SP), or rank r's rows of it into out (with SP).
    /* BEGIN SOLUTION: g forward: sum the ranks' partial outputs of the row-parallel linear (SP: reduce-scatter) */
    size_t n = (size_t)tp->BT * tp->cfg.dim;
    if (tp->sp) dist_reduce_scatter(tp->group, in, out, n);
    else dist_all_reduce(tp->group, in, n);
    /* END SOLUTION */
    tp_log_collectives(tp, "tp", "g", at, layer, &tp->model);
}

// g backward. The gradient of a sum is the same for every term: each rank's Z_r gets dZ.
// Without SP every rank holds all of dZ already: identity. With SP: all-gather the rows.
void tp_g_backward(Tp *tp, const float *in, float *out, int layer, const char *at) {
    check_rows(tp, in, out, "g");
    if (!tp->sp) return;
    dist_all_gather(tp->group, in, out, (size_t)tp->BT * tp->cfg.dim);
    tp_log_collectives(tp, "tp", "g", at, layer, &tp->model);
}
