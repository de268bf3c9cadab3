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
// 4 (3 N K) bytes of ints (moe_acts_bytes): 4 (E + 4K + 2K(C + H)) bytes a token. Rows of dropped assignments stay
// unused: the buffers are sized for the dropless worst case, so the bytes do not depend on
// the routing.
//
// These are the CPU's loops, in a fixed order (the same bits every run); the Linears and
// GELUs go through `ops`.
#ifndef SHARDLAB_MOE_H
#define SHARDLAB_MOE_H

#include <stddef.h>

#include "ops.h"

#define MOE_MAX_EXPERTS 64

typedef struct {
    int C;            // width
    int E, K;         // experts, experts per token (1 <= K <= E)
    int H;            // an expert's hidden width (the dense MLP's is 4C)
    double capacity;  // capacity factor; 0: dropless
} MoeConfig;

// "" if the shape is valid, else why not (for a one-line error: "--topk 3 is more than --moe 2").
const char *moe_config_check(const MoeConfig *m);

// The layer's parameters, one flat buffer: the router [E, C], then the experts' tensors, each
// stacked over the E experts: fc_w [E, H, C], fc_b [E, H], proj_w [E, C, H], proj_b [E, C]
// (Linear weights [out, in], as gpt.h's). Expert parallelism's rank holding experts e0..e1
// takes the same rows of each of the four, as it would shard any tensor on its first axis.
size_t moe_router_floats(const MoeConfig *m);  // E C
size_t moe_expert_floats(const MoeConfig *m);  // 2 H C + H + C
size_t moe_params_floats(const MoeConfig *m);  // E C + E (2 H C + H + C)
typedef struct {
    float *fc_w, *fc_b, *proj_w, *proj_b;
} MoeExpertView;
MoeExpertView moe_expert_view(const MoeConfig *m, float *params, int e);

// The most assignments an expert serves in a pass of N tokens: ceil(capacity N K / E), or
// N (each token at most once) when dropless.
int moe_capacity(const MoeConfig *m, int N);

typedef struct {
    int N;             // tokens of the pass
    float *probs;      // [N, E] the router's softmax
    float *weight;     // [N, K] the chosen experts' renormalised weights
    float *xin;        // [N K, C] the dispatched input: rows grouped by expert, in serving order
    float *h, *g;      // [N K, H] each row's hidden layer, before and after GELU
    float *y;          // [N K, C] each row's expert output (before its weight)
    int *expert;       // [N, K] the chosen experts, best first
    int *row;          // [N, K] the assignment's row in xin, h, g, y; -1: dropped
    int *row_token;    // [N K] the token of each row
    int start[MOE_MAX_EXPERTS + 1];  // expert e's rows: start[e] .. start[e + 1] - 1
    int routed[MOE_MAX_EXPERTS];     // assignments the router gave e, before capacity (f_e N K)
    int dropped;                     // assignments dropped by capacity
    double prob_sum[MOE_MAX_EXPERTS];  // sum over the tokens of p[e] (P_e N)
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
// scratch: moe_scratch_floats(m, N, bf16_in) floats.
void moe_forward(const Ops *ops, const MoeConfig *m, const float *params, const float *x, float *out, MoeActs *a,
                 int bf16_in, float *scratch);

// The load-balancing loss of a pass from its statistics: E sum_e f_e P_e with f_e = routed[e]
// / (ntokens K) and P_e = prob_sum[e] / ntokens. A data-parallel group passes the sums over
// its ranks (so every rank's aux is the whole batch's); one rank, its own.
double moe_aux_loss(const MoeConfig *m, const int *routed, const double *prob_sum, int ntokens);

// dx [N, C] (overwritten) from dout [N, C]: the gradient at the layer's input; grads (the
// layout of params) ACCUMULATE. aux_scale is d(loss)/d(aux) (--aux-weight times the loss's
// scale); routed and ntokens are the statistics the aux loss used (moe_aux_loss).
void moe_backward(const Ops *ops, const MoeConfig *m, const float *params, float *grads, const float *x,
                  const float *dout, const MoeActs *a, float aux_scale, const int *routed, int ntokens, float *dx,
                  int bf16_in, float *scratch);

// The workspace of a forward or a backward pass: the backward's row gradients [N K, C] and
// [N K, H] twice, the router's [N, E] and [N, C], and the largest Linear's scratch.
size_t moe_scratch_floats(const MoeConfig *m, int N, int bf16_in);

#endif
