#!/usr/bin/env python3
"""Stage 03: join measured latency (01) with costs (02) -> ops_profile.csv, with a per-node roofline and a
predicted latency.

Roofline against configs/host.yaml, a cache-aware bound (lib/analysis/roofline.py): t_compute = FLOPs / peak
FLOP/s of the node's compute dtype, t_mem = bytes the kernel moves / bandwidth of the memory level its working set
fits in (mem_level), bound = the larger; nodes measured below it by more than the profiler's 1 us are a warning
and merge_meta.json's roofline_contradictions. t_pred_us: the baseline efficiency model per node, 0 for nodes ORT
fuses into a neighbour's kernel. merge_meta.json's prediction: predicted_latency_us from the kernel model
(lib/latency/predict.py: ORT's kernels from its optimized graph, never 01's kernel times) with interval_us and
unseen kernel types, baseline_latency_us beside it, both against the measured session latency. Without 01's
profile the latency columns stay empty (04 then uses t_pred_us). 01's and 02's results must belong to the same
model and input spec (exit 2 otherwise).
"""
import numpy as np

from lib import cli
from lib.artifacts import CONFIGS, read_csv, versions, write_csv, write_json
from lib.host import load_host
from lib.latency import host_reference
from lib.latency.predict import print_prediction, stage_prediction
from lib.provenance import Results, stamp, with_tables
from lib.units import fmt_us
from lib.analysis.roofline import LATENCY_COLUMNS, contradiction_summary, contradictions, merge, roofline


def report(df, measured: bool) -> None:
    bound = df["bound"].to_numpy(object)    # compared as objects: pandas' str dtype compares 10x slower
    weight = df["latency_us" if measured else "t_roofline_us"].to_numpy(float)
    unknown = bound == "unknown"
    total = np.nansum(weight)       # unknown-bound nodes too: a 4-bit MLP's uncosted MatMuls held 92% of the time
    parts = []
    for b in ("compute", "memory", "unknown"):
        sel = bound == b
        share = 100 * np.nansum(weight[sel]) / total if total > 0 else 0.0
        if b != "unknown" or sel.any():
            parts.append(f"{b}-bound {share:.0f}% of {'measured' if measured else 'roofline'} time ({int(sel.sum())} nodes)")
    print(f"{len(df)} nodes; " + ", ".join(parts).replace("unknown-bound", "of unknown bound"))
    if measured:
        print("top nodes by measured latency:")
        for _, r in df.sort_values("latency_us", ascending=False).head(5).iterrows():
            gf = "" if r["achieved_gflops"] != r["achieved_gflops"] else f", {r['achieved_gflops']:.1f} GFLOP/s achieved"
            print(f"  {r['node']:<32} {r['op_type']:<10} {r['latency_us']:9.1f} us ({r['pct_latency']:4.1f}%), "
                  f"{r['bound']}-bound by roofline{gf}")
        print(f"roofline sum {fmt_us(df['t_roofline_us'].sum())} vs measured sum {fmt_us(df['latency_us'].sum())}")


def main(argv=None):
    p = cli.parser(__doc__, model="or-results")
    cli.add_host(p)
    p.add_argument("--latency-model", default=str(CONFIGS / "latency_model.yaml"), metavar="YAML",
                   help="calibrated latency model of the host (default: %(default)s; missing: roofline time)")
    p.add_argument("--no-profile", action="store_true", help="ignore ops_latency.csv even if it exists")
    a = cli.parse(p, argv)
    res = Results(a.rdir)
    host = load_host(a.host)
    metrics = read_csv(a.rdir, "ops_metrics.csv", ("node", "op_type", "flops", "dtype"))
    measured = not a.no_profile and (a.rdir / "ops_latency.csv").exists()
    metas = res.require("metrics_meta.json", *(["profile_meta.json"] if measured else []), light=a.model)
    latency = read_csv(a.rdir, "ops_latency.csv", ("node", *LATENCY_COLUMNS)) if measured else None
    if not measured:
        print("note: no ops_latency.csv (run 01_profile_onnx.py for measured latency): roofline and predicted time only")
    df, pred = stage_prediction(roofline(merge(metrics, latency), host), measured, host, a.rdir, a.model,
                                a.latency_model, metas)
    bad = contradictions(df)
    # host.yaml's bounds hold for the CPU they were measured on: on another they may not bound its kernels
    host_note = host_reference.other_cpu(host_reference.host_file_cpu(host), str(a.host),
                                         (metas.get("profile_meta.json") or {}).get("cpu"))
    write_csv(df, a.rdir / "ops_profile.csv")
    write_json(stamp(with_tables({"host_config": str(a.host), "host": host, "host_other_cpu_note": host_note,
                      "latency_source": "measured" if measured else "none",
                      "prediction": pred, "roofline_contradictions": contradiction_summary(bad),
                      "versions": versions()}, a.rdir, "ops_profile.csv"),
                     metas["metrics_meta.json"]["identity"], metas,
                     absent=[] if measured or a.no_profile else ["profile_meta.json"]),
               a.rdir / "merge_meta.json")
    report(df, measured)
    if len(bad):
        print(f"warning: {len(bad)} nodes with a kernel of their own ran faster than their roofline bound by more than "
              f"the profiler's 1 us (e.g. {bad['node'].iat[0]}): " + (host_note or "the host's peaks or bandwidths are "
              "under-measured (re-run make calibrate)") + "; merge_meta.json roofline_contradictions lists them")
    elif host_note:
        print(f"warning: {host_note}; its roofline bounds may not bound this CPU's kernels")
    print_prediction(pred)
    print(f"wrote {a.rdir / 'ops_profile.csv'}")


if __name__ == "__main__":
    cli.run(main)
