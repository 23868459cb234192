"""Classical ML (ai.onnx.ml) and random ops: hand-computed costs on tiny hand-built models that ONNX Runtime runs
(their output shapes checked against ORT's), models with no default-domain opset (IR 3), non-tensor outputs
(ZipMap's sequence of maps) through the split validation, the advice for a model too small to split, and bad
random-op dtypes refused in one line."""
import json

import numpy as np
import onnx
import onnxruntime as ort
import pandas as pd
import pytest
from onnx import TensorProto, helper, numpy_helper

from conftest import costs, run_stage
from lib.onnx.loading import graph_of
from lib.errors import StageError
from lib.onnx.metrics import node_metrics
from lib.split.partition_export import check_chain
from lib.split.runner import as_array, compare, rel_bound
from tests import classic_models as cm

F, I64 = TensorProto.FLOAT, TensorProto.INT64
ML = "ai.onnx.ml"


def model(nodes, inputs, outputs, ml=3, default=17, ir=8):
    opsets = ([helper.make_opsetid("", default)] if default else []) + [helper.make_opsetid(ML, ml)]
    m = helper.make_model(helper.make_graph(nodes, "tiny", inputs, outputs), opset_imports=opsets)
    m.ir_version = ir
    return m


def costed(m, feeds):
    """ops_metrics rows by node, after checking that ONNX Runtime runs the model and that every output shape
    02 reports is the one ORT produced."""
    outs = ort.InferenceSession(m.SerializeToString()).run(None, feeds)
    df = node_metrics(graph_of(m)).set_index("node")
    produced = {o.name: v for o, v in zip(m.graph.output, outs)}
    for n in m.graph.node:
        for o in n.output:
            if o in produced and isinstance(produced[o], np.ndarray):
                shapes = df.loc[n.name, "out_shapes"].split(";")
                assert "x".join(map(str, produced[o].shape)) in shapes, (n.name, shapes, produced[o].shape)
    assert df["cost_known"].all(), df[~df["cost_known"]]
    return df


def vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


X2 = {"X": np.array([[1, -2, 3], [-1, 2, -3]], np.float32)}


# ---------------------------------------------------------------- tree ensembles

def _tables(side):
    """Tree 0: root (x0 <= 0) -> leaf 2 | node 1 (x1 <= 0) -> leaves 3, 4 (depth 2); tree 1: root (x2 <= 0) ->
    leaves 1, 2 (depth 1). A tree-0 leaf adds 3 weights (one per score), a tree-1 leaf one."""
    tree = dict(nodes_treeids=[0] * 5 + [1] * 3, nodes_nodeids=[0, 1, 2, 3, 4, 0, 1, 2],
                nodes_featureids=[0, 1, 0, 0, 0, 2, 0, 0], nodes_values=[0.0] * 8,
                nodes_modes=["BRANCH_LEQ", "BRANCH_LEQ", "LEAF", "LEAF", "LEAF", "BRANCH_LEQ", "LEAF", "LEAF"],
                nodes_truenodeids=[1, 3, 0, 0, 0, 1, 0, 0], nodes_falsenodeids=[2, 4, 0, 0, 0, 2, 0, 0])
    leaves = [(0, 2), (0, 3), (0, 4)]
    w_tree = [t for t, _ in leaves for _ in range(3)] + [1, 1]
    w_node = [n for _, n in leaves for _ in range(3)] + [1, 2]
    w_id = [0, 1, 2] * 3 + [0, 1]
    return {**tree, f"{side}_treeids": w_tree, f"{side}_nodeids": w_node, f"{side}_ids": w_id,
            f"{side}_weights": [0.1 * k for k in range(len(w_id))]}


def test_tree_ensemble_classifier_and_regressor():
    clf = helper.make_node("TreeEnsembleClassifier", ["X"], ["label", "probs"], name="clf", domain=ML,
                           classlabels_int64s=[0, 1, 2], post_transform="SOFTMAX", **_tables("class"))
    reg = helper.make_node("TreeEnsembleRegressor", ["X"], ["y"], name="reg", domain=ML, n_targets=3,
                           **_tables("target"))
    df = costed(model([clf, reg], [vi("X", [2, 3])], [vi("label", [2], I64), vi("probs", [2, 3]), vi("y", [2, 3])]), X2)
    # per sample: branch nodes on the longest paths 2 + 1, leaf weights 3 + 1; the classifier's softmax 5 x 3
    assert df.loc["clf", "flops"] == 2 * (3 + 4 + 15) and df.loc["reg", "flops"] == 2 * (3 + 4)
    assert df.loc["clf", "macs"] == 0 and df.loc["clf", "op_class"] == "reduce"
    # the tables as weight bytes: 5 int arrays of 8 entries, 8 floats, 8 mode strings; 11 leaf weights (3 int
    # arrays, 1 float array); the classifier's 3 labels (int64); single-valued attributes are not tables
    modes = sum(len(m) for m in _tables("class")["nodes_modes"])
    tables = 5 * 8 * 8 + 8 * 4 + modes + 3 * 11 * 8 + 11 * 4
    assert df.loc["reg", "weight_bytes"] == tables
    assert df.loc["clf", "weight_bytes"] == tables + 3 * 8
    assert df.loc["clf", "act_out_bytes"] == 2 * 8 + 2 * 3 * 4


def test_tree_ensemble_v5():
    """ai.onnx.ml 5: rows are branch nodes, leaves their own arrays. Tree 0: root -> leaf 0 | node 1 -> leaves
    1, 2 (depth 2); tree 1: node 2 -> leaves 3, 4 (depth 1); one weight per leaf."""
    te = helper.make_node("TreeEnsemble", ["X"], ["Y"], name="te", domain=ML, nodes_featureids=[0, 1, 2],
                          nodes_splits=numpy_helper.from_array(np.zeros(3, np.float32)),
                          nodes_modes=numpy_helper.from_array(np.zeros(3, np.uint8)),
                          nodes_truenodeids=[0, 1, 3], nodes_trueleafs=[1, 1, 1], nodes_falsenodeids=[1, 2, 4],
                          nodes_falseleafs=[0, 1, 1], tree_roots=[0, 2], leaf_targetids=[0] * 5,
                          leaf_weights=numpy_helper.from_array(np.arange(1, 6, dtype=np.float32)), n_targets=1,
                          aggregate_function=1, post_transform=0)
    df = costed(model([te], [vi("X", [2, 3])], [vi("Y", [2, 1])], ml=5, default=21, ir=10), X2)
    assert df.loc["te", "flops"] == 2 * (2 + 1 + 2)
    assert df.loc["te", "weight_bytes"] == 3 * 8 + 3 * 4 + 3 + 4 * 3 * 8 + 2 * 8 + 5 * 8 + 5 * 4


# ---------------------------------------------------------------- linear models, SVMs

def test_linear_and_svm():
    nodes = [helper.make_node("LinearRegressor", ["X"], ["lin"], name="lin", domain=ML, coefficients=[1.0, 2.0, 3.0],
                              intercepts=[0.5]),
             helper.make_node("LinearClassifier", ["X"], ["lc_label", "lc_scores"], name="lc", domain=ML,
                              coefficients=[0.1] * 6, intercepts=[0.0, 1.0], classlabels_ints=[0, 1],
                              post_transform="LOGISTIC"),
             helper.make_node("SVMRegressor", ["X"], ["svr"], name="svr", domain=ML, kernel_type="LINEAR", kernel_params=[0.0] * 3,
                              support_vectors=[1.0, 0.0, 0.0, 0.0, 1.0, 0.0], coefficients=[0.5, -0.5], n_supports=2,
                              rho=[0.1]),
             helper.make_node("SVMClassifier", ["X"], ["svc_label", "svc_scores"], name="svc", domain=ML,
                              kernel_type="RBF", kernel_params=[0.5, 0.0, 3.0], classlabels_ints=[0, 1],
                              vectors_per_class=[1, 1], support_vectors=[1.0, 0.0, 0.0, 0.0, 1.0, 0.0],
                              coefficients=[1.0, -1.0], rho=[0.0])]
    outs = [vi("lin", [2, 1]), vi("lc_label", [2], I64), vi("lc_scores", [2, 2]), vi("svr", [2, 1]),
            vi("svc_label", [2], I64), vi("svc_scores", [2, 2])]
    df = costed(model(nodes, [vi("X", [2, 3])], outs, ml=1), X2)
    assert df.loc["lin", "flops"] == 2 * 2 * 3                      # N x 2 x coefficients
    assert df.loc["lc", "flops"] == 2 * (2 * 6 + 2 + 4 * 2)        # + argmax over 2 scores + logistic on each
    assert df.loc["svr", "flops"] == 2 * (2 * (2 * 3) + 2 * 2)     # 2 linear kernels of 3 features, 2 coefficients
    assert df.loc["svc", "flops"] == 2 * (2 * (3 * 3 + 4) + 2 * 2 + 1)   # 2 RBF kernels, 2 coefficients, 1 vote
    assert (df["macs"] == 0).all() and df.loc["lin", "op_class"] == "gemm"
    assert df.loc["lin", "weight_bytes"] == 4 * 4                  # 3 coefficients + 1 intercept, floats


# ---------------------------------------------------------------- per-element and lookup ops

def test_preprocessing_ops():
    nodes = [helper.make_node("Scaler", ["X"], ["s"], name="scaler", domain=ML, offset=[1.0] * 3, scale=[2.0] * 3),
             helper.make_node("Normalizer", ["s"], ["n"], name="norm", domain=ML, norm="L2"),
             helper.make_node("Binarizer", ["n"], ["b"], name="bin", domain=ML, threshold=0.0),
             helper.make_node("Imputer", ["X"], ["imp"], name="imp", domain=ML, imputed_value_floats=[0.0],
                              replaced_value_float=1.0),
             helper.make_node("ArrayFeatureExtractor", ["X", "idx"], ["afe"], name="afe", domain=ML),
             helper.make_node("LabelEncoder", ["ids"], ["le"], name="le", domain=ML, keys_int64s=[1, 2],
                              values_int64s=[10, 20], default_int64=-1),
             helper.make_node("OneHotEncoder", ["ids"], ["oh"], name="oh", domain=ML, cats_int64s=[1, 2, 3], zeros=1),
             helper.make_node("CategoryMapper", ["ids"], ["cm"], name="cm", domain=ML, cats_int64s=[1, 2],
                              cats_strings=["a", "b"], default_string="?"),
             helper.make_node("ZipMap", ["n"], ["zm"], name="zm", domain=ML, classlabels_int64s=[0, 1, 2])]
    seq = helper.make_sequence_type_proto(helper.make_map_type_proto(I64, helper.make_tensor_type_proto(F, [])))
    outs = [vi("b", [2, 3]), vi("imp", [2, 3]), vi("afe", [2, 1]), vi("le", [4], I64), vi("oh", [4, 3]),
            vi("cm", [4], TensorProto.STRING), helper.make_value_info("zm", seq)]
    m = model(nodes, [vi("X", [2, 3]), vi("idx", [1], I64), vi("ids", [4], I64)], outs)
    df = costed(m, {**X2, "idx": np.array([1]), "ids": np.array([1, 2, 3, 1])})
    assert df.loc[["scaler", "norm", "bin", "imp"], "flops"].tolist() == [2 * 6, 3 * 6, 6, 6]
    assert df.loc["norm", "op_class"] == "norm" and df.loc["scaler", "weight_bytes"] == 6 * 4
    assert (df.loc[["afe", "le", "oh", "cm", "zm"], "flops"] == 0).all()
    assert df.loc["zm", "act_out_bytes"] == 2 * 3 * (8 + 4)        # 2 maps of 3 (int64 key, float value) entries
    assert df.loc["cm", "weight_bytes"] == 2 * 8 + 2     # the map: 2 int64 keys, 2 one-byte strings


# ---------------------------------------------------------------- random ops

def test_random_ops_cost_elements_generated():
    nodes = [helper.make_node("RandomNormal", [], ["rn"], name="rn", shape=[2, 3], seed=1.0),
             helper.make_node("RandomUniformLike", ["X"], ["ru"], name="ru", seed=2.0),
             helper.make_node("RandomNormalLike", ["X"], ["rnl"], name="rnl", dtype=TensorProto.DOUBLE, seed=3.0),
             helper.make_node("Bernoulli", ["p"], ["be"], name="be", seed=4.0),
             helper.make_node("Multinomial", ["logits"], ["mu"], name="mu", sample_size=3, seed=5.0)]
    outs = [vi("rn", [2, 3]), vi("ru", [2, 3]), vi("rnl", [2, 3], TensorProto.DOUBLE), vi("be", [2, 3]),
            vi("mu", [2, 3], TensorProto.INT32)]
    m = model(nodes, [vi("X", [2, 3]), vi("p", [2, 3]), vi("logits", [2, 5])], outs)
    df = costed(m, {**X2, "p": np.full((2, 3), 0.5, np.float32), "logits": np.zeros((2, 5), np.float32)})
    assert df.loc[["rn", "ru", "rnl", "be"], "flops"].tolist() == [6, 6, 6, 6]
    assert df.loc["mu", "flops"] == 2 * (5 + 3)                    # the distribution of 5 classes, 3 draws, per row
    assert df.loc[["rn", "rnl", "mu"], "act_out_bytes"].tolist() == [6 * 4, 6 * 8, 6 * 4]
    # the *Like ops read their input's shape alone (its 24 bytes were counted read); Bernoulli reads p's values
    assert df.loc[["ru", "rnl", "be"], "act_in_bytes"].tolist() == [0, 0, 6 * 4]


@pytest.mark.parametrize("op,dtype,said", [("RandomNormal", TensorProto.INT64, "dtype = 7 (int64)"),
                                           ("RandomUniform", 99, "dtype = 99 (no element type)"),
                                           ("Multinomial", F, "dtype = 1 (float)")])
def test_random_op_with_an_invalid_dtype_is_refused(tmp_path, op, dtype, said):
    ins = ["logits"] if op == "Multinomial" else []
    attrs = {} if ins else {"shape": [2, 3]}
    n = helper.make_node(op, ins, ["y"], name="r", dtype=dtype, **attrs)
    m = model([n], [vi("logits", [2, 5])] if ins else [], [vi("y", [2, 3] if not ins else [2, 1])], ml=1)
    onnx.save(m, str(tmp_path / "r.onnx"))
    r = run_stage("02_shapes_flops_bytes.py", "--model", tmp_path / "r.onnx", "--results", tmp_path / "out")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0] and f"node r ({op})" in lines[0], r.stderr
    assert not (tmp_path / "out" / "ops_metrics.csv").exists()


# ---------------------------------------------------------------- outputs that are not tensors

def test_as_array_turns_sequences_and_maps_into_arrays():
    maps = [{2: 0.5, 0: 0.1, 1: 0.4}, {0: 1.0, 1: 0.0, 2: 0.0}]
    assert as_array(maps).tolist() == [[0.1, 0.4, 0.5], [1.0, 0.0, 0.0]]
    assert as_array({"b": 2.0, "a": 1.0}).tolist() == [1.0, 2.0]
    assert as_array([np.ones(2), np.zeros(3)]).tolist() == [1, 1, 0, 0, 0]
    a, b = as_array(np.array(["cat", "dog"])), as_array(np.array(["cat", "cow"]))
    assert a[0] == b[0] and a[1] != b[1]
    # another label fails, however close its checksum: 'axzhlz' and 'qkoajn' differ by 16 of a scale of ~4e9,
    # which passed 1 fp32 ulp of the scale (the bound where the cut tensors are fp32) as float checksums
    same, other = as_array(np.array(["qkoajn"])), as_array(np.array(["axzhlz"]))
    fp32 = [float(np.finfo(np.float32).eps)]                                               # fp32 cut tensors
    assert compare(same, same.copy(), rel_bound(same.dtype, fp32, 1))["pass"]
    assert not compare(other, same, rel_bound(same.dtype, fp32, 1))["pass"]


def test_maps_with_other_keys_differ():
    """ZipMap's class labels are the keys: maps with the same probabilities under other labels passed (as_array
    keeps the values only)."""
    from lib.split.runner import compare_output
    full = [{"bird": 0.1, "cat": 0.9}, {"bird": 0.7, "cat": 0.3}]
    assert compare_output([dict(m) for m in full], full, [], 1)["pass"]
    bad = compare_output([{"b": 0.1, "c": 0.9}, {"b": 0.7, "c": 0.3}], full, [], 1)
    assert not bad["pass"] and "map keys differ" in bad["error"]
    assert compare_output(None, full, [], 1)["error"] == "the composed parts do not produce this output"


# ---------------------------------------------------------------- the pipeline end to end

def test_ir3_model_without_a_default_opset(tmp_path):
    """IR 3 importing only ai.onnx.ml: refused before ("declares no opset for the default ONNX domain")."""
    f = cm.build_ir3_logreg(tmp_path / "ir3.onnx")
    m = onnx.load(f["path"])
    assert m.ir_version == 3 and [o.domain for o in m.opset_import] == [ML]
    r = run_stage("02_shapes_flops_bytes.py", "--model", f["path"], "--results", tmp_path / "r")
    assert r.returncode == 0, r.stderr
    meta = json.loads((tmp_path / "r" / "metrics_meta.json").read_text())
    assert meta["unknown_cost_nodes"] == 0 and meta["unknown_size_nodes"] == 0
    # 4 features x 3 classes: 2 x 12 multiply-adds, argmax over 3, softmax 5 x 3
    assert meta["total_flops"] == 2 * 12 + 3 + 15 and meta["total_macs"] == 0


def test_string_labels_get_their_shapes(tmp_path):
    """A classifier's tensor(string) label: its shape comes from the run that resolves shapes (it was left
    unknown, and 08 refused a split whose cut carries it)."""
    f = cm.build_sk_forest_strings(tmp_path / "rf.onnx")
    r = run_stage("02_shapes_flops_bytes.py", "--model", f["path"], "--results", tmp_path / "r", "--inputs-npz", f["npz"])
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "r" / "ops_metrics.csv").set_index("op_type")
    assert df.loc["ai.onnx.ml:TreeEnsembleClassifier", "out_shapes"] == f"{cm.ROWS};{cm.ROWS}x{cm.CLASSES}"
    assert df.loc["ai.onnx.ml:TreeEnsembleClassifier", "dtype"] == "string"
    # its size is unknown (strings), not its shape: said as such, no advice to pass the inputs already passed
    meta = json.loads((tmp_path / "r" / "metrics_meta.json").read_text())
    assert meta["unknown_size_nodes"] == meta["unknown_size_strings"] > 0
    assert "string tensors:" in r.stdout and "UNKNOWN SIZE" not in r.stdout
    # 05's component model: the tree's known bytes (its input and tables) count, only the string label's are 0
    # (the whole node was 0 bytes: its data movement 17x too low)
    for stage in ("03_merge_profile_metrics.py", "05_energy_estimate.py"):
        r = run_stage(stage, "--model", f["path"], "--results", tmp_path / "r")
        assert r.returncode == 0, r.stderr
    tree = df.loc["ai.onnx.ml:TreeEnsembleClassifier"]
    energy = pd.read_csv(tmp_path / "r" / "energy.csv").set_index("op_type").loc["ai.onnx.ml:TreeEnsembleClassifier"]
    assert energy["bytes"] == tree["act_in_bytes"] + tree["weight_bytes"] > 0 and pd.isna(tree["act_out_bytes"])
    assert json.loads((tmp_path / "r" / "energy_meta.json").read_text())["partly_unknown_bytes"] >= 1


def test_an_unresolved_input_shape_is_not_called_a_string():
    """A float Reshape whose input shape is unknown but whose output shape is (a decoder run on shapes that
    contradict each other) was counted as moving strings."""
    from onnx import helper, numpy_helper
    from conftest import make_model, tensor
    from lib.onnx.loading import graph_of
    from lib.onnx.metrics import node_metrics, summarize
    nodes = [helper.make_node("Mystery", ["x"], ["t"], name="custom", domain="com.example"),
             helper.make_node("Reshape", ["t", "shape"], ["y"], name="reshape")]
    shape = numpy_helper.from_array(np.array([2, 3], np.int64), "shape")
    m = make_model(nodes, [tensor("x", [6])], [tensor("y", [2, 3])], [shape])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    g = graph_of(m)
    s = summarize(node_metrics(g), g)
    assert s["unknown_size_nodes"] == 2 and s["unknown_size_strings"] == 0


def test_string_inputs_from_an_npz(tmp_path):
    """A categorical column (tensor(string), as skl2onnx declares it) given as numpy's str array: an npz cannot
    hold object arrays, so str arrays stand for them; a number array is still refused."""
    n = helper.make_node("CategoryMapper", ["cat"], ["code"], name="cm", domain=ML, cats_strings=["u", "v"],
                         cats_int64s=[1, 2], default_int64=0)
    path = tmp_path / "cm.onnx"
    onnx.save(model([n], [vi("cat", [None, 1], TensorProto.STRING)], [vi("code", [None, 1], I64)], ml=1), str(path))
    for name, arr, rc in (("ok", np.array([["u"], ["w"], ["v"]]), 0), ("bad", np.ones((3, 1), np.float32), 2)):
        np.savez(tmp_path / f"{name}.npz", cat=arr)
        r = run_stage("02_shapes_flops_bytes.py", "--model", path, "--results", tmp_path / name, "--inputs-npz",
                      tmp_path / f"{name}.npz")
        assert r.returncode == rc, r.stderr
    assert "cat is float32, the model's input is object" in r.stderr


def test_a_string_cut_tensor_is_of_unknown_size_not_free(tmp_path):
    """08 said a cut carrying 3 strings was "0.0 KiB": its size is unknown (counted apart), the known bytes summed."""
    from lib.onnx.graph import build_graph
    from lib.split.export import cut_bytes
    nodes = [helper.make_node("LabelEncoder", ["x"], ["s"], name="le", domain=ML, keys_int64s=[0, 1],
                              values_strings=["u", "v"], default_string="w"),
             helper.make_node("CategoryMapper", ["s"], ["code"], name="cm", domain=ML, cats_strings=["u", "v"],
                              cats_int64s=[1, 2], default_int64=0),
             helper.make_node("Identity", ["x"], ["x2"], name="id")]
    m = model(nodes, [vi("x", [3, 1], I64)], [vi("code", [3, 1], I64), vi("x2", [3, 1], I64)], ml=2)
    g = build_graph(m)
    assert cut_bytes(g, ["s", "x2"]) == {"comm_bytes": 3 * 8, "cut_unknown_size": 1}


def test_knn_shapes_come_from_a_run_and_its_partitions_validate(tmp_path):
    """skl2onnx's KNN: ORT's shape inference says data.shape[:-1] + indices' shape (3x5) for ArrayFeatureExtractor
    over 1-D data, ORT's kernel writes [1, 15]; 02 trusted the inference, 08's parts declared 3x5 and ORT failed
    inside 08 with a traceback. 02 now takes that op's shape from a run; a part ORT fails on is a FAIL line."""
    f = cm.build_sk_knn(tmp_path / "knn.onnx")
    rdir, spec = tmp_path / "r", ["--inputs-npz", f["npz"]]
    costs(f["path"], rdir, *spec)
    df = pd.read_csv(rdir / "ops_metrics.csv").set_index("op_type").loc["ai.onnx.ml:ArrayFeatureExtractor"]
    node = next(n for n in onnx.load(f["path"]).graph.node if n.op_type == "ArrayFeatureExtractor")
    probe = onnx.load(f["path"])
    data_type = next(t.data_type for t in probe.graph.initializer if t.name == node.input[0])
    probe.graph.output.append(helper.make_tensor_value_info(node.output[0], data_type, None))
    ran = ort.InferenceSession(probe.SerializeToString()).run([node.output[0]], dict(np.load(f["npz"])))[0].shape
    assert df["out_shapes"] == "x".join(map(str, ran)) == f"1x{cm.ROWS * 5}" and df["shape_source"] == "executed"
    r = run_stage("07_split_candidates.py", "--model", f["path"], "--results", rdir, *spec)
    assert r.returncode == 0, r.stderr
    r = run_stage("08_export_splits.py", "--model", f["path"], "--results", rdir, *spec, "--diagram", "none", "--runs", "1")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stdout + r.stderr


def test_a_part_onnx_runtime_fails_on_is_a_failed_partition(tmp_path):
    """check_chain: part2 declares its input 5 long, part1 writes 4: ORT's error is the partition's (08 goes on)."""
    x, r, y = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [k]) for n, k in (("x", 4), ("r", 5), ("y", 4)))
    mk = lambda nodes, i, o: helper.make_model(helper.make_graph(nodes, "g", [i], [o]),   # noqa: E731
                                               opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    relu, neg = helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])
    onnx.save(mk([relu, neg], x, y), str(tmp_path / "full.onnx"))
    onnx.save(mk([relu], x, helper.make_tensor_value_info("r", TensorProto.FLOAT, [4])), str(tmp_path / "part1.onnx"))
    onnx.save(mk([neg], r, y), str(tmp_path / "part2.onnx"))
    with pytest.raises(StageError, match="ONNX Runtime fails running part2"):
        check_chain(tmp_path, 2, {"x": np.ones(4, np.float32)}, 1)


def test_lightgbm_splits(tmp_path):
    """TreeEnsembleClassifier + ZipMap (sequence-of-maps output) through 02, 03, 07 and 08: 08 failed with
    "'list' object has no attribute 'astype'"; a 5-node model is too small to split, and the advice says so."""
    f = cm.build_lgbm(tmp_path / "lgbm.onnx")
    rdir, spec = tmp_path / "r", ["--inputs-npz", f["npz"]]
    costs(f["path"], rdir, *spec)
    r = run_stage("07_split_candidates.py", "--model", f["path"], "--results", rdir, *spec)
    assert r.returncode == 0 and "advice: nothing worth splitting: the model has 5 nodes" in r.stdout, r.stderr
    summ = json.loads((rdir / "split_summary.json").read_text())
    assert summ["verdict"]["worth_splitting"] is False
    r = run_stage("08_export_splits.py", "--model", f["path"], "--results", rdir, *spec, "--boundary", "0",
                  "--diagram", "none", "--runs", "1")
    assert r.returncode == 0 and "nothing worth splitting" in r.stdout, r.stdout + r.stderr
    rep = json.loads((rdir / "validation_report.json").read_text())
    out = rep["splits"][0]["outputs"]["probabilities"]
    assert rep["splits"][0]["pass"] and out["shape"] == [cm.ROWS, cm.CLASSES]    # the maps as rows, sorted keys
    meta = json.loads((rdir / "metrics_meta.json").read_text())
    assert meta["unknown_cost_nodes"] == 0 and meta["weight_bytes"] > 0
