#!/usr/bin/env python3
"""Stage 02 on the models users bring: per model nodes, total MACs, unknown-cost ops and stage-02 wall time;
then peak RSS of stage 02 on a GPT-2-style export with more than 1 GB of external data.

    .venv/bin/python bench/transformer_costs.py [--skip-big] [--record]

Models are built into models/ when missing (random weights, nothing downloaded): torchvision vit_b_16,
swin_t, convnext_tiny; Hugging Face BERT/GPT-2 from configs (h=256, 4 layers) at sequence 128; resnet18 in
fp16 and with ONNX Runtime dynamic quantization; and models/gpt2_wide.onnx (h=1536, 12 layers, ~1.7 GB
external data).
"""
import json
import re
import subprocess
import sys
import time
from pathlib import Path

from _models import REPO, Printed, ensure_model, parser, quantized

PY = sys.executable


def stage02(model: Path, *extra):
    res = REPO / "results" / model.stem
    t0 = time.perf_counter()
    r = subprocess.run(["/usr/bin/time", "-v", PY, "02_shapes_flops_bytes.py", "--model", str(model), *extra],
                       cwd=REPO, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        sys.exit(f"stage 02 failed on {model}: {r.stderr.strip().splitlines()[-1]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1)) / 1024
    meta = json.loads((res / "metrics_meta.json").read_text())
    return meta, wall, rss


def main():
    p = parser(__doc__, recorded=True)
    p.add_argument("--skip-big", action="store_true", help="skip the >1 GB external-data model")
    a = p.parse_args()
    m = REPO / "models"
    for name in ("vit_b_16", "swin_t", "convnext_tiny", "resnet18"):
        ensure_model(name, m / f"{name}.onnx")
    ensure_model("resnet18", m / "resnet18_fp16.onnx", "--fp16")
    ensure_model("hf-bert", m / "bert.onnx")
    ensure_model("hf-gpt2", m / "gpt2.onnx")
    quantized(m / "resnet18.onnx", m / "resnet18_int8_dynamic.onnx")
    quantized(m / "bert.onnx", m / "bert_int8_dynamic.onnx")
    models = ["vit_b_16", "swin_t", "convnext_tiny", "bert", "gpt2", "resnet18_fp16", "resnet18_int8_dynamic",
              "bert_int8_dynamic"]
    out = Printed()
    out(f"{'model':<24} {'nodes':>6} {'MACs (G)':>10} {'unknown ops':>11} {'02 wall s':>9} {'02 peak RSS MB':>15}")
    for name in models:
        meta, wall, rss = stage02(m / f"{name}.onnx")
        out(f"{name:<24} {meta['nodes']:>6} {meta['total_macs'] / 1e9:>10.4f} {meta['unknown_cost_nodes']:>11} "
            f"{wall:>9.2f} {rss:>15.0f}")
    if not a.skip_big:
        ensure_model("hf-gpt2", m / "gpt2_wide.onnx", "--hidden", "1536", "--layers", "12", "--heads", "12", "--external-data")
        data = (m / "gpt2_wide.onnx.data").stat().st_size
        meta, wall, rss = stage02(m / "gpt2_wide.onnx")
        out(f"{'gpt2_wide (ext. data)':<24} {meta['nodes']:>6} {meta['total_macs'] / 1e9:>10.4f} "
              f"{meta['unknown_cost_nodes']:>11} {wall:>9.2f} {rss:>15.0f}   external data {data / 1e9:.2f} GB")
    out.record("transformer_costs", a.record)


if __name__ == "__main__":
    main()
