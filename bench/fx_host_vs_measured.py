#!/usr/bin/env python3
"""Stage 09's host-profile latency prediction against stage 01's ORT measurement, for torchvision models.

    .venv/bin/python bench/fx_host_vs_measured.py [--models resnet50 resnet18 mobilenet_v2] [--runs 20] [--record]
"""
import json

from _models import REPO, Printed, ensure_model, parser, run_stage


def main():
    p = parser(__doc__, ["resnet50", "resnet18", "mobilenet_v2"], recorded=True)
    p.add_argument("--runs", type=int, default=20)
    a = p.parse_args()
    out = Printed()
    out(f"{'model':<16} {'09 host predicted ms':>21} {'01 measured ms (median)':>24} {'error':>7}")
    for name in a.models:
        model = ensure_model(name)
        run_stage("01_profile_onnx.py", "--model", model, "--runs", a.runs)
        run_stage("09_fx_partition.py", "--model", name)
        measured = json.loads((REPO / "results" / name / "profile_meta.json").read_text())["session_latency"]["median_us"]
        import pandas as pd
        hw = pd.read_csv(REPO / "results" / name / "fx_hardware.csv")
        pred = hw[(hw["hardware"] == "host") & (hw["point"] == "batch1")]["latency_us"].iat[0]
        out(f"{name:<16} {pred / 1e3:>21.2f} {measured / 1e3:>24.2f} {100 * (pred / measured - 1):>+6.1f}%")
    out.record("fx_host_vs_measured", a.record)


if __name__ == "__main__":
    main()
