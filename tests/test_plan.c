// test_plan.c — `shardlab plan`: the bytes per GPU it plans, against the labs and against
// formulas written here.
//
// usage: test_plan SHARDLAB LABS_DIR
// Checked:
//   1. every layout the planner offers, at small shapes: `plan ... --check` runs the lab and
//      finds every figure every rank logged (each category after the first step and at the
//      peak) equal to the plan, to the byte;
//   2. at GPT-2's shapes, --json against the formulas computed here from the shape alone: Psi,
//      a replica's 4/4/8 Psi, ZeRO-3's padded shards Psi'/N, a micro-batch's activations, a
//      pipeline stage's parameters and the activations it holds (1F1B and interleaved), and
//      whether it fits a 24 GB card;
//   3. what no lab can run (heads not dividing the width, more stages than blocks, a batch
//      that does not split, tp, unknown names): exit 2 and one line, nothing on stdout; a batch
//      that does not split is told one that does, and the planner takes what it suggests;
//   4. the ZeRO paper's figure 1 (Psi = 7.5B on 64 GPUs, mixed precision, K = 12): the four
//      stages' model state by the paper's names, in GB (and GiB) as the paper prints them,
//      against its formulas written here; the model state totalled, the units said, Psi'
//      defined and equal to the padding counted here; --json's layout (ZeRO's stage, offload)
//      and every option the lab takes;
//   5. --longest: the plan it shows fits --budget and the next --seq does not, for single, cp,
//      tp and pp; cp's ranks hold a longer sequence than single; none fits: exit 1; --check at
//      the --seq it found logs what the plan says.
#include <ctype.h>
#include <math.h>

#include "common/harness/catalog.h"
#include "common/runfiles/json.h"
#include "labtest.h"
#include "test.h"

static char shardlab[PATH_MAX];

// `shardlab plan ARGS...` (one string, split at spaces) with stdout and stderr captured.
static int plan(const char *tag, const char *args) {
    char buf[1024], *argv[48] = {shardlab, "plan"};
    int argc = 2;
    snprintf(buf, sizeof buf, "%s", args);
    for (char *w = strtok(buf, " "); w && argc < 47; w = strtok(NULL, " ")) argv[argc++] = w;
    argv[argc] = NULL;
    return run(argv, tag);
}

// ---- 1. measured = planned, for every layout --------------------------------------------------

static void check_layouts(void) {
    static const char *const layouts[] = {
        "single",
        "single --accum 2 --mixed",
        "ddp -n 2",
        "ddp -n 3 --batch 6 --sync per-tensor",
        "shard -n 2",
        "ckpt -n 2 --policy sqrt --layers 5",
        "ckpt -n 2 --policy 2 --layers 4 --attn naive",
        "zero -n 2 --stage 0",
        "zero -n 4 --stage 1",
        "zero -n 3 --stage 2 --mixed --batch 6",
        "zero -n 2 --stage 3",
        "zero -n 2 --stage 3 --mixed --offload",
        "fsdp -n 4 --prefetch",
        "fsdp -n 2 --no-reshard --mixed",
        "fsdp -n 4 --replicate 2",
        "fsdp -n 6 --replicate 2 --mixed --batch 6 --prefetch",
        "pp -n 4 --layers 6 --micro 4",
        "pp -n 4 --dp 2 --schedule gpipe",
        "pp -n 2 --schedule interleaved --chunks 2 --micro 4",
        "pp -n 4 --schedule interleaved --chunks 2 --micro 8 --layers 16",
        "pp -n 4 --schedule interleaved --chunks 2 --micro 4 --layers 11",
        "pp -n 2 --schedule interleaved --chunks 4 --micro 2 --batch 4 --layers 9 --mixed",
        "pp -n 3 --layers 7 --micro 2 --attn naive --mixed",
        "tp -n 4 --sp",
        "tp -n 4 --dp 2 --vocab-parallel --mixed",
        "cp -n 4",
        "cp -n 3 --layout contiguous",
        "cp -n 4 --kv all-gather --dp 2 --mixed",
        "cp -n 3 --seq 37 --accum 2",
    };
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        char args[256];
        snprintf(args, sizeof args, "%s --check", layouts[i]);
        int rc = plan("check", args);
        char *out = captured("check", "out"), *line = strstr(out, "check: ");
        int equal = -1, figures = -2;
        for (char *p = out; (p = strstr(p, "check: ")); p += 7)
            if (sscanf(p, "check: %d of %d figures equal", &equal, &figures) == 2) break;
        const char *n = strstr(layouts[i], "-n ");
        int ranks = n ? atoi(n + 3) : 1, pp = strncmp(layouts[i], "pp", 2) == 0;
        // Proves: the lab ran at that shape, and every rank's every planned figure (5 categories
        // after the first step and at the peak; a pipeline stage's 3) is what it logged.
        // A pipeline's comm (messages in flight) is not planned; tp's activations' peak is not.
        // The interleaved ones hold a mix of chunks at their peak (11 blocks over 8 chunks:
        // chunks of 2 and of 1 block; m = p: every forward first).
        int tp = strncmp(layouts[i], "tp", 2) == 0;
        int want = ranks * (pp ? 8 : tp ? 9 : 10);
        if (!EXPECT(rc == 0 && equal == want && figures == want, "plan %s --check: %d of %d figures equal (want %d; exit %d)",
                    layouts[i], equal, figures, want, rc))
            printf("# %s\n", one_line(line ? line : out));
        free(out);
    }
}

// ---- 2. the planner at scale, against the formulas --------------------------------------------

typedef struct {
    double L, C, NH, T, V;
} Shape;
static const Shape GPT2 = {12, 768, 12, 1024, 50257};

// The labs' GPT's units: the embedding (V + T) C, a block 12 C^2 + 13 C, the head 2 C + V C.
static double unit_size(const Shape *s, int u) {
    if (u == 0) return (s->V + s->T) * s->C;
    if (u <= s->L) return 12 * s->C * s->C + 13 * s->C;
    return 2 * s->C + s->V * s->C;
}

static double psi(const Shape *s) {
    double sum = 0;
    for (int u = 0; u < s->L + 2; u++) sum += unit_size(s, u);
    return sum;
}

static JsonValue *plan_json(const char *args) {
    char full[256];
    snprintf(full, sizeof full, "%s --json", args);
    int rc = plan("json", full);
    char *out = captured("json", "out"), err[128];
    JsonValue *v = rc == 0 ? json_parse(out, strlen(out), err, sizeof err) : NULL;
    if (!v) printf("# plan %s: exit %d, %s\n", full, rc, one_line(out));
    free(out);
    return v;
}

// v[k1][k2] (or v[k1]) as a number, NaN if it is not one.
static double num2(const JsonValue *v, const char *k1, const char *k2) {
    const JsonValue *x = v ? json_get(v, k1) : NULL;
    if (k2) x = x ? json_get(x, k2) : NULL;
    return x && x->type == JSON_NUMBER ? x->number : NAN;
}

static void check_scale(void) {
    int rc;
    char *out;
    // A replica of GPT-2's shape on 8 GPUs: Psi = (V+T)C + L(12C^2+13C) + 2C + VC, 4, 4 and 8
    // bytes of it; a micro-batch of 8 / 8 = 1 sequence: 4 B T (2C + 2 + V + L (16C + 4 + NH))
    // bytes of activations (flash attention).
    JsonValue *v = plan_json("ddp -n 8 --model gpt2");
    double P = psi(&GPT2), acts = 4.0 * 1 * GPT2.T * (2 * GPT2.C + 2 + GPT2.V + GPT2.L * (16 * GPT2.C + 4 + GPT2.NH));
    const JsonValue *st = v ? json_at(json_get(v, "stages"), 0) : NULL;
    EXPECT(num2(v, "model", "params") == P && num2(st, "after", "params") == 4 * P && num2(st, "after", "grads") == 4 * P &&
               num2(st, "after", "optim") == 8 * P && num2(st, "after", "comm") == 4 * P && num2(st, "after", "acts") == acts,
           "plan ddp -n 8 --model gpt2: Psi %.0f, 4 Psi, 4 Psi, 8 Psi, buckets 4 Psi, acts %.0f (got %.0f, %.0f, %.0f, %.0f, %.0f)", P,
           acts, num2(st, "after", "params"), num2(st, "after", "grads"), num2(st, "after", "optim"), num2(st, "after", "comm"),
           num2(st, "after", "acts"));
    json_free(v);

    // ZeRO-3 on 8: each unit padded to 8 equal shards; a rank keeps 4 bytes of each shard of
    // weights and gradients and 8 of optimizer state: 4, 4, 8 x sum ceil(n_u / 8).
    v = plan_json("zero -n 8 --stage 3 --model gpt2");
    double shards = 0;
    for (int u = 0; u < GPT2.L + 2; u++) shards += ceil(unit_size(&GPT2, u) / 8);
    st = v ? json_at(json_get(v, "stages"), 0) : NULL;
    EXPECT(num2(st, "after", "params") == 4 * shards && num2(st, "after", "grads") == 4 * shards &&
               num2(st, "after", "optim") == 8 * shards,
           "plan zero -n 8 --stage 3 --model gpt2: 4, 4, 8 x Psi'/N = %.0f elements", shards);
    json_free(v);

    // HSDP on 64 GPUs as 8 replicas x 8 shards: FSDP's formula at S = 8, each unit padded to
    // 8 shards of a multiple of 8 elements (so that each shard splits over the 8 replicas),
    // twice as much per rank as on 64 shards, and the layout says so.
    v = plan_json("fsdp -n 64 --replicate 8 --model gpt2 --batch 64");
    double hsdp = 0;
    for (int u = 0; u < GPT2.L + 2; u++) hsdp += ceil(unit_size(&GPT2, u) / 64) * 8;  // one shard: ceil(n_u / (S R)) R
    st = v ? json_at(json_get(v, "stages"), 0) : NULL;
    EXPECT(num2(st, "after", "params") == 4 * hsdp && num2(st, "after", "grads") == 4 * hsdp &&
               num2(st, "after", "optim") == 8 * hsdp && num2(v, "layout", "replicate") == 8,
           "plan fsdp -n 64 --replicate 8 --model gpt2 --batch 64: 4, 4, 8 x Psi'/S = %.0f elements, layout.replicate 8 (got %.0f, %g)",
           hsdp, num2(st, "after", "params") / 4, num2(v, "layout", "replicate"));
    json_free(v);
    rc = plan("hsdp", "fsdp -n 4 --replicate 2");
    out = captured("hsdp", "out");
    EXPECT(rc == 0 && strstr(out, "2 replicas x 2 shards") && strstr(out, "e Psi'/S") && strstr(out, "K Psi'/S") &&
               strstr(out, "N = R S"), "plan fsdp --replicate 2: the mesh, the formulas at S, and what R and S are");
    free(out);

    // A pipeline of 4 stages over GPT-2 medium's 24 blocks: 6 blocks a stage, the embedding on
    // the first, the head on the last. Under 1F1B with m = 8 stage s holds min(m, p - s)
    // micro-batches (of 8 / 8 = 1 sequence) at once: a middle stage's are its input, 4C bytes
    // a token, and 6 blocks of 4 (16C + 4 + NH) (flash attention, fp32).
    Shape med = {24, 1024, 16, 1024, 50257};
    v = plan_json("pp -n 4 --model gpt2-medium --micro 8");
    const JsonValue *stages = v ? json_get(v, "stages") : NULL;
    int ok = stages && stages->count == 4;
    for (int s = 0; ok && s < 4; s++) {
        double want = 6 * unit_size(&med, 1) + (s == 0 ? unit_size(&med, 0) : 0) + (s == 3 ? unit_size(&med, 25) : 0);
        const JsonValue *x = json_at(stages, (size_t)s);
        ok &= num2(x, "params", NULL) == want && num2(x, "after", "params") == 4 * want;
        if (s == 1 || s == 2) {
            double mb = med.T * (4 * med.C + 6 * 4 * (16 * med.C + 4 + med.NH));
            ok &= num2(x, "peak", "acts") - num2(x, "after", "acts") == (4 - s) * mb;
        }
    }
    EXPECT(ok, "plan pp -n 4 --model gpt2-medium: each stage 6 blocks (+ the embedding, + the head), 4 Psi_s; the middle "
               "stages' activations in flight 3 and 2 micro-batches of T (4C + 6 x 4 (16C + 4 + NH)) bytes");
    json_free(v);

    // The same pipeline interleaved, v = 2 chunks a stage: 8 chunks of 3 blocks, stage s
    // holding chunks s and s + 4. Megatron-LM's order warms up with 2 (p-s-1) + (v-1) p
    // forwards, then one forward and one backward: min(2 (p-s-1) + (v-1) p + 1, m v) (micro-
    // batch, chunk) pairs at once, 9 on stage 1 and 7 on stage 2, each T (4C + 3 x 4 (16C + 4
    // + NH)) bytes: a middle stage's two chunks are the same size.
    v = plan_json("pp -n 4 --model gpt2-medium --micro 8 --schedule interleaved --chunks 2");
    stages = v ? json_get(v, "stages") : NULL;
    double chunk = med.T * (4 * med.C + 3 * 4 * (16 * med.C + 4 + med.NH)), held[2] = {NAN, NAN};
    for (int s = 1; s <= 2 && stages && stages->count == 4; s++) {
        const JsonValue *x = json_at(stages, (size_t)s);
        held[s - 1] = num2(x, "peak", "acts") - num2(x, "after", "acts");
    }
    double p4 = 4, v2 = 2, m8 = 8, pairs1 = fmin(2 * (p4 - 1 - 1) + (v2 - 1) * p4 + 1, m8 * v2),
           pairs2 = fmin(2 * (p4 - 2 - 1) + (v2 - 1) * p4 + 1, m8 * v2);
    EXPECT(held[0] == pairs1 * chunk && held[1] == pairs2 * chunk,
           "plan pp -n 4 --model gpt2-medium --micro 8 --schedule interleaved --chunks 2: the middle stages hold %.0f and "
           "%.0f (micro-batch, chunk) pairs of %.0f bytes at the peak (got %.0f and %.0f bytes)", pairs1, pairs2, chunk,
           held[0], held[1]);
    json_free(v);

    // Tensor parallelism over 4 GPUs: each keeps the replicated parameters (embeddings, norms,
    // the row-parallel biases, the head) and 1/4 of the split ones, L (12 C^2 + 7 C).
    v = plan_json("tp -n 4 --model gpt2");
    double split = GPT2.L * (12 * GPT2.C * GPT2.C + 7 * GPT2.C), mine = (P - split) + split / 4;
    st = v ? json_at(json_get(v, "stages"), 0) : NULL;
    EXPECT(num2(st, "after", "params") == 4 * mine && num2(st, "after", "optim") == 8 * mine,
           "plan tp -n 4 --model gpt2: 4 and 8 x (Psi_rep + Psi_split/4) = %.0f (got %.0f)", 4 * mine, num2(st, "after", "params"));
    json_free(v);

    // Llama 2's 7B shape in the labs' GPT: Psi from the shape alone, the difference said.
    Shape l7 = {32, 4096, 32, 4096, 32000};
    v = plan_json("zero -n 8 --stage 3 --model llama-7b --mixed");
    EXPECT(num2(v, "model", "params") == psi(&l7), "plan --model llama-7b: Psi = %.0f from L 32, C 4096, V 32000, T 4096", psi(&l7));
    json_free(v);
    rc = plan("llama", "zero -n 8 --stage 3 --model llama-7b");
    out = captured("llama", "out");
    EXPECT(rc == 0 && strstr(out, "SwiGLU") && strstr(out, "6.74 billion"), "the table says how Llama differs from the labs' GPT");
    free(out);

    // Fits: GPT-2 XL's 16 Psi alone is 26 GB, over a 24 GB card; GPT-2 small's, sharded 8 ways, fits.
    v = plan_json("zero -n 1 --stage 0 --model gpt2-xl --gpu rtx4090");
    JsonValue *w = plan_json("zero -n 8 --stage 3 --model gpt2 --gpu rtx4090");
    const JsonValue *f1 = v ? json_get(json_at(json_get(v, "stages"), 0), "fits") : NULL;
    const JsonValue *f2 = w ? json_get(json_at(json_get(w, "stages"), 0), "fits") : NULL;
    EXPECT(f1 && f1->type == JSON_BOOL && !f1->boolean && f2 && f2->type == JSON_BOOL && f2->boolean,
           "--gpu rtx4090: GPT-2 XL unsharded does not fit, GPT-2 under ZeRO-3 on 8 does");
    json_free(v), json_free(w);

    // The table says the same in words.
    rc = plan("table", "zero -n 1 --stage 0 --model gpt2-xl --gpu rtx4090");
    out = captured("table", "out");
    EXPECT(rc == 0 && strstr(out, "does NOT fit") && strstr(out, "per GPU") && strstr(out, "K Psi'") &&
               strstr(out, "caching") && strstr(out, "Psi = 1,"),
           "the table: the categories, the formulas, Psi grouped, does NOT fit, what a framework adds");
    free(out);
}

// ---- 3. what cannot be planned -----------------------------------------------------------------

static void check_refusals(void) {
    static const struct {
        const char *args, *says;
    } bad[] = {
        {"", "expected a lab"},
        {"collectives -n 4", "no memory formulas yet for 'collectives'"},
        {"tp -n 3", "3 tensor-parallel ranks do not divide --heads 4"},
        {"tp -n 4 --dp 3", "--dp 3 does not divide the 4 ranks"},
        {"fsdp -n 6 --replicate 4", "--replicate 4 does not divide the 6 ranks (N = R replicas x S shards): use --replicate 3 or 6"},
        {"fsdp -n 8 --replicate 0", "--replicate must be between 1 and 8"},
        {"cp -n 4 --seq 7", "--seq 7 is too short for zigzag over 4 ranks"},
        {"cp -n 4 --dp 3", "--dp 3 does not divide the 4 ranks"},
        {"cp -n 2 --attn naive", "ring attention merges blocks by their log-sum-exps"},
        {"nolab", "no lab called 'nolab'"},
        {"ddp --heads 5", "--heads 5 does not divide --dim 64"},
        {"ddp -n 0", "-n takes 1 to 65536"},
        {"ddp --gpu xyz", "--gpu takes"},
        {"ddp --model gpt5", "--model takes"},
        {"pp -n 8 --layers 4", "need at least 8 blocks"},
        {"pp -n 4 --schedule interleaved --micro 6 --batch 12", "--micro 6 must be a multiple of the 4 stages"},
        {"ddp -n 2 --batch 7", "--batch 7 does not split"},
        {"zero --stage 4", "--stage"},
        {"ddp --bogus", "--bogus is not an option of ddp"},
        {"single -n 2", "at most 1 rank"},
        {"ddp --mixed=1", "takes no value"},
        {"ddp --batch", "needs a value"},
        {"ckpt --policy 9", "needs at least 9 blocks"},
        {"ddp -n 16 --batch 16 --check", "at most 8 ranks"},
        {"ddp --model gpt2 --check", "not --model"},
        {"ddp -n 2 --layers 64 --dim 2048 --check", "more than the 2.00 GiB a check may take"},
        {"ddp -n 2 --vocab 512 --check --json", "vocabulary 256"},
        {"zero --stage 0 --offload", "it needs --stage 1, 2 or 3"},
        {"zero --psi 1.5", "--psi takes a whole number of parameters"},
        {"zero --psi 7.5X", "--psi takes a whole number of parameters"},
        {"zero --psi 0", "--psi takes a whole number of parameters"},
        {"zero --psi 7.5B --layers 4", "leave out --layers"},
        {"zero --psi 7.5B --model gpt2", "leave out --model"},
        {"tp --psi 1e9", "tp splits the model by its shape"},
        {"pp --psi 1e9", "pp splits the model by its shape"},
        {"zero --psi 1e6 -n 2 --check", "not --psi"},
        {"single --seq 131073", "--seq must be between 1 and 131072"},
        {"single --seq 131072 --batch 4096", "--batch 4096 x --seq 131072 is 536870912 tokens a step, more than 268435456"},
        {"cp --longest --seq 64", "--longest finds --seq: leave --seq out"},
        {"cp --longest --gpu none", "give --gpu NAME or --budget SIZE"},
        {"zero --longest --psi 1e9", "--longest needs a shape"},
        {"cp --budget 64M --gpu h200", "give --gpu or --budget, not both"},
        {"cp --budget 12", "--budget takes the bytes a rank may hold"},
        {"cp --longest=1", "--longest takes no value"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = plan("bad", bad[i].args);
        char *out = captured("bad", "out"), *err = captured("bad", "err");
        // Proves: exit 2, one line that says why, and no plan printed.
        EXPECT(rc == 2 && strstr(err, bad[i].says) && count_lines(err) == 1 && !out[0], "plan %s: exit 2 and '%s' (exit %d: %s)",
               bad[i].args, bad[i].says, rc, one_line(err));
        free(out), free(err);
    }
    // A batch that does not split: the line names one that does, and that one plans. The
    // second also offers fewer micro-batches (--accum), which must plan too.
    static const struct {
        const char *args, *says, *fixes[2];
    } unsplit[] = {
        {"ddp -n 64", "try --batch 64", {"ddp -n 64 --batch 64", NULL}},
        {"zero -n 16 --batch 32 --accum 3", "try --batch 48, the next multiple of 16 x 3, or --accum 2",
         {"zero -n 16 --batch 48 --accum 3", "zero -n 16 --batch 32 --accum 2"}},
        {"pp -n 4 --micro 3", "try --batch 9, the next multiple of 1 x 3, or --micro 2", {"pp -n 4 --batch 9 --micro 3", "pp -n 4 --micro 2"}},
        {"tp -n 4 --dp 4 --batch 6", "try --batch 8", {"tp -n 4 --dp 4 --batch 8", NULL}},
    };
    for (size_t i = 0; i < sizeof unsplit / sizeof unsplit[0]; i++) {
        int refused = plan("unsplit", unsplit[i].args);
        char *err = captured("unsplit", "err");
        int fixed = 1;
        for (int k = 0; k < 2 && unsplit[i].fixes[k]; k++) fixed &= plan("unsplit-fix", unsplit[i].fixes[k]) == 0;
        // Proves: the refusal says how to fix it in its one line, and the fix it names is a
        // layout the planner takes (broken on purpose: a suggestion one short of the multiple).
        EXPECT(refused == 2 && count_lines(err) == 1 && strstr(err, unsplit[i].says) && fixed,
               "plan %s: exit 2, one line naming '%s', and that plans (exit %d: %s)", unsplit[i].args, unsplit[i].says, refused,
               one_line(err));
        free(err);
    }
    int rc = plan("help", "--help");
    char *out = captured("help", "out");
    EXPECT(rc == 0 && strstr(out, "usage: shardlab plan") && strstr(out, "--check"), "plan --help: exit 0 and the usage");
    free(out);
}

// ---- 5. --longest: the longest sequence a budget holds -----------------------------------------

// The plan's model.seq and its first stage's "fits" (-1: no plan).
static int planned_seq(const char *args, int *fits) {
    JsonValue *v = plan_json(args);
    const JsonValue *st = v ? json_at(json_get(v, "stages"), 0) : NULL, *f = st ? json_get(st, "fits") : NULL;
    int seq = v ? (int)num2(v, "model", "seq") : -1;
    *fits = f && f->type == JSON_BOOL ? f->boolean : -1;
    json_free(v);
    return seq;
}

static void check_longest(void) {
    static const char *const layouts[] = {"single --batch 1", "cp -n 4 --batch 1", "cp -n 4 --batch 1 --kv all-gather",
                                          "cp -n 8 --batch 1", "tp -n 4 --sp --batch 1", "pp -n 2 --batch 4"};
    int single = 0, cp4 = 0;
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        char args[256];
        snprintf(args, sizeof args, "%s --budget 32M --longest", layouts[i]);
        int fits, next_fits, T = planned_seq(args, &fits);
        // The next --seq the layout takes (tp --sp: one its ranks divide).
        int T1 = -1, next = T;
        while (T1 < 0 && next < T + 16) {
            snprintf(args, sizeof args, "%s --budget 32M --seq %d", layouts[i], ++next);
            T1 = planned_seq(args, &next_fits);
        }
        // Proves: the plan --longest shows is at a --seq that fits 32 MiB, and the next one
        // does not (broken on purpose: a search that stops one short, or one that overshoots).
        EXPECT(T > 0 && fits == 1 && T1 == next && next_fits == 0,
               "plan %s --budget 32M --longest: --seq %d fits (%d), --seq %d does not (%d)", layouts[i], T, fits, next,
               next_fits);
        if (i == 0) single = T;
        if (i == 1) cp4 = T;
    }
    // Proves: context parallelism's ranks hold a longer sequence than one rank alone (each
    // keeps T/4 tokens' activations; the weights and their state stay whole).
    EXPECT(cp4 > 2 * single, "cp on 4 ranks holds --seq %d in 32 MiB a rank, single %d", cp4, single);
    // No sequence fits where the model state alone does not: exit 1, and it says so.
    int rc = plan("longest-none", "single --model llama-7b --batch 1 --longest");
    char *out = captured("longest-none", "out");
    EXPECT(rc == 1 && strstr(out, "no --seq fits one H100 80GB"), "llama-7b on one H100: no --seq fits, exit 1 (exit %d)", rc);
    free(out);
    // The table says what it found, and --check runs the lab at it: every figure equal.
    rc = plan("longest-check", "cp -n 2 --budget 16M --batch 1 --longest --check");
    out = captured("longest-check", "out");
    EXPECT(rc == 0 && strstr(out, "is the longest that fits a budget of 16.00 MiB on every rank") &&
               strstr(out, "figures equal to the byte") && !strstr(out, "DIFFERENT"),
           "plan cp -n 2 --budget 16M --longest --check: the lab at that --seq logs what the plan says (exit %d)", rc);
    free(out);
}

// ---- 4. the ZeRO paper's table, the units, Psi', --json's layout and options ------------------

// text with every run of spaces and newlines as one space, in place: a paragraph the table
// wraps reads as one line.
static char *unwrapped(char *text) {
    char *o = text;
    for (const char *s = text; *s; s++)
        if (!isspace((unsigned char)*s) || (o > text && o[-1] != ' ')) *o++ = isspace((unsigned char)*s) ? ' ' : *s;
    *o = 0;
    return text;
}

// stages[k] of the JSON's "zero_stages", field key.
static double zero_stage(const JsonValue *v, int k, const char *key) {
    const JsonValue *s = v ? json_at(json_get(v, "zero_stages"), (size_t)k) : NULL;
    return s ? num2(s, key, NULL) : NAN;
}

static void check_paper(void) {
    // The ZeRO paper (Rajbhandari et al. 2020), figure 1: Psi = 7.5B parameters on N_d = 64
    // GPUs, mixed precision with Adam, K = 12: (2 + 2 + K) Psi, 2 Psi + 2 Psi + K Psi / N_d,
    // 2 Psi + (2 + K) Psi / N_d and (2 + 2 + K) Psi / N_d bytes, which it prints as 120, 31.4,
    // 16.6 and 1.88 GB (GB: 10^9 bytes). 7.5B splits evenly 64 ways: Psi' = Psi.
    const double P = 7.5e9, N = 64, K = 12;
    const double want[4] = {(2 + 2 + K) * P, 2 * P + 2 * P + K * P / N, 2 * P + (2 + K) * P / N, (2 + 2 + K) * P / N};
    static const char *const names[4] = {"baseline DDP", "P_os", "P_os+g", "P_os+g+p"};
    static const char *const paper[4] = {"120 GB", "31.4 GB", "16.6 GB", "1.88 GB"};
    static const char *const gib[4] = {"111.76 GiB", "29.25 GiB", "15.50 GiB", "1.75 GiB"};  // the same bytes / 2^30
    JsonValue *v = plan_json("zero --psi 7.5B -n 64 --mixed --stage 3");
    int ok = v != NULL;
    for (int k = 0; k < 4 && ok; k++) {
        const JsonValue *name = json_get(json_at(json_get(v, "zero_stages"), (size_t)k), "name");
        ok &= zero_stage(v, k, "state") == want[k] && name && name->type == JSON_STRING && !strcmp(name->string, names[k]) &&
              zero_stage(v, k, "state") == zero_stage(v, k, "params") + zero_stage(v, k, "grads") + zero_stage(v, k, "optim");
    }
    // Proves: the planner's four stages are the paper's formulas, to the byte, under the paper's
    // names (broken on purpose: stage 2's gradients left whole, caught).
    EXPECT(ok, "plan zero --psi 7.5B -n 64 --mixed --json: zero_stages' state %.0f, %.0f, %.0f, %.0f bytes, named baseline "
               "DDP, P_os, P_os+g, P_os+g+p (got %.0f, %.0f, %.0f, %.0f)", want[0], want[1], want[2], want[3],
           zero_stage(v, 0, "state"), zero_stage(v, 1, "state"), zero_stage(v, 2, "state"), zero_stage(v, 3, "state"));
    const JsonValue *st = v ? json_at(json_get(v, "stages"), 0) : NULL;
    const JsonValue *layout = v ? json_get(v, "layout") : NULL, *lname = layout ? json_get(layout, "name") : NULL;
    const JsonValue *peak = st ? json_get(json_get(st, "peak"), "params") : NULL, *batch = v ? json_get(v, "batch") : NULL;
    // Proves: a bare count plans the state after a step (stage 3's, as the table's row) and
    // nothing it cannot know: no activations, no peaks, no batch.
    EXPECT(num2(st, "state_after", NULL) == want[3] && num2(v, "model", "params") == P && num2(v, "model", "params_padded") == P &&
               num2(layout, "stage", NULL) == 3 && lname && lname->type == JSON_STRING && !strcmp(lname->string, "P_os+g+p") &&
               peak && peak->type == JSON_NULL && batch && batch->type == JSON_NULL &&
               num2(v, "precision", "e") == 2 && num2(v, "precision", "K") == 12,
           "--psi 7.5B: stage 3's state_after %.0f, Psi' = Psi, e 2, K 12, the layout named P_os+g+p, peaks and batch null", want[3]);
    json_free(v);

    int rc = plan("paper", "zero --psi 7.5B -n 64 --mixed --stage 3");
    char *out = captured("paper", "out");
    ok = rc == 0 && strstr(out, "stage 3 (P_os+g+p)") && strstr(out, "GiB = 2^30 bytes") && strstr(out, "GB = 10^9 bytes") &&
         strstr(out, "= 1.88 GB: the model state");
    for (int k = 0; k < 4 && ok; k++) {
        // The stage's row: "k name ... paper[k] gib[k] formula".
        char lead[32];
        snprintf(lead, sizeof lead, "  %d %s ", k, names[k]);
        const char *row = strstr(out, lead), *eol = row ? strchr(row, '\n') : NULL;
        char line[256] = "";
        if (row && eol) snprintf(line, sizeof line, "%.*s", (int)(eol - row), row);
        ok &= strstr(line, paper[k]) && strstr(line, gib[k]) && (k == 3) == (strstr(line, "<- this plan") != NULL);
    }
    // Proves: the table prints the paper's figures as the paper does, beside the GiB, names the
    // units, totals the state and marks the stage planned (broken on purpose: GB with two
    // decimals, "120.00 GB", caught).
    EXPECT(ok, "plan zero --psi 7.5B -n 64 --mixed: rows baseline DDP 120 GB, P_os 31.4 GB, P_os+g 16.6 GB, P_os+g+p 1.88 GB "
               "(with their GiB), the units defined, the state totalled%s%s", ok ? "" : ": ", ok ? "" : one_line(out));
    free(out);

    // The same count written three ways plans the same.
    char *a[3];
    static const char *const spellings[3] = {"zero --psi 7500000000 -n 64 --mixed --json", "zero --psi 7.5e9 -n 64 --mixed --json",
                                             "zero --psi 7.5b -n 64 --mixed --json"};
    for (int i = 0; i < 3; i++) plan("spell", spellings[i]), a[i] = captured("spell", "out");
    EXPECT(a[0][0] && !strcmp(a[0], a[1]) && !strcmp(a[0], a[2]), "--psi 7500000000, 7.5e9 and 7.5b: the same plan");
    for (int i = 0; i < 3; i++) free(a[i]);

    // Psi' where the units do not split: the labs' model at N = 3 pads to 136,965 (each unit
    // to 3 equal shards, counted here), and the table defines it.
    double padded = 0;
    Shape labs = {2, 64, 4, 64, 256};
    for (int u = 0; u < labs.L + 2; u++) padded += ceil(unit_size(&labs, u) / 3) * 3;
    v = plan_json("zero -n 3 --batch 6 --stage 2");
    st = v ? json_at(json_get(v, "stages"), 0) : NULL;
    EXPECT(num2(v, "model", "params_padded") == padded && num2(st, "state_after", NULL) ==
               num2(st, "after", "params") + num2(st, "after", "grads") + num2(st, "after", "optim"),
           "plan zero -n 3: params_padded = %.0f, state_after = params + grads + optim (got %.0f)", padded,
           num2(v, "model", "params_padded"));
    json_free(v);
    rc = plan("padded", "zero -n 3 --batch 6 --stage 2");
    out = unwrapped(captured("padded", "out"));
    // Proves: Psi' is defined in the output, with its value and its padding.
    EXPECT(rc == 0 && strstr(out, "Psi' = 136,965") && strstr(out, "padded to split into N = 3 equal shards") &&
               strstr(out, "136,965, with 5 elements of padding") && strstr(out, "stage 2 (P_os+g)"),
           "plan zero -n 3: Psi' = 136,965 defined: each unit padded to 3 equal shards, 5 elements of padding");
    free(out);

    // --json says the layout and every option: ZeRO's stage and offload, the host's 12 Psi'/N,
    // and each option the catalog gives zero, as given or by its default.
    v = plan_json("zero -n 4 --stage 3 --offload --batch 16 --lr 0.01");
    layout = v ? json_get(v, "layout") : NULL;
    const JsonValue *opts = v ? json_get(v, "options") : NULL, *off = layout ? json_get(layout, "offload") : NULL;
    const JsonValue *ooff = opts ? json_get(opts, "offload") : NULL, *mixed = opts ? json_get(opts, "mixed") : NULL;
    st = v ? json_at(json_get(v, "stages"), 0) : NULL;
    double shards = 0;
    for (int u = 0; u < labs.L + 2; u++) shards += ceil(unit_size(&labs, u) / 4);
    const CatLab *zero = catalog_lab("zero");
    int every = opts && opts->type == JSON_OBJECT, n = 0;
    for (int pass = 0; pass < 2 && every; pass++)
        for (int i = 0; i < (pass ? zero->noptions : catalog_ntrain); i++, n++)
            every &= json_get(opts, (pass ? zero->options : catalog_train)[i].name) != NULL;
    // Proves: a script reads the stage, offload and every option from --json (broken on purpose:
    // the options without the lab's own, caught).
    EXPECT(every && (int)opts->count == n && num2(layout, "stage", NULL) == 3 && off && off->type == JSON_BOOL && off->boolean &&
               ooff && ooff->type == JSON_BOOL && ooff->boolean && mixed && mixed->type == JSON_BOOL && !mixed->boolean &&
               num2(opts, "stage", NULL) == 3 && num2(opts, "batch", NULL) == 16 && num2(opts, "lr", NULL) == 0.01 &&
               num2(opts, "accum", NULL) == 1 && num2(st, "host", NULL) == 12 * shards && num2(st, "after", "optim") == 0,
           "plan zero --stage 3 --offload --json: layout stage 3, offload true; all %d options (stage 3, offload, batch 16, "
           "lr 0.01, accum's default 1); host 12 Psi'/N = %.0f, optim 0", n, 12 * shards);
    json_free(v);
}

int main(int argc, char **argv) {
    if (argc != 3 || !realpath(argv[1], shardlab)) {
        fprintf(stderr, "usage: test_plan SHARDLAB LABS_DIR\n");
        return 2;
    }
    char labs[PATH_MAX];
    if (!realpath(argv[2], labs)) return fprintf(stderr, "test_plan: %s not found\n", argv[2]), 2;
    setenv("SHARDLAB_LABS", labs, 1);  // --check runs the optimized labs
    unsetenv("SHARDLAB_TIMEOUT_S");
    snprintf(tmp, sizeof tmp, "/tmp/test_plan-XXXXXX");
    if (!mkdtemp(tmp)) return perror("mkdtemp"), 2;
    double t0 = now_s();
    check_refusals();
    check_paper();
    check_scale();
    check_layouts();
    check_longest();
    printf("# %.1f s\n", now_s() - t0);
    tmp_finish(test_failed);
    return test_done();
}
