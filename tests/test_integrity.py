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


@pytest.mark.parametrize("batch", ["N", 4])
def test_make_gives_every_stage_one_spec_and_rebuilds_when_it_changes(tmp_path, batch):
    model = tmp_path / "net.onnx"
    batch_cnn(model, batch)
    rdir = tmp_path / "r"
    base = [f"MODEL={model}", f"R={rdir}", "RUNS=1", "SPLITS=1"]
    # a fixed batch is the model's: an override may only restate it; a symbolic batch takes any value
    sizes = (4, 4) if batch == 4 else (8, 2)
    for b in sizes:
        r = make("all", *base, f"SHAPE_ARGS=--shape-override 'x={b}x3x16x16'")
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        for meta in ("profile_meta.json", "metrics_meta.json", "validation_report.json"):
            assert meta_shapes(rdir, meta) == {"x": [b, 3, 16, 16]}, meta
    r = make("-n", "all", *base, f"SHAPE_ARGS=--shape-override 'x={sizes[1]}x3x16x16'")
    assert "02_shapes_flops_bytes.py" not in r.stdout                  # nothing changed: nothing to do
    # another system file, older than the results: 07 and what follows it re-run (make said "done" on the old
    # split figures), 01-05 do not
    other = tmp_path / "system.yaml"
    other.write_text((REPO / "configs" / "system.yaml").read_text())
    os.utime(other, (946684800, 946684800))
    r = make("-n", "all", *base, f"SYSTEM={other}", f"SHAPE_ARGS=--shape-override 'x={sizes[1]}x3x16x16'")
    assert f"--system {other}" in r.stdout and "08_export_splits.py" in r.stdout
    assert not any(s in r.stdout for s in ("01_profile_onnx.py", "03_merge", "05_energy")), r.stdout
    r = make("-n", "all", *base, "RUNS=2", f"SHAPE_ARGS=--shape-override 'x={sizes[1]}x3x16x16'")
    assert "01_profile_onnx.py" in r.stdout and "02_shapes_flops_bytes.py" not in r.stdout


def test_a_percent_sign_in_the_model_name_is_spelled_pct_in_its_results_folder(tmp_path):
    """EfficientWord-Net ships 'slim_93%_accuracy_72.7390%.onnx': a '%' in make's targets turned them into pattern
    rules and make deleted 7 results as intermediates. The stem says 'pct'; a '%' in R is refused in one line."""
    model = tmp_path / "slim_93%_acc.onnx"
    batch_cnn(model, 1)
    r = make("-n", "all", f"MODEL={model}")
    assert r.returncode == 0 and "--results results/slim_93pct_acc " in r.stdout, r.stderr
    r = make("-n", "all", f"MODEL={model}", f"R={tmp_path / 'r%'}")
    assert r.returncode == 2 and "make cannot take a '%' in the results folder" in r.stderr
    spaced = tmp_path / "my models" / "net 1.onnx"      # make splits its words: it said "not found" of a file that is there
    spaced.parent.mkdir()
    batch_cnn(spaced, 1)
    r = make("-n", "all", f"MODEL={spaced}")
    assert r.returncode == 2 and "has a space in its path, which make cannot take" in r.stderr, r.stderr
    # an npz or config with a space: 02 read "unrecognized arguments", make "No rule to make target"
    for var in ("INPUTS", "HOST"):
        r = make("-n", "all", f"MODEL={model}", f"{var}={tmp_path / 'my models' / 'x.yaml'}")
        assert r.returncode == 2 and f'{var}="{tmp_path}/my models/x.yaml" has a space' in r.stderr, r.stderr


def test_inputs_npz_fixes_the_batch_everywhere(tmp_path):
    model = tmp_path / "net.onnx"
    batch_cnn(model)
    npz = tmp_path / "feeds.npz"
    np.savez(npz, x=np.random.default_rng(0).standard_normal((3, 3, 16, 16)).astype(np.float32))
    rdir = tmp_path / "r"
    r = make("all", f"MODEL={model}", f"R={rdir}", "RUNS=1", "SPLITS=1", f"INPUTS={npz}")
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    for meta in ("profile_meta.json", "metrics_meta.json", "validation_report.json"):
        ident = json.loads((rdir / meta).read_text())["identity"]["inputs"]
        assert ident["input_shapes"] == {"x": [3, 3, 16, 16]} and ident["inputs_npz"]["path"] == str(npz)
    # a split that failed this run's validation (08 exits 1 and lists it): make all builds the report, then fails
    rep = json.loads((rdir / "validation_report.json").read_text())
    assert rep["failed_this_run"] == [] and (rdir / "report.html").exists()
    (rdir / "validation_report.json").write_text(json.dumps({**rep, "failed_this_run": ["b1", "splits/dag"]}))
    r = make("all", f"MODEL={model}", f"R={rdir}", "RUNS=1", "SPLITS=1", f"INPUTS={npz}")
    assert r.returncode == 2 and "FAILED split validation: b1, splits/dag" in r.stderr, r.stderr[-2000:]
    assert "11_report.py" in r.stdout and (rdir / "validation_report.json").exists()


def test_same_file_name_in_two_folders(tmp_path):
    a, b = tmp_path / "a" / "net.onnx", tmp_path / "b" / "net.onnx"
    a.parent.mkdir()
    b.parent.mkdir()
    batch_cnn(a, 1)
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="relu"), helper.make_node("Neg", ["y"], ["z"], name="neg")]
    make_model(nodes, [tensor("x", [1, 3, 16, 16])], [tensor("z", None)], path=b)
    rdir = tmp_path / "results_net"
    for m in (a, b):
        r = make("all", f"MODEL={m}", f"R={rdir}", "RUNS=1", "SPLITS=1")
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        for meta in ("metrics_meta.json", "profile_meta.json", "merge_meta.json", "critical_path_meta.json"):
            assert json.loads((rdir / meta).read_text())["identity"]["model"]["path"] == str(m)
    assert json.loads((rdir / "metrics_meta.json").read_text())["op_counts"] == {"Neg": 1, "Relu": 1}


def test_another_model_or_npz_behind_a_symlink_rebuilds(tmp_path):
    """MODEL and INPUTS through symlinks: another (older) file put behind a link re-runs the stages (make said "done"
    on the figures of the model it replaced: the stamp read the link's own size and time)."""
    import shutil
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    batch_cnn(a)
    make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [tensor("x", ["N", 3, 16, 16])],
               [tensor("y", None)], path=b)
    npz_a, npz_b = tmp_path / "a.npz", tmp_path / "b.npz"
    for f, n in ((npz_a, 2), (npz_b, 5)):
        np.savez(f, x=np.zeros((n, 3, 16, 16), np.float32))
    model_file, npz_file = tmp_path / "deployed.onnx", tmp_path / "deployed.npz"
    shutil.copy(a, model_file)
    shutil.copy(npz_a, npz_file)
    link, feeds = tmp_path / "cur.onnx", tmp_path / "cur.npz"
    link.symlink_to(model_file)
    feeds.symlink_to(npz_file)
    base = [f"MODEL={link}", f"R={tmp_path / 'r'}", "RUNS=1", "SPLITS=1", f"INPUTS={feeds}"]
    r = make("all", *base)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "02_shapes_flops_bytes.py" not in make("-n", "all", *base).stdout
    for src, dst in ((npz_b, npz_file), (b, model_file)):     # the links stay; the files behind them change
        shutil.copy(src, dst)
        os.utime(dst, (946684800, 946684800))                # older than any result
        assert "02_shapes_flops_bytes.py" in make("-n", "all", *base).stdout, dst
    assert make("all", *base).returncode == 0
    assert json.loads((tmp_path / "r" / "metrics_meta.json").read_text())["op_counts"] == {"Relu": 1}
    # nothing changed, nothing runs (the stamp read the change time for a while: 08's hard links into splits/
    # changed it, and every make all ran every stage again); CONTENT_ID (the zoo's sha256 of the files) is
    # part of the spec: a same-size copy with the old timestamps kept the old figures in the zoo
    assert "02_shapes_flops_bytes.py" not in make("-n", "all", *base).stdout
    # 03 run by hand with --no-profile beside 01's profile: make all merges the profile again (it ran 04-11 on the
    # predicted times), and re-runs nothing before 03
    assert run_stage("03_merge_profile_metrics.py", "--results", tmp_path / "r", "--no-profile").returncode == 0
    out = make("-n", "all", *base).stdout
    assert "03_merge_profile_metrics.py" in out and "02_shapes_flops_bytes.py" not in out and "01_profile" not in out
    assert "02_shapes_flops_bytes.py" in make("-n", "all", *base, "CONTENT_ID=0123abcd").stdout


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
