"""The optimal two-device partition of the whole DAG (not only the prefixes of one topological order), exactly,
as a minimum s-t cut (DADS, INFOCOM'19), for latency and for energy.

A partition puts a predecessor-closed node set S on device A (source side) and the rest on B (sink side). Its
cost is sum_{S} a_i + sum_{not S} b_i + sum over crossing tensors of w_x, where a tensor crosses when its
producer is in S and at least one consumer is not (counted once, whatever its number of consumers). The flow
graph (one vertex per op, one per crossing-capable tensor, plus s and t):

- s -> i with capacity b_i (cut when i runs on B), i -> t with capacity a_i (cut when i runs on A);
- p -> x with capacity w_x and x -> c (infinite) for each consumer c of tensor x: x sits on the sink side,
  and w_x is paid, exactly when p is on A and some consumer on B;
- c -> p (infinite) for every consumer c of a tensor produced by p: a node on A has its producers on A.

Crossing-capable tensors are the activations of stage 07's sweep: graph inputs are fed to either side (no
vertex), weights and anything computed from constants alone travel with their consumer (precedence only, no
link cost), a graph output with no consumer finished on A costs nothing, and a tensor of unknown size (a
sequence, a string tensor) never crosses (its link cost is unknown: counted 0, the optimum took one for free).
Times are scaled to integers (scipy's maximum_flow needs int32 capacities: the finite ones sum to 5e8 units, a
resolution of 2e-9 of the total) and every figure reported is recomputed in floating point on the set the cut
gives.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import breadth_first_order, maximum_flow

from lib.onnx.graph import GraphArrays

# int32 capacities: the finite ones sum to SCALE_TOTAL units (a resolution of 2e-9 of the total), an infinite
# one is INF > SCALE_TOTAL, and INF + any flow still fits int32 (scipy's residual of an infinite edge whose
# antiparallel twin carries flow is INF + flow)
SCALE_TOTAL = 5e8
INF = 2 ** 30
MAX_FORCED = 64         # flow runs that force one node to a side when the free optimum leaves a device empty


@dataclass
class CutGraph:
    """The structure of the flow graph, shared by every objective (latency, energy, any link bandwidth)."""
    n: int                      # ops
    x_prod: np.ndarray          # per crossing-capable tensor: its producer
    x_tensor: np.ndarray        # ... its index in the GraphArrays' tensors
    x_bytes: np.ndarray         # ... its bytes (unknown: 0, as 07's Comm(b))
    x_unknown: np.ndarray       # ... its size is unknown (a sequence, a string tensor): min_cut never cuts it
    x_single: np.ndarray        # ... its consumer when it has one (its cost is then an edge p -> c), else -1
    xc_x: np.ndarray            # (crossing-capable tensor, consumer) pairs
    xc_c: np.ndarray
    prec_rows: np.ndarray       # precedence: c -> p (infinite) once per (consumer, producer) pair
    prec_cols: np.ndarray
    real: np.ndarray            # per op: it computes an activation (not a constant-only op, which travels along)
    pred_free: np.ndarray       # real ops with no real producer (a pinned-to-A candidate)
    succ_free: np.ndarray       # real ops no op consumes (a pinned-to-B candidate)


def cut_graph(a: GraphArrays) -> CutGraph:
    """The flow graph's structure from stage 02's GraphArrays (O(nodes + edges))."""
    n = len(a.names)
    ncons = np.diff(a.cons_ptr)
    owner = np.repeat(np.arange(len(a.t_prod)), ncons)        # tensor of each consumer entry
    prod_of = a.t_prod[owner]
    inner = prod_of >= 0
    pc = np.unique(np.stack([a.cons[inner], prod_of[inner]]), axis=1)    # c -> p, once per pair
    pc = pc[:, pc[0] != pc[1]]
    xs = np.flatnonzero((a.t_prod >= 0) & ~a.t_const & (ncons > 0))
    xid = np.full(len(a.t_prod), -1)
    xid[xs] = np.arange(len(xs))
    on_x = xid[owner] >= 0
    single = np.where(ncons[xs] == 1, a.cons[a.cons_ptr[xs]], -1)
    real = real_ops(a)
    has_pred = np.zeros(n, bool)
    has_pred[pc[0][real[pc[1]]]] = True         # a real producer
    has_succ = np.zeros(n, bool)
    has_succ[pc[1]] = True
    return CutGraph(n, a.t_prod[xs], xs, np.nan_to_num(a.t_nbytes[xs]), np.isnan(a.t_nbytes[xs]), single,
                    xid[owner][on_x], a.cons[on_x], pc[0], pc[1], real, np.flatnonzero(real & ~has_pred),
                    np.flatnonzero(real & ~has_succ))


def real_ops(a: GraphArrays) -> np.ndarray:
    """Per op: it has an output that is not computed from constants alone, and leads to a graph output. A
    constant-only op (Identity of a weight, a Constant) is recomputed by the part that reads its output, and a part
    is exported without the ops whose outputs nothing reads: a device running only such ops runs nothing of the
    model, so each device must get at least one real op (a 3-device pipeline put a dead MatMul alone on C)."""
    made = a.t_prod >= 0
    real = np.zeros(len(a.names), bool)
    real[a.t_prod[made & ~a.t_const]] = True
    return real & a.live()


def min_cut(cg: CutGraph, cost_a: np.ndarray, cost_b: np.ndarray, cost_x: np.ndarray,
            force: list[tuple[str, int]] = ()) -> np.ndarray:
    """The set on A (bool per op) of a minimum cut; force: ("A", i) or ("B", i) pins op i to that side.
    Reduced but equivalent graph: min(a_i, b_i) is paid whatever the side (only the difference goes on a
    terminal edge), and a tensor with one consumer c needs no vertex (its cost is the edge p -> c)."""
    n = cg.n
    multi = np.flatnonzero(cg.x_single < 0)
    vid = np.full(len(cg.x_prod), -1)
    vid[multi] = n + np.arange(len(multi))
    s, t = n + len(multi), n + len(multi) + 1
    cost_a, cost_b, cost_x = (np.asarray(v, float) for v in (cost_a, cost_b, cost_x))
    low = np.minimum(cost_a, cost_b)
    total = float(np.sum(cost_a - low) + np.sum(cost_b - low) + np.sum(cost_x))
    scale = SCALE_TOTAL / total if total > 0 else 1.0
    q = lambda v: np.rint(v * scale).astype(np.int64)     # noqa: E731
    ops, one = np.arange(n), cg.x_single >= 0
    on_multi = vid[cg.xc_x] >= 0
    rows = [np.full(n, s), ops, cg.x_prod, vid[cg.xc_x[on_multi]], cg.prec_rows]
    cols = [ops, np.full(n, t), np.where(one, cg.x_single, vid), cg.xc_c[on_multi], cg.prec_cols]
    # a tensor of unknown size never crosses: its link cost would be 0, and the optimum took a sequence for free
    caps = [q(cost_b - low), q(cost_a - low), np.where(cg.x_unknown, INF, q(cost_x)),
            np.full(int(on_multi.sum()), INF, np.int64),
            np.full(len(cg.prec_rows), INF, np.int64)]
    for side, i in force:
        rows.append(np.array([s if side == "A" else i]))
        cols.append(np.array([i if side == "A" else t]))
        caps.append(np.array([INF], np.int64))
    r, c, cap = np.concatenate(rows), np.concatenate(cols), np.concatenate(caps)
    keep = cap > 0
    # repeated pairs (a pinned terminal edge, two single-consumer tensors p -> c) are summed, capped at INF
    graph = sparse.csr_matrix((cap[keep], (r[keep], c[keep])), shape=(t + 1, t + 1), dtype=np.int64)
    graph.data = np.minimum(graph.data, INF)
    graph = graph.astype(np.int32)
    flow = maximum_flow(graph, s, t).flow
    residual = (graph.astype(np.int64) - flow.astype(np.int64)).tocsr()
    residual.data = (residual.data > 0).astype(np.int8)
    residual.eliminate_zeros()
    reached = breadth_first_order(residual, s, directed=True, return_predecessors=False)
    side_a = np.zeros(t + 1, bool)
    side_a[reached] = True
    return side_a[:n]


def crossing(cg: CutGraph, left: np.ndarray) -> np.ndarray:
    """Per crossing-capable tensor: produced on A and read by at least one op on B."""
    read_on_b = np.zeros(len(cg.x_prod), bool)
    read_on_b[cg.xc_x[~left[cg.xc_c]]] = True
    return left[cg.x_prod] & read_on_b


def best_partition(cg: CutGraph, cost_a, cost_b, cost_x) -> tuple[np.ndarray, dict]:
    """The minimum-cost partition with at least one real op on each device. A valid set on A holds a real op
    with no real producer and the set on B a real op that nothing reads: when the free optimum leaves a device empty, one of
    each is pinned, pair by pair (cheapest pairs first; at most MAX_FORCED flow runs, beyond that `exact` is
    False and 07 keeps the best boundary when it is better)."""
    left = min_cut(cg, cost_a, cost_b, cost_x)
    info = {"flow_runs": 1, "exact": True, "pinned": None}
    both = lambda s: 0 < s[cg.real].sum() < cg.real.sum()    # noqa: E731
    if both(left) or cg.real.sum() < 2:
        return left, info
    da = np.asarray(cost_a, float) - np.asarray(cost_b, float)
    us = cg.pred_free[np.argsort(da[cg.pred_free], kind="stable")]
    vs = cg.succ_free[np.argsort(-da[cg.succ_free], kind="stable")]
    pairs = sorted(((u, v) for u in us.tolist() for v in vs.tolist() if u != v), key=lambda p: da[p[0]] - da[p[1]])
    if len(pairs) > MAX_FORCED:
        info["exact"] = False
        pairs = pairs[:MAX_FORCED]
    best, best_cost = None, np.inf
    for u, v in pairs:
        s = min_cut(cg, cost_a, cost_b, cost_x, force=[("A", u), ("B", v)])
        info["flow_runs"] += 1
        c = float(np.sum(cost_a[s]) + np.sum(cost_b[~s])) + _cross_cost(cg, s, cost_x)
        if both(s) and c < best_cost:
            best, best_cost, info["pinned"] = s, c, [u, v]
    return (best if best is not None else left), info


def runs_whole_on(a: GraphArrays, cg: CutGraph, left: np.ndarray) -> str | None:
    """'B' when a partition sends nothing between the devices and A computes no graph output: A's nodes feed
    only each other and the model runs whole on B (ppocrv4_det's optimum put 234 such nodes on A); 'A' the other
    way round; None for a real split (two independent halves that each compute an output included)."""
    if crossing(cg, left).any():
        return None
    on_a = left[a.output_nodes()]
    if on_a.all() and len(on_a):
        return "A"
    return None if on_a.any() else "B"


def _cross_cost(cg: CutGraph, left: np.ndarray, cost_x) -> float:
    return float(np.sum(np.asarray(cost_x, float)[crossing(cg, left)]))


# ---- the figures of a partition, the two objectives, and split_summary.json's dag_optimum

def objectives(cg: CutGraph, ta: np.ndarray, tb: np.ndarray, system: dict, bandwidth: float | None = None) -> dict:
    """Per objective, the costs (per op on A, per op on B, per crossing tensor) of 07's model: latency in us
    (link: latency per tensor + bytes / bandwidth), energy in J (power x time, link: energy per byte)."""
    pa, pb = (float(system["devices"][k]["power_w"]) for k in ("A", "B"))
    link = system["link"]
    bw = float(bandwidth or link["bandwidth_bytes_per_s"])
    lat_x = float(link["latency_us"]) + cg.x_bytes / bw * 1e6
    return {"latency": (ta, tb, lat_x), "energy": (ta * pa * 1e-6, tb * pb * 1e-6, cg.x_bytes * float(link["energy_per_byte_j"]))}


def evaluate(a: GraphArrays, cg: CutGraph, left: np.ndarray, ta, tb, system: dict, bandwidth: float | None = None) -> dict:
    """The partition's figures, in floating point, with 07's formulas (a prefix gives its boundary's row)."""
    x = crossing(cg, left)
    link = system["link"]
    bw = float(bandwidth or link["bandwidth_bytes_per_s"])
    comm = float(cg.x_bytes[x].sum())
    t_a, t_b = float(np.sum(ta[left])), float(np.sum(tb[~left]))
    link_t = int(x.sum()) * float(link["latency_us"]) + comm / bw * 1e6
    pa, pb = (float(system["devices"][k]["power_w"]) for k in ("A", "B"))
    n_left = int(left.sum())
    prefix = bool(left[:n_left].all())
    return {"est_latency_us": t_a + link_t + t_b, "est_energy_j": (pa * t_a + pb * t_b) * 1e-6 + comm * float(link["energy_per_byte_j"]),
            "t_dev_a_us": t_a, "link_time_us": link_t, "t_dev_b_us": t_b, "n_left": n_left, "n_right": cg.n - n_left,
            "n_cut_tensors": int(x.sum()), "comm_bytes": comm, "cut_tensors": a.t_names[cg.x_tensor[x]].tolist(),
            "is_prefix": prefix, "prefix_boundary": n_left - 1 if prefix else None}


KEY = {"latency": "est_latency_us", "energy": "est_energy_j"}


def _gain(mine: float, other: float, unit: str) -> dict:
    return {f"saved_{unit}": other - mine, "ratio": other / mine if mine > 0 else None}


def optimum(a: GraphArrays, cg: CutGraph, ta, tb, system: dict, objective: str, best_b: int, base: dict) -> tuple[dict, np.ndarray]:
    """The DAG optimum for one objective, compared with the best boundary (b = best_b, over every boundary,
    pruned or not) and both single-device baselines; never worse than that boundary (its set is kept when the
    cut could not be exact). Returns (the summary entry, the set on A)."""
    left, info = best_partition(cg, *objectives(cg, ta, tb, system)[objective])
    key = KEY[objective]
    ev = evaluate(a, cg, left, ta, tb, system)
    prefix = np.arange(cg.n) <= best_b
    bev = evaluate(a, cg, prefix, ta, tb, system)
    if bev[key] < ev[key]:
        left, ev, info = prefix, bev, {**info, "kept_best_boundary": True}
    unit = "us" if objective == "latency" else "j"
    sfx = "us" if objective == "latency" else "energy_j"
    out = {"objective": objective, **ev,
           "gain_vs_best_boundary": {"boundary": int(best_b), key: bev[key], **_gain(ev[key], bev[key], unit)},
           "gain_vs_all_on_a": _gain(ev[key], base[f"all_on_a_{sfx}"], unit),
           "gain_vs_all_on_b": _gain(ev[key], base[f"all_on_b_{sfx}"], unit),
           "solver": "scipy.sparse.csgraph.maximum_flow (dinic), integer capacities", **info}
    return out, left


def dag_optima(a: GraphArrays, cg: CutGraph, ta, tb, system: dict, df, base: dict) -> tuple[dict, dict]:
    """split_summary.json's dag_optimum (latency) and dag_optimum_energy, and dag_partition.json: the node
    names on A of each (what 08 exports)."""
    summ, parts = {}, {}
    limit = (system.get("dag") or {}).get("max_nodes")
    if limit is not None and cg.n > int(limit):
        return {"dag_optimum": None, "dag_optimum_energy": None,
                "dag_skipped": f"{cg.n} nodes > dag.max_nodes {int(limit)} in the system config"}, parts
    for objective, name in (("latency", "dag_optimum"), ("energy", "dag_optimum_energy")):
        if cg.real.sum() < 2 or not len(df):
            summ[name] = None
            continue
        best_b = int(df["boundary"].to_numpy()[np.argmin(df[KEY[objective]].to_numpy(float))])
        summ[name], left = optimum(a, cg, ta, tb, system, objective, best_b, base)
        whole = runs_whole_on(a, cg, left)
        if whole:                  # no split to export (08) or draw (the report's graph)
            summ[name]["runs_whole_on"] = whole
            continue
        parts[objective] = {"left_nodes": a.names[left].tolist(), **{k: summ[name][k] for k in
                                                                      ("est_latency_us", "est_energy_j", "n_left", "cut_tensors")}}
    return summ, parts
