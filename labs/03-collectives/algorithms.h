// algos.h — the shm backend's collective algorithms, over the channels of shm.h.
//
// dist.c picks one per call. g->rank and g->size are positions in the group; g->ranks maps
// them to the world ranks that name channels.
//
// Buffers are counted in 4-byte WORDS (float *, n words): a word is one float, or two bf16
// lanes of a bf16 buffer (dist.c passes n/2 words for n bf16s). Moving data is the same
// either way; the algorithms that add take the dtype and add with add_words().
#ifndef SHARDLAB_ALGOS_H
#define SHARDLAB_ALGOS_H

#include "common/comm/dist.h"  // defines: DistDtype, DistGroup, dist_p2p(), ...
#include "common/comm/shm.h"   // defines: Shm

static inline size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

// dst = a + b over m words: m floats, or 2m bf16 lanes each added in fp32 and rounded to
// bf16 (bf16_add). dst may be a.
void add_words(DistDtype t, float *dst, const float *a, const float *b, size_t m);

void ring_reduce_scatter(Shm *s, const DistGroup *g, DistDtype t, const float *in, float *out, size_t n);
void ring_all_gather(Shm *s, const DistGroup *g, const float *in, float *out, size_t n);
void ring_all_reduce(Shm *s, const DistGroup *g, DistDtype t, float *buf, size_t n);
void chain_broadcast(Shm *s, const DistGroup *g, float *buf, size_t n, int root);
void chain_reduce(Shm *s, const DistGroup *g, DistDtype t, const float *in, float *out, size_t n, int root);

// in holds send_counts[q] floats for each group rank q, block after block; out gets
// recv_counts[q] from each, the same way. out and in do not overlap. pairwise.c.
void pairwise_all_to_all(Shm *s, const DistGroup *g, const float *in, const size_t *send_counts, float *out,
                         const size_t *recv_counts);

void direct_all_reduce(Shm *s, const DistGroup *g, DistDtype t, float *buf, size_t n);
void direct_reduce_scatter(Shm *s, const DistGroup *g, DistDtype t, const float *in, float *out, size_t n);
void direct_all_gather(Shm *s, const DistGroup *g, const float *in, float *out, size_t n);
void direct_broadcast(Shm *s, const DistGroup *g, float *buf, size_t n, int root);
void direct_reduce(Shm *s, const DistGroup *g, DistDtype t, const float *in, float *out, size_t n, int root);
void p2p_send(Shm *s, const DistGroup *g, const float *buf, size_t n, int peer);
void p2p_recv(Shm *s, const DistGroup *g, float *buf, size_t n, int peer);
// Every send and receive of ops[] moves a piece whenever its channel lets it; moved[i] counts
// ops[i]'s floats moved so far. One pass if until < 0, else until ops[until] is done (nops:
// all of them). dist_p2p() and dist_p2p_progress().
void p2p_batch(Shm *s, const DistGroup *g, const DistP2p *ops, size_t *moved, int nops, int until);
void direct_barrier(Shm *s, const DistGroup *g);

#endif
