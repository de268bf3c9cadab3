// test_commands.c — every command the READMEs and `make help` print runs as printed, and
// every link of the READMEs resolves.
//
// Usage: test_commands ROOT   (tests/run.sh passes the checkout, built: the commands run its
//                              make targets and build/shardlab, as a reader types them)
//
// What it proves:
//   1. every command the READMEs print (README.md and each folder's, tests/readmes.h: code
//      blocks and inline code) and every one `make help` lists, starting with make,
//      build/shardlab or shardlab, runs as printed and exits 0, or with the status its own
//      comment gives ("(exit 2)"). Each is made short as a reader would: STEPS=3 or
//      --steps 3 (5 when it resumes the checkpoint that the command before it saved at step
//      3), UI=none, small buffers for the collectives, `make grade` on one
//      configuration unless it names some (ONLY=); its runs go to a temporary SHARDLAB_RUNS,
//      the paths it writes (runs/mine, runs/ddp, ckpts/run1, ../ddp-course, OUT=dir) into
//      the temporary directory, and its placeholders (RUN_DIR, runs/single-...,
//      path/to/submission) get real values (runnable()'s placeholders);
//   2. what cannot run here is in SKIPPED, each with why, and so are templates (<name>,
//      $(UI), ...); every other command runs, so a command added to the text is tested;
//   3. `make lab-ckpt NGPU=2 POLICY=sqrt` shows its lesson: sqrt's activation peak is below
//      none's (with the other labs' 2 blocks it was equal, and only slower);
//   4. the instructor's bulk-grading loop, run as its README prints it (labs/command/grade/README.md;
//      its folders moved into the temporary directory) with a starter copy (make starter) as
//      the submission, exits 0 and prints that submission's total;
//   5. a lab's bad argument reaches the reader once (exit 2), and a model too shallow for the
//      run gets a HINT naming the fix as it is typed: ARGS="--layers 4" with make, --layers 4
//      with shardlab run;
//   6. every link of every README resolves: a relative link names a file or folder that is
//      there, and a #anchor names a heading of its target, by GitHub's rule for a heading's
//      anchor (lower case, spaces as '-', other punctuation dropped, a repeat numbered).
// Broken on purpose: with pp's old default of 2 blocks (labs/12-pp/pp.c, train_args_resolve_layers(&a,
// 2)), `make lab-pp NGPU=4 SCHEDULE=1f1b MICRO=8` fails here, named with its output's tail;
// with ckpt's default depth 2 (its catalog entry, labs/common/harness/catalog.c) part 3 fails; with rank 0's
// usage line echoed, part 5; with README.md's link to labs/command/grade/README.md#for-instructors
// spelt #for-instructor, part 6 names README.md, its line and the anchor.
#include <ctype.h>
#include <limits.h>
#include <locale.h>
#include <signal.h>
#include <sys/stat.h>
#include <wchar.h>
#include <wctype.h>

#include "labtest.h"
#include "readmes.h"
#include "test.h"

static char root[4096];

// ---------------------------------------------------------------------------------------
// What the text prints
// ---------------------------------------------------------------------------------------

#define MAX_COMMANDS 256

typedef struct {
    char printed[700];  // as printed, on one line (inline code may wrap)
    char from[64];      // <file>:<line> (labs/command/grade/README.md:42) or make help
    int doc, line, seen;  // which README (README.md first), its line (help: after them all) and
                          // the order found, for the text's order
    int expect;         // the exit status the text gives: 0, unless its comment says "(exit N)"
} Printed;

static Printed cmds[MAX_COMMANDS];
static int ncmds;
static char loop_block[2048];  // the instructor's loop, as its README prints it
static char loop_from[64];     // <file>:<line> of its first line

static int starts_with(const char *s, const char *prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

// A command line: make (alone or with arguments), [build/]shardlab <command> (not output such
// as "shardlab run: ..."), mpirun or srun.
static int is_command(const char *s) {
    if (!strcmp(s, "make") || starts_with(s, "make ") || starts_with(s, "mpirun ") || starts_with(s, "srun ")) return 1;
    const char *rest = starts_with(s, "build/shardlab ") ? s + 15 : starts_with(s, "shardlab ") ? s + 9 : NULL;
    if (!rest || !isalpha((unsigned char)*rest)) return 0;
    size_t word = strcspn(rest, " ");
    return rest[word - 1] != ':';
}

// Adds the n bytes at text (wrapped lines joined, a trailing "# comment" dropped) if they are
// a command not seen before.
static void add_command(const char *text, size_t n, const char *from, int doc, int line) {
    char buf[700];
    size_t k = 0, comment = n;
    int in_quote = 0;
    for (size_t i = 0; i < n && k + 1 < sizeof buf; i++) {
        char c = text[i] == '\n' ? ' ' : text[i];
        if (c == '"') in_quote = !in_quote;
        if (c == ' ' && (k == 0 || buf[k - 1] == ' ')) continue;  // joined lines: one space
        if (c == '#' && !in_quote && k > 0 && buf[k - 1] == ' ') {  // a comment
            comment = i;
            break;
        }
        buf[k++] = c;
    }
    while (k > 0 && buf[k - 1] == ' ') k--;
    buf[k] = 0;
    if (!is_command(buf) || ncmds == MAX_COMMANDS) return;
    for (int i = 0; i < ncmds; i++)
        if (!strcmp(cmds[i].printed, buf)) return;
    Printed *c = &cmds[ncmds++];
    snprintf(c->printed, sizeof c->printed, "%s", buf);
    snprintf(c->from, sizeof c->from, "%s", from);
    c->doc = doc, c->line = line, c->seen = ncmds;
    const char *note = memmem(text + comment, n - comment, "(exit ", 6);
    c->expect = note ? atoi(note + 6) : 0;
}

static int by_line(const void *a, const void *b) {
    const Printed *x = a, *y = b;
    if (x->doc != y->doc) return (x->doc > y->doc) - (x->doc < y->doc);
    return x->line != y->line ? (x->line > y->line) - (x->line < y->line) : (x->seen > y->seen) - (x->seen < y->seen);
}

// A README (name, the doc-th read): each line of a code block, and each inline code span (it
// may wrap onto the next line), sorted later into the order of the text, README after README.
// The code block of the instructor's loop is kept whole, for part 4, and its lines are not
// commands of their own.
static void read_readme(const char *md, const char *name, int doc) {
    size_t n = strlen(md);
    char *prose = malloc(n + 1);  // md with the code blocks blanked out (newlines kept)
    memcpy(prose, md, n + 1);
    int line = 1, fence = 0, in_loop = 0, keep = 0;  // keep: the loop's first copy, kept for part 4
    for (const char *p = md; *p; line++) {
        const char *eol = strchr(p, '\n');
        if (!eol) eol = p + strlen(p);
        const char *s = p;
        while (s < eol && *s == ' ') s++;
        int fence_line = starts_with(s, "```");
        if (fence_line && !fence) {  // a block opens: is it the loop?
            const char *close = strstr(eol, "```");
            in_loop = close && memmem(eol, (size_t)(close - eol), "for s in submissions/", 21);
            keep = in_loop && !loop_block[0];
            if (keep) snprintf(loop_from, sizeof loop_from, "%s:%d", name, line + 1);
        } else if (fence && !fence_line && in_loop) {
            size_t indent = (size_t)(s - p), len = strlen(loop_block);
            if (keep)
                snprintf(loop_block + len, sizeof loop_block - len, "%.*s\n", (int)(eol - p - (long)indent), p + indent);
        } else if (fence && !fence_line) {
            char from[64];
            snprintf(from, sizeof from, "%s:%d", name, line);
            add_command(s, (size_t)(eol - s), from, doc, line);
        }
        if (fence || fence_line) memset(prose + (p - md), ' ', (size_t)(eol - p));
        if (fence_line) fence = !fence;
        p = *eol ? eol + 1 : eol;
    }
    // Inline code: `...`, within a paragraph (no blank line inside).
    line = 1;
    for (const char *q = prose; *q; q++) {
        if (*q == '\n') line++;
        if (*q != '`') continue;
        const char *close = strchr(q + 1, '`'), *para = strstr(q + 1, "\n\n");
        if (!close || (para && para < close)) continue;
        char from[64];
        snprintf(from, sizeof from, "%s:%d", name, line);
        add_command(q + 1, (size_t)(close - q - 1), from, doc, line);
        for (const char *r = q + 1; r < close; r++) line += *r == '\n';
        q = close;
    }
    free(prose);
}

// `make help`: "  make <command>  <what it does> [OPTION=...] ...": the command, with the
// options in brackets that the line offers.
static void read_help(const char *text) {
    for (const char *p = text; *p;) {
        const char *eol = strchr(p, '\n');
        if (!eol) eol = p + strlen(p);
        if (starts_with(p, "  make")) {
            const char *cmd = p + 2, *gap = strstr(cmd, "  ");
            if (!gap || gap > eol) gap = eol;
            char line[900];
            size_t k = (size_t)snprintf(line, sizeof line, "%.*s", (int)(gap - cmd), cmd);
            for (const char *b = gap; b < eol && (b = memchr(b, '[', (size_t)(eol - b))); b++) {
                const char *e = memchr(b, ']', (size_t)(eol - b));
                if (!e || k >= sizeof line) break;
                k += (size_t)snprintf(line + k, sizeof line - k, " %.*s", (int)(e - b - 1), b + 1);
                b = e;
            }
            add_command(line, strlen(line), "make help", 1 << 30, 1 << 30);
        }
        p = *eol ? eol + 1 : eol;
    }
}

// ---------------------------------------------------------------------------------------
// What cannot run here, and why
// ---------------------------------------------------------------------------------------

static const struct {
    const char *start;  // the printed command starts with this...
    int whole;          // ... or, when 1, is exactly this
    const char *why;
} SKIPPED[] = {
    {"mpirun ", 0, "ranks started by Open MPI, on one machine or many (tests/test_ddp.c starts ranks with its variables)"},
    {"srun ", 0, "ranks started by Slurm on many nodes"},
    {"make", 1, "the build itself, done before the tests run"},
    {"make test", 1, "the test suite this test is part of"},
    {"make deps", 0, "installs Debian packages, as root"},
    {"make clean", 0, "removes the build every other command runs"},
    {"make web", 0, "a server that runs until stopped (tests/test_web.c and the browser test start it)"},
    {"build/shardlab web", 0, "a server that runs until stopped (tests/test_web.c starts it)"},
    {"make tui", 0, "the dashboard needs a terminal (tests/test_tui.c drives it in tmux)"},
    {"make fuzz", 0, "clang's libFuzzer for a minute"},
    {"make bench-", 0, "a benchmark: minutes of timing against a peer, run by hand"},
    {"make grade-sweep", 0, "every graded lab as the README runs it, at 200 and 1000 steps: about 10 minutes, by hand"},
    {"make docs-figures", 0, "rewrites the documents in place; test_figures runs the same commands and checks without writing"},
    {"make gpu-check", 0, "the GPU validation (tests/gpu/check.sh): a GPU machine's minutes"},
    {"make starter", 1, "the target named in prose, with no OUT (make starter OUT=... runs)"},
    {"shardlab run", 1, "the command named in prose"},
    {"shardlab grade", 1, "the command named in prose"},
};

static const char *skip_reason(const char *printed) {
    for (size_t i = 0; i < sizeof SKIPPED / sizeof SKIPPED[0]; i++)
        if (SKIPPED[i].whole ? !strcmp(printed, SKIPPED[i].start) : starts_with(printed, SKIPPED[i].start))
            return SKIPPED[i].why;
    if (strstr(printed, "shardlab tui") && !strstr(printed, "--dump"))
        return "the dashboard needs a terminal (tests/test_tui.c drives it in tmux; --dump runs here)";
    return NULL;
}

// ---------------------------------------------------------------------------------------
// The command as it runs here
// ---------------------------------------------------------------------------------------

static char fixture[600];  // a finished single-rank run: what RUN_DIR and runs/single-... stand for

// Every occurrence of from in s (of size cap) replaced by to.
static void replace_all(char *s, size_t cap, const char *from, const char *to) {
    char out[2048];
    size_t k = 0, nf = strlen(from);
    for (const char *p = s; *p && k + 1 < sizeof out;) {
        if (nf && !strncmp(p, from, nf)) {
            k += (size_t)snprintf(out + k, sizeof out - k, "%s", to);
            p += nf;
        } else {
            out[k++] = *p++;
        }
    }
    out[k < sizeof out ? k : sizeof out - 1] = 0;
    snprintf(s, cap, "%s", out);
}

__attribute__((format(printf, 3, 4))) static void appendf(char *s, size_t cap, const char *fmt, ...) {
    size_t n = strlen(s);
    if (n + 1 >= cap) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s + n, cap - n, fmt, ap);
    va_end(ap);
}

// The first n bytes of s replaced by with (s is left as it is if the result would not fit).
static void replace_start(char *s, size_t cap, size_t n, const char *with) {
    size_t lw = strlen(with), ls = strlen(s);
    if (ls - n + lw + 1 > cap) return;
    memmove(s + lw, s + n, ls - n + 1);
    memcpy(s, with, lw);
}

// The printed command with its placeholders filled in and made short; 0 if it is a template
// (something left to fill in by the reader: <name>, N, $(UI), ...).
static int runnable(const Printed *c, int i, char *cmd, size_t cap) {
    char out[700], ddp_course[600];
    snprintf(out, sizeof out, "OUT=%s/out-%d", tmp, i);
    snprintf(ddp_course, sizeof ddp_course, "%s/ddp-course", tmp);
    char runs_mine[600], runs_ddp[600], runs_single[600], ckpts[600];
    snprintf(runs_mine, sizeof runs_mine, "%s/runs/mine", tmp);
    snprintf(runs_ddp, sizeof runs_ddp, "%s/runs/ddp", tmp);
    snprintf(runs_single, sizeof runs_single, "%s/runs/single", tmp);
    snprintf(ckpts, sizeof ckpts, "%s/ckpts/", tmp);
    const char *placeholders[][2] = {
        {"runs/single-...", fixture},  // a finished single-rank run (--ref)
        {"RUN_DIR", fixture},
        {"--accum m", "--accum 4"},    // m micro-batches
        {"path/to/submission", "labs"},  // a correct submission: the project's own labs
        {"LABS=dir", "LABS=labs"},
        {"OUT=dir", out},
        {"../ddp-course", ddp_course},
        {"STEPS=N", ""},               // the test says how many
        {"runs/mine", runs_mine},
        // (the checkout's runs/ddp would hold the last test's run, which a lab refuses to
        // write into again: a run directory holds one run)
        {"runs/ddp", runs_ddp},
        {"runs/single", runs_single},
        {"ckpts/", ckpts},
    };
    // Optional parts in brackets are given: [ARGS="..."] is run with its options.
    size_t k = 0;
    int in_quote = 0;
    for (const char *p = c->printed; *p && k + 1 < cap; p++) {
        if (*p == '"') in_quote = !in_quote;
        if (!in_quote && (*p == '[' || *p == ']')) continue;
        cmd[k++] = *p;
    }
    cmd[k] = 0;
    for (size_t p = 0; p < sizeof placeholders / sizeof placeholders[0]; p++)
        replace_all(cmd, cap, placeholders[p][0], placeholders[p][1]);
    if (strchr(cmd, '<') || strstr(cmd, "...") || strstr(cmd, "$(")) return 0;
    if (starts_with(cmd, "shardlab ")) replace_start(cmd, cap, 9, "build/shardlab ");  // the program, not on PATH
    if (starts_with(cmd, "make ")) replace_start(cmd, cap, 5, "make -s ");
    if (starts_with(cmd, "make -s lab-")) {
        // Three steps (five to go on from a checkpoint saved at step 3), no dashboard.
        appendf(cmd, cap, " STEPS=%d UI=none", strstr(cmd, "--resume") ? 5 : 3);
        if (starts_with(cmd, "make -s lab-collectives")) {  // small buffers, few calls
            if (strstr(cmd, "ARGS=\"")) replace_all(cmd, cap, "ARGS=\"", "ARGS=\"--max-bytes 64K --iters 2 --warmup 1 ");
            else appendf(cmd, cap, " ARGS=\"--max-bytes 64K --iters 2 --warmup 1\"");
        }
    } else if (starts_with(cmd, "make -s grade ") || !strcmp(cmd, "make -s grade")) {
        // One configuration unless the command names some, three steps, the runs kept here.
        appendf(cmd, cap, " STEPS=3");
        if (!strstr(cmd, "ONLY=")) appendf(cmd, cap, " ONLY=single");
        if (!strstr(cmd, "OUT=")) appendf(cmd, cap, " OUT=%s/grade-%d", tmp, i);
    } else if (starts_with(cmd, "build/shardlab run ")) {
        appendf(cmd, cap, " --steps 3 --ui none");
    }
    return 1;
}

// Runs cmd with sh in the checkout, its runs under runs_dir and its output (stdout and stderr)
// in out_path; ends it after limit_s. Returns its exit status (124: it ran out of time).
static int run_shell(const char *cmd, const char *runs_dir, const char *out_path, double limit_s) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644), in = open("/dev/null", O_RDONLY);
        if (out < 0 || in < 0 || chdir(root) != 0) _exit(127);
        dup2(in, 0), dup2(out, 1), dup2(out, 2);
        setenv("SHARDLAB_RUNS", runs_dir, 1);
        setenv("SHARDLAB_TIMEOUT_S", "60", 1);  // a stuck collective ends well within the limit
        char refs[600];
        snprintf(refs, sizeof refs, "%s/refs", tmp);
        setenv("REFS", refs, 1);  // make grade's single-rank references, kept here
        setenv("NO_COLOR", "1", 1);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid);
    double t0 = now_s();
    for (;;) {
        // Ended (not reaped yet, so its group's id is still its own): anything it left
        // behind in its group goes too.
        siginfo_t info = {0};
        int ended = waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid;
        int late = !ended && now_s() - t0 > limit_s;
        if (ended || late) {
            int status;
            kill(-pid, SIGKILL);
            waitpid(pid, &status, 0);
            if (late) return 124;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        usleep(20000);
    }
}

// The last lines of a command's output, on one line.
static const char *tail_of(const char *path) {
    static char buf[700];
    size_t len;
    char *text = read_file(path, &len);
    if (!text) return "(no output)";
    size_t from = len > 600 ? len - 600 : 0;
    snprintf(buf, sizeof buf, "%s%s", from ? "..." : "", one_line(text + from));
    free(text);
    return buf;
}

// The value of check event `name` in the first run under runs_dir (rank 0), or NAN.
static double check_value(const char *runs_dir, const char *name) {
    DIR *d = opendir(runs_dir);
    double v = NAN;
    for (struct dirent *e; d && (e = readdir(d)) && isnan(v);) {
        if (e->d_name[0] == '.') continue;
        char dir[480];  // load_events() adds /rank-0.jsonl within 512
        if (snprintf(dir, sizeof dir, "%s/%s", runs_dir, e->d_name) >= (int)sizeof dir) continue;
        static Events ev;
        load_events(dir, &ev);
        for (int i = 0; i < ev.n; i++) {
            const JsonValue *nm = json_get(ev.lines[i], "name");
            if (!strcmp(kind(ev.lines[i]), "check") && nm && nm->type == JSON_STRING && !strcmp(nm->string, name))
                v = num(ev.lines[i], "value");
        }
        free_events(&ev);
    }
    if (d) closedir(d);
    return v;
}

// ---------------------------------------------------------------------------------------
// 1-3. Every command
// ---------------------------------------------------------------------------------------

static void run_commands(void) {
    int ran = 0, skipped = 0, failed = 0, from_help = 0, sqrt_checked = 0;
    for (int i = 0; i < ncmds; i++) {
        const Printed *c = &cmds[i];
        from_help += !strcmp(c->from, "make help");
        const char *why = skip_reason(c->printed);
        char cmd[1600];
        if (!why && !runnable(c, i, cmd, sizeof cmd)) why = "a template: a reader fills in <name>, N, $(UI), ...";
        if (why) {
            printf("# skipped (%s) %s: %s\n", c->from, c->printed, why);
            skipped++;
            continue;
        }
        char runs_dir[600], out[600];
        snprintf(runs_dir, sizeof runs_dir, "%s/runs-%d", tmp, i);
        snprintf(out, sizeof out, "%s/cmd-%d.out", tmp, i);
        double t0 = now_s();
        int status = run_shell(cmd, runs_dir, out, 300);
        ran++;
        // Proves: the command works as printed (its exit status is the one the text gives),
        // with only its length and its paths changed. Broken: pp's old default of 2 blocks
        // fails `make lab-pp NGPU=4 SCHEDULE=1f1b MICRO=8` here ("4 stages need at least 4").
        if (!EXPECT(status == c->expect, "%s: `%s` exits %d (ran `%s`: exit %d in %.1f s)%s%s", c->from, c->printed,
                    c->expect, cmd, status, now_s() - t0, status == c->expect ? "" : ": ",
                    status == c->expect ? "" : tail_of(out)))
            failed++;
        if (!strcmp(c->printed, "make lab-ckpt NGPU=2 POLICY=sqrt")) {
            double none = check_value(runs_dir, "ckpt.none.peak_acts"), sqrt_peak = check_value(runs_dir, "ckpt.sqrt.peak_acts");
            // Proves: the lab's default model shows what sqrt checkpointing is for: it holds
            // fewer activations than no checkpointing. Broken: ckpt's catalog depth "2", where the
            // two peaks are equal (3746304 bytes each).
            EXPECT(sqrt_peak < none, "%s: `%s` shows its lesson: sqrt's activation peak %.0f bytes is below none's %.0f",
                   c->from, c->printed, sqrt_peak, none);
            sqrt_checked = 1;
        }
    }
    // Proves: the text was read (a reader that finds nothing cannot pass): the READMEs'
    // commands and make help's were found, and each one was run or skipped with a reason.
    EXPECT(ran >= 30 && from_help >= 15, "%d commands in the READMEs and make help (%d from make help): %d run (%d of "
           "them failed, each named above), %d skipped with a reason", ncmds, from_help, ran, failed, skipped);
    EXPECT(sqrt_checked, "a README prints `make lab-ckpt NGPU=2 POLICY=sqrt`, and it ran");
}

// ---------------------------------------------------------------------------------------
// 4. The instructor's loop
// ---------------------------------------------------------------------------------------

static void run_instructor_loop(void) {
    // Proves: a README prints the bulk-grading loop (the instructor guide's step 4).
    if (!EXPECT(loop_block[0], "a README prints the bulk-grading loop (for s in submissions/*; ...)")) return;
    char dir[600], script[4096], out[700], cmd[1400];
    snprintf(dir, sizeof dir, "%s/loop", tmp);
    mkdir(dir, 0755);
    snprintf(cmd, sizeof cmd, "make -s starter OUT=%s/submissions/starter", dir);
    snprintf(out, sizeof out, "%s/starter.out", tmp);
    int status = run_shell(cmd, dir, out, 120);
    // Proves: a submission to grade exists, as an instructor's students would hand it in.
    EXPECT(status == 0, "make starter: a student's copy as the submission (exit %d%s%s)", status, status ? ": " : "",
           status ? tail_of(out) : "");
    // The loop as printed, its folders (submissions/, grades) moved here.
    char subs[700], grades[700];
    snprintf(subs, sizeof subs, "%s/submissions/", dir);
    snprintf(grades, sizeof grades, "%s/grades", dir);
    snprintf(script, sizeof script, "%s", loop_block);
    replace_all(script, sizeof script, "submissions/", subs);
    replace_all(script, sizeof script, "grades", grades);
    snprintf(out, sizeof out, "%s/loop.out", tmp);
    double t0 = now_s();
    status = run_shell(script, dir, out, 300);
    char *text = read_file(out, NULL);
    char grade_json[800];
    snprintf(grade_json, sizeof grade_json, "%s/starter/grade.json", grades);
    // Proves: the loop runs end to end on a submission that fails every check (make grade
    // exits non-zero for it): it exits 0, prints the submission's total and writes its
    // grade.json, which the python line reads.
    EXPECT(status == 0 && text && strstr(text, "starter: 0/") && strstr(text, " points") && access(grade_json, R_OK) == 0,
           "%s: the bulk-grading loop on a starter copy exits 0 and prints its total (exit %d in %.1f s): %s",
           loop_from, status, now_s() - t0, text ? one_line(text) : "(no output)");
    // The starter's build (build/student/<hash of its path>) is this test's alone: remove it.
    char log_path[800], *log = NULL;
    snprintf(log_path, sizeof log_path, "%s/starter.log", grades);
    log = read_file(log_path, NULL);
    const char *at = log ? strstr(log, " into build/student/") : NULL;
    if (at) {
        char build_dir[300], rm[5000];
        snprintf(build_dir, sizeof build_dir, "%.*s", (int)strcspn(at + 6, " \n"), at + 6);
        if (strlen(build_dir) > 14 && !strstr(build_dir, "..")) {
            snprintf(rm, sizeof rm, "rm -rf '%s/%s'", root, build_dir);
            if (system(rm) != 0) printf("# could not remove %s\n", build_dir);
        }
    }
    free(log);
    free(text);
}

// ---------------------------------------------------------------------------------------
// 5. A bad argument, as the reader meets it
// ---------------------------------------------------------------------------------------

static void run_bad_depth(void) {
    static const struct {
        const char *cmd, *hint;
    } cases[] = {
        {"make -s lab-pp NGPU=4 STEPS=3 UI=none ARGS=\"--layers 2\"", "HINT: a model of 4 blocks: ARGS=\"--layers 4\""},
        {"build/shardlab run pp -n 4 --steps 3 --ui none --layers 2", "HINT: a model of 4 blocks: --layers 4"},
    };
    const char *error = "pp: 4 stages need at least 4 blocks, one per stage (--layers 2)";
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char out[600], runs_dir[600];
        snprintf(out, sizeof out, "%s/bad-depth-%zu.out", tmp, i);
        snprintf(runs_dir, sizeof runs_dir, "%s/runs-bad-depth-%zu", tmp, i);
        int status = run_shell(cases[i].cmd, runs_dir, out, 60);
        char *text = read_file(out, NULL);
        int said = 0;
        for (const char *p = text; p && (p = strstr(p, error)); p++) said++;
        // Proves: the lab's one line is said once (the launcher passes it on; rank 0's output
        // does not repeat it), the run is refused (exit 2), and the HINT gives the option that
        // makes it run, in the form of the command typed. Broken: a launcher that echoes rank
        // 0's usage line as well says it twice.
        int ok = status == 2 && said == 1 && text && strstr(text, cases[i].hint);
        EXPECT(ok, "`%s`: exit 2 (got %d), its error said once (%d times), then '%s'%s%s", cases[i].cmd, status, said,
               cases[i].hint, ok ? "" : ": ", ok ? "" : text ? one_line(text) : "(no output)");
        free(text);
    }
}

// ---------------------------------------------------------------------------------------
// 6. Every link of every README
// ---------------------------------------------------------------------------------------

// The anchor GitHub gives a heading, into out: the heading's text as it shows (inline code
// without its backticks, emphasis without its stars, a link as its text), lower case, each
// space a '-', and every other character that is not a letter, a digit, '-' or '_' dropped.
static void heading_anchor(const char *text, char *out, size_t cap) {
    size_t k = 0;
    mbstate_t in = {0};
    for (const char *p = text; *p && k + 8 < cap;) {
        if (*p == '[') {  // [text](target): the text
            const char *close = strstr(p, "](");
            const char *end = close ? strchr(close, ')') : NULL;
            if (close && end) {
                char inner[512];
                snprintf(inner, sizeof inner, "%.*s", (int)(close - p - 1), p + 1);
                char sub[512];
                heading_anchor(inner, sub, sizeof sub);
                k += (size_t)snprintf(out + k, cap - k, "%s", sub);
                p = end + 1;
                continue;
            }
        }
        wchar_t wc;
        size_t len = mbrtowc(&wc, p, strlen(p), &in);
        if (len == (size_t)-1 || len == (size_t)-2 || len == 0) {  // not UTF-8: the byte as it is
            memset(&in, 0, sizeof in);
            wc = (unsigned char)*p, len = 1;
        }
        if (wc == ' ') {
            out[k++] = '-';
        } else if (wc == '-' || wc == '_' || iswalnum((wint_t)wc)) {
            mbstate_t st = {0};
            char mb[MB_LEN_MAX];
            size_t m = wcrtomb(mb, (wchar_t)towlower((wint_t)wc), &st);
            if (m == (size_t)-1) {
                memcpy(mb, p, len);
                m = len;
            }
            memcpy(out + k, mb, m);
            k += m;
        }
        p += len;
    }
    out[k] = 0;
}

#define MAX_ANCHORS 400

typedef struct {
    char name[600];  // the file, from root
    int n;
    char (*anchor)[160];  // each heading's anchor
    char (*base)[160];    // ... before a repeat's number
} Anchors;

// The anchors of a markdown file's headings (# to ######, outside code blocks); a heading
// whose anchor came before gets -1, -2, ... as GitHub numbers them. n = -1 if unreadable.
static void anchors_of(const char *name, Anchors *a) {
    snprintf(a->name, sizeof a->name, "%s", name);
    a->n = -1;
    a->anchor = calloc(MAX_ANCHORS, sizeof *a->anchor);
    a->base = calloc(MAX_ANCHORS, sizeof *a->base);
    char path[4800];
    snprintf(path, sizeof path, "%s/%s", root, name);
    char *md = read_file(path, NULL);
    if (!md) return;
    a->n = 0;
    int fence = 0;
    for (char *p = md; *p && a->n < MAX_ANCHORS;) {
        char *eol = strchr(p, '\n');
        if (eol) *eol = 0;
        const char *s = p + strspn(p, " ");
        if (starts_with(s, "```")) fence = !fence;
        size_t hashes = strspn(p, "#");
        if (!fence && hashes >= 1 && hashes <= 6 && p[hashes] == ' ') {
            char text[600], base[160];
            snprintf(text, sizeof text, "%s", p + hashes + 1);
            size_t len = strlen(text);
            while (len && (text[len - 1] == '#' || text[len - 1] == ' ')) text[--len] = 0;  // closing #s
            char shown[600];
            size_t k = 0;
            for (const char *q = text; *q && k + 1 < sizeof shown; q++)
                if (*q != '`' && *q != '*') shown[k++] = *q;
            shown[k] = 0;
            heading_anchor(shown, base, sizeof base);
            int repeats = 0;
            for (int i = 0; i < a->n; i++) repeats += !strcmp(a->base[i], base);
            snprintf(a->base[a->n], sizeof a->base[0], "%s", base);
            if (repeats) snprintf(a->anchor[a->n++], sizeof a->anchor[0], "%.140s-%d", base, repeats);
            else snprintf(a->anchor[a->n++], sizeof a->anchor[0], "%s", base);
        }
        p = eol ? eol + 1 : p + strlen(p);
    }
    free(md);
}

static Anchors known[64];
static int nknown;

static const Anchors *anchors_named(const char *name) {
    for (int i = 0; i < nknown; i++)
        if (!strcmp(known[i].name, name)) return &known[i];
    if (nknown == (int)(sizeof known / sizeof known[0])) return NULL;
    anchors_of(name, &known[nknown]);
    return &known[nknown++];
}

// "a/b/../c/./d.md" as "a/c/d.md"; 0 if it climbs out of the checkout.
static int normalize_path(const char *in, char *out, size_t cap) {
    char parts[64][256];
    int n = 0;
    for (const char *p = in; *p;) {
        size_t len = strcspn(p, "/");
        if (len == 2 && !strncmp(p, "..", 2)) {
            if (n == 0) return 0;
            n--;
        } else if (len && !(len == 1 && *p == '.') && n < 64) {
            snprintf(parts[n++], sizeof parts[0], "%.*s", (int)len, p);
        }
        p += len + (p[len] == '/');
    }
    size_t k = 0;
    out[0] = 0;
    for (int i = 0; i < n && k < cap; i++) k += (size_t)snprintf(out + k, cap - k, "%s%s", i ? "/" : "", parts[i]);
    return 1;
}

// Every [text](target) of a README's prose (code blocks and inline code aside): a web address
// is taken as it is; a path, from the README's folder, is a file or folder of the checkout;
// a #anchor is a heading of the target (the README itself when no path comes before it).
static void check_links(char *names[], int n) {
    int links = 0, bad = 0, anchored = 0;
    for (int d = 0; d < n; d++) {
        char path[4800];
        snprintf(path, sizeof path, "%s/%s", root, names[d]);
        char *md = read_file(path, NULL);
        if (!md) continue;
        // Code blocks and inline code blanked (newlines kept): a link there is an example.
        int fence = 0;
        for (char *p = md; *p;) {
            char *eol = strchr(p, '\n');
            if (!eol) eol = p + strlen(p);
            const char *s = p + strspn(p, " ");
            int fence_line = starts_with(s, "```");
            if (fence || fence_line) memset(p, ' ', (size_t)(eol - p));
            if (fence_line) fence = !fence;
            p = *eol ? eol + 1 : eol;
        }
        for (char *q = md; (q = strchr(q, '`'));) {
            char *close = strchr(q + 1, '`');
            if (!close) break;
            for (char *r = q; r <= close; r++)
                if (*r != '\n') *r = ' ';
            q = close + 1;
        }
        char dir[600];
        snprintf(dir, sizeof dir, "%s", names[d]);
        char *slash = strrchr(dir, '/');
        if (slash) slash[1] = 0;
        else dir[0] = 0;
        for (const char *p = md; (p = strstr(p, "](")); p += 2) {
            const char *start = p + 2, *end = strchr(start, ')');
            if (!end) break;
            int line = 1;
            for (const char *c = md; c < p; c++) line += *c == '\n';
            char target[600];
            snprintf(target, sizeof target, "%.*s", (int)(end - start), start);
            target[strcspn(target, " \"")] = 0;  // [text](target "title")
            if (strstr(target, "://") || starts_with(target, "mailto:")) continue;
            links++;
            char *hash = strchr(target, '#'), file[600];
            if (hash) *hash++ = 0;
            if (!target[0]) {
                snprintf(file, sizeof file, "%s", names[d]);
            } else {
                char joined[1200];
                snprintf(joined, sizeof joined, "%s%s", dir, target);
                int inside = normalize_path(joined, file, sizeof file);
                char full[4800];
                snprintf(full, sizeof full, "%s/%s", root, file);
                struct stat st;
                // Proves: a relative link names a file or folder of the checkout (only a broken
                // one is named: the READMEs hold hundreds). Broken: README.md's link to
                // labs/command/grade/README.md spelt labs/grades/README.md: caught, naming the line.
                if (!inside || stat(full, &st) != 0) {
                    EXPECT(0, "%s:%d: the link (%s) names %s, which is there", names[d], line, target,
                           inside ? file : "a path outside the checkout");
                    bad++;
                    continue;
                }
            }
            if (!hash || !*hash) continue;
            anchored++;
            const Anchors *a = anchors_named(file);
            int found = 0;
            for (int i = 0; a && i < a->n && !found; i++) found = !strcmp(a->anchor[i], hash);
            // Proves: the #anchor is a heading of its target, as GitHub makes its anchors.
            // Broken: README.md's #for-instructors spelt #for-instructor: caught, naming the line.
            if (!found) {
                EXPECT(0, "%s:%d: the link (%s#%s) names a heading of %s (%s)", names[d], line, target, hash, file,
                       a && a->n >= 0 ? "no heading there has that anchor" : "not a file that can be read");
                bad++;
            }
        }
        free(md);
    }
    // Proves: the links were read (a reader that finds none cannot pass), and all resolve.
    EXPECT(links >= 40 && anchored >= 20 && bad == 0,
           "every link of the %d READMEs resolves: %d links, %d of them to a heading, %d broken (named above)", n,
           links, anchored, bad);
    for (int i = 0; i < nknown; i++) free(known[i].anchor), free(known[i].base);
}

// Under `make test`, the environment holds the MAKEFLAGS of the make running us: its command
// line's variables (CUDA=0, NATIVE=0, ...), which the commands must build with too, and its
// jobserver's file descriptors, which are not open as such here (a child make would read
// from whatever file took their numbers, and stop). The commands run as a reader types them:
// a make of their own, with those variables only.
static void keep_make_variables(void) {
    const char *flags = getenv("MAKEFLAGS");
    const char *vars = !flags ? NULL : starts_with(flags, "-- ") ? flags : strstr(flags, " -- ");
    char only_vars[4096];
    if (vars && snprintf(only_vars, sizeof only_vars, "-- %s", strstr(vars, "-- ") + 3) < (int)sizeof only_vars)
        setenv("MAKEFLAGS", only_vars, 1);
    else
        unsetenv("MAKEFLAGS");
    unsetenv("MFLAGS");
    unsetenv("MAKELEVEL");
}

int main(int argc, char **argv) {
    if (argc < 2 || !realpath(argv[1], root)) {
        fprintf(stderr, "usage: test_commands ROOT (the checkout, built)\n");
        return 2;
    }
    keep_make_variables();
    setlocale(LC_CTYPE, "C.UTF-8");  // headings' letters beyond ASCII (Ψ), for their anchors
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-commands-XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    double t0 = now_s();
    char *names[README_MAX];
    int nreadmes = readme_paths(root, names, README_MAX);
    // Proves: the front door and the folders' READMEs are found (README.md first), so that a
    // section moved into a folder's README is still read.
    if (!EXPECT(nreadmes >= 6 && !strcmp(names[0], "README.md"), "README.md and the folders' READMEs found (%d)",
                nreadmes))
        return test_done();
    for (int i = 0; i < nreadmes; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", root, names[i]);
        char *md = read_file(path, NULL);
        // Proves: each README found can be read.
        if (!EXPECT(md != NULL, "%s is readable", names[i])) continue;
        read_readme(md, names[i], i);
        free(md);
    }
    char help_out[600];
    snprintf(help_out, sizeof help_out, "%s/help.out", tmp);
    // Proves: make help itself works, and gives the list it is read from.
    EXPECT(run_shell("make -s help", tmp, help_out, 60) == 0, "make help exits 0");
    char *help = read_file(help_out, NULL);
    if (help) read_help(help);
    free(help);
    qsort(cmds, (size_t)ncmds, sizeof cmds[0], by_line);  // the text's order: a save before its resume

    // The finished run that RUN_DIR and runs/single-... stand for.
    char cmd[1400], out[700];
    snprintf(fixture, sizeof fixture, "%s/fixture-single", tmp);
    snprintf(cmd, sizeof cmd, "build/shardlab run single -n 1 --steps 3 --ui none --run-dir %s", fixture);
    snprintf(out, sizeof out, "%s/fixture.out", tmp);
    int status = run_shell(cmd, tmp, out, 120);
    // Proves: the run the placeholders name exists, so a failure below is the command's own.
    EXPECT(status == 0, "a finished single-rank run for RUN_DIR and runs/single-... (exit %d%s%s)", status,
           status ? ": " : "", status ? tail_of(out) : "");

    check_links(names, nreadmes);
    run_commands();
    run_instructor_loop();
    run_bad_depth();
    for (int i = 0; i < nreadmes; i++) free(names[i]);
    printf("# %.1f s\n", now_s() - t0);
    tmp_finish(test_failed);
    return test_done();
}
