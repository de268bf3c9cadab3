// test_whatif.c — `shardlab whatif`: a run's step projected onto a link and a GPU, against the
// same projection worked out here from the run's own numbers.
//
// usage: test_whatif SHARDLAB LABS_DIR
// Checked:
//   1. crafted runs with known spans (ddp on 2 ranks; a 2-stage pipeline): the compute is the
//      step's FLOPs, 6 Psi + 12 L T C a token, over the GPU's peak times --mfu; each collective
//      k alpha + bytes / beta; the share of communication the run hid stays hidden, up to the
//      compute; a pipeline replayed op by op with its messages on the link (and one whose spans
//      carry no chunk: its schedule's bubble (p-1)/(m+p-1)); the slowest rank's step; the
//      efficiency against one GPU alone;
//   2. a real ddp run: the projection carries exactly the bytes rank 0's step event says it sent;
//      a faster link never makes the step longer; a real tp run, whose collectives all block
//      the rank, has none of its communication hidden;
//   3. the projection onto a link against a lab run over that link, emulated (--link,
//      --link-scale): within 20% for ddp, zero-3, tp and pp (whose messages each take at least
//      the link's time); what --link refuses;
//   4. what it cannot project (no directory, a file, a run of the collectives, no spans, a
//      link or GPU it does not know, --mfu outside (0, 1]): exit 2 and one line.
#include <math.h>
#include <sys/stat.h>

#include "common/comm/links.h"
#include "common/runfiles/json.h"
#include "labtest.h"
#include "test.h"

static char shardlab[PATH_MAX], labs_dir[PATH_MAX];

static int whatif(const char *tag, const char *dir, const char *a1, const char *a2, const char *a3, const char *a4) {
    char *argv[] = {shardlab, "whatif", (char *)dir, (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL};
    return run(argv, tag);
}

static double num_of(const JsonValue *v, const char *k1, const char *k2) {
    const JsonValue *x = v ? json_get(v, k1) : NULL;
    if (k2) x = x ? json_get(x, k2) : NULL;
    return x && x->type == JSON_NUMBER ? x->number : NAN;
}

static JsonValue *projected(const char *dir, const char *link, const char *mfu) {
    char *argv[] = {shardlab, "whatif", (char *)dir, "--json", "--link", (char *)link, mfu ? "--mfu" : NULL, (char *)mfu, NULL};
    int rc = run(argv, "json");
    char *out = captured("json", "out"), err[128];
    JsonValue *v = rc == 0 ? json_parse(out, strlen(out), err, sizeof err) : NULL;
    if (!v) {
        char *err2 = captured("json", "err");
        printf("# whatif %s --link %s: exit %d: %s %s\n", dir, link, rc, one_line(out), one_line(err2));
        free(err2);
    }
    free(out);
    return v;
}

// The same with --link-across ACROSS after --link LINK.
static JsonValue *projected_across(const char *dir, const char *link, const char *across) {
    char *argv[] = {shardlab, "whatif", (char *)dir, "--json", "--link", (char *)link, "--link-across", (char *)across, NULL};
    int rc = run(argv, "json");
    char *out = captured("json", "out"), err[128];
    JsonValue *v = rc == 0 ? json_parse(out, strlen(out), err, sizeof err) : NULL;
    if (!v) printf("# whatif %s --link %s --link-across %s: exit %d: %s\n", dir, link, across, rc, one_line(out));
    free(out);
    return v;
}

static int close_to(double got, double want) { return fabs(got - want) <= 1e-9 * fmax(1, fabs(want)); }

// ---- 1. crafted runs ---------------------------------------------------------------------------

#define T0 1767225601000000LL
typedef struct {
    const char *name;
    int t0, t1, bytes;
    const char *group;  // "tp", "dp", or NULL: none written
    int mb, chunk;      // the micro-batch; pp: the chunk (written for a pipeline's runs)
} Span;
#define SPANS 8  // a rank's spans of a step, at most

// A run of lab on 2 ranks of the labs' GPT at L 2, C 64, NH 4, T 8, batch 4; each rank's spans
// of step 2 (and step 1's, so that step 2 is complete).
static void write_run(const char *dir, const char *lab, const char *extra_config, const Span spans[2][SPANS]) {
    mkdir(dir, 0755);
    char path[PATH_MAX + 32], config[400];
    snprintf(config, sizeof config, "{\"steps\":2,\"batch\":4,\"seq\":8,\"layers\":2,\"dim\":64,\"heads\":4,\"vocab\":256,\"mixed\":false%s}",
             extra_config);
    StrBuf sb;
    sb_init(&sb);
    sb_printf(&sb, "{\"lab\":\"%s\",\"argv\":[\"%s\"],\"world_size\":2,\"device\":\"cpu\",\"backend\":\"shm\",\"config\":%s,"
                   "\"start_time\":\"2026-01-01T00:00:00Z\",\"start_unix_us\":%lld}\n", lab, lab, config, T0 - 1000000);
    snprintf(path, sizeof path, "%s/meta.json", dir);
    write_text(path, "w", sb.data);
    for (int r = 0; r < 2; r++) {
        sb.len = 0, sb.data[0] = 0;
        sb_printf(&sb, "{\"ev\":\"start\",\"rank\":%d,\"world\":2,\"lab\":\"%s\",\"device\":\"cpu\",\"backend\":\"shm\",\"params\":1,"
                       "\"config\":%s,\"loss_floor\":1.5}\n", r, lab, config);
        for (int step = 1; step <= 2; step++) {
            for (int k = 0; k < SPANS && spans[r][k].name; k++) {
                sb_printf(&sb, "{\"ev\":\"span\",\"rank\":%d,\"step\":%d,\"name\":\"%s\",\"mb\":%d,\"layer\":-1,\"t0_us\":%lld,"
                               "\"t1_us\":%lld,\"bytes\":%d%s%s%s",
                          r, step, spans[r][k].name, spans[r][k].mb, T0 + step * 10000 + spans[r][k].t0,
                          T0 + step * 10000 + spans[r][k].t1, spans[r][k].bytes, spans[r][k].group ? ",\"group\":\"" : "",
                          spans[r][k].group ? spans[r][k].group : "", spans[r][k].group ? "\"" : "");
                if (!strcmp(lab, "pp")) sb_printf(&sb, ",\"chunk\":%d", spans[r][k].chunk);
                sb_printf(&sb, "}\n");
            }
            sb_printf(&sb, "{\"ev\":\"step\",\"rank\":%d,\"step\":%d,\"loss\":3,\"lr\":0.001,\"tokens\":32,"
                           "\"ms\":{\"step\":10,\"compute\":8,\"comm\":2},\"bytes\":{\"sent\":1000,\"recv\":1000},"
                           "\"mem\":{\"params\":1,\"grads\":1,\"optim\":1,\"acts\":1,\"comm\":0,\"peak\":5},"
                           "\"param_hash\":\"0123456789abcdef\"}\n", r, step);
        }
        snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, r);
        write_text(path, "w", sb.data);
    }
    sb_free(&sb);
}

// The projection worked out here: rank r's spans on a link of beta bytes a second and alpha ms
// a step, k steps per collective; compute_ms the rank's projected compute.
static double rank_step(const Span sp[SPANS], double compute_ms, double alpha, double beta, int k_coll, double bubble,
                        double *comm_out) {
    double comm = 0, measured_comm = 0, hidden_us = 0;
    for (int i = 0; i < SPANS && sp[i].name; i++) {
        int is_comm = strcmp(sp[i].name, "fwd") && strcmp(sp[i].name, "bwd") && strcmp(sp[i].name, "optim");
        if (!is_comm) continue;
        comm += (strcmp(sp[i].name, "send") ? k_coll : 1) * alpha + sp[i].bytes / beta * 1e3;
        measured_comm += sp[i].t1 - sp[i].t0;
        for (int j = 0; j < SPANS && sp[j].name; j++) {  // (the crafted compute spans never overlap each other)
            if (!strcmp(sp[j].name, sp[i].name) || !(strcmp(sp[j].name, "fwd") == 0 || !strcmp(sp[j].name, "bwd") ||
                                                      !strcmp(sp[j].name, "optim")))
                continue;
            int a = sp[i].t0 > sp[j].t0 ? sp[i].t0 : sp[j].t0, b = sp[i].t1 < sp[j].t1 ? sp[i].t1 : sp[j].t1;
            if (b > a) hidden_us += b - a;
        }
    }
    // The compute after the first communication began: the most it could hide, scaled to
    // compute_ms (the crafted compute spans never overlap each other).
    int first = 1 << 30;
    double total = 0, window = 0;
    for (int i = 0; i < SPANS && sp[i].name; i++)
        if (strcmp(sp[i].name, "fwd") && strcmp(sp[i].name, "bwd") && strcmp(sp[i].name, "optim") && sp[i].t0 < first)
            first = sp[i].t0;
    for (int i = 0; i < SPANS && sp[i].name; i++)
        if (!strcmp(sp[i].name, "fwd") || !strcmp(sp[i].name, "bwd") || !strcmp(sp[i].name, "optim")) {
            total += sp[i].t1 - sp[i].t0;
            if (sp[i].t1 > first) window += sp[i].t1 - (sp[i].t0 > first ? sp[i].t0 : first);
        }
    double hidden = fmin(measured_comm > 0 ? hidden_us / measured_comm * comm : 0, total > 0 ? compute_ms * window / total : 0);
    *comm_out = comm;
    return (compute_ms + comm - hidden) / (1 - bubble);
}

static void check_crafted(void) {
    // The labs' GPT at L 2, C 64, T 8, V 256: Psi = (V+T)C + L(12C^2+13C) + 2C + VC; a batch of
    // 4 x 8 tokens: 32 (6 Psi + 12 L T C) FLOPs, half a rank's; an H100's fp32 67 TFLOPS x 0.5.
    double L = 2, C = 64, T = 8, V = 256, psi = (V + T) * C + L * (12 * C * C + 13 * C) + 2 * C + V * C;
    double flops = 32 * (6 * psi + 12 * L * T * C), compute = flops / 2 / (67e12 * 0.5) * 1e3, alone = flops / (67e12 * 0.5) * 1e3;
    static const Span ddp[2][SPANS] = {
        {{"fwd", 0, 1000, 0, NULL, 0, 0}, {"bwd", 1000, 3000, 0, NULL, 0, 0}, {"all_reduce", 2000, 3400, 400000, NULL, 0, 0}, {"optim", 3600, 4000, 0, NULL, 0, 0}},
        {{"fwd", 0, 1000, 0, NULL, 0, 0}, {"bwd", 1000, 2500, 0, NULL, 0, 0}, {"all_reduce", 2500, 3500, 800000, NULL, 0, 0}, {"optim", 3600, 4000, 0, NULL, 0, 0}},
    };
    char dir[600];
    snprintf(dir, sizeof dir, "%s/ddp", tmp);
    write_run(dir, "ddp", "", ddp);
    // eth-100g: 12.5 GB/s, 10 us a step; an all-reduce over 2 ranks takes 2(2-1) = 2 steps.
    double alpha = 0.010, beta = 12.5e9, c0, c1;
    double s0 = rank_step(ddp[0], compute, alpha, beta, 2, 0, &c0), s1 = rank_step(ddp[1], compute, alpha, beta, 2, 0, &c1);
    JsonValue *v = projected(dir, "eth-100g", "0.5");
    double step = fmax(s0, s1);
    const JsonValue *ranks = v ? json_get(v, "ranks") : NULL;
    // Proves: each rank's own projection: rank 0 hid 5/7 of its all-reduce behind bwd, which
    // hides no more than the compute after the all-reduce began; rank 1 hid none.
    EXPECT(ranks && ranks->count == 2 && close_to(num_of(json_at(ranks, 0), "step_ms", NULL), s0) &&
               close_to(num_of(json_at(ranks, 1), "step_ms", NULL), s1) &&
               close_to(num_of(json_at(ranks, 0), "hidden_ms", NULL), fmin(c0 * 1000.0 / 1400, compute * 1400.0 / 3400)),
           "ddp over eth-100g: rank 0's step %.6f ms (hidden %.6f: 5/7 of its communication, up to the 1400 of 3400 us of "
           "compute after its all-reduce began), rank 1's %.6f ms",
           s0, fmin(c0 * 1000.0 / 1400, compute * 1400.0 / 3400), s1);
    // Proves: compute, communication and step as worked out here from the spans and the
    // tables, the slowest rank's (rank 1 sent twice the bytes and hid none of them).
    EXPECT(v && close_to(num_of(v, "compute_ms", NULL), compute) && close_to(num_of(v, "comm_ms", NULL), s1 > s0 ? c1 : c0) &&
               close_to(num_of(v, "step_ms", NULL), step) && num_of(v, "rank", NULL) == (s1 > s0 ? 1 : 0) &&
               close_to(num_of(v, "efficiency", NULL), alone / (2 * step)) && num_of(v, "bytes", NULL) == 800000,
           "ddp on 2 ranks over eth-100g, --mfu 0.5: compute %.6f ms, step %.6f ms (rank %d), efficiency %.4f (got %.6f, %.6f, "
           "rank %.0f, %.4f)",
           compute, step, s1 > s0 ? 1 : 0, alone / (2 * step), num_of(v, "compute_ms", NULL), num_of(v, "step_ms", NULL),
           num_of(v, "rank", NULL), num_of(v, "efficiency", NULL));
    json_free(v);

    // A pipeline whose spans carry no chunk (a run logged before they did): it cannot be
    // replayed, so its bubble is its schedule's, (p-1)/(m+p-1) = 1/5 of the step, and each send
    // one step of the link.
    static const Span pp[2][SPANS] = {
        {{"fwd", 0, 2000, 0, NULL, 0, 0}, {"send", 500, 700, 3000, NULL, 0, 0}, {"bwd", 2000, 4000, 0, NULL, 0, 0}, {"optim", 4000, 4200, 0, NULL, 0, 0}},
        {{"fwd", 100, 2100, 0, NULL, 0, 0}, {"send", 2100, 2300, 3000, NULL, 0, 0}, {"bwd", 2300, 4100, 0, NULL, 0, 0}, {"optim", 4100, 4200, 0, NULL, 0, 0}},
    };
    snprintf(dir, sizeof dir, "%s/pp", tmp);
    write_run(dir, "pp", ",\"schedule\":\"1f1b\",\"micro\":4,\"chunks\":1,\"stages\":2,\"dp\":1", pp);
    alpha = 0.002, beta = 450e9;  // nvlink4
    s0 = rank_step(pp[0], compute, alpha, beta, 0, 0.2, &c0), s1 = rank_step(pp[1], compute, alpha, beta, 0, 0.2, &c1);
    v = projected(dir, "nvlink4", "0.5");
    step = fmax(s0, s1);
    EXPECT(v && close_to(num_of(v, "step_ms", NULL), step) && close_to(num_of(v, "bubble_ms", NULL), 0.2 * step),
           "pp, 2 stages x 4 micro-batches over nvlink4: step %.6f ms with a bubble of 1/5 (got %.6f, bubble %.6f)", step,
           num_of(v, "step_ms", NULL), num_of(v, "bubble_ms", NULL));
    json_free(v);
}

// A pipeline replayed: 2 stages, 2 micro-batches under 1F1B (stage 0: F0 F1 B0 B1; stage 1: F0
// B0 F1 B1), each forward 1 ms and each backward 2 ms as logged (--gpu here keeps them), each
// message 3000 bytes on eth-25g x 100: c = (15 us + 3000 B / 3.125 GB/s) x 100 = 1.596 ms, on a
// link of its own per direction. Worked out here, op by op: the step and each stage's idle time.
static void check_crafted_pipeline(void) {
    static const Span pp[2][SPANS] = {
        {{"fwd", 0, 1000, 0, NULL, 0, 0}, {"send", 1000, 1100, 3000, NULL, 0, 0}, {"fwd", 1100, 2100, 0, NULL, 1, 0},
         {"send", 2100, 2200, 3000, NULL, 1, 0}, {"bwd", 4000, 6000, 0, NULL, 0, 0}, {"bwd", 7000, 9000, 0, NULL, 1, 0}},
        {{"fwd", 1200, 2200, 0, NULL, 0, 1}, {"bwd", 2200, 4200, 0, NULL, 0, 1}, {"send", 4200, 4300, 3000, NULL, 0, 1},
         {"fwd", 4300, 5300, 0, NULL, 1, 1}, {"bwd", 5300, 7300, 0, NULL, 1, 1}, {"send", 7300, 7400, 3000, NULL, 1, 1}},
    };
    char dir[600];
    snprintf(dir, sizeof dir, "%s/pp-replay", tmp);
    write_run(dir, "pp", ",\"schedule\":\"1f1b\",\"micro\":2,\"chunks\":1,\"stages\":2,\"dp\":1", pp);
    double c = (0.015 + 3000 / 3.125e9 * 1e3) * 100;
    double f0_arrives = 1 + c, f1_arrives = fmax(2, f0_arrives) + c;          // stage 0 -> 1, one link
    double s1_b0_done = f0_arrives + 1 + 2, b0_arrives = s1_b0_done + c;      // stage 1 -> 0, the other
    double s1_done = fmax(s1_b0_done, f1_arrives) + 1 + 2, b1_arrives = fmax(s1_done, b0_arrives) + c;
    double s0_done = fmax(fmax(2, b0_arrives) + 2, b1_arrives) + 2, step = fmax(s0_done, s1_done);
    char *argv[] = {shardlab, "whatif", dir, "--json", "--gpu", "here", "--link", "eth-25g", "--link-scale", "100", NULL};
    int rc = run(argv, "pp-replay");
    char *out = rc == 0 ? captured("pp-replay", "out") : NULL, err[128];
    JsonValue *v = out ? json_parse(out, strlen(out), err, sizeof err) : NULL;
    // Proves: the step is the replay's (each stage's 6 ms of compute and its waits), and the
    // bubble is the slowest stage's idle time in it; the messages are not counted again.
    EXPECT(v && close_to(num_of(v, "step_ms", NULL), step) && close_to(num_of(v, "bubble_ms", NULL), step - 6) &&
               close_to(num_of(v, "exposed_ms", NULL), 0),
           "pp replayed, 2 stages x 2 micro-batches, messages of %.3f ms: step %.6f ms, bubble %.6f ms (got %.6f, %.6f, "
           "exposed %.6f)",
           c, step, step - 6, num_of(v, "step_ms", NULL), num_of(v, "bubble_ms", NULL), num_of(v, "exposed_ms", NULL));
    json_free(v), free(out);
}

// Tensor parallelism's spans name their group: on 2 ranks as 2 replicas of t = 1, a "tp"
// all-reduce spans one rank (no steps), the "dp" one both (2 steps of alpha).
static void check_groups(void) {
    static const Span tp[2][SPANS] = {
        {{"fwd", 0, 1000, 0, NULL, 0, 0}, {"all_reduce", 1000, 1100, 0, "tp", 0, 0}, {"bwd", 1100, 3000, 0, NULL, 0, 0},
         {"all_reduce", 3000, 3500, 5000, "dp", 0, 0}, {"optim", 3500, 4000, 0, NULL, 0, 0}},
        {{"fwd", 0, 1000, 0, NULL, 0, 0}, {"all_reduce", 1000, 1100, 0, "tp", 0, 0}, {"bwd", 1100, 3000, 0, NULL, 0, 0},
         {"all_reduce", 3000, 3500, 5000, "dp", 0, 0}, {"optim", 3500, 4000, 0, NULL, 0, 0}},
    };
    char dir[600];
    snprintf(dir, sizeof dir, "%s/tp", tmp);
    write_run(dir, "tp", ",\"tp\":1,\"dp\":2,\"sp\":false,\"vocab_parallel\":false", tp);
    JsonValue *v = projected(dir, "eth-100g", NULL);
    double want = 2 * 0.010 + 5000 / 12.5e9 * 1e3;  // the dp all-reduce's two steps and bytes; the tp one nothing
    EXPECT(v && close_to(num_of(v, "comm_ms", NULL), want), "tp of t = 1 on 2 replicas: only the dp all-reduce costs, %.6f ms (got %.6f)",
           want, num_of(v, "comm_ms", NULL));
    json_free(v);
    // --link-across: the dp all-reduce on the second link, the tp one on the first.
    v = projected_across(dir, "nvlink4", "eth-100g");
    EXPECT(v && close_to(num_of(v, "comm_ms", NULL), want) && close_to(num_of(v, "across_ms", NULL), want) &&
               num_of(v, "across_bytes", NULL) == 5000,
           "tp --link nvlink4 --link-across eth-100g: the dp all-reduce across, %.6f ms of 5000 bytes (got %.6f ms of %.0f)",
           want, num_of(v, "across_ms", NULL), num_of(v, "across_bytes", NULL));
    json_free(v);

    // HSDP on 2 ranks as 2 replicas x 1 shard: a unit's gather within the shard group of 1
    // costs its bytes alone; the replica sum's two halves (group "replicate") 1 step each.
    static const Span hsdp[2][SPANS] = {
        {{"fwd", 0, 1000, 0, NULL, 0, 0}, {"all_gather", 1000, 1100, 0, NULL, 0, 0}, {"bwd", 1100, 3000, 0, NULL, 0, 0},
         {"reduce_scatter", 3000, 3200, 3000, "replicate", 0, 0}, {"all_gather", 3200, 3500, 3000, "replicate", 0, 0},
         {"optim", 3500, 4000, 0, NULL, 0, 0}},
        {{"fwd", 0, 1000, 0, NULL, 0, 0}, {"all_gather", 1000, 1100, 0, NULL, 0, 0}, {"bwd", 1100, 3000, 0, NULL, 0, 0},
         {"reduce_scatter", 3000, 3200, 3000, "replicate", 0, 0}, {"all_gather", 3200, 3500, 3000, "replicate", 0, 0},
         {"optim", 3500, 4000, 0, NULL, 0, 0}},
    };
    snprintf(dir, sizeof dir, "%s/hsdp", tmp);
    write_run(dir, "fsdp", ",\"replicate\":2", hsdp);
    v = projected_across(dir, "nvlink4", "eth-100g");
    want = 2 * (0.010 + 3000 / 12.5e9 * 1e3);
    EXPECT(v && close_to(num_of(v, "comm_ms", NULL), want) && close_to(num_of(v, "across_ms", NULL), want) &&
               num_of(v, "across_bytes", NULL) == 6000,
           "fsdp --replicate 2 on 2 ranks, --link-across eth-100g: the replica sum's halves, 1 step and 3000 bytes each, "
           "%.6f ms; the gather in a group of 1 nothing (got %.6f ms, across %.6f ms of %.0f bytes)", want,
           num_of(v, "comm_ms", NULL), num_of(v, "across_ms", NULL), num_of(v, "across_bytes", NULL));
    json_free(v);
}

// ---- 2. a real run ------------------------------------------------------------------------------

static void check_real(void) {
    char dir[400], bin[PATH_MAX + 16];
    snprintf(dir, sizeof dir, "%s/real", tmp);
    snprintf(bin, sizeof bin, "%s/ddp", labs_dir);
    char *args[] = {"--steps", "3", NULL};
    int rc = run_ranks(bin, 2, "real", dir, args, NULL);
    JsonValue *v = rc == 0 ? projected(dir, "ib-ndr", NULL) : NULL, *w = rc == 0 ? projected(dir, "nvlink4", NULL) : NULL;
    static Events ev;
    int worst = v ? (int)num_of(v, "rank", NULL) : 0;
    load_rank_events(dir, worst >= 0 && worst < 2 ? worst : 0, &ev);
    double sent = NAN;
    for (int i = 0; i < ev.n; i++)
        if (!strcmp(kind(ev.lines[i]), "step") && num(ev.lines[i], "step") == num_of(v, "step", NULL))
            sent = num_of(ev.lines[i], "bytes", "sent");
    (void)whatif;
    free_events(&ev);
    // Proves: the volume projected is the one the run logged (rank 0's step event), and the
    // faster link gives the shorter step on the same volume and compute.
    EXPECT(v && w && num_of(v, "bytes", NULL) == sent && sent > 0 &&
               num_of(v, "measured", "compute_ms") > 0 && num_of(w, "step_ms", NULL) < num_of(v, "step_ms", NULL) &&
               close_to(num_of(w, "compute_ms", NULL), num_of(v, "compute_ms", NULL)),
           "a real ddp run on 2 ranks: %.0f bytes projected (the slowest rank's step event: %.0f), nvlink4 %.4f ms < ib-ndr %.4f ms",
           num_of(v, "bytes", NULL), sent, num_of(w, "step_ms", NULL), num_of(v, "step_ms", NULL));
    json_free(v), json_free(w);
    rc = whatif("table", dir, "--link", "eth-25g", NULL, NULL);
    char *out = captured("table", "out");
    EXPECT(rc == 0 && strstr(out, "measured (cpu, shm)") && strstr(out, "exposed") && strstr(out, "efficient"),
           "the table: measured, projected, exposed, the scaling efficiency");
    free(out);

    // Context parallelism on 2 ranks: the ring's K/V sends are projected with the gradients'
    // all-reduces, every byte the step event counts.
    snprintf(dir, sizeof dir, "%s/real-cp", tmp);
    snprintf(bin, sizeof bin, "%s/cp", labs_dir);
    rc = run_ranks(bin, 2, "real-cp", dir, args, NULL);
    v = rc == 0 ? projected(dir, "nvlink4", NULL) : NULL;
    worst = v ? (int)num_of(v, "rank", NULL) : 0;
    load_rank_events(dir, worst >= 0 && worst < 2 ? worst : 0, &ev);
    sent = NAN;
    double ring = NAN;
    for (int i = 0; i < ev.n; i++)
        if (!strcmp(kind(ev.lines[i]), "step") && num(ev.lines[i], "step") == num_of(v, "step", NULL))
            sent = num_of(ev.lines[i], "bytes", "sent"), ring = num(ev.lines[i], "ring_bytes_sent");
    free_events(&ev);
    EXPECT(v && num_of(v, "bytes", NULL) == sent && ring > 0 && ring < sent && num_of(v, "comm_ms", NULL) > 0,
           "a real cp run on 2 ranks: %.0f bytes projected, the step event's %.0f (the ring's %.0f among them)",
           v ? num_of(v, "bytes", NULL) : -1, sent, ring);
    json_free(v);

    // Tensor parallelism on 2 ranks: every collective blocks the rank inside its forward or
    // backward (its spans say from when it waited), so none of it counts as hidden, and the
    // compute measured is less than the fwd and bwd spans, which enclose the all-reduces.
    snprintf(dir, sizeof dir, "%s/real-tp", tmp);
    snprintf(bin, sizeof bin, "%s/tp", labs_dir);
    rc = run_ranks(bin, 2, "real-tp", dir, args, NULL);
    v = rc == 0 ? projected(dir, "nvlink4", NULL) : NULL;
    EXPECT(v && num_of(v, "measured", "comm_ms") > 0 && num_of(v, "measured", "hidden_ms") == 0 &&
               num_of(v, "measured", "compute_ms") > 0,
           "a real tp run on 2 ranks: %.3f ms of communication measured, %.3f ms of it hidden (every call blocks the "
           "rank: none)", v ? num_of(v, "measured", "comm_ms") : -1, v ? num_of(v, "measured", "hidden_ms") : -1);
    json_free(v);

    // HSDP, 2 replicas x 2 shards: the bytes across are the run's replica sums (its step
    // event's replica_bytes_sent), the rest stays on --link; a slower link across, a longer step.
    snprintf(dir, sizeof dir, "%s/real-hsdp", tmp);
    snprintf(bin, sizeof bin, "%s/fsdp", labs_dir);
    char *hsdp[] = {"--steps", "3", "--replicate", "2", NULL};
    rc = run_ranks(bin, 4, "real-hsdp", dir, hsdp, NULL);
    v = rc == 0 ? projected_across(dir, "nvlink4", "ib-ndr") : NULL, w = rc == 0 ? projected(dir, "nvlink4", NULL) : NULL;
    worst = v ? (int)num_of(v, "rank", NULL) : 0;
    load_rank_events(dir, worst >= 0 && worst < 4 ? worst : 0, &ev);
    double across = NAN;
    sent = NAN;
    for (int i = 0; i < ev.n; i++)
        if (!strcmp(kind(ev.lines[i]), "step") && num(ev.lines[i], "step") == num_of(v, "step", NULL))
            across = num(ev.lines[i], "replica_bytes_sent"), sent = num(ev.lines[i], "unit_bytes_sent");
    free_events(&ev);
    EXPECT(v && w && num_of(v, "across_bytes", NULL) == across && across > 0 &&
               num_of(v, "bytes", NULL) - num_of(v, "across_bytes", NULL) >= sent &&
               num_of(v, "step_ms", NULL) > num_of(w, "step_ms", NULL) && !strcmp(json_get(v, "link_across")->string, "ib-ndr"),
           "a real fsdp --replicate 2 run on 4 ranks: %.0f bytes across on ib-ndr (its step event: %.0f; in a group %.0f >= "
           "%.0f), its step %.4f ms > %.4f ms all on nvlink4", num_of(v, "across_bytes", NULL), across,
           num_of(v, "bytes", NULL) - num_of(v, "across_bytes", NULL), sent, num_of(v, "step_ms", NULL),
           num_of(w, "step_ms", NULL));
    json_free(v), json_free(w);
    rc = whatif("table-hsdp", dir, "--link-across", "eth-25g", NULL, NULL);
    out = captured("table-hsdp", "out");
    EXPECT(rc == 0 && strstr(out, "between the 2 replicas") && strstr(out, "in a replica") && strstr(out, "over eth-25g"),
           "the table of an HSDP run with --link-across: the link between replicas, the time in a replica and across");
    free(out);
}

// ---- 3. against a lab run over the emulated link ----------------------------------------------

// The emulated link's slowdown: x 1000, so that its time is most of a step and the compute's
// own noise on a loaded machine (the tests run side by side) stays a small part of it; at x 100
// the steps under load came out 25-35% over the projection, at x 1000 within 10%.
#define EMU_SCALE "1000"
#define EMU_SCALE_N 1000

// Rank-wise slowest ms.work of each step from 2 on (the first step warms up), their median.
static double emulated_step_ms(const char *dir, int world, int steps) {
    double per_step[64] = {0};
    for (int r = 0; r < world; r++) {
        static Events ev;
        load_rank_events(dir, r, &ev);
        for (int i = 0; i < ev.n; i++)
            if (!strcmp(kind(ev.lines[i]), "step")) {
                int s = (int)num(ev.lines[i], "step");
                double work = num_of(ev.lines[i], "ms", "work");
                if (s >= 2 && s <= steps && s < 64 && work > per_step[s]) per_step[s] = work;
            }
        free_events(&ev);
    }
    double v[64];
    int n = 0;
    for (int s = 2; s <= steps && s < 64; s++) v[n++] = per_step[s];
    for (int i = 1; i < n; i++)  // a few values: insertion sort
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];
            v[j] = v[j - 1], v[j - 1] = t;
        }
    return n ? (n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2) : NAN;
}

// A run projected onto 25 Gb Ethernet with its times x 1000 (--gpu here: the compute as it
// was measured) against the same lab run with --link eth-25g --link-scale 1000, where every
// collective is stretched to what the link would take: the projection within 20% of the
// measured step, for data parallelism, ZeRO-3 and tensor parallelism.
static void check_emulated(void) {
    static const struct {
        const char *lab, *args[4];
    } runs[] = {{"ddp", {NULL}}, {"zero", {"--stage", "3", NULL}}, {"tp", {NULL}}};
    for (size_t i = 0; i < sizeof runs / sizeof runs[0]; i++) {
        char plain[400], emulated[400], bin[PATH_MAX + 16];
        snprintf(plain, sizeof plain, "%s/emu-%s-plain", tmp, runs[i].lab);
        snprintf(emulated, sizeof emulated, "%s/emu-%s-link", tmp, runs[i].lab);
        snprintf(bin, sizeof bin, "%s/%s", labs_dir, runs[i].lab);
        char *a1[12] = {"--steps", "5"}, *a2[12] = {"--steps", "5", "--link", "eth-25g", "--link-scale", EMU_SCALE};
        int n1 = 2, n2 = 6;
        for (int k = 0; runs[i].args[k]; k++) a1[n1++] = (char *)runs[i].args[k], a2[n2++] = (char *)runs[i].args[k];
        a1[n1] = a2[n2] = NULL;
        int rc1 = run_ranks(bin, 2, "emu-plain", plain, a1, NULL), rc2 = run_ranks(bin, 2, "emu-link", emulated, a2, NULL);
        char *argv[] = {shardlab, "whatif", plain, "--json", "--gpu", "here", "--link", "eth-25g", "--link-scale", EMU_SCALE, NULL};
        int rc = rc1 == 0 && rc2 == 0 ? run(argv, "emu") : -1;
        char *out = rc == 0 ? captured("emu", "out") : NULL, err[128];
        JsonValue *v = out ? json_parse(out, strlen(out), err, sizeof err) : NULL;
        double projected = num_of(v, "step_ms", NULL), measured = emulated_step_ms(emulated, 2, 5),
               before = emulated_step_ms(plain, 2, 5);
        JsonValue *meta = load_json_file(emulated, "meta.json");
        const JsonValue *cfg = meta ? json_get(meta, "config") : NULL, *link = cfg ? json_get(cfg, "link") : NULL;
        // Proves: the lab ran over the emulated link (its config says so, and its step grew at
        // least twofold), and the projection from the plain run is within 20% of that step.
        EXPECT(rc == 0 && link && link->type == JSON_STRING && !strcmp(link->string, "eth-25g") &&
                   num_of(cfg, "link_scale", NULL) == EMU_SCALE_N && measured > 2 * before &&
                   fabs(projected - measured) <= 0.2 * measured,
               "%s -n 2 %s: projected onto eth-25g x " EMU_SCALE " %.2f ms, measured over the emulated link %.2f ms (%+.0f%%; %.2f ms "
               "without it)",
               runs[i].lab, runs[i].args[0] ? "--stage 3" : "", projected, measured, 100 * (projected - measured) / measured,
               before);
        json_free(v), json_free(meta), free(out);
    }
    // What --link refuses: a name it does not know, a scale below 1.
    static const struct {
        const char *lab, *a1, *a2, *says;
    } bad[] = {{"ddp", "--link", "carrier-pigeon", "no such link"}, {"ddp", "--link-scale", "0", "--link-scale"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char bin[PATH_MAX + 16], dir[400];
        snprintf(bin, sizeof bin, "%s/%s", labs_dir, bad[i].lab);
        snprintf(dir, sizeof dir, "%s/bad-link-%zu", tmp, i);
        char *args[] = {"--steps", "2", (char *)bad[i].a1, (char *)bad[i].a2, NULL};
        int rc = run_ranks(bin, 2, "bad-link", dir, args, NULL);
        char *err = captured("bad-link.r0", "err");
        EXPECT(rc == 2 && strstr(err, bad[i].says), "%s %s %s: exit 2 and '%s' (exit %d: %s)", bad[i].lab, bad[i].a1, bad[i].a2,
               bad[i].says, rc, one_line(err));
        free(err);
    }
}

// ---- 4. refusals ----------------------------------------------------------------------------------

// A pipeline over the emulated link: its messages go point to point (dist_p2p), each held back
// until the link would have delivered it, alpha + bytes / beta (x 1000) after it started, behind
// the messages before it to the same rank; the stage computes meanwhile. So every message of
// the run lasts at least that long, and the step grows by at least the two crossings of the
// link that a micro-batch's forward and backward make between the stages (1F1B on 2 stages).
// And whatif's projection from the plain run, the pipeline replayed on that link, within 20%
// of the emulated step.
static void check_emulated_pipeline(void) {
    char plain[400], emulated[400], bin[PATH_MAX + 16];
    snprintf(plain, sizeof plain, "%s/emu-pp-plain", tmp);
    snprintf(emulated, sizeof emulated, "%s/emu-pp-link", tmp);
    snprintf(bin, sizeof bin, "%s/pp", labs_dir);
    char *a1[] = {"--steps", "5", NULL}, *a2[] = {"--steps", "5", "--link", "eth-25g", "--link-scale", EMU_SCALE, NULL};
    int rc = run_ranks(bin, 2, "emu-pp-plain", plain, a1, NULL) | run_ranks(bin, 2, "emu-pp-link", emulated, a2, NULL);
    const Link *eth = link_find("eth-25g");
    int sends = 0, short_sends = 0;
    double msg_ms = 0, shortest = INFINITY;
    for (int r = 0; r < 2 && rc == 0; r++) {
        static Events ev;
        load_rank_events(emulated, r, &ev);
        for (int i = 0; i < ev.n; i++) {
            const JsonValue *e = ev.lines[i];
            if (strcmp(kind(e), "span") || strcmp(json_get(e, "name")->string, "send")) continue;
            double c = link_call_ms(eth, "send", 2, num(e, "bytes")) * EMU_SCALE_N, took = (num(e, "t1_us") - num(e, "t0_us")) / 1e3;
            sends++, msg_ms = c;
            if (took < c * 0.999) short_sends++;
            if (took / c < shortest) shortest = took / c;
        }
        free_events(&ev);
    }
    double before = emulated_step_ms(plain, 2, 5), measured = emulated_step_ms(emulated, 2, 5);
    EXPECT(rc == 0 && sends >= 2 * 4 * 5 && short_sends == 0 && measured >= before + 2 * msg_ms,
           "pp -n 2 over eth-25g x " EMU_SCALE ": each of its %d messages took at least the link's %.2f ms (the shortest %.2f times "
           "it; %d shorter), and the step grew by at least two of them (%.2f ms, %.2f ms without the link)",
           sends, msg_ms, shortest, short_sends, measured, before);
    char *argv[] = {shardlab, "whatif", plain, "--json", "--gpu", "here", "--link", "eth-25g", "--link-scale", EMU_SCALE, NULL};
    char *out = rc == 0 && run(argv, "emu-pp") == 0 ? captured("emu-pp", "out") : NULL, err[128];
    JsonValue *v = out ? json_parse(out, strlen(out), err, sizeof err) : NULL;
    double projected = num_of(v, "step_ms", NULL);
    EXPECT(fabs(projected - measured) <= 0.2 * measured,
           "pp -n 2: projected onto eth-25g x " EMU_SCALE " %.2f ms, measured over the emulated link %.2f ms (%+.0f%%)", projected,
           measured, 100 * (projected - measured) / measured);
    json_free(v), free(out);
}

static void check_refusals(void) {
    char file[600], empty[600], coll[600], nospans[600], real[600];
    snprintf(file, sizeof file, "%s/a-file", tmp);
    write_text(file, "w", "not a run\n");
    snprintf(empty, sizeof empty, "%s/empty", tmp);
    mkdir(empty, 0755);
    snprintf(real, sizeof real, "%s/real", tmp);
    snprintf(coll, sizeof coll, "%s/coll", tmp);
    mkdir(coll, 0755);
    char path[700];
    snprintf(path, sizeof path, "%s/meta.json", coll);
    write_text(path, "w", "{\"lab\":\"collectives\",\"argv\":[\"collectives\"],\"world_size\":2,\"device\":\"cpu\",\"backend\":\"shm\","
                          "\"config\":{},\"start_time\":\"2026-01-01T00:00:00Z\",\"start_unix_us\":1767225600000000}\n");
    snprintf(nospans, sizeof nospans, "%s/nospans", tmp);
    mkdir(nospans, 0755);
    snprintf(path, sizeof path, "%s/meta.json", nospans);
    write_text(path, "w", "{\"lab\":\"ddp\",\"argv\":[\"ddp\"],\"world_size\":2,\"device\":\"cpu\",\"backend\":\"shm\",\"config\":"
                          "{\"batch\":4,\"seq\":8,\"layers\":2,\"dim\":64,\"heads\":4},\"start_time\":\"2026-01-01T00:00:00Z\","
                          "\"start_unix_us\":1767225600000000}\n");
    static const struct {
        int which;  // 0 none, 1 the file, 2 empty, 3 collectives, 4 no spans, 5 the real run
        const char *a1, *a2, *says;
    } bad[] = {
        {0, NULL, NULL, "expected a run directory"},
        {1, NULL, NULL, "not a directory"},
        {2, NULL, NULL, "not a run directory"},
        {3, NULL, NULL, "trains no model"},
        {4, NULL, NULL, "no step that every rank finished"},
        {5, "--link", "carrier-pigeon", "--link takes"},
        {5, "--gpu", "tpu", "--gpu takes"},
        {5, "--mfu", "0", "--mfu takes"},
        {5, "--mfu", "1.5", "--mfu takes"},
        {5, "--bogus", NULL, "unknown option"},
        {5, "--link", NULL, "needs a value"},
        {5, "--link-across", "ib-xdr", "--link-across takes"},
        {5, "--link-across", "ib-ndr", "this ddp run has no replicas"},
    };
    const char *dirs[] = {NULL, file, empty, coll, nospans, real};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *argv[6] = {shardlab, "whatif"};
        int n = 2;
        if (dirs[bad[i].which]) argv[n++] = (char *)dirs[bad[i].which];
        if (bad[i].a1) argv[n++] = (char *)bad[i].a1;
        if (bad[i].a2) argv[n++] = (char *)bad[i].a2;
        argv[n] = NULL;
        int rc = run(argv, "bad");
        char *err = captured("bad", "err"), *out = captured("bad", "out");
        // Proves: exit 2, one line that says why, no projection printed.
        EXPECT(rc == 2 && strstr(err, bad[i].says) && count_lines(err) == 1 && !out[0], "whatif refuses (%zu) with '%s' (exit %d: %s)",
               i, bad[i].says, rc, one_line(err));
        free(err), free(out);
    }
    char *argv[] = {shardlab, "whatif", "--links", NULL};
    int rc = run(argv, "links");
    char *out = captured("links", "out");
    EXPECT(rc == 0 && strstr(out, "nvlink4") && strstr(out, "eth-25g") && strstr(out, "datasheet") && strstr(out, "IEEE"),
           "whatif --links: every link and GPU with its source");
    free(out);
}

int main(int argc, char **argv) {
    if (argc != 3 || !realpath(argv[1], shardlab) || !realpath(argv[2], labs_dir)) {
        fprintf(stderr, "usage: test_whatif SHARDLAB LABS_DIR\n");
        return 2;
    }
    snprintf(tmp, sizeof tmp, "/tmp/test_whatif-XXXXXX");
    if (!mkdtemp(tmp)) return perror("mkdtemp"), 2;
    unsetenv("SHARDLAB_TIMEOUT_S");
    double t0 = now_s();
    check_crafted();
    check_crafted_pipeline();
    check_groups();
    check_real();
    check_emulated();
    check_emulated_pipeline();
    check_refusals();
    printf("# %.1f s\n", now_s() - t0);
    tmp_finish(test_failed);
    return test_done();
}
