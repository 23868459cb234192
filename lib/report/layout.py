"""Layered (top-to-bottom) layout of one view of the report's graph section, by a kept library, never by hand.

Graphviz `dot` when it is installed (`dot -Tplain`: node centres and edge splines; CI installs Debian's
graphviz), else grandalf's Sugiyama layout (pure Python, from PyPI, pinned in requirements.txt). Both give
coordinates only; the page draws them (lib/report/templates/graph.html.j2), so the file needs no network.
Coordinates are in px, y growing downwards.
"""
from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from importlib.metadata import version

from grandalf.graphs import Edge, Graph, Vertex
from grandalf.layouts import SugiyamaLayout

from lib.errors import StageError

DPI = 72.0          # dot works in inches (points for edge coordinates in -Tplain: inches too)


@dataclass
class Layout:
    """w, h: the drawing's size; boxes: (cx, cy, w, h) per node; paths: an SVG path and a label point per edge."""
    w: float
    h: float
    boxes: list[tuple[float, float, float, float]]
    paths: list[tuple[str, float, float]] = field(default_factory=list)


def engine(prefer: str | None = None) -> str:
    """'dot' when Graphviz is installed (and not refused by prefer='grandalf'), else 'grandalf'."""
    if prefer not in (None, "dot", "grandalf"):
        raise StageError(f"unknown graph layout {prefer!r}: use dot or grandalf")
    if prefer != "grandalf" and shutil.which("dot"):
        return "dot"
    if prefer == "dot":
        raise StageError("--graph-layout dot needs Graphviz (apt-get install graphviz)")
    return "grandalf"


def engine_name(name: str) -> str:
    if name == "dot":
        out = subprocess.run(["dot", "-V"], capture_output=True, text=True)
        return (out.stderr or out.stdout).strip().replace(" - ", ": ") or "graphviz dot"
    return f"grandalf {version('grandalf')} (Sugiyama; Graphviz dot not installed)"


def layout_many(jobs: list[tuple[list, list]], name: str, workers: int = 2) -> list[Layout]:
    """Each (sizes, edges) laid out; sizes: (w, h) px per node; edges: (u, v, label) with label free of spaces."""
    fn = _dot if name == "dot" else _grandalf
    if name == "dot" and len(jobs) > 1:           # separate dot processes: the threads only wait on them
        with ThreadPoolExecutor(workers) as ex:
            return list(ex.map(lambda j: fn(*j), jobs))
    return [fn(*j) for j in jobs]


def _dot_source(sizes, edges) -> str:
    lines = ["digraph G {", 'graph [rankdir=TB, nodesep=0.25, ranksep=0.3];',
             'node [shape=box, fixedsize=true, label=""]; edge [fontsize=8, fontname="Helvetica"];']
    lines += [f"n{i} [width={w / DPI:.3f}, height={h / DPI:.3f}];" for i, (w, h) in enumerate(sizes)]
    lines += [f'n{u} -> n{v} [label="{lab}"];' for u, v, lab in edges]
    return "\n".join(lines) + "\n}\n"


def _dot(sizes, edges) -> Layout:
    out = subprocess.run(["dot", "-Tplain"], input=_dot_source(sizes, edges), capture_output=True, text=True)
    if out.returncode != 0:
        raise StageError(f"Graphviz dot failed on the graph section's layout: {out.stderr.strip()[:200]}")
    boxes: list = [None] * len(sizes)
    by_pair: dict[tuple[int, int], list] = {}
    height = 0.0
    for line in out.stdout.splitlines():
        tok = line.split()
        if tok[0] == "graph":
            w, height = float(tok[2]) * DPI, float(tok[3]) * DPI
        elif tok[0] == "node":
            x, y, bw, bh = (float(t) * DPI for t in tok[2:6])
            boxes[int(tok[1][1:])] = (x, height - y, bw, bh)
        elif tok[0] == "edge":
            n = int(tok[3])
            pts = [(float(tok[4 + 2 * k]) * DPI, height - float(tok[5 + 2 * k]) * DPI) for k in range(n)]
            rest = tok[4 + 2 * n:]
            lab = (float(rest[1]) * DPI, height - float(rest[2]) * DPI) if len(rest) >= 5 else pts[n // 2]
            d = f"M{pts[0][0]:.1f},{pts[0][1]:.1f}C" + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts[1:])
            by_pair.setdefault((int(tok[1][1:]), int(tok[2][1:])), []).append((d, *lab))
    paths = [by_pair[(u, v)].pop(0) for u, v, _ in edges]
    return Layout(w, height, boxes, paths)


class _View:
    def __init__(self, w=0.0, h=0.0):
        self.w, self.h, self.xy, self.pts = w, h, (0.0, 0.0), []

    def setpath(self, pts):
        self.pts = pts


def _grandalf(sizes, edges, gap: float = 30.0) -> Layout:
    vs = [Vertex(i) for i in range(len(sizes))]
    for v, (w, h) in zip(vs, sizes):
        v.view = _View(w, h)
    es = [Edge(vs[u], vs[v]) for u, v, _ in edges]
    for e in es:
        e.view = _View()
    g = Graph(vs, es)
    x0, height = 0.0, 0.0
    for core in g.C:                                  # one layout per connected component, side by side
        sug = SugiyamaLayout(core)
        sug.xspace, sug.yspace = 25, 30
        sug.init_all()
        sug.draw()
        cv = list(core.sV)
        left = min(v.view.xy[0] - v.view.w / 2 for v in cv)
        for v in cv:
            v.view.xy = (v.view.xy[0] - left + x0, v.view.xy[1])
        for e in core.sE:
            e.view.pts = [(x - left + x0, y) for x, y in e.view.pts]
        x0 = max(v.view.xy[0] + v.view.w / 2 for v in cv) + gap
        height = max(height, max(v.view.xy[1] + v.view.h / 2 for v in cv))
    boxes = [(v.view.xy[0], v.view.xy[1], v.view.w, v.view.h) for v in vs]
    paths = []
    for e in es:
        pts = e.view.pts
        (x1, y1), (x2, y2) = pts[0], pts[-1]
        pts = [(x1, y1 + e.v[0].view.h / 2), *pts[1:-1], (x2, y2 - e.v[1].view.h / 2)]   # box edge to box edge
        k = (len(pts) - 1) // 2                     # the label at the middle of the middle segment
        mid = ((pts[k][0] + pts[k + 1][0]) / 2, (pts[k][1] + pts[k + 1][1]) / 2)
        paths.append(("M" + " L".join(f"{x:.1f},{y:.1f}" for x, y in pts), mid[0] + 4, mid[1]))
    return Layout(max(x0 - gap, 1.0), height + 10, boxes, paths)
