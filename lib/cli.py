"""Argument conventions shared by every stage, and the exit-code contract (0 ok, 2 bad input, 1 bug)."""
from __future__ import annotations

import argparse
import sys
import traceback

from .artifacts import CONFIGS
from .errors import StageError


def parser(description: str, *, model_required: bool = True) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=False, metavar="PATH",
                   help="ONNX model file; results go to results/<model-stem>/" +
                   (" (required unless --results is given)" if not model_required else ""))
    p.add_argument("--results", metavar="DIR", help="results folder (default: results/<model-stem>/)")
    return p


def add_workload(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workload", default=str(CONFIGS / "workload.yaml"), metavar="YAML",
                   help="symbolic-dim values and seed (default: %(default)s)")
    p.add_argument("--shape-override", action="append", default=[], metavar="'NAME=1x3x224x224 ...'",
                   help="fix the shape of graph inputs; several NAME=DIMS pairs, space separated, or repeat the flag")
    p.add_argument("--preset", metavar="NAME", help="symbolic-dim preset from the workload file (e.g. llm-128)")


def add_host(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default=str(CONFIGS / "host.yaml"), metavar="YAML",
                   help="host peaks, bandwidth, power and energy coefficients (default: %(default)s)")


def run(main, argv=None) -> None:
    """Run a stage's main(args) under the exit-code contract."""
    try:
        rc = main(argv)
    except StageError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted: nothing was written", file=sys.stderr)
        sys.exit(130)
    except Exception:  # noqa: BLE001 - an unexpected failure is a bug: show where
        traceback.print_exc()
        print("internal error (a bug, not your input): please report the traceback above", file=sys.stderr)
        sys.exit(1)
    sys.exit(rc or 0)
