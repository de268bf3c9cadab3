// check_ep.c — the checks of expert parallelism's regions: `make check TODO=ep-capacity`.
//
//   ep-capacity  (19-ep/dispatch.c) dispatch_serve on counts made here: 1 to 4 ranks of 5 or
//                8 tokens, 4 or 6 experts, top 1 to 3, dropless and capacity factors 0.5 to
//                1.25, so that some experts overflow and others do not. Every (rank, choice,
//                expert) count served against the rule computed here: an expert serves at
//                most ceil(F n N K / E) assignments of the pass's n N tokens (every rank's),
//                first choices before second choices, and within a choice rank 0's tokens
//                before rank 1's; and the drops returned against the sum of what was not served.
// The references are computed here, never with the solution's code.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "19-ep/dispatch.h"
#include "common/model/rng.h"
#include "todo.h"

// ---- ep-capacity ----------------------------------------------------------------------------

enum { MAX_N = 4, MAX_E = 6, MAX_K = 3, MAX_T = 8 };

// The capacity of a pass of `tokens` tokens, as this check knows it.
static int want_capacity(double F, int tokens, int K, int E) {
    if (F == 0) return tokens;
    double cap = ceil(F * tokens * K / E);
    return cap < tokens ? (int)cap : tokens;
}

static void check_capacity(void) {
    static const double factors[] = {0, 0.5, 1.0, 1.25};
    static const int experts[] = {4, 6}, tokens[] = {5, 8};
    Rng rng;
    rng_seed(&rng, 46);
    for (int n = 1; n <= MAX_N; n++)
        for (int ie = 0; ie < 2; ie++)
            for (int K = 1; K <= MAX_K; K++)
                for (int it = 0; it < 2; it++)
                    for (int f = 0; f < 4; f++) {
                        int E = experts[ie], N = tokens[it];
                        double F = factors[f];
                        // Each token picks K distinct experts; counts[(s K + k) E + e] of rank
                        // s's choice-k picks of e. Half the tokens lean on expert 0, so it overflows.
                        int counts[MAX_N * MAX_K * MAX_E] = {0}, served[MAX_N * MAX_K * MAX_E];
                        for (int s = 0; s < n; s++)
                            for (int t = 0; t < N; t++) {
                                int picked[MAX_E] = {0};
                                for (int k = 0; k < K; k++) {
                                    int e = k == 0 && t % 2 == 0 ? 0 : (int)rng_below(&rng, E);
                                    while (picked[e]) e = (e + 1) % E;
                                    picked[e] = 1;
                                    counts[(s * K + k) * E + e]++;
                                }
                            }
                        int cap = want_capacity(F, n * N, K, E), want_dropped = 0;
                        todo_context("%d rank(s) of %d tokens, %d experts, top %d, capacity %g (%s%d of the pass's %d "
                                     "tokens an expert)", n, N, E, K, F, F == 0 ? "dropless: " : "at most ", cap, n * N);
                        MoeConfig m = {.C = 4, .E = E, .K = K, .H = 4, .capacity = F, .ranks = n};
                        for (int i = 0; i < n * K * E; i++) served[i] = -1;
                        int dropped = dispatch_serve(&m, n, N, counts, served);
                        for (int e = 0; e < E; e++) {
                            int taken = 0;  // e's capacity used by the (choice, rank) blocks before
                            for (int k = 0; k < K; k++)
                                for (int s = 0; s < n; s++) {
                                    int i = (s * K + k) * E + e, room = cap - taken, want = counts[i] < room ? counts[i] : room;
                                    if (served[i] != want)
                                        todo_fail("%d rank(s) of %d tokens, %d experts, top %d, capacity %g: expert %d, "
                                                  "rank %d's choice-%d assignments (%d of them): served %d, expected %d "
                                                  "(%d of its %d places taken before them: first choices first, and "
                                                  "within a choice rank 0's tokens first)",
                                                  n, N, E, K, F, e, s, k + 1, counts[i], served[i], want, taken, cap);
                                    taken += want, want_dropped += counts[i] - want;
                                }
                        }
                        if (dropped != want_dropped)
                            todo_fail("%d rank(s) of %d tokens, %d experts, top %d, capacity %g: returned %d dropped, "
                                      "expected %d (every assignment not served)", n, N, E, K, F, dropped, want_dropped);
                    }
}

int main(int argc, char **argv) {
    static const TodoCheck checks[] = {{"ep-capacity", check_capacity}};
    return todo_main(argc, argv, checks, 1);
}
