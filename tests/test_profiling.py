"""Stage 01's attribution of ORT kernel time to original nodes, with a real ONNX Runtime session."""
import numpy as np
import onnx
import pytest

from conftest import small_cnn
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
