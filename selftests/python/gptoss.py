# SPDX-License-Identifier: MIT
"""A GPT-OSS MXFP4 checkpoint written with numpy alone, decoded by the OCP
MX definition (not kt's tables), against `kt forward` on the folder."""
import json
import os
import subprocess
import tempfile

import ktt
from ktt import Skip

H, I, E, L, K = 160, 96, 4, 2, 2
ALPHA, LIMIT = 1.702, 7.0


def e2m1(np, codes):
    """OCP E2M1: sign bit 3, exponent bits 2-1 (bias 1), mantissa bit 0;
    exponent 0 is subnormal (m * 0.5)."""
    s = np.where(codes & 8, -1.0, 1.0)
    e = (codes >> 1) & 3
    m = (codes & 1).astype(np.float64)
    v = np.where(e == 0, m * 0.5, np.ldexp(1.0 + m / 2, e.astype(np.int32) - 1))
    return s * v


def decode(np, blocks, scales):
    """[..., G, 16] U8 blocks and [..., G] E8M0 scales to [..., G * 32]:
    byte j holds element 2j in its low nibble, 2j + 1 in its high one."""
    lo = e2m1(np, blocks & 15)
    hi = e2m1(np, blocks >> 4)
    v = np.stack([lo, hi], axis=-1).reshape(*blocks.shape[:-1], 32)
    v = v * np.ldexp(1.0, scales.astype(np.int32) - 127)[..., None]
    return v.reshape(*blocks.shape[:-2], -1)


def write_st(path, tensors):
    """safetensors: u64 header length, JSON header, the raw bytes."""
    hdr, blobs, off = {}, [], 0
    for name, (dtype, arr) in tensors.items():
        b = arr.tobytes()
        hdr[name] = {"dtype": dtype, "shape": list(arr.shape),
                     "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def bf16(np, a):
    """Round to bf16 (nearest even), as uint16 bits."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    u = u + 0x7FFF + ((u >> 16) & 1)
    return (u >> 16).astype(np.uint16)


def from_bf16(np, b):
    return (b.astype(np.uint32) << 16).view(np.float32)


def write_folder(np, d, rng):
    tensors, ref = {}, {}
    for l in range(L):
        p = "model.layers.%d.mlp.experts." % l
        gub = rng.integers(0, 256, (E, 2 * I, H // 32, 16), dtype=np.uint8)
        gus = rng.integers(123, 127, (E, 2 * I, H // 32), dtype=np.uint8)
        dnb = rng.integers(0, 256, (E, H, I // 32, 16), dtype=np.uint8)
        dns = rng.integers(123, 127, (E, H, I // 32), dtype=np.uint8)
        gubias = bf16(np, rng.uniform(-2, 2, (E, 2 * I)))
        dnbias = bf16(np, rng.uniform(-2, 2, (E, H)))
        tensors[p + "gate_up_proj_blocks"] = ("U8", gub)
        tensors[p + "gate_up_proj_scales"] = ("U8", gus)
        tensors[p + "gate_up_proj_bias"] = ("BF16", gubias)
        tensors[p + "down_proj_blocks"] = ("U8", dnb)
        tensors[p + "down_proj_scales"] = ("U8", dns)
        tensors[p + "down_proj_bias"] = ("BF16", dnbias)
        tensors["model.layers.%d.mlp.router.weight" % l] = (
            "F32", np.zeros((E, H), np.float32))
        # [E, 2I, H] and [E, H, I]: rows are outputs (transformers'
        # dequantizer transposes them to x @ W afterwards)
        ref[l] = (decode(np, gub, gus), from_bf16(np, gubias),
                  decode(np, dnb, dns), from_bf16(np, dnbias))
    os.makedirs(d)
    write_st(os.path.join(d, "model.safetensors"), tensors)
    cfg = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
           "hidden_size": H, "intermediate_size": I, "num_local_experts": E,
           "num_experts_per_tok": K, "num_hidden_layers": L,
           "swiglu_limit": LIMIT,
           "quantization_config": {"quant_method": "mxfp4"}}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    return ref


def forward_ref(np, ref, x, ids, w):
    gu, gub, dn, dnb = ref
    y = np.zeros((x.shape[0], H))
    for t in range(x.shape[0]):
        for j in range(K):
            e = ids[t, j]
            h = gu[e] @ x[t] + gub[e]
            g = np.minimum(h[0::2], LIMIT)
            u = np.clip(h[1::2], -LIMIT, LIMIT)
            a = g / (1 + np.exp(-ALPHA * g)) * (u + 1)
            y[t] += w[t, j] * (dn[e] @ a + dnb[e])
    return y


def t_gptoss_mxfp4():
    """`kt forward` on a numpy GPT-OSS MXFP4 folder vs the OCP decoding."""
    import numpy as np
    kt_bin = ktt.kt_bin()
    if not os.access(kt_bin, os.X_OK):
        raise Skip("no kt command at %s (make, or set KT_BIN)" % kt_bin)
    rng = np.random.default_rng(42)
    notes = []
    with tempfile.TemporaryDirectory() as tmp:
        d = os.path.join(tmp, "gpt-oss")
        ref = write_folder(np, d, rng)
        T = 9
        x = from_bf16(np, bf16(np, rng.uniform(-1, 1, (T, H))))
        ids = rng.integers(0, E, (T, K)).astype(np.int32)
        w = rng.uniform(0.25, 1, (T, K)).astype(np.float32)
        for n, a in (("x", x), ("ids", ids), ("w", w)):
            np.save(os.path.join(tmp, n + ".npy"), a)
        for method, tol in ((None, 0.005), ("bf16", 0.005)):
            for l in range(L):
                out = os.path.join(tmp, "y.npy")
                cmd = [kt_bin, "forward", "--model", d, "--layer", str(l),
                       "--input", os.path.join(tmp, "x.npy"),
                       "--ids", os.path.join(tmp, "ids.npy"),
                       "--weights", os.path.join(tmp, "w.npy"),
                       "--output", out, "--threads", "2"]
                if method:
                    cmd += ["--method", method]
                r = subprocess.run(cmd, capture_output=True, text=True,
                                   timeout=120)
                assert r.returncode == 0, r.stderr
                y = np.load(out).astype(np.float64)
                yr = forward_ref(np, ref[l], x.astype(np.float64), ids, w)
                err = np.abs(y - yr).mean() / np.abs(yr).mean()
                assert err < tol, "layer %d %s: rel MAE %.5f" % (
                    l, method or "mxfp4", err)
                notes.append("%s L%d %.4f" % (method or "mxfp4", l, err))
    return "rel MAE " + ", ".join(notes)
