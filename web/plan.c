// plan.c — the planner in the browser: /plan (a form, and the plan it asks for as a table),
// /api/plan (the same plan as `shardlab plan --json`) and POST /api/plan/check (the plan
// checked against the lab run at that shape: what `shardlab plan ... --check --json` prints),
// from command/plan/planner.h and command/plan/plancheck.h: the words of the query are the words of
// `shardlab plan`, checked the same way.
//
// A query names the lab (lab=zero) and any of the planner's words (n, model, vocab, psi, gpu)
// and the lab's options by their names (stage=3, mixed=on, batch=16); an option the lab does
// not take is left out rather than refused, so that one form serves every lab.
//
// The page shows what the terminal shows, from the planner's own texts (planner.h): the table
// of each stage with the model state, zero's four stages by the ZeRO paper's names, the
// symbols defined, what a framework adds. Its styles are app.css's planner section.
//
// A check starts the lab's processes, so it is a POST with the server's token from its own
// pages (web_may_act, as starting a lab is; the page's "Check it" button sends the token in a
// header, web/static/plan.js), takes only the options the lab form may send (no paths), runs
// only the labs' small shapes (plancheck_refuse), one check at a time (another at once is
// 429), stopped after PLAN_CHECK_TIMEOUT_S.
#include <civetweb.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "command/plan/plancheck.h"
#include "command/plan/planner.h"
#include "common/harness/check.h"
#include "common/harness/mem.h"
#include "web_internal.h"

#define MAX_WORDS (2 * PLANNER_MAX_GIVEN + 16)
#define PLAN_CHECK_TIMEOUT_S 60

// The words of the query, as `shardlab plan` would read them (argv[0]: the lab). 0, or -1
// with why; words[] points into store.
static int query_words(const char *qs, char store[][128], char **words, int *n, char *why, size_t nwhy) {
    size_t len = qs ? strlen(qs) : 0;
    *n = 0;
    if (!qs || mg_get_var(qs, len, "lab", store[0], sizeof store[0]) <= 0)
        return snprintf(why, nwhy, "choose a lab"), -1;
    words[(*n)++] = store[0];
    const CatLab *lab = catalog_lab(store[0]);
    if (!lab) return snprintf(why, nwhy, "no lab called '%.40s'", store[0]), -1;
    static const char *const own[][2] = {{"n", "-n"}, {"model", "--model"}, {"vocab", "--vocab"}, {"psi", "--psi"}, {"gpu", "--gpu"}};
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
        char *value = store[*n + 1];
        if (mg_get_var(qs, len, own[i][0], value, sizeof store[0]) <= 0 || !value[0]) continue;
        words[(*n)++] = (char *)own[i][1];
        words[(*n)++] = value;
    }
    // The lab's options: the shared ones a training lab takes, then its own.
    for (int pass = 0; pass < 2; pass++) {
        const CatOption *opts = pass ? lab->options : catalog_train;
        int nopts = pass ? lab->noptions : (lab->trains ? catalog_ntrain : 0);
        for (int i = 0; i < nopts && *n + 2 < MAX_WORDS; i++) {
            char *name = store[*n], *value = store[*n + 1];
            if (mg_get_var(qs, len, opts[i].name, value, sizeof store[0]) <= 0 || !value[0]) continue;
            if (opts[i].kind == OPT_FLAG && strcmp(value, "on") && strcmp(value, "1") && strcmp(value, "true")) continue;
            snprintf(name, sizeof store[0], "--%s", opts[i].name);
            words[(*n)++] = name;
            if (opts[i].kind != OPT_FLAG) words[(*n)++] = value;
        }
    }
    return 0;
}

// A query's words and the plan they ask for, on the heap: a server thread's stack is small.
typedef struct {
    char store[MAX_WORDS][128];
    char *words[MAX_WORDS];
    Planner p;
} PlanQuery;

// The plan the query asks for: a PlanQuery to free(), or NULL with why.
static PlanQuery *plan_query(const char *qs, char *why, size_t nwhy) {
    PlanQuery *q = calloc_check(1, sizeof *q);
    int n;
    if (query_words(qs, q->store, q->words, &n, why, nwhy) != 0 || planner_parse(&q->p, n, q->words, why, nwhy) != 0 ||
        planner_lay_out(&q->p, 1, why, nwhy) != 0) {
        free(q);
        return NULL;
    }
    return q;
}

int web_api_plan(Web *w, struct mg_connection *c, const char *method, const char *qs) {
    (void)w;
    if (strcmp(method, "GET") != 0) return web_reply_json_error(c, 405, "GET only");
    char why[300];
    PlanQuery *q = plan_query(qs, why, sizeof why);
    if (!q) return web_reply_json_error(c, 400, why);
    StrBuf b;
    sb_init(&b);
    planner_json(&q->p, &b);
    web_reply(c, 200, "application/json", b.data, b.len, NULL);
    sb_free(&b);
    free(q);
    return 200;
}

// ---- checking it: the lab run at this shape ------------------------------------------------

// 0 if the browser may check this plan: the lab form's options only (no paths, no runs of
// ours), at a shape small enough to run here. Else -1 with why.
static int checkable(const Planner *p, char *why, size_t nwhy) {
    for (int i = 0; i < p->ngiven; i += 2) {
        const CatOption *o = catalog_find(p->lab, p->given[i] + 2);
        if (!o || !(o->flags & CAT_FORM) || (o->flags & CAT_RUN))
            return snprintf(why, nwhy, "%s is the command line's: a check from the browser takes the lab form's options "
                            "(shardlab plan %s ... --check takes it)", p->given[i], p->lab->name), -1;
    }
    return plancheck_refuse(p, why, nwhy);
}

static pthread_mutex_t check_lock = PTHREAD_MUTEX_INITIALIZER;

int web_api_plan_check(Web *w, struct mg_connection *c, const char *method, const char *qs) {
    if (strcmp(method, "POST") != 0) return web_reply_json_error(c, 405, "POST only: a check runs the lab");
    if (!web_may_act(w, c))
        return web_reply_json_error(c, 403, "checking a plan runs the lab: it needs this server's token (open the URL it "
                                            "printed) and a request from its own pages");
    char why[400];
    PlanQuery *q = plan_query(qs, why, sizeof why);
    if (!q) return web_reply_json_error(c, 400, why);
    if (checkable(&q->p, why, sizeof why) != 0) {
        free(q);
        return web_reply_json_error(c, 400, why);
    }
    if (pthread_mutex_trylock(&check_lock) != 0) {
        free(q);
        return web_reply_busy(c);
    }
    PlanCheck *pc = calloc_check(1, sizeof *pc);  // (a server thread's stack is small)
    plancheck_prepare(&q->p, pc);
    LaunchOpts o = {.exe = w->launcher, .labs_dir = w->labs, .detach = 1, .timeout_s = PLAN_CHECK_TIMEOUT_S};
    int rc = plancheck_run(&q->p, &o, 0, pc, why, sizeof why);
    pthread_mutex_unlock(&check_lock);
    int st = 200;
    if (rc < 0) {
        st = web_reply_json_error(c, 500, why);
    } else {
        StrBuf b;
        sb_init(&b);
        plancheck_json(&q->p, pc, &b);
        web_reply(c, 200, "application/json", b.data, b.len, NULL);
        sb_free(&b);
    }
    plancheck_free(pc);
    free(pc);
    free(q);
    return st;
}

// ---- the page ------------------------------------------------------------------------------

// A field of the form: its label, the value the address gave, a placeholder, and a line of help
// under it (NULL: none).
static void field(StrBuf *b, const char *qs, const char *name, const char *label, const char *hint, const char *help) {
    char v[128] = "";
    if (qs) mg_get_var(qs, strlen(qs), name, v, sizeof v);
    sb_printf(b, "<p><label for=\"p-%s\">%s</label><input id=\"p-%s\" name=\"%s\" value=\"", name, label, name, name);
    sb_markup_text(b, v);
    sb_printf(b, "\" placeholder=\"");
    sb_markup_text(b, hint);
    sb_printf(b, "\">");
    if (help) sb_printf(b, "<small>%s</small>", help);
    sb_printf(b, "</p>");
}

static void choice(StrBuf *b, const char *qs, const char *name, const char *label, const char *const *values, int n) {
    char v[128] = "";
    if (qs) mg_get_var(qs, strlen(qs), name, v, sizeof v);
    sb_printf(b, "<p><label for=\"p-%s\">%s</label><select id=\"p-%s\" name=\"%s\">", name, label, name, name);
    for (int i = 0; i < n; i++) {
        sb_printf(b, "<option%s>", !strcmp(v, values[i]) ? " selected" : "");
        sb_markup_text(b, values[i]);
        sb_printf(b, "</option>");
    }
    sb_printf(b, "</select></p>");
}

static void flag(StrBuf *b, const char *qs, const char *name, const char *label) {
    char v[16] = "";
    if (qs) mg_get_var(qs, strlen(qs), name, v, sizeof v);
    sb_printf(b, "<p class=\"flag\"><label><input type=\"checkbox\" name=\"%s\"%s> %s</label></p>", name, v[0] ? " checked" : "",
              label);
}

// The form, below a plan (planned: "Plan another") or alone.
static void form(StrBuf *b, const char *qs, int planned) {
    static const char *const labs[] = {"zero", "fsdp", "ddp", "tp", "pp", "cp", "single", "ckpt", "shard"};
    const char *models[16], *gpus[16];
    for (int i = 0; i < planner_nmodels; i++) models[i] = planner_models[i].name;
    for (int i = 0; i < planner_ngpus; i++) gpus[i] = planner_gpus[i].name;
    sb_printf(b, "<form id=\"plan-form\" method=\"get\" action=\"/plan\"><h2>%s</h2><fieldset><legend>Layout</legend>",
              planned ? "Plan another" : "Plan");
    choice(b, qs, "lab", "lab", labs, 9);
    field(b, qs, "n", "GPUs (N)", "8", NULL);
    choice(b, qs, "gpu", "device", gpus, planner_ngpus);
    char stages[96];  // "0 baseline DDP, 1 P_os, ...": the paper's names
    snprintf(stages, sizeof stages, "0 %s, 1 %s, 2 %s, 3 %s", planner_zero_name(0), planner_zero_name(1), planner_zero_name(2),
             planner_zero_name(3));
    field(b, qs, "stage", "ZeRO stage (zero)", "1", stages);
    field(b, qs, "policy", "checkpointing policy (ckpt)", "every", NULL);
    field(b, qs, "micro", "micro-batches (pp)", "4", NULL);
    static const char *const schedules[] = {"1f1b", "gpipe", "interleaved"};
    choice(b, qs, "schedule", "schedule (pp)", schedules, 3);
    field(b, qs, "chunks", "chunks a stage (pp, interleaved)", "2", NULL);
    field(b, qs, "dp", "replicas (pp, tp, cp)", "1", "N = D x stages, t or the context-parallel group");
    field(b, qs, "replicate", "replicas (fsdp: HSDP)", "1", "N = R x S: each replica's S ranks shard the model");
    static const char *const layouts[] = {"zigzag", "contiguous"}, *const kvs[] = {"ring", "all-gather"};
    choice(b, qs, "layout", "token layout (cp)", layouts, 2);
    choice(b, qs, "kv", "keys and values (cp)", kvs, 2);
    flag(b, qs, "mixed", "--mixed (bf16 weights and gradients in zero and fsdp)");
    flag(b, qs, "offload", "--offload (zero: optimizer state in host memory)");
    flag(b, qs, "prefetch", "--prefetch (fsdp)");
    flag(b, qs, "no-reshard", "--no-reshard (fsdp)");
    flag(b, qs, "sp", "--sp (tp: sequence parallel)");
    flag(b, qs, "vocab-parallel", "--vocab-parallel (tp)");
    sb_printf(b, "</fieldset><fieldset><legend>Model and batch</legend>");
    choice(b, qs, "model", "shape", models, planner_nmodels);
    field(b, qs, "layers", "blocks (L)", "the shape's", NULL);
    field(b, qs, "dim", "width (C)", "the shape's", NULL);
    field(b, qs, "heads", "heads (NH)", "the shape's", NULL);
    field(b, qs, "seq", "sequence (T)", "the shape's", NULL);
    field(b, qs, "vocab", "vocabulary (V)", "the shape's", NULL);
    field(b, qs, "psi", "or parameters alone (Psi)", "7.5B", "no shape: the model state as the ZeRO paper counts it");
    field(b, qs, "batch", "global batch (sequences)", "8", NULL);
    field(b, qs, "accum", "micro-batches a step (accum)", "1", NULL);
    sb_printf(b, "</fieldset><p><button type=\"submit\">Plan</button></p></form>\n");
}

static void bytes_cell(StrBuf *b, double v) {
    char t[32];
    sb_printf(b, "<td class=\"num\">%s</td>", isnan(v) ? "-" : format_bytes(t, sizeof t, v));
}

// One stage's table: the categories after a step and at the peak with their formulas, the model
// state, the host's share (--offload), the peaks' total; then whether it fits the device.
static void stage_table(StrBuf *b, const Planner *p, const MemPlan *mp) {
    char b1[32], b2[32];
    sb_printf(b, "<div class=\"plan-box\"><table class=\"data plan\"><thead><tr><th>per GPU</th><th class=\"num\">after a step"
                 "</th><th class=\"num\">at the peak</th><th>formula</th></tr></thead><tbody>");
    for (int k = 0; k < MEM_CATEGORIES; k++) {
        sb_printf(b, "<tr><td>%s</td>", mem_category_name((MemCategory)k));
        bytes_cell(b, mp->after[k]), bytes_cell(b, mp->peak[k]);
        sb_printf(b, "<td>");
        sb_markup_text(b, mp->after_formula[k] ? mp->after_formula[k] : "");
        if (mp->peak_formula[k] && strcmp(mp->peak_formula[k], "as after a step")) {
            sb_printf(b, "<br><small>peak: ");
            sb_markup_text(b, mp->peak_formula[k]);
            sb_printf(b, "</small>");
        }
        sb_printf(b, "</td></tr>");
    }
    double state = planner_state(mp), peak = planner_peak_total(mp);
    sb_printf(b, "<tr class=\"plan-state\"><th>state</th><td class=\"num\">%s</td><td></td><td>params + grads + optim = "
                 "<strong>%s</strong>: the model state the ZeRO paper counts</td></tr>",
              format_bytes(b1, sizeof b1, state), planner_gb(b2, sizeof b2, state));
    if (mp->host > 0)
        sb_printf(b, "<tr class=\"plan-host\"><th>host</th><td class=\"num\">%s</td><td></td><td>12 Psi'/N in host memory, not on "
                     "the GPU (--offload): fp32 masters, m and v</td></tr>", format_bytes(b1, sizeof b1, mp->host));
    if (isnan(peak)) sb_printf(b, "<tr><th>total</th><td></td><td class=\"num\">-</td><td>the peaks: not planned without a shape</td></tr>");
    else
        sb_printf(b, "<tr><th>total</th><td></td><td class=\"num\">%s</td><td>the peaks summed (an upper bound: they need not "
                     "coincide)</td></tr>", format_bytes(b1, sizeof b1, peak));
    sb_printf(b, "</tbody></table></div>");
    const PlannerGpu *g = &planner_gpus[p->gpu];
    int fits = planner_fits(p, mp);
    if (fits >= 0)
        sb_printf(b, "<p class=\"%s\">%s one %s (%.0f MiB), with 1 GiB held back for the CUDA context and libraries.</p>",
                  fits ? "fits" : "fits-not", fits ? "Fits" : "Does not fit", g->what, g->mib);
    else if (g->what)
        sb_printf(b, "<p class=\"fits-unknown\">On one %s (%.0f MiB) the model state alone takes %s, %.0f%% of it; the "
                     "activations, the transient buffers and 1 GiB for the CUDA context and libraries come on top.</p>",
                  g->what, g->mib, format_bytes(b1, sizeof b1, state), 100 * state / (g->mib * 1024 * 1024));
}

// ZeRO's four stages side by side, by the paper's names: its figure 1 for its 7.5B model.
static void zero_stages(StrBuf *b, const Planner *p) {
    MemPlan st[4];
    char t[5][32];
    planner_zero_stages(p, st);
    sb_printf(b, "<h3 id=\"plan-zero-stages\">ZeRO's stages for this model on %d GPU%s</h3><p>The model state each GPU holds "
                 "after a step, as the ZeRO paper's figure 1 and table 1 count it%s.</p>", p->n, p->n == 1 ? "" : "s",
              p->l.offload ? " (without --offload, as the paper has it)" : "");
    sb_printf(b, "<div class=\"plan-box\"><table class=\"data plan-stages\"><thead><tr><th>stage</th><th>the paper's name</th>"
                 "<th class=\"num\">params</th><th class=\"num\">grads</th><th class=\"num\">optim</th><th class=\"num\">state"
                 "</th><th class=\"num\">state (GiB)</th><th>the paper's formula</th></tr></thead><tbody>");
    for (int k = 0; k < 4; k++)
        sb_printf(b, "<tr%s><td>%d</td><td>%s%s</td><td class=\"num\">%s</td><td class=\"num\">%s</td><td class=\"num\">%s</td>"
                     "<td class=\"num\"><strong>%s</strong></td><td class=\"num\">%s</td><td>%s</td></tr>",
                  k == p->l.stage ? " class=\"current\"" : "", k, planner_zero_name(k),
                  k == p->l.stage ? " <small>(this plan)</small>" : "", planner_gb(t[0], 32, st[k].after[MEM_PARAMS]),
                  planner_gb(t[1], 32, st[k].after[MEM_GRADS]), planner_gb(t[2], 32, st[k].after[MEM_OPTIM]),
                  planner_gb(t[3], 32, planner_state(&st[k])), format_bytes(t[4], 32, planner_state(&st[k])),
                  planner_zero_formula(k));
    sb_printf(b, "</tbody></table></div>");
}

static void table(StrBuf *b, const Planner *p) {
    char b1[32], b2[32];
    const char *lab = p->l.lab;
    int sharded = !strcmp(lab, "zero") || !strcmp(lab, "fsdp");
    sb_printf(b, "<section id=\"plan\"><h2>%s on %d GPU%s", lab, p->n, p->n == 1 ? "" : "s");
    if (!strcmp(lab, "zero"))
        sb_printf(b, ", stage %d <span class=\"paper-name\">%s</span>%s", p->l.stage, planner_zero_name(p->l.stage),
                  p->l.offload ? ", offload" : "");
    if (!strcmp(lab, "fsdp")) sb_printf(b, ", fully sharded <span class=\"paper-name\">%s</span>", planner_zero_name(3));
    sb_printf(b, "</h2><ul class=\"plan-facts\"><li><span>precision</span><span>");
    sb_markup_text(b, planner_precision(p));
    sb_printf(b, "</span>");
    sb_printf(b, "</li><li><span>model</span><span>");
    if (p->psi) sb_printf(b, "Psi = %s parameters (--psi: a count without a shape)", planner_grouped(b1, sizeof b1, p->psi));
    else
        sb_printf(b, "the labs' GPT%s%s: L %d blocks, C %d, NH %d heads, T %d tokens, V %d; Psi = %s parameters",
                  p->model ? " at " : "", p->model ? planner_models[p->model].name : "", p->m.layers, p->m.dim, p->m.heads,
                  p->m.seq, p->m.vocab, planner_grouped(b1, sizeof b1, planner_params(p)));
    if (sharded) sb_printf(b, "; Psi' = %s", planner_grouped(b2, sizeof b2, planner_params_padded(p)));
    sb_printf(b, "</span>");
    const PlannerModel *pm = &planner_models[p->model];
    if (pm->note && !p->psi) {
        sb_printf(b, "<small>");
        sb_markup_text(b, pm->note);
        if (pm->size) sb_printf(b, "; compare "), sb_markup_text(b, pm->size);
        sb_printf(b, "</small>");
    }
    sb_printf(b, "</li><li><span>batch</span><span>");
    if (p->batch)
        sb_printf(b, "%d sequences a step; B = %d sequence%s in each rank's micro-batch (%s attention)", p->batch, p->micro,
                  p->micro == 1 ? "" : "s", gpt_attn_name(p->m.attn));
    else sb_printf(b, "not planned: a parameter count alone has no activations (give a shape to plan them)");
    sb_printf(b, "</span></li></ul>");
    for (int s = 0; s < planner_stages(p); s++) {
        MemPlan mp;
        planner_stage(p, s, &mp);
        if (planner_stages(p) > 1)
            sb_printf(b, "<h3>stage %d: Psi_s = %s</h3>", s, planner_grouped(b1, sizeof b1, planner_stage_params(p, s)));
        stage_table(b, p, &mp);
    }
    if (!strcmp(lab, "zero")) zero_stages(b, p);
    PlannerTerm terms[12];
    int n = planner_terms(p, terms, 12);
    sb_printf(b, "<h3>Where</h3><dl class=\"plan-terms\">");
    for (int i = 0; i < n; i++) {
        sb_printf(b, "<dt>");
        sb_markup_text(b, terms[i].term);
        sb_printf(b, "</dt><dd>");
        sb_markup_text(b, terms[i].text);
        sb_printf(b, "</dd>");
    }
    sb_printf(b, "</dl><p class=\"plan-note\">");
    sb_markup_text(b, planner_note);
    sb_printf(b, "</p></section>\n");
}

// The query of this plan, rebuilt from its words (never the token a page's address may hold):
// lab=L&n=N&gpu=G, the model's words and the lab's options, each URL-encoded.
static void plan_query_string(StrBuf *b, const Planner *p) {
    char v[3 * 128];
    sb_printf(b, "lab=%s&n=%d&gpu=%s", p->lab->name, p->n, planner_gpus[p->gpu].name);
    if (p->model) sb_printf(b, "&model=%s", planner_models[p->model].name);
    if (p->vocab) sb_printf(b, "&vocab=%d", p->vocab);
    if (p->psi) sb_printf(b, "&psi=%.0f", p->psi);
    for (int i = 0; i < p->ngiven; i += 2) {
        mg_url_encode(p->given[i + 1][0] ? p->given[i + 1] : "on", v, sizeof v);
        sb_printf(b, "&%s=%s", p->given[i] + 2, v);
    }
}

// "Check it": a button that runs the lab at this shape (plan.js posts to /api/plan/check with
// the page's token and draws the answer), or one line saying why this plan cannot be checked
// here.
static void check_section(StrBuf *b, const Planner *p) {
    char why[400];
    sb_printf(b, "<section id=\"plan-check\"><h2>Check it</h2>");
    if (checkable(p, why, sizeof why) != 0) {
        sb_printf(b, "<p id=\"plan-check-refused\">Not on this machine: ");
        sb_markup_text(b, why);
        sb_printf(b, ".</p></section>\n");
        return;
    }
    StrBuf query;
    sb_init(&query);
    plan_query_string(&query, p);
    sb_printf(b, "<p>Runs the lab at this shape for %s steps on this machine and compares every byte each rank logged "
                 "with the plan: <code>shardlab plan ", PLANCHECK_STEPS);
    sb_markup_text(b, p->lab->name);
    sb_printf(b, " -n %d", p->n);
    for (int i = 0; i < p->ngiven; i += 2) {
        sb_printf(b, " ");
        sb_markup_text(b, p->given[i]);
        if (p->given[i + 1][0]) sb_printf(b, " "), sb_markup_text(b, p->given[i + 1]);
    }
    sb_printf(b, " --check</code>.</p><form id=\"plan-check-form\" method=\"post\" action=\"/api/plan/check?");
    sb_markup_text(b, query.data);
    sb_printf(b, "\"><button type=\"submit\">Check it</button> <span id=\"plan-check-status\" role=\"status\"></span>"
                 "</form><div id=\"plan-check-result\"></div></section>\n");
    sb_free(&query);
}

int web_page_plan(Web *w, struct mg_connection *c, const char *qs) {
    StrBuf b;
    sb_init(&b);
    web_page_start(w, c, &b, "Memory planner", "id=\"planner\"", NULL);
    sb_printf(&b, "<h1>Memory planner</h1><p>The bytes each GPU holds for a model and a layout, by category, from the "
                  "formulas every lab is graded against: <code>shardlab plan</code> in the browser. For zero, the four "
                  "stages side by side by the ZeRO paper's names; a parameter count alone plans the model state as the "
                  "paper counts it (<a href=\"/plan?lab=zero&amp;n=64&amp;psi=7.5B&amp;mixed=on\">its figure 1</a>: "
                  "<code>shardlab plan zero --psi 7.5B -n 64 --mixed</code>).</p>\n");
    // The answer first, then the form to change it.
    char why[300], lab[32];
    int planned = 0;
    if (qs && mg_get_var(qs, strlen(qs), "lab", lab, sizeof lab) > 0) {
        PlanQuery *q = plan_query(qs, why, sizeof why);
        if (q) table(&b, &q->p), check_section(&b, &q->p), planned = 1;
        else {
            sb_printf(&b, "<p class=\"error\" id=\"plan-error\">");
            sb_markup_text(&b, why);
            sb_printf(&b, "</p>\n");
        }
        free(q);
    }
    form(&b, qs, planned);
    web_page_end(&b, "/static/post.js", "/static/plan.js", NULL);
    int st = web_send_page(w, c, &b);
    sb_free(&b);
    return st;
}
