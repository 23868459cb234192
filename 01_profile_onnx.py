#!/usr/bin/env python3
"""Stage 01: profile an ONNX model with ONNX Runtime -> per-node measured latency (ops_latency.csv).

Every kernel ORT runs is mapped back onto the original ONNX node names (see lib/latency/profiling.py and the
README); the share of kernel time that lands on original nodes is reported as coverage. ORT's own trace
(Chrome trace JSON: open it in chrome://tracing or ui.perfetto.dev) and its optimized graph (open it in
Netron) are kept in results/<stem>/profile/ (from the first of --sessions sessions). After each session the
latency model's host reference (a few training models) is measured: how fast the host runs now against make
calibrate's minute, which stage 03 takes its prediction to (docs/latency-model.md).
"""
from lib import cli
from lib.artifacts import versions, write_csv, write_json
from lib.latency import host_reference
from lib.onnx.control_flow import runaway_loops
from lib.errors import StageError
from lib.onnx.inputs import InputSpec, value_hint
from lib.onnx.loading import prepare
from lib.onnx.random_ops import random_nodes
from lib.latency.profiling import add_profile_arguments, latency_table, merge_sessions, percentiles, profile_sessions
from lib.provenance import stamp, with_tables


def report(meta: dict, att: dict) -> None:
    s = meta["session_latency"]
    per = ", ".join(f"{x / 1e3:.2f}" for x in meta["session_medians_us"])
    print(f"session latency (ORT's profiler off): median {s['median_us'] / 1e3:.2f} ms (mean {s['mean_us'] / 1e3:.2f}, "
          f"p10 {s['p10_us'] / 1e3:.2f}, p90 {s['p90_us'] / 1e3:.2f} ms) over {meta['sessions']} sessions x {meta['runs']} "
          f"runs (each session's median: {per} ms; profiled: {meta['profiled_session_latency']['median_us'] / 1e3:.2f})")
    ref = meta["host_reference"]
    print(f"host speed: the {len(ref['models'])} reference models ran at {ref['factor']:.3f}x the time make calibrate "
          f"measured (stage 03 scales its prediction by it)" if "factor" in ref else f"note: {ref['note']}")
    print(f"kernel time per run: {att['kernel_time_per_run_us']['median'] / 1e3:.2f} ms in {att['kernels']} ORT kernels; "
          f"{100 * att['kernel_time_coverage']:.2f}% attributed to original nodes "
          f"({att['nodes_with_kernel']} nodes with a kernel, {att['nodes_fused']} fused into one, "
          f"{att['nodes_not_run']} folded/removed)")
    if meta["random_nodes"]:
        print(f"note: the model draws random numbers ({len(meta['random_nodes'])} random nodes: "
              f"{', '.join(meta['random_nodes'][:3])}): its outputs, and its latency with them, vary from run to run")
    inp = meta["identity"]["inputs"]
    if inp.get("inputs_npz"):
        drawn = f"; {', '.join(inp['drawn'])} drawn at random (seed {meta['seed']})" if inp["drawn"] else ""
        print(f"inputs: {', '.join(inp['from_file'])} from {inp['inputs_npz']['path']}{drawn}")
    if att["unattributed_kernels_us"]:
        top = list(att["unattributed_kernels_us"].items())[:5]
        print("unattributed kernels: " + ", ".join(f"{k} ({v:.0f} us)" for k, v in top))


def main(argv=None):
    p = cli.parser(__doc__)
    cli.add_inputs(p, feeds=True)
    add_profile_arguments(p)
    host_reference.add_arguments(p)
    a = cli.parse(p, argv)
    if a.runs < 1 or a.sessions < 1 or a.warmup < 0 or a.threads < 0:
        raise StageError("--runs and --sessions must be >= 1, --warmup and --threads >= 0")
    an = prepare(a.model, InputSpec.from_args(a))
    runaway = runaway_loops(an.graph)
    if runaway:
        raise StageError(f"Loop {runaway[0][0]} runs {runaway[0][1]:.3g} iterations per inference with these inputs: "
                         f"profiling would not finish (give other inputs with --inputs-npz)")
    feeds = an.feeds()
    ref, why = host_reference.wanted(a.provider, a.no_host_reference, a.latency_model)
    ready, rounds = (host_reference.prepare(ref) if ref else {}), []
    print(f"profiling {a.model}: {len(an.graph.nodes)} nodes, {a.sessions} sessions x ({a.warmup} warm-up + {a.runs} "
          f"profiled + {a.runs} timed runs) on {a.provider}" + (f", {len(ready)} host reference models after each" if ready else ""))
    try:
        profs = profile_sessions(a.model, an.light, feeds, a.sessions, a.rdir / "profile",
                                 provider=a.provider, runs=a.runs, warmup=a.warmup, threads=a.threads, opt_level=a.opt_level,
                                 between=(lambda: rounds.append(host_reference.measure(ref, ready))) if ready else None)
    except StageError as e:
        raise StageError(str(e) + (value_hint(an.light.model, an.spec, an.dim_conflicts) if "failed while running" in str(e) else "")) from None
    df, att = merge_sessions([latency_table(an.graph, prof) for prof in profs])
    meta = stamp({"provider": a.provider, "runs": a.runs, "sessions": a.sessions, "warmup": a.warmup,
                  "threads": a.threads, "opt_level": a.opt_level, "seed": an.spec.feed_seed(),
                  "session_latency": percentiles([w for prof in profs for w in prof["wall_us"]]),
                  "session_medians_us": [percentiles(prof["wall_us"])["median_us"] for prof in profs],
                  "profiled_session_latency": percentiles([w for prof in profs for w in prof["profiled_wall_us"]]),
                  "host_reference": host_reference.summary(ref, rounds, why), "cpu": host_reference.cpu_here(),
                  "random_nodes": random_nodes(an.light.model.graph),
                  **att, "versions": versions()}, an.identity)
    write_csv(df, a.rdir / "ops_latency.csv")
    write_json(with_tables(meta, a.rdir, "ops_latency.csv"), a.rdir / "profile_meta.json")
    report(meta, att)
    print(f"wrote {a.rdir / 'ops_latency.csv'}; ORT's trace and optimized graph in {a.rdir / 'profile'}/")


if __name__ == "__main__":
    cli.run(main)
