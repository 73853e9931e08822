#!/usr/bin/python3
# SPDX-License-Identifier: MIT
# qwen3_moe_block.py - a small Qwen3-MoE-style decoder block in torch
# (attention, router and a shared expert in torch) whose routed experts run
# in kt through KTMoEWrapper, decoded for a few hundred steps on synthetic
# weights and checked against the same block computed all in torch.
#   PYTHONPATH=python KT_LIBRARY=build/libkt.so examples/qwen3_moe_block.py
import argparse
import math
import time

import torch
import torch.nn.functional as F

from kt import KTMoEWrapper


def rms_norm(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(x, pos, theta=1e6):
    """Rotary embedding of x [B][heads][S][D] at positions pos [S]."""
    d = x.shape[-1]
    inv = theta ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = pos[:, None].float() * inv[None, :]
    cos, sin = ang.cos(), ang.sin()
    x1, x2 = x[..., : d // 2], x[..., d // 2:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1)


class Block:
    """Weights and KV cache of one decoder block; `experts` says who
    computes the routed experts: a KTMoEWrapper or torch."""

    def __init__(self, a, gen):
        H, E, I, S = a.hidden, a.experts, a.inter, a.shared_inter
        self.a = a
        nh, hd = a.heads, H // a.heads

        def lin(o, i, scale=None):
            return torch.randn(o, i, generator=gen) * (scale or i ** -0.5)
        self.wq, self.wk, self.wv = lin(H, H), lin(H, H), lin(H, H)
        self.wo = lin(H, H)
        self.q_norm, self.k_norm = torch.ones(hd), torch.ones(hd)
        self.ln1, self.ln2 = torch.ones(H), torch.ones(H)
        self.router = lin(E, H)
        self.gate = lin(E * I, H).reshape(E, I, H)
        self.up = lin(E * I, H).reshape(E, I, H)
        self.down = lin(E * H, I).reshape(E, H, I)
        self.sh_gate, self.sh_up = lin(S, H), lin(S, H)
        self.sh_down, self.sh_g = lin(H, S), lin(1, H)
        self.nh, self.hd = nh, hd

    def attention(self, x, cache, pos):
        B, T, H = x.shape
        q = (x @ self.wq.T).view(B, T, self.nh, self.hd).transpose(1, 2)
        k = (x @ self.wk.T).view(B, T, self.nh, self.hd).transpose(1, 2)
        v = (x @ self.wv.T).view(B, T, self.nh, self.hd).transpose(1, 2)
        q = rope(rms_norm(q, self.q_norm), pos)
        k = rope(rms_norm(k, self.k_norm), pos)
        cache["k"] = k if cache.get("k") is None else torch.cat(
            [cache["k"], k], 2)
        cache["v"] = v if cache.get("v") is None else torch.cat(
            [cache["v"], v], 2)
        # one new query per step sees the whole cache: no causal mask
        att = (q @ cache["k"].transpose(-1, -2)) / math.sqrt(self.hd)
        o = torch.softmax(att, -1) @ cache["v"]
        return o.transpose(1, 2).reshape(B, T, H) @ self.wo.T

    def route(self, h):
        probs = torch.softmax(h @ self.router.T, -1, dtype=torch.float32)
        w, ids = torch.topk(probs, self.a.topk, -1)
        return ids, (w / w.sum(-1, keepdim=True)).float()

    def shared(self, h):
        s = (F.silu(h @ self.sh_gate.T) * (h @ self.sh_up.T)) @ self.sh_down.T
        return torch.sigmoid(h @ self.sh_g.T) * s

    def torch_experts(self, h, ids, w):
        y = torch.zeros_like(h)
        for e in ids.unique().tolist():
            tok, slot = (ids == e).nonzero(as_tuple=True)
            x = h[tok]
            o = (F.silu(x @ self.gate[e].T) * (x @ self.up[e].T)) @ \
                self.down[e].T
            y.index_add_(0, tok, o * w[tok, slot, None])
        return y

    def step(self, x, cache, pos, kt=None):
        """One decode step; returns (output, seconds in the MoE part)."""
        x = x + self.attention(rms_norm(x, self.ln1), cache, pos)
        h = rms_norm(x, self.ln2).reshape(-1, x.shape[-1])
        ids, w = self.route(h)
        t0 = time.perf_counter()
        if kt is not None:
            # the routed experts run on kt's workers while torch computes
            # the shared expert
            kt.submit_forward(h.to(torch.bfloat16), ids, w)
            sh = self.shared(h)
            routed = kt.sync_forward(h).float()
        else:
            sh = self.shared(h)
            routed = self.torch_experts(h, ids, w)
        moe_s = time.perf_counter() - t0
        return x + (routed + sh).reshape(x.shape), moe_s


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--experts", type=int, default=32)
    p.add_argument("--topk", type=int, default=4)
    p.add_argument("--inter", type=int, default=512)
    p.add_argument("--shared-inter", type=int, default=512)
    p.add_argument("--method", default="AMXINT8",
                   choices=["AMXINT8", "AMXINT4", "BF16"])
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    blk = Block(a, torch.Generator().manual_seed(0))
    kt = KTMoEWrapper(layer_idx=0, num_experts=a.experts,
                      num_experts_per_tok=a.topk, hidden_size=a.hidden,
                      moe_intermediate_size=a.inter, num_gpu_experts=0,
                      cpuinfer_threads=a.threads, threadpool_count=1,
                      weight_path=None, chunked_prefill_size=512,
                      method=a.method)
    t0 = time.perf_counter()
    kt.load_weights_from_tensors(blk.gate, blk.up, blk.down)
    print("kt packed %d experts (%s) in %.2f s" % (
        a.experts, a.method, time.perf_counter() - t0))

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(a.batch, 1, a.hidden, generator=gen)
    caches = ({}, {})
    times = ([], [])
    moe = ([], [])
    errs = []
    with torch.no_grad():
        for s in range(a.steps):
            pos = torch.tensor([s])
            outs = []
            for which, wrapper in ((0, kt), (1, None)):
                t0 = time.perf_counter()
                y, ms = blk.step(x, caches[which], pos, wrapper)
                times[which].append(time.perf_counter() - t0)
                moe[which].append(ms)
                outs.append(y)
            d = (outs[0] - outs[1]).abs().sum() / outs[1].abs().sum()
            errs.append(float(d))
            # both paths decode the reference's output next, so errors
            # do not compound across steps
            x = rms_norm(outs[1], torch.ones(a.hidden)) + 0.1 * torch.randn(
                a.batch, 1, a.hidden, generator=gen)

    def med(v):
        v = sorted(v)
        return v[len(v) // 2] * 1e6
    tol = {"AMXINT8": 0.04, "AMXINT4": 0.25, "BF16": 0.01}[a.method]
    worst = max(errs)
    print("%d steps, batch %d, H %d, %d experts top-%d, inter %d" % (
        a.steps, a.batch, a.hidden, a.experts, a.topk, a.inter))
    print("block step, median: kt %.0f us, torch %.0f us" % (
        med(times[0]), med(times[1])))
    print("MoE part, median:   kt %.0f us, torch %.0f us" % (
        med(moe[0]), med(moe[1])))
    print("block output vs all-torch: rel MAE mean %.4f, worst %.4f "
          "(bound %.2f)" % (sum(errs) / len(errs), worst, tol))
    if not math.isfinite(worst) or worst > tol:
        raise SystemExit("kt and torch disagree")


if __name__ == "__main__":
    main()
