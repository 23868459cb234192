"""Stage 06's pictures: roofline scatter, energy breakdown, critical-path Gantt, latency by op class."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from .artifacts import atomic_path  # noqa: E402
from .host import per_dtype  # noqa: E402


def save(fig, out_dir: Path, name: str, formats=("png", "svg")) -> list[Path]:
    out = []
    for ext in formats:
        path = out_dir / f"{name}.{ext}"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=ext, dpi=130, bbox_inches="tight")
        out.append(path)
    plt.close(fig)
    return out


def _colors(keys):
    cmap = plt.get_cmap("tab10")
    return {k: cmap(i % 10) for i, k in enumerate(keys)}


def roofline_plot(prof: pd.DataFrame, host: dict, title: str):
    df = prof[(prof["achieved_gflops"] > 0) & (prof["ai_flop_per_byte"] > 0)]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    bw = float(host["mem_bw_bytes_per_s"])
    dtypes = sorted(set(prof["dtype"])) or ["default"]
    ai = np.logspace(-2, 4, 200)
    for d in dtypes:
        peak = per_dtype(host["peak_flops_per_s"], d)
        ax.plot(ai, np.minimum(peak, bw * ai) / 1e9, "k-" if d in ("float", "default") else "k--", lw=1.2,
                label=f"roof {d}: {peak / 1e9:.0f} GFLOP/s, {bw / 1e9:.1f} GB/s")
    classes = sorted(set(df["op_class"]))
    col = _colors(classes)
    for c in classes:
        sub = df[df["op_class"] == c]
        ax.scatter(sub["ai_flop_per_byte"], sub["achieved_gflops"], s=10 + 200 * sub["pct_latency"] / 100 * 5,
                   color=col[c], alpha=0.7, edgecolor="k", linewidth=0.3, label=f"{c} ({len(sub)})")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved GFLOP/s (measured latency)")
    ax.set_title(f"{title}: roofline (marker area ~ share of latency)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def _class_axes(classes, title: str, xlabel: str):
    """Horizontal bar chart frame, one row per op class: (fig, ax, y positions, bar height)."""
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(classes) + 1.8))
    y = np.arange(len(classes))
    ax.set_yticks(y, classes)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    return fig, ax, y, 0.38


def energy_plot(energy: pd.DataFrame, title: str):
    by = energy.groupby("op_class")[["e_compute_j", "e_mem_j", "e_measured_j"]].sum()
    by = by.sort_values("e_compute_j", ascending=True)
    fig, ax, y, h = _class_axes(by.index, f"{title}: energy by op class", "energy per inference (mJ)")
    ax.barh(y + h / 2, by["e_compute_j"] * 1e3, h, label="component model: compute", color="tab:blue")
    ax.barh(y + h / 2, by["e_mem_j"] * 1e3, h, left=by["e_compute_j"] * 1e3, label="component model: data movement",
            color="tab:orange")
    if by["e_measured_j"].notna().any() and by["e_measured_j"].sum() > 0:
        ax.barh(y - h / 2, by["e_measured_j"] * 1e3, h, label="measured-power model: P_avg x latency", color="tab:gray")
    for yi, (_, r) in zip(y, by.iterrows()):
        comp = (r["e_compute_j"] + r["e_mem_j"]) * 1e3
        ax.text(comp, yi + h / 2, f" {comp:.3g}", va="center", fontsize=7)
        if r["e_measured_j"] > 0:
            ax.text(r["e_measured_j"] * 1e3, yi - h / 2, f" {r['e_measured_j'] * 1e3:.3g}", va="center", fontsize=7)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def gantt_plot(cp: pd.DataFrame, title: str, max_labels: int = 12):
    fig, ax = plt.subplots(figsize=(10, 0.16 * len(cp) + 1.5))
    classes = sorted(set(cp["op_type"]))
    col = _colors(classes)
    y = np.arange(len(cp))[::-1]
    ax.barh(y, cp["latency_us"] / 1e3, left=cp["start_us"] / 1e3, color=[col[c] for c in cp["op_type"]],
            edgecolor="k", linewidth=0.2)
    longest = set(cp["latency_us"].nlargest(max_labels).index)
    for i, r in cp.iterrows():
        if i in longest and r["latency_us"] > 0:
            ax.text(r["finish_us"] / 1e3, y[i], f" {r['node']}", va="center", fontsize=6)
    ax.set_yticks([])
    ax.set_ylabel(f"critical-path nodes in order ({len(cp)})")
    ax.set_xlabel("time (ms)")
    ax.set_title(f"{title}: critical path ({cp['finish_us'].max() / 1e3:.2f} ms)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=col[c]) for c in classes]
    ax.legend(handles, classes, fontsize=7, loc="upper right", ncol=2)
    ax.grid(True, axis="x", alpha=0.3)
    return fig


def latency_by_class_plot(prof: pd.DataFrame, title: str):
    by = prof.groupby("op_class").agg(measured=("latency_us", "sum"), roofline=("t_roofline_us", "sum"))
    by = by.sort_values("measured" if by["measured"].sum() > 0 else "roofline")
    fig, ax, y, h = _class_axes(by.index, f"{title}: where the time goes, by op class", "time per inference (ms)")
    ax.barh(y + h / 2, by["measured"] / 1e3, h, label="measured (ORT kernels)", color="tab:blue")
    ax.barh(y - h / 2, by["roofline"] / 1e3, h, label="roofline lower bound", color="tab:green")
    ax.legend(fontsize=8, loc="lower right")
    return fig


def _label(ax, xlabel: str, ylabel: str, title: str | None = None, legend_loc: str | None = "best") -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if legend_loc:
        ax.legend(fontsize=8, loc=legend_loc)
    ax.grid(True, alpha=0.3)


def split_plots(bd: pd.DataFrame, pareto: pd.DataFrame, title: str, top_k: int = 10) -> dict:
    """The split-point pictures of stage 07's boundaries.csv: {name: figure}."""
    top = bd[bd["rank"] <= top_k]
    b = bd["boundary"]
    figs = {}
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.plot(b, bd["comm_bytes"] / 1024, lw=1, color="tab:blue", label="Comm(b)")
    ax.scatter(b[bd["pruned"]], bd.loc[bd["pruned"], "comm_bytes"] / 1024, s=6, color="lightgray", label="pruned", zorder=2)
    ax.scatter(top["boundary"], top["comm_bytes"] / 1024, s=40, color="tab:red", zorder=3, label=f"top {len(top)}")
    for _, r in top.iterrows():
        ax.annotate(str(int(r["rank"])), (r["boundary"], r["comm_bytes"] / 1024), fontsize=7,
                    xytext=(0, 5), textcoords="offset points", ha="center")
    ax.set_yscale("log")
    _label(ax, "boundary b (cut after node b, topological order)", "activation bytes crossing (KiB)",
           f"{title}: communication per boundary")
    figs["split_comm"] = fig
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.plot(b, bd["flops_left"] / 1e9, label="left part", color="tab:blue")
    ax.plot(b, bd["flops_right"] / 1e9, label="right part", color="tab:orange")
    for x in top["boundary"]:
        ax.axvline(x, color="tab:red", lw=0.6, alpha=0.5)
    _label(ax, "boundary b", "GFLOP", f"{title}: compute balance (red: top-{len(top)} boundaries)")
    figs["split_flops_balance"] = fig
    fig, axs = plt.subplots(1, 2, figsize=(11, 4.5))
    ok = bd[~bd["pruned"]]
    for ax, front, xc, yc, xs, ys, xl, yl in (
            (axs[0], "comm_imbalance", "comm_bytes", "imbalance", 1 / 1024, 1, "Comm (KiB)", "FLOP imbalance |L-R|/(L+R)"),
            (axs[1], "latency_energy", "est_latency_us", "est_energy_j", 1e-3, 1e3, "estimated latency (ms)", "estimated energy (mJ)")):
        ax.scatter(ok[xc] * xs, ok[yc] * ys, s=10, color="tab:gray", alpha=0.6, label="candidates")
        f = pareto[pareto["front"] == front].sort_values(xc)
        ax.plot(f[xc] * xs, f[yc] * ys, "o-", color="tab:red", ms=5, label="Pareto front")
        for _, r in f.iterrows():
            ax.annotate(f"b{int(r['boundary'])}", (r[xc] * xs, r[yc] * ys), fontsize=7, xytext=(3, 3), textcoords="offset points")
        _label(ax, xl, yl)
    fig.suptitle(f"{title}: Pareto fronts of the unpruned boundaries")
    figs["split_pareto"] = fig
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.stackplot(b, bd["t_dev_a_us"] / 1e3, bd["link_time_us"] / 1e3, bd["t_dev_b_us"] / 1e3,
                 labels=["device A (left)", "link", "device B (right)"],
                 colors=["tab:blue", "tab:purple", "tab:orange"], alpha=0.8)
    ax.scatter(top["boundary"], top["est_latency_us"] / 1e3, s=30, color="tab:red", zorder=3, label="top-k")
    _label(ax, "boundary b", "estimated end-to-end latency (ms)", f"{title}: two-device latency estimate per boundary",
           "upper left")
    figs["split_latency"] = fig
    return figs


def hardware_plot(hw: pd.DataFrame, title: str):
    """Stage 09's mapping: latency per inference and utilization per hardware, at batch 1 and saturation."""
    fig, axs = plt.subplots(1, 2, figsize=(12, 0.5 * hw["hardware"].nunique() + 2))
    names = sorted(hw["hardware"].unique(), key=lambda k: -hw[(hw["hardware"] == k) & (hw["point"] == "batch1")]["latency_us"].iat[0])
    y = np.arange(len(names))
    for off, point, colour in ((0.2, "batch1", "tab:blue"), (-0.2, "saturating", "tab:orange")):
        sub = hw[hw["point"] == point].set_index("hardware").loc[names]
        label = "batch 1" if point == "batch1" else "saturating batch"
        axs[0].barh(y + off, sub["latency_us"] / 1e3 / sub["batch"], 0.4, color=colour, label=label)
        axs[1].barh(y + off, sub["utilization"], 0.4, color=colour, label=label)
        for yi, (b, lat) in enumerate(zip(sub["batch"], sub["latency_us"] / 1e3 / sub["batch"])):
            axs[0].text(lat, yi + off, f" {lat:.3g} (b={b})", va="center", fontsize=7)
    axs[0].set_xscale("log")
    axs[0].set_yticks(y, names)
    axs[1].set_yticks(y, [""] * len(names))
    _label(axs[0], "latency per inference (ms, log)", "", f"{title}: latency per inference", None)
    _label(axs[1], "compute utilization (lanes busy)", "", "utilization", None)
    axs[1].set_xlim(0, 1.05)
    fig.legend(*axs[0].get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=8, bbox_to_anchor=(0.5, -0.02))
    fig.subplots_adjust(bottom=0.2)
    return fig
