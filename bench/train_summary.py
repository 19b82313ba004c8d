"""Training throughput: linac's runs beside fla's layers (issue 14's rows and table).

`python3 train_summary.py DIR [--rows FILE] [--commit C] [--gpu NAME]` reads, for each linac run
NAME, DIR/linac_metrics_NAME.jsonl, DIR/linac_model_NAME.json and DIR/linac_config_NAME.json (the
run's model.json and config.json: preset, schedule, vocabulary, batch, T) and DIR/linac_train_NAME.log
(for the parameter count), and every row of
DIR/fla_train.jsonl (bench/fla_model_bench.py). It prints a markdown table and, with --rows,
appends one JSON row per model and backend in issue 14's format. linac's tokens/s is the median
over logged steps after the first two (warm-up: allocator growth, first launches); MFU is
bench/mfu.py's formula for both backends, with each run's own vocabulary, width and attention
layers.
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mfu import model_flops_per_token, mfu  # noqa: E402

WARMUP_STEPS = 2


def attention_layers(schedule, layers):
    """Full-attention layers of a schedule: "a:b" (a linear to b attention), "pure", "transformer"."""
    if schedule == "pure":
        return 0
    if schedule == "transformer":
        return layers
    linear, attn = (int(x) for x in schedule.split(":"))
    return layers * attn // (linear + attn)


def linac_rows(d):
    for path in sorted(glob.glob(os.path.join(d, "linac_metrics_*.jsonl"))):
        name = re.sub(r"^linac_metrics_|\.jsonl$", "", os.path.basename(path))
        log = open(os.path.join(d, f"linac_train_{name}.log")).read()
        model = json.load(open(os.path.join(d, f"linac_model_{name}.json")))
        config = json.load(open(os.path.join(d, f"linac_config_{name}.json")))
        preset, schedule = model["preset"], model["schedule"]["text"]
        params = int(re.search(r"\| (\d+) parameters", log).group(1))
        steps = [json.loads(line) for line in open(path) if '"tokens_per_s"' in line]
        row = dict(bench="train", backend="linac",
                   model=f"{model['variant']}-{schedule.replace(':', 'to')}-{preset['name']}",
                   vocab=model["vocab"], T=config["seq_len"], batch=config["batch"] * config["accumulation"],
                   params=params,
                   losses=[round(s["loss"], 3) for s in steps])
        timed = [s for s in steps if s["step"] > WARMUP_STEPS]
        if not timed:
            row["error"] = "no timed steps"
            yield row
            continue
        tps = statistics.median(s["tokens_per_s"] for s in timed)
        n_attn = attention_layers(schedule, preset["layers"])
        row.update(tokens_per_s=tps, attention_layers=n_attn)
        peaks = [s["peak_allocated_bytes"] for s in steps if "peak_allocated_bytes" in s]
        if peaks:
            row["peak_mem_gb"] = max(peaks) / 2**30
        row["_flops"] = (params, model["vocab"], preset["hidden"], n_attn)
        yield row


def fla_rows(d):
    path = os.path.join(d, "fla_train.jsonl")
    if os.path.exists(path):
        for line in open(path):
            if line.strip():
                r = json.loads(line)
                r.setdefault("bench", "train")
                preset = {1024: "340m", 2048: "1.3b"}.get(r.get("hidden"), f"hidden{r.get('hidden')}")
                r.setdefault("model", f"{r['variant']}-{r.get('schedule', '3:1').replace(':', 'to')}-{preset}")
                r.setdefault("T", r.get("seq_len"))
                if "peak_mem_gib" in r:
                    r["peak_mem_gb"] = r.pop("peak_mem_gib")
                yield r


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dir", nargs="?", default="out")
    p.add_argument("--rows", help="append issue 14's JSON rows to this file")
    p.add_argument("--commit", default="", help="linac's commit, recorded in each row")
    p.add_argument("--gpu", default="", help="the GPU's name, recorded in each row")
    args = p.parse_args()
    rows = list(linac_rows(args.dir)) + list(fla_rows(args.dir))
    for r in rows:
        if r["backend"] == "linac":
            if "_flops" in r:
                params, vocab, hidden, n_attn = r.pop("_flops")
                r["mfu"] = mfu(model_flops_per_token(params, vocab, hidden, n_attn, r["T"]), r["tokens_per_s"])
            r["commit"] = args.commit
        if args.gpu:
            r.setdefault("gpu", args.gpu)
    print("| model | backend | vocab | T | parameters | tokens/s | MFU | peak | note |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r.get("model", r.get("variant", "")), r["backend"])):
        tps = f"{r['tokens_per_s']:,.0f}" if "tokens_per_s" in r else "-"
        m = f"{100 * r['mfu']:.1f}%" if "mfu" in r else "-"
        peak = f"{r['peak_mem_gb']:.1f} GiB" if "peak_mem_gb" in r else "-"
        params = f"{r['params']:,}" if r.get("params") else "-"
        print(f"| {r.get('model', r.get('variant'))} | {r['backend']} | {r.get('vocab', '-')} | {r.get('T', '-')} "
              f"| {params} | {tps} | {m} | {peak} | {r.get('error', '')} |")
    if args.rows:
        with open(args.rows, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
