#!/usr/bin/env python3
"""Large synthetic ONNX graphs for scaling benchmarks: residual stacks and transformer-like blocks.

    python bench/synthetic_graphs.py --nodes 200000 --out /tmp/synth_200k.onnx

Tensors are tiny ([1, 16, 16]) so that the graph, not the arithmetic, is what gets measured; the weights
are shared initializers (constants never cross a split).
"""
from __future__ import annotations

import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

D = 16


def residual_block(x: str, k: int, nodes: list) -> str:
    """x -> MatMul -> Relu -> MatMul -> Add(x) -> Relu : 5 nodes."""
    p = f"r{k}_"
    nodes += [helper.make_node("MatMul", [x, "W1"], [p + "m1"], name=p + "mm1"),
              helper.make_node("Relu", [p + "m1"], [p + "a1"], name=p + "relu1"),
              helper.make_node("MatMul", [p + "a1", "W2"], [p + "m2"], name=p + "mm2"),
              helper.make_node("Add", [p + "m2", x], [p + "s"], name=p + "add"),
              helper.make_node("Relu", [p + "s"], [p + "y"], name=p + "relu2")]
    return p + "y"


def transformer_block(x: str, k: int, nodes: list) -> str:
    """Pre-norm attention + MLP with residuals: 16 nodes, a 3-way fork (Q, K, V) and two skips."""
    p = f"t{k}_"
    nodes += [
        helper.make_node("LayerNormalization", [x, "G", "B"], [p + "n1"], name=p + "ln1", axis=-1),
        helper.make_node("MatMul", [p + "n1", "Wq"], [p + "q"], name=p + "q"),
        helper.make_node("MatMul", [p + "n1", "Wk"], [p + "k"], name=p + "k"),
        helper.make_node("MatMul", [p + "n1", "Wv"], [p + "v"], name=p + "v"),
        helper.make_node("Transpose", [p + "k"], [p + "kt"], name=p + "kt", perm=[0, 2, 1]),
        helper.make_node("MatMul", [p + "q", p + "kt"], [p + "qk"], name=p + "qk"),
        helper.make_node("Softmax", [p + "qk"], [p + "att"], name=p + "softmax", axis=-1),
        helper.make_node("MatMul", [p + "att", p + "v"], [p + "ctx"], name=p + "ctx"),
        helper.make_node("MatMul", [p + "ctx", "Wo"], [p + "o"], name=p + "o"),
        helper.make_node("Add", [p + "o", x], [p + "h"], name=p + "res1"),
        helper.make_node("LayerNormalization", [p + "h", "G", "B"], [p + "n2"], name=p + "ln2", axis=-1),
        helper.make_node("MatMul", [p + "n2", "W1"], [p + "f1"], name=p + "fc1"),
        helper.make_node("Relu", [p + "f1"], [p + "g"], name=p + "act"),
        helper.make_node("MatMul", [p + "g", "W2"], [p + "f2"], name=p + "fc2"),
        helper.make_node("Add", [p + "f2", p + "h"], [p + "y"], name=p + "res2"),
        helper.make_node("Identity", [p + "y"], [p + "out"], name=p + "out"),
    ]
    return p + "out"


def build(n_nodes: int) -> onnx.ModelProto:
    """Alternate 4 residual blocks and 1 transformer block until n_nodes is reached (36 nodes per round)."""
    nodes: list = []
    x, k = "x", 0
    while len(nodes) < n_nodes:
        x = transformer_block(x, k, nodes) if k % 5 == 4 else residual_block(x, k, nodes)
        k += 1
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((D, D)).astype(np.float32) / D, n)
             for n in ("W1", "W2", "Wq", "Wk", "Wv", "Wo")]
    inits += [numpy_helper.from_array(np.ones(D, np.float32), "G"), numpy_helper.from_array(np.zeros(D, np.float32), "B")]
    g = helper.make_graph(nodes, "synthetic", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, D, D])],
                          [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, D, D])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, required=True, help="approximate node count")
    p.add_argument("--out", required=True)
    a = p.parse_args()
    m = build(a.nodes)
    onnx.save(m, a.out)
    print(f"wrote {a.out}: {len(m.graph.node)} nodes")


if __name__ == "__main__":
    main()
