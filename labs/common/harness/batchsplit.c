// batchsplit.c — see batchsplit.h. The checks first, each naming the values that could mend
// it; then the search for the nearest of those values that passes every check.
#include "batchsplit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog.h"
#include "common/model/gpt.h"

// What a failed check could be mended by changing: the rank count or one option.
enum { FIX_RANKS = 1, FIX_BATCH = 2, FIX_ACCUM = 4, FIX_DP = 8, FIX_MICRO = 16, FIX_REPLICATE = 32 };

static int is_lab(const BatchSplit *s, const char *name) { return s->lab && strcmp(s->lab, name) == 0; }

static int data_parallel(const BatchSplit *s) {
    return is_lab(s, "ddp") || is_lab(s, "zero") || is_lab(s, "fsdp") || is_lab(s, "ckpt") || is_lab(s, "shard");
}

// The first check s fails, its line in why (when why is not NULL), and what could mend it
// (FIX_* bits); 0 when every check passes.
static unsigned first_failure(const BatchSplit *s, char *why, size_t n) {
    char line[512];
    unsigned fix = 0;
    int N = s->ranks, B = s->batch, K = s->accum, D = s->dp > 0 ? s->dp : 1, R = s->replicate > 0 ? s->replicate : 1;
    if (B % K)  // every lab's, whatever its ranks (args.c checks it as it parses)
        fix = FIX_BATCH | FIX_ACCUM,
        snprintf(line, sizeof line, "--accum %d does not divide --batch %d (each micro-batch must have the same size)", K, B);
    else if (data_parallel(s)) {
        if (B % N)
            fix = FIX_RANKS | FIX_BATCH,
            snprintf(line, sizeof line, "--batch %d does not divide over %d ranks (each rank takes B/N sequences)", B, N);
        else if ((B / N) % K)
            fix = FIX_RANKS | FIX_BATCH | FIX_ACCUM,
            snprintf(line, sizeof line, "--accum %d does not divide the %d sequences of each rank (--batch %d over %d ranks)",
                     K, B / N, B, N);
        else if (is_lab(s, "fsdp") && N % R)
            fix = FIX_RANKS | FIX_REPLICATE,
            snprintf(line, sizeof line, "--replicate %d does not divide the %d ranks (N = R replicas x S shards)", R, N);
    } else if (is_lab(s, "tp")) {
        int t = N % D ? 0 : N / D, micro = B % D || (B / D) % K ? 0 : B / D / K;
        if (!t)
            fix = FIX_RANKS | FIX_DP, snprintf(line, sizeof line, "--dp %d does not divide the %d ranks (N = D x t)", D, N);
        else if (s->heads % t)
            fix = FIX_RANKS | FIX_DP, snprintf(line, sizeof line, "%d tensor-parallel ranks do not divide --heads %d", t, s->heads);
        else if (s->vocab_parallel && GPT_VOCAB % t)
            fix = FIX_RANKS | FIX_DP,
            snprintf(line, sizeof line, "--vocab-parallel: %d tensor-parallel ranks do not divide the vocabulary of %d", t,
                     GPT_VOCAB);
        else if (B % D)
            fix = FIX_BATCH | FIX_DP,
            snprintf(line, sizeof line, "--batch %d does not divide over --dp %d replicas (each replica takes B/D sequences)",
                     B, D);
        else if ((B / D) % K)
            fix = FIX_BATCH | FIX_ACCUM | FIX_DP,
            snprintf(line, sizeof line, "--accum %d does not divide the %d sequences of each replica (--batch %d over --dp %d)",
                     K, B / D, B, D);
        else if (s->sp && ((long)micro * s->seq) % t)
            fix = FIX_RANKS | FIX_BATCH,
            snprintf(line, sizeof line, "--sp: %d tensor-parallel ranks do not divide the %ld token rows of a micro-batch "
                                        "(B/(D accum) = %d x --seq %d)", t, (long)micro * s->seq, micro, s->seq);
    } else if (is_lab(s, "pp")) {
        int p = N % D ? 0 : N / D, m = s->micro;
        if (!p)
            fix = FIX_RANKS | FIX_DP, snprintf(line, sizeof line, "--dp %d does not divide the %d ranks", D, N);
        else if (s->interleaved && (m < p || m % p))
            fix = FIX_MICRO | FIX_RANKS,
            snprintf(line, sizeof line, "interleaved 1F1B sends micro-batches round the ranks in groups of %d: --micro %d must "
                                        "be a multiple of the %d stages", p, m, p);
        else if (B % (D * m))
            fix = FIX_BATCH | FIX_MICRO,
            snprintf(line, sizeof line, "--batch %d does not split into %d pipeline(s) x %d micro-batches of equal size", B, D, m);
    }
    if (fix && why) snprintf(why, n, "%s", line);
    return fix;
}

// Whether s passes every check, and for pp with --layers given, has the blocks its stages need.
static int splits(const BatchSplit *s) {
    if (first_failure(s, NULL, 0)) return 0;
    int D = s->dp > 0 ? s->dp : 1;
    return !(is_lab(s, "pp") && s->layers > 0 && (s->ranks / D) * (s->chunks > 0 ? s->chunks : 1) > s->layers);
}

// The value one fix changes, its name as the user gives it, and its bounds (the catalog's).
static int *fix_value(BatchSplit *s, unsigned fix, const char **name, int *max) {
    static const struct { unsigned fix; const char *name; } names[] = {
        {FIX_RANKS, "ranks"}, {FIX_BATCH, "batch"},   {FIX_ACCUM, "accum"},
        {FIX_DP, "dp"},       {FIX_MICRO, "micro"},   {FIX_REPLICATE, "replicate"}};
    int *values[] = {&s->ranks, &s->batch, &s->accum, &s->dp, &s->micro, &s->replicate};
    for (int i = 0; i < 6; i++) {
        if (names[i].fix != fix) continue;
        *name = names[i].name;
        const CatLab *lab = catalog_lab(s->lab);
        const CatOption *o = fix == FIX_RANKS ? NULL : catalog_find(lab, names[i].name);
        *max = fix == FIX_RANKS ? (lab && lab->max_world ? lab->max_world : BATCH_SPLIT_MAX_RANKS) : o ? (int)o->max : 0;
        return values[i];
    }
    return NULL;
}

// The nearest values of one fix below and above its own (0: none) with which s splits.
static void nearest(const BatchSplit *s, unsigned fix, int *below, int *above) {
    BatchSplit t = *s;
    const char *name;
    int max, *v = fix_value(&t, fix, &name, &max), at = *v;
    *below = *above = 0;
    for (int d = 1; (at - d >= 1 && !*below) || (at + d <= max && !*above); d++) {
        if (at - d >= 1 && !*below && (*v = at - d, splits(&t))) *below = at - d;
        if (at + d <= max && !*above && (*v = at + d, splits(&t))) *above = at + d;
    }
}

int batch_split_check(const BatchSplit *s, char *why, size_t n) {
    unsigned fix = first_failure(s, why, n);
    if (!fix) return 0;
    // ": use 2 or 4 ranks, or --batch 6 or 9": each value that could mend it, the nearest
    // below and above that pass every check.
    char parts[6][96];
    int k = 0;
    for (unsigned f = FIX_RANKS; f <= FIX_REPLICATE; f <<= 1) {
        if (!(fix & f)) continue;
        BatchSplit t = *s;
        const char *name;
        int max, below, above;
        fix_value(&t, f, &name, &max);  // (its name)
        nearest(s, f, &below, &above);
        if (!below && !above) continue;
        char values[48];
        if (below && above) snprintf(values, sizeof values, "%d or %d", below, above);
        else snprintf(values, sizeof values, "%d", below ? below : above);
        if (f == FIX_RANKS) snprintf(parts[k++], sizeof parts[0], "%s rank%s", values, !above && below == 1 ? "" : "s");
        else snprintf(parts[k++], sizeof parts[0], "--%s %s", name, values);
    }
    size_t len = strlen(why);
    for (int i = 0; i < k && len < n; i++) {
        int w = snprintf(why + len, n - len, "%s%s", i == 0 ? ": use " : i == k - 1 ? ", or " : ", ", parts[i]);
        if (w > 0) len += (size_t)w;
    }
    return -1;
}

BatchSplit batch_split_of(const char *lab, const TrainArgs *a, int ranks) {
    return (BatchSplit){.lab = lab, .ranks = ranks, .batch = a->batch, .accum = a->accum, .heads = a->heads,
                        .seq = a->seq, .dp = 1, .replicate = 1, .micro = 1, .chunks = 1};
}

// The whole number --name has among opts, else its catalog default for lab (fallback when the
// lab has no such option, or its default is "auto").
static int option_int(const char *lab, int nopts, char *const opts[], const char *name, int fallback) {
    const char *text = catalog_value_in(nopts, opts, name);
    const CatOption *o = catalog_find(catalog_lab(lab), name);
    int v = fallback;
    if (text && *text) v = atoi(text);
    else if (o && o->kind == OPT_INT) catalog_default(o, &v);
    return v > 0 ? v : fallback;
}

BatchSplit batch_split_from_options(const char *lab, int ranks, int nopts, char *const opts[]) {
    const char *schedule = catalog_value_in(nopts, opts, "schedule");
    int interleaved = lab && !strcmp(lab, "pp") && schedule && !strcmp(schedule, "interleaved");
    return (BatchSplit){
        .lab = lab, .ranks = ranks,
        .batch = option_int(lab, nopts, opts, "batch", 1), .accum = option_int(lab, nopts, opts, "accum", 1),
        .heads = option_int(lab, nopts, opts, "heads", 1), .seq = option_int(lab, nopts, opts, "seq", 1),
        .dp = option_int(lab, nopts, opts, "dp", 1),
        .replicate = option_int(lab, nopts, opts, "replicate", 1),
        .sp = catalog_value_in(nopts, opts, "sp") != NULL,
        .vocab_parallel = catalog_value_in(nopts, opts, "vocab-parallel") != NULL,
        .micro = option_int(lab, nopts, opts, "micro", 1),
        .chunks = interleaved ? option_int(lab, nopts, opts, "chunks", 2) : 1,
        .interleaved = interleaved,
        .layers = catalog_value_in(nopts, opts, "layers") ? option_int(lab, nopts, opts, "layers", 0) : 0,
    };
}
