#!/usr/bin/env python3
"""Export and validate the top-5 split boundaries of several torchvision models; print the worst difference.

    .venv/bin/python bench/split_validation.py [--models resnet50 mobilenet_v2 efficientnet_b0 vit_b_16] [--top-k 5] [--record]

Models are built into models/ when missing (random weights). Runs stages 02, 03, 07 and 08 into results/<model>/.
"""
import json
import time

from _models import REPO, Printed, ensure_model, parser, run_stage


def main():
    p = parser(__doc__, ["resnet50", "mobilenet_v2", "efficientnet_b0", "vit_b_16"], recorded=True)
    p.add_argument("--top-k", type=int, default=5)
    a = p.parse_args()
    out = Printed()
    out(f"{'model':<16} {'splits':>6} {'all pass':>8} {'worst max|diff|':>16} {'08 wall s':>10}")
    for name in a.models:
        model = ensure_model(name)
        for stage in ("02_shapes_flops_bytes.py", "03_merge_profile_metrics.py", "07_split_candidates.py"):
            run_stage(stage, "--model", model)
        t0 = time.perf_counter()
        r = run_stage("08_export_splits.py", "--model", model, "--top-k", a.top_k, "--runs", 3, "--diagram", "none",
                      check=False)
        wall = time.perf_counter() - t0
        if r.returncode not in (0, 1):
            out(f"{name:<16} failed: {r.stderr.strip().splitlines()[-1]}")
            continue
        rep = json.loads((REPO / "results" / name / "validation_report.json").read_text())
        out(f"{name:<16} {len(rep['splits']):>6} {str(rep['all_pass']):>8} {rep['worst_max_abs_diff']:>16.2e} {wall:>10.1f}")
    out.record("split_validation", a.record)


if __name__ == "__main__":
    main()
