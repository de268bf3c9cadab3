// memfit.c — see memfit.h.
#include "memfit.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "catalog.h"
#include "check.h"
#include "common/model/gpt.h"
#include "cp_layout.h"
#include "tp_layout.h"
#include "train.h"

// What the formulas leave out: the kernels' scratch (the backward pass' logits gradient and
// the like: measured 7-11% above the formula at the peak of single's runs with --dim 128 to
// 512), and what a process holds whatever its model (the synthetic corpus and its sampler,
// the run log, the libraries: about 110 MiB of private and 60 MiB of shared memory for
// single's default run). 15% and 256 MiB a rank cover both with room. A run this refuses
// would need nearly everything the machine has left, where the kernel starts killing
// processes anyway.
#define PLAN_MARGIN 1.15
#define PLAN_MARGIN_BYTES (256.0 * 1024 * 1024)

static double option_number(int nopts, char *const opts[], const char *name, double fallback) {
    const char *text = catalog_value_in(nopts, opts, name);
    char *end;
    double v = text && *text ? strtod(text, &end) : 0;
    return text && *text && !*end && v >= 0 && v <= 1e9 ? v : fallback;  // (the options' bounds are far below)
}

static int option_is(int nopts, char *const opts[], const char *name, const char *value) {
    const char *text = catalog_value_in(nopts, opts, name);
    return text && strcmp(text, value) == 0;
}

// pp's depth when --layers is left to it (pp.c, "The model's depth"): --split's blocks, else
// one block per model chunk, at least 2. A --split pp would refuse counts as the latter.
static int pp_auto_layers(int nopts, char *const opts[], int chunks) {
    int fallback = chunks > 2 ? chunks : 2;
    const char *p = catalog_value_in(nopts, opts, "split");
    long sum = 0;
    while (p && *p) {
        char *end;
        long b = strtol(p, &end, 10);
        if (end == p || b < 1 || b > 4096 || (*end && *end != ',')) return fallback;
        sum += b;
        p = *end ? end + 1 : end;
    }
    return sum >= 1 && sum <= 4096 ? (int)sum : fallback;
}

MemNeed memfit_need(const char *lab, const TrainArgs *a, int world, int nopts, char *const opts[], int on_host) {
    MemNeed n = {0};
    double N = world > 0 ? world : 1, K = a->accum, B = a->batch;
    int pp = strcmp(lab, "pp") == 0;
    double pp_dp = pp ? fmax(1, option_number(nopts, opts, "dp", 1)) : 1, pp_p = fmax(1, floor(N / pp_dp));
    int interleaved = pp && option_is(nopts, opts, "schedule", "interleaved");
    double pp_v = interleaved ? fmax(1, option_number(nopts, opts, "chunks", 2)) : 1;
    GptConfig cfg = train_model_config(a);
    if (cfg.layers == TRAIN_LAYERS_AUTO) cfg.layers = pp_auto_layers(nopts, opts, (int)(pp_p * pp_v));
    if (cfg.layers < 1 || cfg.dim < 1 || cfg.heads < 1 || cfg.seq < 1 || K < 1 || B < 1) return n;

    double P = (double)gpt_num_params(&cfg), A = train_acts_formula(&cfg, 1, NULL);  // bytes a sequence
    double biggest_layer = 0;
    for (int l = 0; l < gpt_layer_count(&cfg); l++)
        if ((double)gpt_layer_size(&cfg, l) > biggest_layer) biggest_layer = (double)gpt_layer_size(&cfg, l);
    int mixed = catalog_value_in(nopts, opts, "mixed") != NULL;
    double e = mixed ? 2 : 4, k = mixed ? 12 : 8;  // bytes per weight (and gradient); per optimizer state
    double t = 1;                                  // tp: the ways a block's matrices are split
    double dev = 0, host = 0, micro = B / (N * K), tokens = cfg.seq;  // cp: a rank's tokens of a sequence

    if (strcmp(lab, "single") == 0) {
        micro = B / K;
        dev = 16 * P + A * micro;
    } else if (strcmp(lab, "ddp") == 0 || strcmp(lab, "ckpt") == 0 || strcmp(lab, "shard") == 0) {
        // A replica: 16 Psi, and ddp's bucket buffers (a second copy of the gradients) unless
        // it reduces each tensor in place. ckpt's policies only ever lower the activations.
        int buckets = strcmp(lab, "ddp") == 0 && !option_is(nopts, opts, "sync", "per-tensor");
        dev = 16 * P + (buckets ? 4 * P : 0) + A * micro;
    } else if (strcmp(lab, "zero") == 0) {
        double stage = option_number(nopts, opts, "stage", 1);
        int offload = catalog_value_in(nopts, opts, "offload") != NULL;
        dev = e * P / (stage >= 3 ? N : 1) + e * P / (stage >= 2 ? N : 1) + (offload ? 0 : k * P / (stage >= 1 ? N : 1)) +
              2 * e * biggest_layer  // a gathered layer and its gradient on the way to its shard
              + A * micro;
        host = offload ? 12 * P / N : 0;
    } else if (strcmp(lab, "fsdp") == 0) {
        int keep = catalog_value_in(nopts, opts, "no-reshard") != NULL;
        dev = (2 * e + k) * P / N + (keep ? e * P : 2 * e * biggest_layer) + A * micro;
    } else if (strcmp(lab, "tp") == 0) {
        // Psi_rep + Psi_split / t and the activations, as tp.c's table counts them.
        double dp = fmax(1, option_number(nopts, opts, "dp", 1)), mine = 0;
        int sp = catalog_value_in(nopts, opts, "sp") != NULL, vp = catalog_value_in(nopts, opts, "vocab-parallel") != NULL;
        t = fmax(1, floor(N / dp));
        for (int l = 0; l < gpt_layer_count(&cfg); l++)
            mine += (double)tp_replicated_floats(&cfg, vp, l) + (double)tp_split_floats(&cfg, vp, (int)t, l);
        micro = B / (dp * K);
        dev = 16 * mine + (double)tp_acts_bytes(&cfg, (int)t, sp, vp, (int)ceil(micro));
    } else if (strcmp(lab, "cp") == 0) {
        // A replica, the activations of the most tokens a rank holds of each sequence, and the
        // ring's K/V blocks in flight (cp_layout.h). A layout too short for its chunks is the
        // lab's to refuse, after this: it is planned at T/n tokens a rank.
        double dp = fmax(1, option_number(nopts, opts, "dp", 1));
        int group = (int)fmax(1, floor(N / dp)), kv = option_is(nopts, opts, "kv", "all-gather") ? CP_KV_ALL_GATHER : CP_KV_RING;
        CpLayout l;
        int kind = option_is(nopts, opts, "layout", "contiguous") ? CP_CONTIGUOUS : CP_ZIGZAG;
        int fits = cp_layout_init(&l, kind, cfg.seq, group) == 0;
        micro = B / (dp * K);
        GptConfig local = cfg;
        local.seq = fits ? cp_layout_max_count(&l) : (int)ceil((double)cfg.seq / group);
        tokens = local.seq;
        double comm = fits ? 4.0 * (double)cp_comm_floats(&l, kv, (int)ceil(micro), cfg.dim) : 0;
        dev = 16 * P + train_acts_formula(&local, 1, NULL) * ceil(micro) + comm;
    } else if (pp) {
        // A stage: its share of the layers, and the activations of the micro-batches in flight
        // (all m under GPipe, at most p under 1F1B); the whole model once on the host while
        // the stage takes its layers from it.
        double m = fmax(1, option_number(nopts, opts, "micro", 4));
        double in_flight = option_is(nopts, opts, "schedule", "gpipe") ? m : fmin(m, pp_p * pp_v);
        micro = B / (pp_dp * m);
        dev = 16 * P / pp_p + in_flight * A * micro / pp_p;
        host = 4 * P;
    } else {
        return n;  // no model (collectives)
    }

    // A GPU's kernels have a workspace of their own in each pass (ops.h: naive attention's dS
    // [B', NH, T, T] is most of it), counted with the pass's workspace; the CPU's kernels
    // need only the scratch the margin below covers.
    if (!on_host) dev += (double)ops_gpu_workspace_bytes((int)ceil(micro), cfg.seq, cfg.dim, cfg.heads, cfg.vocab,
                                                     cfg.attn == GPT_ATTN_FLASH);
    n.device = dev;
    n.host = host;
    n.rank = PLAN_MARGIN * (dev + (on_host ? host : 0)) + PLAN_MARGIN_BYTES;
    n.micro_batch = micro;
    double b = ceil(micro), T = tokens, C = cfg.dim;
    // Flash attention never holds the T x T matrix: its largest attention tensor is lse.
    int flash = cfg.attn == GPT_ATTN_FLASH;
    double mlp = b * T * 4 * C / t, att = b * (cfg.heads / t) * T * (flash ? 1 : T), logits = b * T * cfg.vocab;
    n.largest = mlp, n.largest_what = "an MLP activation (B T 4C)";
    if (att > n.largest)
        n.largest = att, n.largest_what = flash ? "the attention's log-sum-exps (B NH T)" : "an attention matrix (B NH T^2)";
    if (logits > n.largest) n.largest = logits, n.largest_what = "a logits tensor (B T V)";
    return n;
}

static double read_number_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[64];
    double v = -1;
    if (fgets(line, sizeof line, f)) {
        char *end;
        v = strtod(line, &end);
        if (end == line) v = -1;  // "max": no limit
    }
    fclose(f);
    return v;
}

double memfit_host_available(void) {
    double avail = -1;
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    while (f && fgets(line, sizeof line, f)) {
        double kb;
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) avail = kb * 1024;
    }
    if (f) fclose(f);
    // cgroup v2: this process' group, e.g. "0::/user.slice/..." ("0::/" inside a container).
    char group[512] = "", path[700];
    f = fopen("/proc/self/cgroup", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "0::", 3) == 0) {
            snprintf(group, sizeof group, "%s", line + 3);
            group[strcspn(group, "\n")] = 0;
        }
    if (f) fclose(f);
    if (group[0]) {
        snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", strcmp(group, "/") == 0 ? "" : group);
        double max = read_number_file(path);
        snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.current", strcmp(group, "/") == 0 ? "" : group);
        double current = read_number_file(path);
        if (max > 0 && current >= 0 && (avail < 0 || max - current < avail)) avail = max - current > 0 ? max - current : 0;
    }
    return avail;
}

int memfit_check(const MemNeed *n, int ranks, double available, const char *where, const char *source, char *why,
              size_t nwhy) {
    if (available >= 0 && n->rank * ranks > available) {
        char need[32], all[32], have[32];
        snprintf(why, nwhy, "this run needs about %s of memory per rank, %s for its %d rank%s on %s, and %s has %s "
                            "available (%s): lower --dim, --layers, --batch or --seq, or raise --accum, or use a "
                            "sharding lab (zero, fsdp, tp, pp) that splits the model over the ranks",
                 format_bytes(need, sizeof need, n->rank), format_bytes(all, sizeof all, n->rank * ranks), ranks,
                 ranks == 1 ? "" : "s", where, where, format_bytes(have, sizeof have, available), source);
        return -1;
    }
    if (n->largest > MEMFIT_MAX_ELEMENTS) {
        snprintf(why, nwhy, "a micro-batch of %g sequences makes %s of %.0f elements, more than the kernels' int "
                            "counts hold (%.0f): lower --batch, --seq or --dim, or raise --accum",
                 n->micro_batch, n->largest_what, n->largest, MEMFIT_MAX_ELEMENTS);
        return -1;
    }
    return 0;
}

void memfit_check_rank(const char *lab, const TrainArgs *a, const Device *dev, int world, int local_world, int argc,
                     char **argv) {
    int on_host = dev->kind != DEVICE_CUDA;
    MemNeed n = memfit_need(lab, a, world, argc - 1, argv + 1, on_host);
    char why[768], where[64] = "host memory";
    int ranks = local_world > 0 ? local_world : 1;
    double available = -1;
    if (on_host) {
        available = memfit_host_available();  // the simulated ranks of this node all live in it
    } else {
        size_t free_bytes, total_bytes;
        snprintf(where, sizeof where, "GPU %d", dev->ordinal);
        if (device_mem_info(dev, &free_bytes, &total_bytes) == 0) available = (double)free_bytes;
        ranks = dev->shared ? (ranks + dev->gpus - 1) / dev->gpus : 1;  // ranks sharing this GPU
    }
    if (memfit_check(&n, ranks, available, where, on_host ? "MemAvailable" : "its free memory", why, sizeof why) != 0)
        usage_error(lab, "%s", why);
    if (!on_host && n.host > 0) {  // what a GPU rank keeps on the host besides
        MemNeed h = n;
        h.rank = PLAN_MARGIN * n.host + PLAN_MARGIN_BYTES;
        if (memfit_check(&h, local_world > 0 ? local_world : 1, memfit_host_available(), "host memory", "MemAvailable", why,
                      sizeof why) != 0)
            usage_error(lab, "%s", why);
    }
}

MemNeed memfit_need_options(const char *lab, int world, int nopts, char *const opts[]) {
    TrainArgs a;
    train_args_defaults(&a);
    if (strcmp(lab, "pp") == 0) a.layers = TRAIN_LAYERS_AUTO;  // as pp.c starts
    int *fields[] = {&a.batch, &a.seq, &a.layers, &a.dim, &a.heads, &a.accum};
    const char *names[] = {"batch", "seq", "layers", "dim", "heads", "accum"};
    for (int i = 0; i < 6; i++) *fields[i] = (int)option_number(nopts, opts, names[i], *fields[i]);
    if (option_is(nopts, opts, "attn", "naive")) a.attn = "naive";  // else the default's
    // --moe as the lab resolves it (args.c); a shape the layer cannot have is the lab's to refuse.
    a.moe = (int)option_number(nopts, opts, "moe", 0);
    a.topk = (int)option_number(nopts, opts, "topk", a.moe < 2 ? a.moe : 2);
    a.expert_dim = (int)option_number(nopts, opts, "expert-dim", 4 * a.dim);
    MoeConfig m = {.C = a.dim, .E = a.moe, .K = a.topk, .H = a.expert_dim};
    if (a.moe != 0 && *moe_config_check(&m)) a.moe = 0;
    return memfit_need(lab, &a, world, nopts, opts, 1);
}
