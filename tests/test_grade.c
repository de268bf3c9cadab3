// test_grade.c — `shardlab grade` on real runs: full marks for the reference labs, and every
// check shown failing, alone, on a run edited to break exactly what it checks; runs cut short,
// missing files, nonsense and random damage give a FAIL with a reason, never a crash.
//
// Usage: test_grade SHARDLAB LABS_DIR [FAST_SHARDLAB]   (the sanitized shardlab, the optimized
//                                                      labs, the optimized shardlab)
//
// The grader's references (the single-rank run it starts) run the lab programs next to the
// shardlab it is given (build/san/labs for build/san/shardlab): sanitized, so the grader's
// own start-up of runs is checked too.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "labtest.h"
#include "test.h"

static const char *shardlab, *labs_dir, *fast_shardlab;
static int grade_within(const char *tag, int fast, double limit_s, const char *a1, const char *a2, const char *a3,
                        const char *a4);

// Runs `shardlab grade args...`; stdout and stderr go to tmp/<tag>.{out,err}.
static int grade(const char *tag, const char *a1, const char *a2, const char *a3, const char *a4) {
    char *argv[] = {(char *)shardlab, "grade", (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL};
    return run(argv, tag);
}

// The same with the optimized shardlab, whose references run the optimized labs (the edited
// copies of one run, once the sanitized grader has graded the run itself).
static int grade_fast(const char *tag, const char *a1, const char *a2, const char *a3, const char *a4) {
    char *argv[] = {(char *)fast_shardlab, "grade", (char *)a1, (char *)a2, (char *)a3, (char *)a4, NULL};
    return run(argv, tag);
}

// `shardlab run lab -n N --run-dir dir args` with the optimized labs.
static int lab_run(const char *lab, int n, const char *dir, char *const *args) {
    char nbuf[8], env[600];
    snprintf(nbuf, sizeof nbuf, "%d", n);
    snprintf(env, sizeof env, "SHARDLAB_LABS=%s", labs_dir);
    char *argv[32] = {(char *)shardlab, "run", (char *)lab, "-n", nbuf, "--ui", "none", "--run-dir", (char *)dir};
    int a = 9;
    for (int i = 0; args[i]; i++) argv[a++] = args[i];
    argv[a] = NULL;
    char *envs[] = {env, NULL};
    return run_env(argv, "lab", envs);
}

// The result ("PASS", "FAIL", "SKIP") of check `name` in dir/grade.json, or "none".
static const char *result_of(const JsonValue *g, const char *name) {
    const JsonValue *checks = json_get(g, "checks");
    for (size_t i = 0; checks && i < checks->count; i++)
        if (!strcmp(json_get(json_at(checks, i), "name")->string, name))
            return json_get(json_at(checks, i), "result")->string;
    return "none";
}

// The failed checks of dir/grade.json as "a,b,c" (in rubric order), into out.
static void failed_checks(const char *dir, char *out, size_t n) {
    out[0] = 0;
    JsonValue *g = load_json_file(dir, "grade.json");
    const JsonValue *checks = g ? json_get(g, "checks") : NULL;
    if (!checks) snprintf(out, n, "(no grade.json)");
    for (size_t i = 0; checks && i < checks->count; i++) {
        const JsonValue *c = json_at(checks, i);
        if (strcmp(json_get(c, "result")->string, "FAIL") != 0) continue;
        size_t used = strlen(out);
        snprintf(out + used, n - used, "%s%s", used ? "," : "", json_get(c, "name")->string);
    }
    json_free(g);
}

static void copy_dir(const char *from, const char *to) {
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", to, from, to);
    if (system(cmd) != 0) printf("# copy %s failed\n", from);
}

// In dir/file: on the `nth` (1-based) line that contains `line_has`, replace the first
// `old` after it by `new_text`. Returns 1 if it did.
static int edit(const char *dir, const char *file, const char *line_has, int nth, const char *old, const char *new_text) {
    char path[900];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    size_t len;
    char *text = read_file(path, &len);
    if (!text) return 0;
    char *p = text;
    for (int k = 0; p; k++) {
        p = strstr(p, line_has);
        if (!p || k + 1 == nth) break;
        p = strchr(p, '\n');
    }
    char *at = p ? strstr(p, old) : NULL;
    if (!at) return free(text), 0;
    return splice_file(path, text, at, strlen(old), new_text);
}

// The nth line containing line_has removed from dir/file.
static int drop_line(const char *dir, const char *file, const char *line_has, int nth) {
    char path[900];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    char *text = read_file(path, NULL);
    if (!text) return 0;
    char *p = text, *start = NULL;
    for (int k = 0; (p = strstr(p, line_has)); k++) {
        if (k + 1 == nth) {
            start = p;
            while (start > text && start[-1] != '\n') start--;
            break;
        }
        p = strchr(p, '\n');
        if (!p) break;
    }
    if (!start) return free(text), 0;
    char *end = strchr(start, '\n');
    return splice_file(path, text, start, end ? (size_t)(end + 1 - start) : strlen(start), "");
}

static void truncate_file(const char *dir, const char *file, double fraction) {
    char path[900];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    struct stat st;
    if (stat(path, &st) == 0 && truncate(path, (off_t)(st.st_size * fraction)) != 0) printf("# truncate failed\n");
}

// One edited copy of a graded run: grade it and compare the failed checks with `want`.
static void expect_breaks(const char *good, const char *what, const char *want, const char *reason_has,
                          int (*damage)(const char *dir)) {
    char dir[700], out[400], tag[64];
    static int k;
    snprintf(dir, sizeof dir, "%s/damaged-%d", tmp, k);
    snprintf(tag, sizeof tag, "damaged-%d", k++);
    copy_dir(good, dir);
    if (!damage(dir)) {
        EXPECT(0, "%s: the edit applied (the run's log has the expected lines)", what);
        return;
    }
    // Every damaged copy has the good run's configuration, so one reference serves them all
    // (--refs: run by the first, reused by the rest), as an instructor grading a class does.
    char refs[700];
    snprintf(refs, sizeof refs, "%s/refs-damaged", tmp);
    int rc = grade(tag, dir, "--quiet", "--refs", refs);
    failed_checks(dir, out, sizeof out);
    char *stdout_text = captured(tag, "out");
    EXPECT(rc == 1 && !strcmp(out, want) && (!reason_has || strstr(stdout_text, reason_has)),
           "%s: exit 1, exactly %s FAIL%s%s (exit %d, failed: %s)", what, want, reason_has ? ", the reason names " : "",
           reason_has ? reason_has : "", rc, out);
    free(stdout_text);
}

static const char *ALL_DDP = "run.complete,replicas.equal,loss.reference,grads.reference,mem.formula,comm.bytes";

// The text `field` ("measured", "expected") of check `name` in dir/grade.json (a static copy;
// "" if none).
static const char *check_text(const char *dir, const char *name, const char *field) {
    static char text[2048];
    text[0] = 0;
    JsonValue *g = load_json_file(dir, "grade.json");
    const JsonValue *checks = g ? json_get(g, "checks") : NULL;
    for (size_t i = 0; checks && i < checks->count; i++)
        if (!strcmp(json_get(json_at(checks, i), "name")->string, name))
            snprintf(text, sizeof text, "%s", json_get(json_at(checks, i), field)->string);
    json_free(g);
    return text;
}
static const char *measured_of(const char *dir, const char *name) { return check_text(dir, name, "measured"); }
static const char *expected_of(const char *dir, const char *name) { return check_text(dir, name, "expected"); }

// The collectives lab trains nothing: its rubric is run.complete and collectives.correct,
// graded from the lab's own answer checks, and run.complete names no steps it never had.
static void check_collectives_run(void) {
    char dir[600];
    snprintf(dir, sizeof dir, "%s/collectives", tmp);
    char *args[] = {"--max-bytes", "1K", "--iters", "1", "--warmup", "0", NULL};
    EXPECT(lab_run("collectives", 2, dir, args) == 0, "collectives -n 2 --max-bytes 1K ran");
    int rc = grade("collectives", dir, "--quiet", NULL, NULL);
    JsonValue *g = load_json_file(dir, "grade.json");
    const char *complete = measured_of(dir, "run.complete");
    // Proves: a correct collectives run passes both checks, and run.complete says what it saw
    // in its own terms (broken on purpose, the training labs' "steps 1..0" is caught).
    EXPECT(rc == 0 && g && !strcmp(result_of(g, "collectives.correct"), "PASS") && !strcmp(complete, "2 ranks, every rank ended ok"),
           "collectives: collectives.correct PASS, run.complete '%s' (exit %d)", complete, rc);
    json_free(g);
}

// Adds `delta` to rank 0's loss at `step` (the line is rewritten with the new number).
static int shift_loss(const char *dir, int step, double delta) {
    char path[900], key[64];
    snprintf(path, sizeof path, "%s/rank-0.jsonl", dir);
    snprintf(key, sizeof key, "\"ev\":\"step\",\"rank\":0,\"step\":%d,\"loss\":", step);
    char *text = read_file(path, NULL), *at = text ? strstr(text, key) : NULL;
    if (!at) return free(text), 0;
    at += strlen(key);
    char *end;
    double loss = strtod(at, &end), now = loss + delta;
    char num_text[64];
    snprintf(num_text, sizeof num_text, "%.9g", now);
    return splice_file(path, text, at, (size_t)(end - at), num_text);
}

// Replays: a 40-step run keeps its state every 15 steps (replay/step-15 and step-30), and the
// grader restarts the single-rank reference from each of them for 10 steps. Exact agreement is
// asked there (and over steps 1-10); elsewhere, steps 11-15 and 26-30, only the curve.
static void check_replays(void) {
    char run40[600], refs[600];
    snprintf(run40, sizeof run40, "%s/ddp40", tmp);
    snprintf(refs, sizeof refs, "%s/refs", tmp);
    char *args[] = {"--steps", "40", "--replay-every", "15", NULL};
    EXPECT(lab_run("ddp", 2, run40, args) == 0, "ddp -n 2 --steps 40 --replay-every 15 ran");
    char replay[700];
    snprintf(replay, sizeof replay, "%s/replay/step-00000030/manifest.json", run40);
    // The lab keeps its replay points: the state after steps 15 and 30.
    EXPECT(access(replay, R_OK) == 0, "the run kept replay points (replay/step-00000030 has a manifest)");
    int rc = grade("replay", run40, "--refs", refs, NULL);
    const char *m = measured_of(run40, "loss.reference");
    EXPECT(rc == 0 && strstr(m, "2 replays (steps 16-25, 31-40)"),
           "graded with 2 replays of 10 steps from the run's own state: full marks (exit %d: %s)", rc, m);
    char *err = captured("replay", "err");
    EXPECT(strstr(err, "--resume") && strstr(err, "replay/step-00000015"), "the replays resume the run's own checkpoints");
    free(err);

    // From here on the optimized grader grades edited copies (its references are the optimized
    // labs: it keeps its own in the same --refs folder, named by the program that ran them).
    // A loss off by 2e-5 inside a replayed window (step 16, the first after replay point 15):
    // far inside the curve's 2%, but the replay from the same state catches it.
    char copy[700];
    snprintf(copy, sizeof copy, "%s/ddp40-window", tmp);
    copy_dir(run40, copy);
    EXPECT(shift_loss(copy, 16, 2e-5), "the edit of step 16's loss applied");
    rc = grade_fast("replay-window", copy, "--quiet", "--refs", refs);
    char failed[400];
    failed_checks(copy, failed, sizeof failed);
    m = measured_of(copy, "loss.reference");
    EXPECT(rc == 1 && !strcmp(failed, "loss.reference") && strstr(m, "at step 16, replayed from the run's state after step 15"),
           "a loss 2e-5 off at step 16: loss.reference FAIL, naming the replay from step 15 (%s: %s)", failed, m);

    // --refs: another run of the same configuration reuses the single-rank reference the
    // grade above kept there.
    snprintf(copy, sizeof copy, "%s/ddp40-copy", tmp);
    copy_dir(run40, copy);
    char cmd[1600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'/ref-replay-* '%s'/grade.json", copy, copy);
    if (system(cmd) != 0) printf("# cleaning the copy failed\n");
    rc = grade_fast("replay-again", copy, "--refs", refs, NULL);
    err = captured("replay-again", "err");
    int full = 0;  // references started from step 1 (a replay's line ends with its --resume)
    for (char *l = err; (l = strstr(l, "starting the reference")); l++) {
        char *nl = strchr(l, '\n');
        char *resume = strstr(l, "--resume");
        full += !resume || (nl && resume > nl);
    }
    EXPECT(rc == 0 && full == 0 && strstr(err, "--resume"),
           "--refs: another run of the configuration reuses the 40-step reference (%d started), and replays its own "
           "points", full);
    free(err);

    // Steps 27 and 28 lie between the windows; lifted by 1 nat, the mean of their part of the
    // curve (steps 21-30: a 40-step run is cut into parts of 10 steps) is 4% above the
    // reference's: the curve check catches what no window sees.
    snprintf(copy, sizeof copy, "%s/ddp40-curve", tmp);
    copy_dir(run40, copy);
    EXPECT(shift_loss(copy, 27, 1.0) && shift_loss(copy, 28, 1.0), "the edits of steps 27 and 28 applied");
    rc = grade_fast("replay-curve", copy, "--quiet", "--refs", refs);
    failed_checks(copy, failed, sizeof failed);
    m = measured_of(copy, "loss.reference");
    EXPECT(rc == 1 && !strcmp(failed, "loss.reference") && strstr(m, "mean over steps 21-30"),
           "steps 27-28 lifted by 1 nat (outside every window): loss.reference FAIL on the curve (%s: %s)", failed, m);

    // A replay point tampered with (a flipped byte in a shard): the reference refuses to resume
    // it, and loss.reference fails saying so, instead of trusting the file.
    snprintf(copy, sizeof copy, "%s/ddp40-tampered", tmp);
    copy_dir(run40, copy);
    char shard_file[800];
    snprintf(shard_file, sizeof shard_file, "%s/replay/step-00000030/step-00000030/rank-1-of-2.safetensors", copy);
    size_t len;
    char *bytes = read_file(shard_file, &len);
    if (bytes && len > 100) {
        bytes[len - 7] ^= 0x5a;
        FILE *f = fopen(shard_file, "wb");
        if (f) fwrite(bytes, 1, len, f), fclose(f);
    }
    free(bytes);
    rc = grade_fast("replay-tampered", copy, "--quiet", "--refs", refs);
    failed_checks(copy, failed, sizeof failed);
    JsonValue *g = load_json_file(copy, "grade.json");
    const JsonValue *checks = g ? json_get(g, "checks") : NULL;
    const char *reason = "";
    for (size_t i = 0; checks && i < checks->count; i++)
        if (!strcmp(json_get(json_at(checks, i), "name")->string, "loss.reference"))
            reason = json_get(json_at(checks, i), "reason")->string;
    EXPECT(rc == 1 && strstr(failed, "loss.reference") && strstr(reason, "after step 30") && strstr(reason, "checksum"),
           "a damaged replay point: loss.reference FAIL, the resume refused naming the checksum (%s: %s)", failed, reason);
    json_free(g);

    // A replay point's shard file replaced by a FIFO: the reference refuses to resume from it
    // at once, instead of waiting for a writer that never comes.
    snprintf(copy, sizeof copy, "%s/ddp40-fifo", tmp);
    copy_dir(run40, copy);
    snprintf(shard_file, sizeof shard_file, "%s/replay/step-00000030/step-00000030/rank-1-of-2.safetensors", copy);
    unlink(shard_file);
    if (mkfifo(shard_file, 0644) != 0) printf("# mkfifo %s failed\n", shard_file);
    double t0 = now_s();
    rc = grade_within("replay-fifo", 1, 90, copy, "--quiet", "--refs", refs);
    double took = now_s() - t0;
    failed_checks(copy, failed, sizeof failed);
    EXPECT(rc == 1 && took < 60 && strstr(failed, "loss.reference"),
           "a replay point's shard a FIFO: graded in %.0f s, loss.reference FAIL (exit %d: %s)", took, rc, failed);
}

// ---- a run directory is untrusted input ------------------------------------------------------

// Runs `shardlab grade args...` (the optimized one when fast) and gives it `limit_s` seconds:
// its exit status, or -1 if it was still running then (it is killed).
static int grade_within(const char *tag, int fast, double limit_s, const char *a1, const char *a2, const char *a3,
                        const char *a4) {
    char *argv[] = {(char *)(fast ? fast_shardlab : shardlab), "grade", (char *)a1, (char *)a2, (char *)a3, (char *)a4,
                    NULL};
    pid_t pid = spawn_env(argv, tag, NULL);
    double t0 = now_s();
    int status;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (now_s() - t0 > limit_s) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        usleep(20000);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// The reason of check `name` in dir/grade.json (a static copy; "" if none).
static const char *reason_of(const char *dir, const char *name) {
    static char text[700];
    text[0] = 0;
    JsonValue *g = load_json_file(dir, "grade.json");
    const JsonValue *checks = g ? json_get(g, "checks") : NULL;
    for (size_t i = 0; checks && i < checks->count; i++)
        if (!strcmp(json_get(json_at(checks, i), "name")->string, name))
            snprintf(text, sizeof text, "%s", json_get(json_at(checks, i), "reason")->string);
    json_free(g);
    return text;
}

// The grader never runs a program the run directory names: a ckpt run whose meta.json's
// argv[0] points at a script of the student's gets its --policy none reference from the
// grader's own lab programs, and the script never runs.
static void check_own_programs(void) {
    char run_dir[600], copy[700], own[700], script[800], marker[800];
    snprintf(run_dir, sizeof run_dir, "%s/ckpt", tmp);
    snprintf(copy, sizeof copy, "%s/ckpt-own", tmp);
    snprintf(own, sizeof own, "%s/own-labs", tmp);
    snprintf(script, sizeof script, "%s/ckpt", own);
    snprintf(marker, sizeof marker, "%s/it-ran", own);
    char *args[] = {"--steps", "3", "--layers", "2", "--policy", "sqrt", "--compare", "0", NULL};
    EXPECT(lab_run("ckpt", 2, run_dir, args) == 0, "ckpt -n 2 --steps 3 ran");
    copy_dir(run_dir, copy);
    mkdir(own, 0755);
    char text[1200];
    snprintf(text, sizeof text, "#!/bin/sh\necho ran >> '%s'\nexit 1\n", marker);
    write_text(script, "w", text);
    chmod(script, 0755);
    char *meta = NULL;
    {
        char p[800];
        snprintf(p, sizeof p, "%s/meta.json", copy);
        meta = read_file(p, NULL);
        char *at = meta ? strstr(meta, "\"argv\":[\"") : NULL;
        char *end = at ? strchr(at + 9, '"') : NULL;
        if (end) {
            at += 9;
            splice_file(p, meta, at, (size_t)(end - at), script);
            meta = NULL;  // splice_file took it
        }
    }
    free(meta);
    int rc = grade_within("own-labs", 1, 120, copy, "--quiet", NULL, NULL);
    // Proves: the reference ran with the grader's programs (the run passes), the script never.
    EXPECT(access(marker, F_OK) != 0 && rc == 0,
           "a ckpt run whose argv[0] names a script: the script never runs, the references are the grader's own "
           "(exit %d, %s)", rc, access(marker, F_OK) == 0 ? "the script ran" : "the script did not run");
}

// What the grader passes to a reference is checked against the launcher's option table: a
// config value that is out of bounds, of the wrong type, readable as an option or a path to
// something other than a regular file is refused, naming the key and the value; nothing is
// started and nothing is written outside the run.
static void check_config_values(const char *good, const char *shard) {
    static const struct {
        const char *key, *from, *to;
        int shard;
    } edits[] = {
        {"data", "\"data\":\"synthetic\"", "\"data\":\"--run-dir=@\"", 0},
        {"data", "\"data\":\"synthetic\"", "\"data\":\"/dev/zero\"", 0},
        {"data", "\"data\":\"synthetic\"", "\"data\":\"/nonexistent/corpus\"", 0},
        {"init", "\"init\":null", "\"init\":\"-h\"", 0},
        {"init", "\"init\":null", "\"init\":\"/tmp\"", 0},
        {"lr", "\"lr\":0.003", "\"lr\":1e9", 0},
        {"batch", "\"batch\":8", "\"batch\":1e300", 0},
        {"seq", "\"seq\":64", "\"seq\":-64", 0},
        {"heads", "\"heads\":4", "\"heads\":2.5", 0},
        {"attn", "\"attn\":\"flash\"", "\"attn\":\"--run-dir=@\"", 0},
        {"seed", "\"seed\":1337", "\"seed\":-1", 0},
        {"seed", "\"seed\":1337", "\"seed\":\"--run-dir=@\"", 0},
        {"lr_schedule", "\"lr_schedule\":\"cosine\"", "\"lr_schedule\":\"--run-dir=@\"", 0},
        {"warmup", "\"warmup\":100", "\"warmup\":1e12", 0},
        {"strategy", "\"strategy\":\"sampler\"", "\"strategy\":\"--run-dir=@\"", 1},
        {"items", "\"items\":64", "\"items\":0", 1},
        {"weights", "\"weights\":null", "\"weights\":\"--run-dir=@\"", 1},
    };
    for (size_t i = 0; i < sizeof edits / sizeof edits[0]; i++) {
        char dir[700], tag[32], to[800], elsewhere[700];
        snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere-%zu", tmp, i);
        snprintf(dir, sizeof dir, "%s/config-%zu", tmp, i);
        snprintf(tag, sizeof tag, "config-%zu", i);
        copy_dir(edits[i].shard ? shard : good, dir);
        const char *at = strchr(edits[i].to, '@');
        snprintf(to, sizeof to, "%.*s%s%s", at ? (int)(at - edits[i].to) : (int)strlen(edits[i].to), edits[i].to,
                 at ? elsewhere : "", at ? at + 1 : "");
        // A run keeps its references in itself: this copy has none, so one would start now.
        char cmd[1600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'/ref-*", dir);
        if (system(cmd) != 0) printf("# cleaning the copy failed\n");
        if (!edit(dir, "meta.json", "\"config\"", 1, edits[i].from, to)) {
            EXPECT(0, "config %s: the edit %s applied", edits[i].key, edits[i].from);
            continue;
        }
        int rc = grade_within(tag, 1, 60, dir, NULL, NULL, NULL);
        char *err = captured(tag, "err");
        const char *reason = reason_of(dir, "loss.reference");
        char key[64];
        snprintf(key, sizeof key, "\"%s\"", edits[i].key);
        // Proves: refused before anything starts, the reason naming the key; nothing written
        // outside the run.
        EXPECT(rc == 1 && !strstr(err, "starting the reference") && strstr(reason, key) && access(elsewhere, F_OK) != 0,
               "config %s: the reference refused, naming the key (exit %d, %s%s)", to, rc, one_line(reason),
               access(elsewhere, F_OK) == 0 ? "; something was written outside the run" : "");
        free(err);
    }
}

// A FIFO (or a device) in place of a file of the run is refused, not read: reading one would
// wait for a writer that never comes.
static void check_fifo(const char *good) {
    static const char *const names[] = {"rank-0.jsonl", "meta.json", "summary.json"};
    for (int i = 0; i < 3; i++) {
        char dir[700], path[800], tag[32];
        snprintf(dir, sizeof dir, "%s/fifo-%d", tmp, i);
        snprintf(tag, sizeof tag, "fifo-%d", i);
        copy_dir(good, dir);
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
        if (mkfifo(path, 0644) != 0) {
            EXPECT(0, "mkfifo %s", path);
            continue;
        }
        double t0 = now_s();
        int rc = grade_within(tag, 0, 20, dir, "--quiet", NULL, NULL);
        double took = now_s() - t0;
        char *out = captured(tag, "out");
        EXPECT(rc == 1 && took < 5 && strstr(out, names[i]) && strstr(out, "not a regular file"),
               "%s a FIFO: graded in %.1f s, exit 1, refused as not a regular file (exit %d)", names[i], took, rc);
        free(out);
    }
}

// The grader writes only into the run directory, and never through a link found there: a
// student's grade.json.tmp or ref-single.log pointing at a file of the grader's user (here
// `victim`) is replaced, the file it points at left as it was.
static void check_links(const char *good) {
    static const char *const names[] = {"grade.json.tmp", "grade.xml.tmp", "ref-single.log"};
    for (int i = 0; i < 3; i++) {
        char dir[700], link[800], victim[700], tag[32], cmd[1600];
        snprintf(dir, sizeof dir, "%s/links-%d", tmp, i);
        snprintf(victim, sizeof victim, "%s/victim-%d", tmp, i);
        snprintf(tag, sizeof tag, "links-%d", i);
        copy_dir(good, dir);
        // (no reference kept in the copy: one starts, and writes its launcher's output)
        snprintf(cmd, sizeof cmd, "rm -rf '%s'/ref-single*", dir);
        if (system(cmd) != 0) printf("# cleaning the copy failed\n");
        write_text(victim, "w", "precious\n");
        snprintf(link, sizeof link, "%s/%s", dir, names[i]);
        if (symlink(victim, link) != 0) {
            EXPECT(0, "symlink %s", link);
            continue;
        }
        int rc = grade_within(tag, 1, 120, dir, "--quiet", NULL, NULL);
        char *text = read_file(victim, NULL);
        EXPECT(rc == 0 && text && !strcmp(text, "precious\n"),
               "%s a link to a file outside the run: graded (exit %d), the file it points at untouched", names[i], rc);
        free(text);
    }
}

// A few hundred seeded mutations of a real run's files (truncations, flipped bytes, huge
// numbers, NaN, values of the wrong type, missing keys, paths, very long strings), each
// graded by the sanitized grader against a finished reference (--ref: no lab starts): every
// one ends within its time with exit 0, 1 or 2, and no sanitizer report.
static void mutate(char *text, size_t len, unsigned *seed, StrBuf *out) {
    static const char *const values[] = {
        "1e308",        "-1e308",      "1e19",         "18446744073709551616", "9007199254740993", "4294967296",
        "2147483648",   "-1",          "0",            "-0",                   "0.5",              "\"NaN\"",
        "\"Infinity\"", "\"-Infinity\"", "[]",         "{}",                   "null",             "true",
        "\"x\"",        "\"/dev/zero\"", "\"../../../etc/passwd\"", "\"--run-dir=/tmp/shardlab-sweep-out\"",
        "\"/tmp\"",     "[[[[[[[[1]]]]]]]]", "\"-h\"",     "1e-320"};
    sb_reset(out);
    size_t at = len ? (size_t)rand_r(seed) % len : 0;
    int kind = rand_r(seed) % 8;
    if (kind == 0) {  // cut anywhere
        sb_append(out, text, at);
    } else if (kind == 1) {  // flipped bytes
        sb_append(out, text, len);
        for (int k = 0, n = 1 + rand_r(seed) % 8; k < n && len; k++) out->data[(size_t)rand_r(seed) % len] ^= (char)(1 + rand_r(seed) % 255);
    } else if (kind <= 4) {  // a value replaced (after the colon at or after `at`)
        char *colon = memchr(text + at, ':', len - at);
        if (!colon) colon = memchr(text, ':', len);
        size_t from = colon ? (size_t)(colon - text) + 1 : at, to = from;
        int depth = 0;
        while (to < len && (depth > 0 || (text[to] != ',' && text[to] != '}' && text[to] != ']' && text[to] != '\n'))) {
            if (text[to] == '{' || text[to] == '[') depth++;
            else if (text[to] == '}' || text[to] == ']') depth--;
            else if (text[to] == '"')
                for (to++; to < len && text[to] != '"'; to++) to += text[to] == '\\';
            to++;
        }
        if (to > len) to = len;  // (a string left open at the end)
        sb_append(out, text, from);
        if (kind == 4) {  // a very long string
            sb_append(out, "\"", 1);
            for (int k = 0; k < 20000; k++) sb_append(out, "AAAAA", 5);
            sb_append(out, "\"", 1);
        } else {
            const char *v = values[(size_t)rand_r(seed) % (sizeof values / sizeof values[0])];
            sb_append(out, v, strlen(v));
        }
        sb_append(out, text + to, len - to);
    } else if (kind == 5) {  // a key and its value removed (the text from a quote to the next comma)
        char *q = memchr(text + at, '"', len - at);
        char *comma = q ? memchr(q, ',', len - (size_t)(q - text)) : NULL;
        size_t from = q ? (size_t)(q - text) : at, to = comma ? (size_t)(comma - text) + 1 : from;
        sb_append(out, text, from);
        sb_append(out, text + to, len - to);
    } else if (kind == 6) {  // a line repeated
        char *start = text + at;
        while (start > text && start[-1] != '\n') start--;
        char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) + 1 : len;
        sb_append(out, text, end);
        sb_append(out, start, (size_t)(text + end - start));
        sb_append(out, text + end, len - end);
    } else {  // a number's digits repeated into a huge one
        size_t d = at;
        while (d < len && !(text[d] >= '0' && text[d] <= '9')) d++;
        sb_append(out, text, d);
        for (int k = 0; k < 40; k++) sb_append(out, "9", 1);
        sb_append(out, text + d, len - d);
    }
}

static void check_mutation_sweep(const char *good, const char *ref) {
    char dir[700];
    snprintf(dir, sizeof dir, "%s/sweep", tmp);
    copy_dir(good, dir);
    static const char *const files[] = {"meta.json", "summary.json", "rank-0.jsonl", "rank-1.jsonl"};
    char *orig[4];
    size_t lens[4];
    for (int f = 0; f < 4; f++) {
        char p[800];
        snprintf(p, sizeof p, "%s/%s", dir, files[f]);
        orig[f] = read_file(p, &lens[f]);
    }
    unsigned seed = 20261125;
    int trials = 300, sane = 0;
    double t0 = now_s();
    char worst[300] = "";
    StrBuf m;
    sb_init(&m);
    for (int t = 0; t < trials && orig[0] && orig[1] && orig[2] && orig[3]; t++) {
        int f = t % 4;
        char p[800], tag[32];
        snprintf(p, sizeof p, "%s/%s", dir, files[f]);
        mutate(orig[f], lens[f], &seed, &m);
        FILE *out = fopen(p, "wb");
        if (out) fwrite(m.data ? m.data : "", 1, m.len, out), fclose(out);
        snprintf(tag, sizeof tag, "sweep");
        int rc = grade_within(tag, 0, 20, dir, "--quiet", "--ref", ref);
        char *err = captured(tag, "err");
        int ok = (rc == 0 || rc == 1 || rc == 2) && !strstr(err, "Sanitizer") && !strstr(err, "runtime error");
        sane += ok;
        if (!ok && !worst[0])
            snprintf(worst, sizeof worst, "mutation %d of %s: exit %d: %.200s", t, files[f], rc, one_line(err));
        free(err);
        out = fopen(p, "wb");  // restored for the next
        if (out) fwrite(orig[f], 1, lens[f], out), fclose(out);
    }
    sb_free(&m);
    for (int f = 0; f < 4; f++) free(orig[f]);
    EXPECT(sane == trials, "%d seeded mutations of meta, summary and logs: %d graded with exit 0, 1 or 2 and no "
           "sanitizer report, in %.0f s%s%s", trials, sane, now_s() - t0, worst[0] ? "; first failure: " : "", worst);
}

// The edits. Each returns 1 if it applied.

// Rank 1's param_hash after step 3 with its first hex digit changed.
static int flip_hash(const char *d) {
    char p[800];
    snprintf(p, sizeof p, "%s/rank-1.jsonl", d);
    char *text = read_file(p, NULL), *at = text;
    for (int k = 0; at && k < 3; k++) at = strstr(at + 1, "\"ev\":\"step\"");
    at = at ? strstr(at, "\"param_hash\":\"") : NULL;
    if (at) {
        at += strlen("\"param_hash\":\"");
        *at = *at == '0' ? '1' : '0';
        write_text(p, "w", text);
    }
    free(text);
    return at != NULL;
}
static int bump_loss(const char *d) { return edit(d, "rank-0.jsonl", "\"ev\":\"step\"", 2, "\"loss\":5.", "\"loss\":6."); }
static int double_grad(const char *d) { return edit(d, "rank-0.jsonl", "\"ev\":\"step\"", 4, "\"grad_norm\":", "\"grad_norm\":9"); }
static int more_params(const char *d) { return edit(d, "rank-2.jsonl", "\"ev\":\"step\"", 1, "\"params\":", "\"params\":1"); }
static int more_bytes(const char *d) { return edit(d, "rank-3.jsonl", "\"name\":\"all_reduce\"", 2, "\"bytes\":", "\"bytes\":1"); }
// Rank 2's most gradient memory held at once (peak_by of its last step), far more: the
// steady state after step 1 stays right, so only the peak can show it.
static int grads_peak(const char *d) { return edit(d, "rank-2.jsonl", "\"peak_by\"", 5, "\"grads\":", "\"grads\":9"); }
// Rank 1's bytes sent in step 2, with more in front: every span is the algorithm's, but the
// step sent bytes no collective of it accounts for (an extra collective).
static int more_sent(const char *d) { return edit(d, "rank-1.jsonl", "\"ev\":\"step\"", 2, "\"sent\":", "\"sent\":1"); }
// The number after `key` on the nth line holding line_has made smaller: less `minus`, or halved
// (minus 0): a sum left out, or a collective sent at half its size.
static int lower(const char *d, const char *file, const char *line_has, int nth, const char *key, unsigned minus) {
    char path[900];
    snprintf(path, sizeof path, "%s/%s", d, file);
    char *text = read_file(path, NULL), *p = text;
    for (int k = 0; p; k++) {
        p = strstr(p, line_has);
        if (!p || k + 1 == nth) break;
        p = strchr(p, '\n');
    }
    char *at = p ? strstr(p, key) : NULL, *end;
    if (!at) return free(text), 0;
    at += strlen(key);
    unsigned long long v = strtoull(at, &end, 10);
    if (end == at || v < 2 || v <= minus) return free(text), 0;
    char less[32];
    snprintf(less, sizeof less, "%llu", minus ? v - minus : v / 2);
    return splice_file(path, text, at, (size_t)(end - at), less);
}
// Rank 1's step 2 sent one float pair less (the loss's sum left out); rank 3's second
// all-reduce half its bytes (a bucket cut short).
static int fewer_sent(const char *d) { return lower(d, "rank-1.jsonl", "\"ev\":\"step\"", 2, "\"sent\":", 8); }
static int fewer_bytes(const char *d) { return lower(d, "rank-3.jsonl", "\"name\":\"all_reduce\"", 2, "\"bytes\":", 0); }
// The first digit of the bytes hash on the first step line of an index list ("step position
// index bytes") changed.
static int flip_bytes_hash(const char *d, const char *file) {
    char p[800];
    snprintf(p, sizeof p, "%s/%s", d, file);
    char *text = read_file(p, NULL), *at = text;
    while (at && *at == '#') at = strchr(at, '\n') ? strchr(at, '\n') + 1 : NULL;  // past the header
    for (int field = 0; at && field < 3; field++) at = strchr(at, ' ') ? strchr(at, ' ') + 1 : NULL;
    if (at) {
        *at = *at == '0' ? '1' : '0';
        write_text(p, "w", text);
    }
    free(text);
    return at != NULL;
}
static int cut_mid_line(const char *d) { return truncate_file(d, "rank-1.jsonl", 0.61), 1; }
static int no_rank_file(const char *d) {
    char p[800];
    snprintf(p, sizeof p, "%s/rank-2.jsonl", d);
    return unlink(p) == 0;
}
static int no_summary(const char *d) {
    char p[800];
    snprintf(p, sizeof p, "%s/summary.json", d);
    return unlink(p) == 0;
}
static int garbage_meta(const char *d) {
    char p[800];
    snprintf(p, sizeof p, "%s/meta.json", d);
    write_text(p, "w", "{\"lab\":\"ddp\", this is not json");
    return 1;
}
static int missing_step(const char *d) { return drop_line(d, "rank-0.jsonl", "\"ev\":\"step\"", 3); }
static int failed_end(const char *d) { return edit(d, "rank-3.jsonl", "\"ev\":\"end\"", 1, "\"status\":\"ok\"", "\"status\":\"error\""); }
static int huge_world(const char *d) { return edit(d, "meta.json", "\"world_size\"", 1, "\"world_size\":4", "\"world_size\":4000000"); }
static int other_lab(const char *d) { return edit(d, "meta.json", "\"lab\"", 1, "\"lab\":\"ddp\"", "\"lab\":\"nonsense\""); }
static int foreign_rank(const char *d) { return edit(d, "rank-1.jsonl", "\"ev\":\"step\"", 2, "\"rank\":1", "\"rank\":0"); }
// Rank 0's log holding a second run after the first (the same 5 steps again): what a second
// job into the same --run-dir appended before run directories were held by one job.
static int two_runs(const char *d) {
    char p[800];
    snprintf(p, sizeof p, "%s/rank-0.jsonl", d);
    char *text = read_file(p, NULL);
    if (text) write_text(p, "a", text);
    free(text);
    return text != NULL;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: test_grade SHARDLAB LABS_DIR\n");
        return 2;
    }
    shardlab = argv[1], labs_dir = argv[2], fast_shardlab = argc > 3 ? argv[3] : argv[1];
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-grade-XXXXXX");
    if (!mkdtemp(tmp)) return perror("mkdtemp"), 1;

    // ---- bad arguments: one line, exit 2 -------------------------------------------------------
    EXPECT(grade("u1", NULL, NULL, NULL, NULL) == 2, "no run directory: exit 2");
    EXPECT(grade("u2", "--bogus", NULL, NULL, NULL) == 2, "an unknown option: exit 2");
    EXPECT(grade("u3", "/nonexistent/run", NULL, NULL, NULL) == 2, "a directory that does not exist: exit 2");
    EXPECT(grade("u4", "--only", "ddp", NULL, NULL) == 2, "--only without --labs: exit 2");
    EXPECT(grade("u5", "--labs", "/nonexistent", NULL, NULL) == 2, "--labs on a missing directory: exit 2");
    char *u6_err = NULL;
    EXPECT(grade("u6", "--labs", labs_dir, "--only", "nolab") == 2 && strstr(u6_err = captured("u6", "err"), "nolab"),
           "--only with a name that is no lab: exit 2, the name said");
    free(u6_err);
    EXPECT(grade("u7", "--help", NULL, NULL, NULL) == 0, "--help: exit 0");
    check_collectives_run();

    // ---- a good DDP run: full marks, grade.json and JUnit, the reference reused ----------------
    char good[600];
    snprintf(good, sizeof good, "%s/ddp", tmp);
    char *ddp_args[] = {"--steps", "5", "--algo", "ring", NULL};
    EXPECT(lab_run("ddp", 4, good, ddp_args) == 0, "ddp -n 4 --algo ring ran");
    int rc = grade("good", good, NULL, NULL, NULL);
    JsonValue *g = load_json_file(good, "grade.json");
    char *out = captured("good", "out"), *err = captured("good", "err");
    EXPECT(rc == 0 && g && json_get(g, "pass")->boolean && num(g, "points") == 11 && num(g, "max") == 11,
           "the reference ddp scores 11/11, exit 0 (exit %d)", rc);
    EXPECT(strstr(out, "total 11/11") && strstr(err, "starting the reference"), "the rubric's total printed; the reference started");
    char *xml = NULL;
    {
        char p[800];
        snprintf(p, sizeof p, "%s/grade.xml", good);
        xml = read_file(p, NULL);
    }
    EXPECT(xml && strstr(xml, "<testsuites") && strstr(xml, "failures=\"0\"") && count_lines(xml) == 11,
           "grade.xml: JUnit, 6 test cases, no failures");
    // A check's expected text is whole wherever it is read: grads.reference's names the
    // reference's command and directory inside its sentence (about 260 characters here), and
    // ends with the curve's tolerance, in grade.json and in the terminal alike.
    const char *grads_expected = expected_of(good, "grads.reference");
    const char *tail = "each tenth of the curve's mean within 20% (or 0.05)";
    size_t ge = strlen(grads_expected), tl = strlen(tail);
    EXPECT(ge > 240 && ge >= tl && !strcmp(grads_expected + ge - tl, tail) && strstr(grads_expected, "/ref-single") &&
               strstr(out, grads_expected),
           "grads.reference's expected text is whole in grade.json and the terminal (%zu characters, ending '...%s')", ge,
           ge > 30 ? grads_expected + ge - 30 : grads_expected);
    free(xml), free(out), free(err), json_free(g);
    // The reference the grader left in the run directory is the student's to edit: it is run
    // again, never trusted. A copy with a wrong loss at step 1 and the same wrong loss written
    // into its ref-single (and grade-args.txt kept) fails as any wrong run does.
    char forged[700], forged_ref[800], cmd_rm[800];
    snprintf(forged, sizeof forged, "%s/forged", tmp);
    snprintf(forged_ref, sizeof forged_ref, "%s/ref-single", forged);
    copy_dir(good, forged);
    int shifted = shift_loss(forged, 1, 0.5) && shift_loss(forged_ref, 1, 0.5);
    rc = grade("forged", forged, NULL, NULL, NULL);
    g = load_json_file(forged, "grade.json");
    err = captured("forged", "err");
    EXPECT(shifted && rc == 1 && g && !strcmp(result_of(g, "loss.reference"), "FAIL") && strstr(err, "starting the reference"),
           "a run whose ref-single was edited to agree with its wrong loss: the reference is run again, "
           "loss.reference FAIL (exit %d, %s)", rc, g ? result_of(g, "loss.reference") : "no grade.json");
    free(err), json_free(g);

    // --attn: the good run above is flash (the default), graded against the flash formula. A
    // naive run whose config lost "attn" (a run from before the option) is read as naive and
    // scores full marks; the same run claiming flash fails: the memory formula follows attn.
    char old_run[700], claims[700];
    snprintf(old_run, sizeof old_run, "%s/ddp-naive", tmp);
    snprintf(claims, sizeof claims, "%s/ddp-naive-claims-flash", tmp);
    char *naive_args[] = {"--steps", "5", "--algo", "ring", "--attn", "naive", NULL};
    EXPECT(lab_run("ddp", 2, old_run, naive_args) == 0, "ddp -n 2 --attn naive ran");
    copy_dir(old_run, claims);
    int stripped = edit(old_run, "meta.json", "\"config\"", 1, "\"attn\":\"naive\",", "");
    for (int k = 0; k < 2; k++) {
        char file[32];
        snprintf(file, sizeof file, "rank-%d.jsonl", k);
        stripped &= edit(old_run, file, "\"ev\":\"start\"", 1, "\"attn\":\"naive\",", "");
    }
    rc = grade("old-naive", old_run, NULL, NULL, NULL);
    g = load_json_file(old_run, "grade.json");
    EXPECT(stripped && rc == 0 && g && num(g, "points") == num(g, "max"),
           "a naive run whose config has no \"attn\" (an older run) is graded as naive: full marks, exit %d", rc);
    json_free(g);
    int claimed = edit(claims, "meta.json", "\"config\"", 1, "\"attn\":\"naive\"", "\"attn\":\"flash\"");
    for (int k = 0; k < 2; k++) {
        char file[32];
        snprintf(file, sizeof file, "rank-%d.jsonl", k);
        claimed &= edit(claims, file, "\"ev\":\"start\"", 1, "\"attn\":\"naive\"", "\"attn\":\"flash\"");
    }
    snprintf(cmd_rm, sizeof cmd_rm, "rm -rf '%s'/ref-*", claims);
    if (system(cmd_rm) != 0) printf("# cleaning the copy failed\n");
    rc = grade("claims-flash", claims, NULL, NULL, NULL);
    g = load_json_file(claims, "grade.json");
    EXPECT(claimed && rc == 1 && g && strcmp(result_of(g, "mem.formula"), "FAIL") == 0,
           "the same naive run claiming --attn flash fails mem.formula (exit %d, %s)", rc,
           g ? result_of(g, "mem.formula") : "no grade.json");
    json_free(g);

    // --ref: the good reference passes; one on another seed is another curve.
    char ref[700], other[700];
    snprintf(ref, sizeof ref, "%s/ref-single", good);
    snprintf(other, sizeof other, "%s/other-seed", tmp);
    EXPECT(grade("ref", good, "--ref", ref, NULL) == 0, "--ref with the single-rank run on the same global batch: PASS");
    char *other_args[] = {"--steps", "5", "--accum", "4", "--seed", "7", NULL};
    lab_run("single", 1, other, other_args);
    rc = grade("ref2", good, "--ref", other, NULL);
    g = load_json_file(good, "grade.json");
    EXPECT(rc == 1 && g && !strcmp(result_of(g, "loss.reference"), "FAIL"),
           "--ref with a run on another seed: loss.reference FAIL, exit 1");
    json_free(g);
    grade("restore", good, "--quiet", NULL, NULL);
    check_fifo(good);
    check_links(good);
    check_mutation_sweep(good, ref);

    // ---- each check fails alone on the edit that breaks what it checks -------------------------
    expect_breaks(good, "rank 1's param_hash changed at step 3", "replicas.equal", "rank 1 differs", flip_hash);
    expect_breaks(good, "rank 0's loss changed at step 2", "loss.reference", NULL, bump_loss);
    expect_breaks(good, "rank 0's gradient norm changed at step 4", "grads.reference", NULL, double_grad);
    expect_breaks(good, "rank 2's params memory changed", "mem.formula", "rank 2 params", more_params);
    expect_breaks(good, "an all-reduce's bytes changed on rank 3", "comm.bytes", NULL, more_bytes);
    expect_breaks(good, "rank 2's gradient memory at its peak raised", "mem.formula", "grads at its peak", grads_peak);
    expect_breaks(good, "rank 1's bytes sent in step 2 raised", "comm.bytes", "besides the gradient buckets", more_sent);
    // comm.bytes says which way the bytes are off: more, or fewer than the algorithm needs.
    expect_breaks(good, "rank 1's bytes sent in step 2 raised: said to be more", "comm.bytes",
                  "the ranks sent more than the algorithm needs", more_sent);
    expect_breaks(good, "rank 1's bytes sent in step 2 lowered: said to be fewer", "comm.bytes",
                  "the ranks sent fewer bytes than the algorithm needs", fewer_sent);
    expect_breaks(good, "an all-reduce's bytes lowered on rank 3: fewer elements", "comm.bytes",
                  "moved fewer elements than the gradients have", fewer_bytes);

    // ---- runs that cannot be graded: run.complete FAIL with the reason, the rest not graded ------
    expect_breaks(good, "rank 1's log cut mid-line", ALL_DDP, "cut mid-line", cut_mid_line);
    expect_breaks(good, "rank 2's log missing", ALL_DDP, "rank-2.jsonl: missing", no_rank_file);
    expect_breaks(good, "summary.json missing", ALL_DDP, "summary.json: missing", no_summary);
    // Without a readable meta.json the lab is unknown: its rubric is run.complete alone.
    expect_breaks(good, "meta.json not JSON", "run.complete", "meta.json: not valid JSON", garbage_meta);
    expect_breaks(good, "a step event removed from rank 0", ALL_DDP, "step 4 where step 3 should be", missing_step);
    expect_breaks(good, "rank 3 ended with status error", ALL_DDP, "status \"error\"", failed_end);
    expect_breaks(good, "meta.json's world_size 4000000", ALL_DDP, "world_size", huge_world);
    expect_breaks(good, "meta.json names no lab shardlab has", "run.complete", "nonsense", other_lab);
    expect_breaks(good, "a rank-0 event in rank 1's file", ALL_DDP, "rank-1.jsonl", foreign_rank);
    // Two runs in one log: the reason says so, not "step 1 where step 6 should be" (today's).
    expect_breaks(good, "two runs' events in rank 0's log", ALL_DDP, "rank-0.jsonl: 2 start events", two_runs);
    {
        char empty[700];
        snprintf(empty, sizeof empty, "%s/empty", tmp);
        mkdir(empty, 0755);
        rc = grade("empty", empty, NULL, NULL, NULL);
        out = captured("empty", "out");
        EXPECT(rc == 1 && strstr(out, "meta.json: missing"), "an empty directory: FAIL, meta.json missing (exit %d)", rc);
        free(out);
    }

    // ---- random damage: whatever happens to the files, a grade and exit 0 or 1 ----------------
    srand(20261121);
    int sane = 0, trials = 40;
    static const char *files[] = {"meta.json", "summary.json", "rank-0.jsonl", "rank-1.jsonl", "rank-3.jsonl"};
    for (int t = 0; t < trials; t++) {
        char dir[700], path[800], tag[32];
        snprintf(dir, sizeof dir, "%s/random-%d", tmp, t);
        snprintf(tag, sizeof tag, "random-%d", t);
        copy_dir(good, dir);
        snprintf(path, sizeof path, "%s/%s", dir, files[t % 5]);
        size_t len;
        char *text = read_file(path, &len);
        if (text && len) {
            for (int k = 0; k < 1 + t % 7; k++) text[(size_t)rand() % len] = (char)(rand() % 256);
            FILE *f = fopen(path, "w");
            fwrite(text, 1, t % 3 == 0 ? len / 2 + (size_t)rand() % (len / 2) : len, f);
            fclose(f);
        }
        free(text);
        rc = grade(tag, dir, "--quiet", NULL, NULL);
        JsonValue *gj = load_json_file(dir, "grade.json");
        sane += (rc == 0 || rc == 1) && gj && json_get(gj, "points");
        json_free(gj);
    }
    EXPECT(sane == trials, "random damage to meta, summary and logs: %d of %d graded with exit 0 or 1, grade.json written",
           sane, trials);

    // ---- the checks of the other labs fail on their own edits ----------------------------------
    char shard[600], pp[600];
    snprintf(shard, sizeof shard, "%s/shard", tmp);
    char *shard_args[] = {"--steps", "10", "--items", "64", NULL};
    lab_run("shard", 2, shard, shard_args);
    // The edited copies below have this run's configuration: one reference serves them all.
    char shard_refs[700];
    snprintf(shard_refs, sizeof shard_refs, "%s/refs-shard", tmp);
    EXPECT(grade("shard", shard, "--quiet", "--refs", shard_refs) == 0, "the reference shard lab: full marks");
    check_config_values(good, shard);
    check_own_programs();
    char idx[700];
    snprintf(idx, sizeof idx, "%s/shard-copy", tmp);
    copy_dir(shard, idx);
    // Rank 1 claims, at step 2, the item rank 0 took at position 8 (a sample seen twice).
    char *r0 = NULL;
    {
        char p[800];
        snprintf(p, sizeof p, "%s/indices-rank-0-epoch-0.txt", idx);
        r0 = read_file(p, NULL);
    }
    long long st, pos, item = -1;
    char bytes[32] = "";
    for (char *l = r0; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : l + strlen(l))
        if (sscanf(l, "%lld %lld %lld %31s", &st, &pos, &item, bytes) == 4 && pos == 8) break;
    free(r0);
    char idx_path[800];
    snprintf(idx_path, sizeof idx_path, "%s/indices-rank-1-epoch-0.txt", idx);
    {
        // Rank 1's line for position 12 (step 2) rewritten with rank 0's item at position 8
        // (and the hash of its bytes, as if rank 1 had trained on it).
        char *text = read_file(idx_path, NULL);
        FILE *f = fopen(idx_path, "w");
        for (char *l = text; l && *l;) {
            char *nl = strchr(l, '\n');
            size_t n = nl ? (size_t)(nl - l + 1) : strlen(l);
            if (sscanf(l, "%lld %lld", &st, &pos) == 2 && pos == 12) fprintf(f, "%lld 12 %lld %s\n", st, item, bytes);
            else fwrite(l, 1, n, f);
            l += n;
        }
        fclose(f);
        free(text);
    }
    grade("shard-twice", idx, "--quiet", "--refs", shard_refs);
    char failed[400];
    failed_checks(idx, failed, sizeof failed);
    EXPECT(!strcmp(failed, "data.coverage"), "shard: an item listed twice in an epoch: exactly data.coverage FAIL (%s)", failed);
    // What was trained on: rank 1's list as it was, but the hash of the bytes at its first
    // position changed, as if it had trained on other bytes than the item it names there.
    char edited[700];
    snprintf(edited, sizeof edited, "%s/shard-bytes", tmp);
    copy_dir(shard, edited);
    EXPECT(flip_bytes_hash(edited, "indices-rank-1-epoch-0.txt"), "the edit applies to rank 1's first line");
    grade("shard-bytes", edited, "--quiet", "--refs", shard_refs);
    failed_checks(edited, failed, sizeof failed);
    char *said = captured("shard-bytes", "out");
    EXPECT(!strcmp(failed, "data.coverage") && strstr(said, "trained on bytes that are no item"),
           "shard: the bytes rank 1 trained on at a position are not the item there: exactly data.coverage FAIL (%s)",
           failed);
    free(said);
    // What was read: rank 0's sampler read item 5 once more than its part has it.
    snprintf(edited, sizeof edited, "%s/shard-reads", tmp);
    copy_dir(shard, edited);
    {
        char p[800];
        snprintf(p, sizeof p, "%s/reads-rank-0-epoch-0.txt", edited);
        write_text(p, "a", "5 1\n");
    }
    grade("shard-reads", edited, "--quiet", "--refs", shard_refs);
    failed_checks(edited, failed, sizeof failed);
    said = captured("shard-reads", "out");
    EXPECT(!strcmp(failed, "data.coverage") && strstr(said, "read items that are not its part"),
           "shard: rank 0's sampler read an item more than its part: exactly data.coverage FAIL (%s)", failed);
    free(said);

    snprintf(pp, sizeof pp, "%s/pp", tmp);
    char *pp_args[] = {"--steps", "2", "--layers", "4", "--schedule", "1f1b", "--micro", "8", NULL};
    lab_run("pp", 4, pp, pp_args);
    EXPECT(grade("pp", pp, "--quiet", NULL, NULL) == 0, "the reference 1F1B pipeline: full marks");
    char pp2[700];
    snprintf(pp2, sizeof pp2, "%s/pp-copy", tmp);
    copy_dir(pp, pp2);
    // Stage 0's backward spans of step 1 moved after all its forwards (GPipe's order): more
    // micro-batches in flight than 1F1B holds.
    {
        char p[800];
        snprintf(p, sizeof p, "%s/rank-0.jsonl", pp2);
        char *text = read_file(p, NULL);
        FILE *f = fopen(p, "w");
        for (char *l = text; l && *l;) {
            char *nl = strchr(l, '\n'), line[1024];
            size_t n = nl ? (size_t)(nl - l + 1) : strlen(l);
            snprintf(line, sizeof line, "%.*s", (int)n, l);
            char *t0 = strstr(line, "\"t0_us\":"), *t1 = strstr(line, "\"t1_us\":");
            if (strstr(line, "\"name\":\"bwd\"") && strstr(line, "\"step\":1,") && t0 && t1) {
                long long a = atoll(t0 + 8), b = atoll(t1 + 8);
                fwrite(line, 1, (size_t)(t0 - line), f);
                fprintf(f, "\"t0_us\":%lld,\"t1_us\":%lld%s", a + 1000000000LL, b + 1000000000LL, strchr(t1 + 8, ','));
            } else {
                fputs(line, f);
            }
            l += n;
        }
        fclose(f);
        free(text);
    }
    grade("pp-order", pp2, "--quiet", NULL, NULL);
    g = load_json_file(pp2, "grade.json");
    EXPECT(g && !strcmp(result_of(g, "schedule.in_flight"), "FAIL") && !strcmp(result_of(g, "loss.reference"), "PASS") &&
               !strcmp(result_of(g, "run.complete"), "PASS"),
           "pp: stage 0 logged in GPipe's order under 1f1b: schedule.in_flight FAIL, the loss still PASS");
    json_free(g);

    check_replays();
    // FSDP --prefetch: each unit's all-gather asked for before the unit before it computes. The
    // same run with unit 1's first all-gather issued long after (as when nothing is prefetched):
    // the bytes and the memory are the same, only the order shows it.
    char fsdp[600], fsdp2[700];
    snprintf(fsdp, sizeof fsdp, "%s/fsdp", tmp);
    char *fsdp_args[] = {"--steps", "3", "--prefetch", NULL};
    lab_run("fsdp", 2, fsdp, fsdp_args);
    EXPECT(grade("fsdp", fsdp, "--quiet", NULL, NULL) == 0, "the reference FSDP with --prefetch: full marks");
    snprintf(fsdp2, sizeof fsdp2, "%s/fsdp-late", tmp);
    copy_dir(fsdp, fsdp2);
    EXPECT(edit(fsdp2, "rank-0.jsonl", "\"unit\":1,\"algo\"", 1, "\"issued_us\":", "\"issued_us\":9"),
           "the edit applies to rank 0's first all-gather of unit 1");
    grade("fsdp-late", fsdp2, "--quiet", NULL, NULL);
    failed_checks(fsdp2, failed, sizeof failed);
    char *late = captured("fsdp-late", "out");
    EXPECT(!strcmp(failed, "comm.bytes") && strstr(late, "unit 1's all-gather was asked for after unit 0's forward"),
           "fsdp --prefetch: unit 1's gather issued after unit 0 computed: exactly comm.bytes FAIL (%s)", failed);
    free(late);

    // ---- every lab's graded configurations, with the reference programs: full marks ---------------
    char all[600];
    snprintf(all, sizeof all, "%s/all", tmp);
    rc = grade("all", "--labs", labs_dir, "--out", all);
    g = load_json_file(all, "grade.json");
    const JsonValue *lab_list = g ? json_get(g, "labs") : NULL;
    // 263 points: 26 configurations (ddp-accum, fsdp-prefetch, hsdp, tp-sp, collectives-ring-n3,
    // pp's m < p and m = 1, cp's zigzag and contiguous, ep's dropless and capacity among them).
    EXPECT(rc == 0 && g && num(g, "points") == num(g, "max") && num(g, "max") == 263 && lab_list && lab_list->count == 11,
           "shardlab grade --labs on the reference labs: %.0f/%.0f over %zu labs, exit 0 (exit %d)", g ? num(g, "points") : -1,
           g ? num(g, "max") : -1, lab_list ? lab_list->count : 0, rc);
    json_free(g);

    int failed_n = test_failed;
    tmp_finish(failed_n);
    return test_done();
}
