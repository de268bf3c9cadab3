// dcp_open.c — see dcp.h: opening a checkpoint directory, which nothing guarantees is whole
// or ours, and checking all of it before anything is written: the manifest (its checksum
// first), the model, every file's size, checksum and header (one save of one run), that the
// pieces tile every tensor, and the values. Also what a resumed run takes from the saved one
// (the learning-rate schedule) or notes about it.
#include "dcp.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/harness/check.h"
#include "dcp_internal.h"

#define DCP_MAX_MANIFEST_BYTES (64u << 20)


// One line naming the checkpoint, the file and the check that failed; exit 2.
void dcp_refuse(const DcpRefuse *r, const char *file, const char *fmt, ...) {
    char why[2 * PATH_MAX];
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

// A shard file's safetensors header, parsed (size: the file's, from stat); NULL and why if it
// cannot be read or is not a JSON object.
static JsonValue *read_header(const DcpFile *f, uint64_t size, char *why, size_t n) {
    FILE *fp = fopen(f->file, "rb");
    unsigned char len8[8];
    if (!fp || fread(len8, 1, 8, fp) != 8) {
        if (fp) fclose(fp);
        return snprintf(why, n, "cannot read its header length"), NULL;
    }
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | len8[i];
    if (hl > size - 8 || hl > (64u << 20)) {
        fclose(fp);
        return snprintf(why, n, "header length %llu does not fit the file (%llu bytes)", (unsigned long long)hl,
                        (unsigned long long)size), NULL;
    }
    char *h = malloc_check((size_t)hl + 1);
    size_t got = fread(h, 1, (size_t)hl, fp);
    fclose(fp);
    char jerr[200];
    JsonValue *root = got == hl ? json_parse(h, (size_t)hl, jerr, sizeof jerr) : NULL;
    free(h);
    if (root && root->type == JSON_OBJECT) return root;
    json_free(root);
    return snprintf(why, n, "the safetensors header is not a JSON object"), NULL;
}

static const char *meta_string(const JsonValue *root, const char *key) {
    const JsonValue *v = json_get(json_get(root, "__metadata__"), key);
    return v && v->type == JSON_STRING ? v->string : NULL;
}

// NULL if the file's header names this checkpoint's save (its "save" and "run"), else what
// differs, in why.
static const char *other_save(const JsonValue *root, const Dcp *ck, char *why, size_t n) {
    const char *save = meta_string(root, "save"), *run = meta_string(root, "run"), *step = meta_string(root, "step");
    if (!save || !run)
        return snprintf(why, n, "its metadata names no save and run: not a file of a %s checkpoint", DCP_FORMAT), why;
    if (strcmp(run, ck->run) != 0)
        return snprintf(why, n, "from another run: its metadata names save %.20s of run '%.300s' at step %.20s, the "
                        "manifest save %s of run '%.300s' at step %lld; did two jobs save into one folder?", save, run,
                        step ? step : "?", ck->save, ck->run, (long long)ck->step), why;
    if (strcmp(save, ck->save) != 0)
        return snprintf(why, n, "from another save of this run: its metadata names save %.20s at step %.20s, the "
                        "manifest save %s at step %lld; was it copied from another checkpoint?", save,
                        step ? step : "?", ck->save, (long long)ck->step), why;
    return NULL;
}

// The tensors of one shard file, from its header: "<kind>.<unit>.<offset>" of shape [count].
static void read_pieces(const DcpRefuse *rf, DcpFile *f, const JsonValue *root, const GptConfig *c, int world,
                        int64_t step) {
    const char *name = f->name;
    const JsonValue *meta = json_get(root, "__metadata__");
    const JsonValue *mr = json_get(meta, "rank"), *mw = json_get(meta, "world"), *ms = json_get(meta, "step");
    char want[32];
    if (!mr || !mw || !ms || mr->type != JSON_STRING || mw->type != JSON_STRING || ms->type != JSON_STRING) {
        dcp_refuse(rf, name, "no rank, world and step in its metadata (not a shardlab checkpoint file)");
    }
    snprintf(want, sizeof want, "%d", world);
    if (strcmp(mw->string, want) != 0) {
        dcp_refuse(rf, name, "saved by a world of %s ranks, the manifest says %d", mw->string, world);
    }
    snprintf(want, sizeof want, "%d", f->rank);
    if (strcmp(mr->string, want) != 0) {
        dcp_refuse(rf, name, "saved by rank %s, the manifest lists it as rank %d's", mr->string, f->rank);
    }
    snprintf(want, sizeof want, "%lld", (long long)step);
    if (strcmp(ms->string, want) != 0) {
        dcp_refuse(rf, name, "saved at step %s, the manifest says step %lld", ms->string, (long long)step);
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
                if (strcmp(kind, dcp_kind_name((DcpKind)j)) == 0) k = j;
        if (k < 0 || unit < 0 || unit >= gpt_layer_count(c) || !shape || shape->type != JSON_ARRAY ||
            shape->count != 1 || !json_uint(&shape->items[0], 1e15, &count) || count == 0 ||
            off + (uint64_t)count > gpt_layer_size(c, unit)) {
            dcp_refuse(rf, name, "tensor '%s' is not a piece of this model's state", key);
        }
        f->pieces[f->npieces++] = (DcpPiece){(DcpKind)k, unit, (size_t)off, (size_t)count, NULL, 1};
    }
}

typedef struct {
    size_t offset, count;
} Span;

static int span_cmp(const void *a, const void *b) {
    const Span *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

// Every element of every tensor in exactly one piece.
static void check_tiling(const DcpRefuse *rf, const Dcp *ck, const GptConfig *c) {
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
                if (s[i].offset != next)  // (dcp_refuse() exits: s is not freed)
                    dcp_refuse(rf, DCP_MANIFEST, "%s of unit %d: elements %zu..%zu are %s", dcp_kind_name((DcpKind)k),
                               u, s[i].offset < next ? s[i].offset : next,
                               (s[i].offset < next ? next : s[i].offset) - 1,
                               s[i].offset < next ? "in two files" : "in no file");
                next += s[i].count;
            }
            if (next != size)
                dcp_refuse(rf, DCP_MANIFEST, "%s of unit %d: elements %zu..%zu are in no file",
                           dcp_kind_name((DcpKind)k), u, next, size - 1);
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
    DcpRefuse rf = {prog, dir};
    dcp_path(ck->dir, "%s", dir);
    char path[PATH_MAX];
    dcp_path(path, "%s/%s", dir, DCP_MANIFEST);

    // The manifest: whole, and its checksum first (a damaged manifest says nothing else).
    StrBuf manifest;
    sb_init(&manifest);
    int over = sb_read_file(&manifest, path, DCP_MAX_MANIFEST_BYTES);
    if (over < 0) dcp_refuse(&rf, DCP_MANIFEST, "cannot read it: %s", strerror(errno));
    if (over) dcp_refuse(&rf, DCP_MANIFEST, "over %u bytes", DCP_MAX_MANIFEST_BYTES);
    char *text = manifest.data;
    size_t len = manifest.len;
    char *field = NULL;
    for (char *p = strstr(text, DCP_CHECKSUM_FIELD); p; p = strstr(p + 1, DCP_CHECKSUM_FIELD)) field = p;
    unsigned long long said;
    char tail[4] = "";
    if (!field || sscanf(field + strlen(DCP_CHECKSUM_FIELD), "%16llx%3s", &said, tail) != 2 || strcmp(tail, "\"}") != 0)
        dcp_refuse(&rf, DCP_MANIFEST, "no checksum field at its end (truncated?)");
    uint64_t h = fnv1a64(text, (size_t)(field - text), FNV1A64_INIT);
    if (h != said)
        dcp_refuse(&rf, DCP_MANIFEST, "checksum mismatch: the file says %016llx, its bytes hash to %016llx (damaged or edited)",
                   said, (unsigned long long)h);
    char jerr[200];
    ck->manifest = json_parse(text, len, jerr, sizeof jerr);
    sb_free(&manifest);
    if (!ck->manifest || ck->manifest->type != JSON_OBJECT) dcp_refuse(&rf, DCP_MANIFEST, "not a JSON object: %s", jerr);
    const JsonValue *m = ck->manifest, *fmt = json_get(m, "format"), *lab = json_get(m, "lab");
    if (fmt && fmt->type == JSON_STRING && strcmp(fmt->string, "shardlab-checkpoint/1") == 0)
        dcp_refuse(&rf, DCP_MANIFEST, "format shardlab-checkpoint/1 is an older one, whose files carry no save identity; "
                   "this shardlab reads \"%s\" (resume it with the shardlab that saved it)", DCP_FORMAT);
    if (!fmt || fmt->type != JSON_STRING || strcmp(fmt->string, DCP_FORMAT) != 0)
        dcp_refuse(&rf, DCP_MANIFEST, "format is not \"%s\"", DCP_FORMAT);
    snprintf(ck->lab, sizeof ck->lab, "%s", lab && lab->type == JSON_STRING ? lab->string : "?");
    // The save every file must belong to.
    const JsonValue *save = json_get(m, "save"), *run = json_get(m, "run");
    if (!save || save->type != JSON_STRING || strlen(save->string) != 16 ||
        strspn(save->string, "0123456789abcdef") != 16 || !run || run->type != JSON_STRING)
        dcp_refuse(&rf, DCP_MANIFEST, "no save identity (\"save\": 16 hex digits, \"run\": a string)");
    ck->save = save->string;
    ck->run = run->string;

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
            dcp_refuse(&rf, DCP_MANIFEST, "model.%s missing or not a whole number", shape[i].key);
        if (v != shape[i].now)
            dcp_refuse(&rf, DCP_MANIFEST, "the checkpoint's model has %s %lld, this run has %s %d (a different model)",
                       shape[i].key, (long long)v, shape[i].option, shape[i].now);
    }
    const JsonValue *units = json_get(m, "units");
    if (!units || units->type != JSON_ARRAY || (int)units->count != gpt_layer_count(c))
        dcp_refuse(&rf, DCP_MANIFEST, "units: expected %d lengths", gpt_layer_count(c));
    for (int u = 0; u < gpt_layer_count(c); u++) {
        int64_t v;
        if (!json_uint(&units->items[u], 1e15, &v) || (size_t)v != gpt_layer_size(c, u))
            dcp_refuse(&rf, DCP_MANIFEST, "units[%d] is not %zu, the length of this model's unit %d", u,
                       gpt_layer_size(c, u), u);
    }
    int64_t step, world, t;
    if (!json_uint(json_get(m, "step"), 1e12, &step) || step < 1) dcp_refuse(&rf, DCP_MANIFEST, "step missing or < 1");
    if (!json_uint(json_get(json_get(m, "optimizer"), "t"), 1e12, &t) || t != step)
        dcp_refuse(&rf, DCP_MANIFEST, "optimizer.t is not the step, %lld", (long long)step);
    if (!json_uint(json_get(m, "world"), 4096, &world) || world < 1)
        dcp_refuse(&rf, DCP_MANIFEST, "world missing or out of range");
    ck->step = step;
    ck->world = (int)world;
    if (a->steps <= step)
        usage_error(prog, "--resume %s: the checkpoint is at step %lld; --steps %d leaves nothing to train (ask for more)",
                    dir, (long long)step, a->steps);

    // Its files: one per rank of the saving world, each the size and checksum the manifest
    // recorded, each holding what its header says.
    const JsonValue *files = json_get(m, "files");
    if (!files || files->type != JSON_ARRAY || (int64_t)files->count != world)
        dcp_refuse(&rf, DCP_MANIFEST, "world %lld but %zu file(s) listed: the saving world does not add up", (long long)world,
                   files && files->type == JSON_ARRAY ? files->count : 0);
    ck->files = calloc_check((size_t)world, sizeof *ck->files);
    for (int r = 0; r < world; r++) {
        const JsonValue *fo = &files->items[r], *p = json_get(fo, "path"), *fnv = json_get(fo, "fnv1a64");
        int64_t rank, bytes;
        DcpFile *f = &ck->files[r];
        const char *want = f->name;
        dcp_shard_name(f->name, sizeof f->name, step, r, (int)world);
        if (!json_uint(json_get(fo, "rank"), 4096, &rank) || rank != r || !p || p->type != JSON_STRING ||
            strcmp(p->string, want) != 0 || !json_uint(json_get(fo, "bytes"), 1e15, &bytes) || !fnv ||
            fnv->type != JSON_STRING || strlen(fnv->string) != 16)
            dcp_refuse(&rf, DCP_MANIFEST, "files[%d] is not rank %d's file %s with bytes and fnv1a64", r, r, want);
        f->file = malloc_check(PATH_MAX);
        dcp_path(f->file, "%s/%s", dir, want);
        f->rank = r;
        f->bytes = (uint64_t)bytes;
        f->fnv = strtoull(fnv->string, NULL, 16);
        struct stat st;
        if (stat(f->file, &st) != 0) dcp_refuse(&rf, want, "missing: %s", strerror(errno));
        if (!S_ISREG(st.st_mode)) dcp_refuse(&rf, want, "not a regular file");
        // Its header says which save it belongs to: where the bytes differ from the manifest's,
        // that is the likelier story (another job's file, or one copied in) than damage.
        char why[2 * PATH_MAX], other[2 * PATH_MAX];
        JsonValue *header = read_header(f, (uint64_t)st.st_size, why, sizeof why);
        const char *differs = header ? other_save(header, ck, other, sizeof other) : NULL;
        if ((uint64_t)st.st_size != f->bytes) {
            if (differs) dcp_refuse(&rf, want, "%s", differs);
            dcp_refuse(&rf, want, "%lld bytes, the manifest says %llu (truncated or replaced)", (long long)st.st_size,
                       (unsigned long long)f->bytes);
        }
        uint64_t n, got = dcp_file_fnv(f->file, &n);
        if (got != f->fnv || n != f->bytes) {
            if (differs) dcp_refuse(&rf, want, "%s", differs);
            dcp_refuse(&rf, want, "checksum mismatch: fnv1a64 %016llx, the manifest says %016llx (damaged)",
                       (unsigned long long)got, (unsigned long long)f->fnv);
        }
        if (!header) dcp_refuse(&rf, want, "%s", why);
        if (differs) dcp_refuse(&rf, want, "%s", differs);  // even with a manifest edited to match its bytes
        read_pieces(&rf, f, header, c, (int)world, step);
        json_free(header);
        // The full format check (the data is read again in dcp_load), and what must hold of
        // every value: a state with the right checksums can still not be a training state.
        float **data = dcp_load_pieces(&rf, f);
        for (int i = 0; i < f->npieces; i++)
            if (dcp_check_values(c, &f->pieces[i], data[i], why, sizeof why) != 0) dcp_refuse(&rf, want, "%s", why);
        for (int i = 0; i < f->npieces; i++) free(data[i]);
        free(data);
    }
    check_tiling(&rf, ck, c);
    note_differences(ck, a);
}

void dcp_close(Dcp *ck) {
    for (int f = 0; f < ck->world && ck->files; f++) free(ck->files[f].pieces), free(ck->files[f].file);
    free(ck->files);
    json_free(ck->manifest);
    memset(ck, 0, sizeof *ck);
}
