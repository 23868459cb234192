"""The report's graph section: the model's graph laid out top to bottom, with what the stages found on it.

Every node is drawn (the page's SVG element carries data-node="<node name>"), every edge carries its tensor's
shape as stage 02 resolved it (ops_metrics.csv out_shapes; the graph's inputs as recorded in its identity).
Node fill: share of measured time (01, merged by 03), else of predicted time (03); border: compute- or
memory-bound (03's roofline). Drawn over it: 04's critical path, the fused groups (an ORT kernel and the original
nodes fused into it, 03's fused_into column), 07's chosen split and its DAG optimum (dag_partition.json). A graph
above THRESHOLD nodes is collapsed by layer name scope (a TorchScript export's '/layer1/layer1.0/conv1/Conv' path,
else the exporter's layer name); each scope is a box that opens on click into its own layout; a scope still above
THRESHOLD without inner scopes opens into runs of CHUNK nodes (at most the threshold) in topological order.
Layout: lib/report/layout.py.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from lib.onnx.graph import GraphArrays
from lib.onnx.loading import ARRAYS_FILE
from lib.report import layout

THRESHOLD = 500        # above it, collapsed by layer name scope
MAX_NODES = 50_000     # above it, not drawn: dot takes ~1 ms a node (20k nodes: 15 s) and the page ~1 kB a node
CHUNK = 200            # a scope (or graph) without inner scopes is split in runs of this many nodes in topological order
NODE_H, GROUP_H = 28.0, 40.0


def _text_w(text: str, lo: float = 70.0, hi: float = 220.0) -> float:
    return float(min(hi, max(lo, 6.6 * len(text) + 18)))


def _dotted(layer: str) -> list[str]:
    """'features.1.0.attn' -> ['features', 'features.1', 'features.1.0', 'features.1.0.attn']."""
    parts = layer.split(".")
    return [".".join(parts[:k]) for k in range(1, len(parts) + 1)] if layer else []


def scopes(names: list[str], layers: list[str], succs: list[list[int]] | None = None,
           preds: list[list[int]] | None = None) -> list[list[str]]:
    """The layer name scope of each node, outermost first: a TorchScript path ('/layer1/layer1.0/conv1/Conv'), else
    the layer name's dotted prefixes. A node without one (an exporter's Constant, a shape computation) takes its
    first consumer's, else its producer's."""
    out = [n.split("/")[1:-1] if n.startswith("/") else _dotted(lay) for n, lay in zip(names, layers)]
    if not any(out):
        return out
    for p in reversed(range(len(out))) if succs is not None else ():
        if not out[p]:
            out[p] = next((out[c] for c in succs[p] if out[c]), [])
    for p in range(len(out)) if preds is not None else ():
        if not out[p]:
            out[p] = next((out[q] for q in preds[p] if out[q]), [])
    return out


def views(scope: list[list[str]], threshold: int = THRESHOLD) -> list[dict]:
    """The views drawn: view 0 is the whole graph; above `threshold` nodes a view holds one box per scope
    (a group, itself a view) and the nodes outside any scope. Items: ("n", position) or ("g", view index)."""
    out: list[dict] = []

    def visit(members: list[int], depth: int, label: str, parent: int | None) -> int:
        vi = len(out)
        view = {"label": label, "parent": parent, "members": members, "items": [("n", p) for p in members]}
        out.append(view)
        if len(members) <= threshold:
            return vi
        while True:
            groups: dict[str, list[int]] = {}
            for p in members:
                if len(scope[p]) > depth:
                    groups.setdefault(scope[p][depth], []).append(p)
            if len(groups) == 1 and sum(map(len, groups.values())) == len(members):
                depth += 1                            # one scope around everything: look one level in
                continue
            break
        if not groups:                                # no scope inside: runs of CHUNK nodes in topological order
            size = min(CHUNK, threshold)              # never one run of everything (it would recurse forever)
            groups = {f"nodes {k}-{min(k + size, len(members)) - 1}": members[k:k + size]
                      for k in range(0, len(members), size)}
        first = {}
        for key, ms in groups.items():
            if len(ms) > 1:
                first[ms[0]] = ("g", visit(ms, depth + 1, key, vi))
        grouped = {p for ms in groups.values() if len(ms) > 1 for p in ms}
        view["items"] = [first[p] if p in first else ("n", p) for p in members if p in first or p not in grouped]
        return vi

    visit(list(range(len(scope))), 0, "whole graph", None)
    return out


def _edge_shapes(arrays: GraphArrays, out_shapes: list[str], input_shapes: dict) -> list[str]:
    """Each tensor's shape text as stage 02 resolved it: its producer's out_shapes entry, or the input's shape."""
    prod = arrays.t_prod
    first = np.full(len(arrays.names) + 1, -1)
    seen = np.nonzero(prod >= 0)[0]
    producers, at = np.unique(prod[seen], return_index=True)
    first[producers] = seen[at]                                 # the first tensor of each producer
    parts = [s.split(";") if isinstance(s, str) else [] for s in out_shapes]
    shapes = []
    for k, p in enumerate(prod.tolist()):
        if p < 0:
            dims = input_shapes.get(arrays.t_names[k])
            shapes.append("x".join(map(str, dims)) if dims else "?")
        else:
            j = k - first[p]
            shapes.append(parts[p][j] if j < len(parts[p]) and parts[p][j] else "?")
    return shapes


def _node_table(art) -> tuple[pd.DataFrame, str]:
    """One row per node in topological order, with the time the fill shows and which time it is."""
    prof = art.csv("ops_profile.csv")
    df = (prof if prof is not None else art.csv("ops_metrics.csv")).sort_values("topo_idx").reset_index(drop=True)
    if prof is not None and prof["latency_us"].fillna(0).sum() > 0:
        kind, t = "measured", prof.sort_values("topo_idx")["latency_us"].to_numpy(float)
    elif prof is not None and "t_pred_us" in prof:
        kind, t = "predicted", prof.sort_values("topo_idx")["t_pred_us"].to_numpy(float)
    else:
        kind, t = "none", np.full(len(df), np.nan)
    df = df.assign(_t=t)
    return df, kind


def _col(df: pd.DataFrame, name: str, default=None) -> list:
    if name not in df:
        return [default] * len(df)
    return [None if isinstance(v, float) and not math.isfinite(v) else v for v in df[name].tolist()]


def _nodes_json(df: pd.DataFrame, crit: set[int], side: list[str]) -> dict:
    t = df["_t"].to_numpy(float)
    total = np.nansum(t)
    nbytes = df[["act_in_bytes", "act_out_bytes", "weight_bytes"]].sum(axis=1, min_count=3)
    ai = df["ai_flop_per_byte"] if "ai_flop_per_byte" in df else df["flops"] / nbytes.where(nbytes > 0)
    share = t / total if total > 0 else np.full(len(t), np.nan)
    text = {k: [("" if v is None else str(v)) for v in _col(df, c, "")] for k, c in
            (("name", "node"), ("op", "op_type"), ("layer", "layer"), ("bound", "bound"), ("src", "shape_source"),
             ("note", "cost_note"), ("fused", "fused_into"), ("shapes", "out_shapes"), ("attr", "attribution"))}
    num = {k: _nums(v) for k, v in
           (("t_us", t), ("share", share), ("flops", df["flops"]), ("macs", df["macs"]), ("bytes", nbytes), ("ai", ai))}
    return {**text, **num, "crit": [int(i in crit) for i in range(len(df))], "side": side}


def _nums(values) -> list:
    return [None if not math.isfinite(v) else v for v in np.asarray(values, dtype=float).tolist()]


def _dot_label(shapes: list[str]) -> str:
    """The edge's label: its shape, or the first shapes of the tensors a group edge bundles (no spaces)."""
    uniq = list(dict.fromkeys(shapes))
    text = ";".join(uniq[:2]) + (f";+{len(uniq) - 2}" if len(uniq) > 2 else "")
    return "".join(c for c in text if c not in ' "\\') or "?"


class _Edges:
    """The graph's edges, one per (tensor, consumer), as arrays: what every view maps onto its items."""

    def __init__(self, arrays: GraphArrays, shapes: list[str], crit_path: list[int], boundary: int | None,
                 dag: list[str] | None = None):
        counts = np.diff(arrays.cons_ptr)
        self.tk = np.repeat(np.arange(len(counts)), counts)
        self.tc = arrays.cons.astype(np.int64)
        self.tp = arrays.t_prod[self.tk]
        self.shapes, self.t_names = shapes, arrays.t_names
        pairs = set(zip(crit_path, crit_path[1:]))
        self.crit = np.array([(int(p), int(c)) in pairs for p, c in zip(self.tp, self.tc)], dtype=bool)
        self.cut = ((self.tp >= 0) & (self.tp <= boundary) & (self.tc > boundary) if boundary is not None
                    else np.zeros(len(self.tc), dtype=bool))
        on_a = np.array([d == "A" for d in dag or []] + [False], dtype=bool)     # [-1]: a graph input
        self.dcut = (on_a[self.tp] & ~on_a[self.tc] & (self.tp >= 0) if dag and any(dag)
                     else np.zeros(len(self.tc), dtype=bool))               # producer on A, consumer on B
        self.inputs = [int(k) for k in np.unique(self.tk[self.tp < 0])]

    def of_view(self, item_of: np.ndarray, input_item: dict[int, int]) -> list[dict]:
        src = np.where(self.tp >= 0, item_of[np.maximum(self.tp, 0)], -1)
        for k, it in input_item.items():
            src[self.tk == k] = it
        dst = item_of[self.tc]
        keep = np.nonzero((src >= 0) & (dst >= 0) & (src != dst))[0]
        out: dict[tuple[int, int], dict] = {}
        for e in keep.tolist():
            key = (int(src[e]), int(dst[e]))
            d = out.setdefault(key, {"shapes": [], "tensors": [], "crit": False, "cut": False, "dcut": False})
            k = int(self.tk[e])
            if self.t_names[k] not in d["tensors"]:
                d["tensors"].append(self.t_names[k])
                d["shapes"].append(self.shapes[k])
            d["crit"] |= bool(self.crit[e])
            d["cut"] |= bool(self.cut[e])
            d["dcut"] |= bool(self.dcut[e])
        return [{"s": s, "d": t, **v} for (s, t), v in out.items()]


def _view_items(vs: list[dict], vi: int, n: int, ops: list[str], edges: _Edges):
    """A view's items (kind, ref, label, count, (w, h)), which item holds each node, and its graph inputs."""
    items, item_of = [], np.full(n, -1, dtype=np.int64)
    for kind, ref in vs[vi]["items"]:
        if kind == "n":
            item_of[ref] = len(items)
            items.append(("n", ref, ops[ref], 1, (_text_w(ops[ref]), NODE_H)))
        else:
            sub = vs[ref]
            item_of[sub["members"]] = len(items)
            label = f"{sub['label']} ({len(sub['members'])})"
            items.append(("g", ref, label, len(sub["members"]), (_text_w(label, 110, 260), GROUP_H)))
    input_item = {}
    if vi == 0:
        for k in edges.inputs:
            input_item[k] = len(items)
            name = str(edges.t_names[k])
            items.append(("i", k, name, 0, (_text_w(name, 60, 200), 22.0)))
    return items, item_of, input_item


def _positions(art, names: list[str]) -> tuple[list[int], int | None, str]:
    """04's critical path as node positions; 07's chosen split (boundary b: cut after position b) and its label."""
    pos = {n: i for i, n in enumerate(names)}
    cp = art.csv("critical_path.csv")
    path = [pos[n] for n in cp.sort_values("order")["node"] if n in pos] if cp is not None else []
    best = (art.meta("split_summary.json") or {}).get("best")
    if not best:
        return path, None, ""
    b = int(best["boundary"])
    return path, b, f"b{b}, after {best['after_node']}"


def dag_sides(art, names: list[str]) -> tuple[list[str], str]:
    """07's DAG optimum (dag_partition.json, latency objective) as each node's device, "A" or "B", and its label;
    [""] * n when there is none or it is not from the run of 07 that wrote split_summary.json."""
    summ, part = art.meta("split_summary.json") or {}, art.json("dag_partition.json")
    opt = summ.get("dag_optimum")
    left = ((part or {}).get("partitions") or {}).get("latency", {}).get("left_nodes")
    if not opt or left is None or part.get("upstream") != summ.get("upstream") or len(left) != opt["n_left"]:
        return [""] * len(names), ""
    on_a = set(left)
    if not on_a <= set(names):
        return [""] * len(names), ""
    label = (f"{len(on_a)} of {len(names)} nodes on A, {opt['n_cut_tensors']} cut tensor(s), est. "
             f"{opt['est_latency_us'] / 1e3:.3g} ms" + (f" (= boundary b{opt['prefix_boundary']})" if opt.get("is_prefix")
                                                        else " (not a prefix of the topological order)"))
    return ["A" if x in on_a else "B" for x in names], label


def _layout_views(vs, n, ops, edges, engine_name) -> list[dict]:
    jobs, parts = [], []
    for vi in range(len(vs)):
        items, item_of, input_item = _view_items(vs, vi, n, ops, edges)
        es = edges.of_view(item_of, input_item)
        parts.append((items, es))
        jobs.append(([it[4] for it in items], [(e["s"], e["d"], _dot_label(e["shapes"])) for e in es]))
    out = []
    for vi, ((items, es), lay) in enumerate(zip(parts, layout.layout_many(jobs, engine_name))):
        out.append({"label": vs[vi]["label"], "parent": vs[vi]["parent"], "w": round(lay.w, 1), "h": round(lay.h, 1),
                    "items": [[k, ref, round(x, 1), round(y, 1), round(w, 1), round(h, 1), label, count]
                              for (k, ref, label, count, _), (x, y, w, h) in zip(items, lay.boxes)],
                    "edges": [[e["s"], e["d"], ";".join(e["shapes"]), ";".join(e["tensors"]), int(e["crit"]),
                               int(e["cut"]), d, round(lx, 1), round(ly, 1), int(e["dcut"])]
                              for e, (d, lx, ly) in zip(es, lay.paths)]})
    return out


def graph_section(art, threshold: int = THRESHOLD, prefer: str | None = None, max_nodes: int = MAX_NODES) -> dict:
    """The section's data (embedded as JSON; the page draws it), or what to run when 02's graph is missing."""
    try:
        arrays = GraphArrays.load(art.rdir / ARRAYS_FILE)
    except (OSError, ValueError, KeyError):
        return {"ok": False, "missing": f"{ARRAYS_FILE} is missing or unreadable: re-run 02_shapes_flops_bytes.py"}
    if arrays.run_id != art.meta("metrics_meta.json")["run_id"]:
        return {"ok": False, "missing": f"{ARRAYS_FILE} is not from the last run of 02_shapes_flops_bytes.py: re-run it"}
    if len(arrays.names) > max_nodes:
        return {"ok": False, "missing": f"the graph has {len(arrays.names):,} nodes, more than {max_nodes:,}: not drawn "
                f"(its layout would take minutes and the page hundreds of MB); ops_metrics.csv lists every node"}
    df, kind = _node_table(art)
    names = [str(x) for x in arrays.names]
    if df["node"].tolist() != names:
        return {"ok": False, "missing": "ops_metrics.csv and graph.npz disagree: re-run 02_shapes_flops_bytes.py"}
    shapes = _edge_shapes(arrays, df["out_shapes"].tolist(), art.identity["inputs"].get("input_shapes") or {})
    path, boundary, split_label = _positions(art, names)
    side = ["A" if i <= boundary else "B" for i in range(len(names))] if boundary is not None else [""] * len(names)
    dag, dag_label = dag_sides(art, names)
    edges = _Edges(arrays, shapes, path, boundary, dag)
    layers = [str(x) for x in _col(df, "layer", "")]
    vs = views(scopes(names, layers, arrays.succs(), arrays.preds()) if len(names) > threshold else [[]] * len(names),
               threshold)
    name = layout.engine(prefer)
    data = {"nodes": {**_nodes_json(df, set(path), side), "dag": dag}, "time": kind, "threshold": threshold, "dag": dag_label,
            "views": _layout_views(vs, len(names), df["op_type"].tolist(), edges, name),
            "split": split_label, "inputs": [str(arrays.t_names[k]) for k in edges.inputs]}
    fused = sum(1 for f in data["nodes"]["fused"] if f)
    return {"ok": True, "data": data, "n": len(names), "collapsed": len(vs) > 1, "views": len(vs), "threshold": threshold,
            "engine": layout.engine_name(name), "time": kind, "split": split_label, "crit": len(path), "fused": fused,
            "dag": dag_label}
