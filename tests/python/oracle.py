# SPDX-License-Identifier: Apache-2.0
"""Float64 oracles for the pytest suite: plain numpy loops written from the formulas in the
C++ headers and docs/, independent of attnref's kernels (no blocking, no online softmax)."""
import numpy as np


def bf16_bits(x):
    """float32 -> bfloat16 bit patterns, rounding to nearest even (no NaN in the inputs)."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def bf16_values(bits):
    """The float32 value of each bfloat16 bit pattern (exact)."""
    return (np.asarray(bits, np.uint16).astype(np.uint32) << 16).view(np.float32)


def softmax_row(logits, sink=None):
    """(weights, lse) of one row of float64 logits; a sink is one more logit with no value.
    No logits and no sink: (empty, -inf)."""
    parts = list(logits) + ([sink] if sink is not None else [])
    if not parts:
        return np.zeros(0), -np.inf
    m = max(parts)
    e = np.exp(np.asarray(logits, dtype=np.float64) - m)
    total = e.sum() + (np.exp(sink - m) if sink is not None else 0.0)
    return e / total, m + np.log(total)


def cap(x, soft_cap):
    return x if soft_cap is None else soft_cap * np.tanh(x / soft_cap)


def alibi(alibi_slopes, h, key_pos, query_pos):
    """The ALiBi bias slope[h] * (key_pos - query_pos), added after the soft cap (0 without)."""
    return 0.0 if alibi_slopes is None else float(alibi_slopes[h]) * (key_pos - query_pos)


def logit(s, soft_cap, alibi_slopes, h, key_pos, query_pos, alibi_convention="signed",
          soft_cap_order="cap_then_alibi"):
    """The logit of scaled score s: the ALiBi bias slope[h] * (key_pos - query_pos) ("signed")
    or -slope[h] * |key_pos - query_pos| ("absolute"), added after the soft cap
    ("cap_then_alibi") or inside it ("alibi_then_cap")."""
    if alibi_slopes is None:
        return cap(s, soft_cap)
    d = key_pos - query_pos
    bias = float(alibi_slopes[h]) * (d if alibi_convention == "signed" else -abs(d))
    return cap(s, soft_cap) + bias if soft_cap_order == "cap_then_alibi" else cap(s + bias, soft_cap)


def in_window(key_pos, query_pos, sliding_window):
    """Key t is visible from query position p iff p - W < t <= p (no window: t <= p)."""
    return key_pos <= query_pos and (sliding_window is None or key_pos > query_pos - sliding_window)


def paged(q, k_pages, v_pages, lengths, page_indices, sm_scale=1.0, soft_cap=None,
          sliding_window=None, sinks=None, alibi_slopes=None, **conventions):
    """q [B, Hq, D], pages [Hkv, P, S, D] (jax layout) -> out [B, Hq, D], lse [B, Hq]. The
    query sits at position length - 1."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k_pages, v_pages))
    batch, hq, dim = q.shape
    hkv, _, page_size, _ = k.shape
    out = np.zeros((batch, hq, v.shape[3]))
    lse = np.full((batch, hq), -np.inf)
    for b in range(batch):
        pos = int(lengths[b]) - 1
        tokens = [t for t in range(int(lengths[b])) if in_window(t, pos, sliding_window)]
        for h in range(hq):
            g = h // (hq // hkv)
            keys = [k[g, page_indices[b, t // page_size], t % page_size] for t in tokens]
            vals = [v[g, page_indices[b, t // page_size], t % page_size] for t in tokens]
            logits = [logit(sm_scale * q[b, h] @ kt, soft_cap, alibi_slopes, h, t, pos,
                            **conventions) for t, kt in zip(tokens, keys)]
            w, lse[b, h] = softmax_row(logits, None if sinks is None else float(sinks[h]))
            for wt, vt in zip(w, vals):
                out[b, h] += wt * vt
    return out, lse


def mask_array(kind, sq, skv, *args):
    """The bool [Sq, Skv] of a named mask, from the formulas in masks/mask.hpp."""
    qi, ki = np.meshgrid(np.arange(sq), np.arange(skv), indexing="ij")
    if kind == "full":
        return np.ones((sq, skv), bool)
    if kind == "causal":
        offset = args[0] if args else 0
        return qi + offset >= ki
    if kind == "local":
        left, right = args[0], args[1]
        offset = args[2] if len(args) > 2 else 0
        m = np.ones((sq, skv), bool)
        if left is not None:
            m &= ki >= qi + offset - left
        if right is not None:
            m &= ki <= qi + offset + right
        return m
    if kind == "chunked":
        return (qi // args[0] == ki // args[0]) & (qi >= ki)
    raise ValueError(kind)


def splash(q, k, v, mask, sm_scale=1.0, soft_cap=None, sinks=None, q_seg=None, kv_seg=None,
           sliding_window=None, alibi_slopes=None, **conventions):
    """q [Hq, Sq, D], k/v [Hkv, Skv, D], mask bool [Hq, Sq, Skv] -> out [Hq, Sq, Dv], lse.
    Row r sits at position r, column t at t (for the window and ALiBi)."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    hq, sq, _ = q.shape
    hkv, skv, dv = v.shape
    out = np.zeros((hq, sq, dv))
    lse = np.zeros((hq, sq))
    for h in range(hq):
        g = h // (hq // hkv)
        for r in range(sq):
            cols = [t for t in range(skv) if mask[h, r, t] and (q_seg is None or q_seg[r] == kv_seg[t])
                    and (sliding_window is None or in_window(t, r, sliding_window))]
            logits = [logit(sm_scale * q[h, r] @ k[g, t], soft_cap, alibi_slopes, h, t, r,
                            **conventions) for t in cols]
            sink = None if sinks is None else float(sinks[h])
            w, lse[h, r] = softmax_row(logits, sink)
            for wt, t in zip(w, cols):
                out[h, r] += wt * v[g, t]
    return out, lse


def splash_backward(q, k, v, mask, dout, sm_scale=1.0, sinks=None, alibi_slopes=None,
                    residual_out=None):
    """Gradients (dq, dk, dv, dsinks) of splash (no soft cap) by the softmax chain rule. The
    ALiBi bias is a constant of the logits: it changes the weights, not the chain rule.
    `residual_out`: the forward output the backward pass reads for delta = sum(dout * out),
    when a kernel keeps it in a narrower dtype (bfloat16, as JAX does); default: exact."""
    q, k, v, dout = (np.asarray(x, dtype=np.float64) for x in (q, k, v, dout))
    out, lse = splash(q, k, v, mask, sm_scale, None, sinks, alibi_slopes=alibi_slopes)
    if residual_out is not None:
        out = np.asarray(residual_out, dtype=np.float64)
    hq, sq, _ = q.shape
    hkv = k.shape[0]
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    dsinks = np.zeros(hq)
    for h in range(hq):
        g = h // (hq // hkv)
        logits = sm_scale * q[h] @ k[g].T
        if alibi_slopes is not None:
            rows, cols = np.meshgrid(np.arange(q.shape[1]), np.arange(k.shape[1]), indexing="ij")
            logits = logits + float(alibi_slopes[h]) * (cols - rows)
        p = np.where(mask[h], np.exp(logits - lse[h][:, None]), 0.0)
        dv[g] += p.T @ dout[h]
        dp = dout[h] @ v[g].T
        delta = (dout[h] * out[h]).sum(axis=1)
        ds = p * (dp - delta[:, None])
        dq[h] = sm_scale * ds @ k[g]
        dk[g] += sm_scale * ds.T @ q[h]
        if sinks is not None:
            dsinks[h] = -(np.exp(sinks[h] - lse[h]) * delta).sum()
    return dq, dk, dv, dsinks


def ragged(q, kv_pages, kv_lens, page_indices, cu_q_lens, num_seqs, sm_scale=1.0,
           sliding_window=None, soft_cap=None, sinks=None, alibi_slopes=None):
    """q [T, Hq, D], kv_pages [P, S, 2*Hkv, D] (K of head h at 2h, V at 2h+1). Row r of a
    sequence sits at position kv_len - q_len + r."""
    q = np.asarray(q, dtype=np.float64)
    kv = np.asarray(kv_pages, dtype=np.float64)
    tokens, hq, _ = q.shape
    page_size, hkv = kv.shape[1], kv.shape[2] // 2
    out = np.zeros(q.shape)
    lse = np.full((tokens, hq), -np.inf)
    for i in range(num_seqs):
        q0, q1, kv_len = int(cu_q_lens[i]), int(cu_q_lens[i + 1]), int(kv_lens[i])
        for r in range(q1 - q0):
            pos = kv_len - (q1 - q0) + r
            cols = [c for c in range(kv_len) if in_window(c, pos, sliding_window)]
            for h in range(hq):
                g = h // (hq // hkv)
                row = [kv[page_indices[i, c // page_size], c % page_size] for c in cols]
                logits = [cap(sm_scale * q[q0 + r, h] @ x[2 * g], soft_cap)
                          + alibi(alibi_slopes, h, c, pos) for c, x in zip(cols, row)]
                w, lse[q0 + r, h] = softmax_row(logits, None if sinks is None else float(sinks[h]))
                for wt, x in zip(w, row):
                    out[q0 + r, h] += wt * x[2 * g + 1]
    return out, lse


def merge(out_a, lse_a, out_b, lse_b):
    out_a, out_b = np.asarray(out_a, np.float64), np.asarray(out_b, np.float64)
    lse_a, lse_b = np.asarray(lse_a, np.float64), np.asarray(lse_b, np.float64)
    m = np.maximum(lse_a, lse_b)
    safe = np.where(np.isfinite(m), m, 0.0)
    wa, wb = np.exp(lse_a - safe), np.exp(lse_b - safe)
    total = wa + wb
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (wa[..., None] * out_a + wb[..., None] * out_b) / total[..., None]
        lse = safe + np.log(total)
    out = np.where(total[..., None] > 0, out, 0.0)
    return out, lse
