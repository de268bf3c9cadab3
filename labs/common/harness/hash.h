// hash.h — hashes of bytes: FNV-1a 64, and the param_hash built from it so that a GPU can
// compute it in parallel.
//
// FNV-1a 64 (Fowler, Noll, Vo) is one multiply per byte, each depending on the one before:
// simple, good enough to tell two arrays of weights apart, and strictly sequential. Over the
// 344 MB of an 86M-parameter model that is ~0.3 s of one core every step, and a GPU cannot
// split it either. So the param_hash cuts the bytes into chunks and hashes the chunks
// independently (one GPU thread each), then hashes the chunks' hashes in order:
//
//     buffer   [ chunk 0: 64 KiB ][ chunk 1: 64 KiB ] ... [ chunk k-1: the rest, 1..64 KiB ]
//                     |                   |                        |
//     c_i = FNV-1a 64 of chunk i, from FNV1A64_INIT
//                     |                   |                        |
//     h = FNV-1a 64 of c_0, c_1, ..., c_(k-1), each as its 8 bytes least significant first,
//         continuing from the h of the buffers before (PARAM_HASH_INIT for the first)
//
// A buffer of 0 bytes has no chunks and leaves h as it was. Chunks never straddle two
// buffers: the param_hash of a model is that of its layers' buffers in layer order (layer 0
// first), which is how every lab holds them (ZeRO's and FSDP's units are the layers), so the
// same weights hash the same in every lab, on the CPU (param_hash_bytes) and on a GPU
// (device_param_hash() in device.h, which hashes the bytes where they are).
#ifndef SHARDLAB_HASH_H
#define SHARDLAB_HASH_H

#include <stddef.h>
#include <stdint.h>

#define FNV1A64_INIT 0xcbf29ce484222325ull
#define FNV1A64_PRIME 0x100000001b3ull
// FNV-1a 64 of bytes, continuing from h (FNV1A64_INIT to start).
uint64_t fnv1a64(const void *data, size_t bytes, uint64_t h);

#define PARAM_HASH_INIT FNV1A64_INIT
#define PARAM_HASH_CHUNK ((size_t)65536)
// The number of chunks of a buffer of `bytes` bytes.
size_t param_hash_chunks(size_t bytes);
// h continued over chunk hashes c[0..n), each as its 8 bytes least significant first.
uint64_t param_hash_fold(uint64_t h, const uint64_t *c, size_t n);
// h continued over one buffer in host memory.
uint64_t param_hash_bytes(const void *data, size_t bytes, uint64_t h);

#endif
