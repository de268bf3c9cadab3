// dataset.h — a dataset of fixed-size items stored in a file, and the global sampler that
// orders its items into epochs and global batches (the data-sharding lab, labs/04-data-sharding/shard.c; the
// sampler's permutation, a student's part, is 04-data-sharding/sampler.c).
//
// The dataset: D items of S bytes, item i being bytes [i S, (i+1) S) of a file. For the GPT,
// S = T + 1: a sequence of T inputs and, shifted by one, its T targets. D = floor(file bytes
// / S), or fewer when the caller caps it; the bytes after the last whole item are never used.
// The file is the storage: a rank "holds" an item once it has read its bytes into memory.
//
// The global sampler: one order for everybody, which every rank can compute on its own.
//   - epoch e is a permutation of 0..D-1, drawn by Fisher-Yates from a stream seeded by
//     (seed, e): each epoch visits every item once, in a new order;
//   - global batch b of the epoch is positions [b B, (b+1) B) of that list;
//   - drop_last: an epoch has floor(D/B) batches, and its last D mod B positions are not used
//     (those items wait for another epoch, where they land elsewhere in the order).
// With a Mixture (k sources, weights w_s, temperature tau) an epoch is instead D draws WITH
// replacement: a source s with probability w_s^(1/tau) / sum_j w_j^(1/tau), then an item
// uniformly within that source. tau = 1 samples in proportion to the weights; a large tau
// flattens towards uniform over sources (how multilingual corpora up-sample small languages).
#ifndef SHARDLAB_DATASET_H
#define SHARDLAB_DATASET_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "common/harness/args.h"  // defines: train_args_parse()
#include "common/model/rng.h"     // defines: Rng, rng_below()

typedef struct {
    int fd;
    char path[1024];
    uint64_t file_bytes;
    int64_t available;  // whole items in the file: floor(file_bytes / item_bytes)
    int64_t items;      // D: the items used (available, or the cap)
    int item_bytes;     // S
    // NULL, or where every dataset_read() is recorded as a line "FIRST COUNT": the items read
    // from the file, in the order they were read (the data-sharding lab lists a sampler's
    // reads, so that the grader sees what it read, not what it should have).
    FILE *read_log;
} Dataset;

// Opens the file and counts its items; cap > 0 uses only the first cap of them. Returns 0,
// or -1 with a message in err (cannot open, fewer bytes than one item).
int dataset_open(Dataset *ds, const char *path, int item_bytes, int64_t cap, char *err, size_t errlen);
// Reads items first .. first+count-1 (count S bytes, back to back) into out; dies on error.
// Recorded in ds->read_log when there is one.
void dataset_read(const Dataset *ds, int64_t first, int64_t count, uint8_t *out);
void dataset_close(Dataset *ds);
// Writes n bytes to path under a temporary name, then renames it: a reader never sees half
// a file. Dies with a message on failure.
void dataset_write_file(const char *path, const uint8_t *bytes, size_t n);

// A data mixture: the D items cut into k contiguous sources of floor(D/k) items, the last
// taking the remainder, and each source's probability of being drawn.
#define MIXTURE_MAX_SOURCES 64
typedef struct {
    int k;
    double temperature;
    double weight[MIXTURE_MAX_SOURCES];  // as given
    double prob[MIXTURE_MAX_SOURCES];    // w^(1/tau), normalised
    int64_t first[MIXTURE_MAX_SOURCES], size[MIXTURE_MAX_SOURCES];  // after mixture_layout()
} Mixture;

// "w1,w2,...,wk": k >= 1 non-negative numbers, not all zero; temperature > 0. Returns 0, or
// -1 with a message in err (empty, not a number, negative, all zero, too many, a positive
// weight whose probability is too small for a double, a temperature that is not positive).
int mixture_parse(Mixture *m, const char *text, double temperature, char *err, size_t errlen);
// Cuts D items into the k sources. -1 with a message if a source with weight > 0 is empty.
int mixture_layout(Mixture *m, int64_t D, char *err, size_t errlen);
// The source item `index` belongs to.
int mixture_source_of(const Mixture *m, int64_t index);

// The stream epoch `epoch` (0-based) draws from, seeded by (seed, epoch) alone.
Rng sampler_stream(uint64_t seed, int64_t epoch);
// The mixture's D draws with replacement from r: a source by its probability, then an item
// of that source uniformly (rng_below).
void mixture_draws(int64_t *out, int64_t D, Rng *r, const Mixture *mix);
// The D item indices of epoch `epoch` in order (04-data-sharding/sampler.c): with mix NULL a permutation
// of 0..D-1, by Fisher-Yates from sampler_stream(seed, epoch); with a mixture, its draws from
// that stream. Depends only on (D, seed, epoch, mix).
void sampler_epoch(int64_t *out, int64_t D, uint64_t seed, int64_t epoch, const Mixture *mix);

// FNV-1a 64 of n indices, each written as 8 little-endian bytes (the same on every machine).
uint64_t indices_hash(const int64_t *idx, int n);

// Collectives move floats: n bytes travel as this many 4-byte words, the last one padded.
static inline size_t words_for_bytes(size_t n) { return (n + 3) / 4; }

// The data-sharding lab's own options (labs/04-data-sharding/shard.c; what each is: common/harness/catalog.c), kept here
// beside the sampler they configure so that the lab and the grader (which checks a shard
// run's config before passing it to a reference run) read them the same way.
typedef struct {
    const char *strategy, *weights, *items;
    double temperature;
} ShardArgs;
enum { SHARD_NOPTIONS = 4 };
extern const char *const SHARD_STRATEGIES[3];  // "slice", "sampler", "dispatch"
// Each option bound to its field of s (train_args_parse's own options), and s at the catalog's
// defaults.
void shard_args_bind(ShardArgs *s, LabBind out[SHARD_NOPTIONS]);
void shard_args_defaults(ShardArgs *s);
// What the table's types cannot say: the strategy is one of SHARD_STRATEGIES (its index in
// *strategy), --items a whole number >= 1 or "all" (0 in *items), the weights a mixture
// (parsed into *mix) and --temperature other than 1 only with them. 0, or -1 with the reason
// in why.
int shard_args_check(const ShardArgs *s, int *strategy, long long *items, Mixture *mix, char *why, size_t n);

#endif
