// launch.h — starting `shardlab run` from another command: the grader's reference runs and
// the runs the web server starts.
//
// Both run the launcher exactly as a person types it (`shardlab run LAB -n N --ui none ...
// --run-dir DIR`), so a run they start is the same run, in the same run directory, as one
// started by hand. What differs is around it, in LaunchOpts: where its output goes, which lab
// programs it runs, and whether it is left to run on its own.
#ifndef SHARDLAB_LAUNCH_H
#define SHARDLAB_LAUNCH_H

#include <sys/types.h>

typedef struct {
    const char *exe;       // the program to execute: the shardlab binary ("/proc/self/exe": this one)
    const char *argv0;     // its argv[0] (NULL: exe)
    const char *labs_dir;  // SHARDLAB_LABS for it (NULL: its default, the labs beside it)
    int out_fd;            // its stdout and stderr (-1: /dev/null); stdin is /dev/null
    int detach;            // 1: its own session, and none of our other descriptors (the web's runs)
    int timeout_s;         // launch_run_wait: how long it may run (0: as long as it takes); then
                           // SIGTERM (the launcher stops its ranks), SIGKILL 3 s later
} LaunchOpts;

enum { LAUNCH_MAX_ARGS = 64 };

// `exe run LAB -n N --ui none ARGS... --run-dir DIR` (args NULL-ended) into argv
// (LAUNCH_MAX_ARGS, NULL-ended; its strings are the caller's, and nbuf's 16 bytes hold N):
// the command launch_run() executes, for a caller that starts it otherwise (in a sandbox).
void launch_argv(const LaunchOpts *o, const char *lab, int n, char *const *args, const char *dir, char **argv,
                 char *nbuf);
// Starts `exe run LAB -n N --ui none ARGS... --run-dir DIR` (args NULL-ended) in a child
// process and returns its pid (the caller waits for it), or -1 with errno set.
pid_t launch_run(const LaunchOpts *o, const char *lab, int n, char *const *args, const char *dir);
// The same, waited for: the launcher's exit status, 128 + the signal that ended it, 127 when
// it could not be started, or 124 when it ran past o->timeout_s and was stopped.
int launch_run_wait(const LaunchOpts *o, const char *lab, int n, char *const *args, const char *dir);

#endif
