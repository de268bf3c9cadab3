// test_todo.c — `make check`: every TODO region's check against the reference, the starter and
// the wrong students.
//
// Usage: test_todo   (from the repository root)
//
// What it proves:
//   1. the table of regions (tests/todo/regions.c) names every /* BEGIN SOLUTION: what */ region
//      of labs/ once, by its file and its words, and nothing else; each check program holds
//      exactly the checks of its regions; the configurations' points add up to the grader's
//      263 (test_variants compares each with the grader's own maximum); each region's "reread"
//      names lessons and lexicon terms that exist, and AdamW's lands where decoupled weight
//      decay is explained; labs/command/grade/README.md's index names each region's check, and
//      README.md's map of the course gives each lesson the regions that name it;
//   2. the reference solution (a copy of labs/, built as make check builds one: CPU, LABS_SRC):
//      every check passes, each alone in a few seconds, and the progress view says so;
//   3. the starter (make starter): every check says "not written yet: <its words>
//      (labs/<its file>:<line>)", and the progress view points at the first region;
//   4. each wrong student of tests/variants.h whose edit falls inside a region: that region's
//      check fails, and its message names where (the words in CAUGHT below: the rank, chunk,
//      round, unit, stage or micro-batch, and what was expected); every such student has
//      its line in CAUGHT, so a new one cannot go unchecked;
//   5. make check itself (the Makefile's path) on a copy whose region does not compile: every
//      region says "does not build" with the compiler's error, naming the file.
// The copies share one build of the reference (timestamps kept), so the starter and each
// student cost the compile of the files they changed.
#include <sys/stat.h>

#include "labtest.h"
#include "test.h"
#include "todo/regions.c"
#include "variants.h"

// What the check of the region a wrong student broke must say (every word, in any order).
static const struct {
    const char *variant, *region;
    const char *says[4];
} CAUGHT[] = {
    {"ring all-gather with the wrong chunk index", "ring-all-gather", {"all-gather on 3 ranks", "rank ", "step 2"}},
    {"all-to-all sending rank r+k the block meant for rank r-k", "all-to-all",
     {"after the all-to-all", "block for rank", "so in step "}},
    {"ZeRO's shard one element too long", "zero-shard-length", {"unit ", "ranks", "should be", "got"}},
    {"1F1B with one forward too many before the first backward", "pp-schedule", {"stage ", "micro-batches", "should be", "got"}},
    {"recomputation in the wrong order (each block reads a stale input)", "ckpt-recompute", {"block ", "segment", "expected"}},
    {"FSDP freeing each unit's gathered weights one unit late in the backward pass", "fsdp-backward", {"rank ", "unit ", "micro-batch"}},
    {"--prefetch forgotten in the backward pass", "fsdp-backward", {"prefetch", "unit ", "rank "}},
    {"--sp: g forward all-reduced, then the rank's own rows kept", "tp-g-forward", {"rank ", "reduce-scatter", "bytes"}},
    {"a sampler whose ranks' parts overlap (rank r starts at position r of each batch)", "shard-read",
     {"rank ", "batch ", "item "}},
    {"a sampler that reads every global batch whole and keeps its part", "shard-read", {"rank ", "read", "bytes"}},
    {"ZeRO-1 completing the all-reduce (the summed gradients all-gathered too, as in DDP)", "zero-reduce-scatter",
     {"stage 1", "rank ", "all-gathered", "bytes"}},
    {"FSDP gathering each unit's summed gradient back (and never using it)", "fsdp-backward", {"rank ", "unit ", "all-gathered", "bytes"}},
    {"HSDP without the sum across replicas (each replica steps on its own data's gradient)", "fsdp-replicas", {"rank ", "replica ", "unit "}},
    {"AdamW with coupled (L2) weight decay", "adamw", {"step 1", "element ", "moments should be", "got"}},
    {"cp's zig-zag giving rank r chunks r and N+r (not its mirror 2N-1-r)", "cp-layout", {"rank ", "holds positions", "expected", "2N-1-r"}},
    {"ring attention's merge weighting a block's unnormalized sum (ob, not ob / l)", "cp-merge",
     {"block(s)", "query at position", "expected", "weighted mean"}},
    {"the forward ring stopping a hand-over early (the last block never arrives)", "cp-ring-step",
     {"ranks: rank ", "query at position", "expected", "ring step"}},
    {"cp's position embeddings looked up at the rank's own indices, not the global positions", "cp-positions",
     {"token ", "global position", "expected", "wpe[pos["}},
    {"ep's capacity applied per rank to its own tokens, not over the pass", "ep-capacity",
     {"rank(s) of", "expert ", "choice-1 assignments", "expected"}},
    {"ep's capacity serving by rank first, not first choices first", "ep-capacity",
     {"rank(s)", "expert ", "choice-", "first choices first"}},
    // The grader's blind spots (variants.h): each region's check already tries the case.
    {"ring reduce-scatter adding at chunk c's offset c n/p (right only when p divides n)", "ring-reduce-scatter",
     {"ranks, ", "elements", "values of other elements", "offset"}},
    {"1F1B forwarding every micro-batch first when there are fewer than stages (m < p, not m < p - s)", "pp-schedule",
     {"stage ", "micro-batches", "should be", "got"}},
    {"AdamW with eps inside the square root", "adamw", {"step 1, element ", "gradient", "eps inside the square root"}},
};

// The check programs of src (a copy of labs/) built into bdir; 0 on success, the log in tmp/<tag>.build.
static int build(const char *src, const char *bdir, const char *tag) {
    return sh("make -s -j2 BUILD=%s LABS_SRC=%s CUDA=0 todo-programs >%s/%s.build 2>&1", bdir, src, tmp, tag);
}

// Runs bdir/todo/check_<program> <region>: its exit status, *said its output, *secs its time.
static int run_check(const char *bdir, const TodoRegion *r, const char *tag, char **said, double *secs) {
    char prog[700];
    snprintf(prog, sizeof prog, "%s/todo/check_%s", bdir, r->program);
    char *argv[] = {prog, (char *)r->name, NULL};
    double t0 = now_s();
    int rc = run(argv, tag);
    if (secs) *secs = now_s() - t0;
    *said = captured(tag, "out");
    return rc;
}

// The region (of TODO_REGIONS) whose BEGIN..END lines in labs/<file> hold the text old, or NULL.
static const TodoRegion *region_holding(const char *file, const char *old) {
    char path[600];
    snprintf(path, sizeof path, "labs/%s", file);
    char *text = read_file(path, NULL);
    const char *at = text ? strstr(text, old) : NULL;
    const TodoRegion *found = NULL;
    for (const char *begin = text; at && (begin = strstr(begin, "/* BEGIN SOLUTION: ")) && begin < at; begin++) {
        const char *end = strstr(begin, "/* END SOLUTION */");
        if (!end || end < at) continue;
        const char *what = begin + strlen("/* BEGIN SOLUTION: ");
        for (int i = 0; i < TODO_NREGIONS; i++) {
            size_t n = strlen(TODO_REGIONS[i].what);
            if (!strcmp(TODO_REGIONS[i].file, file) && !strncmp(what, TODO_REGIONS[i].what, n) &&
                !strncmp(what + n, " */", 3))
                found = &TODO_REGIONS[i];
        }
    }
    free(text);
    return found;
}

// ---- 1. the table ------------------------------------------------------------------------------

static void check_table(void) {
    FILE *p = popen("cd labs && grep -rn --include='*.c' --include='*.h' --include='*.cu' 'BEGIN SOLUTION: ' .", "r");
    char line[1024], missing[400] = "";
    int markers = 0, matched = 0, seen[64] = {0};
    while (p && fgets(line, sizeof line, p)) {
        char *colon = strchr(line, ':'), *what = strstr(line, "BEGIN SOLUTION: "), *end = what ? strstr(what, " */") : NULL;
        if (!colon || !what || !end) continue;
        *colon = 0, *end = 0;
        what += strlen("BEGIN SOLUTION: ");
        const char *file = line + 2;  // past "./"
        markers++;
        int hit = -1;
        for (int i = 0; i < TODO_NREGIONS; i++)
            if (!strcmp(TODO_REGIONS[i].file, file) && !strcmp(TODO_REGIONS[i].what, what)) hit = i;
        if (hit >= 0 && !seen[hit]++) matched++;
        else if (!missing[0]) snprintf(missing, sizeof missing, "%.200s: %.180s", file, what);
    }
    if (p) pclose(p);
    EXPECT(markers >= 16 && matched == markers && TODO_NREGIONS == markers,
           "the %d regions of labs/ each have one row in tests/todo/regions.c, and there are no others (%d rows, %d "
           "matched%s%s)", markers, TODO_NREGIONS, matched, missing[0] ? "; no row for " : "", missing);
    int total = 0, names_ok = 1;
    for (int i = 0; i < TODO_NCONFIGS; i++) total += TODO_CONFIGS[i].points;
    for (int i = 0; i < TODO_NREGIONS; i++) {
        const TodoRegion *r = &TODO_REGIONS[i];
        int named = 1, known = 0;  // the labels r->graded names, and those among the 15
        for (const char *q = r->graded; *q; q++) named += *q == ',';
        for (int k = 0; k < TODO_NCONFIGS; k++) known += todo_region_runs_in(r, TODO_CONFIGS[k].label);
        if (known != named) names_ok = 0;
        if (todo_region_named(r->name) != r) names_ok = 0;
    }
    // The grading guide's index of the regions (labs/command/grade/README.md, For instructors) names
    // each one's check.
    char *readme = read_file("labs/command/grade/README.md", NULL);
    int listed = 0;
    for (int i = 0; readme && i < TODO_NREGIONS; i++) {
        char row[700], name[80];
        snprintf(row, sizeof row, "| `labs/%s` | %s |", TODO_REGIONS[i].file, TODO_REGIONS[i].what);
        snprintf(name, sizeof name, "| `%s` |\n", TODO_REGIONS[i].name);
        const char *at = strstr(readme, row), *eol = at ? strchr(at, '\n') : NULL;
        listed += at && eol && !strncmp(eol + 1 - strlen(name), name, strlen(name));
    }
    free(readme);
    EXPECT(listed == TODO_NREGIONS, "labs/command/grade/README.md's index of the regions names each one's check (%d of %d)",
           listed, TODO_NREGIONS);
    EXPECT(total == 263 && names_ok, "the 26 graded configurations are worth the grader's 263 points (%d), and every "
           "region names configurations among them, under a name of its own", total);
}

// Each region's reread pointer: the lessons it names ("lesson 3 (slug)", "lessons 10 and 11
// (slug, slug)") and the lexicon terms after "lexicon:" exist, so a student who fails a check is
// sent somewhere real. AdamW's lesson explains decoupled weight decay, the W its check tests,
// in the paragraph the pointer names.
static void check_reread(void) {
    int named = 0, missing = 0, with_lesson = 0;
    char first_missing[200] = "";
    for (int i = 0; i < TODO_NREGIONS; i++) {
        const char *r = TODO_REGIONS[i].reread, *open = strchr(r, '(');
        const char *close = open ? strchr(open, ')') : NULL, *lex = strstr(r, "lexicon: ");
        char list[400] = "";
        if (open && close && !strncmp(r, "lesson", 6)) snprintf(list, sizeof list, "%.*s", (int)(close - open - 1), open + 1);
        with_lesson += list[0] != 0;
        for (char *save, *slug = strtok_r(list, ", ", &save); slug; slug = strtok_r(NULL, ", ", &save)) {
            named++;
            if (sh("ls lessons/[0-9][0-9]-%s.md >/dev/null 2>&1", slug) != 0 && !missing++)
                snprintf(first_missing, sizeof first_missing, "%s: lesson %s", TODO_REGIONS[i].name, slug);
        }
        if (lex) {
            snprintf(list, sizeof list, "%s", lex + strlen("lexicon: "));
            for (char *save, *term = strtok_r(list, ", ", &save); term; term = strtok_r(NULL, ", ", &save)) {
                char path[300];
                snprintf(path, sizeof path, "lexicon/%s.md", term);
                named++;
                if (access(path, R_OK) != 0 && !missing++)
                    snprintf(first_missing, sizeof first_missing, "%s: lexicon %s", TODO_REGIONS[i].name, term);
            }
        }
    }
    EXPECT(with_lesson == TODO_NREGIONS && missing == 0, "every region's reread names a lesson, and its lessons and lexicon "
           "terms exist (%d of %d name a lesson; %d named, %d missing%s%s)", with_lesson, TODO_NREGIONS, named, missing,
           missing ? ": " : "", first_missing);
    // AdamW's: the paragraph it names, in that lesson, explains decoupled weight decay.
    const TodoRegion *adamw = todo_region_named("adamw");
    const char *quoted = adamw ? strchr(adamw->reread, '"') : NULL, *end = quoted ? strchr(quoted + 1, '"') : NULL;
    char want[120] = "", *lesson = read_file("lessons/02-where-memory-goes.md", NULL);
    if (quoted && end) snprintf(want, sizeof want, "**%.*s**", (int)(end - quoted - 1), quoted + 1);
    const char *para = lesson && want[0] ? strstr(lesson, want) : NULL, *para_end = para ? strstr(para, "\n\n") : NULL;
    int explains = para && para_end && memmem(para, (size_t)(para_end - para), "decoupled", 9) &&
                   memmem(para, (size_t)(para_end - para), "L2", 2) && strstr(adamw->reread, "lesson 2 (where-memory-goes)");
    EXPECT(explains, "adamw's reread (%s) names lesson 2's paragraph %s, which explains decoupled weight decay against "
           "Adam's L2", adamw ? adamw->reread : "no region", want);
    free(lesson);
}

// README.md's map of the course: each lesson's row lists, in its TODO cell, exactly the
// regions whose reread names that lesson ("lesson 3 (collectives-and-their-cost)"), in the
// table's order, or "—" for none. So the map sends a student to the checks the lesson teaches,
// as the checks send a student back to the lesson.
static void check_course_map(void) {
    char *readme = read_file("README.md", NULL);
    FILE *ls = popen("ls lessons/[0-9][0-9]-*.md", "r");
    char file[300];
    int rows = 0, bad = 0, lessons = 0;
    while (ls && readme && fgets(file, sizeof file, ls)) {
        file[strcspn(file, "\n")] = 0;
        lessons++;
        const char *slug = file + strlen("lessons/00-");
        char slug_only[200];
        snprintf(slug_only, sizeof slug_only, "%.*s", (int)(strlen(slug) - 3), slug);
        char want[800] = "";
        for (int i = 0; i < TODO_NREGIONS; i++) {
            const char *r = TODO_REGIONS[i].reread, *open = strchr(r, '('), *close = open ? strchr(open, ')') : NULL;
            char list[400] = "";
            if (open && close) snprintf(list, sizeof list, "%.*s", (int)(close - open - 1), open + 1);
            int names = 0;
            for (char *save, *s = strtok_r(list, ", ", &save); s; s = strtok_r(NULL, ", ", &save))
                names |= !strcmp(s, slug_only);
            if (names)
                snprintf(want + strlen(want), sizeof want - strlen(want), "%s`%s`", want[0] ? ", " : "",
                         TODO_REGIONS[i].name);
        }
        if (!want[0]) snprintf(want, sizeof want, "—");
        // The row's fourth cell.
        char key[400];
        snprintf(key, sizeof key, "](%s) |", file);
        const char *at = strstr(readme, key), *cell = at ? at + strlen(key) : NULL;  // the lab cell
        for (int k = 0; cell && k < 2; k++) cell = (cell = strchr(cell, '|')) ? cell + 1 : NULL;  // past labs, files
        const char *end = cell ? strchr(cell, '|') : NULL;
        char got[800] = "";
        if (cell && end) {
            while (*cell == ' ') cell++;
            const char *e = end;
            while (e > cell && e[-1] == ' ') e--;
            snprintf(got, sizeof got, "%.*s", (int)(e - cell), cell);
        }
        rows += at != NULL;
        if (strcmp(got, want))
            bad++, printf("# README.md's map, %s: TODO regions '%s', the regions name '%s'\n", file, got, want);
    }
    if (ls) pclose(ls);
    // Proves: the map's TODO cells are the regions' own lessons. Broken variant: lesson 07's
    // row without ddp-overlap: caught, both lists printed.
    EXPECT(lessons >= 16 && rows == lessons && bad == 0,
           "README.md's map of the course lists each lesson's TODO regions as the regions name their lessons (%d rows "
           "of %d lessons, %d differ)", rows, lessons, bad);
    free(readme);
}

// ---- the progress view as JSON (check --json: what the web's lab pages draw) ------------------
// A check's message and the compiler's errors are arbitrary text: quotes, backslashes, newlines,
// control characters, bytes that are not UTF-8. check --json writes them so that they parse as
// JSON and come back as they were (a byte that is not UTF-8 as the Latin-1 character it would
// be). Its check programs here: a stand-in for check_adamw that fails with such a message, and
// no check_ring, whose build.log holds a compiler error with quotes ("does not build").
static void check_driver_json(const char *bdir) {
    char driver[700];
    snprintf(driver, sizeof driver, "%s/todo/check", bdir);
    static const char said[] = "rank 1: expected \"a\\b\" got 'c'\nsecond line\twith a tab, \x01 a control byte, "
                               "\xff a stray byte, \xe2\x80\x98UTF-8\xe2\x80\x99 quotes";
    static const char back[] = "rank 1: expected \"a\\b\" got 'c'\nsecond line\twith a tab, \x01 a control byte, "
                               "\xc3\xbf a stray byte, \xe2\x80\x98UTF-8\xe2\x80\x99 quotes";
    char bin[600], path[800];
    snprintf(bin, sizeof bin, "%s/json-bin", tmp);
    mkdir(bin, 0755);
    snprintf(path, sizeof path, "%s/message", bin);
    write_text(path, "w", said);
    snprintf(path, sizeof path, "%s/check_adamw", bin);
    write_text(path, "w", "#!/bin/sh\ncat \"$(dirname \"$0\")/message\"; echo; exit 1\n");
    chmod(path, 0755);
    snprintf(path, sizeof path, "%s/build.log", bin);
    write_text(path, "w", "labs/03-collectives/ring.c:12:5: error: expected \xe2\x80\x98;\xe2\x80\x99 before \"x\"\n");
    char *argv[] = {driver, "--bin", bin, "--json", "adamw,ring-all-gather", NULL};
    int rc = run(argv, "json");
    char *out = captured("json", "out"), err[128] = "";
    JsonValue *v = json_parse(out, strlen(out), err, sizeof err);
    const JsonValue *regions = json_get(v, "regions"), *a = json_at(regions, 0), *r = json_at(regions, 1);
    const JsonValue *am = json_get(a, "message"), *as = json_get(a, "status"), *rm = json_get(r, "message"),
                    *rs = json_get(r, "status"), *next = json_get(v, "next_region"), *failed = json_get(v, "failed"),
                    *nb = json_get(v, "does_not_build"), *configs = json_get(a, "configurations"), *pts = json_get(a, "points");
    // Proves: the message comes back byte for byte (the stray byte as U+00FF), the compiler's
    // error with its quotes, and the counts, the points and the next region are the text's.
    EXPECT(rc == 1 && v && regions && regions->count == 2 && as && !strcmp(as->string, "failed") && am &&
               !strcmp(am->string, back) && rs && !strcmp(rs->string, "does not build") && rm &&
               strstr(rm->string, "error: expected \xe2\x80\x98;\xe2\x80\x99 before \"x\"") && next &&
               next->type == JSON_STRING && !strcmp(next->string, "adamw") && failed && failed->number == 2 && nb &&
               nb->number == 1 && configs && configs->count == 24 && pts && (int)pts->number == todo_region_points(&TODO_REGIONS[0]),
           "check --json: a failure's message with quotes, backslashes, newlines, a control byte and a stray byte parses "
           "and comes back as written; 'does not build' with the compiler's quoted error (exit %d%s%s: %s)", rc,
           v ? "" : ", not JSON: ", err, one_line(out));
    json_free(v);
    free(out);
}
// ---------------------------------------------------------------------------------------------------

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-todo-XXXXXX");
    if (!mkdtemp(tmp)) return perror("mkdtemp"), 1;
    double t_start = now_s();
    check_table();
    check_reread();
    check_course_map();

    // ---- 2. the reference: every check passes, each in seconds --------------------------------
    char ref_src[600], ref_build[600];
    snprintf(ref_src, sizeof ref_src, "%s/ref/labs", tmp);
    snprintf(ref_build, sizeof ref_build, "%s/build-ref", tmp);
    sh("mkdir -p %s/ref && cp -rp labs %s/ref/", tmp, tmp);
    int rc = build(ref_src, ref_build, "ref");
    char *log = captured("ref", "build");
    EXPECT(rc == 0 && !strstr(log, "warning"), "the check programs build against a copy of labs/, warning-free (%s)",
           one_line(log));
    free(log);
    printf("# the reference's build: %.0f s\n", now_s() - t_start);
    double slowest = 0;
    const char *slowest_name = "";
    for (int i = 0; i < TODO_NREGIONS; i++) {
        const TodoRegion *r = &TODO_REGIONS[i];
        char *said, tag[80];
        double secs;
        snprintf(tag, sizeof tag, "ref-%s", r->name);
        rc = run_check(ref_build, r, tag, &said, &secs);
        EXPECT(rc == 0, "reference: the check of %s passes (exit %d, %.1f s%s%s)", r->name, rc, secs,
               said[0] ? ": " : "", one_line(said));
        if (secs > slowest) slowest = secs, slowest_name = r->name;
        free(said);
    }
    // The bound is 5 s on two idle cores; here the suite may share them, so a hang guard.
    printf("# the slowest check on the reference: %s, %.1f s\n", slowest_name, slowest);
    EXPECT(slowest < 15, "reference: every check finishes in seconds (the slowest, %s: %.1f s)", slowest_name, slowest);
    char prog[1400];
    snprintf(prog, sizeof prog, "%s/todo/check --bin %s/todo", ref_build, ref_build);
    rc = sh("%s >%s/ref-all.out 2>&1", prog, tmp);
    char *all = captured("ref-all", "out");
    char want[100];
    snprintf(want, sizeof want, "%d passed, 0 failed, 0 not written yet", TODO_NREGIONS);
    EXPECT(rc == 0 && count_lines(all) == TODO_NREGIONS + 3 && strstr(all, want) &&
               strstr(all, "next: the labs on the dashboard"),
           "reference: make check's progress view, a line per region, says '%s', exit 0 (exit %d: %s)", want, rc,
           one_line(all));
    free(all);
    check_driver_json(ref_build);  // (its own check: the driver of bdir's --json, on stand-in check programs)

    // ---- 3. the starter: every check says not written yet, where ------------------------------
    double t_starter = now_s();
    rc = sh("sh labs/command/grade/starter.sh %s/starter >%s/starter.out 2>&1 && cp -rp %s %s/build-starter", tmp, tmp,
            ref_build, tmp);
    char st_src[600], st_build[600];
    snprintf(st_src, sizeof st_src, "%s/starter/labs", tmp);
    snprintf(st_build, sizeof st_build, "%s/build-starter", tmp);
    rc = rc ? rc : build(st_src, st_build, "starter");
    log = captured("starter", "build");
    EXPECT(rc == 0 && !strstr(log, "warning"), "the starter's check programs build as they are (%s)", one_line(log));
    free(log);
    int stubs = 0;
    for (int i = 0; i < TODO_NREGIONS; i++) {
        const TodoRegion *r = &TODO_REGIONS[i];
        char *said, tag[80], where[200];
        snprintf(tag, sizeof tag, "starter-%s", r->name);
        snprintf(where, sizeof where, "(labs/%s:", r->file);
        rc = run_check(st_build, r, tag, &said, NULL);
        int ok = rc == 3 && !strncmp(said, "not written yet: ", 17) && strstr(said, r->what) && strstr(said, where);
        stubs += ok;
        if (!ok) EXPECT(0, "starter: %s says 'not written yet: %s %s<line>)' (exit %d: %s)", r->name, r->what, where, rc,
                        one_line(said));
        free(said);
    }
    EXPECT(stubs == TODO_NREGIONS, "starter: all %d checks say 'not written yet: <what> (labs/<file>:<line>)', exit 3",
           stubs);
    snprintf(prog, sizeof prog, "%s/todo/check --bin %s/todo", st_build, st_build);
    rc = sh("%s >%s/starter-all.out 2>&1", prog, tmp);
    all = captured("starter-all", "out");
    snprintf(want, sizeof want, "0 passed, 0 failed, %d not written yet", TODO_NREGIONS);
    EXPECT(rc == 1 && strstr(all, want) && strstr(all, "next: make check TODO=adamw,"),
           "starter: the progress view says '%s' and what to write first (exit %d: %s)", want, rc, one_line(all));
    free(all);
    printf("# the starter: %.0f s\n", now_s() - t_starter);

    // ---- 4. each wrong student whose edit is in a region: that region's check says where -------
    double t_students = now_s();
    int in_regions = 0;
    for (size_t v = 0; v < sizeof VARIANTS / sizeof VARIANTS[0]; v++) {
        const Variant *x = &VARIANTS[v];
        const TodoRegion *r = region_holding(x->file, x->old);
        int c = -1;
        for (size_t k = 0; k < sizeof CAUGHT / sizeof CAUGHT[0]; k++)
            if (!strcmp(CAUGHT[k].variant, x->name)) c = (int)k;
        if (!r) {
            EXPECT(c < 0, "%s: its edit is in no region, and CAUGHT does not list it", x->name);
            continue;
        }
        in_regions++;
        if (!EXPECT(c >= 0 && !strcmp(CAUGHT[c].region, r->name), "%s: its edit is in region %s, and CAUGHT says so",
                    x->name, r->name))
            continue;
        char vsrc[600], vbuild[600], tag[40];
        snprintf(tag, sizeof tag, "variant-%zu", v);
        if (!EXPECT(variant_copy(x, tag, ref_src, ref_build, vsrc, vbuild, sizeof vsrc), "%s: the edit applies", x->name))
            continue;
        char target[700];
        snprintf(target, sizeof target, "%s/todo/check_%s", vbuild, r->program);
        rc = sh("make -s BUILD=%s LABS_SRC=%s CUDA=0 %s >%s/%s.build 2>&1", vbuild, vsrc, target, tmp, tag);
        char *said;
        int crc = rc ? -1 : run_check(vbuild, r, tag, &said, NULL);
        int names = crc == 1;
        for (int k = 0; names && k < 4 && CAUGHT[c].says[k]; k++) names = strstr(said, CAUGHT[c].says[k]) != NULL;
        EXPECT(names, "%s: the check of %s fails (exit %d), saying where: %s", x->name, r->name, crc,
               crc >= 0 ? one_line(said) : "did not build");
        if (crc >= 0) free(said);
    }
    EXPECT(in_regions >= 8, "the wrong students with an edit inside a region: %d, each checked above", in_regions);
    printf("# %d students: %.0f s\n", in_regions, now_s() - t_students);

    // ---- 5. make check on a copy that does not compile -------------------------------------------
    double t_make = now_s();
    char broken[600];
    snprintf(broken, sizeof broken, "%s/broken", tmp);
    sh("cp -rp %s/starter %s", tmp, broken);
    char path[800];
    snprintf(path, sizeof path, "%s/labs/08-zero/sharded.c", broken);
    char *text = read_file(path, NULL);
    char *at = text ? strstr(text, "todo(\"the shard length of unit u") : NULL;
    int spliced = at && splice_file(path, text, at, 0, "s->shard[u] = per_rank +;\n        ");
    rc = sh("make -s check BUILD=%s/mk LABS=%s TODO=zero-shard-length,adamw >%s/make-check.out 2>&1", tmp, broken, tmp);
    all = captured("make-check", "out");
    EXPECT(spliced && rc != 0 && strstr(all, "does not build") && strstr(all, "sharded.c") && strstr(all, "error"),
           "make check on a copy whose region does not compile: 'does not build', with the compiler's error naming "
           "the file (exit %d: %s)", rc, one_line(all));
    free(all);
    printf("# make check on a copy that does not compile: %.0f s; in all %.0f s\n", now_s() - t_make, now_s() - t_start);

    int failed_n = test_failed;
    tmp_finish(failed_n);
    return test_done();
}
