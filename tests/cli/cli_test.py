#!/usr/bin/env python3
"""The `linac` command line (CLI11): every command's --help lists every flag, bad values and
unknown names are usage errors (exit 2) naming the flag with a did-you-mean, `linac train
--config FILE` reads flags from YAML, the command line overriding them, with the resolved flags
written into the run directory as config.yaml, and `linac compile` prints the passes' warnings.

    cli_test.py LINAC SPECS_DIR WORK_DIR SCENARIO

One ctest entry per scenario (see SCENARIOS); each works in WORK_DIR/SCENARIO, which it empties
first. A scenario fails with an AssertionError that says what was expected.
"""
import json
import os
import re
import shutil
import sys

import linac_cli

LINAC, SPECS, WORK = (os.path.abspath(p) for p in sys.argv[1:4])
SPEC = os.path.join(SPECS, "gated_deltanet.yaml")

# Each command's flags, as its --help must list them (besides --help).
FLAGS = {
    "compile": ["--emit", "--schedule", "--preset", "--out", "--specs-dir", "--check"],
    "emit": ["--out", "--backends"],
    "autotune": ["--cache", "--json", "--clear"],
    "verify": ["--device", "--shape", "--dtypes", "--seed", "--chunk"],
    "bench": ["--device", "--shape", "--dtype", "--iters", "--warmup", "--json"],
    "train": ["--config", "--schedule", "--preset", "--task", "--data", "--tokenizer", "--data-dtype",
              "--mqar-pairs", "--steps", "--batch", "--seq-len", "--accumulation", "--lr", "--warmup", "--seed",
              "--out", "--resume", "--overwrite", "--accept-changes", "--eval-every", "--eval-batches",
              "--log-every", "--checkpoint-every", "--device", "--nproc", "--no-overlap", "--fused-loss",
              "--checkpointing", "--deterministic", "--find-batch", "--max-batch", "--varlen", "--profile",
              "--specs-dir"],
    "eval": ["--tasks", "--data", "--device", "--mqar-pairs", "--context", "--examples", "--seed", "--task-dir",
             "--haystack", "--varlen", "--limit", "--batch"],
    "generate": ["--prompt", "--max-new", "--temperature", "--top-p", "--seed", "--batch", "--device"],
    "memory": ["--schedule", "--preset", "--context", "--batch", "--dtype", "--specs-dir", "--json"],
    "sweep": ["--specs", "--schedules", "--preset", "--steps", "--out", "--tasks", "--seeds", "--device",
              "--train-args", "--eval-args", "--plots", "--memory-context"],
    "import": ["--out", "--spec", "--tokenizer", "--seq-len", "--specs-dir"],
    "export": ["--out", "--dtype"],
}
# Flags whose --help line must show the default ("=VALUE").
DEFAULTS = {"train": {"--lr": "0.002", "--steps": "300", "--tokenizer": "byte", "--device": "auto",
                      "--warmup": "steps/10", "--batch": "8"},
            "eval": {"--tasks": "ppl,mqar", "--context": "1024,2048,4096"},
            "verify": {"--device": "cpu", "--dtypes": "fp32,bf16"},
            "memory": {"--context": "2048", "--dtype": "bf16"}}


def linac(*args, expect=None, timeout=240):
    """Runs linac to completion; checks its exit code when `expect` is given."""
    return linac_cli.run(LINAC, *args, expect=expect, timeout=timeout)


def check_in(needle, text, what=""):
    assert needle in text, f"expected {needle!r} in {what or 'the output'}:\n{text}"


def help_lists_flags(work):
    """`linac COMMAND --help` (exit 0) lists each flag with a description; defaults are shown."""
    top = linac("--help", expect=0).stdout
    for command in FLAGS:
        check_in(command, top, "linac --help")
    for command, flags in FLAGS.items():
        text = linac(command, "--help", expect=0).stdout
        listed = {}  # flag -> (its type and default, its description)
        lines = text.splitlines()
        for i, line in enumerate(lines):
            m = re.match(r"^  (?:-\w,)?(--[a-z][a-z0-9-]*)(.*)$", line)
            if not m:
                continue
            rest = m.group(2)
            if rest.startswith("  "):  # a flag without a value: the description follows
                listed[m.group(1)] = ("", rest.strip())
                continue
            parts = re.split(r"\s{2,}", rest.strip(), maxsplit=1)
            if len(parts) == 2:
                listed[m.group(1)] = (parts[0], parts[1])
            else:  # a long type and default: the description is on the next line
                listed[m.group(1)] = (parts[0], lines[i + 1].strip() if i + 1 < len(lines) else "")
        missing = [f for f in flags if f not in listed]
        assert not missing, f"linac {command} --help does not list {missing}:\n{text}"
        unexpected = [f for f in listed if f not in flags and f != "--help"]
        assert not unexpected, f"linac {command} --help lists {unexpected}, not in this test's list:\n{text}"
        for flag, (_, description) in listed.items():
            assert description.strip(), f"linac {command} --help: {flag} has no description:\n{text}"
        for flag, default in DEFAULTS.get(command, {}).items():
            assert "=" + default in listed[flag][0], \
                f"linac {command} --help: {flag} should show its default {default}:\n{text}"


def usage_errors(work):
    """Bad values and unknown names: exit 2, the flag named, a did-you-mean where one is close."""
    for command in ("train", "eval", "generate", "verify", "bench", "sweep"):
        target = {"eval": [work], "generate": [work, "--prompt", "x"], "sweep": ["--specs", SPEC]}.get(command, [SPEC])
        p = linac(command, *target, "--device", "tpu", expect=2)
        check_in("--device", p.stderr)
        check_in("tpu", p.stderr)
    for value in ("1e-3x", "abc"):
        p = linac("train", SPEC, "--lr", value, expect=2)
        check_in("--lr", p.stderr)
        assert "stod" not in p.stderr, p.stderr
    p = linac("train", SPEC, "--steps", "10x", expect=2)
    check_in("--steps", p.stderr)
    p = linac("bench", SPEC, "--shape", "1,64x", expect=2)
    check_in("--shape", p.stderr)
    for flag, value in (("--context", "1024,,2048"), ("--mqar-pairs", "2,x"), ("--context", "1024,")):
        p = linac("eval", work, "--tasks", "mqar", flag, value, expect=2)
        check_in(flag, p.stderr)
    p = linac("sweep", "--specs", SPEC, "--seeds", "1,,2", expect=2)
    check_in("--seeds", p.stderr)
    p = linac("bench", SPEC, "--shape", "1,,64,64", expect=2)
    check_in("--shape", p.stderr)
    p = linac("bench", SPEC, "--shape", "1,64", expect=2)
    check_in("--shape must be B,T,H,D", p.stderr)
    p = linac("verify", SPEC, "--shape", "1,64,2,16,16x", expect=2)
    check_in("--shape", p.stderr)
    for flag in ("--shape", "--shapes"):  # --shapes: the old spelling, kept hidden
        p = linac("verify", SPEC, flag, "", expect=2)
        assert "PASS" not in p.stdout, p.stdout
    p = linac("train", SPEC, "--lrr", "1e-3", expect=2)
    check_in("unknown option '--lrr'; did you mean '--lr'?", p.stderr)
    p = linac("eval", work, "--taks", "ppl", expect=2)
    check_in("did you mean '--tasks'?", p.stderr)
    p = linac("trian", SPEC, expect=2)
    check_in("unknown command 'trian'; did you mean 'train'?", p.stderr)
    p = linac("train", SPEC, "--task", "lmm", expect=2)
    check_in("--task", p.stderr)
    linac(expect=2)  # no command: the usage, exit 2
    check_in("linac", linac("--version", expect=0).stdout)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def config_file(work):
    """--config: the file's values apply, the command line's win, config.yaml records them all."""
    out = os.path.join(work, "run")
    run_yaml = os.path.join(work, "run.yaml")
    write(run_yaml, f"# a small run\nspec: {SPEC}\npreset: tiny\nsteps: 5\nbatch: 2\nseq-len: 32\nlr: 1e-3\n"
                    f"eval-batches: 1\nlog-every: 1\ndevice: cpu\nout: {out}\n")
    p = linac("train", "--config", run_yaml, "--steps", "2", expect=0)
    check_in("done: 2 steps", p.stdout)  # the command line's --steps over the file's
    with open(os.path.join(out, "config.json")) as f:
        stored = f.read()
    assert re.search(r'"lr": 0\.001\b', stored), f"the file's lr did not apply:\n{stored}"
    assert re.search(r'"batch": 2\b', stored), stored
    resolved_path = os.path.join(out, "config.yaml")
    assert os.path.exists(resolved_path), f"no config.yaml in {out}: {os.listdir(out)}"
    with open(resolved_path) as f:
        resolved = f.read()
    version = linac("--version", expect=0).stdout.strip()
    assert resolved.splitlines()[0] == "# " + version, f"config.yaml should start with '# {version}':\n{resolved}"
    values = dict(re.findall(r"^([a-z][a-z0-9-]*): (.*)$", resolved, re.M))
    every = [f[2:] for f in FLAGS["train"] if f != "--config"] + ["spec"]
    missing = [k for k in every if k not in values]
    assert not missing, f"config.yaml lacks {missing}:\n{resolved}"
    for key, want in {"steps": "2", "lr": "0.001", "batch": "2", "seq-len": "32", "warmup": "1",
                      "tokenizer": "byte", "device": "cpu", "task": "lm"}.items():
        assert values[key] == want, f"config.yaml: {key} is {values[key]!r}, expected {want!r}:\n{resolved}"

    # config.yaml reads back: a resume from it with more steps continues the same run.
    p = linac("train", "--config", resolved_path, "--resume", "--steps", "3", expect=0)
    check_in("resumed from step 2", p.stdout)
    check_in("done: 3 steps", p.stdout)
    with open(resolved_path) as f:
        assert re.search(r"^steps: 3$", f.read(), re.M), "config.yaml was not rewritten at the resume"

    # Unknown keys and bad values: exit 2 naming the file, line and key, nothing started.
    write(run_yaml, f"spec: {SPEC}\nlrr: 1e-3\n")
    p = linac("train", "--config", run_yaml, "--out", os.path.join(work, "never"), expect=2)
    check_in(f"{run_yaml}:2: unknown key 'lrr' for linac train; did you mean 'lr'?", p.stderr)
    write(run_yaml, f"spec: {SPEC}\nlr: 1e-3x\n")
    p = linac("train", "--config", run_yaml, "--out", os.path.join(work, "never"), expect=2)
    check_in(f"{run_yaml}:2: lr:", p.stderr)
    write(run_yaml, "- a list\n")
    linac("train", "--config", run_yaml, expect=2)
    linac("train", "--config", os.path.join(work, "missing.yaml"), expect=2)
    assert not os.path.exists(os.path.join(work, "never")), "a refused start created its run directory"


def compile_warnings(work):
    """`linac compile` prints the passes' warnings as FILE:LINE:COL lines on stderr (an input that
    nothing reads), compiles all the same, and a shipped spec raises none."""
    with open(os.path.join(SPECS, "gla.yaml")) as f:
        lines = f.read().splitlines()
    at = lines.index("  g: {extent: value}") + 1
    lines.insert(at, "  extra: {extent: key}")
    spec = os.path.join(work, "gla_extra.yaml")
    write(spec, "\n".join(lines) + "\n")
    p = linac("compile", spec, "--emit=ir-opt", "--specs-dir", SPECS, expect=0)
    check_in(f'{spec}:{at + 1}:3: warning: input "extra" of variant @gla is unused', p.stderr, "stderr")
    p = linac("compile", os.path.join(SPECS, "gla.yaml"), "--emit=ir-opt", expect=0)
    assert "warning" not in p.stderr, f"a shipped spec raised a warning:\n{p.stderr}"


def autotune_cache(work):
    """`linac autotune`: the recorded choices, the latest line per key; --json; --clear deletes."""
    path = os.path.join(work, "autotune.tsv")
    check_in("nothing recorded yet", linac("autotune", "--cache", path, expect=0).stdout)
    key = "abc123\tNVIDIA H200 (132 SMs)\tdelta_backward.reverse[staged|fused]\tbf16 scalar delta dk128 dv128 nh64 t4096"
    write(path, "# linac autotune cache\n"
                f"{key}\tfused\tstaged=1.2000,fused=1.0000\n"
                "a malformed line\n"
                f"{key}\tstaged\tstaged=0.9000,fused=1.0000\n")
    text = linac("autotune", "--cache", path, expect=0).stdout
    check_in("(1 recorded choice)", text)
    check_in("NVIDIA H200 (132 SMs), build abc123", text)
    row = [line for line in text.splitlines() if "delta_backward.reverse" in line]
    assert len(row) == 1 and " staged " in row[0] and "staged=0.9000,fused=1.0000" in row[0], text
    records = [json.loads(line) for line in linac("autotune", "--cache", path, "--json", expect=0).stdout.splitlines()]
    assert [r["choice"] for r in records] == ["staged"], records
    check_in("deleted", linac("autotune", "--cache", path, "--clear", expect=0).stdout)
    assert not os.path.exists(path), "--clear left the cache file"


SCENARIOS = {f.__name__: f for f in (help_lists_flags, usage_errors, config_file, compile_warnings, autotune_cache)}

if __name__ == "__main__":
    name = sys.argv[4]
    work = os.path.join(WORK, name)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    SCENARIOS[name](work)
    print(f"{name}: ok")
