"""What stage 07 adds past the boundary sweep: the DAG optimum (lib/split/dag.py) into split_summary.json and
dag_partition.json (the node sets stage 08 exports)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from lib.artifacts import write_json
from lib.onnx.graph import GraphArrays
from lib.split.dag import dag_optima
from lib.split.ranking import device_times


def beyond_boundaries(df, prof, latency, system: dict, a: GraphArrays, base: dict, rdir: Path, ident: dict) -> dict:
    """The DAG optima (latency, energy), written to dag_partition.json; returns split_summary.json's entries."""
    ta, tb = (device_times(prof, latency, system["devices"][k]) for k in ("A", "B"))
    summ, parts = dag_optima(a, np.asarray(ta, float), np.asarray(tb, float), system, df, base)
    write_json({**ident, "partitions": parts}, rdir / "dag_partition.json", indent=None)
    return summ


def dag_line(d: dict | None) -> str:
    """07's line on the DAG optimum."""
    if d is None:
        return "DAG optimum: none (fewer than two nodes)"
    g = d["gain_vs_best_boundary"]
    return (f"DAG optimum (min cut): {d['est_latency_us'] / 1e3:.3f} ms, {d['n_left']} nodes on A, {d['n_cut_tensors']} "
            f"cut tensors ({d['comm_bytes'] / 1024:.1f} KiB), {'a prefix (b%d)' % d['prefix_boundary'] if d['is_prefix'] else 'not a prefix'}; "
            f"vs best boundary b{g['boundary']} {g['est_latency_us'] / 1e3:.3f} ms (x{g['ratio'] or 0:.3f}), "
            f"vs all on A x{d['gain_vs_all_on_a']['ratio'] or 0:.3f}, vs all on B x{d['gain_vs_all_on_b']['ratio'] or 0:.3f}")
