#!/usr/bin/env python3
"""Batch sweeps, predicted vs measured per batch (issue 30): ResNet-50 and a BERT encoder, batch 1-16.

    .venv/bin/python bench/batch_sweep.py [--models resnet50 hf-bert] [--batches 1 2 4 8 16] [--rounds 9] [--record]

Each model is built into models/ when missing (random weights: resnet50 with a symbolic batch, the dynamo
exporter; hf-bert from a Hugging Face config, 4 layers x 256, sequence 128) and swept by `make sweep`'s code
(lib/latency/sweep.py: stage 02 and stage 01 per batch, the batches measured in turn `--rounds` times, medians
kept; the prediction is 03's, the kernel model on ORT's optimized graph, never the batch's own kernel times).
Prints per batch the measured and predicted latency, the error, the interval, the host speed factor 01 measured
and the error at the calibration host's speed (the kernel model alone), the baseline's error, and per model the
worst error and whether every batch is within 10%. Run it on a quiet machine: the measured side moves +-30%
on shared cores. `--record` writes the table into bench/RESULTS.md.
"""
import sys
import time

from _models import REPO, calibrated_here, Printed, ensure_model, parser, refuse

sys.path.insert(0, str(REPO))

from lib.latency.calibrate_kernels import MODEL_ROUNDS  # noqa: E402
from lib.latency.sweep import sweep  # noqa: E402

MODELS = {  # name: (export_models arguments, sweep keyword arguments)
    "resnet50": (("--dynamic-batch",), {}),
    "hf-bert": ((), {"preset": "llm-128"}),
}


def main():
    p = parser(__doc__, models=list(MODELS), recorded=True)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    p.add_argument("--rounds", type=int, default=MODEL_ROUNDS,
                   help="each batch measured this many times in turn (default %(default)s, as make calibrate)")
    p.add_argument("--runs", type=int, default=10, help="stage 01 runs per batch and round (default 10)")
    a = p.parse_args()
    unknown = sorted(set(a.models) - set(MODELS))
    if unknown:
        refuse(f"unknown model(s) {', '.join(unknown)}; choose from {', '.join(MODELS)}")
    if min(a.batches + [a.rounds, a.runs]) < 1:
        refuse("--batches, --rounds and --runs must be 1 or more")
    calibrated_here(a.record)
    out = Printed()
    out(f"batches {a.batches}, {a.rounds} rounds x {a.runs} runs; prediction: stage 03's (kernel model)")
    out(f"{'model':<9} {'batch':>5} {'measured ms':>12} {'predicted ms':>13} {'error':>7} {'interval ms':>15} "
        f"{'host factor':>11} {'at calibration':>14} {'baseline error':>15}")
    verdicts = []
    for name in a.models:
        extra, kw = MODELS[name]
        path = ensure_model(name, REPO / "models" / f"sweep_{name}.onnx", *extra)
        t0 = time.perf_counter()
        df = sweep(path, a.batches, runs=a.runs, rounds=a.rounds, progress=False, uncontended=False, **kw)
        for r in df.itertuples():
            out(f"{name:<9} {r.batch:>5} {r.measured_us / 1e3:>12.2f} {r.predicted_us / 1e3:>13.2f} "
                f"{r.err_pct:>+6.1f}% {r.predicted_lo_us / 1e3:>7.2f}-{r.predicted_hi_us / 1e3:<7.2f} "
                f"{r.host_speed_factor:>11.3f} {100 * (r.calibration_host_us / r.measured_us - 1):>+13.1f}% "
                f"{r.baseline_err_pct:>+14.1f}%")
        worst = float(df["err_pct"].abs().max())
        verdicts.append(f"{name}: worst {worst:.1f}%, {int((df['err_pct'].abs() <= 10).sum())} of {len(df)} batches "
                        f"within 10% ({df['predicted_by'].iat[0]}), {time.perf_counter() - t0:.0f} s")
    for v in verdicts:
        out(v)
    out.record("batch_sweep", a.record)


if __name__ == "__main__":
    main()
