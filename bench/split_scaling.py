#!/usr/bin/env python3
"""Stage 07's wall time and peak RSS on synthetic graphs of growing size (run by hand; prints figures).

    .venv/bin/python bench/split_scaling.py [--sizes 10000 50000 200000]

Each size: build the graph (bench/synthetic_graphs.py), run stage 02 (not timed), then time stage 07 under
/usr/bin/time -v. Linear growth shows as a flat "s per 10k nodes" column.
"""
import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def timed(cmd):
    r = subprocess.run(["/usr/bin/time", "-v", *cmd], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", r.stderr)
    h, m, s = wall.groups()
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
    return int(h or 0) * 3600 + int(m) * 60 + float(s), rss / 1024


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 50_000, 200_000])
    a = p.parse_args()
    py = sys.executable
    print(f"{'nodes':>8} {'07 wall s':>10} {'s / 10k nodes':>14} {'peak RSS MB':>12}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in a.sizes:
            model = Path(tmp) / f"synth_{n}.onnx"
            res = Path(tmp) / f"res_{n}"
            subprocess.run([py, str(REPO / "bench" / "synthetic_graphs.py"), "--nodes", str(n), "--out", str(model)],
                           check=True, capture_output=True)
            for stage, args in (("02_shapes_flops_bytes.py", ["--model", str(model)]), ("03_merge_profile_metrics.py", [])):
                subprocess.run([py, str(REPO / stage), *args, "--results", str(res)], check=True, capture_output=True)
            wall, rss = timed([py, str(REPO / "07_split_candidates.py"), "--model", str(model), "--results", str(res)])
            import pandas as pd
            nodes = len(pd.read_csv(res / "ops_metrics.csv", usecols=["node"]))
            print(f"{nodes:>8} {wall:>10.2f} {wall / nodes * 1e4:>14.3f} {rss:>12.0f}", flush=True)


if __name__ == "__main__":
    main()
