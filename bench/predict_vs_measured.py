#!/usr/bin/env python3
"""The calibrated latency model against ONNX Runtime, on models the calibration never saw.

    .venv/bin/python bench/predict_vs_measured.py [--only resnet50 bert ...] [--runs 10] [--rounds 3] [--reuse]
                                                  [--latency-model configs/latency_model.yaml]

Per model: stage 02 and stage 01 (`--runs N`) as subprocesses into results/_latency_bench/<stem>/ (the
models' own results/<stem>/ stay untouched); per-node prediction from ops_metrics.csv with the nodes ORT fuses
or removes taken (a) from stage 01's attribution (ops_latency.csv) and (b) without profiling, from ORT's
optimized graph (lib.latency.latency_model.fused_from_ort / ort_node_roles); predicted total against the measured session latency
(profile_meta.json session_latency.median_us) and against the summed kernel time. On a machine shared with
other work the cores are taken away for whole scheduler slices, so the model is also run once more as stage
01 runs it, recording the CPU time of ORT's calling thread per run (lib.latency.sweep.measure_uncontended): the
latency with the cores to itself ("uncontended"), and the CPU share the run got. Then the median and worst
|predicted/measured - 1| and, for the worst models, which op classes carry the error. With `--rounds N`
(default 3) stage 01 and the uncontended run are repeated N times, all models in turn, and each measured figure
is the median of its rounds; the mean of all runs is printed next to the median (this machine's speed flips
between two states within seconds, bench/host_speed.py: a median lands in one or the other). The per-class
tables of the worst models are from the first round.
Models are built into models/lat/ when missing (random weights, nothing downloaded).
"""
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from _models import REPO, ensure_model, parser, quantized

sys.path.insert(0, str(REPO))

MODELS = {   # stem: (export name, export args, stage shape args)
    "resnet50": ("resnet50", [], []),
    "mobilenet_v2": ("mobilenet_v2", [], []),
    "efficientnet_b0": ("efficientnet_b0", [], []),
    "vit_b_16": ("vit_b_16", [], []),
    "swin_t": ("swin_t", [], []),
    "bert": ("hf-bert", [], ["--preset", "llm-128"]),
    "gpt2": ("hf-gpt2", [], ["--preset", "llm-128"]),
    "resnet18_int8": (None, [], []),
}


def model_path(stem: str) -> Path:
    d = REPO / "models" / "lat"
    d.mkdir(parents=True, exist_ok=True)
    if stem == "resnet18_int8":
        return quantized(ensure_model("resnet18", d / "resnet18.onnx"), d / "resnet18_int8.onnx")
    name, extra, _ = MODELS[stem]
    return ensure_model(name, d / f"{stem}.onnx", *extra)


def class_table(per_node: pd.DataFrame, unc: pd.DataFrame | None) -> pd.DataFrame:
    """Measured (01 median; and uncontended when measured; anchors carry their fused nodes) and predicted
    kernel time per op class."""
    d = per_node.copy()
    d["op_class"] = d["op_class"].fillna("other")
    if unc is not None:
        d = d.merge(unc[["node", "cpu_us"]], on="node", how="left")
    else:
        d["cpu_us"] = np.nan
    g = d.groupby("op_class").agg(measured_us=("latency_us", "sum"), uncontended_us=("cpu_us", "sum"),
                                  predicted_us=("t_pred_us", "sum"), nodes=("node", "size"))
    ref = g["uncontended_us"] if unc is not None else g["measured_us"]
    g["diff_us"] = g["predicted_us"] - ref
    return g.sort_values("measured_us", ascending=False)


def _args():
    p = parser(__doc__)
    p.add_argument("--only", nargs="+", choices=list(MODELS), help="a subset of the models")
    p.add_argument("--runs", type=int, default=10, help="stage 01 runs (default 10)")
    p.add_argument("--rounds", type=int, default=3,
                   help="measure every model this many times, the models in turn, and keep each figure's median "
                        "(default 3: a shared machine's speed drifts by tens of percent within minutes)")
    p.add_argument("--reuse", action="store_true", help="reuse stage 01/02 results already in the bench folder")
    p.add_argument("--latency-model", default=str(REPO / "configs" / "latency_model.yaml"))
    p.add_argument("--results-root", default=str(REPO / "results" / "_latency_bench"))
    p.add_argument("--no-ort-fusion", action="store_true", help="skip the fused_from_ort variant")
    p.add_argument("--no-uncontended", action="store_true", help="skip the CPU-time (uncontended) measurement")
    p.add_argument("--threads", type=int, default=0,
                   help="ORT intra-op threads for stage 01 and the CPU-time run (default 0 = all cores, stage 01's "
                        "default; 1 gives clean CPU-time references on a shared machine: calibrate with --threads 1 too)")
    a = p.parse_args()
    if a.rounds < 1 or a.runs < 1:
        p.error("--rounds and --runs must be >= 1")
    return a


MEASURED = ("measured_ms", "kernel_ms", "measured_p10_ms", "uncontended_ms", "cpu_share")   # medians over rounds


def _preset(stem: str) -> str | None:
    shape_args = MODELS[stem][2]
    return shape_args[shape_args.index("--preset") + 1] if "--preset" in shape_args else None


def remeasure(stem: str, a) -> dict:
    """Another round of one model: stage 01 again (02's costs stay) and the uncontended run; measured figures."""
    from lib.latency.sweep import measure_uncontended, measured, run_stages
    rdir = Path(a.results_root) / stem
    run_stages(model_path(stem), rdir, MODELS[stem][2], runs=a.runs, threads=a.threads, costs=False)
    s = measured(json.loads((rdir / "profile_meta.json").read_text()))
    u = None if a.no_uncontended else measure_uncontended(model_path(stem), None, str(REPO / "configs" / "workload.yaml"),
                                                         _preset(stem), runs=a.runs, threads=a.threads)
    return {"measured_ms": s["measured_us"] / 1e3, "measured_mean_ms": s["measured_mean_us"] / 1e3,
            "measured_p10_ms": s["measured_p10_us"] / 1e3, "kernel_ms": s["kernel_us"] / 1e3,
            "uncontended_ms": u["cpu_us"] / 1e3 if u else np.nan, "cpu_share": u["share"] if u else np.nan}


def median_of_rounds(first: dict, later: list[dict]) -> dict:
    """The first round's row with its measured figures replaced by their medians over all rounds, errors redone."""
    r = dict(first)
    for k in MEASURED:
        r[k] = float(np.nanmedian([first[k], *(x[k] for x in later)])) if later else first[k]
    r["rounds"] = 1 + len(later)
    r["measured_mean_ms"] = float(np.mean([first["measured_mean_ms"], *(x["measured_mean_ms"] for x in later)]))
    r["err"] = r["predicted_ms"] / r["measured_ms"] - 1
    r["err_mean"] = r["predicted_ms"] / r["measured_mean_ms"] - 1
    r["err_ort"] = r["predicted_ort_ms"] / r["measured_ms"] - 1
    r["err_kernel"] = r["predicted_kernel_ms"] / r["kernel_ms"] - 1
    r["err_p10"] = r["predicted_ms"] / r["measured_p10_ms"] - 1
    r["err_uncontended"] = r["predicted_ms"] / r["uncontended_ms"] - 1
    r["meas_over_roof"] = r["measured_ms"] / r["roofline_ms"]
    return r


def measure(stem: str, a, lm, peaks, bw: float) -> tuple[dict, pd.DataFrame]:
    """One model: stages 02 and 01 (unless reused), the prediction with fused nodes from 01 and from ORT's
    optimized graph, the uncontended run. Returns (its row, its class_table)."""
    from lib.latency.latency_model import ort_node_roles
    from lib.latency.sweep import compare, measure_uncontended, run_stages
    m = model_path(stem)
    shape_args, preset = MODELS[stem][2], _preset(stem)
    workload = str(REPO / "configs" / "workload.yaml")
    rdir = Path(a.results_root) / stem
    if not (a.reuse and (rdir / "ops_latency.csv").exists() and (rdir / "ops_metrics.csv").exists()):
        run_stages(m, rdir, shape_args, runs=a.runs, threads=a.threads)
    fo = None if a.no_ort_fusion else ort_node_roles(m, preset=preset, workload=workload)
    c = compare(rdir, lm, peaks, bw, fo)
    u = None if a.no_uncontended else measure_uncontended(m, None, workload, preset, runs=a.runs, threads=a.threads)
    r = {"model": stem, "measured_ms": c["measured_us"] / 1e3, "predicted_ms": c["predicted_us"] / 1e3,
         "err": c["predicted_us"] / c["measured_us"] - 1, "measured_mean_ms": c["measured_mean_us"] / 1e3,
         "err_mean": c["predicted_us"] / c["measured_mean_us"] - 1,
         "predicted_ort_ms": c.get("predicted_ort_us", np.nan) / 1e3,
         "err_ort": c.get("predicted_ort_us", np.nan) / c["measured_us"] - 1,
         "kernel_ms": c["kernel_us"] / 1e3, "predicted_kernel_ms": c["predicted_kernel_us"] / 1e3,
         "err_kernel": c["predicted_kernel_us"] / c["kernel_us"] - 1,
         "measured_p10_ms": c["measured_p10_us"] / 1e3,
         "err_p10": c["predicted_us"] / c["measured_p10_us"] - 1,
         "roofline_ms": c["roofline_us"] / 1e3, "meas_over_roof": c["measured_us"] / c["roofline_us"],
         "uncontended_ms": u["cpu_us"] / 1e3 if u else np.nan, "cpu_share": u["share"] if u else np.nan,
         "err_uncontended": c["predicted_us"] / u["cpu_us"] - 1 if u else np.nan}
    return r, class_table(c["per_node"], u["per_node"] if u else None)


HEADER = (f"{'model':<16} {'session ms':>10} {'pred ms':>8} {'err':>7} {'mean ms':>8} {'err':>7} {'pred(ORT) ms':>12} {'err':>7} "
          f"{'kernel ms':>9} {'pred k ms':>9} {'err':>7} {'uncont. ms':>10} {'share':>5} {'err':>7} "
          f"{'roofline ms':>11} {'meas/roof':>9}")


def print_row(r: dict) -> None:
    print(f"{r['model']:<16} {r['measured_ms']:>10.2f} {r['predicted_ms']:>8.2f} {100 * r['err']:>+6.1f}% "
          f"{r['measured_mean_ms']:>8.2f} {100 * r['err_mean']:>+6.1f}% "
          f"{r['predicted_ort_ms']:>12.2f} {100 * r['err_ort']:>+6.1f}% {r['kernel_ms']:>9.2f} "
          f"{r['predicted_kernel_ms']:>9.2f} {100 * r['err_kernel']:>+6.1f}% {r['uncontended_ms']:>10.2f} "
          f"{r['cpu_share']:>5.2f} {100 * r['err_uncontended']:>+6.1f}% {r['roofline_ms']:>11.2f} "
          f"{r['meas_over_roof']:>8.1f}x", flush=True)


def print_summary(df: pd.DataFrame) -> None:
    e = df["err"].abs()
    print(f"\nmedian |predicted/measured - 1| (session latency, fused from 01): {100 * e.median():.1f}%   "
          f"worst: {100 * e.max():.1f}% ({df.loc[e.idxmax(), 'model']})")
    em = df["err_mean"].abs()
    print(f"  against the mean of all runs (the time-averaged latency; this machine's speed flips between two "
          f"states within seconds, and a median lands in one or the other): median {100 * em.median():.1f}%, "
          f"worst {100 * em.max():.1f}% ({df.loc[em.idxmax(), 'model']})")
    print(f"  same with fused nodes from ORT's optimized graph (no profiling): median "
          f"{100 * df['err_ort'].abs().median():.1f}%, worst {100 * df['err_ort'].abs().max():.1f}%")
    print(f"  against summed kernel time: median {100 * df['err_kernel'].abs().median():.1f}%, "
          f"worst {100 * df['err_kernel'].abs().max():.1f}%")
    print(f"  against the session p10 instead of the median: median {100 * df['err_p10'].abs().median():.1f}%, "
          f"worst {100 * df['err_p10'].abs().max():.1f}%")
    if df["uncontended_ms"].notna().any():
        eu = df["err_uncontended"].abs()
        print(f"  against the uncontended latency (CPU time of ORT's calling thread; median CPU share "
              f"{df['cpu_share'].median():.2f}): median {100 * eu.median():.1f}%, worst {100 * eu.max():.1f}% "
              f"({df.loc[eu.idxmax(), 'model']})")
    print(f"  plain roofline: measured / roofline median {df['meas_over_roof'].median():.2f}x "
          f"(range {df['meas_over_roof'].min():.2f}-{df['meas_over_roof'].max():.2f}x)")


def print_worst(df: pd.DataFrame, per_class: dict[str, pd.DataFrame]) -> None:
    """For the three worst models: which op classes carry the error."""
    key = "err_uncontended" if df["uncontended_ms"].notna().any() else "err"
    for stem in list(df.sort_values(key, key=abs, ascending=False)["model"])[:3]:
        t = per_class[stem]
        print(f"\nwhere the error of {stem} is (kernel time per op class, ms; anchors carry their fused nodes):")
        print(f"  {'class':<16} {'nodes':>5} {'01 median':>9} {'uncont.':>9} {'predicted':>9} {'pred-ref':>9}")
        for cls, r in t.head(8).iterrows():
            print(f"  {cls:<16} {int(r['nodes']):>5} {r['measured_us'] / 1e3:>9.2f} {r['uncontended_us'] / 1e3:>9.2f} "
                  f"{r['predicted_us'] / 1e3:>9.2f} {r['diff_us'] / 1e3:>+9.2f}")


def main():
    a = _args()
    from lib.latency.latency_model import load_latency_model
    from lib.latency.sweep import model_roofline
    lm = load_latency_model(a.latency_model)
    peaks, bw = model_roofline(lm, REPO / "configs" / "host.yaml")
    stems = a.only or list(MODELS)
    first, per_class = {}, {}
    later: dict[str, list[dict]] = {s: [] for s in stems}
    print(HEADER)
    for stem in stems:
        first[stem], per_class[stem] = measure(stem, a, lm, peaks, bw)
        print_row(first[stem])
    for k in range(1, a.rounds):
        print(f"round {k + 1}/{a.rounds} (stage 01 again, the models in turn) ...", flush=True)
        for stem in stems:
            later[stem].append(remeasure(stem, a))
            print_row(median_of_rounds({**first[stem], **later[stem][-1]}, []))   # this round's figures
    df = pd.DataFrame([median_of_rounds(first[s], later[s]) for s in stems])
    if a.rounds > 1:
        print(f"\nmedians over {a.rounds} rounds:")
        print(HEADER)
        for _, r in df.iterrows():
            print_row(r)
    print_summary(df)
    print_worst(df, per_class)
    out = Path(a.results_root) / "predict_vs_measured.csv"
    out.parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(out, index=False)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    try:
        main()
    except subprocess.CalledProcessError as e:
        sys.exit(f"failed: {e}")
