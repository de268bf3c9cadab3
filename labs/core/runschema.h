// runschema.h — checks that run-directory files follow the schema of runlog.h.
//
// Defines: runschema_check_event(), runschema_check_meta(), runschema_check_summary(),
//          runschema_line_is().
//
// Used by the tests on real runs, and by whatever reads runs (dashboards, graders), so that
// a malformed or truncated log is reported clearly instead of misread.
#ifndef SHARDLAB_RUNSCHEMA_H
#define SHARDLAB_RUNSCHEMA_H

#include <stddef.h>

#include "json.h"

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
