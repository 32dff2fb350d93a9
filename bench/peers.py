# SPDX-License-Identifier: Apache-2.0
"""attnref beside what a CPU user would call instead: PyTorch's scaled_dot_product_attention
(and FlexAttention for the sliding window), on the same inputs in one process.

Rounds alternate between attnref and the peer; each cell is the median of the rounds, one call
timed per round after a warm-up. Every output is compared with a float64 reference computed
from the same (rounded) inputs. Thread counts: 1 and all cores (os.cpu_count()).

Usage: PYTHONPATH=build/release/python build/venv/bin/python bench/peers.py [--rounds N]
       [--threads 1,2] [--cases decode,prefill,window]
"""
import argparse
import os
import platform
import statistics
import time

import numpy as np
import torch
import torch.nn.functional as F

import attnref

DECODE = [(8, 4096), (1, 32768)]  # (batch, context); Hq 32, Hkv 8, D 128, pages of 16
HQ, HKV, DIM, PAGE = 32, 8, 128, 16
PREFILL_HEADS, PREFILL_SEQ = 8, 2048
WINDOW = 512  # sliding window: key j is visible from query i iff i - WINDOW < j <= i


def to_torch(x, dtype):
    t = torch.from_numpy(np.ascontiguousarray(x))
    return t.to(torch.bfloat16) if dtype == "bf16" else t


def rounded64(t):
    """The float64 values a bf16 or f32 tensor holds (the reference's inputs)."""
    return t.to(torch.float64).numpy()


def softmax_rows(s):
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    return p / p.sum(axis=-1, keepdims=True)


def attention64(q, k, v, scale, visible=None):
    """q [H, Sq, D], k, v [H, Sk, D] in float64; visible [Sq, Sk] bool or None."""
    s = np.einsum("hqd,hkd->hqk", q, k) * scale
    if visible is not None:
        s = np.where(visible, s, -np.inf)
    return np.einsum("hqk,hkd->hqd", softmax_rows(s), v)


def max_abs(got, want):
    got = got.to(torch.float64).numpy() if isinstance(got, torch.Tensor) else got
    return float(np.max(np.abs(np.asarray(got, np.float64) - want)))


def decode_case(batch, ctx, dtype, rng):
    """Paged K/V for attnref (pages of 16 in random order) and the same K/V contiguous for SDPA."""
    pps = ctx // PAGE
    q = to_torch(rng.standard_normal((batch, HQ, DIM), dtype=np.float32), dtype)
    k = to_torch(rng.standard_normal((HKV, batch * pps, PAGE, DIM), dtype=np.float32), dtype)
    v = to_torch(rng.standard_normal((HKV, batch * pps, PAGE, DIM), dtype=np.float32), dtype)
    lengths = np.full(batch, ctx, np.int32)
    pages = rng.permutation(batch * pps).astype(np.int32).reshape(batch, pps)
    scale = DIM**-0.5
    # The peer's layout: [batch, Hkv, ctx, D], gathered once (untimed): no page table to follow.
    flat = torch.from_numpy(pages.reshape(-1).astype(np.int64))
    kc = k[:, flat].reshape(HKV, batch, ctx, DIM).transpose(0, 1).contiguous()
    vc = v[:, flat].reshape(HKV, batch, ctx, DIM).transpose(0, 1).contiguous()
    # The group's query heads as G query rows over their KV head: SDPA's fastest spelling of
    # grouped decode on the CPU (enable_gqa=True or K/V repeated per query head are slower).
    group = HQ // HKV
    qg = q.reshape(batch, HKV, group, DIM).contiguous()

    def ours(threads):
        return attnref.paged_attention(q, k, v, lengths, pages, sm_scale=scale,
                                       num_threads=threads)

    def peer(threads):
        return F.scaled_dot_product_attention(qg, kc, vc, scale=scale).reshape(batch, HQ, DIM)

    want = np.stack([
        attention64(rounded64(q[b]).reshape(HKV, group, DIM),
                    rounded64(kc[b]), rounded64(vc[b]), scale).reshape(HQ, DIM)
        for b in range(batch)
    ])
    return ours, peer, want


def prefill_inputs(dtype, rng):
    shape = (PREFILL_HEADS, PREFILL_SEQ, DIM)
    return [to_torch(rng.standard_normal(shape, dtype=np.float32), dtype) for _ in range(3)]


def prefill_case(dtype, rng):
    q, k, v = prefill_inputs(dtype, rng)
    scale = DIM**-0.5
    q4, k4, v4 = (x.unsqueeze(0) for x in (q, k, v))

    def ours(threads):
        return attnref.splash_attention(q, k, v, mask="causal", sm_scale=scale, num_threads=threads)

    def peer(threads):
        return F.scaled_dot_product_attention(q4, k4, v4, is_causal=True, scale=scale)[0]

    causal = np.tril(np.ones((PREFILL_SEQ, PREFILL_SEQ), bool))
    want = attention64(rounded64(q), rounded64(k), rounded64(v), scale, causal)
    return ours, peer, want


def window_case(dtype, rng, flex):
    """A causal sliding window: attnref's local mask against SDPA with an explicit boolean mask,
    or FlexAttention (compiled) with the same mask as a mask_mod."""
    q, k, v = prefill_inputs(dtype, rng)
    scale = DIM**-0.5
    q4, k4, v4 = (x.unsqueeze(0) for x in (q, k, v))
    i = np.arange(PREFILL_SEQ)[:, None]
    j = np.arange(PREFILL_SEQ)[None, :]
    visible = (j <= i) & (j > i - WINDOW)

    def ours(threads):
        return attnref.splash_attention(q, k, v, mask=("local", WINDOW - 1, 0), sm_scale=scale,
                                        num_threads=threads)

    if flex:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention

        def window(b, h, qi, kj):
            return (kj <= qi) & (kj > qi - WINDOW)

        block_mask = create_block_mask(window, None, None, PREFILL_SEQ, PREFILL_SEQ, device="cpu")
        compiled = torch.compile(flex_attention)

        def peer(threads):
            return compiled(q4, k4, v4, block_mask=block_mask, scale=scale)[0]
    else:
        mask = torch.from_numpy(visible)

        def peer(threads):
            return F.scaled_dot_product_attention(q4, k4, v4, attn_mask=mask, scale=scale)[0]

    want = attention64(rounded64(q), rounded64(k), rounded64(v), scale, visible)
    return ours, peer, want


def timed(fn, threads):
    start = time.perf_counter()
    out = fn(threads)
    return time.perf_counter() - start, out


def run_cell(ours, peer, want, threads, rounds):
    torch.set_num_threads(threads)
    ours_out, peer_out = ours(threads), peer(threads)  # warm-up (and FlexAttention's compile)
    ours_ms, peer_ms = [], []
    for _ in range(rounds):
        t, ours_out = timed(ours, threads)
        ours_ms.append(1e3 * t)
        t, peer_out = timed(peer, threads)
        peer_ms.append(1e3 * t)
    return (statistics.median(ours_ms), statistics.median(peer_ms), max_abs(ours_out, want),
            max_abs(peer_out, want))


def cells(selected):
    for dtype in ("f32", "bf16"):
        if "decode" in selected:
            for batch, ctx in DECODE:
                yield (f"decode/{dtype}/B:{batch}/Hq:{HQ}/Hkv:{HKV}/D:{DIM}/ctx:{ctx}", "sdpa",
                       lambda rng, b=batch, c=ctx, d=dtype: decode_case(b, c, d, rng))
        if "prefill" in selected:
            yield (f"prefill/causal/{dtype}/H:{PREFILL_HEADS}/S:{PREFILL_SEQ}/D:{DIM}", "sdpa",
                   lambda rng, d=dtype: prefill_case(d, rng))
        if "window" in selected:
            name = f"window:{WINDOW}/{dtype}/H:{PREFILL_HEADS}/S:{PREFILL_SEQ}/D:{DIM}"
            yield (name, "sdpa+mask", lambda rng, d=dtype: window_case(d, rng, flex=False))
            yield (name, "flex", lambda rng, d=dtype: window_case(d, rng, flex=True))


FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx512_fp16", "amx_bf16")


def cpu_name():
    """The CPU's model name and the flags of FLAGS it has (what the peers' kernels use)."""
    name, flags = platform.processor() or "?", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    name = line.split(":", 1)[1].strip()
                elif line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    break
    except OSError:
        pass
    return f"{name} ({' '.join(f for f in FLAGS if f in flags) or 'no listed flags'})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", default=f"1,{os.cpu_count()}")
    parser.add_argument("--cases", default="decode,prefill,window")
    args = parser.parse_args()
    threads = sorted({int(t) for t in args.threads.split(",")})
    selected = set(args.cases.split(","))
    info = attnref.build_info()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {cpu_name()}, "
          f"{os.cpu_count()} cores; attnref {info['version']} ({info['isa']} "
          f"kernels), torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}); "
          f"medians of {args.rounds} alternated rounds")
    print(f"| case | peer | threads | attnref ms | peer ms | attnref / peer | attnref max abs "
          f"| peer max abs |")
    print("|---|---|---|---|---|---|---|---|")
    total = ahead = 0
    for name, peer_name, make in cells(selected):
        ours, peer, want = make(np.random.default_rng(0))
        for n in threads:
            a, p, ea, ep = run_cell(ours, peer, want, n, args.rounds)
            total += 1
            ahead += a < p
            print(f"| {name} | {peer_name} | {n} | {a:.2f} | {p:.2f} | {a / p:.2f} | {ea:.1e} "
                  f"| {ep:.1e} |", flush=True)
    print(f"peers: {total} cells, attnref ahead in {ahead}")


if __name__ == "__main__":
    main()
