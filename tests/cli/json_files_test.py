#!/usr/bin/env python3
"""The JSON files linac writes and reads back (compile's manifest.json, train's model.json,
config.json and metrics.jsonl, eval's eval.jsonl, bench --json) with awkward strings in them:
quotes, backslashes, a tab and another control character, non-ASCII letters. Every file must parse
with Python's json module and give the string back exactly, and linac must read its own files back
(resume and eval from a run directory whose path holds those characters).

    json_files_test.py LINAC SPECS_DIR WORK_DIR SCENARIO
"""
import json
import os
import shutil
import sys
import time

import linac_cli

LINAC, SPECS, WORK = (os.path.abspath(p) for p in sys.argv[1:4])
# A folder name no hand-written escaper gets right: " \ tab, \x01, and UTF-8 beyond ASCII.
AWKWARD = 'q"uote \\back\\slash\ttab\x01ctl \u00fcber \u2713'
SMALL = ["--preset", "tiny", "--batch", "2", "--seq-len", "32", "--device", "cpu", "--log-every", "1",
         "--eval-batches", "1"]


def linac(*args, timeout=240):
    return linac_cli.run(LINAC, *args, expect=0, timeout=timeout)


def load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def load_lines(path):
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    assert lines, f"{path} is empty"
    return [json.loads(line) for line in lines]


def awkward_spec(work):
    """gated_deltanet.yaml, unchanged (so its built kernels apply), under an awkward name."""
    folder = os.path.join(work, AWKWARD)
    os.makedirs(folder)
    spec = os.path.join(folder, 'g"d\\\u2713.yaml')
    shutil.copyfile(os.path.join(SPECS, "gated_deltanet.yaml"), spec)
    return folder, spec


def compile_manifest(work):
    folder, spec = awkward_spec(work)
    out = os.path.join(folder, "generated")
    linac("compile", spec, "--out", out)
    manifest = load(os.path.join(out, "gated_deltanet", "manifest.json"))
    at = spec.rfind("specs/")
    assert manifest["spec"] == (spec[at:] if at >= 0 else os.path.basename(spec)), manifest
    assert manifest["name"] == "gated_deltanet" and manifest["kind"] == "linear", manifest
    assert [i["name"] for i in manifest["inputs"]][:3] == ["q", "k", "v"], manifest
    assert manifest["files"][2] == "gated_deltanet_cuda.cu", manifest


def run_files(work):
    folder, spec = awkward_spec(work)
    run = os.path.join(folder, "run \u00e9")
    linac("train", spec, *SMALL, "--steps", "2", "--checkpoint-every", "1", "--out", run)
    model = load(os.path.join(run, "model.json"))
    assert model["spec"]["source"] == spec, model["spec"]
    config = load(os.path.join(run, "config.json"))
    assert config["out_dir"] == run, config["out_dir"]
    assert [m["step"] for m in load_lines(os.path.join(run, "metrics.jsonl")) if "loss" in m] == [1, 2]
    # linac reads its own files back: a resume (config.json, model.json, the checkpoint's
    # manifest) and an evaluation from the copies model.json names.
    linac("train", *SMALL, "--steps", "3", "--resume", "--out", run)
    assert [m["step"] for m in load_lines(os.path.join(run, "metrics.jsonl")) if "loss" in m] == [1, 2, 3]
    assert load(os.path.join(run, "ckpt-3.json"))["config"]["out_dir"] == run
    linac("eval", run, "--tasks", "ppl", "--device", "cpu")
    results = load_lines(os.path.join(run, "eval.jsonl"))
    assert any(r.get("task") == "ppl" for r in results), results


def bench_json(work):
    folder, spec = awkward_spec(work)
    path = os.path.join(folder, "bench \u2713.jsonl")
    linac("bench", spec, "--device", "cpu", "--dtype", "fp32", "--shape", "1,32,2,16", "--iters", "1",
          "--warmup", "0", "--json", path)
    lines = load_lines(path)
    assert {line["op"] for line in lines} >= {"fwd", "fwd+bwd", "step"}, lines
    for line in lines:
        assert line["variant"] == "gated_deltanet" and line["backend"] == "cpu", line
        assert [line[k] for k in ("B", "T", "H", "D")] == [1, 32, 2, 16], line
        assert isinstance(line["median_ms"], float) or "note" in line, line


SCENARIOS = {f.__name__: f for f in (compile_manifest, run_files, bench_json)}

if __name__ == "__main__":
    name = sys.argv[4]
    work = os.path.join(WORK, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    start = time.time()
    SCENARIOS[name](work)
    print(f"{name}: passed in {time.time() - start:.1f} s")
