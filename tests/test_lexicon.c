// test_lexicon.c — the lexicon (49 terms) and the lessons: their shape, their links, their
// commands, their formulas, `shardlab lexicon` and `shardlab lesson`.
//
// Usage: test_lexicon ROOT SHARDLAB LAUNCHER LABS_DIR
//   ROOT      the checkout (lexicon/ and lessons/)
//   SHARDLAB  the sanitized build/san/shardlab (its lexicon command runs under ASan)
//   LAUNCHER  the optimized build/shardlab, which runs every command the text gives
//   LABS_DIR  build/labs (the labs the formulas are checked against)
//
// What it proves:
//   1. exactly the 49 terms of the course, one file each, each with its header block (title,
//      also known as, the right category, related terms, labs), a definition of 80 to 250
//      words, and its sections in order with a "Try it" that gives make commands;
//   2. the 19 lessons, each with its sections in order, commands to run and folded answers;
//      README.md's map of the course gives each lesson's labs and terms as the lesson does,
//      and lessons/README.md is not taken for a lesson;
//   3. every [[link]] in terms and lessons resolves, every term is linked from somewhere and
//      listed by `shardlab lexicon`, every lab is used by a term and by a lesson;
//   4. every command in a "Try it" or "Run it" block runs: a one-step run of exactly those
//      options through the launcher exits 0 (so no text names an option a lab lacks);
//   5. the formulas the graders assert, as written in the ZeRO, pipeline-bubble and all-reduce
//      entries, evaluate to what the labs log (memory per rank, bubble fraction, bytes sent);
//   6. the terminal renderer on every file: no failure, and none of the markdown markers the
//      files use left in its output; `shardlab lexicon` finds exact, partial and misspelt
//      names (a title given as several words; the central term first among near ones) and
//      refuses unknown ones with exit 2; `shardlab lesson` lists the 19 lessons and opens one
//      by number (5, 05), slug or title, and refuses an unknown one with exit 2 and one line;
//   7. one value per quantity: the typical MFU range and the threshold of `--algo auto` are
//      stated alike in every file (the threshold as labs/common/comm/dist.c sets it), and no wrapped
//      line turns into a markdown list.
#include <ctype.h>
#include <stdint.h>

#include "common/harness/catalog.h"
#include "labtest.h"
#include "test.h"
#define STEPS 1
#include "command/course/course.h"
#include "mdterm.h"
#include "readmes.h"
#include "shardtest.h"

static const char *root, *shardlab, *launcher, *labs_dir;

// ---------------------------------------------------------------------------------------
// The course's terms, by category (the issue's list)

static const struct {
    const char *slug, *category;
} TERMS[] = {
    {"data-parallelism", "Parallelism strategies"}, {"ddp", "Parallelism strategies"},
    {"model-parallelism", "Parallelism strategies"}, {"tensor-parallelism", "Parallelism strategies"},
    {"sequence-parallelism", "Parallelism strategies"}, {"context-parallelism", "Parallelism strategies"},
    {"pipeline-parallelism", "Parallelism strategies"}, {"expert-parallelism", "Parallelism strategies"},
    {"nd-parallelism", "Parallelism strategies"}, {"device-mesh", "Parallelism strategies"},
    {"zero", "Sharding and memory"}, {"zero-stage-1", "Sharding and memory"}, {"zero-stage-2", "Sharding and memory"},
    {"zero-stage-3", "Sharding and memory"}, {"fsdp", "Sharding and memory"}, {"hsdp", "Sharding and memory"},
    {"zero-offload", "Sharding and memory"}, {"activation-checkpointing", "Sharding and memory"},
    {"gradient-accumulation", "Sharding and memory"}, {"mixed-precision", "Sharding and memory"},
    {"training-memory-breakdown", "Sharding and memory"},
    {"micro-batch", "Pipeline schedules"}, {"pipeline-bubble", "Pipeline schedules"}, {"gpipe", "Pipeline schedules"},
    {"1f1b", "Pipeline schedules"}, {"interleaved-1f1b", "Pipeline schedules"}, {"zero-bubble", "Pipeline schedules"},
    {"collective-communication", "Communication"}, {"send-recv", "Communication"}, {"broadcast", "Communication"},
    {"reduce", "Communication"}, {"all-reduce", "Communication"}, {"ring-all-reduce", "Communication"},
    {"reduce-scatter", "Communication"}, {"all-gather", "Communication"}, {"all-to-all", "Communication"},
    {"barrier", "Communication"},
    {"rank-and-world-size", "Runtime"}, {"process-group", "Runtime"}, {"nccl", "Runtime"},
    {"gradient-bucketing", "Runtime"}, {"compute-communication-overlap", "Runtime"}, {"global-batch-size", "Runtime"},
    {"data-sharding", "Runtime"}, {"distributed-checkpointing", "Runtime"},
    {"nvlink-and-pcie", "Hardware and performance"}, {"infiniband-and-rdma", "Hardware and performance"},
    {"alpha-beta-cost-model", "Hardware and performance"}, {"mfu", "Hardware and performance"},
};
#define NTERMS ((int)(sizeof TERMS / sizeof TERMS[0]))

static const char *LESSONS[] = {
    "01-why-distributed", "02-where-memory-goes", "03-collectives-and-their-cost", "04-data-sharding",
    "05-ddp-from-scratch", "06-global-batch-and-accumulation", "07-bucketing-and-overlap", "08-zero", "09-fsdp",
    "10-tensor-parallelism-basics", "11-tensor-and-sequence-parallelism", "12-pipeline-parallelism",
    "13-pipeline-schedules", "14-activation-checkpointing", "15-checkpoints-and-fault-tolerance", "16-topology",
    "17-hsdp-and-2d-meshes", "18-context-parallelism", "19-experts",
};
#define NLESSONS ((int)(sizeof LESSONS / sizeof LESSONS[0]))

static const char *LABS[] = {"single", "collectives", "ddp", "zero", "fsdp", "tp", "pp", "ckpt", "shard", "cp", "ep"};
#define NLABS ((int)(sizeof LABS / sizeof LABS[0]))

static int is_term(const char *s, size_t n) {
    for (int i = 0; i < NTERMS; i++)
        if (strlen(TERMS[i].slug) == n && memcmp(TERMS[i].slug, s, n) == 0) return 1;
    return 0;
}

static int is_lesson(const char *s, size_t n) {
    for (int i = 0; i < NLESSONS; i++)
        if (strlen(LESSONS[i]) == n && memcmp(LESSONS[i], s, n) == 0) return 1;
    return 0;
}

static int lab_index(const char *s, size_t n) {
    for (int i = 0; i < NLABS; i++)
        if (strlen(LABS[i]) == n && memcmp(LABS[i], s, n) == 0) return i;
    return -1;
}

static char *load(const char *dir, const char *slug) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/%s.md", root, dir, slug);
    return read_file(path, NULL);
}

// The text between the line "## <name>" and the next "## " (NULL if there is no such section).
static char *section(const char *md, const char *name, size_t *len) {
    char want[96];
    snprintf(want, sizeof want, "\n## %s\n", name);
    const char *a = strstr(md, want);
    if (!a) return NULL;
    a += strlen(want);
    const char *b = strstr(a, "\n## ");
    *len = b ? (size_t)(b - a) : strlen(a);
    return (char *)a;
}

// ---------------------------------------------------------------------------------------
// Commands: every `make lab-...` line of a code block, collected, then run once each

#define MAX_COMMANDS 400
static char *commands[MAX_COMMANDS];
static char command_from[MAX_COMMANDS][96];
static int ncommands;
static int lab_in_term[NLABS], lab_in_lesson[NLABS];

static void collect_commands(const char *text, size_t n, const char *from, int lesson) {
    const char *end = text + n;
    for (const char *p = text; p < end;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        const char *s = p;
        while (s < p + len && *s == ' ') s++;
        if ((size_t)(p + len - s) > 9 && strncmp(s, "make lab-", 9) == 0) {
            char line[600];
            snprintf(line, sizeof line, "%.*s", (int)(p + len - s), s);
            const char *lab = line + 9;
            int li = lab_index(lab, strcspn(lab, " "));
            if (li >= 0) (lesson ? lab_in_lesson : lab_in_term)[li] = 1;
            int seen = 0;
            for (int i = 0; i < ncommands; i++) seen |= strcmp(commands[i], line) == 0;
            if (!seen && ncommands < MAX_COMMANDS) {
                snprintf(command_from[ncommands], sizeof command_from[0], "%s", from);
                commands[ncommands++] = strdup(line);
            }
        }
        p = nl ? nl + 1 : end;
    }
}

// An argv built in a fixed store; ok drops to 0 if either fills up.
typedef struct {
    char **argv;
    int max, n;
    char *store;
    size_t cap, used;
    int ok;
} Argv;

static void add(Argv *v, const char *s) {
    size_t l = strlen(s) + 1;
    if (v->n + 1 >= v->max || v->used + l > v->cap) {
        v->ok = 0;
        return;
    }
    memcpy(v->store + v->used, s, l);
    v->argv[v->n++] = v->store + v->used;
    v->used += l;
}

// "make lab-X VAR=value ... ARGS=\"...\"" -> the launcher's argv, as the Makefile builds it,
// then --steps 1 (and, for collectives, small sizes) so that it runs in a moment. NULL if the
// line is not in that form.
static int translate(const char *line, char *argv[], int max, char *store, size_t storelen, const char *dir) {
    char vars[8][2][256];
    int nv = 0;
    const char *p = line + 9;
    char lab[32];
    size_t ll = strcspn(p, " ");
    if (ll >= sizeof lab || lab_index(p, ll) < 0) return 0;
    snprintf(lab, sizeof lab, "%.*s", (int)ll, p);
    p += ll;
    while (*p) {
        while (*p == ' ') p++;
        if (!*p) break;
        const char *eq = strchr(p, '=');
        if (!eq || nv == 8) return 0;
        size_t kl = (size_t)(eq - p);
        if (kl == 0 || kl > 16) return 0;
        snprintf(vars[nv][0], 256, "%.*s", (int)kl, p);
        p = eq + 1;
        size_t vl;
        if (*p == '"') {
            const char *q = strchr(p + 1, '"');
            if (!q) return 0;
            vl = (size_t)(q - p - 1);
            snprintf(vars[nv][1], 256, "%.*s", (int)vl, p + 1);
            p = q + 1;
        } else {
            vl = strcspn(p, " ");
            snprintf(vars[nv][1], 256, "%.*s", (int)vl, p);
            p += vl;
        }
        nv++;
    }
    const char *ngpu = strcmp(lab, "single") == 0 ? "1" : "2", *args = "";
    const char *stage = "1", *schedule = "1f1b", *micro = "4", *policy = "every", *strategy = "sampler";
    for (int i = 0; i < nv; i++) {
        const char *k = vars[i][0], *v = vars[i][1];
        if (strcmp(k, "NGPU") == 0) ngpu = v;
        else if (strcmp(k, "ARGS") == 0) args = v;
        else if (strcmp(k, "STAGE") == 0) stage = v;
        else if (strcmp(k, "SCHEDULE") == 0) schedule = v;
        else if (strcmp(k, "MICRO") == 0) micro = v;
        else if (strcmp(k, "POLICY") == 0) policy = v;
        else if (strcmp(k, "STRATEGY") == 0) strategy = v;
        else if (strcmp(k, "STEPS") != 0 && strcmp(k, "UI") != 0) return 0;  // a variable the Makefile does not have
    }
    Argv v = {argv, max, 0, store, storelen, 0, 1};
    // In the test's directory, so that paths in the text (runs/ckpt, ...) land there.
    const char *head[] = {"/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", tmp, launcher, "run", lab, "-n", ngpu, "--ui", "none"};
    for (int i = 0; i < 11; i++) add(&v, head[i]);
    if (strcmp(lab, "zero") == 0) add(&v, "--stage"), add(&v, stage);
    if (strcmp(lab, "pp") == 0) add(&v, "--schedule"), add(&v, schedule), add(&v, "--micro"), add(&v, micro);
    if (strcmp(lab, "ckpt") == 0) add(&v, "--policy"), add(&v, policy);
    if (strcmp(lab, "shard") == 0) add(&v, "--strategy"), add(&v, strategy);
    // One step, unless the command saves or resumes a checkpoint: then up to its first save
    // (--save-every K), or one step past the checkpoint it resumes (read from its manifest).
    long steps = 1;
    char words[256], *prev = NULL;
    snprintf(words, sizeof words, "%s", args);
    for (char *save = NULL, *w = strtok_r(words, " ", &save); w; prev = w, w = strtok_r(NULL, " ", &save)) {
        add(&v, w);
        if (prev && strcmp(prev, "--save-every") == 0 && atol(w) > steps) steps = atol(w);
        if (prev && strcmp(prev, "--resume") == 0) {
            char manifest[800];
            snprintf(manifest, sizeof manifest, "%s/%s/manifest.json", tmp, w);
            char *m = read_file(manifest, NULL);
            const char *at = m ? strstr(m, "\"step\":") : NULL;
            if (at && atol(at + 7) + 1 > steps) steps = atol(at + 7) + 1;
            free(m);
        }
    }
    char steps_text[32];
    snprintf(steps_text, sizeof steps_text, "%ld", steps);
    add(&v, "--steps"), add(&v, steps_text);
    if (strcmp(lab, "collectives") == 0) add(&v, "--max-bytes"), add(&v, "64K"), add(&v, "--warmup"), add(&v, "0");
    if (!strstr(args, "--run-dir")) add(&v, "--run-dir"), add(&v, dir);  // (a text's own run dir is kept: a later --ref reads it)
    argv[v.n] = NULL;
    return v.ok;
}

static void run_commands(void) {
    int ran = 0, bad = 0;
    for (int i = 0; i < ncommands; i++) {
        char *argv[64], store[4096], dir[512], tag[32];
        snprintf(dir, sizeof dir, "%s/cmd-%d", tmp, i);
        snprintf(tag, sizeof tag, "cmd-%d", i);
        if (!translate(commands[i], argv, 64, store, sizeof store, dir)) {
            EXPECT(0, "%s: '%s' is a make lab-<lab> command with the Makefile's variables", command_from[i], commands[i]);
            bad++;
            continue;
        }
        int status = run(argv, tag);
        ran++;
        if (status != 0) {
            char *err = captured(tag, "err"), *out = captured(tag, "out");
            EXPECT(0, "%s: '%s' runs (one step): exit %d: %s %s", command_from[i], commands[i], status, one_line(err),
                   one_line(out));
            free(err), free(out);
            bad++;
        }
    }
    EXPECT(bad == 0 && ran > 0, "every command of every Try it and Run it block runs one step and exits 0 (%d commands, "
           "%d failed)", ncommands, bad);
}

// ---------------------------------------------------------------------------------------
// Links

static int links_ok(const char *md, const char *from, int *linked) {
    int bad = 0;
    for (const char *p = strstr(md, "[["); p; p = strstr(p + 2, "[[")) {
        const char *q = strstr(p, "]]");
        if (!q) return EXPECT(0, "%s: an unclosed [[", from), 1;
        const char *s = p + 2;
        size_t n = (size_t)(q - s);
        if (is_term(s, n)) {
            for (int i = 0; i < NTERMS; i++)
                if (strlen(TERMS[i].slug) == n && memcmp(TERMS[i].slug, s, n) == 0) linked[i] = 1;
        } else if (!is_lesson(s, n)) {
            EXPECT(0, "%s: [[%.*s]] is neither a term nor a lesson", from, (int)n, s);
            bad++;
        }
    }
    return bad;
}

// ---------------------------------------------------------------------------------------
// 1. Terms

static int count_words(const char *s, size_t n) {
    int w = 0, in = 0;
    for (size_t i = 0; i < n; i++) {
        int c = !isspace((unsigned char)s[i]);
        if (c && !in) w++;
        in = c;
    }
    return w;
}

static void check_terms(int *linked) {
    // Exactly the 49 files.
    char dir[600];
    snprintf(dir, sizeof dir, "%s/lexicon", root);
    int files = 0, unknown = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        size_t l = strlen(e->d_name);
        if (l > 3 && strcmp(e->d_name + l - 3, ".md") == 0) {
            files++;
            if (!is_term(e->d_name, l - 3)) unknown++, printf("# not a term of the course: %s\n", e->d_name);
        }
    }
    if (d) closedir(d);
    EXPECT(files == NTERMS && unknown == 0, "lexicon/: exactly the %d terms, one file each (%d files, %d unknown)",
           NTERMS, files, unknown);

    int header_bad = 0, words_bad = 0, sections_bad = 0, links_bad = 0, labs_bad = 0;
    for (int i = 0; i < NTERMS; i++) {
        char *md = load("lexicon", TERMS[i].slug);
        if (!md) {
            EXPECT(0, "lexicon/%s.md exists", TERMS[i].slug);
            continue;
        }
        // The header block: "# Title", a blank line, the four fields in order.
        char want_cat[128], title[200] = "";
        snprintf(want_cat, sizeof want_cat, "- **Category:** %s\n", TERMS[i].category);
        const char *f1 = strstr(md, "\n- **Also known as:** "), *f2 = strstr(md, "\n- **Category:** "),
                   *f3 = strstr(md, "\n- **Related:** "), *f4 = strstr(md, "\n- **Labs:** ");
        sscanf(md, "# %199[^\n]", title);
        int header = strncmp(md, "# ", 2) == 0 && title[0] && f1 && f2 && f3 && f4 && f1 < f2 && f2 < f3 && f3 < f4 &&
                     strncmp(f2 + 1, want_cat, strlen(want_cat)) == 0 && strstr(f3, "[[") &&
                     strstr(f3, "[[") < strstr(f3 + 1, "\n");
        if (!header) {
            header_bad++;
            printf("# %s: header block (title, also known as, category '%s', related with links, labs)\n",
                   TERMS[i].slug, TERMS[i].category);
        }
        // Labs field: in backticks, a lab's name and the options its Run button fills in
        // ("zero --stage 3": options the catalog gives that lab, with values it takes), or a dash.
        if (f4) {
            const char *p = f4 + strlen("\n- **Labs:** "), *eol = strchr(p, '\n');
            while ((p = strchr(p, '`')) && eol && p < eol) {
                const char *q = strchr(p + 1, '`');
                if (!q || q > eol) break;
                size_t name_len = strcspn(p + 1, " `");
                int li = lab_index(p + 1, name_len);
                if (li < 0) labs_bad++, printf("# %s: Labs names '%.*s', not a lab\n", TERMS[i].slug, (int)(q - p - 1), p + 1);
                else lab_in_term[li] = 1;
                char opts[128], *save = NULL, why[200];
                snprintf(opts, sizeof opts, "%.*s", (int)(q - p - 1 - (int)name_len), p + 1 + name_len);
                char lab_name[32];
                snprintf(lab_name, sizeof lab_name, "%.*s", (int)name_len, p + 1);
                const CatLab *lab = catalog_lab(lab_name);
                for (char *w = strtok_r(opts, " ", &save); lab && w; w = strtok_r(NULL, " ", &save)) {
                    const CatOption *o = !strncmp(w, "--", 2) ? catalog_find(lab, w + 2) : NULL;  // (shared ones too)
                    const char *value = o && o->kind != OPT_FLAG ? strtok_r(NULL, " ", &save) : "";
                    if (!o || !value || (o->kind != OPT_FLAG && catalog_check(o, value, 1, why, sizeof why) != 0))
                        labs_bad++, printf("# %s: Labs '%.*s': '%s' is not an option %s takes\n", TERMS[i].slug,
                                           (int)(q - p - 1), p + 1, w, lab_name);
                }
                p = q + 1;
            }
        }
        // The definition: from the end of the header block to the first section.
        const char *def = f4 ? strchr(f4 + 1, '\n') : NULL, *first = strstr(md, "\n## ");
        int words = def && first && first > def ? count_words(def, (size_t)(first - def)) : 0;
        if (words < 80 || words > 250) words_bad++, printf("# %s: definition of %d words (80..250)\n", TERMS[i].slug, words);
        // Sections: Formula? Diagram? Try it, in that order, nothing else.
        int order = 0, ok = 1, has_try = 0;
        for (const char *h = strstr(md, "\n## "); h; h = strstr(h + 1, "\n## ")) {
            int which = strncmp(h, "\n## Formula\n", 12) == 0 ? 1 : strncmp(h, "\n## Diagram\n", 12) == 0 ? 2
                      : strncmp(h, "\n## Try it\n", 11) == 0 ? 3 : 0;
            if (which <= order) ok = 0;
            order = which;
            has_try |= which == 3;
        }
        size_t tl = 0;
        char *try_it = section(md, "Try it", &tl);
        int has_make = try_it && memmem(try_it, tl, "```sh\nmake lab-", 15);
        if (!ok || !has_try || !has_make)
            sections_bad++, printf("# %s: sections Formula?, Diagram?, Try it (with a ```sh block of make lab- lines)\n",
                                   TERMS[i].slug);
        if (try_it) collect_commands(try_it, tl, TERMS[i].slug, 0);
        links_bad += links_ok(md, TERMS[i].slug, linked);
        free(md);
    }
    EXPECT(header_bad == 0, "every term has its header block: title, also known as, its category, related terms "
           "(linked), labs (%d wrong)", header_bad);
    EXPECT(labs_bad == 0, "every Labs field names labs that exist (%d unknown)", labs_bad);
    EXPECT(words_bad == 0, "every definition is 80 to 250 words (%d outside)", words_bad);
    EXPECT(sections_bad == 0, "every term's sections are Formula?, Diagram?, Try it, in order, Try it with make "
           "commands (%d wrong)", sections_bad);
    EXPECT(links_bad == 0, "every [[link]] in the lexicon is a term or a lesson (%d dangling)", links_bad);
}

// ---------------------------------------------------------------------------------------
// 2. Lessons

static void check_lessons(int *linked) {
    int bad = 0, links_bad = 0, present = 0;
    for (int i = 0; i < NLESSONS; i++) {
        char *md = load("lessons", LESSONS[i]);
        if (!md) {
            EXPECT(0, "lessons/%s.md exists", LESSONS[i]);
            continue;
        }
        present++;
        static const char *order[] = {"Predict first", "Run it", "What to look for", "Exercises", "Terms"};
        const char *at = md;
        int ok = strncmp(md, "# ", 2) == 0;
        for (int k = 0; k < 5; k++) {
            char want[64];
            snprintf(want, sizeof want, "\n## %s\n", order[k]);
            const char *h = strstr(at, want);
            if (!h) ok = 0;
            else at = h + 1;
        }
        size_t rl = 0, el = 0, tl = 0;
        char *run_it = section(md, "Run it", &rl), *ex = section(md, "Exercises", &el), *terms = section(md, "Terms", &tl);
        ok &= run_it && memmem(run_it, rl, "make lab-", 9) != NULL;
        ok &= ex && memmem(ex, el, "<details><summary>Answer</summary>", 34) != NULL;
        ok &= terms && memmem(terms, tl, "[[", 2) != NULL;
        if (!ok) bad++, printf("# %s: title; Predict first, Run it (make lab- lines), What to look for, Exercises (folded "
                               "answers), Terms (links), in order\n", LESSONS[i]);
        if (run_it) collect_commands(run_it, rl, LESSONS[i], 1);
        links_bad += links_ok(md, LESSONS[i], linked);
        free(md);
    }
    EXPECT(present == NLESSONS, "lessons/: the %d lessons, in order 01..18 (%d present)", NLESSONS, present);
    EXPECT(bad == 0, "every lesson has its sections in order, commands to run, folded answers and its terms (%d wrong)", bad);
    EXPECT(links_bad == 0, "every [[link]] in the lessons is a term or a lesson (%d dangling)", links_bad);
}

// The cells of the markdown table row that holds at (its "| ... |" line), into cells[]: up to
// max, each without its padding. Returns how many; 0 if at is on no table row.
static int row_cells(const char *text, const char *at, char cells[][1200], int max) {
    const char *start = at;
    while (start > text && start[-1] != '\n') start--;
    const char *end = strchr(at, '\n');
    if (!end) end = at + strlen(at);
    if (*start != '|') return 0;
    int n = 0;
    for (const char *p = start + 1; p < end && n < max;) {
        const char *bar = memchr(p, '|', (size_t)(end - p));
        if (!bar) break;
        while (p < bar && *p == ' ') p++;
        const char *e = bar;
        while (e > p && e[-1] == ' ') e--;
        snprintf(cells[n++], sizeof cells[0], "%.*s", (int)(e - p), p);
        p = bar + 1;
    }
    return n;
}

// README.md's map of the course: a row per lesson whose lab cell is the labs its "Run it"
// runs (`lab-ddp`, in the order it first runs them) and whose terms cell is its "Terms" (each
// linked to its entry, in the lesson's order). So the map says what the lessons say, and a
// lesson that changes its labs or terms changes its row.
static void check_course_map(void) {
    char path[700];
    snprintf(path, sizeof path, "%s/README.md", root);
    char *readme = read_file(path, NULL);
    int rows = 0, bad = 0;
    for (int i = 0; i < NLESSONS && readme; i++) {
        char *md = load("lessons", LESSONS[i]);
        size_t rl = 0, tl = 0;
        const char *run_it = md ? section(md, "Run it", &rl) : NULL, *terms = md ? section(md, "Terms", &tl) : NULL;
        char labs[400] = "", want_terms[4000] = "";
        for (const char *p = run_it; p && (p = memmem(p, rl - (size_t)(p - run_it), "make lab-", 9)); p += 9) {
            char lab[64];
            snprintf(lab, sizeof lab, "`lab-%.*s`", (int)strspn(p + 9, "abcdefghijklmnopqrstuvwxyz"), p + 9);
            if (!strstr(labs, lab))
                snprintf(labs + strlen(labs), sizeof labs - strlen(labs), "%s%s", labs[0] ? ", " : "", lab);
        }
        for (const char *p = terms; p && (p = memmem(p, tl - (size_t)(p - terms), "[[", 2)); p += 2) {
            const char *close = strstr(p, "]]");
            if (!close) break;
            int k = (int)(close - p - 2);
            snprintf(want_terms + strlen(want_terms), sizeof want_terms - strlen(want_terms), "%s[%.*s](lexicon/%.*s.md)",
                     want_terms[0] ? ", " : "", k, p + 2, k, p + 2);
        }
        char key[200], cells[6][1200];
        snprintf(key, sizeof key, "](lessons/%s.md) |", LESSONS[i]);
        const char *at = strstr(readme, key);
        int n = at ? row_cells(readme, at, cells, 6) : 0;
        if (n != 5 || strcmp(cells[1], labs) || strcmp(cells[4], want_terms)) {
            bad++;
            printf("# README.md's map, lessons/%s.md: %s\n#   labs %s, lesson runs %s\n#   terms %s\n#   lesson's %s\n",
                   LESSONS[i], at ? "its row differs" : "no row", n > 1 ? cells[1] : "-", labs, n > 4 ? cells[4] : "-",
                   want_terms);
        }
        rows += at != NULL;
        free(md);
    }
    // Proves: the map's labs and terms are the lessons' own, row by row. Broken variant:
    // lesson 05's row without its last term, rank-and-world-size: caught, both lists printed.
    EXPECT(readme && rows == NLESSONS && bad == 0,
           "README.md's map of the course: a row per lesson, its labs and terms those of the lesson's Run it and Terms "
           "(%d rows of %d, %d differ)", rows, NLESSONS, bad);
    free(readme);
}

// ---------------------------------------------------------------------------------------
// 5. Formulas: the entries' formula blocks evaluated against what the labs log

typedef struct {
    const char *s;
    const char *names[8];
    double values[8];
    int n, error;
} Expr;

static double expr_sum(Expr *e);

static void skip(Expr *e) {
    while (*e->s == ' ') e->s++;
}

static double expr_atom(Expr *e) {
    skip(e);
    if (*e->s == '(') {
        e->s++;
        double v = expr_sum(e);
        skip(e);
        if (*e->s == ')') e->s++;
        else e->error = 1;
        return v;
    }
    if (*e->s == '-') return e->s++, -expr_atom(e);
    if (isdigit((unsigned char)*e->s) || *e->s == '.') {
        char *end;
        double v = strtod(e->s, &end);
        e->s = end;
        return v;
    }
    if (isalpha((unsigned char)*e->s)) {
        const char *a = e->s;
        while (isalnum((unsigned char)*e->s) || *e->s == '_') e->s++;
        size_t n = (size_t)(e->s - a);
        if (n == 4 && strncmp(a, "sqrt", 4) == 0) return sqrt(expr_atom(e));
        for (int i = 0; i < e->n; i++)
            if (strlen(e->names[i]) == n && strncmp(e->names[i], a, n) == 0) return e->values[i];
    }
    e->error = 1;
    return 0;
}

static double expr_power(Expr *e) {
    double b = expr_atom(e);
    skip(e);
    if (*e->s == '^') return e->s++, pow(b, expr_power(e));
    return b;
}

static double expr_product(Expr *e) {
    double v = expr_power(e);
    for (skip(e); *e->s == '*' || *e->s == '/'; skip(e)) {
        char op = *e->s++;
        double r = expr_power(e);
        v = op == '*' ? v * r : v / r;
    }
    return v;
}

static double expr_sum(Expr *e) {
    double v = expr_product(e);
    for (skip(e); *e->s == '+' || *e->s == '-'; skip(e)) {
        char op = *e->s++;
        double r = expr_product(e);
        v = op == '+' ? v + r : v - r;
    }
    return v;
}

// The value of `name = expression` in the ```formula block of lexicon/<slug>.md, with the
// variables given; NAN if the line is missing or does not evaluate.
static double formula(const char *slug, const char *name, const char *vars, const double *values) {
    char *md = load("lexicon", slug);
    if (!md) return NAN;
    double result = NAN;
    const char *block = strstr(md, "```formula\n");
    const char *end = block ? strstr(block + 11, "```") : NULL;
    for (const char *p = block ? block + 11 : NULL; p && p < end;) {
        const char *nl = strchr(p, '\n');
        char line[256];
        snprintf(line, sizeof line, "%.*s", (int)(nl ? nl - p : (ptrdiff_t)strlen(p)), p);
        char *eq = strchr(line, '=');
        if (eq) {
            char lhs[64];
            snprintf(lhs, sizeof lhs, "%.*s", (int)(eq - line), line);
            for (char *q = lhs + strlen(lhs); q > lhs && q[-1] == ' ';) *--q = 0;
            if (strcmp(lhs, name) == 0) {
                Expr e = {.s = eq + 1};
                char names[128];
                snprintf(names, sizeof names, "%s", vars);
                for (char *save = NULL, *v = strtok_r(names, ",", &save); v && e.n < 8; v = strtok_r(NULL, ",", &save))
                    e.names[e.n] = strdup(v), e.values[e.n] = values[e.n], e.n++;
                double v = expr_sum(&e);
                skip(&e);
                if (!e.error && *e.s == 0) result = v;
                for (int i = 0; i < e.n; i++) free((char *)e.names[i]);
                break;
            }
        }
        p = nl ? nl + 1 : NULL;
    }
    free(md);
    return result;
}

// The first step event of rank 0 in a run directory.
static JsonValue *first_step(const char *dir, Events *ev) {
    load_rank_events(dir, 0, ev);
    for (int i = 0; i < ev->n; i++)
        if (strcmp(kind(ev->lines[i]), "step") == 0) return ev->lines[i];
    return NULL;
}

static void check_formulas(void) {
    // ZeRO at N = 3 (uneven units: padding, so Psi is the padded Psi'): memory per rank.
    Layout lay = layout(3, 1, 64, 64, 2);
    for (int stage = 1; stage <= 3; stage++) {
        char slug[32], st[16], name[32], dir[600];
        snprintf(slug, sizeof slug, "zero-stage-%d", stage);
        snprintf(st, sizeof st, "%d", stage);
        snprintf(name, sizeof name, "formula-zero%d", stage);
        snprintf(dir, sizeof dir, "%s/%s", tmp, name);
        char *args[] = {"--stage", st, "--batch", "6", "--steps", "1", NULL};
        char bin[600];
        snprintf(bin, sizeof bin, "%s/zero", labs_dir);
        int status = run_ranks(bin, 3, name, dir, args, NULL);
        Events ev;
        JsonValue *s = status == 0 ? first_step(dir, &ev) : NULL;
        const JsonValue *mem = s ? json_get(s, "mem") : NULL;
        double vals[2] = {lay.padded, 3};
        static const char *cats[] = {"params", "grads", "optim"};
        for (int c = 0; c < 3; c++) {
            double f = formula(slug, cats[c], "Psi,N", vals), got = mem ? num(mem, cats[c]) : NAN;
            EXPECT(f == got, "%s.md's %s = ... at Psi' = %.0f, N = 3: %.0f bytes; zero --stage %d logs %.0f", slug, cats[c],
                   lay.padded, f, stage, got);
        }
        if (s) free_events(&ev);
    }

    // The pipeline bubble: (p-1)/(m+p-1) at p = 4, m = 8, and interleaved at p = 2, m = 4, v = 2.
    struct {
        const char *name, *n, *extra[12];
        double p, m, v;
    } pipes[] = {
        {"bubble", "4", {"--schedule", "1f1b", "--micro", "8", "--layers", "4", NULL}, 4, 8, 1},
        {"bubble_interleaved", "2", {"--schedule", "interleaved", "--chunks", "2", "--micro", "4", "--layers", "4", NULL}, 2, 4, 2},
    };
    for (int i = 0; i < 2; i++) {
        char dir[600], name[32], bin[600];
        snprintf(name, sizeof name, "formula-pp-%d", i);
        snprintf(dir, sizeof dir, "%s/%s", tmp, name);
        snprintf(bin, sizeof bin, "%s/pp", labs_dir);
        char *args[16];
        int a = 0;
        for (int k = 0; pipes[i].extra[k]; k++) args[a++] = (char *)pipes[i].extra[k];
        args[a++] = "--steps", args[a++] = "1", args[a] = NULL;
        int status = run_ranks(bin, atoi(pipes[i].n), name, dir, args, NULL);
        Events ev;
        JsonValue *s = status == 0 ? first_step(dir, &ev) : NULL;
        const JsonValue *b = s ? json_get(s, "bubble") : NULL;
        double vals[3] = {pipes[i].p, pipes[i].m, pipes[i].v};
        double f = formula("pipeline-bubble", pipes[i].name, "p,m,v", vals), got = b ? num(b, "formula") : NAN;
        EXPECT(fabs(f - got) < 1e-6, "pipeline-bubble.md's %s at p = %.0f, m = %.0f, v = %.0f: %.6f; pp logs %.6f",
               pipes[i].name, pipes[i].p, pipes[i].m, pipes[i].v, f, got);
        if (s) free_events(&ev);
    }

    // The ring all-reduce: bytes sent per rank for S bytes, against ddp's gradient all-reduces
    // at N = 2 (S = 4 Psi: fp32 gradients), the count its own check event asserts.
    char dir[600], bin[600];
    snprintf(dir, sizeof dir, "%s/formula-ddp", tmp);
    snprintf(bin, sizeof bin, "%s/ddp", labs_dir);
    char *args[] = {"--steps", "1", "--algo", "ring", NULL};
    int status = run_ranks(bin, 2, "formula-ddp", dir, args, NULL);
    Events ev;
    load_rank_events(dir, 0, &ev);
    double got = NAN;
    for (int i = 0; status == 0 && i < ev.n; i++)
        if (strcmp(kind(ev.lines[i]), "check") == 0 && strcmp(json_get(ev.lines[i], "name")->string, "comm.grad_bytes_sent") == 0)
            got = num(ev.lines[i], "value");
    free_events(&ev);
    double vals[2] = {2, 4.0 * 136960};
    for (int k = 0; k < 2; k++) {
        const char *slug = k ? "ring-all-reduce" : "all-reduce";
        double f = formula(slug, "bytes_sent_per_rank", "N,S", vals);
        EXPECT(f == got, "%s.md's bytes_sent_per_rank at N = 2, S = 4 Psi = %.0f: %.0f; ddp's ring sends %.0f", slug,
               vals[1], f, got);
    }

    // HSDP at N = 6 as 2 replicas x 3 shards (units padded: Psi is the padded Psi'): the state
    // per rank and the bytes in and across groups, against fsdp --replicate 2.
    snprintf(dir, sizeof dir, "%s/formula-hsdp", tmp);
    snprintf(bin, sizeof bin, "%s/fsdp", labs_dir);
    char *hsdp[] = {"--steps", "1", "--replicate", "2", "--batch", "6", NULL};
    status = run_ranks(bin, 6, "formula-hsdp", dir, hsdp, NULL);
    JsonValue *s = status == 0 ? first_step(dir, &ev) : NULL;
    const JsonValue *mem = s ? json_get(s, "mem") : NULL;
    double state = mem ? num(mem, "params") + num(mem, "grads") + num(mem, "optim") : NAN;
    double in_group = s ? num(s, "unit_bytes_sent") : NAN, across = s ? num(s, "replica_bytes_sent") : NAN;
    double hv[3] = {layout(3, 2, 64, 64, 2).padded, 3, 2};
    struct {
        const char *name;
        double got;
        const char *what;
    } h[] = {{"state_bytes_per_rank", state, "params + grads + optim"},
             {"bytes_sent_in_group", in_group, "unit_bytes_sent"},
             {"bytes_sent_across_groups", across, "replica_bytes_sent"}};
    for (int k = 0; k < 3; k++) {
        double f = formula("hsdp", h[k].name, "Psi,S,R", hv);
        EXPECT(fabs(f - h[k].got) < 0.5, "hsdp.md's %s at Psi' = %.0f, S = 3, R = 2: %.0f; fsdp --replicate 2 on 6 ranks "
               "logs %.0f (%s)", h[k].name, hv[0], f, h[k].got, h[k].what);
    }
    if (s) free_events(&ev);

    // Context parallelism on 4 ranks (T = 64 splits evenly into 8 zig-zag chunks): the ring's
    // bytes of one step against context-parallelism.md's formula.
    snprintf(dir, sizeof dir, "%s/formula-cp", tmp);
    snprintf(bin, sizeof bin, "%s/cp", labs_dir);
    char *cp[] = {"--steps", "1", NULL};
    status = run_ranks(bin, 4, "formula-cp", dir, cp, NULL);
    s = status == 0 ? first_step(dir, &ev) : NULL;
    double ring = s ? num(s, "ring_bytes_sent") : NAN;
    double cv[5] = {4, 64, 8, 64, 2};
    double f = formula("context-parallelism", "ring_bytes_sent_per_step", "N,T,B,C,L", cv);
    EXPECT(f == ring, "context-parallelism.md's ring_bytes_sent_per_step at N = 4, T = 64, B = 8, C = 64, L = 2: %.0f; "
           "cp on 4 ranks logs %.0f", f, ring);
    if (s) free_events(&ev);
}

// ---------------------------------------------------------------------------------------
// 6. Rendering, and the command

// Markers the files use that a reader must never see in the terminal.
static const char *raw_marker(const char *out) {
    static const char *markers[] = {"**", "[[", "]]", "```", "`", "<details", "<summary", "</", "|---", "| --"};
    for (size_t i = 0; i < sizeof markers / sizeof markers[0]; i++)
        if (strstr(out, markers[i])) return markers[i];
    for (const char *l = out; l; l = strchr(l, '\n')) {
        if (*l == '\n') l++;
        if (l[0] == '#' && (l[1] == ' ' || l[1] == '#')) return "# at a line's start";
    }
    return NULL;
}

static void check_rendering(void) {
    char dir[600], err[256];
    snprintf(dir, sizeof dir, "%s/lexicon", root);
    Lexicon lx;
    int loaded = lexicon_load(&lx, dir, err, sizeof err) == 0;
    EXPECT(loaded, "the lexicon loads: %s", loaded ? "ok" : err);
    if (!loaded) return;
    int bad = 0, files = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < (pass ? NLESSONS : NTERMS); i++) {
            char *md = load(pass ? "lessons" : "lexicon", pass ? LESSONS[i] : TERMS[i].slug);
            if (!md) continue;
            files++;
            for (int color = 0; color < 2; color++) {
                StrBuf out;
                sb_init(&out);
                MdTermOptions o = {.width = 72, .color = color, .link_name = lexicon_link_name, .link_ctx = &lx};
                int rc = mdterm_render(md, strlen(md), &o, &out);
                const char *left = color ? NULL : raw_marker(out.data ? out.data : "");
                if (rc != 0 || out.len < 200 || left) {
                    bad++;
                    printf("# %s: rendered rc %d, %zu bytes, raw marker left: %s\n", pass ? LESSONS[i] : TERMS[i].slug, rc,
                           out.len, left ? left : "none");
                }
                sb_free(&out);
            }
            free(md);
        }
    EXPECT(bad == 0 && files > 0, "the terminal renderer on every term and lesson (%d files, plain and in colour): no "
           "failure, no markdown marker left (%d bad)", files, bad);

    // Fuzz: the entries cut, spliced and sprinkled with the constructs the renderer handles,
    // 300 documents, at narrow and wide widths, in colour and not: it must never fail (ASan).
    const char *bits[] = {"[[", "]]", "[[zero", "|", "|---|", "```", "<details><summary>", "</summary>", "**", "`",
                          "\n", "# ", "- ", "1. ", "> ", "&amp;", "&#x", "\\", "[a](", ")", "\t", "    "};
    char *src = load("lexicon", "ring-all-reduce");
    size_t n = src ? strlen(src) : 0;
    unsigned seed = 4242;
    int fuzz_bad = 0;
    for (int d = 0; d < 300 && src; d++) {
        StrBuf doc, out;
        sb_init(&doc), sb_init(&out);
        for (int k = 0; k < 40; k++) {
            seed = seed * 1103515245u + 12345u;
            size_t at = (seed >> 8) % n, len = (seed >> 3) % 120;
            if (at + len > n) len = n - at;
            sb_append(&doc, src + at, len);
            sb_printf(&doc, "%s", bits[(seed >> 16) % (sizeof bits / sizeof bits[0])]);
        }
        MdTermOptions o = {.width = d % 3 == 0 ? 40 : 120, .color = d % 2, .link_name = lexicon_link_name, .link_ctx = &lx};
        if (mdterm_render(doc.data, doc.len, &o, &out) != 0) fuzz_bad++;
        sb_free(&doc), sb_free(&out);
    }
    free(src);
    EXPECT(fuzz_bad == 0, "fuzz: 300 mangled documents through the terminal renderer, none failed (ASan watches)");

    // A link with no text (and no address) first in a document: the renderer compares an
    // empty text with the address and must not hand memcmp the buffer it has not allocated
    // yet (UBSan stops the test here if it does). Broken variant: memcmp on the empty buffer.
    {
        StrBuf empty;
        sb_init(&empty);
        MdTermOptions eo = {.width = 80, .color = 0};
        int rc = mdterm_render("[]()\n\n[](x)\n", 12, &eo, &empty);
        EXPECT(rc == 0 && empty.data, "links with no text, first in a document ([]() and [](x)): rendered (%s)",
               one_line(empty.data ? empty.data : ""));
        sb_free(&empty);
    }

    // Hostile markdown in the terminal: a link's target is shown only if it is a web or site
    // address (never javascript:, vbscript:, data:, however spelt), and the text's control
    // characters (a terminal escape that clears the screen or sets the clipboard) are not
    // passed to the terminal. Broken variant: every href shown and text emitted byte for byte.
    const char *hostile = "# Hostile\n\n[a](javascript:alert(1)) [b](JaVaScRiPt:alert(2)) [c](<java\tscript:alert(3)>) "
                          "[d](vbscript:msgbox) [e](data:text/html,x) [f](&#106;avascript:alert(6)) "
                          "[ok](https://example.org/x) [rel](/lexicon/zero)\n\n"
                          "clear \033[2J and clipboard \033]52;c;ZWNobyBoaQ==\a and a bell \a here\n";
    StrBuf out;
    sb_init(&out);
    MdTermOptions o = {.width = 100, .color = 0};
    mdterm_render(hostile, strlen(hostile), &o, &out);
    int controls = 0;
    for (size_t i = 0; i < out.len; i++) controls += (unsigned char)out.data[i] < 32 && out.data[i] != '\n';
    char lower[4096] = "";
    for (size_t i = 0; i < out.len && i + 1 < sizeof lower; i++) lower[i] = (char)tolower((unsigned char)out.data[i]);
    EXPECT(out.data && !strstr(lower, "javascript") && !strstr(lower, "vbscript") && !strstr(lower, "data:") && controls == 0 &&
           strstr(out.data, "ok (https://example.org/x)") && strstr(out.data, "rel (/lexicon/zero)"),
           "hostile markdown in the terminal: no javascript:, vbscript: or data: target shown, no control character "
           "passed through (%d), web and site links shown: %s", controls, one_line(out.data ? out.data : ""));
    sb_free(&out);
    lexicon_free(&lx);
}

static int lexicon_cmd(const char *tag, const char *a1, const char *a2) {
    char *argv[] = {(char *)shardlab, "lexicon", (char *)a1, (char *)a2, NULL};
    char rootenv[700];
    snprintf(rootenv, sizeof rootenv, "SHARDLAB_ROOT=%s", root);
    char *env[] = {rootenv, "NO_COLOR=1", NULL};
    return run_env(argv, tag, env);
}

// `shardlab lesson WORDS...` with the checkout as SHARDLAB_ROOT, colours left to the command
// (its output here is a file, not a terminal).
static int lesson_cmd(const char *tag, char *const words[]) {
    char *argv[8] = {(char *)shardlab, "lesson"};
    for (int i = 0; words[i] && i < 5; i++) argv[i + 2] = words[i];
    char rootenv[700];
    snprintf(rootenv, sizeof rootenv, "SHARDLAB_ROOT=%s", root);
    char *env[] = {rootenv, NULL};
    return run_env(argv, tag, env);
}

static void check_lesson_command(void) {
    // The list: every lesson, its number and its title (as its first line gives them, less the
    // number), in order. Broken variant: numbers from the position in the directory listing.
    int status = lesson_cmd("lessons", (char *[]){NULL});
    char *out = captured("lessons", "out");
    int listed = 0;
    const char *after = out;
    for (int i = 0; i < NLESSONS; i++) {
        char *md = load("lessons", LESSONS[i]), want[256];
        const char *dot = md ? strstr(md, ". ") : NULL, *eol = md ? strchr(md, '\n') : NULL;
        if (!dot || !eol || dot > eol) {
            printf("# lessons/%s.md: no first line '# N. Title'\n", LESSONS[i]);
            free(md);
            continue;
        }
        snprintf(want, sizeof want, "\n  %2d  %.*s\n", atoi(LESSONS[i]), (int)(eol - dot - 2), dot + 2);
        const char *at = strstr(after, want);
        if (at) listed++, after = at + 1;
        else printf("# shardlab lesson does not list, in order: %s", want + 1);
        free(md);
    }
    EXPECT(status == 0 && listed == NLESSONS && count_lines(out) == NLESSONS + 2,
           "shardlab lesson: lists the %d lessons in order, number and title (%d listed, exit %d)", NLESSONS, listed,
           status);
    // Proves: lessons/README.md, the folder's own documentation, is no lesson: it is there,
    // and the list above holds the 19 lessons and nothing more. Broken variant: course.c
    // reading every *.md lists it as a 20th (README, "The lexicon and the lessons").
    char readme[700];
    snprintf(readme, sizeof readme, "%s/lessons/README.md", root);
    EXPECT(access(readme, R_OK) == 0 && !strstr(out, "The lexicon and the lessons"),
           "shardlab lesson: lessons/README.md is there and is not listed as a lesson");
    free(out);

    // One lesson four ways: its number, with a leading zero, its slug without the number, its
    // title as three unquoted words. Each opens lesson 05 whole (its title first, its last
    // section, "Terms", rendered), with no "closest lesson" note, and since the output is a
    // file, not a terminal, without colours. Broken variant: the number looked up as a name
    // ("5" is then no lesson's name, and lesson 5 does not open).
    char *const ways[][4] = {{"5", NULL}, {"05", NULL}, {"ddp-from-scratch", NULL}, {"ddp", "from", "scratch", NULL}};
    for (size_t i = 0; i < sizeof ways / sizeof ways[0]; i++) {
        char tag[32], words[64] = "";
        snprintf(tag, sizeof tag, "lesson-%zu", i);
        for (int w = 0; ways[i][w]; w++)
            snprintf(words + strlen(words), sizeof words - strlen(words), "%s%s", w ? " " : "", ways[i][w]);
        int st = lesson_cmd(tag, ways[i]);
        char *o = captured(tag, "out");
        EXPECT(st == 0 && strncmp(o, "5. DDP from scratch\n", 20) == 0 && strstr(o, "\nTerms\n") &&
                   !strstr(o, "closest") && !strchr(o, '\033') && !raw_marker(o),
               "shardlab lesson %s: lesson 05, whole, rendered, plain (exit %d; its first line: %.*s)", words, st,
               (int)strcspn(o, "\n"), o);
        free(o);
    }

    // Unknown lessons: exit 2, nothing on stdout, one line on stderr; a number out of range says
    // which numbers there are, a name gives the closest lessons. Broken variant: a number out
    // of range opening the nearest name instead.
    status = lesson_cmd("lesson-99", (char *[]){"99", NULL});
    out = captured("lesson-99", "out");
    char *e = captured("lesson-99", "err");
    EXPECT(status == 2 && !out[0] && count_lines(e) == 1 && strstr(e, "numbered 1 to 19"),
           "shardlab lesson 99: exit 2, one line naming the numbers there are (exit %d): %s", status, one_line(e));
    free(out), free(e);
    status = lesson_cmd("lesson-nosuch", (char *[]){"nosuch", NULL});
    out = captured("lesson-nosuch", "out");
    e = captured("lesson-nosuch", "err");
    EXPECT(status == 2 && !out[0] && count_lines(e) == 1 && strstr(e, "the closest: "),
           "shardlab lesson nosuch: exit 2, one line with the closest lessons (exit %d): %s", status, one_line(e));
    free(out), free(e);
    status = lesson_cmd("lesson-help", (char *[]){"--help", NULL});
    out = captured("lesson-help", "out");
    EXPECT(status == 0 && strncmp(out, "usage: shardlab lesson", 22) == 0, "shardlab lesson --help: the usage, exit 0");
    free(out);
    // `make lesson N="ddp from scratch"` hands N over quoted, as lexicon does TERM.
    char path[700];
    snprintf(path, sizeof path, "%s/Makefile", root);
    char *mk = read_file(path, NULL);
    const char *line = mk ? strstr(mk, "\n\t$(SHARDLAB) lesson ") : NULL;
    const char *eol = line ? strchr(line + 1, '\n') : NULL, *quoted = line ? strstr(line, "\"$(N)\"") : NULL;
    EXPECT(quoted && eol && quoted < eol, "the Makefile's lesson target quotes $(N)");
    free(mk);
}

static void check_command(int *linked) {
    // The index lists every term, in its category.
    int status = lexicon_cmd("index", NULL, NULL);
    char *out = captured("index", "out");
    int missing = 0;
    for (int i = 0; i < NTERMS; i++) {
        char want[96];
        snprintf(want, sizeof want, "\n  %s ", TERMS[i].slug);
        if (!strstr(out, want)) missing++, printf("# the index does not list %s\n", TERMS[i].slug);
        else linked[i] = 1;  // reachable from the index
    }
    int cats = 1;
    for (int c = 0; c < LEXICON_NCATEGORIES; c++) cats &= strstr(out, LEXICON_CATEGORIES[c]) != NULL;
    EXPECT(status == 0 && missing == 0 && cats, "shardlab lexicon: the index lists all %d terms under the 6 categories "
           "(%d missing)", NTERMS, missing);
    free(out);

    struct {
        const char *name, *expect_in_out;
    } finds[] = {
        {"zero-stage-3", "ZeRO stage 3"},       // the slug
        {"ZeRO stage 3", "ZeRO stage 3"},       // the title
        {"Ring all-reduce", "Ring all-reduce"}, // case and punctuation do not matter
        {"ringallred", "Ring all-reduce"},      // part of one name only
        {"fsdpp", "FSDP"},                      // one letter too many
        {"pipline-bubble", "Pipeline bubble"},  // one letter missing
    };
    for (size_t i = 0; i < sizeof finds / sizeof finds[0]; i++) {
        char tag[32];
        snprintf(tag, sizeof tag, "find-%zu", i);
        int st = lexicon_cmd(tag, finds[i].name, NULL);
        char *o = captured(tag, "out");
        EXPECT(st == 0 && strstr(o, finds[i].expect_in_out) && !raw_marker(o),
               "shardlab lexicon '%s' shows %s, rendered (status %d)", finds[i].name, finds[i].expect_in_out, st);
        free(o);
    }
    status = lexicon_cmd("unknown", "qwertyuiop", NULL);
    char *e = captured("unknown", "err");
    EXPECT(status == 2 && count_lines(e) == 1, "shardlab lexicon qwertyuiop: exit 2, one line: %s", one_line(e));
    free(e);
    status = lexicon_cmd("ambiguous", "zero", NULL);  // exact: the umbrella term, not its stages
    out = captured("ambiguous", "out");
    EXPECT(status == 0 && strstr(out, "ZeRO"), "shardlab lexicon zero: the ZeRO entry (exact beats partial)");
    // Its formulas as the file writes them, each line whole on a line of its own: the browser
    // draws them as mathematics (web/static/math.js), the terminal keeps the text one can copy.
    // Broken variant: the renderer dropping a ```formula block, or rewriting its lines.
    char *md = load("lexicon", "zero");
    const char *block = md ? strstr(md, "```formula\n") : NULL;
    const char *block_end = block ? strstr(block + 11, "\n```") : NULL;
    int formula_lines = 0, shown = 0;
    for (const char *l = block_end ? block + 11 : NULL; l && l < block_end; l = strchr(l, '\n') + 1) {
        char want[200];
        snprintf(want, sizeof want, " %.*s\n", (int)(strchr(l, '\n') - l), l);
        formula_lines++;
        shown += strstr(out, want) != NULL;
    }
    EXPECT(formula_lines == 6 && shown == formula_lines && !strstr(out, "\\frac") && !strstr(out, "\\text"),
           "shardlab lexicon zero: its %d formula lines as plain text, as written (%d shown)", formula_lines, shown);
    free(md);
    free(out);
    status = lexicon_cmd("partial", "stage", NULL);  // part of three names: suggestions, exit 2
    e = captured("partial", "err");
    EXPECT(status == 2 && strstr(e, "zero-stage-1") && strstr(e, "zero-stage-3"),
           "shardlab lexicon stage: exit 2 with the closest terms: %s", one_line(e));
    free(e);
    status = lexicon_cmd("badopt", "--bogus", NULL);
    EXPECT(status == 2, "shardlab lexicon --bogus: exit 2");

    // A title in several words, unquoted, as `make lexicon TERM="zero stage 3"` passes it after
    // a shell splits it: the words are one name, and the entry opens without a "closest term"
    // note. Broken variant: a second word refused ("one term at a time").
    {
        char *argv_words[] = {(char *)shardlab, "lexicon", "zero", "stage", "3", NULL};
        char rootenv[700];
        snprintf(rootenv, sizeof rootenv, "SHARDLAB_ROOT=%s", root);
        char *env[] = {rootenv, "NO_COLOR=1", NULL};
        int st = run_env(argv_words, "words", env);
        char *o = captured("words", "out");
        EXPECT(st == 0 && strncmp(o, "ZeRO stage 3\n", 13) == 0 && !strstr(o, "closest"),
               "shardlab lexicon zero stage 3 (three words): the ZeRO stage 3 entry (exit %d)", st);
        free(o);
    }
    // The Makefile hands TERM over quoted, so that make lexicon TERM="zero stage 3" reaches the
    // command as one name even when the command line is split again. Broken variant: unquoted.
    {
        char path[700];
        snprintf(path, sizeof path, "%s/Makefile", root);
        char *mk = read_file(path, NULL);
        const char *line = mk ? strstr(mk, "\n\t$(SHARDLAB) lexicon ") : NULL;
        const char *eol = line ? strchr(line + 1, '\n') : NULL;
        const char *quoted = line ? strstr(line, "\"$(LEXICON_TERM)\"") : NULL;
        EXPECT(quoted && eol && quoted < eol, "the Makefile's lexicon target quotes $(LEXICON_TERM)");
        free(mk);
    }
    // A misspelt word: "pipelne" is one edit from the word "pipeline" of several titles, and
    // the central term comes first. Broken variant: suggestions ranked by edits to whole names
    // only, which puts short names (gpipe, mfu, nccl) first.
    status = lexicon_cmd("misspelt", "pipelne", NULL);
    e = captured("misspelt", "err");
    EXPECT(status == 2 && strstr(e, "the closest: pipeline-parallelism, pipeline-bubble"),
           "shardlab lexicon pipelne: exit 2, pipeline-parallelism suggested first: %s", one_line(e));
    free(e);
    // Two letters swapped are one edit (common/harness/suggest.c, the distance every did-you-mean of
    // shardlab uses): "fdsp" opens FSDP, as the closest term. Broken variant: Levenshtein's
    // distance, where the swap is two edits, more than a four-letter name allows.
    status = lexicon_cmd("swapped", "fdsp", NULL);
    out = captured("swapped", "out");
    EXPECT(status == 0 && strstr(out, "(fsdp: the closest term to 'fdsp')") && strstr(out, "FSDP"),
           "shardlab lexicon fdsp: exit 0, the FSDP entry as the closest term (exit %d): %s", status, one_line(out));
    free(out);
}

// ---------------------------------------------------------------------------------------
// 7. One value per quantity: what several files state, they state alike

// The files a reader meets a quantity in: the terms, the lessons and the READMEs (README.md
// and each folder's, tests/readmes.h; and, for the all-reduce threshold, the option's help in
// labs/common/harness/catalog.c). Returns how many it read into texts[] (paths in names[]).
#define MAX_TEXTS 96
static int read_texts(char *texts[], char names[][96], int with_catalog) {
    int n = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < (pass ? NLESSONS : NTERMS) && n < MAX_TEXTS; i++) {
            texts[n] = load(pass ? "lessons" : "lexicon", pass ? LESSONS[i] : TERMS[i].slug);
            snprintf(names[n], 96, "%s/%s.md", pass ? "lessons" : "lexicon", pass ? LESSONS[i] : TERMS[i].slug);
            if (texts[n]) n++;
        }
    char *extra[README_MAX + 1];
    int nextra = readme_paths(root, extra, README_MAX);
    if (with_catalog) extra[nextra++] = strdup("labs/common/harness/catalog.c");
    for (int i = 0; i < nextra; i++) {
        if (n < MAX_TEXTS) {
            char path[700];
            snprintf(path, sizeof path, "%s/%s", root, extra[i]);
            texts[n] = read_file(path, NULL);
            snprintf(names[n], 96, "%s", extra[i]);
            if (texts[n]) n++;
        }
        free(extra[i]);
    }
    return n;
}

// "30 to 50%", "30–50%", "30-50 %" at p: the two bounds; 0 if p does not start such a range.
static int percent_range(const char *p, double *a, double *b) {
    char *e;
    if (!isdigit((unsigned char)*p)) return 0;
    *a = strtod(p, &e);
    while (*e == ' ') e++;
    if (strncmp(e, "to", 2) == 0) e += 2;
    else if (strncmp(e, "\xe2\x80\x93", 3) == 0) e += 3;  // an en dash
    else if (*e == '-') e++;
    else return 0;
    while (*e == ' ') e++;
    if (!isdigit((unsigned char)*e)) return 0;
    *b = strtod(e, &e);
    while (*e == ' ') e++;
    return *e == '%';
}

// "64 KiB", "65536 bytes", "65,536 bytes", "1 MiB" at p, in bytes; -1 if none.
static double size_at(const char *p) {
    char digits[32];
    int k = 0;
    for (; (isdigit((unsigned char)*p) || (*p == ',' && isdigit((unsigned char)p[1]))) && k < 31; p++)
        if (*p != ',') digits[k++] = *p;
    digits[k] = 0;
    if (!k) return -1;
    while (*p == ' ') p++;
    double v = atof(digits);
    if (strncmp(p, "KiB", 3) == 0) return v * 1024;
    if (strncmp(p, "MiB", 3) == 0) return v * 1024 * 1024;
    if (strncmp(p, "bytes", 5) == 0 || (*p == 'B' && !isalpha((unsigned char)p[1]))) return v;
    return -1;
}

// The threshold of `--algo auto` as the code sets it: "direct_max_bytes = 64 * 1024;" in
// labs/common/comm/dist.c, a product of integers. -1 if it is not there in that form.
static double auto_threshold_in_code(void) {
    char path[700];
    snprintf(path, sizeof path, "%s/labs/common/comm/dist.c", root);
    char *src = read_file(path, NULL);
    const char *p = src ? strstr(src, "direct_max_bytes = ") : NULL;
    double v = -1;
    if (p) {
        p += strlen("direct_max_bytes = ");
        v = 1;
        for (;;) {
            char *e;
            long f = strtol(p, &e, 10);
            if (e == p) { v = -1; break; }
            v *= (double)f;
            while (*e == ' ') e++;
            if (*e != '*') break;
            p = e + 1;
            while (*p == ' ') p++;
        }
    }
    free(src);
    return v;
}

static void check_one_value_per_quantity(void) {
    char *texts[MAX_TEXTS], names[MAX_TEXTS][96];
    int n = read_texts(texts, names, 1);

    // The typical MFU: every paragraph that gives a range of percentages and speaks of MFU or
    // of peak states the same range (mfu.md and lesson 01 both do). Broken variant: mfu.md
    // back at "35 to 55%" beside lesson 01's "30 to 50%".
    double first_a = -1, first_b = -1;
    int ranges = 0, differ = 0;
    char seen[512] = "";
    for (int t = 0; t < n; t++) {
        if (strstr(names[t], ".c")) continue;
        for (const char *para = texts[t]; para && *para;) {
            const char *end = strstr(para, "\n\n");
            size_t len = end ? (size_t)(end - para) : strlen(para);
            char *pa = strndup(para, len);
            if (strcasestr(pa, "mfu") || strcasestr(pa, "peak"))
                for (const char *p = pa; *p; p++) {
                    double a, b;
                    int starts = p == pa || (!isdigit((unsigned char)p[-1]) && p[-1] != '.');  // a whole number
                    if (starts && percent_range(p, &a, &b)) {
                        if (ranges++ == 0) first_a = a, first_b = b;
                        else if (a != first_a || b != first_b) differ++;
                        snprintf(seen + strlen(seen), sizeof seen - strlen(seen), "%s%s %g-%g%%", strlen(seen) ? ", " : "",
                                 names[t], a, b);
                    }
                }
            free(pa);
            para = end ? end + 2 : NULL;
        }
    }
    EXPECT(ranges >= 2 && differ == 0, "the typical MFU range is one range wherever it is stated (%d statements, %d "
           "different from the first): %s", ranges, differ, seen);

    // The all-reduce threshold of `--algo auto`: every "direct up to SIZE" in the text and in
    // the option's help equals the constant in labs/common/comm/dist.c, and every paragraph of a term
    // or lesson that names `--algo auto` states it so. Broken variant: lesson 16 saying
    // "direct up to 16 KiB" (where its own run crossed over) while the code switches at 64 KiB.
    double code = auto_threshold_in_code();
    int statements = 0, wrong = 0, unstated = 0;
    char found[768] = "";
    for (int t = 0; t < n; t++) {
        for (const char *para = texts[t]; para && *para;) {
            const char *end = strstr(para, "\n\n");
            size_t len = end ? (size_t)(end - para) : strlen(para);
            char *pa = strndup(para, len);
            int here = 0;
            for (const char *p = pa; (p = strstr(p, "direct")); p++) {
                const char *q = p + 6;  // "direct", a backtick maybe, then "up to" across a line break too
                if (*q == '`') q++;
                if (!isspace((unsigned char)*q)) continue;
                while (isspace((unsigned char)*q)) q++;
                if (strncmp(q, "up", 2) != 0 || !isspace((unsigned char)q[2])) continue;
                for (q += 2; isspace((unsigned char)*q);) q++;
                if (strncmp(q, "to", 2) != 0 || !isspace((unsigned char)q[2])) continue;
                for (q += 2; isspace((unsigned char)*q);) q++;
                double v = size_at(q);
                here++, statements++;
                if (v != code) wrong++;
                snprintf(found + strlen(found), sizeof found - strlen(found), "%s%s %.0f", strlen(found) ? ", " : "",
                         names[t], v);
            }
            if (strstr(pa, "algo auto") && !here && !strstr(names[t], ".c"))
                unstated++, printf("# %s: a paragraph names --algo auto without \"direct up to SIZE\"\n", names[t]);
            free(pa);
            para = end ? end + 2 : NULL;
        }
    }
    EXPECT(code > 0 && statements >= 3 && wrong == 0 && unstated == 0,
           "the direct/ring all-reduce threshold is the code's %.0f bytes wherever it is stated (%d statements, %d "
           "different, %d paragraphs naming --algo auto without it): %s", code, statements, wrong, unstated, found);
    for (int t = 0; t < n; t++) free(texts[t]);
}

// Lists the text did not mean: in markdown a line "1. " (or "1) ") right under a line of a
// paragraph starts an ordered list, so a sentence wrapped before "1. That makes m ..." becomes
// a list item. Every term and lesson, outside code blocks; and lesson 13's sentence, rendered,
// stays in its paragraph (no blank line between "just" and "1."). Broken variant: lesson 13
// wrapped as "... the last one just\n1. That makes m a free parameter".
static void check_no_spurious_lists(void) {
    int bad = 0;
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < (pass ? NLESSONS : NTERMS); i++) {
            char *md = load(pass ? "lessons" : "lexicon", pass ? LESSONS[i] : TERMS[i].slug);
            int fence = 0, line_no = 0;
            const char *prev = "", *prev_end = prev;
            for (const char *l = md; l && *l; line_no++) {
                const char *nl = strchr(l, '\n'), *end = nl ? nl : l + strlen(l);
                const char *s = l;
                while (s < end && *s == ' ') s++;
                if (end - s >= 3 && strncmp(s, "```", 3) == 0) fence = !fence;
                const char *ps = prev;
                while (ps < prev_end && *ps == ' ') ps++;
                int prev_text = ps < prev_end && *ps != '#' && *ps != '|' && *ps != '<' &&
                                !((*ps == '-' || *ps == '*' || *ps == '+') && ps[1] == ' ') &&
                                !(isdigit((unsigned char)*ps) && (strchr(".)", ps[strspn(ps, "0123456789")]) != NULL));
                if (!fence && s - l <= 3 && end - s > 3 && s[0] == '1' && (s[1] == '.' || s[1] == ')') && s[2] == ' ' &&
                    prev_text) {
                    bad++;
                    printf("# %s/%s.md:%d: \"%.*s\" under a paragraph's line starts a list\n", pass ? "lessons" : "lexicon",
                           pass ? LESSONS[i] : TERMS[i].slug, line_no + 1, (int)(end - s > 40 ? 40 : end - s), s);
                }
                prev = l, prev_end = end;
                l = nl ? nl + 1 : NULL;
            }
            free(md);
        }
    EXPECT(bad == 0, "no term or lesson has a wrapped line that markdown reads as a list (\"1. \" under a paragraph's "
           "line): %d", bad);

    char dir[600], err[256];
    snprintf(dir, sizeof dir, "%s/lexicon", root);
    Lexicon lx;
    char *md = load("lessons", "13-pipeline-schedules");
    if (md && lexicon_load(&lx, dir, err, sizeof err) == 0) {
        StrBuf out;
        sb_init(&out);
        MdTermOptions o = {.width = 72, .color = 0, .link_name = lexicon_link_name, .link_ctx = &lx};
        mdterm_render(md, strlen(md), &o, &out);
        const char *s = out.data ? strstr(out.data, "That makes m a free parameter") : NULL;
        const char *j = s;
        while (j && j > out.data && (j[-1] == ' ' || j[-1] == '\n' || j[-1] == '.' || j[-1] == '1')) j--;
        int joined = s && j + 4 <= s && strncmp(j - 4, "just", 4) == 0 && !memmem(j, (size_t)(s - j), "\n\n", 2);
        EXPECT(joined, "lesson 13 renders \"just 1. That makes m a free parameter\" as one paragraph, not a list");
        sb_free(&out);
        lexicon_free(&lx);
    } else {
        EXPECT(0, "lesson 13 and the lexicon load");
    }
    free(md);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: test_lexicon ROOT SHARDLAB LAUNCHER LABS_DIR\n");
        return 2;
    }
    static char launcher_abs[4096], labs_abs[4096], shardlab_abs[4096], root_abs[4096];
    if (!realpath(argv[1], root_abs) || !realpath(argv[2], shardlab_abs) || !realpath(argv[3], launcher_abs) ||
        !realpath(argv[4], labs_abs)) {
        fprintf(stderr, "test_lexicon: a path given does not exist\n");
        return 2;
    }
    root = root_abs, shardlab = shardlab_abs, launcher = launcher_abs, labs_dir = labs_abs;
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-lexicon-XXXXXX");
    if (!mkdtemp(tmp)) return 1;

    int linked[NTERMS] = {0};
    check_terms(linked);
    check_lessons(linked);
    check_course_map();
    check_command(linked);
    check_lesson_command();
    int unlinked = 0;
    for (int i = 0; i < NTERMS; i++) unlinked += !linked[i];
    EXPECT(unlinked == 0, "every term is reachable: linked from a term or a lesson, or listed by the index (%d not)",
           unlinked);
    int without_term = 0, without_lesson = 0;
    for (int i = 0; i < NLABS; i++) {
        if (!lab_in_term[i]) without_term++, printf("# no term uses lab %s\n", LABS[i]);
        if (!lab_in_lesson[i]) without_lesson++, printf("# no lesson runs lab %s\n", LABS[i]);
    }
    EXPECT(without_term == 0 && without_lesson == 0, "every lab is used by a term and run by a lesson (%d, %d missing)",
           without_term, without_lesson);
    // Every lab's --help (what a reader checks options with) exits 0 and lists the shared options.
    int helps = 0;
    for (int i = 0; i < NLABS; i++) {
        char bin[600], tag[32];
        snprintf(bin, sizeof bin, "%s/%s", labs_dir, LABS[i]);
        snprintf(tag, sizeof tag, "help-%s", LABS[i]);
        char *argv_help[] = {bin, "--help", NULL};
        int st = run(argv_help, tag);
        char *o = captured(tag, "out");
        if (st == 0 && strstr(o, "--")) helps++;
        else printf("# %s --help: status %d\n", LABS[i], st);
        free(o);
    }
    EXPECT(helps == NLABS, "every lab's --help exits 0 and lists its options (%d of %d)", helps, NLABS);
    check_formulas();
    check_rendering();
    check_one_value_per_quantity();
    check_no_spurious_lists();
    run_commands();

    tmp_finish(test_failed);
    return test_done();
}
