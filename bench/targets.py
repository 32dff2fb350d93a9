#!/usr/bin/env python3
"""Prints the decode and prefill performance targets with the ratios measured in one
bench/run_all.sh run, and "met" or "not met" for each; writes the same tables to
<out-dir>/benchmark-targets.md.

Usage:
  bench/targets.py --out-dir docs/benchmarks build/release/bench-results/bench_paged.json \
      [build/release/bench-results/bench_ragged.json] [build/release/bench-results/bench_splash.json]

Paged decode: the grouped runs at the reference shape (BM_PagedDecode/grouped/
<dtype>/B:8/Hq:32/Hkv:8/D:128/page:<16|4096>/ctx:4096/threads:<1|2>; medians over repetitions).
Every ratio is between runs of the same process: a dtype's speed-up is f32's median time over its
own at the same page size and thread count; "of probe" is the kernel's K/V bytes per second over
the same-run sequential read of the same pool (the copies of the batch its iterations cycle
through, at least 256 MiB, so that neither reads from the last-level cache), with the most this
kernel could reach if reading cost nothing: the probe's read time over the kernel's own time with
K and V in L2 (BM_PagedDecode/grouped/<dtype>/B:1/Hq:4/Hkv:1/D:128/page:1024/ctx:1024/threads:1, whose work
times 256 is the reference shape's; halved for 2 threads). When that bound is below the target,
the target needs fewer instructions per byte, not a faster memory path. Without those runs the
bound is the FMA probe's (the multiply-adds alone at the same-run FMA rate).

Ragged decode rows: BM_Ragged/decode_only/<grouped|grouped_pool>/<dtype>, each against
the fraction of its own same-run probe (over a pool of at least 256 MiB, as paged's) that paged
must reach (f32 0.60, as paged with pages of 16; 16-bit and 8-bit 0.55).

Splash prefill: BM_Splash<Forward|Backward>/f32/S:<2048|4096>/Hkv:<8|2>/causal, useful
GFLOP/s over the same-run sgemm probe: forward at least 0.70, backward at least 0.50.

Under the tables: the decode cases whose pools were not wholly on transparent huge pages (the
`huge_frac` counter), whose times do not compare with runs that had them.
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
IN_L2 = re.compile(r"^BM_PagedDecode/grouped/(\w+)/B:1/Hq:4/Hkv:1/D:128/page:1024/ctx:1024/"
                   r"threads:1(?:/real_time)?$")
IN_L2_TIMES = 256  # the reference shape's work over the in-L2 case's: (8 x 8 x 4096) / 1024
SPEEDUP = {"bf16": 1.7, "half": 1.7, "int8": 2.5, "e4m3": 2.5}
MIN_OF_PROBE_LOW_BITS = 0.55
F32_OF_PROBE = {16: 0.60, 4096: 0.75}
RAGGED = re.compile(r"^BM_Ragged/decode_only/(grouped|grouped_pool)/(?:q_f32/kv_)?(\w+?)(?:/real_time)?$")
SPLASH = re.compile(r"^BM_Splash(Forward|Backward)/f32/S:(2048|4096)/Hkv:(\d+)/causal")
SPLASH_OF_PROBE = {"Forward": 0.70, "Backward": 0.50}


def runs_of(path, pattern):
    """{match groups: [runs]} of the non-aggregate runs whose name matches."""
    with open(path) as f:
        data = json.load(f)
    reps = defaultdict(list)
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate" or b.get("error_occurred"):
            continue
        m = pattern.match(b.get("run_name", b["name"]))
        if m:
            reps[m.groups()].append(b)
    return reps


def medians(path):
    return {(d, int(p), int(t)): {"ms": statistics.median(r["real_time"] for r in v),
                                  "of_probe": statistics.median(r["frac_probe"] for r in v),
                                  "ceiling": statistics.median(r["of_probe_at_fma_peak"] for r in v),
                                  "gflops": statistics.median(r["GFLOPs"] for r in v),
                                  "fma": statistics.median(r["fma_GFLOPs"] for r in v),
                                  "reps": len(v)}
            for (d, p, t), v in runs_of(path, NAME).items()}


def in_l2_ms(path):
    """{dtype: the in-L2 case's median time in ms, times IN_L2_TIMES}: the reference shape's work
    with every K/V read served from L2, on one thread."""
    return {d: IN_L2_TIMES * statistics.median(r["real_time"] for r in v)
            for (d,), v in runs_of(path, IN_L2).items()}


def bound_text(r, dtype, threads, floors):
    """The measured fraction of the probe and the most this kernel could reach."""
    floor = floors.get(dtype)
    if floor is None:
        return "{:.2f} (at most {:.2f} at the FMA peak)".format(r["of_probe"], r["ceiling"])
    floor /= threads
    read_ms = r["ms"] * r["of_probe"]  # the probe's time for the same bytes
    return "{:.2f} (at most {:.2f} at its in-L2 time, {:.1f} ms)".format(
        r["of_probe"], min(1.0, read_ms / floor), floor)


def layout(page):
    return "pages of 16" if page == 16 else "one page per sequence"


def rows_of(runs, floors):
    rows = []
    for (dtype, page, threads), r in sorted(runs.items()):
        where = "{}, {}, {} thread{}".format(dtype, layout(page), threads, "" if threads == 1 else "s")
        compute = "{:.0f} of {:.0f} GFLOP/s".format(r["gflops"], r["fma"])
        of_probe = bound_text(r, dtype, threads, floors)
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


def ragged_rows(path):
    rows = []
    order = ["f32", "bf16", "half", "int8", "e4m3"]
    runs = runs_of(path, RAGGED)
    for (variant, dtype), v in sorted(runs.items(), key=lambda kv: (kv[0][0], order.index(kv[0][1])
                                                                   if kv[0][1] in order else 99)):
        want = 0.60 if dtype == "f32" else MIN_OF_PROBE_LOW_BITS
        of_probe = statistics.median(r["frac_probe"] for r in v)
        where = "{}, decode-only, {}".format(dtype, "1 thread" if variant == "grouped" else "pool")
        measured = "{:.2f} ({:.1f} of {:.1f} GB/s, {:.2f} ms)".format(
            of_probe, statistics.median(r["GBps"] for r in v),
            statistics.median(r["probe_GBps"] for r in v),
            statistics.median(r["real_time"] for r in v))
        rows.append((where, "of probe >= {:.2f}".format(want), measured, of_probe >= want))
    return rows


def splash_rows(path):
    rows = []
    for (direction, s, hkv), v in sorted(runs_of(path, SPLASH).items(),
                                         key=lambda kv: (kv[0][0] != "Forward", int(kv[0][1]),
                                                         -int(kv[0][2]))):
        want = SPLASH_OF_PROBE[direction]
        of_probe = statistics.median(r["frac_probe"] for r in v)
        where = "{}, S = {}, Hkv = {}, causal, f32, 1 thread".format(direction.lower(), s, hkv)
        measured = "{:.2f} ({:.1f} of {:.1f} GFLOP/s, {} run{})".format(
            of_probe, statistics.median(r["useful_GFLOPs"] for r in v),
            statistics.median(r["probe_GFLOPs"] for r in v), len(v), "" if len(v) == 1 else "s")
        rows.append((where, "of sgemm probe >= {:.2f}".format(want), measured, of_probe >= want))
    return rows


def huge_page_note(paged_path, ragged_path):
    """A line on how much of each decode case's pool was on transparent huge pages (the
    `huge_frac` counter; none in runs before it): without them a random page table costs a TLB
    miss for almost every KV page, so such times do not compare with those of a pooled run."""
    fracs = {}
    for path, pattern in ((paged_path, NAME), (ragged_path, RAGGED)):
        if path:
            for key, v in runs_of(path, pattern).items():
                if all("huge_frac" in r for r in v):
                    fracs["/".join(key)] = min(r["huge_frac"] for r in v)
    if not fracs:
        return None
    short = sorted(k for k, f in fracs.items() if f < 0.99)
    if not short:
        return "Every decode case's pool was on huge pages (`huge_frac` 1)."
    return ("Not wholly on huge pages (`huge_frac`), so their times do not compare with runs on "
            "huge pages: " + ", ".join("{} {:.2f}".format(k, fracs[k]) for k in short) + ".")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out-dir", default=None)
    ap.add_argument("json", nargs="+", help="bench_paged.json, then optionally bench_ragged.json "
                    "and bench_splash.json (told apart by their file names)")
    args = ap.parse_args()
    paged = [p for p in args.json if os.path.basename(p).startswith("bench_paged.")]
    ragged = [p for p in args.json if os.path.basename(p).startswith("bench_ragged.")]
    splash = [p for p in args.json if os.path.basename(p).startswith("bench_splash.")]
    if len(paged) != 1:
        sys.exit("give exactly one bench_paged.json")
    runs = medians(paged[0])
    if not runs:
        sys.exit("no BM_PagedDecode/grouped/<dtype>/... runs in " + paged[0])
    rows = rows_of(runs, in_l2_ms(paged[0]))
    met = sum(1 for r in rows if r[-1])
    total = len(rows)
    lines = ["## Paged decode", "",
             "| paged decode, B=8 Hq=32 Hkv=8 D=128 ctx=4096 | target | measured | kernel vs FMA probe | |",
             "|---|---|---|---|---|"]
    lines += ["| {} | {} | {} | {} | {} |".format(w, t, m, c, "met" if ok else "not met")
              for w, t, m, c, ok in rows]
    for title, path, make in (("Ragged decode rows", ragged, ragged_rows),
                              ("Splash prefill", splash, splash_rows)):
        lines += ["", "## " + title, ""]
        extra = make(path[0]) if path else []
        if not extra:
            lines.append("Not in this run (no {} given, or no matching runs in it).".format(
                "bench_ragged.json" if make is ragged_rows else "bench_splash.json"))
            continue
        met += sum(1 for r in extra if r[-1])
        total += len(extra)
        lines += ["| case | target | measured | |", "|---|---|---|---|"]
        lines += ["| {} | {} | {} | {} |".format(w, t, m, "met" if ok else "not met")
                  for w, t, m, ok in extra]
    note = huge_page_note(paged[0], ragged[0] if ragged else None)
    if note:
        lines += ["", note]
    lines += ["", "{} of {} targets met.".format(met, total)]
    text = "\n".join(lines)
    print(text)
    if args.out_dir:
        with open(os.path.join(args.out_dir, "benchmark-targets.md"), "w") as f:
            f.write("# Performance targets, one bench/run_all.sh run\n\n" + text + "\n")


if __name__ == "__main__":
    main()
