// policy.c — see policy.h.
#include "policy.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/harness/check.h"  // defines: die()

// ---------------------------------------------------------------------------------------
// Policies, as segments
// ---------------------------------------------------------------------------------------

void ckpt_policy(CkptPolicy *p, CkptKind kind, int K, int L) {
    static const char *names[] = {"none", "every", "sqrt"};
    if (L < 1 || L > CKPT_MAX_BLOCKS || (kind == CKPT_K && (K < 1 || K > L)))
        die("this is a bug in shardlab", "checkpointing policy K=%d for %d blocks", K, L);
    memset(p, 0, sizeof *p);
    p->kind = kind, p->K = kind == CKPT_EVERY ? 1 : K;
    if (kind == CKPT_K) snprintf(p->name, sizeof p->name, "%d", K);
    else snprintf(p->name, sizeof p->name, "%s", names[kind]);
    int s = 1;
    while (s * s < L) s++;  // ceil(sqrt L)
    if (kind == CKPT_SQRT)
        for (int l = 1; l <= L; l += s) p->first[p->nseg] = l, p->last[p->nseg++] = l + s - 1 < L ? l + s - 1 : L;
    else if (kind != CKPT_NONE)
        for (int l = p->K; l <= L; l += p->K) p->first[p->nseg] = p->last[p->nseg] = l, p->nseg++;
    for (int l = 0; l < L + 2; l++) p->seg_of[l] = -1;
    for (int i = 0; i < p->nseg; i++) {
        int len = p->last[i] - p->first[i] + 1;
        p->width = len > p->width ? len : p->width;
        p->recomputed += len;
        for (int l = p->first[i]; l <= p->last[i]; l++) p->seg_of[l] = i;
    }
}

int ckpt_policy_named(CkptPolicy *p, const char *text, int L, char *why, size_t n) {
    if (L < 1 || L > CKPT_MAX_BLOCKS) return snprintf(why, n, "%d blocks: checkpointing takes 1 to %d", L, CKPT_MAX_BLOCKS), -1;
    for (int kind = CKPT_NONE; kind <= CKPT_SQRT; kind++) {
        ckpt_policy(p, (CkptKind)kind, 0, L);
        if (strcmp(text, p->name) == 0) return 0;
    }
    char *end;
    long K = strtol(text, &end, 10);
    if (end == text || *end || K < 1)
        return snprintf(why, n, "--policy must be none, every, sqrt or a positive whole number K (got '%s')", text), -1;
    if (K > L)
        return snprintf(why, n, "--policy %ld checkpoints blocks %ld, %ld, ...: that needs at least %ld blocks (--layers %d)", K,
                        K, 2 * K, K, L), -1;
    ckpt_policy(p, CKPT_K, (int)K, L);
    return 0;
}

// The closed form, computed from the shapes alone (not from the segments): the allocator's
// count of the layout below is checked against it.
double ckpt_acts_bytes(const GptConfig *c, int B, const CkptPolicy *p) {
    double T = c->seq, C = c->dim, L = c->layers;
    double b = (double)gpt_block_acts_bytes_per_token(c);  // a block's bytes per token
    // The embedding's output and the head's activations; a block's input or output is 4C
    // (fp32 under --mixed too).
    double per_token = 4 * C + (double)gpt_head_acts_bytes_per_token(c);
    if (p->kind == CKPT_NONE) {
        per_token += L * b;
    } else if (p->kind == CKPT_SQRT) {
        double s = ceil(sqrt(L)), n = ceil(L / s);
        per_token += 4 * n * C + s * b - 4 * C;
    } else {
        double k = floor(L / p->K);  // checkpointed blocks
        per_token += (L - k) * b + 4 * k * C + b - 4 * C;
    }
    return B * T * per_token;
}

const char *ckpt_acts_formula(const GptConfig *c, const CkptPolicy *p) {
    static const char *texts[] = {"4BT(2C+2+V+Lb)", "4BT(2C+2+V+LC+b-C)", "4BT(2C+2+V+nC+sb-C)",
                                  "4BT(2C+2+V+(L-c)b+cC+b-C)"};
    // --mixed: in bytes, b too (the head's lnf and a block's Linear inputs are bf16: gpt.h).
    static const char *mixed[] = {"BT(6C+8+4V+Lb)", "BT(6C+8+4V+4LC+b-4C)", "BT(6C+8+4V+4nC+sb-4C)",
                                  "BT(6C+8+4V+(L-c)b+4cC+b-4C)"};
    return c->mixed ? mixed[p->kind] : texts[p->kind];
}

const char *ckpt_block_formula(const GptConfig *c) {
    if (c->mixed) return c->attn == GPT_ATTN_FLASH ? "36C+16+4NH bytes" : "42C+16+4NH T bytes";
    return c->attn == GPT_ATTN_FLASH ? "16C+4+NH" : "16C+4+NH T";
}
