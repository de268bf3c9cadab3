// mdterm.h — markdown rendered for a terminal: md4c's parser driving a small ANSI renderer.
//
// Defines: MdTermLinkName, MdTermOptions, mdterm_render().
//
// What the lexicon and the lessons use, and how it comes out (no markdown markers are left):
//     # Title, ## Section     bold (and underlined); plain: the text over a rule of ═ or ─
//     **strong**, *emphasis*  bold, italic (plain: the words alone)
//     `code`                  cyan (plain: the text alone)
//     ```code blocks```       indented 4 columns, dim; never wrapped
//     - lists, 1. lists       "• " and "1. " with hanging indents
//     [[slug]] wiki links     the linked term's name (MdTermLinkName), underlined
//     [text](url)             the text, then " (url)" unless the url is the text (or is not one
//                             course_url_ok() takes: then the text alone)
//     | tables |              columns aligned, a rule under the header
//     <details><summary>X</summary> ... </details>   "X:" in bold, then the content
// Paragraphs are wrapped to the width; colour (ANSI SGR) only when asked for. Control characters
// in the text (a terminal's escape sequences) are dropped: only ours reach the terminal.
#ifndef SHARDLAB_MDTERM_H
#define SHARDLAB_MDTERM_H

#include <stddef.h>

#include "common/runfiles/json.h"

// A wiki link's display name: target[0..n) is what is between [[ and ]]. NULL: the target.
typedef const char *(*MdTermLinkName)(const char *target, size_t n, void *ctx);

typedef struct {
    int width;                // wrap paragraphs at this many columns (40..200)
    int color;                // 1: ANSI styles
    MdTermLinkName link_name; // NULL: targets as written
    void *link_ctx;
} MdTermOptions;

// Appends the rendering of md[0..n) to out. Returns 0, or -1 if md4c refused the text.
int mdterm_render(const char *md, size_t n, const MdTermOptions *o, StrBuf *out);

#endif
