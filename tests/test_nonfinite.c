// test_nonfinite.c — a run whose numbers stop being numbers: NaN in the log, the lab stopping,
// and every reader (the run-log reader, the dashboard, the grader) saying so instead of failing.
//
// Usage: test_nonfinite LABS SAN_LABS SHARDLAB   (optimized labs, sanitized labs, the
//                                                sanitized shardlab)
//
// The NaN comes from the weights: a file saved by --save with one LayerNorm weight set to NaN,
// loaded with --init. That is a real way to get one (a student's kernel that writes NaN into
// the weights does the same), and it makes the very first loss NaN on every rank.
//   - single: the step is written with "loss":"NaN" and "grad_norm":"NaN" (valid JSON, the
//     schema's spelling), then an error event names the step and the quantity with a hint,
//     the end event says error, the exit status is 1, and the message reaches stderr once;
//   - ddp on 2 ranks through the launcher: both ranks stop at step 1 the same way, exit 1;
//   - the run-log reader reads every line (none skipped as malformed) and keeps the NaN;
//   - the dashboard (shardlab tui --dump) draws the run and its failure banner;
//   - the grader grades it: run.complete says where the training diverged, loss.reference and
//     grads.reference fail naming step 1 and the quantity, never a JSON error.
#include <stdint.h>

#include "command/runs/runread.h"
#include "labtest.h"
#include "test.h"

static const char *labs_dir, *san_labs, *shardlab;

// Sets the first float of tensor `name` in a safetensors file to NaN, its data checksum
// refreshed. 0 on success.
static int poison(const char *path, const char *name) {
    size_t len;
    char *bytes = read_file(path, &len);
    if (!bytes || len < 8) return free(bytes), -1;
    uint64_t header = 0;
    for (int i = 7; i >= 0; i--) header = header << 8 | (unsigned char)bytes[i];
    char err[128];
    JsonValue *h = header <= len - 8 ? json_parse(bytes + 8, (size_t)header, err, sizeof err) : NULL;
    const JsonValue *offsets = json_get(json_get(h, name), "data_offsets");
    int rc = -1;
    if (offsets && json_at(offsets, 0)) {
        size_t at = 8 + (size_t)header + (size_t)json_at(offsets, 0)->number;
        float nan_value = NAN;
        memcpy(bytes + at, &nan_value, sizeof nan_value);
        // The data's checksum --save wrote (data_fnv1a64) made to match: the file is a real one
        // with a NaN in it, not a damaged one.
        char *sum = strstr(bytes + 8, "\"data_fnv1a64\":\"");
        if (sum && sum < bytes + 8 + header) {
            uint64_t fnv = 0xcbf29ce484222325ull;
            for (size_t i = 8 + (size_t)header; i < len; i++) fnv = (fnv ^ (unsigned char)bytes[i]) * 0x100000001b3ull;
            char hex[17];
            snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv);
            memcpy(sum + strlen("\"data_fnv1a64\":\""), hex, 16);
        }
        FILE *f = fopen(path, "wb");
        rc = f && fwrite(bytes, 1, len, f) == len ? 0 : -1;
        if (f) fclose(f);
    }
    json_free(h);
    free(bytes);
    return rc;
}

// The error and end events of one rank's log, and its step-1 event.
typedef struct {
    const JsonValue *step1, *error, *end;
} Ending;
static Ending ending(const Events *ev) {
    Ending e = {0};
    for (int i = 0; i < ev->n; i++) {
        const char *k = kind(ev->lines[i]);
        if (!strcmp(k, "step") && num(ev->lines[i], "step") == 1) e.step1 = ev->lines[i];
        if (!strcmp(k, "error") && !e.error) e.error = ev->lines[i];
        if (!strcmp(k, "end")) e.end = ev->lines[i];
    }
    return e;
}

static const char *str(const JsonValue *v, const char *key) {
    const JsonValue *x = json_get(v, key);
    return x && x->type == JSON_STRING ? x->string : "";
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: test_nonfinite LABS SAN_LABS SHARDLAB\n");
        return 2;
    }
    labs_dir = argv[1], san_labs = argv[2], shardlab = argv[3];
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-nonfinite-XXXXXX");
    if (!mkdtemp(tmp)) return perror("mkdtemp"), 1;

    // ---- weights with a NaN in them ----------------------------------------------------------
    char single[600], single_san[600], weights[600], dir[600];
    snprintf(single, sizeof single, "%s/single", labs_dir);
    snprintf(single_san, sizeof single_san, "%s/single", san_labs);
    snprintf(weights, sizeof weights, "%s/nan.safetensors", tmp);
    snprintf(dir, sizeof dir, "%s/save", tmp);
    char *save[] = {single, "--steps", "1", "--save", weights, "--run-dir", dir, NULL};
    int status = run(save, "save");
    EXPECT(status == 0 && poison(weights, "h.0.ln_1.weight") == 0,
           "weights saved with --save, one LayerNorm weight set to NaN (status %d)", status);

    // ---- single: the step written, then the lab stops --------------------------------------
    snprintf(dir, sizeof dir, "%s/single-nan", tmp);
    char *nan_run[] = {single_san, "--steps", "5", "--init", weights, "--run-dir", dir, NULL};
    status = run(nan_run, "single-nan");
    char *err = captured("single-nan", "err");
    // The lab stops with exit 1, saying where and what, once.
    EXPECT(status == 1 && strstr(err, "step 1: the loss is NaN") && strstr(err, "HINT:"),
           "single stops at step 1 with exit 1 and a hint (status %d: %s)", status, one_line(err));
    const char *first = strstr(err, "the loss is NaN");
    EXPECT(first && !strstr(first + 1, "the loss is NaN"), "the message is printed once");
    EXPECT(!strstr(err, "AddressSanitizer") && !strstr(err, "runtime error"), "the sanitized lab runs clean");
    free(err);
    Events ev;
    load_events(dir, &ev);
    // Every line is JSON and an event of the schema: NaN is written as the string "NaN".
    EXPECT(ev.bad_lines == 0 && ev.n >= 3, "every line of the log parses and follows the schema (%d lines%s%s)", ev.n,
           ev.bad_lines ? ": " : "", ev.first_problem);
    Ending e = ending(&ev);
    EXPECT(e.step1 && !strcmp(str(e.step1, "loss"), "NaN") && !strcmp(str(e.step1, "grad_norm"), "NaN"),
           "step 1 is logged with \"loss\":\"NaN\" and \"grad_norm\":\"NaN\"");
    double x = 0;
    EXPECT(e.step1 && json_number(json_get(e.step1, "loss"), &x) && isnan(x), "json_number() reads the loss back as NaN");
    EXPECT(e.error && strstr(str(e.error, "msg"), "step 1") && strstr(str(e.error, "msg"), "the loss is NaN") &&
               strstr(str(e.error, "msg"), "starting weights"),
           "an error event names the step, the quantity and where to look: before any update, the starting weights "
           "(%s)", e.error ? str(e.error, "msg") : "none");
    EXPECT(e.end && !strcmp(str(e.end, "status"), "error") && num(e.end, "steps") == 1,
           "the end event says error after 1 step");
    free_events(&ev);

    // ---- a run that blows up later: the learning rate ------------------------------------------
    char later[600];
    snprintf(later, sizeof later, "%s/single-lr", tmp);
    char *blowup[] = {single_san, "--steps", "60", "--lr", "10", "--weight-decay", "10", "--warmup", "0", "--lr-schedule",
                      "constant", "--run-dir", later, NULL};
    status = run(blowup, "single-lr");
    load_events(later, &ev);
    e = ending(&ev);
    const JsonValue *last = NULL;
    for (int i = 0; i < ev.n; i++)
        if (!strcmp(kind(ev.lines[i]), "step")) last = ev.lines[i];
    // Weight decay of 100x a step makes the weights infinite within a few steps: the lab writes
    // that step, then stops naming it, with the hint to lower the learning rate.
    EXPECT(status == 1 && ev.bad_lines == 0 && last &&
               (json_get(last, "loss")->type == JSON_STRING || json_get(last, "grad_norm")->type == JSON_STRING) && e.error &&
               strstr(str(e.error, "msg"), "training diverged; lower --lr") && e.end &&
               num(e.end, "steps") == num(last, "step"),
           "--lr 10 --weight-decay 10: the lab stops at the first non-finite step (%.0f), valid JSON, hint lower --lr "
           "(%s)", last ? num(last, "step") : -1, e.error ? str(e.error, "msg") : "no error event");
    free_events(&ev);

    // ---- the run-log reader and the dashboard read it ------------------------------------------
    RunView v;
    runview_init(&v);
    char why[256] = "";
    int opened = runview_open(&v, dir, why, sizeof why) == 0;
    if (opened) runview_poll(&v, 0);
    // The reader takes the NaN step as a step (not a malformed line) and keeps its NaN loss.
    EXPECT(opened && v.malformed == 0 && v.nloss == 1 && isnan(v.loss[0].loss),
           "the run-log reader reads every line, with step 1's loss NaN (%s%s; %ld malformed, %zu points)", why, v.problem,
           v.malformed, v.nloss);
    runview_free(&v);
    char *tui[] = {(char *)shardlab, "tui", dir, "--dump", NULL};
    status = run(tui, "tui");
    char *frame = captured("tui", "out");
    err = captured("tui", "err");
    EXPECT(status == 0 && strstr(frame, "rank 0 failed: step 1: the loss is NaN") && !strstr(err, "runtime error") &&
               !strstr(err, "AddressSanitizer"),
           "shardlab tui --dump draws the run with its failure banner (status %d: %s)", status, one_line(err));
    free(frame);
    free(err);

    // ---- ddp on two ranks: both stop, the launcher says so ----------------------------------
    snprintf(dir, sizeof dir, "%s/ddp-nan", tmp);
    char env_labs[700];
    snprintf(env_labs, sizeof env_labs, "SHARDLAB_LABS=%s", labs_dir);
    char *env[] = {env_labs, NULL};
    char *ddp[] = {(char *)shardlab, "run", "ddp", "-n", "2", "--ui", "none", "--steps", "5", "--init", weights, "--run-dir",
                   dir, NULL};
    status = run_env(ddp, "ddp-nan", env);
    EXPECT(status == 1, "shardlab run ddp -n 2 exits 1 (status %d)", status);
    int both = 1;
    for (int r = 0; r < 2; r++) {
        load_rank_events(dir, r, &ev);
        e = ending(&ev);
        both &= ev.bad_lines == 0 && e.step1 && !strcmp(str(e.step1, "loss"), "NaN") && e.error &&
                strstr(str(e.error, "msg"), "step 1: the loss is NaN") != NULL;
        free_events(&ev);
    }
    // Every rank's log is valid JSON, logs the NaN step, and says why it stopped.
    EXPECT(both, "both ranks log step 1's NaN and stop with the error");

    // ---- the grader: a diverged run is graded, not a JSON error -------------------------------
    char *grade[] = {(char *)shardlab, "grade", dir, "--quiet", NULL};
    status = run(grade, "grade");
    JsonValue *g = load_json_file(dir, "grade.json");
    const JsonValue *checks = json_get(g, "checks");
    const JsonValue *complete = NULL, *loss = NULL, *grads = NULL;
    for (size_t i = 0; checks && i < checks->count; i++) {
        const char *name = str(json_at(checks, i), "name");
        if (!strcmp(name, "run.complete")) complete = json_at(checks, i);
        if (!strcmp(name, "loss.reference")) loss = json_at(checks, i);
        if (!strcmp(name, "grads.reference")) grads = json_at(checks, i);
    }
    EXPECT(status == 1 && g, "shardlab grade exits 1 and writes grade.json (status %d)", status);
    // run.complete: the logs are whole; it says the lab stopped where the training diverged.
    EXPECT(complete && !strcmp(str(complete, "result"), "PASS") && strstr(str(complete, "measured"), "diverged") &&
               strstr(str(complete, "measured"), "loss is NaN at step 1"),
           "run.complete names the divergence: %s", complete ? str(complete, "measured") : "missing");
    // The checks concerned fail, naming the step and the quantity.
    EXPECT(loss && !strcmp(str(loss, "result"), "FAIL") && strstr(str(loss, "measured"), "loss is NaN at step 1"),
           "loss.reference fails naming step 1's NaN loss: %s", loss ? str(loss, "measured") : "missing");
    EXPECT(grads && !strcmp(str(grads, "result"), "FAIL") && strstr(str(grads, "measured"), "at step 1"),
           "grads.reference fails naming step 1: %s", grads ? str(grads, "measured") : "missing");
    json_free(g);

    tmp_finish(test_failed);
    return test_done();
}
