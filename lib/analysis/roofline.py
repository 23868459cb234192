"""The one roofline and the one bytes policy, used by stages 03, 05, 07 and 09.

Bytes of a node = activation bytes in + out + weight bytes; unknown when any part is unknown (a tensor
without a shape). Roofline time = max(FLOPs / peak FLOP/s, bytes / bandwidth): unknown (NaN) when FLOPs or
bytes are. Stages that need a number for every node (a critical path, an energy sum, a split's prefix sums)
count an unknown time as 0 and report how many nodes that was (unknown_time_nodes in their meta).

Stage 03's roofline is a cache-aware *bound* (a kernel cannot run faster than it): bytes are those the kernel
reads and writes (kernel_node_bytes: a view or a Shape reads no data, a Gather/Slice reads what it picks; an
RNN reads its recurrent weights again at every step, recurrent_reread_us); the node's working set (those bytes)
names the memory level it fits in (L1/L2/L3 sizes from the host file, else DRAM), and its memory time lets each
level serve at most its size at its bandwidth (measured by `make calibrate`, lib/latency/host_probe.py), the
rest coming from the next (memory_time_us: continuous in the bytes,
where charging all of them at the level's bandwidth jumps at each cache size, and a kernel of 39 MB, just past
a 32 MB L3, ran 14% faster than all of them at DRAM's bandwidth); the compute
peak is that of the node's compute dtype (int8 for integer and fused QDQ kernels), the best ORT's own
kernels reach. contradictions() lists nodes with a kernel of their own measured below their bound.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from lib.analysis.device_time import device_time
from lib.host import per_dtype
from lib.onnx.ops import RECURRENT, names_with

BYTE_COLUMNS = ["act_in_bytes", "act_out_bytes", "weight_bytes"]
LATENCY_COLUMNS = ["latency_us", "p10_us", "p90_us", "runs", "attribution", "fused_into"]


VIEW_OPS = names_with("view")       # no data read (lib/onnx/ops.py's registry)
PICK_OPS = names_with("pick")       # read what they pick, not the whole input
LEVELS = ("L1", "L2", "L3", "DRAM")
RESOLUTION_US = 1.0     # ORT's profiler records whole microseconds


def node_bytes(df: pd.DataFrame) -> pd.Series:
    return df[BYTE_COLUMNS].sum(axis=1, min_count=len(BYTE_COLUMNS))


def kernel_node_bytes(df: pd.DataFrame) -> np.ndarray:
    """Bytes a node's kernel reads and writes: views and shape reads 0, picks 2 x what they output (read it,
    write it), the others activations in + out + weights (NaN when unknown)."""
    op = df["op_type"].astype(str).str.split(":").str[-1].to_numpy(object)
    out = df["act_out_bytes"].to_numpy(float)
    full = node_bytes(df).to_numpy(float)
    return np.where(np.isin(op, list(VIEW_OPS)), 0.0, np.where(np.isin(op, list(PICK_OPS)), 2 * out, full))


def levels(host: dict) -> tuple[list[str], np.ndarray, np.ndarray]:
    """(level names, their sizes in bytes, their bandwidths) from the host file: `caches_bytes` and
    `bandwidth_bytes_per_s` per level; without them one level, DRAM at mem_bw_bytes_per_s."""
    caches, bws = host.get("caches_bytes") or {}, host.get("bandwidth_bytes_per_s") or {}
    names = [lv for lv in LEVELS[:-1] if lv in caches and lv in bws] + ["DRAM"]
    size = np.array([float(caches[lv]) for lv in names[:-1]] + [np.inf])
    bw = np.array([float(bws[lv]) for lv in names[:-1]] + [float(bws.get("DRAM", host["mem_bw_bytes_per_s"]))])
    return names, size, bw


def memory_level(nbytes, host: dict) -> tuple[np.ndarray, np.ndarray]:
    """(level name, its bandwidth) per working set: the smallest level it fits in."""
    names, size, bw = levels(host)
    nb = np.nan_to_num(np.asarray(nbytes, dtype=float), nan=0.0)
    k = np.minimum(np.searchsorted(size, nb, side="left"), len(names) - 1)
    return np.asarray(names, dtype=object)[k], bw[k]


def memory_time_us(nbytes, host: dict) -> np.ndarray:
    """The least time to move each working set: each level serves at most its size, at its bandwidth, nearest
    first, and the rest comes from the next level (DRAM takes what no cache holds). NaN where bytes are."""
    _, size, bw = levels(host)
    nb = np.asarray(nbytes, dtype=float)
    start = np.concatenate([[0.0], size[:-1]])
    served = np.clip(np.nan_to_num(nb, nan=0.0)[:, None] - start, 0.0, size - start)
    return np.where(np.isnan(nb), np.nan, (served / bw).sum(axis=1) * 1e6)


def rnn_dims(op, out_dims) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(steps, directions, hidden) of each RNN kernel or node (LSTM, GRU, RNN, DynamicQuantizeLSTM) from its first
    output's dims text, Y = steps x directions x batch x hidden (layout 0: ORT's CPU kernels refuse layout 1);
    0 for any other op and for unknown dims."""
    name = pd.Series(op, dtype=str).str.split(":").str[-1].to_numpy(object)
    out = np.zeros((len(name), 3))
    for i in np.flatnonzero(np.isin(name, list(RECURRENT))):
        d = str(out_dims[i]).split("x")
        if len(d) == 4 and all(x.isdigit() for x in d):
            out[i] = int(d[0]), int(d[1]), int(d[3])
    return out[:, 0], out[:, 1], out[:, 2]


def recurrent_reread_us(op, out_dims, host: dict) -> np.ndarray:
    """The least time an RNN kernel spends reading its recurrent weights R again, 0 for any other kernel. Each step
    multiplies the hidden state by R (gates x hidden x hidden values per direction) after the step before, so R is
    read (steps - 1) x directions more times than the weight bytes count it: each read at the best the memory
    levels give R's size (memory_time_us). ORT's bidirectional LSTM of 32 steps, hidden 512 (2 x 4 MB of R)
    measured 3.4 ms against a FLOP bound of 0.56 ms: it read R at 60-80 GB/s."""
    steps, dirs, hidden = rnn_dims(op, out_dims)
    name = pd.Series(op, dtype=str).str.split(":").str[-1]
    gates = name.map({k: v[0] for k, v in RECURRENT.items()}).fillna(0).to_numpy(float)
    r_bytes = gates * hidden * hidden * np.where(name == "DynamicQuantizeLSTM", 1, 4)     # its R is int8
    return np.maximum(steps - 1, 0) * dirs * memory_time_us(r_bytes, host)


def bound_us(flops, nbytes, peak, host: dict, reread_us=0.0) -> tuple[np.ndarray, np.ndarray]:
    """(the cache-aware roofline bound in us, the memory level) of kernels or nodes; reread_us: memory time on top
    of reading each byte once (recurrent_reread_us)."""
    level, _ = memory_level(nbytes, host)
    t = np.maximum(np.asarray(flops, dtype=float) / np.asarray(peak, dtype=float) * 1e6,
                   memory_time_us(nbytes, host) + reread_us)
    return t, level


def contradictions(df: pd.DataFrame, resolution_us: float = RESOLUTION_US) -> pd.DataFrame:
    """Nodes with a kernel of their own measured below their bound by more than the profiler's resolution."""
    if "attribution" not in df or "latency_us" not in df:
        return df.iloc[:0]
    own = df["attribution"].astype(str).eq("kernel").to_numpy()
    lat, bound = df["latency_us"].to_numpy(float), df["t_roofline_us"].to_numpy(float)
    bad = own & (lat + resolution_us < bound)
    return df.loc[bad, ["node", "op_type", "latency_us", "t_roofline_us", "mem_level"]]


def contradiction_summary(bad: pd.DataFrame) -> dict:
    """merge_meta.json's roofline_contradictions: how many nodes ran below their bound, the 10 furthest below."""
    worst = bad.assign(ratio=bad["latency_us"] / bad["t_roofline_us"]).sort_values("ratio").head(10)
    return {"nodes": len(bad), "resolution_us": RESOLUTION_US, "worst": worst.to_dict("records")}


def peak_per_node(df: pd.DataFrame, peak_table) -> np.ndarray:
    """Peak FLOP/s of each node's element type (a {dtype: peak, default: peak} table, or one number)."""
    if not isinstance(peak_table, dict):
        return np.full(len(df), float(peak_table))
    col = "compute_dtype" if "compute_dtype" in df else "dtype"
    codes, dtypes = pd.factorize(df[col].to_numpy(object), use_na_sentinel=False)   # few distinct, 200k rows
    return np.array([per_dtype(peak_table, d) for d in dtypes], dtype=float)[codes]


def roofline_time_us(flops, nbytes, peak, bw) -> np.ndarray:
    """max(FLOPs / peak, bytes / bandwidth) in microseconds; NaN where FLOPs or bytes are unknown."""
    return device_time(flops, nbytes, peak, float(bw), scale=1e6)


def known_or_zero(t) -> tuple[np.ndarray, int]:
    """Times with unknown entries counted as 0, and how many were unknown (the policy above)."""
    t = np.asarray(t, dtype=float)
    unknown = np.isnan(t)
    return np.where(unknown, 0.0, t), int(unknown.sum())


def merge(metrics: pd.DataFrame, latency: pd.DataFrame | None) -> pd.DataFrame:
    if latency is None:
        df = metrics.copy()
        for c in LATENCY_COLUMNS:
            df[c] = np.nan if c not in ("attribution", "fused_into") else ""
        return df
    return metrics.merge(latency[["node"] + LATENCY_COLUMNS], on="node", how="left", validate="one_to_one")


def roofline(df: pd.DataFrame, host: dict) -> pd.DataFrame:
    df = df.copy()
    peak = peak_per_node(df, host["peak_flops_per_s"])
    total_bytes = pd.Series(kernel_node_bytes(df), index=df.index)
    level, _ = memory_level(total_bytes, host)
    flops = df["flops"].astype(float)
    df["ai_flop_per_byte"] = np.where(total_bytes > 0, flops / total_bytes.replace(0, np.nan), np.nan)
    df["t_compute_us"] = flops / peak * 1e6
    first_out = df.get("out_shapes", pd.Series("", index=df.index)).fillna("").astype(str).str.split(";").str[0]
    df["t_mem_us"] = memory_time_us(total_bytes.to_numpy(float), host) + \
        recurrent_reread_us(df["op_type"].to_numpy(object), first_out.to_numpy(object), host)
    df["mem_level"] = level
    df["t_roofline_us"] = np.maximum(df["t_compute_us"], df["t_mem_us"])     # NaN when either is unknown
    df["bound"] = np.where(df["t_compute_us"].isna() | df["t_mem_us"].isna(), "unknown",
                           np.where(df["t_compute_us"] > df["t_mem_us"], "compute", "memory"))
    lat = df["latency_us"].astype(float)
    ran = lat > 0
    df["achieved_gflops"] = np.where(ran, flops / (lat * 1e3), np.nan)
    df["achieved_gbps"] = np.where(ran, total_bytes / (lat * 1e3), np.nan)
    total = lat.sum()
    df["pct_latency"] = 100.0 * lat / total if total > 0 else np.nan
    return df
