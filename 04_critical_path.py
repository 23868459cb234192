#!/usr/bin/env python3
"""Stage 04: critical path of the ONNX DAG -> critical_path.csv.

Node weights are 01's measured latency (via ops_profile.csv); with no profile, 03's predicted time (the
calibrated latency model; the roofline when there is none), or the roofline lower bound on request.
The critical path is the longest chain ending at a node that writes a graph output (a node whose outputs nothing
reads runs, but ends no chain). Nodes one kernel ran (fused_into) start together when all their inputs are ready:
the group's time sits at its last node; each row's `kernel` names the node whose kernel ran it. Summary: critical-path time, sum of node times, parallelism (sum / critical: the
average concurrency the graph would allow on unlimited cores), topological stages (ASAP levels) and the most ops
in one stage.
"""
import numpy as np
import pandas as pd

from lib import cli
from lib.artifacts import read_csv, versions, write_csv, write_json
from lib.analysis.dag import at_group_ends, longest_path, stages, summary
from lib.errors import StageError
from lib.onnx.loading import analysed_arrays
from lib.provenance import stamp, with_tables
from lib.analysis.roofline import known_or_zero


def main(argv=None):
    p = cli.parser(__doc__)
    p.add_argument("--weight", choices=["auto", "measured", "predicted", "roofline"], default="auto",
                   help="node weight: measured latency, predicted time (03's t_pred_us), roofline lower bound, or "
                        "auto = measured when 01 ran, else predicted (default)")
    a = cli.parse(p, argv)
    arrays, res, _ = analysed_arrays(a.rdir, a.model)
    metas = res.require("merge_meta.json")
    prof = read_csv(a.rdir, "ops_profile.csv", ("node", "op_type", "latency_us", "t_roofline_us", "t_pred_us"))
    measured = prof["latency_us"].notna().all()
    use = ("measured" if measured else "predicted") if a.weight == "auto" else a.weight
    if use == "measured" and not measured:
        raise StageError("no measured latency in ops_profile.csv: run 01_profile_onnx.py, then 03")
    col = {"measured": "latency_us", "predicted": "t_pred_us", "roofline": "t_roofline_us"}[use]
    names = list(arrays.names)
    w, unknown = known_or_zero(prof[col])
    w, kernel = at_group_ends(w, names, prof["fused_into"] if "fused_into" in prof else [])
    preds = arrays.preds()
    outputs = np.zeros(len(w), bool)
    outputs[arrays.output_nodes()] = True
    start, finish, path = longest_path(len(w), preds, w, ends=outputs)     # a chain to something the model returns
    s = summary(w, finish, stages(len(w), preds), path)
    dead = ~arrays.live()
    s.update(dead_nodes=int(dead.sum()), dead_node_us=float(w[dead].sum()))
    cp = pd.DataFrame({"order": np.arange(len(path)), "node": [names[i] for i in path],
                       "op_type": [prof["op_type"].iat[i] for i in path], "layer": [prof["layer"].iat[i] for i in path],
                       "start_us": start[path], "finish_us": finish[path], "latency_us": w[path],
                       "kernel": [kernel[i] for i in path]})
    write_csv(cp, a.rdir / "critical_path.csv")
    write_json(stamp(with_tables({"weight": use, **s, "path_nodes": len(path), "unknown_time_nodes": unknown,
                                  "versions": versions()}, a.rdir, "critical_path.csv"), metas["merge_meta.json"]["identity"], metas),
               a.rdir / "critical_path_meta.json")
    print(f"weights: {use} ({col})" + (f"; {unknown} nodes of unknown time counted as 0" if unknown else ""))
    print(f"critical path: {s['critical_path_us'] / 1e3:.3f} ms over {len(path)} of {len(w)} nodes; "
          f"sum of node times {s['sum_node_us'] / 1e3:.3f} ms; parallelism "
          + (f"{s['parallelism']:.2f}x" if s["critical_path_us"] > 0 else "n/a"))
    if s["dead_nodes"]:
        print(f"{s['dead_nodes']} nodes whose outputs nothing reads ({s['dead_node_us'] / 1e3:.3f} ms) run but lead to "
              f"no output: on no path")
    print(f"topological stages: {s['stages']}; max ops in one stage: {s['max_ops_per_stage']} (stage {s['widest_stage']})")
    print(f"wrote {a.rdir / 'critical_path.csv'}")


if __name__ == "__main__":
    cli.run(main)
