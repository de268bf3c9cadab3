// lt.cu — the Linear forward's product with its bias added as the product is stored, by
// cuBLASLt's bias epilogue.
//
// Defines (context.cuh): cuda_gemm_bias(), cuda_lt_release().
//
// Without it (ops.cu's other way, and cuda_set_bias_epilogue(0)) the Linear forward writes
// the bias across the whole output, then cuBLAS adds the product to it (beta = 1): the output
// written twice and read once, where writing it once is enough. At GPT-2 small's shape that
// is about 450 MB of traffic a layer, every step, in every precision.
//
// The layout. Row-major out[N, OC] is, to cuBLAS, the column-major out^T[OC, N] (ops.cu's top
// says why), whose rows are the output channels. CUBLASLT_EPILOGUE_BIAS adds a vector with one
// value per ROW of the result D, the same value across all its columns: bias[o] added to
// channel o of every token, which is the Linear's bias. So m = OC, and the bias has OC floats.
//
//      D (m x n, column-major)          bias (m)
//      d00 d01 d02 ... d0,n-1     +     b0   (the same b0 on every column)
//      d10 d11 d12 ... d1,n-1     +     b1
//      ...                              ...
//
// The arithmetic is the other way's: the product summed in fp32, then the bias added once
// (alpha = 1, beta = 0), fp32 (CUBLAS_COMPUTE_32F, or _FAST_TF32 under --tf32) or bf16
// operands with fp32 accumulation; the result differs from it by which kernel sums the
// product, as two cuBLAS kernels do (test_cuda_ops compares the two ways and the CPU). D is
// fp32, or bf16 (--mixed's c_attn and c_fc, ops.h's linear_forward_bf16_out): then the bias
// is bf16 too, as cuBLASLt wants a bias of D's type, and the fp32 sum is rounded once as it
// is stored, which is autocast's Linear.
//
// Plans. cuBLASLt describes a product with descriptors (the operation, one layout per matrix)
// and picks a kernel for them by heuristic: both cost host time, so each shape's set is made
// once and kept in the context (LtPlan), keyed by everything the choice depends on, the
// addresses' alignments included: the heuristic is told each pointer's actual alignment (the
// bias pointer's it reads from the descriptor), so it never picks a kernel that needs more,
// and a plan made for aligned buffers is never used for unaligned ones. The kernel gets the
// context's fixed cuBLAS workspace (device.cu says why a fixed one: the same kernel on every
// run, so the same bits on every replica). Where cuBLASLt has no kernel for a shape,
// cuda_gemm_bias() queues nothing and returns false, and ops.cu takes the other way (said
// once on stderr, so that a benchmark whose two ways time alike says why).
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "context.cuh"

// The largest power of two, up to 256, that divides the address.
static unsigned alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    unsigned al = 256;
    while (al > 1 && a % al) al /= 2;
    return al;
}

// Once a process: that a product takes the other way (so a benchmark's two rows that time the
// same kernels say why).
static void say_other_way(const LtKey *key) {
    static bool said = false;
    if (said) return;
    said = true;
    fprintf(stderr, "shardlab: cuBLASLt has no bias-epilogue kernel for a %d x %d x %d product (%s%s); its bias is "
            "written across the output first (said once)\n", key->m, key->n, key->k,
            key->bf16_in ? "bf16 operands" : key->tf32 ? "TF32" : "fp32", key->bf16_out ? ", bf16 output" : "");
}

static void plan_free(LtPlan *p) {
    // Destroying a NULL descriptor is allowed and does nothing.
    (void)blas.cublasLtMatmulDescDestroy(p->desc);
    (void)blas.cublasLtMatrixLayoutDestroy(p->a);
    (void)blas.cublasLtMatrixLayoutDestroy(p->b);
    (void)blas.cublasLtMatrixLayoutDestroy(p->d);
    memset(p, 0, sizeof *p);
}

template <typename T>
static void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t what, T value) {
    cublasCheck(blas.cublasLtMatmulDescSetAttribute(d, what, &value, sizeof value));
}

template <typename T>
static void set_pref(cublasLtMatmulPreference_t p, cublasLtMatmulPreferenceAttributes_t what, T value) {
    cublasCheck(blas.cublasLtMatmulPreferenceSetAttribute(p, what, &value, sizeof value));
}

// The descriptors of key's product and the heuristic's first kernel for them (plan->usable 0
// where it has none). bias: any pointer with the alignment the plan is keyed by.
static void plan_make(const CudaContext *c, LtPlan *plan, const LtKey *key, const void *bias) {
    plan->key = *key;
    cublasComputeType_t compute = key->tf32 && !key->bf16_in ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cudaDataType_t in = key->bf16_in ? CUDA_R_16BF : CUDA_R_32F, out = key->bf16_out ? CUDA_R_16BF : CUDA_R_32F;
    cublasCheck(blas.cublasLtMatmulDescCreate(&plan->desc, compute, CUDA_R_32F));
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, (cublasOperation_t)key->ta);
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, (cublasOperation_t)key->tb);
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, CUBLASLT_EPILOGUE_BIAS);
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);  // of D's type (the default)
    // Each layout as stored: op(A) is m x k, so A itself is m x k (op N) or k x m (op T).
    int a_rows = key->ta == CUBLAS_OP_N ? key->m : key->k, a_cols = key->ta == CUBLAS_OP_N ? key->k : key->m;
    int b_rows = key->tb == CUBLAS_OP_N ? key->k : key->n, b_cols = key->tb == CUBLAS_OP_N ? key->n : key->k;
    cublasCheck(blas.cublasLtMatrixLayoutCreate(&plan->a, in, a_rows, a_cols, key->lda));
    cublasCheck(blas.cublasLtMatrixLayoutCreate(&plan->b, in, b_rows, b_cols, key->ldb));
    cublasCheck(blas.cublasLtMatrixLayoutCreate(&plan->d, out, key->m, key->n, key->ldd));

    cublasLtMatmulPreference_t pref;
    cublasCheck(blas.cublasLtMatmulPreferenceCreate(&pref));
    set_pref(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, c->cublas_workspace_bytes);
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, (uint32_t)key->align[0]);
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, (uint32_t)key->align[1]);
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, (uint32_t)key->align[2]);  // C is D
    set_pref(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, (uint32_t)key->align[2]);
    cublasLtMatmulHeuristicResult_t found;
    int count = 0;
    cublasStatus_t s = blas.cublasLtMatmulAlgoGetHeuristic(c->lt, plan->desc, plan->a, plan->b, plan->d, plan->d, pref,
                                                      1, &found, &count);
    cublasCheck(blas.cublasLtMatmulPreferenceDestroy(pref));
    if (s != CUBLAS_STATUS_NOT_SUPPORTED) cublasCheck(s);
    plan->usable = s == CUBLAS_STATUS_SUCCESS && count > 0 && found.state == CUBLAS_STATUS_SUCCESS;
    if (plan->usable) plan->algo = found.algo;
    else say_other_way(key);
}

// The context's plan for key: a kept one, or a new one in a free slot or, when all are taken,
// in place of the oldest.
static LtPlan *plan_for(CudaContext *c, const LtKey *key, const void *bias) {
    for (int i = 0; i < c->lt_count; i++)
        if (memcmp(&c->lt_plans[i].key, key, sizeof *key) == 0) return &c->lt_plans[i];
    LtPlan *p;
    if (c->lt_count < LT_PLANS) p = &c->lt_plans[c->lt_count++];
    else {
        p = &c->lt_plans[c->lt_next];
        c->lt_next = (c->lt_next + 1) % LT_PLANS;
        plan_free(p);
    }
    plan_make(c, p, key, bias);
    return p;
}

bool cuda_gemm_bias(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *A, int lda,
                    const void *B, int ldb, void *D, int ldd, const void *bias, int bf16_in, int bf16_out) {
    CudaContext *c = cuda_context();
    if (!c->bias_epilogue || !c->lt || k == 0) return false;  // k = 0: D = bias, the other way's
    const LtKey key = {m, n, k, lda, ldb, ldd, ta, tb, bf16_in, bf16_out, c->tf32,
                       {alignment(A), alignment(B), alignment(D), alignment(bias)}};
    LtPlan *p = plan_for(c, &key, bias);
    if (!p->usable) return false;
    set_desc(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias);
    const float one = 1.0f, zero = 0.0f;  // beta = 0: D's old contents are not read
    cublasStatus_t s = blas.cublasLtMatmul(c->lt, p->desc, &one, A, p->a, B, p->b, &zero, D, p->d, D, p->d, &p->algo,
                                      c->cublas_workspace, c->cublas_workspace_bytes, c->stream);
    if (s == CUBLAS_STATUS_NOT_SUPPORTED) {  // nothing queued: the other way, from now on for this shape
        p->usable = 0;
        say_other_way(&p->key);
        return false;
    }
    cublasCheck(s);
    return true;
}

void cuda_lt_release(CudaContext *c) {
    for (int i = 0; i < c->lt_count; i++) plan_free(&c->lt_plans[i]);
    c->lt_count = c->lt_next = 0;
}
