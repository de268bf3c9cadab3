// test_catalog.c — the catalog of labs and options (labs/common/harness/catalog.h) is whole and
// consistent, and the labs read it.
//
// Usage: test_catalog LABS_DIR SHARDLAB   (build/labs: each lab's --help is run and read;
//                                          build/shardlab; from the checkout's root, where
//                                          lexicon/ is)
//
// Proves:
//   1. every lab has a lexicon entry that exists, a title, an about text; every option has a
//      help text and a metavar, no two options of a lab share a name, and no lab's own option
//      hides a shared one;
//   2. every default is a value its own option takes (the choices hold it; a bounded number lies
//      in its bounds), and every option the web's form offers can be checked there (a text
//      option names its choices or the characters it may hold);
//   3. the checks: the bounds inclusive, one past refused with the bound named; choices
//      listed in words; sizes in K, M, G; a text from outside starting with '-' refused;
//   4. every graded configuration names a lab of the catalog at a world it runs on, with
//      options the catalog gives that lab and values it takes;
//   5. each lab's --help (the lab programs in LABS_DIR) prints every option the catalog gives
//      it, with the catalog's help text: the labs parse from the catalog, not a copy of it;
//   6. the launcher: `shardlab run --help` lists every lab with its title, and refuses more
//      ranks than a lab runs on (single -n 2) before starting anything;
//   7. did you mean: the edit distance (a swap is one edit), the nearest names, and every lab's
//      parser naming the option a misspelt one was near;
//   8. the batch's split over the ranks (batchsplit.h): each lab's line and the nearest ranks
//      and values that divide, on every small layout; the web's reading of a form's options;
//   9. --warmup given longer than the run is taken as the automatic one is.
// Broken on purpose: ddp's --bucket-mb default "0" (below its bound 1e-6) fails part 2;
// a lab binding an option the catalog does not give it dies as a bug (part 5, that lab's help).
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/harness/args.h"
#include "common/harness/batchsplit.h"
#include "common/harness/catalog.h"
#include "common/harness/suggest.h"
#include "labtest.h"
#include "shelltest.h"
#include "test.h"

static const char *labs_dir, *shardlab;

// Every option a lab takes: its own, then for a training lab the shared ones.
static int options_of(const CatLab *lab, const CatOption **out, int max) {
    int n = 0;
    for (int i = 0; i < lab->noptions && n < max; i++) out[n++] = &lab->options[i];
    for (int i = 0; lab->trains && i < catalog_ntrain && n < max; i++) out[n++] = &catalog_train[i];
    return n;
}

static void check_whole(void) {
    int lexicon_ok = 1, texts_ok = 1, unique_ok = 1, hide_ok = 1;
    for (int l = 0; l < catalog_nlabs; l++) {
        const CatLab *lab = &catalog_labs[l];
        char path[300];
        snprintf(path, sizeof path, "lexicon/%s.md", lab->lexicon ? lab->lexicon : "?");
        struct stat st;
        if (stat(path, &st) != 0) printf("# %s: no %s\n", lab->name, path), lexicon_ok = 0;
        if (!lab->title || !lab->title[0] || !lab->about || !lab->about[0]) printf("# %s: no title or about\n", lab->name), texts_ok = 0;
        if (catalog_lab(lab->name) != lab) printf("# %s: catalog_lab finds another\n", lab->name), unique_ok = 0;
        const CatOption *all[128];
        int n = options_of(lab, all, 128);
        for (int i = 0; i < n; i++) {
            if (!all[i]->help || !all[i]->help[0] || !all[i]->metavar) printf("# %s --%s: no help or metavar\n", lab->name, all[i]->name), texts_ok = 0;
            for (int k = 0; k < i; k++)
                if (!strcmp(all[i]->name, all[k]->name)) {
                    printf("# %s: --%s twice\n", lab->name, all[i]->name);
                    if (k < lab->noptions && i >= lab->noptions) hide_ok = 0;
                    else unique_ok = 0;
                }
        }
    }
    EXPECT(catalog_nlabs == 11 && catalog_lab("ddp") && catalog_lab("cp") && catalog_lab("ep") && !catalog_lab("nope") && !catalog_lab(NULL),
           "the catalog has the eleven labs, found by name (%d)", catalog_nlabs);
    EXPECT(lexicon_ok, "every lab's lexicon entry is a file in lexicon/");
    EXPECT(texts_ok, "every lab has a title and an about text, every option a help text and a metavar");
    EXPECT(unique_ok, "no two options of a lab share a name");
    EXPECT(hide_ok, "no lab's own option hides one every training lab shares");
}

static void check_defaults(void) {
    int dflt_ok = 1, form_ok = 1, n = 0;
    for (int l = 0; l < catalog_nlabs; l++) {
        const CatOption *all[128];
        int k = options_of(&catalog_labs[l], all, 128);
        for (int i = 0; i < k; i++, n++) {
            const CatOption *o = all[i];
            char why[600];
            int skip = !o->dflt || !strcmp(o->dflt, "auto") || o->kind == OPT_FLAG;
            if (!skip && catalog_check(o, o->dflt, 0, why, sizeof why) != 0)
                printf("# %s: the default '%s' is refused: %s\n", catalog_labs[l].name, o->dflt, why), dflt_ok = 0;
            if ((o->flags & CAT_FORM) && o->kind == OPT_STRING && !o->choices && !o->chars && !(o->flags & CAT_RUN))
                printf("# --%s: the form offers text it cannot check\n", o->name), form_ok = 0;
        }
    }
    EXPECT(dflt_ok, "every default of the %d options (shared ones once per lab) is a value its option takes", n);
    EXPECT(form_ok, "every option the web's form offers is a number, a flag, a choice, a run, or text of named characters");
}

static void check_checks(void) {
    const CatLab *ddp = catalog_lab("ddp"), *single = catalog_lab("single"), *coll = catalog_lab("collectives");
    char why[600];
    const CatOption *batch = catalog_find(single, "batch"), *bucket = catalog_find(ddp, "bucket-mb");
    EXPECT(batch && catalog_check(batch, "1", 0, why, sizeof why) == 0 && catalog_check(batch, "65536", 0, why, sizeof why) == 0,
           "--batch takes its bounds, 1 and 65536");
    EXPECT(batch && catalog_check(batch, "65537", 0, why, sizeof why) != 0 && strstr(why, "--batch") && strstr(why, "65536"),
           "--batch 65537 is refused naming the option and its bound: %s", why);
    EXPECT(bucket && catalog_check(bucket, "0", 0, why, sizeof why) != 0 && catalog_check(bucket, "1024", 0, why, sizeof why) == 0,
           "ddp's --bucket-mb: 0 refused, 1024 taken (one bound for the lab, the web and the grader)");
    EXPECT(catalog_check_option("single", "attn", "foo", why, sizeof why) != 0 && strstr(why, "--attn must be flash or naive"),
           "a choice outside the names: '%s'", why);
    EXPECT(catalog_check_option("ddp", "sync", "bucket", why, sizeof why) == 0 &&
               catalog_check_option("ddp", "sync", "nope", why, sizeof why) != 0 && strstr(why, "per-tensor, bucket or overlap"),
           "ddp --sync: three names, said in words: %s", why);
    EXPECT(catalog_check_option("single", "sync", "bucket", why, sizeof why) != 0 && strstr(why, "no such option"),
           "single has no --sync: %s", why);
    EXPECT(catalog_check_option(NULL, "steps", "1000", why, sizeof why) == 0 && catalog_check_option(NULL, "stage", "1", why, sizeof why) != 0,
           "lab NULL: the options every training lab shares, and only those");
    EXPECT(catalog_check_option("ckpt", "policy", "--run-dir", why, sizeof why) != 0 && strstr(why, "would read as an option"),
           "a value from outside that starts with '-' is refused: %s", why);
    EXPECT(catalog_check_option("single", "data", "/nonexistent/x", why, sizeof why) != 0 &&
               catalog_check_option("single", "data", "synthetic", why, sizeof why) == 0 &&
               catalog_check_option("single", "data", "/dev", why, sizeof why) != 0 && strstr(why, "not a regular file"),
           "--data: synthetic, or a readable regular file");
    uint64_t v = 0, w = 0, g = 0;
    EXPECT(catalog_bytes("64K", &v) == 0 && v == 65536 && catalog_bytes("16M", &w) == 0 && w == 16u << 20 &&
               catalog_bytes("1G", &g) == 0 && g == 1u << 30 && catalog_bytes("x", &v) != 0 && catalog_bytes("4Q", &v) != 0 &&
               catalog_bytes("", &v) != 0,
           "sizes: 64K, 16M, 1G read as powers of 1024; x, 4Q and nothing refused");
    EXPECT(catalog_check_option("collectives", "max-bytes", "2G", why, sizeof why) != 0 &&
               catalog_check_option("collectives", "max-bytes", "256K", why, sizeof why) == 0,
           "collectives --max-bytes: at most 1G");
    int dp = 0;
    const CatOption *o = catalog_find(catalog_lab("tp"), "dp");
    catalog_default(o, &dp);
    double lr_min = 0;
    catalog_default(catalog_find(single, "lr-min"), &lr_min);
    EXPECT(dp == 1 && lr_min == -1 && coll && catalog_find(coll, "batch") == NULL,
           "defaults as values (tp --dp 1, --lr-min auto is -1); collectives takes no training option");
}

static void check_graded(void) {
    int ok = 1;
    for (int i = 0; i < catalog_ngraded; i++) {
        const CatGraded *gc = &catalog_graded[i];
        const CatLab *lab = catalog_lab(gc->lab);
        if (!lab || gc->n < 1 || gc->n > 8 || (lab->max_world && gc->n > lab->max_world)) {
            printf("# %s: lab %s at %d ranks\n", gc->label, gc->lab, gc->n), ok = 0;
            continue;
        }
        for (int a = 0; gc->args[a]; a++) {
            const CatOption *o = strncmp(gc->args[a], "--", 2) == 0 ? catalog_find(lab, gc->args[a] + 2) : NULL;
            char why[600] = "";
            if (!o) printf("# %s: %s is not an option of %s\n", gc->label, gc->args[a], gc->lab), ok = 0;
            else if (o->kind != OPT_FLAG && (!gc->args[a + 1] || catalog_check(o, gc->args[++a], 1, why, sizeof why) != 0))
                printf("# %s: %s\n", gc->label, why), ok = 0;
        }
    }
    EXPECT(ok && catalog_ngraded >= 9, "every one of the %d graded configurations runs a lab of the catalog with options and "
           "values it takes", catalog_ngraded);
}

static void check_help(void) {
    for (int l = 0; l < catalog_nlabs; l++) {
        const CatLab *lab = &catalog_labs[l];
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "'%s/%s' --help", labs_dir, lab->name);
        int status;
        char *out = test_sh(NULL, cmd, &status);
        const CatOption *all[128];
        int n = options_of(lab, all, 128), found = 0;
        char missing[200] = "";
        for (int i = 0; i < n; i++) {
            char left[80];
            snprintf(left, sizeof left, "--%s", all[i]->name);
            const char *at = strstr(out, left);
            // The option's line holds the catalog's help text (the first 40 characters).
            char help[41];
            snprintf(help, sizeof help, "%s", all[i]->help);
            if (at && strstr(at, help)) found++;
            else if (!missing[0]) snprintf(missing, sizeof missing, "--%s", all[i]->name);
        }
        EXPECT(status == 0 && found == n && strstr(out, lab->about), "%s --help: exit 0, the catalog's about and all %d of its "
               "options with the catalog's help (%d found%s%s)", lab->name, n, found, missing[0] ? "; missing " : "", missing);
        // Each option says its default once: where the help text names it, not again after.
        char twice[200] = "";
        for (char *line = out; line && *line && !twice[0];) {
            char *end = strchr(line, '\n');
            if (end) *end = 0;
            char *first = strstr(line, "(default");
            if (first && strstr(first + 1, "(default")) snprintf(twice, sizeof twice, "%.190s", line);
            line = end ? end + 1 : NULL;
        }
        EXPECT(!twice[0], "%s --help gives each option's default once%s%s", lab->name, twice[0] ? ": " : "", twice);
        free(out);
    }
}

static void check_launcher(void) {
    char cmd[1200];
    int status;
    snprintf(cmd, sizeof cmd, "'%s' run --help", shardlab);
    char *out = test_sh(NULL, cmd, &status);
    int listed = 0;
    for (int l = 0; l < catalog_nlabs; l++) {
        char line[200];
        snprintf(line, sizeof line, "  %-12s %s\n", catalog_labs[l].name, catalog_labs[l].title);
        listed += strstr(out, line) != NULL;
    }
    EXPECT(status == 0 && listed == catalog_nlabs, "shardlab run --help lists the %d labs with their titles (%d)",
           catalog_nlabs, listed);
    free(out);
    // A runs folder that does not exist yet, in a folder of its own (a pid-named one could be
    // left by an earlier, killed run).
    char parent[64] = "/tmp/shardlab-test-catalog-XXXXXX", runs[80];
    if (!mkdtemp(parent)) snprintf(parent, sizeof parent, "/tmp");
    snprintf(runs, sizeof runs, "%s/runs", parent);
    snprintf(cmd, sizeof cmd, "SHARDLAB_LABS='%s' SHARDLAB_RUNS='%s' '%s' run single -n 2 --ui none", labs_dir, runs,
             shardlab);
    out = test_sh(NULL, cmd, &status);
    struct stat st;
    int started = stat(runs, &st) == 0;
    EXPECT(status == 2 && strstr(out, "single runs on at most 1 rank") && strchr(out, '\n') == out + strlen(out) - 1 &&
               !started,
           "shardlab run single -n 2: exit 2, one line, before anything starts (no runs folder made): %s", out);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", strcmp(parent, "/tmp") ? parent : runs);
    free(test_sh(NULL, cmd, &status));
    free(out);
}

// ---- did you mean -------------------------------------------------------------------------

static void check_did_you_mean(void) {
    // Proves: the one edit distance counts a swap of two neighbours as one edit (typos
    // often are) and ignores case; Levenshtein's textbook pair is 3.
    EXPECT(suggest_distance("stpes", "steps") == 1 && suggest_distance("dpp", "ddp") == 1 &&
               suggest_distance("DDP", "ddp") == 0 && suggest_distance("kitten", "sitting") == 3,
           "suggest_distance: stpes/steps 1, dpp/ddp 1, DDP/ddp 0, kitten/sitting 3 (%d %d %d %d)",
           suggest_distance("stpes", "steps"), suggest_distance("dpp", "ddp"), suggest_distance("DDP", "ddp"),
           suggest_distance("kitten", "sitting"));
    const char *labs[] = {"ckpt", "collectives", "ddp", "fsdp", "pp", "shard", "single", "tp", "zero"}, *near[SUGGEST_MAX];
    int k = suggest_nearest("dpp", labs, 9, near, SUGGEST_MAX);
    // Proves: of the names one edit away, those of the word's length come first (dpp: ddp,
    // not pp as well); a word near nothing gets nothing; a word that begins one name is near it.
    EXPECT(k == 1 && !strcmp(near[0], "ddp"), "suggest_nearest(dpp): ddp alone (%d: %s)", k, k ? near[0] : "");
    EXPECT(suggest_nearest("frobnicate", labs, 9, near, SUGGEST_MAX) == 0, "suggest_nearest(frobnicate): nothing");
    const char *opts[] = {"sync", "bucket-mb", "algo"};
    k = suggest_nearest("bucket", opts, 3, near, SUGGEST_MAX);
    EXPECT(k == 1 && !strcmp(near[0], "bucket-mb"), "suggest_nearest(bucket): bucket-mb, the name it begins (%d)", k);

    // Every lab's parser (the catalog's): a misspelt option, shared or its own, gets the name it
    // was near, in the one line and exit 2 (broken variant: catalog_parse's plain "unknown option").
    for (int l = 0; l < catalog_nlabs; l++) {
        const CatLab *lab = &catalog_labs[l];
        const char *name = lab->noptions ? lab->options[0].name : "steps";
        char typo[64], want[80], cmd[1200];
        snprintf(typo, sizeof typo, "%s", name);
        char c = typo[0];
        typo[0] = typo[1], typo[1] = c;  // the first two letters swapped: "stpes" -> ..., "sync" -> "ysnc"
        snprintf(want, sizeof want, "did you mean '--%s'?", name);
        for (int shared = 0; shared < 2; shared++) {
            const char *bad = shared ? "stpes" : typo;
            if (shared) snprintf(want, sizeof want, "did you mean '--steps'?");
            snprintf(cmd, sizeof cmd, "'%s/%s' --%s 3", labs_dir, lab->name, bad);
            int status;
            char *out = test_sh(NULL, cmd, &status);
            EXPECT(status == 2 && count_lines(out) == 1 && strstr(out, want), "%s --%s: exit 2, one line, \"%s\" (%d: %s)",
                   lab->name, bad, want, status, one_line(out));
            free(out);
        }
    }
}

// ---- the batch's split over the ranks -------------------------------------------------------

// The values a check's line offers after ": use " ("2 or 4 ranks", "--batch 6 or 9"), each
// applied to a copy of s: every one must split, and no value between it and s's own may
// (they are the nearest). Returns the number of values offered, or -1 with why.
static int check_offers(const BatchSplit *s, const char *line, char *why, size_t n) {
    const char *use = strstr(line, ": use ");
    if (!use) return 0;
    int offered = 0;
    char text[512];
    snprintf(text, sizeof text, "%s", use + 6);
    for (char *save = NULL, *part = strtok_r(text, ",", &save); part; part = strtok_r(NULL, ",", &save)) {
        while (*part == ' ') part++;
        if (!strncmp(part, "or ", 3)) part += 3;
        char knob[32];
        snprintf(knob, sizeof knob, "%.*s", (int)strcspn(strstr(part, "rank") ? "ranks" : part + 2, " "),
                 strstr(part, "rank") ? "ranks" : part + 2);
        int values[2], k = 0;
        for (char *p = part; *p && k < 2; p++)
            if (*p >= '0' && *p <= '9' && (p == part || p[-1] == ' ')) values[k++] = atoi(p);
        for (int i = 0; i < k; i++) {
            BatchSplit t = *s;
            int *v = !strcmp(knob, "ranks") ? &t.ranks : !strcmp(knob, "batch") ? &t.batch : !strcmp(knob, "accum") ? &t.accum
                   : !strcmp(knob, "dp") ? &t.dp : !strcmp(knob, "micro") ? &t.micro
                   : !strcmp(knob, "replicate") ? &t.replicate : NULL;
            if (!v) return snprintf(why, n, "'%s' names nothing", part), -1;
            int own = *v, at = values[i];
            *v = at;
            char w[768];
            if (batch_split_check(&t, w, sizeof w) != 0) return snprintf(why, n, "%s %d does not split: %s", knob, at, w), -1;
            for (int between = (own < at ? own : at) + 1; between < (own < at ? at : own); between++) {
                *v = between;
                if (batch_split_check(&t, w, sizeof w) == 0 && !(t.lab && !strcmp(t.lab, "pp") && t.layers))
                    return snprintf(why, n, "%s %d splits and is nearer than %d", knob, between, at), -1;
            }
            offered++;
        }
    }
    return offered;
}

static void check_batch_split(void) {
    const struct {
        BatchSplit s;
        const char *line;  // NULL: it splits
    } cases[] = {
        {{"ddp", 3, 8, 1, 4, 64, 1, 0, 0, 1, 1, 0, 0, 1},
         "--batch 8 does not divide over 3 ranks (each rank takes B/N sequences): use 2 or 4 ranks, or --batch 6 or 9"},
        {{"zero", 5, 8, 1, 4, 64, 1, 0, 0, 1, 1, 0, 0, 1},
         "--batch 8 does not divide over 5 ranks (each rank takes B/N sequences): use 4 or 8 ranks, or --batch 5 or 10"},
        {{"ddp", 4, 12, 2, 4, 64, 1, 0, 0, 1, 1, 0, 0, 1},
         "--accum 2 does not divide the 3 sequences of each rank (--batch 12 over 4 ranks): use 3 or 6 ranks, --batch 8 or "
         "16, or --accum 1 or 3"},
        {{"tp", 3, 8, 1, 4, 64, 1, 0, 0, 1, 1, 0, 0, 1}, "3 tensor-parallel ranks do not divide --heads 4: use 2 or 4 ranks"},
        {{"tp", 4, 8, 1, 4, 64, 3, 0, 0, 1, 1, 0, 0, 1}, "--dp 3 does not divide the 4 ranks (N = D x t): use --dp 2 or 4"},
        {{"tp", 4, 9, 1, 4, 64, 2, 0, 0, 1, 1, 0, 0, 1},
         "--batch 9 does not divide over --dp 2 replicas (each replica takes B/D sequences): use --batch 8 or 10, or --dp 1"},
        {{"tp", 8, 8, 1, 8, 64, 1, 0, 1, 1, 1, 0, 0, 1},
         "--vocab-parallel: 8 tensor-parallel ranks do not divide the vocabulary of 256"},  // (it does: see below)
        {{"pp", 3, 8, 1, 4, 64, 2, 0, 0, 4, 1, 0, 0, 1}, "--dp 2 does not divide the 3 ranks: use 2 or 4 ranks, or --dp 1"},
        {{"pp", 3, 8, 1, 4, 64, 2, 0, 0, 4, 1, 0, 1, 1}, "--dp 2 does not divide the 3 ranks: use 2 ranks"},
        {{"pp", 4, 8, 1, 4, 64, 1, 0, 0, 6, 2, 1, 0, 1},
         "interleaved 1F1B sends micro-batches round the ranks in groups of 4: --micro 6 must be a multiple of the 4 stages: "
         "use --micro 4 or 8"},
        {{"pp", 2, 8, 1, 4, 64, 1, 0, 0, 3, 1, 0, 0, 1},
         "--batch 8 does not split into 1 pipeline(s) x 3 micro-batches of equal size: use --batch 6 or 9, or --micro 2 or 4"},
        {{"fsdp", 6, 12, 1, 4, 64, 1, 0, 0, 1, 1, 0, 0, 4},
         "--replicate 4 does not divide the 6 ranks (N = R replicas x S shards): use 4 ranks, or --replicate 3 or 6"},
        {{"fsdp", 4, 8, 1, 4, 64, 1, 0, 0, 1, 1, 0, 0, 2}, NULL},
        {{"ddp", 2, 8, 1, 4, 64, 1, 0, 0, 1, 1, 0, 0, 1}, NULL},
        {{"single", 1, 7, 1, 4, 64, 1, 0, 0, 1, 1, 0, 0, 1}, NULL},
        {{"collectives", 3, 8, 1, 4, 64, 1, 0, 0, 1, 1, 0, 0, 1}, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const BatchSplit *s = &cases[i].s;
        char why[768] = "", bad[300] = "";
        int rc = batch_split_check(s, why, sizeof why);
        if (s->vocab_parallel) {
            // Proves: 8 ranks divide the 256-byte vocabulary (and --heads 8): the mesh splits.
            EXPECT(rc == 0, "tp -n 8 --vocab-parallel --heads 8: splits (%s)", why);
            continue;
        }
        // Proves: the lab's line, then the nearest ranks and option values that divide, each
        // passing every check, none nearer passing (broken variant: nearest() keeps searching
        // past the first value that splits, offering a farther one).
        int offers = rc ? check_offers(s, why, bad, sizeof bad) : 0;
        if (cases[i].line)
            EXPECT(rc == -1 && !strcmp(why, cases[i].line) && offers > 0,
                   "%s -n %d: '%s' (got '%s'%s%s)", s->lab, s->ranks, cases[i].line, why, bad[0] ? "; " : "", bad);
        else EXPECT(rc == 0, "%s -n %d --batch %d: splits (%s)", s->lab, s->ranks, s->batch, why);
    }
    // Proves: on every layout of every lab up to 8 ranks and a batch of 24, what the line
    // offers splits, and nothing nearer does.
    const char *labs[] = {"ddp", "zero", "fsdp", "ckpt", "shard", "tp", "pp"};
    int layouts = 0, failing = 0, wrong = 0;
    char first[400] = "";
    for (int l = 0; l < 7; l++)
        for (int n = 1; n <= 8; n++)
            for (int b = 1; b <= 24; b++)
                for (int knob = 1; knob <= 3; knob++) {
                    BatchSplit s = {.lab = labs[l], .ranks = n, .batch = b, .accum = 1, .heads = 4, .seq = 64, .dp = 1,
                                    .replicate = 1, .micro = 1, .chunks = 1};
                    if (!strcmp(labs[l], "tp")) s.dp = knob, s.sp = b % 2;
                    else if (!strcmp(labs[l], "fsdp")) s.replicate = knob, s.accum = b % 2 ? 1 : 2;
                    else if (!strcmp(labs[l], "pp")) s.dp = knob == 3 ? 2 : 1, s.micro = knob == 2 ? 3 : 4, s.interleaved = b % 3 == 0,
                                                     s.chunks = s.interleaved ? 2 : 1;
                    else s.accum = knob;
                    char why[768], bad[300];
                    layouts++;
                    if (batch_split_check(&s, why, sizeof why) == 0) continue;
                    failing++;
                    if (check_offers(&s, why, bad, sizeof bad) < 0 && !wrong++)
                        snprintf(first, sizeof first, "%s -n %d --batch %d: %s", labs[l], n, b, bad);
                }
    EXPECT(wrong == 0 && failing > 100, "%d layouts, %d refused: every value offered splits and is the nearest (%d wrong%s%s)",
           layouts, failing, wrong, wrong ? ": " : "", first);
    // Proves: the web's reading of a form's options takes the catalog's defaults for the rest.
    char *opts[] = {"--batch", "12", "--schedule", "interleaved", "--sp"};
    BatchSplit pp = batch_split_from_options("pp", 4, 4, opts), tp = batch_split_from_options("tp", 2, 5, opts);
    EXPECT(pp.batch == 12 && pp.interleaved && pp.chunks == 2 && pp.micro == 4 && pp.dp == 1 && pp.accum == 1 && !pp.layers,
           "batch_split_from_options(pp): batch 12, interleaved, 2 chunks, --micro 4 and --dp 1 by default");
    EXPECT(tp.sp && tp.heads == 4 && tp.seq == 64 && !tp.interleaved, "batch_split_from_options(tp): --sp, --heads 4, --seq 64");
}

// ---- the warmup ---------------------------------------------------------------------------

// The single lab's parse, its own options (--moe and its shape) bound as single.c binds them.
static void parse_single(TrainArgs *a, int argc, char **argv) {
    const LabBind own[] = {{"moe", &a->moe}, {"topk", &a->topk}, {"expert-dim", &a->expert_dim},
                           {"capacity", &a->capacity}, {"aux-weight", &a->aux_weight}};
    train_args_parse(a, argc, argv, catalog_lab("single"), own, (int)(sizeof own / sizeof own[0]));
}

static int parse_in_child(char *const argv[]) {
    int argc = 0;
    while (argv[argc]) argc++;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stderr)) _exit(3);
        TrainArgs a;
        parse_single(&a, argc, (char **)argv);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void check_warmup(void) {
    // The warmup given as its automatic value (100) on a 30-step run is the automatic one:
    // accepted, the same schedule at every step (broken variant: args.c's old refusal of a
    // given warmup longer than the run).
    char *given[] = {"single", "--steps", "30", "--warmup", "100", NULL}, *left[] = {"single", "--steps", "30", NULL};
    int status = parse_in_child(given);
    EXPECT(status == 0, "--steps 30 --warmup 100: accepted, as the automatic 100 is (exit %d)", status);
    if (status != 0) return;
    TrainArgs a, b;
    parse_single(&a, 5, given);
    parse_single(&b, 3, left);
    int same = a.warmup == b.warmup && a.decay_steps == b.decay_steps;
    for (int step = 1; step <= 30; step++) same &= train_lr(&a, step) == train_lr(&b, step);
    EXPECT(same && a.warmup == 100 && train_lr(&a, 30) < a.lr, "--warmup 100 and auto on 30 steps: the same schedule, "
           "ending inside the warmup (lr %g < %g at step 30)", train_lr(&a, 30), a.lr);
    // Proves: what contradicts itself is still refused: a warmup longer than --decay-steps.
    char *contra[] = {"single", "--decay-steps", "50", "--warmup", "60", NULL};
    EXPECT(parse_in_child(contra) == 2, "--decay-steps 50 --warmup 60: refused (exit 2)");
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s LABS_DIR SHARDLAB\n", argv[0]);
        return 2;
    }
    labs_dir = argv[1], shardlab = argv[2];
    check_whole();
    check_defaults();
    check_checks();
    check_graded();
    check_help();
    check_launcher();
    check_did_you_mean();
    check_batch_split();
    check_warmup();
    return test_done();
}
