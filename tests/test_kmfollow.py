"""Issue 30's follow-up: the views ORT puts around a 3-D MatMul+Add's Gemm are attributed to it (one rule for 01's
node times and the kernel table); 07 carries the prediction's interval; a device of system.yaml with its own
latency model gets its per-node times from it (the roofline otherwise, labelled).

Real ORT sessions on tiny graphs; no timing assertions (measured times only as sums of the same kernels)."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pandas as pd
from onnx import helper

from conftest import make_model, run_stage, tensor, weight
from lib.latency.kernels import kernel_table
from lib.latency.profiling import latency_table, profile_model
from lib.onnx.loading import graph_of
from lib.onnx.metrics import node_metrics


def mlp_block(path):
    """x[2,16,64] -> LayerNorm -> MatMul+Add (64->128) -> Relu -> MatMul+Add (128->64) -> Add(x), torch-style names:
    ORT runs each 3-D MatMul+Add as Reshape -> Gemm (MatMulAddFusion) -> Reshape."""
    nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], name="/ln/LayerNormalization", axis=-1),
             helper.make_node("MatMul", ["ln", "W1"], ["m1"], name="/fc1/MatMul"),
             helper.make_node("Add", ["m1", "B1"], ["a1"], name="/fc1/Add"),
             helper.make_node("Relu", ["a1"], ["r"], name="/act/Relu"),
             helper.make_node("MatMul", ["r", "W2"], ["m2"], name="/fc2/MatMul"),
             helper.make_node("Add", ["m2", "B2"], ["a2"], name="/fc2/Add"),
             helper.make_node("Add", ["a2", "x"], ["y"], name="/res/Add")]
    return make_model(nodes, [tensor("x", [2, 16, 64])], [tensor("y", [2, 16, 64])],
                      [weight("g", [64]), weight("b", [64]), weight("W1", [64, 128]), weight("B1", [128]),
                       weight("W2", [128, 64]), weight("B2", [64])], path=path)


def test_gemm_views_go_to_the_matmul(tmp_path):
    mlp_block(tmp_path / "m.onnx")
    g = graph_of(onnx.load(tmp_path / "m.onnx"))
    prof = profile_model(str(tmp_path / "m.onnx"), {"x": np.ones((2, 16, 64), np.float32)}, runs=3, warmup=1)
    ops = {n.name: n.op_type for n in prof["optimized"].graph.node}
    assert sorted(ops.values()).count("Gemm") == 2 and sorted(ops.values()).count("Reshape") == 4   # the pattern
    df, summary = latency_table(g, prof)
    assert summary["kernel_time_coverage"] == 1.0
    row = df.set_index("node")
    for fc in ("fc1", "fc2"):
        kernels = row.loc[f"/{fc}/MatMul", "ort_kernels"].split(";")
        assert sorted(ops[k] for k in kernels) == ["Gemm", "Reshape", "Reshape"]    # the Gemm and both its views
        assert row.loc[f"/{fc}/Add", "attribution"] == "fused" and row.loc[f"/{fc}/Add", "fused_into"] == f"/{fc}/MatMul"
    assert row.loc["/ln/LayerNormalization", "ort_kernels"] == "/ln/LayerNormalization"
    for run in prof["per_run"]:     # one run at a time: the figures per node sum to that run's kernel total
        one, _ = latency_table(g, {**prof, "per_run": [run]})
        assert one["latency_us"].sum() == sum(run.values())
    # the kernel table: the Gemm runs MatMul+Add (their FLOPs), the views carry none and move no bytes
    kt = kernel_table(g, node_metrics(g), prof["optimized"]).set_index("kernel")
    gemm = kt[kt["op"] == "Gemm"]
    assert list(gemm["pattern"]) == ["MatMul+Add"] * 2
    assert list(gemm["flops"]) == [2 * 32 * 64 * 128 + 32 * 128, 2 * 32 * 128 * 64 + 32 * 64]
    views = kt[kt["op"] == "Reshape"]
    assert (views["flops"] == 0).all() and (views["bytes"] == 0).all() and set(views["node"]) == {"/fc1/MatMul", "/fc2/MatMul"}


def test_03_finds_no_contradiction_on_the_block(tmp_path):
    mlp_block(tmp_path / "m.onnx")
    rdir = tmp_path / "res"
    for stage in ("02_shapes_flops_bytes.py", "01_profile_onnx.py", "03_merge_profile_metrics.py"):
        r = run_stage(stage, "--model", tmp_path / "m.onnx", "--results", rdir)
        assert r.returncode == 0, r.stderr
    assert json.loads((rdir / "profile_meta.json").read_text())["kernel_time_coverage"] == 1.0
    assert json.loads((rdir / "merge_meta.json").read_text())["roofline_contradictions"]["nodes"] == 0
    lat = pd.read_csv(rdir / "ops_latency.csv").set_index("node")
    assert lat.loc["/fc1/MatMul", "attribution"] == "kernel" and lat.loc["/fc1/Add", "attribution"] == "fused"
