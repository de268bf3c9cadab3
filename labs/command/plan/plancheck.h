// plancheck.h — a plan checked against the lab: the lab run at the plan's shape for 2 steps,
// and every figure every rank logged (each category after the first step and at the peak)
// compared with the plan, to the byte. What `shardlab plan ... --check` prints and the web's
// /plan page shows under "Check it" (POST /api/plan/check): one implementation for both.
//
// Only the labs' own small shapes run: a check starts real processes on this machine, so a
// layout of more than 8 ranks, a preset model (GPT-2's, Llama's), a bare count (--psi), another
// vocabulary than the labs' bytes, or one whose ranks would hold more than PLANCHECK_MAX_BYTES
// together at their peaks is refused with one line, before anything starts.
#ifndef SHARDLAB_PLANCHECK_H
#define SHARDLAB_PLANCHECK_H

#include <stddef.h>

#include "command/launch.h"
#include "common/runfiles/json.h"
#include "planner.h"

#define PLANCHECK_MAX_RANKS 8
#define PLANCHECK_MAX_BYTES (2.0 * 1024 * 1024 * 1024)  // every rank's planned peaks, summed
#define PLANCHECK_STEPS "2"

// One figure of one rank: category k (mem.h), after the first step or at the peak (the last
// step's peak_by). NaN planned: no formula (not compared); NaN logged: not in the log.
typedef struct {
    int rank, stage, category, at_peak;
    double planned, logged;
} PlanCheckFigure;

typedef struct {
    char *args[2 * PLANNER_MAX_GIVEN + 4];  // the run's options (NULL-ended; they point into the Planner)
    char command[2048];                     // "shardlab run LAB -n N OPTIONS... --steps 2"
    int status;          // the launcher's exit status (launch_run_wait: 124 stopped at the timeout)
    char device[8];      // the run's device (meta.json): "cpu" or "cuda"
    PlanCheckFigure *figures;
    int nfigures, compared, equal;  // all figures, those with a formula, those equal to the byte
    char output[1600];   // the end of the launcher's output when the run did not finish
    char kept[64];       // the run's directory when it was kept (a difference; keep_failed), else ""
} PlanCheck;

// 0 if this layout may run here, else -1 with one line in why.
int plancheck_refuse(const Planner *p, char *why, size_t nwhy);
// The run's options and command line (c->args, c->command), before it runs.
void plancheck_prepare(const Planner *p, PlanCheck *c);
// Runs the lab (launch.h: `o` says which program and lab programs, whether detached, its
// timeout; its output goes to a file of the run's), lays the plan out again for the device
// the run used and compares. The run's directory (in /tmp) is removed, unless a figure
// differs and keep_failed is set. 0 if every planned figure is equal, 1 if not (or the run
// failed), -1 if it could not start (why says).
int plancheck_run(Planner *p, const LaunchOpts *o, int keep_failed, PlanCheck *c, char *why, size_t nwhy);
// The check as one JSON object and a newline (`shardlab plan ... --check --json`, and the web's
// answer): {"lab", "ranks", "command", "status", "device", "figures", "equal", "ok", "per_rank":
// [{"rank", "stage", "after": {category: {"planned", "logged", "equal"}}, "peak": {...}}],
// "output"}: a figure without a formula has "planned" and "equal" null; "output" is null unless
// the run did not finish.
void plancheck_json(const Planner *p, const PlanCheck *c, StrBuf *sb);
void plancheck_free(PlanCheck *c);

#endif
