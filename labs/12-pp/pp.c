// pp.c — pipeline parallelism from scratch: the model split by depth, micro-batches in flight.
//
// The L blocks are split into stages, one per rank: rank 0 also holds the embedding, the last
// rank the head. A micro-batch's activations flow forward from stage to stage (send/recv), its
// gradients flow back. With one micro-batch at a time every stage but one would wait: the
// global batch is cut into m micro-batches and a SCHEDULE decides, on every stage, in which
// order their forward (F) and backward (B) passes run. The waiting that remains is the
// pipeline BUBBLE.
//
// The algorithms it runs:
//   the schedules: labs/12-pp/schedule.c, schedule_ops(), bubble_formula()
//   a stage's layers and update: labs/12-pp/stage.c, stage_create(), stage_update()
//   the messages: labs/12-pp/messages.c, outbox_plan(), outbox_exchange()
//   the messages sent at once: labs/03-collectives/direct.c, p2p_batch()
//
// Run it:   make lab-pp NGPU=4 SCHEDULE=1f1b MICRO=8
//           build/shardlab run pp -n 4 --schedule interleaved --chunks 2 --micro 8 --layers 16
//           build/labs/pp --help
//
// The model: every lab's GPT, except its depth when --layers is not given: a stage needs a
// block, so the pipeline takes one block per model chunk (stages x chunks; --split's sum
// when given), and at least the 2 of every other lab (at p <= 2 the model is single's). The
// run's config (meta.json) records the depth it used, which the graders' references follow.
//
// Lexicon: pipeline parallelism, micro-batch, pipeline bubble, GPipe, 1F1B, interleaved 1F1B,
//          send/recv (point-to-point), 2D parallelism.
//
// The schedules (p stages, m micro-batches; s = this rank's stage, 0-based; each stage's
// order and its simulation are 12-pp/schedule.c, a stage's layers and their update 12-pp/stage.c):
//   gpipe        every forward, then every backward. Stage s holds the activations of all m
//                micro-batches at once.
//   1f1b         warm-up: p-s-1 forwards; steady state: one forward, one backward; cool-down:
//                the last backwards. The same bubble as GPipe, but stage s never holds more
//                than p-s micro-batches' activations (GPipe: m).
//   interleaved  each rank holds v model CHUNKS (--chunks v), chunk k of the p v on rank k mod
//                p (Megatron-LM's interleaved 1F1B): a micro-batch goes round the ranks v
//                times, and the warm-up and cool-down shrink v-fold. Needs m a multiple of p.
// With forward cost 1 and backward 2 (per chunk), the bubble fraction of the step is
//     gpipe, 1f1b:   (p-1) / (m+p-1)          interleaved:   (p-1) / (v m + p-1)
// which the lab checks against its own schedule (simulated with those costs) and prints
// beside the fraction it measured.
//
// Messages (12-pp/messages.c): after F on chunk k, the output goes to chunk k+1's rank; after
// B, the gradient at the chunk's input goes to chunk k-1's rank. A rank sends to each
// neighbour in the order that neighbour will ask (its schedule is known to everyone), and
// every receive goes in one batch (dist_p2p) with the sends that are ready, as Megatron-LM's
// batched send/recv does: two neighbours that send each other something at the same moment
// cannot deadlock.
//
// --dp D (2-D, PP x DP): N = p D ranks, rank = s D + d: stage s of pipeline d. The global
// batch is split over the D pipelines; after the backward passes the D replicas of a stage
// all-reduce their gradients.
//
// What it is graded against (tests/test_pp.c):
//   loss and final weights  without --dp, BITWISE those of `single --accum m` (the same
//                  micro-batches, each layer's gradient accumulated in the same order, the
//                  gradient norm summed layer by layer in the same order); with --dp, equal
//                  within fp32 reordering
//   memory         params 4 Psi_s, grads 4 Psi_s, optim 8 Psi_s (Psi_s: this stage's
//                  parameters); activations: (micro-batches in flight) x (one micro-batch's
//                  activations of this stage's layers), plus the workspace
//   schedule       the bubble fraction from the span order (costs 1 and 2) equals the
//                  formula; GPipe holds m micro-batches, 1F1B at most p-s
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/comm/dist.h"        // defines: dist_p2p(), DistP2p, DistGroup, Dist, ...
#include "common/harness/args.h"     // defines: TrainArgs, train_args_parse(), train_lr()
#include "common/harness/check.h"    // defines: calloc_check(), usage_error(), malloc_check()
#include "common/harness/data.h"     // defines: Corpus
#include "common/harness/lab.h"      // defines: LAB_MAX_RECORDS, Lab, lab_open(), lab_begin(), ...
#include "common/harness/mem.h"      // defines: Mem, mem_alloc_floats(), mem_in_use(), ...
#include "common/harness/train.h"    // defines: train_micro_batch(), train_save_weights()
#include "common/model/gpt.h"        // defines: GptActs, GptConfig, gpt_acts_alloc_layers(), ...
#include "common/runfiles/dcp.h"     // defines: DcpState, dcp_add_units(), dcp_state_free()
#include "common/runfiles/runlog.h"  // defines: RunLog, runlog_now_us(), runlog_span_extra(), ...
#include "messages.h"                // defines: outbox_plan(), outbox_exchange(), Outbox, ...
#include "schedule.h"                // defines: schedule_ops(), bubble_formula(), Pipe, Op, ...
#include "stage.h"                   // defines: stage_create(), stage_update(), Stage, ...

// ---------------------------------------------------------------------------------------
// Running the schedule
// ---------------------------------------------------------------------------------------

typedef struct {
    const Pipe *pp;
    int s;                       // this rank's stage
    Outbox out;                  // what this stage sends (12-pp/messages.h)
    Mem *mem;
    size_t msg_floats;           // B T C: every message is one micro-batch's [B T, C]
    GptActs *acts;               // [v * m]: (local chunk, micro-batch)'s activations while alive
    int live, live_max;          // micro-batches (x chunks) whose activations are held
    size_t live_bytes, live_bytes_max;
} Runner;

typedef struct {
    const Corpus *corpus;
    const TrainArgs *a;
    RunLog *log;
    int first, micro;          // this pipeline's sequences start at `first`; micro-batches of `micro`
    float loss_scale;
    int64_t step;
    float *scratch, *dx;       // workspace
    int64_t busy_us;           // time in F and B this step
    int64_t t_end_us;          // when the last operation ended
} StepCtx;

static GptActs *slot(Runner *r, int k, int mb) { return &r->acts[(k / r->pp->p) * r->pp->m + mb]; }

// Runs one operation; returns the loss sum (forward of the last chunk), else 0.
static double run_op(Runner *r, Stage *st, StepCtx *x, Op o, uint8_t *tokens, uint8_t *targets) {
    const Pipe *pp = r->pp;
    const GptConfig *c = &st->cfg;
    const Ops *ops = r->mem->dev->ops;
    int k = o.k, lo = pp->first[k], hi = pp->last[k], K = pp->K;
    GptActs *a = slot(r, k, o.mb);
    if (lo == 0 || hi == c->layers + 1)  // only the embedding reads tokens, only the head targets
        train_micro_batch(x->corpus, x->a, x->step, x->first + o.mb * x->micro, x->micro, tokens, targets);
    char extra[64];
    snprintf(extra, sizeof extra, "\"chunk\":%d,\"stage\":%d", k, r->s);
    double loss = 0;
    if (!o.bwd) {
        // Activations for this chunk's layers, and its input: received, or handed over.
        gpt_acts_alloc_layers(a, c, x->micro, lo, hi, r->mem);
        size_t bytes = gpt_acts_layers_bytes(c, x->micro, lo, hi);
        r->live++, r->live_bytes += bytes;
        if (r->live > r->live_max) r->live_max = r->live;
        if (r->live_bytes > r->live_bytes_max) r->live_bytes_max = r->live_bytes;
        if (k > 0) {
            float *in = gpt_layer_output(c, a, lo - 1);
            if (stage_of(pp, k - 1) == r->s) {
                ops->copy(in, gpt_layer_output(c, slot(r, k - 1, o.mb), pp->last[k - 1]), r->msg_floats);
                outbox_exchange(&r->out, NULL, 0);
            } else {
                DistP2p recv = {.send = 0, .peer = stage_of(pp, k - 1), .buf = in, .n = r->msg_floats, .tag = o.mb};
                outbox_exchange(&r->out, &recv, 0);
            }
        } else {
            outbox_exchange(&r->out, NULL, 0);
        }
        int64_t t0 = runlog_now_us();
        for (int l = lo; l <= hi; l++) loss += gpt_layer_forward(ops, c, l, st->params[l], a, tokens, targets, x->scratch);
        device_sync(r->mem->dev);
        int64_t t1 = runlog_now_us();
        runlog_span_extra(x->log, x->step, "fwd", o.mb, lo, t0, t1, 0, extra);
        x->busy_us += t1 - t0, x->t_end_us = t1;
        if (k < K - 1 && stage_of(pp, k + 1) != r->s) outbox_post(&r->out, 0, o.mb, k, gpt_layer_output(c, a, hi));
    } else {
        // The gradient at this chunk's output: the head makes its own; else received, or
        // handed over from the next chunk on this rank (still in dx).
        if (k < K - 1 && stage_of(pp, k + 1) != r->s) {
            DistP2p recv = {.send = 0, .peer = stage_of(pp, k + 1), .buf = x->dx, .n = r->msg_floats, .tag = o.mb};
            outbox_exchange(&r->out, &recv, 0);
        } else {
            outbox_exchange(&r->out, NULL, 0);
        }
        int64_t t0 = runlog_now_us();
        for (int l = hi; l >= lo; l--)
            gpt_layer_backward(ops, c, l, st->params[l], st->grads[l], a, tokens, targets, x->loss_scale, x->dx,
                               x->scratch);
        device_sync(r->mem->dev);
        int64_t t1 = runlog_now_us();
        runlog_span_extra(x->log, x->step, "bwd", o.mb, lo, t0, t1, 0, extra);
        x->busy_us += t1 - t0, x->t_end_us = t1;
        if (k > 0 && stage_of(pp, k - 1) != r->s) {  // in a buffer of its own: dx is the next B's
            float *buf = mem_alloc_floats(r->mem, MEM_COMM, r->msg_floats, "gradient on its way");
            ops->copy(buf, x->dx, r->msg_floats);
            outbox_post(&r->out, 1, o.mb, k, buf);
        }
        r->live--, r->live_bytes -= gpt_acts_layers_bytes(c, x->micro, lo, hi);
        gpt_acts_free(a, r->mem);
    }
    return loss;
}

// ---------------------------------------------------------------------------------------
// The lab
// ---------------------------------------------------------------------------------------

// One step's pipeline phase on this stage: its ops in order, messages in between, then what is
// still on its way. Returns the sum of its token losses; *measured: the bubble this rank saw,
// the part of the phase (from t0) it spent not computing.
static double run_schedule(Runner *run, Stage *st, StepCtx *x, const Op *ops, int nops, uint8_t *tokens,
                           uint8_t *targets, int64_t t0, double *measured) {
    x->busy_us = 0, x->t_end_us = t0;
    outbox_start_step(&run->out);
    run->live = 0, run->live_max = 0, run->live_bytes = 0, run->live_bytes_max = 0;
    double loss_sum = 0;
    for (int i = 0; i < nops; i++) loss_sum += run_op(run, st, x, ops[i], tokens, targets);
    while (outbox_unsent(&run->out)) outbox_exchange(&run->out, NULL, 1);
    *measured = 1.0 - (double)x->busy_us / (double)(x->t_end_us - t0 > 0 ? x->t_end_us - t0 : 1);
    return loss_sum;
}

// The lab's own invariants, as check events (at the first step): the simulated schedule's
// bubble is the formula's, and the micro-batches this stage held at once the schedule's bound.
static void check_schedule(RunLog *log, const Pipe *pp, const Timeline *tl, const Runner *run) {
    runlog_check(log, "bubble of this schedule (costs 1 and 2) = formula", fabs(tl->bubble - bubble_formula(pp)) < 1e-12,
                 tl->bubble, bubble_formula(pp));
    runlog_check(log, "micro-batch activations held at once = the schedule's",
                 run->live_max == expected_in_flight(pp, run->s), run->live_max, expected_in_flight(pp, run->s));
}

// The stage's runner (its messages planned, a slot for the activations of each chunk and
// micro-batch) and the step's workspace: one pass's scratch, and the gradient flowing down
// through this rank's layers. Returns the workspace's bytes.
static size_t runner_create(Runner *run, StepCtx *x, const Pipe *pp, int s, DistGroup *pipe, const GptConfig *c, Mem *mem) {
    *run = (Runner){.pp = pp, .s = s, .mem = mem, .msg_floats = (size_t)x->micro * c->seq * c->dim};
    outbox_plan(&run->out, pp, s, pipe, mem, run->msg_floats);
    run->acts = calloc_check((size_t)pp->v * pp->m, sizeof *run->acts);
    x->scratch = mem_alloc_floats(mem, MEM_ACTS, gpt_pass_scratch_floats(c, x->micro, mem->dev->kind == DEVICE_CUDA), "workspace");
    x->dx = mem_alloc_floats(mem, MEM_ACTS, run->msg_floats, "residual gradient");
    return mem_in_use(mem, MEM_ACTS);
}

// The step's messages and collectives as spans (sends and receives with the time they were
// asked for); returns the time they took.
static int64_t log_comm_spans(RunLog *log, Dist *dist, DistRecord *records, int64_t step) {
    size_t k;
    int64_t comm_us = 0;
    while ((k = dist_drain_records(dist, records, LAB_MAX_RECORDS)) > 0)
        for (size_t i = 0; i < k; i++) {
            char extra[96] = "";
            if (records[i].coll == DIST_SEND || records[i].coll == DIST_RECV)
                snprintf(extra, sizeof extra, "\"issued_us\":%lld", (long long)records[i].issued_us);
            runlog_comm_span(log, step, dist_coll_name(records[i].coll), records[i].tag, -1, records[i].t0_us,
                             records[i].t1_us, records[i].bytes_sent + records[i].bytes_recv,
                             records[i].waited_from_us, extra);
            comm_us += records[i].t1_us - records[i].t0_us;
        }
    return comm_us;
}

int main(int argc, char **argv) {
    TrainArgs a;
    // The options' types, bounds and defaults: common/harness/catalog.c (--layers defaults to auto here:
    // see "The model's depth" in lay_out_pipe(); --chunks auto is -1).
    const char *sched_name, *split;
    int micro_batches, chunks, dp;
    LabBind own[] = {{"schedule", &sched_name}, {"micro", &micro_batches}, {"chunks", &chunks}, {"split", &split},
                     {"dp", &dp}};
    train_args_parse(&a, argc, argv, catalog_lab("pp"), own, 5);
    Pipe pp = {.m = micro_batches};
    for (int i = 0; i < 3; i++)
        if (strcmp(sched_name, SCHEDULE_NAMES[i]) == 0) pp.sched = (Schedule)i;
    if (chunks > 0 && pp.sched != SCHED_INTERLEAVED)
        usage_error("pp", "--chunks is for --schedule interleaved (got --schedule %s)", sched_name);
    if (a.accum != 1)
        usage_error("pp", "the pipeline's micro-batches are its gradient accumulation: use --micro %d, not --accum",
                    a.accum);
    pp.v = pp.sched == SCHED_INTERLEAVED ? (chunks > 0 ? chunks : 2) : 1;

    Lab L;  // the harness (common/harness/lab.h): ranks, device, collectives, run log, corpus, memory
    lab_open(&L, "pp", &a, argc, argv, 0);
    int N = L.world, rank = L.rank;
    lay_out_pipe(&pp, &a, split, dp, N);
    int s = rank / dp, d = rank % dp;  // this rank: stage s of pipeline d

    // Groups: pipeline d (its stages in order) and the data-parallel replicas of stage s.
    // Every rank builds both, in the same order (NCCL splits communicators collectively).
    int members[DIST_MAX_RANKS];
    DistGroup pipe, replicas;
    for (int t = 0; t < pp.p; t++) members[t] = t * dp + d;
    dist_group(&L.dist, &pipe, members, pp.p);
    for (int e = 0; e < dp; e++) members[e] = s * dp + e;
    dist_group(&L.dist, &replicas, members, dp);

    lab_begin(&L, "%d stage(s) x %d pipeline(s), schedule %s, %d micro-batches%s on %s, backend %s", pp.p, dp,
              SCHEDULE_NAMES[pp.sched], pp.m, pp.v > 1 ? " (interleaved chunks)" : "", L.dev.name, L.backend);
    RunLog *log = &L.log;
    GptConfig cfg = L.cfg;
    Mem *mem = &L.mem;
    Stage st;
    stage_create(&st, &pp, s, &cfg, &a, mem);
    int per_pipe = a.batch / dp, micro = per_pipe / pp.m;
    Timeline tl;
    timeline_build(&tl, &pp);

    StrBuf fields;  // meta.json's: the schedule, and each model chunk's layers
    sb_init(&fields);
    sb_printf(&fields, "\"schedule\":\"%s\",\"micro\":%d,\"chunks\":%d,\"stages\":%d,\"dp\":%d,\"chunk_layers\":[",
              SCHEDULE_NAMES[pp.sched], pp.m, pp.v, pp.p, dp);
    for (int k = 0; k < pp.K; k++) sb_printf(&fields, "%s[%d,%d]%s", k ? "," : "", pp.first[k], pp.last[k], k == pp.K - 1 ? "]" : "");
    lab_start(&L, gpt_num_params(&cfg), fields.data);
    sb_free(&fields);
    stage_report_memory(log, &st, &pp, &cfg, mem, s, micro);
    runlog_printf(log, "\nrank %d is stage %d of pipeline %d; the pipeline trains on sequences %d..%d of each global "
                       "batch of %d, in %d micro-batches of %d\n",
                  rank, s, d, d * per_pipe, (d + 1) * per_pipe - 1, a.batch, pp.m, micro);

    Runner run;
    StepCtx x = {.corpus = &L.corpus, .a = &a, .log = log, .first = d * per_pipe, .micro = micro};
    size_t workspace = runner_create(&run, &x, &pp, s, &pipe, &cfg, mem);
    mem_reset_peak(mem);
    uint8_t *tokens = malloc_check((size_t)micro * a.seq), *targets = malloc_check((size_t)micro * a.seq);

    // Distributed checkpoints (dcp.h): a stage loads its layers whole; saving, the dp
    // replicas of a stage each write a 1/dp chunk of them.
    DcpState my_layers = {0}, my_chunk = {0};
    dcp_add_units(&my_layers, &cfg, st.params, st.m, st.v, 0, 1);
    dcp_add_units(&my_chunk, &cfg, st.params, st.m, st.v, d, dp);
    int64_t first_step = lab_first_step(&L, &my_layers, &L.dist.world_group);
    snprintf(L.saver.layout, sizeof L.saver.layout, "pp: %d stage(s) x %d pipeline(s); a stage's replicas each a 1/%d "
             "chunk of its layers", pp.p, dp, dp);
    double measured_sum = 0;
    int *layer_stage = malloc_check((size_t)st.nlayers * sizeof *layer_stage);  // which stage holds layer l
    for (int k = 0; k < pp.K; k++) for (int l = pp.first[k]; l <= pp.last[k]; l++) layer_stage[l] = stage_of(&pp, k);

    for (int64_t step = first_step; step <= a.steps; step++) {
        int interrupted = lab_step_begin(&L, step);
        if (interrupted) return interrupted;
        for (int l = 0; l < st.nlayers; l++)
            if (stage_holds(&st, l)) mem->dev->ops->zero(st.grads[l], gpt_layer_size(&cfg, l));

        // 1. The schedule: this stage's forwards and backwards, messages in between.
        x.step = step, x.loss_scale = (float)(1.0 / L.tokens_per_step);
        double measured, loss_sum = run_schedule(&run, &st, &x, tl.ops[s], tl.nops, tokens, targets, L.t0_us, &measured);

        // 2. PP x DP: the replicas of this stage sum their gradients.
        if (dp > 1)
            for (int l = 0; l < st.nlayers; l++)
                if (stage_holds(&st, l)) dist_all_reduce(&replicas, st.grads[l], gpt_layer_size(&cfg, l));

        // 3. The global gradient norm, over the pipeline's stages.
        double norm = stage_grad_norm(&st, &cfg, mem, &pipe, pp.p, layer_stage);

        // 4. The loss of the global batch (the last stages have it) and the bubble, for the log.
        double loss = dist_sum_over_ranks(&L.dist.world_group, loss_sum) / L.tokens_per_step;
        double measured_mean = dist_sum_over_ranks(&L.dist.world_group, measured) / N;

        // 5. AdamW on this stage's layers, with the global clip factor, at the schedule's rate.
        double lr = train_lr(&a, step);
        int64_t t_opt = runlog_now_us();
        stage_update(&st, &cfg, mem, &a, norm, lr, step);
        int64_t t1 = runlog_now_us();
        runlog_span(log, step, "optim", -1, -1, t_opt, t1, 0);
        log_comm_spans(log, &L.dist, L.records, step);

        if (step == first_step) check_schedule(log, &pp, &tl, &run);
        double ms = (double)(t1 - L.t0_us) / 1000.0, busy_ms = (double)x.busy_us / 1000.0;
        measured_sum += measured_mean;
        char extra[320];
        snprintf(extra, sizeof extra,
                 "\"stage\":%d,\"pipeline\":%d,\"inflight_max\":%d,\"acts_held_max\":%zu,"
                 "\"workspace\":%zu,\"bubble\":{\"formula\":%.6f,\"logical\":%.6f,\"measured\":%.6f,"
                 "\"measured_rank\":%.6f}",
                 s, d, run.live_max, run.live_bytes_max, workspace, bubble_formula(&pp), tl.bubble, measured_mean, measured);
        StepRecord rec = {.step = step, .loss = loss, .lr = lr, .grad_norm = norm, .tokens = (int64_t)(per_pipe * a.seq),
                          .ms_work = ms, .ms_compute = busy_ms, .ms_comm = ms - busy_ms > 0 ? ms - busy_ms : 0,
                          .param_hash = stage_hash(&st, mem), .extra = extra};
        lab_step_end(&L, &rec, &my_chunk);
    }
    dcp_state_free(&my_layers);
    dcp_state_free(&my_chunk);
    const double measured = measured_sum / (double)(a.steps - first_step + 1);

    if (rank == 0) report_schedule(log, &pp, &tl, measured);

    Mem host;
    mem_init(&host, NULL);
    Gpt whole;
    uint64_t whole_hash = stage_gather_model(&whole, &host, &st, &cfg, mem, &pipe, s, d, rank, layer_stage, a.seed);
    if (a.save && rank == 0) {
        train_save_weights(&whole, a.save);
        runlog_printf(log, "weights: saved to %s\n", a.save);
    }
    StrBuf extra;  // summary.json's: the schedule, its bubble three ways, its timeline
    sb_init(&extra);
    sb_printf(&extra,
              "\"schedule\":\"%s\",\"stages\":%d,\"micro\":%d,\"chunks\":%d,\"dp\":%d,\"bubble\":{\"formula\":%.6f,"
              "\"logical\":%.6f,\"measured\":%.6f},",
              SCHEDULE_NAMES[pp.sched], pp.p, pp.m, pp.v, dp, bubble_formula(&pp), tl.bubble, measured);
    timeline_json(&extra, &pp, &tl);
    lab_finish(&L, whole_hash, extra.data);
    sb_free(&extra);

    if (rank == 0) gpt_destroy(&whole);
    mem_destroy(&host);
    timeline_free(&tl, &pp);
    free(layer_stage), free(tokens), free(targets), free(run.acts);
    outbox_free(&run.out);
    mem_free(mem, x.scratch);
    mem_free(mem, x.dx);
    stage_destroy(&st, mem);
    lab_close(&L);
    return 0;
}
