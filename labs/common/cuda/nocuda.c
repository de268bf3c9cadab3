// nocuda.c — the CUDA backend of a build without nvcc: gpu.h's entry points, saying so.
//
// The Makefile links this file instead of labs/common/cuda/*.cu when nvcc was not found (or
// CUDA=0). cuda_device_count() answers 0 with the reason, so --device auto picks the CPU and
// --device cuda is refused with that reason; device.c and dist.c never call the rest, which
// stops the program with a message if they ever did.
#include "gpu.h"

#include <stdio.h>

#include "common/harness/check.h"

static const char *const WHY = "this build of shardlab has no CUDA backend: nvcc was not found when it was built";

static void unreachable(const char *fn) {
    die("install the CUDA toolkit (CUDA_HOME) and rebuild", "%s called, but %s", fn, WHY);
}

int cuda_device_count(char *why, size_t nwhy) {
    snprintf(why, nwhy, "%s", WHY);
    return 0;
}
int cuda_open(int ordinal, int tf32, char *desc, size_t ndesc, char *err, size_t nerr) {
    (void)ordinal, (void)tf32, (void)desc, (void)ndesc;
    snprintf(err, nerr, "%s", WHY);
    return -1;
}
int cuda_load_blas(char *err, size_t nerr) {
    snprintf(err, nerr, "%s", WHY);
    return -1;
}
void cuda_close(void) {}
void cuda_set_tf32(int tf32) { (void)tf32; unreachable("cuda_set_tf32"); }
void cuda_set_fp32_tc(int on) { (void)on; unreachable("cuda_set_fp32_tc"); }
void cuda_set_bias_epilogue(int on) { (void)on; unreachable("cuda_set_bias_epilogue"); }
void cuda_profile(int on) { (void)on; unreachable("cuda_profile"); }
void *cuda_alloc(size_t bytes) { (void)bytes; unreachable("cuda_alloc"); return NULL; }
void cuda_free(void *p) { (void)p; unreachable("cuda_free"); }
void cuda_memset0(void *p, size_t bytes) { (void)p, (void)bytes; unreachable("cuda_memset0"); }
void cuda_copy(void *dst, const void *src, size_t bytes) { (void)dst, (void)src, (void)bytes; unreachable("cuda_copy"); }
void cuda_sync(void) {}
void *cuda_compute_stream(void) { return NULL; }
int cuda_mem_info(size_t *free_bytes, size_t *total_bytes) { (void)free_bytes, (void)total_bytes; return -1; }
int cuda_is_device_ptr(const void *p) { (void)p; return 0; }
uint64_t cuda_param_hash(int n, const void *const *bufs, const size_t *bytes, uint64_t h) {
    (void)n, (void)bufs, (void)bytes, (void)h;
    unreachable("cuda_param_hash");
    return 0;
}
int cuda_mark(void) { unreachable("cuda_mark"); return -1; }
void cuda_mark_times(const int *slots, int n, int64_t *us) { (void)slots, (void)n, (void)us; unreachable("cuda_mark_times"); }
const Ops *cuda_ops(void) { unreachable("cuda_ops"); return NULL; }

void cuda_ring_block_forward(float *out, float *lse, const float *qkv, const int *qpos, int Tq, const float *kv,
                             const int *kpos, int Tk, int B, int C, int NH, int bf16_in, float *scores) {
    (void)out, (void)lse, (void)qkv, (void)qpos, (void)Tq, (void)kv, (void)kpos, (void)Tk, (void)B, (void)C, (void)NH,
        (void)bf16_in, (void)scores;
    unreachable("cuda_ring_block_forward");
}
void cuda_ring_block_backward(float *dqkv, float *dkv, const float *dout, const float *D, const float *lse,
                              const float *qkv, const int *qpos, int Tq, const float *kv, const int *kpos, int Tk,
                              int B, int C, int NH, int bf16_in, float *scratch) {
    (void)dqkv, (void)dkv, (void)dout, (void)D, (void)lse, (void)qkv, (void)qpos, (void)Tq, (void)kv, (void)kpos,
        (void)Tk, (void)B, (void)C, (void)NH, (void)bf16_in, (void)scratch;
    unreachable("cuda_ring_block_backward");
}
void cuda_ring_kv_pack(float *kv, const float *qkv, int B, int T, int C) {
    (void)kv, (void)qkv, (void)B, (void)T, (void)C;
    unreachable("cuda_ring_kv_pack");
}
void cuda_ring_kv_unpack(float *dqkv, const float *dkv, int B, int T, int C) {
    (void)dqkv, (void)dkv, (void)B, (void)T, (void)C;
    unreachable("cuda_ring_kv_unpack");
}
void cuda_ring_do_dot_o(float *D, const float *dout, const float *out, int B, int T, int C, int NH) {
    (void)D, (void)dout, (void)out, (void)B, (void)T, (void)C, (void)NH;
    unreachable("cuda_ring_do_dot_o");
}
void cuda_ring_fill(float *x, size_t n, float v) { (void)x, (void)n, (void)v; unreachable("cuda_ring_fill"); }

const char *cuda_nccl_version(void) { return "none"; }
int cuda_nccl_unique_id(unsigned char id[CUDA_NCCL_ID_BYTES], char *err, size_t nerr) {
    (void)id;
    snprintf(err, nerr, "%s", WHY);
    return -1;
}
CudaComm *cuda_nccl_init(const unsigned char id[CUDA_NCCL_ID_BYTES], int nranks, int rank, double timeout_s,
                         char *err, size_t nerr) {
    (void)id, (void)nranks, (void)rank, (void)timeout_s;
    snprintf(err, nerr, "%s", WHY);
    return NULL;
}
CudaComm *cuda_nccl_split(CudaComm *parent, int color, int key, double timeout_s, char *err, size_t nerr) {
    (void)parent, (void)color, (void)key, (void)timeout_s;
    snprintf(err, nerr, "%s", WHY);
    return NULL;
}
void cuda_nccl_destroy(CudaComm *c) { (void)c; }
void cuda_nccl_abort(CudaComm *c) { (void)c; }
int cuda_nccl_call(CudaComm *c, CudaNcclOp op, CudaNcclType type, const void *in, void *out, size_t n, int peer,
                   char *err, size_t nerr) {
    (void)c, (void)op, (void)type, (void)in, (void)out, (void)n, (void)peer;
    snprintf(err, nerr, "%s", WHY);
    return -1;
}
int cuda_nccl_group_start(char *err, size_t nerr) { snprintf(err, nerr, "%s", WHY); return -1; }
int cuda_nccl_group_end(char *err, size_t nerr) { snprintf(err, nerr, "%s", WHY); return -1; }
int cuda_nccl_wait(CudaComm *c, double timeout_s, char *err, size_t nerr) {
    (void)c, (void)timeout_s;
    snprintf(err, nerr, "%s", WHY);
    return -1;
}
