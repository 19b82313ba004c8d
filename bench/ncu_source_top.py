#!/usr/bin/env python3
"""Summarises ncu's source page (`ncu -i REPORT --page source --csv --print-source sass`): the SASS
instructions with the most warp-stall samples, and the samples summed by opcode, so a kernel's time
can be read off per instruction without the ncu GUI.

usage: python3 bench/ncu_source_top.py SOURCE.csv [--top N]
"""
import argparse
import collections
import csv
import sys


def column(header, *needles):
    for i, name in enumerate(header):
        if all(n.lower() in name.lower() for n in needles):
            return i
    return None


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=25)
    args = ap.parse_args()
    with open(args.csv, newline="") as f:
        rows = [r for r in csv.reader(f) if r]
    start = next((i for i, r in enumerate(rows) if column(r, "source") is not None and len(r) > 3), None)
    if start is None:
        sys.exit(f"{args.csv}: no source table (ncu's output begins: {rows[:2]})")
    header, body = rows[start], rows[start + 1:]
    src = column(header, "source")
    samples = column(header, "sampling", "all") or column(header, "stall", "sampl")
    executed = column(header, "instructions executed")
    if samples is None:
        sys.exit(f"{args.csv}: no warp-stall sampling column in {header}")
    total = sum(number(r[samples]) for r in body if len(r) > samples) or 1.0
    by_op = collections.Counter()
    for r in body:
        if len(r) > samples and r[src].strip():
            op = r[src].split()[0] if not r[src].startswith("@") else r[src].split()[1]
            by_op[op.split(".")[0]] += number(r[samples])
    print(f"{sum(1 for _ in body)} SASS lines, {total:.0f} stall samples")
    print("samples by opcode:")
    for op, n in by_op.most_common(12):
        print(f"  {100 * n / total:5.1f}%  {op}")
    print(f"top {args.top} instructions:")
    ranked = sorted((r for r in body if len(r) > samples), key=lambda r: -number(r[samples]))
    for r in ranked[:args.top]:
        ex = f" exec {r[executed]}" if executed is not None and len(r) > executed else ""
        print(f"  {100 * number(r[samples]) / total:5.1f}%{ex}  {r[src].strip()[:90]}")


if __name__ == "__main__":
    main()
