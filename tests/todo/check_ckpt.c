// check_ckpt.c — the check of the recomputation region (labs/14-activation-checkpointing/activation_checkpointing.c):
// `make check TODO=ckpt-recompute`.
//
// One process, no collectives: a tiny GPT (C = 8, 2 heads, T = 8, micro-batches of 2
// sequences) run through ckpt_forward_backward() under a policy, against a plain forward and
// backward of the same weights and tokens (gpt_forward / gpt_backward, every block keeping its
// insides). Recomputation runs the same kernels on the same inputs, so two things must hold:
//   - the loss and the gradient of every layer are BITWISE those of the plain pass;
//   - the spans the pass logs (fwd, recompute, bwd, read back from its run log) are exactly:
//     fwd of layers 0..L+1, then from the head down, just before the backward of a segment's
//     last block, "recompute" of the segment's blocks first..last in increasing order, once
//     each; no other block is recomputed (the segments are written out here from the
//     policies' definitions, policy.h, not read from the policy).
// And x->recompute_us grows by at least the time its recompute spans took (it ADDS UP).
//
// The policies, and why these: every, K = 2 on 5 blocks and K = 3 on 7 (one-block segments,
// with a kept block above the top one), and none (nothing to recompute). Then sqrt, whose
// segments are several blocks long and share one workspace: a segment recomputed in the wrong
// order, or only in part, reads the output another segment left in the workspace, and its
// gradients differ. sqrt on 6 blocks ([1..3] [4..6]), on 5 (a short last segment [4..5]), on 7
// (a one-block last segment), on 2 and 1 (a single segment, the top one: there the workspace
// still holds that very segment's forward, so only the spans tell a wrong order). sqrt on 5
// once more with naive attention and --mixed (bf16 insides in the workspace).
//
// When the numbers differ, the spans say why: the highest layer whose gradient differs is
// named with the tensor and element, and the spans give the likely mistake (a block recomputed
// 0 or 2 times; a segment recomputed out of order, from a stale input; a segment recomputed
// after some of its blocks' backward). Numbers right and spans wrong fail too: a kept block
// recomputed costs time for nothing, and a span with another block's number misleads the
// timeline. The graders' wrong student (tests/test_variants.c: the loop run from l down to
// first[i]) passes the one-block segments and fails at sqrt on 6 blocks: "layer 3's gradient
// (block 3) differs ... segment [1..3] was recomputed out of order, from a stale input: block 3
// ran before block 2".
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "14-activation-checkpointing/activation_checkpointing.h"
#include "common/harness/mem.h"
#include "common/model/gpt.h"
#include "common/runfiles/runlog.h"
#include "todo.h"

#define B 2      // sequences in the micro-batch
#define T 8      // tokens in a sequence
#define MAX_L 8
#define MAX_EVENTS 128

typedef struct {
    const char *policy;  // as --policy says it
    int L;
    int attn, mixed;
} Case;

// ---- the policies, from their definitions (policy.h) -----------------------------------------

typedef struct {
    int nseg, first[MAX_L + 1], last[MAX_L + 1];
    int seg_of[MAX_L + 2];  // block -> segment, -1: kept whole
} Segments;

static Segments segments(const char *policy, int L) {
    Segments s = {0};
    if (strcmp(policy, "sqrt") == 0) {
        int w = 1;
        while (w * w < L) w++;
        for (int l = 1; l <= L; l += w) s.first[s.nseg] = l, s.last[s.nseg++] = l + w - 1 < L ? l + w - 1 : L;
    } else if (strcmp(policy, "none") != 0) {
        int K = strcmp(policy, "every") == 0 ? 1 : atoi(policy);
        for (int l = K; l <= L; l += K) s.first[s.nseg] = s.last[s.nseg] = l, s.nseg++;
    }
    for (int l = 0; l < L + 2; l++) s.seg_of[l] = -1;
    for (int i = 0; i < s.nseg; i++)
        for (int l = s.first[i]; l <= s.last[i]; l++) s.seg_of[l] = i;
    return s;
}

// "[1..3]", "[4]".
static void segment_text(const Segments *s, int i, char *out, size_t n) {
    if (s->first[i] == s->last[i]) snprintf(out, n, "[%d]", s->first[i]);
    else snprintf(out, n, "[%d..%d]", s->first[i], s->last[i]);
}

// "segments [1..3] [4..6]", "segments [2] [4]", "no segments".
static void segments_text(const Segments *s, char *out, size_t n) {
    size_t used = (size_t)snprintf(out, n, s->nseg ? "segments" : "no segments");
    for (int i = 0; i < s->nseg && used < n; i++) {
        char seg[32];
        segment_text(s, i, seg, sizeof seg);
        used += (size_t)snprintf(out + used, n - used, " %s", seg);
    }
}

// ---- the spans -----------------------------------------------------------------------------

enum { FWD, RECOMPUTE, BWD, OTHER };
static const char *const KIND_NAMES[] = {"fwd", "recompute", "bwd", "?"};

typedef struct {
    int kind, layer;
} Event;

// What the pass must log: fwd 0..L+1, then from the head down each segment's recompute just
// before its last block's backward.
static int expected_events(const Segments *s, int L, Event *ev) {
    int n = 0;
    for (int l = 0; l <= L + 1; l++) ev[n++] = (Event){FWD, l};
    for (int l = L + 1; l >= 0; l--) {
        int i = l >= 1 && l <= L ? s->seg_of[l] : -1;
        if (i >= 0 && l == s->last[i])
            for (int j = s->first[i]; j <= l; j++) ev[n++] = (Event){RECOMPUTE, j};
        ev[n++] = (Event){BWD, l};
    }
    return n;
}

// The run log's text, kept in memory up to a bound: a region that never stops recomputing
// logs spans until the harness's deadline, and must not fill the machine's memory meanwhile.
#define LOG_MAX 65536
typedef struct {
    char text[LOG_MAX + 1];
    size_t len;
} LogText;

static ssize_t log_text_write(void *cookie, const char *buf, size_t n) {
    LogText *t = cookie;
    size_t keep = n < LOG_MAX - t->len ? n : LOG_MAX - t->len;
    memcpy(t->text + t->len, buf, keep);
    t->len += keep;
    t->text[t->len] = 0;
    return (ssize_t)n;  // the rest is dropped, not refused: the pass goes on to the deadline
}

// The span events of the run log's text, in order.
static int read_events(const char *text, Event *ev, int max) {
    int n = 0;
    for (const char *line = text; *line && n < max; line++) {
        const char *name = strstr(line, "\"name\":\""), *layer = strstr(line, "\"layer\":");
        if (strncmp(line, "{\"ev\":\"span\"", 12) == 0 && name && layer) {
            Event e = {OTHER, atoi(layer + 8)};
            for (int k = FWD; k <= BWD; k++) {
                size_t len = strlen(KIND_NAMES[k]);
                if (strncmp(name + 8, KIND_NAMES[k], len) == 0 && name[8 + len] == '"') e.kind = k;
            }
            ev[n++] = e;
        }
        line = strchr(line, '\n');
        if (!line) break;
    }
    return n;
}

static const char *layer_words(int layer, int L, char *out, size_t n) {
    if (layer == 0) snprintf(out, n, "layer 0 (the embedding)");
    else if (layer == L + 1) snprintf(out, n, "layer %d (the head)", layer);
    else snprintf(out, n, "block %d", layer);
    return out;
}

// "0 times", "once", "twice", "3 times".
static const char *times_words(int count, char *out, size_t n) {
    if (count == 1) snprintf(out, n, "once");
    else if (count == 2) snprintf(out, n, "twice");
    else snprintf(out, n, "%d times", count);
    return out;
}

// Where the recomputes of block l came: " (before the backward of block 6, block 5)", or "".
static void recompute_places(int l, const Event *got, int ngot, char *out, size_t n) {
    size_t used = 0;
    out[0] = 0;
    for (int k = 0; k < ngot; k++) {
        if (got[k].kind != RECOMPUTE || got[k].layer != l) continue;
        int m = k;
        while (m < ngot && got[m].kind != BWD) m++;
        const char *sep = used ? ", " : " (before the backward of ";
        if (used >= n) break;
        if (m < ngot) used += (size_t)snprintf(out + used, n - used, "%sblock %d", sep, got[m].layer);
        else used += (size_t)snprintf(out + used, n - used, "%safter the last one", used ? ", " : " (");
    }
    if (used && used < n) snprintf(out + used, n - used, ")");
}

// What is wrong with segment i's recompute spans: how many times each of its blocks ran, in
// what order, and where in the backward. 1 with the words in out, 0 if nothing.
static int segment_problem(const Segments *s, int i, int L, const Event *got, int ngot, char *out, size_t n) {
    char seg[32], w[64], tw[32], where[160], how[160];
    segment_text(s, i, seg, sizeof seg);
    if (s->first[i] == s->last[i])
        snprintf(how, sizeof how, "segment %s: the block runs forward again from its kept input", seg);
    else
        snprintf(how, sizeof how, "the last block of segment %s: blocks %d..%d run forward again, in that order, from "
                                  "the segment's kept input", seg, s->first[i], s->last[i]);
    for (int l = s->last[i]; l >= s->first[i]; l--) {  // once each
        int count = 0;
        for (int k = 0; k < ngot; k++) count += got[k].kind == RECOMPUTE && got[k].layer == l;
        if (count == 1) continue;
        recompute_places(l, got, ngot, where, sizeof where);
        snprintf(out, n, "block %d was recomputed %s%s, expected once, before the backward of block %d (%s)%s", l,
                 times_words(count, tw, sizeof tw), where, s->last[i], how,
                 count == 0 ? "" : "; or a recompute span names another block than the one it recomputed (each "
                                   "names its own block j)");
        return 1;
    }
    int prev = -1;  // in increasing order
    for (int k = 0; k < ngot; k++) {
        if (got[k].kind != RECOMPUTE || got[k].layer < 1 || got[k].layer > L || s->seg_of[got[k].layer] != i) continue;
        if (prev >= 0 && got[k].layer < prev) {
            snprintf(out, n,
                     "segment %s was recomputed out of order, from a stale input: block %d ran before block %d. "
                     "Each block's forward reads the output of the block below it, which the workspace holds only "
                     "once that block has run again: recompute blocks %d..%d in increasing order",
                     seg, prev, got[k].layer, s->first[i], s->last[i]);
            return 1;
        }
        prev = got[k].layer;
    }
    int k = 0;  // in one piece, just before the backward of its last block
    while (k < ngot && !(got[k].kind == RECOMPUTE && got[k].layer == s->first[i])) k++;
    int run = 0, len = s->last[i] - s->first[i] + 1;
    while (k + run < ngot && got[k + run].kind == RECOMPUTE && got[k + run].layer == s->first[i] + run) run++;
    int next = k + run;
    if (run != len) {
        snprintf(out, n, "segment %s's recompute was cut in two: after block %d came %s of layer %d, then block %d",
                 seg, s->first[i] + run - 1, next < ngot ? KIND_NAMES[got[next].kind] : "nothing",
                 next < ngot ? got[next].layer : -1, s->first[i] + run);
        return 1;
    }
    if (next < ngot && got[next].kind == BWD && got[next].layer == s->last[i]) return 0;
    int bwd_after = -1;
    for (int m = next; m < ngot && bwd_after < 0; m++)
        if (got[m].kind == BWD) bwd_after = got[m].layer;
    char early[160] = "";  // the segment's blocks whose backward came first
    size_t used = 0;
    for (int m = 0; m < k && used < sizeof early; m++)
        if (got[m].kind == BWD && got[m].layer >= s->first[i] && got[m].layer <= s->last[i])
            used += (size_t)snprintf(early + used, sizeof early - used, "%s%d", used ? ", " : "", got[m].layer);
    char when[96] = "after the backward of every layer";
    if (bwd_after >= 0)
        snprintf(when, sizeof when, "just before the backward of %s", layer_words(bwd_after, L, w, sizeof w));
    snprintf(out, n,
             "segment %s was recomputed %s, expected just before the backward of block %d, its last block%s%s%s", seg,
             when, s->last[i], early[0] ? ": the backward of block(s) " : "", early,
             early[0] ? " came before it and read insides the workspace held for another segment" : "");
    return 1;
}

// What is wrong with the spans, in the student's terms; "" when they are as expected. focus:
// the layer whose gradient went wrong first (-1: none); its segment is looked at first.
static void diagnose_spans(const Segments *s, int L, const Event *got, int ngot, int focus, char *out, size_t n) {
    Event want[MAX_EVENTS];
    int nwant = expected_events(s, L, want);
    out[0] = 0;
    int same = ngot == nwant;
    for (int k = 0; same && k < nwant; k++) same = got[k].kind == want[k].kind && got[k].layer == want[k].layer;
    if (same) return;

    for (int k = 0; k < ngot; k++) {  // the forward's spans, then no other "fwd"
        if (k <= L + 1 ? got[k].kind == FWD && got[k].layer == k : got[k].kind != FWD) continue;
        if (k <= L + 1)
            snprintf(out, n, "span %d of the pass is '%s' of layer %d, expected 'fwd' of layer %d: the forward runs "
                             "every layer once, 0..%d, before any backward or recompute",
                     k + 1, KIND_NAMES[got[k].kind], got[k].layer, k, L + 1);
        else
            snprintf(out, n, "a 'fwd' span of layer %d came during the backward (span %d): a block run again before "
                             "its backward is logged as \"recompute\"",
                     got[k].layer, k + 1);
        return;
    }
    int fi = focus >= 1 && focus <= L ? s->seg_of[focus] : -1;
    if (fi >= 0 && segment_problem(s, fi, L, got, ngot, out, n)) return;
    for (int i = s->nseg - 1; i >= 0; i--)
        if (segment_problem(s, i, L, got, ngot, out, n)) return;
    for (int l = L + 1; l >= 0; l--) {  // the layers in no segment: never recomputed
        if (l >= 1 && l <= L && s->seg_of[l] >= 0) continue;
        int count = 0;
        for (int k = 0; k < ngot; k++) count += got[k].kind == RECOMPUTE && got[k].layer == l;
        if (count == 0) continue;
        char w[64], tw[32], where[160];
        layer_words(l, L, w, sizeof w);
        times_words(count, tw, sizeof tw);
        recompute_places(l, got, ngot, where, sizeof where);
        if (l == 0 || l == L + 1)
            snprintf(out, n, "%s was recomputed %s%s: only blocks 1..%d belong to segments; the embedding and the "
                             "head keep their activations",
                     w, tw, where, L);
        else
            snprintf(out, n,
                     "%s was recomputed %s%s, expected never: it is in no segment, so it kept its insides and its "
                     "backward reads them as they are (recompute only the segment that ends at block l, when l is "
                     "its last block)",
                     w, tw, where);
        return;
    }
    int k = 0;  // anything else: the first span that differs
    while (k < ngot && k < nwant && got[k].kind == want[k].kind && got[k].layer == want[k].layer) k++;
    if (k < nwant && k < ngot)
        snprintf(out, n, "span %d of the pass is '%s' of layer %d, expected '%s' of layer %d (the recompute spans are "
                         "named \"recompute\")",
                 k + 1, KIND_NAMES[got[k].kind], got[k].layer, KIND_NAMES[want[k].kind], want[k].layer);
    else
        snprintf(out, n, "the pass logged %d spans, expected %d (fwd of every layer, each segment's recompute, bwd of "
                         "every layer)", ngot, nwant);
}

// ---- one case --------------------------------------------------------------------------------

static void fill_tokens(uint8_t *tokens, uint8_t *targets, int n, int L) {
    uint32_t x = 2463534242u + (uint32_t)L;
    for (int i = 0; i <= n; i++) {
        x ^= x << 13, x ^= x >> 17, x ^= x << 5;
        uint8_t t = (uint8_t)(x >> 8);
        if (i < n) tokens[i] = t;
        if (i > 0) targets[i - 1] = t;
    }
}

static void run_case(const Case *k) {
    GptConfig c = {.vocab = GPT_VOCAB, .seq = T, .layers = k->L, .dim = 8, .heads = 2, .attn = k->attn,
                   .mixed = k->mixed};
    Segments s = segments(k->policy, k->L);
    char segs[200];
    segments_text(&s, segs, sizeof segs);
    char head[300];
    snprintf(head, sizeof head, "policy %s on %d blocks (%s%s%s)", k->policy, k->L, segs,
             k->attn == GPT_ATTN_NAIVE ? ", naive attention" : "", k->mixed ? ", --mixed" : "");
    todo_context("%s", head);

    CkptPolicy p;
    char why[200];
    if (ckpt_policy_named(&p, k->policy, k->L, why, sizeof why) != 0) todo_fail("%s: %s", head, why);

    Mem mem;
    mem_init(&mem, &device_cpu);
    Gpt g;
    gpt_create(&g, &c, &mem, 1234 + (uint64_t)k->L);
    int n = B * c.seq;
    uint8_t tokens[B * T], targets[B * T];
    fill_tokens(tokens, targets, n, k->L);
    float scale = 1.0f / (float)n;

    // The reference: every block keeps its insides, nothing is recomputed.
    GptActs plain;
    gpt_acts_alloc(&plain, &c, B, &mem);
    gpt_zero_grads(&g);
    double want_loss = gpt_forward(&g, &plain, tokens, targets, NULL);
    gpt_backward(&g, &plain, tokens, targets, scale, NULL);
    gpt_acts_free(&plain, &mem);
    float *want[MAX_L + 2];
    for (int l = 0; l < g.nlayers; l++) {
        size_t len = gpt_layer_size(&c, l);
        want[l] = malloc(len * sizeof(float));
        memcpy(want[l], g.grads[l], len * sizeof(float));
    }

    // The region's pass, its spans written into memory.
    LogText *logged = calloc(1, sizeof *logged);
    RunLog log;
    memset(&log, 0, sizeof log);
    snprintf(log.dir, sizeof log.dir, "(the check's memory)");
    log.world = 1;
    if (logged) log.events = fopencookie(logged, "w", (cookie_io_functions_t){.write = log_text_write});
    if (!log.events) todo_fail("%s: could not open a log in memory", head);
    sb_init(&log.line);
    const char *text = logged->text;
    const int64_t us_before = 1000000;  // x->recompute_us adds up: it must not fall below this
    CkptPass x = {.log = &log, .step = 1, .mb = 0, .recompute_us = us_before};
    GptActs acts;
    ckpt_acts_alloc(&acts, &c, B, &p, &mem);
    gpt_zero_grads(&g);
    double got_loss = ckpt_forward_backward(&g, &p, &acts, tokens, targets, scale, &x);
    fflush(log.events);

    Event got[MAX_EVENTS];
    int ngot = read_events(text, got, MAX_EVENTS);

    // The gradients, from the head down: the highest layer that differs is where it went wrong.
    int bad = -1;
    size_t e = 0;
    for (int l = g.nlayers - 1; l >= 0 && bad < 0; l--) {
        size_t len = gpt_layer_size(&c, l);
        e = 0;
        while (e < len && memcmp(&g.grads[l][e], &want[l][e], sizeof(float)) == 0) e++;
        if (e < len) bad = l;
    }
    char spans[800];
    diagnose_spans(&s, k->L, got, ngot, bad, spans, sizeof spans);

    if (memcmp(&got_loss, &want_loss, sizeof got_loss) != 0)
        todo_fail("%s: the pass returned the loss sum %.9g, expected %.9g (the plain forward's, bitwise)%s%s", head,
                  got_loss, want_loss, spans[0] ? "\n" : "", spans);
    if (bad >= 0) {
        GptTensor t[GPT_MAX_TENSORS];
        int nt = gpt_layer_tensors(&c, bad, t), ti = 0;
        while (ti < nt - 1 && e >= t[ti].offset + t[ti].count) ti++;
        char name[96], w[64];
        gpt_tensor_name(name, sizeof name, &c, bad, &t[ti]);
        layer_words(bad, k->L, w, sizeof w);
        todo_fail("%s: layer %d's gradient (%s) differs from the plain backward at element %zu (%s[%zu]): expected "
                  "%.9g, got %.9g\n%s",
                  head, bad, w, e, name, e - t[ti].offset, want[bad][e], g.grads[bad][e],
                  spans[0] ? spans
                           : "the spans are right (each segment's blocks first..last, just before the backward of its "
                             "last block), so what ran is not the forward they name: does each recompute call "
                             "gpt_layer_forward(ops, c, j, g->params[j], a, tokens, targets, scratch) with the "
                             "block's own j?");
    }
    if (spans[0]) todo_fail("%s: the gradients are right, but the spans are not: %s", head, spans);

    // x->recompute_us: at least the recompute spans' time, added to what it held.
    int64_t span_us = 0;
    for (const char *line = text; (line = strstr(line, "\"name\":\"recompute\"")); line++) {
        const char *t0 = strstr(line, "\"t0_us\":"), *t1 = strstr(line, "\"t1_us\":");
        if (t0 && t1) span_us += atoll(t1 + 8) - atoll(t0 + 8);
    }
    if (x.recompute_us < us_before)
        todo_fail("%s: x->recompute_us went from %lld to %lld: it adds up over the passes of a step (+=), it is not "
                  "set to this pass's time",
                  head, (long long)us_before, (long long)x.recompute_us);
    if (s.nseg == 0 && x.recompute_us != us_before)
        todo_fail("%s: nothing is recomputed, yet x->recompute_us grew by %lld us", head,
                  (long long)(x.recompute_us - us_before));
    if (2 * (x.recompute_us - us_before) < span_us)  // half: slack for the clock, never 0 for spans > 1 us
        todo_fail("%s: x->recompute_us grew by %lld us, but the recompute spans took %lld us: time the whole "
                  "recompute of each segment (from before its first block to after its last) and add it",
                  head, (long long)(x.recompute_us - us_before), (long long)span_us);

    gpt_acts_free(&acts, &mem);
    for (int l = 0; l < g.nlayers; l++) free(want[l]);
    gpt_destroy(&g);
    mem_destroy(&mem);
    fclose(log.events);
    sb_free(&log.line);
    free(logged);
}

static void check_recompute(void) {
    static const Case cases[] = {
        {"every", 4, GPT_ATTN_FLASH, 0}, {"2", 5, GPT_ATTN_FLASH, 0},    {"3", 7, GPT_ATTN_FLASH, 0},
        {"none", 3, GPT_ATTN_FLASH, 0},  {"sqrt", 6, GPT_ATTN_FLASH, 0}, {"sqrt", 5, GPT_ATTN_FLASH, 0},
        {"sqrt", 7, GPT_ATTN_FLASH, 0},  {"sqrt", 2, GPT_ATTN_FLASH, 0}, {"sqrt", 1, GPT_ATTN_FLASH, 0},
        {"sqrt", 5, GPT_ATTN_NAIVE, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i]);
}

int main(int argc, char **argv) {
    static const TodoCheck checks[] = {{"ckpt-recompute", check_recompute}};
    return todo_main(argc, argv, checks, 1);
}
