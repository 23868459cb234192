#!/usr/bin/env python3
"""Stage 08: export part1/part2 ONNX models for chosen boundaries and prove that they compose.

For each boundary (the top-k of boundaries.csv, or --boundary B ...) writes results/<stem>/splits/b<B>/:
part1.onnx (graph inputs -> cut tensors), part2.onnx (cut tensors + the original inputs it needs -> graph
outputs), each with its own weights (external data reached by hardlink or copy), full.onnx, a
standalone run_split.py, split_meta.json, a split-context diagram, and validation_report.json: full(x)
against part2(part1(x)) with ONNX Runtime on the input spec's seeded random inputs (or --inputs-npz),
with latencies.
"""
from pathlib import Path

from lib import cli
from lib.artifacts import read_csv, versions, write_json
from lib.export_split import SplitExporter, benchmark_set, progress, validate, write_runner
from lib.inputs import InputSpec
from lib.loading import analysed
from lib.provenance import stamp
from lib.split_diagram import render
from lib.splits import choose_boundaries


def add_flags(p) -> None:
    p.add_argument("--top-k", type=int, default=3, help="export the k best-ranked boundaries (default: %(default)s)")
    p.add_argument("--boundary", type=int, nargs="+", metavar="B", help="export these boundaries instead")
    p.add_argument("--runs", type=int, default=5, help="timed runs per model in the validation (default: %(default)s)")
    p.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance of full vs composed (default: %(default)s)")
    p.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance (default: %(default)s)")
    p.add_argument("--hops", type=int, default=1, choices=range(4), help="context hops in the diagram (0..3, default 1)")
    p.add_argument("--diagram", default="auto", choices=["auto", "dot", "matplotlib", "none"],
                   help="diagram renderer: Graphviz dot when installed (auto), matplotlib, or none")
    p.add_argument("--external-data", choices=["link", "copy"], default="link",
                   help="reach external weight data by hardlink (else copy; default) or always copy (a folder "
                        "onnx.load also accepts: it refuses hardlinked data)")
    p.add_argument("--benchmark-set", metavar="DIR", help="also gather the splits, a benchmark_suite.py and the paper assets in DIR")


def export_one(exporter, an, feeds, b: int, a) -> dict:
    out = a.rdir / "splits" / f"b{b}"
    iface = exporter.export(b, out)
    write_runner(out, {**iface, "input_shapes": an.shapes, "model": Path(a.model).name})
    rep = {"boundary": b, "after_node": an.graph.names[b],
           **validate(out, feeds, a.atol, a.rtol, a.runs, iface["cut_tensors"], an.graph, exporter.model)}
    if a.diagram != "none":
        rep["diagram"] = [f.name for f in render(an.graph, b, iface["cut_tensors"], out, a.hops, a.diagram)]
    write_json(rep, out / "validation_report.json")
    lat = rep["latency_median"]
    print(f"  b{b}: {'PASS' if rep['pass'] else 'FAIL'} max|diff| {rep['max_abs_diff']:.2e}; "
          f"{len(iface['cut_tensors'])} cut tensors, {iface['comm_bytes'] / 1024:.1f} KiB; full {lat['full_us'] / 1e3:.2f} ms, "
          f"part1 {lat['part1_us'] / 1e3:.2f} ms + part2 {lat['part2_us'] / 1e3:.2f} ms "
          f"(run back to back: {lat['composed_us'] / 1e3:.2f} ms)")
    return {**rep, "comm_bytes": iface["comm_bytes"], "external_data": iface["external_data"]}


def main(argv=None):
    p = cli.parser(__doc__)
    cli.add_inputs(p, feeds=True)
    add_flags(p)
    a = cli.parse(p, argv)
    if a.top_k < 1 or a.runs < 1:
        p.error("--top-k and --runs must be >= 1")
    an, res = analysed(a.rdir, a.model, InputSpec.from_args(a))
    metas = res.require("workload_profile.json")
    bd = read_csv(a.rdir, "boundaries.csv", ("boundary", "after_node", "comm_bytes", "rank", "n_cut_tensors"))
    chosen = choose_boundaries(bd, a.boundary, a.top_k)
    feeds = an.feeds()
    exporter = SplitExporter(a.model, an.graph, a.external_data)
    reports = []
    for k, b in enumerate(chosen, 1):
        progress(k, len(chosen), f"boundary {b} (after {an.graph.names[b]}): export, validate")
        reports.append(export_one(exporter, an, feeds, b, a))
    all_pass = all(r["pass"] for r in reports)
    worst = max((r["max_abs_diff"] for r in reports), default=0.0)
    write_json(stamp({"all_pass": all_pass, "worst_max_abs_diff": worst, "atol": a.atol, "rtol": a.rtol,
                      "splits": reports, "versions": versions()}, metas["workload_profile.json"]["identity"], metas),
               a.rdir / "validation_report.json")
    if a.benchmark_set:
        benchmark_set(Path(a.benchmark_set), a.rdir, [a.rdir / "splits" / f"b{b}" for b in chosen])
        print(f"benchmark set in {a.benchmark_set}: python {Path(a.benchmark_set) / 'benchmark_suite.py'}")
    if not reports:
        print("no ranked boundary to export (all pruned: see candidate_pruning.json, or pass --boundary B): "
              "wrote an empty report")
    else:
        print(f"{len(reports)} splits, {'all pass' if all_pass else 'SOME FAIL'}; worst max |diff| {worst:.2e} "
              f"(atol {a.atol:g}); wrote {a.rdir / 'validation_report.json'}")
    return 0 if all_pass else 1


if __name__ == "__main__":
    cli.run(main)
