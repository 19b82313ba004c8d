#!/usr/bin/env python3
"""`linac sweep` end to end on the CPU with the tiny preset: a micro grid with every kind of task,
a re-run that skips finished cells, a failing cell that does not stop the others, changed
settings refused, and a SIGTERM that stops the sweep for a re-run to continue.

    sweep_test.py LINAC SPECS_DIR TASK_SAMPLES_DIR WORK_DIR SCENARIO
"""
import csv
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time

LINAC, SPECS, SAMPLES, WORK = (os.path.abspath(p) for p in sys.argv[1:5])
ENV = dict(os.environ, OMP_NUM_THREADS="1")
TRAIN_ARGS = "--batch 2 --seq-len 32 --eval-batches 2 --log-every 1"
# Every task family at tiny sizes: RULER at the tiny preset's 512 tokens (the tasks that fit),
# one example each; a zero-shot sample file; MQAR at 2 pairs.
EVAL_ARGS = f"--examples 1 --mqar-pairs 2 --context 512 --task-dir {SAMPLES}"
TASKS = "ppl,mqar,ruler,arc_easy"


def spec(name):
    return os.path.join(SPECS, name + ".yaml")


def sweep(out, specs, schedules, *extra, steps=2, expect=None, tasks=TASKS, timeout=900):
    args = [LINAC, "sweep", "--specs", ",".join(specs), "--schedules", schedules, "--preset", "tiny",
            "--steps", str(steps), "--out", out, "--tasks", tasks, "--device", "cpu",
            "--train-args", TRAIN_ARGS, "--eval-args", EVAL_ARGS, *extra]
    p = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=timeout)
    if expect is not None:
        assert p.returncode == expect, (f"linac sweep: exit {p.returncode}, expected {expect}\n"
                                        f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
    return p


def results(out):
    with open(os.path.join(out, "results.csv")) as f:
        return {row["cell"]: row for row in csv.DictReader(f)}


def check_in(needle, text, what="output"):
    assert needle in text, f"expected {needle!r} in the {what}:\n{text}"


def metrics_bytes(out, cell):
    with open(os.path.join(out, "cells", cell, "run", "metrics.jsonl"), "rb") as f:
        return f.read()


def micro_sweep(work):
    out = os.path.join(work, "sweep")
    grid = ([spec("gla"), spec("retnet")], "3:1,pure,transformer")  # 2 specs x 2 schedules + a Transformer
    p = sweep(out, *grid, expect=0)
    rows = results(out)
    assert set(rows) == {"gla-3to1", "gla-pure", "retnet-3to1", "retnet-pure", "transformer"}, rows.keys()
    for name, row in rows.items():
        assert row["status"] == "done", row
        for column in ("train_loss", "ppl", "mqar_2", "mqar", "ruler_512", "arc_easy_acc", "arc_easy_acc_norm",
                       "cache_bytes"):
            assert row[column] != "", f"{name}: no {column} in {row}"
        assert float(row["ppl"]) > 1.0, row
    assert rows["gla-3to1"]["attention_share"] == "0.25" and rows["transformer"]["attention_share"] == "1.0", rows
    assert rows["gla-pure"]["attention_share"] == "0.0", rows
    # A hybrid keeps less cache than the Transformer at the sweep's memory context.
    assert int(rows["gla-3to1"]["cache_bytes"]) < int(rows["transformer"]["cache_bytes"]), rows
    assert float(rows["transformer"]["cache_share_of_transformer"]) == 1.0, rows
    with open(os.path.join(out, "results.json")) as f:
        assert len(json.load(f)) == 5
    check_in("[5/5] transformer: done in", p.stdout)
    if importlib.util.find_spec("matplotlib"):
        for plot in ("loss_curves", "recall", "memory_quality"):
            for ext in ("png", "svg"):
                path = os.path.join(out, "plots", f"{plot}.{ext}")
                assert os.path.getsize(path) > 1000, path
    else:
        check_in("plots: not drawn (matplotlib is not installed", p.stdout)

    # A re-run trains nothing again: every cell is reported as done earlier.
    before = metrics_bytes(out, "gla-3to1")
    again = sweep(out, *grid, expect=0)
    assert again.stdout.count("done earlier") == 5, again.stdout
    assert metrics_bytes(out, "gla-3to1") == before


def failure_goes_on(work):
    broken = os.path.join(work, "broken.yaml")
    with open(spec("gla")) as f:
        text = f.read()
    with open(broken, "w") as f:
        f.write(text.replace("recurrence:", "recurrence:\n  no_such_field: 1", 1))
    out = os.path.join(work, "sweep")
    p = sweep(out, [broken, spec("retnet")], "pure", expect=1, tasks="ppl")
    check_in("broken-pure: FAILED in train", p.stdout)
    check_in("[2/2] retnet-pure: done in", p.stdout)
    check_in("1 of 2 cells failed", p.stdout)
    rows = results(out)
    assert rows["broken-pure"]["status"] == "failed" and rows["retnet-pure"]["status"] == "done", rows
    with open(os.path.join(out, "cells", "broken-pure", "cell.json")) as f:
        state = json.load(f)
    assert state["stage"] == "train" and state["exit_code"] != 0, state

    # Other settings in the same folder are refused before anything runs.
    changed = sweep(out, [spec("retnet")], "pure", steps=5, expect=2, tasks="ppl")
    check_in("was run with other settings", changed.stderr, "error")
    check_in("steps: 2 in the sweep, 5 now", changed.stderr, "error")


def stop_and_continue(work):
    out = os.path.join(work, "sweep")
    args = [LINAC, "sweep", "--specs", spec("gated_deltanet"), "--schedules", "3:1", "--preset", "tiny",
            "--steps", "400", "--out", out, "--tasks", "ppl", "--device", "cpu", "--plots", "off",
            "--train-args", TRAIN_ARGS + " --checkpoint-every 5"]
    proc = subprocess.Popen(args, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ckpt_dir = os.path.join(out, "cells", "gated_deltanet-3to1", "run")
    deadline = time.time() + 240
    while not os.path.exists(os.path.join(ckpt_dir, "ckpt-5.pt")):
        assert time.time() < deadline and proc.poll() is None, "the sweep never wrote a checkpoint"
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 143, f"exit {proc.returncode}\n{stdout}\n{stderr}"
    check_in("stopped (signal 15)", stdout)
    with open(os.path.join(out, "cells", "gated_deltanet-3to1", "cell.json")) as f:
        assert json.load(f)["status"] == "stopped"

    p = subprocess.run(args[:args.index("--steps") + 1] + ["400"] + args[args.index("--steps") + 2:],
                       env=ENV, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    with open(os.path.join(out, "cells", "gated_deltanet-3to1", "train.log")) as f:
        log = f.read()
    check_in("resum", log.lower(), "train.log")
    assert results(out)["gated_deltanet-3to1"]["steps_done"] == "400"


SCENARIOS = {f.__name__: f for f in (micro_sweep, failure_goes_on, stop_and_continue)}

if __name__ == "__main__":
    name = sys.argv[5]
    work = os.path.join(WORK, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    start = time.time()
    SCENARIOS[name](work)
    print(f"{name}: passed in {time.time() - start:.1f} s")
