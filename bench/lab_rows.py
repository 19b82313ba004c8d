#!/usr/bin/env python3
"""Turns the kernel lab's timing tables (linac_cuda_lab --bench-only, as bench/run_h200.sh lab
saves them in lab_bench.log) into JSON lines for bench/results/, one row per (kind, shape, column).

usage: python3 bench/lab_rows.py LAB_BENCH_LOG --commit SHA [--gpu NAME] [--env "VAR=1 ..."]
       > bench/results/DATE-NAME.jsonl
--env names the opt-in switches the lab ran with (its --hopper-* flags); they go into the default
dispatch's backend label. The rows "GDN 340m heads" and "GLA 340m heads" are Gated DeltaNet and GLA
at their 340m presets' heads (B4 T4096 H4; dk 256 x dv 512 and dk 128 x dv 256; rows carry dk and
dv where they differ); the backward rows whose kind ends in " T16384" are at B2 T16384 H4 D128, those
ending in " D256" at B8 T4096 H8 D256.
"""
import argparse
import json
import re
import sys

VARIANTS = {"RetNet": "retnet", "sGLA": "mamba2", "GLA": "gla", "RWKV-6": "rwkv6",
            "DeltaNet": "deltanet", "GDN": "gated_deltanet", "LinAttn": "linear_attention"}
# 'blk-inv' in logs before the blockwise inverse became the default (2026-12-05), 'column' after
FORWARD_COLUMNS = {"default": "linac-default", "blk-inv": "linac-block-inverse (LINAC_HOPPER_BLOCK_INVERSE=1)",
                   "column": "linac-column-inverse (LINAC_HOPPER_BLOCK_INVERSE=0)",
                   "overlap": "linac-overlapped-state-stage (LINAC_HOPPER_OVERLAP=1)",
                   "early": "linac-early-qw-loads (LINAC_HOPPER_LATE=0)",
                   "inline": "linac-inline-scores (LINAC_HOPPER_PREPARED_SCORES=0)",
                   "prepared": "linac-prepared-scores (LINAC_HOPPER_PREPARED_SCORES=1)",
                   # 'narrow' while the state stage's blocks of 16 were opt-in (session 35's first call),
                   # 'blocks32' since they are the default
                   "narrow": "linac-narrow-state (LINAC_HOPPER_NARROW_STATE=1)",
                   "blocks32": "linac-state-blocks-of-32 (LINAC_HOPPER_NARROW_STATE=0)",
                   "split": "linac-split-forward (LINAC_HOPPER_SPLIT_STATE=1)",
                   # 'segments' while the segmented forward was opt-in (session 36's first call),
                   # 'whole' since it is the default where it applies
                   "segments": "linac-segmented-forward (LINAC_HOPPER_SEGMENTS=1)",
                   "whole": "linac-whole-sequences (LINAC_HOPPER_SEGMENTS=0)",
                   "mma.sync": "linac-mma.sync (LINAC_HOPPER=0)"}
BACKWARD_COLUMNS = {"bwd ms": ("bwd_ms", "linac-mma.sync (LINAC_HOPPER_BWD=0)"),
                    "hopper bwd": ("bwd_ms", "linac-default"),
                    "bwd no-dg": ("bwd_nodg_ms", "linac-default"),
                    "fused": ("bwd_ms", "linac-fused-reverse-pass (LINAC_HOPPER_FUSED_REVERSE=1)"),
                    "alt": ("bwd_ms", None),  # ALT_BACKENDS, by the row's update rule / decay
                    "fwd+bwd": ("fwdbwd_ms", "linac-default")}
# the backward table's 'alt' column (since 2026-12-06; 'fused' before): which path it timed (the
# diagonal decay's only in session 27's logs, before the key blocks became its one path)
# the additive rule's (decay none / fixed / scalar) since session 35: its state passes in two
# launches, timed with d_g where training learns the decay (so RetNet's beside 'bwd no-dg')
ALT_BACKENDS = {"delta": "linac-fused-reverse-pass (LINAC_HOPPER_FUSED_REVERSE=1)",
                # the diagonal decay's: session 27's logs timed its gradient by key block
                # (LINAC_HOPPER_DIAG_SPLIT=1); since session 36 its state passes over whole
                # sequences where they default to segments
                "diag": "linac-diagonal-whole-sequences (LINAC_HOPPER_SEGMENTS=0)",
                "additive": "linac-two-state-launches (LINAC_HOPPER_JOINT_STATE=0)"}
UNLEARNED_DECAYS = ("additive-none", "additive-fixed")  # the lab's rows time them without d_g
WIDE_HEADS = "340m heads"  # a variant at its 340m preset's heads: its own kind and shape
WIDE_ROWS = {"GDN": ("delta-scalar", dict(B=4, T=4096, H=4, D=256, dk=256, dv=512)),
             "GLA": ("additive-diag", dict(B=4, T=4096, H=4, D=128, dk=128, dv=256))}
# backward rows at issue 11's other shapes: long with few heads, wide heads
SUFFIX_SHAPES = {" T16384": dict(B=2, T=16384, H=4, D=128), " D256": dict(B=8, T=4096, H=8, D=256)}
SOURCE = "linac_cuda_lab --bench-only (cudaEvent median of 30 after 5 warm-ups; backward median of 20 after 3)"


def split_row(line):
    """A timing row's name (variant, then kind and any shape suffix) and its values: the values
    start at the first token past the kind that is a number, '-', a ratio ('1.23x') or a shape
    ('8,4096,8,128'); lab_bench.cu pads names to 30 columns, and a longer name runs on past them."""
    tokens = line.split()
    for i in range(2, len(tokens)):
        t = tokens[i]
        if t == "-" or "," in t or re.fullmatch(r"[0-9.]+x?", t):
            return [tokens[0], " ".join(tokens[1:i])], tokens[i:]
    return tokens[:1], []


def rows(lines, commit, gpu, env=""):
    default = "linac-default" + (f" ({env})" if env else "")
    header = None
    backward = False
    for line in lines:
        if line.startswith("kind") and "B,T,H,D" in line:
            header, backward = re.split(r"\s{2,}", line.strip())[2:], False
            continue
        if line.startswith("kind") and "bwd ms" in line:
            # its column names hold single spaces: fixed order (lab_bench.cu's benchBackward;
            # 'fused' since 2026-12-05, 'alt' since 2026-12-06)
            header = ["bwd ms", "hopper bwd", "bwd no-dg", "fwd+bwd", "fla f+b", "ratio"]
            for third in ("fused", "alt"):
                if f" {third} " in line:
                    header.insert(2, third)
            backward = True
            continue
        if header is None or not line.strip() or line.startswith("("):
            continue
        name, parts = split_row(line)
        if len(name) < 2 or name[0] not in VARIANTS or len(parts) < 2:
            continue
        wide = name[1].strip() == WIDE_HEADS
        suffix = next((x for x in SUFFIX_SHAPES if backward and name[1].strip().endswith(x)), None)
        kind = WIDE_ROWS[name[0]][0] if wide else name[1].strip().removesuffix(suffix or "")
        base = {"variant": VARIANTS[name[0]], "kind": kind, "dtype": "bf16", "gpu": gpu,
                "source": SOURCE, "commit": commit}
        label = lambda backend: default if backend == "linac-default" else backend
        if backward:
            base.update(WIDE_ROWS[name[0]][1] if wide else SUFFIX_SHAPES[suffix] if suffix else dict(B=8, T=4096, H=8, D=128))
            for column, value in zip(header, parts):
                if column in BACKWARD_COLUMNS and value != "-":
                    field, backend = BACKWARD_COLUMNS[column]
                    if backend is None:
                        rule = ("delta" if kind.startswith("delta") else "diag" if "diag" in kind
                                else "additive")
                        backend = ALT_BACKENDS[rule]
                        if rule == "additive" and kind in UNLEARNED_DECAYS:
                            field = "bwd_nodg_ms"
                    yield dict(base, backend=label(backend), **{field: float(value)})
        else:
            dims = parts[0].split(",")
            B, T, H = (int(x) for x in dims[:3])
            dk, _, dv = dims[3].partition("x")
            base.update(B=B, T=T, H=H, D=int(dk))
            if dv:
                base.update(dk=int(dk), dv=int(dv))
            for column, value in zip(header, parts[1:]):
                if column in FORWARD_COLUMNS and value != "-":
                    yield dict(base, backend=label(FORWARD_COLUMNS[column]), fwd_ms=float(value))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("log")
    ap.add_argument("--commit", required=True)
    ap.add_argument("--gpu", default="NVIDIA H200")
    ap.add_argument("--env", default="", help="the opt-in switches the lab ran with")
    args = ap.parse_args()
    with open(args.log) as f:
        for row in rows(f, args.commit, args.gpu, args.env):
            sys.stdout.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
