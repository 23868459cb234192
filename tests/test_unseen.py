"""Models nobody here has seen (issue 29): partial input files, validation that is right about right splits,
random ops made deterministic for validation, every kernel ORT inserts attributed. Real exports, real ORT."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import helper

import unseen_models as um
from conftest import costs, run_stage
from lib.onnx.inputs import InputSpec, make_feeds
from lib.split.runner import compare

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def gru(tmp_path_factory):
    facts = um.build_gru_state(tmp_path_factory.mktemp("gru") / "gru.onnx")
    return facts["path"], facts["npz"]


def pipeline(model, rdir, boundaries=None, *spec):
    """02, 03, 07 and 08 (the given boundaries, else 08's own choice): 08's validation_report.json."""
    costs(model, rdir, *spec)
    assert run_stage("07_split_candidates.py", "--model", model, "--results", rdir).returncode == 0
    if callable(boundaries):
        boundaries = boundaries(pd.read_csv(rdir / "boundaries.csv"))
    r = run_stage("08_export_splits.py", "--model", model, "--results", rdir, "--diagram", "none", "--runs", "1",
                  *(["--boundary", *map(str, boundaries)] if boundaries else []))
    assert r.returncode == 0, r.stdout + r.stderr
    return {**json.loads((rdir / "validation_report.json").read_text()), "stdout": r.stdout}


def runner(folder, *args):
    return subprocess.run([sys.executable, "run_split.py", "--runs", "1", *map(str, args)], cwd=folder,
                          capture_output=True, text=True, timeout=300)


def test_gru_with_only_its_zero_state_given(gru, tmp_path):
    """The npz holds h0 only: h0 is fed as given (its batch 3 fixes x's symbolic batch), x is drawn; both metas
    say which came from where; 08's split validates and its runner draws the same x from the folder alone."""
    model, npz = gru
    rdir = tmp_path / "res"
    r = run_stage("01_profile_onnx.py", "--model", model, "--results", rdir, "--inputs-npz", npz, "--runs", "2")
    assert r.returncode == 0, r.stderr
    assert f"inputs: h0 from {npz}; x drawn at random (seed 0)" in r.stdout
    assert run_stage("02_shapes_flops_bytes.py", "--model", model, "--results", rdir, "--inputs-npz", npz).returncode == 0
    for meta in ("profile_meta.json", "metrics_meta.json"):
        inputs = json.loads((rdir / meta).read_text())["identity"]["inputs"]
        assert inputs["input_shapes"] == {"x": [128, 3, 8], "h0": [1, 3, 16]}
        assert (inputs["from_file"], inputs["drawn"]) == (["h0"], ["x"])
    assert run_stage("03_merge_profile_metrics.py", "--results", rdir).returncode == 0
    assert run_stage("07_split_candidates.py", "--model", model, "--results", rdir).returncode == 0
    r = run_stage("08_export_splits.py", "--model", model, "--results", rdir, "--boundary", "0", "--diagram", "none",
                  "--runs", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    split = rdir / "splits" / "b0"
    r = subprocess.run([sys.executable, "run_split.py", "--runs", "1", "--save-inputs-npz", str(tmp_path / "used.npz")],
                       cwd=split, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    used = np.load(tmp_path / "used.npz")
    assert not used["h0"].any() and used["x"].shape == (128, 3, 8)
    # the x stage 08 drew (02's and 08's make_feeds) is the x the runner drew
    feeds = make_feeds(onnx.load(str(model)), {"x": [128, 3, 8], "h0": [1, 3, 16]}, InputSpec(inputs_npz=str(npz)))
    assert np.array_equal(feeds["x"], used["x"]) and feeds["h0"] is not None
    assert "random ['x'] (seed 0)" in json.loads((split / "validation_report.json").read_text())["inputs"]
    np.savez(tmp_path / "stray.npz", h0=used["h0"], c0=used["h0"])          # the runner refuses a stray entry too
    r = subprocess.run([sys.executable, "run_split.py", "--inputs-npz", str(tmp_path / "stray.npz")], cwd=split,
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "['c0'], which name no input" in r.stderr, r.stderr


def inside_encoder(bd):
    """Boundaries inside the transformer encoder: after layer 0's first LayerNorm, after layer 1's Softmax."""
    pick = bd[bd["after_node"].str.endswith(("layers.0/norm1/LayerNormalization", "layers.1/self_attn/Softmax"))]
    assert len(pick) == 2
    return list(pick["boundary"])


def test_conv_transformer_split_inside_its_encoder_passes_and_broken_splits_fail(tmp_path):
    """Right splits pass the exactness check (optimizations off) and report the deployment difference as figures;
    a split broken on purpose (a cut tensor fed from the wrong place, a missing output) fails."""
    model = um.build_conv_transformer(tmp_path / "ct.onnx")["path"]
    rep = pipeline(model, tmp_path / "r", inside_encoder)
    assert rep["all_pass"] and len(rep["splits"]) == 2
    for s in rep["splits"]:
        ex, dep = s["exactness"], s["deployment"]
        assert ex["graph_optimizations"].startswith("off") and ex["reduction_size"] == 288     # Conv 32 x 3 x 3
        out = ex["outputs"]["logits"]
        assert out["pass"] and out["max_abs_diff"] <= out["bound"] and out["scale"] > 0.1
        assert out["bound"] == pytest.approx(2 * 288 ** 0.5 * 2.0 ** -23 * out["scale"])      # ~4e-6 of the scale
        assert dep["max_abs_diff"] >= 0 and "pass" not in dep["outputs"]["logits"]
        assert all(c["pass"] for c in s["cut_tensors"].values())
    # wrong place: part1 sends the LayerNorm's input where its output belongs
    b = min(s["boundary"] for s in rep["splits"])
    folder = tmp_path / "r" / "splits" / f"b{b}"
    assert runner(folder).returncode == 0
    p1 = onnx.load(str(folder / "part1.onnx"))
    (cut,) = [o.name for o in p1.graph.output]
    norm = next(n for n in p1.graph.node if cut in n.output)
    norm.output[list(norm.output).index(cut)] = cut + "_unused"
    p1.graph.node.append(helper.make_node("Identity", [norm.input[0]], [cut], name="wrong_feed"))
    onnx.save(p1, str(folder / "part1.onnx"))
    r = runner(folder)
    got = json.loads((folder / "validation_report.json").read_text())
    assert r.returncode == 1 and "FAIL" in r.stdout and not got["pass"]
    assert got["exactness"]["outputs"]["logits"]["rel_to_scale"] > 1e-2


def test_missing_output_fails(gru, tmp_path):
    """part1 no longer returns the graph output h it finishes: the composition lacks it, the split fails."""
    model, npz = gru
    rep = pipeline(model, tmp_path / "r", [0], "--inputs-npz", npz)
    assert rep["all_pass"]
    folder = tmp_path / "r" / "splits" / "b0"
    p1 = onnx.load(str(folder / "part1.onnx"))
    keep = [o for o in p1.graph.output if o.name != "h"]
    del p1.graph.output[:]
    p1.graph.output.extend(keep)
    onnx.save(p1, str(folder / "part1.onnx"))
    r = runner(folder)
    got = json.loads((folder / "validation_report.json").read_text())
    assert r.returncode == 1 and not got["exactness"]["outputs"]["h"]["pass"]
    assert "do not produce" in got["exactness"]["outputs"]["h"]["error"]


def test_fp16_model_split_passes(tmp_path):
    """fp16 inside, fp32 IO: the parts exchange fp16 cut tensors; the bound allows 1 ulp of fp16 of the output's
    scale, no more."""
    model = um.build_fp16_cnn(tmp_path / "fp16.onnx")["path"]
    rep = pipeline(model, tmp_path / "r")
    assert rep["splits"] and rep["all_pass"]
    for s in rep["splits"]:
        out = s["exactness"]["outputs"]["y"]
        assert out["dtype"] == "float32" and out["max_abs_diff"] <= out["bound"] <= 2.0 ** -10 * out["scale"] * 1.0001


def _fp16_cut_model(path, kind):
    """'cast_log': exp(x - 14) (fp32) cast to fp16, subnormal there (5-30% rounding steps), then Log in fp16, fp32
    out. 'add_sub': x + 1000 - 1000 in fp16 (fp16 IO; an fp16 ulp at 1000 is 0.5). Cut: the fp16 tensor h."""
    from onnx import TensorProto as T
    f16 = kind == "add_sub"
    c = onnx.numpy_helper.from_array(np.array(1000 if f16 else 14, np.float16 if f16 else np.float32), "c")
    if f16:
        nodes = [helper.make_node("Add", ["x", "c"], ["h"], name="add"), helper.make_node("Sub", ["h", "c"], ["y"], name="sub")]
    else:
        nodes = [helper.make_node("Sub", ["x", "c"], ["s"], name="sub"), helper.make_node("Exp", ["s"], ["e"], name="exp"),
                 helper.make_node("Cast", ["e"], ["h"], to=T.FLOAT16, name="to_fp16"),
                 helper.make_node("Log", ["h"], ["l"], name="log"), helper.make_node("Cast", ["l"], ["y"], to=T.FLOAT, name="to_fp32")]
    io = T.FLOAT16 if f16 else T.FLOAT
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", io, [1, 64])],
                              [helper.make_tensor_value_info("y", io, [1, 64])], [c])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), str(path))
    return nodes[0 if f16 else 2].name


@pytest.mark.parametrize("kind", ["cast_log", "add_sub"])
def test_a_cut_tensor_the_whole_model_never_rounds_to_fp16_is_compared_as_declared(tmp_path, kind):
    """ONNX Runtime runs these fp16 ops in fp32 and drops the Cast pair between them, even with optimizations off:
    the whole model returns x - 14 (x), while the parts must exchange the fp16 value the model declares, 2-8% of the
    output's scale apart (the fp16 bound is 1e-3). The exactness check's reference, full_exact.onnx, passes the cut
    tensor through an Identity whose output it also returns (else ORT runs a lone fp16 Identity between two such
    ops in fp32 too: add_sub, as a BERT in .half()); the rounding stays, the split passes, identical, and the
    deployment difference (full.onnx) shows the gap. Before, both splits failed: false alarms."""
    model = tmp_path / "m.onnx"
    after = _fp16_cut_model(model, kind)
    rdir = tmp_path / "r"
    rep = pipeline(model, rdir, lambda bd: list(bd.loc[bd["after_node"] == after, "boundary"]))
    (s,) = rep["splits"]
    assert rep["all_pass"] and s["exactness"]["outputs"]["y"]["max_abs_diff"] == 0.0
    assert s["deployment"]["max_rel_to_scale"] > 1e-2       # what the whole model's skipped rounding moves
    folder = rdir / "splits" / f"b{s['boundary']}"
    exact = onnx.load(str(folder / "full_exact.onnx"))
    assert [(n.op_type, list(n.input), list(n.output)) for n in exact.graph.node if n.op_type == "Identity"] == \
        [("Identity", ["h__before_cut"], ["h"])] and [o.name for o in exact.graph.output] == ["y", "h"]
    assert (folder / "full.onnx").samefile(model)       # the model itself, for the deployment difference and timing
    assert runner(folder).returncode == 0
    inf = np.array([-np.inf, 1.0], np.float32)        # the same infinity on both sides is no difference
    assert compare(inf, inf.copy(), 1e-6)["pass"] and not compare(inf, np.array([np.inf, 1.0], np.float32), 1e-6)["pass"]
    ids = np.array([2**60 + 1, 7], np.int64)            # integers compare exactly (as float64 these two were equal)
    assert compare(ids, ids.copy(), 0.0)["pass"] and not compare(ids, np.array([2**60, 7], np.int64), 0.0)["pass"]


@pytest.mark.parametrize("dynamo", [False, True])
def test_randn_like_model_splits_compose_exactly(tmp_path, dynamo):
    """torch.randn_like -> RandomNormalLike without a seed: 01 says the model draws random numbers; 08 gives the
    node a seed in full.onnx and in the part that holds it, so that both draw the same noise."""
    build = um.build_randn_like_dynamo if dynamo else um.build_randn_like_ts
    model = build(tmp_path / "rnd.onnx")["path"]
    rdir = tmp_path / "r"
    r = run_stage("01_profile_onnx.py", "--model", model, "--results", rdir, "--runs", "1", "--warmup", "0")
    assert r.returncode == 0 and "the model draws random numbers (1 random nodes" in r.stdout, r.stderr
    assert len(json.loads((rdir / "profile_meta.json").read_text())["random_nodes"]) == 1
    rand = lambda bd: list(bd.loc[bd["after_node"].str.contains("Relu|relu"), "boundary"][:1])   # noqa: E731
    rep = pipeline(model, rdir, rand)
    assert rep["all_pass"] and rep["worst_max_abs_diff"] == 0.0
    assert "get a fixed seed in full.onnx and the parts" in rep["stdout"]    # said: a deployed part repeats its draws
    folder = rdir / "splits" / f"b{rep['splits'][0]['boundary']}"
    seeds = {}
    for name in ("full", "part2"):
        m = onnx.load(str(folder / f"{name}.onnx"), load_external_data=False)
        (node,) = [n for n in m.graph.node if n.op_type == "RandomNormalLike"]
        seeds[name] = next(a.f for a in node.attribute if a.name == "seed")
    assert seeds["full"] == seeds["part2"]
    user = onnx.load(str(model), load_external_data=False)                 # the user's file is untouched
    assert all(a.name != "seed" for n in user.graph.node for a in n.attribute)
    assert runner(folder).returncode == 0


@pytest.mark.parametrize("low", ["bfloat16", "float8e4m3fn", "int4"])
def test_a_cut_tensor_of_a_type_numpy_lacks_is_exchanged_and_compared(tmp_path, low):
    """An fp32 MLP rounding its activations to bfloat16 (Cast pairs), or quantizing them to float8 or int4 (a
    QuantizeLinear -> DequantizeLinear pair, opset 21): numpy has none of these types, and ONNX Runtime's run cannot
    return them (a float8 one comes back as uint8 bits): every split cut there failed ("No corresponding Numpy
    type"; the next part refused uint8), though the parts composed exactly. The parts exchange it through OrtValues;
    the composition is exact, the cut tensor compared by its values; run_split.py too."""
    T = onnx.TensorProto
    rng = np.random.default_rng(0)
    to, back = {"bfloat16": (helper.make_node("Cast", ["a"], ["a16"], to=T.BFLOAT16, name="to_low"),
                             helper.make_node("Cast", ["a16"], ["a32"], to=T.FLOAT, name="back")),
                "float8e4m3fn": (helper.make_node("QuantizeLinear", ["a", "s", "z8"], ["a16"], name="to_low"),
                                 helper.make_node("DequantizeLinear", ["a16", "s", "z8"], ["a32"], name="back")),
                "int4": (helper.make_node("QuantizeLinear", ["a", "s", "z4"], ["a16"], name="to_low"),
                         helper.make_node("DequantizeLinear", ["a16", "s", "z4"], ["a32"], name="back"))}[low]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"], name="mm1"), to, back,
             helper.make_node("Relu", ["a32"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="mm2")]
    inits = [onnx.numpy_helper.from_array(rng.standard_normal(sh).astype(np.float32), n)
             for n, sh in (("w1", (32, 64)), ("w2", (64, 8)))] + \
        [onnx.numpy_helper.from_array(np.array(0.5, np.float32), "s"),
         helper.make_tensor("z8", T.FLOAT8E4M3FN, [], [0.0]), helper.make_tensor("z4", T.INT4, [], [0])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", T.FLOAT, [8, 32])],
                              [helper.make_tensor_value_info("y", T.FLOAT, [8, 8])], inits)
    model = tmp_path / "low.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10), str(model))
    rdir = tmp_path / "r"
    rep = pipeline(model, rdir, lambda bd: list(bd.loc[bd["after_node"] == "to_low", "boundary"]))
    (s,) = rep["splits"]
    assert rep["all_pass"] and s["exactness"]["outputs"]["y"]["max_abs_diff"] == 0.0, s
    (cut,) = s["cut_tensors"].values()
    assert cut["pass"] and cut["max_abs_diff"] == 0.0 and cut["max_abs_value"] > 0
    assert runner(rdir / "splits" / f"b{s['boundary']}").returncode == 0


def test_dropout_in_training_mode_is_random_and_its_splits_compose_exactly(tmp_path):
    """Dropout with training_mode true draws a new mask at each run: 01 says so, 08 seeds it (an integer seed) in
    full.onnx and in the part that holds it. Unseeded, every split of this model failed its exactness check
    (max|diff| 1.7) and make all failed."""
    model = um.build_dropout_train(tmp_path / "drop.onnx")["path"]
    rdir = tmp_path / "r"
    r = run_stage("01_profile_onnx.py", "--model", model, "--results", rdir, "--runs", "1", "--warmup", "0")
    assert r.returncode == 0 and "the model draws random numbers (2 random nodes" in r.stdout, r.stderr
    rep = pipeline(model, rdir, lambda bd: list(bd["boundary"][:2]))
    assert rep["all_pass"] and rep["worst_max_abs_diff"] == 0.0 and len(rep["splits"]) == 2
    full = onnx.load(str(rdir / "splits" / f"b{rep['splits'][0]['boundary']}" / "full.onnx"), load_external_data=False)
    seeds = [a.i for n in full.graph.node if n.op_type == "Dropout" for a in n.attribute if a.name == "seed"]
    assert len(seeds) == 2 and len(set(seeds)) == 2
    # a Dropout whose training_mode is a constant false draws nothing and is left alone
    from lib.onnx.random_ops import random_nodes
    m = onnx.load(str(model))
    for t in m.graph.initializer:
        if t.data_type == onnx.TensorProto.BOOL:
            t.CopyFrom(onnx.numpy_helper.from_array(np.array(False), t.name))
    for n in m.graph.node:
        if n.op_type == "Constant" and n.attribute[0].t.data_type == onnx.TensorProto.BOOL:
            n.attribute[0].t.CopyFrom(onnx.numpy_helper.from_array(np.array(False)))
    assert random_nodes(m.graph) == []


def tf2onnx_like_pitch(path):
    """A tf2onnx-style 1-D conv net (NHWC: every Conv and MaxPool between Transposes), as pitch models are
    exported: ORT runs it in NCHWc with a ReorderOutput it inserts."""
    rng = np.random.default_rng(0)
    w = lambda n, s: onnx.numpy_helper.from_array((rng.standard_normal(s) * 0.1).astype(np.float32), n)  # noqa: E731
    i64 = lambda n, v: onnx.numpy_helper.from_array(np.array(v, np.int64), n)  # noqa: E731
    nodes, inits, x, c = [helper.make_node("Reshape", ["audio", "s0"], ["x0"], name="reshape_in")], \
        [i64("s0", [1, 1024, 1, 1]), i64("s1", [1, -1]), w("fw", (32 * 128, 360))], "x0", 1
    for i, co in enumerate([16, 16, 32]):
        nodes += [helper.make_node("Transpose", [x], [f"t{i}"], name=f"conv{i}__pre", perm=[0, 3, 1, 2]),
                  helper.make_node("Conv", [f"t{i}", f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}", pads=[2, 0, 2, 0],
                                   kernel_shape=[5, 1]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}"),
                  helper.make_node("Transpose", [f"r{i}"], [f"y{i}"], name=f"conv{i}__post", perm=[0, 2, 3, 1]),
                  helper.make_node("Transpose", [f"y{i}"], [f"p{i}"], name=f"pool{i}__pre", perm=[0, 3, 1, 2]),
                  helper.make_node("MaxPool", [f"p{i}"], [f"m{i}"], name=f"pool{i}", kernel_shape=[2, 1], strides=[2, 1]),
                  helper.make_node("Transpose", [f"m{i}"], [f"q{i}"], name=f"pool{i}__post", perm=[0, 2, 3, 1])]
        inits += [w(f"w{i}", (co, c, 5, 1)), w(f"b{i}", (co,))]
        x, c = f"q{i}", co
    nodes += [helper.make_node("Transpose", [x], ["tt"], name="flat__pre", perm=[0, 3, 1, 2]),
              helper.make_node("Reshape", ["tt", "s1"], ["flat"], name="flatten"),
              helper.make_node("MatMul", ["flat", "fw"], ["logits"], name="dense"),
              helper.make_node("Sigmoid", ["logits"], ["y"], name="sigmoid")]
    g = helper.make_graph(nodes, "pitch", [helper.make_tensor_value_info("audio", onnx.TensorProto.FLOAT, [1, 1024])],
                          [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 360])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="tf2onnx-like")
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def test_kernels_ort_inserts_are_attributed_and_flagged(tmp_path):
    """Real ORT run: >= 99% of kernel time on original nodes; the layout reorders ORT inserted (NCHWc on x86)
    are flagged in `inserted` on the node whose tensor they serve (ReorderOutput writes pool2's m2)."""
    model = tf2onnx_like_pitch(tmp_path / "pitch.onnx")
    rdir = tmp_path / "r"
    r = run_stage("01_profile_onnx.py", "--model", model, "--results", rdir, "--runs", "2", "--warmup", "1")
    assert r.returncode == 0, r.stderr
    assert json.loads((rdir / "profile_meta.json").read_text())["kernel_time_coverage"] >= 0.99
    lat = pd.read_csv(rdir / "ops_latency.csv", keep_default_na=False).set_index("node")
    kernels = {k for ks in lat["ort_kernels"] for k in ks.split(";") if k}
    flagged = {k for ks in lat["inserted"] for k in ks.split(";") if k}
    assert {k for k in kernels if k.startswith("Reorder")} <= flagged <= kernels
    if "ReorderOutput" in kernels:
        assert lat.loc["pool2", "inserted"] == "ReorderOutput"


def test_rewritten_and_unlisted_kernels_go_to_the_node_they_serve():
    """ORT's optimized graph as its transpose optimizer leaves it: a Transpose turned into Reshape_token_3, a
    FusedConv of the renamed Conv+Relu, Reshape_token_7 writing the original y0, and a kernel the saved graph
    does not hold (it ran between Reshape_token_7 and mul)."""
    from lib.latency.profiling import attribute
    from lib.onnx.loading import graph_of
    rng = np.random.default_rng(0)
    w = onnx.numpy_helper.from_array(rng.standard_normal((1, 1, 5, 1)).astype(np.float32), "w")
    b = onnx.numpy_helper.from_array(np.zeros(1, np.float32), "b")
    orig = [helper.make_node("Transpose", ["x"], ["t"], name="pre", perm=[0, 3, 1, 2]),
            helper.make_node("Conv", ["t", "w", "b"], ["c"], name="conv", pads=[2, 0, 2, 0]),
            helper.make_node("Relu", ["c"], ["r"], name="relu"),
            helper.make_node("Transpose", ["r"], ["y0"], name="post", perm=[0, 2, 3, 1]),
            helper.make_node("Mul", ["y0", "x"], ["y"], name="mul")]
    vi = lambda n: helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, [1, 64, 1, 1])  # noqa: E731
    model = helper.make_model(helper.make_graph(orig, "g", [vi("x")], [vi("y")], [w, b]),
                              opset_imports=[helper.make_opsetid("", 17)])
    g = graph_of(model)
    opt = [helper.make_node("Reshape", ["x", "shape_nchw"], ["TransposeOptimizer_0"], name="Reshape_token_3"),
           helper.make_node("FusedConv", ["TransposeOptimizer_0", "w", "b"], ["conv_token_6"], name="fused_token_5",
                            domain="com.microsoft"),
           helper.make_node("Reshape", ["conv_token_6", "shape_nhwc"], ["y0"], name="Reshape_token_7"),
           helper.make_node("Mul", ["y0", "x"], ["y"], name="mul")]
    optimized = helper.make_model(helper.make_graph(opt, "o", [vi("x")], [vi("y")]))
    order = ["Reshape_token_3", "fused_token_5", "Reshape_token_7", "MemcpyToHost_9", "mul"]
    att = attribute(g, optimized, sorted(order), order)
    pos = {n: i for i, n in enumerate(g.names)}
    assert att["anchor"] == {"Reshape_token_3": pos["pre"], "fused_token_5": pos["conv"], "Reshape_token_7": pos["post"],
                             "MemcpyToHost_9": pos["mul"], "mul": pos["mul"]}
    assert att["inserted"] == {"Reshape_token_3", "fused_token_5", "Reshape_token_7", "MemcpyToHost_9"}
    assert att["fused_into"].get(pos["relu"]) == pos["conv"]          # Relu: the FusedConv's epilogue
