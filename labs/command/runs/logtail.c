// logtail.c — see logtail.h.
#include "logtail.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/harness/check.h"
#include "common/runfiles/json.h"

#define READ_CHUNK (64 * 1024)  // on the heap: CivetWeb's worker threads have small stacks

// Adds text[0..n) to the half line (keeping at most max bytes of it).
static void keep(LogTail *t, const char *text, size_t n, size_t max) {
    if (t->partial_len + n <= max) {
        t->partial = realloc_check(t->partial, t->partial_len + n + 1);
        memcpy(t->partial + t->partial_len, text, n);
        t->partial[t->partial_len + n] = 0;
    }
    t->partial_len += n;
}

// The line that ends here: the half line kept, or text[0..n) whole.
static void emit(LogTail *t, const char *text, size_t n, size_t max, LogTailFn fn, void *ctx) {
    if (t->partial_len > 0) {
        keep(t, text, n, max);
        if (t->partial_len <= max) fn(ctx, LOGTAIL_LINE, t->partial, t->partial_len);
        else fn(ctx, LOGTAIL_TOO_LONG, NULL, t->partial_len);
        t->partial_len = 0;
    } else if (n <= max) {
        fn(ctx, LOGTAIL_LINE, text, n);
    } else {
        fn(ctx, LOGTAIL_TOO_LONG, NULL, n);
    }
}

int logtail_poll(LogTail *t, const char *path, size_t max_line, double give_up_s, int64_t now_us, LogTailFn fn,
                 void *ctx) {
    int fd = file_open_regular(path);  // (json.h: a FIFO would block here)
    if (fd < 0) return -1;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size < t->offset) t->offset = 0, t->partial_len = 0;  // shorter: start over
    int grew = 0;
    char *buf = malloc_check(READ_CHUNK);
    ssize_t got;
    while ((got = pread(fd, buf, READ_CHUNK, t->offset)) > 0) {
        grew = 1;
        t->offset += got;
        size_t n = (size_t)got, used = 0;
        for (const char *nl; (nl = memchr(buf + used, '\n', n - used)) != NULL; used = (size_t)(nl - buf) + 1)
            emit(t, buf + used, (size_t)(nl - (buf + used)), max_line, fn, ctx);
        if (used < n) keep(t, buf + used, n - used, max_line);  // the rest is half a line
    }
    free(buf);
    close(fd);
    // Half a line that has not grown for give_up_s: its writer died mid-line.
    if (t->partial_len == 0 || grew || t->partial_since_us <= 0 || give_up_s <= 0) {  // <= 0: the clock starts now
        t->partial_since_us = now_us;
    } else if (now_us - t->partial_since_us > (int64_t)(give_up_s * 1e6)) {
        fn(ctx, LOGTAIL_CUT_OFF, NULL, t->partial_len);
        t->partial_len = 0;
        grew = 1;
    }
    return grew;
}

void logtail_free(LogTail *t) {
    free(t->partial);
    *t = (LogTail){0};
}
