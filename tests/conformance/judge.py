# SPDX-License-Identifier: Apache-2.0
"""Runs one input through JAX's public entry point (on the CPU, TPU interpret mode) and through
attnref's module under profile="jax", and reduces each to a Verdict."""
import contextlib
import dataclasses
import json
import os
import re
import subprocess

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu.paged_attention import paged_attention
from jax.experimental.pallas.ops.tpu.paged_attention.quantization_utils import QuantizedTensor
from jax.experimental.pallas.ops.tpu.ragged_paged_attention import kernel as ragged_kernel
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as splash
from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks

import attnref


@dataclasses.dataclass
class Verdict:
    accepted: bool
    kind: str = ""  # exception type, e.g. "ValueError", "ShapeError"
    check: str = ""  # attnref's JAX check id ("" for JAX, which has none)
    code: str = ""  # attnref's error code
    text: str = ""  # the exception's text (attnref: its message)

    def __str__(self):
        if self.accepted:
            return "accepted"
        tag = "/".join(x for x in (self.kind, self.code, self.check) if x)
        return f"{tag}: {self.text}"


def _verdict_of_exception(e: BaseException) -> Verdict:
    if isinstance(e, attnref.ShapeError):
        return Verdict(False, "ShapeError", e.jax_check, e.code, e.message)
    return Verdict(False, type(e).__name__, text=str(e).split("\n")[0])


def judge(fn) -> Verdict:
    """Calls fn and records accepted or the exception (any Exception: JAX's bare asserts too)."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the verdict is the exception, whatever it is
        return _verdict_of_exception(e)
    return Verdict(True)


# Python renders some values in JAX's f-strings with repr; attnref prints plain numbers. These
# rules turn JAX's rendering into attnref's before the containment test (docs/conformance.md).
_REPR_RULES = [
    (re.compile(r"np\.(?:int|uint|float)\d+\(([^)]*)\)"), r"\1"),  # np.int32(3) -> 3
    (re.compile(r"Array\(([^,]*), dtype=\w+\)"), r"\1"),  # Array(3, dtype=int32) -> 3
    (re.compile(r"dtype\('(\w+)'\)"), r"\1"),  # dtype('int64') -> int64
]


def normalize_jax_text(text: str) -> str:
    for pattern, replacement in _REPR_RULES:
        text = pattern.sub(replacement, text)
    return text


def text_agrees(jax_text: str, attnref_message: str) -> bool:
    """JAX's text, as JAX renders it or with plain values for its reprs, is in attnref's."""
    return jax_text in attnref_message or normalize_jax_text(jax_text) in attnref_message


def record(**fields):
    """Appends one result to $ATTNREF_CONFORMANCE_RECORD (JSON lines) when it is set; the
    report (report.py) is made from these lines."""
    path = os.environ.get("ATTNREF_CONFORMANCE_RECORD")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(fields) + "\n")


@contextlib.contextmanager
def interpret():
    with pltpu.force_tpu_interpret_mode():
        yield


# ---------------------------------------------------------------------------------------------
# Paged attention. An input is a dict: q, k_pages, v_pages, lengths, page_indices (numpy),
# k_scales, v_scales (int8 pages), and the options below.
PAGED_OPTIONS = ("pages_per_compute_block", "megacore_mode", "soft_cap", "mask_value")


def paged_jax(x: dict, run: bool = False):
    """JAX's paged_attention on x; traces only (eval_shape) unless run."""
    k, v = x["k_pages"], x["v_pages"]
    if x.get("k_scales") is not None:
        k = QuantizedTensor(jnp.asarray(k), jnp.asarray(x["k_scales"]))
        v = QuantizedTensor(jnp.asarray(v), jnp.asarray(x["v_scales"]))
    # A megacore split waits for a second core that interpret mode does not simulate (the call
    # hangs); it has no numerical effect, so runs leave it out and traces keep it (P8, P9).
    kwargs = dict(pages_per_compute_block=x.get("pages_per_compute_block", 1),
                  megacore_mode=None if run else x.get("megacore_mode"),
                  attn_logits_soft_cap=x.get("soft_cap"))
    if x.get("mask_value") is not None:
        kwargs["mask_value"] = x["mask_value"]
    call = lambda q, k, v, lens, pi: paged_attention(q, k, v, lens, pi, **kwargs)  # noqa: E731
    args = (x["q"], k, v, x["lengths"], x["page_indices"])
    with interpret():
        if not run:
            return jax.eval_shape(call, *args)
        return np.asarray(jax.block_until_ready(call(*args)))


def paged_attnref_args(x: dict):
    opts = {"sm_scale": 1.0}
    if "pages_per_compute_block" in x:
        opts["pages_per_compute_block"] = x["pages_per_compute_block"]
    for name in ("megacore_mode", "soft_cap", "mask_value", "k_scales", "v_scales"):
        if x.get(name) is not None:
            opts[name] = x[name]
    return (x["q"], x["k_pages"], x["v_pages"], x["lengths"], x["page_indices"]), opts


def paged_attnref_check(x: dict):
    args, opts = paged_attnref_args(x)
    attnref.check_paged(*args, profile="jax", **opts)


# ---------------------------------------------------------------------------------------------
# Ragged paged attention: q, kv_pages (JAX's combined pool), kv_lens, page_indices, cu_q_lens,
# num_seqs, and the options below. JAX's entry point runs only the static checks; its dynamic
# ones (R15..R18) are dynamic_validate_inputs, which a caller runs first: the verdict runs both.
RAGGED_OPTIONS = ("sm_scale", "sliding_window", "soft_cap", "mask_value", "k_scale", "v_scale",
                  "num_kv_pages_per_block", "num_queries_per_block", "vmem_limit_bytes")


def ragged_jax(x: dict, run: bool = False):
    args = tuple(x[n] for n in ("q", "kv_pages", "kv_lens", "page_indices", "cu_q_lens",
                                "num_seqs"))
    opts = {n: x[n] for n in RAGGED_OPTIONS if n in x}
    ragged_kernel.dynamic_validate_inputs(*args, **opts)
    if run:
        raise NotImplementedError("JAX 0.10.2's TPU interpreter cannot run this kernel")
    with interpret():
        return jax.eval_shape(lambda *a: ragged_kernel.ragged_paged_attention(*a, **opts), *args)


def ragged_jax_reference(x: dict):
    """JAX's ref_ragged_paged_attention: rows of the live sequences only."""
    args = tuple(jnp.asarray(x[n]) for n in ("q", "kv_pages", "kv_lens", "page_indices",
                                             "cu_q_lens", "num_seqs"))
    opts = {n: x[n] for n in ("sm_scale", "sliding_window", "soft_cap", "mask_value",
                              "k_scale", "v_scale") if n in x}
    return np.asarray(ragged_kernel.ref_ragged_paged_attention(*args, **opts))


def ragged_attnref_args(x: dict):
    args = tuple(x[n] for n in ("q", "kv_pages", "kv_lens", "page_indices", "cu_q_lens",
                                "num_seqs"))
    return args, {n: x[n] for n in RAGGED_OPTIONS if n in x and x[n] is not None}


def ragged_attnref_check(x: dict):
    args, opts = ragged_attnref_args(x)
    attnref.check_ragged(*args, profile="jax", **opts)


# ---------------------------------------------------------------------------------------------
# Splash attention: q, k, v (k, v 2-D for MQA), mask (attnref's spec: "causal", "full",
# ("local", l, r), ("chunked", c), or a bool array [Hq or 1, Sq, Skv] / [Sq, Skv]),
# q_segment_ids, kv_segment_ids, sinks, soft_cap, mask_value, block_q, block_kv,
# block_kv_compute, backward (the backward blocks are the forward ones, as in attnref).
def _jax_head_mask(spec, shape):
    if spec is None or (isinstance(spec, str) and spec == "full"):
        return masks.FullMask(shape)
    if isinstance(spec, str) and spec == "causal":
        return masks.CausalMask(shape)
    if isinstance(spec, tuple) and spec[0] == "causal":
        return masks.CausalMask(shape, offset=spec[1])
    if isinstance(spec, tuple) and spec[0] == "local":
        return masks.LocalMask(shape, (spec[1], spec[2]), offset=spec[3] if len(spec) > 3 else 0)
    if isinstance(spec, tuple) and spec[0] == "chunked":
        return masks.ChunkedCausalMask(shape, chunk_size=spec[1])
    return masks.NumpyMask(np.asarray(spec))


def splash_jax_mask(x: dict):
    q, k = x["q"], x["k"]
    spec = x.get("mask")
    if isinstance(spec, np.ndarray) and spec.ndim != 2:
        return spec  # JAX's factory takes [H, Sq, Skv] arrays itself (and checks S2)
    shape = (q.shape[1], k.shape[-2])
    heads = spec if isinstance(spec, list) else [spec] * q.shape[0]
    return masks.MultiHeadMask([_jax_head_mask(h, shape) for h in heads])


def splash_block_sizes(x: dict, backward: bool):
    bq, bkv = x.get("block_q", 128), x.get("block_kv", 128)
    bkvc = x.get("block_kv_compute", bkv)
    if not backward:
        return splash.BlockSizes(block_q=bq, block_kv=bkv, block_kv_compute=bkvc)
    return splash.BlockSizes(block_q=bq, block_kv=bkv, block_kv_compute=bkvc, block_q_dkv=bq,
                             block_kv_dkv=bkv, block_kv_dkv_compute=bkvc, block_q_dq=bq,
                             block_kv_dq=bkv)


def splash_jax_kernel(x: dict, backward: bool, save_residuals: bool = False):
    make = splash.make_splash_mqa if x["k"].ndim == 2 else splash.make_splash_mha
    kwargs = dict(block_sizes=splash_block_sizes(x, backward), head_shards=1, q_seq_shards=1,
                  attn_logits_soft_cap=x.get("soft_cap"), interpret=True,
                  save_residuals=save_residuals)
    if x.get("mask_value") is not None:
        kwargs["mask_value"] = x["mask_value"]
    return make(splash_jax_mask(x), **kwargs)


def splash_jax_call(x: dict, kernel):
    seg = None
    if x.get("q_segment_ids") is not None or x.get("kv_segment_ids") is not None:
        seg = splash.SegmentIds(q=jnp.asarray(x["q_segment_ids"]),
                                kv=jnp.asarray(x["kv_segment_ids"]))
    sinks = None if x.get("sinks") is None else jnp.asarray(x["sinks"])
    return lambda q, k, v: kernel(q, k, v, segment_ids=seg, sinks=sinks)


def splash_jax(x: dict):
    """Builds JAX's kernel (MaskInfo checks) and traces the forward, or the VJP if backward."""
    backward = x.get("backward", False)
    fn = splash_jax_call(x, splash_jax_kernel(x, backward))
    q, k, v = (jnp.asarray(x[n]) for n in ("q", "k", "v"))
    if not backward:
        return jax.eval_shape(fn, q, k, v)

    def backward_pass(q, k, v):
        return jax.vjp(fn, q, k, v)[1](jnp.ones(q.shape[:2] + v.shape[-1:], q.dtype))

    return jax.eval_shape(backward_pass, q, k, v)


SPLASH_OPTIONS = ("mask", "q_segment_ids", "kv_segment_ids", "sinks", "soft_cap",
                  "mask_value", "block_q", "block_kv", "block_kv_compute")


def splash_attnref_opts(x: dict):
    return {n: x[n] for n in SPLASH_OPTIONS if x.get(n) is not None}


def splash_attnref_check(x: dict):
    attnref.check_splash(x["q"], x["k"], x["v"], profile="jax",
                         backward=x.get("backward", False), **splash_attnref_opts(x))


FAMILIES = {
    "paged": (paged_jax, paged_attnref_check),
    "ragged": (ragged_jax, ragged_attnref_check),
    "splash": (splash_jax, splash_attnref_check),
}


def verdicts(family: str, x: dict, x64: bool = False):
    """JAX's verdict (with jax_enable_x64 set to x64) and the module's."""
    jax_fn, attnref_fn = FAMILIES[family]
    with jax.enable_x64(x64):
        jax_verdict = judge(lambda: jax_fn(x))
    return jax_verdict, judge(lambda: attnref_fn(x))


# ---------------------------------------------------------------------------------------------
# attnref-run on the same input, from .npy dumps: `<family> --profile jax --check-only`.
# Exit 0 is accepted, exit 2 a rejection (`attnref: error[<code>] <message>` on stderr, then
# `JAX check <id>` where the rule is one of JAX's); any other exit is a failure of the CLI.
_CLI_DTYPE = {np.dtype(ml_dtypes.bfloat16): "bf16", np.dtype(ml_dtypes.float8_e4m3fn): "e4m3",
              np.dtype(ml_dtypes.float8_e5m2): "e5m2"}
_CLI_ARRAYS = {
    "paged": ("q", "k_pages", "v_pages", "lengths", "page_indices", "k_scales", "v_scales"),
    "ragged": ("q", "kv_pages", "kv_lens", "page_indices", "cu_q_lens", "num_seqs"),
    "splash": ("q", "k", "v", "q_segment_ids", "kv_segment_ids", "sinks"),
}
_CLI_SCALARS = {
    "paged": ("pages_per_compute_block", "megacore_mode", "soft_cap", "mask_value"),
    "ragged": RAGGED_OPTIONS,
    "splash": ("soft_cap", "mask_value", "block_q", "block_kv", "block_kv_compute"),
}
_CLI_Q = {"paged": ("q",), "ragged": ("q",), "splash": ("q", "dout")}
_CLI_KV = {"paged": ("k_pages", "v_pages"), "ragged": ("kv_pages",), "splash": ("k", "v")}


def _cli_mask(x: dict, folder):
    """The splash mask as attnref-run's options, or None when the CLI has no spelling for it."""
    spec = x.get("mask")
    if spec is None or (isinstance(spec, str) and spec == "full"):
        return []
    if isinstance(spec, str) and spec == "causal":
        return ["--causal"]
    if isinstance(spec, tuple) and spec[0] == "local" and len(spec) == 3:
        return ["--local", f"{spec[1]},{spec[2]}"]
    if isinstance(spec, tuple) and spec[0] == "chunked":
        return ["--chunked", str(spec[1])]
    if isinstance(spec, np.ndarray):
        np.save(folder / "mask.npy", spec)
        return ["--mask", str(folder / "mask.npy")]
    return None


def _raw_dtype_option(x: dict, names, option):
    """[option, spelling] for arrays of raw bf16/fp8 codes, [] for none, None when the names
    mix dtypes one option cannot spell (a raw and another dtype)."""
    dtypes = {np.asarray(x[n]).dtype for n in names if x.get(n) is not None}
    spelled = {_CLI_DTYPE.get(d) for d in dtypes}
    if spelled == {None}:
        return []
    return [option, spelled.pop()] if len(dtypes) == 1 else None


def cli_argv(family: str, x: dict, folder):
    """attnref-run's argv for x (files written to folder), or None when x has no CLI spelling:
    a Python value where an array goes, raw bf16/fp8 codes beside another dtype under one
    dtype option, or raw codes in an array no dtype option names (scales, sinks)."""
    backward = family == "splash" and x.get("backward")
    argv = [family, "--profile", "jax"] + ([] if backward else ["--check-only"])
    if family == "paged":
        argv += ["--sm-scale", "1"]
    for name in _CLI_ARRAYS[family]:
        if x.get(name) is None:
            continue
        if not isinstance(x[name], np.ndarray):
            return None
        in_group = name in _CLI_Q[family] or name in _CLI_KV[family]
        if not in_group and x[name].dtype in _CLI_DTYPE:
            return None
        np.save(folder / f"{name}.npy", x[name])  # Fortran order stays Fortran order
        argv += [f"--{name.replace('_', '-')}", str(folder / f"{name}.npy")]
    for group, option in ((_CLI_Q, "--q-dtype"), (_CLI_KV, "--kv-dtype")):
        spelling = _raw_dtype_option(x, group[family], option)
        if spelling is None:
            return None
        argv += spelling
    for name in _CLI_SCALARS[family]:
        value = x.get(name)
        if value is not None:
            argv += [f"--{name.replace('_', '-')}", str(value)]
    if family == "splash":
        mask = _cli_mask(x, folder)
        if mask is None:
            return None
        argv += mask
        if backward:  # --check-only takes no --dout: the backward pass runs (small inputs)
            dout = np.ones(x["q"].shape[:2] + x["v"].shape[-1:], x["q"].dtype)
            np.save(folder / "dout.npy", dout)
            argv += ["--dout", str(folder / "dout.npy")]
            for grad in ("dq", "dk", "dv"):
                argv += [f"--{grad}-out", str(folder / f"{grad}.npy")]
    return argv


def cli_verdict(cli: str, family: str, x: dict, folder) -> "Verdict | None":
    argv = cli_argv(family, x, folder)
    if argv is None:
        return None
    done = subprocess.run([cli] + argv, capture_output=True, text=True)
    if done.returncode == 0:
        return Verdict(True)
    lines = done.stderr.splitlines()
    found = re.match(r"attnref: error\[(\w+)\] (.*)", lines[0]) if lines else None
    if done.returncode != 2 or found is None:
        return Verdict(False, f"exit {done.returncode}", text=done.stderr.strip())
    checks = [m.group(1) for m in map(re.compile(r"JAX check (\w+)$").match, lines) if m]
    return Verdict(False, "ShapeError", checks[0] if checks else "", found.group(1),
                   found.group(2))
