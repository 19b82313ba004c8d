#!/usr/bin/env python3
"""Compares the training losses of two `linac train` runs step by step (issue 14: the fused LM head
+ loss against full logits then cross_entropy, same seed, same data).

    python3 bench/loss_agreement.py RUN_A/metrics.jsonl RUN_B/metrics.jsonl [--tol 0.02] [--json F]

Prints every tenth step's losses and their difference, then the largest absolute and relative
difference over all logged steps and the difference of the mean over the last ten. Exits 1 when a
step's relative difference exceeds --tol (the two paths round differently in bf16, so the curves
are expected to drift apart by rounding, not to match bit for bit), 2 when the runs share no step.
"""
import argparse
import json
import sys


def losses(path):
    """step -> training loss (the rows with a "loss" key; evaluation rows carry "eval_loss")."""
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            row = json.loads(line)
            if "loss" in row:
                out[int(row["step"])] = float(row["loss"])
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a", help="the first run's metrics.jsonl (e.g. --fused-loss on)")
    p.add_argument("b", help="the second run's metrics.jsonl (e.g. --fused-loss off)")
    p.add_argument("--names", default="fused,unfused", help="column names for the two runs")
    p.add_argument("--tol", type=float, default=0.02, help="largest relative difference allowed at a step")
    p.add_argument("--json", help="append one summary row (JSON) to this file")
    args = p.parse_args()
    name_a, name_b = args.names.split(",")
    a, b = losses(args.a), losses(args.b)
    steps = sorted(set(a) & set(b))
    if not steps:
        print(f"no common logged step ({len(a)} and {len(b)} rows)", file=sys.stderr)
        return 2
    print(f"{'step':>6} {name_a:>10} {name_b:>10} {'diff':>10} {'rel':>9}")
    worst_abs = worst_rel = 0.0
    worst_step = steps[0]
    for s in steps:
        d = a[s] - b[s]
        rel = abs(d) / max(abs(b[s]), 1e-12)
        if rel > worst_rel:
            worst_rel, worst_step = rel, s
        worst_abs = max(worst_abs, abs(d))
        if s == steps[0] or s == steps[-1] or s % 10 == 0:
            print(f"{s:>6} {a[s]:>10.4f} {b[s]:>10.4f} {d:>+10.4f} {rel:>9.2e}")
    tail = steps[-10:]
    mean_a = sum(a[s] for s in tail) / len(tail)
    mean_b = sum(b[s] for s in tail) / len(tail)
    ok = worst_rel <= args.tol
    print(f"{len(steps)} steps: largest |diff| {worst_abs:.4f}, largest relative {worst_rel:.2e} "
          f"(step {worst_step}); mean of the last {len(tail)}: {mean_a:.4f} vs {mean_b:.4f} "
          f"({mean_a - mean_b:+.4f}); {'agree' if ok else 'DISAGREE'} at tol {args.tol}")
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps({"bench": "loss_agreement", "runs": [name_a, name_b], "steps": len(steps),
                                "max_abs_diff": worst_abs, "max_rel_diff": worst_rel, "worst_step": worst_step,
                                "tail_mean": [mean_a, mean_b], "tol": args.tol, "agree": ok}) + "\n")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
