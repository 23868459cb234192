"""results/zoo.csv (one row per model x input spec, read from each entry's results folder) and the zoo's sortable
table on results/index.html."""
from __future__ import annotations

import html
import json
import math
from pathlib import Path

import pandas as pd
import polars as pl

from lib.artifacts import atomic_path

COLUMNS = ["stem", "model", "input_spec", "status", "error", "session_latency_us", "predicted_latency_us",
           "other_cpu_note", "macs",
           "weight_bytes", "peak_activation_bytes", "kernel_time_coverage", "best_split", "best_split_us",
           "best_split_gain", "dag_optimum_us", "dag_optimum_gain", "key", "cached", "seconds", "host", "run_ids"]
# run ids of the metas a row's figures come from, by stage
RUN_IDS = [("02", "metrics_meta.json"), ("01", "profile_meta.json"), ("03", "merge_meta.json"),
           ("07", "split_summary.json"), ("08", "validation_report.json"), ("11", "report_meta.json")]
# the columns shown on the index page: (column, header, format)
SHOWN = [("stem", "entry", "text"), ("input_spec", "input spec", "text"), ("status", "status", "text"),
         ("session_latency_us", "session latency (ms)", "ms"), ("predicted_latency_us", "predicted (ms)", "ms"),
         ("macs", "MACs", "si"), ("weight_bytes", "weights (B)", "si"), ("peak_activation_bytes", "peak act. (B)", "si"),
         ("kernel_time_coverage", "kernel coverage", "pct"), ("best_split", "best split", "text"),
         ("best_split_us", "split (ms)", "ms"), ("best_split_gain", "split gain", "x"),
         ("dag_optimum_us", "DAG optimum (ms)", "ms"), ("dag_optimum_gain", "DAG gain", "x"), ("error", "error", "text")]


def _json(rdir: Path, name: str) -> dict:
    try:
        return json.loads((rdir / name).read_text())
    except (OSError, ValueError):
        return {}


def _peak(rdir: Path):
    try:
        return float(pd.read_csv(rdir / "boundaries.csv", usecols=["live_bytes"])["live_bytes"].max())
    except (OSError, ValueError, KeyError):
        return None


def figures(rdir: Path) -> dict:
    """The zoo columns read from one entry's results folder (None where an artifact is missing)."""
    m, prof, merge = _json(rdir, "metrics_meta.json"), _json(rdir, "profile_meta.json"), _json(rdir, "merge_meta.json")
    summ = _json(rdir, "split_summary.json")
    best, dag = summ.get("best"), summ.get("dag_optimum")
    singles = [v for v in (summ.get("all_on_a_us"), summ.get("all_on_b_us")) if v]
    gain = lambda us: min(singles) / us if us and singles else None   # noqa: E731 - >1: faster than either device alone
    return {"session_latency_us": (prof.get("session_latency") or {}).get("median_us"),
            "predicted_latency_us": (merge.get("prediction") or {}).get("predicted_latency_us"),
            # a worker whose CPU is not the calibration's: its prediction is the calibration CPU's, said so
            "other_cpu_note": (merge.get("prediction") or {}).get("other_cpu_note") or None,
            "macs": m.get("conv_gemm_matmul_macs", m.get("total_macs")), "weight_bytes": m.get("weight_bytes"),
            "peak_activation_bytes": _peak(rdir), "kernel_time_coverage": prof.get("kernel_time_coverage"),
            "best_split": f"b{best['boundary']} after {best['after_node']}" if best else None,
            "best_split_us": best["est_latency_us"] if best else None,
            "best_split_gain": gain(best["est_latency_us"]) if best else None,
            "dag_optimum_us": dag["est_latency_us"] if dag else None,
            "dag_optimum_gain": gain(dag["est_latency_us"]) if dag else None,
            "run_ids": " ".join(f"{s}={_json(rdir, n).get('run_id')}" for s, n in RUN_IDS if _json(rdir, n).get("run_id"))}


TEXT = {"stem", "model", "input_spec", "status", "error", "other_cpu_note", "best_split", "key", "host", "run_ids"}


def write_table(rows: list[dict], root: Path) -> Path:
    """results/zoo.csv, one row per entry in the zoo file's order (a typed schema: a column may be empty)."""
    schema = {c: pl.String if c in TEXT else pl.Boolean if c == "cached" else pl.Float64 for c in COLUMNS}
    df = pl.DataFrame([{c: r.get(c) for c in COLUMNS} for r in rows], schema=schema, orient="row")
    out = root / "zoo.csv"
    with atomic_path(out) as tmp:
        df.write_csv(tmp)
    return out


def _cell(v, fmt: str) -> tuple[str, str]:
    """(text shown, sort key) of one cell."""
    if v is None or (isinstance(v, float) and math.isnan(v)) or v == "":
        return ("" if fmt == "text" else "n/a"), ""
    if fmt == "text":
        return str(v), str(v)
    v = float(v)
    text = {"ms": f"{v / 1e3:.4g}", "pct": f"{100 * v:.1f}%", "x": f"{v:.3g}x",
            "si": next((f"{v / k:.3g} {p}" for p, k in (("G", 1e9), ("M", 1e6), ("k", 1e3)) if abs(v) >= k), f"{v:.3g}")}[fmt]
    return text, repr(v)


SORT_JS = """<script>
document.querySelectorAll('table.zoo th').forEach(function (th, col) {
  th.style.cursor = 'pointer';
  th.addEventListener('click', function () {
    var body = th.closest('table').tBodies[0], asc = th.dataset.dir !== 'asc', num = th.dataset.num === '1';
    th.dataset.dir = asc ? 'asc' : 'desc';
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = a.cells[col].dataset.k, y = b.cells[col].dataset.k;
      if (x === '' || y === '') { return (x === '') - (y === ''); }
      var d = num ? parseFloat(x) - parseFloat(y) : x.localeCompare(y);
      return asc ? d : -d;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
</script>"""


def zoo_html(root: Path) -> str | None:
    """The zoo table of results/index.html (from results/zoo.csv, sortable by a click on a header), or None."""
    path = Path(root) / "zoo.csv"
    if not path.exists():
        return None
    df = pd.read_csv(path, dtype={"error": str, "best_split": str, "input_spec": str, "stem": str})
    df = df.astype(object).where(df.notna(), None)
    head = "".join(f'<th data-num="{int(f != "text")}">{html.escape(h)}</th>' for _, h, f in SHOWN)
    body = []
    for r in df.to_dict("records"):
        cells = []
        for c, _, f in SHOWN:
            text, key = _cell(r.get(c), f)
            if c == "stem" and r.get("status") == "ok":
                text = f'<a href="{html.escape(str(r["stem"]))}/report.html">{html.escape(text)}</a>'
            else:
                text = html.escape(text)
            cells.append(f'<td data-k="{html.escape(key)}"{" class=num" if f != "text" else ""}>{text}</td>')
        body.append(f'<tr class="{html.escape(str(r.get("status")))}">{"".join(cells)}</tr>')
    ok = sum(r.get("status") == "ok" for r in df.to_dict("records"))
    return (f'<h2>Zoo ({ok} of {len(df)} ok; results/zoo.csv)</h2><p>Click a header to sort.</p>'
            f'<div class="wide"><table class="index zoo"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(body)}</tbody></table></div>{SORT_JS}')
