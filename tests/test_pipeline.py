"""End to end: the stage scripts on real exports, cross-checked against independent references."""
import json

import numpy as np
import pandas as pd
import pytest
from onnx import helper

from conftest import REPO, costs, make_model, run_stage, small_cnn, tensor, weight
from lib.onnx.graph import build_graph, load_model
from lib.units import fmt_us

STAGES = ["01_profile_onnx.py", "02_shapes_flops_bytes.py", "03_merge_profile_metrics.py",
          "04_critical_path.py", "05_energy_estimate.py", "06_plots.py"]


def run_all(model, rdir, runs=3):
    extra = {"01_profile_onnx.py": ["--runs", runs, "--warmup", 1]}
    for s in ["02_shapes_flops_bytes.py", "01_profile_onnx.py"] + STAGES[2:]:
        r = run_stage(s, "--model", model, "--results", rdir, *extra.get(s, []))
        assert r.returncode == 0, f"{s}: {r.stderr}"


def check_outputs(model, rdir):
    g = build_graph(load_model(model))
    prof = pd.read_csv(rdir / "ops_profile.csv")
    assert list(prof["node"]) == g.names
    for col in ["ai_flop_per_byte", "t_compute_us", "t_mem_us", "t_roofline_us", "bound", "achieved_gflops",
                "pct_latency", "latency_us", "p10_us", "p90_us", "flops", "macs"]:
        assert col in prof.columns
    assert prof["pct_latency"].sum() == pytest.approx(100.0)
    meta = json.loads((rdir / "profile_meta.json").read_text())
    assert meta["kernel_time_coverage"] >= 0.99
    # the critical path: a real chain of edges, sum >= critical >= largest node
    cp = pd.read_csv(rdir / "critical_path.csv", keep_default_na=False)
    pos = [g.names.index(n) for n in cp["node"]]
    for u, v in zip(pos, pos[1:]):
        assert u in g.preds(v), f"{g.names[u]} -> {g.names[v]} is not an edge"
    assert not g.preds(pos[0]) or all(g.names[p] not in set(cp["node"]) for p in g.preds(pos[0]))
    # a fused group's time on its last node, the kernel named (it starts when all the group's inputs are ready)
    kernel = {n: a or n for n, a in zip(prof["node"], prof["fused_into"].fillna(""))}
    assert cp["kernel"].tolist() == [kernel[n] for n in cp["node"]]
    crit = cp["finish_us"].iat[-1]
    lat = prof["latency_us"]
    assert lat.max() - 1e-6 <= crit <= lat.sum() + 1e-6
    assert np.allclose(cp["finish_us"] - cp["start_us"], cp["latency_us"])
    assert (cp["start_us"].iloc[1:].to_numpy() >= cp["finish_us"].iloc[:-1].to_numpy() - 1e-6).all()
    energy = pd.read_csv(rdir / "energy.csv")
    assert np.allclose(energy["e_total_j"], energy["e_compute_j"] + energy["e_mem_j"])
    amd = pd.read_csv(rdir / "amdahl.csv")
    f, s = amd["f_latency"].iat[0], amd["s_k_latency"].iat[0]
    assert amd["s_total_latency"].iat[0] == pytest.approx(1 / ((1 - f) + f / s))
    # a whole inference's power x time and Amdahl's "before": 01's median session, not the sum of profiled kernels
    em = json.loads((rdir / "energy_meta.json").read_text())
    session = meta["session_latency"]["median_us"]
    assert em["inference_us"] == session and (amd["latency_before_us"] == session).all()
    assert em["energy_per_inference"]["power x time"]["energy_j"] == pytest.approx(em["avg_power_w"] * session * 1e-6)
    cands = pd.read_csv(rdir / "kernel_candidates.csv")
    assert cands["reason"].str.len().min() > 0
    for name in ["roofline", "energy_breakdown", "critical_path_gantt"]:
        for ext in ("png", "svg"):
            assert (rdir / "plots" / f"{name}.{ext}").stat().st_size > 1000
    return prof, cands


def test_end_to_end_small_model(tmp_path):
    model = tmp_path / "cnn.onnx"
    small_cnn(model)
    rdir = tmp_path / "res"
    run_all(model, rdir)
    prof, cands = check_outputs(model, rdir)
    by = prof.set_index("node")
    assert by.loc["conv1", "macs"] == 16 * 32 * 32 * 27
    assert by.loc["conv2", "macs"] == 16 * 32 * 32 * 16 * 9
    assert by.loc["fc", "macs"] == 160
    assert cands.set_index("kernel").loc["conv", "selected"]
    # a target slower than the host at conv (S_k 0.5) was still selected, the model 2x slower "after"
    slow = tmp_path / "offload.yaml"
    slow.write_text((REPO / "configs" / "offload.yaml").read_text().replace("  conv: 8\n", "  conv: 0.5\n"))
    r = run_stage("05_energy_estimate.py", "--model", model, "--results", rdir, "--offload", slow)
    assert r.returncode == 0, r.stderr
    conv = pd.read_csv(rdir / "kernel_candidates.csv").set_index("kernel").loc["conv"]
    assert not conv["selected"] and conv["reason"].endswith("; the target is not faster (S_k 0.5)")
    # the sums in units that fit them: this model's roofline sum is a few microseconds (it read "0.00 ms")
    out = run_stage("03_merge_profile_metrics.py", "--model", model, "--results", rdir).stdout
    assert f"roofline sum {fmt_us(prof['t_roofline_us'].sum())} vs measured sum {fmt_us(prof['latency_us'].sum())}" in out
    assert prof["t_roofline_us"].sum() < 1e3 and "roofline sum 0.00" not in out
    pred = json.loads((rdir / "merge_meta.json").read_text())["prediction"]
    assert f"predicted latency {fmt_us(pred['predicted_latency_us'])} (" in out


def test_durations_in_units_that_fit_them():
    assert [fmt_us(x) for x in (3.24, 1234.0, 2.5e6, float("nan"))] == ["3.24 us", "1.23 ms", "2.5 s", "n/a"]


def test_end_to_end_resnet18_matches_flop_counter(tv_models, tmp_path):
    """resnet18 through every stage; Conv/Gemm MACs equal PyTorch's own FlopCounterMode (2 FLOPs per MAC)."""
    import torch
    import torchvision
    from torch.utils.flop_counter import FlopCounterMode

    model = tv_models("resnet18")
    rdir = tmp_path / "resnet18"
    run_all(model, rdir)
    prof, _ = check_outputs(model, rdir)
    ours = prof.loc[prof["op_type"].isin(["Conv", "Gemm", "MatMul"]), "macs"].sum()
    net = torchvision.models.resnet18(weights=None).eval()
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        net(torch.randn(1, 3, 224, 224))
    assert ours == pytest.approx(fc.get_total_flops() / 2, rel=1e-6)


# torchvision's documented "GFLOPS" are MACs (one fused multiply-add = 1), rounded to 2 decimals
DOCUMENTED_GMACS = {"resnet50": 4.09, "resnet18": 1.81, "mobilenet_v2": 0.30, "efficientnet_b0": 0.39}


def flop_counter_macs(name):
    import torch
    import torchvision
    from torch.utils.flop_counter import FlopCounterMode
    net = torchvision.models.get_model(name, weights=None).eval()
    with FlopCounterMode(display=False) as fc, torch.no_grad():
        net(torch.randn(1, 3, 224, 224))
    return fc.get_total_flops() / 2


@pytest.mark.parametrize("name", list(DOCUMENTED_GMACS))
def test_macs_match_torchvision_documentation(tv_models, tmp_path, name):
    model = tv_models(name)
    r = run_stage("02_shapes_flops_bytes.py", "--model", model, "--results", tmp_path)
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(tmp_path / "ops_metrics.csv")
    assert df["cost_known"].all(), df.loc[~df["cost_known"], "op_type"].unique()
    macs = df.loc[df["op_type"].isin(["Conv", "Gemm", "MatMul"]), "macs"].sum()
    # the documented figure, to the 2 decimals it is published with (efficientnet_b0: 0.3858 -> 0.39) ...
    assert round(macs / 1e9, 2) == DOCUMENTED_GMACS[name]
    assert macs / 1e9 == pytest.approx(DOCUMENTED_GMACS[name], rel=0.015)
    # ... and exactly PyTorch's own count on the same network
    assert macs == pytest.approx(flop_counter_macs(name), rel=1e-6)
    assert "MAC " in r.stdout and "FLOP" in r.stdout     # every printed figure carries its unit


def test_node_names_that_look_like_math_are_drawn_as_text(tmp_path):
    """A node named 'mm $\\undefinedcmd{x}$' stopped 06 with matplotlib's mathtext error (a traceback, half the
    plots written); '$x_1$' was drawn as math."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"], name="mm $\\undefinedcmd{x}$"),
             helper.make_node("Relu", ["a"], ["y"], name="relu $x_1$ & $^{$")]
    model = tmp_path / "math.onnx"
    make_model(nodes, [tensor("x", [4, 8])], [tensor("y", None)], [weight("w", (8, 8))], path=model)
    costs(model, tmp_path)
    for s in STAGES[3:]:
        r = run_stage(s, "--model", model, "--results", tmp_path)
        assert r.returncode == 0 and "Traceback" not in r.stderr, f"{s}: {r.stderr}"
    assert (tmp_path / "plots" / "critical_path_gantt.png").exists() and (tmp_path / "plots_meta.json").exists()
