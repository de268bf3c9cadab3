// sandbox.h — a student's code run where it can do no harm: the builds of a copy (make grade
// LABS=, make check LABS=), its graded runs (shardlab grade --labs), its checks (make check's
// driver, the web's "Check them"). The one place that says what the sandbox is.
//
// Inside, with bubblewrap (bwrap, what Flatpak uses):
//   - no network: a network namespace of its own, with only its own loopback;
//   - the system's programs and libraries read-only (/usr, the loader's cache, the compiler's
//     alternatives), the paths given by sandbox_read() read-only, those given by
//     sandbox_write() writable, a private /tmp and /dev/shm, a throwaway HOME (/tmp/home);
//     nothing else: no home folder, no other copy, no build but the one named;
//   - its own PID namespace: when the program ends, or its deadline does, every process it
//     started ends with it;
//   - limits: processes, CPU time, file size, address space (SANDBOX_* below);
//   - a deadline on the wall clock, kept by a process outside it (the keeper) that ends the
//     whole sandbox.
// Where bwrap cannot run (not installed, or no user namespaces), unshare from util-linux
// gives the namespaces without the file system's view; where neither can, only the limits,
// the deadline and the end of every process it started hold. Each says so once.
// SHARDLAB_SANDBOX=off runs a student's code without the sandbox (for debugging: it then runs
// with your rights), keeping only the deadline; =bwrap, =unshare or =limits ask for one.
#ifndef SHARDLAB_SANDBOX_H
#define SHARDLAB_SANDBOX_H

#include <sys/types.h>

enum { SANDBOX_MAX_PATHS = 16, SANDBOX_MAX_ENV = 16, SANDBOX_MAX_FDS = 8 };

// The limits, per process (RLIMIT_*): what a lab, a check or a compiler needs, with room.
#define SANDBOX_PROCS 512                   // processes and threads, beyond what our user runs now
#define SANDBOX_FILE_BYTES (4ull << 30)     // the largest file it may write
#define SANDBOX_MEM_BYTES (16ull << 30)     // address space (not under AddressSanitizer)
#define SANDBOX_TMPFS_BYTES (2ull << 30)    // its /tmp, and its /dev/shm
// CPU seconds per process: the deadline times the cores here (at least 60 s).

typedef struct {
    const char *what;                      // who starts it, for messages ("shardlab grade")
    const char *read[SANDBOX_MAX_PATHS];   // files and folders it may read
    int nread;
    const char *write[SANDBOX_MAX_PATHS];  // folders it may write (created when absent)
    int nwrite;
    const char *env[SANDBOX_MAX_ENV];      // NAME=VALUE set for it
    int nenv;
    int keep_fd[SANDBOX_MAX_FDS];          // descriptors it keeps beyond 0, 1 and 2
    int nkeep;
    int out_fd, err_fd;                    // its stdout and stderr (-1: ours); stdin is /dev/null
    int deadline_s;                        // then the whole sandbox is ended (0: none)
} Sandbox;

void sandbox_init(Sandbox *s, const char *what, int deadline_s);
// Each returns 0, or -1 when the list is full. A path that does not exist is absent inside.
int sandbox_read(Sandbox *s, const char *path);
int sandbox_write(Sandbox *s, const char *path);
int sandbox_setenv(Sandbox *s, const char *name_value);
int sandbox_keep_fd(Sandbox *s, int fd);

// Starts argv (argv[0] a path, or a name looked up on the sandbox's PATH) in the sandbox and
// returns the keeper's pid, for sandbox_wait(); or -1 (errno set). The keeper is our child;
// it ends the sandbox at the deadline, when it is told to (SIGTERM, SIGINT, SIGHUP), or when
// we die. Relative paths mean what they mean here: the sandbox starts in our folder.
pid_t sandbox_start(const Sandbox *s, char *const *argv);
// Waits for the keeper: the program's exit status (128 + a signal that ended it), 127 when it
// could not be started, or 124 with *timed_out = 1 when its deadline ended it.
int sandbox_wait(pid_t keeper, int *timed_out);
// Both.
int sandbox_run(const Sandbox *s, char *const *argv, int *timed_out);

// What a student's code runs in here: "bwrap", "unshare", "limits" or "off", and why not a
// stronger one into why ("" when bwrap runs). Tried once per process; the first call that
// finds less than bwrap says so on stderr, once, naming `what`.
const char *sandbox_mode(const char *what, char *why, size_t n);

#endif
