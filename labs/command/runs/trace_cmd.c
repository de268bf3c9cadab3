// trace_cmd.c — `shardlab trace RUN_DIR [-o FILE]` (trace.h): its arguments, where the
// trace goes, and the one line it says.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/harness/check.h"
#include "trace.h"

static const char *TRACE_USAGE =
    "usage: shardlab trace RUN_DIR [-o FILE]\n"
    "\n"
    "A run's timeline as Chrome trace-event JSON, for ui.perfetto.dev or chrome://tracing: each\n"
    "rank a process, its compute, communication and checkpoint spans on their own threads (the\n"
    "span's step, bytes, layer, micro-batch in its args), its memory by category and its loss\n"
    "per step as counters. Times are the ranks' wall clock, from the run's first span.\n"
    "  -o FILE   where to write it (default RUN_DIR/trace.json; '-': standard output)\n"
    "Lines of the logs that are not events of the schema are skipped and counted.\n"
    "Exit status: 0 written, 1 the run cannot be read or the file not written, 2 bad arguments.\n";

int trace_main(int argc, char **argv) {
    const char *prog = "shardlab trace", *dir = NULL, *file = NULL;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) return fputs(TRACE_USAGE, stdout), 0;
        if (!strcmp(a, "-o")) {
            if (i + 1 >= argc || !argv[i + 1][0]) usage_error(prog, "-o needs a file name ('-': standard output)");
            file = argv[++i];
        } else if (a[0] == '-' && a[1]) {
            usage_error(prog, "unknown option '%s'", a);
        } else if (dir) {
            usage_error(prog, "one run directory at a time ('%s' and '%s')", dir, a);
        } else {
            dir = a;
        }
    }
    if (!dir) usage_error(prog, "expected a run directory (runs/<lab>-<time>-<hex>)");
    char path[4200];
    if (!file) snprintf(path, sizeof path, "%s/trace.json", dir), file = path;
    int to_stdout = strcmp(file, "-") == 0;

    StrBuf out;
    sb_init(&out);
    TraceStats st;
    char err[600];
    if (trace_run(dir, &out, &st, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s: %s\n", prog, dir, err);
        sb_free(&out);
        return 1;
    }
    FILE *f = to_stdout ? stdout : fopen(file, "w");
    int ok = f && fwrite(out.data, 1, out.len, f) == out.len;
    ok = (f && (to_stdout ? fflush(f) : fclose(f)) == 0) && ok;
    sb_free(&out);
    if (!ok) {
        fprintf(stderr, "%s: cannot write %s: %s\n", prog, to_stdout ? "to standard output" : file, strerror(errno));
        return 1;
    }
    // What was left out, in one line: the counts that are not 0, then the first thing skipped.
    StrBuf w;
    sb_init(&w);
    if (st.skipped_lines) sb_printf(&w, ", %ld line(s) skipped", st.skipped_lines);
    if (st.ranks_missing) sb_printf(&w, ", %ld rank log(s) unread", st.ranks_missing);
    if (st.spans_dropped) sb_printf(&w, ", %ld span(s) or step(s) past the trace's %d left out", st.spans_dropped, TRACE_MAX_SPANS);
    if (st.steps_untimed) sb_printf(&w, ", %ld step(s) without a span to place them in time", st.steps_untimed);
    if (w.len) fprintf(stderr, "%s: warning: %s%s%s\n", prog, w.data + 2, st.problem[0] ? "; the first: " : "", st.problem);
    sb_free(&w);
    // With -o -, stdout is the trace: the line goes to stderr.
    fprintf(to_stdout ? stderr : stdout,
            "%s: wrote %s: %ld events (%ld spans, %ld counters, %ld metadata) from %d rank(s); open it in "
            "ui.perfetto.dev or chrome://tracing\n",
            prog, to_stdout ? "the trace to standard output" : file, st.events, st.spans, st.counters, st.metadata,
            st.world);
    return 0;
}
