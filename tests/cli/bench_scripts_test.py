#!/usr/bin/env python3
"""The benchmark scripts that read `linac train`'s run directories, on real CPU runs of a tiny
hybrid: bench/loss_agreement.py (the fused LM head + loss against full logits, issue 14) and
bench/train_summary.py (issue 14's throughput rows and MFU).

    bench_scripts_test.py LINAC SOURCE_DIR WORK_DIR

Two runs of the same seed and data, `--fused-loss on` and `off`, must agree step by step; a copy of
one with a loss moved by 30% must not; the summary's row must carry the run's own model, vocabulary,
T, batch and a positive MFU from bench/mfu.py's formula.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import linac_cli

LINAC, SOURCE, WORK = (os.path.abspath(p) for p in sys.argv[1:4])
SPEC = os.path.join(SOURCE, "specs", "gated_deltanet.yaml")
BENCH = os.path.join(SOURCE, "bench")
STEPS = 6
SMALL = ["--preset", "tiny", "--schedule", "3:1", "--batch", "2", "--seq-len", "32", "--device", "cpu",
         "--log-every", "1", "--eval-batches", "1", "--steps", str(STEPS)]


def script(name, *args):
    return subprocess.run([sys.executable, os.path.join(BENCH, name), *args], capture_output=True, text=True,
                          timeout=60)


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    runs = {}
    for fused in ("on", "off"):
        out = os.path.join(WORK, f"run-{fused}")
        p = linac_cli.run(LINAC, "train", SPEC, *SMALL, "--fused-loss", fused, "--out", out, expect=0)
        runs[fused] = out
        params_line = next(line for line in p.stdout.splitlines() + p.stderr.splitlines() if "parameters" in line)

    on, off = (os.path.join(runs[f], "metrics.jsonl") for f in ("on", "off"))
    p = script("loss_agreement.py", on, off, "--json", os.path.join(WORK, "agree.jsonl"))
    assert p.returncode == 0 and f"{STEPS} steps" in p.stdout and "agree at tol" in p.stdout, p.stdout + p.stderr
    row = json.loads(open(os.path.join(WORK, "agree.jsonl")).read())
    assert row["agree"] and row["steps"] == STEPS and row["max_rel_diff"] < 0.02, row

    moved = os.path.join(WORK, "moved.jsonl")
    with open(off) as src, open(moved, "w") as dst:
        for line in src:
            r = json.loads(line)
            if r.get("step") == 3 and "loss" in r:
                r["loss"] *= 1.3
            dst.write(json.dumps(r) + "\n")
    p = script("loss_agreement.py", on, moved)
    assert p.returncode == 1 and "DISAGREE" in p.stdout and "(step 3)" in p.stdout, p.stdout + p.stderr

    summary = os.path.join(WORK, "summary")
    os.makedirs(summary)
    shutil.copy(on, os.path.join(summary, "linac_metrics_gdn.jsonl"))
    shutil.copy(os.path.join(runs["on"], "model.json"), os.path.join(summary, "linac_model_gdn.json"))
    shutil.copy(os.path.join(runs["on"], "config.json"), os.path.join(summary, "linac_config_gdn.json"))
    with open(os.path.join(summary, "linac_train_gdn.log"), "w") as f:
        f.write(params_line + "\n")
    rows_path = os.path.join(WORK, "rows.jsonl")
    p = script("train_summary.py", summary, "--rows", rows_path, "--commit", "test")
    assert p.returncode == 0 and "gated_deltanet-3to1-tiny" in p.stdout, p.stdout + p.stderr
    rows = [json.loads(line) for line in open(rows_path)]
    assert len(rows) == 1, rows
    r = rows[0]
    params = int(re.search(r"\| (\d+) parameters", params_line).group(1))
    assert r["bench"] == "train" and r["backend"] == "linac" and r["model"] == "gated_deltanet-3to1-tiny", r
    assert r["T"] == 32 and r["batch"] == 2 and r["vocab"] == 256 and r["commit"] == "test", r
    assert r["attention_layers"] == 1 and r["mfu"] > 0 and r["tokens_per_s"] > 0, r
    assert r["params"] == params, (r, params_line)
    print("bench scripts: loss agreement and training summary on real tiny runs OK")


if __name__ == "__main__":
    main()
