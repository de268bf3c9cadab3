// catalog.c — see catalog.h. The tables first (what a reader comes for), then the few
// functions every reader shares: find, check, default, parse.
#include "catalog.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "suggest.h"

// The schedule's and the replay points' automatic values, as text (catalog.h; chosen by
// measurement: see labs/README.md, "The recipe").
#define TEXT(x) TEXT_(x)
#define TEXT_(x) #x
#define WARMUP_AUTO_TEXT TEXT(CATALOG_WARMUP_AUTO)
#define REPLAY_AUTO_TEXT "a fifth of --steps when --steps >= " TEXT(CATALOG_REPLAY_MIN_STEPS) " and the state (12 bytes a " \
    "parameter) fits " TEXT(CATALOG_REPLAY_MAX_MIB) " MiB, else 0"

#define N(table) table, (int)(sizeof table / sizeof table[0])
#define FORM CAT_FORM
#define MAX_SLOTS 64  // a lab's options and the shared ones, together (args.c's MAX_OPTIONS)

// ---- the options every training lab shares ------------------------------------------------
//
// The defaults are chosen so that `make lab-single` on a 2-core laptop shows the loss falling
// from ln(256) = 5.55 to near the synthetic corpus' floor within about half a minute.
const CatOption catalog_train[] = {
    {"steps", OPT_INT, 1, 1e7, NULL, "1000", "N", "optimizer steps", 0, NULL},
    {"batch", OPT_INT, 1, 1 << 16, NULL, "8", "B", "sequences in the global batch of a step", FORM, NULL},
    {"seq", OPT_INT, 1, CATALOG_MAX_SEQ, NULL, "64", "T", "tokens per sequence (context length)", FORM, NULL},
    {"layers", OPT_INT, 1, 256, NULL, "2", "L", "transformer blocks", FORM, NULL},
    {"dim", OPT_INT, 1, 16384, NULL, "64", "C", "model width", FORM, NULL},
    {"heads", OPT_INT, 1, 256, NULL, "4", "NH", "attention heads (must divide --dim)", FORM, NULL},
    // flash by measurement: see labs/README.md, "Attention: --attn".
    {"attn", OPT_STRING, 0, 0, "flash|naive", "flash", "ALGO",
     "attention: flash (tiles, online softmax: keeps NH floats per token) or naive (keeps the NH x T probabilities "
     "per token); same math, same weights", FORM, NULL},
    {"mixed", OPT_FLAG, 0, 0, NULL, NULL, "",
     "mixed precision: the matrix products (the Linear layers', and --attn flash's) take bf16 operands and sum in "
     "fp32 (tensor cores on a GPU); master weights, AdamW, LayerNorm and the softmax's statistics stay fp32 (zero and "
     "fsdp also store weights and gradients in bf16)",
     FORM, NULL},
    {"accum", OPT_INT, 1, 1 << 16, NULL, "1", "K", "micro-batches per step (gradient accumulation; must divide the batch)",
     FORM, NULL},
    {"lr", OPT_DOUBLE, 0, 10, NULL, "0.003", "LR", "AdamW learning rate", FORM, NULL},
    {"lr-schedule", OPT_STRING, 0, 0, "cosine|constant", "cosine", "S",
     "learning-rate schedule: cosine (warmup, then cosine decay to --lr-min) or constant (warmup, then --lr)", 0, NULL},
    {"warmup", OPT_INT, 0, 1e7, NULL, "auto", "N",
     "steps of linear warmup to --lr; a run shorter than the warmup ends inside it, below --lr, whether N is given "
     "or auto; auto: " WARMUP_AUTO_TEXT, 0, NULL},
    {"lr-min", OPT_DOUBLE, 0, 10, NULL, "auto", "LR", "where the cosine ends; auto: --lr / " TEXT(CATALOG_LR_MIN_DIVISOR), 0, NULL},
    {"decay-steps", OPT_INT, 1, 1e7, NULL, "auto", "N",
     "the step where the cosine reaches --lr-min (after it, --lr-min); auto: --steps, or the warmup if longer", 0, NULL},
    {"weight-decay", OPT_DOUBLE, 0, 10, NULL, "0.01", "WD", "AdamW decoupled weight decay", 0, NULL},
    {"clip", OPT_DOUBLE, 0, 1e9, NULL, "1", "NORM", "clip the global gradient norm to NORM (0: off)", 0, NULL},
    {"seed", OPT_U64, 0, 0, NULL, "1337", "S", "seed for weights, corpus and batches", FORM, NULL},
    {"data", OPT_STRING, 0, 0, NULL, "synthetic", "PATH",
     "'synthetic' (Markov corpus with a known loss floor) or any file's bytes", CAT_FILE, NULL},
    {"init", OPT_STRING, 0, 0, NULL, NULL, "FILE", "start from these weights (safetensors)", CAT_FILE, NULL},
    {"save", OPT_STRING, 0, 0, NULL, NULL, "FILE", "write the final weights here (safetensors)", 0, NULL},
    {"run-dir", OPT_STRING, 0, 0, NULL, NULL, "DIR", "write the run here (default: runs/<lab>-<time>-<hex>)", 0, NULL},
    {"overwrite", OPT_FLAG, 0, 0, NULL, NULL, "",
     "--run-dir holds an earlier run: replace it (its files go first; without this, such a directory is refused)", 0, NULL},
    {"ref", OPT_STRING, 0, 0, NULL, NULL, "DIR",
     "a finished run to compare with: the dashboards draw its loss beside this one's", FORM | CAT_RUN, NULL},
    {"device", OPT_STRING, 0, 0, "auto|cpu|cuda", "auto", "DEV", "auto (cuda when a GPU is usable), cpu or cuda", 0, NULL},
    {"link", OPT_STRING, 0, 0, NULL, "none", "LINK",
     "emulate an interconnect on the shared-memory backend: each collective takes at least k alpha + bytes/beta of it "
     "(nvlink4, pcie4, ib-ndr, eth-100g, eth-25g, ...: shardlab whatif --links)", 0, NULL},
    {"link-scale", OPT_DOUBLE, 1, 1e6, NULL, "1", "F",
     "--link: its times multiplied by F (this machine computes far slower than a GPU: keep the ratio)", 0, NULL},
    {"tf32", OPT_FLAG, 0, 0, NULL, NULL, "",
     "CUDA: TF32 tensor cores for matrix products, flash attention's included (faster; results then differ from the "
     "CPU's)", 0, NULL},
    {"save-every", OPT_INT, 1, 1e7, NULL, NULL, "K",
     "save a distributed checkpoint every K steps and at the last step (--ckpt)", 0, NULL},
    {"ckpt", OPT_STRING, 0, 0, NULL, NULL, "DIR",
     "where --save-every writes checkpoints (default: the --resume dir, else <run dir>/checkpoints)", 0, NULL},
    {"resume", OPT_STRING, 0, 0, NULL, NULL, "DIR", "go on from the checkpoint in DIR, at any number of ranks", 0, NULL},
    {"replay-every", OPT_INT, 0, 1e7, NULL, "auto", "K",
     "keep the training state every K steps in <run dir>/replay, for the grader's replays (0: never); auto: "
     REPLAY_AUTO_TEXT, 0, NULL},
    {"log-every", OPT_INT, 0, 1e7, NULL, "0", "N", "progress line every N steps when not on a terminal (0: auto)", 0, NULL},
};
const int catalog_ntrain = (int)(sizeof catalog_train / sizeof catalog_train[0]);

// ---- each lab's own options ---------------------------------------------------------------

static const CatOption COLLECTIVES[] = {
    {"min-bytes", OPT_BYTES, 1, 1 << 30, NULL, "4", "BYTES", "smallest buffer; K, M, G multiply by 1024", 0, NULL},
    {"max-bytes", OPT_BYTES, 1, 1 << 30, NULL, "64M", "BYTES", "largest buffer, at most 1G", FORM, NULL},
    {"factor", OPT_INT, 2, 1024, NULL, "2", "F", "each size is F times the one before, F >= 2", 0, NULL},
    {"iters", OPT_INT, 1, 1e6, NULL, "20", "N", "timed calls per size; --steps N is the same", 0, NULL},
    {"steps", OPT_INT, 1, 1e6, NULL, "20", "N", "the same as --iters", 0, NULL},
    {"warmup", OPT_INT, 0, 1e6, NULL, "5", "N", "untimed calls before them", 0, NULL},
    {"colls", OPT_STRING, 0, 0, NULL, "all", "LIST", "comma list of all_reduce,reduce_scatter,all_gather,broadcast,reduce,all_to_all",
     0, NULL},
    {"algo", OPT_STRING, 0, 0, "auto|ring|direct", "auto", "ALGO", "auto (direct up to 64 KiB, ring above), ring or direct",
     FORM, NULL},
    {"check", OPT_INT, 0, 1, NULL, "1", "0|1", "check every result against a serial computation", 0, NULL},
    {"run-dir", OPT_STRING, 0, 0, NULL, NULL, "DIR", "write the run here (none: $SHARDLAB_RUN_DIR, else "
     "runs/collectives-<time>-<hex>)", 0, NULL},
    {"overwrite", OPT_FLAG, 0, 0, NULL, NULL, "",
     "--run-dir holds an earlier run: replace it (its files go first; without this, such a directory is refused)", 0, NULL},
    {"device", OPT_STRING, 0, 0, "auto|cpu|cuda", "auto", "DEV", "auto (cuda when a GPU is usable), cpu or cuda", 0, NULL},
};

static const CatOption DDP[] = {
    {"sync", OPT_STRING, 0, 0, "per-tensor|bucket|overlap", "overlap", "MODE", "how gradients are all-reduced", FORM, NULL},
    {"bucket-mb", OPT_DOUBLE, 1e-6, 1024, NULL, "0.125", "MB", "bucket size in MiB for --sync bucket and overlap", FORM, NULL},
    {"algo", OPT_STRING, 0, 0, "auto|ring|direct", "auto", "ALGO", "all-reduce algorithm", FORM, NULL},
};

static const CatOption ZERO[] = {
    {"stage", OPT_INT, 0, 3, NULL, "1", "K", "ZeRO stage: 0 (DDP), 1 (optimizer state), 2 (+ gradients), 3 (+ parameters)",
     FORM, NULL},
    {"offload", OPT_FLAG, 0, 0, NULL, NULL, "", "ZeRO-Offload: optimizer state and update in host memory (stages 1-3)",
     FORM, NULL},
    {"save-optim", OPT_FLAG, 0, 0, NULL, NULL, "",
     "at the end, write each rank's AdamW slices to optim-rank-<r>.safetensors in the run directory", 0, NULL},
};

static const CatOption FSDP[] = {
    {"prefetch", OPT_FLAG, 0, 0, NULL, NULL, "", "start the next unit's all-gather before the current unit computes", FORM,
     NULL},
    {"no-reshard", OPT_FLAG, 0, 0, NULL, NULL, "", "keep gathered weights from forward to backward (no second all-gather)",
     FORM, NULL},
    {"replicate", OPT_INT, 1, 8, NULL, "1", "R",
     "HSDP: R replicas of S = N/R sharded ranks each; gradients reduce-scattered in a group, then summed across replicas",
     FORM, NULL},
};

static const CatOption TP[] = {
    {"dp", OPT_INT, 1, 8, NULL, "1", "D",
     "data-parallel replicas: the N ranks form a D x t mesh, t = N/D tensor-parallel ranks per replica", FORM, NULL},
    {"sp", OPT_FLAG, 0, 0, NULL, NULL, "", "sequence parallelism: LayerNorms and the residual stream split along the tokens",
     FORM, NULL},
    {"vocab-parallel", OPT_FLAG, 0, 0, NULL, NULL, "",
     "split lm_head by vocabulary rows; the cross-entropy computed across the group", FORM, NULL},
};

static const CatOption CP[] = {
    {"layout", OPT_STRING, 0, 0, "zigzag|contiguous", "zigzag", "L",
     "which tokens each rank holds: zigzag (chunks r and 2N-1-r of 2N: even work under the causal mask) or contiguous "
     "(chunk r of N)", FORM, NULL},
    {"kv", OPT_STRING, 0, 0, "ring|all-gather", "ring", "MODE",
     "how keys and values reach every rank: ring (a block per step, passed on while attending) or all-gather (the whole "
     "sequence's, once per layer)", FORM, NULL},
    {"dp", OPT_INT, 1, 8, NULL, "1", "D",
     "data-parallel groups: the N ranks form D groups of N/D context-parallel ranks, each on B/D sequences", FORM, NULL},
};

static const CatOption PP[] = {
    {"schedule", OPT_STRING, 0, 0, "gpipe|1f1b|interleaved", "1f1b", "S", "the pipeline schedule", FORM, NULL},
    {"micro", OPT_INT, 1, 1 << 16, NULL, "4", "M", "micro-batches per step in each pipeline", FORM, NULL},
    {"chunks", OPT_INT, 1, 64, NULL, "auto", "V", "interleaved: model chunks per rank; auto is 2", FORM, NULL},
    {"split", OPT_STRING, 0, 0, NULL, NULL, "B0,B1,..", "blocks per stage (default: as even as can be)", 0, NULL},
    {"dp", OPT_INT, 1, 8, NULL, "1", "D", "data-parallel pipelines: N = stages x D", FORM, NULL},
};

static const CatOption CKPT[] = {
    {"policy", OPT_STRING, 0, 0, NULL, "every", "P", "none, every, sqrt or K (checkpoint blocks K, 2K, ...)", FORM,
     "abcdefghijklmnopqrstuvwxyz0123456789"},
    {"compare", OPT_INT, 0, 1000, NULL, "5", "R", "timed passes per policy in the comparison table (0: skip it)", 0, NULL},
};

static const CatOption SHARD[] = {
    {"strategy", OPT_STRING, 0, 0, "slice|sampler|dispatch", "sampler", "S", "who holds the data, what moves", FORM, NULL},
    {"weights", OPT_STRING, 0, 0, NULL, NULL, "W1,W2,..", "a mixture of k equal sources drawn with these weights", FORM,
     "0123456789.,"},
    {"temperature", OPT_DOUBLE, 0.01, 100, NULL, "1", "TAU", "with --weights: draw source s with p ~ w_s^(1/TAU)", FORM,
     NULL},
    {"items", OPT_STRING, 0, 0, NULL, "all", "D", "use only the first D items of the data (D >= 1)", FORM, "0123456789al"},
};

// A mixture of experts in every block (common/model/moe.h): lab-single trains it on one rank,
// lab-ep splits its experts over the ranks (eight by default: any of 1, 2, 4 or 8 ranks).
#define MOE_ROWS(experts_default, experts_help)                                                                       \
    {"moe", OPT_INT, 0, 64, NULL, experts_default, "E", experts_help, FORM | CAT_FOLD, NULL},                          \
        {"topk", OPT_INT, 1, 64, NULL, "auto", "K",                                                                    \
         "--moe: experts per token, their router weights renormalised to sum to 1; auto: 2, or 1 with one expert",     \
         FORM | CAT_FOLD, NULL},                                                                                       \
        {"expert-dim", OPT_INT, 1, 65536, NULL, "auto", "H", "--moe: an expert's hidden width; auto: 4 --dim, the dense MLP's", \
         FORM | CAT_FOLD, NULL},                                                                                       \
        {"capacity", OPT_DOUBLE, 0, 64, NULL, "0", "F",                                                                \
         "--moe: an expert serves at most ceil(F N K / E) of a pass's N tokens, first choices first (0: dropless)",    \
         FORM | CAT_FOLD, NULL},                                                                                       \
        {"aux-weight", OPT_DOUBLE, 0, 100, NULL, "0.01", "W",                                                          \
         "--moe: the load-balancing loss E sum_e f_e P_e (Switch Transformer's), weighted by W in the training loss",  \
         FORM | CAT_FOLD, NULL}
static const CatOption MOE[] = {MOE_ROWS("0", "a mixture of E experts in place of every block's MLP, a router sending "
                                              "each token to --topk of them (0: the dense MLP)")};
static const CatOption EP[] = {MOE_ROWS("8", "E experts in every block, E/N on each of the N ranks (a multiple of N), "
                                             "a router sending each token to --topk of them")};

// ---- the labs -----------------------------------------------------------------------------

const CatLab catalog_labs[] = {
    {"single", "one rank: where training memory goes", "One rank, no parallelism: trains the GPT and shows where "
     "training memory goes.\nThe baseline every distributed lab is compared with.", "training-memory-breakdown", 1, 1,
     NULL, N(MOE)},
    {"collectives", "every collective timed and checked", "Every collective of common/comm/dist.h timed and checked over a range "
     "of sizes, nccl-tests style.\nRun on N ranks with 'shardlab run collectives -n N' (or RANK/WORLD_SIZE set by hand).",
     "collective-communication", 0, 0, NULL, N(COLLECTIVES)},
    {"ddp", "data parallelism from scratch", "Data parallelism from scratch: every rank a replica, gradients all-reduced."
     "\nRun N ranks with 'shardlab run ddp -n N' (or make lab-ddp NGPU=N).", "ddp", 1, 0, NULL, N(DDP)},
    {"zero", "ZeRO stages 0-3", "ZeRO stages 0-3 from scratch: optimizer state, gradients and parameters sharded over the "
     "ranks.\nRun N ranks with 'shardlab run zero -n N --stage K' (or make lab-zero STAGE=K NGPU=N).", "zero", 1, 0, NULL,
     N(ZERO)},
    {"fsdp", "fully sharded data parallel", "FSDP from scratch: one flat sharded parameter per unit, gathered only while "
     "the unit runs.\nRun N ranks with 'shardlab run fsdp -n N' (or make lab-fsdp NGPU=N).", "fsdp", 1, 0, NULL, N(FSDP)},
    {"tp", "tensor parallelism", "Tensor parallelism from scratch (Megatron-LM): every block's matrices split over t ranks."
     "\nRun N ranks with 'shardlab run tp -n N' (or make lab-tp NGPU=N); --dp D makes a D x N/D mesh.",
     "tensor-parallelism", 1, 0, NULL, N(TP)},
    {"cp", "context parallelism", "Context parallelism from scratch: every sequence split over N ranks, keys and values "
     "passed around a ring.\nRun N ranks with 'shardlab run cp -n N' (or make lab-cp NGPU=N).", "context-parallelism", 1, 0,
     NULL, N(CP)},
    {"ep", "expert parallelism", "Expert parallelism from scratch: a mixture-of-experts GPT, its experts split over N "
     "ranks, tokens sent to them by all-to-all.\nRun N ranks with 'shardlab run ep -n N' (or make lab-ep NGPU=N).",
     "expert-parallelism", 1, 0, NULL, N(EP)},
    // --layers auto: pp.c, "The model's depth".
    {"pp", "pipeline parallelism", "Pipeline parallelism: the layers split into stages, micro-batches flowing through them."
     "\n--layers auto: the blocks of --split, else one block per model chunk (stages x chunks), at least 2",
     "pipeline-parallelism", 1, 0, "auto", N(PP)},
    // Four blocks deep by default: at the other labs' 2, sqrt makes one segment of both and saves
    // nothing; 4 make sqrt's 2 segments of 2 (saved activations 2.95 MiB against none's 5.39 at
    // N = 2), and keep the 1000-step run to about 45 s on 2 cores.
    {"ckpt", "activation checkpointing", "Activation checkpointing: keep the block boundaries, recompute the insides in "
     "backward.\nRun N data-parallel ranks with 'shardlab run ckpt -n N --policy sqrt'.", "activation-checkpointing", 1, 0,
     "4", N(CKPT)},
    {"shard", "data sharding", "Data sharding: who holds the dataset and how each rank gets its part of the global batch."
     "\nRun N ranks with 'shardlab run shard -n N --strategy S' (or make lab-shard NGPU=N STRATEGY=S).", "data-sharding", 1,
     0, NULL, N(SHARD)},
};
const int catalog_nlabs = (int)(sizeof catalog_labs / sizeof catalog_labs[0]);

// ---- the graded configurations of `make grade LABS=dir` -----------------------------------
//
// Small and quick (seconds each on two cores), and each chosen so that its checks bite: four
// ranks, so ring chunks and shards are not trivially halves; ddp on the ring; the ring again
// on three ranks, where no power-of-two size splits into equal chunks (the first n mod p
// chunks one element longer, and empty chunks below p elements); the pipeline with more
// micro-batches than stages, fewer (1F1B's warm-up capped at m) and one (every stage runs one
// forward, one backward); a dataset small enough that an epoch ends. Every option
// a lesson builds an algorithm on runs in one: gradient accumulation (ddp-accum: DDP's
// no_sync, the micro-batches' share of the loss), FSDP's prefetch (its memory and the order
// its all-gathers are asked in), sequence parallelism (tp-sp: f and g as all-gathers and
// reduce-scatters, the replicated gradients summed): a mistake in an option no configuration
// runs would pass with full marks.
const CatGraded catalog_graded[] = {
    {"single", "single", 1, {"--steps", "6"}, NULL},
    {"collectives", "collectives", 4, {"--max-bytes", "256K", "--iters", "2", "--warmup", "1"}, NULL},
    // 1 float to 1 MiB: the largest has chunks of more than one piece (SHM_PIECE_FLOATS).
    {"collectives-ring-n3", "collectives", 3, {"--max-bytes", "1M", "--algo", "ring", "--iters", "2", "--warmup", "1"}, NULL},
    {"ddp", "ddp", 4, {"--steps", "6", "--algo", "ring"}, NULL},
    {"ddp-accum", "ddp", 4, {"--steps", "6", "--algo", "ring", "--accum", "2"}, NULL},
    {"zero-1", "zero", 4, {"--steps", "6", "--stage", "1"}, NULL},
    {"zero-2", "zero", 4, {"--steps", "6", "--stage", "2"}, NULL},
    {"zero-3", "zero", 4, {"--steps", "6", "--stage", "3"}, "{\"stage\":3}"},
    {"fsdp", "fsdp", 4, {"--steps", "6"}, NULL},
    {"fsdp-prefetch", "fsdp", 4, {"--steps", "6", "--prefetch"}, NULL},
    // HSDP on a 2 x 2 mesh: both groups have more than one rank, so a sum in the wrong group shows.
    {"hsdp", "fsdp", 4, {"--steps", "6", "--replicate", "2"}, NULL},
    {"tp", "tp", 2, {"--steps", "6"}, NULL},
    {"tp-sp", "tp", 2, {"--steps", "6", "--sp"}, NULL},
    {"pp-gpipe", "pp", 4, {"--steps", "4", "--layers", "4", "--schedule", "gpipe", "--micro", "8"}, NULL},
    {"pp-1f1b", "pp", 4, {"--steps", "4", "--layers", "4", "--schedule", "1f1b", "--micro", "8"}, NULL},
    {"pp-1f1b-m2", "pp", 4, {"--steps", "4", "--layers", "4", "--schedule", "1f1b", "--micro", "2"}, NULL},
    {"pp-1f1b-m1", "pp", 4, {"--steps", "4", "--layers", "4", "--schedule", "1f1b", "--micro", "1"}, NULL},
    // --compare 0: the grader judges the recomputation, not the lab's own comparison table.
    {"ckpt", "ckpt", 2, {"--steps", "6", "--policy", "sqrt", "--layers", "4", "--compare", "0"}, NULL},
    {"shard", "shard", 2, {"--steps", "10", "--strategy", "sampler", "--items", "64"}, NULL},
    // Context parallelism: zig-zag at 2 ranks (each holds an early and a late chunk) and 4;
    // contiguous at 3, where 64 tokens do not split evenly.
    {"cp", "cp", 4, {"--steps", "6"}, NULL},
    {"cp-n2", "cp", 2, {"--steps", "6"}, NULL},
    {"cp-contiguous-n3", "cp", 3, {"--steps", "6", "--layout", "contiguous"}, NULL},
    // Expert parallelism: dropless and with a capacity (the global rule drops what single
    // drops), on 2 ranks and on 4, where a rank's tokens reach three other ranks.
    {"ep", "ep", 4, {"--steps", "6"}, NULL},
    {"ep-n2", "ep", 2, {"--steps", "6"}, NULL},
    {"ep-capacity", "ep", 4, {"--steps", "6", "--capacity", "1.25"}, NULL},
    {"ep-capacity-n2", "ep", 2, {"--steps", "6", "--capacity", "1.25"}, NULL},
};
const int catalog_ngraded = (int)(sizeof catalog_graded / sizeof catalog_graded[0]);

// ---- reading it ---------------------------------------------------------------------------

const CatLab *catalog_lab(const char *name) {
    for (int i = 0; name && i < catalog_nlabs; i++)
        if (!strcmp(catalog_labs[i].name, name)) return &catalog_labs[i];
    return NULL;
}

const CatOption *catalog_find(const CatLab *lab, const char *name) {
    for (int i = 0; lab && i < lab->noptions; i++)
        if (!strcmp(lab->options[i].name, name)) return &lab->options[i];
    for (int i = 0; (!lab || lab->trains) && i < catalog_ntrain; i++)
        if (!strcmp(catalog_train[i].name, name)) return &catalog_train[i];
    return NULL;
}

int catalog_bytes(const char *text, uint64_t *out) {
    char *end = (char *)text;
    errno = 0;
    unsigned long long v = text[0] >= '0' && text[0] <= '9' ? strtoull(text, &end, 10) : 0;
    int shift = 0;
    if (*end == 'K' || *end == 'k') shift = 10, end++;
    else if (*end == 'M' || *end == 'm') shift = 20, end++;
    else if (*end == 'G' || *end == 'g') shift = 30, end++;
    if (end == text || *end || errno || v > (UINT64_MAX >> shift)) return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

// "a, b or c" from "a|b|c".
static void choices_text(const char *choices, char *out, size_t n) {
    size_t len = 0;
    out[0] = 0;
    for (const char *p = choices; *p && len + 1 < n;) {
        size_t k = strcspn(p, "|");
        const char *sep = !p[k] ? "" : strchr(p + k + 1, '|') ? ", " : " or ";
        len += (size_t)snprintf(out + len, n - len, "%.*s%s", (int)k, p, sep);
        p += k + (p[k] != 0);
        if (len >= n) break;
    }
}

static int is_choice(const char *choices, const char *text) {
    size_t len = strlen(text);
    for (const char *p = choices; *p;) {
        size_t k = strcspn(p, "|");
        if (k == len && !strncmp(p, text, k)) return 1;
        p += k + (p[k] != 0);
    }
    return 0;
}

// A regular file this process can read (a FIFO or a device would be read forever, or wait for
// a writer). 0, or -1 with the reason in why.
static int readable_file(const char *option, const char *path, char *why, size_t n) {
    struct stat st;
    if (access(path, R_OK) != 0 || stat(path, &st) != 0)
        return snprintf(why, n, "--%s: cannot read '%s': %s", option, path, strerror(errno)), -1;
    if (!S_ISREG(st.st_mode)) return snprintf(why, n, "--%s: '%s' is not a regular file", option, path), -1;
    return 0;
}

// Checks text as o's value and, when value is not NULL, stores it there.
static int take(const CatOption *o, const char *text, void *value, char *why, size_t n) {
    char *end = NULL;
    errno = 0;
    switch (o->kind) {
    case OPT_INT: {
        long long v = strtoll(text, &end, 10);
        if (end == text || *end || errno) return snprintf(why, n, "--%s: '%s' is not a whole number", o->name, text), -1;
        if (v < o->min || v > o->max)
            return snprintf(why, n, "--%s must be between %.0f and %.0f (got %s)", o->name, o->min, o->max, text), -1;
        if (value) *(int *)value = (int)v;
        return 0;
    }
    case OPT_DOUBLE: {
        double v = strtod(text, &end);
        if (end == text || *end || errno || !isfinite(v))
            return snprintf(why, n, "--%s: '%s' is not a number", o->name, text), -1;
        if (v < o->min || v > o->max)
            return snprintf(why, n, "--%s must be between %g and %g (got %s)", o->name, o->min, o->max, text), -1;
        if (value) *(double *)value = v;
        return 0;
    }
    case OPT_U64: {
        unsigned long long v = text[0] == '-' ? 0 : strtoull(text, &end, 10);
        if (text[0] == '-' || end == text || *end || errno)
            return snprintf(why, n, "--%s: '%s' is not a non-negative whole number", o->name, text), -1;
        if (value) *(uint64_t *)value = v;
        return 0;
    }
    case OPT_BYTES: {
        uint64_t v;
        if (catalog_bytes(text, &v) != 0 || v < o->min || v > o->max)
            return snprintf(why, n, "--%s must be a size from %.0f to 1G, e.g. 4096, 64K or 16M (got '%s')", o->name,
                            o->min, text), -1;
        if (value) *(uint64_t *)value = v;
        return 0;
    }
    case OPT_STRING:
        if (!text[0]) return snprintf(why, n, "--%s: empty value", o->name), -1;
        if (o->choices && !is_choice(o->choices, text)) {
            char list[256];
            choices_text(o->choices, list, sizeof list);
            return snprintf(why, n, "--%s must be %s (got '%s')", o->name, list, text), -1;
        }
        if ((o->flags & CAT_FILE) && !(o->dflt && !strcmp(text, o->dflt)) && readable_file(o->name, text, why, n) != 0)
            return -1;
        if (value) *(const char **)value = text;
        return 0;
    case OPT_FLAG:
        if (value) *(int *)value = 1;
        return 0;
    }
    return -1;
}

int catalog_check(const CatOption *o, const char *text, int from_outside, char *why, size_t n) {
    if (o->kind == OPT_FLAG) return snprintf(why, n, "--%s takes no value", o->name), -1;
    if (from_outside && o->kind == OPT_STRING && text[0] == '-')
        return snprintf(why, n, "--%s: '%s' would read as an option", o->name, text), -1;
    return take(o, text, NULL, why, n);
}

int catalog_check_option(const char *lab, const char *name, const char *text, char *why, size_t n) {
    const CatLab *l = lab ? catalog_lab(lab) : NULL;
    const CatOption *o = l || !lab ? catalog_find(l, name) : NULL;
    if (!o) return snprintf(why, n, "--%s: no such option of %s", name, l ? l->name : lab ? lab : "every training lab"), -1;
    return catalog_check(o, text, 1, why, n);
}

void catalog_default(const CatOption *o, void *value) {
    int automatic = o->dflt && !strcmp(o->dflt, "auto");
    switch (o->kind) {
    case OPT_INT: *(int *)value = !o->dflt ? 0 : automatic ? -1 : atoi(o->dflt); break;
    case OPT_DOUBLE: *(double *)value = automatic ? -1 : o->dflt ? strtod(o->dflt, NULL) : 0; break;
    case OPT_U64: *(uint64_t *)value = o->dflt ? strtoull(o->dflt, NULL, 10) : 0; break;
    case OPT_BYTES:
        *(uint64_t *)value = 0;
        if (o->dflt) catalog_bytes(o->dflt, (uint64_t *)value);
        break;
    case OPT_STRING: *(const char **)value = o->dflt; break;
    case OPT_FLAG: *(int *)value = 0; break;
    }
}

const char *catalog_value_in(int nopts, char *const opts[], const char *name) {
    const char *found = NULL;
    size_t len = strlen(name);
    for (int i = 0; i < nopts; i++) {
        const char *o = opts[i];
        if (!o || strncmp(o, "--", 2) != 0 || strncmp(o + 2, name, len) != 0) continue;
        if (o[2 + len] == '=') found = o + 3 + len;
        else if (o[2 + len] == 0)
            found = i + 1 < nopts && opts[i + 1] && strncmp(opts[i + 1], "--", 2) != 0 ? opts[i + 1] : "";
    }
    return found;
}

// ---- parsing a command line ---------------------------------------------------------------

static void print_value(const CatOption *o, const void *value) {
    // A number below the option's range means "derived after parsing".
    if ((o->kind == OPT_INT && *(const int *)value < o->min) || (o->kind == OPT_DOUBLE && *(const double *)value < o->min)) {
        printf("auto");
        return;
    }
    switch (o->kind) {
    case OPT_INT: printf("%d", *(const int *)value); break;
    case OPT_DOUBLE: printf("%g", *(const double *)value); break;
    case OPT_U64: printf("%llu", (unsigned long long)*(const uint64_t *)value); break;
    case OPT_BYTES: {
        uint64_t v = *(const uint64_t *)value;
        int shift = v && !(v & ((1u << 30) - 1)) ? 30 : v && !(v & ((1u << 20) - 1)) ? 20 : v && !(v & 1023) ? 10 : 0;
        printf("%llu%s", (unsigned long long)(v >> shift), shift == 30 ? "G" : shift == 20 ? "M" : shift == 10 ? "K" : "");
        break;
    }
    case OPT_STRING: printf("%s", *(const char *const *)value ? *(const char *const *)value : "none"); break;
    case OPT_FLAG: printf("%s", *(const int *)value ? "on" : "off"); break;
    }
}

static void print_help(const char *prog, const char *about, const CatSlot *slots, int n, int nfirst, const char *heading) {
    printf("usage: %s [options]\n\n%s\n", prog, about);
    for (int i = 0; i < n; i++) {
        const CatOption *o = slots[i].opt;
        if (i == 0 && nfirst > 0) printf("\n%s:\n", heading);
        if (i == nfirst) printf("\n%s options:\n", prog);
        char left[64];
        const char *metavar = o->metavar ? o->metavar : "";
        snprintf(left, sizeof left, "--%s%s%s", o->name, metavar[0] ? " " : "", metavar);
        printf("  %-22s %s", left, o->help);
        if (!strstr(o->help, "(default")) {  // else the help says it, in words ("as even as can be")
            printf(" (default: ");
            print_value(o, slots[i].value);
            printf(")");
        }
        printf("\n");
    }
    printf("  %-22s %s\n", "--help", "show this help and exit");
    printf("\nEnvironment: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT as torchrun\n"
           "sets them (or mpirun's OMPI_COMM_WORLD_* and srun's SLURM_* in their place); NCCL_COMM_ID;\n"
           "SHARDLAB_RUN_DIR; SHARDLAB_TIMEOUT_S (every wait's deadline, default 120 s); SHARDLAB_PROFILE_STEP\n"
           "(the step a profiler captures on a GPU: make profile-gpu).\n");
}

int catalog_bind(const CatLab *lab, const LabBind *binds, int n, CatSlot *slots) {
    if (n != lab->noptions) die("this is a bug in shardlab", "%s binds %d options, the catalog gives it %d", lab->name, n, lab->noptions);
    for (int i = 0; i < n; i++) {
        const CatOption *o = NULL;
        for (int k = 0; k < lab->noptions && !o; k++)
            if (!strcmp(lab->options[k].name, binds[i].name)) o = &lab->options[k];
        for (int k = 0; k < i && o; k++)
            if (!strcmp(binds[k].name, binds[i].name)) o = NULL;
        if (!o) die("this is a bug in shardlab", "%s binds --%s, which the catalog does not give it once", lab->name, binds[i].name);
        catalog_default(o, binds[i].value);
        slots[i] = (CatSlot){o, binds[i].value, 0};
    }
    return n;
}

// ": did you mean '--steps'?" when word is near one of the slots' names (or is one, without
// its dashes), else "".
static const char *did_you_mean(const CatSlot *slots, int nslots, const char *word, char *out, size_t n) {
    const char *names[MAX_SLOTS] = {0}, *near[SUGGEST_MAX];
    int n_names = nslots < MAX_SLOTS ? nslots : MAX_SLOTS;
    for (int i = 0; i < n_names; i++) names[i] = slots[i].opt->name;
    int found = suggest_nearest(word, names, n_names, near, SUGGEST_MAX);
    for (int i = 0; i < n_names && !found; i++)  // the name itself, without its dashes
        if (!strcmp(names[i], word)) near[found++] = names[i];
    if (!found) return "";
    char list[256];
    snprintf(out, n, ": did you mean %s?", suggest_join(near, found, "--", "", list, sizeof list));
    return out;
}

// ": it is an option of lab-single" when another lab has word as its own option (--moe given
// to lab-ddp), else "".
static const char *other_labs(const char *prog, const char *word, char *out, size_t n) {
    size_t len = 0;
    out[0] = 0;
    for (int l = 0; l < catalog_nlabs && len < n; l++) {
        const CatLab *lab = &catalog_labs[l];
        if (!strcmp(lab->name, prog)) continue;
        for (int i = 0; i < lab->noptions; i++)
            if (!strcmp(lab->options[i].name, word)) {
                len += (size_t)snprintf(out + len, n - len, "%slab-%s", len ? ", " : ": it is an option of ", lab->name);
                break;
            }
    }
    return out;
}

void catalog_parse(const char *prog, const char *about, CatSlot *slots, int nslots, int nfirst, const char *heading,
                   int argc, char **argv) {
    char hint[300];
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            print_help(prog, about, slots, nslots, nfirst, heading);
            exit(0);
        }
        if (strncmp(arg, "--", 2) != 0)
            usage_error(prog, "unexpected argument '%s'%s", arg,
                        did_you_mean(slots, nslots, arg + (arg[0] == '-'), hint, sizeof hint));
        const char *name = arg + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        CatSlot *s = NULL;
        for (int k = 0; k < nslots && !s; k++)
            if (strlen(slots[k].opt->name) == len && strncmp(slots[k].opt->name, name, len) == 0) s = &slots[k];
        if (!s) {
            char word[128];
            snprintf(word, sizeof word, "%.*s", (int)len, name);
            const char *near = did_you_mean(slots, nslots, word, hint, sizeof hint);
            if (!*near) near = other_labs(prog, word, hint, sizeof hint);
            usage_error(prog, "unknown option '--%s'%s", word, near);
        }
        const char *value = eq ? eq + 1 : NULL;
        if (s->opt->kind == OPT_FLAG && value) usage_error(prog, "--%s takes no value (got '%s')", s->opt->name, value);
        if (s->opt->kind != OPT_FLAG && !value) {
            if (i + 1 >= argc) usage_error(prog, "--%s needs a value (%s)", s->opt->name, s->opt->metavar);
            value = argv[++i];
        }
        char why[600];
        if (take(s->opt, value ? value : "", s->value, why, sizeof why) != 0) usage_error(prog, "%s", why);
        s->given = 1;
    }
}
