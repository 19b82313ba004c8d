#!/usr/bin/env python3
"""Replays a backward draw that failed in the kernel lab through the host transcription of the
Hopper kernels: the delta rule's (delta_bwd_host_check.py) or the diagonal decay's
(diag_bwd_host_check.py). `linac_cuda_lab --dump-failing DIR` writes each
failing backward case to DIR/bwd-<n>.bin (tests/runtime/cuda/lab_dump.h: a JSON header line, then
the arrays). Per file:
  1. the transcription's float64 reverse sweep against the lab's reference (the file reads right);
  2. per gradient, the error the GPU made, the error the transcription predicts with the kernels'
     roundings, and the cosine between the two residuals (near 1: the model reproduces the GPU);
  3. for each failing gradient, its error with one of the kernels' rounded values made exact
     ("all but"), and with that value alone rounded ("alone"): which rounding the draw's error
     comes from.
Usage: python3 tests/runtime/cuda/delta_bwd_replay.py FILE [FILE ...]
       python3 tests/runtime/cuda/delta_bwd_replay.py --self-test LAB_DUMP_WRITER
The transcriptions cover the delta rule with no decay or a scalar decay and the inclusive readout,
and the additive rule with a diagonal decay and either readout (steps 1-2, and the error the draw
would have with Ks and Qs in the other number of 16-bit halves), in bf16 or fp16; other files are
reported and skipped. Exit 1 where a file cannot be read.
--self-test writes a varlen delta draw and a padded diagonal one, whose "GPU" gradients are the
transcriptions' own, through lab_dump_writer (lab_dump_writer.cpp: lab_dump.h, as the lab writes)
and checks that each reads back and replays to itself (ctest lab_dump_replay, no GPU).
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

import delta_bwd_host_check as host
import diag_bwd_host_check as diag

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


def against_gpu(gpu, ref, model):
    """(GPU error, model error, cosine of the two residuals) of one gradient against the reference."""
    rg, rm = gpu - ref, model - ref
    cos = float(rg @ rm / max(np.linalg.norm(rg) * np.linalg.norm(rm), 1e-300))
    return host.rel_rms(gpu, ref), host.rel_rms(model, ref), cos


def replay(path):
    """Prints the replay of one file; returns {"sweep": worst rel-RMS of the sweep against the
    reference, "grads": {name: (GPU error, model error, cosine)}}, or None where not replayed."""
    meta, arrays = read_dump(path)
    kind, dtype = meta["kind"], meta["dtype"]
    print(f"{path}: bwd {kind} {dtype} {meta['shape']} (seed {meta['seed']})")
    low = {"bf16": host.round_bf16, "f16": host.round_f16}.get(dtype)
    if kind in ("additive-diag", "additive-diag-bonus") and low is not None:
        return replay_diagonal(meta, arrays, low)
    if kind not in ("delta-none", "delta-scalar") or low is None:
        print("  not replayed: the transcriptions cover bf16 / fp16 delta-none, delta-scalar, additive-diag"
              " and additive-diag-bonus")
        return None
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
    failing, result = [], {"sweep": worst, "grads": {}}
    print(f"  2. {'grad':<6} {'GPU':>9} {'model':>9} {'cosine':>7}")
    for m in names:
        f = GRADS[m]
        e, em, cos = against_gpu(pooled(arrays[f], where, f), pooled(arrays["ref_" + f], where, f), predicted[m])
        print(f"     {f:<6} {e:9.2e} {em:9.2e} {cos:7.3f}{'  FAIL' if e >= GATE else ''}")
        result["grads"][f] = (e, em, cos)
        if e >= GATE:
            failing.append(m)
    if not failing:
        return result
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
    return result


def replay_diagonal(meta, arrays, low):
    """Steps 1-2 for the diagonal decay (diag_bwd_host_check.py's chunk algorithm with the kernels'
    roundings), Ks and Qs in two 16-bit halves where the lab's case marks the decay's gradient
    precise (its precise_decay_grad; files written before it carried that field: the -exp(w)
    cases), else one, as the default dispatch runs them; then the error with the other number of
    halves."""
    excl = meta["kind"].endswith("-bonus")
    two = bool(meta["precise_decay_grad"]) if "precise_decay_grad" in meta else "exp(w)" in meta["shape"]
    parts = pieces(meta, arrays)
    where = [p[1] for p in parts]
    u = arrays.get("u")
    xs = [dict(x, u=u[h] if u is not None else np.zeros(int(meta["dk"])), scale=float(meta["scale"]))
          for x, (_, _, _, h) in parts]
    names = [f for f in ("dq", "dk", "dv", "dg") if f in arrays and "ref_" + f in arrays]
    sweep = [diag.reverse_sweep(x, excl)[0] for x in xs]
    worst = max(host.rel_rms(np.concatenate([s_[f].ravel() for s_ in sweep]), pooled(arrays["ref_" + f], where, f))
                for f in names)
    print(f"  1. float64 sweep vs the lab's reference: worst rel-RMS {worst:.1e}")

    def model(two_halves):
        saved, diag.ONE_HALF = diag.ONE_HALF, not two_halves
        got = []
        for x in xs:
            Sc, dSc, _ = diag.state_scan(x, excl, low)
            got.append(diag.chunked(x, excl, Sc, dSc, low))
        diag.ONE_HALF = saved
        return {f: np.concatenate([g[f].ravel() for g in got]) for f in names}

    predicted, other = model(two), model(not two)
    result = {"sweep": worst, "grads": {}}
    halves = ("two 16-bit halves", "one") if two else ("one 16-bit half", "two")
    print(f"  2. Ks and Qs in {halves[0]} (the default dispatch for this case)")
    print(f"     {'grad':<6} {'GPU':>9} {'model':>9} {'cosine':>7} {'with ' + halves[1]:>12}")
    for f in names:
        ref = pooled(arrays["ref_" + f], where, f)
        e, em, cos = against_gpu(pooled(arrays[f], where, f), ref, predicted[f])
        eo = host.rel_rms(other[f], ref)
        print(f"     {f:<6} {e:9.2e} {em:9.2e} {cos:7.3f} {eo:12.2e}{'  FAIL' if e >= GATE else ''}")
        result["grads"][f] = (e, em, cos)
    return result


def self_test(writer):
    """A varlen bf16 delta-scalar draw (sequences of 37 and 63 tokens, two heads, strong gates)
    through lab_dump_writer and back; the "GPU" gradients are the transcription's own."""
    T, H, dk, dv, cu = 100, 2, 64, 32, [0, 37, 100]
    scale = 1.0 / np.sqrt(dk)
    rng = np.random.default_rng(29)
    shapes = {"q": (1, T, H, dk), "k": (1, T, H, dk), "v": (1, T, H, dv), "g": (1, T, H),
              "beta": (1, T, H), "d_o": (1, T, H, dv), "h0": (2, H, dk, dv), "d_ht": (2, H, dk, dv)}
    inputs = {name: np.zeros(shape) for name, shape in shapes.items()}
    grads = {f: np.zeros(shapes[src]) for f, src in (("dq", "q"), ("dk", "k"), ("dv", "v"), ("dg", "g"),
                                                       ("dbeta", "beta"), ("dh0", "h0"))}
    refs = {f: np.zeros_like(a) for f, a in grads.items()}
    for n in range(2):
        tok = slice(cu[n], cu[n + 1])
        for h in range(H):
            x = host.make_inputs(rng, cu[n + 1] - cu[n], dk, dv, True, 10.0, -5.0, host.round_bf16)
            for name, key in (("q", "q"), ("k", "k"), ("v", "v"), ("g", "g"), ("beta", "beta"), ("d_o", "do")):
                inputs[name][0, tok, h] = x[key]
            inputs["h0"][n, h], inputs["d_ht"][n, h] = x["h0"], x["dht"]
            ref = host.reverse_tokens(x, scale)
            got = host.chunk_backward(x, scale, host.Rounding(host.round_bf16, host.kernel_precise(dk)))
            for f, m in (("dq", "q"), ("dk", "k"), ("dv", "v"), ("dg", "g"), ("dbeta", "beta")):
                refs[f][0, tok, h], grads[f][0, tok, h] = ref[m], got[m]
            refs["dh0"][n, h], grads["dh0"][n, h] = ref["h0"], got["h0"]
    fields = {"kind": "delta-scalar", "dtype": "bf16", "shape": f"B1 T{T} H{H} dk{dk} dv{dv} varlen g>=-5", "seed": "29"}
    return write_and_replay(writer, fields, dict(B=1, T=T, H=H, dk=dk, dv=dv, N=2, scale=float(scale)), cu,
                            inputs, refs, grads, 6, "delta-scalar")


def self_test_diagonal(writer):
    """The same for a bf16 additive-diag-bonus draw (two sequences of 150 tokens, strong gates):
    the diagonal branch's "GPU" gradients are diag_bwd_host_check.py's chunk algorithm, one half."""
    B, T, dk, dv = 2, 150, 64, 64
    rng = np.random.default_rng(31)
    shapes = {"q": (B, T, 1, dk), "k": (B, T, 1, dk), "v": (B, T, 1, dv), "g": (B, T, 1, dk), "u": (1, dk),
              "d_o": (B, T, 1, dv), "h0": (B, 1, dk, dv), "d_ht": (B, 1, dk, dv)}
    inputs = {name: np.zeros(shape) for name, shape in shapes.items()}
    grads = {f: np.zeros(shapes[src]) for f, src in (("dq", "q"), ("dk", "k"), ("dv", "v"), ("dg", "g"))}
    refs = {f: np.zeros_like(a) for f, a in grads.items()}
    diag.ONE_HALF = True
    u = None
    for b in range(B):
        x = diag.make_inputs(rng, T, dk, dv, 10.0, -20.0, host.round_bf16)
        x["u"] = u = x["u"] if u is None else u  # one u per head
        for name, key in (("q", "q"), ("k", "k"), ("v", "v"), ("g", "g"), ("d_o", "do")):
            inputs[name][b, :, 0] = x[key]
        inputs["h0"][b, 0], inputs["d_ht"][b, 0], inputs["u"][0] = x["h0"], x["dht"], u
        ref = diag.reverse_sweep(x, True)[0]
        Sc, dSc, _ = diag.state_scan(x, True, host.round_bf16)
        got = diag.chunked(x, True, Sc, dSc, host.round_bf16)
        for f in grads:
            refs[f][b, :, 0], grads[f][b, :, 0] = ref[f], got[f]
    fields = {"kind": "additive-diag-bonus", "dtype": "bf16", "shape": f"B{B} T{T} H1 dk{dk} dv{dv} g>=-20", "seed": "31"}
    # one half, as the field says (the lab writes it; an exclusive diagonal case now sets it)
    return write_and_replay(writer, fields, dict(B=B, T=T, H=1, dk=dk, dv=dv, N=B, scale=dk ** -0.5,
                                                 precise_decay_grad=0.0), [],
                            inputs, refs, grads, 4, "additive-diag-bonus")


def write_and_replay(writer, fields, dims, cu, inputs, refs, grads, count, label):
    """Writes the draw through lab_dump_writer, reads it back and replays it: 0 where every array
    and field reads back exactly and the replay's model error equals the stored "GPU" error."""
    with tempfile.TemporaryDirectory() as d:
        args = [writer, os.path.join(d, "bwd-1.bin")] + [f"{k}={v}" for k, v in fields.items()]
        args += [f"{k}#={v!r}" if isinstance(v, float) else f"{k}#={v}" for k, v in dims.items()]
        args.append("cu_seqlens@=" + ",".join(map(str, cu)))
        for group, dtype, tag in ((inputs, np.float32, "f32"), (refs, np.float64, "f64"), (grads, np.float64, "f64")):
            for name, a in group.items():
                name = "ref_" + name if group is refs else name
                path = os.path.join(d, name)
                a.astype(dtype).tofile(path)
                args.append(f"{tag}:{name}={path}:" + ",".join(map(str, a.shape)))
        subprocess.run(args, check=True)
        meta, arrays = read_dump(args[1])
        same = all(np.array_equal(arrays[n], inputs[n].astype(np.float32)) for n in inputs)
        same &= all(np.array_equal(arrays["ref_" + n], refs[n]) and np.array_equal(arrays[n], grads[n]) for n in refs)
        same &= meta["cu_seqlens"] == cu and meta["scale"] == dims["scale"]
        result = replay(args[1])
    ok = (same and result is not None and result["sweep"] < 1e-12 and len(result["grads"]) == count
          and all(abs(e - em) <= 1e-12 * max(e, 1e-30) and cos > 1 - 1e-9 for e, em, cos in result["grads"].values()))
    print(f"self-test ({label}): arrays and fields read back {'exactly' if same else 'WRONG'}; replay "
          f"{'reproduces the draw' if ok else 'does NOT reproduce the draw'}")
    return 0 if ok else 1


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    if sys.argv[1] == "--self-test" and len(sys.argv) == 3:
        return max(self_test(sys.argv[2]), self_test_diagonal(sys.argv[2]))
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
