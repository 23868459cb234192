"""Results always belong to the model and the inputs that made them: one input spec for every stage, identity in
every meta file, refused mismatches (exit 2, one line), make rebuilding what changed, nothing written outside
results/."""
import json
import os
import subprocess

import numpy as np
import onnx
import pytest
from onnx import helper

from conftest import REPO, costs, make_model, run_stage, tensor, weight


def batch_cnn(path, batch="N"):
    """Conv -> Relu -> Conv -> GlobalAveragePool with a symbolic (or fixed) batch dim."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("GlobalAveragePool", ["c2"], ["y"], name="gap")]
    return make_model(nodes, [tensor("x", [batch, 3, 16, 16])], [tensor("y", None)],
                      [weight("w1", (8, 3, 3, 3)), weight("w2", (8, 8, 3, 3), seed=1)], path=path)


def make(*args, cwd=REPO):
    return subprocess.run(["make", "--no-print-directory", *args], cwd=cwd, capture_output=True, text=True, timeout=900)


def meta_shapes(rdir, name):
    return json.loads((rdir / name).read_text())["identity"]["inputs"]["input_shapes"]


def assert_clean_error(r, *needles):
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), (r.returncode, r.stderr)
    for n in needles:
        assert n in lines[0], lines[0]


def test_refused_mismatches(tmp_path):
    model = tmp_path / "net.onnx"
    batch_cnn(model, 1)
    rdir = tmp_path / "r"
    costs(model, rdir)
    assert run_stage("04_critical_path.py", "--model", model, "--results", rdir).returncode == 0
    # 01 re-run by hand after 03: 04 refuses the merged table that predates it
    assert run_stage("01_profile_onnx.py", "--model", model, "--results", rdir, "--runs", "1").returncode == 0
    assert_clean_error(run_stage("04_critical_path.py", "--model", model, "--results", rdir),
                       "merge_meta.json", "re-run 03_merge_profile_metrics.py")
    assert run_stage("03_merge_profile_metrics.py", "--results", rdir).returncode == 0
    # 01 and 02 made for other inputs: 03 refuses to join them
    other = tmp_path / "other"
    costs(model, other)
    r = run_stage("01_profile_onnx.py", "--model", model, "--results", other, "--runs", "1",
                  "--shape-override", "x=1x3x16x16")
    assert r.returncode == 0, r.stderr
    sym = tmp_path / "sym.onnx"
    batch_cnn(sym)
    assert run_stage("02_shapes_flops_bytes.py", "--model", sym, "--results", other, "--shape-override",
                     "x=2x3x16x16").returncode == 0
    assert_clean_error(run_stage("03_merge_profile_metrics.py", "--results", other), "belongs to")
    # an explicit spec that disagrees with 02's, and a mistyped model path
    assert run_stage("07_split_candidates.py", "--model", model, "--results", rdir).returncode == 0
    assert_clean_error(run_stage("07_split_candidates.py", "--model", sym, "--results", rdir), "holds results of")
    for stage in ("04_critical_path.py", "07_split_candidates.py", "08_export_splits.py", "10_hailo_parse.py"):
        assert_clean_error(run_stage(stage, "--model", tmp_path / "nope.onnx", "--results", rdir), "not found")
    # a table that is not the one its meta was written with (cut short; another model's copied in): refused
    # (the report showed another model's energy.csv as this one's, "10 of 10 sections complete")
    for stage in ("04_critical_path.py", "05_energy_estimate.py"):
        assert run_stage(stage, "--model", model, "--results", rdir).returncode == 0
    energy = (rdir / "energy.csv").read_bytes()
    (rdir / "energy.csv").write_bytes(energy[:200])
    assert_clean_error(run_stage("11_report.py", "--results", rdir, "--no-index"), "energy.csv is not the table "
                       "energy_meta.json was written with", "re-run 05_energy_estimate.py")
    (rdir / "energy.csv").write_bytes(energy)
    (rdir / "ops_profile.csv").write_bytes((other / "ops_profile.csv").read_bytes())
    assert_clean_error(run_stage("04_critical_path.py", "--model", model, "--results", rdir),
                       "ops_profile.csv is not the table merge_meta.json was written with")


def test_files_follow_the_umask_and_nothing_lands_in_the_working_directory(tmp_path):
    # a model ONNX's own inference leaves unshaped (a Reshape to a shape computed at run time) sends the
    # chain through ORT's symbolic inference, which would drop sym_shape_infer_temp.onnx into the cwd
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("ReduceProd", ["s"], ["n"], name="prod", keepdims=1),
             helper.make_node("Reshape", ["x", "n"], ["y"], name="reshape")]
    model = tmp_path / "m.onnx"
    make_model(nodes, [tensor("x", ["N", 3])], [tensor("y", None)], path=model)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env_umask = os.umask(0o027)
    try:
        r = subprocess.run([str(REPO / ".venv/bin/python"), str(REPO / "02_shapes_flops_bytes.py"), "--model",
                            str(model), "--results", str(tmp_path / "r"), "--shape-override", "x=2x3"],
                           cwd=cwd, capture_output=True, text=True)
    finally:
        os.umask(env_umask)
    assert r.returncode == 0, r.stderr
    assert list(cwd.iterdir()) == []
    mode = (tmp_path / "r" / "ops_metrics.csv").stat().st_mode & 0o777
    assert mode == 0o640


def test_ort_trace_and_optimized_graph_are_kept(tmp_path):
    model = tmp_path / "net.onnx"
    batch_cnn(model, 1)
    rdir = tmp_path / "r"
    assert run_stage("01_profile_onnx.py", "--model", model, "--results", rdir, "--runs", "2").returncode == 0
    trace = json.loads((rdir / "profile" / "ort_trace.json").read_text())
    assert any(e.get("cat") == "Node" for e in trace)
    opt = onnx.load(str(rdir / "profile" / "ort_optimized.onnx"), load_external_data=False)
    assert len(opt.graph.node) >= 1 and (rdir / "profile" / "ort_optimized.onnx").stat().st_size < 100_000


def test_csv_round_trip(tmp_path):
    """The CSV contract: read_csv(write_csv(df)) gives df back, whatever library writes the bytes: NaN, inf,
    -inf, -0.0 (its sign too), 1e-5, 2^53, a float's shortest digits, the smallest subnormal; ints past 2^53;
    flags; text that is empty, "NA", "null", "nan", holds a comma, a quote, a line break or non-ASCII. A
    number's empty cell is NaN, a text column's empty cell is "" (never NaN: a layer would print as "nan")."""
    import pandas as pd
    from lib.artifacts import read_csv, write_csv
    f = [np.nan, np.inf, -np.inf, -0.0, 1e-5, 2.0**53, 0.1, 33587.968146796054, 5e-324, 1e22, 1.5e-7, 1e16]
    n = len(f)
    df = pd.DataFrame({
        "node": pd.Series(["", "NA", "null", "nan", "a,b", 'say "x"', "line\nbreak", "None", "\u00e9", "x", "NaN",
                           "n/a"], dtype=object),
        "flops": f, "macs": np.arange(n, dtype=np.int64) * 2**40 + 2**53 + 1, "flag": [True, False] * (n // 2),
        "empty": np.full(n, np.nan), "layer": pd.Series([""] * n, dtype=object),
    })
    write_csv(df, tmp_path / "t.csv")
    back = read_csv(tmp_path, "t.csv")
    pd.testing.assert_frame_equal(back, df)
    assert np.signbit(back["flops"][3]) and back["flops"].to_numpy().tobytes() == df["flops"].to_numpy().tobytes()
    write_csv(df.iloc[:0], tmp_path / "empty.csv")      # the header alone
    assert read_csv(tmp_path, "empty.csv").columns.tolist() == df.columns.tolist()


def test_csv_writer_takes_objects_nullable_and_categorical_columns(tmp_path):
    """Columns polars does not take as they are become text (missing values empty): objects mixing text,
    numbers, None and NaN; pandas' nullable ints and its str dtype; categoricals."""
    import pandas as pd
    from lib.artifacts import read_csv, write_csv
    df = pd.DataFrame({"mixed": [1, "x", 2.5, None, np.nan], "nullable": pd.array([1, None, 3, 4, 5], dtype="Int64"),
                       "s": pd.array(["a", None, "", "b", "c"], dtype="string"), "cat": pd.Categorical(["u", "v"] * 2 + ["u"])})
    write_csv(df, tmp_path / "t.csv")
    back = read_csv(tmp_path, "t.csv")
    assert back["mixed"].tolist()[:3] == ["1", "x", "2.5"] and back["mixed"][3:].isna().all()
    assert back["nullable"].tolist()[0] == 1 and np.isnan(back["nullable"][1]) and back["cat"].tolist() == list("uvuvu")
    # text with a missing value first (stage 10: an unsupported partition's empty cell before an ok one's text):
    # polars refused the column, 10 exited with a traceback and left the previous run's table
    write_csv(pd.DataFrame({"boundary": [1, 2], "reason": [None, "Sigmoid"]}), tmp_path / "first_missing.csv")
    assert read_csv(tmp_path, "first_missing.csv")["reason"].tolist() == ["", "Sigmoid"]
    assert back["s"].tolist()[0] == "a" and back["s"].isna().tolist() == [False, True, True, False, False]


def test_constants_found_before_inference_are_the_graphs(tmp_path):
    """prepare() finds the constant tensors on the graph's structure, before inference: those of the final graph."""
    from lib.onnx.graph import constant_tensors
    from lib.onnx.inputs import InputSpec
    from lib.onnx.loading import prepare
    batch_cnn(tmp_path / "cnn.onnx")
    an = prepare(tmp_path / "cnn.onnx", InputSpec({"x": [4, 3, 16, 16]}))
    assert an.consts == {"w1", "w2"} == constant_tensors(an.graph)


def test_model_strict_inference_refuses_gives_one_line(tmp_path):
    """A model onnx's strict inference rejects, and ONNX Runtime too: one line naming the rule."""
    from lib.errors import StageError
    from lib.onnx.inputs import InputSpec
    from lib.onnx.loading import prepare
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]      # 3 x 5 @ 7 x 2: cannot multiply
    path = tmp_path / "bad.onnx"
    make_model(nodes, [tensor("x", [3, 5])], [tensor("y", None)], [weight("w", (7, 2))], path=path)
    with pytest.raises(StageError) as e:
        prepare(path, InputSpec())
    assert str(e.value).startswith("the model is invalid") and "Incompatible dimensions" in str(e.value)


@pytest.mark.parametrize("names", [["a", "", "b\u00e9", "\u65e5\u672c", "c"], ["x\ny", "", "z"], [""], []])
def test_graph_arrays_names_survive_the_npz(tmp_path, names):
    """graph.npz keeps names as UTF-8 bytes + offsets; they load back as they were: empty, non-ASCII, and a
    name holding a line break (which the one-pass decoding splits on: then it decodes them one by one)."""
    from lib.onnx.graph import GraphArrays
    z = np.zeros(len(names), dtype=np.int64)
    a = GraphArrays(names=np.array(names, dtype=object), t_names=np.array(names[::-1], dtype=object), t_prod=z,
                    t_nbytes=z.astype(float), t_const=z.astype(bool), t_output=z.astype(bool),
                    cons_ptr=np.zeros(len(names) + 1, dtype=np.int64), cons=z[:0],
                    in_ptr=np.zeros(len(names) + 1, dtype=np.int64), in_t=z[:0], run_id="r1")
    a.save(tmp_path / "g.npz")
    b = GraphArrays.load(tmp_path / "g.npz")
    assert b.names.tolist() == names and b.t_names.tolist() == names[::-1] and b.run_id == "r1"


def test_energy_and_plots_refuse_a_host_other_than_the_one_03_used(tmp_path):
    """05 and 06 run by hand after the host file changed: the page showed energy computed with one e_flop and
    printed with the other (03's)."""
    model, rdir = tmp_path / "net.onnx", tmp_path / "r"
    batch_cnn(model, 1)
    costs(model, rdir)
    other = tmp_path / "host.yaml"
    other.write_text((REPO / "configs" / "host.yaml").read_text().replace("avg_power_w:", "avg_power_w: 41.0 #", 1))
    for stage in ("04_critical_path.py", "05_energy_estimate.py"):
        assert run_stage(stage, "--model", model, "--results", rdir).returncode == 0
    for stage in ("05_energy_estimate.py", "06_plots.py"):
        assert_clean_error(run_stage(stage, "--model", model, "--results", rdir, "--host", other),
                           f"host config {other} is not the one 03 used", "re-run 03_merge_profile_metrics.py")


def test_stages_run_by_hand_for_two_input_specs_name_both_and_a_way_out(tmp_path):
    """02 for batch 1, 01 by hand for batch 2: the error told to re-run 01 (make all does this), which make did
    not do (its stamps cannot see a stage run by hand)."""
    model, rdir = tmp_path / "net.onnx", tmp_path / "r"
    batch_cnn(model)
    costs(model, rdir)
    assert run_stage("01_profile_onnx.py", "--model", model, "--results", rdir, "--runs", "1", "--sessions", "1",
                     "--no-host-reference", "--shape-override", "x=2x3x16x16").returncode == 0
    assert_clean_error(run_stage("03_merge_profile_metrics.py", "--results", rdir), "was made for inputs",
                       "re-run 02_shapes_flops_bytes.py and 01_profile_onnx.py with one input spec, or remove")
