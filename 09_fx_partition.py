#!/usr/bin/env python3
"""Stage 09: analyse a PyTorch model directly with torch.fx: characterize, fuse, find concurrency, map onto
hardware profiles (configs/hardware/*.yaml).

--model resnet18 (any torchvision model, random weights) or pkg.module:factory; --input-shape 1x3x224x224.
Writes fx_nodes.csv, fx_subgraphs.csv, fx_hardware.csv and fx_summary.json into results/<model>/.
--compare resnet18 mobilenet_v2 efficientnet_b0 prints and writes the side-by-side table (fx_compare.csv).
"""
import sys
from pathlib import Path

import pandas as pd

from lib import cli
from lib.artifacts import CONFIGS, REPO, versions, write_csv, write_json
from lib.errors import StageError
from lib.fx.partition import analyze, compare_row, parse_shape, print_report


def compare(a, shape) -> None:
    rows = []
    for name in a.compare:      # a model that cannot be analysed is said, by name, and left out of the table
        print(f"analysing {name} ...", file=sys.stderr, flush=True)
        try:
            rows.append(compare_row(name, analyze(name, shape, a.max_fuse, a.hardware_dir, a.batch_dim)))
        except StageError as e:
            print(f"warning: {name} left out of the comparison: {e}", file=sys.stderr, flush=True)
    if not rows:
        raise StageError("no model of --compare could be analysed (each one's reason above)")
    df = pd.DataFrame(rows)
    out = Path(a.results) if a.results else REPO / "results" / "fx_compare"
    write_csv(df, out / "fx_compare.csv")
    with pd.option_context("display.width", 200, "display.max_columns", 50, "display.float_format", "{:.3g}".format):
        print(df.set_index("model").T.to_string())
    print(f"wrote {out / 'fx_compare.csv'}")


def main(argv=None):
    p = cli.parser(__doc__, model="none")
    p.add_argument("--model", help="torchvision model name (e.g. resnet18) or pkg.module:factory")
    p.add_argument("--input-shape", default="1x3x224x224", help="example input shape (default: %(default)s)")
    p.add_argument("--batch", type=int, help="batch size (replaces the --batch-dim dim of --input-shape)")
    p.add_argument("--batch-dim", default="0", metavar="DIM", help="the dim of --input-shape that counts samples: the "
                   "hardware table is per sample (default: %(default)s; 1 for a sequence-first LSTM, Transformer or "
                   "MultiheadAttention input, none for one unbatched sequence)")
    p.add_argument("--max-fuse", type=int, default=8, help="resource limit: most ops in one fused subgraph (default 8)")
    p.add_argument("--hardware-dir", default=str(CONFIGS / "hardware"), help="hardware profiles (default: %(default)s)")
    p.add_argument("--compare", nargs="+", metavar="MODEL", help="analyse several models and print them side by side")
    a = cli.parse(p, argv)
    shape = parse_shape(a.input_shape)
    for flag, v in (("--batch", a.batch), ("--max-fuse", a.max_fuse)):
        if v is not None and v < 1:
            raise StageError(f"{flag} must be >= 1")
    a.batch_dim = None if a.batch_dim == "none" else int(a.batch_dim) if a.batch_dim.isdigit() else -1
    if a.batch_dim is not None and not 0 <= a.batch_dim < len(shape) or a.batch is not None and a.batch_dim is None:
        p.error(f"--batch-dim must be a dim of --input-shape {a.input_shape} (0-{len(shape) - 1}) or none, and not "
                f"none with --batch")
    if a.batch is not None:
        shape[a.batch_dim] = a.batch
    if a.compare and a.model:
        p.error("give --model or --compare, not both")
    if a.compare:
        return compare(a, shape)
    if not a.model:
        p.error("--model is required (or --compare MODEL ...)")
    res = analyze(a.model, shape, a.max_fuse, a.hardware_dir, a.batch_dim)
    rdir = Path(a.results) if a.results else REPO / "results" / a.model.replace(":", "_").replace("/", "_")
    write_csv(res["nodes"], rdir / "fx_nodes.csv")
    write_csv(res["subgraphs"], rdir / "fx_subgraphs.csv")
    write_csv(res["hardware"], rdir / "fx_hardware.csv")
    write_json({**res["summary"], "hardware_sources": {k: p["sources"] for k, p in res["profiles"].items()},
                "versions": versions()}, rdir / "fx_summary.json")
    print_report(res)
    print(f"wrote {rdir}/fx_nodes.csv, fx_subgraphs.csv, fx_hardware.csv, fx_summary.json")
    return 0


if __name__ == "__main__":
    cli.run(main)
