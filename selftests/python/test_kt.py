#!/usr/bin/python3
# SPDX-License-Identifier: MIT
# test_kt.py - selftests of the kt Python package: KTMoEWrapper against an
# f64 torch reference and the scalar oracle, the async path, errors, RSS
# over 10^5 calls, and a KT-Kernel script run by changing its import.
import os
import subprocess
import sys
import tempfile

import gptoss
import ktt
from ktt import Skip, expect_raises

try:
    import numpy as np
except ImportError:
    np = None
try:
    import torch
except ImportError:
    torch = None

H, I, E, K = 256, 256, 8, 2


def need_torch():
    if torch is None:
        raise Skip("/usr/bin/python3 lacks torch (apt-get install "
                   "python3-torch)")


def new(layer=0, method="AMXINT8", seed=1, **kw):
    import kt
    args = dict(layer_idx=layer, num_experts=E, num_experts_per_tok=K,
                hidden_size=H, moe_intermediate_size=I, num_gpu_experts=0,
                cpuinfer_threads=0, threadpool_count=1, weight_path=None,
                chunked_prefill_size=512, method=method)
    args.update(kw)
    w = kt.KTMoEWrapper(**args)
    g, u, d = ktt.experts(torch, E, H, I, seed)
    w.load_weights_from_tensors(g, u, d)
    return w, (g, u, d)


def t_library():
    import kt
    assert os.path.exists(kt.library_path), kt.library_path
    ring = ("ring twins present: submit_forward uses kt_get_sqe/kt_submit"
            if kt.has_ring else
            "libkt lacks kt_get_sqe: submit_forward falls back to the "
            "blocking kt_moe_forward")
    return "%s; %s" % (kt.library_path, ring)


def t_ctor_errors():
    import kt
    base = dict(layer_idx=0, num_experts=E, num_experts_per_tok=K,
                hidden_size=H, moe_intermediate_size=I, num_gpu_experts=0,
                cpuinfer_threads=0, threadpool_count=1, weight_path=None,
                chunked_prefill_size=512, method="AMXINT8")

    def mk(**kw):
        a = dict(base)
        a.update(kw)
        return kt.KTMoEWrapper(**a)
    expect_raises(ValueError, ["hidden_size", "32"], mk, hidden_size=200)
    expect_raises(ValueError, ["num_experts_per_tok"], mk,
                  num_experts_per_tok=E + 1)
    expect_raises(TypeError, ["num_experts"], mk, num_experts="8")
    expect_raises(ValueError, ["num_gpu_experts"], mk, num_gpu_experts=E + 1)
    expect_raises(NotImplementedError, ["LLAMAFILE", "GGUF"], mk,
                  method="LLAMAFILE")
    expect_raises(NotImplementedError, ["MOE_INT4"], mk, method="MOE_INT4")
    assert mk(method="FP8").quant == 4
    expect_raises(NotImplementedError, ["NOPE", "AMXINT8"], mk, method="NOPE")
    expect_raises(NotImplementedError, ["max_deferred_experts_per_token"],
                  mk, max_deferred_experts_per_token=2)
    w = mk()
    expect_raises(RuntimeError, ["load_weights"], w.forward,
                  np.zeros((1, H), np.float32), np.zeros((1, K), np.int64),
                  np.zeros((1, K), np.float32))
    expect_raises(ValueError, ["weight_path", "not set"], w.load_weights)
    expect_raises(ValueError, ["weight_path", "does not exist"],
                  mk(weight_path="/nonexistent.ktw").load_weights)


def t_input_errors():
    need_torch()
    w, _ = new()
    x, ids, wt = ktt.routing(torch, 3, H, E, K, 2)
    expect_raises(ValueError, ["hidden_states", "hidden_size"], w.forward,
                  torch.zeros(3, H + 1), ids, wt)
    expect_raises(TypeError, ["hidden_states", "torch.Tensor"], w.forward,
                  [[0.0] * H], ids, wt)
    expect_raises(TypeError, ["hidden_states", "floating"], w.forward,
                  torch.zeros(3, H, dtype=torch.int32), ids, wt)
    expect_raises(ValueError, ["hidden_states", "meta", "CPU"], w.forward,
                  torch.zeros(3, H, device="meta"), ids, wt)
    expect_raises(TypeError, ["topk_ids", "integer"], w.forward, x,
                  ids.float(), wt)
    expect_raises(ValueError, ["topk_ids", "shape"], w.forward, x, ids[:2],
                  wt)
    expect_raises(ValueError, ["topk_weights", "shape"], w.forward, x, ids,
                  wt[:, :1])
    expect_raises(TypeError, ["topk_weights", "floating"], w.forward, x,
                  ids, ids)
    expect_raises(ValueError, ["cuda_stream", "None"], w.forward, x, ids, wt,
                  1234)
    out = torch.empty(H, 3).t()
    expect_raises(ValueError, ["out", "contiguous"], w.forward, x, ids, wt,
                  None, out)
    expect_raises(ValueError, ["out", "shape"], w.forward, x, ids, wt, None,
                  torch.empty(3, H + 128))
    expect_raises(TypeError, ["out", "dtype"], w.forward, x, ids, wt, None,
                  torch.empty(3, H, dtype=torch.float16))
    expect_raises(RuntimeError, ["sync_forward", "submit_forward"],
                  w.sync_forward, x)
    w.submit_forward(x, ids, wt)
    expect_raises(RuntimeError, ["twice"], w.submit_forward, x, ids, wt)
    w.sync_forward(x)


def _vs_f64(method, xdtype):
    need_torch()
    w, (g, u, d) = new(method=method, seed=3)
    notes = []
    for T in (1, 5, 33):
        x, ids, wt = ktt.routing(torch, T, H, E, K, 10 + T, xdtype)
        ids[0, 0] = -1                      # skipped slot
        y = w.forward(x, ids, wt)
        assert y.dtype == x.dtype and y.shape == x.shape
        ref = ktt.reference(torch, x.float(), ids, wt, g, u, d)
        err = ktt.rel_mae(y, ref)
        tol = ktt.TOL[method] + (ktt.BF16_Y if xdtype == torch.bfloat16
                                 else 0)
        assert err <= tol, "T=%d rel MAE %.4f > %.3f" % (T, err, tol)
        notes.append("T=%d %.4f" % (T, err))
    import kt
    return "%s %s on %s: rel MAE %s" % (method, str(xdtype)[6:],
                                        kt.isa_name(), ", ".join(notes))


def t_int8():
    return _vs_f64("AMXINT8", torch.float32 if torch else None)


def t_int4():
    return _vs_f64("AMXINT4", torch.bfloat16 if torch else None)


def t_bf16():
    return _vs_f64("BF16", torch.float32 if torch else None)


ORACLE = r"""
import sys, torch, numpy as np
sys.path.insert(0, %r)
import ktt, kt
w = kt.KTMoEWrapper(0, %d, %d, %d, %d, 0, 1, 1, None, 512, method="AMXINT8")
g, u, d = ktt.experts(torch, %d, %d, %d, 5)
w.load_weights_from_tensors(g, u, d)
x, ids, wt = ktt.routing(torch, 17, %d, %d, %d, 6)
np.save(sys.argv[1], w.forward(x, ids, wt).numpy())
print(kt.isa_name())
""" % (ktt.SRC, E, K, H, I, E, H, I, H, E, K)


def t_vs_oracle():
    need_torch()
    if os.environ.get("KT_ISA"):
        raise Skip("KT_ISA is set; the oracle run needs to force scalar")
    with tempfile.TemporaryDirectory() as tmp:
        outs = []
        for isa in ("scalar", ""):
            env = dict(os.environ)
            if isa:
                env["KT_ISA"] = isa
            path = os.path.join(tmp, "y%s.npy" % isa)
            r = subprocess.run([sys.executable, "-c", ORACLE, path], env=env,
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            outs.append((r.stdout.strip(), np.load(path)))
    (i0, y0), (i1, y1) = outs
    assert i0 == "scalar", i0
    err = float(np.abs(y1 - y0).sum() / np.abs(y0).sum())
    assert err <= 2e-5, "%s vs scalar: rel MAE %.2e" % (i1, err)
    return "%s vs scalar oracle, whole op through the wrapper: %.2e" % (
        i1, err)


def t_kinds():
    need_torch()
    w, _ = new(seed=4)
    x, ids, wt = ktt.routing(torch, 6, H, E, K, 7)
    y = w.forward(x, ids, wt)
    yn = w.forward(x.numpy(), ids.numpy(), wt.numpy())
    assert isinstance(yn, np.ndarray) and yn.dtype == np.float32
    assert np.array_equal(yn, y.numpy())
    # non-contiguous inputs and other dtypes are copied, same result
    xt = x.t().contiguous().t()
    assert not xt.is_contiguous()
    y2 = w.forward(xt, ids.to(torch.int32), wt.double())
    assert torch.equal(y2, y)
    y3 = w.forward(x.numpy(), ids.numpy().astype(np.int16), wt.numpy())
    assert np.array_equal(y3, y.numpy())
    yh = w.forward(x.half(), ids, wt)
    assert yh.dtype == torch.float16
    # [B][S][H] keeps its shape; out= is written in place
    x3 = x.reshape(2, 3, H)
    out = torch.empty(2, 3, H)
    y4 = w.forward(x3, ids, wt, None, out)
    assert y4 is out and torch.equal(out.reshape(6, H), y)


def t_two_layers_in_flight():
    need_torch()
    import kt
    if not kt.has_ring:
        raise Skip("libkt does not export kt_get_sqe and the other ring "
                   "twins yet: submit_forward runs the blocking "
                   "kt_moe_forward, so there is no ring path to test")
    a, _ = new(layer=0, seed=5)
    b, _ = new(layer=1, seed=6)
    xa, ia, wa = ktt.routing(torch, 4, H, E, K, 8)
    xb, ib, wb = ktt.routing(torch, 64, H, E, K, 9)
    ra, rb = a.forward(xa, ia, wa), b.forward(xb, ib, wb)
    for order in ("ab", "ba"):
        a.submit_forward(xa, ia, wa)
        b.submit_forward(xb, ib, wb)
        outs = {}
        for c in order:
            outs[c] = (a if c == "a" else b).sync_forward(None)
        assert torch.equal(outs["a"], ra) and torch.equal(outs["b"], rb)
    # many layers in flight, more than fit an SQ of 64
    ws = [a, b] + [new(layer=i, seed=20 + i)[0] for i in range(2, 70)]
    for w in ws:
        w.submit_forward(xa, ia, wa)
    for w in reversed(ws):
        y = w.sync_forward(xa)
        if w is a:
            assert torch.equal(y, ra)
    return "70 layers in flight, synced in reverse"


def t_gpu_mask():
    need_torch()
    w, (g, u, d) = new(seed=11, num_gpu_experts=3)
    x, ids, wt = ktt.routing(torch, 9, H, E, K, 12)
    y = w.forward(x, ids, wt)
    ref = ktt.reference(torch, x, ids, wt, g, u, d, skip=(0, 1, 2))
    assert ktt.rel_mae(y, ref) <= ktt.TOL["AMXINT8"]
    mask = torch.zeros(E, dtype=torch.bool)
    mask[[1, 6]] = True
    w2, (g, u, d) = new(seed=11, gpu_experts_mask=mask)
    y2 = w2.forward(x, ids, wt)
    ref2 = ktt.reference(torch, x, ids, wt, g, u, d, skip=(1, 6))
    assert ktt.rel_mae(y2, ref2) <= ktt.TOL["AMXINT8"]
    assert w2.num_gpu_experts == 2


def t_physical_to_logical():
    need_torch()
    import kt
    p2l = torch.tensor([3, 0, 1, 2, 7, 6, 5, 4])
    w = kt.KTMoEWrapper(0, E, K, H, I, 0, 0, 1, None, 512, method="AMXINT8")
    g, u, d = ktt.experts(torch, E, H, I, 13)
    w.load_weights_from_tensors(g, u, d, p2l)
    x, ids, wt = ktt.routing(torch, 5, H, E, K, 14)
    y = w.forward(x, ids, wt)
    ref = ktt.reference(torch, x, p2l[ids], wt, g, u, d)
    assert ktt.rel_mae(y, ref) <= ktt.TOL["AMXINT8"]
    expect_raises(ValueError, ["physical_to_logical_map", "permutation"],
                  w.load_weights_from_tensors, g, u, d, torch.zeros(E))


_ckpt = {}


def converted(tmp):
    """A 2-layer Qwen3-MoE checkpoint converted to int8 with `kt convert`."""
    if "ktw" in _ckpt:
        return _ckpt["ktw"], _ckpt["w"]
    kt_bin = ktt.kt_bin()
    if not os.access(kt_bin, os.X_OK):
        raise Skip("no kt command at %s (make, or set KT_BIN)" % kt_bin)
    layers = {l: ktt.experts(torch, E, H, I, 30 + l) for l in (0, 1)}
    hf = os.path.join(tmp, "hf")
    ktt.write_qwen_ckpt(torch, hf, layers)
    out = os.path.join(tmp, "ktw")
    os.makedirs(out)
    ktw = os.path.join(out, "qwen-int8.ktw")
    r = subprocess.run([kt_bin, "convert", "--input", hf, "--output", ktw,
                        "--method", "int8"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    _ckpt.update(ktw=ktw, w=layers)
    return ktw, layers


def t_load_weights_ktw():
    need_torch()
    import kt
    with tempfile.TemporaryDirectory() as tmp:
        ktw, layers = converted(tmp)
        x, ids, wt = ktt.routing(torch, 7, H, E, K, 15)
        for path in (ktw, os.path.dirname(ktw)):
            w = kt.KTMoEWrapper(1, E, K, H, I, 0, 0, 1, path, 512,
                                method="AMXINT8")
            w.load_weights()
            y = w.forward(x, ids, wt)
            g, u, d = (t.to(torch.bfloat16).float() for t in layers[1])
            err = ktt.rel_mae(y, ktt.reference(torch, x, ids, wt, g, u, d))
            assert err <= ktt.TOL["AMXINT8"], err
            w.close()
        # router ids are physical slots; the file holds logical experts
        p2l = torch.tensor([5, 3, 0, 1, 2, 4, 7, 6])
        w = kt.KTMoEWrapper(1, E, K, H, I, 0, 0, 1, ktw, 512,
                            method="AMXINT8")
        w.load_weights(p2l)
        ids[1, 1] = -1
        y = w.forward(x, ids, wt)
        err_p = ktt.rel_mae(y, ktt.reference(torch, x, torch.where(
            ids >= 0, p2l[ids.clamp(min=0)], ids), wt, g, u, d))
        assert err_p <= ktt.TOL["AMXINT8"], err_p
        w.load_weights()                    # identity again
        assert ktt.rel_mae(w.forward(x, ids, wt), ktt.reference(
            torch, x, ids, wt, g, u, d)) <= ktt.TOL["AMXINT8"]
        w.close()
        bad = kt.KTMoEWrapper(1, E, K, H, I, 0, 0, 1, ktw, 512,
                              method="AMXINT4")
        expect_raises(ValueError, ["weight_path", "int8", "AMXINT4"],
                      bad.load_weights)
        bad = kt.KTMoEWrapper(5, E, K, H, I, 0, 0, 1, ktw, 512,
                              method="AMXINT8")
        expect_raises(ValueError, ["layer_idx", "5"], bad.load_weights)
        _ckpt.clear()
    return "rel MAE %.4f through a converted .ktw" % err


def t_kt_kernel_script():
    need_torch()
    src = open(os.path.join(ktt.SRC, "kt_kernel_usage.py")).read()
    old = "from kt_kernel import KTMoEWrapper"
    assert src.count(old) == 1
    with tempfile.TemporaryDirectory() as tmp:
        ktw, _ = converted(tmp)
        script = os.path.join(tmp, "usage.py")
        with open(script, "w") as f:
            f.write(src.replace(old, "from kt import KTMoEWrapper"))
        env = dict(os.environ, WEIGHT_PATH=os.path.dirname(ktw))
        r = subprocess.run([sys.executable, script], env=env,
                           capture_output=True, text=True, timeout=120)
        _ckpt.clear()
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.strip()


def t_dropped_wrappers_free():
    """A dropped wrapper releases its packed model."""
    need_torch()
    import gc
    g, u, d = ktt.experts(torch, E, H, I, 40)
    import kt

    def one():
        w = kt.KTMoEWrapper(0, E, K, H, I, 0, 0, 1, None, 512,
                            method="BF16")
        w.load_weights_from_tensors(g, u, d)
    for _ in range(3):
        one()
    gc.collect()
    before = ktt.rss_kb()
    for _ in range(40):     # 40 x 3 MiB of bf16 experts if leaked
        one()
    gc.collect()
    grew = ktt.rss_kb() - before
    assert grew < 40 * 3 * 1024 // 4, "RSS grew %d KiB" % grew
    return "RSS %+d KiB after 40 wrappers dropped" % grew


def t_rss():
    """10^5 submit+sync of a NOP-sized op: RSS must not grow."""
    need_torch()
    import time
    import kt
    w = kt.KTMoEWrapper(0, E, K, 128, 128, 0, 0, 1, None, 512,
                        method="AMXINT8")
    g, u, d = ktt.experts(torch, E, 128, 128, 16)
    w.load_weights_from_tensors(g, u, d)
    x = torch.zeros(1, 128, dtype=torch.bfloat16)
    ids = torch.full((1, K), -1, dtype=torch.int64)   # no expert runs
    wt = torch.zeros(1, K)
    for _ in range(10000):
        w.submit_forward(x, ids, wt)
        w.sync_forward(x)
    before = ktt.rss_kb()
    t0 = time.perf_counter()
    n = 0
    # 10^5 calls take ~2 s on an idle box; a loaded one stops at 50 s
    while n < 100000 and (n % 1000 or time.perf_counter() - t0 < 50):
        w.submit_forward(x, ids, wt)
        w.sync_forward(x)
        n += 1
    us = (time.perf_counter() - t0) / n * 1e6
    grew = ktt.rss_kb() - before
    assert grew <= 1024, "RSS grew %d KiB over %d calls" % (grew, n)
    return "RSS %+d KiB over %d calls (%.1f us/call mean, %s)" % (
        grew, n, us, "ring" if kt.has_ring else "kt_moe_forward")


def t_pip_install():
    """pip install ./python works offline with setuptools alone."""
    import shutil
    try:
        import setuptools  # noqa: F401
        import venv  # noqa: F401
    except ImportError as e:
        raise Skip("%s (apt-get install python3-setuptools python3-venv)"
                   % e)
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "src")
        shutil.copytree(os.path.join(ktt.TOP, "python"), src,
                        ignore=shutil.ignore_patterns("build", "*.egg-info",
                                                      "__pycache__"))
        env_dir = os.path.join(tmp, "venv")
        r = subprocess.run([sys.executable, "-m", "venv",
                            "--system-site-packages", env_dir],
                           capture_output=True, text=True, timeout=120)
        if r.returncode:
            raise Skip("python3 -m venv fails: %s" % r.stderr.strip()[-200:])
        py = os.path.join(env_dir, "bin", "python")
        r = subprocess.run([py, "-m", "pip", "install", "--no-index",
                            "--quiet", src], capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        r = subprocess.run([py, "-c", "import kt; print(kt.__file__)"],
                           cwd=tmp, env=env, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(env_dir), r.stdout
    return "installed offline into a venv"


def t_roofline_script():
    """scripts/roofline.sh turns kt bench --json into an SVG."""
    import shutil
    if not shutil.which("gnuplot"):
        raise Skip("no gnuplot (apt-get install gnuplot-nox)")
    script = os.path.join(ktt.TOP, "scripts", "roofline.sh")
    data = os.path.join(ktt.TOP, "Documentation", "images",
                        "roofline-qwen3-30b-a3b.jsonl")
    with tempfile.TemporaryDirectory() as tmp:
        svg = os.path.join(tmp, "r.svg")
        r = subprocess.run([script, data, svg], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        body = open(svg).read()
        assert "<svg" in body and "T=512" in body and "int8" in body
        cases = os.path.join(tmp, "cases.jsonl")
        with open(data) as f, open(cases, "w") as g:
            g.writelines(l for l in f if '"limits"' not in l)
        r = subprocess.run([script, cases, svg], capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 1 and "limits" in r.stderr, r.stderr


TESTS = [("library", t_library), ("pip_install", t_pip_install), ("ctor_errors", t_ctor_errors),
         ("input_errors", t_input_errors), ("int8_vs_f64", t_int8),
         ("int4_vs_f64", t_int4), ("bf16_vs_f64", t_bf16),
         ("vs_scalar_oracle", t_vs_oracle), ("tensor_kinds", t_kinds),
         ("two_layers_in_flight", t_two_layers_in_flight),
         ("gpu_experts_mask", t_gpu_mask),
         ("physical_to_logical_map", t_physical_to_logical),
         ("load_weights_ktw", t_load_weights_ktw),
         ("kt_kernel_script", t_kt_kernel_script), ("roofline_script", t_roofline_script),
         ("dropped_wrappers_free", t_dropped_wrappers_free), ("rss_1e5_calls", t_rss),
         ("gptoss_mxfp4_folder", gptoss.t_gptoss_mxfp4)]


def main():
    if np is None:
        print("TAP version 13\n1..1\nok 1 python # SKIP /usr/bin/python3 "
              "lacks numpy (apt-get install python3-numpy python3-torch)")
        return 4
    pkg = os.path.join(ktt.TOP, "python")
    sys.path.insert(0, pkg)
    # subprocesses (the oracle run, the KT-Kernel script) import it too
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [pkg] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    only = sys.argv[1:]
    tests = [t for t in TESTS if not only or t[0] in only]
    return ktt.run_tap(tests)


if __name__ == "__main__":
    sys.exit(main())
