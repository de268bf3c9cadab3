// gpt.h — the GPT-2-style model every lab trains, layer by layer.
//
// What a lab finds here, in the order of this file:
//   the shape      GptConfig, and --attn's two ways (GptAttn)
//   the layout     one flat buffer per layer, its tensors and their names, and views
//                  (EmbedView, BlockView, HeadView) that name the floats of any copy
//   activations    what the backward pass needs, per block and for the head, and their bytes
//   the passes     each layer's forward and backward alone: FSDP gathers a layer before it
//                  runs, PP runs a range, checkpointing recomputes one
//   the model      Gpt on one rank: create, forward, backward, and hooks between the layers
//                  (DDP starts a bucket's all-reduce from one)
//   the hash       gpt_param_hash(), the param_hash of every step event
//
// The model (labs/DESIGN.md, The model): byte vocabulary V = 256; token + learned position
// embeddings; L pre-LN blocks
//     x = x + proj(attention(ln_1(x)))        causal, multi-head, with bias
//     x = x + c_proj(gelu(c_fc(ln_2(x))))     C -> 4C -> C
// or, with --moe E, that MLP replaced by E experts and a router (moe.h; below);
// then ln_f and an untied Linear C -> V head without bias; mean cross-entropy over B*T.
//
// Parameters live in one flat buffer per "layer" so that sharding a layer is slicing it:
//     layer 0        embedding: wte [V,C], wpe [T,C]
//     layer 1..L     block i-1: 12 tensors, 12C^2 + 13C floats; with --moe E the MLP's four
//                    are a router [E,C] and the experts' four, stacked: c_fc [E,H,C], [E,H],
//                    c_proj [E,C,H], [E,C] (13 tensors, 4C^2 + 8C + EC + E(2HC + H + C) floats)
//     layer L+1      head: ln_f.weight [C], ln_f.bias [C], lm_head.weight [V,C]
// Named views (EmbedView, BlockView, HeadView) are computed from any flat pointer, so the
// same code reads a full layer, its gradient, or a layer gathered from shards.
// Tensor names are GPT-2 style ("wte", "h.0.attn.c_attn.weight", ...); Linear weights are
// [out, in] as in torch.nn.Linear.
#ifndef SHARDLAB_GPT_H
#define SHARDLAB_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "common/harness/hash.h"
#include "common/harness/mem.h"
#include "moe.h"
#include "ops.h"

#define GPT_VOCAB 256
#define GPT_MAX_TENSORS 13

// How a block computes attention (--attn): the same function, two algorithms that differ in
// what they keep for the backward pass (ops.h). The weights, and so checkpoints, are the
// same for both.
typedef enum {
    GPT_ATTN_NAIVE = 0,  // attention_forward(): saves the probabilities att [B,NH,T,T]
    GPT_ATTN_FLASH = 1,  // flash_attention_forward(): saves lse [B,NH,T], recomputes the rest
} GptAttn;

typedef struct {
    int vocab;   // V: 256, one token per byte
    int seq;     // T: context length
    int layers;  // L
    int dim;     // C
    int heads;   // NH; C % NH == 0
    int attn;    // GptAttn (0, naive, when a config does not say: runs written before --attn)
    int mixed;   // 1: --mixed, the Linear layers' products take bf16 operands (ops.h); 0: fp32
    // --moe: each block's MLP is a mixture of experts (moe.h). 0 experts: the dense MLP, and
    // the rest unused.
    int experts;        // E (--moe)
    int topk;           // K (--topk): experts per token
    int expert_dim;     // H (--expert-dim): an expert's hidden width
    double capacity;    // --capacity: the capacity factor, 0 dropless
    double aux_weight;  // --aux-weight: the load-balancing loss's weight in the training loss
    // Expert parallelism (lab-ep): the experts split over expert_ranks ranks, this model
    // holding those of expert_rank (moe.h's ranks and rank); 0: the one-rank layer.
    int expert_ranks, expert_rank;
} GptConfig;

// The MoE layer of a block of c (c->experts > 0).
MoeConfig gpt_moe_config(const GptConfig *c);

// "naive" or "flash"; the GptAttn a name means, or -1.
const char *gpt_attn_name(int attn);
int gpt_attn_parse(const char *name);

// ---- parameter layout -------------------------------------------------------------------

typedef struct {
    const char *name;  // within the layer: "wte", "ln_1.weight", "lm_head.weight", ...
    size_t offset;     // in floats from the start of the layer's flat buffer
    size_t count;      // floats
    int ndim;          // 1..3 (the stacked experts' weights are [E, out, in])
    int64_t shape[3];
} GptTensor;

int gpt_layer_count(const GptConfig *c);               // L + 2
size_t gpt_layer_size(const GptConfig *c, int layer);  // floats
size_t gpt_num_params(const GptConfig *c);             // Psi: all layers
// Fills out[0..n) with the layer's tensors in buffer order; returns n.
int gpt_layer_tensors(const GptConfig *c, int layer, GptTensor out[GPT_MAX_TENSORS]);
// The full GPT-2-style name, e.g. "h.3.mlp.c_fc.bias", "wpe", "ln_f.weight".
void gpt_tensor_name(char *buf, size_t n, const GptConfig *c, int layer, const GptTensor *t);

typedef struct { float *wte, *wpe; } EmbedView;
typedef struct {
    float *ln1_w, *ln1_b;      // ln_1
    float *qkv_w, *qkv_b;      // attn.c_attn   [3C, C], [3C]
    float *aproj_w, *aproj_b;  // attn.c_proj   [C, C], [C]
    float *ln2_w, *ln2_b;      // ln_2
    float *fc_w, *fc_b;        // mlp.c_fc      [4C, C], [4C]    (--moe: NULL)
    float *mproj_w, *mproj_b;  // mlp.c_proj    [C, 4C], [C]     (--moe: NULL)
    float *moe;                // --moe: mlp.router.weight, then the experts: moe.h's flat layout (else NULL)
} BlockView;
typedef struct { float *lnf_w, *lnf_b, *head_w; } HeadView;

EmbedView gpt_embed_view(const GptConfig *c, float *flat);
BlockView gpt_block_view(const GptConfig *c, float *flat);
HeadView gpt_head_view(const GptConfig *c, float *flat);

// The init of labs/DESIGN.md, The model, for one layer's flat buffer: matrices and embeddings
// N(0, 0.02), residual output projections (attn.c_proj, mlp.c_proj) N(0, 0.02/sqrt(2L)),
// biases 0, LayerNorm weights 1. Each tensor draws from its own stream seeded by (seed, layer, tensor), so a
// layer's values do not depend on who initializes it or in what order.
void gpt_init_layer(const GptConfig *c, int layer, float *flat, uint64_t seed);

// ---- activations ------------------------------------------------------------------------
// What the forward pass saves for the backward pass, for a micro-batch of B sequences.
// Per token: 16C + 4 + NH*T floats per block with naive attention (the probabilities of NH
// heads over up to T keys), 16C + 4 + NH with flash attention (one log-sum-exp per head); C
// for the embedding output, C + 2 + V for the head. All in the "acts" category.
//
// Under --mixed the activations that only a Linear layer reads (a block's ln1, atty, ln2 and
// fch_gelu, the head's lnf: 7C and C per token) are kept in bf16: the Linear rounds its input
// to bf16 anyway (ops.h), so keeping the rounded copy changes no number, and halves their
// bytes. So is the GELU's input fch (4C), and with flash attention qkv (3C), whose q, k and v
// flash attention rounds anyway: c_fc and c_attn write them in bf16 as autocast's Linears do,
// the bias rounded to bf16 and the sum rounded once (ops.h's linear_forward_bf16_out), and
// the GELU takes fch's bf16 forward and backward (gelu_forward_bf16); flash attention's backward
// pass reads q, k, v and o (atty) from the bf16s (flash_attention_backward_bf16: D = do . o
// from the rounded o). A block then keeps 4 (2C + 4 + NH) + 2 (14C) =
// 36C + 16 + 4 NH bytes a token with flash, 4 (5C + 4 + NH T) + 2 (11C) = 42C + 16 + 4 NH T
// with naive attention (its qkv stays fp32), the head 4 (2 + V) + 2C. The float pointers of
// those kept in bf16 are NULL, the _bf16 ones hold them.

typedef struct {
    float *ln1, *ln1_mean, *ln1_rstd;  // [BT,C], [BT], [BT]
    float *qkv;                        // [BT,3C]
    float *att;                        // [B,NH,T,T] softmax probabilities (naive; else NULL)
    float *lse;                        // [B,NH,T] each row's log-sum-exp (flash; else NULL)
    float *atty;                       // [BT,C] attention output, before c_proj
    float *res1;                       // [BT,C] x + attention branch
    float *ln2, *ln2_mean, *ln2_rstd;  // [BT,C], [BT], [BT]
    float *fch, *fch_gelu;             // [BT,4C] before and after GELU
    float *out;                        // [BT,C] the block's output: the next block's input
    bf16 *ln1_bf16, *atty_bf16, *ln2_bf16, *fch_bf16, *fch_gelu_bf16;  // --mixed: those five in bf16
    bf16 *qkv_bf16;  // --mixed with flash attention: qkv in bf16 (else NULL, as the five above)
    MoeActs moe;     // --moe: the router's choices and the experts' rows (moe.h), in place of fch
                     // and fch_gelu: E + 4K + 2K(C + H) words a token (else all NULL)
} BlockActs;

typedef struct {
    float *lnf, *lnf_mean, *lnf_rstd;  // [BT,C], [BT], [BT]
    float *probs;                      // [BT,V] logits, turned into probabilities in place
    bf16 *lnf_bf16;                    // --mixed: lnf in bf16 (else NULL)
} HeadActs;

typedef struct {
    int B;
    float *x0;          // [BT,C] embedding output
    BlockActs *blocks;  // [L]
    HeadActs head;
    float *buffer;      // one allocation holding all of the above: the floats, then the bf16s
} GptActs;

// 1 when the blocks keep qkv in bf16 (--mixed with flash attention; above), else 0.
int gpt_keeps_qkv_bf16(const GptConfig *c);
// Bytes of gpt_acts_alloc()'s activations.
size_t gpt_acts_bytes(const GptConfig *c, int B);
// Bytes one block saves per token: 4 (16C + 4 + NH*T) (naive) or 4 (16C + 4 + NH) (flash);
// under --mixed 11C (naive) or 14C (flash) of those floats are bf16s, 2 bytes less each.
// With --moe the MLP's 8C become the layer's E + 4K + 2K(C + H) (moe.h): 4 (8C + 4 + NH(T) +
// E + 4K + 2K(C + H)). Per token is exact where the layer's rows grow with the tokens: on
// one rank, or dropless; gpt_block_acts_bytes is every case's, for B sequences.
size_t gpt_block_acts_bytes_per_token(const GptConfig *c);
size_t gpt_block_acts_bytes(const GptConfig *c, int B);
// Bytes the head saves per token: 4 (C + 2 + V), or 2C + 4 (2 + V) under --mixed.
size_t gpt_head_acts_bytes_per_token(const GptConfig *c);
// What the attention of `heads` heads saves for B sequences: att, B*heads*T*T floats
// (naive), or lse, B*heads*T (flash). Tensor parallelism passes its NH/t heads.
size_t gpt_attn_saved_floats(const GptConfig *c, int B, int heads);
void gpt_acts_alloc(GptActs *a, const GptConfig *c, int B, Mem *mem);
void gpt_acts_free(GptActs *a, Mem *mem);
// A pipeline stage's activations: layers first..last only (the other blocks' pointers stay
// NULL), plus the stage's INPUT where layer first-1 would have written it (x0 for layer 1,
// block first-2's out above that), for the receiving stage to fill. Per token that is 4C
// bytes, plus gpt_block_acts_bytes_per_token() per block, plus 4 (C + 2 + V) with the head
// (2C + 4 (2 + V) under --mixed). gpt_acts_alloc() is layers 0..L+1.
void gpt_acts_alloc_layers(GptActs *a, const GptConfig *c, int B, int first, int last, Mem *mem);
size_t gpt_acts_layers_bytes(const GptConfig *c, int B, int first, int last);
// Carving activations out of one allocation: every float first, then every bf16, each in the
// order taken. With floats NULL it only counts (a layout's size: 4 nfloats + 2 nhalves bytes).
typedef struct {
    float *floats;
    bf16 *halves;
    size_t nfloats, nhalves;
} GptCarve;
float *gpt_carve_floats(GptCarve *k, size_t n);
bf16 *gpt_carve_halves(GptCarve *k, size_t n);
// A block's insides (all gpt_block_backward reads but its input; not its output) and the
// head's, for B sequences: ln1 (or ln1_bf16), ..., as this file lays them out.
void gpt_carve_block(BlockActs *b, GptCarve *k, const GptConfig *c, int B);
void gpt_carve_head(HeadActs *h, GptCarve *k, const GptConfig *c, int B);
// A Linear layer's forward or backward pass on an input that --mixed keeps in bf16: on those
// bf16 numbers themselves (kept not NULL: ops' linear_forward_bf16, linear_backward_bf16, the
// products of bf16 operands without rounding the input again), else on the fp32 inp with
// bf16_in as given.
void gpt_linear_forward(const Ops *ops, float *out, const float *inp, const bf16 *kept, const float *weight,
                        const float *bias, int N, int IC, int OC, int bf16_in, float *scratch);
void gpt_linear_backward(const Ops *ops, float *dinp, float *dweight, float *dbias, const float *dout,
                         const float *inp, const bf16 *kept, const float *weight, int N, int IC, int OC, int bf16_in,
                         float *scratch);
// Where layer `layer`'s forward output is (x0 for the embedding, a block's out); NULL for
// the head, whose output is the loss.
float *gpt_layer_output(const GptConfig *c, const GptActs *a, int layer);
// Transient workspace a forward or backward pass's CPU kernels need (floats).
// gpt_attn_scratch_floats() is the attention backward's part of it, for heads of hs floats:
// 2T (naive), FLASH_SCRATCH_FLOATS(T, hs) (flash).
size_t gpt_attn_scratch_floats(const GptConfig *c, int hs);
size_t gpt_scratch_floats(const GptConfig *c, int B);
// What a pass allocates as its workspace (floats, "acts" while allocated): gpt_scratch_floats,
// and on a GPU (gpu = 1) after it the GPU kernels' own workspace, ops_gpu_workspace_bytes()
// (ops.h; with naive attention, its backward's dS [B,NH,T,T] is most of it), which
// gpt_layer_forward() and gpt_layer_backward() hand to the kernels. Sized here, from the
// shape, so a GPU allocates nothing inside a pass and every byte it uses is counted.
size_t gpt_pass_scratch_floats(const GptConfig *c, int B, int gpu);
// What a pass over micro-batches of B sequences works in, allocated once for the step: the
// tokens and their targets (host), the pass's workspace (gpt_pass_scratch_floats) and the
// gradient flowing down through the layers, B T C floats (both "acts" memory, in that order).
typedef struct {
    uint8_t *tokens, *targets;
    float *scratch, *dx;
} GptPassBuffers;
void gpt_pass_buffers_alloc(GptPassBuffers *p, const GptConfig *c, int B, Mem *mem);
void gpt_pass_buffers_free(GptPassBuffers *p, Mem *mem);

// ---- layer-by-layer forward and backward ------------------------------------------------
// tokens/targets are [B,T], in host memory; every float buffer is on the device whose
// kernels `ops` are (device.h). Backward functions ACCUMULATE into grads.

void gpt_embed_forward(const Ops *ops, const GptConfig *c, const float *params, const uint8_t *tokens, int B,
                       float *x0);
void gpt_block_forward(const Ops *ops, const GptConfig *c, const float *params, const float *x_in, BlockActs *a,
                       int B, float *scratch);
// Returns the SUM of the B*T token losses.
double gpt_head_forward(const Ops *ops, const GptConfig *c, const float *params, const float *x, HeadActs *a,
                        const uint8_t *targets, int B, float *scratch);
// loss_scale: d(training loss)/d(one token's loss), e.g. 1/(tokens in the global batch).
// dx [BT,C] is overwritten with the gradient at the head's input.
void gpt_head_backward(const Ops *ops, const GptConfig *c, const float *params, float *grads, const float *x,
                       const HeadActs *a, const uint8_t *targets, int B, float loss_scale,
                       float *dx, float *scratch);
// dx: on entry the gradient at the block's output, on return the gradient at its input.
// loss_scale is the head's (with --moe it scales the load-balancing loss: gpt_moe_aux_scale).
void gpt_block_backward(const Ops *ops, const GptConfig *c, const float *params, float *grads, const float *x_in,
                        const BlockActs *a, int B, float loss_scale, float *dx, float *scratch);
// d(training loss)/d(one block's aux loss) for a pass of ntokens tokens whose token losses
// enter with weight loss_scale: aux_weight / L per pass, times the pass's share of the step,
// loss_scale ntokens (1/accum on one rank). The training loss is then the mean of the token
// losses plus aux_weight times the mean over blocks and passes of each block's aux loss.
float gpt_moe_aux_scale(const GptConfig *c, float loss_scale, int ntokens);
void gpt_embed_backward(const Ops *ops, const GptConfig *c, float *grads, const uint8_t *tokens, int B,
                        const float *dx0);

// Any layer by its index (0: embedding, 1..L: blocks, L+1: head), reading and writing the
// activations of `a` (a->B sequences). params is the layer's full flat buffer, wherever it
// came from: the model, a gather of shards (ZeRO-3, FSDP), an fp32 copy of bf16 weights.
// Forward returns the head's loss sum (0 for the other layers). Backward ACCUMULATES into
// grads; dx [BT,C] carries the gradient from layer l+1 down to layer l (the head writes it,
// the embedding reads it). scratch: gpt_pass_scratch_floats(c, a->B, on a GPU) floats.
double gpt_layer_forward(const Ops *ops, const GptConfig *c, int layer, const float *params, GptActs *a,
                         const uint8_t *tokens, const uint8_t *targets, float *scratch);
void gpt_layer_backward(const Ops *ops, const GptConfig *c, int layer, const float *params, float *grads,
                        const GptActs *a, const uint8_t *tokens, const uint8_t *targets, float loss_scale,
                        float *dx, float *scratch);

// ---- the whole model on one rank --------------------------------------------------------

// --moe: what the routers did in the passes since the last gpt_moe_stats_reset: the numbers a
// step event reports (host bookkeeping, not counted as device memory).
typedef struct {
    int passes;            // forward passes (micro-batches)
    double aux_sum;        // the sum over passes of the mean over blocks of each block's aux loss
    int64_t dropped;       // assignments dropped by capacity, all blocks
    int64_t assignments;   // assignments the routers made, all blocks (N K per block and pass)
    int64_t *load;         // [L][E] assignments the router of block l gave expert e
} GptMoeStats;

typedef struct {
    GptConfig cfg;
    int nlayers;     // L + 2
    float **params;  // [nlayers] one flat buffer per layer ("params")
    float **grads;   // [nlayers] ("grads")
    Mem *mem;
    GptMoeStats moe;  // --moe: filled by gpt_forward (else all 0)
} Gpt;

// Adds a forward pass's routing (a's blocks, layers first..last of them) to s.
void gpt_moe_stats_add(GptMoeStats *s, const GptConfig *c, const GptActs *a, int first, int last);
void gpt_moe_stats_reset(GptMoeStats *s, const GptConfig *c);

void gpt_create(Gpt *g, const GptConfig *c, Mem *mem, uint64_t seed);
void gpt_destroy(Gpt *g);
void gpt_zero_grads(Gpt *g);

// Called after each layer's forward or backward. layer_done (data-parallel labs start
// communication here) gets the span as the host saw it: on the CPU the layer's time span,
// on a GPU when its work was queued (the GPU runs behind; nothing waits for it here: work
// queued after, such as copying the layer's gradients, runs after it on the stream).
// layer_span (span loggers) gets the span as two marks of the device's clock (device.h),
// to read when it suits: on the CPU at once, on a GPU at the step's end, in one wait.
// Times are wall clock, us since the epoch.
typedef enum { GPT_FWD, GPT_BWD } GptPhase;
typedef struct {
    void (*layer_done)(void *ctx, GptPhase phase, int layer, int64_t t0_us, int64_t t1_us);
    void *ctx;
    void (*layer_span)(void *ctx, const Device *dev, GptPhase phase, int layer, DeviceMark m0, DeviceMark m1);
} GptHooks;

// Mean loss over the micro-batch's B*T tokens is sum / (B*T); this returns the sum.
double gpt_forward(Gpt *g, GptActs *a, const uint8_t *tokens, const uint8_t *targets,
                   const GptHooks *hooks);
void gpt_backward(Gpt *g, GptActs *a, const uint8_t *tokens, const uint8_t *targets,
                  float loss_scale, const GptHooks *hooks);

// The param_hash (hash.h) of every layer's parameters, in layer order, computed on the
// device that holds them.
uint64_t gpt_param_hash(const Gpt *g);

#endif
