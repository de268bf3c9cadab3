// grade.h — `shardlab grade`: a lab's invariants checked on what its run wrote.
//
// The grader reads only the run directory (labs/DESIGN.md, The run directory: meta.json,
// rank-<r>.jsonl, summary.json, and files a lab documents, such as shard's index lists),
// never trusts it, and checks what the lab's tests assert, each against an independent
// reference:
//   - the single-rank run on the same global batch, which the grader starts itself with
//     ITS OWN lab binaries (or is given with --ref), so a student's bug in shared code
//     cannot hide by also being in the reference; in them the grader's own code stands in
//     for every student region they reach (solutions.c), so a student's make grade in their
//     own copy compares with what the instructor's does;
//   - the formula of the paper: memory per category, bytes sent per step, the pipeline
//     bubble (p-1)/(m+p-1), micro-batches in flight;
//   - the algorithm's promise: replicas bitwise equal, recomputation bitwise equal to none,
//     every item of an epoch consumed once.
// The rubric is one row per check: PASS or FAIL, measured against expected, points.
//
// Files: load.c reads and checks a run directory, rubric.c holds the generic checks and which
// lab gets which, memory.c, comm.c, methods.c and coverage.c the checks of a formula or a
// method, refs.c the reference runs, grade.c the command (output, and the graded
// configurations that `make grade LABS=dir` runs on a student's copy).
#ifndef SHARDLAB_GRADE_H
#define SHARDLAB_GRADE_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/runfiles/json.h"

// ---- a run directory, read whole ------------------------------------------------------

typedef struct {
    JsonValue **ev;           // every line that is an event of the schema, in file order
    size_t n, cap;
    const JsonValue *start, *end;
    const JsonValue **steps;  // the step events, in order
    size_t nsteps;
    const JsonValue **spans;  // the span events of steps 0..run steps, grouped by step
    size_t *span_at;          // step s's are spans[span_at[s] .. span_at[s + 1])
    long lines, bad;          // lines read; lines that were not events (JSON or schema)
} GradeRank;

typedef struct {
    char dir[PATH_MAX];
    JsonValue *meta, *summary;
    const JsonValue *config;  // meta.json's "config" (never NULL once loaded: {} if absent)
    char lab[32];
    int world;
    int64_t steps;            // config "steps"
    int64_t first_step;       // 1, or the step after a resumed checkpoint's
    int64_t last_step;        // the last step every rank logged: steps, or where it diverged
    // The training diverged: the first step event (over ranks) whose loss, lr or grad_norm is
    // not finite (0: none), and what ("rank 1: grad_norm is NaN"). The labs stop there, so a
    // diverged run is graded on its steps up to there; loss.reference and grads.reference
    // fail naming it.
    int64_t diverged_step;
    char diverged[160];
    GradeRank *ranks;         // world of them
    // Why the run cannot be graded ("" if it can): the first problem found, naming the file.
    char problem[512];
} GradeRun;

// Reads dir. Returns 0 when the run is complete and well formed; -1 with run->problem set
// otherwise (what was readable is still there). Never exits on bad input.
int grade_run_load(GradeRun *run, const char *dir);
void grade_run_free(GradeRun *run);
// The step events of rank r (NULL, 0 if r is out of range).
const JsonValue **grade_steps(const GradeRun *run, int r, size_t *n);
// Rank r's span events of `step`, in file order (NULL, 0 if none).
const JsonValue **grade_spans(const GradeRun *run, int r, int64_t step, size_t *n);
// Config fields, with a default when absent or of another type.
double grade_cfg_num(const GradeRun *run, const char *key, double dflt);
// A whole number within int's range (true and false read as 1 and 0); dflt when absent, of
// another type, fractional or larger: a config value is cast to int only through here.
int grade_cfg_int(const GradeRun *run, const char *key, int dflt);
// A count (batch, accum): a whole number 1..max, dflt when absent, 0 when it is anything else
// (so that products of counts cannot overflow).
int grade_cfg_count(const GradeRun *run, const char *key, int dflt, int max);
const char *grade_cfg_str(const GradeRun *run, const char *key, const char *dflt);

// ---- the rubric -----------------------------------------------------------------------

#define GRADE_MAX_CHECKS 16

typedef struct {
    char name[40];            // "loss.reference"
    const char *what;         // one line: what it proves
    int points;               // earned: points if PASS, else 0
    int max;                  // what it is worth
    int pass;
    int skipped;              // not applicable to this configuration (worth 0)
    // Whole, never cut: expected may name the reference's command and directory (up to 640
    // characters of Ctx's ref_label) inside a sentence, reason a reference's problem (640).
    char measured[1024], expected[1024];
    char reason[1024];        // why it failed or was skipped ("" on PASS)
} GradeCheck;

typedef struct {
    char run_dir[PATH_MAX];
    char lab[32];
    char label[64];           // the graded configuration ("ddp-ring-n4"), or the lab
    GradeCheck checks[GRADE_MAX_CHECKS];
    int n;
    int points, max, failed;
} Grade;

// Where the references come from: the grader's own lab programs (next to the shardlab
// program), whose ref/ holds the reference programs the references start (refs.c), or a
// finished single-rank run given with --ref.
typedef struct {
    char labs_dir[PATH_MAX];
    const char *run_labs_dir; // --labs DIR: the programs that made the runs graded (the ckpt
                              // --policy none reference runs with them), or NULL: labs_dir
    const char *ref_dir;      // --ref, or NULL: start one
    const char *cache_dir;    // --refs: single-rank references kept and reused across runs, or
                              // NULL: each in its run directory (ref-single/)
    int quiet;                // no progress lines on stderr
    int deadline_s;           // --labs: each run of the student's programs runs in the sandbox
                              // (sandbox.h) and is ended after this long (--deadline)
} GradeRefs;

// Grades the run at dir with the rubric of `lab` (NULL: the lab its meta.json names); fills
// g always, even for a run that cannot be read. config: for a run without a meta.json, the
// config fields (a JSON object, or NULL) that say which checks apply, so that it is graded
// out of the same points as when it runs.
void grade_rubric(Grade *g, const char *dir, const char *lab, const char *config, const GradeRefs *refs);
// The rubric as a table (plain text), the grade.json object, the JUnit XML test suite.
void grade_print(const Grade *g, FILE *out);
void grade_to_json(const Grade *g, StrBuf *sb);
void grade_to_junit(const Grade *const *grades, int n, const char *suite, StrBuf *sb);
// grade.json and grade.xml into g->run_dir (through temporary files). Returns 0, or -1 with
// a message on stderr.
int grade_write_run(const Grade *g);

// `shardlab grade ...`; prog_dir is the directory of the shardlab program (its labs/ holds
// the reference binaries). Returns the exit status.
int grade_main(int argc, char **argv, const char *prog_dir);

#endif
