"""The package's C API (include/linac_kernels.h) through ctypes: the shared library, linac_tensor
views of torch tensors, and calls that turn a failed status into a Python exception.

The library is the one installed beside this file (CMake's LINAC_KERNELS_PYTHON), or the file
that the environment variable LINAC_KERNELS_LIBRARY names.
"""
import ctypes
import os
import sys

import torch

# linac_capi.h's enums and limits.
LINAC_OK, LINAC_INVALID_ARGUMENT, LINAC_UNSUPPORTED = 0, 1, 2
_DTYPES = {torch.float32: 0, torch.bfloat16: 1, torch.float16: 2, torch.int64: 3}
_DEVICES = {"cpu": 0, "cuda": 1}
MAX_DIMS = 4

# The element types q, k, v (and o and the gradients) may have; gates and states are float32.
VALUE_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class Tensor(ctypes.Structure):
    """linac_tensor: a view of a caller's memory (strides in elements)."""

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", ctypes.c_int),
        ("device", ctypes.c_int),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.c_int64 * MAX_DIMS),
        ("strides", ctypes.c_int64 * MAX_DIMS),
    ]


TensorPtr = ctypes.POINTER(Tensor)


def _library_path():
    override = os.environ.get("LINAC_KERNELS_LIBRARY")
    if override:
        return override
    name = {"darwin": "liblinac_kernels.dylib", "win32": "linac_kernels.dll"}.get(sys.platform, "liblinac_kernels.so")
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), name)


def _load():
    path = _library_path()
    if not os.path.exists(path):
        raise ImportError(
            f"linac_kernels: no shared library at {path}; install the package with CMake "
            "(LINAC_KERNELS_PYTHON=ON) or set LINAC_KERNELS_LIBRARY to liblinac_kernels.so")
    lib = ctypes.CDLL(path)
    lib.linac_last_error.restype = ctypes.c_char_p
    lib.linac_last_error.argtypes = []
    lib.linac_has_cuda.restype = ctypes.c_int
    lib.linac_has_cuda.argtypes = []
    lib.linac_version.restype = ctypes.c_char_p
    lib.linac_version.argtypes = []
    return lib


LIB = _load()


def function(name, parameters):
    """The C function `name` of the library, taking `parameters` (ctypes types) and the stream."""
    fn = getattr(LIB, name)
    fn.restype = ctypes.c_int
    fn.argtypes = list(parameters) + [ctypes.c_void_p]
    return fn


def view(t, name):
    """A linac_tensor over `t` (None -> NULL). Refuses what linac_tensor cannot describe, naming the
    argument; shape, layout and device agreement are the C API's checks."""
    if t is None:
        return None
    if t.dtype not in _DTYPES:
        raise TypeError(f"{name} is {t.dtype}; the kernels take "
                        f"{', '.join(str(d) for d in VALUE_DTYPES)} (and int64 cu_seqlens)")
    if t.device.type not in _DEVICES:
        raise ValueError(f"{name} is on {t.device}; the kernels run on cpu or cuda")
    if t.dim() > MAX_DIMS:
        raise ValueError(f"{name} has {t.dim()} dims; at most {MAX_DIMS}")
    out = Tensor()
    out.data = t.data_ptr()
    out.dtype = _DTYPES[t.dtype]
    out.device = _DEVICES[t.device.type]
    out.ndim = t.dim()
    for i, (size, stride) in enumerate(zip(t.shape, t.stride())):
        out.shape[i] = size
        out.strides[i] = stride
    return out


def stream(device):
    """The current CUDA stream of `device` as a void*, None on the CPU."""
    if device.type != "cuda":
        return None
    return ctypes.c_void_p(torch.cuda.current_stream(device).cuda_stream)


def call(fn, args):
    """Calls `fn` with `args` (linac_tensor or None, floats, the stream); a failed status raises
    ValueError (a bad argument, whose message names it) or RuntimeError."""
    refs = [ctypes.byref(a) if isinstance(a, Tensor) else a for a in args]
    status = fn(*refs)
    if status == LINAC_OK:
        return
    message = LIB.linac_last_error().decode()
    if status == LINAC_INVALID_ARGUMENT:
        raise ValueError(message)
    raise RuntimeError(message)


def has_cuda():
    """True when the library was built with its CUDA backend."""
    return bool(LIB.linac_has_cuda())


def version():
    return LIB.linac_version().decode()
