# SPDX-License-Identifier: Apache-2.0
"""Verdict conformance: for every row of cases.py, JAX's entry point (CPU, TPU interpret mode)
and attnref's module under profile="jax" agree: both accept, or both reject with the row's JAX
check and JAX's text inside attnref's message. Rows of differences.py are held to their row."""
import os
import pathlib
import tempfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cases
import differences
import judge


def agree(row: cases.Row, jax_v: judge.Verdict, ours: judge.Verdict):
    """Returns (verdict agreement, text agreement) of a row outside the differences table."""
    if jax_v.accepted or ours.accepted:
        return jax_v.accepted == ours.accepted, jax_v.accepted == ours.accepted
    same_check = ours.check == row.check and row.check != ""
    return same_check, same_check and judge.text_agrees(jax_v.text, ours.text)


# attnref-run, when ATTNREF_RUN names it (ctest and scripts/conformance.sh do), judges every
# input too: from .npy dumps, it must give the module's verdict, code, JAX check and message.
CLI = os.environ.get("ATTNREF_RUN")


def assert_cli_agrees(family: str, x: dict, ours: judge.Verdict):
    if not CLI:
        return
    with tempfile.TemporaryDirectory() as folder:
        cli = judge.cli_verdict(CLI, family, x, pathlib.Path(folder))
    if cli is None:  # no CLI spelling (a per-head list of masks, mixed raw dtypes)
        return
    same = cli.accepted == ours.accepted and (ours.accepted or (
        (cli.code, cli.check, cli.text) == (ours.code, ours.check, ours.text)))
    judge.record(kind="cli", family=family, same=same)
    assert same, f"attnref-run: {cli}\nmodule: {ours}"


def assert_row(family: str, row: cases.Row):
    x = row.make()
    jax_v, ours = judge.verdicts(family, x, row.x64)
    assert_cli_agrees(family, x, ours)
    entry = differences.DIFFERENCES.get((family, row.name))
    if entry is not None:
        held = differences.matches(entry["jax"], jax_v) and \
            differences.matches(entry["attnref"], ours)
        judge.record(kind="verdict", family=family, row=row.name, documented=True, held=held)
        assert differences.matches(entry["jax"], jax_v), f"JAX: {jax_v}"
        assert differences.matches(entry["attnref"], ours), f"attnref: {ours}"
        return
    verdict_ok, text_ok = agree(row, jax_v, ours)
    judge.record(kind="verdict", family=family, row=row.name, documented=False,
                 verdict=verdict_ok, text=text_ok, rejected=not jax_v.accepted)
    assert verdict_ok, f"JAX: {jax_v}\nattnref: {ours}"
    assert text_ok, f"JAX's text not in attnref's:\nJAX: {jax_v}\nattnref: {ours}"
    if row.check:
        assert not jax_v.accepted, f"the row means to break {row.check}, but JAX accepted"


@pytest.mark.parametrize("row", cases.PAGED_ROWS, ids=lambda r: r.name)
def test_paged_verdicts(row):
    assert_row("paged", row)


@pytest.mark.parametrize("row", cases.RAGGED_ROWS, ids=lambda r: r.name)
def test_ragged_verdicts(row):
    assert_row("ragged", row)


@pytest.mark.parametrize("row", cases.SPLASH_ROWS, ids=lambda r: r.name)
def test_splash_verdicts(row):
    assert_row("splash", row)


def test_every_difference_names_a_row():
    names = {(family, row.name) for family, rows in cases.ROWS.items() for row in rows}
    assert set(differences.DIFFERENCES) <= names


def test_every_jax_check_of_the_catalogue_has_a_row_or_a_reason():
    covered = {row.check for rows in cases.ROWS.values() for row in rows}
    covered |= set(differences.NOT_REACHED)
    assert set(differences.CATALOGUE_CHECKS) <= covered, \
        sorted(set(differences.CATALOGUE_CHECKS) - covered)


# Drawn inputs around the rules' edges: whatever JAX says, attnref says the same (both accept,
# or both reject with one JAX check and JAX's text), outside rows of known differences.
def _drawn_agree(family, x, own_rules, x64=False, own_codes=None):
    """own_rules(x): x breaks one of attnref's own rules (differences.py's "own" rows), which
    attnref must report: with no JAX check, or with a code of own_codes when that is given."""
    jax_v, ours = judge.verdicts(family, x, x64)
    if x64 and differences.untraceable_with_x64(jax_v):  # the "x64 on: valid" rows' class
        jax_v = judge.verdicts(family, x)[0]
    assert_cli_agrees(family, x, ours)
    if own_rules(x):
        held = not ours.accepted and (ours.code in own_codes if own_codes else ours.check == "")
        judge.record(kind="verdict", family=family, row="drawn", documented=True, held=held)
        assert held, f"attnref: {ours}"
        return
    verdict_ok = jax_v.accepted == ours.accepted and (jax_v.accepted or ours.check != "")
    text_ok = jax_v.accepted or judge.text_agrees(jax_v.text, ours.text)
    reworded = not text_ok and (differences.reworded(family, ours.check) or
                                differences.reordered(family, ours.check, jax_v.text))
    judge.record(kind="verdict", family=family, row="drawn", documented=reworded,
                 held=reworded, verdict=verdict_ok, text=text_ok, rejected=not jax_v.accepted)
    assert verdict_ok, f"JAX: {jax_v}\nattnref: {ours}"
    assert text_ok or reworded, f"JAX: {jax_v}\nattnref: {ours}"


# 25 drawn inputs per family in CI; scripts/conformance.sh asks for more.
SETTINGS = settings(max_examples=int(os.environ.get("ATTNREF_CONFORMANCE_EXAMPLES", "25")),
                    deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(batch=st.integers(1, 4), hq=st.sampled_from([1, 2, 3, 4, 6, 8]),
       hkv=st.sampled_from([1, 2, 3, 4]), pps=st.integers(1, 4), ppcb=st.integers(1, 4),
       page_size=st.sampled_from([1, 2, 4, 8]), megacore=st.sampled_from([None, "kv_head",
                                                                         "batch"]),
       data=st.data())
def test_paged_drawn_shapes(batch, hq, hkv, pps, ppcb, page_size, megacore, data):
    capacity = pps * page_size
    lengths = np.array(data.draw(st.lists(st.sampled_from([0, 1, capacity - 1, capacity,
                                                           capacity + 1]),
                                          min_size=batch, max_size=batch)), np.int32)
    x = cases.paged_input(batch=batch, hq=hq, hkv=hkv, pps=pps, page_size=page_size, pages=5)
    x.update(lengths=lengths, pages_per_compute_block=ppcb, megacore_mode=megacore)
    x["page_indices"] = x["page_indices"] % 5
    _drawn_agree("paged", x, lambda x: hq % hkv == 0 and pps % ppcb == 0 and
                 not (megacore == "kv_head" and hkv % 2) and
                 not (megacore == "batch" and batch % 2) and (lengths > capacity).any())


@SETTINGS
@given(hq=st.sampled_from([1, 2, 3, 4, 8]), hkv=st.sampled_from([1, 2, 3, 4]),
       pps=st.integers(1, 3), kv_block=st.integers(0, 4), q_block=st.integers(0, 3),
       num_seqs=st.integers(0, 4), data=st.data())
def test_ragged_drawn_shapes(hq, hkv, pps, kv_block, q_block, num_seqs, data):
    page_size, slots = 4, 3
    capacity = pps * page_size
    kv_lens = np.array(data.draw(st.lists(st.sampled_from([0, 1, 3, capacity, capacity + 1]),
                                          min_size=slots, max_size=slots)), np.int32)
    q_lens = data.draw(st.lists(st.integers(0, 3), min_size=slots, max_size=slots))
    x = cases.ragged_input(hq=hq, hkv=hkv)
    x.update(kv_lens=kv_lens, cu_q_lens=np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int32),
             page_indices=np.zeros((slots, pps), np.int32),
             num_seqs=np.array([num_seqs], np.int32), num_kv_pages_per_block=kv_block,
             num_queries_per_block=q_block)
    _drawn_agree("ragged", x, lambda x: False)


@SETTINGS
@given(hq=st.sampled_from([1, 2, 3, 4]), hkv=st.sampled_from([1, 2, 3]),
       sq=st.sampled_from([64, 128, 256]), skv=st.sampled_from([128, 256]),
       bq=st.sampled_from([32, 64, 96, 128, 256]), bkv=st.sampled_from([128, 256, 384]),
       bkvc=st.sampled_from([None, 64, 128, 256]), mqa=st.booleans())
def test_splash_drawn_shapes(hq, hkv, sq, skv, bq, bkv, bkvc, mqa):
    x = cases.splash_input(hq=hq, hkv=hkv, sq=sq, skv=skv, dim=8, mqa=mqa)
    x.update(block_q=bq, block_kv=bkv, block_kv_compute=bkvc, mask="full")
    _drawn_agree("splash", x, lambda x: False)


# Drawn element types: every index array's dtype, q's, K's and V's (or k's and v's) apart, and
# the 64-bit switch. Inputs of a documented class (cases.py's second group: int64 converted by
# jax.jit, index dtypes or mixed K/V/q dtypes JAX never checks) must get attnref's dtype error;
# every other input must get JAX's verdict and text.
def _drawn_as_row(family, x, name):
    """Holds a drawn input (x64 off) to the documented row `name` of differences.py."""
    jax_v, ours = judge.verdicts(family, x)
    assert_cli_agrees(family, x, ours)
    entry = differences.DIFFERENCES[(family, name)]
    held = differences.matches(entry["jax"], jax_v) and differences.matches(entry["attnref"], ours)
    judge.record(kind="verdict", family=family, row="drawn", documented=True, held=held)
    assert held, f"JAX: {jax_v}\nattnref: {ours}"


_INDEX_DTYPES = [np.int32, np.int64, np.uint32, np.int16]
_INDEX = st.sampled_from(_INDEX_DTYPES)
_FLOAT = st.sampled_from([np.float32, cases.BF16, np.float16])
_DTYPE_CODES = ("dtype_not_supported", "quantization_mismatch")


@SETTINGS
@given(lengths=_INDEX, page_indices=_INDEX, q=_FLOAT, k=_FLOAT, v=_FLOAT, x64=st.booleans())
def test_paged_drawn_dtypes(lengths, page_indices, q, k, v, x64):
    x = cases.paged_input()
    for name, dtype in (("lengths", lengths), ("page_indices", page_indices), ("q", q),
                        ("k_pages", k), ("v_pages", v)):
        x[name] = x[name].astype(dtype)
    in_class = (page_indices is not np.int32 or lengths in (np.uint32, np.int16) or
                (lengths is np.int64 and not x64) or k is not v or
                (q is np.float16 and k is not np.float16))
    _drawn_agree("paged", x, lambda x: in_class, x64, _DTYPE_CODES)


@SETTINGS
@given(kv_lens=_INDEX, page_indices=_INDEX, cu_q_lens=_INDEX,
       num_seqs=st.sampled_from([np.int32, np.int64]), q=_FLOAT, kv=_FLOAT, x64=st.booleans())
def test_ragged_drawn_dtypes(kv_lens, page_indices, cu_q_lens, num_seqs, q, kv, x64):
    x = cases.ragged_input()
    for name, dtype in (("kv_lens", kv_lens), ("page_indices", page_indices),
                        ("cu_q_lens", cu_q_lens), ("num_seqs", num_seqs), ("q", q),
                        ("kv_pages", kv)):
        x[name] = x[name].astype(dtype)
    unread = {kv_lens, page_indices, cu_q_lens} & {np.uint32, np.int16}
    r5_passes = kv_lens is page_indices is cu_q_lens is np.int32
    if q is np.float16 and kv is np.float16 and r5_passes:
        _drawn_as_row("ragged", x, "own: float16 q and pages")
        return
    _drawn_agree("ragged", x, lambda x: bool(unread) or (q is np.float16 and kv is not np.float16),
                 x64, _DTYPE_CODES)


@SETTINGS
@given(q=_FLOAT, k=_FLOAT, v=_FLOAT, segment_ids=st.sampled_from([None, *_INDEX_DTYPES]),
       x64=st.booleans())
def test_splash_drawn_dtypes(q, k, v, segment_ids, x64):
    x = cases.splash_input()
    for name, dtype in (("q", q), ("k", k), ("v", v)):
        x[name] = x[name].astype(dtype)
    if segment_ids is not None:
        x["q_segment_ids"] = x["kv_segment_ids"] = (np.arange(128) // 48).astype(segment_ids)
    in_class = not (q is k is v) or segment_ids not in (None, np.int32)
    _drawn_agree("splash", x, lambda x: in_class, x64, _DTYPE_CODES)
