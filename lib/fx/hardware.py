"""Stage 09, part 3: hardware profiles (configs/hardware/*.yaml) and the mapping of fused subgraphs onto them.

Per subgraph on a profile: its threads (output elements, times the batch) fill `lanes_per_unit` lanes on
each of `compute_units` units in waves; utilization = threads / (waves x units x lanes) counts the idle lanes
of the last wave and of units it cannot occupy. Latency = max(FLOPs / (peak x utilization), bytes / bandwidth)
+ a per-kernel overhead; energy = FLOPs x e_flop + bytes x e_byte + static power x latency.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from lib.analysis.device_time import device_terms, with_overhead
from lib.artifacts import CONFIGS, REPO, load_yaml, number
from lib.errors import StageError

REQUIRED = ("name", "kind", "peak_flops_per_s", "mem_bw_bytes_per_s", "compute_units", "lanes_per_unit",
            "energy", "static_power_w", "sources")
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def load_profiles(folder: str | Path = CONFIGS / "hardware") -> dict[str, dict]:
    out = {}
    paths = sorted(Path(folder).glob("*.yaml"))
    if not paths:
        raise StageError(f"no hardware profiles (*.yaml) in {folder}")
    for path in paths:
        p = load_yaml(path, "hardware profile")
        if "from_host" in p:
            h = load_yaml(REPO / p["from_host"], "host config")
            p.setdefault("peak_flops_per_s", {"fp32": h["peak_flops_per_s"].get("float", h["peak_flops_per_s"]["default"])})
            p.setdefault("mem_bw_bytes_per_s", h["mem_bw_bytes_per_s"])
        missing = [k for k in REQUIRED if k not in p]
        if missing:
            raise StageError(f"hardware profile {path} lacks {missing}")
        prec = p.get("run_precision", "fp32")
        if not isinstance(p["peak_flops_per_s"], dict) or not isinstance(p["energy"], dict) \
                or not isinstance(p["energy"].get("e_flop_j"), dict):
            raise StageError(f"hardware profile {path}: peak_flops_per_s and energy.e_flop_j map precisions to "
                             f"numbers ({{fp32: 1.4e+12}})")
        if prec not in p["peak_flops_per_s"] or prec not in p["energy"]["e_flop_j"]:
            raise StageError(f"hardware profile {path}: run_precision {prec} has no peak or e_flop entry")
        _check_numbers(p, f"hardware profile {path}")     # '100 GB/s' and compute_units 0 were tracebacks
        out[path.stem] = p
    return out


def _check_numbers(p: dict, where: str) -> None:
    """The profile's figures, in place: rates and sizes > 0, counts whole, energies and overheads >= 0."""
    for dt, v in p["peak_flops_per_s"].items():
        p["peak_flops_per_s"][dt] = number(v, f"{where}: peak_flops_per_s.{dt}")
    p["mem_bw_bytes_per_s"] = number(p["mem_bw_bytes_per_s"], f"{where}: mem_bw_bytes_per_s")
    for k in ("compute_units", "lanes_per_unit"):
        p[k] = number(p[k], f"{where}: {k}", integer=True)
    for dt, v in p["energy"]["e_flop_j"].items():
        p["energy"]["e_flop_j"][dt] = number(v, f"{where}: energy.e_flop_j.{dt}", zero=True)
    p["energy"]["e_byte_j"] = number(p["energy"].get("e_byte_j"), f"{where}: energy.e_byte_j", zero=True)
    for k in ("static_power_w", "kernel_overhead_us"):
        p[k] = number(p.get(k, 0.0), f"{where}: {k}", zero=True)


def map_subgraphs(sg: pd.DataFrame, prof: dict, batch: int = 1) -> pd.DataFrame:
    """Per-subgraph occupancy, utilization, latency and energy on one profile at a batch size.
    sg holds batch-1 figures: FLOPs, threads and activation bytes scale with the batch, weights do not."""
    prec = prof.get("run_precision", "fp32")
    peak = float(prof["peak_flops_per_s"][prec])
    bw = float(prof["mem_bw_bytes_per_s"])
    units, lanes = int(prof["compute_units"]), int(prof["lanes_per_unit"])
    threads = sg["threads"].to_numpy(float) * batch
    waves = np.maximum(1, np.ceil(threads / (units * lanes)))
    used = np.minimum(units, np.ceil(threads / lanes))
    # no output tensor seen (threads 0): no occupancy to count, the peak (1e-9 made a 16x16 Linear take 3.9 s)
    util = np.where(threads > 0, np.clip(threads / (waves * units * lanes), 1e-9, 1.0), 1.0)
    flops = sg["flops"].fillna(0.0).to_numpy(float) * batch
    act = (sg["bytes_after"] - sg["weight_bytes"]).to_numpy(float) * batch
    nbytes = act + sg["weight_bytes"].to_numpy(float)
    t_compute, t_mem = device_terms(flops, nbytes, peak, bw, e=util)
    launch = float(prof.get("kernel_overhead_us", 0.0)) * 1e-6 * (sg["kernel"].to_numpy(float) if "kernel" in sg else 1.0)
    lat = with_overhead(t_compute, t_mem, launch)      # the roofline, in s; a view launches nothing
    e = prof["energy"]
    e_c, e_m = flops * float(e["e_flop_j"][prec]), nbytes * float(e["e_byte_j"])
    e_s = float(prof["static_power_w"]) * lat
    return pd.DataFrame({"subgraph": sg["subgraph"], "units_used": used.astype(int), "waves": waves.astype(int),
                         "occupancy": used / units, "utilization": util, "bound": np.where(t_compute >= t_mem, "compute", "memory"),
                         "latency_us": lat * 1e6, "e_compute_j": e_c, "e_mem_j": e_m, "e_static_j": e_s})


def model_on(sg: pd.DataFrame, prof: dict, batch: int) -> dict:
    m = map_subgraphs(sg, prof, batch)
    lat = float(m["latency_us"].sum())
    flops = float(sg["flops"].fillna(0).sum()) * batch
    weights = lambda col: float((m[col] * m["latency_us"]).sum() / lat) if lat else math.nan  # noqa: E731
    return {"batch": batch, "latency_us": lat, "throughput_per_s": batch / lat * 1e6,
            "energy_per_inference_j": float(m[["e_compute_j", "e_mem_j", "e_static_j"]].sum().sum()) / batch,
            "e_compute_j": float(m["e_compute_j"].sum()) / batch, "e_mem_j": float(m["e_mem_j"].sum()) / batch,
            "e_static_j": float(m["e_static_j"].sum()) / batch, "utilization": weights("utilization"),
            "occupancy": weights("occupancy"), "achieved_flops_per_s": flops / lat * 1e6 if lat else math.nan,
            "memory_bound_share": float(m.loc[m["bound"] == "memory", "latency_us"].sum() / lat) if lat else math.nan}


def hardware_table(sg: pd.DataFrame, profiles: dict[str, dict]) -> pd.DataFrame:
    """Per profile: batch 1, and the smallest batch reaching 90% of the best throughput of the sweep."""
    rows = []
    for key, prof in profiles.items():
        sweep = [model_on(sg, prof, b) for b in BATCHES]
        best = max(s["throughput_per_s"] for s in sweep)
        sat = next(s for s in sweep if s["throughput_per_s"] >= 0.9 * best)
        for label, s in (("batch1", sweep[0]), ("saturating", sat)):
            rows.append({"hardware": key, "name": prof["name"], "kind": prof["kind"], "point": label,
                         "precision": prof.get("run_precision", "fp32"), **s})
    return pd.DataFrame(rows)
