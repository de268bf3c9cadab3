#!/usr/bin/env python3
"""bench_table.py — the rows of tests/gpu/bench.sh (make bench-gpu), and the table they make.

    python3 tests/gpu/bench_table.py shardlab --results F --shape S --impl I --precision P --run DIR --skip W
    python3 tests/gpu/bench_table.py fail     --results F --shape S --impl I --precision P --why TEXT
    python3 tests/gpu/bench_table.py missing  --results F --shape S --impl I --precision P,P.. --why TEXT
    python3 tests/gpu/bench_table.py table    --results F [--markdown FILE]

The results file holds one JSON object a line: {"shape", "impl", "precision", "ok", "ms",
"peak_bytes", "why", ...}. tests/gpu/torch_step.py appends PyTorch's rows itself; `shardlab`
appends one from a `single --device cuda` run directory: "ms" is the median of its step
events' ms.step (the wall clock per step, everything the lab does: logging and the parameter
hash included, as PyTorch's rows time the whole step) over the steps after the first W
(warm-up), "ms_work" the same for ms.work, "peak_bytes" the largest mem.peak (the counting
allocator's high-water mark: weights, gradients, AdamW's state, activations, transient
buffers; like torch.cuda.max_memory_allocated it leaves out the CUDA context). `fail` appends
a failed row; `missing` one for each precision of (shape, impl) that has no row yet (a
PyTorch process that timed out or crashed part way). `table` prints every row as one markdown
table, with the ratios shardlab/PyTorch at the same shape and precision, and writes it to
--markdown too. Needs no torch and no GPU.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402  (the run-directory readers check.sh uses)

MIB = 1024.0 * 1024.0
PRECISIONS = {"fp32": "fp32 (TF32 off)", "tf32": "TF32", "bf16": "bf16"}


def read_rows(path):
    rows = []
    try:
        with open(path) as f:
            for line in f:
                if line.strip():
                    rows.append(json.loads(line))
    except FileNotFoundError:
        pass
    return rows


def append(path, row):
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def shardlab_row(a):
    """The row of a finished single --device cuda run."""
    row = {"shape": a.shape, "impl": a.impl, "precision": a.precision, "warmup": a.skip}
    try:
        steps = compare.steps(a.run)
        if not steps:
            raise ValueError("no step events in %s" % a.run)
        ms, counted = compare.median_step_ms(a.run, a.skip, "step")
        work, _ = compare.median_step_ms(a.run, a.skip, "work")
        peak = max(int(e.get("mem", {}).get("peak", 0)) for e in steps.values())
        device = compare.meta(a.run).get("device", "?")
        row.update(ok=True, ms=ms, ms_work=work, steps=counted, peak_bytes=peak, device=device)
        if device != "cuda":
            row.update(ok=False, why="the run was on %s, not cuda" % device)
    except (OSError, ValueError, KeyError) as e:
        row.update(ok=False, why="cannot read the run %s: %s" % (a.run, e))
    return row


# ---- the table ------------------------------------------------------------------------

def attention_kind(impl):
    """Which PyTorch eager row computes attention as this shardlab row does: flash -> sdpa
    (fused, no T x T matrix kept); naive, or a shardlab without --attn -> written out."""
    return "torch eager sdpa" if "flash" in impl else "torch eager manual"


def ratio(a, b):
    return "%.2f" % (a / b) if a is not None and b else "—"


def make_table(rows):
    """The markdown table: one line per row, in the order run, shardlab's with its ratios."""
    ok = {(r["shape"], r["impl"], r["precision"]): r for r in rows if r.get("ok")}

    def peer(r, impl, key):
        p = ok.get((r["shape"], impl, r["precision"]))
        return p.get(key) if p else None

    head = ["shape", "implementation", "precision", "ms/step", "peak MiB", "ms ÷ torch eager, same attention",
            "ms ÷ torch eager sdpa", "ms ÷ torch.compile", "peak ÷ torch eager, same attention", "note"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        prec = PRECISIONS.get(r["precision"], r["precision"])
        if not r.get("ok"):
            cells = [r["shape"], r["impl"], prec, "FAIL", "", "", "", "", "", r.get("why", "")]
        else:
            ms, peak = r.get("ms"), r.get("peak_bytes")
            cells = [r["shape"], r["impl"], prec, "%.2f" % ms, "%.1f" % (peak / MIB) if peak is not None else "?"]
            if r["impl"].startswith("shardlab"):
                same = attention_kind(r["impl"])
                compiled = "torch.compile sdpa"
                cells += [ratio(ms, peer(r, same, "ms")), ratio(ms, peer(r, "torch eager sdpa", "ms")),
                          ratio(ms, peer(r, compiled, "ms")), ratio(peak, peer(r, same, "peak_bytes"))]
                note = ""
                if r.get("ms_work") is not None:  # the rest of the step: logging, the param_hash
                    note = "ms.work %.2f; between steps %.1f%%" % (r["ms_work"], 100.0 * (ms - r["ms_work"]) / ms)
            else:
                cells += ["", "", "", ""]
                note = ""
            cells.append(note)
        lines.append("| " + " | ".join(str(c).replace("|", "/") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("what", choices=("shardlab", "fail", "missing", "table"))
    p.add_argument("--results", required=True)
    p.add_argument("--shape", default="")
    p.add_argument("--impl", default="")
    p.add_argument("--precision", default="fp32")
    p.add_argument("--run")
    p.add_argument("--skip", type=int, default=0)
    p.add_argument("--why", default="")
    p.add_argument("--markdown")
    a = p.parse_args()
    if a.what == "shardlab":
        if not a.run:
            p.error("shardlab needs --run")
        row = shardlab_row(a)
        append(a.results, row)
        if row["ok"]:
            print("  %s %s: %.2f ms/step (ms.work %.2f), peak %.1f MiB"
                  % (a.impl, a.precision, row["ms"], row["ms_work"], row["peak_bytes"] / MIB))
        else:
            print("  %s %s: FAIL: %s" % (a.impl, a.precision, row["why"]))
        return 0
    if a.what == "fail":
        append(a.results, {"shape": a.shape, "impl": a.impl, "precision": a.precision, "ok": False, "why": a.why})
        return 0
    if a.what == "missing":
        have = {(r["shape"], r["impl"], r["precision"]) for r in read_rows(a.results)}
        for prec in a.precision.split(","):
            if (a.shape, a.impl, prec) not in have:
                append(a.results, {"shape": a.shape, "impl": a.impl, "precision": prec, "ok": False, "why": a.why})
        return 0
    rows = read_rows(a.results)
    if not rows:
        print("(no rows)")
        return 1
    table = make_table(rows)
    sys.stdout.write(table)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(table)
    return 0 if all(r.get("ok") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
