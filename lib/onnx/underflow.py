"""Subnormal arithmetic, measured on the model's inputs: the share of a Softmax's outputs whose exponential
underflows (exp_underflow) and the share of subnormal values a node reads or writes (subnormal).

exp_underflow: the share of 16-value runs along the Softmax's axis (VECTOR) holding an exp(x - max) below
float32's smallest normal number (x - max < ln(FLT_MIN) = -87.3).

ORT's exponential (MLAS) takes about 10x as long on such an element (subnormal arithmetic): a lone 1x4x128x128
Softmax ran 19 us on normal inputs and 157 us with half of them masked to float32's minimum, as a BERT's padding
mask does (its attention Softmax ran 186 us). Masks put it in most transformers (padding: the share of masked
positions; causal: about half; shifted windows: some), and no count of FLOPs or bytes sees it: stage 02 runs the
model once on its inputs and records the share per node (ops_metrics.csv's `exp_underflow`), and the kernel model
takes it as a feature (lib/latency/kernel_model.py).

subnormal: per node, the largest share of subnormal values among its float inputs and outputs whose values are
known here: weights (read from the file; a MAC kernel's weight per VECTOR-wide run, weight_shares) and a Softmax's
output (computed from the same run), carried through nodes that only move it (Transpose, Reshape, Dropout).
Arithmetic on a subnormal can take a microcode assist: on an Intel Xeon a 64x3x49x49 . 64x3x49x16 MatMul ran 82 us
on normal inputs and 1.2 ms with 10% of them subnormal, which swin's shifted-window attention reads (its mask adds
-100: exp(-100) is subnormal; its 64x3x49x49 Softmax writes them, 0.95 ms with 12% masked, 0.24 ms unmasked), and
two 1x1 convs of ppocrv6_det_small with 24% and 63% of their weights subnormal ran 80x and 190x their bound. An AMD
EPYC showed no such cost on the latter: the kernel model learns it per host from calibration's micro-benchmarks.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from lib.onnx.ops import lookup, names_with
from lib.onnx.reader import read_light, tensor_array
from lib.onnx.shapes import load_full

EXP_OPS = names_with("softmax_exp")
FLT_MIN = np.finfo(np.float32).tiny
LN_FLT_MIN = float(np.log(FLT_MIN))
# the float32 lanes of a 512-bit vector: ORT's exp pays for an underflow once per vector that holds one (a lone
# 64x3x49x49 Softmax with 12% of its values masked to -100 ran 1.1-1.5 ms when they were contiguous runs in each
# row, 2.1 ms when scattered at random and 2.7 ms with only every 16th value masked; 0.2 ms with none)
VECTOR = 16
# the smallest normal value per float type; not float16: a CPU computes in float32, where its subnormals are normal
TINY = {onnx.TensorProto.FLOAT: FLT_MIN, onnx.TensorProto.DOUBLE: np.finfo(np.float64).tiny}
# nodes whose output holds their input's values, moved (a Softmax's output reaches its MatMul through them)
MOVES_VALUES = (names_with("rearranges") | names_with("view")) - names_with("reads_shape")


def exp_nodes(g) -> list[int]:
    """Positions of the top-level Softmax / LogSoftmax nodes (ONNX domain) of a Graph."""
    return [p for p, op in enumerate(g.op_types) if op in EXP_OPS and g.nodes[p].domain in ("", "ai.onnx")
            and g.nodes[p].input and g.nodes[p].input[0]]


def _shifted(x: np.ndarray, axis: int, opset: int) -> tuple[np.ndarray, int]:
    """(x - max along `axis`, the axis), before opset 13 over the 2-D rows the input is flattened into at `axis`."""
    x = np.asarray(x, dtype=np.float32)
    axis = axis + x.ndim if axis < 0 else axis
    if opset < 13:
        x, axis = x.reshape(int(np.prod(x.shape[:axis], dtype=np.int64)), -1), 1
    with np.errstate(invalid="ignore", over="ignore"):
        return x - x.max(axis=axis, keepdims=True), axis


def _run_share(mask: np.ndarray, axis: int) -> float:
    """The share of the VECTOR-wide runs along `axis` (each row cut into runs from its start) holding a True."""
    m = np.moveaxis(np.asarray(mask, bool), axis, -1)
    m = np.pad(m, [(0, 0)] * (m.ndim - 1) + [(0, -m.shape[-1] % VECTOR)])
    return float(m.reshape(*m.shape[:-1], -1, VECTOR).any(axis=-1).mean())


def share_below(x: np.ndarray, axis: int, opset: int) -> float:
    """The share of the VECTOR-wide runs along `axis` that hold an exp(x - max) below FLT_MIN, max along `axis`
    (before opset 13: over the 2-D rows the input is flattened into at `axis`)."""
    if np.size(x) == 0:
        return 0.0
    d, axis = _shifted(x, axis, opset)
    return _run_share(d < LN_FLT_MIN, axis)


def subnormal_out(x: np.ndarray, axis: int, opset: int) -> float:
    """The share of Softmax(x)'s outputs (float32, as numpy computes them) that are subnormal."""
    if np.size(x) == 0:
        return 0.0
    d, axis = _shifted(x, axis, opset)
    with np.errstate(invalid="ignore", over="ignore", under="ignore", divide="ignore"):
        e = np.exp(d)
        y = e / e.sum(axis=axis, keepdims=True)
    return float(np.mean((y > 0) & (y < FLT_MIN)))


def _subnormal_weights(model_path: str | Path, names):
    """(name, |values| in its shape, mask of the subnormal ones) of each float initializer in `names` (all when
    None) that holds any, read one at a time through a memory map; a payload that does not fill its shape is
    skipped (ONNX Runtime refuses such a model)."""
    light = read_light(model_path)
    for t in light.model.graph.initializer:
        if t.data_type not in TINY or (names is not None and t.name not in names):
            continue
        a = tensor_array(light, t)
        if a is None or a.size == 0 or a.size != int(np.prod(t.dims, dtype=np.int64)):
            continue
        a = np.abs(a).reshape(tuple(t.dims))        # a payload read from the file is flat
        sub = (a > 0) & (a < TINY[t.data_type])
        if sub.any():
            yield t.name, a, sub


def subnormal_counts(model_path: str | Path, names=None) -> dict[str, tuple[int, int, int]]:
    """{float weight: (subnormal values, nonzero values, values)} of the file's initializers (those in `names`,
    all when None); a weight that has no subnormal value is left out."""
    return {name: (int(sub.sum()), int(np.count_nonzero(a)), int(a.size))
            for name, a, sub in _subnormal_weights(model_path, names)}


def _weight_axis(node: onnx.NodeProto, index: int) -> int | None:
    """The axis a MAC kernel loads its weight (input `index`) in vectors along (the registry's weight_axis); None
    (value by value) for other inputs and ops."""
    op = lookup(node)
    return op.weight_axis(node) if op is not None and op.weight_axis is not None and index == op.weight_input else None


def weight_shares(model_path: str | Path, g) -> dict[str, float]:
    """{float weight holding subnormal values: their share}: of the VECTOR-wide runs along the axis its first
    reader loads it in vectors (_weight_axis), else of its values. A conv's cost follows the runs: PP-OCRv6's 1x1
    convs with 24% and 63% of their weights subnormal, in 26% and 64% of the runs along output channels, ran
    0.34 and 0.81 ns per multiply-add; a micro-benchmark's with 25% at random, in all the runs, 1.4 ns."""
    if not g.initializers:
        return {}
    axes: dict[str, int | None] = {}
    for node in g.nodes:
        for i, t in enumerate(node.input):
            if t in g.initializers:
                axes.setdefault(t, _weight_axis(node, i))
    return {name: float(sub.mean()) if axes.get(name) is None else _run_share(sub, axes[name])
            for name, _, sub in _subnormal_weights(model_path, g.initializers)}


def subnormal(g, tensor_share: dict[str, float]) -> np.ndarray:
    """Per node: the largest share of subnormal values among its inputs and outputs (`tensor_share`: the known
    ones; NaN where one is unknown), carried through nodes that move values; 0 where none is known."""
    share = dict(tensor_share)
    out = np.zeros(len(g.nodes))
    for p, ins in enumerate(g.node_inputs):
        known = [share[t] for t in ins + g.node_outputs[p] if t in share]
        if not known:
            continue
        out[p] = np.nan if np.isnan(known).any() else max(known)
        if g.op_types[p] in MOVES_VALUES and g.node_outputs[p]:
            share[g.node_outputs[p][0]] = out[p]
    return out


def measure(model_path: str | Path, g, feeds) -> tuple[dict[str, np.ndarray], str]:
    """({"exp_underflow": per node of g, share_below() (NaN for nodes that are no Softmax / LogSoftmax and where
    the run failed), "subnormal": per node, subnormal() of its weights and the Softmax outputs}, a note when the
    run failed). One ONNX Runtime run, optimizations off (tensor names kept), with the Softmax inputs exposed as
    outputs; no run when the graph has no such node. feeds: the inputs, or a function that makes them (called only
    when there is a run)."""
    out = np.full(len(g.nodes), np.nan)
    known = weight_shares(model_path, g)
    pos = exp_nodes(g)
    values, note = _softmax_inputs(model_path, g, pos, feeds) if pos else ({}, "")
    opset = next((o.version for o in g.model.opset_import if o.domain in ("", "ai.onnx")), 13)
    default_axis = -1 if opset >= 13 else 1
    for p in pos:
        axis = next((int(a.i) for a in g.nodes[p].attribute if a.name == "axis"), default_axis)
        x = values.get(g.nodes[p].input[0])
        if x is not None:
            out[p] = share_below(x, axis, opset)
        if g.op_types[p] == "Softmax" and g.node_outputs[p]:
            known[g.node_outputs[p][0]] = np.nan if x is None else subnormal_out(x, axis, opset)
    return {"exp_underflow": out, "subnormal": subnormal(g, known)}, note


def _softmax_inputs(model_path, g, pos: list[int], feeds) -> tuple[dict[str, np.ndarray], str]:
    """({tensor: value} of the Softmax nodes' inputs, ""), or ({}, a note) when the run failed."""
    import onnxruntime as ort
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
        so.log_severity_level = 4     # its failure is said in one line below, not as ORT's own red log line
        sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        del model
        names = {i.name for i in sess.get_inputs()}
        if run:
            values.update(zip(run, sess.run(run, {k: v for k, v in feeds.items() if k in names})))
    except Exception as e:  # noqa: BLE001 - the share is then unknown, said in one line
        return {}, f"Softmax inputs not measured ({type(e).__name__}: {' '.join(str(e).split())[:160]})"
    return values, ""


def summary(columns: dict[str, np.ndarray], note: str) -> dict:
    """metrics_meta.json's exp_underflow (the Softmax nodes, the mean share of their 16-value runs holding an
    underflow) and subnormal (the nodes that read or write subnormal values, the largest share) from measure()'s
    columns."""
    shares, sub = columns["exp_underflow"], np.nan_to_num(columns["subnormal"])
    known = shares[~np.isnan(shares)]
    return {"exp_underflow": {"nodes": int(known.size),
                              "mean_share": round(float(known.mean()), 4) if known.size else None,
                              **({"note": note} if note else {})},
            "subnormal": {"nodes": int(np.count_nonzero(sub > 0)), "max_share": round(float(sub.max(initial=0.0)), 4)}}


def summary_lines(s: dict) -> list[str]:
    """What stage 02 prints of summary()."""
    uf, sub, out = s["exp_underflow"], s["subnormal"], []
    if uf.get("note"):
        out.append(f"note: {uf['note']}")
    elif uf["nodes"]:
        out.append(f"Softmax: {uf['nodes']} nodes, {100 * uf['mean_share']:.0f}% of their 16-value runs hold an "
                   f"exponential that underflows float32 (ORT's exp is ~10x slower on them)")
    if sub["nodes"]:
        out.append(f"subnormal values: {sub['nodes']} nodes read or write them, up to {100 * sub['max_share']:.1f}% "
                   f"of a tensor (arithmetic on one can take ~100x as long)")
    return out
