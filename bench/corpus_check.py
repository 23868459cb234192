#!/usr/bin/env python3
"""`make all` on every model of the corpus (bench/corpus.py), checked against issue 12's acceptance: exit 0, no
unknown-cost op, >= 99% of kernel time attributed, every exported split validates, MACs equal the count from
the shapes ONNX Runtime executed (the manifest's executed_macs) within 0.1%.

    .venv/bin/python -m bench.corpus_check [--only NAME ...] [--runs 3] [--splits 3] [--results results/_corpus]

Each model goes to <results>/<name>/ with its manifest make_args (SHAPE_ARGS, PRESET, INPUTS). Prints one row
per model and the failures; exit 1 when any model fails.
"""
from __future__ import annotations

import argparse
import shlex
import json
import subprocess
import sys
import time
from pathlib import Path

from bench.record import record
from lib.artifacts import read_csv

REPO = Path(__file__).resolve().parent.parent
MANIFEST = REPO / "models" / "corpus" / "manifest.json"


def make_all(e: dict, rdir: Path, runs: int, splits: int) -> tuple[int, str, float]:
    args = [f"MODEL={e['path']}", f"R={rdir}", f"RUNS={runs}", f"SPLITS={splits}"]
    for key in ("SHAPE_ARGS", "PRESET", "INPUTS"):
        v = (e.get("make_args") or {}).get(key)
        if v:
            args.append(f"{key}={v}")
    t = time.time()
    r = subprocess.run(["make", "--no-print-directory", "all", *args], cwd=REPO, capture_output=True, text=True)
    err = next((ln for ln in reversed(r.stderr.splitlines()) if ln.startswith("error:")), r.stderr.strip()[-200:])
    return r.returncode, err, time.time() - t


def check(e: dict, rdir: Path) -> dict:
    """The acceptance figures of one model's results folder."""
    out: dict = {}
    df = read_csv(rdir, "ops_metrics.csv", ("cost_known", "cost_note", "macs"))   # text columns stay text
    out["unknown_cost"] = int((~df["cost_known"]).sum())
    out["upper_bound"] = int(df["cost_note"].str.startswith("upper").sum())
    macs, ref = float(df["macs"].sum()), (e.get("executed_macs") or {}).get("total")
    out["macs_vs_executed"] = None if not ref else macs / ref - 1
    prof = json.loads((rdir / "profile_meta.json").read_text())
    out["coverage"] = prof.get("kernel_time_coverage")
    rep = json.loads((rdir / "validation_report.json").read_text())
    splits = rep.get("splits", [])
    out["splits"] = len(splits)
    out["splits_pass"] = sum(bool(s.get("pass")) for s in splits)
    out["worst_diff"] = max((s["max_abs_diff"] for s in splits if s.get("max_abs_diff") is not None), default=None)
    return out


def verdict(row: dict) -> list[str]:
    bad = []
    if row["rc"] != 0:
        bad.append(f"make all exit {row['rc']}: {row['error']}")
        return bad
    if row["unknown_cost"]:
        bad.append(f"{row['unknown_cost']} unknown-cost nodes")
    if row["coverage"] is not None and row["coverage"] < 0.99:
        bad.append(f"coverage {100 * row['coverage']:.1f}%")
    if row["splits_pass"] < row["splits"]:
        bad.append(f"{row['splits'] - row['splits_pass']} splits fail")
    if row["macs_vs_executed"] is not None and abs(row["macs_vs_executed"]) > 1e-3:
        bad.append(f"MACs {100 * row['macs_vs_executed']:+.2f}% vs executed")
    return bad


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="+", help="these corpus models")
    p.add_argument("--runs", type=int, default=3, help="stage 01 runs (RUNS, default 3)")
    p.add_argument("--splits", type=int, default=3, help="splits exported and validated (SPLITS, default 3)")
    p.add_argument("--results", default=str(REPO / "results" / "_corpus"), help="results root (default: %(default)s)")
    p.add_argument("--record", action="store_true", help="also write the table as printed into bench/RESULTS.md")
    a = p.parse_args(argv)
    lines: list[str] = []

    def say(line: str = "") -> None:     # print, and keep the line for --record (never figures typed by hand)
        print(line, flush=True)
        lines.append(line)

    if not MANIFEST.exists():
        sys.exit(f"error: {MANIFEST} not found: build the corpus first (python -m bench.corpus --build)")
    models = [e for e in json.loads(MANIFEST.read_text())["models"] if not a.only or e["name"] in a.only]
    rows, failures = [], {}
    say(f"{'model':<26} {'rc':>3} {'time s':>7} {'unknown':>7} {'cover %':>8} {'splits':>7} {'worst diff':>10} "
          f"{'MACs vs exec':>12}")
    for e in models:
        rdir = Path(a.results) / e["name"]
        if (e.get("executed_macs") or {}).get("total") is None:   # ONNX Runtime cannot run it (LSTM layout=1)
            say(f"{e['name']:<26} skipped: ONNX Runtime cannot run it ({e.get('notes', '')[:60]})")
            continue
        rc, err, dt = make_all(e, rdir, a.runs, a.splits)
        row = {"model": e["name"], "rc": rc, "error": err, "time_s": dt}
        if rc == 0:
            row.update(check(e, rdir))
        rows.append(row)
        bad = verdict(row)
        if bad:
            failures[e["name"]] = bad
        mv = row.get("macs_vs_executed")
        say(f"{e['name']:<26} {rc:>3} {dt:>7.1f} {row.get('unknown_cost', '-')!s:>7} "
              f"{100 * row['coverage'] if row.get('coverage') is not None else float('nan'):>8.2f} "
              f"{row.get('splits_pass', '-')!s:>3}/{row.get('splits', '-')!s:<3} "
              f"{row['worst_diff'] if row.get('worst_diff') is not None else float('nan'):>10.2e} "
              f"{'n/a' if mv is None else f'{100 * mv:+.4f}%':>12}")
    say(f"\n{len(rows) - len(failures)}/{len(rows)} models pass")
    for name, bad in failures.items():
        say(f"  {name}: {'; '.join(bad)}")
    if a.record:
        record("corpus_check", "```\n" + "\n".join(lines) + "\n```\n",
               command=shlex.join(["python", "-m", "bench.corpus_check", *(argv if argv is not None else sys.argv[1:])]))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
