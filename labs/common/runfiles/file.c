// file.c — see json.h: opening only regular files, for every reader of a run directory (a
// FIFO or a device in place of a log would make it wait forever), and a file read whole into
// a StrBuf.
#include "json.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int file_open_regular(const char *path) {
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {  // not even opened: opening a device may act
        errno = S_ISDIR(st.st_mode) ? EISDIR : FILE_NOT_REGULAR;
        return -1;
    }
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return -1;
    int ok = fstat(fd, &st) == 0, err = errno;
    if (!ok || !S_ISREG(st.st_mode)) {
        close(fd);
        errno = !ok ? err : S_ISDIR(st.st_mode) ? EISDIR : FILE_NOT_REGULAR;
        return -1;
    }
    return fd;
}

FILE *file_fopen_regular(const char *path) {
    int fd = file_open_regular(path);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "rb");
    if (fd >= 0 && !f) {
        int err = errno;
        close(fd);
        errno = err;
    }
    return f;
}

const char *file_error(int err) {
    return err == FILE_NOT_REGULAR ? "not a regular file (a FIFO, device or socket): refused, not read" : strerror(err);
}

int sb_read_file(StrBuf *sb, const char *path, size_t max) {
    FILE *f = file_fopen_regular(path);
    if (!f) return -1;
    sb_append(sb, "", 0);
    char buf[8192];
    size_t total = 0, got;
    int more = 0;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        if (total + got > max) {
            got = max - total;
            more = 1;
        }
        sb_append(sb, buf, got);
        total += got;
        if (more) break;
    }
    fclose(f);
    return more;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

void file_remove_tree(const char *dir) { nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS); }
