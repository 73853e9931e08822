# SPDX-License-Identifier: MIT
"""Find libkt and declare the C API kt's Python package uses (ctypes).

Search order: $KT_LIBRARY, a libkt.so next to this package, build/libkt.so of
the source tree the package sits in, pkg-config's libdir for "kt", then the
dynamic linker's own search.
"""
import ctypes
import ctypes.util
import errno
import os
import subprocess

c_int, c_uint32, c_int32 = ctypes.c_int, ctypes.c_uint32, ctypes.c_int32
c_uint64, c_uint8, c_size_t = ctypes.c_uint64, ctypes.c_uint8, ctypes.c_size_t
c_void_p, c_char_p, POINTER = ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER

KT_MAX_NODES = 64
KT_MOE_MAX_TOPK = 16
KT_MOE_MAX_TOKENS = 65536

DTYPE_F32, DTYPE_BF16, DTYPE_F16, DTYPE_I32, DTYPE_I64 = 0, 1, 2, 3, 4
QUANT_INT8, QUANT_INT4, QUANT_BF16, QUANT_FP8 = 1, 2, 3, 4
QUANT_Q8_0, QUANT_Q4_K, QUANT_Q5_K, QUANT_Q6_K = 5, 6, 7, 8  # GGUF blocks kept (Documentation/formats.md)
QUANT_NAMES = {QUANT_INT8: "int8", QUANT_INT4: "int4", QUANT_BF16: "bf16",
               QUANT_FP8: "fp8", QUANT_Q8_0: "q8_0", QUANT_Q4_K: "q4_k",
               QUANT_Q5_K: "q5_k", QUANT_Q6_K: "q6_k"}


class CtxOpts(ctypes.Structure):
    _fields_ = [("sz", c_size_t), ("threads", c_uint32),
                ("n_nodes", c_uint32), ("nodes", c_int32 * KT_MAX_NODES),
                ("isa", c_int), ("spin_us", c_uint32), ("log_fn", c_void_p),
                ("log_arg", c_void_p), ("flags", c_uint32),
                ("log_level", c_uint32), ("gpu_mask", c_uint64),
                ("reserved", c_uint32 * 12)]


class SysInfo(ctypes.Structure):
    _fields_ = [("cpu_flags", c_uint32), ("cpu_model", ctypes.c_char * 64),
                ("best_isa", c_int), ("n_nodes", c_uint32),
                ("node_ids", c_int32 * KT_MAX_NODES),
                ("node_cores", c_uint32 * KT_MAX_NODES),
                ("node_mem_mb", c_uint64 * KT_MAX_NODES),
                ("n_hpage_sizes", c_uint32), ("hpage_kb", c_uint64 * 4),
                ("hpage_free", c_uint64 * 4), ("io_uring", ctypes.c_bool),
                ("cuda_driver", ctypes.c_bool), ("cuda_devices", c_int32),
                ("cuda_version", c_int32), ("cuda_kernels", ctypes.c_bool),
                ("cuda_why", ctypes.c_char * 55), ("reserved", c_uint32 * 2)]


class ExpertSrc(ctypes.Structure):
    _fields_ = [("gate", c_void_p), ("up", c_void_p), ("down", c_void_p),
                ("gate_bias", c_void_p), ("up_bias", c_void_p),
                ("down_bias", c_void_p)]


EXPERT_FN = ctypes.CFUNCTYPE(c_int, c_void_p, c_uint32, c_uint32,
                             POINTER(ExpertSrc))


class ModelDesc(ctypes.Structure):
    _fields_ = [("sz", c_size_t), ("hidden", c_uint32), ("inter", c_uint32),
                ("n_experts", c_uint32), ("n_layers", c_uint32),
                ("layer_ids", POINTER(c_int32)), ("src_dtype", c_int),
                ("quant", c_int), ("group_size", c_uint32),
                ("get_expert", EXPERT_FN), ("arg", c_void_p),
                ("expert_mask", POINTER(c_uint64)),
                ("layer_masks", POINTER(c_uint64)),
                ("down_quant", c_uint32), ("act", c_uint32),
                ("act_alpha", ctypes.c_float), ("act_limit", ctypes.c_float),
                ("desc_flags", c_uint32), ("reserved", c_uint32 * 1)]


class ModelOpts(ctypes.Structure):
    _fields_ = [("sz", c_size_t), ("flags", c_uint32),
                ("expert_mask", POINTER(c_uint64)), ("io_block", c_uint32),
                ("io_depth", c_uint32), ("reserved", c_uint32 * 6)]


class ModelInfo(ctypes.Structure):
    _fields_ = [("hidden", c_uint32), ("inter", c_uint32),
                ("n_experts", c_uint32), ("n_layers", c_uint32),
                ("quant", c_int), ("group_size", c_uint32),
                ("expert_bytes", c_uint64), ("resident_bytes", c_uint64),
                ("down_quant", c_uint32), ("act", c_uint32),
                ("act_alpha", ctypes.c_float), ("act_limit", ctypes.c_float),
                ("bias", c_uint32), ("reserved", c_uint32 * 3)]


class KtwInfo(ctypes.Structure):
    _fields_ = [("version_major", c_uint32), ("version_minor", c_uint32),
                ("quant", c_int), ("hidden", c_uint32), ("inter", c_uint32),
                ("n_experts", c_uint32), ("n_layers", c_uint32),
                ("group_size", c_uint32), ("top_k", c_uint32),
                ("expert_bytes", c_uint64), ("file_size", c_uint64),
                ("data_bytes", c_uint64), ("arch", ctypes.c_char * 32),
                ("hugetlbfs", c_int), ("down_quant", c_int),
                ("hidden_packed", c_uint32), ("inter_packed", c_uint32),
                ("act", c_uint32), ("act_alpha", ctypes.c_float),
                ("act_limit", ctypes.c_float), ("bias", c_uint32),
                ("reserved", c_uint32 * 1)]


class MoeArgs(ctypes.Structure):
    _fields_ = [("x", c_void_p), ("ids", c_void_p), ("w", c_void_p),
                ("y", c_void_p), ("tokens", c_uint32), ("top_k", c_uint32),
                ("layer", c_uint32), ("flags", c_uint32),
                ("x_dtype", c_uint8), ("ids_dtype", c_uint8),
                ("y_dtype", c_uint8), ("pad0", c_uint8), ("pad1", c_uint32),
                ("skip_mask", c_void_p), ("reserved", c_uint64 * 2)]


class Cqe(ctypes.Structure):
    _fields_ = [("user_data", c_uint64), ("res", c_int32),
                ("flags", c_uint32)]


class Ring(ctypes.Structure):
    """struct kt_ring: filled by kt_ring_init(), private to libkt."""
    _fields_ = [("sh", c_void_p), ("sqes", c_void_p), ("cqes", c_void_p),
                ("workers_asleep", c_void_p), ("ctx", c_void_p),
                ("sq_entries", c_uint32), ("cq_entries", c_uint32),
                ("sqe_tail", c_uint32), ("spin", c_uint32),
                ("eventfd", c_int32), ("reserved", c_uint32 * 7)]


assert ctypes.sizeof(MoeArgs) == 80  # as struct kt_sqe's 128 bytes need
assert ctypes.sizeof(ModelDesc) == 104


def _candidates():
    env = os.environ.get("KT_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libkt.so", "libkt.so.0"):
        yield os.path.join(here, name)
    yield os.path.join(here, "..", "..", "build", "libkt.so")
    try:
        libdir = subprocess.run(
            ["pkg-config", "--variable=libdir", "kt"], capture_output=True,
            text=True, timeout=10).stdout.strip()
        if libdir:
            yield os.path.join(libdir, "libkt.so.0")
    except (OSError, subprocess.SubprocessError):
        pass
    found = ctypes.util.find_library("kt")
    if found:
        yield found


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path)
            continue
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError("kt: libkt not found; set KT_LIBRARY to its path "
                      "(tried: %s)" % ", ".join(tried))


lib, path = _load()


def _fn(name, res, *args):
    f = getattr(lib, name)
    f.restype = res
    f.argtypes = list(args)
    return f


kt_ctx_create = _fn("kt_ctx_create", c_int, POINTER(CtxOpts),
                    POINTER(c_void_p))
kt_ctx_destroy = _fn("kt_ctx_destroy", None, c_void_p)
kt_ctx_isa = _fn("kt_ctx_isa", c_int, c_void_p)
kt_ctx_threads = _fn("kt_ctx_threads", ctypes.c_uint, c_void_p)
kt_isa_name = _fn("kt_isa_name", c_char_p, c_int)
kt_sysinfo_get = _fn("kt_sysinfo_get", c_int, POINTER(SysInfo))
kt_model_create = _fn("kt_model_create", c_int, c_void_p, POINTER(ModelDesc),
                      POINTER(c_void_p))
kt_model_open = _fn("kt_model_open", c_int, c_void_p, c_char_p,
                    POINTER(ModelOpts), POINTER(c_void_p))
kt_model_destroy = _fn("kt_model_destroy", None, c_void_p)
kt_model_get_info = _fn("kt_model_get_info", None, c_void_p,
                        POINTER(ModelInfo))
kt_model_layer_index = _fn("kt_model_layer_index", c_int, c_void_p, c_int32)
kt_model_layer_down_quant = _fn("kt_model_layer_down_quant", c_int, c_void_p,
                                ctypes.c_uint32)
kt_moe_forward = _fn("kt_moe_forward", c_int, c_void_p, c_void_p,
                     POINTER(MoeArgs))
kt_ktw_inspect = _fn("kt_ktw_inspect", c_int, c_char_p, POINTER(KtwInfo),
                     POINTER(c_int32), c_uint32)
kt_last_error = _fn("kt_last_error", c_char_p)
kt_ring_init = _fn("kt_ring_init", c_int, c_void_p, ctypes.c_uint,
                   POINTER(Ring))
kt_ring_exit = _fn("kt_ring_exit", None, POINTER(Ring))

# The exported twins of ring.h's inline helpers (liburing-ffi style). A
# libkt without them gets the blocking kt_moe_forward() path instead.
HAVE_RING = hasattr(lib, "kt_get_sqe")
if HAVE_RING:
    kt_get_sqe = _fn("kt_get_sqe", c_void_p, POINTER(Ring))
    kt_prep_moe = _fn("kt_prep_moe", None, c_void_p, c_void_p, c_uint32,
                      POINTER(MoeArgs), c_uint64)
    kt_prep_nop = _fn("kt_prep_nop", None, c_void_p, c_uint64)
    kt_submit = _fn("kt_submit", c_int, POINTER(Ring))
    kt_wait_cqe = _fn("kt_wait_cqe", c_int, POINTER(Ring),
                      POINTER(POINTER(Cqe)))
    kt_peek_cqe = _fn("kt_peek_cqe", c_int, POINTER(Ring),
                      POINTER(POINTER(Cqe)))
    kt_cqe_seen = _fn("kt_cqe_seen", None, POINTER(Ring))


def strerror(rc):
    """'-EINVAL (Invalid argument)' for a negative errno."""
    code = -rc
    return "-%s (%s)" % (errno.errorcode.get(code, str(code)),
                         os.strerror(code))


def last_error():
    msg = kt_last_error()
    return msg.decode(errors="replace") if msg else ""
