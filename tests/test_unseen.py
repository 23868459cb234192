"""Models nobody here has seen (issue 29): partial input files, validation that is right about right splits,
random ops made deterministic for validation, every kernel ORT inserts attributed. Real exports, real ORT."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest

from conftest import run_stage
from lib.onnx.inputs import InputSpec, make_feeds

torch = pytest.importorskip("torch")


def export_gru(path):
    """A GRU with its initial state as an input (seq_len and batch symbolic, batch shared by both inputs)."""
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gru, self.fc = torch.nn.GRU(8, 16), torch.nn.Linear(16, 4)

        def forward(self, x, h0):
            y, h = self.gru(x, h0)
            return self.fc(y), h
    torch.manual_seed(0)
    torch.onnx.export(M().eval(), (torch.randn(5, 2, 8), torch.zeros(1, 2, 16)), str(path), input_names=["x", "h0"],
                      output_names=["y", "h"], dynamic_axes={"x": {0: "seq_len", 1: "batch"}, "h0": {1: "batch"}},
                      dynamo=False)
    return path


@pytest.fixture(scope="module")
def gru(tmp_path_factory):
    d = tmp_path_factory.mktemp("gru")
    np.savez(d / "h0.npz", h0=np.zeros((1, 3, 16), np.float32))
    return export_gru(d / "gru.onnx"), d / "h0.npz"


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
