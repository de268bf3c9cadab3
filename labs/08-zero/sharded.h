// sharded.h — the training state of ZeRO and FSDP: flat units cut into equal shards, stored
// in fp32 or bf16, and the AdamW that updates only this rank's shards.
//
// Units. The model's parameters live in one flat buffer per layer (gpt.h: embedding, L
// blocks, head). ZeRO and FSDP shard each of these "units" over the N ranks: rank r holds
// elements [r s, (r+1) s) of a unit padded to N s elements, s = ceil(count / N) rounded up to
// `align` (bf16: 2, so a shard is a whole number of 4-byte words). Every shard of a unit has
// the same length, which is what reduce-scatter and all-gather want (NCCL requires it); the
// padding is zeros, gets zero gradients, stays zero under AdamW, and is counted in memory:
//
//     unit of count = 10, N = 4:  s = 3, padded to 12
//     | r0: e0 e1 e2 | r1: e3 e4 e5 | r2: e6 e7 e8 | r3: e9 -- -- |    (-- padding)
//
// Psi' = N * sum of s over units is the padded parameter count; Psi' - Psi elements of
// padding in all. The labs' memory formulas are in Psi' and say so.
//
// Precision. --mixed stores parameters and gradients in bf16 (2 bytes): a layer's bf16
// weights are widened to an fp32 copy to run it (whose Linear layers, as in every lab under
// --mixed, round their products' operands to bf16 and sum in fp32: ops.h), its fp32 gradient
// is rounded (to nearest, ties to even) into bf16. The optimizer keeps fp32 master weights beside the
// moments, 12 bytes per parameter: the ZeRO paper's mixed-precision accounting (K = 12).
// Without --mixed everything is fp32 and AdamW updates the parameters themselves (8 bytes of
// state per parameter).
#ifndef SHARDLAB_SHARDED_H
#define SHARDLAB_SHARDED_H

#include <stddef.h>
#include <stdint.h>

#include "common/comm/dist.h"        // defines: dist_wait(), DistGroup, DistWork, Dist, ...
#include "common/harness/args.h"     // defines: TrainArgs
#include "common/harness/mem.h"      // defines: Mem
#include "common/model/adamw.h"      // defines: AdamW, sum_of_squares_buffers()
#include "common/model/bf16.h"       // defines: bf16
#include "common/model/gpt.h"        // defines: GptConfig, gpt_init_layer()
#include "common/runfiles/dcp.h"     // defines: DcpState, dcp_load()
#include "common/runfiles/runlog.h"  // defines: RunLog

// ---- precision --------------------------------------------------------------------------

typedef enum { PREC_FP32, PREC_BF16 } Precision;

const char *precision_name(Precision p);  // "fp32", "bf16"
size_t precision_bytes(Precision p);      // 4, 2

// On the device of `ops`, n elements: widen storage to fp32, round fp32 into storage,
// acc += x with x in fp32 (a micro-batch's gradient into stored gradients), acc += x with x
// in storage precision. In fp32 the first two are copies.
void precision_to_fp32(const Ops *ops, Precision p, float *dst, const void *src, size_t n);
void precision_from_fp32(const Ops *ops, Precision p, void *dst, const float *src, size_t n);
void precision_accumulate(const Ops *ops, Precision p, void *acc, const float *x, size_t n);
void precision_add(const Ops *ops, Precision p, void *acc, const void *x, size_t n);
// The sum of squares of n buffers in storage precision (ops.h's sum_of_squares_buffers, or
// its bf16 twin: the same bits as widening them first), each buffer's in each[i] unless NULL.
double precision_sum_of_squares(const Ops *ops, Precision p, int n, const void *const *x, const size_t *len,
                                double *each);

// ---- the layout of shards ---------------------------------------------------------------

typedef struct {
    int units;          // L + 2: gpt.h's layers
    int world, rank;
    int align;          // a shard's length is a multiple of this (elements)
    size_t *count;      // [units] parameters in the unit
    size_t *shard;      // [units] elements of every rank's shard
    size_t psi;         // sum of count: Psi
    size_t psi_padded;  // world * sum of shard: Psi'
    size_t shard_total; // sum of shard: what one rank holds of each sharded quantity
} ShardLayout;

void shard_layout_init(ShardLayout *s, const GptConfig *c, int world, int rank, int align);
void shard_layout_free(ShardLayout *s);
// world * shard[u]: the unit's length with its padding.
size_t shard_padded(const ShardLayout *s, int u);

// ---- collectives in either precision ----------------------------------------------------
// n is the padded unit's length (elements); w NULL: run now, else start it (dist_wait(w)).
// tag labels the call's record (the unit).
void sharded_all_gather(DistGroup *g, Precision p, const void *shard, void *full, size_t n, int tag, DistWork *w);
void sharded_reduce_scatter(DistGroup *g, Precision p, const void *full, void *shard, size_t n, int tag,
                            DistWork *w);


// The fp32 weights of a unit to compute with, from `full` in storage precision: full itself
// in fp32, else a widened copy in "params" memory (*copy points to it, NULL in fp32; the
// caller mem_frees it after the layer ran).
const float *sharded_widen(Mem *mem, Precision p, const void *full, size_t n, float **copy);

// One unit's gradient out of the backward pass: g32 [n] is this rank's fp32 gradient of the
// unit (one micro-batch). Rounded to storage precision (what goes on the wire), reduce-scattered,
// and this rank's summed shard added to shard_acc (storage precision), which so accumulates
// over micro-batches. Synchronous.
void sharded_reduce_gradient(DistGroup *g, Precision p, Mem *mem, const float *g32, void *shard_acc, size_t n,
                             int tag);

// HSDP's sums across replicas are tagged SHARDED_REPLICA_TAG + the unit, so that the log
// tells them from the shard group's collectives of the same unit (tag: the unit).
#define SHARDED_REPLICA_TAG 100000

// Drains the finished collectives' records into span events (tagged with the unit, the
// algorithm and the dtype; a replica sum also with "group":"replicate"); returns the bytes
// sent by the units' collectives in the shard group (0 <= tag < SHARDED_REPLICA_TAG), adds
// the replica sums' bytes to *replica_bytes and the microseconds all of them took to *comm_us
// (either NULL: not wanted).
uint64_t sharded_log_collectives(RunLog *log, Dist *d, DistRecord *records, size_t max, int64_t step,
                                 int64_t *comm_us, uint64_t *replica_bytes);

// ---- the weights at start and at the end ------------------------------------------------

// The starting weights of every unit, on the host in fp32, each padded to shard_padded():
// seeded (gpt_init_layer) or read from --init, then rank 0's broadcast to every rank, as DDP
// does. Free with sharded_free_weights().
// meta.json's fields of a sharded run, after the lab's own: "precision", "psi_padded",
// "padding" (psi_padded - psi) and "units", as JSON members, into out.
void sharded_layout_fields(char *out, size_t n, const ShardLayout *s, Precision prec);
float **sharded_init_weights(const ShardLayout *s, const GptConfig *c, const TrainArgs *a, DistGroup *g);
void sharded_free_weights(const ShardLayout *s, float **units);
// n starting weights from the host (fp32, e.g. a rank's slice of sharded_init_weights()'s
// unit) into dst on the device, in storage precision.
void sharded_load(Mem *mem, Precision p, void *dst, const float *host, size_t n);

// ---- AdamW on this rank's slices --------------------------------------------------------
// A slice is this rank's shard of a unit (sharded = 1) or the whole padded unit (ZeRO stage
// 0: DDP, where every rank updates everything). m, v and, with mixed precision or offload,
// the fp32 master weights are kept per slice: on the device ("optim" memory), or with offload
// on the host (host memory), where the update then runs (ZeRO-Offload: the gradient slice
// goes to the host, the updated parameters come back).

typedef struct {
    AdamW hyper;
    const ShardLayout *lay;
    Precision prec;
    int sharded, offload;
    Mem *mem;         // the device's
    Mem *host;        // offload: host memory, counted apart
    float **m, **v;   // [units]
    float **master;   // [units] fp32 master weights, or NULL (fp32 on the device: the parameters are the master)
    uint64_t bytes_d2h, bytes_h2d;  // transfers of the last step (offload)
} ShardedAdamW;

// init: sharded_init_weights()'s units (the master weights start from them).
void sharded_adamw_create(ShardedAdamW *o, const ShardLayout *lay, Precision prec, int sharded, int offload,
                          const TrainArgs *a, Mem *mem, Mem *host, float *const *init);
void sharded_adamw_destroy(ShardedAdamW *o);
size_t sharded_slice_len(const ShardedAdamW *o, int u);
// params[u], grads[u]: this rank's slice of unit u on the device, in the storage precision.
// Clips to the global gradient norm (the sum over the group's shards, or over the whole
// units computed shard by shard in the same order, so every stage gets the same bits), then
// one AdamW step at learning rate lr; params are written back in storage precision. Returns
// the norm.
double sharded_adamw_step(ShardedAdamW *o, DistGroup *g, void *const *params, void *const *grads, double clip, double lr,
                          int64_t step);

// The param_hash (hash.h) of units' first count[u] (whole = 1) or shard[u] elements, storage
// precision, computed on the device: the param_hash of a step event.
uint64_t sharded_hash(const ShardLayout *s, Precision p, const Device *dev, void *const *bufs, int whole);

// The summary's param_hash: of the whole model in storage precision, unit by unit
// (count[u] elements each). whole = 1: bufs hold whole units; 0: bufs hold shards, which are
// all-gathered here one unit at a time (every rank of g must call it).
uint64_t sharded_model_hash(const ShardLayout *s, Precision p, Mem *mem, DistGroup *g, void *const *bufs, int whole);

// --save: the fp32 weights (the master weights where there are, else the parameters), gathered
// unit by unit from every rank's slice, written by rank 0 as train_save_weights() does.
// params as for sharded_adamw_step(). Every rank of g must call it.
void sharded_save_weights(const char *path, const GptConfig *c, ShardedAdamW *o, DistGroup *g,
                          void *const *params);

// The AdamW state of this rank's slices as safetensors (m.<unit>, v.<unit>, master.<unit>,
// each a 1-D tensor of the slice, padding included): concatenated over the ranks in rank
// order, the slices of a unit are the unsharded optimizer's state of that unit.
void sharded_save_optim(const char *path, const ShardedAdamW *o);

// ---- distributed checkpoints (dcp.h) ---------------------------------------------------
// This rank's slices as checkpoint pieces: params (the fp32 master weights where there are,
// else the fp32 parameters), m and v, elements [offset, offset + n) of each unit without the
// padding, cut into `parts` chunks (dist_chunk) of which this lists chunk `part`. Loading
// lists whole slices (0 of 1); saving, where `parts` ranks hold the same slice (stage 0: all
// N; HSDP: the R replicas), each lists its own chunk, so that each element is written once.
void sharded_dcp_state(DcpState *s, const ShardedAdamW *o, void *const *params, int part, int parts);
// After dcp_load() into sharded_dcp_state(saving = 0): with master weights, the parameters
// in storage precision rounded from them, as sharded_adamw_step() leaves them.
void sharded_dcp_loaded(ShardedAdamW *o, void *const *params);

#endif
