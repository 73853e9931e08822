#!/usr/bin/python3
# SPDX-License-Identifier: MIT
# wrapper_bench.py - what the Python wrapper costs: the median of
# submit_forward + sync_forward for a NOP-sized op (no expert runs), and
# the wrapper's time per call at T = 1 and T = 512 on the Qwen3-30B-A3B
# shapes next to the same op as one kt_moe_forward() call (interleaved)
# and to `kt bench` for the same method, layers and threads.
#   PYTHONPATH=python KT_LIBRARY=build/libkt.so examples/wrapper_bench.py
import argparse
import ctypes
import json
import os
import subprocess
import time

import torch

import kt
from kt import KTMoEWrapper
from kt import _lib as L


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def nop_overhead(n):
    w = KTMoEWrapper(0, 8, 8, 128, 128, 0, 0, 1, None, 512, method="AMXINT8")
    z = torch.zeros(8, 128, 128, dtype=torch.bfloat16)
    w.load_weights_from_tensors(z, z, z.transpose(1, 2))
    x = torch.zeros(1, 128, dtype=torch.bfloat16)
    ids = torch.full((1, 8), -1, dtype=torch.int64)   # every slot skipped
    wt = torch.zeros(1, 8)
    out = torch.empty(1, 128, dtype=torch.bfloat16)
    ts, ts_out = [], []
    for i in range(n):
        t0 = time.perf_counter()
        w.submit_forward(x, ids, wt)
        w.sync_forward(x)
        t1 = time.perf_counter()
        w.submit_forward(x, ids, wt, None, out)
        w.sync_forward(x)
        t2 = time.perf_counter()
        if i >= n // 10:
            ts.append(t1 - t0)
            ts_out.append(t2 - t1)
    w.close()
    return median(ts) * 1e6, median(ts_out) * 1e6


def layer_times(a, tokens):
    H, I, E, K = 2048, 768, 128, 8
    layers = []
    t0 = time.perf_counter()
    for l in range(a.layers):
        g = torch.Generator().manual_seed(l)
        w = KTMoEWrapper(l, E, K, H, I, 0, a.threads, 1, None, 512,
                         method=a.method)
        src = [(torch.rand(E, r, c, generator=g) - 0.5).mul_(0.04)
               .to(torch.bfloat16) for r, c in ((I, H), (I, H), (H, I))]
        w.load_weights_from_tensors(*src)
        del src
        layers.append(w)
    print("packed %d layers in %.1f s" % (a.layers, time.perf_counter() - t0))
    res = {}
    for T in tokens:
        g = torch.Generator().manual_seed(100 + T)
        x = torch.randn(T, H, generator=g).to(torch.bfloat16)
        iters = a.iters if T == 1 else max(6, a.iters // 20)
        calls, direct = [], []
        y = torch.empty(T, H, dtype=torch.bfloat16)
        args = L.MoeArgs(x=x.data_ptr(), y=y.data_ptr(), tokens=T, top_k=K,
                         x_dtype=L.DTYPE_BF16, y_dtype=L.DTYPE_BF16,
                         ids_dtype=L.DTYPE_I64)
        for i in range(iters + 2):
            ids = torch.rand(T, E, generator=g).topk(K, -1).indices
            wt = torch.rand(T, K, generator=g)
            w = layers[i % len(layers)]
            t0 = time.perf_counter()
            w.submit_forward(x, ids, wt)
            w.sync_forward(x)
            t1 = time.perf_counter()
            # the same op as one C call, interleaved so that load on a
            # shared machine hits both alike
            args.ids, args.w, args.layer = ids.data_ptr(), wt.data_ptr(), 0
            rc = L.kt_moe_forward(w._ctx, w._model, ctypes.byref(args))
            t2 = time.perf_counter()
            assert rc == 0, rc
            if i >= 2:
                calls.append(t1 - t0)
                direct.append(t2 - t1)
        res[T] = (median(calls) * 1e6, median(direct) * 1e6)
    for w in layers:
        w.close()
    return res


def kt_bench(a, tokens):
    cmd = [a.kt, "bench", "-m", {"AMXINT8": "int8", "AMXINT4": "int4",
                                 "BF16": "bf16"}[a.method],
           "-T", ",".join(map(str, tokens)), "--layers", str(a.layers),
           "--json"]
    if a.threads:
        cmd += ["-t", str(a.threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    res = {}
    for line in out.stdout.splitlines():
        o = json.loads(line)
        if "tokens" in o:
            res[o["tokens"]] = o["median_us"]
    return res, " ".join(cmd)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--nop-calls", type=int, default=20000)
    p.add_argument("--method", default="AMXINT8")
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--tokens", default="1,512")
    p.add_argument("--kt", default=os.environ.get("KT_BIN", "build/kt"))
    p.add_argument("--skip-layers", action="store_true")
    a = p.parse_args()
    med, med_out = nop_overhead(a.nop_calls)
    print("libkt %s, %s, %d workers, path %s" % (
        kt.library_path, kt.isa_name(), kt.ctx_threads(),
        "ring (kt_get_sqe/kt_submit/kt_wait_cqe)" if kt.has_ring
        else "kt_moe_forward (no ring twins in this libkt)"))
    print("NOP-sized op, submit_forward+sync_forward median: %.1f us "
          "(%.1f us with out=)" % (med, med_out))
    if a.skip_layers:
        return
    tokens = [int(t) for t in a.tokens.split(",")]
    wr = layer_times(a, tokens)
    kb, cmd = kt_bench(a, tokens)
    print("qwen3-30b-a3b %s, %d layers rotated; kt bench: %s" % (
        a.method, a.layers, cmd))
    for T in tokens:
        w_us, c_us = wr[T]
        b_us = kb.get(T, float("nan"))
        print("  T=%-4d wrapper %10.1f us  kt_moe_forward %10.1f us (x%.3f)"
              "  kt bench %10.1f us (x%.3f)"
              % (T, w_us, c_us, w_us / c_us, b_us, w_us / b_us))


if __name__ == "__main__":
    main()
