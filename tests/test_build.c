// test_build.c — the Makefile finds CUDA and NCCL where a stock machine has them, and builds
// `shardlab run` where ncursesw, md4c and CivetWeb are missing (a GPU node without root).
//
// Usage: test_build ROOT   (tests/run.sh passes the checkout)
//
// No GPU is needed: each case builds a fake tree in a temporary folder (an nvcc that is a
// shell script, an empty nccl.h, an empty libnccl.so) and asks `make cuda-status`, the one
// line that says what the build found and uses, with PATH cut down to /usr/bin:/bin so the
// machine's own CUDA stays out of it. What it proves:
//   1. NCCL in the system's multiarch folder (NVIDIA's Ubuntu packages: /usr/include/nccl.h,
//      /usr/lib/x86_64-linux-gnu/libnccl.so) when CUDA_HOME has none: the CUDA backend;
//   2. NCCL only in PyTorch's nvidia-nccl wheel (asked of PYTHON), which ships libnccl.so.2
//      and no libnccl.so: the CUDA backend, linked by that name;
//   3. CUDA_HOME first when it has NCCL; a nccl.h without a library is passed over;
//   4. NCCL_HOME given is used as given, and named as given;
//   5. nvcc only on PATH: its folder is CUDA's, and its NCCL is found there;
//   6. nothing found: the CPU backend, with a line that says where it looked and what to set;
//      no nvcc: the CPU backend, saying so; CUDA=0: off.
// Cases 1-6 run with a stand-in nvidia-smi (NVIDIA_SMI=) that lists one GPU of compute
// capability 9.0, as on a GPU machine. Which GPUs the kernels are built for:
//  11. no GPU here (no nvidia-smi): the CPU backend even with nvcc and NCCL found, saying so
//      and naming CUDA=1, so a laptop's first build compiles no kernel; CUDA=1 builds them
//      anyway, for every architecture (what CI does);
//  12. a GPU of compute capability 9.0: the kernels for sm_90 alone (the nvcc command line);
//      an nvidia-smi too old to say the capability: every architecture;
//  13. build/backend.txt: a build whose backend or kernel flags changed relinks the labs, an
//      unchanged one links nothing (case 10's build, again);
//  14. a CUDA lab's link line has -lcudart and no cuBLAS (cuda_open dlopens it), and when the
//      checkout's own build is CUDA, no program in it has libcublas among its NEEDED.
// Broken on purpose: without the multiarch folder in the Makefile's nccl_libdir, case 1
// builds the CPU backend and fails here; CUDA_ARCHS always CUDA_ARCHS_ALL fails case 12;
// the labs without $(BACKEND_STAMP) among their prerequisites fail case 13; -lcublas back in
// LDLIBS_CUDA fails case 14.
//
// Then the shardlab command's libraries, the same way: `make deps-status` with DEPS_SEARCH
// pointing the header search at a fake tree (-nostdinc -I<tree>: empty headers, or none):
//   7. every header there: nothing to say (the full build, as CI has it);
//   8. none, and no apt-get on PATH (a node without root): tui, lexicon and web left out, in
//      one line naming every package and make deps; DEPS=0 the same where make could install;
//      make as root with apt-get installs them first instead;
//   9. some: the line names exactly the missing ones;
//  10. that build, for real, out of tree (BUILD=, CPU, -O0): it compiles and links libc and
//      libm alone (no ncursesw, md4c, CivetWeb); `shardlab run single -n 1 --steps 2` trains;
//      tui, lexicon and web each say in one line that this build lacks them and how to get
//      them, exit 2; grade is there.
// Broken on purpose: the bare build linking tui/ and web/ (SHARDLAB_PARTS) fails case 10's
// NEEDED check; the header search without DEPS_SEARCH fails cases 8 and 9.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "shelltest.h"
#include "test.h"

static char root[4096], tmp[256];


// `make TARGET` in ROOT with the given settings, on PATH (default /usr/bin:/bin); its output
// (malloc'd, "" on failure).
static char *make_says(const char *target, const char *settings, const char *path) {
    char cmd[8000];
    snprintf(cmd, sizeof cmd, "cd '%s' && env PATH='%s' \"$(command -v make)\" -s --no-print-directory %s %s 2>&1", root,
             path ? path : "/usr/bin:/bin", target, settings);
    FILE *p = popen(cmd, "r");
    char *out = calloc(1, 8192);
    if (p) {
        size_t n = fread(out, 1, 8191, p);
        out[n] = 0;
        pclose(p);
    }
    return out;
}

// `make cuda-status`: the one line that says what the build found and uses.
static char *status(const char *settings, const char *path) { return make_says("cuda-status", settings, path); }

static const char *NVCC = "#!/bin/sh\necho 'a stand-in nvcc'\n";
// nvidia-smi as a machine with one H200 answers: the capability asked, or the GPUs listed.
static const char *SMI_H200 = "#!/bin/sh\ncase \"$*\" in\n*compute_cap*) echo '9.0' ;;\n-L) echo 'GPU 0: NVIDIA H200 (UUID: "
                              "GPU-0)' ;;\n*) exit 1 ;;\nesac\n";
// An older driver's: it lists the GPU but knows no compute_cap field.
static const char *SMI_OLD = "#!/bin/sh\ncase \"$*\" in\n-L) echo 'GPU 0: Tesla V100 (UUID: GPU-0)' ;;\n*) echo 'Field "
                             "\"compute_cap\" is not a valid field to query.'; exit 2 ;;\nesac\n";


// The number of lines in s (a last line without a newline counts).
static int count_lines(const char *s) {
    int n = 0;
    for (const char *c = s; *c; c++) n += *c == '\n';
    return n + (*s && s[strlen(s) - 1] != '\n');
}

// Cases 7-10: the shardlab command without ncursesw, md4c and CivetWeb.
static void check_libraries(void) {
    char all[400], none[400], some[400], bin[400], path[2048], settings[2048], cmd[8000];
    snprintf(all, sizeof all, "%s/inc-all", tmp);
    snprintf(none, sizeof none, "%s/inc-none", tmp);
    snprintf(some, sizeof some, "%s/inc-some", tmp);
    snprintf(bin, sizeof bin, "%s/bin-noapt", tmp);
    const char *headers[] = {"curses.h", "md4c.h", "md4c-html.h", "civetweb.h"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", all, headers[i]), test_put_file(path, "", 0);
        if (i < 2) snprintf(path, sizeof path, "%s/%s", some, headers[i]), test_put_file(path, "", 0);
    }
    snprintf(path, sizeof path, "mkdir -p '%s' '%s' && ln -sf \"$(command -v cc)\" '%s/cc' && ln -sf \"$(command -v id)\" '%s/id'",
             none, bin, bin, bin);
    if (system(path) != 0) printf("# making %s failed\n", bin);
    const char *packages = "libncurses-dev libmd4c-dev libmd4c-html0-dev libcivetweb-dev";

    // 7. Every header found: nothing to say.
    snprintf(settings, sizeof settings, "DEPS_SEARCH='-nostdinc -I%s'", all);
    char *out = make_says("deps-status", settings, NULL);
    EXPECT(out[0] == 0, "every header found: no line, every command built: '%s'", out);
    free(out);

    // 8. None, on a PATH without apt-get (cc and id only): left out, in one line.
    snprintf(settings, sizeof settings, "DEPS_SEARCH='-nostdinc -I%s'", none);
    out = make_says("deps-status", settings, bin);
    EXPECT(count_lines(out) == 1 && strstr(out, "built without tui, lexicon and web") && strstr(out, packages) &&
               strstr(out, "make deps"),
           "no headers and no apt-get: one line naming the commands left out, the packages and make deps: %s", out);
    free(out);
    snprintf(settings, sizeof settings, "DEPS=0 DEPS_SEARCH='-nostdinc -I%s'", none);
    out = make_says("deps-status", settings, NULL);
    EXPECT(count_lines(out) == 1 && strstr(out, "built without tui, lexicon and web (DEPS=0"),
           "DEPS=0: never installs, leaves them out: %s", out);
    free(out);
    int st;
    char *who = test_sh(NULL, "[ \"$(id -u)\" = 0 ] && command -v apt-get", &st);
    if (st == 0) {
        snprintf(settings, sizeof settings, "DEPS_SEARCH='-nostdinc -I%s'", none);
        out = make_says("deps-status", settings, NULL);
        EXPECT(strstr(out, "installing them first (make deps)") != NULL, "as root with apt-get: installs them first: %s", out);
        free(out);
    } else {
        printf("# not root with apt-get here: the installing case is not checked\n");
    }
    free(who);

    // 9. Some: exactly the missing ones named.
    snprintf(settings, sizeof settings, "DEPS=0 DEPS_SEARCH='-nostdinc -I%s'", some);
    out = make_says("deps-status", settings, NULL);
    EXPECT(strstr(out, "not installed: libmd4c-html0-dev libcivetweb-dev)") && !strstr(out, "libncurses-dev"),
           "curses.h and md4c.h there: only md4c-html and CivetWeb named: %s", out);
    free(out);

    // 10. That build, for real, out of tree.
    char build[400];
    snprintf(build, sizeof build, "%s/build", tmp);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && env PATH=/usr/bin:/bin make -j2 --no-print-directory BUILD='%s' DEPS=0 "
             "DEPS_SEARCH='-nostdinc -I%s' CUDA=0 NATIVE=0 CFLAGS=-O0 '%s/labs/single' '%s/shardlab' deps-status",
             root, build, none, build, build);
    out = test_sh(NULL, cmd, &st);
    EXPECT(st == 0 && strstr(out, "shardlab: built without tui, lexicon and web"),
           "the bare build compiles and links, and says what it left out (exit %d)%s%.2000s", st, st ? ":\n" : "",
           st ? out : "");
    // What make prints: a line per file ("  CC      labs/common/model/gpt.c"), not the commands (V=1).
    EXPECT(strstr(out, "\n  CC      labs/common/model/gpt.c\n") && strstr(out, "  LD      ") && !strstr(out, "-std=c11"),
           "the build says one line per file, not its commands: %.300s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "readelf -d '%s/shardlab' | grep NEEDED", build);
    out = test_sh(NULL, cmd, &st);
    EXPECT(st == 0 && strstr(out, "libc.so") && !strstr(out, "curses") && !strstr(out, "tinfo") && !strstr(out, "md4c") &&
               !strstr(out, "civetweb"),
           "the bare shardlab needs libc and libm alone:\n%s", out);
    free(out);
    snprintf(cmd, sizeof cmd, "cd '%s' && SHARDLAB_RUNS='%s/runs' '%s/shardlab' run single -n 1 --steps 2 --ui none", tmp, tmp,
             build);
    out = test_sh(NULL, cmd, &st);
    EXPECT(st == 0 && strstr(out, "single finished on 1 rank(s)"), "the bare shardlab runs a lab (exit %d): %.1500s", st, out);
    free(out);
    // The launcher's fault handling is the same program's: a rank's bad option is passed on as
    // one line, exit 2; a rank that fails is named with its error, exit 1.
    snprintf(cmd, sizeof cmd, "cd '%s' && SHARDLAB_RUNS='%s/runs' '%s/shardlab' run single -n 1 --ui none --heads 3", tmp, tmp,
             build);
    out = test_sh(NULL, cmd, &st);
    EXPECT(st == 2 && strstr(out, "shardlab run: ") && strstr(out, "--heads"), "a rank's bad option: one line, exit 2 (exit %d): %s",
           st, out);
    free(out);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && SHARDLAB_RUNS='%s/runs' '%s/shardlab' run single -n 1 --ui none --steps 60 --lr 10 --weight-decay 10 "
             "--warmup 0 --lr-schedule constant",
             tmp, tmp, build);
    out = test_sh(NULL, cmd, &st);
    EXPECT(st == 1 && strstr(out, "shardlab: rank 0 ") && strstr(out, "single stopped"),
           "a rank that fails: named, exit 1 (exit %d): %.1500s", st, out);
    free(out);
    const char *left_out[] = {"tui", "lexicon zero-stage-3", "web --port 0"};
    for (int i = 0; i < 3; i++) {
        snprintf(cmd, sizeof cmd, "cd '%s' && '%s/shardlab' %s", tmp, build, left_out[i]);
        out = test_sh(NULL, cmd, &st);
        EXPECT(st == 2 && count_lines(out) == 1 && strstr(out, ": not in this build: ") && strstr(out, "make deps installs them"),
               "shardlab %s: one line, that this build lacks it and how to get it, exit 2 (exit %d): %s", left_out[i], st, out);
        free(out);
    }
    // 13. The same build again links nothing; a build whose backend changed relinks.
    char again[6000];
    snprintf(again, sizeof again,
             "cd '%s' && env PATH=/usr/bin:/bin make --no-print-directory BUILD='%s' DEPS=0 "
             "DEPS_SEARCH='-nostdinc -I%s' CUDA=0 NATIVE=0 CFLAGS=-O0 '%s/labs/single' 2>&1",
             root, build, none, build);
    out = test_sh(NULL, again, &st);
    EXPECT(st == 0 && !strstr(out, "LD "), "an unchanged build relinks nothing (exit %d): %.500s", st, out);
    free(out);
    snprintf(cmd, sizeof cmd, "echo 'cuda (another build)' >'%s/backend.txt' && %s", build, again);
    out = test_sh(NULL, cmd, &st);
    snprintf(path, sizeof path, "LD      %s/labs/single", build);
    EXPECT(st == 0 && strstr(out, path), "a build whose backend changed relinks the labs (exit %d): %.500s", st, out);
    free(out);

    snprintf(cmd, sizeof cmd, "'%s/shardlab' grade --help", build);
    out = test_sh(NULL, cmd, &st);
    EXPECT(st == 0 && strstr(out, "usage: shardlab grade"), "the bare shardlab grades (exit %d)", st);
    free(out);
}

// 14, on the real build: when ROOT's build is the CUDA backend (CI builds CUDA=1), no program
// it made needs libcublas. Linked in, cuBLASLt's constructors cost every process about a third
// of a second and 200 MB before main, GPU or not, and the suite starts thousands of ranks.
static void check_no_cublas_needed(void) {
    char path[4200], cmd[9000];
    snprintf(path, sizeof path, "%s/build/backend.txt", root);
    FILE *f = fopen(path, "r");
    char backend[8] = "";
    if (f) {
        if (!fgets(backend, sizeof backend, f)) backend[0] = 0;
        fclose(f);
    }
    if (strncmp(backend, "cuda", 4) != 0) {
        printf("ok - # SKIP the build here is not the CUDA backend; no program to read for cuBLAS\n");
        return;
    }
    // Every ELF under build/: the labs, the tests' GPU programs, the benchmarks, shardlab.
    snprintf(cmd, sizeof cmd,
             "cd '%s/build' && n=0 && for f in $(find . -type f -perm -u+x); do "
             "head -c4 \"$f\" | grep -q ELF || continue; n=$((n+1)); "
             "readelf -d \"$f\" | grep -q 'NEEDED.*cublas' && echo \"needs cuBLAS: $f\"; done; echo \"read $n\"",
             root);
    int st;
    char *out = test_sh(NULL, cmd, &st);
    int n = 0;
    const char *r = strstr(out, "read ");
    if (r) n = atoi(r + 5);
    EXPECT(st == 0 && n > 0 && !strstr(out, "needs cuBLAS"), "none of the CUDA build's %d programs needs libcublas:\n%.1500s", n,
           out);
    free(out);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_build ROOT\n");
        return 2;
    }
    snprintf(root, sizeof root, "%s", argv[1]);
    // Each check types make as a reader would. Under `make CUDA=1 test` (CI) the outer make
    // hands its variables down, in MAKEFLAGS and in the environment, and the inner builds
    // then all compiled CUDA. What the Makefile reads that a check does not set goes too.
    const char *outer_make[] = {"MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "CUDA", "CUDA_HOME", "NCCL_HOME",
                                "NCCL_SYSTEM", "CUDA_ARCHS", "NVCCFLAGS", "NVIDIA_SMI", "NATIVE", "CFLAGS", "DEPS",
                                "DEPS_SEARCH", "CC", "BUILD", "V"};
    for (size_t i = 0; i < sizeof outer_make / sizeof outer_make[0]; i++) unsetenv(outer_make[i]);
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-build-XXXXXX");
    if (!mkdtemp(tmp)) return printf("not ok - cannot make a temporary folder\n"), 1;
    char multiarch[256] = "";
    FILE *p = popen("cc -print-multiarch 2>/dev/null", "r");
    if (p) {
        if (fgets(multiarch, sizeof multiarch, p)) multiarch[strcspn(multiarch, "\n")] = 0;
        pclose(p);
    }
    char path[2048], settings[4096], cuda[400], sys[400], wheel[400], nopy[400];
    snprintf(cuda, sizeof cuda, "%s/cuda", tmp);
    snprintf(sys, sizeof sys, "%s/usr", tmp);
    snprintf(wheel, sizeof wheel, "%s/site-packages/nvidia/nccl", tmp);
    snprintf(nopy, sizeof nopy, "%s/nopython", tmp);
    snprintf(path, sizeof path, "%s/bin/nvcc", cuda), test_put_file(path, NVCC, 1);
    test_put_file(nopy, "#!/bin/sh\nexit 1\n", 1);  // a python without the wheel
    // A GPU machine's nvidia-smi: one GPU, compute capability 9.0.
    char smi[400], gpu[600];
    snprintf(smi, sizeof smi, "%s/nvidia-smi", tmp);
    test_put_file(smi, SMI_H200, 1);
    snprintf(gpu, sizeof gpu, "NVIDIA_SMI=%s", smi);

    // 1. The system's multiarch folder.
    snprintf(path, sizeof path, "%s/include/nccl.h", sys), test_put_file(path, "", 0);
    snprintf(path, sizeof path, "%s/lib/%s/libnccl.so", sys, multiarch[0] ? multiarch : "x86_64-linux-gnu"), test_put_file(path, "", 0);
    snprintf(settings, sizeof settings, "%s CUDA_HOME=%s NCCL_SYSTEM=%s PYTHON=%s", gpu, cuda, sys, nopy);
    char *out = status(settings, NULL), want[4096];
    snprintf(want, sizeof want, "NCCL at %s/include/nccl.h and %s", sys, path);
    EXPECT(multiarch[0] && strstr(out, want) && strstr(out, "building the CUDA backend"),
           "NCCL in the system's multiarch folder (lib/%s): the CUDA backend: %s", multiarch, out);
    free(out);

    // 2. Only the wheel, with libnccl.so.2 alone.
    char py[400];
    snprintf(py, sizeof py, "%s/python", tmp);
    snprintf(path, sizeof path, "#!/bin/sh\necho '%s'\n", wheel), test_put_file(py, path, 1);
    snprintf(path, sizeof path, "%s/include/nccl.h", wheel), test_put_file(path, "", 0);
    snprintf(path, sizeof path, "%s/lib/libnccl.so.2", wheel), test_put_file(path, "", 0);
    snprintf(settings, sizeof settings, "%s CUDA_HOME=%s NCCL_SYSTEM=%s/none PYTHON=%s", gpu, cuda, tmp, py);
    out = status(settings, NULL);
    snprintf(want, sizeof want, "NCCL at %s/include/nccl.h and %s/lib/libnccl.so.2; building the CUDA backend", wheel, wheel);
    EXPECT(strstr(out, want) != NULL, "NCCL only in PyTorch's wheel (libnccl.so.2, no libnccl.so): the CUDA backend: %s", out);
    free(out);

    // 3. CUDA_HOME first; a header without a library is passed over.
    snprintf(path, sizeof path, "%s/include/nccl.h", cuda), test_put_file(path, "", 0);
    snprintf(settings, sizeof settings, "%s CUDA_HOME=%s NCCL_SYSTEM=%s PYTHON=%s", gpu, cuda, sys, py);
    out = status(settings, NULL);
    snprintf(want, sizeof want, "NCCL at %s/include/nccl.h", sys);
    EXPECT(strstr(out, want) != NULL, "CUDA_HOME with nccl.h but no libnccl.so is passed over for the system's: %s", out);
    free(out);
    snprintf(path, sizeof path, "%s/lib64/libnccl.so", cuda), test_put_file(path, "", 0);
    out = status(settings, NULL);
    snprintf(want, sizeof want, "NCCL at %s/include/nccl.h and %s/lib64/libnccl.so;", cuda, cuda);
    EXPECT(strstr(out, want) != NULL, "CUDA_HOME with NCCL comes first: %s", out);
    free(out);

    // 4. NCCL_HOME as given.
    snprintf(settings, sizeof settings, "%s CUDA_HOME=%s NCCL_HOME=%s PYTHON=%s", gpu, cuda, wheel, py);
    out = status(settings, NULL);
    EXPECT(strstr(out, "libnccl.so.2, from NCCL_HOME; building the CUDA backend") != NULL, "NCCL_HOME given: used and named: %s",
           out);
    free(out);
    snprintf(settings, sizeof settings, "%s CUDA_HOME=%s NCCL_HOME=%s/none", gpu, cuda, tmp);
    out = status(settings, NULL);
    EXPECT(strstr(out, "but no nccl.h in NCCL_HOME=") && strstr(out, "building the CPU backend"),
           "NCCL_HOME naming an empty folder: the CPU backend, saying what it lacks: %s", out);
    free(out);

    // 5. nvcc only on PATH.
    snprintf(settings, sizeof settings, "%s CUDA_HOME=%s/none NCCL_SYSTEM=%s/none PYTHON=%s", gpu, tmp, tmp, nopy);
    char pathvar[600];
    snprintf(pathvar, sizeof pathvar, "%s/bin:/usr/bin:/bin", cuda);
    out = status(settings, pathvar);
    snprintf(want, sizeof want, "nvcc found at %s/bin/nvcc, NCCL at %s/include/nccl.h", cuda, cuda);
    EXPECT(strstr(out, want) != NULL, "nvcc only on PATH: its folder's NCCL: %s", out);
    free(out);

    // 11. No GPU here: nvcc and NCCL are found, the kernels are not built unless asked.
    char nosmi[600], settings_nogpu[1500];
    snprintf(nosmi, sizeof nosmi, "NVIDIA_SMI=%s/no-nvidia-smi", tmp);
    snprintf(settings_nogpu, sizeof settings_nogpu, "%s CUDA_HOME=%s PYTHON=%s", nosmi, cuda, nopy);
    out = status(settings_nogpu, NULL);
    EXPECT(strstr(out, "CUDA: no GPU here") && strstr(out, "building the CPU backend") && strstr(out, "make CUDA=1"),
           "nvcc and NCCL but no GPU: the CPU backend, saying why and naming CUDA=1: %s", out);
    free(out);
    snprintf(settings, sizeof settings, "%s CUDA=1", settings_nogpu);
    out = status(settings, NULL);
    EXPECT(strstr(out, "building the CUDA backend for sm_80, sm_90 and PTX") != NULL,
           "CUDA=1 without a GPU: the CUDA backend for every architecture (what CI compiles): %s", out);
    free(out);

    // 12. A GPU of compute capability 9.0: its architecture alone, on nvcc's command line.
    snprintf(settings, sizeof settings, "%s CUDA_HOME=%s PYTHON=%s", gpu, cuda, nopy);
    out = status(settings, NULL);
    EXPECT(strstr(out, "building the CUDA backend for sm_90, the GPU here") != NULL, "a 9.0 GPU: built for sm_90: %s", out);
    free(out);
    snprintf(settings, sizeof settings, "-n %s CUDA_HOME=%s PYTHON=%s BUILD=%s/nb %s/nb/common/cuda/ops.o", gpu, cuda, nopy, tmp, tmp);
    out = make_says("", settings, NULL);
    EXPECT(strstr(out, "-gencode arch=compute_90,code=sm_90") && !strstr(out, "sm_80") && !strstr(out, "code=compute_90"),
           "a 9.0 GPU: nvcc compiles for sm_90 alone: %.600s", out);
    free(out);
    // 14. The labs link the CUDA runtime and NCCL, never cuBLAS: cuda_open() loads it. The
    //     link line is the dry run's last (make -n prints every compile before it).
    char link[9000];
    snprintf(link, sizeof link,
             "cd '%s' && env PATH=/usr/bin:/bin make -n -s --no-print-directory %s CUDA_HOME=%s PYTHON=%s BUILD=%s/nb "
             "%s/nb/labs/single 2>&1 | grep -e '-o %s/nb/labs/single '",
             root, gpu, cuda, nopy, tmp, tmp, tmp);
    int st;
    out = test_sh(NULL, link, &st);
    EXPECT(strstr(out, "-lcudart") && !strstr(out, "cublas"), "a CUDA lab links -lcudart and no cuBLAS: %.600s", out);
    free(out);
    snprintf(path, sizeof path, "%s/nvidia-smi-old", tmp);
    test_put_file(path, SMI_OLD, 1);
    snprintf(settings, sizeof settings, "NVIDIA_SMI=%s CUDA_HOME=%s PYTHON=%s", path, cuda, nopy);
    out = status(settings, NULL);
    EXPECT(strstr(out, "building the CUDA backend for sm_80, sm_90 and PTX") != NULL,
           "a GPU whose nvidia-smi cannot say its capability: every architecture: %s", out);
    free(out);

    // 6. Nothing, no nvcc, CUDA=0.
    snprintf(path, sizeof path, "rm -rf '%s/lib64' '%s/include'", cuda, cuda);
    if (system(path) != 0) printf("# cleaning failed\n");
    snprintf(settings, sizeof settings, "%s CUDA_HOME=%s NCCL_SYSTEM=%s/none PYTHON=%s", gpu, cuda, tmp, nopy);
    out = status(settings, NULL);
    EXPECT(strstr(out, "but no NCCL") && strstr(out, "set NCCL_HOME") && strstr(out, "building the CPU backend"),
           "no NCCL anywhere: the CPU backend, saying where it looked and what to set: %s", out);
    free(out);
    snprintf(settings, sizeof settings, "%s CUDA_HOME=%s/none", gpu, tmp);
    out = status(settings, NULL);
    EXPECT(strstr(out, "CUDA: no nvcc") && strstr(out, "building the CPU backend"), "no nvcc: the CPU backend: %s", out);
    free(out);
    out = status("CUDA=0", NULL);
    EXPECT(strstr(out, "CUDA: off (CUDA=0)") != NULL, "CUDA=0: off: %s", out);
    free(out);

    check_libraries();
    check_no_cublas_needed();

    snprintf(path, sizeof path, "rm -rf '%s'", tmp);
    if (system(path) != 0) printf("# removing %s failed\n", tmp);
    return test_done();
}
