// plancheck.c — see plancheck.h.
#include "plancheck.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/harness/catalog.h"
#include "common/harness/check.h"
#include "common/harness/mem.h"

int plancheck_refuse(const Planner *p, char *why, size_t nwhy) {
    if (p->n > PLANCHECK_MAX_RANKS)
        return snprintf(why, nwhy, "--check runs the lab on this machine: at most %d ranks (-n %d)", PLANCHECK_MAX_RANKS, p->n), -1;
    if (p->vocab && p->vocab != GPT_VOCAB)
        return snprintf(why, nwhy, "--check: the labs read bytes, vocabulary %d (--vocab %d)", GPT_VOCAB, p->vocab), -1;
    if (p->model)
        return snprintf(why, nwhy, "--check runs at the labs' small shapes: give --layers, --dim, --heads, --seq, not --model"), -1;
    if (p->psi)
        return snprintf(why, nwhy, "--check runs the lab, which needs a shape: give --layers, --dim, --heads, --seq, not --psi"), -1;
    // Every rank's peaks: a pipeline's stages each on its dp ranks, else N alike.
    double total = 0;
    int stages = planner_stages(p);
    for (int s = 0; s < stages; s++) {
        MemPlan mp;
        planner_stage(p, s, &mp);
        total += planner_peak_total(&mp) * (p->n / stages);
    }
    if (total > PLANCHECK_MAX_BYTES) {
        char need[32], most[32];
        return snprintf(why, nwhy, "--check runs at the labs' small shapes: these %d ranks would hold %s at their peaks, "
                        "more than the %s a check may take", p->n, format_bytes(need, sizeof need, total),
                        format_bytes(most, sizeof most, PLANCHECK_MAX_BYTES)), -1;
    }
    return 0;
}

void plancheck_prepare(const Planner *p, PlanCheck *c) {
    memset(c, 0, sizeof *c);
    int n = 0;
    for (int i = 0; i < p->ngiven; i += 2) {
        c->args[n++] = p->given[i];
        if (p->given[i + 1][0] || catalog_find(p->lab, p->given[i] + 2)->kind != OPT_FLAG) c->args[n++] = p->given[i + 1];
    }
    c->args[n++] = "--steps", c->args[n++] = PLANCHECK_STEPS, c->args[n] = NULL;  // the last --steps counts
    size_t used = (size_t)snprintf(c->command, sizeof c->command, "shardlab run %s -n %d", p->lab->name, p->n);
    for (int i = 0; i < n && used < sizeof c->command; i++)
        used += (size_t)snprintf(c->command + used, sizeof c->command - used, " %s", c->args[i]);
}

// Rank r's first and last step events in dir, parsed (NULL where missing).
static void step_events(const char *dir, int r, JsonValue **first, JsonValue **last) {
    *first = *last = NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, r);
    StrBuf sb;
    sb_init(&sb);
    char *text = sb_read_file(&sb, path, 64u << 20) == 0 ? sb.data : NULL;
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char err[64];
        JsonValue *ev = json_parse(line, len, err, sizeof err);
        const JsonValue *kind = ev ? json_get(ev, "ev") : NULL;
        if (kind && kind->type == JSON_STRING && !strcmp(kind->string, "step")) {
            if (!*first) *first = ev, ev = NULL;
            else json_free(*last), *last = ev, ev = NULL;
        }
        json_free(ev);
        line = nl ? nl + 1 : NULL;
    }
    sb_free(&sb);
    if (*first && !*last) *last = *first;
}

static double field(const JsonValue *obj, const char *key) {
    const JsonValue *v = obj ? json_get(obj, key) : NULL;
    return v && v->type == JSON_NUMBER ? v->number : NAN;
}

int plancheck_run(Planner *p, const LaunchOpts *o, int keep_failed, PlanCheck *c, char *why, size_t nwhy) {
    char dir[] = "/tmp/shardlab-plan-XXXXXX";
    if (!mkdtemp(dir)) return snprintf(why, nwhy, "cannot make a directory in /tmp: %s", strerror(errno)), -1;
    char run_dir[sizeof dir + 8], log_path[sizeof dir + 16];
    snprintf(run_dir, sizeof run_dir, "%s/run", dir);
    snprintf(log_path, sizeof log_path, "%s/output", dir);
    LaunchOpts lo = *o;
    lo.out_fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    c->status = launch_run_wait(&lo, p->lab->name, p->n, c->args, run_dir);
    if (lo.out_fd >= 0) close(lo.out_fd);
    if (c->status != 0) {
        StrBuf said;
        sb_init(&said);
        sb_read_file(&said, log_path, 1 << 20);
        snprintf(c->output, sizeof c->output, "%s", said.len ? said.data + (said.len > 1500 ? said.len - 1500 : 0) : "(nothing)");
        if (c->status == 124) {
            size_t k = strlen(c->output);
            snprintf(c->output + k, sizeof c->output - k, "%sstopped: it ran past %d s\n", k && c->output[k - 1] != '\n' ? "\n" : "",
                     o->timeout_s);
        }
        sb_free(&said);
        if (keep_failed) snprintf(c->kept, sizeof c->kept, "%s", dir);
        else file_remove_tree(dir);
        return 1;
    }
    // The run's device decides the workspace on a GPU: the plan again, for it.
    char meta_path[sizeof run_dir + 16];
    snprintf(meta_path, sizeof meta_path, "%s/meta.json", run_dir);
    StrBuf meta_text;
    sb_init(&meta_text);
    char err[64];
    JsonValue *meta = sb_read_file(&meta_text, meta_path, 1 << 20) == 0 ? json_parse(meta_text.data, meta_text.len, err, sizeof err) : NULL;
    const JsonValue *device = meta ? json_get(meta, "device") : NULL;
    int gpu = device && device->type == JSON_STRING && !strcmp(device->string, "cuda");
    snprintf(c->device, sizeof c->device, "%s", gpu ? "cuda" : "cpu");
    json_free(meta), sb_free(&meta_text);
    if (planner_lay_out(p, gpu, why, nwhy) != 0) {
        file_remove_tree(dir);
        return -1;
    }
    c->figures = calloc_check((size_t)p->n * MEM_CATEGORIES * 2, sizeof *c->figures);
    for (int r = 0; r < p->n; r++) {
        JsonValue *first, *last;
        step_events(run_dir, r, &first, &last);
        const JsonValue *stage = first ? json_get(first, "stage") : NULL;
        int s = stage && stage->type == JSON_NUMBER ? (int)stage->number : 0;
        MemPlan mp;
        Planner q = *p;  // cp: each rank of a group holds its own tokens (n need not divide T)
        if (!strcmp(q.l.lab, "cp")) q.l.cp_rank = r % q.l.cp;
        planner_stage(&q, s >= 0 && s < planner_stages(p) ? s : 0, &mp);
        for (int k = 0; k < MEM_CATEGORIES; k++)
            for (int at_peak = 0; at_peak < 2; at_peak++) {
                PlanCheckFigure *f = &c->figures[c->nfigures++];
                *f = (PlanCheckFigure){.rank = r, .stage = s, .category = k, .at_peak = at_peak,
                                       .planned = at_peak ? mp.peak[k] : mp.after[k]};
                f->logged = field(json_get(at_peak ? last : first, at_peak ? "peak_by" : "mem"), mem_category_name((MemCategory)k));
                if (isnan(f->planned)) continue;
                c->compared++, c->equal += f->logged == f->planned;
            }
        json_free(first), json_free(last);
    }
    int ok = c->compared > 0 && c->equal == c->compared;
    if (ok || !keep_failed) file_remove_tree(dir);
    else snprintf(c->kept, sizeof c->kept, "%s", run_dir);
    return ok ? 0 : 1;
}

static void number_or_null(StrBuf *sb, double v) {
    if (isnan(v)) sb_printf(sb, "null");
    else sb_printf(sb, "%.0f", v);
}

void plancheck_json(const Planner *p, const PlanCheck *c, StrBuf *sb) {
    int ok = c->status == 0 && c->compared > 0 && c->equal == c->compared;
    sb_printf(sb, "{\"lab\":\"%s\",\"ranks\":%d,\"command\":", p->lab->name, p->n);
    sb_json_string(sb, c->command);
    sb_printf(sb, ",\"status\":%d,\"device\":", c->status);
    if (c->device[0]) sb_json_string(sb, c->device);
    else sb_printf(sb, "null");
    sb_printf(sb, ",\"figures\":%d,\"equal\":%d,\"ok\":%s,\"per_rank\":[", c->compared, c->equal, ok ? "true" : "false");
    // The figures come rank by rank, two a category (after, at the peak).
    for (int i = 0; i < c->nfigures; i += 2 * MEM_CATEGORIES) {
        const PlanCheckFigure *f = &c->figures[i];
        sb_printf(sb, "%s{\"rank\":%d,\"stage\":%d", i ? "," : "", f->rank, f->stage);
        for (int at_peak = 0; at_peak < 2; at_peak++) {
            sb_printf(sb, ",\"%s\":{", at_peak ? "peak" : "after");
            for (int k = 0; k < MEM_CATEGORIES; k++) {
                const PlanCheckFigure *g = &f[2 * k + at_peak];
                sb_printf(sb, "%s\"%s\":{\"planned\":", k ? "," : "", mem_category_name((MemCategory)k));
                number_or_null(sb, g->planned);
                sb_printf(sb, ",\"logged\":");
                number_or_null(sb, g->logged);
                sb_printf(sb, ",\"equal\":%s}", isnan(g->planned) ? "null" : g->logged == g->planned ? "true" : "false");
            }
            sb_printf(sb, "}");
        }
        sb_printf(sb, "}");
    }
    sb_printf(sb, "],\"output\":");
    if (c->status != 0) sb_json_string(sb, c->output);
    else sb_printf(sb, "null");
    sb_printf(sb, "}\n");
}

void plancheck_free(PlanCheck *c) {
    free(c->figures);
    c->figures = NULL;
    c->nfigures = 0;
}
