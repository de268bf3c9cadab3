// regions.c — see regions.h.
#include "regions.h"

#include <string.h>

#define EP "ep,ep-n2,ep-capacity,ep-capacity-n2"
#define TRAINING \
    "single,ddp,ddp-accum,zero-1,zero-2,zero-3,fsdp,fsdp-prefetch,hsdp,tp,tp-sp,pp-gpipe,pp-1f1b,pp-1f1b-m2,pp-1f1b-m1,ckpt,shard," \
    "cp,cp-n2,cp-contiguous-n3," EP
#define CP "cp,cp-n2,cp-contiguous-n3"
// (EP: ep's counts are all-gathered and its replicated gradients all-reduced on the ring.)
#define RING "collectives,collectives-ring-n3,ddp,ddp-accum,zero-1,zero-2,zero-3,fsdp,fsdp-prefetch,hsdp," EP

const TodoRegion TODO_REGIONS[] = {
    {"adamw", "adamw", "common/model/adamw.c",
     "the AdamW update of n elements: moments, bias corrections, decoupled weight decay",
     "lesson 2 (where-memory-goes), its paragraph \"AdamW's step\": bias corrections, eps, decoupled weight decay",
     TRAINING},
    {"ring-reduce-scatter", "ring", "03-collectives/ring.c",
     "ring reduce-scatter, rounds k = 2..p-1 of piece i (which chunk, from whom, to whom)",
     "lesson 3 (collectives-and-their-cost); lexicon: reduce-scatter, ring-all-reduce", RING},
    {"ring-all-gather", "ring", "03-collectives/ring.c",
     "ring all-gather, rounds k = 2..p-1 of piece i (which chunk, from whom, to whom)",
     "lesson 3 (collectives-and-their-cost); lexicon: all-gather, ring-all-reduce", RING},
    {"all-to-all", "ring", "03-collectives/pairwise.c",
     "all-to-all step k: our block for rank r+k out, rank r-k's block for us in",
     "lesson 3 (collectives-and-their-cost); lexicon: all-to-all, expert-parallelism",
     "collectives,collectives-ring-n3," EP},
    {"shard-permutation", "shard", "04-data-sharding/sampler.c", "the epoch's permutation of the D items, by Fisher-Yates",
     "lesson 4 (data-sharding); lexicon: data-sharding", "shard"},
    {"shard-read", "shard", "04-data-sharding/shard.c", "sampler: read this rank's part of every global batch of the epoch",
     "lesson 4 (data-sharding); lexicon: data-sharding, global-batch-size", "shard"},
    {"ddp-buckets", "ddp", "05-ddp/ddp.c", "fill the buckets with whole tensors in the order the backward pass makes them",
     "lesson 7 (bucketing-and-overlap); lexicon: gradient-bucketing", "ddp,ddp-accum"},
    {"ddp-overlap", "ddp", "05-ddp/ddp.c", "start the all-reduce of every bucket this layer completed",
     "lesson 7 (bucketing-and-overlap); lexicon: compute-communication-overlap, gradient-bucketing", "ddp,ddp-accum"},
    {"zero-shard-length", "zero", "08-zero/sharded.c", "the shard length of unit u, s->shard[u]",
     "lesson 8 (zero); lexicon: zero-stage-1, zero-stage-3", "zero-1,zero-2,zero-3,fsdp,hsdp"},
    {"zero-reduce-scatter", "zero", "08-zero/zero.c",
     "stages 0-1: reduce-scatter each unit's gradient in place (stage 0: then all-gather it)",
     "lesson 8 (zero); lexicon: zero-stage-1, reduce-scatter", "zero-1"},
    {"zero-all-gather", "zero", "08-zero/zero.c", "stages 1-2: all-gather each unit's updated shard into the whole unit",
     "lesson 8 (zero); lexicon: zero-stage-1, zero-stage-2, all-gather", "zero-1,zero-2"},
    {"fsdp-gather", "fsdp", "09-fsdp/fsdp.c", "start the all-gather of unit u's shards into a full buffer",
     "lesson 9 (fsdp); lexicon: fsdp, all-gather", "fsdp,fsdp-prefetch,hsdp"},
    {"fsdp-backward", "fsdp", "09-fsdp/fsdp.c",
     "the backward of unit u: gather, compute its gradient, reshard, reduce-scatter",
     "lesson 9 (fsdp); lexicon: fsdp, zero-stage-3, reduce-scatter", "fsdp,fsdp-prefetch,hsdp"},
    {"fsdp-replicas", "fsdp", "09-fsdp/fsdp.c", "sum unit u's gradient shard across the replicas",
     "lesson 17 (hsdp-and-2d-meshes); lexicon: hsdp, device-mesh", "hsdp"},
    {"tp-f-backward", "tp", "10-tp/f_and_g.c",
     "f backward: sum the ranks' partial input gradients (SP: reduce-scatter)",
     "lessons 10 and 11 (tensor-parallelism-basics, tensor-and-sequence-parallelism); lexicon: tensor-parallelism, "
     "sequence-parallelism",
     "tp,tp-sp"},
    {"tp-g-forward", "tp", "10-tp/f_and_g.c",
     "g forward: sum the ranks' partial outputs of the row-parallel linear (SP: reduce-scatter)",
     "lessons 10 and 11 (tensor-parallelism-basics, tensor-and-sequence-parallelism); lexicon: tensor-parallelism, "
     "sequence-parallelism",
     "tp,tp-sp"},
    {"pp-schedule", "pp", "12-pp/schedule.c", "stage s's order of forwards and backwards under GPipe and 1F1B",
     "lesson 13 (pipeline-schedules); lexicon: gpipe, 1f1b, pipeline-bubble", "pp-gpipe,pp-1f1b,pp-1f1b-m2,pp-1f1b-m1"},
    {"ckpt-recompute", "ckpt", "14-activation-checkpointing/activation_checkpointing.c",
     "recompute the segment that ends at block l, before its backward",
     "lesson 14 (activation-checkpointing); lexicon: activation-checkpointing", "ckpt"},
    {"cp-layout", "cp", "18-cp/ring_attention.c", "rank r's chunks: r of N, or r and 2N-1-r of 2N",
     "lesson 18 (context-parallelism), its part \"Zig-zag\"; lexicon: context-parallelism", CP},
    {"cp-merge", "cp", "18-cp/ring_attention.c",
     "merge the block's (ob / l, lb) into the running (o, lse), overflow-safe",
     "lesson 18 (context-parallelism), its part \"One block at a time\"; lexicon: context-parallelism",
     CP},
    {"cp-ring-step", "cp", "18-cp/ring_attention.c",
     "post this step's hand-over: the block held to the right, the next one from the left",
     "lesson 18 (context-parallelism), its part \"The ring\"; lexicon: context-parallelism", CP},
    {"cp-positions", "cp", "18-cp/cp.c", "look up each token's position embedding at its GLOBAL position",
     "lesson 18 (context-parallelism), its part \"Everything else is token by token\"; lexicon: context-parallelism",
     CP},
    {"ep-capacity", "ep", "19-ep/dispatch.c",
     "the global capacity rule: of each expert's assignments, first choices first, rank 0's first",
     "lesson 19 (experts), its paragraph \"Capacity\"; lexicon: expert-parallelism",
     "ep-capacity,ep-capacity-n2"},
};
const int TODO_NREGIONS = sizeof TODO_REGIONS / sizeof TODO_REGIONS[0];

// shardlab grade's maximum per graded configuration (labs/command/grade/rubric.c: run.complete [1] and
// the lab's checks; zero-3 has no replicas to compare), 263 in all.
const TodoConfig TODO_CONFIGS[] = {
    {"single", 5},    {"collectives", 5},   {"collectives-ring-n3", 5}, {"ddp", 11},        {"ddp-accum", 11},
    {"zero-1", 11},   {"zero-2", 11},       {"zero-3", 9},              {"fsdp", 9},        {"fsdp-prefetch", 9},  {"hsdp", 9},
    {"tp", 8},        {"tp-sp", 8},         {"pp-gpipe", 11},           {"pp-1f1b", 11},    {"pp-1f1b-m2", 11},
    {"pp-1f1b-m1", 11}, {"ckpt", 11},       {"shard", 9},       {"cp", 12},         {"cp-n2", 12},
    {"cp-contiguous-n3", 12}, {"ep", 13},        {"ep-n2", 13},      {"ep-capacity", 13}, {"ep-capacity-n2", 13},
};
const int TODO_NCONFIGS = sizeof TODO_CONFIGS / sizeof TODO_CONFIGS[0];

const TodoRegion *todo_region_named(const char *name) {
    for (int i = 0; i < TODO_NREGIONS; i++)
        if (!strcmp(TODO_REGIONS[i].name, name)) return &TODO_REGIONS[i];
    return NULL;
}

int todo_region_runs_in(const TodoRegion *r, const char *label) {
    size_t n = strlen(label);
    for (const char *p = r->graded; *p;) {
        size_t len = strcspn(p, ",");
        if (len == n && !strncmp(p, label, n)) return 1;
        p += len + (p[len] == ',');
    }
    return 0;
}

int todo_region_points(const TodoRegion *r) {
    int points = 0;
    for (int i = 0; i < TODO_NCONFIGS; i++)
        if (todo_region_runs_in(r, TODO_CONFIGS[i].label)) points += TODO_CONFIGS[i].points;
    return points;
}
