// sandbox.c — see sandbox.h. Three parts: the sandbox's command line (bwrap's, or unshare's),
// which sandbox works here (tried once), and the keeper, the process between us and the
// sandbox that keeps its deadline and ends everything in it.
//
//   caller ── keeper ── bwrap ── bwrap's init (PID 1 of a namespace) ── the program ── ...
//               │                  (--die-with-parent: gone when the keeper is)
//               └ a subreaper: whatever is orphaned below it comes back to it, to be ended
#include "sandbox.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

// AddressSanitizer reserves terabytes of address space for its shadow memory, so a sanitized
// build (the tests' shardlab, whose launcher runs in the sandbox) sets no address-space limit.
#if defined(__SANITIZE_ADDRESS__)
#define SANDBOX_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANDBOX_UNDER_ASAN 1
#endif
#endif
#ifndef SANDBOX_UNDER_ASAN
#define SANDBOX_UNDER_ASAN 0
#endif

#define SANDBOX_HOME "/tmp/home"
#define SANDBOX_PATH "/usr/local/bin:/usr/bin:/bin"

void sandbox_init(Sandbox *s, const char *what, int deadline_s) {
    memset(s, 0, sizeof *s);
    s->what = what;
    s->out_fd = s->err_fd = -1;
    s->deadline_s = deadline_s;
}

static int add(const char **list, int *n, const char *item) {
    if (*n >= SANDBOX_MAX_PATHS) return -1;
    list[(*n)++] = item;
    return 0;
}
int sandbox_read(Sandbox *s, const char *path) { return add(s->read, &s->nread, path); }
int sandbox_write(Sandbox *s, const char *path) { return add(s->write, &s->nwrite, path); }
int sandbox_setenv(Sandbox *s, const char *name_value) {
    if (s->nenv >= SANDBOX_MAX_ENV || !strchr(name_value, '=')) return -1;
    s->env[s->nenv++] = name_value;
    return 0;
}
int sandbox_keep_fd(Sandbox *s, int fd) {
    if (s->nkeep >= SANDBOX_MAX_FDS) return -1;
    s->keep_fd[s->nkeep++] = fd;
    return 0;
}

// ---- a growing argv -------------------------------------------------------------------------

typedef struct {
    char **v;
    int n, cap;
} Argv;

static void push(Argv *a, const char *s) {
    if (a->n + 2 > a->cap) {
        int cap = a->cap ? 2 * a->cap : 64;
        char **v = realloc(a->v, (size_t)cap * sizeof *v);
        if (!v) return;  // (out of memory: the command is cut short and fails to start)
        a->v = v, a->cap = cap;
    }
    a->v[a->n++] = strdup(s);
    a->v[a->n] = NULL;
}
static void push2(Argv *a, const char *x, const char *y) { push(a, x), push(a, y); }
static void push3(Argv *a, const char *x, const char *y, const char *z) { push(a, x), push(a, y), push(a, z); }
static void argv_free(Argv *a) {
    for (int i = 0; i < a->n; i++) free(a->v[i]);
    free(a->v);
    memset(a, 0, sizeof *a);
}

// ---- paths ------------------------------------------------------------------------------------

// path made absolute against our folder, with "." and ".." taken out as text (what a relative
// path names from here, even through a link): "build/x/../y" from /src is /src/build/y.
static void absolute(const char *path, char *out, size_t n) {
    char joined[2 * PATH_MAX], cwd[PATH_MAX];
    if (path[0] == '/' || !getcwd(cwd, sizeof cwd)) snprintf(joined, sizeof joined, "%s", path);
    else snprintf(joined, sizeof joined, "%s/%s", cwd, path);
    char *parts[PATH_MAX / 2], *save = NULL;
    int np = 0;
    for (char *t = strtok_r(joined, "/", &save); t; t = strtok_r(NULL, "/", &save)) {
        if (!strcmp(t, ".")) continue;
        if (!strcmp(t, "..")) {
            np -= np > 0;
            continue;
        }
        if (np < (int)(sizeof parts / sizeof *parts)) parts[np++] = t;
    }
    size_t used = 0;
    out[0] = 0;
    for (int i = 0; i < np && used < n; i++) used += (size_t)snprintf(out + used, n - used, "/%s", parts[i]);
    if (!np) snprintf(out, n, "/");
}

static void make_dirs(const char *path) {
    char p[PATH_MAX];
    snprintf(p, sizeof p, "%s", path);
    for (char *q = p + 1; *q; q++)
        if (*q == '/') *q = 0, mkdir(p, 0755), *q = '/';
    mkdir(p, 0755);
}

// The first of `name` found on our PATH (or in /usr/bin) that we may execute, into out.
static int find_program(const char *name, char *out, size_t n) {
    const char *path = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s:/usr/bin:/bin", path && *path ? path : "");
    char *save = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(out, n, "%s/%s", d, name);
        if (access(out, X_OK) == 0) return 0;
    }
    out[0] = 0;
    return -1;
}

// ---- which sandbox works here -----------------------------------------------------------------

typedef enum { MODE_UNSET, MODE_BWRAP, MODE_UNSHARE, MODE_LIMITS, MODE_OFF } Mode;
static const char *const MODE_NAMES[] = {"", "bwrap", "unshare", "limits", "off"};
static Mode mode;
static char mode_why[1024];
static char bwrap_path[PATH_MAX], unshare_path[PATH_MAX], prlimit_path[PATH_MAX];

static void build_argv(Mode m, const Sandbox *s, char *const *argv, Argv *a);
static rlim_t process_limit(void);

// Runs the sandbox m around `true`: 0 when it works, else -1 with what it said in why.
static int probe(Mode m, char *why, size_t n) {
    Sandbox s;
    sandbox_init(&s, "probe", 0);
    char *argv[] = {"true", NULL};
    Argv a = {0};
    build_argv(m, &s, argv, &a);
    int fds[2];
    if (!a.v || pipe(fds) != 0) return snprintf(why, n, "cannot start it: %s", strerror(errno)), argv_free(&a), -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        int null = open("/dev/null", O_RDWR);
        dup2(null, 0), dup2(null, 1), dup2(fds[1], 2);
        close(fds[0]);
        execv(a.v[0], a.v);
        dprintf(2, "%s: %s", a.v[0], strerror(errno));
        _exit(127);
    }
    close(fds[1]);
    char said[512] = "";
    size_t used = 0;
    ssize_t k;
    while ((k = read(fds[0], said + used, sizeof said - 1 - used)) > 0) used += (size_t)k;
    said[used] = 0;
    close(fds[0]);
    int status = 0;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    argv_free(&a);
    if (pid > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0) return 0;
    said[strcspn(said, "\n")] = 0;
    snprintf(why, n, "%s", said[0] ? said : pid < 0 ? strerror(errno) : "it failed");
    return -1;
}

const char *sandbox_mode(const char *what, char *why, size_t n) {
    if (mode == MODE_UNSET) {
        find_program("bwrap", bwrap_path, sizeof bwrap_path);
        find_program("unshare", unshare_path, sizeof unshare_path);
        find_program("prlimit", prlimit_path, sizeof prlimit_path);
        const char *want = getenv("SHARDLAB_SANDBOX");
        if (!want || !*want) want = "auto";
        char bwrap_why[300] = "", unshare_why[300] = "";
        if (!strcmp(want, "off")) mode = MODE_OFF;
        else if (!strcmp(want, "limits")) mode = MODE_LIMITS;
        else if (!strcmp(want, "bwrap") || !strcmp(want, "unshare")) {
            mode = !strcmp(want, "bwrap") ? MODE_BWRAP : MODE_UNSHARE;
            // Asked for and not installed: each run then fails to start, naming the program.
            if (!bwrap_path[0]) snprintf(bwrap_path, sizeof bwrap_path, "bwrap");
            if (!unshare_path[0]) snprintf(unshare_path, sizeof unshare_path, "unshare");
        } else {
            if (strcmp(want, "auto"))
                fprintf(stderr, "%s: SHARDLAB_SANDBOX=%s is none of auto, bwrap, unshare, limits, off: auto it is\n", what,
                        want);
            if (!bwrap_path[0]) snprintf(bwrap_why, sizeof bwrap_why, "not installed");
            if (!unshare_path[0]) snprintf(unshare_why, sizeof unshare_why, "not installed");
            mode = bwrap_path[0] && probe(MODE_BWRAP, bwrap_why, sizeof bwrap_why) == 0       ? MODE_BWRAP
                   : unshare_path[0] && probe(MODE_UNSHARE, unshare_why, sizeof unshare_why) == 0 ? MODE_UNSHARE
                                                                                                  : MODE_LIMITS;
        }
        const char *hint = "HINT: make deps installs bubblewrap; it needs user namespaces (sysctl "
                           "kernel.unprivileged_userns_clone=1; on Ubuntu, AppArmor's profile for bwrap)";
        if (mode == MODE_OFF)
            snprintf(mode_why, sizeof mode_why, "SHARDLAB_SANDBOX=off: a student's code runs with your rights, your files "
                     "and your network; only its deadline holds");
        else if (mode == MODE_UNSHARE && !strcmp(want, "auto"))
            snprintf(mode_why, sizeof mode_why, "bwrap cannot run here (%.200s): a student's code runs in namespaces of its "
                     "own (unshare: no network, every process it starts ends with it), but it can read and write your "
                     "files. %s", bwrap_why, hint);
        else if (mode == MODE_LIMITS && !strcmp(want, "auto"))
            snprintf(mode_why, sizeof mode_why, "no sandbox works here (bwrap: %.200s; unshare: %.200s): a student's code runs "
                     "with your rights, your files and your network, under its limits and deadline only. %s", bwrap_why,
                     unshare_why, hint);
        else if (mode != MODE_BWRAP)
            snprintf(mode_why, sizeof mode_why, "SHARDLAB_SANDBOX=%s: a student's code runs %s", want,
                     mode == MODE_UNSHARE ? "in namespaces of its own, seeing your files"
                                          : "with your rights, under its limits and deadline only");
        if (mode_why[0]) fprintf(stderr, "%s: %s\n", what, mode_why);
    }
    if (why) snprintf(why, n, "%s", mode_why);
    return MODE_NAMES[mode];
}

// ---- the command line ---------------------------------------------------------------------------

// The variables a student's code gets from ours (every other one stays out: a token, an agent's
// socket): the locale, the sanitizers' options, make's (its jobs, a CC given to make), and
// shardlab's own (SHARDLAB_TIMEOUT_S, the tests' SHARDLAB_TEST_*).
static int passed_on(const char *name_value) {
    static const char *const NAMES[] = {"LANG", "LC_ALL", "LC_CTYPE", "LC_MESSAGES", "TZ", "ASAN_OPTIONS",
                                        "UBSAN_OPTIONS", "LSAN_OPTIONS", "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "CC",
                                        "CXX", "CUDA_VISIBLE_DEVICES"};
    if (!strncmp(name_value, "SHARDLAB_", 9)) return 1;
    size_t len = strcspn(name_value, "=");
    for (size_t i = 0; i < sizeof NAMES / sizeof *NAMES; i++)
        if (strlen(NAMES[i]) == len && !strncmp(NAMES[i], name_value, len)) return 1;
    return 0;
}

typedef struct {
    char src[PATH_MAX], dest[PATH_MAX];
    int rw;
} Bind;

static int by_depth(const void *x, const void *y) {
    const Bind *a = x, *b = y;
    size_t la = strlen(a->dest), lb = strlen(b->dest);
    return la != lb ? (la < lb ? -1 : 1) : a->rw - b->rw;
}

// path as it reads from here and as it really is (a link resolved): bound at both.
static int add_bind(Bind *binds, int n, int max, const char *path, int rw) {
    char real[PATH_MAX], abs[PATH_MAX];
    if (rw) make_dirs(path);
    if (!realpath(path, real)) return n;  // absent here: absent inside
    absolute(path, abs, sizeof abs);
    const char *dests[2] = {abs, real};
    for (int i = 0; i < 2 && n < max; i++) {
        if (i == 1 && !strcmp(real, abs)) break;
        snprintf(binds[n].src, sizeof binds[n].src, "%s", real);
        snprintf(binds[n].dest, sizeof binds[n].dest, "%s", dests[i]);
        binds[n++].rw = rw;
    }
    return n;
}

static void push_env(Argv *a, const Sandbox *s) {
    push3(a, "--setenv", "PATH", SANDBOX_PATH);
    push3(a, "--setenv", "HOME", SANDBOX_HOME);
    push3(a, "--setenv", "TMPDIR", "/tmp");
    for (char **e = environ; e && *e; e++) {
        if (!passed_on(*e)) continue;
        char name[256];
        size_t len = strcspn(*e, "=");
        if (len >= sizeof name) continue;
        snprintf(name, sizeof name, "%.*s", (int)len, *e);
        push3(a, "--setenv", name, *e + len + 1);
    }
    for (int i = 0; i < s->nenv; i++) {
        char name[256];
        size_t len = strcspn(s->env[i], "=");
        if (len >= sizeof name) continue;
        snprintf(name, sizeof name, "%.*s", (int)len, s->env[i]);
        push3(a, "--setenv", name, s->env[i] + len + 1);
    }
}

// bwrap's view of the file system: the system read-only, a private /tmp, /dev/shm, /proc and
// /dev, the paths asked for (each under its parents: shorter paths are bound first), and
// the rest of / an empty, read-only tree.
static void bwrap_argv(const Sandbox *s, Argv *a) {
    push(a, bwrap_path);
    // --unshare-all: user, IPC, PID, network, UTS and cgroup namespaces of its own.
    push3(a, "--unshare-all", "--die-with-parent", "--new-session");
    static const char *const TOP[] = {"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"};
    for (size_t i = 0; i < sizeof TOP / sizeof *TOP; i++) {
        struct stat st;
        char target[PATH_MAX];
        if (lstat(TOP[i], &st) != 0) continue;
        ssize_t k = S_ISLNK(st.st_mode) ? readlink(TOP[i], target, sizeof target - 1) : -1;
        if (k > 0) target[k] = 0, push3(a, "--symlink", target, TOP[i]);
        else if (S_ISDIR(st.st_mode)) push3(a, "--ro-bind", TOP[i], TOP[i]);
    }
    push3(a, "--ro-bind", "/usr", "/usr");
    // What the loader and the compiler read in /etc: the library cache, cc's alternative.
    static const char *const ETC[] = {"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
                                      "/etc/localtime"};
    for (size_t i = 0; i < sizeof ETC / sizeof *ETC; i++) push3(a, "--ro-bind-try", ETC[i], ETC[i]);
    push2(a, "--proc", "/proc");
    push2(a, "--dev", "/dev");
    char size[32];
    snprintf(size, sizeof size, "%llu", SANDBOX_TMPFS_BYTES);
    push2(a, "--size", size), push2(a, "--tmpfs", "/dev/shm");
    push2(a, "--size", size), push2(a, "--tmpfs", "/tmp");
    push2(a, "--dir", SANDBOX_HOME);
    enum { MAX_BINDS = 4 * SANDBOX_MAX_PATHS };
    Bind *binds = calloc(MAX_BINDS, sizeof *binds);
    int nb = 0;
    for (int i = 0; binds && i < s->nread; i++) nb = add_bind(binds, nb, MAX_BINDS, s->read[i], 0);
    for (int i = 0; binds && i < s->nwrite; i++) nb = add_bind(binds, nb, MAX_BINDS, s->write[i], 1);
    if (binds) qsort(binds, (size_t)nb, sizeof *binds, by_depth);
    for (int i = 0; i < nb; i++) push3(a, binds[i].rw ? "--bind" : "--ro-bind", binds[i].src, binds[i].dest);
    free(binds);
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof cwd) && strcmp(cwd, "/")) push2(a, "--dir", cwd);
    push2(a, "--remount-ro", "/");
    if (cwd[0] == '/') push2(a, "--chdir", cwd);
    push(a, "--clearenv");
    push_env(a, s);
    push(a, "--");
}

// The whole command: the sandbox's, then (in a user namespace, where the count is the
// sandbox's own) prlimit's process limit, then argv.
static void build_argv(Mode m, const Sandbox *s, char *const *argv, Argv *a) {
    if (m == MODE_BWRAP) bwrap_argv(s, a);
    if (m == MODE_UNSHARE) {
        push(a, unshare_path);
        push3(a, "--user", "--map-root-user", "--net");
        push3(a, "--pid", "--fork", "--kill-child");
        push3(a, "--mount", "--mount-proc", "--ipc");
        push2(a, "--uts", "--");
    }
    if ((m == MODE_BWRAP || m == MODE_UNSHARE) && prlimit_path[0]) {
        char nproc[64];
        rlim_t n = process_limit();
        snprintf(nproc, sizeof nproc, "--nproc=%llu:%llu", (unsigned long long)n, (unsigned long long)n);
        push3(a, prlimit_path, nproc, "--");
    }
    for (int i = 0; argv[i]; i++) push(a, argv[i]);
}

// ---- the keeper -----------------------------------------------------------------------------------

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void lower_limit(int resource, rlim_t soft, rlim_t hard) {
    struct rlimit now;
    if (getrlimit(resource, &now) != 0) return;
    struct rlimit want = {soft < now.rlim_max ? soft : now.rlim_max, hard < now.rlim_max ? hard : now.rlim_max};
    setrlimit(resource, &want);
}

// Threads our user runs now.
static long user_threads(void) {
    long count = 0;
    DIR *d = opendir("/proc");
    char path[300], line[256];
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        snprintf(path, sizeof path, "/proc/%s/status", e->d_name);
        FILE *f = fopen(path, "r");
        unsigned uid = (unsigned)-1;
        long threads = 0;
        while (f && fgets(line, sizeof line, f)) sscanf(line, "Uid: %u", &uid), sscanf(line, "Threads: %ld", &threads);
        if (f) fclose(f);
        if (uid == (unsigned)getuid()) count += threads;
    }
    if (d) closedir(d);
    return count;
}

// RLIMIT_NPROC counts every thread of our user: outside a user namespace, and inside one on
// kernels before 5.14. So the room is on top of what runs now. (Root is exempt.)
static rlim_t process_limit(void) { return (rlim_t)SANDBOX_PROCS + (rlim_t)(getuid() ? user_threads() : 0); }

static void set_limits(Mode m, int deadline_s) {
    if (m == MODE_OFF) return;
    if (deadline_s > 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        rlim_t cpu = (rlim_t)deadline_s * (rlim_t)(cores > 0 ? cores : 1);
        if (cpu < 60) cpu = 60;
        lower_limit(RLIMIT_CPU, cpu, cpu + 5);  // SIGXCPU, then SIGKILL 5 s later
    }
    lower_limit(RLIMIT_FSIZE, SANDBOX_FILE_BYTES, SANDBOX_FILE_BYTES);
    lower_limit(RLIMIT_CORE, 0, 0);
    if (!SANDBOX_UNDER_ASAN) lower_limit(RLIMIT_AS, SANDBOX_MEM_BYTES, SANDBOX_MEM_BYTES);
    // With namespaces, prlimit sets it inside the user namespace (set here, before it, it
    // would cap the namespace's creation as well).
    if (m == MODE_LIMITS) {
        rlim_t n = process_limit();
        lower_limit(RLIMIT_NPROC, n, n);
    }
}

// Every descriptor from 3 up, except those kept.
static void close_others(const Sandbox *s) {
    int fds[1024], n = 0;
    DIR *d = opendir("/proc/self/fd");
    for (struct dirent *e; d && (e = readdir(d)) && n < 1024;)
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9') fds[n++] = atoi(e->d_name);
    if (d) closedir(d);
    else
        for (int fd = 3; fd < 1024; fd++) fds[n++] = fd;
    for (int i = 0; i < n; i++) {
        int keep = fds[i] < 3;
        for (int k = 0; k < s->nkeep; k++) keep |= fds[i] == s->keep_fd[k];
        if (!keep) close(fds[i]);
    }
}

// Ends every child of ours (the orphans of the sandbox come back to us: we are a subreaper).
static void kill_children(void) {
    pid_t self = getpid();
    DIR *d = opendir("/proc");
    char path[300], stat_line[1024];
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0) continue;
        ssize_t k = read(fd, stat_line, sizeof stat_line - 1);
        close(fd);
        if (k <= 0) continue;
        stat_line[k] = 0;
        char *close_paren = strrchr(stat_line, ')');  // "pid (name) state ppid ...": the name may hold anything
        char state;
        int ppid;
        if (close_paren && sscanf(close_paren + 1, " %c %d", &state, &ppid) == 2 && ppid == self)
            kill((pid_t)atoi(e->d_name), SIGKILL);
    }
    if (d) closedir(d);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void keeper(Mode m, const Sandbox *s, Argv *a, pid_t parent) __attribute__((noreturn));
static void keeper(Mode m, const Sandbox *s, Argv *a, pid_t parent) {
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD), sigaddset(&set, SIGTERM), sigaddset(&set, SIGINT), sigaddset(&set, SIGHUP);
    sigprocmask(SIG_BLOCK, &set, &old);
    signal(SIGCHLD, SIG_DFL);  // (ignored, the children would reap themselves)
    // We end with the caller (and so does bwrap, with us), and we adopt what the sandbox orphans.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) raise(SIGTERM);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    // Where the namespaces give no private /tmp, a throwaway HOME of its own.
    char home[64] = SANDBOX_HOME;
    if (m != MODE_BWRAP && m != MODE_OFF) {
        snprintf(home, sizeof home, "/tmp/shardlab-home-XXXXXX");
        if (!mkdtemp(home)) snprintf(home, sizeof home, "/nonexistent");
    }
    pid_t child = fork();
    if (child == 0) {
        setsid();  // its own session and process group: ended as one
        sigprocmask(SIG_SETMASK, &old, NULL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL), signal(SIGTERM, SIG_DFL), signal(SIGINT, SIG_DFL), signal(SIGHUP, SIG_DFL);
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) dup2(null, 0);
        if (s->out_fd >= 0) dup2(s->out_fd, 1);
        if (s->err_fd >= 0) dup2(s->err_fd, 2);
        close_others(s);
        set_limits(m, s->deadline_s);
        if (m == MODE_UNSHARE || m == MODE_LIMITS) {
            // bwrap clears the environment itself; here it is cleared before the exec.
            char **keep = NULL;
            int nk = 0;
            for (char **e = environ; e && *e; e++) nk++;
            keep = calloc((size_t)nk + 1, sizeof *keep);
            nk = 0;
            for (char **e = environ; keep && e && *e; e++)
                if (passed_on(*e)) keep[nk++] = strdup(*e);
            clearenv();
            for (int i = 0; i < nk; i++) putenv(keep[i]);
            setenv("PATH", SANDBOX_PATH, 1), setenv("HOME", home, 1), setenv("TMPDIR", "/tmp", 1);
            for (int i = 0; i < s->nenv; i++) putenv((char *)s->env[i]);
        } else if (m == MODE_OFF) {
            for (int i = 0; i < s->nenv; i++) putenv((char *)s->env[i]);
        }
        execvp(a->v[0], a->v);
        fprintf(stderr, "%s: cannot start %s: %s\n", s->what, a->v[0], strerror(errno));
        _exit(127);
    }
    int status = 127 << 8, timed_out = 0, stop_sig = 0;
    double end = s->deadline_s > 0 ? seconds_now() + s->deadline_s : 0;
    for (int done = child < 0; !done;) {
        pid_t p;
        int st;
        while ((p = waitpid(-1, &st, WNOHANG)) > 0)
            if (p == child) status = st, done = 1;
        if (done || (p < 0 && errno == ECHILD)) break;
        double left = end ? end - seconds_now() : 1.0;
        if (left <= 0) {
            timed_out = 1;
            break;
        }
        if (left > 1.0) left = 1.0;
        struct timespec wait = {(time_t)left, (long)((left - (double)(time_t)left) * 1e9)};
        int sig = sigtimedwait(&set, NULL, &wait);
        if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) stop_sig = sig, done = 1;
    }
    // The end: the program's session, then whatever is left below us, until nothing is.
    if (child > 0) kill(-child, SIGKILL), kill(child, SIGKILL);
    for (;;) {
        kill_children();
        pid_t p = waitpid(-1, NULL, 0);
        if (p < 0 && errno == ECHILD) break;
    }
    if (strcmp(home, SANDBOX_HOME) && strcmp(home, "/nonexistent")) nftw(home, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (timed_out) {  // told apart from any exit status: sandbox_wait() reads SIGALRM as the deadline
        signal(SIGALRM, SIG_DFL);
        sigemptyset(&set);
        sigaddset(&set, SIGALRM);
        sigprocmask(SIG_UNBLOCK, &set, NULL);
        raise(SIGALRM);
    }
    if (stop_sig) _exit(128 + stop_sig);
    _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
}

pid_t sandbox_start(const Sandbox *s, char *const *argv) {
    Mode m = MODE_UNSET;
    const char *name = sandbox_mode(s->what, NULL, 0);
    for (int i = MODE_BWRAP; i <= MODE_OFF; i++)
        if (!strcmp(name, MODE_NAMES[i])) m = (Mode)i;
    Argv a = {0};
    build_argv(m, s, argv, &a);
    if (!a.v) return errno = ENOMEM, -1;
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) keeper(m, s, &a, parent);
    argv_free(&a);
    return pid;
}

int sandbox_wait(pid_t keeper_pid, int *timed_out) {
    int status;
    if (timed_out) *timed_out = 0;
    if (keeper_pid < 0) return 127;
    while (waitpid(keeper_pid, &status, 0) < 0)
        if (errno != EINTR) return 127;
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM) {
        if (timed_out) *timed_out = 1;
        return 124;
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int sandbox_run(const Sandbox *s, char *const *argv, int *timed_out) {
    return sandbox_wait(sandbox_start(s, argv), timed_out);
}
