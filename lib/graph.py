"""Load an ONNX graph (never its external weight data), fix symbolic dims, infer shapes, order and index it."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

from .artifacts import load_yaml
from .errors import StageError


def load_model(path: str | Path) -> onnx.ModelProto:
    """Read the protobuf without external data; corrupt, truncated or missing files become StageError."""
    path = Path(path)
    if not path.exists():
        raise StageError(f"model file {path} not found")
    if path.is_dir():
        raise StageError(f"{path} is a folder, not an ONNX model file")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # noqa: BLE001 - protobuf raises several types for bad bytes
        raise StageError(f"{path} is not a readable ONNX model (corrupt or truncated?): {type(e).__name__}") from None
    if not model.graph.node:
        raise StageError(f"{path} holds no graph nodes (corrupt, truncated or not an ONNX model)")
    return model


# ---------------------------------------------------------------- shapes and symbolic dims

def parse_shape_overrides(items: list[str]) -> dict[str, list[int]]:
    """'input=1x3x224x224 mask=1x128' (possibly repeated) -> {name: dims}."""
    out: dict[str, list[int]] = {}
    for item in items or []:
        for tok in item.replace(",", " ").split():
            name, sep, dims = tok.rpartition("=")
            if not sep or not name or not re.fullmatch(r"\d+(x\d+)*", dims):
                raise StageError(f"bad --shape-override '{tok}': expected NAME=DIMS like input=1x3x224x224")
            out[name] = [int(d) for d in dims.split("x")]
    return out


def load_workload(path: str | Path | None) -> dict:
    return load_yaml(path, "workload config") if path else {}


def _initializer_names(graph: onnx.GraphProto) -> set[str]:
    return {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}


def real_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that are fed at run time (old exporters also list initializers as inputs)."""
    inits = _initializer_names(model.graph)
    return [i for i in model.graph.input if i.name not in inits]


def resolve_input_shapes(model: onnx.ModelProto, overrides: dict[str, list[int]],
                         symbolic: dict[str, int]) -> dict[str, list[int]]:
    """Concrete shape for every fed input; unresolved dims give one error that lists them all."""
    inputs = real_inputs(model)
    names = {i.name for i in inputs}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise StageError(f"--shape-override names {unknown} are not graph inputs (inputs: {sorted(names)})")
    shapes, unresolved = {}, []
    for inp in inputs:
        t = inp.type.tensor_type
        if inp.name in overrides:
            dims = overrides[inp.name]
            if t.HasField("shape") and len(t.shape.dim) != len(dims):
                raise StageError(f"--shape-override {inp.name} has rank {len(dims)}, the model says {len(t.shape.dim)}")
            shapes[inp.name] = dims
            continue
        if not t.HasField("shape"):
            unresolved.append(f"{inp.name}: rank unknown")
            continue
        dims = []
        for k, d in enumerate(t.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                dims.append(d.dim_value)
            elif d.HasField("dim_param") and d.dim_param in symbolic:
                dims.append(int(symbolic[d.dim_param]))
            else:
                unresolved.append(f"{inp.name}[{k}]={d.dim_param or '?'}")
        shapes[inp.name] = dims
    if unresolved:
        example = " ".join(f"{i.name}=..." for i in inputs)
        raise StageError(f"unresolved dynamic dims {', '.join(unresolved)}: pass --shape-override "
                         f"'{example}', a --preset, or symbolic_dims in configs/workload.yaml")
    return shapes


def fix_input_shapes(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> None:
    for inp in real_inputs(model):
        dims = shapes[inp.name]
        tt = inp.type.tensor_type
        tt.shape.Clear()
        for d in dims:
            tt.shape.dim.add().dim_value = int(d)


def infer_shapes(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnx's shape inference; when it leaves node outputs without a shape (attention masks and other shape
    arithmetic of transformer exports), ONNX Runtime's symbolic shape inference, which resolves them."""
    try:
        inferred = shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception as e:  # noqa: BLE001
        raise StageError(f"ONNX shape inference failed: {str(e).splitlines()[0][:300]}") from None
    if not _missing_shapes(inferred):
        return inferred
    try:
        better = _symbolic_shape_inference().infer_shapes(model, auto_merge=True, guess_output_rank=False)
    except Exception:  # noqa: BLE001 - keep onnx's answer; the ops left without shapes are flagged unknown
        return inferred
    return better if better is not None and _missing_shapes(better) < _missing_shapes(inferred) else inferred


def _symbolic_shape_inference():
    """ORT's SymbolicShapeInference, loaded from its file: importing it through `onnxruntime.tools` runs that
    package's __init__, which imports torch (about 550 MB of resident memory for nothing)."""
    import importlib.util
    spec = importlib.util.find_spec("onnxruntime")
    path = Path(spec.origin).parent / "tools" / "symbolic_shape_infer.py"
    mod_spec = importlib.util.spec_from_file_location("_ort_symbolic_shape_infer", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    return mod.SymbolicShapeInference


def _missing_shapes(model: onnx.ModelProto) -> int:
    g = model.graph
    known = set()
    for vi in list(g.value_info) + list(g.output) + list(g.input):
        t = vi.type.tensor_type
        if vi.type.HasField("tensor_type") and t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            known.add(vi.name)
    known |= {t.name for t in g.initializer}
    return sum(1 for n in g.node for o in n.output if o and o not in known and n.op_type != "Constant")


# ---------------------------------------------------------------- the indexed graph

def elem_size(elem_type: int) -> int | None:
    """Bytes per element of an ONNX element type (None for strings and unknown types)."""
    if elem_type in (TensorProto.STRING, TensorProto.UNDEFINED):
        return None
    try:
        np_dtype = helper.tensor_dtype_to_np_dtype(elem_type)
    except Exception:  # noqa: BLE001
        return None
    bits = {TensorProto.INT4: 4, TensorProto.UINT4: 4}.get(elem_type)
    if bits:
        return None  # sub-byte types: counted by numel / 2 in tensor_bytes
    return np.dtype(np_dtype).itemsize


def dtype_name(elem_type: int) -> str:
    try:
        return TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return "unknown"


@dataclass
class TensorInfo:
    shape: list[int] | None      # None when unknown; dims <= 0 never stored
    elem_type: int

    @property
    def numel(self) -> int | None:
        return None if self.shape is None else int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int | None:
        n = self.numel
        if n is None:
            return None
        if self.elem_type in (TensorProto.INT4, TensorProto.UINT4):
            return (n + 1) // 2
        size = elem_size(self.elem_type)
        return None if size is None else n * size


@dataclass
class Graph:
    """An ONNX graph with stable node ids, topological order and producer/consumer arrays."""
    model: onnx.ModelProto
    nodes: list[onnx.NodeProto]            # in topological order
    names: list[str]                       # unique node id per position
    tensors: dict[str, TensorInfo]
    initializers: set[str]
    graph_inputs: list[str]
    graph_outputs: list[str]
    producer: dict[str, int] = field(default_factory=dict)      # tensor -> node position
    consumers: dict[str, list[int]] = field(default_factory=dict)
    file_order: bool = True                                      # the file's order was topological
    implicit: dict[int, list[str]] = field(default_factory=dict)  # outer tensors If/Loop/Scan bodies read
    const_values: dict[str, float] = field(default_factory=dict)  # scalar constants (Loop trip counts ...)

    def inputs(self, i: int) -> list[str]:
        return list(self.nodes[i].input) + self.implicit.get(i, [])

    def preds(self, i: int) -> list[int]:
        out = []
        for t in self.inputs(i):
            p = self.producer.get(t)
            if p is not None and p not in out:
                out.append(p)
        return out

    def succs(self, i: int) -> list[int]:
        out = []
        for t in self.nodes[i].output:
            for c in self.consumers.get(t, ()):
                if c not in out:
                    out.append(c)
        return out

    def edges(self) -> list[tuple[int, int]]:
        return [(p, i) for i in range(len(self.nodes)) for p in self.preds(i)]


def _tensor_infos(model: onnx.ModelProto) -> dict[str, TensorInfo]:
    g = model.graph
    out: dict[str, TensorInfo] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        tt = vi.type.tensor_type
        if not vi.type.HasField("tensor_type"):
            continue
        shape = None
        if tt.HasField("shape"):
            dims = [d.dim_value if d.HasField("dim_value") else -1 for d in tt.shape.dim]
            shape = dims if all(d >= 0 for d in dims) else None
        out[vi.name] = TensorInfo(shape, tt.elem_type)
    for t in g.initializer:
        out[t.name] = TensorInfo(list(t.dims), t.data_type)
    for n in g.node:  # Constant outputs: shape from the attribute, even when inference left them out
        if n.op_type == "Constant" and n.output and n.output[0] not in out:
            for a in n.attribute:
                if a.name == "value":
                    out[n.output[0]] = TensorInfo(list(a.t.dims), a.t.data_type)
    return out


def _unique_names(nodes: list[onnx.NodeProto]) -> list[str]:
    seen: dict[str, int] = {}
    names = []
    for idx, n in enumerate(nodes):
        name = n.name or f"{n.op_type}_{idx}"
        if name in seen:
            name = f"{name}__{idx}"
        seen[name] = idx
        names.append(name)
    return names


def _topological(nodes: list[onnx.NodeProto], available: set[str]) -> tuple[list[int], bool]:
    """The file order when it is valid, else a stable Kahn order (lowest file index first)."""
    produced_by = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            if o:
                produced_by[o] = i
    ok, have = True, set(available)
    for n in nodes:
        if any(t and t not in have and t in produced_by for t in n.input):
            ok = False
            break
        have.update(o for o in n.output if o)
    if ok:
        return list(range(len(nodes))), True
    import heapq
    indeg = [0] * len(nodes)
    succ: list[list[int]] = [[] for _ in nodes]
    for i, n in enumerate(nodes):
        preds = {produced_by[t] for t in n.input if t in produced_by and produced_by[t] != i}
        indeg[i] = len(preds)
        for p in preds:
            succ[p].append(i)
    heap = [i for i in range(len(nodes)) if indeg[i] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        i = heapq.heappop(heap)
        order.append(i)
        for s in succ[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, s)
    if len(order) != len(nodes):
        raise StageError("the graph has a cycle (or a node consumes its own output): not a valid ONNX DAG")
    return order, False


def _outer_reads(node: onnx.NodeProto) -> list[str]:
    """Tensors a control-flow node's subgraphs read from the enclosing scope (their implicit inputs)."""
    out: list[str] = []
    for a in node.attribute:
        if a.type != onnx.AttributeProto.GRAPH:
            continue
        sub = a.g
        local = {i.name for i in sub.input} | {t.name for t in sub.initializer}
        for n in sub.node:
            out += [t for t in list(n.input) + _outer_reads(n) if t and t not in local and t not in out]
            local.update(n.output)
    return out


def _scalar_constants(g: onnx.GraphProto) -> dict[str, float]:
    vals = {}
    tensors = [(t.name, t) for t in g.initializer if t.data_location != onnx.TensorProto.EXTERNAL]
    tensors += [(n.output[0], a.t) for n in g.node if n.op_type == "Constant" for a in n.attribute if a.name == "value"]
    for name, t in tensors:
        if int(np.prod(t.dims, dtype=np.int64)) == 1:
            try:
                vals[name] = float(numpy_helper.to_array(t).reshape(-1)[0])
            except Exception:  # noqa: BLE001 - odd encodings are simply not known scalars
                pass
    return vals


def subgraph_view(body: onnx.GraphProto, outer: Graph) -> Graph:
    """A Graph over a control-flow body whose tensors fall back on the enclosing graph's shapes."""
    m = onnx.ModelProto()
    m.graph.CopyFrom(body)
    sub = build_graph(m)
    sub.tensors = {**outer.tensors, **sub.tensors}
    sub.const_values = {**outer.const_values, **sub.const_values}
    return sub


def build_graph(model: onnx.ModelProto) -> Graph:
    g = model.graph
    inits = _initializer_names(g)
    inputs = [i.name for i in g.input if i.name not in inits]
    order, file_order = _topological(list(g.node), set(inits) | set(i.name for i in g.input))
    nodes = [g.node[i] for i in order]
    names = _unique_names(list(g.node))
    names = [names[i] for i in order]
    producer: dict[str, int] = {}
    consumers: dict[str, list[int]] = {}
    implicit = {pos: _outer_reads(n) for pos, n in enumerate(nodes) if n.op_type in ("If", "Loop", "Scan")}
    for pos, n in enumerate(nodes):
        for o in n.output:
            if o:
                producer[o] = pos
        for t in list(n.input) + implicit.get(pos, []):
            if t:
                consumers.setdefault(t, []).append(pos)
    return Graph(model=model, nodes=nodes, names=names, tensors=_tensor_infos(model), initializers=inits,
                 graph_inputs=inputs, graph_outputs=[o.name for o in g.output],
                 producer=producer, consumers=consumers, file_order=file_order,
                 implicit={k: v for k, v in implicit.items() if v}, const_values=_scalar_constants(g))


def constant_tensors(g: Graph) -> set[str]:
    """Initializers, Constant outputs and everything computed from them alone (weights behind Identity, Cast,
    DequantizeLinear, Reshape ...): they travel with the part that uses them and count as weights."""
    const = set(g.initializers)
    for n in g.nodes:  # topological order: a node's inputs are decided before its outputs
        ins = [t for t in n.input if t]
        if all(t in const for t in ins) and n.op_type not in RANDOM_OPS:
            const.update(o for o in n.output if o)
    return const


def shape_tensors(g: Graph, consts: set[str]) -> set[str]:
    """Outputs of shape arithmetic: Shape/Size results and whatever is computed from them (with constants)
    alone, e.g. Shape -> Gather -> Unsqueeze -> Concat feeding a Reshape. Zero FLOPs, marked as shape ops."""
    shp: set[str] = set()
    for n in g.nodes:
        ins = [t for t in n.input if t]
        if n.op_type in ("Shape", "Size") or (ins and any(t in shp for t in ins)
                                               and all(t in shp or t in consts for t in ins)):
            shp.update(o for o in n.output if o)
    return shp


RANDOM_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}


def symbolic_dims(workload: dict, preset: str | None) -> dict[str, int]:
    dims = dict(workload.get("symbolic_dims") or {})
    if preset:
        presets = workload.get("presets") or {}
        if preset not in presets:
            raise StageError(f"unknown --preset {preset}: the workload file has {sorted(presets) or 'none'}")
        dims.update(presets[preset])
    return dims


def prepare(path: str | Path, overrides: list[str] | None = None, workload: str | Path | None = None,
            preset: str | None = None) -> tuple[Graph, dict[str, list[int]]]:
    """Load, fix input shapes (overrides > preset > workload symbolic_dims > the file's own), infer, index."""
    model = load_model(path)
    wl = load_workload(workload)
    shapes = resolve_input_shapes(model, parse_shape_overrides(overrides or []), symbolic_dims(wl, preset))
    fix_input_shapes(model, shapes)
    return build_graph(infer_shapes(model)), shapes
