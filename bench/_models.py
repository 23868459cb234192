"""Shared by the bench scripts: their command line, running a stage script, and building a model into models/
when it is missing (random weights; int8 by ONNX Runtime's dynamic quantization)."""
import argparse
import subprocess
import sys
from pathlib import Path

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


def parser(doc: str, models: list[str] | None = None) -> argparse.ArgumentParser:
    """A bench script's command line: its docstring as the help, and `--models` (default `models`) when given."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    if models is not None:
        p.add_argument("--models", nargs="+", default=list(models))
    return p


def run_stage(script: str, *args, check: bool = True) -> subprocess.CompletedProcess:
    """`python SCRIPT ARGS...` in the repository, its output captured (text)."""
    return subprocess.run([sys.executable, script, *map(str, args)], cwd=REPO, check=check, capture_output=True,
                          text=True)
