"""ONNX Runtime profiling, and attribution of every executed kernel's time back to the original ONNX nodes.

ORT rewrites the graph before running it (at its default level: constant folding, Conv+BN/activation/Add
fusion, NCHWc layout with Reorder nodes...). Kernel events name *optimized* nodes, so we also save ORT's
optimized graph and map each optimized node onto original nodes:
1. its original output tensor: an output whose name exists in the original graph, else the longest
   prefix of its node name that is an original tensor or node name (ORT names fused nodes
   "<original>_<suffix>", e.g. "relu_nchwc");
2. the original nodes it *covers*: walking back from that tensor through the original graph until a tensor
   that some kernel materializes (or a weight/graph input). Its anchor is the covered node doing the most
   work (MACs, then FLOPs); the others are recorded as fused into it and get 0 us of their own;
3. kernels with no original tensor (layout Reorder*, inserted casts/copies) take the anchor of a neighbour
   they feed or are fed by.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx
import pandas as pd

from .errors import StageError
from .graph import Graph
from .op_costs import is_mac_op, node_cost, op_key

PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
             "tensorrt": "TensorrtExecutionProvider", "dml": "DmlExecutionProvider",
             "openvino": "OpenVINOExecutionProvider", "coreml": "CoreMLExecutionProvider"}
OPT_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
              "layout": "ORT_ENABLE_LAYOUT", "all": "ORT_ENABLE_ALL"}


def _session(model_path: str, provider: str, threads: int, opt_level: str, profile_prefix: str,
             optimized_path: str):
    import onnxruntime as ort
    ort.set_default_logger_severity(4)   # ORT's own log lines would break the one-line error contract
    if provider not in PROVIDERS:
        raise StageError(f"unknown --provider {provider}: choose from {', '.join(PROVIDERS)}")
    ep = PROVIDERS[provider]
    if ep not in ort.get_available_providers():
        raise StageError(f"provider {provider} ({ep}) is not available in this onnxruntime build "
                         f"(available: {', '.join(ort.get_available_providers())})")
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = profile_prefix
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, OPT_LEVELS[opt_level])
    so.optimized_model_filepath = optimized_path
    so.log_severity_level = 4   # fatal only: a failed load must print our one line, not ORT's log
    if threads:
        so.intra_op_num_threads = threads
    try:
        return ort.InferenceSession(model_path, so, providers=[ep])
    except Exception as e:  # noqa: BLE001 - ORT raises its own Fail/InvalidGraph/NotImplemented types
        msg = " ".join(str(e).split())
        raise StageError(f"ONNX Runtime cannot load the model: {msg[:400]}") from None


def profile_model(model_path: str, feeds: dict[str, np.ndarray], *, provider="cpu", runs=10, warmup=3,
                  threads=0, opt_level="all", progress=True, keep_dir: Path | None = None) -> dict:
    """Run the model `warmup + runs` times with ORT's profiler; return raw kernel events per measured run.
    keep_dir: where ORT's own trace (Chrome trace JSON) and optimized model are kept for the user."""
    with tempfile.TemporaryDirectory(prefix="ortprof_") as tmp:
        opt_path = os.path.join(tmp, "optimized.onnx")
        sess = _session(model_path, provider, threads, opt_level, os.path.join(tmp, "prof"), opt_path)
        wall = []
        try:
            for r in range(warmup + runs):
                t0 = time.perf_counter()
                sess.run(None, feeds)
                dt = (time.perf_counter() - t0) * 1e6
                if r >= warmup:
                    wall.append(dt)
                if progress:
                    print(f"\r  run {r + 1}/{warmup + runs}{' (warm-up)' if r < warmup else ''}",
                          end="", file=sys.stderr, flush=True)
        except Exception as e:  # noqa: BLE001
            raise StageError(f"ONNX Runtime failed while running the model: {' '.join(str(e).split())[:400]}") from None
        finally:
            if progress:
                print(file=sys.stderr)
            prof_file = sess.end_profiling()
        events = json.loads(Path(prof_file).read_text())
        optimized = onnx.load(opt_path, load_external_data=False) if os.path.exists(opt_path) else None
        if keep_dir is not None:
            _keep(Path(prof_file), Path(opt_path), Path(keep_dir))
    runs_ev = [e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"]
    runs_ev.sort(key=lambda e: e["ts"])
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in runs_ev][warmup:]
    kernels = [e for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")]
    per_run: list[dict[str, float]] = [defaultdict(float) for _ in windows]
    starts = np.array([w[0] for w in windows])
    for e in kernels:
        k = int(np.searchsorted(starts, e["ts"], side="right")) - 1
        if 0 <= k < len(windows) and e["ts"] <= windows[k][1]:
            per_run[k][e["name"][: -len("_kernel_time")]] += float(e["dur"])
    return {"per_run": [dict(d) for d in per_run], "wall_us": wall, "optimized": optimized,
            "kernel_ops": {e["name"][: -len("_kernel_time")]: e.get("args", {}).get("op_name", "") for e in kernels}}


def _keep(trace: Path, optimized: Path, dest: Path) -> None:
    """ORT's trace, and its optimized graph with the weights' bytes stripped (lib/onnx_io.py): the graph is what
    checking the kernel-to-node mapping needs, and a copy of every weight would double the results' size."""
    from .artifacts import atomic_path
    from .onnx_io import read_light
    with atomic_path(dest / "ort_trace.json") as tmp:
        shutil.copyfile(trace, tmp)
    if optimized.exists():
        with atomic_path(dest / "ort_optimized.onnx") as tmp:
            tmp.write_bytes(read_light(optimized).model.SerializeToString())


LAYOUT_KERNELS = {"ReorderInput", "ReorderOutput", "MemcpyFromHost", "MemcpyToHost"}


def _original_tensor(name: str, outputs: list[str], g: Graph, node_index: dict[str, int]) -> tuple[str | None, bool]:
    """(original tensor a kernel produces, whether it was found exactly by output name)."""
    for o in outputs:
        if o in g.producer:
            return o, True
    parts = name.split("_")
    for k in range(len(parts) - 1, 0, -1):
        cand = "_".join(parts[:k])
        if cand in g.producer:
            return cand, False
        if cand in node_index and g.nodes[node_index[cand]].output:
            return g.nodes[node_index[cand]].output[0], False
    return None, False


def _work(node, g: Graph) -> tuple[float, float]:
    c = node_cost(node, g)
    return (0.0, 0.0) if c is None else (c[1], c[0])


def attribute(g: Graph, optimized: onnx.ModelProto | None, kernel_names: list[str]) -> dict:
    """Map optimized-graph kernels onto original node positions (see the module docstring).

    Returns {"anchor": {kernel: pos or None}, "fused_into": {pos: anchor pos}}.
    """
    node_index = {n: i for i, n in enumerate(g.names)}
    opt_nodes = {n.name: n for n in optimized.graph.node} if optimized is not None else {}
    opt_order = {n.name: i for i, n in enumerate(optimized.graph.node)} if optimized is not None else {}
    tensor_of: dict[str, str | None] = {}
    exact: dict[str, bool] = {}
    for k in kernel_names:
        n = opt_nodes.get(k)
        if k in node_index and (n is None or n.op_type == g.nodes[node_index[k]].op_type):
            tensor_of[k], exact[k] = next((o for o in g.nodes[node_index[k]].output if o), None), True
        else:
            tensor_of[k], exact[k] = _original_tensor(k, list(n.output) if n is not None else [], g, node_index)
    materialized = {t for t in tensor_of.values() if t}
    stop = set(g.initializers) | set(g.graph_inputs)
    owner: dict[int, str] = {}          # original node position -> kernel that ran it
    anchor: dict[str, int | None] = {k: None for k in kernel_names}
    fused_into: dict[int, int] = {}

    def cover(k: str, group: list[int]) -> None:
        best = max(group, key=lambda p: (_work(g.nodes[p], g), -p))
        anchor[k] = best
        for pos in group:
            owner[pos] = k
            if pos != best:
                fused_into[pos] = best

    # exactly named kernels first (their walk back is precise), then name-derived ones; layout kernels later
    computing = [k for k in kernel_names if tensor_of[k] and opt_nodes.get(k, None) is not None
                 and opt_nodes[k].op_type not in LAYOUT_KERNELS or (tensor_of[k] and k not in opt_nodes)]
    for k in sorted(computing, key=lambda k: not exact[k]):
        start = g.producer[tensor_of[k]]
        if start in owner:            # a second kernel for the same tensor: share its anchor
            anchor[k] = anchor[owner[start]]
            continue
        group, stack = [], [start]
        while stack:
            pos = stack.pop()
            if pos in owner or pos in group:
                continue
            group.append(pos)
            # a name-derived kernel is one heavy op plus its epilogue: never walk back past the heavy op
            if not exact[k] and is_mac_op(g.nodes[pos]):
                continue
            for inp in g.nodes[pos].input:
                if inp and inp not in stop and inp not in materialized and inp in g.producer:
                    stack.append(g.producer[inp])
        cover(k, group)
    # epilogues (Relu/Add/BN fused after a kernel whose name gave only its first tensor): forward fill
    for pos in range(len(g.nodes)):
        if pos in owner:
            continue
        preds = [p for p in g.preds(pos) if p in owner]
        if preds:
            # the kernel that ran last among the producers is the one that consumed the others (Conv+Sum)
            k = max((owner[p] for p in preds), key=lambda kk: (opt_order.get(kk, -1), g.producer[tensor_of[kk]]))
            owner[pos] = k
            fused_into[pos] = anchor[k]
    # kernels with no original tensor of their own (layout Reorder*, copies): a neighbour's anchor,
    # producers first (a ReorderOutput converts what its producer computed), then consumers
    if optimized is not None:
        prod = {o: n.name for n in optimized.graph.node for o in n.output}
        cons = defaultdict(list)
        for n in optimized.graph.node:
            for i in n.input:
                cons[i].append(n.name)
        for _ in range(len(kernel_names)):
            changed = False
            for k in kernel_names:
                if anchor.get(k) is not None or k not in opt_nodes:
                    continue
                n = opt_nodes[k]
                near = [prod[i] for i in n.input if i in prod] + [c for o in n.output for c in cons.get(o, ())]
                got = next((anchor[m] for m in near if anchor.get(m) is not None), None)
                if got is not None:
                    anchor[k], changed = got, True
            if not changed:
                break
    return {"anchor": anchor, "fused_into": fused_into}


def latency_table(g: Graph, prof: dict) -> tuple[pd.DataFrame, dict]:
    """ops_latency rows (one per original node) and the attribution summary."""
    per_run = prof["per_run"]
    kernels = sorted({k for run in per_run for k in run})
    att = attribute(g, prof["optimized"], kernels)
    n_nodes, n_runs = len(g.nodes), len(per_run)
    times = np.zeros((n_runs, n_nodes))
    attributed = np.zeros(n_runs)
    total = np.zeros(n_runs)
    unattributed: dict[str, float] = defaultdict(float)
    kernels_of = defaultdict(list)
    for k in kernels:
        a = att["anchor"].get(k)
        if a is not None:
            kernels_of[a].append(k)
    for r, run in enumerate(per_run):
        for k, us in run.items():
            total[r] += us
            a = att["anchor"].get(k)
            if a is None:
                unattributed[k] += us / max(n_runs, 1)
            else:
                times[r, a] += us
                attributed[r] += us
    med = np.median(times, axis=0) if n_runs else np.full(n_nodes, np.nan)
    p10 = np.percentile(times, 10, axis=0) if n_runs else med
    p90 = np.percentile(times, 90, axis=0) if n_runs else med
    rows = []
    for pos in range(n_nodes):
        if kernels_of.get(pos):
            how = "kernel"
        elif pos in att["fused_into"]:
            how = "fused"
        else:
            how = "not_run"  # constant-folded or removed by ORT (Identity, Dropout, shape arithmetic)
        rows.append({
            "node": g.names[pos], "op_type": op_key(g.nodes[pos]),
            "latency_us": float(med[pos]), "p10_us": float(p10[pos]), "p90_us": float(p90[pos]), "runs": n_runs,
            "attribution": how,
            "fused_into": g.names[att["fused_into"][pos]] if pos in att["fused_into"] else "",
            "ort_kernels": ";".join(kernels_of.get(pos, [])),
        })
    cov = float(attributed.sum() / total.sum()) if total.sum() > 0 else float("nan")
    summary = {
        "kernel_time_coverage": cov,
        "kernel_time_per_run_us": {"median": float(np.median(total)) if n_runs else None},
        "kernels": len(kernels),
        "unattributed_kernels_us": dict(sorted(unattributed.items(), key=lambda kv: -kv[1])),
        "nodes_with_kernel": int(sum(1 for r in rows if r["attribution"] == "kernel")),
        "nodes_fused": int(sum(1 for r in rows if r["attribution"] == "fused")),
        "nodes_not_run": int(sum(1 for r in rows if r["attribution"] == "not_run")),
    }
    return pd.DataFrame(rows), summary


def percentiles(values: list[float]) -> dict:
    if not values:
        return {}
    a = np.asarray(values)
    return {"median_us": float(np.median(a)), "p10_us": float(np.percentile(a, 10)),
            "p90_us": float(np.percentile(a, 90)), "min_us": float(a.min()), "runs": int(len(a))}
