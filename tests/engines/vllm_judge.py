"""vLLM's own backend selection checks as the judge of attnref's vllm.* rules.

Imports vLLM's FLASH_ATTN, TRITON_ATTN and FLASHINFER backend classes, tells vLLM's platform layer that it
runs on a CUDA GPU of a given compute capability (nothing here runs on a GPU: the checks are plain
Python that read the capability), and asks each backend's `validate_configuration` - the list of
reasons vLLM's selector gives when it refuses a backend - plus the plain-Python checks the
backend's implementation makes when it is built (FLASH_ATTN's sinks assert). attnref's verdict for
the same configuration (`attnref.engines`) agrees when the rules it reports as vLLM's selector or
build checks are exactly the ones vLLM fails, each with vLLM's own text.

Rules attnref reads from the CUDA side (vLLM's FlashAttention fork's TORCH_CHECKs, the Triton
kernel's silent hazards) are outside this judge: vLLM's Python never evaluates them.

Usage: python vllm_judge.py [--examples N] [--seed S] [--markdown FILE]
(with vllm, torch and the attnref module importable; scripts/judge_engines.sh sets that up).
"""
import argparse
import os
import random
import sys
from importlib import metadata

import types

import attnref
import torch

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # vLLM's notes on versions it picks

# vLLM's CUDA extensions (its op library, FlashAttention 2 and 3 of its fork) link libcuda.so.1,
# the GPU driver; on a GPU machine they load. The checks judged here never call into them, so
# empty modules stand in: vLLM then sees FA2 and FA3 as present, as on that machine (FA4 is
# Python and is found as is).
for extension in ("vllm._C_stable_libtorch", "vllm.vllm_flash_attn._vllm_fa2_C",
                  "vllm.vllm_flash_attn._vllm_fa3_C"):
    sys.modules[extension] = types.ModuleType(extension)

import vllm.platforms  # noqa: E402
from vllm.platforms.cuda import NonNvmlCudaPlatform  # noqa: E402
from vllm.platforms.interface import DeviceCapability  # noqa: E402


class JudgedCuda(NonNvmlCudaPlatform):
    """vLLM's CUDA platform with the compute capability set by the judge, not read from a GPU."""

    capability = DeviceCapability(9, 0)

    @classmethod
    def get_device_capability(cls, device_id: int = 0):
        return cls.capability

    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return f"a judged sm{cls.capability.to_int()} GPU"


# Before any backend module binds `current_platform`.
vllm.platforms.current_platform = JudgedCuda()

from vllm.v1.attention.backends import fa_utils  # noqa: E402
from vllm.v1.attention.backends.flash_attn import (  # noqa: E402
    FlashAttentionBackend,
    FlashAttentionImpl,
)
from vllm.v1.attention.backends.triton_attn import (  # noqa: E402
    TritonAttentionBackend,
    TritonAttentionImpl,
)
import vllm.utils.flashinfer as vllm_flashinfer  # noqa: E402
from vllm.config import VllmConfig, set_current_vllm_config  # noqa: E402
from vllm.v1.attention.backends.flashinfer import FlashInferBackend  # noqa: E402

# FLASHINFER takes sinks through TensorRT-LLM kernels whose cubins vLLM downloads from NVIDIA's
# artifactory; the judge answers as a machine that reaches it (this one reaches only PyPI).
vllm_flashinfer.has_nvidia_artifactory = lambda: True


BACKENDS = {
    "vllm.flash_attn": (FlashAttentionBackend, FlashAttentionImpl),
    "vllm.triton_attn": (TritonAttentionBackend, TritonAttentionImpl),
    # FlashInferImpl asks the GPU for its SM count when built: the selector alone is judged.
    "vllm.flashinfer": (FlashInferBackend, None),
}
ARCHS = [80, 86, 89, 90, 100, 120]
TORCH_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
# attnref's K/V dtype -> vLLM's kv_cache_dtype, given the query's dtype.
KV_CACHE_DTYPES = {"float8_e4m3fn": "fp8", "float8_e5m2": "fp8_e5m2"}
HEAD_DIMS = [16, 24, 32, 40, 48, 64, 72, 80, 96, 100, 112, 120, 128, 160, 192, 224, 256, 288,
             320, 384, 512, 576, 640]
PAGE_SIZES = [8, 16, 24, 32, 48, 64, 128, 256, 512]


def kv_cache_dtype(config):
    q, kv = config["dtype"], config["kv_dtype"]
    return "auto" if kv == q else KV_CACHE_DTYPES[kv]


def implementation_reasons(kernel, config):
    """What the backend's implementation raises when vLLM builds it for a layer (its __init__
    checks the configuration before any kernel runs); [] when it builds."""
    heads = config["num_q_heads"]
    if BACKENDS[kernel][1] is None:
        return []
    try:
        BACKENDS[kernel][1](
            num_heads=heads,
            head_size=config["head_dim"],
            scale=config["head_dim"] ** -0.5,
            num_kv_heads=config["num_kv_heads"],
            alibi_slopes=[-1.0] * heads if config["alibi"] else None,
            sliding_window=config["sliding_window"] or None,
            kv_cache_dtype=kv_cache_dtype(config),
            logits_soft_cap=30.0 if config["soft_cap"] else None,
            sinks=torch.zeros(heads) if config["sinks"] else None,
        )
    except (AssertionError, ValueError, NotImplementedError) as e:
        return [str(e)]
    return []


def vllm_reasons(kernel, config, arch):
    """vLLM's reasons for refusing `kernel` for `config` on `arch`: its selector's list, or when
    the selector takes the backend, what building its implementation raises; [] when it runs."""
    JudgedCuda.capability = DeviceCapability(arch // 10, arch % 10)
    reasons = BACKENDS[kernel][0].validate_configuration(
        head_size=config["head_dim"],
        dtype=TORCH_DTYPES[config["dtype"]],
        kv_cache_dtype=kv_cache_dtype(config),
        block_size=config["page_size"],
        use_mla=False,
        has_sink=config["sinks"],
        use_sparse=False,
        use_mm_prefix=False,
        use_per_head_quant_scales=False,
        device_capability=JudgedCuda.capability,
        attn_type="decoder",
        has_sliding_window=config["sliding_window"] > 0,
    )
    return list(reasons) or implementation_reasons(kernel, config)


def draw_config(rng):
    q = rng.choice(list(TORCH_DTYPES))
    kv = rng.choice([q, q, "float8_e4m3fn", "float8_e5m2"])
    kv_heads = rng.choice([1, 2, 4, 8])
    return {
        "num_q_heads": kv_heads * rng.choice([1, 2, 4, 8, 16]),
        "num_kv_heads": kv_heads,
        "head_dim": rng.choice(HEAD_DIMS),
        "page_size": rng.choice(PAGE_SIZES),
        "dtype": q,
        "kv_dtype": kv,
        "sliding_window": rng.choice([0, 0, 128, 4096]),
        "soft_cap": rng.random() < 0.2,
        "alibi": rng.random() < 0.1,
        "sinks": rng.random() < 0.3,
    }


def attnref_answers(config, arch):
    """kernel -> (verdict, the upstream texts of its findings that reject)."""
    answer = attnref.engines(arch=f"sm{arch}", **config)
    out = {}
    for row in answer["kernels"]:
        rejects = [f["upstream"] for f in row["findings"] if f["severity"] == "rejects"]
        out[row["kernel"]] = (row["verdict"], rejects, row.get("version", ""))
    return out


def judge(examples, seed):
    rng = random.Random(seed)
    results = {k: {"inputs": 0, "verdicts": 0, "texts": 0, "failures": []} for k in BACKENDS}
    vocabulary = {k: set() for k in BACKENDS}
    for _ in range(examples):
        config = draw_config(rng)
        arch = rng.choice(ARCHS)
        answers = attnref_answers(config, arch)
        for kernel in BACKENDS:
            theirs = vllm_reasons(kernel, config, arch)
            vocabulary[kernel].update(v for v in theirs if not is_judged(v))
            verdict, ours, _ = answers[kernel]
            # attnref's rejections that vLLM's Python makes (the rest are CUDA-side readings), at
            # the stage vLLM stopped: its implementation is built only once the selector agrees.
            selector_stage = any(v in SELECTOR_TEXTS for v in theirs)
            judged = sorted({t for t in ours if is_judged(t) and
                             (t in SELECTOR_TEXTS or not selector_stage)})
            r = results[kernel]
            r["inputs"] += 1
            verdict_ok = bool(judged) == bool(theirs)
            text_ok = len(judged) == len(set(theirs)) and all(
                any(t == v or v.startswith(t) for t in judged) for v in theirs)
            r["verdicts"] += verdict_ok
            r["texts"] += text_ok
            if not (verdict_ok and text_ok) and len(r["failures"]) < 8:
                r["failures"].append((arch, config, theirs, ours))
    return results, vocabulary


def is_judged(text):
    """Whether a text is one vLLM's Python gives (exactly, or as the start of its message)."""
    return (text in SELECTOR_TEXTS or text in IMPLEMENTATION_TEXTS or
            any(text.startswith(p) for p in IMPLEMENTATION_PREFIXES))


# Every reason validate_configuration and the implementations above give for the backends
# at vLLM 0.33.0 (the judge fails if vLLM gives one outside these).
SELECTOR_TEXTS = {
    "head_size not supported",
    "dtype not supported",
    "kv_cache_dtype not supported",
    "block_size not supported",
    "attention sinks not supported",
    "compute capability not supported",
    "sliding window not supported",
    "sink not supported on compute capability < 9.0",
    "FP8 KV cache requires FA3 on SM90, FA4 with head_size=512 on SM90, or FA4 on SM100",
}
IMPLEMENTATION_TEXTS = {
    "Sinks are only supported in FlashAttention 3",
    "Encoder self-attention and encoder/decoder cross-attention are not implemented for "
    "FlashInferImpl",
    "FlashAttention does not support fp8 kv-cache on this device.",
}
IMPLEMENTATION_PREFIXES = ("FP8 KV cache is not supported by the Triton attention backend",)


def markdown_report(table, args, version):
    """docs/conformance-engines.md: what was judged, how, and the agreement."""
    versions = ", ".join(f"{p} {metadata.version(p)}" for p in ("vllm", "torch"))
    return f"""# Conformance with the engines

Generated by `scripts/judge_engines.sh` (`tests/engines/vllm_judge.py --examples
{args.examples} --seed {args.seed}`); do not edit. {versions}, on the CPU.

## vLLM's own backend checks

For each drawn configuration (head_dim 16 to 640, 1 to 8 KV heads with groups of 1 to 16, pages
of 8 to 512 tokens, float16 / bfloat16 / float32, K/V in the model's dtype or fp8 e4m3 / e5m2,
sliding window, soft cap, ALiBi, sinks) on a drawn GPU architecture (sm80, sm86, sm89, sm90,
sm100, sm120), vLLM's platform layer is told it runs on a CUDA GPU of that compute capability and
each backend is asked what vLLM asks when it selects one: `validate_configuration` (its list of
reasons), then, where the selector takes it, the backend implementation's `__init__`, which
raises before any kernel runs. attnref's verdict agrees when the rules it reports from vLLM's
Python are exactly the ones vLLM fails; its text agrees when each carries vLLM's reason (vLLM's
FP8 message for the Triton backend goes on to name the GPU; attnref's text is its start).

{chr(10).join(table)}

Judged by running vLLM: the `vllm.flash_attn`, `vllm.triton_attn` and `vllm.flashinfer` rules
whose source is vLLM 0.33.0's Python (`docs/engines.md` lists them); for `vllm.flashinfer` the
selector only (its implementation asks the GPU for its SM count when it is built, so its
encoder check is read). FLASHINFER's sinks are answered as on a machine that reaches NVIDIA's
artifactory, where vLLM downloads the TensorRT-LLM kernels they run on. Read, not run: the CUDA-side rules (the
FlashAttention fork's sink limits, the paged_attention kernels' dispatch), the silent hazards,
and every FlashInfer, FlashAttention-2/3 and FlashMLA rule; those checks fire only inside CUDA
code, which no CPU runs.

vLLM's CUDA extensions (its op library, FlashAttention 2 and 3) load only with a GPU driver;
the judge stands empty modules in for them, so vLLM sees FA2 and FA3 as present, as on a GPU
machine with vLLM's wheel. FA4 is Python and is found as shipped.
"""


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--markdown", help="write the result table to this file")
    args = parser.parse_args()
    with set_current_vllm_config(VllmConfig()):  # vLLM's defaults, as `vllm serve` starts with
        results, vocabulary = judge(args.examples, args.seed)
    version = metadata.version("vllm")
    lines = [f"| vLLM {version} backend | inputs | verdicts agree | texts agree |",
             "|---|---|---|---|"]
    ok = True
    for kernel, r in results.items():
        lines.append(f"| `{kernel}` | {r['inputs']} | {r['verdicts']}/{r['inputs']} | "
                     f"{r['texts']}/{r['inputs']} |")
        unknown = vocabulary[kernel]
        if unknown:
            ok = False
            print(f"{kernel}: vLLM gave reasons outside the judged set: {sorted(unknown)}")
        for arch, config, theirs, ours in r["failures"]:
            ok = False
            print(f"{kernel} sm{arch} {config}\n    vLLM: {theirs}\n    attnref: {ours}")
    print("\n".join(lines))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown_report(lines, args, version))
    ok = ok and all(r["verdicts"] == r["texts"] == r["inputs"] for r in results.values())
    print(f"vllm judge: {'agree' if ok else 'DISAGREE'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
