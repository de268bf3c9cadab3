#!/usr/bin/env python3
"""compare.py — reads shardlab run directories for tests/gpu/check.sh and keeps its score.

Each subcommand checks one thing, prints one line saying what it found, and appends one row
(a JSON object) to the results file; `table` prints every row and exits 1 if any failed.

    compare.py train --results F --lab ddp --n 2 --run DIR --ref DIR [--mem-ref DIR] [--tol 2e-3]
                     [--tol-first 1e-5] [--steps S]
        the loss of every step of DIR against the reference run (single on the CPU, same
        global batch): the first ten steps within --tol-first (the same weights, barely moved
        under the warmup: only the kernels' order of additions differs), the later ones within
        --tol (training amplifies that order; check.sh says how the bound was measured); with
        --mem-ref, the memory categories of every step against that run (the same lab and N
        on the CPU); replicas (param_hash) equal across DIR's ranks. --steps: the run's
        length, shown in the table.
    compare.py collectives --results F --n 4 --run DIR
        the nccl-tests-style table in DIR/rank-0.log: every row's #wrong must be 0.
    compare.py timing --results F --label L --run DIR --torch-ms X [--skip K]
        DIR's median ms/step (after K warm-up steps) and its ratio to PyTorch's.
    compare.py fail --results F --lab L --n N --why TEXT
        a run that did not finish: a failed row.
    compare.py table --results F

The run directory is labs/DESIGN.md, The run directory: meta.json (device, backend),
rank-<r>.jsonl (events, one JSON object a line: "step" events carry loss, ms.step, mem{...}
and param_hash).
"""
import argparse
import glob
import json
import os
import statistics
import sys

# The memory categories of labs/DESIGN.md, Events. "peak" is a high-water mark that includes transient
# buffers (scratch, staging), which a GPU implementation may size differently: it is shown,
# not compared.
MEM_CATEGORIES = ("params", "grads", "optim", "acts", "comm")


# ---- reading runs ----------------------------------------------------------------------

def events(run_dir, rank=0):
    """Every event of one rank, in order."""
    path = os.path.join(run_dir, "rank-%d.jsonl" % rank)
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def steps(run_dir, rank=0):
    """{step: step event} of one rank."""
    return {e["step"]: e for e in events(run_dir, rank) if e.get("ev") == "step"}


def held(lab, step, cat):
    """What a step event says the rank holds in a memory category, set by the algorithm alone.
    pp holds one pass's workspace for the whole run, in acts, and reports it in the step
    ("workspace"): on a GPU that includes the kernels' own workspace (ops_gpu_workspace_bytes,
    ops.h), which the CPU's kernels take as arguments instead; so pp's acts is compared without
    it. (ckpt reports its pass's workspace too, but frees it before the step ends.)"""
    v = step["mem"].get(cat)
    if lab == "pp" and cat == "acts" and v is not None and isinstance(step.get("workspace"), int):
        v -= step["workspace"]
    return v


def meta(run_dir):
    try:
        with open(os.path.join(run_dir, "meta.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def ranks(run_dir):
    return sorted(int(os.path.basename(p)[5:-6]) for p in glob.glob(os.path.join(run_dir, "rank-*.jsonl")))


def median_step_ms(run_dir, skip=0, field="step"):
    """Median of rank 0's "ms.<field>" over the steps after the first `skip` (warm-up: cuBLAS
    and NCCL set themselves up during the first steps). field "step": the wall clock per step,
    everything the lab does (logging, hashing the parameters, checkpoints); "work": the timed
    region, forward, backward, communication and the update (a run without it: "step").
    Returns (median, steps counted)."""
    s = steps(run_dir)
    def ms_of(e):
        return e["ms"].get(field, e["ms"]["step"])
    ms = [ms_of(s[k]) for k in sorted(s) if k > skip] or [ms_of(s[k]) for k in sorted(s)]
    if not ms:
        raise ValueError("%s: no step events" % run_dir)
    return statistics.median(ms), len(ms)


def run_config(run_dir):
    """The model and batch settings of a run (its start event's config)."""
    for e in events(run_dir):
        if e.get("ev") == "start":
            return e.get("config", {})
    return meta(run_dir).get("config", {})


# ---- the results file ------------------------------------------------------------------

def add_row(path, row):
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")


def row_base(lab, n, run_dir):
    m = meta(run_dir) if run_dir else {}
    return {"lab": lab, "n": n, "steps": None, "device": m.get("device", "?"), "backend": m.get("backend", "?"),
            "dloss_first": None, "dloss": None, "mem": None, "wrong": None, "ms": None, "ratio": None, "ok": True,
            "why": []}


def finish(args, row):
    row["ok"] = not row["why"]
    add_row(args.results, row)
    status = "ok" if row["ok"] else "FAIL: " + "; ".join(row["why"])
    print("compare: %s N=%s %s/%s: %s" % (row["lab"], row["n"], row["device"], row["backend"], status))


# ---- the checks ------------------------------------------------------------------------

def cmd_train(args):
    row = row_base(args.lab, args.n, args.run)
    run, ref = steps(args.run), steps(args.ref)
    # A resumed run (--resume) starts at the checkpoint's step + 1: compare from there.
    ref = {k: v for k, v in ref.items() if k >= args.first_step}
    # The same steps in both: a run that stopped early is a failure, not a shorter comparison.
    if not run or sorted(run) != sorted(ref):
        row["why"].append("steps differ: run has %d, reference %d" % (len(run), len(ref)))
    common = sorted(set(run) & set(ref))
    row["steps"] = args.steps or (max(run) if run else None)
    if common:
        # The first ten steps: the same weights on the same batches, barely moved under the
        # warmup; only the kernels' order of additions differs (about 1e-6). Above 1e-5 a
        # kernel is wrong or a gradient lost, however the later steps go. After them, training
        # amplifies the order of additions, within --tol (see check.sh for the measurement);
        # a wrong kernel, a missed gradient or a scaled-twice all-reduce is off by 1e-2 or
        # more within a few steps.
        for name, part, tol in (("steps %d-%d" % (common[0], min(common[0] + 9, common[-1])),
                                 [k for k in common if k < common[0] + 10], args.tol_first),
                                ("steps %d-%d" % (common[0] + 10, common[-1]),
                                 [k for k in common if k >= common[0] + 10], args.tol)):
            if not part:
                continue
            diffs = {k: abs(run[k]["loss"] - ref[k]["loss"]) for k in part}
            worst = max(part, key=lambda k: diffs[k])
            row["dloss_first" if tol is args.tol_first else "dloss"] = diffs[worst]
            print("compare: %s N=%d: %s: max |loss - reference loss| = %.3g (step %d: %.9g vs %.9g); tolerance %g"
                  % (args.lab, args.n, name, diffs[worst], worst, run[worst]["loss"], ref[worst]["loss"], tol))
            if not diffs[worst] <= tol:
                row["why"].append("loss differs from the reference by %.3g at step %d (%s: tolerance %g)"
                                  % (diffs[worst], worst, name, tol))

    if args.mem_ref:
        mref = steps(args.mem_ref)
        bad = []
        for k in sorted(set(run) & set(mref)):
            for cat in MEM_CATEGORIES:
                a, b = held(args.lab, run[k], cat), held(args.lab, mref[k], cat)
                if a != b:
                    bad.append("%s at step %d: %s vs %s bytes on the CPU" % (cat, k, a, b))
        # The memory a rank holds is set by the algorithm, not the device: every category
        # must be equal to the byte, at every step (held(): less a workspace the step reports).
        row["mem"] = not bad and bool(mref)
        if bad:
            row["why"].append("memory differs: " + "; ".join(bad[:3]) + (" ..." if len(bad) > 3 else ""))
        elif not mref:
            row["why"].append("the CPU memory reference has no steps")
        last = max(run) if run else None
        if last and mref.get(last):
            print("compare: %s N=%d: memory equal: %s; peak %s (cuda) vs %s (cpu) bytes, not compared" % (
                args.lab, args.n, "yes" if row["mem"] else "no", run[last]["mem"].get("peak"),
                mref[last]["mem"].get("peak")))

    # Replicas: where every rank holds the whole model (ddp, single), param_hash must be the
    # same on every rank after every step.
    rs = ranks(args.run)
    if args.replicas and len(rs) > 1:
        hashes = {r: {k: e.get("param_hash") for k, e in steps(args.run, r).items()} for r in rs}
        for k in sorted(run):
            seen = {hashes[r].get(k) for r in rs}
            if len(seen) != 1:
                row["why"].append("replicas differ at step %d (param_hash %s)" % (k, ", ".join(sorted(map(str, seen)))))
                break

    if run:
        row["ms"], _ = median_step_ms(args.run, args.skip, "work")
    finish(args, row)


def cmd_collectives(args):
    row = row_base("collectives", args.n, args.run)
    path = os.path.join(args.run, "rank-0.log")
    rows, wrong, unknown, coll = 0, 0, 0, "?"
    per_coll = {}
    with open(path) as f:
        for line in f:
            fields = line.split()
            if line.startswith("#"):
                # "# all_reduce  busbw factor 1.5000": the table that follows.
                if len(fields) >= 4 and fields[2:4] == ["busbw", "factor"]:
                    coll = fields[1]
                continue
            # A row: size count type time algbw busbw #wrong algo.
            if len(fields) < 8 or not fields[0].isdigit() or fields[2] != "float":
                continue
            rows += 1
            per_coll[coll] = per_coll.get(coll, 0) + 1
            try:
                w = int(float(fields[6]))
            except ValueError:
                unknown += 1  # "N/A": the lab ran with --check 0
                continue
            wrong += w
            if w:
                row["why"].append("%s at %s bytes: %d wrong" % (coll, fields[0], w))
    row["wrong"] = wrong if rows and not unknown else None
    # Every row must have been checked, and there must be rows: an empty table proves nothing.
    if not rows:
        row["why"].append("no table rows in %s" % path)
    if unknown:
        row["why"].append("%d rows were not checked (#wrong N/A)" % unknown)
    print("compare: collectives N=%d: %d rows (%s), #wrong total %d" % (
        args.n, rows, ", ".join("%s %d" % kv for kv in sorted(per_coll.items())), wrong))
    finish(args, row)


def cmd_timing(args):
    row = row_base(args.label, 1, args.run)
    # PyTorch's step is timed around forward, backward, clip and AdamW: shardlab's "work"
    # is the same region. Its wall clock per step adds the lab's logging and parameter hash.
    row["ms"], counted = median_step_ms(args.run, args.skip, "work")
    wall, _ = median_step_ms(args.run, args.skip, "step")
    row["ratio"] = row["ms"] / args.torch_ms if args.torch_ms > 0 else None
    print("compare: %s: shardlab %.3f ms/step of work (ms.work, median of %d steps; wall clock %.3f ms/step with "
          "logging and hashing), PyTorch %.3f ms/step: ratio shardlab/torch %.3f"
          % (args.label, row["ms"], counted, wall, args.torch_ms, row["ratio"] or float("nan")))
    # A benchmark, not a test: the ratio is reported, never asserted.
    finish(args, row)


def cmd_fail(args):
    row = row_base(args.lab, args.n, args.run)
    row["steps"] = args.steps
    row["why"].append(args.why)
    finish(args, row)


def cmd_table(args):
    rows = []
    if os.path.exists(args.results):
        with open(args.results) as f:
            rows = [json.loads(line) for line in f if line.strip()]

    def fmt(v, spec):
        return "-" if v is None else spec % v

    head = ("lab", "N", "steps", "device", "backend", "dloss 1-10", "dloss after", "mem equal", "#wrong", "work ms",
            "vs torch", "result")
    lines = [head]
    for r in rows:
        lines.append((r["lab"], str(r["n"]), fmt(r.get("steps"), "%s"), r["device"], r["backend"],
                      fmt(r.get("dloss_first"), "%.2e"), fmt(r["dloss"], "%.2e"),
                      "-" if r["mem"] is None else ("yes" if r["mem"] else "NO"), fmt(r["wrong"], "%d"),
                      fmt(r["ms"], "%.2f"), fmt(r["ratio"], "%.2fx"), "ok" if r["ok"] else "FAIL"))
    widths = [max(len(l[i]) for l in lines) for i in range(len(head))]
    for i, l in enumerate(lines):
        print("  ".join(c.ljust(w) for c, w in zip(l, widths)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    failed = [r for r in rows if not r["ok"]]
    for r in failed:
        print("FAIL %s N=%s: %s" % (r["lab"], r["n"], "; ".join(r["why"])))
    print("%d checks, %d failed" % (len(rows), len(failed)))
    return 1 if failed or not rows else 0


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    t = sub.add_parser("train")
    t.add_argument("--lab", required=True)
    t.add_argument("--n", type=int, required=True)
    t.add_argument("--run", required=True)
    t.add_argument("--ref", required=True)
    t.add_argument("--mem-ref")
    t.add_argument("--tol", type=float, default=2e-3, help="on the loss of the steps after the first ten")
    t.add_argument("--tol-first", type=float, default=1e-5, help="on the loss of the first ten steps")
    t.add_argument("--steps", type=int, default=None, help="the run's length (for the table)")
    t.add_argument("--skip", type=int, default=5, help="warm-up steps left out of the median ms/step")
    t.add_argument("--replicas", type=int, default=1, help="1: param_hash must agree across ranks")
    t.add_argument("--first-step", type=int, default=1, help="a resumed run's first step")

    c = sub.add_parser("collectives")
    c.add_argument("--n", type=int, required=True)
    c.add_argument("--run", required=True)

    m = sub.add_parser("timing")
    m.add_argument("--label", required=True)
    m.add_argument("--run", required=True)
    m.add_argument("--torch-ms", type=float, required=True)
    m.add_argument("--skip", type=int, default=5)

    f = sub.add_parser("fail")
    f.add_argument("--lab", required=True)
    f.add_argument("--n", default="-")
    f.add_argument("--run")
    f.add_argument("--why", required=True)
    f.add_argument("--steps", type=int, default=None)

    sub.add_parser("table")
    for s in (t, c, m, f, sub.choices["table"]):
        s.add_argument("--results", required=True)

    args = p.parse_args()
    try:
        return {"train": cmd_train, "collectives": cmd_collectives, "timing": cmd_timing, "fail": cmd_fail,
                "table": cmd_table}[args.cmd](args) or 0
    except (OSError, ValueError, KeyError) as e:
        # A run directory without the files or fields labs/DESIGN.md promises: a failed check.
        if args.cmd == "table":
            raise
        lab = getattr(args, "lab", None) or getattr(args, "label", None) or args.cmd
        add_row(args.results, {"lab": lab, "n": getattr(args, "n", "-"), "device": "?", "backend": "?",
                               "steps": getattr(args, "steps", None), "dloss_first": None, "dloss": None,
                               "mem": None, "wrong": None, "ms": None, "ratio": None, "ok": False,
                               "why": ["cannot read the run: %s: %s" % (type(e).__name__, e)]})
        print("compare: %s: FAIL: cannot read the run: %s: %s" % (lab, type(e).__name__, e))
        return 0  # recorded; the table decides the exit status


if __name__ == "__main__":
    sys.exit(main())
