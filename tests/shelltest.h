// shelltest.h — for tests that drive shell commands: scripts, make, python3.
//
// Defines: test_sh(), test_put_file().
#ifndef SHARDLAB_SHELLTEST_H
#define SHARDLAB_SHELLTEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

// Runs cmd with sh, in folder dir unless dir is NULL; its stdout and stderr together
// (malloc'd, the first 128 KiB), and its exit status in *status (-1 if it did not exit).
// cmd may end in a here-document: a newline follows it before the closing parenthesis.
static inline char *test_sh(const char *dir, const char *cmd, int *status) {
    size_t need = strlen(cmd) + (dir ? strlen(dir) : 0) + 32;
    char *full = malloc(need);
    if (dir) snprintf(full, need, "cd '%s' && (%s\n) 2>&1", dir, cmd);
    else snprintf(full, need, "(%s\n) 2>&1", cmd);
    FILE *p = popen(full, "r");
    free(full);
    size_t cap = 1 << 17;
    char *out = calloc(1, cap);
    *status = -1;
    if (!p) return out;
    size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    int w = pclose(p);
    *status = WIFEXITED(w) ? WEXITSTATUS(w) : -1;
    return out;
}

// Creates path (and its folders) holding text; mode 0755 when exec.
static inline void test_put_file(const char *path, const char *text, int exec) {
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
    if (system(cmd) != 0) printf("# mkdir for %s failed\n", path);
    FILE *f = fopen(path, "w");
    if (!f) {
        printf("# cannot write %s\n", path);
        return;
    }
    fputs(text, f);
    fclose(f);
    if (exec) chmod(path, 0755);
}

#endif
