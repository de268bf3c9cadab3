// test_bf16.c — bf16 numerics (bf16.h), the bf16 kernels of ops_cpu, and the bf16
// reduce-scatter and all-gather of dist.h on 1 to 8 real rank processes.
//
// The conversions are checked against a reference written another way: no bit tricks, but
// frexp/ldexp to find one bf16 step at the value, and rint (the FPU's own round to nearest,
// ties to even) to round to a whole number of steps. It runs over every bf16 pattern, over
// every fp32 exponent and sign with the low 16 bits at and around the halfway point, and
// over random fp32 patterns; crafted values pin down ties, overflow, signed zero,
// subnormals and NaNs one by one.
//
// The collectives are checked two ways. Small integers add up exactly in bf16 whatever the
// order, so a result must equal the serial sum exactly (a chunk in the wrong place cannot
// hide). Values that do not add up exactly check the ROUNDING: bf16 collectives round at every
// hop, so the result depends on the order of the additions, and the test states the order:
//   ring,   chunk c: start with rank c+1's values, add rank c+2's, ..., rank c-1's, and rank
//           c's own last (the order the chunk travels around the ring, ring.c);
//   direct, every chunk: rank 0's values, then rank 1's, ..., rank p-1's (direct.c).
// The reference adds in that order and rounds to bf16 after every addition.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/comm/dist.h"
#include "common/model/bf16.h"
#include "common/model/gpt.h"
#include "common/model/ops.h"
#include "common/model/rng.h"
#include "ranks.h"
#include "test.h"

// ---------------------------------------------------------------------------------------
// The reference: rounding by arithmetic, not by bits
// ---------------------------------------------------------------------------------------

static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float bits_float(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

// The distance between neighbouring bf16s at a > 0. A bf16 holds 8 significant bits: between
// 2^k and 2^(k+1) the step is 2^(k-7); below 2^-126 (subnormals) it stays 2^-133.
static double bf16_step(double a) {
    int e;
    frexp(a, &e);  // a = m 2^e, 0.5 <= m < 1: the leading bit is 2^(e-1)
    int lead = e - 1 < -126 ? -126 : e - 1;
    return ldexp(1.0, lead - 7);
}

// The bf16 nearest to x (ties to even), for any double that is not a NaN. |x| divided by the
// step is exact (a power of two); rint rounds it to a whole number of steps, the even one on
// a tie, and an even number of steps is a bf16 whose last mantissa bit is 0. A result of
// 2^128 or more does not fit: infinity.
static bf16 ref_round(double x) {
    double a = fabs(x), r = a;
    if (a != 0 && !isinf(a)) r = rint(a / bf16_step(a)) * bf16_step(a);
    float f = r >= 0x1p128 ? INFINITY : (float)r;  // exact: r is a bf16 value
    uint32_t u = float_bits(f);
    return (bf16)((u >> 16) | (signbit(x) ? 0x8000u : 0));
}

// x lies exactly halfway between two bf16s.
static int is_tie(double x) {
    double q = fabs(x) / bf16_step(fabs(x));
    return x != 0 && !isinf(x) && q - floor(q) == 0.5;
}

// The value of a bf16 from its fields: (-1)^s 1.m 2^(e-127), or 0.m 2^-126 when e = 0.
static double ref_value(bf16 h) {
    int s = h >> 15, e = (h >> 7) & 0xFF, m = h & 0x7F;
    double v = e == 0 ? ldexp(m, -133) : e == 0xFF ? (m ? NAN : INFINITY) : ldexp(128 + m, e - 127 - 7);
    return s ? -v : v;
}

static int is_nan16(bf16 h) { return (h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0; }

// One hop of a bf16 reduction, by the reference: the exact sum rounded once to bf16. (A double
// holds the sum exactly when the exponents are less than 45 apart; further apart, rounding to
// a double first cannot change the bf16 it rounds to, as 53 > 2 * 8 + 2 bits.) bf16.h rounds
// the fp32 sum instead, which gives the same bits for the same reason (see bf16_add).
static bf16 ref_add(bf16 a, bf16 b) { return ref_round(ref_value(a) + ref_value(b)); }

// ---------------------------------------------------------------------------------------
// Conversions
// ---------------------------------------------------------------------------------------

static void test_to_float_all_patterns(void) {
    int wrong_value = 0, wrong_bits = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = bf16_to_float((bf16)h);
        double want = ref_value((bf16)h);
        int same_sign = !signbit(f) == !signbit(want);
        if (!same_sign || (isnan(want) ? !isnan(f) : (double)f != want)) wrong_value++;
        if (float_bits(f) != h << 16) wrong_bits++;
    }
    // Widening is exact: every pattern means what its fields say (zeros keep their sign).
    EXPECT(wrong_value == 0, "bf16_to_float gives the value of the fields for all 65536 patterns (%d wrong)",
           wrong_value);
    // ... and is the top half of the fp32, NaN payloads included.
    EXPECT(wrong_bits == 0, "bf16_to_float puts the 16 bits on top of 16 zero bits (%d wrong)", wrong_bits);
}

static void test_round_trip_all_patterns(void) {
    int wrong = 0, nans = 0, nan_wrong = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        bf16 back = bf16_from_float(bf16_to_float((bf16)h));
        if (!is_nan16((bf16)h)) {
            wrong += back != h;
            continue;
        }
        // A NaN stays a NaN with its sign and payload, made quiet (top mantissa bit set).
        nans++;
        nan_wrong += back != (h | 0x0040);
    }
    // Every bf16 is an fp32, so converting it back changes nothing: ±0, ±inf, subnormals too.
    EXPECT(wrong == 0, "bf16 -> fp32 -> bf16 returns every non-NaN pattern unchanged (%d of %d wrong)", wrong,
           65536 - nans);
    // A NaN keeps sign and payload and becomes quiet; an already quiet one is unchanged.
    EXPECT(nan_wrong == 0 && nans == 2 * 127, "bf16 -> fp32 -> bf16 keeps the %d NaNs NaN, sign and payload kept, "
           "quiet bit set (%d wrong)", nans, nan_wrong);
}

// bf16_from_float(x) == ref_round(x) for the fp32 pattern u (NaNs: is a NaN, sign kept).
static int agrees_with_ref(uint32_t u) {
    float x = bits_float(u);
    bf16 got = bf16_from_float(x);
    if (isnan(x)) return is_nan16(got) && (got >> 15) == (u >> 31) && (got & 0x0040);
    return got == ref_round(x);
}

static void test_from_float_against_reference(void) {
    // Every sign and exponent (the top 9 bits) and mantissa top (7 bits): all 65536 high
    // halves, each with the low halves that decide the rounding: 0 (exact), 1, just below
    // halfway, halfway (a tie), just above, 3/4 and all ones (carries into the kept bits).
    static const uint32_t lows[] = {0x0000, 0x0001, 0x7FFF, 0x8000, 0x8001, 0xC000, 0xFFFF};
    int wrong = 0, total = 0;
    uint32_t first_wrong = 0;
    for (uint32_t hi = 0; hi < 65536; hi++)
        for (size_t k = 0; k < sizeof lows / sizeof lows[0]; k++) {
            uint32_t u = hi << 16 | lows[k];
            total++;
            if (!agrees_with_ref(u) && wrong++ == 0) first_wrong = u;
        }
    EXPECT(wrong == 0, "bf16_from_float equals the reference on %d patterns around every halfway point "
           "(%d wrong, first 0x%08X)", total, wrong, first_wrong);
    Rng r;
    rng_seed(&r, 7);
    wrong = 0;
    for (int i = 0; i < 2000000; i++) {
        uint32_t u = (uint32_t)rng_u64(&r);
        if (!agrees_with_ref(u) && wrong++ == 0) first_wrong = u;
    }
    EXPECT(wrong == 0, "bf16_from_float equals the reference on 2000000 random fp32 patterns (%d wrong, first 0x%08X)",
           wrong, first_wrong);
}

typedef struct {
    uint32_t in;   // fp32 bits
    bf16 want;
    const char *why;
} Crafted;

static const Crafted CRAFTED[] = {
    {0x3F808000, 0x3F80, "1 + 2^-8 is halfway between 0x3F80 and 0x3F81: a tie goes down to the even 0x3F80"},
    {0x3F818000, 0x3F82, "1 + 3*2^-8 is halfway between 0x3F81 and 0x3F82: a tie goes up to the even 0x3F82"},
    {0xBF808000, 0xBF80, "-(1 + 2^-8): ties to even by magnitude, sign kept (down)"},
    {0xBF818000, 0xBF82, "-(1 + 3*2^-8): ties to even by magnitude, sign kept (up)"},
    {0x3F808001, 0x3F81, "one fp32 step above a tie rounds up"},
    {0x3F807FFF, 0x3F80, "one fp32 step below a tie rounds down"},
    {0x3F7FFFFF, 0x3F80, "just below 1.0 rounds up into the next exponent: 1.0"},
    {0x7F7FFFFF, 0x7F80, "FLT_MAX overflows to +inf, as IEEE rounding to nearest does"},
    {0xFF7FFFFF, 0xFF80, "-FLT_MAX overflows to -inf"},
    {0x7F7F8000, 0x7F80, "the overflow threshold (halfway between the largest bf16 and 2^128) is a tie: +inf"},
    {0x7F7F7FFF, 0x7F7F, "just below the overflow threshold: the largest finite bf16, 3.3895e38"},
    {0x7F800000, 0x7F80, "+inf stays +inf"},
    {0xFF800000, 0xFF80, "-inf stays -inf"},
    {0x00000000, 0x0000, "+0 stays +0"},
    {0x80000000, 0x8000, "-0 keeps its sign"},
    {0x00000001, 0x0000, "the smallest fp32 subnormal rounds to +0"},
    {0x80000001, 0x8000, "the smallest negative fp32 subnormal rounds to -0"},
    {0x00008000, 0x0000, "a subnormal tie goes down to the even 0"},
    {0x00018000, 0x0002, "a subnormal tie goes up to the even 0x0002"},
    {0x00008001, 0x0001, "just above that tie: the smallest bf16 subnormal, 2^-133"},
    {0x00400000, 0x0040, "2^-127, a subnormal bf16, converts exactly"},
    {0x007FFFFF, 0x0080, "the largest fp32 subnormal rounds up to the smallest normal bf16, 2^-126"},
    {0x7FC00000, 0x7FC0, "a quiet NaN stays that NaN"},
    {0xFFC00000, 0xFFC0, "a negative quiet NaN keeps its sign"},
    {0x7F800001, 0x7FC0, "a signaling NaN with its payload only in the dropped bits stays a NaN (not +inf), quiet"},
    {0xFF810000, 0xFFC1, "a negative signaling NaN keeps its sign and kept payload, made quiet"},
    {0x7FFFFFFF, 0x7FFF, "a NaN with every mantissa bit set does not carry into the sign"},
};

static void test_crafted(void) {
    for (size_t i = 0; i < sizeof CRAFTED / sizeof CRAFTED[0]; i++) {
        bf16 got = bf16_from_float(bits_float(CRAFTED[i].in));
        // Each row proves the rounding rule its text states.
        EXPECT(got == CRAFTED[i].want, "0x%08X -> 0x%04X: %s (got 0x%04X)", CRAFTED[i].in, CRAFTED[i].want,
               CRAFTED[i].why, got);
    }
    // -0 widens to -0: equal to 0, sign bit set.
    float nz = bf16_to_float(0x8000);
    EXPECT(nz == 0.0f && signbit(nz), "bf16 0x8000 widens to -0.0");
    // The largest finite bf16 widens to 0x7F7F0000 = 3.3895313892515355e38.
    EXPECT(bf16_to_float(0x7F7F) == 0x1.FEp127f, "bf16 0x7F7F widens to the largest finite bf16, %.8g",
           (double)bf16_to_float(0x7F7F));
}

// ---------------------------------------------------------------------------------------
// The kernels of ops_cpu
// ---------------------------------------------------------------------------------------

// A random finite bf16 whose exponent is within `spread` of e (so sums round, and tie).
static bf16 random_near(Rng *r, int e, int spread) {
    int ee = e + (int)(rng_u64(r) % (uint64_t)(2 * spread + 1)) - spread;
    ee = ee < 1 ? 1 : ee > 254 ? 254 : ee;
    return (bf16)((rng_u64(r) & 1) << 15 | (uint32_t)ee << 7 | (rng_u64(r) & 0x7F));
}

static void test_ops_cpu(void) {
    enum { N = 1 << 20 };
    Rng r;
    rng_seed(&r, 11);
    float *f = malloc(N * sizeof *f), *back = malloc(N * sizeof *back);
    bf16 *h = malloc(N * sizeof *h), *acc = malloc(N * sizeof *acc), *x = malloc(N * sizeof *x);

    // to_bf16: random fp32 patterns, then the crafted ones.
    size_t ncrafted = sizeof CRAFTED / sizeof CRAFTED[0];
    for (size_t i = 0; i < N; i++) f[i] = bits_float(i < ncrafted ? CRAFTED[i].in : (uint32_t)rng_u64(&r));
    ops_cpu.to_bf16(h, f, N);
    int wrong = 0;
    for (size_t i = 0; i < N; i++) wrong += !agrees_with_ref(float_bits(f[i])) || h[i] != bf16_from_float(f[i]);
    // The kernel rounds every element as the reference does.
    EXPECT(wrong == 0, "ops_cpu.to_bf16 rounds %d fp32 values to nearest even (%d wrong)", N, wrong);

    // from_bf16: every pattern.
    for (size_t i = 0; i < 65536; i++) h[i] = (bf16)i;
    ops_cpu.from_bf16(back, h, 65536);
    wrong = 0;
    for (size_t i = 0; i < 65536; i++) wrong += float_bits(back[i]) != (uint32_t)i << 16;
    // The kernel widens exactly, every pattern.
    EXPECT(wrong == 0, "ops_cpu.from_bf16 widens all 65536 patterns exactly (%d wrong)", wrong);

    // add_bf16: pairs a few exponents apart, so that sums round and often tie.
    for (size_t i = 0; i < N; i++) {
        int e = 1 + (int)(rng_u64(&r) % 254);
        acc[i] = random_near(&r, e, 0), x[i] = random_near(&r, e, 9);
    }
    bf16 *want = malloc(N * sizeof *want);
    int ties = 0;
    for (size_t i = 0; i < N; i++) {
        want[i] = ref_add(acc[i], x[i]);
        ties += is_tie(ref_value(acc[i]) + ref_value(x[i]));
    }
    ops_cpu.add_bf16(acc, x, N);
    wrong = 0;
    for (size_t i = 0; i < N; i++) wrong += acc[i] != want[i];
    // acc = bf16(float(acc) + float(x)) is the exact sum rounded once, ties included, up to
    // overflow to inf; the kernel writes it over acc.
    EXPECT(wrong == 0 && ties > 1000, "ops_cpu.add_bf16 equals the exact sum rounded to nearest even on %d pairs, "
           "%d of them ties (%d wrong)", N, ties, wrong);

    // Hand-checked hops: 1 + 2^-8 ties down to 1; 1.0078125 + 2^-8 ties up to 1.015625.
    bf16 a2[2] = {0x3F80, 0x3F81}, x2[2] = {0x3B80, 0x3B80};
    ops_cpu.add_bf16(a2, x2, 2);
    EXPECT(a2[0] == 0x3F80 && a2[1] == 0x3F82, "add_bf16: 1 + 2^-8 -> 1.0 and 1.0078125 + 2^-8 -> 1.015625 "
           "(ties to even; got 0x%04X 0x%04X)", a2[0], a2[1]);
    // inf + -inf is a NaN; NaN + x is a NaN; inf + finite is inf.
    bf16 a3[3] = {0x7F80, 0x7FC0, 0xFF80}, x3[3] = {0xFF80, 0x3F80, 0x3F80};
    ops_cpu.add_bf16(a3, x3, 3);
    EXPECT(is_nan16(a3[0]) && is_nan16(a3[1]) && a3[2] == 0xFF80,
           "add_bf16: inf + -inf and NaN + 1 are NaNs, -inf + 1 is -inf");

    // acc_bf16: x is fp32 and is NOT rounded to bf16 before the addition.
    for (size_t i = 0; i < N; i++) {
        int e = 1 + (int)(rng_u64(&r) % 254);
        acc[i] = random_near(&r, e, 0);
        f[i] = bits_float(((uint32_t)random_near(&r, e, 9) << 16) | (uint32_t)(rng_u64(&r) & 0xFFFF));
        want[i] = ref_round((double)(bf16_to_float(acc[i]) + f[i]));  // the fp32 sum, rounded to bf16
    }
    ops_cpu.acc_bf16(acc, f, N);
    wrong = 0;
    for (size_t i = 0; i < N; i++) wrong += acc[i] != want[i];
    // acc = bf16(float(acc) + x): the fp32 sum rounded to nearest even.
    EXPECT(wrong == 0, "ops_cpu.acc_bf16 equals the fp32 sum rounded to nearest even on %d values (%d wrong)", N,
           wrong);
    bf16 a4[1] = {0x3F80};
    float x4[1] = {0x1p-8f + 0x1p-20f};
    ops_cpu.acc_bf16(a4, x4, 1);
    // 1 + (2^-8 + 2^-20) is past the tie: 0x3F81. Had x been rounded to bf16 first (to 2^-8),
    // it would be the tie, rounded down to 0x3F80.
    EXPECT(a4[0] == 0x3F81, "acc_bf16 adds the fp32 x unrounded: 1 + 2^-8 + 2^-20 -> 0x3F81 (got 0x%04X)", a4[0]);
    free(f), free(back), free(h), free(acc), free(x), free(want);
}

// --mixed's GELU (ops.h): gelu_forward_bf16 is GELU of the widened bf16 input, to_bf16 of the
// result; gelu_backward_bf16 is gelu_backward at the widened input. Bit for bit, over [-8, 8]
// (both tails and the bend).
static void test_gelu_bf16(void) {
    enum { N = 4099 };
    Rng r;
    rng_seed(&r, 31);
    float x[N], dout[N], wide[N], y[N], d_ref[N], d[N];
    bf16 kept[N], out[N];
    for (int i = 0; i < N; i++) x[i] = (float)(16.0 * rng_uniform(&r) - 8.0), dout[i] = (float)rng_uniform(&r) - 0.5f;
    ops_cpu.to_bf16(kept, x, N);
    ops_cpu.gelu_forward_bf16(out, kept, N);
    int wrong = 0;
    for (int i = 0; i < N; i++) {
        wide[i] = bf16_to_float(kept[i]);
        gelu_forward(&y[i], &wide[i], 1);
        wrong += out[i] != bf16_from_float(y[i]);
    }
    EXPECT(wrong == 0, "gelu_forward_bf16 gives bf16(GELU(the bf16 input)) (%d of %d wrong)", wrong, N);
    gelu_backward(d_ref, wide, dout, N);
    memcpy(d, dout, sizeof d);
    ops_cpu.gelu_backward_bf16(d, kept, d, N);  // dinp over dout, as ops.h allows
    EXPECT(memcmp(d, d_ref, sizeof d) == 0, "gelu_backward_bf16 is gelu_backward at the kept input, bit for bit");
}

// --mixed's LayerNorm (ops.h): layernorm_forward_bf16 is layernorm_forward then to_bf16, bit
// for bit, mean and rstd included; rows of 37 and 768 channels (a tail past any vector width,
// and GPT-2 small's), values and parameters of both signs and several scales.
static void test_layernorm_bf16(void) {
    const int shapes[][2] = {{5, 37}, {3, 768}};
    for (int k = 0; k < 2; k++) {
        int N = shapes[k][0], C = shapes[k][1];
        size_t n = (size_t)N * C;
        float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *w = malloc(C * sizeof *w),
              *b = malloc(C * sizeof *b);
        float mean[8], rstd[8], mean16[8], rstd16[8];
        bf16 *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
        Rng r;
        rng_seed(&r, 41 + k);
        for (size_t i = 0; i < n; i++) x[i] = (float)((rng_uniform(&r) - 0.3) * (1 + i % 7));
        for (int i = 0; i < C; i++) w[i] = (float)(2 * rng_uniform(&r) - 0.5), b[i] = (float)(rng_uniform(&r) - 0.5);
        ops_cpu.layernorm_forward(y, mean, rstd, x, w, b, N, C);
        ops_cpu.to_bf16(want, y, n);
        ops_cpu.layernorm_forward_bf16(got, mean16, rstd16, x, w, b, N, C);
        size_t wrong = 0;
        for (size_t i = 0; i < n; i++) wrong += got[i] != want[i];
        EXPECT(wrong == 0 && memcmp(mean, mean16, N * sizeof *mean) == 0 && memcmp(rstd, rstd16, N * sizeof *rstd) == 0,
               "layernorm_forward_bf16 (%d x %d) is layernorm_forward then to_bf16, mean and rstd too (%zu of %zu wrong)",
               N, C, wrong, n);
        free(x), free(y), free(w), free(b), free(want), free(got);
    }
}

// ---------------------------------------------------------------------------------------
// The collectives, on forked ranks (ranks.h)
// ---------------------------------------------------------------------------------------

// Rank r's exact value at i: an integer in [-16, 16]. Sums over 8 ranks stay within 128, and
// bf16 holds every integer up to 256, so every partial sum is exact in any order.
static bf16 exact_value(int r, size_t i) {
    return bf16_from_float((float)((int)(rng_hash(91, (uint64_t)r, i) % 33) - 16));
}

// Rank r's rounding value at i: a random bf16 in (-1, 1), 8 significant bits anywhere, so
// that sums need rounding.
static bf16 rough_value(int r, size_t i) {
    return bf16_from_float((float)((double)(rng_hash(92, (uint64_t)r, i) >> 11) * 0x1p-52 - 1.0));
}

static bf16 *values_of(bf16 (*value)(int, size_t), int r, size_t n) {
    bf16 *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = value(r, i);
    return x;
}

static long first_diff16(const bf16 *got, const bf16 *want, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i]) return (long)i;
    return -1;
}

static long count_diffs16(const bf16 *a, const bf16 *b, size_t n) {
    long k = 0;
    for (size_t i = 0; i < n; i++) k += a[i] != b[i];
    return k;
}

// The record of the call just made (the last one), after draining every earlier one.
static DistRecord last_record(Dist *d) {
    DistRecord recs[64], last = {0};
    for (size_t k; (k = dist_drain_records(d, recs, 64)) > 0;) last = recs[k - 1];
    return last;
}

// The record says bf16, n elements, the algorithm that should run, and the true bytes:
// every algorithm sends each of the p-1 other chunks once (ring: one per round; direct: one
// to each peer) and receives p-1 chunks, each n/p bf16s of 2 bytes.
static void check_record(const DistGroup *g, const char *what, DistColl coll, size_t n, const char *algo) {
    int p = g->size;
    DistRecord rec = last_record(g->dist);
    uint64_t want_bytes = (uint64_t)(p - 1) * (n / (size_t)p) * 2;
    const char *want_algo = p == 1 ? "local" : algo;
    char name[300];
    snprintf(name, sizeof name, "%s record: bf16, count, algo, (p-1)*(n/p)*2 bytes", what);
    report(name,
           rec.coll == coll && rec.dtype == DIST_BF16 && strcmp(dist_dtype_name(rec.dtype), "bf16") == 0 &&
               rec.count == n && strcmp(rec.algo, want_algo) == 0 && rec.bytes_sent == want_bytes &&
               rec.bytes_recv == want_bytes,
           "%s %s count %zu algo %s sent %llu recv %llu; want count %zu algo %s bytes %llu", dist_coll_name(rec.coll),
           dist_dtype_name(rec.dtype), rec.count, rec.algo, (unsigned long long)rec.bytes_sent,
           (unsigned long long)rec.bytes_recv, n, want_algo, (unsigned long long)want_bytes);
}

// Exact sums: out-of-place, in-place, asynchronous; values keyed by WORLD rank, so a group
// that mixes up its members is caught.
static void check_exact(DistGroup *g, const char *gname, size_t n, const char *algo_name) {
    int p = g->size, r = g->rank;
    size_t len = n / (size_t)p, off = (size_t)r * len;
    char name[256], what[96];
    Dist *d = g->dist;
    const char *algo = strcmp(algo_name, "auto") != 0 ? algo_name : n * 2 <= d->direct_max_bytes ? "direct" : "ring";
    bf16 *sum = calloc(n ? n : 1, sizeof *sum), *mine = values_of(exact_value, g->ranks[r], n);
    for (size_t i = 0; i < n; i++) {
        float s = 0;
        for (int q = 0; q < p; q++) s += bf16_to_float(exact_value(g->ranks[q], i));
        sum[i] = bf16_from_float(s);
    }
    bf16 *want_gather = malloc((n ? n : 1) * sizeof *want_gather);
    for (int q = 0; q < p; q++)
        for (size_t i = 0; i < len; i++) want_gather[(size_t)q * len + i] = exact_value(g->ranks[q], (size_t)q * len + i);
    long bad;
    snprintf(what, sizeof what, "%s algo=%s n=%zu", gname, algo_name, n);
    last_record(d);

    // reduce_scatter: out is chunk r of the sum over the group's ranks.
    bf16 *out = calloc(len ? len : 1, sizeof *out);
    dist_reduce_scatter_bf16(g, mine, out, n);
    snprintf(name, sizeof name, "reduce_scatter_bf16 exact %s", what);
    bad = first_diff16(out, sum + off, len);
    report(name, bad < 0, "chunk %d index %ld: got 0x%04X want 0x%04X (%ld wrong)", r, bad, bad >= 0 ? out[bad] : 0,
           bad >= 0 ? sum[off + bad] : 0, count_diffs16(out, sum + off, len));
    snprintf(name, sizeof name, "reduce_scatter_bf16 %s", what);
    check_record(g, name, DIST_REDUCE_SCATTER, n, algo);

    // all_gather: rank q's chunk q of its own values, assembled everywhere.
    bf16 *gathered = calloc(n ? n : 1, sizeof *gathered);
    dist_all_gather_bf16(g, mine + off, gathered, n);
    snprintf(name, sizeof name, "all_gather_bf16 %s", what);
    bad = first_diff16(gathered, want_gather, n);
    report(name, bad < 0, "index %ld wrong (%ld wrong)", bad, count_diffs16(gathered, want_gather, n));
    check_record(g, name, DIST_ALL_GATHER, n, algo);

    // In place: reduce_scatter into its own input's chunk r, then all_gather from there: the
    // pair is an all-reduce in one buffer, as ZeRO and FSDP use it.
    bf16 *buf = values_of(exact_value, g->ranks[r], n);
    dist_reduce_scatter_bf16(g, buf, buf + off, n);
    snprintf(name, sizeof name, "reduce_scatter_bf16 in place (out = in + r*n/p) %s", what);
    bad = first_diff16(buf + off, sum + off, len);
    report(name, bad < 0, "chunk %d index %ld wrong", r, bad);
    dist_all_gather_bf16(g, buf + off, buf, n);
    snprintf(name, sizeof name, "all_gather_bf16 in place (in = out + r*n/p) %s", what);
    bad = first_diff16(buf, sum, n);
    report(name, bad < 0, "index %ld wrong (%ld wrong)", bad, count_diffs16(buf, sum, n));

    // Asynchronous: both started at once, the all_gather reading what the reduce_scatter
    // writes (the communication thread runs them in call order), then waited for.
    DistWork w[2];
    bf16 *chunk = calloc(len ? len : 1, sizeof *chunk), *all = calloc(n ? n : 1, sizeof *all);
    dist_reduce_scatter_bf16_start(g, mine, chunk, n, 7, &w[0]);
    dist_all_gather_bf16_start(g, chunk, all, n, 8, &w[1]);
    dist_wait(&w[0]);
    dist_wait(&w[1]);
    snprintf(name, sizeof name, "reduce_scatter_bf16_start + all_gather_bf16_start %s", what);
    bad = first_diff16(all, sum, n);
    report(name, bad < 0 && w[0].rec.tag == 7 && w[1].rec.tag == 8 && w[0].rec.dtype == DIST_BF16 &&
                     w[1].rec.dtype == DIST_BF16 && w[1].rec.count == n,
           "index %ld wrong, tags %d %d", bad, w[0].rec.tag, w[1].rec.tag);
    last_record(d);
    free(sum), free(mine), free(want_gather), free(out), free(gathered), free(buf), free(chunk), free(all);
}

// The reference sum of element i over p ranks: x[order[0]][i] + x[order[1]][i] + ..., added
// left to right and rounded to bf16 after every addition, as a bf16 collective does.
static bf16 sum_in_order(bf16 *const *x, const int *order, int p, size_t i) {
    bf16 acc = x[order[0]][i];
    for (int j = 1; j < p; j++) acc = ref_add(acc, x[order[j]][i]);
    return acc;
}

// The orders of the top of this file. ring: chunk c starts at rank c+1 and ends with rank c.
static void ring_order(int *order, int p, int c) {
    for (int j = 0; j < p; j++) order[j] = (c + 1 + j) % p;
}

static void rank_order(int *order, int p) {
    for (int j = 0; j < p; j++) order[j] = j;
}

// The rounding checks below can fail: with these values, the ring's order gives other bits
// than rank order, and rounding at every hop other bits than adding in fp32 and rounding once.
// (With p = 2 there is one addition, so order and rounding cannot show; from p = 3 they do.)
static void test_rounding_reference_has_teeth(void) {
    enum { N = 4000 };
    for (int p = 3; p <= DIST_MAX_RANKS; p++) {
        bf16 *x[DIST_MAX_RANKS];
        for (int q = 0; q < p; q++) x[q] = values_of(rough_value, q, N);
        int ring[DIST_MAX_RANKS], ranks[DIST_MAX_RANKS];
        rank_order(ranks, p);
        long other_order = 0, once_only = 0;
        for (size_t i = 0; i < N; i++) {
            ring_order(ring, p, (int)(i % (size_t)p));
            bf16 want = sum_in_order(x, ring, p, i);
            float once = 0;
            for (int q = 0; q < p; q++) once += bf16_to_float(x[ring[q]][i]);
            other_order += sum_in_order(x, ranks, p, i) != want;
            once_only += bf16_from_float(once) != want;
        }
        // Both mistakes change some of the N sums: a ring that adds in another order, or that
        // keeps fp32 partial sums and rounds once, fails the checks on p ranks.
        EXPECT(other_order > N / 100 && once_only > N / 100,
               "p=%d: the ring-order reference differs from rank order in %ld and from one final rounding in %ld "
               "of %d sums", p, other_order, once_only, N);
        for (int q = 0; q < p; q++) free(x[q]);
    }
}

// Rounded sums: the result is the serial reference in the algorithm's order, rounded at
// every hop, and every rank ends with the same bits.
static void check_rounding(DistGroup *g, const char *gname, size_t n, const char *algo_name) {
    int p = g->size, r = g->rank;
    size_t len = n / (size_t)p, off = (size_t)r * len;
    int ring = strcmp(algo_name, "ring") == 0;
    char name[200];
    bf16 **x = malloc((size_t)p * sizeof *x);  // x[q]: group rank q's values (keyed by its world rank)
    for (int q = 0; q < p; q++) x[q] = values_of(rough_value, g->ranks[q], n);
    bf16 *want = malloc((n ? n : 1) * sizeof *want);
    int order[DIST_MAX_RANKS];
    for (int c = 0; c < p; c++) {
        if (ring) ring_order(order, p, c);
        else rank_order(order, p);
        for (size_t i = (size_t)c * len; i < (size_t)(c + 1) * len; i++) want[i] = sum_in_order(x, order, p, i);
    }
    bf16 *buf = malloc((n ? n : 1) * sizeof *buf);
    memcpy(buf, x[r], n * sizeof *buf);
    dist_reduce_scatter_bf16(g, buf, buf + off, n);
    snprintf(name, sizeof name, "reduce_scatter_bf16 rounds at every hop in %s order %s algo=%s n=%zu",
             ring ? "ring" : "rank", gname, algo_name, n);
    long bad = first_diff16(buf + off, want + off, len);
    report(name, bad < 0, "chunk %d index %ld: got 0x%04X want 0x%04X (%ld wrong)", r, bad, bad >= 0 ? buf[off + bad] : 0,
           bad >= 0 ? want[off + bad] : 0, count_diffs16(buf + off, want + off, len));

    dist_all_gather_bf16(g, buf + off, buf, n);
    snprintf(name, sizeof name, "reduce_scatter + all_gather bf16 = the reference everywhere %s algo=%s n=%zu",
             gname, algo_name, n);
    bad = first_diff16(buf, want, n);
    report(name, bad < 0, "index %ld wrong (%ld wrong)", bad, count_diffs16(buf, want, n));

    // Every rank holds the same bits: rank 0's hash, broadcast as raw bits, equals ours.
    uint64_t bits = fnv1a64(buf, n * sizeof *buf, FNV1A64_INIT);
    float h[2], root_h[2];
    memcpy(h, &bits, sizeof bits);
    memcpy(root_h, h, sizeof h);
    dist_broadcast(g, root_h, 2, 0);
    snprintf(name, sizeof name, "reduce_scatter + all_gather bf16: same bits on every rank %s algo=%s n=%zu", gname,
             algo_name, n);
    report(name, memcmp(root_h, h, sizeof h) == 0, "rank %d's buffer differs from rank 0's", r);
    last_record(g->dist);
    for (int q = 0; q < p; q++) free(x[q]);
    free(x), free(want), free(buf);
}

static void rank_main(int p, void *arg) {
    (void)arg;
    Dist d;
    dist_init(&d, "test_bf16", NULL);
    // Element counts divisible by 2p: none, one word per rank, 7 words per rank; the most
    // that "auto" sends direct (64 KiB: 32768 bf16s, as bf16s are 2 bytes) and the next one
    // up, which must go by ring; chunks of more than one piece (SHM_PIECE_FLOATS words), so
    // the piece loops run twice.
    size_t unit = 2 * (size_t)p, direct_most = d.direct_max_bytes / sizeof(bf16) / unit * unit;
    size_t lengths[] = {0, unit, 7 * unit, direct_most, direct_most + unit, (SHM_PIECE_FLOATS + 5) * unit};
    size_t nlengths = sizeof lengths / sizeof lengths[0];
    const char *algos[] = {"ring", "direct", "auto"};
    for (size_t a = 0; a < 3; a++) {
        d.algo = dist_algo_parse(algos[a]);
        // (auto on the longest would be the ring again)
        for (size_t i = 0; i < (a == 2 ? nlengths - 1 : nlengths); i++)
            check_exact(&d.world_group, "world", lengths[i], algos[a]);
    }
    for (size_t a = 0; a < 2; a++) {
        d.algo = dist_algo_parse(algos[a]);
        check_rounding(&d.world_group, "world", 1000 * unit, algos[a]);
    }
    d.algo = DIST_ALGO_RING;
    check_rounding(&d.world_group, "world", (SHM_PIECE_FLOATS + 5) * unit, "ring");
    if (p >= 3) {
        // The world in reverse order: group rank p-1-r is world rank r, so the ring's order is
        // the group's, and the values follow the world ranks.
        int rev[DIST_MAX_RANKS];
        for (int q = 0; q < p; q++) rev[q] = p - 1 - q;
        DistGroup reversed;
        dist_group(&d, &reversed, rev, p);
        for (size_t a = 0; a < 2; a++) {
            d.algo = dist_algo_parse(algos[a]);
            check_exact(&reversed, "reversed", 7 * unit, algos[a]);
            check_rounding(&reversed, "reversed", 1000 * unit, algos[a]);
        }
    }
    dist_barrier(&d.world_group);
    dist_destroy(&d);
}

// ---------------------------------------------------------------------------------------
// Sizes that do not split into whole words per rank die, with a message
// ---------------------------------------------------------------------------------------

typedef enum { CALL_RS, CALL_AG, CALL_RS_START, CALL_AG_START } BadCall;

// Runs one bf16 call in a forked child on a group of p ranks (a stand-in group: the check
// comes before any communication), with stderr captured. Returns the exit status (-1: it
// did not exit normally, e.g. a crash) and the message in msg.
static int run_bad_call(BadCall call, int p, size_t n, int misaligned, char *msg, size_t nmsg) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        Dist d;
        memset(&d, 0, sizeof d);
        DistGroup g = {.dist = &d, .rank = 0, .size = p};
        static uint32_t words[64];
        bf16 *in = (bf16 *)words + misaligned, *out = (bf16 *)words + 32;
        DistWork w;
        switch (call) {
        case CALL_RS: dist_reduce_scatter_bf16(&g, in, out, n); break;
        case CALL_AG: dist_all_gather_bf16(&g, in, out, n); break;
        case CALL_RS_START: dist_reduce_scatter_bf16_start(&g, in, out, n, 0, &w); break;
        case CALL_AG_START: dist_all_gather_bf16_start(&g, in, out, n, 0, &w); break;
        }
        _exit(0);  // not reached if the call dies, as it must
    }
    close(fds[1]);
    size_t got = 0;
    ssize_t k;
    while (got + 1 < nmsg && (k = read(fds[0], msg + got, nmsg - 1 - got)) > 0) got += (size_t)k;
    msg[got] = 0;
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_bad_sizes_die(void) {
    static const struct {
        BadCall call;
        int p;
        size_t n;
        const char *fn, *n_text, *p_text;
    } cases[] = {
        {CALL_RS, 1, 3, "dist_reduce_scatter_bf16", "n = 3 ", "p = 1"},
        {CALL_RS, 4, 12, "dist_reduce_scatter_bf16", "n = 12 ", "p = 4"},      // divisible by p, not by 2p
        {CALL_AG, 3, 9, "dist_all_gather_bf16", "n = 9 ", "p = 3"},
        {CALL_RS_START, 2, 6, "dist_reduce_scatter_bf16_start", "n = 6 ", "p = 2"},
        {CALL_AG_START, 8, 24, "dist_all_gather_bf16_start", "n = 24 ", "p = 8"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char msg[2048];
        int status = run_bad_call(cases[i].call, cases[i].p, cases[i].n, 0, msg, sizeof msg);
        // The call refuses the size: a non-zero exit (die), and a message naming the call, n and p.
        EXPECT(status > 0 && strstr(msg, cases[i].fn) && strstr(msg, cases[i].n_text) && strstr(msg, cases[i].p_text),
               "%s with n = %zu on %d ranks dies (exit %d) naming the call, n and p: %.*s", cases[i].fn, cases[i].n,
               cases[i].p, status, (int)strcspn(msg, "\n"), msg);
    }
    char msg[2048];
    int status = run_bad_call(CALL_AG, 2, 8, 1, msg, sizeof msg);
    // A buffer that starts in the middle of a 4-byte word is refused, not read misaligned.
    EXPECT(status > 0 && strstr(msg, "dist_all_gather_bf16") && strstr(msg, "4-byte aligned"),
           "a bf16 buffer that is not 4-byte aligned dies (exit %d): %.*s", status, (int)strcspn(msg, "\n"), msg);
}

int main(void) {
    test_to_float_all_patterns();
    test_round_trip_all_patterns();
    test_from_float_against_reference();
    test_crafted();
    test_ops_cpu();
    test_gelu_bf16();
    test_layernorm_bf16();
    test_rounding_reference_has_teeth();
    test_bad_sizes_die();
    int only = getenv("TEST_DIST_P") ? atoi(getenv("TEST_DIST_P")) : 0;
    for (int p = 1; p <= 8; p++)
        if (!only || p == only) fork_ranks(p, rank_main, NULL);
    return test_done();
}
