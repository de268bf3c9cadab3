// hash.cuh — the param_hash's chunk kernel (hash.h's definition): one thread hashes one 64 KiB
// chunk with FNV-1a 64. hash.cu launches it; tests/gpu/test_hash_kernel.cc runs the very same
// kernel on the CPU through emulate.h and holds it to hash.c's chunk hashes.
//
// Before including it: hash.h, and for the emulation emulate.h.
//
// WHERE THE TIME GOES. A chunk is 65,536 dependent steps (xor a byte, multiply by the prime),
// a few cycles each: about 0.2 ms, and nothing splits it. What must not add to it is memory:
// each thread reads its own chunk, 64 KiB away from its neighbours', so every load goes to
// memory, a microsecond away. Loaded one 16-byte word at a time, each load would wait for the
// one before (4,096 waits a chunk, more than the arithmetic). So the words come in groups of
// HASH_GROUP, and the next group's loads are issued before this group's bytes are folded in:
//
//     load group 0
//     for each group g:   load group g+1   |   fold group g's 128 bytes (512 multiplies)
//
// and a load's wait hides behind the multiplies of the group before. Bytes are fed in address
// order, each 4-byte word least significant byte first: on the GPU (little-endian), the order
// they lie in memory.
#ifndef SHARDLAB_HASH_CUH
#define SHARDLAB_HASH_CUH

#include <stddef.h>
#include <stdint.h>

// Buffers per launch: their pointers and sizes travel as the kernel's argument (1.6 KB of
// the 4 KB a kernel argument may hold). More buffers take more launches.
enum { HASH_BATCH = 64, HASH_THREADS = 64 };
// 16-byte words a thread has in flight: 8 (128 bytes, 32 registers) per group.
enum { HASH_GROUP = 8 };

typedef struct {
    const unsigned char *ptr[HASH_BATCH];
    size_t bytes[HASH_BATCH];
    size_t first_chunk[HASH_BATCH + 1];  // buffer i's chunks are first_chunk[i] .. first_chunk[i+1]-1
    int n;
} HashBatch;

__device__ static inline uint64_t fnv1a64_word(uint64_t h, uint32_t w) {
#pragma unroll
    for (int b = 0; b < 4; b++) {
        h ^= (w >> (8 * b)) & 0xffu;
        h *= FNV1A64_PRIME;
    }
    return h;
}

// 16 bytes, word by word in address order.
__device__ static inline uint64_t fnv1a64_quad(uint64_t h, uint4 q) {
    return fnv1a64_word(fnv1a64_word(fnv1a64_word(fnv1a64_word(h, q.x), q.y), q.z), q.w);
}

__device__ static inline uint64_t fnv1a64_words(uint64_t h, const uint4 (&q)[HASH_GROUP]) {
#pragma unroll
    for (int j = 0; j < HASH_GROUP; j++) h = fnv1a64_quad(h, q[j]);
    return h;
}

// out[k] = FNV-1a 64 of the batch's chunk k (chunks numbered across its buffers in order).
__global__ static void chunk_hash_kernel(uint64_t *out, HashBatch batch) {
    size_t k = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= batch.first_chunk[batch.n]) return;
    int b = 0;
    while (k >= batch.first_chunk[b + 1]) b++;  // at most HASH_BATCH steps
    size_t offset = (k - batch.first_chunk[b]) * PARAM_HASH_CHUNK;
    size_t len = batch.bytes[b] - offset < PARAM_HASH_CHUNK ? batch.bytes[b] - offset : PARAM_HASH_CHUNK;
    const unsigned char *p = batch.ptr[b] + offset;
    uint64_t h = FNV1A64_INIT;
    size_t i = 0;
    if ((uintptr_t)p % 16 == 0) {
        const uint4 *v = (const uint4 *)p;
        const size_t groups = len / (16 * HASH_GROUP);
        uint4 cur[HASH_GROUP], next[HASH_GROUP];
        if (groups > 0)
#pragma unroll
            for (int j = 0; j < HASH_GROUP; j++) cur[j] = v[j];
        for (size_t g = 0; g < groups; g++) {
            if (g + 1 < groups)  // the next group's loads first: they wait while this one folds
#pragma unroll
                for (int j = 0; j < HASH_GROUP; j++) next[j] = v[(g + 1) * HASH_GROUP + j];
            h = fnv1a64_words(h, cur);
#pragma unroll
            for (int j = 0; j < HASH_GROUP; j++) cur[j] = next[j];
        }
        i = groups * 16 * HASH_GROUP;
        for (; i + 16 <= len; i += 16) h = fnv1a64_quad(h, v[i / 16]);  // the last words, short of a group
    }
    for (; i < len; i++) {  // the tail, or all of an unaligned chunk
        h ^= p[i];
        h *= FNV1A64_PRIME;
    }
    out[k] = h;
}

#endif
