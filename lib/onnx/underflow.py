"""The share of a Softmax's outputs that underflow: exp(x - max) below float32's smallest normal number
(x - max < ln(FLT_MIN) = -87.3), measured on the model's inputs.

ORT's exponential (MLAS) takes about 10x as long on such an element (subnormal arithmetic): a lone 1x4x128x128
Softmax ran 19 us on normal inputs and 157 us with half of them masked to float32's minimum, as a BERT's padding
mask does (its attention Softmax ran 186 us). Masks put it in most transformers (padding: the share of masked
positions; causal: about half; shifted windows: some), and no count of FLOPs or bytes sees it: stage 02 runs the
model once on its inputs and records the share per node (ops_metrics.csv's `exp_underflow`), and the kernel model
takes it as a feature (lib/latency/kernel_model.py).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from lib.onnx.ops import names_with
from lib.onnx.shapes import load_full

EXP_OPS = names_with("softmax_exp")
LN_FLT_MIN = float(np.log(np.finfo(np.float32).tiny))


def exp_nodes(g) -> list[int]:
    """Positions of the top-level Softmax / LogSoftmax nodes (ONNX domain) of a Graph."""
    return [p for p, op in enumerate(g.op_types) if op in EXP_OPS and g.nodes[p].domain in ("", "ai.onnx")
            and g.nodes[p].input and g.nodes[p].input[0]]


def share_below(x: np.ndarray, axis: int, opset: int) -> float:
    """The share of exp(x - max) below FLT_MIN, max along `axis` (before opset 13: over the 2-D rows the input
    is flattened into at `axis`)."""
    x = np.asarray(x, dtype=np.float32)
    if x.size == 0:
        return 0.0
    axis = axis + x.ndim if axis < 0 else axis
    if opset < 13:
        x, axis = x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1), 1
    with np.errstate(invalid="ignore", over="ignore"):
        d = x - x.max(axis=axis, keepdims=True)
    return float(np.mean(d < LN_FLT_MIN))


def exp_underflow(model_path: str | Path, g, feeds) -> tuple[np.ndarray, str]:
    """(per node of g: the share of its outputs that underflow, NaN for nodes that are no Softmax / LogSoftmax and
    where the run failed; a note when it failed). One ONNX Runtime run, optimizations off (tensor names kept),
    with the Softmax inputs exposed as outputs; no run when the graph has no such node. feeds: the inputs, or a
    function that makes them (called only when there is a run)."""
    out = np.full(len(g.nodes), np.nan)
    pos = exp_nodes(g)
    if not pos:
        return out, ""
    import onnxruntime as ort
    opset = next((o.version for o in g.model.opset_import if o.domain in ("", "ai.onnx")), 13)
    want = list(dict.fromkeys(g.nodes[p].input[0] for p in pos))
    try:
        feeds = feeds() if callable(feeds) else feeds
        model = load_full(Path(model_path))     # refuses a file too large for one protobuf
        values = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer if i.name in want}
        values.update({t: feeds[t] for t in want if t in feeds})
        run = [t for t in want if t not in values]
        have = {o.name for o in model.graph.output}
        model.graph.output.extend(onnx.ValueInfoProto(name=t) for t in run if t not in have)
        so = ort.SessionOptions()
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        so.log_severity_level = 3
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        del model
        names = {i.name for i in sess.get_inputs()}
        if run:
            values.update(zip(run, sess.run(run, {k: v for k, v in feeds.items() if k in names})))
    except Exception as e:  # noqa: BLE001 - the share is then unknown, said in one line
        return out, f"Softmax inputs not measured ({type(e).__name__}: {' '.join(str(e).split())[:160]})"
    default_axis = -1 if opset >= 13 else 1
    for p in pos:
        axis = next((int(a.i) for a in g.nodes[p].attribute if a.name == "axis"), default_axis)
        out[p] = share_below(values[g.nodes[p].input[0]], axis, opset)
    return out, ""


def summary(shares: np.ndarray, note: str) -> dict:
    """metrics_meta.json's exp_underflow: the Softmax nodes, the mean share of their outputs that underflow."""
    known = shares[~np.isnan(shares)]
    return {"nodes": int(known.size), "mean_share": round(float(known.mean()), 4) if known.size else None,
            **({"note": note} if note else {})}
