// course.c — see course.h.
#include "course.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/harness/check.h"
#include "common/harness/suggest.h"

const char *const LEXICON_CATEGORIES[LEXICON_NCATEGORIES] = {
    "Parallelism strategies", "Sharding and memory", "Pipeline schedules",
    "Communication",          "Runtime",             "Hardware and performance",
};

// "- **Field:** value" -> value, if the line is that field.
static int header_field(const char *line, const char *field, char *out, size_t n) {
    char want[64];
    snprintf(want, sizeof want, "- **%s:**", field);
    if (strncmp(line, want, strlen(want)) != 0) return 0;
    const char *v = line + strlen(want);
    while (*v == ' ') v++;
    snprintf(out, n, "%s", v);
    size_t k = strlen(out);
    while (k && (out[k - 1] == '\n' || out[k - 1] == '\r' || out[k - 1] == ' ')) out[--k] = 0;
    return 1;
}

// The title and, for terms, the header block of one file.
static int read_header(const char *path, const char *name, LexTerm *t) {
    memset(t, 0, sizeof *t);
    snprintf(t->slug, sizeof t->slug, "%.*s", (int)(strlen(name) - 3), name);
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[2048];
    for (int i = 0; i < 12 && fgets(line, sizeof line, f); i++) {
        if (!t->title[0] && strncmp(line, "# ", 2) == 0) {
            snprintf(t->title, sizeof t->title, "%.*s", (int)sizeof t->title - 1, line + 2);
            size_t k = strlen(t->title);
            while (k && (t->title[k - 1] == '\n' || t->title[k - 1] == '\r')) t->title[--k] = 0;
        }
        header_field(line, "Also known as", t->aka, sizeof t->aka);
        header_field(line, "Category", t->category, sizeof t->category);
        header_field(line, "Related", t->related, sizeof t->related);
        header_field(line, "Labs", t->labs, sizeof t->labs);
    }
    fclose(f);
    return t->title[0] ? 0 : -1;
}

static int by_slug(const void *a, const void *b) { return strcmp(((const LexTerm *)a)->slug, ((const LexTerm *)b)->slug); }

// Every *.md of dir, read with read_header; -1 with err if dir cannot be read. A README.md
// is about the folder (lessons/README.md: the course's two kinds of file), not a lesson or a
// term, and is left out.
static int read_dir(const char *dir, LexTerm **out, int *n, char *err, size_t errlen) {
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(err, errlen, "cannot read '%s': %s", dir, strerror(errno));
        return -1;
    }
    int cap = 64;
    *out = calloc_check((size_t)cap, sizeof **out);
    *n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".md") != 0 || e->d_name[0] == '.' || len > 60 ||
            strcmp(e->d_name, "README.md") == 0)
            continue;
        if (*n == cap) *out = realloc_check(*out, (size_t)(cap *= 2) * sizeof **out);
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (read_header(path, e->d_name, &(*out)[*n]) != 0) {
            snprintf(err, errlen, "%s: no title (a first line '# Title')", path);
            closedir(d);
            return -1;
        }
        (*n)++;
    }
    closedir(d);
    qsort(*out, (size_t)*n, sizeof **out, by_slug);
    return 0;
}

int lexicon_load(Lexicon *lx, const char *dir, char *err, size_t errlen) {
    memset(lx, 0, sizeof *lx);
    snprintf(lx->dir, sizeof lx->dir, "%s", dir);
    if (read_dir(dir, &lx->t, &lx->n, err, errlen) != 0) return -1;
    if (lx->n == 0) {
        snprintf(err, errlen, "'%s' holds no entries (*.md)", dir);
        return -1;
    }
    char lessons[4200], ignore[256];
    snprintf(lessons, sizeof lessons, "%s/../lessons", dir);
    if (read_dir(lessons, &lx->lessons, &lx->nlessons, ignore, sizeof ignore) != 0) lx->nlessons = 0;
    return 0;
}

void lexicon_free(Lexicon *lx) {
    free(lx->t);
    free(lx->lessons);
    memset(lx, 0, sizeof *lx);
}

const LexTerm *lexicon_term(const Lexicon *lx, const char *slug) {
    for (int i = 0; i < lx->n; i++)
        if (strcmp(lx->t[i].slug, slug) == 0) return &lx->t[i];
    return NULL;
}

const char *lexicon_link_name(const char *target, size_t n, void *ctx) {
    const Lexicon *lx = ctx;
    // A term's title as it reads inside a sentence: "All-gather" -> "all-gather", but "ZeRO
    // stage 2", "FSDP", "1F1B" as they are. Rotating buffers: a few names may be live at once.
    static char names[8][160];
    static int next;
    for (int i = 0; i < lx->n; i++)
        if (strlen(lx->t[i].slug) == n && memcmp(lx->t[i].slug, target, n) == 0) {
            char *out = names[next++ % 8];
            snprintf(out, sizeof names[0], "%s", lx->t[i].title);
            int proper = 0;  // an upper-case letter after the first, in the first word: ZeRO, DDP
            for (const char *c = out + 1; *c && *c != ' ' && *c != '-'; c++) proper |= isupper((unsigned char)*c);
            if (!proper) out[0] = (char)tolower((unsigned char)out[0]);
            return out;
        }
    for (int i = 0; i < lx->nlessons; i++)
        if (strlen(lx->lessons[i].slug) == n && memcmp(lx->lessons[i].slug, target, n) == 0) return lx->lessons[i].title;
    return NULL;
}

// ---------------------------------------------------------------------------------------
// Finding a term

void lexicon_normalize(const char *s, char *out, size_t n) {
    size_t k = 0;
    for (; *s && k + 1 < n; s++)
        if (isalnum((unsigned char)*s)) out[k++] = (char)tolower((unsigned char)*s);
    out[k] = 0;
}

// A lesson's slug or title without its number: "05-ddp-from-scratch" -> "ddp-from-scratch",
// "5. DDP from scratch" -> "DDP from scratch"; NULL for a name that has none (a term's: 1f1b).
static const char *unnumbered(const char *s) {
    const char *p = s;
    while (isdigit((unsigned char)*p)) p++;
    if (p == s || (*p != '-' && *p != '.')) return NULL;
    for (p++; *p == ' ';) p++;
    return p;
}

// The names an entry answers to, normalized: slug, title, a lesson's slug and title without
// their number, each also-known-as name.
static int names_of(const LexTerm *t, char names[][96], int max) {
    int k = 0;
    lexicon_normalize(t->slug, names[k++], 96);
    lexicon_normalize(t->title, names[k++], 96);
    const char *bare_slug = unnumbered(t->slug), *bare_title = unnumbered(t->title);
    if (bare_slug) lexicon_normalize(bare_slug, names[k++], 96);
    if (bare_title) lexicon_normalize(bare_title, names[k++], 96);
    // Also-known-as names are separated by commas or semicolons outside parentheses: "PTD-P
    // (pipeline, tensor, data)" is one name, so "tensor" does not name N-D parallelism.
    char aka[400];
    snprintf(aka, sizeof aka, "%s", t->aka);
    int depth = 0;
    for (char *p = aka, *start = aka; k < max; p++) {
        depth += *p == '(' ? 1 : *p == ')' && depth > 0 ? -1 : 0;
        if (*p && (depth > 0 || (*p != ',' && *p != ';'))) continue;
        int last = *p == 0;
        *p = 0;
        lexicon_normalize(start, names[k], 96);
        if (names[k][0]) k++;
        if (last) break;
        start = p + 1;
    }
    return k;
}

// The single words of a term's slug and title (slug_title = 1) or of its also-known-as names
// (slug_title = 0), normalized ("pipeline", "parallelism", "pp", ...): a misspelt word is compared
// with these, so that "pipelne" is one edit from "pipeline" rather than a dozen from
// "pipelineparallelism".
static int words_of(const LexTerm *t, int slug_title, char words[][48], int max) {
    char all[700];
    if (slug_title) snprintf(all, sizeof all, "%s %s", t->slug, t->title);
    else snprintf(all, sizeof all, "%s", t->aka);
    int k = 0;
    for (char *save = NULL, *p = strtok_r(all, " -,;()/", &save); p && k < max; p = strtok_r(NULL, " -,;()/", &save)) {
        lexicon_normalize(p, words[k], 48);
        if (words[k][0]) k++;
    }
    return k;
}

// How many terms list this one under Related: among equally close terms the more central
// comes first (pipeline parallelism before pipeline bubble).
static int cited_by(const Lexicon *lx, const char *slug) {
    char link[80];
    snprintf(link, sizeof link, "[[%s]]", slug);
    int n = 0;
    for (int i = 0; i < lx->n; i++) n += strstr(lx->t[i].related, link) != NULL;
    return n;
}

// lexicon_lookup() over any list of entries: the terms (ranked by cited_by(lx)) or the
// lessons (lx NULL: equally close lessons come in their order). *exact: 1 if name is one of
// the found entry's names, not only the closest to it.
static int lookup(const LexTerm *t, int n, const Lexicon *lx, const char *name, int *out, int max, int *k, int *exact) {
    char q[96];
    lexicon_normalize(name, q, sizeof q);
    *k = 0, *exact = 0;
    if (!q[0] || n == 0) return 0;
    // For each entry i: whole[i], the fewest edits from q to one of its names (-1: q is part of
    // one); near[i], the fewest to a name or to one word of its names; titled[i], 0 if near[i]
    // is reached only through an also-known-as name or word, not the slug or the title.
    int *whole = malloc_check((size_t)n * sizeof *whole), *near = malloc_check((size_t)n * sizeof *near);
    int *titled = malloc_check((size_t)n * sizeof *titled), *cited = malloc_check((size_t)n * sizeof *cited);
    int partial = -1, npartial = 0, rc = 0;
    for (int i = 0; i < n; i++) {
        char names[16][96], words[64][48];
        int nn = names_of(&t[i], names, 16), best = 99, part = 0;
        for (int j = 0; j < nn; j++) {
            if (strcmp(names[j], q) == 0) {  // exact
                out[0] = i, *k = 1;
                rc = 1, *exact = 1;
                goto done;
            }
            if (strlen(q) >= 3 && strstr(names[j], q)) part = 1;
            int e = suggest_distance(q, names[j]);
            if (e < best) best = e;
        }
        whole[i] = part ? -1 : best;
        near[i] = whole[i], titled[i] = !part || strstr(names[0], q) || strstr(names[1], q);
        for (int m = 1; m >= 0; m--) {
            int nw = words_of(&t[i], m, words, 64);
            for (int j = 0; j < nw; j++) {
                int e = suggest_distance(q, words[j]);
                if (e < near[i]) near[i] = e, titled[i] = m;
            }
        }
        cited[i] = lx ? cited_by(lx, t[i].slug) : 0;
        if (part) partial = i, npartial++;
    }
    if (npartial == 1) {
        out[0] = partial, *k = 1;
        rc = 1;
        goto done;
    }
    // Closest first: the partial matches if there are (only them), else by near[]; equally
    // near terms: slug or title words before also-known-as words, then the terms cited by more
    // terms, then by slug. A selection sort: a few dozen terms.
    char *taken = calloc_check((size_t)n, 1);
    while (*k < max) {
        int pick = -1;
        for (int i = 0; i < n; i++) {
            if (taken[i] || (npartial && whole[i] != -1)) continue;
            int better = pick < 0 || near[i] < near[pick] ||
                         (near[i] == near[pick] && (titled[i] > titled[pick] || (titled[i] == titled[pick] && cited[i] > cited[pick])));
            if (better) pick = i;
        }
        if (pick < 0) break;
        taken[pick] = 1;
        out[(*k)++] = pick;
    }
    free(taken);
    // One term opens by itself only if its whole name is uniquely nearest, within about one
    // edit in four letters ("fsdpp"); a word's nearness only orders the suggestions.
    int first = -1, second = -1;
    for (int i = 0; i < n && !npartial; i++) {
        if (first < 0 || whole[i] < whole[first]) second = first, first = i;
        else if (second < 0 || whole[i] < whole[second]) second = i;
    }
    int tol = (int)strlen(q) / 4 > 1 ? (int)strlen(q) / 4 : 1;
    if (first >= 0 && whole[first] <= tol && (second < 0 || whole[second] > whole[first])) {
        out[0] = first, *k = 1;
        rc = 1;
    }
done:
    free(whole), free(near), free(titled), free(cited);
    return rc;
}

int lexicon_lookup(const Lexicon *lx, const char *name, int *out, int max, int *k) {
    int exact;
    return lookup(lx->t, lx->n, lx, name, out, max, k, &exact);
}

// The number a lesson's slug begins with ("05-ddp-from-scratch" -> 5), or -1.
static int lesson_number(const LexTerm *lesson) { return unnumbered(lesson->slug) ? atoi(lesson->slug) : -1; }

const char *course_lesson_title(const LexTerm *lesson, int *number) {
    *number = lesson_number(lesson);
    const char *bare = unnumbered(lesson->title);
    return bare ? bare : lesson->title;
}

int course_lesson_lookup(const Lexicon *lx, const char *name, int *out, int max, int *k) {
    char q[96];
    lexicon_normalize(name, q, sizeof q);
    *k = 0;
    // A number ("5", "05"): that lesson or none; a near number is not a near lesson.
    if (q[0] && strspn(q, "0123456789") == strlen(q)) {
        int want = strlen(q) <= 4 ? atoi(q) : -1;
        for (int i = 0; i < lx->nlessons; i++)
            if (lesson_number(&lx->lessons[i]) == want) {
                out[0] = i, *k = 1;
                return 1;
            }
        return 0;
    }
    int exact, found = lookup(lx->lessons, lx->nlessons, NULL, name, out, max, k, &exact);
    return found ? (exact ? 1 : 2) : 0;
}

// ---------------------------------------------------------------------------------------
// Links

int course_url_ok(const char *url) {
    for (const char *p = url; *p; p++)
        if ((unsigned char)*p <= ' ' || *p == 0x7F) return 0;
    size_t scheme = strcspn(url, ":/?#");
    if (url[scheme] != ':') return 1;  // no scheme: a path on the same site
    static const char *const ok[] = {"http", "https", "mailto"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (scheme == strlen(ok[i]) && strncasecmp(url, ok[i], scheme) == 0) return 1;
    return 0;
}
