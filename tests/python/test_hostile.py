# SPDX-License-Identifier: Apache-2.0
"""Random hostile calls: valid inputs with one to three mutations (index values anywhere,
extents cut, dtypes changed, strides reversed or transposed, an empty array whose other extents
claim up to 2^20) of the positional arrays or the array options (sinks, alibi_slopes,
got_lse), then sometimes the float32 arguments of one shape passed as bfloat16 bits (view_as),
end in a result or a ShapeError; never another exception, never a crash.
ATTNREF_HOSTILE_CALLS sets the calls per seed (the ASan build makes 3000)."""
import os

import numpy as np
import pytest

import attnref
from conftest import paged_batch, ragged_batch

DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int32, np.int64, np.bool_, np.uint16]


def valid_calls(rng):
    q, k, v, lengths, pi = paged_batch(seed=int(rng.integers(100)))
    rq, kv, kv_lens, rpi, cu, n = ragged_batch(seed=int(rng.integers(100)))
    s = rng.standard_normal((3, 4, 6, 8)).astype(np.float32)
    out, lse = attnref.paged_attention(q, k, v, lengths, pi, return_lse=True)
    rout = attnref.ragged_paged_attention(rq, kv, kv_lens, rpi, cu, n)
    heads = rng.standard_normal((2, q.shape[1])).astype(np.float32)  # sinks, slopes
    return [
        (attnref.paged_attention, [q, k, v, lengths, pi], {"num_threads": 2}),
        (attnref.check_paged, [q, k, v, lengths, pi], {"tiers": ("shape", "metadata", "data")}),
        (attnref.splash_attention, [s[0, :2], s[1, :1], s[2, :1]], {"mask": ("local", 2, 1),
                                                                   "block_q": 3}),
        (attnref.splash_attention_backward, [s[0, :2], s[1, 0], s[2, 0], s[0, :2]], {"block_kv": 3}),
        (attnref.ragged_paged_attention, [rq, kv, kv_lens, rpi, cu, n], {"sliding_window": 3}),
        (attnref.check_ragged, [rq, kv, kv_lens, rpi, cu, n], {"tiers": ("shape", "metadata", "data")}),
        (attnref.merge_attention_states, [out, lse, out, lse], {}),
        (attnref.paged_attention, [q, k, v, lengths, pi], {"sinks": heads[0],
                                                           "alibi_slopes": heads[1],
                                                           "sliding_window": 5}),
        (attnref.ragged_paged_attention, [rq, kv, kv_lens, rpi, cu, n],
         {"sinks": heads[0], "alibi_slopes": heads[1]}),
        (attnref.splash_attention_backward, [s[0, :2], s[1, :1], s[2, :1], s[0, :2]],
         {"sinks": heads[0, :2], "alibi_slopes": heads[1, :2], "sliding_window": 2}),
        (attnref.compare_paged, [out, q, k, v, lengths, pi], {"got_lse": lse}),
        (attnref.compare_ragged, [rout, rq, kv, kv_lens, rpi, cu, n], {"ignore_padding": True}),
        (attnref.compare_splash, [s[0, :2], s[0, :2], s[1, :1], s[2, :1]], {"mask": "causal"}),
    ]


def mutate(rng, a):
    if a.size == 0 and max(a.shape) > 4096:  # kind 5's array stays: numpy's take over it
        return a  # loops over every claimed extent (minutes)
    kind = int(rng.integers(6))
    if kind == 0 and np.issubdtype(a.dtype, np.integer):
        return rng.integers(-3, 14, a.shape).astype(a.dtype)
    if kind == 1 and a.ndim:
        axis = int(rng.integers(a.ndim))
        return np.take(a, np.arange(int(rng.integers(0, a.shape[axis] + 1))), axis=axis)
    if kind == 2:
        with np.errstate(over="ignore", invalid="ignore"):
            return a.astype(DTYPES[int(rng.integers(len(DTYPES)))])
    if kind == 3 and a.ndim >= 2:
        return a.swapaxes(0, 1)
    if kind == 4 and a.ndim:
        return a[::-1] if rng.random() < 0.3 else a[:, None] if a.ndim < 4 else a[..., ::2]
    if kind == 5 and a.ndim >= 2:  # no element, whatever the other extents claim (2^40 in
        # all at most: numpy refuses a shape whose byte count passes 2^63)
        shape = [1 << min(20, 40 // (a.ndim - 1))] * a.ndim
        shape[int(rng.integers(a.ndim))] = 0
        return np.zeros(shape, a.dtype)
    return a


def random_call(rng):
    calls = valid_calls(rng)
    fn, args, options = calls[int(rng.integers(len(calls)))]
    args, options = list(args), dict(options)
    arrays = list(range(len(args)))
    arrays += [key for key, x in options.items() if isinstance(x, np.ndarray)]
    for _ in range(int(rng.integers(1, 4))):
        at = arrays[int(rng.integers(len(arrays)))]
        if isinstance(at, str):
            options[at] = mutate(rng, options[at])
        else:
            args[at] = mutate(rng, np.asarray(args[at]))
    if rng.random() < 0.25:  # a float32 argument as bfloat16 bits, with every other float32
        # argument of its shape (merge's two states, splash's k and v): q, pages, states
        shape = np.shape(args[int(rng.integers(len(args)))])
        for at, x in enumerate(args):
            a = np.asarray(x)
            if a.dtype == np.float32 and a.shape == shape:
                bits = (a.view(np.uint32) >> 16).astype(np.uint16)
                args[at] = attnref.view_as(bits, "bfloat16")
    try:
        fn(*args, **options)
        return "ok"
    except attnref.ShapeError as e:
        return e.code


@pytest.mark.parametrize("seed", range(3))
def test_random_calls_never_crash(seed):
    rng = np.random.default_rng(seed)
    for _ in range(int(os.environ.get("ATTNREF_HOSTILE_CALLS", "150"))):
        random_call(rng)


def test_a_query_of_head_dim_zero_is_refused_before_outputs_are_sized():
    # A q of head_dim 0 holds no element whatever its other extents claim: 2^18 x 2^18 rows
    # and heads would size a 256 GiB logsumexp. Each call refuses it by its shape checks first.
    big = 1 << 18
    q = np.zeros((big, big, 0), np.float32)
    pages = np.zeros((1, 4, 16, 8), np.float32)
    kv = np.zeros((4, 16, 2, 8), np.float32)
    kv_seq = np.zeros((1, 4, 8), np.float32)
    lse = np.zeros((2, 3), np.float32)
    calls = [
        ("invalid_head_dim", lambda: attnref.paged_attention(
            q, pages, pages, np.zeros(1, np.int32), np.zeros((1, 1), np.int32))),
        ("head_dim_mismatch", lambda: attnref.ragged_paged_attention(
            q, kv, np.zeros(1, np.int32), np.zeros((1, 1), np.int32), np.zeros(2, np.int32),
            np.array([1], np.int32))),
        ("head_dim_mismatch", lambda: attnref.splash_attention(q, kv_seq, kv_seq)),
        ("shape_mismatch", lambda: attnref.merge_attention_states(q, lse, q, lse)),
    ]
    for code, call in calls:
        with pytest.raises(attnref.ShapeError) as e:
            call()
        assert e.value.code == code
