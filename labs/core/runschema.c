// runschema.c — see runschema.h; the schema itself is written in runlog.h.
#include "runschema.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

// A field: its name and the type it must have. "u" means a non-negative integer,
// "i" any integer, "n" a number, "f" a float: a number, or "NaN", "Infinity" or "-Infinity"
// (how a non-finite one is written), "s" a string, "b" a boolean, "o" an object, "a" an
// array; "n?" and "f?" also take null.
typedef struct {
    const char *name, *type;
} Field;

static int fail(char *err, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, n, fmt, ap);
    va_end(ap);
    return 0;
}

static int has_type(const JsonValue *v, const char *type) {
    int nullable = type[1] == '?';
    if (nullable && v->type == JSON_NULL) return 1;
    switch (type[0]) {
    case 'n': return v->type == JSON_NUMBER && isfinite(v->number);
    case 'f': {
        double x;
        return json_number(v, &x);
    }
    // Integers within 2^53, where a double holds every one exactly: a reader may then cast
    // one to int64_t (a larger one would not fit, and was not written by a lab).
    case 'i': return v->type == JSON_NUMBER && v->number == floor(v->number) && fabs(v->number) <= 0x1p53;
    case 'u': return v->type == JSON_NUMBER && v->number == floor(v->number) && v->number >= 0 && v->number <= 0x1p53;
    case 's': return v->type == JSON_STRING;
    case 'b': return v->type == JSON_BOOL;
    case 'o': return v->type == JSON_OBJECT;
    case 'a': return v->type == JSON_ARRAY;
    }
    return 0;
}

static const char *type_words(const char *type) {
    switch (type[0]) {
    case 'u': return "a non-negative integer (at most 2^53)";
    case 'i': return "an integer (within 2^53)";
    case 'n': return type[1] == '?' ? "a number or null" : "a finite number";
    case 'f': return type[1] == '?' ? "a number, \"NaN\", \"Infinity\", \"-Infinity\" or null"
                                    : "a number, \"NaN\", \"Infinity\" or \"-Infinity\"";
    case 's': return "a string";
    case 'b': return "true or false";
    case 'o': return "an object";
    default: return "an array";
    }
}

static int check_fields(const JsonValue *obj, const char *what, const Field *fields, size_t n, char *err,
                        size_t errlen) {
    if (!obj || obj->type != JSON_OBJECT) return fail(err, errlen, "%s is not a JSON object", what);
    for (size_t i = 0; i < n; i++) {
        const JsonValue *v = json_get(obj, fields[i].name);
        if (!v) return fail(err, errlen, "%s: missing field \"%s\"", what, fields[i].name);
        if (!has_type(v, fields[i].type))
            return fail(err, errlen, "%s: field \"%s\" must be %s, found %s", what, fields[i].name,
                        type_words(fields[i].type), json_type_name(v->type));
    }
    return 1;
}

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

int runschema_check_event(const JsonValue *ev, char *err, size_t errlen) {
    if (!ev || ev->type != JSON_OBJECT) return fail(err, errlen, "event is not a JSON object");
    if (ev->count == 0 || strcmp(ev->keys[0], "ev") != 0 || ev->items[0].type != JSON_STRING)
        return fail(err, errlen, "event does not start with the string field \"ev\"");
    const char *kind = ev->items[0].string;
    static const Field start[] = {{"rank", "u"},     {"world", "u"},  {"lab", "s"},    {"device", "s"},
                                  {"backend", "s"},  {"params", "u"}, {"config", "o"}, {"loss_floor", "n?"}};
    static const Field step[] = {{"rank", "u"}, {"step", "u"},  {"loss", "f"},  {"lr", "f"},
                                 {"tokens", "u"}, {"ms", "o"},  {"bytes", "o"}, {"mem", "o"},
                                 {"param_hash", "s"}};
    static const Field ms[] = {{"step", "f"}, {"compute", "f"}, {"comm", "f"}};
    static const Field bytes[] = {{"sent", "u"}, {"recv", "u"}};
    static const Field mem[] = {{"params", "u"}, {"grads", "u"}, {"optim", "u"},
                                {"acts", "u"},   {"comm", "u"},  {"peak", "u"}};
    static const Field span[] = {{"rank", "u"}, {"step", "u"},  {"name", "s"},  {"mb", "i"},
                                 {"layer", "i"}, {"t0_us", "u"}, {"t1_us", "u"}, {"bytes", "u"}};
    static const Field check[] = {{"rank", "u"}, {"name", "s"}, {"ok", "b"}, {"value", "f"}, {"expect", "f"}};
    static const Field end[] = {{"rank", "u"}, {"status", "s"}, {"steps", "i"}};
    static const Field error[] = {{"rank", "u"}, {"msg", "s"}};

    if (strcmp(kind, "start") == 0) return check_fields(ev, "start event", start, COUNT(start), err, errlen);
    if (strcmp(kind, "step") == 0) {
        if (!check_fields(ev, "step event", step, COUNT(step), err, errlen) ||
            !check_fields(json_get(ev, "ms"), "step event \"ms\"", ms, COUNT(ms), err, errlen) ||
            !check_fields(json_get(ev, "bytes"), "step event \"bytes\"", bytes, COUNT(bytes), err, errlen) ||
            !check_fields(json_get(ev, "mem"), "step event \"mem\"", mem, COUNT(mem), err, errlen))
            return 0;
        const JsonValue *gn = json_get(ev, "grad_norm");  // every training lab writes it
        double x;
        if (gn && !json_number(gn, &x))
            return fail(err, errlen, "step event: field \"grad_norm\" must be %s, found %s", type_words("f"),
                        json_type_name(gn->type));
        const JsonValue *h = json_get(ev, "param_hash");
        if (h->string_len != 16 || strspn(h->string, "0123456789abcdef") != 16)
            return fail(err, errlen, "step event: \"param_hash\" must be 16 lower-case hex digits, found \"%s\"",
                        h->string);
        return 1;
    }
    if (strcmp(kind, "span") == 0) {
        if (!check_fields(ev, "span event", span, COUNT(span), err, errlen)) return 0;
        if (json_get(ev, "t1_us")->number < json_get(ev, "t0_us")->number)
            return fail(err, errlen, "span event: t1_us is before t0_us");
        return 1;
    }
    if (strcmp(kind, "check") == 0) return check_fields(ev, "check event", check, COUNT(check), err, errlen);
    if (strcmp(kind, "end") == 0) {
        if (!check_fields(ev, "end event", end, COUNT(end), err, errlen)) return 0;
        const char *s = json_get(ev, "status")->string;
        if (strcmp(s, "ok") != 0 && strcmp(s, "error") != 0)
            return fail(err, errlen, "end event: status must be \"ok\" or \"error\", found \"%s\"", s);
        return 1;
    }
    if (strcmp(kind, "error") == 0) return check_fields(ev, "error event", error, COUNT(error), err, errlen);
    return fail(err, errlen, "unknown event kind \"%s\"", kind);
}

int runschema_check_meta(const JsonValue *meta, char *err, size_t errlen) {
    static const Field f[] = {{"lab", "s"},    {"argv", "a"},       {"world_size", "u"},    {"device", "s"},
                              {"backend", "s"}, {"config", "o"},    {"start_time", "s"},    {"start_unix_us", "u"}};
    return check_fields(meta, "meta.json", f, COUNT(f), err, errlen);
}

int runschema_check_summary(const JsonValue *summary, char *err, size_t errlen) {
    static const Field f[] = {{"lab", "s"},        {"status", "s"},     {"world_size", "u"}, {"steps", "u"},
                              {"first_loss", "f"}, {"final_loss", "f"}, {"loss_floor", "n?"}, {"tokens", "u"},
                              {"wall_s", "n"},     {"tokens_per_s", "n"}, {"param_hash", "s"}, {"mem_peak", "u"}};
    return check_fields(summary, "summary.json", f, COUNT(f), err, errlen);
}

int runschema_line_is(const char *line, size_t n, const char *ev) {
    static const char head[] = "{\"ev\":\"";
    size_t nh = sizeof head - 1, ne = strlen(ev);
    return n >= nh + ne + 1 && memcmp(line, head, nh) == 0 && memcmp(line + nh, ev, ne) == 0 && line[nh + ne] == '"';
}
