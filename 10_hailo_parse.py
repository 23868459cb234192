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
import os

import onnx
import pandas as pd

from lib import cli
from lib.artifacts import CONFIGS, read_csv, results_dir, write_csv
from lib.errors import StageError
from lib.export_split import SplitExporter
from lib.graph import prepare
from lib.hailo import (ARCHS, ParseCache, backend_python, compiler_version, load_op_table, parse, partition_hash,
                       partition_model, provision, static_check)

COLUMNS = ["boundary", "side", "partition", "arch", "status", "source", "node", "op", "reason", "compiler_version",
           "cached"]


def main(argv=None):
    p = cli.parser(__doc__, model_required=False)
    cli.add_workload(p)
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
    a = p.parse_args(argv)
    if a.provision:
        for d in provision(a.arch, a.python):
            print(f"created {d}")
        return 0
    if not a.model:
        p.error("--model is required")
    cache = ParseCache()
    if a.clear_cache:
        print(f"cleared {cache.clear()} cached parse results ({cache.path})")
    rdir = results_dir(a.model, a.results)
    bd = read_csv(rdir, "boundaries.csv", ("boundary", "after_node", "rank"))
    if a.boundary:
        bad = [b for b in a.boundary if not 0 <= b < len(bd)]
        if bad:
            raise StageError(f"--boundary {bad} out of range: the model has boundaries 0..{len(bd) - 1}")
        chosen = list(dict.fromkeys(a.boundary))
    else:
        chosen = [int(b) for b in bd[bd["rank"].notna()].sort_values("rank")["boundary"].head(a.top_k)]
    table = load_op_table(a.op_table)
    g, _ = prepare(a.model, a.shape_override, a.workload, a.preset)
    cmds = {arch: (None if a.backend == "static" else backend_python(a.backend, arch)) for arch in a.arch}
    if a.backend not in ("auto", "static") and not all(cmds.values()):
        missing = [arch for arch, c in cmds.items() if not c]
        raise StageError(f"backend {a.backend} has no Hailo compiler for {missing}" +
                         (": run 10_hailo_parse.py --provision" if a.backend == "venv" else ""))
    versions = {arch: compiler_version(c) for arch, c in cmds.items() if c}
    exporter, rows = None, []
    for k, b in enumerate(chosen, 1):
        folder = rdir / "splits" / f"b{b}"
        part_path = folder / ("part2.onnx" if a.side == "right" else "part1.onnx")
        if not part_path.exists() or part_path.stat().st_mtime < os.stat(a.model).st_mtime:
            exporter = exporter or SplitExporter(a.model, g)
            exporter.export(b, folder)
        part = onnx.load(str(part_path), load_external_data=False)
        info, h = partition_model(part), partition_hash(part)
        for arch in a.arch:
            base = {"boundary": b, "side": a.side, "partition": str(part_path.relative_to(rdir)), "arch": arch}
            if cmds[arch]:
                key = ParseCache.key(h, arch, versions[arch])
                res, cached = cache.get(key), True
                if res is None:
                    print(f"[{k}/{len(chosen)}] b{b} {arch}: parsing with the DFC {versions[arch]}", flush=True)
                    res, cached = parse(cmds[arch], part_path, f"b{b}_{a.side}", arch, info), False
                    if res.get("status") in ("ok", "unsupported"):
                        cache.put(key, res)   # errors (crashes, time-outs) are retried next time
                rows.append({**base, **res, "source": "dfc", "compiler_version": versions[arch], "cached": cached})
            else:
                rows.append({**base, **static_check(info, table.get(arch, set())), "source": "static",
                             "compiler_version": "", "cached": False})
    cache.save()
    df = pd.DataFrame(rows, columns=COLUMNS)
    write_csv(df, rdir / "hailo_feasibility.csv")
    for arch in a.arch:
        sub = df[df["arch"] == arch]
        bad = sub[sub["status"] != "ok"]
        ops = set(bad["op"].dropna())
        for reason in bad["reason"].dropna():
            if "static table: " in reason:
                ops.update(reason.split("static table: ", 1)[1].split(", "))
        ops = sorted(ops)
        print(f"{arch}: {int((sub['status'] == 'ok').sum())}/{len(sub)} partitions ok"
              + (f"; unsupported ops: {', '.join(ops)}" if ops else ""))
    if (df["source"] == "static").any():
        print("NOTE: no Hailo Dataflow Compiler found for " + ", ".join(sorted(set(df.loc[df['source'] == 'static', 'arch'])))
              + ": these rows come from the static op-support table (configs/hailo_ops.yaml); the compiler was not run")
    print(f"wrote {rdir / 'hailo_feasibility.csv'}")
    return 0


if __name__ == "__main__":
    cli.run(main)
