#!/usr/bin/env python3
"""The unseen trained models of bench/predict_unseen.py as a user runs them: stages 02, 01 and 03, one measurement
each, the prediction scored against 01's session latency (issue 30's check, after make calibrate).

    .venv/bin/python bench/unseen_stages.py [--models NAME ...] [--sessions 5] [--passes 1] [--record]

Per model: 01's measured session latency (its --sessions sessions of 10 runs), the kernel model's prediction at
the calibration host's speed and at the speed of the host reference 01 measured after each session
(lib/latency/host_reference.py; merge_meta.json's calibration_host_latency_us and predicted_latency_us), the
factor. The summary scores both. With --passes, everything again: how far a measurement moves between passes.
"""
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _models import REPO, calibrated_here, Printed, parser, refuse, run_stage
from predict_unseen import DEFAULT, summary

sys.path.insert(0, str(REPO))

from bench.corpus import MANIFEST  # noqa: E402
from lib.errors import StageError  # noqa: E402
from lib.latency.profiling import SESSIONS  # noqa: E402
from lib.latency.sweep import run_stages  # noqa: E402


def staged(e: dict, rdir: Path, sessions: int) -> dict:
    """Stages 02 and 01 (make sweep's run_stages), then 03, on a manifest entry into rdir: 03's prediction."""
    spec = ["--inputs-npz", str(REPO / e["make_args"]["INPUTS"]), *shlex.split(e["make_args"].get("SHAPE_ARGS") or "")]
    try:
        run_stages(REPO / e["path"], rdir, spec, profile_args=("--sessions", str(sessions)))
    except StageError as err:
        raise SystemExit(f"error: {err}") from None
    r = run_stage("03_merge_profile_metrics.py", "--model", REPO / e["path"], "--results", rdir, check=False)
    if r.returncode:
        raise SystemExit(f"error: 03 failed on {e['name']}: {(r.stderr.strip() or r.stdout).splitlines()[-1]}")
    return json.loads((rdir / "merge_meta.json").read_text())["prediction"]


def main():
    p = parser(__doc__, models=DEFAULT, recorded=True)
    p.add_argument("--sessions", type=int, default=SESSIONS, help="01's --sessions (default %(default)s, its default)")
    p.add_argument("--passes", type=int, default=1, help="run every model this many times, one pass after the other")
    a = p.parse_args()
    if min(a.sessions, a.passes) < 1:
        refuse("--sessions and --passes must be 1 or more")
    entries = {e["name"]: e for e in json.loads(MANIFEST.read_text())["models"]} if MANIFEST.exists() else {}
    missing = [m for m in a.models if m not in entries]
    if missing:
        refuse(f"not in {MANIFEST}: {', '.join(missing)} (build them: python -m bench.corpus --build --only NAME)")
    calibrated_here(a.record)
    t0, out = time.perf_counter(), Printed()
    with tempfile.TemporaryDirectory(prefix="unseen_stages_") as tmp:
        passes = [{m: staged(entries[m], Path(tmp) / f"{m}_{k}", a.sessions) for m in a.models}
                  for k in range(a.passes)]
    first = passes[0]
    out(f"{len(a.models)} trained models not in the training corpus, stages 02-01-03 with 01 --sessions {a.sessions}, "
        f"{a.passes} pass(es), {time.perf_counter() - t0:.0f} s")
    out(f"{'model':<24} {'measured ms':>11} {'at calibration':>14} {'error':>6} {'host factor':>11} "
        f"{'at host speed':>13} {'error':>6}")
    for m, pr in first.items():
        meas, f = pr["measured_latency_us"], pr.get("host_speed_factor")
        cal = pr.get("calibration_host_latency_us", pr["predicted_latency_us"])
        out(f"{m:<24} {meas / 1e3:>11.2f} {cal / 1e3:>14.2f} {100 * (cal / meas - 1):>+5.0f}% "
            f"{f or float('nan'):>11.3f} {pr['predicted_latency_us'] / 1e3:>13.2f} {100 * pr['error']:>+5.0f}%")
    for k, run in enumerate(passes):
        cal = np.array([pr.get("calibration_host_latency_us", pr["predicted_latency_us"]) / pr["measured_latency_us"] - 1
                        for pr in run.values()])
        out(f"pass {k + 1}, at the calibration host's speed: {summary(cal)}")
        out(f"pass {k + 1}, at the host speed 01 measured: {summary(np.array([pr['error'] for pr in run.values()]))}")
    if a.passes > 1:
        def moved(at):      # at(prediction): a measurement, how far it moved from pass 1 to the last pass
            d = np.array([at(passes[-1][m]) / at(first[m]) - 1 for m in a.models])
            return f"{np.mean(np.abs(d) <= 0.10):.0%} within 10%, median |change| {100 * np.median(np.abs(d)):.1f}%"
        out(f"measured, pass {a.passes} against pass 1: {moved(lambda pr: pr['measured_latency_us'])}")
        if all(pr.get("host_speed_factor") for run in passes for pr in run.values()):
            out(f"measured / host factor (the host's drift taken out), pass {a.passes} against pass 1: "
                f"{moved(lambda pr: pr['measured_latency_us'] / pr['host_speed_factor'])}")
    out.record("unseen_stages", a.record)


if __name__ == "__main__":
    main()
