"""The one device-time formula: t = overhead + max(F / (P e), B / (W m)).

F FLOPs and B bytes of a node (or a fused subgraph), P the device's peak FLOP/s and W its bandwidth, e and m the
compute and memory efficiencies (1 and 1: the plain roofline), overhead a fixed cost per kernel. Used by the
roofline (lib/analysis/roofline.py), the split model (lib/split/ranking.py), the FX hardware mapping
(lib/fx/hardware.py) and the latency model (lib/latency/latency_model.py). `scale` multiplies both terms
(1e6: microseconds from per-second figures): max commutes exactly with a positive scale, so the figures do not
depend on where a caller converts units. NaN F or B gives NaN (callers choose how to count unknowns).
"""
from __future__ import annotations

import numpy as np


def device_terms(flops, nbytes, peak, bw, e=1.0, m=1.0, scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(compute time F / (P e), memory time B / (W m)), each times `scale`."""
    flops = np.asarray(flops, dtype=float)
    nbytes = np.asarray(nbytes, dtype=float)
    return flops / (np.asarray(peak, dtype=float) * e) * scale, nbytes / (np.asarray(bw, dtype=float) * m) * scale


def with_overhead(t_compute, t_memory, overhead=0.0) -> np.ndarray:
    """overhead + max(compute time, memory time): the formula on its two terms (callers that scale them first)."""
    return overhead + np.maximum(t_compute, t_memory)


def device_time(flops, nbytes, peak, bw, e=1.0, m=1.0, overhead=0.0, scale: float = 1.0) -> np.ndarray:
    """overhead + max(F / (P e), B / (W m)) x scale, elementwise."""
    return with_overhead(*device_terms(flops, nbytes, peak, bw, e, m, scale), overhead)
