#!/usr/bin/env python3
"""Stage 07: rank every topological boundary (cut after node b) as a two-device split point.

Per boundary: cut tensors and Comm(b) (activation bytes crossing the link), FLOPs left/right and imbalance,
measured latency left/right (when 01 ran), live and peak activation memory per side, and the two-device +
link model of configs/system.yaml (estimated latency and energy). Boundaries are pruned (with the reason)
when one side has almost no compute, when they lie inside a long skip/residual block, when they break a
constraint, in strict mode, or as near-duplicates of a better-ranked neighbour; the rest are ranked.
Writes boundaries.csv, pareto_export.csv, candidate_pruning.json, split_candidates.tex,
system_config.json and workload_profile.json. Reuses stage 02's inferred graph (graph.onnx).
"""
from pathlib import Path

from lib import cli
from lib.artifacts import atomic_path, read_csv, versions, write_csv, write_json
from lib.inputs import InputSpec
from lib.loading import analysed
from lib.provenance import stamp
from lib.boundary_sweep import sweep
from lib.splits import (add_costs, feasibility_reasons, latex_table, pareto_table, prune_and_rank, pruning_summary,
                        ranking_overrides)
from lib.system import load_system


def add_flags(p) -> None:
    p.add_argument("--rank-by", choices=["comm", "score", "latency"], help="ranking key (default: system.yaml's)")
    p.add_argument("--top-k", type=int, help="boundaries in split_candidates.tex (default: system.yaml's)")
    p.add_argument("--strict", action="store_true", help="only cuts where every crossing activation comes from the cut node")
    p.add_argument("--min-compute-share", type=float, help="each side keeps at least this FLOP share (0..0.5)")
    p.add_argument("--dedup-window", type=int, help="near-duplicate window in boundary positions")
    p.add_argument("--feasibility", metavar="CSV", help="prune boundaries whose partition failed stage 10's Hailo check")
    p.add_argument("--feasibility-arch", default="hailo8", help="target whose result prunes (default: %(default)s)")
    p.add_argument("--skip-span", type=int, help="skip blocks spanning at least this many nodes are not cut inside")


def report(df, top, pareto, rk) -> None:
    print(f"{len(df)} boundaries, {int(df['pruned'].sum())} pruned; ranked by {rk.get('by', 'score')} "
          f"(score weights {rk.get('weights', {})}); Pareto: {int((pareto['front'] == 'comm_imbalance').sum())} "
          f"(comm, imbalance), {int((pareto['front'] == 'latency_energy').sum())} (latency, energy)")
    if top.empty:
        print("no boundary survives the pruning: see candidate_pruning.json (relax --min-compute-share, "
              "--skip-span, --strict or the constraints)")
    print(f"{'rank':>4} {'b':>5}  {'after node':<30} {'cut':>3} {'comm KiB':>9} {'imbal':>6} {'est ms':>7} {'est mJ':>7}")
    for r in top.itertuples():
        print(f"{int(r.rank):>4} {r.boundary:>5}  {r.after_node[:30]:<30} {r.n_cut_tensors:>3} {r.comm_bytes / 1024:>9.1f} "
              f"{r.imbalance:>6.2f} {r.est_latency_us / 1e3:>7.2f} {r.est_energy_j * 1e3:>7.2f}")


def main(argv=None):
    p = cli.parser(__doc__)
    cli.add_inputs(p)
    cli.add_system(p)
    add_flags(p)
    a = cli.parse(p, argv)
    system = ranking_overrides(load_system(a.system), by=a.rank_by, top_k=a.top_k, min_compute_share=a.min_compute_share,
                               dedup_window=a.dedup_window, skip_block_min_span=a.skip_span, strict=a.strict)
    rk = system["ranking"]
    an, res = analysed(a.rdir, a.model, InputSpec.from_args(a))
    metas = res.require("merge_meta.json")
    prof = read_csv(a.rdir, "ops_profile.csv", ("node", "flops", "act_in_bytes", "act_out_bytes", "weight_bytes", "latency_us"))
    measured = metas["merge_meta.json"]["latency_source"] == "measured"
    print(f"sweeping {len(an.graph.nodes) - 1} boundaries of {a.model} ({len(an.graph.nodes)} nodes)")
    df = sweep(an.graph, int(rk.get("skip_block_min_span", 4)), float(rk.get("skip_block_max_share", 0.25)))
    df = add_costs(df, prof, prof["latency_us"].to_numpy(float) if measured else None, system)
    df = prune_and_rank(df, system, feasibility_reasons(a.feasibility, a.feasibility_arch) if a.feasibility else None)
    top = df[df["rank"] <= int(rk.get("top_k", 10))].sort_values("rank")
    pareto = pareto_table(df)
    ident = metas["merge_meta.json"]["identity"]
    write_csv(df, a.rdir / "boundaries.csv")
    write_csv(pareto, a.rdir / "pareto_export.csv")
    write_json({**pruning_summary(df, rk), "constraints": system.get("constraints"),
                "feasibility": {"file": a.feasibility, "arch": a.feasibility_arch} if a.feasibility else None},
               a.rdir / "candidate_pruning.json")
    with atomic_path(a.rdir / "split_candidates.tex") as tmp:
        tmp.write_text(latex_table(top, Path(a.model).name))
    write_json({**system, "source": a.system, "versions": versions()}, a.rdir / "system_config.json")
    write_json(stamp({"latency_source": "measured (01)" if measured else "roofline", "workload": an.spec.workload},
                     ident, metas), a.rdir / "workload_profile.json")
    report(df, top, pareto, rk)
    print(f"wrote {a.rdir / 'boundaries.csv'} and the rest")


if __name__ == "__main__":
    cli.run(main)
