// test_ring_kernels.cc — ring attention's CUDA kernels (labs/common/cuda/ring.cuh) run on the
// CPU through emulate.h, against the lab's own CPU code (labs/18-cp/ring_attention.c): the
// same kernel source nvcc compiles for `shardlab run cp --device cuda`, checked on every build.
//
// For each case every rank plays its ring: the blocks of every rank, in the ring's order,
// through block_forward (the merges included), then the backward of each block from the final
// out and lse. Both sides start from the same state and must end with the same numbers. The
// cases cover head sizes below, at and above the 32 lanes (a lane owning 0, 1 or several
// channels), blocks longer than 32 keys (several rounds of lanes), queries whose whole block
// lies in their future (contiguous chunks), both layouts, two sequences, and --mixed's bf16
// roundings. The copies around the blocks (pack, unpack, D = do . o, fill) against theirs.
// Shared memory starts as NaN (emulate.h), and thread 0 runs ahead of the others: a missing
// __syncthreads() shows as NaNs or as a wrong number here.
//
// Tolerance: normwise, max |emulated - cpu| / max |cpu|. Both sum in the same order with the
// same roundings, so the difference is what the compilers make of the same expressions
// (measured: 0 here); TOL_FP32 and, for bf16 (where one rounding on the other side of a
// boundary moves a term by 2^-8), TOL_BF16 leave room for an FMA.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "emulate.h"

extern "C" {
#include "18-cp/ring_block.h"
#include "common/model/rng.h"
}

#include "common/cuda/ring.cuh"

#include "../test.h"

#define TOL_FP32 1e-6
#define TOL_BF16 1e-3

using Floats = std::vector<float>;

static Floats random_floats(size_t n, Rng *rng, float gain) {
    Floats v(n);
    for (float &x : v) x = gain * (float)rng_normal(rng);
    return v;
}

// max |x - ref| / max |ref| (a NaN anywhere counts as infinitely wrong).
static double normwise(const Floats &x, const Floats &ref) {
    double worst = 0.0, scale = 0.0;
    for (size_t i = 0; i < x.size(); i++) {
        if (!std::isfinite(x[i]) || !std::isfinite(ref[i])) return INFINITY;
        worst = std::max(worst, (double)std::fabs(x[i] - ref[i]));
        scale = std::max(scale, (double)std::fabs(ref[i]));
    }
    return scale > 0 ? worst / scale : worst;
}

struct Case {
    int kind, N, T, B, C, NH, bf16_in;
    float gain;  // on q: large gains make scores of tens
};

static void emu_block_forward(float *out, float *lse, const float *qkv, const int *qpos, int Tq, const float *kv,
                              const int *kpos, int Tk, int B, int C, int NH, int bf16_in) {
    emu_launch(dim3((unsigned)Tq, (unsigned)(B * NH)), ring::LANES, ring::forward_floats(C / NH) * sizeof(float),
               [&] { ring::block_forward_kernel(out, lse, qkv, qpos, Tq, kv, kpos, Tk, C, NH, bf16_in); });
}

static void emu_block_backward(float *dqkv, float *dkv, const float *dout, const float *D, const float *lse,
                               const float *qkv, const int *qpos, int Tq, const float *kv, const int *kpos, int Tk,
                               int B, int C, int NH, int bf16_in) {
    const int hs = C / NH;
    emu_launch(dim3((unsigned)Tq, (unsigned)(B * NH)), ring::LANES, ring::dq_floats(hs) * sizeof(float), [&] {
        ring::block_backward_dq_kernel(dqkv, dout, D, lse, qkv, qpos, Tq, kv, kpos, Tk, C, NH, bf16_in);
    });
    emu_launch(dim3((unsigned)Tk, (unsigned)(B * NH)), ring::LANES, ring::dkv_floats(hs) * sizeof(float), [&] {
        ring::block_backward_dkv_kernel(dkv, dout, D, lse, qkv, qpos, Tq, kv, kpos, Tk, C, NH, bf16_in);
    });
}

// A grid-stride kernel over n elements, as ring.cu launches it (few blocks, so the stride loops).
template <typename Kernel>
static void emu_copy(Kernel k) {
    emu_launch(dim3(3), 64, 0, k);
}

static void run_case(const Case &k, Rng *rng) {
    CpLayout l;
    if (cp_layout_init(&l, k.kind, k.T, k.N) != 0) {
        EXPECT(0, "case T = %d over %d ranks makes a layout", k.T, k.N);
        return;
    }
    const int B = k.B, C = k.C, NH = k.NH, N = k.N;
    char name[160];
    snprintf(name, sizeof name, "%s N=%d T=%d B=%d C=%d NH=%d%s", k.kind == CP_ZIGZAG ? "zigzag" : "contiguous", N, k.T,
             B, C, NH, k.bf16_in ? " bf16" : "");
    const double tol = k.bf16_in ? TOL_BF16 : TOL_FP32;
    std::vector<std::vector<int>> pos(N, std::vector<int>(k.T));
    std::vector<int> cnt(N);
    std::vector<Floats> qkv(N), kv(N);
    for (int r = 0; r < N; r++) {
        cnt[r] = ring_rank_positions(&l, r, pos[r].data());
        qkv[r] = random_floats((size_t)B * cnt[r] * 3 * C, rng, 1.0f);
        for (size_t n = 0; n < (size_t)B * cnt[r]; n++)
            for (int c = 0; c < C; c++) qkv[r][n * 3 * C + c] *= k.gain;
        if (k.bf16_in)  // --mixed: q, k, v arrive as bf16 numbers
            for (float &x : qkv[r]) x = bf16_round(x);
        kv[r].assign((size_t)B * cnt[r] * 2 * C, 0.0f);
        ring_kv_pack(kv[r].data(), qkv[r].data(), B, cnt[r], C);
        Floats packed(kv[r].size(), NAN);
        emu_copy([&] { ring::kv_pack_kernel(packed.data(), qkv[r].data(), (size_t)B * cnt[r], C); });
        EXPECT(normwise(packed, kv[r]) == 0.0, "%s rank %d: kv_pack_kernel takes qkv's k | v columns", name, r);
    }
    double worst_out = 0, worst_lse = 0, worst_dq = 0, worst_dkv = 0, worst_D = 0;
    for (int r = 0; r < N; r++) {
        const int Tq = cnt[r];
        const size_t nout = (size_t)B * Tq * C, nlse = (size_t)B * NH * Tq;
        // Forward: the ring's blocks in its order, merged into (out, lse) on both sides.
        Floats out(nout, 0.0f), lse(nlse, -INFINITY), eout(nout, 0.0f), else_(nlse, NAN);
        emu_copy([&] { ring::fill_kernel(else_.data(), nlse, -INFINITY); });
        EXPECT(std::all_of(else_.begin(), else_.end(), [](float x) { return x == -INFINITY; }),
               "%s rank %d: fill_kernel writes every element", name, r);
        std::vector<float> scores((size_t)k.T + C);
        for (int s = 0; s < N; s++) {
            const int src = ((r - s) % N + N) % N;
            ring_block_forward(out.data(), lse.data(), qkv[r].data(), pos[r].data(), Tq, kv[src].data(),
                               pos[src].data(), cnt[src], B, C, NH, k.bf16_in, scores.data());
            emu_block_forward(eout.data(), else_.data(), qkv[r].data(), pos[r].data(), Tq, kv[src].data(),
                              pos[src].data(), cnt[src], B, C, NH, k.bf16_in);
        }
        worst_out = std::max(worst_out, normwise(eout, out));
        worst_lse = std::max(worst_lse, normwise(else_, lse));
        // Backward: D from the final out, then every block's share, dq and dk dv accumulating
        // onto values already there (as across the ring's steps).
        Floats dout = random_floats(nout, rng, 1.0f), D(nlse), eD(nlse, NAN);
        for (size_t t = 0; t < (size_t)B * Tq; t++)  // D as the ring computes it, the CPU's loop
            for (int h = 0; h < NH; h++) {
                float sum = 0.0f;
                for (int i = 0; i < C / NH; i++) sum += dout[t * C + h * (C / NH) + i] * out[t * C + h * (C / NH) + i];
                D[(t / Tq * NH + h) * Tq + t % Tq] = sum;
            }
        emu_copy([&] { ring::do_dot_o_kernel(eD.data(), dout.data(), out.data(), B, Tq, C, NH); });
        worst_D = std::max(worst_D, normwise(eD, D));
        Floats dqkv = random_floats((size_t)B * Tq * 3 * C, rng, 0.1f), edqkv = dqkv;
        for (int s = 0; s < N; s++) {
            const int src = ((r - s) % N + N) % N;
            Floats dkv = random_floats(kv[src].size(), rng, 0.1f), edkv = dkv;
            ring_block_backward(dqkv.data(), dkv.data(), dout.data(), D.data(), lse.data(), qkv[r].data(),
                                pos[r].data(), Tq, kv[src].data(), pos[src].data(), cnt[src], B, C, NH, k.bf16_in,
                                scores.data());
            emu_block_backward(edqkv.data(), edkv.data(), dout.data(), D.data(), lse.data(), qkv[r].data(),
                               pos[r].data(), Tq, kv[src].data(), pos[src].data(), cnt[src], B, C, NH, k.bf16_in);
            worst_dkv = std::max(worst_dkv, normwise(edkv, dkv));
        }
        worst_dq = std::max(worst_dq, normwise(edqkv, dqkv));
        // dK | dV home into dqkv's k | v columns.
        Floats dkv = random_floats((size_t)B * Tq * 2 * C, rng, 1.0f), into(dqkv), einto(dqkv);
        for (size_t n = 0; n < (size_t)B * Tq; n++)
            for (int c = 0; c < 2 * C; c++) into[n * 3 * C + C + c] = dkv[n * 2 * C + c];
        emu_copy([&] { ring::kv_unpack_kernel(einto.data(), dkv.data(), (size_t)B * Tq, C); });
        EXPECT(normwise(einto, into) == 0.0, "%s rank %d: kv_unpack_kernel writes dqkv's k | v columns only", name, r);
    }
    EXPECT(worst_out <= tol && worst_lse <= tol, "%s: block_forward_kernel's out and lse equal the CPU's ring, every "
           "rank (worst %.1e and %.1e)", name, worst_out, worst_lse);
    EXPECT(worst_dq <= tol && worst_dkv <= tol, "%s: the backward kernels' dq and dk dv equal the CPU's, every rank "
           "and block (worst %.1e and %.1e)", name, worst_dq, worst_dkv);
    EXPECT(worst_D <= TOL_FP32, "%s: do_dot_o_kernel's D equals the CPU's (worst %.1e)", name, worst_D);
}

int main(void) {
    Rng rng;
    rng_seed(&rng, 18);
    const Case cases[] = {
        {CP_ZIGZAG, 2, 16, 1, 16, 2, 0, 1.0f},        // hs 8: lanes 8..31 own no channel
        {CP_ZIGZAG, 4, 70, 2, 96, 2, 0, 1.0f},        // hs 48, ragged chunks, two sequences
        {CP_CONTIGUOUS, 3, 37, 1, 64, 1, 0, 3.0f},    // hs 64: two channels a lane; future blocks
        {CP_CONTIGUOUS, 1, 80, 1, 32, 1, 0, 1.0f},    // one rank: 80 keys, three rounds of lanes
        {CP_ZIGZAG, 2, 136, 1, 40, 1, 0, 4.0f},       // hs 40, blocks of 68 keys, large scores
        {CP_ZIGZAG, 3, 48, 2, 32, 2, 1, 1.0f},        // --mixed's roundings
        {CP_CONTIGUOUS, 2, 90, 1, 64, 2, 1, 2.0f},    // --mixed, several rounds of lanes
    };
    for (const Case &k : cases) run_case(k, &rng);
    return test_done();
}
