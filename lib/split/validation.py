"""What split validation needs from the model beyond the parts themselves (lib/split/runner.py does the check):

- the largest reduction length K of the model (a MatMul's inner dim, a Conv's Cin/group x kh x kw, a Reduce's
  reduced elements): the exactness bound grows like sqrt(K) ulps of the output's scale (runner.bound_ulps);
- random ops made deterministic: lib/onnx/random_ops.py (seed_random_nodes).
"""
from __future__ import annotations

import math

from lib.onnx.graph import Graph
from lib.onnx.costs import node_cost
from lib.onnx.ops import names_with

REDUCING_OPS = names_with("reduces")      # Reduce*, global pools (the registry's flag)


def reduction_size(g: Graph) -> int:
    """The longest sum any node computes (MACs per output element, or reduced elements per output)."""
    best = 1
    for node in g.nodes:
        out = g.tensors.get(node.output[0]) if node.output and node.output[0] else None
        if out is None or not out.numel:
            continue
        cost = node_cost(node, g)
        if cost is not None and cost[1]:
            best = max(best, math.ceil(cost[1] / out.numel))
        elif node.op_type in REDUCING_OPS:
            src = g.tensors.get(node.input[0]) if node.input else None
            if src is not None and src.numel:
                best = max(best, src.numel // out.numel)
    return int(best)
