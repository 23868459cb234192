"""Stage 10 against a fake hailo_sdk_client (tests only): call contract, per-arch venvs, cache, 07 pruning,
and the static fallback on real exports."""
import json
import stat
import sys

import pandas as pd
import pytest

from conftest import REPO, bert_style, costs, run_stage, small_cnn

FAKE = REPO / "tests" / "fake_hailo"


@pytest.fixture
def env(tmp_path, monkeypatch):
    """Isolated cache and venv folders; no compiler importable unless a test adds the fake."""
    monkeypatch.setenv("NN_PERF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("NN_PERF_HAILO_VENVS", str(tmp_path / "venvs"))
    monkeypatch.setenv("HAILO_FAKE_LOG", str(tmp_path / "calls.jsonl"))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    return tmp_path


def calls(tmp_path):
    log = tmp_path / "calls.jsonl"
    if not log.exists():
        return []
    return [c for c in map(json.loads, log.read_text().splitlines()) if c["call"] == "translate_onnx_model"]


def prepared(tmp_path):
    model = tmp_path / "cnn.onnx"
    small_cnn(model)
    rdir = tmp_path / "r"
    costs(model, rdir)
    r = run_stage("07_split_candidates.py", "--model", model, "--results", rdir, "--min-compute-share", "0",
                  "--dedup-window", "0", "--skip-span", "100")
    assert r.returncode == 0, r.stderr
    return model, rdir


def test_call_contract_cache_and_pruning(env, monkeypatch):
    model, rdir = prepared(env)
    monkeypatch.setenv("PYTHONPATH", str(FAKE))
    monkeypatch.setenv("HAILO_FAKE_REJECT", "Conv")
    # order: conv1(0) bn1 relu1(2) conv2(3) add relu2 gap flatten fc; the right part of b <= 2 holds conv2
    r = run_stage("10_hailo_parse.py", "--model", model, "--results", rdir, "--backend", "local", "--boundary", "2", "4")
    assert r.returncode == 0, r.stderr
    made = calls(env)
    assert len(made) == 4 and {c["hw_arch"] for c in made} == {"hailo8", "hailo10"}
    c = next(c for c in made if c["net_name"] == "b2_right" and c["hw_arch"] == "hailo8")
    assert c["model"] == str(rdir / "splits" / "b2" / "part2.onnx")
    assert c["start_node_names"] == ["r1"] and c["net_input_shapes"] == {"r1": [1, 16, 32, 32]}
    assert c["end_node_names"] == ["fc"] and c["extra_kwargs"] == []
    df = pd.read_csv(rdir / "hailo_feasibility.csv", keep_default_na=False)
    row = df[(df["boundary"] == 2) & (df["arch"] == "hailo8")].iloc[0]
    assert (row["status"], row["op"], row["node"], row["source"]) == ("unsupported", "Conv", "conv2", "dfc")
    assert (df[df["boundary"] == 4]["status"] == "ok").all() and not df["cached"].any()
    # second run: everything from the cache, no compiler call
    r = run_stage("10_hailo_parse.py", "--model", model, "--results", rdir, "--backend", "local", "--boundary", "2", "4")
    assert r.returncode == 0 and len(calls(env)) == 4
    assert pd.read_csv(rdir / "hailo_feasibility.csv")["cached"].all()
    r = run_stage("10_hailo_parse.py", "--model", model, "--results", rdir, "--backend", "local", "--boundary", "2",
                  "--arch", "hailo8", "--clear-cache")
    assert r.returncode == 0 and len(calls(env)) == 5 and "cleared 4" in r.stdout
    # 07 prunes what Hailo rejected, with the reason
    r = run_stage("07_split_candidates.py", "--model", model, "--results", rdir, "--min-compute-share", "0",
                  "--dedup-window", "0", "--skip-span", "100", "--feasibility", rdir / "hailo_feasibility.csv")
    assert r.returncode == 0, r.stderr
    bd = pd.read_csv(rdir / "boundaries.csv", keep_default_na=False).set_index("boundary")
    assert bd.loc[2, "pruned"] and bd.loc[2, "reason"] == "hailo hailo8: unsupported Conv at conv2 (dfc)"
    assert not bd.loc[4, "pruned"]
    prune = json.loads((rdir / "candidate_pruning.json").read_text())
    assert prune["feasibility"]["arch"] == "hailo8"
    assert any(c["boundary"] == 2 and c["reasons"][0].startswith("hailo") for c in prune["candidates"])
    # a feasibility CSV without its meta, or of another model, is refused
    other = env / "elsewhere"
    other.mkdir()
    (other / "hailo_feasibility.csv").write_bytes((rdir / "hailo_feasibility.csv").read_bytes())
    args07 = ("07_split_candidates.py", "--model", model, "--results", rdir, "--feasibility", other / "hailo_feasibility.csv")
    r = run_stage(*args07)
    assert r.returncode == 2 and "no readable hailo_meta.json" in r.stderr, r.stderr
    meta = json.loads((rdir / "hailo_meta.json").read_text())
    meta["identity"]["model"]["graph_sha256"] = "0" * 64
    (other / "hailo_meta.json").write_text(json.dumps(meta))
    r = run_stage(*args07)
    assert r.returncode == 2 and "another model or input spec" in r.stderr, r.stderr


def test_verdicts_of_this_model_and_spec_only(env, monkeypatch):
    """hunt10's: a part another model left under the same path was parsed in its place; symbolic dims reached the
    parser as 0; an ok row before an unsupported one crashed the CSV writer; a compiler crash pruned like a
    verdict; 07 took an arch 10 never checked (pruning nothing) and ranked first a boundary 10 never parsed."""
    import onnx
    model, rdir = prepared(env)
    monkeypatch.setenv("PYTHONPATH", str(FAKE))
    monkeypatch.setenv("HAILO_FAKE_REJECT", "Conv")
    args10 = ("10_hailo_parse.py", "--model", model, "--results", rdir, "--backend", "local", "--arch", "hailo8")
    args07 = ("07_split_candidates.py", "--model", model, "--results", rdir, "--min-compute-share", "0",
              "--dedup-window", "0", "--skip-span", "100", "--feasibility", rdir / "hailo_feasibility.csv")
    r = run_stage(*args10, "--boundary", "4", "2")
    assert r.returncode == 0, r.stderr
    assert pd.read_csv(rdir / "hailo_feasibility.csv")["status"].tolist() == ["ok", "unsupported"]
    r = run_stage(*args07, "--feasibility-arch", "hailo10")
    assert r.returncode == 2 and "has no rows for hailo10 (it checked hailo8)" in r.stderr, r.stderr
    r = run_stage(*args07)
    assert r.returncode == 0 and "were not parsed by stage 10 (it checked [2, 4])" in r.stdout, r.stdout
    unchecked = json.loads((rdir / "candidate_pruning.json").read_text())["feasibility"]["unchecked_top"]
    assert unchecked and not {2, 4} & set(unchecked)
    # another model over the same path, its old time kept, a batch dim N given as 4: 10 parses its own part
    m = onnx.load(str(model))
    next(n for n in m.graph.node if n.name == "conv2").name = "conv2_v2"
    for vi in (m.graph.input[0], m.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].dim_param = "N"
    before = model.stat()
    onnx.save(m, str(model))
    import os
    os.utime(model, ns=(before.st_atime_ns, before.st_mtime_ns))
    spec = ("--shape-override", "x=4x3x32x32")
    costs(model, rdir, *spec)
    assert run_stage(*args07[:-2], *spec).returncode == 0
    r = run_stage(*args10, "--boundary", "2", *spec)
    assert r.returncode == 0, r.stderr
    assert pd.read_csv(rdir / "hailo_feasibility.csv", keep_default_na=False)["node"].tolist() == ["conv2_v2"]
    assert calls(env)[-1]["net_input_shapes"] == {"r1": [4, 16, 32, 32]}          # was [0, 16, 32, 32]
    # a compiler that crashes: status error, said, and no boundary pruned for it
    crash = env / "venvs" / "hailo8" / "bin" / "python"
    crash.parent.mkdir(parents=True)
    crash.write_text("#!/bin/sh\necho Segmentation fault >&2\nexit 139\n")
    crash.chmod(0o755)
    r = run_stage(*args10[:-4], "--backend", "venv", "--arch", "hailo8", "--boundary", "2", *spec)
    assert r.returncode == 0 and "WARNING: the compiler failed on 1" in r.stdout, r.stdout + r.stderr
    r = run_stage(*args07, *spec)
    assert r.returncode == 0, r.stderr
    assert not pd.read_csv(rdir / "boundaries.csv").set_index("boundary").loc[2, "pruned"]


def fake_venv(root, arch, version):
    py = root / arch / "bin" / "python"
    py.parent.mkdir(parents=True)
    py.write_text(f"#!/bin/sh\nHAILO_FAKE_VENV={arch} HAILO_FAKE_VERSION={version} PYTHONPATH={FAKE} "
                  f"exec {sys.executable} \"$@\"\n")
    py.chmod(py.stat().st_mode | stat.S_IEXEC)


def test_per_arch_venvs(env):
    model, rdir = prepared(env)
    fake_venv(env / "venvs", "hailo8", "3.33.0")
    fake_venv(env / "venvs", "hailo10", "5.2.0")
    r = run_stage("10_hailo_parse.py", "--model", model, "--results", rdir, "--backend", "venv", "--boundary", "4")
    assert r.returncode == 0, r.stderr
    made = calls(env)
    assert sorted((c["hw_arch"], c["venv"], c["version"]) for c in made) == [
        ("hailo10", "hailo10", "5.2.0"), ("hailo8", "hailo8", "3.33.0")]
    df = pd.read_csv(rdir / "hailo_feasibility.csv", dtype={"compiler_version": str}).set_index("arch")
    assert df.loc["hailo8", "compiler_version"] == "3.33.0" and df.loc["hailo10", "compiler_version"] == "5.2.0"
    # no venv for an arch: a clear error naming the provisioning command
    (env / "venvs" / "hailo10" / "bin" / "python").unlink()
    r = run_stage("10_hailo_parse.py", "--model", model, "--results", rdir, "--backend", "venv", "--boundary", "4")
    assert r.returncode == 2 and "['hailo10']" in r.stderr and "--provision" in r.stderr


def test_provisioning_checks(env):
    r = run_stage("10_hailo_parse.py", "--provision", "--arch", "hailo8", "--python", sys.executable)
    if sys.version_info >= (3, 10):
        assert r.returncode == 2 and "no vendor wheels in" in r.stderr and "vendor/hailo/hailo8" in r.stderr
    old = env / "python38"
    old.write_text("#!/bin/sh\necho 3 8\n")
    old.chmod(0o755)
    r = run_stage("10_hailo_parse.py", "--provision", "--python", old)
    assert r.returncode == 2 and "needs Python >= 3.10" in r.stderr


def test_static_fallback_names_unsupported_ops(env, tv_models):
    # resnet18: every op of its right parts is in the table
    model, rdir = tv_models("resnet18"), env / "rn"
    costs(model, rdir)
    assert run_stage("07_split_candidates.py", "--model", model, "--results", rdir).returncode == 0
    r = run_stage("10_hailo_parse.py", "--model", model, "--results", rdir, "--top-k", "3")
    assert r.returncode == 0, r.stderr
    assert "the compiler was not run" in r.stdout
    df = pd.read_csv(rdir / "hailo_feasibility.csv")
    assert (df["source"] == "static").all() and (df["status"] == "ok").all() and len(df) == 6
    # BERT-style: the embedding Gather everywhere; LayerNormalization and Erf on hailo8 only
    model, rdir = bert_style(env / "bert.onnx"), env / "bert"
    costs(model, rdir)
    assert run_stage("07_split_candidates.py", "--model", model, "--results", rdir).returncode == 0
    r = run_stage("10_hailo_parse.py", "--model", model, "--results", rdir, "--boundary", "80", "--side", "left")
    assert r.returncode == 0, r.stderr
    assert "hailo8: 0/1 partitions ok; unsupported ops: Erf, Gather, LayerNormalization" in r.stdout
    assert "hailo10: 0/1 partitions ok; unsupported ops: Gather" in r.stdout


def test_bad_input(env):
    model = env / "cnn.onnx"
    small_cnn(model)
    costs(model, env / "none")
    r = run_stage("10_hailo_parse.py", "--model", model, "--results", env / "none")
    assert r.returncode == 2 and r.stderr.startswith("error:") and "run 07_split_candidates.py first" in r.stderr
    model, rdir = prepared(env)
    r = run_stage("10_hailo_parse.py", "--model", model, "--results", rdir, "--boundary", "42")
    assert r.returncode == 2 and "out of range" in r.stderr and "Traceback" not in r.stderr
    r = run_stage("10_hailo_parse.py", "--model", model, "--results", rdir, "--top-k", "0")
    assert r.returncode == 2 and "--top-k must be >= 1" in r.stderr
    r = run_stage("07_split_candidates.py", "--model", model, "--results", rdir, "--feasibility", env / "nope.csv")
    assert r.returncode == 2 and "run 10_hailo_parse.py first" in r.stderr
