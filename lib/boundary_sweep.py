"""Every topological boundary of a graph, measured in one O(nodes + edges) sweep (stage 07).

Boundary b cuts after node b of the topological order: the left part is nodes 0..b, the right part b+1..N-1.
A tensor crosses b when its producer is at <= b and a consumer at > b. Only activations cross the link:
constants (initializers, Constant outputs and whatever is computed from them alone) travel with the part
that uses them, and original graph inputs are fed to either part directly.
"""
from __future__ import annotations

import heapq
from itertools import islice

import numpy as np
import pandas as pd

from .errors import StageError
from .graph import Graph, constant_tensors

MAX_NAMES = 16  # cut tensor names listed per boundary (the count is always exact)


def sweep(g: Graph, skip_block_min_span: int = 4, skip_block_max_share: float = 0.25) -> pd.DataFrame:
    """Per-boundary cut tensors, Comm(b), live bytes, strictness and skip-block membership."""
    n = len(g.nodes)
    if n < 2:
        raise StageError("the graph has fewer than 2 nodes: there is no boundary to cut")
    consts = constant_tensors(g)
    outputs = set(g.graph_outputs)
    d_comm = np.zeros(n + 1)
    d_cnt = np.zeros(n + 1, dtype=np.int64)
    d_live = np.zeros(n + 1)
    d_unknown = np.zeros(n + 1, dtype=np.int64)
    d_inputs = np.zeros(n + 1, dtype=np.int64)
    own = np.zeros(n, dtype=np.int64)          # crossing tensors produced by the cut node itself
    starts: list[list[str]] = [[] for _ in range(n)]
    ends: list[list[str]] = [[] for _ in range(n + 1)]
    skips: list[tuple[int, int, str]] = []     # (first, last) boundary inside a skip block, tensor
    max_span = max(skip_block_max_share * n, 4 * skip_block_min_span)   # small graphs keep their blocks
    for t, p in g.producer.items():
        if t in consts:
            continue
        cons = g.consumers.get(t, ())
        last = max(cons) if cons else p
        info = g.tensors.get(t)
        nb = info.nbytes if info is not None else None
        if last > p:
            d_comm[p] += nb or 0
            d_comm[last] -= nb or 0
            d_cnt[p] += 1
            d_cnt[last] -= 1
            if nb is None:
                d_unknown[p] += 1
                d_unknown[last] -= 1
            own[p] += 1
            starts[p].append(t)
            ends[last].append(t)
            # a fork that rejoins downstream spans a skip/residual block p..last; a fork spanning more than
            # max_share of the graph is a side input read everywhere (an attention mask), not a block
            if len(set(cons)) >= 2 and skip_block_min_span <= last - p <= max_span:
                skips.append((p + 1, last - 1, t))
        live_end = n - 1 if t in outputs else last
        if live_end > p:
            d_live[p] += nb or 0
            d_live[live_end] -= nb or 0
    for t in g.graph_inputs:
        cons = g.consumers.get(t, ())
        if cons:
            d_inputs[0] += 1
            d_inputs[max(cons)] -= 1
    nb_ = n - 1
    comm = np.cumsum(d_comm)[:nb_]
    cnt = np.cumsum(d_cnt)[:nb_]
    live = np.cumsum(d_live)[:nb_]
    # names, and which skip block (the longest open one) each boundary sits inside
    names, inside = [], []
    active: dict[str, None] = {}
    skips.sort()
    heap: list[tuple[int, int, int, str]] = []
    k = 0
    for b in range(nb_):
        for t in ends[b]:
            active.pop(t, None)
        for t in starts[b]:
            active[t] = None
        shown = ";".join(islice(active, MAX_NAMES))
        names.append(shown + (f";...(+{len(active) - MAX_NAMES})" if len(active) > MAX_NAMES else ""))
        while k < len(skips) and skips[k][0] <= b:
            first, last, t = skips[k]
            heapq.heappush(heap, (-(last - first), last, first, t))
            k += 1
        while heap and heap[0][1] < b:     # the longest open block ended: drop it (lazy deletion)
            heapq.heappop(heap)
        inside.append(f"{heap[0][3]} spans nodes {heap[0][2] - 1}..{heap[0][1] + 1}" if heap else "")
    df = pd.DataFrame({
        "boundary": np.arange(nb_), "after_node": g.names[:nb_], "cut_tensors": names, "n_cut_tensors": cnt,
        "comm_bytes": comm, "cut_unknown_size": np.cumsum(d_unknown)[:nb_], "live_bytes": live,
        "right_graph_inputs": np.cumsum(d_inputs)[:nb_], "strict_ok": cnt == own[:nb_], "skip_block": inside,
    })
    df["peak_act_left_bytes"] = np.maximum.accumulate(live)
    df["peak_act_right_bytes"] = np.maximum.accumulate(live[::-1])[::-1]
    return df
