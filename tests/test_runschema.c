// test_runschema.c — the run-log validator (labs/command/runs/runschema.c) against the schema of
// labs/DESIGN.md, Events.
//
// What it proves: a well-formed event of every kind, meta.json and summary.json pass (extra
// fields too: labs may add fields); and every defect a reader could meet is refused with a
// message that names the field at fault, so a broken log is reported, never misread:
//   - each required field removed, one at a time, from each event kind, from the nested
//     "ms", "bytes" and "mem" objects of a step event, from meta.json and summary.json;
//   - wrong types: a string loss, also "nan" (JSON has no NaN: a NaN loss written as a
//     string must not pass as a number, and a bare nan is not JSON at all), a negative or
//     fractional byte count, a fractional or negative step, "ok" as 1 instead of true;
//   - a param_hash that is not 16 lower-case hex digits; a span with t1_us < t0_us; "ev" not
//     the first field; an unknown event kind; an end status other than "ok" or "error".
//
// Documents are written as JSON text (as a run writes them) and parsed with json_parse.
// Each object is kept as a list of "key":value members so that the tests can drop one.
#include <stdlib.h>
#include <string.h>

#include "command/runs/runschema.h"
#include "common/runfiles/json.h"
#include "test.h"

typedef struct {
    const char *key, *value;  // value: JSON text
} Member;

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
enum { NONE = -1 };  // object_text: drop no member

// The object {members} without member `skip`, as text in sb.
static void object_text(StrBuf *sb, const Member *m, size_t n, int skip) {
    sb_reset(sb);
    sb_append(sb, "{", 1);
    int first = 1;
    for (size_t i = 0; i < n; i++) {
        if ((int)i == skip) continue;
        sb_printf(sb, "%s\"%s\":%s", first ? "" : ",", m[i].key, m[i].value);
        first = 0;
    }
    sb_append(sb, "}", 1);
}

typedef int (*Validator)(const JsonValue *, char *, size_t);

// Parse text (it must be valid JSON: the defects under test are schema defects) and run the
// validator. Returns its verdict; err receives its message.
static int validate(Validator check, const char *text, char *err, size_t errlen) {
    char perr[256];
    err[0] = 0;
    JsonValue *v = json_parse(text, strlen(text), perr, sizeof perr);
    if (!v) {
        snprintf(err, errlen, "test bug: not JSON (%s): %s", perr, text);
        return -1;
    }
    int ok = check(v, err, errlen);
    json_free(v);
    return ok;
}

static void expect_valid(Validator check, const char *text, const char *what) {
    char err[512];
    int ok = validate(check, text, err, sizeof err);
    EXPECT(ok == 1, "%s passes the validator%s%s", what, ok == 1 ? "" : ": ", ok == 1 ? "" : err);
}

// The validator must refuse text, with a message containing want (the field's name).
static void expect_invalid(Validator check, const char *text, const char *want, const char *what) {
    char err[512];
    int ok = validate(check, text, err, sizeof err);
    EXPECT(ok == 0 && strstr(err, want) != NULL, "%s is refused with a message containing %s (message: %s)", what, want, err);
}

// ---- well-formed documents, one per kind --------------------------------------------------

static const Member ms_members[] = {{"step", "12.5"}, {"compute", "10"}, {"comm", "2.5"}};
static const Member bytes_members[] = {{"sent", "1024"}, {"recv", "2048"}};
static const Member mem_members[] = {{"params", "4000"}, {"grads", "4000"}, {"optim", "8000"},
                                     {"acts", "100"},    {"comm", "0"},     {"peak", "20000"}};

static const Member start_ev[] = {{"ev", "\"start\""}, {"rank", "0"},          {"world", "2"},
                                  {"lab", "\"ddp\""},  {"device", "\"cpu\""},   {"backend", "\"shm\""},
                                  {"params", "136960"}, {"config", "{\"dim\":64}"}, {"loss_floor", "1.25"}};
// The step event's nested objects (ms, bytes, mem) are filled in by step_doc_init().
static const Member step_ev[] = {{"ev", "\"step\""}, {"rank", "1"},     {"step", "3"},  {"loss", "2.31"},
                           {"lr", "0.001"},    {"tokens", "2048"}, {"ms", NULL},  {"bytes", NULL},
                           {"mem", NULL},      {"param_hash", "\"0123456789abcdef\""}};
static const Member span_ev[] = {{"ev", "\"span\""}, {"rank", "0"},   {"step", "3"},
                                 {"name", "\"fwd\""}, {"mb", "-1"},   {"layer", "-1"},
                                 {"t0_us", "1700000000000000"}, {"t1_us", "1700000000000500"}, {"bytes", "0"}};
static const Member check_ev[] = {{"ev", "\"check\""}, {"rank", "0"}, {"name", "\"mem.params\""},
                                  {"ok", "true"},      {"value", "547840"}, {"expect", "547840"}};
static const Member end_ev[] = {{"ev", "\"end\""}, {"rank", "0"}, {"status", "\"ok\""}, {"steps", "20"}};
static const Member error_ev[] = {{"ev", "\"error\""}, {"rank", "1"}, {"msg", "\"out of memory\""}};

static const Member meta_doc[] = {{"lab", "\"single\""}, {"argv", "[\"single\",\"--steps\",\"5\"]"},
                                  {"world_size", "1"}, {"device", "\"cpu\""}, {"backend", "\"none\""},
                                  {"config", "{\"dim\":64}"}, {"start_time", "\"2026-11-21T10:00:00Z\""},
                                  {"start_unix_us", "1795000000000000"}, {"host", "\"box\""}, {"pid", "4242"}};
static const Member summary_doc[] = {
    {"lab", "\"single\""},       {"status", "\"ok\""},         {"world_size", "1"},  {"steps", "5"},
    {"first_loss", "5.55"},      {"final_loss", "3.1"},        {"loss_floor", "null"}, {"tokens", "2560"},
    {"wall_s", "0.5"},           {"tokens_per_s", "5120.0"},   {"param_hash", "\"0123456789abcdef\""},
    {"mem_peak", "123456"},      {"end_time", "\"2026-11-21T10:00:01Z\""}};

// A step event as members, its nested objects written from their member lists into
// nested[], nested object k lacking member skip[k] (NONE: complete). Tests may change m.
enum { MS = 6, BYTES = 7, MEM = 8, HASH = 9 };
typedef struct {
    Member m[COUNT(step_ev)];
    StrBuf nested[3];
} StepDoc;

static const int COMPLETE[3] = {NONE, NONE, NONE};

static void step_doc_init(StepDoc *d, const int skip[3]) {
    const Member *lists[3] = {ms_members, bytes_members, mem_members};
    size_t counts[3] = {COUNT(ms_members), COUNT(bytes_members), COUNT(mem_members)};
    memcpy(d->m, step_ev, sizeof step_ev);
    for (int k = 0; k < 3; k++) {
        sb_init(&d->nested[k]);
        object_text(&d->nested[k], lists[k], counts[k], skip[k]);
        d->m[MS + k].value = d->nested[k].data;
    }
}

static void step_doc_free(StepDoc *d) {
    for (int k = 0; k < 3; k++) sb_free(&d->nested[k]);
}

// A copy of the document with member `key` given another value (JSON text).
static void with_value(StrBuf *out, const Member *m, size_t n, const char *key, const char *value) {
    Member copy[16];
    memcpy(copy, m, n * sizeof *m);
    for (size_t i = 0; i < n; i++)
        if (strcmp(copy[i].key, key) == 0) copy[i].value = value;
    object_text(out, copy, n, NONE);
}

// Every required member of doc removed in turn must be refused, the message naming it.
// first: the index of the first member to drop (1 for events: "ev" is tested on its own).
static void expect_each_field_required(Validator check, const Member *doc, size_t n, size_t first,
                                       size_t required, const char *what) {
    StrBuf sb;
    sb_init(&sb);
    for (size_t i = first; i < required; i++) {
        object_text(&sb, doc, n, (int)i);
        char want[64], label[96];
        snprintf(want, sizeof want, "\"%s\"", doc[i].key);
        snprintf(label, sizeof label, "%s without \"%s\"", what, doc[i].key);
        expect_invalid(check, sb.data, want, label);
    }
    sb_free(&sb);
}

static void test_valid(void) {
    StrBuf sb;
    sb_init(&sb);
    object_text(&sb, start_ev, COUNT(start_ev), NONE);
    expect_valid(runschema_check_event, sb.data, "a start event");
    with_value(&sb, start_ev, COUNT(start_ev), "loss_floor", "null");
    expect_valid(runschema_check_event, sb.data, "a start event with loss_floor null (file data)");
    StepDoc step;
    step_doc_init(&step, COMPLETE);
    object_text(&sb, step.m, COUNT(step.m), NONE);
    expect_valid(runschema_check_event, sb.data, "a step event");
    // Labs may add fields (single adds grad_norm): the schema fixes names, not the set.
    Member extended[COUNT(step_ev) + 1];
    memcpy(extended, step.m, sizeof step.m);
    extended[COUNT(step_ev)] = (Member){"grad_norm", "1.5"};
    object_text(&sb, extended, COUNT(extended), NONE);
    expect_valid(runschema_check_event, sb.data, "a step event with an extra field (grad_norm)");
    with_value(&sb, step.m, COUNT(step.m), "loss", "3");
    expect_valid(runschema_check_event, sb.data, "a step event whose loss is written as an integer (3)");
    step_doc_free(&step);
    object_text(&sb, span_ev, COUNT(span_ev), NONE);
    expect_valid(runschema_check_event, sb.data, "a span event (mb and layer -1: none)");
    with_value(&sb, span_ev, COUNT(span_ev), "t1_us", "1700000000000000");
    expect_valid(runschema_check_event, sb.data, "a span event with t1_us == t0_us (a zero-length span)");
    object_text(&sb, check_ev, COUNT(check_ev), NONE);
    expect_valid(runschema_check_event, sb.data, "a check event");
    object_text(&sb, end_ev, COUNT(end_ev), NONE);
    expect_valid(runschema_check_event, sb.data, "an end event with status ok");
    with_value(&sb, end_ev, COUNT(end_ev), "status", "\"error\"");
    expect_valid(runschema_check_event, sb.data, "an end event with status error");
    object_text(&sb, error_ev, COUNT(error_ev), NONE);
    expect_valid(runschema_check_event, sb.data, "an error event");
    object_text(&sb, meta_doc, COUNT(meta_doc), NONE);
    expect_valid(runschema_check_meta, sb.data, "meta.json");
    object_text(&sb, summary_doc, COUNT(summary_doc), NONE);
    expect_valid(runschema_check_summary, sb.data, "summary.json with loss_floor null");
    with_value(&sb, summary_doc, COUNT(summary_doc), "loss_floor", "2.75");
    expect_valid(runschema_check_summary, sb.data, "summary.json with a numeric loss_floor");
    sb_free(&sb);
}

static void test_missing_fields(void) {
    expect_each_field_required(runschema_check_event, start_ev, COUNT(start_ev), 1, COUNT(start_ev), "start event");
    expect_each_field_required(runschema_check_event, span_ev, COUNT(span_ev), 1, COUNT(span_ev), "span event");
    expect_each_field_required(runschema_check_event, check_ev, COUNT(check_ev), 1, COUNT(check_ev), "check event");
    expect_each_field_required(runschema_check_event, end_ev, COUNT(end_ev), 1, COUNT(end_ev), "end event");
    expect_each_field_required(runschema_check_event, error_ev, COUNT(error_ev), 1, COUNT(error_ev), "error event");
    // meta.json: host and pid (the last two) are informative, not required by the validator.
    expect_each_field_required(runschema_check_meta, meta_doc, COUNT(meta_doc), 0, COUNT(meta_doc) - 2, "meta.json");
    // summary.json: end_time (the last) is informative.
    expect_each_field_required(runschema_check_summary, summary_doc, COUNT(summary_doc), 0, COUNT(summary_doc) - 1,
                               "summary.json");

    // The step event: each top-level field...
    StepDoc step;
    step_doc_init(&step, COMPLETE);
    expect_each_field_required(runschema_check_event, step.m, COUNT(step.m), 1, COUNT(step.m), "step event");
    step_doc_free(&step);
    // ... and each field of its nested objects (a mem lacking peak among them): the message
    // names the object and the field.
    const char *objects[3] = {"ms", "bytes", "mem"};
    size_t counts[3] = {COUNT(ms_members), COUNT(bytes_members), COUNT(mem_members)};
    const Member *lists[3] = {ms_members, bytes_members, mem_members};
    StrBuf sb;
    sb_init(&sb);
    for (int k = 0; k < 3; k++)
        for (size_t i = 0; i < counts[k]; i++) {
            int skip[3] = {NONE, NONE, NONE};
            skip[k] = (int)i;
            step_doc_init(&step, skip);
            object_text(&sb, step.m, COUNT(step.m), NONE);
            char err[512], field[32], object[32];
            int ok = validate(runschema_check_event, sb.data, err, sizeof err);
            snprintf(field, sizeof field, "\"%s\"", lists[k][i].key);
            snprintf(object, sizeof object, "\"%s\"", objects[k]);
            EXPECT(ok == 0 && strstr(err, field) && strstr(err, object),
                   "a step event whose %s lacks %s is refused, naming both (message: %s)", object, field, err);
            step_doc_free(&step);
        }
    sb_free(&sb);
}

static void test_wrong_types(void) {
    StrBuf sb;
    sb_init(&sb);
    StepDoc step;
    step_doc_init(&step, COMPLETE);
    struct { const char *key, *value, *what; } cases[] = {
        {"loss", "\"2.31\"", "a loss written as a string"},
        {"loss", "\"nan\"", "a NaN loss written as the string \"nan\""},
        {"loss", "null", "a null loss"},
        {"step", "2.5", "a fractional step"},
        {"step", "-1", "a negative step"},
        {"tokens", "true", "tokens as a boolean"},
        {"rank", "\"0\"", "rank as a string"},
        {"ms", "[1,2,3]", "ms as an array"},
        {"bytes", "{\"sent\":-8,\"recv\":0}", "a negative byte count (bytes.sent -8)"},
        {"mem", "{\"params\":1,\"grads\":1,\"optim\":1,\"acts\":1.5,\"comm\":0,\"peak\":4}",
         "a fractional byte count (mem.acts 1.5)"},
        {"param_hash", "1234", "param_hash as a number"},
    };
    // The field the message must name: the replaced one, or inside bytes/mem the bad one.
    const char *want[] = {"\"loss\"", "\"loss\"", "\"loss\"", "\"step\"", "\"step\"", "\"tokens\"",
                          "\"rank\"", "\"ms\"", "\"sent\"", "\"acts\"", "\"param_hash\""};
    for (size_t i = 0; i < COUNT(cases); i++) {
        with_value(&sb, step.m, COUNT(step.m), cases[i].key, cases[i].value);
        expect_invalid(runschema_check_event, sb.data, want[i], cases[i].what);
    }
    // Non-finite floats are written as "NaN", "Infinity", "-Infinity" (labs/DESIGN.md, Events): those pass
    // where a float goes, and only those (the "nan" above, "inf" and "Inf" do not).
    with_value(&sb, step.m, COUNT(step.m), "loss", "\"NaN\"");
    expect_valid(runschema_check_event, sb.data, "a NaN loss written as the schema says, \"NaN\"");
    with_value(&sb, step.m, COUNT(step.m), "lr", "\"-Infinity\"");
    expect_valid(runschema_check_event, sb.data, "an lr of \"-Infinity\"");
    with_value(&sb, step.m, COUNT(step.m), "loss", "\"inf\"");
    expect_invalid(runschema_check_event, sb.data, "\"loss\"", "a loss of \"inf\" (not the schema's spelling)");
    step_doc_free(&step);
    // JSON itself has no NaN: a NaN loss printed with %g ("nan") is not even parsed.
    char err[256];
    const char *raw_nan = "{\"ev\":\"step\",\"loss\":nan}";
    JsonValue *v = json_parse(raw_nan, strlen(raw_nan), err, sizeof err);
    EXPECT(v == NULL, "a bare nan is not JSON, so a NaN loss cannot sneak in as a number (%s)", err);
    json_free(v);
    // The other kinds and files.
    with_value(&sb, check_ev, COUNT(check_ev), "ok", "1");
    expect_invalid(runschema_check_event, sb.data, "\"ok\"", "a check event whose ok is 1, not true");
    with_value(&sb, span_ev, COUNT(span_ev), "bytes", "-1");
    expect_invalid(runschema_check_event, sb.data, "\"bytes\"", "a span moving -1 bytes");
    with_value(&sb, span_ev, COUNT(span_ev), "mb", "0.5");
    expect_invalid(runschema_check_event, sb.data, "\"mb\"", "a span of micro-batch 0.5");
    // Integers past 2^53 were never written by a lab, and would not fit the int64_t a reader
    // casts them to (the grader's step numbers): refused.
    StepDoc big;
    step_doc_init(&big, COMPLETE);
    with_value(&sb, big.m, COUNT(big.m), "step", "1e300");
    expect_invalid(runschema_check_event, sb.data, "\"step\"", "a step event of step 1e300");
    with_value(&sb, span_ev, COUNT(span_ev), "mb", "-1e19");
    expect_invalid(runschema_check_event, sb.data, "\"mb\"", "a span of micro-batch -1e19");
    with_value(&sb, big.m, COUNT(big.m), "step", "9007199254740992");
    expect_valid(runschema_check_event, sb.data, "a step event of step 2^53");
    step_doc_free(&big);
    with_value(&sb, start_ev, COUNT(start_ev), "lab", "3");
    expect_invalid(runschema_check_event, sb.data, "\"lab\"", "a start event whose lab is a number");
    with_value(&sb, error_ev, COUNT(error_ev), "msg", "{\"text\":\"oom\"}");
    expect_invalid(runschema_check_event, sb.data, "\"msg\"", "an error event whose msg is an object");
    with_value(&sb, span_ev, COUNT(span_ev), "name", "null");
    expect_invalid(runschema_check_event, sb.data, "\"name\"", "a span whose name is null");
    with_value(&sb, start_ev, COUNT(start_ev), "loss_floor", "\"none\"");
    expect_invalid(runschema_check_event, sb.data, "\"loss_floor\"", "a start event with loss_floor a string");
    with_value(&sb, meta_doc, COUNT(meta_doc), "argv", "\"single --steps 5\"");
    expect_invalid(runschema_check_meta, sb.data, "\"argv\"", "meta.json with argv a string, not an array");
    with_value(&sb, summary_doc, COUNT(summary_doc), "final_loss", "\"nan\"");
    expect_invalid(runschema_check_summary, sb.data, "\"final_loss\"", "summary.json with final_loss \"nan\"");
    with_value(&sb, summary_doc, COUNT(summary_doc), "final_loss", "\"NaN\"");
    expect_valid(runschema_check_summary, sb.data, "summary.json with final_loss \"NaN\" (the schema's spelling)");
    with_value(&sb, summary_doc, COUNT(summary_doc), "mem_peak", "-4096");
    expect_invalid(runschema_check_summary, sb.data, "\"mem_peak\"", "summary.json with a negative mem_peak");
    sb_free(&sb);
}

static void test_rules(void) {
    StrBuf sb;
    sb_init(&sb);
    // param_hash: exactly 16 lower-case hex digits (FNV-1a 64 as runlog writes it).
    StepDoc step;
    step_doc_init(&step, COMPLETE);
    const char *bad_hashes[] = {"\"0123456789ABCDEF\"", "\"0123456789abcde\"", "\"0123456789abcdef0\"",
                                "\"0123456789abcdeg\"", "\"\""};
    const char *why[] = {"upper case", "15 digits", "17 digits", "a non-hex digit", "empty"};
    for (size_t i = 0; i < COUNT(bad_hashes); i++) {
        with_value(&sb, step.m, COUNT(step.m), "param_hash", bad_hashes[i]);
        char what[96];
        snprintf(what, sizeof what, "param_hash %s (%s)", bad_hashes[i], why[i]);
        expect_invalid(runschema_check_event, sb.data, "\"param_hash\"", what);
    }
    step_doc_free(&step);
    // A span that ends before it starts.
    with_value(&sb, span_ev, COUNT(span_ev), "t1_us", "1699999999999999");
    expect_invalid(runschema_check_event, sb.data, "t1_us", "a span with t1_us < t0_us");
    // "ev" must be the first member, and a string.
    Member moved[COUNT(end_ev)] = {end_ev[1], end_ev[0], end_ev[2], end_ev[3]};
    object_text(&sb, moved, COUNT(moved), NONE);
    expect_invalid(runschema_check_event, sb.data, "\"ev\"", "an event whose \"ev\" is not the first field");
    expect_invalid(runschema_check_event, "{\"rank\":0,\"status\":\"ok\",\"steps\":1}", "\"ev\"",
                   "an event with no \"ev\" at all");
    with_value(&sb, end_ev, COUNT(end_ev), "ev", "7");
    expect_invalid(runschema_check_event, sb.data, "\"ev\"", "an event whose \"ev\" is a number");
    expect_invalid(runschema_check_event, "{}", "\"ev\"", "an empty object");
    expect_invalid(runschema_check_event, "[1,2]", "not a JSON object", "an array instead of an event");
    // An unknown kind is refused with its name (a typo must not be silently skipped).
    with_value(&sb, end_ev, COUNT(end_ev), "ev", "\"stpe\"");
    expect_invalid(runschema_check_event, sb.data, "\"stpe\"", "an unknown event kind \"stpe\"");
    // The end status is ok or error, nothing else.
    const char *statuses[] = {"\"OK\"", "\"done\"", "\"\""};
    for (size_t i = 0; i < COUNT(statuses); i++) {
        with_value(&sb, end_ev, COUNT(end_ev), "status", statuses[i]);
        char what[64];
        snprintf(what, sizeof what, "an end event with status %s", statuses[i]);
        expect_invalid(runschema_check_event, sb.data, "status", what);
    }
    // meta.json and summary.json must be objects.
    expect_invalid(runschema_check_meta, "[]", "meta.json", "meta.json that is an array");
    expect_invalid(runschema_check_summary, "\"ok\"", "summary.json", "summary.json that is a string");
    sb_free(&sb);
}

// An event's kind by its first field, without parsing (the launcher's and the web's filters).
static void test_line_is(void) {
    static const struct {
        const char *line, *ev;
        int want;
    } cases[] = {
        {"{\"ev\":\"step\",\"rank\":0,\"step\":1}", "step", 1},
        {"{\"ev\":\"end\",\"rank\":1}", "end", 1},
        {"{\"ev\":\"steps\",\"rank\":0}", "step", 0},   // another kind that starts alike
        {"{\"ev\":\"step\",\"rank\":0}", "steps", 0},
        {"{\"ev\":\"step", "step", 0},                  // cut before the kind's closing quote
        {"{\"rank\":0,\"ev\":\"step\"}", "step", 0},    // not as a lab writes it
        {"", "end", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int got = runschema_line_is(cases[i].line, strlen(cases[i].line), cases[i].ev);
        EXPECT(got == cases[i].want, "runschema_line_is(%s, \"%s\") = %d (want %d)", cases[i].line, cases[i].ev, got,
               cases[i].want);
    }
}

int main(void) {
    test_line_is();
    test_valid();
    test_missing_fields();
    test_wrong_types();
    test_rules();
    return test_done();
}
