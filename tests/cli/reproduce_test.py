#!/usr/bin/env python3
"""bench/reproduce.sh end to end at toy sizes on the CPU: both sweeps (language modelling on the
small preset with RULER, the calibrated MQAR run) for one variant at 3:1 / pure and the
Transformer, a few steps each, then its table; a re-run continues the finished folders.

usage: reproduce_test.py LINAC ROOT WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys
import time


def main():
    linac, root, work = sys.argv[1:4]
    out = os.path.join(work, "reproduce")
    shutil.rmtree(out, ignore_errors=True)
    env = dict(os.environ, PART="all", DEVICE="cpu", SPECS="gated_deltanet", SCHEDULES="3:1,transformer",
               LM_STEPS="2", LM_BATCH="2", LM_SEQ="64", CONTEXTS="256", EXAMPLES="2",
               MQAR_SCHEDULES="pure,transformer", MQAR_STEPS="2")
    cmd = ["bash", os.path.join(root, "bench", "reproduce.sh"), out, linac]
    first = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert first.returncode == 0, f"reproduce.sh failed ({first.returncode}):\n{first.stdout[-3000:]}\n{first.stderr[-3000:]}"
    md = open(os.path.join(out, "table.md")).read()
    for title in ("Language modelling (preset small) and RULER", "MQAR recall"):
        assert title in md, f"table.md lacks '{title}':\n{md}"
    doc = json.load(open(os.path.join(out, "table.json")))
    lm = {(r["variant"], r["schedule"]): r for r in doc["lm"]}
    mqar = {(r["variant"], r["schedule"]): r for r in doc["mqar"]}
    assert set(lm) == {("gated_deltanet", "3:1"), ("transformer", "transformer")}, sorted(lm)
    assert set(mqar) == {("gated_deltanet", "pure"), ("transformer", "transformer")}, sorted(mqar)
    for r in lm.values():
        assert r["ppl"] > 1 and 0 <= r["ruler_256"] <= 1 and r["seeds"] == 1, r
    assert lm[("transformer", "transformer")]["cache_share_of_transformer"] == 1.0
    assert 0 < lm[("gated_deltanet", "3:1")]["cache_share_of_transformer"] < 1
    for r in mqar.values():
        assert all(0 <= r[f"mqar_{n}"] <= 1 for n in (4, 8, 16)), r
    # a re-run finds every cell done and only rebuilds the table
    start = time.monotonic()
    again = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    assert open(os.path.join(out, "table.md")).read() == md
    print(f"reproduce_test: PASS (first run {first.stdout.count('done in')} cells; re-run "
          f"{time.monotonic() - start:.1f} s)")


if __name__ == "__main__":
    main()
