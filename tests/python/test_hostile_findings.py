# SPDX-License-Identifier: Apache-2.0
"""Hostile inputs that once crashed the module, copied before checking, read wrong values, could
not be interrupted or gave an unclear error: each gets a clear error (or the right answer), and
the same input through attnref-run gets the same code where a .npy file can carry it."""
import os
import re
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import attnref
from conftest import paged_batch, ragged_batch

ATTNREF_RUN = os.environ.get("ATTNREF_RUN")
needs_cli = pytest.mark.skipif(not ATTNREF_RUN, reason="ATTNREF_RUN (attnref-run's path) not set")


def cli(*args):
    return subprocess.run([ATTNREF_RUN, *map(str, args)], capture_output=True, text=True)


class RaisingArray:
    def __array__(self, dtype=None, copy=None):
        raise KeyError("x")


class NoneArray:
    def __array__(self, dtype=None, copy=None):
        return None


class RaisingGetattr:
    def __getattr__(self, name):
        raise RuntimeError("no attributes here")


class OutOfMemory:
    def __array__(self, dtype=None, copy=None):
        raise MemoryError("pretend")


@pytest.mark.parametrize("where", ["q", "lengths", "sinks"])
def test_array_whose_conversion_raises_propagates_its_error(where):
    q, k, v, lengths, pi = paged_batch()
    args = {"q": q, "lengths": lengths}
    options = {}
    if where == "sinks":
        options["sinks"] = RaisingArray()
    else:
        args[where] = RaisingArray()
    with pytest.raises(KeyError, match="x"):
        attnref.paged_attention(args["q"], k, v, args["lengths"], pi, **options)
    with pytest.raises(KeyError, match="x"):
        attnref.check_splash(RaisingArray(), k[0], v[0])
    with pytest.raises(RuntimeError, match="no attributes here"):
        attnref.paged_attention(q, k, v, RaisingGetattr(), pi)
    with pytest.raises((TypeError, ValueError)):  # numpy's own refusal of a None
        attnref.ragged_paged_attention(*ragged_batch()[:2], NoneArray(), *ragged_batch()[3:])


def test_memory_error_of_a_compared_output_stays_a_memory_error():
    q, k, v, lengths, pi = paged_batch()
    with pytest.raises(MemoryError, match="pretend"):
        attnref.compare_paged(OutOfMemory(), q, k, v, lengths, pi)


def broadcast_table(batch, width):
    """An int32 page table of `batch` x `width` zeros over one 4-byte element (stride 0)."""
    return as_strided(np.zeros(1, np.int32), (batch, width), (0, 0))


def test_bad_length_is_reported_before_a_huge_broadcast_table_is_copied():
    q, k, v, _, _ = paged_batch(batch=2)
    table = broadcast_table(2, 2**31)
    start = time.monotonic()
    with pytest.raises(attnref.ShapeError) as e:
        attnref.paged_attention(q, k, v, np.array([-1, 1], np.int32), table)
    assert e.value.code == "length_out_of_range"
    assert time.monotonic() - start < 5  # the copy took 29 s and 4 GB, then bad_alloc


def test_huge_broadcast_table_copies_what_it_holds():
    q, k, v, _, _ = paged_batch(batch=2)
    lengths = np.array([7, 3], np.int32)
    start = time.monotonic()
    got = attnref.paged_attention(q, k, v, lengths, broadcast_table(2, 2**31))
    assert time.monotonic() - start < 5
    # Page 0 holds every token either way: the same answer as a narrow table of zeros.
    want = attnref.paged_attention(q, k, v, lengths, np.zeros((2, 2), np.int32))
    np.testing.assert_array_equal(got, want)
    rq, kv, kv_lens, pi, cu, n = ragged_batch()
    wide = as_strided(np.zeros(1, np.int32), (3, 2**31), (0, 0))
    got = attnref.ragged_paged_attention(rq, kv, kv_lens, wide, cu, n)
    want = attnref.ragged_paged_attention(rq, kv, kv_lens, np.zeros((3, 3), np.int32), cu, n)
    np.testing.assert_array_equal(got, want)


@needs_cli
def test_bad_length_has_the_same_code_through_attnref_run(tmp_path):
    q, k, v, _, pi = paged_batch(batch=2)
    for name, a in dict(q=q, k=k, v=v, lengths=np.array([-1, 1], np.int32), pi=pi).items():
        np.save(tmp_path / f"{name}.npy", a)
    done = cli("paged", "--q", tmp_path / "q.npy", "--k-pages", tmp_path / "k.npy", "--v-pages",
               tmp_path / "v.npy", "--lengths", tmp_path / "lengths.npy", "--page-indices",
               tmp_path / "pi.npy", "--out", tmp_path / "out.npy")
    assert done.returncode == 2
    assert "error[length_out_of_range]" in done.stderr


def test_torch_tensor_with_negative_bit_is_refused():
    torch = pytest.importorskip("torch")
    q, k, v, lengths, pi = paged_batch()
    c = torch.complex(torch.from_numpy(q), torch.from_numpy(q))
    negated = c.conj().imag  # a lazy negation of q
    assert negated.is_neg()
    with pytest.raises(attnref.ShapeError, match="negative bit") as e:
        attnref.paged_attention(negated, k, v, lengths, pi)
    assert e.value.code == "dtype_not_supported"
    assert "resolve_neg()" in e.value.hint
    got = attnref.paged_attention(negated.resolve_neg(), k, v, lengths, pi)
    np.testing.assert_array_equal(got, attnref.paged_attention(-q, k, v, lengths, pi))


def test_ints_past_int64_are_value_errors():
    rq, kv, kv_lens, pi, cu, _ = ragged_batch()
    with pytest.raises(ValueError, match="num_seqs does not fit in int64"):
        attnref.ragged_paged_attention(rq, kv, kv_lens, pi, cu, 2**70)
    s = np.ones((2, 4, 8), np.float32)
    with pytest.raises(ValueError, match="mask does not fit in int64"):
        attnref.splash_attention(s, s, s, mask=("causal", 2**70))
    with pytest.raises(ValueError, match="mask does not fit in int64"):
        attnref.splash_attention(s, s, s, mask=("local", -2**70, None))


def test_numpy_integer_num_seqs_is_an_int():
    rq, kv, kv_lens, pi, cu, _ = ragged_batch()
    want = attnref.ragged_paged_attention(rq, kv, kv_lens, pi, cu, 2)
    for n in (np.int64(2), np.int32(2), np.array([2], np.int32)):
        np.testing.assert_array_equal(attnref.ragged_paged_attention(rq, kv, kv_lens, pi, cu, n),
                                      want)


@pytest.mark.parametrize("dtype, named", [(">f4", "float32 (big-endian)"), ("int16", "int16"),
                                          ("complex64", "complex64"), ("uint32", "uint32")])
def test_unread_dtype_is_named_with_what_is_read(dtype, named):
    q, k, v, lengths, pi = paged_batch()
    with pytest.raises(attnref.ShapeError) as e:
        attnref.paged_attention(q.astype(dtype), k, v, lengths, pi)
    assert e.value.code == "dtype_not_supported"
    assert e.value.message == f"q has dtype {named}, which attnref does not read"
    assert "float16, bfloat16, float32, float64" in e.value.hint
    assert "unknown" not in str(e.value)
    with pytest.raises(attnref.ShapeError, match=re.escape(f"lengths has dtype {named}")):
        attnref.check_paged(q, k, v, lengths.astype(dtype), pi)


def test_unread_torch_dtype_is_named():
    torch = pytest.importorskip("torch")
    q, k, v, lengths, pi = paged_batch()
    with pytest.raises(attnref.ShapeError, match="q has dtype int16, which attnref does not read"):
        attnref.paged_attention(torch.from_numpy(q.astype(np.int16)), k, v, lengths, pi)


def test_splash_backward_refuses_return_lse():
    s = np.ones((2, 4, 8), np.float32)
    with pytest.raises(TypeError, match="unexpected keyword argument 'return_lse'"):
        attnref.splash_attention_backward(s, s, s, s, return_lse=True)


def test_view_reaching_past_int64_bytes_is_refused():
    q, k, v, lengths, pi = paged_batch(hq=5, hkv=5)
    # KV heads 2^60 elements apart: the fifth lies 2^62 elements (2^64 bytes) away, a valid
    # element offset but not a valid byte offset.
    far = as_strided(k, k.shape, (2**62,) + k.strides[1:])
    with pytest.raises(attnref.ShapeError) as e:
        attnref.paged_attention(q, far, v, lengths, pi)
    assert e.value.code == "size_overflow"
    assert "overflows int64 in bytes (4-byte elements)" in e.value.message


def test_mask_heads_without_elements_answer_at_once():
    heads = 2**24
    q = np.zeros((heads, 0, 8), np.float32)
    k = np.zeros((1, 0, 8), np.float32)
    start = time.monotonic()
    out = attnref.splash_attention(q, k, k, mask=np.zeros((heads, 0, 0), bool))
    assert out.shape == (heads, 0, 8)
    assert time.monotonic() - start < 5  # one mask object per head took 17 s and 2 GB


def interrupted_after(setup, call):
    """Runs `setup` (Python source defining what `call`, an expression, needs) in a child, so
    that a call that ignores SIGINT cannot hang the suite, sends it SIGINT after 1 s and returns
    the seconds until the call raised KeyboardInterrupt."""
    script = textwrap.dedent("""
        import os, signal, threading, time
        import numpy as np
        from numpy.lib.stride_tricks import as_strided
        import attnref
    """) + textwrap.dedent(setup) + textwrap.dedent(f"""
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
        start = time.monotonic()
        try:
            {call}
            print("finished")
        except KeyboardInterrupt:
            print("interrupted after", time.monotonic() - start)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("interrupted after"), done.stdout
    return float(done.stdout.split()[-1])


def test_ctrl_c_stops_a_long_call_with_keyboard_interrupt():
    """A call of hours (2^16 sequences of 2^20 tokens over one broadcast page) is stopped by
    SIGINT between work items."""
    setup = """
        batch, page, pages = 2**16, 2**10, 2**10
        q = np.ones((batch, 1, 8), np.float32)
        k = as_strided(np.ones(8, np.float32), (1, 1, page, 8), (0, 0, 0, 4))
        lengths = np.full(batch, page * pages, np.int32)
        table = as_strided(np.zeros(1, np.int32), (batch, pages), (0, 0))
    """
    for threads in (1, 2):
        call = f"attnref.paged_attention(q, k, k, lengths, table, num_threads={threads})"
        assert interrupted_after(setup, call) < 30


# One sequence of 2^40 keys over one broadcast page (`args` of each family's call): a single
# work item of hours.
HUGE_ITEM_INPUTS = {
    "paged": """
        q = np.ones((1, 1, 8), np.float32)
        k = as_strided(np.ones(8, np.float32), (1, 1, 2**20, 8), (0, 0, 0, 4))
        table = as_strided(np.zeros(1, np.int64), (1, 2**20), (0, 0))
        args = (q, k, k, np.array([2**40], np.int64), table)
    """,
    # One decode row after 2^40 cached keys.
    "ragged": """
        q = np.ones((1, 1, 8), np.float32)
        kv = as_strided(np.ones(8, np.float32), (1, 2**20, 2, 8), (0, 0, 0, 4))
        table = as_strided(np.zeros(1, np.int64), (1, 2**20), (0, 0))
        args = (q, kv, np.array([2**40], np.int64), table, np.array([0, 1], np.int64),
                np.array([1], np.int64))
    """,
}
KERNELS = {"paged": "paged_attention", "ragged": "ragged_paged_attention"}


@pytest.mark.parametrize("family", sorted(HUGE_ITEM_INPUTS))
def test_ctrl_c_stops_a_single_work_item_of_hours(family):
    """SIGINT reaches a call whose one work item (one sequence, one KV head) would run for
    hours: the kernels ask between the steps of an item, not only between items."""
    for threads in (1, 2):
        call = f"attnref.{KERNELS[family]}(*args, num_threads={threads})"
        assert interrupted_after(HUGE_ITEM_INPUTS[family], call) < 30


@pytest.mark.parametrize("family", sorted(HUGE_ITEM_INPUTS))
def test_ctrl_c_stops_a_compare_call(family):
    """SIGINT stops a compare_* call, whose reference run on the same inputs (then the
    hypotheses) is one work item of hours, as it stops the kernel call itself."""
    call = f"attnref.compare_{family}(np.zeros((1, 1, 8)), *args)"
    assert interrupted_after(HUGE_ITEM_INPUTS[family], call) < 30
