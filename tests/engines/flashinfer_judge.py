"""FlashInfer's own Python checks as the judge of attnref's flashinfer.prefill rules.

FlashInfer builds each prefill kernel on first use (JIT): Python picks the backend and writes
the module's sources and nvcc flags, and only then does nvcc run. What it refuses before nvcc is
judged here, for a drawn configuration on a drawn GPU, by calling FlashInfer itself with nothing
compiled: `gen_batch_prefill_module` (which asserts the fa2 kernels take no fp8 query, and picks
the GPU architectures a head dim above 256 may be built for, raising when the GPU is not one of
them) with the target architecture as the only one to build for, and
`determine_attention_backend` (backend="auto": whether fa3 runs or FlashInfer falls back to fa2)
with the GPU's compute capability. attnref agrees when the rules it reports from these checks
are exactly the ones FlashInfer fails, each with FlashInfer's text.

The fa2 and fa3 rules that fire inside CUDA code (the planner's head check, the kernel traits'
register budget, static_asserts, the silent hazards) are outside this judge.

Usage: python flashinfer_judge.py [--examples N] [--seed S] [--markdown FILE]
(with flashinfer-python, torch and the attnref module importable; scripts/judge_engines.sh).
"""
import atexit
import os
import random
import shutil
import sys
import tempfile
from importlib import metadata

import attnref
import torch
from kernel_judges import judge_arguments

# JIT sources go to a scratch directory, removed at exit; nothing is compiled.
SCRATCH = tempfile.mkdtemp(prefix="attnref-flashinfer-")
atexit.register(shutil.rmtree, SCRATCH, ignore_errors=True)
os.environ["FLASHINFER_WORKSPACE_BASE"] = SCRATCH

import flashinfer.utils  # noqa: E402
from flashinfer.jit.attention import modules  # noqa: E402

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
          "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
ARCHS = [80, 86, 89, 90, 100, 120]
HEAD_DIMS = [64, 64, 128, 128, 128, 192, 256, 256, 320, 512, 512, 576]
# The rules this judge decides, by the FlashInfer call that makes the check.
MODULE_RULES = {"flashinfer.prefill.fa2_fp8_q", "flashinfer.prefill.large_head_arch"}
BACKEND_RULES = {"flashinfer.prefill.fa3_arch", "flashinfer.prefill.fa3_fp8_kv"}


def draw_config(rng):
    head_dim = rng.choice(HEAD_DIMS)
    q = rng.choice(["bfloat16", "bfloat16", "float16", "float8_e4m3fn", "float8_e5m2"])
    return {
        "num_q_heads": 32, "num_kv_heads": 8,
        "head_dim": head_dim,
        "head_dim_v": rng.choice([head_dim] * 3 + [{192: 128, 576: 512}.get(head_dim, head_dim)]),
        "dtype": q,
        "kv_dtype": rng.choice([q, q, "float8_e4m3fn", "float8_e5m2"]),
        "sliding_window": rng.choice([0, 0, 4096]),
        "soft_cap": rng.random() < 0.2,
    }


def module_failure(config, arch):
    """FlashInfer's message when generating the fa2 prefill module fails, else ""."""
    suffix = "" if arch < 90 else "a"
    modules.current_compilation_context.TARGET_CUDA_ARCHS = {(arch // 10, f"{arch % 10}{suffix}")}
    try:
        modules.gen_batch_prefill_module(
            "fa2", DTYPES[config["dtype"]], DTYPES[config["kv_dtype"]], torch.bfloat16,
            torch.int32, config["head_dim"], config["head_dim_v"], 0,
            config["sliding_window"] > 0, config["soft_cap"], False)
    except (AssertionError, RuntimeError) as e:
        return str(e)
    return ""


def auto_backend(config, arch):
    """The backend FlashInfer's backend="auto" runs for this query and K/V dtype on `arch`."""
    flashinfer.utils.get_compute_capability = lambda device: (arch // 10, arch % 10)
    return flashinfer.utils.determine_attention_backend(
        torch.device("cuda:0"), 0, False, False, DTYPES[config["dtype"]],
        DTYPES[config["kv_dtype"]])


def attnref_findings(config, arch):
    """kernel -> {rule id: upstream text} of attnref's findings."""
    answer = attnref.engines(arch=f"sm{arch}", **config)
    return {row["kernel"]: {f["id"]: f["upstream"] for f in row["findings"]}
            for row in answer["kernels"]}


def judge(examples, seed):
    rng = random.Random(seed)
    rows = {name: {"inputs": 0, "refused": 0, "verdicts": 0, "texts": 0, "failures": []}
            for name in ("fa2 module", "auto backend")}
    for _ in range(examples):
        config, arch = draw_config(rng), rng.choice(ARCHS)
        ours = attnref_findings(config, arch)
        theirs = module_failure(config, arch)
        judged = {i: t for i, t in ours["flashinfer.prefill.fa2"].items() if i in MODULE_RULES}
        verdict_ok = bool(judged) == bool(theirs)
        text_ok = verdict_ok and (not theirs or any(theirs.startswith(t) for t in judged.values()))
        tally(rows["fa2 module"], theirs, verdict_ok, text_ok, (arch, config, theirs, judged))
        fell_back = auto_backend(config, arch) == "fa2"
        judged = {i for i in ours["flashinfer.prefill.fa3"] if i in BACKEND_RULES}
        agree = bool(judged) == fell_back
        # backend="auto" falls back to fa2 without a message: verdicts only.
        tally(rows["auto backend"], fell_back, agree, None, (arch, config, fell_back, judged))
    return rows


def tally(row, refused, verdict_ok, text_ok, failure):
    """Counts one input; text_ok is None where the check refuses without a message."""
    row["inputs"] += 1
    row["refused"] += bool(refused)
    row["verdicts"] += verdict_ok
    if text_ok is None:
        row["texts"], text_ok = None, verdict_ok
    else:
        row["texts"] += text_ok
    if not text_ok and len(row["failures"]) < 8:
        row["failures"].append(failure)


def markdown_report(lines, args):
    versions = ", ".join(f"{p} {metadata.version(p)}" for p in ("flashinfer-python", "torch"))
    return f"""## FlashInfer's own Python checks, run

`tests/engines/flashinfer_judge.py --examples {args.examples} --seed {args.seed}`; {versions}.

For each drawn configuration (head_dim 64 to 576, V's the same or DeepSeek's narrower one,
float16 / bfloat16 / fp8 queries with K/V in the same dtype or fp8, window, soft cap) on a drawn
GPU architecture (sm80 to sm120), FlashInfer generates the fa2 prefill module with that
architecture as the only build target (its check of the query's dtype and of the architectures a
head dim above 256 is built for; nothing is compiled), and picks the prefill backend for
backend="auto" with that compute capability. attnref agrees when `flashinfer.prefill.fa2`
reports `fa2_fp8_q` or `large_head_arch` exactly when the module fails, with FlashInfer's text,
and `flashinfer.prefill.fa3` reports `fa3_arch` or `fa3_fp8_kv` (falls back) exactly when
FlashInfer runs fa2; a fall back has no message, so that row compares verdicts only.

{chr(10).join(lines)}

Read, not run: the fa2 and fa3 rules that fire inside CUDA code (the planner's head check, the
kernel traits' register budget, the fa3 kernels' static_asserts, the silent hazards) and the
CUDA-core decode's group sizes.
"""


def main():
    args = judge_arguments(__doc__, 2000)
    rows = judge(args.examples, args.seed)
    version = metadata.version("flashinfer-python")
    lines = [f"| FlashInfer {version} check | inputs | FlashInfer refuses or falls back | "
             "verdicts agree | texts agree |", "|---|---|---|---|---|"]
    for name, r in rows.items():
        texts = "no message" if r["texts"] is None else f"{r['texts']}/{r['inputs']}"
        lines.append(f"| {name} | {r['inputs']} | {r['refused']} | {r['verdicts']}/{r['inputs']} "
                     f"| {texts} |")
        for arch, config, theirs, ours in r["failures"]:
            print(f"{name} sm{arch} {config}\n    FlashInfer: {theirs!r}\n    attnref: {ours}")
    print("\n".join(lines))
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown_report(lines, args))
    ok = all(r["verdicts"] == r["inputs"] and r["texts"] in (None, r["inputs"])
             for r in rows.values())
    print(f"flashinfer judge: {'agree' if ok else 'DISAGREE'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
