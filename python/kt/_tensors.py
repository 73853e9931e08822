# SPDX-License-Identifier: MIT
"""Torch tensors and numpy arrays as kt op arguments: zero-copy when they
are contiguous CPU buffers of a dtype kt reads, a converted copy otherwise,
and a ValueError/TypeError naming the argument for what cannot work."""
from . import _lib as L

try:
    import torch
except ImportError:         # numpy-only installs work too
    torch = None
try:
    import numpy as np
except ImportError:
    np = None

if torch is not None:
    T_KT = {torch.float32: L.DTYPE_F32, torch.bfloat16: L.DTYPE_BF16,
            torch.int32: L.DTYPE_I32, torch.int64: L.DTYPE_I64}
    TorchTensor = torch.Tensor
else:
    T_KT = {}
    TorchTensor = ()
if np is not None:
    N_KT = {np.dtype(np.float32): L.DTYPE_F32, np.dtype(np.int32): L.DTYPE_I32,
            np.dtype(np.int64): L.DTYPE_I64}
    NdArray = np.ndarray
else:
    N_KT = {}
    NdArray = ()

FLOAT, INT = "float", "int"


def _bad_type(name, a):
    return TypeError("%s: expected a torch.Tensor or numpy.ndarray, got %s"
                     % (name, type(a).__name__))


def _torch_arg(t, name, kind):
    if t.device.type != "cpu":
        raise ValueError("%s: tensor is on %s; kt computes on the CPU (move "
                         "it with .cpu())" % (name, t.device))
    dt = t.dtype
    if kind is FLOAT:
        if not dt.is_floating_point:
            raise TypeError("%s: dtype %s, expected a floating point "
                            "tensor" % (name, dt))
    elif dt.is_floating_point or dt.is_complex or dt == torch.bool:
        raise TypeError("%s: dtype %s, expected an integer tensor"
                        % (name, dt))
    return dt


def hidden_in(x, name="hidden_states"):
    """(tensor kt reads, kt dtype, output dtype of the caller)."""
    if isinstance(x, TorchTensor):
        dt = _torch_arg(x, name, FLOAT)
        if dt is torch.bfloat16 or dt is torch.float32:
            return (x if x.is_contiguous() else x.contiguous()), T_KT[dt], dt
        return x.to(torch.float32).contiguous(), L.DTYPE_F32, dt
    if isinstance(x, NdArray):
        if x.dtype.kind != "f":
            raise TypeError("%s: dtype %s, expected a floating point array"
                            % (name, x.dtype))
        if x.dtype == np.float32:
            return np.ascontiguousarray(x), L.DTYPE_F32, x.dtype
        return np.ascontiguousarray(x, dtype=np.float32), L.DTYPE_F32, x.dtype
    raise _bad_type(name, x)


def ids_in(a, name="topk_ids"):
    if isinstance(a, TorchTensor):
        dt = _torch_arg(a, name, INT)
        if dt is torch.int64 or dt is torch.int32:
            return (a if a.is_contiguous() else a.contiguous()), T_KT[dt]
        return a.to(torch.int64).contiguous(), L.DTYPE_I64
    if isinstance(a, NdArray):
        if a.dtype.kind not in "iu":
            raise TypeError("%s: dtype %s, expected an integer array"
                            % (name, a.dtype))
        k = N_KT.get(a.dtype)
        if k is None:
            return np.ascontiguousarray(a, dtype=np.int64), L.DTYPE_I64
        return np.ascontiguousarray(a), k
    raise _bad_type(name, a)


def weights_in(a, name="topk_weights"):
    if isinstance(a, TorchTensor):
        dt = _torch_arg(a, name, FLOAT)
        if dt is torch.float32:
            return a if a.is_contiguous() else a.contiguous()
        return a.to(torch.float32).contiguous()
    if isinstance(a, NdArray):
        if a.dtype.kind != "f":
            raise TypeError("%s: dtype %s, expected a floating point array"
                            % (name, a.dtype))
        return np.ascontiguousarray(a, dtype=np.float32)
    raise _bad_type(name, a)


def ptr(a):
    if isinstance(a, TorchTensor):
        return a.data_ptr()
    return a.ctypes.data


def shape(a):
    return tuple(a.shape)


def new_out(like, shape_, kt_dtype):
    """An output buffer of the caller's kind: torch in, torch out."""
    if isinstance(like, TorchTensor):
        dt = torch.bfloat16 if kt_dtype == L.DTYPE_BF16 else torch.float32
        return torch.empty(shape_, dtype=dt)
    return np.empty(shape_, dtype=np.float32)


def out_in(out, x, name="out"):
    """A caller's output buffer: written in place, so never copied."""
    if isinstance(out, TorchTensor):
        if not isinstance(x, TorchTensor):
            raise TypeError("%s: a torch.Tensor, but hidden_states is not"
                            % name)
        dt = _torch_arg(out, name, FLOAT)
        if dt not in (torch.float32, torch.bfloat16):
            raise TypeError("%s: dtype %s; kt writes float32 or bfloat16"
                            % (name, dt))
    elif isinstance(out, NdArray):
        if not isinstance(x, NdArray):
            raise TypeError("%s: a numpy array, but hidden_states is not"
                            % name)
        if out.dtype != np.float32:
            raise TypeError("%s: dtype %s; kt writes float32 into arrays"
                            % (name, out.dtype))
        if not out.flags.writeable:
            raise ValueError("%s: array is read-only" % name)
    else:
        raise _bad_type(name, out)
    if tuple(out.shape) != tuple(x.shape):
        raise ValueError("%s: shape %s, expected %s (as hidden_states)"
                         % (name, tuple(out.shape), tuple(x.shape)))
    contiguous = (out.is_contiguous() if isinstance(out, TorchTensor)
                  else out.flags.c_contiguous)
    if not contiguous:
        raise ValueError("%s: not contiguous; kt writes the output in place"
                         % name)
    if isinstance(out, TorchTensor):
        return out, T_KT[out.dtype]
    return out, L.DTYPE_F32


def to_kind(y, like_dtype):
    """Convert kt's output to the dtype the caller's input had."""
    if isinstance(y, TorchTensor):
        return y if y.dtype == like_dtype else y.to(like_dtype)
    return y if y.dtype == like_dtype else y.astype(like_dtype)


def mask_bits(mask, n):
    """A bool mask of n experts as kt's bitmap: a ctypes u64 array or None."""
    if isinstance(mask, TorchTensor):
        vals = mask.detach().cpu().reshape(-1).tolist()
    elif isinstance(mask, NdArray):
        vals = mask.reshape(-1).tolist()
    else:
        vals = list(mask)
    if len(vals) != n:
        raise ValueError("gpu_experts_mask: %d entries, expected num_experts "
                         "= %d" % (len(vals), n))
    words = (L.c_uint64 * ((n + 63) // 64))()
    for i, v in enumerate(vals):
        if v:
            words[i // 64] |= 1 << (i % 64)
    return words if any(words) else None
