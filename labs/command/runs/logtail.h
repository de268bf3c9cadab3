// logtail.h — reading a file that another process appends lines to, as it grows: the one
// tail the run-log readers share (runread.c for the dashboards, web/runs.c for the browser).
//
// Each poll reads only what was appended since the last, and hands over every whole line
// (without its newline). Half a line is kept until its end arrives; a file that got shorter
// (truncated, or replaced) is read again from its start. Nothing in the file is trusted: a
// line longer than max_line is counted but never kept whole, and half a line that has not
// grown for give_up_s seconds (its writer died mid-line) is given up. The caller judges what
// a line says (runschema.h): this only cuts the bytes into lines.
#ifndef SHARDLAB_LOGTAIL_H
#define SHARDLAB_LOGTAIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

// The longest line a run log has any business holding (an event is a few KiB at most): what
// both readers pass as max_line.
#define LOGTAIL_MAX_LINE (1 << 20)

typedef struct {
    off_t offset;              // bytes read so far
    char *partial;             // half a line: its first bytes (up to max_line)
    size_t partial_len;        // its length (past max_line, counted only)
    int64_t partial_since_us;  // when it last grew
} LogTail;

typedef enum {
    LOGTAIL_LINE,      // a whole line
    LOGTAIL_TOO_LONG,  // a line longer than max_line (line is NULL)
    LOGTAIL_CUT_OFF,   // half a line given up (line is NULL)
} LogTailKind;
// A line's n bytes, without its newline (line[n] can be read: the newline, or a NUL).
typedef void (*LogTailFn)(void *ctx, LogTailKind kind, const char *line, size_t n);

// Reads path from where t stopped and calls fn for each line that ended (in file order).
// give_up_s <= 0: never give up half a line. Returns 1 if the file grew (or half a line was
// given up), 0 if not, -1 if it cannot be opened as a regular file (errno set; ENOENT: not
// there yet). A FIFO or a device in its place is refused, never waited on.
int logtail_poll(LogTail *t, const char *path, size_t max_line, double give_up_s, int64_t now_us, LogTailFn fn,
                 void *ctx);
void logtail_free(LogTail *t);

#endif
