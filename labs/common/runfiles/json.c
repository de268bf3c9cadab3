// json.c — see json.h.
//
// A recursive-descent reader: one function per JSON production (value, object, array,
// string, number, literal), each reading from a cursor over text[0..len). The text need
// not be NUL-terminated, so every read checks the cursor against len first.
//
// Error handling: the first failure writes "line L, column C: what" into err and every
// function returns -1 up the call chain. Values are built in place and always left in a
// state json_free() can release (a container's count only covers items that exist), so a
// failure halfway through a document frees whatever was built so far.
//
// Lines and columns are 1-based; columns count bytes, not characters, which is what a
// reader needs to find the spot with a hex dump or an editor's byte-column display.
//
// The string builder and the writing side (JSON and markup escaping, non-finite numbers) are
// in strbuf.c; opening only regular files, and reading one into a StrBuf, in file.c.
#include "json.h"

#include "common/harness/check.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// Deeper nesting is refused, so a hostile input cannot overflow the C stack through the
// recursion. 64 is far more than any run log, meta.json or safetensors header needs.
#define JSON_MAX_DEPTH 64

typedef struct {
    const unsigned char *text;
    size_t len;
    size_t pos;  // the next byte to read
    char *err;
    size_t errlen;
} JsonParser;

// ---------------------------------------------------------------------------------------
// Errors

// Record "line L, column C: <message>" for byte position at, then return -1 so callers can
// write `return json_error(...)`.
__attribute__((format(printf, 3, 4))) static int json_error(JsonParser *p, size_t at,
                                                             const char *fmt, ...) {
    if (!p->err || p->errlen == 0) return -1;
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < at && i < p->len; i++) {
        if (p->text[i] == '\n') {
            line++;
            line_start = i + 1;
        }
    }
    int n = snprintf(p->err, p->errlen, "line %zu, column %zu: ", line, at - line_start + 1);
    if (n >= 0 && (size_t)n < p->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(p->err + n, p->errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -1;
}

// A printable description of the byte at p->pos for messages: 'x', or 0x00 for bytes a
// terminal would not show, or "end of input".
static const char *json_describe_byte(const JsonParser *p, char *buf, size_t buflen) {
    if (p->pos >= p->len) return "end of input";
    unsigned char c = p->text[p->pos];
    if (c > 0x20 && c < 0x7f) snprintf(buf, buflen, "character '%c'", c);
    else snprintf(buf, buflen, "byte 0x%02x", c);
    return buf;
}

// ---------------------------------------------------------------------------------------
// Small helpers

static void json_skip_space(JsonParser *p) {
    // RFC 8259 white space is exactly these four bytes.
    while (p->pos < p->len) {
        unsigned char c = p->text[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static int json_peek(const JsonParser *p) { return p->pos < p->len ? p->text[p->pos] : -1; }

static int json_is_digit(int c) { return c >= '0' && c <= '9'; }

static void *json_realloc(void *ptr, size_t count, size_t size) {
    if (size && count > SIZE_MAX / size) die(NULL, "JSON document too large (%zu items)", count);
    size_t bytes = count * size;
    void *q = realloc(ptr, bytes ? bytes : 1);
    if (!q) die("the JSON document is too big for memory", "out of memory growing a JSON value");
    return q;
}

// See json.h: overlong forms, UTF-16 surrogates (U+D800..DFFF) and code points above
// U+10FFFF are all refused, as RFC 3629 requires.
size_t json_utf8_length(const unsigned char *s, size_t avail) {
    unsigned char c = s[0];
    size_t n;
    unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) n = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        if (c == 0xE0) lo = 0xA0;  // below that would be an overlong 2-byte form
        if (c == 0xED) hi = 0x9F;  // above that would encode a surrogate
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        if (c == 0xF0) lo = 0x90;  // overlong
        if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else return 0;
    if (avail < n) return 0;
    if (s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < n; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return n;
}

// Append code point cp (not a surrogate, at most U+10FFFF) as UTF-8. The first byte says
// how many follow (0xxxxxxx, 110xxxxx, 1110xxxx, 11110xxx); each continuation byte is
// 10xxxxxx and carries 6 more bits, least significant last.
static void json_append_utf8(StrBuf *sb, uint32_t cp) {
    static const unsigned char lead[5] = {0, 0x00, 0xC0, 0xE0, 0xF0};
    size_t n = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    char b[4];
    for (size_t i = n - 1; i > 0; i--) {
        b[i] = (char)(0x80 | (cp & 0x3F));
        cp >>= 6;
    }
    b[0] = (char)(lead[n] | cp);
    sb_append(sb, b, n);
}

// Read the 4 hex digits after "\u" (p->pos is on the 'u').
static int json_read_hex4(JsonParser *p, uint32_t *out) {
    size_t at = p->pos - 1;  // the backslash, where the reader should look
    uint32_t v = 0;
    for (int i = 1; i <= 4; i++) {
        if (p->pos + (size_t)i >= p->len)
            return json_error(p, at, "unexpected end of input in \\u escape");
        unsigned char c = p->text[p->pos + (size_t)i];
        uint32_t d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return json_error(p, at, "\\u must be followed by 4 hex digits");
        v = v * 16 + d;
    }
    p->pos += 5;  // the 'u' and the 4 digits
    *out = v;
    return 0;
}

// ---------------------------------------------------------------------------------------
// Productions

static int json_parse_value(JsonParser *p, JsonValue *out, int depth);

// p->pos is on the backslash. Decodes one escape (two for a surrogate pair) into sb.
static int json_parse_escape(JsonParser *p, StrBuf *sb) {
    size_t at = p->pos;
    p->pos++;
    if (p->pos >= p->len) return json_error(p, at, "unexpected end of input after '\\'");
    unsigned char e = p->text[p->pos];
    const char *simple = NULL;
    switch (e) {
    case '"': simple = "\""; break;
    case '\\': simple = "\\"; break;
    case '/': simple = "/"; break;
    case 'b': simple = "\b"; break;
    case 'f': simple = "\f"; break;
    case 'n': simple = "\n"; break;
    case 'r': simple = "\r"; break;
    case 't': simple = "\t"; break;
    case 'u': break;
    default:
        if (e > 0x20 && e < 0x7f) return json_error(p, at, "invalid escape '\\%c'", e);
        return json_error(p, at, "invalid escape: '\\' followed by byte 0x%02x", e);
    }
    if (simple) {
        sb_append(sb, simple, 1);
        p->pos++;
        return 0;
    }
    uint32_t cp;
    if (json_read_hex4(p, &cp) != 0) return -1;
    if (cp >= 0xDC00 && cp <= 0xDFFF)
        return json_error(p, at, "lone low surrogate \\u%04X (it must follow a high surrogate)",
                          (unsigned)cp);
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        // Characters beyond U+FFFF arrive as a UTF-16 pair: high \uD800-DBFF, then low
        // \uDC00-DFFF. Join them; either half alone is not a character.
        uint32_t low = 0;
        if (p->pos + 1 >= p->len || p->text[p->pos] != '\\' || p->text[p->pos + 1] != 'u')
            return json_error(p, at, "lone high surrogate \\u%04X (it must be followed by a "
                              "low surrogate \\uDC00-\\uDFFF)", (unsigned)cp);
        p->pos++;  // onto the 'u'
        if (json_read_hex4(p, &low) != 0) return -1;
        if (low < 0xDC00 || low > 0xDFFF)
            return json_error(p, at, "high surrogate \\u%04X followed by \\u%04X, not by a "
                              "low surrogate \\uDC00-\\uDFFF", (unsigned)cp, (unsigned)low);
        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
    }
    if (cp == 0)
        return json_error(p, at, "\\u0000 is not supported (strings here are NUL-terminated)");
    json_append_utf8(sb, cp);
    return 0;
}

// p->pos is on the opening quote. On success *out is a malloc'd NUL-terminated string.
static int json_parse_string_raw(JsonParser *p, char **out, size_t *out_len) {
    size_t open = p->pos;
    StrBuf sb;
    sb_init(&sb);
    p->pos++;
    size_t run = p->pos;  // start of the bytes to copy as they are
    for (;;) {
        if (p->pos >= p->len) {
            json_error(p, open, "string is never closed (input ends inside it)");
            goto fail;
        }
        unsigned char c = p->text[p->pos];
        if (c == '"' || c == '\\') {
            sb_append(&sb, (const char *)p->text + run, p->pos - run);
            if (c == '"') break;
            if (json_parse_escape(p, &sb) != 0) goto fail;
            run = p->pos;
        } else if (c < 0x20) {
            // Raw control characters (NUL, newline, tab, ...) must be escaped in JSON; a raw
            // newline usually means a missing closing quote.
            json_error(p, p->pos, "control character 0x%02x inside a string (escape it, "
                       "e.g. \\n, or close the string)", c);
            goto fail;
        } else {
            size_t n = json_utf8_length(p->text + p->pos, p->len - p->pos);
            if (n == 0) {
                json_error(p, p->pos, "invalid UTF-8 byte 0x%02x in string", c);
                goto fail;
            }
            p->pos += n;
        }
    }
    p->pos++;                               // the closing quote
    if (!sb.data) sb_append(&sb, "", 0);    // an empty string still gets a buffer
    *out = sb.data;
    *out_len = sb.len;
    return 0;
fail:
    sb_free(&sb);
    return -1;
}

static int json_parse_number(JsonParser *p, JsonValue *out) {
    // Check the RFC grammar first: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
    // strtod alone would also take "+1", "0x1F", ".5", "inf" and "1.".
    size_t start = p->pos;
    if (json_peek(p) == '-') p->pos++;
    if (!json_is_digit(json_peek(p))) return json_error(p, p->pos, "expected a digit after '-'");
    if (json_peek(p) == '0') {
        p->pos++;
        if (json_is_digit(json_peek(p)))
            return json_error(p, start, "leading zeros are not allowed in numbers");
    } else {
        while (json_is_digit(json_peek(p))) p->pos++;
    }
    if (json_peek(p) == '.') {
        p->pos++;
        if (!json_is_digit(json_peek(p))) return json_error(p, p->pos, "expected a digit after '.'");
        while (json_is_digit(json_peek(p))) p->pos++;
    }
    if (json_peek(p) == 'e' || json_peek(p) == 'E') {
        p->pos++;
        if (json_peek(p) == '+' || json_peek(p) == '-') p->pos++;
        if (!json_is_digit(json_peek(p)))
            return json_error(p, p->pos, "expected a digit in the exponent");
        while (json_is_digit(json_peek(p))) p->pos++;
    }
    // strtod needs a NUL-terminated copy; the text itself may go on past the number.
    // (It reads '.' as the decimal point only in the "C" locale, which is the default.)
    size_t n = p->pos - start;
    char small[64];
    char *copy = n < sizeof small ? small : malloc_check(n + 1);
    memcpy(copy, p->text + start, n);
    copy[n] = '\0';
    double x = strtod(copy, NULL);
    if (copy != small) free(copy);
    if (isinf(x)) return json_error(p, start, "number is too large for a double");
    out->type = JSON_NUMBER;
    out->number = x;
    return 0;
}

static int json_parse_literal(JsonParser *p, JsonValue *out) {
    static const struct { const char *word; JsonType type; int boolean; } lits[] = {
        {"true", JSON_BOOL, 1}, {"false", JSON_BOOL, 0}, {"null", JSON_NULL, 0}};
    for (size_t i = 0; i < sizeof lits / sizeof lits[0]; i++) {
        size_t n = strlen(lits[i].word);
        if (p->text[p->pos] != (unsigned char)lits[i].word[0]) continue;
        if (p->len - p->pos < n || memcmp(p->text + p->pos, lits[i].word, n) != 0)
            return json_error(p, p->pos, "invalid literal (expected '%s')", lits[i].word);
        out->type = lits[i].type;
        out->boolean = lits[i].boolean;
        p->pos += n;
        return 0;
    }
    char buf[32];
    return json_error(p, p->pos, "unexpected %s, expected a value",
                      json_describe_byte(p, buf, sizeof buf));
}

// Arrays and objects share one loop; is_object adds the "key": part before each value.
static int json_parse_container(JsonParser *p, JsonValue *out, int depth, int is_object) {
    const char close = is_object ? '}' : ']';
    char buf[32];
    if (depth > JSON_MAX_DEPTH)
        return json_error(p, p->pos, "nesting deeper than %d levels", JSON_MAX_DEPTH);
    out->type = is_object ? JSON_OBJECT : JSON_ARRAY;
    p->pos++;  // the opening bracket
    json_skip_space(p);
    if (json_peek(p) == close) {
        p->pos++;
        return 0;
    }
    size_t cap = 0;
    for (;;) {
        char *key = NULL;
        size_t key_len;
        if (is_object) {
            if (json_peek(p) != '"')
                return json_error(p, p->pos, "unexpected %s, expected a string key",
                                  json_describe_byte(p, buf, sizeof buf));
            if (json_parse_string_raw(p, &key, &key_len) != 0) return -1;
            json_skip_space(p);
            if (json_peek(p) != ':') {
                free(key);
                return json_error(p, p->pos, "unexpected %s, expected ':' after the key",
                                  json_describe_byte(p, buf, sizeof buf));
            }
            p->pos++;
        }
        if (out->count == cap) {
            cap = cap ? 2 * cap : 4;
            out->items = json_realloc(out->items, cap, sizeof *out->items);
            if (is_object) out->keys = json_realloc(out->keys, cap, sizeof *out->keys);
        }
        // Count the item before parsing it, so a failure inside it still frees it.
        JsonValue *item = &out->items[out->count];
        memset(item, 0, sizeof *item);
        if (is_object) out->keys[out->count] = key;
        out->count++;
        if (json_parse_value(p, item, depth) != 0) return -1;

        json_skip_space(p);
        int c = json_peek(p);
        if (c == close) {
            p->pos++;
            return 0;
        }
        if (c != ',')
            return json_error(p, p->pos, "unexpected %s, expected ',' or '%c'",
                              json_describe_byte(p, buf, sizeof buf), close);
        p->pos++;
        json_skip_space(p);
        if (json_peek(p) == close)
            return json_error(p, p->pos, "trailing comma before '%c'", close);
    }
}

// depth: how many containers enclose the value being read.
static int json_parse_value(JsonParser *p, JsonValue *out, int depth) {
    json_skip_space(p);
    if (p->pos >= p->len) return json_error(p, p->pos, "unexpected end of input, expected a value");
    int c = p->text[p->pos];
    if (c == '{') return json_parse_container(p, out, depth + 1, 1);
    if (c == '[') return json_parse_container(p, out, depth + 1, 0);
    if (c == '"') {
        out->type = JSON_STRING;
        return json_parse_string_raw(p, &out->string, &out->string_len);
    }
    if (c == '-' || json_is_digit(c)) return json_parse_number(p, out);
    return json_parse_literal(p, out);
}

// ---------------------------------------------------------------------------------------
// Public reader API

JsonValue *json_parse(const char *text, size_t len, char *err, size_t errlen) {
    JsonParser p = {(const unsigned char *)text, len, 0, err, errlen};
    if (err && errlen) err[0] = '\0';
    if (!text) p.len = 0;
    json_skip_space(&p);
    if (p.pos >= p.len) {
        json_error(&p, p.pos, "empty input, expected a JSON value");
        return NULL;
    }
    JsonValue *root = calloc_check(1, sizeof *root);
    if (json_parse_value(&p, root, 0) != 0) {
        json_free(root);
        return NULL;
    }
    json_skip_space(&p);
    if (p.pos < p.len) {
        char buf[32];
        json_error(&p, p.pos, "unexpected %s after the JSON value",
                   json_describe_byte(&p, buf, sizeof buf));
        json_free(root);
        return NULL;
    }
    return root;
}

static void json_free_contents(JsonValue *v) {
    free(v->string);
    for (size_t i = 0; i < v->count; i++) {
        json_free_contents(&v->items[i]);
        if (v->keys) free(v->keys[i]);
    }
    free(v->items);
    free(v->keys);
}

void json_free(JsonValue *v) {
    if (!v) return;
    json_free_contents(v);
    free(v);
}

const JsonValue *json_get(const JsonValue *v, const char *key) {
    if (!v || v->type != JSON_OBJECT || !key) return NULL;
    for (size_t i = 0; i < v->count; i++)
        if (strcmp(v->keys[i], key) == 0) return &v->items[i];
    return NULL;
}

const JsonValue *json_at(const JsonValue *v, size_t i) {
    if (!v || v->type != JSON_ARRAY || i >= v->count) return NULL;
    return &v->items[i];
}

const char *json_type_name(JsonType t) {
    switch (t) {
    case JSON_NULL: return "null";
    case JSON_BOOL: return "boolean";
    case JSON_NUMBER: return "number";
    case JSON_STRING: return "string";
    case JSON_ARRAY: return "array";
    case JSON_OBJECT: return "object";
    }
    return "unknown";
}

int json_number(const JsonValue *v, double *out) {
    if (v && v->type == JSON_NUMBER) return *out = v->number, 1;
    if (!v || v->type != JSON_STRING) return 0;
    if (!strcmp(v->string, "NaN")) return *out = NAN, 1;
    if (!strcmp(v->string, "Infinity")) return *out = INFINITY, 1;
    if (!strcmp(v->string, "-Infinity")) return *out = -INFINITY, 1;
    return 0;
}
