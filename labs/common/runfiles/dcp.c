// dcp.c — see dcp.h.
//
// Three parts here: the state a lab lists, and what must hold of it; paths; saving (files,
// then the manifest as the commit point). Loading is in dcp_open.c (every check first) and
// dcp_load.c (then each rank reads the ranges it needs).
#include "dcp.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "common/harness/check.h"
#include "common/model/rng.h"
#include "dcp_internal.h"
#include "safetensors.h"

static const char *KIND_NAMES[DCP_KINDS] = {"params", "m", "v"};

const char *dcp_kind_name(DcpKind k) { return k >= 0 && k < DCP_KINDS ? KIND_NAMES[k] : "?"; }

// ---------------------------------------------------------------------------------------
// 1. The state a lab holds

void dcp_state_add(DcpState *s, DcpKind kind, int unit, size_t offset, size_t count, float *data, int host) {
    if (count == 0) return;  // an empty shard (more ranks than elements) holds nothing to save
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->p = realloc_check(s->p, (size_t)s->cap * sizeof *s->p);
    }
    s->p[s->n++] = (DcpPiece){kind, unit, offset, count, data, host};
}

void dcp_state_free(DcpState *s) {
    free(s->p);
    memset(s, 0, sizeof *s);
}

void dcp_add_units(DcpState *s, const GptConfig *c, float *const *params, float *const *m, float *const *v, int part,
                   int parts) {
    for (int u = 0; u < gpt_layer_count(c); u++) {
        if (!params[u]) continue;
        size_t off, len;
        dist_chunk(gpt_layer_size(c, u), parts, part, &off, &len);
        dcp_state_add(s, DCP_PARAMS, u, off, len, params[u] + off, 0);
        dcp_state_add(s, DCP_M, u, off, len, m[u] + off, 0);
        dcp_state_add(s, DCP_V, u, off, len, v[u] + off, 0);
    }
}

// A state whose numbers are not numbers cannot be trained on: the first step would turn
// every weight NaN. And v is a running mean of squared gradients, so a negative one was never
// computed by AdamW: the file lies, whatever its checksums say.
int dcp_check_values(const GptConfig *c, const DcpPiece *p, const float *x, char *why, size_t n) {
    size_t i = 0;
    while (i < p->count && isfinite(x[i]) && !(p->kind == DCP_V && x[i] < 0)) i++;
    if (i == p->count) return 0;
    size_t e = p->offset + i;  // in the unit
    GptTensor t[GPT_MAX_TENSORS];
    int k = gpt_layer_tensors(c, p->unit, t), j = 0;
    while (j + 1 < k && e >= t[j].offset + t[j].count) j++;
    char name[64], at[48];
    gpt_tensor_name(name, sizeof name, c, p->unit, &t[j]);
    size_t in = e - t[j].offset;
    if (t[j].ndim == 2) snprintf(at, sizeof at, "[%zu, %zu]", in / (size_t)t[j].shape[1], in % (size_t)t[j].shape[1]);
    else snprintf(at, sizeof at, "[%zu]", in);
    snprintf(why, n, "%s of %s%s (element %zu of unit %d, tensor %s.%d.%zu) is %g: %s", dcp_kind_name(p->kind), name, at,
             e, p->unit, dcp_kind_name(p->kind), p->unit, p->offset, (double)x[i],
             isfinite(x[i]) ? "a second moment is a mean of squares, never negative" : "the state must be finite");
    return -1;
}

// ---------------------------------------------------------------------------------------
// 2. Paths

void dcp_path(char *out, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(out, PATH_MAX, fmt, ap);
    va_end(ap);
    if (len < 0 || len >= PATH_MAX)
        die("this is a bug in shardlab: dcp_check_paths should have refused the directory",
            "a checkpoint path of %d characters is over PATH_MAX (%d): not cut, refused", len, PATH_MAX);
}

// 0 if every path a save writes under dir (dir, then `tail` at most) fits PATH_MAX, each of
// dir's components NAME_MAX, and its step folder what runlog_make_dirs() can make (it holds a
// path as a RunLog's dir); else -1 and why, naming the length.
static int check_dir(const char *dir, size_t tail, char *why, size_t n) {
    size_t len = strlen(dir), step = strlen("/step-99999999"), folder = sizeof ((RunLog *)0)->dir - 1;
    if (len + tail >= PATH_MAX)
        return snprintf(why, n, "the path is %zu characters, and a checkpoint's files add up to %zu more: past this "
                        "system's PATH_MAX of %d; choose a shorter one", len, tail, PATH_MAX), -1;
    if (len + step > folder)
        return snprintf(why, n, "the path is %zu characters, and its step folder (%zu more) would pass the %zu that "
                        "shardlab makes folders of; choose a shorter one", len, step, folder), -1;
    for (const char *p = dir; *p;) {
        size_t c = strcspn(p, "/");
        if (c > NAME_MAX)
            return snprintf(why, n, "a name in it ('%.24s...') is %zu characters, past this system's NAME_MAX of %d", p,
                            c, NAME_MAX), -1;
        p += c + (p[c] == '/');
    }
    return 0;
}

void dcp_check_paths(const TrainArgs *a, const char *prog) {
    char why[300], dir[PATH_MAX + 64];
    size_t tail = strlen(DCP_PATH_TAIL);
    if (a->ckpt && check_dir(a->ckpt, tail, why, sizeof why) != 0) usage_error(prog, "--ckpt: %s", why);
    if (a->resume && check_dir(a->resume, tail, why, sizeof why) != 0) usage_error(prog, "--resume: %s", why);
    const char *run = a->run_dir && *a->run_dir ? a->run_dir : getenv("SHARDLAB_RUN_DIR");
    if (!run || !*run) return;  // runs/<lab>-<time>-<hex>: short
    // Its checkpoints/ when neither of the above is where they go; its replay/step-<s>/ always.
    snprintf(dir, sizeof dir, "%s/checkpoints", run);
    if (a->save_every > 0 && !a->ckpt && !a->resume && check_dir(dir, tail, why, sizeof why) != 0)
        usage_error(prog, "--run-dir: its checkpoints/ folder: %s", why);
    snprintf(dir, sizeof dir, "%s/replay/step-99999999", run);
    if (a->replay_every != 0 && check_dir(dir, tail, why, sizeof why) != 0)
        usage_error(prog, "--run-dir: its replay/ folder: %s", why);
}

// ---------------------------------------------------------------------------------------
// 3. Saving

uint64_t dcp_file_fnv(const char *path, uint64_t *bytes) {
    FILE *f = fopen(path, "rb");
    if (!f) return *bytes = 0, 0;
    uint64_t h = FNV1A64_INIT, n = 0;
    unsigned char buf[1 << 16];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        h = fnv1a64(buf, got, h);
        n += got;
    }
    fclose(f);
    *bytes = n;
    return h;
}

static void fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) return;  // the rename is still atomic; only its durability is left to the OS
    fsync(fd);
    close(fd);
}

// SHARDLAB_TEST_SLOW_SAVE=MS: sleep MS milliseconds at each stage of a save, so that the
// crash tests' kill -9 lands inside one.
static void test_pause(void) {
    const char *ms = getenv("SHARDLAB_TEST_SLOW_SAVE");
    if (!ms) return;
    long v = atol(ms);
    if (v <= 0) return;
    struct timespec ts = {v / 1000, (v % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void dcp_saver_init(DcpSaver *s, const char *lab, const TrainArgs *a, const GptConfig *c, const Device *dev,
                    DistGroup *world, RunLog *log, const char *run_dir, const char *config) {
    memset(s, 0, sizeof *s);
    s->lab = lab;
    s->args = a;
    s->cfg = *c;
    s->dev = dev;
    s->world = world;
    s->log = log;
    if (a->ckpt) dcp_path(s->dir, "%s", a->ckpt);
    else if (a->resume) dcp_path(s->dir, "%s", a->resume);
    else dcp_path(s->dir, "%s/checkpoints", run_dir);
    dcp_path(s->replay_dir, "%s/replay", run_dir);
    dcp_path(s->run, "%s", run_dir);
    // The run directory may come from where the options did not say (SHARDLAB_RUN_DIR, a
    // launcher): its folders are checked here, before the first step.
    char why[300], replay_step[PATH_MAX + 16];
    size_t tail = strlen(DCP_PATH_TAIL);
    snprintf(replay_step, sizeof replay_step, "%s/step-99999999", s->replay_dir);
    if ((a->save_every > 0 && check_dir(s->dir, tail, why, sizeof why) != 0) ||
        (a->replay_every > 0 && check_dir(replay_step, tail, why, sizeof why) != 0))
        die("give --ckpt or --run-dir a shorter path", "checkpoints under %.60s...: %s", run_dir, why);
    if (a->replay_every > 0 && log && (!world || world->rank == 0))
        runlog_printf(log, "replay points: the training state every %d steps kept in %s, for shardlab grade to restart "
                           "its reference from (--replay-every 0: none)\n", a->replay_every, s->replay_dir);
    s->config = config ? config : "{}";
    s->sampler_name = "hash(seed, step, index)";
}

static int checkpoint_due(const TrainArgs *a, int64_t step) {
    return a->save_every > 0 && (step % a->save_every == 0 || step == a->steps);
}

static int replay_due(const TrainArgs *a, int64_t step) {
    return a->replay_every > 0 && step % a->replay_every == 0 && step < a->steps;
}

int dcp_due(const TrainArgs *a, int64_t step) { return checkpoint_due(a, step) || replay_due(a, step); }

// Each rank's (size, checksum) to every rank, exactly: floats hold integers below 2^24, so
// the numbers travel as 16-bit digits, each rank filling its own row of a zeroed table that
// an all-reduce then sums (one non-zero term per entry: no rounding).
#define DIGITS 8  // 4 for the size, 4 for the checksum
static void share_files(DistGroup *g, int rank, int world, uint64_t *bytes, uint64_t *fnv) {
    float *t = calloc_check((size_t)world * DIGITS, sizeof *t);
    for (int d = 0; d < 4; d++) {
        t[rank * DIGITS + d] = (float)((bytes[rank] >> (16 * d)) & 0xffff);
        t[rank * DIGITS + 4 + d] = (float)((fnv[rank] >> (16 * d)) & 0xffff);
    }
    if (g) dist_all_reduce(g, t, (size_t)world * DIGITS);
    for (int r = 0; r < world; r++) {
        bytes[r] = fnv[r] = 0;
        for (int d = 0; d < 4; d++) {
            bytes[r] |= (uint64_t)t[r * DIGITS + d] << (16 * d);
            fnv[r] |= (uint64_t)t[r * DIGITS + 4 + d] << (16 * d);
        }
    }
    free(t);
}

// This save's identity: 64 random bits on rank 0, every rank getting them through a
// broadcast (16-bit digits in floats, exact). The kernel's randomness, else the clock and the
// process id: two saves must not draw the same, however alike their jobs are.
static uint64_t share_save_id(DistGroup *g, int rank) {
    uint64_t id = 0;
    if (rank == 0 && getrandom(&id, sizeof id, 0) != (ssize_t)sizeof id)
        id = rng_hash((uint64_t)runlog_now_us(), (uint64_t)getpid(), (uint64_t)clock());
    float t[4];
    for (int d = 0; d < 4; d++) t[d] = (float)((id >> (16 * d)) & 0xffff);
    if (g) dist_broadcast(g, t, 4, 0);
    id = 0;
    for (int d = 0; d < 4; d++) id |= (uint64_t)t[d] << (16 * d);
    return id;
}

static void step_dir_name(char *out, size_t n, int64_t step) { snprintf(out, n, "step-%08lld", (long long)step); }

void dcp_shard_name(char *out, size_t n, int64_t step, int rank, int world) {
    char sd[32];
    step_dir_name(sd, sizeof sd, step);
    snprintf(out, n, "%s/rank-%d-of-%d.safetensors", sd, rank, world);
}

// The manifest's text, every field but the checksum (which the caller appends).
static void manifest_body(StrBuf *m, const DcpSaver *s, int64_t step, int world, const char *save,
                          const StrBuf *files) {
    const TrainArgs *a = s->args;
    time_t now = time(NULL);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    sb_printf(m, "{\"format\":\"%s\",\"lab\":", DCP_FORMAT);
    sb_json_string(m, s->lab);
    sb_printf(m, ",\"step\":%lld,\"world\":%d,\"saved_at\":\"%s\",", (long long)step, world, when);
    sb_printf(m, "\n\"save\":\"%s\",\"run\":", save);
    sb_json_string(m, s->run);
    sb_printf(m, ",");
    sb_printf(m, "\n\"model\":{\"vocab\":%d,\"seq\":%d,\"layers\":%d,\"dim\":%d,\"heads\":%d},", s->cfg.vocab,
              s->cfg.seq, s->cfg.layers, s->cfg.dim, s->cfg.heads);
    sb_printf(m, "\n\"units\":[");
    for (int u = 0; u < gpt_layer_count(&s->cfg); u++)
        sb_printf(m, "%s%zu", u ? "," : "", gpt_layer_size(&s->cfg, u));
    sb_printf(m, "],\"kinds\":[\"params\",\"m\",\"v\"],");
    sb_printf(m, "\n\"optimizer\":{\"name\":\"AdamW\",\"t\":%lld,\"lr\":%.9g,\"beta1\":0.9,\"beta2\":0.95,"
                 "\"eps\":1e-8,\"weight_decay\":%.9g,\"clip\":%.9g,\"schedule\":{\"shape\":",
              (long long)step, a->lr, a->weight_decay, a->clip);
    sb_json_string(m, a->lr_schedule);
    sb_printf(m, ",\"lr\":%.17g,\"lr_min\":%.17g,\"warmup\":%d,\"decay_steps\":%d,\"lr_at_step\":%.9g}},", a->lr,
              a->lr_min, a->warmup, a->decay_steps, train_lr(a, step));
    sb_printf(m, "\n\"sampler\":{\"name\":");
    sb_json_string(m, s->sampler_name);
    sb_printf(m, ",\"seed\":%llu,\"next_step\":%lld%s%s},", (unsigned long long)a->seed, (long long)step + 1, s->sampler[0] ? "," : "", s->sampler);
    sb_printf(m, "\n\"layout\":");
    sb_json_string(m, s->layout[0] ? s->layout : "replicas: each rank saves a 1/N chunk of every unit");
    sb_printf(m, ",\n\"config\":%s,\n\"files\":[", s->config);
    sb_append(m, files->data, files->len);
    sb_printf(m, "]");
}

// After a commit: remove what no manifest names any more, and only what a save writes: the
// step-* directories other than keep (older saves, or a save that was killed) with their
// rank-* files, and manifest temporaries a killed save left behind.
static void remove_stale(const char *dir, const char *keep) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        long long k;
        char tail, path[PATH_MAX];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path) continue;  // not ours
        if (strncmp(e->d_name, DCP_MANIFEST ".tmp.", strlen(DCP_MANIFEST) + 5) == 0) {
            remove(path);
            continue;
        }
        if (sscanf(e->d_name, "step-%lld%c", &k, &tail) != 1 || strcmp(e->d_name, keep) == 0) continue;
        DIR *s = opendir(path);
        if (!s) continue;
        struct dirent *f;
        while ((f = readdir(s))) {
            char file[PATH_MAX];
            if (strncmp(f->d_name, "rank-", 5) != 0 ||
                (size_t)snprintf(file, sizeof file, "%s/%s", path, f->d_name) >= sizeof file)
                continue;
            remove(file);
        }
        closedir(s);
        rmdir(path);
    }
    closedir(d);
}

static void write_manifest(const char *dir, const StrBuf *body) {
    uint64_t h = fnv1a64(body->data, body->len, FNV1A64_INIT);
    char path[PATH_MAX], tmp[PATH_MAX];
    dcp_path(path, "%s/%s", dir, DCP_MANIFEST);
    dcp_path(tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) die("check that the checkpoint directory is writable", "cannot create '%s': %s", tmp, strerror(errno));
    int bad = fwrite(body->data, 1, body->len, f) != body->len;
    bad |= fprintf(f, DCP_CHECKSUM_FIELD "%016llx\"}\n", (unsigned long long)h) < 0;
    if (bad || fflush(f) != 0 || fsync(fileno(f)) != 0) {
        fclose(f);
        remove(tmp);
        die("check the disk (full?)", "write error on '%s': %s", tmp, strerror(errno));
    }
    fclose(f);
    test_pause();  // a kill here leaves the old manifest in place and a stray .tmp
    if (rename(tmp, path) != 0) {
        remove(tmp);
        die("check the checkpoint directory", "cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
    }
    fsync_dir(dir);
}

// One save of the state into dir (a checkpoint directory: its manifest and step-* files).
// say: a line on rank 0 once saved (checkpoints; replay points were announced at the start).
static void save_to(DcpSaver *s, const char *dir, int say, int64_t step, const DcpState *state) {
    int64_t t0 = runlog_now_us();
    int rank = s->world ? s->world->rank : 0, world = s->world ? s->world->size : 1;
    char sd[32], sub[PATH_MAX], name[128], path[PATH_MAX], save[17];
    step_dir_name(sd, sizeof sd, step);
    dcp_path(sub, "%s/%s", dir, sd);
    runlog_make_dirs(sub);  // every rank: mkdir -p is idempotent
    snprintf(save, sizeof save, "%016llx", (unsigned long long)share_save_id(s->world, rank));

    // This rank's file: its pieces copied to the host, one 1-D tensor each, every value
    // checked (a state that cannot be right never replaces the last checkpoint).
    StTensor *t = calloc_check((size_t)state->n + 1, sizeof *t);
    char (*names)[48] = calloc_check((size_t)state->n + 1, sizeof *names);
    uint64_t payload = 0;
    for (int i = 0; i < state->n; i++) {
        const DcpPiece *p = &state->p[i];
        snprintf(names[i], sizeof names[i], "%s.%d.%zu", dcp_kind_name(p->kind), p->unit, p->offset);
        t[i] = (StTensor){.name = names[i], .ndim = 1, .shape = {(int64_t)p->count}};
        t[i].data = malloc_check(p->count * sizeof(float));
        if (p->host) memcpy(t[i].data, p->data, p->count * sizeof(float));
        else device_to_host(s->dev, t[i].data, p->data, p->count * sizeof(float));
        payload += p->count * sizeof(float);
        char why[512];
        if (dcp_check_values(&s->cfg, p, t[i].data, why, sizeof why) != 0)
            die("the training diverged, or a kernel wrote bad values: the last good checkpoint in the directory is "
                "kept; resume from it (a lower --lr?)", "checkpoint: step %lld not saved: rank %d's %s", (long long)step,
                rank, why);
    }
    // Its metadata: what it is, and which save of which run.
    StrBuf meta;
    sb_init(&meta);
    sb_printf(&meta, "{\"format\":\"%s\",\"rank\":\"%d\",\"world\":\"%d\",\"step\":\"%lld\",\"lab\":", DCP_FORMAT,
              rank, world, (long long)step);
    sb_json_string(&meta, s->lab);
    sb_printf(&meta, ",\"save\":\"%s\",\"run\":", save);
    sb_json_string(&meta, s->run);
    sb_printf(&meta, "}");
    dcp_shard_name(name, sizeof name, step, rank, world);
    dcp_path(path, "%s/%s", dir, name);
    test_pause();
    char err[PATH_MAX + 512];
    StWritten w;
    if (safetensors_save_hashed(path, t, state->n, meta.data, &w, err, sizeof err) != 0)
        die("check that the checkpoint directory is writable and the disk not full", "checkpoint: %s", err);
    fsync_dir(sub);
    for (int i = 0; i < state->n; i++) free(t[i].data);
    free(t);
    sb_free(&meta);
    test_pause();

    // Every rank's size and checksum, so that rank 0 can write them into the manifest: of the
    // bytes this rank wrote. The all-reduce is also the barrier: when it returns, every file
    // is in place.
    uint64_t *bytes = calloc_check((size_t)world, sizeof *bytes), *fnv = calloc_check((size_t)world, sizeof *fnv);
    bytes[rank] = w.bytes;
    fnv[rank] = w.fnv1a64;
    share_files(s->world, rank, world, bytes, fnv);

    // The commit: rank 0 names every file, with its size and checksum, in the manifest. Which
    // pieces a file holds is in its own header (tensor "<kind>.<unit>.<offset>", shape
    // [count]), covered by its checksum; the reader checks that they tile every tensor.
    if (rank == 0) {
        StrBuf files, body;
        sb_init(&files);
        sb_init(&body);
        for (int r = 0; r < world; r++) {
            char fname[128];
            dcp_shard_name(fname, sizeof fname, step, r, world);
            sb_printf(&files, "%s\n {\"rank\":%d,\"path\":\"%s\",\"bytes\":%llu,\"fnv1a64\":\"%016llx\"}", r ? "," : "",
                      r, fname, (unsigned long long)bytes[r], (unsigned long long)fnv[r]);
        }
        manifest_body(&body, s, step, world, save, &files);
        write_manifest(dir, &body);
        remove_stale(dir, sd);
        sb_free(&files);
        sb_free(&body);
    }
    if (s->world) dist_barrier(s->world);  // nobody goes on before the commit
    free(bytes);
    free(fnv);
    free(names);
    s->bytes_written += (int64_t)payload;
    s->saves++;
    int64_t t1 = runlog_now_us();
    if (s->log) {
        runlog_span(s->log, step, "save", -1, -1, t0, t1, payload);
        if (rank == 0 && say)
            runlog_printf(s->log, "checkpoint: step %lld saved to %s (%d file(s)) in %.1f ms\n", (long long)step, dir,
                          world, (double)(t1 - t0) / 1000.0);
    }
}

void dcp_save(DcpSaver *s, int64_t step, const DcpState *state) {
    if (checkpoint_due(s->args, step)) save_to(s, s->dir, 1, step, state);
    if (replay_due(s->args, step)) {  // its own checkpoint directory: replay/step-<s>/
        char dir[PATH_MAX], sd[32];
        step_dir_name(sd, sizeof sd, step);
        dcp_path(dir, "%s/%s", s->replay_dir, sd);
        save_to(s, dir, 0, step, state);
    }
}
