"""Shared by the bench scripts: their command line, running a stage script, building a model into models/
when it is missing (random weights; int8 by ONNX Runtime's dynamic quantization), and `--record`: what a
bench prints, written to its section of bench/RESULTS.md (bench/record.py) with the date, host, commit and
the command that regenerates it."""
import argparse
import shlex
import subprocess
import sys
from pathlib import Path

from record import record

REPO = Path(__file__).resolve().parent.parent


def ensure_model(name: str, path: Path | None = None, *extra: str) -> Path:
    """`python -m lib.onnx.export_models NAME PATH EXTRA...` unless PATH exists; returns PATH."""
    path = path or REPO / "models" / f"{name}.onnx"
    if not path.exists():
        subprocess.run([sys.executable, "-m", "lib.onnx.export_models", name, str(path), *extra], cwd=REPO, check=True,
                       capture_output=True)
    return path


def quantized(src: Path, dst: Path) -> Path:
    """ORT dynamic quantization (int8 weights) of the float model `src` into `dst` unless `dst` exists;
    returns `dst`."""
    if dst.exists():
        return dst
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    m = onnx.load(str(src))
    m.graph.ClearField("value_info")   # ORT's quantizer re-infers shapes and trips on the exporter's value_info
    tmp = dst.with_suffix(".f32.onnx")
    onnx.save(m, str(tmp))
    quantize_dynamic(str(tmp), str(dst), weight_type=QuantType.QInt8)
    tmp.unlink()
    return dst


def parser(doc: str, models: list[str] | None = None, recorded: bool = False) -> argparse.ArgumentParser:
    """A bench script's command line: its docstring as the help, `--models` (default `models`) when given, and
    `--record` when the script records its figures."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if models is not None:
        p.add_argument("--models", nargs="+", default=list(models))
    if recorded:
        add_record(p)
    return p


def add_record(p: argparse.ArgumentParser) -> None:
    p.add_argument("--record", action="store_true",
                   help="also write what this run prints to its section of bench/RESULTS.md (date, host, commit, command)")


class Printed:
    """print() that keeps the lines, so that `--record` writes exactly what the run printed (never figures
    typed by hand)."""

    def __init__(self):
        self.lines: list[str] = []

    def __call__(self, line: str = "") -> None:
        print(line, flush=True)
        self.lines.extend(str(line).splitlines() or [""])

    def record(self, script: str, on: bool) -> None:
        """When `on`, write the lines printed so far as section `script` of bench/RESULTS.md; the command
        recorded is this run's own (with --record, so that running it again regenerates the section)."""
        if on:
            command = shlex.join(["python", f"bench/{script}.py", *sys.argv[1:]])
            record(script, "```\n" + "\n".join(self.lines) + "\n```\n", command=command)
            print(f"recorded in bench/RESULTS.md, section {script}")


def refuse(message: str) -> None:
    """Bad input to a bench script: one line on stderr, exit code 2 (as the stages do)."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def calibrated_here(record: bool, latency_model: Path = REPO / "configs" / "latency_model.yaml",
                    host_file: Path = REPO / "configs" / "host.yaml") -> None:
    """The benches that score make calibrate's files: on another CPU than theirs, the figures would be another
    CPU's calibration scored on this one. With --record: refused in one line, before any work; else a warning."""
    from lib.host import load_host
    from lib.latency import host_reference as hr
    note = (hr.latency_model_note(latency_model)
            or hr.other_cpu(hr.host_file_cpu(load_host(host_file)), str(host_file)))
    if note and record:
        refuse(f"{note}; --record writes no figures of another CPU's calibration")
    if note:
        print(f"warning: {note}", file=sys.stderr)


def run_stage(script: str, *args, check: bool = True) -> subprocess.CompletedProcess:
    """`python SCRIPT ARGS...` in the repository, its output captured (text)."""
    return subprocess.run([sys.executable, script, *map(str, args)], cwd=REPO, check=check, capture_output=True,
                          text=True)
