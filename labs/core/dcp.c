// dcp.c — see dcp.h.
//
// Three parts: the state a lab lists; saving (files, then the manifest as the commit point);
// loading (every check first, then each rank reads the ranges it needs).
#include "dcp.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "safetensors.h"

#define DCP_FORMAT "shardlab-checkpoint/1"
#define DCP_CHECKSUM_FIELD ",\"checksum\":\""
#define DCP_MAX_MANIFEST_BYTES (64u << 20)

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

static uint64_t file_fnv(const char *path, uint64_t *bytes) {
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

static void shard_name(char *out, size_t n, int64_t step, int rank, int world) {
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
    shard_name(name, sizeof name, step, rank, world);
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
    fnv[rank] = file_fnv(path, &bytes[rank]);
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
            shard_name(fname, sizeof fname, step, r, world);
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

// ---------------------------------------------------------------------------------------
// 3. Loading: check everything, then read

typedef struct {
    const char *prog, *dir;
} Refuse;

// One line naming the checkpoint, the file and the check that failed; exit 2.
__attribute__((format(printf, 3, 4), noreturn)) static void refuse(const Refuse *r, const char *file,
                                                                   const char *fmt, ...) {
    char why[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    usage_error(r->prog, "--resume %s: checkpoint refused: %s: %s", r->dir, file, why);
}

static int json_uint(const JsonValue *v, double max, int64_t *out) {
    if (!v || v->type != JSON_NUMBER || v->number < 0 || v->number > max || v->number != (double)(int64_t)v->number)
        return 0;
    *out = (int64_t)v->number;
    return 1;
}

// The tensors of one shard file, from its header: "<kind>.<unit>.<offset>" of shape [count].
static void read_pieces(const Refuse *rf, DcpFile *f, const GptConfig *c, int world, int64_t step) {
    const char *name = strstr(f->file, "step-") ? strstr(f->file, "step-") : f->file;
    FILE *fp = fopen(f->file, "rb");
    unsigned char len8[8];
    if (!fp || fread(len8, 1, 8, fp) != 8) {
        if (fp) fclose(fp);
        refuse(rf, name, "cannot read its header length");
    }
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | len8[i];
    if (hl > f->bytes - 8 || hl > (64u << 20)) {
        fclose(fp);
        refuse(rf, name, "header length %llu does not fit the file (%llu bytes)", (unsigned long long)hl,
               (unsigned long long)f->bytes);
    }
    char *h = malloc_check((size_t)hl + 1);
    size_t got = fread(h, 1, (size_t)hl, fp);
    fclose(fp);
    char jerr[200];
    // (refuse() exits: nothing is freed before it, its message may quote the header)
    JsonValue *root = got == hl ? json_parse(h, (size_t)hl, jerr, sizeof jerr) : NULL;
    free(h);
    if (!root || root->type != JSON_OBJECT) refuse(rf, name, "the safetensors header is not a JSON object");
    const JsonValue *meta = json_get(root, "__metadata__");
    const JsonValue *mr = json_get(meta, "rank"), *mw = json_get(meta, "world"), *ms = json_get(meta, "step");
    char want[32];
    if (!mr || !mw || !ms || mr->type != JSON_STRING || mw->type != JSON_STRING || ms->type != JSON_STRING) {
        refuse(rf, name, "no rank, world and step in its metadata (not a shardlab checkpoint file)");
    }
    snprintf(want, sizeof want, "%d", world);
    if (strcmp(mw->string, want) != 0) {
        refuse(rf, name, "saved by a world of %s ranks, the manifest says %d", mw->string, world);
    }
    snprintf(want, sizeof want, "%d", f->rank);
    if (strcmp(mr->string, want) != 0) {
        refuse(rf, name, "saved by rank %s, the manifest lists it as rank %d's", mr->string, f->rank);
    }
    snprintf(want, sizeof want, "%lld", (long long)step);
    if (strcmp(ms->string, want) != 0) {
        refuse(rf, name, "saved at step %s, the manifest says step %lld", ms->string, (long long)step);
    }
    f->pieces = calloc_check(root->count + 1, sizeof *f->pieces);
    for (size_t i = 0; i < root->count; i++) {
        const char *key = root->keys[i];
        if (strcmp(key, "__metadata__") == 0) continue;
        char kind[16];
        int unit, used = 0;
        unsigned long long off;
        const JsonValue *shape = json_get(&root->items[i], "shape");
        int64_t count;
        int k = -1;
        if (sscanf(key, "%15[a-z].%d.%llu%n", kind, &unit, &off, &used) == 3 && key[used] == 0)
            for (int j = 0; j < DCP_KINDS; j++)
                if (strcmp(kind, KIND_NAMES[j]) == 0) k = j;
        if (k < 0 || unit < 0 || unit >= gpt_layer_count(c) || !shape || shape->type != JSON_ARRAY ||
            shape->count != 1 || !json_uint(&shape->items[0], 1e15, &count) || count == 0 ||
            off + (uint64_t)count > gpt_layer_size(c, unit)) {
            refuse(rf, name, "tensor '%s' is not a piece of this model's state", key);
        }
        f->pieces[f->npieces++] = (DcpPiece){(DcpKind)k, unit, (size_t)off, (size_t)count, NULL, 1};
    }
    json_free(root);
}

// Reads a file's pieces into host buffers (safetensors_load checks dtype, shapes and that the
// tensors tile the data). data[i] gets pieces[i]; free each.
static float **load_pieces(const Refuse *rf, const DcpFile *f) {
    StTensor *t = calloc_check((size_t)f->npieces + 1, sizeof *t);
    char (*names)[48] = calloc_check((size_t)f->npieces + 1, sizeof *names);
    float **data = calloc_check((size_t)f->npieces + 1, sizeof *data);
    for (int i = 0; i < f->npieces; i++) {
        const DcpPiece *p = &f->pieces[i];
        snprintf(names[i], sizeof names[i], "%s.%d.%zu", dcp_kind_name(p->kind), p->unit, p->offset);
        data[i] = malloc_check(p->count * sizeof(float));
        t[i] = (StTensor){.name = names[i], .ndim = 1, .shape = {(int64_t)p->count}, .data = data[i]};
    }
    char err[1024];
    if (safetensors_load(f->file, t, f->npieces, err, sizeof err) != 0) {
        refuse(rf, strstr(f->file, "step-") ? strstr(f->file, "step-") : f->file, "%s", err);
    }
    free(t);
    free(names);
    return data;
}

typedef struct {
    size_t offset, count;
} Span;

static int span_cmp(const void *a, const void *b) {
    const Span *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

// Every element of every tensor in exactly one piece.
static void check_tiling(const Refuse *rf, const Dcp *ck, const GptConfig *c) {
    int total = 0;
    for (int f = 0; f < ck->world; f++) total += ck->files[f].npieces;
    Span *s = malloc_check(((size_t)total + 1) * sizeof *s);
    for (int k = 0; k < DCP_KINDS; k++)
        for (int u = 0; u < gpt_layer_count(c); u++) {
            int n = 0;
            for (int f = 0; f < ck->world; f++)
                for (int i = 0; i < ck->files[f].npieces; i++) {
                    const DcpPiece *p = &ck->files[f].pieces[i];
                    if ((int)p->kind == k && p->unit == u) s[n++] = (Span){p->offset, p->count};
                }
            qsort(s, (size_t)n, sizeof *s, span_cmp);
            size_t next = 0, size = gpt_layer_size(c, u);
            for (int i = 0; i < n; i++) {
                if (s[i].offset != next)  // (refuse() exits: s is not freed)
                    refuse(rf, DCP_MANIFEST, "%s of unit %d: elements %zu..%zu are %s", KIND_NAMES[k], u,
                           s[i].offset < next ? s[i].offset : next, (s[i].offset < next ? next : s[i].offset) - 1,
                           s[i].offset < next ? "in two files" : "in no file");
                next += s[i].count;
            }
            if (next != size)
                refuse(rf, DCP_MANIFEST, "%s of unit %d: elements %zu..%zu are in no file", KIND_NAMES[k], u, next,
                       size - 1);
        }
    free(s);
}

// The learning-rate schedule goes on as it was saved: the settings this run left to their
// defaults (--lr-schedule, --warmup, --lr-min, --decay-steps) are the checkpoint's, so a resumed
// run takes the rates the saved one would have (and stays bitwise on it), even with another
// --steps. Settings given on the command line win.
static size_t restore_schedule(Dcp *ck, TrainArgs *a, size_t used) {
    const JsonValue *s = json_get(json_get(ck->manifest, "optimizer"), "schedule");
    const JsonValue *shape = json_get(s, "shape"), *warmup = json_get(s, "warmup"), *lr_min = json_get(s, "lr_min");
    if (!s) return used;  // saved before schedules: nothing to restore
    int64_t n;
    if (!(a->given & TRAIN_GIVEN_LR_SCHEDULE) && shape && shape->type == JSON_STRING)
        a->lr_schedule = !strcmp(shape->string, "constant") ? "constant" : "cosine";
    if (!(a->given & TRAIN_GIVEN_WARMUP) && json_uint(warmup, 1e7, &n)) a->warmup = (int)n;
    if (!(a->given & TRAIN_GIVEN_LR_MIN) && lr_min && lr_min->type == JSON_NUMBER && lr_min->number >= 0 &&
        lr_min->number <= a->lr)
        a->lr_min = lr_min->number;
    if (!(a->given & TRAIN_GIVEN_DECAY_STEPS) && json_uint(json_get(s, "decay_steps"), 1e7, &n) && n >= a->warmup)
        a->decay_steps = (int)n;
    if (used < sizeof ck->notes)
        used += (size_t)snprintf(ck->notes + used, sizeof ck->notes - used,
                                 "resume: learning rate: %s, warmup %d, to %.3g at step %d; step %lld's is %.6g\n",
                                 a->lr_schedule, a->warmup, a->lr_min, a->decay_steps, (long long)ck->step + 1,
                                 train_lr(a, ck->step + 1));
    return used < sizeof ck->notes ? used : sizeof ck->notes;
}

// Training settings that change what the next steps do; noted, not refused (going on with
// another learning rate is a legitimate thing to do).
static void note_differences(Dcp *ck, TrainArgs *a) {
    const JsonValue *cfg = json_get(ck->manifest, "config");
    struct {
        const char *key;
        double now;
    } nums[] = {{"batch", a->batch}, {"accum", a->accum}, {"lr", a->lr}, {"weight_decay", a->weight_decay},
                {"clip", a->clip}, {"seed", (double)a->seed}};
    size_t used = restore_schedule(ck, a, 0);
    for (size_t i = 0; i < sizeof nums / sizeof nums[0]; i++) {
        const JsonValue *v = json_get(cfg, nums[i].key);
        if (v && v->type == JSON_NUMBER && (float)v->number != (float)nums[i].now)
            used += (size_t)snprintf(ck->notes + used, sizeof ck->notes - used,
                                     "resume: note: --%s is %.9g, the checkpoint was saved with %.9g\n", nums[i].key,
                                     nums[i].now, v->number);
        if (used >= sizeof ck->notes) break;
    }
    const JsonValue *d = json_get(cfg, "data");
    if (used < sizeof ck->notes && d && d->type == JSON_STRING && strcmp(d->string, a->data) != 0)
        snprintf(ck->notes + used, sizeof ck->notes - used, "resume: note: --data is %s, the checkpoint was saved with %s\n",
                 a->data, d->string);
}

void dcp_open(Dcp *ck, const char *dir, const GptConfig *c, TrainArgs *a, const char *prog) {
    memset(ck, 0, sizeof *ck);
    Refuse rf = {prog, dir};
    snprintf(ck->dir, sizeof ck->dir, "%s", dir);
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, DCP_MANIFEST);

    // The manifest: whole, and its checksum first (a damaged manifest says nothing else).
    StrBuf manifest;
    sb_init(&manifest);
    int over = sb_read_file(&manifest, path, DCP_MAX_MANIFEST_BYTES);
    if (over < 0) refuse(&rf, DCP_MANIFEST, "cannot read it: %s", strerror(errno));
    if (over) refuse(&rf, DCP_MANIFEST, "over %u bytes", DCP_MAX_MANIFEST_BYTES);
    char *text = manifest.data;
    size_t len = manifest.len;
    char *field = NULL;
    for (char *p = strstr(text, DCP_CHECKSUM_FIELD); p; p = strstr(p + 1, DCP_CHECKSUM_FIELD)) field = p;
    unsigned long long said;
    char tail[4] = "";
    if (!field || sscanf(field + strlen(DCP_CHECKSUM_FIELD), "%16llx%3s", &said, tail) != 2 || strcmp(tail, "\"}") != 0)
        refuse(&rf, DCP_MANIFEST, "no checksum field at its end (truncated?)");
    uint64_t h = fnv1a64(text, (size_t)(field - text), FNV1A64_INIT);
    if (h != said)
        refuse(&rf, DCP_MANIFEST, "checksum mismatch: the file says %016llx, its bytes hash to %016llx (damaged or edited)",
               said, (unsigned long long)h);
    char jerr[200];
    ck->manifest = json_parse(text, len, jerr, sizeof jerr);
    sb_free(&manifest);
    if (!ck->manifest || ck->manifest->type != JSON_OBJECT) refuse(&rf, DCP_MANIFEST, "not a JSON object: %s", jerr);
    const JsonValue *m = ck->manifest, *fmt = json_get(m, "format"), *lab = json_get(m, "lab");
    if (!fmt || fmt->type != JSON_STRING || strcmp(fmt->string, DCP_FORMAT) != 0)
        refuse(&rf, DCP_MANIFEST, "format is not \"%s\"", DCP_FORMAT);
    snprintf(ck->lab, sizeof ck->lab, "%s", lab && lab->type == JSON_STRING ? lab->string : "?");

    // The model must be this run's, unit by unit.
    const JsonValue *model = json_get(m, "model");
    struct {
        const char *key, *option;
        int now;
    } shape[] = {{"vocab", "vocab", c->vocab}, {"seq", "--seq", c->seq}, {"layers", "--layers", c->layers},
                 {"dim", "--dim", c->dim}, {"heads", "--heads", c->heads}};
    for (size_t i = 0; i < sizeof shape / sizeof shape[0]; i++) {
        int64_t v;
        if (!json_uint(json_get(model, shape[i].key), 1e9, &v))
            refuse(&rf, DCP_MANIFEST, "model.%s missing or not a whole number", shape[i].key);
        if (v != shape[i].now)
            refuse(&rf, DCP_MANIFEST, "the checkpoint's model has %s %lld, this run has %s %d (a different model)",
                   shape[i].key, (long long)v, shape[i].option, shape[i].now);
    }
    const JsonValue *units = json_get(m, "units");
    if (!units || units->type != JSON_ARRAY || (int)units->count != gpt_layer_count(c))
        refuse(&rf, DCP_MANIFEST, "units: expected %d lengths", gpt_layer_count(c));
    for (int u = 0; u < gpt_layer_count(c); u++) {
        int64_t v;
        if (!json_uint(&units->items[u], 1e15, &v) || (size_t)v != gpt_layer_size(c, u))
            refuse(&rf, DCP_MANIFEST, "units[%d] is not %zu, the length of this model's unit %d", u,
                   gpt_layer_size(c, u), u);
    }
    int64_t step, world, t;
    if (!json_uint(json_get(m, "step"), 1e12, &step) || step < 1) refuse(&rf, DCP_MANIFEST, "step missing or < 1");
    if (!json_uint(json_get(json_get(m, "optimizer"), "t"), 1e12, &t) || t != step)
        refuse(&rf, DCP_MANIFEST, "optimizer.t is not the step, %lld", (long long)step);
    if (!json_uint(json_get(m, "world"), 4096, &world) || world < 1)
        refuse(&rf, DCP_MANIFEST, "world missing or out of range");
    ck->step = step;
    ck->world = (int)world;
    if (a->steps <= step)
        usage_error(prog, "--resume %s: the checkpoint is at step %lld; --steps %d leaves nothing to train (ask for more)",
                    dir, (long long)step, a->steps);

    // Its files: one per rank of the saving world, each the size and checksum the manifest
    // recorded, each holding what its header says.
    const JsonValue *files = json_get(m, "files");
    if (!files || files->type != JSON_ARRAY || (int64_t)files->count != world)
        refuse(&rf, DCP_MANIFEST, "world %lld but %zu file(s) listed: the saving world does not add up", (long long)world,
               files && files->type == JSON_ARRAY ? files->count : 0);
    ck->files = calloc_check((size_t)world, sizeof *ck->files);
    for (int r = 0; r < world; r++) {
        const JsonValue *fo = &files->items[r], *p = json_get(fo, "path"), *fnv = json_get(fo, "fnv1a64");
        int64_t rank, bytes;
        char want[128];
        shard_name(want, sizeof want, step, r, (int)world);
        if (!json_uint(json_get(fo, "rank"), 4096, &rank) || rank != r || !p || p->type != JSON_STRING ||
            strcmp(p->string, want) != 0 || !json_uint(json_get(fo, "bytes"), 1e15, &bytes) || !fnv ||
            fnv->type != JSON_STRING || strlen(fnv->string) != 16)
            refuse(&rf, DCP_MANIFEST, "files[%d] is not rank %d's file %s with bytes and fnv1a64", r, r, want);
        DcpFile *f = &ck->files[r];
        snprintf(f->file, sizeof f->file, "%s/%s", dir, want);
        f->rank = r;
        f->bytes = (uint64_t)bytes;
        f->fnv = strtoull(fnv->string, NULL, 16);
        struct stat st;
        if (stat(f->file, &st) != 0) refuse(&rf, want, "missing: %s", strerror(errno));
        if (!S_ISREG(st.st_mode)) refuse(&rf, want, "not a regular file");
        if ((uint64_t)st.st_size != f->bytes)
            refuse(&rf, want, "%lld bytes, the manifest says %llu (truncated or replaced)", (long long)st.st_size,
                   (unsigned long long)f->bytes);
        uint64_t n, got = file_fnv(f->file, &n);
        if (got != f->fnv || n != f->bytes)
            refuse(&rf, want, "checksum mismatch: fnv1a64 %016llx, the manifest says %016llx (damaged)",
                   (unsigned long long)got, (unsigned long long)f->fnv);
        read_pieces(&rf, f, c, (int)world, step);
        float **data = load_pieces(&rf, f);  // the full format check; the data is read again in dcp_load
        for (int i = 0; i < f->npieces; i++) free(data[i]);
        free(data);
    }
    check_tiling(&rf, ck, c);
    note_differences(ck, a);
}

void dcp_load(Dcp *ck, const Device *dev, const DcpState *state) {
    Refuse rf = {"resume", ck->dir};
    // Staging: each wanted piece in host memory, filled file by file, then moved in place.
    float **stage = calloc_check((size_t)state->n + 1, sizeof *stage);
    for (int i = 0; i < state->n; i++)
        stage[i] = state->p[i].host ? state->p[i].data : malloc_check(state->p[i].count * sizeof(float));
    for (int f = 0; f < ck->world; f++) {
        const DcpFile *file = &ck->files[f];
        int wanted = 0;
        for (int i = 0; i < file->npieces && !wanted; i++)
            for (int j = 0; j < state->n && !wanted; j++) {
                const DcpPiece *have = &file->pieces[i], *want = &state->p[j];
                wanted = have->kind == want->kind && have->unit == want->unit &&
                         have->offset < want->offset + want->count && want->offset < have->offset + have->count;
            }
        if (!wanted) continue;
        float **data = load_pieces(&rf, file);
        for (int i = 0; i < file->npieces; i++)
            for (int j = 0; j < state->n; j++) {
                const DcpPiece *have = &file->pieces[i], *want = &state->p[j];
                if (have->kind != want->kind || have->unit != want->unit) continue;
                size_t lo = have->offset > want->offset ? have->offset : want->offset;
                size_t hi_have = have->offset + have->count, hi_want = want->offset + want->count;
                size_t hi = hi_have < hi_want ? hi_have : hi_want;
                if (lo < hi)
                    memcpy(stage[j] + (lo - want->offset), data[i] + (lo - have->offset), (hi - lo) * sizeof(float));
            }
        for (int i = 0; i < file->npieces; i++) free(data[i]);
        free(data);
    }
    for (int i = 0; i < state->n; i++)
        if (!state->p[i].host) {
            device_from_host(dev, state->p[i].data, stage[i], state->p[i].count * sizeof(float));
            free(stage[i]);
        }
    free(stage);
}

void dcp_close(Dcp *ck) {
    for (int f = 0; f < ck->world; f++) free(ck->files[f].pieces);
    free(ck->files);
    json_free(ck->manifest);
    memset(ck, 0, sizeof *ck);
}

int64_t dcp_resume(Dcp *ck, const Device *dev, const DcpState *state, RunLog *log) {
    int64_t t0 = runlog_now_us();
    dcp_load(ck, dev, state);
    int64_t t1 = runlog_now_us(), step = ck->step;
    if (log->rank == 0)
        runlog_printf(log, "resume: step %lld of a %s run on %d rank(s), from %s (%.1f ms); training goes on at step %lld\n%s",
                      (long long)step, ck->lab, ck->world, ck->dir, (double)(t1 - t0) / 1000.0, (long long)step + 1,
                      ck->notes);
    runlog_span(log, step, "load", -1, -1, t0, t1, 0);
    runlog_check(log, "resume.step", 1, (double)step, (double)step);
    dcp_close(ck);
    return step + 1;
}
