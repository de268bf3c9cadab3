// runschema.h — checks that run-directory files follow the schema of labs/DESIGN.md, Events.
//
// Used by the tests on real runs, and by whatever reads runs (dashboards, graders), so that
// a malformed or truncated log is reported clearly instead of misread.
#ifndef SHARDLAB_RUNSCHEMA_H
#define SHARDLAB_RUNSCHEMA_H

#include <stddef.h>

#include "common/runfiles/json.h"

// The schema as data: what the checks below require, part by part. A part is an event kind
// ("start", "step", "span", "check", "end", "error"), an object inside a step event
// ("step.ms", "step.bytes", "step.mem") or a file ("meta.json", "summary.json"). A field has
// a type (one letter: runschema.c lists them) and is required unless optional; when present,
// an optional field must have its type too. tests/test_design.c holds the document of the
// schema to this table: every part and field in it is written down there.
typedef struct {
    const char *name, *type;
    int optional;
} RunSchemaField;
typedef struct {
    const char *part;
    const RunSchemaField *fields;
    int nfields;
} RunSchemaPart;
extern const RunSchemaPart runschema_parts[];
extern const int runschema_nparts;

// One parsed line of rank-<r>.jsonl. Returns 1 if it follows the schema, else 0 with the
// first problem in err (e.g. "step event \"mem\": missing field \"peak\"").
int runschema_check_event(const JsonValue *ev, char *err, size_t errlen);
int runschema_check_meta(const JsonValue *meta, char *err, size_t errlen);
int runschema_check_summary(const JsonValue *summary, char *err, size_t errlen);
// Whether the n bytes at line are an event of kind ev ("step", "end", ...), by its first
// field, without parsing it: every lab writes an event as {"ev":"<kind>",...} (runlog.h), so
// a reader that wants only some kinds (the launcher's status line, the web's filters) skips
// the others cheaply. What it then reads of the line it still parses and checks.
int runschema_line_is(const char *line, size_t n, const char *ev);

#endif
