#!/usr/bin/env python3
"""Stage 09's host-profile latency prediction against stage 01's ORT measurement, for torchvision models.

    .venv/bin/python bench/fx_host_vs_measured.py [--models resnet50 resnet18 mobilenet_v2] [--runs 20]
"""
import argparse
import json
import subprocess
import sys

from _models import REPO, ensure_model


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", default=["resnet50", "resnet18", "mobilenet_v2"])
    p.add_argument("--runs", type=int, default=20)
    a = p.parse_args()
    py = sys.executable
    print(f"{'model':<16} {'09 host predicted ms':>21} {'01 measured ms (median)':>24} {'error':>7}")
    for name in a.models:
        model = ensure_model(name)
        subprocess.run([py, "01_profile_onnx.py", "--model", str(model), "--runs", str(a.runs)], cwd=REPO, check=True,
                       capture_output=True)
        subprocess.run([py, "09_fx_partition.py", "--model", name], cwd=REPO, check=True, capture_output=True)
        measured = json.loads((REPO / "results" / name / "profile_meta.json").read_text())["session_latency"]["median_us"]
        import pandas as pd
        hw = pd.read_csv(REPO / "results" / name / "fx_hardware.csv")
        pred = hw[(hw["hardware"] == "host") & (hw["point"] == "batch1")]["latency_us"].iat[0]
        print(f"{name:<16} {pred / 1e3:>21.2f} {measured / 1e3:>24.2f} {100 * (pred / measured - 1):>+6.1f}%", flush=True)


if __name__ == "__main__":
    main()
