// test_logtail.c — the run logs' tail (labs/command/runs/logtail.h) against a file written in pieces.
//
// Proves: whole lines come out once, in order, whatever pieces they were written in (a line
// split over polls, and over the 64 KiB reads); half a line waits for its end; a line over
// max_line is reported as too long, never kept; half a line still after give_up_s is given up
// (and not before); a file that got shorter is read again from its start; a FIFO is refused
// at once, not waited on. Broken on purpose: emit() without the half line kept (the first
// two checks), or give-up ignoring its clock (the fourth), fail here.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "command/runs/logtail.h"
#include "test.h"

static char path[256];

typedef struct {
    char got[4096];
    int lines, too_long, cut_off;
    size_t longest;
} Seen;

static void on_line(void *arg, LogTailKind kind, const char *line, size_t n) {
    Seen *s = arg;
    if (kind == LOGTAIL_TOO_LONG) s->too_long++;
    else if (kind == LOGTAIL_CUT_OFF) s->cut_off++;
    else {
        s->lines++;
        if (n > s->longest) s->longest = n;
        if (n < 64) snprintf(s->got + strlen(s->got), sizeof s->got - strlen(s->got), "[%.*s]", (int)n, line);
    }
}

static void append(const char *text, size_t n) {
    FILE *f = fopen(path, "a");
    fwrite(text, 1, n, f);
    fclose(f);
}

int main(void) {
    snprintf(path, sizeof path, "/tmp/shardlab-test-logtail-%d", (int)getpid());
    unlink(path);
    LogTail t = {0};
    Seen s = {0};
    EXPECT(logtail_poll(&t, path, 100, 0, 0, on_line, &s) == -1 && errno == ENOENT, "no file yet: -1, ENOENT");

    append("one\ntw", 6);
    int grew = logtail_poll(&t, path, 100, 0, 0, on_line, &s);
    append("o\nthr", 5);
    logtail_poll(&t, path, 100, 0, 0, on_line, &s);
    append("ee\n", 3);
    logtail_poll(&t, path, 100, 0, 0, on_line, &s);
    int quiet = logtail_poll(&t, path, 100, 0, 0, on_line, &s);
    EXPECT(grew == 1 && quiet == 0 && !strcmp(s.got, "[one][two][three]") && s.lines == 3,
           "lines written in pieces come out whole, once, in order: %s", s.got);

    // A line longer than a read (64 KiB), and one longer than max_line.
    size_t big = 200000;
    char *text = malloc(big + 1);
    memset(text, 'x', big), text[big - 1] = '\n';
    append(text, big);
    memset(&s, 0, sizeof s);
    logtail_poll(&t, path, LOGTAIL_MAX_LINE, 0, 0, on_line, &s);
    EXPECT(s.lines == 1 && s.longest == big - 1 && s.too_long == 0, "a line over several reads comes out whole (%zu bytes)",
           s.longest);
    append(text, big);
    memset(&s, 0, sizeof s);
    logtail_poll(&t, path, 1000, 0, 0, on_line, &s);
    EXPECT(s.lines == 0 && s.too_long == 1 && t.partial_len == 0, "one over max_line is reported too long, not kept");

    // Half a line: given up only after give_up_s without growing.
    append("half", 4);
    memset(&s, 0, sizeof s);
    logtail_poll(&t, path, 100, 2, 1000000, on_line, &s);
    logtail_poll(&t, path, 100, 2, 2500000, on_line, &s);
    int before = s.cut_off;
    grew = logtail_poll(&t, path, 100, 2, 3500000, on_line, &s);
    EXPECT(before == 0 && s.cut_off == 1 && grew == 1 && s.lines == 0, "half a line that stopped growing is given up once "
           "give_up_s (2 s) has passed: not 1.5 s after, but 2.5 s after (%d, then %d)", before, s.cut_off);

    // Shorter: read again from the start.
    FILE *f = fopen(path, "w");
    fputs("fresh\n", f);
    fclose(f);
    memset(&s, 0, sizeof s);
    logtail_poll(&t, path, 100, 0, 0, on_line, &s);
    EXPECT(!strcmp(s.got, "[fresh]"), "a file that got shorter is read from its start: %s", s.got);
    logtail_free(&t);

    unlink(path);
    mkfifo(path, 0600);
    LogTail u = {0};
    EXPECT(logtail_poll(&u, path, 100, 0, 0, on_line, &s) == -1, "a FIFO in its place is refused at once");
    unlink(path);
    free(text);
    return test_done();
}
