"""Stage 07: every topological boundary of a graph, measured in one O(nodes + edges) sweep, then pruned,
ranked and reduced to Pareto fronts.

Boundary b cuts after node b of the topological order: the left part is nodes 0..b, the right part b+1..N-1.
A tensor crosses b when its producer is at <= b and a consumer at > b. Only activations cross the link:
constants (initializers, Constant outputs and whatever is computed from them alone) travel with the part
that uses them, and original graph inputs are fed to either part directly.
"""
from __future__ import annotations

import heapq
import os
from itertools import islice

import numpy as np
import pandas as pd

from .errors import StageError
from .graph import Graph, constant_tensors

MAX_NAMES = 16  # cut tensor names listed per boundary (the count is always exact)


def sweep(g: Graph, skip_block_min_span: int = 4, skip_block_max_share: float = 0.25) -> pd.DataFrame:
    """Per-boundary cut tensors, Comm(b), live bytes, strictness and skip-block membership."""
    n = len(g.nodes)
    if n < 2:
        raise StageError("the graph has fewer than 2 nodes: there is no boundary to cut")
    consts = constant_tensors(g)
    outputs = set(g.graph_outputs)
    d_comm = np.zeros(n + 1)
    d_cnt = np.zeros(n + 1, dtype=np.int64)
    d_live = np.zeros(n + 1)
    d_unknown = np.zeros(n + 1, dtype=np.int64)
    d_inputs = np.zeros(n + 1, dtype=np.int64)
    own = np.zeros(n, dtype=np.int64)          # crossing tensors produced by the cut node itself
    starts: list[list[str]] = [[] for _ in range(n)]
    ends: list[list[str]] = [[] for _ in range(n + 1)]
    skips: list[tuple[int, int, str]] = []     # (first, last) boundary inside a skip block, tensor
    max_span = max(skip_block_max_share * n, 4 * skip_block_min_span)   # small graphs keep their blocks
    for t, p in g.producer.items():
        if t in consts:
            continue
        cons = g.consumers.get(t, ())
        last = max(cons) if cons else p
        info = g.tensors.get(t)
        nb = info.nbytes if info is not None else None
        if last > p:
            d_comm[p] += nb or 0
            d_comm[last] -= nb or 0
            d_cnt[p] += 1
            d_cnt[last] -= 1
            if nb is None:
                d_unknown[p] += 1
                d_unknown[last] -= 1
            own[p] += 1
            starts[p].append(t)
            ends[last].append(t)
            # a fork that rejoins downstream spans a skip/residual block p..last; a fork spanning more than
            # max_share of the graph is a side input read everywhere (an attention mask), not a block
            if len(set(cons)) >= 2 and skip_block_min_span <= last - p <= max_span:
                skips.append((p + 1, last - 1, t))
        live_end = n - 1 if t in outputs else last
        if live_end > p:
            d_live[p] += nb or 0
            d_live[live_end] -= nb or 0
    for t in g.graph_inputs:
        cons = g.consumers.get(t, ())
        if cons:
            d_inputs[0] += 1
            d_inputs[max(cons)] -= 1
    nb_ = n - 1
    comm = np.cumsum(d_comm)[:nb_]
    cnt = np.cumsum(d_cnt)[:nb_]
    live = np.cumsum(d_live)[:nb_]
    # names, and which skip block (the longest open one) each boundary sits inside
    names, inside = [], []
    active: dict[str, None] = {}
    skips.sort()
    heap: list[tuple[int, int, int, str]] = []
    k = 0
    for b in range(nb_):
        for t in ends[b]:
            active.pop(t, None)
        for t in starts[b]:
            active[t] = None
        shown = ";".join(islice(active, MAX_NAMES))
        names.append(shown + (f";...(+{len(active) - MAX_NAMES})" if len(active) > MAX_NAMES else ""))
        while k < len(skips) and skips[k][0] <= b:
            first, last, t = skips[k]
            heapq.heappush(heap, (-(last - first), last, first, t))
            k += 1
        while heap and heap[0][1] < b:     # the longest open block ended: drop it (lazy deletion)
            heapq.heappop(heap)
        inside.append(f"{heap[0][3]} spans nodes {heap[0][2] - 1}..{heap[0][1] + 1}" if heap else "")
    df = pd.DataFrame({
        "boundary": np.arange(nb_), "after_node": g.names[:nb_], "cut_tensors": names, "n_cut_tensors": cnt,
        "comm_bytes": comm, "cut_unknown_size": np.cumsum(d_unknown)[:nb_], "live_bytes": live,
        "right_graph_inputs": np.cumsum(d_inputs)[:nb_], "strict_ok": cnt == own[:nb_], "skip_block": inside,
    })
    df["peak_act_left_bytes"] = np.maximum.accumulate(live)
    df["peak_act_right_bytes"] = np.maximum.accumulate(live[::-1])[::-1]
    return df


def device_times(metrics: pd.DataFrame, latency: np.ndarray | None, dev: dict) -> np.ndarray:
    """Per-node time on one device (us): measured when asked for and available, else its roofline."""
    if dev.get("source", "roofline") == "measured" and latency is not None:
        return np.nan_to_num(latency, nan=0.0)
    flops = metrics["flops"].fillna(0.0).to_numpy(float)
    nbytes = metrics[["act_in_bytes", "act_out_bytes", "weight_bytes"]].sum(axis=1).to_numpy(float)
    return np.maximum(flops / float(dev["peak_flops_per_s"]), nbytes / float(dev["mem_bw_bytes_per_s"])) * 1e6


def add_costs(df: pd.DataFrame, metrics: pd.DataFrame, latency: np.ndarray | None, system: dict) -> pd.DataFrame:
    """FLOPs balance, measured latency left/right and the two-device + link model, all by prefix sums."""
    nb_ = len(df)
    flops = metrics["flops"].fillna(0.0).to_numpy(float)
    cf = np.cumsum(flops)
    total = cf[-1]
    df["flops_left"] = cf[:nb_]
    df["flops_right"] = total - cf[:nb_]
    df["compute_share_left"] = df["flops_left"] / total if total > 0 else np.nan
    df["imbalance"] = np.abs(df["flops_left"] - df["flops_right"]) / total if total > 0 else np.nan
    if latency is not None:
        cl = np.cumsum(np.nan_to_num(latency))
        df["latency_left_us"] = cl[:nb_]
        df["latency_right_us"] = cl[-1] - cl[:nb_]
    else:
        df["latency_left_us"] = np.nan
        df["latency_right_us"] = np.nan
    a, b, link = system["devices"]["A"], system["devices"]["B"], system["link"]
    ta = np.cumsum(device_times(metrics, latency, a))
    tb = np.cumsum(device_times(metrics, latency, b))
    df["t_dev_a_us"] = ta[:nb_]
    df["t_dev_b_us"] = tb[-1] - tb[:nb_]
    df["link_time_us"] = df["n_cut_tensors"] * float(link["latency_us"]) + \
        df["comm_bytes"] / float(link["bandwidth_bytes_per_s"]) * 1e6
    df["link_energy_j"] = df["comm_bytes"] * float(link["energy_per_byte_j"])
    df["est_latency_us"] = df["t_dev_a_us"] + df["link_time_us"] + df["t_dev_b_us"]
    df["est_energy_j"] = (float(a["power_w"]) * df["t_dev_a_us"] + float(b["power_w"]) * df["t_dev_b_us"]) * 1e-6 \
        + df["link_energy_j"]
    return df


def prune_and_rank(df: pd.DataFrame, system: dict, feasibility: dict[int, str] | None = None) -> pd.DataFrame:
    """Mark pruned boundaries with every reason that applies, score the rest, rank, suppress near-duplicates."""
    r = system.get("ranking", {})
    c = system.get("constraints", {}) or {}
    reasons: list[list[str]] = [[] for _ in range(len(df))]

    def flag(mask, text):
        for i in np.flatnonzero(np.asarray(mask)):
            reasons[i].append(text(i) if callable(text) else text)

    share = float(r.get("min_compute_share", 0.0))
    left = df["compute_share_left"].to_numpy()
    flag((left < share) | (1 - left < share), lambda i: f"compute share {min(left[i], 1 - left[i]):.1%} < {share:.0%} on one side")
    flag(df["skip_block"] != "", lambda i: f"inside skip block ({df['skip_block'].iat[i]})")
    if r.get("strict"):
        flag(~df["strict_ok"], "strict: right part needs activations produced before the cut node")
    for key, col, unit in (("max_latency_us", "est_latency_us", "us"), ("max_energy_j", "est_energy_j", "J"),
                           ("max_peak_act_left_bytes", "peak_act_left_bytes", "B"),
                           ("max_peak_act_right_bytes", "peak_act_right_bytes", "B")):
        lim = c.get(key)
        if lim is not None:
            v = df[col].to_numpy()
            flag(v > float(lim), lambda i, v=v, col=col, lim=lim, unit=unit: f"{col} {v[i]:.4g} {unit} > {float(lim):.4g}")
    if c.get("rate_hz"):
        need = df["comm_bytes"].to_numpy() * float(c["rate_hz"])
        bw = float(system["link"]["bandwidth_bytes_per_s"])
        flag(need > bw, lambda i: f"needs {need[i]:.3g} B/s at {c['rate_hz']} Hz > link {bw:.3g} B/s")
    for b, why in (feasibility or {}).items():
        if 0 <= b < len(df):
            reasons[b].append(why)
    df["score"] = score(df, r.get("weights", {}))
    key = {"comm": "comm_bytes", "score": "score", "latency": "est_latency_us"}.get(r.get("by", "score"))
    if key is None:
        raise StageError(f"ranking.by must be comm, score or latency, not {r.get('by')!r}")
    order = np.lexsort((df["boundary"].to_numpy(), df[key].to_numpy()))
    window = int(r.get("dedup_window", 0))
    best_near = np.full(len(df), -1)
    rank = np.full(len(df), np.nan)
    k = 0
    for i in order:
        if reasons[i]:
            continue
        if best_near[i] >= 0:
            reasons[i].append(f"near-duplicate of boundary {best_near[i]} (window {window})")
            continue
        k += 1
        rank[i] = k
        lo, hi = max(0, i - window), min(len(df), i + window + 1)
        sl = best_near[lo:hi]
        sl[sl < 0] = i
    df["pruned"] = [bool(x) for x in reasons]
    df["reason"] = ["; ".join(x) for x in reasons]
    df["rank"] = rank
    return df


def feasibility_reasons(path, arch: str) -> dict[int, str]:
    """Boundaries whose partition the Hailo check (stage 10) rejected for `arch` -> the pruning reason."""
    if not os.path.exists(path):
        raise StageError(f"--feasibility {path} not found: run 10_hailo_parse.py first")
    df = pd.read_csv(path, keep_default_na=False)
    missing = {"boundary", "arch", "status", "source", "op", "node"} - set(df.columns)
    if missing:
        raise StageError(f"--feasibility {path} lacks columns {sorted(missing)}: re-run 10_hailo_parse.py")
    out = {}
    for r in df[(df["arch"] == arch) & (df["status"] != "ok")].itertuples():
        what = f"{r.op} at {r.node}" if r.op else (r.node or "see hailo_feasibility.csv")
        out[int(r.boundary)] = f"hailo {arch}: {r.status} {what} ({r.source})"
    return out


def score(df: pd.DataFrame, weights: dict) -> np.ndarray:
    """sum of w * metric / max(metric): lower is better; each metric is normalised to [0, 1]."""
    total = np.zeros(len(df))
    for name, col in (("comm", "comm_bytes"), ("imbalance", "imbalance"), ("latency", "est_latency_us"),
                      ("energy", "est_energy_j")):
        w = float(weights.get(name, 0.0))
        if w:
            v = df[col].to_numpy(float)
            m = np.nanmax(v) if len(v) else 0.0
            total += w * (v / m if m > 0 else 0.0)
    return total


def pareto_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the points no other point dominates (<= in both, < in one), minimising both; O(n log n)."""
    order = np.lexsort((y, x))
    keep, best_y, best_x = [], np.inf, None
    for i in order:
        if y[i] < best_y:
            keep.append(i)
            best_y, best_x = y[i], x[i]
        elif y[i] == best_y and x[i] == best_x:
            keep.append(i)  # an exact duplicate of a front point is not dominated either
    return np.array(keep, dtype=int)


def pareto_table(df: pd.DataFrame) -> pd.DataFrame:
    ok = df[~df["pruned"]]
    rows = []
    for front, xc, yc in (("comm_imbalance", "comm_bytes", "imbalance"), ("latency_energy", "est_latency_us", "est_energy_j")):
        idx = pareto_front(ok[xc].to_numpy(float), ok[yc].to_numpy(float))
        sub = ok.iloc[idx].sort_values(xc)
        for _, r in sub.iterrows():
            rows.append({"front": front, "boundary": int(r["boundary"]), "after_node": r["after_node"],
                         "comm_bytes": r["comm_bytes"], "imbalance": r["imbalance"],
                         "est_latency_us": r["est_latency_us"], "est_energy_j": r["est_energy_j"],
                         "n_cut_tensors": int(r["n_cut_tensors"]), "rank": r["rank"]})
    return pd.DataFrame(rows, columns=["front", "boundary", "after_node", "comm_bytes", "imbalance", "est_latency_us",
                                       "est_energy_j", "n_cut_tensors", "rank"])


TEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
               "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def _tex(s: str) -> str:
    return "".join(TEX_ESCAPES.get(ch, ch) for ch in s)


def latex_table(top: pd.DataFrame, model: str) -> str:
    """A booktabs table of the top-k boundaries (needs \\usepackage{booktabs})."""
    lines = [r"\begin{table}[t]", r"\centering", r"\small",
             rf"\caption{{Top {len(top)} split boundaries of \texttt{{{_tex(model)}}}.}}",
             r"\label{tab:split-candidates}", r"\begin{tabular}{rrlrrrrr}", r"\toprule",
             r"Rank & $b$ & After node & Cut & Comm (KiB) & Imbalance & Est.\ latency (ms) & Est.\ energy (mJ) \\",
             r"\midrule"]
    for _, r in top.iterrows():
        lines.append(f"{int(r['rank'])} & {int(r['boundary'])} & \\texttt{{{_tex(str(r['after_node'])[:40])}}} & "
                     f"{int(r['n_cut_tensors'])} & {r['comm_bytes'] / 1024:.1f} & {r['imbalance']:.2f} & "
                     f"{r['est_latency_us'] / 1e3:.2f} & {r['est_energy_j'] * 1e3:.2f} \\\\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(lines)
