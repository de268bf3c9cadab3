// ops.h — the CPU kernels of the GPT: forward and backward of each operation (ops.c; the
// attention kernels, naive and flash, in attention.c).
//
// Conventions. Activations are row-major [N, C] with N = B*T tokens. A Linear layer's
// weight is [out, in] (as torch.nn.Linear), so y = x W^T + b. Backward functions
// ACCUMULATE (+=) into parameter gradients, so micro-batches add up, and OVERWRITE the
// activation gradient they return unless their comment says otherwise.
//
// Every kernel is single-threaded and sums in a fixed order, so the same inputs give the
// same bits every time: that is what lets the graders compare replicas with a hash.
#ifndef SHARDLAB_OPS_H
#define SHARDLAB_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "adamw.h"
#include "bf16.h"

// C[M,N] += op(A)[M,K] * B[K,N], all row-major; op(A) = A (a_trans = 0, A is [M,K]) or
// A^T (a_trans = 1, A is [K,M]). Cache-blocked; the inner loop runs along a row of B and C,
// which the compiler turns into vector instructions. Each C element still sums k in order.
void matmul_acc(float *C, const float *A, const float *B, int M, int N, int K, int a_trans);
// The textbook triple loop, for tests and the benchmark's reference.
void matmul_acc_naive(float *C, const float *A, const float *B, int M, int N, int K, int a_trans);

// dst[cols, rows] = src[rows, cols]^T
void transpose(float *dst, const float *src, int rows, int cols);

// Linear layers take their operands in one of two precisions (bf16_in = 0 or 1):
//   fp32 (bf16_in = 0)  the products of fp32 values, summed in fp32;
//   bf16 (bf16_in = 1)  mixed precision (--mixed): both operands of every product (the weight
//                    and the activation, or the gradient flowing back) rounded to bf16
//                    (bf16.h, to nearest even) first, the products summed in fp32, the
//                    result and the bias in fp32. What a GPU's tensor cores do with bf16
//                    inputs and fp32 accumulation; the CPU does the same rounding and then its
//                    fp32 loops: a product of two bf16s is exact in fp32 (8 + 8 significant
//                    bits fit in 24), so only the order of the sums differs.
//
//     forward   out  = bf16(inp) bf16(W)^T + bias
//     backward  dinp = bf16(dout) bf16(W)
//               dW  += bf16(dout)^T bf16(inp)       db += column sums of dout (fp32)
//
// scratch holds linear_scratch_floats(N, IC, OC, bf16_in) floats (on the device of the ops):
// the CPU keeps W^T there (its kernel wants W^T row by row; cuBLAS takes a transpose flag
// instead) and, in bf16, the rounded operands; a GPU keeps its bf16 copies of the operands
// there. In fp32 the backward pass needs none (scratch may be NULL).
size_t linear_scratch_floats(int N, int IC, int OC, int bf16_in);
// out[N,OC] = inp[N,IC] W[OC,IC]^T + bias (bias may be NULL).
void linear_forward(float *out, const float *inp, const float *weight, const float *bias, int N,
                    int IC, int OC, int bf16_in, float *scratch);
// dinp[N,IC] = dout W (overwritten; skipped if dinp is NULL); dweight += dout^T inp;
// dbias += column sums of dout (skipped if NULL).
void linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                     const float *inp, const float *weight, int N, int IC, int OC, int bf16_in, float *scratch);
// The same two with bf16 operands, the input given as the bf16 numbers it rounds to (an
// activation kept in bf16, gpt.h): the very products of bf16_in = 1, the input not rounded
// again (a GPU multiplies it as it is; the CPU widens it into its scratch). The same scratch.
void linear_forward_bf16(float *out, const bf16 *inp, const float *weight, const float *bias, int N, int IC, int OC,
                         float *scratch);
void linear_backward_bf16(float *dinp, float *dweight, float *dbias, const float *dout, const bf16 *inp,
                          const float *weight, int N, int IC, int OC, float *scratch);
// --mixed's Linears whose output is kept in bf16 too (c_attn's with flash attention, c_fc's;
// gpt.h), as autocast's are: out[N,OC] = bf16(inp W^T + bf16(bias)), the products of
// linear_forward_bf16 summed in fp32 with the bias rounded to bf16 (bias may be NULL), the sum
// rounded once. A GPU writes out as its GEMM stores it (no fp32 output to write and read
// back); the CPU sums into the scratch's room for the backward's dout. The same scratch.
void linear_forward_bf16_out(bf16 *out, const bf16 *inp, const float *weight, const float *bias, int N, int IC,
                             int OC, float *scratch);

// out = (x - mean) * rstd * w + b over each row of C; saves mean and rstd [N] for backward.
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp, const float *w,
                       const float *b, int N, int C);
// The same with out rounded to bf16 (--mixed keeps LayerNorm's output so, gpt.h): the bits of
// layernorm_forward followed by to_bf16, with no fp32 output written and read back.
void layernorm_forward_bf16(bf16 *out, float *mean, float *rstd, const float *inp, const float *w, const float *b,
                            int N, int C);
// dinp += ... (ACCUMULATES: LayerNorm sits on a residual branch); dw, db += ...
void layernorm_backward(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                        const float *w, const float *mean, const float *rstd, int N, int C);

// Causal multi-head self-attention on qkv [B,T,3C] (q | k | v, head h in columns
// h*hs..(h+1)*hs of each). out [B,T,C]; att [B,NH,T,T] saves the softmax probabilities
// (zero above the diagonal).
void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
// dqkv overwritten; scratch holds 2*T floats.
void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                        int T, int C, int NH, float *scratch);

// The same attention by FlashAttention's algorithm: tile by tile with an online softmax, so
// the [T,T] matrix never exists. It saves lse [B,NH,T] instead of att: each row's log-sum-exp
// of its scaled scores, lse[t] = m + log(sum_u exp(s[t,u] - m)) (natural log, m the row's
// max), from which the backward pass recomputes a[t,u] = exp(s[t,u] - lse[t]). Equal to
// attention_forward() up to fp32 rounding. bf16_in = 1 (--mixed): the products' operands
// (q, k, v, do, and the probabilities and their gradients between the products) rounded to
// bf16 first, summed in fp32, as the GPU's tensor cores do (attention.c says which, exactly).
void flash_attention_forward(float *out, float *lse, const float *qkv, int B, int T, int C, int NH, int bf16_in);
// dqkv overwritten. out and lse are what the forward pass wrote (D[t] = do_t . o_t replaces
// the softmax backward's sum over the row). scratch: FLASH_SCRATCH_FLOATS(T, C / NH) floats.
void flash_attention_backward(float *dqkv, const float *dout, const float *qkv, const float *out,
                              const float *lse, int B, int T, int C, int NH, int bf16_in, float *scratch);
// The forward pass with bf16 operands from q, k, v kept as bf16 numbers, into o kept so
// (--mixed: gpt.h): the products of bf16_in = 1 on their widened values, o rounded as it is
// written (the bits of flash_attention_forward's then to_bf16).
void flash_attention_forward_bf16(bf16 *out, float *lse, const bf16 *qkv, int B, int T, int C, int NH);
// The same with bf16 operands, from q, k, v and o kept as bf16 numbers (--mixed: gpt.h): the
// same products as bf16_in = 1 on their widened values, and D = do . o from the kept o.
void flash_attention_backward_bf16(float *dqkv, const float *dout, const bf16 *qkv, const bf16 *out,
                                   const float *lse, int B, int T, int C, int NH, float *scratch);
// The CPU kernels work on tiles of FLASH_TILE queries by FLASH_TILE keys. The backward pass's
// scratch: D [T] for one head, the tile's P and dS [FLASH_TILE, FLASH_TILE], and the key
// tile's dK and dV accumulators [FLASH_TILE, hs].
#define FLASH_TILE 32
// With bf16 operands the forward pass takes key tiles of 64, as the GPU's kernels do, since P
// is rounded to bf16 against the running max after each tile (attention.c).
#define FLASH_KEYS_BF16 64
#define FLASH_SCRATCH_FLOATS(T, hs) \
    ((size_t)(T) + 2 * (size_t)FLASH_TILE * FLASH_TILE + 2 * (size_t)FLASH_TILE * (size_t)(hs))

// GELU, tanh form: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (gelu.h)
void gelu_forward(float *out, const float *inp, int n);
// dinp = gelu'(inp) * dout (dinp may alias dout)
void gelu_backward(float *dinp, const float *inp, const float *dout, int n);
// --mixed, where the MLP keeps its GELU's input and output in bf16 (gpt.h): out the GELU of
// the bf16 input (c_fc's output, linear_forward_bf16_out), rounded to bf16.
void gelu_forward_bf16(bf16 *out, const bf16 *inp, int n);
// dinp = gelu'(inp) * dout, from the kept bf16 input (dinp may alias dout)
void gelu_backward_bf16(float *dinp, const bf16 *inp, const float *dout, int n);

// out = a + b (out may alias a or b)
void residual_add(float *out, const float *a, const float *b, int n);

// out[b,t,:] = wte[tokens[b,t]] + wpe[t]
void embedding_forward(float *out, const uint8_t *tokens, const float *wte, const float *wpe, int B,
                       int T, int C);
// dwte[token] += dout; dwpe[t] += dout
void embedding_backward(float *dwte, float *dwpe, const float *dout, const uint8_t *tokens, int B,
                        int T, int C);

// Softmax of logits [N,V] in place into probabilities; returns the SUM over the N rows of
// -log p[target] (summed in double, so the loss of a batch does not depend on its split).
double crossentropy_forward(float *probs_from_logits, const uint8_t *targets, int N, int V);
// dlogits[N,V] = (probs - onehot(target)) * scale, where scale = d(loss)/d(each row's loss),
// e.g. 1 / (number of tokens in the global batch) for a mean.
void crossentropy_backward(float *dlogits, const float *probs, const uint8_t *targets, int N,
                           int V, float scale);

// Mixed precision (bf16.h): parameters and gradients stored in bf16, math in fp32. Every
// rounding to bf16 is to nearest, ties to even, with the bit arithmetic of bf16.h, so the
// CPU and the GPU give the same bits (one exception: when an add's result is a NaN, which
// NaN is the hardware's choice). dst and src never overlap (they differ in size); acc may not
// overlap x.
// dst[i] = bf16(src[i]), rounded to nearest even
void to_bf16(bf16 *dst, const float *src, size_t n);
// dst[i] = float(src[i]) (exact)
void from_bf16(float *dst, const bf16 *src, size_t n);
// acc[i] = bf16(float(acc[i]) + float(x[i])): added in fp32, rounded once (one hop of a bf16
// reduction: what the shm and NCCL bf16 collectives do at every step)
void add_bf16(bf16 *acc, const bf16 *x, size_t n);
// acc[i] = bf16(float(acc[i]) + x[i]): an fp32 value added into bf16 storage, x not rounded
// first (e.g. a micro-batch's fp32 gradient into the bf16 gradient buffer)
void acc_bf16(bf16 *acc, const float *x, size_t n);

// ---------------------------------------------------------------------------------------
// The ops of one device, as a table (nccl-tests' style: one struct of functions per
// implementation). gpt.c and train.c call every kernel through a rank's table, so the same
// model code runs on the CPU (ops_cpu: the functions above) or on a GPU (cuda_ops() in
// cuda.h: the same signatures and the same meaning, on device pointers; token arrays stay
// in host memory). Scratch arguments are sized for the CPU kernels; the GPU ones may ignore
// them.
// ---------------------------------------------------------------------------------------

struct MoeConfig;
struct MoeActs;

typedef struct Ops {
    const char *name;  // "cpu", "cuda"
    void (*linear_forward)(float *out, const float *inp, const float *weight, const float *bias, int N, int IC,
                           int OC, int bf16_in, float *scratch);
    void (*linear_backward)(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
                            const float *weight, int N, int IC, int OC, int bf16_in, float *scratch);
    void (*linear_forward_bf16)(float *out, const bf16 *inp, const float *weight, const float *bias, int N, int IC,
                                int OC, float *scratch);
    void (*linear_backward_bf16)(float *dinp, float *dweight, float *dbias, const float *dout, const bf16 *inp,
                                 const float *weight, int N, int IC, int OC, float *scratch);
    void (*linear_forward_bf16_out)(bf16 *out, const bf16 *inp, const float *weight, const float *bias, int N,
                                    int IC, int OC, float *scratch);
    void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp, const float *w,
                              const float *b, int N, int C);
    void (*layernorm_forward_bf16)(bf16 *out, float *mean, float *rstd, const float *inp, const float *w,
                                   const float *b, int N, int C);
    void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout, const float *inp,
                               const float *w, const float *mean, const float *rstd, int N, int C);
    void (*attention_forward)(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
    void (*attention_backward)(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T,
                               int C, int NH, float *scratch);
    void (*flash_attention_forward)(float *out, float *lse, const float *qkv, int B, int T, int C, int NH,
                                    int bf16_in);
    void (*flash_attention_backward)(float *dqkv, const float *dout, const float *qkv, const float *out,
                                     const float *lse, int B, int T, int C, int NH, int bf16_in, float *scratch);
    void (*flash_attention_forward_bf16)(bf16 *out, float *lse, const bf16 *qkv, int B, int T, int C, int NH);
    void (*flash_attention_backward_bf16)(float *dqkv, const float *dout, const bf16 *qkv, const bf16 *out,
                                          const float *lse, int B, int T, int C, int NH, float *scratch);
    void (*gelu_forward)(float *out, const float *inp, int n);
    void (*gelu_backward)(float *dinp, const float *inp, const float *dout, int n);
    void (*gelu_forward_bf16)(bf16 *out, const bf16 *inp, int n);
    void (*gelu_backward_bf16)(float *dinp, const bf16 *inp, const float *dout, int n);
    void (*residual_add)(float *out, const float *a, const float *b, int n);
    void (*embedding_forward)(float *out, const uint8_t *tokens, const float *wte, const float *wpe, int B, int T,
                              int C);
    void (*embedding_backward)(float *dwte, float *dwpe, const float *dout, const uint8_t *tokens, int B, int T,
                               int C);
    double (*crossentropy_forward)(float *probs_from_logits, const uint8_t *targets, int N, int V);
    void (*crossentropy_backward)(float *dlogits, const float *probs, const uint8_t *targets, int N, int V,
                                  float scale);
    // The optimizer's elementwise work (adamw.h).
    void (*adamw_update)(const AdamW *opt, int64_t t, float *params, const float *grads, float *m, float *v,
                         size_t n);
    double (*sum_of_squares)(const float *x, size_t n);
    double (*sum_of_squares_buffers)(int n, const float *const *x, const size_t *len, double *each);
    double (*sum_of_squares_buffers_bf16)(int n, const bf16 *const *x, const size_t *len, double *each);
    void (*scale_floats)(float *x, size_t n, float s);
    // Buffers: x[0..n) = 0; dst[0..n) = src[0..n) (both on the device).
    void (*zero)(float *x, size_t n);
    void (*copy)(float *dst, const float *src, size_t n);
    // Mixed precision (see to_bf16() above): conversions and bf16 accumulation.
    void (*to_bf16)(bf16 *dst, const float *src, size_t n);
    void (*from_bf16)(float *dst, const bf16 *src, size_t n);
    void (*add_bf16)(bf16 *acc, const bf16 *x, size_t n);
    void (*acc_bf16)(bf16 *acc, const float *x, size_t n);
    // Where the device's kernels find the workspace of their own they need during a pass
    // (ops_gpu_workspace_bytes() of it: part of the pass's workspace, so it is counted with
    // it), or NULL, 0 when the pass is over. NULL on the CPU, whose kernels take their
    // scratch as arguments.
    void (*use_workspace)(void *p, size_t bytes);
    // A block's mixture of experts (--moe; moe.h's moe_forward and moe_backward on the CPU, NULL
    // where a device has none). Not a kernel but a layer, here for the reason cp's ring is in
    // flash_attention's place: lab-ep puts its dispatcher here, so gpt.c runs either unchanged.
    void (*moe_forward)(const struct Ops *ops, const struct MoeConfig *m, const float *params, const float *x,
                        float *out, struct MoeActs *a, int bf16_in, float *scratch);
    void (*moe_backward)(const struct Ops *ops, const struct MoeConfig *m, const float *params, float *grads,
                         const float *x, const float *dout, const struct MoeActs *a, float aux_scale, float *dx,
                         int bf16_in, float *scratch);
} Ops;

extern const Ops ops_cpu;

// The GPU's sums over rows (bias and LayerNorm gradients) add slabs of this many rows first,
// then the slabs' partial sums (cuda/ops.cu, "Column sums"): one float per slab and column.
#define OPS_GPU_SUM_SLAB 256
// The workspace the GPU's kernels ask for during one forward or backward pass of B sequences
// of T tokens, C channels, NH heads, vocabulary V (bytes): the largest of the attention
// backward's (naive: dS [B,NH,T,T] floats; flash, flash = 1: D [B,NH,T] floats), the column
// sums' partials (a bias gradient over 4C columns, LayerNorm's two over C, the position
// embedding's over T*C), and the cross-entropy's per-row losses (B*T doubles).
size_t ops_gpu_workspace_bytes(int B, int T, int C, int NH, int V, int flash);

#endif
