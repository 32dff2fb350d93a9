# SPDX-License-Identifier: Apache-2.0
"""attnref.check_splash, splash_attention and splash_attention_backward against the float64
oracle, with every mask form."""
import numpy as np
import pytest

import attnref
import oracle
from conftest import tolerance

HQ, HKV, SQ, SKV, D = 4, 2, 10, 12, 8


def qkv(dtype=np.float32, seed=3, hkv=HKV):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((HQ, SQ, D)).astype(dtype)
    k = rng.standard_normal((hkv, SKV, D)).astype(dtype)
    v = rng.standard_normal((hkv, SKV, D)).astype(dtype)
    return q, k, v


MASKS = [
    (None, ("full",)),
    ("causal", ("causal", 2)),  # causal with offset 0 hides nothing past q; use offset 2 below
    (("causal", 2), ("causal", 2)),
    (("local", 3, 1), ("local", 3, 1)),
    (("local", None, 0, 2), ("local", None, 0, 2)),
    (("chunked", 4), ("chunked", 4)),
]


@pytest.mark.parametrize("spec,named", MASKS[0:1] + MASKS[2:])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_splash_named_masks(spec, named, dtype):
    q, k, v = qkv(dtype)
    mask = np.broadcast_to(oracle.mask_array(named[0], SQ, SKV, *named[1:]), (HQ, SQ, SKV))
    attnref.check_splash(q, k, v, mask=spec)
    out, lse = attnref.splash_attention(q, k, v, mask=spec, sm_scale=0.3, soft_cap=4.0,
                                        block_q=4, block_kv=8, return_lse=True)
    want, want_lse = oracle.splash(q, k, v, mask, sm_scale=0.3, soft_cap=4.0)
    rtol, atol = tolerance(dtype)
    np.testing.assert_allclose(out, want, rtol=rtol, atol=atol)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-6, atol=1e-6)


def test_splash_causal_string():
    q, k, v = qkv()
    out = attnref.splash_attention(q, k, v, mask="causal")
    mask = np.broadcast_to(oracle.mask_array("causal", SQ, SKV), (HQ, SQ, SKV))
    want, _ = oracle.splash(q, k, v, mask)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-6)


def test_splash_dense_per_head_and_list_masks(rng):
    q, k, v = qkv(np.float16)
    dense = rng.random((HQ, SQ, SKV)) < 0.6
    dense[0, 0] = False  # a row that sees no key: zero out, lse -inf
    out, lse = attnref.splash_attention(q, k, v, mask=dense, return_lse=True)
    want, want_lse = oracle.splash(q, k, v, dense)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=2e-3, atol=2e-3)
    assert np.all(out[0, 0] == 0) and lse[0, 0] == -np.inf
    # One shared 2-D mask; and a list of per-head specs mixing forms.
    shared = dense[1]
    np.testing.assert_array_equal(attnref.splash_attention(q, k, v, mask=shared),
                                  attnref.splash_attention(q, k, v, mask=shared[None]))
    heads = ["causal", ("local", 2, 2), dense[2], ("chunked", 3)]
    got = attnref.splash_attention(q, k, v, mask=heads)
    full = np.stack([oracle.mask_array("causal", SQ, SKV), oracle.mask_array("local", SQ, SKV, 2, 2),
                     dense[2], oracle.mask_array("chunked", SQ, SKV, 3)])
    want, _ = oracle.splash(q, k, v, full)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2e-3, atol=2e-3)


def test_splash_segments_sinks_and_mqa(rng):
    q, k, v = qkv(hkv=1)
    q_seg = np.array([0] * 5 + [1] * 5, np.int32)
    kv_seg = np.array([0] * 6 + [1] * 6, np.int32)
    sinks = rng.standard_normal(HQ)  # float64: narrowed to float32
    mask = np.ones((HQ, SQ, SKV), bool)
    out, lse = attnref.splash_attention(q, k[0], v[0], q_segment_ids=q_seg, kv_segment_ids=kv_seg,
                                        sinks=sinks, return_lse=True)
    want, want_lse = oracle.splash(q, k, v, mask, sinks=sinks.astype(np.float32), q_seg=q_seg,
                                   kv_seg=kv_seg)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mqa", [False, True])
def test_splash_backward_matches_oracle(mqa, rng):
    q, k, v = qkv(np.float64, hkv=1 if mqa else HKV)
    dout = rng.standard_normal((HQ, SQ, D))
    sinks = rng.standard_normal(HQ).astype(np.float32)
    mask = np.broadcast_to(oracle.mask_array("causal", SQ, SKV, 2), (HQ, SQ, SKV))
    kk, vv = (k[0], v[0]) if mqa else (k, v)
    attnref.check_splash(q, kk, vv, mask=("causal", 2), sinks=sinks, backward=True)
    dq, dk, dv, dsinks = attnref.splash_attention_backward(q, kk, vv, dout, mask=("causal", 2),
                                                           sm_scale=0.5, sinks=sinks,
                                                           block_q=4, block_kv=4)
    want = oracle.splash_backward(q, k, v, mask, dout, sm_scale=0.5, sinks=sinks.astype(np.float64))
    assert dk.shape == kk.shape and dv.shape == vv.shape
    np.testing.assert_allclose(dq, want[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dk.reshape(k.shape), want[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dv.reshape(v.shape), want[2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dsinks, want[3], rtol=1e-5, atol=1e-5)  # float32 sinks
    no_sinks = attnref.splash_attention_backward(q, kk, vv, dout, mask=("causal", 2))
    assert no_sinks[3] is None


def test_splash_jax_profile_block_rules():
    q, k, v = qkv()
    attnref.check_splash(q, k, v, block_q=4, block_kv=8)  # reference: no divisibility rule
    with pytest.raises(attnref.ShapeError) as e:
        attnref.check_splash(q, k, v, block_q=4, block_kv=8, profile="jax")
    assert e.value.code in ("block_not_divisible", "tiling_rule", "block_too_large")
