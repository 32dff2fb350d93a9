#!/usr/bin/env python3
"""Prints issue 15's decode targets with the ratios measured in one bench_paged run, and "met" or
"not met" for each; writes the same table to <out-dir>/benchmark-targets.md.

Usage:
  bench/targets.py --out-dir docs build/release/bench-results/bench_paged.json

Reads the grouped runs at the reference shape (BM_PagedDecode/grouped/<dtype>/B:8/Hq:32/Hkv:8/
D:128/page:<16|4096>/ctx:4096/threads:<1|2>; medians over repetitions). Every ratio is between runs of the same process: a dtype's speed-up is f32's
median time over its own at the same page size and thread count; "of probe" is the kernel's
K/V bytes per second over the same-run sequential read of the same buffers, with the most a
kernel could reach if its multiply-adds ran at the same-run FMA probe's rate (when that is below
the target, the target needs more arithmetic throughput than the machine has).
"""
import argparse
import json
import os
import re
import statistics
import sys
from collections import defaultdict

NAME = re.compile(r"^BM_PagedDecode/grouped/(\w+)/B:8/Hq:32/Hkv:8/D:128/page:(16|4096)/ctx:4096/"
                  r"threads:(\d+)(?:/real_time)?$")
SPEEDUP = {"bf16": 1.7, "half": 1.7, "int8": 2.5, "e4m3": 2.5}
MIN_OF_PROBE_LOW_BITS = 0.55
F32_OF_PROBE = {16: 0.60, 4096: 0.75}


def medians(path):
    with open(path) as f:
        data = json.load(f)
    reps = defaultdict(list)
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        m = NAME.match(b.get("run_name", b["name"]))
        if m:
            reps[(m.group(1), int(m.group(2)), int(m.group(3)))].append(b)
    return {k: {"ms": statistics.median(r["real_time"] for r in v),
                "of_probe": statistics.median(r["frac_probe"] for r in v),
                "ceiling": statistics.median(r["of_probe_at_fma_peak"] for r in v),
                "gflops": statistics.median(r["GFLOPs"] for r in v),
                "fma": statistics.median(r["fma_GFLOPs"] for r in v),
                "reps": len(v)} for k, v in reps.items()}


def layout(page):
    return "pages of 16" if page == 16 else "one page per sequence"


def rows_of(runs):
    rows = []
    for (dtype, page, threads), r in sorted(runs.items()):
        where = "{}, {}, {} thread{}".format(dtype, layout(page), threads, "" if threads == 1 else "s")
        compute = "{:.0f} of {:.0f} GFLOP/s".format(r["gflops"], r["fma"])
        of_probe = "{:.2f} (at most {:.2f} at the FMA peak)".format(r["of_probe"], r["ceiling"])
        if dtype == "f32":
            want = F32_OF_PROBE[page]
            rows.append((where, "of probe >= {:.2f}".format(want), of_probe, compute,
                         r["of_probe"] >= want))
            continue
        base = runs.get(("f32", page, threads))
        if base and dtype in SPEEDUP:
            speedup = base["ms"] / r["ms"]
            rows.append((where, "speed-up over f32 >= {:.1f}x".format(SPEEDUP[dtype]),
                         "{:.2f}x ({:.1f} / {:.1f} ms)".format(speedup, base["ms"], r["ms"]),
                         compute, speedup >= SPEEDUP[dtype]))
        rows.append((where, "of probe >= {:.2f}".format(MIN_OF_PROBE_LOW_BITS), of_probe, compute,
                     r["of_probe"] >= MIN_OF_PROBE_LOW_BITS))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", default=None)
    ap.add_argument("json")
    args = ap.parse_args()
    runs = medians(args.json)
    if not runs:
        sys.exit("no BM_PagedDecode/grouped/<dtype>/... runs in " + args.json)
    rows = rows_of(runs)
    lines = ["| paged decode, B=8 Hq=32 Hkv=8 D=128 ctx=4096 | target | measured | kernel vs FMA probe | |",
             "|---|---|---|---|---|"]
    lines += ["| {} | {} | {} | {} | {} |".format(w, t, m, c, "met" if ok else "not met")
              for w, t, m, c, ok in rows]
    lines.append("")
    lines.append("Ragged decode rows and splash prefill (issue 15, items 3 and 4) are not in this "
                 "report: see docs/benchmarks.md.")
    text = "\n".join(lines)
    print(text)
    if args.out_dir:
        with open(os.path.join(args.out_dir, "benchmark-targets.md"), "w") as f:
            f.write("# Decode targets, one bench_paged run\n\n" + text + "\n")


if __name__ == "__main__":
    main()
