"""Stage 01's attribution of ORT kernel time to original nodes, with a real ONNX Runtime session."""
import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import helper

from conftest import make_model, run_stage, small_cnn, tensor, weight
from lib.onnx.inputs import InputSpec, make_feeds
from lib.onnx.loading import graph_of
from lib.latency.profiling import latency_table, profile_model


@pytest.mark.parametrize("level", ["all", "disable"])
def test_every_kernel_lands_on_an_original_node(tmp_path, level):
    path = tmp_path / "cnn.onnx"
    model = small_cnn(path)
    g = graph_of(model)
    feeds = make_feeds(model, {"x": [1, 3, 32, 32]}, InputSpec(seed=0))
    prof = profile_model(str(path), feeds, runs=3, warmup=1, opt_level=level, progress=False)
    df, s = latency_table(g, prof)
    assert s["kernel_time_coverage"] >= 0.99
    assert list(df["node"]) == g.names and (df["runs"] == 3).all()
    by = df.set_index("node")
    assert by.loc["conv1", "latency_us"] > 0 and by.loc["conv2", "latency_us"] > 0
    assert (df["p10_us"] <= df["latency_us"]).all() and (df["latency_us"] <= df["p90_us"]).all()
    if level == "all":
        # ORT folds BN into conv1 and fuses the Relu: their time belongs to conv1's kernel
        assert by.loc["bn1", "attribution"] == "fused" and by.loc["bn1", "fused_into"] == "conv1"
        assert by.loc["relu1", "fused_into"] == "conv1" and by.loc["bn1", "latency_us"] == 0
    else:
        assert (by["attribution"] == "kernel").all()      # nothing fused: one kernel per node
    # the session latency comes from as many runs again with the profiler off (it adds to every kernel it times:
    # mobilenet_v3_small 1.86 ms with it, 1.08 ms without); only the profiled runs left kernel events
    assert len(prof["wall_us"]) == len(prof["profiled_wall_us"]) == 3 and len(prof["per_run"]) == 3


def test_random_inputs_follow_dtypes_and_seed():
    from onnx import TensorProto, helper
    from conftest import make_model, tensor
    m = make_model([helper.make_node("Identity", ["ids"], ["y"], name="id")],
                   [tensor("ids", [2, 5], TensorProto.INT64)], [tensor("y", None, TensorProto.INT64)])
    a = make_feeds(m, {"ids": [2, 5]}, InputSpec(seed=3))["ids"]
    b = make_feeds(m, {"ids": [2, 5]}, InputSpec(seed=3))["ids"]
    assert a.dtype == np.int64 and a.shape == (2, 5) and np.array_equal(a, b)


def test_kernels_inside_control_flow_are_counted_once_for_the_enclosing_node():
    """ORT names a body's kernels after the body nodes and runs them during the If/Loop kernel, whose own
    duration already includes them (synthetic trace: one warm-up run, one measured run)."""
    from lib.latency.profiling import kernel_times

    def k(name, ts, dur, op, tid=1):
        return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur, "tid": tid, "args": {"op_name": op}}
    runs = [{"cat": "Session", "name": "model_run", "ts": t, "dur": 90} for t in (0, 100)]
    events = runs + [k("pre", 101, 5, "Relu"), k("if", 110, 50, "If"), k("conv_in_branch", 112, 30, "Conv"),
                     k("inner_if", 145, 10, "If"), k("deep", 146, 5, "MatMul"), k("post", 165, 5, "Relu"),
                     k("other_thread", 120, 5, "Add", tid=2)]
    per_run, inside = kernel_times(events, warmup=1)
    assert per_run == [{"pre": 5.0, "if": 50.0, "post": 5.0, "other_thread": 5.0}]
    assert inside["of"] == {"conv_in_branch": "if", "inner_if": "if", "deep": "if"}   # the outermost encloses
    assert inside["us"] == [{"if": 45.0}]


def test_loop_and_if_bodies_attributed_to_their_node(tmp_path):
    import wild_models as wm
    for build, node in ((wm.build_loop, "loop"), (wm.build_if_value, "if_16k")):
        facts = build(tmp_path / f"{node}.onnx")
        model = onnx.load(facts["path"])
        arrays = dict(np.load(facts["npz"]))
        g = graph_of(model, InputSpec(arrays=arrays))
        prof = profile_model(facts["path"], arrays, runs=3, warmup=1, progress=False)
        df, s = latency_table(g, prof)
        assert s["kernel_time_coverage"] >= 0.99, s["unattributed_kernels_us"]
        assert node in s["inside_control_flow"] and s["inside_control_flow"][node]["median_us"] > 0
        by = df.set_index("node")
        assert by.loc[node, "attribution"] == "kernel" and by.loc[node, "latency_us"] > 0


def test_body_kernels_outside_their_node_map_by_name():
    """A kernel named after a body node that ran at top level (e.g. a branch ORT inlined) goes to the If."""
    from onnx import TensorProto, helper
    from conftest import make_model, tensor
    from lib.latency.profiling import attribute
    then = helper.make_graph([helper.make_node("Relu", ["x"], ["t"], name="then_relu")], "then", [],
                             [tensor("t", [1, 4])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e"], name="else_neg")], "else", [],
                              [tensor("e", [1, 4])])
    m = make_model([helper.make_node("Identity", ["c"], ["c2"], name="cond"),
                    helper.make_node("If", ["c2"], ["y"], name="branch", then_branch=then, else_branch=other)],
                   [tensor("x", [1, 4]), tensor("c", [], TensorProto.BOOL)], [tensor("y", [1, 4])])
    g = graph_of(m, InputSpec(arrays={"x": np.ones((1, 4), np.float32), "c": np.array(True)}))
    att = attribute(g, None, ["then_relu", "fused else_neg/SomethingFusion", "cond"])
    assert att["anchor"] == {"then_relu": 1, "fused else_neg/SomethingFusion": 1, "cond": 0}


def _twin_convs(path, second_fill=0.0):
    """x -> two 1x1 convs whose weights are ConstantOfShape fills (as the ONNX Model Zoo's Inception copy
    stores them) -> Relu each -> Concat. Equal fills: ORT's CSE keeps one conv."""
    from onnx import TensorProto, helper, numpy_helper
    from conftest import make_model, tensor
    shape = np.array([64, 128, 1, 1], np.int64)
    inits = [numpy_helper.from_array(shape, "s_a"), numpy_helper.from_array(shape.copy(), "s_b")]
    fill = lambda v: helper.make_tensor("v", TensorProto.FLOAT, [1], [v])      # noqa: E731
    nodes = [helper.make_node("ConstantOfShape", ["s_a"], ["w_a"], name="fill_a", value=fill(0.0)),
             helper.make_node("ConstantOfShape", ["s_b"], ["w_b"], name="fill_b", value=fill(second_fill)),
             helper.make_node("Conv", ["x", "w_a"], ["c_a"], name="conv_a"),
             helper.make_node("Relu", ["c_a"], ["r_a"], name="relu_a"),
             helper.make_node("Conv", ["x", "w_b"], ["c_b"], name="conv_b"),
             helper.make_node("Relu", ["c_b"], ["r_b"], name="relu_b"),
             helper.make_node("Concat", ["r_a", "r_b"], ["y"], name="cat", axis=1)]
    return make_model(nodes, [tensor("x", [1, 128, 28, 28])], [tensor("y", None)], inits, path=path)


@pytest.mark.parametrize("second_fill", [0.0, 1.0])
def test_a_node_ort_merged_into_its_twin_runs_no_kernel(tmp_path, second_fill):
    """ORT's CSE removes one of two identical convs; the Concat after them must not take the removed conv as
    its anchor (it did: on the Model Zoo's Inception the Concat's time was a conv's, below its roofline)."""
    from lib.onnx.loading import graph_of_path
    from lib.latency.kernels import kernel_table
    from lib.onnx.metrics import node_metrics
    path = tmp_path / "twins.onnx"
    _twin_convs(path, second_fill)
    g = graph_of_path(path)
    feeds = {"x": np.random.default_rng(0).random((1, 128, 28, 28), dtype=np.float32)}
    prof = profile_model(str(path), feeds, runs=3, warmup=1, progress=False)
    df, s = latency_table(g, prof)
    by = df.set_index("node")
    assert s["kernel_time_coverage"] >= 0.99
    assert by.loc["cat", "attribution"] == "kernel" and "cat" in by.loc["cat", "ort_kernels"].split(";")
    ran = by.loc[["conv_a", "conv_b"], "attribution"]
    kt = kernel_table(g, node_metrics(g), prof["optimized"]).set_index("pattern")
    if second_fill == 0.0:        # one conv and its Relu removed; the fills are folded either way
        assert sorted(ran) == ["kernel", "not_run"] and s["nodes_merged"] == 3
        gone = "conv_a" if ran["conv_a"] == "not_run" else "conv_b"
        assert by.loc[gone.replace("conv", "relu"), "attribution"] == "not_run"
        assert kt.loc["Concat", "macs"] == 0 and kt["macs"].sum() == 64 * 128 * 28 * 28
    else:
        assert list(ran) == ["kernel", "kernel"] and s["nodes_merged"] == 0
        assert kt["macs"].sum() == 2 * 64 * 128 * 28 * 28


def test_a_kernel_reading_a_second_output_stops_at_the_node_that_wrote_it(tmp_path):
    """Split's 2nd output feeds a MatMul whose name sorts first ('aa_mm1' < 'zz_split'): its walk back went
    through k into the Split and took it, and the Split's own kernel was booked as fused into it (every BERT
    optimized by onnxruntime.transformers: EmbedLayerNormalization's mask index, 0 us, "fused into Attention")."""
    from onnx import helper, numpy_helper
    from conftest import make_model, tensor
    from lib.onnx.loading import graph_of_path
    rng = np.random.default_rng(0)
    w = lambda n, s: numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)  # noqa: E731
    nodes = [helper.make_node("MatMul", ["x", "W0"], ["qkv"], name="proj"),
             helper.make_node("Split", ["qkv", "sp"], ["q", "k", "v"], axis=1, name="zz_split"),
             helper.make_node("MatMul", ["q", "W1"], ["oq"], name="mm_q"),
             helper.make_node("MatMul", ["k", "W2"], ["ok"], name="aa_mm1"),
             helper.make_node("MatMul", ["v", "W3"], ["ov"], name="mm_v"),
             helper.make_node("Sum", ["oq", "ok", "ov"], ["y"], name="sum")]
    inits = [w("W0", (64, 192)), w("W1", (64, 64)), w("W2", (64, 64)), w("W3", (64, 64)),
             numpy_helper.from_array(np.array([64, 64, 64], np.int64), "sp")]
    path = tmp_path / "split.onnx"
    make_model(nodes, [tensor("x", [32, 64])], [tensor("y", [32, 64])], inits, path=path)
    prof = profile_model(str(path), {"x": rng.random((32, 64), dtype=np.float32)}, runs=2, warmup=1, progress=False)
    by = latency_table(graph_of_path(path), prof)[0].set_index("node")
    assert list(by.loc[["zz_split", "aa_mm1", "mm_q", "mm_v"], "attribution"]) == ["kernel"] * 4
    assert by.loc["aa_mm1", "ort_kernels"] == "aa_mm1" and by.loc["zz_split", "ort_kernels"] == "zz_split"


@pytest.mark.parametrize("elements,constant_node", [(8, False), (9, False), (8, True), (100, True)])
def test_equal_constants_are_one_value_as_ort_shares_them(tmp_path, elements, constant_node):
    """ORT (1.31) shares equal constants of up to 8 elements, so Mul(x, c1) and Mul(x, c2) become one node; at 9
    elements they stay two. identical_groups must agree with ORT's own optimized graph."""
    import onnxruntime as ort
    from onnx import helper, numpy_helper
    from conftest import make_model, tensor
    from lib.onnx.loading import graph_of_path
    from lib.latency.cse import identical_groups
    c = np.arange(elements, dtype=np.float32)
    pre = ([helper.make_node("Constant", [], [n], name=f"k{n}", value=numpy_helper.from_array(c)) for n in ("c1", "c2")]
           if constant_node else [])
    inits = [] if constant_node else [numpy_helper.from_array(c, "c1"), numpy_helper.from_array(c.copy(), "c2")]
    nodes = pre + [helper.make_node("Mul", ["x", "c1"], ["a"], name="m1"),
                   helper.make_node("Mul", ["x", "c2"], ["b"], name="m2"),
                   helper.make_node("Sub", ["a", "b"], ["y"], name="sub")]
    path = tmp_path / "muls.onnx"
    make_model(nodes, [tensor("x", [4, elements])], [tensor("y", None)], inits, path=path)
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(tmp_path / "opt.onnx")
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    ort_muls = sum(n.op_type == "Mul" for n in onnx.load(str(tmp_path / "opt.onnx")).graph.node)
    g = graph_of_path(path)
    groups = [[g.names[p] for p in ps] for ps in identical_groups(g) if g.nodes[ps[0]].op_type == "Mul"]
    assert ort_muls == (1 if elements <= 8 else 2)
    assert groups == ([["m1", "m2"]] if ort_muls == 1 else [])


def test_the_calling_thread_runs_on_the_first_cpu_while_pinned_and_is_released_after():
    """ORT pins its intra-op workers and leaves the calling thread to the OS (lib/latency/profiling.py): while a
    micro-benchmark runs the calling thread sits on the first CPU it may use; afterwards its affinity is as
    before, also when the block raises."""
    import os
    from lib.latency.profiling import calling_thread_pinned
    before = os.sched_getaffinity(0)
    with calling_thread_pinned():
        assert os.sched_getaffinity(0) == {min(before)}
    assert os.sched_getaffinity(0) == before
    with pytest.raises(RuntimeError):
        with calling_thread_pinned():
            raise RuntimeError("a run failed")
    assert os.sched_getaffinity(0) == before


def test_a_node_named_as_ort_names_an_unnamed_one_keeps_its_own_kernel(tmp_path):
    """An unnamed MatMul (ORT traces it as MatMul_0), a MatMul the user named MatMul_0 and an unnamed Relu: both
    MatMul kernels were traced as MatMul_0, their times summed onto the first, the Relu's kernel given to the
    second. The model is profiled as a copy named as the tables name it (MatMul_0, MatMul_0__1, Relu_2)."""
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"]), helper.make_node("MatMul", ["a", "w2"], ["b"], name="MatMul_0"),
             helper.make_node("Relu", ["b"], ["y"])]
    path = tmp_path / "clash.onnx"
    model = make_model(nodes, [tensor("x", [64, 64])], [tensor("y", None)],
                       [weight("w1", (64, 16)), weight("w2", (16, 512))], path=path)
    feeds = make_feeds(model, {"x": [64, 64]}, InputSpec(seed=0))
    r = run_stage("01_profile_onnx.py", "--model", path, "--results", tmp_path / "r", "--runs", "2", "--sessions", "1",
                  "--no-host-reference")
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "r" / "ops_latency.csv", keep_default_na=False).set_index("node")
    assert list(df.index) == ["MatMul_0", "MatMul_0__1", "Relu_2"] and (df["attribution"] == "kernel").all()
    assert df["ort_kernels"].tolist() == list(df.index) and (df["runs"] == 2).all()
    assert feeds["x"].shape == (64, 64)


def _profiled(tmp_path, model, name, *stages):
    """Stages 02 and 01 (one session) on a model built with onnx.helper, then `stages`; ops_latency.csv by node."""
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, str(path))
    rdir = tmp_path / name
    for stage, extra in [("02_shapes_flops_bytes.py", ()), ("01_profile_onnx.py", ("--runs", "5", "--sessions", "1",
                                                                                  "--no-host-reference")),
                         *[(s, ()) for s in stages]]:
        r = run_stage(stage, "--model", path, "--results", rdir, *extra)
        assert r.returncode == 0, f"{stage}: {r.stderr}"
    return pd.read_csv(rdir / "ops_latency.csv", keep_default_na=False).set_index("node"), rdir


def _model(nodes, inputs, outputs, inits):
    m = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs, inits),
                          opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_each_kernel_time_goes_to_the_node_that_ran_it(tmp_path):
    """hunt13's: (a) unnamed nodes after two Identities ORT removes: the 512^3 MatMul's 3.6 ms went to the 8x8
    one (positions in ORT's graph shift) and the Abs's kernel to the big one; (b) a merged LoRA weight (A @ B + W,
    constants alone, folded when the session loads) took its consumer's kernel, the consumer shown fused into it;
    (c) a MatMul+Add ORT runs as one Gemm waits for the Add's other operand: 04's path left that chain out."""
    from onnx import TensorProto, numpy_helper
    rng = np.random.default_rng(0)
    w = lambda name, *shape: numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)  # noqa: E731
    f = lambda name, shape: helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)  # noqa: E731
    nodes = [helper.make_node("Identity", ["x"], ["x1"]), helper.make_node("Identity", ["y"], ["y1"]),
             helper.make_node("MatMul", ["x1", "wl"], ["c"]), helper.make_node("MatMul", ["y1", "wh"], ["d"]),
             helper.make_node("Abs", ["d"], ["e"]), helper.make_node("Tanh", ["c"], ["t"])]
    df, _ = _profiled(tmp_path, _model(nodes, [f("x", [8, 8]), f("y", [512, 512])], [f("t", [8, 8]), f("e", [512, 512])],
                                       [w("wl", 8, 8), w("wh", 512, 512)]), "unnamed")
    assert df.loc["MatMul_3", "latency_us"] > 20 * df.loc["MatMul_2", "latency_us"]
    assert df.loc["MatMul_3", "ort_kernels"] == "MatMul_3" and df.loc["Abs_4", "ort_kernels"] == "Abs_4"
    nodes = [helper.make_node("MatMul", ["A", "B"], ["AB"], name="lora_AB"),
             helper.make_node("Add", ["W", "AB"], ["Weff"], name="lora_merge"),
             helper.make_node("MatMul", ["x", "Weff"], ["h"], name="proj"), helper.make_node("Relu", ["h"], ["y"], name="act")]
    df, _ = _profiled(tmp_path, _model(nodes, [f("x", [16, 256])], [f("y", [16, 256])],
                                       [w("W", 256, 256), w("A", 256, 16), w("B", 16, 256)]), "lora")
    assert df.loc[["lora_AB", "lora_merge"], "attribution"].tolist() == ["not_run"] * 2
    assert df.loc["proj", "attribution"] == "kernel" and df.loc["proj", "ort_kernels"] == "proj"
    chain = ["r1", "r2", "r3", "r4"]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["big"], name="big_mm"),
             *[helper.make_node(op, [i], [o], name=o) for op, i, o in zip(["Relu", "Sigmoid", "Tanh", "Abs"],
                                                                          ["x", *chain[:-1]], chain)],
             helper.make_node("Add", ["big", "r4"], ["j"], name="add_join"), helper.make_node("Neg", ["j"], ["y"], name="neg")]
    df, rdir = _profiled(tmp_path, _model(nodes, [f("x", [256, 256])], [f("y", [256, 256])], [w("W", 256, 256)]),
                         "branchy", "03_merge_profile_metrics.py", "04_critical_path.py")
    assert df.loc["add_join", "fused_into"] == "big_mm"          # ORT's MatMulAddFusion: one Gemm(x, W, r4)
    path = pd.read_csv(rdir / "critical_path.csv", keep_default_na=False)
    assert path["node"].tolist() == [*chain, "add_join", "neg"]         # was big_mm, add_join, neg
    assert path["kernel"].iat[4] == "big_mm" and path["latency_us"].iat[4] == df.loc["big_mm", "latency_us"]


def test_a_qdq_op_keeps_its_own_kernel(tmp_path):
    """quantize_static (QDQ): ORT runs the Add as QLinearAdd and the pools as QLinearGlobalAveragePool and
    NhwcMaxPool under the nodes' names; those kernels went to the QuantizeLinear around them (an op of another
    type under a node's name was not that node's; a QuantizeLinear's per-element FLOPs outweighed a pool's)."""
    from onnx import TensorProto, numpy_helper
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static
    shape = [1, 32, 64, 64]
    f = lambda name, s: helper.make_tensor_value_info(name, TensorProto.FLOAT, s)  # noqa: E731
    nodes = [helper.make_node("Add", ["x", "y"], ["s"], name="big_add"),
             helper.make_node("MaxPool", ["s"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap"),
             helper.make_node("Flatten", ["g"], ["out"], name="flat")]
    f32 = tmp_path / "f32.onnx"
    onnx.save(_model(nodes, [f("x", shape), f("y", shape)], [f("out", [1, 32])], []), str(f32))

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.data = iter([{n: rng.standard_normal(shape).astype(np.float32) for n in "xy"} for _ in range(2)])

        def get_next(self):
            return next(self.data, None)
    quantize_static(str(f32), str(tmp_path / "q.onnx"), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    df, _ = _profiled(tmp_path, onnx.load(str(tmp_path / "q.onnx")), "qdq")
    for node in ("big_add", "pool", "gap"):
        assert df.loc[node, "attribution"] == "kernel", df[["attribution", "fused_into", "ort_kernels"]]
    assert "big_add" in df.loc["big_add", "ort_kernels"].split(";") and df.loc["gap", "ort_kernels"] == "gap"
    qdq = df[df["op_type"].isin(["QuantizeLinear", "DequantizeLinear"])]
    assert not qdq["ort_kernels"].str.contains("big_add|gap|pool").any()
