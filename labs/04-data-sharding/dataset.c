// dataset.c — see dataset.h.
#include "dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/harness/check.h"  // defines: die(), fopen_check(), fwrite_check(), ...
#include "common/model/gpt.h"
#include "common/model/rng.h"      // defines: Rng, rng_seed(), rng_hash(), rng_uniform(), ...

#define STREAM_EPOCH 0x65706f6368ull  // "epoch": the sampler's stream, one per epoch

// ------------------------------------------------------------------------------------------
// 1. The file

int dataset_open(Dataset *ds, const char *path, int item_bytes, int64_t cap, char *err, size_t errlen) {
    memset(ds, 0, sizeof *ds);
    ds->fd = -1;
    snprintf(ds->path, sizeof ds->path, "%s", path);
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    if (item_bytes < 1 || (uint64_t)st.st_size < (uint64_t)item_bytes) {
        snprintf(err, errlen, "'%s' has %lld bytes: not one item of seq + 1 = %d bytes", path, (long long)st.st_size,
                 item_bytes);
        close(fd);
        return -1;
    }
    ds->fd = fd;
    ds->file_bytes = (uint64_t)st.st_size;
    ds->item_bytes = item_bytes;
    ds->available = (int64_t)(ds->file_bytes / (uint64_t)item_bytes);
    ds->items = cap > 0 && cap < ds->available ? cap : ds->available;
    return 0;
}

void dataset_read(const Dataset *ds, int64_t first, int64_t count, uint8_t *out) {
    if (first < 0 || count < 0 || first + count > ds->items)
        die("this is a bug in shardlab", "items %lld..%lld of '%s' asked for; it has %lld", (long long)first,
            (long long)(first + count - 1), ds->path, (long long)ds->items);
    size_t want = (size_t)count * (size_t)ds->item_bytes, done = 0;
    off_t at = (off_t)first * ds->item_bytes;
    while (done < want) {  // pread may return less than asked: go on from there
        ssize_t got = pread(ds->fd, out + done, want - done, at + (off_t)done);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0)
            die("is the file still there, unchanged?", "reading %zu bytes at offset %lld of '%s': %s", want - done,
                (long long)(at + (off_t)done), ds->path, got < 0 ? strerror(errno) : "the file ended early");
        done += (size_t)got;
    }
    if (ds->read_log) fprintf(ds->read_log, "%lld %lld\n", (long long)first, (long long)count);
}

void dataset_close(Dataset *ds) {
    if (ds->fd >= 0) close(ds->fd);
    ds->fd = -1;
}

void dataset_write_file(const char *path, const uint8_t *bytes, size_t n) {
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen_check(tmp, "wb");
    fwrite_check(bytes, 1, n, f, "the dataset");
    fclose_check(f, "the dataset");
    if (rename(tmp, path) != 0)
        die("check that the run directory is writable", "renaming '%s' to '%s': %s", tmp, path, strerror(errno));
}

// ------------------------------------------------------------------------------------------
// 2. The mixture

int mixture_parse(Mixture *m, const char *text, double temperature, char *err, size_t errlen) {
    memset(m, 0, sizeof *m);
    if (!isfinite(temperature) || !(temperature > 0)) {
        snprintf(err, errlen, "the temperature must be a positive number (got %g)", temperature);
        return -1;
    }
    m->temperature = temperature;
    double top = 0;
    const char *p = text;
    for (;;) {
        char *end;
        errno = 0;
        double w = strtod(p, &end);
        if (end == p || errno || !isfinite(w) || (*end && *end != ',')) {
            snprintf(err, errlen, "'%s' is not a list of numbers like 1,3,0.5", text);
            return -1;
        }
        if (w < 0) {
            snprintf(err, errlen, "weight %g in '%s' is negative", w, text);
            return -1;
        }
        if (m->k == MIXTURE_MAX_SOURCES) {
            snprintf(err, errlen, "more than %d sources in '%s'", MIXTURE_MAX_SOURCES, text);
            return -1;
        }
        m->weight[m->k++] = w;
        if (w > top) top = w;
        if (!*end) break;
        p = end + 1;
    }
    if (!(top > 0)) {
        snprintf(err, errlen, "the weights '%s' are all zero: no source can be drawn", text);
        return -1;
    }
    // w^(1/tau) itself overflows long before the weights stop making sense (1e9^(1/0.01) is
    // 1e900; 1e308,1e308 is a 1:1 mixture), so each term is taken relative to the largest
    // weight's, in logarithms: (w / top)^(1/tau) lies in [0, 1], and their sum in [1, k].
    double total = 0;
    for (int s = 0; s < m->k; s++) {
        m->prob[s] = m->weight[s] > 0 ? exp((log(m->weight[s]) - log(top)) / temperature) : 0;
        total += m->prob[s];
    }
    for (int s = 0; s < m->k; s++) {
        m->prob[s] /= total;
        // A source given a weight must have a chance of being drawn: one too small for a
        // double would silently never be.
        if (m->weight[s] > 0 && m->prob[s] == 0) {
            snprintf(err, errlen, "weight %g is drawn about 1e%.0f times as often as weight %g at temperature %g, "
                                  "below what a double holds: bring the weights closer or raise the temperature",
                     m->weight[s], (log(m->weight[s]) - log(top)) / temperature / log(10.0), top, temperature);
            return -1;
        }
    }
    return 0;
}

int mixture_layout(Mixture *m, int64_t D, char *err, size_t errlen) {
    int64_t each = D / m->k;
    for (int s = 0; s < m->k; s++) {
        m->first[s] = s * each;
        m->size[s] = s == m->k - 1 ? D - s * each : each;
        if (m->size[s] == 0 && m->prob[s] > 0) {
            snprintf(err, errlen, "%d sources of %lld items: source %d is empty", m->k, (long long)D, s);
            return -1;
        }
    }
    return 0;
}

int mixture_source_of(const Mixture *m, int64_t index) {
    int s = m->k - 1;
    while (s > 0 && index < m->first[s]) s--;
    return s;
}

// ------------------------------------------------------------------------------------------
// 3. What the sampler draws from (the permutation itself is the lab's: 04-data-sharding/sampler.c)

Rng sampler_stream(uint64_t seed, int64_t epoch) {
    Rng r;
    rng_seed(&r, rng_hash(seed, STREAM_EPOCH, (uint64_t)epoch));
    return r;
}

void mixture_draws(int64_t *out, int64_t D, Rng *r, const Mixture *mix) {
    for (int64_t i = 0; i < D; i++) {
        // The source: where u falls in the cumulative probabilities (u beyond their rounded
        // total, about once in 2^52 draws: the last source that can be drawn).
        double u = rng_uniform(r), cumulative = 0;
        int s = -1, last = 0;
        for (int j = 0; j < mix->k; j++) {
            cumulative += mix->prob[j];
            if (mix->prob[j] > 0) last = j;
            if (s < 0 && u < cumulative) s = j;
        }
        if (s < 0) s = last;
        out[i] = mix->first[s] + rng_below(r, mix->size[s]);
    }
}

uint64_t indices_hash(const int64_t *idx, int n) {
    uint64_t h = FNV1A64_INIT;
    for (int i = 0; i < n; i++) {
        uint8_t le[8];
        for (int b = 0; b < 8; b++) le[b] = (uint8_t)((uint64_t)idx[i] >> (8 * b));
        h = fnv1a64(le, 8, h);
    }
    return h;
}

// ---- the data-sharding lab's options ------------------------------------------------------

const char *const SHARD_STRATEGIES[3] = {"slice", "sampler", "dispatch"};

void shard_args_bind(ShardArgs *s, LabBind out[SHARD_NOPTIONS]) {
    out[0] = (LabBind){"strategy", &s->strategy};
    out[1] = (LabBind){"weights", &s->weights};
    out[2] = (LabBind){"temperature", &s->temperature};
    out[3] = (LabBind){"items", &s->items};
}

void shard_args_defaults(ShardArgs *s) {
    LabBind b[SHARD_NOPTIONS];
    shard_args_bind(s, b);
    const CatLab *lab = catalog_lab("shard");
    for (int i = 0; i < SHARD_NOPTIONS; i++) catalog_default(catalog_find(lab, b[i].name), b[i].value);
}

int shard_args_check(const ShardArgs *s, int *strategy, long long *items, Mixture *mix, char *why, size_t n) {
    *strategy = -1;
    for (int i = 0; i < 3; i++)
        if (strcmp(s->strategy, SHARD_STRATEGIES[i]) == 0) *strategy = i;
    if (*strategy < 0) return snprintf(why, n, "--strategy must be slice, sampler or dispatch (got '%s')", s->strategy), -1;
    *items = 0;  // 0: every whole item of the file
    if (strcmp(s->items, "all") != 0) {
        char *end;
        errno = 0;
        *items = strtoll(s->items, &end, 10);
        if (end == s->items || *end || errno || *items < 1)
            return snprintf(why, n, "--items must be a whole number >= 1 or 'all' (got '%s')", s->items), -1;
    }
    char err[512];
    if (s->weights && mixture_parse(mix, s->weights, s->temperature, err, sizeof err) != 0)
        return snprintf(why, n, "--weights: %s", err), -1;
    if (!s->weights && s->temperature != 1.0) return snprintf(why, n, "--temperature needs --weights"), -1;
    return 0;
}
