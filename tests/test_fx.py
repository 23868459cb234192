"""Stage 09: FX characterization, fusion, concurrency and hardware mapping."""
import json

import pandas as pd
import pytest

from conftest import REPO, run_stage
from lib.fx.hardware import load_profiles, map_subgraphs
from lib.fx.partition import analyze

SHAPE = [1, 3, 8, 8]


def test_hand_made_costs_fusion_and_concurrency():
    res = analyze("tests.fx_models:fork_join", SHAPE)
    n = res["nodes"].set_index("node")
    assert n.loc["conv", "macs"] == 8 * 8 * 8 * 3 * 9 and n.loc["conv", "flops"] == 2 * 8 * 8 * 8 * 3 * 9
    assert n.loc["a", "macs"] == n.loc["b", "macs"] == 8 * 64 * 8
    assert n.loc["fc", "macs"] == 512 * 10 and n.loc["fc", "op_class"] == "gemm"
    assert n.loc["bn", "flops"] == 2 * 512 and n.loc["relu", "flops"] == 512 and n.loc["add", "flops"] == 512
    assert n.loc["conv", "weight_bytes"] == 8 * 3 * 9 * 4 and n.loc["conv", "out_bytes"] == 512 * 4
    sg = res["subgraphs"]
    # fork after relu ends the first subgraph; the join (add) starts one; flatten rides along; fc is new
    assert list(sg["nodes"]) == ["conv;bn;relu", "a", "b", "add;relu2;flatten", "fc"]
    assert list(sg["pattern"])[0] == "Conv+BN+ReLU" and list(sg["pattern"])[3] == "Add+ReLU"
    first = sg.iloc[0]
    assert first["internal_bytes"] == 2 * 512 * 4 and first["bytes_saved"] == 2 * first["internal_bytes"]
    s = res["summary"]
    assert s["ops_before_fusion"] == 9 and s["subgraphs_after_fusion"] == 5
    assert s["max_parallel_ops"] == 2 and s["stages"] == 8                # a and b run side by side
    assert s["critical_path_ops"] == 8                                    # one of a/b is off the path
    hw = res["hardware"]
    assert set(hw["hardware"]) >= {"h100_sxm5", "tpu_v4", "hailo8", "kpu_t64", "desktop_i7_12700k", "host"}
    # utilization by hand: threads / (waves x units x lanes), waves = ceil(threads / (units x lanes))
    from lib.fx.hardware import load_profiles, map_subgraphs
    prof = load_profiles()["h100_sxm5"]
    lanes = prof["compute_units"] * prof["lanes_per_unit"]
    sg = pd.DataFrame({"subgraph": [0, 1], "threads": [lanes // 2, lanes + 1], "flops": [1e6, 1e6],
                       "bytes_after": [1e3, 1e3], "weight_bytes": [0.0, 0.0]})
    util = map_subgraphs(sg, prof)["utilization"].tolist()
    assert util == pytest.approx([(lanes // 2) / lanes, (lanes + 1) / (2 * lanes)])


def test_resnet18_is_a_chain_with_downsample_branches():
    s = analyze("resnet18", [1, 3, 224, 224])["summary"]
    assert s["max_parallel_ops"] == 2
    assert s["critical_path_ops"] >= 0.9 * s["ops"]
    assert s["subgraphs_after_fusion"] < s["ops_before_fusion"] and s["bytes_after_fusion"] < s["bytes_before_fusion"]


@pytest.mark.parametrize("name,gmacs", [("resnet18", 1.81), ("resnet50", 4.09), ("mobilenet_v2", 0.30),
                                        ("efficientnet_b0", 0.39), ("vit_b_16", 17.56)])
def test_macs_match_torchvision(name, gmacs):
    s = analyze(name, [1, 3, 224, 224])["summary"]
    assert round(s["macs_conv_linear_matmul"] / 1e9, 2) == gmacs
    assert s["macs_conv_linear_matmul"] / 1e9 == pytest.approx(gmacs, rel=0.015)
    assert not s["unknown_cost_ops"]


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_fx_and_onnx_totals_agree(tv_models, tmp_path, name):
    r = run_stage("02_shapes_flops_bytes.py", "--model", tv_models(name), "--results", tmp_path)
    assert r.returncode == 0, r.stderr
    onnx_df = pd.read_csv(tmp_path / "ops_metrics.csv")
    res = analyze(name, [1, 3, 224, 224])
    assert res["summary"]["macs_conv_linear_matmul"] == pytest.approx(onnx_df["macs"].sum(), rel=0.01)
    # the ONNX exporter folds BatchNormalization into the convolutions; FX keeps it as its own node
    fx_flops = res["nodes"].loc[res["nodes"]["op_class"] != "norm", "flops"].sum()
    assert not (onnx_df["op_type"] == "BatchNormalization").any()
    assert fx_flops == pytest.approx(onnx_df["flops"].sum(), rel=0.01)
    sg = res["subgraphs"]
    assert len(sg) < res["summary"]["ops_before_fusion"] and sg["bytes_saved"].sum() > 0


def test_stage_script_outputs_and_bad_input(tmp_path):
    r = run_stage("09_fx_partition.py", "--model", "tests.fx_models:fork_join", "--input-shape", "1x3x8x8",
                  "--results", tmp_path)
    assert r.returncode == 0, r.stderr
    assert "9 ops -> 5 subgraphs" in r.stdout
    for f in ("fx_nodes.csv", "fx_subgraphs.csv", "fx_hardware.csv", "fx_summary.json"):
        assert (tmp_path / f).exists()
    summary = json.loads((tmp_path / "fx_summary.json").read_text())
    assert all(summary["hardware_sources"].values())                      # every profile cites its sources
    assert "cost unknown" not in r.stdout and "each op its own kernel" in r.stdout     # the critical path's basis
    r = run_stage("09_fx_partition.py", "--model", "tests.fx_models:with_gate", "--input-shape", "1x3x8x8",
                  "--results", tmp_path / "g")
    assert r.returncode == 0 and "leaf" in (r.stdout + r.stderr)           # fallback, and it says so
    for args, needle in ((["--model", "no_such_net"], "unknown model"),
                         (["--model", "tests.fx_models:untraceable"], "cannot trace"),
                         (["--model", "resnet18", "--input-shape", "1x3xbad"], "bad --input-shape"),
                         (["--model", "tests.fx_models:fork_join", "--input-shape", "1x5x8x8"], "does not run")):
        r = run_stage("09_fx_partition.py", *args, "--results", tmp_path / "x")
        assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def test_macs_that_the_counter_sees_in_any_class_and_recurrent_nets():
    """Every MAC FlopCounterMode counts (attention inside a TransformerEncoder, a dict-returning leaf module),
    the hand count of an LSTM it does not count, and figures per sample at a batch of 4."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from tests import fx_models
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        for name, shape in (("encoder", [1, 10, 32]), ("dict_wrap", [1, 16])):
            with torch.no_grad(), FlopCounterMode(display=False) as fc:
                getattr(fx_models, name)().eval()(torch.randn(*shape))
            s = analyze(f"tests.fx_models:{name}", shape)["summary"]
            assert s["macs_conv_linear_matmul"] == fc.get_total_flops() / 2 > 0, name   # were 0 MAC
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
    res = analyze("tests.fx_models:recurrent", [2, 5, 8])
    lstm = res["nodes"].set_index("kind").loc["LSTM"] if "LSTM" in set(res["nodes"]["kind"]) else \
        res["nodes"][res["nodes"]["op_class"] == "recurrent"].iloc[0]
    layer1, layer2 = 2 * 5 * 2 * 4 * 16 * (8 + 16), 2 * 5 * 2 * 4 * 16 * (32 + 16)    # dirs x steps x batch x gates
    assert lstm["macs"] == layer1 + layer2 and lstm["cost_known"]                      # was 0, marked known
    # hand counts (steps x batch x (gates x hidden x (input + its recurrent width) + the projection)): a GRU's
    # matmuls, which the counter sees, were counted twice (the formula on top); proj_size and one unbatched
    # sequence (5 x 8: its cost was unknown, printed as 0 MAC) were not counted
    for name, shape, hand in (("gru", [2, 5, 8], 5 * 2 * 3 * 16 * (8 + 16)),
                              ("lstm_proj", [2, 5, 8], 5 * 2 * (4 * 16 * (8 + 4) + 16 * 4)),
                              ("lstm_seq_first", [5, 8], 5 * 4 * 16 * (8 + 16))):
        assert analyze(f"tests.fx_models:{name}", shape)["summary"]["macs_conv_linear_matmul"] == hand, name
    one, four = (analyze("tests.fx_models:fork_join", [b, 3, 8, 8])["hardware"].set_index(["hardware", "point"])
                 for b in (1, 4))
    assert four.loc[("desktop_i7_12700k", "batch1"), "latency_us"] == pytest.approx(
        one.loc[("desktop_i7_12700k", "batch1"), "latency_us"], rel=1e-9)      # per sample, whatever the batch
    # a sequence-first input (T, N, F): its batch is dim 1 (dim 0 made a 5-step sequence 1/5 of its work)
    one, four = (analyze("tests.fx_models:lstm_seq_first", [5, b, 8], batch_dim=1)["hardware"]
                 .set_index(["hardware", "point"]) for b in (1, 4))
    for key in (("desktop_i7_12700k", "batch1"), ("h100_sxm5", "batch1")):
        assert four.loc[key, "energy_per_inference_j"] == pytest.approx(one.loc[key, "energy_per_inference_j"], rel=1e-9)
    unbatched = analyze("tests.fx_models:lstm_seq_first", [5, 8], batch_dim=None)["hardware"].set_index(["hardware", "point"])
    assert unbatched.loc[("h100_sxm5", "batch1"), "energy_per_inference_j"] == pytest.approx(
        one.loc[("h100_sxm5", "batch1"), "energy_per_inference_j"], rel=1e-9)


def test_bad_factories_and_empty_models_in_one_line(tmp_path):
    (tmp_path / "file").write_text("")          # refused before the analysis (it ran, then a traceback)
    r = run_stage("09_fx_partition.py", "--model", "tests.fx_models:fork_join", "--results", tmp_path / "file" / "x")
    assert r.returncode == 2 and "is a file, not a folder" in r.stderr and "Traceback" not in r.stderr, r.stderr
    for args, needle in ((["--model", "resnet18", "--compare", "tests.fx_models:fork_join"], "not both"),
                         (["--model", "tests.fx_models:fork_join", "--batch-dim", "4"], "--batch-dim must be a dim"),
                         (["--model", "tests.fx_models:fork_join", "--batch-dim", "none", "--batch", "2"], "--batch-dim"),
                         (["--model", "tests.fx_models:raises"], "tests.fx_models:raises() failed: ValueError"),
                         (["--model", "tests.fx_models:nothing", "--input-shape", "1x8"], "computes nothing"),
                         (["--model", "vit_b_16", "--input-shape", "1x3x64x64"], "does not run on one float32 tensor of shape")):
        r = run_stage("09_fx_partition.py", *args, "--results", tmp_path / "x")
        assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)


def test_compare_leaves_out_a_model_it_cannot_analyse_by_name(tmp_path):
    r = run_stage("09_fx_partition.py", "--compare", "tests.fx_models:fork_join", "tests.fx_models:untraceable",
                  "--input-shape", "1x3x8x8", "--results", tmp_path)
    assert r.returncode == 0 and "tests.fx_models:untraceable left out of the comparison: " in r.stderr, r.stderr
    assert list(pd.read_csv(tmp_path / "fx_compare.csv")["model"]) == ["tests.fx_models:fork_join"]


def test_a_fused_subgraph_reads_the_graph_input_it_uses():
    """add(x, attention) + LayerNorm: x (1x10x64 fp32, 2,560 B) comes from no node; bytes_after left it out."""
    sg = analyze("tests.fx_models:attention_block", [1, 10, 64])["subgraphs"].set_index("pattern")
    row = sg.loc["add+LayerNorm"]
    assert row["bytes_after"] == 2560 + 2560 + 2560 + 2 * 64 * 4      # x, attention in; its output; LayerNorm's weights


def test_objects_held_outputs_in_place_ops_returned_tensors_and_picks():
    """Hand counts on models as people write them (each figure was wrong before): a custom leaf returning a plain
    object (its Linear had no output: utilization 1e-9, 3.9 s), read by getattr (dropped as a shape op, which cut
    the edge), an LSTM inside a custom leaf (0 MACs, marked known), a tensor the model returns fused away, an
    in-place mul_ (cost unknown, unordered against a later relu of the same tensor), a pool's kernel_size given
    by keyword (an IndexError), the parts of x.chunk(4) (each charged the whole input)."""
    res = analyze("tests.fx_models:wrapped_linear", [2, 16])
    n, s = res["nodes"].set_index("kind"), res["summary"]
    assert n.loc["Backbone", "macs"] == 2 * 16 * 16 and n.loc["Backbone", "out_bytes"] == 2 * 16 * 4
    assert n.loc["Backbone", "host_time_us"] < 100 and s["critical_path_ops"] == 3 == s["stages"]
    assert analyze("tests.fx_models:wrapped_lstm", [2, 7, 16])["nodes"].set_index("kind").loc["Backbone"][
        ["macs", "cost_known"]].tolist() == [2 * 7 * 16 * 16 + 7 * 2 * 4 * 32 * (16 + 32), True]
    res = analyze("tests.fx_models:edges", [1, 2, 6, 6])
    n, sg = res["nodes"].set_index("node"), res["subgraphs"]
    assert n.loc["conv", "subgraph"] != n.loc["clone", "subgraph"]            # y is returned: written
    assert n.loc["mul_", ["flops", "cost_known"]].tolist() == [72, True]
    assert "mul_" in n.loc["relu", "inputs"].split(";") and n.loc["relu", "stage"] > n.loc["mul_", "stage"]
    assert n.loc["avg_pool2d", "flops"] == 2 * 3 * 3 * 4
    picks = ["getitem", "getitem_1", "getitem_2", "getitem_3"]     # each reads its 18 floats (not the whole x)
    assert (n.loc[picks, "in_bytes"] == 18 * 4).all() and n.loc[picks, "view"].all()
    # views of x: no kernel runs them (their readers read the 72 bytes), nothing moved, no launch charged
    by = sg.set_index("nodes").loc[picks]
    assert (by["bytes_after"] == 0).all() and not by["kernel"].any()
    m = map_subgraphs(sg, res["profiles"]["host"]).set_index("subgraph")
    assert (m.loc[by["subgraph"], "latency_us"] == 0).all() and (m["latency_us"] > 0).sum() == (sg["kernel"]).sum()


def test_max_fuse_and_module_paths_that_do_not_import_are_one_line(tmp_path):
    for args, needle in ((["--model", "tests.fx_models:fork_join", "--max-fuse", "0"], "--max-fuse must be >= 1"),
                         (["--model", ":f"], "cannot import :f: ValueError"),
                         (["--model", ".fx_models:f"], "cannot import .fx_models:f: TypeError")):
        r = run_stage("09_fx_partition.py", *args, "--input-shape", "1x3x8x8", "--results", tmp_path / "x")
        assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, (args, r.stderr)
        assert not (tmp_path / "x").exists()


def test_a_subgraph_whose_outputs_were_not_seen_runs_at_the_peak():
    """threads 0 (no output tensor seen) gave utilization 1e-9: a 16x16 Linear took 3.9 s on the host."""
    prof = load_profiles()["host"]
    sg = pd.DataFrame({"subgraph": [0], "threads": [0], "flops": [2e6], "bytes_after": [0.0], "weight_bytes": [0.0]})
    m = map_subgraphs(sg, prof)
    peak = float(prof["peak_flops_per_s"][prof.get("run_precision", "fp32")])
    assert m["utilization"].iat[0] == 1.0
    assert m["latency_us"].iat[0] == pytest.approx(2e6 / peak * 1e6 + float(prof.get("kernel_overhead_us", 0.0)))


def test_host_figures_from_another_profile_are_said(tmp_path, capsys):
    """--hardware-dir without host.yaml: the host figures (critical path, node times) are another device's: said
    and recorded (they read 0.26 ms for the host's 15.2, silently)."""
    import shutil
    shutil.copy(REPO / "configs" / "hardware" / "h100_sxm5.yaml", tmp_path / "h100_sxm5.yaml")
    s = analyze("tests.fx_models:fork_join", SHAPE, hardware_dir=tmp_path)["summary"]
    assert s["host_profile"] == "h100_sxm5" and "no host.yaml among the hardware profiles" in capsys.readouterr().err
    assert analyze("tests.fx_models:fork_join", SHAPE)["summary"]["host_profile"] == "host"


def test_functional_norms_are_costed_and_fused_like_their_modules():
    """F.batch_norm / F.layer_norm (timm's norm layers, torchvision's LayerNorm2d): the registry's per-element
    FLOPs and the conv's epilogue (they were unknown: EfficientNet-B0 from timm read 173 subgraphs, 124 from
    torchvision)."""
    from lib.onnx.ops import REGISTRY
    n = analyze("tests.fx_models:functional_norms", SHAPE)["nodes"].set_index("kind")
    out = 4 * 8 * 8
    assert n.loc["batch_norm", "flops"] == REGISTRY["BatchNormalization"].per_element * out
    assert n.loc["layer_norm", "flops"] == REGISTRY["LayerNormalization"].per_element * out
    assert n["cost_known"].all() and n.loc["batch_norm", "subgraph"] == n.loc["Conv2d", "subgraph"] == n.loc["relu", "subgraph"]


def test_sequence_first_modules_get_a_batch_dim_hint(capsys):
    analyze("tests.fx_models:lstm_seq_first", [5, 2, 8])
    assert "LSTM take sequence-first input" in capsys.readouterr().err
    analyze("tests.fx_models:lstm_seq_first", [5, 2, 8], batch_dim=1)
    assert "sequence-first" not in capsys.readouterr().err
