"""The session latency prediction stage 03 writes (merge_meta.json `prediction`) and the sweep uses.

predicted_latency_us: the kernel model (lib/latency/kernel_model.py) on the kernels ORT runs for this model, read
from ORT's optimized graph (the one stage 01 kept in results/<stem>/profile/, else a session created for it) and
costed from stage 02's metrics: never from 01's measured kernel times, so a model's prediction does not use its
own profile. interval_us: from the held-out residuals of its kernel types; unseen_kernel_types: the types the
training never saw (their time is the model's guess from neighbours, said so). baseline_latency_us: the
explainable efficiency model (lib/latency/latency_model.py) beside it. Without a kernel model (a latency model file
calibrated before it, or none) the baseline stands, said so in `note`.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import onnx
import pandas as pd

from lib.artifacts import read_csv
from lib.errors import StageError
from lib.latency import host_reference
from lib.latency.kernel_model import KernelModel, load_kernel_model
from lib.latency.kernels import kernel_table
from lib.latency.latency_model import load_latency_model, ort_node_roles, predict_profile
from lib.analysis.roofline import roofline
from lib.onnx.loading import analysed
from lib.onnx.metrics import with_folded_run_bytes
from lib.onnx.underflow import subnormal_counts
from lib.units import fmt_us
from lib.latency.profiling import _session


def optimized_graph(model_path: str | Path, rdir: Path | None = None, threads: int = 0) -> onnx.ModelProto:
    """ORT's optimized graph of the model: stage 01's kept copy when there is one, else from a new session."""
    kept = Path(rdir) / "profile" / "ort_optimized.onnx" if rdir is not None else None
    if kept is not None and kept.exists():
        return onnx.load(str(kept), load_external_data=False)
    with tempfile.TemporaryDirectory(prefix="ortopt_") as tmp:
        opt = os.path.join(tmp, "optimized.onnx")
        sess = _session(str(model_path), "cpu", threads, "all", os.path.join(tmp, "prof"), opt)
        try:
            sess.end_profiling()
        except Exception:  # noqa: BLE001 - nothing was profiled; the file may not exist
            pass
        del sess
        return onnx.load(opt, load_external_data=False)


# a kernel flagged from this share of subnormal values among its nonzero float weights and this many multiply-adds
# on them: on 19 unseen trained models, a 1% share alone named 5, of which 4 ran as predicted (their flagged kernels
# had under 3.2M such multiply-adds); the one that ran 3x slower had four kernels past both (29M-75M each)
SUBNORMAL_SHARE, SUBNORMAL_MACS = 0.10, 1e6


def subnormal_weights(model_path: str | Path, g, per_kernel: pd.DataFrame) -> dict[str, float]:
    """{ORT kernel: the share of subnormal (denormal) values among the float weights of the original nodes it runs}, for kernels past SUBNORMAL_SHARE and SUBNORMAL_MACS (share x its MACs). Read from the model file
    (01's kept copy of ORT's optimized graph has its large weights stripped), one weight at a time through a
    memory map, only those of kernels with SUBNORMAL_MACS or more. On an Intel Xeon two 1x1 convs of
    ppocrv6_det_small with 24% and 63% of them ran 80x and 190x their bound (a multiply-add on a subnormal can
    take a microcode assist there), while on an AMD EPYC the whole model was predicted within 1%: no kernel model
    learns that from shapes, so the prediction says so."""
    heavy = per_kernel[np.nan_to_num(per_kernel["macs"].to_numpy(float)) >= SUBNORMAL_MACS]
    wanted = {x for nodes in heavy["nodes"].fillna("") for x in str(nodes).split(";") if x}
    if not wanted:
        return {}
    ins = {node: list(n.input) for node, n in zip(g.names, g.nodes) if node in wanted}
    counts = subnormal_counts(model_path, {i for v in ins.values() for i in v})

    def share(inputs) -> float:
        """Of all the node's weight values (a 99%-pruned conv's 0.46% read "50%" of its nonzero ones; a bias's 8
        values, 12% of the bias, gave a conv of 36,928 weights that share)."""
        total = sum(counts[i][2] if i in counts else (g.tensors[i].numel or 0) if i in g.tensors else 0
                    for i in inputs if i in g.initializers)
        return sum(counts[i][0] for i in inputs if i in counts) / total if total else 0.0
    node_share = {node: share(v) for node, v in ins.items()}
    out = {}
    for k, nodes, macs in zip(heavy["kernel"], heavy["nodes"].fillna(""), heavy["macs"]):
        v = max((node_share.get(x, 0.0) for x in str(nodes).split(";") if x), default=0.0)
        if v >= SUBNORMAL_SHARE and v * float(macs) >= SUBNORMAL_MACS:
            names = [x for x in str(nodes).split(";") if x]     # the model's node where ORT renamed it (r2_nchwc)
            out[str(k) if str(k) in names else f"{k} ({', '.join(names[:2])}{', ...' if len(names) > 2 else ''})"] = \
                round(float(v), 3)
    return out


def kernel_prediction(km: KernelModel, g, metrics: pd.DataFrame, optimized: onnx.ModelProto, host: dict) -> dict:
    """The kernel model's session prediction (see the module docstring) and its per-kernel table."""
    kt = kernel_table(g, metrics, optimized)
    per = km.predict_kernels(kt, host)
    return {**km.session(per), "kernel_model_families": km.families, "threads": km.threads,
            "per_kernel": per.assign(pattern=kt["pattern"].to_numpy(), macs=kt["macs"].to_numpy(),
                                     nodes=kt["nodes"].to_numpy())}


def at_host_speed(pred: dict, profile_meta: dict | None, latency_model_file) -> dict:
    """The kernel model's prediction taken to the host's speed that 01 measured beside the model
    (lib/latency/host_reference.py): predicted_latency_us and interval_us times the factor, the prediction for
    the calibration host's speed kept as calibration_host_latency_us; without a factor, unchanged and said why."""
    f, why = host_reference.factor(profile_meta, latency_model_file)
    if f is None:
        return {**pred, "host_speed_factor": None, "host_speed_note": why}
    iv = pred.get("interval_us")
    return {**pred, "calibration_host_latency_us": pred["predicted_latency_us"], "host_speed_factor": f,
            "predicted_latency_us": pred["predicted_latency_us"] * f,
            "interval_us": [iv[0] * f, iv[1] * f] if iv else iv}


def kernel_node_times(km: KernelModel, kt: pd.DataFrame, host: dict) -> dict[str, float]:
    """Per original node, the kernel model's time for the kernels it anchors (us), scaled so that the nodes add up
    to the predicted session (what happens between kernels, spread in proportion: its per-kernel term can be
    negative, the profiler's share). A kernel ORT inserted with no node of its own (a layout Reorder) counts with
    the next kernel that has one (the conv it serves); trailing ones with the last."""
    t = km.predict_kernels(kt, host)["pred_us"].to_numpy(float)
    t = t * (km.with_overhead(t.sum(), len(t)) / t.sum()) if t.sum() > 0 else t
    out: dict[str, float] = {}
    pending, last = 0.0, None
    for node, x in zip(kt["node"].fillna("").astype(str), t):
        if not node:
            pending += x
            continue
        out[node] = out.get(node, 0.0) + x + pending
        pending, last = 0.0, node
    if last is not None:
        out[last] += pending
    return out


def model_kernels(rdir: Path, model_path, spec, measured: bool, n_nodes: int) -> pd.DataFrame | None:
    """The model's ORT kernels without times (what a kernel model predicts, for another device in 07): 02's
    graph, ops_profile.csv's costs, ORT's optimized graph (01's kept copy beside a profile 03 accepted). None from
    KERNEL_MODEL_MAX_NODES nodes, or where ORT cannot optimize the model (said so)."""
    if n_nodes >= KERNEL_MODEL_MAX_NODES:
        print(f"note: no kernel model for the devices on {n_nodes:,} nodes (from {KERNEL_MODEL_MAX_NODES:,}): "
              f"their efficiency models stand")
        return None
    graph = analysed(rdir, model_path, spec)[0].graph
    try:
        optimized = optimized_graph(model_path, rdir if measured else None)
        return kernel_table(graph, read_csv(rdir, "ops_profile.csv"), optimized)
    except StageError as e:
        print(f"note: no kernel model for the devices ({e}): their efficiency models stand")
        return None


def predict_session(g, metrics: pd.DataFrame, model_path, host: dict, latency_model_file, baseline_us: float,
                    rdir: Path | None = None) -> dict:
    """merge_meta.json's `prediction` (without the per-kernel table): kernel model, interval, baseline."""
    out = {"baseline_latency_us": baseline_us, "baseline": "efficiency model (lib/latency/latency_model.py)"}
    try:
        km = load_kernel_model(latency_model_file)
    except StageError as e:
        km, out["note_kernel_model"] = None, str(e)
    if km is None or g is None:
        why = ("no graph (run 03 with --model)" if km is not None
               else f"no kernel model in {latency_model_file} (run make calibrate)")
        return {**out, "predicted_latency_us": baseline_us, "interval_us": None, "predicted_by": "baseline",
                "note_kernel_model": out.get("note_kernel_model", why)}
    pred = kernel_prediction(km, g, metrics, optimized_graph(model_path, rdir), host)
    per = pred.pop("per_kernel")
    return {**out, **pred, "predicted_by": "kernel model", "unseen_kernel_share": float(
        np.sum(per.loc[~per["seen"], "pred_us"]) / max(float(per["pred_us"].sum()), 1e-9)),
        **subnormal_fields(subnormal_weights(model_path, g, per))}


ORT_SLOW_NODES = 20_000     # from here ONNX Runtime's session creation takes long enough to say so first
KERNEL_MODEL_MAX_NODES = 20_000     # larger graphs keep the baseline (stage 03 stays fast at 200k nodes)


def _graph_and_fusions(df: pd.DataFrame, measured: bool, rdir: Path, model) -> tuple[object, str, str]:
    """02's inferred graph (None without --model), where the fusions come from, and ORT's error where it cannot
    load the model; without a profile, ORT's fusions from its optimized graph are written into df's
    attribution/fused_into."""
    fusion = "01's attribution" if measured else "none known (no profile and no --model)"
    if not model:
        return None, fusion, ""
    if not measured and len(df) >= ORT_SLOW_NODES:
        print(f"note: ONNX Runtime optimizes the {len(df):,}-node graph to find its fusions; its optimizer is "
              f"superlinear (37 s at 50k nodes on 2 cores, over 10 min at 200k): leave out --model to predict "
              f"without fusions", flush=True)
    if measured and len(df) >= KERNEL_MODEL_MAX_NODES:
        return None, fusion, ""
    graph = analysed(rdir, model)[0].graph
    if not measured:
        try:
            roles = ort_node_roles(model, graph=graph)
            df[["attribution", "fused_into"]] = roles[["attribution", "fused_into"]].to_numpy()
            fusion = "ORT's optimized graph"
        except StageError as e:     # a custom op ORT lacks: 02's costs stand, the prediction assumes no fusion
            print(f"note: no fusion known for the prediction, every node counted: {e}")
            return None, f"none known ({e})", str(e)
    return graph, fusion, ""


def baseline_host(host: dict, latency_model_file) -> dict:
    """The host figures the baseline efficiency model was fitted against (make calibrate's kernel part raises
    host.yaml's peaks and bandwidths after the baseline is fitted: its efficiencies are relative to the old ones)."""
    if not Path(latency_model_file).exists():
        return host
    fitted = load_latency_model(latency_model_file).fitted_roofline()
    return host if fitted is None else {**host, "peak_flops_per_s": fitted[0], "mem_bw_bytes_per_s": fitted[1]}


def stage_prediction(df: pd.DataFrame, measured: bool, host: dict, rdir: Path, model, latency_model_file,
                     metas: dict) -> tuple[pd.DataFrame, dict]:
    """Stage 03: t_pred_us per node (the baseline efficiency model, fused nodes 0) and merge_meta's
    `prediction`: the kernel model's session latency with its interval, the baseline beside it."""
    graph, fusion, ort_error = _graph_and_fusions(df, measured, rdir, model)
    fixed = with_folded_run_bytes(graph, df) if graph is not None else df
    if fixed is not df:         # 02 charged 0 bytes to folded nodes that ORT runs all the same
        df = roofline(fixed, host)
    t, info = predict_profile(df, baseline_host(host, latency_model_file), latency_model_file)
    df["t_pred_us"] = t
    if len(df) >= KERNEL_MODEL_MAX_NODES:
        graph = None            # the kernel table and the trees over every kernel: seconds at 200k nodes
    try:
        # 01's kept optimized graph only beside the profile 03 accepted as this model's (never a stale one)
        pred = predict_session(graph, df, model, host, latency_model_file, info["predicted_latency_us"],
                               rdir if measured else None)
        if graph is None and model and pred["predicted_by"] == "baseline":    # --model was given: say why not
            pred["note_kernel_model"] = (
                f"kernel model not run on {len(df):,} nodes (from {KERNEL_MODEL_MAX_NODES:,}): the baseline stands"
                if len(df) >= KERNEL_MODEL_MAX_NODES else f"kernel model not run, the baseline stands: {ort_error}")
    except StageError as e:     # ORT cannot create a session for the optimized graph: the baseline stands
        pred = {"baseline_latency_us": info["predicted_latency_us"], "predicted_latency_us": info["predicted_latency_us"],
                "interval_us": None, "predicted_by": "baseline", "note_kernel_model": str(e)}
    if pred["predicted_by"] == "kernel model" and measured:
        pred = at_host_speed(pred, metas.get("profile_meta.json"), latency_model_file)
    ran = (metas.get("profile_meta.json") or {}).get("cpu") if measured else None
    pred["other_cpu_note"] = host_reference.latency_model_note(latency_model_file, ran)
    session = (metas.get("profile_meta.json") or {}).get("session_latency", {}).get("median_us")
    pred["threads_note"] = threads_note(pred, metas.get("profile_meta.json") if measured else None)
    scored = session and not pred["threads_note"]      # a prediction for another thread count: no error to score
    pred.update({"fusion_from": fusion, "model": info["model"], "note": info["note"], "measured_latency_us": session,
                 "error": pred["predicted_latency_us"] / session - 1 if scored else None,
                 "baseline_error": pred["baseline_latency_us"] / session - 1 if scored else None})
    return df, pred


def threads_note(pred: dict, profile_meta: dict | None) -> str:
    """Where 01 ran with another intra-op thread count than make calibrate's (0 = ORT's default, all cores): the
    kernel model predicts for the calibration's count only (resnet18 with 01 --threads 1 on 2 cores: 35.8 ms
    measured, 19.1 ms predicted, read as a -47% error)."""
    if not profile_meta or pred.get("threads") is None or profile_meta.get("threads") is None:
        return ""
    cores = (profile_meta.get("cpu") or {}).get("cores") or os.cpu_count()
    ran, calibrated = int(profile_meta["threads"]) or cores, int(pred["threads"]) or cores
    if ran == calibrated:
        return ""
    return (f"01 ran with {ran} intra-op thread(s) and make calibrate with {calibrated}: the prediction is for "
            f"{calibrated} and is not compared with the session (profile with --threads {pred['threads']}, or "
            f"calibrate with --threads {profile_meta['threads']})")


def print_prediction(pred: dict) -> None:
    ms = fmt_us         # a tiny model's 3 us read '0.00 ms' in milliseconds
    err = f" ({100 * pred['error']:+.0f}% vs the measured session {ms(pred['measured_latency_us'])})" \
        if pred["error"] is not None else ""
    iv = f", interval {ms(pred['interval_us'][0])}-{ms(pred['interval_us'][1])}" if pred.get("interval_us") else ""
    print(f"predicted latency {ms(pred['predicted_latency_us'])} ({pred['predicted_by']}{iv}){err}")
    if pred.get("host_speed_factor"):
        print(f"  at the host's speed 01 measured: {pred['host_speed_factor']:.3f}x make calibrate's "
              f"({ms(pred['calibration_host_latency_us'])} at the calibration's speed)")
    elif pred.get("host_speed_note"):
        print(f"note: predicted at the calibration host's speed: {pred['host_speed_note']}")
    base = f" ({100 * pred['baseline_error']:+.0f}%)" if pred.get("baseline_error") is not None else ""
    print(f"baseline (efficiency model) {ms(pred['baseline_latency_us'])}{base}"
          + (f"; {pred['note']}" if pred["note"] else ""))
    if pred.get("unseen_kernel_types"):
        print(f"note: kernel types the kernel model never saw ({100 * pred['unseen_kernel_share']:.0f}% of the "
              f"predicted time, guessed from similar kernels): {', '.join(pred['unseen_kernel_types'][:8])}")
    if pred.get("subnormal_note"):
        print(f"warning: {pred['subnormal_note']}")
    for key in ("other_cpu_note", "threads_note"):
        if pred.get(key):
            print(f"warning: {pred[key]}")
    if pred.get("note_kernel_model"):
        print(f"note: {pred['note_kernel_model']}")


def subnormal_fields(kernels: dict[str, float]) -> dict:
    """The prediction's `subnormal_weight_kernels` (subnormal_weights) and, where there are any, its one-line
    `subnormal_note` (03 prints it, the report shows it)."""
    if not kernels:
        return {"subnormal_weight_kernels": {}}
    top = sorted(kernels.items(), key=lambda kv: -kv[1])
    return {"subnormal_weight_kernels": kernels,
            "subnormal_note": f"{len(top)} kernel{'s' if len(top) > 1 else ''} read subnormal (denormal) weights ("
            + ", ".join(f"{k} {100 * v:.0f}%" for k, v in top[:4]) + (", ..." if len(top) > 4 else "")
            + "): the prediction prices them as calibration's micro-benchmarks ran, and how they are laid out moves "
            "it (an Intel Xeon ran two such convs of PP-OCRv6 at 80x and 190x their bound); ONNX Runtime's session "
            "option session.set_denormal_as_zero = 1 flushes them"}
