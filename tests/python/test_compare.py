# SPDX-License-Identifier: Apache-2.0
"""attnref.compare_paged, compare_ragged and compare_splash: outputs made wrong on purpose with
the float64 oracle are reported with the change that explains them; a right output names none."""
import math

import numpy as np
import pytest

import attnref
import oracle
from conftest import paged_batch, ragged_batch

TOL = dict(atol=1e-4, rtol=1e-4)  # float32 reference against the float64 oracle


def test_paged_right_output_names_no_cause():
    q, k, v, lengths, pi = paged_batch()
    out, lse = oracle.paged(q, k, v, lengths, pi, sm_scale=0.5)
    r = attnref.compare_paged(out, q, k, v, lengths, pi, sm_scale=0.5, got_lse=lse, **TOL)
    assert r["ok"] and r["mismatches"] == 0 and r["lse_mismatches"] == 0
    assert r["causes"] == [] and r["count"] == out.size + lse.size
    assert r["text"].startswith("mismatches: 0 of ")


def test_paged_sm_scale_one_over_sqrt_d():
    q, k, v, lengths, pi = paged_batch()
    dim = q.shape[2]
    got, _ = oracle.paged(q, k, v, lengths, pi, sm_scale=1 / math.sqrt(dim))
    r = attnref.compare_paged(got, q, k, v, lengths, pi, **TOL)  # the call says sm_scale 1
    assert not r["ok"] and r["mismatches"] > 0 and r["max_abs"] > 1e-2
    cause = r["causes"][0]
    assert cause["what"].startswith("sm_scale 1/sqrt(head_dim) = 0.25 used instead of 1")
    assert cause["reproduce"] == "sm_scale=0.25" and cause["max_abs"] < 1e-4
    assert "likely cause: sm_scale 1/sqrt(head_dim)" in r["text"]


def test_paged_interleaved_gqa_mapping():
    q, k, v, lengths, pi = paged_batch(hq=4, hkv=2)
    hkv = k.shape[0]
    got = np.zeros(q.shape)
    for h in range(q.shape[1]):  # query head h reads KV head h % Hkv
        g = h % hkv
        got[:, [h]] = oracle.paged(q[:, [h]], k[[g]], v[[g]], lengths, pi)[0]
    r = attnref.compare_paged(got, q, k, v, lengths, pi, **TOL)
    assert not r["ok"]
    assert [c["what"] for c in r["causes"]][0].startswith("GQA mapping: query head qh read KV "
                                                          "head qh % num_kv_heads")


def test_paged_log2_lse():
    q, k, v, lengths, pi = paged_batch()
    out, lse = oracle.paged(q, k, v, lengths, pi)
    r = attnref.compare_paged(out, q, k, v, lengths, pi, got_lse=lse / math.log(2), **TOL)
    assert r["mismatches"] == 0 and r["lse_mismatches"] > 0
    assert any("log2" in c["what"] for c in r["causes"])


def test_ragged_sliding_window_off_by_one():
    q, kv, kv_lens, pi, cu, num_seqs = ragged_batch()
    got, _ = oracle.ragged(q, kv, kv_lens, pi, cu, 2, sliding_window=4)
    right = attnref.compare_ragged(oracle.ragged(q, kv, kv_lens, pi, cu, 2, sliding_window=5)[0],
                                   q, kv, kv_lens, pi, cu, num_seqs, sliding_window=5, **TOL)
    assert right["ok"] and right["causes"] == []
    r = attnref.compare_ragged(got, q, kv, kv_lens, pi, cu, num_seqs, sliding_window=5, **TOL)
    assert not r["ok"]
    assert r["causes"][0]["what"].startswith("sliding window off by one: 4 instead of 5")


def test_splash_causal_diagonal_top_left():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal(s).astype(np.float32)
               for s in ((4, 10, 8), (2, 12, 8), (2, 12, 8)))
    top_left = np.broadcast_to(oracle.mask_array("causal", 10, 12, 0), (4, 10, 12))
    got, _ = oracle.splash(q, k, v, top_left)
    r = attnref.compare_splash(got, q, k, v, mask=("causal", 2), **TOL)
    assert not r["ok"]
    assert r["causes"][0]["what"].startswith("causal diagonal aligned top-left (offset 0)")
    right = attnref.compare_splash(got, q, k, v, mask="causal", **TOL)
    assert right["ok"] and right["causes"] == []


def test_compare_usage_errors():
    q, k, v, lengths, pi = paged_batch()
    out, _ = oracle.paged(q, k, v, lengths, pi)
    with pytest.raises(attnref.ShapeError) as e:
        attnref.compare_paged(out[:, :2], q, k, v, lengths, pi)
    assert e.value.code == "shape_mismatch" and e.value.field == "got"
    with pytest.raises(attnref.ShapeError) as e:
        attnref.compare_paged(out, q, k, v, lengths, pi, got_lse=np.zeros(3))
    assert e.value.code == "shape_mismatch" and e.value.field == "got_lse"
    with pytest.raises(TypeError, match="return_lse"):
        attnref.compare_paged(out, q, k, v, lengths, pi, return_lse=True)
    with pytest.raises(ValueError, match="atol"):
        attnref.compare_paged(out, q, k, v, lengths, pi, atol=-1.0)
    with pytest.raises(attnref.ShapeError) as e:  # the inputs are validated as the kernel's
        attnref.compare_paged(out, q, k, v, lengths, pi, soft_cap=0.0)
    assert e.value.code == "invalid_soft_cap"


def test_paged_causes_with_the_engine_features():
    q, k, v, lengths, pi = paged_batch()
    sinks = np.array([0.5, -1.0, 2.0, 0.0], np.float32)
    slopes = np.array([0.5, 0.25, 0.125, 0.0625], np.float32)
    opts = dict(sliding_window=6, alibi_slopes=slopes)
    # sm_scale 1/sqrt(D) under a window, ALiBi and sinks: every re-run keeps them.
    got, _ = oracle.paged(q, k, v, lengths, pi, sm_scale=0.25, sinks=sinks, **opts)
    r = attnref.compare_paged(got, q, k, v, lengths, pi, sinks=sinks, **opts, **TOL)
    assert r["causes"][0]["what"].startswith("sm_scale 1/sqrt(head_dim) = 0.25")
    # The sinks left out by the other kernel.
    got, _ = oracle.paged(q, k, v, lengths, pi, **opts)
    r = attnref.compare_paged(got, q, k, v, lengths, pi, sinks=sinks, **opts, **TOL)
    assert r["causes"][0]["what"] == "attention sinks ignored"
    assert attnref.compare_paged(got, q, k, v, lengths, pi, **opts, **TOL)["ok"]
