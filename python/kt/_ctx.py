# SPDX-License-Identifier: MIT
"""The one kt context of the process (as KT-Kernel's CPUInfer singleton),
the per-thread submission rings, and the models shared by wrappers."""
import ctypes
import logging
import os
import threading

from . import _lib as L

log = logging.getLogger("kt")
_lock = threading.Lock()
_ctx = None
_models = {}            # (realpath, mask bytes) -> [model, refs]
_tls = threading.local()

RING_ENTRIES = 64


class KtError(RuntimeError):
    """A libkt call failed; .errno holds the positive errno."""

    def __init__(self, what, rc, detail=""):
        self.errno = -rc
        msg = "%s: %s" % (what, L.strerror(rc))
        if detail:
            msg += ": " + detail
        super().__init__(msg)


def sysinfo():
    si = L.SysInfo()
    rc = L.kt_sysinfo_get(ctypes.byref(si))
    if rc:
        raise KtError("kt_sysinfo_get", rc)
    return si


def _pick_nodes(threadpool_count, numa_nodes):
    if numa_nodes is not None:
        return [int(n) for n in numa_nodes]
    if not threadpool_count or threadpool_count <= 0:
        return []
    si = sysinfo()
    have = [si.node_ids[i] for i in range(si.n_nodes)]
    if threadpool_count > len(have):
        # KT-Kernel maps subpool i to node i; a smaller box runs on what
        # it has rather than failing a script written for a bigger one
        log.info("threadpool_count %d > %d NUMA node(s): using %s",
                 threadpool_count, len(have), have)
    return have[:threadpool_count]


def get_ctx(cpuinfer_threads=0, threadpool_count=0, numa_nodes=None):
    """The shared context, created by the first caller with its sizes."""
    global _ctx
    if _ctx is not None:
        return _ctx
    with _lock:
        if _ctx is not None:
            return _ctx
        o = L.CtxOpts()
        o.sz = ctypes.sizeof(o)
        o.threads = max(0, int(cpuinfer_threads or 0))
        nodes = _pick_nodes(threadpool_count, numa_nodes)
        o.n_nodes = len(nodes)
        for i, n in enumerate(nodes):
            o.nodes[i] = n
        ctx = ctypes.c_void_p()
        rc = L.kt_ctx_create(ctypes.byref(o), ctypes.byref(ctx))
        if rc:
            raise KtError("kt_ctx_create(threads=%d, nodes=%s)"
                          % (o.threads, nodes), rc)
        _ctx = ctx
        return _ctx


def ctx_threads():
    return L.kt_ctx_threads(_ctx) if _ctx is not None else 0


def isa_name():
    if _ctx is None:
        return None
    return L.kt_isa_name(L.kt_ctx_isa(_ctx)).decode()


class RingState:
    """A thread's ring and the completions it reaped for other wrappers."""

    def __init__(self, ctx):
        self.ring = L.Ring()
        rc = L.kt_ring_init(ctx, RING_ENTRIES, ctypes.byref(self.ring))
        if rc:
            raise KtError("kt_ring_init", rc)
        self.ring_p = ctypes.pointer(self.ring)
        self.cqe_p = ctypes.POINTER(L.Cqe)()
        self.cqe_pp = ctypes.byref(self.cqe_p)
        self.done = {}          # user_data -> res
        self.next_ud = 1
        self.owner = threading.get_ident()

    def reap_one(self):
        rc = L.kt_wait_cqe(self.ring_p, self.cqe_pp)
        if rc:
            raise KtError("kt_wait_cqe", rc)
        c = self.cqe_p.contents
        self.done[c.user_data] = c.res
        L.kt_cqe_seen(self.ring_p)

    def get_sqe(self):
        sqe = L.kt_get_sqe(self.ring_p)
        while not sqe:
            # SQ full: completions free their slots; keep their results
            self.reap_one()
            sqe = L.kt_get_sqe(self.ring_p)
        return sqe

    def wait(self, ud):
        done = self.done
        while ud not in done:
            self.reap_one()
        return done.pop(ud)


def ring_state():
    """This thread's ring (one per submitting thread, as kt wants)."""
    rs = getattr(_tls, "rs", None)
    if rs is None:
        rs = _tls.rs = RingState(_ctx)
    return rs


def open_model(path, mask):
    """A .ktw model shared by every wrapper of the same file and mask."""
    key = (os.path.realpath(path), bytes(mask) if mask is not None else b"")
    with _lock:
        ent = _models.get(key)
        if ent:
            ent[1] += 1
            return ent[0], key
        o = L.ModelOpts()
        o.sz = ctypes.sizeof(o)
        if mask is not None:
            o.expert_mask = ctypes.cast(mask, ctypes.POINTER(ctypes.c_uint64))
        m = ctypes.c_void_p()
        rc = L.kt_model_open(_ctx, os.fsencode(path), ctypes.byref(o),
                             ctypes.byref(m))
        if rc:
            raise KtError("kt_model_open(%s)" % path, rc, L.last_error())
        _models[key] = [m, 1]
        return m, key


def release_model(key):
    with _lock:
        ent = _models.get(key)
        if not ent:
            return
        ent[1] -= 1
        if ent[1] == 0:
            del _models[key]
            L.kt_model_destroy(ent[0])
