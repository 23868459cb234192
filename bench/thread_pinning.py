#!/usr/bin/env python3
"""Would pinning the calling thread make a model measure the same twice? Stage 01's session latency (the median
over sessions of each session's median run) of training models, measured in passes minutes apart, with the
calling thread pinned to the first CPU it may use while timing (lib/latency/profiling.py's calling_thread_pinned,
as the micro-benchmarks run) and left to the OS (as stage 01 runs),
interleaved (each model's sessions of both arms back to back, the order alternating per pass), so that the
host's drift hits both arms.

    .venv/bin/python bench/thread_pinning.py [--models resnet18 bert_small ...] [--passes 3] [--record]

Prints per arm: how often two passes of a model agree within 5% and 10%, the median difference, and how often
one pass's sessions spread more than 20%. Why: with its default thread count ORT pins its intra-op workers and
leaves the calling thread to the OS; ORT's profiler (thread_scheduling_stats) showed a micro-benchmark session
whose calling thread sat on the worker's core run its QLinearConv at 305 us, against 163 us in sessions with it
on core 0. Pinning it did not make whole models measure steadier on a shared 2-core VM (docs/latency-model.md).
"""
import contextlib
import itertools
import sys

import numpy as np

from _models import REPO, Printed, parser, refuse

sys.path.insert(0, str(REPO))

TRAIN = REPO / "models" / "train"


def session_medians(path, feeds, pinned: bool, sessions: int) -> list[float]:
    from lib.latency.profiling import calling_thread_pinned, profile_model
    with calling_thread_pinned() if pinned else contextlib.nullcontext():
        return [float(np.median(profile_model(str(path), feeds, runs=10, warmup=3, progress=False)["wall_us"]))
                for _ in range(sessions)]


def main():
    default = sorted(p.stem for p in TRAIN.glob("*.onnx"))[::2]
    p = parser(__doc__, default, recorded=True)
    p.add_argument("--passes", type=int, default=3)
    a = p.parse_args()
    missing = [m for m in a.models if not (TRAIN / f"{m}.onnx").exists()]
    if missing:
        refuse(f"no training model {', '.join(missing)} in {TRAIN} (make calibrate builds them)")
    if a.passes < 2:
        refuse("--passes must be at least 2: agreement is between passes")
    from lib.latency.training import training_inputs
    feeds = {m: training_inputs(TRAIN / f"{m}.onnx")[1] for m in a.models}
    got = {arm: {m: [] for m in a.models} for arm in (False, True)}
    for i in range(a.passes):
        for m in a.models:
            for arm in ((False, True) if i % 2 == 0 else (True, False)):
                got[arm][m].append(session_medians(TRAIN / f"{m}.onnx", feeds[m], arm, 3))
        print(f"  pass {i + 1}/{a.passes} done", file=sys.stderr, flush=True)
    out = Printed()
    out(f"{len(a.models)} training models, {a.passes} passes, each 3 sessions x 10 runs per arm, interleaved")
    out(f"{'calling thread':16s} {'pairs':>5s} {'within 5%':>9s} {'within 10%':>10s} {'median diff':>11s} "
        f"{'passes with sessions > 20% apart':>33s}")
    for arm in (False, True):
        diffs, spread = [], []
        for passes in got[arm].values():
            lat = [np.median(s) for s in passes]
            diffs += [abs(x / y - 1) for x, y in itertools.combinations(lat, 2)]
            spread += [max(s) / min(s) - 1 > 0.2 for s in passes]
        d = np.array(diffs)
        out(f"{'pinned' if arm else 'left to the OS':16s} {len(d):5d} {np.mean(d <= .05):9.0%} {np.mean(d <= .1):10.0%} "
            f"{np.median(d):11.1%} {np.mean(spread):33.0%}")
    out.record("thread_pinning", a.record)


if __name__ == "__main__":
    main()
