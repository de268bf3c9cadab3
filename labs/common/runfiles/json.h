// json.h — a small JSON reader and the string builder the run log writes with.
//
// The reader is for run logs (one object per line), meta.json and safetensors headers:
// strict RFC 8259 (no comments, no trailing commas), UTF-8 passed through, \uXXXX escapes
// decoded to UTF-8 (surrogate pairs joined), nesting limited to 64 levels. It never crashes
// on bad input: it returns NULL and says where and why in err (lines and columns are
// 1-based, columns count bytes). Also refused: invalid UTF-8, \u0000 (strings are
// NUL-terminated), numbers too large for a double. Numbers are doubles, so integers above
// 2^53 are rounded. Duplicate object keys are kept; json_get returns the first.
// Running out of memory is not a parse error: it exits through die() (check.h).
#ifndef SHARDLAB_JSON_H
#define SHARDLAB_JSON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT } JsonType;

typedef struct JsonValue JsonValue;
struct JsonValue {
    JsonType type;
    int boolean;        // JSON_BOOL
    double number;      // JSON_NUMBER
    char *string;       // JSON_STRING (NUL-terminated; may contain no NUL)
    size_t string_len;  // JSON_STRING
    size_t count;       // JSON_ARRAY / JSON_OBJECT: number of items
    JsonValue *items;   // JSON_ARRAY / JSON_OBJECT: the values, in document order
    char **keys;        // JSON_OBJECT: keys[i] names items[i], in document order
};

// Parse exactly one JSON value from text[0..len) (surrounding white space allowed).
// Returns NULL on error with a message like "line 1, column 17: expected ':'" in err.
JsonValue *json_parse(const char *text, size_t len, char *err, size_t errlen);
void json_free(JsonValue *v);

// Object member by key (first match), or NULL if v is not an object or has no such key.
const JsonValue *json_get(const JsonValue *v, const char *key);
// Array element i, or NULL if out of range or v is not an array.
const JsonValue *json_at(const JsonValue *v, size_t i);
const char *json_type_name(JsonType t);

// Non-finite numbers. JSON has no NaN or infinity, so shardlab writes them as the strings
// "NaN", "Infinity" and "-Infinity" (the spelling of JavaScript's Number() and of proto3's
// JSON mapping). json_number() reads a number or one of those strings into *out and returns
// 1; anything else (missing, another type, another string) returns 0 and leaves *out.
int json_number(const JsonValue *v, double *out);

// A growable NUL-terminated string. data is NULL after sb_init() until the first append
// (sb_append(sb, "", 0) makes it ""); out of memory exits through die().
typedef struct {
    char *data;
    size_t len, cap;
} StrBuf;

void sb_init(StrBuf *sb);
void sb_free(StrBuf *sb);
void sb_reset(StrBuf *sb);  // length 0, keeps the memory
void sb_append(StrBuf *sb, const char *s, size_t n);
void sb_printf(StrBuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Append s as a quoted JSON string, escaping ", \, and control characters; a byte that does
// not start a valid UTF-8 sequence (a file's name, a compiler's message: any bytes) is written
// as \u00XX, so that the text is JSON whatever s holds.
void sb_json_string(StrBuf *sb, const char *s);
// Length of the valid UTF-8 sequence starting at s (at most avail bytes; 1 for ASCII), or 0 if
// it is not valid.
size_t json_utf8_length(const unsigned char *s, size_t avail);
// Rewrites sb, a JSON text printed with %g-style formats, so that every bare nan, -nan,
// inf or -inf (any case, "infinity" too) where a value goes becomes "NaN", "Infinity" or
// "-Infinity": printf's spelling of a non-finite double is not JSON. Text inside strings is
// left alone. Returns the number of values rewritten.
int sb_json_quote_nonfinite(StrBuf *sb);
// Append x as a JSON number with 9 significant digits, or as "NaN", "Infinity", "-Infinity".
void sb_json_number(StrBuf *sb, double x);
// s as HTML or XML text (or an attribute's value): < > & " ' escaped, and control characters
// other than tab and newline, which XML 1.0 does not allow, as spaces.
void sb_markup_text(StrBuf *sb, const char *s);
// Append the bytes of the file at path, at most max of them (sb is NUL-terminated after).
// Returns 0, 1 if the file has more than max bytes (the first max are appended), or -1 if it
// cannot be opened (errno says why).
// A file that is not a regular one (a FIFO, a device, a socket, a directory) is refused
// (file_open_regular), never waited on.
int sb_read_file(StrBuf *sb, const char *path, size_t max);

// Opens path for reading when it is a regular file (a link to one is followed). A run
// directory is whatever a student handed in, and every reader of one (the grader, the
// dashboard, the web server) goes through here: a FIFO with no writer, a terminal or a
// device in place of a log would make open() or read() wait forever, or do what opening a
// device does. So nothing that is not a regular file is opened at all, and the open itself
// never waits (O_NONBLOCK; fstat then checks what was opened, in case it was swapped since).
// Returns the descriptor, or -1 with errno set: from open() (ENOENT...), EISDIR for a
// directory, FILE_NOT_REGULAR for anything else that is no regular file.
enum { FILE_NOT_REGULAR = 0x7f5e };  // an errno value no system call sets
int file_open_regular(const char *path);
// The same as a stdio stream ("r" or "rb"), or NULL with errno set.
FILE *file_fopen_regular(const char *path);
// Removes dir and everything under it, links themselves and never what they point to.
void file_remove_tree(const char *dir);
// What went wrong, for errno after the above (or sb_read_file): strerror(), or "not a
// regular file (a FIFO, device or socket): refused, not read".
const char *file_error(int err);

#endif
