// zero.c — a ZeRO that forgets to all-gather one unit's updated weights (tests/test_zero.c
// must catch it).
//
// At stages 1 and 2 each rank updates only its shard of the weights, then all-gathers every
// unit's updated shards into the whole unit (zero.c's gather_updated_weights, through
// 08-zero/sharded.c's sharded_all_gather, tagged with the unit). Here unit 0's all-gather is
// skipped: every rank keeps its stale copy of the others' shards of the embedding, and the
// replicas drift apart from step 1. At those stages that is the only sharded_all_gather the
// lab calls with tag 0 (stage 0 gathers its summed gradients with it, stage 3 each unit's
// weights before it runs), so the broken lab takes --stage 1 or 2 only, as it reads them
// from its options (common/harness/args.c's train_args_parse, which binds --stage).
#include <string.h>

#include "08-zero/sharded.h"
#include "breaks.h"
#include "common/harness/args.h"
#include "common/harness/check.h"

const char BREAK_WHAT[] = "unit 0's updated weights are not all-gathered";

void __real_train_args_parse(TrainArgs *a, int argc, char **argv, const CatLab *lab, const LabBind *own, int nown);
void __real_sharded_all_gather(DistGroup *g, Precision p, const void *shard, void *full, size_t n, int tag, DistWork *w);

void __wrap_train_args_parse(TrainArgs *a, int argc, char **argv, const CatLab *lab, const LabBind *own, int nown) {
    __real_train_args_parse(a, argc, argv, lab, own, nown);
    for (int i = 0; i < nown; i++)
        if (strcmp(own[i].name, "stage") == 0 && *(const int *)own[i].value != 1 && *(const int *)own[i].value != 2)
            usage_error("zero", "this deliberately broken ZeRO (tests/breaks/zero.c) needs --stage 1 or 2");
}

void __wrap_sharded_all_gather(DistGroup *g, Precision p, const void *shard, void *full, size_t n, int tag, DistWork *w) {
    if (tag == 0) return;  // unit 0: each rank keeps what it held of the others' shards
    __real_sharded_all_gather(g, p, shard, full, n, tag, w);
}
