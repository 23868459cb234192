#!/usr/bin/env python3
"""Stage 03: join measured latency (01) with costs (02) -> ops_profile.csv, with a per-node roofline.

Roofline against configs/host.yaml: t_compute = FLOPs / peak FLOP/s (of the node's dtype), t_mem = bytes /
bandwidth, bound = the larger. Without 01's profile the latency columns stay empty (04 then uses roofline time).
"""
from lib import cli
from lib.errors import StageError
from lib.artifacts import read_csv, results_dir, versions, write_csv, write_json
from lib.host import load_host
from lib.roofline import merge, roofline


def main(argv=None):
    p = cli.parser(__doc__, model_required=False)
    cli.add_host(p)
    p.add_argument("--no-profile", action="store_true", help="ignore ops_latency.csv even if it exists")
    a = p.parse_args(argv)
    rdir = results_dir(a.model, a.results)
    host = load_host(a.host)
    metrics = read_csv(rdir, "ops_metrics.csv", ("node", "op_type", "flops", "dtype"))
    latency = None
    if not a.no_profile:
        if (rdir / "ops_latency.csv").exists():
            latency = read_csv(rdir, "ops_latency.csv", ("node", "latency_us"))
            unknown = set(latency["node"]) - set(metrics["node"])
            if unknown:
                raise StageError(f"ops_latency.csv and ops_metrics.csv describe different models "
                                     f"({len(unknown)} nodes differ): re-run 01 and 02 on the same model")
        else:
            print("note: no ops_latency.csv (run 01_profile_onnx.py for measured latency): roofline only")
    df = roofline(merge(metrics, latency), host)
    write_csv(df, rdir / "ops_profile.csv")
    write_json({"host_config": str(a.host), "host": host, "latency_source": "measured" if latency is not None else "none",
                "versions": versions()}, rdir / "merge_meta.json")
    known = df[df["bound"] != "unknown"]
    print(f"{len(df)} nodes; bound: {int((known['bound'] == 'compute').sum())} compute, "
          f"{int((known['bound'] == 'memory').sum())} memory, {int((df['bound'] == 'unknown').sum())} unknown")
    if latency is not None:
        top = df.sort_values("latency_us", ascending=False).head(5)
        print("top nodes by measured latency:")
        for _, r in top.iterrows():
            gf = "" if r["achieved_gflops"] != r["achieved_gflops"] else f", {r['achieved_gflops']:.1f} GFLOP/s achieved"
            print(f"  {r['node']:<32} {r['op_type']:<10} {r['latency_us']:9.1f} us ({r['pct_latency']:4.1f}%), "
                  f"{r['bound']}-bound by roofline{gf}")
        print(f"roofline sum {df['t_roofline_us'].sum() / 1e3:.2f} ms vs measured sum {df['latency_us'].sum() / 1e3:.2f} ms")
    print(f"wrote {rdir / 'ops_profile.csv'}")


if __name__ == "__main__":
    cli.run(main)
