// html.c — the last gate between markdown and a page: every tag of the HTML that md4c-html
// wrote is checked against the few tags and attributes a course page uses, and every link
// against the addresses a link may have. See web.h (web_html_filter).
//
// What is trusted: the lexicon and the lessons are our own files, so their markdown may use
// the raw HTML the course is written with (<details><summary> for folded answers) and md4c
// renders them with raw HTML on, as the course looks. What is not: any one of those files can
// arrive through a pull request, a student's edit or a copied course, and a page is the place
// where a link runs script. So the HTML is not sent as md4c wrote it: a tag passes only if it
// is one of ours with our attributes, double-quoted; href and src only if course_url_ok()
// takes them (a site path or http, https, mailto: never javascript:, vbscript: or data:, in
// any case, spacing or entity spelling). A tag that fails is shown as text (its '<' escaped):
// the browser then sees no tag at all. A link whose address fails keeps its text, not its href.
//
// This is sound because md4c escapes text: in its output every '<' starts a tag, and each is
// checked here up to its first '>'. A '>' inside a quoted value ends our reading early, the
// tag does not parse, and it is escaped, so the browser never reads further than we did.
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "command/course/course.h"
#include "web.h"

// The tags md4c-html writes for GitHub-flavoured markdown, the wiki link it writes before
// pages.c makes it a link, and the course's <details><summary>; each with the attributes it
// may carry ("" none; boolean attributes listed too).
static const struct {
    const char *tag, *attrs;
} allowed[] = {
    {"p", ""}, {"h1", ""}, {"h2", ""}, {"h3", ""}, {"h4", ""}, {"h5", ""}, {"h6", ""}, {"hr", ""}, {"br", ""},
    {"blockquote", ""}, {"ul", ""}, {"ol", " start "}, {"li", " class "}, {"pre", ""}, {"code", " class "},
    {"em", ""}, {"strong", ""}, {"del", ""}, {"u", ""}, {"table", ""}, {"thead", ""}, {"tbody", ""}, {"tr", ""},
    {"th", " align "}, {"td", " align "}, {"a", " href title class "}, {"img", " src alt title "},
    {"input", " type class disabled checked "}, {"span", " class "}, {"x-wikilink", " data-target "},
    {"details", ""}, {"summary", ""},
};

// A URL as the browser reads it from an attribute: &amp; is '&'; any other character reference
// could spell anything ("&#106;avascript:"), so the URL is refused. 1 with the URL in out.
static int attr_url(const char *v, size_t n, char *out, size_t max) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k + 1 >= max) return 0;
        if (v[i] == '&') {
            if (n - i < 5 || memcmp(v + i, "&amp;", 5) != 0) return 0;
            i += 4;
        }
        out[k++] = v[i];
    }
    out[k] = 0;
    return course_url_ok(out);
}

// The tag at s[0..n) (from '<' to its '>'): 1 if it is allowed; *drop_from and *drop_to mark
// an href or src attribute to leave out (its address refused), else both 0.
static int tag_ok(const char *s, size_t n, size_t *drop_from, size_t *drop_to) {
    *drop_from = *drop_to = 0;
    size_t i = 1 + (s[1] == '/');
    size_t name = i;
    while (i < n && (isalnum((unsigned char)s[i]) || s[i] == '-')) i++;
    if (i == name) return 0;
    const char *attrs = NULL;
    for (size_t t = 0; t < sizeof allowed / sizeof allowed[0] && !attrs; t++)
        if (strlen(allowed[t].tag) == i - name && strncasecmp(allowed[t].tag, s + name, i - name) == 0) attrs = allowed[t].attrs;
    if (!attrs) return 0;
    if (s[1] == '/') return s[i] == '>';  // a closing tag has nothing but its name
    for (;;) {
        size_t at = i;
        while (s[i] == ' ') i++;
        if (s[i] == '>') return 1;
        if (s[i] == '/' && s[i + 1] == '>') return 1;
        if (i == at) return 0;  // attributes are separated by a space
        size_t an = i;
        while (isalpha((unsigned char)s[i]) || s[i] == '-') i++;
        if (i == an || i - an > 20) return 0;
        char key[24];
        snprintf(key, sizeof key, " %.*s ", (int)(i - an), s + an);
        for (char *c = key; *c; c++) *c = (char)tolower((unsigned char)*c);
        if (!strstr(attrs, key)) return 0;
        if (s[i] != '=') continue;  // a boolean attribute
        if (s[i + 1] != '"') return 0;
        const char *v = s + i + 2, *q = memchr(v, '"', n - (size_t)(v - s));
        if (!q) return 0;
        i = (size_t)(q - s) + 1;
        char url[2048];
        if ((!strcmp(key, " href ") || !strcmp(key, " src ")) && !attr_url(v, (size_t)(q - v), url, sizeof url)) {
            if (*drop_to) return 0;  // (one to leave out is all a tag of ours has)
            *drop_from = an - 1, *drop_to = i;
        }
    }
}

void web_html_filter(StrBuf *out, const char *html, size_t n) {
    const char *p = html, *end = html + n;
    while (p < end) {
        const char *lt = memchr(p, '<', (size_t)(end - p));
        if (!lt) {
            sb_append(out, p, (size_t)(end - p));
            break;
        }
        sb_append(out, p, (size_t)(lt - p));
        const char *gt = memchr(lt, '>', (size_t)(end - lt));
        size_t from, to;
        if (gt && tag_ok(lt, (size_t)(gt - lt) + 1, &from, &to)) {
            sb_append(out, lt, to ? from : (size_t)(gt - lt) + 1);
            if (to) sb_append(out, lt + to, (size_t)(gt - lt) + 1 - to);
            p = gt + 1;
        } else {
            sb_append(out, "&lt;", 4);
            p = lt + 1;
        }
    }
}
