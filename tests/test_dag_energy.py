"""Critical path and stages on a hand-made DAG; Amdahl on known numbers; energy with its method (RAPL counters
read from a fake powercap tree: these machines have none)."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from onnx import helper

from conftest import REPO, make_model, run_stage, small_cnn, tensor
from lib.analysis.dag import longest_path, stages, summary
from lib.analysis.energy import METHODS, amdahl, amdahl_multi, counter_energy, measure_counter, power_source, rapl_zones
from lib.onnx.inputs import InputSpec
from lib.onnx.graph import build_graph


def diamond():
    """a -> b -> d, a -> c -> d, d -> e ; plus an isolated-by-branch f off a."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="a"),
             helper.make_node("Relu", ["a"], ["b"], name="b"),
             helper.make_node("Relu", ["a"], ["c"], name="c"),
             helper.make_node("Add", ["b", "c"], ["d"], name="d"),
             helper.make_node("Relu", ["d"], ["e"], name="e"),
             helper.make_node("Relu", ["a"], ["f"], name="f")]
    return build_graph(make_model(nodes, [tensor("x", [1])], [tensor("e", [1]), tensor("f", [1])]))


def test_critical_path_by_hand():
    g = diamond()
    w = np.array([2.0, 3.0, 5.0, 1.0, 4.0, 9.0])      # a b c d e f
    preds = [g.preds(i) for i in range(len(g.nodes))]
    start, finish, path = longest_path(len(w), preds, w)
    assert [g.names[i] for i in path] == ["a", "c", "d", "e"]          # 2 + 5 + 1 + 4 = 12 > a + f = 11
    assert finish[path[-1]] == 12.0 and start[g.names.index("d")] == 7.0
    for u, v in zip(path, path[1:]):                                       # a real chain of graph edges
        assert u in g.preds(v)
    s = summary(w, finish, stages(len(w), preds))
    assert s["critical_path_us"] == 12.0 and s["sum_node_us"] == 24.0 and s["parallelism"] == 2.0
    assert s["stages"] == 4 and s["max_ops_per_stage"] == 3                # level 1 holds b, c, f
    w[5] = 20.0                                                            # now the a -> f branch is critical
    _, finish, path = longest_path(len(w), preds, w)
    assert [g.names[i] for i in path] == ["a", "f"] and finish.max() == 22.0


def test_the_critical_path_ends_at_an_output_not_at_a_node_nothing_reads(tmp_path):
    """A node whose output nothing reads (an exporter's leftover) runs, but ends no chain: 04's path was that node
    alone (100 us, against the 54 us chain to the output), and on a tie the path stopped at the producer of a 0 us
    output node ORT fused. Stage 04 on a model with both: a -> b -> out (b's Add fused: 0 us) and a -> dead."""
    from lib.onnx.graph import graph_arrays
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="a"), helper.make_node("Relu", ["a"], ["b"], name="b"),
             helper.make_node("Add", ["b", "b"], ["out"], name="join"),
             helper.make_node("Sigmoid", ["a"], ["unread"], name="dead")]
    g = build_graph(make_model(nodes, [tensor("x", [4])], [tensor("out", [4])]))
    arrays = graph_arrays(g, set())
    assert arrays.live().tolist() == [True, True, True, False]
    w = np.array([3.0, 5.0, 0.0, 100.0])
    ends = np.zeros(4, bool)
    ends[2] = True
    preds = arrays.preds()
    _, finish, path = longest_path(4, preds, w, ends=ends)
    assert [g.names[i] for i in path] == ["a", "b", "join"]
    assert summary(w, finish, stages(4, preds), path)["critical_path_us"] == 8.0
    _, _, path = longest_path(4, preds, w)           # any end (the FX side): the longest chain of all
    assert [g.names[i] for i in path] == ["a", "dead"]
    # no node writes what the model returns (it returns its input): no path, 0 us (the dead chain was reported)
    _, finish, path = longest_path(4, preds, w, ends=np.zeros(4, bool))
    assert path == [] and summary(w, finish, stages(4, preds), path)["critical_path_us"] == 0.0


def test_amdahl_known_numbers():
    assert amdahl(0.5, 2.0) == pytest.approx(4 / 3)
    assert amdahl(1.0, 10.0) == pytest.approx(10.0)
    assert amdahl(0.0, 100.0) == pytest.approx(1.0)
    assert amdahl(0.9, 1e12) == pytest.approx(10.0)                        # the serial 10% bounds it
    assert amdahl_multi([0.3, 0.2], [3.0, 2.0]) == pytest.approx(1 / 0.7)
    assert amdahl_multi([0.4], [4.0]) == pytest.approx(amdahl(0.4, 4.0))


# ---------------------------------------------------------------- energy with its method: RAPL counters

def fake_rapl(root: Path, start_uj: int = 0, max_uj: int = 2 ** 32) -> Path:
    """A powercap tree as the kernel lays it out: a package zone, one of its sub-zones, an unrelated entry."""
    zone = root / "intel-rapl:0"
    (zone / "intel-rapl:0:0").mkdir(parents=True)
    (root / "intel-rapl:0:0").symlink_to(zone / "intel-rapl:0:0")       # sub-zones also appear at the top
    (root / "dtpm").mkdir()
    (zone / "name").write_text("package-0\n")
    (zone / "max_energy_range_uj").write_text(f"{max_uj}\n")
    (zone / "intel-rapl:0:0" / "energy_uj").write_text("0\n")
    set_uj(zone, start_uj)
    return zone


def set_uj(zone: Path, uj: int) -> None:
    tmp = zone / ".energy_uj.tmp"                  # replaced whole: a reader never sees a half-written number
    tmp.write_text(f"{uj % int((zone / 'max_energy_range_uj').read_text())}\n")
    os.replace(tmp, zone / "energy_uj")


def test_counter_energy_subtracts_idle_and_undoes_wraparound(tmp_path):
    """Idle 2 W; each run 20 ms at idle power plus 50 mJ of its own: 50 mJ per run, not 90."""
    zone = fake_rapl(tmp_path, start_uj=2 ** 32 - 30_000)                # wraps within the first window
    assert rapl_zones(tmp_path) == [zone] and rapl_zones(tmp_path / "none") == []
    state = {"uj": 2 ** 32 - 30_000, "t": 0.0}     # a clock of the test's own: exact figures, no waiting

    def spend(s, j):
        state["t"] += s
        state["uj"] += round(j * 1e6)
        set_uj(zone, state["uj"])

    c = counter_energy(lambda: spend(0.02, 2.0 * 0.02 + 0.05), [zone], window_s=1.0,
                       sleep=lambda s: spend(s, 2.0 * s), clock=lambda: state["t"])
    assert c["method"] == "counter" and c["window_s"] >= 1.0 and c["runs"] in (50, 51)
    assert c["idle_w"] == pytest.approx(2.0) and c["busy_w"] == pytest.approx(4.5)
    assert c["energy_per_inference_j"] == pytest.approx(0.05)
    assert c["zones"] == ["intel-rapl:0 (package-0)"]
    assert counter_energy(lambda: None, [zone], window_s=1.0) is None           # a counter that never moves
    assert power_source(None, 20.0, "configs/host.yaml", c)["source"] == "counter"
    model, broken = tmp_path / "cnn.onnx", tmp_path / "broken.onnx"
    small_cnn(model)
    broken.write_bytes(b"not a model")
    shapes = {"x": [1, 3, 32, 32]}                 # nothing writes the fake counter now: it does not move
    assert measure_counter(model, shapes, InputSpec(), 1.0, root=tmp_path) == (None, "the counters did not move")
    got, why = measure_counter(broken, shapes, InputSpec(), 1.0, root=tmp_path)
    assert got is None and why.startswith("the counters were not read: ")
    assert measure_counter(model, {}, InputSpec(), 1.0, skip=True) == (None, "--no-counter")
    assert power_source(7.0, 20.0, "configs/host.yaml", c)["label"].startswith("7 W given by --avg-power-w")
    assert "assumed in configs/host.yaml" in power_source(None, 20.0, "configs/host.yaml", None)["label"]


def test_stage_05_uses_and_labels_the_counter(tmp_path):
    """05 against a fake powercap tree whose counter follows the CPU time 05 spends (10 W per busy core): the
    counter method is used and labelled in energy_meta.json, energy.csv names its methods, and the report too."""
    model = tmp_path / "cnn.onnx"
    small_cnn(model)
    rdir = tmp_path / "results" / "cnn"
    for script, args in (("02_shapes_flops_bytes.py", ["--model", model]), ("03_merge_profile_metrics.py", [])):
        assert run_stage(script, *args, "--results", rdir).returncode == 0
    zone = fake_rapl(tmp_path / "powercap")
    env = {**os.environ, "NN_PERF_POWERCAP": str(tmp_path / "powercap")}
    proc = subprocess.Popen([sys.executable, str(REPO / "05_energy_estimate.py"), "--model", str(model), "--results",
                             str(rdir)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    tick = os.sysconf("SC_CLK_TCK")
    while proc.poll() is None:
        try:
            fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
            set_uj(zone, int(10.0 * (int(fields[11]) + int(fields[12])) / tick * 1e6))
        except (OSError, IndexError):
            pass
        time.sleep(0.005)
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    meta = json.loads((rdir / "energy_meta.json").read_text())
    assert meta["counter"]["method"] == "counter" and meta["counter"]["window_s"] >= 1.0
    assert meta["power"]["source"] == "counter" and "RAPL" in meta["power"]["label"]
    whole = meta["energy_per_inference"]
    assert set(whole) == {"counter", "power x time", "component model"} and "idle baseline" in whole["counter"]["how"]
    energy = pd.read_csv(rdir / "energy.csv")
    assert set(energy["energy_method"]) == {"component model"} and set(energy["e_power_method"]) == {"power x time"}
    assert set(energy["energy_method"]) | set(energy["e_power_method"]) <= set(METHODS)
    assert "counter:" in out
    r = run_stage("11_report.py", "--results", rdir, "--no-index")
    assert r.returncode == 0, r.stderr
    html = (rdir / "report.html").read_text()
    assert "measured, whole inference only: RAPL intel-rapl:0 (package-0)" in html and "measured by the RAPL" in html


def test_stage_05_without_counters_says_whose_power(tmp_path):
    model = tmp_path / "cnn.onnx"
    small_cnn(model)
    rdir = tmp_path / "results" / "cnn"
    for script, args in (("02_shapes_flops_bytes.py", ["--model", model]), ("03_merge_profile_metrics.py", []),
                         ("05_energy_estimate.py", ["--model", model, "--avg-power-w", "12"])):
        r = run_stage(script, *args, "--results", rdir, env={"NN_PERF_POWERCAP": str(tmp_path / "none")})
        assert r.returncode == 0, r.stderr
    meta = json.loads((rdir / "energy_meta.json").read_text())
    assert meta["counter"] is None and meta["counter_status"] == "no readable RAPL zone"
    assert meta["power"] == {"power_w": 12.0, "source": "--avg-power-w", "label": "12 W given by --avg-power-w (assumed)"}
    assert set(meta["energy_per_inference"]) == {"power x time", "component model"}
    # no 01: a whole inference takes 03's predicted latency (the one the page quotes), not the baseline's node sum
    pred = json.loads((rdir / "merge_meta.json").read_text())["prediction"]
    assert meta["time_source"] == "predicted" and meta["inference_us"] == pred["predicted_latency_us"]
    assert meta["energy_per_inference"]["power x time"]["energy_j"] == pytest.approx(12 * pred["predicted_latency_us"] * 1e-6)
    assert (pd.read_csv(rdir / "amdahl.csv")["latency_before_us"] == pred["predicted_latency_us"]).all()
    r = run_stage("05_energy_estimate.py", "--model", model, "--results", rdir, "--counter-window-s", "0.5")
    assert r.returncode == 2 and "--counter-window-s" in r.stderr and "Traceback" not in r.stderr
    assert "--avg-power-w" not in r.stderr                        # only the flag that is wrong is named


def test_energy_bytes_are_what_each_kernel_moves(tmp_path):
    """A Shape reads no data (its 16 MiB input took 16.5% of a model's energy), a Slice what it picks (read and
    write), a Relu all it reads and writes."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Slice", ["x", "st", "en"], ["sl"], name="slice"),
             helper.make_node("Relu", ["sl"], ["y"], name="relu")]
    inits = [helper.make_tensor("st", 7, [1], [0]), helper.make_tensor("en", 7, [1], [16])]
    model = tmp_path / "m.onnx"
    make_model(nodes, [tensor("x", [64, 256])], [tensor("y", None), tensor("s", None, 7)], inits, path=model)
    rdir = tmp_path / "r"
    for stage, args in (("02_shapes_flops_bytes.py", ["--model", model]), ("03_merge_profile_metrics.py", []),
                        ("05_energy_estimate.py", ["--model", model])):
        r = run_stage(stage, *args, "--results", rdir, env={"NN_PERF_POWERCAP": str(tmp_path / "none")})
        assert r.returncode == 0, r.stderr
    e = pd.read_csv(rdir / "energy.csv").set_index("node")["bytes"]
    assert e["shape"] == 0 and e["slice"] == 2 * 16 * 256 * 4 and e["relu"] == 2 * 16 * 256 * 4
