// launch.c — see launch.h.
#include "launch.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

void launch_argv(const LaunchOpts *o, const char *lab, int n, char *const *args, const char *dir, char **argv,
                 char *nbuf) {
    snprintf(nbuf, 16, "%d", n);
    char *head[] = {(char *)(o->argv0 ? o->argv0 : o->exe), "run", (char *)lab, "-n", nbuf, "--ui", "none"};
    int a = 0;
    for (; a < 7; a++) argv[a] = head[a];
    for (int i = 0; args && args[i] && a < LAUNCH_MAX_ARGS - 3; i++) argv[a++] = args[i];
    argv[a++] = "--run-dir";
    argv[a++] = (char *)dir;
    argv[a] = NULL;
}

pid_t launch_run(const LaunchOpts *o, const char *lab, int n, char *const *args, const char *dir) {
    char nbuf[16], *argv[LAUNCH_MAX_ARGS];
    launch_argv(o, lab, n, args, dir, argv, nbuf);
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
    int status, stopped = 0;
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        pid_t got = waitpid(pid, &status, o->timeout_s > 0 ? WNOHANG : 0);
        if (got == pid) break;
        if (got < 0 && errno != EINTR) return 127;
        if (got != 0) continue;
        struct timespec tick = {0, 10 * 1000 * 1000};
        nanosleep(&tick, NULL);
        clock_gettime(CLOCK_MONOTONIC, &now);
        double waited = (double)(now.tv_sec - t0.tv_sec) + 1e-9 * (double)(now.tv_nsec - t0.tv_nsec);
        if (!stopped && waited >= o->timeout_s) kill(pid, SIGTERM), stopped = 1;
        if (stopped == 1 && waited >= o->timeout_s + 3) kill(pid, SIGKILL), stopped = 2;
    }
    if (stopped) return 124;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
