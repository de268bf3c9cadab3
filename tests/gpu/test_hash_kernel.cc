// test_hash_kernel.cc — the param_hash's chunk kernel (labs/common/cuda/hash.cuh) run on the CPU
// through emulate.h, against hash.c's FNV-1a 64 of the same bytes: the kernel's groups of
// loads kept one ahead of the multiplies, and every way a chunk can end (a whole number of
// groups, words short of a group, bytes short of a word, a chunk shorter than one group), on
// buffers 16-byte aligned (the word path) and not (the byte path), several in one launch.
// tests/gpu/test_cuda_ops.c checks the same against the CPU on a GPU, launches included.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "emulate.h"

extern "C" {
#include "common/harness/hash.h"
#include "common/model/rng.h"
}

#include "common/cuda/hash.cuh"

#include "../test.h"

int main(void) {
    // Sizes: none, a byte, a word less one, a group, a group and a word and a byte, a chunk
    // less one, a chunk, a chunk and one, three chunks and a ragged end.
    const size_t sizes[] = {0, 1, 15, 128, 128 + 16 + 1, 65535, 65536, 65537, 3 * 65536 + 12345};
    const int n = (int)(sizeof sizes / sizeof sizes[0]);
    for (int shift = 0; shift <= 3; shift += 3) {  // 0: 16-byte aligned; 3: a byte at a time
        HashBatch batch = {};
        std::vector<std::vector<unsigned char>> store(n);
        Rng rng;
        rng_seed(&rng, 70 + (uint64_t)shift);
        batch.n = n;
        for (int b = 0; b < n; b++) {
            store[b].resize(sizes[b] + 32);
            for (unsigned char &c : store[b]) c = (unsigned char)rng_u64(&rng);
            uintptr_t at = ((uintptr_t)store[b].data() + 15) / 16 * 16 + (uintptr_t)shift;
            batch.ptr[b] = (const unsigned char *)at;
            batch.bytes[b] = sizes[b];
            batch.first_chunk[b + 1] = batch.first_chunk[b] + param_hash_chunks(sizes[b]);
        }
        const size_t chunks = batch.first_chunk[n];
        std::vector<uint64_t> out(chunks, 0);
        const dim3 grid((unsigned)((chunks + HASH_THREADS - 1) / HASH_THREADS));
        emu_launch(grid, HASH_THREADS, 0, [&] { chunk_hash_kernel(out.data(), batch); });
        for (int b = 0; b < n; b++) {
            size_t wrong = 0, count = param_hash_chunks(sizes[b]);
            for (size_t k = 0; k < count; k++) {
                size_t off = k * PARAM_HASH_CHUNK;
                size_t len = sizes[b] - off < PARAM_HASH_CHUNK ? sizes[b] - off : PARAM_HASH_CHUNK;
                wrong += out[batch.first_chunk[b] + k] != fnv1a64(batch.ptr[b] + off, len, FNV1A64_INIT);
            }
            EXPECT(wrong == 0, "chunk_hash_kernel, emulated: %zu bytes at 16 n + %d, each of its %zu chunks hashed as "
                   "hash.c hashes it (%zu wrong)", sizes[b], shift, count, wrong);
        }
    }
    return test_done();
}
