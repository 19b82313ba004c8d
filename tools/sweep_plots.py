#!/usr/bin/env python3
"""Plots of a `linac sweep` folder (results.json and each cell's run/metrics.jsonl), as PNG and SVG
in DIR/plots/:

  loss_curves        training loss against step, one panel per variant, a line per schedule
                     (the Transformer drawn in every panel)
  recall             MQAR accuracy (and the RULER average per context length, where evaluated)
                     against the share of attention layers, a line per variant
  memory_quality     state + KV-cache bytes (`linac memory` at the sweep's --memory-context)
                     against recall and perplexity

usage: python3 tools/sweep_plots.py SWEEP_DIR
Exit 0 with the plots written; 3 when matplotlib is missing (the sweep reports it and goes on).
"""
import json
import os
import sys
from collections import defaultdict

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("matplotlib is not installed: pip install matplotlib")
    sys.exit(3)

TRANSFORMER = "transformer"


def read_json_lines(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    pass  # a line cut short by a kill
    return rows


def save(fig, out, name):
    fig.tight_layout()
    for ext in ("png", "svg"):
        fig.savefig(os.path.join(out, f"{name}.{ext}"), dpi=130)
    plt.close(fig)
    print(f"wrote {name}.png, {name}.svg")


def loss_curves(sweep, rows, out):
    curves = {}
    for row in rows:
        steps, losses = [], []
        for m in read_json_lines(os.path.join(sweep, "cells", row["cell"], "run", "metrics.jsonl")):
            if m.get("loss") is not None:
                steps.append(m["step"])
                losses.append(m["loss"])
        if steps:
            curves[row["cell"]] = (row, steps, losses)
    if not curves:
        return
    variants = sorted({r["variant"] for r, _, _ in curves.values() if r["variant"] != TRANSFORMER}) or [TRANSFORMER]
    fig, axes = plt.subplots(1, len(variants), figsize=(4.2 * len(variants), 3.4), squeeze=False, sharey=True)
    for ax, variant in zip(axes[0], variants):
        for row, steps, losses in curves.values():
            if row["variant"] in (variant, TRANSFORMER):
                style = "--" if row["variant"] == TRANSFORMER else "-"
                ax.plot(steps, losses, style, label=f"{row['schedule']} (seed {row['seed']})", linewidth=1.2)
        ax.set_title(variant)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("training loss (nats)")
    save(fig, out, "loss_curves")


def mean_by(rows, key, metric):
    """{group: [(attention_share, mean metric over seeds)]} for rows that have both."""
    acc = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.get(metric) is not None and r.get("attention_share") is not None:
            acc[r[key]][r["attention_share"]].append(r[metric])
    return {g: sorted((x, sum(v) / len(v)) for x, v in pts.items()) for g, pts in acc.items()}


def recall(rows, out):
    metrics = ["mqar"] + sorted({k for r in rows for k in r if k.startswith("ruler_") and k[6:].isdigit()},
                                key=lambda k: int(k[6:]))
    metrics = [m for m in metrics if any(r.get(m) is not None for r in rows)]
    if not metrics:
        return
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.4), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        series = mean_by(rows, "variant", metric)
        transformer = series.pop(TRANSFORMER, [])
        for variant, pts in sorted(series.items()):
            ax.plot([x for x, _ in pts], [y for _, y in pts], "o-", label=variant)
        for x, y in transformer:
            ax.plot([x], [y], "k*", markersize=10, label=TRANSFORMER)
        ax.set_xlabel("share of attention layers")
        ax.set_ylabel("MQAR accuracy" if metric == "mqar" else f"RULER average @ {metric[6:]} tokens")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    save(fig, out, "recall")


def memory_quality(rows, out):
    have = [r for r in rows if r.get("cache_bytes")]
    if not have:
        print("memory_quality: no cache_bytes in the rows; skipped")
        return
    metrics = [m for m in ("mqar", "ppl") if any(r.get(m) is not None for r in have)]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.4), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        by_variant = defaultdict(list)
        for r in have:
            if r.get(metric) is not None:
                by_variant[r["variant"]].append((r["cache_bytes"] / 2**20, r[metric], r["schedule"]))
        for variant, pts in sorted(by_variant.items()):
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], label=variant,
                       marker="*" if variant == TRANSFORMER else "o")
            for x, y, schedule in pts:
                ax.annotate(schedule, (x, y), fontsize=6, xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log")
        ax.set_xlabel("state + KV cache (MiB)")
        ax.set_ylabel("MQAR accuracy" if metric == "mqar" else "held-out perplexity")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    save(fig, out, "memory_quality")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sweep = sys.argv[1]
    with open(os.path.join(sweep, "results.json")) as f:
        rows = json.load(f)
    out = os.path.join(sweep, "plots")
    os.makedirs(out, exist_ok=True)
    loss_curves(sweep, rows, out)
    recall(rows, out)
    memory_quality(rows, out)


if __name__ == "__main__":
    main()
