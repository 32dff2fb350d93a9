#!/usr/bin/env python3
"""Turns Google Benchmark JSON from attnref's benchmarks into a markdown table and PNG charts.

Usage:
  bench/report.py --out-dir docs/benchmarks results.json [more.json ...]

Writes <out-dir>/benchmark-tables.md (raw tables) and, when matplotlib is installed
(Debian: python3-matplotlib), <out-dir>/paged_decode.png: achieved GB/s against context length per
variant, with the same-run read-bandwidth probes as lines (one stream over the whole pool, and
the same pages in the kernel's order); <out-dir>/paged_dtypes.png: reference-shape decode time
per K/V dtype with its speed-up over f32; and <out-dir>/splash.png when splash
results are present: useful GFLOP/s per mask against the same-run GEMM probe.
With --benchmark_repetitions, medians are used.
"""
import argparse
import json
import os
import re
import statistics
import sys
from collections import defaultdict


def load(paths):
    """Benchmarks by name; medians when repetitions were run, else the single run."""
    runs = defaultdict(list)
    context = None
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        context = context or data.get("context", {})
        for b in data["benchmarks"]:
            if b.get("run_type") == "aggregate":
                continue
            if b.get("error_occurred"):
                continue
            runs[b.get("run_name", b["name"])].append(b)
    merged = {}
    for name, reps in runs.items():
        first = dict(reps[0])
        for key, value in first.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                first[key] = statistics.median(r[key] for r in reps if key in r)
        first["repetitions"] = len(reps)
        merged[name] = first
    return merged, context or {}


def args_of(name):
    """{'variant': 0, 'B': 8, ...} from 'BM_X/variant:0/B:8/...'."""
    return {k: int(v) for k, v in re.findall(r"/(\w+):(-?\d+)", name)}


def words_of(name):
    """('grouped', 'f32') from 'BM_PagedDecode/grouped/f32/B:8/...'."""
    parts = name.split("/")
    return parts[1], parts[2]


def ms(b):
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[b.get("time_unit", "ns")]
    return b["real_time"] * scale


def paged_table(results):
    rows = []
    for name, b in results.items():
        if not name.startswith("BM_PagedDecode"):
            continue
        a = args_of(name)
        a["variant"], a["dtype"] = words_of(name)
        rows.append((a, b))
    if not rows:
        return ""
    rows.sort(key=lambda r: (r[0].get("ctx"), r[0].get("B"), r[0].get("Hq"), r[0].get("D"),
                             r[0].get("page"), r[0].get("dtype"), r[0].get("threads"),
                             r[0].get("variant")))
    out = ["| variant | B | Hq/Hkv | D | page | ctx | KV | threads | ms (median) | GB/s | probe GB/s | of probe | page-order GB/s | of page-order | GFLOP/s | FMA probe |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for a, b in rows:
        pages = "{:.1f} | {:.0%}".format(b["pages_GBps"], b["frac_pages"]) if "pages_GBps" in b else " | "
        flops = "{:.0f} | {:.0f}".format(b["GFLOPs"], b["fma_GFLOPs"]) if "GFLOPs" in b else " | "
        t = ms(b)  # the in-L2 cases take hundredths of a millisecond
        out.append("| {} | {} | {}/{} | {} | {} | {} | {} | {} | {} | {:.1f} | {:.1f} | {:.0%} | {} | {} |".format(
            b.get("label", ""), a["B"], a["Hq"], a["Hkv"], a["D"], a["page"], a["ctx"],
            a["dtype"], a["threads"], "{:.2f}".format(t) if t >= 1 else "{:.4f}".format(t),
            b["GBps"], b["probe_GBps"], b["frac_probe"], pages, flops))
    return "\n".join(out)


def generic_table(results, prefix):
    rows = [(n, b) for n, b in results.items() if n.startswith(prefix)]
    if not rows:
        return ""
    counters = sorted({k for _, b in rows for k, v in b.items()
                       if isinstance(v, (int, float)) and k not in (
                           "real_time", "cpu_time", "iterations", "repetitions", "repetition_index",
                           "threads", "family_index", "per_family_instance_index")})
    out = ["| benchmark | ms (median) | " + " | ".join(counters) + " |",
           "|---|---|" + "---|" * len(counters)]
    for n, b in sorted(rows):
        vals = ["{:.3g}".format(b[c]) if c in b else "" for c in counters]
        out.append("| {} {} | {:.3f} | {} |".format(n, b.get("label", ""), ms(b), " | ".join(vals)))
    return "\n".join(out)


def paged_chart(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    series = defaultdict(list)
    probe = defaultdict(list)
    page_order = defaultdict(list)
    for name, b in results.items():
        a = args_of(name)
        if not name.startswith("BM_PagedDecode") or a.get("B") != 2 or a.get("threads") != 1:
            continue
        if words_of(name)[1] != "f32" or a.get("Hq") != 32 or a.get("D") != 128 or a.get("page") != 16:
            continue
        series[b.get("label", "?")].append((a["ctx"], b["GBps"]))
        probe[a["ctx"]].append(b["probe_GBps"])
        if "pages_GBps" in b:
            page_order[a["ctx"]].append(b["pages_GBps"])
    if not series:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label in ("grouped", "per_head", "naive"):
        if label in series:
            pts = sorted(series[label])
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    ctxs = sorted(probe)
    ax.plot(ctxs, [statistics.median(probe[c]) for c in ctxs], "k--",
            label="read-bandwidth probe (same run)")
    if page_order:
        ctxs = sorted(page_order)
        ax.plot(ctxs, [statistics.median(page_order[c]) for c in ctxs], "k:",
                label="same pages, kernel's order, read only (same run)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("context length (tokens)")
    ax.set_ylabel("GB/s of unique KV bytes")
    ax.set_title("attnref paged decode, f32, B=2, Hq=32, Hkv=8, D=128, page 16, 1 thread")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def dtype_chart(results, path):
    """Reference-shape decode time per K/V dtype (grouped, 1 thread), pages of 16 and one page per
    sequence side by side, each bar labelled with its speed-up over f32 in the same run."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    order = ["f32", "bf16", "half", "int8", "e4m3"]
    times = defaultdict(dict)
    for name, b in results.items():
        a = args_of(name)
        if not name.startswith("BM_PagedDecode/grouped/") or a.get("B") != 8 or a.get("ctx") != 4096:
            continue
        if a.get("Hq") != 32 or a.get("D") != 128 or a.get("threads") != 1:
            continue
        if a.get("page") in (16, 4096):
            times[a["page"]][words_of(name)[1]] = ms(b)
    if not all(p in times and all(d in times[p] for d in order) for p in (16, 4096)):
        return False
    fig, ax = plt.subplots(figsize=(7, 4.2))
    width = 0.38
    for i, (page, label) in enumerate(((16, "pages of 16 tokens"), (4096, "one page per sequence"))):
        xs = [x + (i - 0.5) * width for x in range(len(order))]
        ys = [times[page][d] for d in order]
        bars = ax.bar(xs, ys, width, label=label)
        for bar, d in zip(bars, order):
            ax.annotate("{:.2f}x".format(times[page]["f32"] / times[page][d]),
                        (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels(order)
    ax.set_ylabel("ms per decode step (median)")
    ax.set_title("attnref paged decode by K/V dtype, B=8 Hq=32 Hkv=8 D=128 ctx=4096, 1 thread\n"
                 "(labels: speed-up over f32 in the same run)", fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def splash_chart(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    bars, probes = [], []
    for name, b in sorted(results.items()):
        if not name.startswith("BM_Splash"):
            continue
        gf = next((b[k] for k in ("GFLOPs", "GFLOP/s", "useful_GFLOPs", "GFLOPps") if k in b), None)
        pr = next((b[k] for k in ("gemm_GFLOPs", "probe_GFLOPs", "gemm_probe_GFLOPs") if k in b), None)
        if gf is None:
            continue
        short = re.sub(r"/(iterations|repeats):\d+|/real_time", "", name.replace("BM_", ""))
        bars.append((short + " " + b.get("label", ""), gf))
        if pr is not None:
            probes.append(pr)
    if not bars:
        return False
    fig, ax = plt.subplots(figsize=(8, 0.32 * len(bars) + 1.5))
    ax.barh([b[0] for b in bars], [b[1] for b in bars])
    if probes:
        ax.axvline(statistics.median(probes), color="k", linestyle="--",
                   label="Eigen sgemm probe (same run)")
        ax.legend()
    ax.set_xlabel("useful GFLOP/s (allowed blocks only)")
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out-dir", default="docs/benchmarks")
    parser.add_argument("json", nargs="+")
    args = parser.parse_args()
    results, context = load(args.json)
    os.makedirs(args.out_dir, exist_ok=True)
    sections = ["Machine: {} CPUs at {} MHz; Google Benchmark library: {} build (attnref's benchmarks are -O3 -march=native); date {}.".format(
        context.get("num_cpus", "?"), context.get("mhz_per_cpu", "?"),
        context.get("library_build_type", "?"), context.get("date", "?"))]
    tiers = "\n\n".join(t for t in (generic_table(results, "BM_ShapeTier"),
                                   generic_table(results, "BM_MetadataTier"),
                                   generic_table(results, "BM_DataTier")) if t)
    for title, table in (("Paged decode", paged_table(results)),
                         ("Paged validation tiers", tiers),
                         ("Splash", generic_table(results, "BM_Splash")),
                         ("Ragged", generic_table(results, "BM_Ragged"))):
        if table:
            sections.append("### " + title + "\n\n" + table)
    with open(os.path.join(args.out_dir, "benchmark-tables.md"), "w") as f:
        f.write("\n\n".join(sections) + "\n")
    try:
        if paged_chart(results, os.path.join(args.out_dir, "paged_decode.png")):
            print("wrote", os.path.join(args.out_dir, "paged_decode.png"))
        if dtype_chart(results, os.path.join(args.out_dir, "paged_dtypes.png")):
            print("wrote", os.path.join(args.out_dir, "paged_dtypes.png"))
        if splash_chart(results, os.path.join(args.out_dir, "splash.png")):
            print("wrote", os.path.join(args.out_dir, "splash.png"))
    except ImportError:
        print("matplotlib not installed (apt-get install python3-matplotlib): tables only",
              file=sys.stderr)
    print("wrote", os.path.join(args.out_dir, "benchmark-tables.md"))


if __name__ == "__main__":
    main()
