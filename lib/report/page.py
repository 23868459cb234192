"""Stage 11: one self-contained HTML page per model (results/<stem>/report.html) and a page comparing every
analysed model (results/index.html).

The page is rendered by Jinja2 (lib/report/templates/report.html.j2) with Plotly figures; Plotly's JavaScript, shipped
inside the plotly Python package, is embedded once, so the file opens from disk with no network. Every section
reads the artifacts of the stage that makes them, checked to belong together (lib/provenance.py); a section
whose artifacts are missing says which stage to run instead. The what-if section embeds 07's split_model.json
and re-evaluates 07's split model in the browser (the JavaScript mirrors lib/split/ranking.py).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from markupsafe import Markup

from lib.artifacts import PRODUCER, read_csv, read_json, require_columns
from lib.errors import StageError
from lib.provenance import Results
from lib.analysis.roofline import levels, node_bytes
from lib.report.beyond import beyond_section
from lib.report.fmt import (num as _num, data_uri, fig_html as _fig_html, mj, ms, nbytes, node_label, pct, per_s,
                            plot_layout as _layout, plot_text, script_json, si, table)
from lib.report.graph import THRESHOLD, graph_section
from lib.zoo.table import zoo_html

TEMPLATES = Path(__file__).resolve().parent / "templates"
TEMPLATE = "report.html.j2"
SECTIONS = [("summary", "Summary"), ("graph", "Graph"), ("time", "Where the time goes"), ("roofline", "Roofline"),
            ("critical-path", "Critical path"), ("energy", "Energy"), ("offload", "Offload candidates (Amdahl)"),
            ("splits", "Two-device splits"), ("beyond", "DAG optimum, pipeline, bandwidth"),
            ("what-if", "What if: other devices and link")]
# stamped meta files (run id + identity) a report may combine; metrics_meta.json (stage 02) is required
METAS = ["metrics_meta.json", "profile_meta.json", "merge_meta.json", "critical_path_meta.json", "energy_meta.json",
         "workload_profile.json", "split_summary.json", "split_model.json", "validation_report.json"]


# ---------------------------------------------------------------- artifacts

class Artifacts:
    """The results folder's artifacts, read once; the stamped metas checked to belong together."""

    def __init__(self, rdir: Path, light=None):
        self.rdir = Path(rdir)
        self.res = Results(self.rdir)
        if not self.res.has("metrics_meta.json"):
            raise StageError(f"{self.rdir / 'metrics_meta.json'} not found: run 02_shapes_flops_bytes.py first "
                             f"(make all MODEL=... runs every stage)")
        present = [n for n in METAS if self.res.has(n)]
        self.metas = self.res.require(*present, light=light)
        self.identity = self.metas["metrics_meta.json"]["identity"]
        self.read: list[str] = list(present)
        self._csv: dict[str, pd.DataFrame | None] = {}

    def meta(self, name: str) -> dict | None:
        return self.metas.get(name)

    def json(self, name: str) -> dict | None:
        if name in self.metas:
            return self.metas[name]
        if not (self.rdir / name).exists():
            return None
        self.read.append(name)
        return read_json(self.rdir, name)

    def csv(self, name: str, columns: tuple[str, ...] = ()) -> pd.DataFrame | None:
        if name not in self._csv:
            exists = (self.rdir / name).exists()
            self._csv[name] = read_csv(self.rdir, name) if exists else None
            if exists:
                self.read.append(name)
        df = self._csv[name]        # its columns checked at every use (the first reader may have asked for none)
        return df if df is None else require_columns(df, self.rdir / name, columns)

    def missing(self, name: str) -> str:
        return f"{name} is missing: run {PRODUCER.get(name, 'its stage')} (make all runs every stage)"


# ---------------------------------------------------------------- summary

def level_bandwidths(host: dict) -> str:
    """'; per level (the roofline's bound): L1 288 GB/s, ..., DRAM 46 GB/s' when the host file has them."""
    names, _, bw = levels(host)
    return "" if len(names) < 2 else "; per level (the roofline's bound): " + ", ".join(
        f"{lv} {si(b, 'B/s')}" for lv, b in zip(names, bw))


def summary_section(art: Artifacts) -> dict:
    m = art.meta("metrics_meta.json")
    prof_meta, merge = art.meta("profile_meta.json"), art.meta("merge_meta.json")
    ident = art.identity
    shapes = ", ".join(f"{k} = {'x'.join(map(str, v))}" for k, v in (ident["inputs"] or {}).get("input_shapes", {}).items())
    rows = [["model", ident["model"]["path"]], ["graph sha256", ident["model"]["graph_sha256"][:16] + "\u2026"],
            ["input shapes", shapes + (f" (preset {ident['inputs']['preset']})" if ident["inputs"].get("preset") else "")],
            ["nodes", f"{m['nodes']} ({m.get('unknown_cost_nodes', 0)} of unknown cost)"],
            ["MACs (Conv/Gemm/MatMul)", si(m.get("conv_gemm_matmul_macs", m.get("total_macs")), "MAC")],
            ["FLOPs (all known ops; 1 MAC = 2 FLOPs)", si(m.get("total_flops"), "FLOP")],
            ["weights", nbytes(m.get("weight_bytes"))], ["activations written", nbytes(m.get("act_out_bytes"))]]
    bd = art.csv("boundaries.csv")
    peak = bd["live_bytes"].max() if bd is not None and len(bd) else None
    rows.append(["peak live activation memory", nbytes(peak) + " (largest live set between two nodes in topological "
                 "order, stage 07)" if peak is not None else "n/a: " + art.missing("boundaries.csv")])
    if prof_meta:
        sl = prof_meta["session_latency"]
        rows += [["session latency (session.run wall time, profiler off)", f"{ms(sl['median_us'])} median, p10 {ms(sl['p10_us'])}, "
                  f"p90 {ms(sl['p90_us'])} over {sl['runs']} runs"
                  + (f" in {prof_meta['sessions']} sessions" if prof_meta.get("sessions", 1) > 1 else "")],
                 ["kernel time per run", f"{ms(prof_meta['kernel_time_per_run_us']['median'])}, "
                  f"{pct(100 * prof_meta['kernel_time_coverage'])} attributed to original nodes "
                  f"({prof_meta.get('nodes_with_kernel')} with a kernel, {prof_meta.get('nodes_fused')} fused)"],
                 ["profiled with", f"ONNX Runtime {prof_meta['versions'].get('onnxruntime', '?')}, provider "
                  f"{prof_meta['provider']}, threads {prof_meta['threads'] or 'ORT default'}, opt level "
                  f"{prof_meta['opt_level']}, seed {prof_meta['seed']}"]]
    else:
        rows.append(["session latency", "not measured: " + art.missing("profile_meta.json")])
    rows.append(["predicted latency (stage 03)", prediction_text(merge, art.missing("merge_meta.json"))])
    host = (merge or {}).get("host", {})
    plat = (prof_meta or m).get("versions", {}).get("platform", "?")
    rows.append(["host", f"{host.get('name', 'n/a')}; {plat}"])
    if host:
        rows.append([f"host model ({merge.get('host_config', 'configs/host.yaml')})", f"peak {si(host['peak_flops_per_s'].get('float', host['peak_flops_per_s']['default']), 'FLOP/s')} "
                     f"fp32, memory {si(host['mem_bw_bytes_per_s'], 'B/s')} (STREAM triad)" + level_bandwidths(host)])
    return {"ok": True, "table": table(["", ""], rows)}


def _ms_range(lo, hi) -> str:
    return f"{_num(lo) / 1e3:.3g}-{_num(hi) / 1e3:.3g} ms"


def _signed_pct(ratio) -> str | None:
    v = _num(ratio)
    return None if v is None else f"{100 * v:+.0f}%"


def prediction_text(merge: dict | None, missing: str = "merge_meta.json is missing") -> str:
    """The summary's "predicted latency" row from merge_meta.json's `prediction`: the figure, its interval and
    what predicted it, its error against the measured session, the baseline beside it, the kernel types the
    kernel model never saw; "n/a" when 03 did not run (`missing` says so) or wrote no prediction (a
    merge_meta.json from before 03 predicted)."""
    if merge is None:
        return "n/a: " + missing
    pred = merge.get("prediction")
    if not pred or _num(pred.get("predicted_latency_us")) is None:
        return ("n/a: merge_meta.json has no prediction (written before 03 predicted: re-run "
                "03_merge_profile_metrics.py)")
    by, iv = pred.get("predicted_by", "?"), pred.get("interval_us")
    how = "baseline: efficiency model" if by == "baseline" else by + (f", interval {_ms_range(*iv)}" if iv else "")
    err = _signed_pct(pred.get("error"))
    scored = f", {err} vs measured" if err else "" if pred.get("threads_note") else ", no measured session"
    text = f"{ms(pred['predicted_latency_us'])} ({how})" + scored
    if by != "baseline" and _num(pred.get("baseline_latency_us")) is not None:
        b = _signed_pct(pred.get("baseline_error"))
        text += f"; baseline (efficiency model) {ms(pred['baseline_latency_us'])}" + (f" ({b})" if b else "")
    unseen = pred.get("unseen_kernel_types") or []
    if unseen:
        share = _num(pred.get("unseen_kernel_share"))
        text += (f"; {len(unseen)} kernel type{'s' if len(unseen) > 1 else ''} never seen in training ("
                 f"{'?' if share is None else f'{100 * share:.0f}'}% of the predicted time): {', '.join(unseen)}")
    if pred.get("subnormal_note"):
        text += "; " + pred["subnormal_note"]
    for key in ("other_cpu_note", "threads_note"):
        if pred.get(key):
            text += "; " + pred[key]
    if by == "baseline" and pred.get("note_kernel_model"):
        text += f"; kernel model not used: {pred['note_kernel_model']}"
    if by != "baseline" and _num(pred.get("host_speed_factor")) is not None:
        text += (f"; at the host speed 01 measured ({pred['host_speed_factor']:.2f}x make calibrate's; "
                 f"{ms(pred['calibration_host_latency_us'])} at the calibration's)")
    return text


# ---------------------------------------------------------------- time

def _measured(prof: pd.DataFrame) -> bool:
    return prof["latency_us"].notna().any() and prof["latency_us"].fillna(0).sum() > 0


def time_section(art: Artifacts, top_n: int = 15) -> dict:
    prof = art.csv("ops_profile.csv")
    if prof is None:
        return {"ok": False, "missing": art.missing("ops_profile.csv")}
    measured = _measured(prof)
    col = "latency_us" if measured else "t_roofline_us"
    t = prof[col].fillna(0.0)
    total = t.sum()
    fused = prof["fused_into"].fillna("").value_counts() if "fused_into" in prof else pd.Series(dtype=int)
    rows = []
    for i in t.nlargest(top_n).index:
        r = prof.loc[i]
        rows.append([len(rows) + 1, r["node"], r.get("layer", "") or "", r["op_type"], ms(r[col]),
                     pct(100 * r[col] / total if total else None), r["bound"],
                     "" if pd.isna(r.get("achieved_gflops")) else f"{r['achieved_gflops']:.3g}",
                     int(fused.get(r["node"], 0)) or ""])
    top = table(["#", "node", "layer", "op", "time", "share", "bound (roofline)", "achieved GFLOP/s",
                 "nodes fused into it"], rows, {0, 4, 5, 7, 8})
    by_bound = prof.assign(_t=t).groupby("bound")["_t"].sum()
    bound_rows = [[b, ms(v), pct(100 * v / total if total else None)] for b, v in by_bound.sort_values(ascending=False).items()]
    note = ("measured kernel time (stage 01)" if measured else
            "no measured latency (stage 01 did not run): roofline time instead, " + art.missing("profile_meta.json"))
    return {"ok": True, "note": note, "top": top, "classes_plot": _class_time_plot(prof, measured),
            "bound": table(["bound (by the host roofline)", "time", "share of time"], bound_rows, {1, 2}),
            "total": ms(total)}


def _class_time_plot(prof: pd.DataFrame, measured: bool) -> str:
    import plotly.graph_objects as go

    fused = prof["attribution"].fillna("").eq("fused") if "attribution" in prof else pd.Series(False, index=prof.index)
    own = prof[~fused] if measured else prof
    by = own.groupby("op_class").agg(measured=("latency_us", "sum"), roofline=("t_roofline_us", "sum"))
    n_fused = prof[fused].groupby("op_class").size()
    classes = sorted(set(prof["op_class"]), key=lambda c: by["measured" if measured else "roofline"].get(c, 0.0))
    by = by.reindex(classes)
    names = [c + (f"  (+{int(n_fused[c])} fused)" if c in n_fused else "") for c in classes]
    fig = go.Figure()
    if measured:
        fig.add_bar(y=names, x=(by["measured"] / 1e3).where(by["measured"] > 0), orientation="h",
                    name="measured (ORT kernels)", marker_color="#1f77b4")
    fig.add_bar(y=names, x=(by["roofline"] / 1e3).where(by["roofline"] > 0), orientation="h",
                name="roofline lower bound of the same nodes", marker_color="#2ca02c")
    _layout(fig, "time by op class (log scale); '+k fused': nodes ORT fused into another class's kernel, whose time "
            "is counted there", 110 + 34 * len(classes), barmode="group", xaxis={"type": "log", "title": "ms per inference"})
    return _fig_html(fig, "time-classes-plot")


# ---------------------------------------------------------------- roofline

def roofline_points(prof: pd.DataFrame) -> pd.DataFrame:
    """The nodes a roofline can show: their own measured kernel time, FLOPs and bytes (AI > 0)."""
    ok = (prof["achieved_gflops"].fillna(0) > 0) & (prof["ai_flop_per_byte"].fillna(0) > 0)
    return prof[ok]


LEVEL_COLORS = {"L1": "#2ca02c", "L2": "#17becf", "L3": "#9467bd", "DRAM": "#d62728"}
DASHES = ["solid", "dash", "dot"]


def dtype_peaks(host: dict, dtypes) -> list[tuple[float, list[str]]]:
    """The host's peak FLOP/s of each dtype present, highest first, dtypes sharing a peak together."""
    roofs: dict[float, list[str]] = {}
    for d in sorted(set(dtypes)):
        roofs.setdefault(float(host["peak_flops_per_s"].get(d, host["peak_flops_per_s"]["default"])), []).append(d)
    return sorted(roofs.items(), reverse=True) or [(float(host["peak_flops_per_s"]["default"]), ["default"])]


def ai_axis(pts: pd.DataFrame, host: dict) -> np.ndarray:
    """The AI values the roofs are drawn at: around the points, and far enough right to show every ridge point."""
    ridge = dtype_peaks(host, pts["dtype"])[0][0] / levels(host)[2].min()
    ai = pts["ai_flop_per_byte"]
    lo, hi = (max(ai.min() / 3, 1e-3), ai.max() * 3 + 1) if len(ai) else (1e-2, 10.0)
    return np.logspace(np.log10(lo), np.log10(max(hi, 2 * ridge)), 120)


def level_label(name: str, size: float, bw: float) -> str:
    return f"{name} ({nbytes(size)}): {bw / 1e9:.3g} GB/s" if np.isfinite(size) else f"{name}: {bw / 1e9:.3g} GB/s"


def add_roofs(fig, host: dict, dtypes, ai: np.ndarray) -> list[str]:
    """The host's roofs on `fig`: with per-level figures (make calibrate's caches_bytes and bandwidth_bytes_per_s),
    one memory roof per level, min(top peak, bw x AI), and each dtype's peak as a ceiling from where the fastest
    level reaches it; without them one roof per dtype, min(peak, bw x AI), at the one (DRAM) bandwidth. Returns the
    level names (lib/analysis/roofline.py's levels(): the ones stage 03's bound picks from)."""
    names, size, bw = levels(host)
    peaks = dtype_peaks(host, dtypes)
    if len(names) == 1:
        for k, (peak, ds) in enumerate(peaks):
            fig.add_scatter(x=ai, y=np.minimum(peak, bw[0] * ai) / 1e9, mode="lines", hoverinfo="skip",
                            line={"color": "black", "width": 1.5, "dash": DASHES[k % 3]},
                            name=f"roof ({', '.join(ds)}): {peak / 1e9:.0f} GFLOP/s, {bw[0] / 1e9:.1f} GB/s")
        return names
    for name, s, b in zip(names, size, bw):
        fig.add_scatter(x=ai, y=np.minimum(peaks[0][0], b * ai) / 1e9, mode="lines", hoverinfo="skip", meta="level",
                        line={"color": LEVEL_COLORS.get(name, "gray"), "width": 1.5}, name=level_label(name, s, b))
    for k, (peak, ds) in enumerate(peaks):
        fig.add_scatter(x=ai, y=np.where(bw.max() * ai >= peak, peak, np.nan) / 1e9, mode="lines", hoverinfo="skip",
                        line={"color": "black", "width": 1.5, "dash": DASHES[k % 3]},
                        name=f"peak ({', '.join(ds)}): {peak / 1e9:.0f} GFLOP/s")
    return names


def add_node_points(fig, pts: pd.DataFrame) -> None:
    """One marker trace per op class; the hover names the node, its layer, op, AI, achieved, time, bound and
    (ops_profile.csv's mem_level, when present) the memory level its working set fits in."""
    has_level = "mem_level" in pts
    for c in sorted(set(pts["op_class"])):
        s = pts[pts["op_class"] == c]
        cols = [s["node"].map(plot_text), s["layer"].fillna("").map(plot_text), s["op_type"], s["latency_us"] / 1e3,
                s["bound"]]
        custom = np.stack(cols + ([s["mem_level"].fillna("")] if has_level else []), axis=1)
        fig.add_scatter(x=s["ai_flop_per_byte"], y=s["achieved_gflops"], mode="markers", name=f"{c} ({len(s)})",
                        meta="nodes", customdata=custom,
                        marker={"size": 6 + 40 * np.sqrt(s["pct_latency"].fillna(0) / 100), "opacity": 0.75,
                                "line": {"width": 0.5, "color": "black"}},
                        hovertemplate="<b>%{customdata[0]}</b><br>layer %{customdata[1]}<br>op %{customdata[2]}<br>"
                                      "AI %{x:.3g} FLOP/B<br>achieved %{y:.3g} GFLOP/s<br>%{customdata[3]:.3g} ms, "
                                      "%{customdata[4]}-bound by the roofline"
                                      + ("<br>working set in %{customdata[5]}" if has_level else "")
                                      + "<extra></extra>")


def level_note(host: dict) -> str:
    names, _, bw = levels(host)
    if len(names) == 1:
        return ("One memory roof: the host file has no per-level cache sizes and bandwidths (make calibrate measures "
                "them), so every node's bound uses this bandwidth.")
    return (f"Memory roofs: one per memory level of the host file ({', '.join(names)}). A node's bound (compute- or "
            f"memory-bound, its roofline time) uses the level its working set (the bytes its kernel reads and writes) "
            f"fits in, named in its hover: its memory roof is that level's."
            + (" Roofs of levels with equal bandwidths coincide." if len(set(bw)) < len(bw) else ""))


def roofline_section(art: Artifacts) -> dict:
    import plotly.graph_objects as go

    prof, merge = art.csv("ops_profile.csv"), art.meta("merge_meta.json")
    if prof is None or merge is None:
        return {"ok": False, "missing": art.missing("ops_profile.csv")}
    if not _measured(prof):
        return {"ok": False, "missing": "no measured latency, so no achieved performance: " + art.missing("profile_meta.json")}
    pts = roofline_points(prof)
    host = merge["host"]
    fig = go.Figure()
    names = add_roofs(fig, host, pts["dtype"], ai_axis(pts, host))
    add_node_points(fig, pts)
    _layout(fig, "achieved GFLOP/s against arithmetic intensity (marker area ~ share of time; hover for the node)",
            520, xaxis={"type": "log", "title": "arithmetic intensity (FLOP / byte)"},
            yaxis={"type": "log", "title": "achieved GFLOP/s (own FLOPs / measured latency)"})
    n_fused = int(prof["attribution"].fillna("").eq("fused").sum()) if "attribution" in prof else 0
    note = (f"{len(pts)} of {len(prof)} nodes plotted: those with their own measured kernel time, FLOPs and bytes. "
            f"{n_fused} were fused by ORT into another node's kernel (no time of their own); the rest have no FLOPs "
            f"(data movement) or did not run.")
    return {"ok": True, "plot": _fig_html(fig, "roofline-plot"), "note": note, "points": len(pts),
            "levels": names, "level_note": level_note(host)}


# ---------------------------------------------------------------- critical path

def critical_path_section(art: Artifacts, max_rows: int = 80) -> dict:
    import plotly.graph_objects as go

    cp, meta = art.csv("critical_path.csv"), art.meta("critical_path_meta.json")
    if cp is None or meta is None:
        return {"ok": False, "missing": art.missing("critical_path.csv")}
    timed = cp[cp["latency_us"] > 0]
    shown = timed.loc[sorted(timed["latency_us"].nlargest(max_rows).index)] if len(timed) > max_rows else timed
    # a fused group's time sits on its last node: the bar is named after the node whose kernel ran it
    labels = [plot_text(f"{int(r.order)}. {node_label(k, r.layer)}" + (f" (through {r.node})" if k != r.node else ""))
              for r, k in zip(shown.itertuples(), shown["kernel"] if "kernel" in shown else shown["node"])]
    fig = go.Figure(go.Bar(y=labels, x=shown["latency_us"] / 1e3, base=shown["start_us"] / 1e3, orientation="h",
                           customdata=np.stack([shown["op_type"], shown["start_us"] / 1e3], axis=1),
                           hovertemplate="%{y}<br>%{customdata[0]}: starts %{customdata[1]:.3g} ms, takes %{x:.3g} ms"
                                         "<extra></extra>", marker_color="#1f77b4"))
    _layout(fig, f"critical path: the {len(shown)} longest of {len(timed)} nodes with time (zero-time, fused nodes "
            f"are not drawn)", 140 + 16 * len(shown), yaxis={"autorange": "reversed", "tickfont": {"size": 9}},
            xaxis={"title": "ms since the start of the inference"})
    rows = [["critical path", ms(meta["critical_path_us"])], ["sum of node times", ms(meta["sum_node_us"])],
            ["parallelism (sum / critical path)", f"{meta['parallelism']:.2f}x" if meta["critical_path_us"] else "n/a"],
            ["nodes on the path", f"{meta['path_nodes']}"],
            ["topological stages (ASAP levels)", f"{meta['stages']}, at most {meta['max_ops_per_stage']} ops in one"],
            ["node weights", meta["weight"] + (f"; {meta['unknown_time_nodes']} nodes of unknown time counted 0"
                                                if meta.get("unknown_time_nodes") else "")]]
    return {"ok": True, "table": table(["", ""], rows), "plot": _fig_html(fig, "critical-path-plot")}


# ---------------------------------------------------------------- energy

def power_label(meta: dict) -> str:
    """Whose power figure 05's power x time energies use (older energy_meta.json: host.yaml or --avg-power-w)."""
    if "power" in meta:
        return meta["power"]["label"]
    return f"{meta['avg_power_w']:g} W assumed (host config or --avg-power-w)"


def energy_section(art: Artifacts) -> dict:
    import plotly.graph_objects as go

    energy = art.csv("energy.csv", ("op_class", "e_compute_j", "e_mem_j", "e_power_j", "e_total_j"))
    meta, merge = art.meta("energy_meta.json"), art.meta("merge_meta.json")
    if energy is None or meta is None:
        return {"ok": False, "missing": art.missing("energy.csv")}
    by = energy.groupby("op_class")[["e_compute_j", "e_mem_j", "e_power_j"]].sum(min_count=1)
    by = by.sort_values("e_compute_j")
    power, time_src = power_label(meta), meta.get("time_source", "measured")
    has_power = by["e_power_j"].fillna(0).sum() > 0
    fig = go.Figure()
    for col, name, colour in (("e_compute_j", "component model: compute (FLOPs x e_flop)", "#1f77b4"),
                              ("e_mem_j", "component model: data movement (bytes x e_byte)", "#ff7f0e"),
                              ("e_power_j", f"power x time: {power} x {time_src} node time", "#7f7f7f")):
        if col == "e_power_j" and not has_power:
            continue
        fig.add_bar(y=by.index, x=(by[col] * 1e3).where(by[col] > 0), orientation="h", name=name, marker_color=colour)
    _layout(fig, "energy per inference by op class, per method (log scale; per node: never measured)",
            130 + 40 * len(by), barmode="group", xaxis={"type": "log", "title": "mJ per inference"})
    e = (merge or {}).get("host", {}).get("energy", {})
    flop = ", ".join(f"{k} {v * 1e12:g} pJ" for k, v in (e.get("e_flop_j") or {}).items())
    comp = energy["e_compute_j"].sum() + energy["e_mem_j"].sum()
    rows = []
    counter = (meta.get("energy_per_inference") or {}).get("counter")
    if counter:
        rows.append(["counter", mj(counter["energy_j"]), "measured, whole inference only: " + counter["how"]])
    whole = (meta.get("energy_per_inference") or {}).get("power x time")
    rows += [["power x time", mj(whole["energy_j"]) if whole else "n/a (no time)",
              f"E = P x time, P = {power}; {whole['how'] if whole else 'no time'}. Per node: P x the node's "
              f"{time_src} time, an attribution, never a measurement"],
             ["component model", f"{mj(comp)} = compute {mj(energy['e_compute_j'].sum())} + data movement "
              f"{mj(energy['e_mem_j'].sum())}", f"E = FLOPs x e_flop(dtype) + bytes x e_byte; e_flop per FLOP: {flop}; "
              f"e_byte {e.get('e_byte_j', float('nan')) * 1e12:g} pJ/byte (estimates after Horowitz, ISSCC 2014, "
              f"in the host config); bytes = activations in + out + weights as its kernel moves them (a view 0, a pick 2 x "
              f"its output), as counted by stage 02 (a part of unknown size, a string tensor's, counts 0)"]]
    if not counter:
        rows.append(["counter", "not read", f"RAPL energy counters: {meta.get('counter_status', 'not tried')} "
                     f"(/sys/class/powercap)"])
    return {"ok": True, "table": table(["method", "energy per inference", "how, and whose power figure"], rows),
            "plot": _fig_html(fig, "energy-plot")}


# ---------------------------------------------------------------- offload

def offload_section(art: Artifacts) -> dict:
    kc = art.csv("kernel_candidates.csv", ("selected", "kernel", "ops", "pct_latency", "pct_energy", "ai_flop_per_byte",
                                           "bound", "reason"))
    amd = art.csv("amdahl.csv", ("scenario", "f_latency", "s_k_latency", "s_total_latency", "latency_before_us",
                                 "latency_after_us", "f_energy", "s_k_energy", "s_total_energy"))
    meta = art.meta("energy_meta.json")
    if kc is None or amd is None or meta is None:
        return {"ok": False, "missing": art.missing("kernel_candidates.csv")}
    crit = meta.get("offload", {}).get("criteria", {})
    k_rows = [["yes" if r.selected else "", r.kernel, r.ops, pct(r.pct_latency), pct(r.pct_energy),
               f"{r.ai_flop_per_byte:.3g}", r.bound, r.reason] for r in kc.itertuples()]
    sk = lambda v: "per kernel" if pd.isna(v) else f"{v:g}"     # noqa: E731 - several kernels: one S_k each
    a_rows = [[r.scenario, f"{r.f_latency:.3f}", sk(r.s_k_latency), f"{r.s_total_latency:.3f}x",
               f"{ms(r.latency_before_us)} \u2192 {ms(r.latency_after_us)}", f"{r.f_energy:.3f}", sk(r.s_k_energy),
               f"{r.s_total_energy:.3f}x"] for r in amd.itertuples()]
    return {"ok": True, "criteria": ", ".join(f"{k}: {v}" for k, v in crit.items()),
            "config": meta.get("offload_config", "configs/offload.yaml"),
            "kernels": table(["selected", "kernel (op class)", "ops", "share of time", "share of energy (component model)",
                              "AI (FLOP/B)", "bound", "why"], k_rows, {2, 3, 4, 5}),
            "amdahl": table(["scenario", "f (time)", "S_k (time)", "S_total (time)", "latency", "f (energy, component model)",
                             "S_k (energy)", "S_total (energy)"], a_rows, {1, 2, 3, 5, 6, 7})}


# ---------------------------------------------------------------- splits

def _split_row(name: str, lat, energy, thr, note: str = "") -> list:
    return [name, ms(lat), mj(energy), per_s(thr), note]


def splits_section(art: Artifacts) -> dict:
    bd, summ = art.csv("boundaries.csv"), art.meta("split_summary.json")
    if bd is None or summ is None:
        return {"ok": False, "missing": art.missing("split_summary.json")}
    best, fastest = summ.get("best"), summ.get("fastest")
    rows = [_split_row(f"all on A: {summ['device_a']['name']}", summ["all_on_a_us"], summ["all_on_a_energy_j"],
                       summ["all_on_a_throughput_per_s"], summ["device_a"]["time_source"]),
            _split_row(f"all on B: {summ['device_b']['name']}", summ["all_on_b_us"], summ["all_on_b_energy_j"],
                       summ["all_on_b_throughput_per_s"], summ["device_b"]["time_source"])]
    for label, r in (("recommended split (rank 1)", best), ("fastest split", fastest)):
        if r:
            rows.append(_split_row(f"{label}: b{r['boundary']} after {node_label(r['after_node'], r['after_layer'])}",
                                   r["est_latency_us"], r["est_energy_j"], r["throughput_per_s"],
                                   f"A {ms(r['t_dev_a_us'])} + link {ms(r['link_time_us'])} + B {ms(r['t_dev_b_us'])}"))
    ranked = bd[bd["rank"].notna()].sort_values("rank")
    top_k = int((art.json("system_config.json") or {}).get("ranking", {}).get("top_k", 10))
    cand = [[int(r.rank), int(r.boundary), node_label(r.after_node, r.after_layer), int(r.n_cut_tensors),
             nbytes(r.comm_bytes), ms(r.t_dev_a_us), ms(r.link_time_us), ms(r.t_dev_b_us), ms(r.est_latency_us),
             mj(r.est_energy_j), per_s(r.throughput_per_s), "" if pd.isna(r.pareto_layer) else int(r.pareto_layer),
             f"{r.score:.3f}"] for r in ranked.head(top_k).itertuples()]
    prune = art.json("candidate_pruning.json") or {}
    em = summ.get("energy_method") or {"method": "power x time", "power": "each device's power_w (system config)"}
    return {"ok": True, "advice": summ["verdict"]["advice"], "verdict": summ["verdict"],
            "energy_method": f"{em['method']}: {em['power']}" + (f"; link: {em['link']}" if em.get("link") else ""),
            "ranking": summ.get("ranking", {}), "baselines": table(["", "latency", "energy (power x time)", "throughput", "note"], rows, {1, 2, 3}),
            "candidates": table(["rank", "b", "after node", "cut", "Comm", "t_A", "link", "t_B", "est. latency",
                                 "est. energy (power x time)", "throughput (pipelined)", "Pareto layer", "score"], cand,
                                {0, 1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}),
            "pruning": ", ".join(f"{k}: {v}" for k, v in prune.get("by_rule", {}).items()),
            "n_boundaries": len(bd), "n_ranked": len(ranked), "exported": exported_splits(art, bd)}


def exported_splits(art: Artifacts, bd: pd.DataFrame) -> dict:
    """Each split stage 08 exported: validation figures and its split-context diagram, embedded."""
    rep = art.meta("validation_report.json")
    if rep is None:
        return {"ok": False, "missing": art.missing("validation_report.json")}
    out = []
    for s in rep.get("splits", []):
        b = int(s["boundary"])
        folder = art.rdir / "splits" / f"b{b}"
        img = next((u for u in (data_uri(folder / f"split_context.{e}") for e in ("svg", "png")) if u), None)
        lat = s.get("latency_median", {})
        layer = bd["after_layer"].iat[b] if "after_layer" in bd and b < len(bd) else ""
        cut = [[t, f"{c['max_abs_diff']:.2e}", f"{c['max_abs_value']:.3g}", "pass" if c["pass"] else "FAIL"]
               for t, c in (s.get("cut_tensors") or {}).items()]
        diff = s.get("max_abs_diff")
        out.append({"boundary": b, "after": node_label(s["after_node"], layer), "pass": bool(s.get("pass")),
                    "max_abs_diff": f"{diff:.2e}" if diff is not None else f"export failed: {s.get('error', '?')}",
                    "bound": _bound_text(s),
                    "comm": nbytes(s.get("comm_bytes")), "image": img, "folder": f"splits/b{b}/",
                    "latency": ", ".join(f"{k.replace('_us', '')} {ms(v)}" for k, v in lat.items()),
                    "cut": table(["cut tensor", "max |part1 - full|", "max |value|", ""], cut)})
    return {"ok": True, "splits": out, "all_pass": rep.get("all_pass"),
            "note": "" if out else "stage 08 exported no split (no ranked candidate, or none asked for)"}


def _bound_text(split: dict) -> str:
    """The exactness check's criterion of a split: the largest bound of its outputs relative to their scale (the
    report showed '(atol None, rtol None)': those are 08's recorded options, not the criterion)."""
    outs = ((split.get("exactness") or {}).get("outputs") or {}).values()
    rel = [o["bound"] / o["scale"] for o in outs if o.get("scale") and o.get("bound") is not None]
    return f"bound {max(rel):.1e} of the output's scale, graph optimizations off" if rel else "exact match required"


# ---------------------------------------------------------------- what-if

def measured_key(model: dict) -> str | None:
    """The device whose per-node times in split_model.json are 01's measured latency (nodes.latency_<key>_us), or
    None: 07 now fills both lists always (a modelled device's own times), so only devices.<key>.source tells."""
    return next((k for k in ("A", "B") if model["devices"].get(k, {}).get("source") == "measured"
                 and model["nodes"].get(f"latency_{k.lower()}_us") is not None), None)


def whatif_section(art: Artifacts) -> dict:
    model = art.meta("split_model.json")
    if model is None:
        return {"ok": False, "missing": art.missing("split_model.json")}
    data = {k: v for k, v in model.items() if k not in ("run_id", "identity", "upstream")}
    return {"ok": True, "json": script_json(data), "devices": model["devices"], "link": model["link"],
            "link_name": model.get("link_name", ""), "measured": measured_key(model) is not None,
            "ranking": model["ranking"], "constraints": {k: v for k, v in model["constraints"].items() if v is not None}}


# ---------------------------------------------------------------- the page, the index

def index_figures(art: Artifacts) -> dict:
    """One row of results/index.html (kept in report_meta.json, so the index never re-reads the artifacts)."""
    m, prof_meta = art.meta("metrics_meta.json"), art.meta("profile_meta.json")
    prof, cp, summ = art.csv("ops_profile.csv"), art.meta("critical_path_meta.json"), art.meta("split_summary.json")
    energy = art.csv("energy.csv")
    flops = _num(m.get("total_flops"))
    total_bytes = _num(node_bytes(prof).sum()) if prof is not None else None
    best = (summ or {}).get("best")
    return {"model": art.identity["model"]["path"], "input_shapes": art.identity["inputs"].get("input_shapes"),
            "session_latency_us": prof_meta["session_latency"]["median_us"] if prof_meta else None,
            "sum_node_us": _num(prof["latency_us"].sum()) if prof is not None and _measured(prof) else None,
            "macs": _num(m.get("conv_gemm_matmul_macs", m.get("total_macs"))), "flops": flops,
            "ai_flop_per_byte": flops / total_bytes if flops and total_bytes else None,
            "parallelism": cp["parallelism"] if cp else None,
            "energy_component_j": _num(energy["e_total_j"].sum()) if energy is not None else None,
            "energy_counter_j": ((art.meta("energy_meta.json") or {}).get("energy_per_inference") or {})
            .get("counter", {}).get("energy_j"),
            "energy_power_model_j": ((art.meta("energy_meta.json") or {}).get("energy_per_inference") or {})
            .get("power x time", {}).get("energy_j"),
            "all_on_a_us": (summ or {}).get("all_on_a_us"), "all_on_b_us": (summ or {}).get("all_on_b_us"),
            "best_split": None if best is None else {k: best[k] for k in ("boundary", "after_node", "after_layer",
                                                                          "est_latency_us", "est_energy_j",
                                                                          "throughput_per_s")},
            "advice": (summ or {}).get("verdict", {}).get("advice")}


def _env():
    from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

    env = Environment(loader=FileSystemLoader(str(TEMPLATES)), autoescape=select_autoescape(["html", "j2"]),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    return env


def build(rdir: Path, light=None, top_nodes: int = 15, graph: tuple = (None, THRESHOLD)) -> tuple[str, dict]:
    """The report page of one results folder, and what report_meta.json records about it. graph: the graph
    section's layout library (None: dot when installed) and the node count above which it is collapsed."""
    import plotly

    art = Artifacts(rdir, light)
    s = {"summary": summary_section(art), "graph": graph_section(art, graph[1], graph[0]),
         "time": time_section(art, top_nodes), "roofline": roofline_section(art),
         "critical-path": critical_path_section(art), "energy": energy_section(art), "offload": offload_section(art),
         "splits": splits_section(art), "beyond": beyond_section(art), "what-if": whatif_section(art)}
    for sec in s.values():
        for k in ("plot", "classes_plot"):
            if k in sec:
                sec[k] = Markup(sec[k])
    if s["what-if"]["ok"]:
        s["what-if"]["json"] = Markup(s["what-if"]["json"])
    gsec = s["graph"]
    if gsec["ok"]:
        gsec["json"] = Markup(script_json(gsec.pop("data")))
    html = _env().get_template(TEMPLATE).render(
        page="report", title=Path(rdir).name, sections=SECTIONS, s=s, plotly_js=Markup(plotly.offline.get_plotlyjs()),
        plotly_version=plotly.__version__, identity=art.identity)
    meta = {"sections": {k: "ok" if v["ok"] else v["missing"] for k, v in s.items()}, "read": sorted(set(art.read)),
            "figures": index_figures(art), "plotly": plotly.__version__,
            "roofline_points": s["roofline"].get("points"),
            "graph": {k: gsec[k] for k in ("n", "collapsed", "views", "engine", "time")} if gsec["ok"] else None}
    return html, {"meta": meta, "metas": art.metas}


def _index_row(stem: str, f: dict) -> list:
    best = f.get("best_split")
    lat = f.get("session_latency_us")
    shapes = " ".join(f"{k}={'x'.join(map(str, v))}" for k, v in (f.get("input_shapes") or {}).items())
    return [stem, shapes,
            ms(lat) if lat else (ms(f.get("sum_node_us")) + " (sum of nodes)" if f.get("sum_node_us") else "n/a"),
            si(f.get("macs"), "MAC"), si(f.get("flops"), "FLOP"),
            "n/a" if f.get("ai_flop_per_byte") is None else f"{f['ai_flop_per_byte']:.3g}",
            "n/a" if f.get("parallelism") is None else f"{f['parallelism']:.2f}x",
            mj(f.get("energy_component_j")), mj(f.get("energy_power_model_j")), mj(f.get("energy_counter_j")),
            ms(f.get("all_on_a_us")), ms(f.get("all_on_b_us")),
            "none" if best is None else f"b{best['boundary']} {node_label(best['after_node'], best['after_layer'])}: "
                                        f"{ms(best['est_latency_us'])}, {mj(best['est_energy_j'])}"]


def _zoo_failed(d: Path) -> bool:
    """The folder's zoo record (lib/zoo/run.py's zoo_entry.json) says its last entry failed."""
    try:
        return json.loads((d / "zoo_entry.json").read_text()).get("status") not in (None, "ok")
    except (OSError, ValueError, AttributeError):
        return False


def _report_stale(d: Path, report_meta: dict) -> bool:
    """Whether a metas the report was made from has been re-made (or removed, or one it lacked has appeared)."""
    for name, run_id in report_meta.get("upstream", {}).items():
        try:
            meta = json.loads((d / name).read_text())
        except (OSError, json.JSONDecodeError):
            return True
        if not isinstance(meta, dict) or meta.get("run_id") != run_id:
            return True
    return any((d / name).exists() for name in report_meta.get("absent", []))


def build_index(root: Path) -> tuple[str, int]:
    """results/index.html: every analysed model under `root`, side by side, each linked to its report."""
    rows, links, advice, pending = [], [], [], []
    for d in sorted(p for p in Path(root).iterdir() if p.is_dir()):
        meta = d / "report_meta.json"
        if _zoo_failed(d):          # the report there is an earlier model's: the zoo entry of that name failed
            pending.append(f"{d.name} (failed in the zoo: its earlier report is not listed)")
        elif meta.exists():
            try:
                rm = json.loads(meta.read_text())
                f = rm["figures"]
            except (json.JSONDecodeError, KeyError):
                pending.append(d.name)
                continue
            if _report_stale(d, rm):     # a stage re-ran there since (another input spec): its row would be old
                pending.append(f"{d.name} (its artifacts changed since its report: re-run 11_report.py)")
                continue
            rows.append(_index_row(d.name, f))
            links.append(f"{d.name}/report.html")
            advice.append(f.get("advice") or "")
        elif (d / "metrics_meta.json").exists():
            pending.append(d.name)
    t = table(["model", "input", "latency (session, median)", "MACs", "FLOPs", "AI (FLOP/B)", "parallelism",
               "energy (component model)", "energy (power x time)", "energy (counter)", "all on A", "all on B",
               "best split"], rows, {2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
    zoo = zoo_html(root)     # the zoo's table (results/zoo.csv), when `make zoo` wrote one here
    html = _env().get_template(TEMPLATE).render(page="index", title="nn-perf: analysed models", index=t, links=links,
                                                advice=advice, pending=pending, zoo=Markup(zoo) if zoo else None)
    return html, len(rows)


BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-quic"]


def screenshots(page_path: Path, out_dir: Path, chromium: str | None = None) -> list[Path]:
    """A PNG of each section of a report, taken in headless chromium driven by Playwright (Debian's chromium:
    Playwright's own browser download is not needed). Returns the files; StageError when either is missing."""
    import os
    import shutil

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        raise StageError("--screenshots needs the playwright package (pip install playwright)") from None
    exe = chromium or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(exe):
        raise StageError(f"--screenshots needs chromium ({exe} not found: apt-get install chromium)")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=exe, args=BROWSER_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(Path(page_path).resolve().as_uri(), wait_until="load", timeout=120000)
        page.wait_for_timeout(1000)
        for sid, _ in SECTIONS:
            path = out_dir / f"{sid}.png"
            page.locator(f"section#{sid}").screenshot(path=str(path))
            written.append(path)
        browser.close()
    return written
