"""fla-style functions over linac's kernels, one per variant compiled into linac's generated/
(built into this installation by `pip install .`): chunk_<variant>(q, k, v, <gates>, scale=None,
initial_state=None, output_final_state=False, cu_seqlens=None) -> (o, final_state) for a matrix
state, chunk_<variant>(x, g, ...) for a vector state (HGRN). Each function's docstring gives its
kind and the fla op it corresponds to.

SPEC_SHA256 maps each variant to the sha256 of the spec it was compiled from. The conventions
(layout [B, T, H, D], log-space gates, scale) and where they differ from fla's are those of
linac's emitted packages, which this installation is one of: help(linac._kernels).
"""
from ._kernels.ops import *  # noqa: F401,F403 (the generated functions are this module's API)
from ._kernels.ops import SPEC_SHA256, __all__  # noqa: F401
