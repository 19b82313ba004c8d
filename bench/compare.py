"""Merges `linac bench --json` lines (or the kernel lab's, from bench/lab_rows.py: its default
dispatch's fwd and fwd+bwd) and fla_bench.py lines into side-by-side tables, one per shape
(B, T, H, D), each closed by the geometric mean of its fla / linac ratios (issue 11's measure).

Usage: python3 bench/compare.py LINAC.jsonl FLA.jsonl [FLA2.jsonl ...]
(a later fla file overrides an earlier one's row for the same variant and shape, e.g. a rerun)
"""
import json
import math
import sys


def shape_of(r):
    """(B, T, H, D); the delta rules' wide heads (rows with dk and dv) are their own shape, D "dkxdv"."""
    return (r["B"], r["T"], r["H"], r["D"] if "dv" not in r else f"{r['dk']}x{r['dv']}")


def rows(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def ms(x):
    return f"{x:.3f}" if isinstance(x, (int, float)) else "-"


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def table(shape, linac, fla):
    B, T, H, D = shape
    print(f"B={B} T={T} H={H} D={D}")
    print(f"{'variant':16}{'linac fwd':>11}{'fla fwd':>10}{'ratio':>7}{'linac f+b':>11}{'fla f+b':>10}{'ratio':>7}"
          f"{'step':>9}{'floor f':>9}{'floor fb':>9}")
    names = sorted({v for v, _ in linac} | set(fla))
    ratios = {"fwd": [], "fwd+bwd": []}
    for v in names:
        lf = (linac.get((v, "fwd")) or {}).get("median_ms")
        lb = (linac.get((v, "fwd+bwd")) or {}).get("median_ms")
        st = (linac.get((v, "step")) or {}).get("median_ms")
        ff = fla.get(v, {}).get("fwd_ms")
        fb = fla.get(v, {}).get("fwdbwd_ms")
        rf = f"{ff / lf:.2f}" if lf and ff else "-"
        rb = f"{fb / lb:.2f}" if lb and fb else "-"
        if lf and ff:
            ratios["fwd"].append(ff / lf)
        if lb and fb:
            ratios["fwd+bwd"].append(fb / lb)
        if fla.get(v, {}).get("guard_bypassed") and fb:
            rb += "*"
        floor_f = (linac.get((v, "fwd")) or {}).get("floor_ms")
        floor_b = (linac.get((v, "fwd+bwd")) or {}).get("floor_ms")
        print(f"{v:16}{ms(lf):>11}{ms(ff):>10}{rf:>7}{ms(lb):>11}{ms(fb):>10}{rb:>7}{ms(st):>9}{ms(floor_f):>9}{ms(floor_b):>9}")
        for key in ("fwd_error", "fwdbwd_error"):
            if key in fla.get(v, {}):
                print(f"  fla {key}: {fla[v][key]}")
    for op, xs in ratios.items():
        g = geomean(xs)
        if g is not None:
            print(f"geometric mean of the {op} ratios over {len(xs)} variants: {g:.2f} "
                  f"(min {min(xs):.2f}, max {max(xs):.2f})")
    return any(r.get("guard_bypassed") for r in fla.values())


# bench/lab_rows.py's rows of the kernel lab's default dispatch: its fwd and fwd+bwd columns
LAB_FIELDS = {"fwd_ms": "fwd", "fwdbwd_ms": "fwd+bwd"}


def linac_ops(r):
    """(op, row with median_ms) pairs of a `linac bench --json` row or a lab_rows.py row."""
    if "op" in r:
        return [(r["op"], r)]
    if not r.get("backend", "").startswith("linac-default"):
        return []
    return [(op, dict(r, median_ms=r[field])) for field, op in LAB_FIELDS.items() if field in r]


def main(linac_path, *fla_paths):
    linac = {}  # shape -> (variant, op) -> row
    for r in rows(linac_path):
        for op, row in linac_ops(r):
            linac.setdefault(shape_of(r), {})[(r["variant"], op)] = row
    fla = {}  # shape -> variant -> row
    for path in fla_paths:
        for r in rows(path):
            fla.setdefault(shape_of(r), {})[r["variant"]] = r
    bypassed = False
    for i, shape in enumerate(sorted(set(linac) | set(fla), key=str)):
        if i:
            print()
        bypassed |= table(shape, linac.get(shape, {}), fla.get(shape, {}))
    print("ratio = fla / linac (> 1: linac faster)")
    if bypassed:
        print("* fla's gated backward timed with its Hopper guard bypassed (wrong results on this Triton, "
              "bench/fla_guard.py)")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    main(sys.argv[1], *sys.argv[2:])
