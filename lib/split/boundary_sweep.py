"""Every topological boundary of a graph, measured in one O(nodes + edges) sweep (stage 07).

Boundary b cuts after node b of the topological order: the left part is nodes 0..b, the right part b+1..N-1.
A tensor crosses b when its producer is at <= b and a consumer at > b. Only activations cross the link:
constants (initializers, Constant outputs and whatever is computed from them alone) travel with the part
that uses them, and original graph inputs are fed to either part directly. Works on stage 02's GraphArrays:
difference arrays and prefix sums in numpy; only the listed cut-tensor names and the skip block a boundary
sits in need a pass over the boundaries.
"""
from __future__ import annotations

import heapq
from itertools import islice

import numpy as np
import pandas as pd

from lib.onnx.graph import Graph, GraphArrays, constant_tensors, graph_arrays

MAX_NAMES = 16  # cut tensor names listed per boundary (the count is always exact)
SWEEP_COLUMNS = {"boundary": "int64", "after_node": "str", "cut_tensors": "str", "n_cut_tensors": "int64",
                 "comm_bytes": "float64", "cut_unknown_size": "int64", "live_bytes": "float64",
                 "right_graph_inputs": "int64", "strict_ok": "bool", "skip_block": "str",
                 "peak_act_left_bytes": "float64", "peak_act_right_bytes": "float64"}


def _diff(n: int, start: np.ndarray, end: np.ndarray, weight=None) -> np.ndarray:
    """Prefix sums of +w at start and -w at end: the total over intervals [start, end) covering each b."""
    d = np.zeros(n + 1)
    w = np.ones(len(start)) if weight is None else weight
    np.add.at(d, start, w)
    np.add.at(d, end, -w)
    return np.cumsum(d)[: n - 1]


def _open_lists(n: int, first: np.ndarray, last: np.ndarray):
    """Per boundary b, the indices of the intervals that open and close there: opens[o_ptr[b]:o_ptr[b + 1]] and
    closes[c_ptr[b]:c_ptr[b + 1]], each in index order (stable sorts, not 2n Python lists)."""
    out = []
    for at in (first, last):
        order = np.argsort(at, kind="stable")
        out += [order.tolist(), np.searchsorted(at[order], np.arange(n + 1)).tolist()]
    return out


def _names_and_blocks(n, a: GraphArrays, cross, prod, last, skips) -> tuple[list[str], list[str]]:
    """The first MAX_NAMES cut tensors at each boundary, and the longest skip block it sits inside."""
    idx = np.flatnonzero(cross)
    opens, o_ptr, closes, c_ptr = _open_lists(n, prod[idx], last[idx])
    t_names = a.t_names[idx].tolist()
    names, inside = [], []
    active: dict[int, None] = {}
    skips.sort()
    heap: list[tuple[int, int, int, str]] = []
    k = 0
    top, text = None, ""        # the block a boundary sits in, and its text: made once per block
    for b in range(n - 1):
        for j in closes[c_ptr[b]:c_ptr[b + 1]]:
            active.pop(j, None)
        for j in opens[o_ptr[b]:o_ptr[b + 1]]:
            active[j] = None
        shown = ";".join(map(t_names.__getitem__, islice(active, MAX_NAMES)))
        names.append(shown + (f";...(+{len(active) - MAX_NAMES})" if len(active) > MAX_NAMES else ""))
        while k < len(skips) and skips[k][0] <= b:
            first, lst, t = skips[k]
            heapq.heappush(heap, (-(lst - first), lst, first, t))
            k += 1
        while heap and heap[0][1] < b:     # the longest open block ended: drop it (lazy deletion)
            heapq.heappop(heap)
        if (heap[0] if heap else None) is not top:
            top = heap[0] if heap else None
            text = f"{top[3]} spans nodes {top[2] - 1}..{top[1] + 1}" if top else ""
        inside.append(text)
    return names, inside


def sweep_columns(a: GraphArrays | Graph, skip_block_min_span: int = 4, skip_block_max_share: float = 0.25) -> dict:
    """Per-boundary cut tensors, Comm(b), live bytes, strictness and skip-block membership: the columns as numpy
    arrays and lists (sweep_frame makes them a table).
    Empty when there is nothing to cut (a result, not an error: sweep_frame gives an empty table)."""
    if isinstance(a, Graph):
        a = graph_arrays(a, constant_tensors(a))
    n = len(a.names)
    if n < 2:
        return {}
    prod = a.t_prod
    ncons = np.diff(a.cons_ptr)
    last = np.where(ncons > 0, a.cons[np.maximum(a.cons_ptr[1:] - 1, 0)] if len(a.cons) else prod, prod)
    nb = np.nan_to_num(a.t_nbytes)
    act = (prod >= 0) & ~a.t_const
    cross = act & (last > prod)
    c = np.flatnonzero(cross)
    cnt = _diff(n, prod[c], last[c])
    own = np.bincount(prod[c], minlength=n)
    # a fork that rejoins downstream spans a skip/residual block p..last; a fork spanning more than max_share of
    # the graph is a side input read everywhere (an attention mask), not a block (small graphs keep theirs)
    max_span = max(skip_block_max_share * n, 4 * skip_block_min_span)
    span = last - prod
    sk = np.flatnonzero(cross & (ncons >= 2) & (span >= skip_block_min_span) & (span <= max_span))
    skips = list(zip((prod[sk] + 1).tolist(), (last[sk] - 1).tolist(), a.t_names[sk].tolist()))
    live_end = np.where(a.t_output, n - 1, last)
    lv = np.flatnonzero(act & (live_end > prod))
    live = _diff(n, prod[lv], live_end[lv], nb[lv])
    gi = np.flatnonzero((prod < 0) & (ncons > 0))
    names, inside = _names_and_blocks(n, a, cross, prod, last, skips)
    cols = {
        "boundary": np.arange(n - 1), "after_node": a.names[: n - 1], "cut_tensors": names,
        "n_cut_tensors": cnt.astype(np.int64), "comm_bytes": _diff(n, prod[c], last[c], nb[c]),
        "cut_unknown_size": _diff(n, prod[c], last[c], np.isnan(a.t_nbytes[c]).astype(float)).astype(np.int64),
        "live_bytes": live, "right_graph_inputs": _diff(n, np.zeros(len(gi), dtype=np.int64), last[gi]).astype(np.int64),
        "strict_ok": cnt == own[: n - 1], "skip_block": inside,
        "peak_act_left_bytes": np.maximum.accumulate(live),
        "peak_act_right_bytes": np.maximum.accumulate(live[::-1])[::-1],
    }
    return cols


def sweep_frame(columns: dict) -> pd.DataFrame:
    """sweep_columns' table (SWEEP_COLUMNS, typed even when empty)."""
    if not columns:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in SWEEP_COLUMNS.items()})
    return pd.DataFrame(columns)
