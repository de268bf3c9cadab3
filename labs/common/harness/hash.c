// hash.c — see hash.h.
#include "hash.h"

uint64_t fnv1a64(const void *data, size_t bytes, uint64_t h) {
    const unsigned char *p = data;
    for (size_t i = 0; i < bytes; i++) {
        h ^= p[i];
        h *= FNV1A64_PRIME;
    }
    return h;
}

size_t param_hash_chunks(size_t bytes) { return (bytes + PARAM_HASH_CHUNK - 1) / PARAM_HASH_CHUNK; }

uint64_t param_hash_fold(uint64_t h, const uint64_t *c, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char le[8];  // the chunk hash's bytes, least significant first, on any host
        for (int b = 0; b < 8; b++) le[b] = (unsigned char)(c[i] >> (8 * b));
        h = fnv1a64(le, sizeof le, h);
    }
    return h;
}

uint64_t param_hash_bytes(const void *data, size_t bytes, uint64_t h) {
    const unsigned char *p = data;
    for (size_t at = 0; at < bytes; at += PARAM_HASH_CHUNK) {
        size_t len = bytes - at < PARAM_HASH_CHUNK ? bytes - at : PARAM_HASH_CHUNK;
        uint64_t c = fnv1a64(p + at, len, FNV1A64_INIT);
        h = param_hash_fold(h, &c, 1);
    }
    return h;
}
