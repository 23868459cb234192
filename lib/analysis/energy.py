"""Energy attribution (power model: assumed P_avg x measured latency; component model: FLOPs and bytes x
energy per op), offload kernel candidates, Amdahl speed-ups."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from lib.artifacts import load_yaml
from lib.errors import StageError
from lib.host import per_dtype
from lib.analysis.roofline import known_or_zero, node_bytes


def load_offload(path: str | Path) -> dict:
    c = load_yaml(path, "offload config")
    for key in ("criteria", "speedup", "energy_gain"):
        if not isinstance(c.get(key), dict):
            raise StageError(f"offload config {path} lacks the '{key}' mapping")
    for key in ("speedup", "energy_gain"):
        for k, v in c[key].items():
            if not isinstance(v, (int, float)) or v <= 0:
                raise StageError(f"offload config {path}: {key}.{k} must be a positive number, got {v!r}")
    return c


def amdahl(f: float, s: float) -> float:
    """S_total = 1 / ((1 - f) + f / S_k)."""
    return 1.0 / ((1.0 - f) + f / s)


def amdahl_multi(fs: list[float], ss: list[float]) -> float:
    """Several kernels accelerated at once: 1 / ((1 - sum f_i) + sum f_i / S_i)."""
    return 1.0 / ((1.0 - sum(fs)) + sum(f / s for f, s in zip(fs, ss)))


def node_energy(prof: pd.DataFrame, host: dict, avg_power_w: float) -> pd.DataFrame:
    e_byte = float(host["energy"]["e_byte_j"])
    e_flop = np.array([per_dtype(host["energy"]["e_flop_j"], d) for d in prof["dtype"]])
    nbytes, _ = known_or_zero(node_bytes(prof))      # the one bytes policy (lib/analysis/roofline.py)
    df = prof[["node", "op_type", "op_class", "layer", "dtype", "flops", "latency_us", "attribution", "fused_into"]].copy()
    df["bytes"] = nbytes
    df["e_power_j"] = avg_power_w * prof["latency_us"] * 1e-6     # P_avg x the node's time
    df["e_compute_j"] = prof["flops"].fillna(0.0) * e_flop
    df["e_mem_j"] = nbytes * e_byte
    df["e_total_j"] = df["e_compute_j"] + df["e_mem_j"]
    tot = df["e_total_j"].sum()
    df["pct_energy"] = 100.0 * df["e_total_j"] / tot if tot > 0 else np.nan
    return df


def kernel_table(energy: pd.DataFrame, prof: pd.DataFrame, succ_classes: list[list[str]], crit: dict) -> pd.DataFrame:
    """One row per op class with the seed's four criteria evaluated and the reason spelled out."""
    lat = prof["latency_us"].fillna(0.0)
    lat_total = lat.sum()
    e_total = energy["e_total_j"].sum()
    fusable = set(crit.get("fusable_classes", []))
    regular = set(crit.get("regular_classes", []))
    require = set(crit.get("require", ["share", "regular", "ai"]))
    min_share, min_ai = float(crit.get("min_share_pct", 10)), float(crit.get("min_ai_flop_per_byte", 0))
    fused_count = prof.loc[prof["fused_into"].fillna("") != "", "fused_into"].value_counts()
    rows = []
    for cls, idx in prof.groupby("op_class").groups.items():
        idx = list(idx)
        flops, nbytes = prof.loc[idx, "flops"].sum(), energy.loc[idx, "bytes"].sum()
        ai = flops / nbytes if nbytes > 0 else 0.0
        share_lat = 100.0 * lat[idx].sum() / lat_total if lat_total > 0 else np.nan
        share_e = 100.0 * energy.loc[idx, "e_total_j"].sum() / e_total if e_total > 0 else np.nan
        fused = int(sum(fused_count.get(n, 0) for n in prof.loc[idx, "node"]))
        neigh = [c for i in idx for c in succ_classes[i] if c in fusable]
        n_fusable = fused + len(neigh)
        by_lat = prof.loc[idx].groupby("bound")["latency_us"].sum()
        bound = by_lat.idxmax() if len(by_lat) and by_lat.max() > 0 else prof.loc[idx, "bound"].mode().iat[0]
        ok = {"share": (share_lat >= min_share) or (share_e >= min_share), "regular": cls in regular,
              "ai": ai >= min_ai, "fusable": n_fusable > 0}
        reason = [f"latency {share_lat:.1f}% / energy {share_e:.1f}% {'>=' if ok['share'] else '<'} {min_share:g}%",
                  f"{'regular' if ok['regular'] else 'irregular'} ({cls})",
                  f"AI {ai:.1f} FLOP/B {'>=' if ok['ai'] else '<'} {min_ai:g}",
                  f"{n_fusable} fusable neighbours" + (f" ({fused} already fused by ORT)" if fused else "")]
        rows.append({"kernel": cls, "ops": len(idx), "pct_latency": share_lat, "pct_energy": share_e,
                     "latency_us": lat[idx].sum(), "e_total_j": energy.loc[idx, "e_total_j"].sum(),
                     "flops": flops, "bytes": nbytes, "ai_flop_per_byte": ai, "bound": bound,
                     "regular": ok["regular"], "fusable_neighbours": n_fusable,
                     "selected": all(ok[r] for r in require), "reason": "; ".join(reason)})
    df = pd.DataFrame(rows).sort_values("pct_latency" if lat_total > 0 else "pct_energy", ascending=False)
    return df.reset_index(drop=True)


def amdahl_table(kernels: pd.DataFrame, speedup: dict, gain: dict, t_total_us: float, e_total_j: float) -> pd.DataFrame:
    def sk(table, cls):
        return float(table.get(cls, table.get("default", 1.0)))

    scenarios = [(k, [k]) for k in kernels["kernel"]]
    chosen = list(kernels.loc[kernels["selected"], "kernel"])
    if len(chosen) > 1:
        scenarios.append(("all selected", chosen))
    rows = []
    for name, ks in scenarios:
        sub = kernels.set_index("kernel").loc[ks]
        fl = list(sub["pct_latency"].fillna(0.0) / 100.0)
        fe = list(sub["pct_energy"].fillna(0.0) / 100.0)
        sl = [sk(speedup, k) for k in ks]
        se = [sk(gain, k) for k in ks]
        s_lat, s_e = amdahl_multi(fl, sl), amdahl_multi(fe, se)
        rows.append({"scenario": name, "kernels": "+".join(ks), "f_latency": sum(fl),
                     "s_k_latency": sl[0] if len(ks) == 1 else np.nan, "s_total_latency": s_lat,
                     "latency_before_us": t_total_us, "latency_after_us": t_total_us / s_lat if t_total_us else np.nan,
                     "f_energy": sum(fe), "s_k_energy": se[0] if len(ks) == 1 else np.nan, "s_total_energy": s_e,
                     "energy_before_j": e_total_j, "energy_after_j": e_total_j / s_e})
    return pd.DataFrame(rows)
