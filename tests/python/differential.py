# SPDX-License-Identifier: Apache-2.0
"""A differential run at engine-like sizes: random paged, ragged or splash calls (features,
K/V dtypes, layouts, block sizes and thread counts drawn per case) through the attnref module,
each against the float64 oracle of oracle.py. Not part of the pytest suite (its cases are larger
and slower than the suite's): run it by hand after a kernel change.

  PYTHONPATH=build/release/python python3 tests/python/differential.py paged --seed 1 --cases 300

Prints one line per mismatched case (and per case with --verbose), then a count; exits 1 if any
case mismatched. Tolerances: out within 3e-5 * max|V| + 3e-4 * |want| (f32 q; bf16 q rounds the
output to bfloat16: 1e-2 of each), lse within 1e-4 * (1 + max|lse|) + 1e-4 * |want|; splash's
gradients within 1e-4 * (1 + max|want|) + 1e-3 * |want|."""
import argparse
import os
import sys

import numpy as np

import attnref

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402
from oracle import bf16_bits, bf16_values  # noqa: E402


def e4m3_values():
    """The values of the 256 float8_e4m3fn codes (NaN for S.1111.111)."""
    t = np.zeros(256)
    for c in range(256):
        e, m = (c >> 3) & 15, c & 7
        if e == 15 and m == 7:
            v = np.nan
        elif e == 0:
            v = m / 8 * 2.0 ** -6
        else:
            v = (1 + m / 8) * 2.0 ** (e - 7)
        t[c] = -v if c & 0x80 else v
    return t


E4M3 = e4m3_values()


def kv_codes(rng, shape, dtype):
    """(the array's storage: float32, float16, bf16 bits, int8 or e4m3 codes; its float64 values
    before any scale)."""
    x = rng.standard_normal(shape).astype(np.float32)
    if dtype == "f32":
        return x, x.astype(np.float64)
    if dtype == "half":
        h = x.astype(np.float16)
        return h, h.astype(np.float64)
    if dtype == "bf16":
        b = bf16_bits(x)
        return b, bf16_values(b).astype(np.float64)
    if dtype == "int8":
        i = rng.integers(-127, 128, size=shape).astype(np.int8)
        return i, i.astype(np.float64)
    c = rng.integers(0, 256, size=shape).astype(np.uint8)
    c[(c & 0x7F) == 0x7F] = 0x38  # NaN codes to 1.0: the data tier refuses them in live rows
    return c, E4M3[c]


def tagged(storage, dtype):
    """The storage as the module reads it (bf16 and e4m3 tagged with view_as)."""
    if dtype == "bf16":
        return attnref.view_as(storage, "bfloat16")
    if dtype == "e4m3":
        return attnref.view_as(storage, "float8_e4m3fn")
    return storage


def mismatches(got, want, atol, rtol):
    """(elements outside atol + rtol * |want|, NaN matching NaN and equal infinities allowed;
    the largest error)."""
    got = np.asarray(got, np.float64)
    with np.errstate(invalid="ignore"):
        err = np.abs(got - want)
        bad = ~(err <= atol + rtol * np.abs(want)) & ~(np.isnan(got) & np.isnan(want)) & (got != want)
    return int(bad.sum()), float(np.nanmax(err, initial=0.0))


def features(rng, opts, hq, max_window):
    if rng.random() < 0.3:
        opts["soft_cap"] = float(rng.choice([5.0, 30.0]))
    if rng.random() < 0.3:
        opts["sliding_window"] = int(rng.integers(1, max_window + 1))
    if rng.random() < 0.3:
        opts["sinks"] = rng.standard_normal(hq).astype(np.float32)
    if rng.random() < 0.3:
        opts["alibi_slopes"] = rng.uniform(0, 0.1, hq).astype(np.float32)


def paged_case(rng):
    hkv, group = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 2, 4, 8]))
    hq, dim = hkv * group, int(rng.choice([64, 80, 96, 128]))
    page, batch = int(rng.choice([1, 4, 16, 32, 64, 128])), int(rng.integers(1, 6))
    max_len = int(rng.choice([1, 17, 200, 700]))
    pps = -(-max_len // page)
    total = batch * pps + int(rng.integers(0, 5))
    lengths = rng.integers(1, max_len + 1, size=batch).astype(np.int32)
    page_indices = rng.permutation(total)[: batch * pps].reshape(batch, pps).astype(np.int32)
    layout = str(rng.choice(["jax", "nhd", "hnd"]))
    kv_dtype = str(rng.choice(["f32", "half", "bf16", "int8", "e4m3"]))
    q_dtype = str(rng.choice(["f32", "bf16"]))
    shape = (hkv, total, page, dim)  # JAX's layout; nhd and hnd are transposed copies
    k, k_values = kv_codes(rng, shape, kv_dtype)
    v, v_values = kv_codes(rng, shape, kv_dtype)
    opts = {}
    if kv_dtype == "int8" or (kv_dtype == "e4m3" and rng.random() < 0.7):
        per_element = rng.random() < 0.5
        scale_shape = shape[:3] + ((dim,) if per_element else (1,))
        k_scales = rng.uniform(0.01, 0.1, scale_shape).astype(np.float32)
        v_scales = rng.uniform(0.01, 0.1, scale_shape).astype(np.float32)
        divisor = 127.5 if kv_dtype == "int8" else 1.0  # w * s / 127.5, fp8(w) * s
        k_values = k_values * k_scales / divisor
        v_values = v_values * v_scales / divisor
        opts["k_scales"], opts["v_scales"] = k_scales, v_scales
    q32 = rng.standard_normal((batch, hq, dim)).astype(np.float32)
    if q_dtype == "bf16":
        q_bits = bf16_bits(q32)
        q, q_values = attnref.view_as(q_bits, "bfloat16"), bf16_values(q_bits).astype(np.float64)
    else:
        q, q_values = q32, q32.astype(np.float64)
    sm_scale = dim ** -0.5 * float(rng.choice([0.5, 1.0, 3.0]))
    if kv_dtype == "int8":
        sm_scale *= 10  # scaled int8 values are small: logits of a few units
    features(rng, opts, hq, max_len)
    threads = int(rng.choice([1, 2, 3, 4]))
    axes = {"jax": (0, 1, 2, 3), "nhd": (1, 2, 0, 3), "hnd": (1, 0, 2, 3)}[layout]
    in_layout = lambda x: np.ascontiguousarray(np.transpose(x, axes))  # noqa: E731
    run_opts = dict(opts, kv_layout=layout)
    for name in ("k_scales", "v_scales"):
        if name in run_opts:
            run_opts[name] = in_layout(run_opts[name])
    out, lse = attnref.paged_attention(
        q, tagged(in_layout(k), kv_dtype), tagged(in_layout(v), kv_dtype), lengths, page_indices,
        sm_scale=sm_scale, return_lse=True, num_threads=threads, **run_opts)
    want, want_lse = oracle.paged(q_values, k_values, v_values, lengths, page_indices,
                                  sm_scale=sm_scale, soft_cap=opts.get("soft_cap"),
                                  sliding_window=opts.get("sliding_window"),
                                  sinks=opts.get("sinks"), alibi_slopes=opts.get("alibi_slopes"))
    loose = q_dtype == "bf16"
    v_max = np.abs(v_values).max()
    bad = [("out",) + mismatches(out, want, (1e-2 if loose else 3e-5) * v_max,
                                 1e-2 if loose else 3e-4),
           ("lse",) + mismatches(lse, want_lse, 1e-4 * (1 + np.abs(want_lse).max()), 1e-4)]
    return (f"B={batch} Hq={hq} Hkv={hkv} D={dim} page={page} max_len={max_len} layout={layout} "
            f"kv={kv_dtype} q={q_dtype} threads={threads} options={sorted(opts)}"), bad


def ragged_case(rng):
    hkv, group = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 2, 4, 8]))
    hq, dim = hkv * group, int(rng.choice([64, 96, 128]))
    page, max_seqs = int(rng.choice([1, 8, 16, 32, 64])), int(rng.integers(1, 7))
    num_seqs = int(rng.integers(1, max_seqs + 1))
    kv_lens = np.zeros(max_seqs, np.int32)
    q_lens = np.zeros(max_seqs, np.int64)
    for s in range(num_seqs):  # half decode rows, half prefill chunks
        kv_lens[s] = int(rng.integers(1, 600))
        q_lens[s] = 1 if rng.random() < 0.5 else int(rng.integers(1, min(kv_lens[s], 200) + 1))
    pps = -(-int(kv_lens.max()) // page)
    total = max_seqs * pps + 2
    page_indices = rng.permutation(total)[: max_seqs * pps].reshape(max_seqs, pps).astype(np.int32)
    cu_q_lens = np.zeros(max_seqs + 1, np.int32)
    cu_q_lens[1:num_seqs + 1] = np.cumsum(q_lens[:num_seqs])
    cu_q_lens[num_seqs + 1:] = cu_q_lens[num_seqs]
    tokens = int(cu_q_lens[num_seqs]) + int(rng.integers(0, 4))  # padding rows past the last
    kv_dtype = str(rng.choice(["f32", "half", "bf16", "int8", "e4m3"]))
    kv, kv_values = kv_codes(rng, (total, page, 2 * hkv, dim), kv_dtype)
    opts = {}
    if kv_dtype in ("int8", "e4m3") and rng.random() < 0.7:
        opts["k_scale"], opts["v_scale"] = 0.03125, 0.0625  # powers of 2: f32(x * s) is exact
        kv_values = kv_values.copy()
        kv_values[:, :, 0::2] *= opts["k_scale"]
        kv_values[:, :, 1::2] *= opts["v_scale"]
    unscaled_8bit = kv_dtype in ("int8", "e4m3") and "k_scale" not in opts
    sm_scale = dim ** -0.5 / (64.0 if unscaled_8bit else 1.0)
    features(rng, opts, hq, 600)
    q = rng.standard_normal((tokens, hq, dim)).astype(np.float32)
    threads = int(rng.choice([1, 2, 3, 4]))
    out, lse = attnref.ragged_paged_attention(q, tagged(kv, kv_dtype), kv_lens, page_indices,
                                              cu_q_lens, num_seqs, sm_scale=sm_scale,
                                              return_lse=True, num_threads=threads, **opts)
    want, want_lse = oracle.ragged(q, kv_values, kv_lens, page_indices, cu_q_lens, num_seqs,
                                   sm_scale=sm_scale, sliding_window=opts.get("sliding_window"),
                                   soft_cap=opts.get("soft_cap"), sinks=opts.get("sinks"),
                                   alibi_slopes=opts.get("alibi_slopes"))
    live = int(cu_q_lens[num_seqs])  # padding rows are unspecified
    want_lse = want_lse[:live]
    lse_max = np.abs(want_lse[np.isfinite(want_lse)]).max(initial=0.0)
    bad = [("out",) + mismatches(out[:live], want[:live],
                                 3e-5 * np.abs(kv_values[:, :, 1::2]).max(), 3e-4),
           ("lse",) + mismatches(lse[:live], want_lse, 1e-4 * (1 + lse_max), 1e-4)]
    return (f"q_lens={q_lens[:num_seqs].tolist()} kv_lens={kv_lens[:num_seqs].tolist()} "
            f"max_seqs={max_seqs} Hq={hq} Hkv={hkv} D={dim} page={page} kv={kv_dtype} "
            f"threads={threads} options={sorted(opts)}"), bad


def mask_spec(rng, sq, skv):
    """(a mask option of splash_attention, its bool [Sq, Skv])."""
    kind = str(rng.choice(["causal", "full", "local", "chunked", "dense"]))
    if kind == "causal":
        offset = int(rng.integers(-20, 20)) if rng.random() < 0.3 else 0
        return ("causal", offset), oracle.mask_array("causal", sq, skv, offset)
    if kind == "full":
        return "full", oracle.mask_array("full", sq, skv)
    if kind == "local":
        left = int(rng.integers(0, 100)) if rng.random() < 0.8 else None
        right = int(rng.integers(0, 100)) if rng.random() < 0.5 else None
        return ("local", left, right), oracle.mask_array("local", sq, skv, left, right)
    if kind == "chunked":
        size = int(rng.integers(1, 80))
        return ("chunked", size), oracle.mask_array("chunked", sq, skv, size)
    dense = rng.random((sq, skv)) < 0.6
    return dense, dense


def splash_case(rng):
    hkv, group = int(rng.choice([1, 2, 4])), int(rng.choice([1, 2, 4]))
    hq = hkv * group
    mqa = hkv == 1 and rng.random() < 0.5  # k and v passed as [Skv, D]
    sq = int(rng.choice([1, 37, 128, 200, 300]))
    skv = sq if rng.random() < 0.7 else int(rng.choice([1, 64, 250]))
    dqk = int(rng.choice([32, 64, 128]))
    dv = dqk if rng.random() < 0.8 else int(rng.choice([32, 64]))
    q = rng.standard_normal((hq, sq, dqk)).astype(np.float32)
    k = rng.standard_normal((hkv, skv, dqk)).astype(np.float32)
    v = rng.standard_normal((hkv, skv, dv)).astype(np.float32)
    per_head = rng.random() < 0.4
    specs, masks = zip(*(mask_spec(rng, sq, skv) for _ in range(hq if per_head else 1)))
    mask = np.stack(masks) if per_head else np.broadcast_to(masks[0], (hq, sq, skv))
    opts = {"mask": list(specs) if per_head else specs[0], "sm_scale": dqk ** -0.5}
    if rng.random() < 0.3:
        opts["sinks"] = rng.standard_normal(hq).astype(np.float32)
    if rng.random() < 0.3:
        opts["alibi_slopes"] = rng.uniform(0, 0.1, hq).astype(np.float32)
    if sq == skv and rng.random() < 0.2:
        ids = np.sort(rng.integers(0, 3, sq)).astype(np.int32)
        opts["q_segment_ids"], opts["kv_segment_ids"] = ids, ids
    if rng.random() < 0.2:
        opts["sliding_window"] = int(rng.integers(1, 100))
    if rng.random() < 0.2:
        opts["soft_cap"] = float(rng.choice([5.0, 30.0]))
    opts["block_q"], opts["block_kv"] = int(rng.choice([8, 16, 64, 128])), int(rng.choice([8, 16, 64, 128]))
    threads = int(rng.choice([1, 2, 3]))
    kk, vv = (k[0], v[0]) if mqa else (k, v)
    names = [s if isinstance(s, (str, tuple)) else "dense" for s in specs]
    desc = (f"Hq={hq} Hkv={hkv} mqa={mqa} Sq={sq} Skv={skv} Dqk={dqk} Dv={dv} threads={threads} "
            f"options={sorted(opts)} masks={names[:4]}")
    out, lse = attnref.splash_attention(q, kk, vv, return_lse=True, num_threads=threads, **opts)
    want, want_lse = oracle.splash(q, k, v, mask, sm_scale=opts["sm_scale"],
                                   soft_cap=opts.get("soft_cap"), sinks=opts.get("sinks"),
                                   q_seg=opts.get("q_segment_ids"),
                                   kv_seg=opts.get("kv_segment_ids"),
                                   sliding_window=opts.get("sliding_window"),
                                   alibi_slopes=opts.get("alibi_slopes"))
    lse_max = np.abs(want_lse[np.isfinite(want_lse)]).max(initial=0.0)
    bad = [("out",) + mismatches(out, want, 3e-5 * np.abs(v).max(), 3e-4),
           ("lse",) + mismatches(lse, want_lse, 1e-4 * (1 + lse_max), 1e-4)]
    # The oracle's backward has no soft cap, window or segment ids.
    if not {"soft_cap", "sliding_window", "q_segment_ids"} & set(opts) and rng.random() < 0.4:
        dout = rng.standard_normal(out.shape).astype(np.float32)
        dq, dk, dvv, dsinks = attnref.splash_attention_backward(q, kk, vv, dout,
                                                                num_threads=threads, **opts)
        wdq, wdk, wdv, wds = oracle.splash_backward(q, k, v, mask, dout, sm_scale=opts["sm_scale"],
                                                    sinks=opts.get("sinks"),
                                                    alibi_slopes=opts.get("alibi_slopes"))
        if mqa:
            wdk, wdv = wdk[0], wdv[0]
        grads = [("dq", dq, wdq), ("dk", dk, wdk), ("dv", dvv, wdv)]
        if dsinks is not None:
            grads.append(("dsinks", dsinks, wds))
        for name, got, w in grads:
            bad.append((name,) + mismatches(got, w, 1e-4 * (1 + np.abs(w).max()), 1e-3))
        desc += " +backward"
    return desc, bad


CASES = {"paged": paged_case, "ragged": ragged_case, "splash": splash_case}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("family", choices=sorted(CASES))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--verbose", action="store_true", help="a line for every case")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    failed = 0
    for i in range(args.cases):
        desc, bad = CASES[args.family](rng)
        wrong = [f"{name} {n} elements (largest error {err:.3g})" for name, n, err in bad if n]
        failed += bool(wrong)
        if wrong or args.verbose:
            print(f"{'MISMATCH' if wrong else 'ok'} {args.family} #{i}: {desc}"
                  + (": " + ", ".join(wrong) if wrong else ""), flush=True)
    print(f"{args.family}, seed {args.seed}: {args.cases} cases, {failed} mismatched", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
