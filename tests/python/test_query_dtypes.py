# SPDX-License-Identifier: Apache-2.0
"""The (q, K/V pages) dtype table attnref-run shares (include/attnref/core/kv_dtypes.hpp):
float32 and bfloat16 queries read float32, bfloat16, float16, int8 and fp8 pages; float16 and
float64 queries read their own dtype and int8. A bfloat16 q is a torch.bfloat16 tensor (DLPack)
or view_as(uint16_bits, "bfloat16"); its output is a float32 array of bfloat16 values. Splash
takes bfloat16 q, k, v and dout of one dtype, forward and backward, and merge_attention_states
bfloat16 states."""
import numpy as np
import pytest

import attnref
import oracle
from oracle import bf16_bits, bf16_values
from conftest import paged_batch, ragged_batch

# bfloat16 keeps 8 significant bits: rounding moves a value by at most 2^-9 of it.
BF16_RTOL = 2.0 ** -8


def assert_bf16_values(out):
    assert out.dtype == np.float32
    assert np.all(out.view(np.uint32) & 0xFFFF == 0), "not bfloat16 values"


def test_paged_float32_query_reads_float16_pages():
    q, k, v, lengths, pi = paged_batch()
    k16, v16 = k.astype(np.float16), v.astype(np.float16)
    attnref.check_paged(q, k16, v16, lengths, pi)
    out, lse = attnref.paged_attention(q, k16, v16, lengths, pi, sm_scale=0.25, return_lse=True)
    assert out.dtype == np.float32
    want, want_lse = oracle.paged(q, k16, v16, lengths, pi, sm_scale=0.25)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-6)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-6, atol=1e-5)


def test_ragged_float32_query_reads_float16_pages():
    q, kv, kv_lens, pi, cu, num_seqs = ragged_batch()
    kv16 = kv.astype(np.float16)
    attnref.check_ragged(q, kv16, kv_lens, pi, cu, num_seqs)
    out = attnref.ragged_paged_attention(q, kv16, kv_lens, pi, cu, num_seqs, sm_scale=0.5)
    want, _ = oracle.ragged(q, kv16, kv_lens, pi, cu, 2, sm_scale=0.5)
    np.testing.assert_allclose(out[:4], want[:4], rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("pages", ["float32", "bfloat16", "int8"])
def test_paged_bfloat16_query(pages):
    q, k, v, lengths, pi = paged_batch()
    q_bits = bf16_bits(q)
    opts, k_in, v_in, k_val, v_val = {}, k, v, k, v
    if pages == "bfloat16":
        k_in, v_in = attnref.view_as(bf16_bits(k), "bfloat16"), attnref.view_as(bf16_bits(v), "bfloat16")
        k_val, v_val = bf16_values(bf16_bits(k)), bf16_values(bf16_bits(v))
    elif pages == "int8":
        k_in = np.clip(np.round(k * 40), -127, 127).astype(np.int8)
        v_in = np.clip(np.round(v * 40), -127, 127).astype(np.int8)
        opts = dict(k_scales=np.full(k.shape[:3] + (1,), 2.0, np.float32),
                    v_scales=np.full(v.shape[:3] + (1,), 3.0, np.float32))
        # Dequantization per validate/paged.hpp: float(x) * scale / 127.5.
        k_val, v_val = k_in * 2.0 / 127.5, v_in * 3.0 / 127.5
    q_in = attnref.view_as(q_bits, "bfloat16")
    attnref.check_paged(q_in, k_in, v_in, lengths, pi, **opts)
    out, lse = attnref.paged_attention(q_in, k_in, v_in, lengths, pi, sm_scale=0.25,
                                       return_lse=True, **opts)
    assert out.shape == q.shape
    assert_bf16_values(out)
    want, want_lse = oracle.paged(bf16_values(q_bits), k_val, v_val, lengths, pi, sm_scale=0.25)
    np.testing.assert_allclose(out, want, rtol=BF16_RTOL, atol=1e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)
    assert np.all(out[1] == 0) and np.all(lse[1] == -np.inf)  # the empty sequence
    report = attnref.compare_paged(out, q_in, k_in, v_in, lengths, pi, sm_scale=0.25,
                                   atol=0, rtol=0, **opts)
    assert report["ok"], report["text"]


def test_ragged_bfloat16_query_reads_fp8_pages():
    q, kv, kv_lens, pi, cu, num_seqs = ragged_batch()
    # fp8 e4m3fn codes of small powers of two and their halves: exact in every format here.
    rng = np.random.default_rng(5)
    codes = rng.choice(np.array([0x30, 0x38, 0x40, 0xB0, 0xB8, 0xC0, 0x34, 0xBC], np.uint8),
                       size=kv.shape)
    table = {0x30: 0.5, 0x38: 1.0, 0x40: 2.0, 0xB0: -0.5, 0xB8: -1.0, 0xC0: -2.0, 0x34: 0.75,
             0xBC: -1.5}
    kv_val = np.vectorize(table.get)(codes).astype(np.float64)
    q_bits = bf16_bits(q)
    q_in, kv_in = attnref.view_as(q_bits, "bfloat16"), attnref.view_as(codes, "float8_e4m3fn")
    out, lse = attnref.ragged_paged_attention(q_in, kv_in, kv_lens, pi, cu, num_seqs,
                                              sm_scale=0.5, return_lse=True)
    assert_bf16_values(out)
    want, want_lse = oracle.ragged(bf16_values(q_bits), kv_val, kv_lens, pi, cu, 2,
                                   sm_scale=0.5)
    np.testing.assert_allclose(out[:4], want[:4], rtol=BF16_RTOL, atol=1e-5)
    np.testing.assert_allclose(lse[:4], want_lse[:4], rtol=1e-5, atol=1e-5)
    report = attnref.compare_ragged(out, q_in, kv_in, kv_lens, pi, cu, num_seqs, sm_scale=0.5,
                                    atol=0, rtol=0, ignore_padding=True)
    assert report["ok"], report["text"]


def test_torch_bfloat16_tensors_match_view_as():
    torch = pytest.importorskip("torch")
    q, k, v, lengths, pi = paged_batch()
    q_bits, k_bits, v_bits = bf16_bits(q), bf16_bits(k), bf16_bits(v)
    want = attnref.paged_attention(attnref.view_as(q_bits, "bfloat16"),
                                   attnref.view_as(k_bits, "bfloat16"),
                                   attnref.view_as(v_bits, "bfloat16"), lengths, pi)
    as_torch = [torch.from_numpy(b.view(np.int16)).view(torch.bfloat16)
                for b in (q_bits, k_bits, v_bits)]
    got = attnref.paged_attention(*as_torch, lengths, pi)
    np.testing.assert_array_equal(got, want)
    # A float32 query over torch bfloat16 pages: the same pages, read in place.
    got32 = attnref.paged_attention(q, as_torch[1], as_torch[2], lengths, pi)
    want32 = attnref.paged_attention(q, attnref.view_as(k_bits, "bfloat16"),
                                     attnref.view_as(v_bits, "bfloat16"), lengths, pi)
    np.testing.assert_array_equal(got32, want32)


@pytest.mark.parametrize("q_dtype,pages", [(np.float16, "bfloat16"), (np.float64, "float16"),
                                           (np.float16, "float8_e5m2")])
def test_pairs_outside_the_table_are_refused(q_dtype, pages):
    q, k, v, lengths, pi = paged_batch(q_dtype)
    if pages == "float16":
        k_in = v_in = k.astype(np.float16)
    else:
        size = np.uint16 if pages == "bfloat16" else np.uint8
        k_in = v_in = attnref.view_as(np.zeros(k.shape, size), pages)
    with pytest.raises(attnref.ShapeError) as e:
        attnref.paged_attention(q, k_in, v_in, lengths, pi)
    assert e.value.code == "dtype_not_supported"
    assert e.value.message == (
        f"k_pages has dtype {pages}; a {np.dtype(q_dtype).name} query reads K/V pages of its "
        "own dtype or int8 with scales (float32 and bfloat16 queries also read float32, "
        "bfloat16, float16 and fp8 pages)")
    assert e.value.hint == ("store the pages in q's dtype or as int8 with float32 scales, or use "
                            "a float32 or bfloat16 query")


def test_raw_codes_need_view_as():
    q, k, v, lengths, pi = paged_batch()
    with pytest.raises(attnref.ShapeError) as e:
        attnref.paged_attention(q, bf16_bits(k), bf16_bits(v), lengths, pi)
    assert e.value.code == "dtype_not_supported"
    assert e.value.message == "k_pages has dtype uint16, which is not supported here"
    assert "view_as(pages_uint16, 'bfloat16')" in e.value.hint
    with pytest.raises(attnref.ShapeError) as e:  # V's codes too, before K and V's dtypes differ
        attnref.paged_attention(q, k, bf16_bits(v), lengths, pi)
    assert e.value.message == "v_pages has dtype uint16, which is not supported here"
    assert "view_as(pages_uint16, 'bfloat16')" in e.value.hint
    rq, kv, kv_lens, rpi, cu, num_seqs = ragged_batch()
    with pytest.raises(attnref.ShapeError) as e:  # ragged's combined pool is named as such
        attnref.ragged_paged_attention(rq.astype(np.float64), kv.astype(np.float16), kv_lens,
                                       rpi, cu, num_seqs)
    assert e.value.code == "dtype_not_supported"
    assert e.value.message.startswith("kv_pages has dtype float16; a float64 query reads")
    with pytest.raises(attnref.ShapeError) as e:
        attnref.paged_attention(bf16_bits(q), k, v, lengths, pi)
    assert e.value.message == "q has dtype uint16, which is not supported here"
    assert "view_as(q_uint16, 'bfloat16')" in e.value.hint


def splash_bf16_inputs(seed=3, mqa=False):
    """bfloat16 bits and their float64 values for q [4, 10, 8], k and v [2, 12, 8] ([12, 8]
    under MQA), and dout [4, 10, 8]."""
    rng = np.random.default_rng(seed)
    kv_shape = (12, 8) if mqa else (2, 12, 8)
    shapes = [(4, 10, 8), kv_shape, kv_shape, (4, 10, 8)]
    bits = [bf16_bits(rng.standard_normal(s)) for s in shapes]
    return bits, [bf16_values(b).astype(np.float64) for b in bits]


def test_splash_bfloat16_forward():
    (qb, kb, vb, _), (q, k, v, _) = splash_bf16_inputs()
    q_in, k_in, v_in = (attnref.view_as(b, "bfloat16") for b in (qb, kb, vb))
    attnref.check_splash(q_in, k_in, v_in, mask="causal")
    out, lse = attnref.splash_attention(q_in, k_in, v_in, mask="causal", sm_scale=0.3,
                                        block_q=4, block_kv=8, return_lse=True)
    assert out.shape == (4, 10, 8)
    assert_bf16_values(out)
    mask = np.broadcast_to(oracle.mask_array("causal", 10, 12), (4, 10, 12))
    want, want_lse = oracle.splash(q, k, v, mask, sm_scale=0.3)
    np.testing.assert_allclose(out, want, rtol=BF16_RTOL, atol=1e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-5, atol=1e-5)
    report = attnref.compare_splash(out, q_in, k_in, v_in, mask="causal", sm_scale=0.3,
                                    block_q=4, block_kv=8, atol=0, rtol=0)
    assert report["ok"], report["text"]


@pytest.mark.parametrize("mqa", [False, True])
def test_splash_bfloat16_backward(mqa):
    (qb, kb, vb, db), (q, k, v, dout) = splash_bf16_inputs(mqa=mqa)
    args = [attnref.view_as(b, "bfloat16") for b in (qb, kb, vb, db)]
    dq, dk, dv, dsinks = attnref.splash_attention_backward(*args, mask="causal", sm_scale=0.3,
                                                           block_q=4, block_kv=8)
    assert dsinks is None
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    for g in (dq, dk, dv):
        assert_bf16_values(g)
    mask = np.broadcast_to(oracle.mask_array("causal", 10, 12), (4, 10, 12))
    k3, v3 = (k[None], v[None]) if mqa else (k, v)
    # The backward pass reads the forward output in q's dtype (bfloat16, as JAX keeps it) for
    # delta = sum(dout * out); the oracle takes that same residual (the forward output, itself
    # checked against the oracle above), so only the gradients' own rounding remains.
    out = attnref.splash_attention(*args[:3], mask="causal", sm_scale=0.3, block_q=4, block_kv=8)
    want_dq, want_dk, want_dv, _ = oracle.splash_backward(q, k3, v3, mask, dout, sm_scale=0.3,
                                                          residual_out=out)
    np.testing.assert_allclose(dq, want_dq, rtol=BF16_RTOL, atol=1e-5)
    np.testing.assert_allclose(dk, want_dk.reshape(dk.shape), rtol=BF16_RTOL, atol=1e-5)
    np.testing.assert_allclose(dv, want_dv.reshape(dv.shape), rtol=BF16_RTOL, atol=1e-5)


def test_splash_refuses_raw_codes_and_mixed_dtypes():
    (qb, kb, vb, _), (q, k, v, _) = splash_bf16_inputs()
    with pytest.raises(attnref.ShapeError) as e:
        attnref.splash_attention(qb, kb, vb)
    assert e.value.code == "dtype_not_supported"
    assert e.value.message == "q has dtype uint16, which is not supported here"
    with pytest.raises(attnref.ShapeError) as e:
        attnref.splash_attention(attnref.view_as(qb, "bfloat16"), k.astype(np.float32),
                                 v.astype(np.float32))
    assert e.value.code == "dtype_not_supported"
    assert e.value.message == "k has dtype float32; expected bfloat16"


def test_merge_bfloat16_states_round_their_result():
    # Equal logsumexps: out = (a + b) / 2, exact in float32, then rounded to bfloat16 (to
    # nearest, ties to even): (1 + 1.0078125) / 2 = 1.00390625 -> 1.0 and
    # (1.0078125 + 1.015625) / 2 = 1.01171875 -> 1.015625; -inf for b leaves a exactly.
    a = np.array([[[1.0, 1.0078125]], [[3.0, -2.5]]], np.float32)
    b = np.array([[[1.0078125, 1.015625]], [[7.0, 7.0]]], np.float32)
    lse_a = np.array([[0.5], [0.25]], np.float32)
    lse_b = np.array([[0.5], [-np.inf]], np.float32)
    a_in, b_in = attnref.view_as(bf16_bits(a), "bfloat16"), attnref.view_as(bf16_bits(b), "bfloat16")
    out, lse = attnref.merge_attention_states(a_in, lse_a, b_in, lse_b)
    assert_bf16_values(out)
    np.testing.assert_array_equal(out, [[[1.0, 1.015625]], [[3.0, -2.5]]])
    np.testing.assert_allclose(lse, [[0.5 + np.log(2.0)], [0.25]], rtol=1e-7)
    # The float32 merge of the same values keeps the unrounded means.
    out32, _ = attnref.merge_attention_states(a, lse_a, b, lse_b)
    np.testing.assert_array_equal(out32[0, 0], [1.00390625, 1.01171875])


def test_merge_bfloat16_states_match_the_float64_merge():
    rng = np.random.default_rng(7)
    a_bits, b_bits = (bf16_bits(rng.standard_normal((5, 3, 16))) for _ in range(2))
    lse_a, lse_b = (rng.uniform(-3, 3, (5, 3)).astype(np.float32) for _ in range(2))
    lse_b[2, 1] = -np.inf
    out, lse = attnref.merge_attention_states(attnref.view_as(a_bits, "bfloat16"), lse_a,
                                              attnref.view_as(b_bits, "bfloat16"), lse_b,
                                              num_threads=2)
    assert_bf16_values(out)
    want, want_lse = oracle.merge(bf16_values(a_bits), lse_a, bf16_values(b_bits), lse_b)
    np.testing.assert_allclose(out, want, rtol=BF16_RTOL, atol=1e-6)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-6, atol=1e-6)
    torch = pytest.importorskip("torch")
    as_torch = [torch.from_numpy(x.view(np.int16)).view(torch.bfloat16) for x in (a_bits, b_bits)]
    got, _ = attnref.merge_attention_states(as_torch[0], lse_a, as_torch[1], lse_b)
    np.testing.assert_array_equal(got, out)


def test_merge_states_take_one_dtype():
    a = np.ones((2, 1, 4), np.float32)
    lse = np.zeros((2, 1), np.float32)
    with pytest.raises(attnref.ShapeError) as e:
        attnref.merge_attention_states(attnref.view_as(bf16_bits(a), "bfloat16"), lse, a, lse)
    assert e.value.code == "dtype_not_supported"
    assert e.value.message == "out_b has dtype float32; expected bfloat16"
    with pytest.raises(attnref.ShapeError) as e:
        attnref.merge_attention_states(a.astype(np.int8), lse, a.astype(np.int8), lse)
    assert e.value.code == "dtype_not_supported"
    assert e.value.message == "out_a has dtype int8, which is not supported here"
    assert e.value.hint.startswith("states are float16, float32, float64 or bfloat16")
