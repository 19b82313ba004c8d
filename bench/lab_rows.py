#!/usr/bin/env python3
"""Turns the kernel lab's timing tables (linac_cuda_lab --bench-only, as bench/run_h200.sh lab
saves them in lab_bench.log) into JSON lines for bench/results/, one row per (kind, shape, column).

usage: python3 bench/lab_rows.py LAB_BENCH_LOG --commit SHA [--gpu NAME] > bench/results/DATE-NAME.jsonl
"""
import argparse
import json
import re
import sys

VARIANTS = {"RetNet": "retnet", "sGLA": "mamba2", "GLA": "gla", "RWKV-6": "rwkv6",
            "DeltaNet": "deltanet", "GDN": "gated_deltanet", "LinAttn": "linear_attention"}
FORWARD_COLUMNS = {"default": "linac-default", "blk-inv": "linac-block-inverse (LINAC_HOPPER_BLOCK_INVERSE=1)",
                   "mma.sync": "linac-mma.sync (LINAC_HOPPER=0)"}
BACKWARD_COLUMNS = {"bwd ms": ("bwd_ms", "linac-mma.sync (LINAC_HOPPER_BWD=0)"),
                    "hopper bwd": ("bwd_ms", "linac-default"),
                    "bwd no-dg": ("bwd_nodg_ms", "linac-default"),
                    "fwd+bwd": ("fwdbwd_ms", "linac-default")}
SOURCE = "linac_cuda_lab --bench-only (cudaEvent median of 30 after 5 warm-ups; backward median of 20 after 3)"


def rows(lines, commit, gpu):
    header = None
    backward = False
    for line in lines:
        if line.startswith("kind") and "B,T,H,D" in line:
            header, backward = re.split(r"\s{2,}", line.strip())[2:], False
            continue
        if line.startswith("kind") and "bwd ms" in line:
            # its column names hold single spaces: fixed order (lab.cu's benchBackward)
            header, backward = ["bwd ms", "hopper bwd", "bwd no-dg", "fwd+bwd", "fla f+b", "ratio"], True
            continue
        if header is None or not line.strip() or line.startswith("("):
            continue
        parts = line.split()
        if parts[0] not in VARIANTS or len(parts) < 3:
            continue
        base = {"variant": VARIANTS[parts[0]], "kind": parts[1], "dtype": "bf16", "gpu": gpu,
                "source": SOURCE, "commit": commit}
        if backward:
            base.update(B=8, T=4096, H=8, D=128)
            for name, value in zip(header, parts[2:]):
                if name in BACKWARD_COLUMNS and value != "-":
                    field, backend = BACKWARD_COLUMNS[name]
                    yield dict(base, backend=backend, **{field: float(value)})
        else:
            B, T, H, D = (int(x) for x in parts[2].split(","))
            base.update(B=B, T=T, H=H, D=D)
            for name, value in zip(header, parts[3:]):
                if name in FORWARD_COLUMNS and value != "-":
                    yield dict(base, backend=FORWARD_COLUMNS[name], fwd_ms=float(value))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--gpu", default="NVIDIA H200")
    args = ap.parse_args()
    with open(args.log) as f:
        for row in rows(f, args.commit, args.gpu):
            sys.stdout.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
