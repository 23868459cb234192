"""Stage 09 as one call: trace, characterize, fuse, concurrency, hardware mapping -> tables and summary."""
from __future__ import annotations

import sys

import numpy as np

from lib.errors import StageError
from lib.fx.analysis import characterize, load_torch_model, trace
from lib.fx.fusion import compute_nodes, concurrency, fuse
from lib.fx.hardware import hardware_table, load_profiles, map_subgraphs
from lib.units import fmt_bytes, fmt_count


def parse_shape(text: str) -> list[int]:
    try:
        dims = [int(d) for d in text.lower().split("x")]
    except ValueError:
        dims = []
    if not dims or any(d <= 0 for d in dims):
        raise StageError(f"bad --input-shape '{text}': expected positive dims like 1x3x224x224")
    return dims


def _batch_dim_hint(model, shape: list[int], batch_dim: int | None) -> None:
    """Say when dim 0 may not count samples: modules that take sequence-first input (an LSTM's 10-step sequence was
    mapped as 10 samples, at a tenth of its work each)."""
    seq_first = sorted({type(m).__name__ for m in model.modules() if getattr(m, "batch_first", True) is False})
    if seq_first and batch_dim == 0:
        print(f"warning: {', '.join(seq_first)} take sequence-first input (batch_first=False): the hardware table "
              f"counts dim 0 of {'x'.join(map(str, shape))} as samples; if it is the sequence, pass --batch-dim 1 (or "
              f"none for one unbatched sequence)", file=sys.stderr)


def analyze(spec: str, shape: list[int], max_fuse: int = 8, hardware_dir=None, batch_dim: int | None = 0) -> dict:
    """batch_dim: the dim of `shape` that counts samples (the hardware table is per sample), None for one sample
    (an unbatched sequence; a sequence-first model's batch is dim 1: dim 0 gave it 1/T of its work)."""
    import torch
    model = load_torch_model(spec)
    _batch_dim_hint(model, shape, batch_dim)
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
    host_name = "host" if "host" in profiles else next(iter(profiles))
    if host_name != "host":     # its figures are another device's: said (the critical path read 0.26 ms for 15.2)
        print(f"warning: no host.yaml among the hardware profiles: the host figures (critical path, node times, "
              f"bottlenecks) are {host_name}'s", file=sys.stderr)
    host = profiles[host_name]
    # node-level time on the host for the critical path: each node as its own (unfused) kernel
    single = nodes.assign(subgraph=np.arange(len(nodes)), kernel=~nodes["view"],
                          bytes_after=(nodes["in_bytes"] + nodes["out_bytes"] + nodes["weight_bytes"]).where(~nodes["view"], 0))
    node_time = map_subgraphs(single, host)["latency_us"].to_numpy()
    nodes["host_time_us"] = node_time
    conc = concurrency(nodes, node_time)
    nodes["stage"] = conc.pop("stage_of_node")
    host_map = map_subgraphs(sg, host)
    sg = sg.merge(host_map.add_prefix("host_").rename(columns={"host_subgraph": "subgraph"}), on="subgraph")
    # the profiles' sweep takes figures of one sample (map_subgraphs): at --batch N, sg holds N samples' (the
    # batch-1 row of resnet18 at --batch 8 was 8 samples: 46 inf/s and 2.2 J/inf for 359 and 0.28)
    n = 1 if batch_dim is None else shape[batch_dim]
    one = sg if n == 1 else sg.assign(flops=sg["flops"] / n, threads=sg["threads"] / n,
                                       bytes_after=(sg["bytes_after"] - sg["weight_bytes"]) / n + sg["weight_bytes"])
    hw = hardware_table(one, profiles)
    bound = sg.groupby("host_bound")["host_latency_us"].sum()
    summary = {
        "model": spec, "input_shape": shape, "batch_dim": batch_dim, "host_profile": host_name, "trace": how,
        "flops": float(nodes["flops"].sum()),
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
           "host_memory_bound_pct": 100 * s["bottleneck_mix_host"].get("memory", 0.0),
           "unknown_cost_ops": ";".join(s["unknown_cost_ops"])}     # left out of the totals (not 0: unknown)
    for r in hw[hw["point"] == "batch1"].itertuples():
        row[f"{r.hardware}_ms"] = r.latency_us / 1e3
        row[f"{r.hardware}_mj"] = r.energy_per_inference_j * 1e3
    return row


def print_report(res: dict) -> None:
    """Stage 09's console summary of one model."""
    s, hw = res["summary"], res["hardware"]
    print(f"{s['model']} ({s['trace']}), input {'x'.join(map(str, s['input_shape']))}: "
          f"{fmt_count(s['macs_conv_linear_matmul'])}MAC conv/linear/matmul, {fmt_count(s['flops'])}FLOP in all")
    if s["unknown_cost_ops"]:
        print(f"  cost unknown, left out of these totals: {', '.join(s['unknown_cost_ops'])}")
    print(f"  fusion: {s['ops_before_fusion']} ops -> {s['subgraphs_after_fusion']} subgraphs; memory traffic "
          f"{fmt_bytes(s['bytes_before_fusion'])} -> {fmt_bytes(s['bytes_after_fusion'])} "
          f"({100 * (1 - s['bytes_after_fusion'] / s['bytes_before_fusion']):.1f}% saved)")
    print(f"  concurrency: {s['stages']} stages, max {s['max_parallel_ops']} ops in parallel; critical path "
          f"{s['critical_path_ops']} of {s['ops']} ops, {fmt_count(s['critical_path_flops'])}FLOP, "
          f"{s['critical_path_time_us'] / 1e3:.2f} ms on the host model (each op its own kernel; the rows below "
          f"run the fused subgraphs)")
    print(f"  arithmetic intensity {s['arithmetic_intensity']:.1f} FLOP/B; host bottlenecks "
          + ", ".join(f"{k} {100 * v:.0f}%" for k, v in s["bottleneck_mix_host"].items()))
    print(f"  {'hardware':<18} {'point':<10} {'batch':>5} {'latency ms':>10} {'inf/s':>9} {'mJ/inf':>8} {'util':>6}")
    for r in hw.itertuples():
        print(f"  {r.hardware:<18} {r.point:<10} {r.batch:>5} {r.latency_us / 1e3:>10.3f} {r.throughput_per_s:>9.0f} "
              f"{r.energy_per_inference_j * 1e3:>8.3f} {r.utilization:>6.2f}")
