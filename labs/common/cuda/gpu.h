// gpu.h — the CUDA backend's entry points: what device.c, gpt.c (through the Ops table) and
// dist.c call when a rank runs on a GPU.
//
// Two implementations, chosen by the Makefile, never by #ifdef:
//   labs/common/cuda/*.cu   built when nvcc is found: CUDA runtime, cuBLAS, NCCL;
//   labs/common/cuda/nocuda.c    built otherwise: cuda_device_count() is 0 and says why ("this build
//                         has no CUDA backend"), and nothing else may be called.
//
// One rank process drives one GPU, so the CUDA files keep one context per process: the
// device, the COMPUTE stream every kernel and cuBLAS call runs on, the cuBLAS handle, and the
// TF32 setting. Communication runs on its own stream (one per communicator); events order it
// after the compute stream's work on the same buffers.
//
// Memory: every pointer given to the ops and to cuda_nccl_call() is device memory from
// cuda_alloc(), except the token arrays (uint8_t *tokens / *targets), which stay in host
// memory: the kernels that read them copy them up themselves (B*T bytes).
#ifndef SHARDLAB_CUDA_H
#define SHARDLAB_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "common/model/ops.h"

// ---- the device -------------------------------------------------------------------------

// GPUs this process can use; 0 with the reason in why ("no CUDA driver", "this build has no
// CUDA backend", ...).
int cuda_device_count(char *why, size_t nwhy);
// Load cuBLAS and cuBLASLt, which the programs do not link (blas.cu says why): cuda_open does
// it first. It needs no GPU, so a test can prove the libraries and every function are found.
// Returns 0, or -1 with the reason in err.
int cuda_load_blas(char *err, size_t nerr);
// Make GPU `ordinal` this process's device: stream, cuBLAS handle (TF32 tensor-core math only
// when tf32 is set, so products match the CPU's fp32 by default). desc gets one line such as
// "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)". Returns 0, or -1 with the reason in err.
int cuda_open(int ordinal, int tf32, char *desc, size_t ndesc, char *err, size_t nerr);
void cuda_close(void);
// TF32 on or off for the open context from now on (cuBLAS's products and the flash attention
// kernels), as cuda_open's tf32 would have set it: for tests that compare both in one process.
void cuda_set_tf32(int tf32);
// fp32 flash attention (neither --tf32 nor --mixed) as three TF32 products on the tensor
// cores where the GPU and the head size allow (on: cuda_open's default), or off: the fp32
// kernels on the ordinary cores. For tests and benchmarks that compare the two.
void cuda_set_fp32_tc(int on);
// The Linear forward's bias added by cuBLASLt's epilogue as the product is stored (on:
// cuda_open's default, where cuBLASLt has a kernel for the shape), or off: written across the
// output first, the product added to it (beta = 1). For tests and benchmarks that compare the two.
void cuda_set_bias_epilogue(int on);

// Zero-filled device memory; NULL if the GPU is out of memory.
void *cuda_alloc(size_t bytes);
void cuda_free(void *p);
void cuda_memset0(void *p, size_t bytes);
// Any direction (host or device on either side); returns when dst holds the bytes, so a host
// buffer can be used at once. Device-to-device copies are ordered on the compute stream.
void cuda_copy(void *dst, const void *src, size_t bytes);
// Wait for everything queued on the compute stream (timing, before reading a result).
void cuda_sync(void);
// The compute stream (a cudaStream_t), for nccl.cu's events.
void *cuda_compute_stream(void);
// The device's own figure: free and total bytes (cudaMemGetInfo). Returns 0, or -1.
int cuda_mem_info(size_t *free_bytes, size_t *total_bytes);
// 1 if p is device memory (cudaPointerGetAttributes), else 0.
int cuda_is_device_ptr(const void *p);

// The param_hash (hash.h) of n device buffers, in order, continuing from h: every chunk
// hashed by its own GPU thread, all buffers in one launch; the host folds the chunks' hashes.
uint64_t cuda_param_hash(int n, const void *const *bufs, const size_t *bytes, uint64_t h);

// An event recorded on the compute stream, from a ring of CUDA_MARKS; returns its slot.
#define CUDA_MARKS 4096
int cuda_mark(void);
// cudaProfilerStart (on) or cudaProfilerStop, once the queued work is done (device_profile).
void cuda_profile(int on);
// The wall-clock microseconds at which the GPU reached the marks in slots[0..n): an anchor
// event recorded after them is waited for and read against the host's clock, and each mark
// is placed before it by cudaEventElapsedTime.
void cuda_mark_times(const int *slots, int n, int64_t *us);

// The kernels of ops.h on the GPU: cuBLAS for the matrix products, CUDA kernels for the rest.
const Ops *cuda_ops(void);

// Ring attention's kernels (ring.cu; labs/18-cp/ring_attention.h has the CPU's, the same
// arguments and meaning, and the math): one block of K/V against a rank's queries, forward and
// backward; the k | v columns packed out of qkv and the dK | dV unpacked into dqkv; D = do . o
// per token and head; x[0..n) = v. Positions (qpos, kpos) are device arrays; the scratch
// arguments are the CPU's (ignored here).
void cuda_ring_block_forward(float *out, float *lse, const float *qkv, const int *qpos, int Tq, const float *kv,
                             const int *kpos, int Tk, int B, int C, int NH, int bf16_in, float *scores);
void cuda_ring_block_backward(float *dqkv, float *dkv, const float *dout, const float *D, const float *lse,
                              const float *qkv, const int *qpos, int Tq, const float *kv, const int *kpos, int Tk,
                              int B, int C, int NH, int bf16_in, float *scratch);
void cuda_ring_kv_pack(float *kv, const float *qkv, int B, int T, int C);
void cuda_ring_kv_unpack(float *dqkv, const float *dkv, int B, int T, int C);
void cuda_ring_do_dot_o(float *D, const float *dout, const float *out, int B, int T, int C, int NH);
void cuda_ring_fill(float *x, size_t n, float v);

// ---- NCCL: the "nccl" backend of dist.h -------------------------------------------------

typedef struct CudaComm CudaComm;  // a communicator with its stream and events
#define CUDA_NCCL_ID_BYTES 128     // NCCL_UNIQUE_ID_BYTES

// "2.28.9", or "none".
const char *cuda_nccl_version(void);
// ncclGetUniqueId: with NCCL_COMM_ID=host:port in the environment every rank gets the same id
// (rank 0 runs the bootstrap there), which is how ranks on many nodes find each other.
int cuda_nccl_unique_id(unsigned char id[CUDA_NCCL_ID_BYTES], char *err, size_t nerr);
// Non-blocking ncclCommInitRankConfig, polled with ncclCommGetAsyncError until ready; after
// timeout_s it aborts the communicator and fails. NULL with the reason in err.
CudaComm *cuda_nccl_init(const unsigned char id[CUDA_NCCL_ID_BYTES], int nranks, int rank, double timeout_s,
                         char *err, size_t nerr);
// ncclCommSplit: ranks with the same color form a communicator, ordered by key.
CudaComm *cuda_nccl_split(CudaComm *parent, int color, int key, double timeout_s, char *err, size_t nerr);
void cuda_nccl_destroy(CudaComm *c);
void cuda_nccl_abort(CudaComm *c);

typedef enum {
    CUDA_NCCL_ALL_REDUCE,      // in[n] -> out[n], sum
    CUDA_NCCL_REDUCE_SCATTER,  // in[n] -> out[n / size], sum (n divisible by size)
    CUDA_NCCL_ALL_GATHER,      // in[n / size] -> out[n]
    CUDA_NCCL_BROADCAST,       // out[n] from rank peer (in place: in == out)
    CUDA_NCCL_REDUCE,          // in[n] -> out[n] on rank peer, sum
    CUDA_NCCL_SEND,            // in[n] to peer
    CUDA_NCCL_RECV,            // out[n] from peer
} CudaNcclOp;

// The element type of a call: fp32, or bf16 (ncclBfloat16: NCCL rounds the sum to bf16,
// nearest even, at every step of its ring, as the shm backend does; see bf16.h).
typedef enum { CUDA_NCCL_F32, CUDA_NCCL_BF16 } CudaNcclType;

// Queue one call on the communicator's stream, after the compute stream's work so far (an
// event). n counts elements of the given type. Returns 0, or -1 with the reason in err.
int cuda_nccl_call(CudaComm *c, CudaNcclOp op, CudaNcclType type, const void *in, void *out, size_t n, int peer,
                   char *err, size_t nerr);
// Grouped calls (ncclGroupStart/End): sends and receives between pipeline neighbours that
// must not wait for each other.
int cuda_nccl_group_start(char *err, size_t nerr);
int cuda_nccl_group_end(char *err, size_t nerr);
// Wait until every queued call of c has finished, polling the stream's event and
// ncclCommGetAsyncError. After timeout_s, or on an NCCL error, abort the communicator and
// return -1 with the reason in err ("timed out after 120 s" / NCCL's message). Then the
// compute stream waits for the communication (so later kernels see the results).
int cuda_nccl_wait(CudaComm *c, double timeout_s, char *err, size_t nerr);

#endif
