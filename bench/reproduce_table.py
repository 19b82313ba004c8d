#!/usr/bin/env python3
"""The tables of bench/reproduce.sh: its two sweeps' results.json (OUT/lm, OUT/mqar; either may be
missing) as markdown (OUT/table.md, printed) and JSON (OUT/table.json), one row per variant and
schedule with seeds averaged (the spread, max - min, beside the mean when there are several).

usage: python3 bench/reproduce_table.py OUT
"""
import json
import os
import statistics
import sys


def load(folder):
    path = os.path.join(folder, "results.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [r for r in json.load(f) if r.get("status") == "done"]


def grouped(rows, columns):
    """{(variant, schedule): {column: [values over seeds]}}, in the sweep's row order."""
    out = {}
    for r in rows:
        key = (r["variant"], r["schedule"])
        cell = out.setdefault(key, {c: [] for c in columns})
        for c in columns:
            if r.get(c) is not None:
                cell[c].append(float(r[c]))
    return out


def fmt(values, digits):
    if not values:
        return "-"
    mean = statistics.fmean(values)
    text = f"{mean:.{digits}f}"
    if len(values) > 1:
        text += f" ± {(max(values) - min(values)) / 2:.{digits}f}"
    return text


def table(title, rows, columns):
    """columns: (key, header, digits)."""
    cells = grouped(rows, [c for c, _, _ in columns])
    lines = [f"### {title}", "", "| variant | schedule | " + " | ".join(h for _, h, _ in columns) + " |",
             "|---|---|" + "---|" * len(columns)]
    data = []
    for (variant, schedule), values in cells.items():
        lines.append(f"| {variant} | {schedule} | " + " | ".join(fmt(values[c], d) for c, _, d in columns) + " |")
        data.append({"variant": variant, "schedule": schedule,
                     **{c: statistics.fmean(v) if v else None for c, v in values.items()},
                     "seeds": max((len(v) for v in values.values()), default=0)})
    return lines, data


def main():
    out = sys.argv[1]
    md, doc = [], {}
    lm = load(os.path.join(out, "lm"))
    if lm:
        ruler = sorted((k for k in lm[0] if k.startswith("ruler_")), key=lambda k: int(k.split("_")[1]))
        cols = [("attention_share", "attention share", 3), ("cache_share_of_transformer", "cache / Transformer's", 3),
                ("train_loss", "train loss", 3), ("ppl", "ppl", 2)] + [(k, f"RULER @{k.split('_')[1]}", 3) for k in ruler]
        lines, doc["lm"] = table("Language modelling (preset small) and RULER", lm, cols)
        md += lines + [""]
    mqar = load(os.path.join(out, "mqar"))
    if mqar:
        pairs = sorted((k for k in mqar[0] if k.startswith("mqar_")), key=lambda k: int(k.split("_")[1]))
        cols = [("attention_share", "attention share", 3)] + [(k, f"MQAR {k.split('_')[1]} pairs", 3) for k in pairs]
        lines, doc["mqar"] = table("MQAR recall (specs/tasks/mqar.yaml)", mqar, cols)
        md += lines + [""]
    if not md:
        print(f"reproduce_table: no finished cells under {out}/lm or {out}/mqar", file=sys.stderr)
        return 1
    with open(os.path.join(out, "table.md"), "w") as f:
        f.write("\n".join(md))
    with open(os.path.join(out, "table.json"), "w") as f:
        json.dump(doc, f, indent=1)
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
