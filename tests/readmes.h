// readmes.h — the READMEs a reader meets: README.md, then each folder's.
//
// Defines: readme_paths().
//
// README.md is the front door; the reference lives beside what it documents, in a README.md
// of each folder (labs/README.md, labs/command/grade/README.md, tui/README.md, ...). The tests that
// hold the text to the code (test_commands, test_figures, test_lexicon) read them all, so a
// section moved from one README to another stays checked. They are found, not listed: a
// README added to one of these folders is read without touching a test.
#ifndef SHARDLAB_READMES_H
#define SHARDLAB_READMES_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

// The folders whose READMEs document the project, searched to any depth.
static const char *const README_DIRS[] = {"labs", "lessons", "lexicon", "tests", "tui", "web"};

#define README_MAX 32

static int readme_by_path(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// Every README.md under root/rel, appended to names as paths from root. Folders that hold no
// documentation (dot-folders, node_modules, build output) are skipped.
static void readme_walk(const char *root, const char *rel, char *names[], int *n) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/%s", root, rel);
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d)) && *n < README_MAX;) {
        if (e->d_name[0] == '.' || !strcmp(e->d_name, "node_modules") || !strcmp(e->d_name, "build")) continue;
        char path[4400], sub[1200];
        snprintf(sub, sizeof sub, "%s/%s", rel, e->d_name);
        snprintf(path, sizeof path, "%s/%s", root, sub);
        struct stat st;
        if (lstat(path, &st) != 0) continue;
        if (S_ISDIR(st.st_mode))
            readme_walk(root, sub, names, n);
        else if (S_ISREG(st.st_mode) && !strcmp(e->d_name, "README.md"))
            names[(*n)++] = strdup(sub);
    }
    if (d) closedir(d);
}

// README.md first, then every folder's README.md in order of path (labs/README.md,
// labs/command/grade/README.md, lessons/README.md, ...): at most max paths, from root, each malloc'd.
// Returns how many; README.md is counted only if it is there.
static int readme_paths(const char *root, char *names[], int max) {
    int n = 0;
    char top[4200];
    snprintf(top, sizeof top, "%s/README.md", root);
    struct stat st;
    if (max > 0 && stat(top, &st) == 0 && S_ISREG(st.st_mode)) names[n++] = strdup("README.md");
    char *found[README_MAX];
    int nfound = 0;
    for (size_t i = 0; i < sizeof README_DIRS / sizeof README_DIRS[0]; i++)
        readme_walk(root, README_DIRS[i], found, &nfound);
    qsort(found, (size_t)nfound, sizeof found[0], readme_by_path);
    for (int i = 0; i < nfound; i++) {
        if (n < max) names[n++] = found[i];
        else free(found[i]);
    }
    return n;
}

#endif
