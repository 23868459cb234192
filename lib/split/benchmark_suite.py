#!/usr/bin/env python3
"""Benchmark suite over the splits in this folder (written by 08_export_splits.py --benchmark-set).

    python benchmark_suite.py [--provider cpu|cuda|tensorrt] [--runs 20]

Runs every b*/run_split.py (each on its folder's inputs.npz when it has one: the values stage 08 validated
with; folders whose export failed are skipped and said so), then aggregates their validation_report.json files into benchmark_results.csv
and, when matplotlib is installed, benchmark_latency.png (full vs part1 + part2 vs composed per split).
"""
import argparse
import csv
import json
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--provider", default="cpu", choices=["cpu", "cuda", "tensorrt"])
    p.add_argument("--runs", type=int, default=10)
    a = p.parse_args()
    splits = sorted((d for d in HERE.iterdir() if d.is_dir() and (d / "run_split.py").exists()),
                    key=lambda d: int(d.name[1:]) if d.name[1:].isdigit() else 0)
    if not splits:
        print("error: no split folders (b<N>/run_split.py) here", file=sys.stderr)
        sys.exit(2)
    rows = []
    for k, d in enumerate(splits, 1):
        print(f"[{k}/{len(splits)}] {d.name}", flush=True)
        meta = json.loads((d / "split_meta.json").read_text()) if (d / "split_meta.json").exists() else {}
        if meta.get("error"):
            print(f"  skipped: stage 08 could not export it ({meta['error']})", flush=True)
            continue
        r = subprocess.run([sys.executable, "run_split.py", "--provider", a.provider, "--runs", str(a.runs)], cwd=d)
        if r.returncode == 2:
            sys.exit(2)
        rep = json.loads((d / "validation_report.json").read_text())
        lat = rep["latency_median"]
        rows.append({"split": d.name, "boundary": rep["boundary"], "pass": rep["pass"], "max_abs_diff": rep["max_abs_diff"],
                     **{k2: round(v, 1) for k2, v in lat.items()}})
    if not rows:
        print("error: no split here could run (see the notes above)", file=sys.stderr)
        sys.exit(2)
    with open(HERE / "benchmark_results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {HERE / 'benchmark_results.csv'}")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(rows)), 4))
    x = range(len(rows))
    ax.bar([i - 0.25 for i in x], [r["full_us"] / 1e3 for r in rows], 0.25, label="full")
    ax.bar(list(x), [r["part1_us"] / 1e3 for r in rows], 0.25, label="part1")
    ax.bar(list(x), [r["part2_us"] / 1e3 for r in rows], 0.25, bottom=[r["part1_us"] / 1e3 for r in rows], label="part2")
    ax.bar([i + 0.25 for i in x], [r["composed_us"] / 1e3 for r in rows], 0.25, label="composed")
    ax.set_xticks(list(x), [r["split"] for r in rows])
    ax.set_ylabel(f"median latency (ms), {a.provider}")
    ax.set_title("split benchmark: full model vs its two parts")
    ax.legend(fontsize=8)
    fig.savefig(HERE / "benchmark_latency.png", dpi=120, bbox_inches="tight")
    print(f"wrote {HERE / 'benchmark_latency.png'}")


if __name__ == "__main__":
    main()
