"""Malformed models (the kinds bench/fuzz_models.py generates, one hand-built case each): exit 2 and one line
naming the node and the rule, nothing written; valid oddities (names pandas would read as NaN, custom ops ORT
lacks, deep nesting) analysed with exit 0."""
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import make_model, run_stage, tensor
from test_bad_input import assert_clean_error


def relu_mul(path, **edit):
    """x -> Relu -> Mul(w) -> y, with `edit` applied to the nodes/initializers before saving."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Mul", ["r", "w"], ["y"], name="mul")]
    inits = [numpy_helper.from_array(np.ones(4, np.float32), "w")]
    if "nodes" in edit:
        nodes = edit["nodes"](nodes)
    if "inits" in edit:
        inits = edit["inits"](inits)
    inputs = edit.get("inputs", [tensor("x", [1, 4])])
    m = make_model(nodes, inputs, [tensor("y", None)], inits, **({"opset": edit["opset"]} if "opset" in edit else {}))
    onnx.save(m, str(path))
    return path


def refused(tmp_path, model, *needles, stage="02_shapes_flops_bytes.py"):
    rdir = tmp_path / "res"
    assert_clean_error(run_stage(stage, "--model", model, "--results", rdir), *needles)
    assert not rdir.exists() or not any(rdir.iterdir())


def bad_init(dims):
    t = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=dims)
    t.raw_data = np.ones(4, np.float32).tobytes()
    return [t]


STRUCTURAL = {
    "dangling input": (dict(nodes=lambda ns: [helper.make_node("Relu", ["nope"], ["r"], name="relu"), ns[1]]),
                       ["relu", "nope"]),
    "two producers": (dict(nodes=lambda ns: ns + [helper.make_node("Sigmoid", ["x"], ["r"], name="again")]), ["'r'"]),
    "self loop": (dict(nodes=lambda ns: [helper.make_node("Add", ["x", "r"], ["r"], name="selfie"), ns[1]]),
                  ["selfie"]),
    "cycle": (dict(nodes=lambda ns: [helper.make_node("Add", ["x", "q"], ["r"], name="a"),
                                     helper.make_node("Relu", ["r"], ["q"], name="b"), ns[1]]), ["cycle"]),
    "negative initializer dim": (dict(inits=lambda _: bad_init([-4])), ["'w'"]),
    "data shorter than dims": (dict(inits=lambda _: bad_init([4, 1000])), ["'w'"]),
    "unknown element type": (dict(inputs=[helper.make_tensor_value_info("x", 77, [1, 4])]), ["x", "77"]),
    "dim past any machine": (dict(inputs=[tensor("x", [2**62, 4])]), ["x"]),
    "conv without weight": (dict(nodes=lambda ns: [helper.make_node("Conv", ["x"], ["r"], name="lonely"), ns[1]]),
                            ["lonely", "required input"]),
    "attribute of the wrong type": (dict(nodes=lambda ns: [helper.make_node("LeakyRelu", ["x"], ["r"], name="lr",
                                                                             alpha="high"), ns[1]]), ["lr", "alpha"]),
}


@pytest.mark.parametrize("case", list(STRUCTURAL))
def test_structural_defects_are_refused(tmp_path, case):
    edit, needles = STRUCTURAL[case]
    refused(tmp_path, relu_mul(tmp_path / "m.onnx", **edit), *needles)


def test_non_utf8_op_type_is_refused(tmp_path):
    path = relu_mul(tmp_path / "m.onnx", nodes=lambda ns: [helper.make_node("ZQZQ", ["x"], ["r"], name="relu"), ns[1]])
    path.write_bytes(path.read_bytes().replace(b"ZQZQ", b"\xff\xfeZQ"))
    refused(tmp_path, path, "UTF-8")


def loop_model(path, body_outputs):
    """A Loop carrying one value with `body_outputs` body outputs: 2 is right (cond + the carried value)."""
    body_nodes = [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Relu", ["h_in"], ["h_out"])]
    outs = [tensor("cond_out", [], TensorProto.BOOL), tensor("h_out", [1, 4])]
    if body_outputs == 3:
        body_nodes.append(helper.make_node("Sigmoid", ["h_in"], ["scan"]))
        outs.append(tensor("scan", [1, 4]))
    body = helper.make_graph(body_nodes, "body", [tensor("i", [], TensorProto.INT64), tensor("cond_in", [], TensorProto.BOOL),
                                                  tensor("h_in", [1, 4])], outs)
    loop = helper.make_node("Loop", ["n", "c", "x"], ["y"], name="loop", body=body)
    inits = [numpy_helper.from_array(np.array(3, np.int64), "n"), numpy_helper.from_array(np.array(True), "c")]
    make_model([loop], [tensor("x", [1, 4])], [tensor("y", [1, 4])], inits, path=path)
    return path


def test_loop_body_arity(tmp_path):
    r = run_stage("02_shapes_flops_bytes.py", "--model", loop_model(tmp_path / "ok.onnx", 2), "--results", tmp_path / "ok")
    assert r.returncode == 0, r.stderr
    # the body makes a scan output the node does not have: ONNX Runtime refuses it
    refused(tmp_path, loop_model(tmp_path / "bad.onnx", 3), "loop", "body")


def test_type_error_onnx_and_ort_agree_on_is_refused(tmp_path):
    """Element types that contradict each other are refused when onnx's strict inference and ONNX Runtime both
    refuse the model (the structural rules alone let it through)."""
    nodes = [helper.make_node("ReduceSum", ["x"], ["s"], name="sum_x", keepdims=0),
             helper.make_node("Cast", ["s"], ["y"], name="cast", to=TensorProto.FLOAT)]
    m = make_model(nodes, [tensor("x", [1, 4])], [tensor("y", [])])
    m.graph.value_info.append(tensor("s", [], TensorProto.INT64))     # ReduceSum of floats is a float
    onnx.save(m, str(tmp_path / "m.onnx"))
    refused(tmp_path, tmp_path / "m.onnx", "invalid", "sum_x", "ONNX Runtime refuses it too")


def test_shape_values_past_any_real_model_are_refused(tmp_path):
    """An Expand to 2^30 x 2^30 x 4 from a constant: every figure would be past float64's exact integers."""
    nodes = [helper.make_node("Expand", ["x", "s"], ["e"], name="huge_expand"), helper.make_node("Relu", ["e"], ["y"], name="relu")]
    s = numpy_helper.from_array(np.array([2**30, 2**30, 4], np.int64), "s")
    make_model(nodes, [tensor("x", [1, 4])], [tensor("y", None)], [s], path=tmp_path / "m.onnx")
    refused(tmp_path, tmp_path / "m.onnx", "huge_expand", "act_out_bytes", "beyond any real model")


def external_weight(tmp_path, location, length=16, file_bytes=16):
    m = onnx.load(str(relu_mul(tmp_path / "m.onnx")))
    w = m.graph.initializer[0]
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    del w.external_data[:]
    for k, v in (("location", location), ("offset", "0"), ("length", str(length))):
        w.external_data.add(key=k, value=v)
    (tmp_path / "w.bin").write_bytes(b"\0" * file_bytes)
    onnx.save(m, str(tmp_path / "m.onnx"))
    return tmp_path / "m.onnx"


@pytest.mark.parametrize("location,length,file_bytes,needle", [
    ("../../etc/passwd", 16, 16, "outside the model's folder"),
    ("missing.bin", 16, 16, "not found"),
    ("w.bin", 8, 8, "needs 16 bytes"),           # dims [4] float: 16 bytes, the file holds 8
])
def test_external_data_is_checked_before_any_read(tmp_path, location, length, file_bytes, needle):
    refused(tmp_path, external_weight(tmp_path, location, length, file_bytes), needle)


def test_names_pandas_would_read_as_nan_stay_text(tmp_path):
    names = ["NA", "null"]
    path = relu_mul(tmp_path / "m.onnx", nodes=lambda ns: [helper.make_node("Relu", ["x"], ["r"], name=names[0]),
                                                            helper.make_node("Mul", ["r", "w"], ["y"], name=names[1])])
    rdir = tmp_path / "res"
    for stage in ("02_shapes_flops_bytes.py", "03_merge_profile_metrics.py", "07_split_candidates.py"):
        r = run_stage(stage, "--model", path, "--results", rdir)
        assert r.returncode == 0, (stage, r.stderr)
    import pandas as pd
    assert pd.read_csv(rdir / "ops_metrics.csv", keep_default_na=False)["node"].tolist() == names


def test_prediction_without_ort_fusions_when_ort_lacks_an_op(tmp_path):
    """A custom op ONNX Runtime has no kernel for: 02's costs stand and 03 predicts without fusions, saying so."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Frobnicate", ["r"], ["y"], name="mystery", domain="com.example")]
    m = make_model(nodes, [tensor("x", [1, 4])], [tensor("y", [1, 4])])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    onnx.save(m, str(tmp_path / "m.onnx"))
    rdir = tmp_path / "res"
    for stage in ("02_shapes_flops_bytes.py", "03_merge_profile_metrics.py"):
        r = run_stage(stage, "--model", tmp_path / "m.onnx", "--results", rdir)
        assert r.returncode == 0, (stage, r.stderr)
    pred = json.loads((rdir / "merge_meta.json").read_text())["prediction"]
    assert pred["fusion_from"].startswith("none known") and "ONNX Runtime cannot load" in pred["fusion_from"]


def nested_ifs(path, depth):
    """If inside If, `depth` levels: each then-branch the next If, each else-branch a Relu; the branches' outputs
    declare no shape (as exporters often write them), so shapes are left to the later steps of the chain."""
    def leaf(level, out):
        return helper.make_graph([helper.make_node("Relu", ["x"], [out])], f"leaf{level}", [], [tensor(out, None)])

    def branch(level, out):
        if level == depth:
            return leaf(level, out)
        inner = helper.make_node("If", ["c"], [out], then_branch=branch(level + 1, f"t{level}"),
                                 else_branch=leaf(level + 1, f"e{level}"))
        return helper.make_graph([inner], f"level{level}", [], [tensor(out, None)])
    top = helper.make_node("If", ["c"], ["y"], name="top", then_branch=branch(1, "t0"), else_branch=leaf(1, "e0"))
    make_model([top], [tensor("x", [1, 4]), tensor("c", [], TensorProto.BOOL)], [tensor("y", None)], path=path)
    return path


def test_deeply_nested_ifs_finish(tmp_path):
    """ORT's symbolic inference re-infers each branch per level (exponential: 30 levels ran for minutes in the
    fuzzer): it is skipped past ORT_SYMBOLIC_MAX_NESTING levels; the rest of the chain still shapes the model."""
    from lib.onnx import shapes
    path = nested_ifs(tmp_path / "m.onnx", 24)
    model = onnx.load(str(path))
    assert shapes._nesting_depth(model.graph) == 24 and shapes._ort_symbolic(model) is None
    assert shapes._nesting_depth(onnx.load(str(nested_ifs(tmp_path / "m2.onnx", 2))).graph) == 2
    r = run_stage("02_shapes_flops_bytes.py", "--model", path, "--results", tmp_path / "res")
    assert r.returncode == 0, r.stderr


def test_random_inputs_past_memory_are_refused(tmp_path):
    path = relu_mul(tmp_path / "m.onnx", inputs=[tensor("x", [1, 2**31])],
                    nodes=lambda ns: [ns[0], helper.make_node("Sigmoid", ["r"], ["y"], name="sig")])
    refused(tmp_path, path, "x", "smaller --shape-override", stage="01_profile_onnx.py")


@pytest.mark.parametrize("elem, name", [(TensorProto.BFLOAT16, "bfloat16"), (TensorProto.FLOAT8E4M3FN, "float8_e4m3fn")])
def test_a_low_bit_graph_input_is_refused_with_a_way_out(tmp_path, elem, name):
    """A bfloat16 or float8 input: refused in one line that says why and what to do, drawn at random or given in an
    npz (the advice was "pass --inputs-npz", and an npz could not hold one: |V2 or |V1 refused)."""
    path = relu_mul(tmp_path / "m.onnx", inputs=[helper.make_tensor_value_info("x", elem, [1, 4])], opset=21,
                    nodes=lambda ns: [helper.make_node("Cast", ["x"], ["c"], to=TensorProto.FLOAT, name="cast"),
                                      helper.make_node("Relu", ["c"], ["r"], name="relu"), ns[1]])
    refused(tmp_path, path, f"input x is {name}", "keep_io_types", stage="01_profile_onnx.py")
    npz = tmp_path / "x.npz"
    np.savez(npz, x=np.zeros((1, 4), np.float32))
    r = run_stage("02_shapes_flops_bytes.py", "--model", path, "--results", tmp_path / "r2", "--inputs-npz", npz)
    assert_clean_error(r, f"input x is {name}")


def test_external_reference_seen_in_the_light_bytes(tmp_path):
    """read_light skips the walk over every node's attributes only when the light bytes hold no
    data_location = EXTERNAL besides the tensors it stripped itself; an external weight is always seen, as is
    one in a Constant attribute."""
    from lib.onnx.reader import read_light
    assert not read_light(relu_mul(tmp_path / "plain.onnx")).external_refs
    assert read_light(external_weight(tmp_path, "w.bin"), check_data=False).external_refs
    m = onnx.load(str(relu_mul(tmp_path / "c.onnx")))
    t = numpy_helper.from_array(np.zeros(4, np.float32), "cval")
    t.ClearField("raw_data")
    t.data_location = TensorProto.EXTERNAL
    t.external_data.add(key="location", value="/etc/passwd")
    m.graph.node.insert(0, helper.make_node("Constant", [], ["unused_c"], value=t))
    onnx.save(m, str(tmp_path / "c.onnx"))
    assert read_light(tmp_path / "c.onnx", check_data=False).external_refs
    refused(tmp_path, tmp_path / "c.onnx", "outside the model's folder")


def test_tensor_array_reads_inline_stripped_and_external_payloads(tmp_path):
    """tensor_array gives a weight's values without loading the model: a small one from its inline data, a large
    one (past KEEP_BYTES) from the model file's stripped raw_data, and one saved as external data from its file;
    each equals what onnx.load reads."""
    from lib.onnx.reader import read_light, tensor_array
    rng = np.random.default_rng(0)
    small, big = rng.standard_normal(4).astype(np.float32), rng.standard_normal((64, 512)).astype(np.float32)
    nodes = [helper.make_node("Mul", ["x", "s"], ["m"], name="mul"), helper.make_node("MatMul", ["m", "b"], ["y"], name="mm")]
    m = make_model(nodes, [tensor("x", [1, 64])], [tensor("y", None)],
                   [numpy_helper.from_array(np.resize(small, 64), "s"), numpy_helper.from_array(big, "b")])
    onnx.save(m, str(tmp_path / "inline.onnx"))
    onnx.save(m, str(tmp_path / "ext.onnx"), save_as_external_data=True, location="w.bin", size_threshold=1024)
    for name in ("inline.onnx", "ext.onnx"):
        light = read_light(tmp_path / name)
        got = {t.name: tensor_array(light, t) for t in light.model.graph.initializer}
        assert np.array_equal(got["s"], np.resize(small, 64)), name
        assert np.array_equal(np.asarray(got["b"]).reshape(64, 512), big), name
    assert {e.value for t in read_light(tmp_path / "inline.onnx").model.graph.initializer if t.name == "b"
            for e in t.external_data if e.key == "location"} == {"<nn-perf: stripped inline data>"}
