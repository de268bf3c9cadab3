// tp_layout.c — see tp_layout.h.
#include "tp_layout.h"

size_t tp_replicated_floats(const GptConfig *c, int vp, int layer) {
    size_t C = (size_t)c->dim, V = (size_t)c->vocab, T = (size_t)c->seq;
    if (layer == 0) return V * C + T * C;           // wte, wpe
    if (layer <= c->layers) return 6 * C;          // ln_1, ln_2, the two c_proj biases
    return 2 * C + (vp ? 0 : V * C);               // ln_f (+ lm_head unless vocab-parallel)
}

size_t tp_split_floats(const GptConfig *c, int vp, int t, int layer) {
    size_t C = (size_t)c->dim, V = (size_t)c->vocab;
    if (layer == 0) return 0;
    if (layer <= c->layers) return (12 * C * C + 7 * C) / (size_t)t;  // c_attn w,b; c_proj w; c_fc w,b; c_proj w
    return vp ? V * C / (size_t)t : 0;
}

TpRows tp_rows(const GptConfig *c, int t, int sp, int vp, int B) {
    TpRows x;
    x.BT = (size_t)B * c->seq;
    x.R = sp ? x.BT / (size_t)t : x.BT;
    x.H = vp ? x.BT : x.R;
    x.Vh = vp ? (size_t)c->vocab / (size_t)t : (size_t)c->vocab;
    return x;
}

size_t tp_acts_bytes(const GptConfig *c, int t, int sp, int vp, int B) {
    TpRows x = tp_rows(c, t, sp, vp, B);
    size_t C = (size_t)c->dim, ts = (size_t)t;
    // Kept in bf16 under --mixed: ln1, ln2 on all rows; this rank's share of atty, fch and
    // fch_gelu, and of qkv with flash attention.
    size_t halved = 2 * x.BT * C + x.BT * 9 * C / ts + (gpt_keeps_qkv_bf16(c) ? x.BT * 3 * C / ts : 0);
    size_t block = x.BT * 2 * C + x.BT * 12 * C / ts     // ln1, ln2; qkv, atty, fch, fch_gelu: its share
                   + 4 * x.R                             // the LayerNorms' means and rstds
                   + gpt_attn_saved_floats(c, B, c->heads / t)  // att (naive) or lse (flash) of its heads
                   + 2 * x.R * C;                        // res1, out: the residual stream's rows
    size_t floats = x.R * C + (size_t)c->layers * block + x.H * C + 2 * x.R + x.H * x.Vh;
    size_t halves = c->mixed ? (size_t)c->layers * halved + x.H * C : 0;  // lnf on H rows
    return 4 * (floats - halves) + 2 * halves;
}
