#!/usr/bin/env python3
"""Stage 03: join measured latency (01) with costs (02) -> ops_profile.csv, with a per-node roofline.

Roofline against configs/host.yaml: t_compute = FLOPs / peak FLOP/s (of the node's dtype), t_mem = bytes /
bandwidth, bound = the larger. Without 01's profile the latency columns stay empty (04 then uses roofline time).
01's and 02's results must belong to the same model and input spec (checked: exit 2 otherwise).
"""
from lib import cli
from lib.artifacts import read_csv, versions, write_csv, write_json
from lib.host import load_host
from lib.loading import read_validated
from lib.provenance import Results, stamp
from lib.roofline import merge, roofline


def report(df, measured: bool) -> None:
    known = df[df["bound"] != "unknown"]
    weight = df["latency_us"] if measured else df["t_roofline_us"]
    total = weight[df["bound"] != "unknown"].sum()
    parts = []
    for b in ("compute", "memory"):
        sel = known["bound"] == b
        share = 100 * weight[known.index[sel]].sum() / total if total > 0 else 0.0
        parts.append(f"{b}-bound {share:.0f}% of {'measured' if measured else 'roofline'} time ({int(sel.sum())} nodes)")
    print(f"{len(df)} nodes; " + ", ".join(parts) + f", {int((df['bound'] == 'unknown').sum())} of unknown bound")
    if measured:
        print("top nodes by measured latency:")
        for _, r in df.sort_values("latency_us", ascending=False).head(5).iterrows():
            gf = "" if r["achieved_gflops"] != r["achieved_gflops"] else f", {r['achieved_gflops']:.1f} GFLOP/s achieved"
            print(f"  {r['node']:<32} {r['op_type']:<10} {r['latency_us']:9.1f} us ({r['pct_latency']:4.1f}%), "
                  f"{r['bound']}-bound by roofline{gf}")
        print(f"roofline sum {df['t_roofline_us'].sum() / 1e3:.2f} ms vs measured sum {df['latency_us'].sum() / 1e3:.2f} ms")


def main(argv=None):
    p = cli.parser(__doc__, model="or-results")
    cli.add_host(p)
    p.add_argument("--no-profile", action="store_true", help="ignore ops_latency.csv even if it exists")
    a = cli.parse(p, argv)
    res = Results(a.rdir)
    host = load_host(a.host)
    metrics = read_csv(a.rdir, "ops_metrics.csv", ("node", "op_type", "flops", "dtype"))
    measured = not a.no_profile and (a.rdir / "ops_latency.csv").exists()
    names = ["metrics_meta.json"] + (["profile_meta.json"] if measured else [])
    metas = res.require(*names, light=read_validated(a.model) if a.model else None)
    latency = read_csv(a.rdir, "ops_latency.csv", ("node", "latency_us")) if measured else None
    if not measured:
        print("note: no ops_latency.csv (run 01_profile_onnx.py for measured latency): roofline only")
    df = roofline(merge(metrics, latency), host)
    write_csv(df, a.rdir / "ops_profile.csv")
    write_json(stamp({"host_config": str(a.host), "host": host, "latency_source": "measured" if measured else "none",
                      "versions": versions()}, metas["metrics_meta.json"]["identity"], metas), a.rdir / "merge_meta.json")
    report(df, measured)
    print(f"wrote {a.rdir / 'ops_profile.csv'}")


if __name__ == "__main__":
    cli.run(main)
