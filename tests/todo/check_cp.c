// check_cp.c — the checks of context parallelism's regions: `make check TODO=cp-layout`,
// `cp-merge`, `cp-ring-step`, `cp-positions`.
//
//   cp-layout     (18-cp/ring_attention.c) each rank's chunks, for 1..8 ranks, both
//                 layouts, T that the chunks divide and T that they do not: the positions a
//                 rank holds against the chunks computed here (r of N; r and 2N-1-r of 2N).
//   cp-merge      (18-cp/ring_attention.c) one rank's queries against 3 blocks of keys, one
//                 block at a time through ring_block_forward: after each block, out and lse
//                 against causal attention over the blocks so far, in double. Once at scores
//                 of order one, once at scores in the hundreds, where a merge that takes the
//                 exp of a log-sum-exp overflows.
//   cp-ring-step  (18-cp/ring_attention.c) ring_attention_forward on 2, 3 and 4 ranks (a
//                 ring built here, zig-zag positions and all): every rank's out against full
//                 attention at its positions, and the bytes it sent against the hand-overs'.
//                 It runs the merge too: make cp-merge pass first.
//   cp-positions  (18-cp/cp.c) embed_forward on a rank that holds positions 1, 2, 6 and 7
//                 of 8: each token's x0 = wte[token] + wpe[its global position].
// The references are computed here, never with the solution's code.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define main cp_lab_main
#include "18-cp/cp.c"
#undef main
#include "common/model/rng.h"
#include "todo.h"

// ---- cp-layout --------------------------------------------------------------------------------

// The chunks rank r holds, as this check knows them.
static int want_chunks(int kind, int N, int r, int chunk[2]) {
    chunk[0] = r;
    if (kind != CP_ZIGZAG) return 1;
    chunk[1] = 2 * N - 1 - r;
    return 2;
}

static void check_layout(void) {
    static const int extra_T[] = {0, 1, 5};
    for (int kind = 0; kind < 2; kind++)
        for (int N = 1; N <= 8; N++)
            for (int e = 0; e < 3; e++) {
                int chunks = kind == CP_ZIGZAG ? 2 * N : N, T = 3 * chunks + extra_T[e];
                CpLayout l;
                todo_context("%s over %d rank(s), T = %d", cp_layout_name(kind), N, T);
                if (cp_layout_init(&l, kind, T, N) != 0) todo_fail("cp_layout_init refused %d tokens over %d ranks", T, N);
                int seen = 0;
                for (int r = 0; r < N; r++) {
                    int chunk[2], k = want_chunks(kind, N, r, chunk), want[64], nw = 0;
                    char wtext[64] = "";
                    for (int i = 0, at = 0; i < k; i++) {
                        size_t off, len;
                        dist_chunk((size_t)T, chunks, chunk[i], &off, &len);
                        for (size_t t = 0; t < len; t++) want[nw++] = (int)(off + t);
                        at += snprintf(wtext + at, sizeof wtext - (size_t)at, "%s%zu-%zu", i ? "," : "", off, off + len - 1);
                    }
                    int *got = calloc((size_t)T, sizeof(int)), n = ring_rank_positions(&l, r, got);
                    int same = n == nw;
                    for (int i = 0; same && i < n; i++) same = got[i] == want[i];
                    if (!same) {
                        char gtext[64];
                        positions_text(got, n, gtext, sizeof gtext);
                        todo_fail("%s over %d ranks, T = %d (%d chunks): rank %d holds positions %s (%d tokens); "
                                  "expected %s\n%s",
                                  cp_layout_name(kind), N, T, chunks, r, gtext, n, wtext,
                                  kind == CP_ZIGZAG ? "zig-zag: rank r takes chunk r and chunk 2N-1-r, an early one "
                                                      "and its mirror at the end, so that every rank does the same "
                                                      "attention work under the causal mask"
                                                    : "contiguous: rank r takes chunk r of N");
                    }
                    seen += n;
                    free(got);
                }
                if (seen != T) todo_fail("%s over %d ranks: the ranks hold %d tokens of %d", cp_layout_name(kind), N, seen, T);
            }
}

// ---- causal attention in double, the reference -----------------------------------------------

// out [nq, C] and lse [NH, nq] of queries q (positions qpos) against keys and values kv
// [nk, 2C] (positions kpos): softmax over the keys at or before each query.
static void reference(double *out, double *lse, const float *qkv, const int *qpos, int nq, const float *kv,
                      const int *kpos, int nk, int C, int NH) {
    int hs = C / NH;
    double scale = 1.0 / sqrt((double)hs);
    double *s = malloc(sizeof(double) * (size_t)(nk > 0 ? nk : 1));
    for (int h = 0; h < NH; h++)
        for (int t = 0; t < nq; t++) {
            double m = -INFINITY, l = 0;
            for (int u = 0; u < nk; u++) {
                s[u] = -INFINITY;
                if (kpos[u] > qpos[t]) continue;
                double d = 0;
                for (int i = 0; i < hs; i++) d += (double)qkv[(size_t)t * 3 * C + h * hs + i] * kv[(size_t)u * 2 * C + h * hs + i];
                s[u] = d * scale;
                if (s[u] > m) m = s[u];
            }
            for (int i = 0; i < hs; i++) out[(size_t)t * C + h * hs + i] = 0;
            for (int u = 0; u < nk; u++) {
                if (s[u] == -INFINITY) continue;
                double p = exp(s[u] - m);
                l += p;
                for (int i = 0; i < hs; i++) out[(size_t)t * C + h * hs + i] += p * kv[(size_t)u * 2 * C + C + h * hs + i];
            }
            for (int i = 0; i < hs; i++) out[(size_t)t * C + h * hs + i] /= l;
            lse[(size_t)h * nq + t] = m + log(l);
        }
    free(s);
}

// ---- cp-merge ---------------------------------------------------------------------------------

#define MC 8   // channels
#define MNH 2  // heads
#define MQ 4   // queries, at positions 12..15
#define MK 4   // keys a block: positions 0..3, 4..7, 8..11 (then the queries' own, 12..15)

static void merge_at(double gain) {
    Rng rng;
    rng_seed(&rng, 11);
    int qpos[MQ], kpos[4 * MK];
    float qkv[MQ * 3 * MC], kv[4 * MK * 2 * MC];
    for (int t = 0; t < MQ; t++) qpos[t] = 12 + t;
    for (int u = 0; u < 4 * MK; u++) kpos[u] = u;
    for (int i = 0; i < MQ * 3 * MC; i++) qkv[i] = (float)(rng_normal(&rng) * (i % (3 * MC) < MC ? gain : 1));
    for (int i = 0; i < 4 * MK * 2 * MC; i++) kv[i] = (float)rng_normal(&rng);
    // The last block is the queries' own keys (the diagonal), as at the ring's step 0.
    for (int t = 0; t < MQ; t++) memcpy(kv + (size_t)(3 * MK + t) * 2 * MC, qkv + (size_t)t * 3 * MC + MC, sizeof(float) * 2 * MC);
    float out[MQ * MC] = {0}, lse[MNH * MQ], scores[MK + MC];
    for (int i = 0; i < MNH * MQ; i++) lse[i] = -INFINITY;
    // The blocks in the order a ring brings them to the last rank: its own first, then the others.
    static const int order[4] = {3, 2, 1, 0};
    int seen[4 * MK], nseen = 0;
    float seen_kv[4 * MK * 2 * MC];
    for (int s = 0; s < 4; s++) {
        int b = order[s];
        todo_context("ring_block_forward, block %d of 4 (keys at positions %d..%d), scores x%g", s + 1, b * MK,
                     b * MK + MK - 1, gain);
        ring_block_forward(out, lse, qkv, qpos, MQ, kv + (size_t)b * MK * 2 * MC, kpos + b * MK, MK, 1, MC, MNH, 0,
                           scores);
        for (int u = 0; u < MK; u++) {
            seen[nseen] = kpos[b * MK + u];
            memcpy(seen_kv + (size_t)nseen * 2 * MC, kv + (size_t)(b * MK + u) * 2 * MC, sizeof(float) * 2 * MC);
            nseen++;
        }
        double want[MQ * MC], want_lse[MNH * MQ];
        reference(want, want_lse, qkv, qpos, MQ, seen_kv, seen, nseen, MC, MNH);
        for (int h = 0; h < MNH; h++)
            for (int t = 0; t < MQ; t++) {
                double got = lse[h * MQ + t], w = want_lse[h * MQ + t];
                if (todo_close(got, w, 1e-4)) continue;
                todo_fail("after %d block(s) (scores up to about %g), query at position %d, head %d: lse = %g, expected "
                          "%g (the log-sum-exp over every key seen so far)\n%s",
                          s + 1, 3 * gain, qpos[t], h, got, w,
                          isfinite(got) ? "merge the block's log-sum-exp lb into the running one: lse' = log(e^lse + e^lb)"
                                        : "it overflowed: e^lse of a log-sum-exp in the hundreds is beyond fp32; write "
                                          "log(e^lse + e^lb) as max + log1p(exp(min - max)), whose exp never exceeds 1");
            }
        for (int i = 0; i < MQ * MC; i++) {
            if (todo_close(out[i], want[i], 1e-4)) continue;
            int t = i / MC, c = i % MC;
            todo_fail("after %d block(s), query at position %d, channel %d (head %d): out = %g, expected %g\nthe running "
                      "output is a weighted mean of the blocks' outputs: o' = o e^(lse - lse') + o_b e^(lb - lse'), "
                      "each block's weight its share of the softmax's sum (o_b = ob / l)",
                      s + 1, qpos[t], c, c / (MC / MNH), out[i], want[i]);
        }
    }
}

static void check_merge(void) {
    merge_at(1);
    merge_at(200);
}

// ---- cp-ring-step -----------------------------------------------------------------------------

#define RC 8
#define RNH 2
#define RT 24

// Rank q's positions under zig-zag on N ranks (RT = 24 tokens: 2N chunks, built here so that
// this check needs no other region).
static int zigzag_positions(int N, int q, int *pos) {
    int k = 0;
    for (int c = 0; c < 2 * N; c++) {
        if (c != q && c != 2 * N - 1 - q) continue;
        size_t off, len;
        dist_chunk(RT, 2 * N, c, &off, &len);
        for (size_t t = 0; t < len; t++) pos[k++] = (int)(off + t);
    }
    return k;
}

static void ring_step_rank(Dist *d, void *arg) {
    (void)arg;
    int N = d->world, r = d->rank;
    // The ring by hand: every rank's positions, two blocks of K|V|dK|dV, the workspace.
    Ring ring = {.group = &d->world_group, .kv_mode = CP_KV_RING, .B = 1, .C = RC, .NH = RNH, .rank = r, .N = N};
    int pos_of[8][RT];
    for (int q = 0; q < N; q++) {
        ring.count[q] = zigzag_positions(N, q, pos_of[q]);
        ring.pos[q] = pos_of[q];
        if (ring.count[q] > ring.maxc) ring.maxc = ring.count[q];
    }
    float *buf = calloc((size_t)2 * ring.maxc * 4 * RC, sizeof(float)), scores[RT + RC];
    ring.buf[0] = buf, ring.buf[1] = buf + (size_t)ring.maxc * 4 * RC, ring.scores = scores;
    ring_attach_device(&ring, &device_cpu);
    // The whole sequence, the same on every rank (the same seed); this rank keeps its rows.
    Rng rng;
    rng_seed(&rng, 5);
    float all[RT * 3 * RC];
    for (int i = 0; i < RT * 3 * RC; i++) all[i] = (float)rng_normal(&rng);
    int Tl = ring.count[r], *pos = ring.pos[r];
    float *qkv = malloc(sizeof(float) * (size_t)Tl * 3 * RC), *out = malloc(sizeof(float) * (size_t)Tl * RC);
    float *lse = malloc(sizeof(float) * (size_t)Tl * RNH);
    for (int i = 0; i < Tl; i++) memcpy(qkv + (size_t)i * 3 * RC, all + (size_t)pos[i] * 3 * RC, sizeof(float) * 3 * RC);
    todo_context("ring_attention_forward on %d ranks, %d tokens (zigzag), rank %d", N, RT, r);
    ring_attention_forward(&ring, out, lse, qkv);
    // The reference: this rank's queries against every key of the sequence.
    float kv[RT * 2 * RC];
    int kpos[RT];
    for (int u = 0; u < RT; u++) {
        kpos[u] = u;
        memcpy(kv + (size_t)u * 2 * RC, all + (size_t)u * 3 * RC + RC, sizeof(float) * 2 * RC);
    }
    double *want = malloc(sizeof(double) * (size_t)Tl * RC), *want_lse = malloc(sizeof(double) * (size_t)Tl * RNH);
    reference(want, want_lse, qkv, pos, Tl, kv, kpos, RT, RC, RNH);
    for (int i = 0; i < Tl * RC; i++) {
        if (todo_close(out[i], want[i], 1e-4)) continue;
        todo_fail("%d ranks: rank %d's query at position %d (channel %d): out = %g, expected %g (attention over every "
                  "key up to it)\nat ring step s rank %d attends to the block of rank (%d - s) mod %d; before it, it "
                  "hands the block it holds to rank %d and receives the next from rank %d (the one rank %d held), "
                  "N - 1 hand-overs in all",
                  N, r, pos[i / RC], i % RC, out[i], want[i], r, r, N, (r + 1) % N, (r + N - 1) % N, (r + N - 1) % N);
    }
    // Steps 0..N-2 each hand on the block held: rank (r - s) mod N's K|V, 2C floats a token.
    uint64_t expect = 0;
    for (int s = 0; s < N - 1; s++) expect += 4ull * 2 * RC * (uint64_t)ring.count[((r - s) % N + N) % N];
    if (ring.bytes_sent != expect)
        todo_fail("%d ranks: rank %d sent %llu bytes in the forward ring, expected %llu: steps 0..N-2 each hand on "
                  "the block held (2C floats a token), the last step none",
                  N, r, (unsigned long long)ring.bytes_sent, (unsigned long long)expect);
    free(qkv), free(out), free(lse), free(want), free(want_lse), free(buf);
    ring_detach_device(&ring);
    dist_barrier(&d->world_group);  // a rank's last send may still be in the channel: nobody leaves before it is read
}

static void check_ring_step(void) {
    for (int N = 2; N <= 4; N++) todo_ranks(N, DIST_ALGO_DIRECT, 20, ring_step_rank, NULL);
}

// ---- cp-positions -----------------------------------------------------------------------------

static void check_positions(void) {
    enum { T = 8, TL = 4, PC = 4, B = 2 };
    static const int pos[TL] = {1, 2, 6, 7};  // zig-zag's rank 0 of 2 at T = 8
    GptConfig full = {.vocab = 256, .seq = T, .layers = 1, .dim = PC, .heads = 1, .attn = GPT_ATTN_FLASH};
    float *embed = malloc(sizeof(float) * (size_t)(256 + T) * PC);
    for (int v = 0; v < 256; v++)
        for (int c = 0; c < PC; c++) embed[v * PC + c] = (float)(1000 * v);
    for (int t = 0; t < T; t++)
        for (int c = 0; c < PC; c++) embed[(256 + t) * PC + c] = (float)(10 * t + c);
    Cp cp = {.local = full, .T = T, .Tl = TL, .B = B, .pos = pos, .ops = ops_cpu};
    cp.local.seq = TL;
    uint8_t tokens[B * TL] = {3, 0, 255, 7, 9, 9, 1, 2};
    float x0[B * TL * PC], rows[2 * TL * PC];
    cp.tokens = tokens, cp.acts.x0 = x0, cp.wpe = rows, cp.dwpe = rows + TL * PC;
    for (int i = 0; i < B * TL * PC; i++) x0[i] = -1;
    todo_context("embed_forward of a rank holding positions 1, 2, 6, 7 of 8");
    embed_forward(&cp, embed);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < TL; i++)
            for (int c = 0; c < PC; c++) {
                float got = x0[(b * TL + i) * PC + c], want = (float)(1000 * tokens[b * TL + i] + 10 * pos[i] + c);
                if (got == want) continue;
                float pe = got - (float)(1000 * tokens[b * TL + i]);
                char why[200] = "";
                if (pe == (float)(10 * i + c))
                    snprintf(why, sizeof why, "\nthat is wpe[%d], the row of the token's index on this rank: the "
                             "position embedding is the token's place in the whole sequence, wpe[pos[%d]] = wpe[%d]", i, i,
                             pos[i]);
                todo_fail("sequence %d, this rank's token %d (global position %d), channel %d: x0 = %g, expected "
                          "wte[%d] + wpe[%d] = %g%s",
                          b, i, pos[i], c, got, tokens[b * TL + i], pos[i], want, why);
            }
    free(embed);
}

int main(int argc, char **argv) {
    static const TodoCheck checks[] = {{"cp-layout", check_layout},
                                       {"cp-merge", check_merge},
                                       {"cp-ring-step", check_ring_step},
                                       {"cp-positions", check_positions}};
    return todo_main(argc, argv, checks, 4);
}
