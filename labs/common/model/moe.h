// moe.h — a mixture-of-experts MLP: E small MLPs (the experts) and a router that sends each
// token to K of them, as Mixtral and DeepSeek do.
//
// The picture, for one token x (a row of ln_2's output):
//
//     logits = router x                 E scores                    router [E, C], no bias
//     p      = softmax(logits)          how much the router likes each expert
//     top K  e_1 .. e_K                 the K best (the lower index wins a tie)
//     w_k    = p[e_k] / sum_j p[e_j]    their weights, renormalised to sum to 1
//     out    = sum_k w_k MLP_{e_k}(x)   each expert the block's MLP: C -> H -> C with GELU
//
// An expert sees only the tokens routed to it, so a token costs K experts' FLOPs while the
// layer holds E experts' parameters: Psi total against Psi active.
//
// Capacity (capacity > 0): an expert takes at most ceil(capacity N K / E) of a pass's N
// tokens. Assignments are served by rank of choice, then token: every token's first choice
// in token order, then every second choice, and so on (GShard's rule: a token's favourite
// expert is served before anyone's second). An assignment beyond its expert's capacity is
// dropped: it adds nothing, and the token keeps what its other experts and the residual
// give it. capacity 0 is dropless: every assignment is served.
//
// The load-balancing loss (Switch Transformer): aux = E sum_e f_e P_e, with f_e the share of
// the pass's N K assignments the router gave expert e (before capacity drops) and P_e the
// mean of p[e] over the tokens. f is counted, not differentiated; P carries the gradient,
// which pushes probability away from the experts that get more than their share. Balanced
// routing gives aux = 1. The caller weights it (--aux-weight) and adds it to the loss.
//
// Memory. The forward keeps, for N tokens: p [N,E], the choices and weights [N,K], and for
// each of the N K assignments its row of the dispatched input, the expert's hidden layer
// before and after GELU, and its output: 4 (N E + N K + N K (2C + 2H)) bytes of floats and
// 4 (3 N K) bytes of ints (moe_acts_bytes): 4 (E + 4K + 2K(C + H)) bytes a token. Rows of
// dropped assignments stay unused: the buffers are sized for the dropless worst case, so the
// bytes do not depend on the routing.
//
// Split over ranks (expert parallelism, ranks >= 1: labs/19-ep/), the rows live in two places.
// The token's side keeps N K rows sent (xin) and N K rows come back (y); the experts' side
// keeps the R rows this rank's experts may serve (moe_expert_rows: every rank's tokens could
// pick them) as input (ein), hidden layers (h, g) and output (eout). On one rank the two sides
// are the same rows: ein is xin, eout is y, and R is N K.
//
// The layer in four parts, each a function below, so that a distributed layer can put its
// exchanges between them: route (moe_route), dispatch (moe.c's own on one rank), the experts
// (moe_experts_forward), combine (moe_combine); the backward is the same parts backwards.
// These are the CPU's loops, in a fixed order (the same bits every run); the Linears and
// GELUs go through `ops`.
#ifndef SHARDLAB_MOE_H
#define SHARDLAB_MOE_H

#include <stddef.h>

#include "ops.h"

#define MOE_MAX_EXPERTS 64
#define MOE_MAX_RANKS 8

typedef struct MoeConfig {
    int C;            // width
    int E, K;         // experts, experts per token (1 <= K <= E)
    int H;            // an expert's hidden width (the dense MLP's is 4C)
    double capacity;  // capacity factor; 0: dropless
    // Expert parallelism: the experts split over `ranks` ranks, E / ranks each, this one
    // holding those of `rank`. 0: the one-rank layer, every expert here (lab-ep on one rank
    // is ranks 1: its layer keeps the two sides apart, as on more).
    int ranks, rank;
} MoeConfig;

// The experts this rank holds: moe_local_experts(m) of them from moe_first_expert(m).
int moe_local_experts(const MoeConfig *m);
int moe_first_expert(const MoeConfig *m);

// "" if the shape is valid, else why not (for a one-line error: "--topk 3 is more than --moe 2").
const char *moe_config_check(const MoeConfig *m);

// The layer's parameters, one flat buffer: the router [E, C], then the experts' tensors, each
// stacked over the E experts: fc_w [E, H, C], fc_b [E, H], proj_w [E, C, H], proj_b [E, C]
// (Linear weights [out, in], as gpt.h's). Expert parallelism's rank holding experts e0..e1
// takes the same rows of each of the four, as it would shard any tensor on its first axis:
// its buffer stacks E / ranks experts, and the router stays whole.
size_t moe_router_floats(const MoeConfig *m);  // E C
size_t moe_expert_floats(const MoeConfig *m);  // 2 H C + H + C
size_t moe_params_floats(const MoeConfig *m);  // E C + El (2 H C + H + C), El the experts held
typedef struct {
    float *fc_w, *fc_b, *proj_w, *proj_b;
} MoeExpertView;
// Expert e's tensors (e counts all E experts; it must be one this rank holds).
MoeExpertView moe_expert_view(const MoeConfig *m, float *params, int e);

// The most assignments an expert serves in a pass of N tokens: ceil(capacity N K / E), or
// N (each token at most once) when dropless.
int moe_capacity(const MoeConfig *m, int N);
// The most rows this rank's experts serve in a pass where each of the ranks has N tokens:
// N K for the one-rank layer; split, every token of every rank at one of them K times at most (or each
// local expert full to capacity, if that is fewer): min(ranks N min(K, El), El capacity).
int moe_expert_rows(const MoeConfig *m, int N);

typedef struct MoeActs {
    int N;             // this rank's tokens of the pass
    float *probs;      // [N, E] the router's softmax
    float *weight;     // [N, K] the chosen experts' renormalised weights
    float *xin;        // [N K, C] the dispatched input: rows grouped by expert (split: by rank, then
                       // expert), each expert's in serving order
    float *y;          // [N K, C] each row's expert output (before its weight), come back
    float *ein, *eout; // [R, C] the rows this rank's experts serve, by expert, and their output
                       // (one rank: xin and y themselves)
    float *h, *g;      // [R, H] each served row's hidden layer, before and after GELU
    int R;             // rows of ein, h, g and eout (moe_expert_rows)
    int *expert;       // [N, K] the chosen experts, best first
    int *row;          // [N, K] the assignment's row in xin and y; -1: dropped
    int *row_token;    // [N K] the token of each row of xin
    int start[MOE_MAX_EXPERTS + 1];  // local expert j's rows of ein: start[j] .. start[j + 1] - 1
    // The pass's statistics, of all its tokens (split: every rank's, the same on each).
    int ntokens;                       // tokens of the whole pass (one rank: N)
    int routed[MOE_MAX_EXPERTS];       // assignments the router gave e, before capacity (f_e ntokens K)
    int dropped;                       // assignments dropped by capacity
    double prob_sum[MOE_MAX_EXPERTS];  // sum over the tokens of p[e] (P_e ntokens)
    // Split: rows this rank sent each rank, and rows each rank sent each local expert here.
    int sent[MOE_MAX_RANKS];
    int got[MOE_MAX_RANKS][MOE_MAX_EXPERTS];
} MoeActs;

// Bytes moe_acts_alloc takes for N tokens (see the top of this file): moe_acts_floats floats
// and moe_acts_ints ints.
size_t moe_acts_bytes(const MoeConfig *m, int N);
size_t moe_acts_floats(const MoeConfig *m, int N);
size_t moe_acts_ints(const MoeConfig *m, int N);
// Points a's buffers into floats [moe_acts_floats] and ints [moe_acts_ints] (the model's
// activations carve them from their one allocation, gpt.c); moe_acts_alloc allocates its own.
void moe_acts_carve(MoeActs *a, const MoeConfig *m, int N, float *floats, int *ints);
void moe_acts_alloc(MoeActs *a, const MoeConfig *m, int N);
void moe_acts_free(MoeActs *a);

// out [N, C] (overwritten) = the layer on x [N, C]; a keeps what the backward needs.
// scratch: moe_scratch_floats(m, N, bf16_in) floats. One rank: route, dispatch, experts, combine.
void moe_forward(const Ops *ops, const MoeConfig *m, const float *params, const float *x, float *out, MoeActs *a,
                 int bf16_in, float *scratch);

// The load-balancing loss of a pass from its statistics: E sum_e f_e P_e with f_e = routed[e]
// / (ntokens K) and P_e = prob_sum[e] / ntokens. A data-parallel group passes the sums over
// its ranks (so every rank's aux is the whole batch's); one rank, its own.
double moe_aux_loss(const MoeConfig *m, const int *routed, const double *prob_sum, int ntokens);

// dx [N, C] (overwritten) from dout [N, C]: the gradient at the layer's input; grads (the
// layout of params) ACCUMULATE. aux_scale is d(loss)/d(aux) (--aux-weight times the loss's
// scale); the aux loss's statistics are a's (a->routed, a->ntokens: the whole pass's).
void moe_backward(const Ops *ops, const MoeConfig *m, const float *params, float *grads, const float *x,
                  const float *dout, const MoeActs *a, float aux_scale, float *dx, int bf16_in, float *scratch);

// The workspace of a forward or a backward pass (MoeGrads below), and the largest Linear's scratch.
size_t moe_scratch_floats(const MoeConfig *m, int N, int bf16_in);

// ---- the parts, for a layer that exchanges rows between them ---------------------------

// Route: p = softmax(router x), each token's top K and their weights; a->routed and
// a->prob_sum this rank's tokens' (a->ntokens = N, a->dropped = 0).
void moe_route(const Ops *ops, const MoeConfig *m, const float *params, const float *x, MoeActs *a, int bf16_in,
               float *scratch);
// The experts this rank holds, each on its rows of ein (a->start): eout = proj(gelu(fc(ein))).
void moe_experts_forward(const Ops *ops, const MoeConfig *m, const float *params, MoeActs *a, int bf16_in,
                         float *scratch);
// Combine: out [N, C] (overwritten) = each token's served rows of y, weighted, in the order of
// its choices.
void moe_combine(const MoeConfig *m, const MoeActs *a, float *out);

// The backward pass's buffers, carved from the scratch (moe_grads_carve): the token side's
// row gradients dy and dxin [N K, C] (as xin's rows), the experts' side deout and dein [R, C]
// (one rank: dy and dxin themselves) and dh [R, H], the router's dlogits [N, E] and dxr
// [N, C], and a Linear's scratch.
typedef struct {
    float *dy, *dxin, *deout, *dein, *dh, *dlogits, *dxr, *lin;
} MoeGrads;
MoeGrads moe_grads_carve(const MoeConfig *m, const MoeActs *a, float *scratch);
// Through the combine: dy (each served row's gradient, the token's times its weight) and
// dlogits (through the weights' renormalisation, the aux loss's P_e and the softmax).
void moe_combine_backward(const MoeConfig *m, const MoeActs *a, const float *dout, float aux_scale, MoeGrads *d);
// The experts backwards on their rows: dein from deout; the experts' gradients accumulate.
void moe_experts_backward(const Ops *ops, const MoeConfig *m, const float *params, float *grads, const MoeActs *a,
                          MoeGrads *d, int bf16_in);
// The router's weight gradient, then dx [N, C] = the router's part plus each served row's dxin.
void moe_router_backward(const Ops *ops, const MoeConfig *m, const float *params, float *grads, const float *x,
                         const MoeActs *a, MoeGrads *d, float *dx, int bf16_in);

#endif
