#!/usr/bin/env python3
"""The benchmark scripts that read linac's own output, on real CPU runs: bench/loss_agreement.py
(the fused LM head + loss against full logits, issue 14) and bench/train_summary.py (issue 14's
throughput rows and MFU) on `linac train`'s run directories of a tiny hybrid, and bench/compare.py
(issue 11's side-by-side table) on `linac bench --json` rows at two shapes.

    bench_scripts_test.py LINAC SOURCE_DIR WORK_DIR

Two runs of the same seed and data, `--fused-loss on` and `off`, must agree step by step; a copy of
one with a loss moved by 30% must not; the summary's row must carry the run's own model, vocabulary,
T, batch and a positive MFU from bench/mfu.py's formula. compare.py gets fla rows written here at
known multiples of linac's times (fla is not installed on CPU machines) and must print one table
per shape with those ratios and their geometric mean, an fla row of a shape linac did not run
in a table of its own.
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
    check_compare()
    check_lab_rows()
    check_ab_summary()
    print("bench scripts: loss agreement, training summary, the fla table, the lab's rows and its A / B OK")


def check_compare():
    linac_rows = os.path.join(WORK, "linac_bench.jsonl")
    shapes = ("1,64,1,16", "1,64,2,16")
    for shape in shapes:
        linac_cli.run(LINAC, "bench", os.path.join(SOURCE, "specs", "retnet.yaml"), "--device", "cpu", "--shape", shape,
                      "--iters", "2", "--warmup", "1", "--json", linac_rows, expect=0)
    timed = {}
    for line in open(linac_rows):
        r = json.loads(line)
        timed[(r["H"], r["op"])] = r["median_ms"]
    fla_rows = os.path.join(WORK, "fla_bench.jsonl")
    with open(fla_rows, "w") as f:
        for H, fwd, fb in ((1, 2.0, 3.0), (2, 0.5, 0.5)):  # fla at these multiples of linac's times
            f.write(json.dumps(dict(variant="retnet", backend="fla", B=1, T=64, H=H, D=16, dtype="bf16",
                                    fwd_ms=fwd * timed[(H, "fwd")], fwdbwd_ms=fb * timed[(H, "fwd+bwd")])) + "\n")
        f.write(json.dumps(dict(variant="gla", backend="fla", B=1, T=64, H=4, D=16, dtype="bf16",
                                fwd_ms=1.0, fwdbwd_ms=2.0)) + "\n")
    p = script("compare.py", linac_rows, fla_rows)
    assert p.returncode == 0, p.stdout + p.stderr
    tables = p.stdout.split("\n\n")
    assert [t.splitlines()[0] for t in tables] == ["B=1 T=64 H=1 D=16", "B=1 T=64 H=2 D=16", "B=1 T=64 H=4 D=16"], p.stdout
    row = next(line for line in tables[0].splitlines() if line.startswith("retnet"))
    assert re.search(r"\s2\.00\s.*\s3\.00\s", row), row
    assert "fwd ratios over 1 variants: 2.00" in tables[0] and "fwd+bwd ratios over 1 variants: 3.00" in tables[0], tables[0]
    assert "fwd+bwd ratios over 1 variants: 0.50" in tables[1], tables[1]
    gla = next(line for line in tables[2].splitlines() if line.startswith("gla"))
    assert gla.split()[1] == "-" and "ratios" not in tables[2].split("ratio = ")[0], tables[2]


def check_lab_rows():
    """bench/lab_rows.py on timing rows printed with the kernel lab's own formats (lab_bench.cu's
    bench() and benchBackward(); the lab needs a GPU), names longer than its 30 padded columns
    included."""
    fwd = "%-30s %-18s %10s %10s %10s %10s %10s %10s %10s %10s %10s %10s\n"
    bwd = "%-30s %10s %10s %10s %10s %10s %10s %8s\n"
    log = (fwd % ("kind", "B,T,H,D", "default", "column", "overlap", "early", "inline", "blocks32",
                  "split", "whole", "mma.sync", "fla")
           + fwd % ("RetNet   additive-fixed", "2,16384,4,128", "0.350", "-", "-", "-", "0.743", "0.401",
                    "0.210", "0.150", "1.900", "-")
           + bwd % ("kind", "bwd ms", "hopper bwd", "alt", "bwd no-dg", "fwd+bwd", "fla f+b", "ratio")
           + bwd % ("sGLA     additive-scalar T16384", "3.000", "2.000", "2.400", "1.500", "2.500", "-", "-")
           + bwd % ("LinAttn  additive-none T16384", "3.000", "2.900", "0.700", "0.450", "0.760", "-", "-")
           + bwd % ("RWKV-6   additive-diag-bonus D256", "9.000", "4.000", "-", "4.000", "5.000", "-", "-")
           + bwd % ("GDN 340m heads", "6.000", "3.000", "-", "2.500", "3.500", "-", "-"))
    path = os.path.join(WORK, "lab_bench.log")
    with open(path, "w") as f:
        f.write(log)
    p = script("lab_rows.py", path, "--commit", "test")
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [json.loads(line) for line in p.stdout.splitlines()]
    by = {(r["variant"], r["kind"], r["backend"].split(" ")[0], r["T"], r["D"]): r for r in rows}
    assert by[("retnet", "additive-fixed", "linac-default", 16384, 128)]["fwd_ms"] == 0.35, rows
    assert by[("retnet", "additive-fixed", "linac-inline-scores", 16384, 128)]["fwd_ms"] == 0.743, rows
    assert by[("retnet", "additive-fixed", "linac-state-blocks-of-32", 16384, 128)]["fwd_ms"] == 0.401, rows
    assert by[("retnet", "additive-fixed", "linac-split-forward", 16384, 128)]["fwd_ms"] == 0.21, rows
    assert by[("retnet", "additive-fixed", "linac-whole-sequences", 16384, 128)]["fwd_ms"] == 0.15, rows
    # 'alt' of the additive rule: its state passes in two launches, without d_g where the decay is
    # not learned
    assert by[("mamba2", "additive-scalar", "linac-two-state-launches", 16384, 128)]["bwd_ms"] == 2.4, rows
    assert by[("linear_attention", "additive-none", "linac-two-state-launches", 16384, 128)]["bwd_nodg_ms"] == 0.7, rows
    assert by[("retnet", "additive-fixed", "linac-mma.sync", 16384, 128)]["fwd_ms"] == 1.9, rows
    assert by[("mamba2", "additive-scalar", "linac-default", 16384, 128)]["fwdbwd_ms"] == 2.5, rows
    wide = by[("rwkv6", "additive-diag-bonus", "linac-default", 4096, 256)]
    assert wide["B"] == 8 and wide["H"] == 8, wide
    gdn = by[("gated_deltanet", "delta-scalar", "linac-default", 4096, 256)]
    assert gdn["dv"] == 512 and gdn["B"] == 4, gdn


def check_ab_summary():
    """bench/ab_summary.py over two rounds of two labs (run_h200.sh ab's logs): the medians' table,
    and --rows's raw rows (every round of both logs, with lab, round and the --field values)."""
    bwd = "%-30s %10s %10s %10s %10s %10s %10s %8s\n"
    header = bwd % ("kind", "bwd ms", "hopper bwd", "alt", "bwd no-dg", "fwd+bwd", "fla f+b", "ratio")
    paths = {}
    for lab, times in (("before", ("10.4", "10.2")), ("after", ("8.8", "8.6"))):
        paths[lab] = os.path.join(WORK, f"ab_{lab}.log")
        with open(paths[lab], "w") as f:
            for n, t in enumerate(times, 1):
                f.write(f"== round {n}\n" + header
                        + bwd % ("RWKV-6   additive-diag-bonus D256", "14.4", t, "-", "7.9", "10.3", "-", "-"))
    out = os.path.join(WORK, "ab_rows.jsonl")
    p = script("ab_summary.py", paths["before"], paths["after"], "--rows", out, "--before-commit", "b0",
               "--after-commit", "a1", "--field", "call=2", "--field", "note=x")
    assert p.returncode == 0, p.stdout + p.stderr
    line = next(l for l in p.stdout.splitlines() if "linac-default" in l and " bwd_ms " in l)
    assert "10.300" in line and "8.700" in line and "0.845" in line, line  # medians of the rounds, after / before
    with open(out) as f:
        rows = [json.loads(l) for l in f]
    hopper = [r for r in rows if r["backend"] == "linac-default" and "bwd_ms" in r]
    assert sorted((r["lab"], r["round"], r["bwd_ms"], r["commit"]) for r in hopper) == [
        ("after", 1, 8.8, "a1"), ("after", 2, 8.6, "a1"), ("before", 1, 10.4, "b0"), ("before", 2, 10.2, "b0")], hopper
    assert all(r["call"] == 2 and r["note"] == "x" and r["D"] == 256 for r in rows), rows


if __name__ == "__main__":
    main()
