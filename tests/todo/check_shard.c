// check_shard.c — the checks of the data-sharding lab's two regions: `make check
// TODO=shard-permutation` (labs/04-data-sharding/sampler.c) and `make check TODO=shard-read` (labs/04-data-sharding/shard.c).
//
// shard-permutation: sampler_epoch() without a mixture, for D = 0, 1, 2, 7, 10 and 1000 items,
// epochs 0, 1 and 5 of two seeds. In that order, each order must
//   - write nothing past out[D-1] (D = 0: nothing at all);
//   - be a permutation: every item 0..D-1 exactly once. The buffer is handed over holding the
//     items in reverse, as the lab hands over the previous epoch's order, so a shuffle that
//     forgets to start from 0..D-1 gives a permutation that is the wrong one, and is named;
//   - be the same on a second call (every rank computes it on its own), and differ from
//     epoch to epoch (D >= 7);
//   - be, position by position, Fisher-Yates from the end as written here: out = 0..D-1, then
//     for i = D-1 down to 1 swap out[i] with out[rng_below(&r, i + 1)], r the epoch's stream
//     (sampler_stream(seed, epoch)). The exact order matters, not only its fairness: every
//     rank and the grader's data.coverage draw the same one. On a difference the check tries
//     the usual wrong shuffles on the same stream and says which one the order is: j drawn
//     from all D positions (the biased shuffle), i walking up, Sattolo's j < i, the previous
//     contents shuffled instead of 0..D-1, a stream seeded by the seed alone.
// A mixture's epoch (--weights) is D draws that sampler_epoch hands to mixture_draws before
// the region begins, so the region never sees it: it is not checked here.
//
// shard-read: loader_start_epoch() of labs/04-data-sharding/shard.c (static: the file is included here, its
// main renamed) with the sampler strategy, for N = 1..8 ranks, every rank, three shapes of
// global batch B = N x B/N: B/N = 2 with a tail of D mod B = B - 1 positions that drop_last
// leaves out (the largest tail), B/N = 1 with a tail of 1, and B/N = 3 with an empty tail;
// two epochs each, so that the second must replace the first. The region reads and sends
// nothing to other ranks, so each rank's Loader is built here in turn (loader_open, as the
// lab does), without processes. The epoch's order is the check's own (sampler_epoch is
// renamed, for the included file, to a function here that gives a fixed scrambled permutation
// per epoch with no item at its own position), so this check does not need the permutation
// region, and every item's position is known. The items of the dataset file (written here,
// in a temporary folder removed at the end) say which item they are, so a wrong one in
// L->mine is named: rank, epoch, batch, position in the rank's part, the item expected and the
// one read. Then why: the whole part is compared with the usual wrong ones (rank r starting at
// position r of each batch, so the parts overlap; rank 0's part for every rank; the position
// read as the item; the order read straight through; a block of E (B/N) positions in a row;
// every batch into the same B/N slots), else the one item is placed (another rank's part,
// another batch, the dropped tail). Then L->held, and what the rank read through
// dataset_read: the dataset records every read (Dataset.read_log, the reads-rank-r-epoch-e.txt
// the grader's data.coverage reads), so a rank that reads whole global batches to keep its
// part, right bytes N times over, is caught by what it read: exactly its part's E (B/N)
// items, each as often as its part has it, nothing else.
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "04-data-sharding/dataset.h"
#include "common/harness/check.h"
#include "common/model/rng.h"
#include "todo.h"

// =============================================================================================
// shard-permutation
// =============================================================================================

// How a shuffle walks and draws: Fisher-Yates, and the usual ways to get it wrong.
typedef enum { FISHER_YATES, FROM_ALL_D, WALKING_UP, SATTOLO, FROM_OLD_CONTENTS, SEED_ONLY, NSHUFFLES } Shuffle;

static const char *const SHUFFLE_WORDS[NSHUFFLES] = {
    "Fisher-Yates",
    "the biased shuffle: j drawn from all D positions (rng_below(&r, D)) instead of 0..i (rng_below(&r, i + 1)); "
    "some orders then come out more often than others",
    "i walking up instead of down (j from rng_below(&r, i + 1) for i = 1, 2, ..): the same draws, another order; "
    "walk i from D-1 down to 1",
    "Sattolo's shuffle: j = rng_below(&r, i), which never leaves out[i] where it is; draw j from 0..i, "
    "rng_below(&r, i + 1)",
    "Fisher-Yates applied to what out held before the call (here the items in reverse; in the lab, the previous "
    "epoch's order): start from 0..D-1 in order",
    "Fisher-Yates on a stream seeded by the seed alone, the same for every epoch: draw from r, the epoch's stream "
    "sampler_stream(seed, epoch)",
};

// The shuffle `how` of D items into out, on the stream of (seed, epoch); before: what out held.
static void shuffle(Shuffle how, int64_t *out, int64_t D, uint64_t seed, int64_t epoch, const int64_t *before) {
    Rng r = sampler_stream(seed, epoch);
    if (how == SEED_ONLY) rng_seed(&r, seed);
    for (int64_t i = 0; i < D; i++) out[i] = how == FROM_OLD_CONTENTS ? before[i] : i;
    for (int64_t step = 0; step + 1 < D; step++) {
        int64_t i = how == WALKING_UP ? step + 1 : D - 1 - step, j;
        if (how == FROM_ALL_D) j = rng_below(&r, D);
        else if (how == SATTOLO) j = rng_below(&r, i);
        else j = rng_below(&r, i + 1);
        int64_t kept = out[i];
        out[i] = out[j], out[j] = kept;
    }
}

#define SENTINEL (-77)  // past the end of out: must stay as it is

// sampler_epoch into a buffer of D + 4 that holds D-1 .. 0 then sentinels; checks that nothing
// past D was written and that out is a permutation, and returns it (malloc'd).
static int64_t *epoch_order(int64_t D, uint64_t seed, int64_t epoch, const char *head) {
    int64_t *out = malloc((size_t)(D + 4) * sizeof *out);
    char *seen = calloc((size_t)D + 1, 1);
    if (!out || !seen) todo_fail("out of memory");
    for (int64_t i = 0; i < D; i++) out[i] = D - 1 - i;
    for (int64_t i = D; i < D + 4; i++) out[i] = SENTINEL;
    todo_context("%s", head);
    sampler_epoch(out, D, seed, epoch, NULL);
    for (int64_t i = D; i < D + 4; i++)
        if (out[i] != SENTINEL)
            todo_fail("%s: out[%lld] was written (it now holds %lld), past the D = %lld positions out has%s", head,
                      (long long)i, (long long)out[i], (long long)D,
                      D == 0 ? ": with no items there is nothing to write or to swap" : ": positions are 0..D-1");
    for (int64_t i = 0; i < D; i++)
        if (out[i] < 0 || out[i] >= D)
            todo_fail("%s: position %lld holds %lld, which is not an item (they are 0..%lld)\nstart from 0..D-1 in "
                      "order (out[i] = i), then only swap",
                      head, (long long)i, (long long)out[i], (long long)D - 1);
    for (int64_t i = 0; i < D; i++) {
        if (seen[out[i]]) {
            int64_t first = 0, missing = 0;
            while (out[first] != out[i]) first++;
            for (int64_t k = i; k < D; k++) seen[out[k]] = 1;
            while (seen[missing]) missing++;
            todo_fail("%s: item %lld is at positions %lld and %lld, and item %lld is nowhere: an epoch is a "
                      "permutation, every item exactly once\na swap exchanges out[i] and out[j] (keep out[i] aside, "
                      "then out[i] = out[j], out[j] = the kept one); writing one without the other copies an item",
                      head, (long long)out[i], (long long)first, (long long)i, (long long)missing);
        }
        seen[out[i]] = 1;
    }
    free(seen);
    return out;
}

// Whether sampler_epoch draws the shuffle `how`: at D and at 7, 10 and 1000 items (one small
// D has too few orders to tell two shuffles apart).
static int is_shuffle(Shuffle how, int64_t D, uint64_t seed, int64_t epoch) {
    const int64_t sizes[] = {D, 7, 10, 1000};
    int same = 1;
    for (int k = 0; k < 4 && same; k++) {
        int64_t n = sizes[k];
        int64_t *got = malloc((size_t)(n + 4) * sizeof *got), *want = malloc((size_t)(n + 4) * sizeof *want);
        if (!got || !want) todo_fail("out of memory");
        for (int64_t i = 0; i < n; i++) got[i] = want[i] = n - 1 - i;
        sampler_epoch(got, n, seed, epoch, NULL);
        shuffle(how, want, n, seed, epoch, want);  // (FROM_OLD_CONTENTS: the reversed list it holds)
        same = !memcmp(got, want, (size_t)n * sizeof *got);
        free(got), free(want);
    }
    return same;
}

static void check_permutation(void) {
    static const int64_t SIZES[] = {0, 1, 2, 7, 10, 1000};
    static const uint64_t SEEDS[] = {1337, 42};
    static const int64_t EPOCHS[] = {0, 1, 5};
    for (int a = 0; a < 2; a++)
        for (int di = 0; di < 6; di++)
            for (int ei = 0; ei < 3; ei++) {
                int64_t D = SIZES[di], e = EPOCHS[ei];
                uint64_t seed = SEEDS[a];
                char head[200];
                snprintf(head, sizeof head, "epoch %lld, D = %lld (seed %llu)", (long long)e, (long long)D,
                         (unsigned long long)seed);
                int64_t *got = epoch_order(D, seed, e, head);

                // The same (seed, epoch): the same order, whoever computes it and whenever.
                int64_t *again = epoch_order(D, seed, e, head);
                for (int64_t i = 0; i < D; i++)
                    if (again[i] != got[i])
                        todo_fail("%s: two calls with the same (D, seed, epoch) disagree at position %lld (item %lld, "
                                  "then %lld)\nevery rank computes the epoch's order on its own: it must depend on "
                                  "(D, seed, epoch) alone; draw from r, the stream sampler_epoch was given",
                                  head, (long long)i, (long long)got[i], (long long)again[i]);
                free(again);

                // Another epoch: another order (a new pass over the data, in a new order).
                if (D >= 7) {
                    char other[200];
                    snprintf(other, sizeof other, "epoch %lld, D = %lld (seed %llu)", (long long)e + 1, (long long)D,
                             (unsigned long long)seed);
                    int64_t *next = epoch_order(D, seed, e + 1, other);
                    int64_t i = 0;
                    while (i < D && next[i] == got[i]) i++;
                    if (i == D)
                        todo_fail("%s: epoch %lld gives the same order as epoch %lld\neach epoch draws from its own "
                                  "stream, r = sampler_stream(seed, epoch): use r, not a generator of your own",
                                  head, (long long)e + 1, (long long)e);
                    free(next);
                }

                // Position by position, against Fisher-Yates from the end on the epoch's stream.
                int64_t *want = malloc((size_t)(D + 1) * sizeof *want), *before = malloc((size_t)(D + 1) * sizeof *before);
                if (!want || !before) todo_fail("out of memory");
                for (int64_t i = 0; i < D; i++) before[i] = D - 1 - i;
                shuffle(FISHER_YATES, want, D, seed, e, before);
                for (int64_t i = 0; i < D; i++) {
                    if (got[i] == want[i]) continue;
                    char said[700] = "";
                    for (int how = FISHER_YATES + 1; how < NSHUFFLES; how++)
                        if (is_shuffle((Shuffle)how, D, seed, e)) {
                            snprintf(said, sizeof said, "\nthe order is %s", SHUFFLE_WORDS[how]);
                            break;
                        }
                    todo_fail("%s: position %lld should hold item %lld, got %lld; Fisher-Yates walks i from D-1 down "
                              "to 1, swapping out[i] with out[j], j = rng_below(&r, i + 1), starting from 0..D-1 in "
                              "order (the draws in exactly this order: every rank, and the grader, draw the same)%s",
                              head, (long long)i, (long long)want[i], (long long)got[i], said);
                }
                free(want), free(before), free(got);
            }
}

// =============================================================================================
// shard-read
// =============================================================================================

// The epoch's order the loader reads by: the check's own, a scrambled permutation of 0..D-1
// that changes with the epoch (position i holds item (a i + 3 + 5 epoch) mod D, a prime to
// D, then no item left at its own position), so that this check needs nothing of the
// permutation region.
static int64_t gcd(int64_t a, int64_t b) {
    while (b) {
        int64_t t = a % b;
        a = b, b = t;
    }
    return a;
}

static void check_order(int64_t *out, int64_t D, uint64_t seed, int64_t epoch, const Mixture *mix) {
    (void)seed, (void)mix;
    int64_t a = 7 + 2 * epoch;
    while (gcd(a, D) != 1) a++;
    for (int64_t i = 0; i < D; i++) out[i] = (a * i + 3 + 5 * epoch) % D;
    // No item at its own position (D > 1), so that an item read by its position is told apart.
    for (int64_t i = 0; i < D && D > 1; i++)
        if (out[i] == i) {
            int64_t t = out[i];
            out[i] = out[(i + 1) % D], out[(i + 1) % D] = t;
        }
}

#define sampler_epoch check_order
#define main shard_lab_main
#include "04-data-sharding/shard.c"
#undef main
#undef sampler_epoch

#define ITEM_BYTES 6   // S: an odd size, so that a read at the wrong offset shows
#define FILE_ITEMS 300 // the most items a case uses (B = 24, D = 3 B + 23)
#define UNREAD 0xEE    // what L->mine holds before the epoch's reads

// Item i's S bytes: a marker, i in two bytes, a byte that depends on i, and an end marker.
static void item_bytes(int64_t i, uint8_t *b) {
    b[0] = 0xA5, b[1] = (uint8_t)(i & 255), b[2] = (uint8_t)(i >> 8), b[3] = (uint8_t)((i * 37 + 11) & 255);
    b[4] = (uint8_t)(0x5A ^ (i & 255)), b[5] = 0xC3;
}

// Which item these S bytes are: its index, -1 for the bytes of no item, -2 for unread ones.
static int64_t item_of(const uint8_t *b) {
    int unread = 1;
    for (int k = 0; k < ITEM_BYTES; k++) unread &= b[k] == UNREAD;
    if (unread) return -2;
    int64_t i = b[1] | (int64_t)b[2] << 8;
    uint8_t want[ITEM_BYTES];
    item_bytes(i, want);
    return memcmp(b, want, ITEM_BYTES) ? -1 : i;
}

static char tmp_dir[64];  // the dataset file and the loader's lists, removed at the end

static void remove_tmp_dir(void) {
    DIR *dir = opendir(tmp_dir);
    if (!dir) return;
    char path[400];
    for (struct dirent *e; (e = readdir(dir));)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            snprintf(path, sizeof path, "%s/%s", tmp_dir, e->d_name), unlink(path);
    closedir(dir);
    rmdir(tmp_dir);
}

// What rank r of N reads and holds at epoch e.
typedef struct {
    int N, per, r;
    int64_t E, tail, D, e;
    char path[200];
} ReadCase;

static void case_head(const ReadCase *c, char *head, size_t n) {
    snprintf(head, n,
             "%d rank%s, global batch B = %d (B/N = %d each), D = %lld items (%lld batches an epoch; drop_last leaves "
             "the last %lld position%s of the order out), epoch %lld",
             c->N, c->N == 1 ? "" : "s", c->N * c->per, c->per, (long long)c->D, (long long)c->E, (long long)c->tail,
             c->tail == 1 ? "" : "s", (long long)c->e);
}

// The usual wrong ways to fill L->mine, each as the item it would put at (batch b, position j
// of the rank's part); -2: nothing there.
typedef enum { OVERLAP, RANK0_PART, POSITION_AS_ITEM, STRAIGHT_THROUGH, ONE_BLOCK, ONE_BATCH_SLOT, NMISTAKES } ReadMistake;

static const char *const MISTAKE_WORDS[NMISTAKES] = {
    "rank r's part starts at position r of each batch, so the ranks' parts overlap: it starts at shard_first(L, rank) "
    "= r B/N",
    "every rank reads rank 0's part: rank r's part starts at shard_first(L, rank) = r B/N",
    "the position itself was read as the item: the item at position P of the epoch is L->order[P]",
    "the order read straight through, as if the batches were B/N long: batch b's part begins at position b B + r B/N",
    "the rank took E (B/N) positions in a row: it takes B/N positions of every batch, b B + r B/N + j",
    "every batch went to the same B/N slots of L->mine, the last batch overwriting the others: item k = b (B/N) + j "
    "goes at L->mine + k S",
};

static int64_t mistaken_item(ReadMistake how, const ReadCase *c, const int64_t *order, int64_t b, int j) {
    int64_t B = c->N * c->per, k = b * c->per + j, at;
    switch (how) {
    case OVERLAP: at = b * B + c->r + j; break;
    case RANK0_PART: at = b * B + j; break;
    case POSITION_AS_ITEM: return b * B + (int64_t)c->r * c->per + j;
    case STRAIGHT_THROUGH: at = k; break;
    case ONE_BLOCK: at = (int64_t)c->r * c->E * c->per + k; break;
    default: return b == 0 ? order[(c->E - 1) * B + (int64_t)c->r * c->per + j] : -2;  // ONE_BATCH_SLOT
    }
    return at < c->D ? order[at] : -1;
}

// Why the rank's part is wrong at (b, j), where it holds `got`: the mistake that explains its
// whole part, or where the one item sits in the order. mine: what L->mine holds, decoded.
static void explain_item(const ReadCase *c, const int64_t *order, const int64_t *mine, int64_t b, int j, int64_t got,
                         char *out, size_t n) {
    int64_t B = c->N * c->per;
    out[0] = 0;
    for (int how = 0; how < NMISTAKES; how++) {
        int all = 1;
        for (int64_t bb = 0; bb < c->E && all; bb++)
            for (int jj = 0; jj < c->per && all; jj++)
                all = mine[bb * c->per + jj] == mistaken_item((ReadMistake)how, c, order, bb, jj);
        if (all) {
            snprintf(out, n, "\n%s", MISTAKE_WORDS[how]);
            return;
        }
    }
    if (got == -2) {
        snprintf(out, n, "\nnothing was read there: L->mine holds the rank's E (B/N) items one after the other, item "
                         "k = b (B/N) + j at L->mine + k S");
        return;
    }
    if (got == -1) {
        snprintf(out, n, "\nthose %d bytes are no item's: a read at the wrong offset? read whole items (count 1 is %d "
                         "bytes), item k at L->mine + k S",
                 ITEM_BYTES, ITEM_BYTES);
        return;
    }
    int64_t q = 0;
    while (q < c->D && order[q] != got) q++;
    int len = snprintf(out, n, "\nitem %lld is at position %lld of the order (batch %lld, position %lld of it)",
                       (long long)got, (long long)q, (long long)(q / B), (long long)(q % B));
    const char *why = NULL;
    char text[300];
    if (q >= c->E * B) {
        why = "a position of the tail drop_last leaves out: batch b is positions b B .. b B + B-1, b < E";
    } else if (q % B / c->per != c->r) {
        snprintf(text, sizeof text, "that is rank %lld's part of batch %lld: rank r takes positions r B/N .. r B/N + "
                                    "B/N - 1 of every batch",
                 (long long)(q % B / c->per), (long long)(q / B));
        why = text;
    } else if (q / B != b) {
        why = "the right part of another batch: item k of L->mine is batch k / (B/N)";
    }
    if (why) snprintf(out + len, n - (size_t)len, ": %s", why);
}

// Rank c->r's loader at epochs 0 and 1: what it holds, what it read.
static void check_rank(ReadCase *c) {
    int B = c->N * c->per;
    Loader L = {.strategy = SAMPLER, .B = B, .N = c->N, .rank = c->r, .local_ranks = c->N, .per_rank = c->per,
                .S = ITEM_BYTES, .seed = 1, .dir = tmp_dir};
    loader_open(&L, c->path, c->D);
    size_t part = (size_t)(L.E * L.per_rank) * ITEM_BYTES;
    int64_t *order = malloc((size_t)c->D * sizeof *order);
    int64_t *want = calloc((size_t)c->D, sizeof *want), *reads = calloc((size_t)c->D, sizeof *reads);
    int64_t *held = malloc((size_t)(c->E * c->per) * sizeof *held);  // L->mine's items, decoded
    if (!order || !want || !reads || !held) todo_fail("out of memory");
    char head[400], why[600];
    for (c->e = 0; c->e < 2; c->e++) {
        case_head(c, head, sizeof head);
        check_order(order, c->D, 1, c->e, NULL);
        memset(L.mine, UNREAD, part);
        todo_context("%s, rank %d (its part of batch b: positions b B + r B/N + j of the order, j < B/N, b < E; "
                     "the order has positions 0..D-1 = %lld, the items are 0..D-1)",
                     head, c->r, (long long)c->D - 1);
        loader_start_epoch(&L, c->e);

        // L->mine: the rank's part of every batch, in the order it consumes them.
        for (int64_t k = 0; k < c->E * c->per; k++) held[k] = item_of(L.mine + (size_t)k * ITEM_BYTES);
        for (int64_t b = 0; b < c->E; b++)
            for (int j = 0; j < c->per; j++) {
                int64_t k = b * c->per + j, pos = b * B + (int64_t)c->r * c->per + j, got = held[k];
                if (got == order[pos]) continue;
                explain_item(c, order, held, b, j, got, why, sizeof why);
                char got_text[40];
                if (got >= 0) snprintf(got_text, sizeof got_text, "item %lld", (long long)got);
                else snprintf(got_text, sizeof got_text, "%s", got == -2 ? "nothing" : "bytes of no item");
                todo_fail("%s: rank %d, batch %lld, position %d of its part (L->mine item %lld) should hold item %lld "
                          "(position b B + r B/N + j = %lld of the order), got %s%s",
                          head, c->r, (long long)b, j, (long long)k, (long long)order[pos], (long long)pos, got_text,
                          why);
            }

        // L->held: the bytes of dataset the rank now holds.
        if (L.held != (uint64_t)part)
            todo_fail("%s: rank %d: L->held should be %zu, the bytes it holds (E (B/N) S = %lld x %d x %d), got %llu",
                      head, c->r, part, (long long)c->E, c->per, ITEM_BYTES, (unsigned long long)L.held);

        // What it read from the file, as the dataset recorded it: its part, nothing else.
        char path[300], line[256];
        snprintf(path, sizeof path, "%s/reads-rank-%d-epoch-%lld.txt", tmp_dir, c->r, (long long)c->e);
        FILE *f = fopen(path, "r");
        if (!f) todo_fail("%s: rank %d: the list of its reads, %s, is gone (%s)", head, c->r, path, strerror(errno));
        memset(want, 0, (size_t)c->D * sizeof *want), memset(reads, 0, (size_t)c->D * sizeof *reads);
        for (int64_t b = 0; b < c->E; b++)
            for (int j = 0; j < c->per; j++) want[order[b * B + (int64_t)c->r * c->per + j]]++;
        long long items = 0, first, count;
        while (fgets(line, sizeof line, f))
            if (line[0] != '#' && sscanf(line, "%lld %lld", &first, &count) == 2)
                for (long long i = first; i < first + count && i >= 0 && i < c->D; i++) reads[i]++, items++;
        fclose(f);
        long long mine = c->E * c->per;
        if (items != mine) {
            char times[160] = "";
            if (items > mine && items % mine == 0)
                snprintf(times, sizeof times, " (%lld times its part%s)", items / mine,
                         items == mine * c->N ? ": whole global batches read to keep B/N items of each" : "");
            todo_fail("%s: rank %d read %lld bytes of the file for an epoch (%lld items), its part is %lld bytes (E (B/N) = "
                      "%lld items of %d bytes)%s\nthe sampler reads only what the rank consumes: dataset_read(&L->ds, "
                      "item, 1, ...) for its B/N positions of each batch, nothing of the other ranks' parts%s",
                      head, c->r, items * ITEM_BYTES, items, mine * ITEM_BYTES, mine, ITEM_BYTES, times,
                      items == 0 ? " (and through dataset_read, which records every read)" : "");
        }
        for (int64_t i = 0; i < c->D; i++)
            if (reads[i] != want[i])
                todo_fail("%s: rank %d read item %lld %lld time%s from the file; its part has it %lld time%s\nit must "
                          "read exactly the items of its part, each as often as its part has it",
                          head, c->r, (long long)i, (long long)reads[i], reads[i] == 1 ? "" : "s", (long long)want[i],
                          want[i] == 1 ? "" : "s");
    }
    free(order), free(want), free(reads), free(held);
    loader_close(&L);
}

static void read_cases(void) {
    char path[200];
    snprintf(path, sizeof path, "%s/dataset.bin", tmp_dir);
    uint8_t *bytes = malloc((size_t)FILE_ITEMS * ITEM_BYTES);
    if (!bytes) todo_fail("out of memory");
    for (int64_t i = 0; i < FILE_ITEMS; i++) item_bytes(i, bytes + i * ITEM_BYTES);
    dataset_write_file(path, bytes, (size_t)FILE_ITEMS * ITEM_BYTES);
    free(bytes);
    // B/N, batches an epoch, and the tail drop_last leaves out (at most B - 1 positions).
    static const struct {
        int per, E, tail;  // tail < 0: B - 1
    } SHAPES[] = {{2, 3, -1}, {1, 2, 1}, {3, 1, 0}};
    for (int N = 1; N <= 8; N++)
        for (int s = 0; s < 3; s++) {
            ReadCase c = {.N = N, .per = SHAPES[s].per, .E = SHAPES[s].E};
            int B = N * c.per;
            c.tail = SHAPES[s].tail < 0 ? B - 1 : SHAPES[s].tail % B;
            c.D = c.E * B + c.tail;
            snprintf(c.path, sizeof c.path, "%s", path);
            for (c.r = 0; c.r < N; c.r++) check_rank(&c);
        }
}

// The loader's files go to a temporary folder, removed whatever the region does: the cases run
// in a child, and this process removes the folder once it is gone.
static void check_read(void) {
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/shardlab-check-shard-XXXXXX");
    if (!mkdtemp(tmp_dir)) todo_fail("could not make a temporary folder: %s", strerror(errno));
    fflush(stdout), fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        read_cases();
        _exit(TODO_PASSED);
    }
    int status = 0;
    while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    remove_tmp_dir();
    if (pid < 0) todo_fail("could not start the check: %s", strerror(errno));
    if (WIFSIGNALED(status))
        todo_fail("the loader crashed (%s): memory read or written outside a buffer? L->mine holds E (B/N) items of "
                  "S bytes, nothing more",
                  strsignal(WTERMSIG(status)));
    if (!WIFEXITED(status) || WEXITSTATUS(status) != TODO_PASSED) _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
}

int main(int argc, char **argv) {
    static const TodoCheck checks[] = {{"shard-permutation", check_permutation}, {"shard-read", check_read}};
    return todo_main(argc, argv, checks, 2);
}
