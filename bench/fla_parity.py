"""linac's Python ops beside fla's on identical random inputs (issue: `linac emit` / pip parity).

For every recurrence kind fla has an op for, the same inputs (bf16 q, k, v or x; float32 gates
and initial state) go through fla's op and linac's chunk_<variant> (the package `linac`, or an
emitted `linac_kernels` on PYTHONPATH), forward and backward with the same output gradients, and
through a float64 token-by-token recurrence. One JSON line per (variant, tensor): rel-RMS of linac
against the float64 reference, of fla against it, and of linac against fla; `pass` when linac is
within the half-precision gate (2e-2, the kernel tests') of the reference and within twice that of
fla.

Cases: GLA (chunk_gla), Mamba-2 (chunk_simple_gla with g), RetNet (chunk_simple_gla with g_gamma:
fla's chunk_retention derives the same per-head decays), DeltaNet (chunk_delta_rule), Gated
DeltaNet (chunk_gated_delta_rule), RWKV-6 (chunk_rwkv6), KDA (chunk_kda: linac's
gated_delta_diag), HGRN (chunk_hgrn). fla's signatures are those of flash-linear-attention 0.6.

Run on the GPU machine with fla's wheels on PYTHONPATH (bench/run_h200.sh parity); `--device cpu
--no-fla` checks linac's CPU kernels against the reference alone (no fla, no GPU). `--fla-warm`
runs fla's ops alone, forward and backward, to fill Triton's cache (its autotuning takes minutes
per op from an empty cache) while linac's package is still building.
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F

from fla_swap import linac_ops  # the package `linac`, else an emitted linac_kernels

TOL_HALF = 2e-2
TOL_F32 = 1e-4


def fla_op(module, name):
    mod = __import__(f"fla.ops.{module}", fromlist=[name])
    return getattr(mod, name)


def rel_rms(got, want):
    got, want = got.double(), want.double()
    return ((got - want).pow(2).mean().sqrt() / want.pow(2).mean().sqrt().clamp_min(1e-30)).item()


def matrix_reference(decay):
    """The recurrence of linac's kernels/common/recurrence.h in float64, token by token:
    S_t = diag(exp(g_t)) S_{t-1} (+ delta: - beta k (k^T S) + beta k v^T; additive: + k v^T),
    o_t = scale S_t^T q_t, or with a bonus u: scale (S_{t-1}^T q_t + (q_t . (u * k_t)) v_t)."""
    def run(a, scale):
        q, k, v = a["q"].double(), a["k"].double(), a["v"].double()
        S = a["h0"].double()
        rows = []
        for t in range(q.shape[1]):
            previous = S
            if decay == "fixed":
                S = S * a["g"].double().exp()[None, :, None, None]
            elif decay == "scalar":
                S = S * a["g"][:, t].double().exp()[..., None, None]
            elif decay == "diagonal":
                S = S * a["g"][:, t].double().exp()[..., None]
            kt = k[:, t]
            if "beta" in a:
                error = v[:, t] - torch.einsum("bhk,bhkv->bhv", kt, S)
                S = S + a["beta"][:, t].double()[..., None, None] * kt[..., None] * error[..., None, :]
            else:
                S = S + kt[..., None] * v[:, t][..., None, :]
            if "u" in a:
                bonus = (q[:, t] * a["u"].double() * kt).sum(-1, keepdim=True)
                rows.append(scale * (torch.einsum("bhk,bhkv->bhv", q[:, t], previous) + bonus * v[:, t]))
            else:
                rows.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, t], S))
        return torch.stack(rows, 1), S
    return run


def scan_reference(a, scale):
    """HGRN's h_t = exp(g_t) * h_{t-1} + x_t per channel, in float64."""
    del scale
    h, rows = a["h0"].double(), []
    for t in range(a["x"].shape[1]):
        h = a["g"][:, t].double().exp() * h + a["x"][:, t].double()
        rows.append(h)
    return torch.stack(rows, 1), h


def matrix_inputs(B, T, H, K, device, dtype, decay, gates):
    a = {"q": torch.randn(B, T, H, K, device=device).to(dtype),
         "k": F.normalize(torch.randn(B, T, H, K, device=device), dim=-1).to(dtype),
         "v": torch.randn(B, T, H, K, device=device).to(dtype)}
    if decay == "fixed":  # RetNet's per-head decay, log(1 - 2^(-5 - h))
        a["g"] = torch.log(1 - 2.0 ** (-5.0 - torch.arange(H, dtype=torch.float32, device=device)))
    elif decay == "scalar":
        a["g"] = F.logsigmoid(torch.randn(B, T, H, device=device))
    elif decay == "diagonal":
        a["g"] = F.logsigmoid(torch.randn(B, T, H, K, device=device)) / 16
    if "beta" in gates:
        a["beta"] = torch.rand(B, T, H, device=device)
    if "u" in gates:
        a["u"] = 0.5 * torch.randn(H, K, device=device)
    a["h0"] = torch.randn(B, H, K, K, device=device)
    return a


def cases(args, with_fla, with_linac=True):
    """(variant, inputs, linac call or None, fla call or None, reference); calls take (leaves,
    scale)."""
    ops = linac_ops() if with_linac else None
    B, T, H, K = map(int, args.shape.split(","))
    dev, dtype = args.device, torch.bfloat16 if args.device == "cuda" else torch.float32

    def fla(module, name, gate_kwargs):
        if not with_fla:
            return None
        try:
            fn = fla_op(module, name)
        except Exception as e:  # this fla lacks the op: each row says so
            message = f"{type(e).__name__}: {e}"

            def fn(*args, **kwargs):
                raise RuntimeError(message)
        if gate_kwargs is None:  # a vector state: fla's chunk_hgrn(x, g, ...)
            return lambda a, scale: fn(a["x"], a["g"], initial_state=a["h0"], output_final_state=True)
        return lambda a, scale: fn(a["q"], a["k"], a["v"], **gate_kwargs(a), scale=scale,
                                   initial_state=a["h0"], output_final_state=True)

    def linac(name, gates):
        if ops is None:
            return None
        fn = getattr(ops, name)
        return lambda a, scale: fn(a["q"], a["k"], a["v"], *[a[g] for g in gates], scale=scale,
                                   initial_state=a["h0"], output_final_state=True)

    table = [
        ("gla", "diagonal", ["g"], "chunk_gla", ("gla", "chunk_gla", lambda a: dict(g=a["g"]))),
        ("mamba2", "scalar", ["g"], "chunk_mamba2", ("simple_gla", "chunk_simple_gla", lambda a: dict(g=a["g"]))),
        ("retnet", "fixed", ["g"], "chunk_retnet",
         ("simple_gla", "chunk_simple_gla", lambda a: dict(g_gamma=a["g"]))),
        ("deltanet", "none", ["beta"], "chunk_deltanet",
         ("delta_rule", "chunk_delta_rule", lambda a: dict(beta=a["beta"]))),
        ("gated_deltanet", "scalar", ["g", "beta"], "chunk_gated_deltanet",
         ("gated_delta_rule", "chunk_gated_delta_rule", lambda a: dict(g=a["g"], beta=a["beta"]))),
        ("rwkv6", "diagonal", ["g", "u"], "chunk_rwkv6", ("rwkv6", "chunk_rwkv6", lambda a: dict(w=a["g"], u=a["u"]))),
        ("gated_delta_diag", "diagonal", ["g", "beta"], "chunk_gated_delta_diag",
         ("kda", "chunk_kda", lambda a: dict(g=a["g"], beta=a["beta"]))),
    ]
    for variant, decay, gates, linac_name, (module, name, kwargs) in table:
        inputs = (lambda decay=decay, gates=gates: matrix_inputs(B, T, H, K, dev, dtype, decay, gates))
        yield variant, inputs, linac(linac_name, gates), fla(module, name, kwargs), matrix_reference(decay), K ** -0.5
    D = H * K

    def hgrn_inputs():
        return {"x": torch.randn(B, T, D, device=dev).to(dtype),
                "g": F.logsigmoid(torch.randn(B, T, D, device=dev)), "h0": torch.randn(B, D, device=dev)}
    fla_hgrn = fla("hgrn", "chunk_hgrn", None)
    linac_hgrn = None if ops is None else (
        lambda a, scale: ops.chunk_hgrn(a["x"], a["g"], initial_state=a["h0"], output_final_state=True))
    yield "hgrn", hgrn_inputs, linac_hgrn, fla_hgrn, scan_reference, 1.0


def run(fn, inputs, scale, d_o, d_ht):
    """fn's outputs and the gradients of <o, d_o> + <ht, d_ht> for every input (a fixed decay
    [H] is a constant: fla takes no gradient for g_gamma)."""
    leaves = {n: t.detach().clone().requires_grad_(not (n == "g" and t.dim() == 1)) for n, t in inputs.items()}
    o, ht = fn(leaves, scale)
    ((o.double() * d_o.double()).sum() + (ht.double() * d_ht.double()).sum()).backward()
    out = {"o": o.detach(), "ht": ht.detach()}
    out.update({f"d{n}": t.grad for n, t in leaves.items() if t.grad is not None})
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="2,1024,4,128", help="B,T,H,D (dk = dv = D; HGRN's width H * D)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--no-fla", action="store_true", help="linac against the reference only")
    p.add_argument("--only", default=None, help="one variant")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fla-warm", action="store_true",
                   help="fla's ops alone, forward and backward once (fills Triton's cache; no linac, no rows)")
    args = p.parse_args()
    half = args.device == "cuda"
    failures = 0
    for variant, make_inputs, linac_fn, fla_fn, reference, scale in cases(args, not args.no_fla,
                                                                           not args.fla_warm):
        if args.only not in (None, variant):
            continue
        torch.manual_seed(args.seed)
        inputs = make_inputs()
        values = inputs["v"] if "v" in inputs else inputs["x"]  # o has v's shape (HGRN: x's)
        d_o, d_ht = torch.randn_like(values, dtype=torch.float32), torch.randn_like(inputs["h0"])
        if args.fla_warm:
            try:
                run(fla_fn, inputs, scale, d_o, d_ht)
                print(f"fla_parity: fla's {variant} warmed", file=sys.stderr)
            except Exception as e:  # the parity run reports it on the variant's rows
                print(f"fla_parity: fla's {variant} failed: {type(e).__name__}: {e}"[:300], file=sys.stderr)
            continue
        want = run(reference, inputs, scale, d_o, d_ht)
        got = run(linac_fn, inputs, scale, d_o, d_ht)
        theirs, fla_error = None, None
        if fla_fn is not None:
            try:
                theirs = run(fla_fn, inputs, scale, d_o, d_ht)
            except Exception as e:  # reported, never hidden (fla's Hopper guard refuses some backwards)
                fla_error = f"{type(e).__name__}: {e}"[:200]
                try:  # its forward alone, so o and ht still compare (the guard is in the backward)
                    with torch.no_grad():
                        o, ht = fla_fn(inputs, scale)
                    theirs = {"o": o, "ht": ht}
                except Exception:  # the forward fails too: the rows carry the first error
                    pass
        for name in want:
            row = dict(variant=variant, tensor=name, shape=args.shape, dtype="bf16" if half else "fp32",
                       linac_vs_ref=rel_rms(got[name], want[name]))
            if theirs is not None and name in theirs:
                row["fla_vs_ref"] = rel_rms(theirs[name], want[name])
                row["linac_vs_fla"] = rel_rms(got[name], theirs[name])
            if fla_error and name not in (theirs or {}):
                row["fla_error"] = fla_error
            tol = TOL_HALF if half else TOL_F32
            row["pass"] = row["linac_vs_ref"] < tol and row.get("linac_vs_fla", 0.0) < 2 * tol
            failures += not row["pass"]
            print(json.dumps(row), flush=True)
    print(f"fla_parity: {failures} failing rows", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
