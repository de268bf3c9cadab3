// test_json.c — the JSON reader and string builder (labs/common/runfiles/json.c, labs/common/runfiles/strbuf.c).
//
// What it proves: every JSON type is read with the right value; escapes (including \uXXXX
// and surrogate pairs) decode to the right UTF-8; malformed input of every kind the labs
// can meet is refused with a message that says where (line and column) and never crashes
// (run under ASan/UBSan to make "never crashes" mean something); and sb_json_string writes
// strings the reader reads back byte for byte.
#include "common/runfiles/json.h"
#include "test.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Parse a NUL-terminated document (the common case in these tests).
static JsonValue *parse(const char *text, char *err, size_t errlen) {
    return json_parse(text, strlen(text), err, errlen);
}

// Expect text (len bytes) to be refused with a message that names a line and column and
// contains want. what says which rule the input breaks.
static void expect_reject_n(const char *text, size_t len, const char *want, const char *what) {
    char err[256] = "";
    JsonValue *v = json_parse(text, len, err, sizeof err);
    EXPECT(v == NULL, "%s: refused", what);
    EXPECT(strstr(err, "line ") && strstr(err, "column ") && strstr(err, want),
           "%s: message says where and why ('%s', wanted '%s')", what, err, want);
    json_free(v);
}

static void expect_reject(const char *text, const char *want, const char *what) {
    expect_reject_n(text, strlen(text), want, what);
}

static void test_scalars(void) {
    char err[256];
    JsonValue *v = parse(" null ", err, sizeof err);
    EXPECT(v && v->type == JSON_NULL, "null reads as JSON_NULL (surrounding spaces allowed)");
    json_free(v);
    v = parse("true", err, sizeof err);
    EXPECT(v && v->type == JSON_BOOL && v->boolean == 1, "true reads as boolean 1");
    json_free(v);
    v = parse("false", err, sizeof err);
    EXPECT(v && v->type == JSON_BOOL && v->boolean == 0, "false reads as boolean 0");
    json_free(v);

    // Numbers: each string must come back as exactly the double strtod would give.
    struct { const char *text; double want; } nums[] = {
        {"0", 0}, {"-0", -0.0}, {"42", 42}, {"-17", -17}, {"3.25", 3.25}, {"1e3", 1000},
        {"2E-2", 0.02}, {"-1.5e+2", -150}, {"9007199254740993", 9007199254740992.0},
        {"1e-400", 0}};
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        v = parse(nums[i].text, err, sizeof err);
        EXPECT(v && v->type == JSON_NUMBER && v->number == nums[i].want,
               "number %s reads as %.17g", nums[i].text, nums[i].want);
        json_free(v);
    }

    v = parse("\"hello\"", err, sizeof err);
    EXPECT(v && v->type == JSON_STRING && strcmp(v->string, "hello") == 0 && v->string_len == 5,
           "a plain string reads with its length");
    json_free(v);
    v = parse("\"\"", err, sizeof err);
    EXPECT(v && v->type == JSON_STRING && v->string && v->string[0] == 0 && v->string_len == 0,
           "the empty string is a real empty buffer, not NULL");
    json_free(v);
}

static void test_escapes(void) {
    char err[256];
    JsonValue *v = parse("\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\"", err, sizeof err);
    EXPECT(v && strcmp(v->string, "a\"b\\c/d\b\f\n\r\t") == 0, "the eight short escapes decode");
    json_free(v);
    v = parse("\"\\u0041\\u00e9\\u20AC\"", err, sizeof err);
    EXPECT(v && strcmp(v->string, "A\xC3\xA9\xE2\x82\xAC") == 0 && v->string_len == 6,
           "\\u escapes decode to 1-, 2- and 3-byte UTF-8 (A, e-acute, euro)");
    json_free(v);
    v = parse("\"\\uD83D\\uDE00\"", err, sizeof err);
    EXPECT(v && strcmp(v->string, "\xF0\x9F\x98\x80") == 0 && v->string_len == 4,
           "a surrogate pair joins into one 4-byte UTF-8 character (U+1F600)");
    json_free(v);
    // Each edge of the UTF-8 length classes: U+007F, U+0080, U+07FF, U+0800, U+FFFF, and
    // the last code point U+10FFFF (from the pair \uDBFF\uDFFF).
    v = parse("\"\\u007F\\u0080\\u07FF\\u0800\\uFFFF\\uDBFF\\uDFFF\"", err, sizeof err);
    EXPECT(v && v->string_len == 1 + 2 + 2 + 3 + 3 + 4 &&
               memcmp(v->string, "\x7F\xC2\x80\xDF\xBF\xE0\xA0\x80\xEF\xBF\xBF\xF4\x8F\xBF\xBF", 15) == 0,
           "code points at the UTF-8 length boundaries encode correctly, up to U+10FFFF");
    json_free(v);
    v = parse("\"caf\xC3\xA9 \xF0\x9F\x98\x80\"", err, sizeof err);
    EXPECT(v && strcmp(v->string, "caf\xC3\xA9 \xF0\x9F\x98\x80") == 0,
           "raw UTF-8 in a string passes through unchanged");
    json_free(v);
}

static void test_containers(void) {
    char err[256];
    const char *doc = "{\"ev\":\"step\",\"step\":3,\"loss\":2.31,\n"
                      " \"ms\":{\"step\":1.5,\"comm\":0.25},\"shape\":[64, [1,2], []],\n"
                      " \"ok\":true,\"none\":null,\"empty\":{}}";
    JsonValue *v = parse(doc, err, sizeof err);
    EXPECT(v && v->type == JSON_OBJECT && v->count == 8, "a run-log style object has 8 members (%s)",
           v ? "" : err);
    if (!v) return;
    EXPECT(strcmp(v->keys[0], "ev") == 0 && strcmp(v->keys[7], "empty") == 0,
           "keys are kept in document order");
    EXPECT(json_get(v, "step") && json_get(v, "step")->number == 3, "json_get finds a number member");
    EXPECT_NEAR(json_get(json_get(v, "ms"), "comm")->number, 0.25, 0, "json_get reaches into a nested object");
    const JsonValue *shape = json_get(v, "shape");
    EXPECT(shape && shape->type == JSON_ARRAY && shape->count == 3, "array has 3 elements");
    EXPECT(json_at(shape, 0)->number == 64, "json_at(0) is the first element");
    EXPECT(json_at(json_at(shape, 1), 1)->number == 2, "json_at reaches into a nested array");
    EXPECT(json_at(shape, 2)->type == JSON_ARRAY && json_at(shape, 2)->count == 0, "[] is an empty array");
    EXPECT(json_at(shape, 3) == NULL, "json_at past the end is NULL");
    EXPECT(json_get(v, "missing") == NULL, "json_get of an absent key is NULL");
    EXPECT(json_get(shape, "step") == NULL, "json_get on an array is NULL");
    EXPECT(json_at(v, 0) == NULL, "json_at on an object is NULL");
    EXPECT(json_get(NULL, "x") == NULL && json_at(NULL, 0) == NULL, "NULL values are safe to query");
    EXPECT(json_get(v, "empty")->type == JSON_OBJECT && json_get(v, "empty")->count == 0,
           "{} is an empty object");
    json_free(v);

    v = parse("{\"k\":1,\"k\":2}", err, sizeof err);
    EXPECT(v && json_get(v, "k")->number == 1, "with a duplicate key, json_get returns the first");
    json_free(v);

    // Exactly 64 levels are allowed, 65 are not.
    char deep[200];
    memset(deep, '[', 64);
    memset(deep + 64, ']', 64);
    v = json_parse(deep, 128, err, sizeof err);
    EXPECT(v != NULL, "64 nested arrays are accepted (the documented limit)");
    json_free(v);
    memset(deep, '[', 65);
    memset(deep + 65, ']', 65);
    expect_reject_n(deep, 130, "nesting deeper than 64", "65 nested arrays");
    // A deep unclosed document must be refused by the limit, not by blowing the stack.
    static char very_deep[100000];
    memset(very_deep, '[', sizeof very_deep);
    expect_reject_n(very_deep, sizeof very_deep, "nesting deeper", "100000 unclosed '['");

    EXPECT(strcmp(json_type_name(JSON_OBJECT), "object") == 0 &&
           strcmp(json_type_name(JSON_NUMBER), "number") == 0, "json_type_name names the types");
}

static void test_rejects(void) {
    expect_reject("", "empty", "empty input");
    expect_reject("  \n ", "empty", "white space only");
    expect_reject("{\"a\":1", "expected ',' or '}'", "object cut off after a value");
    expect_reject("{\"a\":", "end of input", "object cut off after ':'");
    expect_reject("[1,2", "expected ',' or ']'", "array cut off");
    expect_reject("\"abc", "never closed", "string cut off");
    expect_reject("\"ab\\u12", "\\u", "\\u escape cut off");
    expect_reject("tru", "expected 'true'", "literal cut off");
    expect_reject("[1,2,]", "trailing comma", "trailing comma in an array");
    expect_reject("{\"a\":1,}", "trailing comma", "trailing comma in an object");
    expect_reject("\"a\\x\"", "invalid escape '\\x'", "unknown escape \\x");
    expect_reject("\"a\\'\"", "invalid escape", "\\' is not a JSON escape");
    expect_reject("\"a\tb\"", "control character 0x09", "raw tab inside a string");
    expect_reject("\"a\nb\"", "control character 0x0a", "raw newline inside a string");
    expect_reject("\"\\uD83D\"", "lone high surrogate", "high surrogate alone");
    expect_reject("\"\\uD83Dx\"", "lone high surrogate", "high surrogate followed by a letter");
    expect_reject("\"\\uD83D\\u0041\"", "not by a low surrogate", "high surrogate then \\u0041");
    expect_reject("\"\\uDE00\"", "lone low surrogate", "low surrogate alone");
    expect_reject("\"\\u0000\"", "\\u0000", "\\u0000 (strings are NUL-terminated)");
    expect_reject("\"\xC3\"", "invalid UTF-8", "truncated UTF-8 sequence");
    expect_reject("\"\xC0\xAF\"", "invalid UTF-8", "overlong UTF-8 encoding");
    expect_reject("\"\xED\xA0\x80\"", "invalid UTF-8", "UTF-8 encoded surrogate");
    expect_reject("{} x", "after the JSON value", "garbage after the value");
    expect_reject("1 2", "after the JSON value", "two values");
    expect_reject("01", "leading zeros", "leading zero");
    expect_reject("-01", "leading zeros", "negative with leading zero");
    expect_reject("1.", "digit after '.'", "no digits after the point");
    expect_reject(".5", "expected a value", "no digits before the point");
    expect_reject("1e", "exponent", "empty exponent");
    expect_reject("-", "digit after '-'", "lone minus");
    expect_reject("+1", "expected a value", "leading plus");
    expect_reject("1e999", "too large", "number overflowing a double");
    expect_reject("NaN", "expected a value", "NaN is not JSON");
    expect_reject("{a:1}", "expected a string key", "unquoted key");
    expect_reject("{\"a\" 1}", "expected ':'", "missing colon");
    expect_reject("[1 2]", "expected ',' or ']'", "missing comma");
    expect_reject("// c\n1", "expected a value", "comments are not JSON");
    expect_reject_n("[1,\0 2]", 7, "byte 0x00", "NUL byte between values");
    expect_reject_n("\"a\0b\"", 5, "control character 0x00", "NUL byte inside a string");
    expect_reject_n("{}\0", 3, "after the JSON value", "NUL byte after the value");

    // The position is right, not just present: the bad comma is on line 3, column 5.
    char err[256];
    JsonValue *v = parse("{\n \"a\": 1,\n \"b\",\n}", err, sizeof err);
    EXPECT(v == NULL && strncmp(err, "line 3, column 5:", 17) == 0,
           "error position is line 3, column 5 (the ',' after \"b\"): '%s'", err);
    json_free(v);
    // A tiny or absent err buffer must not be overrun.
    v = parse("[1,", err, 8);
    EXPECT(v == NULL && strlen(err) == 7, "a short err buffer is truncated, not overrun");
    v = parse("[1,", NULL, 0);
    EXPECT(v == NULL, "err may be NULL");
}

// sb_json_string must write what json_parse reads back to the same bytes; sb_markup_text
// writes text HTML and XML read as it was.
static void test_string_builder(void) {
    StrBuf sb;
    char err[256];
    sb_init(&sb);
    const char *samples[] = {"plain", "", "quote \" and backslash \\", "tab\tnewline\nreturn\r",
                             "ctrl \x01\x02\x1f\x7f and bell \a", "slash / stays",
                             "utf-8 caf\xC3\xA9 \xF0\x9F\x98\x80", "h.0.ln_1.weight"};
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        sb_reset(&sb);
        sb_json_string(&sb, samples[i]);
        JsonValue *v = json_parse(sb.data, sb.len, err, sizeof err);
        EXPECT(v && v->type == JSON_STRING && strcmp(v->string, samples[i]) == 0 &&
                   v->string_len == strlen(samples[i]),
               "sb_json_string round-trips sample %zu (written as %s)", i, sb.data);
        json_free(v);
    }
    sb_reset(&sb);
    sb_json_string(&sb, "a\"b\x01");
    EXPECT(strcmp(sb.data, "\"a\\\"b\\u0001\"") == 0, "escapes are the short forms and \\u00XX");
    // Bytes that are not UTF-8 (a stray 0xFF, a cut sequence, an encoded surrogate) are written
    // as \u00XX each, so the text parses; valid sequences around them pass as they are.
    sb_reset(&sb);
    sb_json_string(&sb, "a\xFF caf\xC3\xA9 \xC3 \xED\xA0\x80");
    JsonValue *bad = json_parse(sb.data, sb.len, err, sizeof err);
    EXPECT(strcmp(sb.data, "\"a\\u00ff caf\xC3\xA9 \\u00c3 \\u00ed\\u00a0\\u0080\"") == 0 && bad && bad->type == JSON_STRING,
           "sb_json_string writes bytes that are not UTF-8 as \\u00XX, and the text parses: %s", sb.data);
    json_free(bad);

    sb_reset(&sb);
    sb_markup_text(&sb, "<a href=\"x\">it's R&D</a>\x01\ttab\nline caf\xC3\xA9");
    EXPECT(strcmp(sb.data, "&lt;a href=&quot;x&quot;&gt;it&#39;s R&amp;D&lt;/a&gt; \ttab\nline caf\xC3\xA9") == 0,
           "sb_markup_text escapes < > & \" ' for HTML and XML, and writes a control character (not tab or newline) "
           "as a space: %s", sb.data);

    sb_reset(&sb);
    sb_printf(&sb, "{\"step\":%d,", 7);
    sb_append(&sb, "\"name\":", 7);
    sb_json_string(&sb, "x");
    sb_printf(&sb, "}");
    EXPECT(strcmp(sb.data, "{\"step\":7,\"name\":\"x\"}") == 0 && sb.len == strlen(sb.data),
           "sb_printf, sb_append and sb_json_string build a line together");
    sb_reset(&sb);
    for (int i = 0; i < 10000; i++) sb_printf(&sb, "%d,", i % 10);
    EXPECT(sb.len == 20000 && sb.data[19998] == '9', "StrBuf grows across many appends");
    sb_free(&sb);
    EXPECT(sb.data == NULL && sb.len == 0, "sb_free leaves an empty buffer");
}

// Non-finite numbers: printf's nan and inf rewritten as the strings the schema uses, read
// back by json_number(); text inside strings, and finite numbers, untouched.
static void test_nonfinite(void) {
    StrBuf sb;
    char err[256], line[256];
    sb_init(&sb);
    snprintf(line, sizeof line, "{\"loss\":%.9g,\"g\":%.6g,\"up\":%g,\"down\":%g,\"s\":\"nan inf \\\"nan\\\"\",\"big\":%g,"
             "\"n\":null,\"t\":true,\"a\":[%f,1,%G]}", NAN, -NAN, INFINITY, -INFINITY, 1e300, NAN, INFINITY);
    sb_append(&sb, line, strlen(line));
    JsonValue *raw = json_parse(sb.data, sb.len, err, sizeof err);
    EXPECT(raw == NULL, "printf's non-finite numbers are not JSON: %s", line);
    json_free(raw);
    int n = sb_json_quote_nonfinite(&sb);
    JsonValue *v = json_parse(sb.data, sb.len, err, sizeof err);
    // Each of the six bare tokens became a string; the rest of the line is as it was.
    EXPECT(n == 6 && v, "sb_json_quote_nonfinite rewrites the 6 non-finite values into JSON (%d: %s %s)", n, sb.data,
           v ? "" : err);
    double x[8] = {0};
    int read = v && json_number(json_get(v, "loss"), &x[0]) && json_number(json_get(v, "g"), &x[1]) &&
               json_number(json_get(v, "up"), &x[2]) && json_number(json_get(v, "down"), &x[3]) &&
               json_number(json_get(v, "big"), &x[4]) && json_number(json_at(json_get(v, "a"), 0), &x[5]) &&
               json_number(json_at(json_get(v, "a"), 2), &x[6]);
    EXPECT(read && isnan(x[0]) && isnan(x[1]) && x[2] == INFINITY && x[3] == -INFINITY && x[4] == 1e300 && isnan(x[5]) &&
               x[6] == INFINITY,
           "json_number reads them back: NaN, NaN, Infinity, -Infinity, and 1e300 and a finite number as numbers");
    const JsonValue *s = json_get(v, "s");
    EXPECT(s && s->type == JSON_STRING && !strcmp(s->string, "nan inf \"nan\""), "text inside strings is untouched");
    double y = 42;
    EXPECT(!json_number(json_get(v, "n"), &y) && !json_number(json_get(v, "t"), &y) && !json_number(s, &y) && y == 42,
           "json_number refuses null, true and other strings, leaving the value as it was");
    json_free(v);
    sb_reset(&sb);
    const char *plain = "{\"note\":\"information\",\"x\":1}";
    sb_append(&sb, plain, strlen(plain));
    EXPECT(sb_json_quote_nonfinite(&sb) == 0 && !strcmp(sb.data, plain),
           "a line with no non-finite number is left byte for byte (%s)", sb.data);
    sb_reset(&sb);
    sb_json_number(&sb, NAN), sb_append(&sb, ",", 1), sb_json_number(&sb, -INFINITY), sb_append(&sb, ",", 1);
    sb_json_number(&sb, 0.1);
    EXPECT(!strcmp(sb.data, "\"NaN\",\"-Infinity\",0.1"), "sb_json_number writes NaN, -Infinity and 0.1 (%s)", sb.data);
    sb_free(&sb);
}

// sb_read_file: a file's bytes appended, at most max of them, and what it says when it stops.
static void test_read_file(void) {
    char path[] = "/tmp/shardlab-test-json-XXXXXX";
    int fd = mkstemp(path);
    const char text[] = "0123456789abcdefghij";  // 20 bytes
    int wrote = fd >= 0 && write(fd, text, 20) == 20;
    if (fd >= 0) close(fd);
    StrBuf sb;
    sb_init(&sb);
    sb_append(&sb, ">", 1);
    int rc = sb_read_file(&sb, path, 100);
    EXPECT(wrote && rc == 0 && sb.len == 21 && strcmp(sb.data, ">0123456789abcdefghij") == 0,
           "sb_read_file appends the whole file (rc %d, '%s')", rc, sb.data);
    sb_reset(&sb);
    rc = sb_read_file(&sb, path, 8);
    EXPECT(rc == 1 && sb.len == 8 && strcmp(sb.data, "01234567") == 0,
           "sb_read_file stops at max bytes and says there was more (rc %d, '%s')", rc, sb.data);
    sb_reset(&sb);
    rc = sb_read_file(&sb, path, 20);
    EXPECT(rc == 0 && sb.len == 20, "sb_read_file at exactly max bytes: all of it, nothing more (rc %d)", rc);
    unlink(path);
    EXPECT(sb_read_file(&sb, path, 100) == -1, "sb_read_file on a missing file: -1");
    sb_free(&sb);
}

int main(void) {
    test_read_file();
    test_scalars();
    test_escapes();
    test_containers();
    test_rejects();
    test_string_builder();
    test_nonfinite();
    return test_done();
}
