// test_hash.c — the param_hash (labs/common/harness/hash.c): FNV-1a 64 of 64 KiB chunks, then of the
// chunks' hashes.
//
// What it proves:
//   - fnv1a64 is FNV-1a 64: the published test vectors ("", "a", "foobar");
//   - param_hash_bytes equals the definition in hash.h, computed here independently: the
//     chunks' hashes written out as bytes, least significant first, and that byte string
//     hashed with a plain FNV-1a loop; at 0, 1, 7 bytes, a byte short of a chunk, exactly
//     one, a byte over, and several chunks with a ragged end;
//   - chaining: buffers hashed one after another equal device_param_hash over the list (the
//     CPU device), and a chunk never straddles two buffers (so splitting one buffer in two
//     changes the hash, which is why every lab hashes its layers' buffers);
//   - every byte counts: flipping one bit anywhere in a 3-chunk buffer (first byte, a chunk's
//     last, the last) changes the hash;
//   - gpt_param_hash is the param_hash of the model's layers in layer order.
// The broken variant it catches: a definition that drops the ragged last chunk, or folds the
// chunk hashes big-endian, fails the independent comparison (see expect_definition).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/harness/hash.h"
#include "common/harness/mem.h"
#include "common/model/device.h"
#include "common/model/gpt.h"
#include "common/model/rng.h"
#include "test.h"

// FNV-1a 64, written out again so the test does not lean on the code it tests.
static uint64_t reference_fnv(const unsigned char *p, size_t n, uint64_t h) {
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

// hash.h's definition, step by step: the chunk hashes as a byte string, then hashed.
static uint64_t reference_param_hash(const unsigned char *p, size_t n, uint64_t h) {
    size_t chunks = (n + 65535) / 65536;
    unsigned char *le = malloc(chunks * 8 + 1);
    for (size_t k = 0; k < chunks; k++) {
        size_t len = n - k * 65536 < 65536 ? n - k * 65536 : 65536;
        uint64_t c = reference_fnv(p + k * 65536, len, 0xcbf29ce484222325ull);
        for (int b = 0; b < 8; b++) le[k * 8 + b] = (unsigned char)(c >> (8 * b));
    }
    h = reference_fnv(le, chunks * 8, h);
    free(le);
    return h;
}

static unsigned char *random_bytes(size_t n, uint64_t seed) {
    unsigned char *p = malloc(n ? n : 1);
    Rng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)rng_u64(&r);
    return p;
}

static void test_fnv_vectors(void) {
    EXPECT(fnv1a64("", 0, FNV1A64_INIT) == 0xcbf29ce484222325ull, "FNV-1a 64 of \"\" is the offset basis");
    EXPECT(fnv1a64("a", 1, FNV1A64_INIT) == 0xaf63dc4c8601ec8cull, "FNV-1a 64 of \"a\" is af63dc4c8601ec8c");
    EXPECT(fnv1a64("foobar", 6, FNV1A64_INIT) == 0x85944171f73967e8ull, "FNV-1a 64 of \"foobar\" is 85944171f73967e8");
}

static void expect_definition(void) {
    const size_t sizes[] = {0, 1, 7, 65535, 65536, 65537, 3 * 65536 + 12345};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        unsigned char *p = random_bytes(sizes[i], 100 + i);
        uint64_t got = param_hash_bytes(p, sizes[i], PARAM_HASH_INIT);
        uint64_t want = reference_param_hash(p, sizes[i], 0xcbf29ce484222325ull);
        EXPECT(got == want, "param_hash of %zu bytes (%zu chunks) equals hash.h's definition computed independently "
               "(%016llx vs %016llx)", sizes[i], param_hash_chunks(sizes[i]), (unsigned long long)got,
               (unsigned long long)want);
        free(p);
    }
    EXPECT(param_hash_bytes("x", 0, 12345) == 12345, "0 bytes: no chunks, h unchanged");
}

static void test_chaining(void) {
    size_t na = 70000, nb = 12345;
    unsigned char *a = random_bytes(na, 7), *b = random_bytes(nb, 8);
    uint64_t chained = param_hash_bytes(b, nb, param_hash_bytes(a, na, PARAM_HASH_INIT));
    const void *bufs[3] = {a, "", b};
    size_t bytes[3] = {na, 0, nb};
    uint64_t listed = device_param_hash(&device_cpu, 3, bufs, bytes, PARAM_HASH_INIT);
    EXPECT(listed == chained, "device_param_hash over a list (the CPU device) equals hashing the buffers one after "
           "another; an empty buffer in between changes nothing");
    // The chunk boundaries belong to each buffer: [a][b] is not the hash of a's bytes then b's
    // as one buffer.
    unsigned char *ab = malloc(na + nb);
    memcpy(ab, a, na), memcpy(ab + na, b, nb);
    EXPECT(param_hash_bytes(ab, na + nb, PARAM_HASH_INIT) != chained,
           "chunks never straddle buffers: one buffer a+b hashes differently from buffers a, b");
    free(a), free(b), free(ab);
}

static void test_every_byte_counts(void) {
    size_t n = 3 * 65536;
    unsigned char *p = random_bytes(n, 9);
    uint64_t h0 = param_hash_bytes(p, n, PARAM_HASH_INIT);
    const size_t at[] = {0, 65535, 65536, n - 1};
    int all = 1;
    for (size_t i = 0; i < sizeof at / sizeof at[0]; i++) {
        p[at[i]] ^= 0x10;
        all &= param_hash_bytes(p, n, PARAM_HASH_INIT) != h0;
        p[at[i]] ^= 0x10;
    }
    EXPECT(all, "one bit flipped at a chunk's first or last byte, or the buffer's last, changes the hash");
    free(p);
}

static void test_model_hash(void) {
    GptConfig c = {.vocab = GPT_VOCAB, .seq = 16, .layers = 2, .dim = 32, .heads = 2};
    Mem m;
    mem_init(&m, NULL);
    Gpt g;
    gpt_create(&g, &c, &m, 1234);
    uint64_t h = PARAM_HASH_INIT;
    for (int l = 0; l < g.nlayers; l++) h = param_hash_bytes(g.params[l], gpt_layer_size(&c, l) * sizeof(float), h);
    EXPECT(gpt_param_hash(&g) == h, "gpt_param_hash is the param_hash of the layers' buffers, layer 0 first");
    gpt_destroy(&g);
    mem_destroy(&m);
}

int main(void) {
    test_fnv_vectors();
    expect_definition();
    test_chaining();
    test_every_byte_counts();
    test_model_hash();
    return test_done();
}
