#!/usr/bin/env python3
"""Stage 02: shape inference -> per-node FLOPs, MACs, activation and weight bytes (ops_metrics.csv).

MACs are multiply-accumulates of Conv/Gemm/MatMul-class ops; FLOPs = 2 x MACs for them, and a per-element
count for the other ops (README, "Cost model"). Ops of unknown cost are flagged (cost_known = False,
flops/macs left empty), counted and listed, never silently zero.
"""
from lib import cli
from lib.artifacts import results_dir, versions, write_csv, write_json
from lib.errors import StageError
from lib.graph import prepare
from lib.metrics import node_metrics, summarize
from lib.units import fmt_bytes, fmt_count


def main(argv=None):
    p = cli.parser(__doc__)
    cli.add_workload(p)
    p.add_argument("--fail-on-unknown", action="store_true",
                   help="exit 2 when any op has no cost model (default: flag, count and list them)")
    a = p.parse_args(argv)
    if not a.model:
        p.error("--model is required")
    rdir = results_dir(a.model, a.results)
    g, shapes = prepare(a.model, a.shape_override, a.workload, a.preset)
    df = node_metrics(g)
    s = summarize(df)
    if a.fail_on_unknown and s["unknown_cost_nodes"]:
        raise StageError(f"{s['unknown_cost_nodes']} nodes have ops of unknown cost: "
                         + ", ".join(f"{k} x{v}" for k, v in s["unknown_cost_ops"].items()))
    write_csv(df, rdir / "ops_metrics.csv")
    write_json({"model": str(a.model), "input_shapes": shapes, "topological_order": "file" if g.file_order else "kahn",
                **s, "versions": versions()}, rdir / "metrics_meta.json")
    print(f"{a.model}: {s['nodes']} nodes, inputs " + ", ".join(f"{k}={'x'.join(map(str, v))}" for k, v in shapes.items()))
    print(f"  MACs (Conv/Gemm/MatMul): {fmt_count(s['conv_gemm_matmul_macs'])}MAC  "
          f"= {fmt_count(2 * s['conv_gemm_matmul_macs'])}FLOP")
    print(f"  FLOPs, all known ops:     {fmt_count(s['total_flops'])}FLOP")
    print(f"  weights {fmt_bytes(s['weight_bytes'])}, activations written {fmt_bytes(s['act_out_bytes'])}")
    if s["unknown_cost_nodes"]:
        print(f"  UNKNOWN COST: {s['unknown_cost_nodes']} nodes (flops/macs empty, cost_known=False): "
              + ", ".join(f"{k} x{v}" for k, v in s["unknown_cost_ops"].items()))
    else:
        print("  unknown-cost ops: none")
    print(f"wrote {rdir / 'ops_metrics.csv'}")


if __name__ == "__main__":
    cli.run(main)
