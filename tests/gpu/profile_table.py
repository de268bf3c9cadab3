#!/usr/bin/env python3
"""profile_table.py — where one training step's GPU time goes, from Nsight Compute's CSV.

    python3 tests/gpu/profile_table.py --csv NCU.csv [--run DIR --skip W] [--title T] [--top N]

NCU.csv is what `ncu --csv --metrics gpu__time_duration.sum` wrote (tests/gpu/profile.sh runs
it on the one step a lab brackets with SHARDLAB_PROFILE_STEP): one row per kernel launch with
its duration on the GPU. Either of ncu's two CSV layouts is read: the details page (a row per
kernel and metric: "Kernel Name", "Metric Name", "Metric Unit", "Metric Value") and the raw
page (a column per metric, its unit in the row under the header). Lines before the header
(ncu's ==PROF== messages, the program's own output) are skipped; numbers may carry thousands
separators; durations in nsecond, usecond, msecond or second.

It prints two markdown tables: every kernel (by name, its launches summed), longest first, and
the same time by kind (attention, matrix products, LayerNorm, ...: KINDS below, first match),
each with its share of the kernels' sum. With --run (the same lab's run directory, a run
without the profiler, which slows every launch), the step's median wall clock (ms.step) and
work (ms.work) after W warm-up steps, and the part of the work when no kernel ran: the GPU
waiting for the host (launches, copies, host reads) = ms.work - the kernels' sum.
Needs no GPU and no torch.
"""
import argparse
import csv
import io
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402  (the run-directory readers check.sh uses)

METRIC = "gpu__time_duration.sum"
UNIT_MS = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0,
           "second": 1e3, "s": 1e3}

# (kind, pattern on the kernel's name), first match wins: shardlab's kernels by their names in
# labs/common/cuda/, cuBLAS's and cuBLASLt's by theirs (gemm, sm80_/sm90_ xmma, cutlass, nvjet).
KINDS = [
    ("attention", r"flash|attention|attn|softmax|causal"),
    ("matrix products (cuBLAS)", r"gemm|xmma|cutlass|nvjet|cublas|splitk|Kernel2"),
    ("LayerNorm", r"layernorm"),
    ("GELU", r"gelu"),
    ("bias and column sums", r"column_sums|broadcast_rows|bias"),
    ("AdamW and the gradient norm", r"adamw|sum_of_squares|scale_floats|squares"),
    ("embeddings and the loss", r"embedding|crossentropy|cross_entropy|logits"),
    ("bf16 conversions", r"bf16"),
    ("param_hash", r"hash"),
    ("residual, zero and copies", r"residual|zero|copy|memset|fill"),
]


def number(text):
    return float(text.replace(",", "").strip())


def kernels(path):
    """[(name, ms)] of every kernel launch in ncu's CSV at path."""
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    start = next((i for i, line in enumerate(lines) if '"Kernel Name"' in line or line.startswith("ID,")), None)
    if start is None:
        raise ValueError("%s: no ncu CSV header (a line with \"Kernel Name\")" % path)
    rows = list(csv.reader(io.StringIO("\n".join(line for line in lines[start:] if not line.startswith("==")))))
    header = rows[0]
    if "Kernel Name" not in header:
        raise ValueError("%s: the header has no Kernel Name column" % path)
    name_at = header.index("Kernel Name")
    found = []
    if "Metric Name" in header:  # the details page: one row per kernel and metric
        m_name, m_unit, m_value = (header.index(c) for c in ("Metric Name", "Metric Unit", "Metric Value"))
        for r in rows[1:]:
            if len(r) > m_value and r[m_name] == METRIC:
                found.append((r[name_at], number(r[m_value]) * unit_ms(r[m_unit], path)))
    elif METRIC in header:  # the raw page: the units in the row under the header
        at = header.index(METRIC)
        unit = unit_ms(rows[1][at], path) if len(rows) > 1 else 1.0
        for r in rows[2:]:
            if len(r) > at and r[at].strip():
                found.append((r[name_at], number(r[at]) * unit))
    else:
        raise ValueError("%s: no %s in it (ncu --metrics %s)" % (path, METRIC, METRIC))
    return found


def unit_ms(unit, path):
    if unit not in UNIT_MS:
        raise ValueError("%s: unknown time unit %r" % (path, unit))
    return UNIT_MS[unit]


def kind_of(name):
    for kind, pattern in KINDS:
        if re.search(pattern, name, re.IGNORECASE):
            return kind
    return "other"


def short(name, width=70):
    """The kernel's name without its parameter list, cut to width."""
    depth, cut = 0, len(name)
    for i, ch in enumerate(name):  # the first '(' outside template brackets starts the parameters
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0 and i > 0:
            cut = i
            break
    s = name[:cut].strip()
    return s if len(s) <= width else s[: width - 1] + "…"


def table(title, rows, total):
    print("| %s | launches | ms | share |" % title)
    print("|---|---|---|---|")
    for label, count, ms in rows:
        print("| %s | %d | %.3f | %.1f%% |" % (label.replace("|", "\\|"), count, ms, 100 * ms / total if total else 0))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--csv", required=True, help="what ncu --csv wrote")
    p.add_argument("--run", help="the lab's run directory, run without the profiler")
    p.add_argument("--skip", type=int, default=2, help="warm-up steps of --run left out of its medians")
    p.add_argument("--title", default="one step", help="what the step was (the tables' heading)")
    p.add_argument("--top", type=int, default=25, help="kernels listed (the rest summed in one row)")
    a = p.parse_args()
    try:
        found = kernels(a.csv)
    except (OSError, ValueError) as e:
        print("profile_table: %s" % e, file=sys.stderr)
        return 1
    if not found:
        print("profile_table: %s lists no kernel: was the step profiled (SHARDLAB_PROFILE_STEP, "
              "ncu --profile-from-start off)?" % a.csv, file=sys.stderr)
        return 1
    total = sum(ms for _, ms in found)
    by_name, by_kind = {}, {}
    for name, ms in found:
        for key, into in ((short(name), by_name), (kind_of(name), by_kind)):
            count, sum_ms = into.get(key, (0, 0.0))
            into[key] = (count + 1, sum_ms + ms)
    names = sorted(by_name.items(), key=lambda kv: -kv[1][1])
    rows = [(k, c, ms) for k, (c, ms) in names[: a.top]]
    if len(names) > a.top:
        rest = names[a.top:]
        rows.append(("(%d more)" % len(rest), sum(c for _, (c, _) in rest), sum(ms for _, (_, ms) in rest)))
    print("## %s: %d kernel launches, %.3f ms on the GPU" % (a.title, len(found), total))
    print()
    table("kernel", rows, total)
    print()
    table("kind", [(k, c, ms) for k, (c, ms) in sorted(by_kind.items(), key=lambda kv: -kv[1][1])], total)
    if a.run:
        try:
            step, counted = compare.median_step_ms(a.run, a.skip, "step")
            work, _ = compare.median_step_ms(a.run, a.skip, "work")
        except (OSError, ValueError, KeyError) as e:
            print("profile_table: cannot read the run %s: %s" % (a.run, e), file=sys.stderr)
            return 1
        print()
        print("Without the profiler (%s, median of %d steps after %d): the step %.3f ms on the wall clock, "
              "its work %.3f ms; the kernels above %.3f ms, so the GPU waited %.3f ms of the work (%.1f%%) "
              "and %.3f ms between steps (%.1f%% of the step)."
              % (a.run, counted, a.skip, step, work, total, work - total, 100 * (work - total) / work,
                 step - work, 100 * (step - work) / step))
    return 0


if __name__ == "__main__":
    sys.exit(main())
