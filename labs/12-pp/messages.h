// messages.h — what a pipeline stage sends to the others (labs/12-pp/pp.c): after F on chunk k its
// output, to chunk k+1's stage; after B the gradient at chunk k's input, to chunk k-1's stage.
// Each message is posted when it is made and goes in the order its receiver will ask for it
// (every stage knows every stage's schedule), moved along in batches with this stage's
// receives (dist_p2p_progress), as Megatron-LM's batched send/recv does: two neighbours that
// send each other something at the same moment cannot deadlock.
//
#ifndef SHARDLAB_PP_MESSAGES_H
#define SHARDLAB_PP_MESSAGES_H

#include <stddef.h>

#include "common/comm/dist.h"    // defines: dist_p2p_progress(), DistP2p, DistGroup
#include "common/harness/mem.h"  // defines: Mem
#include "schedule.h"            // defines: Pipe

// A message this stage sends: the output of F on chunk k (to chunk k+1's stage) or the
// gradient at the input of chunk k after B (to chunk k-1's stage).
typedef struct {
    int bwd, mb, k;   // the operation that produces it
    int to;           // the receiving stage
    DistP2p x;        // set when posted
    int ready, sent;
} Msg;

typedef struct {
    const Pipe *pp;
    int s;             // this stage
    DistGroup *pipe;   // the pipeline's ranks, group rank = stage
    Mem *mem;          // where a gradient's own buffer goes back once delivered
    size_t n;          // floats in every message: one micro-batch's [B T, C]
    Msg *msg;          // what this stage sends, in the order its receivers ask for it
    int count;
} Outbox;

// Every message stage s sends in a step, ordered as each receiver consumes them: receiver
// r's operations in its order, those whose input comes from this stage.
void outbox_plan(Outbox *o, const Pipe *pp, int s, DistGroup *pipe, Mem *mem, size_t n);
// A step starts: nothing posted, nothing sent.
void outbox_start_step(Outbox *o);
// The message of operation (bwd, mb) on chunk k is made: buf's n floats go when their
// receiver asks for them. An activation's buf is the chunk's output (kept until its B); a
// gradient's is a buffer of its own from o->mem, freed once it is delivered.
void outbox_post(Outbox *o, int bwd, int mb, int k, float *buf);
// Moves the messages along, in each receiver's order: those under way and those next in line
// and ready. With `recv`, until it has arrived; else one pass that waits for nothing (finish
// = 0: the stage goes back to computing while the rest waits in the channels) or until every
// one of them is delivered (finish = 1).
void outbox_exchange(Outbox *o, DistP2p *recv, int finish);
// Whether a message of this step has not been delivered yet.
int outbox_unsent(const Outbox *o);
void outbox_free(Outbox *o);

#endif
