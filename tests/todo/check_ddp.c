// check_ddp.c — the checks of DDP's two regions (labs/05-ddp/ddp.c): `make check TODO=ddp-buckets`,
// `make check TODO=ddp-overlap`.
//
// Both regions live in static functions of the lab's main file, which is included here (its
// main renamed) so that they can be called alone, on a tiny GPT (C = 4, T = 4, one head): its
// layers are the embedding (wte 1024 floats, wpe 16), L blocks of 12 tensors (4 to 64 floats)
// and the head (ln_f 4 + 4, lm_head 1024), so tensor sizes differ by 256 times.
//
// ddp-buckets: buckets_build() on that model with L = 6 (77 tensors) and L = 2 (29), against
// the buckets computed here from the rule (layers L+1 down to 0, each layer's tensors last to
// first; a tensor joins the current bucket unless it already holds >= cap floats or 64
// segments). The caps, in the order they run, and why:
//   100 floats     buckets of several tensors that overshoot the cap (a tensor is never
//                  split) and span layer boundaries;
//   1032 floats    exactly the head layer: the first bucket holds exactly the cap once it has
//                  the head's three tensors and must close there (">= cap", not "> cap");
//   1 float        one tensor per bucket (per-tensor sync's layout: 77 buckets);
//   the whole model and more
//                  L = 6: the 64-segment limit closes bucket 0, bucket 1 takes the other 13;
//                  L = 2: 29 tensors, one bucket.
// A wrong layout is described the way a student reads it: which bucket, which segment, which
// tensor (by name and layer), and which usual mistake it looks like (a tensor split, missing
// or twice, the wrong order, a bucket closed early or late, a wrong last_layer).
//
// ddp-overlap: on_layer_backward_done() on N = 1..4 ranks (collectives forced to `direct`, so
// that the ring, a region of its own, plays no part), with buckets built here (not by
// buckets_build, the other region) for three caps on L = 6: 1 float (several buckets complete
// at each layer: all of them start, not only the first), 100 floats (buckets that span two
// layers start at the lower one) and the whole model (no bucket completes before layer 1:
// nothing may start at layers 7..2). Rank r's gradient at float i of the model (counted over
// all layers) is 2^r + 16 i, so a sum says which ranks it added (its low bits) and which
// float it came from; each bucket's buffer starts as -(1000 + k), so a bucket never packed is
// told apart. The check calls the hook for layers L+1 down to 0, as the backward pass does,
// and after each call checks which buckets' all-reduces have started (their DistWork) and
// bs->next_to_start: every bucket whose last layer is this one or above, none below (its
// gradients are not all made yet), on the bucket's own buffer and length, tagged with its
// index. The region's calls to dist_all_reduce_start pass through a wrapper that reads the
// bucket's buffer as the all-reduce starts: packing after the start is a race that the values
// alone would not show (here the communication thread happens to read the buffer late
// enough), and a blocking dist_all_reduce is no overlap at all. Then it waits for them, unpacks (here), and
// checks every gradient float against the sum computed here, and the records' tags
// (dist_drain_records): one all-reduce per bucket, in bucket order.
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/comm/dist.h"

// The region's all-reduces go through these two (defined below), which look at the bucket's
// buffer at the moment its all-reduce starts: the communication thread may read it at once,
// so it must already be packed (a race that a fast backend hides).
static void watched_all_reduce_start(DistGroup *g, float *buf, size_t n, int tag, DistWork *w);
static void watched_all_reduce(DistGroup *g, float *buf, size_t n) __attribute__((unused));  // if the region calls it
#define dist_all_reduce_start watched_all_reduce_start
#define dist_all_reduce watched_all_reduce
#define main ddp_lab_main
#include "05-ddp/ddp.c"
#undef main
#undef dist_all_reduce
#undef dist_all_reduce_start

#include "todo.h"

#define MAX_TENSORS (8 * GPT_MAX_TENSORS)
#define NEVER_PACKED(k) (-(1000.0f + (float)(k)))

// ---- the model and the reference layout ----------------------------------------------------

typedef struct {
    int layer;
    size_t offset, count;  // floats within the layer's flat buffer
    size_t first;          // its first float counted over the whole model (layer 0 first)
    char name[48];
} Tensor;

typedef struct {
    int tensor[64];  // indices into the backward-order list of tensors
    int nseg;
    size_t count;
    int last_layer;
} RefBucket;

static GptConfig tiny_config(int layers) {
    return (GptConfig){.vocab = GPT_VOCAB, .seq = 4, .layers = layers, .dim = 4, .heads = 1};
}

// Every tensor of the model in the order the backward pass makes their gradients: layers
// L+1 down to 0, each layer's tensors last to first (gpt_layer_tensors is the layout only).
static int backward_order(const GptConfig *c, Tensor *out) {
    int nl = gpt_layer_count(c), n = 0;
    size_t layer_first[16] = {0};
    for (int l = 1; l < nl; l++) layer_first[l] = layer_first[l - 1] + gpt_layer_size(c, l - 1);
    for (int l = nl - 1; l >= 0; l--) {
        GptTensor t[GPT_MAX_TENSORS];
        int k = gpt_layer_tensors(c, l, t);
        for (int i = k - 1; i >= 0; i--) {
            Tensor *x = &out[n++];
            x->layer = l, x->offset = t[i].offset, x->count = t[i].count, x->first = layer_first[l] + t[i].offset;
            gpt_tensor_name(x->name, sizeof x->name, c, l, &t[i]);
        }
    }
    return n;
}

// The rule, written again here: a tensor joins the current bucket unless it already holds at
// least cap floats or 64 segments.
static int reference_buckets(const Tensor *t, int nt, size_t cap, RefBucket *b) {
    int n = 0;
    for (int i = 0; i < nt; i++) {
        if (n == 0 || b[n - 1].count >= cap || b[n - 1].nseg == 64) memset(&b[n++], 0, sizeof *b);
        RefBucket *cur = &b[n - 1];
        cur->tensor[cur->nseg++] = i;
        cur->count += t[i].count;
        cur->last_layer = t[i].layer;
    }
    return n;
}

// The tensor a segment is, exactly (-1 if none).
static int tensor_of(const Tensor *t, int nt, int layer, size_t offset, size_t count) {
    for (int i = 0; i < nt; i++)
        if (t[i].layer == layer && t[i].offset == offset && t[i].count == count) return i;
    return -1;
}

// The tensor that holds float `offset` of a layer (-1 if none).
static int tensor_at(const Tensor *t, int nt, int layer, size_t offset) {
    for (int i = 0; i < nt; i++)
        if (t[i].layer == layer && offset >= t[i].offset && offset < t[i].offset + t[i].count) return i;
    return -1;
}

static void describe_ref(char *out, size_t n, const Tensor *t, const RefBucket *b) {
    size_t used = (size_t)snprintf(out, n, "[");
    for (int s = 0; s < b->nseg && used < n; s++) {
        if (s == 4 && b->nseg > 5) {
            used += (size_t)snprintf(out + used, n - used, ", ... %d more", b->nseg - 4);
            break;
        }
        const Tensor *x = &t[b->tensor[s]];
        used += (size_t)snprintf(out + used, n - used, "%slayer %d '%s' %zu floats", s ? ", " : "", x->layer, x->name,
                                 x->count);
    }
    if (used < n) snprintf(out + used, n - used, "] (%d segment(s), %zu floats, last_layer %d)", b->nseg, b->count,
                           b->last_layer);
}

static void describe_got(char *out, size_t n, const Tensor *t, int nt, const Bucket *b) {
    size_t used = (size_t)snprintf(out, n, "[");
    for (int s = 0; s < b->nseg && used < n; s++) {
        if (s == 4 && b->nseg > 5) {
            used += (size_t)snprintf(out + used, n - used, ", ... %d more", b->nseg - 4);
            break;
        }
        const Segment *g = &b->seg[s];
        int i = tensor_of(t, nt, g->layer, g->offset, g->count);
        if (i >= 0)
            used += (size_t)snprintf(out + used, n - used, "%slayer %d '%s' %zu floats", s ? ", " : "", g->layer,
                                     t[i].name, g->count);
        else
            used += (size_t)snprintf(out + used, n - used, "%slayer %d floats %zu..%zu", s ? ", " : "", g->layer,
                                     g->offset, g->offset + g->count - 1);
    }
    if (used < n) snprintf(out + used, n - used, "] (%d segment(s), %zu floats, last_layer %d)", b->nseg, b->count,
                           b->last_layer);
}

// ---- ddp-buckets ---------------------------------------------------------------------------

// Set for a case where only the 64-segment limit closes a bucket: a region without the limit
// writes a 65th segment past the end of Bucket.seg, over the bucket's other fields, and what
// is then read back can be anything; the message says so.
static const char *segment_note = "";

static void bucket_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void bucket_fail(const char *fmt, ...) {
    char text[1800];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    todo_fail("%s%s", text, segment_note);
}

// The student's buckets against the reference; fails with the first difference, in words.
static void compare_buckets(const char *head, const GptConfig *c, const Buckets *bs, size_t cap) {
    Tensor t[MAX_TENSORS];
    static RefBucket ref[MAX_TENSORS];
    int nl = gpt_layer_count(c), nt = backward_order(c, t), nref = reference_buckets(t, nt, cap, ref);
    char want[700], got[700];

    // Shape first: nothing below reads past what the region wrote.
    if (bs->n < 1 || bs->n > nl * GPT_MAX_TENSORS)
        bucket_fail("%s: %d bucket(s) were made; there should be %d (bs->n counts the buckets the region "
                    "filled, at most one per tensor)",
                    head, bs->n, nref);
    for (int k = 0; k < bs->n; k++) {
        const Bucket *b = &bs->b[k];
        if (b->nseg < 1 || b->nseg > 64)
            bucket_fail("%s: bucket %d has %d segment(s): every bucket holds 1 to 64 (a tensor opens a new "
                        "bucket when the current one holds 64)",
                        head, k, b->nseg);
        for (int s = 0; s < b->nseg; s++) {
            const Segment *g = &b->seg[s];
            if (g->layer < 0 || g->layer >= nl || g->count == 0 || g->offset + g->count > gpt_layer_size(c, g->layer))
                bucket_fail("%s: bucket %d, segment %d is layer %d, floats %zu..+%zu: not a tensor of the model "
                            "(layers 0..%d; a Segment is {layer, the tensor's offset, its count})",
                            head, k, s, g->layer, g->offset, g->count, nl - 1);
        }
    }

    // Every segment a whole tensor, and every tensor in exactly one segment.
    int where_b[MAX_TENSORS], where_s[MAX_TENSORS], order[MAX_TENSORS], norder = 0;
    for (int i = 0; i < nt; i++) where_b[i] = -1;
    for (int k = 0; k < bs->n; k++)
        for (int s = 0; s < bs->b[k].nseg; s++) {
            const Segment *g = &bs->b[k].seg[s];
            int i = tensor_of(t, nt, g->layer, g->offset, g->count);
            if (i < 0) {
                size_t last = g->offset + g->count - 1;
                int a = tensor_at(t, nt, g->layer, g->offset), z = tensor_at(t, nt, g->layer, last);
                describe_got(got, sizeof got, t, nt, &bs->b[k]);
                if (a >= 0 && a == z)
                    bucket_fail("%s: a tensor split: bucket %d, segment %d holds floats %zu..%zu of layer %d, a part "
                                "of '%s' (%zu floats at %zu). A tensor joins a bucket whole, even past the cap (as "
                                "in PyTorch)\nbucket %d is %s",
                                head, k, s, g->offset, last, g->layer, t[a].name, t[a].count, t[a].offset, k, got);
                bucket_fail("%s: bucket %d, segment %d holds floats %zu..%zu of layer %d, which is not one "
                            "tensor%s%s%s: each tensor is a Segment of its own {layer, offset, count} "
                            "(gpt_layer_tensors)\nbucket %d is %s",
                            head, k, s, g->offset, last, g->layer, a >= 0 ? " (from '" : "", a >= 0 ? t[a].name : "",
                            a >= 0 ? "' on)" : "", k, got);
            }
            if (where_b[i] >= 0)
                bucket_fail("%s: tensor twice: '%s' (layer %d) is in bucket %d, segment %d and again in bucket %d, "
                            "segment %d: its gradient would be summed twice",
                            head, t[i].name, t[i].layer, where_b[i], where_s[i], k, s);
            where_b[i] = k, where_s[i] = s, order[norder++] = i;
        }
    for (int i = 0; i < nt; i++)
        if (where_b[i] < 0)
            bucket_fail("%s: tensor missing: '%s' (layer %d, %zu floats) is in no bucket, so its gradient is never "
                        "summed over the ranks (every tensor of layers 0..%d goes into a bucket)",
                        head, t[i].name, t[i].layer, t[i].count, nl - 1);

    // The order: the backward pass's, bucket after bucket, segment after segment.
    for (int j = 0; j < nt; j++) {
        if (order[j] == j) continue;
        const Tensor *x = &t[order[j]], *y = &t[j];
        const char *hint = x->layer != y->layer ? "the layers go from the head (layer L+1) down to the embedding (0)"
                                                : "within a layer the tensors go last to first (the backward pass "
                                                  "makes a layer's last tensor's gradient first)";
        bucket_fail("%s: wrong order (the backward pass makes layer %d's gradients first): bucket %d, segment %d "
                    "is '%s' (layer %d), but the backward pass makes '%s' (layer %d) then: %s",
                    head, nl - 1, where_b[order[j]], where_s[order[j]], x->name, x->layer, y->name, y->layer, hint);
    }

    // The boundaries: the order is right, so the first bucket whose length differs closed
    // early or late.
    for (int k = 0; k < bs->n && k < nref; k++) {
        const Bucket *b = &bs->b[k];
        const RefBucket *r = &ref[k];
        describe_ref(want, sizeof want, t, r);
        describe_got(got, sizeof got, t, nt, b);
        size_t held = 0;
        for (int s = 0; s < b->nseg; s++) held += b->seg[s].count;
        if (b->nseg < r->nseg) {
            const Tensor *next = &t[r->tensor[b->nseg]];
            bucket_fail("%s: bucket %d closed too early: holding %zu floats in %d segment(s), under the cap of %zu "
                        "floats and under 64 segments, it should also take '%s' (layer %d, %zu floats)%s\n"
                        "bucket %d should be %s,\ngot %s",
                        head, k, held, b->nseg, cap, next->name, next->layer, next->count,
                        held + next->count > cap ? ": a bucket closes once it HOLDS at least cap floats, not when "
                                                   "the next tensor would take it past the cap"
                        : next->layer != b->seg[b->nseg - 1].layer ? ": a bucket does not stop at a layer's end; it "
                                                                     "may take tensors of several layers"
                                                                   : "",
                        k, want, got);
        }
        if (b->nseg > r->nseg) {
            const Tensor *extra = &t[r->tensor[r->nseg - 1] + 1];
            int full = r->count >= cap;
            bucket_fail("%s: bucket %d should close after %d segment(s), %s: it then holds %zu floats%s, so '%s' "
                        "(layer %d) opens bucket %d\nbucket %d should be %s,\ngot %s",
                        head, k, r->nseg, full ? "having reached the cap" : "with its 64th segment", r->count,
                        full ? " (at least the cap)" : " in 64 segments, the most a bucket holds", extra->name,
                        extra->layer, k + 1, k, want, got);
        }
        if (b->count != held)
            bucket_fail("%s: bucket %d's count is %zu floats, but its segments hold %zu (count is what its "
                        "all-reduce moves: the sum of its tensors' counts)\nbucket %d is %s",
                        head, k, b->count, held, k, got);
        if (b->last_layer != r->last_layer)
            bucket_fail("%s: bucket %d's last_layer should be %d, the layer of its last tensor ('%s'), got %d: the "
                        "bucket is complete, and its all-reduce can start, only once that layer's backward is "
                        "done\nbucket %d is %s",
                        head, k, r->last_layer, t[r->tensor[r->nseg - 1]].name, b->last_layer, k, got);
    }
    if (bs->n != nref) bucket_fail("%s: %d bucket(s) were made, there should be %d", head, bs->n, nref);
}

static void buckets_case(int layers, size_t cap, const char *why) {
    GptConfig c = tiny_config(layers);
    Mem mem;
    mem_init(&mem, &device_cpu);
    Gpt g;
    gpt_create(&g, &c, &mem, 1);
    Buckets bs = {0};
    char head[300];
    snprintf(head, sizeof head, "cap %zu float%s (%s), L = %d blocks (layers 0..%d, %d tensors)", cap,
             cap == 1 ? "" : "s", why, layers, g.nlayers - 1, 2 + 12 * layers + 3);
    segment_note = cap >= gpt_num_params(&c) && 2 + 12 * layers + 3 > 64
                       ? "\n(with this cap only the 64-segment limit closes a bucket: Bucket.seg holds 64 segments, "
                         "and a 65th is written past its end, over the bucket's nseg and count)"
                       : "";
    todo_context("buckets_build: %s%s", head, segment_note);
    buckets_build(&bs, &g, cap, 0, &mem);
    compare_buckets(head, &c, &bs, cap);
    free(bs.b);
    gpt_destroy(&g);
    mem_destroy(&mem);
}

static void check_buckets(void) {
    // 100 first: a region that splits tensors makes about 40 buckets there, but one per float
    // at a cap of 1, more than the array buckets_build allocates.
    buckets_case(6, 100, "several tensors per bucket, across layers");
    buckets_case(6, 1032, "the head layer fills the first bucket exactly");
    buckets_case(6, 1, "one tensor per bucket");
    buckets_case(6, (size_t)1 << 30, "more than the model: the 64-segment limit");
    buckets_case(2, (size_t)1 << 30, "more than the model: one bucket");
}

// ---- ddp-overlap ---------------------------------------------------------------------------

static void ranges(const int *on, int n, char *out, size_t len) {
    size_t used = 0;
    out[0] = 0;
    for (int k = 0; k < n && used < len; k++) {
        if (!on[k] || (k > 0 && on[k - 1])) continue;
        int z = k;
        while (z + 1 < n && on[z + 1]) z++;
        if (z > k) used += (size_t)snprintf(out + used, len - used, "%s%d..%d", used ? ", " : "", k, z);
        else used += (size_t)snprintf(out + used, len - used, "%s%d", used ? ", " : "", k);
    }
    if (!used) snprintf(out, len, "none");
}

// Rank r's gradient at float i of the model (counted over all layers).
static float grad_value(int rank, size_t i) { return (float)(1u << rank) + 16.0f * (float)i; }

// What the watched calls compare with: the buckets of the case running on this rank (NULL
// outside ddp-overlap, where they only pass the call on).
static struct {
    const Buckets *bs;
    const Tensor *t;
    const RefBucket *ref;
    int rank, layer;
    const char *head;
} watch;

static int watched_bucket(const float *buf) {
    for (int k = 0; watch.bs && k < watch.bs->n; k++)
        if (watch.bs->b[k].flat == buf) return k;
    return -1;
}

static void watched_all_reduce_start(DistGroup *g, float *buf, size_t n, int tag, DistWork *w) {
    int k = watched_bucket(buf);
    if (k >= 0) {
        // The buffer now: this rank's gradients of the bucket's tensors, one after the other.
        const float *f = buf;
        for (int j = 0; j < watch.ref[k].nseg; j++) {
            const Tensor *x = &watch.t[watch.ref[k].tensor[j]];
            for (size_t e = 0; e < x->count && f < buf + n; e++, f++) {
                float want = grad_value(watch.rank, x->first + e);
                if (*f == want) continue;
                if (*f == NEVER_PACKED(k))
                    todo_fail("%s: rank %d: after layer %d's backward, bucket %d's all-reduce started on a buffer "
                              "that was not packed (at segment %d, '%s', it still holds what it held before): "
                              "bucket_pack(b, s->model) first, then dist_all_reduce_start: the communication thread "
                              "may read b->flat at once",
                              watch.head, watch.rank, watch.layer, k, j, x->name);
                todo_fail("%s: rank %d: after layer %d's backward, bucket %d's all-reduce started on a buffer that "
                          "holds %g at segment %d ('%s', layer %d) element %zu, where this rank's gradient is %g: "
                          "bucket_pack(b, s->model) copies the bucket's tensors' gradients in, segment after segment",
                          watch.head, watch.rank, watch.layer, k, *f, j, x->name, x->layer, e, want);
            }
        }
    }
    dist_all_reduce_start(g, buf, n, tag, w);
}

static void watched_all_reduce(DistGroup *g, float *buf, size_t n) {
    int k = watched_bucket(buf);
    if (k >= 0)
        todo_fail("%s: rank %d: after layer %d's backward, bucket %d was all-reduced by dist_all_reduce, which "
                  "waits for it: the backward pass would stand still meanwhile. dist_all_reduce_start(group, "
                  "b->flat, b->count, %d, &b->work) runs it on the communication thread while the backward pass goes "
                  "on (sync_gradients waits for it)",
                  watch.head, watch.rank, watch.layer, k, k);
    dist_all_reduce(g, buf, n);
}

static void overlap_case(Dist *d, int layers, size_t cap) {
    int p = d->world, r = d->rank;
    GptConfig c = tiny_config(layers);
    Mem mem;
    mem_init(&mem, &device_cpu);
    Gpt model;
    gpt_create(&model, &c, &mem, 1);
    int nl = model.nlayers;
    Tensor t[MAX_TENSORS];
    static RefBucket ref[MAX_TENSORS];
    int nt = backward_order(&c, t), nb = reference_buckets(t, nt, cap, ref);

    // Rank r's gradients: 2^r + 16 i at float i of the model.
    float *host = malloc(gpt_num_params(&c) * sizeof(float));
    for (size_t i = 0; i < gpt_num_params(&c); i++) host[i] = grad_value(r, i);
    for (int l = 0, first = 0; l < nl; first += (int)gpt_layer_size(&c, l), l++)
        device_from_host(mem.dev, model.grads[l], host + first, gpt_layer_size(&c, l) * sizeof(float));

    // The buckets, built here (buckets_build is the other region).
    Sync s = {.mode = SYNC_OVERLAP, .model = &model, .group = &d->world_group};
    Buckets *bs = &s.buckets;
    bs->b = calloc_check((size_t)nb, sizeof *bs->b);
    bs->n = nb;
    for (int k = 0; k < nb; k++) {
        Bucket *b = &bs->b[k];
        for (int j = 0; j < ref[k].nseg; j++) {
            const Tensor *x = &t[ref[k].tensor[j]];
            b->seg[j] = (Segment){x->layer, x->offset, x->count};
        }
        b->nseg = ref[k].nseg, b->count = ref[k].count, b->last_layer = ref[k].last_layer;
        b->flat = mem_alloc_floats(&mem, MEM_COMM, b->count, "DDP bucket");
        for (size_t i = 0; i < b->count; i++) b->flat[i] = NEVER_PACKED(k);
    }
    DistRecord rec[MAX_TENSORS + 8];
    while (dist_drain_records(d, rec, MAX_TENSORS + 8) > 0) continue;  // joining the ranks left some
    char head[200];
    snprintf(head, sizeof head, "%d rank(s), cap %zu float%s: %d bucket(s) over layers %d..0", p, cap,
             cap == 1 ? "" : "s", nb, nl - 1);

    // The backward pass, layer by layer: after layer l, exactly the buckets whose last layer is
    // l or above have started, each on its own buffer, length and tag.
    int want[MAX_TENSORS], got[MAX_TENSORS];
    watch.bs = bs, watch.t = t, watch.ref = ref, watch.rank = r, watch.head = head;
    for (int l = nl - 1; l >= 0; l--) {
        todo_context("%s: on_layer_backward_done after layer %d's backward", head, l);
        watch.layer = l;
        on_layer_backward_done(&s, GPT_BWD, l, 0, 0);
        int nwant = 0;
        for (int k = 0; k < nb; k++) {
            want[k] = ref[k].last_layer >= l, nwant += want[k];
            got[k] = bs->b[k].work.group != NULL;
        }
        for (int k = 0; k < nb; k++)
            if (got[k] && !want[k]) {
                const Tensor *x = &t[ref[k].tensor[ref[k].nseg - 1]];
                todo_fail("%s: rank %d: after layer %d's backward, bucket %d's all-reduce started, but bucket %d holds "
                          "layer %d's tensors ('%s' last): it cannot start before layer %d's backward, which makes "
                          "them (a bucket is complete when the layer of its LAST tensor, its last_layer, is done)",
                          head, r, l, k, k, x->layer, x->name, x->layer);
            }
        for (int k = 0; k < nb; k++)
            if (want[k] && !got[k]) {
                char a[200], b[200];
                ranges(want, nb, a, sizeof a);
                ranges(got, nb, b, sizeof b);
                todo_fail("%s: rank %d: after layer %d's backward, buckets %s (whose last layer is %d or above) should "
                          "have started; you started %s\nbucket %d's last tensor is '%s' (layer %d): every bucket this "
                          "layer completes starts now, in order (there may be several, or none)",
                          head, r, l, a, l, b, k, t[ref[k].tensor[ref[k].nseg - 1]].name, ref[k].last_layer);
            }
        for (int k = 0; k < nb; k++) {
            const DistWork *w = &bs->b[k].work;
            if (!got[k]) continue;
            if (w->coll != DIST_ALL_REDUCE)
                todo_fail("%s: rank %d: bucket %d started a %s: the bucket's gradients are summed over the ranks, an "
                          "all-reduce (dist_all_reduce_start)",
                          head, r, k, dist_coll_name(w->coll));
            if (w->in != bs->b[k].flat || w->out != bs->b[k].flat)
                todo_fail("%s: rank %d: bucket %d's all-reduce runs on %p, not on the bucket's buffer b->flat (%p), "
                          "where bucket_pack put its gradients (and where sync_gradients unpacks the sum from)",
                          head, r, k, w->out, (void *)bs->b[k].flat);
            if (w->n != bs->b[k].count)
                todo_fail("%s: rank %d: bucket %d's all-reduce covers %zu floats; the bucket holds b->count = %zu",
                          head, r, k, w->n, bs->b[k].count);
            if (w->tag != k)
                todo_fail("%s: rank %d: bucket %d's all-reduce is tagged %d: the tag is the bucket's index, %d (the "
                          "run log's spans name the bucket by it)",
                          head, r, k, w->tag, k);
        }
        if (bs->next_to_start != nwant)
            todo_fail("%s: rank %d: after layer %d's backward, bs->next_to_start should be %d (buckets 0..%d started; "
                      "it is the next one to start), got %d",
                      head, r, l, nwant, nwant - 1, bs->next_to_start);
    }

    watch.bs = NULL;
    // Wait, unpack here, and check every float: the sum over the ranks.
    todo_context("%s: waiting for the buckets' all-reduces", head);
    for (int k = 0; k < nb; k++) dist_wait(&bs->b[k].work);
    size_t nrec = dist_drain_records(d, rec, MAX_TENSORS + 8);
    if (nrec != (size_t)nb)
        todo_fail("%s: rank %d: %zu collective(s) ran for %d bucket(s): one all-reduce per bucket", head, r, nrec, nb);
    for (int k = 0; k < nb; k++)
        if (rec[k].coll != DIST_ALL_REDUCE || rec[k].tag != k || rec[k].count != bs->b[k].count)
            todo_fail("%s: rank %d: collective %d was a %s of %zu floats tagged %d; bucket %d's all-reduce of %zu "
                      "floats, tagged %d, should be there (the buckets start in order)",
                      head, r, k, dist_coll_name(rec[k].coll), rec[k].count, rec[k].tag, k, bs->b[k].count, k);
    for (int k = 0; k < nb; k++) {
        const Bucket *b = &bs->b[k];
        const float *f = b->flat;
        for (int j = 0; j < b->nseg; j++) {
            const Tensor *x = &t[ref[k].tensor[j]];
            for (size_t e = 0; e < x->count; e++, f++) {
                size_t i = x->first + e;
                double want_v = (double)((1u << p) - 1) + 16.0 * p * (double)i;
                if (*f == want_v) continue;
                char why[400] = "";
                if (*f == NEVER_PACKED(k) * (float)p)
                    snprintf(why, sizeof why, "\nthat is what bucket %d's buffer held before: the bucket was never "
                                              "packed (bucket_pack(b, s->model) copies its gradients into b->flat "
                                              "before the all-reduce starts)", k);
                else if (*f == grad_value(r, i))
                    snprintf(why, sizeof why, "\nthat is rank %d's own gradient: it was never summed", r);
                else if (*f > 0 && (float)(long)*f == *f) {
                    long v = (long)*f;
                    unsigned mask = (unsigned)(v & 15);
                    int added = __builtin_popcount(mask);
                    long from = added && (v - (long)mask) % (16L * added) == 0 ? (v - (long)mask) / (16L * added) : -1;
                    if (from >= 0 && (size_t)from != i)
                        snprintf(why, sizeof why, "\nthat is the sum at float %ld of the model, not %zu: the bucket "
                                                  "was packed from the wrong place",
                                 from, i);
                    else if (added && mask != (1u << p) - 1)
                        snprintf(why, sizeof why, "\nthat sums %d of the %d ranks' gradients", added, p);
                } else
                    snprintf(why, sizeof why, "\nwas the bucket packed completely before its all-reduce started?");
                todo_fail("%s: rank %d, bucket %d, layer %d '%s' element %zu: after the all-reduce it should be the "
                          "sum over the ranks, %.0f; got %g%s",
                          head, r, k, x->layer, x->name, e, want_v, *f, why);
            }
        }
    }
    for (int k = 0; k < nb; k++) mem_free(&mem, bs->b[k].flat);
    free(bs->b);
    free(host);
    gpt_destroy(&model);
    mem_destroy(&mem);
}

static void overlap_rank(Dist *d, void *arg) {
    (void)arg;
    overlap_case(d, 6, 1);
    overlap_case(d, 6, 100);
    overlap_case(d, 6, (size_t)1 << 30);
}

static void check_overlap(void) {
    for (int p = 1; p <= 4; p++) todo_ranks(p, DIST_ALGO_DIRECT, 5, overlap_rank, NULL);
}

int main(int argc, char **argv) {
    static const TodoCheck checks[] = {{"ddp-buckets", check_buckets}, {"ddp-overlap", check_overlap}};
    return todo_main(argc, argv, checks, 2);
}
