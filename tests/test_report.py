"""Stage 11: the report page and the all-models index. The browser tests open the page in Debian's chromium,
driven headless by Playwright (skipped, with the reason, when either is missing; .ci/run installs chromium)."""
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import onnx
import onnxruntime as ort
from onnx import helper

from conftest import REPO, costs, make_model, run_stage, small_cnn, tensor
from test_bad_input import assert_clean_error
from test_dag_split import branches, system as dag_system
from lib.report.beyond import bandwidth_text, beyond_section
from lib.report.graph import graph_section, scopes, views
from lib.report.page import Artifacts, critical_path_section, measured_key, roofline_section, summary_section
from lib.report.layout import layout_many

CHROMIUM = os.environ.get("NN_PERF_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-quic"]
SECTIONS = ["summary", "graph", "time", "roofline", "critical-path", "energy", "offload", "splits", "beyond", "what-if"]
ARGS07 = ["--dedup-window", "0", "--min-compute-share", "0"]     # every boundary of the tiny CNN is a candidate


def stages(model, rdir, profile=True, upto="11"):
    plan = [("02_shapes_flops_bytes.py", ["--model", model]),
            ("01_profile_onnx.py", ["--model", model, "--runs", "3", "--warmup", "1"]) if profile else None,
            ("03_merge_profile_metrics.py", ["--model", model]), ("04_critical_path.py", ["--model", model]),
            ("05_energy_estimate.py", ["--model", model]), ("07_split_candidates.py", ["--model", model, *ARGS07]),
            ("08_export_splits.py", ["--model", model, "--top-k", "2", "--runs", "1", "--diagram", "matplotlib"]),
            ("11_report.py", ["--model", model, "--index", Path(rdir).parent / "index.html"])]
    for step in plan:
        if step is None:
            continue
        script, args = step
        if script[:2] > upto:
            break
        r = run_stage(script, *args, "--results", rdir)
        assert r.returncode == 0, f"{script}: {r.stderr[-3000:]}"
    return r


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """A tiny CNN through every stage, into <tmp>/results/cnn/ (so the index lands in <tmp>/results/)."""
    root = tmp_path_factory.mktemp("report")
    model = root / "cnn.onnx"
    small_cnn(model)
    rdir = root / "results" / "cnn"
    r = stages(model, rdir)
    assert "10 of 10 sections complete" in r.stdout, r.stdout
    return model, rdir


def roofline_nodes(rdir) -> int:
    """Profiled nodes a roofline can place: own measured time, FLOPs and bytes, from ops_profile.csv directly."""
    prof = pd.read_csv(rdir / "ops_profile.csv")
    nbytes = prof[["act_in_bytes", "act_out_bytes", "weight_bytes"]].sum(axis=1)
    return int(((prof["latency_us"] > 0) & (prof["flops"] > 0) & (nbytes > 0)).sum())


def test_report_and_index_files(built):
    model, rdir = built
    html = (rdir / "report.html").read_text()
    for s in SECTIONS:
        assert html.count(f'<section id="{s}">') == 1
    low = html.lower()
    # self-contained: no external script, style, image or frame; Plotly's JavaScript embedded once
    assert "<script src" not in low and "<link " not in low and 'src="http' not in low and "<iframe" not in low
    assert low.count("plotly.js v") >= 1 and html.count("<script>") >= 2
    meta = json.loads((rdir / "report_meta.json").read_text())
    assert set(meta["sections"].values()) == {"ok"} and meta["run_id"] and meta["identity"]["model"]["graph_sha256"]
    assert {"ops_profile.csv", "boundaries.csv", "split_model.json", "validation_report.json"} <= set(meta["read"])
    assert meta["roofline_points"] == roofline_nodes(rdir) > 0
    assert set(meta["upstream"]) >= {"metrics_meta.json", "split_summary.json", "validation_report.json"}
    index = (rdir.parent / "index.html").read_text()
    assert 'href="cnn/report.html"' in index and "cnn" in index
    summ = json.loads((rdir / "split_summary.json").read_text())
    assert summ["verdict"]["advice"] in html.replace("&#39;", "'").replace("&amp;", "&")
    # each split's criterion is its exactness bound (it read "atol None, rtol None": 08's recorded options)
    rep = json.loads((rdir / "validation_report.json").read_text())
    rel = max(o["bound"] / o["scale"] for o in rep["splits"][0]["exactness"]["outputs"].values())
    assert "atol None" not in html and f"bound {rel:.1e} of the output&#39;s scale" in html


def summary_row(html: str, label: str) -> str:
    return html.split(f"<td>{label}</td><td>", 1)[1].split("</td>", 1)[0].replace("&#39;", "'").replace("&amp;", "&")


def plot_traces(html: str, div_id: str) -> list[dict]:
    """The traces of a Plotly figure as embedded in the page (Plotly.newPlot("<id>", [traces], layout, config))."""
    rest = re.split(rf'Plotly\.newPlot\(\s*"{div_id}",\s*', html, maxsplit=1)[1]
    return json.JSONDecoder().raw_decode(rest)[0]


def test_summary_shows_the_prediction_and_the_roofline_the_memory_levels(built):
    """The summary's predicted latency is merge_meta.json's (03 ran with --model: the kernel model, with its interval);
    the roofline draws one memory roof per level of the host 03 used, named with its size and bandwidth."""
    model, rdir = built
    merge = json.loads((rdir / "merge_meta.json").read_text())
    p, host = merge["prediction"], merge["host"]
    html = (rdir / "report.html").read_text()
    row = summary_row(html, "predicted latency (stage 03)")
    assert p["predicted_by"] == "kernel model" and p["interval_us"] and p["measured_latency_us"]
    lo, hi = p["interval_us"]
    assert row.startswith(f"{p['predicted_latency_us'] / 1e3:.3g} ms (kernel model, interval {lo / 1e3:.3g}-"
                          f"{hi / 1e3:.3g} ms), {100 * p['error']:+.0f}% vs measured; baseline (efficiency model) "
                          f"{p['baseline_latency_us'] / 1e3:.3g} ms ({100 * p['baseline_error']:+.0f}%)"), row
    assert ("never seen in training" in row) == bool(p["unseen_kernel_types"])
    assert ("at the host speed 01 measured" in row) == (p.get("host_speed_factor") is not None)
    names = [t.get("name", "") for t in plot_traces(html, "roofline-plot")]
    assert set(host["caches_bytes"]) == {"L1", "L2", "L3"}      # configs/host.yaml is calibrated
    for lv, size in host["caches_bytes"].items():
        bw = host["bandwidth_bytes_per_s"][lv]
        assert [n for n in names if n.startswith(f"{lv} (")] == [f"{lv} ({size // 1024 if size < 2**20 else size // 2**20} "
                                                                 f"{'KiB' if size < 2**20 else 'MiB'}): {bw / 1e9:.3g} GB/s"]
    assert [n for n in names if n.startswith("DRAM")] == [f"DRAM: {host['bandwidth_bytes_per_s']['DRAM'] / 1e9:.3g} GB/s"]
    assert sum(n.startswith("peak (") for n in names) >= 1 and not any(n.startswith("roof (") for n in names)
    prof = pd.read_csv(rdir / "ops_profile.csv")
    levels = [c[5] for t in plot_traces(html, "roofline-plot") if t.get("meta") == "nodes" for c in t["customdata"]]
    assert sorted(levels) == sorted(prof.loc[(prof["latency_us"] > 0) & (prof["flops"] > 0), "mem_level"])
    assert "the level its working set" in html.split('id="roofline-levels">', 1)[1].split("</p>", 1)[0]


def test_prediction_row_without_prediction_unseen_kernels_and_one_memory_level(built, tmp_path):
    """An older merge_meta.json (no `prediction`): "n/a", not a crash. Unseen kernel types and a baseline prediction
    are said; a host without per-level figures keeps the single DRAM roof per dtype."""
    model, rdir = built
    copy = tmp_path / "cnn"
    shutil.copytree(rdir, copy, ignore=shutil.ignore_patterns("splits"))
    merge = json.loads((copy / "merge_meta.json").read_text())
    p = merge.pop("prediction")
    (copy / "merge_meta.json").write_text(json.dumps(merge))
    rows = dict(summary_section(Artifacts(copy))["table"]["rows"])
    assert rows["predicted latency (stage 03)"].startswith("n/a")
    assert f"host model ({merge['host_config']})" in rows           # the host file 03 read (HOST=), not always ours
    merge["host_config"] = "/elsewhere/my_host.yaml"
    (copy / "merge_meta.json").write_text(json.dumps(merge))
    assert "host model (/elsewhere/my_host.yaml)" in dict(summary_section(Artifacts(copy))["table"]["rows"])
    merge["prediction"] = {**p, "unseen_kernel_types": ["FusedConv", "QGemm"], "unseen_kernel_share": 0.25,
                           "host_speed_factor": None}       # (its clause would come last)
    merge["host"] = {k: v for k, v in merge["host"].items() if k not in ("caches_bytes", "bandwidth_bytes_per_s")}
    (copy / "merge_meta.json").write_text(json.dumps(merge))
    art = Artifacts(copy)
    row = dict(summary_section(art)["table"]["rows"])["predicted latency (stage 03)"]
    assert row.endswith("; 2 kernel types never seen in training (25% of the predicted time): FusedConv, QGemm")
    roof = roofline_section(art)
    names = [t.get("name", "") for t in plot_traces(str(roof["plot"]), "roofline-plot")]
    bw = merge["host"]["mem_bw_bytes_per_s"]
    assert roof["levels"] == ["DRAM"] and [n for n in names if n.startswith("roof (")] == [
        f"roof (float): {merge['host']['peak_flops_per_s']['float'] / 1e9:.0f} GFLOP/s, {bw / 1e9:.1f} GB/s"]
    assert not any(n.startswith(("L1 (", "L2 (", "L3 (", "peak (")) for n in names)
    merge["prediction"] = {**p, "predicted_by": "baseline", "predicted_latency_us": p["baseline_latency_us"],
                           "interval_us": None, "error": p["baseline_error"], "note_kernel_model": "no graph"}
    (copy / "merge_meta.json").write_text(json.dumps(merge))
    row = dict(summary_section(Artifacts(copy))["table"]["rows"])["predicted latency (stage 03)"]
    assert row == (f"{p['baseline_latency_us'] / 1e3:.3g} ms (baseline: efficiency model), "
                   f"{100 * p['baseline_error']:+.0f}% vs measured; kernel model not used: no graph")


def test_plot_labels_show_node_names_as_written(built, tmp_path):
    """Plotly reads markup and entities in labels: a node named 'a &amp; <b>b</b>' was shown as 'a & b' (bold)."""
    _, rdir = built
    copy = tmp_path / "cnn"
    shutil.copytree(rdir, copy, ignore=shutil.ignore_patterns("splits"))
    cp = pd.read_csv(copy / "critical_path.csv")
    cp.loc[cp["latency_us"] > 0, ["node", "kernel"]] = "a &amp; <b>b</b>"
    cp["layer"] = ""
    cp.to_csv(copy / "critical_path.csv", index=False)
    from lib.provenance import table_digest      # as if 04 had written it: a model whose nodes are so named
    meta = json.loads((copy / "critical_path_meta.json").read_text())
    meta["tables"]["critical_path.csv"] = table_digest(copy / "critical_path.csv")
    (copy / "critical_path_meta.json").write_text(json.dumps(meta))
    (trace,) = plot_traces(str(critical_path_section(Artifacts(copy))["plot"]), "critical-path-plot")
    assert set(trace["y"]) == {f"{o}. a &amp;amp; &lt;b&gt;b&lt;/b&gt;" for o in cp.loc[cp["latency_us"] > 0, "order"]}


def test_missing_artifacts_are_named_not_fatal(tmp_path):
    """No profile (01), no splits (07, 08): the report still builds and each section says what to run."""
    model = tmp_path / "cnn.onnx"
    small_cnn(model)
    rdir = tmp_path / "results" / "cnn"
    stages(model, rdir, profile=False, upto="05")
    r = run_stage("11_report.py", "--results", rdir)
    assert r.returncode == 0, r.stderr
    meta = json.loads((rdir / "report_meta.json").read_text())["sections"]
    assert meta["summary"] == "ok" and meta["time"] == "ok" and meta["energy"] == "ok"
    assert "01_profile_onnx.py" in meta["roofline"]
    assert "07_split_candidates.py" in meta["splits"] and "07_split_candidates.py" in meta["what-if"]
    html = (rdir / "report.html").read_text()
    assert html.count('class="missing"') >= 3 and "roofline time instead" in html
    assert meta["graph"] == "ok" and "fill: share of <b>predicted</b> time" in html    # no profile: the legend says so


def test_refuses_artifacts_that_do_not_belong_together(built, tmp_path):
    model, rdir = built
    copy = tmp_path / "cnn"
    shutil.copytree(rdir, copy, ignore=shutil.ignore_patterns("splits"))
    meta = json.loads((copy / "profile_meta.json").read_text())
    meta["run_id"] = "0" * 32                         # 01 ran again after 03 merged it
    (copy / "profile_meta.json").write_text(json.dumps(meta))
    r = run_stage("11_report.py", "--results", copy, "--no-index")
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:") and "re-run" in lines[0]
    other = tmp_path / "other.onnx"
    from conftest import make_model, tensor
    from onnx import helper
    make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [tensor("x", [2])], [tensor("y", [2])], path=other)
    r = run_stage("11_report.py", "--model", other, "--results", rdir, "--no-index")
    assert r.returncode == 2 and "holds results of" in r.stderr and "Traceback" not in r.stderr


# ---------------------------------------------------------------- in a real browser

@pytest.fixture(scope="module")
def browser():
    sync = pytest.importorskip("playwright.sync_api", reason="playwright is not installed: browser tests skipped "
                               "(pip install playwright)")
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"chromium not found at {CHROMIUM}: browser tests skipped (apt-get install chromium)")
    with sync.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        yield b
        b.close()


def open_report(browser, path):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(path.resolve().as_uri(), wait_until="load", timeout=60000)
    page.wait_for_function("() => window.nnperfWhatIf !== undefined && document.querySelector('#roofline-plot .main-svg')",
                           timeout=60000)
    return page, errors


def test_every_section_renders_without_errors(browser, built):
    model, rdir = built
    page, errors = open_report(browser, rdir / "report.html")
    for s in SECTIONS:
        el = page.locator(f"section#{s}")
        assert el.is_visible() and len(el.inner_text()) > 80, s
        assert el.locator(".missing").count() == 0, s
    # the points drawn (marker paths; the roofs are lines), and the node names their hover text shows
    assert page.locator("#roofline-plot .scatterlayer .points path.point").count() == roofline_nodes(rdir)
    hover = page.evaluate("() => document.getElementById('roofline-plot')._fullData"
                          ".filter(t => t.meta === 'nodes').flatMap(t => Array.from(t.customdata, c => c[0]))")
    assert len(hover) == roofline_nodes(rdir) and "conv1" in hover
    for plot in ("time-classes-plot", "critical-path-plot", "energy-plot", "whatif-plot"):
        assert page.locator(f"#{plot} .main-svg").count() >= 1, plot
    bd = pd.read_csv(rdir / "boundaries.csv")
    assert page.locator("#wi-table tbody tr").count() == bd["rank"].notna().sum()
    assert page.locator("#splits img").count() == 2                 # both exported splits' diagrams, embedded
    assert errors == []
    page.close()


FIELDS = ["t_dev_a_us", "t_dev_b_us", "link_time_us", "link_energy_j", "est_latency_us", "est_energy_j",
          "time_imbalance", "period_us", "throughput_per_s", "score", "pareto_layer", "rank"]


def assert_same_as_07(rows, bd):
    assert len(rows) == len(bd)
    for r, (_, want) in zip(rows, bd.iterrows()):
        assert r["boundary"] == want["boundary"]
        assert bool(r["pruned"]) == bool(want["pruned"]), r["boundary"]
        codes = "" if pd.isna(want["pruned_by"]) else want["pruned_by"]
        assert set(filter(None, r["pruned_by"].split(";"))) == set(filter(None, codes.split(";")))
        for f in FIELDS:
            got, exp = r[f], want[f]
            if pd.isna(exp):
                assert got is None or np.isnan(got), (r["boundary"], f)
            else:
                assert got == exp, (r["boundary"], f, got, exp)        # bit-identical: the same IEEE operations


def test_whatif_reproduces_07_at_the_config(browser, built):
    model, rdir = built
    page, errors = open_report(browser, rdir / "report.html")
    rows = page.evaluate("() => window.nnperfWhatIf.current().rows")
    assert_same_as_07(rows, pd.read_csv(rdir / "boundaries.csv", keep_default_na=False, na_values=[""]))
    assert errors == []
    page.close()


def test_whatif_bandwidth_ranks_as_07_does(browser, built, tmp_path):
    """Move the link bandwidth in the page; run 07 with that bandwidth in a system.yaml copy; same ranking."""
    model, rdir = built
    system = yaml.safe_load((REPO / "configs" / "system.yaml").read_text())
    system["link"]["bandwidth_bytes_per_s"] = 1.0e6
    (tmp_path / "system.yaml").write_text(yaml.safe_dump(system))
    copy = tmp_path / "cnn"
    shutil.copytree(rdir, copy, ignore=shutil.ignore_patterns("splits"))
    r = run_stage("07_split_candidates.py", "--model", model, "--results", copy, "--system", tmp_path / "system.yaml", *ARGS07)
    assert r.returncode == 0, r.stderr
    slow = pd.read_csv(copy / "boundaries.csv", keep_default_na=False, na_values=[""])
    default = pd.read_csv(rdir / "boundaries.csv", keep_default_na=False, na_values=[""])
    order = lambda df: df[df["rank"].notna()].sort_values("rank")["boundary"].tolist()  # noqa: E731
    # the bandwidth really changes the figures the ranking rests on (whether the order moves too depends on
    # the latencies 01 measured on this tiny CNN: it did not in 2 runs of 5, which made this test flaky)
    crossing = default["comm_bytes"] > 0
    assert crossing.any() and (slow["link_time_us"][crossing] > default["link_time_us"][crossing]).all()
    page, errors = open_report(browser, rdir / "report.html")
    page.fill("#wi-link-bw", "1000000")
    assert_same_as_07(page.evaluate("() => window.nnperfWhatIf.current().rows"), slow)
    shown = page.eval_on_selector_all("#wi-table tbody tr", "rows => rows.map(r => [Number(r.cells[0].textContent), "
                                      "Number(r.cells[1].textContent), Number(r.cells[8].textContent)])")
    top = slow[slow["rank"].notna()].sort_values("rank")
    assert [(int(a), int(b)) for a, b, _ in shown] == list(zip(top["rank"].astype(int), top["boundary"]))
    assert [c for _, _, c in shown] == pytest.approx((top["est_latency_us"] / 1e3).tolist(), rel=1e-3)
    page.click("#wi-reset")
    assert [b for _, b, _ in page.eval_on_selector_all(
        "#wi-table tbody tr", "rows => rows.map(r => [0, Number(r.cells[1].textContent), 0])")] == order(default)
    # what 07 refuses, the page does not rank (a -1000 us link latency gave a split at -0.84 ms)
    before = page.inner_text("#wi-table tbody")
    for field, value in (("#wi-link-lat", "-1000"), ("#wi-b-power", "-5"), ("#wi-link-bw", "0")):
        page.fill(field, value)
        advice = page.inner_text("#wi-advice")
        assert advice.startswith("not computed: ") and "out of range" in advice, (field, advice)
        assert page.eval_on_selector(field, "e => e.classList.contains('bad')")
        assert page.inner_text("#wi-table tbody") == before
        page.click("#wi-reset")
    assert not page.inner_text("#wi-advice").startswith("not computed")
    assert errors == []
    page.close()


# ---------------------------------------------------------------- the graph section


def executed_shapes(model_path) -> dict[str, str]:
    """Every node output's shape as ONNX Runtime computes it (each exposed as a graph output), as 'AxBxC'."""
    m = onnx.load(str(model_path))
    outs = [o for nd in m.graph.node for o in nd.output if o]
    m.graph.output.extend([onnx.ValueInfoProto(name=o) for o in outs if o not in {x.name for x in m.graph.output}])
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {i.name: np.random.default_rng(0).standard_normal(i.shape).astype(np.float32) for i in sess.get_inputs()}
    names = [o.name for o in sess.get_outputs()]
    return {n: "x".join(map(str, v.shape)) for n, v in zip(names, sess.run(names, feed))}


def test_graph_section_draws_every_node_and_shape(browser, built):
    model, rdir = built
    page, errors = open_report(browser, rdir / "report.html")
    nodes = pd.read_csv(rdir / "ops_metrics.csv")["node"].tolist()
    drawn = page.eval_on_selector_all("#graph [data-node]", "els => els.map(e => e.dataset.node)")
    assert sorted(drawn) == sorted(nodes)                       # every node, once (9 nodes: drawn whole)
    edges = page.eval_on_selector_all("#graph .gedge", "els => els.map(e => [e.dataset.tensor, e.dataset.shape])")
    m = onnx.load(str(model))
    consumed = {(t, nd.name) for nd in m.graph.node for t in nd.input if t not in {i.name for i in m.graph.initializer}}
    assert len(edges) == len(consumed) == 10                    # x -> conv1, 8 node-to-node edges, r1 twice (skip)
    shapes = executed_shapes(model) | {"x": "1x3x32x32"}
    assert all(shape == shapes[t] for t, shape in edges), edges
    # the critical path's edges (04) and the chosen split's cut edges (07) are drawn over it
    cp = pd.read_csv(rdir / "critical_path.csv")["node"].tolist()
    assert page.locator("#graph .gedge.crit").count() == len(cp) - 1 and page.locator("#graph .gedge.cut").count() >= 1
    assert page.locator("#graph .fused-box").count() >= 1      # ORT fused bn1 (and relu1) into conv1's kernel
    page.click('#graph [data-node="conv2"]')
    row = dict(page.eval_on_selector_all("#graph-row tr", "rs => rs.map(r => [r.cells[0].textContent, r.cells[1].textContent])"))
    prof = pd.read_csv(rdir / "ops_profile.csv").set_index("node").loc["conv2"]
    assert row["node"] == "conv2" and row["op"] == "Conv" and row["bound"] == prof["bound"]
    assert row["FLOPs"] == f"{prof['flops'] / 1e6:.3g} MFLOP" and row["output shapes"] == shapes["c2"]
    page.fill("#graph-search", "relu")
    assert page.locator("#graph .gnode.hit").count() == 2 and "2 match" in page.inner_text("#graph-hits")
    for _ in range(4):
        page.click("#graph-zoom-in")                            # 2.4x: taller than the canvas
    page.locator("#graph-canvas").scroll_into_view_if_needed()
    box = page.locator("#graph-canvas").bounding_box()
    x, y = box["x"] + box["width"] - 30, box["y"] + box["height"] - 30    # the background, right of the drawing
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x, y - 200, steps=4)
    page.mouse.up()
    assert page.evaluate("() => document.getElementById('graph-canvas').scrollTop") == pytest.approx(200, abs=2)
    assert errors == []
    page.close()


def scoped_chain(path, blocks: int = 3, per: int = 4):
    """A chain of Relu nodes named as a TorchScript export names them: /blk{b}/act{k}/Relu; batch symbolic."""
    nodes, x = [], "x"
    for b in range(blocks):
        for k in range(per):
            y = f"t{b}_{k}"
            nodes.append(helper.make_node("Relu", [x], [y], name=f"/blk{b}/act{k}/Relu"))
            x = y
    return make_model(nodes, [tensor("x", ["batch", 8])], [tensor(x, ["batch", 8])], path=path)


def test_graph_collapses_by_scope_and_opens_on_click(browser, tmp_path):
    model = tmp_path / "chain.onnx"
    scoped_chain(model)
    rdir = tmp_path / "results" / "chain"
    r = run_stage("02_shapes_flops_bytes.py", "--model", model, "--results", rdir, "--shape-override", "x=3x8")
    assert r.returncode == 0, r.stderr
    r = run_stage("11_report.py", "--results", rdir, "--no-index", "--graph-collapse-above", "5")
    assert r.returncode == 0, r.stderr
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto((rdir / "report.html").resolve().as_uri(), wait_until="load")
    assert "Collapsed by layer name scope" in page.inner_text("#graph")
    groups = page.eval_on_selector_all("#graph .ggroup text:first-of-type", "els => els.map(e => e.textContent)")
    assert groups == ["blk0 (4)", "blk1 (4)", "blk2 (4)"]
    assert page.locator("#graph [data-node]").count() == 0
    # the symbolic batch as 02 resolved it (--shape-override x=3x8): graph input -> blk0 -> blk1 -> blk2
    assert page.eval_on_selector_all("#graph .gedge", "els => els.map(e => e.dataset.shape)") == ["3x8"] * 3
    page.click("#graph .ggroup >> nth=1")                       # blk1's box opens into its four nodes
    got = page.eval_on_selector_all("#graph [data-node]", "els => els.map(e => e.dataset.node)")
    assert got == [
        f"/blk1/act{k}/Relu" for k in range(4)]
    page.click("#graph-crumbs a")
    assert page.locator("#graph .ggroup").count() == 3
    page.fill("#graph-search", "act2")                          # found inside closed boxes; a result opens its box
    assert page.locator("#graph .ggroup.hit").count() == 3
    page.click("#graph-results li >> nth=2")
    assert page.locator('#graph .gnode.sel[data-node="/blk2/act2/Relu"]').count() == 1
    page.close()


def test_scopes_and_layout_engines():
    names = [f"/a/a.{k // 3}/op{k}/Relu" for k in range(9)] + ["tail"]
    sc = scopes(names, [""] * 10)
    assert sc[0] == ["a", "a.0", "op0"] and sc[9] == []
    vs = views(sc, threshold=4)                 # the root: box 'a' and node 9; 'a' (9 nodes): boxes a.0, a.1, a.2
    assert vs[0]["items"] == [("g", 1), ("n", 9)] and vs[1]["label"] == "a" and len(vs) == 5
    assert [vs[ref]["label"] for k, ref in vs[1]["items"]] == ["a.0", "a.1", "a.2"]
    assert vs[2]["items"] == [("n", 0), ("n", 1), ("n", 2)] and vs[2]["parent"] == 1
    assert scopes(["c", "n1", "n2"], ["", "a.b", "a"], succs=[[1], [2], []]) == [["a", "a.b"], ["a", "a.b"], ["a"]]
    flat = views([[]] * 450, threshold=200)                    # no scope at all: runs of 200 nodes
    assert [vs_["label"] for vs_ in flat[1:]] == ["nodes 0-199", "nodes 200-399", "nodes 400-449"]
    small = views([[]] * 9, threshold=5)                       # below CHUNK nodes, above the threshold: runs of 5
    assert [vs_["label"] for vs_ in small[1:]] == ["nodes 0-4", "nodes 5-8"]
    sizes, edges = [(80.0, 28.0)] * 4, [(0, 1, "1x8"), (0, 2, "1x8"), (1, 3, "1x8"), (2, 3, "1x8")]
    for name in ("dot", "grandalf") if shutil.which("dot") else ("grandalf",):
        (lay,) = layout_many([(sizes, edges)], name)
        ys = [b[1] for b in lay.boxes]
        assert ys[0] < ys[1] == ys[2] < ys[3], name             # layered, top to bottom
        assert all(0 <= b[0] - b[2] / 2 and b[0] + b[2] / 2 <= lay.w + 1 for b in lay.boxes), name
        assert len(lay.paths) == 4 and all(p[0].startswith("M") for p in lay.paths)


def test_without_graphviz_the_graph_is_laid_out_by_grandalf(built, tmp_path):
    """No dot on PATH: the default falls back to grandalf (same sections, every node laid out); asking for dot is a
    clean one-line error (exit 2)."""
    model, rdir = built
    copy = tmp_path / "cnn"
    shutil.copytree(rdir, copy, ignore=shutil.ignore_patterns("splits"))
    env = {"PATH": str(tmp_path)}                              # python runs by its full path; no dot on this PATH
    r = run_stage("11_report.py", "--results", copy, "--no-index", env=env)
    assert r.returncode == 0, r.stderr
    meta = json.loads((copy / "report_meta.json").read_text())["graph"]
    too_big = graph_section(Artifacts(copy), max_nodes=8)      # above the cap: said, not drawn
    assert not too_big["ok"] and too_big["missing"].startswith("the graph has 9 nodes, more than 8: not drawn")
    assert meta["engine"].startswith("grandalf") and meta["n"] == 9 and not meta["collapsed"]
    html = (copy / "report.html").read_text()
    data = json.loads(html.split('id="graph-data">', 1)[1].split("</script>", 1)[0])
    assert sorted(it[1] for it in data["views"][0]["items"] if it[0] == "n") == list(range(9))
    r = run_stage("11_report.py", "--results", copy, "--no-index", "--graph-layout", "dot", env=env)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "needs Graphviz" in lines[0] and "Traceback" not in r.stderr
    r = run_stage("11_report.py", "--results", copy, "--no-index", "--graph-collapse-above", "0")
    assert r.returncode == 2 and "--graph-collapse-above" in r.stderr


# ---------------------------------------------------------------- past the boundaries: DAG optimum, pipeline, bandwidth

def test_beyond_section_shows_the_sweep_and_the_dag_optimum(browser, built):
    """The bandwidth section's figures are split_summary.json's and bandwidth_sweep.csv's; the graph outlines the DAG
    optimum's side A (dag_partition.json) and marks the tensors it cuts."""
    model, rdir = built
    summ = json.loads((rdir / "split_summary.json").read_text())
    sw = pd.read_csv(rdir / "bandwidth_sweep.csv")
    page, errors = open_report(browser, rdir / "report.html")
    sec = page.locator("section#beyond")
    assert sec.locator(".missing").count() == 0 and page.locator("#bandwidth-plot .main-svg").count() >= 1
    best = page.evaluate("() => document.getElementById('bandwidth-plot')._fullData.filter(t => t.meta === 'best')"
                         ".map(t => [Array.from(t.x), Array.from(t.y), Array.from(t.customdata)])[0]")
    assert best[0] == pytest.approx(sw["bandwidth_mbit_s"].tolist()) and best[2] == sw["best"].tolist()
    assert best[1] == pytest.approx((sw["best_latency_us"] / 1e3).tolist())
    assert page.inner_text("#bandwidth-winners") == ", ".join(dict.fromkeys(sw["best"]))
    cells = lambda sel: page.eval_on_selector_all(sel, "rs => rs.map(r => Array.from(r.cells, c => c.textContent))")  # noqa: E731
    tables = sec.locator("table")
    dag, cross = cells("section#beyond table >> nth=0 >> tbody tr"), cells("section#beyond table >> nth=1 >> tbody tr")
    opt, opt_e = summ["dag_optimum"], summ["dag_optimum_energy"]
    assert [r[0] for r in dag] == ["latency", "energy"] and tables.count() == 4        # DAG, crossover, sweep, pipeline
    assert dag[0][1] == f"{opt['est_latency_us'] / 1e3:.3g} ms" and dag[1][2] == f"{opt_e['est_energy_j'] * 1e3:.3g} mJ"
    assert dag[0][3] == f"{opt['n_left']} / {opt['n_right']}" and dag[0][10] == ", ".join(opt["cut_tensors"])
    assert dag[0][8] == f"x{opt['gain_vs_all_on_a']['ratio']:.3g}" and dag[0][9] == f"x{opt['gain_vs_all_on_b']['ratio']:.3g}"
    want = {("DAG optimum" if k == "dag" else f"b{k}"): v for k, v in summ["bandwidth_crossover"].items()}
    assert {r[0] for r in cross} == set(want)
    for name, text in cross:                    # the tiny CNN: no split beats the NPU alone, so all "never"
        v = want[name]
        assert text == ("never" if v is None else "any bandwidth" if v == 0 else
                        f"{v / 1e6:.3g} MB/s ({8 * v / 1e6:.3g} Mbit/s)" if 1e6 <= v < 1e9 else bandwidth_text(v))
    assert bandwidth_text(2.5e7) == "25 MB/s (200 Mbit/s)" and bandwidth_text(None) == "never"
    assert len(cells("section#beyond table >> nth=2 >> tbody tr")) == len(sw)
    pipe = cells("section#beyond table >> nth=3 >> tbody tr")
    assert [r[0] for r in pipe] == ["latency", "throughput"]
    assert pipe[0][4] == f"{summ['pipeline']['latency']['est_latency_us'] / 1e3:.3g} ms"
    # the graph: every node on the DAG optimum's side A outlined, the rest marked B, its cut tensors' edges marked
    left = json.loads((rdir / "dag_partition.json").read_text())["partitions"]["latency"]["left_nodes"]
    sides = dict(page.eval_on_selector_all("#graph [data-node]", "els => els.map(e => [e.dataset.node, e.dataset.dag])"))
    assert {k for k, v in sides.items() if v == "A"} == set(left) and set(sides.values()) == {"A", "B"}
    assert page.locator("#graph rect.dag-a").count() == len(left)
    cut = page.eval_on_selector_all("#graph .gedge.dagcut", "els => els.map(e => e.dataset.tensor)")
    assert set(cut) == set(opt["cut_tensors"])
    page.click(f'#graph [data-node="{left[0]}"]')
    row = dict(page.eval_on_selector_all("#graph-row tr", "rs => rs.map(r => [r.cells[0].textContent, r.cells[1].textContent])"))
    assert row["DAG optimum"].startswith("device A (")
    assert errors == []
    page.close()


def test_dag_overlay_only_with_its_own_partition(built, tmp_path):
    """No dag_partition.json, or one from another run of 07: no overlay (and the page says nothing about it)."""
    model, rdir = built
    copy = tmp_path / "cnn"
    shutil.copytree(rdir, copy, ignore=shutil.ignore_patterns("splits", "pipeline"))
    g = graph_section(Artifacts(copy))
    assert g["dag"] and set(g["data"]["nodes"]["dag"]) == {"A", "B"}
    small = graph_section(Artifacts(copy), threshold=5)         # 9 nodes without scopes: two runs (used to recurse)
    assert [v["label"] for v in small["data"]["views"]] == ["whole graph", "nodes 0-4", "nodes 5-8"]
    part = json.loads((copy / "dag_partition.json").read_text())
    part["upstream"] = {"workload_profile.json": "0" * 32}
    (copy / "dag_partition.json").write_text(json.dumps(part))
    g = graph_section(Artifacts(copy))
    assert g["dag"] == "" and set(g["data"]["nodes"]["dag"]) == {""}
    (copy / "dag_partition.json").unlink()
    assert graph_section(Artifacts(copy))["dag"] == ""


def test_whatif_measured_is_the_devices_source(built):
    """07 fills latency_a_us and latency_b_us always: which list is 01's measured latency is devices.<key>.source."""
    model, rdir = built
    m = json.loads((rdir / "split_model.json").read_text())
    assert m["nodes"]["latency_a_us"] is not None and m["nodes"]["latency_b_us"] is not None
    assert m["devices"]["A"]["source"] == "measured" and measured_key(m) == "A"
    m["devices"]["A"]["source"] = "model"
    assert measured_key(m) is None
    m["devices"]["B"]["source"] = "measured"
    assert measured_key(m) == "B"


def test_beyond_and_overlay_on_a_non_prefix_optimum(tmp_path):
    """test_dag_split's two branches (the DAG optimum is not a prefix): the graph's DAG sides are dag_partition.json's
    node set, and the crossover table shows split_summary.json's bandwidths."""
    model = tmp_path / "branches.onnx"
    branches(model)
    costs(model, tmp_path)
    r = run_stage("07_split_candidates.py", "--model", model, "--results", tmp_path, "--system", dag_system(tmp_path / "s.yaml"))
    assert r.returncode == 0, r.stderr
    summ = json.loads((tmp_path / "split_summary.json").read_text())
    left = json.loads((tmp_path / "dag_partition.json").read_text())["partitions"]["latency"]["left_nodes"]
    assert not summ["dag_optimum"]["is_prefix"]
    art = Artifacts(tmp_path)
    g = graph_section(art)
    assert [n for n, d in zip(g["data"]["nodes"]["name"], g["data"]["nodes"]["dag"]) if d == "A"] == left
    assert "not a prefix" in g["dag"]
    cut = {t for v in g["data"]["views"] for e in v["edges"] if e[9] for t in e[3].split(";")}
    assert cut == set(summ["dag_optimum"]["cut_tensors"])
    sec = beyond_section(art)
    shown = dict(sec["crossover"]["rows"])
    want = {("DAG optimum" if k == "dag" else f"b{k}"): bandwidth_text(v) for k, v in summ["bandwidth_crossover"].items()}
    assert shown == want and any(v is not None for v in summ["bandwidth_crossover"].values())
    assert sec["dag"]["rows"][0][6] == "no" and sec["pipeline"] is None


def test_static_roofline_draws_one_memory_roof_per_level():
    """Stage 06's roofline.png: with per-level bandwidths in the host file, one memory roof per level, labelled
    with its size and bandwidth, at bandwidth x intensity up to the peak; a host with one level draws none."""
    from lib.report.plots import roofline_plot
    host = {"peak_flops_per_s": {"default": 2e11, "float": 2e11}, "mem_bw_bytes_per_s": 2e10,
            "caches_bytes": {"L1": 32768, "L2": 1 << 20, "L3": 32 << 20},
            "bandwidth_bytes_per_s": {"L1": 2e11, "L2": 1e11, "L3": 5e10, "DRAM": 2e10}}
    prof = pd.DataFrame({"achieved_gflops": [50.0], "ai_flop_per_byte": [4.0], "dtype": ["float"],
                         "op_class": ["conv"], "pct_latency": [100.0]})
    ax = roofline_plot(prof, host, "t").axes[0]
    lines = {ln.get_label(): ln for ln in ax.get_lines()}
    assert [k for k in lines if k[:2] in ("L1", "L2", "L3", "DR")] == [
        "L1 (32 KiB): 200 GB/s", "L2 (1 MiB): 100 GB/s", "L3 (32 MiB): 50 GB/s", "DRAM: 20 GB/s"]
    x, y = lines["L2 (1 MiB): 100 GB/s"].get_data()
    i = int(np.argmin(np.abs(x - 1.0)))
    assert y[i] == pytest.approx(100 * x[i]) and y.max() == pytest.approx(200.0)   # 100 GB/s x AI, up to 200 GFLOP/s
    plain = {k: v for k, v in host.items() if k not in ("caches_bytes", "bandwidth_bytes_per_s")}
    assert not [ln for ln in roofline_plot(prof, plain, "t").axes[0].get_lines() if ln.get_label().startswith("DRAM")]
    from lib.report.page import level_bandwidths      # the summary's host row says the same levels
    assert level_bandwidths(host) == "; per level (the roofline's bound): L1 200 GB/s, L2 100 GB/s, L3 50 GB/s, DRAM 20 GB/s"
    assert level_bandwidths(plain) == ""


def test_log_axes_are_labelled_in_plain_text(tmp_path):
    """06's log axes: tick labels as text ("0.001", "1e-05"), not the raw mathtext "$\\mathdefault{10^{-2}}$"
    that the default formatter gives when mathtext is off for node names (a "$x$" name stays literal)."""
    from lib.report.plots import energy_plot, save
    fig = energy_plot(pd.DataFrame({"op_class": ["conv", "$x_1$"], "e_compute_j": [1e-3, 1e-6], "e_mem_j": [1e-4, 1e-5],
                                    "e_power_j": [2e-3, 1e-4]}), "t", "20 W")
    ax = fig.axes[0]
    save(fig, tmp_path, "e", ("png",))
    ticks = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert ticks and not [t for t in ticks if "$" in t or "mathdefault" in t]
    assert {float(t.replace("\u2212", "-")) for t in ticks} >= {1e-3, 1e-2}     # mJ: the decades the bars span
    assert "$x_1$" in [t.get_text() for t in ax.get_yticklabels()]


def test_energy_row_index_staleness_and_bad_index(built, tmp_path):
    """The energy section's power x time is 05's whole-inference figure (P x the session), not the sum over nodes;
    the index lists a folder whose artifacts changed since its report as pending, not with the old figures; an
    --index in a folder that does not exist and an energy.csv without its columns are refused in one line."""
    model, rdir = built
    meta = json.loads((rdir / "energy_meta.json").read_text())
    whole = meta["energy_per_inference"]["power x time"]
    html = (rdir / "report.html").read_text()
    assert f"<td>power x time</td><td>{whole['energy_j'] * 1e3:.3g} mJ</td>" in html
    assert "01&#39;s median session latency" in html
    # the what-if offers 01's measured times only for the device that is the profiled host (B, an NPU, got the CPU's)
    select = {k: html.split(f'id="wi-{k}-source">', 1)[1].split("</select>", 1)[0] for k in "ab"}
    assert 'value="measured"' in select["a"] and 'value="measured"' not in select["b"]
    copy = tmp_path / "results" / "cnn"
    shutil.copytree(rdir, copy)
    from lib.report.page import build_index
    page, n = build_index(copy.parent)
    assert n == 1 and 'href="cnn/report.html"' in page
    em = json.loads((copy / "energy_meta.json").read_text())
    (copy / "energy_meta.json").write_text(json.dumps({**em, "run_id": "another run"}))    # 05 ran again since
    page, n = build_index(copy.parent)
    assert n == 0 and "cnn (its artifacts changed since its report: re-run 11_report.py)" in page
    assert_clean_error(run_stage("11_report.py", "--results", rdir, "--index", tmp_path / "nowhere" / "i.html"),
                       "--index", "existing folder")
    # an energy.csv without its columns beside a meta of a version that recorded no table sizes: one line
    (copy / "energy_meta.json").write_text(json.dumps({k: v for k, v in em.items() if k != "tables"}))
    pd.read_csv(copy / "energy.csv")[["node", "op_type"]].to_csv(copy / "energy.csv", index=False)
    assert_clean_error(run_stage("11_report.py", "--results", copy, "--no-index"), "energy.csv lacks columns",
                       "05_energy_estimate.py")


def test_plots_without_stage_01_show_the_prediction_and_say_why_the_roofline_is_empty():
    """Without 01: 'where the time goes' drew the roofline bound alone, the roofline bare axes labelled measured."""
    from lib.report.plots import latency_by_class_plot, roofline_plot
    prof = pd.DataFrame({"node": ["c", "r"], "op_type": ["Conv", "Relu"], "op_class": ["conv", "activation"],
                         "latency_us": [np.nan, np.nan], "t_pred_us": [40.0, 2.0], "t_roofline_us": [10.0, 0.5],
                         "achieved_gflops": [np.nan, np.nan], "ai_flop_per_byte": [20.0, 0.25], "dtype": ["float"] * 2,
                         "pct_latency": [np.nan, np.nan]})
    ax = latency_by_class_plot(prof, "t").axes[0]
    bars = {c.get_label(): [p.get_width() for p in c.patches] for c in ax.containers}
    assert bars["predicted (stage 03's baseline, no stage 01)"] == pytest.approx([2.0e-3, 40.0e-3])   # ms, by size
    host = {"peak_flops_per_s": {"default": 2e11}, "mem_bw_bytes_per_s": 2e10}
    texts = [t.get_text() for t in roofline_plot(prof, host, "t").axes[0].texts]
    assert any("nothing to place (without stage 01, none has a time)" in t for t in texts)
