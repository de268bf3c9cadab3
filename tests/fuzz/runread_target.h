// runread_target.h — one fuzz input through the run-log reader and the dashboard's drawing.
//
// Defines: fuzz_runread_one().
//
// Shared by the libFuzzer target (tests/fuzz/fuzz_runread.c, `make fuzz`) and the
// fixed-seed run in `make test` (tests/test_runread.c), so both exercise the same paths:
//   1. the input's lines straight into runview_feed_line(), spread over three ranks;
//   2. the input as files of a run directory: the part before the first 0x01 byte becomes
//      meta.json, the rest rank-0.jsonl, written in two pieces cut at a position the input
//      chooses, with a poll between them (half a line, then the rest), then a poll "3 s
//      later" (a line cut off for good);
//   3. every panel drawn from the resulting view at the smallest size and a large one,
//      with and without UTF-8 and colour.
// What must hold: no crash, no leak, no undefined behaviour (ASan and UBSan check that).
#ifndef SHARDLAB_RUNREAD_TARGET_H
#define SHARDLAB_RUNREAD_TARGET_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "canvas.h"
#include "command/runs/runread.h"
#include "dashboard.h"

static void fuzz_draw_all(const RunView *v) {
    static const int sizes[][2] = {{DASH_MIN_W, DASH_MIN_H}, {140, 40}};
    for (int z = 0; z < 2; z++)
        for (int p = 0; p < PANEL_COUNT; p++) {
            Canvas c;
            canvas_init(&c, sizes[z][0], sizes[z][1]);
            DashState s = {.panel = (Panel)p, .utf8 = (p + z) % 2, .color = p % 2, .now_us = 1,
                           .log_text = "a line\nanother\n", .help = p == 3};
            dash_render(&c, v, &s);
            canvas_free(&c);
        }
}

static void fuzz_write(const char *path, const uint8_t *data, size_t n, const char *mode) {
    FILE *f = fopen(path, mode);
    if (!f) return;
    if (n) fwrite(data, 1, n, f);
    fclose(f);
}

// scratch: an existing empty directory the target may fill (its files are overwritten).
static void fuzz_runread_one(const uint8_t *data, size_t n, const char *scratch) {
    // 1. Lines straight in.
    RunView v;
    runview_init(&v);
    size_t start = 0;
    int line = 0;
    for (size_t i = 0; i <= n; i++)
        if (i == n || data[i] == '\n') {
            runview_feed_line(&v, line++ % 3, (const char *)data + start, i - start);
            start = i + 1;
        }
    fuzz_draw_all(&v);
    runview_free(&v);

    // 2. Through files.
    char meta[4200], rank0[4200];
    snprintf(meta, sizeof meta, "%s/meta.json", scratch);
    snprintf(rank0, sizeof rank0, "%s/rank-0.jsonl", scratch);
    const uint8_t *cut = memchr(data, 1, n);
    size_t meta_len = cut ? (size_t)(cut - data) : 0, rest = cut ? n - meta_len - 1 : n;
    const uint8_t *events = cut ? cut + 1 : data;
    remove(meta);
    if (cut) fuzz_write(meta, data, meta_len, "wb");
    size_t piece = rest ? (size_t)(n ? data[0] : 0) * rest / 255 : 0;
    fuzz_write(rank0, events, piece, "wb");
    char err[256];
    if (runview_open(&v, scratch, err, sizeof err) == 0) {
        fuzz_write(rank0, events + piece, rest - piece, "ab");
        runview_poll(&v, 1000000);
        runview_poll(&v, 4000000);  // a cut-off last line is given up now
        fuzz_draw_all(&v);
        runview_free(&v);
    }
}

#endif
