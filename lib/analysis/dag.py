"""DAG math in O(nodes + edges): longest (critical) path and ASAP topological stages."""
from __future__ import annotations

import numpy as np


def longest_path(n: int, preds: list[list[int]], weight: np.ndarray,
                 ends: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Nodes are in topological order. Returns (start, finish, path) where path is the critical chain: the one
    that finishes last among those ending at a node of `ends` (bool per node; default any node), at the latest
    such node on a tie (a 0 us output node ORT fused ends the chain, not its producer); none when `ends` marks no
    node (the model returns an input or a constant: its nodes lead to nothing it returns)."""
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
    eligible = np.ones(n, bool) if ends is None else np.asarray(ends, bool)
    if n == 0 or not eligible.any():
        return start, finish, []
    end = int(np.flatnonzero(eligible & (finish == finish[eligible].max()))[-1])
    path = []
    while end >= 0:
        path.append(end)
        end = int(via[end])
    return start, finish, path[::-1]


def at_group_ends(weight: np.ndarray, names: list[str], fused_into) -> tuple[np.ndarray, list[str]]:
    """(weights, kernel): each fused group's time (its anchor's and its members': ops_profile's fused_into) moved to
    the group's last node in topological order, where one kernel that ran them all can start only after every input
    of the group is ready (a MatMul+Add run as one Gemm waited for the Add's other operand, a 247 us chain the path
    left out); kernel[i]: the node whose kernel ran node i (its anchor, else itself)."""
    pos = {n: i for i, n in enumerate(names)}
    kernel = [a if isinstance(a, str) and a in pos else n for n, a in zip(names, list(fused_into) or [None] * len(names))]
    members: dict[int, list[int]] = {}
    for i, a in enumerate(kernel):
        members.setdefault(pos[a], []).append(i)
    w = np.asarray(weight, float).copy()
    for group in members.values():
        if len(group) > 1:
            total = w[group].sum()
            w[group], w[max(group)] = 0.0, total
    return w, kernel


def stages(n: int, preds: list[list[int]]) -> np.ndarray:
    """ASAP level of each node: 0 for sources, else 1 + the deepest predecessor."""
    level = np.zeros(n, dtype=int)
    for i in range(n):
        if preds[i]:
            level[i] = 1 + max(level[p] for p in preds[i])
    return level


def summary(weight: np.ndarray, finish: np.ndarray, level: np.ndarray, path: list[int] | None = None) -> dict:
    """path: the critical chain (its last node's finish is the critical time; empty: 0), else the latest finish."""
    crit = float(finish[path[-1]]) if path else 0.0 if path is not None or not len(finish) else float(finish.max())
    total = float(weight.sum())
    counts = np.bincount(level) if len(level) else np.array([0])
    return {"critical_path_us": crit, "sum_node_us": total, "max_node_us": float(weight.max()) if len(weight) else 0.0,
            "parallelism": total / crit if crit > 0 else float("nan"),
            "stages": int(len(counts)), "max_ops_per_stage": int(counts.max()),
            "widest_stage": int(counts.argmax())}
