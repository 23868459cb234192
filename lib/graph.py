"""The indexed graph: stable node ids, topological order, producer/consumer index, tensor types and shapes.

Loading and shape resolution live in lib/onnx_io.py (the graph without its weights' bytes) and
lib/shapes.py (input shapes, inference with data propagation and its fallbacks).
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from .errors import StageError
from .onnx_io import read_light

SUB_BYTE = {TensorProto.INT4: 4, TensorProto.UINT4: 4}
for _name in ("FLOAT4E2M1",):
    if hasattr(TensorProto, _name):
        SUB_BYTE[getattr(TensorProto, _name)] = 4
RANDOM_OPS = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli"}
CONTROL_FLOW = {"If", "Loop", "Scan"}
MAX_VALUE_ELEMENTS = 4096      # constants kept as values (shape arithmetic, conditions, trip counts)


def load_model(path) -> onnx.ModelProto:
    """The model's graph, weights' payloads not read (lib/onnx_io.py)."""
    return read_light(path).model


def elem_size(elem_type: int) -> int | None:
    """Bytes per element of an ONNX element type (None for strings, sub-byte and unknown types)."""
    if elem_type in (TensorProto.STRING, TensorProto.UNDEFINED) or elem_type in SUB_BYTE:
        return None
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).itemsize
    except Exception:  # noqa: BLE001 - unknown enum values
        return None


def dtype_name(elem_type: int) -> str:
    try:
        return TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return "unknown"


@dataclass
class TensorInfo:
    shape: list[int] | None      # None when unknown; every dim >= 0 (lib/validate.py refuses the rest)
    elem_type: int

    @property
    def numel(self) -> int | None:
        return None if self.shape is None else math.prod(self.shape)   # exact: Python ints never wrap

    @property
    def nbytes(self) -> int | None:
        n = self.numel
        if n is None:
            return None
        if self.elem_type in SUB_BYTE:
            return (n * SUB_BYTE[self.elem_type] + 7) // 8
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
    values: dict[str, np.ndarray] = field(default_factory=dict)  # small tensors whose values are known
    loop_trips: dict[str, int] = field(default_factory=dict)     # Loop first output -> executed trip count
    shape_source: dict[str, str] = field(default_factory=dict)   # tensor -> where its shape came from

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

    def value_of(self, name: str):
        return self.values.get(name)


def initializer_names(graph: onnx.GraphProto) -> set[str]:
    return {t.name for t in graph.initializer} | {t.values.name for t in graph.sparse_initializer}


def real_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that are fed at run time (IR < 4 exporters also list every initializer as an input)."""
    inits = initializer_names(model.graph)
    return [i for i in model.graph.input if i.name not in inits]


def _tensor_infos(g: onnx.GraphProto) -> dict[str, TensorInfo]:
    out: dict[str, TensorInfo] = {}
    for vi in list(g.input) + list(g.value_info) + list(g.output):
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
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


def _unique_names(nodes) -> list[str]:
    seen: set[str] = set()
    names = []
    for idx, n in enumerate(nodes):
        name = n.name or f"{n.op_type}_{idx}"
        if name in seen:
            name = f"{name}__{idx}"
        seen.add(name)
        names.append(name)
    return names


def _topological(nodes, available: set[str], implicit: dict[int, list[str]]) -> tuple[list[int], bool]:
    """The file order when it is valid, else a stable Kahn order (lowest file index first)."""
    produced_by: dict[str, int] = {}
    for i, n in enumerate(nodes):
        for o in n.output:
            if o:
                produced_by[o] = i
    reads = [[t for t in list(n.input) + implicit.get(i, []) if t] for i, n in enumerate(nodes)]
    have = set(available)
    ok = True
    for i, n in enumerate(nodes):
        if any(t not in have and t in produced_by for t in reads[i]):
            ok = False
            break
        have.update(o for o in n.output if o)
    if ok:
        return list(range(len(nodes))), True
    indeg = [0] * len(nodes)
    succ: list[list[int]] = [[] for _ in nodes]
    for i in range(len(nodes)):
        preds = {produced_by[t] for t in reads[i] if t in produced_by}
        if i in preds:
            raise StageError(f"node {nodes[i].name or nodes[i].op_type!r} reads its own output: the graph has a cycle")
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
        stuck = next(i for i in range(len(nodes)) if indeg[i] > 0)
        raise StageError(f"the graph has a cycle through node {nodes[stuck].name or nodes[stuck].op_type!r}: "
                         f"not a valid ONNX DAG")
    return order, False


def outer_reads(node: onnx.NodeProto) -> list[str]:
    """Tensors a control-flow node's subgraphs read from the enclosing scope (their implicit inputs)."""
    out: list[str] = []
    for a in node.attribute:
        for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
            local = {i.name for i in sub.input} | {t.name for t in sub.initializer}
            for n in sub.node:
                out += [t for t in list(n.input) + outer_reads(n) if t and t not in local and t not in out]
                local.update(n.output)
            out += [o.name for o in sub.output if o.name not in local and o.name not in out]
    return out


def _small_values(g: onnx.GraphProto) -> dict[str, np.ndarray]:
    vals = {}
    tensors = [(t.name, t) for t in g.initializer]
    tensors += [(n.output[0], a.t) for n in g.node if n.op_type == "Constant" and n.output
                for a in n.attribute if a.name == "value"]
    for name, t in tensors:
        if t.data_location == TensorProto.EXTERNAL or math.prod(t.dims) > MAX_VALUE_ELEMENTS:
            continue
        try:
            vals[name] = numpy_helper.to_array(t)
        except Exception:  # noqa: BLE001 - odd encodings are simply not known values
            pass
    return vals


def subgraph_view(body: onnx.GraphProto, outer: Graph) -> Graph:
    """A Graph over a control-flow body whose tensors fall back on the enclosing graph's shapes and values."""
    m = onnx.ModelProto()
    m.graph.CopyFrom(body)
    sub = build_graph(m, outer_scope=set(outer.tensors) | set(outer.producer))
    sub.tensors = {**outer.tensors, **sub.tensors}
    sub.values = {**outer.values, **sub.values}
    return sub


def build_graph(model: onnx.ModelProto, outer_scope: set[str] = frozenset()) -> Graph:
    g = model.graph
    inits = initializer_names(g)
    implicit_all = {i: outer_reads(n) for i, n in enumerate(g.node) if n.op_type in CONTROL_FLOW}
    order, file_order = _topological(list(g.node), inits | {i.name for i in g.input} | set(outer_scope), implicit_all)
    nodes = [g.node[i] for i in order]
    all_names = _unique_names(g.node)
    names = [all_names[i] for i in order]
    implicit = {pos: implicit_all[i] for pos, i in enumerate(order) if implicit_all.get(i)}
    producer: dict[str, int] = {}
    consumers: dict[str, list[int]] = {}
    for pos, n in enumerate(nodes):
        for o in n.output:
            if o:
                producer[o] = pos
        for t in n.input:
            if t:
                consumers.setdefault(t, []).append(pos)
        for t in implicit.get(pos, ()):
            consumers.setdefault(t, []).append(pos)
    return Graph(model=model, nodes=nodes, names=names, tensors=_tensor_infos(g), initializers=inits,
                 graph_inputs=[i.name for i in g.input if i.name not in inits], graph_outputs=[o.name for o in g.output],
                 producer=producer, consumers=consumers, file_order=file_order, implicit=implicit,
                 values=_small_values(g))


def constant_tensors(g: Graph) -> set[str]:
    """Initializers, Constant outputs and everything computed from them alone (weights behind Identity, Cast,
    DequantizeLinear, Reshape, ConstantOfShape, Expand, Tile ...): weights that travel with the part that uses
    them, never link traffic."""
    const = set(g.initializers)
    for n in g.nodes:  # topological order: a node's inputs are decided before its outputs
        ins = [t for t in n.input if t]
        if n.op_type not in RANDOM_OPS and n.op_type not in CONTROL_FLOW and all(t in const for t in ins):
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
