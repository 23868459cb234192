#!/usr/bin/env python3
"""How fast does the report's graph section open on a big graph? swin_t exported by the TorchScript exporter
(6,261 nodes; layer name scopes in its node names), through stages 02, 03 and 11, opened in headless chromium.

    .venv/bin/python bench/graph_page.py [--model models/swin_t_ts.onnx] [--record]

Prints the graph's node count, how 11 drew it (collapsed or not, the views, the layout library), the time 11
took, and in chromium: the time from navigation to the graph drawn (the whole page loaded: Plotly and every
section), and the time to open the largest scope box. The issue's bar: open in under 10 s.
"""
import json
import time
import warnings
from pathlib import Path

from playwright.sync_api import sync_playwright

from _models import REPO, parser, run_stage
from record import record


BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def export_torchscript(name: str, out: Path) -> Path:
    """A torchvision model (random weights) exported by torch.onnx's TorchScript exporter (dynamo=False): its node
    names carry the module path ('/features/features.1/features.1.0/attn/MatMul'), as such files in the wild do."""
    if out.exists():
        return out
    import torch            # heavy: only when the model must be built
    import torchvision
    out.parent.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    model = torchvision.models.get_model(name, weights=None).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (torch.randn(1, 3, 224, 224),), str(out), input_names=["input"],
                          output_names=["logits"], opset_version=17, dynamo=False)
    return out


def open_in_chromium(report: Path, chromium: str) -> dict:
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=BROWSER_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        t0 = time.perf_counter()
        page.goto(report.resolve().as_uri(), wait_until="load", timeout=120000)
        page.wait_for_selector("#graph-svg", timeout=120000)
        opened = time.perf_counter() - t0
        drawn = page.evaluate("() => document.querySelectorAll('#graph-svg g').length")
        views = page.evaluate("() => nnperfGraph.data.views.map(v => v.items.length)")
        big = max(range(1, len(views)), key=views.__getitem__) if len(views) > 1 else 0
        t1 = time.perf_counter()
        page.evaluate(f"() => nnperfGraph.draw({big})")
        page.wait_for_selector(f'#graph-svg[data-shown="{big}"]')
        expand = time.perf_counter() - t1
        browser.close()
    return {"open_s": opened, "elements": drawn, "expand_s": expand, "expand_items": views[big]}


def main():
    p = parser(__doc__)
    p.add_argument("--model", type=Path, default=REPO / "models" / "swin_t_ts.onnx")
    p.add_argument("--results", type=Path, default=Path("/tmp/nn-perf-graph-page"))
    p.add_argument("--chromium", default="/usr/bin/chromium")
    p.add_argument("--record", action="store_true", help="write the figures to bench/RESULTS.md")
    a = p.parse_args()
    model = export_torchscript("swin_t", a.model)
    rdir = a.results / model.stem
    run_stage("02_shapes_flops_bytes.py", "--model", model, "--results", rdir)
    run_stage("03_merge_profile_metrics.py", "--results", rdir)
    t0 = time.perf_counter()
    run_stage("11_report.py", "--model", model, "--results", rdir, "--no-index")
    build = time.perf_counter() - t0
    meta = json.loads((rdir / "report_meta.json").read_text())
    g = meta["graph"]
    r = open_in_chromium(rdir / "report.html", a.chromium)
    lines = [f"model: {model.name}, {g['n']} nodes; graph section {'collapsed by layer name scope' if g['collapsed'] else 'whole'} "
             f"({g['views']} views), layout {g['engine']}",
             f"11_report.py: {build:.1f} s (page {meta['report_bytes'] / 2 ** 20:.1f} MiB)",
             f"chromium: page loaded and graph drawn in {r['open_s']:.2f} s ({r['elements']} SVG groups at first); "
             f"largest scope box ({r['expand_items']} items) opened in {r['expand_s']:.2f} s"]
    print("\n".join(lines))
    if a.record:
        table = ("| figure | value |\n| --- | --- |\n"
                 f"| nodes | {g['n']} |\n| views (collapsed by scope) | {g['views']} |\n| layout | {g['engine']} |\n"
                 f"| 11_report.py wall time | {build:.1f} s |\n| page size | {meta['report_bytes'] / 2 ** 20:.1f} MiB |\n"
                 f"| chromium: load + graph drawn | {r['open_s']:.2f} s |\n"
                 f"| chromium: open the largest scope ({r['expand_items']} items) | {r['expand_s']:.2f} s |\n")
        record("graph_page", table, "python bench/graph_page.py --record")


if __name__ == "__main__":
    main()
