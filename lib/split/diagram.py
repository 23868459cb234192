"""Split-context diagrams: the neighbourhood of a cut (0..3 hops), left and right clusters, the cut tensors
(with their shape, element type and size) between them. Graphviz `dot` renders the .dot file when installed;
matplotlib draws it otherwise, in three columns (part1 | cut tensors | part2) with every arrow ending at a
box's edge, so no edge runs through a label."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from lib.errors import StageError
from lib.onnx.graph import Graph, dtype_name
from lib.onnx.metrics import layer_name
from lib.units import fmt_binary_bytes

MAX_LABEL = 34


MAX_CONSUMERS = 6   # consumers drawn per cut tensor (a shape tensor read by every layer would fill the page)


def right_consumers(g: Graph, b: int, t: str) -> list[int]:
    return sorted({c for c in g.consumers.get(t, ()) if c > b})


def context(g: Graph, b: int, cut: list[str], hops: int) -> tuple[list[int], list[int]]:
    """Producers of the cut tensors plus `hops` predecessor levels (left); the first MAX_CONSUMERS consumers of
    each cut tensor plus `hops` successor levels (right)."""
    left = {g.producer[t] for t in cut if t in g.producer}
    right = {c for t in cut for c in right_consumers(g, b, t)[:MAX_CONSUMERS]}
    frontier_l, frontier_r = set(left), set(right)
    for _ in range(hops):
        frontier_l = {p for i in frontier_l for p in g.preds(i)} - left
        frontier_r = {s for i in frontier_r for s in g.succs(i) if s > b} - right
        left |= frontier_l
        right |= frontier_r
    return sorted(left), sorted(right)


def _short(s: str, n: int = MAX_LABEL) -> str:
    return s if len(s) <= n else s[: n - 1] + "\u2026"


def node_text(g: Graph, i: int) -> str:
    """A node as the user knows it: its layer (when the exporter recorded one), op type and node name."""
    layer = layer_name(g.nodes[i])
    return "\n".join(_short(x) for x in ([layer] if layer else []) + [f"{g.nodes[i].op_type}  {g.names[i]}"])


def human_bytes(n) -> str:
    return "size unknown" if n is None else fmt_binary_bytes(n, 2)


def tensor_text(g: Graph, t: str) -> str:
    """name, shape and element type, size: what crosses the link."""
    info = g.tensors.get(t)
    if info is None:
        return f"{_short(t)}\nshape unknown"
    shape = "x".join(map(str, info.shape)) if info.shape is not None else "?"
    return f"{_short(t)}\n{shape} {dtype_name(info.elem_type)}\n{human_bytes(info.nbytes)}"


def box_right_of(g: Graph, b: int, t: str) -> list[int]:
    """The consumers of cut tensor t that the diagram draws."""
    return right_consumers(g, b, t)[:MAX_CONSUMERS]


def _tensor_box(g: Graph, b: int, t: str) -> str:
    extra = len(right_consumers(g, b, t)) - MAX_CONSUMERS
    return tensor_text(g, t) + (f"\n(+{extra} more consumers)" if extra > 0 else "")


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _title(g: Graph, b: int, cut: list[str], hops: int) -> str:
    layer = layer_name(g.nodes[b])
    total = sum((g.tensors[t].nbytes or 0) for t in cut if t in g.tensors)
    return (f"cut after node {b} ({g.names[b]}{', ' + layer if layer else ''}): {len(cut)} tensor(s), "
            f"{human_bytes(total)} cross; {hops} hop(s) of context")


def dot_source(g: Graph, b: int, cut: list[str], hops: int) -> str:
    left, right = context(g, b, cut, hops)
    shown = set(left) | set(right)
    legend = "\n".join(["cut tensors:"] + [tensor_text(g, t).replace("\n", ", ") for t in cut])
    lines = ["digraph split {", "  rankdir=TB; node [shape=box, fontsize=10, style=filled];",
             f"  label={_q(_title(g, b, cut, hops) + chr(10) + legend)};"]
    for name, nodes, colour in (("left", left, "#cfe2f3"), ("right", right, "#fce5cd")):
        lines.append(f'  subgraph cluster_{name} {{ label="{"part1 (device A)" if name == "left" else "part2 (device B)"}";')
        for i in nodes:
            lines.append(f"    n{i} [label={_q(node_text(g, i))}, fillcolor=\"{colour}\"];")
        lines.append("  }")
    for i in sorted(shown):
        for t in g.nodes[i].input:
            p = g.producer.get(t)
            if p is None or p not in shown:
                continue
            crossing = p <= b < i
            attrs = (f'color="red", penwidth=2, label={_q(t)}, fontcolor="red", '
                     f'tooltip={_q(tensor_text(g, t))}') if crossing else 'color="gray40"'
            lines.append(f"  n{p} -> n{i} [{attrs}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def dot_program(backend: str) -> str | None:
    """The `dot` executable the backend renders with (auto: when installed), else None (matplotlib, none).
    StageError when dot is asked for by name and not installed: checked before a stage writes anything."""
    dot = shutil.which("dot") if backend in ("auto", "dot") else None
    if backend == "dot" and not dot:
        raise StageError("--diagram dot: Graphviz `dot` is not installed (apt-get install graphviz), "
                         "or use --diagram auto / matplotlib")
    return dot


def render(g: Graph, b: int, cut: list[str], out_dir: Path, hops: int = 1, backend: str = "auto") -> list[Path]:
    """Write split_context.dot and render it (dot: SVG + PDF; matplotlib: PNG + SVG). Returns the files."""
    dot = dot_program(backend)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("split_context.*"):     # an earlier drawing (other backend or hops) is not left beside
        old.unlink()
    dot_file = out_dir / "split_context.dot"
    dot_file.write_text(dot_source(g, b, cut, hops))
    written = [dot_file]
    if dot:
        for fmt in ("svg", "pdf"):
            out = out_dir / f"split_context.{fmt}"
            subprocess.run([dot, f"-T{fmt}", str(dot_file), "-o", str(out)], check=True, capture_output=True, timeout=120)
            written.append(out)
        return written
    return written + _matplotlib(g, b, cut, out_dir, hops)


def _layout(g: Graph, b: int, cut: list[str], hops: int):
    """Boxes in three columns: part1 (x 0), the cut tensors (x 1), part2 (x 2), each column top-down in order."""
    left, right = context(g, b, cut, hops)
    height = max(len(left), len(right), len(cut), 1)
    pos = {("n", i): (0.0, -k * height / max(len(left), 1)) for k, i in enumerate(left)}
    pos.update({("n", i): (2.0, -k * height / max(len(right), 1)) for k, i in enumerate(right)})
    order = sorted(cut, key=lambda t: g.producer.get(t, -1))
    pos.update({("t", t): (1.0, -(k + 0.5) * height / len(order) + 0.5) for k, t in enumerate(order)})
    return left, right, pos, height


def _arrow(ax, src, dst, colour: str, lw: float, mode: str) -> None:
    """An arrow from box `src` to box `dst` that starts and ends on their edges: down a column (adjacent
    boxes) or across columns (side to side)."""
    props = {"arrowstyle": "->", "color": colour, "lw": lw, "shrinkA": 1, "shrinkB": 1}
    if mode == "down":
        ax.annotate("", xy=(0.5, 1.0), xycoords=dst, xytext=(0.5, 0.0), textcoords=src, arrowprops=props)
    else:
        ax.annotate("", xy=(0.0, 0.5), xycoords=dst, xytext=(1.0, 0.5), textcoords=src, arrowprops=props)


def _lane_arrow(ax, src, dst, lane_x: float, left: bool) -> None:
    """An edge between boxes further apart in one column, routed along a lane outside the column (each long
    edge its own lane), so it never crosses the boxes in between."""
    inv = ax.transData.inverted()
    a = src.get_bbox_patch().get_window_extent().transformed(inv)
    b = dst.get_bbox_patch().get_window_extent().transformed(inv)
    ya, yb = (a.y0 + a.y1) / 2, (b.y0 + b.y1) / 2
    xa, xb = (a.x0, b.x0) if left else (a.x1, b.x1)
    ax.plot([xa, lane_x, lane_x], [ya, ya, yb], color="gray", lw=0.8, zorder=2)
    ax.annotate("", xy=(xb, yb), xytext=(lane_x, yb), arrowprops={"arrowstyle": "->", "color": "gray", "lw": 0.8,
                                                                  "shrinkA": 0, "shrinkB": 1})


def _column_edge(ax, boxes, left: bool) -> float:
    inv = ax.transData.inverted()
    ext = [t.get_bbox_patch().get_window_extent().transformed(inv) for t in boxes]
    return min(e.x0 for e in ext) if left else max(e.x1 for e in ext)


def _matplotlib(g: Graph, b: int, cut: list[str], out_dir: Path, hops: int) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False    # node names are text, not math
    import matplotlib.pyplot as plt

    left, right, pos, height = _layout(g, b, cut, hops)
    fig, ax = plt.subplots(figsize=(12, 0.6 * height + 1.4))
    box = {}
    for key, (x, y) in pos.items():
        text = node_text(g, key[1]) if key[0] == "n" else _tensor_box(g, b, key[1])
        fc = "#fde0dd" if key[0] == "t" else ("#cfe2f3" if x == 0 else "#fce5cd")
        box[key] = ax.text(x, y, text, ha="center", va="center", fontsize=6.5, zorder=3,
                           bbox={"boxstyle": "round,pad=0.35", "fc": fc, "ec": "red" if key[0] == "t" else "gray"})
    ax.set_xlim(-0.75, 2.75)
    ax.set_ylim(min((y for _, y in pos.values()), default=0.0) - 0.7, 0.9)
    ax.axis("off")
    fig.canvas.draw()       # sizes the boxes (limits fixed first): the arrows below are anchored on their edges
    in_left = set(left)
    edge = {side: _column_edge(ax, [box[("n", i)] for i in col], side) for side, col in ((True, left), (False, right)) if col}
    lanes = {True: 0, False: 0}
    for i in left + right:
        for t in g.nodes[i].input:
            p = g.producer.get(t)
            if ("n", p) not in pos:
                continue
            if p <= b < i:                                    # crossing: producer -> tensor box -> consumer
                if ("t", t) in box and i in box_right_of(g, b, t):
                    _arrow(ax, box[("t", t)], box[("n", i)], "red", 1.4, "across")
                continue
            side = i in in_left
            col = left if side else right
            if col.index(i) - col.index(p) == 1:
                _arrow(ax, box[("n", p)], box[("n", i)], "gray", 0.8, "down")
            else:
                lanes[side] += 1
                step = 0.035 * (1 + (lanes[side] - 1) % 8)
                _lane_arrow(ax, box[("n", p)], box[("n", i)], edge[side] - step if side else edge[side] + step, side)
    for t in cut:
        p = g.producer.get(t)
        if ("n", p) in box and ("t", t) in box:
            _arrow(ax, box[("n", p)], box[("t", t)], "red", 1.4, "across")
    ax.axvline(1.0, color="red", ls="--", lw=0.8, zorder=1)
    ax.text(0.0, 0.75, "part1 (device A)", ha="center", fontsize=8, weight="bold")
    ax.text(2.0, 0.75, "part2 (device B)", ha="center", fontsize=8, weight="bold")
    ax.text(1.0, 0.75, "cut tensors (the link)", ha="center", fontsize=8, weight="bold", color="red", zorder=3,
            bbox={"fc": "white", "ec": "none", "pad": 1})
    ax.set_title(_title(g, b, cut, hops), fontsize=9)
    out = []
    for fmt in ("png", "svg"):
        path = out_dir / f"split_context.{fmt}"
        fig.savefig(path, dpi=120, bbox_inches="tight")
        out.append(path)
    plt.close(fig)
    return out
