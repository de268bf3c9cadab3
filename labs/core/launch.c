// launch.c — see launch.h.
#include "launch.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

enum { LAUNCH_MAX_ARGS = 64 };

pid_t launch_run(const LaunchOpts *o, const char *lab, int n, char *const *args, const char *dir) {
    char nbuf[16];
    snprintf(nbuf, sizeof nbuf, "%d", n);
    char *argv[LAUNCH_MAX_ARGS] = {(char *)(o->argv0 ? o->argv0 : o->exe), "run", (char *)lab, "-n", nbuf, "--ui",
                                   "none"};
    int a = 7;
    for (int i = 0; args && args[i] && a < LAUNCH_MAX_ARGS - 3; i++) argv[a++] = args[i];
    argv[a++] = "--run-dir";
    argv[a++] = (char *)dir;
    argv[a] = NULL;
    fflush(NULL);  // nothing buffered here is written twice
    pid_t pid = fork();
    if (pid != 0) return pid;
    // The child: its descriptors, then the launcher.
    if (o->detach) setsid();  // its own session: a Ctrl-C meant for us is not meant for the run
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) dup2(null, 0);
    int out = o->out_fd >= 0 ? o->out_fd : null;
    if (out >= 0) dup2(out, 1), dup2(out, 2);
    if (o->detach)
        for (int fd = 3; fd < 1024; fd++) close(fd);
    if (o->labs_dir) setenv("SHARDLAB_LABS", o->labs_dir, 1);
    execv(o->exe, argv);
    _exit(127);
}

int launch_run_wait(const LaunchOpts *o, const char *lab, int n, char *const *args, const char *dir) {
    pid_t pid = launch_run(o, lab, n, args, dir);
    if (pid < 0) return 127;
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return 127;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
