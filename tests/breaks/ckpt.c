// ckpt.c — activation checkpointing that never recomputes (tests/test_ckpt.c must catch it).
//
// Before the backward of a segment's last block, 14-activation-checkpointing/activation_checkpointing.c runs the
// segment's blocks forward again, from its kept input, into the workspace its backward reads
// (gpt_layer_forward, common/model/gpt.c). Here those forwards do nothing: the recompute spans are
// logged as due, but the backward reads what the workspace holds from another segment, and
// the gradients are wrong. A recompute is a forward that comes while a backward pass is under
// way: after a gpt_layer_backward, and before the next pass begins at the embedding (layer 0,
// which a segment never holds).
#include "breaks.h"
#include "common/model/gpt.h"

const char BREAK_WHAT[] = "checkpointed blocks are not recomputed: the backward reads a stale workspace";

double __real_gpt_layer_forward(const Ops *ops, const GptConfig *c, int layer, const float *params, GptActs *a,
                                const uint8_t *tokens, const uint8_t *targets, float *scratch);
void __real_gpt_layer_backward(const Ops *ops, const GptConfig *c, int layer, const float *params, float *grads,
                               const GptActs *a, const uint8_t *tokens, const uint8_t *targets, float loss_scale,
                               float *dx, float *scratch);

static int in_backward;  // a backward pass is under way

double __wrap_gpt_layer_forward(const Ops *ops, const GptConfig *c, int layer, const float *params, GptActs *a,
                                const uint8_t *tokens, const uint8_t *targets, float *scratch) {
    if (layer == 0) in_backward = 0;
    if (in_backward) return 0;  // a recompute, skipped (its loss is not counted anyway)
    return __real_gpt_layer_forward(ops, c, layer, params, a, tokens, targets, scratch);
}

void __wrap_gpt_layer_backward(const Ops *ops, const GptConfig *c, int layer, const float *params, float *grads,
                               const GptActs *a, const uint8_t *tokens, const uint8_t *targets, float loss_scale,
                               float *dx, float *scratch) {
    in_backward = 1;
    __real_gpt_layer_backward(ops, c, layer, params, grads, a, tokens, targets, loss_scale, dx, scratch);
}
