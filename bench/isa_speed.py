# SPDX-License-Identifier: Apache-2.0
"""Times the Python module of two or more builds on the same inputs: e.g. the one `pip install .`
gives (runtime dispatch) against a -DATTNREF_NATIVE_ARCH=ON build. Each build runs in its own
process (two builds of attnref cannot share one), rounds alternate between them, and the table
gives the median per build and each build's median over the first's.

Usage: python3 bench/isa_speed.py [--rounds N] NAME=PYTHONPATH NAME=PYTHONPATH ...
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

# One timing per call: the child builds the inputs once, warms up, then times `repeat` calls.
CHILD = r'''
import json, sys, time
import numpy as np
import attnref

case, repeat = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)


def bf16(x):
    return attnref.view_as((x.view(np.uint32) >> 16).astype(np.uint16), "bfloat16")


if case.startswith("paged"):
    batch, hq, hkv, dim, page, ctx = 8, 32, 8, 128, 16, 4096
    pps = ctx // page
    q = rng.standard_normal((batch, hq, dim), dtype=np.float32)
    k = rng.standard_normal((hkv, batch * pps, page, dim), dtype=np.float32)
    v = rng.standard_normal((hkv, batch * pps, page, dim), dtype=np.float32)
    if case.endswith("bf16"):
        k, v = bf16(k), bf16(v)
    lengths = np.full(batch, ctx, np.int32)
    pi = rng.permutation(batch * pps).astype(np.int32).reshape(batch, pps)
    call = lambda: attnref.paged_attention(q, k, v, lengths, pi, num_threads=1)
else:
    heads, seq, dim = 8, 2048, 128
    q, k, v = (rng.standard_normal((heads, seq, dim), dtype=np.float32) for _ in range(3))
    call = lambda: attnref.splash_attention(q, k, v, mask="causal", num_threads=1)
call()
times = []
for _ in range(repeat):
    start = time.perf_counter()
    call()
    times.append(time.perf_counter() - start)
print(json.dumps({"isa": attnref.build_info()["isa"] if hasattr(attnref, "build_info") else "?",
                  "ms": 1e3 * min(times)}))
'''

CASES = {
    "paged/f32/B:8/Hq:32/Hkv:8/D:128/page:16/ctx:4096": "paged_f32",
    "paged/bf16/B:8/Hq:32/Hkv:8/D:128/page:16/ctx:4096": "paged_bf16",
    "prefill/causal/f32/H:8/S:2048/D:128": "prefill_f32",
}


def time_once(path, case, repeat):
    env = dict(os.environ, PYTHONPATH=path)
    env.pop("ATTNREF_ISA", None)
    r = subprocess.run([sys.executable, "-c", CHILD, case, str(repeat)], env=env,
                       capture_output=True, text=True, check=True)
    return json.loads(r.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("builds", nargs="+", help="NAME=PYTHONPATH")
    args = parser.parse_args()
    builds = [b.split("=", 1) for b in args.builds]
    print(f"{'case':52} " + " ".join(f"{n + ' ms':>18}" for n, _ in builds) + "  ratio")
    for label, case in CASES.items():
        ms = {n: [] for n, _ in builds}
        isa = {}
        for _ in range(args.rounds):
            for name, path in builds:
                result = time_once(path, case, args.repeat)
                ms[name].append(result["ms"])
                isa[name] = result["isa"]
        medians = [statistics.median(ms[n]) for n, _ in builds]
        cells = " ".join(f"{m:10.2f} ({isa[n]:>6})" for m, (n, _) in zip(medians, builds))
        ratios = " ".join(f"{m / medians[0]:.3f}" for m in medians[1:])
        print(f"{label:52} {cells}  {ratios}")


if __name__ == "__main__":
    main()
