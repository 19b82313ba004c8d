"""linac's Python ops beside fla's on identical random inputs (issue: `linac emit` / pip parity).

For every recurrence kind fla has an op for, the same inputs (bf16 q, k, v; float32 gates and
initial state) go through fla's chunk op and linac's chunk_<variant> (the installed package
`linac`, or an emitted `linac_kernels` on PYTHONPATH), forward and backward with the same output
gradients, and through a float64 token-by-token recurrence. One JSON line per (variant, tensor):
rel-RMS of linac against the float64 reference, of fla against it, and of linac against fla, and
whether linac's is within the bf16 gate (2e-2, the kernel tests' half-precision gate) of both.

Covered: GLA (chunk_gla), Mamba-2 (chunk_simple_gla with g), RetNet (chunk_simple_gla with
g_gamma, fla's derivation of RetNet's decays), DeltaNet (chunk_delta_rule), Gated DeltaNet
(chunk_gated_delta_rule), RWKV-6 (chunk_rwkv6). Not yet: HGRN (a vector state) and KDA.

Run on the GPU machine with fla's wheels on PYTHONPATH (bench/run_h200.sh parity); `--device cpu
--no-fla` checks linac's CPU kernels against the reference alone (no fla, no GPU).
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F

TOL_BF16 = 2e-2


def linac_ops():
    try:
        import linac.ops as ops
    except ImportError:
        import linac_kernels.ops as ops
    return ops


def fla_op(module, name):
    mod = __import__(f"fla.ops.{module}", fromlist=[name])
    return getattr(mod, name)


def rel_rms(got, want):
    got, want = got.double(), want.double()
    return ((got - want).pow(2).mean().sqrt() / want.pow(2).mean().sqrt().clamp_min(1e-30)).item()


def reference(q, k, v, g=None, beta=None, u=None, g_kind="none", scale=1.0, h0=None):
    """The recurrence of linac's kernels/common/recurrence.h in float64, token by token:
    S_t = diag(exp(g_t)) S_{t-1} (+ delta: - beta k (k^T S) + beta k v^T, additive: + k v^T);
    o_t = scale S_t^T q_t, or with a bonus u: scale (S_{t-1}^T q_t + (q_t . (u * k_t)) v_t)."""
    q, k, v = q.double(), k.double(), v.double()
    B, T, H, K = q.shape
    S = torch.zeros(B, H, K, v.shape[-1], dtype=torch.float64, device=q.device) if h0 is None else h0.double()
    rows = []
    for t in range(T):
        previous = S
        if g_kind == "fixed":
            S = S * g.double().exp()[None, :, None, None]
        elif g_kind == "scalar":
            S = S * g[:, t].double().exp()[..., None, None]
        elif g_kind == "diagonal":
            S = S * g[:, t].double().exp()[..., None]
        kt = k[:, t]
        if beta is not None:
            error = v[:, t] - torch.einsum("bhk,bhkv->bhv", kt, S)
            S = S + beta[:, t].double()[..., None, None] * kt[..., None] * error[..., None, :]
        else:
            S = S + kt[..., None] * v[:, t][..., None, :]
        if u is None:
            rows.append(scale * torch.einsum("bhk,bhkv->bhv", q[:, t], S))
        else:
            bonus = (q[:, t] * u.double() * kt).sum(-1, keepdim=True)
            rows.append(scale * (torch.einsum("bhk,bhkv->bhv", q[:, t], previous) + bonus * v[:, t]))
    return torch.stack(rows, 1), S


def cases(B, T, H, K, device, with_fla):
    """(variant, kind of g, gate names, linac function, fla function or None)."""
    ops = linac_ops()
    op = (lambda m, n: fla_op(m, n)) if with_fla else (lambda m, n: None)

    def fla_call(fn, gates_to_kwargs):
        if fn is None:
            return None
        return lambda q, k, v, gates, scale, h0: fn(q, k, v, **gates_to_kwargs(gates), scale=scale,
                                                     initial_state=h0, output_final_state=True)
    gla, simple_gla = op("gla", "chunk_gla"), op("simple_gla", "chunk_simple_gla")
    delta_rule, gated_delta = op("delta_rule", "chunk_delta_rule"), op("gated_delta_rule", "chunk_gated_delta_rule")
    rwkv6 = op("rwkv6", "chunk_rwkv6")
    yield ("gla", "diagonal", ["g"], ops.chunk_gla, fla_call(gla, lambda a: dict(g=a["g"])))
    yield ("mamba2", "scalar", ["g"], ops.chunk_mamba2, fla_call(simple_gla, lambda a: dict(g=a["g"])))
    yield ("retnet", "fixed", ["g"], ops.chunk_retnet, fla_call(simple_gla, lambda a: dict(g_gamma=a["g"])))
    yield ("deltanet", "none", ["beta"], ops.chunk_deltanet, fla_call(delta_rule, lambda a: dict(beta=a["beta"])))
    yield ("gated_deltanet", "scalar", ["g", "beta"], ops.chunk_gated_deltanet,
           fla_call(gated_delta, lambda a: dict(g=a["g"], beta=a["beta"])))
    if rwkv6 is not None or not with_fla:
        yield ("rwkv6", "diagonal", ["g", "u"], ops.chunk_rwkv6,
               None if rwkv6 is None else
               lambda q, k, v, gates, scale, h0: rwkv6(q, k, v, gates["g"], gates["u"], scale=scale,
                                                       initial_state=h0, output_final_state=True))


def gate_values(names, g_kind, B, T, H, K, device):
    gates = {}
    if "g" in names:
        shape = {"fixed": (H,), "scalar": (B, T, H), "diagonal": (B, T, H, K)}[g_kind]
        if g_kind == "fixed":  # RetNet's per-head decay, log(1 - 2^(-5 - h))
            gates["g"] = torch.log(1 - 2.0 ** (-5.0 - torch.arange(H, dtype=torch.float32, device=device)))
        else:
            gates["g"] = F.logsigmoid(torch.randn(shape, device=device)) / (16 if g_kind == "diagonal" else 1)
    if "beta" in names:
        gates["beta"] = torch.rand(B, T, H, device=device)
    if "u" in names:
        gates["u"] = 0.5 * torch.randn(H, K, device=device)
    return gates


def run(fn, q, k, v, gates, scale, h0, d_o, d_ht):
    """fn's outputs and the gradients of <o, d_o> + <ht, d_ht> for q, k, v, every gate and h0."""
    leaves = {"q": q, "k": k, "v": v, **gates, "h0": h0}
    leaves = {n: t.detach().clone().requires_grad_(not (n == "g" and t.dim() == 1)) for n, t in leaves.items()}
    o, ht = fn(leaves["q"], leaves["k"], leaves["v"], {n: leaves[n] for n in gates}, scale, leaves["h0"])
    ((o.float() * d_o).sum() + (ht.float() * d_ht).sum()).backward()
    out = {"o": o.detach(), "ht": ht.detach()}
    out.update({f"d{n}": t.grad for n, t in leaves.items() if t.grad is not None})
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", default="2,1024,4,128", help="B,T,H,D (dk = dv = D)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--no-fla", action="store_true", help="linac against the reference only")
    p.add_argument("--only", default=None, help="one variant")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    B, T, H, K = map(int, args.shape.split(","))
    device, dtype = args.device, torch.bfloat16 if args.device == "cuda" else torch.float32
    failures = 0
    for variant, g_kind, names, linac_fn, fla_fn in cases(B, T, H, K, device, not args.no_fla):
        if args.only not in (None, variant):
            continue
        torch.manual_seed(args.seed)
        q = torch.randn(B, T, H, K, device=device).to(dtype)
        k = F.normalize(torch.randn(B, T, H, K, device=device), dim=-1).to(dtype)
        v = torch.randn(B, T, H, K, device=device).to(dtype)
        gates = gate_values(names, g_kind, B, T, H, K, device)
        h0 = torch.randn(B, H, K, K, device=device)
        d_o, d_ht = torch.randn(B, T, H, K, device=device), torch.randn(B, H, K, K, device=device)
        scale = K ** -0.5

        def ref_fn(q, k, v, gates, scale, h0):
            return reference(q, k, v, gates.get("g"), gates.get("beta"), gates.get("u"), g_kind, scale, h0)
        want = run(ref_fn, q, k, v, gates, scale, h0, d_o.double(), d_ht.double())
        got = run(lambda q, k, v, gates, scale, h0: linac_fn(q, k, v, *gates.values(), scale=scale,
                                                              initial_state=h0, output_final_state=True),
                  q, k, v, gates, scale, h0, d_o, d_ht)
        theirs, fla_error = None, None
        if fla_fn is not None:
            try:
                theirs = run(fla_fn, q, k, v, gates, scale, h0, d_o, d_ht)
            except Exception as e:  # reported, never hidden (fla's Hopper guard refuses some backwards)
                fla_error = f"{type(e).__name__}: {e}"[:200]
        for name in want:
            row = dict(variant=variant, tensor=name, shape=args.shape, dtype=str(dtype).replace("torch.", ""),
                       linac_vs_ref=rel_rms(got[name], want[name]))
            if theirs is not None and name in theirs:
                row["fla_vs_ref"] = rel_rms(theirs[name], want[name])
                row["linac_vs_fla"] = rel_rms(got[name], theirs[name])
            if fla_error:
                row["fla_error"] = fla_error
            row["pass"] = row["linac_vs_ref"] < (TOL_BF16 if dtype != torch.float32 else 1e-4) and \
                row.get("linac_vs_fla", 0.0) < TOL_BF16 * 2
            failures += not row["pass"]
            print(json.dumps(row), flush=True)
    print(f"fla_parity: {failures} failing rows", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
