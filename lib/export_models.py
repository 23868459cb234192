"""Build ONNX models locally from torchvision constructors (random weights: nothing is downloaded).

    python -m lib.export_models resnet50 models/resnet50.onnx [--opset 18] [--batch 1] [--dynamic-batch]
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path


def calibrate_batchnorm(model, size: int, batches: int = 2, batch: int = 4) -> None:
    """Set BatchNorm running statistics from a few random batches. With torchvision's fresh statistics
    (mean 0, var 1) activations of a random-weight MobileNet/EfficientNet shrink layer after layer to ~1e-9,
    which makes numerical checks of exported models (stage 08) vacuous; calibrated, they stay O(1)."""
    import torch
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the calibration batches
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn(batch, 3, size, size))
    model.eval()


def export_torchvision(name: str, out: str | Path, *, opset: int = 18, batch: int = 1, size: int = 224,
                       dynamic_batch: bool = False, seed: int = 0) -> Path:
    import torch
    import torchvision

    if name not in torchvision.models.list_models(module=torchvision.models):
        raise SystemExit(f"error: unknown torchvision classification model '{name}'")
    torch.manual_seed(seed)
    model = torchvision.models.get_model(name, weights=None).eval()
    # torchvision zero-initialises some heads (ViT's classifier): the logits would be identically 0, which
    # makes any numerical comparison of the exported model vacuous. Give such weights small random values.
    with torch.no_grad():
        for prm in model.parameters():
            if prm.dim() > 1 and not prm.any():
                prm.normal_(0.0, 0.02)
    calibrate_batchnorm(model, size)
    x = torch.randn(batch, 3, size, size)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp.onnx")
    dyn = {"input": {0: torch.export.Dim("batch")}} if dynamic_batch else None
    with warnings.catch_warnings(), open(os.devnull, "w") as devnull:
        warnings.simplefilter("ignore")
        stdout, sys.stdout = sys.stdout, devnull  # the exporter prints its progress to stdout
        try:
            prog = torch.onnx.export(model, (x,), input_names=["input"], output_names=["logits"],
                                     opset_version=opset, dynamo=True, dynamic_shapes=dyn and {"x": dyn["input"]},
                                     external_data=False)
        finally:
            sys.stdout = stdout
    prog.save(str(tmp))
    os.replace(tmp, out)
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", help="torchvision model name, e.g. resnet50, resnet18, mobilenet_v2, efficientnet_b0")
    p.add_argument("out", help="output .onnx path")
    p.add_argument("--opset", type=int, default=18)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--size", type=int, default=224, help="input height = width (default 224)")
    p.add_argument("--dynamic-batch", action="store_true", help="export with a symbolic batch dim")
    a = p.parse_args(argv)
    path = export_torchvision(a.name, a.out, opset=a.opset, batch=a.batch, size=a.size, dynamic_batch=a.dynamic_batch)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB, torchvision {a.name}, random weights, opset {a.opset})")


if __name__ == "__main__":
    main()
