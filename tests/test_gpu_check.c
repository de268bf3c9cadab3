// test_gpu_check.c — check.sh's comparison of a GPU run with the CPU's (tests/gpu/compare.py),
// on CPU runs made to look like a GPU's, so the rule it applies is tested where there is no GPU.
//
// Usage: test_gpu_check ROOT SHARDLAB   (tests/run.sh passes the checkout and build/shardlab)
//
// The rule: every memory category a rank holds is set by the algorithm, so a GPU run's must
// equal the CPU's to the byte, at every step, except what a GPU needs beside it: pp holds one
// pass's workspace all run, in acts, and reports it in each step ("workspace"); on a GPU that
// workspace includes the kernels' own (ops_gpu_workspace_bytes), so pp's acts are compared
// without it. ckpt reports its pass's workspace too but frees it before the step ends: its
// acts are compared whole. What it proves, with pp -n 2 and ckpt -n 2 run for 3 steps:
//   1. pp whose acts and reported workspace both grow by 16 KiB (a GPU's): memory equal, ok;
//   2. pp whose acts grow but not its workspace (a real difference): FAIL, memory differs;
//   3. ckpt whose reported workspace grows by 16 KiB (a GPU's): memory equal, ok (as seen on
//      an H200, where subtracting ckpt's workspace made its memory differ);
//   4. ckpt whose acts grow: FAIL.
// Broken on purpose: subtracting every lab's workspace fails case 3; subtracting none fails 1.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "shelltest.h"
#include "test.h"

static char root[4096], shardlab[4096], tmp[256];


// A copy of run directory `from` as `to`, its step events' acts and workspace grown by the
// given bytes (the GPU's kernels' workspace would do that).
static int fake_gpu_run(const char *from, const char *to, int acts_plus, int workspace_plus) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "rm -rf '%s/%s' && cp -r '%s/%s' '%s/%s' && python3 - '%s/%s' %d %d <<'PY'\n"
             "import glob, json, sys\n"
             "for path in glob.glob(sys.argv[1] + '/rank-*.jsonl'):\n"
             "    lines = []\n"
             "    for line in open(path):\n"
             "        e = json.loads(line)\n"
             "        if e.get('ev') == 'step':\n"
             "            e['mem']['acts'] += int(sys.argv[2])\n"
             "            e['workspace'] = int(e['workspace']) + int(sys.argv[3])\n"
             "        lines.append(json.dumps(e))\n"
             "    open(path, 'w').write('\\n'.join(lines) + '\\n')\n"
             "PY",
             tmp, to, tmp, from, tmp, to, tmp, to, acts_plus, workspace_plus);
    int status;
    free(test_sh(root, cmd, &status));
    return status;
}

// compare.py's verdict on run `run` against the CPU's `ref` (loss and memory): its output.
static char *compare(const char *lab, int replicas, const char *run, const char *ref, int *status) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd,
             "python3 tests/gpu/compare.py train --lab %s --n 2 --run '%s/%s' --ref '%s/%s' --mem-ref '%s/%s' "
             "--replicas %d --results '%s/results.jsonl'",
             lab, tmp, run, tmp, ref, tmp, ref, replicas, tmp);
    return test_sh(root, cmd, status);
}

static void expect_verdict(const char *what, const char *lab, int replicas, const char *run, const char *ref,
                           int want_ok) {
    int status;
    char *out = compare(lab, replicas, run, ref, &status);
    int ok = strstr(out, ": ok\n") != NULL, mem_fail = strstr(out, "memory differs") != NULL;
    EXPECT(want_ok ? ok && !mem_fail : !ok && mem_fail, "%s: %s", what,
           want_ok ? "compare.py says ok" : "compare.py says the memory differs");
    if (want_ok ? !ok : ok) printf("# %s", out);
    free(out);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: test_gpu_check ROOT SHARDLAB\n");
        return 2;
    }
    snprintf(root, sizeof root, "%s", argv[1]);
    if (!realpath(argv[2], shardlab)) snprintf(shardlab, sizeof shardlab, "%s", argv[2]);
    int status;
    free(test_sh(root, "command -v python3", &status));
    if (status != 0) {
        printf("ok - skipped: no python3 (check.sh's comparison is python)\n");
        return 0;
    }
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-gpu-check-XXXXXX");
    if (!mkdtemp(tmp)) return 1;

    char cmd[10240];
    snprintf(cmd, sizeof cmd,
             "'%s' run pp -n 2 --ui none --steps 3 --micro 4 --run-dir '%s/pp' && "
             "'%s' run ckpt -n 2 --ui none --steps 3 --policy every --layers 2 --run-dir '%s/ckpt'",
             shardlab, tmp, shardlab, tmp);
    char *out = test_sh(root, cmd, &status);
    EXPECT(status == 0, "pp -n 2 and ckpt -n 2 ran 3 steps on the CPU");
    if (status != 0) printf("# %s", out);
    free(out);

    EXPECT(fake_gpu_run("pp", "pp-gpu", 16384, 16384) == 0, "a pp run made to look like a GPU's");
    expect_verdict("pp with 16 KiB more acts, all of it the workspace it reports (a GPU's kernels')", "pp", 0,
                   "pp-gpu", "pp", 1);
    EXPECT(fake_gpu_run("pp", "pp-more", 16384, 0) == 0, "a pp run holding 16 KiB more");
    expect_verdict("pp with 16 KiB more acts and the same workspace", "pp", 0, "pp-more", "pp", 0);
    EXPECT(fake_gpu_run("ckpt", "ckpt-gpu", 0, 16384) == 0, "a ckpt run made to look like a GPU's");
    expect_verdict("ckpt whose pass workspace (freed before the step ends) is 16 KiB larger", "ckpt", 1, "ckpt-gpu",
                   "ckpt", 1);
    EXPECT(fake_gpu_run("ckpt", "ckpt-more", 16384, 0) == 0, "a ckpt run holding 16 KiB more");
    expect_verdict("ckpt with 16 KiB more acts", "ckpt", 1, "ckpt-more", "ckpt", 0);

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    free(test_sh(root, cmd, &status));
    return test_done();
}
