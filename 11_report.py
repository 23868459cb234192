#!/usr/bin/env python3
"""Stage 11: one self-contained page per model, results/<stem>/report.html, and results/index.html.

The report answers, section by section: summary (model, inputs, latency and its spread, kernel-time coverage,
MACs, FLOPs, weights, peak activation memory, host), the graph (laid out top to bottom by Graphviz dot, or by
grandalf without it: shapes on the edges, time share as fill, roofline bound as border, the critical path,
fused groups and the chosen split drawn over it; collapsed by layer name scope above --graph-collapse-above
nodes), where the time goes (top nodes with their layer names, op classes, compute- vs memory-bound share of
time), an interactive roofline, the critical path, energy (each figure with its method: counter, power x time
with whose power, component model), offload candidates (Amdahl with the S_k used), two-device splits (advice
against the all-on-A / all-on-B baselines, throughput, every exported split with its diagram and validation),
past the boundaries (07's DAG optimum with its gains, the bandwidth sweep and each split's crossover bandwidth,
the K-device pipeline; the DAG optimum is also drawn on the graph) and a what-if panel that re-runs stage 07's split model in the page for other link and device figures.
A section whose artifacts are missing says which stage to run. Artifacts that do not belong
together (another model, other inputs, an older run) are refused. Plotly's JavaScript is embedded once: the
file opens from disk, with no network. Also writes report_meta.json (what was read) and regenerates the index
of every analysed model next to the results folder.
"""
import time
from pathlib import Path

from lib import cli
from lib.artifacts import REPO, atomic_path, versions, write_json
from lib.provenance import stamp
from lib.report.page import build, build_index, screenshots


def main(argv=None):
    p = cli.parser(__doc__, model="or-results")
    p.add_argument("--top-nodes", type=int, default=15, help="nodes in the top-by-time table (default: %(default)s)")
    p.add_argument("--index", metavar="HTML", help="the all-models page (default: results/index.html, when the "
                   "results folder is results/<stem>/)")
    p.add_argument("--graph-layout", choices=["dot", "grandalf"], help="the graph section's layout library (default: "
                   "Graphviz dot when installed, else grandalf)")
    p.add_argument("--graph-collapse-above", type=int, default=500, metavar="N", help="collapse the graph section by "
                   "layer name scope above N nodes (default: %(default)s)")
    p.add_argument("--no-index", action="store_true", help="do not regenerate the all-models page")
    p.add_argument("--screenshots", metavar="DIR", help="also save a PNG of each section in DIR (headless chromium via "
                   "Playwright; both must be installed)")
    a = cli.parse(p, argv)
    if a.top_nodes < 1 or a.graph_collapse_above < 1:
        p.error("--top-nodes and --graph-collapse-above must be >= 1")
    if a.index and (Path(a.index).is_dir() or not Path(a.index).resolve().parent.is_dir()):
        p.error(f"--index {a.index}: give an HTML file in an existing folder")
    t0 = time.perf_counter()
    light = a.model     # a path: the graph hash is read only when the file changed since 02 (provenance.graph_hash)
    html, info = build(a.rdir, light, a.top_nodes, (a.graph_layout, a.graph_collapse_above))
    out = a.rdir / "report.html"
    with atomic_path(out) as tmp:
        tmp.write_text(html, encoding="utf-8")
    meta = info["meta"]
    first = next(iter(info["metas"].values()))
    write_json(stamp({**meta, "report_bytes": len(html.encode()), "build_s": round(time.perf_counter() - t0, 3),
                      "versions": versions()}, first["identity"], info["metas"]), a.rdir / "report_meta.json")
    missing = {k: v for k, v in meta["sections"].items() if v != "ok"}
    print(f"wrote {out} ({len(html.encode()) / 2 ** 20:.1f} MiB, {time.perf_counter() - t0:.1f} s): "
          f"{len(meta['sections']) - len(missing)} of {len(meta['sections'])} sections complete")
    for k, why in missing.items():
        print(f"  {k}: {why}")
    if a.screenshots:
        shots = screenshots(out, Path(a.screenshots))
        print(f"wrote {len(shots)} section screenshots to {a.screenshots}/")
    # the all-models page lives in results/ (never beside a results folder of the user's choosing, unasked)
    default_index = REPO / "results" / "index.html" if a.rdir.resolve().parent == REPO / "results" else None
    if not a.no_index and (a.index or default_index):
        index = Path(a.index) if a.index else default_index
        page, n = build_index(index.parent)
        with atomic_path(index) as tmp:
            tmp.write_text(page, encoding="utf-8")
        print(f"wrote {index} ({n} model(s))")


if __name__ == "__main__":
    cli.run(main)
