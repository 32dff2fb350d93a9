# SPDX-License-Identifier: Apache-2.0
"""The same hostile inputs through both front ends: each case is one call of the module's
check function (or merge) and the same arrays saved as .npy files for attnref-run; both must
refuse it with the same error code and the same message, attnref-run with exit 2. Both build
their arguments with one front end (tools/frontend/), so a check one of them has, the other has.
"""
import os
import subprocess

import numpy as np
import pytest

import attnref
import oracle
from conftest import paged_batch, ragged_batch

ATTNREF_RUN = os.environ.get("ATTNREF_RUN")
pytestmark = pytest.mark.skipif(not ATTNREF_RUN, reason="ATTNREF_RUN (attnref-run's path) not set")

F32 = np.float32


def paged(**change):
    """A paged call: the arrays of paged_batch with `change` applied (arrays or options)."""
    q, k, v, lengths, pi = paged_batch(batch=2)
    call = dict(q=q, k_pages=k, v_pages=v, lengths=lengths, page_indices=pi)
    call.update(change)
    return "paged", call


def ragged(**change):
    q, kv, kv_lens, pi, cu, num_seqs = ragged_batch()
    call = dict(q=q, kv_pages=kv, kv_lens=kv_lens, page_indices=pi, cu_q_lens=cu,
                num_seqs=num_seqs)
    call.update(change)
    return "ragged", call


def splash(**change):
    rng = np.random.default_rng(3)
    call = dict(q=rng.standard_normal((4, 8, 16)).astype(F32),
                k=rng.standard_normal((2, 8, 16)).astype(F32),
                v=rng.standard_normal((2, 8, 16)).astype(F32))
    call.update(change)
    return "splash", call


def merge(**change):
    rng = np.random.default_rng(4)
    call = dict(out_a=rng.standard_normal((2, 3, 4)).astype(F32),
                lse_a=rng.standard_normal((2, 3)).astype(F32),
                out_b=rng.standard_normal((2, 3, 4)).astype(F32),
                lse_b=rng.standard_normal((2, 3)).astype(F32))
    call.update(change)
    return "merge", call


q, k, v, _, pi = paged_batch(batch=2)
CASES = {
    # paged: what engines never check, and the shapes and dtypes
    "paged negative length": paged(lengths=np.array([-1, 1], np.int32)),
    "paged length past capacity": paged(lengths=np.array([13, 1], np.int32)),
    "paged page index past the pool": paged(page_indices=np.array([[0, 9, 0], [0, 0, 0]],
                                                                  np.int32)),
    "paged q of rank 2": paged(q=q[0]),
    "paged lengths [batch, 1]": paged(lengths=np.array([[3], [1]], np.int32)),
    "paged float lengths": paged(lengths=np.array([3, 1], F32)),
    "paged mixed index dtypes": paged(lengths=np.array([3, 1], np.int64)),
    "paged int32 pages": paged(k_pages=k.astype(np.int32), v_pages=v.astype(np.int32)),
    "paged float16 q over float32 pages": paged(q=q.astype(np.float16)),
    "paged K and V of two dtypes": paged(v_pages=v.astype(np.float64)),
    "paged heads not divisible": paged(q=np.zeros((2, 3, 16), F32)),
    "paged sinks of the wrong length": paged(sinks=np.zeros(3, F32)),
    "paged sinks past float32": paged(sinks=np.full(4, 1e39)),
    "paged ALiBi slopes past float32": paged(alibi_slopes=np.full(4, -1e39)),
    "paged sinks of rank 2": paged(sinks=np.zeros((2, 2), F32)),
    "paged int sinks": paged(sinks=np.zeros(4, np.int32)),
    "paged sliding window 0": paged(sliding_window=0),
    "paged one-sided scales": paged(k_pages=k.astype(np.int8), v_pages=v.astype(np.int8),
                                    k_scales=np.ones(k.shape[:3] + (1,), F32)),
    "paged float64 scales": paged(k_pages=k.astype(np.int8), v_pages=v.astype(np.int8),
                                  k_scales=np.ones(k.shape[:3] + (1,), np.float64),
                                  v_scales=np.ones(k.shape[:3] + (1,), np.float64)),
    "paged jax: int64 lengths": paged(lengths=np.array([3, 1], np.int64),
                                      page_indices=pi.astype(np.int64), profile="jax"),
    "paged jax: 3 query heads": paged(q=np.zeros((2, 3, 16), F32), profile="jax"),
    # ragged
    "ragged num_seqs past max_num_seqs": ragged(num_seqs=np.array([4], np.int32)),
    "ragged kv_lens past capacity": ragged(kv_lens=np.array([13, 9, 0], np.int32)),
    "ragged cu_q_lens decreasing": ragged(cu_q_lens=np.array([0, 3, 2, 4], np.int32)),
    "ragged num_seqs [1, 1]": ragged(num_seqs=np.array([[2]], np.int32)),
    "ragged kv_lens [3, 1]": ragged(kv_lens=np.array([[7], [9], [0]], np.int32)),
    "ragged odd combined heads": ragged(kv_pages=np.zeros((10, 4, 3, 16), F32)),
    "ragged float index arrays": ragged(kv_lens=np.array([7, 9, 0], F32)),
    "ragged page index past the pool": ragged(page_indices=np.array(
        [[3, 10, 8], [0, 5, 2], [0, 0, 0]], np.int32)),
    "ragged jax: int64 index arrays": ragged(
        kv_lens=np.array([7, 9, 0], np.int64), page_indices=np.array(
            [[3, 1, 8], [0, 5, 2], [0, 0, 0]], np.int64), cu_q_lens=np.array([0, 3, 4, 4],
                                                                              np.int64),
        profile="jax"),
    # splash
    "splash mask of the wrong shape": splash(mask=np.ones((1, 8, 7), bool)),
    "splash mask of another dtype": splash(mask=np.ones((1, 8, 8), np.int32)),
    "splash mask heads past q's": splash(mask=np.ones((3, 8, 8), bool)),
    "splash mask (2^24, 0, 0)": splash(q=np.zeros((2**24, 0, 8), F32),
                                       k=np.zeros((1, 0, 4), F32), v=np.zeros((1, 0, 4), F32),
                                       mask=np.zeros((2**24, 0, 0), bool)),
    "splash int64 segment ids": splash(q_segment_ids=np.zeros(8, np.int64),
                                       kv_segment_ids=np.zeros(8, np.int64)),
    "splash k of another dtype": splash(k=np.zeros((2, 8, 16), np.float64)),
    "splash k of rank 4": splash(k=np.zeros((1, 2, 8, 16), F32)),
    "splash v of another rank": splash(v=np.zeros((8, 16), F32)),
    "splash heads not divisible": splash(k=np.zeros((3, 8, 16), F32),
                                         v=np.zeros((3, 8, 16), F32)),
    "splash jax: sequence not a multiple of the block": splash(profile="jax"),
    # merge
    "merge float64 logsumexp": merge(lse_b=np.zeros((2, 3))),
    "merge states of two dtypes": merge(out_b=np.zeros((2, 3, 4))),
    "merge state of another shape": merge(out_b=np.zeros((2, 3, 5), F32)),
    "merge int32 state": merge(out_a=np.zeros((2, 3, 4), np.int32)),
}

ARRAY_ARGS = {
    "paged": ["q", "k_pages", "v_pages", "lengths", "page_indices"],
    "ragged": ["q", "kv_pages", "kv_lens", "page_indices", "cu_q_lens", "num_seqs"],
    "splash": ["q", "k", "v"],
    "merge": ["out_a", "lse_a", "out_b", "lse_b"],
}
CHECK = {"paged": attnref.check_paged, "ragged": attnref.check_ragged,
         "splash": attnref.check_splash}


def python_error(family, call):
    positional = [call[name] for name in ARRAY_ARGS[family]]
    options = {key: value for key, value in call.items() if key not in ARRAY_ARGS[family]}
    with pytest.raises(attnref.ShapeError) as e:
        if family == "merge":
            attnref.merge_attention_states(*positional, **options)
        else:
            CHECK[family](*positional, **options)
    return e.value


def cli_result(family, call, tmp_path):
    args = [ATTNREF_RUN, family]
    for key, value in call.items():
        flag = "--" + key.replace("_", "-")
        if isinstance(value, np.ndarray):
            path = tmp_path / f"{key}.npy"
            np.save(path, value)
            args += [flag, str(path)]
        else:
            args += [flag, str(value)]
    if family != "merge":
        args.append("--check-only")
    return subprocess.run(args, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("case", sorted(CASES))
def test_both_front_ends_refuse_with_one_code_and_message(case, tmp_path):
    family, call = CASES[case]
    err = python_error(family, call)
    done = cli_result(family, call, tmp_path)
    assert done.returncode == 2, done.stderr
    first = done.stderr.splitlines()[0]
    assert first == f"attnref: error[{err.code}] {err.message}", (case, first)


@pytest.mark.parametrize("options", [
    dict(alibi_convention="absolute"), dict(soft_cap_order="alibi_then_cap"),
    dict(alibi_convention="absolute", soft_cap_order="alibi_then_cap", sliding_window=5)])
def test_both_front_ends_compute_the_same_splash(options, tmp_path):
    _, call = splash()
    slopes = np.array([0.5, 0.25, 0.125, 0.0625], F32)
    want = attnref.splash_attention(call["q"], call["k"], call["v"], soft_cap=2.0,
                                    alibi_slopes=slopes, **options)
    args = [ATTNREF_RUN, "splash", "--soft-cap", "2", "--out", str(tmp_path / "out.npy")]
    for key, value in dict(call, alibi_slopes=slopes).items():
        np.save(tmp_path / f"{key}.npy", value)
        args += ["--" + key.replace("_", "-"), str(tmp_path / f"{key}.npy")]
    for key, value in options.items():
        args += ["--" + key.replace("_", "-"), str(value)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), want)


def test_mla_decode_through_both_front_ends(tmp_path):
    """MLA's shape: V a narrower view of the K latent cache (head_dim 64, head_dim_v 48, one KV
    head), against the float64 oracle and attnref-run on the same arrays saved as files."""
    rng = np.random.default_rng(9)
    q = rng.standard_normal((2, 8, 64)).astype(F32)
    latent = rng.standard_normal((1, 6, 4, 64)).astype(F32)
    v = latent[..., :48]  # a view: K's strides, V's own last extent
    lengths = np.array([7, 13], np.int32)
    pi = np.array([[5, 1, 0, 3], [2, 4, 0, 1]], np.int32)
    out = attnref.paged_attention(q, latent, v, lengths, pi, sm_scale=0.125)
    assert out.shape == (2, 8, 48)
    want, _ = oracle.paged(q, latent, v, lengths, pi, sm_scale=0.125)
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-6)
    report = attnref.compare_paged(out, q, latent, v, lengths, pi, sm_scale=0.125)
    assert report["ok"]
    args = [ATTNREF_RUN, "paged", "--sm-scale", "0.125", "--out", str(tmp_path / "out.npy")]
    for key, value in dict(q=q, k_pages=latent, v_pages=np.ascontiguousarray(v), lengths=lengths,
                           page_indices=pi).items():
        np.save(tmp_path / f"{key}.npy", value)
        args += ["--" + key.replace("_", "-"), str(tmp_path / f"{key}.npy")]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out.npy"), out)
    with pytest.raises(attnref.ShapeError) as e:  # JAX's kernel reads V with K's head_dim
        attnref.check_paged(q, latent, v, lengths, pi, profile="jax")
    assert e.value.jax_check == "P1"
