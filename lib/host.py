"""The host model (configs/host.yaml): peak FLOP/s per element type, memory bandwidth, power, energy/op."""
from __future__ import annotations

import json
from pathlib import Path

from lib.artifacts import load_yaml, number
from lib.errors import StageError

REQUIRED = ("peak_flops_per_s", "mem_bw_bytes_per_s", "avg_power_w", "energy")


def load_host(path: str | Path) -> dict:
    h = load_yaml(path, "host config")
    missing = [k for k in REQUIRED if k not in h]
    if missing:
        raise StageError(f"host config {path} lacks {missing}")
    peaks = h["peak_flops_per_s"]
    if not isinstance(peaks, dict) or "default" not in peaks:
        raise StageError(f"host config {path}: peak_flops_per_s needs a 'default' entry (and optional per-dtype ones)")
    where = f"host config {path}:"
    for k, v in peaks.items():
        peaks[k] = number(v, f"{where} peak_flops_per_s.{k}")
    for k in ("mem_bw_bytes_per_s", "avg_power_w"):
        h[k] = number(h[k], f"{where} {k}")
    for section in ("caches_bytes", "bandwidth_bytes_per_s", "fma_ceiling_flops_per_s"):
        table = h.get(section)
        if table is None:
            continue
        if not isinstance(table, dict):
            raise StageError(f"{where} {section} must map names to numbers, got {table!r}")
        for k, v in table.items():     # an FMA ceiling the CPU does not tell stays null
            table[k] = None if v is None and section.startswith("fma") else \
                number(v, f"{where} {section}.{k}", integer=section == "caches_bytes")
    e = h["energy"]
    if not isinstance(e, dict) or "e_byte_j" not in e or "e_flop_j" not in e:
        raise StageError(f"{where} energy needs e_flop_j (per dtype, with 'default') and e_byte_j")
    if not isinstance(e["e_flop_j"], dict) or "default" not in e["e_flop_j"]:
        raise StageError(f"{where} energy.e_flop_j needs a 'default' entry")
    e["e_byte_j"] = number(e["e_byte_j"], f"{where} energy.e_byte_j", zero=True)
    for k, v in e["e_flop_j"].items():
        e["e_flop_j"][k] = number(v, f"{where} energy.e_flop_j.{k}", zero=True)
    return h


def per_dtype(table: dict, dtype: str) -> float:
    """The table's figure for a compute dtype; a uint8 kernel (ORT's u8u8) takes the int8 one where the table has
    no uint8 of its own, any other missing dtype the default."""
    if dtype == "uint8" and dtype not in table and "int8" in table:
        dtype = "int8"
    return float(table.get(dtype, table["default"]))


def same_host(host: dict, path, merge_meta: dict) -> None:
    """StageError unless the host config holds the figures 03 used (merge_meta.json's `host`): 05 or 06 run by hand
    after configs/host.yaml was edited gave a page whose energy was computed at 50 pJ/FLOP and shown at 20."""
    used = merge_meta.get("host")
    if used is not None and json.loads(json.dumps(host, default=str)) != used:
        raise StageError(f"host config {path} is not the one 03 used ({merge_meta.get('host_config', '?')} as it was "
                         f"then): re-run 03_merge_profile_metrics.py --host {path} first (make all does)")
