// data.c — see data.h.
//
// Three parts, in the order a run uses them:
//   1. the Markov source: seeded transitions, stationary distribution, exact entropies;
//   2. corpora: generated from the source, or read from a file;
//   3. the batch sampler: sequence i of step s starts at hash(seed, s, i).
//
// How a context is numbered. A context is the last K symbols, read as a K-digit number in
// base A with the OLDEST symbol as the most significant digit:
//
//     symbols   ... x_{t-2} x_{t-1} x_t      (K = 3)
//     context   x_{t-2}*A^2 + x_{t-1}*A + x_t
//
// Emitting symbol a drops the oldest digit and appends a on the right:
//     next context = (context mod A^(K-1)) * A + a
// and the first j symbols of a context (the oldest ones) are context / A^(K-j). Both facts
// are used below: the first to move probability along, the second to take marginals.
#include "data.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "common/model/rng.h"

// ------------------------------------------------------------------------------------------
// 1. The Markov source

// The bytes symbols are written as: lowercase first, so a small alphabet reads as text.
static const char SYMBOL_BYTES[] =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .";  // 64 symbols

// Every row gives this much probability mass, spread evenly, to every symbol. It keeps the
// chain irreducible and aperiodic (so the stationary distribution exists, is unique, and
// power iteration reaches it), and it means no byte is ever impossible.
#define MARKOV_FLOOR_MASS 0.02
// The rest of a row goes to 3..6 favourite successors with Dirichlet(1) weights. A row's
// entropy is then about 0.1 (floor or not) + 0.98 * (0.8..1.5) + 0.02 * log(A): roughly
// 1.1 to 1.5 nats, well under log(A) = 2.77 (A = 16) or 3.47 (A = 32).
#define MARKOV_FAVOURITES_MIN 3
#define MARKOV_FAVOURITES_MAX 6
// Transition table size limit (entries = A^(K+1)): 4M doubles = 32 MiB, and power iteration
// over it still takes seconds, not minutes.
#define MARKOV_MAX_ENTRIES ((size_t)1 << 22)
// Power iteration stops when no entry moves by more than this, or gives up after the cap.
#define STATIONARY_TOLERANCE 1e-15
#define STATIONARY_MAX_ITERATIONS 100000

// The streams a seed drives, kept apart so that changing one use never shifts another.
#define STREAM_TRANSITIONS 0x7472616E73ull  // "trans"
#define STREAM_GENERATION 0x67656E6572ull   // "gener"

// -sum p log p over n probabilities, in nats (0 log 0 = 0).
static double entropy_nats(const double *p, size_t n) {
    double h = 0.0;
    for (size_t i = 0; i < n; i++)
        if (p[i] > 0.0) h -= p[i] * log(p[i]);
    return h;
}

// One row P(. | context): floor mass everywhere, the rest on a few favourites.
static void fill_row(double *row, int A, Rng *rng) {
    for (int a = 0; a < A; a++) row[a] = MARKOV_FLOOR_MASS / A;

    int span = MARKOV_FAVOURITES_MAX - MARKOV_FAVOURITES_MIN + 1;
    int k = MARKOV_FAVOURITES_MIN + (int)(rng_u64(rng) % (uint64_t)span);
    if (k > A) k = A;

    // Choose k distinct favourites by a partial Fisher-Yates shuffle; weight each by an
    // exponential draw (k of them, normalised, is a Dirichlet(1, ..., 1) sample): skewed,
    // usually one or two clear winners.
    int perm[64];
    double weight[64], weight_sum = 0.0;
    for (int a = 0; a < A; a++) perm[a] = a;
    for (int j = 0; j < k; j++) {
        int pick = j + (int)(rng_u64(rng) % (uint64_t)(A - j));
        int tmp = perm[j];
        perm[j] = perm[pick];
        perm[pick] = tmp;
        weight[j] = -log(1.0 - rng_uniform(rng));  // 1 - u is in (0, 1]: log is finite
        weight_sum += weight[j];
    }
    if (weight_sum <= 0.0) weight_sum = 1.0;  // all weights 0 (astronomically unlikely)
    for (int j = 0; j < k; j++) row[perm[j]] += (1.0 - MARKOV_FLOOR_MASS) * weight[j] / weight_sum;

    // Normalise from the actual sum so the row sums to 1 up to one rounding.
    double sum = 0.0;
    for (int a = 0; a < A; a++) sum += row[a];
    for (int a = 0; a < A; a++) row[a] /= sum;
}

// The stationary distribution over contexts, by power iteration: start uniform, apply
//     pi'(next(ctx, a)) += pi(ctx) * P(a | ctx)
// until nothing moves. Every row puts mass on every symbol, so after K steps any context
// can reach any other, and the iteration converges to the unique fixed point.
static void compute_stationary(MarkovSource *m) {
    size_t C = (size_t)m->contexts, A = (size_t)m->alphabet;
    size_t keep = C / A;  // A^(K-1): how many contexts the kept K-1 digits can name
    double *pi = m->stationary;
    double *next = malloc_check(C * sizeof(double));
    for (size_t c = 0; c < C; c++) pi[c] = 1.0 / (double)C;

    double change = INFINITY;
    for (int iter = 0; iter < STATIONARY_MAX_ITERATIONS && change >= STATIONARY_TOLERANCE; iter++) {
        memset(next, 0, C * sizeof(double));
        for (size_t c = 0; c < C; c++) {
            const double *row = m->trans + c * A;
            double *dst = next + (c % keep) * A;
            for (size_t a = 0; a < A; a++) dst[a] += pi[c] * row[a];
        }
        // Renormalise so rounding never lets the total drift away from 1.
        double total = 0.0;
        for (size_t c = 0; c < C; c++) total += next[c];
        change = 0.0;
        for (size_t c = 0; c < C; c++) {
            next[c] /= total;
            double d = fabs(next[c] - pi[c]);
            if (d > change) change = d;
            pi[c] = next[c];
        }
    }
    free(next);
    // Rounding can keep the last digit moving; anything above 1e-12 would mean a real bug.
    if (change > 1e-12)
        die("this is a bug in data.c: please report the order, alphabet and seed",
            "stationary distribution did not converge (order %d, alphabet %d): last change %.3g",
            m->order, m->alphabet, change);
}

void markov_init(MarkovSource *m, uint64_t seed, int order, int alphabet) {
    if (order < 1 || order > 4)
        die("use an order from 1 to 4", "Markov order %d is out of range", order);
    if (alphabet < 2 || alphabet > 64)
        die("use an alphabet of 2 to 64 symbols", "Markov alphabet %d is out of range", alphabet);
    size_t contexts = 1;
    for (int k = 0; k < order; k++) contexts *= (size_t)alphabet;
    size_t entries = contexts * (size_t)alphabet;
    if (entries > MARKOV_MAX_ENTRIES)
        die("use a lower order or a smaller alphabet",
            "order %d with alphabet %d needs %zu transition probabilities (limit %zu)", order,
            alphabet, entries, MARKOV_MAX_ENTRIES);

    m->order = order;
    m->alphabet = alphabet;
    m->contexts = (int)contexts;
    m->symbols = malloc_check((size_t)alphabet);
    memcpy(m->symbols, SYMBOL_BYTES, (size_t)alphabet);
    m->trans = malloc_check(entries * sizeof(double));
    m->stationary = malloc_check(contexts * sizeof(double));

    Rng rng;
    rng_seed(&rng, rng_hash(seed, STREAM_TRANSITIONS, 0));
    for (size_t c = 0; c < contexts; c++) fill_row(m->trans + c * (size_t)alphabet, alphabet, &rng);
    compute_stationary(m);
}

void markov_free(MarkovSource *m) {
    free(m->symbols);
    free(m->trans);
    free(m->stationary);
    memset(m, 0, sizeof *m);
}

double markov_entropy_rate(const MarkovSource *m) {
    double h = 0.0;
    for (int c = 0; c < m->contexts; c++)
        h += m->stationary[c] * entropy_nats(m->trans + (size_t)c * (size_t)m->alphabet,
                                             (size_t)m->alphabet);
    return h;
}

// H(X_0 .. X_{j-1}) for a window starting at a stationary point, 1 <= j <= K: the entropy
// of the marginal of pi over the oldest j digits of the context.
static double prefix_entropy(const MarkovSource *m, int j) {
    size_t drop = 1;  // A^(K-j)
    for (int k = j; k < m->order; k++) drop *= (size_t)m->alphabet;
    size_t n = (size_t)m->contexts / drop;
    double *marginal = calloc_check(n, sizeof(double));
    for (size_t c = 0; c < (size_t)m->contexts; c++) marginal[c / drop] += m->stationary[c];
    double h = entropy_nats(marginal, n);
    free(marginal);
    return h;
}

// Position t predicts x_{t+1} from x_0..x_t, which is t+1 symbols of context:
//   t + 1 >= K : the context is complete, the cost is the entropy rate H;
//   t + 1 <  K : the cost is H(X_{t+1} | X_0..X_t) = H(X_0..X_{t+1}) - H(X_0..X_t) >= H.
// The floor is the mean over t = 0..T-1. It is written as H + (extra cost of the short
// positions) / T, so that for K = 1 (no short positions) it is exactly H, bit for bit.
double markov_loss_floor(const MarkovSource *m, int T) {
    if (T < 1) die("use a sequence length of at least 1", "loss floor for T = %d", T);
    double rate = markov_entropy_rate(m);
    double extra = 0.0;
    double h_prev = prefix_entropy(m, 1);  // H(X_0)
    for (int t = 0; t < T && t + 1 < m->order; t++) {
        double h_next = prefix_entropy(m, t + 2);  // H(X_0..X_{t+1})
        extra += (h_next - h_prev) - rate;
        h_prev = h_next;
    }
    return rate + extra / T;
}

// ------------------------------------------------------------------------------------------
// 2. Corpora

// Index of the entry that u in [0, 1) falls into, walking the cumulative sum of p.
static size_t sample_index(const double *p, size_t n, double u) {
    double cumulative = 0.0;
    for (size_t i = 0; i < n; i++) {
        cumulative += p[i];
        if (u < cumulative) return i;
    }
    return n - 1;  // u beyond the rounded total: the last entry (every entry is > 0)
}

void corpus_synthetic(Corpus *c, uint64_t seed, size_t n, int order, int alphabet, int T) {
    MarkovSource m;
    markov_init(&m, seed, order, alphabet);
    memset(c, 0, sizeof *c);
    c->bytes = malloc_check(n);
    c->n = n;
    c->synthetic = 1;
    c->entropy_rate = markov_entropy_rate(&m);
    c->loss_floor = markov_loss_floor(&m, T);
    snprintf(c->source, sizeof c->source, "synthetic");

    size_t A = (size_t)alphabet, keep = (size_t)m.contexts / A;
    Rng rng;
    rng_seed(&rng, rng_hash(seed, STREAM_GENERATION, 0));

    // The first K bytes are a context drawn from pi, written oldest symbol first; from
    // there every window of the corpus starts at a stationary point, as the floor assumes.
    size_t ctx = sample_index(m.stationary, (size_t)m.contexts, rng_uniform(&rng));
    size_t place = (size_t)m.contexts;
    for (int k = 0; k < order; k++) {
        place /= A;
        if ((size_t)k < n) c->bytes[k] = m.symbols[(ctx / place) % A];
    }
    for (size_t i = (size_t)order; i < n; i++) {
        size_t a = sample_index(m.trans + ctx * A, A, rng_uniform(&rng));
        c->bytes[i] = m.symbols[a];
        ctx = (ctx % keep) * A + a;
    }
    markov_free(&m);
}

int corpus_from_file(Corpus *c, const char *path, size_t min_len, char *err, size_t errlen) {
    memset(c, 0, sizeof *c);
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
        return -1;
    }

    // Read in growing chunks rather than trusting a size from fseek: works for pipes too.
    size_t cap = (size_t)1 << 16, n = 0;
    uint8_t *buf = malloc_check(cap);
    for (;;) {
        if (n == cap) {
            uint8_t *grown = realloc(buf, cap * 2);
            if (!grown)
                die("use a smaller file", "out of memory reading '%s' (%zu bytes so far)", path, n);
            buf = grown;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    int read_failed = ferror(f);
    int read_errno = errno;
    if (fclose(f) != 0 && !read_failed) {
        read_failed = 1;
        read_errno = errno;
    }

    if (read_failed) {
        snprintf(err, errlen, "read error on '%s': %s", path, strerror(read_errno));
    } else if (n == 0) {
        snprintf(err, errlen, "'%s' is empty", path);
    } else if (n < min_len) {
        snprintf(err, errlen, "'%s' has %zu bytes; need at least %zu (seq + 1)", path, n, min_len);
    } else {
        c->bytes = buf;
        c->n = n;
        snprintf(c->source, sizeof c->source, "%s", path);
        return 0;
    }
    free(buf);
    return -1;
}

void corpus_free(Corpus *c) {
    free(c->bytes);
    memset(c, 0, sizeof *c);
}

// ------------------------------------------------------------------------------------------
// 3. The batch sampler
//
// A window of T+1 bytes (T inputs, and the same shifted by one as targets) fits at offsets
// 0 .. n-T-1, which is n-T choices. The offset is a hash of (seed, step, index) only: no
// sampler state, so any rank can compute any sequence of the global batch, in any order.

void batch_sequence(const Corpus *c, uint64_t seed, int64_t step, int index, int T, uint8_t *out) {
    if (T < 1 || c->n < (size_t)T + 1)
        die("use a longer data file or a shorter sequence length",
            "corpus '%s' has %zu bytes; a sequence of %d needs at least %d", c->source, c->n, T,
            T + 1);
    size_t choices = c->n - (size_t)T;
    size_t offset = (size_t)(rng_hash(seed, (uint64_t)step, (uint64_t)(int64_t)index) % choices);
    memcpy(out, c->bytes + offset, (size_t)T + 1);
}
