"""Table of training throughput: linac's 340m runs (metrics files) beside fla's layers (JSON lines).

`python3 train_summary.py DIR` reads DIR/linac_metrics_<variant>.jsonl, DIR/linac_train_<variant>.log
(for the parameter count) and DIR/fla_train.jsonl, and prints a markdown table. linac's tokens/s is
the median over logged steps after the first two (warm-up: allocator growth, first launches).
"""
import glob
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mfu import model_flops_per_token, mfu  # noqa: E402

HIDDEN, VOCAB, SEQ_LEN, N_ATTN = 1024, 256, 4096, 6  # the 340m preset at 3:1, byte vocabulary
WARMUP_STEPS = 2


def linac_rows(d):
    for path in sorted(glob.glob(os.path.join(d, "linac_metrics_*.jsonl"))):
        variant = re.sub(r"^linac_metrics_|\.jsonl$", "", os.path.basename(path))
        log = open(os.path.join(d, f"linac_train_{variant}.log")).read()
        params = int(re.search(r"\| (\d+) parameters", log).group(1))
        steps = [json.loads(l) for l in open(path) if '"tokens_per_s"' in l]
        timed = [s["tokens_per_s"] for s in steps if s["step"] > WARMUP_STEPS]
        if not timed:
            yield dict(backend="linac", variant=variant, params=params, error="no timed steps")
            continue
        tps = statistics.median(timed)
        yield dict(backend="linac", variant=variant, params=params, tokens_per_s=tps,
                   mfu=mfu(model_flops_per_token(params, VOCAB, HIDDEN, N_ATTN, SEQ_LEN), tps),
                   losses=[round(s["loss"], 3) for s in steps])


def fla_rows(d):
    path = os.path.join(d, "fla_train.jsonl")
    if os.path.exists(path):
        for line in open(path):
            if line.strip():
                yield json.loads(line)


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "out"
    rows = list(linac_rows(d)) + list(fla_rows(d))
    print("| model (340m, 3:1, B=4 T=4096 bf16) | backend | parameters | tokens/s | MFU | note |")
    print("|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["variant"], r["backend"])):
        tps = f"{r['tokens_per_s']:,.0f}" if "tokens_per_s" in r else "-"
        m = f"{100 * r['mfu']:.1f}%" if "mfu" in r else "-"
        note = r.get("error", "")
        print(f"| {r['variant']} | {r['backend']} | {r['params']:,} | {tps} | {m} | {note} |")


if __name__ == "__main__":
    main()
