"""The original nodes ONNX Runtime's common-subexpression elimination (CSE) removed.

ORT merges nodes that always compute the same value: same op and attributes, and inputs that are the same
tensor or equal constants. Consumers of the removed node then read the survivor's output. A removed node runs no
kernel, so the attribution must not walk into it: an Inception export whose weights are all ConstantOfShape
fills has identical 1x1 convs on one input, and the walk back from the next Concat kernel took the removed conv
(and its FLOPs) as that Concat's anchor.

Equal values are found by value numbering, as ORT does: a graph input is equal only to itself; a constant
(initializer or Constant node) of up to 8 elements is equal to one with the same type, dims and values, a
larger one only to itself (ORT 1.31 shares equal constants up to 8 elements and no larger, measured: two equal
9-element or 32 KB weights under two names stay two nodes); a node output is equal to the same output of an
identical node (same op, attributes and input values). Random ops, control flow and nodes with a graph output
are never merged.
"""
from __future__ import annotations

import math
from collections import defaultdict

import onnx

from lib.onnx.graph import CONTROL_FLOW, RANDOM_OPS, Graph

NEVER_MERGED = RANDOM_OPS | CONTROL_FLOW
SHARED_ELEMENTS = 8      # constants this small are equal by value (ORT's constant sharing); larger: by name


def _constant_key(name: str, t: onnx.TensorProto) -> tuple:
    if t.data_location == onnx.TensorProto.EXTERNAL or math.prod(t.dims) > SHARED_ELEMENTS:
        return ("tensor", name)
    bare = onnx.TensorProto()
    bare.CopyFrom(t)
    bare.name = ""
    return ("constant", bare.SerializeToString())


def identical_groups(g: Graph) -> list[list[int]]:
    """Groups (two or more positions, ascending) of nodes that compute the same values."""
    ids: dict[tuple, int] = {}           # value-numbering key -> number
    number: dict[str, int] = {}          # tensor -> its value number
    constants = {t.name: t for t in g.model.graph.initializer}
    outputs = set(g.graph_outputs)

    def value(t: str) -> int:
        if t not in number:
            key = _constant_key(t, constants[t]) if t in constants else ("tensor", t)
            number[t] = ids.setdefault(key, len(ids))
        return number[t]

    groups = defaultdict(list)
    t = g.table         # the fields read once (a protobuf field costs per read: 200k nodes took 4.3 s through them)
    for pos, i in enumerate(g.order):
        op, outs, attrs = t.ops[i], t.outputs[i], t.protos[i].attribute
        value_attr = [a.t for a in attrs if a.name == "value"] if op == "Constant" and outs else []
        if value_attr:                   # ORT loads a Constant node as an initializer
            key = _constant_key(outs[0], value_attr[0])
        elif (op in NEVER_MERGED or not outs or any(o in outputs for o in outs)
              or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in attrs)):
            key = ("node", pos)
        else:
            key = (t.domains[i], op, tuple(value(x) if x else -1 for x in t.inputs[i]),
                   tuple(a.SerializeToString() for a in attrs) if attrs else ())
        node_id = ids.setdefault(key, len(ids))
        groups[node_id].append(pos)
        for j, o in enumerate(outs):
            if o:
                number[o] = node_id if value_attr else ids.setdefault(("output", node_id, j), len(ids))
    return [ps for ps in groups.values() if len(ps) > 1]


def merged_away(g: Graph, ran: set[int]) -> set[int]:
    """Positions of the nodes ORT removed as duplicates. ran: positions known to have run (a kernel writes their
    output). In each group of identical nodes one survives: one that ran, else one whose output a surviving
    node reads (a Relu's kernel tells which Conv before it survived), else the first; the others that did not
    run are removed. Groups are decided consumers first."""
    groups = sorted(identical_groups(g), key=lambda ps: -ps[0])    # a group's consumers all lie after its first
    removed: set[int] = set()
    for ps in groups:
        def rank(p: int) -> tuple:
            read = any(c not in removed for o in g.node_outputs[p] for c in g.consumers.get(o, ()))
            return (p not in ran, not read, p)
        survivor = min(ps, key=rank)
        removed.update(p for p in ps if p != survivor and p not in ran)
    return removed
