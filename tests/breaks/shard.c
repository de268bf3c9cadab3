// shard.c — a data loader whose ranks' parts overlap (tests/test_shard.c must catch it).
//
// Rank r reads the positions shard_first(r) .. shard_first(r) + B/N - 1 of every global batch
// (04-data-sharding/figures.c: r B/N, called by shard.c). Here every rank but 0 starts one position
// early: it reads its left neighbour's last item as well, and the batch's last position is
// nobody's. The lab's own checks (bytes held and moved) cannot see it: the grader's
// disjointness check, on the indices each rank logged, must.
#include "04-data-sharding/sharding.h"
#include "breaks.h"

const char BREAK_WHAT[] = "ranks 1.. start one position early: their parts overlap";

int __real_shard_first(const Loader *L, int r);

int __wrap_shard_first(const Loader *L, int r) { return __real_shard_first(L, r) - (r > 0); }
