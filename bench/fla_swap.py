"""fla's layers with their chunk kernels swapped for linac's: GatedLinearAttention's chunk_gla and
GatedDeltaNet's chunk_gated_delta_rule replaced, inside the layer modules, by functions over
linac's ops (the package `linac`, or an emitted `linac_kernels`), taking fla's arguments.

fla's Gated DeltaNet layer asks its kernel to compute in-kernel what linac's op takes computed:
the L2 norm of q and k (fla's l2norm: x / sqrt(sum x^2 + 1e-6), in fp32), beta = sigmoid(b) (twice
that with allow_neg_eigval) and the log-decay g = -exp(A_log) * softplus(a + dt_bias) (fla's
naive_gdn_gate); here they run in torch before the op, so autograd carries their gradients. fla
lays its states out [N, H, V, K] with state_v_first: they are transposed to linac's [N, H, K, V]
and back. Used by bench/fla_model_bench.py --kernels linac.
"""
import importlib

import torch
import torch.nn.functional as F


def linac_ops():
    try:
        return importlib.import_module("linac.ops")
    except ImportError:
        return importlib.import_module("linac_kernels.ops")


def _l2norm(x, eps=1e-6):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).sum(-1, keepdim=True) + eps)).to(x.dtype)


def _state_in(state, state_v_first):
    if state is None or not state_v_first:
        return state
    return state.transpose(-1, -2).contiguous()


def _state_out(state, state_v_first):
    return state.transpose(-1, -2) if state is not None and state_v_first else state


def chunk_gla(q, k, v, g, scale=None, initial_state=None, output_final_state=False, state_v_first=False,
              cu_seqlens=None, **unused):
    o, state = linac_ops().chunk_gla(q.contiguous(), k.contiguous(), v.contiguous(), g.float().contiguous(),
                                     scale=scale, initial_state=_state_in(initial_state, state_v_first),
                                     output_final_state=output_final_state, cu_seqlens=cu_seqlens)
    return o, _state_out(state, state_v_first)


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None, output_final_state=False,
                           use_qk_l2norm_in_kernel=False, use_beta_sigmoid_in_kernel=False,
                           allow_neg_eigval=False, state_v_first=False, cu_seqlens=None,
                           use_gate_in_kernel=False, A_log=None, dt_bias=None, **unused):
    if use_qk_l2norm_in_kernel:
        q, k = _l2norm(q), _l2norm(k)
    if use_beta_sigmoid_in_kernel:
        beta = torch.sigmoid(beta.float()) * (2.0 if allow_neg_eigval else 1.0)
    g = g.float()
    if use_gate_in_kernel:
        if dt_bias is not None:
            g = g + dt_bias.float()
        g = -A_log.float().exp() * F.softplus(g)
    o, state = linac_ops().chunk_gated_deltanet(
        q.contiguous(), k.contiguous(), v.contiguous(), g.contiguous(), beta.float().contiguous(), scale=scale,
        initial_state=_state_in(initial_state, state_v_first), output_final_state=output_final_state,
        cu_seqlens=cu_seqlens)
    return o, _state_out(state, state_v_first)


def swap(fla_layer_module):
    """Points the fla layer modules' kernel names at the functions above; fla_layer_module(name)
    imports fla.layers.<name> (bench/fla_model_bench.py's fla_layer, without fla.layers' __init__)."""
    fla_layer_module("gla").chunk_gla = chunk_gla
    fla_layer_module("gated_deltanet").chunk_gated_delta_rule = chunk_gated_delta_rule


def check():
    """The adapters on the CPU against fla's own torch references (fla.ops.*.naive and
    naive_gdn_gate; fla's l2norm written out): fla's arguments in, fla's results out. Prints the
    rel-RMS of o and the final state per layer; exits 1 above 1e-5."""
    import sys
    from fla.ops.gated_delta_rule.gate import naive_gdn_gate
    from fla.ops.gated_delta_rule.naive import naive_recurrent_gated_delta_rule
    from fla.ops.gla.naive import naive_recurrent_gla

    def rel(a, b):
        return ((a.double() - b.double()).pow(2).mean().sqrt() / b.double().pow(2).mean().sqrt()).item()

    torch.manual_seed(0)
    B, T, H, K, V = 2, 70, 2, 16, 32
    q, k, v = torch.randn(B, T, H, K), torch.randn(B, T, H, K), torch.randn(B, T, H, V)
    a, b = torch.randn(B, T, H), torch.randn(B, T, H)
    A_log, dt_bias = torch.rand(H).log(), torch.randn(H)
    h0 = torch.randn(B, H, V, K)  # state_v_first
    o, ht = chunk_gated_delta_rule(q, k, v, a, b, initial_state=h0, output_final_state=True,
                                   use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                                   allow_neg_eigval=True, state_v_first=True, use_gate_in_kernel=True,
                                   A_log=A_log, dt_bias=dt_bias)
    want_o, want_ht = naive_recurrent_gated_delta_rule(
        _l2norm(q), _l2norm(k), v, 2.0 * torch.sigmoid(b), naive_gdn_gate(a, A_log, dt_bias),
        initial_state=h0.transpose(-1, -2), output_final_state=True)
    errors = {"gated_deltanet o": rel(o, want_o), "gated_deltanet ht": rel(ht, want_ht.transpose(-1, -2))}
    gk = F.logsigmoid(torch.randn(B, T, H, K)) / 16
    h0 = torch.randn(B, H, V, K)
    o, ht = chunk_gla(q, k, v, gk, initial_state=h0, output_final_state=True, state_v_first=True)
    want_o, want_ht = naive_recurrent_gla(q, k, v, gk, initial_state=h0.transpose(-1, -2), output_final_state=True)
    errors.update({"gla o": rel(o, want_o), "gla ht": rel(ht, want_ht.transpose(-1, -2))})
    for name, e in errors.items():
        print(f"fla_swap check: {name} rel-RMS {e:.2e}")
    sys.exit(1 if max(errors.values()) > 1e-5 else 0)


if __name__ == "__main__":
    check()
