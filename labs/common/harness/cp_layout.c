// cp_layout.c — see cp_layout.h.
#include "cp_layout.h"

#include <stdio.h>
#include <string.h>

#include "common/comm/dist.h"

// ---------------------------------------------------------------------------------------
// Layouts: who holds which tokens
// ---------------------------------------------------------------------------------------

int cp_layout_parse(const char *s) {
    if (strcmp(s, "contiguous") == 0) return CP_CONTIGUOUS;
    if (strcmp(s, "zigzag") == 0) return CP_ZIGZAG;
    return -1;
}

const char *cp_layout_name(int kind) { return kind == CP_ZIGZAG ? "zigzag" : "contiguous"; }

int cp_layout_init(CpLayout *l, int kind, int T, int N) {
    *l = (CpLayout){.kind = kind, .T = T, .N = N, .chunks = kind == CP_ZIGZAG ? 2 * N : N};
    return T >= l->chunks ? 0 : -1;
}

// The chunks rank r holds, in the order of their positions: one (contiguous) or two (zigzag).
// (The cp lab lays its tokens out with its own copy of this rule, a student's TODO region:
// labs/18-cp/ring_attention.c, ring_rank_chunks. This one is what the planner and the grader
// count with, so that a student's layout is graded against the rule, not against itself.)
static int layout_chunks(const CpLayout *l, int r, int chunk[2]) {
    chunk[0] = r;
    if (l->kind != CP_ZIGZAG) return 1;
    chunk[1] = 2 * l->N - 1 - r;
    return 2;
}

int cp_layout_count(const CpLayout *l, int r) {
    int chunk[2] = {0, 0}, n = layout_chunks(l, r, chunk), count = 0;
    for (int i = 0; i < n; i++) {
        size_t off, len;
        dist_chunk((size_t)l->T, l->chunks, chunk[i], &off, &len);
        count += (int)len;
    }
    return count;
}

void cp_layout_positions(const CpLayout *l, int r, int *pos) {
    int chunk[2] = {0, 0}, n = layout_chunks(l, r, chunk), k = 0;
    for (int i = 0; i < n; i++) {
        size_t off, len;
        dist_chunk((size_t)l->T, l->chunks, chunk[i], &off, &len);
        for (size_t t = 0; t < len; t++) pos[k++] = (int)(off + t);
    }
}

void cp_layout_ranges(const CpLayout *l, int r, char *out, size_t n) {
    int chunk[2] = {0, 0}, k = layout_chunks(l, r, chunk);
    size_t at = 0, first = 0, last = 0;
    int open = 0;  // a run being written: first..last (a chunk that starts where the last ended joins it)
    out[0] = 0;
    for (int i = 0; i <= k; i++) {
        size_t off = 0, len = 0;
        if (i < k) dist_chunk((size_t)l->T, l->chunks, chunk[i], &off, &len);
        if (i < k && len == 0) continue;
        if (i < k && open && off == last + 1) {
            last = off + len - 1;
            continue;
        }
        if (open && at < n) {
            int w = snprintf(out + at, n - at, "%s%zu-%zu", at ? "," : "", first, last);
            at += w > 0 ? (size_t)w : 0;
        }
        if (i < k) first = off, last = off + len - 1, open = 1;
    }
}

long cp_layout_pairs(const CpLayout *l, int r) {
    int chunk[2] = {0, 0}, k = layout_chunks(l, r, chunk);
    long pairs = 0;
    for (int i = 0; i < k; i++) {
        size_t off, len;
        dist_chunk((size_t)l->T, l->chunks, chunk[i], &off, &len);
        for (size_t t = off; t < off + len; t++) pairs += (long)t + 1;
    }
    return pairs;
}

int cp_layout_max_count(const CpLayout *l) {
    int m = 0;
    for (int r = 0; r < l->N; r++) {
        int c = cp_layout_count(l, r);
        if (c > m) m = c;
    }
    return m;
}

size_t cp_comm_floats(const CpLayout *l, int kv_mode, int B, int C) {
    size_t maxc = (size_t)cp_layout_max_count(l);
    // ring: two blocks in flight (the one held, the one arriving), K|V|dK|dV a token;
    // all-gather: every rank's K|V (padded to maxc tokens), and as much for their gradients.
    if (kv_mode == CP_KV_ALL_GATHER) return 2 * (size_t)l->N * maxc * B * 2 * C;
    return 2 * maxc * B * 4 * C;
}

size_t cp_workspace_floats(const CpLayout *l, int B, int C, int NH) {
    (void)C;
    size_t maxc = (size_t)cp_layout_max_count(l);
    return (size_t)B * NH * maxc + maxc + (size_t)C;  // D, then a row of scores and a head's output
}


uint64_t cp_ring_bytes(const CpLayout *l, int kv_mode, int r, int B, int C, int backward) {
    int n = l->N;
    if (n == 1) return 0;
    uint64_t token = 4ull * (uint64_t)B * C;  // bytes of one token's K (or V, dK, dV) over the micro-batch
    if (kv_mode == CP_KV_ALL_GATHER) return (backward ? 2 : 1) * 2 * token * (uint64_t)cp_layout_max_count(l) * (n - 1);
    uint64_t b = 0;
    for (int s = 0; s < n; s++) {
        uint64_t tokens = (uint64_t)cp_layout_count(l, ((r - s) % n + n) % n);
        if (s < n - 1) b += (backward ? 4 : 2) * token * tokens;
        else if (backward) b += 2 * token * tokens;  // the last hop: dK dV home
    }
    return b;
}
