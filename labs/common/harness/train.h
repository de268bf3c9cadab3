// train.h — what every training lab does the same way around its own algorithm.
//
// A lab file should read as its algorithm. Everything here is the same in every lab: the
// corpus, which sequences make up a micro-batch, the configuration written to the run log,
// loading and saving weights, and the progress line.
#ifndef SHARDLAB_TRAIN_H
#define SHARDLAB_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "args.h"
#include "common/comm/dist.h"
#include "common/model/adamw.h"
#include "common/model/gpt.h"
#include "common/runfiles/json.h"
#include "common/runfiles/runlog.h"
#include "data.h"
#include "mem.h"

// The synthetic corpus: an order-2 Markov source over 16 symbols, 1 MiB of it.
#define SYNTH_ORDER 2
#define SYNTH_ALPHABET 16
#define SYNTH_BYTES (1u << 20)

GptConfig train_model_config(const TrainArgs *a);
// --data synthetic or PATH; dies with a clear message if the file is unusable.
void train_corpus(Corpus *c, const TrainArgs *a);

// Sequences first .. first+count-1 of the global batch of `step` (1-based), as inputs
// tokens[count*T] and next-token targets[count*T].
void train_micro_batch(const Corpus *c, const TrainArgs *a, int64_t step, int first, int count,
                       uint8_t *tokens, uint8_t *targets);

// The "config" object of meta.json and the start event: every TrainArgs field, then the
// lab's own fields (lab_fields: NULL or "\"bucket_mb\":1,..." without braces).
void train_config_json(StrBuf *sb, const TrainArgs *a, const char *lab_fields);

// Resolve --device for the rank with this LOCAL_RANK among local_world ranks on its node
// (device.h): the CPU when no GPU is usable. Exits 2 if cuda was asked for and cannot be
// had, or --tf32 without a GPU.
void train_device(Device *dev, const TrainArgs *a, const char *prog, int local_rank, int local_world);
// One line (two when ranks share GPUs) saying where this rank computes, and why the CPU when
// --device auto found no GPU.
void train_say_device(RunLog *log, const Device *dev, int ranks);

// Weights <-> safetensors, GPT-2 names. Loading checks every name and shape and dies with a
// message naming the first mismatch.
void train_load_weights(Gpt *g, const char *path);
void train_save_weights(const Gpt *g, const char *path);

// A data-parallel lab's batch checks (batchsplit.h, lab prog): --batch divides over `ranks`,
// and --accum divides each rank's share. Exits 2 with one line otherwise, which names the
// nearest rank counts and batches that divide.
void train_check_batch(const TrainArgs *a, const char *prog, int ranks);
// What the training loop keeps for the end of the run: the first and the latest loss, and
// the clock. A step's time is the wall clock from the previous step's record to this one's
// (the first: from the start of the loop), so the steps' times add up to the loop's, and
// tokens/s and wall_s count everything the loop does (start-up, the lab's closing reports
// and --save are not training).
typedef struct {
    int64_t first_step, t0_us, t1_us;
    double first_loss, loss;
} TrainTally;
void train_tally_start(TrainTally *t, int64_t first_step);  // just before the loop
// Just before a step's record is written: notes its loss, returns its wall-clock ms.
double train_tally_step(TrainTally *t, int64_t step, double loss);

// The end of a run that trained, after the lab's own reports and --save: the last line (loss
// first -> last and above the floor, tokens/s, peak memory per rank), the end event,
// summary.json (extra: the lab's fields, or NULL) and where the run was written.
void train_finish(RunLog *log, const TrainArgs *a, const TrainTally *t, double tokens_per_step, double loss_floor,
                  int ranks, uint64_t param_hash, size_t mem_peak, const char *extra);

// The progress line: rewritten in place on a terminal, else one line every `every` steps.
typedef struct {
    int tty, every, steps;
    int64_t t_start_us;
} Progress;
void progress_init(Progress *p, const TrainArgs *a);
void progress_update(Progress *p, RunLog *log, int64_t step, double loss, double loss_floor,
                     double ms_step);

// GptHooks that write a "fwd"/"bwd" span per layer to the run log. On the CPU each span is
// written as its layer ends; on a GPU its marks are kept (pending) and read, all at once,
// by span_logger_flush() when the step's compute ends (train_accumulate calls it), so
// timing never makes the host wait for the GPU layer by layer.
typedef struct {
    const char *name;  // "fwd", "bwd", "recompute" (a static string)
    int layer, mb;
    int64_t step;
    DeviceMark m0, m1;
} PendingSpan;
typedef struct {
    RunLog *log;
    int64_t step;
    int mb;
    const Device *dev;      // the marks' device (set by the hook)
    PendingSpan *pending;   // spans whose marks are not read yet (GPU)
    int npending, cap;
} SpanLogger;
GptHooks span_logger_hooks(SpanLogger *s);
// One compute span of s->step and s->mb between two marks of dev, written now on the CPU,
// kept until span_logger_flush() on a GPU. (Labs that run layers themselves log with it.)
void span_logger_add(SpanLogger *s, const Device *dev, const char *name, int layer, DeviceMark m0, DeviceMark m1);
// Write the pending spans (a GPU's: waits until it has reached the last of them).
void span_logger_flush(SpanLogger *s);

// AdamW state for every layer buffer of a model held whole on this rank ("optim" memory).
typedef struct {
    AdamW hyper;
    float **m, **v;  // [nlayers]
    int nlayers;
    Mem *mem;
} GptAdamW;
void gpt_adamw_create(GptAdamW *o, const Gpt *g, const TrainArgs *a);
void gpt_adamw_destroy(GptAdamW *o);

// Forward and backward over sequences first .. first+count-1 of the global batch of `step`,
// in micro-batches of acts->B sequences. Gradients ACCUMULATE into g->grads (zero them
// first). loss_scale is 1 / (tokens in the whole global batch). Returns the sum of the token
// losses. spans (may be NULL) gets a fwd and a bwd span per layer and micro-batch.
// last_backward (may be NULL) is called as each layer's backward of the LAST micro-batch
// ends: when that layer's gradient is complete (data parallelism starts its sync there).
double train_accumulate(Gpt *g, GptActs *acts, const Corpus *c, const TrainArgs *a, int64_t step,
                        int first, int count, float loss_scale, SpanLogger *spans,
                        const GptHooks *last_backward);
// Data parallelism at its plainest (the ckpt and shard labs train on replicas this way): each
// layer's gradient summed over the group's replicas in place, one synchronous all-reduce per
// layer whose record carries the layer as its tag.
void train_all_reduce_layers(DistGroup *g, Gpt *model);
// Clip the global gradient norm to `clip` (0: never), then one AdamW step on every layer at
// learning rate lr (train_lr()). Returns the norm before clipping.
double train_clip_and_update(Gpt *g, GptAdamW *o, double clip, double lr, int64_t step);
// The same with the norm given: a lab whose ranks hold different parameters (lab-ep's
// experts) sums their squares over the ranks itself, each parameter counted once.
void train_update_with_norm(Gpt *g, GptAdamW *o, double clip, double lr, int64_t step, double norm);

// The memory table: each category's formula next to what the allocator measured, and a check
// event for each. A mismatch is a bug in shardlab: die. Rows with host = 1 measure host_mem
// (ZeRO-Offload's host memory) instead of a category of mem.
typedef struct {
    MemCategory cat;
    const char *formula;  // "4 Psi"
    double expect;        // bytes
    int host;
} MemRow;
// The activation memory of a micro-batch of B sequences in closed form (bytes), what each
// layer keeps for the backward pass, and (text not NULL) the formula as the tables print it:
//     4 B T (2C + 2 + V + L (16C + 4 + NH T))   naive attention: NH T probabilities a token
//     4 B T (2C + 2 + V + L (16C + 4 + NH))     flash attention: NH log-sum-exps a token
// The one place the labs' tables, `shardlab plan` and the memory checks take it from.
double train_acts_formula(const GptConfig *c, int B, const char **text);
// --moe: a step event's fields from the routers' statistics of its passes (gpt.h's
// GptMoeStats), appended to sb with no braces: "aux_loss" (the mean over passes and blocks),
// "dropped" and "assignments" (all blocks), "expert_load" ([L][E] assignments per block and
// expert).
void train_moe_fields(StrBuf *sb, const GptMoeStats *s, const GptConfig *c);

// DDP's memory per rank, the one model of it: ddp.c's own table is made of it, and the labs
// that replace DDP (zero, fsdp, tp) print it beside theirs, so that "DDP holds" always means
// what `shardlab run ddp` at the same N and --accum prints. A full replica of Psi parameters:
// e bytes per weight and per gradient (4 fp32, 2 bf16), k bytes of optimizer state per
// parameter (8: AdamW m, v; 12 with fp32 master weights), the activations of DDP's own
// micro-batch of B/(N K) sequences (N counts every rank, whatever mesh another lab makes of
// them), and, with buckets, bucket buffers of e Psi (a second copy of the gradients; 0 when
// each tensor is all-reduced in place).
typedef struct {
    double bytes[MEM_CATEGORIES];
    char formula[MEM_CATEGORIES][40];  // DDP's own table: "4 Psi (a full replica)"
    char brief[MEM_CATEGORIES][24];    // beside another lab's: "4 Psi", "B = 2"
    double micro_batch;                // B/(N K), fractional when N K does not divide B
    double total;
} DdpMemory;
DdpMemory train_ddp_memory(const GptConfig *c, int batch, int ranks, int accum, int e, int k, int buckets);

// Where the memory goes: a row per category, its formula, expected and measured bytes, and a
// check event per row ("mem.params", ...). A row whose bytes are not the formula's (a student
// holding more or less than the method) is marked MISMATCH, its check fails with a warning
// line, and the run goes on (runlog_self_check): `shardlab grade` judges it in mem.formula.
void train_report_memory(RunLog *log, const Mem *mem, const Mem *host_mem, const GptConfig *c, int micro_batch,
                         const MemRow *rows, int nrows);
// The same table with DDP's figure beside each device row ("DDP holds") and DDP's total under
// it; the rows must cover every category, so that the column adds up to that total (a check
// event, "mem.ddp_total": value the column's sum, expect DDP's total).
void train_report_memory_vs_ddp(RunLog *log, const Mem *mem, const Mem *host_mem, const GptConfig *c,
                                int micro_batch, const MemRow *rows, int nrows, const DdpMemory *ddp);

// At a step boundary: if a stop signal came, log it, end the run log with an error and
// return the exit status (128 + signal); else 0. steps_done: steps completed so far.
int train_interrupted(RunLog *log, int64_t steps_done);

// Ctrl-C (SIGINT) or SIGTERM asks the lab to stop at the next step boundary, so that the run
// log still ends with an error event and an end event (a dashboard must not take an
// interrupted run for a live one). A second signal ends the process at once.
void train_catch_signals(void);
// 0, or the signal that asked us to stop.
int train_stop_signal(void);

#endif
