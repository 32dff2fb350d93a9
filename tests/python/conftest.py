# SPDX-License-Identifier: Apache-2.0
"""Shared inputs for the attnref pytest suite. Run from a build tree with
PYTHONPATH=build/<preset>/python (ctest's test_python sets it)."""
import numpy as np
import pytest


def tolerance(dtype):
    """(rtol, atol) of a kernel of `dtype` against the float64 oracle. float64 kernels take
    sm_scale, soft_cap and the logsumexp in float32, hence their 1e-6."""
    return {np.float16: (2e-3, 2e-3), np.float32: (2e-5, 2e-6), np.float64: (1e-5, 1e-6)}[dtype]


def paged_batch(dtype=np.float32, batch=3, hq=4, hkv=2, dim=16, pages=7, page_size=4, pps=3,
                seed=0):
    """A decode batch in JAX's layout: (q, k_pages, v_pages, lengths, page_indices)."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((batch, hq, dim)).astype(dtype)
    k = rng.standard_normal((hkv, pages, page_size, dim)).astype(dtype)
    v = rng.standard_normal((hkv, pages, page_size, dim)).astype(dtype)
    lengths = rng.integers(0, pps * page_size + 1, batch).astype(np.int32)
    lengths[0] = pps * page_size - 1  # one sequence ends inside its last page
    if batch > 1:
        lengths[1] = 0  # and one is empty
    page_indices = rng.integers(0, pages, (batch, pps)).astype(np.int32)
    return q, k, v, lengths, page_indices


def ragged_batch(dtype=np.float32, hq=4, hkv=2, dim=16, pages=10, page_size=4, seed=1):
    """Two sequences (a prefill of 3 rows, a decode row) and a padding slot and row."""
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((6, hq, dim)).astype(dtype)
    kv = rng.standard_normal((pages, page_size, 2 * hkv, dim)).astype(dtype)
    kv_lens = np.array([7, 9, 0], np.int32)
    page_indices = np.array([[3, 1, 8], [0, 5, 2], [0, 0, 0]], np.int32)
    cu_q_lens = np.array([0, 3, 4, 4], np.int32)
    num_seqs = np.array([2], np.int32)
    return q, kv, kv_lens, page_indices, cu_q_lens, num_seqs


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
