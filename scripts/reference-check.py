#!/usr/bin/python3
# SPDX-License-Identifier: MIT
# reference-check.py - an independent end-to-end check of `kt convert` and
# `kt forward`: writes a Hugging Face style checkpoint with numpy (Qwen,
# DeepSeek or Mixtral naming; bf16, f16, f32 or fp8 sources; sharded),
# converts it, replays one layer and compares with an f64 reference
# computed from the source weights. Needs python3-numpy (Debian).
#   scripts/reference-check.py [--kt build/kt] [--style qwen|deepseek|mixtral]
#                              [--dtype bf16|f16|f32|fp8] [--method int8|int4|bf16]
import argparse, json, os, struct, subprocess, sys, tempfile
import numpy as np

LIMITS = {"int8": 0.04, "int4": 0.25, "bf16": 0.005}


def to_bf16_bits(a):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    r = ((u >> 16) & 1) + 0x7FFF
    return ((u + r) >> 16).astype(np.uint16)


def from_bf16_bits(b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def fp8_e4m3_table():
    t = np.zeros(256, dtype=np.float64)
    for b in range(256):
        s = -1.0 if b & 0x80 else 1.0
        e = (b >> 3) & 0xF
        m = b & 7
        if e == 15 and m == 7:
            t[b] = np.nan
        elif e == 0:
            t[b] = s * m / 8.0 * 2.0 ** -6
        else:
            t[b] = s * (1 + m / 8.0) * 2.0 ** (e - 7)
    return t


FP8 = fp8_e4m3_table()
FP8_FINITE = np.where(np.isnan(FP8), np.inf, FP8)


def to_fp8(a):
    # nearest representable value (ties do not matter for this check)
    order = np.argsort(FP8_FINITE)
    vals = FP8_FINITE[order]
    idx = np.clip(np.searchsorted(vals, a), 1, len(vals) - 1)
    lo, hi = vals[idx - 1], vals[idx]
    pick = np.where(np.abs(a - lo) <= np.abs(hi - a), idx - 1, idx)
    return order[pick].astype(np.uint8)


def encode(w, dtype):
    """Returns (dict of name suffix -> (st dtype, shape, bytes), dequantized f64)."""
    if dtype == "f32":
        return {"": ("F32", w.shape, w.astype("<f4").tobytes())}, w.astype(np.float32).astype(np.float64)
    if dtype == "f16":
        h = w.astype("<f2")
        return {"": ("F16", w.shape, h.tobytes())}, h.astype(np.float64)
    if dtype == "bf16":
        b = to_bf16_bits(w)
        return {"": ("BF16", w.shape, b.astype("<u2").tobytes())}, from_bf16_bits(b).astype(np.float64)
    # fp8 with 128x128 block scales (weight ~= q * scale_inv)
    n, k = w.shape
    bn, bk = (n + 127) // 128, (k + 127) // 128
    s = np.zeros((bn, bk), dtype=np.float32)
    q = np.zeros(w.shape, dtype=np.uint8)
    deq = np.zeros(w.shape)
    for i in range(bn):
        for j in range(bk):
            blk = w[i*128:(i+1)*128, j*128:(j+1)*128]
            sc = np.float32(max(np.abs(blk).max(), 1e-12) / 448.0)
            s[i, j] = sc
            qb = to_fp8(blk / sc)
            q[i*128:(i+1)*128, j*128:(j+1)*128] = qb
            deq[i*128:(i+1)*128, j*128:(j+1)*128] = FP8[qb] * np.float64(sc)
    return {"": ("F8_E4M3", w.shape, q.tobytes()),
            "_scale_inv": ("F32", s.shape, s.astype("<f4").tobytes())}, deq


def write_safetensors(path, tensors):
    header, off, blobs = {}, 0, []
    for name, (dt, shape, data) in tensors.items():
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [off, off + len(data)]}
        blobs.append(data)
        off += len(data)
    header["__metadata__"] = {"format": "pt"}
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kt", default="build/kt")
    ap.add_argument("--style", default="qwen", choices=["qwen", "deepseek", "mixtral"])
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32", "fp8"])
    ap.add_argument("--method", default="int8", choices=["int8", "int4", "bf16"])
    ap.add_argument("--tokens", type=int, default=37)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    H, I, E, K, L = 256, 384, 8, 2, 3
    first_dense = 1 if a.style == "deepseek" else 0
    cfg = {"hidden_size": H, "num_hidden_layers": L, "num_experts_per_tok": K,
           "model_type": {"qwen": "qwen3_moe", "deepseek": "deepseek_v3", "mixtral": "mixtral"}[a.style]}
    if a.style == "qwen":
        cfg.update(num_experts=E, moe_intermediate_size=I, intermediate_size=4 * I,
                   decoder_sparse_step=1, mlp_only_layers=[])
    elif a.style == "deepseek":
        cfg.update(n_routed_experts=E, moe_intermediate_size=I, intermediate_size=4 * I,
                   first_k_dense_replace=first_dense, n_shared_experts=1)
    else:
        cfg.update(num_local_experts=E, intermediate_size=I)
    names = {"qwen": ("mlp.experts", "gate_proj", "up_proj", "down_proj"),
             "deepseek": ("mlp.experts", "gate_proj", "up_proj", "down_proj"),
             "mixtral": ("block_sparse_moe.experts", "w1", "w3", "w2")}[a.style]
    ref = {}
    with tempfile.TemporaryDirectory() as d:
        src = os.path.join(d, "ckpt")
        os.mkdir(src)
        shards, weight_map = [], {}
        for layer in range(L):
            tensors = {}
            if layer < first_dense:
                w = rng.normal(0, 0.02, (4 * I, H)).astype(np.float32)
                tensors[f"model.layers.{layer}.mlp.gate_proj.weight"] = ("F32", w.shape, w.tobytes())
            else:
                for e in range(E):
                    mats = []
                    for which, shape in ((1, (I, H)), (2, (I, H)), (3, (H, I))):
                        rowmag = np.exp(rng.normal(0, 0.5, (shape[0], 1)))
                        w = rng.normal(0, 0.02, shape) * rowmag
                        enc, deq = encode(w, a.dtype)
                        base = f"model.layers.{layer}.{names[0]}.{e}.{names[which]}.weight"
                        for suf, t in enc.items():
                            tensors[base + suf] = t
                        mats.append(deq)
                    ref[(layer, e)] = mats
                if a.style == "deepseek":
                    w = rng.normal(0, 0.02, (I, H)).astype(np.float32)
                    tensors[f"model.layers.{layer}.mlp.shared_experts.gate_proj.weight"] = ("F32", w.shape, w.tobytes())
            fn = f"model-{layer + 1:05d}-of-{L:05d}.safetensors"
            write_safetensors(os.path.join(src, fn), tensors)
            for n in tensors:
                weight_map[n] = fn
        with open(os.path.join(src, "config.json"), "w") as f:
            json.dump(cfg, f)
        with open(os.path.join(src, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {}, "weight_map": weight_map}, f)
        out = os.path.join(d, "m.ktw")
        subprocess.run([a.kt, "convert", "--input", src, "--output", out, "--method", a.method],
                       check=True, stdout=subprocess.DEVNULL)
        layer = L - 1
        T = a.tokens
        x = rng.normal(0, 1, (T, H)).astype(np.float32)
        ids = np.stack([rng.permutation(E)[:K] for _ in range(T)]).astype(np.int64)
        ids[0, 0] = -1
        w = rng.random((T, K)).astype(np.float32)
        np.save(os.path.join(d, "x.npy"), x)
        np.save(os.path.join(d, "ids.npy"), ids)
        np.save(os.path.join(d, "w.npy"), w)
        subprocess.run([a.kt, "forward", "--model", out, "--layer", str(layer),
                        "--input", os.path.join(d, "x.npy"), "--ids", os.path.join(d, "ids.npy"),
                        "--weights", os.path.join(d, "w.npy"), "--output", os.path.join(d, "y.npy")],
                       check=True)
        y = np.load(os.path.join(d, "y.npy"))
    yref = np.zeros((T, H))
    xd = x.astype(np.float64)
    for t in range(T):
        for j in range(K):
            e = ids[t, j]
            if e < 0 or e >= E:
                continue
            g, u, dn = ref[(layer, e)]
            gv = g @ xd[t]
            av = gv / (1 + np.exp(-gv)) * (u @ xd[t])
            yref[t] += w[t, j] * (dn @ av)
    err = np.abs(y - yref).mean() / np.abs(yref).mean()
    ok = err <= LIMITS[a.method]
    print(f"{a.style} {a.dtype}->{a.method}: rel mean abs err {err:.5f} (limit {LIMITS[a.method]}) {'ok' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
