#!/usr/bin/env python3
"""The DAG optimum's minimum cut (lib/split/dag.py, scipy's maximum_flow): its wall time on synthetic graphs of
growing size, and on real exports how it compares with the best boundary of 07's order.

    .venv/bin/python bench/dag_cut_scaling.py [--sizes 10000 50000 200000] [--models googlenet densenet121 resnet50] [--record]

Sizes: bench/synthetic_graphs.py's graph, indexed in process (no stage run); per-node device times are the
roofline of each node's output bytes at 10 GB/s on each of two devices, scaled per node and device by a seeded
random factor in 0.2..5 (each node prefers one device: the cut has real choices); the link: 10 GB/s + 1 us per
tensor. Timed: building the
flow graph, and the cut (best_partition: one flow run unless a device ends up empty). Models: built into
models/ when missing (random weights), stages 02, 03 and 07 with configs/system.yaml; the DAG optimum must
never be worse than the best boundary (exit 1 if it is), and its gains are printed.
"""
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _models import ensure_model, parser, run_stage  # noqa: E402
from synthetic_graphs import build  # noqa: E402

from bench.record import record  # noqa: E402
from lib.onnx.graph import build_graph, constant_tensors, graph_arrays  # noqa: E402
from lib.split.dag import best_partition, cut_graph, evaluate, objectives  # noqa: E402

SYSTEM = {"devices": {"A": {"power_w": 10.0}, "B": {"power_w": 2.0}},
          "link": {"bandwidth_bytes_per_s": 1e10, "latency_us": 1.0, "energy_per_byte_j": 1e-10}}


def cut_time(n: int) -> dict:
    """Wall times of the flow graph and the cut on a synthetic graph of about n nodes."""
    g = build_graph(onnx.shape_inference.infer_shapes(build(n)))
    a = graph_arrays(g, constant_tensors(g))
    rng = np.random.default_rng(0)
    out_bytes = np.bincount(np.maximum(a.t_prod, 0), weights=np.nan_to_num(a.t_nbytes) * (a.t_prod >= 0),
                            minlength=len(a.names))
    ta = out_bytes / 1e10 * 1e6 * rng.uniform(0.2, 5, len(a.names))
    tb = out_bytes / 1e10 * 1e6 * rng.uniform(0.2, 5, len(a.names))
    t0 = time.perf_counter()
    cg = cut_graph(a)
    t1 = time.perf_counter()
    left, info = best_partition(cg, *objectives(cg, ta, tb, SYSTEM)["latency"])
    t2 = time.perf_counter()
    ev = evaluate(a, cg, left, ta, tb, SYSTEM)
    multi = int((cg.x_single < 0).sum())
    return {"nodes": cg.n, "vertices": cg.n + multi + 2, "edges": 2 * cg.n + len(cg.x_prod) + len(cg.prec_rows) + multi,
            "build_s": t1 - t0, "cut_s": t2 - t1, "flow_runs": info["flow_runs"], "n_left": ev["n_left"],
            "prefix": ev["is_prefix"]}


def model_gain(name: str, rdir: Path) -> dict:
    """07 on a real export: the DAG optimum against the best boundary and both single devices."""
    model = ensure_model(name)
    run_stage("02_shapes_flops_bytes.py", "--model", model, "--results", rdir)
    run_stage("03_merge_profile_metrics.py", "--results", rdir)
    run_stage("07_split_candidates.py", "--model", model, "--results", rdir)
    s = json.loads((rdir / "split_summary.json").read_text())
    d = s["dag_optimum"]
    return {"model": name, "nodes": d["n_left"] + d["n_right"], "dag_us": d["est_latency_us"],
            "boundary": d["gain_vs_best_boundary"]["boundary"], "boundary_us": d["gain_vs_best_boundary"]["est_latency_us"],
            "vs_boundary": d["gain_vs_best_boundary"]["ratio"], "vs_a": d["gain_vs_all_on_a"]["ratio"],
            "vs_b": d["gain_vs_all_on_b"]["ratio"], "prefix": d["is_prefix"], "n_left": d["n_left"],
            "cut": d["n_cut_tensors"]}


def main():
    p = parser(__doc__)
    p.add_argument("--models", nargs="*", default=["googlenet", "densenet121", "resnet50"])
    p.add_argument("--sizes", type=int, nargs="*", default=[10_000, 50_000, 200_000])
    p.add_argument("--record", action="store_true", help="write the tables into bench/RESULTS.md")
    a = p.parse_args()
    lines = ["| nodes | flow vertices | flow edges | build flow graph (s) | min cut (s) | flow runs | nodes on A | prefix |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for n in a.sizes:
        r = cut_time(n)
        lines.append(f"| {r['nodes']} | {r['vertices']} | {r['edges']} | {r['build_s']:.2f} | {r['cut_s']:.2f} | "
                     f"{r['flow_runs']} | {r['n_left']} | {r['prefix']} |")
        print(lines[-1], flush=True)
    lines += ["", "| model | nodes | DAG optimum (ms) | best boundary | its latency (ms) | x vs boundary | x vs all on A | "
              "x vs all on B | nodes on A | cut tensors | prefix |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    worse = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models:
            r = model_gain(name, Path(tmp) / name)
            worse += [name] if r["dag_us"] > r["boundary_us"] * (1 + 1e-9) else []
            lines.append(f"| {name} | {r['nodes']} | {r['dag_us'] / 1e3:.3f} | b{r['boundary']} | {r['boundary_us'] / 1e3:.3f} | "
                         f"{r['vs_boundary']:.3f} | {r['vs_a']:.3f} | {r['vs_b']:.3f} | {r['n_left']} | {r['cut']} | {r['prefix']} |")
            print(lines[-1], flush=True)
    if a.record:
        record("dag_cut_scaling", "\n".join(lines) + "\n", "python bench/dag_cut_scaling.py " + " ".join(sys.argv[1:]))
    if worse:
        sys.exit(f"the DAG optimum is worse than the best boundary on {worse}")
    print("the DAG optimum is never worse than the best boundary" if a.models else "")


if __name__ == "__main__":
    main()
