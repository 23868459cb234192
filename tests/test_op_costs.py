"""Hand-computed FLOPs, MACs and bytes on tiny graphs."""
import math

import pytest
from onnx import TensorProto, helper

from conftest import make_model, tensor, weight
from lib.onnx.inputs import InputSpec, parse_shape_overrides, resolve_input_shapes
from lib.onnx.loading import graph_of
from lib.onnx.metrics import node_metrics


def metrics(nodes, inputs, outputs, inits=()):
    m = make_model(nodes, inputs, outputs, inits)
    g = graph_of(m)
    return node_metrics(g).set_index("node")


def conv_row(x_shape, w_shape, **attrs):
    n = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)
    return metrics([n], [tensor("x", x_shape)], [tensor("y", None)], [weight("w", w_shape)]).loc["conv"]


def test_conv2d_standard():
    r = conv_row([1, 3, 8, 8], (4, 3, 3, 3), pads=[1, 1, 1, 1])
    assert r["macs"] == 4 * 8 * 8 * 3 * 3 * 3 == 6912
    assert r["flops"] == 2 * 6912
    assert r["act_in_bytes"] == 3 * 8 * 8 * 4
    assert r["act_out_bytes"] == 4 * 8 * 8 * 4
    assert r["weight_bytes"] == 4 * 3 * 3 * 3 * 4
    assert r["op_class"] == "conv" and r["out_shapes"] == "1x4x8x8"


def test_conv_depthwise():
    r = conv_row([1, 8, 10, 10], (8, 1, 3, 3), group=8)
    assert r["out_shapes"] == "1x8x8x8"
    assert r["macs"] == 8 * 8 * 8 * 9
    assert r["op_class"] == "conv_depthwise"


def test_conv_grouped_strided_dilated():
    r = conv_row([1, 4, 6, 6], (6, 2, 3, 3), group=2)
    assert r["macs"] == 6 * 4 * 4 * 2 * 9 and r["op_class"] == "conv_grouped"
    r = conv_row([1, 1, 9, 9], (1, 1, 3, 3), dilations=[2, 2])          # effective kernel 5 -> 5x5 out
    assert r["out_shapes"] == "1x1x5x5" and r["macs"] == 25 * 9
    r = conv_row([2, 3, 9, 9], (5, 3, 3, 3), strides=[2, 2])             # batch 2, 4x4 out
    assert r["macs"] == 2 * 5 * 4 * 4 * 27


def test_conv1d_and_conv3d():
    assert conv_row([1, 2, 10], (3, 2, 3))["macs"] == 3 * 8 * 2 * 3
    assert conv_row([1, 1, 4, 4, 4], (2, 1, 2, 2, 2))["macs"] == 2 * 27 * 8


@pytest.mark.parametrize("ta,tb", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_transposes(ta, tb):
    m_, k, n_ = 3, 5, 4
    a_shape = [k, m_] if ta else [m_, k]
    b_shape = (n_, k) if tb else (k, n_)
    node = helper.make_node("Gemm", ["a", "b"], ["y"], name="gemm", transA=ta, transB=tb)
    r = metrics([node], [tensor("a", a_shape)], [tensor("y", None)], [weight("b", b_shape)]).loc["gemm"]
    assert r["macs"] == m_ * n_ * k == 60 and r["flops"] == 120
    assert r["out_shapes"] == "3x4"


def test_matmul_broadcasting():
    node = helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")
    r = metrics([node], [tensor("a", [2, 1, 3, 4]), tensor("b", [5, 4, 6])], [tensor("y", None)]).loc["mm"]
    assert r["out_shapes"] == "2x5x3x6"
    assert r["macs"] == 2 * 5 * 3 * 4 * 6
    assert r["act_in_bytes"] == (2 * 3 * 4 + 5 * 4 * 6) * 4
    node = helper.make_node("MatMul", ["v", "b"], ["y"], name="mv")        # 1-D lhs: (4) @ (4, 6)
    r = metrics([node], [tensor("v", [4]), tensor("b", [4, 6])], [tensor("y", None)]).loc["mv"]
    assert r["macs"] == 24 and r["out_shapes"] == "6"


def test_elementwise_and_activations():
    nodes = [helper.make_node("Add", ["x", "c"], ["a"], name="add"),
             helper.make_node("Sigmoid", ["a"], ["s"], name="sig"),
             helper.make_node("HardSwish", ["s"], ["h"], name="hsw"),
             helper.make_node("Clip", ["h", "lo", "hi"], ["y"], name="clip")]
    lo = helper.make_tensor("lo", TensorProto.FLOAT, [], [0.0])
    hi = helper.make_tensor("hi", TensorProto.FLOAT, [], [6.0])
    df = metrics(nodes, [tensor("x", [2, 3])], [tensor("y", None)], [weight("c", (3,)), lo, hi])
    assert df.loc["add", "flops"] == 6 and df.loc["add", "macs"] == 0
    assert df.loc["add", "act_in_bytes"] == 24 and df.loc["add", "weight_bytes"] == 12
    assert df.loc["sig", "flops"] == 4 * 6
    assert df.loc["hsw", "flops"] == 4 * 6
    assert df.loc["clip", "flops"] == 2 * 6 and df.loc["clip", "weight_bytes"] == 8
    assert df["cost_known"].all()


def test_bytes_follow_the_element_type():
    node = helper.make_node("Add", ["x", "z"], ["y"], name="add")
    f32 = metrics([node], [tensor("x", [2, 3]), tensor("z", [2, 3])], [tensor("y", None)]).loc["add"]
    f16 = metrics([node], [tensor("x", [2, 3], TensorProto.FLOAT16), tensor("z", [2, 3], TensorProto.FLOAT16)],
                  [tensor("y", None, TensorProto.FLOAT16)]).loc["add"]
    assert f32["act_in_bytes"] == 48 and f16["act_in_bytes"] == 24
    assert f16["act_out_bytes"] == 12 and f16["dtype"] == "float16"


def test_norm_pool_and_shape_ops():
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["n"], name="bn"),
             helper.make_node("MaxPool", ["n"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["y"], name="flat")]
    inits = [weight(k, (2,), seed=i) for i, k in enumerate("sbmv")]
    df = metrics(nodes, [tensor("x", [1, 2, 4, 4])], [tensor("y", None)], inits)
    assert df.loc["bn", "flops"] == 2 * 32
    assert df.loc["pool", "flops"] == 8 * 4          # 8 outputs x 4-tap window
    assert df.loc["gap", "flops"] == 8 + 2           # 8 adds in, 2 divides out
    assert df.loc["flat", "flops"] == 0 and df.loc["flat", "cost_known"]
    assert df.loc["flat", "act_out_bytes"] == 8


def test_unknown_op_is_flagged_not_zero():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Frobnicate", ["r"], ["y"], name="mystery", domain="com.example")]
    m = make_model(nodes, [tensor("x", [1, 4])], [tensor("y", [1, 4])])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    df = node_metrics(graph_of(m)).set_index("node")
    assert not df.loc["mystery", "cost_known"]
    assert math.isnan(df.loc["mystery", "flops"]) and math.isnan(df.loc["mystery", "macs"])
    assert df.loc["relu", "cost_known"] and df.loc["relu", "flops"] == 4


def test_symbolic_batch_override():
    node = helper.make_node("Relu", ["x"], ["y"], name="relu")
    m = make_model([node], [tensor("x", ["batch", 8])], [tensor("y", None)])
    wl = {"symbolic_dims": {"batch": 2}}
    assert resolve_input_shapes(m, InputSpec(workload=wl)) == {"x": [2, 8]}
    spec = InputSpec(parse_shape_overrides(["x=4x8"]), workload=wl)    # override wins
    assert resolve_input_shapes(m, spec) == {"x": [4, 8]}
    df = node_metrics(graph_of(m, spec))
    assert df.loc[0, "flops"] == 32 and df.loc[0, "act_out_bytes"] == 128


def test_non_topological_file_order_is_sorted():
    nodes = [helper.make_node("Relu", ["a"], ["y"], name="second"),
             helper.make_node("Neg", ["x"], ["a"], name="first")]
    g = graph_of(make_model(nodes, [tensor("x", [3])], [tensor("y", None)]))
    assert g.names == ["first", "second"] and not g.file_order
    assert g.preds(1) == [0]


def test_einsum_and_transformer_elementwise():
    nodes = [helper.make_node("Einsum", ["q", "k"], ["s"], name="qk", equation="bhid,bhjd->bhij"),
             helper.make_node("Softmax", ["s"], ["p"], name="softmax", axis=-1),
             helper.make_node("Erf", ["p"], ["e"], name="erf"),
             helper.make_node("Where", ["m", "e", "p"], ["y"], name="where")]
    df = metrics(nodes, [tensor("q", [2, 4, 8, 16]), tensor("k", [2, 4, 8, 16]), tensor("m", [2, 4, 8, 8], TensorProto.BOOL)],
                 [tensor("y", None)])
    assert df.loc["qk", "macs"] == 2 * 4 * 8 * 8 * 16 and df.loc["qk", "out_shapes"] == "2x4x8x8"
    assert df.loc["softmax", "flops"] == 5 * 512 and df.loc["erf", "flops"] == 5 * 512 and df.loc["where", "flops"] == 512
