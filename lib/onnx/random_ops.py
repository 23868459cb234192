"""Random ops (RandomNormal(Like), RandomUniform(Like), Bernoulli, Multinomial): ONNX Runtime seeds each one's
generator from the node's `seed` attribute, else from the clock, and advances it at every run. 01 says when a
profiled model draws random numbers (its outputs, and with them its latency, can vary); 08 gives every such
node without a seed a fixed one, the same in full.onnx and in the part that holds it, so that a correct split
composes exactly (lib/split/runner.py runs each session fresh, once)."""
from __future__ import annotations

import onnx
from onnx import helper

from lib.onnx.ops import lookup
from lib.onnx.reader import attribute_subgraphs

FIRST_SEED = 29.0      # seeds given: FIRST_SEED + k for the k-th unseeded random node, in graph order


def _is_random(n: onnx.NodeProto) -> bool:
    op = lookup(n)          # the registry's `random` flag (default domain: lookup keys by domain)
    return op is not None and op.random


def random_nodes(graph: onnx.GraphProto) -> list[str]:
    """The random nodes of a graph and its If/Loop/Scan bodies (names, or op types where unnamed)."""
    out = []
    for n in graph.node:
        if _is_random(n):
            out.append(n.name or n.op_type)
        for a in n.attribute:
            for sub in attribute_subgraphs(a):
                out.extend(random_nodes(sub))
    return out


def seed_random_nodes(nodes: list[onnx.NodeProto]) -> list[str]:
    """Give each random node without a `seed` attribute a fixed one (in place; bodies included); the names
    seeded. Nodes that already carry a seed keep it."""
    seeded: list[str] = []

    def visit(n: onnx.NodeProto) -> None:
        if _is_random(n) and not any(a.name == "seed" for a in n.attribute):
            n.attribute.append(helper.make_attribute("seed", FIRST_SEED + len(seeded)))
            seeded.append(n.name or n.op_type)
        for a in n.attribute:
            for sub in attribute_subgraphs(a):
                for m in sub.node:
                    visit(m)
    for n in nodes:
        visit(n)
    return seeded
