#!/usr/bin/env python3
"""Stage 01: profile an ONNX model with ONNX Runtime -> per-node measured latency (ops_latency.csv).

Every kernel ORT runs is mapped back onto the original ONNX node names (see lib/profiling.py and the
README); the share of kernel time that lands on original nodes is reported as coverage.
"""
from lib import cli
from lib.errors import StageError
from lib.artifacts import results_dir, versions, write_csv, write_json
from lib.graph import load_workload, prepare
from lib.profiling import OPT_LEVELS, PROVIDERS, latency_table, load_npz_inputs, percentiles, profile_model, random_inputs


def main(argv=None):
    p = cli.parser(__doc__)
    cli.add_workload(p)
    p.add_argument("--provider", default="cpu", choices=sorted(PROVIDERS), help="execution provider (default: cpu)")
    p.add_argument("--runs", type=int, default=10, help="measured runs (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=3, help="unmeasured warm-up runs (default: %(default)s)")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads; 0 = ORT default, all cores")
    p.add_argument("--opt-level", default="all", choices=list(OPT_LEVELS),
                   help="ORT graph optimization level (default: all, ORT's own default)")
    p.add_argument("--seed", type=int, default=None, help="seed of the random inputs (default: workload.yaml's)")
    p.add_argument("--inputs-npz", metavar="NPZ", help="feed these arrays (one per graph input) instead of random ones")
    a = p.parse_args(argv)
    if not a.model:
        p.error("--model is required")
    if a.runs < 1 or a.warmup < 0 or a.threads < 0:
        raise StageError("--runs must be >= 1, --warmup and --threads >= 0")
    rdir = results_dir(a.model, a.results)
    g, shapes = prepare(a.model, a.shape_override, a.workload, a.preset)
    seed = a.seed if a.seed is not None else int(load_workload(a.workload).get("seed", 0))
    feeds = load_npz_inputs(a.inputs_npz, g.model) if a.inputs_npz else random_inputs(g.model, shapes, seed)
    print(f"profiling {a.model}: {len(g.nodes)} nodes, {a.warmup} warm-up + {a.runs} runs on {a.provider}")
    prof = profile_model(a.model, feeds, provider=a.provider, runs=a.runs, warmup=a.warmup,
                         threads=a.threads, opt_level=a.opt_level)
    df, att = latency_table(g, prof)
    meta = {
        "model": str(a.model), "provider": a.provider, "runs": a.runs, "warmup": a.warmup, "threads": a.threads,
        "opt_level": a.opt_level, "seed": seed, "inputs": {k: list(v.shape) for k, v in feeds.items()},
        "inputs_npz": a.inputs_npz, "session_latency": percentiles(prof["wall_us"]), **att, "versions": versions(),
    }
    write_csv(df, rdir / "ops_latency.csv")
    write_json(meta, rdir / "profile_meta.json")
    s = meta["session_latency"]
    print(f"session latency: median {s['median_us'] / 1e3:.2f} ms (p10 {s['p10_us'] / 1e3:.2f}, "
          f"p90 {s['p90_us'] / 1e3:.2f} ms) over {a.runs} runs")
    print(f"kernel time per run: {att['kernel_time_per_run_us']['median'] / 1e3:.2f} ms in {att['kernels']} ORT kernels; "
          f"{100 * att['kernel_time_coverage']:.2f}% attributed to original nodes "
          f"({att['nodes_with_kernel']} nodes with a kernel, {att['nodes_fused']} fused into one, "
          f"{att['nodes_not_run']} folded/removed)")
    if att["unattributed_kernels_us"]:
        top = list(att["unattributed_kernels_us"].items())[:5]
        print("unattributed kernels: " + ", ".join(f"{k} ({v:.0f} us)" for k, v in top))
    print(f"wrote {rdir / 'ops_latency.csv'}")


if __name__ == "__main__":
    cli.run(main)
