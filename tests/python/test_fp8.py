# SPDX-License-Identifier: Apache-2.0
"""fp8 K/V pages (view_as(uint8, "float8_e4m3fn" / "float8_e5m2")) in paged and ragged
attention, against the float64 oracle over values decoded here from the bit layouts."""
import numpy as np
import pytest

import attnref
import oracle
from conftest import paged_batch, ragged_batch

# (exponent bits, mantissa bits, bias, finite-only) per format.
FORMATS = {"float8_e4m3fn": (4, 3, 7, True), "float8_e5m2": (5, 2, 15, False)}


def decode(bits, fmt):
    """The values of fp8 codes: sign, biased exponent, mantissa; exponent 0 is subnormal.
    e4m3fn: no infinity, S.1111.111 is NaN; e5m2: exponent all ones is inf (mantissa 0) or NaN."""
    e_bits, m_bits, bias, finite_only = FORMATS[fmt]
    b = np.asarray(bits).astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    exp = (b >> m_bits) & ((1 << e_bits) - 1)
    man = b & ((1 << m_bits) - 1)
    mag = np.where(exp == 0, man * 2.0 ** (1 - bias - m_bits),
                   ((1 << m_bits) + man) * 2.0 ** (exp - bias - m_bits))
    top = exp == (1 << e_bits) - 1
    if finite_only:
        mag = np.where(top & (man == (1 << m_bits) - 1), np.nan, mag)
    else:
        mag = np.where(top, np.where(man == 0, np.inf, np.nan), mag)
    return sign * mag


def test_decoder_hand_values():
    assert decode(0x38, "float8_e4m3fn") == 1.0  # 0.0111.000
    assert decode(0x7E, "float8_e4m3fn") == 448.0  # 14 * 2^5, the largest finite
    assert decode(0x01, "float8_e4m3fn") == 2.0 ** -9  # the smallest subnormal
    assert np.isnan(decode(0x7F, "float8_e4m3fn"))
    assert decode(0x3C, "float8_e5m2") == 1.0  # 0.01111.00
    assert decode(0x7B, "float8_e5m2") == 57344.0
    assert decode(0xFC, "float8_e5m2") == -np.inf


def codes(fmt, shape, seed):
    """Random codes of moderate finite values (|x| <= 4), as uint8."""
    table = decode(np.arange(256), fmt)
    ok = np.flatnonzero(np.isfinite(table) & (np.abs(table) <= 4))
    return np.random.default_rng(seed).choice(ok, size=shape).astype(np.uint8)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
@pytest.mark.parametrize("scaled", [False, True])
def test_paged_fp8_pages(fmt, scaled):
    q, k, v, lengths, pi = paged_batch()
    k8, v8 = codes(fmt, k.shape, 1), codes(fmt, v.shape, 2)
    opts = {}
    ks = vs = np.float32(1.0)
    if scaled:  # per token for K, per element for V
        rng = np.random.default_rng(3)
        ks = rng.uniform(0.25, 2.0, k.shape[:3] + (1,)).astype(np.float32)
        vs = rng.uniform(0.25, 2.0, v.shape).astype(np.float32)
        opts = dict(k_scales=ks, v_scales=vs)
    k_in, v_in = attnref.view_as(k8, fmt), attnref.view_as(v8, fmt)
    attnref.check_paged(q, k_in, v_in, lengths, pi, **opts)
    out, lse = attnref.paged_attention(q, k_in, v_in, lengths, pi, sm_scale=0.25,
                                       return_lse=True, **opts)
    want, want_lse = oracle.paged(q, decode(k8, fmt) * ks,
                                  decode(v8, fmt) * vs, lengths, pi, sm_scale=0.25)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=1e-5)
    np.testing.assert_allclose(lse, want_lse, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_ragged_fp8_pool_with_scales(fmt):
    q, kv, kv_lens, pi, cu, num_seqs = ragged_batch()
    kv8 = codes(fmt, kv.shape, 4)
    out = attnref.ragged_paged_attention(q, attnref.view_as(kv8, fmt), kv_lens, pi, cu, num_seqs,
                                         k_scale=0.5, v_scale=1.5)
    deq = decode(kv8, fmt)
    deq[:, :, 0::2] *= 0.5  # k = q_dtype(fp8(k) * k_scale): exact here (a power of 2) ...
    deq[:, :, 1::2] *= 1.5  # ... and v rounds to float32 once (within the tolerance)
    want, _ = oracle.ragged(q, deq, kv_lens, pi, cu, 2)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=1e-5)


def test_fp8_errors():
    q, k, v, lengths, pi = paged_batch()
    k8 = codes("float8_e4m3fn", k.shape, 1)
    with pytest.raises(attnref.ShapeError) as e:  # view_as takes 1-byte unsigned codes
        attnref.paged_attention(q, attnref.view_as(k8.astype(np.uint16), "float8_e4m3fn"),
                                attnref.view_as(k8, "float8_e4m3fn"), lengths, pi)
    assert e.value.code == "dtype_not_supported"
    with pytest.raises(attnref.ShapeError) as e:  # K and V in different formats
        attnref.paged_attention(q, attnref.view_as(k8, "float8_e4m3fn"),
                                attnref.view_as(k8, "float8_e5m2"), lengths, pi)
    assert e.value.code == "quantization_mismatch"
    with pytest.raises(attnref.ShapeError) as e:  # fp8 scales: both or neither
        attnref.paged_attention(q, attnref.view_as(k8, "float8_e4m3fn"),
                                attnref.view_as(k8, "float8_e4m3fn"), lengths, pi,
                                k_scales=np.ones(k.shape[:3] + (1,), np.float32))
    assert e.value.code == "quantization_mismatch"
    bad = k8.copy()
    bad[:, pi[0, 0], 0, 0] = 0x7F  # NaN in e4m3fn, in a live row
    with pytest.raises(attnref.ShapeError) as e:
        attnref.check_paged(q, attnref.view_as(bad, "float8_e4m3fn"),
                            attnref.view_as(k8, "float8_e4m3fn"), lengths, pi,
                            tiers=("shape", "metadata", "data"))
    assert e.value.code == "non_finite_data"
