"""The one roofline and the one bytes policy, used by stages 03, 05, 07 and 09.

Bytes of a node = activation bytes in + out + weight bytes; unknown when any part is unknown (a tensor
without a shape). Roofline time = max(FLOPs / peak FLOP/s, bytes / bandwidth): unknown (NaN) when FLOPs or
bytes are. Stages that need a number for every node (a critical path, an energy sum, a split's prefix sums)
count an unknown time as 0 and report how many nodes that was (unknown_time_nodes in their meta).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from lib.analysis.device_time import device_time
from lib.host import per_dtype

BYTE_COLUMNS = ["act_in_bytes", "act_out_bytes", "weight_bytes"]
LATENCY_COLUMNS = ["latency_us", "p10_us", "p90_us", "runs", "attribution", "fused_into"]


def node_bytes(df: pd.DataFrame) -> pd.Series:
    return df[BYTE_COLUMNS].sum(axis=1, min_count=len(BYTE_COLUMNS))


def peak_per_node(df: pd.DataFrame, peak_table) -> np.ndarray:
    """Peak FLOP/s of each node's element type (a {dtype: peak, default: peak} table, or one number)."""
    if not isinstance(peak_table, dict):
        return np.full(len(df), float(peak_table))
    codes, dtypes = pd.factorize(df["dtype"].to_numpy(object), use_na_sentinel=False)   # few distinct, 200k rows
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
    bw = float(host["mem_bw_bytes_per_s"])
    total_bytes = node_bytes(df)
    flops = df["flops"].astype(float)
    df["ai_flop_per_byte"] = np.where(total_bytes > 0, flops / total_bytes.replace(0, np.nan), np.nan)
    df["t_compute_us"] = flops / peak * 1e6
    df["t_mem_us"] = total_bytes / bw * 1e6
    df["t_roofline_us"] = roofline_time_us(flops, total_bytes, peak, bw)
    df["bound"] = np.where(df["t_compute_us"].isna() | df["t_mem_us"].isna(), "unknown",
                           np.where(df["t_compute_us"] > df["t_mem_us"], "compute", "memory"))
    lat = df["latency_us"].astype(float)
    ran = lat > 0
    df["achieved_gflops"] = np.where(ran, flops / (lat * 1e3), np.nan)
    df["achieved_gbps"] = np.where(ran, total_bytes / (lat * 1e3), np.nan)
    total = lat.sum()
    df["pct_latency"] = 100.0 * lat / total if total > 0 else np.nan
    return df
