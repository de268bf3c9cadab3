#!/usr/bin/env python3
"""torch_step.py — the same training step as shardlab's, in PyTorch eager: the peer to time against.

    python3 tests/gpu/torch_step.py [--batch 8 --seq 64 --layers 2 --dim 64 --heads 4]
                                    [--steps 50 --warmup 10] [--attn manual|sdpa]
                                    [--shardlab-run DIR]

Builds DESIGN.md's model (labs/core/gpt.h) with torch.nn: byte vocabulary V = 256, learned
token and position embeddings, L pre-LN blocks (LayerNorm -> causal multi-head attention with
bias -> residual; LayerNorm -> Linear C->4C -> GELU (tanh) -> Linear 4C->C -> residual), a
final LayerNorm and an untied head without bias; mean cross-entropy over B x T. The step is
the one labs/single.c times: forward, backward, clip the global gradient norm, AdamW (beta1
0.9, beta2 0.95, eps 1e-8, decoupled weight decay on every parameter) — in fp32 with TF32 off,
as shardlab computes by default, on random tokens of the same shape. Defaults are
labs/core/args.c's.

Prints `torch_ms_per_step X`: the median over --steps timed steps after --warmup untimed ones,
each step bracketed by torch.cuda.synchronize(). With --shardlab-run DIR (a `single --device
cuda` run with the same settings) it also prints `shardlab_ms_per_step Y` (the median of that
run's "ms.work" after the same warm-up: forward, backward, clip and AdamW, the region timed
here; its wall clock per step, "ms.step", which adds the lab's logging and parameter hash, is
printed beside it) and `ratio_shardlab_over_torch Y/X`.

--attn manual (default) computes attention as shardlab does, materializing the [B,NH,T,T]
probabilities; --attn sdpa uses torch.nn.functional.scaled_dot_product_attention, the fused
kernel a PyTorch user would reach for (memory-efficient attention in fp32).
"""
import argparse
import math
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

VOCAB = 256


class Block(nn.Module):
    def __init__(self, seq, dim, heads, layers, attn):
        super().__init__()
        self.heads, self.attn = heads, attn
        # True above the diagonal: the future a token must not see (made once, as nanoGPT does).
        self.register_buffer("future", torch.ones(seq, seq, dtype=torch.bool).triu(1), persistent=False)
        self.ln_1 = nn.LayerNorm(dim)
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.attn_proj = nn.Linear(dim, dim)
        self.ln_2 = nn.LayerNorm(dim)
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.mlp_proj = nn.Linear(4 * dim, dim)
        # DESIGN.md's init: N(0, 0.02), residual output projections N(0, 0.02/sqrt(2L)), biases 0.
        for lin in (self.c_attn, self.attn_proj, self.c_fc, self.mlp_proj):
            nn.init.normal_(lin.weight, std=0.02)
            nn.init.zeros_(lin.bias)
        for lin in (self.attn_proj, self.mlp_proj):
            nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * layers))

    def attention(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        if self.attn == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = F.softmax(att.masked_fill(self.future[:T, :T], float("-inf")), dim=-1)
            y = att @ v
        return self.attn_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, seq, layers, dim, heads, attn):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, dim)
        self.wpe = nn.Embedding(seq, dim)
        self.h = nn.ModuleList(Block(seq, dim, heads, layers, attn) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, VOCAB, bias=False)  # untied
        for w in (self.wte.weight, self.wpe.weight, self.lm_head.weight):
            nn.init.normal_(w, std=0.02)

    def forward(self, tokens, targets):
        T = tokens.size(1)
        x = self.wte(tokens) + self.wpe(torch.arange(T, device=tokens.device))
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, VOCAB), targets.reshape(-1))  # mean over B*T


def shardlab_median_ms(run_dir, skip, field):
    """The median ms.<field> of a shardlab run (tests/gpu/compare.py reads runs)."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import compare

    return compare.median_step_ms(run_dir, skip, field), compare.run_config(run_dir)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # labs/core/args.c's defaults.
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--seq", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--weight-decay", type=float, default=0.01)
    p.add_argument("--clip", type=float, default=1.0)
    p.add_argument("--steps", type=int, default=50, help="timed steps")
    p.add_argument("--warmup", type=int, default=10, help="untimed steps first")
    p.add_argument("--attn", choices=("manual", "sdpa"), default="manual")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--shardlab-run", help="a single --device cuda run directory with the same settings")
    a = p.parse_args()
    if a.dim % a.heads:
        p.error("--heads %d does not divide --dim %d" % (a.heads, a.dim))
    if not torch.cuda.is_available():
        print("torch_step: torch sees no CUDA device", file=sys.stderr)
        return 1

    # fp32 everywhere, as shardlab computes by default: no TF32 tensor-core rounding.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.manual_seed(a.seed)
    dev = torch.device("cuda")

    model = Gpt(a.seq, a.layers, a.dim, a.heads, a.attn).to(dev)
    # torch's AdamW is decoupled: p -= lr*wd*p, then the Adam step; shardlab's adamw_update
    # does the same in one expression. weight_decay applies to every parameter, as in DESIGN.md.
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=a.weight_decay)
    params = sum(p.numel() for p in model.parameters())
    data = torch.randint(0, VOCAB, (a.batch, a.seq + 1), device=dev)
    tokens, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()

    def step():
        opt.zero_grad(set_to_none=False)  # shardlab zeroes its gradient buffers each step
        loss = model(tokens, targets)
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        return loss

    times = []
    for i in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        loss = step()
        torch.cuda.synchronize()
        if i >= a.warmup:
            times.append((time.perf_counter() - t0) * 1000.0)
    torch_ms = statistics.median(times)
    print("# torch %s, %s, B=%d T=%d L=%d C=%d NH=%d, %d parameters, attention %s, fp32 (TF32 off); "
          "median of %d steps after %d warm-up; last loss %.4f"
          % (torch.__version__, torch.cuda.get_device_name(0), a.batch, a.seq, a.layers, a.dim, a.heads, params,
             a.attn, a.steps, a.warmup, loss.item()))
    print("torch_ms_per_step %.3f" % torch_ms)

    if a.shardlab_run:
        (ms, counted), cfg = shardlab_median_ms(a.shardlab_run, a.warmup, "work")
        (wall, _), _ = shardlab_median_ms(a.shardlab_run, a.warmup, "step")
        # A ratio between different models means nothing: the run must have these settings.
        want = {"batch": a.batch, "seq": a.seq, "layers": a.layers, "dim": a.dim, "heads": a.heads}
        differ = {k: (cfg.get(k), v) for k, v in want.items() if cfg.get(k) != v}
        if differ:
            print("torch_step: the shardlab run has other settings (run, here): %s" % differ, file=sys.stderr)
            return 1
        print("shardlab_ms_per_step %.3f  # ms.work, median of %d steps of %s; wall clock %.3f ms/step (ms.step, with "
              "logging and hashing)" % (ms, counted, a.shardlab_run, wall))
        print("ratio_shardlab_over_torch %.3f" % (ms / torch_ms))
    return 0


if __name__ == "__main__":
    sys.exit(main())
