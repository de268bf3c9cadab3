// test_flash_tc.cc — flash_tc.cuh's tensor-core kernels (bf16 for --mixed, TF32 for --tf32,
// 3xTF32 for fp32) run on the CPU through emulate.h, against the CPU's flash attention
// (attention.c): the same kernel source nvcc compiles, checked on every build, GPU or not.
//
// What it proves: the kernels' indexing (fragments, staged and transposed tiles, the rows a
// lane owns), the causal mask and the ragged ends, the online softmax and its rescaling, the
// two backward kernels' split, and a __syncthreads() wherever threads read shared memory that
// others wrote (emulate.h runs thread 0 ahead: taking out the one after the forward pass's
// transpose, or the one before dk's, leaves outputs NaN), at heads padded to every width the
// kernels instantiate (16, 32, 64, 128), T = 1, T inside one tile, and T past a block of rows
// and several tiles. Every output starts as NaN and must be written. What it does not: speed,
// and the hardware's fragment layouts, which emulate.h takes from PTX's documentation
// (tests/gpu/test_cuda_ops.c checks those on a GPU, with the same shapes).
//
// Tolerances (normwise: the largest |emulated - cpu| over the largest |cpu|):
//   bf16  both round the same operands to bf16, and P against the same running max (64-key
//         tiles on both), so they differ by their fp32 sums' order, and where that puts a value
//         on the other side of a bf16 rounding boundary (a term off by 2^-8 of itself):
//         TOL_BF16_OUT, TOL_BF16_GRAD (measured: about 1e-6 and 1e-5 at worst).
//   TF32  against the CPU's fp32 (TF32 is not emulated on the CPU): test_cuda_ops' bounds.
//   3xTF32  against the CPU's fp32 with fp32's bounds (measured: 1e-6 and 2e-6 at worst); and,
//           as it stands in for fp32, against the exact values (tests/attention_ref.h): no further
//           from them than X3_VS_FP32 times the CPU's fp32 flash is (measured: 1.1 to 4.5 times;
//           one TF32 product alone, or a small term left out, is hundreds of times).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "emulate.h"

extern "C" {
#include "common/model/ops.h"
#include "common/model/rng.h"
}

#include "common/cuda/flash_tc.cuh"

#include "../attention_ref.h"
#include "../test.h"

#define TOL_BF16_OUT 1e-4
#define TOL_BF16_GRAD 1e-3
#define TOL_TF32_OUT 5e-3
#define TOL_TF32_GRAD 2e-2
#define TOL_X3_OUT 1e-5
#define TOL_X3_GRAD 1e-4
#define X3_VS_FP32 8.0
#define FP32_EPS 6e-8  // 2^-24: fp32's rounding, the least error a result can be held to

static std::vector<float> random_floats(size_t n, uint64_t seed, float lo, float hi) {
    Rng rng;
    rng_seed(&rng, seed);
    std::vector<float> v(n);
    for (float &x : v) x = lo + (hi - lo) * (float)rng_uniform(&rng);
    return v;
}

// max |x - ref| / max |ref|, against fp32 results or the exact (double) values; NaN (an
// element never written) makes it NaN.
template <typename Ref>
static double normwise(const std::vector<float> &x, const std::vector<Ref> &ref) {
    double d = 0, m = 0;
    for (size_t i = 0; i < x.size(); i++) {
        double e = fabs((double)x[i] - (double)ref[i]);
        if (!(e <= d)) d = e;
        m = fmax(m, fabs((double)ref[i]));
    }
    return d / (m > 0 ? m : 1);
}

static size_t unwritten(const std::vector<float> &x) {
    size_t n = 0;
    for (float v : x) n += std::isnan(v);
    return n;
}

// The three kernels, as flash_tc.cu launches them: forward into out and lse; the backward from
// out_in and lse_in (the CPU's, so that it is checked alone) into dqkv.
template <typename F, int HSP>
static void run(std::vector<float> &out, std::vector<float> &lse, std::vector<float> &dqkv, const std::vector<float> &qkv,
                const std::vector<float> &dout, const std::vector<float> &out_in, const std::vector<float> &lse_in,
                int B, int T, int C, int NH) {
    const float scale = 1.0f / sqrtf((float)(C / NH));
    const dim3 grid((unsigned)(B * NH), (unsigned)((T + tc::ROWS - 1) / tc::ROWS));
    std::vector<float> D((size_t)B * NH * T, NAN);
    emu_launch(grid, tc::THREADS, tc::forward_bytes<F, HSP>(),
               [&] { tc::forward_kernel<F, HSP>(out.data(), lse.data(), qkv.data(), T, C, NH, scale); });
    emu_launch(grid, tc::THREADS, tc::dq_bytes<F, HSP>(), [&] {
        tc::backward_dq_kernel<F, HSP>(dqkv.data(), D.data(), dout.data(), qkv.data(), out_in.data(), lse_in.data(),
                                       T, C, NH, scale);
    });
    emu_launch(grid, tc::THREADS, tc::dkv_bytes<F, HSP>(), [&] {
        tc::backward_dkv_kernel<F, HSP>(dqkv.data(), D.data(), dout.data(), qkv.data(), lse_in.data(), T, C, NH,
                                        scale);
    });
}

template <typename F>
static void run_padded(int hsp, std::vector<float> &out, std::vector<float> &lse, std::vector<float> &dqkv,
                       const std::vector<float> &qkv, const std::vector<float> &dout, const std::vector<float> &out_in,
                       const std::vector<float> &lse_in, int B, int T, int C, int NH) {
    switch (hsp) {
    case 16: run<F, 16>(out, lse, dqkv, qkv, dout, out_in, lse_in, B, T, C, NH); break;
    case 32: run<F, 32>(out, lse, dqkv, qkv, dout, out_in, lse_in, B, T, C, NH); break;
    case 64: run<F, 64>(out, lse, dqkv, qkv, dout, out_in, lse_in, B, T, C, NH); break;
    default: run<F, 128>(out, lse, dqkv, qkv, dout, out_in, lse_in, B, T, C, NH); break;
    }
}

enum Format { BF16, TF32, TF32X3 };

static void check(Format format, int B, int T, int C, int NH, const char *why) {
    const int hs = C / NH, hsp = hs <= 16 ? 16 : hs <= 32 ? 32 : hs <= 64 ? 64 : 128;
    const bool bf16 = format == BF16;
    const char *name = format == BF16 ? "bf16" : format == TF32 ? "TF32" : "3xTF32";
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    std::vector<float> qkv = random_floats(nqkv, 40 + (uint64_t)T, -2, 2), dout = random_floats(nout, 41, -1, 1);

    // The CPU's flash: the same roundings with bf16 (bf16_in = 1), fp32 against TF32.
    std::vector<float> out(nout), lse(nlse), dqkv(nqkv), scratch(FLASH_SCRATCH_FLOATS(T, hs));
    flash_attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, bf16);
    flash_attention_backward(dqkv.data(), dout.data(), qkv.data(), out.data(), lse.data(), B, T, C, NH, bf16,
                             scratch.data());

    std::vector<float> e_out(nout, NAN), e_lse(nlse, NAN), e_dqkv(nqkv, NAN);
    if (format == BF16) run_padded<tc::Bf16>(hsp, e_out, e_lse, e_dqkv, qkv, dout, out, lse, B, T, C, NH);
    else if (format == TF32) run_padded<tc::Tf32>(hsp, e_out, e_lse, e_dqkv, qkv, dout, out, lse, B, T, C, NH);
    else run_padded<tc::Tf32x3>(hsp, e_out, e_lse, e_dqkv, qkv, dout, out, lse, B, T, C, NH);

    size_t left = unwritten(e_out) + unwritten(e_lse) + unwritten(e_dqkv);
    double w_out = normwise(e_out, out), w_lse = normwise(e_lse, lse), w_dqkv = normwise(e_dqkv, dqkv);
    double tol_out = format == BF16 ? TOL_BF16_OUT : format == TF32 ? TOL_TF32_OUT : TOL_X3_OUT;
    double tol_grad = format == BF16 ? TOL_BF16_GRAD : format == TF32 ? TOL_TF32_GRAD : TOL_X3_GRAD;
    EXPECT(left == 0, "%s kernels, emulated (B=%d T=%d hs=%d, padded to %d; %s): every output written (%zu left NaN)",
           name, B, T, hs, hsp, why, left);
    EXPECT(w_out <= tol_out && w_lse <= tol_out,
           "%s forward, emulated (B=%d T=%d hs=%d): out %.2g and lse %.2g from the CPU's flash (within %g)", name, B,
           T, hs, w_out, w_lse, tol_out);
    EXPECT(w_dqkv <= tol_grad, "%s backward, emulated (B=%d T=%d hs=%d): dq, dk and dv %.2g from the CPU's (within %g)",
           name, B, T, hs, w_dqkv, tol_grad);
    if (format != TF32X3) return;

    // 3xTF32 stands in for fp32: against the exact values, it must be off by no more than
    // X3_VS_FP32 times what the CPU's fp32 flash is off by (TF32 alone: hundreds of times).
    std::vector<double> x_out(nout), x_lse(nlse), x_dqkv(nqkv);
    attention_reference_as(x_out.data(), x_lse.data(), x_dqkv.data(), qkv.data(), dout.data(), B, T, C, NH, 0);
    double fp32_fwd = fmax(normwise(out, x_out), normwise(lse, x_lse)), fp32_bwd = normwise(dqkv, x_dqkv);
    double x3_fwd = fmax(normwise(e_out, x_out), normwise(e_lse, x_lse)), x3_bwd = normwise(e_dqkv, x_dqkv);
    EXPECT(x3_fwd <= X3_VS_FP32 * fmax(fp32_fwd, FP32_EPS) && x3_bwd <= X3_VS_FP32 * fmax(fp32_bwd, FP32_EPS),
           "3xTF32 as accurate as fp32 (B=%d T=%d hs=%d): from the exact, forward %.2g and backward %.2g, the CPU's "
           "fp32 %.2g and %.2g (within %gx)",
           B, T, hs, x3_fwd, x3_bwd, fp32_fwd, fp32_bwd, X3_VS_FP32);
}

// The bf16 backward kernels from q, k, v and o kept as bf16 numbers (--mixed: gpt.h), into dqkv.
template <int HSP>
static void run_kept(std::vector<float> &dqkv, const std::vector<bf16> &qkv, const std::vector<float> &dout,
                     const std::vector<bf16> &out, const std::vector<float> &lse, int B, int T, int C, int NH) {
    const float scale = 1.0f / sqrtf((float)(C / NH));
    const dim3 grid((unsigned)(B * NH), (unsigned)((T + tc::ROWS - 1) / tc::ROWS));
    std::vector<float> D((size_t)B * NH * T, NAN);
    emu_launch(grid, tc::THREADS, tc::dq_bytes<tc::Bf16, HSP>(), [&] {
        tc::backward_dq_kernel<tc::Bf16, HSP>(dqkv.data(), D.data(), dout.data(), qkv.data(), out.data(), lse.data(),
                                              T, C, NH, scale);
    });
    emu_launch(grid, tc::THREADS, tc::dkv_bytes<tc::Bf16, HSP>(), [&] {
        tc::backward_dkv_kernel<tc::Bf16, HSP>(dqkv.data(), D.data(), dout.data(), qkv.data(), lse.data(), T, C, NH,
                                               scale);
    });
}

// The bf16 forward kernel from q, k, v kept as bf16 numbers into o kept so (--mixed: gpt.h).
template <int HSP>
static void run_kept_forward(std::vector<bf16> &out, std::vector<float> &lse, const std::vector<bf16> &qkv, int B, int T,
                             int C, int NH) {
    const float scale = 1.0f / sqrtf((float)(C / NH));
    const dim3 grid((unsigned)(B * NH), (unsigned)((T + tc::ROWS - 1) / tc::ROWS));
    emu_launch(grid, tc::THREADS, tc::forward_bytes<tc::Bf16, HSP>(),
               [&] { tc::forward_kernel<tc::Bf16, HSP>(out.data(), lse.data(), qkv.data(), T, C, NH, scale); });
}

static std::vector<bf16> rounded(const std::vector<float> &x) {
    std::vector<bf16> h(x.size());
    to_bf16(h.data(), x.data(), x.size());
    return h;
}

static std::vector<float> widened(const std::vector<bf16> &h) {
    std::vector<float> x(h.size());
    from_bf16(x.data(), h.data(), h.size());
    return x;
}

// --mixed's forward pass reads q, k, v from the bf16 numbers it kept and writes o so, and its
// backward reads q, k, v and o from them: the same arithmetic as
// the fp32-input kernels given those numbers widened (the operands it rounds are the same, and
// D takes the same o), on the GPU's kernels here and the CPU's. The same up to the compiler:
// with FMA contraction (the labs' -ffp-contract=fast, nvcc's default) the two instances may
// fuse a multiply and an add differently, and a dS then round to the neighbouring bf16; so
// held to TOL_BF16_GRAD, far below a wrong row or channel (order 1).
static void check_kept(int B, int T, int C, int NH) {
    const int hs = C / NH, hsp = hs <= 16 ? 16 : hs <= 32 ? 32 : hs <= 64 ? 64 : 128;
    const size_t nqkv = (size_t)B * T * 3 * C, nout = (size_t)B * T * C, nlse = (size_t)B * NH * T;
    std::vector<float> qkv = random_floats(nqkv, 50 + (uint64_t)T, -2, 2), dout = random_floats(nout, 51, -1, 1);
    std::vector<float> out(nout), lse(nlse), scratch(FLASH_SCRATCH_FLOATS(T, hs));
    flash_attention_forward(out.data(), lse.data(), qkv.data(), B, T, C, NH, 1);
    const std::vector<bf16> qkv16 = rounded(qkv), out16 = rounded(out);
    const std::vector<float> qkv_w = widened(qkv16), out_w = widened(out16);

    std::vector<float> e_out(nout), e_lse(nlse), want(nqkv, NAN), got(nqkv, NAN);
    run_padded<tc::Bf16>(hsp, e_out, e_lse, want, qkv_w, dout, out_w, lse, B, T, C, NH);

    // The forward pass from the kept q, k, v into a kept o: the fp32-input kernel's o (from
    // the widened numbers: the same operands) rounded, bit for bit, and its lse; on the CPU the
    // same against flash_attention_forward.
    std::vector<bf16> o16(nout, 0xFFFF), want16 = rounded(e_out);  // 0xFFFF: a NaN, if left
    std::vector<float> o16_lse(nlse, NAN);
    switch (hsp) {
    case 16: run_kept_forward<16>(o16, o16_lse, qkv16, B, T, C, NH); break;
    case 32: run_kept_forward<32>(o16, o16_lse, qkv16, B, T, C, NH); break;
    case 64: run_kept_forward<64>(o16, o16_lse, qkv16, B, T, C, NH); break;
    default: run_kept_forward<128>(o16, o16_lse, qkv16, B, T, C, NH); break;
    }
    size_t differ = 0;
    for (size_t i = 0; i < nout; i++) differ += o16[i] != want16[i];
    EXPECT(differ == 0 && o16_lse == e_lse,
           "bf16 forward from the kept q, k, v into a kept o, emulated (B=%d T=%d hs=%d): the fp32-input kernel's o "
           "rounded, bit for bit (%zu of %zu differ), and its lse", B, T, hs, differ, nout);
    std::vector<bf16> cpu_o16(nout, 0xFFFF);
    std::vector<float> cpu_lse16(nlse, NAN);
    const std::vector<bf16> cpu_want16 = rounded(out);
    flash_attention_forward_bf16(cpu_o16.data(), cpu_lse16.data(), qkv16.data(), B, T, C, NH);
    differ = 0;
    for (size_t i = 0; i < nout; i++) differ += cpu_o16[i] != cpu_want16[i];
    EXPECT(differ == 0 && cpu_lse16 == lse,
           "the CPU's flash_attention_forward_bf16 (B=%d T=%d hs=%d): flash_attention_forward's o rounded, bit for bit "
           "(%zu of %zu differ), and its lse", B, T, hs, differ, nout);
    switch (hsp) {
    case 16: run_kept<16>(got, qkv16, dout, out16, lse, B, T, C, NH); break;
    case 32: run_kept<32>(got, qkv16, dout, out16, lse, B, T, C, NH); break;
    case 64: run_kept<64>(got, qkv16, dout, out16, lse, B, T, C, NH); break;
    default: run_kept<128>(got, qkv16, dout, out16, lse, B, T, C, NH); break;
    }
    size_t left = unwritten(got);
    double w_gpu = normwise(got, want);
    EXPECT(left == 0 && w_gpu <= TOL_BF16_GRAD,
           "bf16 backward from the kept bf16 q, k, v and o, emulated (B=%d T=%d hs=%d): %.2g from the fp32-input "
           "kernels on them widened (within %g; %zu left NaN)", B, T, hs, w_gpu, TOL_BF16_GRAD, left);

    std::vector<float> cpu_want(nqkv), cpu_got(nqkv);
    flash_attention_backward(cpu_want.data(), dout.data(), qkv_w.data(), out_w.data(), lse.data(), B, T, C, NH, 1,
                             scratch.data());
    flash_attention_backward_bf16(cpu_got.data(), dout.data(), qkv16.data(), out16.data(), lse.data(), B, T, C, NH,
                                  scratch.data());
    double w_cpu = normwise(cpu_got, cpu_want);
    EXPECT(w_cpu <= TOL_BF16_GRAD,
           "the CPU's flash_attention_backward_bf16 (B=%d T=%d hs=%d): %.2g from flash_attention_backward on the kept "
           "numbers widened (within %g)", B, T, hs, w_cpu, TOL_BF16_GRAD);
    double w = normwise(got, cpu_got);
    EXPECT(w <= TOL_BF16_GRAD, "bf16 backward from the kept numbers (B=%d T=%d hs=%d): %.2g from the CPU's (within %g)",
           B, T, hs, w, TOL_BF16_GRAD);
}

int main(void) {
    // test_cuda_ops' shapes for the tensor cores' kernels.
    struct {
        int B, T, C, NH;
        const char *why;
    } shapes[] = {
        {2, 19, 48, 3, "hs 16, T inside one tile"},
        {1, 300, 96, 2, "hs 48 padded to 64, five blocks of rows and tiles of keys"},
        {2, 130, 256, 2, "hs 128, B and NH > 1"},
        {3, 1, 12, 4, "T = 1, hs 3 padded to 16"},
        {1, 70, 64, 2, "hs 32, T past one tile"},
    };
    for (Format f : {BF16, TF32, TF32X3})
        for (const auto &s : shapes) check(f, s.B, s.T, s.C, s.NH, s.why);
    check_kept(1, 300, 96, 2);  // hs 48 padded to 64, several blocks and tiles
    check_kept(2, 19, 48, 3);   // hs 16, inside one tile
    return test_done();
}
