"""Random ops (RandomNormal(Like), RandomUniform(Like), Bernoulli, Multinomial, and Dropout in training mode):
ONNX Runtime seeds each one's generator from the node's `seed` attribute, else from the clock, and advances it at
every run. 01 says when a
profiled model draws random numbers (its outputs, and with them its latency, can vary); 08 gives every such
node without a seed a fixed one, the same in full.onnx and in the part that holds it, so that a correct split
composes exactly (lib/split/runner.py runs each session fresh, once)."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from lib.onnx.graph import constant_values
from lib.onnx.ops import lookup
from lib.onnx.reader import attribute_subgraphs

FIRST_SEED = 29.0      # seeds given: FIRST_SEED + k for the k-th unseeded random node, in graph order


def scalar_constants(graph: onnx.GraphProto | None) -> dict[str, np.ndarray]:
    """The one-value tensors of a graph's initializers and Constant nodes (a Dropout's training_mode)."""
    if graph is None:
        return {}
    tensors = [(t.name, t) for t in graph.initializer if not t.external_data] + constant_values(graph)
    return {name: numpy_helper.to_array(t) for name, t in tensors if np.prod(t.dims, dtype=int) == 1}


def _is_random(n: onnx.NodeProto, consts: dict[str, np.ndarray]) -> bool:
    if n.op_type == "Dropout" and n.domain in ("", "ai.onnx"):
        # it draws its mask in training mode only (input 2, opset 12 on): a constant true, or a graph input (a
        # torch export in TrainingMode.TRAINING); with the clock's seed a correct split failed its validation
        if len(n.input) < 3 or not n.input[2]:
            return False
        v = consts.get(n.input[2])
        return v is None or bool(v.reshape(-1)[0])
    op = lookup(n)          # the registry's `random` flag (default domain: lookup keys by domain)
    return op is not None and op.random


def random_nodes(graph: onnx.GraphProto, consts: dict[str, np.ndarray] | None = None) -> list[str]:
    """The random nodes of a graph and its If/Loop/Scan bodies (names, or op types where unnamed)."""
    consts = {**(consts or {}), **scalar_constants(graph)}
    out = []
    for n in graph.node:
        if _is_random(n, consts):
            out.append(n.name or n.op_type)
        for a in n.attribute:
            for sub in attribute_subgraphs(a):
                out.extend(random_nodes(sub, consts))
    return out


def _seed(n: onnx.NodeProto, value: float) -> onnx.AttributeProto:
    """The `seed` attribute of the type the op's schema gives it (Dropout's is an integer, RandomNormal's a float)."""
    try:
        integer = onnx.defs.get_schema(n.op_type, n.domain or "").attributes["seed"].type == \
            onnx.defs.OpSchema.AttrType.INT
    except Exception:  # noqa: BLE001 - an op onnx has no schema for (a contrib domain): a float, as ORT's own
        integer = False
    return helper.make_attribute("seed", int(value) if integer else float(value))


def seed_random_nodes(nodes: list[onnx.NodeProto], graph: onnx.GraphProto | None = None) -> list[str]:
    """Give each random node without a `seed` attribute a fixed one (in place; bodies included); the names
    seeded. Nodes that already carry a seed keep it. graph: the one holding the nodes (its constants tell a
    Dropout's training mode)."""
    seeded: list[str] = []

    def visit(n: onnx.NodeProto, consts: dict) -> None:
        if _is_random(n, consts) and not any(a.name == "seed" for a in n.attribute):
            n.attribute.append(_seed(n, FIRST_SEED + len(seeded)))
            seeded.append(n.name or n.op_type)
        for a in n.attribute:
            for sub in attribute_subgraphs(a):
                inner = {**consts, **scalar_constants(sub)}
                for m in sub.node:
                    visit(m, inner)
    top = scalar_constants(graph)
    for n in nodes:
        visit(n, top)
    return seeded
