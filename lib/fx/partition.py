"""Stage 09 as one call: trace, characterize, fuse, concurrency, hardware mapping -> tables and summary."""
from __future__ import annotations

import numpy as np

from lib.errors import StageError
from lib.fx.analysis import MAC_CLASSES, characterize, load_torch_model, trace
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
    except RuntimeError as e:
        raise StageError(f"{spec} does not run on input shape {'x'.join(map(str, shape))}: "
                         f"{' '.join(str(e).split())[:200]}") from None
    nodes = compute_nodes(nodes)
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
    hw = hardware_table(sg, profiles)
    mac_cls = nodes["op_class"].isin(MAC_CLASSES)
    bound = sg.groupby("host_bound")["host_latency_us"].sum()
    summary = {
        "model": spec, "input_shape": shape, "trace": how, "flops": float(nodes["flops"].sum()),
        "macs_conv_linear_matmul": float(nodes.loc[mac_cls, "macs"].sum()),
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
