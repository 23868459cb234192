"""Stage 01's attribution of ORT kernel time to original nodes, with a real ONNX Runtime session."""
import numpy as np
import pytest

from conftest import small_cnn
from lib.inputs import InputSpec, make_feeds
from lib.loading import graph_of
from lib.profiling import latency_table, profile_model


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
