// pipesim.h — a pipeline's step replayed with other times: what `shardlab whatif` projects a
// pipeline run onto.
//
// Each stage runs its forwards and backwards in the order the run logged them, one at a time,
// each taking the time given. Chunk k of the p v chunks lives on stage k mod p (v = 1: chunk k
// is stage k; interleaved: v chunks a stage). A forward of micro-batch b on chunk k > 0 needs
// b's forward on chunk k - 1; a backward on chunk k needs b's backward on chunk k + 1, or, on
// the last chunk, b's own forward there. Between two stages the activation or gradient travels
// as a message taking msg_ms, on a link of its own per direction, busy with one message at a
// time; the stages compute while messages travel. So a slow link shows where it costs: in the
// fill and the drain, and wherever the micro-batches in flight are too few to cover a round
// trip (1F1B on 2 stages holds 2).
//
//     stage 0: F0 F1 .......... B0 F2 B1 F3 ...     (waits: F0 to stage 1 and B0 back,
//     stage 1:    .. F0 B0 .. F1 B1 ...              each msg_ms on the link)
#ifndef SHARDLAB_PIPESIM_H
#define SHARDLAB_PIPESIM_H

typedef struct {
    int bwd, mb, chunk;  // a forward (0) or backward (1) of micro-batch mb on chunk `chunk`
    double ms;           // how long it computes
} PipeOp;

typedef struct {
    const PipeOp *ops;  // in the order the stage runs them
    int n;
    double end_ms, busy_ms;  // out: when its last op ended (from 0), and the time it computed
} PipeStage;

// Replays the p stages (chunks: p v in all; micro: m). Returns when the last op of any stage
// ended, in ms from the start; -1 if the orders cannot complete (an op waits for one no stage
// runs, or two stages wait for each other): a log that is not a pipeline's; -1 too for more
// than PIPESIM_MAX_OPS micro-batch x chunk pairs (a run directory is untrusted input).
#define PIPESIM_MAX_OPS (1 << 22)
double pipesim_run(PipeStage *stages, int p, int chunks, int micro, double msg_ms);

#endif
