# SPDX-License-Identifier: Apache-2.0
"""Every error code a Python caller can reach raises attnref.ShapeError with that code, the
library's message and hint; the codes it cannot reach are listed with the reason."""
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import attnref
from conftest import paged_batch, ragged_batch

ROOT = pathlib.Path(__file__).resolve().parents[2]

# Codes no Python input can produce, and why.
UNREACHABLE = {
    "negative_extent": "numpy and DLPack shapes are never negative",
    "out_of_buffer": "numpy and DLPack do not give a buffer size; views are checked otherwise",
    "overlapping_output": "the module allocates every output itself",
    "missing_backward_blocks": "the backward blocks follow the forward ones",
    "invalid_indptr": "the FlashInfer adapter is not bound",
    "invalid_last_page_len": "the FlashInfer adapter is not bound",
    "page_count_mismatch": "the FlashInfer/vLLM adapters are not bound",
    "invalid_page_stride": "the FlashInfer/vLLM adapters are not bound",
    "engine_rule": "attnref.engines returns broken engine rules as data; it never raises them",
    "invalid_convention": "conventions are enums in C++; the module takes them by name",
}


def splash_qkv(hq=4, hkv=2, sq=8, skv=8, d=8):
    rng = np.random.default_rng(0)
    return (rng.standard_normal((hq, sq, d)).astype(np.float32),
            rng.standard_normal((hkv, skv, d)).astype(np.float32),
            rng.standard_normal((hkv, skv, d)).astype(np.float32))


def paged(**changes):
    q, k, v, lengths, pi = paged_batch()
    args = dict(q=q, k_pages=k, v_pages=v, lengths=lengths, page_indices=pi)
    options = {key: changes.pop(key) for key in list(changes) if key not in args}
    args.update(changes)
    return lambda: attnref.check_paged(*args.values(), **options)


def ragged(**changes):
    q, kv, kv_lens, pi, cu, num_seqs = ragged_batch()
    args = dict(q=q, kv_pages=kv, kv_lens=kv_lens, page_indices=pi, cu_q_lens=cu,
                num_seqs=num_seqs)
    options = {key: changes.pop(key) for key in list(changes) if key not in args}
    args.update(changes)
    return lambda: attnref.check_ragged(*args.values(), **options)


def splash(**options):
    q, k, v = splash_qkv()
    for name in ("q", "k", "v"):
        if name in options:
            locals_ = {"q": q, "k": k, "v": v}
            locals_[name] = options.pop(name)
            q, k, v = locals_["q"], locals_["k"], locals_["v"]
    return lambda: attnref.check_splash(q, k, v, **options)


class FakeCudaTensor:
    """An object that says, through the DLPack protocol, that it lives on a CUDA device."""

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, stream=None):
        raise AssertionError("must not be called for a device tensor")


q32, k32, v32, lengths32, pi32 = paged_batch()
# Views numpy makes without reading memory: strides that overflow int64 (element stride 2^60
# over 9 rows), and a stride that is not a whole number of float32 elements.
huge_stride = np.lib.stride_tricks.as_strided(np.zeros(64, np.float32), shape=(9, 4, 16),
                                              strides=(2 ** 62, 0, 4))
odd_stride = np.lib.stride_tricks.as_strided(np.zeros(1024, np.float32), shape=(3, 4, 16),
                                             strides=(258, 64, 4))
qkv_s = splash_qkv()
bad_pi = pi32.copy()
bad_pi[0, 0] = 1000
long_len = lengths32.copy()
long_len[0] = 1000
nan_q = q32.copy()
nan_q[0, 0, 0] = np.nan
cu_bad = np.array([0, 3, 2, 4], np.int32)

CASES = {
    "null_data": lambda: attnref.check_paged(None, k32, v32, lengths32, pi32),
    "negative_stride": paged(q=q32[::-1]),
    "size_overflow": paged(q=huge_stride),
    "rank_mismatch": paged(q=q32[0]),
    "shape_mismatch": paged(v_pages=v32[:, :5]),
    "batch_mismatch": paged(lengths=lengths32[:2]),
    "dtype_not_supported": paged(q=q32.astype(np.int32)),
    "invalid_head_count": lambda: attnref.check_config(0, 1, 8),
    "gqa_not_divisible": paged(q=np.zeros((3, 3, 16), np.float32)),
    "head_dim_mismatch": paged(q=q32[:, :, :8]),
    "invalid_head_dim": lambda: attnref.check_config(4, 2, 0),
    "invalid_block_size": splash(block_q=0),
    "block_not_divisible": paged(pages_per_compute_block=2, profile="jax"),
    # The backward's S16: an empty q sequence under the default 128-row blocks.
    "block_too_large": lambda: attnref.check_splash(*splash_qkv(sq=0, skv=128), profile="jax",
                                                    backward=True),
    "tiling_rule": lambda: attnref.check_splash(*splash_qkv(sq=256, skv=256), block_q=256,
                                                block_kv=256, block_kv_compute=64, profile="jax"),
    "megacore_odd_kv_heads": paged(k_pages=k32[:1], v_pages=v32[:1], megacore_mode="kv_head",
                                   profile="jax"),
    "megacore_odd_batch": paged(megacore_mode="batch", profile="jax"),
    "invalid_megacore_mode": paged(megacore_mode="core"),
    "invalid_page_size": paged(k_pages=k32[:, :, :0], v_pages=v32[:, :, :0]),
    "page_index_out_of_range": paged(page_indices=bad_pi),
    "length_out_of_range": paged(lengths=long_len),
    "page_table_too_narrow": ragged(page_indices=ragged_batch()[3][:, :1].copy()),
    "invalid_cu_q_lens": ragged(cu_q_lens=cu_bad),
    "num_seqs_out_of_range": ragged(num_seqs=7),
    "token_budget_exceeded": ragged(q=ragged_batch()[0][:3]),
    "query_longer_than_kv": ragged(kv_lens=np.array([2, 9, 0], np.int32)),
    "invalid_soft_cap": paged(soft_cap=0.0),
    "invalid_mask_value": paged(mask_value=1.0),
    "invalid_scale": paged(sm_scale=float("nan")),
    "invalid_sliding_window": ragged(sliding_window=0),
    "quantization_mismatch": paged(k_pages=k32.astype(np.int8)),
    "scales_shape": paged(k_pages=k32.astype(np.int8), v_pages=v32.astype(np.int8),
                          k_scales=np.ones((2, 7, 4, 3), np.float32),
                          v_scales=np.ones((2, 7, 4, 1), np.float32)),
    "mask_shape": splash(mask=np.ones((1, 8, 7), bool)),
    "mask_head_count": splash(mask=np.ones((3, 8, 8), bool)),
    "segment_ids_shape": splash(q_segment_ids=np.zeros(7, np.int32),
                                kv_segment_ids=np.zeros(8, np.int32)),
    "sinks_shape": splash(sinks=np.zeros(3, np.float32)),
    "alibi_slopes_shape": paged(alibi_slopes=np.zeros(3, np.float32)),
    "invalid_alibi_slope": ragged(alibi_slopes=np.array([0.5, np.inf, 0.1, 0.2])),
    "option_not_in_jax": paged(alibi_slopes=np.full(4, 0.5, np.float32), profile="jax"),
    "invalid_mask_parameter": splash(mask=("chunked", 0)),
    "device_not_supported": paged(q=FakeCudaTensor()),
    "misaligned_offset": paged(q=odd_stride),
    "non_finite_data": paged(q=nan_q, tiers=("shape", "metadata", "data")),
    "bad_file": lambda: attnref.engines({"num_attention_heads": 32, "head_dim": 128}),
    "unknown_engine_target": lambda: attnref.engines(num_q_heads=32, num_kv_heads=8,
                                                     head_dim=128, arch="sm75"),
}


def all_codes():
    """The snake_case names of every ErrorCode, read from the C++ source."""
    text = (ROOT / "include/attnref/core/status.hpp").read_text()
    return set(re.findall(r'\{ErrorCode::k\w+, "([a-z0-9_]+)"\}', text)) - {"ok"}


def test_every_code_is_reached_or_listed():
    codes = all_codes()
    assert len(codes) > 40
    assert set(CASES) | set(UNREACHABLE) == codes
    assert not set(CASES) & set(UNREACHABLE)


@pytest.mark.parametrize("code", sorted(CASES))
def test_code_is_raised(code):
    with pytest.raises(attnref.ShapeError) as e:
        CASES[code]()
    err = e.value
    assert err.code == code, str(err)
    assert isinstance(err, ValueError)
    assert str(err).startswith(f"error[{code}] " + err.message)
    if err.hint:
        assert str(err).endswith(f" (hint: {err.hint})")
    assert len(err.values) == 8 and len(err.reals) == 2


def test_jax_ids_and_values():
    with pytest.raises(attnref.ShapeError) as e:
        paged(lengths=lengths32[:2])()
    assert e.value.jax_check == "P5"
    with pytest.raises(attnref.ShapeError) as e:
        paged(page_indices=bad_pi)()
    assert e.value.field == "" or isinstance(e.value.field, str)
    with pytest.raises(attnref.ShapeError) as e:
        paged(soft_cap=0.0)()
    assert e.value.reals[0] == 0.0 and e.value.field == "soft_cap"


def test_options_and_usage_errors():
    q, k, v, lengths, pi = paged_batch()
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        attnref.paged_attention(q, k, v, lengths, pi, bogus=1)
    with pytest.raises(TypeError):
        attnref.paged_attention(q, k, v, lengths, pi, sm_scale="big")
    with pytest.raises(ValueError, match="profile"):
        attnref.check_paged(q, k, v, lengths, pi, profile="tpu")
    with pytest.raises(ValueError, match="kv_layout"):
        attnref.paged_attention(q, k, v, lengths, pi, kv_layout="xyz")
    with pytest.raises(ValueError, match="float32 range"):
        attnref.paged_attention(q, k, v, lengths, pi, soft_cap=1e39)
    with pytest.raises(ValueError, match="num_threads"):
        attnref.paged_attention(q, k, v, lengths, pi, num_threads=0)
    with pytest.raises(ValueError, match="mask"):
        attnref.splash_attention(*splash_qkv(), mask="sideways")
    with pytest.raises(ValueError, match="view_as"):
        attnref.view_as(np.zeros(3, np.uint16), "float7")
    with pytest.raises(attnref.ShapeError) as e:
        attnref.paged_attention(q, attnref.view_as(k, "bfloat16"), v, lengths, pi)
    assert e.value.code == "dtype_not_supported"


def test_index_dtypes_come_after_jax_shape_checks():
    # JAX reports P2 (heads) before P7 (lengths int32), R3 (kv_lens extent) before R5 (int32
    # metadata) and R5 before R6 (heads).
    q, k, v, lengths, pi = paged_batch()
    with pytest.raises(attnref.ShapeError) as e:
        attnref.check_paged(q[:, :3], k, v, lengths.astype(np.int64), pi.astype(np.int64),
                            profile="jax")
    assert e.value.jax_check == "P2"
    with pytest.raises(attnref.ShapeError) as e:
        attnref.check_paged(q, k, v, lengths.astype(np.int64), pi.astype(np.int64),
                            profile="jax")
    assert e.value.jax_check == "P7"
    rq, kv, kv_lens, rpi, cu, n = ragged_batch()
    wide = [x.astype(np.int64) for x in (kv_lens, rpi, cu)]
    with pytest.raises(attnref.ShapeError) as e:
        attnref.check_ragged(rq, kv, wide[0][:2], *wide[1:], n, profile="jax")
    assert e.value.jax_check == "R3"
    with pytest.raises(attnref.ShapeError) as e:
        attnref.check_ragged(rq[:, :3], kv, *wide, n, profile="jax")
    assert e.value.jax_check == "R5"
    with pytest.raises(attnref.ShapeError) as e:
        attnref.check_ragged(rq, kv, *wide, n, profile="jax")
    assert e.value.jax_check == "R5"
    with pytest.raises(attnref.ShapeError) as e:  # mixed dtypes: reference profile too
        attnref.ragged_paged_attention(rq, kv, kv_lens, rpi.astype(np.int64), cu, n)
    assert e.value.code == "dtype_not_supported"


# In a child whose address space is capped a little above what it uses, 1024 thread stacks do
# not fit: the call must raise and leave the module usable, not hang (a pool the system refused
# used to hang destroying its condition variable). Not under the ASan run, whose runtime reserves
# terabytes of address space.
POOL_REFUSED = """
import resource, numpy as np, attnref
from conftest import paged_batch
q, k, v, lengths, pi = paged_batch()
used = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1]) * 1024
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
resource.setrlimit(resource.RLIMIT_AS, (used + (64 << 20), hard))
try:
    attnref.paged_attention(q, k, v, lengths, pi, num_threads=1024)
    print("no error")
except RuntimeError as e:
    print(e)
resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
expected = attnref.paged_attention(q, k, v, lengths, pi)
print("again equal:", np.array_equal(attnref.paged_attention(q, k, v, lengths, pi, num_threads=2),
                                     expected))
"""


@pytest.mark.skipif("asan" in os.environ.get("LD_PRELOAD", ""), reason="ASan reserves the space")
def test_a_thread_pool_the_system_refuses_raises_instead_of_hanging():
    done = subprocess.run([sys.executable, "-c", POOL_REFUSED], capture_output=True, text=True,
                          timeout=60, cwd=pathlib.Path(__file__).parent)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert re.fullmatch(r"attnref::ThreadPoolExecutor\(1024\): the system started \d+ of its 1023 "
                        r"worker threads; ask for fewer threads: .+", lines[0]), lines
    assert lines[1] == "again equal: True"
