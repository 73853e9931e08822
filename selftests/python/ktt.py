# SPDX-License-Identifier: MIT
"""Helpers of the Python selftests: a TAP runner in the kselftest manner,
random experts, the f64 reference of the MoE op, a tiny HF checkpoint."""
import json
import os
import signal
import struct
import sys
import traceback

SRC = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(SRC))
# rel MAE bounds of selftests/moe/moe.c, per method; a bf16 y adds 0.004
TOL = {"AMXINT8": 0.04, "AMXINT4": 0.25, "BF16": 0.005}
BF16_Y = 0.004


class Skip(Exception):
    pass


def kt_bin():
    return os.environ.get("KT_BIN") or os.path.join(TOP, "build", "kt")


def run_tap(tests, timeout=120):
    """Run (name, fn) pairs; print TAP 13; return the exit status."""
    print("TAP version 13")
    print("1..%d" % len(tests), flush=True)
    failed = passed = 0

    def on_alarm(sig, frame):
        raise TimeoutError("timed out after %d s" % timeout)

    signal.signal(signal.SIGALRM, on_alarm)
    for i, (name, fn) in enumerate(tests, 1):
        signal.alarm(timeout)
        try:
            note = fn()
            signal.alarm(0)
            if note:
                print("# %s: %s" % (name, note))
            print("ok %d %s" % (i, name))
            passed += 1
        except Skip as e:
            signal.alarm(0)
            print("ok %d %s # SKIP %s" % (i, name, e))
        except BaseException:
            signal.alarm(0)
            for line in traceback.format_exc().splitlines():
                print("# " + line)
            print("not ok %d %s" % (i, name))
            failed += 1
        sys.stdout.flush()
    if failed:
        return 1
    return 0 if passed else 4


def expect_raises(exc, words, fn, *a, **kw):
    """fn(*a, **kw) must raise exc with every one of words in its text."""
    try:
        fn(*a, **kw)
    except exc as e:
        msg = str(e)
        for w in words:
            assert w in msg, "%r lacks %r" % (msg, w)
        return msg
    raise AssertionError("%s(...) did not raise %s" % (
        getattr(fn, "__name__", fn), exc.__name__))


def experts(torch, E, H, I, seed, dtype=None):
    """gate, up [E][I][H] and down [E][H][I], bell-shaped like trained
    weights."""
    g = torch.Generator().manual_seed(seed)

    def mat(*shape):
        w = (torch.rand(*shape, generator=g) * 2 - 1 +
             torch.rand(*shape, generator=g) * 2 - 1 +
             torch.rand(*shape, generator=g) * 2 - 1) * 0.02
        return w if dtype is None else w.to(dtype)
    return mat(E, I, H), mat(E, I, H), mat(E, H, I)


def routing(torch, T, H, E, k, seed, xdtype=None):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(T, H, generator=g)
    scores = torch.rand(T, E, generator=g)
    w, ids = torch.topk(torch.softmax(scores, -1), k, dim=-1)
    w = (w / w.sum(-1, keepdim=True)).float()
    if xdtype is not None:
        x = x.to(xdtype)
    return x, ids, w


def reference(torch, x, ids, w, gate, up, down, skip=()):
    """y[T][H] in f64: sum_k w_k down(silu(gate x) * up x)."""
    xd = x.double()
    gd, ud, dd = gate.double(), up.double(), down.double()
    y = torch.zeros(x.shape[0], x.shape[1], dtype=torch.float64)
    for t in range(x.shape[0]):
        for s in range(ids.shape[1]):
            e = int(ids[t, s])
            if e < 0 or e >= gate.shape[0] or e in skip:
                continue
            h = torch.nn.functional.silu(gd[e] @ xd[t]) * (ud[e] @ xd[t])
            y[t] += float(w[t, s]) * (dd[e] @ h)
    return y


def rel_mae(y, ref):
    y = y.double()
    return float((y - ref).abs().sum() / max(float(ref.abs().sum()), 1e-30))


def rss_kb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def _bf16_bytes(torch, t):
    return t.to(torch.bfloat16).contiguous().view(torch.int16).numpy() \
        .tobytes()


def write_qwen_ckpt(torch, folder, layers):
    """A Qwen3-MoE style checkpoint: layers is {layer: (gate, up, down)}
    with [E][I][H]/[E][H][I] tensors, written as bf16 safetensors."""
    os.makedirs(folder, exist_ok=True)
    tensors = []
    n_layers = max(layers) + 1
    E, I, H = next(iter(layers.values()))[0].shape
    for l in range(n_layers):
        gate, up, down = layers.get(l, layers[min(layers)])
        tensors.append(("model.layers.%d.mlp.gate.weight" % l,
                        torch.zeros(E, H)))
        for e in range(E):
            for nm, t in (("gate_proj", gate[e]), ("up_proj", up[e]),
                          ("down_proj", down[e])):
                tensors.append(("model.layers.%d.mlp.experts.%d.%s.weight"
                                % (l, e, nm), t))
    header, blobs, off = {}, [], 0
    for name, t in tensors:
        b = _bf16_bytes(torch, t)
        header[name] = {"dtype": "BF16", "shape": list(t.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    cfg = {"architectures": ["Qwen3MoeForCausalLM"],
           "model_type": "qwen3_moe", "hidden_size": H,
           "intermediate_size": 3 * I, "moe_intermediate_size": I,
           "num_experts": E, "num_experts_per_tok": 2,
           "num_hidden_layers": n_layers, "decoder_sparse_step": 1,
           "mlp_only_layers": [], "torch_dtype": "bfloat16"}
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f)
