"""The DAG optimum (minimum cut), checked against a brute force over every predecessor-closed node set and
against networkx's minimum cut; its export; the K-device pipeline; the bandwidth crossover."""
import itertools
import json

import networkx as nx
import numpy as np
import pytest
import yaml
from onnx import helper, numpy_helper

from conftest import costs, make_model, run_stage, tensor, weight
from lib.onnx.graph import build_graph, constant_tensors, graph_arrays
from lib.split import dag


def branches(path, constant_outputs=False):
    """x -> stem; a heavy branch (two 256x256 MatMuls) and a cheap one (four element-wise ops), joined by Add.
    File order (= 07's topological order) puts the heavy branch first: the best partition (cheap ops on the
    memory-fast A, MatMuls and the join on the compute-fast B) is not a prefix of it. constant_outputs: the model
    also returns a Constant node's tensor and an initializer (a detector's anchors and strides)."""
    nodes = [helper.make_node("Relu", ["x"], ["s"], name="stem"),
             helper.make_node("MatMul", ["s", "w1"], ["h1"], name="heavy1"),
             helper.make_node("MatMul", ["h1", "w2"], ["h2"], name="heavy2"),
             helper.make_node("Sigmoid", ["s"], ["c1"], name="cheap1"),
             helper.make_node("Tanh", ["c1"], ["c2"], name="cheap2"),
             helper.make_node("Relu", ["c2"], ["c3"], name="cheap3"),
             helper.make_node("Neg", ["c3"], ["c4"], name="cheap4"),
             helper.make_node("Add", ["h2", "c4"], ["y"], name="join")]
    outputs, inits = [tensor("y", [256, 256])], [weight("w1", (256, 256)), weight("w2", (256, 256), seed=1)]
    if constant_outputs:
        nodes.append(helper.make_node("Constant", [], ["anchors"], name="anchors",
                                      value=numpy_helper.from_array(np.arange(10, dtype=np.float32).reshape(5, 2))))
        outputs += [tensor("anchors", [5, 2]), tensor("strides", [3])]
        inits.append(weight("strides", (3,), seed=2))
    return make_model(nodes, [tensor("x", [256, 256])], outputs, inits, path=path)


def system(path, third=False):
    """A memory-fast A, a compute-fast B, a fast link (and, with `third`, a C behind a slow link)."""
    dev = lambda name, peak, bw, p: {"name": name, "source": "model", "peak_flops_per_s": peak,  # noqa: E731
                                     "mem_bw_bytes_per_s": bw, "power_w": p}
    doc = {"devices": {"A": dev("A", 1e11, 1e11, 10.0), "B": dev("B", 1e13, 1e10, 2.0)},
           "link": {"bandwidth_bytes_per_s": 1e11, "latency_us": 1.0, "energy_per_byte_j": 1e-10},
           "constraints": {}, "ranking": {"min_compute_share": 0.0, "dedup_window": 0}}
    if third:
        doc["devices"]["C"] = dev("C", 1e14, 1e12, 50.0)
        doc["chain_links"] = [{"from": "B", "to": "C", "bandwidth_bytes_per_s": 1e9, "latency_us": 5.0,
                               "energy_per_byte_j": 1e-9}]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def brute_force(m: dict, objective: str) -> float:
    """The minimum over every predecessor-closed node set S (both sides non-empty) of the cost recomputed from
    split_model.json's per-node figures alone."""
    nodes, link = m["nodes"], m["link"]
    n = nodes["n"]
    prod = {t: i for i in range(n) for t in nodes["outputs"][i]}
    preds = [{prod[t] for t in nodes["inputs"][i] if t in prod} for i in range(n)]
    readers = {t: [i for i in range(n) if t in nodes["inputs"][i]] for t in m["tensor_bytes"]}
    pa, pb = m["devices"]["A"]["power_w"], m["devices"]["B"]["power_w"]
    best = np.inf
    for bits in itertools.product([True, False], repeat=n):
        if all(bits) or not any(bits) or any(bits[i] and not all(bits[p] for p in preds[i]) for i in range(n)):
            continue
        ta = sum(nodes["latency_a_us"][i] for i in range(n) if bits[i])
        tb = sum(nodes["latency_b_us"][i] for i in range(n) if not bits[i])
        cross = [t for t, r in readers.items() if bits[prod[t]] and any(not bits[c] for c in r)]
        nbytes = sum(m["tensor_bytes"][t] for t in cross)
        if objective == "latency":
            cost = ta + tb + len(cross) * link["latency_us"] + nbytes / link["bandwidth_bytes_per_s"] * 1e6
        else:
            cost = (pa * ta + pb * tb) * 1e-6 + nbytes * link["energy_per_byte_j"]
        best = min(best, cost)
    return best


@pytest.fixture(scope="module")
def branch_results(tmp_path_factory):
    d = tmp_path_factory.mktemp("branches")
    model = d / "branches.onnx"
    branches(model)
    costs(model, d)
    r = run_stage("07_split_candidates.py", "--model", model, "--results", d, "--system", system(d / "system.yaml"))
    assert r.returncode == 0, r.stderr
    return d, model, r.stdout


def test_dag_optimum_is_not_a_prefix_and_equals_brute_force(branch_results):
    d, _, stdout = branch_results
    summ = json.loads((d / "split_summary.json").read_text())
    m = json.loads((d / "split_model.json").read_text())
    assert m["nodes"]["name"] == ["stem", "heavy1", "heavy2", "cheap1", "cheap2", "cheap3", "cheap4", "join"]
    assert m["nodes"]["inputs"][7] == ["h2", "c4"] and m["nodes"]["outputs"][0] == ["s"]
    assert m["tensor_bytes"]["s"] == 256 * 256 * 4 and "x" not in m["tensor_bytes"]    # a graph input never crosses
    opt = summ["dag_optimum"]
    assert opt["est_latency_us"] == pytest.approx(brute_force(m, "latency"), rel=1e-9)
    assert summ["dag_optimum_energy"]["est_energy_j"] == pytest.approx(brute_force(m, "energy"), rel=1e-9)
    assert not opt["is_prefix"] and opt["n_left"] == 5            # stem and the cheap branch on A
    assert sorted(opt["cut_tensors"]) == ["c4", "s"] and opt["comm_bytes"] == 2 * 256 * 256 * 4
    best_b = opt["gain_vs_best_boundary"]
    assert best_b["saved_us"] > 0 and opt["est_latency_us"] < min(summ["all_on_a_us"], summ["all_on_b_us"])
    part = json.loads((d / "dag_partition.json").read_text())["partitions"]["latency"]
    assert sorted(part["left_nodes"]) == ["cheap1", "cheap2", "cheap3", "cheap4", "stem"]
    assert "DAG optimum (min cut)" in stdout and "not a prefix" in stdout


def random_dag(rng, n):
    """A random ONNX DAG of Add/Relu nodes (every node reads one or two earlier tensors) with a weight chain."""
    tensors, nodes = ["x"], []
    for i in range(n):
        k = int(rng.integers(1, 3))
        ins = list(rng.choice(tensors, size=min(k, len(tensors)), replace=False))
        op = "Add" if len(ins) == 2 else "Relu"
        nodes.append(helper.make_node(op, ins, [f"t{i}"], name=f"n{i}"))
        tensors.append(f"t{i}")
    nodes.append(helper.make_node("Identity", ["w"], ["w_id"], name="w_identity"))     # a constant-only node
    nodes.append(helper.make_node("Add", [tensors[-1], "w_id"], ["y"], name="out"))
    return make_model(nodes, [tensor("x", [4])], [tensor("y", [4])], [weight("w", (4,))])


def nx_min_cut(cg, cost_a, cost_b, cost_x) -> float:
    """The same flow graph's minimum cut by networkx (floats): the independent check of scipy's."""
    g = nx.DiGraph()
    s, t = "s", "t"
    for i in range(cg.n):
        g.add_edge(s, i, capacity=float(cost_b[i]))
        g.add_edge(i, t, capacity=float(cost_a[i]))
    for j, p in enumerate(cg.x_prod.tolist()):          # a vertex per crossing-capable tensor, as the issue says
        if cg.x_unknown[j]:
            g.add_edge(p, cg.n + j)                     # of unknown size: never crosses (infinite)
        else:
            g.add_edge(p, cg.n + j, capacity=float(cost_x[j]))
    for x, c in zip(cg.xc_x.tolist(), cg.xc_c.tolist()):
        g.add_edge(cg.n + x, c)     # no capacity: infinite
    for c, p in zip(cg.prec_rows.tolist(), cg.prec_cols.tolist()):
        g.add_edge(c, p)
    return nx.minimum_cut_value(g, s, t)


def closed_sets_min(a, cg, cost_a, cost_b, cost_x) -> float:
    """Every predecessor-closed set with a real op (not constant-only) on each side."""
    n = cg.n
    preds = [set() for _ in range(n)]
    for r, c in zip(cg.prec_rows.tolist(), cg.prec_cols.tolist()):
        preds[r].add(c)
    best = np.inf
    for bits in itertools.product([True, False], repeat=n):
        left = np.array(bits)
        if left[cg.real].all() or not left[cg.real].any() or \
                any(left[i] and not all(left[p] for p in preds[i]) for i in range(n)) or \
                cg.x_unknown[dag.crossing(cg, left)].any():
            continue
        best = min(best, cost_a[left].sum() + cost_b[~left].sum() + cost_x[dag.crossing(cg, left)].sum())
    return best


def test_min_cut_matches_networkx_and_brute_force_on_random_dags():
    rng = np.random.default_rng(7)
    import onnx
    for trial in range(12):
        g = build_graph(onnx.shape_inference.infer_shapes(random_dag(rng, 8)))
        a = graph_arrays(g, constant_tensors(g))
        cg = dag.cut_graph(a)
        ca, cb, cx = rng.uniform(0, 10, cg.n), rng.uniform(0, 10, cg.n), rng.uniform(0, 8, len(cg.x_prod))
        left = dag.min_cut(cg, ca, cb, cx)
        free = ca[left].sum() + cb[~left].sum() + cx[dag.crossing(cg, left)].sum()
        assert free == pytest.approx(nx_min_cut(cg, ca, cb, cx), rel=1e-6)
        best, info = dag.best_partition(cg, ca, cb, cx)
        assert 0 < best[cg.real].sum() < cg.real.sum() and info["exact"] and not cg.real[cg.n - 2]   # w_identity
        got = ca[best].sum() + cb[~best].sum() + cx[dag.crossing(cg, best)].sum()
        assert got == pytest.approx(closed_sets_min(a, cg, ca, cb, cx), rel=1e-6)


def test_dag_optimum_exports_and_composes(branch_results):
    d, model, _ = branch_results
    (d / "bad.json").write_text(json.dumps(["cheap1"]))           # its producer stem is left out
    r = run_stage("08_export_splits.py", "--model", model, "--results", d, "--left-nodes", d / "bad.json")
    assert r.returncode == 2 and "not closed under predecessors" in r.stderr and "Traceback" not in r.stderr
    import onnx
    for names, said in ((["stem", "nope"], "names nodes the graph lacks (['nope']): give node names as"),
                        ([n.name for n in onnx.load(str(model)).graph.node], "leaving nothing for the second part")):
        (d / "bad.json").write_text(json.dumps(names))      # blamed dag_partition.json; every node: exit 0
        r = run_stage("08_export_splits.py", "--model", model, "--results", d, "--left-nodes", d / "bad.json")
        assert r.returncode == 2 and f"--left-nodes {d / 'bad.json'}" in r.stderr and said in r.stderr, r.stderr
    (d / "mine.json").write_text(json.dumps(["stem", "heavy1"]))
    r = run_stage("08_export_splits.py", "--model", model, "--results", d, "--top-k", "1", "--diagram", "none", "--runs", "1",
                  "--left-nodes", d / "mine.json")
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((d / "validation_report.json").read_text())
    rep = doc["dag"]
    assert rep["pass"] is True and rep["n_left"] == 5 and set(rep["cut_tensors"]) == {"s", "c4"}
    assert doc["custom"]["pass"] is True and set(doc["custom"]["cut_tensors"]) == {"s", "h1"}
    assert (d / "splits" / "dag" / "part1.onnx").exists() and (d / "splits" / "dag" / "run_split.py").exists()
    assert "splits/dag: PASS" in r.stdout


def test_pipeline_dynamic_programming_matches_brute_force():
    from lib.split import pipeline
    rng = np.random.default_rng(3)
    for trial in range(30):
        n, k = int(rng.integers(3, 9)), int(rng.integers(2, 5))
        real = rng.uniform(size=n) < 0.7
        if real.sum() < k:
            continue
        times = [rng.uniform(0, 10, n) for _ in range(k)]
        links = [rng.uniform(0, 6, n - 1) for _ in range(k - 1)]
        combos = [c for c in itertools.combinations(range(n - 1), k - 1)       # every slice holds a real op
                  if all(real[lo + 1:hi + 1].any() for lo, hi in zip((-1, *c), (*c, n - 1)))]
        lat = min(pipeline.figures(times, links, list(c))["est_latency_us"] for c in combos)
        per = min(pipeline.figures(times, links, list(c))["period_us"] for c in combos)
        got = pipeline.latency_optimal(times, links, real)
        assert pipeline.figures(times, links, got)["est_latency_us"] == pytest.approx(lat, rel=1e-12)
        thr = pipeline.throughput_optimal(times, links, got, real)
        assert pipeline.figures(times, links, thr)["period_us"] == pytest.approx(per, rel=1e-9)
        assert all(real[b + 1:c + 1].any() for b, c in zip([-1, *thr], [*thr, n - 1]))   # every device: a real op


@pytest.mark.parametrize("constant_outputs", [False, True])
def test_three_device_pipeline_is_found_and_exported(tmp_path, constant_outputs):
    """Graph outputs that are constants come out of the last part (no part returned them: both pipelines failed)."""
    model = tmp_path / "branches.onnx"
    branches(model, constant_outputs)
    costs(model, tmp_path)
    r = run_stage("07_split_candidates.py", "--model", model, "--results", tmp_path, "--system",
                  system(tmp_path / "system.yaml", third=True))
    assert r.returncode == 0, r.stderr
    p = json.loads((tmp_path / "split_summary.json").read_text())["pipeline"]
    assert p["devices"] == ["A", "B", "C"] and p["device_keys"] == ["A", "B", "C"] and "3-device pipeline (A -> B -> C" in r.stdout
    lat, thr = p["latency"], p["throughput"]
    assert len(lat["boundaries"]) == 2 and lat["est_latency_us"] <= thr["est_latency_us"] + 1e-9
    assert thr["period_us"] <= lat["period_us"] + 1e-9
    assert lat["latency_ratio_vs_best_single"] == pytest.approx(min(p["single_device_us"].values()) / lat["est_latency_us"])
    r = run_stage("08_export_splits.py", "--model", model, "--results", tmp_path, "--top-k", "1", "--diagram", "none",
                  "--runs", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    rep = json.loads((tmp_path / "validation_report.json").read_text())["pipelines"]
    for pid in ("latency", "throughput"):
        assert rep[pid]["pass"] is True and rep[pid]["parts"] == 3 and rep[pid]["pipeline"] == pid
        assert sorted(rep[pid]["outputs"]) == (["anchors", "strides", "y"] if constant_outputs else ["y"])
        assert sorted(f.name for f in (tmp_path / "pipeline" / pid).glob("part*.onnx")) == \
            ["part1.onnx", "part2.onnx", "part3.onnx"]


def test_dag_max_nodes_skips_the_cut_and_bad_system_configs_exit_2(tmp_path):
    model = tmp_path / "branches.onnx"
    branches(model)
    costs(model, tmp_path)
    doc = yaml.safe_load(system(tmp_path / "s.yaml").read_text())
    for limit, code in ((3, 0), ("many", 2)):
        doc["dag"] = {"max_nodes": limit}
        (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
        r = run_stage("07_split_candidates.py", "--model", model, "--results", tmp_path, "--system", tmp_path / "s.yaml")
        assert r.returncode == code, r.stderr
    assert "dag.max_nodes must be an integer" in r.stderr and "Traceback" not in r.stderr
    summ = json.loads((tmp_path / "split_summary.json").read_text())       # the first run's
    assert summ["dag_optimum"] is None and "8 nodes > dag.max_nodes 3" in summ["dag_skipped"]
    assert summ["bandwidth_crossover"].get("dag") is None and "dag" not in summ["bandwidth_crossover"]
    doc = yaml.safe_load(system(tmp_path / "s.yaml", third=True).read_text())
    doc["chain_links"][0]["from"] = "A"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    (tmp_path / "boundaries.csv").unlink()
    r = run_stage("07_split_candidates.py", "--model", model, "--results", tmp_path, "--system", tmp_path / "s.yaml")
    assert r.returncode == 2 and "chain_links[0] must link B to C" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "boundaries.csv").exists()
    # device B given the host's measured times would be a figure of another device
    doc = yaml.safe_load(system(tmp_path / "s.yaml").read_text())
    doc["devices"]["B"]["source"] = "measured"
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    r = run_stage("07_split_candidates.py", "--model", model, "--results", tmp_path, "--system", tmp_path / "s.yaml")
    assert r.returncode == 2 and "devices.B.source is measured, but only device A" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "boundaries.csv").exists()


def test_bandwidth_crossover_sweep_and_cut_precision(branch_results):
    from lib.split.bandwidth import precision_summary
    import pandas as pd
    d, _, stdout = branch_results
    summ = json.loads((d / "split_summary.json").read_text())
    single = min(summ["all_on_a_us"], summ["all_on_b_us"])
    opt, w = summ["dag_optimum"], summ["bandwidth_crossover"]["dag"]
    at = lambda bw: opt["t_dev_a_us"] + opt["t_dev_b_us"] + opt["n_cut_tensors"] * 1.0 + opt["comm_bytes"] / bw * 1e6  # noqa: E731
    assert at(w * 1.001) < single < at(w * 0.999)             # the crossover, by hand
    bd = pd.read_csv(d / "boundaries.csv")
    assert (bd["comm_bytes_int8"] == bd["comm_bytes"] / 4).all() and (bd["comm_bytes_fp16"] == bd["comm_bytes"] / 2).all()
    sw = pd.read_csv(d / "bandwidth_sweep.csv")
    assert len(sw) == 26 and sw["bandwidth_mbit_s"].iloc[0] == pytest.approx(1) and sw["bandwidth_mbit_s"].iloc[-1] == pytest.approx(1e5)
    assert (sw["dag_latency_us"] <= sw["boundary_latency_us"] * (1 + 1e-9)).all() and (d / "bandwidth_sweep.png").stat().st_size
    assert sw["best"].iloc[0] == "all_on_b" and sw["best"].iloc[-1] == "dag"
    b0 = bd.iloc[0]       # at a third of b0's fp32 crossover bandwidth, b0 pays with int8, not with fp16 (1.5x)
    w0 = float(summ["bandwidth_crossover"]["0"])
    sysd = {"link": {"bandwidth_bytes_per_s": w0 / 3, "latency_us": 1.0}}
    p = precision_summary(bd, summ, sysd)
    assert 0 in p["int8_only"] and p["boundaries_paying_int8"] > p["boundaries_paying_fp32"]
    assert b0["comm_bytes_int8"] / (w0 / 3) < b0["comm_bytes"] / w0 < b0["comm_bytes_fp16"] / (w0 / 3)
    assert "only with int8" in stdout


def test_a_split_that_ties_a_single_device_within_float_rounding_does_not_pay():
    """Boundary 0 sends nothing and its sides sum to all-on-B less 0.5 ns (device A computes only constants, as in
    a small CLIP's 44 boundaries): a tie, not a split that pays; boundary 1 saves 1 us."""
    import pandas as pd
    from lib.split.bandwidth import precision_summary
    bd = pd.DataFrame({"boundary": [0, 1], "t_dev_a_us": [0.0, 1.0], "t_dev_b_us": [5.0 - 5e-4, 2.0],
                       "n_cut_tensors": [0, 1], "comm_bytes": [0.0, 8.0], "comm_bytes_fp16": [0.0, 4.0],
                       "comm_bytes_int8": [0.0, 2.0]})
    p = precision_summary(bd, {"all_on_a_us": 10.0, "all_on_b_us": 5.0},
                          {"link": {"bandwidth_bytes_per_s": 8e6, "latency_us": 1.0}})     # 8 bytes: 1 us
    assert p["boundaries_paying_fp32"] == 0 and p["boundaries_paying_fp16"] == 1 and p["boundaries_paying_int8"] == 1
    assert p["int8_only"] == []         # it pays with fp16 already: not "only with int8"
    from lib.split.bandwidth import crossover      # the same rule for the bandwidth at which a split pays
    x = crossover(bd["t_dev_a_us"], bd["t_dev_b_us"], bd["n_cut_tensors"], bd["comm_bytes"], 1.0, 5.0)
    assert np.isnan(x[0]) and x[1] == pytest.approx(8.0 * 1e6 / 1.0)


def test_min_cut_on_a_2000_node_graph_matches_networkx():
    """Large enough for flows near the int32 capacity scale (an overflow once made scipy's cut wrong here)."""
    import onnx
    from bench.synthetic_graphs import build
    g = build_graph(onnx.shape_inference.infer_shapes(build(2000)))
    a = graph_arrays(g, constant_tensors(g))
    cg = dag.cut_graph(a)
    rng = np.random.default_rng(0)
    ca, cb, cx = rng.uniform(0, 5, cg.n), rng.uniform(0, 5, cg.n), rng.uniform(1, 2, len(cg.x_prod))
    left = dag.min_cut(cg, ca, cb, cx)
    got = ca[left].sum() + cb[~left].sum() + cx[dag.crossing(cg, left)].sum()
    assert got == pytest.approx(nx_min_cut(cg, ca, cb, cx), rel=1e-6)


def test_a_partition_that_sends_nothing_runs_whole_on_one_device():
    """07 reports such a DAG optimum as the model run whole on one device and writes no partition for 08. Two
    independent halves that each compute an output are a real split (they send nothing, yet both work)."""
    import onnx
    from lib.split.partitions import dag_line
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="branch_a"), helper.make_node("Relu", ["a"], ["y"], name="out_a"),
             helper.make_node("Sigmoid", ["x"], ["z"], name="out_b"),
             helper.make_node("Shape", ["x"], ["s"], name="shape"), helper.make_node("Neg", ["s"], ["u"], name="unused")]
    m = make_model(nodes, [tensor("x", [4, 8])], [tensor("y", [4, 8]), tensor("z", [4, 8])])
    g = build_graph(onnx.shape_inference.infer_shapes(m))
    a = graph_arrays(g, constant_tensors(g))
    cg = dag.cut_graph(a)
    on_a = lambda *names: np.isin(a.names, names)     # noqa: E731
    assert dag.runs_whole_on(a, cg, on_a("shape", "unused")) == "B"      # feeds nothing, computes no output
    assert dag.runs_whole_on(a, cg, on_a("branch_a", "out_a", "out_b")) == "A"
    assert dag.runs_whole_on(a, cg, on_a("branch_a", "out_a")) is None     # y on A, z on B: both work
    assert dag.runs_whole_on(a, cg, on_a("branch_a")) is None              # a crosses
    d = {"runs_whole_on": "B", "est_latency_us": 1500.0, "n_left": 2, "n_right": 3,
         "gain_vs_best_boundary": {"boundary": 0, "est_latency_us": 1600.0}}
    assert dag_line(d).startswith("DAG optimum (min cut): the model runs whole on B, 1.500 ms (2 nodes on A, which send "
                                  "nothing and compute no output")
    assert "(1 node on A, which sends nothing and computes no output" in dag_line({**d, "n_left": 1})


def test_the_dag_optimum_never_cuts_a_tensor_of_unknown_size():
    """A sequence (SplitToSequence -> ConcatFromSequence) has no byte size: its link cost was counted 0 and the
    min cut sent it for free. It stays on one side; the cut takes the tensor before it (4x8 fp32, 128 bytes)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="r1"),
             helper.make_node("SplitToSequence", ["r"], ["seq"], name="seq", axis=0),
             helper.make_node("ConcatFromSequence", ["seq"], ["c"], name="cat", axis=0),
             helper.make_node("Relu", ["c"], ["y"], name="r2")]
    from lib.onnx.loading import graph_of
    g = graph_of(make_model(nodes, [tensor("x", [4, 8])], [tensor("y", None)]))      # shapes resolved by 02's chain
    a = graph_arrays(g, constant_tensors(g))
    cg = dag.cut_graph(a)
    assert list(cg.x_bytes) == [128, 0, 128]          # the sequence: 0, as 07's Comm(b) counts an unknown size
    cost_a, cost_b = np.array([0.0, 0.0, 100.0, 100.0]), np.array([100.0, 0.0, 0.0, 0.0])  # r1 on A, the rest on B
    left = dag.min_cut(cg, cost_a, cost_b, cg.x_bytes * 1e-3)
    assert list(np.asarray(a.names)[left]) == ["r1"] and list(cg.x_unknown) == [False, True, False]


def test_a_node_set_that_sends_a_sequence_validates(tmp_path):
    """--left-nodes may cut a sequence: its cut tensor is exposed in the full model typed as a sequence (it was
    declared a tensor of element type 0, and ORT refused to load the probe)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="r1"),
             helper.make_node("SplitToSequence", ["r"], ["seq"], name="seq", axis=0),
             helper.make_node("ConcatFromSequence", ["seq"], ["c"], name="cat", axis=0),
             helper.make_node("Relu", ["c"], ["y"], name="r2")]
    model = tmp_path / "seq.onnx"
    make_model(nodes, [tensor("x", [4, 8])], [tensor("y", None)], path=model)
    d = tmp_path / "r"
    costs(model, d)
    assert run_stage("07_split_candidates.py", "--model", model, "--results", d).returncode == 0
    (d / "mine.json").write_text(json.dumps(["r1", "seq"]))
    r = run_stage("08_export_splits.py", "--model", model, "--results", d, "--diagram", "none", "--runs", "1",
                  "--left-nodes", d / "mine.json")
    assert r.returncode == 0 and "splits/custom: PASS" in r.stdout, r.stdout + r.stderr
    assert list(json.loads((d / "validation_report.json").read_text())["custom"]["cut_tensors"]) == ["seq"]


def test_a_dag_optimum_that_sends_nothing_is_not_exported(tmp_path):
    """ppocrv4_det's DAG optimum put 234 nodes computing constants only on A: nothing crosses the link and A
    computes no output, so the model runs whole on B. 08 says so and exports nothing (it printed a FAIL line)."""
    from onnx import numpy_helper
    model = tmp_path / "const.onnx"
    nodes = [helper.make_node("Constant", [], ["c"], name="const",
                              value=numpy_helper.from_array(np.ones((4, 64), np.float32))),
             helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"), helper.make_node("Add", ["m", "c"], ["y"], name="add")]
    make_model(nodes, [tensor("x", [4, 64])], [tensor("y", [4, 64])], [weight("w", (64, 64))], path=model)
    costs(model, tmp_path)
    r = run_stage("07_split_candidates.py", "--model", model, "--results", tmp_path, "--system", system(tmp_path / "s.yaml"))
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "dag_partition.json").read_text())
    doc["partitions"]["latency"]["left_nodes"] = ["const"]
    (tmp_path / "dag_partition.json").write_text(json.dumps(doc))
    r = run_stage("08_export_splits.py", "--model", model, "--results", tmp_path, "--top-k", "1", "--diagram", "none",
                  "--runs", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "splits/dag: not exported: the DAG optimum sends nothing" in r.stdout and "FAIL" not in r.stdout
    assert not (tmp_path / "splits" / "dag").exists()
