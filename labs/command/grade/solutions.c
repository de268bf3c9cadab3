// solutions.c — the grader's own code for the student regions its reference runs reach.
//
// In a student's copy, `make grade` is graded by the copy's own shardlab. A reference run
// started from the copy's lab programs would run the student's regions on both sides of a
// comparison: a wrong AdamW in the run and in its reference agrees with itself and passes.
// So the references start their own programs, build/labs/ref/<lab> (the Makefile's
// REF_BINS): the lab linked with this file and -Wl,--wrap for each region function that a
// reference reaches across files. The linker sends every call of it (a call or a pointer
// taken, in another object) to the __wrap_ function here, which computes what the solution
// computes, bit for bit: the same float operations in the same order, built with the same
// flags. A reference's param_hash is the one the solution's own program gives.
//
//   adamw_update()       common/model/adamw.c's region; every training lab's optimizer step calls it
//                        through common/model/ops.c's table (common/harness/train.c, 08-zero/sharded.c)
//   sampler_epoch()      04-data-sharding/sampler.c's Fisher-Yates, called by shard.c
//   shard_layout_init()  08-zero/sharded.c's shard length, called by zero.c
//
// A reference is single -n 1, shard -n 1, or zero -n 1 --stage 0 (ZeRO's and FSDP's --mixed),
// and the replays are the same programs resumed. At one rank the other regions they hold are
// not reached: the ring's rounds (03-collectives/ring.c returns before them for a group of one rank),
// zero.c's reduce-scatter and all-gather (skipped at one rank, where they would copy each
// buffer onto itself), and shard.c's sampler read (the shard reference runs --strategy slice,
// which trains bit for bit as the sampler does: refs.c). tests/test_variants.c holds all of
// this to account: the starter's own grader, whose reference programs stop at a stub where
// they run a student region, gives the solution full marks.
#include "solutions.h"

#include <math.h>
#include <string.h>

#include "common/harness/check.h"

// AdamW's step t on n elements, as adamw.h writes it (decoupled weight decay).
void __wrap_adamw_update(const AdamW *opt, int64_t t, float *params, const float *grads, float *m, float *v, size_t n) {
    float b1 = opt->beta1, b2 = opt->beta2;
    float c1 = 1.0f - (float)pow(b1, (double)t);
    float c2 = 1.0f - (float)pow(b2, (double)t);
    for (size_t i = 0; i < n; i++) {
        float g = grads[i];
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;
        float mhat = m[i] / c1, vhat = v[i] / c2;
        params[i] -= opt->lr * (mhat / (sqrtf(vhat) + opt->eps) + opt->weight_decay * params[i]);
    }
}

// The same stream (dataset.h's sampler_stream) and the same draws as the sampler: a
// mixture's with replacement, or Fisher-Yates' swaps from the last position down.
void grade_epoch_order(int64_t *order, int64_t D, uint64_t seed, int64_t e, const Mixture *mix) {
    Rng r = sampler_stream(seed, e);
    if (mix) {
        mixture_draws(order, D, &r, mix);
        return;
    }
    for (int64_t i = 0; i < D; i++) order[i] = i;
    for (int64_t i = D - 1; i >= 1; i--) {
        int64_t *a = &order[i], *b = &order[rng_below(&r, i + 1)], kept = *a;
        *a = *b, *b = kept;
    }
}

void __wrap_sampler_epoch(int64_t *out, int64_t D, uint64_t seed, int64_t epoch, const Mixture *mix) {
    grade_epoch_order(out, D, seed, epoch, mix);
}

// 08-zero/sharded.h's layout: every rank's shard of unit u is ceil(count / N) elements, rounded
// up to a multiple of align.
void __wrap_shard_layout_init(ShardLayout *s, const GptConfig *c, int world, int rank, int align) {
    memset(s, 0, sizeof *s);
    s->units = gpt_layer_count(c);
    s->world = world;
    s->rank = rank;
    s->align = align;
    s->count = calloc_check((size_t)s->units, sizeof *s->count);
    s->shard = calloc_check((size_t)s->units, sizeof *s->shard);
    for (int u = 0; u < s->units; u++) {
        s->count[u] = gpt_layer_size(c, u);
        size_t per_rank = (s->count[u] + (size_t)world - 1) / (size_t)world;
        s->shard[u] = (per_rank + (size_t)align - 1) / (size_t)align * (size_t)align;
        s->psi += s->count[u];
        s->shard_total += s->shard[u];
    }
    s->psi_padded = (size_t)world * s->shard_total;
}
