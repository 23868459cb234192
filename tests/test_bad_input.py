"""Bad input: exit code 2, one clear line on stderr, no traceback, nothing written."""
import json

import numpy as np
import onnx
import onnx.inliner
import pandas as pd
import pytest
from onnx import helper

from conftest import make_model, run_stage, small_cnn, tensor, weight

MODEL_STAGES = ["01_profile_onnx.py", "02_shapes_flops_bytes.py"]


def assert_clean_error(r, *needles):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "Traceback" not in r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.fixture
def good(tmp_path):
    path = tmp_path / "cnn.onnx"
    small_cnn(path)
    return path


@pytest.mark.parametrize("stage", MODEL_STAGES + ["03_merge_profile_metrics.py", "04_critical_path.py",
                                                  "05_energy_estimate.py"])
def test_missing_model_file(tmp_path, stage):
    rdir = tmp_path / "res"
    r = run_stage(stage, "--model", tmp_path / "nope.onnx", "--results", rdir)
    assert_clean_error(r, "nope.onnx not found")        # 04 said "run 02 first" of a model that is not there
    assert not rdir.exists() or not any(rdir.iterdir())


@pytest.mark.parametrize("stage", MODEL_STAGES)
def test_corrupt_and_truncated_model(tmp_path, good, stage):
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"\x08\x07this is not a protobuf\xff\xff\xff\xff" * 50)
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    for bad in (corrupt, truncated):
        rdir = tmp_path / f"res_{bad.stem}"
        assert_clean_error(run_stage(stage, "--model", bad, "--results", rdir), bad.name)
        assert not rdir.exists() or not any(rdir.glob("*.csv"))


def unknown_op_model(path):
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Frobnicate", ["r"], ["y"], name="mystery", domain="com.example")]
    m = make_model(nodes, [tensor("x", [1, 4])], [tensor("y", [1, 4])])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    import onnx
    onnx.save(m, str(path))


def test_unknown_op(tmp_path):
    model = tmp_path / "odd.onnx"
    unknown_op_model(model)
    # 01: ONNX Runtime has no kernel for it -> clear error
    assert_clean_error(run_stage("01_profile_onnx.py", "--model", model, "--results", tmp_path / "a"),
                       "ONNX Runtime cannot load")
    # 02: flagged, counted and listed (exit 0) ... or an error when asked to be strict
    r = run_stage("02_shapes_flops_bytes.py", "--model", model, "--results", tmp_path / "b")
    assert r.returncode == 0 and "UNKNOWN COST: 1 node (" in r.stdout and "com.example:Frobnicate" in r.stdout
    # 03 predicts with the baseline and says why the kernel model did not run (it said "run 03 with --model")
    r = run_stage("03_merge_profile_metrics.py", "--model", model, "--results", tmp_path / "b", "--no-profile")
    pred = json.loads((tmp_path / "b" / "merge_meta.json").read_text())["prediction"]
    assert r.returncode == 0 and pred["predicted_by"] == "baseline" and "--model" not in r.stdout
    assert pred["note_kernel_model"].startswith("kernel model not run, the baseline stands: ONNX Runtime cannot load")
    r = run_stage("02_shapes_flops_bytes.py", "--model", model, "--results", tmp_path / "c", "--fail-on-unknown")
    assert_clean_error(r, "com.example:Frobnicate")
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("stage", MODEL_STAGES)
def test_a_graph_that_calls_local_functions_is_refused_and_inlined_runs(tmp_path, stage):
    """A call of the model's local function Block(x, w) = Relu(Conv(x, w)): refused in one line naming it and how to
    inline it; the inlined model (that command) is costed in full: 1x8x16x16 outputs x 8x3x3 MACs each."""
    body = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])]
    block = helper.make_function("local", "Block", ["x", "w"], ["y"], body, [helper.make_opsetid("", 17)])
    m = make_model([helper.make_node("Block", ["X", "W"], ["Y"], domain="local", name="blk")],
                   [tensor("X", [1, 8, 16, 16])], [tensor("Y", [1, 8, 16, 16])], [weight("W", [8, 8, 3, 3])])
    m.functions.append(block)
    m.opset_import.append(helper.make_opsetid("local", 1))
    onnx.save(m, str(tmp_path / "fn.onnx"))
    rdir = tmp_path / "res"
    r = run_stage(stage, "--model", tmp_path / "fn.onnx", "--results", rdir)
    assert_clean_error(r, "calls 1 local function(s) of the model (local:Block)", "onnx.inliner.inline_local_functions")
    assert not rdir.exists() or not any(rdir.iterdir())
    if stage == "02_shapes_flops_bytes.py":
        onnx.save(onnx.inliner.inline_local_functions(m), str(tmp_path / "inlined.onnx"))
        r = run_stage(stage, "--model", tmp_path / "inlined.onnx", "--results", rdir)
        assert r.returncode == 0, r.stderr
        assert pd.read_csv(rdir / "ops_metrics.csv")["macs"].sum() == 8 * 16 * 16 * 8 * 3 * 3


def test_unresolved_dynamic_dims(tmp_path):
    model = tmp_path / "dyn.onnx"
    make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [tensor("x", ["frames", 8])],
               [tensor("y", None)], path=model)
    for stage in MODEL_STAGES:
        assert_clean_error(run_stage(stage, "--model", model, "--results", tmp_path / "r"),
                           "unresolved dynamic dims", "x[0]=frames")
    r = run_stage("02_shapes_flops_bytes.py", "--model", model, "--results", tmp_path / "r", "--shape-override", "x=3x8")
    assert r.returncode == 0, r.stderr
    assert_clean_error(run_stage("02_shapes_flops_bytes.py", "--model", model, "--results", tmp_path / "r",
                                 "--shape-override", "x=3by8"), "bad --shape-override")
    for bad in ("symbolic_dims: {frames: -2}", "symbolic_dims: {frames: many}", "symbolic_dims: [frames]",
                "presets: {p: {frames: 2.5}}"):
        wl = tmp_path / "wl.yaml"
        wl.write_text(bad + "\n")
        err = "must map dim names" if "[" in bad else "integers >= 0"
        assert_clean_error(run_stage("02_shapes_flops_bytes.py", "--model", model, "--results", tmp_path / "r",
                                     "--workload", wl, *(["--preset", "p"] if "presets" in bad else [])), err)


@pytest.mark.parametrize("stage,needs", [("03_merge_profile_metrics.py", "02_shapes_flops_bytes.py"),
                                         ("04_critical_path.py", "03_merge_profile_metrics.py"),
                                         ("05_energy_estimate.py", "03_merge_profile_metrics.py"),
                                         ("06_plots.py", "03_merge_profile_metrics.py")])
def test_missing_prerequisite_names_the_stage(tmp_path, good, stage, needs):
    rdir = tmp_path / "res"
    if needs != "02_shapes_flops_bytes.py":      # the earlier stages ran: the message names the next one missing
        assert run_stage("02_shapes_flops_bytes.py", "--model", good, "--results", rdir).returncode == 0
    assert_clean_error(run_stage(stage, "--model", good, "--results", rdir), f"run {needs} first")


def test_stage_chain_prerequisites_and_bad_configs(tmp_path, good):
    rdir = tmp_path / "res"
    assert run_stage("02_shapes_flops_bytes.py", "--model", good, "--results", rdir).returncode == 0
    bad_host = tmp_path / "host.yaml"
    bad_host.write_text("peak_flops_per_s: [oops\n")
    assert_clean_error(run_stage("03_merge_profile_metrics.py", "--results", rdir, "--host", bad_host), "not valid YAML")
    bad_host.write_text("peak_flops_per_s: {default: -1}\nmem_bw_bytes_per_s: 1e9\navg_power_w: 5\nenergy: {}\n")
    assert_clean_error(run_stage("03_merge_profile_metrics.py", "--results", rdir, "--host", bad_host), "positive")
    # 03 without 01 works (no measured latency); 04 then weights by the predicted time
    r = run_stage("03_merge_profile_metrics.py", "--results", rdir)
    assert r.returncode == 0 and "roofline and predicted time only" in r.stdout
    r = run_stage("04_critical_path.py", "--model", good, "--results", rdir)
    assert r.returncode == 0 and "weights: predicted" in r.stdout
    assert_clean_error(run_stage("04_critical_path.py", "--model", good, "--results", rdir, "--weight", "measured"),
                       "run 01_profile_onnx.py")
    # a corrupt model next to good artifacts
    corrupt = tmp_path / "corrupt.onnx"
    corrupt.write_bytes(b"garbage" * 10)
    for stage in ("04_critical_path.py", "05_energy_estimate.py"):
        assert_clean_error(run_stage(stage, "--model", corrupt, "--results", rdir), "corrupt or truncated")
    # results of another model: refused, not silently mixed
    other = tmp_path / "other.onnx"
    make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [tensor("x", [2])], [tensor("y", [2])], path=other)
    assert_clean_error(run_stage("04_critical_path.py", "--model", other, "--results", rdir), "holds results of")
    # a half-written CSV from elsewhere is reported, with the stage to re-run
    (rdir / "ops_profile.csv").write_text("node,op_type\n")
    assert_clean_error(run_stage("05_energy_estimate.py", "--model", good, "--results", rdir), "re-run 03")
    bad_npz = tmp_path / "in.npz"
    bad_npz.write_bytes(b"nope")
    assert_clean_error(run_stage("01_profile_onnx.py", "--model", good, "--results", rdir, "--inputs-npz", bad_npz),
                       "not a readable .npz")
    assert_clean_error(run_stage("01_profile_onnx.py", "--model", good, "--results", rdir, "--provider", "tensorrt"),
                       "not available")


def test_edited_or_corrupt_metrics_table_for_stage_03(tmp_path, good):
    """02's table saved again with \\r\\n line ends (a spreadsheet did it): 03 formats 02's columns itself and
    writes the bytes it writes from 02's own file; a table that is not text is refused with the stage to re-run."""
    rdir = tmp_path / "res"
    assert run_stage("02_shapes_flops_bytes.py", "--model", good, "--results", rdir).returncode == 0
    assert run_stage("03_merge_profile_metrics.py", "--results", rdir).returncode == 0
    want = (rdir / "ops_profile.csv").read_bytes()
    metrics = rdir / "ops_metrics.csv"
    metrics.write_bytes(metrics.read_bytes().replace(b"\n", b"\r\n"))
    assert run_stage("03_merge_profile_metrics.py", "--results", rdir).returncode == 0
    assert (rdir / "ops_profile.csv").read_bytes() == want
    metrics.write_bytes(b"node,op_type\n\xff\xfe\x00garbage\n")
    assert_clean_error(run_stage("03_merge_profile_metrics.py", "--results", rdir), "unreadable", "re-run 02")


def test_help_explains_every_stage():
    for s in MODEL_STAGES + ["03_merge_profile_metrics.py", "04_critical_path.py", "05_energy_estimate.py", "06_plots.py"]:
        r = run_stage(s, "--help")
        assert r.returncode == 0 and "--model" in r.stdout and "Stage 0" in r.stdout


def test_output_into_a_closed_pipe_gives_no_traceback(good, tmp_path):
    """`02 ... | head -1`: when the reader is gone, the stage stops quietly (exit 1), not with a traceback."""
    import subprocess
    import sys
    from conftest import REPO
    p = subprocess.Popen([sys.executable, str(REPO / "02_shapes_flops_bytes.py"), "--model", str(good), "--results",
                          str(tmp_path / "res")], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()                # the reader stopped before the stage printed anything
    err = p.stderr.read().decode()
    assert p.wait(timeout=300) == 1 and "Traceback" not in err and "internal error" not in err, err


def test_inputs_npz_entries_are_checked(tmp_path, good):
    """The npz may hold a subset of the inputs, but each entry must name a graph input with its dtype and rank."""
    x = np.zeros((1, 3, 32, 32), np.float32)
    cases = [({"x": x, "mask": x}, "name no graph input"), ({"x": x.astype(np.float64)}, "x is float64"),
             ({"x": x[0]}, "rank 3")]
    for k, (arrays, needle) in enumerate(cases):
        npz = tmp_path / f"in{k}.npz"
        np.savez(npz, **arrays)
        for stage in MODEL_STAGES:
            rdir = tmp_path / f"res{k}"
            assert_clean_error(run_stage(stage, "--model", good, "--results", rdir, "--inputs-npz", npz), needle)
            assert not rdir.exists() or not any(rdir.iterdir())


def test_string_map_and_sequence_inputs_are_refused_in_one_line(tmp_path):
    """A string input with no npz (01 must run it), an npz of Python strings (a pickled object array), a sequence input:
    each said once, in its own words (they read "element type object", "not a readable .npz file (ValueError)"
    and "rank unknown: pass --shape-override")."""
    from onnx import TensorProto
    text = tmp_path / "text.onnx"
    make_model([helper.make_node("Identity", ["t"], ["y"], name="id")], [tensor("t", [2], TensorProto.STRING)],
               [tensor("y", [2], TensorProto.STRING)], path=text)
    npz = tmp_path / "obj.npz"
    np.savez(npz, t=np.array(["a", "b"], dtype=object))
    seq = tmp_path / "seq.onnx"
    seq_in = helper.make_tensor_sequence_value_info("xs", TensorProto.FLOAT, None)
    make_model([helper.make_node("ConcatFromSequence", ["xs"], ["y"], name="cat", axis=0)], [seq_in],
               [tensor("y", None)], path=seq)
    assert_clean_error(run_stage("01_profile_onnx.py", "--model", text, "--results", tmp_path / "r1"),   # 01 runs it
                       "input t is a string tensor", "dtype=str")
    for stage in MODEL_STAGES:
        assert_clean_error(run_stage(stage, "--model", text, "--results", tmp_path / "r2", "--inputs-npz", npz),
                           "holds an object array", "dtype=str")
        assert_clean_error(run_stage(stage, "--model", seq, "--results", tmp_path / "r3"),
                           "input xs is a sequence, not a tensor")


@pytest.mark.parametrize("script,args,needle", [
    ("bench/batch_sweep.py", ["--models", "nope"], "unknown model(s) nope"),
    ("bench/batch_sweep.py", ["--batches", "0"], "must be 1 or more"),
    ("bench/batch_sweep.py", ["--rounds", "0"], "must be 1 or more"),
    ("bench/predict_unseen.py", ["--models", "nope"], "nope"),
    ("bench/predict_unseen.py", ["--rounds", "0"], "must be 1 or more"),
    ("bench/predict_unseen.py", ["--passes", "0"], "must be 1 or more"),
    ("bench/predict_unseen.py", ["--drift-models", "nope"], "not a training model: nope"),
    ("bench/qdq_weights.py", ["--rounds", "0"], "must be 1 or more"),
    ("bench/stage_startup.py", ["--repeats", "0"], "must be 1 or more"),
    ("bench/thread_pinning.py", ["--models", "nope"], "no training model nope"),
    ("bench/thread_pinning.py", ["--passes", "1"], "--passes must be at least 2"),
    ("bench/session_count.py", ["--models", "nope"], "manifest.json: nope"),
    ("bench/session_count.py", ["--passes", "1"], "--passes 2 or more"),
    ("bench/host_reference.py", ["--sessions", "0"], "--sessions and --passes must be 1 or more"),
    ("bench/host_reference.py", ["--models", "nope"], "not a training model measured by make calibrate"),
])
def test_accuracy_benches_refuse_bad_input_in_one_line(script, args, needle):
    """issue 30's bench scripts (and stage_startup's): an unknown model or a count below 1 is one line and exit 2,
    before any work."""
    assert_clean_error(run_stage(script, *args), needle)


def test_accuracy_benches_refuse_to_record_another_cpus_calibration(tmp_path, capsys, monkeypatch):
    """A bench scoring make calibrate's files on another CPU than theirs would record another CPU's figures:
    --record refuses in one line before any work; without it, a warning (bench/_models.calibrated_here)."""
    import yaml
    from conftest import REPO, latency_model_copy
    from lib.latency import host_reference
    here = host_reference.cpu_here()
    lm = latency_model_copy(tmp_path)       # the latency model: this CPU's
    doc = yaml.safe_load(lm.read_text())
    doc["host"].update(cpu=here["model"], cores=here["cores"])
    doc["kernel_model"]["host"]["caches_bytes"] = here["caches_bytes"]
    lm.write_text(yaml.safe_dump(doc))
    host = tmp_path / "host.yaml"           # host.yaml: another CPU's
    host.write_text((REPO / "configs" / "host.yaml").read_text().replace(
        "cpu_model: ", 'cpu_model: "Other CPU 9000"  # was ', 1))
    r = run_stage("bench/predict_vs_measured.py", "--record", "--host", host, "--latency-model", lm)
    assert_clean_error(r, f"{host} was calibrated on a", "Other CPU 9000", "--record writes no figures")
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    from _models import calibrated_here
    calibrated_here(False, lm, host)
    assert "Other CPU 9000" in capsys.readouterr().err
    same = tmp_path / "same.yaml"           # both files of this CPU: nothing to say, --record goes on
    h = yaml.safe_load((REPO / "configs" / "host.yaml").read_text())
    h.update(cpu_model=here["model"], cpu_cores=here["cores"], caches_bytes=here["caches_bytes"])
    same.write_text(yaml.safe_dump(h))
    calibrated_here(True, lm, same)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("which, edit, needle", [
    ("host", ("peak_flops_per_s", "float", "5e11"), None),                 # YAML 1.1 reads 5e11 as a string
    ("host", ("caches_bytes", "L1", "48KiB"), "caches_bytes.L1 must be a positive integer"),
    ("host", ("bandwidth_bytes_per_s", "DRAM", 0), "bandwidth_bytes_per_s.DRAM must be a positive number"),
    ("host", ("energy", "e_byte_j", -8e-11), "energy.e_byte_j must be a non-negative number"),
    ("offload", ("criteria", "min_share_pct", "10%"), "criteria.min_share_pct must be a non-negative number at most 100"),
    ("offload", ("criteria", "require", ["share", "speed"]), "criteria.require must list some of"),
    ("offload", ("criteria", "regular_classes", "matmul"), "criteria.regular_classes must be a list"),
    ("offload", ("speedup", "matmul", float("nan")), "speedup.matmul must be a positive number"),
    ("system", ("link", "bandwidth_bytes_per_s", 0), "link.bandwidth_bytes_per_s must be a positive number"),
    ("system", ("ranking", "top_k", "ten"), "ranking.top_k must be a positive integer"),
    ("system", ("ranking", "strict", "no"), "ranking.strict must be true or false"),
    ("system", ("constraints", "max_latency_us", -5), "constraints.max_latency_us must be a positive number"),
    ("system", ("devices", "B", {"peak_flops_per_s": float("nan"), "mem_bw_bytes_per_s": 1e9, "power_w": 1}),
     "devices.B.peak_flops_per_s must be a positive number"),
    # misspelt keys and classes were read nowhere: a constraint dropped, conv never offloaded, silently
    ("system", ("constraints", "max_latency_uss", 10), "constraints: unknown key max_latency_uss"),
    ("system", ("ranking", "topk", 3), "ranking: unknown key topk"),
    ("offload", ("speedup", "cnov", 8), "speedup: unknown op class cnov"),
    ("offload", ("criteria", "regular_classes", ["convv", "gemm"]), "criteria.regular_classes: unknown op class convv"),
])
def test_config_values_are_checked(tmp_path, which, edit, needle):
    """A user's edit of host.yaml, offload.yaml or system.yaml: a string, NaN, a zero or negative figure, an unknown
    criterion gave tracebacks (ValueError, KeyError) or went through (negative energies, NaN latencies, 'no' as
    strict true); now one line naming the key. A number YAML 1.1 reads as a string (5e11) counts as a number."""
    import yaml
    from conftest import REPO
    from lib.analysis.energy import load_offload
    from lib.errors import StageError
    from lib.host import load_host
    from lib.split.system import load_system
    load = {"host": load_host, "offload": load_offload, "system": load_system}[which]
    doc = yaml.safe_load((REPO / "configs" / f"{which}.yaml").read_text())
    section, key, value = edit
    doc[section][key] = value
    path = tmp_path / f"{which}.yaml"
    path.write_text(yaml.safe_dump(doc))
    if needle is None:
        assert load(path)[section][key] == 5e11
        return
    with pytest.raises(StageError, match=needle.replace(".", r"\.")):
        load(path)


def test_stages_refuse_bad_config_values_in_one_line(tmp_path, good):
    rdir = tmp_path / "res"
    assert run_stage("02_shapes_flops_bytes.py", "--model", good, "--results", rdir).returncode == 0
    assert run_stage("03_merge_profile_metrics.py", "--results", rdir).returncode == 0
    off = tmp_path / "offload.yaml"
    off.write_text("criteria: {min_share_pct: ten}\nspeedup: {default: 1}\nenergy_gain: {default: 1}\n")
    assert_clean_error(run_stage("05_energy_estimate.py", "--model", good, "--results", rdir, "--offload", off),
                       "criteria.min_share_pct must be a non-negative number")
    assert_clean_error(run_stage("05_energy_estimate.py", "--model", good, "--results", rdir, "--avg-power-w", "nan"),
                       "--avg-power-w must be a positive number")
    assert_clean_error(run_stage("07_split_candidates.py", "--model", good, "--results", rdir, "--top-k", "0"),
                       "--top-k (ranking.top_k) must be a positive integer")


def test_two_given_shapes_that_give_one_dim_two_values_are_refused(tmp_path):
    """ids and mask share the dim 'seq': --shape-override 'ids=1x64 mask=1x32' was taken (seq = 64), and the run
    failed later with "some input probably needs real values"."""
    model = tmp_path / "two.onnx"
    nodes = [helper.make_node("Cast", ["ids"], ["f"], name="cast", to=onnx.TensorProto.FLOAT),
             helper.make_node("Add", ["f", "mask"], ["y"], name="add")]
    make_model(nodes, [tensor("ids", [1, "seq"], onnx.TensorProto.INT64), tensor("mask", [1, "seq"])],
               [tensor("y", None)], path=model)
    r = run_stage("02_shapes_flops_bytes.py", "--model", model, "--results", tmp_path / "r",
                  "--shape-override", "ids=1x64 mask=1x32")
    assert_clean_error(r, "dim 'seq' is 64 in ids's given shape and 32 in mask's")
    r = run_stage("02_shapes_flops_bytes.py", "--model", model, "--results", tmp_path / "r",
                  "--shape-override", "ids=1x64 mask=1x64")
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("stage", MODEL_STAGES + ["04_critical_path.py"])
def test_a_results_path_that_is_a_file_a_seed_not_an_integer_and_commas_between_dims(tmp_path, good, stage):
    """--results a file: 02 and 01 crashed (01 after profiling); workload.yaml seed: abc crashed 01 (1.7 was cut to
    1); 'x=1,3,32,32' was read as pairs and 'bad --shape-override 3' named a fragment."""
    (tmp_path / "f").write_text("")
    assert_clean_error(run_stage(stage, "--model", good, "--results", tmp_path / "f" / "sub"), "f is a file, not a folder")
    if stage == "04_critical_path.py":
        return
    wl = tmp_path / "wl.yaml"
    for seed in ("abc", "1.7"):
        wl.write_text(f"seed: {seed}\n")
        r = run_stage(stage, "--model", good, "--results", tmp_path / "r", "--workload", wl)
        assert_clean_error(r, "seed must be an integer >= 0")
    r = run_stage(stage, "--model", good, "--results", tmp_path / "r", "--shape-override", "x=1,3,32,32")
    assert_clean_error(r, "'x=1,3,32,32': separate the dims with x")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("key, value, needle", [("mem_bw_bytes_per_s", "100 GB/s", "mem_bw_bytes_per_s must be a positive"),
                                                ("compute_units", 0, "compute_units must be a positive integer")])
def test_hardware_profile_figures_are_checked(tmp_path, key, value, needle):
    """Stage 09's configs/hardware/*.yaml: '100 GB/s' was a ValueError, compute_units 0 a ZeroDivisionError."""
    import shutil
    import yaml
    from conftest import REPO
    from lib.errors import StageError
    from lib.fx.hardware import load_profiles
    for f in (REPO / "configs" / "hardware").glob("*.yaml"):
        shutil.copy(f, tmp_path / f.name)
    path = tmp_path / "hailo8.yaml"
    doc = yaml.safe_load(path.read_text())
    doc[key] = value
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(StageError, match=f"hardware profile {path}: {needle}"):
        load_profiles(tmp_path)
