"""Issue 30's follow-up: the views ORT puts around a 3-D MatMul+Add's Gemm are attributed to it (one rule for 01's
node times and the kernel table); 07 carries the prediction's interval; a device of system.yaml with its own
latency model gets its per-node times from it (the roofline otherwise, labelled).

Real ORT sessions on tiny graphs; no timing assertions (measured times only as sums of the same kernels)."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pandas as pd
import pytest
import yaml
from onnx import helper

from conftest import REPO, latency_model_copy, make_model, run_stage, system_yaml, tensor, weight
from lib.analysis.roofline import node_bytes
from lib.latency.kernels import kernel_table
from lib.latency.profiling import latency_table, profile_model
from lib.onnx.loading import graph_of
from lib.onnx.metrics import node_metrics
from lib.split import ranking


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


def _dense(v, n=None):
    """split_model.json's per-node list (None: NaN) or its one number for every node."""
    return np.array([np.nan if x is None else x for x in v], float) if isinstance(v, list) else float(v)


def test_03_finds_no_contradiction_then_07_carries_interval_and_device_models(tmp_path):
    """03 on the block: no roofline contradiction. 07 with a system whose B carries this host's latency model
    (as `make calibrate` on B would write it, its kernel model saved with its host figures): B's per-node times
    are that kernel model's, summing to 03's session prediction less its per-session constant; A (no model) is the
    labelled roofline fallback, and 03's prediction on this host comes with its interval."""
    mlp_block(tmp_path / "m.onnx")
    rdir = tmp_path / "res"
    for stage in ("02_shapes_flops_bytes.py", "01_profile_onnx.py", "03_merge_profile_metrics.py"):
        r = run_stage(stage, "--model", tmp_path / "m.onnx", "--results", rdir)
        assert r.returncode == 0, r.stderr
    assert json.loads((rdir / "profile_meta.json").read_text())["kernel_time_coverage"] == 1.0
    assert json.loads((rdir / "merge_meta.json").read_text())["roofline_contradictions"]["nodes"] == 0
    lat = pd.read_csv(rdir / "ops_latency.csv").set_index("node")
    assert lat.loc["/fc1/MatMul", "attribution"] == "kernel" and lat.loc["/fc1/Add", "attribution"] == "fused"
    lm = latency_model_copy(tmp_path)
    sysfile = system_yaml(tmp_path / "system.yaml")
    doc = yaml.safe_load(sysfile.read_text())
    doc["devices"]["B"].update(latency_model=str(lm))
    sysfile.write_text(yaml.safe_dump(doc))
    r = run_stage("07_split_candidates.py", "--model", tmp_path / "m.onnx", "--results", rdir, "--system", sysfile,
                  "--min-compute-share", "0")
    assert r.returncode == 0, r.stderr
    meta = json.loads((rdir / "merge_meta.json").read_text())["prediction"]
    summ = json.loads((rdir / "split_summary.json").read_text())
    hp = summ["host_prediction"]
    assert hp["predicted_latency_us"] == meta["predicted_latency_us"] and hp["prediction_interval_us"] == meta["interval_us"]
    assert "interval" in r.stdout
    assert summ["device_b"]["time_source"] == f"kernel model ({lm})"
    assert summ["device_a"]["time_source"].startswith("roofline (fallback")
    prof = pd.read_csv(rdir / "ops_profile.csv")
    # B is this host with its kernel model: all-on-B is 03's prediction with the same model and figures (at the
    # calibration's speed: 01's host reference measures this host, not B)
    assert meta["predicted_by"] == "kernel model"
    assert summ["all_on_b_us"] == pytest.approx(meta.get("calibration_host_latency_us", meta["predicted_latency_us"]),
                                                rel=1e-9)
    roof = np.maximum(prof["flops"].fillna(0) / 2e11, node_bytes(prof).fillna(0) / 2e10).sum() * 1e6
    assert summ["all_on_a_us"] == pytest.approx(float(roof), rel=1e-9)       # A: the plain roofline
    model = json.loads((rdir / "split_model.json").read_text())["devices"]
    assert model["B"]["time_source"].startswith("kernel model") and model["A"]["time_source"].startswith("roofline")
    # the what-if's factors give back the same times at B's figures
    b = model["B"]
    t = ranking.modelled_times(prof["flops"].fillna(0).to_numpy(), node_bytes(prof).to_numpy(), b["peak_flops_per_s"],
                               b["mem_bw_bytes_per_s"], _dense(b["ec"]), _dense(b["em"]), _dense(b["ovh_us"]))
    assert float(t.sum()) == pytest.approx(summ["all_on_b_us"], rel=1e-6)
