"""vLLM's own backend selection checks as the judge of attnref's vllm.* rules.

Imports vLLM's FLASH_ATTN, TRITON_ATTN and FLASHINFER backend classes and its MLA backends
(FLASH_ATTN_MLA, FLASHMLA, CUTLASS_MLA, TRITON_MLA, FLASHINFER_MLA), tells vLLM's platform layer
that it runs on a CUDA GPU of a given compute capability (nothing here runs on a GPU: the checks
are plain Python that read the capability), and asks each backend's `validate_configuration` -
the list of reasons vLLM's selector gives when it refuses a backend - plus the plain-Python
checks the backend's implementation makes when it is built, and CUTLASS_MLA's decode asserts,
which run before its kernel is called. attnref's verdict for the same configuration
(`attnref.engines`) agrees when the rules it reports as vLLM's selector or build checks are
exactly the ones vLLM fails, each with vLLM's own text.

Rules attnref reads from the CUDA side (vLLM's FlashAttention fork's TORCH_CHECKs, the Triton
kernel's silent hazards) are outside this judge: vLLM's Python never evaluates them.

Usage: python vllm_judge.py [--examples N] [--seed S] [--markdown FILE]
(with vllm, torch and the attnref module importable; scripts/judge_engines.sh sets that up).
"""
import contextlib
import importlib
import logging
import os
import random
import sys
from importlib import metadata

import types

import attnref
from kernel_judges import judge_arguments
import torch

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")  # vLLM's notes on versions it picks

# vLLM's CUDA extensions (its op library, FlashAttention 2 and 3 of its fork) link libcuda.so.1,
# the GPU driver; on a GPU machine they load. The checks judged here never call into them, so
# empty modules stand in: vLLM then sees FA2 and FA3 as present, as on that machine (FA4 is
# Python and is found as is).
for extension in ("vllm._C_stable_libtorch", "vllm.vllm_flash_attn._vllm_fa2_C",
                  "vllm.vllm_flash_attn._vllm_fa3_C", "vllm._flashmla_C",
                  "vllm._flashmla_extension_C"):
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

    @classmethod
    def num_compute_units(cls, device_id: int = 0) -> int:
        return 132  # an H100's SMs; backends size their work queues by it


@contextlib.contextmanager
def cuda_buffers_on_meta():
    """CUTLASS_MLA's module allocates its workspace on the GPU when imported: here that buffer
    is a meta tensor (shape only), as nothing reads it."""
    empty = torch.empty

    def meta_empty(*args, device=None, **kwargs):
        return empty(*args, device="meta" if device == "cuda" else device, **kwargs)

    torch.empty = meta_empty
    try:
        yield
    finally:
        torch.empty = empty


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
from vllm.v1.attention.selector import AttentionSelectorConfig  # noqa: E402
from vllm.v1.attention.backends.flashinfer import FlashInferBackend  # noqa: E402
with cuda_buffers_on_meta():
    from vllm.v1.attention.backends.mla import cutlass_mla  # noqa: E402
from vllm.v1.attention.backends.mla.flashinfer_mla import (  # noqa: E402
    FlashInferMLABackend,
    FlashInferMLAImpl,
)
from vllm.v1.attention.backends.mla.flashattn_mla import (  # noqa: E402
    FlashAttnMLABackend,
    FlashAttnMLAImpl,
)
from vllm.v1.attention.backends.mla.flashmla import FlashMLABackend, FlashMLAImpl  # noqa: E402
from vllm.v1.attention.backends.mla.triton_mla import TritonMLABackend, TritonMLAImpl  # noqa: E402

logging.getLogger("vllm").setLevel(logging.ERROR)  # its notes on the versions it picks

# FLASHINFER takes sinks through TensorRT-LLM kernels whose cubins vLLM downloads from NVIDIA's
# artifactory; the judge answers as a machine that reaches it (this one reaches only PyPI).
vllm_flashinfer.has_nvidia_artifactory = lambda: True


BACKENDS = {
    "vllm.flash_attn": (FlashAttentionBackend, FlashAttentionImpl),
    "vllm.triton_attn": (TritonAttentionBackend, TritonAttentionImpl),
    # FlashInferImpl asks the GPU for its SM count when built: the selector alone is judged.
    "vllm.flashinfer": (FlashInferBackend, None),
    "vllm.flash_attn_mla": (FlashAttnMLABackend, FlashAttnMLAImpl),
    "vllm.flashmla": (FlashMLABackend, FlashMLAImpl),
    "vllm.cutlass_mla": (cutlass_mla.CutlassMLABackend, cutlass_mla.CutlassMLAImpl),
    "vllm.triton_mla": (TritonMLABackend, TritonMLAImpl),
    "vllm.flashinfer_mla": (FlashInferMLABackend, FlashInferMLAImpl),
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


def is_mla(config):
    """attnref states an MLA layer as its decode over the latent cache: V narrower than K."""
    return config["head_dim_v"] != config["head_dim"]


def mla_arguments(config):
    """What vLLM's MLA layer passes its implementation: the latent (head_dim_v) and its rotary
    dims (the rest of head_dim), with DeepSeek-V3's per-head dims for the rest."""
    return dict(attn_type="decoder", kv_sharing_target_layer_name=None, q_lora_rank=None,
                kv_lora_rank=config["head_dim_v"], qk_nope_head_dim=128,
                qk_rope_head_dim=config["head_dim"] - config["head_dim_v"],
                qk_head_dim=128 + config["head_dim"] - config["head_dim_v"], v_head_dim=128,
                kv_b_proj=None)


class ReachedKernel(Exception):
    """CUTLASS_MLA's decode got past its asserts to the CUDA op."""


def cutlass_decode_reasons(impl, config):
    """The asserts CUTLASS_MLA's decode makes on its tensors before calling its kernel, on CPU
    tensors of one request's shapes; [] when it reaches the kernel."""
    def reach(*args):
        raise ReachedKernel

    q = torch.float8_e4m3fn if config["kv_dtype"] == "float8_e4m3fn" else TORCH_DTYPES[
        config["dtype"]]
    heads, latent = config["num_q_heads"], config["head_dim_v"]
    page = config["page_size"]
    cutlass_mla.ops.sm100_cutlass_mla_decode = reach
    try:
        impl._sm100_cutlass_mla_decode(
            torch.zeros(1, heads, latent, dtype=q),
            torch.zeros(1, heads, config["head_dim"] - latent, dtype=q),
            torch.zeros(2, page, config["head_dim"], dtype=q),
            torch.ones(1, dtype=torch.int32), torch.zeros(1, 2, dtype=torch.int32),
            torch.zeros(1, dtype=torch.uint8), 1.0, 1)
    except AssertionError as e:
        return [str(e)]
    except ReachedKernel:
        return []
    raise AssertionError("CUTLASS_MLA's decode returned without calling its kernel")


def implementation_reasons(kernel, config):
    """What the backend's implementation raises when vLLM builds it for a layer (its __init__
    checks the configuration before any kernel runs); [] when it builds."""
    heads = config["num_q_heads"]
    if BACKENDS[kernel][1] is None:
        return []
    mla = mla_arguments(config) if BACKENDS[kernel][0].is_mla() else {}
    try:
        impl = BACKENDS[kernel][1](
            num_heads=heads,
            head_size=config["head_dim"],
            scale=config["head_dim"] ** -0.5,
            num_kv_heads=config["num_kv_heads"],
            alibi_slopes=[-1.0] * heads if config["alibi"] else None,
            sliding_window=config["sliding_window"] or None,
            kv_cache_dtype=kv_cache_dtype(config),
            logits_soft_cap=30.0 if config["soft_cap"] else None,
            **({} if mla else {"sinks": torch.zeros(heads) if config["sinks"] else None}),
            **mla,
        )
    except (AssertionError, ValueError, NotImplementedError) as e:
        return [str(e)]
    return cutlass_decode_reasons(impl, config) if kernel == "vllm.cutlass_mla" else []


def vllm_reasons(kernel, config, arch):
    """vLLM's reasons for refusing `kernel` for `config` on `arch`: its selector's list, or when
    the selector takes the backend, what building its implementation raises; [] when it runs."""
    JudgedCuda.capability = DeviceCapability(arch // 10, arch % 10)
    reasons = BACKENDS[kernel][0].validate_configuration(
        head_size=config["head_dim"],
        dtype=TORCH_DTYPES[config["dtype"]],
        kv_cache_dtype=kv_cache_dtype(config),
        block_size=config["page_size"],
        use_mla=is_mla(config),
        has_sink=config["sinks"],
        use_sparse=False,
        use_mm_prefix=False,
        use_per_head_quant_scales=False,
        device_capability=JudgedCuda.capability,
        attn_type="decoder",
        has_sliding_window=config["sliding_window"] > 0,
    )
    return list(reasons) or implementation_reasons(kernel, config)


def vllm_selection(config, arch):
    """The backend vLLM's own selector takes for the layer (its get_attn_backend_cls, with no
    backend asked for), or None when it finds none; and every backend's reasons against it."""
    JudgedCuda.capability = DeviceCapability(arch // 10, arch % 10)
    selector = AttentionSelectorConfig(
        head_size=config["head_dim"], dtype=TORCH_DTYPES[config["dtype"]],
        kv_cache_dtype=kv_cache_dtype(config), block_size=config["page_size"],
        use_mla=is_mla(config), has_sink=config["sinks"],
        has_sliding_window=config["sliding_window"] > 0)
    _, reasons = JudgedCuda.get_valid_backends(JudgedCuda.capability, selector)
    reasons = {backend.name: list(r) for backend, (_, r) in reasons.items()}
    try:
        path = JudgedCuda.get_attn_backend_cls(None, selector)
    except ValueError:  # "No valid attention backend found ..."
        return None, reasons
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name).get_name(), reasons


def selection_agrees(ours, config, arch):
    """attnref's vllm_selection against vLLM's: (the same backend, the same reasons for each
    backend attnref says vLLM passed over)."""
    selected, reasons = vllm_selection(config, arch)
    same_backend = ours["selected"] == selected
    same_reasons = all(sorted(p["reasons"]) == sorted(reasons.get(p["backend"], []))
                       for p in ours["passed_over"])
    return same_backend, same_reasons and same_backend, (selected, reasons)


def draw_layer(rng):
    """A layer with one head_dim: 1 to 8 KV heads, groups of 1 to 16, any feature."""
    kv_heads = rng.choice([1, 2, 4, 8])
    q = rng.choice(list(TORCH_DTYPES))
    return {
        "num_q_heads": kv_heads * rng.choice([1, 2, 4, 8, 16]),
        "num_kv_heads": kv_heads,
        "head_dim": (head_dim := rng.choice(HEAD_DIMS)),
        "head_dim_v": head_dim,
        "page_size": rng.choice(PAGE_SIZES),
        "dtype": q,
        "kv_dtype": rng.choice([q, q, "float8_e4m3fn", "float8_e5m2"]),
        "sliding_window": rng.choice([0, 0, 128, 4096]),
        "soft_cap": rng.random() < 0.2,
        "alibi": rng.random() < 0.1,
        "sinks": rng.random() < 0.3,
    }


def draw_mla_layer(rng):
    """An MLA layer's latent decode, mostly as DeepSeek's models have it (so that the backends'
    later checks are reached): one KV head, a latent plus rotary dims, rarely a feature."""
    q = rng.choice(["bfloat16", "bfloat16", "float16", "float32"])
    latent = rng.choice([512, 512, 512, 448, 256])
    return {
        "num_q_heads": rng.choice([8, 16, 32, 64, 128, 128, 256]),
        "num_kv_heads": 1,
        "head_dim": latent + rng.choice([64, 64, 64, 0, 32]),
        "head_dim_v": latent,
        "page_size": rng.choice([16, 24, 32, 64, 64, 128, 128, 256]),
        "dtype": q,
        "kv_dtype": rng.choice([q, q, "float8_e4m3fn", "float8_e5m2"]),
        "sliding_window": 4096 if rng.random() < 0.1 else 0,
        "soft_cap": rng.random() < 0.05,
        "alibi": rng.random() < 0.05,
        "sinks": rng.random() < 0.05,
    }


def draw_config(rng):
    """One in three layers is an MLA layer."""
    return draw_mla_layer(rng) if rng.random() < 1 / 3 else draw_layer(rng)


def attnref_answers(config, arch):
    """kernel -> (verdict, the upstream texts of its findings that reject), and attnref's
    vllm_selection."""
    answer = attnref.engines(arch=f"sm{arch}", **config)
    out = {}
    for row in answer["kernels"]:
        rejects = [f["upstream"] for f in row["findings"] if f["severity"] == "rejects"]
        out[row["kernel"]] = (row["verdict"], rejects, row.get("version", ""))
    return out, answer["vllm_selection"]


def judge(examples, seed):
    rng = random.Random(seed)
    results = {k: {"inputs": 0, "verdicts": 0, "texts": 0, "failures": []}
               for k in [*BACKENDS, SELECTION]}
    vocabulary = {k: set() for k in BACKENDS}
    for _ in range(examples):
        config = draw_config(rng)
        # The MLA backends are for sm90 and sm100 but TRITON_MLA: those are drawn more often.
        arch = rng.choice(ARCHS + [90, 100] * 2 if is_mla(config) else ARCHS)
        answers, selection = attnref_answers(config, arch)
        judge_selection(results[SELECTION], selection, config, arch)
        for kernel in BACKENDS:
            theirs = vllm_reasons(kernel, config, arch)
            vocabulary[kernel].update(v for v in theirs if stage_of(v) is None)
            r = results[kernel]
            if kernel not in answers:
                # attnref's matrix lists MLA backends for MLA layers only: vLLM must refuse the
                # layer as not MLA.
                r["inputs"] += 1
                r["verdicts"] += "non-MLA not supported" in theirs
                r["texts"] += "non-MLA not supported" in theirs
                continue
            verdict, ours, _ = answers[kernel]
            # attnref's rejections that vLLM's Python makes (the rest are CUDA-side readings), up
            # to the stage vLLM stopped at: its implementation is built only once the selector
            # agrees, and CUTLASS_MLA's decode runs only once its implementation is built.
            stop = min(stage_of(v) for v in theirs) if theirs else len(STAGES)
            judged = sorted({t for t in ours if stage_of(t) is not None and stage_of(t) <= stop})
            r["inputs"] += 1
            verdict_ok = bool(judged) == bool(theirs)
            text_ok = len(judged) == len(set(theirs)) and all(
                any(t == v or v.startswith(t) for t in judged) for v in theirs)
            r["verdicts"] += verdict_ok
            r["texts"] += text_ok
            if not (verdict_ok and text_ok) and len(r["failures"]) < 8:
                r["failures"].append((arch, config, theirs, ours))
    return results, vocabulary


SELECTION = "the backend vLLM selects"


def judge_selection(r, ours, config, arch):
    """One draw of the selection row: the backend agrees (verdicts column), and so do the
    reasons for each backend passed over (texts column)."""
    same_backend, same_reasons, theirs = selection_agrees(ours, config, arch)
    r["inputs"] += 1
    r["verdicts"] += same_backend
    r["texts"] += same_reasons
    if not same_reasons and len(r["failures"]) < 8:
        r["failures"].append((arch, config, theirs, ours))


def stage_of(text):
    """Which of vLLM's checks gives a text (exactly, or as the start of its message): an index
    into STAGES, or None for a text vLLM's Python never gives."""
    for i, (texts, prefixes) in enumerate(STAGES):
        if text in texts or any(text.startswith(p) for p in prefixes):
            return i
    return None


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
    "MLA not supported",
    "non-MLA not supported",
    "FlashMLA Dense is only supported on Hopper devices.",
    "FlashAttention MLA not supported on this device",
}
IMPLEMENTATION_TEXTS = {
    "Sinks are only supported in FlashAttention 3",
    "Encoder self-attention and encoder/decoder cross-attention are not implemented for "
    "FlashInferImpl",
    "FlashAttention does not support fp8 kv-cache on this device.",
    *(f"{impl} does not support one of the following: alibi_slopes, sliding_window, "
      "logits_soft_cap" for impl in ("FlashAttnMLAImpl", "FlashMLAImpl", "CutlassMLAImpl",
                                     "TritonMLAImpl", "FlashInferMLAImpl")),
}
IMPLEMENTATION_PREFIXES = ("FP8 KV cache is not supported by the Triton attention backend",
                           "FP8 KV cache is not supported by the Triton MLA backend")
DECODE_TEXTS = {""}  # CUTLASS_MLA's decode asserts its head dims without a message
DECODE_PREFIXES = ("H must be <= 128, but got ",)
# vLLM's checks in the order it makes them: the selector, building the implementation, and
# CUTLASS_MLA's decode.
STAGES = [(SELECTOR_TEXTS, ()), (IMPLEMENTATION_TEXTS, IMPLEMENTATION_PREFIXES),
          (DECODE_TEXTS, DECODE_PREFIXES)]


def markdown_report(table, args, version):
    """The engines section of docs/conformance.md: what was judged, how, and the agreement."""
    versions = ", ".join(f"{p} {metadata.version(p)}" for p in ("vllm", "torch"))
    return f"""# Conformance with the engines

Generated by `scripts/judge_engines.sh` (`tests/engines/vllm_judge.py --examples
{args.examples} --seed {args.seed}`); do not edit. {versions}, on the CPU.

## vLLM's own backend checks

For each drawn configuration (head_dim 16 to 640, 1 to 8 KV heads with groups of 1 to 16, pages
of 8 to 512 tokens, float16 / bfloat16 / float32, K/V in the model's dtype or fp8 e4m3 / e5m2,
sliding window, soft cap, ALiBi, sinks; or, one in three, an MLA layer's latent decode: one KV
head, 8 to 256 query heads, a latent of 256, 448 or 512 plus 0, 32 or 64 rotary dims, pages of
16 to 256, mostly without features, so that the backends' later checks are reached) on a drawn GPU
architecture (sm80, sm86, sm89, sm90, sm100, sm120), vLLM's platform layer is told it runs on a
CUDA GPU of that compute capability and each backend is asked what vLLM asks when it selects
one: `validate_configuration` (its list of reasons; `use_mla` when V is narrower than K), then,
where the selector takes it, the backend implementation's `__init__`, which raises before any
kernel runs, and for CUTLASS_MLA its decode's asserts on CPU tensors of the layer's shapes (the
CUDA op they guard is not called). attnref's verdict agrees when the rules it reports from vLLM's
Python are exactly the ones vLLM fails; its text agrees when each carries vLLM's reason (vLLM's
FP8 messages for the Triton backends go on to name the GPU; attnref's text is their start).

{chr(10).join(table)}

The last row is attnref's `vllm_selection` against vLLM's own selector (`CudaPlatform.
get_attn_backend_cls` with no backend asked for): the backend it takes, or none (verdicts), and
the selector's reasons for every backend attnref says vLLM passed over (texts).

Judged by running vLLM: the rules of `vllm.flash_attn`, `vllm.triton_attn`, `vllm.flashinfer`,
`vllm.flash_attn_mla`, `vllm.flashmla`, `vllm.cutlass_mla`, `vllm.triton_mla` and
`vllm.flashinfer_mla` whose source is vLLM 0.33.0's Python (`docs/engines.md` lists them); for
`vllm.flashinfer` the selector only (its implementation's encoder check is read). FLASHMLA's
availability check is answered as on a machine with vLLM's wheel (its FlashMLA extensions
stubbed like the others). FLASHINFER_MLA's check of the model's qk_nope_head_dim (64, 128 or
192) reads the model's config, which attnref's configuration does not carry: it is neither
modelled nor drawn. FLASHINFER's sinks are answered as on a machine that reaches NVIDIA's
artifactory, where vLLM downloads the TensorRT-LLM kernels they run on.

Run below: vLLM's and SGLang's Triton kernels, which Triton's interpreter runs on the CPU, for
attnref's numbers and their silent hazards, and FlashAttention-4's and FlashInfer's own checks.
Read, not run: the CUDA-side rules (the FlashAttention fork's sink limits, the paged_attention
kernels' dispatch), the other silent hazards, FlashInfer's rules but those its Python decides,
and every FlashAttention-2/3 and FlashMLA rule; those checks fire only inside CUDA code, which
no CPU runs.

vLLM's CUDA extensions (its op library, FlashAttention 2 and 3, FlashMLA) load only with a GPU
driver; the judge stands empty modules in for them, so vLLM sees them as present, as on a GPU
machine with vLLM's wheel. FA4 is Python and is found as shipped. CUTLASS_MLA's module
allocates a GPU workspace when imported; the judge makes it a shape-only (meta) tensor, and
answers the GPU's SM count as an H100's (132).
"""


def main():
    args = judge_arguments(__doc__, 2000)
    with set_current_vllm_config(VllmConfig()):  # vLLM's defaults, as `vllm serve` starts with
        results, vocabulary = judge(args.examples, args.seed)
    version = metadata.version("vllm")
    lines = [f"| vLLM {version} backend | inputs | verdicts agree | texts agree |",
             "|---|---|---|---|"]
    ok = True
    for kernel, r in results.items():
        name = kernel if kernel == SELECTION else f"`{kernel}`"
        lines.append(f"| {name} | {r['inputs']} | {r['verdicts']}/{r['inputs']} | "
                     f"{r['texts']}/{r['inputs']} |")
        unknown = vocabulary.get(kernel)
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
