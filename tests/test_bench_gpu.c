// test_bench_gpu.c — `make bench-gpu` (tests/gpu/bench.sh) up to the point where it needs a GPU.
//
// Usage: test_bench_gpu ROOT   (tests/run.sh passes the checkout)
//
// No GPU, no PyTorch and no build are needed: nvidia-smi and build/labs/single are stand-in
// scripts in a temporary folder, and DRY_RUN=1 prints the commands the bench would run. What
// it proves:
//   1. no nvidia-smi on PATH: "SKIP: ...", exit 0; an nvidia-smi that lists no GPU: the same;
//   2. a GPU listed, a single whose --help has neither --attn nor --mixed: one line says the
//      --attn rows are skipped, shardlab runs without --attn at fp32 and TF32 only, at both
//      shapes (GPT-2 small's with its five options), and PyTorch runs eager sdpa, eager with
//      the attention written out, and torch.compile, each over the three precisions;
//   3. a single that has both: naive and flash, each at fp32, TF32 and --mixed;
//   4. SHAPES=, ROWS= and PRECISIONS= choose the rows; a name it does not know: exit 2;
//   5. (with python3) tests/gpu/bench_table.py: a shardlab row from a run directory is the
//      median wall clock (ms.step) after the warm-up and the largest mem.peak; the table's
//      ratios are shardlab / PyTorch at the same shape and precision, naive against eager
//      written out and flash against eager sdpa; a failed row is a FAIL line and exit 1.
//   6. `make profile-gpu` (tests/gpu/profile.sh): no nvidia-smi: SKIP, exit 0; with a stand-in
//      GPU and ncu, dry: for each precision a run without the profiler, then the same under
//      ncu --profile-from-start off with SHARDLAB_PROFILE_STEP set to the step profiled; a bad
//      STEP, SHAPE or NCU: exit 2. tests/gpu/profile_table.py on ncu's two CSV layouts (details
//      and raw; ==PROF== lines, thousands separators, nsecond to msecond): launches summed by
//      kernel and kind with their shares, and with a run the GPU's idle time inside the work.
// Broken on purpose: without the `case $help in *--attn*` test in bench.sh, case 2 passes
// --attn to a single that has none (and fails here); with bench_table.py's median taken over
// every step, case 5's 1000 ms warm-up steps move it off 11.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "shelltest.h"
#include "test.h"

static char root[4096], tmp[256];



// How many times needle occurs in s.
static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle)) n++;
    return n;
}

// How many of the commands it printed ("+ ..." lines) hold needle.
static int commands_with(const char *s, const char *needle) {
    int n = 0;
    for (const char *line = s; *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        char buf[2048];
        snprintf(buf, sizeof buf, "%.*s", (int)len, line);
        n += strncmp(buf, "+ ", 2) == 0 && strstr(buf, needle) != NULL;
        line += len + (eol != NULL);
    }
    return n;
}

// The bench with a stand-in GPU and single (BUILD=build_dir), dry, with extra settings.
static char *dry_run(const char *build_dir, const char *settings, int *status) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "env PATH='%s/gpu-bin':\"$PATH\" DRY_RUN=1 BUILD='%s' OUT_DIR='%s/out' %s /bin/sh tests/gpu/bench.sh",
             tmp, build_dir, tmp, settings);
    return test_sh(root, cmd, status);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: test_bench_gpu ROOT\n");
        return 2;
    }
    snprintf(root, sizeof root, "%s", argv[1]);
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-bench-gpu-XXXXXX");
    if (!mkdtemp(tmp)) return printf("not ok - cannot make a temporary folder\n"), 1;
    char path[1024], cmd[4096];
    int st;

    // 1. No nvidia-smi (PATH holds dirname alone); an nvidia-smi that lists no GPU.
    snprintf(cmd, sizeof cmd, "mkdir -p '%s/none-bin' '%s/nogpu-bin' '%s/gpu-bin' '%s/plain/labs' '%s/full/labs' && "
             "ln -s \"$(command -v dirname)\" '%s/none-bin/dirname'", tmp, tmp, tmp, tmp, tmp, tmp);
    if (system(cmd) != 0) printf("# making the stand-ins' folders failed\n");
    snprintf(cmd, sizeof cmd, "env PATH='%s/none-bin' /bin/sh tests/gpu/bench.sh", tmp);
    char *out = test_sh(root, cmd, &st);
    EXPECT(st == 0 && strncmp(out, "SKIP: no nvidia-smi", 19) == 0, "no nvidia-smi: SKIP, exit 0 (exit %d): %s", st, out);
    free(out);
    snprintf(path, sizeof path, "%s/nogpu-bin/nvidia-smi", tmp);
    test_put_file(path, "#!/bin/sh\necho 'No devices were found'\nexit 6\n", 1);
    snprintf(cmd, sizeof cmd, "env PATH='%s/nogpu-bin':\"$PATH\" /bin/sh tests/gpu/bench.sh", tmp);
    out = test_sh(root, cmd, &st);
    EXPECT(st == 0 && strstr(out, "SKIP: nvidia-smi lists no GPU"), "nvidia-smi lists no GPU: SKIP, exit 0 (exit %d): %s", st,
           out);
    free(out);

    // 2. A GPU; a single without --attn and --mixed.
    snprintf(path, sizeof path, "%s/gpu-bin/nvidia-smi", tmp);
    test_put_file(path, "#!/bin/sh\necho 'GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0)'\n", 1);
    snprintf(path, sizeof path, "%s/plain/labs/single", tmp);
    test_put_file(path, "#!/bin/sh\necho 'usage: single [options]'\necho '  --tf32   TF32 tensor cores'\n", 1);
    snprintf(path, sizeof path, "%s/full/labs/single", tmp);
    test_put_file(path, "#!/bin/sh\necho 'usage: single [options]'\necho '  --attn A   flash or naive'\necho '  --mixed   bf16'\n", 1);
    char plain[400], full[400];
    snprintf(plain, sizeof plain, "%s/plain", tmp);
    snprintf(full, sizeof full, "%s/full", tmp);
    out = dry_run(plain, "", &st);
    EXPECT(st == 0, "a dry run exits 0 (exit %d)", st);
    EXPECT(strstr(out, "make --no-print-directory") && strstr(out, "labs/single BUILD=") && strstr(out, "DEPS=0"),
           "it builds single first, with the Makefile's detection and no Debian package");
    EXPECT(strstr(out, "single --help has no --attn") != NULL, "single without --attn: a line says the --attn rows are skipped");
    EXPECT(commands_with(out, "labs/single --device cuda") == 4 && !commands_with(out, "--attn naive") && !commands_with(out, "--attn flash") &&
               !commands_with(out, "--mixed"),
           "shardlab without --attn: fp32 and TF32 at both shapes, no --attn, no --mixed (%d runs)",
           commands_with(out, "labs/single --device cuda"));
    EXPECT(commands_with(out, "--dim 768 --heads 12 --layers 12 --seq 1024 --batch 8") == 5,
           "GPT-2 small's shape for its 2 shardlab runs and 3 PyTorch processes");
    EXPECT(commands_with(out, "torch_step.py") == 6 && count(out, "--precision fp32,tf32,bf16") == 6 && count(out, "--compile") == 2 &&
               count(out, "--attn manual") == 2,
           "PyTorch: eager sdpa, eager written out, torch.compile at each shape, each over fp32, TF32 and bf16");
    EXPECT(strstr(out, "--steps 25 ") && strstr(out, "--steps 8 "), "5 + 20 steps at the default shape, 3 + 5 at GPT-2 small");
    free(out);

    // 3. A single with --attn and --mixed.
    out = dry_run(full, "", &st);
    EXPECT(st == 0 && commands_with(out, "labs/single --device cuda") == 12 && count(out, "--attn flash --mixed") == 2 &&
               count(out, "--attn naive --tf32") == 2 && !strstr(out, "has no --attn"),
           "single with --attn and --mixed: naive and flash at fp32, TF32 and --mixed, both shapes (%d runs)",
           commands_with(out, "labs/single --device cuda"));
    free(out);

    // 4. The knobs.
    out = dry_run(full, "SHAPES=gpt2 ROWS='shardlab compile' PRECISIONS=bf16 ATTN=flash", &st);
    EXPECT(st == 0 && commands_with(out, "labs/single --device cuda") == 1 && commands_with(out, "torch_step.py") == 1 &&
               strstr(out, "--attn flash --mixed") && strstr(out, "--precision bf16 ") && !strstr(out, "## default"),
           "SHAPES, ROWS, PRECISIONS and ATTN choose the rows: %s", out);
    free(out);
    const char *bad[] = {"SHAPES=gpt3", "ROWS=jax", "PRECISIONS=fp8"};
    for (int i = 0; i < 3; i++) {
        out = dry_run(full, bad[i], &st);
        EXPECT(st == 2 && strstr(out, "is not"), "%s: exit 2, naming what it takes (exit %d)", bad[i], st);
        free(out);
    }

    // 5. The table.
    out = test_sh(root, "command -v python3", &st);
    free(out);
    if (st != 0) {
        printf("# no python3 here: bench_table.py is not checked\n");
    } else {
        char run[600], results[600];
        snprintf(run, sizeof run, "%s/run", tmp);
        snprintf(results, sizeof results, "%s/results.jsonl", tmp);
        mkdir(run, 0755);
        snprintf(path, sizeof path, "%s/meta.json", run);
        test_put_file(path, "{\"lab\":\"single\",\"device\":\"cuda\",\"config\":{}}\n", 0);
        // Three warm-up steps of 1000 ms, then 10, 12, 11, 13, 9: the median after them is 11.
        const double ms[] = {1000, 1000, 1000, 10, 12, 11, 13, 9};
        char jsonl[4096] = "";
        for (int s = 0; s < 8; s++) {
            size_t len = strlen(jsonl);
            snprintf(jsonl + len, sizeof jsonl - len,
                     "{\"ev\":\"step\",\"rank\":0,\"step\":%d,\"ms\":{\"step\":%g,\"work\":%g},\"mem\":{\"peak\":%d}}\n", s + 1,
                     ms[s], ms[s] / 2, s == 4 ? 4194304 : 1048576);
        }
        snprintf(path, sizeof path, "%s/rank-0.jsonl", run);
        test_put_file(path, jsonl, 0);
        snprintf(path, sizeof path, "%s", results);
        test_put_file(path,
            "{\"shape\":\"gpt2\",\"impl\":\"torch eager manual\",\"precision\":\"fp32\",\"ok\":true,\"ms\":5.5,\"peak_bytes\":2097152}\n"
            "{\"shape\":\"gpt2\",\"impl\":\"torch eager sdpa\",\"precision\":\"fp32\",\"ok\":true,\"ms\":2.75,\"peak_bytes\":1048576}\n"
            "{\"shape\":\"gpt2\",\"impl\":\"torch.compile sdpa\",\"precision\":\"fp32\",\"ok\":true,\"ms\":22,\"peak_bytes\":1048576}\n",
            0);
        snprintf(cmd, sizeof cmd,
                 "python3 tests/gpu/bench_table.py shardlab --results '%s' --shape gpt2 --impl 'shardlab naive' --precision fp32 "
                 "--run '%s' --skip 3 && python3 tests/gpu/bench_table.py table --results '%s' --markdown '%s/table.md'",
                 results, run, results, tmp);
        out = test_sh(root, cmd, &st);
        EXPECT(st == 0 && strstr(out, "shardlab naive fp32: 11.00 ms/step (ms.work 5.50), peak 4.0 MiB"),
               "a shardlab row: the median ms.step after the warm-up, and the largest mem.peak: %s", out);
        // 11 / 5.5 (eager written out) = 2.00, 11 / 2.75 (sdpa) = 4.00, 11 / 22 (compile) = 0.50,
        // 4 MiB / 2 MiB = 2.00.
        EXPECT(strstr(out, "| gpt2 | shardlab naive | fp32 (TF32 off) | 11.00 | 4.0 | 2.00 | 4.00 | 0.50 | 2.00 |") != NULL,
               "the ratios: naive against eager written out, against sdpa, against torch.compile, and the peak:\n%s", out);
        // ms.step 11 of which ms.work 5.5: the other half of the step is between steps.
        EXPECT(strstr(out, "| ms.work 5.50; between steps 50.0% |") != NULL,
               "the note: the work's median, and the share of the step outside it (the issue's 2%% target):\n%s", out);
        free(out);
        snprintf(cmd, sizeof cmd, "cat '%s/table.md'", tmp);
        out = test_sh(root, cmd, &st);
        EXPECT(st == 0 && strstr(out, "| shape | implementation |"), "the table is written as markdown too");
        free(out);
        snprintf(cmd, sizeof cmd,
                 "python3 tests/gpu/bench_table.py missing --results '%s' --shape gpt2 --impl 'torch eager sdpa' "
                 "--precision fp32,bf16 --why 'timed out' && python3 tests/gpu/bench_table.py table --results '%s'",
                 results, results);
        out = test_sh(root, cmd, &st);
        EXPECT(st == 1 && count(out, "| FAIL |") == 1 && strstr(out, "| gpt2 | torch eager sdpa | bf16 | FAIL |") &&
                   strstr(out, "timed out"),
               "a process that stopped part way: its missing row is a FAIL line (only that one), exit 1 (exit %d):\n%s", st,
               out);
        free(out);
    }

    // 6. profile.sh and profile_table.py.
    snprintf(cmd, sizeof cmd, "env PATH='%s/none-bin' /bin/sh tests/gpu/profile.sh", tmp);
    out = test_sh(root, cmd, &st);
    EXPECT(st == 0 && strncmp(out, "SKIP: no nvidia-smi", 19) == 0, "profile.sh, no nvidia-smi: SKIP, exit 0 (exit %d): %s", st,
           out);
    free(out);
    snprintf(path, sizeof path, "%s/gpu-bin/ncu", tmp);
    test_put_file(path, "#!/bin/sh\nexit 0\n", 1);
    snprintf(cmd, sizeof cmd,
             "env PATH='%s/gpu-bin':\"$PATH\" DRY_RUN=1 BUILD='%s' OUT_DIR='%s/pout' NCU='%s' PRECISIONS='fp32 bf16' "
             "/bin/sh tests/gpu/profile.sh", tmp, full, tmp, path);
    out = test_sh(root, cmd, &st);
    EXPECT(st == 0 && commands_with(out, "labs/single --device cuda --steps 7 ") == 2 && commands_with(out, "--mixed") == 2,
           "profile.sh: for fp32 and bf16 (--mixed) a run of 7 steps without the profiler (exit %d):\n%s", st, out);
    EXPECT(commands_with(out, "SHARDLAB_PROFILE_STEP=4 ") == 2 && commands_with(out, "--profile-from-start off") == 2 &&
               commands_with(out, "--metrics gpu__time_duration.sum --csv") == 2 && commands_with(out, "--steps 4 ") == 2 &&
               commands_with(out, "--dim 768 --heads 12 --layers 12 --seq 1024 --batch 8") == 4,
           "then the same under ncu, capturing step 4 alone, at GPT-2 small's shape");
    free(out);
    const char *bad_profile[] = {"STEP=1", "STEP=x", "SHAPE=gpt3", "PRECISIONS=fp8", "NCU=/nonexistent/ncu"};
    for (int i = 0; i < 5; i++) {
        snprintf(cmd, sizeof cmd, "env PATH='%s/gpu-bin':\"$PATH\" DRY_RUN=1 BUILD='%s' %s /bin/sh tests/gpu/profile.sh", tmp,
                 full, bad_profile[i]);
        out = test_sh(root, cmd, &st);
        EXPECT(st == 2 && strstr(out, "profile-gpu: "), "profile.sh %s: exit 2 with a message (exit %d): %s", bad_profile[i], st,
               out);
        free(out);
    }
    out = test_sh(root, "command -v python3", &st);
    free(out);
    if (st == 0) {
        // Five launches, 5 ms: flash 2 x 1.5 ms (attention, 60%), a GEMM 1,250 us (matrix
        // products, 25%), LayerNorm 250,000 ns (5%), the hash 500 us (10%).
        snprintf(path, sizeof path, "%s/details.csv", tmp);
        test_put_file(path,
            "==PROF== Connected to process 1 (single)\n"
            "\"ID\",\"Process ID\",\"Process Name\",\"Host Name\",\"Kernel Name\",\"Context\",\"Stream\",\"Section Name\","
            "\"Metric Name\",\"Metric Unit\",\"Metric Value\"\n"
            "\"0\",\"1\",\"single\",\"h\",\"flash_fwd<Tf32x3, 64>(float *, const float *)\",\"1\",\"13\",\"s\","
            "\"gpu__time_duration.sum\",\"msecond\",\"1.50\"\n"
            "\"1\",\"1\",\"single\",\"h\",\"sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n\",\"1\",\"13\",\"s\","
            "\"gpu__time_duration.sum\",\"usecond\",\"1,250.00\"\n"
            "\"2\",\"1\",\"single\",\"h\",\"layernorm_forward_kernel(float *, int)\",\"1\",\"13\",\"s\","
            "\"gpu__time_duration.sum\",\"nsecond\",\"250,000\"\n"
            "\"3\",\"1\",\"single\",\"h\",\"flash_fwd<Tf32x3, 64>(float *, const float *)\",\"1\",\"13\",\"s\","
            "\"gpu__time_duration.sum\",\"msecond\",\"1.50\"\n"
            "\"4\",\"1\",\"single\",\"h\",\"chunk_hash_kernel(unsigned long *, HashBatch)\",\"1\",\"13\",\"s\","
            "\"gpu__time_duration.sum\",\"usecond\",\"500\"\n",
            0);
        snprintf(cmd, sizeof cmd, "python3 tests/gpu/profile_table.py --csv '%s' --run '%s/run' --skip 3", path, tmp);
        out = test_sh(root, cmd, &st);
        EXPECT(st == 0 && strstr(out, "5 kernel launches, 5.000 ms on the GPU") &&
                   strstr(out, "| flash_fwd<Tf32x3, 64> | 2 | 3.000 | 60.0% |") &&
                   strstr(out, "| sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n | 1 | 1.250 | 25.0% |") &&
                   strstr(out, "| layernorm_forward_kernel | 1 | 0.250 | 5.0% |"),
               "profile_table.py: each kernel's launches summed, in ms from any unit, with its share (exit %d):\n%s", st, out);
        EXPECT(strstr(out, "| attention | 2 | 3.000 | 60.0% |") && strstr(out, "| matrix products (cuBLAS) | 1 | 1.250 | 25.0% |") &&
                   strstr(out, "| param_hash | 1 | 0.500 | 10.0% |") && strstr(out, "| LayerNorm | 1 | 0.250 | 5.0% |"),
               "and by kind");
        // The run of section 5: ms.step 11 and ms.work 5.5 after 3 warm-up steps; 5 ms of kernels.
        EXPECT(strstr(out, "the step 11.000 ms on the wall clock, its work 5.500 ms; the kernels above 5.000 ms, so the GPU "
                           "waited 0.500 ms of the work (9.1%) and 5.500 ms between steps (50.0% of the step)") != NULL,
               "with the run: the work minus the kernels is the GPU's idle time:\n%s", out);
        free(out);
        snprintf(path, sizeof path, "%s/raw.csv", tmp);
        test_put_file(path, "\"ID\",\"Kernel Name\",\"gpu__time_duration.sum\"\n\"\",\"\",\"usecond\"\n"
                            "\"0\",\"k_a(float *)\",\"1,000\"\n\"1\",\"k_b\",\"500\"\n", 0);
        snprintf(cmd, sizeof cmd, "python3 tests/gpu/profile_table.py --csv '%s'", path);
        out = test_sh(root, cmd, &st);
        EXPECT(st == 0 && strstr(out, "2 kernel launches, 1.500 ms on the GPU") && strstr(out, "| k_a | 1 | 1.000 | 66.7% |") &&
                   strstr(out, "| other | 2 | 1.500 | 100.0% |"),
               "profile_table.py reads ncu's raw page too (units under the header) (exit %d):\n%s", st, out);
        free(out);
        snprintf(path, sizeof path, "%s/empty.csv", tmp);
        test_put_file(path, "==PROF== Disconnected\n", 0);
        snprintf(cmd, sizeof cmd, "python3 tests/gpu/profile_table.py --csv '%s'", path);
        out = test_sh(root, cmd, &st);
        EXPECT(st == 1 && strstr(out, "no ncu CSV header"), "no CSV in ncu's log: exit 1, saying so (exit %d): %s", st, out);
        free(out);
    }

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) printf("# removing %s failed\n", tmp);
    return test_done();
}
