"""What the engine judges share: their command line (all of them), and for those that run
kernels (triton_judge.py, sglang_judge.py) the float64 softmax with a sink, the table of case
families, and attnref's head check."""
import argparse

import attnref
import numpy as np


def judge_arguments(doc, examples):
    """--examples (default `examples`), --seed and --markdown, described by the judge's `doc`."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--examples", type=int, default=examples)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--markdown", help="write the result section to this file")
    return parser.parse_args()


def softmax_rows(s, v, sink):
    """softmax(s) @ v per row, in float64, with a sink's exp(sink) in each denominator; a row
    with no key and no sink is 0."""
    m = s.max(axis=1, keepdims=True) if s.shape[1] else np.full((s.shape[0], 1), -np.inf)
    if sink is not None:
        m = np.maximum(m, sink)
    p = np.exp(s - m)
    denom = p.sum(axis=1, keepdims=True) + (np.exp(sink - m) if sink is not None else 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(denom > 0, p @ v / np.where(denom > 0, denom, 1.0), 0.0)


def tally(rows, families, ok, kernel_diff, attnref_diff):
    """Counts one case in each of its families' rows: inputs, within tolerance, max diffs."""
    for key in families:
        r = rows.setdefault(key, {"inputs": 0, "ok": 0, "kernel": 0.0, "attnref": 0.0})
        r["inputs"] += 1
        r["ok"] += ok
        r["kernel"] = max(r["kernel"], kernel_diff)
        r["attnref"] = max(r["attnref"], attnref_diff)


def attnref_refuses(hq, hkv, d):
    """What attnref's own head check says of a layer."""
    try:
        attnref.check_config(hq, hkv, d)
    except ValueError as e:
        return f"attnref.check_config refuses it (`{str(e).split(' (hint')[0]}`)"
    return "attnref.check_config accepts it"
