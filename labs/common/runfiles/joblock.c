// joblock.c — see joblock.h.
#include "joblock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

// Whether fd is a lock file to use: a regular file, and, to write into (!shared), one with one
// name. A folder may be someone else's; a lock file that is a hard link to another file (a
// symbolic one is never opened: O_NOFOLLOW) would have the holder's line written into that file.
static int plain_file(int fd, int shared) {
    struct stat st;
    return fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (shared || st.st_nlink == 1);
}

// What the lock file says of its holder: its first line, control characters shown as '?'
// (the file is in a folder anyone with access may have written).
static void say_holder(int fd, StrBuf *why) {
    char text[1024];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    text[n > 0 ? n : 0] = 0;
    size_t len = strcspn(text, "\n");
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)text[i] < 0x20 || text[i] == 0x7f) text[i] = '?';
    if (len) sb_printf(why, ": %.*s", (int)len, text);
    else sb_printf(why, " (its lock file does not say which)");
}

// "pid 4242 on host since 2026-12-02T10:00:00Z: build/labs/ddp --steps 5\n" into the lock file.
static int write_holder(int fd, char *const *argv) {
    StrBuf line;
    sb_init(&line);
    char host[256] = "?", when[32];
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    sb_printf(&line, "pid %d on %s since %s:", (int)getpid(), host, when);
    for (int i = 0; argv && argv[i]; i++) sb_printf(&line, " %s", argv[i]);
    sb_printf(&line, "\n");
    int ok = ftruncate(fd, 0) == 0;
    for (size_t done = 0; ok && done < line.len;) {
        ssize_t k = pwrite(fd, line.data + done, line.len - done, (off_t)done);
        if (k < 0 && errno == EINTR) continue;
        ok = k > 0;
        if (k == 0) errno = ENOSPC;
        done += k > 0 ? (size_t)k : 0;
    }
    int err = errno;
    sb_free(&line);
    errno = err;
    return ok ? 0 : -1;
}

int joblock_take(JobLock *l, const char *what, const char *dir, int shared, char *const *argv, StrBuf *why, int *busy) {
    l->fd = -1, l->shared = shared;
    *busy = 0;
    StrBuf path;
    sb_init(&path);
    sb_printf(&path, "%s/%s", dir, JOBLOCK_FILE);
    // A reader opens the lock file a writer made, and creates none: it changes nothing in the
    // folder it reads. Where none is (a folder saved before shardlab locked them), it holds
    // nothing: no writer of this version has been there.
    int flags = (shared ? O_RDONLY : O_RDWR | O_CREAT) | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
    int fd = open(path.data, flags, 0644);
    if (fd < 0 && shared && errno == ENOENT) return sb_free(&path), 0;
    int rc = -1;
    if (fd < 0) {
        sb_printf(why, "cannot open the lock file of %s %s: %s", what, path.data,
                  errno == ELOOP ? "it is a symbolic link (remove it)" : strerror(errno));
    } else if (!plain_file(fd, shared)) {
        sb_printf(why, "the lock file of %s %s is not a plain file of its own (a link?): remove it", what, path.data);
    } else if (flock(fd, (shared ? LOCK_SH : LOCK_EX) | LOCK_NB) != 0) {
        if (errno == EWOULDBLOCK) {
            *busy = 1;
            // Held shared (LOCK_SH would be granted): jobs that read it, which write no name.
            int readers = !shared && flock(fd, LOCK_SH | LOCK_NB) == 0;
            sb_printf(why, "%s %s is in use by another job", what, dir);
            if (readers) sb_printf(why, " that starts from its checkpoint (--resume): save elsewhere (--ckpt), or wait for it");
            else say_holder(fd, why);
        } else {
            sb_printf(why, "cannot lock %s: %s", path.data, strerror(errno));
        }
    } else if (!shared && write_holder(fd, argv) != 0) {
        sb_printf(why, "cannot write the lock file %s: %s", path.data, strerror(errno));
    } else {
        l->fd = fd, fd = -1, rc = 0;
    }
    if (fd >= 0) close(fd);  // (which lets go of whatever it held)
    sb_free(&path);
    return rc;
}

int joblock_adopt(JobLock *l, const char *what, const char *dir, int fd, StrBuf *why) {
    l->fd = -1, l->shared = 0;
    StrBuf path;
    sb_init(&path);
    sb_printf(&path, "%s/%s", dir, JOBLOCK_FILE);
    struct stat have, want;
    int rc = -1;
    if (fstat(fd, &have) != 0 || stat(path.data, &want) != 0 || have.st_dev != want.st_dev || have.st_ino != want.st_ino)
        sb_printf(why, "descriptor %d (%s) is not the lock of %s %s: start the ranks with shardlab run, or without %s",
                  fd, JOBLOCK_FD_ENV, what, dir, JOBLOCK_FD_ENV);
    // Granted at once when this open file holds it already (the launcher's, shared by fork).
    else if (flock(fd, LOCK_EX | LOCK_NB) != 0)
        sb_printf(why, "%s %s is held by another job, not by the launcher that started this rank", what, dir);
    else
        l->fd = fd, rc = 0, fcntl(fd, F_SETFD, FD_CLOEXEC);
    sb_free(&path);
    return rc;
}

void joblock_release(JobLock *l) {
    if (l->fd >= 0) close(l->fd);
    l->fd = -1;
}
