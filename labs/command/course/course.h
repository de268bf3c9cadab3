// course.h — the course the labs teach, as the terminal and the web read it: the lexicon's
// terms (lexicon/<slug>.md: their header fields, the index by category, finding a term from
// what a person typed, exact, partial or misspelt), the lessons' titles and finding a lesson
// by number or name, the names wiki links show, and which link addresses may be shown at all.
// Plain C: no terminal, no web server.
//
// An entry begins with a header block (the lessons and tests rely on exactly this shape):
//     # <Title>
//
//     - **Also known as:** <names, comma-separated, or —>
//     - **Category:** <one of LEXICON_CATEGORIES>
//     - **Related:** [[slug]], [[slug]]
//     - **Labs:** `lab`, `lab`
#ifndef SHARDLAB_COURSE_H
#define SHARDLAB_COURSE_H

#include <stddef.h>

#define LEXICON_NCATEGORIES 6
extern const char *const LEXICON_CATEGORIES[LEXICON_NCATEGORIES];

typedef struct {
    char slug[64];
    char title[160];
    char aka[400];       // "Also known as", as written
    char category[64];
    char related[1024];  // as written: "[[a]], [[b]]"
    char labs[256];      // as written: "`ddp`, `zero`"
} LexTerm;

typedef struct {
    LexTerm *t;  // sorted by slug
    int n;
    LexTerm *lessons;  // the lessons beside the lexicon (../lessons/NN-slug.md): slug and title only
    int nlessons;
    char dir[4096];
} Lexicon;

// Reads the header of every dir/*.md, and the titles of dir/../lessons/*.md if there are.
// Returns 0, or -1 with a message in err (no such directory, no entries, a file without a
// title).
int lexicon_load(Lexicon *lx, const char *dir, char *err, size_t errlen);
void lexicon_free(Lexicon *lx);
// The term with this slug, or NULL.
const LexTerm *lexicon_term(const Lexicon *lx, const char *slug);

// What `shardlab lexicon NAME` shows. Names are compared in lower case with everything but
// letters and digits dropped, against each term's slug, title and also-known-as names:
//   equal                          -> returns 1, out[0] the term
//   part of exactly one term       -> returns 1, out[0] the term        ("ring-all" -> ring all-reduce)
//   else a unique nearest name within about one edit in four letters -> returns 1 ("fsdpp")
//   else                           -> returns 0, out[0..k) the closest terms (k <= max), best first
// "Nearest" counts edits to a whole name or to one of its words ("pipelne" is one edit from
// the word "pipeline"); equally near terms come in order of how many terms list them under
// Related (pipeline parallelism before pipeline bubble), then by slug.
// *k gets how many are in out.
int lexicon_lookup(const Lexicon *lx, const char *name, int *out, int max, int *k);
// What `shardlab lesson NAME` opens, out[0] an index into lx->lessons:
//   a number ("5", "05")           -> returns 1 if a lesson has it (its slug begins "05-"), else 0 and *k = 0
//   else a name, as lexicon_lookup() finds a term: the slug or title with or without its number
//   ("ddp-from-scratch", "DDP from scratch"), part of one lesson's name, or a near misspelling.
//   Returns 1 if NAME is one of the lesson's names, 2 if it is only the closest, 0 if none is
//   (out[0..k) the closest lessons, best first; equally close ones in the course's order).
int course_lesson_lookup(const Lexicon *lx, const char *name, int *out, int max, int *k);
// A lesson's title without its number ("5. DDP from scratch" -> "DDP from scratch"), and in
// *number the number its slug begins with (05-ddp-from-scratch -> 5; -1 if none).
const char *course_lesson_title(const LexTerm *lesson, int *number);
// A name as lexicon_lookup() compares it: lower case, letters and digits only.
void lexicon_normalize(const char *s, char *out, size_t n);

// For the renderers (mdterm.h, the web's): a wiki link's name (the term's title as it reads in a sentence, "all-gather",
// "ZeRO stage 2"; or the lesson's heading), NULL if unknown. ctx: a Lexicon.
const char *lexicon_link_name(const char *target, size_t n, void *ctx);

// 1 if a link's address may be shown or followed: a path on the same site ("/lexicon/zero",
// "#terms", "notes.md": no scheme) or an http, https or mailto address. Refused: any other
// scheme (javascript:, vbscript:, data:, in any case), and any address holding a space or a
// control character (a browser drops tabs and newlines inside a URL, so "java\tscript:" is
// javascript: to it). Character references are the caller's to decode, or to refuse.
int course_url_ok(const char *url);

#endif
