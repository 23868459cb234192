"""Stage 07's model of a two-device split: per-boundary costs on each device and the link, single-device
baselines, pruning, dominance-aware ranking, Pareto fronts, and the compact split model that the report's
what-if panel re-evaluates (the boundaries themselves come from lib/split/boundary_sweep.py).

The arithmetic of add_costs/_link_model, score, pareto_layers, _rank and the constraint rules is mirrored
line by line in the report's JavaScript (lib/report/templates/report.html.j2, `WhatIf`): change both together
(tests/test_report.py checks that the page reproduces this module exactly at the config's values).
"""
from __future__ import annotations

import bisect
import copy
import functools
import json
import os
from collections import Counter
from itertools import chain

import numpy as np
import pandas as pd

from lib.artifacts import atomic_path
from lib.errors import StageError
from lib.provenance import same_inputs, table_digest
from lib.units import fmt_us
from lib.analysis.device_time import device_time
from lib.analysis.roofline import known_or_zero, node_bytes
from lib.latency.kernel_model import KernelModel, load_kernel_model
from lib.latency.latency_model import HUGE, device_file, model_for_device
from lib.latency.predict import kernel_node_times
from lib.split.system import check_ranking

# pruning rules that depend on what the what-if panel changes (device and link figures); the others are static
DYNAMIC_RULES = ("max_latency_us", "max_energy_j", "rate_hz")
# what 07 reads of ops_profile.csv: costs and bytes, what the latency model keys on, ORT's fusions, layers
PROFILE_COLUMNS = frozenset({"node", "op_type", "op_class", "dtype", "mac_dtype", "flops", "act_in_bytes", "act_out_bytes",
                             "weight_bytes", "latency_us", "attribution", "fused_into", "layer"})
# score metrics: weight key in system.yaml -> boundaries.csv column (each normalised by its max, lower wins)
SCORE_METRICS = (("comm", "comm_bytes"), ("imbalance", "time_imbalance"), ("latency", "est_latency_us"),
                 ("energy", "est_energy_j"), ("throughput", "period_us"))


def device_factors(prof: pd.DataFrame, device: dict, kernels: pd.DataFrame | None = None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-node (ec, em, ovh) of a modelled device, whose time per node is
    t_i = ovh_i + max(flops_i / (peak * ec_i), bytes_i / (bw * em_i)):
    ec_i, em_i are the compute and memory efficiencies, ovh_i a fixed cost in us; none depends on the device's
    peak or bandwidth (the what-if panel changes those). A device with a `latency_model:` file (made by
    `make calibrate` on it) takes them from its kernel model when the file has one and `kernels` (the model's
    ORT kernel table, lib/latency/kernels.py) was given once for this table, else from its efficiency model
    (lib/latency/latency_model.py), the nodes ORT fuses (ops_profile.csv's attribution) costing nothing; a
    device without one is the plain roofline: (1, 1, 0)."""
    n = len(prof)
    if not device.get("latency_model"):
        return np.ones(n), np.ones(n), np.zeros(n)
    key = _device_key(device)
    if _FACTORS.get("prof") is not prof:          # one table at a time: 07 asks for each device three times
        _FACTORS.clear()
        _FACTORS["prof"] = prof
    if kernels is not None:
        _FACTORS["kernels"] = kernels
    if key not in _FACTORS:
        _FACTORS[key] = _model_factors(prof, device, _FACTORS.get("kernels"))
    return _FACTORS[key][:3]


_FACTORS: dict = {}


def _device_key(device: dict) -> str:
    return json.dumps(device, sort_keys=True, default=str)


def device_kernel_model(device: dict) -> KernelModel | None:
    """The kernel model of a device's `latency_model:` file, when it has one saved with its host figures (loaded
    once per file version: 07 asks whether it needs the kernel table, then for the factors)."""
    path = device_file(device["latency_model"])
    return _kernel_model_of(str(path), path.stat().st_mtime_ns if path.exists() else None)


@functools.lru_cache(maxsize=8)
def _kernel_model_of(path: str, version) -> KernelModel | None:
    km = load_kernel_model(path)
    return km if km is not None and km.host else None


def needs_kernels(system: dict) -> bool:
    """Whether a device of the system has a kernel model (07 then builds the model's kernel table: a measured
    device's model still serves the report's what-if when its figures change)."""
    return any(d.get("latency_model") and device_kernel_model(d) is not None for d in system["devices"].values())


def _model_factors(prof: pd.DataFrame, device: dict, kernels: pd.DataFrame | None) -> tuple:
    """(ec, em, ovh, what gave them)."""
    n = len(prof)
    peak, bw = float(device["peak_flops_per_s"]), float(device["mem_bw_bytes_per_s"])
    km = device_kernel_model(device) if kernels is not None else None
    if km is not None:
        t = prof["node"].map(kernel_node_times(km, kernels, km.host)).fillna(0.0).to_numpy(float)
        flops, nbytes = node_work(prof)
        roof = modelled_times(flops, nbytes, peak, bw, 1.0, 1.0, 0.0)
        # the kernel model's time at the device's figures, its roofline scaled by one factor: the what-if keeps it
        with np.errstate(divide="ignore", invalid="ignore"):
            eff = np.where((t > 0) & (roof > 0), roof / t, HUGE)
        return eff, eff.copy(), np.where(roof > 0, 0.0, t), "kernel model"
    lm = model_for_device(device, device["latency_model"])
    att = prof["attribution"].fillna("").astype(str) if "attribution" in prof else pd.Series([""] * n)
    return (*lm.factors(prof, peak, bw, att.isin(["fused", "not_run"]).to_numpy(), prof.get("fused_into")),
            "latency model")


def node_work(prof: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """FLOPs (unknown counted 0) and bytes (NaN when unknown: lib/analysis/roofline.py's node_bytes) of every node."""
    return prof["flops"].fillna(0.0).to_numpy(float), node_bytes(prof).to_numpy(float)


def modelled_times(flops, nbytes, peak: float, bw: float, ec, em, ovh) -> np.ndarray:
    """ovh + max(flops / (peak * ec), bytes / (bw * em)) in us; an unknown max counts 0 (known_or_zero)."""
    roof = device_time(flops, nbytes, peak, bw, ec, em, scale=1e6)
    return known_or_zero(roof)[0] + ovh


def measured_source(dev: dict, latency) -> bool:
    return dev.get("source", "roofline") == "measured" and latency is not None


def device_times(prof: pd.DataFrame, latency: np.ndarray | None, dev: dict) -> np.ndarray:
    """Per-node time on one device (us): 01's measured latency when asked for and available, else the model."""
    if measured_source(dev, latency):
        return np.nan_to_num(np.asarray(latency, dtype=float), nan=0.0)
    flops, nbytes = node_work(prof)
    ec, em, ovh = device_factors(prof, dev)
    return modelled_times(flops, nbytes, float(dev["peak_flops_per_s"]), float(dev["mem_bw_bytes_per_s"]), ec, em, ovh)


def left_graph_outputs(g, n_boundaries: int) -> tuple[np.ndarray, int]:
    """(per boundary, how many graph outputs the left part finishes (produced at or before node b); how many graph
    outputs nodes produce). `g`: a lib.onnx.graph.Graph or GraphArrays."""
    if hasattr(g, "t_output"):
        pos = g.output_nodes()
    else:
        pos = [g.producer[t] for t in g.graph_outputs if t in g.producer]
    d = np.bincount(np.asarray(pos, dtype=np.int64), minlength=len(g.names) + 1)
    return np.cumsum(d)[:n_boundaries], len(pos)


def add_costs(df: pd.DataFrame, prof: pd.DataFrame, latency: np.ndarray | None, system: dict, g=None) -> pd.DataFrame:
    """FLOPs balance, measured latency left/right, the two-device + link model, all by prefix sums."""
    nb_ = len(df)
    cf = np.cumsum(prof["flops"].fillna(0.0).to_numpy(float))
    total = cf[-1]
    df["flops_left"] = cf[:nb_]
    df["flops_right"] = total - cf[:nb_]
    df["compute_share_left"] = df["flops_left"] / total if total > 0 else np.nan
    df["imbalance"] = np.abs(df["flops_left"] - df["flops_right"]) / total if total > 0 else np.nan
    cl = np.cumsum(np.nan_to_num(latency)) if latency is not None else np.full(nb_ + 1, np.nan)
    df["latency_left_us"] = cl[:nb_]
    df["latency_right_us"] = cl[-1] - cl[:nb_]
    ta = np.cumsum(device_times(prof, latency, system["devices"]["A"]))
    tb = np.cumsum(device_times(prof, latency, system["devices"]["B"]))
    df["t_dev_a_us"] = ta[:nb_]
    df["t_dev_b_us"] = tb[-1] - tb[:nb_]
    _link_model(df, system)
    layers = prof["layer"].fillna("").astype(str).to_numpy() if "layer" in prof else np.full(len(prof), "")
    df["after_layer"] = layers[:nb_]
    if g is not None:
        df["left_graph_outputs"], n_outputs = left_graph_outputs(g, nb_)
        df["right_graph_outputs"] = n_outputs - df["left_graph_outputs"]
    return df


def _link_model(df: pd.DataFrame, system: dict) -> None:
    """Link time/energy, end-to-end latency and energy, device-time balance and pipelined throughput."""
    a, b, link = system["devices"]["A"], system["devices"]["B"], system["link"]
    ta, tb = df["t_dev_a_us"].to_numpy(float), df["t_dev_b_us"].to_numpy(float)
    link_t = df["n_cut_tensors"].to_numpy(float) * float(link["latency_us"]) + \
        df["comm_bytes"].to_numpy(float) / float(link["bandwidth_bytes_per_s"]) * 1e6
    df["link_time_us"] = link_t
    df["link_energy_j"] = df["comm_bytes"].to_numpy(float) * float(link["energy_per_byte_j"])
    df["est_latency_us"] = ta + link_t + tb
    df["est_energy_j"] = (float(a["power_w"]) * ta + float(b["power_w"]) * tb) * 1e-6 + df["link_energy_j"].to_numpy()
    both = ta + tb
    with np.errstate(invalid="ignore", divide="ignore"):
        df["time_imbalance"] = np.where(both > 0, np.abs(ta - tb) / both, 0.0)
        period = np.maximum(np.maximum(ta, link_t), tb)
        df["period_us"] = period
        df["throughput_per_s"] = np.where(period > 0, 1e6 / period, np.nan)


def baselines(prof: pd.DataFrame, latency: np.ndarray | None, system: dict) -> dict:
    """The whole graph on one device: latency, energy and throughput of all-on-A and all-on-B (no link)."""
    out, per_node = {}, {}
    for key in ("A", "B"):
        dev = system["devices"][key]
        per_node[key] = device_times(prof, latency, dev)
        t = float(np.sum(per_node[key]))
        k = key.lower()
        out[f"all_on_{k}_us"] = t
        out[f"all_on_{k}_energy_j"] = float(dev["power_w"]) * t * 1e-6
        out[f"all_on_{k}_throughput_per_s"] = 1e6 / t if t > 0 else None
        out[f"device_{k}"] = {"name": dev.get("name", key), "power_w": float(dev["power_w"]),
                              "time_source": time_source(dev, latency)}
    # a node of unknown cost counts 0 FLOPs on a modelled device (node_work): its time there is a lower bound
    unknown, t_a = prof["flops"].isna().to_numpy(), per_node["A"]
    out["unknown_cost_nodes"] = {"nodes": int(unknown.sum()), "share_of_a_time":
                                 float(t_a[unknown].sum() / t_a.sum()) if unknown.any() and t_a.sum() > 0 else 0.0}
    return out


def time_source(dev: dict, latency) -> str:
    """Where a device's per-node times come from: 01's measurement, the device's own latency model (its
    `latency_model:` file, made by `make calibrate` on it), else the plain roofline, the fallback."""
    if measured_source(dev, latency):
        return "measured (01)"
    if not dev.get("latency_model"):
        return "roofline (fallback: no latency_model)"
    got = _FACTORS.get(_device_key(dev))
    return f"{got[3] if got else 'latency model'} ({dev['latency_model']})"


def host_prediction(merge_meta: dict) -> dict:
    """03's session prediction on this host (device A's figure when A is this host), with its interval."""
    pred = merge_meta.get("prediction") or {}
    if pred.get("predicted_latency_us") is None:
        return {}
    iv = pred.get("interval_us")
    return {"predicted_latency_us": float(pred["predicted_latency_us"]), "predicted_by": pred.get("predicted_by"),
            "prediction_interval_us": [float(v) for v in iv] if iv else None,
            "other_cpu_note": pred.get("other_cpu_note") or "", "threads_note": pred.get("threads_note") or ""}


class Reasons:
    """Why each boundary is pruned: (rule code, text) pairs in the order the rules flag them; the codes are
    what summaries count. Kept per rule (the flagged positions and their texts) and joined per boundary at the
    end with object-array arithmetic: a 200k-boundary graph has 200k reasons."""

    def __init__(self, n: int):
        self.n = n
        self.rules: list[tuple[str, np.ndarray, np.ndarray]] = []     # code, positions, texts
        self.pruned = np.zeros(n, dtype=bool)

    def flag(self, mask, code: str, text) -> None:
        """text: one text for all, or a function of the flagged positions giving a text for each."""
        idx = np.flatnonzero(np.asarray(mask))
        if idx.size:
            texts = np.full(idx.size, text, dtype=object) if isinstance(text, str) else \
                np.asarray(text(idx), dtype=object)
            self.rules.append((code, idx, texts))
            self.pruned[idx] = True

    def _joined(self, sep: str, codes: bool) -> list[str]:
        out = np.full(self.n, "", dtype=object)
        has = np.zeros(self.n, dtype=bool)
        for code, idx, texts in self.rules:
            add = np.full(idx.size, code, dtype=object) if codes else texts
            out[idx] = np.where(has[idx], out[idx] + sep + add, add)
            has[idx] = True
        return out.tolist()

    def codes(self) -> list[str]:
        return self._joined(";", codes=True)

    def texts(self) -> list[str]:
        return self._joined("; ", codes=False)


def _constraint_rules(df: pd.DataFrame, system: dict, reasons: Reasons) -> None:
    c = system.get("constraints", {}) or {}
    for key, col, unit in (("max_latency_us", "est_latency_us", "us"), ("max_energy_j", "est_energy_j", "J"),
                           ("max_peak_act_left_bytes", "peak_act_left_bytes", "B"),
                           ("max_peak_act_right_bytes", "peak_act_right_bytes", "B")):
        lim = c.get(key)
        if lim is not None:
            v = df[col].to_numpy()
            reasons.flag(v > float(lim), key, lambda idx, v=v, col=col, lim=lim, unit=unit:
                         [f"{col} {x:.4g} {unit} > {float(lim):.4g}" for x in v[idx].tolist()])
    if c.get("rate_hz"):
        need = df["comm_bytes"].to_numpy() * float(c["rate_hz"])
        bw = float(system["link"]["bandwidth_bytes_per_s"])
        reasons.flag(need > bw, "rate_hz", lambda idx: [f"needs {x:.3g} B/s at {c['rate_hz']} Hz > link {bw:.3g} B/s"
                                                         for x in need[idx].tolist()])


def _static_rules(df: pd.DataFrame, r: dict, reasons: Reasons) -> None:
    share = float(r.get("min_compute_share", 0.0))
    left = df["compute_share_left"].to_numpy()
    reasons.flag((left < share) | (1 - left < share), "compute_share",
                 lambda idx: [f"compute share {min(x, 1 - x):.1%} < {share:.0%} on one side"
                              for x in left[idx].tolist()])
    if "left_graph_outputs" in df:
        reasons.flag((df["n_cut_tensors"] == 0) & (df["left_graph_outputs"] == 0), "nothing_crosses",
                     "nothing crosses: no cut tensor and no graph output finished on the left")
    if "right_graph_outputs" in df:     # what is left to run are nodes whose outputs nothing reads
        reasons.flag(df["right_graph_outputs"] == 0, "nothing_returned",
                     "the right part computes nothing the model returns")
    # after a Constant (or any node of no work whose output crosses nowhere) the cut is the one before it: the same
    # tensors cross, the same work on each side (an MLP's cut after /Constant_2 outranked the one after /Mul by
    # 0.25 ns of rounding and took an export slot)
    cuts, flops = df["cut_tensors"].astype(str).to_numpy(object), df["flops_left"].to_numpy(float)
    same = np.zeros(len(df), dtype=bool)
    same[1:] = (cuts[1:] == cuts[:-1]) & (flops[1:] == flops[:-1])
    if "left_graph_outputs" in df:
        outs = df["left_graph_outputs"].to_numpy()
        same[1:] &= outs[1:] == outs[:-1]
    b = df["boundary"].to_numpy()
    reasons.flag(same, "same_cut", lambda idx: [f"the same cut as boundary {x - 1}" for x in b[idx].tolist()])
    blocks = df["skip_block"].to_numpy(dtype=object)
    reasons.flag(blocks != "", "skip_block", lambda idx: "inside skip block (" + blocks[idx] + ")")
    if r.get("strict"):
        reasons.flag(~df["strict_ok"], "strict", "strict: right part needs activations produced before the cut node")


def prune_and_rank(df: pd.DataFrame, system: dict, feasibility: dict[int, str] | None = None) -> pd.DataFrame:
    """Mark pruned boundaries with every reason that applies, score the rest, rank, suppress near-duplicates."""
    r = system.get("ranking", {})
    reasons = Reasons(len(df))
    _static_rules(df, r, reasons)
    _constraint_rules(df, system, reasons)
    hailo = {b: why for b, why in (feasibility or {}).items() if 0 <= b < len(df)}
    if hailo:
        reasons.flag(np.isin(np.arange(len(df)), list(hailo)), "hailo", lambda idx: [hailo[b] for b in idx.tolist()])
    df["score"] = score(df, r.get("weights", {}))
    ok = ~reasons.pruned
    df["pareto_layer"] = pareto_layers(df["est_latency_us"].to_numpy(float), df["est_energy_j"].to_numpy(float), ok)
    order = ranking_order(df, r.get("by", "score"))
    df["rank"] = _rank(df, order, int(r.get("dedup_window", 0)), reasons)
    df["pruned"] = pd.Series(reasons.pruned, index=df.index, dtype=bool)
    # text as Python str objects: 200k of them, converted to pandas' str dtype only to be written out
    df["reason"] = pd.Series(reasons.texts(), index=df.index, dtype=object)
    df["pruned_by"] = pd.Series(reasons.codes(), index=df.index, dtype=object)
    return df


def ranking_order(df: pd.DataFrame, by: str) -> np.ndarray:
    """Positions in rank order. score: the latency-energy Pareto layer first (a boundary never ranks before one
    that beats it on both), then the score; latency: latency, then energy; comm: Comm(b). Ties: lower b."""
    b = df["boundary"].to_numpy()
    if by == "score":
        layer = np.nan_to_num(df["pareto_layer"].to_numpy(float), nan=np.inf)
        return np.lexsort((b, df["score"].to_numpy(float), layer))
    if by == "latency":
        return np.lexsort((b, df["est_energy_j"].to_numpy(float), df["est_latency_us"].to_numpy(float)))
    if by == "comm":
        return np.lexsort((b, df["comm_bytes"].to_numpy(float)))
    raise StageError(f"ranking.by must be comm, score or latency, not {by!r}")


def pareto_layers(x: np.ndarray, y: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Non-dominated sorting (minimise both) of the points in `mask`: layer 1 is the Pareto front, layer k the
    front once layers < k are removed; NaN outside the mask. O(n log n): points in (x, y) order, each goes to
    the first layer whose smallest y so far is above its own (exact duplicates share a layer)."""
    out = np.full(len(x), np.nan)
    idx = np.flatnonzero(mask)
    order = idx[np.lexsort((idx, y[idx], x[idx]))]
    xs, ys = x[order].astype(float).tolist(), y[order].astype(float).tolist()   # Python floats: 10x faster to read
    mins: list[float] = []
    layers: list[int] = []      # per point in order
    for j, (xj, yj) in enumerate(zip(xs, ys)):
        if j and xj == xs[j - 1] and yj == ys[j - 1]:
            k = layers[-1] - 1
        else:
            k = bisect.bisect_right(mins, yj)
            if k == len(mins):
                mins.append(yj)
            else:
                mins[k] = yj
        layers.append(k + 1)
    out[order] = layers
    return out


def _rank(df: pd.DataFrame, order: np.ndarray, window: int, reasons: Reasons) -> np.ndarray:
    """Ranks 1.. in `order` over unpruned boundaries; one within `window` positions of a better one is pruned
    as its near-duplicate."""
    n = len(df)
    best_near = np.full(n, -1)
    rank = np.full(n, np.nan)
    near = np.zeros(n, dtype=bool)
    k = 0
    for i in order[~reasons.pruned[order]].tolist():
        if best_near[i] >= 0:
            near[i] = True
            continue
        k += 1
        rank[i] = k
        lo, hi = max(0, i - window), min(n, i + window + 1)
        sl = best_near[lo:hi]
        sl[sl < 0] = i
    reasons.flag(near, "near_duplicate", lambda idx: [f"near-duplicate of boundary {b} (window {window})"
                                                      for b in best_near[idx].tolist()])
    return rank


HAILO_META = "hailo_meta.json"


def feasibility_reasons(path, arch: str, mine: dict) -> tuple[dict[int, str], set[int]] | None:
    """(boundaries whose partition the Hailo check (stage 10) found unsupported for `arch` -> the pruning reason,
    the boundaries it checked for `arch`). A compiler error (a crash, a time-out) is not a verdict: it prunes
    nothing. The check must be of this model and input spec (hailo_meta.json next to the CSV says), and of
    `arch` (another arch's rows pruned nothing, silently). None without a path (no --feasibility)."""
    if path is None:
        return None
    if not os.path.exists(path):
        raise StageError(f"--feasibility {path} not found: run 10_hailo_parse.py first")
    meta_path = os.path.join(os.path.dirname(os.path.abspath(path)), HAILO_META)
    try:
        with open(meta_path) as f:
            meta = json.load(f)
        ident = meta["identity"]
    except (OSError, ValueError, KeyError, TypeError):
        raise StageError(f"--feasibility {path} has no readable {HAILO_META} beside it: re-run 10_hailo_parse.py") from None
    sha = lambda i: (i.get("model") or {}).get("graph_sha256")  # noqa: E731
    if sha(ident) != sha(mine) or not same_inputs(ident.get("inputs"), mine.get("inputs")):
        raise StageError(f"--feasibility {path} is the Hailo check of another model or input spec: re-run 10_hailo_parse.py")
    digest = (meta.get("tables") or {}).get(os.path.basename(path))
    if digest is not None and table_digest(path) != digest:      # the CSV is not the one hailo_meta.json describes
        raise StageError(f"--feasibility {path} is not the table {HAILO_META} was written with: re-run 10_hailo_parse.py")
    df = pd.read_csv(path, keep_default_na=False, dtype=str)
    missing = {"boundary", "arch", "status", "source", "op", "node"} - set(df.columns)
    if missing:
        raise StageError(f"--feasibility {path} lacks columns {sorted(missing)}: re-run 10_hailo_parse.py")
    if not (df["arch"] == arch).any():
        raise StageError(f"--feasibility {path} has no rows for {arch} (it checked {', '.join(sorted(set(df['arch'])))}"
                         f"): run 10_hailo_parse.py --arch {arch}, or pass --feasibility-arch with one it checked")
    out = {}
    for r in df[(df["arch"] == arch) & (df["status"] == "unsupported")].itertuples():
        what = f"{r.op} at {r.node}" if r.op else (r.node or "see hailo_feasibility.csv")
        out[int(r.boundary)] = f"hailo {arch}: {r.status} {what} ({r.source})"
    return out, {int(b) for b in df.loc[df["arch"] == arch, "boundary"]}


def unchecked_top(df: pd.DataFrame, hailo: tuple[dict, set[int]] | None, top_k: int) -> list[int]:
    """The boundaries ranked in the top k after pruning by feasibility_reasons() that the Hailo check never
    parsed, said with the command that checks them (pruning promotes boundaries it did not check: the best split
    could be one the compiler rejects)."""
    if not hailo:
        return []
    top = df.loc[df["rank"] <= top_k].sort_values("rank")["boundary"]
    out = [int(b) for b in top if int(b) not in hailo[1]]
    if out:
        print(f"note: top-ranked boundaries {out} were not parsed by stage 10 (it checked {sorted(hailo[1])}): "
              f"10_hailo_parse.py --boundary {' '.join(map(str, out))}, then 07 again")
    return out


def check_weights(weights: dict) -> dict:
    known = {k for k, _ in SCORE_METRICS}
    bad = sorted(set(weights) - known)
    if bad:
        raise StageError(f"ranking.weights: unknown metric(s) {bad}; known: {sorted(known)}")
    return {k: float(weights.get(k, 0.0)) for k, _ in SCORE_METRICS}


def score(df: pd.DataFrame, weights: dict) -> np.ndarray:
    """sum of w * metric / max(metric) over SCORE_METRICS (max over all boundaries): lower is better."""
    w_all = check_weights(weights)
    total = np.zeros(len(df))
    for name, col in SCORE_METRICS:
        w = w_all[name]
        if w:
            v = df[col].to_numpy(float)
            m = np.nanmax(v) if len(v) else 0.0
            total += w * (v / m if m > 0 else 0.0)
    return total


def score_text(weights: dict) -> str:
    w = check_weights(weights)
    terms = [f"{w[k]:g}*{col}/max" for k, col in SCORE_METRICS if w[k]]
    return " + ".join(terms) or "0"


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


PARETO_COLUMNS = ["front", "boundary", "after_node", "after_layer", "comm_bytes", "imbalance", "time_imbalance",
                  "est_latency_us", "est_energy_j", "throughput_per_s", "n_cut_tensors", "rank"]


def pareto_table(df: pd.DataFrame) -> pd.DataFrame:
    ok = df[~df["pruned"].astype(bool)]
    if ok.empty:
        return pd.DataFrame(columns=PARETO_COLUMNS)
    parts = []
    for front, xc, yc in (("comm_imbalance", "comm_bytes", "imbalance"), ("latency_energy", "est_latency_us", "est_energy_j")):
        idx = pareto_front(ok[xc].to_numpy(float), ok[yc].to_numpy(float))
        sub = ok.iloc[idx].sort_values(xc, kind="stable")
        parts.append(sub.reindex(columns=PARETO_COLUMNS[1:]).assign(front=front))
    out = pd.concat(parts, ignore_index=True)[PARETO_COLUMNS] if parts else pd.DataFrame(columns=PARETO_COLUMNS)
    out["boundary"] = out["boundary"].astype(int)
    return out


TEX_ESCAPES = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
               "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def _tex(s: str) -> str:
    return "".join(TEX_ESCAPES.get(ch, ch) for ch in s)


def latex_table(top: pd.DataFrame, model: str) -> str:
    """A booktabs table of the top-k boundaries (needs \\usepackage{booktabs})."""
    lines = [r"\begin{table}[t]", r"\centering", r"\small",
             rf"\caption{{Top {len(top)} split boundaries of \texttt{{{_tex(model)}}}.}}",
             r"\label{tab:split-candidates}", r"\begin{tabular}{rrlrrrrr}", r"\toprule",
             r"Rank & $b$ & After node (layer) & Cut & Comm (KiB) & Imbalance & Est.\ latency (ms) & Est.\ energy (mJ) \\",
             r"\midrule"]
    for _, r in top.iterrows():
        layer = str(r.get("after_layer", "") or "")
        name = str(r["after_node"]) + (f" ({layer})" if layer else "")
        lines.append(f"{int(r['rank'])} & {int(r['boundary'])} & \\texttt{{{_tex(name[:48])}}} & "
                     f"{int(r['n_cut_tensors'])} & {r['comm_bytes'] / 1024:.1f} & {r['imbalance']:.2f} & "
                     f"{r['est_latency_us'] / 1e3:.2f} & {r['est_energy_j'] * 1e3:.2f} \\\\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\end{table}", ""]
    return "\n".join(lines)


def write_latex(top: pd.DataFrame, model: str, path) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(latex_table(top, model))


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
    flag = {"top_k": "--top-k", "dedup_window": "--dedup-window", "skip_block_min_span": "--skip-span",
            "min_compute_share": "--min-compute-share", "by": "--rank-by"}
    check_ranking(rk, lambda k: f"{flag[k]} (ranking.{k})" if k in flag else f"ranking.{k}")
    check_weights(rk.get("weights", {}) or {})
    return system


def _per_combination(fn, by: list[str]) -> list:
    """fn(text) for each boundary's text (pruned_by, reason), computed once per distinct text (a few rule
    combinations among 200k boundaries; a third as many reasons). latency_model.per_distinct does this for
    columns of scalars; fn here returns lists, which a numpy object array would take apart."""
    memo = {c: fn(c) for c in dict.fromkeys(by)}
    return list(map(memo.__getitem__, by))


def pruning_summary(df: pd.DataFrame, rules: dict, system: dict | None = None, feasibility: dict | None = None) -> dict:
    """candidate_pruning.json: counts per rule code and every pruned boundary with its reasons (the columns
    it needs, taken as lists: 200k boundaries); with `system`, its constraints and the feasibility file used."""
    mask = df["pruned"].to_numpy(bool)
    col = lambda c: df[c].to_numpy(object)[mask].tolist()   # noqa: E731
    by = col("pruned_by")
    codes = _per_combination(lambda c: c.split(";"), by)
    reasons = _per_combination(lambda t: t.split("; "), col("reason"))     # fewer distinct: 58k of 170k at 200k
    extra = {} if system is None else {"constraints": system.get("constraints"), "feasibility": feasibility or None}
    return {"rules": rules, "boundaries": int(len(df)), "pruned": int(mask.sum()), **extra,
            "by_rule": dict(Counter(chain.from_iterable(codes)).most_common()),
            "candidates": [{"boundary": b, "after_node": n, "rules": c, "reasons": t}
                           for b, n, c, t in zip(df["boundary"].to_numpy()[mask].tolist(), col("after_node"), codes,
                                                 reasons)]}


# ---- the split advice (split_summary.json) and the what-if model (split_model.json) ----

BEST_COLUMNS = ("boundary", "after_node", "after_layer", "rank", "n_cut_tensors", "comm_bytes", "t_dev_a_us",
                "link_time_us", "t_dev_b_us", "est_latency_us", "est_energy_j", "throughput_per_s")


def _row(r: pd.Series) -> dict:
    out = {}
    for c in BEST_COLUMNS:
        v = r[c]
        out[c] = v if isinstance(v, str) else (int(v) if c in ("boundary", "rank", "n_cut_tensors") else float(v))
    return out


def split_summary(df: pd.DataFrame, base: dict, system: dict, host_pred: dict | None = None) -> dict:
    """Baselines, the recommended (rank 1) split, the fastest split, and whether splitting beats both devices;
    host_pred: 03's prediction on this host with its interval (host_prediction)."""
    ranked = df[df["rank"].notna()].sort_values("rank")
    best = _row(ranked.iloc[0]) if len(ranked) else None
    fastest = _row(ranked.sort_values(["est_latency_us", "boundary"]).iloc[0]) if len(ranked) else None
    out = {**base, "candidates": int(len(ranked)), "boundaries": int(len(df)), "host_prediction": host_pred or None,
           "ranking": {"by": system.get("ranking", {}).get("by", "score"),
                       "score": score_text(system.get("ranking", {}).get("weights", {})),
                       "order": "Pareto layer of (est_latency_us, est_energy_j), then score" if
                       system.get("ranking", {}).get("by", "score") == "score" else None},
           "best": best, "fastest": fastest,
           # every energy figure here is power x time (lib/analysis/energy.py METHODS): say whose power
           "energy_method": {"method": "power x time", "power": "each device's power_w in the system config "
                             "(assumed, not measured)", "link": "comm_bytes x the link's energy_per_byte_j"}}
    out["verdict"] = verdict(out)
    return out


SMALL_MODEL_NODES = 5      # a classifier of a few ai.onnx.ml nodes (a tree ensemble, a ZipMap): nothing to split


def small_model_note(nodes: int) -> str | None:
    """The plain advice for a model too small to split (None for the others)."""
    if nodes > SMALL_MODEL_NODES:
        return None
    return (f"nothing worth splitting: the model has {nodes} nodes (at most {SMALL_MODEL_NODES}), its work cannot "
            f"be shared between two devices usefully; run it whole on one device")


# a split beats a single device by more than float rounding: a small CLIP's 44 boundaries "paid" by 0.5 ns, their
# device A computing only constants (the sum of the two sides' times is not the single device's to the last bit)
TIE_US = 1e-3


def verdict(s: dict) -> dict:
    """Does the best split beat both single-device baselines, on latency, energy and pipelined throughput?"""
    best = s.get("best")
    a, b = s["all_on_a_us"], s["all_on_b_us"]
    single = "A" if a <= b else "B"
    small = small_model_note(s["boundaries"] + 1)
    if small:
        return {"split_beats_both_latency": False, "split_beats_both_energy": False,
                "split_beats_both_throughput": False, "fastest_single": single, "worth_splitting": False,
                "advice": f"{small} (device {single}: {min(a, b) / 1e3:.3g} ms)"}
    if best is None:
        return {"split_beats_both_latency": False, "split_beats_both_energy": False,
                "split_beats_both_throughput": False, "fastest_single": single,
                "advice": f"no split candidate survives the pruning: run everything on device {single} "
                          f"({min(a, b) / 1e3:.3g} ms)"}
    lat, en, thr = best["est_latency_us"], best["est_energy_j"], best["throughput_per_s"] or 0.0
    beats = {"split_beats_both_latency": bool(lat < min(a, b) - TIE_US),
             "split_beats_both_energy": bool(en < min(s["all_on_a_energy_j"], s["all_on_b_energy_j"])),
             "split_beats_both_throughput": bool(thr > max(s["all_on_a_throughput_per_s"] or 0,
                                                         s["all_on_b_throughput_per_s"] or 0))}
    where = f"b{best['boundary']} (after {best['after_node']}" + (f", {best['after_layer']})" if best["after_layer"] else ")")
    if beats["split_beats_both_latency"]:
        text = f"split at {where}: {lat / 1e3:.3g} ms beats all on A ({a / 1e3:.3g} ms) and all on B ({b / 1e3:.3g} ms)"
    else:
        text = (f"do not split for latency: all on {single} ({min(a, b) / 1e3:.3g} ms) beats the best split {where} "
                f"({lat / 1e3:.3g} ms)")
        if beats["split_beats_both_throughput"]:
            text += f"; pipelined, the split sustains {thr:.3g}/s, more than either device alone"
    return {**beats, "fastest_single": single, "advice": text}


def _nullable(a: np.ndarray) -> np.ndarray:
    """Floats; written by write_json(indent=None), NaN and inf become null."""
    return np.ascontiguousarray(a, dtype=float)


def _compact(a: np.ndarray):
    """One number when every node has the same value, else the array (the page expands it)."""
    a = np.asarray(a, dtype=float)
    return float(a[0]) if len(a) and (a == a[0]).all() else _nullable(a)


def node_lists(a) -> dict:
    """Per node (GraphArrays `a`): its name, the tensors it reads (graph inputs and activations; weights are not
    tensors of the arrays) and writes; and {tensor: bytes on the link} of every crossing-capable tensor (an
    activation some node reads; unknown size: 0, as Comm(b)): what anyone needs to re-check a partition."""
    names = a.t_names.tolist()
    ins = [names[k] for k in a.in_t.tolist()]
    ptr = a.in_ptr.tolist()
    order = np.argsort(a.t_prod, kind="stable")
    produced = a.t_prod[order]
    starts = np.searchsorted(produced, np.arange(len(a.names) + 1)).tolist()
    outs = [names[k] for k in order.tolist()]
    x = np.flatnonzero((a.t_prod >= 0) & ~a.t_const & (np.diff(a.cons_ptr) > 0))
    return {"name": a.names.tolist(), "inputs": [ins[ptr[i]:ptr[i + 1]] for i in range(len(a.names))],
            "outputs": [outs[starts[i]:starts[i + 1]] for i in range(len(a.names))],
            "tensor_bytes": dict(zip(a.t_names[x].tolist(), np.nan_to_num(a.t_nbytes[x]).tolist()))}


def split_model(df: pd.DataFrame, prof: pd.DataFrame, latency: np.ndarray | None, system: dict, a=None) -> dict:
    """What the report's what-if panel needs to redo 07 for other device and link figures: O(nodes + boundaries).
    With the GraphArrays `a`, per node its name, inputs, outputs and the exact device times 07 used
    (latency_a_us, latency_b_us), and tensor_bytes: what the DAG optimum can be re-checked from."""
    flops, nbytes = node_work(prof)
    lists = node_lists(a) if a is not None else {}
    tensor_bytes = lists.pop("tensor_bytes", None)
    devices = {}
    for key in ("A", "B"):
        dev = system["devices"][key]
        ec, em, ovh = device_factors(prof, dev)
        devices[key] = {"name": dev.get("name", key), "source": "measured" if measured_source(dev, latency) else "model",
                        "time_source": time_source(dev, latency),
                        **{k: float(dev[k]) for k in ("peak_flops_per_s", "mem_bw_bytes_per_s", "power_w")},
                        "ec": _compact(ec), "em": _compact(em), "ovh_us": _compact(ovh)}
    rk = system.get("ranking", {})
    by = df["pruned_by"].tolist()
    static = _per_combination(lambda codes: ";".join(c for c in codes.split(";") if c and c not in DYNAMIC_RULES
                                                     and c != "near_duplicate"), by)
    times = {f"latency_{k.lower()}_us": _nullable(device_times(prof, latency, system["devices"][k])) for k in ("A", "B")}
    return {"nodes": {"n": len(prof), "flops": _nullable(flops), "bytes": _nullable(nbytes), **lists, **times},
            **({"tensor_bytes": tensor_bytes} if tensor_bytes is not None else {}),
            "devices": devices, "link": {k: float(system["link"][k]) for k in
                                         ("bandwidth_bytes_per_s", "latency_us", "energy_per_byte_j")},
            "link_name": system["link"].get("name", ""),
            "constraints": {k: (None if v is None else float(v)) for k, v in (system.get("constraints") or {}).items()},
            "ranking": {"by": rk.get("by", "score"), "weights": check_weights(rk.get("weights", {}) or {}),
                        "dedup_window": int(rk.get("dedup_window", 0)), "top_k": int(rk.get("top_k", 10))},
            "boundaries": {"after_node": df["after_node"].tolist(), "after_layer": df["after_layer"].tolist(),
                           "n_cut_tensors": df["n_cut_tensors"].to_numpy(np.int64).tolist(),
                           "comm_bytes": df["comm_bytes"].to_numpy(float).tolist(), "static_pruned_by": static}}


def print_summary(df: pd.DataFrame, top: pd.DataFrame, pareto: pd.DataFrame, rk: dict, summ: dict) -> None:
    """07's human summary: pruning, the score and its weights, the top-k, the baselines and the advice."""
    print(f"{len(df)} boundaries, {int(df['pruned'].sum())} pruned; ranked by {rk.get('by', 'score')}"
          + (f": Pareto layer of (latency, energy), then score = {score_text(rk.get('weights', {}))} (lower wins)"
             if rk.get("by", "score") == "score" else "")
          + f"; Pareto: {int((pareto['front'] == 'comm_imbalance').sum())} (comm, imbalance), "
            f"{int((pareto['front'] == 'latency_energy').sum())} (latency, energy)")
    if top.empty:
        print("no boundary survives the pruning: see candidate_pruning.json (relax --min-compute-share, "
              "--skip-span, --strict or the constraints)")
    else:
        print(f"{'rank':>4} {'b':>5}  {'after node (layer)':<42} {'cut':>3} {'comm KiB':>9} {'t-bal':>5} "
              f"{'est ms':>8} {'est mJ':>8} {'thr/s':>7}")
    for r in top.itertuples():
        name = f"{r.after_node} ({r.after_layer})" if r.after_layer else r.after_node
        print(f"{int(r.rank):>4} {r.boundary:>5}  {name[:42]:<42} {r.n_cut_tensors:>3} {r.comm_bytes / 1024:>9.1f} "
              f"{r.time_imbalance:>5.2f} {r.est_latency_us / 1e3:>8.2f} {r.est_energy_j * 1e3:>8.2f} "
              f"{r.throughput_per_s:>7.1f}")
    for k in ("a", "b"):
        d = summ[f"device_{k}"]
        print(f"all on {k.upper()} ({d['name']}; {d['time_source']}): {summ[f'all_on_{k}_us'] / 1e3:.2f} ms, "
              f"{summ[f'all_on_{k}_energy_j'] * 1e3:.2f} mJ, {summ[f'all_on_{k}_throughput_per_s'] or 0:.1f}/s")
    u = summ.get("unknown_cost_nodes") or {}
    if u.get("nodes"):
        print(f"note: {u['nodes']} node{'s' if u['nodes'] != 1 else ''} of unknown cost ({100 * u['share_of_a_time']:.0f}% of device A's time) count "
              f"0 FLOPs on a modelled device: its times, and the advice that rests on them, are optimistic there")
    p = summ.get("host_prediction") or {}
    if p:
        iv = p["prediction_interval_us"]
        print(f"this host's predicted session ({p['predicted_by']}, 03): {fmt_us(p['predicted_latency_us'])}"
              + (f", interval {fmt_us(iv[0])}-{fmt_us(iv[1])}" if iv else ", no interval")
              + (" (for the calibration's CPU: see 03's warning)" if p.get("other_cpu_note") else "")
              + (" (for the calibration's thread count: see 03's warning)" if p.get("threads_note") else ""))
    v = summ["verdict"]
    print(f"splitting {'beats' if v['split_beats_both_latency'] else 'does NOT beat'} both single-device baselines on "
          f"latency ({'beats' if v['split_beats_both_energy'] else 'not'} on energy, "
          f"{'beats' if v['split_beats_both_throughput'] else 'not'} on pipelined throughput)")
    print(f"advice: {v['advice']}")
