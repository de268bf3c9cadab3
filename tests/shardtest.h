// shardtest.h — reading and grading the runs of the sharded labs (zero, fsdp).
//
// Defines: MAX_STEPS, RankLog, Run, read_rank(), run_lab(), ran_clean(), mixed_acts_saving(), ddp_lab_total(),
//          Layout, layout(), worst_vs(), same_losses(), replicas_equal(), exits_2_with_one_line().
//
// A test includes labtest.h and test.h first and defines STEPS (steps per run). (tp's test
// reads its runs with it too.)
#ifndef SHARDLAB_SHARDTEST_H
#define SHARDLAB_SHARDTEST_H

#define MAX_STEPS 32

typedef struct {
    int n;  // step events
    double loss[MAX_STEPS];
    char hash[MAX_STEPS][17];
    double unit_bytes[MAX_STEPS];
    double replica_bytes[MAX_STEPS];  // fsdp --replicate: the sums across replicas (NaN without)
    double grad_norm[MAX_STEPS];
    double params[MAX_STEPS], grads[MAX_STEPS], optim[MAX_STEPS], comm[MAX_STEPS], host[MAX_STEPS];
    double peak, peak_params, d2h, h2d;
    double table_total;  // the memory table's total line: its device rows' measured bytes
    double ddp_total;    // its "DDP: X per rank" (check mem.ddp_total), NAN if it has none
    int checks, checks_failed, ended_ok, schema_errors;
    char problem[600];
} RankLog;

typedef struct {
    int n, status;
    RankLog r[8];
    char final_hash[17];  // summary.json: the whole model's
    char dir[512];
} Run;

static inline void read_rank(const char *dir, int rank, RankLog *r) {
    memset(r, 0, sizeof *r);
    r->ddp_total = NAN;
    Events ev;
    load_rank_events(dir, rank, &ev);
    r->schema_errors = ev.bad_lines;
    snprintf(r->problem, sizeof r->problem, "%s", ev.first_problem);
    for (int i = 0; i < ev.n; i++) {
        const JsonValue *e = ev.lines[i];
        const char *k = kind(e);
        if (strcmp(k, "step") == 0 && r->n < MAX_STEPS) {
            int s = r->n++;
            r->loss[s] = num(e, "loss");
            snprintf(r->hash[s], 17, "%s", json_get(e, "param_hash")->string);
            r->unit_bytes[s] = num(e, "unit_bytes_sent");
            r->replica_bytes[s] = json_get(e, "replica_bytes_sent") ? num(e, "replica_bytes_sent") : NAN;
            r->grad_norm[s] = num(e, "grad_norm");
            const JsonValue *mem = json_get(e, "mem");
            r->params[s] = num(mem, "params"), r->grads[s] = num(mem, "grads"), r->optim[s] = num(mem, "optim");
            r->comm[s] = num(mem, "comm");
            r->host[s] = json_get(mem, "host") ? num(mem, "host") : -1;
            r->peak = num(mem, "peak");
            r->peak_params = num(json_get(e, "peak_by"), "params");
            const JsonValue *off = json_get(e, "offload_bytes");
            if (off) r->d2h = num(off, "d2h"), r->h2d = num(off, "h2d");
        } else if (strcmp(k, "check") == 0) {
            r->checks++;
            r->checks_failed += !json_get(e, "ok")->boolean;
            const char *name = json_get(e, "name")->string;
            if (strcmp(name, "mem.ddp_total") == 0) r->ddp_total = num(e, "value");
            else if (!strcmp(name, "mem.params") || !strcmp(name, "mem.grads") || !strcmp(name, "mem.optim") ||
                     !strcmp(name, "mem.acts") || !strcmp(name, "mem.comm"))
                r->table_total += num(e, "value");
        } else if (strcmp(k, "end") == 0) {
            r->ended_ok = strcmp(json_get(e, "status")->string, "ok") == 0;
        }
    }
    free_events(&ev);
}

// Runs the lab on n ranks with STEPS steps and args; reads every rank's log and the summary.
static inline void run_lab(Run *run, const char *bin, const char *name, int n, char *const args[], const char *env1) {
    memset(run, 0, sizeof *run);
    run->n = n;
    snprintf(run->dir, sizeof run->dir, "%s/%s", tmp, name);
    char steps[16], *argv[40];
    snprintf(steps, sizeof steps, "%d", STEPS);
    int a = 0;
    argv[a++] = "--steps", argv[a++] = steps;
    for (int i = 0; args[i]; i++) argv[a++] = args[i];
    argv[a] = NULL;
    run->status = run_ranks(bin, n, name, run->dir, argv, env1);
    for (int k = 0; k < n; k++) read_rank(run->dir, k, &run->r[k]);
    JsonValue *summary = load_json_file(run->dir, "summary.json");
    const JsonValue *h = summary ? json_get(summary, "param_hash") : NULL;
    if (h && h->type == JSON_STRING) snprintf(run->final_hash, sizeof run->final_hash, "%s", h->string);
    json_free(summary);
}

// Every rank exited 0, logged STEPS schema-valid steps and an ok end, and its own checks
// (memory table, bytes at step 1) passed.
static inline int ran_clean(const Run *run, const char *what) {
    int ok = run->status == 0, schema = 0;
    for (int k = 0; k < run->n; k++) {
        const RankLog *r = &run->r[k];
        ok &= r->n == STEPS && r->ended_ok && r->checks >= 6 && r->checks_failed == 0;
        schema += r->schema_errors;
    }
    return EXPECT(ok && schema == 0, "%s: all %d ranks exit 0 with %d schema-valid steps, an ok end and their checks "
                                     "passed (status %d; %s)", what, run->n, STEPS, run->status, run->r[0].problem);
}

// What --mixed takes off DDP's activations at the labs' default shape (B 8, T 64, C 64, L 2,
// flash attention) on n ranks with K micro-batches: a block's ln1, qkv, atty, ln2, fch and
// fch_gelu (14C) and the head's lnf kept as bf16s (gpt.h), 2 bytes a value fewer:
// 2 (B/(n K)) T (14 L C + C).
static inline double mixed_acts_saving(int n, int K) { return 2.0 * (8.0 / (n * K)) * 64 * (14 * 2 * 64 + 64); }

// What DDP's own memory table totals per rank at n ranks and --accum K (the ddp lab beside
// `lab`, build/labs/zero -> build/labs/ddp, one step, default buckets): the figure the "DDP:
// X per rank" line of zero, fsdp and tp must print at the same n and K. NAN if it did not run.
static inline double ddp_lab_total(const char *lab, int n, int K) {
    static double known[9][9];  // [n][K]: one run each
    if (n < 1 || n > 8 || K < 1 || K > 8) return NAN;
    if (known[n][K] != 0) return known[n][K];
    char bin[600], dir[512], tag[64], acc[16];
    const char *slash = strrchr(lab, '/');
    snprintf(bin, sizeof bin, "%.*sddp", slash ? (int)(slash - lab + 1) : 0, lab);
    snprintf(tag, sizeof tag, "ddp-total-n%d-k%d", n, K);
    snprintf(dir, sizeof dir, "%s/%s", tmp, tag);
    snprintf(acc, sizeof acc, "%d", K);
    char *args[] = {"--steps", "1", "--accum", acc, NULL};
    RankLog r;
    int status = run_ranks(bin, n, tag, dir, args, NULL);
    read_rank(dir, 0, &r);
    known[n][K] = status == 0 && r.ended_ok ? r.table_total : NAN;
    return known[n][K];
}

// ---------------------------------------------------------------------------------------
// The formulas, from the model's shapes (labs/DESIGN.md, The model; default --dim 64 --seq 64 --layers 2)
// ---------------------------------------------------------------------------------------

typedef struct {
    double psi, padded, max_unit;  // elements: Psi, Psi', the largest padded unit
    double unit[64];               // each unit's padded length
    int units;
} Layout;

static inline Layout layout(int N, int align, int C, int T, int L) {
    const double V = 256;
    double units[64];
    int U = 0;
    units[U++] = V * C + (double)T * C;                   // wte, wpe
    for (int l = 0; l < L; l++) units[U++] = 12.0 * C * C + 13.0 * C;  // a block
    units[U++] = 2.0 * C + V * C;                         // ln_f, lm_head
    Layout lay = {0};
    for (int u = 0; u < U; u++) {
        double step = (double)N * align;  // a unit is padded to a multiple of N shards of `align`
        double padded = ceil(units[u] / step) * step;
        lay.unit[lay.units++] = padded;
        lay.psi += units[u];
        lay.padded += padded;
        if (padded > lay.max_unit) lay.max_unit = padded;
    }
    return lay;
}

static inline double worst_vs(const RankLog *a, const RankLog *b, int *at) {
    double worst = 0;
    *at = 0;
    for (int s = 0; s < a->n && s < b->n; s++)
        if (fabs(a->loss[s] - b->loss[s]) > worst) worst = fabs(a->loss[s] - b->loss[s]), *at = s + 1;
    return worst;
}

static inline int same_losses(const RankLog *a, const RankLog *b) {
    if (a->n != b->n) return 0;
    for (int s = 0; s < a->n; s++)
        if (a->loss[s] != b->loss[s]) return 0;
    return 1;
}

// Replicas (stages 0-2): every rank's weights hash the same after every step.
static inline int replicas_equal(const Run *run) {
    for (int s = 0; s < run->r[0].n; s++)
        for (int k = 1; k < run->n; k++)
            if (strcmp(run->r[k].hash[s], run->r[0].hash[s]) != 0) return 0;
    return 1;
}

// Bad input: the lab on n ranks with args exits 2 with one line on stderr (rank 0's).
static inline int exits_2_with_one_line(const char *bin, int n, char *const args[], const char *what, const char *tag) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/%s", tmp, tag);
    int status = run_ranks(bin, n, tag, dir, args, NULL);
    snprintf(path, sizeof path, "%s/%s.r0.err", tmp, tag);
    char *err = read_file(path, NULL);
    int ok = EXPECT(status == 2 && err && count_lines(err) == 1, "bad input (%s): exit 2 and one line: %s", what,
                    err ? one_line(err) : "(no stderr)");
    free(err);
    return ok;
}

#endif
