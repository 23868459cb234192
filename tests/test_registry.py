"""The op registry is one table: every op registered once with a cost formula and a known class, contrib
aliases costed and classed as their standard op, the FX side mapped onto it, and docs/cost-model.md's table
generated from it."""
import pytest
from onnx import helper

from conftest import REPO
from lib.onnx import ops as op_costs
from lib.fx.analysis import FX_TO_ONNX
from lib.onnx.ops import REGISTRY, alias, markdown_table, op_class, register

CLASSES = {"conv", "conv_depthwise", "conv_grouped", "gemm", "matmul", "recurrent", "pool", "norm", "activation",
           "elementwise", "softmax", "reduce", "quantize", "control_flow", "data_movement", "shape"}


def test_every_op_has_a_cost_and_a_known_class():
    class G:                                    # a graph that knows no shape: class functions must cope
        tensors = {}
    for key, op in REGISTRY.items():
        domain, _, name = key.rpartition(":")
        node = helper.make_node(name, ["x", "w"], ["y"], domain=domain)
        assert callable(op.cost), key
        assert op_class(node, G()) in CLASSES, key


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
