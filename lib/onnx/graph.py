"""The indexed graph: stable node ids, topological order, producer/consumer index, tensor types and shapes.

Loading and shape resolution live in lib/onnx/reader.py (the graph without its weights' bytes) and
lib/onnx/shapes.py (input shapes, inference with data propagation and its fallbacks).
"""
from __future__ import annotations

import functools
import heapq
import math
from collections import ChainMap
from collections.abc import Container
from dataclasses import dataclass, field
from itertools import chain, compress, repeat

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from lib.errors import StageError
from lib.onnx.ops import names_with
from lib.onnx.reader import SUB_BYTE, attr, attribute_subgraphs, elem_size, read_light  # noqa: F401 (attr: re-exported)

RANDOM_OPS = names_with("random")
CONTROL_FLOW = names_with("control_flow")
SHAPE_READERS = names_with("reads_shape")      # Shape, Size
MAX_VALUE_ELEMENTS = 4096      # constants kept as values (shape arithmetic, conditions, trip counts)


def load_model(path) -> onnx.ModelProto:
    """The model's graph, weights' payloads not read (lib/onnx/reader.py)."""
    return read_light(path).model


@functools.cache
def dtype_name(elem_type: int) -> str:
    try:
        return TensorProto.DataType.Name(elem_type).lower()
    except ValueError:
        return "unknown"


class TensorInfo:
    """A tensor's element type and shape (None when unknown; every dim >= 0), and its exact size in bytes
    (Python ints never wrap; None when the shape or the element size is unknown)."""
    __slots__ = ("shape", "elem_type", "nbytes")

    def __init__(self, shape: list[int] | None, elem_type: int):
        self.shape, self.elem_type = shape, elem_type
        self.nbytes = None if shape is None else _nbytes(math.prod(shape), elem_type)

    @property
    def numel(self) -> int | None:
        return None if self.shape is None else math.prod(self.shape)


def _nbytes(n: int, elem_type: int) -> int | None:
    if elem_type in SUB_BYTE:
        return (n * SUB_BYTE[elem_type] + 7) // 8
    size = elem_size(elem_type)
    return None if size is None else n * size


class NodeView:
    """A node's fields as Python objects, read from the protobuf once: the cost formulas read them for every
    node, and each protobuf field access costs microseconds. Duck-types NodeProto for what they use."""
    __slots__ = ("proto", "op_type", "domain", "name", "input", "output")

    def __init__(self, proto, op_type, domain, name, inputs, outputs):
        self.proto, self.op_type, self.domain, self.name = proto, op_type, domain, name
        self.input, self.output = inputs, outputs

    @property
    def attribute(self):
        return self.proto.attribute

    @property
    def metadata_props(self):
        return self.proto.metadata_props


@dataclass
class NodeTable:
    """Every node's op type, domain, name, inputs and outputs (raw: "" marks an absent optional input)."""
    protos: list
    ops: list[str]
    domains: list[str]
    names: list[str]
    inputs: list[list[str]]
    outputs: list[list[str]]

    @classmethod
    def of(cls, graph: onnx.GraphProto) -> "NodeTable":
        protos = list(graph.node)
        return cls(protos, [n.op_type for n in protos], [n.domain for n in protos], [n.name for n in protos],
                   [n.input[:] for n in protos], [n.output[:] for n in protos])   # [:]: a list, cheaper than list()

    def view(self, i: int) -> NodeView:
        return NodeView(self.protos[i], self.ops[i], self.domains[i], self.names[i], self.inputs[i], self.outputs[i])


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
    node_inputs: list[list[str]] = field(default_factory=list)    # per position: inputs incl. implicit, no ""
    node_outputs: list[list[str]] = field(default_factory=list)   # per position: outputs, no ""
    values: dict[str, np.ndarray] = field(default_factory=dict)  # small tensors whose values are known
    shape_source: dict[str, str] = field(default_factory=dict)   # tensor -> where its shape came from
    table: NodeTable | None = None                               # the nodes' fields, read once (file order)
    order: list[int] = field(default_factory=list)               # position -> index in `table`
    op_types: list[str] = field(default_factory=list)            # per position (a proto's field costs per read)

    def view(self, pos: int) -> NodeView:
        """The node at a position as a NodeView: made when asked (the metrics ask in two processes)."""
        return self.table.view(self.order[pos])

    def inputs(self, i: int) -> list[str]:
        return self.node_inputs[i]

    def preds(self, i: int) -> list[int]:
        out = []
        for t in self.node_inputs[i]:
            p = self.producer.get(t)
            if p is not None and p not in out:
                out.append(p)
        return out

    def succs(self, i: int) -> list[int]:
        out = []
        for t in self.node_outputs[i]:
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


def tensor_info(vi) -> TensorInfo | None:
    """A ValueInfoProto's type and shape (None for sequence/optional/map types). Fast path first: every
    protobuf field access costs, and 200k-node graphs have 200k of these."""
    t = vi.type
    if not t.HasField("tensor_type"):
        return None
    tt = t.tensor_type
    if not tt.HasField("shape"):
        return TensorInfo(None, tt.elem_type)
    dims = tt.shape.dim
    shape = [d.dim_value for d in dims]
    # a dim without a value (symbolic or unset) reads as 0 (or negative in Paddle exports): tell them apart
    if shape and (min(shape) < 0 or 0 in shape and any(d.WhichOneof("value") != "dim_value" for d in dims)):
        shape = None
    return TensorInfo(shape, tt.elem_type)


def _tensor_infos(g: onnx.GraphProto, other: set[str] | None = None, constants: bool = True) -> dict[str, TensorInfo]:
    """TensorInfo per typed tensor; `other` collects the value_info names typed as something else (sequences).
    Tensors of one type and shape share one (never mutated) TensorInfo, found by the TypeProto's bytes:
    serialising it costs a fifth of reading its fields, and graphs repeat few types. constants=False: without
    the Constant outputs inference left out (add_constant_infos(), by a caller that has read the nodes)."""
    out: dict[str, TensorInfo] = {}
    by_type: dict[bytes, TensorInfo | None] = {}
    for k, vis in enumerate((g.input, g.value_info, g.output)):
        for vi in vis:
            key = vi.type.SerializeToString()
            info = by_type.get(key, by_type)
            if info is by_type:
                info = by_type[key] = tensor_info(vi)
            if info is not None:
                # an output declared without a shape keeps the shape its value_info has (a branch's output)
                if info.shape is None and vi.name in out:
                    continue
                out[vi.name] = info
            elif k == 1 and other is not None and vi.type.WhichOneof("value") is not None:
                other.add(vi.name)
    for t in g.initializer:
        out[t.name] = TensorInfo(list(t.dims), t.data_type)
    if constants:
        add_constant_infos(out, g)
    return out


def add_constant_infos(out: dict[str, TensorInfo], g: onnx.GraphProto, table: NodeTable | None = None) -> None:
    """Constant outputs: shape from the attribute, even when inference left them out."""
    for name, t in constant_values(g, table):
        if name not in out:
            out[name] = TensorInfo(list(t.dims), t.data_type)


def constant_values(g: onnx.GraphProto, table: NodeTable | None = None) -> list[tuple[str, onnx.TensorProto]]:
    """(output, tensor) of each Constant node with a `value`. `table`: the graph's nodes, when the caller has
    read them (200k protobuf nodes are not walked again)."""
    protos = table.protos if table is not None else list(g.node)
    ops = table.ops if table is not None else [n.op_type for n in protos]
    at = compress(range(len(ops)), map("Constant".__eq__, ops))     # (in C: 200k nodes)
    return [(protos[i].output[0], a.t) for i in at if protos[i].output
            for a in protos[i].attribute if a.name == "value"]


def _unique_names(nodes) -> list[str]:
    """The node ids of a node list (protos or views), as build_graph assigns them."""
    nodes = list(nodes)
    return unique_names([n.name for n in nodes], [n.op_type for n in nodes])


def unique_names(raw: list[str], ops: list[str]) -> list[str]:
    """Node name, or op type + file index when unnamed; a repeated name gets __<index>."""
    if "" not in raw and len(set(raw)) == len(raw):     # every node named, once (checked in C)
        return list(raw)
    seen: set[str] = set()
    names = []
    for idx, (name, op) in enumerate(zip(raw, ops)):
        name = name or f"{op}_{idx}"
        if name in seen:
            name = f"{name}__{idx}"
        seen.add(name)
        names.append(name)
    return names


def _positions(lists: list[list]) -> np.ndarray:
    """The index of the list each item of `lists` is in, for the items flattened (numpy: 200k nodes' edges)."""
    return np.repeat(np.arange(len(lists), dtype=np.int64), np.fromiter(map(len, lists), np.int64, len(lists)))


def _producers(outs: list[list[str]]) -> dict[str, int]:
    """tensor -> index of the list (node) that outputs it; outs without "" (an absent optional output)."""
    return dict(zip(chain.from_iterable(outs), _positions(outs).tolist()))


def _topological(ins: list[list[str]], outs: list[list[str]], available: set[str], names: list[str],
                 outer: Container[str] = frozenset(),
                 produced_by: dict[str, int] | None = None) -> tuple[list[int], bool]:
    """The file order when it is valid, else a stable Kahn order (lowest file index first). ins include the
    implicit inputs of control-flow bodies; `outer`: the enclosing scopes' tensors (a body's reads of them);
    `produced_by`: _producers(outs), when the caller has it."""
    produced_by = _producers(outs) if produced_by is None else produced_by
    # the file order is valid when no node reads a tensor produced by itself or a later node (unless the
    # tensor is also an input, a weight or an outer tensor): compared as arrays, one item per edge
    flat = list(chain.from_iterable(ins))
    prod = np.fromiter(map(produced_by.get, flat, repeat(-1)), np.int64, len(flat))
    late = np.flatnonzero(prod >= _positions(ins)).tolist()
    if all(flat[k] in available or flat[k] in outer for k in late):
        return list(range(len(ins))), True
    indeg = [0] * len(ins)
    succ: list[list[int]] = [[] for _ in ins]
    for i, is_ in enumerate(ins):
        preds = {produced_by[t] for t in is_ if t in produced_by}
        if i in preds:
            raise StageError(f"node {names[i]!r} reads its own output: the graph has a cycle")
        indeg[i] = len(preds)
        for p in preds:
            succ[p].append(i)
    heap = [i for i in range(len(ins)) if indeg[i] == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        i = heapq.heappop(heap)
        order.append(i)
        for s in succ[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                heapq.heappush(heap, s)
    if len(order) != len(ins):
        stuck = next(i for i in range(len(ins)) if indeg[i] > 0)
        raise StageError(f"the graph has a cycle through node {names[stuck]!r}: not a valid ONNX DAG")
    return order, False


def outer_reads(node: onnx.NodeProto) -> list[str]:
    """Tensors a control-flow node's subgraphs read from the enclosing scope (their implicit inputs)."""
    out: dict[str, None] = {}          # ordered, O(1) membership
    for a in node.attribute:
        for sub in attribute_subgraphs(a):
            local = {i.name for i in sub.input} | {t.name for t in sub.initializer}
            for n in sub.node:
                out.update((t, None) for t in list(n.input) + outer_reads(n) if t and t not in local)
                local.update(n.output)
            out.update((o.name, None) for o in sub.output if o.name not in local)
    return list(out)


def _small_values(g: onnx.GraphProto, table: NodeTable | None = None) -> dict[str, np.ndarray]:
    vals = {}
    tensors = [(t.name, t) for t in g.initializer] + constant_values(g, table)
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
    sub = build_graph(m, outer_scope=ChainMap(outer.tensors, outer.producer))
    # the enclosing graph may know body tensors better (shapes found by inlining the branch taken); views,
    # not copies, of the enclosing graph's tables (a model with thousands of Ifs would copy them thousands of times)
    sub.tensors = ChainMap({t: i for t, i in sub.tensors.items() if i.shape is not None or t not in outer.tensors},
                           outer.tensors)
    sub.values = ChainMap(sub.values, outer.values)
    return sub


def build_graph(model: onnx.ModelProto, outer_scope: Container[str] = frozenset(),
                tensors: dict[str, TensorInfo] | None = None, table: NodeTable | None = None) -> Graph:
    """Index a graph in O(nodes + edges); `tensors` and `table` when the caller already read them."""
    g = model.graph
    table = table or NodeTable.of(g)
    inits = initializer_names(g)
    implicit_all = {i: outer_reads(table.protos[i]) for i, op in enumerate(table.ops) if op in CONTROL_FLOW}
    # without "" (an absent optional input); lists without one are shared with the table (neither is changed)
    ins = [is_ if all(is_) else [t for t in is_ if t] for is_ in table.inputs]
    for i, extra in implicit_all.items():
        ins[i] = ins[i] + extra
    outs = [os_ if all(os_) else [o for o in os_ if o] for os_ in table.outputs]
    names, ops = unique_names(table.names, table.ops), table.ops
    producer = _producers(outs)
    order, file_order = _topological(ins, outs, inits | {i.name for i in g.input}, names, outer_scope, producer)
    if not file_order:
        names, ins, outs, ops = ([x[i] for i in order] for x in (names, ins, outs, ops))
        producer = _producers(outs)
    implicit = {pos: implicit_all[i] for pos, i in enumerate(order) if implicit_all.get(i)}
    consumers: dict[str, list[int]] = {}
    for pos, is_ in enumerate(ins):
        for t in is_:
            c = consumers.get(t)
            if c is None:
                consumers[t] = [pos]
            elif c[-1] != pos:
                c.append(pos)
    return Graph(model=model, nodes=[table.protos[i] for i in order], names=names,
                 tensors=tensors if tensors is not None else _tensor_infos(g), initializers=inits,
                 graph_inputs=[i.name for i in g.input if i.name not in inits], graph_outputs=[o.name for o in g.output],
                 producer=producer, consumers=consumers, file_order=file_order, implicit=implicit,
                 values=_small_values(g, table), node_inputs=ins, node_outputs=outs, table=table, order=order,
                 op_types=ops)


def constant_tensors(g: Graph) -> set[str]:
    """Initializers, Constant outputs and everything computed from them alone (weights behind Identity, Cast,
    DequantizeLinear, Reshape, ConstantOfShape, Expand, Tile ...): weights that travel with the part that uses
    them, never link traffic."""
    const = set(g.initializers)
    skip = RANDOM_OPS | CONTROL_FLOW
    for op, ins, outs in zip(g.op_types, g.node_inputs, g.node_outputs):  # topological: inputs decided first
        if all(t in const for t in ins) and op not in skip:
            const.update(outs)
    return const


def shape_tensors(g: Graph, consts: set[str]) -> set[str]:
    """Outputs of shape arithmetic: Shape/Size results and whatever is computed from them (with constants)
    alone, e.g. Shape -> Gather -> Unsqueeze -> Concat feeding a Reshape. Zero FLOPs, marked as shape ops."""
    shp: set[str] = set()
    for op, ins, outs in zip(g.op_types, g.node_inputs, g.node_outputs):
        if op in SHAPE_READERS or (not shp.isdisjoint(ins) and all(t in shp or t in consts for t in ins)):
            shp.update(outs)
    return shp


@dataclass
class GraphArrays:
    """The graph's structure as arrays (stage 02 saves it as graph.npz): what stages 04, 05 and 07 need,
    loaded in milliseconds instead of parsing and indexing the model again. Tensors are the node outputs and
    the graph inputs; positions are the topological order."""
    names: np.ndarray          # node ids (object array of str)
    t_names: np.ndarray        # tensor names (object array of str)
    t_prod: np.ndarray         # producing node position, -1 for a graph input
    t_nbytes: np.ndarray       # bytes, NaN when unknown
    t_const: np.ndarray        # computable from constants alone (a weight: never link traffic)
    t_output: np.ndarray       # a graph output
    cons_ptr: np.ndarray       # CSR: consumers of tensor k are cons[cons_ptr[k]:cons_ptr[k+1]] (sorted, distinct)
    cons: np.ndarray
    in_ptr: np.ndarray         # CSR: tensors node i reads are in_t[in_ptr[i]:in_ptr[i+1]] (incl. implicit)
    in_t: np.ndarray

    def preds(self) -> list[list[int]]:
        prod = self.t_prod[self.in_t]
        out = []
        for i in range(len(self.names)):
            ps = prod[self.in_ptr[i]:self.in_ptr[i + 1]]
            out.append(list(dict.fromkeys(int(p) for p in ps if p >= 0)))
        return out

    def output_nodes(self) -> np.ndarray:
        """Positions of the nodes that write graph outputs (one per output, repeated if a node writes several)."""
        return self.t_prod[self.t_output & (self.t_prod >= 0)]

    def live(self) -> np.ndarray:
        """Per node: one of its outputs reaches a graph output. ORT runs a node nothing reads all the same (an
        exporter's leftover); a part exported without it does not need it, and no critical path ends there."""
        live = np.zeros(len(self.names), bool)
        live[self.output_nodes()] = True
        prod = self.t_prod[self.in_t]
        for i in range(len(self.names) - 1, -1, -1):     # consumers come later in topological order
            if live[i]:
                ps = prod[self.in_ptr[i]:self.in_ptr[i + 1]]
                live[ps[ps >= 0]] = True
        return live

    def succs(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in range(len(self.names))]
        for i, ps in enumerate(self.preds()):
            for p in ps:
                out[p].append(i)
        return out

    run_id: str = ""           # the run of stage 02 that made it

    TEXT = ("names", "t_names")

    def save(self, path) -> None:
        """npz without pickles; names as UTF-8 bytes + offsets (a fixed-width unicode array would take the
        longest name's width for every name)."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in self.TEXT + ("run_id",)}
        for k in self.TEXT:
            names = getattr(self, k).tolist()
            text = "".join(names)
            if text.isascii():      # one encode (checked in C): a name's bytes are its characters
                data, sizes = text.encode("ascii"), map(len, names)
            else:
                enc = [s.encode("utf-8") for s in names]
                data, sizes = b"".join(enc), map(len, enc)
            out[f"{k}_bytes"] = np.frombuffer(data, dtype=np.uint8)
            out[f"{k}_ptr"] = np.cumsum([0, *sizes], dtype=np.int64)
        out["run_id"] = np.frombuffer(self.run_id.encode(), dtype=np.uint8)
        np.savez(path, **out)

    @classmethod
    def load(cls, path) -> "GraphArrays":
        with np.load(path, allow_pickle=False) as d:
            kw = {k: d[k] for k in cls.__dataclass_fields__ if k not in cls.TEXT + ("run_id",)}
            for k in cls.TEXT:
                kw[k] = np.array(_decoded(d[f"{k}_bytes"], d[f"{k}_ptr"]), dtype=object)
            kw["run_id"] = d["run_id"].tobytes().decode()
        return cls(**kw)


def _decoded(blob: np.ndarray, ptr: np.ndarray) -> list[str]:
    """The names saved as UTF-8 bytes + offsets: with a line break put between them (in C) and split on it,
    when no name holds one (UTF-8 never has the byte 0x0A inside another character); else one by one."""
    raw = blob.tobytes()
    if len(ptr) < 2:
        return []
    if b"\n" not in raw:
        return np.insert(blob, ptr[1:-1], ord("\n")).tobytes().decode("utf-8").split("\n")
    return [raw[a:b].decode("utf-8") for a, b in zip(ptr[:-1].tolist(), ptr[1:].tolist())]


def graph_arrays(g: Graph, consts: set[str], run_id: str = "") -> GraphArrays:
    """Passes over the 200k-node graph's tensors and edges done in C (map, chain, numpy) where they can be."""
    n_in = len(g.graph_inputs)
    t_names = list(chain(g.graph_inputs, chain.from_iterable(g.node_outputs)))
    tid = dict(zip(t_names, range(len(t_names))))
    infos = list(map(g.tensors.get, t_names))
    cons_lists = list(map(g.consumers.get, t_names, repeat([])))
    flat_in = np.fromiter(map(tid.get, chain.from_iterable(g.node_inputs), repeat(-1)), np.int64)
    edge_node = _positions(g.node_inputs)
    kept = flat_in >= 0        # a weight is not a tensor of the arrays
    outputs = set(g.graph_outputs)
    return GraphArrays(
        names=np.array(g.names, dtype=object), t_names=np.array(t_names, dtype=object),
        # a node output's producer is the node it is listed under (one producer per tensor: validated)
        t_prod=np.concatenate([np.full(n_in, -1, dtype=np.int64), _positions(g.node_outputs)]),
        t_nbytes=np.array([None if i is None else i.nbytes for i in infos], dtype=float),    # None: NaN
        t_const=np.fromiter(map(consts.__contains__, t_names), bool, len(t_names)),
        t_output=np.fromiter(map(outputs.__contains__, t_names), bool, len(t_names)),
        cons_ptr=np.cumsum([0, *map(len, cons_lists)], dtype=np.int64),
        cons=np.fromiter(chain.from_iterable(cons_lists), np.int64),
        in_ptr=np.concatenate([[0], np.cumsum(np.bincount(edge_node[kept], minlength=len(g.node_inputs)))]),
        in_t=flat_in[kept], run_id=run_id)
