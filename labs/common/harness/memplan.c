// memplan.c — see memplan.h. The peaks, walked from each method's schedule:
//   acts (single, ddp, shard, zero, fsdp, ckpt)  the saved activations of a micro-batch, plus
//            the pass's workspace W = 4 (S + B' T C): gpt_pass_scratch_floats() S and the
//            residual gradient
//   ddp      params, grads, optim as after a step; comm: the bucket buffers
//   zero     params: + the unit being gathered (stage 3) and its fp32 copy (bf16), the largest
//            unit n; grads: + the fp32 gradient of the unit in backward (4 n, not stage 0-1
//            fp32, which write into the gradients) and its bf16 copy for the reduce-scatter
//            (stages 2-3), or the optimizer's fp32 copy of a bf16 slice, whichever is more;
//            comm: the reduce-scatter's output shard (stages 2-3)
//   fsdp     params: + the gathered units of the fullest moment of the schedule: the running
//            unit, the next with --prefetch, every unit gathered so far without resharding
//            (and the running unit's fp32 copy in bf16); grads, comm as ZeRO-3
//   pp       params, grads, optim as after a step; acts: the workspace, and at the peak the
//            activations its schedule holds at its fullest moment (memplan_pp_held walks the
//            stage's order); its messages in flight are timing's (not planned)
//   ep       params, grads, optim, comm as after a step; acts as single's
//   tp       params, grads, optim as after a step; the activations' peak (the pass's own
//            workspace on top of tp_acts_bytes) is not planned
#include "memplan.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "cp_layout.h"
#include "tp_layout.h"
#include "train.h"

double memplan_shard(double count, int N, int align) {
    uint64_t s = ((uint64_t)count + (uint64_t)N - 1) / (uint64_t)N;  // (exact: counts are whole, far below 2^64)
    return (double)((s + (uint64_t)align - 1) / (uint64_t)align * (uint64_t)align);
}

double memplan_unit_shard(const GptConfig *m, int u, int N, int align) {
    return memplan_shard((double)gpt_layer_size(m, u), N, align);
}

void memplan_pp_chunk(int L, int K, int k, int *first, int *last) {
    int before = k * (L / K) + (k < L % K ? k : L % K);  // blocks in chunks 0..k-1
    int blocks = L / K + (k < L % K);
    *first = k == 0 ? 0 : before + 1;
    *last = k == K - 1 ? L + 1 : before + blocks;
}

double memplan_pp_held(int schedule, int p, int v, int m, int s, const double *chunk_acts, int *held) {
    int total = m * v, warmup;
    if (schedule == 0) warmup = m;
    else if (schedule == 1) warmup = p - s - 1 < m ? p - s - 1 : m;
    else warmup = m == p ? total : 2 * (p - s - 1) + (v - 1) * p < total ? 2 * (p - s - 1) + (v - 1) * p : total;
    // Forward i runs local chunk (i / p) mod v, backward i local chunk v-1 - (i / p) mod v (one
    // chunk: chunk 0 both); the micro-batch does not change the bytes.
    double live = 0, most = 0;
    int n = 0, f = 0, b = 0;
    *held = 0;
    while (f < total || b < total) {
        int forward = f < warmup || (f < total && b >= f - warmup);  // after the warm-up: one each
        if (forward) {
            live += chunk_acts[(f / p) % v], n++, f++;
            if (live > most) most = live, *held = n;
        } else {
            live -= chunk_acts[v - 1 - (b / p) % v], n--, b++;
        }
    }
    return most;
}

// The units of ZeRO and FSDP: sum and largest of the shards s_u and padded units N s_u.
typedef struct {
    double shards, padded, max_shard, max_padded;
} Units;

// A bare count (psi > 0) is one unit.
static Units units_of(const GptConfig *m, double psi, int N, int align) {
    Units u = {0};
    for (int l = 0; l < (psi > 0 ? 1 : gpt_layer_count(m)); l++) {
        double s = psi > 0 ? memplan_shard(psi, N, align) : memplan_unit_shard(m, l, N, align);
        u.shards += s, u.padded += s * N;
        u.max_shard = fmax(u.max_shard, s), u.max_padded = fmax(u.max_padded, s * N);
    }
    return u;
}

// FSDP's gathered weights at the fullest moment (elements, e bytes each) plus the running
// unit's fp32 copy (w bytes per element; bf16 only): at each unit's forward and backward,
// what the schedule holds gathered (tests/test_fsdp.c walks it the same way).
static double fsdp_gathered_peak(const GptConfig *m, int N, int align, double e, double w, int prefetch, int reshard) {
    int U = gpt_layer_count(m);
    double worst = 0, gathered_before = 0;  // the units 0..u-1, all held without resharding
    for (int u = 0; u < U; u++) {
        double unit = memplan_unit_shard(m, u, N, align) * N;
        double next = prefetch && u + 1 < U ? memplan_unit_shard(m, u + 1, N, align) * N : 0;
        double prev = prefetch && u > 0 ? memplan_unit_shard(m, u - 1, N, align) * N : 0;
        double held = unit + next + (reshard ? 0 : gathered_before);  // forward of u
        worst = fmax(worst, e * held + w * unit);
        // Backward of u, from the head down: the unit below prefetched (already held without
        // resharding).
        held = unit + prev + (reshard ? 0 : gathered_before - prev);
        worst = fmax(worst, e * held + w * unit);
        gathered_before += unit;
    }
    return worst;
}

static void zero_plan(const GptConfig *m, const MemLayout *l, MemPlan *p) {
    int fsdp = strcmp(l->lab, "fsdp") == 0, st = fsdp ? 3 : l->stage, mixed = l->mixed;
    int R = fsdp && l->replicate > 1 ? l->replicate : 1, N = l->world / R, align = (mixed ? 2 : 1) * R;  // HSDP: a shard group
    double e = mixed ? 2 : 4, k = mixed ? 12 : 8;
    Units u = units_of(m, l->psi, N, align);
    double slice = st == 0 ? u.max_padded : u.max_shard;
    p->after[MEM_PARAMS] = e * (st == 3 ? u.shards : u.padded);
    p->after[MEM_GRADS] = e * (st >= 2 ? u.shards : u.padded);
    p->after[MEM_OPTIM] = l->offload ? 0 : k * (st == 0 ? u.padded : u.shards);
    p->formula = "ZeRO: e Psi' or e Psi'/N per the stage, K Psi'/N for the optimizer";
    // (HSDP: FSDP's formulas over the shard group's S = N/R ranks)
    p->after_formula[MEM_PARAMS] = st == 3 ? (R > 1 ? "e Psi'/S" : "e Psi'/N") : "e Psi'";
    p->after_formula[MEM_GRADS] = st >= 2 ? (R > 1 ? "e Psi'/S" : "e Psi'/N") : "e Psi'";
    p->after_formula[MEM_OPTIM] = l->offload ? "0 (in host memory: --offload)" : st == 0 ? "K Psi'" : R > 1 ? "K Psi'/S" : "K Psi'/N";
    p->host = l->offload ? 12 * u.shards : 0;
    if (l->psi > 0) return;  // no units to walk: no peaks
    if (fsdp) {
        p->peak[MEM_PARAMS] = p->after[MEM_PARAMS] +
                              fsdp_gathered_peak(m, N, align, e, mixed ? 4 : 0, l->prefetch, l->reshard);
        p->peak_formula[MEM_PARAMS] = "the shards + the gathered units of the schedule's fullest moment (one; two "
                                      "with --prefetch; all so far with --no-reshard)";
    } else {
        p->peak[MEM_PARAMS] = p->after[MEM_PARAMS] + ((st == 3 ? e : 0) + (mixed ? 4 : 0)) * u.max_padded;
        p->peak_formula[MEM_PARAMS] = st == 3 ? "the shards + one gathered unit (the largest)"
                                    : mixed   ? "e Psi' + the fp32 copy of the largest unit"
                                              : "as after a step";
    }
    double backward = !mixed && st <= 1 ? 0 : (4 + (mixed && st >= 2 ? e : 0)) * u.max_padded;
    double update = mixed && !l->offload ? 4 * slice : 0;
    p->peak[MEM_GRADS] = p->after[MEM_GRADS] + fmax(backward, update);
    p->peak_formula[MEM_GRADS] = st >= 2 ? "the shards + one unit's full gradient (the largest), never more"
                               : mixed   ? "e Psi' + the fp32 gradient of the largest unit"
                                         : "as after a step";
    p->peak[MEM_OPTIM] = p->after[MEM_OPTIM];
    p->peak[MEM_COMM] = st >= 2 ? e * u.max_shard : 0;
    if (st >= 2) p->peak_formula[MEM_COMM] = "one reduce-scatter's output shard";
}

// A bare parameter count: the state after a step, as a replica or ZeRO's stages hold it (ddp's
// bucket buffers too); no activations and no peaks without the shape that decides them.
static int bare_plan(const MemLayout *l, MemPlan *p, char *why, size_t nwhy) {
    const char *lab = l->lab;
    if (!strcmp(lab, "pp") || !strcmp(lab, "tp") || !strcmp(lab, "ckpt"))
        return snprintf(why, nwhy, "%s splits the model by its shape: a bare parameter count cannot be planned", lab), -1;
    if (l->world < 1) return snprintf(why, nwhy, "%d ranks", l->world), -1;
    double psi = l->psi;
    p->after_formula[MEM_ACTS] = "not planned: a parameter count alone has no shape";
    p->peak_formula[MEM_ACTS] = NULL;
    p->after[MEM_COMM] = 0, p->after_formula[MEM_COMM] = "0";
    if (!strcmp(lab, "zero") || !strcmp(lab, "fsdp")) {
        zero_plan(NULL, l, p);
    } else {
        p->after[MEM_PARAMS] = p->after[MEM_GRADS] = 4 * psi, p->after[MEM_OPTIM] = 8 * psi;
        p->formula = "4 Psi, 4 Psi, 8 Psi (a full replica)";
        p->after_formula[MEM_PARAMS] = p->after_formula[MEM_GRADS] = "4 Psi", p->after_formula[MEM_OPTIM] = "8 Psi";
        if (!strcmp(lab, "ddp") && l->buckets) p->after[MEM_COMM] = 4 * psi, p->after_formula[MEM_COMM] = "4 Psi";
    }
    for (int k = 0; k < MEM_CATEGORIES; k++) p->peak[k] = NAN, p->peak_formula[k] = NULL;
    return 0;
}

// A context-parallel rank: a replica whose passes see T' tokens of each sequence. After a
// step the saved activations of T' tokens a sequence and the ring's blocks in flight; at the
// peak the pass's workspace on top: W' = 4 (S' + B' T' C), the rank's position rows and their
// gradient (2 T' C), the ring's workspace, and under --mixed q, k, v and o widened to fp32
// for the ring (4 B' T' C).
static int cp_plan(const GptConfig *m, const MemLayout *l, MemPlan *p, char *why, size_t nwhy) {
    CpLayout lay;
    if (l->cp < 1 || l->world % l->cp || l->cp_rank < 0 || l->cp_rank >= l->cp || l->micro < 1)
        return snprintf(why, nwhy, "%d context-parallel ranks of %d, micro-batches of %d", l->cp, l->world, l->micro), -1;
    if (l->cp_layout != CP_CONTIGUOUS && l->cp_layout != CP_ZIGZAG)
        return snprintf(why, nwhy, "no context-parallel layout of that name"), -1;
    if (cp_layout_init(&lay, l->cp_layout, m->seq, l->cp) != 0)
        return snprintf(why, nwhy, "%d tokens cannot be split in %d chunks", m->seq, 2 * l->cp), -1;
    GptConfig local = *m;
    local.seq = cp_layout_count(&lay, l->cp_rank);
    double psi = (double)gpt_num_params(m), B = l->micro, T = local.seq, C = m->dim;
    p->after[MEM_PARAMS] = p->after[MEM_GRADS] = 4 * psi, p->after[MEM_OPTIM] = 8 * psi;
    p->formula = "4 Psi, 4 Psi, 8 Psi (a full replica)";
    p->after_formula[MEM_PARAMS] = p->after_formula[MEM_GRADS] = "4 Psi", p->after_formula[MEM_OPTIM] = "8 Psi";
    double acts = (double)gpt_acts_bytes(&local, l->micro);
    double W = 4.0 * ((double)gpt_pass_scratch_floats(&local, l->micro, l->gpu) + B * T * C + 2 * T * C +
                      (double)cp_workspace_floats(&lay, l->micro, m->dim, m->heads) + (l->mixed ? 4 * B * T * C : 0));
    p->after[MEM_ACTS] = acts, p->peak[MEM_ACTS] = acts + W;
    p->after_formula[MEM_ACTS] = "single's saved activations at T' tokens a sequence";
    p->peak_formula[MEM_ACTS] = "the saved activations + the pass's workspace, the position rows and the ring's workspace";
    p->after[MEM_COMM] = p->peak[MEM_COMM] = 4.0 * (double)cp_comm_floats(&lay, l->cp_kv, l->micro, m->dim);
    p->after_formula[MEM_COMM] = l->cp_kv == CP_KV_ALL_GATHER ? "16 n B M C: every rank's K/V and their gradients"
                                                               : "32 B M C: two K/V blocks in flight, with their gradients";
    p->peak_formula[MEM_COMM] = p->after_formula[MEM_COMM];
    for (int k = 0; k < MEM_ACTS; k++) p->peak[k] = p->after[k];
    return 0;
}

// An expert-parallel rank: the replicated parameters and E/N experts of every block; the
// saved activations of its B' sequences, the experts' rows counted where they run (at most
// R, moe_expert_rows: every rank's tokens may pick this rank's experts); at the peak the
// pass's workspace W = 4 (S + B' T C) on top. As comm, the dispatcher's buffers: the R rows
// in flight and every rank's counts and probability sums, 4 (R C + N (K E + 2 E)).
static int ep_plan(const GptConfig *m, const MemLayout *l, MemPlan *p, char *why, size_t nwhy) {
    if (m->experts < 1 || l->world < 1 || m->experts % l->world || l->micro < 1)
        return snprintf(why, nwhy, "%d experts over %d ranks, micro-batches of %d", m->experts, l->world, l->micro), -1;
    GptConfig local = *m;
    local.expert_ranks = l->world, local.expert_rank = 0;  // (every rank holds as many experts)
    MoeConfig x = gpt_moe_config(&local);
    double mine = (double)gpt_num_params(&local), BT = (double)l->micro * m->seq, C = m->dim;
    double R = moe_expert_rows(&x, (int)BT);
    p->after[MEM_PARAMS] = p->after[MEM_GRADS] = 4 * mine, p->after[MEM_OPTIM] = 8 * mine;
    p->formula = "4, 4, 8 (Psi_rep + L E/N Psi_exp): the replicated parameters, E/N experts a block";
    p->after_formula[MEM_PARAMS] = p->after_formula[MEM_GRADS] = "4 (Psi_rep + L E/N Psi_exp)";
    p->after_formula[MEM_OPTIM] = "8 (Psi_rep + L E/N Psi_exp)";
    double acts = (double)gpt_acts_bytes(&local, l->micro);
    p->after[MEM_ACTS] = acts;
    p->peak[MEM_ACTS] = acts + 4.0 * ((double)gpt_pass_scratch_floats(&local, l->micro, l->gpu) + BT * C);
    p->after_formula[MEM_ACTS] = "single's saved activations of B' sequences, the experts' rows (at most R) where they run";
    p->peak_formula[MEM_ACTS] = "the saved activations + the pass's workspace W = 4 (S + B' T C)";
    p->after[MEM_COMM] = p->peak[MEM_COMM] = 4.0 * (R * C + (double)l->world * (m->topk * m->experts + 2.0 * m->experts));
    p->after_formula[MEM_COMM] = p->peak_formula[MEM_COMM] = "4 (R C + N (K E + 2 E)): the rows in flight, every rank's counts";
    for (int k = 0; k < MEM_ACTS; k++) p->peak[k] = p->after[k];
    return 0;
}

int memplan(const GptConfig *m, const MemLayout *l, MemPlan *p, char *why, size_t nwhy) {
    for (int k = 0; k < MEM_CATEGORIES; k++) {
        p->after[k] = p->peak[k] = NAN;
        p->after_formula[k] = NULL, p->peak_formula[k] = "as after a step";
    }
    p->host = 0;
    const char *lab = l->lab;
    int zero = strcmp(lab, "zero") == 0, fsdp = strcmp(lab, "fsdp") == 0, pp = strcmp(lab, "pp") == 0, tp = strcmp(lab, "tp") == 0;
    int replica = !strcmp(lab, "single") || !strcmp(lab, "ddp") || !strcmp(lab, "shard") || !strcmp(lab, "ckpt");
    if (!strcmp(lab, "cp")) return cp_plan(m, l, p, why, nwhy);
    if (!strcmp(lab, "ep")) return ep_plan(m, l, p, why, nwhy);
    if (!zero && !fsdp && !pp && !tp && !replica) return snprintf(why, nwhy, "no memory formula for the %s lab", lab), -1;
    if (zero && (l->stage < 0 || l->stage > 3)) return snprintf(why, nwhy, "ZeRO stage %d is not 0-3", l->stage), -1;
    if (fsdp && l->replicate > 1 && l->world % l->replicate)
        return snprintf(why, nwhy, "--replicate %d does not divide %d ranks", l->replicate, l->world), -1;
    if (l->psi > 0) return bare_plan(l, p, why, nwhy);
    if (l->world < 1 || l->micro < 1) return snprintf(why, nwhy, "%d ranks, micro-batches of %d", l->world, l->micro), -1;

    // The activations of a micro-batch, and the pass's workspace on top at the peak. On a GPU
    // the workspace also holds the kernels' own (gpt_pass_scratch_floats).
    double acts = (double)gpt_acts_bytes(m, l->micro);
    double W = 4.0 * ((double)gpt_pass_scratch_floats(m, l->micro, l->gpu) + (double)l->micro * m->seq * m->dim);
    p->after[MEM_ACTS] = acts, p->peak[MEM_ACTS] = acts + W;
    train_acts_formula(m, 1, &p->after_formula[MEM_ACTS]);  // the saved activations of a micro-batch of B sequences
    p->peak_formula[MEM_ACTS] = "the saved activations + the pass's workspace W = 4 (S + B T C)";
    p->after[MEM_COMM] = p->peak[MEM_COMM] = 0;
    p->after_formula[MEM_COMM] = "0";
    double psi = (double)gpt_num_params(m);
    if (tp && (l->tp < 1 || m->heads % l->tp)) return snprintf(why, nwhy, "%d tensor-parallel ranks for %d heads", l->tp, m->heads), -1;
    if (zero || fsdp) {
        zero_plan(m, l, p);
    } else if (tp) {
        double mine = 0;  // Psi_rep + Psi_split / t
        for (int k = 0; k < gpt_layer_count(m); k++)
            mine += (double)tp_replicated_floats(m, l->vp, k) + (double)tp_split_floats(m, l->vp, l->tp, k);
        p->after[MEM_PARAMS] = p->after[MEM_GRADS] = 4 * mine, p->after[MEM_OPTIM] = 8 * mine;
        p->after[MEM_ACTS] = (double)tp_acts_bytes(m, l->tp, l->sp, l->vp, l->micro), p->peak[MEM_ACTS] = NAN;
        p->formula = "4, 4, 8 (Psi_rep + Psi_split/t)";
        p->after_formula[MEM_PARAMS] = p->after_formula[MEM_GRADS] = "4 (Psi_rep + Psi_split/t)";
        p->after_formula[MEM_OPTIM] = "8 (Psi_rep + Psi_split/t)";
        p->after_formula[MEM_ACTS] = "4 BT a: a micro-batch's rows, a floats each on a rank of t (the tp lab prints a's terms)";
        p->peak_formula[MEM_ACTS] = NULL;
    } else if (pp) {
        p->after[MEM_PARAMS] = p->after[MEM_GRADS] = 4 * l->stage_params, p->after[MEM_OPTIM] = 8 * l->stage_params;
        p->after[MEM_COMM] = p->peak[MEM_COMM] = NAN;
        p->after_formula[MEM_COMM] = "the messages in flight: timing's (not planned)";
        p->peak_formula[MEM_COMM] = NULL;
        if (l->in_flight > 0) {  // between steps only the workspace; at the peak, the micro-batches in flight too
            p->after[MEM_ACTS] = W, p->peak[MEM_ACTS] = W + l->held_acts;
            p->after_formula[MEM_ACTS] = "the pass's workspace W = 4 (S + B T C)";
            p->peak_formula[MEM_ACTS] =
                l->interleaved ? "W + the (micro-batch, chunk) pairs in flight at the schedule's fullest moment, up to "
                                 "min(2 (p - s - 1) + (v - 1) p + 1, m v) (all m v when m = p), each its chunk's activations"
                               : "W + the micro-batches in flight (GPipe: m; 1F1B: min(m, p - s)) x the stage's activations";
        } else {
            p->after[MEM_ACTS] = p->peak[MEM_ACTS] = NAN;
            p->after_formula[MEM_ACTS] = "the schedule's micro-batches in flight (graded as schedule.in_flight; not planned)";
            p->peak_formula[MEM_ACTS] = NULL;
        }
        p->formula = "4 Psi_s, 4 Psi_s, 8 Psi_s (this stage's layers)";
        p->after_formula[MEM_PARAMS] = p->after_formula[MEM_GRADS] = "4 Psi_s", p->after_formula[MEM_OPTIM] = "8 Psi_s";
    } else {
        p->after[MEM_PARAMS] = p->after[MEM_GRADS] = 4 * psi, p->after[MEM_OPTIM] = 8 * psi;
        p->formula = "4 Psi, 4 Psi, 8 Psi (a full replica)";
        p->after_formula[MEM_PARAMS] = p->after_formula[MEM_GRADS] = "4 Psi", p->after_formula[MEM_OPTIM] = "8 Psi";
        if (!strcmp(lab, "ddp") && l->buckets) {
            p->after[MEM_COMM] = p->peak[MEM_COMM] = 4 * psi;
            p->after_formula[MEM_COMM] = "4 Psi", p->peak_formula[MEM_COMM] = "the bucket buffers, 4 Psi";
        }
        if (!strcmp(lab, "ckpt")) {
            p->after[MEM_ACTS] = l->ckpt_acts, p->peak[MEM_ACTS] = l->ckpt_acts + W;
            p->formula = "16 Psi; acts per the policy";
            p->after_formula[MEM_ACTS] = "the activations the policy keeps";
            p->peak_formula[MEM_ACTS] = "the policy's activations + the pass's workspace W = 4 (S + B T C)";
        }
    }
    for (int k = 0; k < MEM_ACTS; k++)
        if (isnan(p->peak[k])) p->peak[k] = p->after[k];
    return 0;
}
