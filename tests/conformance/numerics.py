# SPDX-License-Identifier: Apache-2.0
"""Numbers: attnref's outputs against JAX's kernels (CPU, TPU interpret mode) and JAX's
reference functions, at the tolerances of JAX's own tests. Each comparison's max abs error is
appended to $ATTNREF_CONFORMANCE_RECORD (JSON lines) when set, for docs/conformance.md."""
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax.experimental.pallas.ops.tpu.paged_attention import quantization_utils
from jax.experimental.pallas.ops.tpu.paged_attention import util as paged_util
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash

import attnref
import judge

# JAX's test tolerances (atol, rtol), docs/conformance.md.
PAGED_TOL = {True: (1e-2, 2e-2), False: (2e-1, 1e-1)}  # key: q_kv_head_ratio > 1
RAGGED_TOL = {32: 0.15, 16: 0.2, 8: 0.2}  # atol = rtol by the K/V dtype's bits
SPLASH_TOL = dict(out=(3e-3, 3e-3), lse=(1e-3, 1e-3), dq=(2e-2, 3e-2), dk=(2e-2, 3e-2),
                  dv=(2e-2, 3e-2), dsinks=(5e-3, 3e-2))

_CODES = {np.dtype(ml_dtypes.bfloat16): ("bfloat16", np.uint16),
          np.dtype(ml_dtypes.float8_e4m3fn): ("float8_e4m3fn", np.uint8),
          np.dtype(ml_dtypes.float8_e5m2): ("float8_e5m2", np.uint8)}


def for_attnref(a):
    """An ml_dtypes array as attnref reads it: the array itself where the module takes
    ml_dtypes arrays, else its codes tagged by view_as."""
    a = np.asarray(a)
    if a.dtype not in _CODES:
        return a
    name, codes = _CODES[a.dtype]
    return attnref.view_as(np.ascontiguousarray(a).view(codes), name)


def record(family, dtype, against, what, err):
    judge.record(kind="number", family=family, dtype=dtype, against=against, what=what,
                 max_abs=float(err))


def check_close(family, dtype, against, what, got, want, atol, rtol):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    err = float(np.max(np.abs(got - want))) if got.size else 0.0
    record(family, dtype, against, what, err)
    np.testing.assert_allclose(got, want, atol=atol, rtol=rtol,
                               err_msg=f"{family} {dtype} {what} vs {against}")
    return err


# ---------------------------------------------------------------------------------------------
def paged_case(dtype, batch_lengths, hq, hkv, dim, page_size, pps, ppcb, soft_cap=None,
               quantized=False, megacore=None, seed=0):
    """Inputs as JAX's test builds them: standard normal q, K, V; a random permutation of the
    pages; int8 pages by quantization_utils.quantize_to_int8."""
    rng = np.random.default_rng(seed)
    batch = len(batch_lengths)
    total = batch * pps
    q = rng.standard_normal((batch, hq, dim)).astype(np.float32).astype(dtype)
    k = rng.standard_normal((hkv, total, page_size, dim)).astype(np.float32).astype(dtype)
    v = rng.standard_normal((hkv, total, page_size, dim)).astype(np.float32).astype(dtype)
    x = dict(q=q, k_pages=k, v_pages=v, lengths=np.array(batch_lengths, np.int32),
             page_indices=rng.permutation(total).reshape(batch, pps).astype(np.int32),
             pages_per_compute_block=ppcb, soft_cap=soft_cap, megacore_mode=megacore)
    if quantized:
        qk = quantization_utils.quantize_to_int8(jnp.asarray(k, jnp.float32))
        qv = quantization_utils.quantize_to_int8(jnp.asarray(v, jnp.float32))
        x.update(k_pages=np.asarray(qk.weight), v_pages=np.asarray(qv.weight),
                 k_scales=np.asarray(qk.scales), v_scales=np.asarray(qv.scales))
    return x


def paged_attnref(x, **extra):
    args, opts = judge.paged_attnref_args(x)
    args = tuple(for_attnref(a) for a in args)
    return np.asarray(attnref.paged_attention(*args, **opts, **extra), np.float32)


def paged_jax_reference(x):
    """JAX's grouped_query_attention_reference on the pages gathered per sequence."""
    pi = x["page_indices"]
    batch, pps = pi.shape
    hkv, _, page_size, _ = x["k_pages"].shape

    def gather(pages):  # [Hkv, P, S, d] -> [B, Hkv, pps * S, d]
        g = jnp.asarray(pages)[:, pi]  # [Hkv, B, pps, S, d]
        return jnp.moveaxis(g, 1, 0).reshape(batch, hkv, pps * page_size, pages.shape[-1])

    k, v = gather(x["k_pages"]), gather(x["v_pages"])
    if x.get("k_scales") is not None:  # the reference reads float pages (as JAX's test gives)
        k, v = (quantization_utils.unquantize_from_int8(
            quantization_utils.QuantizedTensor(w, gather(x[s])), dtype=jnp.float32)
            for w, s in ((k, "k_scales"), (v, "v_scales")))
    return np.asarray(paged_util.grouped_query_attention_reference(
        jnp.asarray(x["q"]), k, v, jnp.asarray(x["lengths"]), soft_cap=x.get("soft_cap")),
        np.float32)


def dtype_name(x_q, pages):
    q = np.dtype(x_q.dtype).name
    return q if np.dtype(pages.dtype) == np.dtype(x_q.dtype) else \
        f"{q} q, {np.dtype(pages.dtype).name} pages"


# ---------------------------------------------------------------------------------------------
def ragged_case(dtype, kv_dtype, seqs, hq, hkv, dim=128, page_size=4, pages_per_seq=None,
                tokens=None, slots=None, sliding_window=None, soft_cap=None, sm_scale=1.0,
                k_scale=None, v_scale=None, kv_block=2, q_block=4, seed=1234):
    """seqs: (q_len, kv_len) pairs. K/V of each sequence on pages of a shuffled pool (JAX's test
    uses contiguous pages; a permutation also exercises the page table)."""
    rng = np.random.default_rng(seed)
    slots = slots or len(seqs) + 1
    pps = pages_per_seq or max(-(-kv // page_size) for _, kv in seqs)
    total_pages = slots * pps + 1
    n_tokens = tokens or sum(q for q, _ in seqs) + 2
    q = rng.standard_normal((n_tokens, hq, dim)).astype(np.float32).astype(dtype)
    kv = rng.standard_normal((total_pages, page_size, 2 * hkv, dim)).astype(np.float32)
    kv = kv.astype(kv_dtype)
    kv_lens = np.zeros(slots, np.int32)
    cu = np.zeros(slots + 1, np.int32)
    for i, (ql, kl) in enumerate(seqs):
        kv_lens[i] = kl
        cu[i + 1] = cu[i] + ql
    cu[len(seqs) + 1:] = cu[len(seqs)]
    x = dict(q=q, kv_pages=kv, kv_lens=kv_lens,
             page_indices=rng.permutation(total_pages)[:slots * pps].reshape(slots, pps)
             .astype(np.int32),
             cu_q_lens=cu, num_seqs=np.array([len(seqs)], np.int32), sm_scale=sm_scale,
             num_kv_pages_per_block=min(kv_block, pps), num_queries_per_block=q_block)
    for name, value in (("sliding_window", sliding_window), ("soft_cap", soft_cap),
                        ("k_scale", k_scale), ("v_scale", v_scale)):
        if value is not None:
            x[name] = value
    return x


def ragged_attnref(x):
    args, opts = judge.ragged_attnref_args(x)
    args = tuple(for_attnref(a) for a in args)
    return np.asarray(attnref.ragged_paged_attention(*args, **opts), np.float32)


# ---------------------------------------------------------------------------------------------
def splash_case(dtype, hq, hkv, sq, skv, dim, dim_v=None, mask="causal", mqa=False,
                segments=False, sinks=False, soft_cap=None, block_q=128, block_kv=128,
                block_kv_compute=None, seed=5):
    """Inputs as JAX's test draws them: q, k, v uniform in [0, 1); segment ids of runs of at
    least 2 tokens, the same for q and kv (square shapes); sinks uniform in [0, 1)."""
    rng = np.random.default_rng(seed)
    kv_shape = (skv,) if mqa else (hkv, skv)
    x = dict(q=rng.uniform(size=(hq, sq, dim)).astype(np.float32).astype(dtype),
             k=rng.uniform(size=kv_shape + (dim,)).astype(np.float32).astype(dtype),
             v=rng.uniform(size=kv_shape + (dim_v or dim,)).astype(np.float32).astype(dtype),
             mask=mask, block_q=block_q, block_kv=block_kv, block_kv_compute=block_kv_compute,
             soft_cap=soft_cap)
    if segments:
        cuts = np.sort(rng.choice(np.arange(2, sq - 1, 2), 3, replace=False))
        ids = np.searchsorted(cuts, np.arange(sq), side="right").astype(np.int32)
        x.update(q_segment_ids=ids, kv_segment_ids=ids.copy())
    if sinks:
        x["sinks"] = rng.uniform(size=hq).astype(np.float32)
    return x


def splash_jax_forward(x):
    """JAX's kernel with save_residuals: (out, logsumexp)."""
    kernel = judge.splash_jax_kernel(x, backward=False, save_residuals=True)
    fn = judge.splash_jax_call(x, kernel)
    out, (lse,) = fn(*(jnp.asarray(x[n]) for n in ("q", "k", "v")))
    return np.asarray(out, np.float32), np.asarray(lse, np.float32)


def splash_jax_backward(x, dout):
    """JAX's custom VJP of its kernel: dq, dk, dv and dsinks (None without sinks)."""
    kernel = judge.splash_jax_kernel(x, backward=True)
    seg_fn = judge.splash_jax_call(x, kernel)
    q, k, v = (jnp.asarray(x[n]) for n in ("q", "k", "v"))
    if x.get("sinks") is None:
        _, vjp = jax.vjp(seg_fn, q, k, v)
        dq, dk, dv = vjp(jnp.asarray(dout))
        return [np.asarray(a, np.float32) for a in (dq, dk, dv)] + [None]
    seg = None
    if x.get("q_segment_ids") is not None:
        seg = splash.SegmentIds(q=jnp.asarray(x["q_segment_ids"]),
                                kv=jnp.asarray(x["kv_segment_ids"]))
    fn = lambda q, k, v, s: kernel(q, k, v, segment_ids=seg, sinks=s)  # noqa: E731
    _, vjp = jax.vjp(fn, q, k, v, jnp.asarray(x["sinks"]))
    return [np.asarray(a, np.float32) for a in vjp(jnp.asarray(dout))]


def splash_attnref_forward(x):
    q, k, v = (for_attnref(x[n]) for n in ("q", "k", "v"))
    out, lse = attnref.splash_attention(q, k, v, return_lse=True, **judge.splash_attnref_opts(x))
    return np.asarray(out, np.float32), np.asarray(lse, np.float32)


def splash_attnref_backward(x, dout):
    q, k, v = (for_attnref(x[n]) for n in ("q", "k", "v"))
    dq, dk, dv, dsinks = attnref.splash_attention_backward(q, k, v, for_attnref(dout),
                                                           **judge.splash_attnref_opts(x))
    return [None if a is None else np.asarray(a, np.float32) for a in (dq, dk, dv, dsinks)]


def splash_jax_reference(x, dout):
    """JAX's attention_reference per head (vmapped as its tests do, K/V repeated per group),
    forward and VJP, on float32 inputs."""
    q, k, v = (jnp.asarray(x[n], jnp.float32) for n in ("q", "k", "v"))
    mask = judge.splash_jax_mask(x)
    seg = None
    if x.get("q_segment_ids") is not None:
        seg = splash.SegmentIds(q=jnp.asarray(x["q_segment_ids"]),
                                kv=jnp.asarray(x["kv_segment_ids"]))
    ref = splash.make_masked_mqa_reference if k.ndim == 2 else splash.make_masked_mha_reference
    attn = ref(mask, backward_impl="vanilla")
    sinks = None if x.get("sinks") is None else jnp.asarray(x["sinks"])

    def fn(q, k, v, s):
        return attn(q, k, v, segment_ids=seg, sinks=s, attn_logits_soft_cap=x.get("soft_cap"))

    if sinks is None:
        out, vjp = jax.vjp(lambda q, k, v: fn(q, k, v, None), q, k, v)
        grads = list(vjp(jnp.asarray(dout, jnp.float32))) + [None]
    else:
        out, vjp = jax.vjp(fn, q, k, v, sinks)
        grads = list(vjp(jnp.asarray(dout, jnp.float32)))
    return np.asarray(out, np.float32), [None if g is None else np.asarray(g, np.float32)
                                         for g in grads]


def ragged_jax_reference_rows(x):
    """JAX's ref_ragged_paged_attention: the rows of the num_seqs sequences, in order."""
    return np.asarray(judge.ragged_jax_reference(x), np.float32)
