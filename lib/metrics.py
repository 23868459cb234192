"""Per-node FLOPs, MACs and bytes (stage 02's table) from the indexed graph."""
from __future__ import annotations

import ast

import numpy as np
import pandas as pd

from .control_flow import cost_note
from .graph import CONTROL_FLOW, Graph, constant_tensors, dtype_name, shape_tensors
from .op_costs import SHAPE_OPS, lookup, node_cost, op_class, op_key

METRIC_COLUMNS = ["node", "op_type", "topo_idx", "flops", "macs", "act_in_bytes", "act_out_bytes",
                  "weight_bytes", "dtype", "out_shapes", "cost_known", "shape_op", "op_class", "mac_dtype",
                  "shape_source", "cost_note", "layer"]


def _bytes(g: Graph, names) -> int | None:
    """Sum of tensor bytes, None when a size is unknown."""
    total = 0
    for t in names:
        info = g.tensors.get(t)
        b = None if info is None else info.nbytes
        if b is None:
            return None
        total += b
    return total


def _mac_dtype(n, g: Graph) -> str:
    op = lookup(n)
    idx = op.weight_input if op is not None and op.weight_input is not None else 1
    t = g.tensors.get(n.input[idx]) if len(n.input) > idx else None
    return dtype_name(t.elem_type) if t is not None else "unknown"


def layer_name(node) -> str:
    """The model layer a node came from: the innermost module of the dynamo exporter's name scopes, or the
    path of a TorchScript export's '/layer1/layer1.0/conv1/Conv' name."""
    for p in node.metadata_props:
        if p.key == "pkg.torch.onnx.name_scopes":
            try:
                scopes = [s for s in ast.literal_eval(p.value) if s]
            except (ValueError, SyntaxError):
                break
            return scopes[-2] if len(scopes) >= 2 else (scopes[0] if scopes else "")
    if node.name.startswith("/") and node.name.count("/") >= 2:
        return node.name.rsplit("/", 1)[0].rsplit("/", 1)[-1]
    return ""


def stored_bytes(g: Graph, consts: set[str]) -> tuple[dict[str, int], set[int]]:
    """Bytes each constant tensor costs: its own for initializers and Constant outputs; for a tensor computed
    from constants alone the bytes it has when its consuming node reads it, except behind the no-op chains
    of quantized weights (DequantizeLinear, Identity, Cast, Reshape ... whose inputs are stored weights),
    which count as stored. Also the positions of those constant-folding nodes: they do not run at inference
    (ORT folds them, or fuses DequantizeLinear into the integer kernel)."""
    stored = {t: (g.tensors[t].nbytes or 0) if t in g.tensors else 0 for t in g.initializers}
    folded = set()
    for pos, n in enumerate(g.nodes):
        outs = [o for o in n.output if o]
        if not outs or outs[0] not in consts:
            continue
        if n.op_type == "Constant":
            info = g.tensors.get(outs[0])
            stored[outs[0]] = (info.nbytes or 0) if info is not None else 0
            continue
        folded.add(pos)
        if n.op_type in STORED_CHAIN:
            stored[outs[0]] = sum(stored.get(t, 0) for t in n.input if t)
        else:   # computed at load time (ConstantOfShape, Expand, Tile, arithmetic): the size it is read at
            for o in outs:
                info = g.tensors.get(o)
                stored[o] = (info.nbytes or 0) if info is not None else 0
    return stored, folded


STORED_CHAIN = {"DequantizeLinear", "Identity", "Cast", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten",
                "QuantizeLinear"}


def node_metrics(g: Graph) -> pd.DataFrame:
    consts = constant_tensors(g)
    shp = shape_tensors(g, consts)
    stored, folded = stored_bytes(g, consts)
    cols: dict[str, list] = {c: [] for c in METRIC_COLUMNS}
    for pos, n in enumerate(g.nodes):
        cost = node_cost(n, g)
        outs = [t for t in n.output if t]
        if pos in folded:
            act_in, act_out, w = 0, 0, 0
        else:
            act_in = _bytes(g, [t for t in list(n.input) + g.implicit.get(pos, []) if t and t not in consts])
            act_out = _bytes(g, outs)
            w = sum(stored.get(t, 0) for t in n.input if t and t in consts)
        main = g.tensors.get(outs[0]) if outs else None
        if n.op_type in ("QuantizeLinear", "Cast") or main is None:
            main = (g.tensors.get(n.input[0]) if n.input else None) or main
        infos = [g.tensors.get(t) for t in outs]
        cols["node"].append(g.names[pos])
        cols["op_type"].append(op_key(n))
        cols["topo_idx"].append(pos)
        cols["flops"].append(np.nan if cost is None else cost[0])
        cols["macs"].append(np.nan if cost is None else cost[1])
        cols["act_in_bytes"].append(np.nan if act_in is None else act_in)
        cols["act_out_bytes"].append(np.nan if act_out is None else act_out)
        cols["weight_bytes"].append(w)
        cols["dtype"].append(dtype_name(main.elem_type) if main is not None else "unknown")
        cols["out_shapes"].append(";".join("x".join(map(str, i.shape)) if i is not None and i.shape is not None
                                           else "?" for i in infos))
        cols["cost_known"].append(cost is not None)
        cols["shape_op"].append(n.op_type in SHAPE_OPS or bool(outs) and all(o in shp for o in outs))
        cols["op_class"].append(op_class(n, g))
        # integer MACs stay MACs: the element type they are done in (the weight operand's)
        cols["mac_dtype"].append(_mac_dtype(n, g) if cost is not None and cost[1] > 0 else "")
        cols["shape_source"].append(_source(g, outs, consts))
        cols["cost_note"].append(cost_note(n, g) if n.op_type in CONTROL_FLOW else "")
        cols["layer"].append(layer_name(n))
    return pd.DataFrame(cols, columns=METRIC_COLUMNS)


def _source(g: Graph, outs: list[str], consts: set[str]) -> str:
    """Where the node's output shapes came from: the least direct method any output needed."""
    order = ("executed", "values", "ort", "onnx")
    if not outs:
        return ""
    if all(o in consts for o in outs):
        return "constant"
    seen = {g.shape_source.get(o, "unknown" if g.tensors.get(o) is None or g.tensors[o].shape is None else "onnx")
            for o in outs}
    if "unknown" in seen:
        return "unknown"
    return next(s for s in order if s in seen)


def summarize(df: pd.DataFrame) -> dict:
    mac_ops = df["macs"] > 0          # Conv/Gemm/MatMul/Einsum/recurrent and their integer and quantized forms
    unknown = df.loc[~df["cost_known"], "op_type"]
    return {
        "nodes": int(len(df)),
        "total_macs": float(df["macs"].sum()),
        "total_flops": float(df["flops"].sum()),
        "conv_gemm_matmul_macs": float(df.loc[mac_ops, "macs"].sum()),
        "weight_bytes": float(df["weight_bytes"].sum()),
        "act_out_bytes": float(df["act_out_bytes"].sum()),
        "unknown_cost_nodes": int(len(unknown)),
        "unknown_cost_ops": {str(k): int(v) for k, v in unknown.value_counts().sort_index().items()},
        "unknown_size_nodes": int(df[["act_in_bytes", "act_out_bytes"]].isna().any(axis=1).sum()),
        "upper_bound_nodes": int(df["cost_note"].str.startswith("upper bound").sum()),
        "shape_source": {str(k): int(v) for k, v in df["shape_source"].value_counts().sort_index().items()},
        "op_counts": {str(k): int(v) for k, v in df["op_type"].value_counts().sort_index().items()},
    }
