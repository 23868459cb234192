"""Split-context diagrams: the neighbourhood of a cut (0..3 hops), left and right clusters, the cut tensors
drawn between them. Graphviz `dot` renders the .dot file when installed; matplotlib draws it otherwise."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from .graph import Graph


def context(g: Graph, b: int, cut: list[str], hops: int) -> tuple[list[int], list[int]]:
    """Producers of the cut tensors plus `hops` predecessor levels (left); consumers plus successors (right)."""
    left = {g.producer[t] for t in cut if t in g.producer}
    right = {c for t in cut for c in g.consumers.get(t, ()) if c > b}
    frontier_l, frontier_r = set(left), set(right)
    for _ in range(hops):
        frontier_l = {p for i in frontier_l for p in g.preds(i)} - left
        frontier_r = {s for i in frontier_r for s in g.succs(i) if s > b} - right
        left |= frontier_l
        right |= frontier_r
    return sorted(left), sorted(right)


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def dot_source(g: Graph, b: int, cut: list[str], hops: int) -> str:
    left, right = context(g, b, cut, hops)
    shown = set(left) | set(right)
    lines = ["digraph split {", "  rankdir=TB; node [shape=box, fontsize=10, style=filled];",
             f'  label="cut after node {b} ({g.names[b]}): {len(cut)} tensor(s) cross, {hops} hop(s) of context";']
    for name, nodes, colour in (("left", left, "#cfe2f3"), ("right", right, "#fce5cd")):
        lines.append(f'  subgraph cluster_{name} {{ label="{"part1 (device A)" if name == "left" else "part2 (device B)"}";')
        for i in nodes:
            lines.append(f"    n{i} [label={_q(g.names[i] + chr(10) + g.nodes[i].op_type)}, fillcolor=\"{colour}\"];")
        lines.append("  }")
    for i in sorted(shown):
        for t in g.nodes[i].input:
            p = g.producer.get(t)
            if p is None or p not in shown:
                continue
            crossing = p <= b < i
            attrs = f'color="red", penwidth=2, label={_q(t)}, fontcolor="red"' if crossing else 'color="gray40"'
            lines.append(f"  n{p} -> n{i} [{attrs}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def render(g: Graph, b: int, cut: list[str], out_dir: Path, hops: int = 1, backend: str = "auto") -> list[Path]:
    """Write split_context.dot and render it (dot: SVG + PDF; matplotlib: PNG + SVG). Returns the files."""
    out_dir.mkdir(parents=True, exist_ok=True)
    dot_file = out_dir / "split_context.dot"
    dot_file.write_text(dot_source(g, b, cut, hops))
    written = [dot_file]
    dot = shutil.which("dot")
    if backend == "dot" or (backend == "auto" and dot):
        if not dot:
            raise FileNotFoundError("Graphviz `dot` is not installed")
        for fmt in ("svg", "pdf"):
            out = out_dir / f"split_context.{fmt}"
            subprocess.run([dot, f"-T{fmt}", str(dot_file), "-o", str(out)], check=True, capture_output=True, timeout=120)
            written.append(out)
        return written
    return written + _matplotlib(g, b, cut, out_dir, hops)


def _matplotlib(g: Graph, b: int, cut: list[str], out_dir: Path, hops: int) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    left, right = context(g, b, cut, hops)
    pos = {}
    for col, nodes in ((0.0, left), (1.0, right)):
        for k, i in enumerate(nodes):
            pos[i] = (col, -k)
    height = max(len(left), len(right), 1)
    fig, ax = plt.subplots(figsize=(9, 0.6 * height + 1.5))
    for i, (x, y) in pos.items():
        ax.text(x, y, f"{g.names[i]}\n{g.nodes[i].op_type}", ha="center", va="center", fontsize=7,
                bbox={"boxstyle": "round", "fc": "#cfe2f3" if x == 0 else "#fce5cd"})
    for i in pos:
        for t in g.nodes[i].input:
            p = g.producer.get(t)
            if p in pos:
                crossing = p <= b < i
                ax.annotate("", xy=pos[i], xytext=pos[p],
                            arrowprops={"arrowstyle": "->", "color": "red" if crossing else "gray", "lw": 1.5 if crossing else 0.8})
                if crossing:
                    ax.text((pos[p][0] + pos[i][0]) / 2, (pos[p][1] + pos[i][1]) / 2, t, color="red", fontsize=6, ha="center")
    ax.axvline(0.5, color="red", ls="--", lw=1)
    ax.set_xlim(-0.5, 1.5)
    ax.set_ylim(-height, 1)
    ax.axis("off")
    ax.set_title(f"cut after node {b} ({g.names[b]}): part1 (left) | part2 (right), {hops} hop(s) of context", fontsize=9)
    out = []
    for fmt in ("png", "svg"):
        path = out_dir / f"split_context.{fmt}"
        fig.savefig(path, dpi=120, bbox_inches="tight")
        out.append(path)
    plt.close(fig)
    return out
