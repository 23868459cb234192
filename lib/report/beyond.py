"""The report's section past the boundary splits (id `beyond`): 07's DAG optimum (a minimum cut over the whole
graph), the K-device pipeline, the bandwidth above which each split pays and the sweep of which partition wins
at each link bandwidth (split_summary.json's dag_optimum, dag_optimum_energy, pipeline, bandwidth_crossover,
cut_precision, bandwidth_sweep; bandwidth_sweep.csv). docs/splits-dag.md says what each answers.
"""
from __future__ import annotations

import math

import pandas as pd

from lib.report.fmt import fig_html, mj, ms, nbytes, per_s, plot_layout, si, table

SWEEP = "bandwidth_sweep.csv"


def _ratio(r) -> str:
    return "n/a" if r is None or not math.isfinite(float(r)) else f"x{float(r):.3g}"


def bandwidth_text(bps) -> str:
    """A crossover bandwidth: 'never' (None: the split never beats the better single device), 'any' (0)."""
    if bps is None:
        return "never"
    return "any bandwidth" if bps == 0 else f"{si(bps, 'B/s')} ({si(8 * bps, 'bit/s')})"


def dag_table(summ: dict) -> dict | None:
    """The DAG optimum for latency and for energy: its figures and its gain over the best boundary and both
    single devices (ratio > 1: the DAG optimum is better)."""
    rows = []
    for label, key, unit in (("latency", "dag_optimum", "us"), ("energy", "dag_optimum_energy", "j")):
        d = summ.get(key)
        if not d:
            continue
        g = d.get("gain_vs_best_boundary") or {}
        prefix = f"yes (= b{d['prefix_boundary']})" if d.get("is_prefix") else "no"
        rows.append([label, ms(d["est_latency_us"]), mj(d["est_energy_j"]), f"{d['n_left']} / {d.get('n_right', '?')}",
                     d["n_cut_tensors"], nbytes(d["comm_bytes"]), prefix,
                     f"{_ratio(g.get('ratio'))} vs b{g.get('boundary', '?')}",
                     _ratio((d.get("gain_vs_all_on_a") or {}).get("ratio")),
                     _ratio((d.get("gain_vs_all_on_b") or {}).get("ratio")),
                     f"none: the model runs whole on {d['runs_whole_on']}" if d.get("runs_whole_on") else
                     ", ".join(d.get("cut_tensors", [])[:6]) + (" ..." if len(d.get("cut_tensors", [])) > 6 else "")])
    if not rows:
        return None
    return table(["objective", "est. latency", "est. energy", "nodes on A / B", "cut", "Comm", "a prefix?",
                  "gain vs the fastest boundary (pruned ones too)", "vs all on A", "vs all on B", "cut tensors"], rows,
                 {1, 2, 4, 5})


def crossover_table(summ: dict) -> dict | None:
    cross = summ.get("bandwidth_crossover")
    if not cross:
        return None
    rows = [["DAG optimum" if k == "dag" else f"b{k}", bandwidth_text(v)] for k, v in cross.items()]
    return table(["split", "pays above (link bandwidth)"], rows)


def pipeline_table(pipe: dict | None) -> dict | None:
    """The K-device chain's latency- and throughput-optimal pipelines, stage by stage."""
    if not pipe:
        return None
    rows = []
    for goal in ("latency", "throughput"):
        p = pipe.get(goal)
        if not p:
            continue
        cuts = ", ".join(f"b{b} (after {n})" for b, n in zip(p["boundaries"], p.get("after_nodes", p["boundaries"])))
        stages = " | ".join(f"{k} {ms(t)}" for k, t in zip(pipe["device_keys"], p["stage_us"]))
        links = " | ".join(ms(t) for t in p["link_us"])
        rows.append([goal, cuts, stages, links, ms(p["est_latency_us"]), ms(p["period_us"]),
                     per_s(p["throughput_per_s"]), mj(p.get("est_energy_j")),
                     _ratio(p.get("latency_ratio_vs_best_single")), _ratio(p.get("throughput_ratio_vs_best_single"))])
    return table(["optimised for", "cuts", "device time per stage", "link time per cut", "est. latency", "period",
                  "throughput", "est. energy", "latency vs best single", "throughput vs best single"], rows,
                 {4, 5, 6, 7, 8, 9})


def sweep_plot(sw: pd.DataFrame, summ: dict) -> str:
    """Latency and energy against link bandwidth (log x): both single devices, the best boundary, the DAG
    optimum and the winner at each bandwidth (its name in the hover)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=("estimated latency (ms)", "energy of that partition (mJ)"))
    x = sw["bandwidth_mbit_s"]
    sw = sw.assign(all_on_a_energy_j=summ["all_on_a_energy_j"], all_on_b_energy_j=summ["all_on_b_energy_j"])
    series = [("all on A", "all_on_a_us", "all_on_a_energy_j", "dash"),
              ("all on B", "all_on_b_us", "all_on_b_energy_j", "dash"),
              ("best boundary", "boundary_latency_us", "boundary_energy_j", "solid"),
              ("DAG optimum", "dag_latency_us", "dag_energy_j", "solid")]
    for k, (name, lat, en, dash) in enumerate(series):
        if lat not in sw or sw[lat].isna().all():
            continue
        colour = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd"][k]
        fig.add_scatter(x=x, y=sw[lat].astype(float) / 1e3, name=name, mode="lines+markers", legendgroup=name,
                        line={"dash": dash, "color": colour}, marker={"size": 4}, row=1, col=1)
        if en and en in sw:
            fig.add_scatter(x=x, y=sw[en].astype(float) * 1e3, name=name, mode="lines+markers", legendgroup=name,
                            showlegend=False, line={"dash": dash, "color": colour}, marker={"size": 4}, row=1, col=2)
    fig.add_scatter(x=x, y=sw["best_latency_us"] / 1e3, name="best at that bandwidth", mode="markers",
                    meta="best", customdata=sw["best"], marker={"size": 9, "symbol": "circle-open", "color": "black"},
                    hovertemplate="%{x:.3g} Mbit/s: %{customdata} wins, %{y:.3g} ms<extra></extra>", row=1, col=1)
    fig.add_scatter(x=x, y=sw["best_energy_j"] * 1e3, name="best at that bandwidth", mode="markers", showlegend=False,
                    customdata=sw["best"], marker={"size": 9, "symbol": "circle-open", "color": "black"},
                    hovertemplate="%{x:.3g} Mbit/s: %{customdata} wins, %{y:.3g} mJ<extra></extra>", row=1, col=2)
    plot_layout(fig, "which partition is fastest at each link bandwidth (07's cost model; log scales)", 430)
    fig.update_xaxes(type="log", title="link bandwidth (Mbit/s)")
    fig.update_yaxes(type="log")
    return fig_html(fig, "bandwidth-plot")


def sweep_table(sw: pd.DataFrame) -> dict:
    rows = []
    for r in sw.itertuples():
        dag = getattr(r, "dag_latency_us", None)
        rows.append([f"{r.bandwidth_mbit_s:.3g}", r.best, ms(r.best_latency_us), mj(r.best_energy_j),
                     "" if pd.isna(r.best_boundary) else f"b{int(r.best_boundary)}", ms(r.boundary_latency_us),
                     ms(dag) if dag is not None else "not computed"])
    return table(["bandwidth (Mbit/s)", "best partition", "its latency", "its energy", "best boundary",
                  "its latency", "DAG optimum latency"], rows, {0, 2, 3, 5, 6})


def beyond_section(art) -> dict:
    summ = art.meta("split_summary.json")
    if summ is None:
        return {"ok": False, "missing": art.missing("split_summary.json")}
    sw_meta = summ.get("bandwidth_sweep") or {}
    sw = art.csv(sw_meta.get("csv", SWEEP)) if sw_meta else None
    if sw is None or "dag_optimum" not in summ:
        return {"ok": False, "missing": "this split_summary.json predates the DAG optimum and the bandwidth sweep: "
                                        "re-run 07_split_candidates.py"}
    prec = summ.get("cut_precision") or {}
    int8_only = ", ".join(f"b{b}" for b in prec.get("int8_only", [])[:12])
    return {"ok": True, "dag": dag_table(summ), "dag_skipped": summ.get("dag_skipped"),
            "crossover": crossover_table(summ), "pipeline": pipeline_table(summ.get("pipeline")),
            "pipeline_single": {k: ms(v) for k, v in ((summ.get("pipeline") or {}).get("single_device_us") or {}).items()},
            "pipeline_links": (summ.get("pipeline") or {}).get("links", []),
            "plot": sweep_plot(sw, summ), "sweep": sweep_table(sw), "points": len(sw),
            "winners": list(dict.fromkeys(sw["best"].tolist())), "dag_in_sweep": bool(sw_meta.get("dag_included")),
            "precision": prec, "int8_only": int8_only,
            "png": sw_meta.get("plot", "bandwidth_sweep.png")}
