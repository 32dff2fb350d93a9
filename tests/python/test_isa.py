# SPDX-License-Identifier: Apache-2.0
"""The instruction-set level the module and attnref-run run, ATTNREF_ISA, and the kernels of
the level this process runs against the float64 oracle at head_dim 128 (the widest register
paths). ctest runs this file once per level the build made (test_python_isa_<level>)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import attnref
import oracle
from conftest import tolerance

LEVELS = ("baseline", "avx2", "avx512")
ATTNREF_RUN = os.environ.get("ATTNREF_RUN")


def test_build_info_names_the_level_it_runs():
    info = attnref.build_info()
    assert info["version"] == attnref.__version__
    assert info["isa"] in LEVELS and info["cpu_isa"] in LEVELS
    assert LEVELS.index(info["isa"]) <= LEVELS.index(info["cpu_isa"])
    forced = os.environ.get("ATTNREF_ISA")
    assert info["isa_forced"] == (forced or None)
    if forced and LEVELS.index(forced) <= LEVELS.index(info["cpu_isa"]):
        assert info["isa"] == forced  # ctest's per-level runs: the level they ask for runs


def _levels_built():
    here = os.path.dirname(attnref.__file__)
    names = os.listdir(here)
    built = ["baseline"]
    for level in LEVELS[1:]:
        if any(n.startswith("_attnref_" + level + ".") for n in names):
            built.append(level)
    return built


def _python_with(isa, code):
    env = dict(os.environ, ATTNREF_ISA=isa)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


@pytest.mark.parametrize("level", LEVELS)
def test_attnref_isa_forces_a_lower_level(level):
    r = _python_with(level, "import attnref; print(attnref.build_info()['isa'])")
    assert r.returncode == 0, r.stderr
    cpu = attnref.build_info()["cpu_isa"]
    built = _levels_built()
    want = min(LEVELS.index(level), LEVELS.index(cpu))
    want = max(i for i in range(want + 1) if LEVELS[i] in built)  # a level not built: the next lower
    assert r.stdout.strip() == LEVELS[want]


def test_attnref_isa_that_names_no_level_is_a_clear_error():
    r = _python_with("avx9000", "import attnref")
    assert r.returncode != 0
    assert "ATTNREF_ISA='avx9000' names no instruction-set level; use baseline, avx2 or avx512" \
        in r.stderr


@pytest.mark.skipif(not ATTNREF_RUN, reason="ATTNREF_RUN (attnref-run's path) not set")
@pytest.mark.parametrize("level", LEVELS)
def test_attnref_run_starts_the_program_of_the_level(level):
    env = dict(os.environ, ATTNREF_ISA=level)
    r = subprocess.run([ATTNREF_RUN, "--version"], env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    cpu = attnref.build_info()["cpu_isa"]
    runs = LEVELS[min(LEVELS.index(level), LEVELS.index(cpu))]
    if os.path.exists(os.path.join(os.path.dirname(ATTNREF_RUN), "attnref-run-avx2")):
        assert r.stdout.splitlines()[1] == f"kernels: {runs} (this CPU: {cpu})"
    r = subprocess.run([ATTNREF_RUN, "--version"], env=dict(os.environ, ATTNREF_ISA="sse9"),
                       capture_output=True, text=True)
    assert r.returncode == 1
    assert "ATTNREF_ISA='sse9' names no instruction-set level" in r.stderr


@pytest.mark.skipif(not ATTNREF_RUN, reason="ATTNREF_RUN (attnref-run's path) not set")
def test_attnref_run_falls_to_the_next_lower_program_a_build_lacks(tmp_path):
    # A copy of the programs without attnref-run-avx2: asked for avx2 (by the avx512 program,
    # whose own level is too high), it starts the baseline program instead of running its own.
    here = os.path.dirname(ATTNREF_RUN)
    if not os.path.exists(os.path.join(here, "attnref-run-avx512")):
        pytest.skip("this build made no avx512 program")
    for name in ("attnref-run", "attnref-run-avx512"):
        (tmp_path / name).write_bytes(open(os.path.join(here, name), "rb").read())
        (tmp_path / name).chmod(0o755)
    r = subprocess.run([str(tmp_path / "attnref-run-avx512"), "--version"],
                       env=dict(os.environ, ATTNREF_ISA="avx2"), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    cpu = attnref.build_info()["cpu_isa"]
    assert r.stdout.splitlines()[1] == f"kernels: baseline (this CPU: {cpu})"


def _bf16(x):
    bits = (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    return bits, (bits.astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_paged_at_head_dim_128_matches_the_oracle(dtype):
    rng = np.random.default_rng(7)
    batch, hq, hkv, dim, page, pps, pages = 3, 8, 2, 128, 16, 5, 12
    q = rng.standard_normal((batch, hq, dim)).astype(np.float32)
    k = rng.standard_normal((hkv, pages, page, dim)).astype(np.float32)
    v = rng.standard_normal((hkv, pages, page, dim)).astype(np.float32)
    lengths = np.array([77, 1, 64], np.int32)
    pi = rng.integers(0, pages, (batch, pps)).astype(np.int32)
    if dtype == "bfloat16":
        (k_bits, k), (v_bits, v) = _bf16(k), _bf16(v)
        k_in, v_in = attnref.view_as(k_bits, "bfloat16"), attnref.view_as(v_bits, "bfloat16")
        rtol, atol = 2e-5, 2e-6
    elif dtype == "float16":
        k, v = k.astype(np.float16), v.astype(np.float16)
        k_in, v_in = k, v
        rtol, atol = tolerance(np.float32)
    else:
        k_in, v_in = k, v
        rtol, atol = tolerance(np.float32)
    out = attnref.paged_attention(q, k_in, v_in, lengths, pi, sm_scale=0.09, soft_cap=20.0)
    want, _ = oracle.paged(q, k, v, lengths, pi, sm_scale=0.09, soft_cap=20.0)
    np.testing.assert_allclose(out, want, rtol=rtol, atol=atol)


def test_ragged_at_head_dim_128_matches_the_oracle():
    rng = np.random.default_rng(8)
    hq, hkv, dim, page, pages = 8, 2, 128, 16, 12
    q = rng.standard_normal((21, hq, dim)).astype(np.float32)
    kv = rng.standard_normal((pages, page, 2 * hkv, dim)).astype(np.float32)
    kv_lens = np.array([40, 33], np.int32)
    pi = np.array([[3, 1, 8, 0], [11, 5, 2, 6]], np.int32)
    cu = np.array([0, 20, 21], np.int32)  # a prefill of 20 rows, then a decode row
    num_seqs = np.array([2], np.int32)
    out = attnref.ragged_paged_attention(q, kv, kv_lens, pi, cu, num_seqs, sm_scale=0.09)
    want, _ = oracle.ragged(q, kv, kv_lens, pi, cu, 2, sm_scale=0.09)
    rtol, atol = tolerance(np.float32)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=rtol, atol=atol)


def test_splash_causal_at_head_dim_128_matches_the_oracle():
    rng = np.random.default_rng(9)
    hq, hkv, seq, dim = 4, 2, 40, 128
    q = rng.standard_normal((hq, seq, dim)).astype(np.float32)
    k = rng.standard_normal((hkv, seq, dim)).astype(np.float32)
    v = rng.standard_normal((hkv, seq, dim)).astype(np.float32)
    out = attnref.splash_attention(q, k, v, mask="causal", sm_scale=0.09)
    mask = np.broadcast_to(np.tril(np.ones((seq, seq), bool)), (hq, seq, seq))
    want, _ = oracle.splash(q, k, v, mask, sm_scale=0.09)
    rtol, atol = tolerance(np.float32)
    np.testing.assert_allclose(out, want, rtol=rtol, atol=atol)
