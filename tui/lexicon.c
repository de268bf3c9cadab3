// lexicon.c — `shardlab lexicon`: the course's lexicon (course.h) in the terminal, its index
// or one entry rendered by mdterm.h.
#include "lexicon.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "check.h"
#include "course.h"
#include "json.h"
#include "mdterm.h"

// ---------------------------------------------------------------------------------------
// `shardlab lexicon`

static const char *LEXICON_USAGE =
    "usage: shardlab lexicon [--plain] [TERM...]\n"
    "\n"
    "Without TERM: the 49 terms of the lexicon, grouped by category. With TERM: that entry,\n"
    "rendered for the terminal. TERM is a slug (zero-stage-3), a title (ZeRO stage 3, quoted\n"
    "or not: several words are one name) or another name (ZeRO-3), in any case; a partial or\n"
    "misspelt name finds the closest terms.\n"
    "  --plain   no colours (also when NO_COLOR is set or the output is not a terminal)\n"
    "Environment: SHARDLAB_ROOT (the checkout, where lexicon/ is; default: found from this\n"
    "program's place), COLUMNS (the width to wrap at).\n"
    "Exit status: 0 shown, 2 unknown term or bad arguments.\n";

static int terminal_width(void) {
    const char *c = getenv("COLUMNS");
    int w = c ? atoi(c) : 0;
    struct winsize ws;
    if (w <= 0 && isatty(1) && ioctl(1, TIOCGWINSZ, &ws) == 0) w = ws.ws_col;
    if (w <= 0) w = 80;
    return w > 100 ? 100 : w;
}

static void print_index(const Lexicon *lx, int color) {
    printf("%sthe shardlab lexicon: %d terms%s (shardlab lexicon TERM shows one)\n", color ? "\033[1m" : "", lx->n,
           color ? "\033[0m" : "");
    for (int c = 0; c < LEXICON_NCATEGORIES; c++) {
        printf("\n%s%s%s\n", color ? "\033[1m" : "", LEXICON_CATEGORIES[c], color ? "\033[0m" : "");
        for (int i = 0; i < lx->n; i++)
            if (strcmp(lx->t[i].category, LEXICON_CATEGORIES[c]) == 0)
                printf("  %-30s %s\n", lx->t[i].slug, lx->t[i].title);
    }
    int others = 0;
    for (int i = 0; i < lx->n; i++) {
        int known = 0;
        for (int c = 0; c < LEXICON_NCATEGORIES; c++) known |= strcmp(lx->t[i].category, LEXICON_CATEGORIES[c]) == 0;
        if (!known) printf("%s  %-30s %s\n", others++ ? "" : "\nOther\n", lx->t[i].slug, lx->t[i].title);
    }
}

int lexicon_main(int argc, char **argv, const char *root) {
    int plain = 0;
    // The words given, joined by spaces: `lexicon zero stage 3` is `lexicon "zero stage 3"`.
    char joined[512] = "";
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return fputs(LEXICON_USAGE, stdout), 0;
        if (strcmp(argv[i], "--plain") == 0) plain = 1;
        else if (argv[i][0] == '-' && argv[i][1]) usage_error("shardlab lexicon", "unknown option '%s'", argv[i]);
        else if (strlen(joined) + strlen(argv[i]) + 2 > sizeof joined)
            usage_error("shardlab lexicon", "the term is too long (%zu bytes at most)", sizeof joined - 1);
        else if (argv[i][0])
            snprintf(joined + strlen(joined), sizeof joined - strlen(joined), "%s%s", joined[0] ? " " : "", argv[i]);
    }
    const char *term = joined[0] ? joined : NULL;  // none, or only empty words: the index
    int color = !plain && isatty(1) && !getenv("NO_COLOR");
    char dir[4200], err[512];
    snprintf(dir, sizeof dir, "%s/lexicon", root);
    Lexicon lx;
    if (lexicon_load(&lx, dir, err, sizeof err) != 0)
        usage_error("shardlab lexicon", "%s (set SHARDLAB_ROOT to the checkout)", err);
    if (!term) {
        print_index(&lx, color);
        lexicon_free(&lx);
        return 0;
    }
    int found[5], k = 0;
    if (!lexicon_lookup(&lx, term, found, 5, &k)) {
        char list[1024] = "";
        for (int i = 0; i < k; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", lx.t[found[i]].slug);
        lexicon_free(&lx);
        if (k) usage_error("shardlab lexicon", "no term '%s'; the closest: %s", term, list);
        usage_error("shardlab lexicon", "no term '%s' ('shardlab lexicon' lists them)", term);
    }
    const LexTerm *t = &lx.t[found[0]];
    char path[4400];
    snprintf(path, sizeof path, "%s/%s.md", dir, t->slug);
    StrBuf md, out;
    sb_init(&md);
    sb_init(&out);
    sb_read_file(&md, path, (size_t)1 << 20);
    char q[96], s[96];
    lexicon_normalize(term, q, sizeof q);
    lexicon_normalize(t->slug, s, sizeof s);
    MdTermOptions o = {.width = terminal_width(), .color = color, .link_name = lexicon_link_name, .link_ctx = &lx};
    if (mdterm_render(md.data ? md.data : "", md.len, &o, &out) != 0)
        die("the entry's markdown could not be parsed", "rendering %s failed", path);
    char tt[96];
    lexicon_normalize(t->title, tt, sizeof tt);
    if (strcmp(q, s) != 0 && strcmp(q, tt) != 0) printf("(%s: the closest term to '%s')\n\n", t->slug, term);
    fputs(out.data, stdout);
    sb_free(&md);
    sb_free(&out);
    lexicon_free(&lx);
    return 0;
}
