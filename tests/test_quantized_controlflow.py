"""Integer/quantized op costs, control-flow bodies, shape arithmetic and presets (hand-made graphs), and a
real ONNX Runtime dynamic quantization of resnet18."""
import json

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import make_model, run_stage, tensor
from lib.onnx.graph import build_graph
from lib.onnx.inputs import InputSpec
from lib.onnx.loading import graph_of
from lib.onnx.metrics import node_metrics


def scalar(name, value, dtype=np.float32):
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def metrics(nodes, inputs, outputs, inits=(), opset=17, feeds=None):
    m = make_model(nodes, inputs, outputs, inits, opset=opset)
    return node_metrics(graph_of(m, InputSpec(arrays=feeds))).set_index("node")


def test_quantized_and_integer_ops():
    q = [scalar("xs", 0.1), scalar("xz", 0, np.uint8), scalar("ws", 0.2), scalar("wz", 0, np.int8),
         scalar("ys", 0.3), scalar("yz", 0, np.uint8),
         numpy_helper.from_array(np.ones((4, 3, 3, 3), np.int8), "w"),
         numpy_helper.from_array(np.ones((4, 5), np.int8), "b")]
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], name="qconv"),
             helper.make_node("ConvInteger", ["x", "w"], ["yi"], name="convint"),
             helper.make_node("DynamicQuantizeLinear", ["a"], ["aq", "as", "az"], name="dql"),
             helper.make_node("MatMulInteger", ["aq", "b"], ["mi"], name="mmint"),
             helper.make_node("QLinearMatMul", ["aq", "as", "az", "b", "ws", "wz", "ys", "yz"], ["qm"], name="qmm"),
             helper.make_node("DequantizeLinear", ["y", "ys", "yz"], ["yf"], name="dq")]
    df = metrics(nodes, [tensor("x", [1, 3, 8, 8], TensorProto.UINT8), tensor("a", [2, 4])],
                 [tensor("yf", None), tensor("yi", None, TensorProto.INT32), tensor("mi", None, TensorProto.INT32),
                  tensor("qm", None, TensorProto.UINT8)], q)
    assert df.loc["qconv", "macs"] == 4 * 36 * 27 and df.loc["qconv", "flops"] == 2 * 4 * 36 * 27
    assert df.loc["qconv", "mac_dtype"] == "int8" and df.loc["qconv", "dtype"] == "uint8"
    assert df.loc["qconv", "act_in_bytes"] == 3 * 64 and df.loc["qconv", "act_out_bytes"] == 4 * 36
    assert df.loc["convint", "macs"] == 4 * 36 * 27 and df.loc["convint", "dtype"] == "int32"
    assert df.loc["mmint", "macs"] == 2 * 4 * 5 and df.loc["qmm", "macs"] == 2 * 4 * 5
    assert df.loc["dql", "flops"] == 4 * 8 and df.loc["dq", "flops"] == 2 * 4 * 36
    assert df["cost_known"].all()


def loop_model(trip_from_input: bool, feeds=None):
    body = helper.make_graph(
        [helper.make_node("Add", ["x_in", "x_in"], ["x_out"], name="body_add"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond")],
        "body", [tensor("i", [], TensorProto.INT64), tensor("cond_in", [], TensorProto.BOOL), tensor("x_in", [4])],
        [tensor("cond_out", [], TensorProto.BOOL), tensor("x_out", [4])])
    nodes = [helper.make_node("Loop", ["M", "", "x"], ["y"], name="loop", body=body)]
    inputs = [tensor("x", [4])] + ([tensor("M", [], TensorProto.INT64)] if trip_from_input else [])
    inits = [] if trip_from_input else [scalar("M", 5, np.int64)]
    return metrics(nodes, inputs, [tensor("y", [4])], inits, feeds=feeds)


@pytest.mark.parametrize("cond, trips", [("outer_true", 5), ("body_true", 5), ("computed", None)])
def test_a_loop_whose_condition_stays_true_runs_its_trip_count(cond, trips):
    """torch.jit.script's for loop through the TorchScript exporter: the body's condition is Identity of an outer
    Constant true (the Loop was left uncosted); a body Constant true alike; a computed one stays unknown."""
    true = numpy_helper.from_array(np.array(True))
    body_nodes = [helper.make_node("Add", ["x_in", "x_in"], ["x_out"], name="body_add")]
    if cond == "outer_true":
        body_nodes.append(helper.make_node("Identity", ["keep_going"], ["cond_out"], name="body_cond"))
    elif cond == "body_true":
        body_nodes.append(helper.make_node("Constant", [], ["cond_out"], name="body_cond", value=true))
    else:
        body_nodes.append(helper.make_node("Less", ["i", "three"], ["cond_out"], name="body_cond"))
    body = helper.make_graph(body_nodes, "body", [tensor("i", [], TensorProto.INT64), tensor("cond_in", [], TensorProto.BOOL),
                                                  tensor("x_in", [4])], [tensor("cond_out", [], TensorProto.BOOL), tensor("x_out", [4])])
    nodes = [helper.make_node("Constant", [], ["keep_going"], name="keep_going", value=true),
             helper.make_node("Loop", ["M", "keep_going", "x"], ["y"], name="loop", body=body)]
    row = metrics(nodes, [tensor("x", [4])], [tensor("y", [4])], [scalar("M", 5, np.int64), scalar("three", 3, np.int64)],
                  feeds={"x": np.ones(4, np.float32)}).loc["loop"]
    if trips is None:
        assert not row["cost_known"]
    else:
        assert row["cost_known"] and row["flops"] == trips * 4 and row["cost_note"] == f"{trips} iterations"


def test_loop_and_if_bodies_are_counted():
    assert loop_model(False).loc["loop", "flops"] == 5 * 4          # 5 iterations of a 4-element Add
    x = np.ones(4, np.float32)
    ran = loop_model(True, {"x": x, "M": np.array(3, np.int64)}).loc["loop"]   # trip count from the inputs
    assert ran["cost_known"] and ran["flops"] == 3 * 4 and ran["cost_note"] == "3 iterations"
    then = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["t"], name="t_mul")], "then", [], [tensor("t", [4])])
    other = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["e1"], name="e_mul"),
                               helper.make_node("Add", ["e1", "x"], ["e"], name="e_add")], "else", [], [tensor("e", [4])])
    if_args = ([helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)],
               [tensor("c", [], TensorProto.BOOL), tensor("x", [4])], [tensor("y", [4])])
    for cond, flops, note in ((True, 4, "then_branch taken"), (False, 8, "else_branch taken")):
        df = metrics(*if_args, feeds={"c": np.array(cond), "x": x})   # the branch these inputs take
        assert df.loc["if", "flops"] == flops and df.loc["if", "cost_note"] == note
    unknown = build_graph(onnx.shape_inference.infer_shapes(make_model(*if_args)))   # condition never seen
    row = node_metrics(unknown).set_index("node").loc["if"]
    assert row["flops"] == 8 and row["cost_note"].startswith("upper bound")          # the dearer branch
    g = build_graph(make_model([helper.make_node("Relu", ["x"], ["x2"], name="pre"),
                                helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)],
                               [tensor("c", [], TensorProto.BOOL), tensor("x", [4])], [tensor("y", [4])]))
    assert "x" in g.implicit[1] and 1 in g.consumers["x"]             # the If reads x from the outer scope


def test_if_branches_that_reuse_names_get_the_taken_branch_shapes():
    """optimum's merged decoders reuse tensor names across use_cache_branch's two branches; onnx's data
    propagation is keyed by name, so its inference typed the taken branch from the other one (T5's prefill got
    0.8% too few MACs, Whisper's 8.7% too many). Here both branches reshape x (1x8) to `t` by a shape computed
    under the same names: [2, 4] (then), [4, 2] (else); then t @ t^T. Each branch's shapes, in the graph 02
    writes too, are those ONNX Runtime executes."""
    def branch(name, q_first):
        const = lambda out, v: helper.make_node("Constant", [], [out], name=f"{name}_{out}",  # noqa: E731
                                                 value=numpy_helper.from_array(np.array(v, np.int64)))
        nodes = [helper.make_node("Shape", ["x"], ["s"], name=f"{name}_shape"), const("one", 1),
                 helper.make_node("Gather", ["s", "one"], ["d"], name=f"{name}_gather"), const("two", 2),
                 helper.make_node("Div", ["d", "two"], ["q"], name=f"{name}_div"), const("ax", [0]),
                 helper.make_node("Unsqueeze", ["q", "ax"], ["uq"], name=f"{name}_unsq"), const("fixed", [2]),
                 helper.make_node("Concat", ["uq", "fixed"] if q_first else ["fixed", "uq"], ["tgt"], axis=0,
                                  name=f"{name}_concat"),
                 helper.make_node("Reshape", ["x", "tgt"], ["t"], name=f"{name}_reshape"),
                 helper.make_node("Transpose", ["t"], ["tt"], name=f"{name}_tr"),
                 helper.make_node("MatMul", ["t", "tt"], ["r"], name=f"{name}_mm")]
        return helper.make_graph(nodes, name, [], [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)])
    node = helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch("then", False), else_branch=branch("else", True))
    model = make_model([node], [tensor("c", [], TensorProto.BOOL), tensor("x", [1, "n"])], [tensor("y", None)])
    for cond, t_shape, macs in ((True, [2, 4], 2 * 4 * 2), (False, [4, 2], 4 * 2 * 4)):
        g = graph_of(model, InputSpec(arrays={"c": np.array(cond), "x": np.ones((1, 8), np.float32)}))
        taken = next(a.g for a in g.model.graph.node[0].attribute if a.name == ("then_branch" if cond else "else_branch"))
        shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in taken.value_info}
        assert shapes["t"] == t_shape and shapes["tt"] == t_shape[::-1]
        assert node_metrics(g).set_index("node").loc["if", "macs"] == macs


def test_shape_arithmetic_is_marked():
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Gather", ["s", "zero"], ["n"], name="gather", axis=0),
             helper.make_node("Unsqueeze", ["n", "ax"], ["n1"], name="unsq"),
             helper.make_node("Concat", ["n1", "minus1"], ["newshape"], name="concat", axis=0),
             helper.make_node("Reshape", ["x", "newshape"], ["y"], name="reshape")]
    inits = [scalar("zero", 0, np.int64), numpy_helper.from_array(np.array([0], np.int64), "ax"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    df = metrics(nodes, [tensor("x", [2, 3, 4])], [tensor("y", None)], inits)
    assert df["shape_op"].to_dict() == {"shape": True, "gather": True, "unsq": True, "concat": True, "reshape": False}
    assert (df["flops"] == 0).all() and df.loc["reshape", "out_shapes"] == "2x12"


def test_llm_preset(tmp_path):
    model = tmp_path / "tok.onnx"
    make_model([helper.make_node("Cast", ["ids"], ["f"], name="cast", to=TensorProto.FLOAT),
                helper.make_node("Relu", ["f"], ["y"], name="relu")],
               [tensor("ids", ["batch_size", "sequence_length"], TensorProto.INT64)], [tensor("y", None)], path=model)
    r = run_stage("02_shapes_flops_bytes.py", "--model", model, "--results", tmp_path, "--preset", "llm-512")
    assert r.returncode == 0, r.stderr
    meta = json.loads((tmp_path / "metrics_meta.json").read_text())
    assert meta["identity"]["inputs"]["input_shapes"] == {"ids": [1, 512]}
    r = run_stage("02_shapes_flops_bytes.py", "--model", model, "--results", tmp_path, "--preset", "nope")
    assert r.returncode == 2 and "unknown --preset nope" in r.stderr


def test_dynamic_quantized_resnet18(tv_models, tmp_path):
    from onnxruntime.quantization import QuantType, quantize_dynamic
    src = onnx.load(str(tv_models("resnet18")))
    src.graph.ClearField("value_info")   # ORT's quantizer re-infers shapes and trips on the exporter's value_info
    onnx.save(src, str(tmp_path / "f32.onnx"))
    quantize_dynamic(str(tmp_path / "f32.onnx"), str(tmp_path / "q.onnx"), weight_type=QuantType.QInt8)
    rdir = tmp_path / "r"
    for stage, extra in (("02_shapes_flops_bytes.py", []), ("01_profile_onnx.py", ["--runs", "2", "--warmup", "1"])):
        r = run_stage(stage, "--model", tmp_path / "q.onnx", "--results", rdir, *extra)
        assert r.returncode == 0, r.stderr
    df = pd.read_csv(rdir / "ops_metrics.csv", keep_default_na=False)
    assert df["cost_known"].all()
    # the reference: the same convolutions in the float model, counted from the shapes ORT executed
    from executed_macs import executed_macs, random_feeds
    f32 = executed_macs(tmp_path / "f32.onnx", random_feeds(tmp_path / "f32.onnx"))["by_op"]
    conv = df[df["op_type"] == "ConvInteger"]
    assert len(conv) == sum(n.op_type == "Conv" for n in src.graph.node)
    assert set(conv["mac_dtype"]) == {"int8"} and conv["macs"].astype(float).sum() == f32["Conv"]
    init = sum(numpy_helper.to_array(t).nbytes for t in onnx.load(str(tmp_path / "q.onnx")).graph.initializer)
    assert df["weight_bytes"].astype(float).sum() == pytest.approx(init, rel=0.02)
    assert json.loads((rdir / "profile_meta.json").read_text())["kernel_time_coverage"] >= 0.99
