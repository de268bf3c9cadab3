// nolibs.c — tui, lexicon, lesson and web in a shardlab built without ncursesw, md4c and CivetWeb.
//
// The Makefile links this file instead of tui/ and web/ where their libraries' headers are
// missing and cannot be installed (a GPU node without root, an HPC cluster: DEPS=0), as it
// links common/cuda/nocuda.c where nvcc is missing. What needs only libc is the same program:
// `shardlab run` (the launcher, its progress line, its fault handling) and `shardlab grade`.
// The four commands left out say so in one line, with the command that installs what they
// need, and exit 2; `shardlab run` on a terminal (--ui auto or tui) says in one line that the
// dashboard is not in this build and shows rank 0's output with the progress line instead.
#include <stdio.h>

#include "lexicon.h"
#include "tui.h"
#include "web.h"

#define LACKING "this shardlab was built without ncursesw, md4c and CivetWeb (the Debian packages " \
                "libncurses-dev, libmd4c-dev, libmd4c-html0-dev and libcivetweb-dev)"
#define INSTALL "make deps installs them, then make builds it"

// The command's one line: which command, that it is missing, and how to get it.
static int left_out(const char *command) {
    fprintf(stderr, "shardlab %s: not in this build: %s; %s\n", command, LACKING, INSTALL);
    return 2;
}

int tui_main(int argc, char **argv) { (void)argc, (void)argv; return left_out("tui"); }
int lexicon_main(int argc, char **argv, const char *root) { (void)argc, (void)argv, (void)root; return left_out("lexicon"); }
int lesson_main(int argc, char **argv, const char *root) { (void)argc, (void)argv, (void)root; return left_out("lesson"); }
int web_main(int argc, char **argv, const char *root, const char *labs) {
    (void)argc, (void)argv, (void)root, (void)labs;
    return left_out("web");
}

// The launcher's dashboard: never opens, so the launcher shows rank 0's output instead.
Tui *tui_open(const char *run_dir, const TuiOptions *o, char *err, size_t errlen) {
    (void)run_dir, (void)o;
    snprintf(err, errlen, "the dashboard is not in this build: %s; %s", LACKING, INSTALL);
    return NULL;
}
int tui_tick(Tui *t, int64_t now_us) { (void)t, (void)now_us; return 0; }
int tui_wait_quit(Tui *t, const char *why, volatile sig_atomic_t *signals) { (void)t, (void)why, (void)signals; return 0; }
void tui_close(Tui *t) { (void)t; }
void tui_restore_terminal(void) {}
void tui_find_root(char *out, size_t n) { snprintf(out, n, "."); }
