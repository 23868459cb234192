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

import onnx
from onnx import TensorProto

from .errors import StageError

MAX_ELEMENTS = 2**48            # 256 Ti elements: larger than any accelerator's memory by orders of magnitude
KNOWN_TYPES = set(TensorProto.DataType.values()) - {TensorProto.UNDEFINED}


def _text(value, what: str) -> str:
    if isinstance(value, bytes):
        raise StageError(f"{what} is not valid UTF-8 text ({value[:40]!r}): the model file is corrupt")
    return value


def _label(node, i: int) -> str:
    return f"node {node.name or f'#{i}'} ({node.op_type})"


def _check_type(vi, where: str) -> None:
    if not vi.type.HasField("tensor_type"):
        return
    tt = vi.type.tensor_type
    if tt.elem_type not in KNOWN_TYPES and tt.elem_type != TensorProto.UNDEFINED:
        raise StageError(f"{where} {vi.name!r} has unknown element type {tt.elem_type}")
    # a negative dim_value on an input/output/value_info is how some exporters (Paddle) write "dynamic":
    # ONNX Runtime accepts it as unknown, so do we; only sizes beyond any machine are refused here
    dims = [d.dim_value for d in tt.shape.dim if d.HasField("dim_value") and d.dim_value > 0]
    _check_dims(dims, f"{where} {vi.name!r}")


def _check_dims(dims, what: str) -> None:
    if any(d < 0 for d in dims):
        raise StageError(f"{what} has a negative dim {list(dims)}: the model file is corrupt")
    if dims and math.prod(dims) > MAX_ELEMENTS:
        raise StageError(f"{what} has {math.prod(dims):.3g} elements (dims {list(dims)}): not a real model")


def _check_graph(g: onnx.GraphProto, outer: set[str], where: str) -> None:
    available = set(outer)
    produced: dict[str, str] = {}
    for vi in g.input:
        _text(vi.name, f"{where}input name")
        _check_type(vi, f"{where}input")
        available.add(vi.name)
    for t in g.initializer:
        _text(t.name, f"{where}initializer name")
        if t.data_type not in KNOWN_TYPES:
            raise StageError(f"{where}initializer {t.name!r} has unknown element type {t.data_type}")
        _check_dims(list(t.dims), f"{where}initializer {t.name!r}")
        available.add(t.name)
    local_inits = {t.name for t in g.initializer} | {vi.name for vi in g.input}
    for vi in list(g.value_info) + list(g.output):
        _text(vi.name, f"{where}value name")
        _check_type(vi, f"{where}tensor")
    nodes = list(g.node)
    for i, n in enumerate(nodes):
        _text(n.op_type, f"{where}op type of node #{i}")
        _text(n.domain, f"{where}domain of node #{i}")
        _text(n.name, f"{where}name of node #{i}")
        for o in n.output:
            _text(o, f"{where}output of {_label(n, i)}")
            if not o:
                continue
            if o in produced or o in local_inits:
                raise StageError(f"{where}tensor {o!r} has two producers ({_label(n, i)} and "
                                 f"{produced.get(o, 'an initializer or graph input')})")
            produced[o] = _label(n, i)
    everything = available | set(produced)
    for i, n in enumerate(nodes):
        for t in n.input:
            _text(t, f"{where}input of {_label(n, i)}")
            if t and t not in everything:
                raise StageError(f"{where}{_label(n, i)} reads {t!r}, which no node, initializer or input produces")
        for a in n.attribute:
            _text(a.name, f"{where}attribute name of {_label(n, i)}")
            for k, sub in enumerate([a.g] if a.HasField("g") else list(a.graphs)):
                _check_graph(sub, everything, f"{where}{_label(n, i)} body {a.name}: ")
            if a.HasField("t"):
                _check_dims(list(a.t.dims), f"{where}attribute tensor of {_label(n, i)}")
    for o in g.output:
        if o.name not in everything:
            raise StageError(f"{where}graph output {o.name!r} is not produced by any node")


def validate(model: onnx.ModelProto) -> None:
    """StageError on the first structural defect (see the module docstring)."""
    if not any(o.domain in ("", "ai.onnx") for o in model.opset_import):
        raise StageError("the model declares no opset for the default ONNX domain")
    _check_graph(model.graph, set(), "")
