// test_sandbox.c — a student's code runs in the sandbox (labs/command/grade/sandbox.h), never with the
// instructor's rights, and never without a deadline: make grade LABS=, make check LABS= and
// the driver's --json (what the web's "Check them" runs).
//
// Usage: test_sandbox SHARDLAB   (run from the repository root; the optimized shardlab, with
//                                 build/sandbox beside it)
//
// Three copies of labs/, each graded with make grade LABS=<copy> ONLY=single as an instructor
// does (one full build; the other two copies reuse it, timestamps kept):
//   - plain: the reference as it is; its score is what the others are held to;
//   - misbehaving: the same, plus one file whose constructor runs before main and writes into
//     $HOME, into the instructor's home by its path and into a folder outside the copy, reads
//     a file outside its tree and prints it, connects to a port this test listens on, and
//     starts 20 children and a detached grandchild that outlive it. Run outside the sandbox
//     (the control), each of those is seen; graded and checked, it scores what plain scores,
//     and nothing of it is left: no file, nothing received, no process (each carries a marker
//     in its command line and environment);
//     A run that did all its work and hangs at exit (an atexit handler) is stopped at its
//     deadline too, and fails run.complete although its logs are whole;
//   - stuck: AdamW's region loops forever, and the copy's constructor hangs before main in
//     make check's programs (ignoring SIGTERM). make grade stops its run at its deadline and
//     fails it, saying it ran out of time; make check stops the check at its deadline; both
//     within seconds of it, also where only the limits hold (SHARDLAB_SANDBOX=limits).
// Where bwrap cannot run (no user namespaces), the isolation checks are skipped and say so;
// the deadlines and the end of every process hold in every sandbox, and are checked in each.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "labtest.h"
#include "test.h"

static const char *shardlab;
static char build_dir[600], token[64], secret[128];
static int listener = -1, port;

// The build make grade LABS=<copy> uses for src (a copy's labs/): BUILD/student/<cksum of the
// absolute path>, as the Makefile names it.
static void student_build(const char *src, char *out, size_t n) {
    char cmd[800], sum[64] = "";
    snprintf(cmd, sizeof cmd, "echo '%s' | cksum", src);
    FILE *p = popen(cmd, "r");
    if (p && fscanf(p, "%63s", sum) != 1) sum[0] = 0;
    if (p) pclose(p);
    snprintf(out, n, "%s/student/%s", build_dir, sum);
}

// The first check's reason in grade.json g ("" if none).
static const char *first_reason(const JsonValue *g) {
    const JsonValue *grades = g ? json_get(g, "grades") : NULL, *one = grades ? json_at(grades, 0) : NULL;
    const JsonValue *checks = one ? json_get(one, "checks") : NULL, *c = checks ? json_at(checks, 0) : NULL;
    const JsonValue *r = c ? json_get(c, "reason") : NULL;
    return r && r->type == JSON_STRING ? r->string : "";
}

// Processes whose command line or environment holds marker; with kill_them, each is killed.
static int procs_marked(const char *marker, int kill_them) {
    int found = 0;
    DIR *d = opendir("/proc");
    char path[300], buf[1 << 16];
    for (struct dirent *e; d && (e = readdir(d));) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9' || atoi(e->d_name) == getpid()) continue;
        int marked = 0;
        for (int f = 0; f < 2 && !marked; f++) {
            snprintf(path, sizeof path, "/proc/%s/%s", e->d_name, f ? "environ" : "cmdline");
            int fd = open(path, O_RDONLY);
            ssize_t k = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
            if (fd >= 0) close(fd);
            if (k > 0) buf[k] = 0;
            for (ssize_t i = 0; i < k; i += (ssize_t)strlen(buf + i) + 1) marked |= strstr(buf + i, marker) != NULL;
        }
        if (!marked) continue;
        found++;
        if (kill_them) kill(atoi(e->d_name), SIGKILL);
    }
    if (d) closedir(d);
    return found;
}

// Connections made to our port since the last call, and whether one sent the token.
static int port_received(int *sent_token) {
    int n = 0;
    *sent_token = 0;
    for (int c; (c = accept(listener, NULL, NULL)) >= 0; n++) {
        char got[128] = "";
        struct timeval tv = {2, 0};
        setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ssize_t k = recv(c, got, sizeof got - 1, 0);
        if (k > 0) got[k] = 0, *sent_token |= strstr(got, token) != NULL;
        close(c);
    }
    return n;
}

static int exists(const char *fmt, const char *a) {
    char path[900];
    snprintf(path, sizeof path, fmt, tmp, a);
    struct stat st;
    return stat(path, &st) == 0;
}

// The student's extra file: everything a sandbox must stop, before main.
static void write_misbehaving(const char *src) {
    char path[800], text[6000];
    snprintf(path, sizeof path, "%s/common/harness/zz_misbehave.c", src);
    snprintf(text, sizeof text,
             "// zz_misbehave.c: a student's extra file, whose constructor runs before main.\n"
             "#include <arpa/inet.h>\n#include <errno.h>\n#include <netinet/in.h>\n#include <stdio.h>\n"
             "#include <stdlib.h>\n#include <string.h>\n#include <sys/socket.h>\n#include <sys/wait.h>\n"
             "#include <unistd.h>\n\n"
             "static void said(const char *what, int ok, int err) {\n"
             "    printf(\"misbehave: %%s: %%s\\n\", what, ok ? \"done\" : strerror(err));\n}\n\n"
             "static void write_to(const char *what, const char *path) {\n"
             "    FILE *f = fopen(path, \"w\");\n    int err = errno;\n"
             "    if (f) fputs(\"written by a student\\n\", f), fclose(f);\n    said(what, f != NULL, err);\n}\n\n"
             "static void hang(void) {\n    for (;;) pause();\n}\n\n"
             "static void outlive(void) {\n"
             "    char *env[] = {\"SHARDLAB_SANDBOX_TEST=%s\", \"PATH=/usr/bin:/bin\", NULL};\n"
             "    execle(\"/bin/sh\", \"sh\", \"-c\", \"while :; do sleep 1; done\", \"%s\", (char *)NULL, env);\n"
             "    _exit(1);\n}\n\n"
             "__attribute__((constructor)) static void misbehave(void) {\n"
             "    if (getenv(\"SHARDLAB_TEST_HANG_AT_EXIT\")) atexit(hang);\n"
             "    char path[1024];\n    const char *home = getenv(\"HOME\");\n"
             "    snprintf(path, sizeof path, \"%%s/%s-home.txt\", home ? home : \"/nonexistent\");\n"
             "    write_to(\"write into $HOME\", path);\n"
             "    write_to(\"write into the instructor's home\", \"%s/home/%s-abs.txt\");\n"
             "    write_to(\"write outside the copy\", \"%s/outside/%s.txt\");\n"
             "    FILE *f = fopen(\"%s/private/secret\", \"r\");\n    char line[200] = \"\";\n"
             "    int err = errno;\n"
             "    if (f && fgets(line, sizeof line, f)) printf(\"misbehave: read outside its tree: %%s\", line);\n"
             "    else said(\"read outside its tree\", 0, err);\n    if (f) fclose(f);\n"
             "    int s = socket(AF_INET, SOCK_STREAM, 0);\n"
             "    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(%d)};\n"
             "    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);\n"
             "    int ok = s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0 && send(s, \"%s\", %zu, 0) > 0;\n"
             "    said(\"send to a local port\", ok, errno);\n    if (s >= 0) close(s);\n"
             "    fflush(stdout);\n"
             "    for (int i = 0; i < 20; i++)\n        if (fork() == 0) outlive();\n"
             "    pid_t child = fork();\n"
             "    if (child == 0) {\n        setsid();\n        if (fork() == 0) outlive();\n        _exit(0);\n    }\n"
             "    if (child > 0) waitpid(child, NULL, 0);\n"
             "    printf(\"misbehave: started 20 children and a detached grandchild\\n\");\n    fflush(stdout);\n}\n",
             token, token, token, tmp, token, tmp, token, tmp, port, token, strlen(token));
    write_text(path, "w", text);
}

// The stuck student's: make check's programs hang before main, deaf to SIGTERM.
static void write_stuck(const char *src) {
    char path[800];
    snprintf(path, sizeof path, "%s/common/harness/zz_misbehave.c", src);
    write_text(path, "w",
               "// zz_misbehave.c: a student's extra file, whose constructor hangs in make check's programs.\n"
               "#include <signal.h>\n#include <string.h>\n#include <unistd.h>\n\n"
               "__attribute__((constructor)) static void hang_before_main(void) {\n"
               "    char self[1024];\n    ssize_t k = readlink(\"/proc/self/exe\", self, sizeof self - 1);\n"
               "    if (k <= 0) return;\n    self[k] = 0;\n    const char *base = strrchr(self, '/');\n"
               "    if (!base || strncmp(base + 1, \"check_\", 6) != 0) return;\n"
               "    signal(SIGTERM, SIG_IGN);\n    for (;;) pause();\n}\n");
}

// make TARGET ... in the repository, as an instructor types it (HOME ours, so a write there
// would show), bounded by `timeout` so that a broken deadline fails rather than hangs.
static int make(const char *tag, const char *args) {
    return sh("HOME=%s/home timeout 300 make -s -j2 -o all %s >%s/%s.txt 2>&1", tmp, args, tmp, tag);
}

// Nothing of the misbehaving copy is left after `what`: no file written, nothing read out,
// nothing sent, no process.
static void nothing_left(const char *what, int isolated, const char *out_dir) {
    if (isolated) {
        int written = exists("%s/home/%s-abs.txt", token) + exists("%s/outside/%s.txt", token) +
                      exists("%s/home/%s-home.txt", token);
        // Proves: the instructor's home (by $HOME or its path) and folders outside the copy are
        // out of its reach.
        EXPECT(written == 0, "%s: the student's code wrote none of its 3 files ($HOME, the home's path, a folder "
               "outside the copy): %d written", what, written);
        int leaked = sh("grep -rqs '%s' %s %s/*.txt", secret, out_dir, tmp) == 0;
        // Proves: a file outside its tree is not there to read (the grader's output holds no trace).
        EXPECT(!leaked, "%s: the file outside its tree was not read (its text is in no output)", what);
        int sent, got = port_received(&sent);
        // Proves: no network, not even loopback to this machine's ports.
        EXPECT(got == 0, "%s: the port this test listens on received nothing (%d connections%s)", what, got,
               sent ? ", the token among them" : "");
    }
    int procs = procs_marked(token, 1);
    // Proves: the 20 children and the detached grandchild ended with the sandbox.
    EXPECT(procs == 0, "%s: no process it started is left (%d)", what, procs);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_sandbox SHARDLAB (from the repository root)\n");
        return 2;
    }
    shardlab = argv[1];
    snprintf(build_dir, sizeof build_dir, "%s", shardlab);
    char *slash = strrchr(build_dir, '/');
    if (slash) *slash = 0;
    else snprintf(build_dir, sizeof build_dir, ".");
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-sandbox-XXXXXX");
    if (!mkdtemp(tmp)) return perror("mkdtemp"), 1;
    double t_start = now_s();
    snprintf(token, sizeof token, "sbxtest%d", (int)getpid());
    snprintf(secret, sizeof secret, "outside-the-tree-%s", token);
    char path[900];
    sh("mkdir -p %s/home %s/outside %s/private", tmp, tmp, tmp);
    snprintf(path, sizeof path, "%s/private/secret", tmp);
    char secret_line[200];
    snprintf(secret_line, sizeof secret_line, "%s\n", secret);
    write_text(path, "w", secret_line);
    listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof addr;
    if (listener < 0 || bind(listener, (struct sockaddr *)&addr, sizeof addr) != 0 || listen(listener, 64) != 0 ||
        getsockname(listener, (struct sockaddr *)&addr, &alen) != 0)
        return perror("listen"), 1;
    port = ntohs(addr.sin_port);

    // Which sandbox works here: bwrap isolates; every one keeps the deadline and ends everything.
    char status_cmd[700], status[1200] = "";
    snprintf(status_cmd, sizeof status_cmd, "%s/sandbox --status", build_dir);
    FILE *p = popen(status_cmd, "r");
    if (p && !fgets(status, sizeof status, p)) status[0] = 0;
    if (p) pclose(p);
    int isolated = !strncmp(status, "bwrap:", 6);
    if (!isolated) printf("ok - # SKIP the isolation checks: the sandbox here is %s", status);

    // ---- plain: the score the others are held to --------------------------------------------------
    char plain[700], plain_build[800], evil[700], evil_build[800], stuck[700], stuck_build[800], cmd[3000];
    snprintf(plain, sizeof plain, "%s/plain/labs", tmp);
    snprintf(evil, sizeof evil, "%s/evil/labs", tmp);
    snprintf(stuck, sizeof stuck, "%s/stuck/labs", tmp);
    student_build(plain, plain_build, sizeof plain_build);
    student_build(evil, evil_build, sizeof evil_build);
    student_build(stuck, stuck_build, sizeof stuck_build);
    sh("mkdir -p %s/plain && cp -rp labs %s/plain/", tmp, tmp);
    snprintf(cmd, sizeof cmd, "grade LABS=%s/plain ONLY=single OUT=%s/g-plain REFS=%s/refs", tmp, tmp, tmp);
    int rc = make("plain", cmd);
    snprintf(path, sizeof path, "%s/g-plain", tmp);
    JsonValue *g_plain = load_json_file(path, "grade.json");
    char plain_rubric[2000], rubric[2000];
    rubric_text(g_plain, plain_rubric, sizeof plain_rubric);
    EXPECT(rc == 0 && g_plain && num(g_plain, "points") == num(g_plain, "max"),
           "make grade LABS=<plain copy> ONLY=single: full marks (%s; exit %d)", plain_rubric, rc);
    printf("# plain: %.0f s\n", now_s() - t_start);

    // ---- misbehaving: the control, outside the sandbox ------------------------------------------------
    double t_evil = now_s();
    sh("cp -rp %s/plain %s/evil && cp -rp %s %s", tmp, tmp, plain_build, evil_build);
    write_misbehaving(evil);
    rc = sh("HOME=%s/home make -s -j2 BUILD=%s LABS_SRC=%s CUDA=0 DEPS=0 %s/labs/single >%s/evil-build.txt 2>&1",
            tmp, evil_build, evil, evil_build, tmp);
    rc = rc ? rc
            : sh("HOME=%s/home timeout 120 %s/labs/single --steps 1 --run-dir %s/control >%s/control.txt 2>&1", tmp,
                 evil_build, tmp, tmp);
    int sent, got = port_received(&sent);
    int written = exists("%s/home/%s-abs.txt", token) + exists("%s/outside/%s.txt", token) +
                  exists("%s/home/%s-home.txt", token);
    int read_out = sh("grep -qs '%s' %s/control.txt", secret, tmp) == 0, procs = procs_marked(token, 1);
    // Proves: each probe sees its misbehaviour where nothing stops it, so that "nothing left"
    // below means the sandbox stopped it.
    // (21 shells, each with the sleep it runs now and then: both carry the marker.)
    EXPECT(rc == 0 && written == 3 && read_out && got == 1 && sent && procs >= 21,
           "the control: the misbehaving copy run outside the sandbox wrote its 3 files (%d), read the file outside "
           "its tree (%d), reached the port (%d, token %d) and left 21 processes or more (%d; exit %d)", written, read_out, got,
           sent, procs, rc);
    sh("rm -rf %s/control %s/control.txt %s/home/* %s/outside/*", tmp, tmp, tmp, tmp);

    // ---- misbehaving: graded and checked in the sandbox -----------------------------------------------
    snprintf(cmd, sizeof cmd, "grade LABS=%s/evil ONLY=single OUT=%s/g-evil REFS=%s/refs", tmp, tmp, tmp);
    rc = make("evil", cmd);
    snprintf(path, sizeof path, "%s/g-evil", tmp);
    JsonValue *g = load_json_file(path, "grade.json");
    rubric_text(g, rubric, sizeof rubric);
    snprintf(path, sizeof path, "%s/g-evil/single/rank-0.log", tmp);
    char *log = read_file(path, NULL);
    // Proves: the code before main ran in the graded run (the misbehaviour was tried there) ...
    EXPECT(log && strstr(log, "misbehave: started 20 children"), "make grade: the constructor ran in the graded run "
           "(%s)", log ? one_line(log) : "no rank-0.log");
    // ... and the grade is the plain copy's: the sandbox takes nothing a correct run needs.
    EXPECT(rc == 0 && g && !strcmp(rubric, plain_rubric), "make grade: the misbehaving copy scores what the plain "
           "copy scores (%s; exit %d)", rubric, rc);
    free(log);
    json_free(g);
    snprintf(path, sizeof path, "%s/g-evil", tmp);
    nothing_left("make grade", isolated, path);

    snprintf(cmd, sizeof cmd, "check LABS=%s/evil TODO=adamw", tmp);
    rc = make("evil-check", cmd);
    char *said = captured("evil-check", "txt");
    EXPECT(rc == 0 && strstr(said, "passed"), "make check LABS=<misbehaving copy> TODO=adamw: passed (exit %d: %s)", rc,
           one_line(said));
    free(said);
    // The driver as the web's "Check them" runs it: --json, every message whole.
    rc = sh("timeout 300 %s/todo/check --bin %s/todo --json adamw >%s/evil-json.txt 2>&1", evil_build, evil_build, tmp);
    said = captured("evil-json", "txt");
    // Proves: the check ran the constructor too (its lines are the check's output), and passed.
    EXPECT(rc == 0 && strstr(said, "\"status\":\"passed\"") && strstr(said, "misbehave: started 20 children"),
           "the web's check (check --json): the constructor ran, the region passed (exit %d: %s)", rc, one_line(said));
    free(said);
    snprintf(path, sizeof path, "%s/g-evil", tmp);
    nothing_left("make check and check --json", isolated, path);

    // Its work done, it hangs at exit: whole logs, and still no grade.
    rc = sh("SHARDLAB_TEST_HANG_AT_EXIT=1 timeout 120 %s grade --quiet --labs %s/labs --only single --deadline 8 --refs "
            "%s/refs --out %s/g-exit >%s/exit.txt 2>&1", shardlab, evil_build, tmp, tmp, tmp);
    snprintf(path, sizeof path, "%s/g-exit", tmp);
    g = load_json_file(path, "grade.json");
    int whole = exists("%s/g-exit/single/%s", "summary.json");
    // Proves: a run stopped at its deadline is not complete, even with whole logs written.
    EXPECT(rc == 1 && whole && g && num(g, "failed") >= 1 && strstr(first_reason(g), "ran out of time: stopped after 8 s"),
           "a run that did its work and hangs at exit: stopped at its deadline, run.complete fails (summary %s; %s; "
           "exit %d)", whole ? "written" : "missing", first_reason(g), rc);
    json_free(g);
    nothing_left("the run that hangs at exit", isolated, path);

    // Bad deadlines: one line, exit 2.
    rc = sh("%s grade --labs %s/labs --deadline 0 >%s/bad1.txt 2>&1", shardlab, evil_build, tmp);
    int rc2 = sh("%s/todo/check --bin %s/todo --deadline soon adamw >%s/bad2.txt 2>&1", evil_build, evil_build, tmp);
    int rc3 = sh("%s/sandbox --deadline -1 -- true >%s/bad3.txt 2>&1", build_dir, tmp);
    int rc4 = sh("%s/sandbox --read >%s/bad4.txt 2>&1", build_dir, tmp);
    EXPECT(rc == 2 && rc2 == 2 && rc3 == 2 && rc4 == 2, "a deadline that is not a whole number of seconds, or a "
           "missing value: exit 2 from shardlab grade, make check's driver and build/sandbox (%d %d %d %d)", rc, rc2,
           rc3, rc4);
    printf("# misbehaving: %.0f s\n", now_s() - t_evil);

    // ---- stuck: an endless AdamW, a hang before main ----------------------------------------------------
    double t_stuck = now_s();
    sh("cp -rp %s/evil %s/stuck && cp -rp %s %s", tmp, tmp, evil_build, stuck_build);
    write_stuck(stuck);
    snprintf(path, sizeof path, "%s/common/model/adamw.c", stuck);
    char *adamw = read_file(path, NULL);
    const char *at = adamw ? strstr(adamw, "    float b1 = opt->beta1") : NULL;
    EXPECT(at && splice_file(path, adamw, at, 0, "    for (volatile int spin = 1; spin;) {}  // never ends\n"),
           "the stuck copy: AdamW's region loops forever");
    if (!at) free(adamw);
    char marker[900];
    snprintf(marker, sizeof marker, "%s/", stuck_build + strlen(build_dir));  // in every program's argv[0]
    snprintf(cmd, sizeof cmd, "grade LABS=%s/stuck ONLY=single OUT=%s/g-stuck REFS=%s/refs DEADLINE=4", tmp, tmp, tmp);
    rc = make("stuck", cmd);  // (make's status is 2 when a command fails: the grader's 1)
    snprintf(path, sizeof path, "%s/g-stuck", tmp);
    g = load_json_file(path, "grade.json");
    // Proves: the run is stopped and failed, saying it ran out of time and what gives more.
    EXPECT(rc == 2 && g && num(g, "points") == 0 && strstr(first_reason(g), "ran out of time: stopped after 4 s") &&
           strstr(first_reason(g), "DEADLINE="),
           "make grade DEADLINE=4 on an endless AdamW: 0 points, run.complete says it ran out of time (%s; exit %d)",
           first_reason(g), rc);
    json_free(g);
    double t0 = now_s();
    rc = sh("timeout 120 %s grade --quiet --labs %s/labs --only single --deadline 3 --refs %s/refs --out %s/g-stuck-3 "
            ">%s/stuck-3.txt 2>&1", shardlab, stuck_build, tmp, tmp, tmp);
    double secs = now_s() - t0;
    // Proves: the deadline is kept from outside, within seconds of it.
    EXPECT(rc == 1 && secs >= 3 && secs < 13, "shardlab grade --deadline 3: the endless run stopped after %.1f s "
           "(exit %d)", secs, rc);
    int left = procs_marked(marker, 1);
    EXPECT(left == 0, "no process of the stuck copy is left after its graded runs (%d)", left);

    snprintf(cmd, sizeof cmd, "check LABS=%s/stuck TODO=adamw DEADLINE=3", tmp);
    rc = make("stuck-check", cmd);
    said = captured("stuck-check", "txt");
    // Proves: make check's deadline holds for a program that hangs before main.
    EXPECT(rc == 2 && strstr(said, "ran out of time: stopped after 3 s"),
           "make check DEADLINE=3 with a hang before main: stopped, saying it ran out of time (exit %d: %s)", rc,
           one_line(said));
    free(said);
    const char *modes[] = {"auto", "limits"};
    for (int m = 0; m < 2; m++) {
        t0 = now_s();
        rc = sh("SHARDLAB_SANDBOX=%s timeout 120 %s/todo/check --bin %s/todo --deadline 2 adamw >%s/stuck-check-%s.txt "
                "2>&1", modes[m], stuck_build, stuck_build, tmp, modes[m]);
        secs = now_s() - t0;
        char tag[64];
        snprintf(tag, sizeof tag, "stuck-check-%s", modes[m]);
        said = captured(tag, "txt");
        left = procs_marked(marker, 1);
        // Proves: in the sandbox, and where only the limits hold, the hang is ended at its deadline.
        EXPECT(rc == 1 && strstr(said, "ran out of time") && secs >= 2 && secs < 10 && left == 0,
               "SHARDLAB_SANDBOX=%s: the check that hangs before main stopped after %.1f s, nothing left (%d; exit %d: "
               "%s)", modes[m], secs, left, rc, one_line(said));
        free(said);
    }
    printf("# stuck: %.0f s; in all %.0f s\n", now_s() - t_stuck, now_s() - t_start);

    json_free(g_plain);
    procs_marked(token, 1);
    sh("rm -rf %s %s %s", plain_build, evil_build, stuck_build);
    close(listener);
    tmp_finish(test_failed);
    return test_done();
}
