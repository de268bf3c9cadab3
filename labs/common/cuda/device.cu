// device.cu — the device half of gpu.h: finding and opening the GPU, its memory, its
// compute stream; and the per-process context (context.cuh) that ops.cu's kernels use.
//
// Defines (gpu.h): cuda_device_count(), cuda_open(), cuda_close(), cuda_set_tf32(), cuda_set_fp32_tc(),
//                   cuda_set_bias_epilogue(), cuda_profile(),
//                   cuda_alloc(), cuda_free(), cuda_memset0(), cuda_copy(), cuda_sync(), cuda_compute_stream(),
//                   cuda_mem_info(), cuda_is_device_ptr().
//          (context.cuh): cuda_context(), cuda_stage_tokens(), cuda_workspace(),
//                         cuda_use_workspace().
//
// Why one stream: every op of a training step runs on the compute stream in the order the
// model code calls it, so the GPU sees the same sequence the CPU backend executes and no op
// needs an explicit wait. The host waits only where it reads a result (a loss, a norm, a copy
// into host memory). Communication (nccl.cu) has its own streams and orders itself against
// this one with events.
//
// Why cuBLAS gets its own workspace: cuBLAS promises the same bits on every run of the same
// call on the same GPU model, but when several streams are active it may pick kernels by the
// workspace it finds; handing it a fixed, private workspace removes that choice (cuBLAS
// documentation, "Results reproducibility"). Replicas are compared by hashing parameters.
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>

#include <cuda_profiler_api.h>

#include "context.cuh"

extern "C" {
#include "gpu.h"
}

// cuBLAS's recommended workspace for Hopper (4 MiB suffices for older GPUs).
static const size_t CUBLAS_WORKSPACE_BYTES = (size_t)32 << 20;
// The context's own kernel workspace, for work outside a pass: sum_of_squares' partials are 8
// bytes per 8192 floats, so 1 MiB covers a layer of a billion parameters.
static const size_t OWN_WORKSPACE_BYTES = (size_t)1 << 20;

static CudaContext ctx;

// ---------------------------------------------------------------------------------------
// Finding and opening the GPU
// ---------------------------------------------------------------------------------------

int cuda_device_count(char *why, size_t nwhy) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        // No driver, no GPU, a driver older than this runtime: an answer, not a crash.
        // (cudart reports a machine with no driver at all as "insufficient driver".)
        int driver = 0;
        int none = err == cudaErrorNoDevice ||
                   (err == cudaErrorInsufficientDriver && cudaDriverGetVersion(&driver) == cudaSuccess && driver == 0);
        // Said in our words: cudart calls a machine with no driver "CUDA driver version is
        // insufficient for CUDA runtime version", which sends a laptop's owner to update a
        // driver they do not have.
        int runtime = 0;
        cudaRuntimeGetVersion(&runtime);
        if (why && nwhy) {
            if (none) snprintf(why, nwhy, "no NVIDIA GPU or driver on this machine");
            else if (err == cudaErrorInsufficientDriver)
                snprintf(why, nwhy, "the NVIDIA driver supports CUDA %d.%d, older than this build's CUDA %d.%d: update the driver",
                         driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
            else snprintf(why, nwhy, "the CUDA driver cannot be used (cudaGetDeviceCount: %s)", cudaGetErrorString(err));
        }
        (void)cudaGetLastError();  // leave no error behind for the next call to report
        return 0;
    }
    if (n == 0 && why && nwhy) snprintf(why, nwhy, "no CUDA device found");
    return n;
}

static void keep_first(cudaError_t *first, cudaError_t err) {
    if (*first == cudaSuccess) *first = err;
}

// Free whatever exists (so it also undoes a half-finished cuda_open) and empty the context.
// Returns the first error met; freeing goes on past it.
static cudaError_t context_release(void) {
    cudaError_t first = cudaSuccess;
    keep_first(&first, cudaSetDevice(ctx.ordinal));
    if (ctx.stream) keep_first(&first, cudaStreamSynchronize(ctx.stream));
    if (ctx.cublas && blas.cublasDestroy(ctx.cublas) != CUBLAS_STATUS_SUCCESS) keep_first(&first, cudaErrorUnknown);
    cuda_lt_release(&ctx);
    if (ctx.lt && blas.cublasLtDestroy(ctx.lt) != CUBLAS_STATUS_SUCCESS) keep_first(&first, cudaErrorUnknown);
    if (ctx.cublas_workspace) keep_first(&first, cudaFree(ctx.cublas_workspace));
    if (ctx.workspace) keep_first(&first, cudaFree(ctx.workspace));
    if (ctx.hash_dev) keep_first(&first, cudaFree(ctx.hash_dev));
    if (ctx.hash_host) keep_first(&first, cudaFreeHost(ctx.hash_host));
    if (ctx.sum_host) keep_first(&first, cudaFreeHost(ctx.sum_host));
    if (ctx.tokens_dev) keep_first(&first, cudaFree(ctx.tokens_dev));
    if (ctx.tokens_host) keep_first(&first, cudaFreeHost(ctx.tokens_host));
    if (ctx.tokens_copied) keep_first(&first, cudaEventDestroy(ctx.tokens_copied));
    for (int i = 0; i < CUDA_MARKS; i++)
        if (ctx.marks[i]) keep_first(&first, cudaEventDestroy(ctx.marks[i]));
    if (ctx.anchor) keep_first(&first, cudaEventDestroy(ctx.anchor));
    if (ctx.stream) keep_first(&first, cudaStreamDestroy(ctx.stream));
    memset(&ctx, 0, sizeof ctx);
    return first;
}

// Record the reason for a failed cuda_open, undo what was made, return -1.
static int open_failed(char *err, size_t nerr, const char *what, const char *reason) {
    if (err && nerr) snprintf(err, nerr, "%s: %s", what, reason);
    (void)context_release();  // the reason above is the one worth reporting
    (void)cudaGetLastError();
    return -1;
}

int cuda_open(int ordinal, int tf32, char *desc, size_t ndesc, char *err, size_t nerr) {
    if (ctx.open) {
        if (err && nerr) snprintf(err, nerr, "cuda_open: GPU %d is already open in this process", ctx.ordinal);
        return -1;
    }
    memset(&ctx, 0, sizeof ctx);
    ctx.ordinal = ordinal;
    ctx.tf32 = tf32;
    ctx.fp32_tc = 1;
    ctx.bias_epilogue = 1;
    ctx.open = 1;

    cudaError_t e;
    if ((e = cudaSetDevice(ordinal)) != cudaSuccess)
        return open_failed(err, nerr, "cudaSetDevice", cudaGetErrorString(e));
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, ordinal)) != cudaSuccess)
        return open_failed(err, nerr, "cudaGetDeviceProperties", cudaGetErrorString(e));
    // Non-blocking: the legacy default stream (which other libraries may use) never makes it wait.
    if ((e = cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking)) != cudaSuccess)
        return open_failed(err, nerr, "cudaStreamCreate", cudaGetErrorString(e));
    if ((e = cudaEventCreateWithFlags(&ctx.tokens_copied, cudaEventDisableTiming)) != cudaSuccess)
        return open_failed(err, nerr, "cudaEventCreate", cudaGetErrorString(e));
    if ((e = cudaMalloc(&ctx.cublas_workspace, CUBLAS_WORKSPACE_BYTES)) != cudaSuccess)
        return open_failed(err, nerr, "cudaMalloc (cuBLAS workspace)", cudaGetErrorString(e));
    ctx.cublas_workspace_bytes = CUBLAS_WORKSPACE_BYTES;
    if ((e = cudaMalloc(&ctx.workspace, OWN_WORKSPACE_BYTES)) != cudaSuccess)
        return open_failed(err, nerr, "cudaMalloc (kernel workspace)", cudaGetErrorString(e));
    ctx.workspace_bytes = OWN_WORKSPACE_BYTES;

    char why[512];
    if (cuda_load_blas(why, sizeof why) != 0) return open_failed(err, nerr, "cuBLAS", why);
    cublasStatus_t s;
    if ((s = blas.cublasCreate(&ctx.cublas)) != CUBLAS_STATUS_SUCCESS)
        return open_failed(err, nerr, "cublasCreate", blas.cublasGetStatusString(s));
    if ((s = blas.cublasSetStream(ctx.cublas, ctx.stream)) != CUBLAS_STATUS_SUCCESS)
        return open_failed(err, nerr, "cublasSetStream", blas.cublasGetStatusString(s));
    // After cublasSetStream, which resets the workspace to cuBLAS's own pool.
    if ((s = blas.cublasSetWorkspace(ctx.cublas, ctx.cublas_workspace, CUBLAS_WORKSPACE_BYTES)) != CUBLAS_STATUS_SUCCESS)
        return open_failed(err, nerr, "cublasSetWorkspace", blas.cublasGetStatusString(s));
    // Default math is true fp32, so products match the CPU's to rounding; TF32 tensor cores
    // are faster but keep only 10 bits of each input's mantissa.
    cublasMath_t math = tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
    if ((s = blas.cublasSetMathMode(ctx.cublas, math)) != CUBLAS_STATUS_SUCCESS)
        return open_failed(err, nerr, "cublasSetMathMode", blas.cublasGetStatusString(s));
    // cuBLASLt's handle (lt.cu: the Linear's bias epilogue); its kernels get the workspace above.
    if ((s = blas.cublasLtCreate(&ctx.lt)) != CUBLAS_STATUS_SUCCESS)
        return open_failed(err, nerr, "cublasLtCreate", blas.cublasGetStatusString(s));

    if (desc && ndesc)
        snprintf(desc, ndesc, "%s (sm_%d%d, %.1f GiB)", prop.name, prop.major, prop.minor,
                 (double)prop.totalGlobalMem / (double)(1 << 30));
    return 0;
}

void cuda_close(void) {
    if (ctx.open) cudaCheck(context_release());
}

void cuda_set_tf32(int tf32) {
    CudaContext *c = cuda_context();
    c->tf32 = tf32;
    cublasCheck(blas.cublasSetMathMode(c->cublas, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}

void cuda_set_fp32_tc(int on) { cuda_context()->fp32_tc = on; }

void cuda_set_bias_epilogue(int on) { cuda_context()->bias_epilogue = on; }

void cuda_profile(int on) {
    CudaContext *c = cuda_context();
    cudaCheck(cudaStreamSynchronize(c->stream));
    cudaCheck(on ? cudaProfilerStart() : cudaProfilerStop());
}

// ---------------------------------------------------------------------------------------
// The context, for ops.cu
// ---------------------------------------------------------------------------------------

CudaContext *cuda_context(void) {
    if (!ctx.open)
        die("call cuda_open() before any other cuda_ function (a bug in shardlab)",
            "a CUDA function was called with no GPU open");
    // The current device belongs to the host thread; a thread other than the one that ran
    // cuda_open (a communication thread, say) would otherwise start on device 0.
    int current;
    cudaCheck(cudaGetDevice(&current));
    if (current != ctx.ordinal) cudaCheck(cudaSetDevice(ctx.ordinal));
    return &ctx;
}

const uint8_t *cuda_stage_tokens(const uint8_t *tokens, size_t n) {
    CudaContext *c = cuda_context();
    // The previous upload must have read the pinned buffer before we overwrite it. It was
    // queued one op ago or earlier, so this wait is almost always already over.
    cudaCheck(cudaEventSynchronize(c->tokens_copied));
    if (n > c->tokens_capacity) {
        cudaCheck(cudaStreamSynchronize(c->stream));  // no queued kernel still reads tokens_dev
        if (c->tokens_dev) cudaCheck(cudaFree(c->tokens_dev));
        if (c->tokens_host) cudaCheck(cudaFreeHost(c->tokens_host));
        cudaCheck(cudaMalloc(&c->tokens_dev, n));
        cudaCheck(cudaMallocHost(&c->tokens_host, n));
        c->tokens_capacity = n;
    }
    memcpy(c->tokens_host, tokens, n);
    // Queued behind the kernels that read the previous tokens, so they still see theirs.
    cudaCheck(cudaMemcpyAsync(c->tokens_dev, c->tokens_host, n, cudaMemcpyHostToDevice, c->stream));
    cudaCheck(cudaEventRecord(c->tokens_copied, c->stream));
    return c->tokens_dev;
}

void *cuda_workspace(size_t bytes) {
    CudaContext *c = cuda_context();
    if (c->planned && bytes <= c->planned_bytes) return c->planned;
    if (bytes > c->workspace_bytes) {
        if (!c->workspace_grown)
            fprintf(stderr, "%s: note: a CUDA kernel asked for %zu bytes of workspace, more than the %zu planned "
                    "for this pass: it is allocated outside the counted memory (cuda_workspace)\n", check_context(),
                    bytes, c->planned_bytes);
        c->workspace_grown = 1;
        cudaCheck(cudaStreamSynchronize(c->stream));  // no queued kernel still uses the old one
        if (c->workspace) cudaCheck(cudaFree(c->workspace));
        c->workspace = NULL;
        cudaCheck(cudaMalloc(&c->workspace, bytes));
        c->workspace_bytes = bytes;
    }
    return c->workspace;
}

void cuda_use_workspace(void *p, size_t bytes) {
    CudaContext *c = cuda_context();
    c->planned = p;
    c->planned_bytes = p ? bytes : 0;
}

// ---------------------------------------------------------------------------------------
// Marks: timing spans on the GPU's clock without waiting for it
// ---------------------------------------------------------------------------------------

int cuda_mark(void) {
    CudaContext *c = cuda_context();
    int slot = c->next_mark;
    c->next_mark = (slot + 1) % CUDA_MARKS;
    if (!c->marks[slot]) cudaCheck(cudaEventCreate(&c->marks[slot]));  // timing on: the default flags
    cudaCheck(cudaEventRecord(c->marks[slot], c->stream));
    return slot;
}

static int64_t wall_us(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (int64_t)tv.tv_sec * 1000000 + tv.tv_usec;
}

// The anchor is queued after every mark being read, so each elapsed time is positive; the
// host reads its clock as soon as the GPU reaches the anchor, which is then "now" on both.
void cuda_mark_times(const int *slots, int n, int64_t *us) {
    CudaContext *c = cuda_context();
    if (n <= 0) return;
    if (!c->anchor) cudaCheck(cudaEventCreate(&c->anchor));
    cudaCheck(cudaEventRecord(c->anchor, c->stream));
    cudaCheck(cudaEventSynchronize(c->anchor));
    int64_t now = wall_us();
    for (int i = 0; i < n; i++) {
        float ms = 0;
        cudaCheck(cudaEventElapsedTime(&ms, c->marks[slots[i]], c->anchor));
        us[i] = now - (int64_t)llround((double)ms * 1000.0);
    }
}

// ---------------------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------------------

void *cuda_alloc(size_t bytes) {
    CudaContext *c = cuda_context();
    // A zero-byte request still gets a distinct pointer, as from malloc.
    if (bytes == 0) bytes = 1;
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();  // out of memory is the caller's to report, not sticky
        return NULL;
    }
    cudaCheck(err);
    // On the compute stream: every later use of p is ordered after the zeros (nccl.cu's
    // streams wait for the compute stream through events before touching a buffer).
    cudaCheck(cudaMemsetAsync(p, 0, bytes, c->stream));
    return p;
}

void cuda_free(void *p) {
    if (!p) return;
    cuda_context();
    // cudaFree waits for the device, so no queued kernel still uses p.
    cudaCheck(cudaFree(p));
}

void cuda_memset0(void *p, size_t bytes) {
    CudaContext *c = cuda_context();
    if (bytes) cudaCheck(cudaMemsetAsync(p, 0, bytes, c->stream));
}

void cuda_copy(void *dst, const void *src, size_t bytes) {
    CudaContext *c = cuda_context();
    if (bytes == 0) return;
    // cudaMemcpyDefault: unified addressing tells the driver which side each pointer is on.
    cudaCheck(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, c->stream));
    // A host buffer on either side is used by the caller as soon as we return.
    if (!cuda_is_device_ptr(dst) || !cuda_is_device_ptr(src)) cudaCheck(cudaStreamSynchronize(c->stream));
}

void cuda_sync(void) { cudaCheck(cudaStreamSynchronize(cuda_context()->stream)); }

void *cuda_compute_stream(void) { return (void *)cuda_context()->stream; }

int cuda_mem_info(size_t *free_bytes, size_t *total_bytes) {
    cuda_context();
    if (cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    return 0;
}

int cuda_is_device_ptr(const void *p) {
    cudaPointerAttributes attr;
    if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
        (void)cudaGetLastError();  // not a pointer CUDA knows: host memory
        return 0;
    }
    return attr.type == cudaMemoryTypeDevice;
}
