"""The independent MAC reference (tests/executed_macs.py) against hand arithmetic on tiny graphs."""
import os
import tempfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests import executed_macs as em

F = TensorProto.FLOAT


def vi(name, shape, dtype=F):
    return helper.make_tensor_value_info(name, dtype, shape)


def init(name, shape, seed=0):
    return numpy_helper.from_array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), name)


def save(tmp_path, nodes, inputs, outputs, inits=(), opset=17, name="m.onnx"):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    p = tmp_path / name
    onnx.save(m, str(p))
    return p


def feeds(**kw):
    return {k: (np.random.default_rng(1).standard_normal(v).astype(np.float32) if isinstance(v, tuple) else v)
            for k, v in kw.items()}


def test_conv_grouped(tmp_path):
    # X 1x4x8x8, W 6x2x3x3, group 2, pads 1 -> Y 1x6x8x8: 1*6*64 * (4/2)*9 = 6912
    p = save(tmp_path, [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="c", group=2, pads=[1, 1, 1, 1])],
             [vi("x", [1, 4, 8, 8])], [vi("y", [1, 6, 8, 8])], [init("w", (6, 2, 3, 3)), init("b", (6,))])
    r = em.executed_macs(p, feeds(x=(1, 4, 8, 8)))
    assert r["total"] == 1 * 6 * 8 * 8 * 2 * 3 * 3 == 6912
    assert r["by_node"] == {"c": 6912} and r["by_op"] == {"Conv": 6912} and r["kernels"] == 1


def test_conv_transpose_stride2(tmp_path):
    # X 1x3x5x5, W 3x4x3x3, stride 2 -> Y 1x4x11x11: N*Cin*prod(in)*Cout/group*prod(k) = 1*3*25*4*9 = 2700
    p = save(tmp_path, [helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="ct", strides=[2, 2])],
             [vi("x", [1, 3, 5, 5])], [vi("y", [1, 4, 11, 11])], [init("w", (3, 4, 3, 3))])
    assert em.executed_macs(p, feeds(x=(1, 3, 5, 5)))["total"] == 3 * 25 * 4 * 9 == 2700


def test_gemm_transB(tmp_path):
    # A 3x5, B 7x5 (transB) -> 3x7, K=5: 105; the bias is not a MAC
    p = save(tmp_path, [helper.make_node("Gemm", ["a", "w", "b"], ["y"], name="g", transB=1)],
             [vi("a", [3, 5])], [vi("y", [3, 7])], [init("w", (7, 5)), init("b", (7,))])
    assert em.executed_macs(p, feeds(a=(3, 5)))["total"] == 3 * 7 * 5


def test_gemm_transA(tmp_path):
    # A 5x3 (transA) -> M=3, K=5; B 5x7: 105
    p = save(tmp_path, [helper.make_node("Gemm", ["a", "w"], ["y"], name="g", transA=1)],
             [vi("a", [5, 3])], [vi("y", [3, 7])], [init("w", (5, 7))])
    assert em.executed_macs(p, feeds(a=(5, 3)))["total"] == 105


def test_matmul_batched_broadcast_and_1d(tmp_path):
    # a 2x1x3x4 @ b 5x4x6 -> batch 2x5, 3x6 outputs, K 4: 10*3*6*4 = 720
    # v 4 @ b2 4x6 -> 6 outputs, K 4: 24;   v 4 @ v 4 -> K 4: 4
    nodes = [helper.make_node("MatMul", ["a", "b"], ["y"], name="mm"),
             helper.make_node("MatMul", ["v", "b2"], ["y2"], name="mv"),
             helper.make_node("MatMul", ["v", "v"], ["y3"], name="dot")]
    p = save(tmp_path, nodes, [vi("a", [2, 1, 3, 4]), vi("b", [5, 4, 6]), vi("v", [4])],
             [vi("y", [2, 5, 3, 6]), vi("y2", [6]), vi("y3", [])], [init("b2", (4, 6))])
    r = em.executed_macs(p, feeds(a=(2, 1, 3, 4), b=(5, 4, 6), v=(4,)))
    assert r["by_node"] == {"mm": 720, "mv": 24, "dot": 4}
    assert r["total"] == 748


def test_unnamed_nodes_and_constant_operand(tmp_path):
    # unnamed nodes (ORT names them <op>_<index without Constant nodes>); a Constant as MatMul operand
    nodes = [helper.make_node("Constant", [], ["k"], value=numpy_helper.from_array(np.ones((4, 5), np.float32))),
             helper.make_node("MatMul", ["x", "k"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("MatMul", ["r", "w"], ["y"])]
    p = save(tmp_path, nodes, [vi("x", [2, 4])], [vi("y", [2, 3])], [init("w", (5, 3))])
    r = em.executed_macs(p, feeds(x=(2, 4)))
    assert r["by_node"] == {"MatMul_1": 2 * 4 * 5, "MatMul_3": 2 * 5 * 3} and r["unmatched"] == []


def test_lstm_bidirectional(tmp_path):
    # seq 5, batch 2, input 3, hidden 4, 2 directions: 2*5*2 * 4 gates * 4 * (3+4) = 2240
    S, B, I, H = 5, 2, 3, 4
    p = save(tmp_path, [helper.make_node("LSTM", ["x", "W", "R", "Bi"], ["y", "yh", "yc"], name="lstm",
                                         hidden_size=H, direction="bidirectional")],
             [vi("x", [S, B, I])], [vi("y", [S, 2, B, H]), vi("yh", [2, B, H]), vi("yc", [2, B, H])],
             [init("W", (2, 4 * H, I)), init("R", (2, 4 * H, H)), init("Bi", (2, 8 * H))])
    assert em.executed_macs(p, feeds(x=(S, B, I)))["total"] == 2 * S * B * 4 * H * (I + H) == 2240


def test_lstm_layout1_formula():
    # ORT's CPU LSTM refuses layout=1 ("Batchwise recurrent operations are not supported"), so the
    # formula is checked directly. X is batch x seq x input: batch 3, seq 2, input 5, hidden 6:
    # 2*3 * 4 gates * 6 * (5+6) = 1584
    Bt, S, I, H = 3, 2, 5, 6
    shapes = [[Bt, S, I], [1, 4 * H, I], [1, 4 * H, H]]
    assert em.node_macs("LSTM", shapes, [[Bt, S, 1, H]], {"layout": 1, "hidden_size": H}) == 1584
    # (seq x batch is a product, so layout changes which dim is which but not the count)
    assert em.node_macs("LSTM", shapes, [[Bt, S, 1, H]], {"layout": 0, "hidden_size": H}) == 1584


def test_gru_and_rnn(tmp_path):
    # GRU seq 3, batch 1, input 6, hidden 5: 3*1*3 gates*5*(6+5) = 495;  RNN same shapes, 1 gate: 165
    S, B, I, H = 3, 1, 6, 5
    nodes = [helper.make_node("GRU", ["x", "Wg", "Rg"], ["yg"], name="gru", hidden_size=H),
             helper.make_node("RNN", ["x", "Wr", "Rr"], ["yr"], name="rnn", hidden_size=H)]
    p = save(tmp_path, nodes, [vi("x", [S, B, I])], [vi("yg", [S, 1, B, H]), vi("yr", [S, 1, B, H])],
             [init("Wg", (1, 3 * H, I)), init("Rg", (1, 3 * H, H)), init("Wr", (1, H, I)), init("Rr", (1, H, H))])
    r = em.executed_macs(p, feeds(x=(S, B, I)))
    assert r["by_node"] == {"gru": 495, "rnn": 165}
    assert r["by_op"] == {"GRU": 495, "RNN": 165}


def test_einsum(tmp_path):
    # bij,bjk->bik with b 2, i 3, j 4, k 5: 2*3*4*5 = 120
    p = save(tmp_path, [helper.make_node("Einsum", ["a", "b"], ["y"], name="e", equation="bij,bjk->bik")],
             [vi("a", [2, 3, 4]), vi("b", [2, 4, 5])], [vi("y", [2, 3, 5])])
    assert em.executed_macs(p, feeds(a=(2, 3, 4), b=(2, 4, 5)))["total"] == 120


def _loop_body():
    return helper.make_graph(
        [helper.make_node("MatMul", ["x_in", "W"], ["x_out"], name="body_mm"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_id")],
        "body", [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("x_in", [2, 4])],
        [vi("cond_out", [], TensorProto.BOOL), vi("x_out", [2, 4])])


def test_loop_runs_matmul_three_times(tmp_path):
    # body: x(2x4) @ W(4x4, outer-scope initializer) = 32 MACs, trip count 3 -> 96
    trip = numpy_helper.from_array(np.array(3, np.int64), "n")
    cond = numpy_helper.from_array(np.array(True), "c")
    p = save(tmp_path, [helper.make_node("Loop", ["n", "c", "x"], ["y"], name="loop", body=_loop_body())],
             [vi("x", [2, 4])], [vi("y", [2, 4])], [trip, cond, init("W", (4, 4))])
    r = em.executed_macs(p, feeds(x=(2, 4)))
    assert r["total"] == 3 * 2 * 4 * 4 == 96
    assert r["by_node"] == {"body_mm": 96}


def test_loop_trip_count_from_input(tmp_path):
    p = save(tmp_path, [helper.make_node("Loop", ["n", "c", "x"], ["y"], name="loop", body=_loop_body())],
             [vi("n", [], TensorProto.INT64), vi("x", [2, 4])], [vi("y", [2, 4])],
             [numpy_helper.from_array(np.array(True), "c"), init("W", (4, 4))])
    f = feeds(x=(2, 4))
    assert em.executed_macs(p, {**f, "n": np.array(5, np.int64)})["total"] == 5 * 32
    assert em.executed_macs(p, {**f, "n": np.array(0, np.int64)})["total"] == 0


def test_if_counts_only_the_taken_branch(tmp_path):
    # then: x(2x4) @ Wt(4x8) = 64 MACs;  else: x @ We(4x3) = 24 MACs
    then_g = helper.make_graph([helper.make_node("MatMul", ["x", "Wt"], ["t"], name="then_mm")], "then", [],
                               [vi("t", [2, None])])
    else_g = helper.make_graph([helper.make_node("MatMul", ["x", "We"], ["e"], name="else_mm")], "else", [],
                               [vi("e", [2, None])])
    p = save(tmp_path, [helper.make_node("If", ["c"], ["y"], name="if", then_branch=then_g, else_branch=else_g)],
             [vi("c", [], TensorProto.BOOL), vi("x", [2, 4])], [vi("y", [2, None])],
             [init("Wt", (4, 8)), init("We", (4, 3))])
    x = feeds(x=(2, 4))
    r = em.executed_macs(p, {**x, "c": np.array(True)})
    assert r["total"] == 64 and r["by_node"] == {"then_mm": 64}
    r = em.executed_macs(p, {**x, "c": np.array(False)})
    assert r["total"] == 24 and r["by_node"] == {"else_mm": 24}


def test_profile_file_goes_to_a_temp_dir_and_is_removed(tmp_path, monkeypatch):
    made = []
    real = tempfile.mkdtemp

    def spy(*a, **k):
        d = real(*a, **k)
        made.append(d)
        return d

    monkeypatch.setattr(em.tempfile, "mkdtemp", spy)
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    p = save(tmp_path, [helper.make_node("Relu", ["x"], ["y"], name="r")], [vi("x", [2])], [vi("y", [2])])
    r = em.executed_macs(p, feeds(x=(2,)))
    assert r["total"] == 0 and r["kernels"] == 1
    assert os.listdir(work) == []
    assert made and not any(os.path.exists(d) for d in made)


def test_does_not_import_lib():
    src = open(em.__file__).read()
    assert "import lib" not in src and "from lib" not in src


def test_random_feeds_symbolic(tmp_path):
    p = save(tmp_path, [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
             [vi("x", ["batch", 4])], [vi("y", ["batch", 3])], [init("w", (4, 3))])
    f = em.random_feeds(p, dim_values={"batch": 6})
    assert f["x"].shape == (6, 4)
    assert em.executed_macs(p, f)["total"] == 6 * 4 * 3


# ---- the wild-model builders: ORT-executed MACs equal the builders' hand arithmetic -------------
FAST_WILD = ["torchscript_cnn", "torchscript_swin", "lstm", "gru", "rnn", "if_value", "loop", "loop_input",
             "ir3", "constant_weights", "tiny4", "kv_decoder"]


@pytest.mark.parametrize("name", FAST_WILD)
def test_wild_builder_executed_equals_hand_arithmetic(tmp_path, name):
    from tests import wild_models as wm
    f = wm.BUILDERS[name](tmp_path / f"{name}.onnx")
    assert f["expected_macs"] is not None
    r = em.executed_macs(f["path"], dict(np.load(f["npz"])))
    assert r["unmatched"] == []
    assert r["total"] == f["expected_macs"]


def test_wild_if_value_other_rate_and_invalid_rate(tmp_path):
    from tests import wild_models as wm
    f = wm.build_if_value(tmp_path / "if_value.onnx")
    feeds = dict(np.load(f["npz"]))
    x8 = np.zeros((1, 256), np.float32)
    r = em.executed_macs(f["path"], {**feeds, "x": x8, "sr": np.array(8000, np.int64)})
    assert r["by_node"]["conv8k"] == 8 * 63 * 8 and "conv16k" not in r["by_node"]
    with pytest.raises(Exception):
        em.executed_macs(f["path"], {**feeds, "sr": np.array(44100, np.int64)})


def test_wild_kv_decoder_dims_are_expressions(tmp_path):
    from tests import wild_models as wm
    f = wm.build_kv_decoder(tmp_path / "kv.onnx")
    dims = {i["name"]: i["dims"] for i in f["inputs"]}
    assert dims["attention_mask"] == ["batch_size", "past_sequence_length + sequence_length"]
    assert dims["past_key_values.0.key"] == ["batch_size", 2, "past_sequence_length", 32]
    m = onnx.load(f["path"])
    out = {o.name: [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim] for o in m.graph.output}
    assert out["present.1.value"][2] == "past_sequence_length + sequence_length"


def test_onnx_attention_grouped_kv_and_past(tmp_path):
    """ONNX Attention (opset 23), as ONNX Runtime runs it: 4-D with 2 KV heads for 4 query heads, and 3-D with a past
    key and value (3 more positions): B x q heads x S x positions x (head size of K + of V), by hand; the pipeline's
    count (stage 02's formula) agrees."""
    from lib.onnx.graph import build_graph, load_model
    from lib.onnx.metrics import node_metrics
    p4 = save(tmp_path, [helper.make_node("Attention", ["q", "k", "v"], ["y"], name="a4")],
              [vi("q", [1, 4, 6, 8]), vi("k", [1, 2, 10, 8]), vi("v", [1, 2, 10, 5])], [vi("y", [1, 4, 6, 5])],
              opset=23, name="a4.onnx")
    r4 = em.executed_macs(p4, feeds(q=(1, 4, 6, 8), k=(1, 2, 10, 8), v=(1, 2, 10, 5)))
    assert r4["total"] == 4 * 6 * 10 * (8 + 5) == 3120 and r4["by_node"] == {"a4": 3120}
    p3 = save(tmp_path, [helper.make_node("Attention", ["q", "k", "v", "", "pk", "pv"], ["y", "ok", "ov"], name="a3",
                                          q_num_heads=4, kv_num_heads=2)],
              [vi("q", [1, 6, 32]), vi("k", [1, 10, 16]), vi("v", [1, 10, 10]), vi("pk", [1, 2, 3, 8]),
               vi("pv", [1, 2, 3, 5])], [vi("y", [1, 6, 20]), vi("ok", [1, 2, 13, 8]), vi("ov", [1, 2, 13, 5])],
              opset=23, name="a3.onnx")
    r3 = em.executed_macs(p3, feeds(q=(1, 6, 32), k=(1, 10, 16), v=(1, 10, 10), pk=(1, 2, 3, 8), pv=(1, 2, 3, 5)))
    assert r3["total"] == 4 * 6 * (10 + 3) * (8 + 5) == 4056
    for path, ref in ((p4, r4), (p3, r3)):
        assert int(node_metrics(build_graph(load_model(str(path))))["macs"].sum()) == ref["total"]
