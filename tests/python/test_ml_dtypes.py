# SPDX-License-Identifier: Apache-2.0
"""ml_dtypes arrays (bfloat16, float8_e4m3fn, float8_e5m2), as JAX and numpy users hold them,
are read as they are by every function: the same results as their bits tagged with view_as,
and close to the float64 oracle on their values. A bfloat16 q still gives float32 outputs of
bfloat16 values. Runs where ml_dtypes is installed (ctest's test_python_ml_dtypes)."""
import numpy as np
import pytest

import attnref
import oracle
from conftest import paged_batch, ragged_batch

ml_dtypes = pytest.importorskip("ml_dtypes", reason="ml_dtypes is not installed (build/venv has it)")
bf16 = ml_dtypes.bfloat16


def bits(x):
    """The view_as form of an ml_dtypes array: its raw codes, tagged."""
    codes = x.view(np.uint16 if x.dtype.itemsize == 2 else np.uint8)
    return attnref.view_as(codes, x.dtype.name)


def test_paged_bfloat16_and_fp8_arrays_equal_their_view_as_bits():
    q, k, v, lengths, pi = paged_batch()
    qb, kb, vb = q.astype(bf16), k.astype(bf16), v.astype(bf16)
    out, lse = attnref.paged_attention(qb, kb, vb, lengths, pi, return_lse=True)
    assert out.dtype == np.float32
    want = attnref.paged_attention(bits(qb), bits(kb), bits(vb), lengths, pi)
    np.testing.assert_array_equal(out, want)
    ref, ref_lse = oracle.paged(qb.astype(np.float64), kb.astype(np.float64),
                                vb.astype(np.float64), lengths, pi)
    np.testing.assert_allclose(out, ref, rtol=2.0 ** -7, atol=2.0 ** -7)
    np.testing.assert_allclose(lse, ref_lse, rtol=1e-4, atol=1e-4)
    attnref.check_paged(qb, kb, vb, lengths, pi, tiers=("shape", "metadata", "data"))
    for fp8 in (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2):
        k8, v8 = k.astype(fp8), v.astype(fp8)
        got = attnref.paged_attention(q, k8, v8, lengths, pi)
        np.testing.assert_array_equal(got, attnref.paged_attention(q, bits(k8), bits(v8), lengths,
                                                                   pi))
        ref, _ = oracle.paged(q, k8.astype(np.float64), v8.astype(np.float64), lengths, pi)
        np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-6)


def test_ragged_bfloat16_arrays_equal_their_view_as_bits():
    q, kv, kv_lens, pi, cu, n = ragged_batch()
    qb, kvb = q.astype(bf16), kv.astype(bf16)
    got = attnref.ragged_paged_attention(qb, kvb, kv_lens, pi, cu, n)
    np.testing.assert_array_equal(got, attnref.ragged_paged_attention(bits(qb), bits(kvb), kv_lens,
                                                                      pi, cu, n))
    ref, _ = oracle.ragged(qb.astype(np.float64), kvb.astype(np.float64), kv_lens, pi, cu,
                            int(n[0]))
    live = slice(0, int(cu[int(n[0])]))
    np.testing.assert_allclose(got[live], ref[live], rtol=2.0 ** -7, atol=2.0 ** -7)
    report = attnref.compare_ragged(got.astype(bf16), qb, kvb, kv_lens, pi, cu, n, atol=0.02,
                                    rtol=0.02)
    assert report["ok"], report["text"]


def test_splash_forward_backward_and_sinks_take_bfloat16_arrays():
    rng = np.random.default_rng(5)
    q, k, v, dout = (rng.standard_normal(s).astype(bf16)
                     for s in ((2, 6, 8), (1, 6, 8), (1, 6, 8), (2, 6, 8)))
    sinks = np.array([0.5, -1.0], bf16)
    out = attnref.splash_attention(q, k, v, mask="causal", block_q=2, block_kv=2, sinks=sinks)
    want = attnref.splash_attention(bits(q), bits(k), bits(v), mask="causal", block_q=2,
                                    block_kv=2, sinks=sinks.astype(np.float32))
    np.testing.assert_array_equal(out, want)
    mask = oracle.mask_array("causal", 6, 6)
    ref, _ = oracle.splash(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                           np.broadcast_to(mask, (2, 6, 6)), sinks=sinks.astype(np.float64))
    np.testing.assert_allclose(out, ref, rtol=2.0 ** -7, atol=2.0 ** -7)
    grads = attnref.splash_attention_backward(q, k, v, dout, mask="causal", block_q=2, block_kv=2)
    want = attnref.splash_attention_backward(bits(q), bits(k), bits(v), bits(dout), mask="causal",
                                             block_q=2, block_kv=2)
    for g, w in zip(grads[:3], want[:3]):
        np.testing.assert_array_equal(g, w)


def test_merge_takes_bfloat16_states():
    rng = np.random.default_rng(6)
    out_a, out_b = (rng.standard_normal((3, 2, 8)).astype(bf16) for _ in range(2))
    lse_a, lse_b = (rng.standard_normal((3, 2)).astype(np.float32) for _ in range(2))
    got = attnref.merge_attention_states(out_a, lse_a, out_b, lse_b)
    want = attnref.merge_attention_states(bits(out_a), lse_a, bits(out_b), lse_b)
    for g, w in zip(got if isinstance(got, tuple) else (got,),
                    want if isinstance(want, tuple) else (want,)):
        np.testing.assert_array_equal(g, w)


def test_view_as_still_takes_raw_codes_only():
    q = np.ones((2, 4, 8), np.float32).astype(bf16)
    with pytest.raises(attnref.ShapeError, match="view_as takes an unsigned integer array"):
        attnref.paged_attention(attnref.view_as(q, "bfloat16"), q, q, np.array([1, 1], np.int32),
                                np.zeros((2, 1), np.int32))


def test_other_ml_dtypes_are_named():
    q, k, v, lengths, pi = paged_batch()
    with pytest.raises(attnref.ShapeError,
                       match="q has dtype float8_e4m3fnuz, which attnref does not read"):
        attnref.paged_attention(q.astype(ml_dtypes.float8_e4m3fnuz), k, v, lengths, pi)
