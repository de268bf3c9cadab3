// test_runread.c — the run-log reader (labs/command/runs/runread.h) and the dashboard drawn from it.
//
// The reader is what every dashboard and grader trusts with a run's numbers, and what must
// survive any file: a crafted run directory with known numbers is read back field by field,
// lines arrive in pieces, files are truncated and corrupted, and a fixed-seed fuzz run (the
// same target `make fuzz` runs under libFuzzer) throws mutated and random input at it.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include "canvas.h"
#include "command/runs/runread.h"
#include "common/model/rng.h"
#include "dashboard.h"
#include "fuzz/runread_target.h"
#include "labtest.h"
#include "test.h"


// text into tmp/<name> (mode "w" or "a").
static void write_file(const char *name, const char *text, const char *mode) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", tmp, name);
    write_text(path, mode, text);
}

// A step event of rank r with the given loss and memory (bytes), in the schema's form.
static void step_line(char *out, size_t n, int r, int step, double loss, double ms, long params, long acts, long peak) {
    snprintf(out, n,
             "{\"ev\":\"step\",\"rank\":%d,\"step\":%d,\"loss\":%.6f,\"lr\":0.001,\"tokens\":256,"
             "\"ms\":{\"step\":%.3f,\"compute\":%.3f,\"comm\":%.3f},\"bytes\":{\"sent\":1000,\"recv\":1000},"
             "\"mem\":{\"params\":%ld,\"grads\":%ld,\"optim\":%ld,\"acts\":%ld,\"comm\":0,\"peak\":%ld,\"host\":4200},"
             "\"param_hash\":\"00000000000000%02x\"}\n",
             r, step, loss, ms, ms * 0.75, ms * 0.25, params, params, 2 * params, acts, peak, step % 256);
}

static void span_line(char *out, size_t n, int r, int step, const char *name, long t0, long t1) {
    snprintf(out, n,
             "{\"ev\":\"span\",\"rank\":%d,\"step\":%d,\"name\":\"%s\",\"mb\":0,\"layer\":1,\"t0_us\":%ld,\"t1_us\":%ld,"
             "\"bytes\":0}\n",
             r, step, name, t0, t1);
}

// A two-rank run: 10 steps, loss 4.0 - 0.2 (step - 1), rank 1 holding half rank 0's params.
static void write_run(int with_end) {
    write_file("meta.json",
               "{\"lab\":\"zero\",\"argv\":[\"x\"],\"world_size\":2,\"device\":\"cpu\",\"backend\":\"shm\","
               "\"config\":{\"steps\":20,\"batch\":8,\"seq\":64},\"start_time\":\"2026-11-21T00:00:00Z\","
               "\"start_unix_us\":1}",
               "w");
    for (int r = 0; r < 2; r++) {
        char name[32], line[1024];
        snprintf(name, sizeof name, "rank-%d.jsonl", r);
        snprintf(line, sizeof line,
                 "{\"ev\":\"start\",\"rank\":%d,\"world\":2,\"lab\":\"zero\",\"device\":\"cpu\",\"backend\":\"shm\","
                 "\"params\":100,\"config\":{\"steps\":20},\"loss_floor\":1.5}\n",
                 r);
        write_file(name, line, "w");
        for (int s = 1; s <= 10; s++) {
            long t = 1000000L * s;
            span_line(line, sizeof line, r, s, "fwd", t, t + 300);
            write_file(name, line, "a");
            span_line(line, sizeof line, r, s, "all_reduce", t + 200, t + 600);
            write_file(name, line, "a");
            step_line(line, sizeof line, r, s, 4.0 - 0.2 * (s - 1), 2.0 + r, r ? 500 : 1000, 300, 5000);
            write_file(name, line, "a");
        }
        if (with_end) {
            snprintf(line, sizeof line, "{\"ev\":\"end\",\"rank\":%d,\"status\":\"ok\",\"steps\":10}\n", r);
            write_file(name, line, "a");
        }
    }
}

static void test_reads_a_run(void) {
    write_run(1);
    RunView v;
    char err[256];
    EXPECT(runview_open(&v, tmp, err, sizeof err) == 0, "a run directory opens (%s)", err);
    // Proves: meta.json's facts land where the header reads them.
    EXPECT(strcmp(v.lab, "zero") == 0 && v.world == 2 && strcmp(v.device, "cpu") == 0 && strcmp(v.backend, "shm") == 0,
           "lab, world, device, backend from meta.json (%s, %d, %s, %s)", v.lab, v.world, v.device, v.backend);
    EXPECT(v.steps_total == 20 && v.batch_tokens == 8 * 64, "steps and global batch tokens from the config (%lld, %lld)",
           (long long)v.steps_total, (long long)v.batch_tokens);
    EXPECT(v.has_floor && v.loss_floor == 1.5, "the loss floor from the start event");
    // Proves: the loss curve is rank 0's, every step, in order, with the logged values.
    int curve_ok = v.nloss == 10;
    for (size_t i = 0; curve_ok && i < v.nloss; i++)
        curve_ok = v.loss[i].step == (int64_t)i + 1 && fabs(v.loss[i].loss - (4.0 - 0.2 * (double)i)) < 1e-6;
    EXPECT(curve_ok, "rank 0's loss at each of the 10 steps (%zu points)", v.nloss);
    // Proves: each rank's last step carries its own memory by category, a lab's extra category
    // ("host") included after the five of the schema.
    const RunStep *s0 = &v.ranks[0].last, *s1 = &v.ranks[1].last;
    EXPECT(v.nmem == 6 && strcmp(v.mem_names[0], "params") == 0 && strcmp(v.mem_names[5], "host") == 0,
           "six memory categories, params first and host last (%d)", v.nmem);
    EXPECT(s0->mem[0] == 1000 && s1->mem[0] == 500 && s0->mem[2] == 2000 && s0->mem[5] == 4200 && s0->peak == 5000,
           "rank 0 params 1000, rank 1 params 500, optim 2000, host 4200, peak 5000");
    EXPECT(s1->ms_step == 3.0 && fabs(s1->ms_comm - 0.75) < 1e-9 && s1->sent == 1000, "rank 1's step time split and bytes");
    // Proves: the timeline gets the spans of the last step that has its step event.
    const RunSpans *sp = runview_spans(&v, 1, runview_timeline_step(&v));
    EXPECT(runview_timeline_step(&v) == 10 && sp && sp->n == 2 && strcmp(sp->items[1].name, "all_reduce") == 0 &&
               sp->items[0].t0_us == 10000000,
           "the timeline shows step 10's two spans on rank 1");
    // Proves: rates come from the logged step times: 512 tokens per 2 ms = 256000 tokens/s.
    EXPECT_NEAR(runview_tokens_per_s(&v, 20), 512 / 0.002, 1e-6, "tokens/s = batch x seq / rank 0's mean step time");
    EXPECT(runview_ended(&v) && v.malformed == 0, "both ranks ended, nothing malformed");
    runview_free(&v);
}

static void test_live_pieces(void) {
    write_run(0);
    RunView v;
    char err[256], line[1024];
    runview_open(&v, tmp, err, sizeof err);
    // Proves: without end events the run is not over.
    EXPECT(!runview_ended(&v), "a run without end events is not ended");
    // Half a step line, then the rest: nothing until the newline, then exactly one step.
    step_line(line, sizeof line, 0, 11, 1.9, 2.0, 1000, 300, 5000);
    size_t half = strlen(line) / 2;
    char first[1024];
    snprintf(first, sizeof first, "%.*s", (int)half, line);
    write_file("rank-0.jsonl", first, "a");
    runview_poll(&v, 1000000);
    EXPECT(v.nloss == 10 && v.malformed == 0, "half a line is held back, not counted as bad (%zu steps, %ld bad)", v.nloss,
           v.malformed);
    write_file("rank-0.jsonl", line + half, "a");
    runview_poll(&v, 1500000);
    EXPECT(v.nloss == 11 && v.loss[10].loss > 1.89 && v.malformed == 0, "the rest of the line completes step 11");
    // A line cut off for good: counted once it has not grown for RUN_PARTIAL_S.
    write_file("rank-0.jsonl", "{\"ev\":\"step\",\"rank\":0,\"st", "a");
    runview_poll(&v, 2000000);
    runview_poll(&v, 2000000 + (RUN_PARTIAL_S - 1) * 1000000LL);
    EXPECT(v.malformed == 0, "a cut line is not given up before %d s", RUN_PARTIAL_S);
    runview_poll(&v, 2000000 + (RUN_PARTIAL_S + 1) * 1000000LL);
    EXPECT(v.malformed == 1 && strstr(v.problem, "cut off"), "after %d s the cut line counts as malformed: %s", RUN_PARTIAL_S,
           v.problem);
    // End events arrive: now it is over.
    write_file("rank-0.jsonl", "\n{\"ev\":\"end\",\"rank\":0,\"status\":\"ok\",\"steps\":11}\n", "a");
    write_file("rank-1.jsonl", "{\"ev\":\"error\",\"rank\":1,\"msg\":\"boom\"}\n{\"ev\":\"end\",\"rank\":1,\"status\":\"error\",\"steps\":10}\n", "a");
    runview_poll(&v, 9000000);
    EXPECT(runview_ended(&v) && strcmp(v.ranks[1].error, "boom") == 0 && strcmp(v.ranks[1].status, "error") == 0,
           "end and error events are read");
    // Proves: the dashboard's word for the run follows the events.
    EXPECT(strcmp(dash_status(&v, 9000000), "failed") == 0, "a rank's error makes the run 'failed' (%s)", dash_status(&v, 9000000));
    runview_free(&v);
}

static void test_bad_lines(void) {
    write_run(1);
    const char *bad[] = {
        "not json at all",
        "{\"ev\":\"step\",\"rank\":0}",                            // JSON, but not a step event
        "{\"rank\":0,\"ev\":\"end\",\"status\":\"ok\",\"steps\":1}",  // "ev" not first
        "{\"ev\":\"end\",\"rank\":1,\"status\":\"ok\",\"steps\":1}",  // rank 1's event in rank 0's file
        "{\"ev\":\"span\",\"rank\":0,\"step\":1,\"name\":\"fwd\",\"mb\":0,\"layer\":0,\"t0_us\":5,\"t1_us\":4,\"bytes\":0}",
        "{\"ev\":\"step\",\"rank\":0,\"step\":1e300,\"loss\":1}",
        "\xff\xfe{}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_file("rank-0.jsonl", bad[i], "a");
        write_file("rank-0.jsonl", "\n\n", "a");  // a blank line is nothing
    }
    RunView v;
    char err[256];
    runview_open(&v, tmp, err, sizeof err);
    // Proves: every bad line is skipped and counted, blank lines are not, and the good events
    // around them are still read.
    EXPECT(v.malformed == (long)(sizeof bad / sizeof bad[0]) && v.nloss == 10,
           "%zu bad lines counted exactly (%ld), the 10 good steps kept (%zu)", sizeof bad / sizeof bad[0], v.malformed, v.nloss);
    EXPECT(strstr(v.problem, "rank-0.jsonl line ") != NULL, "the first problem names the file and line: %s", v.problem);
    runview_free(&v);
    // A file that shrinks (rewritten from the start) is read again from the start.
    write_run(1);
    runview_open(&v, tmp, err, sizeof err);
    write_file("rank-0.jsonl",
               "{\"ev\":\"start\",\"rank\":0,\"world\":2,\"lab\":\"zero\",\"device\":\"cpu\",\"backend\":\"shm\","
               "\"params\":100,\"config\":{},\"loss_floor\":null}\n",
               "w");
    char line[1024];
    step_line(line, sizeof line, 0, 1, 3.25, 1.0, 1, 1, 2);
    write_file("rank-0.jsonl", line, "a");
    runview_poll(&v, 1);
    EXPECT(v.nloss == 1 && v.loss[0].loss == 3.25, "a truncated and rewritten file is read from its start (%zu points)", v.nloss);
    runview_free(&v);
    // Bad meta.json and summary.json: said once, nothing read from them.
    write_file("meta.json", "{\"lab\":", "w");
    write_file("summary.json", "[1,2", "w");
    runview_open(&v, tmp, err, sizeof err);
    EXPECT(!v.has_meta && v.meta_bad && v.has_summary == -1 && strstr(v.problem, "meta.json"),
           "a broken meta.json and summary.json are reported, not read: %s", v.problem);
    runview_free(&v);
}

static void test_open_errors_and_latest(void) {
    RunView v;
    char err[256], out[512];
    // Proves: what is not a run directory is refused with a reason naming the path.
    EXPECT(runview_open(&v, "/nonexistent/run", err, sizeof err) == -1 && strstr(err, "/nonexistent/run"),
           "a missing directory: %s", err);
    EXPECT(runview_open(&v, "/etc/hostname", err, sizeof err) == -1 && strstr(err, "not a directory"), "a file: %s", err);
    char empty[300];
    snprintf(empty, sizeof empty, "%s/empty", tmp);
    mkdir(empty, 0755);
    EXPECT(runview_open(&v, empty, err, sizeof err) == -1 && strstr(err, "not a run directory"), "an empty directory: %s", err);
    // The newest run is the one whose meta.json changed last.
    char runs[300], a[400], b[400];
    snprintf(runs, sizeof runs, "%s/runs", tmp);
    mkdir(runs, 0755);
    EXPECT(runview_latest_run(runs, out, sizeof out, err, sizeof err) == -1 && strstr(err, "no run"), "no runs yet: %s", err);
    snprintf(a, sizeof a, "%s/ddp-a", runs), snprintf(b, sizeof b, "%s/ddp-b", runs);
    mkdir(a, 0755), mkdir(b, 0755);
    char path[450];
    snprintf(path, sizeof path, "%s/meta.json", b);
    FILE *f = fopen(path, "w");
    fclose(f);
    struct timespec old[2] = {{1000, 0}, {1000, 0}};
    utimensat(AT_FDCWD, path, old, 0);  // b's run is older
    snprintf(path, sizeof path, "%s/meta.json", a);
    f = fopen(path, "w");
    fclose(f);
    EXPECT(runview_latest_run(runs, out, sizeof out, err, sizeof err) == 0 && strcmp(out, a) == 0, "the newest run is %s (%s)", a,
           out);
    // A run that ended before it started (no meta.json; the launcher ended its log) is newer
    // but nobody's newest run; one still starting (no meta.json yet, no end) is.
    char c[400];
    snprintf(c, sizeof c, "%s/ddp-c", runs);
    mkdir(c, 0755);
    snprintf(path, sizeof path, "%s/rank-0.jsonl", c);
    f = fopen(path, "w");
    fputs("{\"ev\":\"error\",\"rank\":0,\"msg\":\"rank 0 failed (exit 2)\"}\n{\"ev\":\"end\",\"rank\":0,\"status\":\"error\",\"steps\":0}\n", f);
    fclose(f);
    EXPECT(runview_latest_run(runs, out, sizeof out, err, sizeof err) == 0 && strcmp(out, a) == 0,
           "a run that never started is not the newest run (%s)", out);
    f = fopen(path, "w");
    fclose(f);
    EXPECT(runview_latest_run(runs, out, sizeof out, err, sizeof err) == 0 && strcmp(out, c) == 0,
           "a run still starting is the newest run (%s)", out);
}

static void test_reference(void) {
    // The reference run is another directory; the run names it in its config ("ref").
    char ref[300], cmd[1024];
    write_run(1);
    snprintf(ref, sizeof ref, "%s/ref", tmp);
    snprintf(cmd, sizeof cmd, "mkdir -p %s && cp %s/*.json* %s/", ref, tmp, ref);
    EXPECT(system(cmd) == 0, "a finished run copied to %s as the reference", ref);
    char meta[600];
    snprintf(meta, sizeof meta,
             "{\"lab\":\"zero\",\"argv\":[],\"world_size\":2,\"device\":\"cpu\",\"backend\":\"shm\",\"config\":{\"steps\":20,"
             "\"ref\":\"%s\"},\"start_time\":\"x\",\"start_unix_us\":1}",
             ref);
    write_file("meta.json", meta, "w");
    RunView v;
    char err[256];
    runview_open(&v, tmp, err, sizeof err);
    // Proves: the reference curve is read from the directory the config names.
    EXPECT(v.nref == 10 && v.ref[9].loss < 2.3 && strcmp(v.ref_dir, ref) == 0, "the reference's 10 losses are read (%zu)", v.nref);
    runview_free(&v);
    write_file("meta.json",
               "{\"lab\":\"zero\",\"argv\":[],\"world_size\":2,\"device\":\"cpu\",\"backend\":\"shm\",\"config\":{\"ref\":"
               "\"/nonexistent/ref\"},\"start_time\":\"x\",\"start_unix_us\":1}",
               "w");
    runview_open(&v, tmp, err, sizeof err);
    // Proves: a reference that cannot be read is reported, and the run still shows.
    EXPECT(v.nref == 0 && strstr(v.ref_problem, "/nonexistent/ref") && v.nloss == 10, "a missing reference is reported: %s",
           v.ref_problem);
    runview_free(&v);
}

// The frame drawn from the crafted run: the figures must be the run's.
static void test_frame(void) {
    write_run(1);
    RunView v;
    char err[256];
    runview_open(&v, tmp, err, sizeof err);
    Canvas c;
    canvas_init(&c, 100, 30);
    DashState s = {.panel = PANEL_MEMORY, .utf8 = 0, .color = 0};
    dash_render(&c, &v, &s);
    StrBuf sb;
    sb_init(&sb);
    canvas_to_text(&c, &sb);
    // The memory bar of rank 0 is on the row after "r0 "; scale = the largest peak or total
    // over the ranks: rank 0 holds 1000+1000+2000+300+0+4200 = 8500 bytes (peak 5000), so its
    // params take round(93 * 1000 / 8500) = 11 (10.94) of the bar's 93 columns.
    const char *r0 = strstr(sb.data, "\nr0 ");
    if (!r0) r0 = strstr(sb.data, " r0 ");
    const char *bar = r0 ? strchr(r0 + 1, '\n') : NULL;
    int p = 0, o = 0, h = 0;
    for (const char *q = bar ? bar + 1 : ""; *q && *q != '\n'; q++) p += *q == 'P', o += *q == 'O', h += *q == 'H';
    int w = 100 - 7;
    double scale = 1000 + 1000 + 2000 + 300 + 0 + 4200;
    if (scale < 5000) scale = 5000;
    // Proves: each category's columns are its bytes to scale (independent rounding).
    EXPECT(p == (int)lround(w * 1000 / scale) && o == (int)lround(w * 2000 / scale) && h == (int)lround(w * 4200 / scale),
           "rank 0's bar: params %d, optim %d, host %d columns (expected %ld, %ld, %ld)", p, o, h, lround(w * 1000 / scale),
           lround(w * 2000 / scale), lround(w * 4200 / scale));
    EXPECT(strstr(sb.data, "params 1000 B") != NULL, "the byte figures are printed");
    sb_free(&sb);
    canvas_free(&c);
    runview_free(&v);
}

// Fixed-seed fuzzing: mutations of real event lines, and random bytes.
static void test_fuzz(void) {
    FILE *f = fopen("tests/fuzz/seeds/events.jsonl", "rb");
    char seed[8192];
    size_t seed_len = f ? fread(seed, 1, sizeof seed, f) : 0;
    if (f) fclose(f);
    EXPECT(seed_len > 1000, "the seed events are there (%zu bytes; run from the repository root)", seed_len);
    char scratch[300];
    snprintf(scratch, sizeof scratch, "%s/fuzz", tmp);
    mkdir(scratch, 0755);
    Rng rng;
    rng_seed(&rng, 20261121);
    uint8_t buf[9000];
    int runs = 0;
    for (int i = 0; i < 6000; i++, runs++) {
        size_t n;
        if (i % 4 == 3) {  // random bytes, biased to JSON's alphabet
            n = rng_u64(&rng) % 600;
            const char *alpha = "{}[]\":,0123456789.-eEtruefalsnl \n\x01\\abc";
            for (size_t k = 0; k < n; k++)
                buf[k] = rng_u64(&rng) % 8 ? (uint8_t)alpha[rng_u64(&rng) % strlen(alpha)] : (uint8_t)rng_u64(&rng);
        } else {  // a real log, cut and mutated
            n = seed_len ? rng_u64(&rng) % seed_len : 0;
            memcpy(buf, seed + (seed_len ? rng_u64(&rng) % (seed_len - n + 1) : 0), n);
            int edits = 1 + (int)(rng_u64(&rng) % 8);
            for (int e = 0; e < edits && n; e++) {
                size_t at = rng_u64(&rng) % n;
                switch (rng_u64(&rng) % 4) {
                case 0: buf[at] = (uint8_t)rng_u64(&rng); break;            // flip a byte
                case 1: buf[at] = (uint8_t)"0123456789"[rng_u64(&rng) % 10]; break;
                case 2: n = at; break;                                       // cut
                default: buf[at] = '\n'; break;                              // split a line
                }
            }
        }
        fuzz_runread_one(buf, n, scratch);
    }
    // Proves: (with ASan and UBSan watching) no input crashed, leaked or misbehaved.
    EXPECT(runs == 6000, "6000 fuzz inputs read and drawn without a crash");
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-runread-XXXXXX");
    if (!mkdtemp(tmp)) return perror("mkdtemp"), 1;
    test_reads_a_run();
    test_live_pieces();
    test_bad_lines();
    test_open_errors_and_latest();
    test_reference();
    test_frame();
    test_fuzz();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return test_done();
}
