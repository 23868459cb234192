"""The op registry is one table: every op registered once with a cost formula and a known class, contrib
aliases costed and classed as their standard op, the FX side mapped onto it, and docs/cost-model.md's table
generated from it."""
import numpy as np
import pytest
from onnx import helper

from conftest import REPO
from lib.onnx import ops as op_costs
from lib.fx.analysis import FX_TO_ONNX
from lib.onnx.ops import REGISTRY, alias, flags_table, markdown_table, names_with, op_class, register, unknown_cost

CLASSES = {"conv", "conv_depthwise", "conv_grouped", "gemm", "matmul", "recurrent", "pool", "norm", "activation",
           "elementwise", "softmax", "reduce", "quantize", "control_flow", "data_movement", "shape"}


def test_every_op_has_a_cost_and_a_known_class():
    class G:                                    # a graph that knows no shape: class functions must cope
        tensors = {}
    for key, op in REGISTRY.items():
        domain, _, name = key.rpartition(":")
        node = helper.make_node(name, ["x", "w"], ["y"], domain=domain)
        assert callable(op.cost), key
        # an op registered for its flags alone has no formula yet: unknown cost, class 'other'
        assert op_class(node, G()) in (CLASSES if op.cost is not unknown_cost else {"other"}), key


def test_a_second_registration_is_an_error():
    with pytest.raises(ValueError, match="registered twice"):
        register("Conv", op_class="conv")(lambda n, g: (0.0, 0.0))
    with pytest.raises(ValueError, match="registered twice"):
        alias("com.microsoft:Gelu", "Gelu")
    assert REGISTRY["Conv"].weight_input == 1          # the failed registrations changed nothing


def test_contrib_aliases_are_their_standard_op():
    for key, base in (("com.microsoft:Gelu", "Gelu"), ("com.microsoft:QLinearAdd", "Add"),
                      ("com.microsoft:QLinearSoftmax", "Softmax")):
        assert REGISTRY[key].cost is REGISTRY[base].cost and REGISTRY[key].op_class == REGISTRY[base].op_class
    assert REGISTRY["com.microsoft:SkipLayerNormalization"].op_class == "norm"
    assert REGISTRY["com.microsoft:FusedMatMul"].op_class == "matmul"


def test_fx_kinds_map_onto_registered_ops():
    missing = {kind: op for kind, op in FX_TO_ONNX.items() if op not in REGISTRY}
    assert not missing
    assert op_costs.REGISTRY[FX_TO_ONNX["ReLU6"]].per_element == 2       # ReLU6 is a Clip: 2 FLOPs per element


def test_docs_cost_table_is_the_registry():
    assert markdown_table() in (REPO / "docs" / "cost-model.md").read_text()


def test_op_facts_are_registry_flags():
    """The tables that lived outside the registry (graph.RANDOM_OPS / CONTROL_FLOW, metrics.STORED_CHAIN, the
    latency model's INT8_OPS / VIEW_OPS / PICK_OPS) are queries of its entries' flags."""
    assert names_with("control_flow") == {"If", "Loop", "Scan"}
    assert names_with("pick") == {"Gather", "GatherElements", "GatherND", "Slice"}
    assert {"Reshape", "Identity", "Shape"} <= names_with("view") and "Transpose" not in names_with("view")
    assert {"QLinearConv", "QGemm", "MatMulInteger"} <= names_with("int8") and "Conv" not in names_with("int8")
    assert {"DequantizeLinear", "Cast", "Transpose"} <= names_with("stored_chain")
    assert {"RandomNormal", "Bernoulli"} <= names_with("random")
    assert names_with("reads_shape") == {"Shape", "Size"}
    assert names_with("dtype_attribute") == names_with("random") | {"EyeLike"}
    assert names_with("stored_chain") == names_with("rearranges") | {"DequantizeLinear", "QuantizeLinear", "Cast"}
    assert {"ReduceSum", "GlobalAveragePool"} <= names_with("reduces") and "ArgMax" not in names_with("reduces")
    assert names_with("qdq_fused") == {"Conv", "MatMul", "Gemm"}
    assert REGISTRY["com.microsoft:QGemm"].int8 and REGISTRY["If"].control_flow


def test_a_flags_only_entry_takes_its_formula_later():
    """An op declared for its flags (cost unknown) may be registered with a formula once: its flags stay."""
    key = "test.domain:Noise"
    try:
        op_costs.flag(key, random=True)
        assert REGISTRY[key].cost is unknown_cost and REGISTRY[key].op_class == "other"
        register(key, op_class="elementwise")(lambda n, g: (1.0, 0.0))
        assert REGISTRY[key].random and REGISTRY[key].op_class == "elementwise"
        with pytest.raises(ValueError, match="registered twice"):
            register(key, op_class="elementwise")(lambda n, g: (1.0, 0.0))
    finally:
        REGISTRY.pop(key, None)


def test_value_evaluators_live_in_the_entries():
    """Static value propagation evaluates shape arithmetic with the entries' evaluators; a contrib alias with
    other inputs (QLinearAdd) does not inherit its standard op's."""
    i64 = lambda *v: np.array(v, dtype=np.int64)        # noqa: E731
    assert REGISTRY["com.microsoft:QLinearAdd"].evaluate is None
    ev = {k: REGISTRY[k].evaluate for k in ("Add", "Equal", "Shape", "Concat", "Div", "Pow")}
    assert ev["Add"](None, [i64(2, 3), i64(1)], None)[0].tolist() == [3, 4]
    assert ev["Equal"](None, [i64(2, 3), i64(3)], None)[0].tolist() == [False, True]
    assert ev["Pow"](None, [i64(2, 3), i64(2)], None)[0].tolist() == [4, 9]
    assert ev["Div"](None, [i64(-7), i64(2)], None)[0].tolist() == [-3]       # integer Div truncates, as ONNX
    shape = helper.make_node("Shape", ["x"], ["s"], start=1)
    assert ev["Shape"](shape, [None], [1, 3, 224, 224])[0].tolist() == [3, 224, 224]
    concat = helper.make_node("Concat", ["a", "b"], ["c"], axis=0)
    assert ev["Concat"](concat, [i64(1), np.int64(5)], None)[0].tolist() == [1, 5]
    # what an op that builds a tensor from a shape would allocate, known before building it
    assert REGISTRY["ConstantOfShape"].made_elements([i64(1000, 1000)]) == 1_000_000
    assert REGISTRY["Range"].made_elements([np.int64(0), np.int64(10), np.int64(3)]) == 4
    assert REGISTRY["Tile"].made_elements([i64(1, 2), i64(3)]) == 6 and REGISTRY["Add"].made_elements is None


def test_docs_flags_table_is_the_registry():
    assert flags_table() in (REPO / "docs" / "op-registry.md").read_text()
