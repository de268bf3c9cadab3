// activation_checkpointing.c — see activation_checkpointing.h.
#include "activation_checkpointing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/harness/check.h"  // defines: calloc_check()
#include "common/harness/train.h"  // defines: SpanLogger, span_logger_add(), ...

// ---------------------------------------------------------------------------------------
// The layout: a GptActs whose checkpointed blocks point into the workspace
// ---------------------------------------------------------------------------------------

// Lays the activations out with k (gpt.h's carving: floats, then bf16s); with k->floats NULL
// it only counts. A block's insides are everything gpt_block_backward reads but its input; not
// its output, which only the next layer reads. Block l of segment i uses workspace slot
// l - first[i].
static void lay_out(GptActs *a, const GptConfig *c, int B, const CkptPolicy *p, GptCarve *k) {
    size_t BTC = (size_t)B * c->seq * c->dim;
    BlockActs slot[CKPT_MAX_BLOCKS];
    a->x0 = gpt_carve_floats(k, BTC);
    for (int i = 0; i < p->width; i++) {  // the workspace
        gpt_carve_block(&slot[i], k, c, B);
        slot[i].out = i < p->width - 1 ? gpt_carve_floats(k, BTC) : NULL;
    }
    for (int l = 1; l <= c->layers; l++) {
        BlockActs *b = &a->blocks[l - 1];
        int i = p->seg_of[l];
        if (i < 0) gpt_carve_block(b, k, c, B);  // kept whole
        else *b = slot[l - p->first[i]];
        if (i < 0 || l == p->last[i]) b->out = gpt_carve_floats(k, BTC);  // kept: the next layer's input
    }
    gpt_carve_head(&a->head, k, c, B);
}

void ckpt_acts_alloc(GptActs *a, const GptConfig *c, int B, const CkptPolicy *p, Mem *mem) {
    memset(a, 0, sizeof *a);
    a->B = B;
    a->blocks = calloc_check((size_t)c->layers, sizeof *a->blocks);
    GptCarve count = {0};
    lay_out(a, c, B, p, &count);
    a->buffer = mem_alloc(mem, MEM_ACTS, 4 * count.nfloats + 2 * count.nhalves, "activations");
    GptCarve k = {.floats = a->buffer, .halves = (bf16 *)(a->buffer + count.nfloats)};
    lay_out(a, c, B, p, &k);
}

// ---------------------------------------------------------------------------------------
// Forward, and backward with recomputation
// ---------------------------------------------------------------------------------------

// A span on the device's clock (train.h's span logger: on a GPU read when the pass ends, so
// nothing waits for the GPU layer by layer).
static void span(const Gpt *g, CkptPass *x, SpanLogger *spans, const char *name, int layer, DeviceMark m0) {
    if (!x->log) return;
    span_logger_add(spans, g->mem->dev, name, layer, m0, device_mark(g->mem->dev));
}

double ckpt_forward_backward(Gpt *g, const CkptPolicy *p, GptActs *a, const uint8_t *tokens,
                             const uint8_t *targets, float loss_scale, CkptPass *x) {
    const GptConfig *c = &g->cfg;
    const Ops *ops = g->mem->dev->ops;
    float *scratch = mem_alloc_floats(g->mem, MEM_ACTS, gpt_pass_scratch_floats(c, a->B, g->mem->dev->kind == DEVICE_CUDA), "workspace");
    float *dx = mem_alloc_floats(g->mem, MEM_ACTS, (size_t)a->B * c->seq * c->dim, "residual gradient");
    double loss_sum = 0;
    SpanLogger spans = {.log = x->log, .step = x->step, .mb = x->mb};
    for (int l = 0; l < g->nlayers; l++) {  // a checkpointed block's insides land in the workspace
        DeviceMark m0 = device_mark(g->mem->dev);
        loss_sum += gpt_layer_forward(ops, c, l, g->params[l], a, tokens, targets, scratch);
        span(g, x, &spans, "fwd", l, m0);
    }
    for (int l = g->nlayers - 1; l >= 0; l--) {
        // Block l is the LAST block of segment i (p->seg_of[l]; only blocks 1..L have one):
        // the workspace holds another segment's insides, so run segment i's blocks
        // first[i]..l forward again from the segment's kept input before l's backward: each
        // a "recompute" span; x->recompute_us adds up the time.
        /* BEGIN SOLUTION: recompute the segment that ends at block l, before its backward */
        int i = l >= 1 && l <= c->layers ? p->seg_of[l] : -1;
        if (i >= 0 && l == p->last[i]) {  // the segment forward again, from its kept input
            int64_t r0 = runlog_now_us();
            for (int j = p->first[i]; j <= l; j++) {
                DeviceMark m0 = device_mark(g->mem->dev);
                gpt_layer_forward(ops, c, j, g->params[j], a, tokens, targets, scratch);
                span(g, x, &spans, "recompute", j, m0);
            }
            device_sync(g->mem->dev);
            x->recompute_us += runlog_now_us() - r0;
        }
        /* END SOLUTION */
        DeviceMark m0 = device_mark(g->mem->dev);
        gpt_layer_backward(ops, c, l, g->params[l], g->grads[l], a, tokens, targets, loss_scale, dx, scratch);
        span(g, x, &spans, "bwd", l, m0);
    }
    span_logger_flush(&spans);
    mem_free(g->mem, dx);
    mem_free(g->mem, scratch);
    return loss_sum;
}
