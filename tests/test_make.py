"""make rebuilds what changed, and only that: one input spec for every stage, another model or npz behind the same
path or link, a file name shared by two folders, an npz that fixes the batch (the results stay the model's and the
inputs')."""
import json
import os

import numpy as np
import pytest
from onnx import helper

from conftest import REPO, make_model, run_stage, tensor
from test_integrity import batch_cnn, make, meta_shapes


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
