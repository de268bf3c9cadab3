// bf16.h — bfloat16: the 16-bit float that mixed-precision training stores parameters and
// gradients in, and its conversions to and from fp32.
//
// The format. A bf16 is the top half of an fp32: 1 sign bit, the same 8 exponent bits, and
// only 7 of fp32's 23 mantissa bits:
//
//     fp32   s eeeeeeee mmmmmmm mmmmmmmmmmmmmmmm
//     bf16   s eeeeeeee mmmmmmm                      (the low 16 bits are dropped)
//
// So it has fp32's range (about 1e-38 to 3.4e38, with the same infinities, NaNs and
// subnormals) but 8 significant bits instead of 24: about 3 significant decimal digits
// (2^-8 = 0.4% relative spacing). Widening is exact: put 16 zero bits below. Narrowing has
// to drop 16 bits, and how it rounds decides whether training drifts.
//
// Why round to nearest, ties to even (RNE). Truncating (just dropping the low bits) always
// moves a value toward zero, so a sum of many gradients, each truncated, drifts in one
// direction. Rounding to the nearest bf16 errs up as often as down. A value exactly halfway
// between two bf16s (a "tie") goes to the one whose last mantissa bit is 0 (the "even" one),
// so ties too go up half the time and down half the time. This is IEEE 754's default and
// what GPUs and NCCL do. A worked example, near 1.0 (bf16 spacing there is 2^-7):
//
//     value             fp32 bits      what happens                                    bf16
//     1 + 2^-8          0x3F80 8000    exactly halfway between 0x3F80 (1.0) and 0x3F81;
//                                      0x3F80 ends in bit 0: round down            ->  0x3F80 = 1.0
//     1 + 3*2^-8        0x3F81 8000    halfway between 0x3F81 and 0x3F82;
//                                      0x3F82 ends in bit 0: round up              ->  0x3F82 = 1.015625
//     1 + 2^-8 + 2^-23  0x3F80 8001    past halfway: up                            ->  0x3F81 = 1.0078125
//
// The bit trick below does exactly this: add 0x7FFF (just under half of the dropped part's
// range) plus the kept part's last bit, then drop the low 16 bits. Below halfway nothing
// carries into the kept bits; above halfway it always carries; at halfway it carries only
// when the last kept bit is 1, which makes it 0. A carry out of the mantissa bumps the
// exponent, which is right (0x3F7F FFFF rounds to 0x3F80 = 1.0), and from the largest finite
// values it reaches the all-ones exponent with a zero mantissa: infinity, as IEEE's rounding
// overflows. Subnormals need no special case: the same integer arithmetic rounds them.
// NaNs do: adding could carry a NaN whose payload sits in the low bits into an infinity, so a
// NaN keeps its sign and top payload bits and gets the "quiet" bit (the top mantissa bit) set.
//
// The functions are defined here, inline, so that the CPU kernels (ops.c), the shm
// collectives (ring.c, direct.c) and the CUDA kernels (cuda/ops.cu, compiled by nvcc, which
// sees BF16_FN as __host__ __device__) all run the very same bit arithmetic: a bf16 rounded
// on the GPU has the CPU's bits.
#ifndef SHARDLAB_BF16_H
#define SHARDLAB_BF16_H

#include <stdint.h>
#include <string.h>

typedef uint16_t bf16;

// How these functions are declared: plain static inline in C; nvcc also compiles them for
// the device.
#ifdef __CUDACC__
#define BF16_FN __host__ __device__ static inline
#else
#define BF16_FN static inline
#endif

// Exact: the bf16's 16 bits become the top half of the fp32.
BF16_FN float bf16_to_float(bf16 h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

// Round to the nearest bf16, ties to even (see the top of this file).
BF16_FN bf16 bf16_from_float(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u)           // NaN: exponent all ones, mantissa not 0
        return (bf16)((u >> 16) | 0x0040u);         // keep sign and payload top, make it quiet
    uint32_t last_kept_bit = (u >> 16) & 1u;
    return (bf16)((u + 0x7FFFu + last_kept_bit) >> 16);
}

// The nearest bf16 to f, as an fp32: what a value becomes on its way into a bf16 matrix
// multiply (ops.h, linear_forward's bf16 operands).
BF16_FN float bf16_round(float f) { return bf16_to_float(bf16_from_float(f)); }

// bf16(float(a) + x): widen, add in fp32, round once. The accumulation of mixed precision.
BF16_FN bf16 bf16_add_float(bf16 a, float x) { return bf16_from_float(bf16_to_float(a) + x); }

// bf16(float(a) + float(b)): one hop of a bf16 reduction. Rounding twice (the exact sum to
// fp32, then to bf16) gives the same bits as rounding the exact sum once, because fp32 keeps
// more than 2 * 8 + 2 significant bits (Figueroa's condition for a harmless double rounding).
// So this is also what a GPU's native bf16 add returns (NaNs aside: which NaN comes out of an
// add is the hardware's choice), and what NCCL's bf16 sum does at every step of its ring.
BF16_FN bf16 bf16_add(bf16 a, bf16 b) { return bf16_add_float(a, bf16_to_float(b)); }

#endif
