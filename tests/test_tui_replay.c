// test_tui_replay.c — the dashboard's figures against runs with known numbers, drawn in a
// terminal (tmux, NO_COLOR=1; see tuitest.h) and printed with --dump.
//
// usage: test_tui_replay SHARDLAB LABS_DIR   (as test_tui)
// Checked:
//   6. a run directory written here with known numbers, replayed in tmux (NO_COLOR=1) and with
//      --dump: the chart's labels and legend, the memory bars' lengths and byte figures, the
//      timeline's order and its busy and hidden percentages, all computed here;
//   7. malformed event lines are skipped and counted exactly, a line cut in the middle only
//      after RUN_PARTIAL_S (2 s) without growth, and the good events are still drawn;
//   8. `shardlab tui` on a file, a missing or empty directory, or with --width 10: exit 2, one
//      line.
#include "canvas.h"
#include "tuitest.h"

// ---- 6. a run with known numbers, replayed -----------------------------------------------

// What the crafted run holds. Memory per rank by category (params, grads, optim, acts, comm)
// and peak; rank 1 holds half of rank 0's parameters, gradients and optimizer state.
static const double MEM[2][5] = {{1000000, 1000000, 2000000, 3000000, 500000}, {500000, 500000, 1000000, 3000000, 500000}};
static const double PEAK[2] = {9000000, 6000000};
static const char MEM_LETTER[5] = {'P', 'G', 'O', 'A', 'C'};
// The spans of step 50, in microseconds after T0: fwd, then bwd, an all-reduce overlapping
// the end of bwd, then optim.
#define T0 1767225601000000LL
static const struct {
    const char *name;
    int t0, t1;
} SPANS[2][4] = {
    {{"fwd", 0, 1000}, {"bwd", 1000, 3000}, {"all_reduce", 2000, 3400}, {"optim", 3600, 4000}},
    {{"fwd", 100, 1200}, {"bwd", 1200, 2800}, {"all_reduce", 2500, 3700}, {"optim", 3750, 3900}},
};
#define STEPS 50

static double crafted_loss(int step) { return 4.0 - 2.0 * (step - 1) / (STEPS - 1); }  // 4.0 -> 2.0

static void step_line(StrBuf *sb, int r, int step, double loss) {
    sb_printf(sb,
              "{\"ev\":\"step\",\"rank\":%d,\"step\":%d,\"loss\":%.17g,\"lr\":0.001,\"tokens\":32,"
              "\"ms\":{\"step\":10,\"compute\":8,\"comm\":2},\"bytes\":{\"sent\":1000,\"recv\":1000},"
              "\"mem\":{\"params\":%.0f,\"grads\":%.0f,\"optim\":%.0f,\"acts\":%.0f,\"comm\":%.0f,\"peak\":%.0f},"
              "\"param_hash\":\"0123456789abcdef\"}\n",
              r, step, loss, MEM[r][0], MEM[r][1], MEM[r][2], MEM[r][3], MEM[r][4], PEAK[r]);
}

static void write_meta(const char *dir, int steps) {
    char path[PATH_MAX + 32], text[1024];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    snprintf(text, sizeof text,
             "{\"lab\":\"ddp\",\"argv\":[\"ddp\"],\"world_size\":2,\"device\":\"cpu\",\"backend\":\"shm\","
             "\"config\":{\"steps\":%d,\"batch\":4,\"seq\":8},\"start_time\":\"2026-01-01T00:00:00Z\","
             "\"start_unix_us\":%lld}\n",
             steps, T0 - 1000000);
    write_text(path, "w", text);
}

static void start_line(StrBuf *sb, int r, int steps) {
    sb_printf(sb,
              "{\"ev\":\"start\",\"rank\":%d,\"world\":2,\"lab\":\"ddp\",\"device\":\"cpu\",\"backend\":\"shm\","
              "\"params\":250000,\"config\":{\"steps\":%d,\"batch\":4,\"seq\":8},\"loss_floor\":1.5}\n",
              r, steps);
}

// group: the all-reduce's span group ("dp": between replicas, as tp --dp logs it), or NULL.
// waited: > 0, rank 0 waited for its all-reduce from T0 + waited to the all-reduce's end.
static void write_crafted_group(const char *dir, const char *group, int waited) {
    mkdir(dir, 0755);
    write_meta(dir, STEPS);
    for (int r = 0; r < 2; r++) {
        StrBuf sb;
        sb_init(&sb);
        start_line(&sb, r, STEPS);
        for (int step = 1; step <= STEPS; step++) {
            if (step == STEPS)  // a step's spans come before its step event
                for (int k = 0; k < 4; k++)
                    sb_printf(&sb,
                              "{\"ev\":\"span\",\"rank\":%d,\"step\":%d,\"name\":\"%s\",\"mb\":0,\"layer\":-1,"
                              "\"t0_us\":%lld,\"t1_us\":%lld,\"bytes\":%d%s%s%s",
                              r, step, SPANS[r][k].name, T0 + SPANS[r][k].t0, T0 + SPANS[r][k].t1, k == 2 ? 1000 : 0,
                              k == 2 && group ? ",\"group\":\"" : "", k == 2 && group ? group : "", k == 2 && group ? "\"" : ""),
                    sb_printf(&sb, k == 2 && r == 0 && waited > 0 ? ",\"waited_from_us\":%lld}\n" : "}\n", T0 + waited);
            step_line(&sb, r, step, crafted_loss(step));
        }
        sb_printf(&sb, "{\"ev\":\"end\",\"rank\":%d,\"status\":\"ok\",\"steps\":%d}\n", r, STEPS);
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, r);
        write_text(path, "w", sb.data);
        sb_free(&sb);
    }
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/summary.json", dir);
    write_text(path, "w",
               "{\"lab\":\"ddp\",\"status\":\"ok\",\"world_size\":2,\"steps\":50,\"first_loss\":4,\"final_loss\":2,"
               "\"loss_floor\":1.5,\"tokens\":3200,\"wall_s\":1,\"tokens_per_s\":3200,\"param_hash\":\"0123456789abcdef\","
               "\"mem_peak\":9000000}\n");
}

static void write_crafted(const char *dir) { write_crafted_group(dir, NULL, 0); }

static int count_of(const char *text, const char *glyph) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, glyph)); p += strlen(glyph)) n++;
    return n;
}

static void exact_times(int r, double *busy, double *hidden);

// The overview of the crafted run at 120x36 (banner on row 3, so the chart starts on row 4).
static void check_overview(const char *how, const char *frame) {
    char line[1024];
    // Proves: the y axis spans the highest loss (4.0, step 1) down to the floor (1.5, below
    // every loss): the top label on the chart's first row, the bottom one further down.
    int top = find_line(frame, "   4.000"), bottom = find_line(frame, "   1.500");
    EXPECT(top == 4 && bottom > top, "%s: the chart's top label '   4.000' on its first row (%d), bottom '   1.500' below (%d)",
           how, top, bottom);
    // Proves: the legend shows rank 0's last loss and the floor from the start event.
    EXPECT(strstr(frame, "loss 2.0000 (step 50)") && strstr(frame, "floor 1.5000"),
           "%s: the legend says 'loss 2.0000 (step 50)' and 'floor 1.5000'", how);
    // Proves: the header and the banner read meta.json, the events and summary.json.
    EXPECT(strstr(line_at(frame, 0, line, sizeof line), "ddp") && strstr(line, "2 ranks") && strstr(line, "FINISHED") &&
               strstr(frame, "step 50/50") && strstr(frame, "finished: 50 steps, loss 4.0000 -> 2.0000 (floor 1.5000)"),
           "%s: header 'ddp, 2 ranks, FINISHED, step 50/50' and the finished banner", how);
    // Proves: each rank's row has its step and its memory in use / peak (7.5 MB / 9 MB).
    EXPECT(strstr(frame, "7.15 MiB / 8.58 MiB") && strstr(frame, "5.25 MiB / 5.72 MiB"),
           "%s: the rows say r0 '7.15 MiB / 8.58 MiB' and r1 '5.25 MiB / 5.72 MiB'", how);
    // Proves: a still frame's footer names the run, not keys nobody can press (the --dump one).
    if (strstr(how, "--dump"))
        EXPECT(!strstr(frame, "q quit") && strstr(frame, "\n run ") && strstr(frame, "crafted"),
               "%s: the footer names the run instead of the keys", how);
    // Proves: the step-time bar's legend names the communication both ways, with rank 0's in
    // all from the timeline's spans (its hidden share as the timeline panel computes it).
    double busy, hidden;
    exact_times(0, &busy, &hidden);
    char want[80];
    snprintf(want, sizeof want, "ms in all, %.0f%% hidden", 100 * hidden);
    EXPECT(strstr(frame, "communication the step waited for (exposed)") && strstr(frame, "hidden behind compute") &&
               strstr(frame, want),
           "%s: the overview names exposed and hidden communication, r0 '%s'", how, want);
    // Proves: the bars' heading names what the bar's '~' is, communication (ms.comm, as the
    // legend below and tui/README.md's frame say), in the words that README quotes (broken
    // variant: "~wait" over bars the README calls "~comm").
    const char *heading = " rank  step  ms/step  =compute ~comm sent/step   memory by category, to scale";
    char *readme = read_file("tui/README.md", NULL);
    EXPECT(strstr(frame, heading) && readme && strstr(readme, heading), "%s: the rows' heading '%s', as tui/README.md shows it",
           how, heading);
    free(readme);
}

// The memory panel at width 120: each rank's bar starts at column 5 and is w = 113 wide.
static void check_memory(const char *how, const char *frame, int ascii) {
    const int w = 120 - 7;
    double scale = 0;  // the max over ranks of max(peak, sum of categories)
    for (int r = 0; r < 2; r++) {
        double sum = 0;
        for (int k = 0; k < 5; k++) sum += MEM[r][k];
        scale = fmax(scale, fmax(sum, PEAK[r]));
    }
    // Proves: the title names the scale: 9,000,000 bytes = 8.58 MiB fill the width.
    EXPECT(strstr(frame, "full width = 8.58 MiB") != NULL, "%s: the memory panel's full width is 8.58 MiB", how);
    for (int r = 0; r < 2; r++) {
        char prefix[32], bar[1024], labels[1024], got[128] = "", want[128] = "";
        snprintf(prefix, sizeof prefix, " r%d  in use", r);
        int i = find_line(frame, prefix);
        line_at(frame, i + 1, bar, sizeof bar);
        line_at(frame, i + 2, labels, sizeof labels);
        int ok = i >= 0 && strncmp(bar, "     P", 6) == 0, cells = 0;
        for (int k = 0; k < 5; k++) {
            int n = (int)lround(w * MEM[r][k] / scale);
            char letter[2] = {MEM_LETTER[k], 0};
            int seen = count_of(bar, letter);
            ok &= seen == n;
            cells += n;
            snprintf(want + strlen(want), sizeof want - strlen(want), "%c%d ", MEM_LETTER[k], n);
            snprintf(got + strlen(got), sizeof got - strlen(got), "%c%d ", MEM_LETTER[k], seen);
        }
        int headroom = (int)lround(w * PEAK[r] / scale) - cells, seen = count_of(bar, ascii ? "." : "\xe2\x96\x91");
        ok &= seen == headroom;
        snprintf(want + strlen(want), sizeof want - strlen(want), "headroom %d", headroom);
        snprintf(got + strlen(got), sizeof got - strlen(got), "headroom %d", seen);
        // Proves: the bar is to scale: category k takes round(w * bytes_k / scale) columns
        // from column 5 on, then the transient part up to round(w * peak / scale).
        if (!EXPECT(ok, "%s: r%d's memory bar is %s (counted %s)", how, r, want, got)) printf("#   |%s\n", bar);
        // Proves: the figures under the bar are the bytes of the events (1e6 B = 976.6 KiB,
        // rank 1 holding half of rank 0's parameters).
        snprintf(want, sizeof want, "params %s", r == 0 ? "976.6 KiB" : "488.3 KiB");
        EXPECT(strstr(labels, want) && strstr(labels, r == 0 ? "optim 1.91 MiB" : "optim 976.6 KiB") &&
                   strstr(labels, "acts 2.86 MiB") && strstr(labels, "comm 488.3 KiB"),
               "%s: r%d's figures say '%s', optim, acts and comm (%s)", how, r, want, labels);
    }
}

// Busy and hidden of rank r's spans, exactly, by marking every microsecond: busy is the time
// covered by any span over the time from the first span of any rank to the last (t0..t1 of
// the step); hidden is the communication time during which the rank also computed, over
// the communication time.
static void exact_times(int r, double *busy, double *hidden) {
    int lo = 1 << 30, hi = 0;
    for (int q = 0; q < 2; q++)
        for (int k = 0; k < 4; k++) lo = SPANS[q][k].t0 < lo ? SPANS[q][k].t0 : lo, hi = SPANS[q][k].t1 > hi ? SPANS[q][k].t1 : hi;
    int any = 0, comm = 0, both = 0;
    for (int t = lo; t < hi; t++) {
        int c = 0, m = 0;
        for (int k = 0; k < 4; k++) {
            int in = t >= SPANS[r][k].t0 && t < SPANS[r][k].t1;
            if (strcmp(SPANS[r][k].name, "all_reduce") == 0) m |= in;
            else c |= in;
        }
        any += c || m, comm += m, both += c && m;
    }
    *busy = (double)any / (hi - lo), *hidden = (double)both / comm;
}

static void check_timeline(const char *how, const char *frame) {
    // Proves: the timeline shows step 50, from the first span (rank 0's fwd) to the last
    // (rank 0's optim): 4 ms.
    EXPECT(strstr(frame, "step 50: 4.000 ms from the first span to the last") != NULL, "%s: the timeline spans step 50's 4.000 ms",
           how);
    for (int r = 0; r < 2; r++) {
        char prefix[32], comp[1024], comm[1024], busy_text[32], hidden_text[32];
        snprintf(prefix, sizeof prefix, " r%d  compute", r);
        int i = find_line(frame, prefix);
        line_at(frame, i, comp, sizeof comp);
        line_at(frame, i + 1, comm, sizeof comm);
        char *f1 = strchr(comp, 'F'), *f2 = strrchr(comp, 'F'), *b1 = strchr(comp, 'B'), *o1 = strchr(comp, 'O');
        // Proves: on the compute line fwd comes first, then bwd, then optim, in time order.
        EXPECT(i >= 0 && f1 && b1 && o1 && f2 < b1 && strrchr(comp, 'B') < o1, "%s: r%d's compute line is F... then B... then O (%s)",
               how, r, comp);
        // Proves: the all-reduce is on its own line (communication), starting inside bwd.
        EXPECT(strchr(comm, 'A') && !strchr(comp, 'A') && strchr(comm, 'A') - comm > b1 - comp,
               "%s: r%d's comm line has the all-reduce, starting after bwd did (%s)", how, r, comm);
        double busy, hidden;
        exact_times(r, &busy, &hidden);
        snprintf(busy_text, sizeof busy_text, "busy %3.0f%%", 100 * busy);
        snprintf(hidden_text, sizeof hidden_text, "%3.0f%% hidden", 100 * hidden);
        // Proves: the percentages are exact interval arithmetic on the spans (r0: 3800 of
        // 4000 us busy, 1000 of 1400 us of comm hidden; r1: 3750 of 4000, 300 of 1200).
        EXPECT(strstr(comp, busy_text) && strstr(comm, hidden_text), "%s: r%d says '%s' and '%s'", how, r, busy_text, hidden_text);
    }
}

static char *dump(const char *dir, const char *panel, int ascii) {
    int rc = ascii ? run_shardlab("dump", "tui", dir, "--dump", "--width", "120", "--height", "36", "--panel", panel, "--ascii",
                                  (char *)NULL)
                   : run_shardlab("dump", "tui", dir, "--dump", "--width", "120", "--height", "36", "--panel", panel, (char *)NULL);
    char *out = captured("dump", "out");
    // Proves: --dump prints a frame without a terminal and exits 0.
    EXPECT(rc == 0 && count_lines(out) >= 10, "--dump --panel %s%s: exit 0 and a frame (exit %d)", panel, ascii ? " --ascii" : "", rc);
    return out;
}

static void test_replay(const char *dir) {
    write_crafted(dir);
    // With --dump (never colour: letters for the categories and spans).
    char *o = dump(dir, "overview", 0), *m = dump(dir, "memory", 0), *ma = dump(dir, "memory", 1), *t = dump(dir, "timeline", 0);
    check_overview("--dump", o);
    check_memory("--dump", m, 0);
    check_memory("--dump --ascii", ma, 1);
    check_timeline("--dump", t);
    // The same run with its all-reduce between replicas (group "dp"): drawn in lowercase, and
    // the legend says what that is; the run without replicas has no such entry.
    char across_dir[PATH_MAX + 16];
    snprintf(across_dir, sizeof across_dir, "%s-across", dir);
    write_crafted_group(across_dir, "dp", 0);
    char *ta = dump(across_dir, "timeline", 0), comm[1024] = "";
    int r0 = find_line(ta, " r0  compute");
    if (r0 >= 0) line_at(ta, r0 + 1, comm, sizeof comm);
    EXPECT(strchr(comm, 'a') && !strchr(comm, 'A') && strstr(ta, "a s g across replicas") && !strstr(t, "across replicas"),
           "--dump: an all-reduce between replicas is drawn 'a', named in the legend; a run without replicas has no such "
           "entry (%s)", comm);
    free(ta);
    // The same all-reduce in a context-parallel group (group "cp"): context parallelism's K/V
    // exchange, drawn 'K' whatever collective carries it, and named in the legend.
    char kv_dir[PATH_MAX + 16];
    snprintf(kv_dir, sizeof kv_dir, "%s-kv", dir);
    write_crafted_group(kv_dir, "cp", 0);
    char *tk = dump(kv_dir, "timeline", 0), kv_comm[1024] = "";
    r0 = find_line(tk, " r0  compute");
    if (r0 >= 0) line_at(tk, r0 + 1, kv_comm, sizeof kv_comm);
    EXPECT(strchr(kv_comm, 'K') && !strchr(kv_comm, 'A') && strstr(tk, "K/V blocks of attention (cp)") &&
               !strstr(t, "K/V blocks"),
           "--dump: a transfer of a context-parallel group is drawn 'K', named in the legend; a run without one has no "
           "such entry (%s)", kv_comm);
    free(tk);
    // Rank 0 waited for its all-reduce from 2800 us, inside its backward (1000..3000): those
    // 200 us are not compute, so of the all-reduce's 1400 us only 2000..2800 ran while the
    // rank computed: 57% hidden (71% if the wait counted as compute). Its compute line shows
    // the wait (2800..3400) as dots after its B, and the legend says what they are; rank 1
    // (no wait) keeps 25%.
    char wait_dir[PATH_MAX + 16];
    snprintf(wait_dir, sizeof wait_dir, "%s-wait", dir);
    write_crafted_group(wait_dir, NULL, 2800);
    char *tw = dump(wait_dir, "timeline", 0), w_comp[1024] = "", w_comm[1024] = "", w1_comm[1024] = "";
    r0 = find_line(tw, " r0  compute");
    if (r0 >= 0) line_at(tw, r0, w_comp, sizeof w_comp), line_at(tw, r0 + 1, w_comm, sizeof w_comm),
                 line_at(tw, r0 + 3, w1_comm, sizeof w1_comm);
    EXPECT(strstr(w_comm, " 57% hidden") && strstr(w1_comm, " 25% hidden") && strstr(w_comp, "B\u00b7") &&
               strstr(tw, "waiting for communication") && !strstr(t, "waiting for communication"),
           "--dump: a wait inside a compute span is dotted on the compute line and not counted as hidden (r0: "
           "'%s', '%s'; r1: '%s')", w_comp, w_comm, w1_comm);
    free(tw);
    free(o), free(m), free(ma), free(t);
    if (!have_tmux) return;

    // In a terminal, without colour.
    const char *s = "replay";
    char args[PATH_MAX + 16];
    snprintf(args, sizeof args, "tui '%s'", dir);
    start_view(s, "NO_COLOR=1", args);
    static const struct {
        const char *key, *text, *what;
    } views[] = {
        {"1", "rank  step  ms/step", "overview"},
        {"2", "device memory each rank holds", "memory"},
        {"3", "from the first span to the last", "timeline"},
    };
    for (int i = 0; i < 3; i++) {
        tmux("send-keys -t %s %s", s, views[i].key);
        char how[64];
        snprintf(how, sizeof how, "tmux, NO_COLOR=1, %s", views[i].what);
        // Proves: in a replay too, the key opens the panel it names.
        if (!EXPECT(wait_text(s, views[i].text, 15), "%s: key %s shows '%s'", how, views[i].key, views[i].text)) show_screen(how);
        char *frame = strdup(screen);
        if (i == 0) check_overview(how, frame);
        else if (i == 1) check_memory(how, frame, 0);
        else check_timeline(how, frame);
        free(frame);
    }
    tmux("send-keys -t %s q", s);
    // Proves: q quits a replay with exit 0.
    EXPECT(wait_rc(s, 10) == 0, "tmux replay: q -> exit 0");
}

// ---- 7. malformed lines -------------------------------------------------------------------

// A run whose rank-0.jsonl has, among 10 good steps (loss 3.0, 2.9, ... 2.1), five lines to
// skip: not JSON; JSON cut short; JSON that is an array; an event missing its fields; a
// good event that says "rank":1 (step 11, loss 0.5: drawn, it would show). A blank line is
// nothing (not counted). With cut = 1 the file ends in half a line.
#define BAD_LINES 5
#define FIRST_BAD_LINE 4  // the start event and steps 1 and 2 come first

static void write_malformed(const char *dir, int cut) {
    mkdir(dir, 0755);
    write_meta(dir, 20);
    for (int r = 0; r < 2; r++) {
        StrBuf sb;
        sb_init(&sb);
        start_line(&sb, r, 20);
        for (int step = 1; step <= 10; step++) {
            step_line(&sb, r, step, 3.0 - 0.1 * (step - 1));
            if (r != 0) continue;
            if (step == 2) sb_printf(&sb, "this is not JSON\n");
            if (step == 3) sb_printf(&sb, "{\"ev\":\"step\",\"rank\":0,\"step\":\n\n");
            if (step == 4) sb_printf(&sb, "[1,2,3]\n");
            if (step == 5) sb_printf(&sb, "{\"ev\":\"step\",\"rank\":0}\n");
        }
        if (r == 0) step_line(&sb, 1, 11, 0.5);
        if (r == 0 && cut) sb_printf(&sb, "{\"ev\":\"step\",\"rank\":0,\"step\":12,\"lo");
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, r);
        write_text(path, "w", sb.data);
        sb_free(&sb);
    }
}

static void test_malformed(const char *dir_cut, const char *dir_whole) {
    char want[64], want_after[64];
    snprintf(want, sizeof want, " %d malformed lines skipped", BAD_LINES);
    snprintf(want_after, sizeof want_after, " %d malformed lines skipped", BAD_LINES + 1);
    write_malformed(dir_cut, 1);
    double written = now_s();

    // --dump reads the files once: half a line is kept, not yet given up.
    run_shardlab("dump", "tui", dir_cut, "--dump", "--width", "120", "--height", "36", (char *)NULL);
    char *out = captured("dump", "out");
    // Proves: bad lines are skipped and counted exactly (a blank line is not one), and the
    // good events around them are still drawn: the last good step of rank 0, not the
    // wrong-rank event's step 11.
    EXPECT(strstr(out, want) && strstr(out, "loss 2.1000 (step 10)") && !strstr(out, "step 11"),
           "malformed, --dump: '%s' and the legend 'loss 2.1000 (step 10)'", want);
    free(out);
    run_shardlab("dump", "tui", dir_cut, "--dump", "--width", "120", "--height", "36", "--panel", "log", (char *)NULL);
    out = captured("dump", "out");
    char first[64];
    snprintf(first, sizeof first, "skipped: rank-0.jsonl line %d:", FIRST_BAD_LINE);
    // Proves: the log panel says where the first bad line is.
    EXPECT(strstr(out, first) != NULL, "malformed, --dump --panel log: '%s'", first);
    free(out);
    if (!have_tmux) return;

    // A file that already ends in half a line when the view opens: not given up before 2 s.
    const char *s = "bad1";
    char args[PATH_MAX + 16];
    snprintf(args, sizeof args, "tui '%s'", dir_cut);
    start_view(s, NULL, args);
    int drawn = wait_text(s, "malformed line", 10);
    double at = now_s() - written;
    int before = on_screen(want);
    // Proves: half a line is not counted while it may still be completed (RUN_PARTIAL_S).
    if (!EXPECT(drawn && (before || at > 2.0), "malformed, opened with a cut last line: '%s' in the first frame, %.2f s after "
                "the file was written (at most 2 s: it may still grow)", want, at))
        show_screen("first frame");
    // Proves: once the file has not grown for 2 s, the cut line counts too; the good events
    // are still drawn.
    EXPECT(wait_text(s, want_after, 10) && on_screen("loss 2.1000 (step 10)"), "malformed, opened with a cut last line: then '%s'",
           want_after);
    tmux("send-keys -t %s q", s);
    // Proves: the bad lines did not crash the view (the sanitizer would exit non-zero).
    EXPECT(wait_rc(s, 10) == 0, "malformed, opened with a cut last line: the view did not crash, q -> exit 0");

    // A file followed while half a line is appended: counted 2 s after it stopped growing.
    s = "bad2";
    write_malformed(dir_whole, 0);
    snprintf(args, sizeof args, "tui '%s'", dir_whole);
    start_view(s, NULL, args);
    int shown = wait_text(s, want, 10) && wait_text(s, "loss 2.1000 (step 10)", 5);
    // Proves: in a terminal as in --dump, the bad lines are counted and the good ones drawn.
    EXPECT(shown, "malformed, followed: '%s' and the good events drawn", want);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/rank-0.jsonl", dir_whole);
    StrBuf sb;
    sb_init(&sb);
    step_line(&sb, 0, 11, 2.0);
    sb_printf(&sb, "{\"ev\":\"step\",\"rank\":0,\"step\":12,\"lo");
    double appended = now_s();
    write_text(path, "a", sb.data);  // one write: step 11 and half of step 12's line
    sb_free(&sb);
    int read11 = wait_text(s, "loss 2.0000 (step 11)", 5);
    double seen11 = now_s() - appended;
    // Proves: the view read past step 11 into the half line and has not counted it yet.
    if (!EXPECT(read11 && seen11 < 2.0 && on_screen(want) && !on_screen(want_after),
                "malformed, followed: step 11 drawn %.2f s after the append, the half line not counted yet", seen11))
        show_screen("after the append");
    int counted = wait_text(s, want_after, 10);
    double given_up = now_s() - appended;
    // Proves: the half line is given up RUN_PARTIAL_S (2 s) after the file stopped growing,
    // not before, and not much later.
    if (!EXPECT(counted && given_up >= 2.0 && given_up < 5.0, "malformed, followed: '%s' %.2f s after the append (2 to 5 s)",
                want_after, given_up))
        show_screen("half line");
    tmux("send-keys -t %s q", s);
    // Proves: following a file that grows half lines did not crash the view.
    EXPECT(wait_rc(s, 10) == 0, "malformed, followed: q -> exit 0");
}

// ---- 8. bad arguments ----------------------------------------------------------------------

// A FIFO in place of a run's file (a run directory is whatever was handed in): --dump
// draws what it can and its log panel says the file was refused, at once, instead of
// waiting for a writer.
static void test_fifo(const char *good_dir) {
    static const char *const names[] = {"rank-0.jsonl", "meta.json"};
    for (int i = 0; i < 2; i++) {
        char dir[PATH_MAX], path[PATH_MAX + 32], cmd[3 * PATH_MAX + 64], name[32];
        snprintf(name, sizeof name, "fifo-%d", i);
        path_in_tmp(dir, sizeof dir, name);
        snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", dir, good_dir, dir);
        if (system(cmd) != 0) printf("# copy failed\n");
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
        if (mkfifo(path, 0644) != 0) {
            EXPECT(0, "mkfifo %s", path);
            continue;
        }
        char *argv[] = {(char *)shardlab, "tui", dir, "--dump", "--panel", "log", NULL};
        double t0 = now_s();
        pid_t pid = spawn_env(argv, "fifo", NULL);
        int status = -1;
        while (waitpid(pid, &status, WNOHANG) == 0 && now_s() - t0 < 10) usleep(20000);
        double took = now_s() - t0;
        if (took >= 10) kill(pid, SIGKILL), waitpid(pid, &status, 0);
        char *out = captured("fifo", "out"), *err = captured("fifo", "err");
        // Proves: the dump ends at once and names the file it refused.
        EXPECT(took < 5 && WIFEXITED(status) && (strstr(out, "not a regular file") || strstr(err, "not a regular file")),
               "tui --dump with a FIFO as %s: done in %.1f s, the FIFO refused (%s)", names[i], took, one_line(err));
        free(out), free(err);
    }
}

static void test_bad_args(const char *good_dir) {
    char file[PATH_MAX], missing[PATH_MAX], empty[PATH_MAX];
    path_in_tmp(file, sizeof file, "not-a-run.txt");
    path_in_tmp(missing, sizeof missing, "no-such-dir");
    path_in_tmp(empty, sizeof empty, "empty-dir");
    write_text(file, "w", "hello\n");
    mkdir(empty, 0755);
    struct {
        char *argv[8];
        const char *what, *reason;
    } cases[] = {
        {{"tui", file, "--dump"}, "a file", "not a directory"},
        {{"tui", missing, "--dump"}, "a directory that does not exist", "No such file or directory"},
        {{"tui", empty, "--dump"}, "a directory with no run in it", "not a run directory"},
        {{"tui", (char *)good_dir, "--dump", "--width", "10"}, "a run with --dump --width 10", "--width 10"},
        {{"tui", (char *)good_dir, "--dump", "--height", "5"}, "a run with --dump --height 5", "--height 5"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[10] = {shardlab};
        for (int k = 0; k < 8 && cases[i].argv[k]; k++) argv[k + 1] = cases[i].argv[k];
        int rc = run(argv, "bad");
        char *out = captured("bad", "out"), *err = captured("bad", "err");
        // Proves: a wrong argument gets exit 2 and one line on stderr that says what is wrong,
        // and no frame.
        EXPECT(rc == 2 && count_lines(err) == 1 && strstr(err, cases[i].reason) && !*out,
               "shardlab tui on %s: exit 2 and one line saying '%s' (exit %d: %s)", cases[i].what, cases[i].reason, rc,
               one_line(err));
        free(out), free(err);
    }
    if (!have_tmux) return;
    // In a terminal: the same line, before the dashboard takes the screen.
    char args[PATH_MAX + 16];
    snprintf(args, sizeof args, "tui '%s'", missing);
    start_view("badterm", NULL, args);
    int rc = wait_rc("badterm", 10);
    // Proves: in a terminal too, a missing directory is exit 2 with the reason on the screen.
    if (!EXPECT(rc == 2 && wait_text("badterm", "No such file or directory", 5), "shardlab tui on a missing directory, in a "
                "terminal: exit 2 (%d) and the reason shown", rc))
        show_screen("badterm");
}


// Text that does not fit (a narrow terminal: 80x24) loses whole clauses, never half a word:
// "peak 5.70 Mi" was what an 80-column banner showed of "peak 5.70 MiB/rank".
static void test_cut_text(void) {
    static const struct {
        int w;
        const char *text, *want;
    } cases[] = {
        {44, "finished: 20 steps, loss 5.55 -> 4.79, peak 5.70 MiB", "finished: 20 steps, loss 5.55 -> 4.79"},
        {28, "memory by category, to scale", "memory by category, to scale"},
        {24, "memory by category, to scale", "memory by category"},
        {10, "  loss 4.7928", ""},                                   // a clause that does not fit: none of it
        {12, "in use 5.00 MiB", "in use 5.00"},                      // no clause fits: before the last word
        {7, "6 checks, 0 failed", ""},                               // not half of it would show
        {10, "/a/long/path/no/spaces", "/a/long/pa"},                 // one long word: cut where it ends
        {20, "a · b · c · d · e · f · g", "a · b · c · d · e"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        Canvas c;
        canvas_init(&c, cases[i].w, 1);
        canvas_text(&c, 0, 0, -1, COLOR_NONE, 0, cases[i].text);
        StrBuf sb;
        sb_init(&sb);
        canvas_to_text(&c, &sb);
        if (sb.len && sb.data[sb.len - 1] == '\n') sb.data[--sb.len] = 0;
        EXPECT(!strcmp(sb.data ? sb.data : "", cases[i].want), "\"%s\" in %d columns: \"%s\" (got \"%s\")", cases[i].text,
               cases[i].w, cases[i].want, sb.data ? sb.data : "");
        sb_free(&sb);
        canvas_free(&c);
    }
}

int main(int argc, char **argv) {
    char runs[512];
    if (tui_test_setup(argc, argv, "test_tui_replay", runs, sizeof runs) != 0) return 2;
    double t0 = now_s();
    char crafted[600], cut[600], whole[600];
    snprintf(crafted, sizeof crafted, "%s/crafted", runs);
    snprintf(cut, sizeof cut, "%s/malformed-cut", runs);
    snprintf(whole, sizeof whole, "%s/malformed-whole", runs);
    test_cut_text();
    test_replay(crafted);
    test_malformed(cut, whole);
    test_bad_args(crafted);
    test_fifo(crafted);
    return tui_test_finish(t0);
}
