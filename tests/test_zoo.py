"""make zoo (zoo.py, lib/zoo/): a real Dask cluster on 127.0.0.1 (a scheduler and two workers, subprocesses
stopped by pid), one worker killed mid-run, the local engine, the content keys, bad input."""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from onnx import helper

from conftest import REPO, costs, make_model, run_stage, system_yaml, tensor, weight
from lib.errors import StageError
from lib.host import load_host
from lib.latency import host_reference
from lib.latency.kernel_model import load_kernel_model
from lib.report.page import BROWSER_ARGS, build_index
from lib.zoo.engines import stop_process_group
from lib.zoo.remote import error_line, make_command
from lib.zoo.run import plan
from lib.zoo.spec import code_version, configs_version, content_id, entry_key, load_zoo
from lib.zoo.table import write_table

DASK = str(REPO / ".venv" / "bin" / "dask")


def conv_net(path):
    """Conv 3->4, 3x3, pad 1 over 8x8, Relu: 4*3*9*64 = 6912 MACs per image; weights 4*3*9*4 = 432 B."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]
    return make_model(nodes, [tensor("x", ["N", 3, 8, 8])], [tensor("y", None)], [weight("w", (4, 3, 3, 3))], path=path)


def mlp(path):
    """x[B,16] @ W[16,8] + b, Relu: 128 MACs per row; weights (128 + 8) * 4 = 544 B."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Add", ["m", "b"], ["a"], name="add"),
             helper.make_node("Relu", ["a"], ["y"], name="relu")]
    return make_model(nodes, [tensor("x", ["B", 16])], [tensor("y", None)],
                      [weight("w", (16, 8)), weight("b", (8,), seed=1)], path=path)


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    """Two real entries (a batch-2 conv; an MLP fed by an npz of 3 rows) and two bad ones."""
    d = tmp_path_factory.mktemp("zoo")
    conv_net(d / "conv.onnx")
    mlp(d / "mlp.onnx")
    np.savez(d / "rows.npz", x=np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32))
    doc = {"models": [{"model": str(d / "conv.onnx"), "batches": [2]},
                      {"model": str(d / "mlp.onnx"), "inputs_npz": str(d / "rows.npz")},
                      {"model": str(d / "gone.onnx")},
                      {"model": str(d / "conv.onnx"), "shape_override": "x=2x3xeight"}]}
    (d / "zoo.yaml").write_text(yaml.safe_dump(doc))
    return d


def zoo_py(*args, results, **kw):
    return run_stage("zoo.py", "--zoo", *args, "--results", results, "--runs", "1", "--splits", "1", **kw)


def check_rows(root: Path) -> pd.DataFrame:
    """Every row right: hand-computed MACs and weights, the bad entries failed with their own one-line reason."""
    t = pd.read_csv(root / "zoo.csv").set_index("stem")
    assert list(t.index) == ["conv@b2", "mlp@rows", "gone", "conv@x2x3xeight"]
    assert list(t["status"]) == ["ok", "ok", "failed", "failed"]
    assert t.loc["conv@b2", "macs"] == 2 * 6912 and t.loc["conv@b2", "weight_bytes"] == 432
    assert t.loc["mlp@rows", "macs"] == 3 * 128 and t.loc["mlp@rows", "weight_bytes"] == 544
    assert t.loc["gone", "error"].endswith("gone.onnx not found")
    assert t.loc["conv@x2x3xeight", "error"].startswith("bad shape_override 'x=2x3xeight'")
    for stem in ("conv@b2", "mlp@rows"):
        assert t.loc[stem, "session_latency_us"] > 0 and t.loc[stem, "kernel_time_coverage"] > 0
        assert t.loc[stem, "peak_activation_bytes"] > 0 and "01=" in t.loc[stem, "run_ids"]
        # the CI's CPU may not be the committed calibration's: the row says so exactly when 03's check does
        note = t.loc[stem, "other_cpu_note"]
        assert (isinstance(note, str) and "was calibrated on a" in note) == bool(host_reference.other_cpu(
            host_reference.calibrated_cpu(REPO / "configs" / "latency_model.yaml"), "latency model"))
        assert (root / stem / "report.html").exists()
    assert not list(root.glob(".zoo-*")), "a temporary folder was left behind"
    page = (root / "index.html").read_text()
    assert 'table class="index zoo"' in page and 'href="conv@b2/report.html"' in page
    return t


# ---------------------------------------------------------------- a Dask cluster of two workers on 127.0.0.1

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args, log: Path) -> subprocess.Popen:
    # its own session: stopping it by pid (its process group) also stops the worker's nanny child and its makes
    return subprocess.Popen([DASK, *args], cwd=REPO, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop(p: subprocess.Popen) -> None:
    stop_process_group(p, timeout=10)


def wait_for(cond, timeout: float, what: str) -> None:
    t0 = time.time()
    while not cond():
        assert time.time() - t0 < timeout, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("cluster")
    addr = f"tcp://127.0.0.1:{free_port()}"
    procs = [start(["scheduler", "--host", "127.0.0.1", "--port", addr.rsplit(":", 1)[1], "--no-dashboard"],
                   d / "scheduler.log")]
    try:
        wait_for(lambda: "Scheduler at" in (d / "scheduler.log").read_text(), 60, "the scheduler")
        for i in (1, 2):
            procs.append(start(["worker", addr, "--resources", "host_cpu=1", "--nthreads", "1", "--no-dashboard"],
                               d / f"worker{i}.log"))
        wait_for(lambda: (d / "scheduler.log").read_text().count("Register worker") >= 2, 60, "two workers")
        yield addr, procs
    finally:
        for p in reversed(procs):
            stop(p)


def test_calibrate_device_on_a_dask_worker_gives_07_its_kernel_model(zoo, cluster, tmp_path):
    """make calibrate-device: the calibration (--quick) runs on the worker offering the resource, and the device's
    host file, latency model and kernel model (saved with the host figures it was fitted against) come back into
    --device-dir, this host's files untouched; 07 then models that device with its kernel model. A resource no
    worker offers, or --scheduler without --device-dir, is a one-line error."""
    addr, _ = cluster
    dev, before = tmp_path / "npu", (REPO / "configs" / "host.yaml").read_bytes()
    base = [sys.executable, "-m", "lib.latency.calibrate", "--scheduler", addr, "--work-root", str(tmp_path / "work")]
    r = subprocess.run([*base, "--quick", "--device-dir", str(dev)], cwd=REPO, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (REPO / "configs" / "host.yaml").read_bytes() == before
    assert "make calibrate: " in (dev / "calibrate.log").read_text()
    km = load_kernel_model(dev / "latency_model.yaml")
    host = load_host(dev / "host.yaml")
    assert km.host["peak_flops_per_s"] == host["peak_flops_per_s"]
    assert km.host["bandwidth_bytes_per_s"] == host["bandwidth_bytes_per_s"]
    assert km.host["caches_bytes"] == host["caches_bytes"]
    model, rdir = tmp_path / "conv.onnx", tmp_path / "res"
    conv_net(model)
    costs(model, rdir, "--shape-override", "x=1x3x8x8")
    sysfile = system_yaml(tmp_path / "system.yaml")
    doc = yaml.safe_load(sysfile.read_text())
    doc["devices"]["B"]["latency_model"] = str(dev / "latency_model.yaml")
    sysfile.write_text(yaml.safe_dump(doc))
    r = run_stage("07_split_candidates.py", "--model", model, "--results", rdir, "--system", sysfile,
                  "--shape-override", "x=1x3x8x8", "--min-compute-share", "0")
    assert r.returncode == 0, r.stderr
    summ = json.loads((rdir / "split_summary.json").read_text())
    assert summ["device_b"]["time_source"] == f"kernel model ({dev / 'latency_model.yaml'})" and summ["all_on_b_us"] > 0
    for extra, says in ((["--resources", "npu=1", "--device-dir", str(dev)], "no Dask worker offers resource npu"),
                        ([], "--scheduler and --device-dir go together")):
        r = subprocess.run([*base, "--quick", *extra], cwd=REPO, capture_output=True, text=True, timeout=120)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and says in lines[0], r.stderr


def test_calibrate_device_resources_are_name_number_pairs():
    from lib.latency.calibrate import resources_of
    assert resources_of("npu=1, host_cpu=0.5") == {"npu": 1.0, "host_cpu": 0.5}
    for bad in ("npu", "npu=one", "=1", ""):
        with pytest.raises(StageError, match="--resources"):
            resources_of(bad)


def test_dask_zoo_completes_when_a_worker_dies_mid_run(zoo, cluster, tmp_path):
    addr, procs = cluster
    work, root = tmp_path / "work", tmp_path / "results"
    cmd = [sys.executable, str(REPO / "zoo.py"), "--zoo", str(zoo / "zoo.yaml"), "--results", str(root), "--runs", "1",
           "--splits", "1", "--engine", "dask", "--scheduler", addr, "--work-root", str(work)]
    run = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # both entries running, one on each worker (host_cpu=1 each): kill worker 1, make and all, mid-run
    wait_for(lambda: all((work / s / "zoo.log").exists() for s in ("conv@b2", "mlp@rows")), 120, "both entries")
    os.killpg(procs[1].pid, signal.SIGKILL)
    out, err = run.communicate(timeout=600)
    assert run.returncode == 0, out + err
    check_rows(root)
    assert "failed gone: model" in out and "failed conv@x2x3xeight: bad shape_override" in out
    assert "zoo: 2/2" in err           # progress: done / failed / running per model
    # nothing changed: the second run runs nothing, only rebuilds the table
    again = run_stage("zoo.py", *cmd[2:])
    assert again.returncode == 0 and "(0 run now, 2 unchanged)" in again.stdout, again.stdout + again.stderr


def test_local_engine(zoo, tmp_path):
    root = tmp_path / "results"
    r = zoo_py(zoo / "zoo.yaml", results=root)
    assert r.returncode == 0, r.stdout + r.stderr
    t = check_rows(root)
    assert not t.loc["conv@b2", "cached"] and "(2 run now, 0 unchanged)" in r.stdout
    # the keys zoo.py used (RUNS=1, SPLITS=1): nothing to run now; removing a folder forces that entry only
    settings = f"code={code_version()} configs={configs_version()} runs=1 splits=1"
    entries = load_zoo(zoo / "zoo.yaml")
    jobs, records = plan(entries, root, settings)
    assert jobs == [] and records["conv@b2"]["cached"] and records["gone"]["status"] == "failed"
    # another conv.onnx of the same stem, unreadable: the index no longer lists the earlier model's report as it
    assert "conv@b2/report.html" in (root / "index.html").read_text()
    bad = tmp_path / "other" / "conv.onnx"
    bad.parent.mkdir()
    bad.write_bytes(b"not an onnx model")
    (tmp_path / "z2.yaml").write_text(yaml.safe_dump({"models": [{"model": str(bad), "batches": [2]}]}))
    zoo_py(tmp_path / "z2.yaml", results=root)
    index = (root / "index.html").read_text()
    assert "conv@b2/report.html" not in index and "conv@b2 (failed in the zoo" in index
    shutil.rmtree(root / "conv@b2")
    jobs, records = plan(entries, root, settings)
    assert [j["entry"]["stem"] for j in jobs] == ["conv@b2"] and records["mlp@rows"]["cached"]
    assert jobs[0]["entry"]["shape_args"] == "x=2x3x8x8"      # batches: [2] sets dim 0 of every input


def test_a_batch_list_with_a_shape_override_sets_the_batch_or_fails(zoo, tmp_path):
    """A shape override beside `batches` ran the override's batch under the batch's label (MACs of batch 2 in
    the row of batch 4): its batch dim is written B, else the entry fails with the one-line reason."""
    conv = str(zoo / "conv.onnx")
    (tmp_path / "z.yaml").write_text(yaml.safe_dump({"models": [
        {"model": conv, "shape_override": "x=Bx3x8x8", "batches": [4]},
        {"model": conv, "shape_override": "x=2x3x8x8", "batches": [4]}]}))
    jobs, records = plan(load_zoo(tmp_path / "z.yaml"), tmp_path / "results", "s")
    assert [j["entry"]["shape_args"] for j in jobs] == ["x=4x3x8x8"]
    (failed,) = records.values()
    assert failed["status"] == "failed" and "write the batch dim as B (e.g. x=Bx3x8x8)" in failed["error"]


def test_make_is_told_the_model_bytes(zoo, tmp_path):
    """A model of the same size copied over the entry's with its timestamps (same size, mtime, inode): make's
    file stamp saw no change and the row kept the old model's figures, marked ok. The zoo passes the bytes'
    hash to make (CONTENT_ID, part of its spec stamp)."""
    model = tmp_path / "m.onnx"
    model.write_bytes((zoo / "conv.onnx").read_bytes())
    (tmp_path / "z.yaml").write_text(yaml.safe_dump({"models": [{"model": str(model)}]}))
    ids = []
    for old, new in ((b"", b""), (b"Relu", b"Tanh")):
        st = os.stat(model)
        model.write_bytes(model.read_bytes().replace(old, new) if old else model.read_bytes())
        os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns))
        (job,), _ = plan(load_zoo(tmp_path / "z.yaml"), tmp_path / "results", "s")
        ids.append(next(a for a in make_command(job["entry"], "r", 1, 1) if a.startswith("CONTENT_ID=")))
    assert ids[0] != ids[1] and ids[1] == f"CONTENT_ID={content_id(load_zoo(tmp_path / 'z.yaml')[0])}"


def test_content_key_changes_only_with_what_affects_the_entry(zoo, tmp_path):
    entries = {e.stem: e for e in load_zoo(zoo / "zoo.yaml")}
    conv, mlp_e = entries["conv@b2"], entries["mlp@rows"]
    keys = (entry_key(conv, "s"), entry_key(mlp_e, "s"))
    assert entry_key(conv, "s") == keys[0] and entry_key(conv, "runs=2") != keys[0]
    npz = Path(mlp_e.inputs_npz)
    saved = npz.read_bytes()
    try:
        np.savez(npz, x=np.ones((3, 16), np.float32))
        assert entry_key(mlp_e, "s") != keys[1] and entry_key(conv, "s") == keys[0]
    finally:
        npz.write_bytes(saved)


# ---------------------------------------------------------------- bad input

def test_unreachable_scheduler_is_one_line(zoo, tmp_path):
    r = zoo_py(zoo / "zoo.yaml", "--engine", "dask", "--scheduler", f"tcp://127.0.0.1:{free_port()}",
               results=tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: cannot reach the Dask scheduler")
    assert not (tmp_path / "zoo.csv").exists()


@pytest.mark.parametrize("doc, needle", [
    ({"model": "x.onnx"}, "needs a non-empty 'models:' list"),
    ({"models": [{"model": "x.onnx", "shape": "x=1"}]}, "unknown key(s) ['shape']"),
    ({"models": [{"model": "x.onnx", "batches": [0]}]}, "batches must be a list of positive integers"),
    ({"models": ["x.onnx"]}, "must be a mapping with a 'model' key")])
def test_malformed_zoo_file_is_one_line(tmp_path, doc, needle):
    (tmp_path / "z.yaml").write_text(yaml.safe_dump(doc))
    r = zoo_py(tmp_path / "z.yaml", results=tmp_path)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and needle in lines[0], r.stderr


def test_stems_keep_input_specs_apart(tmp_path):
    conv_net(tmp_path / "net.onnx")
    (tmp_path / "z.yaml").write_text(yaml.safe_dump({"models": [
        {"model": str(tmp_path / "net.onnx")}, {"model": str(tmp_path / "net.onnx"), "batches": [1, 8]},
        {"model": str(tmp_path / "net.onnx"), "preset": "llm-128"}]}))
    assert [e.stem for e in load_zoo(tmp_path / "z.yaml")] == ["net", "net@b1", "net@b8", "net@llm-128"]
    (tmp_path / "z.yaml").write_text(yaml.safe_dump({"models": [{"model": "a.onnx"}, {"model": "a.onnx"}]}))
    with pytest.raises(StageError, match="twice with the same input spec"):
        load_zoo(tmp_path / "z.yaml")


def test_error_line_is_the_refusing_stage_line():
    log = "python 02_x.py\nerror: bad --shape-override 'x=1': expected\nmake: *** [Makefile:80: r/x] Error 2\n"
    assert error_line(log) == "bad --shape-override 'x=1': expected"
    assert error_line("Traceback\n  File x\nKeyError: 'y'\ninternal error (a bug)\nmake: *** Error 1") == \
        "internal error: KeyError: 'y'"


def test_index_zoo_table_sorts_in_a_browser(tmp_path):
    """results/index.html's zoo table in Debian's chromium (Playwright): a click on a header sorts by that column,
    numerically, empty cells (failed rows) last either way."""
    sync = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not os.path.exists(chromium):
        pytest.skip(f"chromium not found at {chromium}")
    write_table([{"stem": "a", "status": "ok", "macs": 30}, {"stem": "bad", "status": "failed", "error": "model gone"},
                 {"stem": "b", "status": "ok", "macs": 1e9}, {"stem": "c", "status": "ok", "macs": 5}], tmp_path)
    page_html, _ = build_index(tmp_path)
    (tmp_path / "index.html").write_text(page_html)
    with sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=BROWSER_ARGS)
        page = browser.new_page()
        page.goto((tmp_path / "index.html").as_uri())
        stems = "() => [...document.querySelectorAll('table.zoo tbody tr')].map(r => r.cells[0].textContent)"
        assert page.evaluate(stems) == ["a", "bad", "b", "c"]
        page.click("table.zoo th:has-text('MACs')")
        assert page.evaluate(stems) == ["c", "a", "b", "bad"]
        page.click("table.zoo th:has-text('MACs')")
        assert page.evaluate(stems) == ["b", "a", "c", "bad"]
        browser.close()
