"""Stage 07: Comm(b) against a naive independent count on real exports; pruning, strict mode, Pareto."""
import json
import shutil
import subprocess

import numpy as np
import onnx
import pandas as pd
import pytest
from onnx import helper, shape_inference

from conftest import REPO, costs, latency_model_copy, make_model, run_stage, system_yaml, tensor, weight
from lib.split.ranking import device_factors, modelled_times, pareto_front, pareto_layers


def naive_comm(model_path):
    """O(N^2) Comm(b) straight from the ONNX protobuf: no code shared with lib/."""
    m = shape_inference.infer_shapes(onnx.load(str(model_path)), data_prop=True)
    g = m.graph
    sizes = {}
    for vi in list(g.value_info) + list(g.output) + list(g.input):
        t = vi.type.tensor_type
        dims = [d.dim_value for d in t.shape.dim]
        sizes[vi.name] = int(np.prod(dims)) * np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type)).itemsize
    const = {i.name for i in g.initializer}
    changed = True
    while changed:
        changed = False
        for n in g.node:
            if all(i in const for i in n.input if i) and not all(o in const for o in n.output):
                const.update(n.output)
                changed = True
    nodes = list(g.node)
    prod = {o: k for k, n in enumerate(nodes) for o in n.output}
    comm, count = [], []
    for b in range(len(nodes) - 1):
        crossing = {t for j in range(b + 1, len(nodes)) for t in nodes[j].input
                    if t in prod and prod[t] <= b and t not in const}
        comm.append(sum(sizes[t] for t in crossing))
        count.append(len(crossing))
    return comm, count


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_comm_matches_naive_count(tv_models, tmp_path, name):
    model = tv_models(name)
    costs(model, tmp_path)
    sysfile = system_yaml(tmp_path / "system.yaml")
    r = run_stage("07_split_candidates.py", "--model", model, "--results", tmp_path, "--system", sysfile)
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "boundaries.csv")
    comm, count = naive_comm(model)
    assert df["comm_bytes"].astype(np.int64).tolist() == comm
    assert df["n_cut_tensors"].tolist() == count
    live = df["live_bytes"].to_numpy()
    for b in range(len(df)):                      # peak definitions, by brute force
        assert df["peak_act_left_bytes"].iat[b] == live[: b + 1].max()
        assert df["peak_act_right_bytes"].iat[b] == live[b:].max()
    prune = json.loads((tmp_path / "candidate_pruning.json").read_text())
    assert prune["by_rule"].get("skip_block", 0) > 0       # residual blocks are protected by default
    assert (df.loc[df["pruned"], "reason"].str.len() > 0).all()
    front = pd.read_csv(tmp_path / "pareto_export.csv")
    ok = df[~df["pruned"]]
    for name_, x, y in (("comm_imbalance", "comm_bytes", "imbalance"), ("latency_energy", "est_latency_us", "est_energy_j")):
        f = front[front["front"] == name_]
        assert len(f) > 0
        for _, p in f.iterrows():   # mutually non-dominated, and nothing non-pruned dominates a front point
            dom = ok[(ok[x] <= p[x]) & (ok[y] <= p[y]) & ((ok[x] < p[x]) | (ok[y] < p[y]))]
            assert dom.empty, (name_, p["boundary"])
    summ = json.loads((tmp_path / "split_summary.json").read_text())
    check_ranking_and_summary(df, summ, r.stdout)
    # no profile here: both devices are their roofline, summed over every node (unknown bytes count 0)
    prof, system = pd.read_csv(tmp_path / "ops_profile.csv"), json.loads((tmp_path / "system_config.json").read_text())
    nbytes = prof[["act_in_bytes", "act_out_bytes", "weight_bytes"]].sum(axis=1)
    for k in ("A", "B"):
        d = system["devices"][k]
        t = np.maximum(prof["flops"] / d["peak_flops_per_s"], nbytes / d["mem_bw_bytes_per_s"]) * 1e6
        assert summ[f"all_on_{k.lower()}_us"] == pytest.approx(t.sum(), rel=1e-9)
        assert summ[f"all_on_{k.lower()}_energy_j"] == pytest.approx(t.sum() * 1e-6 * d["power_w"], rel=1e-9)


def check_ranking_and_summary(df, summ, stdout):
    """Dominance-aware ranking, throughput, baselines and split_summary.json against boundaries.csv."""
    top = df[df["rank"].notna()].sort_values("rank")
    ok = df[df["reason"].fillna("").str.len() == 0]
    first = top.iloc[0]
    beaten = ok[(ok["est_latency_us"] <= first["est_latency_us"]) & (ok["est_energy_j"] <= first["est_energy_j"]) &
                ((ok["est_latency_us"] < first["est_latency_us"]) | (ok["est_energy_j"] < first["est_energy_j"]))]
    assert beaten.empty, "rank 1 is beaten on both latency and energy"
    key = list(zip(top["pareto_layer"], top["score"]))
    assert key == sorted(key)                               # Pareto layer first, then the score
    period = np.maximum(np.maximum(df["t_dev_a_us"], df["link_time_us"]), df["t_dev_b_us"])
    assert np.allclose(df["throughput_per_s"], 1e6 / period)
    assert np.allclose(df["time_imbalance"], (df["t_dev_a_us"] - df["t_dev_b_us"]).abs() / (df["t_dev_a_us"] + df["t_dev_b_us"]))
    assert summ["all_on_a_us"] >= df["t_dev_a_us"].iat[-1] and summ["all_on_b_us"] >= df["t_dev_b_us"].iat[0]
    best = summ["best"]
    assert best["boundary"] == int(first["boundary"]) and best["est_latency_us"] == first["est_latency_us"]
    assert best["throughput_per_s"] == pytest.approx(first["throughput_per_s"])
    assert best["est_energy_j"] == first["est_energy_j"] and "after_layer" in best
    assert ("beats both" in stdout) or ("does NOT beat both" in stdout)
    assert "score = " in stdout and "*comm_bytes/max" in stdout           # the weights are printed


def skip_model(path):
    """x -> a -> b -> c -> d -> add(d, a) -> e ; a weight behind Identity feeds the Mul at d."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="a"),
             helper.make_node("Identity", ["w"], ["w_id"], name="w_identity"),
             helper.make_node("Neg", ["a"], ["b"], name="b"),
             helper.make_node("Relu", ["b"], ["c"], name="c"),
             helper.make_node("Mul", ["c", "w_id"], ["d"], name="d"),
             helper.make_node("Add", ["d", "a"], ["s"], name="add"),
             helper.make_node("Add", ["s", "x"], ["e"], name="e")]
    return make_model(nodes, [tensor("x", [1, 4])], [tensor("e", None)], [weight("w", (1, 4))], path=path)


def run07(tmp_path, model, *args):
    costs(model, tmp_path)
    r = run_stage("07_split_candidates.py", "--model", model, "--results", tmp_path, "--min-compute-share", "0",
                  "--dedup-window", "0", *args)
    assert r.returncode == 0, r.stderr
    return pd.read_csv(tmp_path / "boundaries.csv", keep_default_na=False).set_index("after_node")


def test_skip_block_pruning_constants_and_inputs(tmp_path):
    model = tmp_path / "skip.onnx"
    skip_model(model)
    df = run07(tmp_path, model, "--skip-span", "4")
    # order: a(0) w_identity(1) b(2) c(3) d(4) add(5): the skip tensor a spans nodes 0..5
    assert list(df.index) == ["a", "w_identity", "b", "c", "d", "add"]
    assert df.loc["w_identity", "cut_tensors"] == "a"                  # the Identity'd weight never crosses
    assert df.loc["b", "comm_bytes"] == 32 and df.loc["b", "n_cut_tensors"] == 2      # a and b, 16 B each
    assert (df["right_graph_inputs"] == 1).all()                       # x goes straight to the right part
    inside = df["reason"].str.contains("inside skip block")
    assert inside.to_dict() == {"a": False, "w_identity": True, "b": True, "c": True, "d": True, "add": False}
    df = run07(tmp_path, model, "--skip-span", "6")                    # a span of 5 < 6: no skip block
    assert df["pruned_by"].fillna("").to_dict() == {"a": "", "w_identity": "same_cut", "b": "", "c": "", "d": "",
                                                    "add": ""}           # the weight's Identity: a's cut again


def test_strict_mode(tmp_path):
    model = tmp_path / "skip.onnx"
    skip_model(model)
    df = run07(tmp_path, model, "--skip-span", "100", "--strict")
    assert df["strict_ok"].to_dict() == {"a": True, "w_identity": False, "b": False, "c": False, "d": False,
                                         "add": True}
    assert df.loc["c", "reason"].startswith("strict")
    assert df.loc[~df["pruned"]].index.tolist() == ["a", "add"]


def test_pareto_front_brute_force():
    rng = np.random.default_rng(1)
    for _ in range(20):
        x, y = rng.integers(0, 8, 40).astype(float), rng.integers(0, 8, 40).astype(float)
        got = set(pareto_front(x, y).tolist())
        want = {i for i in range(40) if not any((x[j] <= x[i]) and (y[j] <= y[i]) and ((x[j] < x[i]) or (y[j] < y[i]))
                                                for j in range(40))}
        assert got == want


def test_bad_input_and_latex(tmp_path):
    model = tmp_path / "skip.onnx"
    skip_model(model)
    r = run_stage("07_split_candidates.py", "--model", model, "--results", tmp_path / "none")
    assert r.returncode == 2 and "run 02_shapes_flops_bytes.py first" in r.stderr
    bad = tmp_path / "system.yaml"
    bad.write_text("devices: {A: {peak_flops_per_s: 0}}\n")
    run07(tmp_path, model)
    r = run_stage("07_split_candidates.py", "--model", model, "--results", tmp_path, "--system", bad)
    assert r.returncode == 2 and r.stderr.startswith("error: system config") and "Traceback" not in r.stderr
    tex = (tmp_path / "split_candidates.tex").read_text()
    assert "\\toprule" in tex and "\\bottomrule" in tex and "w\\_identity" not in tex.split("midrule")[0]
    if shutil.which("pdflatex") is None:
        pytest.skip("pdflatex not installed: LaTeX compile check skipped")
    doc = tmp_path / "doc.tex"
    doc.write_text("\\documentclass{article}\n\\usepackage{booktabs}\n\\begin{document}\n\\input{split_candidates.tex}\n"
                   "\\end{document}\n")
    r = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", doc.name], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:]


def test_side_input_read_everywhere_is_not_a_skip_block(tmp_path):
    """An attention-mask-like tensor made once and read by every layer spans the whole graph: not a block."""
    nodes = [helper.make_node("Relu", ["x"], ["mask"], name="mask")]
    prev = "x"
    for k in range(24):
        nodes.append(helper.make_node("Neg", [prev], [f"h{k}"], name=f"n{k}"))
        prev = f"h{k}"
        if k % 6 == 5:
            nodes.append(helper.make_node("Add", [prev, "mask"], [f"a{k}"], name=f"add{k}"))
            prev = f"a{k}"
    model = tmp_path / "mask.onnx"
    make_model(nodes, [tensor("x", [1, 4])], [tensor(prev, None)], path=model)
    df = run07(tmp_path, model)
    assert not df["reason"].str.contains("skip block").any()
    assert df.loc["n7", "cut_tensors"] == "mask;h7"        # the mask still crosses the link: it is counted


def test_pareto_layers_brute_force():
    """Non-dominated sorting against peeling fronts by brute force, ties and duplicates included."""
    rng = np.random.default_rng(2)
    for _ in range(30):
        n = 40
        x, y = rng.integers(0, 6, n).astype(float), rng.integers(0, 6, n).astype(float)
        mask = rng.random(n) < 0.8
        got = pareto_layers(x, y, mask)
        left, layer, want = set(np.flatnonzero(mask)), 0, np.full(n, np.nan)
        while left:
            layer += 1
            front = {i for i in left if not any(x[j] <= x[i] and y[j] <= y[i] and (x[j] < x[i] or y[j] < y[i])
                                                for j in left)}
            for i in front:
                want[i] = layer
            left -= front
        assert np.array_equal(got, want, equal_nan=True)


def test_device_time_model_form():
    """t_i = ovh_i + max(flops_i / (peak * ec_i), bytes_i / (bw * em_i)); unknown bytes count 0 (+ ovh)."""
    prof = pd.DataFrame({"flops": [2e9, 0.0, 1e6], "act_in_bytes": [1e6, 4e6, np.nan], "act_out_bytes": [1e6, 4e6, 8.0],
                         "weight_bytes": [0.0, 0.0, 0.0]})
    ec, em, ovh = device_factors(prof, {"peak_flops_per_s": 1e12, "mem_bw_bytes_per_s": 1e10})
    assert (ec == 1).all() and (em == 1).all() and (ovh == 0).all() and len(ec) == 3   # the roofline, today
    t = modelled_times(np.array([2e9, 0.0, 1e6]), np.array([2e6, 8e6, np.nan]), 1e12, 1e10,
                       np.array([0.5, 1, 1]), np.array([1, 0.25, 1]), np.array([3.0, 0, 7.0]))
    assert t.tolist() == pytest.approx([3.0 + 2e9 / 0.5e12 * 1e6, 8e6 / 0.25e10 * 1e6, 7.0])


def test_nothing_crosses_is_pruned(tmp_path):
    """A boundary with no cut tensor and no graph output on the left (after a dead node) is never ranked."""
    nodes = [helper.make_node("Relu", ["x"], ["dead"], name="dead"),       # its output is used by nobody
             helper.make_node("Neg", ["x"], ["a"], name="a"),
             helper.make_node("Relu", ["a"], ["b"], name="b"),
             helper.make_node("Neg", ["b"], ["y"], name="y")]
    model = tmp_path / "dead.onnx"
    make_model(nodes, [tensor("x", [1, 64])], [tensor("y", None)], path=model)
    df = run07(tmp_path, model)
    assert df.loc["dead", "n_cut_tensors"] == 0 and df.loc["dead", "pruned_by"] == "nothing_crosses"
    assert str(df.loc["dead", "rank"]) in ("", "nan")
    assert not df.loc[["a", "b"], "pruned"].any()
    # two independent branches: nothing crosses, but the left part finishes a graph output: a real split
    nodes = [helper.make_node("Relu", ["x"], ["y1"], name="r"), helper.make_node("Neg", ["x"], ["y2"], name="n")]
    make_model(nodes, [tensor("x", [1, 64])], [tensor("y1", None), tensor("y2", None)], path=model)
    df = run07(tmp_path / "two", model)
    assert df.loc["r", "n_cut_tensors"] == 0 and df.loc["r", "left_graph_outputs"] == 1 and not df.loc["r", "pruned"]
    # a node nothing reads after the output: the cut before it leaves B nothing the model returns (it was ranked
    # #2, and 08 failed its export: "the right part computes nothing the model returns")
    nodes = [helper.make_node("Neg", ["x"], ["a"], name="a"), helper.make_node("Relu", ["a"], ["y"], name="y"),
             helper.make_node("Sigmoid", ["a"], ["unread"], name="dead")]
    make_model(nodes, [tensor("x", [1, 64])], [tensor("y", None)], path=model)
    df = run07(tmp_path / "tail", model)
    assert df.loc["y", "right_graph_outputs"] == 0 and df.loc["y", "pruned_by"] == "nothing_returned"
    assert df.loc["a", "right_graph_outputs"] == 1 and not df.loc["a", "pruned"]


def test_a_cut_after_a_constant_is_the_cut_before_it(tmp_path):
    """After a Constant node the same tensors cross with the same work on each side: the boundary is pruned as
    the same cut as the one before (it outranked it by 0.25 ns of rounding and took an export slot)."""
    import numpy as np
    from onnx import numpy_helper
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="r1"),
             helper.make_node("Constant", [], ["c"], name="two", value=numpy_helper.from_array(np.array(2.0, np.float32))),
             helper.make_node("Mul", ["r", "c"], ["m"], name="mul"), helper.make_node("Neg", ["m"], ["y"], name="neg")]
    model = tmp_path / "const.onnx"
    make_model(nodes, [tensor("x", [1, 64])], [tensor("y", None)], path=model)
    df = run07(tmp_path, model)
    assert df.loc["two", "cut_tensors"] == df.loc["r1", "cut_tensors"] == "r"
    assert df.loc["two", "pruned_by"] == "same_cut" and df.loc["two", "reason"] == "the same cut as boundary 0"
    assert not df.loc["r1", "pruned"] and not df.loc["mul", "pruned"]


def test_every_boundary_pruned_exits_0_with_no_candidate(tmp_path):
    model = tmp_path / "skip.onnx"
    skip_model(model)
    costs(model, tmp_path)
    r = run_stage("07_split_candidates.py", "--model", model, "--results", tmp_path, "--min-compute-share", "0.5")
    assert r.returncode == 0, r.stderr
    assert "no boundary survives the pruning" in r.stdout and "no split candidate" in r.stdout
    summ = json.loads((tmp_path / "split_summary.json").read_text())
    assert summ["best"] is None and summ["candidates"] == 0 and summ["all_on_a_us"] > 0 and summ["all_on_b_us"] > 0
    model_json = json.loads((tmp_path / "split_model.json").read_text())
    assert all(model_json["boundaries"]["static_pruned_by"])
    r = run_stage("08_export_splits.py", "--model", model, "--results", tmp_path, "--runs", "1")
    assert r.returncode == 0, r.stderr
    assert json.loads((tmp_path / "validation_report.json").read_text())["splits"] == []


def test_a_device_with_a_latency_model_uses_its_prediction(tmp_path):
    """Device A modelled by a latency model file without a kernel model (the efficiency model only): all-on-A is
    03's per-node baseline (same model, same host figures), and every boundary's t_dev_a_us is the prefix sum of
    t_pred_us."""
    import yaml
    from lib.latency.latency_model import load_latency_model
    from lib.latency.predict import baseline_host
    model = tmp_path / "skip.onnx"
    skip_model(model)
    lm = latency_model_copy(tmp_path, kernel_model=False)
    host = yaml.safe_load((REPO / "configs" / "host.yaml").read_text())
    costs(model, tmp_path)
    sysfile = system_yaml(tmp_path / "system.yaml", a_model=lm)
    doc = yaml.safe_load(sysfile.read_text())
    # the figures 03's baseline uses: those the efficiency model was fitted against (make calibrate raises
    # host.yaml's peaks after fitting it)
    host = baseline_host(host, lm)
    peak = host["peak_flops_per_s"]
    host["peak_flops_per_s"] = {"default": peak["default"] if isinstance(peak, dict) else peak}
    doc["devices"]["A"].update(peak_flops_per_s=host["peak_flops_per_s"]["default"], mem_bw_bytes_per_s=host["mem_bw_bytes_per_s"])
    sysfile.write_text(yaml.safe_dump(doc))
    r = run_stage("07_split_candidates.py", "--model", model, "--results", tmp_path, "--system", sysfile,
                  "--min-compute-share", "0")
    assert r.returncode == 0, r.stderr
    prof = pd.read_csv(tmp_path / "ops_profile.csv")
    df = pd.read_csv(tmp_path / "boundaries.csv")
    assert np.allclose(df["t_dev_a_us"], np.cumsum(prof["t_pred_us"])[: len(df)], rtol=1e-9)
    assert load_latency_model(lm).predict(prof, host["peak_flops_per_s"]["default"], host["mem_bw_bytes_per_s"]).sum() \
        == pytest.approx(prof["t_pred_us"].sum(), rel=1e-9)
