#!/usr/bin/env python3
"""A QDQ model's weight type, predicted vs measured: resnet18 quantized by ONNX Runtime's quantize_static with
int8 weights (a training model, resnet18_qdq) and with uint8 weights (resnet18_qdq_u8, never trained on).

    .venv/bin/python bench/qdq_weights.py [--rounds 9] [--record]

ORT runs a QDQ conv with uint8 weights as its u8u8 QLinearConv, with int8 weights as u8s8: two kernel types
(lib/onnx/metrics.py compute_dtype). Per model: the measured session latency (stage 01's profiling, `--rounds`
x 10 runs, median), the kernel model's prediction (configs/latency_model.yaml, stage 03's), and the prediction
with every uint8 kernel typed int8 (what the typing gave before). Run `make calibrate` first; on shared cores
the measured side moves +-30%.
"""
import sys

import numpy as np

from _models import REPO, calibrated_here, Printed, parser, refuse

sys.path.insert(0, str(REPO))

from lib.host import load_host  # noqa: E402
from lib.latency.calibrate_kernels import MODEL_ROUNDS, TRAIN_DIR  # noqa: E402
from lib.latency.kernel_model import load_kernel_model  # noqa: E402
from lib.latency.predict import kernel_prediction, optimized_graph  # noqa: E402
from lib.latency.profiling import profile_model  # noqa: E402
from lib.latency.training_models import build  # noqa: E402
from lib.onnx.loading import graph_of_path  # noqa: E402
from lib.onnx.metrics import node_metrics  # noqa: E402


def main():
    p = parser(__doc__, recorded=True)
    p.add_argument("--rounds", type=int, default=MODEL_ROUNDS,
                   help="profiled rounds of 10 runs per model (default %(default)s, as make calibrate)")
    a = p.parse_args()
    if a.rounds < 1:
        refuse("--rounds must be 1 or more")
    host = load_host(REPO / "configs" / "host.yaml")
    km = load_kernel_model(REPO / "configs" / "latency_model.yaml")
    if km is None:
        refuse("no kernel model in configs/latency_model.yaml: run make calibrate first")
    calibrated_here(a.record)
    out = Printed()
    out(f"{'model':18s} {'weights':7s} {'measured ms':>11s} {'predicted ms':>12s} {'error':>6s} {'typed int8 ms':>13s} {'error':>6s}")
    for name, weights in (("resnet18_qdq", "int8"), ("resnet18_qdq_u8", "uint8")):
        path = build(name, TRAIN_DIR)
        g = graph_of_path(path)
        metrics = node_metrics(g)
        opt = optimized_graph(path)
        pred = kernel_prediction(km, g, metrics, opt, host)["predicted_latency_us"]
        as_int8 = metrics.assign(compute_dtype=metrics["compute_dtype"].replace("uint8", "int8"))
        pred_i8 = kernel_prediction(km, g, as_int8, opt, host)["predicted_latency_us"]
        x = {g.graph_inputs[0]: np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}
        walls = [w for _ in range(a.rounds) for w in profile_model(str(path), x, runs=10, warmup=3, progress=False)["wall_us"]]
        meas = float(np.median(walls))
        out(f"{name:18s} {weights:7s} {meas / 1e3:11.2f} {pred / 1e3:12.2f} {pred / meas - 1:+6.0%} {pred_i8 / 1e3:13.2f} "
            f"{pred_i8 / meas - 1:+6.0%}")
    out.record("qdq_weights", a.record)


if __name__ == "__main__":
    main()
