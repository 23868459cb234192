#!/usr/bin/env python3
"""Stage 08: export part1/part2 ONNX models for chosen boundaries and prove that they compose.

For each boundary (the top-k of boundaries.csv, or --boundary B ...) writes results/<stem>/splits/b<B>/:
part1.onnx (graph inputs -> cut tensors), part2.onnx (cut tensors + the original inputs it needs -> graph
outputs), each with its own weights (external data reached by hardlink or copy), full.onnx, a
standalone run_split.py, split_meta.json, a split-context diagram, and validation_report.json: full(x)
against part2(part1(x)) with ONNX Runtime on seeded random inputs (or --inputs-npz), with latencies.
"""
import shutil
from pathlib import Path

from lib import cli
from lib.artifacts import read_csv, results_dir, versions, write_json
from lib.errors import StageError
from lib.export_split import SUITE, SplitExporter, progress, validate, write_runner
from lib.graph import load_workload, prepare
from lib.profiling import load_npz_inputs, random_inputs
from lib.split_diagram import render

ASSETS = ["split_candidates.tex", "system_config.json", "workload_profile.json", "pareto_export.csv",
          "candidate_pruning.json"]


def choose(bd, a) -> list[int]:
    if a.boundary:
        bad = [b for b in a.boundary if not 0 <= b < len(bd)]
        if bad:
            raise StageError(f"--boundary {bad} out of range: the model has boundaries 0..{len(bd) - 1}")
        return list(dict.fromkeys(a.boundary))
    ranked = bd[bd["rank"].notna()].sort_values("rank")
    if ranked.empty:
        raise StageError("no ranked boundary in boundaries.csv (all pruned): pass --boundary B")
    return [int(b) for b in ranked["boundary"].head(a.top_k)]


def benchmark_set(dest: Path, rdir: Path, dirs: list[Path]) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    for d in dirs:
        target = dest / d.name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(d, target, copy_function=_link_or_copy, symlinks=True)
    shutil.copy2(SUITE, dest / "benchmark_suite.py")
    for name in ASSETS:
        if (rdir / name).exists():
            shutil.copy2(rdir / name, dest / name)
    for f in sorted((rdir / "plots").glob("split_*")):
        if f.suffix in (".pdf", ".svg"):
            shutil.copy2(f, dest / f"analysis_{f.name[len('split_'):]}")


def _link_or_copy(src, dst):
    try:
        Path(dst).hardlink_to(src)
    except OSError:
        shutil.copy2(src, dst)


def main(argv=None):
    p = cli.parser(__doc__)
    cli.add_workload(p)
    p.add_argument("--top-k", type=int, default=3, help="export the k best-ranked boundaries (default: %(default)s)")
    p.add_argument("--boundary", type=int, nargs="+", metavar="B", help="export these boundaries instead")
    p.add_argument("--runs", type=int, default=5, help="timed runs per model in the validation (default: %(default)s)")
    p.add_argument("--atol", type=float, default=1e-4, help="absolute tolerance of full vs composed (default: %(default)s)")
    p.add_argument("--rtol", type=float, default=1e-3, help="relative tolerance (default: %(default)s)")
    p.add_argument("--seed", type=int, help="seed of the random inputs (default: workload.yaml's)")
    p.add_argument("--inputs-npz", metavar="NPZ", help="validate on these inputs instead of random ones")
    p.add_argument("--hops", type=int, default=1, choices=range(4), help="context hops in the diagram (0..3, default 1)")
    p.add_argument("--diagram", default="auto", choices=["auto", "dot", "matplotlib", "none"],
                   help="diagram renderer: Graphviz dot when installed (auto), matplotlib, or none")
    p.add_argument("--external-data", choices=["link", "copy"], default="link",
                   help="reach external weight data by hardlink (else copy; default) or always copy (a folder "
                        "onnx.load also accepts: it refuses hardlinked data)")
    p.add_argument("--benchmark-set", metavar="DIR", help="also gather the splits, a benchmark_suite.py and the paper assets in DIR")
    a = p.parse_args(argv)
    if not a.model:
        p.error("--model is required")
    if a.top_k < 1 or a.runs < 1:
        raise StageError("--top-k and --runs must be >= 1")
    rdir = results_dir(a.model, a.results)
    bd = read_csv(rdir, "boundaries.csv", ("boundary", "after_node", "comm_bytes", "rank", "n_cut_tensors"))
    g, shapes = prepare(a.model, a.shape_override, a.workload, a.preset)
    if list(bd["after_node"]) != g.names[:-1]:
        raise StageError(f"{rdir / 'boundaries.csv'} does not match {a.model}: re-run 07_split_candidates.py on it")
    seed = a.seed if a.seed is not None else int(load_workload(a.workload).get("seed", 0))
    feeds = load_npz_inputs(a.inputs_npz, g.model) if a.inputs_npz else random_inputs(g.model, shapes, seed)
    chosen = choose(bd, a)
    exporter = SplitExporter(a.model, g, a.external_data)
    reports, dirs = [], []
    for k, b in enumerate(chosen, 1):
        out = rdir / "splits" / f"b{b}"
        progress(k, len(chosen), f"boundary {b} (after {g.names[b]}): export, validate")
        iface = exporter.export(b, out)
        meta = {**iface, "input_shapes": shapes, "model": Path(a.model).name}
        write_runner(out, meta)
        rep = {"boundary": b, "after_node": g.names[b],
               **validate(out, feeds, a.atol, a.rtol, a.runs, iface["cut_tensors"], g)}
        if a.diagram != "none":
            rep["diagram"] = [f.name for f in render(g, b, iface["cut_tensors"], out, a.hops, a.diagram)]
        write_json(rep, out / "validation_report.json")
        reports.append({**rep, "comm_bytes": iface["comm_bytes"],
                        "external_data": iface["external_data"]})
        dirs.append(out)
        lat = rep["latency_median"]
        print(f"  b{b}: {'PASS' if rep['pass'] else 'FAIL'} max|diff| {rep['max_abs_diff']:.2e}; "
              f"{len(iface['cut_tensors'])} cut tensors, {iface['comm_bytes'] / 1024:.1f} KiB; full {lat['full_us'] / 1e3:.2f} ms, "
              f"part1 {lat['part1_us'] / 1e3:.2f} + part2 {lat['part2_us'] / 1e3:.2f} = composed {lat['composed_us'] / 1e3:.2f} ms")
    worst = max(r["max_abs_diff"] for r in reports)
    all_pass = all(r["pass"] for r in reports)
    write_json({"model": a.model, "all_pass": all_pass, "worst_max_abs_diff": worst, "atol": a.atol, "rtol": a.rtol,
                "seed": seed, "inputs_npz": a.inputs_npz, "splits": reports, "versions": versions()},
               rdir / "validation_report.json")
    if a.benchmark_set:
        benchmark_set(Path(a.benchmark_set), rdir, dirs)
        print(f"benchmark set in {a.benchmark_set}: python {Path(a.benchmark_set) / 'benchmark_suite.py'}")
    print(f"{len(reports)} splits, {'all pass' if all_pass else 'SOME FAIL'}; worst max |diff| {worst:.2e} "
          f"(atol {a.atol:g}); wrote {rdir / 'validation_report.json'}")
    return 0 if all_pass else 1


if __name__ == "__main__":
    cli.run(main)
