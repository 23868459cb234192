"""Stage 08 (and 01's attribution) on graphs as the world builds them: If bodies that read outer tensors, Loop,
IR-3 (initializers listed as inputs), weights computed from constants, LSTM, a model with nothing to split.
Real parts, real ONNX Runtime sessions, the stage scripts run as a user runs them."""
import json
import shlex
import subprocess
import sys

import onnx
from onnx import helper

import wild_models as wm
from conftest import run_stage


def spec_args(facts: dict) -> list[str]:
    """The input spec of a built model: its shape overrides and its npz (real values where they matter)."""
    return shlex.split(f"--shape-override '{facts['shape_override']}'" if facts["shape_override"] else "") + \
        ["--inputs-npz", facts["npz"]]


def stage(script, *args, rc=0):
    r = run_stage(script, *args)
    assert r.returncode == rc, f"{script}: rc {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r


def analyse(model, rdir, spec, profile=False, args07=()):
    """02, (01), 03, 07 into rdir."""
    stage("02_shapes_flops_bytes.py", "--model", model, "--results", rdir, *spec)
    if profile:
        stage("01_profile_onnx.py", "--model", model, "--results", rdir, "--runs", "3", "--warmup", "1", *spec)
    stage("03_merge_profile_metrics.py", "--results", rdir)
    stage("07_split_candidates.py", "--model", model, "--results", rdir, *args07)


def export(model, rdir, *args, rc=0):
    r = stage("08_export_splits.py", "--model", model, "--results", rdir, "--runs", "1", "--diagram", "none", *args, rc=rc)
    return r, json.loads((rdir / "validation_report.json").read_text())


def parts(rdir, b):
    return [onnx.load(str(rdir / "splits" / f"b{b}" / f"part{i}.onnx")) for i in (1, 2)]


def assert_valid(rdir, rep):
    """Every split on disk passes onnx.checker and validated (part2(part1(x)) and each cut tensor)."""
    assert rep["splits"] and rep["all_pass"], [(s["boundary"], s.get("error")) for s in rep["splits"]]
    for s in rep["splits"]:
        assert s["pass"] and all(c["pass"] for c in s["cut_tensors"].values())
        for p in parts(rdir, s["boundary"]):
            onnx.checker.check_model(p)
            assert all(vi.type.tensor_type.HasField("shape") for vi in list(p.graph.input) + list(p.graph.output))


def top_level_inputs(m):
    return {t for n in m.graph.node for t in n.input}


def test_if_body_reads_a_cut_tensor_and_attribution(tmp_path):
    facts = wm.build_if_value(tmp_path / "if_value.onnx")
    model, rdir, spec = facts["path"], tmp_path / "r", spec_args(facts)
    analyse(model, rdir, spec, profile=True)
    prof = json.loads((rdir / "profile_meta.json").read_text())
    assert prof["kernel_time_coverage"] >= 0.99, prof["unattributed_kernels_us"]
    assert "conv16k" in prof["inside_control_flow"]["if_16k"]["kernels"]     # the If's branch ran inside it
    _, rep = export(model, rdir, "--boundary", "0", "1", "2", "6", *spec)
    assert_valid(rdir, rep)
    cut = {s["boundary"]: list(s["cut_tensors"]) for s in rep["splits"]}
    p1, p2 = parts(rdir, 0)
    # x3 is read only inside the If's branches: it crosses boundary 0 and part2's If reads it as a graph input
    assert cut[0] == ["x3"] and "x3" not in top_level_inputs(p2) and "x3" in {i.name for i in p2.graph.input}
    assert [n.op_type for n in p2.graph.node if n.op_type == "If"] == ["If"]
    assert "k8000" in {t.name for t in p2.graph.initializer}          # a weight only a nested branch reads
    assert set(cut[1]) == {"x3", "is16k"}
    meta = json.loads((rdir / "splits" / "b0" / "split_meta.json").read_text())
    assert meta["inputs_npz"] == "inputs.npz" and meta["identity"]["inputs"]["inputs_npz"]
    r = subprocess.run([sys.executable, "run_split.py", "--runs", "1"], cwd=rdir / "splits" / "b0",
                       capture_output=True, text=True)          # the folder validates on its own (inputs.npz)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "run_split.py", "--runs", "1", "--seed", "0"], cwd=rdir / "splits" / "b0",
                       capture_output=True, text=True)          # random sr: one line that names the input
    assert r.returncode == 2 and "Input sr probably needs a real value" in r.stderr and "Traceback" not in r.stderr


def test_torch_cond_with_external_data_profiles_and_keeps_its_optimized_graph(tmp_path):
    """The dynamo exporter writes the weights to <model>.onnx.data; ORT's optimized copy of the model keeps the
    If branches' references to that file, which is not beside the copy: 01 keeps the graph alone."""
    facts = wm.build_if_torch_cond(tmp_path / "if_torch_cond.onnx")
    assert (tmp_path / "if_torch_cond.onnx.data").exists()          # the case this test is about
    model, rdir = facts["path"], tmp_path / "r"
    stage("01_profile_onnx.py", "--model", model, "--results", rdir, "--runs", "2", "--warmup", "1",
          "--inputs-npz", facts["npz"])
    opt = onnx.load(str(rdir / "profile" / "ort_optimized.onnx"), load_external_data=False)
    assert any(n.op_type == "If" for n in opt.graph.node)
    prof = json.loads((rdir / "profile_meta.json").read_text())
    assert prof["kernel_time_coverage"] >= 0.99, prof["unattributed_kernels_us"]


def test_random_values_that_break_the_model_name_the_input(tmp_path):
    facts = wm.build_if_value(tmp_path / "if_value.onnx")
    model, rdir = facts["path"], tmp_path / "r"
    analyse(model, rdir, ["--shape-override", facts["shape_override"]])      # sr random: 0 or 1
    r = run_stage("08_export_splits.py", "--model", model, "--results", rdir, "--boundary", "0", "--runs", "1",
                  "--diagram", "none")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "'sr' probably needs a real value" in r.stderr and "--inputs-npz" in r.stderr and "INPUTS=" in r.stderr


def loop_with_outer_reads(path):
    """wild_models' Loop, with a Relu before it (its initial state), a gate = Sigmoid(x) its body reads from the
    enclosing graph, and a Mul by the gate after it."""
    wm.build_loop(path)
    m = onnx.load(str(path))
    loop = m.graph.node[0]
    loop.input[2] = "h0"
    body = loop.attribute[0].g
    tanh = next(n for n in body.node if n.name == "loop_tanh")
    tanh.input[0] = "pre_g"
    body.node.insert(2, helper.make_node("Mul", ["pre", "gate"], ["pre_g"], name="loop_gate"))
    m.graph.node.insert(0, helper.make_node("Sigmoid", ["x"], ["gate"], name="gate"))
    m.graph.node.insert(0, helper.make_node("Relu", ["x"], ["h0"], name="pre_relu"))
    m.graph.node.append(helper.make_node("Mul", ["h", "gate"], ["y"], name="post"))
    m.graph.output[0].name = "y"
    onnx.checker.check_model(m)
    onnx.save(m, str(path))
    return {**wm._facts(path, "loop", "test", {"x": wm._rand(1, 64)}), "path": str(path)}


def test_loop_body_reading_outer_tensors_splits_and_attributes(tmp_path):
    facts = loop_with_outer_reads(tmp_path / "loop.onnx")
    model, rdir, spec = facts["path"], tmp_path / "r", spec_args(facts)
    analyse(model, rdir, spec, profile=True)
    assert json.loads((rdir / "profile_meta.json").read_text())["kernel_time_coverage"] >= 0.99
    _, rep = export(model, rdir, "--boundary", "0", "1", "2", *spec)
    assert_valid(rdir, rep)
    cut = {s["boundary"]: set(s["cut_tensors"]) for s in rep["splits"]}
    assert cut[1] == {"h0", "gate"} and cut[2] == {"h", "gate"}            # gate: read by the body and by post
    _, p2 = parts(rdir, 1)
    assert {"W", "b", "n", "cond"} <= {t.name for t in p2.graph.initializer}   # the body's weights go with it


def test_ir3_parts_list_their_initializers_as_inputs(tmp_path):
    facts = wm.build_ir3(tmp_path / "ir3.onnx")
    model, rdir, spec = facts["path"], tmp_path / "r", spec_args(facts)
    analyse(model, rdir, spec)
    _, rep = export(model, rdir, "--boundary", "2", "6", *spec)
    assert_valid(rdir, rep)
    for b in (2, 6):
        for p in parts(rdir, b):
            inits = {t.name for t in p.graph.initializer}
            assert p.ir_version == 3 and inits and inits <= {i.name for i in p.graph.input}
        assert json.loads((rdir / "splits" / f"b{b}" / "split_meta.json").read_text())["initializers_as_inputs"]


def test_weights_computed_from_constants_travel_with_their_part(tmp_path):
    facts = wm.build_constant_weights(tmp_path / "cw.onnx")
    model, rdir, spec = facts["path"], tmp_path / "r", spec_args(facts)
    analyse(model, rdir, spec)
    _, rep = export(model, rdir, "--boundary", "6", "12", *spec)     # after w2_tile; after conv3 (its weight chain)
    assert_valid(rdir, rep)
    assert {s["boundary"]: list(s["cut_tensors"]) for s in rep["splits"]} == {6: ["p1"], 12: ["c3"]}
    _, p2 = parts(rdir, 6)
    assert "w2_tile" in {n.name for n in p2.graph.node} and {i.name for i in p2.graph.input} == {"p1"}
    _, p2 = parts(rdir, 12)
    assert {"fc_range", "fc_mul"} <= {n.name for n in p2.graph.node}       # recomputed on the right, never sent


def test_lstm_top_splits_validate(tmp_path):
    facts = wm.build_lstm(tmp_path / "lstm.onnx")
    model, rdir, spec = facts["path"], tmp_path / "r", spec_args(facts)
    analyse(model, rdir, spec)
    _, rep = export(model, rdir, "--top-k", "2", *spec)
    assert len(rep["splits"]) == 2
    assert_valid(rdir, rep)


def test_nothing_to_split_and_one_report_of_every_split(tmp_path):
    facts = wm.build_tiny4(tmp_path / "tiny4.onnx")
    model, rdir, spec = facts["path"], tmp_path / "r", spec_args(facts)
    analyse(model, rdir, spec, args07=("--min-compute-share", "0.5"))        # every boundary pruned
    r, rep = export(model, rdir)
    assert rep["splits"] == [] and rep["all_pass"] and "nothing to split" in r.stdout
    # another model's split folder is removed; a folder without split_meta.json (stage 10's) is left and listed
    stale = rdir / "splits" / "b0"
    stale.mkdir(parents=True)
    (stale / "split_meta.json").write_text(json.dumps({"identity": {"model": {"graph_sha256": "0" * 64}, "inputs": {}}}))
    (rdir / "splits" / "b9").mkdir()
    r, rep = export(model, rdir, "--boundary", "1")
    assert "07 pruned boundary 1" in r.stdout and "compute share" in r.stdout        # 07's reason, said plainly
    assert not stale.exists() and rep["removed_folders"] == ["b0"] and rep["folders_without_meta"] == ["b9"]
    assert [s["boundary"] for s in rep["splits"]] == [1] and "compute share" in rep["splits"][0]["pruned_by_07"]
    r, rep = export(model, rdir, "--boundary", "2")
    assert [(s["boundary"], s["this_run"]) for s in rep["splits"]] == [(1, False), (2, True)]
    assert rep["kept_from_earlier_runs"] == [1] and "also keeps 1 earlier splits (b1)" in r.stdout
    assert_valid(rdir, rep)


def test_a_contrib_op_in_the_default_domain_splits(tmp_path):
    """onnxruntime-genai writes SimplifiedLayerNormalization in the default domain: ONNX Runtime runs it, onnx's
    checker has no schema for it. The model is analysed (ORT accepts it); its parts failed the checker, and every
    split 'FAILED' although it composes exactly. ORT's load now decides for the parts too."""
    from conftest import make_model, tensor, weight
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="r1"),
             helper.make_node("SimplifiedLayerNormalization", ["r", "scale"], ["n"], name="sln", axis=-1, epsilon=1e-5),
             helper.make_node("MatMul", ["n", "w"], ["m"], name="mm"), helper.make_node("Relu", ["m"], ["y"], name="r2")]
    model = tmp_path / "sln.onnx"
    make_model(nodes, [tensor("x", [2, 16])], [tensor("y", [2, 16])], [weight("scale", (16,)), weight("w", (16, 16))],
               path=model)
    rdir = tmp_path / "r"
    analyse(model, rdir, [])
    r, rep = export(model, rdir, "--boundary", "1", "2")
    assert rep["all_pass"] and len(rep["splits"]) == 2 and rep["worst_max_abs_diff"] == 0.0, r.stdout
    ops = {s["boundary"]: [n.op_type for n in parts(rdir, s["boundary"])[0].graph.node] for s in rep["splits"]}
    assert all("SimplifiedLayerNormalization" in o for o in ops.values()), ops
