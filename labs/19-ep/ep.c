// ep.c — expert parallelism from scratch: E experts split over N ranks, tokens sent to them.
//
// The picture. A mixture-of-experts block holds E experts but runs only K of them a token:
// most of its parameters sit idle for any one token. So split the EXPERTS: each of N ranks
// holds E/N of them, and every token travels to the ranks of the experts its router picked,
// and back (labs/19-ep/dispatch.h draws the trip). Everything else is data parallelism: the
// embeddings, attention, the LayerNorms, the router and the head are replicated, each rank
// runs them on its own sequences, and their gradients are all-reduced over the ranks.
//
// The experts' gradients are NOT all-reduced. Each expert saw every rank's tokens routed to
// it, so its gradient on its one rank already is the whole batch's. Averaging it over the
// ranks as well (as a DDP wrapper around the whole model would) makes it N times too small;
// summing, N times too large.
//
// The algorithms it runs:
//   the dispatcher: labs/19-ep/dispatch.c, dispatch_forward(), dispatch_backward()
//   the capacity rule over every rank: labs/19-ep/dispatch.c, dispatch_serve()
//   the layer's parts: labs/common/model/moe.c, moe_route(), moe_experts_forward(), moe_combine()
//   the all-to-all: labs/03-collectives/pairwise.c, pairwise_all_to_all()
//   the replicated gradients: labs/19-ep/ep.c, sync_replicated()
//
// Run it:   make lab-ep NGPU=4 [ARGS="--moe 8 --topk 2 --capacity 1.25"]
//           build/shardlab run ep -n 2 --aux-weight 0
//           build/labs/ep --help
//
// Lexicon: expert parallelism, mixture of experts, all-to-all, data parallelism.
//
// What it is graded against (N ranks, global batch B, K micro-batches of B' = B/(N K) a rank,
// Psi_rep the replicated parameters, Psi_exp one expert's, L blocks):
//   memory     params 4 (Psi_rep + L E/N Psi_exp), grads the same, optim twice that
//              acts   single's at B' with the experts' rows counted where they run (moe.h):
//                     4 B' T (2C+2+V+L(8C+4+NH+E+4K+2KC)) + 8 L R (C+H), R the rows this
//                     rank's experts may serve (moe_expert_rows)
//              comm   the rows in flight and every rank's counts: 4 (R C + N (K E + 2E))
//   bytes      per block and micro-batch, the rows it sends other ranks, 4 C each, four
//              times (dispatch, combine, and both backwards), and the counts' all-gather;
//              then the replicated gradients' all-reduce, 2 (N-1)/N 4 Psi_rep
//   loss       equal to `single` with the same --moe on the same global batch, up to fp32
//              rounding, dropless or with a capacity (the global rule: dispatch.h)
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/comm/dist.h"        // defines: DistGroup, dist_all_reduce_start(), ...
#include "common/harness/args.h"     // defines: TrainArgs, train_args_parse()
#include "common/harness/check.h"    // defines: malloc_check(), usage_error()
#include "common/harness/hash.h"     // defines: PARAM_HASH_INIT
#include "common/harness/lab.h"      // defines: Lab, lab_open(), lab_begin(), ...
#include "common/harness/train.h"    // defines: train_micro_batch(), train_update_with_norm(), ...
#include "common/model/gpt.h"        // defines: Gpt, GptActs, gpt_layer_forward(), ...
#include "common/runfiles/runlog.h"  // defines: runlog_now_us(), runlog_comm_span(), ...
#include "dispatch.h"                // defines: Dispatcher, dispatch_forward(), ...

// The ops table's functions take no context: the dispatcher they run is this rank's one.
static Dispatcher *the_dispatcher;

static void moe_forward_op(const Ops *ops, const MoeConfig *m, const float *params, const float *x, float *out,
                           MoeActs *a, int bf16_in, float *scratch) {
    dispatch_forward(the_dispatcher, ops, m, params, x, out, a, bf16_in, scratch);
}

static void moe_backward_op(const Ops *ops, const MoeConfig *m, const float *params, float *grads, const float *x,
                            const float *dout, const MoeActs *a, float aux_scale, float *dx, int bf16_in,
                            float *scratch) {
    dispatch_backward(the_dispatcher, ops, m, params, grads, x, dout, a, aux_scale, dx, bf16_in, scratch);
}

// ---------------------------------------------------------------------------------------
// Replicated and expert parameters
// ---------------------------------------------------------------------------------------

// The floats of layer l every rank holds alike: all of the embeddings and the head; of a
// block, everything up to and with the router (gpt.h's order puts the experts last).
static size_t replicated_floats(const GptConfig *c, int l) {
    if (l == 0 || l > c->layers) return gpt_layer_size(c, l);
    GptTensor t[GPT_MAX_TENSORS];
    gpt_layer_tensors(c, l, t);
    return t[8].offset + t[8].count;  // 8: mlp.router.weight
}

static double replicated_params(const GptConfig *c) {
    double n = 0;
    for (int l = 0; l < gpt_layer_count(c); l++) n += (double)replicated_floats(c, l);
    return n;
}

// The replicated gradients cover each rank's tokens: summed over the ranks, the batch's.
static void sync_replicated(DistGroup *g, Gpt *model) {
    for (int l = 0; l < model->nlayers; l++) {
        DistWork w;  // start + wait: a synchronous all-reduce whose record carries the layer
        dist_all_reduce_start(g, model->grads[l], replicated_floats(&model->cfg, l), l, &w);
        dist_wait(&w);
    }
}

// The global gradient norm, each parameter once: the replicated part (the same on every
// rank after the all-reduce) once, every rank's experts added.
static double grad_norm(DistGroup *g, const Gpt *model) {
    const Ops *ops = model->mem->dev->ops;
    double rep = 0, mine = 0;
    for (int l = 0; l < model->nlayers; l++) {
        size_t n = replicated_floats(&model->cfg, l), all = gpt_layer_size(&model->cfg, l);
        rep += ops->sum_of_squares(model->grads[l], n);
        if (all > n) mine += ops->sum_of_squares(model->grads[l] + n, all - n);
    }
    return sqrt(rep + dist_sum_over_ranks(g, mine));
}

// The hash of the replicated parameters: the same on every rank after every step.
static uint64_t replicated_hash(const Gpt *model) {
    int n = model->nlayers;
    const void **bufs = malloc_check((size_t)n * sizeof *bufs);
    size_t *bytes = malloc_check((size_t)n * sizeof *bytes);
    for (int l = 0; l < n; l++) bufs[l] = model->params[l], bytes[l] = replicated_floats(&model->cfg, l) * sizeof(float);
    uint64_t h = device_param_hash(model->mem->dev, n, bufs, bytes, PARAM_HASH_INIT);
    free(bufs);
    free(bytes);
    return h;
}

// ---------------------------------------------------------------------------------------
// The step's passes
// ---------------------------------------------------------------------------------------

typedef struct {
    GptConfig cfg;          // this rank's model: its E/N experts of every block
    Ops ops;                // the device's kernels, the MoE layer replaced by the dispatcher
    GptActs acts;
    uint8_t *tokens, *targets;
    float *scratch, *dx;
} Ep;

static void span(SpanLogger *s, const Device *dev, const char *name, int layer, DeviceMark m0) {
    span_logger_add(s, dev, name, layer, m0, device_mark(dev));
}

// Forward and backward of this rank's part of every micro-batch: in micro-batch mb, rank r
// takes sequences mb B/K + r B' .. + B' - 1, so the ranks together run single's micro-batch
// mb, the pass its capacity and aux loss count. Returns the sum of this rank's token losses.
static double forward_backward(Ep *ep, Gpt *model, const Corpus *corpus, const TrainArgs *a, int64_t step, int rank,
                               int micro, float loss_scale, SpanLogger *spans) {
    const GptConfig *c = &ep->cfg;
    const Device *dev = model->mem->dev;
    Mem *mem = model->mem;
    int L = c->layers, global_micro = a->batch / a->accum;
    double loss = 0;
    ep->scratch = mem_alloc_floats(mem, MEM_ACTS, gpt_pass_scratch_floats(c, micro, dev->kind == DEVICE_CUDA), "workspace");
    ep->dx = mem_alloc_floats(mem, MEM_ACTS, (size_t)micro * c->seq * c->dim, "residual gradient");
    for (int mb = 0; mb < a->accum; mb++) {
        spans->mb = mb;
        train_micro_batch(corpus, a, step, mb * global_micro + rank * micro, micro, ep->tokens, ep->targets);
        for (int l = 0; l <= L + 1; l++) {
            DeviceMark m0 = device_mark(dev);
            loss += gpt_layer_forward(&ep->ops, c, l, model->params[l], &ep->acts, ep->tokens, ep->targets, ep->scratch);
            span(spans, dev, "fwd", l, m0);
        }
        gpt_moe_stats_add(&model->moe, c, &ep->acts, 1, L);  // the whole pass's: every rank's the same
        for (int l = L + 1; l >= 0; l--) {
            DeviceMark m0 = device_mark(dev);
            gpt_layer_backward(&ep->ops, c, l, model->params[l], model->grads[l], &ep->acts, ep->tokens, ep->targets,
                               loss_scale, ep->dx, ep->scratch);
            span(spans, dev, "bwd", l, m0);
        }
    }
    mem_free(mem, ep->dx);
    mem_free(mem, ep->scratch);
    span_logger_flush(spans);
    return loss;
}

// ---------------------------------------------------------------------------------------
// The checks of the options, and the memory table
// ---------------------------------------------------------------------------------------

static void check_options(const TrainArgs *a, int N) {
    if (a->moe < 1) usage_error("ep", "--moe %d: expert parallelism splits experts; use --moe %d or more", a->moe, N);
    if (a->moe % N != 0)
        usage_error("ep", "--moe %d experts do not split evenly over %d ranks: use a multiple of %d, e.g. --moe %d", a->moe,
                    N, N, (a->moe / N + 1) * N);
    if (a->moe / N > MOE_MAX_EXPERTS || N > MOE_MAX_RANKS)
        usage_error("ep", "%d ranks: expert parallelism runs on 1 to %d", N, MOE_MAX_RANKS);
    if (a->batch % (N * a->accum) != 0)
        usage_error("ep", "--batch %d does not split into %d micro-batch(es) over %d ranks: use --batch %d", a->batch,
                    a->accum, N, ((a->batch + N * a->accum - 1) / (N * a->accum)) * N * a->accum);
    // Checkpoints of a model whose ranks hold different experts are not written yet.
    const char *ckpt = a->resume ? "--resume" : a->save_every ? "--save-every" : a->save ? "--save" : a->init ? "--init" : NULL;
    if (ckpt) usage_error("ep", "%s: lab-ep neither writes nor reads checkpoints or weights yet; drop %s", ckpt, ckpt);
}

// The memory table (see the top of this file): every row's formula, to the byte.
static void report_memory(Lab *L, const Ep *ep, int micro) {
    const GptConfig *c = &ep->cfg;
    MoeConfig m = gpt_moe_config(c);
    double psi = (double)gpt_num_params(c), rep = replicated_params(c);
    double BT = (double)micro * c->seq, C = c->dim, H = c->expert_dim, K = c->topk, E = c->experts;
    double R = moe_expert_rows(&m, (int)BT), Lb = c->layers, NH = c->heads, V = c->vocab;
    double attn = c->attn == GPT_ATTN_FLASH ? NH : NH * c->seq;
    double acts = 4 * BT * (2 * C + 2 + V + Lb * (8 * C + 4 + attn + E + 4 * K + 2 * K * C)) + 8 * Lb * R * (C + H);
    char params[96], acts_formula[128], comm[96];
    snprintf(params, sizeof params, "4 (Psi_rep + L E/N Psi_exp), Psi_rep = %.0f", rep);
    snprintf(acts_formula, sizeof acts_formula, "4 B T (2C+2+V+L(8C+4+NH%s+E+4K+2KC)) + 8 L R (C+H), R = %.0f",
             c->attn == GPT_ATTN_FLASH ? "" : " T", R);
    snprintf(comm, sizeof comm, "4 (R C + N (K E + 2E)): rows in flight, counts");
    MemRow rows[] = {
        {.cat = MEM_PARAMS, .formula = params, .expect = 4 * psi},
        {.cat = MEM_GRADS, .formula = "4 (Psi_rep + L E/N Psi_exp)", .expect = 4 * psi},
        {.cat = MEM_OPTIM, .formula = "8 (Psi_rep + L E/N Psi_exp)", .expect = 8 * psi},
        {.cat = MEM_ACTS, .formula = acts_formula, .expect = acts},
        {.cat = MEM_COMM, .formula = comm, .expect = dispatcher_bytes(&m, (int)BT)},
    };
    train_report_memory(&L->log, &L->mem, NULL, c, micro, rows, 5);
}

// One span per finished collective; the dispatcher's (the counts' all-gather and the rows'
// all-to-alls) say "phase":"experts". Returns the bytes they sent.
static uint64_t log_comm_spans(RunLog *log, Dist *d, DistRecord *records, int64_t step, int experts) {
    size_t k = dist_drain_records(d, records, LAB_MAX_RECORDS);
    uint64_t sent = 0;
    for (size_t i = 0; i < k; i++) {
        const DistRecord *r = &records[i];
        char extra[96];
        snprintf(extra, sizeof extra, "\"algo\":\"%s\"%s", r->algo, experts ? ",\"phase\":\"experts\",\"group\":\"ep\"" : "");
        runlog_comm_span(log, step, dist_coll_name(r->coll), -1, -1, r->t0_us, r->t1_us, r->bytes_sent,
                         r->waited_from_us, extra);
        sent += r->bytes_sent;
    }
    return sent;
}

// ---------------------------------------------------------------------------------------
// Training
// ---------------------------------------------------------------------------------------

int main(int argc, char **argv) {
    TrainArgs a;
    const LabBind own[] = {{"moe", &a.moe}, {"topk", &a.topk}, {"expert-dim", &a.expert_dim},
                           {"capacity", &a.capacity}, {"aux-weight", &a.aux_weight}};
    train_args_parse(&a, argc, argv, catalog_lab("ep"), own, (int)(sizeof own / sizeof own[0]));

    Lab L;
    lab_open(&L, "ep", &a, argc, argv, 0);
    int N = L.world, rank = L.rank, micro = a.batch / (N * a.accum);
    check_options(&a, N);
    L.dist.algo = DIST_ALGO_RING;  // the replicated gradients' bytes are the ring's formula
    lab_begin(&L, "%d rank(s) on %s, backend %s, %d experts a block, %d a rank, top %d", N, L.dev.name, L.backend,
              a.moe, a.moe / N, a.topk);
    RunLog *log = &L.log;

    // This rank's model: every replicated tensor, and E/N experts of each block (moe.h).
    Ep ep = {.cfg = L.cfg, .ops = *L.dev.ops};
    ep.cfg.expert_ranks = N, ep.cfg.expert_rank = rank;
    MoeConfig m = gpt_moe_config(&ep.cfg);
    int e0 = moe_first_expert(&m), El = moe_local_experts(&m), pass = N * micro * a.seq;
    runlog_printf(log, "rank %d holds experts %d..%d of every block, routes sequences %d..%d of each micro-batch of "
                       "%d (%d a step)\n", rank, e0, e0 + El - 1, rank * micro, (rank + 1) * micro - 1, a.batch / a.accum,
                  a.batch);
    if (a.capacity > 0)
        runlog_printf(log, "capacity factor %g: an expert serves at most %d of a pass's %d tokens (every rank's)\n",
                      a.capacity, moe_capacity(&m, pass), pass);
    else runlog_printf(log, "dropless: every assignment served\n");

    Gpt model;
    GptAdamW adam;
    gpt_create(&model, &ep.cfg, &L.mem, a.seed);  // the same seed everywhere: the replicas start equal
    gpt_adamw_create(&adam, &model, &a);
    gpt_acts_alloc(&ep.acts, &ep.cfg, micro, &L.mem);
    Dispatcher disp;
    dispatcher_init(&disp, &L.dist.world_group, &m, micro * a.seq, &L.mem);
    the_dispatcher = &disp;
    ep.ops.moe_forward = moe_forward_op, ep.ops.moe_backward = moe_backward_op;

    char lab_fields[160];
    snprintf(lab_fields, sizeof lab_fields, "\"ep\":%d,\"experts_per_rank\":%d,\"first_expert\":%d", N, El, e0);
    lab_start(&L, gpt_num_params(&L.cfg), lab_fields);
    report_memory(&L, &ep, micro);
    ep.tokens = malloc_check((size_t)micro * a.seq), ep.targets = malloc_check((size_t)micro * a.seq);
    mem_reset_peak(&L.mem);

    int64_t first_step = lab_first_step(&L, NULL, &L.dist.world_group);
    SpanLogger spans = {.log = log};
    for (int64_t step = first_step; step <= a.steps; step++) {
        int interrupted = lab_step_begin(&L, step);
        if (interrupted) return interrupted;
        spans.step = step;

        // 1. Forward and backward of this rank's sequences; every MoE layer sends its rows to
        //    the experts' ranks and back (the dispatcher's all-gather and all-to-alls).
        gpt_zero_grads(&model);
        gpt_moe_stats_reset(&model.moe, &ep.cfg);
        disp.bytes_sent = 0, disp.exchange_us = 0;
        memset(disp.rows_to, 0, sizeof disp.rows_to);
        double loss_sum = forward_backward(&ep, &model, &L.corpus, &a, step, rank, micro,
                                           (float)(1.0 / L.tokens_per_step), &spans);
        uint64_t expert_sent = log_comm_spans(log, &L.dist, L.records, step, 1);
        if (step == first_step)
            runlog_self_check(log, "comm.expert_bytes_sent", expert_sent == disp.bytes_sent, (double)expert_sent,
                              (double)disp.bytes_sent, "the dispatcher sent %llu bytes, its rows' count gives %llu",
                              (unsigned long long)expert_sent, (unsigned long long)disp.bytes_sent);
        int64_t comm_us = disp.exchange_us;

        // 2. The replicated gradients summed over the ranks; the experts' stay where they are.
        int64_t t0 = runlog_now_us();
        sync_replicated(&L.dist.world_group, &model);
        double loss = dist_sum_over_ranks(&L.dist.world_group, loss_sum) / L.tokens_per_step;
        double norm = grad_norm(&L.dist.world_group, &model);
        comm_us += runlog_now_us() - t0;
        log_comm_spans(log, &L.dist, L.records, step, 0);

        // 3. The update: the same on the replicated parameters, each rank's own on its experts.
        int64_t t_opt = runlog_now_us();
        double lr = train_lr(&a, step);
        train_update_with_norm(&model, &adam, a.clip, lr, step, norm);
        L.t1_us = runlog_now_us();
        runlog_span(log, step, "optim", -1, -1, t_opt, L.t1_us, 0);

        StrBuf extra = {0};
        sb_printf(&extra, "\"expert_bytes_sent\":%llu,\"expert_rows_sent\":[", (unsigned long long)disp.bytes_sent);
        for (int q = 0; q < N; q++) sb_printf(&extra, "%s%lld", q ? "," : "", (long long)disp.rows_to[q]);
        sb_printf(&extra, "],\"param_hash_of\":\"replicated\",");
        train_moe_fields(&extra, &model.moe, &ep.cfg);
        StepRecord rec = {.step = step, .loss = loss, .lr = lr, .grad_norm = norm, .tokens = (int64_t)micro * a.accum * a.seq};
        rec.extra = extra.data;
        double ms = (double)(L.t1_us - L.t0_us) / 1000.0;
        rec.ms_work = ms, rec.ms_comm = (double)comm_us / 1000.0, rec.ms_compute = ms - rec.ms_comm;
        rec.param_hash = replicated_hash(&model);
        lab_step_end(&L, &rec, NULL);
        sb_free(&extra);
    }
    free(ep.tokens), free(ep.targets);
    lab_finish(&L, replicated_hash(&model), "\"param_hash_of\":\"replicated\"");
    dispatcher_free(&disp, &L.mem);
    gpt_adamw_destroy(&adam);
    gpt_acts_free(&ep.acts, &L.mem);
    gpt_destroy(&model);
    lab_close(&L);
    return 0;
}
