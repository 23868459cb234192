"""Stage 09, part 2: greedy sequential fusion of FX nodes into subgraphs, and concurrency from real edges."""
from __future__ import annotations

import numpy as np
import pandas as pd

from lib.analysis.dag import longest_path, stages

EPILOGUE = {"norm", "activation", "elementwise", "data_movement", "softmax"}
# what one fused attention block contains (nn.MultiheadAttention is one leaf node in the FX graph)
ATTENTION_PARTS = "Q/K/V projections, QK^T, softmax, .V, output projection"


def compute_nodes(nodes: pd.DataFrame) -> pd.DataFrame:
    """Nodes that produce tensors from activations (weights and shape arithmetic left out)."""
    return nodes[~nodes["op_class"].isin(["shape", "weight"])].reset_index(drop=True)


def edges(nodes: pd.DataFrame) -> list[list[int]]:
    index = {n: i for i, n in enumerate(nodes["node"])}
    return [[index[p] for p in str(inp).split(";") if p in index] if inp == inp and inp else []
            for inp in nodes["inputs"]]


def pattern(kinds: list[str], classes: list[str]) -> str:
    k = [x.lower() for x in kinds]
    has = lambda *names: any(any(n in x for n in names) for x in k)  # noqa: E731
    if classes[0] == "attention":
        return f"attention ({ATTENTION_PARTS})"
    if classes[0].startswith("conv"):
        if has("batchnorm") and has("relu6", "hardtanh"):
            return "Conv+BN+ReLU6"
        if has("batchnorm") and has("relu", "silu", "hardswish", "sigmoid", "gelu"):
            return "Conv+BN+ReLU" if has("relu") else "Conv+BN+activation"
        if has("batchnorm"):
            return "Conv+BN"
        return "Conv" if len(k) == 1 else "Conv+epilogue"
    if classes[0] == "gemm":
        return "Linear+activation" if "activation" in classes else ("Linear" if len(k) == 1 else "Linear+epilogue")
    if k[0] in ("add", "iadd") and len(k) > 1 and classes[1] == "activation":
        return "Add+ReLU" if "relu" in k[1] else "Add+activation"
    return "+".join(kinds) if len(kinds) <= 3 else f"{kinds[0]}+{len(kinds) - 1} ops"


def fuse(nodes: pd.DataFrame, max_ops: int = 8) -> tuple[pd.DataFrame, np.ndarray]:
    """Greedy sequential fusion: a node joins the running subgraph when its only producer is the subgraph's
    tail, the tail has no other user (no fork; the model's output counts as one: a tensor it returns is written),
    the node is not a join, it is an epilogue-class op, and the subgraph has fewer than max_ops nodes. Returns
    (subgraph table, subgraph id per node)."""
    preds = edges(nodes)
    users = nodes["returned"].astype(int).tolist() if "returned" in nodes else [0] * len(nodes)
    for ps in preds:
        for p in ps:
            users[p] += 1
    group = np.full(len(nodes), -1)
    members: list[list[int]] = []
    for i in range(len(nodes)):
        if members and len(preds[i]) == 1:
            tail = members[-1][-1]
            if (preds[i][0] == tail and users[tail] == 1 and nodes["op_class"].iat[i] in EPILOGUE
                    and len(members[-1]) < max_ops):
                members[-1].append(i)
                group[i] = len(members) - 1
                continue
        members.append([i])
        group[i] = len(members) - 1
    rows = []
    for gid, mem in enumerate(members):
        sub = nodes.iloc[mem]
        inside = set(mem)
        internal = sub["out_bytes"].iloc[:-1].sum()      # every non-tail output is consumed only inside
        # what a member reads, less what its subgraph made for it: its producers outside and graph inputs (an
        # add+LayerNorm's x), a pick (x.chunk(4)[i]) only its part of a producer's output
        ext_in = sum(max(0.0, nodes["in_bytes"].iat[m] - sum(nodes["out_bytes"].iat[p] for p in preds[m] if p in inside))
                     for m in mem)
        kernel = not sub["view"].all() if "view" in sub else True      # views alone: no kernel, nothing moved
        before = float((sub["in_bytes"] + sub["out_bytes"] + sub["weight_bytes"]).sum()) if kernel else 0.0
        after = float(ext_in + sub["out_bytes"].iat[-1] + sub["weight_bytes"].sum()) if kernel else 0.0
        rows.append({"subgraph": gid, "pattern": pattern(list(sub["kind"]), list(sub["op_class"])), "ops": len(mem),
                     "nodes": ";".join(sub["node"]), "anchor_class": sub["op_class"].iat[0],
                     "flops": float(sub["flops"].sum()), "macs": float(sub["macs"].sum()),
                     "weight_bytes": float(sub["weight_bytes"].sum()), "bytes_before": before, "bytes_after": after,
                     "bytes_saved": before - after, "internal_bytes": float(internal),
                     "threads": int(sub["threads"].max()), "depthwise": bool(sub["depthwise"].any()),
                     "kernel": kernel})
    sg = pd.DataFrame(rows)
    nb = sg["bytes_after"]
    sg["ai_flop_per_byte"] = sg["flops"] / nb.where(nb > 0)
    return sg, group


def concurrency(nodes: pd.DataFrame, time_us: np.ndarray) -> dict:
    """Topological stages, max parallel ops, and the critical path (ops, FLOPs, estimated time)."""
    preds = edges(nodes)
    n = len(nodes)
    level = stages(n, preds)
    counts = np.bincount(level)
    _, finish, path = longest_path(n, preds, time_us)
    _, _, fpath = longest_path(n, preds, nodes["flops"].fillna(0.0).to_numpy(float))
    return {"ops": n, "stages": int(len(counts)), "max_parallel_ops": int(counts.max()),
            "critical_path_ops": len(path), "critical_path_time_us": float(finish.max()),
            "critical_path_flops": float(nodes["flops"].iloc[path].sum()),
            "critical_path_share_of_ops": len(path) / n, "max_flop_path_ops": len(fpath),
            "stage_of_node": level.tolist(), "path": [nodes["node"].iat[i] for i in path]}
