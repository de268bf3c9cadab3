// test_dcp.c — distributed checkpoints (common/runfiles/dcp.h) from real runs: save, resume, reshard,
// survive kill -9 in the middle of a save, refuse what is damaged.
//
// Usage: test_dcp LABS_DIR SHARDLAB SAN_LABS_DIR
//   (build/labs and build/shardlab, optimized so that runs take a second; build/san/labs for
//   the sanitized runs)
//
// What it proves:
//   1. every training lab resumes bitwise: save at step 3 of 6, resume, and the losses of
//      steps 4..6 and the final model hash are those of the run that was never stopped;
//   2. resharding: a checkpoint saved at N ranks by one lab loads at another N, into another
//      lab (ZeRO-2 at N=4 -> ZeRO-2 at N=2, DDP, FSDP, TP, a pipeline, one rank). Tolerance
//      1e-5 on the loss of each of steps 4..6: the same state, so only the order of the fp32
//      additions (reductions over a different number of ranks) differs, which moves a loss of
//      about 4 by about 1e-8; a lost shard or a shard put in the wrong place moves it by 1e-2;
//   3. crash safety: 20 runs saving at every step, slowed down inside the save, are killed
//      (kill -9, every rank at once) at a random moment after their first save; every time, the
//      directory resumes and the final hash equals the uninterrupted run's, and the next save
//      cleans up what the killed one left;
//   4. a damaged or mismatched checkpoint is refused with exit 2 and one line that names the
//      file and the check (truncated shard, flipped byte in a shard or in the manifest, a
//      world size that does not match the files, a missing shard, another model), and
//      nothing in the checkpoint directory changes;
//   5. one save of one run: a rank file of another run (a twin job's, with the same weights;
//      another seed's, the manifest made to match it) or of another save of the same run is
//      refused, naming the file and what differs; a file replaced between a save's rename and
//      its manifest (as a second job saving into the folder does) is refused, since each
//      rank's checksum is of the bytes it wrote, never read back;
//   6. values: a weight NaN, a moment infinite, a second moment below 0, every checksum
//      agreeing, is refused naming the tensor, the file and the element; such a state is not
//      saved either (exit 1), and the folder's last good checkpoint stays;
//   7. paths: a --ckpt of 1500 characters and a run directory of 1422 save where they say
//      and resume; a path over PATH_MAX, one whose folders shardlab cannot make (3500
//      characters) or a name over NAME_MAX is refused up front, the length named;
//   8. bad options exit 2 with one line;
//   9. one job per checkpoint folder: a second saver, or a reader while one saves, refused at
//      start, naming the folder and the holder; readers share a folder, and keep savers out.

#include <signal.h>
#include <stdint.h>
#include <sys/stat.h>

#include "labtest.h"
#include "test.h"
#define STEPS 6
#include "shardtest.h"

static const char *labs_dir, *launcher, *san_labs;

static const char *lab_bin(const char *dir, const char *lab) {
    static char path[4][512];
    static int which;
    char *p = path[which++ % 4];
    snprintf(p, 512, "%s/%s", dir, lab);
    return p;
}

// The lab on n ranks with args (NULL-terminated), as run_lab does, into tmp/<name>.
static void go(Run *r, const char *dir, const char *lab, const char *name, int n, char *const args[]) {
    run_lab(r, lab_bin(dir, lab), name, n, args, NULL);
}

// Steps 4..6 of `full` against the resumed run's steps (its first three events).
static double worst_after_resume(const RankLog *full, const RankLog *resumed, int *bitwise) {
    double worst = 0;
    *bitwise = resumed->n == STEPS - 3;
    for (int s = 0; s < resumed->n && s + 3 < full->n; s++) {
        double d = fabs(full->loss[s + 3] - resumed->loss[s]);
        if (d > worst) worst = d;
        *bitwise &= full->loss[s + 3] == resumed->loss[s] && strcmp(full->hash[s + 3], resumed->hash[s]) == 0;
    }
    if (resumed->n != STEPS - 3) worst = INFINITY;
    return worst;
}

// ---------------------------------------------------------------------------------------
// 1. Every lab resumes bitwise at the same N

static void resumes_bitwise(const char *lab, int n, char *const extra[]) {
    char name[128], desc[128] = "", ck[512], full_name[160], save_name[160], resume_name[160];
    snprintf(name, sizeof name, "%s", lab);
    for (int i = 0; extra[i]; i++) {
        snprintf(name + strlen(name), sizeof name - strlen(name), "%s", extra[i]);
        snprintf(desc + strlen(desc), sizeof desc - strlen(desc), " %s", extra[i]);
    }
    for (char *p = name; *p; p++)
        if (*p == '-' || *p == ' ') *p = '_';
    snprintf(ck, sizeof ck, "%s/ck_%s", tmp, name);
    snprintf(full_name, sizeof full_name, "full_%s", name);
    snprintf(save_name, sizeof save_name, "save_%s", name);
    snprintf(resume_name, sizeof resume_name, "resume_%s", name);
    char *a_full[16], *a_save[16], *a_resume[16];
    int k = 0, ks = 0, kr = 0;
    for (int i = 0; extra[i]; i++) a_full[k++] = a_save[ks++] = a_resume[kr++] = extra[i];
    a_full[k] = NULL;
    a_save[ks++] = "--steps", a_save[ks++] = "3", a_save[ks++] = "--save-every", a_save[ks++] = "3";
    a_save[ks++] = "--ckpt", a_save[ks++] = ck, a_save[ks] = NULL;
    a_resume[kr++] = "--resume", a_resume[kr++] = ck, a_resume[kr] = NULL;

    static Run full, saved, resumed;
    go(&full, labs_dir, lab, full_name, n, a_full);
    go(&saved, labs_dir, lab, save_name, n, a_save);
    go(&resumed, labs_dir, lab, resume_name, n, a_resume);
    int bitwise;
    worst_after_resume(&full.r[0], &resumed.r[0], &bitwise);
    char manifest[600];
    snprintf(manifest, sizeof manifest, "%s/manifest.json", ck);
    // The save run committed a manifest; the resumed run trained steps 4..6 exactly as the
    // run that never stopped: same losses, same hash of the whole model at the end.
    EXPECT(full.status == 0 && saved.status == 0 && access(manifest, R_OK) == 0,
           "%s -n %d%s: the 6-step run and the run saving at step 3 exit 0, and the save committed a manifest", lab, n,
           desc);
    EXPECT(resumed.status == 0 && bitwise && full.final_hash[0] && strcmp(full.final_hash, resumed.final_hash) == 0,
           "%s -n %d%s: resumed at step 4, steps 4..6 and the final model hash %s are bitwise the uninterrupted run's "
           "(got %s)", lab, n, desc, full.final_hash, resumed.final_hash);
}

// ---------------------------------------------------------------------------------------
// 2. Resharding: saved by one lab at one N, loaded by others at other Ns

static void reshards(void) {
    static Run full, saved, other;
    char ck[512];
    snprintf(ck, sizeof ck, "%s/ck_zero2_n4", tmp);
    char *a_full[] = {"--stage", "2", NULL};
    char *a_save[] = {"--stage", "2", "--steps", "3", "--save-every", "3", "--ckpt", ck, NULL};
    go(&full, labs_dir, "zero", "reshard_full", 4, a_full);
    go(&saved, labs_dir, "zero", "reshard_save", 4, a_save);
    EXPECT(full.status == 0 && saved.status == 0, "zero --stage 2 -n 4: the full run and the save at step 3 exit 0");
    struct {
        const char *lab;
        int n;
        char *args[8];
    } into[] = {
        {"zero", 2, {"--stage", "2", "--resume", ck, NULL}},   // the example: ZeRO-2 at N=4 -> N=2
        {"ddp", 2, {"--resume", ck, NULL}},
        {"fsdp", 2, {"--resume", ck, NULL}},
        {"tp", 2, {"--resume", ck, NULL}},
        {"pp", 2, {"--resume", ck, NULL}},
        {"single", 1, {"--resume", ck, NULL}},
    };
    for (size_t i = 0; i < sizeof into / sizeof into[0]; i++) {
        char name[64];
        snprintf(name, sizeof name, "reshard_%s_%zu", into[i].lab, i);
        go(&other, labs_dir, into[i].lab, name, into[i].n, into[i].args);
        int bitwise;
        double worst = worst_after_resume(&full.r[0], &other.r[0], &bitwise);
        // The same state resumed on another layout: only the order of fp32 additions differs.
        EXPECT(other.status == 0 && worst <= 1e-5,
               "reshard: zero stage 2 saved at N=%d, resumed by %s -n %d: steps 4..6 within 1e-5 of the uninterrupted "
               "run (worst %.3g)", 4, into[i].lab, into[i].n, worst);
    }

    // Padding: at N=3 the units do not split evenly, so FSDP's shards end in padding, which
    // is never saved; ZeRO-1 at N=2 reads the same elements back from other boundaries.
    static Run pfull, psave, pres;
    char pck[512];
    snprintf(pck, sizeof pck, "%s/ck_fsdp_n3", tmp);
    char *p_full[] = {"--batch", "6", NULL};
    char *p_save[] = {"--batch", "6", "--steps", "3", "--save-every", "3", "--ckpt", pck, NULL};
    char *p_res[] = {"--stage", "1", "--batch", "6", "--resume", pck, NULL};
    go(&pfull, labs_dir, "fsdp", "pad_full", 3, p_full);
    go(&psave, labs_dir, "fsdp", "pad_save", 3, p_save);
    go(&pres, labs_dir, "zero", "pad_resume", 2, p_res);
    int pbw;
    double pworst = worst_after_resume(&pfull.r[0], &pres.r[0], &pbw);
    EXPECT(pres.status == 0 && pworst <= 1e-5,
           "reshard with padding: fsdp at N=3 -> zero stage 1 at N=2: steps 4..6 within 1e-5 (worst %.3g)", pworst);

    // Mixed precision: the fp32 master weights are what is saved; bf16 weights are rounded
    // from them again on load. ZeRO-3 at N=4 -> FSDP at N=2 (bf16 reductions over another
    // number of ranks: tolerance 1e-4).
    static Run mfull, msave, mres;
    char mck[512];
    snprintf(mck, sizeof mck, "%s/ck_zero3_mixed", tmp);
    char *m_full[] = {"--stage", "3", "--mixed", NULL};
    char *m_save[] = {"--stage", "3", "--mixed", "--steps", "3", "--save-every", "3", "--ckpt", mck, NULL};
    char *m_res[] = {"--mixed", "--resume", mck, NULL};
    go(&mfull, labs_dir, "zero", "mixed_full", 4, m_full);
    go(&msave, labs_dir, "zero", "mixed_save", 4, m_save);
    go(&mres, labs_dir, "fsdp", "mixed_resume", 2, m_res);
    int bw;
    double worst = worst_after_resume(&mfull.r[0], &mres.r[0], &bw);
    EXPECT(mres.status == 0 && worst <= 1e-4,
           "reshard --mixed: zero stage 3 at N=4 -> fsdp at N=2: steps 4..6 within 1e-4 (worst %.3g)", worst);
}

// ---------------------------------------------------------------------------------------
// 3. kill -9 in the middle of saves

#define CRASH_STEPS 24
#define TRIALS 20

static uint64_t fnv(const void *p, size_t n, uint64_t h) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static int count_entries(const char *dir, const char *prefix) {
    int k = 0;
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) k++;
    if (d) closedir(d);
    return k;
}

static void crash_trials(void) {
    // The run that never stops, for the hash every trial must end with.
    char steps[16];
    snprintf(steps, sizeof steps, "%d", CRASH_STEPS);
    static Run ref;
    char *a_ref[] = {"--steps", steps, NULL};
    go(&ref, labs_dir, "ddp", "crash_ref", 2, a_ref);
    EXPECT(ref.status == 0 && ref.final_hash[0], "crash: the uninterrupted ddp -n 2 run of %d steps", CRASH_STEPS);

    srand((unsigned)getpid());
    int good = 0, resumed_from[TRIALS], killed = 0, clean = 0;
    for (int t = 0; t < TRIALS; t++) {
        char ck[512], dir[512], tag[32], manifest[600];
        snprintf(ck, sizeof ck, "%s/crash_ck_%d", tmp, t);
        snprintf(dir, sizeof dir, "%s/crash_run_%d", tmp, t);
        snprintf(manifest, sizeof manifest, "%s/manifest.json", ck);
        snprintf(tag, sizeof tag, "crash_%d", t);
        char *argv[] = {(char *)launcher, "run", "ddp", "-n", "2", "--ui", "none", "--steps", steps, "--save-every", "1",
                        "--ckpt", ck, "--run-dir", dir, NULL};
        // Every save pauses 15 ms before and after each rank writes its file and before the
        // manifest's rename: a save takes ~50 ms and a step ~5, so most moments are inside one.
        char *env[] = {"SHARDLAB_TEST_SLOW_SAVE=15", "SHARDLAB_TIMEOUT_S=30", NULL};
        pid_t pid = spawn_env(argv, tag, env);
        double t0 = now_s();
        while (access(manifest, R_OK) != 0 && now_s() - t0 < 30) usleep(2000);
        usleep((useconds_t)(rand() % 400) * 1000);  // then a random moment: 0..400 ms (of ~1.2 s of saving)
        pid_t pids[16];
        int n = run_procs(dir, -1, pids, 16);
        for (int i = 0; i < n && i < 16; i++) kill(pids[i], SIGKILL);  // the whole job, at once
        int status = wait_status(pid);
        killed += n == 2 && status != 0;

        // Resume from whatever the directory holds, and keep saving into it.
        char tag2[32], dir2[512];
        snprintf(tag2, sizeof tag2, "crash_resume_%d", t);
        snprintf(dir2, sizeof dir2, "%s/crash_resume_%d", tmp, t);
        size_t len;
        char *m = read_file(manifest, &len);
        const char *at = m ? strstr(m, "\"step\":") : NULL;
        resumed_from[t] = at ? atoi(at + 7) : -1;
        free(m);
        char *argv2[] = {(char *)launcher, "run", "ddp", "-n", "2", "--ui", "none", "--steps", steps, "--resume", ck,
                         "--save-every", "50", "--run-dir", dir2, NULL};
        int status2 = run(argv2, tag2);
        JsonValue *summary = load_json_file(dir2, "summary.json");
        const JsonValue *h = summary ? json_get(summary, "param_hash") : NULL;
        int same = status2 == 0 && h && h->type == JSON_STRING && strcmp(h->string, ref.final_hash) == 0;
        json_free(summary);
        good += same;
        if (!same) {
            char *err = captured(tag2, "err");
            printf("# trial %d: resumed from step %d, status %d: %s\n", t, resumed_from[t], status2, one_line(err));
            free(err);
        }
        // The final save of the resumed run committed step 24 and removed every other step
        // directory, and the temporaries of the killed save.
        char last[600];
        snprintf(last, sizeof last, "%s/step-%08d", ck, CRASH_STEPS);
        clean += count_entries(ck, "step-") == 1 && count_entries(ck, "manifest.json.tmp") == 0 &&
                 count_entries(last, "rank-") == 2;
    }
    printf("# crash trials resumed from steps:");
    for (int t = 0; t < TRIALS; t++) printf(" %d", resumed_from[t]);
    printf("\n");
    EXPECT(killed == TRIALS, "crash: all %d runs were killed (kill -9 of both ranks) before they finished (%d)", TRIALS,
           killed);
    EXPECT(good == TRIALS, "crash: after kill -9 at a random moment of saving, the directory resumed every time and the "
           "final hash is the uninterrupted run's (%d of %d)", good, TRIALS);
    EXPECT(clean == TRIALS, "crash: the resumed run's last save left one step directory with its 2 files and no "
           "temporaries (%d of %d)", clean, TRIALS);
}

// ---------------------------------------------------------------------------------------
// 4. Damaged or mismatched checkpoints are refused, and left as they were

// FNV-1a of every file's name and bytes in a checkpoint directory (two levels).
static uint64_t dir_hash(const char *dir) {
    uint64_t h = 0xcbf29ce484222325ull;
    struct dirent **list;
    int n = scandir(dir, &list, NULL, alphasort);
    for (int i = 0; i < n; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, list[i]->d_name);
        struct stat st;
        // (The lock file names whichever job took the folder last: not part of the checkpoint.)
        if (list[i]->d_name[0] != '.' && strcmp(list[i]->d_name, "lock") != 0 && stat(path, &st) == 0) {
            h = fnv(list[i]->d_name, strlen(list[i]->d_name), h);
            if (S_ISDIR(st.st_mode)) h ^= dir_hash(path);
            else {
                size_t len;
                char *b = read_file(path, &len);
                h = fnv(b, len, h);
                free(b);
            }
        }
        free(list[i]);
    }
    if (n >= 0) free(list);
    return h;
}

static void copy_dir(const char *from, const char *to) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", to, from, to);
    if (system(cmd) != 0) printf("# copy failed: %s\n", cmd);
}

static void flip_byte(const char *path, long at) {
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    if (at < 0) {
        fseek(f, 0, SEEK_END);
        at = ftell(f) + at;
    }
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ 0x01, f);
    fclose(f);
}

// The manifest rewritten with `from` replaced by `to` and a correct checksum: a consistent
// file whose content lies (what a careless hand edit or a buggy tool would leave).
static void rewrite_manifest(const char *path, const char *from, const char *to) {
    size_t len;
    char *m = read_file(path, &len);
    char *at = strstr(m, from), *field = NULL;
    if (!at) return free(m);
    char body[1 << 16];
    size_t pre = (size_t)(at - m);
    snprintf(body, sizeof body, "%.*s%s%s", (int)pre, m, to, at + strlen(from));
    for (char *p = strstr(body, ",\"checksum\":\""); p; p = strstr(p + 1, ",\"checksum\":\"")) field = p;
    uint64_t h = fnv(body, (size_t)(field - body), 0xcbf29ce484222325ull);
    snprintf(field, sizeof body - (size_t)(field - body), ",\"checksum\":\"%016llx\"}\n", (unsigned long long)h);
    write_text(path, "w", body);
    free(m);
}

static void refuses(void) {
    char good[512];
    snprintf(good, sizeof good, "%s/ck_good", tmp);
    static Run saved;
    char *a_save[] = {"--steps", "3", "--save-every", "3", "--ckpt", good, NULL};
    go(&saved, labs_dir, "ddp", "refuse_save", 2, a_save);
    EXPECT(saved.status == 0, "refuse: a good checkpoint saved by ddp -n 2 at step 3");
    struct {
        const char *what, *file, *check;  // the damage; the message names file and check
    } cases[] = {
        {"truncated shard", "rank-1-of-2.safetensors", "bytes"},
        {"flipped byte in a shard", "rank-0-of-2.safetensors", "checksum"},
        {"flipped byte in the manifest", "manifest.json", "checksum"},
        {"world size 4 for 2 files", "manifest.json", "world 4"},
        {"missing shard", "rank-1-of-2.safetensors", "missing"},
        {"another model (--dim 32)", "manifest.json", "dim"},
        {"a file from another rank", "rank-0-of-2.safetensors", "rank 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char ck[512], shard0[700], shard1[700], manifest[600], tag[32];
        snprintf(ck, sizeof ck, "%s/ck_bad_%zu", tmp, i);
        copy_dir(good, ck);
        snprintf(shard0, sizeof shard0, "%s/step-00000003/rank-0-of-2.safetensors", ck);
        snprintf(shard1, sizeof shard1, "%s/step-00000003/rank-1-of-2.safetensors", ck);
        snprintf(manifest, sizeof manifest, "%s/manifest.json", ck);
        if (i == 0 && truncate(shard1, 1000) != 0) printf("# truncate failed\n");
        if (i == 1) flip_byte(shard0, -100);
        if (i == 2) flip_byte(manifest, 40);
        if (i == 3) rewrite_manifest(manifest, "\"world\":2", "\"world\":4");
        if (i == 4) remove(shard1);
        if (i == 6) {  // rank 1's file under rank 0's name, the manifest's size and checksum made to match
            char cmd[2048];
            snprintf(cmd, sizeof cmd, "cp '%s' '%s'", shard1, shard0);
            if (system(cmd) != 0) printf("# cp failed\n");
            size_t len0, len1;
            char *m = read_file(manifest, NULL), *b0 = read_file(shard0, &len0), *b1 = read_file(shard1, &len1);
            (void)len1;
            // rank 0's entry: "bytes":N,"fnv1a64":"X" -> the copied file's
            char *e0 = strstr(m, "\"rank\":0,"), *fb = strstr(e0, "\"bytes\":"), old[128], neu[128];
            char *end = strstr(fb, "}");
            snprintf(old, sizeof old, "%.*s", (int)(end - fb), fb);
            snprintf(neu, sizeof neu, "\"bytes\":%zu,\"fnv1a64\":\"%016llx\"", len0,
                     (unsigned long long)fnv(b0, len0, 0xcbf29ce484222325ull));
            free(m), free(b0), free(b1);
            rewrite_manifest(manifest, old, neu);
        }
        uint64_t before = dir_hash(ck);
        char *args_bad[] = {"--resume", ck, NULL};
        char *args_dim[] = {"--resume", ck, "--dim", "32", NULL};
        snprintf(tag, sizeof tag, "refuse_%zu", i);
        char dir[512], errpath[600];
        snprintf(dir, sizeof dir, "%s/%s", tmp, tag);
        int status = run_ranks(lab_bin(labs_dir, "ddp"), 2, tag, dir, i == 5 ? args_dim : args_bad, NULL);
        snprintf(errpath, sizeof errpath, "%s/%s.r0.err", tmp, tag);
        char *err = read_file(errpath, NULL);
        int named = err && strstr(err, cases[i].file) && strstr(err, cases[i].check);
        EXPECT(status == 2 && err && count_lines(err) == 1 && named,
               "refuse (%s): exit 2, one line naming %s and '%s': %s", cases[i].what, cases[i].file, cases[i].check,
               err ? one_line(err) : "(none)");
        EXPECT(dir_hash(ck) == before, "refuse (%s): nothing in the checkpoint directory changed", cases[i].what);
        free(err);
    }
}

// ---------------------------------------------------------------------------------------
// 4b. One save of one run: a file of another save is refused, whatever its checksums say

// A safetensors file's data section: *at is where it starts.
static char *st_bytes(const char *path, size_t *len, size_t *at) {
    char *b = read_file(path, len);
    uint64_t h = 0;
    for (int i = 7; b && *len >= 8 && i >= 0; i--) h = h << 8 | (unsigned char)b[i];
    *at = b && *len >= 8 && h <= *len - 8 ? 8 + (size_t)h : *len;
    return b;
}

// After an edit of a file's data: its data_fnv1a64 made to match again (when it has one), so
// that only what the edit did to the values is left to be caught.
static void rehash_data(const char *path) {
    size_t len, at;
    char *b = st_bytes(path, &len, &at);
    char *sum = b ? strstr(b + 8, "\"data_fnv1a64\":\"") : NULL;
    if (sum && sum < b + at) {
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv(b + at, len - at, 0xcbf29ce484222325ull));
        memcpy(sum + strlen("\"data_fnv1a64\":\""), hex, 16);
        FILE *f = fopen(path, "wb");
        if (f) fwrite(b, 1, len, f), fclose(f);
    }
    free(b);
}

// The float at `index` of tensor `name` in a safetensors file set to x (then rehash_data).
static int set_float(const char *path, const char *name, size_t index, float x) {
    size_t len, at;
    char *b = st_bytes(path, &len, &at), err[128];
    JsonValue *h = b && at > 8 ? json_parse(b + 8, at - 8, err, sizeof err) : NULL;
    const JsonValue *off = json_get(json_get(h, name), "data_offsets");
    int ok = off && json_at(off, 0) && at + (size_t)json_at(off, 0)->number + 4 * index + 4 <= len;
    if (ok) {
        memcpy(b + at + (size_t)json_at(off, 0)->number + 4 * index, &x, 4);
        FILE *f = fopen(path, "wb");
        ok = f && fwrite(b, 1, len, f) == len;
        if (f) fclose(f);
        rehash_data(path);
    }
    json_free(h);
    free(b);
    return ok;
}

// Rank r's entry in the manifest made to name the file as it is now: its size and checksum
// (what a save that checksummed another writer's file would have recorded).
static void manifest_trusts(const char *manifest, int r, const char *file) {
    size_t len;
    char *m = read_file(manifest, NULL), *b = read_file(file, &len), key[32], old[128], neu[128];
    snprintf(key, sizeof key, "\"rank\":%d,", r);
    char *e = m ? strstr(m, key) : NULL, *fb = e ? strstr(e, "\"bytes\":") : NULL, *end = fb ? strstr(fb, "}") : NULL;
    if (end && b) {
        snprintf(old, sizeof old, "%.*s", (int)(end - fb), fb);
        snprintf(neu, sizeof neu, "\"bytes\":%zu,\"fnv1a64\":\"%016llx\"", len,
                 (unsigned long long)fnv(b, len, 0xcbf29ce484222325ull));
        rewrite_manifest(manifest, old, neu);
    }
    free(m);
    free(b);
}

static void cp(const char *from, const char *to) {
    if (sh("cp '%s' '%s'", from, to) != 0) printf("# cp %s %s failed\n", from, to);
}

// Resume ddp -n 2 from ck: exit 2 and one line naming `file` and every one of `says` (NULL-ended).
static void expect_refused(const char *ck, const char *what, const char *tag, const char *file, const char *const says[]) {
    char dir[512], errpath[600];
    snprintf(dir, sizeof dir, "%s/%s", tmp, tag);
    char *args[] = {"--resume", (char *)ck, NULL};
    uint64_t before = dir_hash(ck);
    int status = run_ranks(lab_bin(labs_dir, "ddp"), 2, tag, dir, args, NULL);
    snprintf(errpath, sizeof errpath, "%s/%s.r0.err", tmp, tag);
    char *err = read_file(errpath, NULL);
    int named = err && strstr(err, file) != NULL;
    for (int i = 0; says[i] && named; i++) named = strstr(err, says[i]) != NULL;
    EXPECT(status == 2 && err && count_lines(err) == 1 && named, "refuse (%s): exit 2, one line naming %s and '%s': %s",
           what, file, says[0], err ? one_line(err) : "(none)");
    EXPECT(dir_hash(ck) == before, "refuse (%s): nothing in the checkpoint directory changed", what);
    free(err);
}

static void refuses_other_saves(void) {
    // Two jobs of the same command save step 3 into two folders: the same weights, bit for bit,
    // but two saves of two runs. A third, with another seed, other weights. And one run that
    // saves at step 3 (a replay point) and at step 6 (the checkpoint): two saves of one run.
    char good[512], twin[512], other[512], two[512], replay[700];
    snprintf(good, sizeof good, "%s/ck_good", tmp);
    snprintf(twin, sizeof twin, "%s/ck_twin", tmp);
    snprintf(other, sizeof other, "%s/ck_seed2", tmp);
    snprintf(two, sizeof two, "%s/ck_two_saves", tmp);
    static Run r1, r2, r3;
    char *a_twin[] = {"--steps", "3", "--save-every", "3", "--ckpt", twin, NULL};
    char *a_other[] = {"--steps", "3", "--save-every", "3", "--seed", "2", "--ckpt", other, NULL};
    char *a_two[] = {"--steps", "6", "--save-every", "3", "--replay-every", "3", "--ckpt", two, NULL};
    go(&r1, labs_dir, "ddp", "twin_save", 2, a_twin);
    go(&r2, labs_dir, "ddp", "seed2_save", 2, a_other);
    go(&r3, labs_dir, "ddp", "two_saves", 2, a_two);
    snprintf(replay, sizeof replay, "%s/replay/step-00000003/step-00000003/rank-1-of-2.safetensors", r3.dir);
    EXPECT(r1.status == 0 && r2.status == 0 && r3.status == 0 && access(replay, R_OK) == 0,
           "other saves: the twin, the --seed 2 run and the run with a replay point at step 3 saved");

    struct {
        const char *what, *from, *says[3];
        int trusted;  // the manifest's entry made to match the file
    } cases[] = {
        {"rank 1's file from a twin job (the same weights, another run)", twin, {"from another run", "twin_save", NULL}, 0},
        {"rank 1's file from a job with another seed, the manifest made to match it", other,
         {"from another run", "seed2_save", NULL}, 1},
        {"rank 1's file from the same run's step-3 replay point, the manifest made to match it", NULL,
         {"from another save of this run", "at step 3", NULL}, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char ck[512], mine[700], theirs[700], manifest[600], tag[32];
        snprintf(ck, sizeof ck, "%s/ck_other_%zu", tmp, i);
        snprintf(tag, sizeof tag, "other_%zu", i);
        copy_dir(cases[i].from ? good : two, ck);
        int step = cases[i].from ? 3 : 6;
        snprintf(mine, sizeof mine, "%s/step-%08d/rank-1-of-2.safetensors", ck, step);
        if (cases[i].from) snprintf(theirs, sizeof theirs, "%s/step-00000003/rank-1-of-2.safetensors", cases[i].from);
        else snprintf(theirs, sizeof theirs, "%s", replay);
        cp(theirs, mine);
        snprintf(manifest, sizeof manifest, "%s/manifest.json", ck);
        if (cases[i].trusted) manifest_trusts(manifest, 1, mine);
        // Proves: the file's header names another save (or run) than the manifest, and that
        // is refused even where every size and checksum agrees. Broken on purpose (the save
        // identity not compared): the twin's file and the trusted ones resume.
        expect_refused(ck, cases[i].what, tag, "rank-1-of-2.safetensors", cases[i].says);
    }
}

// The readback race, made to happen every time: job A pauses 400 ms after writing its files
// (SHARDLAB_TEST_SLOW_SAVE); in that window its rank-1 file is replaced, by another job's
// (as a second job saving into the same folder does), or by its own with one weight changed
// (its data checksum refreshed, so only the manifest can tell). A save that checksummed its
// file by reading it back recorded the replacement as its own, and A resumed with rank 1's
// half from another seed; the checksum of the bytes A wrote refuses both. Broken on purpose
// (the checksum read back after the rename): the second resumes, the changed weight with it
// (the first is still refused, by the save identity in its header).
static void readback_race(int own) {
    char ck[512], file[700], theirs[700], swap[720], dir[512], tag[32];
    snprintf(ck, sizeof ck, "%s/ck_race_%d", tmp, own);
    snprintf(dir, sizeof dir, "%s/race_run_%d", tmp, own);
    snprintf(tag, sizeof tag, "race_%d", own);
    snprintf(file, sizeof file, "%s/step-00000003/rank-1-of-2.safetensors", ck);
    snprintf(theirs, sizeof theirs, "%s/ck_seed2/step-00000003/rank-1-of-2.safetensors", tmp);
    snprintf(swap, sizeof swap, "%s.swap", file);
    char *argv[] = {(char *)launcher, "run", "ddp", "-n", "2", "--ui", "none", "--steps", "3", "--save-every", "3",
                    "--ckpt", ck, "--run-dir", dir, NULL};
    char *env[] = {"SHARDLAB_TEST_SLOW_SAVE=400", "SHARDLAB_TIMEOUT_S=30", NULL};
    pid_t pid = spawn_env(argv, tag, env);
    double t0 = now_s();
    while (access(file, F_OK) != 0 && now_s() - t0 < 30) usleep(1000);
    cp(own ? file : theirs, swap);
    int swapped = (!own || set_float(swap, "params.0.10240", 0, 1234.5f)) && rename(swap, file) == 0;
    int status = wait_status(pid);
    EXPECT(status == 0 && swapped, "race: job A saved step 3 while its rank-1 file was replaced by %s (exit %d)",
           own ? "its own with a weight changed" : "another job's", status);
    const char *says_theirs[] = {"from another run", NULL}, *says_own[] = {"checksum mismatch", NULL};
    snprintf(tag, sizeof tag, "race_resume_%d", own);
    expect_refused(ck, own ? "its file changed between its rename and the manifest" :
                   "another job's file renamed over it before the manifest", tag, "rank-1-of-2.safetensors",
                   own ? says_own : says_theirs);
}

// ---------------------------------------------------------------------------------------
// 4c. A state that cannot be right: refused at resume, never saved

static void refuses_bad_values(void) {
    char good[512];
    snprintf(good, sizeof good, "%s/ck_good", tmp);
    // DDP at N = 2: rank 1 holds the second half of every unit. Unit 0 is wte [256, 64] then
    // wpe [64, 64], so its element 10240 is wte[160, 0]; unit 3 (the head) starts with
    // ln_f.weight [64] and ln_f.bias, then lm_head.
    struct {
        const char *what, *tensor;
        size_t index;
        float x;
        const char *says[4];
    } cases[] = {
        {"a weight that is NaN", "params.0.10240", 0, NAN, {"params of wte[160, 0]", "element 10240 of unit 0", "nan", NULL}},
        {"a first moment that is infinite", "m.1.24992", 5, INFINITY, {"m of h.0.", "element 24997 of unit 1", "inf", NULL}},
        {"a second moment below 0", "v.3.8256", 7, -1e-3f, {"v of lm_head.weight", "element 8263 of unit 3", "never negative", NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char ck[512], file[700], manifest[600], tag[32];
        snprintf(ck, sizeof ck, "%s/ck_value_%zu", tmp, i);
        snprintf(tag, sizeof tag, "value_%zu", i);
        copy_dir(good, ck);
        snprintf(file, sizeof file, "%s/step-00000003/rank-1-of-2.safetensors", ck);
        snprintf(manifest, sizeof manifest, "%s/manifest.json", ck);
        int edited = set_float(file, cases[i].tensor, cases[i].index, cases[i].x);
        manifest_trusts(manifest, 1, file);  // every checksum agrees: only the value is wrong
        EXPECT(edited, "value (%s): %s[%zu] set", cases[i].what, cases[i].tensor, cases[i].index);
        // Proves: the values are checked, and the refusal names the tensor, the file and the
        // element. Broken on purpose (no value check): all three resume and the run ends ok.
        expect_refused(ck, cases[i].what, tag, "rank-1-of-2.safetensors", cases[i].says);
    }
}

// A state with an infinite weight the loss never reads (the embedding row of a byte the data
// lacks: its gradient is 0, so the loss stays finite): the save refuses it, and the last good
// checkpoint in the folder stays as it was.
static void refuses_bad_save(void) {
    char data[512], w[512], ck[512], d1[512], d2[512], d3[512];
    snprintf(data, sizeof data, "%s/ab.txt", tmp);
    snprintf(w, sizeof w, "%s/w.safetensors", tmp);
    snprintf(ck, sizeof ck, "%s/ck_keep", tmp);
    snprintf(d1, sizeof d1, "%s/keep_w", tmp);
    snprintf(d2, sizeof d2, "%s/keep_good", tmp);
    snprintf(d3, sizeof d3, "%s/keep_bad", tmp);
    char text[4097];
    for (int i = 0; i < 4096; i++) text[i] = "ab"[(i * 7 / 3) % 2];
    text[4096] = 0;
    write_text(data, "w", text);
    char *a_w[] = {(char *)lab_bin(labs_dir, "single"), "--steps", "1", "--lr", "0", "--data", data, "--save", w,
                   "--run-dir", d1, NULL};
    char *a_good[] = {(char *)lab_bin(labs_dir, "single"), "--steps", "1", "--data", data, "--save-every", "1", "--ckpt",
                      ck, "--run-dir", d2, NULL};
    int s1 = run(a_w, "keep_w"), s2 = run(a_good, "keep_good");
    int poisoned = set_float(w, "wte", 5, INFINITY);  // wte[0, 5]: byte 0 is not in the data
    EXPECT(s1 == 0 && s2 == 0 && poisoned, "bad save: the weights saved and poisoned, a good checkpoint at step 1");
    uint64_t before = dir_hash(ck);
    char *a_bad[] = {(char *)lab_bin(labs_dir, "single"), "--steps", "2", "--data", data, "--init", w, "--save-every",
                     "1", "--ckpt", ck, "--run-dir", d3, NULL};
    int s3 = run(a_bad, "keep_bad");
    char *err = captured("keep_bad", "err");
    // Proves: the save checks the values it writes. Broken on purpose (no check at save):
    // exit 0 after writing the infinite weight over the good checkpoint.
    EXPECT(s3 == 1 && strstr(err, "step 1 not saved") && strstr(err, "params of wte[0, 5]") && strstr(err, "must be finite"),
           "bad save: an infinite weight is not saved: exit 1 naming the step, the tensor and the element (exit %d): %s",
           s3, one_line(err));
    EXPECT(dir_hash(ck) == before, "bad save: the good checkpoint in the folder is unchanged");
    free(err);
}

// ---------------------------------------------------------------------------------------
// 4d. Paths: never cut; too long for the system, refused up front

// tmp/<name> grown with folders of `part` characters until it is `len` characters long.
static void long_path(char *out, size_t n, const char *name, size_t len, size_t part) {
    snprintf(out, n, "%s/%s", tmp, name);
    while (strlen(out) < len) {
        size_t k = strlen(out), add = len - k - 1 < part ? len - k - 1 : part;
        out[k] = '/';
        memset(out + k + 1, 'd', add);
        out[k + 1 + add] = 0;
    }
}

// The lab on 2 ranks in run directory dir: exit 2 and one line on rank 0's stderr, which is
// returned (the caller frees it).
static char *refused_at_start(const char *what, const char *tag, const char *dir, char *const args[]) {
    int status = run_ranks(lab_bin(labs_dir, "ddp"), 2, tag, dir, args, NULL);
    char t[64];
    snprintf(t, sizeof t, "%s.r0", tag);
    char *err = captured(t, "err");
    EXPECT(status == 2 && count_lines(err) == 1, "path (%s): exit 2 and one line (exit %d): %s", what, status,
           one_line(err));
    return err;
}

static void long_paths(void) {
    static char ck[8192], run_dir[8192], ck2[8300], manifest[8400];
    char *bin = (char *)lab_bin(labs_dir, "ddp"), dirs[4][600];
    const char *names[] = {"long_ckpt_save", "long_ckpt_resume", "long_run_resume", "path_refused"};
    for (int i = 0; i < 4; i++) snprintf(dirs[i], sizeof dirs[i], "%s/%s", tmp, names[i]);
    // A --ckpt of 1500 characters (the old buffers held 1023): saved there, and resumed.
    long_path(ck, sizeof ck, "long_ckpt", 1500, 200);
    char *a_save[] = {"--steps", "3", "--save-every", "3", "--ckpt", ck, NULL};
    char *a_res[] = {"--steps", "4", "--resume", ck, NULL};
    int s1 = run_ranks(bin, 2, "long_ckpt_save", dirs[0], a_save, NULL);
    snprintf(manifest, sizeof manifest, "%s/manifest.json", ck);
    int saved = access(manifest, R_OK) == 0;
    int s2 = run_ranks(bin, 2, "long_ckpt_resume", dirs[1], a_res, NULL);
    char *err = captured("long_ckpt_resume.r0", "err");
    // Proves: the checkpoint is where --ckpt said, whole. Broken: the old 1024-byte buffer
    // saved it under a name cut at 1023 characters, and the resume found no manifest.
    EXPECT(s1 == 0 && saved && s2 == 0, "path: --ckpt of 1500 characters: saved there and resumed (exit %d, %d): %s", s1,
           s2, one_line(err));
    free(err);

    // A run directory of 1422 characters, its checkpoints in <run>/checkpoints.
    long_path(run_dir, sizeof run_dir, "long_run", 1422, 250);
    snprintf(ck2, sizeof ck2, "%s/checkpoints", run_dir);
    char *a_save2[] = {"--steps", "3", "--save-every", "3", NULL};
    char *a_res2[] = {"--steps", "4", "--resume", ck2, NULL};
    s1 = run_ranks(bin, 2, "long_run_save", run_dir, a_save2, NULL);
    snprintf(manifest, sizeof manifest, "%s/manifest.json", ck2);
    saved = access(manifest, R_OK) == 0;
    s2 = run_ranks(bin, 2, "long_run_resume", dirs[2], a_res2, NULL);
    EXPECT(s1 == 0 && saved && s2 == 0,
           "path: a run directory of 1422 characters: its checkpoints/ saved inside it and resumed (exit %d, %d)", s1, s2);

    // Too long for the system: refused before anything is written, the length named.
    long_path(ck, sizeof ck, "too_long", 4100, 200);
    char *a_long[] = {"--save-every", "3", "--ckpt", ck, NULL};
    char *e1 = refused_at_start("--ckpt of 4100 characters", "path_too_long", dirs[3], a_long);
    // Proves: a path the system cannot take is refused up front, its length named. Broken
    // (the old buffers): cut to 1023 characters, saved under another name, exit 0.
    EXPECT(strstr(e1, "--ckpt") && strstr(e1, "4100 characters") && strstr(e1, "PATH_MAX"),
           "path: --ckpt of 4100 characters: the message names the option, the length and PATH_MAX: %s", one_line(e1));
    free(e1);
    // 4040 characters: within PATH_MAX, but a checkpoint's files inside (59 characters more)
    // would pass it: refused up front, nothing created. Broken (no such check): the run
    // trained, made the folder and died writing the first file into it.
    long_path(ck, sizeof ck, "mid_long", 4040, 200);
    char first[600];
    snprintf(first, sizeof first, "%s/mid_long", tmp);
    char *e4 = refused_at_start("--ckpt of 4040 characters", "path_mid_long", dirs[3], a_long);
    EXPECT(strstr(e4, "--ckpt") && strstr(e4, "4040 characters") && access(first, F_OK) != 0,
           "path: --ckpt of 4040 characters: refused naming the length, no folder made: %s", one_line(e4));
    free(e4);
    snprintf(ck, sizeof ck, "%s/", tmp);
    memset(ck + strlen(ck), 'n', 300);
    ck[strlen(tmp) + 1 + 300] = 0;
    char *e2 = refused_at_start("--ckpt with a name of 300 characters", "name_too_long", dirs[3], a_long);
    EXPECT(strstr(e2, "--ckpt") && strstr(e2, "300 characters") && strstr(e2, "NAME_MAX"),
           "path: a folder name of 300 characters: the message names the length and NAME_MAX: %s", one_line(e2));
    free(e2);
    // A run directory whose checkpoints/ would pass PATH_MAX (4040 + "/checkpoints" + a file).
    long_path(run_dir, sizeof run_dir, "long_run_max", 4040, 200);
    char *a_run[] = {"--save-every", "3", NULL};
    char *e3 = refused_at_start("--run-dir of 4040 characters, saving into it", "run_too_long", run_dir, a_run);
    EXPECT(strstr(e3, "--run-dir"), "path: the refusal of a run directory too long names --run-dir: %s", one_line(e3));
    free(e3);
}

// ---------------------------------------------------------------------------------------
// 5. Bad options; and the sanitized labs_dir through a save and a resharded resume

static void bad_options(void) {
    char missing[512];
    snprintf(missing, sizeof missing, "%s/no_such_dir", tmp);
    char *a1[] = {"--resume", missing, NULL};
    char *a2[] = {"--save-every", "0", NULL};
    char *a3[] = {"--save-every", "-2", NULL};
    char *a4[] = {"--ckpt", missing, NULL};
    char good[512];
    snprintf(good, sizeof good, "%s/ck_good", tmp);
    char *a5[] = {"--resume", good, "--steps", "3", NULL};
    exits_2_with_one_line(lab_bin(labs_dir, "ddp"), 2, a1, "--resume of a missing directory", "bad_resume");
    exits_2_with_one_line(lab_bin(labs_dir, "ddp"), 2, a2, "--save-every 0", "bad_every0");
    exits_2_with_one_line(lab_bin(labs_dir, "ddp"), 2, a3, "--save-every -2", "bad_every_neg");
    exits_2_with_one_line(lab_bin(labs_dir, "ddp"), 2, a4, "--ckpt without --save-every", "bad_ckpt");
    exits_2_with_one_line(lab_bin(labs_dir, "ddp"), 2, a5, "--steps not past the checkpoint's step", "bad_steps");
}

static void sanitized(void) {
    static Run s1, s2;
    char ck[512];
    snprintf(ck, sizeof ck, "%s/ck_san", tmp);
    char *a1[] = {"--stage", "3", "--mixed", "--steps", "2", "--save-every", "1", "--ckpt", ck, NULL};
    char *a2[] = {"--steps", "3", "--resume", ck, NULL};
    go(&s1, san_labs, "zero", "san_save", 2, a1);
    go(&s2, san_labs, "tp", "san_resume", 2, a2);
    EXPECT(s1.status == 0 && s2.status == 0 && s2.r[0].n == 1,
           "sanitized: zero --stage 3 --mixed saves twice, tp resumes it at step 3: both exit 0 under ASan/UBSan "
           "(status %d, %d)", s1.status, s2.status);
}

// ---------------------------------------------------------------------------------------
// 6. One job per checkpoint folder (common/runfiles/joblock.h)

// `shardlab run ddp -n 2 --ui none` with args (NULL-ended) into tmp/<tag>, started: its pid.
static pid_t start_ddp(const char *tag, char *const args[]) {
    char dir[512], *argv[32] = {(char *)launcher, "run", "ddp", "-n", "2", "--ui", "none", "--run-dir", dir};
    snprintf(dir, sizeof dir, "%s/%s", tmp, tag);
    int a = 9;
    for (int i = 0; args[i] && a < 31; i++) argv[a++] = args[i];
    argv[a] = NULL;
    return spawn_env(argv, tag, NULL);
}

// Waits (up to 30 s) until `path` exists.
static int wait_for(const char *path) {
    for (double t0 = now_s(); now_s() - t0 < 30; usleep(5000))
        if (access(path, F_OK) == 0) return 1;
    return 0;
}

// A job that saves into a folder holds it from its start to its end: a second job that would
// save there is refused at start (exit 1), naming the folder and the job that holds it, and so
// is one that would resume from it (it could read a save half made, or lose it to the saver's
// clean-up). Jobs that only resume from a folder share it: two at once both run, and one that
// would save there is refused while they do. Broken on purpose: joblock_take granting every
// lock (the second saver ran and replaced the first's saves): caught.
static void one_job_per_folder(void) {
    char ck[512], manifest[600], other[512];
    snprintf(ck, sizeof ck, "%s/ck_held", tmp);
    snprintf(other, sizeof other, "%s/ck_other", tmp);
    snprintf(manifest, sizeof manifest, "%s/manifest.json", ck);
    char *a_hold[] = {"--steps", "3000", "--save-every", "5", "--ckpt", ck, NULL};
    pid_t holder = start_ddp("held_saver", a_hold);
    int saved = wait_for(manifest);  // (its first save: a folder to resume from, below)
    double t0 = now_s();
    char *a_save[] = {"--steps", "6", "--save-every", "3", "--ckpt", ck, NULL};
    int status = wait_status(start_ddp("held_second", a_save));
    double secs = now_s() - t0;
    char *err = captured("held_second", "err");
    // Proves: a second saver is refused at start, in seconds, with the folder and the holder named.
    EXPECT(saved && status == 1 && strstr(err, "the checkpoint folder") && strstr(err, ck) &&
               strstr(err, "in use by another job") && strstr(err, "--steps 3000 --save-every 5") && secs < 10,
           "a second job saving into a folder a job saves into: refused (exit %d in %.1f s), naming both: %s", status, secs,
           one_line(err));
    free(err);
    char *a_read[] = {"--steps", "2000", "--resume", ck, "--save-every", "1000", "--ckpt", other, NULL};
    status = wait_status(start_ddp("held_reader", a_read));
    err = captured("held_reader", "err");
    // Proves: a job resuming from a folder another job saves into is refused too.
    EXPECT(status == 1 && strstr(err, ck) && strstr(err, "in use by another job"),
           "a job resuming from a folder a job saves into: refused (exit %d): %s", status, one_line(err));
    free(err);
    kill(holder, SIGTERM);  // (the launcher stops its ranks; the lock goes with them)
    wait_status(holder);

    // Two readers at once; a saver meanwhile.
    pid_t reader = start_ddp("shared_reader", a_read);
    char events[600];
    snprintf(events, sizeof events, "%s/shared_reader/rank-0.jsonl", tmp);
    wait_for(events);
    usleep(300 * 1000);
    // The second reader runs a few steps past the folder's last save, wherever the holder got
    // to before it was stopped (a fixed --steps 20 was behind it on a fast machine: exit 2).
    char *text = read_file(manifest, NULL), *at = text ? strstr(text, "\"step\":") : NULL, steps2[32];
    snprintf(steps2, sizeof steps2, "%ld", (at ? strtol(at + 7, NULL, 10) : 0) + 10);
    free(text);
    char *a_read2[] = {"--steps", steps2, "--resume", ck, NULL};
    int status2 = wait_status(start_ddp("shared_reader2", a_read2));
    status = wait_status(start_ddp("shared_saver", a_save));
    err = captured("shared_saver", "err");
    kill(reader, SIGTERM);
    int status1 = wait_status(reader);
    // Proves: jobs that only read a folder share it (the second ran while the first read),
    // and a saver is refused while they read, told so.
    EXPECT(status2 == 0 && status1 == 143, "two jobs resuming from one folder at once both run (exit %d, %d)", status2,
           status1);
    EXPECT(status == 1 && strstr(err, ck) && strstr(err, "starts from its checkpoint"),
           "a job saving into a folder other jobs resume from: refused (exit %d): %s", status, one_line(err));
    free(err);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: test_dcp LABS_DIR SHARDLAB SAN_LABS_DIR\n");
        return 2;
    }
    labs_dir = argv[1], launcher = argv[2], san_labs = argv[3];
    snprintf(tmp, sizeof tmp, "/tmp/shardlab-test-dcp-XXXXXX");
    if (!mkdtemp(tmp)) return 1;

    char *none[] = {NULL};
    char *st1[] = {"--stage", "1", NULL}, *st3m[] = {"--stage", "3", "--mixed", NULL};
    char *st2o[] = {"--stage", "2", "--offload", NULL}, *pre[] = {"--prefetch", NULL};
    char *sp[] = {"--sp", NULL}, *pp[] = {"--schedule", "1f1b", NULL};
    char *ck[] = {"--policy", "sqrt", "--layers", "4", "--compare", "0", NULL};
    char *sh[] = {"--strategy", "dispatch", "--items", "20", NULL};  // 2 steps an epoch: resumed at an epoch's middle
    resumes_bitwise("single", 1, none);
    resumes_bitwise("ddp", 2, none);
    resumes_bitwise("zero", 2, st1);
    resumes_bitwise("zero", 2, st3m);
    resumes_bitwise("zero", 2, st2o);
    resumes_bitwise("fsdp", 2, pre);
    resumes_bitwise("pp", 2, pp);
    resumes_bitwise("tp", 2, sp);
    resumes_bitwise("ckpt", 2, ck);
    resumes_bitwise("shard", 2, sh);
    char *cpz[] = {"--kv", "all-gather", NULL};
    resumes_bitwise("cp", 2, none);
    resumes_bitwise("cp", 3, cpz);
    reshards();
    crash_trials();
    refuses();
    refuses_other_saves();
    readback_race(0);
    readback_race(1);
    refuses_bad_values();
    refuses_bad_save();
    long_paths();
    bad_options();
    sanitized();
    one_job_per_folder();

    tmp_finish(test_failed);
    return test_done();
}
