// dcp.c — see dcp.h.
//
// Two parts here: the state a lab lists; saving (files, then the manifest as the commit
// point). Loading is in dcp_open.c (every check first) and dcp_load.c (then each rank reads
// the ranges it needs).
#include "dcp.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
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

// ---------------------------------------------------------------------------------------
// 2. Saving

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
    if (a->ckpt) snprintf(s->dir, sizeof s->dir, "%s", a->ckpt);
    else if (a->resume) snprintf(s->dir, sizeof s->dir, "%s", a->resume);
    else snprintf(s->dir, sizeof s->dir, "%s/checkpoints", run_dir);
    snprintf(s->replay_dir, sizeof s->replay_dir, "%s/replay", run_dir);
    if (a->replay_every > 0 && log && (!world || world->rank == 0))
        runlog_printf(log, "replay points: the training state every %d steps kept in %s, for shardlab grade to restart "
                           "its reference from (--replay-every 0: none)\n", a->replay_every, s->replay_dir);
    snprintf(s->config, sizeof s->config, "%s", config ? config : "{}");
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

static void step_dir_name(char *out, size_t n, int64_t step) { snprintf(out, n, "step-%08lld", (long long)step); }

void dcp_shard_name(char *out, size_t n, int64_t step, int rank, int world) {
    char sd[32];
    step_dir_name(sd, sizeof sd, step);
    snprintf(out, n, "%s/rank-%d-of-%d.safetensors", sd, rank, world);
}

// The manifest's text, every field but the checksum (which the caller appends).
static void manifest_body(StrBuf *m, const DcpSaver *s, int64_t step, int world, const StrBuf *files) {
    const TrainArgs *a = s->args;
    time_t now = time(NULL);
    char when[32];
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    sb_printf(m, "{\"format\":\"%s\",\"lab\":", DCP_FORMAT);
    sb_json_string(m, s->lab);
    sb_printf(m, ",\"step\":%lld,\"world\":%d,\"saved_at\":\"%s\",", (long long)step, world, when);
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
        char tail, path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (strncmp(e->d_name, DCP_MANIFEST ".tmp.", strlen(DCP_MANIFEST) + 5) == 0) {
            remove(path);
            continue;
        }
        if (sscanf(e->d_name, "step-%lld%c", &k, &tail) != 1 || strcmp(e->d_name, keep) == 0) continue;
        DIR *s = opendir(path);
        if (!s) continue;
        struct dirent *f;
        while ((f = readdir(s))) {
            if (strncmp(f->d_name, "rank-", 5) != 0) continue;
            char file[3072];
            snprintf(file, sizeof file, "%s/%s", path, f->d_name);
            remove(file);
        }
        closedir(s);
        rmdir(path);
    }
    closedir(d);
}

static void write_manifest(const char *dir, const StrBuf *body) {
    uint64_t h = fnv1a64(body->data, body->len, FNV1A64_INIT);
    char path[1200], tmp[1300];
    snprintf(path, sizeof path, "%s/%s", dir, DCP_MANIFEST);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
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
    char sd[32], sub[1100], name[128], path[1300];
    step_dir_name(sd, sizeof sd, step);
    snprintf(sub, sizeof sub, "%s/%s", dir, sd);
    runlog_make_dirs(sub);  // every rank: mkdir -p is idempotent

    // This rank's file: its pieces copied to the host, one 1-D tensor each.
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
    }
    char meta[256], err[1024];
    snprintf(meta, sizeof meta, "{\"format\":\"%s\",\"rank\":\"%d\",\"world\":\"%d\",\"step\":\"%lld\",\"lab\":\"%s\"}",
             DCP_FORMAT, rank, world, (long long)step, s->lab);
    dcp_shard_name(name, sizeof name, step, rank, world);
    snprintf(path, sizeof path, "%s/%s", dir, name);
    test_pause();
    if (safetensors_save(path, t, state->n, meta, err, sizeof err) != 0)
        die("check that the checkpoint directory is writable and the disk not full", "checkpoint: %s", err);
    fsync_dir(sub);
    for (int i = 0; i < state->n; i++) free(t[i].data);
    free(t);
    test_pause();

    // Every rank's size and checksum, so that rank 0 can write them into the manifest. The
    // all-reduce is also the barrier: when it returns, every file is in place.
    uint64_t *bytes = calloc_check((size_t)world, sizeof *bytes), *fnv = calloc_check((size_t)world, sizeof *fnv);
    fnv[rank] = dcp_file_fnv(path, &bytes[rank]);
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
        manifest_body(&body, s, step, world, &files);
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
        char dir[1200], sd[32];
        step_dir_name(sd, sizeof sd, step);
        snprintf(dir, sizeof dir, "%s/%s", s->replay_dir, sd);
        save_to(s, dir, 0, step, state);
    }
}
