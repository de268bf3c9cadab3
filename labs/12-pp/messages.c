// messages.c — see messages.h.
#include "messages.h"

#include <stdlib.h>

#include "common/harness/check.h"  // defines: malloc_check(), die()

void outbox_plan(Outbox *o, const Pipe *pp, int s, DistGroup *pipe, Mem *mem, size_t n) {
    *o = (Outbox){.pp = pp, .s = s, .pipe = pipe, .mem = mem, .n = n};
    int nops = 2 * pp->m * pp->v;
    Op *theirs = malloc_check((size_t)nops * sizeof *theirs);
    o->msg = malloc_check((size_t)nops * sizeof *o->msg);
    for (int to = 0; to < pp->p; to++) {
        if (to == s) continue;  // chunks on this rank hand over in memory
        schedule_ops(pp, to, theirs);
        for (int i = 0; i < nops; i++) {
            Op x = theirs[i];
            int from = x.bwd ? x.k + 1 : x.k - 1;  // the chunk that produces its input
            if (from < 0 || from >= pp->K || (x.bwd && x.k == pp->K - 1) || stage_of(pp, from) != s) continue;
            o->msg[o->count++] = (Msg){.bwd = x.bwd, .mb = x.mb, .k = from, .to = to};
        }
    }
    free(theirs);
}

void outbox_start_step(Outbox *o) {
    for (int i = 0; i < o->count; i++) o->msg[i].ready = o->msg[i].sent = 0;
}

void outbox_post(Outbox *o, int bwd, int mb, int k, float *buf) {
    for (int i = 0; i < o->count; i++) {
        Msg *q = &o->msg[i];
        if (q->bwd != bwd || q->mb != mb || q->k != k) continue;
        q->x = (DistP2p){.send = 1, .peer = q->to, .buf = buf, .n = o->n, .tag = mb};
        q->ready = 1;
        return;
    }
    die("this is a bug in shardlab's pipeline", "stage %d posts a message nobody asks for (%s of micro-batch %d, "
        "chunk %d)", o->s, bwd ? "gradient" : "activation", mb, k);
}

void outbox_exchange(Outbox *o, DistP2p *recv, int finish) {
    DistP2p ops[DIST_P2P_MAX] = {{0}};
    Msg *src[DIST_P2P_MAX] = {0};
    int n = 0;
    for (int to = 0; to < o->pp->p; to++) {
        if (to == o->s) continue;
        for (int i = 0; i < o->count && n < DIST_P2P_MAX - 1; i++) {
            Msg *q = &o->msg[i];
            if (q->to != to || q->sent) continue;
            if (!q->ready) break;  // the next one this receiver wants is not made yet
            ops[n] = q->x;
            src[n++] = q;
        }
    }
    int sends = n, until = finish ? n : -1;
    if (recv) ops[n] = *recv, until = n++;
    dist_p2p_progress(o->pipe, ops, n, until);
    for (int i = 0; i < sends; i++) {
        src[i]->x = ops[i];
        if (ops[i].moved < ops[i].n) continue;
        src[i]->sent = 1;
        if (src[i]->bwd) mem_free(o->mem, src[i]->x.buf);
    }
}

int outbox_unsent(const Outbox *o) {
    for (int i = 0; i < o->count; i++)
        if (!o->msg[i].sent) return 1;
    return 0;
}

void outbox_free(Outbox *o) {
    free(o->msg);
    o->msg = NULL, o->count = 0;
}
