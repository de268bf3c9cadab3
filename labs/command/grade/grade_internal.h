// grade_internal.h — what the grader's files share: the context a check runs in, the
// reference runs, small readers of event fields, and the checks rubric.c lists from memory.c,
// comm.c, methods.c and coverage.c.
//
#ifndef SHARDLAB_GRADE_INTERNAL_H
#define SHARDLAB_GRADE_INTERNAL_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "common/model/gpt.h"
#include "grade.h"

// The runs a check compares with, started on first use by the grader's own lab binaries:
//   REF_SINGLE     the single-rank run on the same global batch (shard: shard -n 1, the same
//                  dataset and strategy); --ref replaces it
//   REF_CKPT_NONE  the same ckpt run with --policy none (recomputation must not change a bit)
typedef enum { REF_SINGLE, REF_CKPT_NONE, REF_COUNT } RefKind;

// A replay: the single-rank reference restarted from one of the run's replay points (the
// state after step `from`, saved by the run: RUN_DIR/replay/step-<from>) for steps
// from+1..to. It starts where the run was, bit for bit, so the two agree as closely as at
// step 1 whatever the step: chaos in fp32 has had no time to grow.
#define GRADE_MAX_REPLAYS 32
#define GRADE_REPLAY_STEPS 10
typedef struct {
    int64_t from, to;
    GradeRun ref;
    int ok;
    char problem[640];
} GradeReplay;

typedef struct {
    const GradeRun *run;
    const GradeRefs *refs;
    GradeRun ref[REF_COUNT];
    int tried[REF_COUNT], ok[REF_COUNT];
    char ref_problem[REF_COUNT][640];
    char ref_label[REF_COUNT][640];   // "single --accum 4 (runs/x/ref-single)"
    GradeReplay replays[GRADE_MAX_REPLAYS];
    int nreplays, replays_tried;
} Ctx;

// The reference of kind k, started (or reused) on first use; NULL with the reason in why.
const GradeRun *ctx_reference(Ctx *x, RefKind k, char *why, size_t n);
// The replays of the run's replay points, started (or reused) on first use; *count of them.
const GradeReplay *ctx_replays(Ctx *x, int *count);
void ctx_free(Ctx *x);

// refs.c: `shardlab run <lab> -n N --ui none args... --run-dir DIR` (launch.h) with the lab
// programs of labs_dir, its output in log_path; returns its exit status (127: not started).
// student_deadline_s > 0: labs_dir holds a student's programs, so the run is in the sandbox
// (sandbox.h), ended after that many seconds (then 124, and *timed_out = 1); 0: the grader's
// own programs, run as they are.
int grade_start_run(const char *labs_dir, const char *lab, int n, char *const *args, const char *dir, const char *log_path,
                    int student_deadline_s, int *timed_out);
// path created anew for writing: what is there (in a student's run directory, maybe a link to
// any file of the grader's user) is unlinked, never written through; the new file is created
// exclusively, not following a link. A descriptor or -1 (errno set); or a FILE, or NULL.
int grade_create_fresh(const char *path);
FILE *grade_fopen_fresh(const char *path);
// The launcher's reason when a run failed, from its output: its last line that names an
// error, else its last non-empty line.
void grade_last_line(const char *path, char *out, size_t n);

// A number field (NaN and the infinities as the schema writes them); NaN if absent.
static inline double ev_num(const JsonValue *v, const char *key) {
    double x;
    return json_number(json_get(v, key), &x) ? x : NAN;
}
static inline double ev_num2(const JsonValue *v, const char *obj, const char *key) {
    return ev_num(json_get(v, obj), key);
}
static inline double ev_num_at(const JsonValue *v, size_t i) {
    const JsonValue *x = json_at(v, i);
    return x && x->type == JSON_NUMBER ? x->number : NAN;
}
static inline const char *ev_str(const JsonValue *v, const char *key) {
    const JsonValue *x = json_get(v, key);
    return x && x->type == JSON_STRING ? x->string : "";
}

static inline void grade_say(char *dst, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static inline void grade_say(char *dst, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dst, n, fmt, ap);
    va_end(ap);
}
// In a check function, with its GradeCheck *c.
#define MEASURED(...) grade_say(c->measured, sizeof c->measured, __VA_ARGS__)
#define EXPECTED(...) grade_say(c->expected, sizeof c->expected, __VA_ARGS__)
#define REASON(...) grade_say(c->reason, sizeof c->reason, __VA_ARGS__)

// rubric.c: the model a run trained, from its config (GptConfig as the labs build it), and
// whether it is one shardlab builds.
GptConfig grade_model(const GradeRun *run);
int grade_model_ok(const GptConfig *m);
// The run's model into *m, or 0 with the check's reason: its config is not a model shardlab builds.
int grade_model_or_say(const GradeRun *run, GptConfig *m, GradeCheck *c);

// memory.c: mem.formula. comm.c: comm.bytes.
void check_mem(Ctx *x, GradeCheck *c);
void check_comm(Ctx *x, GradeCheck *c);
void check_positions(Ctx *x, GradeCheck *c);
void check_routing(Ctx *x, GradeCheck *c);

// methods.c: the checks of one method each; coverage.c: data sharding's.
void check_in_flight(Ctx *x, GradeCheck *c);
void check_bubble(Ctx *x, GradeCheck *c);
void check_recompute_bitwise(Ctx *x, GradeCheck *c);
void check_recompute_count(Ctx *x, GradeCheck *c);
void check_coverage(Ctx *x, GradeCheck *c);
void check_collectives(Ctx *x, GradeCheck *c);
// The activation bytes a ckpt run's policy keeps per rank (ckpt_acts_bytes), NaN if its
// config does not describe one.
double grade_ckpt_acts(const GradeRun *run);

#endif
