"""Stage 08: exported halves compose to the full model; interfaces equal 07's cut tensors; runner; ext. data."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pandas as pd
import pytest

from conftest import costs, run_stage, small_cnn


def pipeline(model, rdir, *args08):
    costs(model, rdir)
    for stage, extra in (("07_split_candidates.py", []), ("08_export_splits.py", ["--runs", "1", *args08])):
        r = run_stage(stage, "--model", model, "--results", rdir, *extra)
        assert r.returncode == 0, f"{stage}: {r.stderr[-3000:]}"
    return json.loads((rdir / "validation_report.json").read_text())


def run_runner(folder, *args):
    return subprocess.run([sys.executable, "run_split.py", *map(str, args)], cwd=folder, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "efficientnet_b0"])
def test_top5_splits_validate_and_match_07(tv_models, tmp_path, name):
    model = tv_models(name)
    rep = pipeline(model, tmp_path, "--top-k", "5", "--diagram", "none")
    assert len(rep["splits"]) == 5 and rep["all_pass"]
    assert rep["worst_max_abs_diff"] <= 1e-4
    bd = pd.read_csv(tmp_path / "boundaries.csv").set_index("boundary")
    for s in rep["splits"]:
        b = s["boundary"]
        folder = tmp_path / "splits" / f"b{b}"
        p1, p2 = (onnx.load(str(folder / f"part{i}.onnx")) for i in (1, 2))
        cut = bd.loc[b, "cut_tensors"].split(";")
        assert list(s["cut_tensors"]) == cut and all(c["pass"] and c["max_abs_value"] > 0 for c in s["cut_tensors"].values())
        assert [o.name for o in p1.graph.output] == cut                   # exactly 07's cut tensors
        inits2 = {t.name for t in p2.graph.initializer}
        assert not inits2 & {i.name for i in p2.graph.input}               # no weight is an input of part2
        assert {i.name for i in p2.graph.input} == set(cut) | {"input"} - ({"input"} if bd.loc[b, "right_graph_inputs"] == 0 else set())
        # the bytes that really cross, dumped by the standalone runner, sum to Comm(b)
        r = run_runner(folder, "--runs", "1", "--dump-interface", "min", "--dump-interface-out", tmp_path / f"i{b}")
        assert r.returncode == 0, r.stderr
        arrays = np.load(tmp_path / f"i{b}_min.npz")
        assert sum(arrays[t].nbytes for t in cut) == bd.loc[b, "comm_bytes"] == s["comm_bytes"]


def test_runner_npz_round_trip_and_interfaces(tmp_path):
    model = tmp_path / "cnn.onnx"
    small_cnn(model)
    rep = pipeline(model, tmp_path / "r", "--boundary", "2", "--diagram", "matplotlib")
    folder = tmp_path / "r" / "splits" / "b2"
    assert {"part1.onnx", "part2.onnx", "full.onnx", "run_split.py", "split_meta.json", "validation_report.json",
            "split_context.dot", "split_context.png", "split_context.svg"} <= set(os.listdir(folder))
    assert list(rep["splits"][0]["cut_tensors"]) == ["r1"]          # part1's r1 checked against the full model's
    assert rep["splits"][0]["cut_tensors"]["r1"]["pass"] and rep["splits"][0]["cut_tensors"]["r1"]["max_abs_value"] > 0
    r = run_runner(folder, "--seed", "7", "--runs", "1", "--save-inputs-npz", tmp_path / "in.npz",
                   "--dump-interface", "right", "--dump-interface-out", tmp_path / "a")
    assert r.returncode == 0, r.stderr
    first = json.loads((folder / "validation_report.json").read_text())
    r = run_runner(folder, "--inputs-npz", tmp_path / "in.npz", "--runs", "1", "--dump-interface", "right",
                   "--dump-interface-out", tmp_path / "b")
    assert r.returncode == 0, r.stderr
    second = json.loads((folder / "validation_report.json").read_text())
    assert first["pass"] and second["pass"] and first["outputs"] == second["outputs"]
    a, b = np.load(tmp_path / "a_right.npz"), np.load(tmp_path / "b_right.npz")
    assert np.array_equal(a["r1"], b["r1"])                                   # same inputs -> same interface
    meta = json.loads(str(a["__meta__"]))
    assert meta["boundary"] == 2 and meta["side"] == "right" and meta["tensors"]["r1"]["shape"] == [1, 16, 32, 32]
    for side in ("left", "min", "either"):
        r = run_runner(folder, "--runs", "1", "--dump-interface", side, "--dump-interface-out", tmp_path / "s")
        assert r.returncode == 0 and set(np.load(tmp_path / f"s_{side}.npz").files) == {"__meta__", "r1"}
    r = run_runner(folder, "--provider", "tensorrt")
    assert r.returncode == 2 and r.stderr.startswith("error: provider tensorrt is not available") and "Traceback" not in r.stderr
    r = run_runner(folder, "--runs", "0")       # exit 0 with NaN latencies in a report that is not JSON
    assert r.returncode == 2 and "--runs must be >= 1" in r.stderr


def test_external_data_model_splits_and_validates(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    m = small_cnn(None)
    onnx.save_model(m, str(src / "ext.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.onnx.data", size_threshold=0)
    rep = pipeline(src / "ext.onnx", tmp_path / "r", "--boundary", "2", "5", "--diagram", "none")
    assert rep["all_pass"]
    folder = tmp_path / "r" / "splits" / "b2"
    # one copy, that the other folders hardlink to; never a link to the user's file (onnx.load then refused the
    # user's own model as a "hardlink attack")
    assert [s["external_data"] for s in rep["splits"]] == [{"ext.onnx.data": "copy"}, {"ext.onnx.data": "hardlink"}]
    assert os.stat(src / "ext.onnx.data").st_nlink == 1 and onnx.load(str(src / "ext.onnx")).graph.initializer
    assert os.path.samefile(folder / "ext.onnx.data", tmp_path / "r" / "splits" / "b5" / "ext.onnx.data")
    p2 = onnx.load(str(folder / "part2.onnx"), load_external_data=False)
    assert all(t.data_location == onnx.TensorProto.EXTERNAL for t in p2.graph.initializer)
    moved = tmp_path / "moved"                                              # the folder is self-contained
    shutil.copytree(folder, moved)
    assert run_runner(moved, "--runs", "1").returncode == 0


def test_a_model_with_repeated_node_names_splits_and_validates(tmp_path):
    """ONNX Runtime refuses two nodes of one name ('two nodes with same node name'); stages 01-07 analyse a renamed
    copy, and 08 failed on its own full.onnx. full.onnx and the parts now carry the tables' unique node ids."""
    import onnxruntime as ort
    m = small_cnn(None)
    for n in m.graph.node:
        n.name = {"conv1": "conv", "conv2": "conv", "relu1": "act", "relu2": "act"}.get(n.name, n.name)
    onnx.save(m, str(tmp_path / "dup.onnx"))
    with pytest.raises(Exception, match="same node name"):
        ort.InferenceSession(str(tmp_path / "dup.onnx"), providers=["CPUExecutionProvider"])
    rep = pipeline(tmp_path / "dup.onnx", tmp_path / "r", "--boundary", "3", "--diagram", "none")
    assert rep["all_pass"] and len(rep["splits"]) == 1
    folder = tmp_path / "r" / "splits" / "b3"
    names = [n.name for p in ("part1", "part2") for n in onnx.load(str(folder / f"{p}.onnx")).graph.node]
    assert names == ["conv", "bn1", "act", "conv__3", "add", "act__5", "gap", "flatten", "fc"]
    assert [n.name for n in onnx.load(str(folder / "full.onnx")).graph.node] == names
    assert [n.name for n in onnx.load(str(tmp_path / "dup.onnx")).graph.node].count("conv") == 2   # the user's file


def test_diagram_backends(tmp_path, monkeypatch):
    import lib.split.diagram
    from lib.errors import StageError
    from lib.onnx.loading import graph_of
    from lib.split.diagram import dot_source, render
    g = graph_of(small_cnn(None))
    src = dot_source(g, 2, ["r1"], 1)
    assert "cluster_left" in src and "cluster_right" in src and 'label="r1"' in src and "color=\"red\"" in src
    files = render(g, 2, ["r1"], tmp_path / "mpl", 2, "matplotlib")
    assert {f.name for f in files} == {"split_context.dot", "split_context.png", "split_context.svg"}
    with monkeypatch.context() as m:       # a machine without Graphviz: auto draws with matplotlib, dot is refused
        m.setattr(lib.split.diagram.shutil, "which", lambda name: None)
        files = render(g, 2, ["r1"], tmp_path / "auto", 1, "auto")
        assert {f.name for f in files} == {"split_context.dot", "split_context.png", "split_context.svg"}
        with pytest.raises(StageError, match="Graphviz `dot` is not installed"):
            render(g, 2, ["r1"], tmp_path / "nodot", 1, "dot")
        assert not (tmp_path / "nodot").exists()
    if shutil.which("dot") is None:
        pytest.skip("Graphviz dot not installed: dot backend not exercised")
    files = render(g, 2, ["r1"], tmp_path / "dot", 0, "dot")
    assert {f.name for f in files} == {"split_context.dot", "split_context.svg", "split_context.pdf"}
    assert (tmp_path / "dot" / "split_context.svg").read_text().count("<svg") == 1
    render(g, 2, ["r1"], tmp_path / "dot", 1, "matplotlib")     # drawn again: no PDF of the earlier drawing left
    assert {f.name for f in (tmp_path / "dot").iterdir()} == {"split_context.dot", "split_context.png",
                                                              "split_context.svg"}


def test_benchmark_set_and_bad_input(tmp_path):
    model = tmp_path / "cnn.onnx"
    small_cnn(model)
    rdir = tmp_path / "r"
    costs(model, rdir)
    r = run_stage("08_export_splits.py", "--model", model, "--results", rdir)
    assert r.returncode == 2 and "run 07_split_candidates.py first" in r.stderr and "Traceback" not in r.stderr
    pipeline(model, rdir, "--boundary", "2", "--diagram", "none")
    before = {p: p.stat().st_mtime_ns for p in rdir.rglob("*")}
    r = run_stage("08_export_splits.py", "--model", model, "--results", rdir, "--boundary", "4", "--diagram", "dot",
                  env={"PATH": str(tmp_path / "no-tools")})     # no Graphviz on this PATH
    assert r.returncode == 2 and "Graphviz `dot` is not installed" in r.stderr and "Traceback" not in r.stderr
    assert {p: p.stat().st_mtime_ns for p in rdir.rglob("*")} == before      # nothing written or removed
    r = run_stage("08_export_splits.py", "--model", model, "--results", rdir, "--boundary", "99")
    assert r.returncode == 2 and "out of range" in r.stderr
    bench = tmp_path / "bench"
    r = run_stage("08_export_splits.py", "--model", model, "--results", rdir, "--boundary", "2", "4",
                  "--diagram", "none", "--benchmark-set", bench, "--runs", "1")
    assert r.returncode == 0, r.stderr
    assert {"b2", "b4", "benchmark_suite.py", "split_candidates.tex", "system_config.json", "workload_profile.json",
            "pareto_export.csv", "candidate_pruning.json"} <= set(os.listdir(bench))
    r = subprocess.run([sys.executable, "benchmark_suite.py", "--runs", "1"], cwd=bench, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    res = pd.read_csv(bench / "benchmark_results.csv")
    assert list(res["boundary"]) == [2, 4] and res["pass"].all()


def test_parts_keep_the_models_symbolic_dims(tmp_path):
    """A model declaring a symbolic batch: the parts declare it too (typed from the analysed graph, as general as
    full.onnx), so the runner's --shape-override feeds another batch through full, part1 and part2."""
    m = small_cnn(None)
    for vi in (m.graph.input[0], m.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].Clear()
        vi.type.tensor_type.shape.dim[0].dim_param = "N"
    model = tmp_path / "dyn.onnx"
    onnx.save(m, str(model))
    costs(model, tmp_path / "r", "--shape-override", "x=1x3x32x32")
    r = run_stage("07_split_candidates.py", "--model", model, "--results", tmp_path / "r")
    assert r.returncode == 0, r.stderr
    r = run_stage("08_export_splits.py", "--model", model, "--results", tmp_path / "r", "--boundary", "2",
                  "--runs", "1", "--diagram", "none")
    assert r.returncode == 0, r.stderr
    folder = tmp_path / "r" / "splits" / "b2"
    p1, p2 = (onnx.load(str(folder / f"part{i}.onnx")) for i in (1, 2))
    dims = lambda vi: [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]  # noqa: E731
    assert dims(p1.graph.input[0]) == ["N", 3, 32, 32] and dims(p1.graph.output[0]) == ["N", 16, 32, 32]
    assert dims(p2.graph.input[0]) == ["N", 16, 32, 32] and dims(p2.graph.output[0]) == ["N", 10]
    r = run_runner(folder, "--runs", "1", "--shape-override", "x=2x3x32x32", "--dump-interface", "min",
                   "--dump-interface-out", tmp_path / "i")
    assert r.returncode == 0, r.stderr
    assert np.load(tmp_path / "i_min.npz")["r1"].shape == (2, 16, 32, 32)
