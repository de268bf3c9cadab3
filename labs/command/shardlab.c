// shardlab.c — the `shardlab` command: `run` (the launcher: this file, with what it shows in
// launcher_view.c and how it reads the ranks' endings in launcher_ranks.c) and `tui` (the
// terminal dashboard, tui/).
//
// Run it:   build/shardlab run ddp -n 2 --steps 200        (or: make lab-ddp NGPU=2 STEPS=200)
//           build/shardlab run --help
//           build/shardlab tui runs/ddp-...                 (or: make tui RUN=runs/ddp-...)
//
// `shardlab run <lab> -n N` does what torchrun does for PyTorch, in one file you can read:
//   1. names the run directory (runs/<lab>-<time>-<hex>, or the lab's --run-dir) and holds it
//      for this job: its lock, which the ranks inherit, and no run appended to an earlier one
//      (--overwrite replaces it); creates the shared memory the ranks talk through (with no
//      name, so nothing can be left in /dev/shm; shm.h), and picks a free TCP port;
//   2. forks N ranks into one process group; each gets RANK, LOCAL_RANK, WORLD_SIZE,
//      LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (as torchrun sets them), its output goes to
//      <run dir>/rank-<r>.log, and it execs build/labs/<lab> with the options we did not use;
//   3. shows the run: the dashboard (tui/) when stdin and stdout are a terminal, which reads
//      the run directory as the ranks write it; else rank 0's log as it grows, with a status
//      line at the bottom on a terminal;
//   4. watches the ranks: the first one to fail is named in one line with its own error
//      message, the others get SIGTERM, then SIGKILL a second later (after a usage error,
//      which every rank meets, SIGTERM a second later: time to exit on it by themselves);
//   5. forwards Ctrl-C (SIGINT), SIGTERM and SIGHUP (the terminal closed, which the dashboard
//      also notices by itself) to the ranks, so they can end their logs cleanly.
// However the run ends, no rank outlives it, nothing is left in /dev/shm, and every rank's
// event log ends with an "end" event (a dashboard must not show a dead run as live).
//
// Exit status: 0 every rank finished (exited 0 with an end event saying ok); 1 a rank failed
// (or exited 0 without ending its log ok); 2 bad arguments (ours, or a rank's: a
// lab exits 2 on a bad option, and we pass its one line on); 128 + the signal when SIGINT
// (130), SIGTERM (143) or SIGHUP (129) stopped us, even on the dashboard's last screen.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "command/grade/grade.h"
#include "command/plan/plan_cmd.h"
#include "command/plan/whatif_cmd.h"
#include "command/runs/logtail.h"
#include "command/runs/runread.h"
#include "command/runs/trace.h"
#include "common/comm/shm.h"
#include "common/harness/catalog.h"
#include "common/harness/check.h"
#include "common/harness/suggest.h"
#include "common/runfiles/json.h"
#include "common/runfiles/runlog.h"
#include "launcher.h"
#include "lexicon.h"
#include "tui.h"
#include "web.h"

static const char *USAGE =
    "usage: shardlab <command> [options]\n"
    "\n"
    "commands:\n"
    "  run <lab> -n N [options]   start N ranks of a lab and watch them (shardlab run --help)\n"
    "  tui [RUN_DIR]              the terminal dashboard on a run, live or finished (shardlab tui --help)\n"
    "  lexicon [TERM]             the lexicon's index, or one term in the terminal (shardlab lexicon --help)\n"
    "  lesson [N|NAME]            the lessons in order, or one in the terminal (shardlab lesson --help)\n"
    "  web [--port P]             the course, the labs and live runs in the browser (shardlab web --help)\n"
    "  grade RUN_DIR [--ref DIR]  a run checked against its lab's invariants: the rubric, grade.json,\n"
    "                             JUnit XML; --labs DIR grades a student's build (shardlab grade --help)\n"
    "  trace RUN_DIR [-o FILE]    the run's timeline (spans, memory, loss) for ui.perfetto.dev or\n"
    "                             chrome://tracing, written to RUN_DIR/trace.json (shardlab trace --help)\n"
    "  plan LAB [-n N] [options]  the bytes each GPU holds for a model and layout at any scale, by\n"
    "                             category, from the labs' formulas; --check runs the lab to compare\n"
    "                             (shardlab plan --help)\n"
    "  whatif RUN_DIR [--link L]  a finished run's step projected onto another interconnect and\n"
    "                             GPU: compute, exposed communication, bubble (shardlab whatif --help)\n";

static const char *RUN_USAGE =
    "usage: shardlab run <lab> -n N [--ui auto|tui|none] [--steps S] [--device auto|cpu|cuda] [lab options]\n"
    "\n"
    "Starts N ranks of build/labs/<lab> (RANK, WORLD_SIZE, ... set as torchrun sets them) and\n"
    "watches them; each rank's output goes to <run dir>/rank-<r>.log.\n"
    "  -n N            number of ranks, 1 to 8 (default 1); may come anywhere after the lab\n"
    "  --ui UI         tui: the dashboard (q leaves it, the run goes on; Ctrl-C stops the run);\n"
    "                  none: rank 0's output; auto (default): tui on a terminal, else none\n"
    "Every other option goes to every rank unchanged ('shardlab run <lab> --help' lists them).\n"
    "Environment: SHARDLAB_RUNS (default runs/), SHARDLAB_LABS (default: labs/ next to this\n"
    "program), SHARDLAB_TIMEOUT_S (the ranks' wait deadline).\n"
    "Exit status: 0 all ranks finished (each exited 0 and its log ends ok), 1 a rank failed, 2 bad\n"
    "arguments, 130/143/129 interrupted (Ctrl-C, SIGTERM, the terminal closed).\n";

static volatile sig_atomic_t last_signal, signal_count;
static void on_signal(int sig) { last_signal = sig; signal_count++; }
// The dashboard found the terminal closed: the kernel told only the terminal's foreground
// process group, the pager's if one was open, so we may have had no SIGHUP of our own.
static void hung_up(void) { on_signal(SIGHUP); }

// ---------------------------------------------------------------------------------------
// Arguments
// ---------------------------------------------------------------------------------------

// The directory this program is in (its labs/ holds the lab programs).
static void program_dir(char *out, size_t n) {
    char exe[PATH_MAX - 8];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) die("set SHARDLAB_LABS to the folder of the lab programs", "cannot find this program's path: %s", strerror(errno));
    exe[k] = 0;
    *strrchr(exe, '/') = 0;
    snprintf(out, n, "%s", exe);
}

static void labs_dir(char *out, size_t n) {
    const char *env = getenv("SHARDLAB_LABS");
    if (env && *env) {
        snprintf(out, n, "%s", env);
        return;
    }
    char dir[PATH_MAX - 16];
    program_dir(dir, sizeof dir);
    snprintf(out, n, "%s/labs", dir);
}

static int is_program(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode) && access(path, X_OK) == 0;
}

// The lab programs in dir: "ddp, single" into out for the unknown-lab message, and each name
// into names (up to max; returns how many).
enum { MAX_LAB_NAMES = 64 };
static int list_labs(const char *dir, char *out, size_t n, char names[][NAME_MAX + 1], int max) {
    struct dirent **entries;
    int k = scandir(dir, &entries, NULL, alphasort), found = 0;
    snprintf(out, n, "none; run 'make' first");
    for (int i = 0; i < k; i++) {
        char path[PATH_MAX + 300];
        snprintf(path, sizeof path, "%s/%s", dir, entries[i]->d_name);
        if (entries[i]->d_name[0] != '.' && is_program(path)) {
            size_t len = found ? strlen(out) : 0;
            snprintf(out + len, n - len, "%s%s", len ? ", " : "", entries[i]->d_name);
            if (found < max) snprintf(names[found], NAME_MAX + 1, "%s", entries[i]->d_name);
            found++;
        }
        free(entries[i]);
    }
    if (k >= 0) free(entries);
    return found < max ? found : max;
}

// ": did you mean 'ddp'?" (under make: 'make lab-ddp') when name is near one of the labs, else "".
static const char *lab_did_you_mean(const char *name, char names[][NAME_MAX + 1], int n, char *out, size_t size) {
    const char *list[MAX_LAB_NAMES], *near[SUGGEST_MAX];
    for (int i = 0; i < n; i++) list[i] = names[i];
    int k = suggest_nearest(name, list, n, near, SUGGEST_MAX);
    char joined[512];
    if (!k) return "";
    snprintf(out, size, ": did you mean %s?",
             suggest_join(near, k, launcher_under_make() ? "make lab-" : "", "", joined, sizeof joined));
    return out;
}

static int parse_ranks(const char *text) {
    char *end;
    errno = 0;
    if (!text) usage_error("shardlab run", "-n needs a number of ranks, 1 to %d", MAX_RANKS);
    long n = strtol(text, &end, 10);
    if (end == text || *end || errno || n < 1 || n > MAX_RANKS)
        usage_error("shardlab run", "-n %s: expected a number of ranks from 1 to %d", text, MAX_RANKS);
    return (int)n;
}

static void parse_run(Launch *L, int argc, char **argv) {
    const char *prog = "shardlab run", *ui = "auto";
    int nargs = 1, lab_help = 0;
    L->n = 1;
    L->lab_argv = calloc_check((size_t)argc + 1, sizeof *L->lab_argv);
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-n") == 0) L->n = parse_ranks(i + 1 < argc ? argv[++i] : NULL);
        else if (strncmp(a, "-n", 2) == 0 && a[2] != '-') L->n = parse_ranks(a + 2);
        else if (strcmp(a, "--ui") == 0 && i + 1 < argc) ui = argv[++i];
        else if (strcmp(a, "--ui") == 0) usage_error(prog, "--ui needs a value (auto, tui or none)");
        else if (strncmp(a, "--ui=", 5) == 0) ui = a + 5;
        else if (!L->lab && (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0)) {
            fputs(RUN_USAGE, stdout);
            printf("\nThe labs (common/harness/catalog.c):\n");
            for (int k = 0; k < catalog_nlabs; k++) printf("  %-12s %s\n", catalog_labs[k].name, catalog_labs[k].title);
            exit(0);
        } else if (!L->lab && a[0] == '-') {
            usage_error(prog, "expected the lab's name before '%s'", a);
        } else if (!L->lab) {
            L->lab = a;
        } else {  // the lab's option: every rank gets it
            L->lab_argv[nargs++] = argv[i];
            lab_help |= strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0;
        }
    }
    if (strcmp(ui, "web") == 0) usage_error(prog, "--ui web: the web dashboard is not built yet; use --ui auto, tui or none");
    if (strcmp(ui, "auto") != 0 && strcmp(ui, "tui") != 0 && strcmp(ui, "none") != 0)
        usage_error(prog, "--ui must be auto, tui or none (got '%s')", ui);
    const char *term = getenv("TERM");
    int terminal = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO) && term && *term && strcmp(term, "dumb") != 0;
    if (strcmp(ui, "tui") == 0 && !terminal)
        usage_error(prog, "--ui tui needs a terminal (stdin and stdout, and TERM set); use --ui none");
    L->want_tui = strcmp(ui, "tui") == 0 || (strcmp(ui, "auto") == 0 && terminal);
    L->status_line = strcmp(ui, "auto") == 0 && isatty(STDOUT_FILENO) && !L->want_tui;

    char dir[PATH_MAX], labs[1024], hint[600];
    static char names[MAX_LAB_NAMES][NAME_MAX + 1];
    labs_dir(dir, sizeof dir);
    int nlabs = list_labs(dir, labs, sizeof labs, names, MAX_LAB_NAMES);
    if (!L->lab) usage_error(prog, "which lab? (labs: %s)", labs);
    snprintf(L->lab_path, sizeof L->lab_path, "%s/%s", dir, L->lab);
    if (strchr(L->lab, '/') || L->lab[0] == '.' || !is_program(L->lab_path))
        usage_error(prog, "no lab '%s' in %s%s (labs: %s)", L->lab, dir, lab_did_you_mean(L->lab, names, nlabs, hint, sizeof hint),
                    labs);
    const CatLab *known = catalog_lab(L->lab);
    if (known && known->max_world && L->n > known->max_world)
        usage_error(prog, "-n %d: %s runs on at most %d rank%s", L->n, L->lab, known->max_world, known->max_world > 1 ? "s" : "");
    L->lab_argv[0] = L->lab_path;
    if (lab_help) {  // the lab's own --help: one process, straight to the terminal
        execv(L->lab_path, L->lab_argv);
        die(NULL, "cannot run %s: %s", L->lab_path, strerror(errno));
    }
}

// ---------------------------------------------------------------------------------------
// Before the ranks start: run directory, shared memory, port
// ---------------------------------------------------------------------------------------

// Names the run directory (the lab's --run-dir, else a new runs/<lab>-<time>-<hex>) and holds
// it for this job before anything is written there: its lock, which the ranks inherit
// (exec_rank), and no run appended to an earlier one unless --overwrite (runlog_hold_dir).
static void name_run_dir(Launch *L, char **argv) {
    const char *dir = NULL;
    int overwrite = 0;
    for (int i = 1; L->lab_argv[i]; i++) {
        if (strcmp(L->lab_argv[i], "--run-dir") == 0 && L->lab_argv[i + 1]) dir = L->lab_argv[i + 1];
        else if (strncmp(L->lab_argv[i], "--run-dir=", 10) == 0) dir = L->lab_argv[i] + 10;
        overwrite |= strcmp(L->lab_argv[i], "--overwrite") == 0;
    }
    StrBuf why;
    sb_init(&why);
    if (!dir || !*dir) {
        runlog_new_dir(L->run_dir, sizeof L->run_dir, L->lab);
        L->dir_made = 1;
    } else {
        if (runlog_check_path("--run-dir", dir, RUNLOG_ROOM, &why) != 0) usage_error("shardlab run", "%s", why.data);
        snprintf(L->run_dir, sizeof L->run_dir, "%s", dir);  // (it fits: checked)
    }
    int busy, code = runlog_hold_dir(&L->run_lock, L->run_dir, overwrite, argv, &why, &busy);
    if (code == 2) usage_error("shardlab run", "%s", why.data);
    const char *hint = busy ? "wait for that job to end, or give another --run-dir"
                            : "is the disk full? check it and the folder's permissions";
    if (code) die(hint, "%s", why.data);
    if (L->run_lock.fd <= STDERR_FILENO) {  // started with 0, 1 or 2 closed: the ranks' stdio goes there
        int high = fcntl(L->run_lock.fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
        if (high < 0) die(NULL, "cannot move the run directory's lock: %s", strerror(errno));
        close(L->run_lock.fd);
        L->run_lock.fd = high;
    }
    sb_free(&why);
}

off_t launcher_file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : 0;
}

void launcher_rank_file(const Launch *L, int r, const char *ext, char *out, size_t n) {
    snprintf(out, n, "%s/rank-%d.%s", L->run_dir, r, ext);
}

// The ranks' shared memory, with no name in /dev/shm: if we are killed (SIGKILL) before the
// ranks have mapped it, nothing is left behind; it goes with the last process holding it.
static void create_shm(Launch *L) {
    char err[256] = "";
    if ((L->shm_fd = shm_create_unnamed(L->n, err, sizeof err)) < 0) die("is memory short? (free -m)", "%s", err);
    if (L->shm_fd <= STDERR_FILENO) {  // started with 0, 1 or 2 closed: the ranks' stdio goes there
        int high = fcntl(L->shm_fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
        if (high < 0) die(NULL, "cannot move the shared memory's descriptor: %s", strerror(errno));
        close(L->shm_fd);
        L->shm_fd = high;
    }
}

// Bind port 0 and read back what the kernel chose. The shm backend does not use it; NCCL
// does (NCCL_COMM_ID=MASTER_ADDR:MASTER_PORT), as do labs started by other launchers.
static int free_port(void) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = 29500;  // torchrun's default otherwise
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

// If the launcher itself dies (die()), it takes the ranks and the segment with it.
static void on_die(const char *msg, void *arg) {
    Launch *L = arg;
    tui_restore_terminal();  // so the message that follows is readable
    if (L->pgid > 0) kill(-L->pgid, SIGKILL);
}

// ---------------------------------------------------------------------------------------
// Starting a rank: what runs in the child between fork and exec
// ---------------------------------------------------------------------------------------

static void setenv_int(const char *name, long v) {
    char text[32];
    snprintf(text, sizeof text, "%ld", v);
    setenv(name, text, 1);
}

static __attribute__((noreturn)) void exec_rank(const Launch *L, int r) {
    // Die with the launcher, even a SIGKILLed one (nobody else would stop us). If it died
    // before this line, the kernel will not tell us: check by hand.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != L->launcher) _exit(127);
    setpgid(0, L->pgid);  // one group (rank 0's pid; 0 makes it for rank 0): one kill() reaches all
    signal(SIGINT, SIG_DFL);  // undo the launcher's handlers; the lab installs its own
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    char path[sizeof L->run_dir + 32];
    launcher_rank_file(L, r, "log", path, sizeof path);
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0644), nul = open("/dev/null", O_RDONLY);
    if (fd < 0 || nul < 0) {
        fprintf(stderr, "shardlab: error: rank %d cannot open %s: %s\n", r, path, strerror(errno));
        _exit(127);
    }
    dup2(nul, STDIN_FILENO), dup2(fd, STDOUT_FILENO), dup2(fd, STDERR_FILENO);
    close(fd), close(nul);
    setenv_int("RANK", r), setenv_int("LOCAL_RANK", r);
    setenv_int("WORLD_SIZE", L->n), setenv_int("LOCAL_WORLD_SIZE", L->n);
    setenv("MASTER_ADDR", "127.0.0.1", 1), setenv_int("MASTER_PORT", L->port);
    setenv("SHARDLAB_RUN_DIR", L->run_dir, 1);
    // A lab's usage error names the command that shows its help (check.h): ours, as the user
    // typed it, or make's.
    char help[PATH_MAX + 128];
    if (launcher_under_make()) snprintf(help, sizeof help, "make lab-%s ARGS=--help", L->lab);
    else snprintf(help, sizeof help, "%s run %s --help", program_invocation_name, L->lab);
    setenv("SHARDLAB_USAGE_HELP", help, 1);
    setenv("SHARDLAB_LOG_CAPTURED", "1", 1);  // the lab must not open rank-<r>.log itself
    unsetenv("SHARDLAB_SHM");
    if (L->shm_fd >= 0) {  // the descriptors the lab inherits: the shared memory ...
        fcntl(L->shm_fd, F_SETFD, 0);
        setenv_int("SHARDLAB_SHM_FD", L->shm_fd);
    } else {
        unsetenv("SHARDLAB_SHM_FD");
    }
    fcntl(L->run_lock.fd, F_SETFD, 0);  // ... and the run directory's lock, held for the job (joblock.h)
    setenv_int(JOBLOCK_FD_ENV, L->run_lock.fd);
    execv(L->lab_path, L->lab_argv);
    fprintf(stderr, "shardlab: error: rank %d cannot run %s: %s\n", r, L->lab_path, strerror(errno));
    _exit(127);
}

static void start_ranks(Launch *L) {
    for (int r = 0; r < L->n; r++) {
        char path[sizeof L->run_dir + 32];
        launcher_rank_file(L, r, "log", path, sizeof path);
        L->log_start[r] = launcher_file_size(path);
        launcher_rank_file(L, r, "jsonl", path, sizeof path);
        L->jsonl_start[r] = launcher_file_size(path);
    }
    L->echo_off = L->log_start[0], L->events.offset = L->jsonl_start[0];
    fflush(NULL);  // else the child's copy of our stdio buffers is written twice
    for (int r = 0; r < L->n; r++) {
        pid_t pid = fork();
        if (pid < 0) die("too many processes? (ulimit -u)", "cannot start rank %d: %s", r, strerror(errno));
        if (pid == 0) exec_rank(L, r);
        L->pid[r] = pid;
        if (r == 0) L->pgid = pid;
        setpgid(pid, L->pgid);  // also here, so the group exists before we ever signal it
    }
}

// ---------------------------------------------------------------------------------------
// The dashboard
// ---------------------------------------------------------------------------------------

// Returns the exit status of `shardlab run`.
static int watch(Launch *L) {
    int first = -1, cause = -1, stop_sig = 0, handled = 0, killed = 0, stopped = 0, usage = 0;
    int64_t first_us = 0, term_at = 0, kill_at = 0;
    while (launcher_count_running(L) > 0) {
        int status;
        pid_t pid;
        // Each rank by its pid: a pager the dashboard started is a child too, and is its own.
        for (int r = 0; r < L->n; r++)
            if (!L->done[r] && (pid = waitpid(L->pid[r], &status, WNOHANG)) == L->pid[r]) {
                L->done[r] = 1, L->wstatus[r] = status;
                if (launcher_failed(status)) launcher_read_error_line(L, r);
                if (launcher_failed(status) && first < 0 && !stop_sig) first = r, first_us = runlog_now_us();
            }
        int64_t now = runlog_now_us();
        if (first >= 0 && cause < 0 && (cause = launcher_find_cause(L, first, first_us)) >= 0) {
            char how[64];
            int others = launcher_count_running(L);
            launcher_describe_exit(L->wstatus[cause], how, sizeof how);
            launcher_clear_status(L);
            fflush(stdout);
            // Exit status 2 is a lab's "bad argument" (e.g. a batch that does not divide over
            // N ranks): pass its one line on as ours.
            usage = WIFEXITED(L->wstatus[cause]) && WEXITSTATUS(L->wstatus[cause]) == 2 && L->errline[cause][0];
            if (usage) {
                L->usage_said = 1;  // first: close_tui echoes rank 0's output, less this line
                launcher_close_tui(L);  // nothing ran worth looking at: straight to the message
                launcher_say(L, "shardlab run: %s\n", L->errline[cause]);
                launcher_hint_layers(L, L->errline[cause]);
            } else {
                // Rank 0's error line is in its output too, which we echo: echo_text drops it.
                L->error_said = cause == 0 && L->errline[0][0];
                if (others) launcher_say(L, "shardlab: rank %d %s%s%s; stopping the other %d rank(s)\n", cause, how,
                                L->errline[cause][0] ? ": " : "", L->errline[cause], others);
                else launcher_say(L, "shardlab: rank %d %s%s%s\n", cause, how, L->errline[cause][0] ? ": " : "", L->errline[cause]);
            }
            // A usage error is every rank's (they all got the same options): the others are
            // given the grace to exit on it by themselves, each with its own line in its log,
            // before SIGTERM (a rank that had not yet read its options would else be stopped
            // before it could say what was wrong with them).
            term_at = others ? now + (usage ? FAIL_GRACE_US : 0) : 0;
            kill_at = (term_at ? term_at : now) + FAIL_GRACE_US;
        }
        if (signal_count > handled) {  // Ctrl-C, SIGTERM, SIGHUP: pass it on; a second one kills
            handled = signal_count;
            if (!stop_sig && cause < 0 && first < 0) {
                stop_sig = last_signal, stopped = launcher_count_running(L);
                if (L->shm_fd >= 0) shm_note_stop(L->shm_fd, stop_sig);
                kill(-L->pgid, stop_sig);
                kill_at = now + STOP_GRACE_US;
            } else if (last_signal != SIGHUP) {
                // Not SIGHUP: a closed terminal sends it more than once (to its foreground
                // group, again when the shell goes, and the dashboard notices too), which is
                // not a user pressing Ctrl-C twice.
                kill_at = now;
            }
        }
        if (term_at && now >= term_at) kill(-L->pgid, SIGTERM), term_at = 0;
        if (kill_at && now >= kill_at && !killed) kill(-L->pgid, SIGKILL), killed = 1;
        int view = L->tui ? tui_tick(L->tui, now) : 0;
        if (view) launcher_close_tui(L);  // q: the view goes, the run goes on
        if (view == TUI_HANGUP) hung_up();  // the terminal went: as if it had sent SIGHUP
        if (!L->tui) launcher_show_progress(L, 0);
        if (launcher_count_running(L) > 0) usleep(POLL_US);
    }
    L->pgid = 0;  // everyone is reaped: the group id may belong to someone else now
    // A rank that exited 0 without ending its log ok (no end event, or one saying error) did
    // not finish: its log says error (we write its end event), and so do we.
    int unended = launcher_end_event_logs(L);
    if (stop_sig || usage || first >= 0) unended = -1;  // (already said, and not a finish)
    // The dashboard shows how the run ended (the banner, the summary) until q; after Ctrl-C
    // the user wants the terminal back at once. A signal (SIGTERM, a closed terminal's
    // SIGHUP) ends the wait too: nobody may be there to press q.
    int late_sig = 0;
    if (L->tui && !stop_sig) {
        const char *why = first >= 0 || unended >= 0 ? "the run stopped with an error: q to leave" : "the run finished: q to leave";
        if (!signal_count && tui_wait_quit(L->tui, why, &signal_count) == TUI_HANGUP) hung_up();
        if (signal_count) late_sig = last_signal;
    }
    launcher_close_tui(L);
    launcher_show_progress(L, 1);
    if (L->shm_fd >= 0) close(L->shm_fd), L->shm_fd = -1;
    if (stop_sig) {
        fprintf(stderr, "shardlab: interrupted; %d rank(s) stopped; run written to %s\n", stopped, L->run_dir);
        return 128 + stop_sig;
    }
    if (usage) {
        launcher_remove_unstarted(L);
        return 2;
    }
    if (unended >= 0) fprintf(stderr, "shardlab: rank %d %s\n", unended, L->errline[unended]), cause = unended;
    if (first >= 0 || unended >= 0) {
        printf("shardlab: %s stopped; run written to %s (rank %d's output: rank-%d.log)\n", L->lab, L->run_dir, cause, cause);
        return 1;  // the failure says more than how the view was left
    }
    printf("shardlab: %s finished on %d rank(s); run written to %s\n", L->lab, L->n, L->run_dir);
    // Signalled on the dashboard's last screen: the run is whole, but we were stopped.
    return late_sig ? 128 + late_sig : 0;
}

// ---------------------------------------------------------------------------------------

int main(int argc, char **argv) {
    check_set_context("shardlab");
    if (argc < 2) usage_error("shardlab", "expected a command: run, tui, lexicon, lesson, web, grade, trace, plan or whatif");
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) return fputs(USAGE, stdout), 0;
    if (strcmp(argv[1], "grade") == 0) {
        char dir[PATH_MAX];
        program_dir(dir, sizeof dir);
        return grade_main(argc, argv, dir);
    }
    if (strcmp(argv[1], "tui") == 0) return tui_main(argc, argv);
    if (strcmp(argv[1], "trace") == 0) return trace_main(argc, argv);
    if (strcmp(argv[1], "plan") == 0) return plan_main(argc, argv);
    if (strcmp(argv[1], "whatif") == 0) return whatif_main(argc, argv);
    if (strcmp(argv[1], "lexicon") == 0 || strcmp(argv[1], "lesson") == 0 || strcmp(argv[1], "web") == 0) {
        char root[4096], labs[PATH_MAX];
        tui_find_root(root, sizeof root);
        if (strcmp(argv[1], "lexicon") == 0) return lexicon_main(argc, argv, root);
        if (strcmp(argv[1], "lesson") == 0) return lesson_main(argc, argv, root);
        labs_dir(labs, sizeof labs);
        return web_main(argc, argv, root, labs);
    }
    if (strcmp(argv[1], "run") != 0) {
        const char *commands[] = {"run", "tui", "lexicon", "lesson", "web", "grade", "trace", "plan", "whatif"}, *near[SUGGEST_MAX];
        char hint[200], list[160] = "";
        int k = suggest_nearest(argv[1], commands, 9, near, SUGGEST_MAX);
        if (k) snprintf(hint, sizeof hint, "did you mean %s? ", suggest_join(near, k, "", "", list, sizeof list));
        usage_error("shardlab", "unknown command '%s': %s%she commands are run, tui, lexicon, lesson, web, grade, trace, plan and "
                    "whatif", argv[1], k ? hint : "", k ? "T" : "t");
    }

    static Launch L;
    parse_run(&L, argc, argv);
    L.launcher = getpid();
    name_run_dir(&L, argv);
    check_on_die(on_die, &L);
    // Caught before the first fork, so a Ctrl-C during start-up still stops every rank.
    struct sigaction sa = {.sa_handler = on_signal};
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);  // the terminal closed: stop the run as Ctrl-C does
    signal(SIGPIPE, SIG_IGN);  // a closed pipe on our stdout must not leave the ranks behind
    L.shm_fd = -1;
    shm_sweep();  // what ranks started by hand and killed left in /dev/shm (shm.h)
    if (L.n > 1) create_shm(&L);
    L.port = free_port();
    L.t0_us = runlog_now_us();
    start_ranks(&L);
    sb_init(&L.said);
    launcher_open_tui(&L);
    int code = watch(&L);
    sb_free(&L.said);
    free(L.lab_argv);
    return code;
}
