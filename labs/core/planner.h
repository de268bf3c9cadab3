// planner.h — a model and a layout read from `shardlab plan`'s words, and the plan of each
// rank: what `shardlab plan` prints and the web's /plan page shows, from memplan.h's formulas.
//
// Defines: PLANNER_MAX_GIVEN, PlannerModel, planner_models[], PlannerGpu, planner_gpus[],
//          Planner, planner_parse(), planner_lay_out(), planner_option(), planner_stages(),
//          planner_stage_params(), planner_stage(), planner_peak_total(), planner_fits(),
//          planner_grouped(), planner_json().
//
// The words are a lab and its options exactly as `shardlab run` takes them (the catalog checks
// each the same way), plus the planner's own: -n N, --model NAME (GPT-2's shapes), --vocab V,
// --gpu NAME, and the command's --check and --json. Nothing here exits: a layout no lab can
// run (heads that do not divide the width, more stages than blocks, a batch that does not
// split) is -1 with one line saying why, for the command to print or the page to show.
#ifndef SHARDLAB_PLANNER_H
#define SHARDLAB_PLANNER_H

#include <stddef.h>

#include "catalog.h"
#include "gpt.h"
#include "json.h"
#include "memplan.h"

#define PLANNER_MAX_GIVEN 64

// The labs' GPT at a preset shape: "labs" (the lab's own defaults), GPT-2's four sizes, and
// Llama 2's 7B and 70B shapes.
typedef struct {
    const char *name;
    int shape[4];      // --layers, --dim, --heads, --seq (labs: 0, the lab's defaults)
    int vocab;
    const char *note;  // how the labs' GPT at this shape differs from the model it is named after
    const char *size;  // that model's parameter count, in words (NULL: the note says it)
} PlannerModel;
extern const PlannerModel planner_models[];
extern const int planner_nmodels;

// A device to fit: its memory as nvidia-smi reports the card's total. "none": no device.
typedef struct {
    const char *name, *what;
    double mib;
} PlannerGpu;
extern const PlannerGpu planner_gpus[];
extern const int planner_ngpus;
#define PLANNER_RESERVE_BYTES (1024.0 * 1024 * 1024)  // held back on a GPU: the CUDA context, libraries

typedef struct {
    // What was asked.
    const CatLab *lab;
    int n, model, gpu, vocab;  // vocab 0: the model's
    int check, json;           // the command's --check and --json
    char *given[2 * PLANNER_MAX_GIVEN];  // the lab's options: name, value ("" for a flag), ...
    int ngiven;
    char names[PLANNER_MAX_GIVEN][64];
    // What it describes (planner_lay_out).
    GptConfig m;
    int batch, accum, micro;   // the global batch, micro-batches a step, sequences a micro-batch
    int stages, chunks, dp;    // pp
    MemLayout l;
} Planner;

// argv[0] is the lab, then its options and the planner's. 0, or -1 with why.
int planner_parse(Planner *p, int argc, char *const argv[], char *why, size_t nwhy);
// The model and layout the words describe; gpu: its kernels' workspace counted. 0, or -1 with why.
int planner_lay_out(Planner *p, int gpu, char *why, size_t nwhy);
// --name's text: as given (the last one; "" for a flag), else the lab's default, else NULL.
const char *planner_option(const Planner *p, const char *name);
// The ranks that differ: a pipeline's stages, else 1. A stage's parameters, and its plan.
int planner_stages(const Planner *p);
double planner_stage_params(const Planner *p, int s);
void planner_stage(const Planner *p, int s, MemPlan *out);
// The categories' peaks summed (NaN ones left out); 1 if that and the reserve fit the chosen
// device, 0 if not, -1 without one.
double planner_peak_total(const MemPlan *mp);
int planner_fits(const Planner *p, const MemPlan *mp);
// 163037184 as "163,037,184" (into buf, which it returns).
const char *planner_grouped(char *buf, size_t n, double v);
// The plan as one JSON object (see plan_cmd.c's --json).
void planner_json(const Planner *p, StrBuf *sb);

#endif
