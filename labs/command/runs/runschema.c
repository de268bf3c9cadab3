// runschema.c — see runschema.h; the schema itself is written in labs/DESIGN.md, Events.
#include "runschema.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

// The field types, one letter each: "u" a non-negative integer, "i" any integer, "n" a number,
// "f" a float: a number, or "NaN", "Infinity" or "-Infinity" (how a non-finite one is
// written), "s" a string, "b" a boolean, "o" an object, "a" an array; "n?" and "f?" also take
// null.
typedef RunSchemaField Field;

// ---- the schema, part by part (runschema.h) -----------------------------------------------

static const Field START[] = {{"rank", "u", 0},    {"world", "u", 0},  {"lab", "s", 0},    {"device", "s", 0},
                              {"backend", "s", 0}, {"params", "u", 0}, {"config", "o", 0}, {"loss_floor", "n?", 0}};
// grad_norm: every training lab writes it, the collectives lab has no step events.
static const Field STEP[] = {{"rank", "u", 0},   {"step", "u", 0},  {"loss", "f", 0},  {"lr", "f", 0},
                             {"tokens", "u", 0}, {"ms", "o", 0},    {"bytes", "o", 0}, {"mem", "o", 0},
                             {"param_hash", "s", 0}, {"grad_norm", "f", 1}};
static const Field STEP_MS[] = {{"step", "f", 0}, {"compute", "f", 0}, {"comm", "f", 0}};
static const Field STEP_BYTES[] = {{"sent", "u", 0}, {"recv", "u", 0}};
static const Field STEP_MEM[] = {{"params", "u", 0}, {"grads", "u", 0}, {"optim", "u", 0},
                                 {"acts", "u", 0},   {"comm", "u", 0},  {"peak", "u", 0}};
static const Field SPAN[] = {{"rank", "u", 0},  {"step", "u", 0},  {"name", "s", 0},  {"mb", "i", 0},
                             {"layer", "i", 0}, {"t0_us", "u", 0}, {"t1_us", "u", 0}, {"bytes", "u", 0}};
static const Field CHECK[] = {{"rank", "u", 0}, {"name", "s", 0}, {"ok", "b", 0}, {"value", "f", 0}, {"expect", "f", 0}};
static const Field END[] = {{"rank", "u", 0}, {"status", "s", 0}, {"steps", "i", 0}};
static const Field ERROR[] = {{"rank", "u", 0}, {"msg", "s", 0}};
static const Field META[] = {{"lab", "s", 0},     {"argv", "a", 0},   {"world_size", "u", 0}, {"device", "s", 0},
                             {"backend", "s", 0}, {"config", "o", 0}, {"start_time", "s", 0}, {"start_unix_us", "u", 0}};
static const Field SUMMARY[] = {{"lab", "s", 0},        {"status", "s", 0},       {"world_size", "u", 0},
                                {"steps", "u", 0},      {"first_loss", "f", 0},   {"final_loss", "f", 0},
                                {"loss_floor", "n?", 0}, {"tokens", "u", 0},      {"wall_s", "n", 0},
                                {"tokens_per_s", "n", 0}, {"param_hash", "s", 0}, {"mem_peak", "u", 0}};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define PART(name, fields) {name, fields, (int)COUNT(fields)}

const RunSchemaPart runschema_parts[] = {
    PART("start", START),     PART("step", STEP), PART("step.ms", STEP_MS), PART("step.bytes", STEP_BYTES),
    PART("step.mem", STEP_MEM), PART("span", SPAN), PART("check", CHECK),   PART("end", END),
    PART("error", ERROR),     PART("meta.json", META), PART("summary.json", SUMMARY),
};
const int runschema_nparts = (int)COUNT(runschema_parts);

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
        if (!v && fields[i].optional) continue;
        if (!v) return fail(err, errlen, "%s: missing field \"%s\"", what, fields[i].name);
        if (!has_type(v, fields[i].type))
            return fail(err, errlen, "%s: field \"%s\" must be %s, found %s", what, fields[i].name,
                        type_words(fields[i].type), json_type_name(v->type));
    }
    return 1;
}

int runschema_check_event(const JsonValue *ev, char *err, size_t errlen) {
    if (!ev || ev->type != JSON_OBJECT) return fail(err, errlen, "event is not a JSON object");
    if (ev->count == 0 || strcmp(ev->keys[0], "ev") != 0 || ev->items[0].type != JSON_STRING)
        return fail(err, errlen, "event does not start with the string field \"ev\"");
    const char *kind = ev->items[0].string;
    if (strcmp(kind, "start") == 0) return check_fields(ev, "start event", START, COUNT(START), err, errlen);
    if (strcmp(kind, "step") == 0) {
        if (!check_fields(ev, "step event", STEP, COUNT(STEP), err, errlen) ||
            !check_fields(json_get(ev, "ms"), "step event \"ms\"", STEP_MS, COUNT(STEP_MS), err, errlen) ||
            !check_fields(json_get(ev, "bytes"), "step event \"bytes\"", STEP_BYTES, COUNT(STEP_BYTES), err, errlen) ||
            !check_fields(json_get(ev, "mem"), "step event \"mem\"", STEP_MEM, COUNT(STEP_MEM), err, errlen))
            return 0;
        const JsonValue *h = json_get(ev, "param_hash");
        if (h->string_len != 16 || strspn(h->string, "0123456789abcdef") != 16)
            return fail(err, errlen, "step event: \"param_hash\" must be 16 lower-case hex digits, found \"%s\"",
                        h->string);
        return 1;
    }
    if (strcmp(kind, "span") == 0) {
        if (!check_fields(ev, "span event", SPAN, COUNT(SPAN), err, errlen)) return 0;
        if (json_get(ev, "t1_us")->number < json_get(ev, "t0_us")->number)
            return fail(err, errlen, "span event: t1_us is before t0_us");
        return 1;
    }
    if (strcmp(kind, "check") == 0) return check_fields(ev, "check event", CHECK, COUNT(CHECK), err, errlen);
    if (strcmp(kind, "end") == 0) {
        if (!check_fields(ev, "end event", END, COUNT(END), err, errlen)) return 0;
        const char *s = json_get(ev, "status")->string;
        if (strcmp(s, "ok") != 0 && strcmp(s, "error") != 0)
            return fail(err, errlen, "end event: status must be \"ok\" or \"error\", found \"%s\"", s);
        return 1;
    }
    if (strcmp(kind, "error") == 0) return check_fields(ev, "error event", ERROR, COUNT(ERROR), err, errlen);
    return fail(err, errlen, "unknown event kind \"%s\"", kind);
}

int runschema_check_meta(const JsonValue *meta, char *err, size_t errlen) {
    return check_fields(meta, "meta.json", META, COUNT(META), err, errlen);
}

int runschema_check_summary(const JsonValue *summary, char *err, size_t errlen) {
    return check_fields(summary, "summary.json", SUMMARY, COUNT(SUMMARY), err, errlen);
}

int runschema_line_is(const char *line, size_t n, const char *ev) {
    static const char head[] = "{\"ev\":\"";
    size_t nh = sizeof head - 1, ne = strlen(ev);
    return n >= nh + ne + 1 && memcmp(line, head, nh) == 0 && memcmp(line + nh, ev, ne) == 0 && line[nh + ne] == '"';
}
