#!/usr/bin/env python3
"""Stage 02: shape inference -> per-node FLOPs, MACs, activation and weight bytes (ops_metrics.csv).

MACs are multiply-accumulates of Conv/Gemm/MatMul/RNN-class ops; FLOPs = 2 x MACs for them, and a per-element
count for the other ops (README, "Cost model"). Ops of unknown cost are flagged (cost_known = False,
flops/macs left empty), counted and listed, never silently zero. Every node records where its shapes came
from (shape_source: onnx, ort, values, executed; constant for nodes computed from weights alone; unknown
when a shape is missing). Also writes graph.onnx (the inferred graph, weights stripped) that 08 and 10 reuse,
graph.npz (its structure as arrays) that 04, 05 and 07 reuse, and metrics_meta.json (totals, model identity
and input spec). A graph with Softmax nodes is run once on its inputs: exp_underflow, the share of each one's
16-value runs holding an exponential that underflows float32; subnormal, the share of subnormal values a node reads
or writes (its weights, a Softmax's output) (lib/onnx/underflow.py; the kernel model's features).
"""
from lib import cli
from lib.artifacts import versions, write_csv, write_json
from lib.errors import StageError
from lib.onnx.inputs import InputSpec
from lib.onnx.loading import prepare, save_graph
from lib.onnx.metrics import kv_cache, node_metrics, summarize
from lib.onnx.underflow import measure, summary, summary_lines
from lib.provenance import new_run_id, stamp, with_tables
from lib.units import fmt_bytes, fmt_count


def report(path, shapes, s, note) -> None:
    print(f"{path}: {s['nodes']} nodes, inputs " + ", ".join(f"{k}={'x'.join(map(str, v)) or 'scalar'}"
                                                          for k, v in shapes.items()))
    print(f"  MACs (Conv/Gemm/MatMul/RNN): {fmt_count(s['conv_gemm_matmul_macs'])}MAC  "
          f"= {fmt_count(2 * s['conv_gemm_matmul_macs'])}FLOP")
    print(f"  FLOPs, all known ops:     {fmt_count(s['total_flops'])}FLOP")
    print(f"  weights {fmt_bytes(s['weight_bytes'])}, activations written {fmt_bytes(s['act_out_bytes'])}")
    kv = s["kv_cache"]["inputs"]
    if kv["tensors"]:
        print(f"  KV cache read: {kv['tensors']} inputs ({kv['example']} ...), {fmt_bytes(kv['bytes'])}")
    for line in summary_lines(s):
        print(f"  {line}")
    print("  shapes from: " + ", ".join(f"{k} {v}" for k, v in s["shape_source"].items()))
    if note:
        print(f"  note: {note}")
    if s["upper_bound_nodes"]:
        print(f"  UPPER BOUND: {s['upper_bound_nodes']} If nodes whose branch is unknown count the dearer branch "
              f"(cost_note); pass the real inputs with --inputs-npz")
    strings = s.get("unknown_size_strings", 0)
    if s["unknown_size_nodes"] > strings:
        print(f"  UNKNOWN SIZE: {s['unknown_size_nodes'] - strings} nodes read or write a tensor whose shape could not "
              f"be resolved (act_in/out_bytes empty, bytes_known=False): "
              f"{note or 'pass the real inputs with --inputs-npz'}")
    if strings:
        print(f"  string tensors: {strings} nodes read or write strings, whose shapes are known but not their bytes "
              f"(act_in/out_bytes empty, bytes_known=False)")
    if s["unknown_cost_nodes"]:
        n = s["unknown_cost_nodes"]
        print(f"  UNKNOWN COST: {n} node{'s' if n != 1 else ''} (flops/macs empty, cost_known=False): "
              + ", ".join(f"{k} x{v}" for k, v in s["unknown_cost_ops"].items()))
    else:
        print("  unknown-cost ops: none")


def main(argv=None):
    p = cli.parser(__doc__)
    cli.add_inputs(p, feeds=True)
    p.add_argument("--fail-on-unknown", action="store_true",
                   help="exit 2 when any op has no cost model (default: flag, count and list them)")
    a = cli.parse(p, argv)
    an = prepare(a.model, InputSpec.from_args(a))
    consts = an.constants()
    run_id = new_run_id()
    df = node_metrics(an.graph, consts)
    s = summarize(df, an.graph)
    if a.fail_on_unknown and s["unknown_cost_nodes"]:
        raise StageError(f"{s['unknown_cost_nodes']} nodes have ops of unknown cost: "
                         + ", ".join(f"{k} x{v}" for k, v in s["unknown_cost_ops"].items()))
    save_graph(an, a.rdir, run_id, consts)
    s["kv_cache"] = kv_cache(an.graph)
    columns, note = measure(a.model, an.graph, an.feeds)
    for c, v in columns.items():
        df[c] = v
    s.update(summary(columns, note))
    meta = stamp({"topological_order": "file" if an.graph.file_order else "kahn", "shape_note": an.inferred.executed_note,
                  **s, "versions": versions()}, an.identity, run_id=run_id)
    write_csv(df, a.rdir / "ops_metrics.csv")
    write_json(with_tables(meta, a.rdir, "ops_metrics.csv"), a.rdir / "metrics_meta.json")
    report(a.model, an.shapes, s, an.inferred.executed_note)
    print(f"wrote {a.rdir / 'ops_metrics.csv'}")


if __name__ == "__main__":
    cli.run(main)
