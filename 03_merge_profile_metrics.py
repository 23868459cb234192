#!/usr/bin/env python3
"""Stage 03: join measured latency (01) with costs (02) -> ops_profile.csv, with a per-node roofline and a
predicted latency.

Roofline against configs/host.yaml: t_compute = FLOPs / peak FLOP/s (of the node's dtype), t_mem = bytes /
bandwidth, bound = the larger. t_pred_us: the calibrated latency model of this host (configs/latency_model.yaml,
made by `make calibrate`), 0 for the nodes ORT fuses into a neighbour's kernel (known from 01's attribution, or,
without a profile and with --model, from ORT's optimized graph); merge_meta.json has predicted_latency_us next
to the measured session latency, with the error. Without 01's profile the latency columns stay empty (04 then
uses the prediction). 01's and 02's results must belong to the same model and input spec (exit 2 otherwise).
"""
import numpy as np

from lib import cli
from lib.artifacts import CONFIGS, read_csv, versions, write_csv, write_json
from lib.errors import StageError
from lib.host import load_host
from lib.latency.latency_model import ort_node_roles, predict_profile
from lib.provenance import Results, stamp
from lib.analysis.roofline import LATENCY_COLUMNS, merge, roofline


ORT_SLOW_NODES = 20_000     # from here ONNX Runtime's session creation takes long enough to say so first


def predicted(df, meta: dict, host: dict, a, metas: dict):
    """t_pred_us and the prediction's summary; without a profile, ORT's fusions from its optimized graph."""
    fusion = "01's attribution" if meta["measured"] else "none known (no profile and no --model)"
    if not meta["measured"] and a.model:    # ORT's fusions from its optimized graph, on 02's inferred graph
        if len(df) >= ORT_SLOW_NODES:
            print(f"note: ONNX Runtime optimizes the {len(df):,}-node graph to find its fusions; its optimizer is "
                  f"superlinear (37 s at 50k nodes on 2 cores, over 10 min at 200k): leave out --model to predict "
                  f"without fusions", flush=True)
        # onnx and the model front door, imported only on this path (0.1 s)
        from lib.onnx.loading import analysed
        graph = analysed(a.rdir, a.model)[0].graph
        try:
            roles = ort_node_roles(a.model, graph=graph)
            df[["attribution", "fused_into"]] = roles[["attribution", "fused_into"]].to_numpy()
            fusion = "ORT's optimized graph"
        except StageError as e:     # a custom op ORT lacks: 02's costs stand, the prediction assumes no fusion
            fusion = f"none known ({e})"
            print(f"note: no fusion known for the prediction, every node counted: {e}")
    t, info = predict_profile(df, host, a.latency_model)
    info["fusion_from"] = fusion
    df["t_pred_us"] = t
    session = (metas.get("profile_meta.json") or {}).get("session_latency", {}).get("median_us")
    info["measured_latency_us"] = session
    info["error"] = info["predicted_latency_us"] / session - 1 if session else None
    return df, info


def report(df, measured: bool) -> None:
    bound = df["bound"].to_numpy(object)    # compared as objects: pandas' str dtype compares 10x slower
    weight = df["latency_us" if measured else "t_roofline_us"].to_numpy(float)
    unknown = bound == "unknown"
    total = np.nansum(weight[~unknown])
    parts = []
    for b in ("compute", "memory"):
        sel = bound == b
        share = 100 * np.nansum(weight[sel]) / total if total > 0 else 0.0
        parts.append(f"{b}-bound {share:.0f}% of {'measured' if measured else 'roofline'} time ({int(sel.sum())} nodes)")
    print(f"{len(df)} nodes; " + ", ".join(parts) + f", {int(unknown.sum())} of unknown bound")
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
    p.add_argument("--latency-model", default=str(CONFIGS / "latency_model.yaml"), metavar="YAML",
                   help="calibrated latency model of the host (default: %(default)s; missing: roofline time)")
    p.add_argument("--no-profile", action="store_true", help="ignore ops_latency.csv even if it exists")
    a = cli.parse(p, argv)
    res = Results(a.rdir)
    host = load_host(a.host)
    metrics = read_csv(a.rdir, "ops_metrics.csv", ("node", "op_type", "flops", "dtype"))
    measured = not a.no_profile and (a.rdir / "ops_latency.csv").exists()
    names = ["metrics_meta.json"] + (["profile_meta.json"] if measured else [])
    metas = res.require(*names, light=a.model)
    latency = read_csv(a.rdir, "ops_latency.csv", ("node", *LATENCY_COLUMNS)) if measured else None
    if not measured:
        print("note: no ops_latency.csv (run 01_profile_onnx.py for measured latency): roofline and predicted time only")
    df, pred = predicted(roofline(merge(metrics, latency), host), {"measured": measured}, host, a, metas)
    write_csv(df, a.rdir / "ops_profile.csv")
    write_json(stamp({"host_config": str(a.host), "host": host, "latency_source": "measured" if measured else "none",
                      "prediction": pred, "versions": versions()}, metas["metrics_meta.json"]["identity"], metas,
                     absent=[] if measured or a.no_profile else ["profile_meta.json"]),
               a.rdir / "merge_meta.json")
    report(df, measured)
    err = f" ({100 * pred['error']:+.0f}% vs the measured session {pred['measured_latency_us'] / 1e3:.2f} ms)" \
        if pred["error"] is not None else ""
    print(f"predicted latency {pred['predicted_latency_us'] / 1e3:.2f} ms{err}" + (f"; {pred['note']}" if pred["note"] else ""))
    print(f"wrote {a.rdir / 'ops_profile.csv'}")


if __name__ == "__main__":
    cli.run(main)
