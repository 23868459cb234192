#!/usr/bin/env python3
"""Stage 10: can the Hailo toolchain translate each split candidate's accelerator-side partition?

For each candidate (top-k of boundaries.csv, or --boundary B ...) and each target (hailo8, hailo10), runs a
parse-only translation of the partition with the Hailo Dataflow Compiler's Python API
(ClientRunner(hw_arch=...).translate_onnx_model(part, name, start_node_names=..., end_node_names=...,
net_input_shapes=...)) and records ok / unsupported (failing node and op) / error in
hailo_feasibility.csv. Backends: local (the compiler importable here), venv (one managed virtual
environment per arch: Hailo-8 and Hailo-10 need different compiler major versions; create them with
--provision), wsl (the same from Windows), auto (the first that works). Results are cached by partition
hash + arch + compiler version. Without any compiler the stage still succeeds with a static op-support
check (configs/hailo_ops.yaml): every row says source = static, and the compiler was not run.
"""
import functools

import pandas as pd

from lib import cli
from lib.artifacts import CONFIGS, read_csv, write_csv, write_json
from lib.split.export import SplitExporter
from lib.split.hailo import (ARCHS, ParseCache, backends, check_partitions, load_op_table, partition_file,
                             print_report, provision)
from lib.onnx.inputs import InputSpec
from lib.onnx.loading import analysed
from lib.provenance import stamp, with_tables
from lib.split.ranking import HAILO_META, choose_boundaries

COLUMNS = ["boundary", "side", "partition", "arch", "status", "source", "node", "op", "reason", "compiler_version",
           "cached"]


def add_flags(p) -> None:
    p.add_argument("--arch", nargs="+", default=list(ARCHS), choices=ARCHS, help="targets (default: both)")
    p.add_argument("--top-k", type=int, default=10, help="check the k best-ranked boundaries (default: %(default)s)")
    p.add_argument("--boundary", type=int, nargs="+", metavar="B", help="check these boundaries instead")
    p.add_argument("--side", choices=["right", "left"], default="right",
                   help="the accelerator-side partition: right = part2 (device B in system.yaml, default) or left")
    p.add_argument("--backend", default="auto", choices=["auto", "local", "venv", "wsl", "static"],
                   help="where the compiler runs (default: auto = local, else venv, else wsl, else static)")
    p.add_argument("--op-table", default=str(CONFIGS / "hailo_ops.yaml"), help="static op-support table (default: %(default)s)")
    p.add_argument("--clear-cache", action="store_true", help="empty the parse cache first")
    p.add_argument("--provision", action="store_true", help="create the per-arch venvs from vendor/hailo/<arch>/*.whl and exit")
    p.add_argument("--python", default="python3", help="interpreter (>= 3.10) for --provision (default: python3)")


def main(argv=None):
    p = cli.parser(__doc__, model="optional")
    cli.add_inputs(p)
    add_flags(p)
    a = cli.parse(p, argv)
    if a.provision:
        for d in provision(a.arch, a.python):
            print(f"created {d}")
        return 0
    if not a.model:
        p.error("--model is required")
    if a.top_k < 1:
        p.error("--top-k must be >= 1")
    cache = ParseCache()
    if a.clear_cache:
        print(f"cleared {cache.clear()} cached parse results ({cache.path})")
    an, res = analysed(a.rdir, a.model, InputSpec.from_args(a))
    metas = res.require("workload_profile.json", "metrics_meta.json")
    bd = read_csv(a.rdir, "boundaries.csv", ("boundary", "after_node", "rank"))
    table, cmds = load_op_table(a.op_table), backends(a.backend, a.arch)
    run = stamp({"arch": a.arch}, metas["workload_profile.json"]["identity"], metas)
    exporter = functools.cache(lambda: SplitExporter(a.model, an.graph))    # built only when a part is missing
    parts = {b: partition_file(a.rdir, b, a.side, run["identity"], exporter)
             for b in choose_boundaries(bd, a.boundary, a.top_k)}
    shapes = {t: i.shape for t, i in an.graph.tensors.items() if i is not None and i.shape is not None}
    rows = check_partitions(parts, a.rdir, a.side, a.arch, cmds, table, cache, shapes)
    cache.save()
    write_csv(pd.DataFrame(rows, columns=COLUMNS), a.rdir / "hailo_feasibility.csv")
    # 07 --feasibility: of this model and spec?
    write_json(with_tables({**run, "boundaries": sorted(parts)}, a.rdir, "hailo_feasibility.csv"), a.rdir / HAILO_META)
    print_report(rows, a.arch)
    print(f"wrote {a.rdir / 'hailo_feasibility.csv'}")
    return 0


if __name__ == "__main__":
    cli.run(main)
