"""The two-device split system (configs/system.yaml): devices A and B, the link, constraints, ranking."""
from __future__ import annotations

from pathlib import Path

from lib.artifacts import REPO, load_yaml
from lib.errors import StageError


def load_system(path: str | Path) -> dict:
    s = load_yaml(path, "system config")
    for d in ("A", "B"):
        dev = (s.get("devices") or {}).get(d)
        if not isinstance(dev, dict):
            raise StageError(f"system config {path}: devices.{d} is missing")
        for k in ("peak_flops_per_s", "mem_bw_bytes_per_s", "power_w"):
            v = dev.get(k)
            if not isinstance(v, (int, float)) or v <= 0:
                raise StageError(f"system config {path}: devices.{d}.{k} must be a positive number, got {v!r}")
        if dev.get("source", "roofline") not in ("measured", "roofline", "model"):
            raise StageError(f"system config {path}: devices.{d}.source must be measured, or model (roofline)")
        lm = dev.get("latency_model")
        if lm is not None and not (Path(lm) if Path(lm).is_absolute() else REPO / lm).exists():
            raise StageError(f"system config {path}: devices.{d}.latency_model {lm} not found (make calibrate "
                             f"writes configs/latency_model.yaml)")
    link = s.get("link")
    if not isinstance(link, dict):
        raise StageError(f"system config {path}: link is missing")
    for k in ("bandwidth_bytes_per_s", "latency_us", "energy_per_byte_j"):
        v = link.get(k)
        if not isinstance(v, (int, float)) or v < 0 or (k == "bandwidth_bytes_per_s" and v == 0):
            raise StageError(f"system config {path}: link.{k} must be a non-negative number, got {v!r}")
    return s
