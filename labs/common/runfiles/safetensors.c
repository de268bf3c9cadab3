// safetensors.c — see safetensors.h.
//
// A file, byte by byte:
//
//   [0, 8)          N, the header length, unsigned 64-bit little-endian
//   [8, 8+N)        the header: JSON, padded with spaces so that N is a multiple of 8
//                   (the reference writer does this so the data starts 8-byte aligned)
//   [8+N, end)      the data: each tensor's bytes, packed back to back; a tensor's
//                   "data_offsets":[begin,end] count from 8+N
//
// The loader trusts nothing in the file: every length and offset is checked against the
// real file size before anything is allocated or read, and all checks run before any
// caller buffer is written, so a bad file leaves the model exactly as it was.
//
// The data's checksum (ST_CHECKSUM_KEY in "__metadata__") must be in the header, which comes
// first, so a save walks the data twice: once to hash it, once to write it (hashing the whole
// file as it goes, for the caller: safetensors_save_hashed).
#include "safetensors.h"

#include "common/harness/check.h"
#include "common/harness/hash.h"
#include "json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// A header bigger than this is corruption, not a model (the reference reader uses the same
// 100 MB limit). It also caps what a bad length field can make us allocate.
#define ST_MAX_HEADER_BYTES (100u * 1000u * 1000u)
#define ST_HEADER_ALIGN 8
#define ST_METADATA_KEY "__metadata__"

// Largest integer a JSON number (a double) holds exactly: 2^53.
#define ST_MAX_JSON_INT 9007199254740992.0

// ---------------------------------------------------------------------------------------
// Helpers

__attribute__((format(printf, 3, 4))) static int st_error(char *err, size_t errlen,
                                                           const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

// The format is little-endian whatever the machine; these go through bytes so the code is
// right on any host (and compilers turn them into plain loads and stores on x86 and ARM).
static void st_put_le(unsigned char *b, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) b[i] = (unsigned char)(v >> (8 * i));
}
static uint64_t st_get_le(const unsigned char *b, int bytes) {
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = (v << 8) | b[i];
    return v;
}

// "[64, 3]" into buf.
static void st_format_shape(char *buf, size_t buflen, const int64_t *dims, int ndim) {
    size_t used = (size_t)snprintf(buf, buflen, "[");
    for (int d = 0; d < ndim && used < buflen; d++)
        used += (size_t)snprintf(buf + used, buflen - used, "%s%lld", d ? ", " : "",
                                 (long long)dims[d]);
    if (used < buflen) snprintf(buf + used, buflen - used, "]");
}

// Number of bytes tensor t holds (F32), or -1 if its shape is not one we can store.
static int st_tensor_bytes(const StTensor *t, uint64_t *bytes, char *err, size_t errlen) {
    const char *name = t->name ? t->name : "(null)";
    if (t->ndim < 1 || t->ndim > ST_MAX_DIMS)
        return st_error(err, errlen, "tensor '%s': ndim %d is outside 1..%d", name, t->ndim,
                        ST_MAX_DIMS);
    uint64_t count = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0)
            return st_error(err, errlen, "tensor '%s': dimension %d is negative (%lld)", name, d,
                            (long long)t->shape[d]);
        uint64_t dim = (uint64_t)t->shape[d];
        if (dim && count > (uint64_t)(ST_MAX_JSON_INT / 4) / dim)
            return st_error(err, errlen, "tensor '%s': too many elements", name);
        count *= dim;
    }
    if (count && !t->data)
        return st_error(err, errlen, "tensor '%s': data is NULL but the shape has %llu elements",
                        name, (unsigned long long)count);
    *bytes = count * sizeof(float);
    return 0;
}

// ---------------------------------------------------------------------------------------
// Save

// Append "__metadata__":{...}: the caller's JSON text (NULL: none), then the data's checksum.
// Parsing and re-writing the caller's (rather than pasting it in) both checks it and puts it
// in one canonical form.
static int st_append_metadata(StrBuf *h, const char *metadata_json, uint64_t data_fnv, char *err,
                              size_t errlen) {
    char jerr[160];
    JsonValue *meta = json_parse(metadata_json ? metadata_json : "{}",
                                 metadata_json ? strlen(metadata_json) : 2, jerr, sizeof jerr);
    if (!meta) return st_error(err, errlen, "metadata is not valid JSON: %s", jerr);
    if (meta->type != JSON_OBJECT) {
        st_error(err, errlen, "metadata must be a JSON object, not a JSON %s",
                 json_type_name(meta->type));
        json_free(meta);
        return -1;
    }
    sb_json_string(h, ST_METADATA_KEY);
    sb_append(h, ":{", 2);
    for (size_t i = 0; i < meta->count; i++) {
        if (meta->items[i].type != JSON_STRING) {
            st_error(err, errlen, "metadata value \"%s\" is a JSON %s; safetensors allows only strings",
                     meta->keys[i], json_type_name(meta->items[i].type));
            json_free(meta);
            return -1;
        }
        if (strcmp(meta->keys[i], ST_CHECKSUM_KEY) == 0) {
            st_error(err, errlen, "metadata key \"%s\" is the writer's own (the data's checksum)",
                     ST_CHECKSUM_KEY);
            json_free(meta);
            return -1;
        }
        sb_json_string(h, meta->keys[i]);
        sb_append(h, ":", 1);
        sb_json_string(h, meta->items[i].string);
        sb_append(h, ",", 1);
    }
    sb_printf(h, "\"%s\":\"%016llx\"}", ST_CHECKSUM_KEY, (unsigned long long)data_fnv);
    json_free(meta);
    return 0;
}

// Build the padded header text. Tensors are laid out in the order given.
static int st_build_header(StrBuf *h, const StTensor *tensors, int n, const char *metadata_json,
                           uint64_t data_fnv, char *err, size_t errlen) {
    sb_append(h, "{", 1);
    if (st_append_metadata(h, metadata_json, data_fnv, err, errlen) != 0) return -1;
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        const StTensor *t = &tensors[i];
        uint64_t bytes;
        if (!t->name || !t->name[0]) return st_error(err, errlen, "tensor %d has no name", i);
        if (strcmp(t->name, ST_METADATA_KEY) == 0)
            return st_error(err, errlen, "a tensor may not be named '%s'", ST_METADATA_KEY);
        for (int j = 0; j < i; j++)
            if (strcmp(tensors[j].name, t->name) == 0)
                return st_error(err, errlen, "tensor '%s' is listed twice", t->name);
        if (st_tensor_bytes(t, &bytes, err, errlen) != 0) return -1;

        if (h->len > 1) sb_append(h, ",", 1);
        sb_json_string(h, t->name);
        sb_printf(h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++) sb_printf(h, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        sb_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offset,
                  (unsigned long long)(offset + bytes));
        offset += bytes;
    }
    sb_append(h, "}", 1);
    while (h->len % ST_HEADER_ALIGN) sb_append(h, " ", 1);
    return 0;
}

// count floats as little-endian bytes, through a small staging buffer: *h continued over
// them, and the same bytes written to f (NULL: hashed only).
static int st_put_f32(FILE *f, const float *data, uint64_t count, uint64_t *h) {
    unsigned char buf[16384];
    const size_t per_chunk = sizeof buf / 4;
    while (count > 0) {
        size_t k = count < per_chunk ? (size_t)count : per_chunk;
        for (size_t i = 0; i < k; i++) {
            uint32_t u;
            memcpy(&u, &data[i], 4);
            st_put_le(buf + 4 * i, u, 4);
        }
        *h = fnv1a64(buf, 4 * k, *h);
        if (f && fwrite(buf, 4, k, f) != k) return -1;
        data += k;
        count -= k;
    }
    return 0;
}

// The data section's FNV-1a 64, the bytes as st_put_f32 writes them.
static uint64_t st_data_fnv(const StTensor *tensors, int n) {
    uint64_t h = FNV1A64_INIT;
    for (int i = 0; i < n; i++) {
        uint64_t bytes = 0;
        if (st_tensor_bytes(&tensors[i], &bytes, NULL, 0) == 0) st_put_f32(NULL, tensors[i].data, bytes / 4, &h);
    }
    return h;
}

int safetensors_save(const char *path, const StTensor *tensors, int n, const char *metadata_json,
                     char *err, size_t errlen) {
    StWritten w;
    return safetensors_save_hashed(path, tensors, n, metadata_json, &w, err, errlen);
}

int safetensors_save_hashed(const char *path, const StTensor *tensors, int n, const char *metadata_json,
                            StWritten *written, char *err, size_t errlen) {
    if (!path || n < 0 || (n > 0 && !tensors))
        return st_error(err, errlen, "safetensors_save: bad arguments (path, tensors or n)");
    StrBuf header, tmp;
    sb_init(&header);
    sb_init(&tmp);
    int rc = -1;
    FILE *f = NULL;
    uint64_t data_fnv = st_data_fnv(tensors, n);  // (a bad tensor is refused by st_build_header)
    if (st_build_header(&header, tensors, n, metadata_json, data_fnv, err, errlen) != 0) {
        // st_build_header said what is wrong; add which file it was for.
        char why[512];
        snprintf(why, sizeof why, "%s", err && errlen ? err : "");
        st_error(err, errlen, "%s: not saved: %s", path, why);
        goto out;
    }

    // Write next to the target, then rename: rename() within a directory is atomic, so
    // the real name holds either the old file or the complete new one, never half of one.
    sb_printf(&tmp, "%s.tmp.%ld", path, (long)getpid());
    f = fopen(tmp.data, "wb");
    if (!f) {
        st_error(err, errlen, "%s: cannot create '%s': %s", path, tmp.data, strerror(errno));
        goto out;
    }
    unsigned char len8[8];
    st_put_le(len8, header.len, 8);
    int bad = fwrite(len8, 1, 8, f) != 8 || fwrite(header.data, 1, header.len, f) != header.len;
    uint64_t file_fnv = fnv1a64(header.data, header.len, fnv1a64(len8, 8, FNV1A64_INIT)), size = 8 + header.len;
    for (int i = 0; i < n && !bad; i++) {
        uint64_t bytes = 0;
        st_tensor_bytes(&tensors[i], &bytes, NULL, 0);  // already checked by st_build_header
        bad = st_put_f32(f, tensors[i].data, bytes / 4, &file_fnv) != 0;
        size += bytes;
    }
    // fsync so that after the rename the data is on disk, not only in the page cache.
    if (bad || fflush(f) != 0 || fsync(fileno(f)) != 0) {
        st_error(err, errlen, "%s: write error on '%s': %s", path, tmp.data, strerror(errno));
        fclose(f);
        f = NULL;
        goto out;
    }
    int closed = fclose(f);
    f = NULL;
    if (closed != 0) {
        st_error(err, errlen, "%s: error closing '%s': %s", path, tmp.data, strerror(errno));
        goto out;
    }
    if (rename(tmp.data, path) != 0) {
        st_error(err, errlen, "%s: cannot rename '%s' into place: %s", path, tmp.data,
                 strerror(errno));
        goto out;
    }
    written->bytes = size;
    written->fnv1a64 = file_fnv;
    rc = 0;
out:
    if (rc != 0 && tmp.data) remove(tmp.data);  // never leave a partial temporary behind
    sb_free(&tmp);
    sb_free(&header);
    return rc;
}

// ---------------------------------------------------------------------------------------
// Load

// What the header says about one tensor, after its fields have been type-checked.
typedef struct {
    const char *name;
    const char *dtype;
    const JsonValue *shape;  // a JSON array of non-negative integers
    uint64_t begin, end;     // data_offsets
    int expected;            // some expect[i] has this name
} StEntry;

static int st_is_json_uint(const JsonValue *v) {
    return v && v->type == JSON_NUMBER && v->number >= 0 && v->number <= ST_MAX_JSON_INT &&
           v->number == (double)(uint64_t)v->number;
}

// "[64, 3]" from a header's shape array.
static void st_format_json_shape(char *buf, size_t buflen, const JsonValue *shape) {
    size_t used = (size_t)snprintf(buf, buflen, "[");
    for (size_t d = 0; d < shape->count && used < buflen; d++)
        used += (size_t)snprintf(buf + used, buflen - used, "%s%llu", d ? ", " : "",
                                 (unsigned long long)shape->items[d].number);
    if (used < buflen) snprintf(buf + used, buflen - used, "]");
}

// Type-check one header entry: {"dtype": string, "shape": [uints], "data_offsets": [b, e]}.
static int st_read_entry(const char *path, const char *name, const JsonValue *v, StEntry *e,
                         char *err, size_t errlen) {
    if (v->type != JSON_OBJECT)
        return st_error(err, errlen, "%s: tensor '%s': header entry is a JSON %s, expected an object",
                        path, name, json_type_name(v->type));
    const JsonValue *dtype = json_get(v, "dtype");
    const JsonValue *shape = json_get(v, "shape");
    const JsonValue *offsets = json_get(v, "data_offsets");
    if (!dtype || dtype->type != JSON_STRING)
        return st_error(err, errlen, "%s: tensor '%s': missing \"dtype\" string", path, name);
    if (!shape || shape->type != JSON_ARRAY)
        return st_error(err, errlen, "%s: tensor '%s': missing \"shape\" array", path, name);
    for (size_t d = 0; d < shape->count; d++)
        if (!st_is_json_uint(&shape->items[d]))
            return st_error(err, errlen, "%s: tensor '%s': shape entry %zu is not a "
                            "non-negative integer", path, name, d);
    if (!offsets || offsets->type != JSON_ARRAY || offsets->count != 2 ||
        !st_is_json_uint(&offsets->items[0]) || !st_is_json_uint(&offsets->items[1]))
        return st_error(err, errlen, "%s: tensor '%s': \"data_offsets\" must be [begin, end] "
                        "with non-negative integers", path, name);
    e->name = name;
    e->dtype = dtype->string;
    e->shape = shape;
    e->begin = (uint64_t)offsets->items[0].number;
    e->end = (uint64_t)offsets->items[1].number;
    e->expected = 0;
    return 0;
}

static int st_shape_matches(const StTensor *t, const JsonValue *shape) {
    if (shape->count != (size_t)t->ndim) return 0;
    for (int d = 0; d < t->ndim; d++)
        if (shape->items[d].number != (double)t->shape[d]) return 0;
    return 1;
}

static int st_compare_begin(const void *a, const void *b) {
    const StEntry *x = *(const StEntry *const *)a, *y = *(const StEntry *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

// Check the header against the file size and the expected tensors; fill match[i] with the
// entry expect[i] reads from. Reads nothing and writes no tensor.
// *checksum: the data's, from the metadata (ST_CHECKSUM_KEY); *has_checksum 0 if it has none.
static int st_check_header(const char *path, const JsonValue *root, uint64_t data_size,
                           const StTensor *expect, int n, const uint64_t *bytes, StEntry *entries,
                           size_t *count, StEntry **match, int *has_checksum, uint64_t *checksum,
                           char *err, size_t errlen) {
    char want[96], found[96];
    *count = 0;
    *has_checksum = 0;
    for (size_t i = 0; i < root->count; i++) {
        const char *key = root->keys[i];
        if (strcmp(key, ST_METADATA_KEY) == 0) {
            const JsonValue *m = &root->items[i];
            if (m->type != JSON_OBJECT)
                return st_error(err, errlen, "%s: \"%s\" is a JSON %s, expected an object", path,
                                ST_METADATA_KEY, json_type_name(m->type));
            for (size_t j = 0; j < m->count; j++)
                if (m->items[j].type != JSON_STRING)
                    return st_error(err, errlen, "%s: metadata value \"%s\" is not a string",
                                    path, m->keys[j]);
            const JsonValue *sum = json_get(m, ST_CHECKSUM_KEY);
            if (sum) {
                const char *hex = sum->string;
                int ok = strlen(hex) == 16;
                for (int d = 0; ok && d < 16; d++) ok = (hex[d] >= '0' && hex[d] <= '9') || (hex[d] >= 'a' && hex[d] <= 'f');
                if (!ok)
                    return st_error(err, errlen, "%s: metadata \"%s\" is \"%.40s\", not 16 hex digits "
                                    "(the header is damaged)", path, ST_CHECKSUM_KEY, hex);
                *has_checksum = 1;
                *checksum = strtoull(hex, NULL, 16);
            }
            continue;
        }
        for (size_t j = 0; j < *count; j++)
            if (strcmp(entries[j].name, key) == 0)
                return st_error(err, errlen, "%s: tensor '%s' appears twice in the header", path, key);
        if (st_read_entry(path, key, &root->items[i], &entries[*count], err, errlen) != 0) return -1;
        (*count)++;
    }

    // Every expected tensor: present, F32, the right shape.
    for (int i = 0; i < n; i++) {
        st_format_shape(want, sizeof want, expect[i].shape, expect[i].ndim);
        match[i] = NULL;
        for (size_t j = 0; j < *count && !match[i]; j++)
            if (strcmp(entries[j].name, expect[i].name) == 0) match[i] = &entries[j];
        if (!match[i])
            return st_error(err, errlen, "%s: %s: expected F32 %s, not in file", path,
                            expect[i].name, want);
        StEntry *e = match[i];
        if (strcmp(e->dtype, "F32") != 0 || !st_shape_matches(&expect[i], e->shape)) {
            st_format_json_shape(found, sizeof found, e->shape);
            return st_error(err, errlen, "%s: %s: expected F32 %s, found %s %s", path,
                            expect[i].name, want, e->dtype, found);
        }
        if (e->end < e->begin)
            return st_error(err, errlen, "%s: %s: data_offsets [%llu, %llu] end before they begin",
                            path, e->name, (unsigned long long)e->begin, (unsigned long long)e->end);
        if (e->end - e->begin != bytes[i])
            return st_error(err, errlen, "%s: %s: data_offsets [%llu, %llu] span %llu bytes, but "
                            "F32 %s needs %llu", path, e->name, (unsigned long long)e->begin,
                            (unsigned long long)e->end, (unsigned long long)(e->end - e->begin),
                            want, (unsigned long long)bytes[i]);
        if (e->end > data_size)
            return st_error(err, errlen, "%s: %s: data_offsets [%llu, %llu] run past the end of "
                            "the data (%llu bytes; is the file truncated?)", path, e->name,
                            (unsigned long long)e->begin, (unsigned long long)e->end,
                            (unsigned long long)data_size);
        e->expected = 1;
    }
    // A tensor nobody asked for means the file was written for a different model.
    for (size_t j = 0; j < *count; j++) {
        if (entries[j].expected) continue;
        st_format_json_shape(found, sizeof found, entries[j].shape);
        return st_error(err, errlen, "%s: tensor '%s' (%s %s) is in the file but not in this "
                        "model (is the file for another model or config?)", path, entries[j].name,
                        entries[j].dtype, found);
    }

    // Sorted by begin, the tensors must tile [0, data_size) exactly: no overlap, no gap.
    StEntry **order = malloc_check((*count ? *count : 1) * sizeof *order);
    for (size_t j = 0; j < *count; j++) order[j] = &entries[j];
    qsort(order, *count, sizeof *order, st_compare_begin);
    uint64_t next = 0;
    int rc = 0;
    for (size_t j = 0; j < *count && rc == 0; j++) {
        if (order[j]->begin < next)
            rc = st_error(err, errlen, "%s: %s: data_offsets [%llu, %llu] overlap '%s'", path,
                          order[j]->name, (unsigned long long)order[j]->begin,
                          (unsigned long long)order[j]->end, order[j - 1]->name);
        else if (order[j]->begin > next)
            rc = st_error(err, errlen, "%s: %s: gap of %llu unused bytes before its data", path,
                          order[j]->name, (unsigned long long)(order[j]->begin - next));
        next = order[j]->end;
    }
    if (rc == 0 && next != data_size)
        rc = st_error(err, errlen, "%s: the data section is %llu bytes but the tensors cover %llu",
                      path, (unsigned long long)data_size, (unsigned long long)next);
    free(order);
    return rc;
}

int safetensors_load(const char *path, StTensor *expect, int n, char *err, size_t errlen) {
    if (!path || n < 0 || (n > 0 && !expect))
        return st_error(err, errlen, "safetensors_load: bad arguments (path, expect or n)");
    int rc = -1;
    FILE *f = NULL;
    char *header = NULL, *data = NULL;
    JsonValue *root = NULL;
    StEntry *entries = NULL, **match = NULL;
    uint64_t *bytes = calloc_check((size_t)n + 1, sizeof *bytes);
    for (int i = 0; i < n; i++) {
        if (!expect[i].name) {
            st_error(err, errlen, "safetensors_load: expect[%d] has no name", i);
            goto out;
        }
        if (st_tensor_bytes(&expect[i], &bytes[i], err, errlen) != 0) goto out;
    }

    f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        st_error(err, errlen, "%s: cannot open: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        st_error(err, errlen, "%s: not a regular file", path);
        goto out;
    }
    uint64_t size = (uint64_t)st.st_size;
    unsigned char len8[8];
    if (size < 8 || fread(len8, 1, 8, f) != 8) {
        st_error(err, errlen, "%s: file is %llu bytes, too short for the 8-byte header length "
                 "(not a safetensors file?)", path, (unsigned long long)size);
        goto out;
    }
    // Check the length against the real file size before allocating anything for it.
    uint64_t header_len = st_get_le(len8, 8);
    if (header_len > size - 8) {
        st_error(err, errlen, "%s: header length %llu is larger than the file (%llu bytes): "
                 "truncated, or not a safetensors file", path, (unsigned long long)header_len,
                 (unsigned long long)size);
        goto out;
    }
    if (header_len > ST_MAX_HEADER_BYTES) {
        st_error(err, errlen, "%s: header length %llu is over the %u-byte limit", path,
                 (unsigned long long)header_len, ST_MAX_HEADER_BYTES);
        goto out;
    }
    header = malloc_check((size_t)header_len);
    if (fread(header, 1, (size_t)header_len, f) != header_len) {
        st_error(err, errlen, "%s: read error in the header: %s", path, strerror(errno));
        goto out;
    }
    char jerr[200];
    root = json_parse(header, (size_t)header_len, jerr, sizeof jerr);
    if (!root) {
        st_error(err, errlen, "%s: header is not valid JSON: %s", path, jerr);
        goto out;
    }
    if (root->type != JSON_OBJECT) {
        st_error(err, errlen, "%s: header is a JSON %s, expected an object", path,
                 json_type_name(root->type));
        goto out;
    }
    uint64_t data_size = size - 8 - header_len, checksum = 0;
    size_t count;
    int has_checksum;
    entries = calloc_check(root->count + 1, sizeof *entries);
    match = calloc_check((size_t)n + 1, sizeof *match);
    if (st_check_header(path, root, data_size, expect, n, bytes, entries, &count, match,
                        &has_checksum, &checksum, err, errlen) != 0)
        goto out;

    // Read the whole data section before touching expect[]: if the read fails halfway, the
    // caller's tensors are still all the old ones. This costs one extra copy of the weights
    // in memory for a moment, which the small models of the labs can afford.
    if (data_size > SIZE_MAX) {
        st_error(err, errlen, "%s: data section too large for this machine", path);
        goto out;
    }
    data = malloc_check((size_t)data_size);
    if (fread(data, 1, (size_t)data_size, f) != data_size) {
        st_error(err, errlen, "%s: read error in the tensor data (file changed while loading?)",
                 path);
        goto out;
    }
    if (has_checksum) {
        uint64_t got = fnv1a64(data, (size_t)data_size, FNV1A64_INIT);
        if (got != checksum) {
            st_error(err, errlen, "%s: the tensor data hashes to %016llx, its header's %s says "
                     "%016llx: the data is damaged", path, (unsigned long long)got,
                     ST_CHECKSUM_KEY, (unsigned long long)checksum);
            goto out;
        }
    }
    for (int i = 0; i < n; i++) {
        const unsigned char *src = (const unsigned char *)data + match[i]->begin;
        for (uint64_t k = 0; k < bytes[i] / 4; k++) {
            uint32_t u = (uint32_t)st_get_le(src + 4 * k, 4);
            memcpy(&expect[i].data[k], &u, 4);
        }
    }
    rc = 0;
out:
    if (f) fclose(f);
    free(header);
    free(data);
    json_free(root);
    free(entries);
    free(match);
    free(bytes);
    return rc;
}
