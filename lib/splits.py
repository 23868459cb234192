"""Stage 07's model of a two-device split: per-boundary costs on each device and the link, pruning, ranking,
Pareto fronts (the boundaries themselves come from lib/boundary_sweep.py)."""
from __future__ import annotations

import copy
import os

import numpy as np
import pandas as pd

from .errors import StageError
from .roofline import known_or_zero, node_bytes, roofline_time_us


def device_times(metrics: pd.DataFrame, latency: np.ndarray | None, dev: dict) -> np.ndarray:
    """Per-node time on one device (us): measured when asked for and available, else its roofline
    (lib/roofline.py's policy: a node of unknown bytes counts 0)."""
    if dev.get("source", "roofline") == "measured" and latency is not None:
        return np.nan_to_num(latency, nan=0.0)
    t = roofline_time_us(metrics["flops"].fillna(0.0), node_bytes(metrics), float(dev["peak_flops_per_s"]),
                         float(dev["mem_bw_bytes_per_s"]))
    return known_or_zero(t)[0]


def add_costs(df: pd.DataFrame, metrics: pd.DataFrame, latency: np.ndarray | None, system: dict) -> pd.DataFrame:
    """FLOPs balance, measured latency left/right and the two-device + link model, all by prefix sums."""
    nb_ = len(df)
    cf = np.cumsum(metrics["flops"].fillna(0.0).to_numpy(float))
    total = cf[-1]
    df["flops_left"] = cf[:nb_]
    df["flops_right"] = total - cf[:nb_]
    df["compute_share_left"] = df["flops_left"] / total if total > 0 else np.nan
    df["imbalance"] = np.abs(df["flops_left"] - df["flops_right"]) / total if total > 0 else np.nan
    cl = np.cumsum(np.nan_to_num(latency)) if latency is not None else np.full(nb_ + 1, np.nan)
    df["latency_left_us"] = cl[:nb_]
    df["latency_right_us"] = cl[-1] - cl[:nb_]
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


class Reasons:
    """Why each boundary is pruned: (rule code, text) pairs; the codes are what summaries count."""

    def __init__(self, n: int):
        self.items: list[list[tuple[str, str]]] = [[] for _ in range(n)]

    def flag(self, mask, code: str, text) -> None:
        for i in np.flatnonzero(np.asarray(mask)):
            self.items[i].append((code, text(i) if callable(text) else text))

    def codes(self) -> list[str]:
        return [";".join(c for c, _ in r) for r in self.items]

    def texts(self) -> list[str]:
        return ["; ".join(t for _, t in r) for r in self.items]


def _constraint_rules(df: pd.DataFrame, system: dict, reasons: Reasons) -> None:
    c = system.get("constraints", {}) or {}
    for key, col, unit in (("max_latency_us", "est_latency_us", "us"), ("max_energy_j", "est_energy_j", "J"),
                           ("max_peak_act_left_bytes", "peak_act_left_bytes", "B"),
                           ("max_peak_act_right_bytes", "peak_act_right_bytes", "B")):
        lim = c.get(key)
        if lim is not None:
            v = df[col].to_numpy()
            reasons.flag(v > float(lim), key, lambda i, v=v, col=col, lim=lim, unit=unit:
                         f"{col} {v[i]:.4g} {unit} > {float(lim):.4g}")
    if c.get("rate_hz"):
        need = df["comm_bytes"].to_numpy() * float(c["rate_hz"])
        bw = float(system["link"]["bandwidth_bytes_per_s"])
        reasons.flag(need > bw, "rate_hz", lambda i: f"needs {need[i]:.3g} B/s at {c['rate_hz']} Hz > link {bw:.3g} B/s")


def prune_and_rank(df: pd.DataFrame, system: dict, feasibility: dict[int, str] | None = None) -> pd.DataFrame:
    """Mark pruned boundaries with every reason that applies, score the rest, rank, suppress near-duplicates."""
    r = system.get("ranking", {})
    reasons = Reasons(len(df))
    share = float(r.get("min_compute_share", 0.0))
    left = df["compute_share_left"].to_numpy()
    reasons.flag((left < share) | (1 - left < share), "compute_share",
                 lambda i: f"compute share {min(left[i], 1 - left[i]):.1%} < {share:.0%} on one side")
    reasons.flag(df["skip_block"] != "", "skip_block", lambda i: f"inside skip block ({df['skip_block'].iat[i]})")
    if r.get("strict"):
        reasons.flag(~df["strict_ok"], "strict", "strict: right part needs activations produced before the cut node")
    _constraint_rules(df, system, reasons)
    for b, why in (feasibility or {}).items():
        if 0 <= b < len(df):
            reasons.items[b].append(("hailo", why))
    df["score"] = score(df, r.get("weights", {}))
    key = {"comm": "comm_bytes", "score": "score", "latency": "est_latency_us"}.get(r.get("by", "score"))
    if key is None:
        raise StageError(f"ranking.by must be comm, score or latency, not {r.get('by')!r}")
    df["rank"] = _rank(df, np.lexsort((df["boundary"].to_numpy(), df[key].to_numpy())), int(r.get("dedup_window", 0)),
                       reasons)
    df["pruned"] = [bool(x) for x in reasons.items]
    df["reason"] = reasons.texts()
    df["pruned_by"] = reasons.codes()
    return df


def _rank(df: pd.DataFrame, order: np.ndarray, window: int, reasons: Reasons) -> np.ndarray:
    """Ranks 1.. in `order` over unpruned boundaries; one within `window` positions of a better one is pruned
    as its near-duplicate."""
    best_near = np.full(len(df), -1)
    rank = np.full(len(df), np.nan)
    k = 0
    for i in order:
        if reasons.items[i]:
            continue
        if best_near[i] >= 0:
            reasons.items[i].append(("near_duplicate", f"near-duplicate of boundary {best_near[i]} (window {window})"))
            continue
        k += 1
        rank[i] = k
        lo, hi = max(0, i - window), min(len(df), i + window + 1)
        sl = best_near[lo:hi]
        sl[sl < 0] = i
    return rank


def feasibility_reasons(path, arch: str) -> dict[int, str]:
    """Boundaries whose partition the Hailo check (stage 10) rejected for `arch` -> the pruning reason."""
    if not os.path.exists(path):
        raise StageError(f"--feasibility {path} not found: run 10_hailo_parse.py first")
    df = pd.read_csv(path, keep_default_na=False, dtype=str)
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


def choose_boundaries(bd: pd.DataFrame, boundaries: list[int] | None, top_k: int) -> list[int]:
    """The boundaries a user asked for (checked), else the top-k ranked ones (08 and 10 share this)."""
    if boundaries:
        bad = [b for b in boundaries if not 0 <= b < len(bd)]
        if bad:
            raise StageError(f"--boundary {bad} out of range: the model has boundaries 0..{len(bd) - 1}")
        return list(dict.fromkeys(boundaries))
    return [int(b) for b in bd[bd["rank"].notna()].sort_values("rank")["boundary"].head(top_k)]


def ranking_overrides(system: dict, **flags) -> dict:
    """system.yaml with the ranking keys a stage's flags override (None = keep)."""
    system = copy.deepcopy(system)
    rk = system.setdefault("ranking", {})
    rk.update({k: v for k, v in flags.items() if v is not None and v is not False})
    if not 0 <= float(rk.get("min_compute_share", 0)) <= 0.5:
        raise StageError("min compute share must lie in 0..0.5")
    return system


def pruning_summary(df: pd.DataFrame, rules: dict) -> dict:
    """candidate_pruning.json: counts per rule code and every pruned boundary with its reasons."""
    pruned = df[df["pruned"]]
    codes = pruned["pruned_by"].str.split(";").explode()
    return {"rules": rules, "boundaries": int(len(df)), "pruned": int(len(pruned)),
            "by_rule": {str(k): int(v) for k, v in codes.value_counts().items()},
            "candidates": [{"boundary": int(r.boundary), "after_node": r.after_node, "rules": r.pruned_by.split(";"),
                            "reasons": r.reason.split("; ")} for r in pruned.itertuples()]}
