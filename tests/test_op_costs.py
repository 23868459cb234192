"""Hand-computed FLOPs, MACs and bytes on tiny graphs."""
import math
from pathlib import Path

import onnx
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


def test_an_empty_batch_reads_no_weights():
    """Batch 0 (valid: ORT runs it): nothing to compute, nothing written, and the weights are not read (ORT's conv
    returns first; their 9.4 MB made a resnet18 conv's bound 47 us against 8.75 us measured)."""
    n = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])
    m = make_model([n], [tensor("x", ["N", 3, 8, 8])], [tensor("y", None)], [weight("w", (4, 3, 3, 3))])
    r = node_metrics(graph_of(m, InputSpec(parse_shape_overrides(["x=0x3x8x8"])))).set_index("node").loc["conv"]
    assert (r["macs"], r["act_in_bytes"], r["act_out_bytes"], r["weight_bytes"]) == (0, 0, 0, 0)
    assert conv_row([1, 3, 8, 8], (4, 3, 3, 3), pads=[1, 1, 1, 1])["weight_bytes"] == 4 * 3 * 3 * 3 * 4


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


@pytest.mark.parametrize("eq, shapes", [("ij,jk,kl->il", [[64, 32], [32, 48], [48, 16]]),
                                        ("nhwpqc->nchpwq", [[2, 14, 14, 16, 16, 3]]),
                                        ("...ij,...jk->...ik", [[2, 3, 8, 16], [2, 3, 16, 4]]),
                                        ("ijk,jl", [[4, 5, 6], [5, 7]]), ("ijk,jl->il", [[4, 5, 6], [5, 7]])])
def test_einsum_counts_what_torch_counts(eq, shapes):
    """Operands contracted in pairs, left to right, as ONNX Runtime runs them (3 operands were the product of every
    index: 1,572,864 MACs for 147,456), one operand (MAE's unpatchify transpose) multiplies nothing (was 301,056),
    an ellipsis is counted (was unknown): FlopCounterMode's FLOPs / 2 on the same torch.einsum."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    nodes = [helper.make_node("Einsum", [f"x{i}" for i in range(len(shapes))], ["y"], name="e", equation=eq)]
    df = metrics(nodes, [tensor(f"x{i}", s) for i, s in enumerate(shapes)], [tensor("y", None)])
    with FlopCounterMode(display=False) as fc:
        torch.einsum(eq, *[torch.ones(s) for s in shapes])
    assert df.loc["e", "cost_known"] and df.loc["e", "macs"] == fc.get_total_flops() / 2


def _row(nodes, inputs, inits, opsets, name):
    m = helper.make_model(helper.make_graph(nodes, "tiny", inputs, [tensor(o, None) for o in nodes[0].output[:1]],
                                            initializer=list(inits)),
                          opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    m.ir_version = 10
    return node_metrics(graph_of(m)).set_index("node").loc[name]


def test_attention_ops():
    """Attention as ORT's transformer optimizer fuses it (QKV projection included), as ONNX opset 23 writes it
    (Q, K, V given; grouped KV heads; a past key) and ORT's MultiHeadAttention: Q K^T and the weighted V, plus
    the softmax's 5 FLOPs per score. They were of unknown cost (BERT from onnxruntime.transformers: 9.45 of
    13.12 MMAC counted)."""
    ms = {"": 17, "com.microsoft": 1}
    r = _row([helper.make_node("Attention", ["x", "w", "b"], ["y"], name="att", domain="com.microsoft", num_heads=4)],
             [tensor("x", [2, 8, 16])], [weight("w", (16, 48)), weight("b", (48,))], ms, "att")
    macs = 2 * 8 * 16 * 48 + 2 * 4 * 8 * 8 * (4 + 4)                        # projection + Q K^T + A V
    assert r["macs"] == macs and r["flops"] == 2 * macs + 5 * 2 * 4 * 8 * 8
    r = _row([helper.make_node("Attention", ["q", "k", "v"], ["y"], name="sdpa")],
             [tensor("q", [1, 4, 6, 8]), tensor("k", [1, 2, 10, 8]), tensor("v", [1, 2, 10, 5])], [], {"": 23}, "sdpa")
    assert r["macs"] == 4 * 6 * 10 * (8 + 5) and r["flops"] == 2 * r["macs"] + 5 * 4 * 6 * 10   # 2 KV heads for 4
    r = _row([helper.make_node("Attention", ["q", "k", "v", "", "pk", "pv"], ["y"], name="sdpa3", q_num_heads=4,
                               kv_num_heads=2)],
             [tensor("q", [1, 6, 32]), tensor("k", [1, 10, 16]), tensor("v", [1, 10, 10]), tensor("pk", [1, 2, 3, 8]),
              tensor("pv", [1, 2, 3, 5])], [], {"": 23}, "sdpa3")
    assert r["macs"] == 4 * 6 * (10 + 3) * (8 + 5)                              # the past adds 3 positions
    r = _row([helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], name="mha", domain="com.microsoft",
                               num_heads=4)],
             [tensor("q", [1, 6, 32]), tensor("k", [1, 10, 32]), tensor("v", [1, 10, 32])], [], ms, "mha")
    assert r["macs"] == 4 * 6 * 10 * (8 + 8)
    # a 3-D query over a 4-D (B, heads, L, head size) cross-attention cache, as ORT's Whisper decoder feeds it
    r = _row([helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], name="mha", domain="com.microsoft",
                               num_heads=4)],
             [tensor("q", [2, 5, 32]), tensor("k", [2, 4, 7, 8]), tensor("v", [2, 4, 7, 8])], [], ms, "mha")
    assert r["macs"] == 2 * 4 * 5 * 7 * (8 + 8)                                 # was unknown
    # QAttention (quantize_dynamic's fused attention): as Attention, int8 weights
    r = _row([helper.make_node("QAttention", ["x", "w", "b", "xs", "ws"], ["y"], name="qa", domain="com.microsoft",
                               num_heads=4)],
             [tensor("x", [2, 5, 32], TensorProto.UINT8)], [weight("w", (32, 96)), weight("b", (96,)),
                                                              weight("xs", ()), weight("ws", ())], ms, "qa")
    assert r["macs"] == 2 * 5 * 32 * 96 + 2 * 4 * 5 * 5 * (8 + 8) and r["op_class"] == "matmul"   # was unknown


def test_ort_fused_matmul_and_gemm():
    """What ORT saves at its extended level: FusedMatMul with its operands' transposes (q @ k^T: transB; its
    transB was ignored, 24,576 MACs for 18,432; a Llama's 2,009,088 for 1,996,800) and FusedGemm (Gemm with its
    activation: not registered, 0 MACs)."""
    ms = {"": 17, "com.microsoft": 1}
    q, k = tensor("q", [2, 4, 12, 16]), tensor("k", [2, 4, 12, 16])
    r = _row([helper.make_node("FusedMatMul", ["q", "k"], ["y"], name="qk", domain="com.microsoft", transB=1)],
             [q, k], [], ms, "qk")
    assert r["macs"] == 2 * 4 * 12 * 12 * 16
    r = _row([helper.make_node("FusedMatMul", ["a", "b"], ["y"], name="mm", domain="com.microsoft", transA=1,
                               transBatchB=1)],
             [tensor("a", [3, 16, 5]), tensor("b", [16, 3, 7])], [], ms, "mm")
    assert r["macs"] == 3 * 5 * 7 * 16     # A^T per batch 5x16, B 16x3x7 read as 3x16x7 (ORT: a^T @ b.transpose(1, 0, 2))
    r = _row([helper.make_node("FusedGemm", ["x", "w", "b"], ["y"], name="fc", domain="com.microsoft", transB=1,
                               activation="Relu")],
             [tensor("x", [4, 32])], [weight("w", (64, 32)), weight("b", (64,))], ms, "fc")
    assert r["macs"] == 4 * 32 * 64 and r["op_class"] == "gemm"


def test_stft_and_embed_layer_norm():
    """STFT: a radix-2 FFT per frame for a power-of-two window (5 n log2 n), else the direct DFT (8 n per bin), and
    its output shape as ONNX Runtime writes it (onesided by default: 9 bins of 16 samples; onnx's inference said
    16); EmbedLayerNormalization: 10 FLOPs per output element (three embeddings added, then LayerNorm)."""
    import numpy as np
    from onnx import numpy_helper
    step = numpy_helper.from_array(np.array(16, np.int64), "step")
    r = _row([helper.make_node("STFT", ["s", "step", "win"], ["y"], name="stft")], [tensor("s", [1, 64, 1])],
             [step, weight("win", (16,))], {"": 17}, "stft")
    assert r["out_shapes"] == "1x4x9x2" and r["flops"] == 4 * 5 * 16 * 4 and r["macs"] == 0
    step12 = numpy_helper.from_array(np.array(12, np.int64), "step")
    r = _row([helper.make_node("STFT", ["s", "step", "win"], ["y"], name="stft")], [tensor("s", [1, 64, 1])],
             [step12, weight("win", (12,))], {"": 17}, "stft")
    assert r["out_shapes"] == "1x5x7x2" and r["flops"] == 5 * 8 * 12 * 7
    ids = [tensor("ids", [1, 8], TensorProto.INT32), tensor("seg", [1, 8], TensorProto.INT32)]
    embed = helper.make_node("EmbedLayerNormalization", ["ids", "seg", "we", "pe", "se", "gamma", "beta"],
                             ["out", "mask_index"], name="embed", domain="com.microsoft")
    r = _row([embed], ids, [weight("we", (20, 16)), weight("pe", (16, 16)), weight("se", (2, 16)), weight("gamma", (16,)),
                            weight("beta", (16,))], {"": 17, "com.microsoft": 1}, "embed")
    assert r["flops"] == 10 * 8 * 16 and r["macs"] == 0


def test_llm_and_detection_ops():
    """onnxruntime's 4-bit MatMulNBits (rows of A x N x K; checked against the MACs ONNX Runtime executed),
    GroupQueryAttention over its present key's positions, SimplifiedLayerNormalization in the default domain
    (onnxruntime-genai), RoiAlign and GridSample: they were of unknown cost (a 4-bit MLP counted 0 MACs)."""
    import numpy as np
    from onnx import numpy_helper
    from executed_macs import executed_macs
    ms = {"": 17, "com.microsoft": 1}
    packed = numpy_helper.from_array(np.zeros((16, 2, 16), np.uint8), "wq")          # N 16, K 64 in 2 blocks of 32
    scales = numpy_helper.from_array(np.ones(32, np.float32), "ws")
    nbits = helper.make_node("MatMulNBits", ["a", "wq", "ws"], ["y"], name="nb", domain="com.microsoft", K=64, N=16,
                             bits=4, block_size=32)
    m = helper.make_model(helper.make_graph([nbits], "g", [tensor("a", [2, 3, 64])], [tensor("y", None)], [packed, scales]),
                          opset_imports=[helper.make_opsetid(d, v) for d, v in ms.items()])
    m.ir_version = 10
    r = node_metrics(graph_of(m)).set_index("node").loc["nb"]
    path = Path(__import__("tempfile").mkdtemp()) / "nbits.onnx"
    onnx.save(m, str(path))
    assert r["macs"] == 2 * 3 * 16 * 64 == executed_macs(path, {"a": np.ones((2, 3, 64), np.float32)})["total"]
    i32 = lambda n, v: numpy_helper.from_array(np.array(v, np.int32), n)  # noqa: E731
    gqa = helper.make_node("GroupQueryAttention", ["q", "k", "v", "pk", "pv", "seqlens", "total"], ["o", "pres_k", "pres_v"],
                           name="gqa", domain="com.microsoft", num_heads=4, kv_num_heads=2)
    m = helper.make_model(helper.make_graph([gqa], "g", [tensor("q", [1, 4, 64]), tensor("k", [1, 4, 32]), tensor("v", [1, 4, 32]),
                                                          tensor("pk", [1, 2, 3, 16]), tensor("pv", [1, 2, 3, 16])],
                                            [tensor("o", None), tensor("pres_k", None)], [i32("seqlens", [6]), i32("total", 7)]),
                          opset_imports=[helper.make_opsetid(d, v) for d, v in ms.items()])
    m.ir_version = 10
    r = node_metrics(graph_of(m)).set_index("node").loc["gqa"]
    assert r["macs"] == 4 * 4 * 7 * (16 + 16)          # 4 heads x 4 queries x (3 past + 4 new) keys x (Q K^T + A V)
    sln = _row([helper.make_node("SimplifiedLayerNormalization", ["x", "s"], ["y"], name="sln", axis=-1)],
               [tensor("x", [2, 8])], [weight("s", (8,))], {"": 17}, "sln")
    assert sln["flops"] == 6 * 16 and sln["op_class"] == "norm"
    roi = _row([helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], name="roi", output_height=7, output_width=7,
                                 sampling_ratio=2)],
               [tensor("x", [1, 4, 16, 16]), tensor("rois", [3, 4]), tensor("idx", [3], TensorProto.INT64)], [], {"": 17}, "roi")
    assert roi["out_shapes"] == "3x4x7x7" and roi["flops"] == 3 * 4 * 49 * 2 * 2 * 9
    gs = _row([helper.make_node("GridSample", ["x", "grid"], ["y"], name="gs")],
              [tensor("x", [1, 4, 8, 8]), tensor("grid", [1, 5, 6, 2])], [], {"": 17}, "gs")
    assert gs["out_shapes"] == "1x4x5x6" and gs["flops"] == 4 * 5 * 6 * 8


def test_a_node_nothing_reads_runs_and_is_costed():
    """ONNX Runtime runs a node none of whose outputs is read (3 us in a helper's model): its output gets a shape
    and its bytes (it had shape '?', unknown cost and 0 bytes marked known); a Dropout's unread mask stays unwritten."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Relu", ["m"], ["dead"], name="dead_relu"),
             helper.make_node("Dropout", ["m"], ["y", "mask"], name="drop")]
    df = metrics(nodes, [tensor("x", [2, 8])], [tensor("y", [2, 4])], [weight("w", (8, 4))])
    assert df.loc["dead_relu", "out_shapes"] == "2x4" and df.loc["dead_relu", "flops"] == 8
    assert df.loc["dead_relu", "act_out_bytes"] == 2 * 4 * 4 and df.loc["dead_relu", "cost_known"]
    assert df.loc["drop", "act_out_bytes"] == 2 * 4 * 4          # y only: the mask nothing reads is not written


def test_ort_symbolic_inference_past_its_time_limit_leaves_the_shapes_to_a_run(monkeypatch):
    """ORT's symbolic inference ran 8 minutes on a torchvision Faster R-CNN (sympy on Slice bounds), in 02 and
    again in 01, and found nothing the run of the last resort did not: past ORT_SYMBOLIC_TIMEOUT_S it gives up."""
    from lib.onnx import shapes
    nodes = [helper.make_node("Gelu", ["x"], ["g"], name="gelu", domain="com.microsoft"),   # onnx cannot type it
             helper.make_node("Relu", ["g"], ["y"], name="relu")]
    m = helper.make_model(helper.make_graph(nodes, "g", [tensor("x", [2, 8])], [tensor("y", None)]),
                          opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    assert node_metrics(graph_of(m)).set_index("node").loc["gelu", "shape_source"] == "ort"
    monkeypatch.setattr(shapes, "ORT_SYMBOLIC_TIMEOUT_S", 1e-6)
    row = node_metrics(graph_of(m)).set_index("node").loc["gelu"]
    assert row["shape_source"] == "executed" and row["out_shapes"] == "2x8"


def _ort_shape(nodes, inputs, inits, opsets) -> str:
    """The output shape ONNX Runtime writes for the model _row builds (random inputs)."""
    import numpy as np
    import onnxruntime as ort
    m = helper.make_model(helper.make_graph(nodes, "tiny", inputs, [tensor(o, None) for o in nodes[0].output[:1]],
                                            initializer=list(inits)),
                          opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])
    m.ir_version = 10
    feeds = {i.name: np.random.default_rng(0).standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim])
             .astype(np.float32) for i in inputs}
    y = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    return "x".join(map(str, y.shape))


def test_dft_deform_conv_col2im_and_rotary_embedding():
    """Ops that were of unknown cost, each run by ONNX Runtime (the shape 02 costs is the one ORT writes): DFT (one
    transform per signal: radix-2 5 n log2 n for a power-of-two length, else 8 n per bin; the axis from the
    attribute before opset 20, from input 2 after), DeformConv (the conv's MACs plus 9 FLOPs per offset sample),
    Col2Im (one add per patch value) and RotaryEmbedding (3 per element)."""
    import numpy as np
    from onnx import numpy_helper
    from executed_macs import executed_macs
    cases = [  # nodes, inputs, initializers, opsets, expected (out shape, FLOPs, MACs)
        ([helper.make_node("DFT", ["s"], ["y"], name="op", onesided=0)], [tensor("s", [2, 8, 1])], [], {"": 17},
         ("2x8x2", 2 * 5 * 8 * 3, 0)),
        ([helper.make_node("DFT", ["s"], ["y"], name="op", onesided=1)], [tensor("s", [1, 6, 1])], [], {"": 17},
         ("1x4x2", 8 * 6 * 4, 0)),
        ([helper.make_node("DFT", ["s", "", "ax"], ["y"], name="op")], [tensor("s", [3, 4, 16, 1])],
         [numpy_helper.from_array(np.array(-2, np.int64), "ax")], {"": 20}, ("3x4x16x2", 12 * 5 * 16 * 4, 0)),
        ([helper.make_node("DeformConv", ["x", "w", "off"], ["y"], name="op")],
         [tensor("x", [1, 2, 5, 5]), tensor("off", [1, 18, 3, 3])], [weight("w", (3, 2, 3, 3))], {"": 19},
         ("1x3x3x3", 2 * 27 * 18 + 9 * 9 * 2 * 9, 27 * 18)),
        ([helper.make_node("Col2Im", ["x", "hw", "bs"], ["y"], name="op")], [tensor("x", [1, 8, 9])],
         [numpy_helper.from_array(np.array([4, 4], np.int64), "hw"), numpy_helper.from_array(np.array([2, 2], np.int64), "bs")],
         {"": 18}, ("1x2x4x4", 8 * 9, 0)),
    ]
    for nodes, inputs, inits, opsets, (shape, flops, macs) in cases:
        r = _row(nodes, inputs, inits, opsets, "op")
        assert (r["out_shapes"], r["flops"], r["macs"]) == (shape, flops, macs), (nodes[0].op_type, r.to_dict())
        assert _ort_shape(nodes, inputs, inits, opsets) == shape
    deform = cases[3]
    m = helper.make_model(helper.make_graph(deform[0], "g", deform[1], [tensor("y", None)], initializer=deform[2]),
                          opset_imports=[helper.make_opsetid("", 19)])
    m.ir_version = 10
    path = Path(__import__("tempfile").mkdtemp()) / "deform.onnx"
    onnx.save(m, str(path))
    feeds = {i.name: np.ones([d.dim_value for d in i.type.tensor_type.shape.dim], np.float32) for i in deform[1]}
    assert executed_macs(path, feeds)["total"] == 27 * 18        # the MACs ONNX Runtime ran
    rope = helper.make_node("RotaryEmbedding", ["x", "pos", "cos", "sin"], ["y"], name="op", domain="com.microsoft")
    r = _row([rope], [tensor("x", [1, 4, 32]), tensor("pos", [1, 4], TensorProto.INT64)],
             [weight("cos", (16, 16)), weight("sin", (16, 16))], {"": 17, "com.microsoft": 1}, "op")
    assert r["flops"] == 3 * 4 * 32 and r["cost_known"]


def test_contrib_quantization_ops_and_tensor_scatter():
    """quantize_static's 4-bit QDQ (ORT's com.microsoft Quantize/DequantizeLinear), quantize_dynamic's fused
    QEmbedLayerNormalization and opset 24's TensorScatter (a KV cache's rows written in place) were of unknown cost
    (07: 45% and 30% of device A's time counted 0 FLOPs): the standard ops' formulas, and 0 FLOPs for the scatter."""
    import numpy as np
    from onnx import numpy_helper
    ms = {"": 24, "com.microsoft": 1}
    scale, zp = numpy_helper.from_array(np.array(0.1, np.float32), "s"), helper.make_tensor("z", TensorProto.INT4, [], [0])
    dq = helper.make_node("DequantizeLinear", ["w", "s", "z"], ["y"], name="dq", domain="com.microsoft")
    r = _row([dq], [], [helper.make_tensor("w", TensorProto.INT4, [64], [1] * 64), scale, zp], ms, "dq")
    assert r["cost_known"] and r["flops"] == 2 * 64          # scale and shift per element, as the standard op
    ids = [tensor("ids", [1, 8], TensorProto.INT32), tensor("seg", [1, 8], TensorProto.INT32)]
    u8 = [numpy_helper.from_array(np.zeros(sh, np.uint8), n) for n, sh in
          (("we", (20, 16)), ("pe", (16, 16)), ("se", (2, 16)), ("gamma", (16,)), ("beta", (16,)))]
    qs = [numpy_helper.from_array(np.array(v, t), n) for n, v, t in (("sc", 0.1, np.float32), ("zu", 0, np.uint8))]
    embed = helper.make_node("QEmbedLayerNormalization", ["ids", "seg", "we", "pe", "se", "gamma", "beta", "",
                                                          *["sc"] * 5, *["zu"] * 5], ["out", "mask_index"],
                             name="qembed", domain="com.microsoft")
    m = helper.make_model(helper.make_graph([embed], "g", ids, [tensor("out", [1, 8, 16])], u8 + qs),
                          opset_imports=[helper.make_opsetid(d, v) for d, v in ms.items()])
    m.ir_version = 10
    r = node_metrics(graph_of(m)).set_index("node").loc["qembed"]
    assert r["cost_known"] and r["flops"] == 10 * 8 * 16     # EmbedLayerNormalization's 10 per output element
    scatter = helper.make_node("TensorScatter", ["cache", "upd", "pos"], ["new"], name="scatter")
    r = _row([scatter], [tensor("cache", [1, 4, 16, 8]), tensor("upd", [1, 4, 1, 8]),
                         tensor("pos", [1], TensorProto.INT64)], [], ms, "scatter")
    assert r["cost_known"] and r["flops"] == 0 and r["act_out_bytes"] == 4 * 16 * 8 * 4
