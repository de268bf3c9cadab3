// rng.h — the one seeded random number generator every lab uses.
//
// splitmix64: tiny, fast, and the same stream on every machine, so a seed means the same
// initial weights and the same batches everywhere (that is what lets a run at N ranks be
// compared with the single-rank run bit for bit).
#ifndef SHARDLAB_RNG_H
#define SHARDLAB_RNG_H

#include <math.h>
#include <stdint.h>

typedef struct {
    uint64_t state;
} Rng;

static inline void rng_seed(Rng *r, uint64_t seed) { r->state = seed; }

static inline uint64_t rng_u64(Rng *r) {
    uint64_t z = (r->state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Uniform in [0, 1), 53 random bits.
static inline double rng_uniform(Rng *r) { return (double)(rng_u64(r) >> 11) * 0x1.0p-53; }

// Uniform in 0..n-1 exactly (n >= 1): draws at or above the largest multiple of n are thrown
// back, so no value is favoured (a plain % n would favour the small ones, a little).
static inline int64_t rng_below(Rng *r, int64_t n) {
    uint64_t un = (uint64_t)n, limit = UINT64_MAX - UINT64_MAX % un;
    uint64_t x;
    do x = rng_u64(r);
    while (x >= limit);
    return (int64_t)(x % un);
}

// Standard normal by Box-Muller (one value per call; simple beats fast here).
static inline double rng_normal(Rng *r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

// A stateless hash of (a, b, c): used where a value must depend only on its coordinates
// (e.g. "which sequence is number i of step s"), never on who asks or in what order.
static inline uint64_t rng_hash(uint64_t a, uint64_t b, uint64_t c) {
    Rng r = {a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xD6E8FEB86659FD93ull ^ c};
    rng_u64(&r);
    return rng_u64(&r);
}

#endif
