// test_variants.c — the grader against students: the starter, and students who got exactly
// one thing wrong.
//
// Usage: test_variants SHARDLAB   (run from the repository root; the optimized shardlab,
//                                  whose references run build/labs)
//
// Each student is a copy of labs/ built on the CPU as `make grade` builds one (LABS_SRC,
// CUDA=0), and graded with `shardlab grade --labs --only`:
//   - the starter (make starter): it builds, every lab stops at a stub, and scores 0;
//   - five wrong solutions, each one edit of the reference, and the checks each must fail:
//       ring all-gather with the wrong chunk index     replicas.equal, loss.reference, grads.reference
//                                                      (graded on ddp: the ranks' gradients differ; the
//                                                      collectives lab itself stops on the wrong values)
//       DDP without gradient averaging (sum, not mean) grads.reference
//       ZeRO's shard one element too long              mem.formula, comm.bytes (each stage, and FSDP)
//       1F1B with one forward too many before backward schedule.in_flight
//       recomputation in the wrong order (stale inputs) recompute.bitwise, loss.reference
//     and nothing else: every other check of those labs passes, so the student loses
//     exactly the points of those checks.
// The copies share one build of the reference (timestamps kept), so each student costs the
// compile of the file it changed.
#include <sys/stat.h>

#include "labtest.h"
#include "test.h"

static const char *shardlab;

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    fflush(stdout);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

// Replaces the one occurrence of `old` in path by `new_text`; 0 if old is not there exactly once.
static int replace_once(const char *path, const char *old, const char *new_text) {
    char *text = read_file(path, NULL);
    char *at = text ? strstr(text, old) : NULL;
    if (!at || strstr(at + 1, old)) return free(text), 0;
    return splice_file(path, text, at, strlen(old), new_text);
}

// Builds the labs of src (a copy of labs/) into build; 0 on success. Warnings to tmp/<tag>.build.
static int build(const char *src, const char *bdir, const char *labs_list, const char *tag) {
    char targets[600] = "";
    for (const char *p = labs_list; *p;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        snprintf(targets + strlen(targets), sizeof targets - strlen(targets), " %s/labs/%.*s", bdir, (int)n, p);
        p = comma ? comma + 1 : p + n;
    }
    return sh("make -s -j2 BUILD=%s LABS_SRC=%s CUDA=0%s >%s/%s.build 2>&1", bdir, src, targets, tmp, tag);
}

typedef struct {
    const char *name, *file, *old, *new_text;
    const char *labs;    // the labs to build
    const char *only;    // the graded configurations
    const char *breaks;  // the checks that must fail, in rubric order, in every graded configuration
} Variant;

static const Variant VARIANTS[] = {
    {"ring all-gather with the wrong chunk index", "core/ring.c",
     "if ((m = piece(n, p, mod(r - k + 1, p), i, &off)) == 0) continue;",
     "if ((m = piece(n, p, mod(r - k, p), i, &off)) == 0) continue;", "ddp", "ddp",
     "replicas.equal,loss.reference,grads.reference"},
    {"DDP without gradient averaging", "ddp.c", "(float)(1.0 / tokens_per_step), &spans,",
     "(float)(1.0 * N / tokens_per_step), &spans,", "ddp", "ddp", "grads.reference"},
    {"ZeRO's shard one element too long", "core/sharded.c",
     "s->shard[u] = (per_rank + (size_t)align - 1) / (size_t)align * (size_t)align;",
     "s->shard[u] = (per_rank + (size_t)align - 1) / (size_t)align * (size_t)align + 1;", "zero,fsdp", "zero,fsdp",
     "mem.formula,comm.bytes"},
    {"1F1B with one forward too many before the first backward", "pp.c",
     "int warmup = pp->sched == SCHED_GPIPE ? m : (p - s - 1 < m ? p - s - 1 : m);",
     "int warmup = pp->sched == SCHED_GPIPE ? m : (p - s < m ? p - s : m);", "pp", "pp-1f1b", "schedule.in_flight"},
    {"recomputation in the wrong order (each block reads a stale input)", "core/activation_checkpointing.c",
     "for (int j = p->first[i]; j <= l; j++) {", "for (int j = l; j >= p->first[i]; j--) {", "ckpt", "ckpt",
     "loss.reference,recompute.bitwise"},
};

// The failed checks of one grade object as "a,b" in rubric order.
static void failed_of(const JsonValue *g, char *out, size_t n) {
    out[0] = 0;
    const JsonValue *checks = json_get(g, "checks");
    for (size_t i = 0; checks && i < checks->count; i++) {
        const JsonValue *c = json_at(checks, i);
        if (strcmp(json_get(c, "result")->string, "FAIL")) continue;
        size_t used = strlen(out);
        snprintf(out + used, n - used, "%s%s", used ? "," : "", json_get(c, "name")->string);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_variants SHARDLAB (from the repository root)\n");
        return 2;
    }
    shardlab = argv[1];
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-variants-XXXXXX");
    if (!mkdtemp(tmp)) return perror("mkdtemp"), 1;

    // ---- the starter: builds as it is, stops at its stubs, scores zero ------------------------
    int rc = sh("sh labs/grade/starter.sh %s/starter >%s/starter.out 2>&1", tmp, tmp);
    char *said = captured("starter", "out");
    EXPECT(rc == 0 && strstr(said, "solution regions"), "make starter writes the student copy (%s)", one_line(said));
    free(said);
    char src[600], bdir[600], out[600];
    snprintf(src, sizeof src, "%s/starter/labs", tmp);
    snprintf(bdir, sizeof bdir, "%s/build-starter", tmp);
    rc = build(src, bdir, "single,collectives,ddp,zero,fsdp,tp,pp,ckpt,shard", "starter");
    char *log = captured("starter", "build");
    EXPECT(rc == 0 && !strstr(log, "warning"), "the starter's labs build as they are, without a warning (%s)", one_line(log));
    free(log);
    snprintf(out, sizeof out, "%s/grade-starter", tmp);
    rc = sh("%s grade --quiet --labs %s/labs --out %s >%s/grade-starter.txt 2>&1", shardlab, bdir, out, tmp);
    JsonValue *g = load_json_file(out, "grade.json");
    const JsonValue *labs = g ? json_get(g, "labs") : NULL;
    int zero_labs = 0;
    for (size_t i = 0; labs && i < labs->count; i++) zero_labs += num(json_at(labs, i), "points") == 0;
    EXPECT(rc == 1 && g && num(g, "points") == 0 && labs && labs->count == 9 && zero_labs == 9,
           "the starter scores 0 on every lab (%.0f/%.0f, exit %d)", g ? num(g, "points") : -1, g ? num(g, "max") : -1, rc);
    // The same points are at stake as for the reference: failed runs lose no checks from the rubric.
    EXPECT(g && num(g, "max") == 111, "out of the reference's 111 points (%.0f)", g ? num(g, "max") : -1);
    json_free(g);
    rc = sh("grep -q 'not written yet: ' %s/single/rank-0.log", out);
    EXPECT(rc == 0, "a lab that reaches a stub says 'not written yet: <what> (file:line)' in its log");

    // ---- the reference copy: built once, full marks --------------------------------------------
    char ref_src[600], ref_build[600];
    snprintf(ref_src, sizeof ref_src, "%s/ref/labs", tmp);
    snprintf(ref_build, sizeof ref_build, "%s/build-ref", tmp);
    sh("mkdir -p %s/ref && cp -rp labs %s/ref/", tmp, tmp);
    rc = build(ref_src, ref_build, "ddp,zero,fsdp,pp,ckpt", "ref");
    snprintf(out, sizeof out, "%s/grade-ref", tmp);
    rc = rc ? rc : sh("%s grade --quiet --labs %s/labs --only ddp,zero,fsdp,pp-1f1b,ckpt --out %s >/dev/null 2>&1",
                      shardlab, ref_build, out);
    g = load_json_file(out, "grade.json");
    EXPECT(rc == 0 && g && num(g, "points") == num(g, "max"), "the reference copy, built the same way: full marks (%.0f/%.0f)",
           g ? num(g, "points") : -1, g ? num(g, "max") : -1);
    json_free(g);

    // ---- each wrong student loses exactly the points of the checks its mistake breaks ----------
    for (size_t v = 0; v < sizeof VARIANTS / sizeof VARIANTS[0]; v++) {
        const Variant *x = &VARIANTS[v];
        char vdir[600], vbuild[600], path[800], tag[32];
        snprintf(tag, sizeof tag, "variant-%zu", v);
        snprintf(vdir, sizeof vdir, "%s/%s/labs", tmp, tag);
        snprintf(vbuild, sizeof vbuild, "%s/build-%s", tmp, tag);
        sh("mkdir -p %s/%s && cp -rp %s %s/%s/ && cp -rp %s %s", tmp, tag, ref_src, tmp, tag, ref_build, vbuild);
        snprintf(path, sizeof path, "%s/%s", vdir, x->file);
        if (!EXPECT(replace_once(path, x->old, x->new_text), "%s: the edit applies to %s (the line is there once)", x->name,
                    x->file))
            continue;
        rc = build(vdir, vbuild, x->labs, tag);
        snprintf(out, sizeof out, "%s/grade-%s", tmp, tag);
        int grc = sh("%s grade --quiet --labs %s/labs --only %s --out %s >%s/%s.txt 2>&1", shardlab, vbuild, x->only, out,
                     tmp, tag);
        g = load_json_file(out, "grade.json");
        const JsonValue *grades = g ? json_get(g, "grades") : NULL;
        int exact = grades && grades->count > 0;
        double lost = 0, want_lost = 0;
        char failed[300] = "", first_bad[400] = "";
        for (size_t i = 0; grades && i < grades->count; i++) {
            const JsonValue *one = json_at(grades, i);
            failed_of(one, failed, sizeof failed);
            const JsonValue *checks = json_get(one, "checks");
            for (size_t k = 0; k < checks->count; k++) {
                const JsonValue *c = json_at(checks, k);
                char name[64];
                snprintf(name, sizeof name, ",%s,", json_get(c, "name")->string);
                char want[200];
                snprintf(want, sizeof want, ",%s,", x->breaks);
                if (strstr(want, name)) want_lost += num(c, "max");
            }
            lost += num(one, "max") - num(one, "points");
            if (strcmp(failed, x->breaks) != 0 && exact) {
                exact = 0;
                snprintf(first_bad, sizeof first_bad, "%s failed %s", json_get(one, "label")->string,
                         failed[0] ? failed : "nothing");
            }
        }
        EXPECT(rc == 0 && grc == 1 && exact && lost == want_lost && lost > 0,
               "%s: builds, and in every graded configuration exactly %s FAIL: %.0f points lost, theirs (%s)", x->name,
               x->breaks, lost, first_bad[0] ? first_bad : "as expected");
        json_free(g);
    }

    int failed_n = test_failed;
    tmp_finish(failed_n);
    return test_done();
}
