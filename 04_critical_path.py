#!/usr/bin/env python3
"""Stage 04: critical path of the ONNX DAG -> critical_path.csv.

Node weights are 01's measured latency (via ops_profile.csv); with no profile, 03's roofline time.
Summary: critical-path time, sum of node times, parallelism (sum / critical), topological stages (ASAP
levels) and the most ops in one stage.
"""
import numpy as np
import pandas as pd

from lib import cli
from lib.artifacts import read_csv, results_dir, versions, write_csv, write_json
from lib.dag import longest_path, stages, summary
from lib.errors import StageError
from lib.graph import build_graph, load_model


def main(argv=None):
    p = cli.parser(__doc__)
    p.add_argument("--weight", choices=["auto", "measured", "roofline"], default="auto",
                   help="node weight: measured latency, roofline time, or auto = measured when 01 ran (default)")
    a = p.parse_args(argv)
    if not a.model:
        p.error("--model is required (the DAG's edges come from the model file)")
    rdir = results_dir(a.model, a.results)
    prof = read_csv(rdir, "ops_profile.csv", ("node", "op_type", "latency_us", "t_roofline_us"))
    g = build_graph(load_model(a.model))
    if list(prof["node"]) != g.names:
        raise StageError(f"{rdir / 'ops_profile.csv'} does not match {a.model}'s nodes: re-run stages 02 and 03 on it")
    measured = prof["latency_us"].notna().all()
    use = "measured" if (a.weight == "auto" and measured) or a.weight == "measured" else "roofline"
    if use == "measured" and not measured:
        raise StageError("no measured latency in ops_profile.csv: run 01_profile_onnx.py, then 03")
    col = "latency_us" if use == "measured" else "t_roofline_us"
    w = prof[col].fillna(0.0).to_numpy(dtype=float)
    preds = [g.preds(i) for i in range(len(g.nodes))]
    start, finish, path = longest_path(len(w), preds, w)
    level = stages(len(w), preds)
    s = summary(w, finish, level)
    cp = pd.DataFrame({"order": np.arange(len(path)), "node": [g.names[i] for i in path],
                       "op_type": [prof["op_type"].iat[i] for i in path],
                       "start_us": start[path], "finish_us": finish[path], "latency_us": w[path]})
    write_csv(cp, rdir / "critical_path.csv")
    write_json({"weight": use, **s, "path_nodes": len(path), "versions": versions()}, rdir / "critical_path_meta.json")
    print(f"weights: {use} ({col})")
    print(f"critical path: {s['critical_path_us'] / 1e3:.3f} ms over {len(path)} of {len(w)} nodes; "
          f"sum of node times {s['sum_node_us'] / 1e3:.3f} ms; parallelism {s['parallelism']:.2f}x")
    print(f"topological stages: {s['stages']}; max ops in one stage: {s['max_ops_per_stage']} (stage {s['widest_stage']})")
    print(f"wrote {rdir / 'critical_path.csv'}")


if __name__ == "__main__":
    cli.run(main)
