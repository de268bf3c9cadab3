// planner.h — a model and a layout read from `shardlab plan`'s words, and the plan of each
// rank: what `shardlab plan` prints and the web's /plan page shows, from memplan.h's formulas.
//
// The words are a lab and its options exactly as `shardlab run` takes them (the catalog checks
// each the same way), plus the planner's own: -n N, --model NAME (GPT-2's shapes), --vocab V,
// --psi P (a parameter count without a shape, as the ZeRO paper counts one), --gpu NAME, and
// the command's --check and --json. Nothing here exits: a layout no lab can run (heads that do
// not divide the width, more stages than blocks, a batch that does not split) is -1 with one
// line saying why, for the command to print or the page to show.
//
// The texts the plan is read with (the precision, the paper's names, the symbols' definitions,
// what a framework adds) are here too: the terminal and the web page print the same ones.
#ifndef SHARDLAB_PLANNER_H
#define SHARDLAB_PLANNER_H

#include <stddef.h>

#include "common/harness/catalog.h"
#include "common/harness/memplan.h"
#include "common/model/gpt.h"
#include "common/runfiles/json.h"

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
    double psi;                // --psi: a parameter count in place of a shape (0: the shape's)
    int check, json;           // the command's --check and --json
    int longest;               // --longest: the plan at the longest --seq that fits (longest_seq)
    int longest_seq;           // what planner_longest found: 0, none fits
    char longest_text[16];     // its --seq value, among the lab's options
    double budget;             // --budget: the bytes a rank may hold, in place of a GPU (0: none)
    char *given[2 * PLANNER_MAX_GIVEN];  // the lab's options: name, value ("" for a flag), ...
    int ngiven;
    char names[PLANNER_MAX_GIVEN][64];
    // What it describes (planner_lay_out).
    GptConfig m;               // (with --psi: the lab's default shape, unused but for --attn and --mixed)
    int batch, accum, micro;   // the global batch, micro-batches a step, sequences a micro-batch
                               // (--psi without --batch: 0, not planned)
    int stages, chunks, dp;    // pp
    int replicate;             // fsdp --replicate R (HSDP; 1 elsewhere)
    int cp_rank, cp_tokens, cp_most;  // cp: the rank planned (the first holding the most tokens), its tokens of a
                                      // sequence, the most a rank holds
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
// The categories' peaks summed (NaN ones left out; NaN if none has one); 1 if that and the
// reserve fit the chosen device, 0 if not, -1 without one (or without a peak).
double planner_peak_total(const MemPlan *mp);
int planner_fits(const Planner *p, const MemPlan *mp);
// --longest: lays the plan out again at the longest --seq up to CATALOG_MAX_SEQ whose every
// stage fits the GPU or --budget (the peak is monotone in T: a binary search over the T the
// layout takes). 0 (longest_seq 0 if none fits), or -1 with why (no device, --seq typed).
int planner_longest(Planner *p, char *why, size_t nwhy);
// Psi: the model's parameters (--psi's, else the shape's). Psi': what ZeRO and FSDP cut, each
// unit padded to N equal shards (memplan_unit_shard), else Psi.
double planner_params(const Planner *p);
double planner_params_padded(const Planner *p);
// The model state after a step: params + grads + optim, what the ZeRO paper counts.
double planner_state(const MemPlan *mp);
// ZeRO stage 0-3 by the paper's names (baseline DDP, P_os, P_os+g, P_os+g+p), and the paper's
// formula of its model state in the planner's symbols: "(e + e + K) Psi'", ...
const char *planner_zero_name(int stage);
const char *planner_zero_formula(int stage);
// The plan of each ZeRO stage 0-3 for this model on these ranks, the rest of the layout as
// given but without --offload: the ZeRO paper's figure 1 (zero only).
void planner_zero_stages(const Planner *p, MemPlan out[4]);
// The bytes a weight and the optimizer state a parameter take, in one line: "fp32: e = 4 ...".
const char *planner_precision(const Planner *p);

// A symbol the plan uses, and what it stands for.
typedef struct {
    char term[16];
    char text[360];
} PlannerTerm;
// The symbols of this plan, defined (Psi, Psi', e and K, the shape's, the units): at most max,
// returns how many.
int planner_terms(const Planner *p, PlannerTerm *out, int max);
// What a framework adds on top of the plan, in one paragraph.
extern const char *const planner_note;

// 163037184 as "163,037,184" (into buf, which it returns).
const char *planner_grouped(char *buf, size_t n, double v);
// Bytes in the ZeRO paper's unit, GB = 10^9 bytes (MB, kB below one), three figures:
// 120 GB, 31.4 GB, 1.88 GB, 548 kB.
const char *planner_gb(char *buf, size_t n, double bytes);
// The plan as one JSON object (see plan_cmd.c's --json).
void planner_json(const Planner *p, StrBuf *sb);

#endif
