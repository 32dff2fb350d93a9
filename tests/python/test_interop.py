# SPDX-License-Identifier: Apache-2.0
"""Arrays in place: strided numpy views, torch CPU tensors through __dlpack__, thread counts,
concurrent callers, and equality with attnref-run (the C++ CLI) on the same .npy files."""
import os
import subprocess
import threading

import numpy as np
import pytest

import attnref
from conftest import paged_batch, ragged_batch


def test_version():
    parts = attnref.__version__.split(".")
    assert len(parts) == 3 and all(p.isdigit() for p in parts)


def test_transposed_and_sliced_inputs_give_the_same_numbers():
    q, k, v, lengths, pi = paged_batch()
    want = attnref.paged_attention(q, k, v, lengths, pi)
    # q stored [Hq, B, D] and transposed back; K/V every other page of a wider pool; the page
    # table inside a wider table; lengths a strided slice.
    q_t = np.ascontiguousarray(q.transpose(1, 0, 2)).transpose(1, 0, 2)
    wide_k = np.zeros((k.shape[0], 2 * k.shape[1]) + k.shape[2:], k.dtype)
    wide_v = np.zeros_like(wide_k)
    wide_k[:, ::2], wide_v[:, ::2] = k, v
    wide_pi = np.zeros((pi.shape[0], pi.shape[1] + 2), np.int32)
    wide_pi[:, 1:-1] = pi
    wide_len = np.zeros(2 * len(lengths), np.int32)
    wide_len[::2] = lengths
    for x in (q_t, wide_k[:, ::2], wide_pi[:, 1:-1], wide_len[::2]):
        assert not x.flags.c_contiguous
    got = attnref.paged_attention(q_t, wide_k[:, ::2], wide_v[:, ::2], wide_len[::2],
                                  wide_pi[:, 1:-1])
    np.testing.assert_array_equal(got, want)
    # Fortran order and a stride-0 broadcast are views too.
    got = attnref.paged_attention(np.asfortranarray(q), k, v, lengths, pi)
    np.testing.assert_array_equal(got, want)
    q0 = np.broadcast_to(q[:1], q.shape)
    np.testing.assert_array_equal(attnref.paged_attention(q0, k, v, lengths, pi),
                                  attnref.paged_attention(q0.copy(), k, v, lengths, pi))


def test_python_lists_are_converted():
    q, k, v, lengths, pi = paged_batch()
    got = attnref.paged_attention(q, k, v, [int(x) for x in lengths], pi.tolist())
    np.testing.assert_array_equal(got, attnref.paged_attention(q, k, v, lengths.astype(np.int64),
                                                               pi.astype(np.int64)))


def test_torch_cpu_tensors():
    torch = pytest.importorskip("torch")
    q, k, v, lengths, pi = paged_batch()
    want = attnref.paged_attention(q, k, v, lengths, pi)
    tq, tk, tv = (torch.from_numpy(x) for x in (q, k, v))
    got = attnref.paged_attention(tq, tk, tv, torch.from_numpy(lengths), torch.from_numpy(pi))
    np.testing.assert_array_equal(got, want)
    # A transposed tensor (non-contiguous strides through DLPack).
    tq_t = torch.from_numpy(np.ascontiguousarray(q.transpose(1, 0, 2))).transpose(0, 1)
    assert not tq_t.is_contiguous()
    np.testing.assert_array_equal(attnref.paged_attention(tq_t, tk, tv, lengths, pi), want)
    attnref.check_paged(tq_t, tk, tv, torch.from_numpy(lengths), torch.from_numpy(pi))
    with pytest.raises(attnref.ShapeError) as e:  # a dtype mismatch named by DLPack
        attnref.check_paged(tq.double(), tk, tv, lengths, pi)
    assert e.value.code == "dtype_not_supported"
    with pytest.raises(attnref.ShapeError) as e:
        attnref.check_paged(tq[0], tk, tv, lengths, pi)
    assert e.value.code == "rank_mismatch"
    # Splash and ragged read tensors the same way.
    rq, kv, kv_lens, rpi, cu, n = ragged_batch()
    np.testing.assert_array_equal(
        attnref.ragged_paged_attention(torch.from_numpy(rq), torch.from_numpy(kv), kv_lens, rpi, cu, n),
        attnref.ragged_paged_attention(rq, kv, kv_lens, rpi, cu, n))
    sq = np.random.default_rng(0).standard_normal((2, 6, 8)).astype(np.float32)
    np.testing.assert_array_equal(
        attnref.splash_attention(torch.from_numpy(sq), torch.from_numpy(sq), torch.from_numpy(sq),
                                 mask="causal"),
        attnref.splash_attention(sq, sq, sq, mask="causal"))


def test_tensors_on_another_device_are_refused():
    class OnCuda:
        def __dlpack_device__(self):
            return (2, 1)

        def __dlpack__(self, stream=None):
            raise AssertionError("not called")

    q, k, v, lengths, pi = paged_batch()
    with pytest.raises(attnref.ShapeError) as e:
        attnref.paged_attention(q, OnCuda(), v, lengths, pi)
    assert e.value.code == "device_not_supported"
    assert e.value.values[:2] == (2, 1) and "k_pages" in str(e.value)


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_thread_counts_agree(threads):
    q, k, v, lengths, pi = paged_batch(np.float64, batch=2, pages=12, pps=6)
    want = attnref.paged_attention(q, k, v, lengths, pi)
    got = attnref.paged_attention(q, k, v, lengths, pi, num_threads=threads)
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)
    rq, kv, kv_lens, rpi, cu, n = ragged_batch(np.float64)
    np.testing.assert_allclose(
        attnref.ragged_paged_attention(rq, kv, kv_lens, rpi, cu, n, num_threads=threads),
        attnref.ragged_paged_attention(rq, kv, kv_lens, rpi, cu, n), rtol=1e-13, atol=1e-13)
    sq = np.random.default_rng(0).standard_normal((4, 16, 8))
    np.testing.assert_allclose(
        attnref.splash_attention(sq, sq, sq, mask="causal", block_q=4, num_threads=threads),
        attnref.splash_attention(sq, sq, sq, mask="causal", block_q=4), rtol=1e-13, atol=1e-13)


def test_concurrent_callers():
    # The GIL is released while a kernel runs; callers on several Python threads each get
    # their own result.
    batches = [paged_batch(seed=s) for s in range(4)]
    want = [attnref.paged_attention(*b) for b in batches]
    got = [None] * len(batches)

    def run(i):
        for _ in range(5):
            got[i] = attnref.paged_attention(*batches[i], num_threads=2)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(batches))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


ATTNREF_RUN = os.environ.get("ATTNREF_RUN")
needs_cli = pytest.mark.skipif(not ATTNREF_RUN, reason="ATTNREF_RUN (attnref-run's path) not set")


def run_cli(*args):
    done = subprocess.run([ATTNREF_RUN, *map(str, args)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done


def bits16(x):
    """float32 -> bfloat16 bit patterns (truncated)."""
    return (x.view(np.uint32) >> 16).astype(np.uint16)


def save(tmp_path, **arrays):
    paths = {}
    for name, a in arrays.items():
        paths[name] = tmp_path / f"{name}.npy"
        np.save(paths[name], a)
    return paths


@needs_cli
def test_paged_equals_attnref_run(tmp_path):
    q, k, v, lengths, pi = paged_batch()
    p = save(tmp_path, q=q, k=k, v=v, lengths=lengths, pi=pi)
    run_cli("paged", "--q", p["q"], "--k-pages", p["k"], "--v-pages", p["v"], "--lengths",
            p["lengths"], "--page-indices", p["pi"], "--sm-scale", 0.5, "--out",
            tmp_path / "out.npy", "--lse-out", tmp_path / "lse.npy")
    out, lse = attnref.paged_attention(q, k, v, lengths, pi, sm_scale=0.5, return_lse=True)
    np.testing.assert_array_equal(out, np.load(tmp_path / "out.npy"))
    np.testing.assert_array_equal(lse, np.load(tmp_path / "lse.npy"))


@needs_cli
def test_splash_and_ragged_equal_attnref_run(tmp_path):
    rng = np.random.default_rng(9)
    q = rng.standard_normal((4, 10, 8)).astype(np.float32)
    k = rng.standard_normal((2, 12, 8)).astype(np.float32)
    p = save(tmp_path, q=q, k=k, v=k[:, ::-1].copy())
    run_cli("splash", "--q", p["q"], "--k", p["k"], "--v", p["v"], "--local", "3,none",
            "--block-q", 4, "--block-kv", 4, "--out", tmp_path / "s.npy")
    got = attnref.splash_attention(q, k, k[:, ::-1].copy(), mask=("local", 3, None), block_q=4,
                                   block_kv=4)
    np.testing.assert_array_equal(got, np.load(tmp_path / "s.npy"))
    rq, kv, kv_lens, pi, cu, n = ragged_batch()
    p = save(tmp_path, rq=rq, kv=kv, kv_lens=kv_lens, pi=pi, cu=cu, n=n)
    run_cli("ragged", "--q", p["rq"], "--kv-pages", p["kv"], "--kv-lens", p["kv_lens"],
            "--page-indices", p["pi"], "--cu-q-lens", p["cu"], "--num-seqs", p["n"],
            "--sliding-window", 4, "--out", tmp_path / "r.npy")
    got = attnref.ragged_paged_attention(rq, kv, kv_lens, pi, cu, n, sliding_window=4)
    np.testing.assert_array_equal(got, np.load(tmp_path / "r.npy"))


def test_stub_names_every_public_function():
    import ast
    import pathlib
    stub = pathlib.Path(__file__).resolve().parents[2] / "python" / "attnref.pyi"
    tree = ast.parse(stub.read_text())
    # TypedDicts (the compare_* report's and build_info()'s keys) describe dicts: they are types
    # for checkers only.
    typing_only = {n.name for n in tree.body if isinstance(n, ast.ClassDef)
                   and any(getattr(b, "id", "") == "TypedDict" for b in n.bases)}
    assert typing_only == {"BuildInfo", "Cause", "Report"}
    in_stub = {n.name for n in tree.body
               if isinstance(n, (ast.FunctionDef, ast.ClassDef))} - typing_only
    public = {n for n in dir(attnref) if not n.startswith("_")}
    assert public == in_stub
    for name in public - {"TypedArray"}:
        assert getattr(attnref, name).__doc__


def test_readme_python_quick_start_runs_as_printed():
    import pathlib
    readme = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()
    blocks = readme.split("```python\n")[1:]
    assert blocks, "README.md has no Python quick start"
    for block in blocks:
        exec(compile(block.split("```")[0], "README.md", "exec"), {})


@needs_cli
@pytest.mark.parametrize("q_dtype,pages", [("bfloat16", "float16"), ("bfloat16", "float8_e5m2"),
                                           ("float32", "float16"), ("float32", "bfloat16")])
def test_dtype_table_and_tpu_options_equal_attnref_run(tmp_path, q_dtype, pages):
    # The two front ends share one (q, K/V) table and one option set: same bits out.
    q, k, v, lengths, pi = paged_batch(batch=4)
    e5m2 = lambda x: (x.astype(np.float16).view(np.uint16) >> 8).astype(np.uint8)  # fp8 bits
    py_args, cli_opts, files = [], [], {}
    if q_dtype == "bfloat16":
        files["q"] = bits16(q)
        py_args.append(attnref.view_as(files["q"], "bfloat16"))
        cli_opts += ["--q-dtype", "bf16"]
    else:
        files["q"] = q
        py_args.append(q)
    for name, x in (("k", k), ("v", v)):
        if pages == "float16":
            files[name] = x.astype(np.float16)
            py_args.append(files[name])
        elif pages == "bfloat16":
            files[name] = bits16(x)
            py_args.append(attnref.view_as(files[name], "bfloat16"))
        else:
            files[name] = e5m2(x)
            py_args.append(attnref.view_as(files[name], pages))
    cli_opts += {"float16": [], "bfloat16": ["--kv-dtype", "bf16"],
                 "float8_e5m2": ["--kv-dtype", "e5m2"]}[pages]
    p = save(tmp_path, lengths=lengths, pi=pi, **files)
    run_cli("paged", "--q", p["q"], "--k-pages", p["k"], "--v-pages", p["v"], "--lengths",
            p["lengths"], "--page-indices", p["pi"], "--megacore-mode", "batch",
            "--round-kv-to-bf16", "--profile", "reference", *cli_opts, "--out",
            tmp_path / "out.npy", "--lse-out", tmp_path / "lse.npy")
    out, lse = attnref.paged_attention(*py_args, lengths, pi, megacore_mode="batch",
                                       round_kv_to_bf16=True, return_lse=True)
    np.testing.assert_array_equal(out, np.load(tmp_path / "out.npy"))
    np.testing.assert_array_equal(lse, np.load(tmp_path / "lse.npy"))


@needs_cli
def test_bfloat16_merge_equals_attnref_run(tmp_path):
    rng = np.random.default_rng(11)
    a, b = (bits16(rng.standard_normal((6, 2, 8)).astype(np.float32)) for _ in range(2))
    lse_a, lse_b = (rng.uniform(-2, 2, (6, 2)).astype(np.float32) for _ in range(2))
    p = save(tmp_path, a=a, b=b, la=lse_a, lb=lse_b)
    run_cli("merge", "--out-a", p["a"], "--lse-a", p["la"], "--out-b", p["b"], "--lse-b",
            p["lb"], "--state-dtype", "bf16", "--out", tmp_path / "o.npy", "--lse-out",
            tmp_path / "l.npy")
    out, lse = attnref.merge_attention_states(attnref.view_as(a, "bfloat16"), lse_a,
                                              attnref.view_as(b, "bfloat16"), lse_b)
    np.testing.assert_array_equal(out, np.load(tmp_path / "o.npy"))
    np.testing.assert_array_equal(lse, np.load(tmp_path / "l.npy"))
