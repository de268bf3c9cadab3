#!/usr/bin/env python3
"""torch_step.py — the same training step as shardlab's, in PyTorch eager: the peer to time against.

    python3 tests/gpu/torch_step.py [--batch 8 --seq 64 --layers 2 --dim 64 --heads 4]
                                    [--steps 50 --warmup 10] [--attn manual|sdpa]
                                    [--precision fp32[,tf32,bf16]] [--compile]
                                    [--shardlab-run DIR] [--results FILE --shape NAME]

Builds the model of labs/DESIGN.md, The model (labs/common/model/gpt.h) with torch.nn: byte
vocabulary V = 256, learned token and position embeddings, L pre-LN blocks (LayerNorm -> causal multi-head attention with
bias -> residual; LayerNorm -> Linear C->4C -> GELU (tanh) -> Linear 4C->C -> residual), a
final LayerNorm and an untied head without bias; mean cross-entropy over B x T. The step is
the one labs/01-single/single.c times: forward, backward, clip the global gradient norm, AdamW (beta1
0.9, beta2 0.95, eps 1e-8, decoupled weight decay on every parameter) — in fp32 with TF32 off,
as shardlab computes by default, on random tokens of the same shape. Defaults are
labs/common/harness/args.c's.

Prints `torch_ms_per_step X`: the median over --steps timed steps after --warmup untimed ones,
each step bracketed by torch.cuda.synchronize(). With --shardlab-run DIR (a `single --device
cuda` run with the same settings) it also prints `shardlab_ms_per_step Y` (the median of that
run's "ms.work" after the same warm-up: forward, backward, clip and AdamW, the region timed
here; its wall clock per step, "ms.step", which adds the lab's logging and parameter hash, is
printed beside it) and `ratio_shardlab_over_torch Y/X`.

--attn manual (default) computes attention as shardlab does, materializing the [B,NH,T,T]
probabilities; --attn sdpa uses torch.nn.functional.scaled_dot_product_attention, the fused
kernel a PyTorch user would reach for (memory-efficient attention in fp32).

For tests/gpu/bench.sh (make bench-gpu): --precision takes a list, each timed on a fresh model
in this one process (one import, one CUDA context): fp32 (TF32 off), tf32 (TF32 tensor cores
for matrix products) and bf16 (the forward pass under torch.autocast to bfloat16; fp32
weights, gradients and AdamW, as shardlab's --mixed). --compile wraps the model in
torch.compile (the default mode; its compilation falls in the warm-up steps). Each precision
also prints `torch_peak_bytes` (torch.cuda.max_memory_allocated over the model's creation and
its steps: weights, gradients, AdamW's state, activations; the CUDA context and the caching
allocator's spare blocks are not in it, as shardlab's mem.peak has neither). With --results
FILE each precision appends one JSON row to FILE (tests/gpu/bench_table.py reads them): a
failed precision (out of memory, a compile error) is a row with ok false and why, and the
next precision still runs.
"""
import argparse
import gc
import json
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
        # The init of labs/DESIGN.md, The model: N(0, 0.02), residual output projections N(0, 0.02/sqrt(2L)), biases 0.
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


def time_steps(a, precision, dev):
    """Builds the model on dev and times a.steps training steps after a.warmup at this precision.
    Returns (median ms, last loss, parameters, peak bytes)."""
    # fp32 everywhere, as shardlab computes by default: no TF32 tensor-core rounding; tf32: the
    # matrix products on TF32 tensor cores (shardlab's --tf32); bf16: autocast (--mixed).
    tf32 = precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.manual_seed(a.seed)
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()

    model = Gpt(a.seq, a.layers, a.dim, a.heads, a.attn).to(dev)
    # torch's AdamW is decoupled: p -= lr*wd*p, then the Adam step; shardlab's adamw_update
    # does the same in one expression. weight_decay applies to every parameter, as in labs/DESIGN.md, The model.
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=a.weight_decay)
    params = sum(p.numel() for p in model.parameters())
    run = torch.compile(model) if a.compile else model
    data = torch.randint(0, VOCAB, (a.batch, a.seq + 1), device=dev)
    tokens, targets = data[:, :-1].contiguous(), data[:, 1:].contiguous()

    def step():
        opt.zero_grad(set_to_none=False)  # shardlab zeroes its gradient buffers each step
        if precision == "bf16":
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = run(tokens, targets)
        else:
            loss = run(tokens, targets)
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
    result = statistics.median(times), loss.item(), params, torch.cuda.max_memory_allocated()
    del run, model, opt
    if a.compile:
        torch._dynamo.reset()
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    # labs/common/harness/args.c's defaults.
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
    p.add_argument("--precision", default="fp32", help="fp32, tf32 or bf16, or a list: fp32,tf32,bf16")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--results", help="append one JSON row per precision to this file")
    p.add_argument("--shape", default="", help="the shape's name in the --results rows")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--shardlab-run", help="a single --device cuda run directory with the same settings")
    a = p.parse_args()
    if a.dim % a.heads:
        p.error("--heads %d does not divide --dim %d" % (a.heads, a.dim))
    precisions = a.precision.split(",")
    for prec in precisions:
        if prec not in ("fp32", "tf32", "bf16"):
            p.error("--precision %s: expected fp32, tf32 or bf16" % prec)
    if a.shardlab_run and len(precisions) > 1:
        p.error("--shardlab-run compares one precision")
    if not torch.cuda.is_available():
        print("torch_step: torch sees no CUDA device", file=sys.stderr)
        return 1
    dev = torch.device("cuda")
    impl = ("torch.compile" if a.compile else "torch eager") + (" sdpa" if a.attn == "sdpa" else " manual")

    failed = 0
    for prec in precisions:
        row = {"shape": a.shape, "impl": impl, "precision": prec, "warmup": a.warmup, "steps": a.steps}
        try:
            torch_ms, last, params, peak = time_steps(a, prec, dev)
        except Exception as e:  # out of memory, a compile error: this row fails, the next runs
            failed += 1
            why = ("%s: %s" % (type(e).__name__, e)).splitlines()[0][:300]
            print("torch_step: %s at %s failed: %s" % (impl, prec, why), file=sys.stderr)
            row.update(ok=False, why=why)
            gc.collect()
            torch.cuda.empty_cache()
            torch._dynamo.reset()
        else:
            print("# torch %s, %s, B=%d T=%d L=%d C=%d NH=%d, %d parameters, %s, %s; "
                  "median of %d steps after %d warm-up; last loss %.4f"
                  % (torch.__version__, torch.cuda.get_device_name(0), a.batch, a.seq, a.layers, a.dim, a.heads, params,
                     impl, {"fp32": "fp32 (TF32 off)", "tf32": "TF32", "bf16": "bf16 autocast"}[prec], a.steps, a.warmup,
                     last))
            print("torch_ms_per_step %.3f" % torch_ms)
            print("torch_peak_bytes %d" % peak)
            row.update(ok=True, ms=torch_ms, peak_bytes=peak, loss=last, device=torch.cuda.get_device_name(0),
                       version=torch.__version__)
        if a.results:
            with open(a.results, "a") as f:
                f.write(json.dumps(row) + "\n")
    if failed:
        return 1

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
