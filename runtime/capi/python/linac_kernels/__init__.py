"""linac's emitted kernels from PyTorch, called as fla's (flash-linear-attention) chunk_* ops are.

    from linac_kernels.ops import chunk_gated_deltanet
    o, final_state = chunk_gated_deltanet(q, k, v, g, beta, scale=None, initial_state=None,
                                          output_final_state=True, cu_seqlens=None)

linac_kernels.ops has one function per emitted variant: for a matrix state chunk_<variant>(q, k,
v, <gates>, scale=None, initial_state=None, output_final_state=False, cu_seqlens=None) ->
(o, final_state), for a vector state (HGRN) chunk_<variant>(x, g, initial_state=None,
output_final_state=False, cu_seqlens=None) -> (h, final_state), as fla's fused_recurrent_hgrn.
They run the torch.library ops linac::<variant>_fwd / linac::<variant>_bwd (CPU and, when the
library was built with it, CUDA; fake kernels for torch.compile; autograd through the backward
kernels). Each function's docstring gives its kind and the fla op it corresponds to.

Conventions (fla's, the recurrence of the package's kernels/common/recurrence.h):
  - layout [B, T, H, D]: q, k [B, T, H, K], v and o [B, T, H, V]; states [N, H, K, V], N = B, or
    the number of packed sequences with cu_seqlens (int64 offsets [N + 1] from 0 to T, B = 1);
    HGRN's x, g and h [B, T, D], its states [N, D];
  - g is the log-decay (fla's log-space g, <= 0): [B, T, H] for a scalar decay (Gated DeltaNet,
    Mamba-2), [B, T, H, K] for a diagonal one (GLA, HGRN-2, RWKV-6's w), [H] for a fixed one;
    beta [B, T, H] the delta rule's write strength; u [H, K] RWKV-6's bonus;
  - scale multiplies q; None means K ** -0.5, as in fla;
  - the readout is o_t = scale * S_t^T q_t (RWKV-6: scale * (S_{t-1}^T q_t + bonus)).

Where this differs from fla:
  - the gates are named by role (g, beta, u), not by fla's per-op names: fla's chunk_rwkv6(r, k,
    v, w, u) is chunk_rwkv6(q, k, v, g, u) here; fla's chunk_simple_gla(..., g_gamma=...) and
    chunk_retention (which derives the per-head decay from H itself) are a fixed decay, passed
    as g [H];
  - q, k and v (x) must be contiguous and share one dtype among float32, bfloat16 and float16
    (fla copies non-contiguous inputs; here they are refused, naming the argument); g, beta, u and
    initial_state are used in float32 (other floating dtypes are converted) and final_state is
    float32;
  - no use_qk_l2norm_in_kernel (normalise q and k before the call) and no head_first;
  - the backward is not itself differentiable (no double backward).

Bad arguments raise TypeError (a wrong type or dtype) or ValueError (shape, device, layout,
cu_seqlens), naming the argument.

linac_kernels.nn.LinearAttention(variant, hidden_size) is a whole layer of a variant (projections,
short convs, the spec's gates, the recurrence, the output norm and gate, o_proj) as a
torch.nn.Module with the parameter names of linac's runtime (help(linac_kernels.nn)).
"""
from . import _capi, nn, ops

__version__ = _capi.version()


def has_cuda():
    """True when the library was built with its CUDA backend (-DLINAC_KERNELS_CUDA=ON)."""
    return _capi.has_cuda()


__all__ = ["nn", "ops", "has_cuda", "__version__"]
