# SPDX-License-Identifier: Apache-2.0
"""attnref.check_ragged, ragged_paged_attention, merge_attention_states and check_config."""
import numpy as np
import pytest

import attnref
import oracle
from conftest import paged_batch, ragged_batch, tolerance


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_ragged_matches_oracle(dtype):
    q, kv, kv_lens, pi, cu, num_seqs = ragged_batch(dtype)
    attnref.check_ragged(q, kv, kv_lens, pi, cu, num_seqs)
    out, lse = attnref.ragged_paged_attention(q, kv, kv_lens, pi, cu, num_seqs, sm_scale=0.4,
                                              sliding_window=5, soft_cap=6.0, return_lse=True)
    want, want_lse = oracle.ragged(q, kv, kv_lens, pi, cu, 2, sm_scale=0.4, sliding_window=5,
                                   soft_cap=6.0)
    rtol, atol = tolerance(dtype)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=rtol, atol=atol)
    np.testing.assert_allclose(lse, want_lse, rtol=max(rtol, 1e-6), atol=atol)
    assert np.all(out[4:] == 0) and np.all(lse[4:] == -np.inf)  # padding rows


def test_ragged_separate_pools_int_num_seqs_and_int64():
    q, kv, kv_lens, pi, cu, num_seqs = ragged_batch()
    want = attnref.ragged_paged_attention(q, kv, kv_lens, pi, cu, num_seqs)
    # The engine's separate pools: K and V as [Hkv, P, S, D] (jax) or NHD [P, S, Hkv, D].
    k, v = kv[:, :, 0::2], kv[:, :, 1::2]  # strided views into the combined pool, no copy
    got = attnref.ragged_paged_attention(q, (k, v), kv_lens, pi, cu, 2, kv_layout="nhd")
    np.testing.assert_array_equal(got, want)
    k_jax = np.ascontiguousarray(k.transpose(2, 0, 1, 3))
    v_jax = np.ascontiguousarray(v.transpose(2, 0, 1, 3))
    got = attnref.ragged_paged_attention(q, [k_jax, v_jax], kv_lens.astype(np.int64),
                                         pi.astype(np.int64), cu.astype(np.int64),
                                         num_seqs.astype(np.int64))
    np.testing.assert_array_equal(got, want)
    attnref.check_ragged(q, (k, v), kv_lens, pi, cu, 2, kv_layout="nhd", profile="reference")


def test_ragged_int8_pools_with_scales():
    q, kv, kv_lens, pi, cu, num_seqs = ragged_batch()
    kv8 = np.random.default_rng(2).integers(-100, 100, kv.shape).astype(np.int8)
    out = attnref.ragged_paged_attention(q, kv8, kv_lens, pi, cu, num_seqs, k_scale=0.02,
                                         v_scale=0.03)
    # k = q_dtype(float(k) * k_scale), per RaggedPagedAttentionArgs.
    deq = kv8.astype(np.float32)
    deq[:, :, 0::2] *= np.float32(0.02)
    deq[:, :, 1::2] *= np.float32(0.03)
    want, _ = oracle.ragged(q, deq, kv_lens, pi, cu, 2)
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_merge_of_two_paged_halves_is_the_whole(dtype):
    q, k, v, lengths, pi = paged_batch(dtype, batch=4, pps=4)
    lengths = np.array([16, 5, 9, 0], np.int32)
    page = k.shape[2]
    # Pages [0, 2) and [2, 4) of each sequence: disjoint key sets.
    first = np.minimum(lengths, 2 * page).astype(np.int32)
    rest = (lengths - first).astype(np.int32)
    out_a, lse_a = attnref.paged_attention(q, k, v, first, pi[:, :2].copy(), return_lse=True)
    out_b, lse_b = attnref.paged_attention(q, k, v, rest, pi[:, 2:].copy(), return_lse=True)
    out, lse = attnref.merge_attention_states(out_a, lse_a, out_b, lse_b, num_threads=2)
    want, want_lse = oracle.paged(q, k, v, lengths, pi)
    rtol, atol = tolerance(dtype)
    np.testing.assert_allclose(out, want, rtol=max(rtol, 1e-6), atol=max(atol, 1e-6))
    np.testing.assert_allclose(lse, want_lse, rtol=1e-6, atol=1e-6)
    m_out, m_lse = oracle.merge(out_a, lse_a, out_b, lse_b)
    np.testing.assert_allclose(out, m_out, rtol=max(rtol, 1e-6), atol=max(atol, 1e-6))


def test_check_config():
    attnref.check_config(32, 8, 128, head_dim_v=64, page_size=16)
    with pytest.raises(attnref.ShapeError) as e:
        attnref.check_config(8, 6, 128)
    err = e.value
    assert isinstance(err, ValueError)
    assert err.code == "gqa_not_divisible" and err.jax_check == "P2"
    assert err.values[:2] == (8, 6)
    assert err.hint == "valid num_kv_heads for 8 query heads: 1, 2, 4, 8"
    assert str(err) == ("error[gqa_not_divisible] Number of Q heads must be divisible by number "
                        "of KV heads. Got 8 and 6. (hint: valid num_kv_heads for 8 query heads: "
                        "1, 2, 4, 8)")
    assert err.message.startswith("Number of Q heads")


def test_data_tier_of_splash_and_ragged():
    q, kv, kv_lens, pi, cu, num_seqs = ragged_batch()
    kv_nan = kv.copy()
    kv_nan[pi[0, 0], 0, 0, 0] = np.inf  # K of a live token of sequence 0
    attnref.check_ragged(q, kv_nan, kv_lens, pi, cu, num_seqs)
    with pytest.raises(attnref.ShapeError) as e:
        attnref.check_ragged(q, kv_nan, kv_lens, pi, cu, num_seqs,
                             tiers=("shape", "metadata", "data"))
    assert e.value.code == "non_finite_data"
    s = np.ones((2, 4, 8), np.float32)
    s_nan = s.copy()
    s_nan[1, 2, 3] = np.nan
    attnref.check_splash(s_nan, s, s, tiers=["shape", "metadata"])
    with pytest.raises(attnref.ShapeError) as e:
        attnref.check_splash(s_nan, s, s, tiers=["shape", "metadata", "data"])
    assert e.value.code == "non_finite_data" and "q" in str(e.value)
