#!/usr/bin/env python3
"""Stage 07: rank every topological boundary (cut after node b) as a two-device split point.

Per boundary: cut tensors and Comm(b) (activation bytes crossing the link), FLOPs left/right and imbalance,
measured latency left/right (when 01 ran), live and peak activation memory per side, and the two-device +
link model of configs/system.yaml (estimated latency and energy). Boundaries are pruned (with the reason)
when one side has almost no compute, when they lie inside a long skip/residual block, when they break a
constraint, in strict mode, or as near-duplicates of a better-ranked neighbour; the rest are ranked.
Writes boundaries.csv, pareto_export.csv, candidate_pruning.json, split_candidates.tex,
system_config.json and workload_profile.json.
"""
import copy

from lib import cli
from lib.artifacts import CONFIGS, atomic_path, read_csv, results_dir, versions, write_csv, write_json
from lib.errors import StageError
from lib.graph import load_workload, prepare
from lib.splits import add_costs, feasibility_reasons, latex_table, pareto_table, prune_and_rank, sweep
from lib.system import load_system


def main(argv=None):
    p = cli.parser(__doc__)
    cli.add_workload(p)
    p.add_argument("--system", default=str(CONFIGS / "system.yaml"), metavar="YAML",
                   help="devices, link, constraints and ranking (default: %(default)s)")
    p.add_argument("--rank-by", choices=["comm", "score", "latency"], help="ranking key (default: system.yaml's)")
    p.add_argument("--top-k", type=int, help="boundaries in split_candidates.tex (default: system.yaml's)")
    p.add_argument("--strict", action="store_true", help="only cuts where every crossing activation comes from the cut node")
    p.add_argument("--min-compute-share", type=float, help="each side keeps at least this FLOP share (0..0.5)")
    p.add_argument("--dedup-window", type=int, help="near-duplicate window in boundary positions")
    p.add_argument("--feasibility", metavar="CSV", help="prune boundaries whose partition failed stage 10's Hailo check")
    p.add_argument("--feasibility-arch", default="hailo8", help="target whose result prunes (default: %(default)s)")
    p.add_argument("--skip-span", type=int, help="skip blocks spanning at least this many nodes are not cut inside")
    a = p.parse_args(argv)
    if not a.model:
        p.error("--model is required")
    rdir = results_dir(a.model, a.results)
    system = copy.deepcopy(load_system(a.system))
    rk = system.setdefault("ranking", {})
    for key, val in (("by", a.rank_by), ("top_k", a.top_k), ("min_compute_share", a.min_compute_share),
                     ("dedup_window", a.dedup_window), ("skip_block_min_span", a.skip_span)):
        if val is not None:
            rk[key] = val
    if a.strict:
        rk["strict"] = True
    if not 0 <= float(rk.get("min_compute_share", 0)) <= 0.5:
        raise StageError("min compute share must lie in 0..0.5")
    metrics = read_csv(rdir, "ops_metrics.csv", ("node", "flops", "act_in_bytes", "act_out_bytes", "weight_bytes"))
    g, shapes = prepare(a.model, a.shape_override, a.workload, a.preset)
    if list(metrics["node"]) != g.names:
        raise StageError(f"{rdir / 'ops_metrics.csv'} does not match {a.model}: re-run 02_shapes_flops_bytes.py on it")
    latency = None
    if (rdir / "ops_latency.csv").exists():
        lat = read_csv(rdir, "ops_latency.csv", ("node", "latency_us"))
        if list(lat["node"]) == g.names:
            latency = lat["latency_us"].to_numpy(float)
    print(f"sweeping {len(g.nodes) - 1} boundaries of {a.model} ({len(g.nodes)} nodes)")
    df = sweep(g, int(rk.get("skip_block_min_span", 4)), float(rk.get("skip_block_max_share", 0.25)))
    df = add_costs(df, metrics, latency, system)
    feas = feasibility_reasons(a.feasibility, a.feasibility_arch) if a.feasibility else None
    df = prune_and_rank(df, system, feas)
    top = df[df["rank"] <= int(rk.get("top_k", 10))].sort_values("rank")
    pareto = pareto_table(df)
    pruned = df[df["pruned"]]
    reasons = pruned["reason"].str.split("; ").explode().str.replace(r" \(.*| [\d.]+%.*|\d.*", "", regex=True).str.strip()
    write_csv(df, rdir / "boundaries.csv")
    write_csv(pareto, rdir / "pareto_export.csv")
    write_json({"rules": rk, "constraints": system.get("constraints"), "boundaries": int(len(df)),
                "feasibility": {"file": a.feasibility, "arch": a.feasibility_arch} if a.feasibility else None,
                "pruned": int(len(pruned)), "by_rule": reasons.value_counts().to_dict(),
                "candidates": [{"boundary": int(r.boundary), "after_node": r.after_node, "reasons": r.reason.split("; ")}
                               for r in pruned.itertuples()]}, rdir / "candidate_pruning.json")
    with atomic_path(rdir / "split_candidates.tex") as tmp:
        tmp.write_text(latex_table(top, a.model.rsplit("/", 1)[-1]))
    write_json({**system, "source": a.system, "versions": versions()}, rdir / "system_config.json")
    write_json({"model": a.model, "input_shapes": shapes, "workload": load_workload(a.workload),
                "latency_source": "measured (01)" if latency is not None else "roofline"}, rdir / "workload_profile.json")
    print(f"{len(df)} boundaries, {len(pruned)} pruned; ranked by {rk.get('by', 'score')}; "
          f"Pareto: {int((pareto['front'] == 'comm_imbalance').sum())} (comm, imbalance), "
          f"{int((pareto['front'] == 'latency_energy').sum())} (latency, energy)")
    if top.empty:
        print("no boundary survives the pruning: see candidate_pruning.json (relax --min-compute-share, "
              "--skip-span, --strict or the constraints)")
    print(f"{'rank':>4} {'b':>5}  {'after node':<30} {'cut':>3} {'comm KiB':>9} {'imbal':>6} {'est ms':>7} {'est mJ':>7}")
    for r in top.itertuples():
        print(f"{int(r.rank):>4} {r.boundary:>5}  {r.after_node[:30]:<30} {r.n_cut_tensors:>3} {r.comm_bytes / 1024:>9.1f} "
              f"{r.imbalance:>6.2f} {r.est_latency_us / 1e3:>7.2f} {r.est_energy_j * 1e3:>7.2f}")
    print(f"wrote {rdir / 'boundaries.csv'} and the rest")


if __name__ == "__main__":
    cli.run(main)
