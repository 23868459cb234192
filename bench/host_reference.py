#!/usr/bin/env python3
"""Does the host reference tell how fast the host runs a model now? Training models whose calibration latency is
known (make calibrate's records: configs/latency_model.yaml's held-out table) stand in for a user's model: each
runs in --sessions sessions, as stage 01 runs it, with every candidate reference's models measured after each
session (lib/latency/host_reference.py). A perfect predictor of the calibration host, taken to the host's speed
by a reference's factor, predicts the target's session latency now / calibration as that factor.

    .venv/bin/python bench/host_reference.py [--models NAME ...] [--sessions 3] [--passes 3] [--record]

Candidates: the reference in the latency model file (`configured`), the rule before it (`fastest`: the fastest
model of each of the 4 fastest families) and no reference (factor 1). Prints per candidate how often its factor
is within 5% and 10% of the target's now / calibration, and the median of target / factor - 1 (above 0: the
reference says the host is faster than the target found it).
"""
import sys
import time

import numpy as np

from _models import REPO, calibrated_here, Printed, parser, refuse

sys.path.insert(0, str(REPO))

from lib.artifacts import load_yaml  # noqa: E402
from lib.latency import host_reference  # noqa: E402
from lib.latency.calibrate_kernels import TRAIN_DIR  # noqa: E402
from lib.latency.training import training_inputs  # noqa: E402

LATENCY_MODEL = REPO / "configs" / "latency_model.yaml"
DEFAULT = ["lstm2", "mobilenet_v3_small", "unet_small", "keras_cnn", "bert_small_s64", "resnet18_qdq",
           "distilbert_small", "lraspp_mbv3", "efficientnet_b0", "googlenet", "densenet121_128", "resnet34_160",
           "bert_small_b4", "swin_tiny_small"]


def fastest_rule(calibrated: dict[str, tuple[str, float]], n: int = 4) -> list[str]:
    """The reference rule before this one: the fastest model of each family, the n fastest families."""
    picked: dict[str, str] = {}
    for m, (fam, _) in sorted(calibrated.items(), key=lambda kv: kv[1][1]):
        if fam not in picked and len(picked) < n:
            picked[fam] = m
    return list(picked.values())


def speed(models: list[str], calibrated: dict[str, tuple[str, float]], rounds: list[dict[str, float]]) -> float:
    """now / calibration of `models` over the rounds, as stage 01's host_reference.summary takes it (1: none)."""
    ref = {"latency_model": "", "models": [{"model": m, "session_us": calibrated[m][1]} for m in models]}
    return host_reference.summary(ref, rounds)["factor"] if models else 1.0


def main():
    p = parser(__doc__, models=DEFAULT, recorded=True)
    p.add_argument("--sessions", type=int, default=3, help="sessions per target and pass (default %(default)s)")
    p.add_argument("--passes", type=int, default=3, help="passes over the targets (default %(default)s)")
    a = p.parse_args()
    if min(a.sessions, a.passes) < 1:
        refuse("--sessions and --passes must be 1 or more")
    held = load_yaml(LATENCY_MODEL, "latency model")["kernel_model"]["heldout"]["models"]
    calibrated = {r["model"]: (r["family"], float(r["measured_us"])) for r in held}
    unknown = [m for m in a.models if m not in calibrated]
    if unknown:     # before any file is looked for: a misspelt name is told as such on a fresh clone too
        refuse(f"not a training model measured by make calibrate: {', '.join(unknown)}")
    ref, why = host_reference.load(LATENCY_MODEL)
    if ref is None:
        refuse(why)
    candidates = {"configured": [m["model"] for m in ref["models"]], "fastest": fastest_rule(calibrated), "none": []}
    refs = sorted({m for ms in candidates.values() for m in ms})
    if a.models == DEFAULT:     # a calibration's references change with its host: a default target is never one
        a.models = [m for m in DEFAULT if m not in refs]
    bad = [m for m in a.models if m in refs or not (TRAIN_DIR / f"{m}.onnx").exists()]
    if bad:
        refuse(f"one of the references ({', '.join(refs)}) or not built in {TRAIN_DIR} (make calibrate builds "
               f"them): {', '.join(bad)}")
    calibrated_here(a.record)
    ready = {m: (TRAIN_DIR / f"{m}.onnx", training_inputs(TRAIN_DIR / f"{m}.onnx")[1]) for m in [*refs, *a.models]}
    one = {"threads": ref.get("threads", 0)}
    rows = []
    t0 = time.perf_counter()
    for i in range(a.passes):
        for m in a.models:
            got = [host_reference.measure(one, {k: ready[k] for k in [m, *refs]}) for _ in range(a.sessions)]
            now = speed([m], calibrated, got)
            rows.append({c: now / speed(ms, calibrated, got) - 1 for c, ms in candidates.items()})
        print(f"  pass {i + 1}/{a.passes}, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    out = Printed()
    out(f"{len(a.models)} training models as targets, {a.passes} passes x {a.sessions} sessions, every candidate's "
        f"models measured after each session, {time.perf_counter() - t0:.0f} s")
    out(f"{'reference':10s} {'models':60s} {'within 5%':>9s} {'within 10%':>10s} {'median':>7s}")
    for c, ms in candidates.items():
        e = np.array([r[c] for r in rows])
        out(f"{c:10s} {', '.join(ms) or '-':60s} {np.mean(abs(e) <= .05):9.0%} {np.mean(abs(e) <= .1):10.0%} "
            f"{np.median(e):+7.1%}")
    out.record("host_reference", a.record)


if __name__ == "__main__":
    main()
