"""Whole linear-attention layers as torch.nn.Modules, built as linac's runtime builds them, with
its parameter names: LinearAttention(variant, hidden_size, layer_idx=0, num_layers=1) for a
variant of linac.ops or one that linac.compile built in this process, and its inference cache
(LinearAttention.make_cache -> LayerCache). help(linac._kernels.nn) describes the layer's steps
and parameters.
"""
import importlib

from . import _compile
from ._kernels import nn as _installed

LayerCache = _installed.LayerCache


class LinearAttention(_installed.LinearAttention):
    __doc__ = _installed.LinearAttention.__doc__

    @staticmethod
    def _package(variant):
        """The package that has `variant`: this installation's, or the one linac.compile built."""
        if variant in _compile._compiled:
            return importlib.import_module(".nn", _compile._compiled[variant][1].__package__)
        return _installed

    @staticmethod
    def _resolve(variant):
        return LinearAttention._package(variant).load_layer(variant)

    @staticmethod
    def _op(name):
        return LinearAttention._package(name).LinearAttention._op(name)


def variants():
    """The variants of linac.ops and those linac.compile built in this process."""
    return sorted(set(_installed.variants()) | set(_compile._compiled))
