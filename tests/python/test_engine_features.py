# SPDX-License-Identifier: Apache-2.0
"""sliding_window, sinks and alibi_slopes in every family, against the float64 oracle
(tests/python/oracle.py: window p - W < t <= p, a sink as one more logit with no value, the
ALiBi bias slope[h] * (key_pos - query_pos) after the soft cap)."""
import numpy as np
import pytest

import attnref
import oracle
from conftest import paged_batch, ragged_batch, tolerance

HEADS = 4
SINKS = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
SLOPES = np.array([0.5, 0.25, 0.125, 0.0625], np.float32)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("window,sinks,slopes", [
    (5, None, None), (None, SINKS, None), (None, None, SLOPES), (3, SINKS, SLOPES)])
def test_paged_engine_features(dtype, window, sinks, slopes):
    q, k, v, lengths, pi = paged_batch(dtype)
    opts = dict(sliding_window=window, sinks=sinks, alibi_slopes=slopes)
    attnref.check_paged(q, k, v, lengths, pi, **opts)
    out, lse = attnref.paged_attention(q, k, v, lengths, pi, sm_scale=0.25, soft_cap=5.0,
                                       return_lse=True, **opts)
    want, want_lse = oracle.paged(q, k, v, lengths, pi, sm_scale=0.25, soft_cap=5.0, **opts)
    rtol, atol = tolerance(dtype)
    # All rows: the empty sequence is a zero row whose lse is -inf, or the sink's logit.
    np.testing.assert_allclose(out, want, rtol=rtol, atol=atol)
    np.testing.assert_allclose(lse, want_lse, rtol=max(rtol, 1e-6), atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("window,sinks,slopes", [
    (None, SINKS, None), (None, None, SLOPES), (4, SINKS, SLOPES)])
def test_ragged_engine_features(dtype, window, sinks, slopes):
    q, kv, kv_lens, pi, cu, num_seqs = ragged_batch(dtype)
    opts = dict(sliding_window=window, sinks=sinks, alibi_slopes=slopes)
    attnref.check_ragged(q, kv, kv_lens, pi, cu, num_seqs, **opts)
    out, lse = attnref.ragged_paged_attention(q, kv, kv_lens, pi, cu, num_seqs, sm_scale=0.4,
                                              soft_cap=6.0, return_lse=True, **opts)
    want, want_lse = oracle.ragged(q, kv, kv_lens, pi, cu, 2, sm_scale=0.4, soft_cap=6.0, **opts)
    rtol, atol = tolerance(dtype)
    np.testing.assert_allclose(out[:4], want[:4], rtol=rtol, atol=atol)
    np.testing.assert_allclose(lse[:4], want_lse[:4], rtol=max(rtol, 1e-6), atol=1e-6)
    assert np.all(out[4:] == 0)  # padding rows


def splash_qkv(dtype, sq=10, skv=10, d=8, hkv=2, seed=3):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((HEADS, sq, d)).astype(dtype),
            rng.standard_normal((hkv, skv, d)).astype(dtype),
            rng.standard_normal((hkv, skv, d)).astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("window,sinks,slopes", [
    (3, None, None), (None, None, SLOPES), (4, SINKS, SLOPES)])
def test_splash_engine_features(dtype, window, sinks, slopes):
    q, k, v = splash_qkv(dtype)
    mask = np.broadcast_to(oracle.mask_array("full", 10, 10), (HEADS, 10, 10))
    opts = dict(sliding_window=window, sinks=sinks, alibi_slopes=slopes)
    attnref.check_splash(q, k, v, **opts)
    out, lse = attnref.splash_attention(q, k, v, sm_scale=0.3, soft_cap=4.0, block_q=4,
                                        block_kv=4, return_lse=True, **opts)
    want, want_lse = oracle.splash(q, k, v, mask, sm_scale=0.3, soft_cap=4.0, sinks=sinks,
                                   sliding_window=window, alibi_slopes=slopes)
    rtol, atol = tolerance(dtype)
    np.testing.assert_allclose(out, want, rtol=rtol, atol=atol)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-6, atol=1e-6)


def test_splash_backward_with_alibi_and_sinks():
    q, k, v = splash_qkv(np.float64)
    dout = np.random.default_rng(9).standard_normal((HEADS, 10, 8))
    mask = np.broadcast_to(oracle.mask_array("causal", 10, 10), (HEADS, 10, 10))
    dq, dk, dv, dsinks = attnref.splash_attention_backward(
        q, k, v, dout, mask="causal", sm_scale=0.3, sinks=SINKS, alibi_slopes=SLOPES,
        block_q=4, block_kv=4)
    want = oracle.splash_backward(q, k, v, mask, dout, sm_scale=0.3, sinks=SINKS.astype(np.float64),
                                  alibi_slopes=SLOPES)
    for got, w in zip((dq, dk, dv, dsinks), want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def test_head_options_take_any_float_dtype_as_float32():
    q, k, v, lengths, pi = paged_batch()
    want = attnref.paged_attention(q, k, v, lengths, pi, sinks=SINKS, alibi_slopes=SLOPES)
    got = attnref.paged_attention(q, k, v, lengths, pi, sinks=SINKS.astype(np.float16),
                                  alibi_slopes=list(SLOPES.astype(np.float64)))
    np.testing.assert_array_equal(got, want)


def test_head_option_errors():
    q, k, v, lengths, pi = paged_batch()
    with pytest.raises(attnref.ShapeError) as e:  # a finite value float32 cannot hold
        attnref.paged_attention(q, k, v, lengths, pi, alibi_slopes=np.full(HEADS, 1e39))
    assert e.value.code == "invalid_alibi_slope" and e.value.field == "alibi_slopes"
    assert e.value.message == "alibi_slopes[0]=1e+39 is outside the float32 range"
    with pytest.raises(attnref.ShapeError) as e:  # as attnref-run names it
        attnref.paged_attention(q, k, v, lengths, pi, sinks=np.full(HEADS, -1e39))
    assert e.value.code == "non_finite_data" and e.value.field == "sinks"
    with pytest.raises(attnref.ShapeError) as e:
        attnref.paged_attention(q, k, v, lengths, pi, sinks=np.zeros(HEADS, np.int32))
    assert e.value.code == "dtype_not_supported"
    with pytest.raises(attnref.ShapeError) as e:
        attnref.splash_attention(*splash_qkv(np.float32), alibi_slopes=np.zeros((2, 2)))
    assert e.value.code == "rank_mismatch"
    with pytest.raises(attnref.ShapeError) as e:
        attnref.splash_attention(*splash_qkv(np.float32), alibi_slopes=SLOPES[:3])
    assert e.value.code == "alibi_slopes_shape"
    with pytest.raises(attnref.ShapeError) as e:
        attnref.check_paged(q, k, v, lengths, pi, sliding_window=0)
    assert e.value.code == "invalid_sliding_window"
    with pytest.raises(attnref.ShapeError) as e:
        attnref.check_splash(*splash_qkv(np.float32), alibi_slopes=np.full(HEADS, np.nan))
    assert e.value.code == "invalid_alibi_slope"


CONVENTIONS = [dict(alibi_convention="absolute"), dict(soft_cap_order="alibi_then_cap"),
               dict(alibi_convention="absolute", soft_cap_order="alibi_then_cap")]


@pytest.mark.parametrize("conventions", CONVENTIONS)
def test_splash_computes_each_engines_alibi_and_soft_cap_conventions(conventions):
    """A full (non-causal) mask, where the absolute distance differs from the signed one."""
    rng = np.random.default_rng(7)
    q = rng.standard_normal((HEADS, 6, 8))
    k = rng.standard_normal((2, 9, 8))
    v = rng.standard_normal((2, 9, 8))
    opts = dict(sm_scale=0.5, soft_cap=3.0, alibi_slopes=SLOPES, **conventions)
    out, lse = attnref.splash_attention(q, k, v, return_lse=True, **opts)
    want, want_lse = oracle.splash(q, k, v, np.ones((HEADS, 6, 9), bool), **opts)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-6, atol=1e-6)
    plain = attnref.splash_attention(q, k, v, sm_scale=0.5, soft_cap=3.0, alibi_slopes=SLOPES)
    assert np.abs(out - plain).max() > 1e-3  # the option changes the answer


@pytest.mark.parametrize("conventions", CONVENTIONS)
def test_paged_computes_each_engines_conventions(conventions):
    q, k, v, lengths, pi = paged_batch(np.float64)
    opts = dict(sm_scale=0.25, soft_cap=2.0, alibi_slopes=SLOPES, **conventions)
    out = attnref.paged_attention(q, k, v, lengths, pi, **opts)
    want, _ = oracle.paged(q, k, v, lengths, pi, **opts)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


def test_unknown_convention_names_are_value_errors():
    q, k, v, lengths, pi = paged_batch()
    with pytest.raises(ValueError, match="alibi_convention must be 'signed' or 'absolute'"):
        attnref.check_paged(q, k, v, lengths, pi, alibi_convention="abs")
    with pytest.raises(ValueError, match="soft_cap_order must be"):
        attnref.check_paged(q, k, v, lengths, pi, soft_cap_order="cap_first")
    with pytest.raises(attnref.ShapeError) as e:  # JAX's kernel has neither option
        attnref.check_paged(q, k, v, lengths, pi, alibi_slopes=SLOPES,
                            alibi_convention="absolute", profile="jax")
    assert e.value.code == "option_not_in_jax"
