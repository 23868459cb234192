#!/usr/bin/env python3
"""What a stage costs before it does any work: each stage of `make all` run on a two-node model (a Conv and a
Relu), median wall time over the repeats; for the stages that reach lib.latency.kernel_model, also as they ran
before its start-up changes: LightGBM imported up front, with its scikit-learn API (which imports scikit-learn and
scipy.stats), and scipy.optimize (kernel_model's `_lightgbm()` imports LightGBM only where a model is fitted or
loaded, and in a stage process without scikit-learn; 08 needs no kernel model, 03 and 07 load one).

    .venv/bin/python bench/stage_startup.py [--repeats 5] [--record]

On a tiny model a stage's time is its start-up (Python, onnx, onnxruntime, pandas, matplotlib): what the test
suite and a zoo of small models pay once per stage and model.
"""
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from _models import REPO, Printed, parser, refuse

sys.path.insert(0, str(REPO))

STAGES = [  # (script, its arguments after --model/--results), in `make all` order
    ("02_shapes_flops_bytes.py", ["--workload", "configs/workload.yaml"]),
    ("01_profile_onnx.py", ["--workload", "configs/workload.yaml", "--runs", "1", "--sessions", "1",
                            "--no-host-reference"]),  # one session: its start-up, not its measuring
    ("03_merge_profile_metrics.py", ["--host", "configs/host.yaml", "--latency-model", "configs/latency_model.yaml"]),
    ("04_critical_path.py", []),
    ("05_energy_estimate.py", ["--host", "configs/host.yaml", "--offload", "configs/offload.yaml"]),
    ("07_split_candidates.py", ["--system", "configs/system.yaml", "--workload", "configs/workload.yaml"]),
    ("06_plots.py", ["--host", "configs/host.yaml"]),
    ("08_export_splits.py", ["--workload", "configs/workload.yaml", "--top-k", "1"]),
    ("11_report.py", []),
]
EAGER = "import lightgbm, scipy.optimize, runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"


def tiny(path: Path) -> None:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                           helper.make_node("Relu", ["c"], ["y"], name="relu")], "tiny",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9), str(path))


def timed(cmd: list[str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if r.returncode:
        refuse(f"{' '.join(cmd[-8:])} failed: {(r.stderr.strip().splitlines() or ['?'])[-1]}")
    return time.perf_counter() - t0, r.stderr


def reaches_kernel_model(args: list[str]) -> bool:
    return "lib.latency.kernel_model" in timed([sys.executable, "-X", "importtime", *args])[1]


def main():
    p = parser(__doc__, recorded=True)
    p.add_argument("--repeats", type=int, default=5, help="runs of each stage per variant (default 5)")
    a = p.parse_args()
    if a.repeats < 1:
        refuse("--repeats must be 1 or more")
    out = Printed()
    with tempfile.TemporaryDirectory() as d:
        model, rdir = Path(d) / "tiny.onnx", Path(d) / "r"
        tiny(model)
        rows = []
        for script, extra in STAGES:
            args = [script, *(["--model", str(model)] if script != "06_plots.py" else []), "--results", str(rdir), *extra]
            eager = reaches_kernel_model(args)
            lazy_t, eager_t = [], []
            for _ in range(a.repeats):         # interleaved: a slow spell lands on both variants
                lazy_t.append(timed([sys.executable, *args])[0])
                if eager:
                    eager_t.append(timed([sys.executable, "-c", EAGER, *args])[0])
            rows.append((script, float(np.median(lazy_t)), float(np.median(eager_t)) if eager else None))
            print(f"  {script}: done", file=sys.stderr, flush=True)
    out(f"a 2-node model (Conv, Relu), median of {a.repeats} runs per stage and variant, interleaved")
    out(f"{'stage':<30} {'as it runs s':>12} {'LightGBM+sklearn s':>20} {'saved':>6}")
    for script, lazy, eager in rows:
        out(f"{script:<30} {lazy:>12.2f} " + (f"{eager:>20.2f} {1 - lazy / eager:>6.0%}" if eager else f"{'-':>20} {'-':>6}"))
    lazy, eager = sum(r[1] for r in rows), sum(r[2] or r[1] for r in rows)
    out(f"{'all stages':<30} {lazy:>12.2f} {eager:>20.2f} {1 - lazy / eager:>6.0%}")
    out.record("stage_startup", a.record)


if __name__ == "__main__":
    main()
