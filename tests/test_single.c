// test_single.c — the single-rank lab, end to end, read back from its run directory.
//
// usage: test_single OPTIMIZED_SINGLE SANITIZED_SINGLE
//
// Trains with the real lab binary and checks what it wrote, as a grader would:
//   - every line of the run log, meta.json and summary.json follows the schema (labs/DESIGN.md, Events);
//   - the loss starts at ln(256) and approaches the corpus' loss floor;
//   - gradient accumulation (4 micro-batches) trains exactly like one batch;
//   - the memory of each category equals its closed form;
//   - --save / --init round-trip the weights; a file for another model is refused cleanly,
//     and so is one with a bit flipped in its data (the checksum --save writes);
//   - bad arguments exit 2 with one line; the sanitized lab runs clean under ASan/UBSan;
//   - SHARDLAB_PROFILE_STEP changes nothing on the CPU, and a bad value stops the lab.
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <sys/resource.h>
#include <time.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "command/runs/runschema.h"
#include "common/harness/memfit.h"
#include "common/runfiles/json.h"
#include "labtest.h"
#include "test.h"

static const char *lab, *lab_san;

// ---- the recipe: a spike, and the learning-rate schedule ---------------------------------

// A loss spike, as the course defines one: after the warmup, a step whose loss exceeds the
// lowest loss of the 50 steps before it by more than 0.3 nats. (The recipe before warmup and
// decay jumped to 8-13 nats around steps 25-60; batch-to-batch noise of the default shape
// stays under about 0.28 nats.) Returns the worst such excess; *at is its step.
static double worst_jump(const JsonValue **steps, int n, int warmup, int *at) {
    double worst = -INFINITY;
    *at = 0;
    for (int i = 1; i < n; i++) {
        int step = numi(steps[i], "step");
        if (step <= warmup) continue;
        double low = INFINITY;
        for (int j = i - 1; j >= 0 && j >= i - 50; j--) low = fmin(low, num(steps[j], "loss"));
        double jump = num(steps[i], "loss") - low;
        if (jump > worst) worst = jump, *at = step;
    }
    return worst;
}

// The schedule the labs follow (adamw.h), written again here from its definition: linear
// warmup over W steps, then half a cosine from lr to lr_min at step S.
static double schedule_lr(const JsonValue *cfg, int step) {
    double lr = num(cfg, "lr"), lr_min = num(cfg, "lr_min"), W = num(cfg, "warmup"), S = num(cfg, "decay_steps");
    if (step <= W) return lr * step / W;
    double p = fmin(1.0, (step - W) / (S - W));
    return lr_min + (lr - lr_min) * 0.5 * (1 + cos(M_PI * p));
}

// 1000 steps of a shape with no spike, and every step's logged rate the schedule's.
static void check_recipe(const char *name, const JsonValue **steps, int n, const JsonValue *cfg) {
    int at;
    double jump = worst_jump(steps, n, numi(cfg, "warmup"), &at);
    // What the recipe promises: no spike at any step after the warmup.
    EXPECT(jump <= 0.3, "%s: no loss spike: the worst step after the warmup is %.3f nats above the lowest of the "
           "50 before it (step %d; a spike is more than 0.3)", name, jump, at);
    int bad = 0, first_bad = 0;
    for (int i = 0; i < n; i++) {
        int step = numi(steps[i], "step");
        double want = schedule_lr(cfg, step), got = num(steps[i], "lr");
        if (!(fabs(got - want) <= 1e-8 * want)) bad++, first_bad = first_bad ? first_bad : step;
    }
    // The rate of every step is the schedule's (warmup to lr, cosine to lr_min at the end).
    EXPECT(bad == 0, "%s: every step's lr is the schedule's (warmup %.0f, cosine from %g to %g at step %.0f); %d differ, "
           "the first at step %d", name, num(cfg, "warmup"), num(cfg, "lr"), num(cfg, "lr_min"), num(cfg, "decay_steps"),
           bad, first_bad);
    EXPECT(n > 0 && fabs(num(steps[n - 1], "lr") - num(cfg, "lr_min")) <= 1e-8 * num(cfg, "lr"),
           "%s: the last step trains at lr_min (%g)", name, num(cfg, "lr_min"));
}

// ---- the checks -------------------------------------------------------------------------

// A full default run: the loss falls from ln(256) to near the floor.
static void check_default_run(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/default", tmp);
    char *argv[] = {(char *)lab, "--run-dir", dir, NULL};
    int status = run(argv, "default");
    EXPECT(status == 0, "the default run exits 0 (status %d)", status);

    Events ev;
    load_events(dir, &ev);
    EXPECT(ev.bad_lines == 0 && ev.n > 0, "all %d lines of rank-0.jsonl parse and follow the schema%s%s", ev.n,
           ev.bad_lines ? ": " : "", ev.first_problem);
    EXPECT(ev.n > 0 && strcmp(kind(ev.lines[0]), "start") == 0, "the first event is start");
    EXPECT(ev.n > 0 && strcmp(kind(ev.lines[ev.n - 1]), "end") == 0 &&
               strcmp(json_get(ev.lines[ev.n - 1], "status")->string, "ok") == 0,
           "the last event is end with status ok");

    char err[256] = "";
    JsonValue *meta = load_json_file(dir, "meta.json"), *summary = load_json_file(dir, "summary.json");
    EXPECT(meta && runschema_check_meta(meta, err, sizeof err), "meta.json follows the schema %s", err);
    EXPECT(summary && runschema_check_summary(summary, err, sizeof err), "summary.json follows the schema %s", err);

    static const JsonValue *steps[20000];
    int n = step_events(&ev, steps, 20000);
    EXPECT(n == 1000, "1000 step events for the default 1000 steps (got %d)", n);
    if (n < 100 || !summary || ev.n == 0) {
        json_free(meta);
        json_free(summary);
        free_events(&ev);
        return;
    }
    double floor = num(ev.lines[0], "loss_floor");
    check_recipe("the default shape", steps, n, json_get(ev.lines[0], "config"));
    // A freshly initialized model predicts nearly uniformly over 256 bytes: loss ln(256).
    EXPECT_NEAR(num(steps[0], "loss"), log(256.0), 0.02, "the first loss is ln(256) = 5.545 within 0.02");
    // Margin: the default run ends about 0.6 nats above the floor (measured 1.84 over its last
    // 50 steps): the model spends its first 500-700 steps on the symbols' frequencies (a loss
    // of about 2.6) before it finds which two earlier tokens to attend to, and the steps left
    // after that are few. When it gets there varies with the seed (1.68 to 2.07 at step 1000
    // over four seeds); 0.9 allows for that, and still fails for a model that learned only
    // symbol frequencies (~2.6) or nothing.
    double tail = 0;
    for (int i = n - 50; i < n; i++) tail += num(steps[i], "loss");
    tail /= 50;
    EXPECT(tail < floor + 0.9, "mean loss of the last 50 steps %.4f is within 0.9 of the floor %.4f", tail, floor);
    EXPECT(tail > floor - 0.05, "no loss below the floor (%.4f vs %.4f): the floor is a true lower bound", tail, floor);
    EXPECT_NEAR(num(summary, "final_loss"), num(steps[n - 1], "loss"), 1e-9, "summary.json final_loss is the last step's loss");
    EXPECT_NEAR(num(summary, "loss_floor"), floor, 1e-9, "summary.json loss_floor equals the start event's");

    // Memory: the closed forms of labs/01-single/single.c, computed here from the config.
    const JsonValue *cfg = json_get(ev.lines[0], "config");
    double V = 256, T = num(cfg, "seq"), C = num(cfg, "dim"), L = num(cfg, "layers"), NH = num(cfg, "heads");
    double B = num(cfg, "batch") / num(cfg, "accum");
    double psi = 2 * V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
    EXPECT(num(ev.lines[0], "params") == psi, "start event params %.0f = 2VC + TC + L(12C^2+13C) + 2C = %.0f",
           num(ev.lines[0], "params"), psi);
    const JsonValue *mem = json_get(steps[n - 1], "mem");
    EXPECT(num(mem, "params") == 4 * psi, "params memory is 4 Psi bytes");
    EXPECT(num(mem, "grads") == 4 * psi, "grads memory is 4 Psi bytes");
    EXPECT(num(mem, "optim") == 8 * psi, "optim memory is 8 Psi bytes (AdamW m and v)");
    // Per block and token, naive attention keeps NH T probabilities, flash NH log-sum-exps.
    const JsonValue *attn = json_get(cfg, "attn");
    int flash = attn && attn->type == JSON_STRING && !strcmp(attn->string, "flash");
    double acts = 4 * B * T * (2 * C + 2 + V + L * (16 * C + 4 + (flash ? NH : NH * T)));
    EXPECT(num(mem, "acts") == acts, "acts memory %.0f is 4BT(2C+2+V+L(16C+4+%s)) = %.0f (--attn %s)", num(mem, "acts"),
           flash ? "NH" : "NH T", acts, flash ? "flash" : "naive");
    EXPECT(num(mem, "comm") == 0, "a single rank holds no communication buffers");
    EXPECT(num(mem, "peak") > 16 * psi + acts, "peak memory exceeds the steady total (the backward pass's workspace)");

    // Spans: every layer's forward and backward, and the optimizer, in every step.
    int fwd = 0, bwd = 0, optim = 0;
    for (int i = 0; i < ev.n; i++) {
        if (strcmp(kind(ev.lines[i]), "span") != 0) continue;
        const char *name = json_get(ev.lines[i], "name")->string;
        fwd += strcmp(name, "fwd") == 0;
        bwd += strcmp(name, "bwd") == 0;
        optim += strcmp(name, "optim") == 0;
    }
    EXPECT(fwd == n * (L + 2) && bwd == n * (L + 2) && optim == n,
           "one fwd and one bwd span per layer (L+2 = %.0f) and one optim span per step", L + 2);
    json_free(meta);
    json_free(summary);
    free_events(&ev);
}

// The recipe on a second shape, and the spike detector shown to bite: the default learning
// rate reached by step 40 and held there (what the recipe was before its warmup and decay)
// blows the loss up within 80 steps.
static void check_recipe_shapes(void) {
    static const JsonValue *steps[2000];
    char dir[512];
    snprintf(dir, sizeof dir, "%s/batch16", tmp);
    char *argv[] = {(char *)lab, "--batch", "16", "--replay-every", "0", "--run-dir", dir, NULL};
    int status = run(argv, "batch16");
    Events ev;
    load_events(dir, &ev);
    int n = step_events(&ev, steps, 2000);
    EXPECT(status == 0 && n == 1000, "--batch 16 trains its 1000 steps (status %d, %d steps)", status, n);
    if (n > 0) check_recipe("--batch 16", steps, n, json_get(ev.lines[0], "config"));
    free_events(&ev);

    snprintf(dir, sizeof dir, "%s/spike", tmp);
    char *spiky[] = {(char *)lab, "--steps", "80", "--warmup", "40", "--lr-schedule", "constant", "--run-dir", dir, NULL};
    run(spiky, "spike");
    load_events(dir, &ev);
    n = step_events(&ev, steps, 2000);
    int at = 0;
    double jump = n ? worst_jump(steps, n, 40, &at) : 0;
    // The detector is not blind: the old recipe's spike (8-13 nats) is seen.
    EXPECT(n == 80 && jump > 1, "without the decay and with a short warmup the loss spikes: %.2f nats above the 50 steps "
           "before it at step %d", jump, at);
    free_events(&ev);
}

// Gradient accumulation: 4 micro-batches of B/4 give the same training as one batch of B.
// Each gradient element is summed over the tokens in the same order either way (the
// kernels add row after row into the accumulator), so we expect identical bits, and check
// the loss to 1e-6 and the parameter hash exactly.
static void check_accumulation(void) {
    char d1[512], d4[512];
    snprintf(d1, sizeof d1, "%s/accum1", tmp);
    snprintf(d4, sizeof d4, "%s/accum4", tmp);
    char *a1[] = {(char *)lab, "--steps", "30", "--accum", "1", "--run-dir", d1, NULL};
    char *a4[] = {(char *)lab, "--steps", "30", "--accum", "4", "--run-dir", d4, NULL};
    EXPECT(run(a1, "accum1") == 0 && run(a4, "accum4") == 0, "the two accumulation runs exit 0");
    Events e1, e4;
    load_events(d1, &e1);
    load_events(d4, &e4);
    static const JsonValue *s1[64], *s4[64];
    int n1 = step_events(&e1, s1, 64), n4 = step_events(&e4, s4, 64);
    double worst = 0;
    int same_hash = n1 == 30 && n4 == 30;
    for (int i = 0; i < n1 && i < n4; i++) {
        double d = fabs(num(s1[i], "loss") - num(s4[i], "loss"));
        if (d > worst) worst = d;
        same_hash &= strcmp(json_get(s1[i], "param_hash")->string, json_get(s4[i], "param_hash")->string) == 0;
    }
    EXPECT(n1 == 30 && n4 == 30 && worst <= 1e-6, "accum=4 losses equal accum=1 losses over 30 steps (worst diff %.3g)", worst);
    EXPECT(same_hash, "accum=4 and accum=1 parameters are bitwise equal after every step");
    free_events(&e1);
    free_events(&e4);
}

// --attn flash and --attn naive: the same function computed two ways, so the same training up
// to fp32 rounding (5e-5, the suite's tolerance for "the same math, summed in another order"),
// with flash keeping exactly B T L NH (T-1) floats fewer; and a checkpoint saved under one
// resumes under the other (the weights are the same).
static void check_attention(void) {
    char dn[512], df[512], ds[512], dr[512], ck[600];
    snprintf(dn, sizeof dn, "%s/attn-naive", tmp);
    snprintf(df, sizeof df, "%s/attn-flash", tmp);
    snprintf(ds, sizeof ds, "%s/attn-flash-save", tmp);
    snprintf(dr, sizeof dr, "%s/attn-naive-resumed", tmp);
    snprintf(ck, sizeof ck, "%s/checkpoints", ds);
    char *naive[] = {(char *)lab, "--steps", "30", "--attn", "naive", "--run-dir", dn, NULL};
    char *flash[] = {(char *)lab, "--steps", "30", "--attn", "flash", "--run-dir", df, NULL};
    char *save[] = {(char *)lab, "--steps", "10", "--attn", "flash", "--save-every", "10", "--run-dir", ds, NULL};
    char *resume[] = {(char *)lab, "--steps", "30", "--attn", "naive", "--resume", ck, "--run-dir", dr, NULL};
    EXPECT(run(naive, "attn-naive") == 0 && run(flash, "attn-flash") == 0 && run(save, "attn-save") == 0 &&
               run(resume, "attn-resume") == 0,
           "--attn naive, --attn flash, a flash run saving a checkpoint and a naive run resuming it all exit 0");
    Events en, ef, er;
    load_events(dn, &en);
    load_events(df, &ef);
    load_events(dr, &er);
    static const JsonValue *sn[64], *sf[64], *sr[64];
    int nn = step_events(&en, sn, 64), nf = step_events(&ef, sf, 64), nr = step_events(&er, sr, 64);
    double worst = 0, worst_resumed = 0;
    for (int i = 0; i < nn && i < nf; i++) worst = fmax(worst, fabs(num(sn[i], "loss") - num(sf[i], "loss")));
    for (int i = 0; i < nr && i + 10 < nf; i++)
        worst_resumed = fmax(worst_resumed, fabs(num(sr[i], "loss") - num(sf[i + 10], "loss")));
    EXPECT(nn == 30 && nf == 30 && worst <= 5e-5 && num(sf[29], "loss") < num(sf[0], "loss") - 0.1,
           "--attn flash trains as --attn naive: 30 steps' losses within 5e-5 (worst %.3g), and the loss falls", worst);
    EXPECT(nr == 20 && worst_resumed <= 5e-5 && numi(sr[0], "step") == 11,
           "a flash checkpoint at step 10 resumes under --attn naive: steps 11-30 within 5e-5 of the flash run's "
           "(%d steps, worst %.3g)", nr, worst_resumed);
    // Memory: the same config (B 8, T 64, L 2, NH 4), only the attention's saved tensor differs.
    const JsonValue *cn = json_get(en.lines[0], "config"), *cf = json_get(ef.lines[0], "config");
    const JsonValue *an = json_get(cn, "attn"), *af = json_get(cf, "attn");
    EXPECT(an && af && an->type == JSON_STRING && af->type == JSON_STRING && !strcmp(an->string, "naive") &&
               !strcmp(af->string, "flash"),
           "the start events' config records \"attn\" (naive, flash)");
    double B = num(cf, "batch"), T = num(cf, "seq"), L = num(cf, "layers"), NH = num(cf, "heads");
    double acts_n = num(json_get(sn[nn - 1], "mem"), "acts"), acts_f = num(json_get(sf[nf - 1], "mem"), "acts");
    EXPECT(acts_n - acts_f == 4 * B * T * L * NH * (T - 1),
           "flash holds exactly 4 B T L NH (T-1) = %.0f bytes fewer activations than naive (%.0f vs %.0f)",
           4 * B * T * L * NH * (T - 1), acts_f, acts_n);
    free_events(&en);
    free_events(&ef);
    free_events(&er);
}

// --save writes what --init reads. With lr 0 the weights never change, so the run that
// loads them must hold exactly the same bits: same param_hash, same first loss.
static void check_save_init(void) {
    char d1[512], d2[512], d3[512], w[512], bad_dir[512];
    snprintf(d1, sizeof d1, "%s/save", tmp);
    snprintf(d2, sizeof d2, "%s/init", tmp);
    snprintf(d3, sizeof d3, "%s/init-other-seed", tmp);
    snprintf(w, sizeof w, "%s/w.safetensors", tmp);
    char *save[] = {(char *)lab_san, "--steps", "2", "--lr", "0", "--accum", "2", "--save", w, "--run-dir", d1, NULL};
    char *init[] = {(char *)lab_san, "--steps", "1", "--lr", "0", "--init", w, "--run-dir", d2, NULL};
    char *other[] = {(char *)lab, "--steps", "1", "--lr", "0", "--init", w, "--seed", "99", "--run-dir", d3, NULL};
    int s1 = run(save, "save");
    char *err1 = captured("save", "err");
    EXPECT(s1 == 0 && err1[0] == 0, "the sanitized lab trains 2 steps with --accum 2 and --save, clean under ASan/UBSan%s%.300s",
           err1[0] ? ": " : "", one_line(err1));
    int s2 = run(init, "init");
    char *err2 = captured("init", "err");
    EXPECT(s2 == 0 && err2[0] == 0, "the sanitized lab loads --init cleanly%s%.300s", err2[0] ? ": " : "", one_line(err2));
    EXPECT(run(other, "other") == 0, "--init with another --seed runs");
    Events e1, e2, e3;
    load_events(d1, &e1);
    load_events(d2, &e2);
    load_events(d3, &e3);
    static const JsonValue *a[8], *b[8], *c[8];
    int na = step_events(&e1, a, 8), nb = step_events(&e2, b, 8), nc = step_events(&e3, c, 8);
    EXPECT(na == 2 && nb == 1 && strcmp(json_get(a[1], "param_hash")->string, json_get(b[0], "param_hash")->string) == 0,
           "weights loaded with --init are bit-identical to those saved");
    EXPECT(na == 2 && nb == 1 && num(a[0], "loss") == num(b[0], "loss"), "and give the same loss on the same batch");
    EXPECT(nc == 1 && na == 2 && strcmp(json_get(a[1], "param_hash")->string, json_get(c[0], "param_hash")->string) == 0,
           "--init overrides the seed's initialization");
    free_events(&e1);
    free_events(&e2);
    free_events(&e3);
    free(err1);
    free(err2);

    // A file for another model (--dim 32) is refused with the tensor and shapes named, and the
    // failure is in the run log as an error event and an end event with status error.
    snprintf(bad_dir, sizeof bad_dir, "%s/init-mismatch", tmp);
    char *mismatch[] = {(char *)lab, "--steps", "1", "--dim", "32", "--init", w, "--run-dir", bad_dir, NULL};
    int s = run(mismatch, "mismatch");
    char *err = captured("mismatch", "err");
    EXPECT(s == 1, "--init with weights of another shape exits 1 (status %d)", s);
    EXPECT(strstr(err, "wte") && strstr(err, "[256, 32]") && strstr(err, "[256, 64]"),
           "the message names the tensor and both shapes: %.300s", one_line(err));
    Events em;
    load_events(bad_dir, &em);
    int has_error = 0, end_error = 0;
    for (int i = 0; i < em.n; i++) {
        has_error |= strcmp(kind(em.lines[i]), "error") == 0;
        end_error |= strcmp(kind(em.lines[i]), "end") == 0 && strcmp(json_get(em.lines[i], "status")->string, "error") == 0;
    }
    EXPECT(em.bad_lines == 0 && has_error && end_error, "the run log records an error event and end status error");
    free_events(&em);

    // One bit flipped in the weights' data (the last float of the head): the checksum that
    // --save wrote into the file's metadata refuses it. (The format has none of its own: this
    // loaded as a wrong weight before.)
    char flipped[600], flip_dir[600];
    snprintf(flipped, sizeof flipped, "%s/w-flipped.safetensors", tmp);
    snprintf(flip_dir, sizeof flip_dir, "%s/init-flipped", tmp);
    size_t wlen;
    char *wbytes = read_file(w, &wlen);
    if (wbytes && wlen > 8) wbytes[wlen - 2] ^= 0x04;
    FILE *wf = fopen(flipped, "wb");
    if (wf && wbytes) fwrite(wbytes, 1, wlen, wf);
    if (wf) fclose(wf);
    free(wbytes);
    char *init_flipped[] = {(char *)lab, "--steps", "1", "--init", flipped, "--run-dir", flip_dir, NULL};
    int sf = run(init_flipped, "init-flipped");
    char *errf = captured("init-flipped", "err");
    EXPECT(sf == 1 && strstr(errf, "w-flipped.safetensors") && strstr(errf, "damaged"),
           "--init of a file with one bit flipped in its data exits 1 naming the file and the damage (status %d): %.300s",
           sf, one_line(errf));
    free(errf);
    free(err);
}

// File data: any file's bytes; no loss floor is known.
static void check_file_data(void) {
    char data[512], dir[512];
    snprintf(data, sizeof data, "%s/text.txt", tmp);
    snprintf(dir, sizeof dir, "%s/filedata", tmp);
    FILE *f = fopen(data, "w");
    for (int i = 0; i < 400; i++) fprintf(f, "the quick brown fox %d jumps over the lazy dog.\n", i % 7);
    fclose(f);
    char *argv[] = {(char *)lab, "--steps", "40", "--data", data, "--run-dir", dir, NULL};
    EXPECT(run(argv, "filedata") == 0, "training on a text file with --data runs");
    Events ev;
    load_events(dir, &ev);
    static const JsonValue *s[64];
    int n = step_events(&ev, s, 64);
    const JsonValue *floor = ev.n > 0 ? json_get(ev.lines[0], "loss_floor") : NULL;
    EXPECT(floor && floor->type == JSON_NULL, "file data has loss_floor null in the start event");
    // (Still inside the 100-step warmup: 5.53 -> 3.06 here; 20 steps only reach 4.55.)
    EXPECT(n == 40 && num(s[39], "loss") < num(s[0], "loss") - 1.0, "the loss on the text falls by more than 1 nat in 40 steps");
    free_events(&ev);
}

// Bad arguments: exit 2, exactly one line on stderr, and no run directory.
static void check_bad_arguments(void) {
    char missing[512], fifo[512];
    snprintf(missing, sizeof missing, "%s/no-such-file", tmp);
    // A FIFO as --data would be waited on for ever (no writer comes), a directory read as
    // nothing: both are refused before the run starts.
    snprintf(fifo, sizeof fifo, "%s/data-fifo", tmp);
    if (mkfifo(fifo, 0644) != 0) printf("# mkfifo %s failed\n", fifo);
    struct {
        const char *why;
        char *args[6];
        const char *mentions;
    } cases[] = {
        {"negative steps", {"--steps", "-5"}, "--steps"},
        {"steps not a number", {"--steps", "abc"}, "--steps"},
        {"accum does not divide batch", {"--batch", "6", "--accum", "4"}, "--accum"},
        {"heads do not divide dim", {"--heads", "3"}, "--heads"},
        {"unknown option", {"--bogus"}, "--bogus"},
        {"missing value", {"--steps"}, "--steps"},
        {"missing data file", {"--data", missing}, "no-such-file"},
        {"missing init file", {"--init", missing}, "no-such-file"},
        {"a FIFO as the data", {"--data", fifo}, "not a regular file"},
        {"a directory as the weights", {"--init", tmp}, "not a regular file"},
        {"stray argument", {"ddp"}, "ddp"},
        {"unknown device", {"--device", "gpu"}, "--device"},
        {"unknown attention", {"--attn", "foo"}, "--attn must be flash or naive"},
        {"tf32 on the CPU", {"--device", "cpu", "--tf32"}, "--tf32"},
        {"a value for a flag", {"--tf32=1"}, "--tf32 takes no value"},
        {"lr out of range", {"--lr", "-1"}, "--lr"},
        {"negative warmup", {"--warmup", "-1"}, "--warmup"},
        {"warmup not a number", {"--warmup", "ten"}, "--warmup"},
        {"lr-min above lr", {"--lr", "1e-3", "--lr-min", "2e-3"}, "--lr-min"},
        {"negative lr-min", {"--lr-min", "-0.1"}, "--lr-min"},
        {"lr-min not a number", {"--lr-min", "nan"}, "--lr-min"},
        {"unknown schedule", {"--lr-schedule", "linear"}, "--lr-schedule"},
        {"warmup longer than the decay", {"--decay-steps", "50", "--warmup", "60"}, "--decay-steps"},
        {"negative replay-every", {"--replay-every", "-3"}, "--replay-every"},
        {"more experts per token than experts", {"--moe", "4", "--topk", "5"}, "--topk 5"},
        {"too many experts", {"--moe", "65"}, "--moe"},
        {"a negative capacity", {"--moe", "4", "--capacity", "-1"}, "--capacity"},
        {"experts in bf16", {"--moe", "4", "--mixed"}, "--mixed"},
        {"experts on a GPU", {"--moe", "4", "--device", "cuda"}, "--device cpu"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[8] = {(char *)lab};
        int k = 1;
        for (int j = 0; cases[i].args[j]; j++) argv[k++] = cases[i].args[j];
        argv[k] = NULL;
        int status = run(argv, "bad");
        char *err = captured("bad", "err");
        int lines = 0;
        for (char *p = err; *p; p++) lines += *p == '\n';
        EXPECT(status == 2 && lines == 1 && strstr(err, cases[i].mentions),
               "%s: exit 2 and one line naming %s (status %d, %d lines: %.160s)", cases[i].why, cases[i].mentions,
               status, lines, one_line(err));
        free(err);
    }
    // --device cuda: on a machine without a usable GPU, exit 2 and one line saying why (the
    // reason comes from the CUDA runtime, or says the build has none); with one, it runs.
    char dir[512];
    snprintf(dir, sizeof dir, "%s/cuda", tmp);
    char *cuda[] = {(char *)lab, "--device", "cuda", "--steps", "1", "--run-dir", dir, NULL};
    int cuda_status = run(cuda, "cuda");
    char *cuda_err = captured("cuda", "err"), events[600];
    snprintf(events, sizeof events, "%s/rank-0.jsonl", dir);
    char *cuda_log = read_file(events, NULL);
    // (the start event's own "device", not the config's echo of the option)
    int ran_on_gpu = cuda_status == 0 && cuda_log && strstr(cuda_log, "\"lab\":\"single\",\"device\":\"cuda\"");
    EXPECT((cuda_status == 2 && strstr(cuda_err, "--device cuda: no usable GPU (") && strstr(cuda_err, "use --device cpu")) ||
               ran_on_gpu,
           "--device cuda: runs on the GPU, or without one exits 2 with the reason and the way out (status %d: %s)",
           cuda_status, one_line(cuda_err));
    free(cuda_log);
    free(cuda_err);
    char *help[] = {(char *)lab, "--help", NULL};
    int status = run(help, "help");
    char *out = captured("help", "out");
    EXPECT(status == 0 && strstr(out, "--accum") && strstr(out, "default: 1000"), "--help lists the options with defaults and exits 0");
    free(out);
}

// --moe: the experts' parameters and activations by their closed forms (gpt.h, moe.h), every
// step's routing statistics consistent with each other, and a capacity dropping exactly the
// assignments beyond it. Sanitized: the layer's loops run under ASan/UBSan.
static void check_experts(void) {
    struct {
        const char *name, *capacity;
        int E, K, H;
    } runs[] = {{"moe-dropless", "0", 4, 2, 96}, {"moe-capacity", "1", 4, 1, 64}};
    for (int r = 0; r < 2; r++) {
        char dir[512], e[8], k[8], h[8];
        snprintf(dir, sizeof dir, "%s/%s", tmp, runs[r].name);
        snprintf(e, sizeof e, "%d", runs[r].E), snprintf(k, sizeof k, "%d", runs[r].K), snprintf(h, sizeof h, "%d", runs[r].H);
        char *argv[] = {(char *)lab_san, "--steps", "6", "--moe", e, "--topk", k, "--expert-dim", h,
                        "--capacity", (char *)runs[r].capacity, "--run-dir", dir, NULL};
        int status = run(argv, runs[r].name);
        EXPECT(status == 0, "%s: the sanitized lab exits 0 (status %d)", runs[r].name, status);
        Events ev;
        load_events(dir, &ev);
        EXPECT(ev.bad_lines == 0 && ev.n > 0, "%s: every event follows the schema%s%s", runs[r].name,
               ev.bad_lines ? ": " : "", ev.first_problem);
        static const JsonValue *steps[16];
        int n = step_events(&ev, steps, 16);
        if (n != 6) {
            EXPECT(0, "%s: 6 step events (got %d)", runs[r].name, n);
            free_events(&ev);
            continue;
        }
        const JsonValue *cfg = json_get(ev.lines[0], "config");
        double V = 256, T = num(cfg, "seq"), C = num(cfg, "dim"), L = num(cfg, "layers"), NH = num(cfg, "heads");
        double B = num(cfg, "batch"), E = runs[r].E, K = runs[r].K, H = runs[r].H;
        EXPECT(num(cfg, "moe") == E && num(cfg, "topk") == K && num(cfg, "expert_dim") == H,
               "%s: the config records --moe, --topk and --expert-dim", runs[r].name);
        double psi = 2 * V * C + T * C + L * (4 * C * C + 8 * C + E * C + E * (2 * H * C + H + C)) + 2 * C;
        EXPECT(num(ev.lines[0], "params") == psi, "%s: params %.0f = 2VC + TC + L(4C^2 + 8C + EC + E(2HC + H + C)) + 2C = %.0f",
               runs[r].name, num(ev.lines[0], "params"), psi);
        const JsonValue *mem = json_get(steps[n - 1], "mem");
        double acts = 4 * B * T * (2 * C + 2 + V + L * (8 * C + 4 + NH + E + 4 * K + 2 * K * (C + H)));
        EXPECT(num(mem, "params") == 4 * psi && num(mem, "optim") == 8 * psi && num(mem, "acts") == acts,
               "%s: 4 Psi, 8 Psi and acts %.0f = 4BT(2C+2+V+L(8C+4+NH+E+4K+2K(C+H))) = %.0f", runs[r].name,
               num(mem, "acts"), acts);
        // The capacity of a pass of B T tokens (moe.h): ceil(F N K / E), or N dropless.
        double N = B * T, F = atof(runs[r].capacity), cap = F > 0 ? fmin(N, ceil(F * N * K / E)) : N;
        int consistent = 1, drops = 0;
        double worst_aux = 0;
        for (int i = 0; i < n; i++) {
            const JsonValue *load = json_get(steps[i], "expert_load");
            double dropped = 0, total = 0;
            for (int l = 0; load && l < (int)L; l++) {
                const JsonValue *row = json_at(load, (size_t)l);
                double sum = 0;
                for (int x = 0; row && x < (int)E; x++) {
                    double got = json_at(row, (size_t)x)->number;
                    sum += got, dropped += fmax(0, got - cap);
                }
                consistent &= sum == N * K;
                total += sum;
            }
            consistent &= load && num(steps[i], "assignments") == total && num(steps[i], "dropped") == dropped;
            drops += dropped > 0;
            worst_aux = fmax(worst_aux, fabs(num(steps[i], "aux_loss") - 1));
        }
        EXPECT(consistent, "%s: every step's load adds up to B T K a block, and the dropped are those beyond the "
               "capacity %.0f", runs[r].name, cap);
        EXPECT(F > 0 ? drops > 0 : drops == 0, "%s: %s (%d of %d steps dropped some)", runs[r].name,
               F > 0 ? "the capacity drops assignments" : "nothing is dropped", drops, n);
        EXPECT(worst_aux < 0.5, "%s: the aux loss stays near 1 at the start, the balanced value (worst %.3f away)",
               runs[r].name, worst_aux);
        EXPECT(fabs(num(steps[0], "loss") - log(256.0)) < 0.05, "%s: the first loss is ln(256) (%.4f)", runs[r].name,
               num(steps[0], "loss"));
        free_events(&ev);
    }
}

// SHARDLAB_PROFILE_STEP (lab.h): a step number brackets that step with a profiler's capture,
// which on the CPU does nothing (the same run: every step's param_hash); anything else stops
// the lab before it writes a run, naming the variable.
static void check_profile_step(void) {
    char plain_dir[512], profiled_dir[512], bad_dir[512];
    snprintf(plain_dir, sizeof plain_dir, "%s/profile-plain", tmp);
    snprintf(profiled_dir, sizeof profiled_dir, "%s/profile-2", tmp);
    snprintf(bad_dir, sizeof bad_dir, "%s/profile-bad", tmp);
    char *plain[] = {(char *)lab, "--steps", "3", "--run-dir", plain_dir, NULL};
    char *profiled[] = {(char *)lab, "--steps", "3", "--run-dir", profiled_dir, NULL};
    char *env_step[] = {"SHARDLAB_PROFILE_STEP=2", NULL};
    int st_plain = run(plain, "profile-plain"), st_profiled = run_env(profiled, "profile-2", env_step);
    Events a, b;
    load_events(plain_dir, &a);
    load_events(profiled_dir, &b);
    const JsonValue *sa[8], *sb[8];
    int na = step_events(&a, sa, 8), nb = step_events(&b, sb, 8), same = na == 3 && nb == 3;
    for (int i = 0; same && i < 3; i++)
        same = strcmp(json_get(sa[i], "param_hash")->string, json_get(sb[i], "param_hash")->string) == 0;
    EXPECT(st_plain == 0 && st_profiled == 0 && same,
           "SHARDLAB_PROFILE_STEP=2 on the CPU: the run is the run without it (exit %d and %d, %d and %d steps, same "
           "param_hash: %d)", st_plain, st_profiled, na, nb, same);
    free_events(&a);
    free_events(&b);
    const char *bad[] = {"SHARDLAB_PROFILE_STEP=two", "SHARDLAB_PROFILE_STEP=0", "SHARDLAB_PROFILE_STEP=-3",
                         "SHARDLAB_PROFILE_STEP=4x"};
    for (int i = 0; i < 4; i++) {
        char *args[] = {(char *)lab, "--steps", "2", "--run-dir", bad_dir, NULL};
        char *env[] = {(char *)bad[i], NULL};
        int st = run_env(args, "profile-bad", env);
        char *err = captured("profile-bad", "err");
        struct stat sbuf;
        EXPECT(st != 0 && strstr(err, "SHARDLAB_PROFILE_STEP=") && strstr(err, "is not a step number") &&
                   stat(bad_dir, &sbuf) != 0,
               "%s: the lab stops before writing a run, naming the variable (exit %d: %s)", bad[i], st, one_line(err));
        free(err);
    }
}

// Start argv as run() does, under an address-space limit of `gib` GiB and with env (NULL or
// "NAME=value") added: a lab that allocates more than the test machine has then fails its
// allocation instead of bringing the machine down (the optimized binaries only: the
// sanitizers reserve terabytes of address space).
static pid_t spawn_limited(char *const argv[], const char *tag, const char *env, int gib) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit lim = {.rlim_cur = (rlim_t)gib << 30, .rlim_max = (rlim_t)gib << 30};
        setrlimit(RLIMIT_AS, &lim);
        if (env) putenv((char *)env);
        char out[512], err[512];
        snprintf(out, sizeof out, "%s/%s.out", tmp, tag);
        snprintf(err, sizeof err, "%s/%s.err", tmp, tag);
        int fo = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fo, 1);
        dup2(fe, 2);
        execv(argv[0], argv);
        _exit(127);
    }
    return pid;
}

// A model inside the options' bounds that no machine here can hold (--dim 16384 --layers 256:
// 3.3 TB of weights before a gradient) is refused before anything is allocated: exit 2
// within seconds, one line with the memory it needs, the memory there is, and what to
// change; no run directory. Through the launcher too, at 2 ranks of ddp: its exit 2 and the
// rank's line, no process and no shared memory left.
static void check_too_big(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/too-big", tmp);
    char *argv[] = {(char *)lab, "--dim", "16384", "--layers", "256", "--steps", "1", "--run-dir", dir, NULL};
    double t0 = now_s();
    int status = wait_status(spawn_limited(argv, "too-big", NULL, 8));
    double took = now_s() - t0;
    char *err = captured("too-big", "err");
    EXPECT(status == 2 && count_lines(err) == 1 && strstr(err, "needs") && strstr(err, "GiB") &&
               strstr(err, "available") && strstr(err, "--dim") && strstr(err, "sharding lab") && took < 10,
           "--dim 16384 --layers 256: refused in %.1f s with exit 2 and one line: the memory needed, the memory "
           "available, the options to lower (status %d: %s)", took, status, one_line(err));
    EXPECT(access(dir, F_OK) != 0, "--dim 16384 --layers 256: no run directory is made for a run that cannot start");
    free(err);

    // The launcher: build/shardlab beside build/labs/.
    char copy[512], labs[512], shardlab[600], runs[512];
    snprintf(copy, sizeof copy, "%s", lab);
    snprintf(labs, sizeof labs, "%s", dirname(copy));
    snprintf(shardlab, sizeof shardlab, "%s/../shardlab", labs);
    snprintf(runs, sizeof runs, "%s/too-big-runs", tmp);
    setenv("SHARDLAB_LABS", labs, 1);
    setenv("SHARDLAB_RUNS", runs, 1);
    char *launch[] = {shardlab, "run", "ddp", "-n", "2", "--ui", "none", "--dim", "16384", "--layers", "256",
                      "--steps", "1", NULL};
    t0 = now_s();
    pid_t pid = spawn_limited(launch, "too-big-launch", NULL, 8);
    status = wait_status(pid);
    took = now_s() - t0;
    unsetenv("SHARDLAB_LABS");
    unsetenv("SHARDLAB_RUNS");
    err = captured("too-big-launch", "err");
    char prefix[64];
    int n = snprintf(prefix, sizeof prefix, "shardlab-%d-", (int)pid), segs = 0;
    DIR *d = opendir("/dev/shm");
    for (struct dirent *e; d && (e = readdir(d));) segs += strncmp(e->d_name, prefix, (size_t)n) == 0;
    if (d) closedir(d);
    EXPECT(status == 2 && strstr(err, "needs") && strstr(err, "available") && took < 10 && segs == 0,
           "shardlab run ddp -n 2 --dim 16384 --layers 256: exit 2 in %.1f s with the rank's line, no shared memory "
           "left (status %d, %d segments: %s)", took, status, segs, one_line(err));
    free(err);

    // The kernels count a tensor's elements with int: a micro-batch whose attention matrix
    // holds 2^32 of them (1 x 256 heads x 4096^2) is refused even where the memory is there,
    // and one sequence less in the heads is not.
    TrainArgs a;
    train_args_defaults(&a);
    a.batch = 1, a.seq = 4096, a.dim = 256, a.heads = 256, a.layers = 1, a.attn = "naive";
    MemNeed need = memfit_need("single", &a, 1, 0, NULL, 1);
    char why[768] = "";
    int refused = memfit_check(&need, 1, 1e18, "host memory", "a test's figure", why, sizeof why) != 0;
    a.heads = 64;
    MemNeed fewer = memfit_need("single", &a, 1, 0, NULL, 1);
    char why2[768] = "";
    int fits = memfit_check(&fewer, 1, 1e18, "host memory", "a test's figure", why2, sizeof why2) == 0;
    EXPECT(refused && strstr(why, "attention matrix") && strstr(why, "2147483647") && fits,
           "--seq 4096 --heads 256: the 2^32-element attention matrix is refused with 1 EB free, --heads 64 is not "
           "(%s | %s)", why, why2);
}

// Ctrl-C in the middle of a run: the lab stops at a step boundary, exits 128+SIGINT, and its
// run log ends with an error event and an end event with status error, so no reader takes it
// for a run still going.
static void check_interrupt(void) {
    char dir[512], out[512];
    snprintf(dir, sizeof dir, "%s/interrupted", tmp);
    snprintf(out, sizeof out, "%s/interrupted.out", tmp);
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fd, 2);
        execl(lab, lab, "--steps", "100000", "--run-dir", dir, (char *)NULL);
        _exit(127);
    }
    // Wait until it has logged a few steps, then interrupt it.
    char path[600];
    snprintf(path, sizeof path, "%s/rank-0.jsonl", dir);
    for (int i = 0; i < 200; i++) {
        char *text = read_file(path, NULL);
        int steps = 0;
        for (char *p = text; p && (p = strstr(p, "\"ev\":\"step\"")); p++) steps++;
        free(text);
        if (steps >= 3) break;
        nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
    }
    kill(pid, SIGINT);
    int status;
    waitpid(pid, &status, 0);
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    EXPECT(code == 128 + SIGINT, "SIGINT ends the lab with exit status 130 (got %d)", code);
    Events ev;
    load_events(dir, &ev);
    int n = ev.n;
    EXPECT(ev.bad_lines == 0 && n >= 2 && strcmp(kind(ev.lines[n - 2]), "error") == 0 &&
               strstr(json_get(ev.lines[n - 2], "msg")->string, "interrupted") &&
               strcmp(kind(ev.lines[n - 1]), "end") == 0 && strcmp(json_get(ev.lines[n - 1], "status")->string, "error") == 0,
           "the interrupted run's log ends with an 'interrupted' error event and end status error");
    free_events(&ev);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_single OPTIMIZED_SINGLE SANITIZED_SINGLE\n");
        return 2;
    }
    lab = argv[1];
    lab_san = argv[2];
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-single-XXXXXX");
    if (!mkdtemp(tmp)) {
        perror("mkdtemp");
        return 1;
    }
    check_bad_arguments();
    check_experts();
    check_profile_step();
    check_too_big();
    check_recipe_shapes();
    check_accumulation();
    check_attention();
    check_save_init();
    check_file_data();
    check_interrupt();
    check_default_run();
    int rc = test_done();
    if (rc == 0) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
        if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    } else {
        printf("# run directories kept in %s\n", tmp);
    }
    return rc;
}
