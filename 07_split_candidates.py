#!/usr/bin/env python3
"""Stage 07: rank every topological boundary (cut after node b) as a two-device split point, and go past them.

Per boundary: cut tensors, Comm(b) (bytes crossing the link, also priced at fp16 and int8), FLOPs and device
time on A and B (01's measured latency for a `source: measured` device, else its model), link, latency, energy,
balance, pipelined throughput, peak activation memory. Pruned with the reason (too little compute on one side,
nothing crosses, inside a skip block, a constraint, strict mode, near-duplicates); ranked by the latency-energy
Pareto layers, then the score. Past the boundaries: the optimal partition of the whole DAG (a minimum cut, for
latency and energy), the best K-part pipeline when configs/system.yaml chains three or more devices, and the link
bandwidth above which each split pays. Writes boundaries.csv, pareto_export.csv, candidate_pruning.json,
split_candidates.tex, split_summary.json, split_model.json, dag_partition.json, bandwidth_sweep.csv/.png, ...
"""
from pathlib import Path

from lib import cli
from lib.artifacts import read_csv, versions, write_csv, write_json
from lib.split.boundary_sweep import sweep_columns, sweep_frame
from lib.onnx.inputs import InputSpec
from lib.onnx.loading import analysed_arrays
from lib.provenance import stamp, with_tables
from lib.latency.predict import model_kernels
from lib.split.ranking import (add_costs, baselines, device_factors, feasibility_reasons, host_prediction,
                               needs_kernels, pareto_table, print_summary, prune_and_rank, pruning_summary,
                               ranking_overrides, split_model, split_summary, unchecked_top, write_latex, PROFILE_COLUMNS)
from lib.split.partitions import beyond_boundaries, beyond_lines
from lib.split.system import load_system


def add_flags(p) -> None:
    cli.add_inputs(p)
    cli.add_system(p)
    p.add_argument("--rank-by", choices=["comm", "score", "latency"], help="ranking key (default: system.yaml's)")
    p.add_argument("--top-k", type=int, help="boundaries in split_candidates.tex (default: system.yaml's)")
    p.add_argument("--strict", action="store_true", help="only cuts where every crossing activation comes from the cut node")
    p.add_argument("--min-compute-share", type=float, help="each side keeps at least this FLOP share (0..0.5)")
    p.add_argument("--dedup-window", type=int, help="near-duplicate window in boundary positions")
    p.add_argument("--feasibility", metavar="CSV", help="prune boundaries whose partition failed stage 10's Hailo check")
    p.add_argument("--feasibility-arch", default="hailo8", help="target whose result prunes (default: %(default)s)")
    p.add_argument("--skip-span", type=int, help="skip blocks spanning at least this many nodes are not cut inside")


def main(argv=None):
    p = cli.parser(__doc__)
    add_flags(p)
    a = cli.parse(p, argv)
    system = ranking_overrides(load_system(a.system), by=a.rank_by, top_k=a.top_k, min_compute_share=a.min_compute_share,
                               dedup_window=a.dedup_window, skip_block_min_span=a.skip_span, strict=a.strict)
    rk = system["ranking"]
    arrays, res, spec = analysed_arrays(a.rdir, a.model, InputSpec.from_args(a))
    metas = res.require("merge_meta.json")
    print(f"sweeping {len(arrays.names) - 1} boundaries of {a.model} ({len(arrays.names)} nodes)")
    skip = int(rk.get("skip_block_min_span", 4)), float(rk.get("skip_block_max_share", 0.25))
    df = sweep_frame(sweep_columns(arrays, *skip))
    prof = read_csv(a.rdir, "ops_profile.csv", ("node", "flops", "act_in_bytes", "act_out_bytes", "weight_bytes",
                                                "latency_us"), only=PROFILE_COLUMNS)
    measured = metas["merge_meta.json"]["latency_source"] == "measured"
    latency = prof["latency_us"].to_numpy(float) if measured else None
    kernels = model_kernels(a.rdir, a.model, spec, measured, len(prof)) if needs_kernels(system) else None
    [device_factors(prof, dev, kernels) for dev in system["devices"].values()]     # the device models (cached)
    df = add_costs(df, prof, latency, system, arrays)
    hailo = feasibility_reasons(a.feasibility, a.feasibility_arch, res.identity("metrics_meta.json"))
    df = prune_and_rank(df, system, hailo and hailo[0])
    top = df[df["rank"] <= int(rk.get("top_k", 10))].sort_values("rank")
    pareto = pareto_table(df)
    base = baselines(prof, latency, system)
    ident = metas["merge_meta.json"]["identity"]
    wp = stamp({"latency_source": base["device_a"]["time_source"], "workload": spec.workload}, ident, metas)
    summ = {**split_summary(df, base, system, host_prediction(metas["merge_meta.json"])),
            **beyond_boundaries(df, prof, latency, system, arrays, base, a.rdir,
                                stamp({}, ident, {"workload_profile.json": wp}))}
    write_csv(df, a.rdir / "boundaries.csv")
    write_json(pruning_summary(df, rk, system, a.feasibility and {"file": a.feasibility, "arch": a.feasibility_arch,
                                                                  "unchecked_top": unchecked_top(df, hailo, len(top))}),
               a.rdir / "candidate_pruning.json", indent=None if len(df) > 10_000 else 2)     # one entry per boundary
    write_json(stamp(split_model(df, prof, latency, system, arrays), ident, {"workload_profile.json": wp}),
               a.rdir / "split_model.json", indent=None)    # compact, no NaN: the report's JSON.parse reads it
    write_csv(pareto, a.rdir / "pareto_export.csv")
    write_latex(top, Path(a.model).name, a.rdir / "split_candidates.tex")
    write_json({**system, "source": a.system, "versions": versions()}, a.rdir / "system_config.json")
    summ = with_tables(summ, a.rdir, "boundaries.csv", "pareto_export.csv")
    write_json(stamp(summ, ident, {"workload_profile.json": wp}), a.rdir / "split_summary.json")
    write_json(wp, a.rdir / "workload_profile.json")
    print_summary(df, top, pareto, rk, summ)
    print(beyond_lines(summ))
    print(f"wrote {a.rdir / 'boundaries.csv'}, split_summary.json and the rest")


if __name__ == "__main__":
    cli.run(main)
