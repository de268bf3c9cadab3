// sampler.c — the global sampler's epoch order (dataset.h): every rank computes the same one.
//
// An epoch is a permutation of the D items. Fisher-Yates builds it from a list in order: for
// i from D-1 down to 1, position i takes one of the items at positions 0..i, uniformly, and
// keeps it. Every ordering comes out equally often, and each epoch's stream is seeded by
// (seed, epoch) alone, so a rank joining at any epoch draws exactly what the others draw.
//
//     0 1 2 3 4      i = 4, j = 1: swap        0 4 2 3 | 1
//                    i = 3, j = 3: keep        0 4 2 | 3 1
//                    i = 2, j = 0: swap        2 4 | 0 3 1
//                    i = 1, j = 1: keep        2 | 4 0 3 1     the epoch: 2 4 0 3 1
#include "dataset.h"  // defines: sampler_epoch(), Mixture, sampler_stream(), mixture_draws()

#include "common/harness/check.h"

void sampler_epoch(int64_t *out, int64_t D, uint64_t seed, int64_t epoch, const Mixture *mix) {
    Rng r = sampler_stream(seed, epoch);
    if (mix) {
        mixture_draws(out, D, &r, mix);
        return;
    }
    // Fisher-Yates: position i takes one of the items not yet placed, uniformly. Start from
    // 0..D-1 in order; for i from D-1 down to 1, swap out[i] with out[j], j drawn by
    // rng_below(&r, i + 1) (the draws in exactly this order: every rank must compute the same
    // permutation).
    /* BEGIN SOLUTION: the epoch's permutation of the D items, by Fisher-Yates */
    for (int64_t i = 0; i < D; i++) out[i] = i;
    for (int64_t i = D - 1; i > 0; i--) {
        int64_t j = rng_below(&r, i + 1), t = out[i];
        out[i] = out[j], out[j] = t;
    }
    /* END SOLUTION */
}
