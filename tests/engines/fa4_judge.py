"""FlashAttention-4's own checks as the judge of attnref's flash_attn4 rules.

FlashAttention-4 is Python on NVIDIA's CuTe DSL: every check it makes of its inputs is a Python
assert that runs before any kernel is compiled. The judge calls vLLM's `flash_attn_varlen_func`
with fa_version=4, as vLLM's FLASH_ATTN backend does on sm100, on shape-only (fake) CUDA
tensors of a drawn configuration, with torch told the GPU's compute capability; the CuTe DSL
(nvidia-cutlass-dsl, quack-kernels: NVIDIA's compiler, which needs a GPU driver) is stood in for
by modules that answer anything, and compiling is where the run stops. FA4 accepts a
configuration when the run reaches the compile; it rejects it with the first assert that fails.
attnref agrees when it rejects exactly those, its first rejecting rule's text being the start
of FA4's message (FA4 appends the values some messages name).

Usage: python fa4_judge.py [--examples N] [--seed S] [--markdown FILE]
(with vllm, torch and the attnref module importable; scripts/judge_engines.sh sets that up).
"""
import importlib.abc
import importlib.machinery
import os
import pathlib
import random
import sys
import types
from importlib import metadata

import attnref
from kernel_judges import judge_arguments
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
os.environ.setdefault("FLASH_ATTENTION_NUM_SMS", "132")  # an H100's SMs, for the split heuristic


class Anything:
    """A stand-in for any CuTe DSL object: every attribute, call, index and operation gives
    another one, a decorator gives back what it decorates, and comparisons hold (the kernel
    classes compare their sizes with the DSL's hardware limits, which the DSL would supply)."""

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Anything()

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], Anything):
            return args[0]
        return Anything()

    def __getitem__(self, key):
        return Anything()

    def __mro_entries__(self, bases):
        return (object,)

    def __iter__(self):
        return iter(())

    def __bool__(self):
        return True

    def __int__(self):
        return 0

    __index__ = __int__

    def _same(self, *other):
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _same
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = __mod__ = __rmod__ = _same
    __and__ = __rand__ = __or__ = __ror__ = __lshift__ = __rshift__ = __neg__ = _same

    def _holds(self, other):
        return True

    __lt__ = __le__ = __gt__ = __ge__ = _holds

    def __eq__(self, other):
        return other is self

    def __hash__(self):
        return id(self)


class AnythingModule(types.ModuleType):
    def __init__(self, name):
        super().__init__(name)
        self.__path__ = []

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Anything()


class CuteDslStandIn(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports of the CuTe DSL and its helpers give AnythingModules."""

    ROOTS = ("cutlass", "quack", "cuda", "tvm_ffi")

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.ROOTS:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return AnythingModule(spec.name)

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, CuteDslStandIn())
# vLLM's FlashAttention package refuses to import without its CUDA extensions (FA2, FA3), which
# link the GPU driver; FA4 needs neither.
for extension in ("vllm._C_stable_libtorch", "vllm.vllm_flash_attn._vllm_fa2_C",
                  "vllm.vllm_flash_attn._vllm_fa3_C"):
    sys.modules[extension] = types.ModuleType(extension)

import vllm.vllm_flash_attn.cute.interface as fa4  # noqa: E402
from vllm.vllm_flash_attn.flash_attn_interface import flash_attn_varlen_func  # noqa: E402


class ReachedCompile(Exception):
    """FA4 made every check and went on to compile a kernel."""


def compile_stops(*args, **kwargs):
    raise ReachedCompile()


fa4.cute.compile = compile_stops

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32,
          "float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2}
ARCHS = [80, 86, 89, 90, 90, 100, 100, 100, 120]
HEAD_DIMS = [32, 40, 48, 64, 72, 80, 96, 104, 112, 128, 160, 192, 200, 256, 320, 512, 520]


def draw_config(rng):
    head_dim = rng.choice(HEAD_DIMS)
    head_dim_v = rng.choice([head_dim] * 4 + [{192: 128, 64: 512, 576: 512}.get(head_dim, 64)])
    kv_heads = rng.choice([1, 2, 4, 8])
    q = rng.choice(["bfloat16"] * 4 + ["float16"] * 2 + ["float32", "float8_e4m3fn",
                                                           "float8_e5m2"])
    kv = q if rng.random() < 0.6 else rng.choice(["float8_e4m3fn", "float8_e4m3fn",
                                                   "float8_e5m2", "bfloat16", "float32"])
    return {
        "num_q_heads": kv_heads * rng.choice([1, 2, 4, 7, 8]) + (rng.random() < 0.05),
        "num_kv_heads": kv_heads,
        "head_dim": head_dim,
        "head_dim_v": head_dim_v,
        "page_size": rng.choice([0, 0, 16, 32, 64, 80, 128, 128, 128, 144, 256]),
        "dtype": q,
        "kv_dtype": kv,
        "sliding_window": rng.choice([0, 0, 0, 128]),
        "soft_cap": rng.random() < 0.15,
        "alibi": rng.random() < 0.05,
        "sinks": rng.random() < 0.2,
    }


def fa4_answer(config, arch, q_len):
    """"" when FA4 accepts; else its first assert's message."""
    torch.cuda.get_device_capability = lambda device=None: (arch // 10, arch % 10)
    fa4._get_device_arch.cache_clear()
    # Whole pages, and a page table exactly that wide: FA4's (256, 256) kernel on sm100 asserts
    # both of the call (of max_seqlen_k), which attnref's configuration does not state.
    page = config["page_size"]
    batch, kv_len = 2, page * -(-1024 // page) if page else 1024
    hq, hkv = config["num_q_heads"], config["num_kv_heads"]
    d, dv = config["head_dim"], config["head_dim_v"]
    q_dtype, kv_dtype = DTYPES[config["dtype"]], DTYPES[config["kv_dtype"]]
    with FakeTensorMode(allow_non_fake_inputs=True):
        cuda = {"device": "cuda"}
        q = torch.empty(batch * q_len, hq, d, dtype=q_dtype, **cuda)
        cu_seqlens_q = torch.zeros(batch + 1, dtype=torch.int32, **cuda)
        if page:
            pages = -(-kv_len // page)
            k = torch.empty(batch * pages, page, hkv, d, dtype=kv_dtype, **cuda)
            v = torch.empty(batch * pages, page, hkv, dv, dtype=kv_dtype, **cuda)
            keys = {"seqused_k": torch.zeros(batch, dtype=torch.int32, **cuda),
                    "block_table": torch.zeros(batch, pages, dtype=torch.int32, **cuda)}
        else:
            k = torch.empty(batch * kv_len, hkv, d, dtype=kv_dtype, **cuda)
            v = torch.empty(batch * kv_len, hkv, dv, dtype=kv_dtype, **cuda)
            keys = {"cu_seqlens_k": torch.zeros(batch + 1, dtype=torch.int32, **cuda)}
        window = config["sliding_window"]
        try:
            flash_attn_varlen_func(
                q, k, v, max_seqlen_q=q_len, cu_seqlens_q=cu_seqlens_q, max_seqlen_k=kv_len,
                causal=True, window_size=[window, 0] if window else None,
                softcap=30.0 if config["soft_cap"] else 0.0,
                alibi_slopes=torch.ones(hq, dtype=torch.float32, **cuda) if config["alibi"]
                else None,
                s_aux=torch.zeros(hq, dtype=torch.float32, **cuda) if config["sinks"] else None,
                num_splits=1, fa_version=4, **keys)
        except ReachedCompile:
            return ""
        except AssertionError as e:
            return str(e) or "assert without a message"
    raise RuntimeError("FA4 neither compiled nor refused")


def attnref_answer(config, arch):
    """attnref's flash_attn4 row: the texts and ids of the rules that reject."""
    answer = attnref.engines(arch=f"sm{arch}", **config)
    row = next(r for r in answer["kernels"] if r["kernel"] == "flash_attn4")
    rejects = [f for f in row["findings"] if f["severity"] == "rejects"]
    return [f["upstream"] for f in rejects], [f["id"] for f in rejects]


def judge(examples, seed):
    rng = random.Random(seed)
    result = {"inputs": 0, "rejected": 0, "verdicts": 0, "texts": 0, "failures": [],
              "first_rules": set()}
    for _ in range(examples):
        config, arch, q_len = draw_config(rng), rng.choice(ARCHS), rng.choice([1, 4, 64])
        theirs = fa4_answer(config, arch, q_len)
        ours, ids = attnref_answer(config, arch)
        verdict_ok = bool(ours) == bool(theirs)
        text_ok = verdict_ok and (not theirs or theirs.startswith(ours[0]))
        result["inputs"] += 1
        result["rejected"] += bool(theirs)
        result["verdicts"] += verdict_ok
        result["texts"] += text_ok
        if theirs and text_ok:
            result["first_rules"].add(ids[0])
        if not text_ok and len(result["failures"]) < 8:
            result["failures"].append((arch, q_len, config, theirs, ours))
    return result


def rule_ids():
    """The ids of attnref's flash_attn4 rules, from docs/engines.md (its tables are rendered from
    the C++ ones, and test_engine_rules holds them equal)."""
    doc = pathlib.Path(__file__).resolve().parents[2] / "docs" / "engines.md"
    section = doc.read_text().split("### `flash_attn4`")[1].split("### ")[0]
    return {line.split("`")[1].split(" ")[0] for line in section.splitlines()
            if line.startswith("| `flash_attn4.")}


def markdown_report(r, args, version):
    return f"""## FlashAttention-4's own checks, run

`tests/engines/fa4_judge.py --examples {args.examples} --seed {args.seed}`; vllm {version}
(its FlashAttention-4, vllm/vllm_flash_attn/cute), torch {metadata.version("torch")}.

For each drawn configuration (head_dim 32 to 520, V's head_dim the same or DeepSeek's pairs,
1 to 8 KV heads with groups of 1 to 8 or a head count they do not divide, unpaged or pages of 16
to 256 tokens, float16 / bfloat16 / float32 / fp8 e4m3 / e5m2 queries with K/V in the same or
another dtype, window, soft cap, ALiBi, sinks, 1 to 64 query tokens) on a drawn GPU
architecture, vLLM's `flash_attn_varlen_func(fa_version=4, num_splits=1)` runs on shape-only
CUDA tensors with torch told the compute capability, as far as FA4's kernel compile; NVIDIA's
CuTe DSL, which compiles for a GPU, is stood in for. FA4 accepts when the run reaches the
compile, and rejects with its first failing assert. attnref's verdict agrees when it rejects
exactly those; its text agrees when its first rejecting rule's text starts FA4's message.

| kernel | inputs | FA4 rejects | verdicts agree | texts agree | rules seen as FA4's first |
|---|---|---|---|---|---|
| `flash_attn4` (vllm {version}) | {r['inputs']} | {r['rejected']} | {r['verdicts']}/{r['inputs']} | {r['texts']}/{r['inputs']} | {len(r['first_rules'])} of {len(rule_ids())} |

Not judged: what the CuTe DSL itself refuses while compiling (its own limits on shared memory
and registers), which only NVIDIA's compiler knows; on sm8x and sm120 FA4's Python checks no
head dims at all, so attnref, like it, takes any there.
"""


def main():
    args = judge_arguments(__doc__, 2000)
    r = judge(args.examples, args.seed)
    for arch, q_len, config, theirs, ours in r["failures"]:
        print(f"flash_attn4 sm{arch} q_len {q_len} {config}\n    FA4: {theirs!r}\n"
              f"    attnref: {ours}")
    print(f"flash_attn4: {r['inputs']} inputs, FA4 rejects {r['rejected']}, verdicts agree "
          f"{r['verdicts']}, texts agree {r['texts']}, first rules seen: "
          f"{sorted(r['first_rules'])}")
    version = metadata.version("vllm")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown_report(r, args, version))
    ok = r["verdicts"] == r["texts"] == r["inputs"]
    print(f"fa4 judge: {'agree' if ok else 'DISAGREE'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
