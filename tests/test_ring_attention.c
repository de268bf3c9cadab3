// test_ring_attention.c — ring attention's pieces (labs/18-cp/ring_attention.c) against
// causal attention written out in double precision (attention_ref.h).
//
// The ring is played here in one process: for every rank r and ring step s, the block of
// rank (r - s) mod N goes through ring_block_forward and ring_block_backward, in the order
// the lab's ring brings them. The outputs, log-sum-exps and gradients, put back in sequence
// order, must equal full attention for N = 1..8, both layouts, T that the chunks divide and
// T that they do not, and scores so large that a merge without its max shift overflows.
// The layouts themselves: every position held by exactly one rank, zig-zag's work even.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "18-cp/ring_attention.h"
#include "attention_ref.h"
#include "common/model/rng.h"
#include "test.h"

typedef struct {
    int B, T, C, NH, N, kind;
    double gain;  // q scaled by this: large gains make scores of hundreds
} Case;

// The rows of x [B,T,w] at positions pos[0..n) into out [B,n,w].
static void take_rows(float *out, const float *x, const int *pos, int n, int B, int T, int w) {
    for (int b = 0; b < B; b++)
        for (int i = 0; i < n; i++) memcpy(out + ((size_t)b * n + i) * w, x + ((size_t)b * T + pos[i]) * w, sizeof(float) * w);
}

static double rel(double x, double ref) { return fabs(x - ref) / (1.0 + fabs(ref)); }

static void run_case(const Case *k, Rng *rng) {
    int B = k->B, T = k->T, C = k->C, NH = k->NH, N = k->N;
    CpLayout l;
    if (cp_layout_init(&l, k->kind, T, N) != 0) {
        EXPECT(T < 2 * N, "cp_layout_init refuses T = %d only when a chunk would be empty", T);
        return;
    }
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C;
    float *qkv = malloc(sizeof(float) * nq), *dout = malloc(sizeof(float) * no);
    for (size_t i = 0; i < nq; i++) qkv[i] = (float)rng_normal(rng);
    for (size_t n = 0; n < (size_t)B * T; n++)
        for (int c = 0; c < C; c++) qkv[n * 3 * C + c] *= (float)k->gain;
    for (size_t i = 0; i < no; i++) dout[i] = (float)rng_normal(rng);
    double *rout = malloc(sizeof(double) * no), *rlse = malloc(sizeof(double) * B * NH * T);
    double *rdq = malloc(sizeof(double) * nq);
    attention_reference_as(rout, rlse, rdq, qkv, dout, B, T, C, NH, 0);

    // Each rank's tokens: its qkv, dout, and the K|V block it starts the ring with.
    int cnt[8], *pos[8], maxc = cp_layout_max_count(&l);
    float *lq[8], *ldo[8], *kv[8], *out[8], *lse[8], *dq[8], *dkv[8];
    int seen[4096] = {0};
    for (int r = 0; r < N; r++) {
        cnt[r] = cp_layout_count(&l, r);
        pos[r] = malloc(sizeof(int) * (size_t)cnt[r]);
        cp_layout_positions(&l, r, pos[r]);
        for (int i = 0; i < cnt[r]; i++) seen[pos[r][i]]++;
        lq[r] = malloc(sizeof(float) * B * cnt[r] * 3 * C);
        ldo[r] = malloc(sizeof(float) * B * cnt[r] * C);
        kv[r] = malloc(sizeof(float) * B * cnt[r] * 2 * C);
        out[r] = calloc((size_t)B * cnt[r] * C, sizeof(float));
        lse[r] = malloc(sizeof(float) * B * NH * cnt[r]);
        dq[r] = calloc((size_t)B * cnt[r] * 3 * C, sizeof(float));
        dkv[r] = calloc((size_t)B * cnt[r] * 2 * C, sizeof(float));
        take_rows(lq[r], qkv, pos[r], cnt[r], B, T, 3 * C);
        take_rows(ldo[r], dout, pos[r], cnt[r], B, T, C);
        ring_kv_pack(kv[r], lq[r], B, cnt[r], C);
        for (int i = 0; i < B * NH * cnt[r]; i++) lse[r][i] = -INFINITY;
    }
    // The lab's own layout (ring_rank_positions) is the planner's and grader's (cp_layout.h).
    int same_layout = 1;
    for (int r = 0; r < N; r++) {
        int *mine = malloc(sizeof(int) * (size_t)T), n = ring_rank_positions(&l, r, mine);
        same_layout &= n == cnt[r] && !memcmp(mine, pos[r], sizeof(int) * (size_t)n);
        free(mine);
    }
    int once = 1;
    for (int t = 0; t < T; t++) once &= seen[t] == 1;
    char what[160];
    snprintf(what, sizeof what, "%s N=%d T=%d B=%d C=%d NH=%d gain %g", cp_layout_name(k->kind), N, T, B, C, NH, k->gain);
    EXPECT(once, "%s: every position held by exactly one rank", what);
    EXPECT(same_layout, "%s: the lab's ring_rank_positions are cp_layout_positions, rank by rank", what);

    float *scratch = malloc(sizeof(float) * (size_t)(maxc + C));
    for (int r = 0; r < N; r++)
        for (int s = 0; s < N; s++) {
            int src = ((r - s) % N + N) % N;
            ring_block_forward(out[r], lse[r], lq[r], pos[r], cnt[r], kv[src], pos[src], cnt[src], B, C, NH, 0, scratch);
        }
    // D = do . o from the merged outputs, then the backward ring.
    double worst_o = 0, worst_l = 0, worst_d = 0;
    int hs = C / NH;
    for (int r = 0; r < N; r++) {
        float *D = malloc(sizeof(float) * B * NH * cnt[r]);
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < cnt[r]; i++) {
                    float d = 0;
                    for (int j = 0; j < hs; j++)
                        d += ldo[r][((size_t)b * cnt[r] + i) * C + h * hs + j] * out[r][((size_t)b * cnt[r] + i) * C + h * hs + j];
                    D[((size_t)b * NH + h) * cnt[r] + i] = d;
                }
        for (int s = 0; s < N; s++) {
            int src = ((r - s) % N + N) % N;
            ring_block_backward(dq[r], dkv[src], ldo[r], D, lse[r], lq[r], pos[r], cnt[r], kv[src], pos[src], cnt[src], B,
                                C, NH, 0, scratch);
        }
        free(D);
    }
    for (int r = 0; r < N; r++)
        for (int b = 0; b < B; b++)
            for (int i = 0; i < cnt[r]; i++) {
                size_t g = (size_t)b * T + pos[r][i], m = (size_t)b * cnt[r] + i;
                for (int c = 0; c < C; c++) {
                    double e = rel(out[r][m * C + c], rout[g * C + c]);
                    if (!(e <= worst_o)) worst_o = e;  // (a NaN is the worst)
                    e = rel(dq[r][m * 3 * C + c], rdq[g * 3 * C + c]);
                    if (!(e <= worst_d)) worst_d = e;
                }
                for (int c = 0; c < 2 * C; c++) {
                    double e = rel(dkv[r][m * 2 * C + c], rdq[g * 3 * C + C + c]);
                    if (!(e <= worst_d)) worst_d = e;
                }
                for (int h = 0; h < NH; h++) {
                    double e = rel(lse[r][((size_t)b * NH + h) * cnt[r] + i], rlse[((size_t)b * NH + h) * T + pos[r][i]]);
                    if (!(e <= worst_l)) worst_l = e;
                }
            }
    // fp32 sums of at most T products of order-one values (gain 1) or of hundreds (gain 30):
    // relative rounding ~1e-7 a term, the gradients through exp(s - lse) a little more.
    double tol = k->gain > 1 ? 1e-3 : 2e-5;
    EXPECT(worst_o < tol, "%s: out equals full attention (worst rel diff %.2g)", what, worst_o);
    EXPECT(worst_l < tol, "%s: lse equals full attention's (worst rel diff %.2g)", what, worst_l);
    EXPECT(worst_d < tol, "%s: dq, dk, dv equal full attention's (worst rel diff %.2g)", what, worst_d);
    for (int r = 0; r < N; r++) {
        free(pos[r]), free(lq[r]), free(ldo[r]), free(kv[r]), free(out[r]), free(lse[r]), free(dq[r]), free(dkv[r]);
    }
    free(scratch), free(qkv), free(dout), free(rout), free(rlse), free(rdq);
}

// The work of rank r: the (query, key) pairs its queries see, summed over the whole ring.
static long pairs_of(const CpLayout *l, int r) {
    int n = cp_layout_count(l, r);
    int *pos = malloc(sizeof(int) * (size_t)n);
    cp_layout_positions(l, r, pos);
    long p = 0;
    for (int i = 0; i < n; i++) p += pos[i] + 1;
    free(pos);
    return p;
}

static void test_balance(void) {
    for (int N = 2; N <= 8; N *= 2) {
        CpLayout c, z;
        cp_layout_init(&c, CP_CONTIGUOUS, 256, N);
        cp_layout_init(&z, CP_ZIGZAG, 256, N);
        long cmin = 1L << 40, cmax = 0, zmin = 1L << 40, zmax = 0;
        for (int r = 0; r < N; r++) {
            long a = pairs_of(&c, r), b = pairs_of(&z, r);
            if (a != cp_layout_pairs(&c, r) || b != cp_layout_pairs(&z, r)) cmin = -1;  // (fails below)
            if (a < cmin) cmin = a;
            if (a > cmax) cmax = a;
            if (b < zmin) zmin = b;
            if (b > zmax) zmax = b;
        }
        EXPECT(cmin > 0, "N=%d T=256: cp_layout_pairs counts each rank's (query, key) pairs as this test does", N);
        EXPECT((double)zmax / zmin < 1.1, "zigzag N=%d T=256: the busiest rank does %.3fx the idlest's attention work",
               N, (double)zmax / zmin);
        EXPECT((double)cmax / cmin > N, "contiguous N=%d T=256: the last rank does %.2fx the first's (more than N)", N,
               (double)cmax / cmin);
    }
    CpLayout l;
    EXPECT(cp_layout_init(&l, CP_ZIGZAG, 7, 4) == -1, "zigzag refuses T = 7 over 4 ranks (8 chunks)");
    EXPECT(cp_layout_init(&l, CP_CONTIGUOUS, 7, 4) == 0 && cp_layout_count(&l, 0) == 2 && cp_layout_count(&l, 3) == 1,
           "contiguous takes T = 7 over 4 ranks: 2, 2, 2, 1 tokens");
    EXPECT(cp_layout_parse("zigzag") == CP_ZIGZAG && cp_layout_parse("contiguous") == CP_CONTIGUOUS &&
               cp_layout_parse("zig-zag") == -1,
           "cp_layout_parse knows the two layouts and nothing else");
}

int main(void) {
    Rng rng;
    rng_seed(&rng, 7);
    test_balance();
    for (int kind = 0; kind < 2; kind++)
        for (int N = 1; N <= 8; N++) {
            run_case(&(Case){.B = 2, .T = 48, .C = 16, .NH = 2, .N = N, .kind = kind, .gain = 1}, &rng);
            run_case(&(Case){.B = 1, .T = 37, .C = 8, .NH = 2, .N = N, .kind = kind, .gain = 1}, &rng);
        }
    // Scores in the hundreds: exp() of them overflows fp32, and only a merge that shifts by
    // the max stays finite.
    run_case(&(Case){.B = 1, .T = 32, .C = 8, .NH = 1, .N = 4, .kind = CP_ZIGZAG, .gain = 100}, &rng);
    run_case(&(Case){.B = 1, .T = 32, .C = 8, .NH = 1, .N = 3, .kind = CP_CONTIGUOUS, .gain = 100}, &rng);
    return test_done();
}
