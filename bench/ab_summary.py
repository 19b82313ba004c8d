#!/usr/bin/env python3
"""Medians of the kernel lab's A / B timings over rounds (bench/run_h200.sh ab with AB_ROUNDS):
each binary's log holds its timing tables once per round (separated by "== round N" lines); every
(row, column) is reduced to its median over the rounds, and the table gives before, after, their
ratio and each side's spread (max / min - 1), so a change smaller than the spread reads as noise.

usage: python3 bench/ab_summary.py BEFORE_LOG AFTER_LOG
           [--rows FILE --before-commit SHA --after-commit SHA [--gpu NAME] [--field KEY=VALUE ...]]

--rows appends every round's rows of both logs to FILE as JSON lines (bench/lab_rows.py's rows,
with "lab": "before" / "after", "round" and each --field), the raw rows bench/results/ keeps.
"""
import argparse
import json
import os
import re
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


def round_rows(path, commit, gpu):
    """Every round's rows of one log as bench/lab_rows.py writes them, each with its round."""
    with open(path) as f:
        parts = re.split(r"^== round (\d+)\n", f.read(), flags=re.M)
    for i in range(1, len(parts), 2):
        for row in lab_rows.rows(parts[i + 1].splitlines(), commit, gpu):
            yield dict(row, round=int(parts[i]))


def spread(xs):
    return max(xs) / min(xs) - 1 if min(xs) > 0 else float("nan")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--rows", help="append both logs' rows to this JSON-lines file")
    ap.add_argument("--before-commit")
    ap.add_argument("--after-commit")
    ap.add_argument("--gpu", default="NVIDIA H200")
    ap.add_argument("--field", action="append", default=[], metavar="KEY=VALUE",
                    help="a field for every row (a number where it reads as one), e.g. call=2")
    args = ap.parse_args()
    if args.rows:
        if not (args.before_commit and args.after_commit):
            ap.error("--rows needs --before-commit and --after-commit")
        extra = {}
        for item in args.field:
            key, sep, value = item.partition("=")
            if not sep:
                ap.error(f"--field {item}: KEY=VALUE")
            try:
                extra[key] = int(value)
            except ValueError:
                extra[key] = value
        with open(args.rows, "a") as out:
            for lab, path, commit in (("before", args.before, args.before_commit),
                                      ("after", args.after, args.after_commit)):
                for row in round_rows(path, commit, args.gpu):
                    out.write(json.dumps(dict(row, lab=lab, **extra)) + "\n")
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
