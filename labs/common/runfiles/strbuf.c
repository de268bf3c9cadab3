// strbuf.c — see json.h: StrBuf, the growable string the run log writes with, and what is
// written into one: JSON strings and numbers (the non-finite ones as the strings "NaN",
// "Infinity", "-Infinity"), and HTML or XML text.
#include "json.h"

#include "common/harness/check.h"

#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

// ---------------------------------------------------------------------------------------
// StrBuf: data is NULL until the first append; after that it is always NUL-terminated.

void sb_init(StrBuf *sb) {
    sb->data = NULL;
    sb->len = sb->cap = 0;
}

void sb_free(StrBuf *sb) {
    free(sb->data);
    sb_init(sb);
}

void sb_reset(StrBuf *sb) {
    sb->len = 0;
    if (sb->data) sb->data[0] = '\0';
}

// Make room for extra more bytes plus the terminating NUL. Doubling keeps appends of
// one byte at a time linear overall.
static void sb_reserve(StrBuf *sb, size_t extra) {
    if (extra > SIZE_MAX - sb->len - 1) die(NULL, "StrBuf: string length overflows size_t");
    size_t need = sb->len + extra + 1;
    if (need <= sb->cap) return;
    size_t cap = sb->cap ? sb->cap : 64;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *d = realloc(sb->data, cap);
    if (!d) die("lower --batch, --seq or --dim", "out of memory growing a string to %zu bytes", cap);
    sb->data = d;
    sb->cap = cap;
}

void sb_append(StrBuf *sb, const char *s, size_t n) {
    sb_reserve(sb, n);
    if (n) memcpy(sb->data + sb->len, s, n);
    sb->len += n;
    sb->data[sb->len] = '\0';
}

void sb_printf(StrBuf *sb, const char *fmt, ...) {
    // Try to format into the space already there; if it does not fit, vsnprintf has told
    // us the length, so grow once and format again.
    va_list ap, again;
    va_start(ap, fmt);
    va_copy(again, ap);
    sb_reserve(sb, 0);
    size_t room = sb->cap - sb->len;
    int n = vsnprintf(sb->data + sb->len, room, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n >= room) {
        sb_reserve(sb, (size_t)n);
        n = vsnprintf(sb->data + sb->len, (size_t)n + 1, fmt, again);
    }
    va_end(again);
    if (n < 0) die(NULL, "sb_printf: cannot format \"%s\"", fmt);
    sb->len += (size_t)n;
}

void sb_markup_text(StrBuf *sb, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<': sb_append(sb, "&lt;", 4); break;
        case '>': sb_append(sb, "&gt;", 4); break;
        case '&': sb_append(sb, "&amp;", 5); break;
        case '"': sb_append(sb, "&quot;", 6); break;
        case '\'': sb_append(sb, "&#39;", 5); break;
        default: sb_append(sb, (unsigned char)*s < 0x20 && *s != '\n' && *s != '\t' ? " " : s, 1);
        }
    }
}

void sb_json_string(StrBuf *sb, const char *s) {
    sb_append(sb, "\"", 1);
    const char *run = s;  // bytes that need no escape are copied in one go
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        size_t n = c < 0x80 ? 1 : json_utf8_length((const unsigned char *)s, 4);  // (stops at the NUL)
        if (n > 1) {
            s += n - 1;
            continue;
        }
        if (c != '"' && c != '\\' && c >= 0x20 && c < 0x80) continue;
        sb_append(sb, run, (size_t)(s - run));
        run = s + 1;
        switch (c) {
        case '"': sb_append(sb, "\\\"", 2); break;
        case '\\': sb_append(sb, "\\\\", 2); break;
        case '\n': sb_append(sb, "\\n", 2); break;
        case '\r': sb_append(sb, "\\r", 2); break;
        case '\t': sb_append(sb, "\\t", 2); break;
        case '\b': sb_append(sb, "\\b", 2); break;
        case '\f': sb_append(sb, "\\f", 2); break;
        default: sb_printf(sb, "\\u%04x", c); break;
        }
    }
    sb_append(sb, run, (size_t)(s - run));
    sb_append(sb, "\"", 1);
}

// The length of a printf-style non-finite token at s (without its sign), and which it is.
static size_t nonfinite_token(const char *s, int *is_nan) {
    static const char *const words[] = {"infinity", "inf", "nan"};
    for (int i = 0; i < 3; i++) {
        size_t n = strlen(words[i]);
        if (strncasecmp(s, words[i], n) == 0 && !isalnum((unsigned char)s[n]) && s[n] != '_') {
            *is_nan = i == 2;
            return n;
        }
    }
    return 0;
}

int sb_json_quote_nonfinite(StrBuf *sb) {
    if (!sb->data) return 0;
    StrBuf out;
    sb_init(&out);
    int in_string = 0, escaped = 0, rewritten = 0;
    const char *s = sb->data, *copied = s;
    for (; *s; s++) {
        if (in_string) {
            if (escaped) escaped = 0;
            else if (*s == '\\') escaped = 1;
            else if (*s == '"') in_string = 0;
            continue;
        }
        if (*s == '"') {
            in_string = 1;
            continue;
        }
        // Outside strings a letter can only start true, false, null or a non-finite token (i or
        // n, any case): most characters are done with at the first test (every event line
        // passes through here).
        int negative = *s == '-', is_nan = 0, c = (unsigned char)s[negative] | 0x20;
        if (c != 'i' && c != 'n') continue;
        size_t n = nonfinite_token(s + negative, &is_nan);
        if (!n || (s > sb->data && (isalnum((unsigned char)s[-1]) || s[-1] == '.'))) continue;
        sb_append(&out, copied, (size_t)(s - copied));
        const char *word = is_nan ? "\"NaN\"" : negative ? "\"-Infinity\"" : "\"Infinity\"";
        sb_append(&out, word, strlen(word));
        s += negative + n - 1;
        copied = s + 1;
        rewritten++;
    }
    if (rewritten) {
        sb_append(&out, copied, (size_t)(s - copied));
        sb_reset(sb);
        sb_append(sb, out.data, out.len);
    }
    sb_free(&out);
    return rewritten;
}

void sb_json_number(StrBuf *sb, double x) {
    if (isnan(x)) sb_append(sb, "\"NaN\"", 5);
    else if (isinf(x)) sb_printf(sb, "\"%sInfinity\"", x < 0 ? "-" : "");
    else sb_printf(sb, "%.9g", x);
}
