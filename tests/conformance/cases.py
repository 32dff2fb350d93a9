# SPDX-License-Identifier: Apache-2.0
"""Inputs for the verdict tables: per family a valid input, and rows that each change it so
that one JAX check (the row's id) fails, or change it in a way both should accept ("" id)."""
import dataclasses
from typing import Callable

import ml_dtypes
import numpy as np

BF16 = ml_dtypes.bfloat16


@dataclasses.dataclass
class Row:
    name: str  # unique within the family; the key of differences.py
    check: str  # the JAX check the change breaks ("" when it breaks none)
    make: Callable[[], dict]
    x64: bool = False  # JAX runs with jax_enable_x64 on (64-bit arrays stay 64-bit)


def _rng(seed=0):
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------------------------
def paged_input(batch=2, hq=4, hkv=2, dim=16, pages=8, page_size=4, pps=3, dtype=np.float32,
                seed=0, **changes):
    rng = _rng(seed)
    x = dict(q=rng.standard_normal((batch, hq, dim)).astype(dtype),
             k_pages=rng.standard_normal((hkv, pages, page_size, dim)).astype(dtype),
             v_pages=rng.standard_normal((hkv, pages, page_size, dim)).astype(dtype),
             lengths=rng.integers(1, pps * page_size + 1, batch).astype(np.int32),
             page_indices=rng.integers(0, pages, (batch, pps)).astype(np.int32),
             pages_per_compute_block=1)
    x.update(changes)
    return x


def _paged(**changes):
    def make():
        x = paged_input(**{k: v for k, v in changes.items() if k in _PAGED_SHAPE})
        for key, value in changes.items():
            if key not in _PAGED_SHAPE:
                x[key] = value(x) if callable(value) else value
        return x
    return make


_PAGED_SHAPE = ("batch", "hq", "hkv", "dim", "pages", "page_size", "pps", "dtype")


def _as(name, dtype):
    return lambda x: x[name].astype(dtype)


def _strided(name):
    """x[name] as a non-contiguous view: every other element of an array twice as long."""
    def make(x):
        a = x[name]
        wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        wide[..., ::2] = a
        return wide[..., ::2]
    return make


def _int8_pages(x):
    rng = _rng(3)
    shape = x["k_pages"].shape
    x["k_pages"] = rng.integers(-127, 128, shape).astype(np.int8)
    x["v_pages"] = rng.integers(-127, 128, shape).astype(np.int8)
    x["k_scales"] = rng.uniform(0.001, 0.02, shape[:-1] + (1,)).astype(np.float32)
    x["v_scales"] = rng.uniform(0.001, 0.02, shape[:-1] + (1,)).astype(np.float32)
    return x["k_pages"]


PAGED_ROWS = [
    Row("valid", "", _paged()),
    Row("valid: ppcb 3 of 3 pages", "", _paged(pages_per_compute_block=3)),
    Row("valid: megacore kv_head, 2 KV heads", "", _paged(megacore_mode="kv_head")),
    Row("valid: megacore batch, batch 2", "", _paged(megacore_mode="batch")),
    Row("valid: MQA (1 KV head)", "", _paged(hkv=1)),
    Row("valid: lengths 0 and at capacity", "",
        _paged(lengths=lambda x: np.array([0, 12], np.int32))),
    Row("valid: soft cap 30", "", _paged(soft_cap=30.0)),
    Row("valid: mask_value -1e30", "", _paged(mask_value=-1e30)),
    Row("valid: int8 pages with per-token scales", "", _paged(k_pages=_int8_pages)),
    Row("P1 v_pages pool differs", "P1",
        _paged(v_pages=lambda x: np.zeros((2, 9, 4, 16), np.float32))),
    Row("P2 3 query heads over 2 KV heads", "P2", _paged(hq=3)),
    Row("P3 head_dim 8 vs 16", "P3",
        _paged(q=lambda x: np.zeros((2, 4, 8), np.float32))),
    Row("P4 ppcb 2 over 3 pages", "P4", _paged(pages_per_compute_block=2)),
    Row("P5 3 lengths for batch 2", "P5",
        _paged(lengths=lambda x: np.array([1, 2, 3], np.int32))),
    Row("P5 lengths of rank 2", "P5",
        _paged(lengths=lambda x: np.array([[1], [2]], np.int32))),
    Row("P6 3 page-table rows for batch 2", "P6",
        _paged(page_indices=lambda x: np.zeros((3, 3), np.int32))),
    Row("P7 float32 lengths", "P7",
        _paged(lengths=lambda x: x["lengths"].astype(np.float32))),
    Row("P7 int64 lengths", "P7", _paged(lengths=lambda x: x["lengths"].astype(np.int64))),
    Row("P8 megacore kv_head, 1 KV head", "P8", _paged(hkv=1, megacore_mode="kv_head")),
    Row("P9 megacore batch, batch 3", "P9", _paged(batch=3, megacore_mode="batch")),
    Row("P10 megacore_mode 'core'", "P10", _paged(megacore_mode="core")),
    Row("own: 0 KV heads", "", _paged(hkv=0)),
    Row("own: ppcb 0", "", _paged(pages_per_compute_block=0)),
    Row("own: length past capacity", "",
        _paged(lengths=lambda x: np.array([13, 1], np.int32))),
    Row("own: negative length", "", _paged(lengths=lambda x: np.array([-1, 1], np.int32))),
    Row("own: page index past the pool", "",
        _paged(lengths=lambda x: np.array([12, 1], np.int32),
               page_indices=lambda x: np.array([[0, 1, 8], [0, 1, 2]], np.int32))),
    Row("valid: a dead page-table entry past the pool", "",
        _paged(lengths=lambda x: np.array([8, 1], np.int32),
               page_indices=lambda x: np.array([[0, 1, 8], [0, 1, 2]], np.int32))),
    Row("own: soft cap 0", "", _paged(soft_cap=0.0)),
    Row("own: q of rank 2", "", _paged(q=lambda x: x["q"][0])),
    # What JAX converts or never checks: index dtypes, K vs V vs q dtypes, ranks JAX meets in
    # tuple unpacking, layouts, the 64-bit switch.
    Row("own: int64 page_indices", "", _paged(page_indices=_as("page_indices", np.int64))),
    Row("own: int64 lengths and page_indices", "",
        _paged(lengths=_as("lengths", np.int64), page_indices=_as("page_indices", np.int64))),
    Row("own: uint32 page_indices", "", _paged(page_indices=_as("page_indices", np.uint32))),
    Row("own: int16 page_indices", "", _paged(page_indices=_as("page_indices", np.int16))),
    Row("own: float32 page_indices", "", _paged(page_indices=_as("page_indices", np.float32))),
    Row("own: uint32 lengths", "", _paged(lengths=_as("lengths", np.uint32))),
    Row("x64 on: P7 int64 lengths", "P7", _paged(lengths=_as("lengths", np.int64)), x64=True),
    Row("x64 on: valid", "", _paged(), x64=True),
    Row("own: K float32, V bfloat16", "", _paged(v_pages=_as("v_pages", BF16))),
    Row("own: K bfloat16, V float32", "", _paged(k_pages=_as("k_pages", BF16))),
    Row("valid: bfloat16 q over float32 pages", "", _paged(q=_as("q", BF16))),
    Row("valid: float32 q over bfloat16 pages", "",
        _paged(k_pages=_as("k_pages", BF16), v_pages=_as("v_pages", BF16))),
    Row("valid: bfloat16", "", _paged(dtype=BF16)),
    Row("own: float16 q over float32 pages", "", _paged(q=_as("q", np.float16))),
    Row("own: int8 pages with bfloat16 scales", "",
        _paged(k_pages=_int8_pages, k_scales=_as("k_scales", BF16),
               v_scales=_as("v_scales", BF16))),
    Row("own: q of rank 4", "", _paged(q=lambda x: x["q"][None])),
    Row("own: k_pages of rank 3", "", _paged(k_pages=lambda x: x["k_pages"][0])),
    Row("own: v_pages of rank 3", "", _paged(v_pages=lambda x: x["v_pages"][0])),
    Row("own: page_indices of rank 1", "", _paged(page_indices=lambda x: x["page_indices"][0])),
    Row("own: page_indices of rank 3", "",
        _paged(page_indices=lambda x: x["page_indices"][None])),
    Row("own: lengths of rank 0", "", _paged(lengths=lambda x: x["lengths"][0])),
    Row("valid: non-contiguous q, pages and page table", "",
        _paged(q=_strided("q"), k_pages=_strided("k_pages"), v_pages=_strided("v_pages"),
               page_indices=_strided("page_indices"))),
    Row("valid: batch 0", "", _paged(batch=0)),
    Row("zero-size: head_dim 0", "", _paged(dim=0)),
    Row("valid: Fortran-ordered pages", "",
        _paged(k_pages=lambda x: np.asfortranarray(x["k_pages"]),
               v_pages=lambda x: np.asfortranarray(x["v_pages"]))),
]


# ---------------------------------------------------------------------------------------------
def ragged_input(hq=4, hkv=2, dim=128, pages=10, page_size=4, tokens=8, dtype=np.float32,
                 kv_dtype=None, seed=1):
    """Two sequences (a prefill of 3 rows over 7 keys, a decode row over 9) and a padding slot;
    JAX's kernel asserts head_dim % 128 == 0 while tracing, hence dim 128."""
    rng = _rng(seed)
    return dict(q=rng.standard_normal((tokens, hq, dim)).astype(dtype),
                kv_pages=rng.standard_normal((pages, page_size, 2 * hkv, dim))
                .astype(kv_dtype or dtype),
                kv_lens=np.array([7, 9, 0], np.int32),
                page_indices=np.array([[3, 1, 8], [0, 5, 2], [0, 0, 0]], np.int32),
                cu_q_lens=np.array([0, 3, 4, 4], np.int32), num_seqs=np.array([2], np.int32),
                num_kv_pages_per_block=1, num_queries_per_block=4)


_RAGGED_SHAPE = ("hq", "hkv", "dim", "pages", "page_size", "tokens", "dtype", "kv_dtype")


def _ragged(**changes):
    def make():
        x = ragged_input(**{k: v for k, v in changes.items() if k in _RAGGED_SHAPE})
        for key, value in changes.items():
            if key not in _RAGGED_SHAPE:
                x[key] = value(x) if callable(value) else value
        return x
    return make


def _i32(*values):
    return lambda x: np.array(values, np.int32)


RAGGED_ROWS = [
    Row("valid", "", _ragged()),
    Row("valid: no sequences", "", _ragged(num_seqs=_i32(0))),
    Row("valid: kv_len at the page table's capacity", "", _ragged(kv_lens=_i32(12, 9, 0))),
    Row("valid: q_len equal to kv_len", "", _ragged(kv_lens=_i32(3, 1, 0))),
    Row("valid: sliding window 2, soft cap 5, sm_scale 0.1", "",
        _ragged(sliding_window=2, soft_cap=5.0, sm_scale=0.1)),
    Row("valid: k_scale, v_scale", "", _ragged(k_scale=0.5, v_scale=2.0)),
    Row("valid: 8 query heads over 1 KV head", "", _ragged(hq=8, hkv=1)),
    Row("valid: kv_pages_per_block 3", "", _ragged(num_kv_pages_per_block=3)),
    Row("R1 num_seqs of shape (2,)", "R1", _ragged(num_seqs=_i32(2, 0))),
    Row("R2 q head_dim 64 vs 128", "R2",
        _ragged(q=lambda x: np.zeros((8, 4, 64), np.float32))),
    Row("R3 kv_lens of shape (4,)", "R3", _ragged(kv_lens=_i32(7, 9, 0, 0))),
    Row("R4 cu_q_lens of shape (3,)", "R4", _ragged(cu_q_lens=_i32(0, 3, 4))),
    Row("R5 int64 kv_lens", "R5", _ragged(kv_lens=lambda x: x["kv_lens"].astype(np.int64))),
    Row("R5 int64 page_indices", "R5",
        _ragged(page_indices=lambda x: x["page_indices"].astype(np.int64))),
    Row("R6 3 query heads over 2 KV heads", "R6", _ragged(hq=3)),
    Row("R7 sliding window 0", "R7", _ragged(sliding_window=0)),
    Row("R8 soft cap 0.0", "R8", _ragged(soft_cap=0.0)),
    Row("R9 kv_pages_per_block 4 > 3", "R9", _ragged(num_kv_pages_per_block=4)),
    Row("R9 kv_pages_per_block 0", "R9", _ragged(num_kv_pages_per_block=0)),
    Row("R10 queries_per_block 0", "R10", _ragged(num_queries_per_block=0)),
    Row("R11 vmem_limit_bytes 0", "R11", _ragged(vmem_limit_bytes=0)),
    Row("R12 3 combined KV heads", "R12",
        _ragged(kv_pages=lambda x: np.zeros((10, 4, 3, 128), np.float32))),
    Row("R13 k_scale an int", "R13", _ragged(k_scale=1)),
    Row("R14 6 combined KV heads (float32)", "R14", _ragged(hq=6, hkv=3)),
    Row("R14 and R16 both broken", "R14", _ragged(hq=6, hkv=3, kv_lens=_i32(7, 13, 0))),
    Row("R15 num_seqs 4 > 3 slots", "R15", _ragged(num_seqs=_i32(4))),
    Row("R16 kv_len 13 past 3 pages of 4", "R16", _ragged(kv_lens=_i32(7, 13, 0))),
    Row("R16 padding slot's kv_len past the table", "R16", _ragged(kv_lens=_i32(7, 9, 13))),
    Row("R17 9 q tokens in a budget of 8", "R17", _ragged(cu_q_lens=_i32(0, 3, 9, 9))),
    Row("R18 q_len 3 > kv_len 2", "R18", _ragged(kv_lens=_i32(2, 9, 0))),
    Row("own: head_dim 16", "", _ragged(dim=16)),
    Row("own: block sizes left to the TPU tuner", "",
        _ragged(num_kv_pages_per_block=None, num_queries_per_block=None)),
    Row("own: negative kv_len", "", _ragged(kv_lens=_i32(7, -1, 0))),
    Row("own: cu_q_lens decreasing", "", _ragged(cu_q_lens=_i32(0, 3, 2, 4))),
    Row("own: page index past the pool", "",
        _ragged(page_indices=lambda x: np.array([[3, 10, 8], [0, 5, 2], [0, 0, 0]], np.int32))),
    Row("valid: a dead page-table entry past the pool", "",
        _ragged(page_indices=lambda x: np.array([[3, 1, 10], [0, 5, 2], [0, 0, 0]], np.int32))),
    Row("own: k_scale nan", "", _ragged(k_scale=float("nan"))),
    # What JAX converts or never checks.
    Row("R5 int64 cu_q_lens", "R5", _ragged(cu_q_lens=_as("cu_q_lens", np.int64))),
    Row("own: uint32 cu_q_lens", "", _ragged(cu_q_lens=_as("cu_q_lens", np.uint32))),
    Row("valid: int64 num_seqs", "", _ragged(num_seqs=_as("num_seqs", np.int64))),
    Row("x64 on: valid", "", _ragged(), x64=True),
    Row("x64 on: R5 int64 kv_lens", "R5", _ragged(kv_lens=_as("kv_lens", np.int64)), x64=True),
    Row("valid: bfloat16 q over float32 pages", "", _ragged(q=_as("q", BF16))),
    Row("valid: float32 q over bfloat16 pages", "", _ragged(kv_pages=_as("kv_pages", BF16))),
    Row("own: float16 q over float32 pages", "", _ragged(q=_as("q", np.float16))),
    Row("own: float16 q and pages", "", _ragged(dtype=np.float16)),
    Row("own: q of rank 2", "", _ragged(q=lambda x: x["q"][:, 0])),
    Row("own: kv_pages of rank 3", "", _ragged(kv_pages=lambda x: x["kv_pages"][0])),
    Row("own: page_indices of rank 1", "",
        _ragged(page_indices=lambda x: x["page_indices"].reshape(-1))),
    Row("valid: non-contiguous q, pages and page table", "",
        _ragged(q=_strided("q"), kv_pages=_strided("kv_pages"),
                page_indices=_strided("page_indices"))),
    Row("R13 k_scale a numpy float32", "R13", _ragged(k_scale=np.float32(0.5))),
    Row("own: num_seqs a Python int", "", _ragged(num_seqs=2)),
    Row("zero-size: no query tokens, no sequences", "",
        _ragged(tokens=0, num_seqs=_i32(0), cu_q_lens=_i32(0, 0, 0, 0))),
    Row("zero-size: a pool of no pages", "", _ragged(pages=0, kv_lens=_i32(0, 0, 0),
                                                     num_seqs=_i32(0))),
    Row("own: num_seqs of rank 0", "", _ragged(num_seqs=lambda x: np.array(2, np.int32))),
]


# ---------------------------------------------------------------------------------------------
def splash_input(hq=2, hkv=1, sq=128, skv=128, dim=16, dim_v=None, mqa=False, dtype=np.float32,
                 seed=2):
    rng = _rng(seed)
    kv_shape = (skv,) if mqa else (hkv, skv)
    return dict(q=rng.standard_normal((hq, sq, dim)).astype(dtype),
                k=rng.standard_normal(kv_shape + (dim,)).astype(dtype),
                v=rng.standard_normal(kv_shape + (dim_v or dim,)).astype(dtype),
                mask="causal", block_q=128, block_kv=128)


_SPLASH_SHAPE = ("hq", "hkv", "sq", "skv", "dim", "dim_v", "mqa", "dtype")


def _splash(**changes):
    def make():
        x = splash_input(**{k: v for k, v in changes.items() if k in _SPLASH_SHAPE})
        for key, value in changes.items():
            if key not in _SPLASH_SHAPE:
                x[key] = value(x) if callable(value) else value
        return x
    return make


def _segments(sq, skv):
    return dict(q_segment_ids=lambda x: (np.arange(sq) // 48).astype(np.int32),
                kv_segment_ids=lambda x: (np.arange(skv) // 48).astype(np.int32))


SPLASH_ROWS = [
    Row("valid", "", _splash()),
    Row("valid: MQA", "", _splash(mqa=True)),
    Row("valid: full mask, 256 keys, kv blocks 256 computed by 128", "",
        _splash(skv=256, mask="full", block_kv=256, block_kv_compute=128)),
    Row("valid: q blocks 64", "", _splash(block_q=64)),
    Row("valid: local mask, segment ids, sinks, soft cap", "",
        _splash(mask=("local", 16, 0), sinks=lambda x: np.array([0.5, -1.0], np.float32),
                soft_cap=20.0, **_segments(128, 128))),
    Row("valid: head_dim_v 8", "", _splash(dim_v=8)),
    Row("valid: backward", "", _splash(backward=True)),
    Row("S2 a 4-dim mask array", "S2",
        _splash(mask=lambda x: np.ones((1, 2, 128, 128), bool))),
    Row("S3 a 4-dim key in MHA", "S3", _splash(k=lambda x: x["k"][None])),
    Row("S4 key head_dim 8 vs 16", "S4",
        _splash(k=lambda x: np.zeros((1, 128, 8), np.float32))),
    Row("S5 3 query heads over 2 KV heads", "S5", _splash(hq=3, hkv=2)),
    Row("S6 value of 256 keys, key of 128", "S6",
        _splash(v=lambda x: np.zeros((1, 256, 16), np.float32))),
    Row("S7 kv block 128 computed by 96", "S7", _splash(block_kv_compute=96)),
    Row("S8 kv compute block 64", "S8",
        _splash(skv=256, mask="full", block_kv=256, block_kv_compute=64)),
    Row("S9 q segment ids of 64", "S9",
        _splash(**dict(_segments(128, 128),
                       q_segment_ids=lambda x: np.zeros(64, np.int32)))),
    Row("S10 kv segment ids of 64", "S10",
        _splash(**dict(_segments(128, 128),
                       kv_segment_ids=lambda x: np.zeros(64, np.int32)))),
    Row("S11 sinks of shape (3,)", "S11", _splash(sinks=lambda x: np.zeros(3, np.float32))),
    Row("S21 backward with segment ids and q blocks 64", "S21",
        _splash(block_q=64, backward=True, **_segments(128, 128))),
    Row("M3 q block 96 over 128 rows", "M3", _splash(block_q=96)),
    Row("M4 kv block 256 over 128 keys", "M4", _splash(block_kv=256)),
    Row("K12 chunk size 0", "K12", _splash(mask=("chunked", 0))),
    # What JAX converts or never checks.
    Row("own: float32 q, bfloat16 k and v", "",
        _splash(k=_as("k", BF16), v=_as("v", BF16))),
    Row("own: float32 q and k, bfloat16 v", "", _splash(v=_as("v", BF16))),
    Row("valid: bfloat16", "", _splash(dtype=BF16)),
    Row("own: int64 segment ids", "",
        _splash(**dict(_segments(128, 128), q_segment_ids=lambda x: (np.arange(128) // 48),
                       kv_segment_ids=lambda x: (np.arange(128) // 48)))),
    Row("valid: bfloat16 sinks", "",
        _splash(sinks=lambda x: np.array([0.5, -1.0], BF16))),
    Row("x64 on: valid", "", _splash(), x64=True),
    Row("own: q of rank 2", "", _splash(q=lambda x: x["q"][0])),
    Row("own: q of rank 4", "", _splash(q=lambda x: x["q"][None])),
    Row("zero-size: no query rows", "", _splash(sq=0)),
    Row("zero-size: head_dim 0", "", _splash(dim=0)),
    Row("valid: non-contiguous q, k and v", "",
        _splash(q=_strided("q"), k=_strided("k"), v=_strided("v"))),
]

ROWS = {"paged": PAGED_ROWS, "ragged": RAGGED_ROWS, "splash": SPLASH_ROWS}
