// figures.h — holding a document's quoted output to what a command prints: the comparison
// that tests/test_figures.c (and make docs-figures) runs on every document.
//
// Defines: Lines, lines_split(), lines_free(); MASKS, masks_compile(), line_key();
//          mask_spans(), line_merge(); AlignOp, align_block(); fig_match(), fig_find(); Units, units_of(), unit_at();
//          scan_figures().
//
// Three pieces, each a pure function of its text, so that the test can prove each on crafted
// input before it trusts them with the documents:
//   - a line as compared: what varies between two runs of one command on any machine (a
//     step's time, a rate, a run directory's name, the core count) masked out by MASKS, and
//     the width of runs of spaces ignored; everything else, every figure the code computes,
//     compared as printed;
//   - a block lined up with the output as diff does (align_block): `...` skips output lines
//     freely, any other line missing or extra is a difference;
//   - a figure in a sentence found by the text around it, {} where it stands (fig_match).
#ifndef SHARDLAB_FIGURES_H
#define SHARDLAB_FIGURES_H

#include <ctype.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---------------------------------------------------------------------------------------
// Lines

typedef struct {
    char **line;  // each without its newline and trailing spaces
    int n;
} Lines;

static void lines_split(Lines *L, const char *text) {
    L->n = 0;
    int cap = 64;
    L->line = malloc(sizeof(char *) * (size_t)cap);
    for (const char *p = text; p && *p;) {
        const char *nl = strchr(p, '\n'), *end = nl ? nl : p + strlen(p);
        size_t n = (size_t)(end - p);
        while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\r' || p[n - 1] == '\t')) n--;
        if (L->n == cap) L->line = realloc(L->line, sizeof(char *) * (size_t)(cap *= 2));
        L->line[L->n++] = strndup(p, n);
        p = nl ? nl + 1 : NULL;
    }
}

static void lines_free(Lines *L) {
    for (int i = 0; i < L->n; i++) free(L->line[i]);
    free(L->line);
    L->n = 0;
}

// ---------------------------------------------------------------------------------------
// What varies between runs of one command: each pattern's parenthesized groups are left out
// of the comparison (the rest of its match is compared). Nothing numeric that the code
// determines is here: losses, bytes, counts, hashes, formulas and schedules are compared.

static const struct {
    const char *pattern, *why;
} MASKS[] = {
    {"([0-9.]+) ms/step", "a step's wall-clock time"},
    {"elapsed +([0-9.]+s)", "the wall clock since the start"},
    {"([0-9.]+k?) tok/s", "tokens per second, a rate of the wall clock"},
    {"([0-9]+) tokens/s", "tokens per second, a rate of the wall clock"},
    {"runs/[a-z]+-([0-9]{8}-[0-9]{6}-[0-9a-f]{4})", "a run directory's name: its start time and a random suffix"},
    {"([0-9]+) cores?[);,]", "the machine's core count"},
    {"; no GPU: (.*)$", "why this machine has no GPU for the lab (no driver, no CUDA in the build)"},
    {"host memory has (.*) available \\(([^)]*)\\)", "the memory this machine has free"},
    // The collectives lab's table: time(us), algbw and busbw are the clock's; size, count,
    // type, #wrong and the algorithm are compared.
    {"^ +[0-9]+ +[0-9]+ +[a-z0-9]+ +([0-9.]+) +([0-9.]+) +([0-9.]+) +[0-9]+ +[a-z]+$",
     "a collective's time and bandwidths"},
    {"Avg bus bandwidth +: ([0-9.]+)", "the mean bus bandwidth, a rate of the clock"},
    // ckpt's comparison table: a policy's median time and its ratio to none's (the last
    // column, 1 + r/(3L), is the formula's and is compared).
    {"ok +([0-9.]+) +([0-9.]+) +[0-9.]+$", "a policy's measured time and its ratio to none's"},
    {"measured \\(mean over ranks and steps\\): ([0-9.]+)", "a pipeline's idle share, measured by the clock"},
    {" in ([0-9.]+) ms", "how long a checkpoint's save took"},
    {"\\(([0-9.]+) ms\\)", "how long a resume's load took"},
    // The dashboard's frame (shardlab tui --dump): the run's wall time, each rank's step time
    // and its compute | wait bar, rank 0's communication time and the share of it hidden.
    {", ([0-9.]+ (s|min|h)), peak", "the run's wall-clock time"},
    {"^ *r[0-9]+ +[^ ]+ +[0-9]+ +([0-9.]+) (\\[[^]]*\\])", "a rank's step time and its compute/wait bar"},
    {"hidden behind compute; r0: (.*)$",
     "rank 0's communication time and how much of it hid (cut at the frame's width)"},
};
#define NMASKS ((int)(sizeof MASKS / sizeof MASKS[0]))

static regex_t mask_re[NMASKS];

static int masks_compile(void) {
    for (int i = 0; i < NMASKS; i++)
        if (regcomp(&mask_re[i], MASKS[i].pattern, REG_EXTENDED) != 0) {
            printf("# mask %d does not compile: %s\n", i, MASKS[i].pattern);
            return 0;
        }
    return 1;
}

// The spans of line that the masks leave out (each parenthesized group of each match), in
// order, overlaps dropped: up to max of them into so[], eo[] and which[] (the mask's index).
static int mask_spans(const char *line, int *so, int *eo, int *which, int max) {
    int n = 0;
    for (int m = 0; m < NMASKS; m++) {
        size_t from = 0, len = strlen(line);
        regmatch_t g[4];
        while (from < len && regexec(&mask_re[m], line + from, 4, g, from ? REG_NOTBOL : 0) == 0) {
            for (int j = 1; j < 4 && n < max; j++)
                if (g[j].rm_so >= 0 && g[j].rm_eo > g[j].rm_so)
                    so[n] = (int)from + g[j].rm_so, eo[n] = (int)from + g[j].rm_eo, which[n] = m, n++;
            from += g[0].rm_eo > 0 ? (size_t)g[0].rm_eo : 1;
        }
    }
    // In order of where they start; a span inside or across one before it is dropped.
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && so[j] < so[j - 1]; j--) {
            int a = so[j], b = eo[j], c = which[j];
            so[j] = so[j - 1], eo[j] = eo[j - 1], which[j] = which[j - 1];
            so[j - 1] = a, eo[j - 1] = b, which[j - 1] = c;
        }
    int k = 0;
    for (int i = 0; i < n; i++)
        if (k == 0 || so[i] >= eo[k - 1]) so[k] = so[i], eo[k] = eo[i], which[k] = which[i], k++;
    return k;
}

// The line as it is compared, into out (of size cap): every masked span replaced by `~`, runs
// of spaces as one, no leading spaces.
static void line_key(const char *line, char *out, size_t cap) {
    int so[32], eo[32], which[32];
    int n = mask_spans(line, so, eo, which, 32);
    size_t k = 0;
    for (int i = 0, s = 0; line[i] && k + 1 < cap; i++) {
        if (s < n && i == so[s]) {
            out[k++] = '~';
            i = eo[s++] - 1;
            continue;
        }
        if (line[i] == ' ' && (k == 0 || out[k - 1] == ' ')) continue;
        out[k++] = line[i];
    }
    while (k > 0 && out[k - 1] == ' ') k--;
    out[k] = 0;
}

// The columns n bytes of UTF-8 take: one per character (the dashboard's braille and blocks).
static int columns(const char *s, int n) {
    int c = 0;
    for (int i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

// The printed line o as a stale quoted line q is rewritten: o, but where both have the same
// masked spans (a time, a rate, a run directory), q's text in them, the spaces before a span
// made up for a change of width (so that right-aligned columns stay aligned). A regenerated
// line thus changes in its real figures only, not in the times of the machine that ran it.
static void line_merge(const char *q, const char *o, char *out, size_t cap) {
    int qs[32], qe[32], qw[32], os[32], oe[32], ow[32];
    int nq = mask_spans(q, qs, qe, qw, 32), no = mask_spans(o, os, oe, ow, 32);
    int same = nq == no;
    for (int i = 0; same && i < nq; i++) same = qw[i] == ow[i];
    if (!same) {
        snprintf(out, cap, "%s", o);
        return;
    }
    size_t k = 0;
    int from = 0;
    for (int i = 0; i < no && k < cap; i++) {
        int keep_to = os[i];
        int delta =
            columns(o + os[i], oe[i] - os[i]) - columns(q + qs[i], qe[i] - qs[i]);  // > 0: the quoted is narrower
        if (delta < 0)
            while (delta < 0 && keep_to - 1 > from && o[keep_to - 1] == ' ' && o[keep_to - 2] == ' ')
                keep_to--, delta++;
        k += (size_t)snprintf(out + k, cap - k, "%.*s%*s%.*s", keep_to - from, o + from,
                              delta > 0 && keep_to > 0 && o[keep_to - 1] == ' ' ? delta : 0, "", qe[i] - qs[i],
                              q + qs[i]);
        from = oe[i];
    }
    if (k < cap) snprintf(out + k, cap - k, "%s", o + from);
}

// ---------------------------------------------------------------------------------------
// A block against the output, as diff does

// How alike a quoted line and a printed one are, as a cost (lower is better): equal once
// masked; the same words with some numbers changed (a stale figure: fewer changed numbers
// cost less, so a stale "step 1000" line pairs with the output's step 1000, not step 100);
// or different lines.
#define COST_EQUAL 0
#define COST_DIFFERENT 1000
#define COST_GAP 600  // a line shown that the output lacks, or one printed that the block lacks

static int line_cost(const char *q, const char *o) {
    char kq[4096], ko[4096];
    line_key(q, kq, sizeof kq);
    line_key(o, ko, sizeof ko);
    if (!strcmp(kq, ko)) return COST_EQUAL;
    // The words: every run of digits (with its . and ,) as #; the numbers, in order.
    char sq[4096], so[4096];
    double nq[64], no[64];
    int cq = 0, co = 0;
    for (int pass = 0; pass < 2; pass++) {
        const char *s = pass ? ko : kq;
        char *w = pass ? so : sq;
        double *nums = pass ? no : nq;
        int *cnt = pass ? &co : &cq;
        size_t k = 0;
        for (const char *p = s; *p && k + 2 < sizeof sq;) {
            if (isdigit((unsigned char)*p)) {
                char *e;
                double v = strtod(p, &e);
                if (e == p) e = (char *)p + 1;
                while (isdigit((unsigned char)*e) || *e == ',' || (*e == '.' && isdigit((unsigned char)e[1]))) e++;
                if (*cnt < 64) nums[(*cnt)++] = v;
                w[k++] = '#';
                p = e;
            } else {
                w[k++] = *p++;
            }
        }
        w[k] = 0;
    }
    if (strcmp(sq, so) != 0) return COST_DIFFERENT;
    int differ = 0;
    for (int i = 0; i < cq && i < co; i++) differ += nq[i] != no[i];
    int cost = 100 + 10 * differ;
    return cost < COST_DIFFERENT ? cost : COST_DIFFERENT - 1;
}

static int is_elision(const char *line) {
    while (*line == ' ') line++;
    return !strcmp(line, "...");
}

// One step of the alignment, in the order of the text: quoted line q (or -1) against printed
// line o (or -1). A `...` item absorbs the printed lines it stands for (o >= 0 with q the
// `...`), or none (o = -1).
typedef enum { OP_SAME, OP_STALE, OP_GONE, OP_NEW, OP_ELIDED } AlignKind;
typedef struct {
    AlignKind kind;
    int q, o;
} AlignOp;

// Aligns quoted lines q[0..m) with printed lines o[0..n) at the least cost (the ops to
// *ops, malloc'd, their number returned): a `...` item matches any run of printed lines at
// no cost; a quoted line pairs with a printed one at line_cost, or is gone (COST_GAP); a
// printed line outside a `...` is new (COST_GAP).
static int align_block(char *const *q, int m, char *const *o, int n, AlignOp **ops) {
    size_t W = (size_t)n + 1;
    int *cost = malloc(sizeof(int) * (size_t)(m + 1) * W);
    char *move = malloc((size_t)(m + 1) * W);
    int *pair = malloc(sizeof(int) * (size_t)m * (size_t)(n ? n : 1));
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++)
            pair[(size_t)i * (size_t)n + (size_t)j] = is_elision(q[i]) ? 0 : line_cost(q[i], o[j]);
    const int INF = 1 << 29;
    for (size_t k = 0; k < (size_t)(m + 1) * W; k++) cost[k] = INF, move[k] = 0;
    cost[0] = 0;
    // cost[i][j]: the first i quoted items against the first j printed lines. Moves into
    // (i, j): 'p' pairs q[i-1] with o[j-1]; 'g' q[i-1] gone (or a `...` standing for nothing);
    // 'e' o[j-1] absorbed by the `...` q[i-1]; 'n' o[j-1] new.
    for (int i = 0; i <= m; i++)
        for (int j = 0; j <= n; j++) {
            int best = cost[(size_t)i * W + (size_t)j];
            char how = move[(size_t)i * W + (size_t)j];
            if (i > 0) {
                int el = is_elision(q[i - 1]);
                int g = cost[(size_t)(i - 1) * W + (size_t)j] + (el ? 0 : COST_GAP);
                if (g < best) best = g, how = 'g';
                if (j > 0 && !el) {
                    int p = cost[(size_t)(i - 1) * W + (size_t)(j - 1)] +
                            pair[(size_t)(i - 1) * (size_t)n + (size_t)(j - 1)];
                    if (p < best) best = p, how = 'p';
                }
                if (j > 0 && el) {
                    int e = cost[(size_t)i * W + (size_t)(j - 1)];
                    if (e < best) best = e, how = 'e';
                }
            }
            if (j > 0) {
                int nw = cost[(size_t)i * W + (size_t)(j - 1)] + COST_GAP;
                if (nw < best) best = nw, how = 'n';
            }
            cost[(size_t)i * W + (size_t)j] = best, move[(size_t)i * W + (size_t)j] = how;
        }
    int cap = m + n + 1, k = 0;
    AlignOp *rev = malloc(sizeof(AlignOp) * (size_t)cap);
    for (int i = m, j = n; i > 0 || j > 0;) {
        char how = move[(size_t)i * W + (size_t)j];
        if (how == 'p') {
            int c = pair[(size_t)(i - 1) * (size_t)n + (size_t)(j - 1)];
            rev[k++] = (AlignOp){c == COST_EQUAL ? OP_SAME : OP_STALE, i - 1, j - 1};
            i--, j--;
        } else if (how == 'g') {
            rev[k++] = (AlignOp){is_elision(q[i - 1]) ? OP_ELIDED : OP_GONE, i - 1, -1};
            i--;
        } else if (how == 'e') {
            rev[k++] = (AlignOp){OP_ELIDED, i - 1, j - 1};
            j--;
        } else {
            rev[k++] = (AlignOp){OP_NEW, -1, j - 1};
            j--;
        }
    }
    *ops = malloc(sizeof(AlignOp) * (size_t)(k ? k : 1));
    for (int t = 0; t < k; t++) (*ops)[t] = rev[k - 1 - t];
    free(rev), free(cost), free(move), free(pair);
    return k;
}

// ---------------------------------------------------------------------------------------
// A figure in a sentence: the text around it with {} where it stands

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// Does pattern match text at position at? A space in the pattern matches one or more spaces
// or newlines (a sentence wraps anywhere). {} is the figure and {?} any other word (a figure
// beside it that changes on its own): each the shortest run of non-space characters that the
// rest of the pattern follows, or, at the pattern's end, a run of them with its trailing
// . , ; : ) left out. On a match, the figure's span (the whole match, for a pattern without
// {}) goes to *vs, *vl and the match's end to *end.
static int fig_match_from(const char *text, size_t t, const char *p, size_t *vs, size_t *vl, size_t *end) {
    while (*p) {
        int figure = !strncmp(p, "{}", 2), other = !strncmp(p, "{?}", 3);
        if (figure || other) {
            const char *rest = p + (figure ? 2 : 3);
            if (!*rest) {
                size_t e = t;
                while (text[e] && !is_space(text[e])) e++;
                while (e > t && strchr(".,;:)`*", text[e - 1])) e--;
                if (e == t) return 0;
                if (figure) *vs = t, *vl = e - t;
                *end = e;
                return 1;
            }
            for (size_t e = t + 1; text[e - 1] && !is_space(text[e - 1]); e++)
                if (fig_match_from(text, e, rest, vs, vl, end)) {
                    if (figure) *vs = t, *vl = e - t;
                    return 1;
                }
            return 0;
        }
        if (is_space(*p)) {
            while (is_space(*p)) p++;
            if (!*p) break;  // trailing spaces match nothing
            if (!is_space(text[t])) return 0;
            while (is_space(text[t])) t++;
        } else if (text[t] == *p) {
            p++, t++;
        } else {
            return 0;
        }
    }
    *end = t;
    return 1;
}

static int fig_match(const char *text, size_t at, const char *pattern, size_t *vs, size_t *vl, size_t *end) {
    *vs = at, *vl = (size_t)-1;
    if (!fig_match_from(text, at, pattern, vs, vl, end)) return 0;
    if (*vl == (size_t)-1) *vs = at, *vl = *end - at;  // no {}: the whole match
    return 1;
}

// The first match of pattern in text (the figure's span in *vs, *vl) and how many there are;
// 0 if none. A pattern starting with ^ matches at a line's first word only (a table's row:
// "^1 {} D(T+1)" is rank 1's); one starting with {} at a word's start.
static int fig_find(const char *text, const char *pattern, size_t *vs, size_t *vl) {
    int count = 0, line_start = pattern[0] == '^';
    size_t first_vs = 0, first_vl = 0;
    if (line_start) pattern++;
    while (is_space(*pattern)) pattern++;
    for (size_t at = 0; text[at]; at++) {
        size_t a, b, e;
        if (text[at] != pattern[0] && pattern[0] != '{') continue;
        if (pattern[0] == '{' && at > 0 && !is_space(text[at - 1])) continue;
        if (line_start) {
            size_t k = at;
            while (k > 0 && text[k - 1] == ' ') k--;
            if (k > 0 && text[k - 1] != '\n') continue;
        }
        if (fig_match(text, at, pattern, &a, &b, &e)) {
            if (count++ == 0) first_vs = a, first_vl = b;
            if (pattern[0] == '{') at = e;  // a pattern starting with {} matches inside its own figure
        }
    }
    *vs = first_vs, *vl = first_vl;
    return count;
}

// ---------------------------------------------------------------------------------------
// A document's units (a paragraph, a list item with its lines, a table, a fenced block), which the
// list of figures that are not from a run names; and the scan for numbers that look like a
// run's figures.

typedef struct {
    int *first, *last;  // 0-based line numbers, inclusive
    int n;
} Units;

// Does the line (its indentation skipped) start a list item: "- ", "* ", "1. "?
static int list_item(const char *t) {
    if ((t[0] == '-' || t[0] == '*') && t[1] == ' ') return 1;
    size_t d = strspn(t, "0123456789");
    return d > 0 && d < 4 && t[d] == '.' && t[d + 1] == ' ';
}

static void units_of(const Lines *doc, Units *u) {
    u->n = 0;
    u->first = malloc(sizeof(int) * (size_t)(doc->n + 1));
    u->last = malloc(sizeof(int) * (size_t)(doc->n + 1));
    for (int i = 0; i < doc->n;) {
        const char *s = doc->line[i];
        while (*s == ' ') s++;
        if (!*s) {
            i++;
            continue;
        }
        int j = i;
        if (!strncmp(s, "```", 3)) {  // a fenced block, to its closing fence
            for (j = i + 1; j < doc->n; j++) {
                const char *t = doc->line[j];
                while (*t == ' ') t++;
                if (!strncmp(t, "```", 3)) break;
            }
            if (j == doc->n) j--;
        } else {
            while (j + 1 < doc->n) {
                const char *t = doc->line[j + 1];
                while (*t == ' ') t++;
                if (!*t || !strncmp(t, "```", 3) || list_item(t)) break;
                j++;
            }
        }
        u->first[u->n] = i, u->last[u->n] = j, u->n++;
        i = j + 1;
    }
}

static int unit_at(const Units *u, int line) {
    for (int k = 0; k < u->n; k++)
        if (u->first[k] <= line && line <= u->last[k]) return k;
    return -1;
}

// What looks like a figure from a run: a size in binary units (what the labs print), a time
// in ms or us, a number with 4 decimals or more (a loss, a bubble), 16 hex digits (a
// param_hash), tokens per second.
static const char *SCAN[] = {
    "[0-9][0-9.,]* ?(KiB|MiB|GiB|TiB)",  "[0-9][0-9.]* ?(ms|us)([^A-Za-z]|$)",
    "(^|[^0-9.])[0-9]+\\.[0-9]{4,}",     "(^|[^0-9A-Za-z])[0-9a-f]{16}([^0-9A-Za-z]|$)",
    "[0-9][0-9.,]*k? ?(tokens/s|tok/s)",
};
#define NSCAN ((int)(sizeof SCAN / sizeof SCAN[0]))
static regex_t scan_re[NSCAN];

static int scan_compile(void) {
    for (int i = 0; i < NSCAN; i++)
        if (regcomp(&scan_re[i], SCAN[i], REG_EXTENDED) != 0) return 0;
    return 1;
}

// The figure-looking spans of line: up to max of them, their offsets in so[], eo[].
static int scan_figures(const char *line, int *so, int *eo, int max) {
    int n = 0;
    for (int r = 0; r < NSCAN; r++) {
        size_t from = 0;
        regmatch_t g[1];
        while (n < max && line[from] && regexec(&scan_re[r], line + from, 1, g, from ? REG_NOTBOL : 0) == 0) {
            int a = (int)(from + (size_t)g[0].rm_so), b = (int)(from + (size_t)g[0].rm_eo);
            // A hash must have a digit and a letter in it ("deadbeefdeadbeef" alone is a word).
            int keep = 1;
            if (r == 3) {
                int digit = 0, letter = 0;
                for (int k = a; k < b; k++)
                    digit |= isdigit((unsigned char)line[k]), letter |= line[k] >= 'a' && line[k] <= 'f';
                keep = digit && letter;
            }
            if (keep) so[n] = a, eo[n] = b, n++;
            from = (size_t)b > from ? (size_t)b : from + 1;
        }
    }
    return n;
}

#endif
