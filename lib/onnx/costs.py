"""The walk that costs nodes: a node's registry entry gives its (FLOPs, MACs); a control-flow node's bodies are
walked here (their nodes costed the same way, nested bodies included) and their totals handed to its entry,
which only decides which body runs and how often. As fvcore's JitModelAnalysis owns the walk and its handles
never call back: no cost formula reaches into the walker (lib/onnx/ops.py imports nothing that imports it).
"""
from __future__ import annotations

from lib.onnx.graph import Graph, subgraph_view
from lib.onnx.ops import Cost, Op, lookup


def node_cost(node, g: Graph, op: Op | None = None) -> Cost | None:
    """(flops, macs) of one node, or None when the op (or a shape it needs) is unknown; op: its entry, when the
    caller looked it up."""
    op = lookup(node) if op is None else op
    if op is None:
        return None
    if not op.control_flow:
        return op.cost(node, g)
    bodies = {a.name: body_cost(a.g, g) for a in node.attribute if a.type == a.GRAPH}
    return op.cost(node, g, bodies)


def body_cost(body, g: Graph) -> Cost | None:
    """The summed cost of a subgraph's nodes (shapes and values from the enclosing graph), None when any is
    unknown."""
    sub = subgraph_view(body, g)
    flops = macs = 0.0
    for n in sub.nodes:
        c = node_cost(n, sub)
        if c is None:
            return None
        flops += c[0]
        macs += c[1]
    return flops, macs
