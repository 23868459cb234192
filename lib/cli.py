"""Argument groups shared by every stage (the group decides what is required), and the exit-code contract:
0 done, 2 bad input or missing prerequisite (one `error:` line), 1 an internal error (a bug: traceback) or a
reader of the output that went away (`| head`: silent)."""
from __future__ import annotations

import argparse
import gc
import os
import sys
import traceback
from pathlib import Path

from lib.artifacts import CONFIGS, results_dir
from lib.errors import StageError


class Parser(argparse.ArgumentParser):
    """argparse with the one-line error contract (its own error() prints the whole usage first)."""

    def error(self, message):
        print(f"error: {message} (see --help)", file=sys.stderr)
        sys.exit(2)


def parser(description: str, *, model: str = "required",
           results_help: str = "results folder (default: results/<model-stem>/)") -> Parser:
    """model: 'required' (the stage reads the model file), 'or-results' (--model or --results will do),
    'optional' (the stage checks itself), 'none'."""
    p = Parser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.set_defaults(_model_mode=model)
    if model != "none":
        p.add_argument("--model", required=model == "required", metavar="PATH",
                       help="ONNX model file; results go to results/<model-stem>/" +
                       (" (or give --results)" if model == "or-results" else ""))
    p.add_argument("--results", metavar="DIR", help=results_help)
    return p


def parse(p: Parser, argv=None) -> argparse.Namespace:
    a = p.parse_args(argv)
    if a._model_mode == "or-results" and not a.model and not a.results:
        p.error("give --model PATH or --results DIR")
    if a._model_mode != "none":
        if a.model and not Path(a.model).exists():     # before "run 02 first": the model is what is missing
            raise StageError(f"model {a.model} not found")
        a.rdir = results_dir(a.model, a.results) if a.model or a.results else None
    folder = a.rdir if a._model_mode != "none" else Path(a.results) if a.results else None
    bad = next((d for d in (folder, *folder.parents) if d.exists() and not d.is_dir()), None) if folder else None
    if bad is not None:         # (01 profiled for minutes before it failed to write there)
        raise StageError(f"results folder {folder}: {bad} is a file, not a folder")
    return a


def add_inputs(p: Parser, feeds: bool = False) -> None:
    """The one input spec (lib/onnx/inputs.py): shapes for every stage, and feeds for the stages that run the model."""
    p.add_argument("--workload", default=str(CONFIGS / "workload.yaml"), metavar="YAML",
                   help="symbolic-dim values, presets and seed (default: %(default)s)")
    p.add_argument("--shape-override", action="append", default=[], metavar="'NAME=1x3x224x224 ...'",
                   help="fix the shape of graph inputs; several NAME=DIMS pairs, space separated, or repeat the flag")
    p.add_argument("--preset", metavar="NAME", help="symbolic-dim preset of the workload file (e.g. llm-128, "
                   "llm-decode-2048)")
    p.add_argument("--inputs-npz", metavar="NPZ", help="input arrays (one per graph input): they feed the model "
                   "where it runs and their shapes fix the symbolic dims everywhere")
    if feeds:
        p.add_argument("--seed", type=int, default=None, help="seed of the random inputs (default: workload.yaml's)")


def add_host(p: Parser) -> None:
    p.add_argument("--host", default=str(CONFIGS / "host.yaml"), metavar="YAML",
                   help="host peaks, bandwidth, power and energy coefficients (default: %(default)s)")


def add_system(p: Parser) -> None:
    p.add_argument("--system", default=str(CONFIGS / "system.yaml"), metavar="YAML",
                   help="devices, link, constraints and ranking (default: %(default)s)")


# A stage builds millions of long-lived objects (nodes, rows) and drops them only at exit. CPython's default
# thresholds (700, 10, 10) run ~10 full collections over them while they grow: 1.1 s of stage 02's 9 s on a
# 200k-node graph.
# Young objects are still collected, every 100k allocations (short-lived cycles are reclaimed); full
# collections practically never.
GC_THRESHOLDS = (100_000, 50, 1000)


# True in a process run() started (a stage, make calibrate, zoo.py, the sweep: short-lived), which imports LightGBM
# without its scikit-learn API (lib/latency/kernel_model.py's _lightgbm); a test or a library user keeps the whole
IN_STAGE = False


def run(main, argv=None) -> None:
    """Run a stage's main(args) under the exit-code contract."""
    global IN_STAGE
    IN_STAGE = True
    gc.set_threshold(*GC_THRESHOLDS)
    try:
        rc = main(argv)
    except StageError as e:
        print(f"error: {' '.join(str(e).split())}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted: nothing was written", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:     # the output went into `head` & co., which stopped reading: no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # (Python's own advice)
        sys.exit(1)
    except Exception:  # noqa: BLE001 - an unexpected failure is a bug: show where
        traceback.print_exc()
        print("internal error (a bug, not your input): please report the traceback above", file=sys.stderr)
        sys.exit(1)
    # done: skip the interpreter's teardown (it frees millions of objects one by one: 0.12-0.15 s after a
    # 200k-node stage). Every file is closed by its with-block, and no stage leaves an exit handler to run.
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BrokenPipeError:     # as above: the reader went away
        os._exit(1)
    os._exit(rc or 0)
