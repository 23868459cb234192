#!/usr/bin/env python3
"""Stage 08: export part1/part2 ONNX models for chosen boundaries and prove that they compose.

For each boundary (the top-k of boundaries.csv, or --boundary B ...) writes results/<stem>/splits/b<B>/:
part1.onnx (graph inputs -> cut tensors), part2.onnx (cut tensors + the original inputs it needs -> graph
outputs), cut out of stage 02's analysed graph with their own weights, full.onnx, a standalone run_split.py,
split_meta.json, the input spec's --inputs-npz as inputs.npz, a split-context diagram, and
validation_report.json: full(x) against part2(part1(x)) with ONNX Runtime on the input spec's inputs.
Also 07's DAG optimum (splits/dag/, the same checks) and K-device pipelines (pipeline/<id>/part1..K.onnx,
the parts run in turn against the whole model). results/<stem>/validation_report.json holds every split
folder on disk (earlier runs' of the same model and input spec: this_run false); split folders of another
model or input spec are removed. A boundary 07 pruned is exported when asked for, with 07's reason.
"""
from pathlib import Path

from lib import cli
from lib.artifacts import read_csv, read_json, versions, write_json
from lib.split.export import SplitExporter, benchmark_set, closing_line, earlier_splits, summary, sweep_stale
from lib.onnx.inputs import InputSpec, value_hint
from lib.onnx.loading import analysed
from lib.provenance import stamp
from lib.split.diagram import dot_program
from lib.split.partition_export import beyond_failures, export_beyond, export_boundaries, named_reports, read_node_set
from lib.split.ranking import choose_boundaries, small_model_note


def add_flags(p) -> None:
    p.add_argument("--top-k", type=int, default=3, help="export the k best-ranked boundaries (default: %(default)s)")
    p.add_argument("--boundary", type=int, nargs="+", metavar="B", help="export these boundaries instead")
    p.add_argument("--runs", type=int, default=5, help="timed runs per model in the validation (default: %(default)s)")
    p.add_argument("--atol", type=float, default=1e-4, help="recorded only (the dtype bound decides; default: %(default)s)")
    p.add_argument("--rtol", type=float, default=1e-3, help="recorded only, as --atol (default: %(default)s)")
    p.add_argument("--hops", type=int, default=1, choices=range(4), help="context hops in the diagram (0..3, default 1)")
    p.add_argument("--diagram", default="auto", choices=["auto", "dot", "matplotlib", "none"],
                   help="diagram renderer: Graphviz dot when installed (auto), matplotlib, or none")
    p.add_argument("--external-data", choices=["link", "copy"], default="link",
                   help="external weight data: one copy that the other split folders hardlink to (default; never "
                        "a link to your file), or a copy per folder (a folder onnx.load also accepts)")
    p.add_argument("--left-nodes", metavar="JSON", help="also export this node set on device A (a JSON list of node "
                   "names, predecessor-closed) as splits/custom/, validated like the others")
    p.add_argument("--benchmark-set", metavar="DIR", help="also gather the splits, a benchmark_suite.py and the paper assets in DIR")


def main(argv=None):
    p = cli.parser(__doc__)
    cli.add_inputs(p, feeds=True)
    add_flags(p)
    a = cli.parse(p, argv)
    if a.top_k < 1 or a.runs < 1:
        p.error("--top-k and --runs must be >= 1")
    dot_program(a.diagram)      # --diagram dot without Graphviz: refused before anything is written
    an, res = analysed(a.rdir, a.model, InputSpec.from_args(a))
    metas = res.require("workload_profile.json", "merge_meta.json", "metrics_meta.json")
    bd = read_csv(a.rdir, "boundaries.csv", ("boundary", "after_node", "comm_bytes", "rank", "n_cut_tensors"))
    chosen = choose_boundaries(bd, a.boundary, a.top_k)
    run = stamp({}, metas["workload_profile.json"]["identity"], metas)
    previous = read_json(a.rdir, "validation_report.json") if (a.rdir / "validation_report.json").exists() else None
    swept = sweep_stale(a.rdir, run["identity"])
    if swept["removed"]:
        print(f"removed split folders of another model or input spec: {', '.join(swept['removed'])}")
    opts = {"atol": a.atol, "rtol": a.rtol, "runs": a.runs, "hops": a.hops, "diagram": a.diagram,
            "hint": value_hint(an.light.model, an.spec, an.dim_conflicts), "inputs_npz": an.spec.inputs_npz}
    meta = {"identity": run["identity"], "run_id": run["run_id"], "input_shapes": an.shapes, "model": Path(a.model).name,
            "seed": an.spec.feed_seed()}
    custom = read_node_set(a.left_nodes, an.graph) if a.left_nodes else None     # refused before any export
    exporter, feeds = SplitExporter(a.model, an.graph, a.external_data), an.feeds()
    reports = export_boundaries(exporter, bd, chosen, a.rdir, feeds, opts, meta)
    beyond = export_beyond(exporter, a.rdir, feeds, opts, meta, custom)     # splits/dag, splits/custom, pipeline/<id>
    kept = earlier_splits(a.rdir, run["identity"], previous, set(chosen))
    splits = sorted(reports + kept, key=lambda r: r["boundary"])
    s = summary(splits)
    # the DAG optimum, pipelines and a custom partition too (the boundary summary left a pipeline's 2.4e-4 out)
    s["worst_max_abs_diff_all"] = max([s["worst_max_abs_diff"]] + [r["max_abs_diff"] for _, r in named_reports(beyond)
                                                                     if r.get("max_abs_diff") is not None])
    # this run's failures (the summary line counts boundary splits only); make all fails on them after the report
    failed = [f"b{r['boundary']}" for r in reports if r["pass"] is not True] + beyond_failures(beyond)
    write_json({**run, **s, "failed_this_run": failed, "atol": a.atol, "rtol": a.rtol, "this_run": chosen,
                "kept_from_earlier_runs": [r["boundary"] for r in kept], "removed_folders": swept["removed"],
                "folders_without_meta": swept["without_meta"], "splits": splits, **beyond, "versions": versions()},
               a.rdir / "validation_report.json")
    if a.benchmark_set:
        benchmark_set(Path(a.benchmark_set), a.rdir, [a.rdir / "splits" / f"b{b}" for b in chosen])
        print(f"benchmark set in {a.benchmark_set}: python {Path(a.benchmark_set) / 'benchmark_suite.py'}")
    print(closing_line(reports, kept, s, a.atol, a.rdir / "validation_report.json", small_model_note(len(an.graph.nodes))))
    if failed:
        print(f"FAILED: {', '.join(failed)} (lines above; validation_report.json)")
    return 1 if failed else 0


if __name__ == "__main__":
    cli.run(main)
