# SPDX-License-Identifier: Apache-2.0
"""attnref.check_paged and attnref.paged_attention against the float64 oracle."""
import numpy as np
import pytest

import attnref
import oracle
from conftest import paged_batch, tolerance


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_paged_matches_oracle(dtype):
    q, k, v, lengths, pi = paged_batch(dtype)
    attnref.check_paged(q, k, v, lengths, pi)
    out, lse = attnref.paged_attention(q, k, v, lengths, pi, sm_scale=0.25, soft_cap=5.0,
                                       return_lse=True)
    assert out.dtype == dtype and out.shape == q.shape
    assert lse.dtype == np.float32 and lse.shape == q.shape[:2]
    want, want_lse = oracle.paged(q, k, v, lengths, pi, sm_scale=0.25, soft_cap=5.0)
    rtol, atol = tolerance(dtype)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=rtol, atol=atol)
    np.testing.assert_allclose(lse, want_lse, rtol=max(rtol, 1e-6), atol=atol)
    assert np.all(out[1] == 0) and np.all(lse[1] == -np.inf)  # the empty sequence


def test_paged_returns_only_out_by_default():
    q, k, v, lengths, pi = paged_batch()
    assert isinstance(attnref.paged_attention(q, k, v, lengths, pi), np.ndarray)


@pytest.mark.parametrize("layout", ["nhd", "hnd"])
def test_paged_layouts_give_the_jax_layout_result(layout):
    q, k, v, lengths, pi = paged_batch()
    order = {"nhd": (1, 2, 0, 3), "hnd": (1, 0, 2, 3)}[layout]
    want = attnref.paged_attention(q, k, v, lengths, pi)
    # Copies in the engine's physical layout (C order), read through kv_layout.
    k_l, v_l = np.ascontiguousarray(k.transpose(order)), np.ascontiguousarray(v.transpose(order))
    got = attnref.paged_attention(q, k_l, v_l, lengths, pi, kv_layout=layout)
    np.testing.assert_array_equal(got, want)
    attnref.check_paged(q, k_l, v_l, lengths, pi, kv_layout=layout)


def test_paged_int8_pages_with_scales():
    q, k, v, lengths, pi = paged_batch()
    rng = np.random.default_rng(5)
    k8 = rng.integers(-127, 128, k.shape).astype(np.int8)
    v8 = rng.integers(-127, 128, v.shape).astype(np.int8)
    ks = rng.uniform(0.5, 2.0, k.shape[:3] + (1,)).astype(np.float32)
    vs = rng.uniform(0.5, 2.0, v.shape[:3] + (k.shape[3],)).astype(np.float32)
    out = attnref.paged_attention(q, k8, v8, lengths, pi, k_scales=ks, v_scales=vs)
    # Dequantization per validate/paged.hpp: float(x) * scale / 127.5.
    want, _ = oracle.paged(q, k8 * ks.astype(np.float64) / 127.5, v8 * vs.astype(np.float64) / 127.5,
                           lengths, pi)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)


def test_paged_bfloat16_pages_through_view_as():
    q, k, v, lengths, pi = paged_batch()
    # bf16 bit patterns: the top 16 bits of float32 (exactly representable values).
    k_bits = (k.view(np.uint32) >> 16).astype(np.uint16)
    v_bits = (v.view(np.uint32) >> 16).astype(np.uint16)
    k_bf = (k_bits.astype(np.uint32) << 16).view(np.float32)
    v_bf = (v_bits.astype(np.uint32) << 16).view(np.float32)
    out = attnref.paged_attention(q, attnref.view_as(k_bits, "bfloat16"),
                                  attnref.view_as(v_bits, "bfloat16"), lengths, pi)
    want, _ = oracle.paged(q, k_bf, v_bf, lengths, pi)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-6)


def test_paged_int64_indices_and_profiles():
    q, k, v, lengths, pi = paged_batch()
    want = attnref.paged_attention(q, k, v, lengths, pi)
    got = attnref.paged_attention(q, k, v, lengths.astype(np.int64), pi.astype(np.int64))
    np.testing.assert_array_equal(got, want)
    attnref.check_paged(q, k, v, lengths.astype(np.int64), pi.astype(np.int64))
    with pytest.raises(attnref.ShapeError) as e:  # JAX takes int32 lengths only (P7)
        attnref.check_paged(q, k, v, lengths.astype(np.int64), pi.astype(np.int64), profile="jax")
    assert e.value.jax_check == "P7"


def test_paged_tiers():
    q, k, v, lengths, pi = paged_batch()
    bad = pi.copy()
    bad[0, 0] = 99  # a live page out of range: the metadata tier's finding
    attnref.check_paged(q, k, v, lengths, bad, tiers=("shape",))
    with pytest.raises(attnref.ShapeError) as e:
        attnref.check_paged(q, k, v, lengths, bad)
    assert e.value.code == "page_index_out_of_range"
    k_nan = k.copy()
    k_nan[:, pi[0, 0], 0, 0] = np.nan
    attnref.check_paged(q, k_nan, v, lengths, pi)
    with pytest.raises(attnref.ShapeError) as e:
        attnref.check_paged(q, k_nan, v, lengths, pi, tiers=("shape", "metadata", "data"))
    assert e.value.code == "non_finite_data"
    with pytest.raises(ValueError):
        attnref.check_paged(q, k, v, lengths, pi, tiers=("data",))
    with pytest.raises(ValueError):
        attnref.check_paged(q, k, v, lengths, pi, tiers=("shape", "bogus"))
