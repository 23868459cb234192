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
    r = make("-n", "all", *base, "RUNS=2", f"SHAPE_ARGS=--shape-override 'x={sizes[1]}x3x16x16'")
    assert "01_profile_onnx.py" in r.stdout and "02_shapes_flops_bytes.py" not in r.stdout


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


def test_csv_writer_writes_what_pandas_writes(tmp_path):
    """lib.artifacts.write_csv (the fast writer every stage uses) gives pandas' to_csv(index=False) bytes:
    shortest-repr floats, NaN and None empty, quoting, nullable and float32 columns; and reads back the same."""
    import pandas as pd
    from lib.artifacts import read_csv, write_csv
    f = [0.1, 1024.0, -0.0, 1e16, 1.5e-5, 5e-324, float("inf"), float("nan"), 33587.968146796054, 2.0 ** 53]
    df = pd.DataFrame({
        "f64": f,
        "f32": np.array(f, dtype=np.float32),
        "i64": np.arange(len(f), dtype=np.int64) * (2 ** 40) - 3,
        "u8": np.arange(len(f), dtype=np.uint8),
        "flag": [True, False] * 5,
        "text": ["a,b", 'say "x"', "line\nbreak", None, float("nan"), "NA", "", "null", "plain", "é ünï"],
        "mixed": [1, "x", 2.5, None, True, "", 3, "y", 0.1, "z"],
        "nullable": pd.array([1, None, 3, 4, None, 6, 7, 8, 9, 10], dtype="Int64"),
        "cat": pd.Categorical(["u", "v"] * 5),
    })
    write_csv(df, tmp_path / "ours.csv")
    df.to_csv(tmp_path / "pandas.csv", index=False)
    assert (tmp_path / "ours.csv").read_bytes() == (tmp_path / "pandas.csv").read_bytes()
    write_csv(df.iloc[:0], tmp_path / "empty.csv")
    assert (tmp_path / "empty.csv").read_text() == ",".join(df.columns) + "\n"
    back = read_csv(tmp_path, "ours.csv")
    np.testing.assert_array_equal(back["f64"].to_numpy(), df["f64"].to_numpy())
    assert back["text"].tolist()[:3] == ["a,b", 'say "x"', "line\nbreak"]


def test_csv_writer_floats_of_every_magnitude(tmp_path, monkeypatch):
    """The float cells' text is orjson's: a run of columns that need no mending as one 2D block; else mended
    on the whole column where a third or more have an exponent (1e-7 -> 1e-07, 1e16 -> 1e+16), else by
    repr() of those cells found by position; repr() for the decade [1e-5, 1e-4) and inf; null -> empty. A
    column that is one text in a slice of rows (all NaN, -0.0, a flag no row sets, a constant name) is written
    once per slice, and a run of them as one. pandas' bytes for 20k random floats from 5e-324 to 1e308, both
    signs, NaN and inf among them, with slices of 4096 rows so that some columns are constant in some slices
    only."""
    import pandas as pd
    from lib import artifacts
    monkeypatch.setattr(artifacts, "CSV_SLICE", 4096)
    rng = np.random.default_rng(3)
    n = 20_000
    x = 10.0 ** rng.uniform(-323, 308, n) * rng.choice([-1.0, 1.0], n)
    x[rng.integers(0, len(x), 300)] = np.nan
    x[rng.integers(0, len(x), 30)] = np.inf
    x[:12] = [1e-7, 2.5e-100, 1e22, -3.3e-6, 1e-5, 9.99e-5, 1e-4, 1e16, 9999999999999998.0, -np.inf, 5e-324, 0.0]
    sparse = rng.uniform(0, 1000, n)        # a few exponents (fewer than a third of a slice): repr() by position
    sparse[rng.integers(0, n, 40)] = 10.0 ** rng.uniform(-12, -5, 40)
    sparse[rng.integers(0, n, 10)] = 10.0 ** rng.uniform(16, 30, 10)
    zeros = np.zeros(n)
    zeros[7000:7100] = -0.0                 # equal to 0.0, written apart: bitwise, never one text for both
    steps = np.repeat([1.0, np.nan, 1e-7, np.inf, -0.0], n // 5)     # one value per slice, in most slices
    plain = rng.uniform(-1e6, 1e6, (3, n))      # runs of floats written as one orjson block per slice
    plain[0, rng.integers(0, n, 500)] = np.nan
    plain[1] = np.round(plain[1])
    plain[2, :10] = [1e-4, 9999999999999998.0, -0.0, 0.0, np.nan, 1.5, 2.0 ** 53, -1e-4, 123456.789, 0.1]
    df = pd.DataFrame({"p0": plain[0], "p1": plain[1], "x": x, "p2": plain[2],
                       "decade": 10.0 ** rng.uniform(-6, -3, len(x)), "none": np.full(len(x), np.nan),
                       "n": np.arange(len(x)), "sparse": sparse, "zeros": zeros, "steps": steps,
                       "flag": np.arange(n) >= 9000, "one": np.full(n, 7), "name": ["a,b"] * n,
                       "missing": pd.Series([None] * n, dtype=object), "tail": np.full(n, np.nan)})
    artifacts.write_csv(df, tmp_path / "ours.csv")
    df.to_csv(tmp_path / "pandas.csv", index=False)
    assert (tmp_path / "ours.csv").read_bytes() == (tmp_path / "pandas.csv").read_bytes()
    const = df[["one", "name", "missing", "tail"]]      # every column one text: lines written as one
    artifacts.write_csv(const, tmp_path / "const.csv")
    const.to_csv(tmp_path / "const_pandas.csv", index=False)
    assert (tmp_path / "const.csv").read_bytes() == (tmp_path / "const_pandas.csv").read_bytes()


def test_stage_03_keeps_02s_lines_as_they_are(tmp_path):
    """read_csv_verbatim gives a CSV's lines for write_csv to put first (03 adds its columns to 02's): the
    bytes of formatting them again; None when lines are not rows (a cell with a line break, blank lines, \\r\\n
    line ends) or a header pandas renames (a column named twice). A formatted head that is not the table's is
    refused. read_csv (under it) keeps an empty text cell "" and a node called NA; a number's empty cell is NaN."""
    import pandas as pd
    from lib.artifacts import csv_row_texts, read_csv_verbatim, write_csv
    df = pd.DataFrame({"node": ["a,b", 'say "x"', "NA", "", "null"], "flops": [0.1, np.nan, 1e-7, 2.0, 3.0],
                       "act_in_bytes": [1, 2, 3, 4, 5], "layer": ["", "l1", "", "l,2", "é"], "ok": [True, False] * 2 + [True]})
    write_csv(df, tmp_path / "m.csv")
    back, head = read_csv_verbatim(tmp_path, "m.csv")
    assert back["node"].tolist() == df["node"].tolist() and back["layer"].tolist() == df["layer"].tolist()
    assert np.isnan(back["flops"][1]) and head == (list(df.columns), (tmp_path / "m.csv").read_text().splitlines()[1:])
    more = back.assign(t_us=[1.5, np.nan, 3.0, 4.0, 5.0], bound=["memory"] * 5)
    write_csv(more, tmp_path / "verbatim.csv", head=head)
    write_csv(more, tmp_path / "formatted.csv")
    assert (tmp_path / "verbatim.csv").read_bytes() == (tmp_path / "formatted.csv").read_bytes()
    with pytest.raises(ValueError):
        write_csv(more[["flops", *df.columns.drop("flops"), "t_us"]], tmp_path / "x.csv", head=head)
    with pytest.raises(ValueError):
        write_csv(more.iloc[1:], tmp_path / "x.csv", head=head)
    assert csv_row_texts(more[["node", "flops"]]) == ['"a,b",0.1', '"say ""x""",', "NA,1e-07", ",2.0", "null,3.0"]
    text = (tmp_path / "m.csv").read_text()
    for name, bad in [("break", text.replace("NA", '"N\nA"')), ("blank", text.replace("\nnull", '\n\n"null"')),
                      ("crlf", text.replace("\n", "\r\n")), ("columns", text.replace("layer", "flops", 1))]:
        (tmp_path / f"{name}.csv").write_text(bad, newline="")
        frame, none = read_csv_verbatim(tmp_path, f"{name}.csv")
        assert none is None and len(frame) == 5, name


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
