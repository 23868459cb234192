"""Stage 09 as one call: trace, characterize, fuse, concurrency, hardware mapping -> tables and summary."""
from __future__ import annotations

import numpy as np

from lib.errors import StageError
from lib.fx.analysis import characterize, load_torch_model, trace
from lib.fx.fusion import compute_nodes, concurrency, fuse
from lib.fx.hardware import hardware_table, load_profiles, map_subgraphs


def parse_shape(text: str) -> list[int]:
    try:
        dims = [int(d) for d in text.lower().split("x")]
    except ValueError:
        dims = []
    if not dims or any(d <= 0 for d in dims):
        raise StageError(f"bad --input-shape '{text}': expected positive dims like 1x3x224x224")
    return dims


def analyze(spec: str, shape: list[int], max_fuse: int = 8, hardware_dir=None) -> dict:
    import torch
    model = load_torch_model(spec)
    gm, how = trace(model)
    try:
        nodes = characterize(gm, torch.randn(*shape))
    except StageError:
        raise
    except Exception as e:  # noqa: BLE001 - the model's own check (vit_b_16's AssertionError on the image size)
        raise StageError(f"{spec} does not run on one float32 tensor of shape {'x'.join(map(str, shape))} (09 feeds "
                         f"nothing else: wrap a model that takes integer ids, several or named inputs in a factory "
                         f"whose module takes that one tensor): {type(e).__name__}: "
                         f"{' '.join(str(e).split())[:200]}") from None
    nodes = compute_nodes(nodes)
    if nodes.empty:
        raise StageError(f"{spec} computes nothing from its input (no node but weights and shape arithmetic)")
    sg, group = fuse(nodes, max_fuse)
    nodes["subgraph"] = group
    profiles = load_profiles(hardware_dir) if hardware_dir else load_profiles()
    host = profiles.get("host") or next(iter(profiles.values()))
    # node-level time on the host for the critical path: each node as its own (unfused) kernel
    single = nodes.assign(subgraph=np.arange(len(nodes)), bytes_after=nodes["in_bytes"] + nodes["out_bytes"] + nodes["weight_bytes"])
    node_time = map_subgraphs(single, host)["latency_us"].to_numpy()
    nodes["host_time_us"] = node_time
    conc = concurrency(nodes, node_time)
    nodes["stage"] = conc.pop("stage_of_node")
    host_map = map_subgraphs(sg, host)
    sg = sg.merge(host_map.add_prefix("host_").rename(columns={"host_subgraph": "subgraph"}), on="subgraph")
    # the profiles' sweep takes figures of one sample (map_subgraphs): at --batch N, sg holds N samples' (the
    # batch-1 row of resnet18 at --batch 8 was 8 samples: 46 inf/s and 2.2 J/inf for 359 and 0.28)
    n = shape[0]
    one = sg if n == 1 else sg.assign(flops=sg["flops"] / n, threads=sg["threads"] / n,
                                       bytes_after=(sg["bytes_after"] - sg["weight_bytes"]) / n + sg["weight_bytes"])
    hw = hardware_table(one, profiles)
    bound = sg.groupby("host_bound")["host_latency_us"].sum()
    summary = {
        "model": spec, "input_shape": shape, "trace": how, "flops": float(nodes["flops"].sum()),
        # every MAC the counter saw (attention inside swin_t's leaf functions, class 'other', was left out)
        "macs_conv_linear_matmul": float(np.nansum(nodes["macs"].to_numpy(float))),
        "unknown_cost_ops": sorted(nodes.loc[~nodes["cost_known"], "kind"].unique().tolist()),
        "ops_before_fusion": int(len(nodes)), "subgraphs_after_fusion": int(len(sg)),
        "bytes_before_fusion": float(sg["bytes_before"].sum()), "bytes_after_fusion": float(sg["bytes_after"].sum()),
        "patterns": sg["pattern"].value_counts().to_dict(),
        "arithmetic_intensity": float(nodes["flops"].sum() / sg["bytes_after"].sum()),
        "depthwise_ops": int(nodes["depthwise"].sum()),
        "bottleneck_mix_host": {k: float(v / bound.sum()) for k, v in bound.items()},
        **conc,
    }
    return {"nodes": nodes, "subgraphs": sg, "hardware": hw, "summary": summary, "profiles": profiles}


def compare_row(name: str, res: dict) -> dict:
    """One model's line of --compare: totals, fusion, concurrency, and batch-1 latency/energy per hardware."""
    s, hw = res["summary"], res["hardware"]
    row = {"model": name, "gflops": s["flops"] / 1e9, "gmacs": s["macs_conv_linear_matmul"] / 1e9,
           "ops": s["ops_before_fusion"], "subgraphs": s["subgraphs_after_fusion"],
           "bytes_saved_pct": 100 * (1 - s["bytes_after_fusion"] / s["bytes_before_fusion"]),
           "max_parallel": s["max_parallel_ops"], "critical_path_ops": s["critical_path_ops"],
           "ai_flop_per_byte": s["arithmetic_intensity"],
           "host_memory_bound_pct": 100 * s["bottleneck_mix_host"].get("memory", 0.0)}
    for r in hw[hw["point"] == "batch1"].itertuples():
        row[f"{r.hardware}_ms"] = r.latency_us / 1e3
        row[f"{r.hardware}_mj"] = r.energy_per_inference_j * 1e3
    return row
