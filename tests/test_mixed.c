// test_mixed.c — --mixed on every training lab, as a student runs it and an instructor grades it.
//
// usage: test_mixed SHARDLAB LABS SAN_LABS   (the optimized launcher, the optimized and the
//                                            sanitized lab programs)
//
// --mixed rounds both operands of every Linear layer's product to bf16 and sums in fp32 (ops.h);
// zero and fsdp also store their weights and gradients in bf16. For each training lab, 8 steps
// at the default shape, fp32 and --mixed, checks:
//   - both exit 0 and fail no check event: every lab's memory table matched its formulas to
//     the byte (a mismatch is a failed mem.<category> check and a warning; the run goes on),
//     with the bf16 operands' scratch inside the counted workspace;
//   - meta.json's config says "mixed": true (false without it), and the memory table's header
//     names --mixed;
//   - the rounding reached that lab's own products: its --mixed losses are not its fp32 ones
//     (tp runs its own Linear calls, ckpt its recomputation);
//   - the activations only a Linear layer reads, the GELU's input and (flash) q, k, v are
//     kept in bf16 (gpt.h): the acts bytes drop, by exactly 2 B T (14 L C + C) in single's
//     case and 2 B T (L (2C + 12C/t) + C) in tp's;
//   - the grader grades the --mixed run with full marks, against a reference that ran with
//     --mixed: single's for the labs that keep fp32 weights, ZeRO stage 0 on one rank for zero
//     and fsdp, whose weights and gradients are bf16 (grade-args.txt says which);
//   - tp --sp --mixed all-gathers bf16s in f and g: 4 L K x half an all-gather fewer bytes each
//     step, graded with full marks (the same weights as gathering fp32 was checked once, by
//     param_hash over 20 steps, when it was written);
//   - the sanitized single, tp (with --sp and --vocab-parallel, and without) and ckpt run
//     --mixed clean under ASan/UBSan (the bf16 operands' and kept inputs' scratch is written
//     within its bounds).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/runfiles/json.h"
#include "labtest.h"
#include "shelltest.h"
#include "test.h"

static const char *shardlab, *lab_programs, *san_labs;
static char workdir[300];

enum { STEPS = 8 };

typedef struct {
    const char *lab, *args;  // the lab and its own options
    int n;
    const char *ref;         // what grade-args.txt must start with
} Lab;

static const Lab LABS[] = {
    {"single", "", 1, "single -n 1 "},
    {"ddp", "", 2, "single -n 1 "},
    {"zero", "--stage 3", 2, "zero -n 1 --stage 0 "},
    {"fsdp", "", 2, "zero -n 1 --stage 0 "},
    {"tp", "", 2, "single -n 1 "},
    {"pp", "", 2, "single -n 1 "},
    {"ckpt", "", 2, "single -n 1 "},
    {"shard", "", 2, "shard -n 1 "},
    {"cp", "", 2, "single -n 1 "},
};

// Runs the lab into workdir/<lab>-<tag>; its output, and the exit status in *rc.
static char *run_lab(const Lab *l, const char *tag, const char *extra, const char *labs_dir, int steps, int *rc) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "SHARDLAB_LABS='%s' '%s' run %s -n %d --steps %d %s %s --run-dir '%s/%s-%s'", labs_dir,
             shardlab, l->lab, l->n, steps, l->args, extra, workdir, l->lab, tag);
    return test_sh(NULL, cmd, rc);
}

// One number of each of rank 0's step events of run workdir/<lab>-<tag>, into out[0..STEPS):
// the loss, the saved activations' bytes (mem.acts less the pass workspace a lab reports
// holding: pp's), or the bytes sent. Returns how many steps there were.
typedef enum { STEP_LOSS, STEP_ACTS, STEP_SENT } StepField;
static int step_numbers(const char *lab, const char *tag, StepField f, double *out) {
    char dir[400];
    snprintf(dir, sizeof dir, "%s/%s-%s", workdir, lab, tag);
    Events ev;
    load_events(dir, &ev);
    const JsonValue *steps[STEPS + 1];
    int n = step_events(&ev, steps, STEPS + 1);
    for (int i = 0; i < n && i < STEPS; i++) {
        const JsonValue *mem = json_get(steps[i], "mem"), *bytes = json_get(steps[i], "bytes");
        if (f == STEP_LOSS) out[i] = num(steps[i], "loss");
        else if (f == STEP_SENT) out[i] = bytes ? num(bytes, "sent") : -1;
        else out[i] = mem ? num(mem, "acts") - (json_get(steps[i], "workspace") ? num(steps[i], "workspace") : 0) : -1;
    }
    free_events(&ev);
    return n < STEPS ? n : STEPS;
}

static int config_mixed(const char *lab, const char *tag) {
    char dir[400];
    snprintf(dir, sizeof dir, "%s/%s-%s", workdir, lab, tag);
    JsonValue *meta = load_json_file(dir, "meta.json");
    const JsonValue *cfg = meta ? json_get(meta, "config") : NULL;
    const JsonValue *m = cfg ? json_get(cfg, "mixed") : NULL;
    int v = m && m->type == JSON_BOOL ? m->boolean : -1;
    json_free(meta);
    return v;
}

static void check_lab(const Lab *l) {
    int rc32, rc16;
    char *o32 = run_lab(l, "fp32", "", lab_programs, STEPS, &rc32);
    char *o16 = run_lab(l, "mixed", "--mixed", lab_programs, STEPS, &rc16);
    char dir32[400], dir16[400], first32[120], first16[120];
    snprintf(dir32, sizeof dir32, "%s/%s-fp32", workdir, l->lab);
    snprintf(dir16, sizeof dir16, "%s/%s-mixed", workdir, l->lab);
    int bad32 = failed_checks_in(dir32, l->n, first32, sizeof first32);
    int bad16 = failed_checks_in(dir16, l->n, first16, sizeof first16);
    EXPECT(rc32 == 0 && rc16 == 0 && bad32 == 0 && bad16 == 0, "%s at N=%d: fp32 and --mixed runs exit 0 and fail no "
           "check, their memory tables equal to the byte (exit %d, %d; failed checks %d%s%s, %d%s%s)%s%s", l->lab, l->n,
           rc32, rc16, bad32, bad32 ? ", first " : "", first32, bad16, bad16 ? ", first " : "", first16,
           rc16 ? ": " : "", rc16 ? one_line(o16) : "");
    EXPECT(strstr(o16, "--attn flash --mixed\n") && !strstr(o32, "--mixed"),
           "%s: the --mixed run's memory table names --mixed in its header, the fp32 run's does not", l->lab);
    EXPECT(config_mixed(l->lab, "mixed") == 1 && config_mixed(l->lab, "fp32") == 0,
           "%s: meta.json's config says \"mixed\": true with --mixed, false without", l->lab);
    double a[STEPS] = {0}, b[STEPS] = {0}, worst = 0;
    int na = step_numbers(l->lab, "fp32", STEP_LOSS, a), nb = step_numbers(l->lab, "mixed", STEP_LOSS, b);
    for (int i = 0; i < STEPS; i++) worst = fmax(worst, fabs(a[i] - b[i]));
    EXPECT(na == STEPS && nb == STEPS && worst > 1e-6 && worst < 1e-2,
           "%s: the bf16 operands change its losses, a little (%d and %d steps; at most %.3g apart)", l->lab, na, nb,
           worst);
    // The Linear layers' inputs, the GELU's and q, k, v are kept in bf16 (gpt.h,
    // tensor_parallel.h): fewer activation bytes. single's: 2 B T (14 L C + C) fewer (B 8, T
    // 64, L 2, C 64); tp's at t = 2 (ln_1 and ln_2 on all rows, half of qkv, atty, fch and
    // fch_gelu, ln_f): 2 B T (L (2C + 12C/2) + C), less than single's.
    double acts32[STEPS], acts16[STEPS];
    int n32 = step_numbers(l->lab, "fp32", STEP_ACTS, acts32), n16 = step_numbers(l->lab, "mixed", STEP_ACTS, acts16);
    double a32 = n32 ? acts32[n32 - 1] : -1, a16 = n16 ? acts16[n16 - 1] : -1;  // at the last step
    if (!strcmp(l->lab, "single"))
        EXPECT(a32 - a16 == 2.0 * 8 * 64 * (14 * 2 * 64 + 64), "single: --mixed keeps 2 B T (14LC + C) = %.0f bytes "
               "fewer activations (%.0f vs %.0f)", 2.0 * 8 * 64 * (14 * 2 * 64 + 64), a16, a32);
    else if (!strcmp(l->lab, "pp"))
        ;  // its micro-batches' activations are gone by the step's end: its own table checked them
    else if (!strcmp(l->lab, "cp"))  // single's saving at a rank's 32 tokens of each sequence
        EXPECT(a32 - a16 == 2.0 * 8 * 32 * (14 * 2 * 64 + 64), "cp: --mixed keeps 2 B T' (14LC + C) = %.0f bytes "
               "fewer activations on a rank of 2 (%.0f vs %.0f)", 2.0 * 8 * 32 * (14 * 2 * 64 + 64), a16, a32);
    else if (!strcmp(l->lab, "tp"))
        EXPECT(a32 - a16 == 2.0 * 8 * 64 * (2 * (2 * 64 + 12 * 64 / 2) + 64),
               "tp: --mixed keeps 2 B T (L (2C + 12C/t) + C) = %.0f bytes fewer activations (%.0f vs %.0f)",
               2.0 * 8 * 64 * (2 * (2 * 64 + 12 * 64 / 2) + 64), a16, a32);
    else
        EXPECT(a16 < a32 && a16 > 0, "%s: --mixed keeps fewer activation bytes (%.0f vs %.0f)", l->lab, a16, a32);
    free(o32);
    free(o16);

    // Graded, as an instructor would: full marks, against a reference with the same precision.
    char cmd[2048], path[800];
    snprintf(cmd, sizeof cmd, "SHARDLAB_LABS='%s' '%s' grade '%s/%s-mixed'", lab_programs, shardlab, workdir, l->lab);
    int rc;
    char *g = test_sh(NULL, cmd, &rc);
    const char *fail = strstr(g, "FAIL");
    EXPECT(rc == 0 && !fail, "%s --mixed graded: every check passes (exit %d)%s%.300s", l->lab, rc, fail ? ": " : "",
           fail ? fail : "");
    free(g);
    snprintf(path, sizeof path, "%s/%s-mixed/ref-%s/grade-args.txt", workdir, l->lab, !strcmp(l->ref, "shard -n 1 ") ? "shard"
                                                                                 : l->ref[0] == 'z'                 ? "zero"
                                                                                                                    : "single");
    char *args = read_file(path, NULL);
    EXPECT(args && !strncmp(args, l->ref, strlen(l->ref)) && strstr(args, " --mixed"),
           "%s --mixed: the grader's reference ran '%s... --mixed' (%s: %.200s)", l->lab, l->ref, path,
           args ? args : "missing");
    free(args);
}

// tp --sp --mixed: f's and g's all-gathers move bf16 (tensor_parallel.h; what they gather only
// a Linear reads, which rounds it to bf16 anyway), so each step sends 4 L K x half an
// all-gather fewer bytes: n = B T C = 32768 values, t = 2, a ring all-gather sends n/2 of them,
// 8 x 16384 x 2 bytes; and it trains as single --mixed does (the grader's loss and gradient
// checks), which a gather of the wrong rows would not.
static void check_tp_gathers(void) {
    Lab sp = {"tp", "--sp", 2, "single -n 1 "};
    int rc1, rc2;
    free(run_lab(&sp, "sp-fp32", "", lab_programs, STEPS, &rc1));
    char *said = run_lab(&sp, "sp-mixed", "--mixed", lab_programs, STEPS, &rc2);
    // The lab's own count of what f and g send (tp.c, comm.tp_bytes_sent) knows the halved
    // all-gathers too: no warning. Broken: the bf16 gathers counted as fp32 (as it was): "f, g
    // and the head's collectives sent 786432 bytes; the formula says 1048576".
    EXPECT(rc2 == 0 && !strstr(said, "warning:"), "tp --sp --mixed: the lab's self-check of the bytes f and g send agrees "
           "(no warning)%s%.300s", strstr(said, "warning:") ? ": " : "", strstr(said, "warning:") ? strstr(said, "warning:") : "");
    free(said);
    Lab head = {"tp", "--sp --vocab-parallel", 2, "single -n 1 "};
    said = run_lab(&head, "sp-vp-mixed", "--mixed", lab_programs, 1, &rc1);
    EXPECT(rc1 == 0 && !strstr(said, "warning:"), "tp --sp --vocab-parallel --mixed: the head's bf16 all-gather counted too "
           "(no warning)%s%.300s", strstr(said, "warning:") ? ": " : "", strstr(said, "warning:") ? strstr(said, "warning:") : "");
    free(said);
    double b32[STEPS], b16[STEPS];
    int n32 = step_numbers("tp", "sp-fp32", STEP_SENT, b32), n16 = step_numbers("tp", "sp-mixed", STEP_SENT, b16);
    int fewer = rc1 == 0 && rc2 == 0 && n32 == STEPS && n16 == STEPS;
    for (int i = 0; i < STEPS && fewer; i++) fewer = b32[i] - b16[i] == 8.0 * 16384 * 2;
    EXPECT(fewer, "tp --sp --mixed: every step sends 4 L K x half an all-gather = %.0f bytes fewer than --sp in fp32 "
           "(step %d: %.0f vs %.0f)", 8.0 * 16384 * 2, STEPS, n16 ? b16[n16 - 1] : -1, n32 ? b32[n32 - 1] : -1);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "SHARDLAB_LABS='%s' '%s' grade '%s/tp-sp-mixed'", lab_programs, shardlab, workdir);
    int rc;
    char *g = test_sh(NULL, cmd, &rc);
    EXPECT(rc == 0 && !strstr(g, "FAIL"), "tp --sp --mixed graded: every check passes, comm.bytes with its bf16 "
           "all-gathers (exit %d)", rc);
    free(g);
}

// (tag: the run's own directory, workdir/<lab>-<tag>: a lab refuses one that holds a finished run)
static void check_sanitized(const char *lab, const char *args, int n, const char *tag) {
    Lab l = {lab, args, n, NULL};
    int rc;
    char *out = run_lab(&l, tag, "--mixed", san_labs, 2, &rc);
    EXPECT(rc == 0 && !strstr(out, "AddressSanitizer") && !strstr(out, "runtime error"),
           "sanitized %s %s%s--mixed at N=%d runs clean under ASan/UBSan (exit %d)%s%s", lab, args, *args ? " " : "", n,
           rc, rc ? ": " : "",
           rc ? one_line(out) : "");
    free(out);
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: test_mixed SHARDLAB LABS SAN_LABS\n");
        return 2;
    }
    shardlab = argv[1], lab_programs = argv[2], san_labs = argv[3];
    // A folder of its own (a pid-named one could be an earlier, killed run's, and hold its
    // finished runs: the labs then refuse their --run-dir).
    snprintf(workdir, sizeof workdir, "/tmp/shardlab-test-mixed-XXXXXX");
    if (!mkdtemp(workdir)) return printf("not ok - cannot make a temporary folder\n"), 1;
    for (size_t i = 0; i < sizeof LABS / sizeof LABS[0]; i++) check_lab(&LABS[i]);
    check_tp_gathers();
    check_sanitized("single", "--accum 2", 1, "san");
    check_sanitized("tp", "--sp --vocab-parallel", 2, "san-sp");
    check_sanitized("tp", "", 2, "san");
    check_sanitized("ckpt", "--policy sqrt --compare 0", 2, "san");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", workdir);
    if (system(cmd) != 0) printf("# could not remove %s\n", workdir);
    return test_done();
}
