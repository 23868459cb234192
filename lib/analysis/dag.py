"""DAG math in O(nodes + edges): longest (critical) path and ASAP topological stages."""
from __future__ import annotations

import numpy as np


def longest_path(n: int, preds: list[list[int]], weight: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Nodes are in topological order. Returns (start, finish, path) where path is the critical chain."""
    start = np.zeros(n)
    finish = np.zeros(n)
    via = np.full(n, -1)
    for i in range(n):
        best, arg = 0.0, -1
        for p in preds[i]:            # the predecessor that finishes last gates this node
            if arg < 0 or finish[p] > best:
                best, arg = finish[p], p
        start[i] = best
        via[i] = arg
        finish[i] = best + weight[i]
    if n == 0:
        return start, finish, []
    end = int(np.argmax(finish))
    path = []
    while end >= 0:
        path.append(end)
        end = int(via[end])
    return start, finish, path[::-1]


def stages(n: int, preds: list[list[int]]) -> np.ndarray:
    """ASAP level of each node: 0 for sources, else 1 + the deepest predecessor."""
    level = np.zeros(n, dtype=int)
    for i in range(n):
        if preds[i]:
            level[i] = 1 + max(level[p] for p in preds[i])
    return level


def summary(weight: np.ndarray, finish: np.ndarray, level: np.ndarray) -> dict:
    crit = float(finish.max()) if len(finish) else 0.0
    total = float(weight.sum())
    counts = np.bincount(level) if len(level) else np.array([0])
    return {"critical_path_us": crit, "sum_node_us": total, "max_node_us": float(weight.max()) if len(weight) else 0.0,
            "parallelism": total / crit if crit > 0 else float("nan"),
            "stages": int(len(counts)), "max_ops_per_stage": int(counts.max()),
            "widest_stage": int(counts.argmax())}
