"""Shared by the bench scripts: build a model into models/ when it is missing (random weights)."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def ensure_model(name: str, path: Path | None = None, *extra: str) -> Path:
    """`python -m lib.export_models NAME PATH EXTRA...` unless PATH exists; returns PATH."""
    path = path or REPO / "models" / f"{name}.onnx"
    if not path.exists():
        subprocess.run([sys.executable, "-m", "lib.export_models", name, str(path), *extra], cwd=REPO, check=True,
                       capture_output=True)
    return path
