// fuzz_grade.c — libFuzzer target: a run directory handed to `shardlab grade`, loaded and
// graded (labs/command/grade/), without starting any lab.
//
//   make fuzz                          # this target and fuzz_runread, FUZZ_SECONDS each
//   build/fuzz/fuzz_grade CRASH        # replay one input
//
// The input is the run directory's files, separated by 0x01 bytes, in this order:
//   meta.json, summary.json, rank-0.jsonl, rank-1.jsonl, indices-rank-0-epoch-0.txt,
//   indices-rank-1-epoch-0.txt, reads-rank-0-epoch-0.txt, reads-rank-1-epoch-0.txt, dataset.bin
// (a file the input does not reach is absent). tests/fuzz/seeds-grade/ holds real small runs
// written this way. The run is graded with itself as the --ref reference, so no lab is
// started: a run whose meta.json names ckpt (whose --policy none reference the grader would
// start) is skipped. Every check runs on whatever the input made; what must hold: no crash,
// no leak, no undefined behaviour (ASan and UBSan check that), whatever the files say.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "command/grade/grade.h"
#include "common/runfiles/json.h"

static const char *const FILES[] = {"meta.json",
                                    "summary.json",
                                    "rank-0.jsonl",
                                    "rank-1.jsonl",
                                    "indices-rank-0-epoch-0.txt",
                                    "indices-rank-1-epoch-0.txt",
                                    "reads-rank-0-epoch-0.txt",
                                    "reads-rank-1-epoch-0.txt",
                                    "dataset.bin"};
enum { NFILES = sizeof FILES / sizeof FILES[0] };

// The lab meta.json names (json_get takes the first key, as the grader's loader does).
static int names_ckpt(const uint8_t *meta, size_t n) {
    char err[128];
    JsonValue *v = json_parse((const char *)meta, n, err, sizeof err);
    const JsonValue *lab = json_get(v, "lab");
    int ckpt = lab && lab->type == JSON_STRING && !strcmp(lab->string, "ckpt");
    json_free(v);
    return ckpt;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/tmp/shardlab-fuzz-grade-XXXXXX");
        if (!mkdtemp(dir)) abort();
    }
    const uint8_t *piece = data, *end = data + n;
    for (int i = 0; i < NFILES; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s/%s", dir, FILES[i]);
        unlink(path);
        if (!piece) continue;
        const uint8_t *cut = memchr(piece, 1, (size_t)(end - piece));
        size_t len = cut ? (size_t)(cut - piece) : (size_t)(end - piece);
        if (i == 0 && names_ckpt(piece, len)) return 0;
        FILE *f = fopen(path, "wb");
        if (f) {
            if (len) fwrite(piece, 1, len, f);
            fclose(f);
        }
        piece = cut ? cut + 1 : NULL;
    }
    GradeRefs refs = {.ref_dir = dir, .quiet = 1};
    snprintf(refs.labs_dir, sizeof refs.labs_dir, "/nonexistent");
    static Grade g;
    grade_rubric(&g, dir, NULL, NULL, &refs);
    StrBuf sb;
    sb_init(&sb);
    grade_to_json(&g, &sb);
    const Grade *list[1] = {&g};
    grade_to_junit(list, 1, "fuzz", &sb);
    sb_free(&sb);
    FILE *null = fopen("/dev/null", "w");
    if (null) grade_print(&g, null), fclose(null);
    return 0;
}
