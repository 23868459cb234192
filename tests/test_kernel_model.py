"""The kernel model (issue 30): ORT kernels mapped onto original nodes, the cache-aware roofline bound, compute
dtypes, the LightGBM kernel model (fit, predict, save, load, leave-one-family-out), 03's bound check.

Real ORT sessions on tiny graphs; values hand-computed. No timing assertions: measured times only ever appear
as "the bound is below them" (a physical fact up to the profiler's 1 us resolution) or as inputs of a fit."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import onnx
import pandas as pd
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from conftest import REPO, make_model, run_stage, tensor, weight
from lib.analysis import roofline as rf
from lib.errors import StageError
from lib.host import load_host, per_dtype
from lib.latency import kernel_model as km
from lib.latency.calibrate import update_host_file
from lib.latency.kernels import kernel_table
from lib.latency.training import profile_record
from lib.latency.training_models import FAMILY_OF, _batch
from lib.onnx.inputs import InputSpec
from lib.onnx.loading import graph_of
from lib.onnx.metrics import node_metrics

HOST = {"peak_flops_per_s": {"default": 2e11, "float": 2e11, "int8": 8e11}, "mem_bw_bytes_per_s": 2e10,
        "caches_bytes": {"L1": 32768, "L2": 1 << 20, "L3": 32 << 20},
        "bandwidth_bytes_per_s": {"L1": 2e11, "L2": 1e11, "L3": 5e10, "DRAM": 2e10}}


def conv_relu_add(path):
    """x[1,3,16,16] -> Conv(8, 3x3, pad 1) -> Relu -> Add(r, r): ORT fuses Conv+Relu into one NCHWc kernel."""
    nodes = [helper.make_node("Conv", ["x", "W", "B"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"), helper.make_node("Add", ["r", "r"], ["y"], name="add")]
    return make_model(nodes, [tensor("x", [1, 3, 16, 16])], [tensor("y", [1, 8, 16, 16])],
                      [weight("W", [8, 3, 3, 3]), weight("B", [8])], path=path)


def matmul_net(path):
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"), helper.make_node("Add", ["m", "B"], ["a"], name="bias"),
             helper.make_node("Tanh", ["a"], ["y"], name="tanh")]
    return make_model(nodes, [tensor("x", [4, 64])], [tensor("y", [4, 32])], [weight("W", [64, 32]), weight("B", [32])],
                      path=path)


def softmax_net(path):
    nodes = [helper.make_node("Mul", ["x", "x"], ["m"], name="sq"), helper.make_node("Softmax", ["m"], ["y"], name="sm")]
    return make_model(nodes, [tensor("x", [8, 128])], [tensor("y", [8, 128])], path=path)


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    d = tmp_path_factory.mktemp("km")
    host = load_host("configs/host.yaml")
    out = []
    for name, family, build in (("cra", "cnn", conv_relu_add), ("mm", "dense", matmul_net), ("sm", "attn", softmax_net)):
        build(d / f"{name}.onnx")
        out.append(profile_record(d / f"{name}.onnx", name, family, host, runs=5, warmup=2))
    return out


def test_kernel_table_maps_fused_kernels_onto_their_nodes(records):
    kt = records[0]["kernels"].set_index("op")
    conv = kt.loc["NchwcConv"]          # ORT runs it in its blocked NCHWc layout: another kernel than an NCHW Conv
    assert conv["pattern"] == "Conv+Relu" and conv["node"] == "conv" and conv["n_nodes"] == 2
    conv_flops, relu_flops = 2 * 8 * 3 * 9 * 256, 8 * 256        # 2 x MACs, one op per Relu output
    assert conv["flops"] == conv_flops + relu_flops and conv["macs"] == 8 * 3 * 9 * 256
    assert conv["bytes"] == (8 * 27 + 8) * 4 + 3 * 256 * 4 + 8 * 256 * 4       # weights + input + output, fp32
    assert conv["in_shapes"].startswith("1x3x16x16") and conv["t_us"] >= 0
    assert kt.loc["ReorderOutput", "layout"] and kt.loc["ReorderOutput", "flops"] == 0
    assert kt.loc["Add", "bytes"] == 3 * 8 * 256 * 4
    # the same kernels from ORT's optimized graph alone (prediction): no times
    g = records[0]["graph"]
    pred = kernel_table(g, records[0]["metrics"], records[0]["optimized"])
    assert list(pred["pattern"]) == list(records[0]["kernels"]["pattern"]) and pred["t_us"].isna().all()


def test_bytes_policy_and_memory_levels():
    df = pd.DataFrame({"op_type": ["Reshape", "Shape", "Gather", "Add"], "act_in_bytes": [400.0, 400, 4e6, 800],
                       "act_out_bytes": [400.0, 32, 40, 400], "weight_bytes": [0.0, 0, 0, 0]})
    assert list(rf.kernel_node_bytes(df)) == [0.0, 0.0, 80.0, 1200.0]
    level, bw = rf.memory_level([1000, 100_000, 4 << 20, 1 << 30], HOST)
    assert list(level) == ["L1", "L2", "L3", "DRAM"] and list(bw) == [2e11, 1e11, 5e10, 2e10]
    t, _ = rf.bound_us([2e9, 0], [1e3, 1 << 30], [2e11, 2e11], HOST)
    # each level serves at most its size, the rest comes from the next: 32 KiB from L1, 1 MiB - 32 KiB from L2,
    # 31 MiB from L3, 1 GiB - 32 MiB from DRAM
    one_gib = 32768 / 2e11 + ((1 << 20) - 32768) / 1e11 + (31 << 20) / 5e10 + ((1 << 30) - (32 << 20)) / 2e10
    assert t[0] == pytest.approx(1e4) and t[1] == pytest.approx(one_gib * 1e6)
    # continuous across a cache size (all bytes at DRAM's bandwidth would jump 2.5x at 32 MiB), and unknown
    # bytes stay unknown
    at, past = rf.memory_time_us([32 << 20, (32 << 20) + 1], HOST)
    assert past - at == pytest.approx(1 / 2e10 * 1e6)
    assert np.isnan(rf.memory_time_us([np.nan], HOST)[0])


def test_bound_is_below_measured_kernels(records):
    host = load_host("configs/host.yaml")
    for r in records:
        b, _ = km.bounds(r["kernels"], host)
        assert (b >= 0).all()
        assert (b <= r["kernels"]["t_us"].to_numpy() + rf.RESOLUTION_US).all(), r["model"]


def test_layout_kernel_moves_its_own_tensor(tmp_path):
    """ORT reorders a ReduceMean's 48-value output into NCHWc for the Conv it feeds: the ReorderInput kernel moves
    that tensor (2 x 48 x 4 bytes), not the ReduceMean's input (it was charged 2 x 76,800 bytes, a bound 400x its
    due that ppocr models' ReorderInputs ran below), in the measured table and in the one a prediction reads."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["m"], name="mean", axes=[2, 3], keepdims=1),
             helper.make_node("Conv", ["m", "W"], ["y"], name="conv")]
    make_model(nodes, [tensor("x", [1, 48, 20, 20])], [tensor("y", [1, 48, 1, 1])], [weight("W", [48, 48, 1, 1])],
               path=tmp_path / "ri.onnx")
    host = load_host("configs/host.yaml")
    r = profile_record(tmp_path / "ri.onnx", "ri", "t", host, runs=3, warmup=1)
    for kt in (r["kernels"], kernel_table(r["graph"], r["metrics"], r["optimized"])):
        reorder = kt.set_index("op").loc["ReorderInput"]
        assert reorder["node"] == "mean" and reorder["bytes"] == 2 * 48 * 4 and reorder["flops"] == 0
        assert kt.set_index("op").loc["ReorderOutput", "bytes"] == 2 * 48 * 4
    b, _ = km.bounds(r["kernels"], host)
    assert (b <= r["kernels"]["t_us"].to_numpy() + rf.RESOLUTION_US).all()


def test_a_kernel_that_starts_with_shape_reads_the_shape_vector():
    """ORT's Gather kernel of Shape -> Gather (swin_t's attention reads a dim of a 1.2 MB tensor) moves the 4-value
    shape vector and its 1-value output, not the tensor the Shape looked at (its bound was 17 us, it ran in 12)."""
    from lib.latency.kernels import group_row
    m = {"node": np.array(["shape", "idx", "gather"], dtype=object),
         "op": np.array(["Shape", "Constant", "Gather"], dtype=object), "flops": np.zeros(3), "macs": np.zeros(3), "weight_bytes": np.zeros(3),
         "act_in": np.array([1204224.0, 0.0, 40.0]), "act_out": np.array([32.0, 8.0, 8.0]),
         "kbytes": np.array([0.0, 0.0, 16.0]), "compute_dtype": np.array(["int64"] * 3, dtype=object),
         "dtype": np.array(["int64"] * 3, dtype=object), "int_weight": np.array([""] * 3, dtype=object),
         "dims": np.array(["4", "", ""], dtype=object), "shape_op": np.array([True, True, True]),
         "axis_stride": np.ones(3), "exp_underflow": np.zeros(3), "subnormal": np.zeros(3)}
    row = group_row([0, 1, 2], "Gather", m)
    assert row["act_in_bytes"] == 32 and row["act_out_bytes"] == 8 and row["bytes"] == 40 and row["node"] == "gather"


def test_a_fused_kernel_takes_the_subnormal_share_of_its_anchor():
    """A bias Add fused into a Conv adds a few hundred values: the kernel's share is its Conv's (PP-OCRv6's
    Conv+Add with 62% of its bias subnormal ran at its normal speed), not the largest of its nodes."""
    from lib.latency.kernels import group_row
    m = {"node": np.array(["conv", "bias"], dtype=object), "op": np.array(["Conv", "Add"], dtype=object),
         "flops": np.array([2e6, 1e3]), "macs": np.array([1e6, 0.0]), "weight_bytes": np.array([4e3, 4e2]),
         "act_in": np.array([4e4, 4e4]), "act_out": np.array([4e4, 4e4]), "kbytes": np.array([8e4, 8e4]),
         "compute_dtype": np.array(["float"] * 2, dtype=object), "dims": np.array(["1x8x8x8"] * 2, dtype=object),
         "dtype": np.array(["float"] * 2, dtype=object), "int_weight": np.array([""] * 2, dtype=object),
         "shape_op": np.zeros(2, bool), "axis_stride": np.ones(2), "exp_underflow": np.zeros(2),
         "subnormal": np.array([0.0, 0.62])}
    assert group_row([0, 1], "Conv", m)["subnormal"] == 0.0
    m["subnormal"] = np.array([0.25, 0.62])
    assert group_row([0, 1], "Conv", m)["subnormal"] == 0.25


def test_a_constant_folded_into_a_kernel_reads_nothing(tmp_path):
    """Paddle's hard-swish writes x + 3 as a Constant node and an Add: ORT folds the Constant into the Add kernel,
    which still reads x and writes its sum: 2 x 8x24x96 x 4 bytes plus the 4-byte constant (it was charged the
    output alone: the group's first node, the Constant, reads nothing)."""
    nodes = [helper.make_node("Constant", [], ["three"], name="three",
                              value=numpy_helper.from_array(np.array(3.0, np.float32))),
             helper.make_node("Add", ["x", "three"], ["y"], name="add")]
    make_model(nodes, [tensor("x", [1, 8, 24, 96])], [tensor("y", [1, 8, 24, 96])], [], path=tmp_path / "c.onnx")
    r = profile_record(tmp_path / "c.onnx", "c", "t", load_host("configs/host.yaml"), runs=2, warmup=1)
    for kt in (r["kernels"], kernel_table(r["graph"], r["metrics"], r["optimized"])):
        add = kt.set_index("op").loc["Add"]
        assert add["nodes"] == "three;add" and add["bytes"] == 2 * 8 * 24 * 96 * 4 + 4, add.to_dict()


def test_a_view_that_writes_a_graph_output_copies_its_tensor(tmp_path):
    """Relu -> Reshape -> Relu -> Reshape (graph output): ORT runs the inner Reshape as a view (0 bytes) and copies
    the last one's tensor into the output (read + write, 2 x 16x256 x 4 bytes), measured and predicted alike."""
    shape = numpy_helper.from_array(np.array([16, 256], np.int64), "s")
    back = numpy_helper.from_array(np.array([4096], np.int64), "flat")
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu1"),
             helper.make_node("Reshape", ["a", "s"], ["b"], name="inner"),
             helper.make_node("Relu", ["b"], ["c"], name="relu2"),
             helper.make_node("Reshape", ["c", "flat"], ["y"], name="last")]
    make_model(nodes, [tensor("x", [4096])], [tensor("y", [4096])], [shape, back], path=tmp_path / "v.onnx")
    r = profile_record(tmp_path / "v.onnx", "v", "t", load_host("configs/host.yaml"), runs=2, warmup=1)
    for kt in (r["kernels"], kernel_table(r["graph"], r["metrics"], r["optimized"])):
        kt = kt.set_index("node")
        assert kt.loc["inner", "bytes"] == 0 and kt.loc["last", "bytes"] == 2 * 4096 * 4, kt["bytes"].to_dict()
        assert kt.loc["last", "act_in_bytes"] == kt.loc["last", "act_out_bytes"] == 4096 * 4


def test_a_dequantize_of_weights_that_ort_runs_moves_its_tensors(tmp_path):
    """DequantizeLinear(int8 W) -> Conv with float activations: 02 takes the DequantizeLinear as folded (computed
    from constants), yet ORT runs it at every inference: it reads W, its scale and zero point (16x8x3x3 + 4 + 1 bytes)
    and writes W in fp32 (4 x 16x8x3x3)."""
    w = numpy_helper.from_array(np.random.default_rng(0).integers(-64, 64, (16, 8, 3, 3)).astype(np.int8), "Wq")
    s, z = numpy_helper.from_array(np.array(0.02, np.float32), "s"), numpy_helper.from_array(np.array(0, np.int8), "z")
    nodes = [helper.make_node("DequantizeLinear", ["Wq", "s", "z"], ["W"], name="dqw"),
             helper.make_node("Conv", ["x", "W"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    make_model(nodes, [tensor("x", [1, 8, 16, 16])], [tensor("y", [1, 16, 16, 16])], [w, s, z], opset=19,
               path=tmp_path / "dq.onnx")
    r = profile_record(tmp_path / "dq.onnx", "dq", "t", load_host("configs/host.yaml"), runs=2, warmup=1)
    assert r["metrics"].set_index("node").loc["dqw", "act_out_bytes"] == 0        # 02: folded
    n = 16 * 8 * 3 * 3
    for kt in (r["kernels"], kernel_table(r["graph"], r["metrics"], r["optimized"])):
        kt = kt.set_index("node")
        assert kt.loc["dqw", "weight_bytes"] == n + 4 + 1 and kt.loc["dqw", "act_out_bytes"] == 4 * n
        assert kt.loc["dqw", "bytes"] == n + 5 + 4 * n
    # stage 03's per-node roofline: the same bytes (01's attribution: a kernel of its own), a bound from them
    rdir = tmp_path / "r"
    for stage in ("02_shapes_flops_bytes.py", "01_profile_onnx.py", "03_merge_profile_metrics.py"):
        r = run_stage(stage, "--model", tmp_path / "dq.onnx", "--results", rdir, *(["--runs", "2"] if "01" in stage else []))
        assert r.returncode == 0, r.stderr
    row = pd.read_csv(rdir / "ops_profile.csv").set_index("node").loc["dqw"]
    assert row["attribution"] == "kernel" and (row["act_in_bytes"], row["act_out_bytes"], row["weight_bytes"]) == (0, 4 * n, n + 5)
    assert row["t_mem_us"] > 0 and row["bound"] == "memory"


def test_an_if_whose_branch_is_known_is_predicted_as_that_branchs_kernels(tmp_path):
    """optimum's merged decoders hold the whole model in one If (use_cache_branch): the prediction saw one 'If'
    kernel (-97% on T5 and Whisper). The kernels ORT runs in the taken branch replace it: here x @ W1 @ W2
    (then) or x @ W3 (else)."""
    rng = np.random.default_rng(0)
    w = lambda n, s: numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)  # noqa: E731
    then = helper.make_graph([helper.make_node("MatMul", ["x", "W1"], ["h"], name="mm1"),
                              helper.make_node("MatMul", ["h", "W2"], ["t"], name="mm2")], "then", [], [tensor("t", [8, 32])])
    other = helper.make_graph([helper.make_node("MatMul", ["x", "W3"], ["e"], name="mm3")], "else", [], [tensor("e", [8, 32])])
    nodes = [helper.make_node("If", ["c"], ["y"], name="if", then_branch=then, else_branch=other)]
    path = tmp_path / "if.onnx"
    make_model(nodes, [tensor("c", [], TensorProto.BOOL), tensor("x", [8, 64])], [tensor("y", [8, 32])],
               [w("W1", (64, 64)), w("W2", (64, 32)), w("W3", (64, 32))], path=path)
    for cond, want in ((True, {"mm1": 8 * 64 * 64, "mm2": 8 * 64 * 32}), (False, {"mm3": 8 * 64 * 32})):
        feeds = {"c": np.array(cond), "x": rng.standard_normal((8, 64)).astype(np.float32)}
        g = graph_of(onnx.load(str(path)), InputSpec(arrays=feeds))       # the branch these inputs take
        r = profile_record(path, "if", "t", load_host("configs/host.yaml"), runs=2, warmup=1, graph=g, feeds=feeds)
        kt = kernel_table(r["graph"], r["metrics"], r["optimized"])
        assert "If" not in set(kt["op"]) and dict(zip(kt["node"], kt["macs"])) == want, kt[["kernel", "op", "macs"]]


def test_a_loop_of_known_trips_is_predicted_as_its_bodys_kernels_per_iteration(tmp_path):
    """Loop(M=3) over h @ W: one never-seen 'Loop' kernel was predicted at 2x the body's time x 3. Its body's
    kernels replace it, once per iteration (8 x 64 x 64 MACs each)."""
    rng = np.random.default_rng(0)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["h_in", "W"], ["h_out"], name="mm"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep")], "body",
        [tensor("i", [], TensorProto.INT64), tensor("cond_in", [], TensorProto.BOOL), tensor("h_in", [8, 64])],
        [tensor("cond_out", [], TensorProto.BOOL), tensor("h_out", [8, 64])])
    nodes = [helper.make_node("Loop", ["M", "c0", "x"], ["y"], name="loop", body=body)]
    path = tmp_path / "loop.onnx"
    make_model(nodes, [tensor("x", [8, 64])], [tensor("y", [8, 64])],
               [numpy_helper.from_array(np.array(3, np.int64), "M"), numpy_helper.from_array(np.array(True), "c0"),
                numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32), "W")], path=path)
    r = profile_record(path, "loop", "t", load_host("configs/host.yaml"), runs=2, warmup=1)
    kt = kernel_table(r["graph"], r["metrics"], r["optimized"])
    assert "Loop" not in set(kt["op"]) and kt.loc[kt["node"] == "mm", "macs"].tolist() == [8 * 64 * 64] * 3


def qdq_conv(path, quantize_output=True, weights=np.int8):
    """DequantizeLinear(x uint8), DequantizeLinear(W int8, or `weights`) -> Conv [-> QuantizeLinear]."""
    s, z8, zu = (numpy_helper.from_array(np.array(v, dtype=t), n) for v, t, n in
                 ((0.1, np.float32, "s"), (0, np.int8, "z8"), (128, np.uint8, "zu")))
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), weights), "Wq")
    nodes = [helper.make_node("DequantizeLinear", ["xq", "s", "zu"], ["x"], name="dqx"),
             helper.make_node("DequantizeLinear", ["Wq", "s", "z8" if weights == np.int8 else "zu"], ["W"], name="dqw"),
             helper.make_node("Conv", ["x", "W"], ["c"], name="conv")]
    out = "c"
    if quantize_output:
        nodes.append(helper.make_node("QuantizeLinear", ["c", "s", "zu"], ["y"], name="q"))
        out = "y"
    return make_model(nodes, [tensor("xq", [1, 3, 8, 8], TensorProto.UINT8)],
                      [tensor(out, [1, 4, 6, 6], TensorProto.UINT8 if quantize_output else TensorProto.FLOAT)],
                      [s, z8, zu, w], opset=19, path=path)


@pytest.mark.parametrize("activations, fused", [("QUInt8", 2), ("QInt8", 0)])
def test_a_qdq_conv_computes_in_the_type_of_the_kernel_ort_runs(tmp_path, activations, fused):
    """quantize_static (QDQ) of a residual block exported by the TorchScript exporter: ORT fuses DequantizeLinear ->
    Conv -> QuantizeLinear into QLinearConv for 2 of its 3 convs with uint8 activations and for none with int8 ones
    (quantize_static's default; on this CPU). Stage 02 guesses int8 for all three (a bound stays a bound); the kernel
    table says what ORT runs: a Conv kernel computes in float (resnet18 quantized so: 14 of 20 convs ran in fp32,
    which the prediction took for int8 kernels, a type never trained, at 1.9 of 11.6 ms)."""
    import torch
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    from lib.latency.predict import optimized_graph
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self, c=8):
            super().__init__()
            self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, c, 3, padding=1), torch.nn.BatchNorm2d(c), torch.nn.ReLU())
            self.c1, self.b1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c)
            self.c2, self.b2 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c)

        def forward(self, x):
            x = self.stem(x)
            return torch.relu(x + self.b2(self.c2(torch.relu(self.b1(self.c1(x))))))

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.data = iter([{"x": np.random.default_rng(i).standard_normal((1, 3, 16, 16)).astype(np.float32)}
                              for i in range(2)])

        def get_next(self):
            return next(self.data, None)
    f32, path = tmp_path / "f.onnx", tmp_path / "q.onnx"
    torch.onnx.export(Block().eval(), torch.randn(1, 3, 16, 16), str(f32), dynamo=False, input_names=["x"], opset_version=17)
    quantize_static(str(f32), str(path), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=getattr(QuantType, activations))
    g = graph_of(onnx.load(str(path)))
    metrics = node_metrics(g)
    assert (metrics[metrics["op_type"] == "Conv"]["compute_dtype"] == "int8").all()
    kt = kernel_table(g, metrics, optimized_graph(path))
    convs = kt[kt["op"].isin(["Conv", "QLinearConv"])]
    assert sorted(zip(convs["op"], convs["compute_dtype"])) == [("Conv", "float")] * (3 - fused) + [("QLinearConv", "int8")] * fused


def test_a_kernel_ort_runs_in_integer_computes_in_its_weights_type():
    """The kernel's op decides where stage 02 guessed otherwise: a QGemm (a Gemm between DequantizeLinear nodes
    whose output ORT keeps in float) computes in its weight's 8-bit type, a plain Conv in its node's float type."""
    from lib.latency.kernels import runs_in
    assert runs_in("QGemm", "float", "float", "uint8") == "uint8"
    assert runs_in("QGemm", "float", "float", "") == "int8"
    assert runs_in("QLinearConv", "int8", "float", "int8") == "int8"
    assert runs_in("Conv", "int8", "float", "int8") == "float"
    assert runs_in("FusedConv", "uint8", "float16", "uint8") == "float16"
    assert runs_in("Relu", "int8", "float", "") == "int8"


def test_compute_dtype_of_qdq_and_fp16(tmp_path):
    def dtype_of(model, node):
        df = node_metrics(graph_of(model)).set_index("node")
        return df.loc[node, "compute_dtype"]
    assert dtype_of(qdq_conv(tmp_path / "q.onnx"), "conv") == "int8"      # ORT runs QLinearConv
    # ORT's u8u8 QLinearConv (a resnet18 QDQ export ran 1.15-1.6x slower with uint8 weights than int8 ones)
    assert dtype_of(qdq_conv(tmp_path / "u.onnx", weights=np.uint8), "conv") == "uint8"
    assert dtype_of(qdq_conv(tmp_path / "f.onnx", quantize_output=False), "conv") == "float"
    half = make_model([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], [tensor("x", [2, 8], TensorProto.FLOAT16)],
                      [tensor("y", [2, 4], TensorProto.FLOAT16)], [weight("W", [8, 4], np.float16)])
    assert dtype_of(half, "mm") == "float16"


@pytest.mark.parametrize("wdtype, expected", [(np.int8, "int8"), (np.uint8, "uint8")])
def test_integer_kernels_carry_their_weight_type(wdtype, expected):
    """quantize_dynamic's ConvInteger with uint8 weights runs ORT's u8u8 kernel, with int8 ones its u8s8 kernel
    (measured 7x apart on a 64->64 56x56 conv): two kernel types, not one."""
    w = numpy_helper.from_array(np.ones((4, 3, 3, 3), wdtype), "W")
    z = numpy_helper.from_array(np.array(0, wdtype), "wz")
    m = make_model([helper.make_node("ConvInteger", ["x", "W", "", "wz"], ["y"], name="ci")],
                   [tensor("x", [1, 3, 8, 8], TensorProto.UINT8)], [tensor("y", [1, 4, 6, 6], TensorProto.INT32)],
                   [w, z])
    assert node_metrics(graph_of(m)).set_index("node").loc["ci", "compute_dtype"] == expected


def test_a_uint8_kernel_takes_the_int8_figure_of_a_host_file_without_uint8():
    assert per_dtype({"default": 1.0, "int8": 4.0}, "uint8") == 4.0
    assert per_dtype({"default": 1.0, "int8": 4.0, "uint8": 3.0}, "uint8") == 3.0
    assert per_dtype({"default": 1.0}, "uint8") == 1.0 and per_dtype({"default": 1.0, "int8": 4.0}, "float") == 1.0


def test_fp16_kernels_ort_runs_in_fp32_and_a_channels_last_qlinearconv(tmp_path):
    """An fp16 CNN on a CPU without fp16 conv kernels: ORT runs each Conv in fp32 (its kernels renamed
    InsertedPrecisionFreeCast_<tensor>); each maps onto its own conv, with fp32 dtype and twice the fp16 bytes.
    A QLinearConv ORT runs channels-last sits after the input Transpose it inserts: the conv kernel, not the
    Transpose, carries the node's FLOPs."""
    from unseen_models import build_fp16_cnn
    from lib.latency.predict import optimized_graph
    path = build_fp16_cnn(tmp_path / "fp16.onnx")["path"]
    g = graph_of(onnx.load(str(path)))
    metrics = node_metrics(g)
    kt = kernel_table(g, metrics, optimized_graph(path))
    convs = kt[kt["op"] == "NchwcConv"].sort_values("flops")
    m = metrics.set_index("node")
    fp16_convs = m[m["op_type"] == "Conv"].sort_values("flops")
    assert len(convs) == 2 and (convs["compute_dtype"] == "float").all()
    # Conv 3->16 and 16->16 on 16x16, 3x3: each kernel its own conv's FLOPs (2 x MACs, + the fused epilogue)
    assert convs["macs"].tolist() == [16 * 16 * 3 * 9 * 16, 16 * 16 * 16 * 9 * 16]
    assert convs["weight_bytes"].tolist() == (2 * fp16_convs["weight_bytes"]).tolist()
    q = qdq_conv(tmp_path / "q.onnx")
    gq = graph_of(q)
    kq = kernel_table(gq, node_metrics(gq), optimized_graph(tmp_path / "q.onnx"))
    row = kq[kq["op"].str.contains("QLinearConv")].iloc[0]
    assert row["macs"] == 4 * 6 * 6 * 3 * 9 and not row["layout"]


def test_integer_kernels_of_a_qdq_model_are_typed_and_sized_as_they_run(tmp_path):
    """A QDQ model's MaxPool and Add run as ORT's NhwcMaxPool and QLinearAdd on uint8 tensors: they were typed
    by the float nodes they anchor on (QLinearAdd/float, flagged never seen on make calibrate's own resnet18_qdq,
    where a QOperator export's same kernel is QLinearAdd/uint8), at 4 bytes per element."""
    from lib.latency.predict import optimized_graph
    s, z8, zu = (numpy_helper.from_array(np.array(v, dtype=t), n) for v, t, n in
                 ((0.1, np.float32, "s"), (0, np.int8, "z8"), (128, np.uint8, "zu")))
    w = numpy_helper.from_array(np.ones((8, 8, 3, 3), np.int8), "Wq")

    def dq(i, o):
        return helper.make_node("DequantizeLinear", [i, "s", "z8" if i == "Wq" else "zu"], [o], name="dq_" + o)

    def q(i, o):
        return helper.make_node("QuantizeLinear", [i, "s", "zu"], [o], name="q_" + o)
    nodes = [dq("xq", "x"), dq("Wq", "W"), helper.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1] * 4),
             q("c", "cq"), dq("cq", "cd"),
             helper.make_node("MaxPool", ["cd"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             q("p", "pq"), dq("pq", "pd"), dq("yq", "y"), helper.make_node("Add", ["pd", "y"], ["a"], name="add"),
             q("a", "aq")]
    path = tmp_path / "qdq.onnx"
    g = graph_of(make_model(nodes, [tensor("xq", [1, 8, 16, 16], TensorProto.UINT8),
                                    tensor("yq", [1, 8, 8, 8], TensorProto.UINT8)],
                            [tensor("aq", [1, 8, 8, 8], TensorProto.UINT8)], [s, z8, zu, w], opset=19, path=path))
    kt = kernel_table(g, node_metrics(g), optimized_graph(path)).set_index("op")
    assert kt.loc["NhwcMaxPool", "compute_dtype"] == kt.loc["QLinearAdd", "compute_dtype"] == "uint8"
    # the pool's tensors ORT renamed: 1x8x16x16 in, 1x8x8x8 out, one byte each; the add's kept their names: its
    # two uint8 inputs (and 15 bytes of scales and zero points), its uint8 output
    assert kt.loc["NhwcMaxPool", ["act_in_bytes", "act_out_bytes"]].tolist() == [2048, 512]
    assert kt.loc["QLinearAdd", ["act_in_bytes", "act_out_bytes"]].tolist() == [2 * 512 + 3 * 4 + 3 * 1, 512]
    assert (kt.loc["Transpose", "compute_dtype"] == "uint8").all()          # the layout ORT inserts around it


def test_kernel_types_of_an_fp16_model_are_the_same_from_01s_kept_graph(tmp_path):
    """01 keeps ORT's optimized graph with weights over 64 KiB stripped: ORT refused to load that copy, so the
    fp16 conv it runs in fp32 kept its fp16 type once 01 had run (make calibrate's resnet18_fp16 was then flagged
    'never seen' for all of its time, and predicted 10% slower than without 01)."""
    from lib.latency.kernels import executed_types
    from lib.latency.predict import optimized_graph
    path = tmp_path / "h.onnx"
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    make_model(nodes, [tensor("x", [1, 64, 8, 8], TensorProto.FLOAT16)], [tensor("y", None, TensorProto.FLOAT16)],
               [weight("w", (64, 64, 3, 3), np.float16)], path=path)                 # 73,728 bytes: stripped
    r = run_stage("01_profile_onnx.py", "--model", path, "--results", tmp_path / "r", "--runs", "1")
    assert r.returncode == 0, r.stderr
    kept = onnx.load(str(tmp_path / "r" / "profile" / "ort_optimized.onnx"), load_external_data=False)
    assert any(t.data_location == onnx.TensorProto.EXTERNAL for t in kept.graph.initializer)
    fresh = executed_types(optimized_graph(path))
    assert ("float", "float") in fresh.values() and executed_types(kept) == fresh


def test_rounds_of_a_training_model_merge_into_medians(tmp_path):
    """Three real profiles of one model: each kernel's merged time and the session are the medians over the
    rounds; profile_models with rounds=3 returns one record per model."""
    from lib.latency.training import merge_rounds, profile_models
    host = load_host("configs/host.yaml")
    path = tmp_path / "cra.onnx"
    conv_relu_add(path)
    rounds = [profile_record(path, "cra", "cnn", host, runs=3, warmup=1) for _ in range(3)]
    merged = merge_rounds(rounds)
    per_round = np.array([r["kernels"]["t_us"].to_numpy(float) for r in rounds])
    assert np.array_equal(merged["kernels"]["t_us"].to_numpy(float), np.median(per_round, axis=0))
    assert merged["session_us"] == np.median([r["session_us"] for r in rounds])
    recs = profile_models([("cra", "cnn", path)], host, runs=2, rounds=3)
    assert len(recs) == 1 and list(recs[0]["kernels"]["kernel"]) == list(rounds[0]["kernels"]["kernel"])
    # ORT renumbers its Reorder kernels in each session: a kernel is matched by op, node and shapes, not by name
    kt = rounds[1]["kernels"].copy()
    kt["kernel"] = list(reversed(kt["kernel"]))
    renamed = merge_rounds([rounds[0], {**rounds[1], "kernels": kt}, rounds[2]])
    assert np.array_equal(renamed["kernels"]["t_us"].to_numpy(float), np.median(per_round, axis=0))


def test_fit_predict_save_load_and_lofo(records, tmp_path):
    host = load_host("configs/host.yaml")
    model = km.KernelModel.fit(records, host, rounds=30)
    per = model.predict_kernels(records[1]["kernels"], host)
    assert (per["pred_us"] >= per["bound_us"]).all() and per["seen"].all()
    assert (per["lo_us"] <= per["hi_us"]).all()
    s = model.session(per)
    assert s["interval_us"][0] <= s["predicted_latency_us"] <= s["interval_us"][1] or s["interval_us"][0] <= s["interval_us"][1]
    model.save(tmp_path / "k.txt")
    doc = {"format": "x", "kernel_model": model.document("k.txt")}
    (tmp_path / "lm.yaml").write_text(yaml.safe_dump(doc))
    again = km.load_kernel_model(tmp_path / "lm.yaml")
    assert np.allclose(again.predict_kernels(records[1]["kernels"], host)["pred_us"], per["pred_us"])
    assert again.families == ["attn", "cnn", "dense"]
    lofo, resid = km.leave_one_family_out(records, host, rounds=30)
    assert sorted(lofo["family"]) == ["attn", "cnn", "dense"] and set(resid["family"]) == {"attn", "cnn", "dense"}
    # the session model alone, held out: its overhead (fitted without the family) on the kernel times measured
    cnn = next(r for r in records if r["family"] == "cnn")
    held = km.KernelModel.fit([r for r in records if r["family"] != "cnn"], host, rounds=30).overhead
    alone = (1 + held["a"]) * cnn["kernels"]["t_us"].sum() + held["b_us"] * len(cnn["kernels"])
    assert lofo.set_index("model").loc[cnn["model"], "overhead_only_us"] == pytest.approx(alone, rel=1e-9)
    # its interval from the other families' held-out residuals (as make calibrate's model has it), not from the fit's
    # own training residuals
    fit = km.KernelModel.fit([r for r in records if r["family"] != "cnn"], host, rounds=30)
    own = fit.session(fit.predict_kernels(cnn["kernels"], host))["interval_us"]
    other = resid[resid["family"] != "cnn"]
    fit.residuals = km.residual_quantiles(other["type"], other["r"].to_numpy(float))
    lo, hi = fit.session(fit.predict_kernels(cnn["kernels"], host))["interval_us"]
    assert tuple(lofo.set_index("model").loc[cnn["model"], ["lo_us", "hi_us"]]) == pytest.approx((lo, hi), rel=1e-9)
    assert (lo, hi) != pytest.approx(tuple(own), rel=1e-3)
    sc = km.scores(lofo)
    assert set(sc["all"]) >= {"within_5", "within_10", "mape", "rmspe"} and set(sc["by_family"]) == {"attn", "cnn", "dense"}


def test_scores_count_the_measured_inside_the_interval():
    """Three models by hand: errors +4%, -20%, +8%; the measured latency inside the interval for the first and
    the third (on its upper end), outside for the second."""
    df = pd.DataFrame({"model": ["a", "b", "c"], "family": ["x", "x", "y"], "measured_us": [100.0, 200.0, 50.0],
                       "predicted_us": [104.0, 160.0, 54.0], "lo_us": [90.0, 150.0, 40.0],
                       "hi_us": [110.0, 190.0, 50.0]})
    sc = km.scores(df)
    assert sc["all"]["n"] == 3 and sc["all"]["within_5"] == pytest.approx(1 / 3)
    assert sc["all"]["within_10"] == pytest.approx(2 / 3) and sc["all"]["mape"] == pytest.approx(0.32 / 3)
    assert sc["all"]["in_interval"] == pytest.approx(2 / 3)
    assert sc["by_family"]["x"]["in_interval"] == 0.5 and sc["by_family"]["y"]["in_interval"] == 1.0
    assert "in_interval" not in km.scores(df, "lo_us")["all"]       # only the session prediction has an interval


def test_a_stage_imports_lightgbm_without_scikit_learn_and_predicts_the_same(records, tmp_path):
    """In a stage process (lib.cli.run) _lightgbm() imports LightGBM without its scikit-learn API (2 s of every
    03 and 07): a fit and the committed kernel model predict the same digits as with it, and scikit-learn still
    imports afterwards. Elsewhere (a test, a library user) LightGBM stays whole: its LGBMClassifier works after
    a kernel model was loaded (it refused to when the import was lean in every process)."""
    pd.concat([r["kernels"] for r in records]).to_pickle(tmp_path / "kt.pkl")
    code = f"""
import sys, json, pandas as pd
from lib import cli
from lib.host import load_host
from lib.latency import kernel_model as km

def main(argv):
    host, kt = load_host("configs/host.yaml"), pd.read_pickle({str(tmp_path / "kt.pkl")!r})
    micro = {{"model": "m", "family": "micro", "kernels": kt, "session_us": None}}
    fitted = km.KernelModel.fit([micro], host, rounds=20).predict_kernels(kt, host)["pred_us"]
    committed = km.load_kernel_model("configs/latency_model.yaml").predict_kernels(kt, host)["pred_us"]
    lgb = km._lightgbm()
    import sklearn.base
    if not cli.IN_STAGE:
        lgb.LGBMClassifier(n_estimators=2, verbose=-1).fit([[0.0], [1.0]] * 10, [0, 1] * 10)
    print(json.dumps({{"api": lgb.compat.SKLEARN_INSTALLED, "pred": [*fitted, *committed]}}))

cli.run(main) if sys.argv[1] == "stage" else main(None)
"""
    out = {}
    for variant in ("stage", "library"):
        r = subprocess.run([sys.executable, "-c", code, variant], capture_output=True, text=True, cwd=REPO,
                           env={**os.environ, "PYTHONPATH": str(REPO)})
        assert r.returncode == 0, r.stderr[-2000:]
        out[variant] = json.loads(r.stdout)
    assert out["stage"]["api"] is False and out["library"]["api"] is True
    assert len(out["stage"]["pred"]) == 2 * sum(len(r["kernels"]) for r in records)
    assert out["stage"]["pred"] == out["library"]["pred"]


def test_an_unseen_kernel_type_is_flagged(records):
    host = load_host("configs/host.yaml")
    model = km.KernelModel.fit(records[:2], host, rounds=20)
    per = model.predict_kernels(records[2]["kernels"], host)
    assert not per.set_index("type").loc["Softmax/float", "seen"]
    assert "Softmax/float" in model.session(per)["unseen_kernel_types"]


def test_a_kernel_kind_only_micro_benchmarks_ran_is_predicted_as_they_ran(records, tmp_path):
    """The trees learn a micro-benchmark's offset from in-model kernels (the `micro` feature); for a kind no
    training model ran (GoogLeNet's LRN, YOLOv8's Softmax over channels) that offset was learnt from other kinds
    (LRN predicted at 0.5x): such a kernel is predicted with micro = 1, a kind models ran with micro = 0. The
    kinds are saved with the model. Here the micro-benchmarks are the models' own kernels at half their time (and
    the softmax net's relabelled LRN), copied so that the trees can split on it."""
    host = load_host("configs/host.yaml")
    models = [{**r, "model": f"{r['model']}{k}"} for r in records for k in range(10)]
    lrn = records[2]["kernels"].assign(op="LRN")
    fast = [r["kernels"].assign(t_us=r["kernels"]["t_us"] / 2) for r in records] + [lrn.assign(t_us=lrn["t_us"] / 2)]
    micro = [{**records[0], "model": f"mb{k}", "family": "micro", "session_us": None, "kernels": kt}
             for k in range(10) for kt in fast]
    model = km.KernelModel.fit(models + micro, host, rounds=100)
    assert model.model_kinds == {k for r in records for k in r["kernels"]["op"]} and "LRN" not in model.model_kinds

    def predicted(kt, alone):
        f, b = km.features(kt.assign(micro=alone), host, model.threads)
        return km.from_target(model.booster.predict(km._categorize(f, model.categories)), b)
    assert (predicted(lrn, 1.0) < 0.8 * predicted(lrn, 0.0)).all()     # the trees did learn the offset
    assert np.allclose(model.predict_kernels(lrn, host)["pred_us"], predicted(lrn, 1.0))
    own = records[2]["kernels"]
    assert np.allclose(model.predict_kernels(own, host)["pred_us"], predicted(own, 0.0))
    # a strided Softmax is another kind than a row-wise one
    strided = own.assign(axis_stride=np.where(own["op"] == "Softmax", 84.0, 1.0))
    assert km.kernel_kind(strided).tolist() == [o + ("/strided" if o == "Softmax" else "") for o in own["op"]]
    model.save(tmp_path / "k.txt")
    (tmp_path / "lm.yaml").write_text(yaml.safe_dump({"kernel_model": model.document("k.txt")}))
    assert km.load_kernel_model(tmp_path / "lm.yaml").model_kinds == model.model_kinds


def test_session_overhead_is_fitted_with_a_per_kernel_term_of_either_sign():
    """Kernels timed with ORT's profiler, the session without it: what the profiler adds to each kernel makes the
    per-kernel term negative (mobilenet_v3_small: 994 us of kernels, a 653 us session)."""
    s, n = np.array([100.0, 200, 300, 50]), np.array([10.0, 20, 5, 40])
    got = km.fit_overhead(s, n, 1.1 * s + 2 * n)
    assert got == pytest.approx({"a": 0.1, "b_us": 2.0}, rel=1e-6)
    got = km.fit_overhead(s, n, 1.02 * s - 0.5 * n)
    assert got == pytest.approx({"a": 0.02, "b_us": -0.5}, rel=1e-6)
    assert km.fit_overhead(s, n, 0.2 * s)["a"] == pytest.approx(-0.5)     # a bounded below


def test_a_session_is_never_predicted_below_its_kernels_bounds():
    """With the fitted per-kernel term negative, 3,000 tiny kernels gave an interval from -3.3 ms."""
    model = km.KernelModel.__new__(km.KernelModel)
    model.overhead = {"a": 0.02, "b_us": -5.5}
    per = pd.DataFrame({"pred_us": [1.2] * 3000, "lo_us": [0.4] * 3000, "hi_us": [8.0] * 3000,
                        "bound_us": [0.01] * 3000, "seen": True, "type": "Identity/float"})
    s = model.session(per)
    assert s["interval_us"][0] == pytest.approx(30.0) == s["bound_us"]           # 1.02 x 1200 - 16500 < 0
    assert s["predicted_latency_us"] == pytest.approx(30.0)
    assert s["interval_us"][1] == pytest.approx(1.02 * 24000 - 5.5 * 3000)


def test_a_missing_kernel_model_file_is_one_clear_error(tmp_path):
    (tmp_path / "lm.yaml").write_text(yaml.safe_dump({"kernel_model": {"file": "gone.txt"}}))
    with pytest.raises(StageError, match="gone.txt is missing"):
        km.load_kernel_model(tmp_path / "lm.yaml")
    assert km.load_kernel_model(tmp_path / "none.yaml") is None


def test_a_latency_model_with_unreadable_kernel_kinds_is_one_clear_error(tmp_path):
    """model_kernel_kinds that is not a list of kinds (a hand-edited file) makes the kernel model unreadable: one
    clear error from the loader; 03, as for any unreadable kernel model, predicts with the baseline and says why in
    one line (no traceback). A file without the key (written before it) still loads."""
    from conftest import latency_model_copy
    lm = latency_model_copy(tmp_path)
    doc = yaml.safe_load(lm.read_text())
    doc["kernel_model"].pop("model_kernel_kinds", None)
    lm.write_text(yaml.safe_dump(doc))
    assert km.load_kernel_model(lm).model_kinds is None
    doc["kernel_model"]["model_kernel_kinds"] = "Conv"
    lm.write_text(yaml.safe_dump(doc))
    with pytest.raises(StageError, match="model_kernel_kinds is 'Conv', not a list of kernel kinds.*re-run make calibrate"):
        km.load_kernel_model(lm)
    conv_relu_add(tmp_path / "m.onnx")
    rdir = tmp_path / "res"
    for stage in ("02_shapes_flops_bytes.py", "01_profile_onnx.py"):
        assert run_stage(stage, "--model", tmp_path / "m.onnx", "--results", rdir).returncode == 0
    r = run_stage("03_merge_profile_metrics.py", "--model", tmp_path / "m.onnx", "--results", rdir,
                  "--latency-model", lm)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    said = [ln for ln in r.stdout.splitlines() if "model_kernel_kinds is 'Conv'" in ln]
    assert len(said) == 1 and "re-run make calibrate" in said[0]
    pred = json.loads((rdir / "merge_meta.json").read_text())["prediction"]
    assert pred["predicted_by"] == "baseline" and "model_kernel_kinds" in pred["note_kernel_model"]


def test_host_file_sections_are_updated_in_place(tmp_path):
    p = tmp_path / "host.yaml"
    p.write_text('name: "old"   # (calibrated)\ncaches_bytes:\n  L1: 1   # (calibrated)\n'
                 'bandwidth_bytes_per_s:\n  L1: 2   # (calibrated)\n  DRAM: 3  # (calibrated) kept comment\n')
    update_host_file(p, {"name": "2-core X", "caches_bytes.L1": 32768, "bandwidth_bytes_per_s.L1": 1.5e11,
                         "bandwidth_bytes_per_s.DRAM": 2e10})
    doc = yaml.safe_load(p.read_text())
    assert doc == {"name": "2-core X", "caches_bytes": {"L1": 32768}, "bandwidth_bytes_per_s": {"L1": 1.5e11, "DRAM": 2e10}}
    assert "kept comment" in p.read_text()


def test_03_warns_when_a_node_beats_its_bound(tmp_path):
    """A host file claiming 1 MFLOP/s: the Conv's kernel runs far faster than that bound; 03 says so."""
    conv_relu_add(tmp_path / "m.onnx")
    host = yaml.safe_load(open("configs/host.yaml"))
    host["peak_flops_per_s"] = {k: 1e6 for k in host["peak_flops_per_s"]}
    (tmp_path / "host.yaml").write_text(yaml.safe_dump(host))
    rdir = tmp_path / "res"
    for stage in ("02_shapes_flops_bytes.py", "01_profile_onnx.py"):
        assert run_stage(stage, "--model", tmp_path / "m.onnx", "--results", rdir).returncode == 0
    r = run_stage("03_merge_profile_metrics.py", "--model", tmp_path / "m.onnx", "--results", rdir,
                  "--host", tmp_path / "host.yaml")
    assert r.returncode == 0, r.stderr
    assert "ran faster than their roofline bound" in r.stdout
    meta = json.loads((rdir / "merge_meta.json").read_text())
    assert meta["roofline_contradictions"]["nodes"] >= 1
    assert meta["roofline_contradictions"]["worst"][0]["node"] == "conv"
    assert {"predicted_latency_us", "baseline_latency_us", "interval_us"} <= set(meta["prediction"])


def test_one_fast_kernel_does_not_raise_the_host_figures():
    """raise_to_observed takes what two kernels reached: a single fluke (one kernel measured at a third of its
    time) leaves the bandwidth as swept; two kernels at the same rate raise it to that rate."""
    from lib.latency.calibrate_kernels import raise_to_observed
    host = {**HOST, "peak_flops_per_s": dict(HOST["peak_flops_per_s"]),
            "bandwidth_bytes_per_s": dict(HOST["bandwidth_bytes_per_s"])}

    def records(times):     # 4 MiB kernels (L3: over L2's 1 MiB) moving their bytes in t_us - 1 us each
        kt = pd.DataFrame({"t_us": [t - 1.0 for t in times], "flops": 0.0, "bytes": float(4 << 20),
                           "compute_dtype": "float"})
        return [{"kernels": kt}]
    _, raised = raise_to_observed(host, records([400.0, 40.0]))       # 10.5 GB/s and one fluke at 105 GB/s
    assert "bandwidth.L3" not in raised
    out, raised = raise_to_observed(host, records([40.0, 40.0, 400.0]))
    assert raised["bandwidth.L3"][1] == pytest.approx((4 << 20) / 40e-6)
    assert out["bandwidth_bytes_per_s"]["L2"] >= out["bandwidth_bytes_per_s"]["L3"]     # a nearer level is never slower


def test_the_probe_again_keeps_the_best_of_both():
    """calibrate probes the host three times, minutes apart: a figure from a slow minute never lowers one from a
    fast minute, and a measured figure replaces one the probe beats (the real probe, quick)."""
    from lib.latency.calibrate_kernels import probe_again
    fast = {**HOST, "peak_flops_per_s": {**HOST["peak_flops_per_s"], "float": 1e15},
            "bandwidth_bytes_per_s": {"L1": 1e15, "L2": 1.0, "L3": 1.0, "DRAM": 1.0}}
    out = probe_again(fast, quick=True, threads=0)
    assert out["peak_flops_per_s"]["float"] == 1e15 and out["bandwidth_bytes_per_s"]["L1"] == 1e15
    assert out["bandwidth_bytes_per_s"]["DRAM"] > 1e8 and out["bandwidth_bytes_per_s"]["L2"] > 1e8


def test_a_calibration_never_writes_a_bound_below_the_previous_one_on_the_same_cpu():
    """A slow spell during make calibrate (caches at 61 GB/s, 136 the same morning) must not lower the host file's
    bandwidths or peaks on the same CPU; another CPU takes what it measured. Nothing compounds: the previous
    figures are kept as written (their headroom once), and a figure not measured now keeps the file's."""
    from lib.latency.calibrate_kernels import best_of_before
    cpu = {"cpu_model": "AMD EPYC", "cpu_cores": 2, "caches_bytes": {"L1": 32768, "L2": 524288, "L3": 33554432}}
    before = {**cpu, "peak_flops_per_s": {"float": 1.5e11, "int8": 3.1e11, "float16": 1.4e11},
              "bandwidth_bytes_per_s": {"L1": 1.36e11, "L2": 1.36e11, "L3": 1.36e11, "DRAM": 2.8e10}}
    now = {**cpu, "peak_flops_per_s": {"float": 1.52e11, "int8": 2.9e11},
           "bandwidth_bytes_per_s": {"L1": 6.1e10, "L2": 6.1e10, "L3": 6.1e10, "DRAM": 3.1e10}}
    out, kept = best_of_before(now, before)
    assert out["bandwidth_bytes_per_s"] == {"L1": 1.36e11, "L2": 1.36e11, "L3": 1.36e11, "DRAM": 3.1e10}
    assert out["peak_flops_per_s"] == {"float": 1.52e11, "int8": 3.1e11, "float16": 1.4e11}
    assert kept == {"peak.int8": [2.9e11, 3.1e11], **{f"bandwidth.{lv}": [6.1e10, 1.36e11] for lv in ("L1", "L2", "L3")}}
    assert best_of_before(out, out)[0] == out                     # again: the same figures, nothing multiplied
    other = {**now, "cpu_model": "Intel Xeon"}
    out, kept = best_of_before(other, before)
    assert out["bandwidth_bytes_per_s"]["L1"] == 6.1e10 and kept == {}
    assert out["peak_flops_per_s"]["float16"] == 1.4e11           # not measured now: the file's line stays


def test_the_fma_ceiling_needs_the_maximum_clock(tmp_path):
    """/proc/cpuinfo's "cpu MHz" is not a maximum (2445 MHz on an EPYC VM whose convs reached 166 GFLOP/s, past
    the 156.5 that clock gives): the ceiling comes from cpufreq's maximum or not at all."""
    from lib.latency.host_probe import fma_ceiling, max_mhz
    (tmp_path / "max").write_text("3500000\n")
    assert max_mhz(tmp_path / "max") == 3500.0 and max_mhz(tmp_path / "absent") is None
    cpu = {"cores": 2, "flags": ["avx2", "fma"]}
    assert fma_ceiling({**cpu, "mhz": None}) is None
    assert fma_ceiling({**cpu, "mhz": 3500.0})["float"] == 2 * 3500e6 * 2 * 8 * 2


def test_training_model_names_carry_a_batch_only_on_a_training_model():
    """<model>_b<N> is a training model at batch N; efficientnet_b0 is torchvision's model, not 'efficientnet' at
    batch 0 (that parse left it unbuilt on a fresh clone)."""
    assert _batch("resnet18_b4") == ("resnet18", 4)
    assert _batch("bert_small_b4") == ("bert_small", 4)
    assert _batch("efficientnet_b0") == ("efficientnet_b0", 1)
    assert {_batch(n)[0] for n in FAMILY_OF} <= set(FAMILY_OF)


def test_a_softmax_or_reduce_along_an_inner_axis_carries_its_stride(tmp_path):
    """The stride of the axis a Softmax or Reduce* works along (elements between two neighbours along it) is in the
    kernel table and the features: 16x4x21 softmaxed over axis 1 reads every 4 x 21 = 84th element (YOLOv8's DFL
    head; ORT ran it 30x slower than over the last axis); a ReduceMean over axis 1 (axes as input, opset 18) the
    same; the last axis is contiguous (1); before opset 13 a Softmax flattens to 2-D rows at its axis (1)."""
    from lib.latency.predict import optimized_graph
    ax = numpy_helper.from_array(np.array([1], np.int64), "ax1")
    last = numpy_helper.from_array(np.array([-1], np.int64), "axl")
    nodes = [helper.make_node("Softmax", ["x"], ["s"], name="sm", axis=1),
             helper.make_node("ReduceMean", ["s", "ax1"], ["r"], name="rm", keepdims=1),
             helper.make_node("ReduceMax", ["s", "axl"], ["q"], name="rx", keepdims=1),
             helper.make_node("Add", ["r", "q"], ["y"], name="add")]
    make_model(nodes, [tensor("x", [1, 16, 4, 21])], [tensor("y", [1, 1, 4, 1])], [ax, last], opset=18,
               path=tmp_path / "ax.onnx")
    g = graph_of(onnx.load(str(tmp_path / "ax.onnx")))
    kt = kernel_table(g, node_metrics(g), optimized_graph(tmp_path / "ax.onnx")).set_index("node")
    assert kt.loc["sm", "axis_stride"] == 84 and kt.loc["rm", "axis_stride"] == 84
    assert kt.loc["rx", "axis_stride"] == 1 and kt.loc["add", "axis_stride"] == 1
    f, _ = km.features(kt.reset_index().assign(micro=0.0), HOST, 0)
    assert np.allclose(f["log_stride"], np.log(kt["axis_stride"].to_numpy(float)))
    make_model([helper.make_node("Softmax", ["x"], ["y"], name="sm", axis=1)], [tensor("x", [1, 16, 4, 21])],
               [tensor("y", [1, 16, 4, 21])], opset=11, path=tmp_path / "old.onnx")
    g = graph_of(onnx.load(str(tmp_path / "old.onnx")))
    kt = kernel_table(g, node_metrics(g), optimized_graph(tmp_path / "old.onnx"))
    assert kt["axis_stride"].tolist() == [1.0]


def test_a_softmax_behind_a_mask_carries_the_share_of_its_outputs_that_underflow(tmp_path):
    """ORT's exp takes ~10x as long on a vector where exp(x - max) underflows float32, as behind a BERT's padding
    mask (lib/onnx/underflow.py): stage 02 runs the model once and writes each Softmax's share of 16-value runs
    holding one (ops_metrics.csv, metrics_meta.json); the kernel table and the features carry it. Rows of 20 scores
    plus a mask of float32's minimum on key position 17: the second run of each row (values 16-19), half of them;
    a Softmax of the scores alone: none; the Add takes no exponential (empty in 02's table, 0 in the kernel
    table)."""
    from lib.latency.predict import optimized_graph
    m = np.zeros(20, np.float32)
    m[17] = np.finfo(np.float32).min
    mask = numpy_helper.from_array(m, "m")
    nodes = [helper.make_node("Add", ["x", "m"], ["s"], name="mask"),
             helper.make_node("Softmax", ["s"], ["p"], name="masked", axis=-1),
             helper.make_node("Softmax", ["x"], ["q"], name="plain", axis=-1),
             helper.make_node("Add", ["p", "q"], ["y"], name="add")]
    path = tmp_path / "masked.onnx"
    make_model(nodes, [tensor("x", [2, 3, 20])], [tensor("y", [2, 3, 20])], [mask], path=path)
    r = run_stage("02_shapes_flops_bytes.py", "--model", path, "--results", tmp_path / "r")
    assert r.returncode == 0, r.stderr
    assert "Softmax: 2 nodes, 25% of their 16-value runs hold an exponential that underflows" in r.stdout
    metrics = pd.read_csv(tmp_path / "r" / "ops_metrics.csv").set_index("node")
    assert metrics.loc["masked", "exp_underflow"] == 0.5 and metrics.loc["plain", "exp_underflow"] == 0.0
    assert np.isnan(metrics.loc["mask", "exp_underflow"]) and np.isnan(metrics.loc["add", "exp_underflow"])
    meta = json.loads((tmp_path / "r" / "metrics_meta.json").read_text())
    assert meta["exp_underflow"] == {"nodes": 2, "mean_share": 0.25}
    g = graph_of(onnx.load(str(path)))
    kt = kernel_table(g, metrics.reset_index(), optimized_graph(path))
    assert dict(zip(kt["node"], kt["exp_underflow"])) == {"mask": 0.0, "masked": 0.5, "plain": 0.0, "add": 0.0}
    f, _ = km.features(kt.assign(micro=0.0), HOST, 0)
    assert f["exp_underflow"].tolist() == kt["exp_underflow"].tolist()
    # a table written before 02 measured it: the Softmax kernels' share is unknown (LightGBM's missing), not 0
    old = kernel_table(g, metrics.reset_index().drop(columns="exp_underflow"), optimized_graph(path))
    assert np.isnan(old.set_index("node").loc[["masked", "plain"], "exp_underflow"]).all()


def test_the_underflow_share_by_hand(tmp_path):
    """exp(x - max) < FLT_MIN where x - max < ln(FLT_MIN) = -87.3, counted per 16-value run along the axis from
    opset 13, along the 2-D rows flattened at it before; no run without a Softmax; a run that fails leaves the
    share unknown, with its reason."""
    from lib.onnx.underflow import measure, share_below
    x = np.zeros((2, 20), np.float32)
    x[0, 3], x[1, 17], x[1, 18] = -100, -100, -100
    assert share_below(x, -1, 13) == 2 / 4      # runs 0-15, 16-19 per row: row 0 the first, row 1 the second
    assert share_below(x, 1, 11) == 2 / 4       # the same rows
    assert share_below(x, 0, 13) == 3 / 20      # 20 columns of 2 values: columns 3, 17, 18 hold one
    assert share_below(x, 0, 11) == 2 / 3       # one row of 40 (runs 0-15, 16-31, 32-39): values 3 and 37, 38
    relu = graph_of(make_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [tensor("x", [2])],
                               [tensor("y", [2])]))

    def no_run():
        raise AssertionError("a graph without a Softmax ran")
    columns, note = measure("unused.onnx", relu, no_run)
    assert np.isnan(columns["exp_underflow"]).all() and columns["subnormal"].tolist() == [0.0] and note == ""
    sm = make_model([helper.make_node("Softmax", ["x"], ["y"], name="s"), helper.make_node("Relu", ["y"], ["z"], name="r")],
                    [tensor("x", [2])], [tensor("z", [2])], path=tmp_path / "sm.onnx")
    columns, note = measure(tmp_path / "sm.onnx", graph_of(sm), {})      # no input fed: ORT refuses to run
    assert np.isnan(columns["exp_underflow"]).all() and note.startswith("Softmax inputs not measured (")
    assert np.isnan(columns["subnormal"]).all()     # the Softmax's output and its reader: unknown


def test_the_subnormal_share_by_hand(tmp_path):
    """A node's share of subnormal values read or written (lib/onnx/underflow.py): scores [0 -100 0 -100] plus 0
    give Softmax outputs [0.5 exp(-100)/2 ...]: exp(-100)/2 = 1.9e-44 is subnormal (float32's smallest normal
    value is 1.2e-38), half of them; a Transpose moves them to the MatMul that reads them (0.5); a Mul by a weight
    with 1 of its 4 values 1e-40 reads 0.25; a conv's weight is counted per 16-value run along its output channels:
    1 of 20 values subnormal, at channel 17, is in 1 of its 2 runs (0.5); an Add of two normal tensors 0. Through
    stage 02 (ops_metrics.csv, metrics_meta.json, its printed line) and the kernel table."""
    from lib.latency.predict import optimized_graph
    from lib.onnx.underflow import measure
    k = np.ones((20, 1, 1, 1), np.float32)
    k[17] = 1e-40
    inits = [numpy_helper.from_array(np.array([0, -100, 0, -100], np.float32), "m"),
             numpy_helper.from_array(np.ones((2, 3), np.float32), "v"),
             numpy_helper.from_array(np.array([1, 1e-40, 1, 1], np.float32), "w"), numpy_helper.from_array(k, "k")]
    nodes = [helper.make_node("Add", ["x", "m"], ["s"], name="mask"),
             helper.make_node("Softmax", ["s"], ["p"], name="sm", axis=-1),
             helper.make_node("Transpose", ["p"], ["pt"], name="tr", perm=[1, 0]),
             helper.make_node("MatMul", ["pt", "v"], ["y"], name="mm"),
             helper.make_node("Mul", ["x", "w"], ["z"], name="mul"),
             helper.make_node("Add", ["x", "x"], ["u"], name="plain"),
             helper.make_node("Conv", ["c", "k"], ["o"], name="conv")]
    path = tmp_path / "sub.onnx"
    make_model(nodes, [tensor("x", [2, 4]), tensor("c", [1, 1, 2, 2])],
               [tensor("y", [4, 3]), tensor("z", [2, 4]), tensor("u", [2, 4]), tensor("o", [1, 20, 2, 2])], inits,
               path=path)
    g = graph_of(onnx.load(str(path)))
    feeds = {"x": np.zeros((2, 4), np.float32), "c": np.ones((1, 1, 2, 2), np.float32)}
    columns, note = measure(path, g, feeds)
    assert note == "" and dict(zip(g.names, columns["subnormal"])) == {
        "mask": 0.0, "sm": 0.5, "tr": 0.5, "mm": 0.5, "mul": 0.25, "plain": 0.0, "conv": 0.5}
    np.savez(tmp_path / "x.npz", **feeds)
    r = run_stage("02_shapes_flops_bytes.py", "--model", path, "--inputs-npz", tmp_path / "x.npz",
                  "--results", tmp_path / "r")
    assert r.returncode == 0, r.stderr
    assert "subnormal values: 5 nodes read or write them, up to 50.0% of a tensor" in r.stdout
    metrics = pd.read_csv(tmp_path / "r" / "ops_metrics.csv").set_index("node")
    assert metrics.loc[["sm", "mm", "mul", "plain", "conv"], "subnormal"].tolist() == [0.5, 0.5, 0.25, 0.0, 0.5]
    assert json.loads((tmp_path / "r" / "metrics_meta.json").read_text())["subnormal"] == {"nodes": 5, "max_share": 0.5}
    kt = kernel_table(g, metrics.reset_index(), optimized_graph(path))
    kt = kt[~kt["layout"].astype(bool)].set_index("node")      # the conv's ReorderInput/Output move values: 0
    assert kt.loc["mm", "subnormal"] == 0.5 and kt.loc["plain", "subnormal"] == 0.0 and kt.loc["conv", "subnormal"] == 0.5


def test_02_refuses_a_weight_whose_payload_is_short_before_reading_it(tmp_path):
    """The subnormal share reads every float weight: one whose bytes do not fill its dims (16 subnormal values,
    20 of 64 bytes) is refused first, exit 2, one line, nothing written."""
    w = numpy_helper.from_array(np.full((4, 4), 1e-40, np.float32), "w")
    w.raw_data = w.raw_data[:20]
    make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [tensor("x", [2, 4])],
               [tensor("y", [2, 4])], [w], path=tmp_path / "short.onnx")
    r = run_stage("02_shapes_flops_bytes.py", "--model", tmp_path / "short.onnx", "--results", tmp_path / "r")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == ["error: initializer 'w' holds 20 bytes of data, its dims [4, 4] need 64: "
                                             "the model file is corrupt"]
    assert not (tmp_path / "r").exists()


def test_02_goes_on_when_onnx_runtime_cannot_run_the_model(tmp_path):
    """A Softmax beside an op ONNX Runtime does not know: 02 writes its tables (the share empty) and says why in
    one line, exit 0; bad inputs are refused before any run (exit 2, one line, nothing written)."""
    nodes = [helper.make_node("Softmax", ["x"], ["s"], name="sm"),
             helper.make_node("Mystery", ["s"], ["y"], name="odd", domain="my.custom")]
    g = helper.make_graph(nodes, "g", [tensor("x", [2, 4])], [tensor("y", [2, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("my.custom", 1)])
    m.ir_version = 8
    onnx.save(m, str(tmp_path / "odd.onnx"))
    r = run_stage("02_shapes_flops_bytes.py", "--model", tmp_path / "odd.onnx", "--results", tmp_path / "r")
    assert r.returncode == 0, r.stderr
    assert "note: Softmax inputs not measured (" in r.stdout
    assert np.isnan(pd.read_csv(tmp_path / "r" / "ops_metrics.csv").set_index("node").loc["sm", "exp_underflow"])
    meta = json.loads((tmp_path / "r" / "metrics_meta.json").read_text())["exp_underflow"]
    assert meta["nodes"] == 0 and meta["note"].startswith("Softmax inputs not measured (")
    np.savez(tmp_path / "bad.npz", x=np.zeros((2, 4), np.int64))
    r = run_stage("02_shapes_flops_bytes.py", "--model", tmp_path / "odd.onnx", "--inputs-npz", tmp_path / "bad.npz",
                  "--results", tmp_path / "bad")
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1].startswith("error: --inputs-npz")
    assert "Traceback" not in r.stderr and not (tmp_path / "bad" / "ops_metrics.csv").exists()


def test_an_rnn_reads_its_recurrent_weights_at_every_step(tmp_path):
    """R (gates x hidden^2 per direction; int8 for DynamicQuantizeLSTM) is read again at each step after the
    first, each read at the memory levels' best for R's size; other kernels and unknown dims add nothing. A real
    ORT LSTM's kernel (bidirectional, hidden 512: 2 x 4 MiB of R, 32 steps) gets it from its dims: its bound is
    over twice its FLOP bound (that it holds is bench/predict_unseen.py's count of kernels below their bound)."""
    ops = ["LSTM", "GRU", "com.microsoft:DynamicQuantizeLSTM", "Conv", "LSTM"]
    extra = rf.recurrent_reread_us(ops, ["32x2x1x512", "10x1x1x64", "5x1x1x128", "1x8x4x4", ""], HOST)
    four_mib = 32768 / 2e11 + ((1 << 20) - 32768) / 1e11 + (3 << 20) / 5e10     # L1, L2, then L3 (HOST's levels)
    assert extra[0] == pytest.approx(31 * 2 * four_mib * 1e6)
    assert extra[1] == pytest.approx(9 * (32768 / 2e11 + 16384 / 1e11) * 1e6)    # 3 x 64^2 x 4 B = 48 KiB
    assert extra[2] == pytest.approx(4 * (32768 / 2e11 + 32768 / 1e11) * 1e6)    # 4 x 128^2 x 1 B = 64 KiB
    assert list(extra[3:]) == [0.0, 0.0]
    seq, hidden, inp = 32, 512, 256
    make_model([helper.make_node("LSTM", ["x", "W", "R"], ["y"], name="lstm", hidden_size=hidden,
                                 direction="bidirectional")],
               [tensor("x", [seq, 1, inp])], [tensor("y", [seq, 2, 1, hidden])],
               [weight("W", [2, 4 * hidden, inp]), weight("R", [2, 4 * hidden, hidden])], path=tmp_path / "lstm.onnx")
    kt = profile_record(tmp_path / "lstm.onnx", "lstm", "rnn", load_host("configs/host.yaml"), runs=5,
                        warmup=1)["kernels"]
    assert list(kt["op"]) == ["LSTM"] and kt["dims"].iat[0] == "32x2x1x512"
    # the bound on the test's host (configs/host.yaml is the last calibration's: another CPU's figures each time)
    bound, _ = km.bounds(kt, HOST)
    flop_bound = kt["flops"].iat[0] / HOST["peak_flops_per_s"]["float"] * 1e6
    r_bytes = 4 * hidden * hidden * 4
    memory = rf.memory_time_us([kt["bytes"].iat[0]], HOST)[0] + 31 * 2 * rf.memory_time_us([r_bytes], HOST)[0]
    assert bound[0] == pytest.approx(max(flop_bound, memory)) and bound[0] > 2 * flop_bound


def test_an_rnn_kernel_is_learnt_per_step(tmp_path):
    """An RNN runs its steps one after another: its target's base is 1 us per step (sequence length x directions,
    read off its output Y = seq x directions x batch x hidden), not its FLOP bound; other kernels keep a base of
    max(bound, 1 us), and no prediction falls below the bound."""
    seq, hidden = 7, 4
    nodes = [helper.make_node("LSTM", ["x", "W", "R"], ["y"], name="lstm", hidden_size=hidden, direction="bidirectional"),
             helper.make_node("Relu", ["y"], ["out"], name="relu")]
    make_model(nodes, [tensor("x", [seq, 1, 3])], [tensor("out", [seq, 2, 1, hidden])],
               [weight("W", [2, 4 * hidden, 3]), weight("R", [2, 4 * hidden, hidden])], path=tmp_path / "lstm.onnx")
    host = load_host("configs/host.yaml")
    kt = profile_record(tmp_path / "lstm.onnx", "lstm", "rnn", host, runs=3, warmup=1)["kernels"]
    steps = km.sequential_steps(kt)
    assert dict(zip(kt["op"], steps)) == {"LSTM": 2 * seq, "Relu": 1.0}
    bound = np.array([0.01, 0.01])                      # both far below the profiler's resolution
    assert km.target([28.0, 3.0], bound, steps) == pytest.approx(np.log([28.0 / 14, 3.0]))
    assert km.from_target(np.log([2.0, 3.0]), bound, steps) == pytest.approx([28.0, 3.0])
    assert km.from_target(np.array([-9.0]), np.array([50.0]), np.array([14.0]))[0] == 50.0   # never below the bound


def test_03_flags_kernels_that_read_subnormal_weights(tmp_path):
    """A 3x3 conv 16->32 on 64x64 (18.9M MACs) with half its weights subnormal (1e-40): its ORT kernel is named
    with its share (9.4M multiply-adds on subnormals), 03 warns and merge_meta.json's prediction lists it. Not
    flagged: the same conv with normal weights, and conv_relu_add's conv (55,296 MACs) with half its weights
    subnormal (27,648 such multiply-adds, under SUBNORMAL_MACS)."""
    def conv(path):
        make_model([helper.make_node("Conv", ["x", "W"], ["y"], name="conv", pads=[1, 1, 1, 1])],
                   [tensor("x", [1, 16, 64, 64])], [tensor("y", [1, 32, 64, 64])], [weight("W", [32, 16, 3, 3])],
                   path=path)

    def subnormal(src, dst):
        m = onnx.load(src)
        w = next(t for t in m.graph.initializer if t.name == "W")
        a = numpy_helper.to_array(w).copy()
        a.flat[::2] = 1e-40                  # half the values, below float32's smallest normal (1.2e-38)
        w.CopyFrom(numpy_helper.from_array(a, "W"))
        onnx.save(m, dst)
    conv(tmp_path / "big.onnx")
    subnormal(tmp_path / "big.onnx", tmp_path / "big_sub.onnx")
    conv_relu_add(tmp_path / "small.onnx")
    subnormal(tmp_path / "small.onnx", tmp_path / "small_sub.onnx")
    # 98% pruned, half the rest subnormal: 1% of the values (it read "50%", of the nonzero ones, and was flagged)
    m = onnx.load(tmp_path / "big_sub.onnx")
    w = next(t for t in m.graph.initializer if t.name == "W")
    a = numpy_helper.to_array(w).copy()
    a.flat[np.arange(a.size) % 100 >= 2] = 0.0
    w.CopyFrom(numpy_helper.from_array(a, "W"))
    onnx.save(m, tmp_path / "pruned_sub.onnx")
    for name, flagged in (("big_sub", True), ("big", False), ("small_sub", False), ("pruned_sub", False)):
        rdir = tmp_path / name
        assert run_stage("02_shapes_flops_bytes.py", "--model", tmp_path / f"{name}.onnx", "--results", rdir).returncode == 0
        r = run_stage("03_merge_profile_metrics.py", "--model", tmp_path / f"{name}.onnx", "--results", rdir)
        assert r.returncode == 0, r.stderr
        pred = json.loads((rdir / "merge_meta.json").read_text())["prediction"]
        assert ("read subnormal (denormal) weights" in r.stdout) is flagged, name
        assert list(pred["subnormal_weight_kernels"].values()) == ([0.5] if flagged else []), name


def test_an_fp16_softmax_runs_as_its_function_and_its_kernels_stay_on_it(tmp_path):
    """ORT has no fp16 Softmax kernel on this CPU: it inlines the Softmax's function (ReduceMax, Sub, Exp, ReduceSum,
    Div, unnamed nodes) between Casts. Its profiler names them <op>_<index in its graph>, the saved optimized graph
    by position: they were taken for kernels the graph lacks and attributed to another node (bert_small_fp16's
    four masked Exps, 185 us each, to its last LayerNormalization). Now the measured kernels are the prediction's,
    all on the Softmax, in fp32, and the Exp carries the Softmax's underflow share (rows of 20, the mask at 17: 0.5)."""
    from lib.latency.predict import optimized_graph
    m = np.zeros(20, np.float16)
    m[17] = np.finfo(np.float16).min
    nodes = [helper.make_node("Add", ["x", "m"], ["s"], name="mask"),
             helper.make_node("Softmax", ["s"], ["y"], name="masked", axis=-1)]
    path = tmp_path / "sm16.onnx"
    make_model(nodes, [tensor("x", [2, 3, 20], TensorProto.FLOAT16)], [tensor("y", [2, 3, 20], TensorProto.FLOAT16)],
               [numpy_helper.from_array(m, "m")], path=path)
    r = profile_record(path, "sm16", "fp16", load_host("configs/host.yaml"), runs=3, warmup=1)
    kt = r["kernels"]
    function = kt[kt["op"].isin(["ReduceMax", "Sub", "Exp", "ReduceSum", "Div"])]
    assert sorted(function["op"]) == ["Div", "Exp", "ReduceMax", "ReduceSum", "Sub"]
    assert (function["node"] == "masked").all() and (function["compute_dtype"] == "float").all()
    assert function.set_index("op").loc["Exp", "exp_underflow"] == 0.5
    assert function.set_index("op").loc["Exp", "dims"] == "2x3x20"
    predicted = kernel_table(r["graph"], r["metrics"], optimized_graph(path))
    assert sorted(predicted["kernel"]) == sorted(kt["kernel"])


def test_inserted_and_fused_kernels_know_their_shape(tmp_path):
    """ORT inlines HardSwish's function as two unnamed nodes, HardSigmoid and Mul: both map onto the HardSwish (they
    were attributed to another node: the saved graph's unnamed nodes were looked up by an empty name). The Mul, a
    second kernel on it, moves its own tensors where the original graph knows them: x (1x4x8x8, 1024 bytes) in, h
    out. A fused GELU (Div+Erf+Add+Mul+Mul with folded constants) is anchored on its heaviest node, not on a
    Constant: its dims are its output's."""
    from lib.latency.predict import optimized_graph
    c = {k: numpy_helper.from_array(np.array(v, np.float32), k) for k, v in (("r2", 1.4142135), ("one", 1.0),
                                                                               ("half", 0.5))}
    nodes = [helper.make_node("HardSwish", ["x"], ["h"], name="hs"),
             helper.make_node("Div", ["v", "r2"], ["d"], name="div"), helper.make_node("Erf", ["d"], ["e"], name="erf"),
             helper.make_node("Add", ["e", "one"], ["a"], name="add"),
             helper.make_node("Mul", ["v", "a"], ["p"], name="mul"),
             helper.make_node("Mul", ["p", "half"], ["g"], name="mul2")]
    path = tmp_path / "ins.onnx"
    make_model(nodes, [tensor("x", [1, 4, 8, 8]), tensor("v", [1, 8, 32])],
               [tensor("h", [1, 4, 8, 8]), tensor("g", [1, 8, 32])], list(c.values()), path=path)
    g = graph_of(onnx.load(str(path)))
    kt = kernel_table(g, node_metrics(g), optimized_graph(path)).set_index("op")
    assert kt.loc["HardSigmoid", "node"] == "hs" and kt.loc["HardSigmoid", "dims"] == "1x4x8x8"
    assert kt.loc["Mul", "node"] == "hs" and kt.loc["Mul", "bytes"] == 2 * 1024 and kt.loc["Mul", "dims"] == "1x4x8x8"
    assert kt.loc["Gelu", "dims"] == "1x8x32" and kt.loc["Gelu", "node"] == "erf"
