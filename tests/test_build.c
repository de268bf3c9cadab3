// test_build.c — the Makefile finds CUDA and NCCL where a stock machine has them.
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
// Broken on purpose: without the multiarch folder in the Makefile's nccl_libdir, case 1
// builds the CPU backend and fails here.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "test.h"

static char root[4096], tmp[256];

// Creates path (and its folders) holding text; mode 0755 when exec.
static void put(const char *path, const char *text, int exec) {
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\"", path);
    if (system(cmd) != 0) printf("# mkdir for %s failed\n", path);
    FILE *f = fopen(path, "w");
    if (!f) {
        printf("# cannot write %s\n", path);
        return;
    }
    fputs(text, f);
    fclose(f);
    if (exec) chmod(path, 0755);
}

// `make cuda-status` in ROOT with the given settings; its output (malloc'd, "" on failure).
static char *status(const char *settings, const char *path) {
    char cmd[8000];
    snprintf(cmd, sizeof cmd, "cd '%s' && env PATH='%s' make -s --no-print-directory cuda-status %s 2>&1", root,
             path ? path : "/usr/bin:/bin", settings);
    FILE *p = popen(cmd, "r");
    char *out = calloc(1, 8192);
    if (p) {
        size_t n = fread(out, 1, 8191, p);
        out[n] = 0;
        pclose(p);
    }
    return out;
}

static const char *NVCC = "#!/bin/sh\necho 'a stand-in nvcc'\n";

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_build ROOT\n");
        return 2;
    }
    snprintf(root, sizeof root, "%s", argv[1]);
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-build-XXXXXX");
    if (!mkdtemp(tmp)) return printf("not ok - cannot make a temporary folder\n"), 1;
    char multiarch[256] = "";
    FILE *p = popen("cc -print-multiarch 2>/dev/null", "r");
    if (p) {
        if (fgets(multiarch, sizeof multiarch, p)) multiarch[strcspn(multiarch, "\n")] = 0;
        pclose(p);
    }
    char path[2048], settings[2048], cuda[400], sys[400], wheel[400], nopy[400];
    snprintf(cuda, sizeof cuda, "%s/cuda", tmp);
    snprintf(sys, sizeof sys, "%s/usr", tmp);
    snprintf(wheel, sizeof wheel, "%s/site-packages/nvidia/nccl", tmp);
    snprintf(nopy, sizeof nopy, "%s/nopython", tmp);
    snprintf(path, sizeof path, "%s/bin/nvcc", cuda), put(path, NVCC, 1);
    put(nopy, "#!/bin/sh\nexit 1\n", 1);  // a python without the wheel

    // 1. The system's multiarch folder.
    snprintf(path, sizeof path, "%s/include/nccl.h", sys), put(path, "", 0);
    snprintf(path, sizeof path, "%s/lib/%s/libnccl.so", sys, multiarch[0] ? multiarch : "x86_64-linux-gnu"), put(path, "", 0);
    snprintf(settings, sizeof settings, "CUDA_HOME=%s NCCL_SYSTEM=%s PYTHON=%s", cuda, sys, nopy);
    char *out = status(settings, NULL), want[4096];
    snprintf(want, sizeof want, "NCCL at %s/include/nccl.h and %s", sys, path);
    EXPECT(multiarch[0] && strstr(out, want) && strstr(out, "building the CUDA backend"),
           "NCCL in the system's multiarch folder (lib/%s): the CUDA backend: %s", multiarch, out);
    free(out);

    // 2. Only the wheel, with libnccl.so.2 alone.
    char py[400];
    snprintf(py, sizeof py, "%s/python", tmp);
    snprintf(path, sizeof path, "#!/bin/sh\necho '%s'\n", wheel), put(py, path, 1);
    snprintf(path, sizeof path, "%s/include/nccl.h", wheel), put(path, "", 0);
    snprintf(path, sizeof path, "%s/lib/libnccl.so.2", wheel), put(path, "", 0);
    snprintf(settings, sizeof settings, "CUDA_HOME=%s NCCL_SYSTEM=%s/none PYTHON=%s", cuda, tmp, py);
    out = status(settings, NULL);
    snprintf(want, sizeof want, "NCCL at %s/include/nccl.h and %s/lib/libnccl.so.2; building the CUDA backend", wheel, wheel);
    EXPECT(strstr(out, want) != NULL, "NCCL only in PyTorch's wheel (libnccl.so.2, no libnccl.so): the CUDA backend: %s", out);
    free(out);

    // 3. CUDA_HOME first; a header without a library is passed over.
    snprintf(path, sizeof path, "%s/include/nccl.h", cuda), put(path, "", 0);
    snprintf(settings, sizeof settings, "CUDA_HOME=%s NCCL_SYSTEM=%s PYTHON=%s", cuda, sys, py);
    out = status(settings, NULL);
    snprintf(want, sizeof want, "NCCL at %s/include/nccl.h", sys);
    EXPECT(strstr(out, want) != NULL, "CUDA_HOME with nccl.h but no libnccl.so is passed over for the system's: %s", out);
    free(out);
    snprintf(path, sizeof path, "%s/lib64/libnccl.so", cuda), put(path, "", 0);
    out = status(settings, NULL);
    snprintf(want, sizeof want, "NCCL at %s/include/nccl.h and %s/lib64/libnccl.so;", cuda, cuda);
    EXPECT(strstr(out, want) != NULL, "CUDA_HOME with NCCL comes first: %s", out);
    free(out);

    // 4. NCCL_HOME as given.
    snprintf(settings, sizeof settings, "CUDA_HOME=%s NCCL_HOME=%s PYTHON=%s", cuda, wheel, py);
    out = status(settings, NULL);
    EXPECT(strstr(out, "libnccl.so.2, from NCCL_HOME; building the CUDA backend") != NULL, "NCCL_HOME given: used and named: %s",
           out);
    free(out);
    snprintf(settings, sizeof settings, "CUDA_HOME=%s NCCL_HOME=%s/none", cuda, tmp);
    out = status(settings, NULL);
    EXPECT(strstr(out, "but no nccl.h in NCCL_HOME=") && strstr(out, "building the CPU backend"),
           "NCCL_HOME naming an empty folder: the CPU backend, saying what it lacks: %s", out);
    free(out);

    // 5. nvcc only on PATH.
    snprintf(settings, sizeof settings, "CUDA_HOME=%s/none NCCL_SYSTEM=%s/none PYTHON=%s", tmp, tmp, nopy);
    char pathvar[600];
    snprintf(pathvar, sizeof pathvar, "%s/bin:/usr/bin:/bin", cuda);
    out = status(settings, pathvar);
    snprintf(want, sizeof want, "nvcc found at %s/bin/nvcc, NCCL at %s/include/nccl.h", cuda, cuda);
    EXPECT(strstr(out, want) != NULL, "nvcc only on PATH: its folder's NCCL: %s", out);
    free(out);

    // 6. Nothing, no nvcc, CUDA=0.
    snprintf(path, sizeof path, "rm -rf '%s/lib64' '%s/include'", cuda, cuda);
    if (system(path) != 0) printf("# cleaning failed\n");
    snprintf(settings, sizeof settings, "CUDA_HOME=%s NCCL_SYSTEM=%s/none PYTHON=%s", cuda, tmp, nopy);
    out = status(settings, NULL);
    EXPECT(strstr(out, "but no NCCL") && strstr(out, "set NCCL_HOME") && strstr(out, "building the CPU backend"),
           "no NCCL anywhere: the CPU backend, saying where it looked and what to set: %s", out);
    free(out);
    snprintf(settings, sizeof settings, "CUDA_HOME=%s/none", tmp);
    out = status(settings, NULL);
    EXPECT(strstr(out, "CUDA: no nvcc") && strstr(out, "building the CPU backend"), "no nvcc: the CPU backend: %s", out);
    free(out);
    out = status("CUDA=0", NULL);
    EXPECT(strstr(out, "CUDA: off (CUDA=0)") != NULL, "CUDA=0: off: %s", out);
    free(out);

    snprintf(path, sizeof path, "rm -rf '%s'", tmp);
    if (system(path) != 0) printf("# removing %s failed\n", tmp);
    return test_done();
}
