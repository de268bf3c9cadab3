// single.c — one rank, no parallelism: where training memory goes.
//
// The baseline every other lab is graded against, and the lab of lesson 2. One process
// trains the GPT of common/model/gpt.h on the synthetic corpus and shows where its memory goes.
//
// The code it runs:
//   the forward and backward: labs/common/model/gpt.c, gpt_forward(), gpt_backward()
//   the micro-batches of a step: labs/common/harness/train.c, train_accumulate()
//   AdamW: labs/common/model/adamw.c, adamw_update()
//   the memory count: labs/common/harness/mem.c, mem_alloc()
//
// Run it:   make lab-single [STEPS=200] [ARGS="--dim 128"]
//           build/labs/single --help
//
// Lexicon: parameter, gradient, optimizer state, AdamW, activation memory, gradient
//          accumulation, micro-batch, cross-entropy, loss floor.
//
// What it is graded against (fp32 weights, fp32 AdamW, Psi = number of parameters):
//     params  4 Psi bytes
//     grads   4 Psi bytes
//     optim   8 Psi bytes           AdamW keeps two fp32 moments per parameter
//     acts    4 B T (2C + 2 + V + L (16C + 4 + NH T)) bytes for a micro-batch of B
//             sequences with --attn naive: what each layer saves for the backward pass
//             (common/model/gpt.h); 4 B T (2C + 2 + V + L (16C + 4 + NH)) with --attn flash, which
//             keeps one log-sum-exp per head and token instead of NH T probabilities
// The first three add up to 16 Psi: before a single activation, training needs four times
// the memory of the weights. Activations grow with batch and sequence length, and naive
// attention's probabilities grow with T^2 — the reasons for flash attention, ZeRO, FSDP and
// checkpointing.
//
// With --moe E every block's MLP is E experts and a router (common/model/moe.h): the
// reference lab-ep is graded against. Each step event then carries the load-balancing loss
// ("aux_loss", beside "loss", which stays the cross-entropy), the dropped assignments and
// the tokens each block's router gave each expert ("expert_load"). Its activations replace
// the MLP's 8C floats a token with the layer's E + 4K + 2K(C + H) words.
//
// And: the loss falls from ln(256) = 5.55 towards the corpus' loss floor; a run with
// --accum K gives the same training as --accum 1 (up to fp32 rounding), because the
// gradient of a mean over the global batch is the sum of its micro-batches' parts.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/harness/args.h"     // defines: TrainArgs, train_args_parse()
#include "common/harness/check.h"
#include "common/harness/data.h"
#include "common/harness/lab.h"      // defines: Lab, lab_open(), lab_begin(), ...
#include "common/harness/mem.h"      // defines: mem_alloc()
#include "common/harness/train.h"    // defines: train_accumulate(), SYNTH_ORDER, GptAdamW, ...
#include "common/model/adamw.h"      // defines: AdamW, adamw_update()
#include "common/model/gpt.h"        // defines: gpt_forward(), gpt_backward(), GptConfig, Gpt, ...
#include "common/runfiles/dcp.h"     // defines: DcpState, dcp_add_units(), dcp_state_free()
#include "common/runfiles/runlog.h"  // defines: runlog_printf(), StepRecord

// ---------------------------------------------------------------------------------------
// Training
// ---------------------------------------------------------------------------------------

int main(int argc, char **argv) {
    TrainArgs a;
    const LabBind own[] = {{"moe", &a.moe}, {"topk", &a.topk}, {"expert-dim", &a.expert_dim},
                           {"capacity", &a.capacity}, {"aux-weight", &a.aux_weight}};
    train_args_parse(&a, argc, argv, catalog_lab("single"), own, (int)(sizeof own / sizeof own[0]));
    Lab L;  // the harness (common/harness/lab.h): device, run log, corpus, memory, the step's bookkeeping
    lab_open(&L, "single", &a, argc, argv, LAB_ONE_RANK);
    lab_begin(&L, "1 rank on %s", L.dev.name);
    if (L.corpus.synthetic)
        runlog_printf(&L.log, "data: synthetic order-%d Markov corpus, %zu bytes, entropy rate %.4f nats/token, "
                              "loss floor at T=%d: %.4f\n",
                      SYNTH_ORDER, L.corpus.n, L.corpus.entropy_rate, a.seq, L.floor);
    else
        runlog_printf(&L.log, "data: %s, %zu bytes\n", L.corpus.source, L.corpus.n);
    if (a.moe > 0) {
        int pass = a.batch / a.accum * a.seq;  // the tokens of one forward pass, where capacity counts
        MoeConfig m = {.E = a.moe, .K = a.topk, .capacity = a.capacity};
        runlog_printf(&L.log, "experts: %d per block, top %d a token, hidden %d, aux loss weight %g; ", a.moe, a.topk,
                      a.expert_dim, a.aux_weight);
        if (a.capacity > 0)
            runlog_printf(&L.log, "capacity factor %g: at most %d of a pass's %d tokens each\n", a.capacity,
                          moe_capacity(&m, pass), pass);
        else
            runlog_printf(&L.log, "dropless\n");
    }

    // The model, its gradients, the optimizer state and the activations: every buffer
    // through the counting allocator.
    GptConfig cfg = L.cfg;
    Gpt model;
    GptAdamW adam;
    lab_replica_create(&L, &model, &adam);
    if (a.init) runlog_printf(&L.log, "weights: loaded from %s\n", a.init);
    int micro = a.batch / a.accum;  // sequences per micro-batch
    GptActs acts;
    gpt_acts_alloc(&acts, &cfg, micro, &L.mem);

    lab_start(&L, gpt_num_params(&cfg), NULL);
    // What it is graded against (see the top of this file): 4 Psi of parameters, 4 Psi of
    // gradients, 8 Psi of AdamW moments, the activations' formula.
    lab_replica_memory(&L, micro, NULL, 0, 0);

    // Distributed checkpoints (dcp.h): one rank holds the whole state and saves it whole.
    DcpState state = {0};
    dcp_add_units(&state, &cfg, model.params, adam.m, adam.v, 0, 1);
    int64_t first_step = lab_first_step(&L, &state, NULL);
    SpanLogger spans = {.log = &L.log};

    for (int64_t step = first_step; step <= a.steps; step++) {
        int interrupted = lab_step_begin(&L, step);
        if (interrupted) return interrupted;
        spans.step = step;

        // Forward and backward over the micro-batches (common/harness/train.c): each token's loss
        // enters the mean over the global batch with weight 1/(B T), so the micro-batches'
        // gradients add up to exactly the gradient of that mean.
        gpt_zero_grads(&model);
        gpt_moe_stats_reset(&model.moe, &cfg);
        double loss_sum = train_accumulate(&model, &acts, &L.corpus, &a, step, 0, a.batch,
                                           (float)(1.0 / L.tokens_per_step), &spans, NULL);
        double loss = loss_sum / L.tokens_per_step;

        // Clip the global gradient norm, then one AdamW step per layer buffer.
        double lr, grad_norm = lab_replica_update(&L, &model, &adam, &lr);

        StepRecord rec = {.step = step, .loss = loss, .lr = lr, .grad_norm = grad_norm,
                          .tokens = (int64_t)L.tokens_per_step};
        StrBuf moe = {0};
        if (cfg.experts > 0) train_moe_fields(&moe, &model.moe, &cfg), rec.extra = moe.data;
        lab_replica_step_end(&L, &model, &rec, 0, &state);
        sb_free(&moe);
    }
    dcp_state_free(&state);
    lab_replica_close(&L, &model, &adam, &acts, NULL);
    return 0;
}
