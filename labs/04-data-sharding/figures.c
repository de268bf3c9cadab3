// figures.c — see loader.h: the data-sharding lab's formulas, and every rank's figures
// checked against them.
#include "sharding.h"  // defines: shard_first(), Loader, shard_held_formula(), ...

#include <stdlib.h>

#include "common/harness/check.h"  // defines: malloc_check()

int shard_first(const Loader *L, int r) { return r * L->per_rank; }

// The table at the top of labs/04-data-sharding/shard.c, per rank.
uint64_t shard_held_formula(const Loader *L, int r) {
    uint64_t whole = (uint64_t)L->D * (uint64_t)L->S;
    if (L->strategy == SLICE) return whole;
    if (L->strategy == DISPATCH) return r == 0 ? whole : 0;
    return (uint64_t)L->E * (uint64_t)L->per_rank * (uint64_t)L->S;
}

uint64_t shard_sent_formula(const Loader *L, int r) {
    return L->strategy == DISPATCH && r == 0 ? (uint64_t)(L->N - 1) * 4 * words_for_bytes(part_bytes(L)) : 0;
}
uint64_t shard_recv_formula(const Loader *L, int r) {
    return L->strategy == DISPATCH && r != 0 ? 4 * (uint64_t)words_for_bytes(part_bytes(L)) : 0;
}

// Every rank's figures on every rank: n doubles each, sent as float pairs (hi, lo) as
// dist_sum_over_ranks does, exact for whole numbers below 2^48. all: [N][n].
static void gather_figures(DistGroup *g, const double *mine, int n, double *all) {
    float pairs[2 * 8], *every = malloc_check((size_t)(2 * n * g->size) * sizeof(float));
    for (int i = 0; i < n; i++) pairs[2 * i] = (float)mine[i], pairs[2 * i + 1] = (float)(mine[i] - (double)(float)mine[i]);
    dist_all_gather(g, pairs, every, (size_t)(2 * n * g->size));  // rank r's chunk: its 2n floats
    for (int i = 0; i < n * g->size; i++) all[i] = (double)every[2 * i] + (double)every[2 * i + 1];
    free(every);
}

void shard_check_data(RunLog *log, const Loader *ld, int64_t step, int first, uint64_t sent, uint64_t recv, int *warned) {
    int r = ld->rank;
    int held_ok = ld->held == shard_held_formula(ld, r);
    int moved_ok = sent == shard_sent_formula(ld, r) && recv == shard_recv_formula(ld, r);
    if (!first && ((held_ok && moved_ok) || *warned)) return;
    *warned |= !(held_ok && moved_ok);
    if (ld->strategy == SAMPLER || !held_ok)
        runlog_self_check(log, "data.held", held_ok, (double)ld->held, (double)shard_held_formula(ld, r),
                          "step %lld: holding %llu bytes of the dataset, the formula says %llu", (long long)step,
                          (unsigned long long)ld->held, (unsigned long long)shard_held_formula(ld, r));
    runlog_self_check(log, "data.bytes_moved", moved_ok, (double)(sent + recv), (double)(shard_sent_formula(ld, r) + shard_recv_formula(ld, r)),
                      "step %lld moved %llu bytes out and %llu in; the formulas say %llu and %llu", (long long)step,
                      (unsigned long long)sent, (unsigned long long)recv, (unsigned long long)shard_sent_formula(ld, r),
                      (unsigned long long)shard_recv_formula(ld, r));
}

void shard_report_data(RunLog *log, const Loader *ld, DistGroup *g, const char *strategy_name, double held, double recv,
                        double sent) {
    int N = ld->N, B = ld->B;
    Strategy strategy = ld->strategy;
    double mine[3] = {held, recv, sent}, *all = malloc_check(3 * (size_t)N * sizeof *all);
    gather_figures(g, mine, 3, all);
    if (ld->rank == 0) {
        runlog_printf(log, "\ndata sharding, strategy %s: D = %lld items of T+1 = %d bytes, B = %d, N = %d, "
                           "P = (B/N)(T+1) = %zu bytes a part\n",
                      strategy_name, (long long)ld->D, ld->S, B, N, part_bytes(ld));
        runlog_printf(log, "  %4s %12s  %-30s %10s  %-18s %10s  %s\n", "rank", "held", "formula", "recv/step", "formula",
                      "sent/step", "formula");
        int ok = 1;
        double total = 0, total_formula = 0;
        for (int r = 0; r < N; r++) {
            const double *f = all + 3 * r;
            const char *held_text = strategy == SLICE ? "D(T+1)" : strategy == SAMPLER ? "floor(D/B)(B/N)(T+1)"
                                  : r == 0 ? "D(T+1)" : NULL;
            char hf[48] = "0", rf[48] = "0", sf[48] = "0";
            if (held_text) snprintf(hf, sizeof hf, "%s = %llu", held_text, (unsigned long long)shard_held_formula(ld, r));
            if (shard_recv_formula(ld, r)) snprintf(rf, sizeof rf, "4 ceil(P/4) = %llu", (unsigned long long)shard_recv_formula(ld, r));
            if (shard_sent_formula(ld, r))
                snprintf(sf, sizeof sf, "(N-1) 4 ceil(P/4) = %llu", (unsigned long long)shard_sent_formula(ld, r));
            runlog_printf(log, "  %4d %12.0f  %-30s %10.0f  %-18s %10.0f  %s\n", r, f[0], hf, f[1], rf, f[2], sf);
            ok &= f[0] == (double)shard_held_formula(ld, r) && f[1] == (double)shard_recv_formula(ld, r) &&
                  f[2] == (double)shard_sent_formula(ld, r);
            total += f[0], total_formula += (double)shard_held_formula(ld, r);
        }
        runlog_printf(log, "  held over all ranks: %.0f bytes (slice: N D(T+1) = %.0f, sampler: floor(D/B) B (T+1) = "
                           "%.0f, dispatch: D(T+1) = %.0f)\n",
                      total, (double)N * ld->D * ld->S, (double)ld->E * B * ld->S, (double)ld->D * ld->S);
        if (strategy == DISPATCH)
            runlog_printf(log, "  a part's %zu bytes travel as %zu words = %zu bytes (the same when P is a multiple of 4)\n",
                          part_bytes(ld), words_for_bytes(part_bytes(ld)), 4 * words_for_bytes(part_bytes(ld)));
        runlog_self_check(log, "data.table", ok, total, total_formula,
                          "a rank's figures differ from the formulas (the table above)");
    }
    free(all);
}
