// test_tui_panels.c — the dashboard's pictures against runs with known numbers, printed with
// `shardlab tui --dump`: the collectives' bus bandwidth chart and the memory panel's columns.
//
// usage: test_tui_panels SHARDLAB LABS_DIR   (as test_tui)
// Checked:
//   1. a collectives run written here (rank 0's busbw checks, a summary with the memcpy rate):
//      each measurement's letter on the row its GB/s falls on, the sizes in log2 order and
//      spacing, the memcpy ceiling on its row, the legend, what the ceiling is and why points
//      may pass it (the web page's words), the ranks on one line; rank 1's figures not drawn;
//      no ceiling while the run has no summary; --ascii;
//   2. the memory panel on a tall terminal: each rank a column stacked by category, each
//      category exactly as many rows as its bytes round to, the sum over ranks in the title;
//      on 80x18 there is no room, and the columns are left out.
#include "tuitest.h"

// ---- crafted runs ----

// A crafted run of `lab` on 2 ranks with this config (JSON): its directory and meta.json, and
// each rank's start event into sb (start: the event's fields after the config).
static void write_meta(const char *dir, const char *lab, const char *config) {
    mkdir(dir, 0755);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/meta.json", dir);
    StrBuf sb;
    sb_init(&sb);
    sb_printf(&sb, "{\"lab\":\"%s\",\"argv\":[\"%s\"],\"world_size\":2,\"device\":\"cpu\",\"backend\":\"shm\",\"config\":%s,"
                   "\"start_time\":\"2026-01-01T00:00:00Z\",\"start_unix_us\":1767225600000000}\n", lab, lab, config);
    write_text(path, "w", sb.data);
    sb_free(&sb);
}

static void start_event(StrBuf *sb, int r, const char *lab, const char *config, const char *params) {
    sb_printf(sb, "{\"ev\":\"start\",\"rank\":%d,\"world\":2,\"lab\":\"%s\",\"device\":\"cpu\",\"backend\":\"shm\",\"params\":%s,"
                  "\"config\":%s,\"loss_floor\":%s}\n", r, lab, params, config, strcmp(lab, "collectives") ? "1.5" : "null");
}

// ---- 1. the collectives' chart -------------------------------------------------------------

// Rank 0's bus bandwidth (GB/s) at 4 B, 1 KiB and 1 MiB (log2: 2, 10, 20).
static const double SIZES[3] = {4, 1024, 1048576};
static const double AR[3] = {0, 2, 8}, AG[3] = {0, 1, 4};
#define MEMCPY 6.0

static void write_collectives(const char *dir, int with_summary, int with_end) {
    write_meta(dir, "collectives", "{}");
    char path[PATH_MAX + 32];
    for (int r = 0; r < 2; r++) {
        StrBuf sb;
        sb_init(&sb);
        start_event(&sb, r, "collectives", "{}", "0");
        for (int i = 0; i < 3; i++)
            for (int c = 0; c < 2; c++) {
                // Rank 1 measures 100 GB/s: were its checks drawn, the axis would reach 100.
                double g = r ? 100 : (c ? AG[i] : AR[i]);
                sb_printf(&sb, "{\"ev\":\"check\",\"rank\":%d,\"name\":\"%s.%.0f.busbw\",\"ok\":true,\"value\":%g,\"expect\":%g}\n",
                          r, c ? "all_gather" : "all_reduce", SIZES[i], g, g);
            }
        if (with_end) sb_printf(&sb, "{\"ev\":\"end\",\"rank\":%d,\"status\":\"ok\",\"steps\":6}\n", r);
        snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, r);
        write_text(path, "w", sb.data);
        sb_free(&sb);
    }
    if (!with_summary) return;
    snprintf(path, sizeof path, "%s/summary.json", dir);
    char text[256];
    snprintf(text, sizeof text, "{\"lab\":\"collectives\",\"status\":\"ok\",\"world_size\":2,\"steps\":6,\"memcpy_gbps\":%g,\"rows\":[]}\n",
             MEMCPY);
    write_text(path, "w", text);
}

static char *dump(const char *dir, const char *panel, const char *width, const char *height, int ascii) {
    int rc = run_shardlab("dump", "tui", dir, "--dump", "--width", width, "--height", height, "--panel", panel,
                          ascii ? "--ascii" : (char *)NULL, (char *)NULL);
    char *out = captured("dump", "out");
    // Proves: --dump prints a frame and exits 0.
    EXPECT(rc == 0 && count_lines(out) > 10, "--dump --panel %s at %sx%s%s: exit 0 and a frame (exit %d)", panel, width, height,
           ascii ? " --ascii" : "", rc);
    return out;
}

// The column of the first `letter` in line i at or after column `from` (in characters: the
// plot holds one-column glyphs), or -1.
static int column_of(const char *frame, int i, char letter, int from) {
    char line[1024];
    line_at(frame, i, line, sizeof line);
    int col = 0;
    for (const unsigned char *p = (const unsigned char *)line; *p; col++) {
        if (col >= from && *p == (unsigned char)letter) return col;
        p += *p < 0x80 ? 1 : *p < 0xe0 ? 2 : *p < 0xf0 ? 3 : 4;
    }
    return -1;
}

// Whether the character at column col of line i is the UTF-8 glyph g.
static int glyph_is(const char *frame, int i, int col, const char *g) {
    char line[1024];
    line_at(frame, i, line, sizeof line);
    const unsigned char *p = (const unsigned char *)line;
    for (int c = 0; *p && c < col; c++) p += *p < 0x80 ? 1 : *p < 0xe0 ? 2 : *p < 0xf0 ? 3 : 4;
    return *p && strncmp((const char *)p, g, strlen(g)) == 0;
}

static void check_busbw(const char *dir, const char *bare, const char *live) {
    char *frame = dump(dir, "overview", "100", "30", 0);
    int top = find_line(frame, "     8.00 \xe2\x94\xa4"), bottom = find_line(frame, "     0.00 \xe2\x94\xa4");
    // Proves: the y axis runs from 0 to the highest of rank 0's figures and the ceiling (8 GB/s;
    // rank 1's 100 GB/s are not drawn).
    if (!EXPECT(top > 0 && bottom > top + 4, "busbw: the y axis runs from 8.00 (line %d) down to 0.00 (line %d)", top, bottom))
        printf("%s", frame);
    if (top <= 0 || bottom <= top) return free(frame);
    // Proves: every measurement sits on the row its GB/s falls on (row = round((1 - g/8) x
    // rows)), all-reduce's (A) and all-gather's (G) beside each other, sizes left to right.
    int ok = 1, at[2][3];
    char why[256] = "";
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < 3; i++) {
            double g = c ? AG[i] : AR[i];
            int row = top + (int)lround((bottom - top) * (1 - g / 8));
            at[c][i] = column_of(frame, row, c ? 'G' : 'A', i ? at[c][i - 1] + 1 : 0);
            if (at[c][i] < 0 && !why[0]) snprintf(why, sizeof why, "no %c for %.0f B on line %d", c ? 'G' : 'A', SIZES[i], row), ok = 0;
        }
    EXPECT(ok, "busbw: each letter on its figure's row%s%s", why[0] ? ": " : "", why);
    if (ok) {
        // Log2 spacing: from 4 B to 1 KiB is 8 doublings, from 1 KiB to 1 MiB 10.
        double ratio = (double)(at[0][1] - at[0][0]) / (at[0][2] - at[0][1]);
        EXPECT(at[1][0] == at[0][0] + 1 && fabs(ratio - 0.8) < 0.06,
               "busbw: G beside A at 4 B (columns %d, %d); sizes on a log2 axis (gaps %d and %d, ratio %.3f, want 0.8)", at[0][0],
               at[1][0], at[0][1] - at[0][0], at[0][2] - at[0][1], ratio);
    }
    // Proves: the memcpy ceiling is drawn, dashed and named, on the row of 6 GB/s.
    char line[1024];
    int crow = top + (int)lround((bottom - top) * (1 - MEMCPY / 8));
    line_at(frame, crow, line, sizeof line);
    EXPECT(strstr(line, "memcpy ceiling 6.00") && strstr(line, "\xe2\x95\x8c\xe2\x95\x8c\xe2\x95\x8c"), "busbw: the ceiling on line %d: '%s'",
           crow, line);
    // Proves: the legend names the collectives measured (and only those), the x axis the sizes.
    line_at(frame, bottom + 1, line, sizeof line);
    char legend[1024];
    line_at(frame, bottom + 2, legend, sizeof legend);
    EXPECT(strstr(line, "4B") && strstr(line, "1K") && strstr(line, "1M") && strstr(legend, "A all-reduce") &&
               strstr(legend, "G all-gather") && !strstr(legend, "reduce-scatter"),
           "busbw: the axis '%s' and the legend '%s'", line, legend);
    // Proves: under the legend, the ceiling says what it is, and a note (the web page's words,
    // wrapped) why broadcast and reduce may pass it; the ranks, which log no steps, get one line.
    char what[1024], note[2048] = "";
    line_at(frame, bottom + 3, what, sizeof what);
    for (int i = bottom + 4; i < bottom + 8; i++) {
        line_at(frame, i, line, sizeof line);
        if (!line[0] || strstr(line, "ranks ")) break;
        snprintf(note + strlen(note), sizeof note - strlen(note), "%s%s", note[0] ? " " : "", line + 2);
    }
    EXPECT(strstr(what, "\xe2\x95\x8c memcpy ceiling, 6.00 GB/s: one core copying a buffer larger than its caches") != NULL,
           "busbw: the ceiling's line '%s'", what);
    EXPECT(!strcmp(note, "Points can pass it: shared memory splits each byte's copy between its sender and its receiver, on two "
                         "cores at once through the caches, and at either end of a broadcast's or reduce's chain a rank does "
                         "only one half, where every rank of the other collectives does both."),
           "busbw: the note on why points may pass the ceiling: '%s'", note);
    EXPECT(strstr(frame, " ranks  r0 \xe2\x9c\x94 ended  r1 \xe2\x9c\x94 ended") && !strstr(frame, "no step events"),
           "busbw: the ranks on one line, not rows of empty steps");
    free(frame);

    // Proves: without colour or UTF-8 the ceiling is dashes and the letters are the same.
    frame = dump(dir, "overview", "100", "30", 1);
    EXPECT(strstr(frame, "     8.00 +") && strstr(frame, "|-- memcpy ceiling 6.00 ---") && strstr(frame, "  - memcpy ceiling, 6.00 GB/s") &&
               column_of(frame, top, 'A', 0) > 0,
           "busbw --ascii: '+' ticks, a dashed ceiling, the letters");
    free(frame);

    // Proves: before the summary (a live run) the chart is there, without a ceiling, scaled to
    // the measurements alone.
    frame = dump(bare, "overview", "100", "30", 0);
    EXPECT(find_line(frame, "     8.00 \xe2\x94\xa4") > 0 && !strstr(frame, "memcpy") && !strstr(frame, "malformed"),
           "busbw, no summary yet: the chart without a ceiling (and every crafted line read)");
    free(frame);
    // Proves: a collectives run still measuring is live, not "starting" (it logs no steps).
    frame = dump(live, "overview", "100", "30", 0);
    EXPECT(strstr(frame, " LIVE\n") && !strstr(frame, "STARTING") && strstr(frame, "r0 running"),
           "busbw, still measuring: the badge says LIVE, the ranks running");
    free(frame);
}

// ---- 2. the memory panel's columns ---------------------------------------------------------

// Bytes by category (params, grads, optim, acts, comm) and the peak of each rank: rank 1 holds
// a quarter of rank 0's training state (a shard), the same activations.
static const double MEM[2][5] = {{1000000, 1000000, 2000000, 3000000, 500000}, {250000, 250000, 500000, 3000000, 0}};
static const double PEAK[2] = {9000000, 5000000};
static const char LETTER[5] = {'P', 'G', 'O', 'A', 'C'};

static void write_memory_run(const char *dir) {
    const char *config = "{\"steps\":2,\"batch\":4,\"seq\":8}";
    write_meta(dir, "zero", config);
    char path[PATH_MAX + 32];
    for (int r = 0; r < 2; r++) {
        StrBuf sb;
        sb_init(&sb);
        start_event(&sb, r, "zero", config, "250000");
        for (int step = 1; step <= 2; step++)
            sb_printf(&sb,
                      "{\"ev\":\"step\",\"rank\":%d,\"step\":%d,\"loss\":3,\"lr\":0.001,\"tokens\":32,"
                      "\"ms\":{\"step\":10,\"compute\":8,\"comm\":2},\"bytes\":{\"sent\":1000,\"recv\":1000},"
                      "\"mem\":{\"params\":%.0f,\"grads\":%.0f,\"optim\":%.0f,\"acts\":%.0f,\"comm\":%.0f,\"peak\":%.0f},"
                      "\"param_hash\":\"0123456789abcdef\"}\n",
                      r, step, MEM[r][0], MEM[r][1], MEM[r][2], MEM[r][3], MEM[r][4], PEAK[r]);
        snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, r);
        write_text(path, "w", sb.data);
        sb_free(&sb);
    }
}

static void check_columns(const char *dir) {
    char *frame = dump(dir, "memory", "100", "45", 0);
    int title = find_line(frame, " the ranks side by side");
    // Proves: a tall terminal shows the columns, titled with the sum over ranks: 11,500,000
    // bytes = 10.97 MiB.
    EXPECT(title > 0 && strstr(frame, "all ranks together hold 10.97 MiB"), "memory: the columns' title with the sum, 10.97 MiB");
    int labels = -1;
    for (int i = title + 1; title > 0 && i < title + 60; i++) {
        char line[1024];
        if (strncmp(line_at(frame, i, line, sizeof line), "            r0", 14) == 0) {
            labels = i;
            break;
        }
    }
    if (!EXPECT(labels > title + 6, "memory: the columns end with the ranks' names (line %d)", labels)) {
        printf("%s", frame);
        return free(frame);
    }
    // The columns: rows title+1 .. labels-1; the scale is the largest peak, 9,000,000 bytes.
    int ch = labels - title - 1;
    for (int r = 0; r < 2; r++) {
        int x = 12 + r * 9, ok = 1;  // 8 columns wide and one apart, from column 12
        char got[128] = "", want[128] = "";
        double sum = 0;
        int from = 0;
        for (int k = 0; k < 5; k++) {
            sum += MEM[r][k];
            int to = (int)lround(ch * sum / 9000000), n = 0;
            char g[2] = {LETTER[k], 0};
            for (int j = 0; j < ch; j++) n += glyph_is(frame, labels - 1 - j, x, g);
            ok &= n == to - from;
            snprintf(want + strlen(want), sizeof want - strlen(want), "%c%d ", LETTER[k], to - from);
            snprintf(got + strlen(got), sizeof got - strlen(got), "%c%d ", LETTER[k], n);
            from = to;
        }
        // Above the categories, the transient part up to the peak, then nothing.
        int shade = 0, peak_rows = (int)lround(ch * PEAK[r] / 9000000);
        for (int j = 0; j < ch; j++) shade += glyph_is(frame, labels - 1 - j, x, "\xe2\x96\x91");
        ok &= shade == peak_rows - from && !glyph_is(frame, labels - 1 - peak_rows, x, "\xe2\x96\x91");
        snprintf(want + strlen(want), sizeof want - strlen(want), "transient %d", peak_rows - from);
        snprintf(got + strlen(got), sizeof got - strlen(got), "transient %d", shade);
        // Proves: each category takes the rows its bytes round to, from the bottom, in order
        // (rank 1's comm, 0 bytes, none), then the transient part up to the peak, on the scale
        // both columns share.
        if (!EXPECT(ok, "memory: r%d's column over %d rows is %s (counted %s)", r, ch, want, got))
            printf("%s", frame);
    }
    free(frame);
    // Proves: without the rows for them (80x18), the per-rank bars stay and the columns are left out.
    frame = dump(dir, "memory", "80", "18", 0);
    EXPECT(strstr(frame, " r1  in use") && !strstr(frame, "side by side") && !strstr(frame, "malformed"),
           "memory at 80x18: the bars, no columns (and every crafted line read)");
    free(frame);
}

int main(int argc, char **argv) {
    char runs[512];
    if (tui_test_setup(argc, argv, "test_tui_panels", runs, sizeof runs) != 0) return 2;
    double t0 = now_s();
    char coll[600], bare[600], live[600], mem[600];
    snprintf(coll, sizeof coll, "%s/collectives", runs);
    snprintf(bare, sizeof bare, "%s/collectives-bare", runs);
    snprintf(live, sizeof live, "%s/collectives-live", runs);
    snprintf(mem, sizeof mem, "%s/memory", runs);
    write_collectives(coll, 1, 1);
    write_collectives(bare, 0, 1);
    write_collectives(live, 0, 0);
    write_memory_run(mem);
    check_busbw(coll, bare, live);
    check_columns(mem);
    return tui_test_finish(t0);
}
