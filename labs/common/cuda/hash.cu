// hash.cu — the param_hash (hash.h) of device buffers, computed on the GPU.
//
// Defines (gpu.h): cuda_param_hash().
//
// The definition is hash.h's: FNV-1a 64 of each 64 KiB chunk, then FNV-1a 64 of the chunks'
// hashes in order. One thread hashes one chunk (hash.cuh: the kernel, and how it keeps its
// loads ahead of its multiplies), reading it 16 bytes at a time where the chunk is 16-byte
// aligned (every buffer cudaMalloc returns is) and a byte at a time otherwise. The chunks of
// all buffers go in one launch (a few thousand threads for 86M parameters, each a 64 Ki-step
// chain of multiplies), so one buffer's chunks never wait for another's. Only the chunks'
// hashes (8 bytes per 64 KiB) are copied to the host, which folds them in order with
// param_hash_fold(), the CPU's own code.
#include <string.h>

#include "context.cuh"

extern "C" {
#include "common/harness/hash.h"
#include "gpu.h"
}

#include "hash.cuh"

// Room for `chunks` hashes on the device and in pinned host memory, grown (rarely: the first
// call, or a bigger model) but never shrunk, so a step's hash allocates nothing.
static void hash_room(CudaContext *c, size_t chunks) {
    if (chunks <= c->hash_capacity) return;
    cudaCheck(cudaStreamSynchronize(c->stream));
    if (c->hash_dev) cudaCheck(cudaFree(c->hash_dev));
    if (c->hash_host) cudaCheck(cudaFreeHost(c->hash_host));
    cudaCheck(cudaMalloc(&c->hash_dev, chunks * sizeof(uint64_t)));
    cudaCheck(cudaMallocHost(&c->hash_host, chunks * sizeof(uint64_t)));
    c->hash_capacity = chunks;
}

uint64_t cuda_param_hash(int n, const void *const *bufs, const size_t *bytes, uint64_t h) {
    CudaContext *c = cuda_context();
    size_t total = 0;
    for (int i = 0; i < n; i++) total += param_hash_chunks(bytes[i]);
    if (total == 0) return h;
    hash_room(c, total);
    // Queued on the compute stream, after the kernels that wrote the buffers.
    size_t done = 0;
    for (int first = 0; first < n; first += HASH_BATCH) {
        HashBatch batch;
        memset(&batch, 0, sizeof batch);
        batch.n = n - first < HASH_BATCH ? n - first : HASH_BATCH;
        for (int i = 0; i < batch.n; i++) {
            batch.ptr[i] = (const unsigned char *)bufs[first + i];
            batch.bytes[i] = bytes[first + i];
            batch.first_chunk[i + 1] = batch.first_chunk[i] + param_hash_chunks(bytes[first + i]);
        }
        size_t chunks = batch.first_chunk[batch.n];
        if (chunks == 0) continue;
        unsigned blocks = (unsigned)((chunks + HASH_THREADS - 1) / HASH_THREADS);
        chunk_hash_kernel<<<blocks, HASH_THREADS, 0, c->stream>>>(c->hash_dev + done, batch);
        cudaCheck(cudaGetLastError());
        done += chunks;
    }
    cudaCheck(cudaMemcpyAsync(c->hash_host, c->hash_dev, total * sizeof(uint64_t), cudaMemcpyDeviceToHost, c->stream));
    cudaCheck(cudaStreamSynchronize(c->stream));
    return param_hash_fold(h, c->hash_host, total);
}
