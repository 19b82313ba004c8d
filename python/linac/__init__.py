"""linac from Python: the kernels of every variant compiled into linac's generated/, called as
flash-linear-attention's chunk_* ops are, and on-demand compilation of new specs.

    import linac.ops
    o, final_state = linac.ops.chunk_gated_deltanet(q, k, v, g, beta, output_final_state=True)

    ops = linac.compile("my_variant.yaml")        # needs the `linac` compiler (MLIR) and CMake
    o, final_state = ops.chunk_my_variant(q, k, v, g, beta)

    layer = linac.nn.LinearAttention("gated_deltanet", hidden_size=1024)  # a whole layer

linac.ops has one function per variant; help(linac.ops) gives the conventions (layout, gates,
scale) and where they differ from fla's. linac.compile emits a spec's kernels with `linac emit`,
builds them (cached by the spec's text, the compiler's version and the backends) and returns the
module of its chunk_<variant> function.
"""
import importlib
from importlib.metadata import PackageNotFoundError, version

from ._compile import compile  # noqa: A004 (linac.compile is the name the issue and README use)

try:
    __version__ = version("linac")
except PackageNotFoundError:  # imported from a source tree, not installed
    __version__ = "unknown"

__all__ = ["compile", "nn", "ops"]


def __getattr__(name):
    # linac.ops and linac.nn load the kernels' shared library: only on first use.
    if name in ("nn", "ops"):
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'linac' has no attribute {name!r}")
