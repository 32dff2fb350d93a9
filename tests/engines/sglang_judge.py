"""SGLang's Triton attention kernels, interpreted on the CPU, as a numeric judge of attnref.

Runs `decode_attention_fwd` and `extend_attention_fwd` of SGLang 0.5.23
(python/sglang/kernels/ops/attention/decode_attention.py and extend_attention.py, what its
`triton` attention backend, python/sglang/srt/layers/attention/triton_backend.py, launches) under
TRITON_INTERPRET=1 on CPU torch tensors, for drawn batches: decode on the MHA kernel (one query
head per KV head), the grouped kernel and the MLA path (K 576 wide, V its first 512 columns), and
extend (prefill chunks) with and without a cached prefix; grouped KV heads, head_dim 13 to 128
(80 and 96 too) and K/V widths that differ (192/128, 576/512), pages of 1, 4 and 16 tokens behind
shuffled slots, float16 / bfloat16 / float32, sliding windows, soft caps and sinks, and several
split-K counts in decode. Each case is called as the backend calls the kernel: a sliding-window
layer gets the backend's window KV list (the last min(len, sliding_window_size) keys of a decode
request; the last min(prefix, sliding_window_size) prefix keys of an extend request, the kernel
masking the rest).

The same inputs go to attnref (`paged_attention` for decode, `ragged_paged_attention` for extend,
`splash_attention` per request where V is narrower than K) with SGLang's conventions, and to a
float64 reference written here from the math, independent of both. SGLang's `sliding_window_size`
is the model's window minus one (gemma2.py, gpt_oss.py: config.sliding_window - 1): extend sees
keys with q_pos - k_pos <= sliding_window_size (attnref's W = sliding_window_size + 1), decode
the last sliding_window_size keys (attnref's W = sliding_window_size). The soft cap is
c * tanh(s / c) of the scaled logit; a sink adds exp(sink) to the denominator. A case agrees when
the kernel and attnref are each within the tolerance of SGLang's own tests of the kernels
(test/registered/attention/test_triton_attention_kernels.py: test_decode_attention against a
float32 reference at atol 1e-2, rtol 1e-2; the extend tests against a float64 reference at
atol 3e-3, rtol 1e-2, with an fp8 cache atol 1e-2, rtol 6e-2) of the float64 answer.

It then runs the kernels on the inputs of the silent hazards this reading found (num_q_heads not
a multiple of num_kv_heads; the decode window one key short of extend's; ALiBi, which neither
kernel has; sliding_window_size 0; a decode request with no keys) and on fp8 (e4m3) K/V with
per-tensor scales, and reports each with the measured error.

Usage: python sglang_judge.py [--examples N] [--seed S] [--markdown FILE]
(with sglang, torch, triton and the attnref module importable; no GPU is used).
"""
import importlib.util
import os
import random
import sys
import time
import types
import warnings
from importlib import metadata

os.environ["TRITON_INTERPRET"] = "1"

# sglang/__init__.py imports SGLang's frontend language (and through it IPython), none of which the
# kernels use: register the package without running it, so that only the kernel modules (and the
# sglang.srt.environ / sglang.srt.utils they import) load.
_spec = importlib.util.find_spec("sglang")
if _spec is None:
    sys.exit("sglang judge: sglang is not installed (pip install --no-deps sglang==0.5.23)")
_package = types.ModuleType("sglang")
_package.__path__ = list(_spec.submodule_search_locations)
sys.modules["sglang"] = _package

import attnref  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from kernel_judges import attnref_refuses, judge_arguments, softmax_rows, tally  # noqa: E402
import triton_interpreter  # noqa: E402,F401 (Triton's interpreter computing as the GPU does)

from sglang.kernels.ops.attention.decode_attention import decode_attention_fwd  # noqa: E402
from sglang.kernels.ops.attention.extend_attention import extend_attention_fwd  # noqa: E402

DECODE_ATOL, DECODE_RTOL = 1e-2, 1e-2  # SGLang's test_decode_attention, float32 reference
EXTEND_ATOL, EXTEND_RTOL = 3e-3, 1e-2  # SGLang's float64-reference extend tests, 16-bit cache
FP8_ATOL, FP8_RTOL = 1e-2, 6e-2  # the same tests with an fp8 cache
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}
# (K head_dim, V head_dim): powers of two, padded ones (13, 80, 96), V narrower than K.
HEAD_DIMS = [(32, 32), (64, 64), (128, 128), (80, 80), (96, 96), (13, 13), (192, 128)]
MLA = (576, 512)  # DeepSeek's latent cache: V is K's first 512 columns
MAX_KV_SPLITS = 4


# The kernels' masked lanes compute exp(-inf - -inf) and the like, as on the GPU; numpy says so.
warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"triton\.runtime\.interpreter")


# ---- cases ----------------------------------------------------------------------------------

def draw_case(rng):
    extend = rng.random() < 0.5
    mla = rng.random() < 0.1
    hkv = 1 if mla else rng.choice([1, 2, 4])
    group = rng.choice([2, 4, 8, 16]) if mla else rng.choice([1, 1, 2, 4, 8])
    if extend:
        prefix = rng.random() < 0.7
        seqs = []
        for _ in range(rng.randint(1, 3)):
            # Now and then a chunk longer than a query tile (BLOCK_M 32 or 64 here).
            q_len = rng.randint(1, 24) if rng.random() < 0.85 else rng.randint(33, 70)
            seqs.append((q_len, q_len + (rng.randint(1, 40) if prefix else 0)))
    else:
        seqs = [(1, rng.randint(1, 90)) for _ in range(rng.randint(1, 3))]
    dims = MLA if mla else rng.choice(HEAD_DIMS)
    return {
        "kind": "extend" if extend else "decode",
        "dtype": rng.choice(list(DTYPES)),
        "num_q_heads": hkv * group,
        "num_kv_heads": hkv,
        "head_dim": dims[0],
        "head_dim_v": dims[1],
        "mla": mla,
        "page_size": rng.choice([1, 4, 16]),
        "seqs": seqs,
        "sliding_window_size": rng.choice([0, 0, 0, 3, 7, 16]),  # SGLang's number; 0: none
        "soft_cap": rng.choice([0.0, 0.0, 0.0, 2.0, 10.0, 30.0]),
        "sinks": rng.random() < 0.3,
        "splits": [rng.randint(1, MAX_KV_SPLITS) for _ in seqs],  # decode's num_kv_splits
    }


def sm_scale(case):
    return (192 if case["mla"] else case["head_dim"]) ** -0.5  # DeepSeek scales by qk_head_dim


def make_inputs(case, gen, contiguous=False):
    """SGLang's tensors: a K/V slot pool [slots, Hkv, D] (the token_to_kv_pool's buffers), each
    request's tokens in shuffled pages of page_size slots (contiguous: in order, page 1), and two
    spare pages past the last used slot; q [tokens, Hq, D]. For MLA, V is K's first 512 columns."""
    dtype = DTYPES[case["dtype"]]
    hq, hkv, d, dv, page = (case[k] for k in ("num_q_heads", "num_kv_heads", "head_dim",
                                              "head_dim_v", "page_size"))
    kv_lens = [kv for _, kv in case["seqs"]]
    pages_of = [-(-kv // page) for kv in kv_lens]
    num_pages = sum(pages_of) + 2
    order = torch.arange(num_pages) if contiguous else torch.randperm(num_pages, generator=gen)
    slots, start = [], 0
    for kv, n in zip(kv_lens, pages_of):
        pages = order[start:start + n]
        start += n
        slots.append((pages[:, None] * page + torch.arange(page)[None, :]).reshape(-1)[:kv])
    k = torch.randn(num_pages * page, hkv, d, generator=gen).to(dtype)
    if case["mla"]:
        v = k[..., :dv]
    else:
        v = torch.randn(num_pages * page, hkv, dv, generator=gen).to(dtype)
    q_tokens = sum(q for q, _ in case["seqs"])
    return {
        "q": torch.randn(q_tokens, hq, d, generator=gen).to(dtype),
        "k_buffer": k,
        "v_buffer": v,
        "slots": slots,  # per request, the slot of each of its kv_len tokens
        # gpt_oss.py keeps its sinks in bfloat16 on every backend but trtllm_mha.
        "sinks": (torch.randn(hq, generator=gen) * 2.0).to(
            torch.bfloat16 if dtype == torch.bfloat16 else torch.float32)
        if case["sinks"] else None,
    }


def window_keys(case, n):
    """How many of its last n keys (or prefix keys) the backend hands the kernel
    (update_sliding_window_buffer: min(len, sliding_window_size))."""
    w = case["sliding_window_size"]
    return min(n, w) if w > 0 else n


def attnref_window(case):
    """attnref's W (keys p - W < t <= p) for SGLang's sliding_window_size."""
    w = case["sliding_window_size"]
    if w <= 0:
        return None
    return w + 1 if case["kind"] == "extend" else w


# ---- the three answers ----------------------------------------------------------------------

def run_decode(case, inp):
    """decode_attention_fwd as TritonAttnBackend.forward_decode calls it; float64 [B, Hq, Dv]."""
    q, k, v = inp["q"], inp["k_buffer"], inp["v_buffer"]
    lists = []
    for (_, kv_len), slots in zip(case["seqs"], inp["slots"]):
        n = window_keys(case, kv_len)
        lists.append(slots[kv_len - n:])
    lens = [len(x) for x in lists]
    kv_indptr = torch.tensor([0] + lens).cumsum(0).to(torch.int32)
    kv_indices = torch.cat(lists).to(torch.int64) if lists else torch.zeros(0, dtype=torch.int64)
    b, hq, dv = q.shape[0], q.shape[1], v.shape[-1]
    out = torch.zeros(b, hq, dv, dtype=q.dtype)
    decode_attention_fwd(
        q, k, v, out, kv_indptr, kv_indices,
        torch.empty(b, hq, MAX_KV_SPLITS, dv), torch.empty(b, hq, MAX_KV_SPLITS),
        torch.tensor(case["splits"], dtype=torch.int32), MAX_KV_SPLITS,
        sm_scale(case), inp.get("k_scale", 1.0), inp.get("v_scale", 1.0),
        logit_cap=case["soft_cap"], sinks=inp["sinks"], has_mla=case["mla"],
        page_size=case["page_size"])
    return out.double().numpy()


def run_extend(case, inp):
    """extend_attention_fwd as TritonAttnBackend.forward_extend calls it; float64 [T, Hq, Dv].
    The new tokens' K/V are already in the pool (the backend saves them first) and are passed
    again as k_extend, v_extend; the prefix is read through kv_indices."""
    q, k, v = inp["q"], inp["k_buffer"], inp["v_buffer"]
    w = case["sliding_window_size"]
    prefixes, extend_slots = [], []
    for (q_len, kv_len), slots in zip(case["seqs"], inp["slots"]):
        p = kv_len - q_len
        n = min(p, w) if w > 0 else p
        prefixes.append(slots[p - n:p])
        extend_slots.append(slots[p:])
    ext = torch.cat(extend_slots)
    q_lens = [q_len for q_len, _ in case["seqs"]]
    qo_indptr = torch.tensor([0] + q_lens).cumsum(0).to(torch.int64)
    kv_indptr = torch.tensor([0] + [len(x) for x in prefixes]).cumsum(0).to(torch.int32)
    kv_indices = torch.cat(prefixes).to(torch.int64)
    if inp.get("extend_views"):  # contiguous slots: k_extend, v_extend are views of the pool
        assert bool((ext.diff() == 1).all()), "extend_views needs consecutive extend slots"
        k_ext, v_ext = k[int(ext[0]):int(ext[-1]) + 1], v[int(ext[0]):int(ext[-1]) + 1]
    else:
        k_ext = k[ext].contiguous()
        v_ext = k_ext[..., :v.shape[-1]] if case["mla"] else v[ext].contiguous()
    out = torch.zeros(q.shape[0], q.shape[1], v.shape[-1], dtype=q.dtype)
    extend_attention_fwd(
        q, k_ext, v_ext, out, k, v, qo_indptr, kv_indptr, kv_indices, None, True, None,
        max(q_lens), 1.0, 1.0, sm_scale=sm_scale(case), logit_cap=case["soft_cap"],
        sliding_window_size=w if w > 0 else -1, sinks=inp["sinks"], page_size=case["page_size"])
    return out.double().numpy()


def run_kernel(case, inp):
    return run_decode(case, inp) if case["kind"] == "decode" else run_extend(case, inp)


def page_table(case, inp):
    """attnref's view of the pool: pages [num_pages, page_size, Hkv, D] ("nhd") and each request's
    pages in order."""
    page = case["page_size"]
    rows = [slots[::page] // page for slots in inp["slots"]]
    width = max(len(r) for r in rows)
    table = torch.zeros(len(rows), width, dtype=torch.int32)
    for i, r in enumerate(rows):
        table[i, :len(r)] = r.to(torch.int32)
    k, v = inp["k_buffer"], inp["v_buffer"]
    return k.view(-1, page, *k.shape[1:]), v.view(-1, page, *v.shape[1:]), table


def run_attnref(case, inp):
    """attnref's reference with SGLang's conventions; float64."""
    k_pages, v_pages, table = page_table(case, inp)
    kv_lens = torch.tensor([kv for _, kv in case["seqs"]], dtype=torch.int32)
    options = {"sm_scale": sm_scale(case), "soft_cap": case["soft_cap"] or None,
               "sinks": None if inp["sinks"] is None else inp["sinks"].float(),
               "sliding_window": attnref_window(case)}
    if case["kind"] == "decode":
        out = attnref.paged_attention(inp["q"], k_pages, v_pages, kv_lens, table,
                                      kv_layout="nhd", **options)
        return np.asarray(out, dtype=np.float64)
    if case["head_dim_v"] == case["head_dim"]:
        cu = torch.tensor([0] + [q for q, _ in case["seqs"]]).cumsum(0).to(torch.int32)
        out = attnref.ragged_paged_attention(inp["q"], (k_pages, v_pages), kv_lens, table, cu,
                                             len(case["seqs"]), kv_layout="nhd", **options)
        return np.asarray(out, dtype=np.float64)
    # V narrower than K: splash, one request at a time, bottom-right causal (and window).
    window = options.pop("sliding_window")
    outs, start = [], 0
    for (q_len, kv_len), slots in zip(case["seqs"], inp["slots"]):
        q = inp["q"][start:start + q_len].transpose(0, 1)
        k = inp["k_buffer"][slots].transpose(0, 1)
        v = inp["v_buffer"][slots].transpose(0, 1)
        offset = kv_len - q_len
        mask = ("causal", offset) if window is None else ("local", window - 1, 0, offset)
        o = attnref.splash_attention(q, k, v, mask=mask, block_q=q_len, block_kv=kv_len, **options)
        outs.append(np.asarray(o, dtype=np.float64).transpose(1, 0, 2))
        start += q_len
    return np.concatenate(outs)


def reference(case, inp, window="sglang", kv_row=None, alibi=None):
    """float64 attention from the math. Row r of a request with q_len queries and kv_len keys
    sits at p = kv_len - q_len + r and sees keys t <= p with p - t < W (W the window in keys,
    the query's own included; window "sglang": SGLang's, see attnref_window; or a number; None:
    all); logit s = scale q.k, then c tanh(s / c), then + slope (t - p) with ALiBi slopes; softmax
    over the keys and the sink logit. kv_row(slot, h) gives the flat pool row K/V are read from
    for query head h (default: KV head h // (Hq / Hkv))."""
    q = inp["q"].double().numpy()
    k = inp["k_buffer"].double().numpy()
    v = inp["v_buffer"].double().numpy()
    hq, hkv = case["num_q_heads"], case["num_kv_heads"]
    if window == "sglang":
        window = attnref_window(case)
    group = max(hq // hkv, 1)
    kv_row = kv_row or (lambda slot, h: slot * hkv + h // group)
    k_flat, v_flat = k.reshape(-1, k.shape[-1]), v.reshape(-1, v.shape[-1])
    out = np.zeros((q.shape[0], hq, v.shape[-1]))
    start = 0
    for (q_len, kv_len), slots in zip(case["seqs"], inp["slots"]):
        slots = slots.numpy()
        pos = kv_len - q_len + np.arange(q_len)[:, None]
        t = np.arange(kv_len)[None, :]
        visible = (t <= pos) & ((pos - t < window) if window else True)
        for h in range(hq):
            rows = kv_row(slots, h)
            s = q[start:start + q_len, h] @ k_flat[rows].T * sm_scale(case)
            if case["soft_cap"]:
                s = case["soft_cap"] * np.tanh(s / case["soft_cap"])
            if alibi is not None:
                s = s + alibi[h] * (t - pos)
            sink = None if inp["sinks"] is None else float(inp["sinks"][h])
            out[start:start + q_len, h] = softmax_rows(np.where(visible, s, -np.inf),
                                                       v_flat[rows], sink)
        start += q_len
    return out


def tolerance(case):
    return (DECODE_ATOL, DECODE_RTOL) if case["kind"] == "decode" else (EXTEND_ATOL, EXTEND_RTOL)


def within(got, want, atol, rtol):
    """torch.testing.assert_close's test, and the max abs difference (NaN counts as infinite)."""
    diff = np.nan_to_num(np.abs(got - want), nan=np.inf)
    return bool(np.all(diff <= atol + rtol * np.abs(want))), float(diff.max()) if diff.size else 0.0


# ---- the judge ------------------------------------------------------------------------------

def kernel_path(case):
    if case["kind"] == "decode":
        if case["mla"]:
            return "decode, MLA (has_mla, grouped kernel)"
        return "decode, MHA kernel (Hq = Hkv)" if case["num_q_heads"] == case["num_kv_heads"] \
            else "decode, grouped kernel (GQA/MQA)"
    prefix = any(kv > q for q, kv in case["seqs"])
    return "extend behind a cached prefix" if prefix else "extend, no prefix"


def families(case):
    """The table rows a case counts in: its kernel path, its features, head dims, page, dtype."""
    feats = [name for name, on in (("sliding window", case["sliding_window_size"]),
                                   ("soft cap", case["soft_cap"]), ("sinks", case["sinks"])) if on]
    dims = f"{case['head_dim']}" if case["head_dim"] == case["head_dim_v"] else \
        f"{case['head_dim']}/{case['head_dim_v']}"
    return ([("path", kernel_path(case))] + [("feature", f) for f in feats or ["none of those"]]
            + [("head_dim", dims), ("page", str(case["page_size"])), ("dtype", case["dtype"])])


def describe(case):
    return (f"{case['kind']} {case['dtype']} Hq={case['num_q_heads']} Hkv={case['num_kv_heads']} "
            f"D={case['head_dim']}/{case['head_dim_v']} page={case['page_size']} "
            f"seqs(q_len, kv_len)={case['seqs']} sliding_window_size={case['sliding_window_size']} "
            f"cap={case['soft_cap']} sinks={case['sinks']} splits={case['splits']}")


def judge(examples, seed):
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    rows, failures = {}, []
    for _ in range(examples):
        case = draw_case(rng)
        inp = make_inputs(case, gen)
        want = reference(case, inp)
        atol, rtol = tolerance(case)
        k_ok, k_diff = within(run_kernel(case, inp), want, atol, rtol)
        a_ok, a_diff = within(run_attnref(case, inp), want, atol, rtol)
        tally(rows, families(case), k_ok and a_ok, k_diff, a_diff)
        if not (k_ok and a_ok):
            failures.append((case, k_ok, k_diff, a_ok, a_diff))
    return rows, failures


# ---- the hazards ----------------------------------------------------------------------------

def hazard_case(**over):
    case = {"kind": "decode", "dtype": "float32", "num_q_heads": 8, "num_kv_heads": 2,
            "head_dim": 64, "head_dim_v": 64, "mla": False, "page_size": 1,
            "seqs": [(1, 37), (1, 20)], "sliding_window_size": 0, "soft_cap": 0.0,
            "sinks": False, "splits": [2, 1]}
    case.update(over)
    return case


def hazard_heads(gen):
    """num_q_heads not a multiple of num_kv_heads: both kernels take kv_group_num = Hq // Hkv and
    KV head h // kv_group_num, so heads past Hkv * (Hq // Hkv) index a KV head >= Hkv: the row
    h // g - Hkv of the next slot (or of the next token of k_extend). The slots are contiguous and
    the pool has spare slots, so those reads stay inside the buffers and can be modelled."""
    results = []
    for kind, hq, hkv, seqs in (("decode", 6, 4, [(1, 37), (1, 20)]),
                                ("decode", 7, 2, [(1, 37), (1, 20)]),
                                ("extend", 6, 4, [(9, 30), (5, 5)])):
        case = hazard_case(kind=kind, num_q_heads=hq, num_kv_heads=hkv, seqs=seqs)
        inp = make_inputs(case, gen, contiguous=True)
        inp["extend_views"] = True
        got = run_kernel(case, inp)
        g = hq // hkv
        bad = list(range(hkv * g, hq))
        heads = f"head {bad[0]}" if len(bad) == 1 else f"heads {bad[0]}-{bad[-1]}"
        as_read = reference(case, inp, kv_row=lambda slot, h: slot * hkv + h // g)
        _, model_diff = within(got, as_read, 0, 0)
        # No grouping is right for these heads; the nearest one, KV head h * Hkv // Hq, gives an
        # error of the size a wrong head's would have.
        nearest = reference(case, inp, kv_row=lambda slot, h: slot * hkv + h * hkv // hq)
        _, bad_diff = within(got[:, bad], nearest[:, bad], 0, 0)
        results.append({
            "inputs": f"{kind}, Hq={hq}, Hkv={hkv} (kv_group_num {g}), float32, seqs {seqs}",
            "reproduced": model_diff < 1e-4 and bad_diff > 0.1,
            "measured": (f"{heads} {'reads' if len(bad) == 1 else 'read'} KV head h // {g} "
                         f">= {hkv}, i.e. the next "
                         f"slot's row (kernel vs that model, all heads: {model_diff:.1e}); the max "
                         f"abs error vs the nearest grouping (KV head h * Hkv // Hq) "
                         f"{bad_diff:.3g}"),
            "attnref": attnref_refuses(hq, hkv, case["head_dim"]),
        })
    try:
        case = hazard_case(num_q_heads=2, num_kv_heads=4)
        run_kernel(case, make_inputs(case, gen))
        fewer = "decode runs"
    except ZeroDivisionError as e:
        fewer = f"decode raises ZeroDivisionError(`{e}`) in _grouped_head_tiles"
    return results, fewer


def hazard_decode_window(gen):
    """The decode window: the backend hands the kernel the last min(seq_len, sliding_window_size)
    keys, the current token included, where extend sees sliding_window_size + 1 (the model's
    window, config.sliding_window). The first key of the model's window is dropped."""
    case = hazard_case(sliding_window_size=7, seqs=[(1, 40), (1, 12), (1, 7)], splits=[2, 1, 1])
    q_scale = 3.0
    inp = make_inputs(case, gen)
    inp["q"] = inp["q"] * q_scale  # peaked logits make the dropped key matter
    got = run_decode(case, inp)
    w = case["sliding_window_size"]
    ok_own, own = within(got, reference(case, inp, window=w), DECODE_ATOL, DECODE_RTOL)
    ok_model, model = within(got, reference(case, inp, window=w + 1), DECODE_ATOL, DECODE_RTOL)
    ext = hazard_case(kind="extend", sliding_window_size=7, seqs=[(4, 40), (3, 12)])
    einp = make_inputs(ext, gen)
    einp["q"] = einp["q"] * q_scale
    ok_ext, ext_diff = within(run_extend(ext, einp), reference(ext, einp, window=w + 1),
                              EXTEND_ATOL, EXTEND_RTOL)
    return {
        "inputs": (f"sliding_window_size {w} (a model window of {w + 1}), decode seqs "
                   f"{[kv for _, kv in case['seqs']]}, extend seqs {ext['seqs']}, float32, q x3"),
        "reproduced": ok_own and not ok_model and ok_ext,
        "measured": (f"decode vs {w} keys {own:.1e}, vs the model's {w + 1} keys {model:.3g} "
                     f"({'within' if ok_model else 'beyond'} tolerance; a request of 7 keys is "
                     f"unaffected); extend vs {w + 1} keys {ext_diff:.1e}"),
    }


def hazard_alibi(gen):
    """ALiBi: neither kernel takes slopes (Baichuan-13B passes them to the attention only on NPU),
    so the bias is left out."""
    case = hazard_case(kind="extend", seqs=[(6, 30), (4, 4)])
    inp = make_inputs(case, gen)
    slopes = [2.0 ** (-8.0 * (h + 1) / case["num_q_heads"]) for h in range(case["num_q_heads"])]
    got = run_kernel(case, inp)
    ok, diff = within(got, reference(case, inp, alibi=slopes), EXTEND_ATOL, EXTEND_RTOL)
    _, plain = within(got, reference(case, inp), 0, 0)
    return {"inputs": f"extend, Hq=8, slopes 2^(-(h+1)), seqs {case['seqs']}, float32",
            "reproduced": not ok and plain < 1e-4,
            "measured": f"vs float64 with ALiBi {diff:.3g}; vs float64 without it {plain:.1e}"}


def hazard_zero_window(gen):
    """sliding_window_size 0 (a model window of 1 key): RadixAttention keeps `sliding_window_size
    or -1` and the kernels test SLIDING_WINDOW_SIZE > 0, so the layer attends to every key."""
    case = hazard_case(kind="extend", seqs=[(5, 25)], sliding_window_size=0)
    inp = make_inputs(case, gen)
    got = run_kernel(case, inp)
    ok, diff = within(got, reference(case, inp, window=1), EXTEND_ATOL, EXTEND_RTOL)
    _, full = within(got, reference(case, inp, window=None), 0, 0)
    return {"inputs": f"extend, sliding_window_size 0, seqs {case['seqs']}, float32",
            "reproduced": not ok and full < 1e-4,
            "measured": f"vs a window of 1 key {diff:.3g}; vs no window {full:.1e}"}


def hazard_empty_decode(gen):
    """A decode request with no keys: stage 2 divides 0 by 0 (attnref returns a zero row)."""
    case = hazard_case(seqs=[(1, 0), (1, 9)], splits=[1, 1])
    inp = make_inputs(case, gen)
    got = run_decode(case, inp)
    nan_rows = bool(np.isnan(got[0]).all())
    ok, diff = within(got[1:], reference(case, inp)[1:], DECODE_ATOL, DECODE_RTOL)
    sinks = hazard_case(seqs=[(1, 0), (1, 9)], splits=[1, 1], sinks=True)
    sinp = make_inputs(sinks, gen)
    with_sinks = run_decode(sinks, sinp)[0]
    return {"inputs": "decode, kv_len 0 and 9, float32",
            "reproduced": nan_rows and ok,
            "measured": (f"the empty request's output is {'all NaN' if nan_rows else 'finite'} "
                         f"(with sinks: max abs output {np.abs(with_sinks).max():.1e}); the other "
                         f"request {diff:.1e}")}


def fp8_tile_model(case, inp, q8, k8, v8, k_scale, v_scale, block_n=32):
    """The grouped decode kernel's fp8 arithmetic in float64, one split: q.K with q rounded to
    fp8, then per tile of block_n keys (_decode_grouped_att_m_fwd's BLOCK) the online softmax
    with the weights rounded to fp8 against the running max before P.V."""
    hq, hkv = case["num_q_heads"], case["num_kv_heads"]
    q, k, v = q8.double().numpy(), k8.double().numpy(), v8.double().numpy()
    out = np.zeros((q.shape[0], hq, v.shape[-1]))
    for b, slots in enumerate(inp["slots"]):
        slots = slots.numpy()
        for h in range(hq):
            kv = h // (hq // hkv)
            s = k[slots, kv] @ q[b, h] * (sm_scale(case) * k_scale)
            e_max, acc, e_sum = -np.inf, 0.0, 0.0
            for t in range(0, len(slots), block_n):
                tile = s[t:t + block_n]
                new_max = max(tile.max(), e_max)
                p = np.exp(tile - new_max)
                p8 = torch.from_numpy(p).float().to(torch.float8_e4m3fn).double().numpy()
                rescale = np.exp(e_max - new_max)
                acc = acc * rescale + p8 @ v[slots[t:t + block_n], kv]
                e_sum = e_sum * rescale + p.sum()
                e_max = new_max
            out[b, h] = acc / e_sum * v_scale
    return out


def fp8_precision(gen):
    """fp8 e4m3 K/V with per-tensor scales (k_scale folded into sm_scale, v_scale on the output).
    The grouped decode kernel casts q to the cache's fp8 type for q.K and the softmax weights to
    it for P.V; the MHA kernel multiplies in float32. Measured against float64 on the dequantized
    K/V with q as given, and against a float64 model of that rounding (the grouped kernel's
    fp8_tile_model; none for the MHA kernel)."""
    results = []
    k_scale, v_scale = 0.5, 0.25
    for hq, hkv in ((4, 4), (8, 2)):
        case = hazard_case(num_q_heads=hq, num_kv_heads=hkv, dtype="bfloat16",
                           seqs=[(1, 50), (1, 23)], splits=[1, 1], head_dim=128, head_dim_v=128)
        inp = make_inputs(case, gen)
        k8 = (inp["k_buffer"].float() / k_scale).to(torch.float8_e4m3fn)
        v8 = (inp["v_buffer"].float() / v_scale).to(torch.float8_e4m3fn)
        got = run_decode(case, dict(inp, k_buffer=k8, v_buffer=v8, k_scale=k_scale,
                                    v_scale=v_scale))
        deq = dict(inp, k_buffer=k8.double() * k_scale, v_buffer=v8.double() * v_scale)
        want = reference(case, deq)
        ok, diff = within(got, want, FP8_ATOL, FP8_RTOL)
        if hq == hkv:
            model = want
        else:
            model = fp8_tile_model(case, inp, inp["q"].float().to(torch.float8_e4m3fn), k8, v8,
                                   k_scale, v_scale)
        _, model_diff = within(got, model, 0, 0)
        k_pages, v_pages, table = page_table(case, dict(inp, k_buffer=k8, v_buffer=v8))

        def as_fp8(x):
            return attnref.view_as(x.contiguous().view(torch.uint8).numpy(), "float8_e4m3fn")

        scales = [np.full(tuple(k_pages.shape[:3]) + (1,), s, np.float32)
                  for s in (k_scale, v_scale)]
        mine = attnref.paged_attention(
            inp["q"], as_fp8(k_pages), as_fp8(v_pages),
            torch.tensor([kv for _, kv in case["seqs"]], dtype=torch.int32), table,
            kv_layout="nhd", k_scales=scales[0], v_scales=scales[1], sm_scale=sm_scale(case))
        a_ok, a_diff = within(np.asarray(mine, dtype=np.float64), want, FP8_ATOL, FP8_RTOL)
        path = "MHA kernel (no fp8 rounding)" if hq == hkv else \
            "grouped kernel (q and P rounded to fp8, 32-key tiles)"
        results.append({"inputs": f"decode, {path}, Hq={hq}, Hkv={hkv}, D=128, bfloat16 q, "
                                  f"k_scale {k_scale}, v_scale {v_scale}, seqs 50, 23",
                        "kernel_ok": ok, "diff": diff, "model_diff": model_diff,
                        "attnref_ok": a_ok, "attnref_diff": a_diff})
    return results


# ---- report ---------------------------------------------------------------------------------

def versions():
    return (", ".join(f"{p} {metadata.version(p)}" for p in ("sglang", "triton", "torch"))
            + f", attnref {attnref.__version__}")


def case_table(rows):
    lines = ["| case family | inputs | within tolerance | max abs diff kernel vs float64 | "
             "attnref vs float64 |", "|---|---|---|---|---|"]
    order = ["path", "feature", "head_dim", "page", "dtype"]
    labels = {"head_dim": "head_dim ", "page": "page size ", "path": "", "feature": "",
              "dtype": ""}
    for (block, name), r in sorted(rows.items(), key=lambda kv: (order.index(kv[0][0]),
                                                                kv[0][1])):
        lines.append(f"| {labels[block]}{name} | {r['inputs']} | {r['ok']}/{r['inputs']} | "
                     f"{r['kernel']:.2e} | {r['attnref']:.2e} |")
    return lines


def hazard_table(heads, fewer, hazards):
    lines = ["| hazard | inputs | reproduced | measured |", "|---|---|---|---|"]
    for h in heads:
        lines.append(f"| heads not a multiple | {h['inputs']} | "
                     f"{'yes' if h['reproduced'] else 'NO'} | {h['measured']}; {h['attnref']} |")
    lines.append(f"| fewer Q heads than KV heads | decode, Hq=2, Hkv=4 | - | {fewer} |")
    for name, h in hazards:
        lines.append(f"| {name} | {h['inputs']} | {'yes' if h['reproduced'] else 'NO'} | "
                     f"{h['measured']} |")
    return lines


def fp8_table(results):
    lines = ["| fp8 e4m3 K/V | kernel within fp8 tolerance | kernel vs float64 | kernel vs its "
             "rounding, modelled in float64 | attnref vs float64 |", "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['inputs']} | {'yes' if r['kernel_ok'] else 'no'} | {r['diff']:.2e} | "
                     f"{r['model_diff']:.2e} | {r['attnref_diff']:.2e} |")
    return lines


def markdown_report(args, case_lines, hazard_lines, fp8_lines, seconds):
    return f"""## SGLang's Triton kernels, run

Generated by `tests/engines/sglang_judge.py --examples {args.examples} --seed {args.seed}`
({seconds:.0f} s); {versions()}, under `TRITON_INTERPRET=1` on the CPU.

SGLang's `decode_attention_fwd` and `extend_attention_fwd`
(`python/sglang/kernels/ops/attention/decode_attention.py`, `extend_attention.py`, what its
`triton` backend launches) run on drawn batches: decode (1 to 3 requests of up to 90 keys, split-K
counts of 1 to {MAX_KV_SPLITS}) on the MHA kernel, the grouped kernel and the MLA path (576/512),
and extend (1 to 3 chunks of 1 to 70 queries, behind cached prefixes of up to 40 keys or none);
1, 2 or 4 KV heads with groups of 1 to 16, head_dim 13 to 128 (80 and 96 too) and V narrower than
K (192/128, 576/512), pages of 1, 4 and 16 tokens behind shuffled slots, float16, bfloat16 and
float32, SGLang sliding_window_size 3 to 16, soft caps of 2 to 30, sinks. The window is handed
over as the backend does (its KV list), so decode sees sliding_window_size keys and extend
sliding_window_size + 1. attnref (`paged_attention`, `ragged_paged_attention`, `splash_attention`
where V is narrower) gets the same tensors with those windows, and both are compared with a float64
reference written from the math; a case is within tolerance when both are, at the tolerances of
SGLang's tests of the kernels (`test/registered/attention/test_triton_attention_kernels.py`:
decode atol {DECODE_ATOL}, rtol {DECODE_RTOL}; extend atol {EXTEND_ATOL}, rtol {EXTEND_RTOL}). A
case counts in one row of each block (path, feature, head_dim, page size, dtype).

Triton's interpreter computes on the bits of bfloat16 (and fp8) in its dots and arithmetic and
truncates float32 -> bfloat16 casts (triton-lang/triton#11584); the judge computes those on the
values and rounds to nearest even, as the GPU does. Nothing of the kernels is changed.

{chr(10).join(case_lines)}

Silent hazards, run:

{chr(10).join(hazard_lines)}

fp8 (e4m3) K/V with per-tensor scales, measured (fp8 tolerance of SGLang's tests: atol
{FP8_ATOL}, rtol {FP8_RTOL}; attnref's column is part of the verdict, the kernel's is not):

{chr(10).join(fp8_lines)}
"""


def print_failures(failures):
    for case, k_ok, k_diff, a_ok, a_diff in failures[:8]:
        print(f"outside tolerance: {describe(case)}\n    kernel vs float64 {k_diff:.3e}"
              f"{'' if k_ok else ' (beyond)'}, attnref vs float64 {a_diff:.3e}"
              f"{'' if a_ok else ' (beyond)'}")


def main():
    args = judge_arguments(__doc__, 30)
    start = time.monotonic()
    rows, failures = judge(args.examples, args.seed)
    gen = torch.Generator().manual_seed(args.seed + 1)
    heads, fewer = hazard_heads(gen)
    hazards = [("decode window one key short", hazard_decode_window(gen)),
               ("ALiBi left out", hazard_alibi(gen)),
               ("sliding_window_size 0 is no window", hazard_zero_window(gen)),
               ("decode request with no keys", hazard_empty_decode(gen))]
    fp8 = fp8_precision(gen)
    seconds = time.monotonic() - start
    case_lines = case_table(rows)
    hazard_lines = hazard_table(heads, fewer, hazards)
    fp8_lines = fp8_table(fp8)
    print_failures(failures)
    print("\n".join(case_lines + [""] + hazard_lines + [""] + fp8_lines))
    print(f"{versions()}; {args.examples} cases, the hazards and fp8 in {seconds:.1f} s")
    for h in heads:
        print(f"heads: {'reproduced' if h['reproduced'] else 'NOT reproduced'} ({h['inputs']})")
    for name, h in hazards:
        print(f"{name}: {'reproduced' if h['reproduced'] else 'NOT reproduced'}")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown_report(args, case_lines, hazard_lines, fp8_lines, seconds))
    # A hazard that does not reproduce is a disagreement too: the rules would claim it.
    ok = (not failures and all(h["reproduced"] for h in heads)
          and all(h["reproduced"] for _, h in hazards) and all(r["attnref_ok"] for r in fp8))
    print(f"sglang judge: {'agree' if ok else 'DISAGREE'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
