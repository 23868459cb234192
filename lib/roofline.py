"""Stage 03's join of measured latency (01) and costs (02), with a per-node roofline against the host."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .host import per_dtype

LATENCY_COLUMNS = ["latency_us", "p10_us", "p90_us", "runs", "attribution", "fused_into"]


def merge(metrics: pd.DataFrame, latency: pd.DataFrame | None) -> pd.DataFrame:
    if latency is None:
        df = metrics.copy()
        for c in LATENCY_COLUMNS:
            df[c] = np.nan if c not in ("attribution", "fused_into") else ""
        return df
    lat = latency[["node"] + LATENCY_COLUMNS]
    df = metrics.merge(lat, on="node", how="left", validate="one_to_one")
    return df


def roofline(df: pd.DataFrame, host: dict) -> pd.DataFrame:
    df = df.copy()
    peak = np.array([per_dtype(host["peak_flops_per_s"], d) for d in df["dtype"]])
    bw = float(host["mem_bw_bytes_per_s"])
    total_bytes = df[["act_in_bytes", "act_out_bytes", "weight_bytes"]].sum(axis=1, min_count=3)
    flops = df["flops"].astype(float)
    df["ai_flop_per_byte"] = np.where(total_bytes > 0, flops / total_bytes.replace(0, np.nan), np.nan)
    df["t_compute_us"] = flops / peak * 1e6
    df["t_mem_us"] = total_bytes / bw * 1e6
    df["t_roofline_us"] = df[["t_compute_us", "t_mem_us"]].max(axis=1, skipna=False)
    df["bound"] = np.where(df["t_compute_us"].isna() | df["t_mem_us"].isna(), "unknown",
                           np.where(df["t_compute_us"] > df["t_mem_us"], "compute", "memory"))
    lat = df["latency_us"].astype(float)
    ran = lat > 0
    df["achieved_gflops"] = np.where(ran, flops / (lat * 1e3), np.nan)
    df["achieved_gbps"] = np.where(ran, total_bytes / (lat * 1e3), np.nan)
    total = lat.sum()
    df["pct_latency"] = 100.0 * lat / total if total > 0 else np.nan
    return df
