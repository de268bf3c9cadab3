// test_figures.c — every figure the documents quote from a run is what the code prints today.
//
// Usage: test_figures ROOT [--write] [--only FILE] [--cache DIR]
//   ROOT        the checkout, built (make test-programs); its READMEs (README.md and each
//               folder's, tests/readmes.h), lessons/ and lexicon/
//   --write     rewrite the stale figures in place (make docs-figures), for a person to review
//               the diff, and fail only on what it cannot rewrite; without it, report each
//               stale figure and fail
//   --only FILE one document (labs/README.md, lessons/06-global-batch-and-accumulation.md): its
//               blocks, its registered figures and its scan
//   --cache DIR keep each command's output in DIR and reuse what is there, for a person
//               editing the documents (outputs of an older build are reused too: never in
//               make test)
//
// What the documents quote, and how each figure is held to the code:
//   1. Output blocks. A fenced block whose first line is `$ <command>` is a transcript: each
//      `$ ` line a command, the lines under it what it printed (stdout and stderr together),
//      a line `...` standing for lines left out. The command runs, and the block is lined up
//      with its output as diff does (tests/figures.h): `...` skips any number of printed
//      lines; elsewhere a line shown and not printed, or printed and not shown, is a
//      difference. A line matches when it is the printed one but for what varies between two
//      runs of the command on any machine (figures.h's MASKS: times, rates, a run directory's
//      name, the core count, the memory free, why there is no GPU) and the width of runs of
//      spaces. Losses, bytes, hashes, counts and formulas are compared as printed.
//   2. Figures inside sentences, registered in tests/figures/figures.txt: a `$ command` line,
//      then a line per figure: the document, the text around the figure in it ({} where the
//      figure stands), and after `<=` the text around it in the command's output (or in a
//      file the command wrote: `file PATH: ...`), with `as %.Nf` to quote it rounded.
//   3. Figures that are not from a run: tests/figures/not-runs.txt names the paragraphs (a
//      table, a list item, a fenced block) or the sections ("## Predict first", in every file
//      a pattern like lessons/*.md names) whose figures are a formula worked by hand, a
//      constant of the code, a paper's or a vendor's figure, a GPU measurement (labs/GPU.md,
//      dated) or a timing of this machine, each with why; a figure is credited to the
//      narrowest entry around it. A `$` block listed there is not run (a GPU node's
//      transcript). An entry that covers no figure is an error: the list stays honest.
//   4. The scan: every number of the READMEs, lessons/ and lexicon/ that looks like a figure
//      from a run (a size in KiB/MiB/GiB/TiB, a time in ms or us, a number with 4 decimals or
//      more, 16 hex digits, tokens/s) is in a checked block, is a registered figure or is in a
//      listed paragraph; else the test fails, naming the file and the line.
//
// How the commands run: each distinct command once (a cache by its text), in the documents'
// order (README.md, the folders' READMEs, lessons/ and lexicon/ in order of name), then the
// registry's, all in one
// scratch copy of the checkout (links to ROOT's files and folders, and its own empty runs/),
// so that `--run-dir runs/x` lands there and a later command reads runs/x: the dashboard's
// frame is of a run a command before it made. The environment is fixed: no variable of the
// caller's but PATH and the Makefile's build settings (CC, CUDA, CUDA_HOME, NCCL_HOME, NATIVE,
// DEPS), LC_ALL=C.UTF-8 (the dashboard's braille), NO_COLOR=1, TERM=dumb, TZ=UTC,
// CUDA_VISIBLE_DEVICES empty (a GPU machine's runs are the CPU's, which the documents
// quote), SHARDLAB_TIMEOUT_S=60, HOME the scratch copy, and MAKEFLAGS=-s: make's echo of
// the recipe is make's line, not the program's.
//
// Why this shape: the figures live in the documents, where a reader sees them, not in a copy
// the test keeps; a block is the command's own output, so whoever edits it sees what checks
// it. Regeneration touches only what differs: a block keeps its choice of lines and its
// `...`, and a stale line keeps the document's times (masked), so that a diff shows the real
// changes only. Figures in sentences stay where the prose needs them, and the registry says
// where each comes from; the scan is what keeps a new, unchecked figure out. C, like the
// other tests: the matching is small pure functions (tests/figures.h), each proven on crafted
// input first (check_engine). Cost: every command runs once, the short runs the documents
// quote (20 to 50 steps) where the length is not the point; the two 1000-step runs are
// labs/README.md's headline output (the run tui/README.md's dashboard frame draws) and the
// single-rank run drawn beside it. About 150 commands, three minutes of CPU on the 2-core VM.
//
// Broken on purpose: labs/README.md's "peak memory per rank 5.45 MiB" edited to 5.70 fails part 1
// naming labs/README.md, the line, both lines; lesson 06's "drops from 7.76 MiB" edited to 8.26
// fails part 2; a new "peak 9.99 MiB" in a lesson fails part 4. The engine's own checks
// (check_engine) fail with a mask that hides a loss, or a `...` that costs what a missing
// line costs.
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <signal.h>
#include <sys/stat.h>

#include "common/harness/hash.h"
#include "figures.h"
#include "labtest.h"
#include "readmes.h"
#include "test.h"

static char root[4096];
static int writing;
static const char *only, *cache;

// ---------------------------------------------------------------------------------------
// Documents, and the edits --write makes to them

typedef struct {
    size_t at, len;
    char *with;
} Edit;

typedef struct {
    char name[256];  // README.md, labs/README.md, lessons/01-why-distributed.md, ...
    char *text;
    Lines lines;
    size_t *off;  // each line's offset in text
    Units units;
    int *not_run;   // per unit: a `$` block that not-runs.txt lists, which is not run
    char *checked;  // per line: inside a block that is run and compared
    Edit *edits;
    int nedits, capedits;
} Doc;

#define MAX_DOCS 96
static Doc docs[MAX_DOCS];
static int ndocs;

static int doc_line_of(const Doc *d, size_t at) {
    int lo = 0, hi = d->lines.n - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (d->off[mid] <= at)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static void doc_edit(Doc *d, size_t at, size_t len, const char *with) {
    if (d->nedits == d->capedits)
        d->edits = realloc(d->edits, sizeof(Edit) * (size_t)(d->capedits = d->capedits * 2 + 8));
    d->edits[d->nedits++] = (Edit){at, len, strdup(with)};
}

static int load_doc(const char *name) {
    if (ndocs == MAX_DOCS) return 0;
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", root, name);
    Doc *d = &docs[ndocs];
    memset(d, 0, sizeof *d);
    d->text = read_file(path, NULL);
    if (!d->text) return 0;
    snprintf(d->name, sizeof d->name, "%s", name);
    lines_split(&d->lines, d->text);
    d->off = malloc(sizeof(size_t) * (size_t)(d->lines.n + 1));
    size_t at = 0;
    for (int i = 0; i < d->lines.n; i++) {
        d->off[i] = at;
        const char *nl = strchr(d->text + at, '\n');
        at = nl ? (size_t)(nl - d->text) + 1 : strlen(d->text);
    }
    d->off[d->lines.n] = at;
    units_of(&d->lines, &d->units);
    d->not_run = calloc((size_t)d->units.n + 1, sizeof(int));
    d->checked = calloc((size_t)d->lines.n + 1, 1);
    ndocs++;
    return 1;
}

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

// README.md and the folders' READMEs (readmes.h: labs/README.md, labs/command/grade/README.md, ...,
// lessons/README.md among them), then the lessons and the terms in order of name (or --only's
// one).
static void load_docs(void) {
    if (only) {
        load_doc(only);
        return;
    }
    char *readmes[README_MAX];
    int nreadmes = readme_paths(root, readmes, README_MAX);
    for (int i = 0; i < nreadmes; i++) {
        load_doc(readmes[i]);
        free(readmes[i]);
    }
    const char *dirs[] = {"lessons", "lexicon"};
    for (int k = 0; k < 2; k++) {
        char path[4200], *names[80];
        int n = 0;
        snprintf(path, sizeof path, "%s/%s", root, dirs[k]);
        DIR *dir = opendir(path);
        for (struct dirent *e; dir && (e = readdir(dir)) && n < 80;) {
            size_t l = strlen(e->d_name);
            if (l > 3 && !strcmp(e->d_name + l - 3, ".md") && strcmp(e->d_name, "README.md"))  // read above
                names[n++] = strdup(e->d_name);
        }
        if (dir) closedir(dir);
        qsort(names, (size_t)n, sizeof names[0], by_name);
        for (int i = 0; i < n; i++) {
            char name[300];
            snprintf(name, sizeof name, "%s/%s", dirs[k], names[i]);
            load_doc(name);
            free(names[i]);
        }
    }
}

static Doc *doc_named(const char *name) {
    for (int i = 0; i < ndocs; i++)
        if (!strcmp(docs[i].name, name)) return &docs[i];
    return NULL;
}

// ---------------------------------------------------------------------------------------
// Commands: run once each, in order, in the scratch copy

typedef struct {
    char *cmd;
    char *out;
    int status;
    double secs;
} Run;

#define MAX_RUNS 400
static Run runs[MAX_RUNS];
static int nruns;
static char farm[512];

static int run_index(const char *cmd) {
    for (int i = 0; i < nruns; i++)
        if (!strcmp(runs[i].cmd, cmd)) return i;
    if (nruns == MAX_RUNS) return -1;
    runs[nruns] = (Run){.cmd = strdup(cmd), .status = -1};
    return nruns++;
}

// The scratch copy: a link to each of ROOT's files and folders but runs/, and an empty runs/.
static int make_farm(void) {
    snprintf(farm, sizeof farm, "%s/checkout", tmp);
    struct stat st;
    if (cache && stat(farm, &st) == 0) return 1;  // made by an earlier run, its runs/ kept
    if (mkdir(farm, 0755) != 0) return 0;
    DIR *d = opendir(root);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") || !strcmp(e->d_name, "runs") ||
            !strcmp(e->d_name, ".git"))
            continue;
        char from[4400], to[900];
        snprintf(from, sizeof from, "%s/%s", root, e->d_name);
        snprintf(to, sizeof to, "%s/%s", farm, e->d_name);
        if (symlink(from, to) != 0) return closedir(d), 0;
    }
    if (d) closedir(d);
    char runs_dir[700];
    snprintf(runs_dir, sizeof runs_dir, "%s/runs", farm);
    return d && mkdir(runs_dir, 0755) == 0;
}

// Runs r's command with sh in the scratch copy, in the fixed environment, its stdout and
// stderr together; ends it (and what it started) after limit_s.
static void run_command(Run *r, double limit_s) {
    // Its output's file, named by the command (--cache finds it there again).
    char out_path[600], status_path[640];
    snprintf(out_path, sizeof out_path, "%s/out-%016llx", tmp,
             (unsigned long long)fnv1a64(r->cmd, strlen(r->cmd), FNV1A64_INIT));
    snprintf(status_path, sizeof status_path, "%s.status", out_path);
    if (cache) {
        char *st = read_file(status_path, NULL);
        if (st && sscanf(st, "%d %lf", &r->status, &r->secs) == 2 && (r->out = read_file(out_path, NULL))) {
            free(st);
            return;
        }
        free(st);
    }
    static char env_store[16][4200];
    char *envp[17];
    int ne = 0;
    const char *keep[] = {"PATH", "CC", "CUDA", "CUDA_HOME", "NCCL_HOME", "NATIVE", "DEPS"};
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        if (getenv(keep[i])) snprintf(env_store[ne], sizeof env_store[0], "%s=%s", keep[i], getenv(keep[i])), ne++;
    const char *fixed[] = {"LC_ALL=C.UTF-8",
                           "LANG=C.UTF-8",
                           "NO_COLOR=1",
                           "TERM=dumb",
                           "TZ=UTC",
                           "CUDA_VISIBLE_DEVICES=",
                           "MAKEFLAGS=-s --no-print-directory",
                           "SHARDLAB_TIMEOUT_S=60"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        snprintf(env_store[ne++], sizeof env_store[0], "%s", fixed[i]);
    snprintf(env_store[ne++], sizeof env_store[0], "HOME=%s", farm);
    for (int i = 0; i < ne; i++) envp[i] = env_store[i];
    envp[ne] = NULL;
    fflush(stdout);
    double t0 = now_s();
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644), in = open("/dev/null", O_RDONLY);
        if (out < 0 || in < 0 || chdir(farm) != 0) _exit(127);
        dup2(in, 0), dup2(out, 1), dup2(out, 2);
        execle("/bin/sh", "sh", "-c", r->cmd, (char *)NULL, envp);
        _exit(127);
    }
    setpgid(pid, pid);
    int status = 0, late = 0;
    for (;;) {
        siginfo_t info = {0};
        if (waitid(P_PID, (id_t)pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == pid) break;
        if (now_s() - t0 > limit_s) {
            late = 1;
            break;
        }
        usleep(20000);
    }
    kill(-pid, SIGKILL);  // anything it left running in its group
    waitpid(pid, &status, 0);
    r->secs = now_s() - t0;
    r->status = late ? 124 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r->out = read_file(out_path, NULL);
    if (!r->out) r->out = strdup("");
    char line[64];
    snprintf(line, sizeof line, "%d %.3f\n", r->status, r->secs);
    write_text(status_path, "w", line);
}

// ---------------------------------------------------------------------------------------
// tests/figures/not-runs.txt: the paragraphs whose figures are not from a run

typedef struct {
    char file[256], *text, *why;  // file may be a pattern (lessons/*.md); text "## Heading": its section
    int line;                     // in not-runs.txt
    int covers, block;            // figures it covers; 1 if it names a `$` block (which is then not run)
} Listed;

// Where an entry applies: lines [first, last] of a document.
typedef struct {
    int entry;
    Doc *doc;
    int first, last;
} Cover;

#define MAX_LISTED 200
static Listed listed[MAX_LISTED];
static int nlisted;
static Cover coverage[MAX_LISTED * 4];
static int ncoverage;

// The section a "## Heading" names: its heading line to the line before the next heading of
// that level or above. -1 if it is not there.
static int section_of(const Doc *d, const char *heading, int *last) {
    for (int i = 0; i < d->lines.n; i++)
        if (!strcmp(d->lines.line[i], heading)) {
            int j = i + 1;
            while (j < d->lines.n && strncmp(d->lines.line[j], "## ", 3) && strncmp(d->lines.line[j], "# ", 2)) j++;
            *last = j - 1;
            return i;
        }
    return -1;
}

// "FILE: TEXT" lines, each followed by indented lines of why. Returns 0 on a malformed file.
static int load_listed(void) {
    char path[4400];
    snprintf(path, sizeof path, "%s/tests/figures/not-runs.txt", root);
    char *text = read_file(path, NULL);
    if (!text) return EXPECT(0, "tests/figures/not-runs.txt is there"), 0;
    Lines L;
    lines_split(&L, text);
    int ok = 1;
    for (int i = 0; i < L.n; i++) {
        const char *s = L.line[i];
        if (!*s || *s == '#') continue;
        if (*s == ' ') {
            if (!nlisted) return EXPECT(0, "not-runs.txt:%d: a reason before any entry", i + 1), 0;
            Listed *e = &listed[nlisted - 1];
            while (*s == ' ') s++;
            size_t n = (e->why ? strlen(e->why) + 1 : 0) + strlen(s) + 1;
            char *w = malloc(n);
            snprintf(w, n, "%s%s%s", e->why ? e->why : "", e->why ? " " : "", s);
            free(e->why), e->why = w;
            continue;
        }
        const char *colon = strstr(s, ": ");
        if (!colon || nlisted == MAX_LISTED) {
            ok = EXPECT(0, "not-runs.txt:%d: an entry is `FILE: TEXT`, then indented lines of why: %s", i + 1, s);
            continue;
        }
        Listed *e = &listed[nlisted++];
        *e = (Listed){.line = i + 1};
        snprintf(e->file, sizeof e->file, "%.*s", (int)(colon - s), s);
        e->text = strdup(colon + 2);
    }
    lines_free(&L);
    free(text);
    for (int i = 0; i < nlisted; i++) {
        Listed *e = &listed[i];
        int files = 0, bad = 0;
        for (int k = 0; k < ndocs; k++) {
            Doc *d = &docs[k];
            if (fnmatch(e->file, d->name, FNM_PATHNAME) != 0) continue;
            int first, last = -1;
            if (!strncmp(e->text, "## ", 3)) {
                first = section_of(d, e->text, &last);
            } else {
                size_t vs = 0, vl;
                int count = fig_find(d->text, e->text, &vs, &vl);  // spaces flexible, as a figure's text
                int u = count == 1 ? unit_at(&d->units, doc_line_of(d, vs)) : -1;
                first = u >= 0 ? d->units.first[u] : -1, last = u >= 0 ? d->units.last[u] : -1;
                if (count > 1)
                    bad++, printf("# not-runs.txt:%d: %s holds \"%s\" %d times\n", e->line, d->name, e->text, count);
                if (u >= 0 && !strncmp(d->lines.line[first] + strspn(d->lines.line[first], " "), "```", 3) &&
                    first + 1 <= last &&
                    !strncmp(d->lines.line[first + 1] + strspn(d->lines.line[first + 1], " "), "$ ", 2)) {
                    e->block = 1;
                    for (int l = first; l <= last; l++) d->not_run[unit_at(&d->units, l)] = 1;
                }
            }
            if (first < 0) continue;
            files++;
            if (ncoverage < (int)(sizeof coverage / sizeof coverage[0]))
                coverage[ncoverage++] = (Cover){i, d, first, last};
        }
        // Proves: an entry names a paragraph (or a section) that is there, once a file, and
        // says why. (With --only, another document's entries match nothing and are skipped.)
        if (only && !files && !bad) continue;
        if (!EXPECT(files > 0 && !bad && e->why, "not-runs.txt:%d: %s: \"%s\" is there (in %d file(s)) and says why",
                    e->line, e->file, e->text, files))
            ok = 0;
    }
    return ok;
}

// A stale figure: a failed check; or, with --write, when its command ran to its end, a line
// saying that it is rewritten (whoever runs make docs-figures reviews the diff, so only what it
// cannot fix fails there).
static int ran_to_end(const Run *r) { return r->status >= 0 && r->status < 124; }

__attribute__((format(printf, 2, 3))) static void stale(const Run *r, const char *fmt, ...) {
    char msg[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (writing && ran_to_end(r))
        printf("# rewritten: %s\n", msg);
    else
        EXPECT(0, "%s", msg);
}

// ---------------------------------------------------------------------------------------
// 1. Output blocks

typedef struct {
    Doc *doc;
    int cmd_line;  // the `$ ` line (0-based, in the document)
    int first, n;  // the lines it printed, as the document shows them
    int indent;    // the fence's indentation, which every line of the block has
    int run;
} Entry;

#define MAX_ENTRIES 200
static Entry entries[MAX_ENTRIES];
static int nentries;

// The document's fenced blocks whose first line is `$ <command>`, as entries; a block that
// not-runs.txt lists is not run.
static void find_blocks(Doc *d) {
    for (int i = 0; i < d->lines.n; i++) {
        const char *s = d->lines.line[i];
        int indent = 0;
        while (s[indent] == ' ') indent++;
        if (strncmp(s + indent, "```", 3) != 0) continue;
        int close = i + 1;
        while (close < d->lines.n) {
            const char *t = d->lines.line[close];
            while (*t == ' ') t++;
            if (!strncmp(t, "```", 3)) break;
            close++;
        }
        const char *first = i + 1 < close ? d->lines.line[i + 1] : "";
        if ((int)strlen(first) > indent && !strncmp(first + indent, "$ ", 2) && !d->not_run[unit_at(&d->units, i)]) {
            for (int j = i + 1; j < close; j++) {
                d->checked[j] = 1;
                const char *t = d->lines.line[j];
                if ((int)strlen(t) > indent && !strncmp(t + indent, "$ ", 2) && nentries < MAX_ENTRIES) {
                    Entry *e = &entries[nentries++];
                    *e = (Entry){d, j, j + 1, 0, indent, run_index(t + indent + 2)};
                } else if (nentries) {
                    entries[nentries - 1].n++;
                }
            }
        }
        i = close;
    }
}

// The line as the document shows it, without the block's indentation.
static const char *shown(const Entry *e, int k) {
    const char *s = e->doc->lines.line[e->first + k];
    return (int)strlen(s) >= e->indent ? s + e->indent : "";
}

static void check_entry(Entry *e) {
    Run *r = &runs[e->run];
    Lines out;
    lines_split(&out, r->out);
    char **q = malloc(sizeof(char *) * (size_t)(e->n + 1));
    for (int k = 0; k < e->n; k++) q[k] = (char *)shown(e, k);
    AlignOp *ops;
    int nops = align_block(q, e->n, out.line, out.n, &ops), bad = 0;
    Doc *d = e->doc;
    const char *name = d->name;
    for (int k = 0; k < nops; k++) {
        const AlignOp *op = &ops[k];
        int at = op->q >= 0 ? e->first + op->q + 1 : e->first + 1;  // 1-based, in the document
        if (op->kind == OP_STALE)
            bad++, stale(r, "%s:%d: shows `%s`; `%s` prints `%s`", name, at, q[op->q], r->cmd, out.line[op->o]);
        else if (op->kind == OP_GONE)
            bad++, stale(r, "%s:%d: shows `%s`, which `%s` no longer prints", name, at, q[op->q], r->cmd);
        else if (op->kind == OP_NEW) {
            // The line of the document this printed line would go after.
            int after = e->cmd_line + 1;
            for (int t = k - 1; t >= 0; t--)
                if (ops[t].q >= 0) {
                    after = e->first + ops[t].q + 1;
                    break;
                }
            bad++,
                stale(r, "%s:%d: `%s` prints `%s` after this line, which the block does not show (show it, or a `...`)",
                      name, after, r->cmd, out.line[op->o]);
        }
    }
    // Proves: the block is what its command prints today, line for line, but for what varies
    // between runs (figures.h's MASKS). Broken: labs/README.md's ddp peak edited to 5.70 MiB: caught.
    if (!bad)
        EXPECT(1, "%s:%d: `%s`: the %d lines shown are what it prints (exit %d, %.1f s)", name, e->cmd_line + 1, r->cmd,
               e->n, r->status, r->secs);
    else if (r->status == 124 || r->status == 127)
        printf("# %s:%d: `%s` did not finish (exit %d): %s\n", name, e->cmd_line + 1, r->cmd, r->status,
               one_line(r->out));
    if (bad && writing && ran_to_end(r)) {
        // The block rewritten: its lines kept where they match, the printed line where one is
        // stale or new, a gone one left out, every `...` kept.
        StrBuf sb;
        sb_init(&sb);
        sb_append(&sb, "", 0);
        for (int k = 0; k < nops; k++) {
            const AlignOp *op = &ops[k];
            const char *line = NULL;
            char merged[4096];
            if (op->kind == OP_SAME)
                line = q[op->q];
            else if (op->kind == OP_NEW)
                line = out.line[op->o];
            else if (op->kind == OP_STALE)
                line_merge(q[op->q], out.line[op->o], merged, sizeof merged), line = merged;
            else if (op->kind == OP_ELIDED && (k == 0 || ops[k - 1].q != op->q))
                line = q[op->q];
            if (line) sb_printf(&sb, "%*s%s\n", e->indent, "", line);
        }
        size_t from = d->off[e->first], to = d->off[e->first + e->n];
        doc_edit(d, from, to - from, sb.data);
        sb_free(&sb);
    }
    free(ops), free(q);
    lines_free(&out);
}

// ---------------------------------------------------------------------------------------
// 2. Figures in sentences: tests/figures/figures.txt

typedef struct {
    char file[256], *text, *read, format[16];
    int line, run;
} Figure;

#define MAX_FIGURES 600
static Figure figures[MAX_FIGURES];
static int nfigures;

static int load_figures(void) {
    char path[4400];
    snprintf(path, sizeof path, "%s/tests/figures/figures.txt", root);
    char *text = read_file(path, NULL);
    if (!text) return EXPECT(0, "tests/figures/figures.txt is there"), 0;
    Lines L;
    lines_split(&L, text);
    int ok = 1;
    const char *cmd = NULL;
    for (int i = 0; i < L.n; i++) {
        const char *s = L.line[i];
        if (!*s || *s == '#') continue;
        if (!strncmp(s, "$ ", 2)) {
            cmd = s + 2;
            continue;
        }
        const char *colon = strstr(s, ": "), *arrow = strstr(s, " <= ");
        if (only && !(colon && (size_t)(colon - s) == strlen(only) && !strncmp(s, only, strlen(only))))
            continue;  // another document's
        int run = cmd ? run_index(cmd) : -1;
        if (run < 0 || !colon || !arrow || arrow < colon || nfigures == MAX_FIGURES) {
            ok = EXPECT(0, "figures.txt:%d: a figure is `FILE: TEXT <= READ` under a `$ command` line: %s", i + 1, s);
            continue;
        }
        Figure *f = &figures[nfigures++];
        *f = (Figure){.line = i + 1, .run = run};
        snprintf(f->file, sizeof f->file, "%.*s", (int)(colon - s), s);
        f->text = strndup(colon + 2, (size_t)(arrow - colon - 2));
        f->read = strdup(arrow + 4);
        // "... as %.2f": the figure quoted rounded.
        char *as = strstr(f->read, " as %");
        if (as && strlen(as + 4) < sizeof f->format) {
            snprintf(f->format, sizeof f->format, "%s", as + 4);
            *as = 0;
        }
        // The format is one float conversion (printf is handed it), then maybe "/divisor".
        regex_t fmt;
        int good = regcomp(&fmt, "^%,?[0-9]*(\\.[0-9]+)?[fd](/[0-9]+)?$", REG_EXTENDED | REG_NOSUB) == 0;
        if (good && f->format[0] && regexec(&fmt, f->format, 0, NULL, 0) != 0)
            ok = EXPECT(0, "figures.txt:%d: `as %s`: a format is %%.Nf, %%d or %%,d, maybe with /DIVISOR", i + 1,
                        f->format),
            f->format[0] = 0;
        if (good) regfree(&fmt);
        if (!strstr(f->text, "{}") || !strstr(f->read, "{}"))
            ok = EXPECT(0, "figures.txt:%d: the text and the reading each hold {} where the figure stands", i + 1);
    }
    lines_free(&L);
    free(text);
    return ok;
}

static void check_figure(Figure *f) {
    Doc *d = doc_named(f->file);
    Run *r = &runs[f->run];
    size_t vs, vl;
    int count = d ? fig_find(d->text, f->text, &vs, &vl) : 0;
    // Proves: the registered text is in the document once, so the figure checked is the one
    // a reader sees.
    if (!EXPECT(count == 1, "figures.txt:%d: %s holds \"%s\" once (%d)", f->line, f->file, f->text, count)) return;
    int line = doc_line_of(d, vs) + 1;
    char quoted[256];
    snprintf(quoted, sizeof quoted, "%.*s", (int)vl, d->text + vs);
    // Where to read it: the command's output, or a file it wrote ("file PATH: ...").
    const char *where = r->out, *pattern = f->read;
    char *file_text = NULL;
    if (!strncmp(f->read, "file ", 5) && strstr(f->read, ": ")) {
        const char *c = strstr(f->read, ": ");
        char path[1200];
        snprintf(path, sizeof path, "%s/%.*s", farm, (int)(c - f->read - 5), f->read + 5);
        file_text = read_file(path, NULL);
        where = file_text ? file_text : "";
        pattern = c + 2;
    }
    size_t ms, ml;
    int found = fig_find(where, pattern, &ms, &ml);
    char measured[256];
    snprintf(measured, sizeof measured, "%.*s", (int)ml, where + ms);
    if (found && f->format[0]) {
        char *end;
        double v = strtod(measured, &end);
        // "%.0f/1048576": the number divided first (bytes as MiB); %d: rounded down, as a
        // shell's $((a / b)) does.
        char fmt[16];
        snprintf(fmt, sizeof fmt, "%s", f->format);
        char *slash = strchr(fmt, '/');
        if (slash) *slash = 0, v /= atof(slash + 1);
        if (end != measured && fmt[1] == ',') {  // "%,d": a whole number, its thousands set apart by commas
            char digits[64];
            int n = snprintf(digits, sizeof digits, "%lld", (long long)floor(v)), k = 0;
            for (int i = 0; i < n; i++) {
                if (i > 0 && digits[i - 1] != '-' && (n - i) % 3 == 0) measured[k++] = ',';
                measured[k++] = digits[i];
            }
            measured[k] = 0;
        } else if (end != measured && fmt[strlen(fmt) - 1] == 'd')
            snprintf(measured, sizeof measured, "%lld", (long long)floor(v));
        else if (end != measured)
            snprintf(measured, sizeof measured, fmt, v);  // one %f conversion: load_figures checked it
    }
    // Proves: the figure is what the command prints today. Broken: lesson 06's single peak
    // edited to 8.26 MiB: caught, naming the line and both values.
    if (!found)
        EXPECT(0, "%s:%d: %s: `%s` does not print \"%s\" (exit %d): %s", f->file, line, quoted, r->cmd, pattern,
               r->status, one_line(r->out));
    else if (!strcmp(quoted, measured))
        EXPECT(1, "%s:%d: %s (`%s`)", f->file, line, quoted, r->cmd);
    else {
        stale(r, "%s:%d: %s, where it prints %s (`%s`)", f->file, line, quoted, measured, r->cmd);
        if (writing && ran_to_end(r)) doc_edit(d, vs, vl, measured);
    }
    free(file_text);
}

// The spans of the registered figures, per document, for the scan.
typedef struct {
    Doc *doc;
    size_t at, len;
} Span;
static Span spans[MAX_FIGURES];
static int nspans;

static void note_spans(void) {
    for (int i = 0; i < nfigures; i++) {
        Doc *d = doc_named(figures[i].file);
        size_t vs, vl;
        if (d && fig_find(d->text, figures[i].text, &vs, &vl) == 1) spans[nspans++] = (Span){d, vs, vl};
    }
}

// ---------------------------------------------------------------------------------------
// 4. The scan

static void scan_docs(void) {
    int hits = 0, in_blocks = 0, registered = 0, in_listed = 0, unaccounted = 0;
    for (int di = 0; di < ndocs; di++) {
        Doc *d = &docs[di];
        for (int i = 0; i < d->lines.n; i++) {
            int so[32], eo[32];
            int n = scan_figures(d->lines.line[i], so, eo, 32);
            for (int k = 0; k < n; k++) {
                hits++;
                if (d->checked[i]) {
                    in_blocks++;
                    continue;
                }
                size_t a = d->off[i] + (size_t)so[k], b = d->off[i] + (size_t)eo[k];
                int reg = 0;
                for (int s = 0; s < nspans && !reg; s++)
                    reg = spans[s].doc == d && spans[s].at < b && a < spans[s].at + spans[s].len;
                if (reg) {
                    registered++;
                    continue;
                }
                // The narrowest entry that covers the line (a paragraph's before its section's).
                int by = -1, width = 1 << 30;
                for (int c = 0; c < ncoverage; c++)
                    if (coverage[c].doc == d && coverage[c].first <= i && i <= coverage[c].last &&
                        coverage[c].last - coverage[c].first < width)
                        by = coverage[c].entry, width = coverage[c].last - coverage[c].first;
                if (by >= 0) {
                    in_listed++, listed[by].covers++;
                    continue;
                }
                unaccounted++;
                // Proves: a figure a document quotes is checked or said not to be from a run.
                // Broken: a new "peak 9.99 MiB" in a lesson: caught, naming the line.
                EXPECT(0, "%s:%d: \"%.*s\" looks like a figure from a run, and nothing checks it", d->name, i + 1,
                       eo[k] - so[k], d->lines.line[i] + so[k]);
            }
        }
    }
    int idle = 0;
    for (int l = 0; l < nlisted; l++) {
        int here = 0;
        for (int c = 0; c < ncoverage; c++) here |= coverage[c].entry == l;
        // (With --only, an entry for many files may cover figures in the others.)
        if (here && !listed[l].covers && !listed[l].block && !(only && strpbrk(listed[l].file, "*?["))) {
            idle++;
            // Proves: the list holds no entry that covers nothing (it stays short and honest).
            EXPECT(0, "not-runs.txt:%d: %s: the paragraph of \"%s\" has no figure to list", listed[l].line,
                   listed[l].file, listed[l].text);
        }
    }
    EXPECT(unaccounted == 0 && idle == 0,
           "every figure-looking number is accounted for: %d found, %d in checked blocks, %d registered, %d in %d "
           "listed paragraphs, %d not%s",
           hits, in_blocks, registered, in_listed, nlisted, unaccounted,
           unaccounted ? " (named above: show each in a `$` block, register it in tests/figures/figures.txt, or list "
                         "its paragraph in tests/figures/not-runs.txt)"
                       : "");
}

// ---------------------------------------------------------------------------------------
// --write: the edits applied, the last first

static int by_offset_desc(const void *a, const void *b) {
    const Edit *x = a, *y = b;
    return (x->at < y->at) - (x->at > y->at);
}

static int write_docs(void) {
    int files = 0, edits = 0;
    for (int i = 0; i < ndocs; i++) {
        Doc *d = &docs[i];
        if (!d->nedits) continue;
        qsort(d->edits, (size_t)d->nedits, sizeof(Edit), by_offset_desc);
        StrBuf sb;
        sb_init(&sb);
        sb_append(&sb, d->text, strlen(d->text));
        for (int k = 0; k < d->nedits; k++) {
            Edit *e = &d->edits[k];
            if (k > 0 && e->at + e->len > d->edits[k - 1].at) continue;  // overlapping edits: the later one wins
            StrBuf out;
            sb_init(&out);
            sb_append(&out, sb.data, e->at);
            sb_append(&out, e->with, strlen(e->with));
            sb_append(&out, sb.data + e->at + e->len, sb.len - e->at - e->len);
            sb_free(&sb);
            sb = out;
            edits++;
        }
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", root, d->name);
        FILE *f = fopen(path, "w");
        if (!f || fwrite(sb.data, 1, sb.len, f) != sb.len || fclose(f) != 0)
            return printf("# cannot write %s\n", path), 0;
        printf("# rewrote %s (%d edit(s))\n", d->name, d->nedits);
        sb_free(&sb);
        files++;
    }
    printf("# docs-figures: %d edit(s) in %d file(s); review them with git diff\n", edits, files);
    return 1;
}

// After --write, every registered text is still found once in its rewritten document: a
// text that held another figure (not as {?}) would no longer be found, and the figure would
// be lost to the test.
static void check_texts_after(void) {
    for (int i = 0; i < nfigures; i++) {
        char path[4400];
        snprintf(path, sizeof path, "%s/%s", root, figures[i].file);
        char *text = read_file(path, NULL);
        size_t vs, vl;
        int count = text ? fig_find(text, figures[i].text, &vs, &vl) : 0;
        if (count != 1)
            EXPECT(0,
                   "figures.txt:%d: after the rewrite %s holds \"%s\" %d times: a figure in the text changed (write it "
                   "as {?})",
                   figures[i].line, figures[i].file, figures[i].text, count);
        free(text);
    }
}

// ---------------------------------------------------------------------------------------
// The engine on crafted input: each piece shown catching what it must (and only that)

static void check_engine(void) {
    // A line that differs only where runs differ matches; one whose loss differs does not.
    const char *a = "step    50/1000  loss 2.8527 (floor 1.2657)     8.1 ms/step  elapsed   0.4s";
    const char *b = "step    50/1000  loss 2.8527 (floor 1.2657)    43.7 ms/step  elapsed  11.6s";
    const char *c = "step    50/1000  loss 2.8528 (floor 1.2657)    43.7 ms/step  elapsed  11.6s";
    // Proves: times and spacing are not compared, a loss is. Broken: a mask matching
    // "loss ([0-9.]+)": the second check fails.
    EXPECT(line_cost(a, b) == COST_EQUAL, "engine: a step line differing in its time and spacing only matches");
    EXPECT(line_cost(a, c) != COST_EQUAL, "engine: a step line whose loss differs in the 4th decimal does not");
    EXPECT(line_cost("ddp: 2 rank(s) on cpu, backend shm; run directory runs/ddp-20261121-061335-e8ea",
                     "ddp: 2 rank(s) on cpu, backend shm; run directory runs/ddp-20261202-021421-6934") == COST_EQUAL,
           "engine: run directory names are not compared");
    EXPECT(line_cost("done: 53715 tokens/s over 2 ranks; peak memory per rank 5.70 MiB",
                     "done: 17845 tokens/s over 2 ranks; peak memory per rank 5.45 MiB") != COST_EQUAL,
           "engine: a peak that differs is caught even beside a rate that is not compared");
    EXPECT(line_cost("param_hash 6c5c3811b63862ac", "param_hash 6c5c3811b63862ad") != COST_EQUAL,
           "engine: a hash that differs in one digit is caught");

    // A stale line rewritten keeps the document's times (masked) and takes the new figures,
    // its columns kept aligned. Broken: line_merge returning the printed line as it is.
    char merged[256];
    line_merge("step     1/1000  loss 5.5524 (floor 1.2657)     9.6 ms/step  elapsed   0.0s",
               "step     1/1000  loss 5.5525 (floor 1.2657)    32.6 ms/step  elapsed  11.0s", merged, sizeof merged);
    EXPECT(!strcmp(merged, "step     1/1000  loss 5.5525 (floor 1.2657)     9.6 ms/step  elapsed   0.0s"),
           "engine: a regenerated line keeps the document's times, aligned: %s", merged);

    // A block with `...`: the shown lines pair with the printed ones they stand for, a stale
    // one is named, a printed line the block lacks between two shown ones is new.
    char *out[] = {"start",
                   "step 1/1000 loss 5.5524",
                   "step 50/1000 loss 2.8527",
                   "step 100/1000 loss 2.6638",
                   "step 1000/1000 loss 1.8886",
                   "done: peak 5.45 MiB",
                   "run written to runs/x",
                   "finished"};
    char *q[] = {"start",   "step 1/1000 loss 5.5524", "...", "step 1000/1000 loss 1.8887", "done: peak 5.70 MiB",
                 "finished"};
    AlignOp *ops;
    int n = align_block(q, 6, out, 8, &ops), stale = 0, added = 0, gone = 0, elided = 0;
    for (int k = 0; k < n; k++) {
        stale += ops[k].kind == OP_STALE, added += ops[k].kind == OP_NEW, gone += ops[k].kind == OP_GONE;
        elided += ops[k].kind == OP_ELIDED && ops[k].o >= 0;
        if (ops[k].kind == OP_STALE && ops[k].q == 3)
            EXPECT(ops[k].o == 4,
                   "engine: the stale step-1000 line pairs with the printed step 1000, not step 50 or 100");
    }
    // Proves: the alignment names two stale lines and one new one, and lets `...` stand for
    // the two step lines it hides. Broken: a `...` that costs COST_GAP per line: caught.
    EXPECT(
        stale == 2 && added == 1 && gone == 0 && elided == 2,
        "engine: a block against its output: 2 stale lines, 1 printed line not shown, 2 hidden by ... (%d, %d, %d, %d)",
        stale, added, gone, elided);
    free(ops);

    // A figure in a sentence: found by its text across a line break, read from an output.
    size_t vs, vl;
    const char *doc = "the same first loss,\n5.5524, and the tests hold";
    int found = fig_find(doc, "the same first loss, {}, and the tests", &vs, &vl);
    EXPECT(found == 1 && vl == 6 && !strncmp(doc + vs, "5.5524", 6),
           "engine: a figure found by the text around it, across "
           "a line break");
    const char *printed =
        "done: loss 5.5524 -> 1.8886 (floor 1.2657, 0.6229 above it); peak memory per rank 5.45 MiB\n";
    found = fig_find(printed, "peak memory per rank {} MiB", &vs, &vl);
    EXPECT(found == 1 && !strncmp(printed + vs, "5.45", vl) && vl == 4, "engine: a figure read from an output line");
    found = fig_find(printed, "-> {}", &vs, &vl);
    EXPECT(found == 1 && !strncmp(printed + vs, "1.8886", vl) && vl == 6, "engine: a figure at the end of a pattern");

    // The scan: what looks like a figure from a run, and what does not.
    int so[8], eo[8];
    EXPECT(scan_figures("the single run's peak is 8.26 MiB", so, eo, 8) == 1, "engine: the scan finds a size in MiB");
    EXPECT(scan_figures("hash 02b64c2ac847e9a2 and loss 4.0372 at 9.2 ms", so, eo, 8) == 3,
           "engine: the scan finds a hash, a loss and a time");
    EXPECT(scan_figures("16 bytes per parameter, 80 GB, 1e-5, lesson 05, 2.5%", so, eo, 8) == 0,
           "engine: the scan leaves counts, GB, tolerances and percentages alone");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_figures ROOT [--write]\n");
        return 2;
    }
    if (!realpath(argv[1], root)) {
        fprintf(stderr, "test_figures: %s: %s\n", argv[1], strerror(errno));
        return 2;
    }
    const char *usage = "usage: test_figures ROOT [--write] [--only FILE] [--cache DIR]";
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--write"))
            writing = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "--cache") && i + 1 < argc)
            cache = argv[++i];
        else {
            fprintf(stderr, "test_figures: unknown argument '%s' (%s)\n", argv[i], usage);
            return 2;
        }
    }
    if (cache) {
        mkdir(cache, 0755);
        if (!realpath(cache, tmp) || strlen(tmp) > 200) {
            fprintf(stderr, "test_figures: --cache %s: %s\n", cache, strerror(errno));
            return 2;
        }
    } else {
        snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-figures-XXXXXX");
        if (!mkdtemp(tmp)) return 1;
    }
    if (!masks_compile() || !scan_compile()) return 1;
    double t0 = now_s();
    check_engine();

    load_docs();
    // Proves: the documents were found: the READMEs (the front door and six folders'), the
    // lessons and the terms, so a figure moved between them stays checked.
    EXPECT(only ? ndocs == 1 : ndocs >= 70 && doc_named("README.md") && doc_named("labs/README.md"),
           "the READMEs, the lessons and the lexicon read (%d files)", ndocs);
    int lists_ok = load_listed();
    for (int i = 0; i < ndocs; i++) find_blocks(&docs[i]);
    int figures_ok = load_figures();
    EXPECT(make_farm(), "a scratch copy of the checkout at %s", farm);

    // Every command once, in order.
    for (int i = 0; i < nruns; i++) {
        run_command(&runs[i], 300);
        printf("# ran `%s`: exit %d, %.1f s\n", runs[i].cmd, runs[i].status, runs[i].secs);
    }
    for (int i = 0; i < nentries; i++) check_entry(&entries[i]);
    for (int i = 0; i < nfigures; i++) check_figure(&figures[i]);
    note_spans();
    scan_docs();
    EXPECT((only || (nentries >= 1 && nfigures >= 1)) && lists_ok && figures_ok,
           "%d output blocks and %d figures in sentences checked, "
           "%d commands run in %.0f s",
           nentries, nfigures, nruns, now_s() - t0);
    if (writing && !write_docs()) test_failed++;
    if (writing) check_texts_after();
    if (!cache) tmp_finish(test_failed);
    return test_done();
}
