"""vLLM's Triton attention kernel, interpreted on the CPU, as a numeric judge of attnref.

Runs `unified_attention` of vLLM 0.33.0 (vllm/v1/attention/ops/triton_unified_attention.py, the
kernel its TRITON_ATTN backend launches) under TRITON_INTERPRET=1 on CPU torch tensors, for drawn
ragged batches: decode rows and chunked-prefill rows behind a cached prefix (causal, bottom-right),
grouped KV heads, head_dim 32 to 128, 16- and 32-token pages behind shuffled block tables,
float16 / bfloat16 / float32, sliding window, soft cap, ALiBi and sinks, through its one-pass (2D)
and split-K (3D) paths. The same inputs go to `attnref.ragged_paged_attention` with vLLM's
conventions (the model's window W as attnref's W, signed ALiBi, cap then ALiBi, sinks as
softmax logits), and to a float64 reference written here from the math, independent of both.
A case agrees when the kernel and attnref are each within the tolerances of vLLM's own test of
the kernel (tests/kernels/attention/test_triton_unified_attention.py: atol 1.5e-2, rtol 1e-2)
of the float64 answer.

It then runs the kernel on the inputs of attnref's two silent hazards for `vllm.triton_attn`
(`heads`: num_q_heads not a multiple of num_kv_heads; `alibi_sinks`: ALiBi with sinks and more
than one query token) and says whether each reproduces, with the measured error.

Usage: python triton_judge.py [--examples N] [--seed S] [--markdown FILE]
(with vLLM, torch, triton and the attnref module importable; no GPU is used).
"""
import os
import random
import sys
import time
import warnings
from importlib import metadata

os.environ["TRITON_INTERPRET"] = "1"
# vllm.triton_utils turns Triton off unless exactly one GPU driver is active, but lets none
# through when the visible-device list is empty (as Ray leaves it while actors start); the
# interpreter needs no driver.
os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

import attnref  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from kernel_judges import attnref_refuses, judge_arguments, softmax_rows, tally  # noqa: E402
import triton_interpreter  # noqa: E402,F401 (Triton's interpreter computing as the GPU does)

from vllm.v1.attention.ops.triton_unified_attention import unified_attention  # noqa: E402

# A query block's rows past its chunk end, and empty split-K segments, divide 0 by 0 in the
# kernel; the stores mask them off, as on the GPU. numpy says so for each.
warnings.filterwarnings("ignore", category=RuntimeWarning, module="triton.runtime.interpreter")

ATOL, RTOL = 1.5e-2, 1e-2  # vLLM's test of unified_attention, 16-bit Q and K/V
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
HEAD_DIMS = [32, 64, 80, 96, 128]
SEGMENTS = 16  # vLLM's NUM_PAR_SOFTMAX_SEGMENTS (v1/attention/backends/triton_attn.py)




# ---- cases ----------------------------------------------------------------------------------

def draw_sequences(rng):
    """(q_len, kv_len) per request: decode rows, or a prefill chunk behind a cached prefix."""
    decode_only = rng.random() < 0.4
    seqs = []
    for _ in range(rng.randint(1, 3)):
        if decode_only or rng.random() < 0.4:
            seqs.append((1, rng.randint(1, 70)))
        else:
            q_len = rng.randint(2, 12)
            seqs.append((q_len, q_len + rng.choice([0, rng.randint(1, 40)])))
    return seqs


def draw_case(rng):
    hkv = rng.choice([1, 2, 4])
    seqs = draw_sequences(rng)
    multi = max(q for q, _ in seqs) > 1
    alibi = rng.random() < 0.3
    return {
        "dtype": rng.choice(list(DTYPES)),
        "num_q_heads": hkv * rng.choice([1, 2, 4, 8]),
        "num_kv_heads": hkv,
        "head_dim": rng.choice(HEAD_DIMS),
        "page_size": rng.choice([16, 32]),
        "seqs": seqs,
        "sliding_window": rng.choice([0, 0, 0, 4, 8, 16]),
        "soft_cap": rng.choice([0.0, 0.0, 0.0, 2.0, 10.0, 50.0]),
        "alibi": alibi,
        # ALiBi with sinks and a multi-token chunk is the alibi_sinks hazard, judged on its own.
        "sinks": rng.random() < 0.3 and not (alibi and multi),
        # split-K runs chunks of at most 8 queries (MAX_3D_QUERY_LEN), the rest one pass.
        "split_k": max(q for q, _ in seqs) <= 8 and rng.random() < 0.6,
    }


def alibi_slopes(num_heads):
    """ALiBi's geometric slopes, 2^(-8 (h + 1) / H)."""
    return torch.tensor([2.0 ** (-8.0 * (h + 1) / num_heads) for h in range(num_heads)])


def make_inputs(case, gen):
    """vLLM's tensors: q [tokens, Hq, D], K/V caches [blocks, page, Hkv, D] (NHD), a shuffled
    block table with every entry a valid block, cu_seqlens_q, seqused_k."""
    dtype = DTYPES[case["dtype"]]
    hq, hkv, d, page = (case[k] for k in ("num_q_heads", "num_kv_heads", "head_dim", "page_size"))
    q_lens = [q for q, _ in case["seqs"]]
    kv_lens = [kv for _, kv in case["seqs"]]
    # The kernel reads a block-table entry for every slot of a 32-key tile, past kv_len too.
    width = -(-max(kv_lens) // 32) * (32 // page)
    num_blocks = len(kv_lens) * width + 2
    table = torch.randperm(num_blocks, generator=gen)[: len(kv_lens) * width]
    return {
        "q": torch.randn(sum(q_lens), hq, d, generator=gen).to(dtype),
        "k": torch.randn(num_blocks, page, hkv, d, generator=gen).to(dtype),
        "v": torch.randn(num_blocks, page, hkv, d, generator=gen).to(dtype),
        "block_table": table.reshape(len(kv_lens), width).to(torch.int32),
        "cu_seqlens_q": torch.tensor([0] + q_lens).cumsum(0).to(torch.int32),
        "seqused_k": torch.tensor(kv_lens, dtype=torch.int32),
        "sinks": torch.randn(hq, generator=gen) * 2.0 if case["sinks"] else None,
        "alibi_slopes": alibi_slopes(hq) if case["alibi"] else None,
    }


# ---- the three answers ----------------------------------------------------------------------

def run_kernel(case, inp, out=None):
    """vLLM's kernel, as its TRITON_ATTN backend calls it; float64 numpy [tokens, Hq, D]."""
    q = inp["q"]
    out = torch.zeros_like(q) if out is None else out
    split = {}
    if case["split_k"]:
        hq, dp = q.shape[1], 1 << (q.shape[2] - 1).bit_length()
        split = {
            "seq_threshold_3D": 64,
            "num_par_softmax_segments": SEGMENTS,
            "softmax_segm_output": torch.empty(q.shape[0], hq, SEGMENTS, dp),
            "softmax_segm_max": torch.empty(q.shape[0], hq, SEGMENTS),
            "softmax_segm_expsum": torch.empty(q.shape[0], hq, SEGMENTS),
        }
    w = case["sliding_window"]
    unified_attention(
        q=q, k=inp["k"], v=inp["v"], out=out,
        cu_seqlens_q=inp["cu_seqlens_q"], max_seqlen_q=max(s[0] for s in case["seqs"]),
        seqused_k=inp["seqused_k"], max_seqlen_k=max(s[1] for s in case["seqs"]),
        softmax_scale=case["head_dim"] ** -0.5, causal=True,
        # TritonAttentionImpl passes the model's window W as (W - 1, 0).
        window_size=(w - 1, 0) if w else (-1, -1),
        block_table=inp["block_table"], softcap=case["soft_cap"],
        q_descale=None, k_descale=None, v_descale=None,
        alibi_slopes=inp["alibi_slopes"], sinks=inp["sinks"], **split)
    return out.double().numpy()


def run_attnref(case, inp):
    """attnref's ragged reference with vLLM's conventions; float64 numpy [tokens, Hq, D]."""
    out = attnref.ragged_paged_attention(
        inp["q"], (inp["k"], inp["v"]), inp["seqused_k"], inp["block_table"],
        inp["cu_seqlens_q"], len(case["seqs"]), kv_layout="nhd",
        sm_scale=case["head_dim"] ** -0.5,
        sliding_window=case["sliding_window"] or None, soft_cap=case["soft_cap"] or None,
        sinks=inp["sinks"], alibi_slopes=inp["alibi_slopes"],
        alibi_convention="signed", soft_cap_order="cap_then_alibi")
    return np.asarray(out, dtype=np.float64)


def reference(case, inp, kv_head_of=None, alibi_origin="query"):
    """float64 attention from the math: row r of a request with q_len queries and kv_len keys sits
    at p = kv_len - q_len + r and sees keys t <= p (and p - t < W with a window W); logit
    s = scale q.k, then c tanh(s / c), then + slope (t - p); softmax over the keys and the sink
    logit. alibi_origin "chunk" measures ALiBi from the chunk's first query, (t - (kv_len -
    q_len)), as attnref says the kernel does."""
    q, k, v = (inp[n].double().numpy() for n in ("q", "k", "v"))
    hq, hkv, d, page = (case[k] for k in ("num_q_heads", "num_kv_heads", "head_dim", "page_size"))
    kv_head_of = kv_head_of or (lambda h: h // (hq // hkv))
    table, cu = inp["block_table"].numpy(), inp["cu_seqlens_q"].numpy()
    out = np.zeros(q.shape)
    for b, (q_len, kv_len) in enumerate(case["seqs"]):
        pages = table[b, : -(-kv_len // page)]
        kb, vb = (x[pages].reshape(-1, hkv, d)[:kv_len] for x in (k, v))
        pos = kv_len - q_len + np.arange(q_len)[:, None]
        t = np.arange(kv_len)[None, :]
        visible = (t <= pos) & ((pos - t < case["sliding_window"]) | (case["sliding_window"] == 0))
        origin = pos if alibi_origin == "query" else kv_len - q_len
        for h in range(hq):
            rows = slice(cu[b], cu[b + 1])
            s = q[rows, h] @ kb[:, kv_head_of(h)].T * d ** -0.5
            if case["soft_cap"]:
                s = case["soft_cap"] * np.tanh(s / case["soft_cap"])
            if inp["alibi_slopes"] is not None:
                s = s + float(inp["alibi_slopes"][h]) * (t - origin)
            out[rows, h] = softmax_rows(np.where(visible, s, -np.inf), vb[:, kv_head_of(h)],
                                        None if inp["sinks"] is None else float(inp["sinks"][h]))
    return out


def within(got, want):
    """torch.testing.assert_close's test at vLLM's tolerances, and the max abs difference."""
    diff = np.abs(got - want)
    ok = bool(np.all(diff <= ATOL + RTOL * np.abs(want)))
    return ok, float(np.nan_to_num(diff, nan=np.inf).max())


# ---- the judge ------------------------------------------------------------------------------

def families(case):
    """The table rows a case counts in: its path, its features, its dtype."""
    decode = max(q for q, _ in case["seqs"]) == 1
    path = ("decode" if decode else "prefill chunks + decode") + (
        ", split-K (3D)" if case["split_k"] else ", one pass (2D)")
    feats = [name for name, on in (("sliding window", case["sliding_window"]),
                                   ("soft cap", case["soft_cap"]), ("ALiBi", case["alibi"]),
                                   ("sinks", case["sinks"])) if on]
    feats = feats or ["no window, cap, ALiBi, sinks"]
    return [("path", path)] + [("feature", f) for f in feats] + [("dtype", case["dtype"])]


def describe(case):
    return (f"{case['dtype']} Hq={case['num_q_heads']} Hkv={case['num_kv_heads']} "
            f"D={case['head_dim']} page={case['page_size']} seqs={case['seqs']} "
            f"W={case['sliding_window']} cap={case['soft_cap']} alibi={case['alibi']} "
            f"sinks={case['sinks']} split_k={case['split_k']}")


def judge(examples, seed):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    rows, failures = {}, []
    for _ in range(examples):
        case = draw_case(rng)
        inp = make_inputs(case, gen)
        want = reference(case, inp)
        k_ok, k_diff = within(run_kernel(case, inp), want)
        a_ok, a_diff = within(run_attnref(case, inp), want)
        tally(rows, families(case), k_ok and a_ok, k_diff, a_diff)
        if not (k_ok and a_ok):
            failures.append((case, k_diff, a_diff))
    return rows, failures


# ---- the hazards ----------------------------------------------------------------------------

def hazard_case(**over):
    case = {"dtype": "float16", "num_q_heads": 8, "num_kv_heads": 2, "head_dim": 64,
            "page_size": 16, "seqs": [(1, 37), (9, 30)], "sliding_window": 0, "soft_cap": 0.0,
            "alibi": False, "sinks": False, "split_k": False}
    case.update(over)
    return case


def hazard_heads(gen):
    """vllm.triton_attn.heads: Hq not a multiple of Hkv. The output buffer starts as NaN, so a
    head the kernel never writes still holds NaN afterwards."""
    results = []
    for hq, hkv in ((6, 4), (7, 2)):
        case = hazard_case(num_q_heads=hq, num_kv_heads=hkv)
        inp = make_inputs(case, gen)
        got = run_kernel(case, inp, out=torch.full_like(inp["q"], float("nan")))
        g = hq // hkv
        written = list(range(hkv * g))
        unwritten = [h for h in range(hq) if np.isnan(got[:, h]).all()]
        grouped = reference(case, inp, kv_head_of=lambda h: min(h // g, hkv - 1))
        _, written_diff = within(got[:, written], grouped[:, written])
        # No grouping is right for these heads; the nearest one, KV head h * Hkv // Hq, gives
        # an answer of the size any head's would have.
        nearest = reference(case, inp, kv_head_of=lambda h: h * hkv // hq)
        unwritten_size = float(np.abs(nearest[:, unwritten]).max()) if unwritten else 0.0
        results.append({
            "inputs": f"Hq={hq}, Hkv={hkv} (Hq // Hkv = {g}), float16, seqs {case['seqs']}",
            "reproduced": bool(unwritten) and unwritten == list(range(hkv * g, hq)),
            "measured": (f"heads {unwritten} never written (the buffer's NaN survives in every "
                         f"row; in a zeroed buffer the error is the answer's max abs value, "
                         f"{unwritten_size:.3g}); heads 0-{hkv * g - 1} read KV head h // {g}: "
                         f"max abs diff {written_diff:.2e} from float64"),
            "attnref": attnref_refuses(hq, hkv, case["head_dim"]),
        })
    return results


ALIBI_SINKS_CASES = (
    # (what, requests, split-K, whether attnref says the kernel is wrong there)
    ("prefill chunks (q_len 12 and 8)", [(12, 40), (8, 8)], False, True),
    ("speculative-decode chunks (q_len 4)", [(4, 44), (4, 9)], True, True),
    ("decode (q_len 1)", [(1, 40), (1, 8), (1, 63)], True, False),
    ("decode (q_len 1)", [(1, 40), (1, 8), (1, 63)], False, False),
)


def hazard_alibi_sinks(gen):
    """vllm.triton_attn.alibi_sinks: ALiBi and sinks together, multi-token chunks against decode
    rows (q_len 1), on both of the kernel's paths."""
    results = []
    for name, seqs, split_k, claimed in ALIBI_SINKS_CASES:
        case = hazard_case(seqs=seqs, alibi=True, sinks=True, split_k=split_k)
        inp = make_inputs(case, gen)
        got, want = run_kernel(case, inp), reference(case, inp)
        ok, diff = within(got, want)
        firsts = inp["cu_seqlens_q"][:-1].numpy()
        _, first_diff = within(got[firsts], want[firsts])
        _, chunk_model = within(got, reference(case, inp, alibi_origin="chunk"))
        a_ok, a_diff = within(run_attnref(case, inp), want)
        results.append({
            "inputs": f"{name}: Hq=8, Hkv=2, float16, slopes 2^(-h-1), sinks N(0, 4), "
                      f"seqs {seqs}, " + ("split-K (3D)" if split_k else "one pass (2D)"),
            "claimed": claimed, "kernel_ok": ok, "diff": diff, "first_row_diff": first_diff,
            "chunk_model_diff": chunk_model, "attnref_ok": a_ok, "attnref_diff": a_diff,
        })
    # Reproduced: wrong beyond tolerance exactly where attnref says, right where it does not.
    reproduced = all(r["kernel_ok"] != r["claimed"] for r in results)
    return reproduced, results


# ---- report ---------------------------------------------------------------------------------

def versions():
    return ", ".join(f"{p} {metadata.version(p)}" for p in ("vllm", "triton", "torch"))


BLOCKS = ("path", "feature", "dtype")  # the case table's blocks of rows, in order


def case_table(rows):
    lines = ["| case family | inputs | within tolerance | max abs diff kernel vs float64 | "
             "attnref vs float64 |", "|---|---|---|---|---|"]
    for (_, name), r in sorted(rows.items(), key=lambda kv: (BLOCKS.index(kv[0][0]), kv[0][1])):
        lines.append(f"| {name} | {r['inputs']} | {r['ok']}/{r['inputs']} | "
                     f"{r['kernel']:.2e} | {r['attnref']:.2e} |")
    return lines


def hazard_table(heads, alibi_reproduced, alibi):
    lines = ["| hazard | inputs | reproduced | measured |", "|---|---|---|---|"]
    for h in heads:
        lines.append(f"| `vllm.triton_attn.heads` | {h['inputs']} | "
                     f"{'yes' if h['reproduced'] else 'NO'} | {h['measured']}; {h['attnref']} |")
    for a in alibi:
        lines.append(
            f"| `vllm.triton_attn.alibi_sinks` | {a['inputs']} | "
            f"{'yes' if alibi_reproduced else 'NO'} | attnref's claim: "
            f"{'wrong' if a['claimed'] else 'right'}; kernel vs float64 max abs diff "
            f"{a['diff']:.2e} ({'within' if a['kernel_ok'] else 'beyond'} tolerance; first row "
            f"of each request {a['first_row_diff']:.2e}); vs float64 with ALiBi measured from "
            f"the chunk's first query {a['chunk_model_diff']:.2e}; attnref vs float64 "
            f"{a['attnref_diff']:.2e} |")
    return lines


def markdown_report(args, case_lines, hazard_lines):
    return f"""## vLLM's Triton kernel, run

Generated by `tests/engines/triton_judge.py --examples {args.examples} --seed {args.seed}`;
{versions()}, under `TRITON_INTERPRET=1` on the CPU.

vLLM's `unified_attention` (`vllm/v1/attention/ops/triton_unified_attention.py`, what its
TRITON_ATTN backend launches) runs on drawn ragged batches: 1 to 3 requests of decode rows and
prefill chunks of 2 to 12 queries behind cached prefixes, 1, 2 or 4 KV heads with groups of 1 to 8,
head_dim 32 to 128 (80 and 96 too), pages of 16 or 32 tokens behind shuffled block tables,
float16, bfloat16 and float32, sliding windows of 4 to 16, soft caps of 2 to 50, ALiBi, sinks,
through the one-pass (2D) and split-K (3D, 16 segments) paths. `attnref.ragged_paged_attention`
gets the same tensors with vLLM's conventions, and both are compared with a float64 reference
written from the math; a case is within tolerance when both are, at the tolerances of vLLM's test
of the kernel (`tests/kernels/attention/test_triton_unified_attention.py`: atol {ATOL}, rtol
{RTOL}). A case counts in one row of each block (path, feature, dtype). ALiBi with sinks on a
multi-token chunk is the `alibi_sinks` hazard and is left to the second table.

Triton's interpreter holds bfloat16 and fp8 as integer bits, and its `tl.dot` and bfloat16
arithmetic compute on the bits (triton-lang/triton#11584); its float32 -> bfloat16 cast
truncates. The judges correct the interpreter to compute as the GPU does
(`tests/engines/triton_interpreter.py`: arithmetic on the values, casts rounding to nearest even,
dots on float32 copies); nothing of the kernel is changed.

{chr(10).join(case_lines)}

attnref's silent hazards for `vllm.triton_attn`, run:

{chr(10).join(hazard_lines)}
"""


def print_failures(failures):
    for case, k_diff, a_diff in failures[:8]:
        print(f"outside tolerance: {describe(case)}\n    kernel vs float64 {k_diff:.3e}, "
              f"attnref vs float64 {a_diff:.3e}")


def main():
    args = judge_arguments(__doc__, 50)
    start = time.monotonic()
    rows, failures = judge(args.examples, args.seed)
    gen = torch.Generator().manual_seed(args.seed + 1)
    heads = hazard_heads(gen)
    alibi_reproduced, alibi = hazard_alibi_sinks(gen)
    seconds = time.monotonic() - start
    case_lines, hazard_lines = case_table(rows), hazard_table(heads, alibi_reproduced, alibi)
    print_failures(failures)
    print("\n".join(case_lines + [""] + hazard_lines))
    print(f"{versions()}; {args.examples} cases and the hazards in {seconds:.1f} s")
    for h in heads:
        print(f"vllm.triton_attn.heads: {'reproduced' if h['reproduced'] else 'NOT reproduced'}"
              f" ({h['inputs']})")
    print(f"vllm.triton_attn.alibi_sinks: {'reproduced' if alibi_reproduced else 'NOT reproduced'}"
          " (kernel vs float64: " + ", ".join(f"{a['inputs'].split(':')[0]} {a['diff']:.2e}"
                                              for a in alibi) + ")")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown_report(args, case_lines, hazard_lines))
    # A hazard attnref reports that the kernel does not have is a disagreement too.
    ok = (not failures and all(a["attnref_ok"] for a in alibi) and alibi_reproduced
          and all(h["reproduced"] for h in heads))
    print(f"triton judge: {'agree' if ok else 'DISAGREE'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
