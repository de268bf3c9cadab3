// test_data.c — the data module: the Markov source's exact numbers, the corpora, the sampler.
//
// The synthetic corpus promises a student "no model can beat loss_floor on average". These
// tests check the numbers behind that promise two ways: by algebra (rows sum to 1, pi is a
// fixed point, hand-built sources with known answers) and by brute force (count what a long
// generated sequence actually does, and compare with the exact values).
//
// Build and run (one line):
//   gcc -std=c11 -D_GNU_SOURCE -Wall -Wextra -O1 -g -fsanitize=address,undefined
//       -fno-omit-frame-pointer -Ilabs -o /tmp/test_data tests/test_data.c
//       labs/common/harness/data.c labs/common/harness/check.c -lm && /tmp/test_data
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/harness/data.h"
#include "test.h"

// Brute-force estimates from 3M symbols, with the Miller-Madow correction (see below).
// Their error is sampling noise: surprisal has a variance of about 1-2 nats^2, so the mean
// over 3M fast-mixing symbols wanders by about 0.0005 nats. Over 24 (order, alphabet, seed)
// sources the corrected estimate was never further than 0.0012 from the exact rate, so
// 0.004 nats is a wide margin, yet tight enough that plausible bugs fail it: weighting the
// contexts uniformly instead of by pi moves the rate by 0.012 (K=3 A=8 seed 1) and 0.052
// (K=1 A=32 seed 3); shifting the context the wrong way moves it by 0.01 to 0.07.
#define BRUTE_FORCE_SYMBOLS 3000000
#define BRUTE_FORCE_TOL 0.004

// ------------------------------------------------------------------------------------------
// Helpers

// The symbol index of every byte of a synthetic corpus (-1: not a symbol of the source).
static int *corpus_symbol_indices(const Corpus *c, const MarkovSource *m) {
    int index_of[256];
    for (int b = 0; b < 256; b++) index_of[b] = -1;
    for (int a = 0; a < m->alphabet; a++) index_of[m->symbols[a]] = a;
    int *seq = malloc(c->n * sizeof(int));
    for (size_t i = 0; i < c->n; i++) seq[i] = index_of[c->bytes[i]];
    return seq;
}

// Estimate of H(next symbol | previous L symbols) from the counts of a sequence. The plug-in
// value, -sum over (context, next) of freq * log(count / count of context), is biased low by
// about (cells seen - contexts seen) / (2 N) (Miller-Madow), up to 0.0007 nats here; adding
// that back leaves only sampling noise.
static double empirical_conditional_entropy(const int *seq, size_t n, int A, int L) {
    size_t contexts = 1;
    for (int k = 0; k < L; k++) contexts *= (size_t)A;
    size_t *count = calloc(contexts * (size_t)A, sizeof(size_t));
    size_t *context_count = calloc(contexts, sizeof(size_t));
    size_t ctx = 0;
    for (int k = 0; k < L; k++) ctx = ctx * (size_t)A + (size_t)seq[k];
    for (size_t i = (size_t)L; i < n; i++) {
        count[ctx * (size_t)A + (size_t)seq[i]]++;
        context_count[ctx]++;
        ctx = (ctx % (contexts / (size_t)A)) * (size_t)A + (size_t)seq[i];
    }
    double h = 0.0, total = (double)(n - (size_t)L);
    size_t cells_seen = 0, contexts_seen = 0;
    for (size_t c = 0; c < contexts; c++) {
        if (context_count[c] > 0) contexts_seen++;
        for (size_t a = 0; a < (size_t)A; a++) {
            double k = (double)count[c * (size_t)A + a];
            if (k > 0) {
                cells_seen++;
                h -= k / total * log(k / (double)context_count[c]);
            }
        }
    }
    free(count);
    free(context_count);
    return h + (double)(cells_seen - contexts_seen) / (2.0 * total);
}

static void write_file(const char *path, const uint8_t *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(bytes, 1, n, f) != n || fclose(f) != 0) {
        printf("not ok - could not write test file %s\n", path);
        exit(1);
    }
}

// ------------------------------------------------------------------------------------------
// The source: rows, stationary distribution

static void test_source_structure(uint64_t seed, int K, int A) {
    MarkovSource m;
    markov_init(&m, seed, K, A);
    size_t C = (size_t)m.contexts;

    size_t expect_contexts = 1;
    for (int k = 0; k < K; k++) expect_contexts *= (size_t)A;
    EXPECT(m.order == K && m.alphabet == A && C == expect_contexts,
           "K=%d A=%d: order, alphabet and contexts = A^K are recorded", K, A);

    // The symbols are A distinct printable bytes, so a corpus is readable text.
    int distinct_printable = 1;
    for (int a = 0; a < A; a++) {
        if (m.symbols[a] < 0x20 || m.symbols[a] > 0x7e) distinct_printable = 0;
        for (int b = 0; b < a; b++)
            if (m.symbols[a] == m.symbols[b]) distinct_printable = 0;
    }
    EXPECT(distinct_printable, "K=%d A=%d: symbols are distinct printable bytes", K, A);

    // Every row is a probability distribution, with every symbol possible (irreducible).
    double worst_row = 0.0, smallest = 1.0;
    for (size_t c = 0; c < C; c++) {
        double sum = 0.0;
        for (int a = 0; a < A; a++) {
            double p = m.trans[c * (size_t)A + (size_t)a];
            sum += p;
            if (p < smallest) smallest = p;
        }
        if (fabs(sum - 1.0) > worst_row) worst_row = fabs(sum - 1.0);
    }
    EXPECT(worst_row <= 1e-12, "K=%d A=%d: every transition row sums to 1 (worst |sum-1| %.2g)",
           K, A, worst_row);
    EXPECT(smallest > 0.0, "K=%d A=%d: every next symbol has positive probability (min %.3g)", K,
           A, smallest);

    // pi is a distribution and a fixed point of one step: context c emitting a moves to
    // (c mod A^(K-1)) * A + a, the numbering data.h documents.
    double sum = 0.0;
    for (size_t c = 0; c < C; c++) sum += m.stationary[c];
    EXPECT_NEAR(sum, 1.0, 1e-12, "stationary distribution sums to 1");
    double *stepped = calloc(C, sizeof(double));
    for (size_t c = 0; c < C; c++)
        for (int a = 0; a < A; a++)
            stepped[(c % (C / (size_t)A)) * (size_t)A + (size_t)a] +=
                m.stationary[c] * m.trans[c * (size_t)A + (size_t)a];
    double worst = 0.0;
    for (size_t c = 0; c < C; c++)
        if (fabs(stepped[c] - m.stationary[c]) > worst) worst = fabs(stepped[c] - m.stationary[c]);
    EXPECT(worst <= 1e-12, "K=%d A=%d: stationary is a fixed point, pi P = pi (max |diff| %.2g)",
           K, A, worst);
    free(stepped);

    // Structure to learn: the rate sits clearly between 0 and the uniform log(A).
    double rate = markov_entropy_rate(&m);
    EXPECT(rate > 0.5 && rate < log(A) - 0.5,
           "K=%d A=%d: entropy rate %.4f is well below log(A) = %.4f", K, A, rate, log(A));
    markov_free(&m);
}

static void test_source_is_seeded(void) {
    MarkovSource a, b, c;
    markov_init(&a, 1, 2, 16);
    markov_init(&b, 1, 2, 16);
    markov_init(&c, 2, 2, 16);
    size_t bytes = (size_t)a.contexts * 16 * sizeof(double);
    EXPECT(memcmp(a.trans, b.trans, bytes) == 0 &&
               memcmp(a.stationary, b.stationary, (size_t)a.contexts * sizeof(double)) == 0,
           "same seed gives bit-identical transitions and stationary distribution");
    EXPECT(memcmp(a.trans, c.trans, bytes) != 0, "a different seed gives different transitions");
    markov_free(&a);
    markov_free(&b);
    markov_free(&c);
}

// ------------------------------------------------------------------------------------------
// Hand-built sources whose answers are known in closed form

static void test_hand_built_sources(void) {
    // Uniform transitions, order 1: every symbol is a fair draw, H = log(A) exactly.
    double trans8[8 * 8], pi8[8];
    uint8_t sym8[8] = {'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h'};
    for (int i = 0; i < 64; i++) trans8[i] = 1.0 / 8;
    for (int i = 0; i < 8; i++) pi8[i] = 1.0 / 8;
    MarkovSource u1 = {.order = 1, .alphabet = 8, .symbols = sym8, .contexts = 8,
                       .trans = trans8, .stationary = pi8};
    EXPECT_NEAR(markov_entropy_rate(&u1), log(8.0), 1e-12, "uniform order-1 source: H = log(8)");
    EXPECT_NEAR(markov_loss_floor(&u1, 64), log(8.0), 1e-12,
                "uniform order-1 source: floor = log(8)");

    // Uniform, order 2: the first prediction has one symbol of context, but it is still a
    // fair draw, so the floor is log(A) too; a wrong prefix entropy would show here.
    double trans4[16 * 4], pi4[16];
    uint8_t sym4[4] = {'a', 'b', 'c', 'd'};
    for (int i = 0; i < 64; i++) trans4[i] = 0.25;
    for (int i = 0; i < 16; i++) pi4[i] = 1.0 / 16;
    MarkovSource u2 = {.order = 2, .alphabet = 4, .symbols = sym4, .contexts = 16,
                       .trans = trans4, .stationary = pi4};
    EXPECT_NEAR(markov_entropy_rate(&u2), log(4.0), 1e-12, "uniform order-2 source: H = log(4)");
    EXPECT_NEAR(markov_loss_floor(&u2, 5), log(4.0), 1e-12,
                "uniform order-2 source: floor = log(4)");

    // Two states, P = [[0.9, 0.1], [0.5, 0.5]]: pi = (5/6, 1/6), so
    // H = 5/6 * h(0.1) + 1/6 * log 2. Proves rows are weighted by pi, not averaged.
    double trans2[4] = {0.9, 0.1, 0.5, 0.5}, pi2[2] = {5.0 / 6, 1.0 / 6};
    uint8_t sym2[2] = {'a', 'b'};
    MarkovSource two = {.order = 1, .alphabet = 2, .symbols = sym2, .contexts = 2,
                        .trans = trans2, .stationary = pi2};
    double h01 = -0.9 * log(0.9) - 0.1 * log(0.1);
    EXPECT_NEAR(markov_entropy_rate(&two), 5.0 / 6 * h01 + 1.0 / 6 * log(2.0), 1e-12,
                "two-state source: H = sum pi(ctx) H(row) with pi = (5/6, 1/6)");
}

// ------------------------------------------------------------------------------------------
// Brute force: the exact numbers against counts from a long generated sequence

static void test_against_counts(uint64_t seed, int K, int A) {
    const int T = 64;
    MarkovSource m;
    markov_init(&m, seed, K, A);
    Corpus c;
    corpus_synthetic(&c, seed, BRUTE_FORCE_SYMBOLS, K, A, T);
    int *seq = corpus_symbol_indices(&c, &m);
    int all_symbols = 1;
    for (size_t i = 0; i < c.n; i++)
        if (seq[i] < 0) all_symbols = 0;
    if (!EXPECT(all_symbols, "K=%d A=%d seed=%llu: every corpus byte is a symbol of the source",
                K, A, (unsigned long long)seed)) {
        free(seq);  // the counts below would index with -1
        corpus_free(&c);
        markov_free(&m);
        return;
    }

    double rate = markov_entropy_rate(&m);
    EXPECT(c.entropy_rate == rate && c.loss_floor == markov_loss_floor(&m, T),
           "the corpus reports the source's exact entropy rate and floor");
    char what[160];
    snprintf(what, sizeof what,
             "K=%d A=%d seed=%llu: exact entropy rate = H(next | last %d) counted in %d symbols",
             K, A, (unsigned long long)seed, K, BRUTE_FORCE_SYMBOLS);
    EXPECT_NEAR(empirical_conditional_entropy(seq, c.n, A, K), rate, BRUTE_FORCE_TOL, what);

    // The short positions of a window. floor(T) * T = (costs of positions 0..K-2) +
    // (T - K + 1) * H, so floor(1) is the cost of position 0 alone, and
    // 2 floor(2) - floor(1) that of position 1. Each is H(next | the j symbols before),
    // which the counts estimate at every offset because the corpus is stationary.
    double cost_before = 0.0;
    for (int t = 0; t + 1 < K; t++) {
        double cost = (t + 1) * markov_loss_floor(&m, t + 1) - cost_before;
        cost_before += cost;
        snprintf(what, sizeof what,
                 "K=%d A=%d: position %d pays H(next | %d symbol(s) before), as counted",
                 K, A, t, t + 1);
        EXPECT_NEAR(empirical_conditional_entropy(seq, c.n, A, t + 1), cost, BRUTE_FORCE_TOL, what);
        EXPECT(cost > rate + 0.1, "K=%d A=%d: position %d (%.4f) pays more than the rate (%.4f)",
               K, A, t, cost, rate);
    }
    free(seq);
    corpus_free(&c);
    markov_free(&m);
}

static void test_loss_floor(void) {
    // Order 1: every position has at least one symbol of context, so nothing is short and
    // the floor is the entropy rate exactly, for every T.
    MarkovSource m1;
    markov_init(&m1, 1, 1, 32);
    double rate1 = markov_entropy_rate(&m1);
    EXPECT(markov_loss_floor(&m1, 64) == rate1 && markov_loss_floor(&m1, 1) == rate1 &&
               markov_loss_floor(&m1, 7) == rate1,
           "order 1: loss_floor == entropy rate exactly (%.6f) for T = 1, 7, 64", rate1);
    markov_free(&m1);

    // Order 2: one short position, so floor(T) = H + (H(X_1|X_0) - H) / T.
    MarkovSource m2;
    markov_init(&m2, 1, 2, 16);
    double rate2 = markov_entropy_rate(&m2), first = markov_loss_floor(&m2, 1);
    EXPECT_NEAR(markov_loss_floor(&m2, 64), rate2 + (first - rate2) / 64, 1e-12,
                "order 2: floor(64) = H + (H(X1|X0) - H) / 64");
    EXPECT(markov_loss_floor(&m2, 64) > rate2 &&
               markov_loss_floor(&m2, 64) < markov_loss_floor(&m2, 8),
           "order 2: the floor is above the rate and falls as T grows");
    EXPECT(markov_loss_floor(&m2, 1000000) - rate2 < 1e-5, "order 2: floor -> rate for long T");
    markov_free(&m2);
}

// ------------------------------------------------------------------------------------------
// The corpus

static void test_corpus_is_seeded(void) {
    Corpus a, b, c;
    corpus_synthetic(&a, 1, 20000, 2, 16, 64);
    corpus_synthetic(&b, 1, 20000, 2, 16, 64);
    corpus_synthetic(&c, 2, 20000, 2, 16, 64);
    EXPECT(a.n == 20000 && a.synthetic == 1 && strcmp(a.source, "synthetic") == 0,
           "a synthetic corpus has the asked length and says it is synthetic");
    EXPECT(memcmp(a.bytes, b.bytes, a.n) == 0 && a.entropy_rate == b.entropy_rate,
           "same seed gives the identical corpus");
    EXPECT(memcmp(a.bytes, c.bytes, a.n) != 0 && a.entropy_rate != c.entropy_rate,
           "a different seed gives a different corpus and source");
    corpus_free(&a);
    corpus_free(&b);
    corpus_free(&c);
}

// ------------------------------------------------------------------------------------------
// The sampler

static void test_batch_sequence(void) {
    // A corpus whose byte i is i: a window's first byte is its offset.
    // The buffer runs on past n, so a window that overruns the corpus is seen, not a crash.
    enum { N = 40, T = 8 };
    uint8_t bytes[N + T + 1], out[T + 1];
    for (int i = 0; i < N + T + 1; i++) bytes[i] = (uint8_t)i;
    Corpus c = {.bytes = bytes, .n = N};
    int contiguous = 1, lo = N, hi = -1;
    for (int step = 0; step < 100; step++)
        for (int i = 0; i < 20; i++) {
            batch_sequence(&c, 7, step, i, T, out);
            for (int j = 0; j <= T; j++)
                if (out[j] != out[0] + j) contiguous = 0;
            if (out[0] < lo) lo = out[0];
            if (out[0] > hi) hi = out[0];
        }
    EXPECT(contiguous && hi + T < N, "every window is T+1 consecutive corpus bytes, in range");
    EXPECT(lo == 0 && hi == N - T - 1,
           "offsets reach both ends, 0 and n-T-1 = %d (seen %d..%d)", N - T - 1, lo, hi);

    Corpus exact = {.bytes = bytes, .n = T + 1};
    batch_sequence(&exact, 3, 5, 2, T, out);
    EXPECT(memcmp(out, bytes, T + 1) == 0, "a corpus of exactly T+1 bytes gives the whole corpus");

    // Only (seed, step, index) matter: the global batch computed forwards equals it computed
    // backwards, and rank r of 4 taking indices 2r, 2r+1 of a batch of 8 gets the same bytes
    // as the single rank.
    Corpus s;
    corpus_synthetic(&s, 1, 5000, 2, 16, 64);
    uint8_t forward[8][65], backward[8][65], ranks[8][65], other_seed[8][65];
    for (int i = 0; i < 8; i++) batch_sequence(&s, 42, 3, i, 64, forward[i]);
    for (int i = 7; i >= 0; i--) batch_sequence(&s, 42, 3, i, 64, backward[i]);
    for (int r = 0; r < 4; r++)
        for (int i = 2 * r; i < 2 * r + 2; i++) batch_sequence(&s, 42, 3, i, 64, ranks[i]);
    for (int i = 0; i < 8; i++) batch_sequence(&s, 43, 3, i, 64, other_seed[i]);
    EXPECT(memcmp(forward, backward, sizeof forward) == 0 &&
               memcmp(forward, ranks, sizeof forward) == 0,
           "a sequence depends only on (seed, step, index): order and rank split do not matter");
    EXPECT(memcmp(forward, other_seed, sizeof forward) != 0,
           "a different seed gives a different batch");
    int found = 1, distinct = 0;
    for (int i = 0; i < 8; i++) {
        if (!memmem(s.bytes, s.n, forward[i], 65)) found = 0;
        if (i > 0 && memcmp(forward[i], forward[0], 65) != 0) distinct = 1;
    }
    EXPECT(found && distinct, "each synthetic window occurs in the corpus, and they differ");
    uint8_t next_step[65];
    batch_sequence(&s, 42, 4, 0, 64, next_step);
    EXPECT(memcmp(forward[0], next_step, 65) != 0, "the next step draws a different sequence 0");
    corpus_free(&s);
}

// ------------------------------------------------------------------------------------------
// Files

static void test_corpus_from_file(void) {
    char dir[] = "/tmp/test_data_XXXXXX";
    if (!mkdtemp(dir)) {
        printf("not ok - could not make a temporary directory\n");
        exit(1);
    }
    char path[256], err[1024], expect[1024];
    Corpus c;

    // Any bytes at all, zeros and 0xff included; bigger than the 64 KiB first read.
    size_t n = 200000;
    uint8_t *data = malloc(n);
    for (size_t i = 0; i < n; i++) data[i] = (uint8_t)(i * 7 + i / 300);
    snprintf(path, sizeof path, "%s/good.bin", dir);
    write_file(path, data, n);
    int rc = corpus_from_file(&c, path, 65, err, sizeof err);
    EXPECT(rc == 0 && c.n == n && memcmp(c.bytes, data, n) == 0,
           "a 200000-byte file is read whole, byte for byte");
    EXPECT(c.synthetic == 0 && c.entropy_rate == 0 && c.loss_floor == 0 &&
               strcmp(c.source, path) == 0,
           "a file corpus is not synthetic, has no floor, and names its path");
    corpus_free(&c);

    write_file(path, data, 65);
    rc = corpus_from_file(&c, path, 65, err, sizeof err);
    EXPECT(rc == 0 && c.n == 65, "a file of exactly min_len bytes is enough");
    corpus_free(&c);

    write_file(path, data, 10);
    rc = corpus_from_file(&c, path, 65, err, sizeof err);
    snprintf(expect, sizeof expect, "'%s' has 10 bytes; need at least 65 (seq + 1)", path);
    EXPECT(rc == -1 && strcmp(err, expect) == 0 && c.bytes == NULL,
           "a too-short file fails with sizes in the message: %s", err);

    write_file(path, data, 0);
    rc = corpus_from_file(&c, path, 1, err, sizeof err);
    EXPECT(rc == -1 && strstr(err, "is empty") && strstr(err, path), "an empty file fails: %s",
           err);

    snprintf(path, sizeof path, "%s/missing.bin", dir);
    rc = corpus_from_file(&c, path, 65, err, sizeof err);
    EXPECT(rc == -1 && strstr(err, "cannot open") && strstr(err, path) &&
               strstr(err, "No such file or directory"),
           "a missing file fails, naming the path and the reason: %s", err);
    corpus_free(&c);  // safe on a failed load

    rc = corpus_from_file(&c, dir, 65, err, sizeof err);
    EXPECT(rc == -1 && strstr(err, "read error") && strstr(err, "Is a directory"),
           "a directory opens but fails to read: %s", err);

    snprintf(path, sizeof path, "%s/good.bin", dir);
    remove(path);
    rmdir(dir);
    free(data);
}

int main(void) {
    test_source_structure(1, 2, 16);
    test_source_structure(1, 1, 32);
    test_source_structure(7, 3, 8);
    test_source_structure(5, 4, 8);
    test_source_is_seeded();
    test_hand_built_sources();
    test_against_counts(1, 2, 16);
    test_against_counts(1, 3, 8);
    test_against_counts(3, 1, 32);
    test_loss_floor();
    test_corpus_is_seeded();
    test_batch_sequence();
    test_corpus_from_file();
    return test_done();
}
