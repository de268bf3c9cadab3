// test_tui.c — the terminal dashboard live, in a real terminal (tmux; see tuitest.h).
//
// usage: test_tui SHARDLAB LABS_DIR        (tests/run.sh passes build/san/shardlab and
//                                           build/labs: the sanitized launcher and dashboard,
//                                           the optimized labs so a run takes seconds)
// Checked:
//   1. live, `run ddp -n 2 --steps 400 --ui tui`: the header (lab, ranks, device, backend),
//      a row per rank, the step moving on; keys 2 3 4 r tab ? switch what is shown; p freezes
//      the view while the run goes on, p again catches up; l without the lexicon entry says
//      so, with it opens $PAGER and the dashboard comes back after it; a terminal below 60x16
//      says so and the dashboard returns when it grows; the end: FINISHED, the banner, q,
//      exit 0 and the launcher's last line;
//   2. the run with the dashboard trains exactly as the run without (--ui none): every step's
//      loss and param_hash equal, on both ranks;
//   3. q in the middle leaves the view and the run goes on to its end, rank 0's output shown;
//   4. Ctrl-C in the view stops the run: exit 130, the launcher's line, no rank left;
//   5. a rank killed with SIGKILL: the banner names it; q, exit 1; a usage error every rank
//      meets (ddp on 3 ranks, batch 8) is its one line and exit 2, with no dashboard first;
//   6. `shardlab tui DIR` on ranks started by hand with Slurm's variables (no launcher):
//      followed live; q quits the view and the ranks finish; the finished run shows its end;
//   7. SIGHUP, SIGTERM and a closed terminal, while the run goes on, with the pager open, on
//      the finished screen and with the progress line: the launcher exits as for Ctrl-C (the
//      signal's exit status, each rank's own end event), leaving no rank and no pager.
// test_tui_replay.c checks the figures drawn from runs with known numbers.
#include "tuitest.h"

// ---- 1. live ----------------------------------------------------------------------------

static void test_live(const char *dir) {
    const char *s = "live";
    char root[PATH_MAX], pager[PATH_MAX], env[3 * PATH_MAX], args[PATH_MAX + 100], path[PATH_MAX + 64];
    path_in_tmp(root, sizeof root, "root");  // the project root the view looks for lexicon/ in: empty for now
    path_in_tmp(pager, sizeof pager, "pager.sh");
    mkdir(root, 0755);
    // A pager that shows its input, then waits for a line from the terminal (as less waits for q).
    write_text(pager, "w", "#!/bin/sh\ncat\necho 'PAGER-WAITING: Enter to go back'\nread answer < /dev/tty\n");
    chmod(pager, 0755);
    snprintf(env, sizeof env, "SHARDLAB_ROOT='%s' PAGER='%s'", root, pager);
    snprintf(args, sizeof args, "run ddp -n 2 --steps 400 --run-dir '%s' --ui tui", dir);
    start_view(s, env, args);

    int rows = wait_rows(s, 2, 1, 30);
    char head[1024], want[256];
    line_at(screen, 0, head, sizeof head);
    JsonValue *meta = load_json_file(dir, "meta.json");
    const JsonValue *dev = json_get(meta, "device"), *be = json_get(meta, "backend");
    snprintf(want, sizeof want, "shardlab \xc2\xb7 ddp \xc2\xb7 2 ranks \xc2\xb7 %s \xc2\xb7 %s",
             dev && dev->type == JSON_STRING ? dev->string : "?", be && be->type == JSON_STRING ? be->string : "?");
    json_free(meta);
    // Proves: the header names the lab, the world size, and the device and backend the run's
    // meta.json says (cpu/shm here; cuda/nccl on a GPU machine).
    if (!EXPECT(strstr(head, want) != NULL, "live: the header says '%s' (%s)", want, head)) show_screen("header");
    // Proves: the overview has a row per rank, each showing a step the rank has logged.
    if (!EXPECT(rows, "live: rows r0 and r1 show their steps (r0 at %ld, r1 at %ld)", row_step(0), row_step(1)))
        show_screen("rows");

    // The step moves on by itself: the view follows the files as the ranks write them.
    long first = step_shown(), later = first;
    for (double t0 = now_s(); later <= first && now_s() - t0 < 10; usleep(50000)) capture(s), later = step_shown();
    // Proves: the view is live: a second capture shows a later step than the first.
    EXPECT(first >= 1 && later > first, "live: the header's step increases (%ld, then %ld)", first, later);

    // p: the view freezes, the run does not.
    tmux("send-keys -t %s p", s);
    int paused = wait_text(s, "VIEW PAUSED", 10);
    long frozen = step_shown(), logged = 0;
    for (double t0 = now_s(); now_s() - t0 < 15; usleep(50000))
        if ((logged = last_step_logged(dir, 0)) >= frozen + 20 || logged >= 400) break;
    usleep(400000);  // four frames' time: an unpaused view would have shown the new steps
    capture(s);
    long during = step_shown();
    // Proves: while paused the view keeps the step it had, though rank 0's log went 20 steps
    // past it (the badge says so).
    if (!EXPECT(paused && frozen < 380 && logged >= frozen + 20 && during == frozen && on_screen("VIEW PAUSED"),
                "live: p freezes the view at step %ld while rank-0.jsonl reaches step %ld (shown: %ld)", frozen, logged, during))
        show_screen("paused");
    tmux("send-keys -t %s p", s);
    long resumed = -1;
    for (double t0 = now_s(); now_s() - t0 < 10; usleep(50000)) {
        capture(s);
        if (!on_screen("VIEW PAUSED") && (resumed = step_shown()) > frozen) break;
    }
    // Proves: p again catches up: the badge goes and the header jumps past the frozen step.
    EXPECT(!on_screen("VIEW PAUSED") && resumed > frozen, "live: p again resumes (step %ld -> %ld)", frozen, resumed);

    // The panels, each recognised by a line only it draws.
    static const struct {
        const char *key, *text, *what;
    } panels[] = {
        {"2", "device memory each rank holds", "2: the memory panel"},
        {"3", "from the first span to the last", "3: the timeline panel"},
        {"4", "rank 0's output (rank-0.log", "4: the log panel, rank 0's output"},
        {"r", "where the memory goes on rank 1", "r: the log panel shows rank 1's output"},
        {"Tab", "rank  step  ms/step", "tab: from the log panel round to the overview"},
        {"?", "shardlab tui: keys", "?: the help box"},
    };
    for (size_t i = 0; i < sizeof panels / sizeof panels[0]; i++) {
        tmux("send-keys -t %s %s", s, panels[i].key);
        // Proves: the key switches to what it names (each text is drawn by that view alone).
        if (!EXPECT(wait_text(s, panels[i].text, 10), "live: key %s ('%s' shown)", panels[i].what, panels[i].text))
            show_screen(panels[i].key);
    }
    // Proves: the previous panel's text went away with the switch (the tab went to overview).
    EXPECT(!on_screen("device memory each rank holds") && !on_screen("rank 1's output"),
           "live: after tab only the overview is drawn");
    tmux("send-keys -t %s Space", s);
    // Proves: any key closes the help, and the panel under it is still the overview.
    EXPECT(wait_screen(s, "shardlab tui: keys", 0, 10) && on_screen("rank  step  ms/step"),
           "live: a key closes the help, the overview is back");

    // l without lexicon/ddp.md in the project root, then with it.
    tmux("send-keys -t %s l", s);
    // Proves: a missing lexicon entry is said in the footer, not a crash or a blank pager.
    if (!EXPECT(wait_text(s, "the lexicon entry for ddp is not there yet", 10), "live: l says the lexicon entry is not there yet"))
        show_screen("l, no entry");
    snprintf(path, sizeof path, "%s/lexicon", root);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/lexicon/ddp.md", root);
    write_text(path, "w", "# ddp\n\n**LEXICON-TEST-LINE:** every rank holds the whole model and averages the gradients.\n");
    tmux("send-keys -t %s l", s);
    int paged = wait_text(s, "LEXICON-TEST-LINE:", 10) && wait_text(s, "PAGER-WAITING", 5);
    // Proves: l shows <root>/lexicon/ddp.md rendered (no ** left) in $PAGER, and the pager
    // has the terminal (the dashboard is not drawn over it).
    if (!EXPECT(paged && !on_screen("**LEXICON") && !on_screen(" 1 overview "), "live: l opens lexicon/ddp.md, rendered, in $PAGER"))
        show_screen("pager");
    tmux("send-keys -t %s Enter", s);
    int back = 0;
    for (double t0 = now_s(); !back && now_s() - t0 < 10; usleep(50000))
        capture(s), back = on_screen(" 1 overview ") && !on_screen("LEXICON-TEST-LINE");
    // Proves: when the pager exits the dashboard takes the terminal back and redraws whole.
    if (!EXPECT(back, "live: after the pager the dashboard is back")) show_screen("after the pager");

    // A terminal too small, then big enough again.
    tmux("resize-window -t %s -x 50 -y 12", s);
    // Proves: below 60x16 the view says so (with the size) instead of drawing a broken frame.
    if (!EXPECT(wait_text(s, "terminal too small: 50x12", 10), "live: at 50x12, 'terminal too small'")) show_screen("50x12");
    tmux("resize-window -t %s -x 120 -y 36", s);
    // Proves: the view follows the resize back and draws the dashboard again.
    EXPECT(wait_text(s, "2 ranks", 10) && !on_screen("terminal too small"), "live: back at 120x36, the dashboard again");

    // The end: the badge, the banner with summary.json's numbers (rank 0 writes it last).
    int finished = wait_text(s, "FINISHED", 30);
    char sum_path[PATH_MAX + 32];
    snprintf(sum_path, sizeof sum_path, "%s/summary.json", dir);
    for (double t0 = now_s(); access(sum_path, F_OK) != 0 && now_s() - t0 < 10;) usleep(50000);
    JsonValue *sum = load_json_file(dir, "summary.json");
    snprintf(want, sizeof want, "finished: 400 steps, loss %.4f -> %.4f", num(sum, "first_loss"), num(sum, "final_loss"));
    json_free(sum);
    // Proves: the end of the run shows, with the summary's numbers.
    if (!EXPECT(finished && wait_text(s, want, 5), "live: FINISHED and the banner '%s'", want)) show_screen("end");
    // Proves: the view stays up at the end: the launcher has not exited, it waits for q.
    EXPECT(wait_rc(s, 1) < 0, "live: at the end the view stays until q");
    // Proves: the footer says so. A key's answer (p's, l's) may be there when the run ends:
    // it must give way within its 5 s.
    if (!EXPECT(wait_text(s, "the run finished: q to leave", 10), "live: at the end the footer says 'the run finished: q to leave'"))
        show_screen("waiting for q");
    tmux("send-keys -t %s q", s);
    int rc = wait_rc(s, 30);
    int said = wait_text(s, "shardlab: ddp finished on 2 rank(s)", 10);
    // Proves: q leaves the view, the launcher exits 0 and its last line is on the terminal.
    if (!EXPECT(rc == 0 && said, "live: q -> exit 0 (%d) and 'ddp finished on 2 rank(s)' shown", rc)) show_screen("after q");
    // Proves: the ranks ended with the run; none outlives the view.
    EXPECT(procs_left(dir) == 0, "live: no rank left behind");
}

// ---- 2. the dashboard does not change the training ------------------------------------

static void test_same_training(const char *tui_dir, const char *plain_dir) {
    static StepRec a[1000], b[1000];
    for (int r = 0; r < 2; r++) {
        int na = read_steps(tui_dir, r, a, 1000), nb = read_steps(plain_dir, r, b, 1000), same = na == nb, first_diff = -1;
        for (int i = 0; same && i < na; i++)
            if (a[i].step != b[i].step || a[i].loss != b[i].loss || strcmp(a[i].hash, b[i].hash) != 0) same = 0, first_diff = i;
        // Proves: watching a run changes nothing in it: bitwise the same losses and weights
        // at every step (the view only reads the files).
        EXPECT(na == 400 && same, "--ui tui and --ui none: rank %d's 400 step events have equal loss and param_hash (%d vs %d%s)",
               r, na, nb, first_diff >= 0 ? ", first difference at an event" : "");
        if (first_diff >= 0)
            printf("#   step %ld: %.9g %s vs %.9g %s\n", a[first_diff].step, a[first_diff].loss, a[first_diff].hash,
                   b[first_diff].loss, b[first_diff].hash);
    }
}

// ---- 3. q in the middle ----------------------------------------------------------------

static void test_quit_midway(const char *dir) {
    const char *s = "quit";
    char args[PATH_MAX + 100];
    snprintf(args, sizeof args, "run ddp -n 2 --steps 800 --run-dir '%s' --ui tui", dir);
    start_view(s, NULL, args);
    int started = wait_rows(s, 2, 5, 30);
    long at = step_shown();
    tmux("send-keys -t %s q", s);
    // What rank 0 printed before its first step: after q it must reach the terminal.
    int echoed = wait_text(s, "where the memory goes on rank 0", 10);
    // Proves: q leaves the view at once (the dashboard is gone, the run is not over) and
    // rank 0's output so far is printed.
    if (!EXPECT(started && echoed && !on_screen(" 1 overview ") && wait_rc(s, 0.1) < 0 && last_step_logged(dir, 0) < 800,
                "q at step %ld: the view goes, rank 0's output appears, the run goes on", at))
        show_screen("after q");
    int rc = wait_rc(s, 60);
    JsonValue *sum = load_json_file(dir, "summary.json");
    double steps = num(sum, "steps");
    json_free(sum);
    int said = wait_text(s, "shardlab: ddp finished on 2 rank(s)", 10);
    // Proves: the run went on to its end after the view left: exit 0, all 800 steps in
    // summary.json, the launcher's last line on the terminal.
    if (!EXPECT(rc == 0 && steps == 800 && said, "q at step %ld: the run still ends: exit %d, summary steps %.0f", at, rc, steps))
        show_screen("end after q");
    // Proves: rank 0's own lines kept coming to the terminal after the view left.
    EXPECT(on_screen("step   800/800"), "q midway: rank 0's last progress line 'step   800/800' is on the terminal");
    // Proves: leaving the view early does not leave the ranks without a launcher to end them.
    EXPECT(procs_left(dir) == 0, "q midway: no rank left behind");
}

// ---- 4. Ctrl-C ---------------------------------------------------------------------------

static void test_interrupt(const char *dir) {
    const char *s = "intr";
    char args[PATH_MAX + 100];
    snprintf(args, sizeof args, "run ddp -n 2 --steps 400 --run-dir '%s' --ui tui", dir);
    start_view(s, NULL, args);
    int started = wait_rows(s, 2, 3, 30);
    double t = now_s();
    tmux("send-keys -t %s C-c", s);
    int rc = wait_rc(s, 10);
    double took = now_s() - t;
    int said = wait_text(s, "shardlab: interrupted; 2 rank(s) stopped", 10);
    // Proves: Ctrl-C in the view stops the run (not only the view), with the shell's code for
    // SIGINT and the launcher's line on the restored terminal.
    if (!EXPECT(started && rc == 130 && said, "Ctrl-C in the view: exit 130 (%d) in %.1f s and 'interrupted; 2 rank(s) stopped'",
                rc, took))
        show_screen("after Ctrl-C");
    // Proves: no rank outlives the interrupted run.
    EXPECT(procs_left(dir) == 0, "Ctrl-C in the view: no rank left (%d)", procs_left(dir));
}

// ---- 5. a rank dies ----------------------------------------------------------------------

static void test_failed_rank(const char *dir) {
    const char *s = "fail";
    char args[PATH_MAX + 100];
    snprintf(args, sizeof args, "run ddp -n 2 --steps 400 --run-dir '%s' --ui tui", dir);
    start_view(s, NULL, args);
    int started = wait_rows(s, 2, 3, 30);
    pid_t pid[4] = {0};
    int found = run_procs(dir, 1, pid, 4);
    if (found == 1) kill(pid[0], SIGKILL);
    // Proves: the process found is rank 1 of this run (exactly one has its RANK and run dir).
    EXPECT(started && found == 1, "a rank dies: rank 1's pid found (%d process(es))", found);
    // A key without a binding: its answer is in the footer for 5 s, so still there when the
    // run ends (within about a second of the kill).
    tmux("send-keys -t %s x", s);
    int answered = wait_text(s, "key not bound", 5);
    int banner = wait_text(s, "rank 1 failed: ", 10);
    // Proves: the view names the rank that died (not rank 0, which stopped because of it),
    // and the badge says FAILED.
    if (!EXPECT(banner && on_screen("FAILED"), "a rank dies: the banner says 'rank 1 failed: ...'")) show_screen("failed");
    // Proves: the view stays up after the failed run ended: the launcher waits for q.
    EXPECT(wait_rc(s, 1) < 0, "a rank dies: the view stays until q");
    // Proves: the footer says why it waits once the key's answer has had its 5 s (the answer
    // is not kept on the screen until q).
    if (!EXPECT(answered && wait_text(s, "the run stopped with an error: q to leave", 10),
                "a rank dies: 'key not bound' in the footer, then 'the run stopped with an error: q to leave'"))
        show_screen("waiting for q");
    tmux("send-keys -t %s q", s);
    int rc = wait_rc(s, 10);
    int said = wait_text(s, "shardlab: rank 1 was killed by signal 9", 10);
    // Proves: after q the launcher exits 1 and its line names rank 1 and the signal.
    if (!EXPECT(rc == 1 && said, "a rank dies: q -> exit 1 (%d) and 'rank 1 was killed by signal 9' on the terminal", rc))
        show_screen("after q");
    // Proves: the surviving rank was stopped too.
    EXPECT(procs_left(dir) == 0, "a rank dies: no rank left behind");
}


// ---- 5b. a usage error ---------------------------------------------------------------------

// ddp on 3 ranks with the default batch of 8: every rank refuses it before its run log
// exists. On a terminal, where the launcher would open the dashboard, the user must see the
// one line it is and exit 2, as without a terminal.
static void test_usage_error(const char *dir) {
    const char *s = "usage";
    char args[PATH_MAX + 100];
    snprintf(args, sizeof args, "run ddp -n 3 --steps 3 --run-dir '%s'", dir);
    start_view(s, "MAKELEVEL=", args);  // (empty: not under make, whatever ran this test)
    int rc = wait_rc(s, 30);
    wait_text(s, "does not divide", 5);
    int said = 0;
    for (const char *p = screen; p && (p = strstr(p, "does not divide")); p++) said++;
    // Proves: exit 2, the lab's line once with the nearest ranks and batches that divide, and
    // nothing else: no "no dashboard (...: not a run directory ...)" before it (broken
    // variant: the launcher opens the dashboard before the ranks have refused their options).
    if (!EXPECT(rc == 2 && said == 1 && on_screen("shardlab run: ddp: --batch 8 does not divide over 3 ranks") &&
                    on_screen("use 2 or 4 ranks, or --batch") && !on_screen("no dashboard") &&
                    !on_screen("showing rank 0"),
                "a usage error on a terminal: exit 2 (%d), the one line once (%d times), no 'no dashboard' before it", rc, said))
        show_screen("usage error");
}

// ---- 6. following a run that something else started -------------------------------------

// Two ranks of the DDP lab started here with only Slurm's variables, as srun starts them (no
// shardlab launcher), then `shardlab tui DIR` in a terminal: the view follows them live; q
// leaves it and the ranks go on to their end; opened again on the finished run, it shows the
// end.
static void test_follow(const char *dir) {
    char ddp[PATH_MAX + 8], envs[2][5][96];
    snprintf(ddp, sizeof ddp, "%s/ddp", labs_dir);
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
        snprintf(envs[r][0], sizeof envs[r][0], "SLURM_PROCID=%d", r);
        snprintf(envs[r][1], sizeof envs[r][1], "SLURM_LOCALID=%d", r);
        snprintf(envs[r][2], sizeof envs[r][2], "SLURM_NTASKS=2");
        snprintf(envs[r][3], sizeof envs[r][3], "SLURM_TASKS_PER_NODE=2(x1)");
        snprintf(envs[r][4], sizeof envs[r][4], "SLURM_JOB_ID=%d", (int)getpid());
        char *env[] = {envs[r][0], envs[r][1], envs[r][2], envs[r][3], envs[r][4], NULL};
        char *argv[] = {ddp, "--run-dir", (char *)dir, "--steps", "600", NULL};
        char tag[32];
        snprintf(tag, sizeof tag, "follow.r%d", r);
        pids[r] = spawn_env(argv, tag, env);
    }
    char meta[PATH_MAX + 16], args[PATH_MAX + 16];
    snprintf(meta, sizeof meta, "%s/meta.json", dir);
    for (double t0 = now_s(); access(meta, F_OK) != 0 && now_s() - t0 < 20; usleep(50000)) {}
    snprintf(args, sizeof args, "tui '%s'", dir);
    start_view("follow", NULL, args);
    int rows = wait_rows("follow", 2, 1, 30);
    long first = step_shown(), later = first;
    for (double t0 = now_s(); later <= first && now_s() - t0 < 10; usleep(50000)) capture("follow"), later = step_shown();
    // Proves: the view follows ranks it did not start: both rows, the step moving on, LIVE.
    if (!EXPECT(rows && later > first && on_screen("ddp \xc2\xb7 2 ranks") && on_screen("LIVE"),
                "follow: a run started by hand (Slurm's variables) is followed live (step %ld, then %ld)", first, later))
        show_screen("follow");
    tmux("send-keys -t follow q");
    int rc = wait_rc("follow", 10);
    long at_quit = last_step_logged(dir, 0);
    // Proves: q ends the view at once (exit 0), before the ranks are done.
    EXPECT(rc == 0 && at_quit < 600, "follow: q quits the view (exit %d) while the ranks run (step %ld of 600)", rc, at_quit);
    int s0 = wait_status(pids[0]), s1 = wait_status(pids[1]);
    JsonValue *summary = load_json_file(dir, "summary.json");
    const JsonValue *steps = json_get(summary, "steps");
    // Proves: the ranks went on after the view went away, and finished their 600 steps.
    EXPECT(s0 == 0 && s1 == 0 && steps && steps->type == JSON_NUMBER && steps->number == 600,
           "follow: the ranks end on their own, 600 steps (exit %d, %d)", s0, s1);
    json_free(summary);
    start_view("follow2", NULL, args);
    // Proves: opened on the finished run, the view shows the end (the badge and the banner).
    if (!EXPECT(wait_text("follow2", "FINISHED", 20) && on_screen("finished: 600 steps"),
                "follow: the finished run shows FINISHED and its banner"))
        show_screen("follow2");
    tmux("send-keys -t follow2 q");
    EXPECT(wait_rc("follow2", 10) == 0, "follow: q on a finished run, exit 0");
}

// ---- 7. the terminal closed, or the launcher told to stop -------------------------------

// Processes whose command line (arguments joined by spaces) holds `needle`; their pids go to
// pids[0..max). first_arg: only those whose first argument is exactly that.
static int procs_with(const char *needle, const char *first_arg, pid_t *pids, int max) {
    int k = 0;
    DIR *d = opendir("/proc");
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        char path[300];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        size_t n = 0;
        char *text = read_file(path, &n);
        if (!text) continue;
        int first = !first_arg || strcmp(text, first_arg) == 0;
        for (size_t i = 0; i + 1 < n; i++)
            if (!text[i]) text[i] = ' ';
        if (first && strstr(text, needle) && (pid_t)atoi(e->d_name) != getpid()) {
            if (k < max) pids[k] = (pid_t)atoi(e->d_name);
            k++;
        }
        free(text);
    }
    if (d) closedir(d);
    return k;
}

// Every rank's event log ends with an end event it wrote itself, and the signal reached the
// ranks: one says "interrupted by signal <sig>" (the others may say that, or that a peer
// which stopped first is gone: they stop at a step's end, not all at the same one).
static int ranks_ended_by(const char *dir, int world, int sig) {
    int ok = 1, told = 0;
    for (int r = 0; r < world; r++) {
        char path[700], want[64];
        snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, r);
        snprintf(want, sizeof want, "interrupted by signal %d", sig);
        char *text = read_file(path, NULL);
        size_t len = text ? strlen(text) : 0;
        char *last = NULL;
        for (char *p = text; p && (p = strstr(p, "{\"ev\":")); p++) last = p;
        ok &= last && strncmp(last, "{\"ev\":\"end\"", 11) == 0 && len && text[len - 1] == '\n' &&
              !strstr(text, "(written by shardlab run)");
        told += text && strstr(text, want);
        free(text);
    }
    return ok && told;
}

// Every rank's event log ends with {"ev":"end",...,"status":"ok"}.
static int events_end_ok(const char *dir, int world) {
    int ok = 1;
    for (int r = 0; r < world; r++) {
        char path[700];
        snprintf(path, sizeof path, "%s/rank-%d.jsonl", dir, r);
        char *text = read_file(path, NULL), *last = NULL;
        for (char *p = text; p && (p = strstr(p, "{\"ev\":")); p++) last = p;
        ok &= last && strncmp(last, "{\"ev\":\"end\"", 11) == 0 && strstr(last, "\"status\":\"ok\"");
        free(text);
    }
    return ok;
}

typedef enum { AT_RUNNING, AT_PAGER, AT_FINISHED, AT_PROGRESS } StopAt;

// Stops `shardlab run ddp` in state `at` with signal sig sent to the launcher, or, when
// hangup is set, by closing its terminal (the tmux session goes: the kernel hangs the
// terminal up, and signals only its foreground process group, which is the pager's when the
// pager is open). Then checks: the exit status (when something is left to see it), the end
// events, and that no rank, no pager and no launcher is left.
static void stop_view(const char *runs, StopAt at, int sig, int hangup) {
    if (strlen(runs) > 400) return;  // (tmp is short: /tmp/test_tui-XXXXXX/runs)
    static const char *at_name[] = {"running", "pager open", "finished screen", "progress line"};
    static int seq;
    char s[32], dir[512], root[512], pager[512], env[1200], args[1200], what[128];
    snprintf(s, sizeof s, "stop%d", seq++);
    snprintf(dir, sizeof dir, "%s/%s", runs, s);
    snprintf(what, sizeof what, "%s, %s", at_name[at], hangup ? "terminal closed" : sigabbrev_np(sig));
    path_in_tmp(root, sizeof root, "stoproot");
    path_in_tmp(pager, sizeof pager, "stoppager.sh");
    snprintf(args, sizeof args, "%s/lexicon", root);
    mkdir(root, 0755), mkdir(args, 0755);
    snprintf(args, sizeof args, "%s/lexicon/ddp.md", root);
    write_text(args, "w", "# ddp\n\nSTOP-LEXICON-LINE\n");
    // The pager of test_live, under a name of its own so we can look for it afterwards.
    write_text(pager, "w", "#!/bin/sh\ncat\necho 'PAGER-WAITING: Enter to go back'\nread answer < /dev/tty\n");
    chmod(pager, 0755);
    snprintf(env, sizeof env, "SHARDLAB_ROOT='%s' PAGER='%s'", root, pager);
    snprintf(args, sizeof args, "run ddp -n 2 --steps %d --run-dir '%s' --ui %s", at == AT_FINISHED ? 30 : 100000, dir,
             at == AT_PROGRESS ? "auto < /dev/null" : "tui");
    start_view(s, env, args);
    int ready;
    if (at == AT_PROGRESS) {
        ready = wait_text(s, "[shardlab] ddp", 30) && last_step_logged(dir, 1) > 0;
        for (double t0 = now_s(); !ready && now_s() - t0 < 30; usleep(50000)) ready = last_step_logged(dir, 1) > 0;
    } else {
        ready = wait_rows(s, 2, 1, 30);
    }
    pid_t launcher = 0;  // found before the pager opens: the view forks to start it
    int found = procs_with(dir, shardlab, &launcher, 1);
    if (at == AT_PAGER) {
        tmux("send-keys -t %s l", s);
        ready &= wait_text(s, "PAGER-WAITING", 10);
    }
    if (at == AT_FINISHED) ready &= wait_text(s, "the run finished: q to leave", 60);
    if (!EXPECT(ready && found == 1, "%s: the view is in that state, launcher found (%d)", what, found)) show_screen(what);
    double t = now_s();
    if (hangup) tmux("kill-session -t %s", s);
    else if (launcher > 0) kill(launcher, sig);
    pid_t left[8];
    int alive = 1;
    for (; now_s() - t < 8 && alive; usleep(50000)) alive = launcher > 0 && kill(launcher, 0) == 0;
    int rc = hangup ? -1 : wait_rc(s, 2);
    int want = 128 + (hangup ? SIGHUP : sig);
    // Proves: the launcher ends (it does not live on without a terminal, nor wait for a q
    // that cannot come), with the shell's code for the signal when a shell is left to see it.
    EXPECT(!alive && (hangup || rc == want), "%s: the launcher exits within 8 s (%.1f s), status %d (want %d)", what,
           now_s() - t, rc, hangup ? -1 : want);
    // Proves: each rank wrote its own end event (the signal reached it and it stopped as for
    // Ctrl-C); a finished run keeps the end events it had.
    int ended = at == AT_FINISHED ? events_end_ok(dir, 2) : ranks_ended_by(dir, 2, hangup ? SIGHUP : sig);
    EXPECT(ended, "%s: every rank's log ends with its end event", what);
    int ranks = 0, pagers = 0;
    for (double t0 = now_s(); now_s() - t0 < 2 && (ranks = procs_left(dir)) + (pagers = procs_with(pager, NULL, left, 8));)
        usleep(50000);
    // Proves: nothing is left running: no rank, and no pager (its process group went too).
    EXPECT(ranks == 0 && pagers == 0, "%s: no rank (%d) and no pager process (%d) left", what, ranks, pagers);
    tmux("kill-session -t %s", s);
}

static void test_stop_view(const char *runs) {
    stop_view(runs, AT_RUNNING, SIGHUP, 0);
    stop_view(runs, AT_RUNNING, SIGTERM, 0);
    stop_view(runs, AT_RUNNING, SIGHUP, 1);
    stop_view(runs, AT_PAGER, SIGHUP, 0);
    stop_view(runs, AT_PAGER, SIGTERM, 0);
    stop_view(runs, AT_PAGER, SIGHUP, 1);
    stop_view(runs, AT_FINISHED, SIGHUP, 0);
    stop_view(runs, AT_FINISHED, SIGTERM, 0);
    stop_view(runs, AT_FINISHED, SIGINT, 0);
    stop_view(runs, AT_FINISHED, SIGHUP, 1);
    stop_view(runs, AT_PROGRESS, SIGHUP, 0);
    stop_view(runs, AT_PROGRESS, SIGHUP, 1);
}

int main(int argc, char **argv) {
    char runs[512];
    if (tui_test_setup(argc, argv, "test_tui", runs, sizeof runs) != 0) return 2;
    double t0 = now_s();
    char live[600], plain[600], quit[600], intr[600], fail[600], usage[600], follow[600];
    snprintf(live, sizeof live, "%s/live", runs);
    snprintf(plain, sizeof plain, "%s/plain", runs);
    snprintf(quit, sizeof quit, "%s/quit", runs);
    snprintf(intr, sizeof intr, "%s/intr", runs);
    snprintf(fail, sizeof fail, "%s/fail", runs);
    snprintf(usage, sizeof usage, "%s/usage", runs);
    snprintf(follow, sizeof follow, "%s/follow", runs);
    if (have_tmux) {
        test_live(live);
        int rc = run_shardlab("plain", "run", "ddp", "-n", "2", "--steps", "400", "--run-dir", plain, "--ui", "none", (char *)NULL);
        // Proves: the comparison run itself worked.
        EXPECT(rc == 0, "the same run with --ui none: exit 0 (%d)", rc);
        test_same_training(live, plain);
        test_quit_midway(quit);
        test_interrupt(intr);
        test_failed_rank(fail);
        test_usage_error(usage);
        test_follow(follow);
        test_stop_view(runs);
    }
    return tui_test_finish(t0);
}
