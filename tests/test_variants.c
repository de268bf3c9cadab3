// test_variants.c — the grader against students: the starter, and students who got exactly
// one thing wrong.
//
// Usage: test_variants SHARDLAB   (run from the repository root; the optimized shardlab,
//                                  whose references run build/labs/ref)
//
// Each student is a copy of labs/ built on the CPU as `make grade` builds one (LABS_SRC,
// CUDA=0), and graded with `shardlab grade --labs --only`:
//   - the grading guide's index of the student regions (labs/command/grade/README.md) lists every one
//     of them, and nothing else;
//   - the starter (make starter): it builds, every lab stops at a stub, and scores 0;
//   - the reference copy, built the same way: full marks, graded by the starter's own grader,
//     whose reference programs are built from the starter (every region a stub) with the
//     grader's own code (labs/command/grade/solutions.c): so no reference run, replay or ZeRO --mixed
//     stage-0 reference reaches a student region. Broken on purpose (REF_WRAP without
//     --wrap=adamw_update): every training reference stops at AdamW's stub, and this fails;
//   - wrong students, each one edit of the reference, and the checks each must fail in each
//     configuration it is graded on, and nothing else: every other check passes, so the
//     student loses exactly the points of the checks its mistake breaks (tests/variants.h):
//       the first five:
//         ring all-gather with the wrong chunk index   replicas.equal, loss.reference, grads.reference
//         DDP without gradient averaging               grads.reference
//         ZeRO's shard one element too long            mem.formula, comm.bytes (each stage, FSDP)
//         1F1B with one forward too many               schedule.in_flight
//         recomputation in the wrong order             loss.reference, recompute.bitwise
//       memory too high only at the peak (mem.formula reads peak_by):
//         ZeRO-2/3 reduce-scattering the gradients after the whole backward pass
//         FSDP freeing each unit's gathered weights one unit late
//       mistakes in an option, caught only in the configuration that runs it:
//         --accum: a micro-batch's loss weighted as a whole batch's (grads.reference)
//         --accum: rank r's sequences from r x micro-batch (loss.reference, grads.reference)
//         --prefetch two units ahead (mem.formula); not in the backward pass (comm.bytes)
//         --sp: g forward all-reduced, then the rank's rows kept (comm.bytes);
//               the replicated gradients never summed (loss, grads, comm.bytes)
//       data sharding, graded on what was read and trained on (data.coverage):
//         a sampler whose ranks' parts overlap (and loss.reference)
//         a sampler that reads every global batch whole and keeps its part
//       correct but wasteful, whose labs stopped at their own byte checks before (comm.bytes):
//         ZeRO-1 completing the all-reduce; FSDP gathering the summed gradients back; ZeRO
//         all-reducing the loss once more (a collective outside the units', seen only in the
//         step's bytes.sent)
//       the optimizer: AdamW with coupled (L2) weight decay (loss.reference)
//       the grader's blind spots, each closed by a configuration or a check of its own:
//         a ring reduce-scatter right only for even chunks    collectives.correct on collectives-ring-n3
//         1F1B forwarding all m first whenever m < p          schedule.in_flight on pp-1f1b-m2 only
//         ZeRO-1 keeping the whole unit's m and v             mem.formula (the lab warns and goes on)
//         --policy sqrt keeping every block's activations     mem.formula (the same)
//         ZeRO summing the loss with one float's all-reduce   comm.bytes (fewer bytes, and said so)
//         AdamW with eps inside the square root               what it really breaks: single's loss,
//                                                             ZeRO-1's loss and gradient norm
//         all-to-all sending rank r+k rank r-k's block        collectives.correct on 4 and on 3 ranks
//       and where the run goes on past the lab's own check (the ring's, the memory table's), its
//       rank 0 logged that check failed and printed a warning line (WARNED); the student who
//       sends fewer bytes is told fewer (SAYS).
//   - self-graded: each wrong student whose region a reference reaches, written into a
//     starter copy and graded there by `make grade` (the copy's own build) as a student
//     does, scores exactly what this build's grader gives it (the instructor's make grade
//     LABS=<copy>). Before the reference programs, the AdamW student scored 5/5 in its copy
//     and 2/5 from the instructor;
// The copies share one build of the reference (timestamps kept), so each student costs the
// compile of the file it changed, and every grading shares one --refs directory, so the
// single-rank references run once for all of them.
//
// At length. The grader must hold at 1000 steps too: a correct run passes, a wrong one loses
// exactly its checks. Graded again at 1000 steps: the students whose loss
// and gradient checks are the question at length. ZeRO's long shard (zero-2): its numbers
// are a correct ZeRO's, so its loss and gradients must pass at any length while its memory
// and bytes fail. DDP without averaging (ddp-accum): its gradient norm is N times the
// reference's from step 1, and its loss passes as long as clipping hides the scale (the
// true norm above --clip 1.0: the first 39 steps of the default run); after that its
// clipped update is not the reference's, and the replays from its own state show it (on
// ddp: a loss off by 1e-2 at step 204, replayed from step 200). So at length it loses
// loss.reference too:
// exactly the points of the checks its mistake breaks, which at 1000 steps are two. The
// others fail their loss checks from step 1 on, or break per-step checks (memory, bytes,
// the schedule's order, the data read) that read every step the same way at any length:
// running them for 1000 steps would cost minutes and test nothing more. The whole test takes
// about three minutes on a 2-core VM, 80 s of it at 1000 steps (the two runs and their shared
// references) and about a minute self-grading (the first make grade builds a whole copy:
// 87 s of a 356 s run on a shared machine, whose 1000 steps took 152 s).
#include <sys/stat.h>

#include "labtest.h"
#include "test.h"
#include "todo/regions.c"
#include "variants.h"

static const char *shardlab;

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

// `GRADER grade --labs build/labs --only only [--steps steps]` into tmp/grade-<tag>, with the
// references of every grading by that grader kept in tmp/refs (tmp/refs-starter for the
// starter's). Returns the exit status; *g the grade.json.
static int grade_labs_by(const char *grader, const char *bdir, const char *only, const char *steps, const char *tag,
                         JsonValue **g) {
    char out[600];
    snprintf(out, sizeof out, "%s/grade-%s", tmp, tag);
    int rc = sh("%s grade --quiet --labs %s/labs%s%s%s%s --refs %s/refs%s --out %s >%s/%s.txt 2>&1", grader, bdir,
                only ? " --only " : "", only ? only : "", steps ? " --steps " : "", steps ? steps : "", tmp,
                grader == shardlab ? "" : "-starter", out, tmp, tag);
    *g = load_json_file(out, "grade.json");
    return rc;
}
static int grade_labs(const char *bdir, const char *only, const char *steps, const char *tag, JsonValue **g) {
    return grade_labs_by(shardlab, bdir, only, steps, tag, g);
}

// The checks that must fail in configuration `label` by the variant's breaks (see Variant).
static void breaks_of(const char *spec, const char *label, char *out, size_t n) {
    out[0] = 0;
    for (const char *p = spec; *p;) {
        const char *end = strchr(p, ' '), *eq = strchr(p, '=');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (eq && eq < p + len) {
            size_t name = (size_t)(eq - p);
            int exact = strlen(label) == name && !strncmp(p, label, name), any = name == 1 && *p == '*';
            if (exact || (any && !out[0])) snprintf(out, n, "%.*s", (int)(len - name - 1), eq + 1);
            if (exact) return;
        }
        p += len;
        while (*p == ' ') p++;
    }
}

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

// Every configuration of grade.json g fails exactly its checks by the spec, and loses exactly
// their points (and something is lost). Says which configuration did not, in why.
static int exactly(const JsonValue *g, const char *spec, double *lost_out, char *why, size_t wn) {
    const JsonValue *grades = g ? json_get(g, "grades") : NULL;
    int exact = grades && grades->count > 0;
    double lost = 0, want_lost = 0;
    snprintf(why, wn, "%s", exact ? "as expected" : "no grade.json");
    for (size_t i = 0; grades && i < grades->count; i++) {
        const JsonValue *one = json_at(grades, i);
        const char *label = json_get(one, "label")->string;
        char failed[300], want[300], item[80];
        failed_of(one, failed, sizeof failed);
        breaks_of(spec, label, want, sizeof want);
        const JsonValue *checks = json_get(one, "checks");
        for (size_t k = 0; k < checks->count; k++) {
            const JsonValue *c = json_at(checks, k);
            char listed[320];
            snprintf(item, sizeof item, ",%s,", json_get(c, "name")->string);
            snprintf(listed, sizeof listed, ",%s,", want);
            if (strstr(listed, item)) want_lost += num(c, "max");
        }
        lost += num(one, "max") - num(one, "points");
        if (strcmp(failed, want) != 0 && exact) {
            exact = 0;
            snprintf(why, wn, "%s failed %s, not %s", label, failed[0] ? failed : "nothing", want[0] ? want : "nothing");
        }
    }
    *lost_out = lost;
    return exact && lost == want_lost && lost > 0;
}

// The students whose run goes on past a failed check of their lab's own, and what that lab
// must have said: in configuration `label`, rank 0 logged a failed check event whose name starts
// with `check`, and a "warning:" line. So the mistake is visible in the run itself, not only in
// the grade, and a shardlab bug of the same kind would be too.
static const struct {
    const char *variant, *label, *check;
} WARNED[] = {
    {"ring reduce-scatter adding at chunk c's offset c n/p (right only when p divides n)", "collectives-ring-n3",
     "reduce_scatter."},
    {"ZeRO-1 keeping AdamW's m and v for the whole unit (only its slice updated)", "zero-1", "mem.optim"},
    {"--policy sqrt keeping every block's activations (recomputed into them all the same)", "ckpt", "mem.acts"},
};

static int warned_checked;  // the WARNED rows whose student was graded

static void lab_warned(const Variant *x, const char *tag) {
    int w = -1;
    for (size_t k = 0; k < sizeof WARNED / sizeof WARNED[0]; k++)
        if (!strcmp(WARNED[k].variant, x->name)) w = (int)k;
    if (w < 0) return;
    const char *check = WARNED[w].check;
    warned_checked++;
    char dir[400], path[480], first[200] = "";
    snprintf(dir, sizeof dir, "%s/grade-%s/%s", tmp, tag, WARNED[w].label);
    Events ev;
    load_rank_events(dir, 0, &ev);
    int failed = 0;
    for (int i = 0; i < ev.n; i++) {
        const JsonValue *e = ev.lines[i];
        if (!strcmp(kind(e), "check") && !json_get(e, "ok")->boolean &&
            !strncmp(json_get(e, "name")->string, check, strlen(check)) && !failed++)
            snprintf(first, sizeof first, "%s", json_get(e, "name")->string);
    }
    free_events(&ev);
    snprintf(path, sizeof path, "%s/rank-0.log", dir);
    char *log = read_file(path, NULL), *warning = log ? strstr(log, "warning: ") : NULL;
    char line[240] = "";
    if (warning) snprintf(line, sizeof line, "%.*s", (int)strcspn(warning, "\n"), warning);
    EXPECT(failed > 0 && warning, "%s: its lab logged the failed check (%s) and warned, and the run went on (%s)", x->name,
           first[0] ? first : check, line[0] ? line : "no warning line");
    free(log);
}

// The students whose failed check must say which way they are off, and the words it must use:
// in configuration `label`, check `check`'s reason in grade.json holds `words`.
static const struct {
    const char *variant, *label, *check, *words;
} SAYS[] = {
    {"ZeRO summing the loss with an all-reduce of one float, as PyTorch's all_reduce(loss)", "zero-1", "comm.bytes",
     "sent fewer bytes than the algorithm needs"},
};
static int says_checked;

static void reason_says(const Variant *x, const JsonValue *g) {
    for (size_t k = 0; k < sizeof SAYS / sizeof SAYS[0]; k++) {
        if (strcmp(SAYS[k].variant, x->name)) continue;
        says_checked++;
        const JsonValue *grades = g ? json_get(g, "grades") : NULL;
        const char *reason = "";
        for (size_t i = 0; grades && i < grades->count; i++) {
            const JsonValue *one = json_at(grades, i), *checks = json_get(one, "checks");
            if (strcmp(json_get(one, "label")->string, SAYS[k].label)) continue;
            for (size_t c = 0; checks && c < checks->count; c++)
                if (!strcmp(json_get(json_at(checks, c), "name")->string, SAYS[k].check))
                    reason = json_get(json_at(checks, c), "reason")->string;
        }
        EXPECT(strstr(reason, SAYS[k].words) != NULL, "%s: %s's %s says '%s' (%s)", x->name, SAYS[k].label, SAYS[k].check,
               SAYS[k].words, reason);
    }
}

// The grading guide's index of the student regions (labs/command/grade/README.md, For instructors,
// step 1) lists each one, by its file and its BEGIN SOLUTION line, and nothing else.
static void check_region_index(void) {
    char *readme = read_file("labs/command/grade/README.md", NULL);
    FILE *p = popen("grep -rn --include='*.c' --include='*.h' --include='*.cu' 'BEGIN SOLUTION' labs", "r");
    int regions = 0, listed = 0, rows = 0;
    char line[1024], missing[300] = "";
    while (p && fgets(line, sizeof line, p)) {
        char *colon = strchr(line, ':'), *what = strstr(line, "BEGIN SOLUTION: "), *end = what ? strstr(what, " */") : NULL;
        if (!colon || !what || !end) continue;
        *colon = 0, *end = 0;
        what += strlen("BEGIN SOLUTION: ");
        char row[900];
        snprintf(row, sizeof row, "| `%.200s` | %.600s |", line, what);
        regions++;
        if (readme && strstr(readme, row)) listed++;
        else if (!missing[0]) snprintf(missing, sizeof missing, "%.290s", row);
    }
    if (p) pclose(p);
    for (const char *q = readme; q && (q = strstr(q, "\n   | `labs/")); q++) rows++;
    EXPECT(regions >= 10 && listed == regions && rows == regions,
           "labs/command/grade/README.md's index lists the %d student regions, each by its file and what it does, and no other "
           "(%d listed, %d rows%s%s)", regions, listed, rows, missing[0] ? "; missing " : "", missing);
    free(readme);
}

// The grader's own code (labs/command/grade/) calls nothing defined in a file that holds a student's
// part (a file with a BEGIN SOLUTION region: 04-data-sharding/sampler.c, 14-activation-checkpointing/activation_checkpointing.c,
// 03-collectives/ring.c, ...): what it expects is computed from files no student edits, so a run graded
// with a student's own build is still graded against the formula, not against the student.
static void check_grader_calls_no_student_file(const char *build_dir) {
    char cmd[2000], line[512], said[400] = "";
    snprintf(cmd, sizeof cmd,
             "B='%s'; nm -u \"$B\"/grade/*.o | awk 'NF {print $NF}' | sort -u >\"$B/.grade-undefined\" || exit 1; "
             "n=0; for f in $(grep -rl --include='*.c' 'BEGIN SOLUTION' labs/*/); do "
             "  grep -q '^int main(' \"$f\" && continue; "
             "  case $f in labs/common/*) o=\"$B/common/${f#labs/common/}\";; *) o=\"$B/algo/${f#labs/}\";; esac; "
             "  o=\"${o%%.c}.o\"; "
             "  [ -f \"$o\" ] || { echo \"missing $o\"; continue; }; n=$((n + 1)); "
             "  nm -g --defined-only \"$o\" | awk 'NF == 3 {print $3}' | sort -u | comm -12 - \"$B/.grade-undefined\" | "
             "  sed \"s|\\$| ($f)|\"; done; echo \"files $n\"; rm -f \"$B/.grade-undefined\"",
             build_dir);
    FILE *p = popen(cmd, "r");
    int files = 0, calls = 0;
    while (p && fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        if (sscanf(line, "files %d", &files) == 1) continue;
        calls++;
        if (strlen(said) + strlen(line) + 3 < sizeof said) strcat(strcat(said, said[0] ? "; " : ""), line);
    }
    int rc = p ? pclose(p) : -1;
    EXPECT(rc == 0 && files >= 5 && calls == 0,
           "the grader calls nothing in the %d files that hold a student's part (%s)", files, calls ? said : "none");
}

// ---- a student's own make grade: what the instructor's make grade LABS= gives ------------------
//
// In a student's copy, `make grade` is the grading guide's last step, and the grader there is the
// copy's own build. So a reference run that executed a student region would run the
// student's code on both sides of the comparison, and a wrong region would pass. The wrong
// students here are those whose edit is in a region that the reference of their graded
// configurations reaches when it is a lab program of the copy: `single -n 1` steps AdamW
// (common/model/adamw.c), `shard -n 1` draws the epoch's order (04-data-sharding/sampler.c) and reads its
// part (shard.c). Each is written into one starter copy (every other region as the solution
// writes it), self-graded there with make grade, and graded as the instructor's make grade
// LABS=<copy> grades it: this build's shardlab on the copy's labs, built on the CPU as the
// copy's make grade builds them (build/student/<hash>).
static const char *const SELF_GRADED_FILES[] = {"common/model/adamw.c", "04-data-sharding/sampler.c", "04-data-sharding/shard.c"};

static void check_self_grade(void) {
    char self[600];
    snprintf(self, sizeof self, "%s/self", tmp);
    int rc = sh("sh labs/command/grade/starter.sh %s >%s/self.out 2>&1 && cp -rp labs %s/", self, tmp, self);
    EXPECT(rc == 0, "a starter copy whose student wrote every region as the solution does (exit %d)", rc);
    int graded = 0;
    enum { NV = sizeof VARIANTS / sizeof VARIANTS[0] };
    for (size_t v = 0; rc == 0 && v < NV; v++) {
        const Variant *x = &VARIANTS[v];
        int reached = 0;
        for (size_t f = 0; f < sizeof SELF_GRADED_FILES / sizeof *SELF_GRADED_FILES; f++)
            reached |= !strcmp(x->file, SELF_GRADED_FILES[f]);
        if (!reached) continue;
        char path[800], out_self[700], out_inst[700];
        snprintf(path, sizeof path, "%s/labs/%s", self, x->file);
        char *solution = read_file(path, NULL);
        if (!EXPECT(solution && replace_once(path, x->old, x->new_text), "%s: the edit applies to the copy's %s", x->name,
                    x->file)) {
            free(solution);
            continue;
        }
        snprintf(out_self, sizeof out_self, "%s/self-grade-%zu", tmp, v);
        snprintf(out_inst, sizeof out_inst, "%s/instructor-grade-%zu", tmp, v);
        // The student, in the copy, as the grading guide says (no GPU, no packages installed).
        sh("cd %s && CUDA_VISIBLE_DEVICES= make -s grade DEPS=0 CUDA=0 ONLY=%s OUT=%s REFS=%s/self-refs >%s/self-%zu.txt "
           "2>&1", self, x->only, out_self, tmp, tmp, v);
        // The instructor: this build's shardlab on the labs make grade built from the copy.
        sh("CUDA_VISIBLE_DEVICES= %s grade --quiet --labs \"$(ls -d %s/build/student/*/labs)\" --only %s --refs %s/refs "
           "--out %s >%s/instructor-%zu.txt 2>&1", shardlab, self, x->only, tmp, out_inst, tmp, v);
        JsonValue *gs = load_json_file(out_self, "grade.json"), *gi = load_json_file(out_inst, "grade.json");
        char ts[4000], ti[4000], why[400];
        rubric_text(gs, ts, sizeof ts);
        rubric_text(gi, ti, sizeof ti);
        double lost;
        int exact = exactly(gi, x->breaks, &lost, why, sizeof why);
        // Proves: the same checks pass and fail with the same points in both, and the
        // instructor's loses exactly the checks the mistake breaks (so neither passed it).
        EXPECT(gs && gi && !strcmp(ts, ti) && exact,
               "%s: self-graded in its copy (make grade ONLY=%s) it scores what the instructor's make grade LABS= "
               "gives, %.0f/%.0f and %.0f/%.0f, failing exactly %s (%s%s%s%s%s)", x->name, x->only,
               gs ? num(gs, "points") : -1, gs ? num(gs, "max") : -1, gi ? num(gi, "points") : -1,
               gi ? num(gi, "max") : -1, x->breaks, why, strcmp(ts, ti) ? "; self: " : "", strcmp(ts, ti) ? ts : "",
               strcmp(ts, ti) ? "; instructor: " : "", strcmp(ts, ti) ? ti : "");
        json_free(gs);
        json_free(gi);
        write_text(path, "w", solution);
        free(solution);
        graded++;
    }
    EXPECT(graded >= 3, "self-graded: %d wrong students whose region a reference reaches", graded);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_variants SHARDLAB (from the repository root)\n");
        return 2;
    }
    shardlab = argv[1];
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-variants-XXXXXX");
    if (!mkdtemp(tmp)) return perror("mkdtemp"), 1;
    double t_start = now_s();

    check_region_index();
    char build_dir[600];
    snprintf(build_dir, sizeof build_dir, "%s", shardlab);
    char *slash = strrchr(build_dir, '/');  // SHARDLAB is BUILD/shardlab
    if (slash) *slash = 0;
    else snprintf(build_dir, sizeof build_dir, ".");
    check_grader_calls_no_student_file(build_dir);

    // ---- the starter: builds as it is, stops at its stubs, scores zero ------------------------
    int rc = sh("sh labs/command/grade/starter.sh %s/starter >%s/starter.out 2>&1", tmp, tmp);
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
    JsonValue *g;
    rc = grade_labs(bdir, NULL, NULL, "starter", &g);
    const JsonValue *labs = g ? json_get(g, "labs") : NULL;
    int zero_labs = 0;
    for (size_t i = 0; labs && i < labs->count; i++) zero_labs += num(json_at(labs, i), "points") == 0;
    EXPECT(rc == 1 && g && num(g, "points") == 0 && labs && labs->count == 11 && zero_labs == 11,
           "the starter scores 0 on every lab (%.0f/%.0f, exit %d)", g ? num(g, "points") : -1, g ? num(g, "max") : -1, rc);
    // The same points are at stake as for the reference (26 configurations, ddp-accum, hsdp,
    // fsdp-prefetch, tp-sp, collectives-ring-n3, pp with m < p, cp's three and ep's four among
    // them): failed runs lose no checks from the rubric.
    EXPECT(g && num(g, "max") == 263, "out of the reference's 263 points (%.0f)", g ? num(g, "max") : -1);
    // make check's table (tests/todo/regions.c) gives each configuration the grader's maximum.
    const JsonValue *grades = g ? json_get(g, "grades") : NULL;
    int same = 0, configs = grades ? (int)grades->count : 0;
    for (int i = 0; i < configs; i++) {
        const JsonValue *one = json_at(grades, i);
        for (int k = 0; k < TODO_NCONFIGS; k++)
            same += !strcmp(TODO_CONFIGS[k].label, json_get(one, "label")->string) && TODO_CONFIGS[k].points == num(one, "max");
    }
    EXPECT(configs == TODO_NCONFIGS && same == configs, "make check's table of the graded configurations gives each the "
           "grader's maximum (%d of %d)", same, configs);
    json_free(g);
    snprintf(out, sizeof out, "%s/grade-starter", tmp);
    rc = sh("grep -q 'not written yet: ' %s/single/rank-0.log", out);
    EXPECT(rc == 0, "a lab that reaches a stub says 'not written yet: <what> (file:line)' in its log");
    // The starter's own grader: its reference programs (make ref-programs) built from the
    // starter's sources, where every region is a stub, and the grader beside them (this
    // build's shardlab, whose code is the starter's: labs/command/, the launcher and common/ call
    // no region, check_grader_calls_no_student_file above). A reference that ran a student
    // region would stop at its stub, and the check it serves would fail.
    char starter_grader[700];
    snprintf(starter_grader, sizeof starter_grader, "%s/shardlab", bdir);
    rc = sh("make -s -j2 BUILD=%s LABS_SRC=%s CUDA=0 ref-programs >%s/starter-ref.build 2>&1 && cp %s %s", bdir, src, tmp,
            shardlab, starter_grader);
    log = captured("starter-ref", "build");
    EXPECT(rc == 0 && !strstr(log, "warning"), "the starter's reference programs build, without a warning (%s)",
           one_line(log));
    free(log);
    printf("# the starter: %.0f s\n", now_s() - t_start);

    // ---- the reference copy: built once, full marks --------------------------------------------
    double t_ref = now_s();
    char ref_src[600], ref_build[600];
    snprintf(ref_src, sizeof ref_src, "%s/ref/labs", tmp);
    snprintf(ref_build, sizeof ref_build, "%s/build-ref", tmp);
    sh("mkdir -p %s/ref && cp -rp labs %s/ref/", tmp, tmp);
    rc = build(ref_src, ref_build, "single,collectives,ddp,zero,fsdp,tp,pp,ckpt,shard", "ref");
    // Graded by the starter's grader: its references reach no student region (a stub there
    // would stop them), and what stands in for the regions they run agrees with the solution.
    int grc = rc ? rc
                 : grade_labs_by(starter_grader, ref_build,
                                 "single,collectives,ddp,zero,fsdp,tp,pp-1f1b,pp-1f1b-m2,pp-1f1b-m1,ckpt,shard", NULL, "ref", &g);
    EXPECT(grc == 0 && g && num(g, "points") == num(g, "max"),
           "the reference copy, built the same way and graded by the starter's grader: full marks in every "
           "configuration its students are graded on (%.0f/%.0f)", g ? num(g, "points") : -1, g ? num(g, "max") : -1);
    json_free(g);
    // The replays: single and shard at 50 steps, with replay points every 10 steps; each replay
    // resumes the starter's reference program from the run's state.
    grc = rc ? rc : grade_labs_by(starter_grader, ref_build, "single,shard", "50", "ref-50", &g);
    said = captured("ref-50", "txt");
    EXPECT(grc == 0 && g && num(g, "points") == num(g, "max") && strstr(said, "over 4 replays"),
           "the reference copy at 50 steps, graded by the starter's grader: full marks, the replays from the run's "
           "replay points included (%.0f/%.0f)", g ? num(g, "points") : -1, g ? num(g, "max") : -1);
    free(said);
    json_free(g);
    // ZeRO's --mixed: its reference is ZeRO stage 0 on one rank (zero.c skips its collectives
    // there, and the shard layout is the grader's), not single.
    char zdir[700];
    snprintf(zdir, sizeof zdir, "%s/zero-mixed", tmp);
    rc = rc ? rc : sh("SHARDLAB_LABS=%s/labs %s run zero -n 2 --stage 1 --mixed --steps 6 --ui none --run-dir %s "
                      ">%s/zero-mixed.out 2>&1 && %s grade --quiet %s >%s/zero-mixed.txt 2>&1", ref_build, shardlab, zdir,
                      tmp, starter_grader, zdir, tmp);
    said = captured("zero-mixed", "txt");
    EXPECT(rc == 0 && strstr(said, "of zero -n 1 --accum 2") && strstr(said, "every check passed"),
           "ZeRO-1 --mixed of the reference copy, graded by the starter's grader against ZeRO stage 0 on one rank: "
           "full marks (exit %d: %s)", rc, one_line(strstr(said, "total") ? strstr(said, "total") : said));
    free(said);
    printf("# the reference copy: %.0f s\n", now_s() - t_ref);

    // ---- each wrong student loses exactly the points of the checks its mistake breaks ----------
    double t_students = now_s();
    enum { NV = sizeof VARIANTS / sizeof VARIANTS[0] };
    int built[NV] = {0};
    for (size_t v = 0; v < NV; v++) {
        const Variant *x = &VARIANTS[v];
        char vdir[600], vbuild[600], tag[32];
        snprintf(tag, sizeof tag, "variant-%zu", v);
        if (!EXPECT(variant_copy(x, tag, ref_src, ref_build, vdir, vbuild, sizeof vdir),
                    "%s: the edit applies to %s (the text is there once)", x->name, x->file))
            continue;
        rc = build(vdir, vbuild, x->labs, tag);
        log = captured(tag, "build");
        built[v] = rc == 0 && !strstr(log, "warning");
        free(log);
        grc = grade_labs(vbuild, x->only, NULL, tag, &g);
        double lost;
        char why[400];
        int exact = exactly(g, x->breaks, &lost, why, sizeof why);
        EXPECT(built[v] && grc == 1 && exact, "%s: builds warning-free; graded on %s, it fails exactly %s: %.0f points "
               "lost, theirs (%s)", x->name, x->only, x->breaks, lost, why);
        reason_says(x, g);
        json_free(g);
        lab_warned(x, tag);
    }
    EXPECT(warned_checked == (int)(sizeof WARNED / sizeof WARNED[0]), "every student of WARNED was graded and its lab's "
           "log read (%d of %d)", warned_checked, (int)(sizeof WARNED / sizeof WARNED[0]));
    EXPECT(says_checked == (int)(sizeof SAYS / sizeof SAYS[0]), "every student of SAYS was graded and its reason read "
           "(%d of %d)", says_checked, (int)(sizeof SAYS / sizeof SAYS[0]));
    printf("# %d students: %.0f s\n", (int)NV, now_s() - t_students);

    // ---- self-graded in the student's copy: the instructor's grade -----------------------------
    double t_self = now_s();
    check_self_grade();
    printf("# self-graded copies: %.0f s\n", now_s() - t_self);

    // ---- at length: 1000 steps, the students whose loss and gradients must still pass ----------
    double t_long = now_s();
    for (size_t v = 0; v < NV; v++) {
        const Variant *x = &VARIANTS[v];
        if (!x->at_length || !built[v]) continue;
        char vbuild[600], tag[48];
        snprintf(vbuild, sizeof vbuild, "%s/build-variant-%zu", tmp, v);
        snprintf(tag, sizeof tag, "variant-%zu-1000", v);
        grc = grade_labs(vbuild, x->at_length, "1000", tag, &g);
        double lost;
        char why[400];
        const char *breaks = x->length_breaks ? x->length_breaks : x->breaks;
        int exact = exactly(g, breaks, &lost, why, sizeof why);
        EXPECT(grc == 1 && exact, "%s, at 1000 steps (%s): exactly %s fail, %.0f points lost (%s)", x->name,
               x->at_length, breaks, lost, why);
        json_free(g);
    }
    printf("# at 1000 steps: %.0f s; in all %.0f s\n", now_s() - t_long, now_s() - t_start);

    int failed_n = test_failed;
    tmp_finish(failed_n);
    return test_done();
}
