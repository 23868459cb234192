"""Stage 06's pictures: roofline scatter, energy breakdown, critical-path Gantt, latency by op class."""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["text.parse_math"] = False    # names are text: a "$x_1$" node name is not math
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker  # noqa: E402
import matplotlib.transforms  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lib.analysis.roofline import levels  # noqa: E402
from lib.artifacts import atomic_path  # noqa: E402
from lib.host import per_dtype  # noqa: E402


DPI = 130


def save(fig, out_dir: Path, name: str, formats=("png", "svg")) -> list[Path]:
    # the figure's tight box (what bbox_inches="tight" crops to, legends below the axes included), measured once
    # for all its formats: "tight" measured it for every file, 40% of 06's time; the PNGs are the same pixels
    fig.set_dpi(DPI)        # text extents are measured at the dpi the files are written at
    _plain_log_ticks(fig)
    box = fig.get_tightbbox(fig.canvas.get_renderer()).padded(matplotlib.rcParams["savefig.pad_inches"])
    out = []
    for ext in formats:
        path = out_dir / f"{name}.{ext}"
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=ext, dpi=DPI, bbox_inches=box)
        out.append(path)
    plt.close(fig)
    return out


def _plain_log_ticks(fig) -> None:
    """Log axes labelled in plain text (1e-2, 100): their default labels are mathtext, which the rcParams above
    turn off for node names, and were drawn as raw "$\\mathdefault{10^{-2}}$"."""
    for ax in fig.axes:
        for axis, scale in ((ax.xaxis, ax.get_xscale()), (ax.yaxis, ax.get_yscale())):
            if scale == "log":
                axis.set_major_formatter(matplotlib.ticker.LogFormatter())
                if not isinstance(axis.get_minor_formatter(), matplotlib.ticker.NullFormatter):
                    axis.set_minor_formatter(matplotlib.ticker.LogFormatter(labelOnlyBase=False))


def _legend_below(ax, **kw) -> None:
    """The legend under the axis label, at a fixed distance in points (a fraction of the axes' height put it on the
    label of a short figure)."""
    shift = matplotlib.transforms.ScaledTranslation(0, -42 / 72, ax.figure.dpi_scale_trans)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0), bbox_transform=ax.transAxes + shift, **kw)


def _colors(keys):
    cmap = plt.get_cmap("tab10")
    return {k: cmap(i % 10) for i, k in enumerate(keys)}


def roofline_plot(prof: pd.DataFrame, host: dict, title: str):
    df = prof[(prof["achieved_gflops"] > 0) & (prof["ai_flop_per_byte"] > 0)]
    fig, ax = plt.subplots(figsize=(8, 5.5))
    bw = float(levels(host)[2][-1])     # DRAM's, as stage 03's bound takes it (mem_bw_bytes_per_s without levels)
    dtypes = sorted(set(prof["dtype"])) or ["default"]
    ai = np.logspace(-2, 4, 200)
    for d in dtypes:
        peak = per_dtype(host["peak_flops_per_s"], d)
        ax.plot(ai, np.minimum(peak, bw * ai) / 1e9, "k-" if d in ("float", "default") else "k--", lw=1.2,
                label=f"roof {d}: {peak / 1e9:.0f} GFLOP/s, {bw / 1e9:.1f} GB/s")
    _level_roofs(ax, ai, host, max(per_dtype(host["peak_flops_per_s"], d) for d in dtypes))
    classes = sorted(set(df["op_class"]))
    col = _colors(classes)
    for c in classes:
        sub = df[df["op_class"] == c]
        ax.scatter(sub["ai_flop_per_byte"], sub["achieved_gflops"], s=10 + 200 * sub["pct_latency"] / 100 * 5,
                   color=col[c], alpha=0.7, edgecolor="k", linewidth=0.3, label=f"{c} ({len(sub)})")
    if df.empty:        # no 01: nothing has a measured rate (the axes were drawn bare, labelled "measured")
        ax.text(0.5, 0.5, "no node has both a measured time and FLOPs: nothing to place (without stage 01, none has a time)",
                transform=ax.transAxes, ha="center", va="center", color="dimgray")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("achieved GFLOP/s (measured latency)")
    ax.set_title(f"{title}: roofline (marker area ~ share of latency)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def _level_roofs(ax, ai: np.ndarray, host: dict, peak: float) -> None:
    """One grey memory roof per cache level of the host file (make calibrate's working-set sweep), up to the top
    peak: a node's bound uses the level its working set fits in (stage 03's mem_level). None with one level."""
    names, size, bw = levels(host)
    if len(names) < 2:
        return
    for k, (lv, sz, b) in enumerate(zip(names, size, bw)):
        where = "" if not np.isfinite(sz) else f" ({sz / 2 ** 20:g} MiB)" if sz >= 2 ** 20 else f" ({sz / 1024:g} KiB)"
        ax.plot(ai, np.minimum(peak, b * ai) / 1e9, color=str(0.35 + 0.15 * k), ls=":", lw=1.0,
                label=f"{lv}{where}: {b / 1e9:.0f} GB/s")


def _class_axes(classes, title: str, xlabel: str):
    """Horizontal bar chart frame, one row per op class: (fig, ax, y positions, bar height)."""
    fig, ax = plt.subplots(figsize=(8, 0.4 * len(classes) + 1.8))
    y = np.arange(len(classes))
    ax.set_yticks(y, classes)
    ax.set_ylim(-0.6, len(classes) - 0.4)
    ax.set_xlabel(xlabel)
    ax.set_title(title)
    ax.grid(True, axis="x", alpha=0.3)
    return fig, ax, y, 0.38


def _node_label(r, width: int = 50) -> str:
    """How a node is shown: its layer (from the exporter), op type and node name; a long layer name is cut
    from the left (its most specific part, at the end, stays)."""
    layer = str(r.get("layer", "") or "")
    if not layer:
        name, op = str(r["node"]), f" ({r['op_type']})"
        room = max(width - len(op), 8)
        return (name if len(name) <= room else name[:room - 1] + "\u2026") + op     # the op type always shown
    suffix = f" ({r['op_type']}, {r['node']})"
    if len(suffix) > width - 12:
        suffix = f" ({r['op_type']})"
    room = width - len(suffix)
    return (layer if len(layer) <= room else "\u2026" + layer[-(room - 1):]) + suffix


def energy_plot(energy: pd.DataFrame, title: str, power_w: float | str | None = None):
    """Both energy models per op class, side by side, on a log axis (conv would hide every other class on a
    linear one). power_w: the power x time figure's power, or its label naming whose it is (energy_meta.json)."""
    by = energy.groupby("op_class")[["e_compute_j", "e_mem_j", "e_power_j"]].sum(min_count=1)
    by = by.sort_values("e_compute_j", ascending=True)
    fig, ax, y, _ = _class_axes(by.index, f"{title}: energy by op class (log scale)", "energy per inference (mJ, log)")
    h = 0.27
    p = power_w if isinstance(power_w, str) else f"{power_w:g} W assumed (host.yaml)" if power_w else "P_avg"
    series = [("e_compute_j", +h, "tab:blue", "component model: compute (FLOPs x e_flop)"),
              ("e_mem_j", 0.0, "tab:orange", "component model: data movement (bytes x e_byte)"),
              ("e_power_j", -h, "tab:gray", f"power x time: {p} x node time")]
    has_power = by["e_power_j"].notna().any() and by["e_power_j"].sum() > 0
    for col, off, colour, label in series:
        if col == "e_power_j" and not has_power:
            continue
        v = by[col].fillna(0.0).to_numpy() * 1e3
        ax.barh(y + off, np.where(v > 0, v, np.nan), h, color=colour, label=label)
        for yi, val in zip(y, v):
            note = f" {val:.3g}" if val > 0 else (" 0 (fused into another kernel)" if col == "e_power_j" else "")
            if note:
                ax.text(val if val > 0 else _floor(by) * 1e3, yi + off, note, va="center", fontsize=6)
    ax.set_xscale("log")
    ax.set_xlim(left=_floor(by) * 1e3)
    _legend_below(ax, fontsize=7, ncol=1)
    return fig


def _floor(by: pd.DataFrame) -> float:
    """A log axis' left end: a decade below the smallest positive value."""
    v = by.to_numpy(dtype=float).ravel()
    v = v[np.isfinite(v) & (v > 0)]
    return 10 ** np.floor(np.log10(v.min()) - 1) if len(v) else 1e-9


def gantt_plot(cp: pd.DataFrame, title: str, max_rows: int = 45):
    """The critical path as a staircase: one labelled row per node that takes time (zero-time nodes, e.g.
    fused into a neighbour's kernel, are counted in the title), the longest `max_rows` when there are more."""
    timed = cp[cp["latency_us"] > 0]
    shown = timed.loc[sorted(timed["latency_us"].nlargest(max_rows).index)] if len(timed) > max_rows else timed
    total = float(cp["finish_us"].max()) if len(cp) else 0.0
    fig, ax = plt.subplots(figsize=(10, 0.22 * max(len(shown), 4) + 1.6))
    classes = sorted(set(shown["op_type"]))
    col = _colors(classes)
    y = np.arange(len(shown))[::-1]
    ax.barh(y, shown["latency_us"] / 1e3, left=shown["start_us"] / 1e3, color=[col[c] for c in shown["op_type"]],
            edgecolor="k", linewidth=0.3)
    ax.set_yticks(y, [_node_label(r) for _, r in shown.iterrows()], fontsize=6)
    ax.set_xlabel("time since the start of the inference (ms)")
    share = shown["latency_us"].sum() / total if total > 0 else 0.0
    hidden = f"; {len(timed) - len(shown)} shorter ones not shown" if len(timed) > len(shown) else ""
    ax.set_title(f"{title}: critical path {total / 1e3:.2f} ms over {len(cp)} nodes\n{len(shown)} rows = "
                 f"{share:.0%} of it{hidden}; {len(cp) - len(timed)} zero-time nodes (fused) not drawn", fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=col[c]) for c in classes]
    ax.legend(handles, classes, fontsize=7, loc="upper right", ncol=2)
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_ylim(-0.7, len(shown) - 0.3)
    return fig


def latency_by_class_plot(prof: pd.DataFrame, title: str):
    """Measured kernel time per op class against the roofline bound of the same nodes. A node ORT fused into
    another kernel has no time of its own (it is inside that kernel's): it is counted, not drawn as 0 vs a bound."""
    df = prof.copy()
    measured = df["latency_us"].notna().any()
    fused = df["attribution"].fillna("").eq("fused") if "attribution" in df else pd.Series(False, index=df.index)
    own = df[~fused] if measured else df
    time_col = "latency_us" if measured or "t_pred_us" not in df else "t_pred_us"     # without 01: 03's prediction
    by = own.groupby("op_class").agg(measured=(time_col, "sum"), roofline=("t_roofline_us", "sum"))
    n_fused = df[fused].groupby("op_class").size()
    timed = measured or time_col == "t_pred_us"
    classes = sorted(set(df["op_class"]), key=lambda c: (by["measured" if timed else "roofline"].get(c, 0.0)))
    by = by.reindex(classes)
    fig, ax, y, h = _class_axes(classes, f"{title}: where the time goes, by op class (log scale)", "time per inference (ms, log)")
    if timed:
        ax.barh(y + h / 2, by["measured"].where(by["measured"] > 0) / 1e3, h, color="tab:blue",
                label="measured (ORT kernels)" if measured else "predicted (stage 03's baseline, no stage 01)")
    ax.barh(y - h / 2, by["roofline"].where(by["roofline"] > 0) / 1e3, h,
            label="roofline lower bound of the same nodes", color="tab:green")
    floor = _floor(by.fillna(0.0)) / 1e3
    for yi, c in zip(y, classes):
        k = int(n_fused.get(c, 0))
        if k:
            ax.text(1.01, yi, f"{k} node(s) fused into other kernels (time counted there)", va="center", fontsize=6,
                    color="dimgray", transform=ax.get_yaxis_transform())      # right of the axes, off the bars
    ax.set_xscale("log")
    ax.set_xlim(left=floor)
    _legend_below(ax, fontsize=8, ncol=2)
    return fig


def _label(ax, xlabel: str, ylabel: str, title: str | None = None, legend_loc: str | None = "best") -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if legend_loc:
        ax.legend(fontsize=8, loc=legend_loc)
    ax.grid(True, alpha=0.3)


def _b_label(r) -> str:
    layer = str(r.get("after_layer", "") or "")
    return f"b{int(r['boundary'])}" + (f" {layer}" if layer else "")


def split_plots(bd: pd.DataFrame, pareto: pd.DataFrame, title: str, top_k: int = 10, summary: dict | None = None) -> dict:
    """The split-point pictures of stage 07's boundaries.csv: {name: figure}. `summary`: split_summary.json
    (the all-on-A / all-on-B baselines are drawn when given)."""
    top = bd[bd["rank"] <= top_k]
    return {"split_comm": _comm_fig(bd, top, title), "split_flops_balance": _balance_fig(bd, top, title),
            "split_pareto": _pareto_fig(bd, pareto, title, summary), "split_latency": _latency_fig(bd, top, title, summary)}


def _comm_fig(bd, top, title):
    b = bd["boundary"]
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.plot(b, bd["comm_bytes"] / 1024, lw=1, color="tab:blue", label="Comm(b)")
    ax.scatter(b[bd["pruned"]], bd.loc[bd["pruned"], "comm_bytes"] / 1024, s=6, color="lightgray", label="pruned", zorder=2)
    ax.scatter(top["boundary"], top["comm_bytes"] / 1024, s=40, color="tab:red", zorder=3, label=f"top {len(top)} (rank)")
    for _, r in top.iterrows():
        ax.annotate(str(int(r["rank"])), (r["boundary"], r["comm_bytes"] / 1024), fontsize=7,
                    xytext=(0, 5), textcoords="offset points", ha="center")
    if (bd["comm_bytes"] > 0).any():
        ax.set_yscale("log")
    _label(ax, "boundary b (cut after node b, topological order)", "activation bytes crossing (KiB)",
           f"{title}: communication per boundary")
    return fig


def _balance_fig(bd, top, title):
    b = bd["boundary"]
    fig, axs = plt.subplots(1, 2, figsize=(12, 4))
    axs[0].plot(b, bd["flops_left"] / 1e9, label="left part", color="tab:blue")
    axs[0].plot(b, bd["flops_right"] / 1e9, label="right part", color="tab:orange")
    axs[1].plot(b, bd["t_dev_a_us"] / 1e3, label="left part on device A", color="tab:blue")
    axs[1].plot(b, bd["t_dev_b_us"] / 1e3, label="right part on device B", color="tab:orange")
    for ax in axs:
        for x in top["boundary"]:
            ax.axvline(x, color="tab:red", lw=0.6, alpha=0.5)
    _label(axs[0], "boundary b", "GFLOP", "FLOPs per side")
    _label(axs[1], "boundary b", "device time (ms)", "device time per side (what 07 balances)")
    fig.suptitle(f"{title}: compute balance (red: top-{len(top)} boundaries)")
    return fig


def _pareto_fig(bd, pareto, title, summary):
    fig, axs = plt.subplots(1, 2, figsize=(12, 4.8))
    ok = bd[~bd["pruned"]]
    for ax, front, xc, yc, xs, ys, xl, yl in (
            (axs[0], "comm_imbalance", "comm_bytes", "imbalance", 1 / 1024, 1, "Comm (KiB)", "FLOP imbalance |L-R|/(L+R)"),
            (axs[1], "latency_energy", "est_latency_us", "est_energy_j", 1e-3, 1e3, "estimated latency (ms)", "estimated energy (mJ)")):
        ax.scatter(ok[xc] * xs, ok[yc] * ys, s=10, color="tab:gray", alpha=0.6, label="candidates")
        f = pareto[pareto["front"] == front].sort_values(xc)
        ax.plot(f[xc] * xs, f[yc] * ys, "o-", color="tab:red", ms=5, label="Pareto front")
        for _, r in f.iterrows():
            ax.annotate(_b_label(r), (r[xc] * xs, r[yc] * ys), fontsize=7, xytext=(3, 3), textcoords="offset points")
        if front == "latency_energy" and summary:
            for k, m in (("a", "s"), ("b", "^")):
                ax.scatter([summary[f"all_on_{k}_us"] * xs], [summary[f"all_on_{k}_energy_j"] * ys], marker=m, s=60,
                           color="black", zorder=4, label=f"all on {k.upper()} (no split)")
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
            ax.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        _label(ax, xl, yl)
    fig.suptitle(f"{title}: Pareto fronts of the unpruned boundaries")
    return fig


def _latency_fig(bd, top, title, summary):
    b = bd["boundary"]
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.stackplot(b, bd["t_dev_a_us"] / 1e3, bd["link_time_us"] / 1e3, bd["t_dev_b_us"] / 1e3,
                 labels=["device A (left)", "link", "device B (right)"],
                 colors=["tab:blue", "tab:purple", "tab:orange"], alpha=0.8)
    ax.scatter(top["boundary"], top["est_latency_us"] / 1e3, s=30, color="tab:red", zorder=3, label="top-k")
    if summary:
        for k, ls in (("a", "--"), ("b", ":")):
            ax.axhline(summary[f"all_on_{k}_us"] / 1e3, color="black", ls=ls, lw=1.2,
                       label=f"all on {k.upper()}: {summary[f'all_on_{k}_us'] / 1e3:.3g} ms")
    _label(ax, "boundary b", "estimated end-to-end latency (ms)", f"{title}: two-device latency estimate per boundary",
           "upper left")
    return fig


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
