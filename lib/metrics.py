"""Per-node FLOPs, MACs and bytes (stage 02's table) from the indexed graph."""
from __future__ import annotations

import numpy as np
import pandas as pd

from .graph import Graph, constant_tensors, dtype_name, shape_tensors
from .op_costs import SHAPE_OPS, node_cost, op_class

METRIC_COLUMNS = ["node", "op_type", "topo_idx", "flops", "macs", "act_in_bytes", "act_out_bytes",
                  "weight_bytes", "dtype", "out_shapes", "cost_known", "shape_op", "op_class", "mac_dtype"]


def _bytes(g: Graph, names) -> tuple[int, bool]:
    """Sum of tensor bytes and whether every size was known."""
    total, known = 0, True
    for t in names:
        if not t:
            continue
        info = g.tensors.get(t)
        b = None if info is None else info.nbytes
        if b is None:
            known = False
        else:
            total += b
    return total, known


def _mac_dtype(n, g: Graph) -> str:
    idx = 3 if n.op_type in ("QLinearConv", "QLinearMatMul", "QGemm") else 1
    t = g.tensors.get(n.input[idx]) if len(n.input) > idx else None
    return dtype_name(t.elem_type) if t is not None else "unknown"


def stored_bytes(g: Graph, consts: set[str]) -> tuple[dict[str, int], set[int]]:
    """Bytes each constant tensor costs in the file: its own for initializers and Constant outputs; for a
    tensor computed from constants alone (a weight behind DequantizeLinear, Identity, Reshape ...) the bytes
    of what it was computed from. Also the positions of those constant-folding nodes: they do not run at
    inference (ORT folds them, or fuses DequantizeLinear into the integer kernel)."""
    stored = {t: (g.tensors[t].nbytes or 0) if t in g.tensors else 0 for t in g.initializers}
    folded = set()
    for pos, n in enumerate(g.nodes):
        outs = [o for o in n.output if o]
        if not outs or outs[0] not in consts:
            continue
        if n.op_type == "Constant":
            stored[outs[0]] = g.tensors[outs[0]].nbytes or 0 if outs[0] in g.tensors else 0
            continue
        folded.add(pos)
        stored[outs[0]] = sum(stored.get(t, 0) for t in n.input if t)
    return stored, folded


def node_metrics(g: Graph) -> pd.DataFrame:
    consts = constant_tensors(g)
    shapes_ = shape_tensors(g, consts)
    stored, folded = stored_bytes(g, consts)
    rows = []
    for pos, n in enumerate(g.nodes):
        cost = node_cost(n, g)
        acts = [t for t in n.input if t and t not in consts]
        act_in, in_ok = _bytes(g, acts)
        # weights count what they cost in the file, once, at the node that uses them for real
        w_bytes, w_ok = (0, True) if pos in folded else (sum(stored.get(t, 0) for t in n.input if t and t in consts), True)
        outs = [t for t in n.output if t]
        act_out, out_ok = _bytes(g, outs) if pos not in folded else (0, True)
        main = g.tensors.get(outs[0]) if outs else None
        if n.op_type in ("QuantizeLinear", "Cast") or main is None:
            first_in = g.tensors.get(n.input[0]) if n.input else None
            main = first_in or main
        shapes = ";".join("x".join(str(d) for d in (g.tensors[t].shape or [])) if t in g.tensors and
                          g.tensors[t].shape is not None else "?" for t in outs)
        rows.append({
            "node": g.names[pos],
            "op_type": n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}:{n.op_type}",
            "topo_idx": pos,
            "flops": np.nan if cost is None else cost[0],
            "macs": np.nan if cost is None else cost[1],
            "act_in_bytes": act_in if in_ok else np.nan,
            "act_out_bytes": act_out if out_ok else np.nan,
            "weight_bytes": w_bytes if w_ok else np.nan,
            "dtype": dtype_name(main.elem_type) if main is not None else "unknown",
            "out_shapes": shapes,
            "cost_known": cost is not None,
            "shape_op": n.op_type in SHAPE_OPS or bool(outs) and all(o in shapes_ for o in outs),
            "op_class": op_class(n, g),
            # integer MACs stay MACs: the element type they are done in (the weight operand's)
            "mac_dtype": _mac_dtype(n, g) if cost is not None and cost[1] > 0 else "",
        })
    return pd.DataFrame(rows, columns=METRIC_COLUMNS)


def summarize(df: pd.DataFrame) -> dict:
    mac_ops = df["macs"] > 0          # Conv/Gemm/MatMul/Einsum and their integer and quantized forms
    unknown = df.loc[~df["cost_known"], "op_type"]
    return {
        "nodes": int(len(df)),
        "total_macs": float(df["macs"].sum()),
        "total_flops": float(df["flops"].sum()),
        "conv_gemm_matmul_macs": float(df.loc[mac_ops, "macs"].sum()),
        "weight_bytes": float(df["weight_bytes"].sum()),
        "act_out_bytes": float(df["act_out_bytes"].sum()),
        "unknown_cost_nodes": int(len(unknown)),
        "unknown_cost_ops": dict(unknown.value_counts().sort_index()),
        "op_counts": dict(df["op_type"].value_counts().sort_index()),
    }
