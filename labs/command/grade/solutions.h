// solutions.h — the grader's own code for the student regions its reference runs reach
// (solutions.c): the reference programs link it in place of the student's, and data.coverage
// draws the epoch order with it.
//
#ifndef SHARDLAB_GRADE_SOLUTIONS_H
#define SHARDLAB_GRADE_SOLUTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "04-data-sharding/dataset.h"
#include "08-zero/sharded.h"
#include "common/model/adamw.h"
#include "common/model/gpt.h"

// Epoch e's order of D items, as 04-data-sharding/sampler.c's region must draw it (dataset.h's
// sampler_epoch): a mixture's draws with replacement, or Fisher-Yates' swaps.
void grade_epoch_order(int64_t *order, int64_t D, uint64_t seed, int64_t e, const Mixture *mix);

// What the reference programs run in place of the region functions (the Makefile's REF_WRAP:
// the linker's --wrap sends every call of adamw_update() to __wrap_adamw_update(), and so
// on). Each computes what the function it replaces computes, bit for bit.
void __wrap_adamw_update(const AdamW *opt, int64_t t, float *params, const float *grads, float *m, float *v, size_t n);
void __wrap_sampler_epoch(int64_t *out, int64_t D, uint64_t seed, int64_t epoch, const Mixture *mix);
void __wrap_shard_layout_init(ShardLayout *s, const GptConfig *c, int world, int rank, int align);

#endif
