// test_safetensors.c — reading and writing weights (labs/common/runfiles/safetensors.c).
//
// What it proves: save -> load gives back exactly the same bits (NaN, -0 and denormals
// included) whatever order the tensors are asked for in; the file on disk is a valid
// safetensors file that another reader would accept (8-byte LE length, JSON header padded
// to 8 bytes, contiguous data_offsets, metadata); and every kind of bad file is refused
// with a message saying what is wrong, without touching the caller's tensors. The data's
// checksum (data_fnv1a64 in the metadata): every byte of a saved file's data flipped, one
// at a time, is refused; a file without a checksum (as Hugging Face writes them) loads; a
// save reports the size and hash of the bytes it wrote.
//
// All files are written under a fresh mkdtemp directory that is removed at the end.
#include "common/runfiles/json.h"
#include "common/runfiles/safetensors.h"
#include "test.h"

#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[64];

static const char *in_tmp(const char *name) {
    static char path[sizeof tmpdir + 1 + 256];  // room for any d_name
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    return path;
}

static int count_files(void) {
    DIR *d = opendir(tmpdir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) n++;
    if (d) closedir(d);
    return n;
}

static void remove_tmpdir(void) {
    DIR *d = opendir(tmpdir);
    for (struct dirent *e; d && (e = readdir(d));) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        const char *p = in_tmp(e->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) rmdir(p);
        else unlink(p);
    }
    if (d) closedir(d);
    rmdir(tmpdir);
}

// Read a whole file into malloc'd memory.
static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(*len + 1);
    if (buf && fread(buf, 1, *len, f) != *len) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

static uint64_t fnv(const unsigned char *b, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t get_u64_le(const unsigned char *b) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | b[i];
    return v;
}

// Write a hand-made file: declared header length (little-endian), header_bytes bytes of
// header, then data_bytes bytes of float 1.0.
static void write_raw(const char *name, uint64_t declared_len, const char *header,
                      size_t header_bytes, size_t data_bytes) {
    FILE *f = fopen(in_tmp(name), "wb");
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)(declared_len >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(header, 1, header_bytes, f);
    float one = 1.0f;
    for (size_t i = 0; i < data_bytes / 4; i++) fwrite(&one, 4, 1, f);
    fclose(f);
}

static void write_file(const char *name, const char *header, size_t data_bytes) {
    write_raw(name, strlen(header), header, strlen(header), data_bytes);
}

// ---------------------------------------------------------------------------------------

static void test_round_trip(void) {
    // Tensors of 1, 2, 3 and 4 dimensions, a 0-element one, and awkward float values.
    static float wte[16 * 8], ln[64], attn[8 * 24], cube[2 * 3 * 4], w4[1 * 2 * 1 * 3];
    for (int i = 0; i < 16 * 8; i++) wte[i] = 0.01f * (float)i - 0.5f;
    for (int i = 0; i < 64; i++) ln[i] = 1.0f + (float)i / 64.0f;
    for (int i = 0; i < 8 * 24; i++) attn[i] = (float)((i * 7919) % 101) * 1e-3f;
    for (int i = 0; i < 24; i++) cube[i] = -(float)i;
    for (int i = 0; i < 6; i++) w4[i] = (float)i;
    ln[0] = -0.0f;
    ln[1] = NAN;
    ln[2] = INFINITY;
    ln[3] = 1e-40f;  // denormal
    StTensor saved[] = {
        {"wte", 2, {16, 8}, wte},
        {"h.0.ln_1.weight", 1, {64}, ln},
        {"h.0.attn.c_attn.weight", 2, {8, 24}, attn},
        {"empty", 1, {0}, NULL},
        {"cube", 3, {2, 3, 4}, cube},
        {"w4", 4, {1, 2, 1, 3}, w4},
    };
    const int n = (int)(sizeof saved / sizeof saved[0]);
    const char *meta = "{\"format\":\"pt\",\"note\":\"a \\\"quoted\\\" word\\n\"}";
    char err[512] = "";
    const char *path = in_tmp("model.safetensors");
    int rc = safetensors_save(path, saved, n, meta, err, sizeof err);
    EXPECT(rc == 0, "save of 6 tensors succeeds (%s)", err);
    EXPECT(count_files() == 1, "save leaves only the file itself, no temporary");

    // --- The file is what the format says.
    size_t len = 0;
    unsigned char *file = read_all(path, &len);
    EXPECT(file && len >= 8, "the saved file can be read back raw");
    if (!file) return;
    uint64_t hlen = get_u64_le(file);
    size_t data_total = (16 * 8 + 64 + 8 * 24 + 0 + 24 + 6) * 4;
    EXPECT(hlen % 8 == 0, "header length %llu is a multiple of 8, so data starts aligned",
           (unsigned long long)hlen);
    EXPECT(8 + hlen + data_total == len, "file size = 8 + header + data exactly (%zu bytes)", len);
    EXPECT(file[8] == '{', "header starts with '{' right after the length");
    size_t last = 8 + hlen - 1;
    while (last > 8 && file[last] == ' ') last--;
    EXPECT(file[last] == '}' && 8 + hlen - 1 - last < 8, "header is padded with fewer than 8 spaces");
    char jerr[256] = "";
    JsonValue *h = json_parse((const char *)file + 8, hlen, jerr, sizeof jerr);
    EXPECT(h && h->type == JSON_OBJECT && h->count == 7,
           "header is a JSON object of 6 tensors + __metadata__ (%s)", jerr);
    const JsonValue *m = json_get(h, "__metadata__");
    EXPECT(m && json_get(m, "format") && strcmp(json_get(m, "format")->string, "pt") == 0 &&
               strcmp(json_get(m, "note")->string, "a \"quoted\" word\n") == 0,
           "metadata is stored with its strings intact");
    // The data's checksum is the FNV-1a 64 of the data section's bytes, as this test hashes them.
    const JsonValue *sum = json_get(m, "data_fnv1a64");
    char want_sum[32];
    snprintf(want_sum, sizeof want_sum, "%016llx", (unsigned long long)fnv(file + 8 + hlen, data_total));
    EXPECT(sum && sum->type == JSON_STRING && strcmp(sum->string, want_sum) == 0,
           "metadata data_fnv1a64 is the FNV-1a 64 of the data section (%s, got %s)", want_sum,
           sum && sum->type == JSON_STRING ? sum->string : "none");
    uint64_t next = 0;
    int offsets_ok = 1, shapes_ok = 1;
    for (int i = 0; i < n; i++) {
        const JsonValue *e = json_get(h, saved[i].name);
        const JsonValue *off = json_get(e, "data_offsets"), *shape = json_get(e, "shape");
        if (!e || !off || !shape || strcmp(json_get(e, "dtype")->string, "F32") != 0) {
            shapes_ok = offsets_ok = 0;
            continue;
        }
        uint64_t count = 1;
        for (int d = 0; d < saved[i].ndim; d++) count *= (uint64_t)saved[i].shape[d];
        if (shape->count != (size_t)saved[i].ndim) shapes_ok = 0;
        for (int d = 0; d < saved[i].ndim && shapes_ok; d++)
            if (json_at(shape, (size_t)d)->number != (double)saved[i].shape[d]) shapes_ok = 0;
        if (json_at(off, 0)->number != (double)next ||
            json_at(off, 1)->number != (double)(next + 4 * count))
            offsets_ok = 0;
        else if (count && memcmp(file + 8 + hlen + next, saved[i].data, 4 * count) != 0)
            offsets_ok = 0;  // on a little-endian host the bytes are the floats themselves
        next += 4 * count;
    }
    EXPECT(shapes_ok, "every tensor is F32 with its shape in the header");
    EXPECT(offsets_ok, "data_offsets are contiguous in save order and point at the right bytes");
    json_free(h);
    free(file);

    // --- Load it back, asking in a different order, into fresh buffers.
    static float wte2[16 * 8], ln2[64], attn2[8 * 24], cube2[24], w42[6];
    StTensor loaded[] = {
        {"w4", 4, {1, 2, 1, 3}, w42},
        {"cube", 3, {2, 3, 4}, cube2},
        {"h.0.attn.c_attn.weight", 2, {8, 24}, attn2},
        {"empty", 1, {0}, NULL},
        {"h.0.ln_1.weight", 1, {64}, ln2},
        {"wte", 2, {16, 8}, wte2},
    };
    rc = safetensors_load(path, loaded, n, err, sizeof err);
    EXPECT(rc == 0, "load in another order succeeds (%s)", rc ? err : "");
    EXPECT(memcmp(wte, wte2, sizeof wte) == 0, "wte [16, 8] comes back bit for bit");
    EXPECT(memcmp(ln, ln2, sizeof ln) == 0, "h.0.ln_1.weight [64] comes back bit for bit (-0, NaN, inf, denormal)");
    EXPECT(memcmp(attn, attn2, sizeof attn) == 0, "c_attn [8, 24] comes back bit for bit");
    EXPECT(memcmp(cube, cube2, sizeof cube) == 0, "a 3-D tensor comes back bit for bit");
    EXPECT(memcmp(w4, w42, sizeof w4) == 0, "a 4-D tensor comes back bit for bit");

    // --- Saving again over the file replaces it; without metadata there is none.
    wte[0] = 123.0f;
    rc = safetensors_save(path, saved, n, NULL, err, sizeof err);
    EXPECT(rc == 0 && safetensors_load(path, loaded, n, err, sizeof err) == 0 && wte2[0] == 123.0f,
           "a second save replaces the file");
    file = read_all(path, &len);
    h = file ? json_parse((const char *)file + 8, get_u64_le(file), jerr, sizeof jerr) : NULL;
    m = json_get(h, "__metadata__");
    EXPECT(m && m->count == 1 && json_get(m, "data_fnv1a64"),
           "metadata_json NULL writes a __metadata__ holding the data's checksum alone");
    json_free(h);
    free(file);

    // --- What a save says it wrote is the file: its size and the FNV-1a 64 of its bytes.
    StWritten w = {0, 0};
    rc = safetensors_save_hashed(path, saved, n, meta, &w, err, sizeof err);
    file = read_all(path, &len);
    EXPECT(rc == 0 && file && w.bytes == len && w.fnv1a64 == fnv(file, len),
           "safetensors_save_hashed: %llu bytes and hash %016llx are the file's (%zu bytes, %016llx)",
           (unsigned long long)w.bytes, (unsigned long long)w.fnv1a64, len, file ? (unsigned long long)fnv(file, len) : 0ull);
    free(file);

    // --- A save that fails must leave the old file as it was.
    StTensor bad = {"wte", 0, {0}, wte};
    rc = safetensors_save(path, &bad, 1, NULL, err, sizeof err);
    EXPECT(rc == -1 && strstr(err, "ndim"), "save refuses ndim 0 ('%s')", err);
    EXPECT(safetensors_load(path, loaded, n, err, sizeof err) == 0 && count_files() == 1,
           "after a failed save the old file is still there and loads, and no temporary is left");
    unlink(path);
}

static void test_save_errors(void) {
    float x[4] = {1, 2, 3, 4};
    char err[512];
    StTensor dup[] = {{"a", 1, {4}, x}, {"a", 1, {4}, x}};
    EXPECT(safetensors_save(in_tmp("s.st"), dup, 2, NULL, err, sizeof err) == -1 &&
               strstr(err, "twice"), "save refuses two tensors with one name ('%s')", err);
    StTensor neg = {"a", 1, {-4}, x};
    EXPECT(safetensors_save(in_tmp("s.st"), &neg, 1, NULL, err, sizeof err) == -1 &&
               strstr(err, "negative"), "save refuses a negative dimension ('%s')", err);
    StTensor nodata = {"a", 1, {4}, NULL};
    EXPECT(safetensors_save(in_tmp("s.st"), &nodata, 1, NULL, err, sizeof err) == -1 &&
               strstr(err, "NULL"), "save refuses NULL data for a non-empty tensor ('%s')", err);
    StTensor meta_name = {"__metadata__", 1, {4}, x};
    EXPECT(safetensors_save(in_tmp("s.st"), &meta_name, 1, NULL, err, sizeof err) == -1,
           "save refuses a tensor named __metadata__");
    StTensor ok = {"a", 1, {4}, x};
    EXPECT(safetensors_save(in_tmp("s.st"), &ok, 1, "[1]", err, sizeof err) == -1 &&
               strstr(err, "object"), "save refuses metadata that is not an object ('%s')", err);
    EXPECT(safetensors_save(in_tmp("s.st"), &ok, 1, "{\"steps\":3}", err, sizeof err) == -1 &&
               strstr(err, "only strings"), "save refuses a non-string metadata value ('%s')", err);
    EXPECT(safetensors_save(in_tmp("s.st"), &ok, 1, "{\"a\":", err, sizeof err) == -1 &&
               strstr(err, "line 1"), "save refuses metadata that is not JSON ('%s')", err);
    EXPECT(safetensors_save(in_tmp("s.st"), &ok, 1, "{\"data_fnv1a64\":\"0000000000000000\"}", err, sizeof err) == -1 &&
               strstr(err, "writer's own"), "save refuses a caller's data_fnv1a64: the checksum is the writer's ('%s')", err);
    EXPECT(safetensors_save(in_tmp("no/such/dir/s.st"), &ok, 1, NULL, err, sizeof err) == -1 &&
               strstr(err, "cannot create"), "save into a missing directory fails cleanly ('%s')", err);
    EXPECT(count_files() == 0, "failed saves leave no files behind");
}

// The model the corrupt files are checked against: h.0.ln_1.weight [64] (256 bytes) then
// wte [4, 8] (128 bytes). The caller's buffers hold 7.0 and must still hold it after every
// refused load.
static float ln_buf[64], wte_buf[32];

static int buffers_untouched(void) {
    for (int i = 0; i < 64; i++)
        if (ln_buf[i] != 7.0f) return 0;
    for (int i = 0; i < 32; i++)
        if (wte_buf[i] != 7.0f) return 0;
    return 1;
}

static void fill_sevens(void) {
    for (int i = 0; i < 64; i++) ln_buf[i] = 7.0f;
    for (int i = 0; i < 32; i++) wte_buf[i] = 7.0f;
}

static void expect_load_fails(const char *path, const char *want, const char *what) {
    fill_sevens();  // each case starts from the same buffers, so one failure does not cascade
    StTensor expect[] = {{"h.0.ln_1.weight", 1, {64}, ln_buf}, {"wte", 2, {4, 8}, wte_buf}};
    char err[512] = "";
    int rc = safetensors_load(path, expect, 2, err, sizeof err);
    EXPECT(rc == -1 && strstr(err, want), "%s: refused with '%s' (got '%s')", what, want, err);
    EXPECT(buffers_untouched(), "%s: the model's tensors are untouched", what);
}

#define LN_OK "\"h.0.ln_1.weight\":{\"dtype\":\"F32\",\"shape\":[64],\"data_offsets\":[0,256]}"
#define WTE_OK "\"wte\":{\"dtype\":\"F32\",\"shape\":[4,8],\"data_offsets\":[256,384]}"

static void test_bad_files(void) {
    fill_sevens();
    // Control: the hand-made good file loads, so the failures below are about what changed.
    write_file("good", "{" LN_OK "," WTE_OK "}", 384);
    StTensor expect[] = {{"h.0.ln_1.weight", 1, {64}, ln_buf}, {"wte", 2, {4, 8}, wte_buf}};
    char err[512] = "";
    EXPECT(safetensors_load(in_tmp("good"), expect, 2, err, sizeof err) == 0 && ln_buf[0] == 1.0f &&
               wte_buf[31] == 1.0f, "control: a hand-written valid file (unpadded header) loads (%s)", err);

    expect_load_fails(in_tmp("nonexistent"), "cannot open", "missing file");
    expect_load_fails(tmpdir, "not a regular file", "a directory");
    FILE *f = fopen(in_tmp("short"), "wb");
    fwrite("\x10\0\0\0\0", 1, 5, f);
    fclose(f);
    expect_load_fails(in_tmp("short"), "too short", "file of 5 bytes");
    write_raw("long_len", 1000, "{" LN_OK "," WTE_OK "}", strlen("{" LN_OK "," WTE_OK "}"), 384);
    expect_load_fails(in_tmp("long_len"), "larger than the file", "header length past the end");
    // 2^63 would be an 8-exabyte malloc if trusted; ASan would abort on it.
    write_raw("huge_len", (uint64_t)1 << 63, "{}", 2, 0);
    expect_load_fails(in_tmp("huge_len"), "larger than the file", "header length 2^63");
    write_raw("zero_len", 0, "", 0, 0);
    expect_load_fails(in_tmp("zero_len"), "empty", "header length 0");
    write_file("not_json", "{\"wte\": {\"dtype\":", 0);
    expect_load_fails(in_tmp("not_json"), "not valid JSON: line 1, column", "header cut off mid-JSON");
    write_raw("nul_header", 10, "{}\0\0\0\0\0\0\0\0", 10, 0);
    expect_load_fails(in_tmp("nul_header"), "not valid JSON", "NUL bytes in the header");
    write_file("not_object", "[1,2]   ", 0);
    expect_load_fails(in_tmp("not_object"), "header is a JSON array, expected an object", "header is an array");
    write_file("missing", "{" WTE_OK "}", 384);
    expect_load_fails(in_tmp("missing"), "h.0.ln_1.weight: expected F32 [64], not in file",
                      "tensor missing from the file");
    write_file("shape", "{\"h.0.ln_1.weight\":{\"dtype\":\"F32\",\"shape\":[32],\"data_offsets\":[0,128]},"
                        "\"wte\":{\"dtype\":\"F32\",\"shape\":[4,8],\"data_offsets\":[128,256]}}", 256);
    expect_load_fails(in_tmp("shape"), "h.0.ln_1.weight: expected F32 [64], found F32 [32]", "wrong shape");
    write_file("rank", "{" LN_OK ",\"wte\":{\"dtype\":\"F32\",\"shape\":[32],\"data_offsets\":[256,384]}}", 384);
    expect_load_fails(in_tmp("rank"), "wte: expected F32 [4, 8], found F32 [32]", "same size, wrong rank");
    write_file("dtype", "{\"h.0.ln_1.weight\":{\"dtype\":\"F16\",\"shape\":[64],\"data_offsets\":[0,128]},"
                        "\"wte\":{\"dtype\":\"F32\",\"shape\":[4,8],\"data_offsets\":[128,256]}}", 256);
    expect_load_fails(in_tmp("dtype"), "expected F32 [64], found F16 [64]", "F16 instead of F32");
    write_file("extra", "{" LN_OK "," WTE_OK ",\"lm_head.weight\":{\"dtype\":\"F32\",\"shape\":[2],"
                        "\"data_offsets\":[384,392]}}", 392);
    expect_load_fails(in_tmp("extra"), "'lm_head.weight' (F32 [2]) is in the file but not in this model",
                      "unexpected extra tensor");
    write_file("dup", "{" LN_OK "," WTE_OK "," WTE_OK "}", 384);
    expect_load_fails(in_tmp("dup"), "'wte' appears twice", "tensor listed twice");
    write_file("past_end", "{" LN_OK "," WTE_OK "}", 300);
    expect_load_fails(in_tmp("past_end"), "wte: data_offsets [256, 384] run past the end",
                      "data_offsets beyond the data (truncated file)");
    write_file("backwards", "{\"h.0.ln_1.weight\":{\"dtype\":\"F32\",\"shape\":[64],"
                            "\"data_offsets\":[256,0]}," WTE_OK "}", 384);
    expect_load_fails(in_tmp("backwards"), "end before they begin", "data_offsets end < begin");
    write_file("overlap", "{" LN_OK ",\"wte\":{\"dtype\":\"F32\",\"shape\":[4,8],"
                          "\"data_offsets\":[128,256]}}", 384);
    expect_load_fails(in_tmp("overlap"), "overlap", "wte inside ln_1's bytes");
    write_file("span", "{" LN_OK ",\"wte\":{\"dtype\":\"F32\",\"shape\":[4,8],"
                       "\"data_offsets\":[256,388]}}", 388);
    expect_load_fails(in_tmp("span"), "span 132 bytes, but F32 [4, 8] needs 128",
                      "data_offsets not matching the shape's size");
    write_file("gap", "{" LN_OK ",\"wte\":{\"dtype\":\"F32\",\"shape\":[4,8],"
                      "\"data_offsets\":[264,392]}}", 392);
    expect_load_fails(in_tmp("gap"), "gap of 8 unused bytes", "a gap between tensors");
    write_file("trailing", "{" LN_OK "," WTE_OK "}", 400);
    expect_load_fails(in_tmp("trailing"), "data section is 400 bytes but the tensors cover 384",
                      "bytes after the last tensor");
    write_file("str_off", "{\"h.0.ln_1.weight\":{\"dtype\":\"F32\",\"shape\":[64],"
                          "\"data_offsets\":[\"0\",256]}," WTE_OK "}", 384);
    expect_load_fails(in_tmp("str_off"), "\"data_offsets\" must be [begin, end]", "offset as a string");
    write_file("neg_off", "{\"h.0.ln_1.weight\":{\"dtype\":\"F32\",\"shape\":[64],"
                          "\"data_offsets\":[-8,248]}," WTE_OK "}", 384);
    expect_load_fails(in_tmp("neg_off"), "\"data_offsets\" must be [begin, end]", "negative offset");
    write_file("big_dim", "{\"h.0.ln_1.weight\":{\"dtype\":\"F32\",\"shape\":[1e300],"
                          "\"data_offsets\":[0,256]}," WTE_OK "}", 384);
    expect_load_fails(in_tmp("big_dim"), "shape entry 0 is not a non-negative integer", "dimension 1e300");
    write_file("bad_meta", "{\"__metadata__\":{\"step\":3}," LN_OK "," WTE_OK "}", 384);
    expect_load_fails(in_tmp("bad_meta"), "metadata value \"step\" is not a string", "numeric metadata");
    write_file("entry_type", "{\"h.0.ln_1.weight\":[0,256]," WTE_OK "}", 384);
    expect_load_fails(in_tmp("entry_type"), "header entry is a JSON array", "tensor entry not an object");
}

// Every byte of a saved file's data, flipped one at a time (one bit), is refused as damaged,
// and the caller's tensors stay as they were. Broken on purpose (the checksum not checked):
// every flip loads, the wrong weight with it.
static void test_data_checksum(void) {
    fill_sevens();
    float ln[64], wte[32];
    for (int i = 0; i < 64; i++) ln[i] = 0.5f + (float)i;
    for (int i = 0; i < 32; i++) wte[i] = -(float)i / 3.0f;
    StTensor saved[] = {{"h.0.ln_1.weight", 1, {64}, ln}, {"wte", 2, {4, 8}, wte}};
    char err[512] = "";
    const char *path = in_tmp("flips.safetensors");
    EXPECT(safetensors_save(path, saved, 2, "{\"format\":\"shardlab-gpt\"}", err, sizeof err) == 0,
           "checksum: a file of two tensors saved (%s)", err);
    size_t len;
    unsigned char *file = read_all(path, &len);
    if (!file) return;
    size_t data_at = 8 + (size_t)get_u64_le(file);
    int refused = 0, untouched = 0, named = 0, flips = 0;
    for (size_t at = data_at; at < len; at++, flips++) {
        file[at] ^= 0x10;
        FILE *f = fopen(in_tmp("flipped"), "wb");
        fwrite(file, 1, len, f);
        fclose(f);
        file[at] ^= 0x10;
        fill_sevens();
        StTensor expect[] = {{"h.0.ln_1.weight", 1, {64}, ln_buf}, {"wte", 2, {4, 8}, wte_buf}};
        refused += safetensors_load(in_tmp("flipped"), expect, 2, err, sizeof err) == -1;
        named += strstr(err, "flipped") && strstr(err, "damaged") && strstr(err, "data_fnv1a64");
        untouched += buffers_untouched();
    }
    EXPECT(flips == 384 && refused == flips && named == flips,
           "checksum: each of the %d bytes of data flipped is refused, naming the file and the damage (%d refused, "
           "%d named; '%s')", flips, refused, named, err);
    EXPECT(untouched == flips, "checksum: no refused load touched the caller's tensors (%d of %d)", untouched, flips);
    // The checksum itself damaged into something that is not a checksum.
    char *sum = strstr((char *)file + 8, "\"data_fnv1a64\":\"");
    if (sum) {
        sum[strlen("\"data_fnv1a64\":\"")] = 'x';
        FILE *f = fopen(in_tmp("badsum"), "wb");
        fwrite(file, 1, len, f);
        fclose(f);
        expect_load_fails(in_tmp("badsum"), "not 16 hex digits", "a checksum that is not hex");
    }
    free(file);
    // Without a checksum (a file from another writer) the data is loaded as it is.
    write_file("no_sum", "{\"__metadata__\":{\"format\":\"pt\"}," LN_OK "," WTE_OK "}", 384);
    StTensor expect[] = {{"h.0.ln_1.weight", 1, {64}, ln_buf}, {"wte", 2, {4, 8}, wte_buf}};
    EXPECT(safetensors_load(in_tmp("no_sum"), expect, 2, err, sizeof err) == 0 && ln_buf[0] == 1.0f,
           "checksum: a file whose metadata has none (as Hugging Face writes them) loads (%s)", err);
    unlink(path);
    unlink(in_tmp("flipped"));
    unlink(in_tmp("badsum"));
    unlink(in_tmp("no_sum"));
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/shardlab_st_XXXXXX");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_round_trip();
    test_save_errors();
    test_bad_files();
    test_data_checksum();
    remove_tmpdir();
    struct stat st;
    EXPECT(stat(tmpdir, &st) != 0, "the temporary directory %s is removed", tmpdir);
    return test_done();
}
