#!/usr/bin/env python3
"""Replays a delta-rule backward draw that failed in the kernel lab through the host transcription
of the Hopper kernels (delta_bwd_host_check.py). `linac_cuda_lab --dump-failing DIR` writes each
failing backward case to DIR/bwd-<n>.bin (tests/runtime/cuda/lab_dump.h: a JSON header line, then
the arrays). Per file:
  1. the transcription's float64 reverse sweep against the lab's reference (the file reads right);
  2. per gradient, the error the GPU made, the error the transcription predicts with the kernels'
     roundings, and the cosine between the two residuals (near 1: the model reproduces the GPU);
  3. for each failing gradient, its error with one of the kernels' rounded values made exact
     ("all but"), and with that value alone rounded ("alone"): which rounding the draw's error
     comes from.
Usage: python3 tests/runtime/cuda/delta_bwd_replay.py FILE [FILE ...]
The transcription covers the delta rule with no decay or a scalar decay and the inclusive readout,
in bf16 or fp16; other files are reported and skipped. Exit 1 where a file cannot be read.
"""
import json
import sys

import numpy as np

import delta_bwd_host_check as host

GATE = 5e-3  # the lab's bf16 / fp16 gate
GRADS = {"q": "dq", "k": "dk", "v": "dv", "g": "dg", "beta": "dbeta", "h0": "dh0"}  # model -> file


def read_dump(path):
    """(meta, arrays): the header's fields and every array as float64 of its shape."""
    with open(path, "rb") as f:
        header = json.loads(f.readline())
        payload = f.read()
    arrays = {}
    for a in header["arrays"]:
        dtype = np.float32 if a["dtype"] == "f32" else np.float64
        count = int(np.prod(a["shape"]))
        arrays[a["name"]] = np.frombuffer(payload, dtype, count, a["offset"]).reshape(a["shape"]).astype(np.float64)
    return header["meta"], arrays


def sequences(meta):
    """(n, batch row, first token, length) of every sequence: cu_seqlens' documents, else rows."""
    cu = meta["cu_seqlens"]
    if cu:
        return [(n, 0, cu[n], cu[n + 1] - cu[n]) for n in range(len(cu) - 1)]
    return [(b, b, 0, int(meta["T"])) for b in range(int(meta["B"]))]


def pieces(meta, arrays):
    """The host model's input dict per (sequence, head), with where it sits in the file's arrays
    (sequence, batch row, token slice, head), for pooling them in the same order."""
    dk, dv = int(meta["dk"]), int(meta["dv"])
    out = []
    for n, b, bos, length in sequences(meta):
        tok = slice(bos, bos + length)
        for h in range(int(meta["H"])):
            def tokens(name, width=None):
                a = arrays.get(name)
                if a is None:
                    return np.zeros((length, width) if width else length)
                return a[b, tok, h]

            def state(name):
                a = arrays.get(name)
                return np.zeros((dk, dv)) if a is None else a[n, h]

            x = dict(q=tokens("q"), k=tokens("k"), v=tokens("v"), g=tokens("g"), beta=tokens("beta"),
                     h0=state("h0"), do=tokens("d_o"), dht=state("d_ht"))
            out.append((x, (n, b, tok, h)))
    return out


def pooled(values, where, name):
    """The file array `values` of gradient `name`, cut per (sequence, head) as `where` lists them."""
    return np.concatenate([(values[n, h] if name == "dh0" else values[b, tok, h]).ravel()
                           for n, b, tok, h in where])


def replay(path):
    meta, arrays = read_dump(path)
    kind, dtype = meta["kind"], meta["dtype"]
    print(f"{path}: bwd {kind} {dtype} {meta['shape']} (seed {meta['seed']})")
    low = {"bf16": host.round_bf16, "f16": host.round_f16}.get(dtype)
    if kind not in ("delta-none", "delta-scalar") or low is None:
        print("  not replayed: the transcription covers bf16 / fp16 delta-none and delta-scalar")
        return
    dk, scale = int(meta["dk"]), float(meta["scale"])
    parts = pieces(meta, arrays)
    xs, where = [p[0] for p in parts], [p[1] for p in parts]
    names = [m for m, f in GRADS.items() if f in arrays and "ref_" + f in arrays]

    sweep = [host.reverse_tokens(x, scale) for x in xs]
    worst = max(host.rel_rms(np.concatenate([s[m].ravel() for s in sweep]),
                             pooled(arrays["ref_" + GRADS[m]], where, GRADS[m])) for m in names)
    print(f"  1. float64 sweep vs the lab's reference: worst rel-RMS {worst:.1e}")

    precise = host.kernel_precise(dk)

    def model(rounding):
        got = [host.chunk_backward(x, scale, rounding) for x in xs]
        return {m: np.concatenate([g[m].ravel() for g in got]) for m in names}

    predicted = model(host.Rounding(low, precise))
    failing = []
    print(f"  2. {'grad':<6} {'GPU':>9} {'model':>9} {'cosine':>7}")
    for m in names:
        f = GRADS[m]
        ref, gpu = pooled(arrays["ref_" + f], where, f), pooled(arrays[f], where, f)
        rg, rm = gpu - ref, predicted[m] - ref
        cos = float(rg @ rm / max(np.linalg.norm(rg) * np.linalg.norm(rm), 1e-300))
        e = host.rel_rms(gpu, ref)
        print(f"     {f:<6} {e:9.2e} {host.rel_rms(predicted[m], ref):9.2e} {cos:7.3f}"
              f"{'  FAIL' if e >= GATE else ''}")
        if e >= GATE:
            failing.append(m)
    if not failing:
        return
    rounded = [n for n in host.ROUNDED_NAMES if n not in precise]
    refs = {m: pooled(arrays["ref_" + GRADS[m]], where, GRADS[m]) for m in failing}
    print(f"  3. {'value':<6} " + " ".join(f"{GRADS[m] + ' all but':>14} {GRADS[m] + ' alone':>12}"
                                         for m in failing))
    rows = []
    for n in rounded:
        but = model(host.Rounding(low, precise | {n}))
        alone = model(host.Rounding(low, frozenset(), {n}))
        rows.append((n, [(host.rel_rms(but[m], refs[m]), host.rel_rms(alone[m], refs[m])) for m in failing]))
    for n, errs in sorted(rows, key=lambda r: r[1][0][0]):  # the first failing gradient, best first
        print(f"     {n:<6} " + " ".join(f"{b:14.2e} {a:12.2e}" for b, a in errs))


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    ok = True
    for path in sys.argv[1:]:
        try:
            replay(path)
        except (OSError, ValueError, KeyError) as e:
            print(f"{path}: cannot replay ({e})")
            ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
