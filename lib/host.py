"""The host model (configs/host.yaml): peak FLOP/s per element type, memory bandwidth, power, energy/op."""
from __future__ import annotations

from pathlib import Path

from lib.artifacts import load_yaml
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
    for k, v in list(peaks.items()) + [("mem_bw_bytes_per_s", h["mem_bw_bytes_per_s"]), ("avg_power_w", h["avg_power_w"])]:
        if not isinstance(v, (int, float)) or v <= 0:
            raise StageError(f"host config {path}: {k} must be a positive number, got {v!r}")
    e = h["energy"]
    if not isinstance(e, dict) or "e_byte_j" not in e or "e_flop_j" not in e:
        raise StageError(f"host config {path}: energy needs e_flop_j (per dtype, with 'default') and e_byte_j")
    if not isinstance(e["e_flop_j"], dict) or "default" not in e["e_flop_j"]:
        raise StageError(f"host config {path}: energy.e_flop_j needs a 'default' entry")
    return h


def per_dtype(table: dict, dtype: str) -> float:
    """The table's figure for a compute dtype; a uint8 kernel (ORT's u8u8) takes the int8 one where the table has
    no uint8 of its own, any other missing dtype the default."""
    if dtype == "uint8" and dtype not in table and "int8" in table:
        dtype = "int8"
    return float(table.get(dtype, table["default"]))
