// safetensors.h — read and write the safetensors format (the weights of --init and --save).
//
// The format: an 8-byte little-endian header length N, then N bytes of JSON mapping each
// tensor name to {"dtype":"F32","shape":[...],"data_offsets":[begin,end]} (offsets relative
// to the end of the header, tensors packed without gaps), optionally "__metadata__" with
// string values; then the raw little-endian data.
//
// The format has no checksum, so a flipped bit in the data loads as a wrong weight. Every
// file shardlab writes carries one in its metadata: "data_fnv1a64", the FNV-1a 64 of the
// whole data section, 16 lowercase hex digits. The loader checks it where it is present; a
// file without it (from Hugging Face, say) loads unchecked, as any reader would load it.
#ifndef SHARDLAB_SAFETENSORS_H
#define SHARDLAB_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define ST_MAX_DIMS 4
#define ST_CHECKSUM_KEY "data_fnv1a64"

typedef struct {
    const char *name;            // e.g. "h.0.attn.c_attn.weight"
    int ndim;                    // 1..ST_MAX_DIMS
    int64_t shape[ST_MAX_DIMS];  // row-major
    float *data;                 // F32, product(shape) elements (may be NULL if that is 0)
} StTensor;

// Write tensors[0..n) in that order to path (via a temporary file renamed into place, so a
// failed save never leaves a half-written file under the real name). metadata_json is NULL
// or a JSON object of string values to store as "__metadata__", beside ST_CHECKSUM_KEY (which
// the caller may not set). Returns 0, or -1 with a message in err.
int safetensors_save(const char *path, const StTensor *tensors, int n, const char *metadata_json,
                     char *err, size_t errlen);

// What a save wrote: the file's size and the FNV-1a 64 of its bytes, hashed as they went
// to the file (never read back: by then the name may hold another writer's file).
typedef struct {
    uint64_t bytes, fnv1a64;
} StWritten;
// safetensors_save(), and what it wrote into *written.
int safetensors_save_hashed(const char *path, const StTensor *tensors, int n, const char *metadata_json,
                            StWritten *written, char *err, size_t errlen);

// Read path and fill each expect[i].data with the tensor of that name. Every expected tensor
// must be present with dtype F32 and exactly the expected shape; a tensor in the file that is
// not expected is also an error (the file is for another model). Returns 0, or -1 with a
// message in err naming the file, the tensor and the expected vs found shape/dtype, or what
// is corrupt (bad header length, bad JSON, offsets outside the file or overlapping, a data
// checksum that does not match, ...). On error no expect[i].data is modified. The tensors
// must tile the data section exactly (no gaps, no trailing bytes), as the reference reader
// requires. To keep the promise above, the whole data section is read into a temporary
// buffer first, so a load briefly needs the file's size in extra memory.
int safetensors_load(const char *path, StTensor *expect, int n, char *err, size_t errlen);

#endif
