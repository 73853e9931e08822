# SPDX-License-Identifier: MIT
"""KTMoEWrapper: KT-Kernel's class of the same name over kt, so a serving
stack switches with one changed import. Documentation/python.md has the
argument-by-argument mapping."""
import ctypes
import glob
import os
import threading

from . import _ctx as C
from . import _lib as L
from . import _tensors as X

# KT-Kernel's method names -> kt quantization; they run on whatever ISA the
# CPU has (kt picks AMX, AVX-512, AVX-VNNI or AVX2 at run time).
# FP8, FP8_PERCHANNEL and RAWINT4 read the .ktw that `kt convert --method
# fp8` / `--method int4` makes of such a checkpoint: the file keeps the
# checkpoint's values and says which scales it has.
METHODS = {"AMXINT8": L.QUANT_INT8, "AMXINT4": L.QUANT_INT4,
           "BF16": L.QUANT_BF16, "AMXBF16": L.QUANT_BF16,
           "INT8": L.QUANT_INT8, "INT4": L.QUANT_INT4,
           "FP8": L.QUANT_FP8, "FP8_PERCHANNEL": L.QUANT_FP8,
           "RAWINT4": L.QUANT_INT4}
MISSING = {
    "LLAMAFILE": "GGUF weights and llamafile kernels",
    "MOE_INT4": "KT-Kernel's portable MOE_INT4 layout (use AMXINT4: kt "
                "runs it on any ISA)",
    "MOE_INT8": "KT-Kernel's portable MOE_INT8 layout (use AMXINT8: kt "
                "runs it on any ISA)",
}


def _pos_int(name, v, lo=1):
    if isinstance(v, bool) or not isinstance(v, int):
        try:
            import operator
            v = operator.index(v)
        except TypeError:
            raise TypeError("%s: expected an int, got %s"
                            % (name, type(v).__name__)) from None
    if v < lo:
        raise ValueError("%s: %d, must be at least %d" % (name, v, lo))
    return v


def _is_mask(v):
    """Per-expert flags rather than a count: a tensor, array or list."""
    if v is None or isinstance(v, int):
        return False
    nd = getattr(v, "ndim", None)
    return nd > 0 if nd is not None else isinstance(v, (list, tuple))


class KTMoEWrapper:
    """The routed experts of one MoE layer, computed by kt on the CPU."""

    def __init__(self, layer_idx, num_experts, num_experts_per_tok,
                 hidden_size, moe_intermediate_size, num_gpu_experts=0,
                 cpuinfer_threads=0, threadpool_count=1, weight_path=None,
                 chunked_prefill_size=512, cpu_save=False,
                 max_deferred_experts_per_token=None, method="AMXINT4",
                 gpu_experts_mask=None, numa_nodes=None):
        self.layer_idx = _pos_int("layer_idx", layer_idx, 0)
        self.num_experts = _pos_int("num_experts", num_experts)
        self.num_experts_per_tok = _pos_int("num_experts_per_tok",
                                            num_experts_per_tok)
        self.hidden_size = _pos_int("hidden_size", hidden_size)
        self.moe_intermediate_size = _pos_int("moe_intermediate_size",
                                              moe_intermediate_size)
        if self.num_experts_per_tok > min(self.num_experts,
                                          L.KT_MOE_MAX_TOPK):
            raise ValueError("num_experts_per_tok: %d, must be at most "
                             "num_experts (%d) and %d"
                             % (self.num_experts_per_tok, self.num_experts,
                                L.KT_MOE_MAX_TOPK))
        for name in ("hidden_size", "moe_intermediate_size"):
            # kt pads multiples of 32 to its tiles (GPT-OSS's 2880)
            if getattr(self, name) % 32:
                raise ValueError("%s: %d, kt needs a multiple of 32"
                                 % (name, getattr(self, name)))
        if method in MISSING:
            raise NotImplementedError("method %r: kt has no %s yet"
                                      % (method, MISSING[method]))
        if method not in METHODS:
            raise NotImplementedError(
                "method %r: unknown; kt offers %s"
                % (method, ", ".join(sorted(METHODS))))
        self.method = method
        self.quant = METHODS[method]
        if max_deferred_experts_per_token:
            raise NotImplementedError(
                "max_deferred_experts_per_token=%r: kt has no deferred "
                "experts yet (use 0 or None)" % max_deferred_experts_per_token)
        self.max_deferred_experts_per_token = 0
        # newer KT-Kernel passes a mask where older passed a count
        if gpu_experts_mask is None and _is_mask(num_gpu_experts):
            gpu_experts_mask, num_gpu_experts = num_gpu_experts, 0
        if gpu_experts_mask is None:
            n = _pos_int("num_gpu_experts", num_gpu_experts or 0, 0)
            if n > self.num_experts:
                raise ValueError("num_gpu_experts: %d > num_experts (%d)"
                                 % (n, self.num_experts))
            gpu_experts_mask = [i < n for i in range(self.num_experts)]
        # experts on the GPU are neither loaded nor run here, as in
        # KT-Kernel; kt has no GPU backend yet, so the caller runs them
        self._mask = X.mask_bits(gpu_experts_mask, self.num_experts)
        self.num_gpu_experts = sum(bin(w).count("1")
                                   for w in (self._mask or []))
        self.weight_path = weight_path
        self.chunked_prefill_size = chunked_prefill_size
        self.cpu_save = cpu_save
        self._ctx = C.get_ctx(cpuinfer_threads, threadpool_count, numa_nodes)
        self._model = None
        self._model_key = None
        self._layer = 0
        self._p2l = None
        self._pending = None
        self._args = L.MoeArgs()
        self._args_p = ctypes.byref(self._args)

    # ---- weights ----------------------------------------------------------

    def _ktw_path(self):
        p = self.weight_path
        if not p:
            raise ValueError("weight_path: not set; load_weights() reads a "
                             ".ktw file (or use load_weights_from_tensors)")
        if os.path.isdir(p):
            files = sorted(glob.glob(os.path.join(p, "*.ktw")))
            if not files:
                raise ValueError("weight_path: no .ktw file in %s (make one "
                                 "with `kt convert`)" % p)
            want = L.QUANT_NAMES[self.quant]
            match = [f for f in files if self._ktw_quant(f) == self.quant]
            if len(match) != 1:
                raise ValueError("weight_path: %s holds %d %s .ktw files "
                                 "(%s); name one file"
                                 % (p, len(match), want, ", ".join(files)))
            return match[0]
        if not os.path.exists(p):
            raise ValueError("weight_path: %s does not exist" % p)
        return p

    @staticmethod
    def _ktw_quant(path):
        info = L.KtwInfo()
        if L.kt_ktw_inspect(os.fsencode(path), ctypes.byref(info), None, 0):
            return None
        return info.quant

    def _check_ktw(self, path):
        info = L.KtwInfo()
        rc = L.kt_ktw_inspect(os.fsencode(path), ctypes.byref(info), None, 0)
        if rc:
            raise ValueError("weight_path: %s: %s %s"
                             % (path, L.strerror(rc), L.last_error()))
        if info.quant != self.quant:
            raise ValueError("weight_path: %s is %s, but method %s needs %s"
                             % (path, L.QUANT_NAMES.get(info.quant, "?"),
                                self.method, L.QUANT_NAMES[self.quant]))
        got = (info.hidden, info.inter, info.n_experts)
        want = (self.hidden_size, self.moe_intermediate_size,
                self.num_experts)
        if got != want:
            raise ValueError("weight_path: %s has hidden/inter/experts %s, "
                             "the wrapper %s" % (path, got, want))

    def _set_p2l(self, p2l):
        if p2l is None:
            return None
        vals = [int(v) for v in (p2l.tolist() if hasattr(p2l, "tolist")
                                 else p2l)]
        if len(vals) != self.num_experts or sorted(vals) != list(
                range(self.num_experts)):
            raise ValueError("physical_to_logical_map: expected a "
                             "permutation of 0..%d" % (self.num_experts - 1))
        return vals

    def load_weights(self, physical_to_logical_map=None):
        """Load this layer from weight_path (a .ktw file or a folder)."""
        vals = self._set_p2l(physical_to_logical_map)
        path = self._ktw_path()
        self._check_ktw(path)
        self._drop_model()
        model, key = C.open_model(path, self._mask)
        idx = L.kt_model_layer_index(model, self.layer_idx)
        if idx < 0:
            C.release_model(key)
            raise ValueError("layer_idx: %d is not a MoE layer of %s"
                             % (self.layer_idx, path))
        self._model, self._model_key, self._layer = model, key, idx
        self._p2l = None
        if vals is not None and vals != list(range(self.num_experts)):
            # the file holds logical experts; routing picks physical ones
            if X.torch is not None:
                self._p2l = X.torch.tensor(vals, dtype=X.torch.int64)
            else:
                self._p2l = X.np.array(vals, dtype=X.np.int64)

    def load_weights_from_tensors(self, gate, up, down,
                                  physical_to_logical_map=None):
        """Quantize and pack gate/up [E][I][H] and down [E][H][I] (bf16,
        f16 or f32; torch or numpy) with kt_model_create()."""
        E, H, I = (self.num_experts, self.hidden_size,
                   self.moe_intermediate_size)
        vals = self._set_p2l(physical_to_logical_map)
        named = (("gate", gate, (E, I, H)), ("up", up, (E, I, H)),
                 ("down", down, (E, H, I)))
        for name, t, shp in named:
            if not hasattr(t, "shape"):
                raise X._bad_type(name, t)
            if X.shape(t) != shp:
                raise ValueError("%s: shape %s, expected %s"
                                 % (name, X.shape(t), shp))
        got = [self._weight_src(n, t) for n, t, _ in named]
        if len({d for _, d in got}) != 1:
            # one source dtype per model: mixed inputs meet at f32
            got = [self._weight_src(n, t, True) for n, t, _ in named]
        srcs, dtype = [a for a, _ in got], got[0][1]
        elsz = 4 if dtype == L.DTYPE_F32 else 2
        per = H * I * elsz
        base = [X.ptr(a) for a in srcs]
        order = vals or list(range(E))
        err = []

        def get_expert(arg, layer, e, src):
            try:
                off = order[e] * per
                s = src[0]
                s.gate, s.up, s.down = (base[0] + off, base[1] + off,
                                        base[2] + off)
                return 0
            except Exception as ex:      # never unwind through C
                err.append(ex)
                return -22

        cb = L.EXPERT_FN(get_expert)
        lid = (L.c_int32 * 1)(self.layer_idx)
        d = L.ModelDesc()
        d.sz = ctypes.sizeof(d)
        d.hidden, d.inter, d.n_experts, d.n_layers = H, I, E, 1
        d.layer_ids = lid
        d.src_dtype, d.quant = dtype, self.quant
        d.get_expert = cb
        if self._mask is not None:
            d.expert_mask = ctypes.cast(self._mask,
                                        ctypes.POINTER(L.c_uint64))
        m = ctypes.c_void_p()
        rc = L.kt_model_create(self._ctx, ctypes.byref(d), ctypes.byref(m))
        if err:
            raise err[0]
        if rc:
            raise C.KtError("kt_model_create", rc)
        self._drop_model()
        self._model, self._model_key, self._layer = m, None, 0
        self._p2l = None

    @staticmethod
    def _weight_src(name, t, force_f32=False):
        if isinstance(t, X.TorchTensor):
            X._torch_arg(t, name, X.FLOAT)
            t = t.detach()
            if not force_f32 and t.dtype == X.torch.bfloat16:
                return t.contiguous(), L.DTYPE_BF16
            if not force_f32 and t.dtype == X.torch.float16:
                return t.contiguous(), L.DTYPE_F16
            return t.to(X.torch.float32).contiguous(), L.DTYPE_F32
        if isinstance(t, X.NdArray):
            if t.dtype.kind != "f":
                raise TypeError("%s: dtype %s, expected floating point"
                                % (name, t.dtype))
            if not force_f32 and t.dtype == X.np.float16:
                return X.np.ascontiguousarray(t), L.DTYPE_F16
            return X.np.ascontiguousarray(t, dtype=X.np.float32), L.DTYPE_F32
        raise X._bad_type(name, t)

    def _drop_model(self):
        if self._pending is not None:
            raise RuntimeError("layer %d: a forward is in flight; call "
                               "sync_forward() first" % self.layer_idx)
        if self._model is None:
            return
        if self._model_key is not None:
            C.release_model(self._model_key)
        else:
            L.kt_model_destroy(self._model)
        self._model = self._model_key = None

    def __del__(self):
        # a dropped wrapper frees its packed weights; at interpreter exit
        # the process's exit frees them, and a layer still in flight keeps
        # its model (freeing it under the workers would be worse)
        try:
            import sys
            if not sys.is_finalizing() and self._pending is None:
                self._drop_model()
        except Exception:
            pass

    def close(self):
        """Release this layer's weights (a shared .ktw model when the last
        wrapper of it closes)."""
        self._drop_model()

    # ---- forward ----------------------------------------------------------

    def submit_forward(self, hidden_states, topk_ids, topk_weights,
                       cuda_stream=None, out=None):
        """Start the layer; sync_forward() returns its output."""
        if cuda_stream is not None:
            raise ValueError("cuda_stream: kt has no GPU backend yet; pass "
                             "None and keep the tensors on the CPU")
        if self._model is None:
            raise RuntimeError("layer %d: no weights; call load_weights() or "
                               "load_weights_from_tensors() first"
                               % self.layer_idx)
        if self._pending is not None:
            raise RuntimeError("layer %d: submit_forward() twice without "
                               "sync_forward()" % self.layer_idx)
        x, xdt, orig_dt = X.hidden_in(hidden_states)
        H = self.hidden_size
        xs = X.shape(x)
        if not xs or xs[-1] != H:
            raise ValueError("hidden_states: shape %s, last dimension must "
                             "be hidden_size = %d" % (xs, H))
        tokens = 1
        for n in xs[:-1]:
            tokens *= n
        ids, idt = X.ids_in(topk_ids)
        w = X.weights_in(topk_weights)
        ish = X.shape(ids)
        k = ish[-1] if ish else 0
        if len(ish) < 1 or k < 1 or k > L.KT_MOE_MAX_TOPK or \
                ish[:-1] != xs[:-1] and (len(ish) != 2 or ish[0] != tokens):
            raise ValueError("topk_ids: shape %s, expected (%d, k) with k "
                             "1..%d" % (ish, tokens, L.KT_MOE_MAX_TOPK))
        if X.shape(w) != ish:
            raise ValueError("topk_weights: shape %s, expected %s (as "
                             "topk_ids)" % (X.shape(w), ish))
        if tokens < 1 or tokens > L.KT_MOE_MAX_TOKENS:
            raise ValueError("hidden_states: %d tokens, kt takes 1..%d per "
                             "call" % (tokens, L.KT_MOE_MAX_TOKENS))
        if self._p2l is not None:
            ids, idt = self._remap(ids), L.DTYPE_I64
        if out is not None:
            y, ydt = X.out_in(out, hidden_states)
        else:
            ydt = xdt
            y = X.new_out(x, xs, ydt)
        a = self._args
        a.x, a.ids, a.w, a.y = X.ptr(x), X.ptr(ids), X.ptr(w), X.ptr(y)
        a.tokens, a.top_k = tokens, k
        a.x_dtype, a.ids_dtype, a.y_dtype = xdt, idt, ydt
        if L.HAVE_RING:
            rs = C.ring_state()
            sqe = rs.get_sqe()
            ud = rs.next_ud
            rs.next_ud = ud + 1
            L.kt_prep_moe(sqe, self._model, self._layer, self._args_p, ud)
            L.kt_submit(rs.ring_p)
        else:
            a.layer = self._layer
            rs, ud = None, L.kt_moe_forward(self._ctx, self._model,
                                            self._args_p)
        # the buffers stay referenced until the completion is seen
        self._pending = (rs, ud, x, ids, w, y, out is None, orig_dt)

    def _remap(self, ids):
        p2l = self._p2l
        if isinstance(ids, X.TorchTensor):
            ids = ids.to(X.torch.int64)
            ok = (ids >= 0) & (ids < self.num_experts)
            return X.torch.where(ok, p2l[ids.clamp(0, self.num_experts - 1)],
                                 X.torch.full_like(ids, -1)).contiguous()
        ids = ids.astype(X.np.int64)
        ok = (ids >= 0) & (ids < self.num_experts)
        return X.np.ascontiguousarray(
            X.np.where(ok, p2l[ids.clip(0, self.num_experts - 1)], -1))

    def sync_forward(self, hidden_states=None, cuda_stream=None):
        """Wait for the layer submitted last and return its output, shaped
        and typed as the submitted hidden_states."""
        if cuda_stream is not None:
            raise ValueError("cuda_stream: kt has no GPU backend yet; pass "
                             "None")
        p = self._pending
        if p is None:
            raise RuntimeError("layer %d: sync_forward() without "
                               "submit_forward()" % self.layer_idx)
        rs, ud = p[0], p[1]
        if rs is not None:
            if rs.owner != threading.get_ident():
                raise RuntimeError("layer %d: sync_forward() must run on "
                                   "the thread that submitted"
                                   % self.layer_idx)
            res = rs.wait(ud)
        else:
            res = ud
        self._pending = None
        if res < 0:
            raise C.KtError("kt MoE op, layer %d" % self.layer_idx, res)
        y = p[5]
        return X.to_kind(y, p[7]) if p[6] else y

    def forward(self, hidden_states, topk_ids, topk_weights,
                cuda_stream=None, out=None):
        """submit_forward() then sync_forward()."""
        self.submit_forward(hidden_states, topk_ids, topk_weights,
                            cuda_stream, out)
        return self.sync_forward(hidden_states, cuda_stream)

    # KT-Kernel's buffer-cache controls: kt keeps no per-batch buffers
    @staticmethod
    def set_capture_batch_sizes(capture_bs):
        KTMoEWrapper._capture_bs = list(capture_bs)

    @staticmethod
    def get_capture_batch_sizes():
        return list(getattr(KTMoEWrapper, "_capture_bs", []))

    @staticmethod
    def clear_buffer_cache():
        pass
