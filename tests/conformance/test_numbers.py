# SPDX-License-Identifier: Apache-2.0
"""Numbers on accepted inputs: attnref against JAX's kernels under TPU interpret mode and
against JAX's reference functions, at JAX's own test tolerances (numbers.py). The CI subset is
small; --full (scripts/conformance.sh) runs the larger grids."""
import itertools
import os
import subprocess

import ml_dtypes
import numpy as np
import pytest

import judge
import numerics as num

BF16 = ml_dtypes.bfloat16
E4M3 = ml_dtypes.float8_e4m3fn
E5M2 = ml_dtypes.float8_e5m2


def _name(dtype):
    return np.dtype(dtype).name


# ---- paged: (dtype, lengths, Hq, Hkv, D, page_size, pps, ppcb, soft_cap, int8, megacore)
PAGED_SUBSET = [
    (np.float32, [0, 3, 9, 16], 4, 2, 16, 4, 4, 2, None, False, None),
    (np.float32, [5, 16], 2, 2, 16, 4, 4, 4, 1.0, False, "batch"),
    (np.float32, [1, 13], 8, 1, 32, 8, 2, 1, None, False, None),
    (BF16, [0, 7, 16], 4, 2, 16, 4, 4, 2, None, False, None),
    (np.float32, [3, 16], 4, 2, 16, 4, 4, 2, None, True, "kv_head"),
    (BF16, [3, 16], 4, 2, 16, 4, 4, 2, 1.0, True, None),
]


def paged_full_grid():
    """JAX's test grid, reduced in size (lengths [0, 3, ...] up to 2 pages of blocks)."""
    # megacore_mode changes no number (the verdict rows cover its checks), so it is left out.
    for dtype, page_size, hkv, ratio, cap, quant in itertools.product(
            [np.float32, BF16], [4, 16], [1, 2], [1, 4, 8], [1.0, None], [False, True]):
        pps = 64 // page_size
        lengths = [0, 3, 17, 33, 63, 64]
        yield (dtype, lengths, hkv * ratio, hkv, 128 if ratio == 4 else 32, page_size, pps,
               32 // page_size, cap, quant, None)


def check_paged(params):
    dtype, lengths, hq, hkv, dim, page_size, pps, ppcb, cap, quant, megacore = params
    x = num.paged_case(dtype, lengths, hq, hkv, dim, page_size, pps, ppcb, soft_cap=cap,
                       quantized=quant, megacore=megacore)
    got = num.paged_attnref(x)
    # JAX's TPU kernel reads K/V as bfloat16 (float32 pages are rounded; int8 pages are
    # dequantized to bfloat16); round_kv_to_bf16 is attnref's option for that.
    got_tpu = num.paged_attnref(x, round_kv_to_bf16=True)
    kernel = np.asarray(judge.paged_jax(x, run=True), np.float32)
    reference = num.paged_jax_reference(x)
    live = x["lengths"] > 0  # JAX's test compares sequences with a length only
    atol, rtol = num.PAGED_TOL[hq // hkv > 1]
    label = _name(dtype) + (" q, int8 pages" if quant else "")
    num.check_close("paged", label, "JAX kernel", "out (round_kv_to_bf16)", got_tpu[live],
                    kernel[live], atol, rtol)
    num.check_close("paged", label, "JAX reference", "out", got[live], reference[live], atol,
                    rtol)
    # A sequence of length 0: JAX's inline kernel writes zeros, as attnref does.
    num.check_close("paged", label, "JAX kernel", "out (length 0)", got_tpu[~live],
                    kernel[~live], 0.0, 0.0)


@pytest.mark.parametrize("params", PAGED_SUBSET, ids=str)
def test_paged_numbers(params):
    check_paged(params)


def test_paged_numbers_full_grid(full):
    if not full:
        pytest.skip("the full grid runs under scripts/conformance.sh (--full)")
    grid = list(paged_full_grid())
    for i, params in enumerate(grid):
        print(f"paged grid {i + 1}/{len(grid)}", flush=True)  # progress under pytest -s
        check_paged(params)


# ---- ragged: JAX 0.10.2's TPU interpreter cannot run the kernel (docs/conformance.md), so the
# numbers are against JAX's ref_ragged_paged_attention.
RAGGED_SUBSET = [
    dict(dtype=np.float32, kv_dtype=np.float32, seqs=[(3, 7), (1, 9), (4, 4)], hq=4, hkv=2),
    dict(dtype=np.float32, kv_dtype=np.float32, seqs=[(5, 18), (1, 5)], hq=8, hkv=1,
         sliding_window=5, soft_cap=50.0, sm_scale=0.088),
    dict(dtype=BF16, kv_dtype=BF16, seqs=[(2, 11), (1, 1), (3, 6)], hq=4, hkv=2),
    dict(dtype=BF16, kv_dtype=E4M3, seqs=[(2, 11), (1, 9)], hq=4, hkv=2, k_scale=0.5,
         v_scale=0.5),
    dict(dtype=BF16, kv_dtype=E5M2, seqs=[(2, 11), (1, 9)], hq=4, hkv=2),
]


def ragged_full_grid():
    rng = np.random.default_rng(1234)
    # Block sizes change no number (and JAX's reference has none): one pair per case.
    for num_seqs, (hq, hkv), dtype in itertools.product([1, 5], [(8, 2), (4, 4), (8, 1)],
                                                        [np.float32, BF16]):
        q_lens = rng.integers(1, 12, num_seqs)
        seqs = [(int(q), int(q + rng.integers(0, 20))) for q in q_lens]
        yield dict(dtype=dtype, kv_dtype=dtype, seqs=seqs, hq=hq, hkv=hkv, kv_block=4,
                   q_block=8)
    for window, cap in itertools.product([None, 5, 128], [None, 50.0]):
        yield dict(dtype=np.float32, kv_dtype=np.float32, seqs=[(7, 30), (1, 20), (12, 12)],
                   hq=4, hkv=4, sliding_window=window, soft_cap=cap)
    for kv_dtype, scales in itertools.product([E4M3, E5M2], [(0.5, 0.5), (None, None)]):
        yield dict(dtype=BF16, kv_dtype=kv_dtype, seqs=[(6, 19), (4, 13), (2, 30)], hq=8,
                   hkv=2, k_scale=scales[0], v_scale=scales[1])


def check_ragged(params):
    x = num.ragged_case(**params)
    got = num.ragged_attnref(x)
    want = num.ragged_jax_reference_rows(x)
    bits = np.dtype(params["kv_dtype"]).itemsize * 8
    tol = num.RAGGED_TOL[bits]
    label = _name(params["dtype"])
    if params["kv_dtype"] != params["dtype"]:
        label += f" q, {_name(params['kv_dtype'])} pages"
    num.check_close("ragged", label, "JAX reference", "out", got[:len(want)], want, tol, tol)


@pytest.mark.parametrize("params", RAGGED_SUBSET, ids=lambda p: str(sorted(p.items())))
def test_ragged_numbers(params):
    check_ragged(params)


def test_ragged_numbers_full_grid(full):
    if not full:
        pytest.skip("the full grid runs under scripts/conformance.sh (--full)")
    grid = list(ragged_full_grid())
    for i, params in enumerate(grid):
        print(f"ragged grid {i + 1}/{len(grid)}", flush=True)  # progress under pytest -s
        check_ragged(params)


# ---- splash: forward (out, logsumexp) and backward (dq, dk, dv, dsinks), against JAX's kernel
# and JAX's reference.
SPLASH_SUBSET = [
    dict(dtype=np.float32, hq=2, hkv=1, sq=128, skv=128, dim=16),
    dict(dtype=np.float32, hq=2, hkv=2, sq=128, skv=128, dim=16, mask=("local", 24, 8),
         segments=True, sinks=True, soft_cap=10.0),
    dict(dtype=np.float32, hq=2, hkv=1, sq=128, skv=256, dim=16, dim_v=8, mask="full",
         mqa=True, block_q=64, block_kv=256, block_kv_compute=128),
    dict(dtype=BF16, hq=2, hkv=1, sq=128, skv=128, dim=16, sinks=True),
]


def splash_full_grid():
    extras = [{}, dict(segments=True, sinks=True), dict(soft_cap=20.0, sinks=True),
              dict(segments=True, soft_cap=20.0)]
    heads = [(1, 1, False), (4, 2, False), (4, 1, True)]
    masks = ["causal", ("local", 40, 10), ("chunked", 64)]
    for dtype, (hq, hkv, mqa), mask, extra in itertools.product(
            [np.float32, BF16], heads, masks, extras):
        if dtype == BF16 and mask != "causal":
            continue
        yield dict(dtype=dtype, hq=hq, hkv=hkv, sq=256, skv=256, dim=32, mask=mask, mqa=mqa,
                   block_kv=256, block_kv_compute=128, **extra)


def check_splash(params):
    x = num.splash_case(**params)
    label = _name(params["dtype"])
    out, lse = num.splash_attnref_forward(x)
    jax_out, jax_lse = num.splash_jax_forward(x)
    rng = np.random.default_rng(9)
    dout = (rng.uniform(size=out.shape) / 10).astype(np.float32).astype(params["dtype"])
    grads = num.splash_attnref_backward(x, dout)
    jax_grads = num.splash_jax_backward(x, dout)
    ref_out, ref_grads = num.splash_jax_reference(x, dout)
    tol = num.SPLASH_TOL
    num.check_close("splash", label, "JAX kernel", "out", out, jax_out, *tol["out"])
    num.check_close("splash", label, "JAX kernel", "lse", lse, jax_lse, *tol["lse"])
    num.check_close("splash", label, "JAX reference", "out", out, ref_out, *tol["out"])
    for name, ours, kernel, ref in zip(("dq", "dk", "dv", "dsinks"), grads, jax_grads,
                                       ref_grads):
        assert (ours is None) == (kernel is None), name
        if ours is None:
            continue
        num.check_close("splash", label, "JAX kernel", name, ours, kernel, *tol[name])
        num.check_close("splash", label, "JAX reference", name, ours, ref, *tol[name])


@pytest.mark.parametrize("params", SPLASH_SUBSET, ids=lambda p: str(sorted(p.items())))
def test_splash_numbers(params):
    check_splash(params)


def test_splash_numbers_full_grid(full):
    if not full:
        pytest.skip("the full grid runs under scripts/conformance.sh (--full)")
    grid = list(splash_full_grid())
    for i, params in enumerate(grid):
        print(f"splash grid {i + 1}/{len(grid)}", flush=True)  # progress under pytest -s
        check_splash(params)


# ---- attnref-run on real ml_dtypes dumps (np.save of bfloat16 / float8 arrays writes |V2, |V1)
def _run_cli(tmp_path, family, arrays, options):
    cli = os.environ.get("ATTNREF_RUN")
    if not cli:
        pytest.skip("ATTNREF_RUN (the attnref-run binary) is not set")
    argv = [cli, family]
    for name, array in arrays.items():
        path = tmp_path / f"{name}.npy"
        np.save(path, array)
        argv += [f"--{name.replace('_', '-')}", str(path)]
    out = tmp_path / "out.npy"
    done = subprocess.run(argv + options + ["--out", str(out)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return np.load(out)


def test_attnref_run_paged_bf16_dump(tmp_path):
    x = num.paged_case(BF16, [0, 5, 16], 4, 2, 16, 4, 4, 2)
    got = _run_cli(tmp_path, "paged", {n: x[n] for n in ("q", "k_pages", "v_pages", "lengths",
                                                          "page_indices")},
                   ["--q-dtype", "bf16", "--kv-dtype", "bf16", "--pages-per-compute-block", "2",
                    "--profile", "jax"])
    kernel = np.asarray(judge.paged_jax(x, run=True), np.float32)
    live = x["lengths"] > 0
    num.check_close("paged", "bfloat16 (attnref-run .npy)", "JAX kernel", "out", got[live],
                    kernel[live], *num.PAGED_TOL[True])


def test_attnref_run_ragged_fp8_dump(tmp_path):
    x = num.ragged_case(BF16, E4M3, [(2, 11), (1, 9)], 4, 2, k_scale=0.5, v_scale=0.5)
    got = _run_cli(tmp_path, "ragged", {n: x[n] for n in ("q", "kv_pages", "kv_lens",
                                                           "page_indices", "cu_q_lens",
                                                           "num_seqs")},
                   ["--q-dtype", "bf16", "--kv-dtype", "e4m3", "--k-scale", "0.5", "--v-scale",
                    "0.5", "--num-kv-pages-per-block", "2", "--num-queries-per-block", "4",
                    "--profile", "jax"])
    want = num.ragged_jax_reference_rows(x)
    num.check_close("ragged", "bfloat16 q, float8_e4m3fn pages (attnref-run .npy)",
                    "JAX reference", "out", got[:len(want)], want, 0.2, 0.2)
