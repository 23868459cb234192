"""Shapes that cannot miss: every node output's shape, and where it came from (shape_source).

1. onnx      onnx's shape inference with data propagation;
2. ort       ONNX Runtime's symbolic shape inference, for what 1 left (transformer mask arithmetic);
3. values    static value propagation through shape arithmetic (Shape/Gather/Slice/Concat/Unsqueeze/
             Reshape/Cast/arithmetic ... evaluated with numpy, as onnx-tool does): tensors whose values
             become known are folded into constants and onnx's inference runs again;
4. executed  the last resort: one ONNX Runtime run on the workload's inputs with every intermediate tensor
             exposed (exact for those inputs). It also tells which If branch ran and small values
             (conditions, trip counts).
Nothing here writes outside a temporary folder of ours (ORT's symbolic inference would drop
sym_shape_infer_temp.onnx into the working directory; we drive it ourselves).
"""
from __future__ import annotations

import importlib.util
import logging
import math
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

from .errors import StageError
from .graph import CONTROL_FLOW, MAX_VALUE_ELEMENTS, initializer_names

EXECUTE_MAX_FILE_BYTES = 1_800_000_000    # a single protobuf holds < 2 GB: bigger models are not executed


def _complete(vi) -> bool:
    t = vi.type.tensor_type
    return (vi.type.HasField("tensor_type") and t.HasField("shape")
            and all(d.HasField("dim_value") and d.dim_value >= 0 for d in t.shape.dim))


def known_shapes(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    g = model.graph
    return {vi.name: vi for vi in list(g.input) + list(g.value_info) + list(g.output) if _complete(vi)}


def wanted(model: onnx.ModelProto) -> list[str]:
    """Node outputs that need a shape (not Constant outputs, not optional-empty, not sequence/optional typed)."""
    g = model.graph
    inits = initializer_names(g)
    typed = {vi.name: vi.type.WhichOneof("value") for vi in list(g.value_info) + list(g.output)}
    return [o for n in g.node if n.op_type != "Constant" for o in n.output
            if o and o not in inits and typed.get(o) in (None, "tensor_type")]


def _onnx_infer(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception as e:  # noqa: BLE001
        msg = " ".join(str(e).split())[:300]
        raise StageError(f"ONNX shape inference rejects the model: {msg}") from None


def _ort_symbolic(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """ORT's SymbolicShapeInference driven here: its own infer_shapes() saves a file into the working directory
    and raises when shapes remain; we keep the partial result instead. Loaded from its file: importing
    onnxruntime.tools imports torch (about 550 MB of resident memory for nothing)."""
    if not any(o.domain in ("", "ai.onnx") and o.version >= 7 for o in model.opset_import):
        return None
    spec = importlib.util.find_spec("onnxruntime")
    path = Path(spec.origin).parent / "tools" / "symbolic_shape_infer.py"
    mod_spec = importlib.util.spec_from_file_location("_ort_symbolic_shape_infer", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    logging.getLogger("_ort_symbolic_shape_infer").setLevel(logging.CRITICAL)
    mod.logger.setLevel(logging.CRITICAL)
    try:
        ssi = mod.SymbolicShapeInference(2**31 - 1, True, False, 0)
        ssi._preprocess(model)
        while ssi.run_:
            ssi._infer_impl()
        ssi._update_output_from_vi()
        return ssi.out_mp_
    except Exception:  # noqa: BLE001 - keep what the other methods found
        return None


# ---------------------------------------------------------------- static value propagation

def _a(node, name, default=None):
    for at in node.attribute:
        if at.name == name:
            return helper.get_attribute_value(at)
    return default


def _slice(x, starts, ends, axes=None, steps=None):
    axes = list(range(len(starts))) if axes is None else [int(a) for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    idx = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        idx[a] = slice(int(s), int(max(min(e, 2**62), -2**62)), int(st))
    return x[tuple(idx)]


def _unsqueeze(x, axes):
    for a in sorted(int(a) % (x.ndim + len(axes)) for a in axes):
        x = np.expand_dims(x, a)
    return x


def _reshape(x, shape, allowzero=0):
    shape = [int(s) for s in shape]
    if not allowzero:
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return x.reshape(shape)


BINARY = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Equal": np.equal, "Less": np.less,
          "Greater": np.greater, "LessOrEqual": np.less_equal, "GreaterOrEqual": np.greater_equal,
          "And": np.logical_and, "Or": np.logical_or, "Max": np.maximum, "Min": np.minimum, "Mod": np.mod}


def _eval(node, ins: list, shapes: dict):
    """Outputs of one node from known input values (numpy), or None when not handled here."""
    op = node.op_type
    x = ins[0] if ins else None
    if op == "Shape":
        s = np.array(shapes, dtype=np.int64)
        return [s[_a(node, "start", 0):_a(node, "end", None)]]
    if op == "Size":
        return [np.array(math.prod(shapes), dtype=np.int64)]
    if op in BINARY:
        return [BINARY[op](ins[0], ins[1]).astype(np.result_type(ins[0]) if op in ("Add", "Sub", "Mul", "Max", "Min", "Mod") else bool)]
    if op == "Div":
        r = ins[0] / ins[1] if np.issubdtype(ins[0].dtype, np.floating) else np.trunc(ins[0] / ins[1])
        return [r.astype(ins[0].dtype)]
    handlers = {
        "Identity": lambda: [x], "Neg": lambda: [-x], "Not": lambda: [np.logical_not(x)], "Abs": lambda: [np.abs(x)],
        "Floor": lambda: [np.floor(x)], "Ceil": lambda: [np.ceil(x)], "Sqrt": lambda: [np.sqrt(x)],
        "Cast": lambda: [x.astype(helper.tensor_dtype_to_np_dtype(_a(node, "to")))],
        "Gather": lambda: [np.take(x, ins[1].astype(np.int64), axis=_a(node, "axis", 0))],
        "Unsqueeze": lambda: [_unsqueeze(x, ins[1] if len(ins) > 1 else _a(node, "axes"))],
        "Squeeze": lambda: [np.squeeze(x, axis=tuple(int(a) for a in (ins[1] if len(ins) > 1 else _a(node, "axes")))
                                       ) if (len(ins) > 1 or _a(node, "axes")) else np.squeeze(x)],
        "Concat": lambda: [np.concatenate([np.atleast_1d(i) for i in ins], axis=_a(node, "axis", 0))],
        "Slice": lambda: [_slice(x, *ins[1:]) if len(ins) > 1 else _slice(x, _a(node, "starts"), _a(node, "ends"), _a(node, "axes"))],
        "Reshape": lambda: [_reshape(x, ins[1], _a(node, "allowzero", 0))],
        "Range": lambda: [np.arange(ins[0], ins[1], ins[2]).astype(ins[0].dtype)],
        "ConstantOfShape": lambda: [np.full([int(d) for d in x], numpy_helper.to_array(_a(node, "value")).reshape(-1)[0]
                                            if _a(node, "value") is not None else np.float32(0))],
        "Expand": lambda: [x * np.ones([int(d) for d in ins[1]], dtype=x.dtype)],
        "Where": lambda: [np.where(ins[0], ins[1], ins[2])],
        "ReduceProd": lambda: [np.prod(x, keepdims=bool(_a(node, "keepdims", 1)))],
        "Transpose": lambda: [np.transpose(x, _a(node, "perm"))],
        "Tile": lambda: [np.tile(x, [int(r) for r in ins[1]])],
    }
    fn = handlers.get(op)
    return fn() if fn else None


def propagate_values(model: onnx.ModelProto, shapes: dict[str, list[int]], values: dict[str, np.ndarray]) -> dict:
    """Values of small tensors computable from constants and known shapes (shape arithmetic)."""
    new = {}
    for node in model.graph.node:
        if node.op_type in CONTROL_FLOW or not node.output or all(o in values for o in node.output if o):
            continue
        ins = [t for t in node.input]
        if node.op_type in ("Shape", "Size"):
            if ins[0] not in shapes:
                continue
            args, shp = [], shapes[ins[0]]
        else:
            if not ins or any(t and t not in values for t in ins):
                continue
            args, shp = [values[t] if t else None for t in ins], None
            while args and args[-1] is None:
                args.pop()
        try:
            outs = _eval(node, args, shp)
        except Exception:  # noqa: BLE001 - values we cannot evaluate stay unknown
            outs = None
        for name, v in zip(node.output, outs or []):
            v = np.asarray(v)
            if name and v.size <= MAX_VALUE_ELEMENTS:
                values[name] = new[name] = v
    return new


def _fold(model: onnx.ModelProto, values: dict[str, np.ndarray], shapes: dict) -> onnx.ModelProto:
    """A copy where nodes whose outputs all have known values become Constant nodes (same tensor names)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.value_info[:]
    m.graph.value_info.extend(vi for name, vi in shapes.items() if name not in {i.name for i in m.graph.input})
    nodes = []
    for n in m.graph.node:
        outs = [o for o in n.output if o]
        if n.op_type not in ("Constant",) and outs and all(o in values for o in outs) and len(outs) == 1:
            v = values[outs[0]]
            nodes.append(helper.make_node("Constant", [], outs, name=n.name, value=numpy_helper.from_array(
                np.ascontiguousarray(v), outs[0])))
        else:
            nodes.append(n)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return m


# ---------------------------------------------------------------- the last resort: one execution

def load_full(path: Path) -> onnx.ModelProto:
    """The model with its weights (for the execution step only)."""
    if path.stat().st_size > EXECUTE_MAX_FILE_BYTES:
        raise ExecutionFailed("the model file is too large to run in one protobuf")
    try:
        return onnx.load(str(path))
    except Exception as e:  # noqa: BLE001
        raise ExecutionFailed(f"cannot read its weights: {type(e).__name__}") from None


def execute(full: onnx.ModelProto, feeds: dict, want: list[str]) -> tuple[dict, dict]:
    """Shapes, element types and small values of the `want` tensors (and of If conditions) from one ORT run of
    the real model with every intermediate tensor exposed as an output: ({name: (shape, elem_type)},
    {name: small integer/bool value})."""
    import onnxruntime as ort
    full = _copy(full)
    have = {o.name for o in full.graph.output} | {i.name for i in full.graph.input}
    extra = [t for t in dict.fromkeys(list(want) + _control_inputs(full)) if t and t not in have]
    full.graph.output.extend(helper.ValueInfoProto(name=t) for t in extra)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 4
    try:
        sess = ort.InferenceSession(full.SerializeToString(), so, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]
        outs = sess.run(names, feeds)
    except Exception as e:  # noqa: BLE001
        raise ExecutionFailed(" ".join(str(e).split())[:300]) from None
    shapes, vals = {}, {}
    for name, v in zip(names, outs):
        if isinstance(v, np.ndarray):
            try:
                shapes[name] = (list(v.shape), helper.np_dtype_to_tensor_dtype(v.dtype))
            except Exception:  # noqa: BLE001 - object arrays (strings)
                continue
            if v.size <= MAX_VALUE_ELEMENTS and v.dtype.kind in "biu":
                vals[name] = v
    return shapes, vals


class ExecutionFailed(Exception):
    pass


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    return m


def _shape_of(vi) -> list[int]:
    return [d.dim_value for d in vi.type.tensor_type.shape.dim]


# ---------------------------------------------------------------- the chain

class Inferred:
    """The shape-inferred graph (weights stripped) and what the chain learnt on the way."""
    def __init__(self, model, source, values, executed_note=""):
        self.model, self.source, self.values, self.executed_note = model, source, values, executed_note


def _needs_values(model: onnx.ModelProto) -> bool:
    return any(n.op_type in CONTROL_FLOW for n in model.graph.node)


def infer(model: onnx.ModelProto, full_fn, feeds_fn) -> Inferred:
    """Run the chain on a model whose inputs are fixed. For the execution step only: full_fn() gives the model
    with its weights, feeds_fn() its inputs."""
    from .graph import _small_values
    want = wanted(model)
    m1 = _onnx_infer(model)
    known = known_shapes(m1)
    source = {n: "onnx" for n in known}
    partial = {vi.name: vi for vi in list(m1.graph.value_info) + list(m1.graph.output) if vi.type.HasField("tensor_type")}
    if any(t not in known for t in want):
        m2 = _ort_symbolic(model)
        for n, vi in (known_shapes(m2) if m2 is not None else {}).items():
            if n not in known:
                known[n], source[n] = vi, "ort"
    values = _small_values(model.graph)
    if any(t not in known for t in want) or _needs_values(model):
        _propagate(model, known, source, values, want)
    note = ""
    if any(t not in known for t in want) or _unknown_conditions(model, values):
        note = _execute_step(model, full_fn, feeds_fn, known, source, values, want)
    out = m1                      # onnx's result: its control-flow bodies carry their inferred value_info
    del out.graph.value_info[:]
    inputs = {i.name for i in out.graph.input}
    out.graph.value_info.extend(known.get(n) or partial[n] for n in dict.fromkeys(list(known) + list(partial))
                                if n not in inputs)
    for o in out.graph.output:
        if o.name in known:
            o.CopyFrom(known[o.name])
    return Inferred(out, source, values, note)


def _propagate(model, known, source, values, want, rounds: int = 8) -> None:
    for _ in range(rounds):
        new = propagate_values(model, {n: _shape_of(vi) for n, vi in known.items()}, values)
        if not new or all(t in known for t in want):
            return
        try:
            m3 = _onnx_infer(_fold(model, values, known))
        except StageError:
            return
        added = [n for n in known_shapes(m3) if n not in known]
        for n in added:
            known[n], source[n] = known_shapes(m3)[n], "values"
        if not added:
            return


def _control_inputs(model: onnx.ModelProto) -> list[str]:
    """If conditions and Loop trip counts / initial conditions of the main graph."""
    return [t for n in model.graph.node if n.op_type in ("If", "Loop") for t in n.input[:2 if n.op_type == "Loop" else 1] if t]


def _unknown_conditions(model, values) -> bool:
    return any(t not in values for t in _control_inputs(model))


def _execute_step(model, full_fn, feeds_fn, known, source, values, want) -> str:
    missing = [t for t in want if t not in known]
    try:
        feeds = feeds_fn()
        shapes, vals = execute(full_fn(), feeds, missing)
    except ExecutionFailed as e:
        return f"the shape-resolving run of ONNX Runtime failed: {e}"
    vals.update({k: v for k, v in feeds.items() if v.size <= MAX_VALUE_ELEMENTS and v.dtype.kind in "biu"})
    for t in missing:
        if t in shapes:
            known[t] = helper.make_tensor_value_info(t, shapes[t][1], shapes[t][0])
            source[t] = "executed"
    for t, v in vals.items():
        values.setdefault(t, v)
    return ""
