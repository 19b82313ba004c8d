#!/usr/bin/env python3
"""Medians of the kernel lab's A / B timings over rounds (bench/run_h200.sh ab with AB_ROUNDS):
each binary's log holds its timing tables once per round (separated by "== round N" lines); every
(row, column) is reduced to its median over the rounds, and the table gives before, after, their
ratio and each side's spread (max / min - 1), so a change smaller than the spread reads as noise.

usage: python3 bench/ab_summary.py BEFORE_LOG AFTER_LOG
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lab_rows  # noqa: E402  (the lab's table parser)

FIELDS = ("fwd_ms", "bwd_ms", "bwd_nodg_ms", "fwdbwd_ms")


def rounds(path):
    """The log's timing rows per round: {key: [value of round 1, value of round 2, ...]}."""
    with open(path) as f:
        text = f.read()
    chunks = [c for c in text.split("== round ") if c.strip()]
    values = {}
    for chunk in chunks:
        for row in lab_rows.rows(chunk.splitlines(), "-", "-"):
            for field in FIELDS:
                if field in row:
                    shape = f'{row["B"]},{row["T"]},{row["H"]}'
                    key = (row["variant"], row["kind"], shape, row.get("dv", row["D"]), row["backend"], field)
                    values.setdefault(key, []).append(row[field])
    return values


def spread(xs):
    return max(xs) / min(xs) - 1 if min(xs) > 0 else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    args = ap.parse_args()
    before, after = rounds(args.before), rounds(args.after)
    print(f"{'variant':15} {'kind':20} {'B,T,H':>10} {'dv':>4} {'backend':34} {'field':11} "
          f"{'before':>8} {'after':>8} {'a/b':>6} {'spread b':>8} {'spread a':>8} {'n':>3}")
    for key in sorted(set(before) & set(after)):
        b, a = before[key], after[key]
        mb, ma = statistics.median(b), statistics.median(a)
        variant, kind, shape, dv, backend, field = key
        print(f"{variant:15} {kind:20} {shape:>10} {dv:>4} {backend[:34]:34} {field:11} {mb:8.3f} {ma:8.3f} "
              f"{ma / mb:6.3f} {spread(b):8.1%} {spread(a):8.1%} {min(len(a), len(b)):3d}")


if __name__ == "__main__":
    main()
