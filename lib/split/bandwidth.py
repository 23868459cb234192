"""When a split pays: the link bandwidth above which a split beats the better single device (Neurosurgeon's
run-time decision, made static), a sweep of the best partition over bandwidths, and the cut tensors priced at
fp32, fp16 and int8 (Auto-Split, KDD'21, picks split and bit-width together).

A split's latency at bandwidth W is t_A + t_B + n_cut x link latency + Comm / W: it beats the better single
device (latency S) for W > Comm / (S - t_A - t_B - n_cut x latency), and never when that slack is <= 0.
Sending int8 (fp16) instead of a float tensor's own type divides its bytes by its element size (by half);
the cost of quantising the cut tensors is not counted.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from lib.onnx.graph import GraphArrays
from lib.split.boundary_sweep import _diff
from lib.split.dag import CutGraph, best_partition, evaluate, objectives
from lib.split.ranking import TIE_US

FLOAT_BYTES = {"float": 4, "double": 8, "float16": 2, "bfloat16": 2}
SWEEP_BW = np.logspace(np.log10(1e6 / 8), np.log10(100e9 / 8), 26)    # 1 Mbit/s .. 100 Gbit/s, 5 per decade
DAG_SWEEP_MAX_NODES = 2_000      # above this the sweep leaves the DAG optimum out (26 min cuts: ~2 s at 2k nodes)


def crossover(t_a, t_b, n_cut, comm, link_latency_us: float, single_us: float):
    """Bytes/s above which each split beats `single_us` by more than TIE_US (NaN: never; 0: at any bandwidth)."""
    slack = single_us - np.asarray(t_a, float) - np.asarray(t_b, float) - np.asarray(n_cut, float) * link_latency_us
    comm = np.asarray(comm, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(slack <= TIE_US, np.nan, np.where(comm > 0, comm * 1e6 / slack, 0.0))


def bandwidth_crossover(df, dag: dict | None, base: dict, system: dict, top_k: int) -> dict:
    """split_summary.json's bandwidth_crossover: {boundary number (as text) or "dag": bytes/s or None} for the
    top-k ranked boundaries and the DAG optimum (its node set at the configured bandwidth)."""
    single = min(base["all_on_a_us"], base["all_on_b_us"])
    lat = float(system["link"]["latency_us"])
    top = df[df["rank"] <= top_k].sort_values("rank")
    x = crossover(top["t_dev_a_us"], top["t_dev_b_us"], top["n_cut_tensors"], top["comm_bytes"], lat, single)
    out = {str(int(b)): (None if np.isnan(v) else float(v)) for b, v in zip(top["boundary"], x)}
    if dag is not None:
        v = float(crossover(dag["t_dev_a_us"], dag["t_dev_b_us"], dag["n_cut_tensors"], dag["comm_bytes"], lat, single))
        out["dag"] = None if np.isnan(v) else v
    return out


def precision_columns(df, a: GraphArrays, dtypes) -> None:
    """comm_bytes_fp16 and comm_bytes_int8 per boundary (boundaries.csv): each crossing tensor priced by its
    producer's element type (a float tensor of s bytes per element: 2/s and 1/s of its bytes)."""
    n = len(a.names)
    if n < 2:
        df["comm_bytes_fp16"], df["comm_bytes_int8"] = [], []
        return
    prod = a.t_prod
    ncons = np.diff(a.cons_ptr)
    last = np.where(ncons > 0, a.cons[np.maximum(a.cons_ptr[1:] - 1, 0)] if len(a.cons) else prod, prod)
    c = np.flatnonzero((prod >= 0) & ~a.t_const & (last > prod))
    size = np.array([FLOAT_BYTES.get(str(d), 0) for d in dtypes], float)[prod[c]]
    nb = np.nan_to_num(a.t_nbytes[c])
    for col, bits in (("comm_bytes_fp16", 2), ("comm_bytes_int8", 1)):
        df[col] = _diff(n, prod[c], last[c], np.where(size > bits, nb * bits / np.maximum(size, 1), nb))


def precision_summary(df, base: dict, system: dict) -> dict:
    """How many boundaries beat the better single device at each precision, and those that pay only with int8."""
    single = min(base["all_on_a_us"], base["all_on_b_us"])
    bw = float(system["link"]["bandwidth_bytes_per_s"])
    fixed = df["t_dev_a_us"] + df["t_dev_b_us"] + df["n_cut_tensors"] * float(system["link"]["latency_us"])
    lat = {p: fixed + df[col] / bw * 1e6 for p, col in (("fp32", "comm_bytes"), ("fp16", "comm_bytes_fp16"),
                                                         ("int8", "comm_bytes_int8"))}
    beats = single - TIE_US
    only = df["boundary"][(lat["int8"] < beats) & ~(lat["fp16"] < beats)]     # neither fp32 nor fp16 would do
    best = int(np.argmin(lat["int8"].to_numpy())) if len(df) else None
    return {**{f"boundaries_paying_{p}": int((v < beats).sum()) for p, v in lat.items()},
            "int8_only": only.head(50).astype(int).tolist(), "int8_only_count": int(len(only)),
            "best_int8": None if best is None else {"boundary": int(df["boundary"].iloc[best]),
                                                    "est_latency_us": float(lat["int8"].iloc[best]),
                                                    "comm_bytes_int8": float(df["comm_bytes_int8"].iloc[best])},
            "note": "int8/fp16 price the crossing tensors only; quantise/dequantise time is not counted"}


def sweep(df, a: GraphArrays, cg: CutGraph, ta, tb, system: dict, base: dict):
    """bandwidth_sweep.csv: per bandwidth, the best boundary, the DAG optimum (graphs up to DAG_SWEEP_MAX_NODES)
    and the best of all (single devices included), with latency and energy."""
    link = system["link"]
    fixed = (df["t_dev_a_us"] + df["t_dev_b_us"] + df["n_cut_tensors"] * float(link["latency_us"])).to_numpy(float)
    energy = df["est_energy_j"].to_numpy(float)      # the link's energy is per byte: no bandwidth in it
    rows = []
    for bw in SWEEP_BW:
        lat = fixed + df["comm_bytes"].to_numpy(float) / bw * 1e6
        i = int(np.argmin(lat)) if len(lat) else None
        row = {"bandwidth_bytes_per_s": float(bw), "bandwidth_mbit_s": float(bw) * 8 / 1e6,
               "all_on_a_us": base["all_on_a_us"], "all_on_b_us": base["all_on_b_us"],
               "best_boundary": None if i is None else int(df["boundary"].iloc[i]),
               "boundary_latency_us": None if i is None else float(lat[i]),
               "boundary_energy_j": None if i is None else float(energy[i])}
        row.update(_dag_at(a, cg, ta, tb, system, bw) if cg.n <= DAG_SWEEP_MAX_NODES else {})
        rows.append({**row, **_best_of(row, base)})
    return pd.DataFrame(rows)


def _dag_at(a, cg, ta, tb, system, bw) -> dict:
    left, _ = best_partition(cg, *objectives(cg, ta, tb, system, bandwidth=bw)["latency"])
    ev = evaluate(a, cg, left, ta, tb, system, bandwidth=bw)
    return {"dag_latency_us": ev["est_latency_us"], "dag_energy_j": ev["est_energy_j"], "dag_n_left": ev["n_left"],
            "dag_is_prefix": ev["is_prefix"]}


def _best_of(row: dict, base: dict) -> dict:
    cands = [("all_on_a", base["all_on_a_us"], base["all_on_a_energy_j"]),
             ("all_on_b", base["all_on_b_us"], base["all_on_b_energy_j"])]
    if row["boundary_latency_us"] is not None:
        cands.append((f"b{row['best_boundary']}", row["boundary_latency_us"], row["boundary_energy_j"]))
    if row.get("dag_latency_us") is not None:
        cands.append(("dag", row["dag_latency_us"], row["dag_energy_j"]))
    # the simplest within a tie (single device, then a boundary, then the DAG): the DAG optimum equal to a boundary
    # up to float rounding (395.83744 against 395.8374400000006) is that boundary
    low = min(c[1] for c in cands)
    name, lat, en = next(c for c in cands if c[1] <= low + TIE_US)
    return {"best": name, "best_latency_us": lat, "best_energy_j": en}


def plot(sw, path: Path, title: str) -> Path:
    """Latency against link bandwidth (log-log): both single devices, the best boundary, the DAG optimum."""
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False    # the title names the model: text, not math
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.2))
    x = sw["bandwidth_mbit_s"]
    ax.plot(x, sw["all_on_a_us"] / 1e3, "--", label="all on A")
    ax.plot(x, sw["all_on_b_us"] / 1e3, "--", label="all on B")
    ax.plot(x, sw["boundary_latency_us"].astype(float) / 1e3, "o-", ms=3, label="best boundary")
    if "dag_latency_us" in sw:
        ax.plot(x, sw["dag_latency_us"] / 1e3, "s-", ms=3, label="DAG optimum (min cut)")
    ax.set(xscale="log", yscale="log", xlabel="link bandwidth (Mbit/s)", ylabel="estimated latency (ms)", title=title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    plt.close(fig)
    tmp.replace(path)
    return path
