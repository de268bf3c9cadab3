// lexicon.c — `shardlab lexicon` and `shardlab lesson`: the course's lexicon and lessons
// (course.h) in the terminal, an index or one file rendered by mdterm.h.
#include "lexicon.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "command/course/course.h"
#include "common/harness/check.h"
#include "common/runfiles/json.h"
#include "mdterm.h"

// ---------------------------------------------------------------------------------------
// What both commands share: their arguments, the course, one file rendered

static int terminal_width(void) {
    const char *c = getenv("COLUMNS");
    int w = c ? atoi(c) : 0;
    struct winsize ws;
    if (w <= 0 && isatty(1) && ioctl(1, TIOCGWINSZ, &ws) == 0) w = ws.ws_col;
    if (w <= 0) w = 80;
    return w > 100 ? 100 : w;
}

// The command's arguments: --help (returns 1: usage printed), --plain, and the words given
// joined by spaces into name (`lexicon zero stage 3` is `lexicon "zero stage 3"`); an empty
// name when none or only empty words were given.
static int read_args(int argc, char **argv, const char *prog, const char *usage, int *plain, char *name, size_t n) {
    *plain = 0, name[0] = 0;
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return fputs(usage, stdout), 1;
        if (strcmp(argv[i], "--plain") == 0) *plain = 1;
        else if (argv[i][0] == '-' && argv[i][1]) usage_error(prog, "unknown option '%s'", argv[i]);
        else if (strlen(name) + strlen(argv[i]) + 2 > n)
            usage_error(prog, "the name is too long (%zu bytes at most)", n - 1);
        else if (argv[i][0]) snprintf(name + strlen(name), n - strlen(name), "%s%s", name[0] ? " " : "", argv[i]);
    }
    return 0;
}

// The terms, and the lessons' titles beside them, from root/lexicon and root/lessons.
static void load_course(Lexicon *lx, const char *root, const char *prog) {
    char dir[4200], err[512];
    snprintf(dir, sizeof dir, "%s/lexicon", root);
    if (lexicon_load(lx, dir, err, sizeof err) != 0) usage_error(prog, "%s (set SHARDLAB_ROOT to the checkout)", err);
}

// One markdown file rendered for the terminal (wiki links read as their term's or lesson's
// name) and printed, after a note saying it is only the closest to what was asked, if it is.
static void show_file(const char *path, Lexicon *lx, int color, const char *note) {
    StrBuf md, out;
    sb_init(&md);
    sb_init(&out);
    sb_read_file(&md, path, (size_t)1 << 20);
    MdTermOptions o = {.width = terminal_width(), .color = color, .link_name = lexicon_link_name, .link_ctx = lx};
    if (mdterm_render(md.data ? md.data : "", md.len, &o, &out) != 0)
        die("the file's markdown could not be parsed", "rendering %s failed", path);
    if (note) printf("(%s)\n\n", note);
    fputs(out.data, stdout);
    sb_free(&md);
    sb_free(&out);
}

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

// How `lexicon` and `lesson` start: their arguments (1: --help was answered), whether to
// colour, and the course loaded from root.
static int course_command(int argc, char **argv, const char *prog, const char *usage, const char *root, Lexicon *lx,
                          char *name, size_t n, int *color) {
    int plain;
    if (read_args(argc, argv, prog, usage, &plain, name, n)) return 1;
    *color = !plain && isatty(1) && !getenv("NO_COLOR");
    load_course(lx, root, prog);
    return 0;
}

int lexicon_main(int argc, char **argv, const char *root) {
    const char *prog = "shardlab lexicon";
    char term[512];
    int color;
    Lexicon lx;
    if (course_command(argc, argv, prog, LEXICON_USAGE, root, &lx, term, sizeof term, &color)) return 0;
    if (!term[0]) {
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
        if (k) usage_error(prog, "no term '%s'; the closest: %s", term, list);
        usage_error(prog, "no term '%s' ('shardlab lexicon' lists them)", term);
    }
    const LexTerm *t = &lx.t[found[0]];
    char path[4400], q[96], s[96], tt[96], note[700];
    snprintf(path, sizeof path, "%s/%s.md", lx.dir, t->slug);
    lexicon_normalize(term, q, sizeof q);
    lexicon_normalize(t->slug, s, sizeof s);
    lexicon_normalize(t->title, tt, sizeof tt);
    snprintf(note, sizeof note, "%s: the closest term to '%s'", t->slug, term);
    show_file(path, &lx, color, strcmp(q, s) != 0 && strcmp(q, tt) != 0 ? note : NULL);
    lexicon_free(&lx);
    return 0;
}

// ---------------------------------------------------------------------------------------
// `shardlab lesson`

static const char *LESSON_USAGE =
    "usage: shardlab lesson [--plain] [LESSON...]\n"
    "\n"
    "Without LESSON: the course's lessons, in order. With LESSON: that lesson, rendered for the\n"
    "terminal. LESSON is its number (5 or 05), its slug (ddp-from-scratch, with or without the\n"
    "number) or its title (DDP from scratch, quoted or not: several words are one name), in any\n"
    "case; a partial or misspelt name finds the closest lessons.\n"
    "  --plain   no colours (also when NO_COLOR is set or the output is not a terminal)\n"
    "Environment: SHARDLAB_ROOT (the checkout, where lessons/ is; default: found from this\n"
    "program's place), COLUMNS (the width to wrap at).\n"
    "Exit status: 0 shown, 2 unknown lesson or bad arguments.\n";

static void print_lessons(const Lexicon *lx, int color) {
    printf("%sthe shardlab lessons: %d, in order%s (shardlab lesson N opens one)\n\n", color ? "\033[1m" : "",
           lx->nlessons, color ? "\033[0m" : "");
    for (int i = 0, number; i < lx->nlessons; i++) {
        const char *title = course_lesson_title(&lx->lessons[i], &number);
        if (number >= 0) printf("  %2d  %s\n", number, title);
        else printf("      %s (%s)\n", title, lx->lessons[i].slug);  // a lesson without a number: by its slug
    }
}

int lesson_main(int argc, char **argv, const char *root) {
    const char *prog = "shardlab lesson";
    char name[512];
    int color;
    Lexicon lx;
    if (course_command(argc, argv, prog, LESSON_USAGE, root, &lx, name, sizeof name, &color)) return 0;
    if (lx.nlessons == 0) {
        lexicon_free(&lx);
        usage_error(prog, "no lessons in '%s/lessons' (set SHARDLAB_ROOT to the checkout)", root);
    }
    if (!name[0]) {
        print_lessons(&lx, color);
        lexicon_free(&lx);
        return 0;
    }
    int found[3], k = 0, how = course_lesson_lookup(&lx, name, found, 3, &k);
    if (!how) {
        char list[1024] = "";
        for (int i = 0; i < k; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", lx.lessons[found[i]].slug);
        int first, last;
        course_lesson_title(&lx.lessons[0], &first);
        course_lesson_title(&lx.lessons[lx.nlessons - 1], &last);
        lexicon_free(&lx);
        if (k) usage_error(prog, "no lesson '%s'; the closest: %s", name, list);
        usage_error(prog, "no lesson %s: they are numbered %d to %d ('shardlab lesson' lists them)", name, first, last);
    }
    const LexTerm *l = &lx.lessons[found[0]];
    char path[4400], note[700];
    snprintf(path, sizeof path, "%s/../lessons/%s.md", lx.dir, l->slug);
    snprintf(note, sizeof note, "%s: the closest lesson to '%s'", l->slug, name);
    show_file(path, &lx, color, how == 2 ? note : NULL);
    lexicon_free(&lx);
    return 0;
}
