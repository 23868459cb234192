"""Batch sweep: measured and predicted latency, throughput and arithmetic intensity per batch size.

    python -m lib.latency.sweep --model models/resnet50_dyn.onnx --batches 1 2 4 8 16 [--runs 10]
    python -m lib.latency.sweep --model models/bert.onnx --preset llm-128 --batches 1 2 4 8 16
    python -m lib.latency.sweep --model models/bert.onnx --shape-override 'input_ids=Bx128 attention_mask=Bx128' --batches 1 4

For each batch B it runs stage 02 and stage 01 as subprocesses with the batch fixed (`--shape-override`,
dim 0 of every graph input set to B unless you give the overrides yourself with a literal `B`), each into a
temporary results folder (results/<stem>/ stays as it is), predicts the latency from 02's costs with the
calibrated latency model (configs/latency_model.yaml; fused nodes from 01's attribution), and writes
results/<stem>/sweep.csv and results/<stem>/plots/sweep.png. A model exported with a fixed batch dim cannot
be swept (its graph bakes batch 1 into Reshape constants): re-export it with
`python -m lib.onnx.export_models NAME PATH --dynamic-batch`.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd

from lib import cli
from lib.analysis.device_time import device_time
from lib.analysis.roofline import node_bytes
from lib.artifacts import CONFIGS, REPO, atomic_path, read_csv, read_json, results_dir, versions, write_csv, write_json
from lib.errors import StageError
from lib.host import load_host
from lib.latency import host_reference
from lib.latency.kernel_model import load_kernel_model
from lib.latency.latency_model import load_latency_model, peak_per_row, traffic_bytes
from lib.latency.microbench import _graph_and_feeds_of_path, _graph_of_path, _input_shapes, node_times, profile_runs
from lib.latency.predict import at_host_speed, kernel_prediction, optimized_graph
from lib.onnx.reader import read_light
from lib.provenance import identity, stamp
from lib.onnx.graph import load_model, real_inputs
from lib.progress import Progress

SWEEP_COLUMNS = ["batch", "rounds", "measured_us", "measured_mean_us", "measured_p10_us", "kernel_us", "predicted_us",
                 "predicted_lo_us", "predicted_hi_us", "predicted_by", "baseline_us", "baseline_err_pct",
                 "predicted_kernel_us", "calibration_host_us", "host_speed_factor", "err_pct", "err_mean_pct", "uncontended_us", "cpu_share", "err_uncontended_pct", "throughput_per_s", "throughput_pred_per_s", "flops", "bytes", "weight_bytes",
                 "ai_flop_per_byte", "nodes_run", "input_shapes"]


# ------------------------------------------------------------------ running stages 02 and 01

def run_stages(model: str | Path, rdir: str | Path, shape_args: list[str], runs: int = 10,
               threads: int = 0, profile: bool = True, costs: bool = True, profile_args: tuple = ()) -> None:
    """Stage 02 (unless costs=False: already there) then stage 01 (the scripts themselves, as subprocesses)
    into `rdir`; profile_args: more of 01's options."""
    py = sys.executable
    steps = [["02_shapes_flops_bytes.py"]] if costs else []
    if profile:
        steps.append(["01_profile_onnx.py", "--runs", str(runs), *profile_args]
                     + (["--threads", str(threads)] if threads else []))
    for step in steps:
        cmd = [py, str(REPO / step[0]), "--model", str(model), "--results", str(rdir), *step[1:], *shape_args]
        r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        if r.returncode != 0:
            last = (r.stderr.strip() or r.stdout.strip() or "no output").splitlines()[-1]
            raise StageError(f"{step[0]} failed on {model} ({' '.join(shape_args)}): {last}")


def measure_uncontended(model_path, overrides: list[str] | None = None, workload=None, preset: str | None = None,
                        runs: int = 10, threads: int = 0) -> dict:
    """The model run as stage 01 runs it (same session options, same feeds) with the calling thread's CPU time
    recorded per run (lib.latency.microbench.profile_runs): on a machine shared with other work, the CPU time is what
    a run takes with the cores to itself, the wall time what it took. Returns medians (us) and the share."""
    g, feeds = _graph_and_feeds_of_path(model_path, overrides, workload, preset)
    prof = profile_runs(str(model_path), feeds, threads=threads, warmup=3, min_runs=runs, max_runs=runs, target_s=0.0)
    lat = node_times(g, prof, drop_layout=False, scale_all=True)
    wall, cpu = np.asarray(prof["wall_us"]), np.asarray(prof["cpu_us"])
    return {"wall_us": float(np.median(wall)), "cpu_us": float(np.median(cpu)),
            "share": float(np.median(np.clip(cpu / wall, 0, 1))), "kernel_cpu_us": float(lat["cpu_us"].sum()),
            "per_node": lat}


def load_tables(rdir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame | None, dict | None]:
    rdir = Path(rdir)
    metrics = read_csv(rdir, "ops_metrics.csv", ("node", "op_type", "flops"))
    lat = read_csv(rdir, "ops_latency.csv", ("node", "latency_us", "attribution")) \
        if (rdir / "ops_latency.csv").exists() else None
    meta = json.loads((rdir / "profile_meta.json").read_text()) if (rdir / "profile_meta.json").exists() else None
    return metrics, lat, meta


def fused_mask(metrics: pd.DataFrame, lat: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(nodes that run no kernel of their own in stage 01's attribution: fused into an anchor, or removed;
    the anchor each fused node runs inside, '' for the others), in ops_metrics.csv's row order."""
    m = metrics[["node"]].merge(lat[["node", "attribution", "fused_into"]], on="node", how="left")
    return m["attribution"].isin(["fused", "not_run"]).to_numpy(), m["fused_into"].fillna("").astype(str).to_numpy()


def measured(meta: dict) -> dict:
    """What stage 01 measured (its profile_meta.json): session latency median, mean and p10, kernel time per
    run, coverage, input shapes (us)."""
    s = meta.get("session_latency", {})
    ident = (meta.get("identity") or {}).get("inputs") or {}
    return {"measured_us": float(s.get("median_us", np.nan)), "measured_mean_us": float(s.get("mean_us", np.nan)),
            "measured_p10_us": float(s.get("p10_us", np.nan)),
            "kernel_us": float((meta.get("kernel_time_per_run_us") or {}).get("median") or np.nan),
            "coverage": float(meta.get("kernel_time_coverage", np.nan)),
            "input_shapes": ident.get("input_shapes") or meta.get("inputs", {})}


def compare(rdir: str | Path, model, peaks, bw: float, roles_ort: pd.DataFrame | None = None) -> dict:
    """Predicted vs measured totals for one stage 01 + 02 result folder."""
    metrics, lat, meta = load_tables(rdir)
    out: dict = {}
    flops = metrics["flops"].astype(float)
    tb, _ = traffic_bytes(metrics)
    allb = node_bytes(metrics)      # NaN where unknown; the total counts them 0 (lib/analysis/roofline.py policy)
    out["flops"] = float(np.nansum(flops))
    out["bytes"] = float(np.nansum(allb))
    out["weight_bytes"] = float(metrics["weight_bytes"].astype(float).sum())
    out["ai_flop_per_byte"] = out["flops"] / out["bytes"] if out["bytes"] > 0 else float("nan")
    if lat is not None:
        fz, into = fused_mask(metrics, lat)
        det = model.predict_detail(metrics, peaks, bw, fz, into, include_dispatch=False)
        kern = det["t_pred_us"].to_numpy()
        n_run = int((~fz).sum())
        out["nodes_run"] = n_run
        out["predicted_kernel_us"] = float(kern.sum())
        out["predicted_us"] = float(kern.sum() + n_run * model.dispatch.get("per_kernel_us", 0.0)
                                    + model.dispatch.get("fixed_us", 0.0))
        merged = metrics.merge(lat[["node", "latency_us", "attribution", "fused_into"]], on="node", how="left")
        merged["t_pred_us"] = kern
        merged["key"] = det["key"].to_numpy()
        out["per_node"] = merged
    if roles_ort is not None:
        fz2, into2 = fused_mask(metrics, roles_ort)
        k2 = model.predict(metrics, peaks, bw, fz2, into2, include_dispatch=False)
        n2 = int((~fz2).sum())
        out["predicted_kernel_ort_us"] = float(k2.sum())
        out["predicted_ort_us"] = float(k2.sum() + n2 * model.dispatch.get("per_kernel_us", 0.0)
                                        + model.dispatch.get("fixed_us", 0.0))
    if meta is not None:
        out.update(measured(meta))
    # the plain roofline, for reference (nodes that run; unknown costs count 0)
    pk = peak_per_row(metrics, peaks)
    roof = device_time(np.nan_to_num(flops.to_numpy()), np.nan_to_num(allb.to_numpy()), pk, bw, scale=1e6)
    if lat is not None:
        roof = np.where(fused_mask(metrics, lat)[0], 0.0, roof)
    out["roofline_us"] = float(roof.sum())
    return out


def kernel_model_columns(c: dict, km, host: dict, rdir: Path, model_path, overrides: list[str], workload,
                         preset, latency_model) -> None:
    """The kernel model's prediction (lib/latency/predict.py: ORT's kernels from the optimized graph 01 kept,
    costed from 02's table, never 01's times; at the host speed 01 measured) as predicted_us, the efficiency
    model's as baseline_us."""
    c["baseline_us"] = c.get("predicted_us")
    c["predicted_by"] = "baseline"
    c["calibration_host_us"] = c["host_speed_factor"] = float("nan")
    if km is None or c.get("baseline_us") is None:
        return
    g = _graph_of_path(model_path, overrides, workload, preset)
    metrics = read_csv(rdir, "ops_metrics.csv", ("node", "op_type", "flops"))
    p = at_host_speed(kernel_prediction(km, g, metrics, optimized_graph(model_path, rdir), host),
                      read_json(rdir, "profile_meta.json"), latency_model)
    c["predicted_us"], (c["predicted_lo_us"], c["predicted_hi_us"]) = p["predicted_latency_us"], p["interval_us"]
    c["calibration_host_us"] = p.get("calibration_host_latency_us", p["predicted_latency_us"])
    c["host_speed_factor"] = float("nan") if p["host_speed_factor"] is None else p["host_speed_factor"]
    # the kernel model's own kernel sum beside its session (it was the baseline's: a row read as two models)
    c["predicted_kernel_us"] = float(p["per_kernel"]["pred_us"].sum()) * (p["host_speed_factor"] or 1.0)
    c["predicted_by"] = "kernel model"


# ------------------------------------------------------------------ the sweep

# workload.yaml's spellings of a batch dim: where an input names one, that axis is the batch (a sequence-first
# RNN's x is [sequence, batch, features], a GRU's h0 [layers, batch, hidden]: dim 0 swept their sequence length or
# was refused as a fixed batch)
BATCH_DIM_NAMES = ("batch", "batch_size", "N")


def batch_axes(model) -> tuple[dict[str, int | None], str]:
    """Per real input, the axis the sweep sets to the batch: the dim named as one where any input names one
    (inputs without one keep their shape), else dim 0 of every input, with a note where some dim 0 has another
    name (the sweep then varies that dim)."""
    dims = {i.name: list(i.type.tensor_type.shape.dim) for i in real_inputs(model)}
    named = {n: next((k for k, d in enumerate(ds) if d.dim_param in BATCH_DIM_NAMES), None) for n, ds in dims.items()}
    if any(v is not None for v in named.values()):
        return named, ""
    odd = [f"{n}[0] '{ds[0].dim_param}'" for n, ds in dims.items() if ds and ds[0].dim_param]
    note = (f"no input names a batch dim ({', '.join(BATCH_DIM_NAMES)}): dim 0 is swept as the batch "
            f"({', '.join(odd)}); write the batch dim as B in --shape-override to choose it") if odd else ""
    return {n: 0 if ds else None for n, ds in dims.items()}, note


def batch_overrides(model_path: str | Path, batch: int, user: list[str], workload: str | None,
                    preset: str | None) -> list[str]:
    """--shape-override tokens for one batch: the user's with 'B' replaced, else each input's batch axis
    (batch_axes) = B. A fixed (non-symbolic) batch dim that differs from B is refused with one clear line."""
    if user:
        toks = [t.split("=", 1) for t in " ".join(user).replace(",", " ").split() if "=" in t]
        if not any("B" in dims for _, dims in toks):
            # the override fixes every dim: batch B would silently run (and be labelled) at the override's batch
            raise StageError(f"the shape override {' '.join('='.join(t) for t in toks)} fixes every dim, so batch "
                             f"{batch} cannot be set: write the batch dim as B (e.g. {toks[0][0]}=B"
                             f"{toks[0][1][toks[0][1].find('x'):] if 'x' in toks[0][1] else ''})")
        return [" ".join(f"{name}={dims.replace('B', str(batch))}" for name, dims in toks)]
    model = load_model(model_path)
    fixed = {k: v for k, v in _fixed_axes(model).items() if v[1] != batch}
    if fixed:
        raise StageError(f"{model_path} has a FIXED batch dimension ({_dims(fixed)}): it cannot run at batch {batch}. "
                         f"{RE_EXPORT}")
    shapes = _input_shapes(model, workload, preset)
    toks = []
    for name, axis in batch_axes(model)[0].items():
        dims = list(shapes[name])
        if axis is not None:
            dims[axis] = batch
        toks.append(f"{name}={'x'.join(map(str, dims))}")
    return [" ".join(toks)]


RE_EXPORT = ("Re-export it with a symbolic batch (this project's torchvision exports: python -m "
             "lib.onnx.export_models NAME PATH --dynamic-batch), or give --shape-override with the batch dim as B")


def fixed_batch(model_path: str | Path) -> dict[str, tuple[int, int]]:
    """{input: (axis, value)} for inputs whose batch axis (batch_axes) is a fixed number (empty when every batch
    dim is symbolic)."""
    return _fixed_axes(load_model(model_path))


def _fixed_axes(model) -> dict[str, tuple[int, int]]:
    axes, out = batch_axes(model)[0], {}
    for inp in real_inputs(model):
        d = inp.type.tensor_type.shape.dim[axes[inp.name]] if axes[inp.name] is not None else None
        if d is not None and d.HasField("dim_value") and d.dim_value > 0:
            out[inp.name] = (axes[inp.name], int(d.dim_value))
    return out


def _dims(fixed: dict[str, tuple[int, int]]) -> str:
    return ", ".join(f"{name}[{axis}]={v}" for name, (axis, v) in fixed.items())


def model_roofline(model, host: str | Path | None = None) -> tuple[dict, float]:
    """(peak FLOP/s table, bandwidth) to predict this host with: those the latency model was fitted against,
    else the host file's (default configs/host.yaml)."""
    roof = model.fitted_roofline()
    if roof is None:
        h = load_host(host or CONFIGS / "host.yaml")
        roof = (h["peak_flops_per_s"], float(h["mem_bw_bytes_per_s"]))
    return roof


def sweep(model_path: str | Path, batches: list[int], *, runs: int = 10, user_overrides: list[str] | None = None,
          preset: str | None = None, workload: str | None = None, latency_model: str | Path | None = None,
          host: str | Path | None = None, threads: int = 0, keep: str | Path | None = None,
          progress: bool = True, uncontended: bool = True, rounds: int = 1) -> pd.DataFrame:
    """rounds: measure every batch this many times, the batches in turn (1 2 4 8 16 1 2 4 ...), and keep the
    median of the rounds: a shared machine's speed drifts by tens of percent within minutes, and interleaving
    spreads a slow spell over all batches instead of landing it on one."""
    onnx_model = load_model(model_path)         # read once for the checks (batch_overrides reads it per batch)
    fixed = _fixed_axes(onnx_model)
    if fixed and not user_overrides:
        bad = [b for b in batches if any(b != v for _, v in fixed.values())]
        if bad:
            raise StageError(f"{model_path} has a FIXED batch dimension ({_dims(fixed)}): batches {bad} cannot run. "
                             f"{RE_EXPORT}")
    note = batch_axes(onnx_model)[1]
    if note and not user_overrides:
        print(f"note: {note}")
    latency_model = latency_model or CONFIGS / "latency_model.yaml"
    model, km = load_latency_model(latency_model), load_kernel_model(latency_model)
    host_cfg = load_host(host or CONFIGS / "host.yaml")
    peaks, bw = model_roofline(model, host)
    workload = workload or str(CONFIGS / "workload.yaml")
    other = host_reference.latency_model_note(latency_model)
    if other:
        print(f"warning: {other}")
    seen: dict[int, list[dict]] = {b: [] for b in batches}
    prog = Progress("sweep", total=rounds * len(batches)) if progress else None
    with tempfile.TemporaryDirectory(prefix="sweep_") as tmp:
        for rnd in range(rounds):
            for b in batches:
                ov = batch_overrides(model_path, b, user_overrides or [], workload, preset)
                args = ["--workload", workload] + (["--preset", preset] if preset else []) + ["--shape-override", ov[0]]
                if prog:
                    prog.update(rnd * len(batches) + batches.index(b),
                                f"{f'round {rnd + 1}/{rounds}, ' if rounds > 1 else ''}batch {b}: {ov[0]}")
                rdir = Path(keep or tmp) / f"b{b}"
                run_stages(model_path, rdir, args, runs=runs, threads=threads, costs=rnd == 0,
                           profile_args=("--latency-model", str(latency_model)))
                c = compare(rdir, model, peaks, bw)
                c.pop("per_node", None)
                kernel_model_columns(c, km, host_cfg, rdir, model_path, [ov[0]], workload, preset, latency_model)
                if uncontended:
                    u = measure_uncontended(model_path, ov, workload, preset, runs=runs, threads=threads)
                    c["uncontended_us"], c["cpu_share"] = u["cpu_us"], u["share"]
                seen[b].append(c)
                if prog:            # each batch's result: one whole line (the updating line cleared first)
                    prog.line(f"{f'round {rnd + 1}/{rounds}, ' if rounds > 1 else ''}batch {b}: measured "
                              f"{c['measured_us'] / 1e3:.2f} ms (mean {c['measured_mean_us'] / 1e3:.2f}), "
                              f"predicted {c['predicted_us'] / 1e3:.2f} ms "
                              f"({100 * (c['predicted_us'] / c['measured_us'] - 1):+.1f}%)" + (
                                  f"; uncontended {c['uncontended_us'] / 1e3:.2f} ms (CPU share {c['cpu_share']:.2f})"
                                  if uncontended else ""))
    if prog:
        prog.done()
    return pd.DataFrame([_sweep_row(b, seen[b]) for b in batches], columns=SWEEP_COLUMNS)


# the kernel model's prediction too: each round's is taken to the host speed 01 measured in that round
MEDIAN_OVER_ROUNDS = ("predicted_us", "predicted_lo_us", "predicted_hi_us", "host_speed_factor", "measured_us",
                      "measured_p10_us", "kernel_us", "uncontended_us", "cpu_share")


def _sweep_row(b: int, rounds: list[dict]) -> dict:
    """One sweep.csv row from a batch's rounds: the measured figures' medians (and the mean of all runs), the
    rest from the first round (the costs and the prediction do not change between rounds)."""
    r = {"batch": b, **{k: rounds[0].get(k) for k in SWEEP_COLUMNS if k != "batch"}}
    for k in MEDIAN_OVER_ROUNDS:
        vals = [x[k] for x in rounds if x.get(k) is not None]
        r[k] = float(np.median(vals)) if vals else float("nan")
    r["rounds"] = len(rounds)
    # every round has the same number of runs: the mean of the rounds' means is the mean of all runs
    r["measured_mean_us"] = float(np.mean([x["measured_mean_us"] for x in rounds]))
    r["err_pct"] = 100.0 * (r["predicted_us"] / r["measured_us"] - 1.0)
    r["baseline_err_pct"] = 100.0 * (r["baseline_us"] / r["measured_us"] - 1.0) if r.get("baseline_us") else float("nan")
    r["err_mean_pct"] = 100.0 * (r["predicted_us"] / r["measured_mean_us"] - 1.0)
    r["err_uncontended_pct"] = 100.0 * (r["predicted_us"] / r["uncontended_us"] - 1.0)     # NaN when not measured
    r["throughput_per_s"] = b / (r["measured_us"] * 1e-6)
    r["throughput_pred_per_s"] = b / (r["predicted_us"] * 1e-6)
    r["input_shapes"] = json.dumps(rounds[0].get("input_shapes", {}))
    return r


def plot(df: pd.DataFrame, path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 3, figsize=(13, 3.8))
    b = df["batch"]
    ax[0].plot(b, df["measured_us"] / 1e3, "o-", label="measured (01, median)")
    ax[0].plot(b, df["measured_mean_us"] / 1e3, "x-", label="measured (mean of all runs)")
    ax[0].plot(b, df["predicted_us"] / 1e3, "s--", label=f"predicted ({df['predicted_by'].iat[0]})")
    if df["baseline_us"].notna().any() and (df["predicted_by"] != "baseline").any():
        ax[0].plot(b, df["baseline_us"] / 1e3, "d:", label="baseline (efficiency model)")
    if df["uncontended_us"].notna().any():
        ax[0].plot(b, df["uncontended_us"] / 1e3, "^:", label="measured, cores to itself (CPU time)")
    ax[0].set(xscale="log", yscale="log", xlabel="batch", ylabel="latency (ms)", title="latency")
    ax[1].plot(b, df["throughput_per_s"], "o-", label="measured")
    ax[1].plot(b, df["throughput_pred_per_s"], "s--", label="predicted")
    ax[1].set(xscale="log", xlabel="batch", ylabel="inferences / s", title="throughput")
    ax[2].plot(b, df["ai_flop_per_byte"], "o-", color="tab:green")
    ax[2].set(xscale="log", xlabel="batch", ylabel="FLOP / byte", title="arithmetic intensity (02)")
    for a in ax:
        a.set_xticks(list(b))
        a.set_xticklabels([str(x) for x in b])
        a.grid(alpha=0.3)
    ax[0].legend(fontsize=8)
    ax[1].legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)


def main(argv=None):
    p = cli.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", metavar="PATH", help="ONNX model file (required); results go to results/<model-stem>/")
    p.add_argument("--results", metavar="DIR", help="where sweep.csv and plots/sweep.png go (default: results/<model-stem>/)")
    p.add_argument("--workload", default=str(CONFIGS / "workload.yaml"), metavar="YAML",
                   help="symbolic-dim values, presets and seed (default: %(default)s)")
    p.add_argument("--shape-override", action="append", default=[], metavar="'NAME=Bx3x224x224 ...'",
                   help="input shapes with a literal B where the batch goes (default: dim 0 of every input = B)")
    p.add_argument("--preset", metavar="NAME", help="symbolic-dim preset of the workload file (e.g. llm-128)")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16], help="batch sizes (default 1 2 4 8 16)")
    p.add_argument("--runs", type=int, default=10, help="stage 01 measured runs per batch (default 10)")
    p.add_argument("--threads", type=int, default=0, help="ORT intra-op threads for stage 01 (0 = all cores)")
    p.add_argument("--latency-model", default=None, metavar="YAML",
                   help="calibrated latency model (default: configs/latency_model.yaml; `make calibrate` writes it)")
    p.add_argument("--host", default=str(CONFIGS / "host.yaml"), metavar="YAML",
                   help="host peaks/bandwidth, used only if the latency model does not record its own (default: %(default)s)")
    p.add_argument("--no-uncontended", action="store_true",
                   help="skip the second measurement per batch that records ORT's CPU time (the contention-free "
                        "latency on a shared machine)")
    p.add_argument("--rounds", type=int, default=3,
                   help="measure every batch this many times, the batches in turn, and keep the median (default 3: "
                        "a shared machine's speed drifts within minutes)")
    p.add_argument("--keep", metavar="DIR", help="keep each batch's stage 01/02 results under DIR/b<B>/ (default: temp)")
    a = p.parse_args(argv)
    if not a.model:
        raise StageError("--model is required (see --help)")
    if any(b < 1 for b in a.batches) or a.runs < 1 or a.rounds < 1:
        raise StageError("--batches must be >= 1, and --runs and --rounds too")
    rdir = results_dir(a.model, a.results)
    print(f"sweeping {a.model} over batches {a.batches} ({a.runs} runs each, {a.rounds} round(s))")
    df = sweep(a.model, a.batches, runs=a.runs, user_overrides=a.shape_override, preset=a.preset,
               workload=a.workload, latency_model=a.latency_model, host=a.host, threads=a.threads, keep=a.keep,
               uncontended=not a.no_uncontended, rounds=a.rounds)
    write_csv(df, rdir / "sweep.csv")
    plot(df, rdir / "plots" / "sweep.png", f"{Path(a.model).name}: measured vs predicted per batch")
    # the model's identity; the inputs are each batch's (sweep.csv's input_shapes), not one spec
    write_json(stamp({"model": str(a.model), "batches": a.batches, "runs": a.runs, "rounds": a.rounds,
                      "preset": a.preset, "shape_override": a.shape_override,
                      "latency_model": a.latency_model or "configs/latency_model.yaml", "versions": versions()},
                     identity(read_light(a.model), None)), rdir / "sweep_meta.json")
    print(f"{'batch':>5} {'predicted ms':>13} {'median ms':>10} {'error':>7} {'mean ms':>8} {'error':>7} "
          f"{'uncontended ms':>15} {'error':>7} {'inf/s':>8} {'FLOP/B':>7}")
    for _, r in df.iterrows():
        print(f"{r['batch']:>5} {r['predicted_us'] / 1e3:>13.2f} {r['measured_us'] / 1e3:>10.2f} {r['err_pct']:>+6.1f}% "
              f"{r['measured_mean_us'] / 1e3:>8.2f} {r['err_mean_pct']:>+6.1f}% {r['uncontended_us'] / 1e3:>15.2f} "
              f"{r['err_uncontended_pct']:>+6.1f}% {r['throughput_per_s']:>8.1f} {r['ai_flop_per_byte']:>7.1f}")
    print(f"worst |predicted/measured - 1| over the batches: {df['err_pct'].abs().max():.1f}% (median of the rounds' "
          f"medians), {df['err_mean_pct'].abs().max():.1f}% (mean of all runs)"
          + (f", {df['err_uncontended_pct'].abs().max():.1f}% (uncontended)" if df["uncontended_us"].notna().any() else ""))
    print(f"predicted by the {df['predicted_by'].iat[0]}; baseline (efficiency model) worst "
          f"{df['baseline_err_pct'].abs().max():.1f}%")
    print(f"wrote {rdir / 'sweep.csv'} and {rdir / 'plots' / 'sweep.png'}")


if __name__ == "__main__":
    cli.run(main)
