// coverage.c — data.coverage: what every rank of a shard run read and trained on, against
// the grader's own epoch order (solutions.c: not 04-data-sharding/sampler.c, a student's part) and the
// dataset's item hashes.
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "04-data-sharding/dataset.h"
#include "common/harness/check.h"
#include "grade_internal.h"
#include "solutions.h"

// ---- data sharding: what every rank read and trained on ------------------------------------
//
// Step s (1-based) is batch b = (s-1) mod E of epoch e = (s-1) / E, E = floor(D/B); rank r of
// N takes positions [b B + r B/N, b B + (r+1) B/N) of the epoch's order (dataset.h), which
// the grader computes itself. Graded from what the ranks did, not from what they meant to do:
//   - consumed: each line of indices-rank-<r>-epoch-<e>.txt ("step position index bytes")
//     names a position of rank r's part of the step's batch, in order, and `bytes`, the
//     FNV-1a 64 of the sequence the rank trained on there, is the hash of the dataset's item
//     at that position of the order (the dataset: the run's dataset.bin, or --data's file). So
//     a sampler that fetched another rank's items, or the same item twice, is caught by what
//     reached the model, whatever its list says;
//   - read (--strategy sampler, which reads only its own part): reads-rank-<r>-epoch-<e>.txt
//     ("first count" per dataset_read) holds exactly the items of rank r's part of the epoch,
//     each as often as the order has it there: nothing of another rank's, nothing twice.
// Then every position of every batch is trained on once, by one rank, and (without a mixture)
// no item comes twice in an epoch.

// The dataset's items as FNV-1a 64 hashes of their S bytes (NULL with a reason in why).
static uint64_t *item_hashes(const GradeRun *run, int64_t D, int S, char *why, size_t n) {
    const char *data = grade_cfg_str(run, "data", "synthetic");
    char path[sizeof run->dir + 64];
    if (!strcmp(data, "synthetic")) snprintf(path, sizeof path, "%s/dataset.bin", run->dir);
    else snprintf(path, sizeof path, "%s", data);
    FILE *f = file_fopen_regular(path);
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0) {
        snprintf(why, n, "cannot read the dataset the run trained on (%.300s): %s", path, file_error(errno));
        if (f) fclose(f);
        return NULL;
    }
    if ((double)st.st_size < (double)D * S) {  // (before allocating anything D long)
        snprintf(why, n, "the dataset %.300s has fewer than the config's %lld items of %d bytes", path, (long long)D, S);
        fclose(f);
        return NULL;
    }
    uint64_t *h = malloc_check(sizeof *h * (size_t)D);
    uint8_t *item = malloc_check((size_t)S);
    for (int64_t i = 0; i < D; i++) {
        if (fread(item, 1, (size_t)S, f) != (size_t)S) {
            snprintf(why, n, "the dataset %.300s has fewer than the config's %lld items of %d bytes", path, (long long)D, S);
            free(h), h = NULL;
            break;
        }
        h[i] = fnv1a64(item, (size_t)S, FNV1A64_INIT);
    }
    free(item);
    fclose(f);
    return h;
}

// The item whose bytes hash to h (-1 if none): a linear search, only run on a failure.
static int64_t item_of_hash(const uint64_t *hashes, int64_t D, uint64_t h) {
    for (int64_t i = 0; i < D; i++)
        if (hashes[i] == h) return i;
    return -1;
}

// The first position of item i in the order (-1 if it is not there).
static int64_t position_of(const int64_t *order, int64_t D, int64_t i) {
    for (int64_t p = 0; p < D; p++)
        if (order[p] == i) return p;
    return -1;
}

// Rank r's reads of epoch e against its part of the order: 1, or 0 with the check's text set.
static int reads_are_its_part(const GradeRun *run, GradeCheck *c, int r, int64_t e, const int64_t *order, int64_t D,
                              int64_t B, int64_t per, int64_t *want, int64_t *got) {
    char path[sizeof run->dir + 64], line[256];
    snprintf(path, sizeof path, "%s/reads-rank-%d-epoch-%lld.txt", run->dir, r, (long long)e);
    FILE *f = file_fopen_regular(path);
    if (!f) {
        MEASURED("no reads-rank-%d-epoch-%lld.txt", r, (long long)e);
        REASON("a sampler lists the items it read from the dataset file, per epoch");
        return 0;
    }
    memset(want, 0, sizeof *want * (size_t)D), memset(got, 0, sizeof *got * (size_t)D);
    int64_t E = D / B, reads = 0, mine = E * per;
    for (int64_t b = 0; b < E; b++)
        for (int64_t k = 0; k < per; k++) want[order[b * B + r * per + k]]++;
    int ok = 1;
    while (ok && fgets(line, sizeof line, f)) {
        long long first, count;
        if (line[0] == '#') continue;
        if (sscanf(line, "%lld %lld", &first, &count) != 2 || first < 0 || count < 0 || first + count > D) {
            MEASURED("reads-rank-%d-epoch-%lld.txt: '%.60s'", r, (long long)e, line);
            REASON("not 'first count' of items of the dataset");
            ok = 0;
        }
        for (long long i = first; ok && i < first + count; i++) got[i]++, reads++;
    }
    fclose(f);
    if (!ok) return 0;
    // An item read more often than its part has it (another rank's, or one read twice), else
    // one read less often.
    int64_t i = 0;
    while (i < D && got[i] <= want[i]) i++;
    if (i == D)
        for (i = 0; i < D && got[i] == want[i]; i++) {
        }
    if (i < D) {
        int64_t p = position_of(order, D, i);
        MEASURED("rank %d, epoch %lld: read %lld items from the file (its part of the epoch is %lld), item %lld %lld "
                 "time%s", r, (long long)e, (long long)reads, (long long)mine, (long long)i, (long long)got[i],
                 got[i] == 1 ? "" : "s");
        if (p < 0 || p >= E * B)
            EXPECTED("item %lld: no read (the order does not use it this epoch)", (long long)i);
        else
            EXPECTED("item %lld read %lld time%s: it is at position %lld, %s part of batch %lld", (long long)i,
                     (long long)want[i], want[i] == 1 ? "" : "s", (long long)p,
                     p % B / per == r ? "its own" : "another rank's", (long long)(p / B));
        REASON(got[i] > want[i] ? "the sampler read items that are not its part of the epoch, or read one twice: "
                                  "each rank reads only what it trains on"
                                : "the sampler did not read an item of its part of the epoch");
        return 0;
    }
    return 1;
}

void check_coverage(Ctx *x, GradeCheck *c) {
    const GradeRun *run = x->run;
    int64_t D = grade_cfg_int(run, "items", 0), B = grade_cfg_int(run, "batch", 0);
    int N = run->world, S = grade_cfg_int(run, "seq", 0) + 1;
    double seed_number = grade_cfg_num(run, "seed", 0);  // (a double of 2^64 or more has no uint64_t)
    uint64_t seed = seed_number >= 0 && seed_number < 0x1p64 ? (uint64_t)seed_number : 0;
    if (D < 1 || D > (1ll << 31) || B < N || B % N || D < B || S < 2 || S > 65537) {
        MEASURED("items %lld, batch %lld, seq %d", (long long)D, (long long)B, S - 1);
        REASON("the config's items, batch and seq do not describe a dataset this world can shard");
        return;
    }
    Mixture mix, *mixp = NULL;
    const char *weights = grade_cfg_str(run, "weights", NULL);
    char err[160];
    if (weights) {
        if (mixture_parse(&mix, weights, grade_cfg_num(run, "temperature", 1), err, sizeof err) < 0 ||
            mixture_layout(&mix, D, err, sizeof err) < 0) {
            MEASURED("weights \"%s\"", weights);
            REASON("the config's mixture is not valid: %s", err);
            return;
        }
        mixp = &mix;
    }
    uint64_t *hashes = item_hashes(run, D, S, c->reason, sizeof c->reason);
    if (!hashes) {
        MEASURED("no dataset");
        return;
    }
    int sampler = !strcmp(grade_cfg_str(run, "strategy", "sampler"), "sampler");
    int64_t E = D / B, per = B / N, epoch_loaded = -1;
    int64_t *order = malloc_check(sizeof(int64_t) * (size_t)D), *want = malloc_check(sizeof(int64_t) * (size_t)D),
            *got = malloc_check(sizeof(int64_t) * (size_t)D);
    EXPECTED("each rank: trained on the items at positions [b B + r B/N, b B + (r+1) B/N) of the epoch's order, "
             "every step%s", sampler ? "; read exactly those from the file" : "");
    FILE *f = NULL;
    for (int r = 0; r < N; r++) {
        int64_t file_epoch = -1, line = 0;
        for (int64_t step = run->first_step; step <= run->last_step; step++) {
            int64_t e = (step - 1) / E, b = (step - 1) % E;
            if (e != epoch_loaded) grade_epoch_order(order, D, seed, e, mixp), epoch_loaded = e;
            char path[sizeof run->dir + 64];
            if (e != file_epoch) {
                if (f) fclose(f);
                f = NULL;
                if (sampler && !reads_are_its_part(run, c, r, e, order, D, B, per, want, got)) goto out;
                snprintf(path, sizeof path, "%s/indices-rank-%d-epoch-%lld.txt", run->dir, r, (long long)e);
                f = file_fopen_regular(path);
                file_epoch = e, line = 0;
                if (!f) {
                    MEASURED("no indices-rank-%d-epoch-%lld.txt", r, (long long)e);
                    REASON("the lab must list the items each rank consumed, per epoch");
                    goto out;
                }
            }
            for (int64_t k = 0; k < per; k++) {
                char buf[256];
                long long st, pos, idx;
                unsigned long long bytes;
                do {  // a line, without what does not fit (the header line is long)
                    if (!fgets(buf, sizeof buf, f)) buf[0] = 0;
                    if (buf[0] && !strchr(buf, '\n'))
                        for (int ch; (ch = fgetc(f)) != EOF && ch != '\n';) {
                        }
                    line++;
                } while (buf[0] == '#');
                int64_t want_pos = b * B + r * per + k;
                if (sscanf(buf, "%lld %lld %lld %llx", &st, &pos, &idx, &bytes) != 4) {
                    MEASURED("indices-rank-%d-epoch-%lld.txt line %lld: %s", r, (long long)e, (long long)line,
                             buf[0] ? "not 'step position index bytes'" : "ends early");
                    REASON("rank %d's list stops before step %lld", r, (long long)step);
                    goto out;
                }
                int64_t item = order[want_pos];
                if (st != step || pos != want_pos || idx != item) {
                    MEASURED("rank %d, step %lld: position %lld, item %lld", r, (long long)step, pos, idx);
                    EXPECTED("position %lld, item %lld (rank %d's part of batch %lld of epoch %lld)", (long long)want_pos,
                             (long long)item, r, (long long)b, (long long)e);
                    REASON(pos != want_pos ? "the rank took a part of the global batch that is not its own"
                                           : "the rank consumed another item than the epoch's order puts there");
                    goto out;
                }
                if (bytes != hashes[item]) {
                    int64_t other = item_of_hash(hashes, D, bytes), p = other < 0 ? -1 : position_of(order, D, other);
                    if (other < 0) MEASURED("rank %d, step %lld, position %lld: trained on bytes that are no item of the "
                                            "dataset", r, (long long)step, (long long)want_pos);
                    else if (p >= b * B && p < (b + 1) * B)
                        MEASURED("rank %d, step %lld, position %lld: trained on item %lld, at position %lld of this "
                                 "batch (rank %lld's part)", r, (long long)step, (long long)want_pos, (long long)other,
                                 (long long)p, (long long)(p % B / per));
                    else
                        MEASURED("rank %d, step %lld, position %lld: trained on item %lld (position %lld of the "
                                 "epoch's order, not this batch)", r, (long long)step, (long long)want_pos,
                                 (long long)other, (long long)p);
                    EXPECTED("item %lld's bytes (position %lld of epoch %lld's order: rank %d's part of batch %lld)",
                             (long long)item, (long long)want_pos, (long long)e, r, (long long)b);
                    REASON("what reached the model is not the item the sampler's order puts at this rank's position: "
                           "the sampler read the wrong items");
                    goto out;
                }
            }
        }
        if (f) fclose(f);
        f = NULL;
    }
    MEASURED("%d ranks x %lld steps: every position of every batch trained on once, the epoch's items in order%s", N,
             (long long)(run->last_step - run->first_step + 1), sampler ? "; each rank read exactly its part" : "");
    c->pass = 1;
out:
    if (f) fclose(f);
    free(order), free(want), free(got), free(hashes);
}
