"""Refuse a structurally invalid graph before analysing it: figures computed on a graph ONNX Runtime would refuse
mean nothing. One StageError naming the node (or tensor) and the rule.

onnx.checker is not the gate: real exports are often not checker-clean (Model Zoo IR-3 files, contrib ops,
missing value_info types) yet run fine in ONNX Runtime. These are the rules both agree on, checked in
O(nodes + edges), recursively into If/Loop/Scan bodies with their outer scope:
- every node input is produced by a node, an initializer or a graph input (outer scope for bodies);
- one producer per tensor; every graph output is produced;
- names, op types and domains are text (valid UTF-8);
- known element types; initializer dims >= 0 (a negative dim on an input or value_info means "dynamic" to
  some exporters and to ONNX Runtime: it is left unresolved, not refused); no tensor whose size is beyond
  any real machine (a dim of 2^62 is a corrupt file, not a model).
Cycles (self-loops included) are refused when the graph is ordered (lib/graph.py).
"""
from __future__ import annotations

import math
from itertools import chain

import onnx
from onnx import TensorProto

from .errors import StageError
from .graph import NodeTable

MAX_ELEMENTS = 2**48            # 256 Ti elements: larger than any accelerator's memory by orders of magnitude
KNOWN_TYPES = set(TensorProto.DataType.values()) - {TensorProto.UNDEFINED}


def _label(g: onnx.GraphProto, i: int) -> str:
    n = g.node[i]
    name = n.name if isinstance(n.name, str) and n.name else f"#{i}"
    return f"node {name} ({n.op_type if isinstance(n.op_type, str) else repr(n.op_type)})"


def _check_text(g: onnx.GraphProto, where: str, lists) -> None:
    """Protobuf hands back bytes for a string field that is not valid UTF-8: a corrupt file."""
    for what, values in lists:
        for i, v in enumerate(values):
            if type(v) is bytes:
                raise StageError(f"{where}{what} #{i} is not valid UTF-8 text ({v[:40]!r}): the model file is corrupt")


def _check_dims(dims, what: str) -> None:
    if any(d < 0 for d in dims):
        raise StageError(f"{what} has a negative dim {list(dims)}: the model file is corrupt")
    if dims and math.prod(dims) > MAX_ELEMENTS:
        raise StageError(f"{what} has {math.prod(dims):.3g} elements (dims {list(dims)}): not a real model")


def _check_value_infos(vis, where: str) -> None:
    for vi in vis:
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        if tt.elem_type not in KNOWN_TYPES and tt.elem_type != TensorProto.UNDEFINED:
            raise StageError(f"{where}tensor {vi.name!r} has unknown element type {tt.elem_type}")
        if tt.HasField("shape"):
            # negative dims mean "dynamic" to some exporters (Paddle) and to ONNX Runtime: left unresolved
            _check_dims([d.dim_value for d in tt.shape.dim if d.dim_value > 0], f"{where}tensor {vi.name!r}")


def _check_graph(g: onnx.GraphProto, outer: set[str], where: str, table: NodeTable | None = None) -> None:
    table = table or NodeTable.of(g)
    ins, outs = table.inputs, table.outputs
    _check_text(g, where, (("op type of node", table.ops), ("domain of node", table.domains),
                           ("name of node", table.names), ("tensor name", chain.from_iterable(ins + outs)),
                           ("value name", [vi.name for vi in chain(g.input, g.output, g.value_info)]),
                           ("initializer name", [t.name for t in g.initializer])))
    _check_value_infos(chain(g.input, g.output, g.value_info), where)
    for t in g.initializer:
        if t.data_type not in KNOWN_TYPES:
            raise StageError(f"{where}initializer {t.name!r} has unknown element type {t.data_type}")
        _check_dims(list(t.dims), f"{where}initializer {t.name!r}")
    defined = {vi.name for vi in g.input} | {t.name for t in g.initializer}
    produced: dict[str, int] = {}
    for i, os_ in enumerate(outs):
        for o in os_:
            if o and (o in produced or o in defined):
                other = _label(g, produced[o]) if o in produced else "an initializer or graph input"
                raise StageError(f"{where}tensor {o!r} has two producers ({_label(g, i)} and {other})")
            produced[o] = i
    everything = defined | produced.keys() | outer
    for i, is_ in enumerate(ins):
        for t in is_:
            if t and t not in everything:
                raise StageError(f"{where}{_label(g, i)} reads {t!r}, which no node, initializer or input produces")
    for o in g.output:
        if o.name not in everything:
            raise StageError(f"{where}graph output {o.name!r} is not produced by any node")
    for i, n in enumerate(table.protos):
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH or a.type == onnx.AttributeProto.GRAPHS:
                for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)):
                    _check_graph(sub, everything, f"{where}{_label(g, i)} body {a.name}: ")
            elif a.type == onnx.AttributeProto.TENSOR:
                _check_dims(list(a.t.dims), f"{where}attribute tensor of {_label(g, i)}")


def validate(model: onnx.ModelProto, table: NodeTable | None = None) -> None:
    """StageError on the first structural defect (see the module docstring); `table`: the graph's nodes,
    when the caller already read them."""
    if not any(o.domain in ("", "ai.onnx") for o in model.opset_import):
        raise StageError("the model declares no opset for the default ONNX domain")
    _check_graph(model.graph, set(), "", table)
