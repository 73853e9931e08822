#!/usr/bin/python3
# SPDX-License-Identifier: MIT
# mxfp4_ref.py - an independent numpy check of kt's MXFP4 (run by the
# selftest mxfp4_ref.c): `gen DIR` writes OCP MXFP4 experts (blocks of 16
# bytes, element 2j in the low nibble of byte j, one E8M0 byte per 32),
# activations and routing; the C side packs them, writes what kt reads back
# and kt_moe_forward()'s output; `check DIR` decodes the blocks from the
# OCP definitions, requires the read-back weights to be equal and the
# forward within 0.005 relative mean error of an f64 reference.
import os, sys

try:
    import numpy as np
except ImportError:
    print("numpy missing (python3-numpy)")
    sys.exit(4)

H, I, E, TOPK, T = 256, 384, 4, 2, 8
LIMIT = 0.005
# scales of the extreme matrix: the ends of E8M0's range and the usual ones
EXTREME = [0, 1, 2, 126, 127, 200, 254]


def e2m1(code):
    """OCP E2M1: sign, 2 exponent bits (bias 1), 1 mantissa bit."""
    s = np.where(code & 8, -1.0, 1.0)
    e = (code >> 1) & 3
    m = (code & 1).astype(np.float64)
    mag = np.where(e == 0, m * 0.5, np.ldexp(1.0 + m / 2, e - 1))
    return s * mag


def decode(blocks, scales):
    """blocks [N][K/2] uint8 (OCP order), scales [N][K/32] -> f64 [N][K]."""
    n = blocks.shape[0]
    codes = np.empty((n, blocks.shape[1] * 2), dtype=np.uint8)
    codes[:, 0::2] = blocks & 0xF
    codes[:, 1::2] = blocks >> 4
    v = e2m1(codes)
    s = np.ldexp(1.0, scales.astype(np.int64) - 127)
    return v * np.repeat(s, 32, axis=1)


def dims(mat):
    return (I, H) if mat < 2 else (H, I)


def gen(d):
    rng = np.random.default_rng(2025)
    for ex in range(E):
        for mat in range(3):
            n, k = dims(mat)
            b = rng.integers(0, 256, size=(n, k // 2), dtype=np.uint8)
            # scales of GPT-OSS's experts sit around 2^-7 .. 2^-3
            s = rng.integers(118, 125, size=(n, k // 32), dtype=np.uint8)
            b.tofile(os.path.join(d, "blocks-%d-%d.bin" % (ex, mat)))
            s.tofile(os.path.join(d, "scales-%d-%d.bin" % (ex, mat)))
    b = rng.integers(0, 256, size=(16, H // 2), dtype=np.uint8)
    s = np.array(EXTREME * (16 * H // 32 // len(EXTREME) + 1),
                 dtype=np.uint8)[: 16 * H // 32].reshape(16, H // 32)
    b.tofile(os.path.join(d, "blocks-x.bin"))
    s.tofile(os.path.join(d, "scales-x.bin"))
    x = rng.standard_normal((T, H)).astype(np.float32)
    ids = np.stack([rng.permutation(E)[:TOPK] for _ in range(T)]).astype(np.int32)
    w = rng.uniform(0.1, 1.0, size=(T, TOPK)).astype(np.float32)
    x.tofile(os.path.join(d, "x.bin"))
    ids.tofile(os.path.join(d, "ids.bin"))
    w.tofile(os.path.join(d, "w.bin"))
    with open(os.path.join(d, "meta.txt"), "w") as f:
        f.write("%d %d %d %d %d\n" % (H, I, E, TOPK, T))


def load(d, name, dtype, shape):
    return np.fromfile(os.path.join(d, name), dtype=dtype).reshape(shape)


def check(d):
    bad = 0
    ws = {}
    with np.errstate(over="ignore"):
        for ex in range(E):
            for mat in range(3):
                n, k = dims(mat)
                ref = decode(load(d, "blocks-%d-%d.bin" % (ex, mat), np.uint8,
                                  (n, k // 2)),
                             load(d, "scales-%d-%d.bin" % (ex, mat), np.uint8,
                                  (n, k // 32)))
                got = load(d, "deq-%d-%d.bin" % (ex, mat), "<f4", (n, k))
                bad += int(np.sum(got != ref.astype(np.float32)))
                ws[ex, mat] = ref
        ref = decode(load(d, "blocks-x.bin", np.uint8, (16, H // 2)),
                     load(d, "scales-x.bin", np.uint8, (16, H // 32)))
        got = load(d, "deq-x.bin", "<f4", (16, H))
        # as f32: 2^-128 is a subnormal, 6 * 2^127 is +inf
        bad_x = int(np.sum(got != ref.astype(np.float32)))
    print("# weights unlike the OCP decoding: %d, extreme scales: %d"
          % (bad, bad_x))
    x = load(d, "x.bin", "<f4", (T, H)).astype(np.float64)
    ids = load(d, "ids.bin", "<i4", (T, TOPK))
    w = load(d, "w.bin", "<f4", (T, TOPK)).astype(np.float64)
    y = load(d, "y.bin", "<f4", (T, H)).astype(np.float64)
    ref = np.zeros((T, H))
    for t in range(T):
        for j in range(TOPK):
            e = ids[t, j]
            g = ws[e, 0] @ x[t]
            u = ws[e, 1] @ x[t]
            a = g / (1 + np.exp(-g)) * u
            ref[t] += w[t, j] * (ws[e, 2] @ a)
    err = np.mean(np.abs(y - ref)) / np.mean(np.abs(ref))
    print("# kt_moe_forward vs f64 over the OCP-decoded weights: rel mean error %.5f (limit %g)"
          % (err, LIMIT))
    return 0 if bad == 0 and bad_x == 0 and err < LIMIT else 1


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("gen", "check"):
        print("usage: mxfp4_ref.py gen|check DIR")
        return 2
    if sys.argv[1] == "gen":
        gen(sys.argv[2])
        return 0
    return check(sys.argv[2])


if __name__ == "__main__":
    sys.exit(main())
