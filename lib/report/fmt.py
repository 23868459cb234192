"""The report's formatting helpers (numbers with units, tables for the template, embedded JSON and images) and
its Plotly figure conventions, shared by lib/report/page.py and the section modules."""
from __future__ import annotations

import base64
import html
import json
import math
from pathlib import Path

from lib.units import fmt_binary_bytes

PLOT_CONFIG = {"displaylogo": False, "responsive": True}


# ---------------------------------------------------------------- formatting

def num(v) -> float | None:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def ms(us, digits: int = 3) -> str:
    v = num(us)
    return "n/a" if v is None else f"{v / 1e3:.{digits}g} ms"


def mj(j) -> str:
    v = num(j)
    return "n/a" if v is None else f"{v * 1e3:.3g} mJ"


def si(v, unit: str = "") -> str:
    v = num(v)
    if v is None:
        return "n/a"
    for p, k in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(v) >= k:
            return f"{v / k:.3g} {p}{unit}"
    return f"{v:.3g} {unit}".rstrip()


def nbytes(v) -> str:
    v = num(v)
    return "n/a" if v is None else fmt_binary_bytes(v)


def pct(v) -> str:
    v = num(v)
    return "n/a" if v is None else f"{v:.1f}%"


def per_s(v) -> str:
    v = num(v)
    return "n/a" if v is None else f"{v:.3g}/s"


def plot_text(text) -> str:
    """Text that Plotly shows as written: it reads <b>, <br> and entities in labels and hover text as markup (a
    node named 'a &amp; b' was shown as 'a & b')."""
    return html.escape(str(text), quote=False)


def node_label(node: str, layer) -> str:
    layer = "" if layer is None or (isinstance(layer, float) and math.isnan(layer)) else str(layer)
    return f"{layer} ({node})" if layer else node


def table(columns: list[str], rows: list[list], numeric: set[int] | None = None) -> dict:
    """A table for the template: header, rows of text cells, and which columns are numbers (right-aligned)."""
    return {"columns": columns, "rows": [[("" if c is None else str(c)) for c in r] for r in rows],
            "numeric": sorted(numeric or set())}


def script_json(obj) -> str:
    """JSON safe inside <script type="application/json">: no '</' can close the element early."""
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")


def data_uri(path: Path) -> str | None:
    mime = {".svg": "image/svg+xml", ".png": "image/png"}.get(path.suffix)
    if mime is None or not path.exists():
        return None
    return f"data:{mime};base64,{base64.b64encode(path.read_bytes()).decode()}"


def fig_html(fig, div_id: str) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config=PLOT_CONFIG)


def plot_layout(fig, title: str, height: int, **kw) -> None:
    fig.update_layout(title={"text": title, "x": 0.01, "font": {"size": 14}}, height=height, template="plotly_white",
                      margin={"l": 60, "r": 20, "t": 50, "b": 50}, legend={"font": {"size": 11}}, **kw)
