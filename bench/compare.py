"""Merges `linac bench --json` lines and fla_bench.py lines into the side-by-side table."""
import json
import sys


def main(linac_path, *fla_paths):
    linac = {}
    for line in open(linac_path):
        r = json.loads(line)
        linac[(r["variant"], r["op"])] = r
    fla = {}  # later files override earlier ones per variant (e.g. a rerun with the guard bypassed)
    for fla_path in fla_paths:
        for line in open(fla_path):
            r = json.loads(line)
            fla[r["variant"]] = r
    names = sorted({v for v, _ in linac} | set(fla))
    print(f"{'variant':16}{'linac fwd':>11}{'fla fwd':>10}{'ratio':>7}{'linac f+b':>11}{'fla f+b':>10}{'ratio':>7}"
          f"{'step':>9}{'floor f':>9}{'floor fb':>9}")
    def ms(x):
        return f"{x:.3f}" if isinstance(x, (int, float)) else "-"
    for v in names:
        lf = (linac.get((v, "fwd")) or {}).get("median_ms")
        lb = (linac.get((v, "fwd+bwd")) or {}).get("median_ms")
        st = (linac.get((v, "step")) or {}).get("median_ms")
        ff = fla.get(v, {}).get("fwd_ms")
        fb = fla.get(v, {}).get("fwdbwd_ms")
        rf = f"{ff / lf:.2f}" if lf and ff else "-"
        rb = f"{fb / lb:.2f}" if lb and fb else "-"
        if fla.get(v, {}).get("guard_bypassed") and fb:
            rb += "*"
        floor_f = (linac.get((v, "fwd")) or {}).get("floor_ms")
        floor_b = (linac.get((v, "fwd+bwd")) or {}).get("floor_ms")
        print(f"{v:16}{ms(lf):>11}{ms(ff):>10}{rf:>7}{ms(lb):>11}{ms(fb):>10}{rb:>7}{ms(st):>9}{ms(floor_f):>9}{ms(floor_b):>9}")
        for key in ("fwd_error", "fwdbwd_error"):
            if key in fla.get(v, {}):
                print(f"  fla {key}: {fla[v][key]}")
    print("ratio = fla / linac (> 1: linac faster)")
    if any(r.get("guard_bypassed") for r in fla.values()):
        print("* fla's gated backward timed with its Hopper guard bypassed (wrong results on this Triton, "
              "bench/fla_guard.py)")


if __name__ == "__main__":
    main(sys.argv[1], *sys.argv[2:])
