// pipesim.c — see pipesim.h.
//
// An event replay: among the stages whose next op has what it needs, the one that can start
// first runs it (start = when the stage is free and its input has arrived). Its output, if the
// next op of that micro-batch lives on another stage, leaves at once as a message: it starts
// when the link in that direction is free, and arrives msg_ms later.
#include "pipesim.h"

#include <math.h>
#include <stdlib.h>

#include "common/harness/check.h"

#define UNKNOWN (-1.0)

double pipesim_run(PipeStage *stages, int p, int chunks, int micro, double msg_ms) {
    if (p < 1 || chunks < p || micro < 1 || (double)micro * chunks > PIPESIM_MAX_OPS) return -1;
    // ready[bwd][mb * chunks + k]: when op (bwd, mb, k) has its input on its stage (UNKNOWN: not yet)
    size_t cells = (size_t)micro * (size_t)chunks;
    double *ready[2] = {malloc_check(cells * sizeof(double)), malloc_check(cells * sizeof(double))};
    double *link_free = calloc_check((size_t)p * (size_t)p, sizeof(double));  // [from * p + to]
    int *next = calloc_check((size_t)p, sizeof(int));
    for (size_t i = 0; i < cells; i++) ready[0][i] = ready[1][i] = UNKNOWN;
    for (int b = 0; b < micro; b++) ready[0][(size_t)b * chunks] = 0;  // the first chunk reads the batch
    for (int s = 0; s < p; s++) stages[s].end_ms = stages[s].busy_ms = 0;

    double end = 0;
    for (;;) {
        int best = -1;
        double best_start = INFINITY;
        int left = 0;
        for (int s = 0; s < p; s++) {
            if (next[s] >= stages[s].n) continue;
            left++;
            const PipeOp *o = &stages[s].ops[next[s]];
            if (o->mb < 0 || o->mb >= micro || o->chunk < 0 || o->chunk >= chunks || o->chunk % p != s) goto fail;
            double in = ready[o->bwd][(size_t)o->mb * chunks + o->chunk];
            if (in == UNKNOWN) continue;
            double start = fmax(in, stages[s].end_ms);
            if (start < best_start) best_start = start, best = s;
        }
        if (!left) break;
        if (best < 0) goto fail;  // every stage waits for an op that never comes
        PipeStage *st = &stages[best];
        const PipeOp *o = &st->ops[next[best]++];
        double done = best_start + o->ms;
        st->end_ms = done, st->busy_ms += o->ms;
        if (done > end) end = done;
        // What this op makes, and for whom: the forward on the next chunk, the backward on the
        // chunk before; the last chunk's forward feeds its own backward.
        int to_bwd, to_chunk;
        if (o->bwd) to_bwd = 1, to_chunk = o->chunk - 1;
        else if (o->chunk == chunks - 1) to_bwd = 1, to_chunk = o->chunk;
        else to_bwd = 0, to_chunk = o->chunk + 1;
        if (to_chunk < 0) continue;  // the first chunk's backward: the micro-batch is done
        int to = to_chunk % p;
        double arrive = done;
        if (to != best) {
            double *link = &link_free[(size_t)best * p + to];
            arrive = fmax(done, *link) + msg_ms;
            *link = arrive;
        }
        ready[to_bwd][(size_t)o->mb * chunks + to_chunk] = arrive;
    }
    free(ready[0]), free(ready[1]), free(link_free), free(next);
    return end;
fail:
    free(ready[0]), free(ready[1]), free(link_free), free(next);
    return -1;
}
