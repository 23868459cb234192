"""Per-node FLOPs, MACs and bytes (stage 02's table) from the indexed graph."""
from __future__ import annotations

import ast
import re

import numpy as np
import onnx
import pandas as pd

from lib.onnx.control_flow import cost_note
from lib.artifacts import TEXT_COLUMNS
from lib.errors import StageError
from lib.onnx.costs import node_cost
from lib.onnx.graph import CONTROL_FLOW, Graph, constant_tensors, dtype_name, shape_tensors
from lib.onnx.ops import SHAPE_OPS, lookup, names_with, op_key
from lib.onnx.ops_ml import ML_DOMAIN, attribute_bytes, sequence_bytes

METRIC_COLUMNS = ["node", "op_type", "topo_idx", "flops", "macs", "act_in_bytes", "act_out_bytes",
                  "weight_bytes", "dtype", "out_shapes", "cost_known", "bytes_known", "shape_op", "op_class",
                  "mac_dtype", "shape_source", "cost_note", "layer", "compute_dtype"]
TEXT_METRICS = set(METRIC_COLUMNS) & set(TEXT_COLUMNS)      # kept as Python str objects (_frame)


def _mac_dtype(n, g: Graph, op) -> str:
    """The element type of the node's weight operand (op: its registry entry)."""
    idx = op.weight_input if op is not None and op.weight_input is not None else 1
    t = g.tensors.get(n.input[idx]) if len(n.input) > idx else None
    return dtype_name(t.elem_type) if t is not None else "unknown"


INT_MAC_OPS = names_with("int8")            # integer kernels (the registry's flags, lib/onnx/ops.py)
QDQ_FUSED = names_with("qdq_fused")         # ORT runs DequantizeLinear -> these -> QuantizeLinear as integer kernels
INT_TYPES = {"int8", "uint8"}


def dequantized(g: Graph, t: str) -> str | None:
    """The 8-bit integer type ("int8", "uint8") tensor t is a DequantizeLinear's output of, else None."""
    p = g.producer.get(t)
    if p is None or g.op_types[p] != "DequantizeLinear":
        return None
    src = g.tensors.get(g.node_inputs[p][0]) if g.node_inputs[p] else None
    return dtype_name(src.elem_type) if src is not None and dtype_name(src.elem_type) in INT_TYPES else None


def compute_dtype(n, g: Graph, dtype: str, mac_dtype: str) -> str:
    """The element type a node's kernel computes in: for integer MAC ops their weight's 8-bit type (uint8 weights
    run ORT's u8u8 kernels, int8 ones its u8s8 kernels: a ConvInteger measured 7x apart between the two), and the
    same for a Conv/MatMul/Gemm fed by DequantizeLinear of 8-bit tensors that ORT fuses into an integer kernel
    (QLinearConv, QLinearMatMul: the output goes to QuantizeLinear only; MatMulIntegerToFloat for a MatMul): its
    second input's type (a resnet18 QDQ export ran 1.15-1.6x slower with uint8 weights than with int8 ones);
    else the node's element type (float16 where it is an fp16 node). For a Conv/Gemm that is a guess on the fast
    side (the roofline stays a bound): ORT leaves some in float (resnet18 from quantize_static: 14 of 20 convs,
    whose biases the TorchScript exporter shared through Identity nodes); the prediction takes the type from the
    kernel ORT runs (lib/latency/kernels.py, runs_in)."""
    if n.op_type in INT_MAC_OPS or mac_dtype in INT_TYPES:
        return mac_dtype if mac_dtype in INT_TYPES else "int8"
    types = [dequantized(g, t) for t in n.input[:2]] if n.op_type in QDQ_FUSED and len(n.input) >= 2 else [None]
    if all(types):
        cons = [g.op_types[c] for o in n.output for c in g.consumers.get(o, ())]
        if n.op_type == "MatMul" or (cons and all(c == "QuantizeLinear" for c in cons)):
            return types[1]
    return dtype


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
    for pos, (op, outs) in enumerate(zip(g.op_types, g.node_outputs)):
        if not outs or outs[0] not in consts:
            continue
        if op == "Constant":
            info = g.tensors.get(outs[0])
            stored[outs[0]] = (info.nbytes or 0) if info is not None else 0
            continue
        folded.add(pos)
        if op in STORED_CHAIN:
            stored[outs[0]] = sum(stored.get(t, 0) for t in g.node_inputs[pos])
        else:   # computed at load time (ConstantOfShape, Expand, Tile, arithmetic): the size it is read at
            for o in outs:
                info = g.tensors.get(o)
                stored[o] = (info.nbytes or 0) if info is not None else 0
    return stored, folded


def with_folded_run_bytes(g: Graph, df: pd.DataFrame) -> pd.DataFrame:
    """df (a row per node of g, with 01's or ORT's `attribution`) where a node stored_bytes takes as folded has a
    kernel of its own all the same (ORT runs a DequantizeLinear of weights whose consumer has no integer kernel
    at every inference: EfficientWord-Net's 2048x1024 one, 295 us, was charged 0 bytes): its stored inputs as
    weight bytes, its output as written bytes. df itself when there is none."""
    ran = (df["shape_source"].astype(str) == "constant") & (df["attribution"].astype(str) == "kernel")
    if not ran.any():
        return df
    stored, _ = stored_bytes(g, constant_tensors(g))
    where = {name: pos for pos, name in enumerate(g.names)}
    df = df.copy()
    for i in df.index[ran]:
        pos = where[df.at[i, "node"]]
        out = g.tensors.get(g.node_outputs[pos][0]) if g.node_outputs[pos] else None
        df.loc[i, ["act_in_bytes", "act_out_bytes", "weight_bytes"]] = [
            0.0, float(out.nbytes) if out is not None and out.nbytes is not None else np.nan,
            float(sum(stored.get(t, 0) for t in g.node_inputs[pos]))]
    return df


STORED_CHAIN = names_with("stored_chain")
TYPED_BY_INPUT = names_with("typed_by_input")      # QuantizeLinear, Cast: the node's dtype is its input's


def node_metrics(g: Graph, consts: set[str] | None = None) -> pd.DataFrame:
    """One row per node (METRIC_COLUMNS), built as tuples: at 200k nodes every per-node operation counts."""
    df = _frame(_rows(g, constant_tensors(g) if consts is None else consts))
    _refuse_unreal(df)
    return df


def _rows(g: Graph, consts: set[str]) -> list[list]:
    """The rows' columns. The shapes' text and source are inlined for one-output nodes (most of them): a
    function call costs ~5% of a row. Rows are made as tuples and turned into columns ROW_BLOCK at a time, while they are in the
    cache (one zip over 200k rows reads each from memory again: 0.15 s more at 133k rows)."""
    shp = shape_tensors(g, consts)
    stored, folded = stored_bytes(g, consts)
    tensors, consumers = g.tensors, g.consumers
    tget, sget, source_of = tensors.get, stored.get, g.shape_source.get
    outputs = set(g.graph_outputs)      # an output no node reads is dead (never computed), not written bytes
    layers = _layers(g)
    ops: dict[tuple[str, str], tuple] = {}     # (op type, domain) -> registry entry, its key, its class
    cols: list[list] = [[] for _ in METRIC_COLUMNS]
    out, shape_texts = [], {}
    for pos in range(len(g.nodes)):
        n, ins, outs = g.view(pos), g.node_inputs[pos], g.node_outputs[pos]
        kind = ops.get((n.op_type, n.domain))
        if kind is None:
            op = lookup(n)
            kind = ops[n.op_type, n.domain] = (op, op_key(n) if op is None else op.key,
                                               "other" if op is None else op.op_class)
        op, key, cls = kind
        cost = None if op is None else node_cost(n, g, op) if op.control_flow else op.cost(n, g)
        act_in, act_out, w = (0, 0, 0) if pos in folded else \
            _node_bytes(ins, outs, consts, sget, tget, consumers, outputs)
        if op is not None and op.like:      # RandomNormalLike reads its input's shape, never its values
            act_in = 0
        if n.domain == ML_DOMAIN and pos not in folded:   # classical-ML parameters are attributes (tree tables, coefficients)
            w += attribute_bytes(n)
            act_out = sequence_bytes(n, g) if act_out is None else act_out   # ZipMap: no tensor shape
        main = tget(outs[0]) if outs else None
        if main is None or n.op_type in TYPED_BY_INPUT:
            main = (tget(n.input[0]) if n.input else None) or main
        if len(outs) == 1:
            o = outs[0]
            info = tget(o)
            shapes = shape_texts.get(info)
            if shapes is None:
                shapes = shape_texts[info] = _shape_text(info)
            source = ("constant" if o in consts else    # _source() for one output, inlined
                      "unknown" if info is None or info.shape is None else source_of(o, "onnx"))
        else:
            shapes, source = _shapes_text(tensors, outs, shape_texts), _source(g, consts, outs, outputs)
        macs = np.nan if cost is None else cost[1]
        dtype = dtype_name(main.elem_type) if main is not None else "unknown"
        # integer MACs stay MACs: the element type they are done in (the weight operand's)
        mac_dtype = _mac_dtype(n, g, op) if cost is not None and macs > 0 else ""
        out.append((
            g.names[pos], key, pos, np.nan if cost is None else cost[0], macs,
            np.nan if act_in is None else act_in, np.nan if act_out is None else act_out, w,
            dtype, shapes,
            cost is not None, act_in is not None and act_out is not None,
            n.op_type in SHAPE_OPS or bool(outs) and shp.issuperset(outs),
            cls(n, g) if callable(cls) else cls,
            mac_dtype, source, cost_note(n, g) if n.op_type in CONTROL_FLOW else "", layers[pos],
            compute_dtype(n, g, dtype, mac_dtype) if macs == macs and macs > 0 else dtype))
        if len(out) == ROW_BLOCK:
            _extend(cols, out)
    _extend(cols, out)
    return cols


def _node_bytes(ins, outs, consts, sget, tget, consumers, outputs) -> tuple:
    """A node's activation bytes read and written (None: a size unknown) and its weight bytes: constants are
    weight bytes, the rest activations; an output nothing reads is never written (a Dropout's mask), unless
    nothing reads any of the node's outputs: ONNX Runtime runs it all the same, and writes its first."""
    act_in = act_out = w = 0
    for t in ins:
        if t in consts:
            w += sget(t, 0)
        elif act_in is not None:
            info = tget(t)
            act_in = None if info is None or info.nbytes is None else act_in + info.nbytes
    written = False
    for o in outs:
        if o in consumers or o in outputs:
            written = True
            info = tget(o)
            if info is None or info.nbytes is None:
                return act_in, None, w
            act_out += info.nbytes
    if not written and outs:
        info = tget(outs[0])
        act_out = None if info is None or info.nbytes is None else info.nbytes
    # a kernel that writes only empty tensors (batch 0) reads none of its weights: a resnet18 conv at batch 0 ran
    # 8.75 us against a 47 us "bound" of its 9.4 MB of weights, and 03 said the host was under-measured
    return act_in, act_out, (0 if act_out == 0 and outs else w)


ROW_BLOCK = 1024


def _extend(cols: list[list], rows: list[tuple]) -> None:
    """The rows appended to the columns (transposed in C), and the row list emptied."""
    for c, v in zip(cols, zip(*rows)):
        c.extend(v)
    rows.clear()


def _frame(cols: list[list]) -> pd.DataFrame:
    """Numbers typed by numpy as pandas would (NaN among ints: float64); text kept as Python str objects, not
    pandas 3's str dtype: converting 9 columns of 200k rows costs, and the table only goes to summarize() and to
    the CSV (whose writer takes objects as they are)."""
    return pd.DataFrame({c: pd.Series(v, dtype=object) if c in TEXT_METRICS else np.array(v)
                         for c, v in zip(METRIC_COLUMNS, cols)})


EXACT_MAX = 2**53        # figures past this are not exact in float64 (pandas, CSV): no real model's node is near it


def _refuse_unreal(df: pd.DataFrame) -> None:
    """StageError for a node whose bytes or operations are past EXACT_MAX: shape values computed in the graph
    (a Reshape to 2^40 x 2^40) that no real model has; the figures would be wrong."""
    cols = ["flops", "macs", "act_in_bytes", "act_out_bytes", "weight_bytes"]
    over = df[cols].to_numpy(float) > EXACT_MAX
    rows = np.flatnonzero(over.any(axis=1))
    if rows.size:
        k = int(rows[0])
        c = cols[int(np.argmax(over[k]))]
        raise StageError(f"node {df['node'].iat[k]} ({df['op_type'].iat[k]}): {c} = {float(df[c].iat[k]):.3g}, beyond any "
                         f"real model (output shapes {df['out_shapes'].iat[k]}): check the shape values the graph computes")


def _layers(g: Graph) -> list[str]:
    """layer_name per node; skipped when no node carries exporter metadata or a TorchScript path name."""
    if not any(len(n.metadata_props) or n.name.startswith("/") for n in g.nodes[:200]):
        return [""] * len(g.nodes)
    return [layer_name(n) for n in g.nodes]


def _shapes_text(tensors, outs, memo: dict) -> str:
    """'1x16x16;?' for the outputs; memo: text per TensorInfo (tensors of one type share one)."""
    parts = []
    for t in outs:
        info = tensors.get(t)
        text = memo.get(info)
        if text is None:
            text = memo[info] = _shape_text(info)
        parts.append(text)
    return ";".join(parts)


def _shape_text(info) -> str:
    return "?" if info is None or info.shape is None else "x".join(map(str, info.shape))


SOURCE_ORDER = ("unknown", "executed", "values", "ort", "onnx")


def _source(g: Graph, consts: set[str], outs: list[str], graph_outputs: set[str]) -> str:
    """Where a node's output shapes came from: the least direct method any output needed (onnx, ort, values,
    executed), constant for constant folding, unknown when a shape is missing."""
    if len(outs) > 1:       # dead outputs aside (one output is the node's result either way)
        outs = [o for o in outs if o in g.consumers or o in graph_outputs] or outs
    if not outs:
        return ""
    if consts.issuperset(outs):
        return "constant"
    if len(outs) == 1:
        return _tensor_source(g, outs[0])
    seen = {_tensor_source(g, o) for o in outs}
    return seen.pop() if len(seen) == 1 else next(s for s in SOURCE_ORDER if s in seen)


def _tensor_source(g: Graph, t: str) -> str:
    info = g.tensors.get(t)
    return "unknown" if info is None or info.shape is None else g.shape_source.get(t, "onnx")


KV_NAMES = re.compile(r"(past|present|cache|kv)", re.I)


def kv_cache(g: Graph) -> dict:
    """Graph inputs and outputs that carry a KV cache (past_key_values.* in, present.* out, as Hugging Face and
    optimum name them), with their bytes: in a decode step they and the weights are what the memory moves."""
    def side(names):
        hits = [t for t in names if KV_NAMES.search(t) and g.tensors.get(t) is not None]
        return {"tensors": len(hits), "bytes": int(sum(g.tensors[t].nbytes or 0 for t in hits)),
                "example": hits[0] if hits else None}
    return {"inputs": side(g.graph_inputs), "outputs": side(g.graph_outputs)}


def summarize(df: pd.DataFrame, g: Graph) -> dict:
    mac_ops = df["macs"] > 0          # Conv/Gemm/MatMul/Einsum/recurrent and their integer and quantized forms
    unknown = df.loc[~df["cost_known"], "op_type"]
    string, unsized = onnx.TensorProto.STRING, ~df["bytes_known"].to_numpy(bool)
    strings = sum(any(t is not None and t.elem_type == string
                      for t in map(g.tensors.get, [*g.node_inputs[p], *g.node_outputs[p]]))
                  for p in df["topo_idx"].to_numpy(int)[unsized])     # a string has no size: only those rows
    return {
        "nodes": int(len(df)),
        "total_macs": float(df["macs"].sum()),
        "total_flops": float(df["flops"].sum()),
        "conv_gemm_matmul_macs": float(df.loc[mac_ops, "macs"].sum()),
        "weight_bytes": float(df["weight_bytes"].sum()),
        "act_out_bytes": float(df["act_out_bytes"].sum()),
        "unknown_cost_nodes": int(len(unknown)),
        "unknown_cost_ops": {str(k): int(v) for k, v in unknown.value_counts().sort_index().items()},
        "unknown_size_nodes": int((~df["bytes_known"]).sum()),
        # of those, the nodes that read or write a string tensor (no byte size): not an unresolved shape
        "unknown_size_strings": int(strings),
        "upper_bound_nodes": int(df["cost_note"].str.startswith("upper bound").sum()),
        "shape_source": {str(k): int(v) for k, v in df["shape_source"].value_counts().sort_index().items()},
        "op_counts": {str(k): int(v) for k, v in df["op_type"].value_counts().sort_index().items()},
    }
