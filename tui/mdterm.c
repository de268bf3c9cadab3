// mdterm.c — see mdterm.h.
//
// md4c calls us as it parses: enter and leave a block (paragraph, heading, list item, code
// block, table cell, ...), enter and leave a span (emphasis, code, link), and text. We keep
// one line being built, with the indent and the first-line prefix of the innermost list item,
// and break it at spaces when it reaches the width. Tables are collected cell by cell and
// printed when they end, once the column widths are known.
#include "mdterm.h"

#include <md4c.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "command/course/course.h"
#include "common/harness/check.h"

#define SGR_RESET "\033[0m"
#define MAX_DEPTH 16
#define MAX_CELLS 512

typedef struct {
    const MdTermOptions *o;
    StrBuf *out;
    StrBuf line;        // the line being built (with SGR codes)
    int cols;           // its visible width
    int words;          // words on it so far (0: nothing but the indent)
    char indent[MAX_DEPTH * 4 + 1];  // continuation indent of the current block
    char prefix[64];    // the first line's bullet or number, printed in place of the indent once
    int pending_space;
    // block and span state
    int code;           // inside a code block
    int heading;        // level, or 0
    int list_kind[MAX_DEPTH], list_next[MAX_DEPTH], lists;
    int quote;
    int strong, em, code_span, link;
    int wiki;           // inside [[...]]: its label text is replaced by the name
    char wiki_target[256];
    char href[512];     // inside [text](href)
    int href_ok;        // it may be shown (course_url_ok, and spelt without character references)
    StrBuf link_text;
    // tables
    int table, cell_open, row, col, ncols, header_rows;
    StrBuf cells[MAX_CELLS];  // row-major, ncols a row
    int ncells;
} R;

static int visible_width(const char *s, size_t n) {
    int w = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\033') {  // skip an SGR sequence
            while (i < n && s[i] != 'm') i++;
            continue;
        }
        if (((unsigned char)s[i] & 0xC0) != 0x80) w++;
    }
    return w;
}

// The SGR codes for the spans open now (after a reset).
static void restyle(R *r, StrBuf *sb) {
    if (!r->o->color) return;
    sb_printf(sb, SGR_RESET);
    if (r->heading || r->strong) sb_printf(sb, "\033[1m");
    if (r->heading == 1) sb_printf(sb, "\033[4m");
    if (r->em) sb_printf(sb, "\033[3m");
    if (r->code_span) sb_printf(sb, "\033[36m");
    if (r->link || r->wiki) sb_printf(sb, "\033[4m");
}

static void flush_line(R *r) {
    if (r->line.len == 0 && r->words == 0) return;
    sb_append(r->out, r->line.data ? r->line.data : "", r->line.len);
    if (r->o->color) sb_printf(r->out, SGR_RESET);
    sb_append(r->out, "\n", 1);
    sb_reset(&r->line);
    r->cols = r->words = r->pending_space = 0;
}

static void blank_line(R *r) {
    flush_line(r);
    if (r->out->len >= 2 && !(r->out->data[r->out->len - 1] == '\n' && r->out->data[r->out->len - 2] == '\n'))
        sb_append(r->out, "\n", 1);
}

// Start a line: the quote bar, then the list item's bullet once, else the indent.
static void start_line(R *r) {
    if (r->quote) sb_printf(&r->line, "%s", r->o->color ? "\033[2m│\033[0m " : "| ");
    const char *lead = r->prefix[0] ? r->prefix : r->indent;
    sb_printf(&r->line, "%s", lead);
    r->prefix[0] = 0;
    restyle(r, &r->line);
    r->cols = visible_width(r->line.data, r->line.len);
}

// One word (no spaces) of flowing text, wrapped at the width.
static void put_word(R *r, const char *w, size_t n) {
    int wn = visible_width(w, n);
    if (r->words && r->cols + (r->pending_space ? 1 : 0) + wn > r->o->width) flush_line(r);
    if (r->words == 0) {
        start_line(r);
        r->pending_space = 0;
    }
    if (r->pending_space) sb_append(&r->line, " ", 1), r->cols++;
    sb_append(&r->line, w, n);
    r->cols += wn;
    r->words++;
    r->pending_space = 0;
}

// Flowing text: words and the spaces between them.
static void put_text(R *r, const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] == ' ' || s[i] == '\t' || s[i] == '\n') {
            if (r->words) r->pending_space = 1;
            i++;
            continue;
        }
        size_t j = i;
        while (j < n && s[j] != ' ' && s[j] != '\t' && s[j] != '\n') j++;
        put_word(r, s + i, j - i);
        i = j;
    }
}

// A code block's text: verbatim, line by line, 4 columns in.
static void put_code(R *r, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (r->words == 0) {
            if (r->quote) sb_printf(&r->line, "| ");
            sb_printf(&r->line, "%s    %s", r->indent, r->o->color ? "\033[2m" : "");
            r->words = 1;
        }
        if (s[i] == '\n') {
            flush_line(r);
            continue;
        }
        sb_append(&r->line, s + i, 1);
    }
}

static StrBuf *cell(R *r) { return r->ncells > 0 ? &r->cells[r->ncells - 1] : NULL; }

// Where a piece of inline text goes: a table cell, a link's text, or the flowing line.
static void emit(R *r, const char *s, size_t n) {
    if (r->wiki) return;  // the label is replaced by the name when the link ends
    if (r->link) sb_append(&r->link_text, s, n);
    if (r->table && r->cell_open) {
        if (cell(r)) sb_append(cell(r), s, n);
        return;
    }
    if (r->code) put_code(r, s, n);
    else put_text(r, s, n);
}

static void emit_text(R *r, const char *s, size_t n);

static void attr(char *out, size_t max, const MD_ATTRIBUTE *a) {
    size_t n = a->size < max - 1 ? a->size : max - 1;
    if (n) memcpy(out, a->text, n);  // (an empty attribute, [text](), has no text at all)
    out[n] = 0;
}

// ---------------------------------------------------------------------------------------
// Tables: collected, then printed with aligned columns

static void print_table(R *r) {
    int nc = r->ncols > 0 ? r->ncols : 1, rows = r->ncells / nc;
    int width[64] = {0};
    for (int i = 0; i < r->ncells; i++) {
        int c = i % nc, w = visible_width(r->cells[i].data ? r->cells[i].data : "", r->cells[i].len);
        if (c < 64 && w > width[c]) width[c] = w;
    }
    for (int row = 0; row < rows; row++) {
        StrBuf *line = &r->line;
        sb_printf(line, "%s", r->indent);
        for (int c = 0; c < nc && c < 64; c++) {
            StrBuf *x = &r->cells[row * nc + c];
            int w = visible_width(x->data ? x->data : "", x->len);
            if (row < r->header_rows && r->o->color) sb_printf(line, "\033[1m");
            sb_append(line, x->data ? x->data : "", x->len);
            if (row < r->header_rows && r->o->color) sb_printf(line, SGR_RESET);
            if (c + 1 < nc) sb_printf(line, "%*s", width[c] - w + 2, "");
        }
        r->words = 1;
        flush_line(r);
        if (row + 1 == r->header_rows) {
            sb_printf(&r->line, "%s", r->indent);
            int total = 0;
            for (int c = 0; c < nc && c < 64; c++) total += width[c] + (c + 1 < nc ? 2 : 0);
            for (int k = 0; k < total; k++) sb_printf(&r->line, "%s", "─");
            r->words = 1;
            flush_line(r);
        }
    }
    for (int i = 0; i < r->ncells; i++) sb_free(&r->cells[i]);
    r->ncells = 0;
}

// ---------------------------------------------------------------------------------------
// md4c's callbacks

static void set_item_prefix(R *r) {
    int d = r->lists - 1;
    char bullet[16];
    if (r->list_kind[d] == 'o') snprintf(bullet, sizeof bullet, "%d. ", r->list_next[d]++);
    else snprintf(bullet, sizeof bullet, "• ");
    snprintf(r->prefix, sizeof r->prefix, "%.*s%s", (int)(strlen(r->indent)), r->indent, bullet);
    size_t k = strlen(r->indent);
    int add = visible_width(bullet, strlen(bullet));
    for (int i = 0; i < add && k + 1 < sizeof r->indent; i++) r->indent[k++] = ' ';
    r->indent[k] = 0;
}

static void drop_indent(R *r, int cols) {
    size_t k = strlen(r->indent);
    r->indent[k >= (size_t)cols ? k - (size_t)cols : 0] = 0;
}

static int enter_block(MD_BLOCKTYPE type, void *detail, void *user) {
    R *r = user;
    switch (type) {
    case MD_BLOCK_H:
        blank_line(r);
        r->heading = (int)((MD_BLOCK_H_DETAIL *)detail)->level;
        break;
    case MD_BLOCK_P:
        if (r->table) break;
        flush_line(r);
        break;
    case MD_BLOCK_CODE:
        flush_line(r);
        r->code = 1;
        break;
    case MD_BLOCK_UL:
    case MD_BLOCK_OL:
        flush_line(r);
        if (r->lists < MAX_DEPTH) {
            r->list_kind[r->lists] = type == MD_BLOCK_OL ? 'o' : 'u';
            r->list_next[r->lists] = type == MD_BLOCK_OL ? (int)((MD_BLOCK_OL_DETAIL *)detail)->start : 0;
        }
        r->lists++;
        break;
    case MD_BLOCK_LI:
        flush_line(r);
        if (r->lists > 0 && r->lists <= MAX_DEPTH) set_item_prefix(r);
        break;
    case MD_BLOCK_QUOTE:
        flush_line(r);
        r->quote++;
        break;
    case MD_BLOCK_HR:
        blank_line(r);
        sb_printf(&r->line, "%s", r->indent);
        for (int k = 0; k < 40; k++) sb_printf(&r->line, "─");
        r->words = 1;
        flush_line(r);
        break;
    case MD_BLOCK_TABLE:
        blank_line(r);
        r->table = 1;
        r->ncols = (int)((MD_BLOCK_TABLE_DETAIL *)detail)->col_count;
        r->header_rows = (int)((MD_BLOCK_TABLE_DETAIL *)detail)->head_row_count;
        r->ncells = 0;
        break;
    case MD_BLOCK_TH:
    case MD_BLOCK_TD:
        if (r->ncells < MAX_CELLS) sb_init(&r->cells[r->ncells++]);
        r->cell_open = 1;
        break;
    default:
        break;
    }
    return 0;
}

static int leave_block(MD_BLOCKTYPE type, void *detail, void *user) {
    R *r = user;
    switch (type) {
    case MD_BLOCK_H: {
        int level = r->heading;
        int w = r->cols;
        r->heading = 0;
        flush_line(r);
        if (!r->o->color) {  // plain: the heading underlined with a rule (not markdown's = or -)
            for (int k = 0; k < w; k++) sb_printf(r->out, "%s", level == 1 ? "═" : "─");
            sb_append(r->out, "\n", 1);
        }
        sb_append(r->out, "\n", 1);
        break;
    }
    case MD_BLOCK_P:
        if (r->table) break;
        if (r->lists) flush_line(r);
        else blank_line(r);
        break;
    case MD_BLOCK_CODE:
        flush_line(r);
        r->code = 0;
        if (!r->lists) sb_append(r->out, "\n", 1);
        break;
    case MD_BLOCK_UL:
    case MD_BLOCK_OL:
        flush_line(r);
        r->lists--;
        if (!r->lists) blank_line(r);
        break;
    case MD_BLOCK_LI: {
        flush_line(r);
        r->prefix[0] = 0;
        int d = r->lists - 1;
        drop_indent(r, d >= 0 && d < MAX_DEPTH && r->list_kind[d] == 'o' ? (r->list_next[d] - 1 >= 10 ? 4 : 3) : 2);
        break;
    }
    case MD_BLOCK_QUOTE:
        flush_line(r);
        r->quote--;
        break;
    case MD_BLOCK_TH:
    case MD_BLOCK_TD:
        r->cell_open = 0;
        break;
    case MD_BLOCK_TABLE:
        r->table = 0;
        print_table(r);
        sb_append(r->out, "\n", 1);
        break;
    default:
        break;
    }
    (void)detail;
    return 0;
}

static int enter_span(MD_SPANTYPE type, void *detail, void *user) {
    R *r = user;
    switch (type) {
    case MD_SPAN_STRONG: r->strong++; break;
    case MD_SPAN_EM: r->em++; break;
    case MD_SPAN_CODE: r->code_span++; break;
    case MD_SPAN_A: {
        r->link = 1;
        sb_reset(&r->link_text);
        const MD_ATTRIBUTE *href = &((MD_SPAN_A_DETAIL *)detail)->href;
        attr(r->href, sizeof r->href, href);
        r->href_ok = href->size < sizeof r->href && course_url_ok(r->href);
        for (int i = 0; href->substr_offsets && href->substr_offsets[i] < href->size; i++)
            if (href->substr_types[i] != MD_TEXT_NORMAL) r->href_ok = 0;  // "&#106;avascript:"
        break;
    }
    case MD_SPAN_WIKILINK:
        r->wiki = 1;
        attr(r->wiki_target, sizeof r->wiki_target, &((MD_SPAN_WIKILINK_DETAIL *)detail)->target);
        break;
    default: break;
    }
    if (!r->table && r->o->color && r->words) restyle(r, &r->line);
    return 0;
}

static int leave_span(MD_SPANTYPE type, void *detail, void *user) {
    R *r = user;
    switch (type) {
    case MD_SPAN_STRONG: r->strong--; break;
    case MD_SPAN_EM: r->em--; break;
    case MD_SPAN_CODE: r->code_span--; break;
    case MD_SPAN_A: {
        r->link = 0;
        // (no text yet: link_text.data is NULL, which memcmp may not be given even for 0 bytes)
        int same = r->link_text.len == strlen(r->href) &&
                   (r->link_text.len == 0 || memcmp(r->link_text.data, r->href, r->link_text.len) == 0);
        if (!same && r->href[0] && r->href_ok) {
            char tail[600];
            snprintf(tail, sizeof tail, " (%s)", r->href);
            emit(r, tail, strlen(tail));
        }
        break;
    }
    case MD_SPAN_WIKILINK: {
        const char *name = r->o->link_name ? r->o->link_name(r->wiki_target, strlen(r->wiki_target), r->o->link_ctx) : NULL;
        if (!name) name = r->wiki_target;
        if (r->o->color && !r->table && r->words) restyle(r, &r->line);
        r->wiki = 0;
        // The name is one unit: words inside it may wrap, but styles stay on.
        emit_text(r, name, strlen(name));
        break;
    }
    default: break;
    }
    if (!r->table && r->o->color && r->words) restyle(r, &r->line);
    (void)detail;
    return 0;
}

// Raw HTML (the lessons' folded answers): tags dropped, a summary shown as "text:".
static void put_html(R *r, const char *s, size_t n) {
    const char *open = "<summary>", *close = "</summary>";
    const char *a = memmem(s, n, open, strlen(open));
    if (a) {
        const char *b = memmem(a, n - (size_t)(a - s), close, strlen(close));
        const char *from = a + strlen(open);
        size_t len = b ? (size_t)(b - from) : 0;
        flush_line(r);
        r->strong++;
        emit_text(r, from, len);
        put_text(r, ":", 1);
        r->strong--;
        flush_line(r);
    }
}

// Text with its control characters left out (tab and newline kept): an escape sequence in a
// course file would otherwise reach the terminal and act there (clear it, set the clipboard,
// retitle the window). C1 controls too, as UTF-8 spells them (U+0080..U+009F).
static void emit_text(R *r, const char *s, size_t n) {
    size_t from = 0;
    for (size_t i = 0; i <= n; i++) {
        unsigned char c = i < n ? (unsigned char)s[i] : 0;
        int c1 = c == 0xC2 && i + 1 < n && (unsigned char)s[i + 1] >= 0x80 && (unsigned char)s[i + 1] <= 0x9F;
        if (i < n && !c1 && (c >= 32 || c == '\t' || c == '\n') && c != 0x7F) continue;
        if (i > from) {
            if (r->code) put_code(r, s + from, i - from);
            else emit(r, s + from, i - from);
        }
        from = i + 1 + c1;
        i += (size_t)c1;
    }
}

static int text(MD_TEXTTYPE type, const MD_CHAR *s, MD_SIZE n, void *user) {
    R *r = user;
    switch (type) {
    case MD_TEXT_BR:
        if (!r->table) flush_line(r);
        break;
    case MD_TEXT_SOFTBR: emit(r, " ", 1); break;
    case MD_TEXT_HTML: put_html(r, s, n); break;
    case MD_TEXT_ENTITY: {
        static const char *map[][2] = {{"&amp;", "&"}, {"&lt;", "<"}, {"&gt;", ">"}, {"&quot;", "\""},
                                       {"&nbsp;", " "}, {"&apos;", "'"}, {"&mdash;", "—"}, {"&ndash;", "–"}};
        const char *to = NULL;
        for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
            if (strlen(map[i][0]) == n && memcmp(map[i][0], s, n) == 0) to = map[i][1];
        if (to) emit(r, to, strlen(to));
        else emit_text(r, s, n);
        break;
    }
    case MD_TEXT_NULLCHAR: break;
    default: emit_text(r, s, n); break;
    }
    return 0;
}

int mdterm_render(const char *md, size_t n, const MdTermOptions *o, StrBuf *out) {
    R *r = calloc_check(1, sizeof *r);
    MdTermOptions opt = *o;
    if (opt.width < 40) opt.width = 40;
    if (opt.width > 200) opt.width = 200;
    r->o = &opt;
    r->out = out;
    sb_init(&r->line);
    sb_init(&r->link_text);
    sb_append(out, "", 0);
    MD_PARSER p = {0};
    p.flags = MD_DIALECT_GITHUB | MD_FLAG_WIKILINKS;
    p.enter_block = enter_block;
    p.leave_block = leave_block;
    p.enter_span = enter_span;
    p.leave_span = leave_span;
    p.text = text;
    int rc = md_parse(md, (MD_SIZE)n, &p, r);
    flush_line(r);
    for (int i = 0; i < r->ncells; i++) sb_free(&r->cells[i]);
    sb_free(&r->line);
    sb_free(&r->link_text);
    free(r);
    // No blank lines piling up at the end.
    while (out->len >= 2 && out->data[out->len - 1] == '\n' && out->data[out->len - 2] == '\n') out->data[--out->len] = 0;
    return rc == 0 ? 0 : -1;
}
