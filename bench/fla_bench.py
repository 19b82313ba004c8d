"""fla's matching ops at the anchor shape, timed in the same device call as `linac bench`.

Run on the GPU machine with fla's wheels unpacked on PYTHONPATH (never a runtime dependency of
linac). Prints one JSON line per (variant, op) to stdout: fwd and fwd+bwd medians in ms
(triton.testing.do_bench, median), or the error fla raised.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F
import triton


def inputs(B, T, H, D, dtype, decay, delta=False, bonus=False, DV=None):
    """q, k [B, T, H, D], v [B, T, H, DV] (DV = D unless given) and the case's gates."""
    dev = "cuda"
    q = torch.randn(B, T, H, D, device=dev, dtype=dtype)
    k = torch.randn(B, T, H, D, device=dev, dtype=dtype)
    if delta:
        q = F.normalize(q.float(), dim=-1).to(dtype)
        k = F.normalize(k.float(), dim=-1).to(dtype)
    v = torch.randn(B, T, H, DV or D, device=dev, dtype=dtype)
    x = dict(q=q, k=k, v=v)
    if decay == "scalar":
        x["g"] = F.logsigmoid(torch.randn(B, T, H, device=dev, dtype=torch.float32))
    elif decay == "diagonal":
        x["g"] = F.logsigmoid(torch.randn(B, T, H, D, device=dev, dtype=torch.float32))
    if delta:
        x["beta"] = torch.sigmoid(torch.randn(B, T, H, device=dev, dtype=dtype))
    if bonus:
        x["u"] = torch.randn(H, D, device=dev, dtype=dtype)
    return x


def fla_op(module, name):
    """fla's op, or a stand-in that raises the import error when this fla lacks it."""
    try:
        mod = __import__(f"fla.ops.{module}", fromlist=[name])
        return getattr(mod, name)
    except Exception as e:  # reported per row, never hidden
        err = f"{type(e).__name__}: {e}"

        def missing(*args, **kwargs):
            raise RuntimeError(err)
        return missing


def cases(B, T, H, D, dtype, DV=None):
    """(name, fn, inputs) per fla op; DV (value dim) only where it may differ from D (the delta
    rules: Gated DeltaNet's 340m heads are dk 256, dv 512)."""
    retention = fla_op("retention", "chunk_retention")
    simple_gla = fla_op("simple_gla", "chunk_simple_gla")
    gla = fla_op("gla", "chunk_gla")
    rwkv6 = fla_op("rwkv6", "chunk_rwkv6")
    delta_rule = fla_op("delta_rule", "chunk_delta_rule")
    gated_delta = fla_op("gated_delta_rule", "chunk_gated_delta_rule")
    hgrn = fla_op("hgrn", "chunk_hgrn")

    yield "retnet", lambda a: retention(a["q"], a["k"], a["v"])[0], inputs(B, T, H, D, dtype, None)
    yield "mamba2", lambda a: simple_gla(a["q"], a["k"], a["v"], g=a["g"])[0], inputs(B, T, H, D, dtype, "scalar")
    yield "gla", lambda a: gla(a["q"], a["k"], a["v"], g=a["g"])[0], inputs(B, T, H, D, dtype, "diagonal")
    yield "hgrn2", lambda a: gla(a["q"], a["k"], a["v"], g=a["g"])[0], inputs(B, T, H, D, dtype, "diagonal")
    yield "rwkv6", lambda a: rwkv6(a["q"], a["k"], a["v"], a["g"], a["u"])[0], inputs(B, T, H, D, dtype, "diagonal", bonus=True)
    yield "deltanet", lambda a: delta_rule(a["q"], a["k"], a["v"], a["beta"])[0], inputs(B, T, H, D, dtype, None, delta=True, DV=DV)
    yield "gated_deltanet", lambda a: gated_delta(a["q"], a["k"], a["v"], a["g"], a["beta"])[0], inputs(B, T, H, D, dtype, "scalar", delta=True, DV=DV)
    C = H * D
    yield "hgrn", lambda a: hgrn(a["x"], a["g"])[0], dict(
        x=torch.randn(B, T, C, device="cuda", dtype=dtype),
        g=F.logsigmoid(torch.randn(B, T, C, device="cuda", dtype=torch.float32)))
    yield "sdpa", lambda a: F.scaled_dot_product_attention(
        a["q"].transpose(1, 2), a["k"].transpose(1, 2), a["v"].transpose(1, 2), is_causal=True), inputs(B, T, H, D, dtype, None)


# The cases whose backward runs fla's guarded chunk_bwd_dqkwg (bench/fla_guard.py).
GUARDED = ("mamba2", "gated_deltanet")


def warm(fn, a):
    """Compile and autotune fla's Triton kernels for this case (forward and backward), untimed."""
    try:
        fn(a)
        leaves = {k: (t.detach().requires_grad_(True) if t.is_floating_point() else t) for k, t in a.items()}
        fn(leaves).sum().backward()
    except Exception:  # the timed pass reports the error
        pass
    torch.cuda.synchronize()


def wait_for(path, timeout_s):
    """Block until `path` exists: the caller's signal that the GPU is ours (linac's runs are done)."""
    start = time.time()
    while not os.path.exists(path) and time.time() - start < timeout_s:
        time.sleep(0.5)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="8,4096,8,128",
                   help="B,T,H,D, or B,T,H,DKxDV for the delta rules' wide heads (e.g. 4,4096,4,256x512)")
    p.add_argument("--dtype", default="bf16")
    p.add_argument("--go-file", default=None,
                   help="warm every case first, then wait for this file before timing (so Triton's "
                        "compiles overlap the caller's build while the timings have the GPU alone)")
    p.add_argument("--go-timeout", type=float, default=600)
    p.add_argument("--only", default=None, help="run one case (e.g. gla)")
    p.add_argument("--bypass-hopper-guard", action="store_true",
                   help="time fla's gated backward although it refuses this Triton on Hopper (its "
                        "results are wrong there: bench/fla_guard.py); rows say guard_bypassed")
    p.add_argument("--warm-only", action="store_true",
                   help="compile and autotune, print nothing, exit: one process per case in parallel "
                        "fills Triton's cache (TRITON_CACHE_DIR, autotune results included) for a later "
                        "timing process")
    args = p.parse_args()
    if args.bypass_hopper_guard:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from fla_guard import bypass_hopper_guard
        bypass_hopper_guard()
    B, T, H, dims = args.shape.split(",")
    B, T, H = int(B), int(T), int(H)
    D, DV = (int(x) for x in dims.split("x")) if "x" in dims else (int(dims), None)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    torch.manual_seed(0)
    all_cases = [c for c in cases(B, T, H, D, dtype, DV) if args.only in (None, c[0])]
    if DV is not None:
        all_cases = [c for c in all_cases if c[0] in ("deltanet", "gated_deltanet")]
    if not all_cases:
        raise SystemExit(f"no case named {args.only!r}")
    if args.warm_only:
        for name, fn, a in all_cases:
            t0 = time.time()
            warm(fn, a)
            print(f"warmed {name} in {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
        return
    if args.go_file:
        for name, fn, a in all_cases:
            t0 = time.time()
            warm(fn, a)
            print(f"warmed {name} in {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
        wait_for(args.go_file, args.go_timeout)
    for name, fn, a in all_cases:
        row = dict(variant=name, backend="fla", B=B, T=T, H=H, D=D, dtype=args.dtype)
        if DV is not None:
            row.update(dk=D, dv=DV)
        if args.bypass_hopper_guard and name in GUARDED:
            row["guard_bypassed"] = True
        try:
            row["fwd_ms"] = triton.testing.do_bench(lambda: fn(a), warmup=25, rep=200, return_mode="median")
        except Exception as e:  # report, never hide
            row["fwd_error"] = f"{type(e).__name__}: {e}"[:200]
        leaves = {k: (t.detach().requires_grad_(True) if t.is_floating_point() else t) for k, t in a.items()}
        try:
            do = torch.randn_like(fn(leaves))
            row["fwdbwd_ms"] = triton.testing.do_bench(lambda: fn(leaves).backward(do), warmup=25, rep=200,
                                                       return_mode="median", grad_to_none=list(leaves.values()))
        except Exception as e:
            row["fwdbwd_error"] = f"{type(e).__name__}: {e}"[:200]
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
