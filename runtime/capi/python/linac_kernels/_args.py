"""Argument handling shared by the fla-style functions (_recurrence.py, _scan.py): what the C API
cannot check as well (Python types, devices of one type but another index, meta tensors), and the
conversions to the C API's dtypes. Every message starts with the Python function's name and names
the argument."""
import contextlib

import torch

from . import _capi


def check_first(function, name, t):
    """The call's first tensor (q or x): a tensor of one of the kernels' element types."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{function}: {name} is {type(t).__name__}, expected a torch.Tensor")
    if t.dtype not in _capi.VALUE_DTYPES:
        raise TypeError(f"{function}: {name} is {t.dtype}; the kernels take "
                        f"{', '.join(str(d) for d in _capi.VALUE_DTYPES)}")


def check_devices(function, first_name, first, named, optional=("initial_state", "cu_seqlens")):
    """Every tensor of `named` ({name: tensor}) on first's device; those named in `optional` may
    be None."""
    for name, t in named.items():
        if t is None and name in optional:
            continue
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{function}: {name} is {type(t).__name__}, expected a torch.Tensor")
        if t.device != first.device:
            raise ValueError(f"{function}: {name} is on {t.device} but {first_name} is on {first.device}; "
                             f"put every tensor on {first_name}'s device")


def as_float32(function, name, t):
    """Gates and states are float32 in the kernels; other floating dtypes are converted (the
    gradient flows back in the caller's dtype). None stays None."""
    if t is None:
        return None
    if not t.dtype.is_floating_point:
        raise TypeError(f"{function}: {name} is {t.dtype}, expected a floating-point tensor (float32)")
    return t.to(torch.float32)


def as_offsets(function, cu_seqlens):
    """cu_seqlens as int64 (fla's LongTensor; int32 offsets are converted). None stays None."""
    if cu_seqlens is None:
        return None
    if cu_seqlens.dtype.is_floating_point or cu_seqlens.dtype.is_complex or cu_seqlens.dtype == torch.bool:
        raise TypeError(f"{function}: cu_seqlens is {cu_seqlens.dtype}, expected an integer tensor (int64)")
    return cu_seqlens.to(torch.int64)


def require_dims(function, name, t, dims):
    if t.dim() != len(dims):
        raise ValueError(f"{function}: {name} has shape {list(t.shape)}, expected [{', '.join(dims)}]")


def num_seqs(batch, cu_seqlens):
    """N: the batch, or the number of packed sequences."""
    return batch if cu_seqlens is None else cu_seqlens.shape[0] - 1


def device_guard(device):
    """The C API runs on the current CUDA device: make it the tensors'."""
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()
