"""`make calibrate`: measure this host's peak fp32 FLOP/s and memory bandwidth, record them in host.yaml, then
fit the latency model (configs/latency_model.yaml) on micro-benchmarks run through ONNX Runtime.

Peak FLOP/s: a large fp32 matmul (torch, all cores), best of several. Bandwidth: a STREAM-style triad
a = b + s*c (one fused pass; 24 bytes moved per element, STREAM's counting) on arrays far larger than the
last-level cache, best of several. Only the lines marked `# (calibrated)` in the host file are rewritten;
every other hand edit stays.

Latency model (lib/latency/latency_model.py): single-op ONNX graphs (lib/latency/microbench.py) run with stage 01's ORT
settings and profiling code, costed with stage 02's code, and a per-op-class efficiency model fitted on
their kernel times; its error per class is printed on the training shapes and on held-out shapes never used
in the fit. `--skip-micro` does the peak/bandwidth part only (the old behaviour); `--quick` is a small
version for tests (~20 s; its figures are not meant to be used).

Another device (`make calibrate-device`): with --scheduler and --device-dir, the same command runs as a task of a
Dask cluster on the worker that offers --resources (a worker started on the device, from its project root), and
the device's host.yaml, latency_model.yaml and latency_kernel_model.txt come back into --device-dir.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import platform
import re
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from lib import cli
from lib.artifacts import CONFIGS, REPO, atomic_path, read_csv, write_csv
from lib.errors import StageError
from lib.host import load_host
from lib.latency import calibrate_kernels as ck
from lib.latency import host_reference
from lib.latency import latency_model as lm
from lib.latency import microbench as mb
from lib.latency.host_probe import cpu_description
from lib.latency.sweep import run_stages
from lib.onnx.export_models import export_encoder, export_torchvision
from lib.zoo.engines import calibrate_on, connect
from lib.zoo.remote import unzip_into


def measure_matmul(n: int = 2048, repeats: int = 5) -> float:
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best


def measure_triad(mib_per_array: int = 256, repeats: int = 5) -> float:
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    n = mib_per_array * 2 ** 20 // 8
    a, b, c = torch.empty(n, dtype=torch.float64), torch.rand(n, dtype=torch.float64), torch.rand(n, dtype=torch.float64)
    torch.add(b, c, alpha=3.0, out=a)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.add(b, c, alpha=3.0, out=a)
        best = min(best, time.perf_counter() - t0)
    return 3 * 8 * n / best


def _fmt(val) -> str:
    """YAML text of a value: strings quoted, ints as they are, floats in 4 digits with a decimal point (YAML
    reads 2e+10 as a string, 2.0e+10 as a number)."""
    if val is None:
        return "null"
    if isinstance(val, str):
        return f'"{val}"'
    if isinstance(val, int):
        return f"{val}"
    text = f"{val:.4g}"
    mant, e, exp = text.partition("e")
    return f"{mant}.0e{exp}" if e and "." not in mant else text


def update_host_file(path: Path, values: dict) -> None:
    """Rewrite `key: value  # (calibrated)` lines in place, keeping comments and every other line. A key
    `section.name` is the first `name:` line after the `section:` line; strings are written quoted."""
    text = path.read_text()
    for key, val in values.items():
        section, _, name = key.rpartition(".")
        start = 0
        if section:
            m = re.search(rf"^{re.escape(section)}:\s*$", text, re.M)
            start = m.end() if m else len(text)
        pat = re.compile(rf"^(\s*{re.escape(name)}:\s*)([^#\n]*?)(\s*#\s*\(calibrated\).*)$", re.M)
        m = pat.search(text, start)
        if not m:
            raise SystemExit(f"error: {path} has no '{key}: ...  # (calibrated)' line to update")
        text = text[:m.start()] + f"{m.group(1)}{_fmt(val)}{m.group(3)}" + text[m.end():]
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = re.sub(r"^calibrated_at:.*$", f"calibrated_at: {stamp}", text, flags=re.M)
    with atomic_path(path) as tmp:
        tmp.write_text(text)


TARGETS = {"cpu": "cpu_us", "q25": "q25_us", "median": "latency_us", "p10": "p10_us", "min": "min_us"}


def _host_description() -> dict:
    return {"hostname": platform.node(), "cpu": cpu_description()["model"], "cores": os.cpu_count()}


def _saved_bench(bench_csv: str, threads: int):
    """(table, dispatch, threads) of a micro-benchmark table written by --save-bench (--fit-only)."""
    try:
        bench = pd.read_csv(bench_csv)
    except (OSError, ValueError) as e:
        raise StageError(f"--fit-only {bench_csv}: not a readable micro-benchmark table ({type(e).__name__}); "
                         f"write one with --save-bench") from None
    missing = [c for c in ("node", "op_type", "op_class", "flops", "attribution", "split") if c not in bench]
    if missing:
        raise StageError(f"--fit-only {bench_csv} lacks columns {missing}: write it with --save-bench")
    dispatch = {"fixed_us": 0.0, "per_kernel_us": 0.0}
    if "dispatch_fixed_us" in bench:
        dispatch = {"fixed_us": float(bench["dispatch_fixed_us"].iloc[0]),
                    "per_kernel_us": float(bench["dispatch_per_kernel_us"].iloc[0])}
    if "threads" in bench:
        threads = int(bench["threads"].iloc[0])
    print(f"fitting on the saved micro-benchmarks {bench_csv} ({len(bench)} rows, threads={threads or 'all'})")
    return bench, dispatch, threads


def _measured_bench(quick: bool, budget_s: float, threads: int, passes: int, save_bench: str | None,
                    after_pass=None):
    """(table, dispatch) of the micro-benchmarks run now (`passes` times, each node's best; after_pass(k) runs
    after pass k) and ORT's dispatch cost; the table also written to `save_bench` when given."""
    # not the subnormal cases: the efficiency model has no term for values (a conv there ran 100x its shape's time)
    cases = [c for c in mb.cases(quick=quick) if "subnormal" not in c.label]
    n_tr = sum(c.split == "train" for c in cases)
    print(f"micro-benchmarks through ONNX Runtime: {len(cases)} single-op cases ({n_tr} training, "
          f"{len(cases) - n_tr} held-out), threads={threads or 'all'} ...", flush=True)
    tables = []
    for k in range(passes):
        if passes > 1:
            print(f"  pass {k + 1}/{passes}", flush=True)
        tables.append(mb.run_cases(cases, threads=threads, budget_s=budget_s, min_runs=3 if quick else 5,
                                   max_runs=8 if quick else 40))
        if after_pass is not None:
            after_pass(k)
    bench = mb.combine_passes(tables)
    dispatch = mb.measure_dispatch(threads=threads, lengths=(1, 32) if quick else (1, 64, 256),
                                   runs=10 if quick else 30)
    bench["dispatch_fixed_us"] = dispatch["fixed_us"]
    bench["dispatch_per_kernel_us"] = dispatch["per_kernel_us"]
    print(f"  ORT dispatch outside kernels: {dispatch['per_kernel_us']:.2f} us per kernel + "
          f"{dispatch['fixed_us']:.1f} us per run")
    if save_bench:
        write_csv(bench, Path(save_bench))
        print(f"  raw micro-benchmark table: {save_bench}")
    return bench, dispatch


def _model_meta(host: dict, bench, report: dict, *, target: str, threads: int, quick: bool,
                bench_csv: str | None, wall_bench: float) -> dict:
    """What the latency model file records besides the parameters: host, versions, timing, fit errors."""
    import onnxruntime
    peaks, bw = host["peak_flops_per_s"], float(host["mem_bw_bytes_per_s"])
    return {
        "host": {"name": host.get("name", ""), **_host_description()},
        "calibrated_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "onnxruntime": onnxruntime.__version__,
        "threads": threads or f"all ({os.cpu_count()}, ORT's default as in stage 01)",
        "opt_level": "all (ORT_ENABLE_ALL, stage 01's default)",
        "timing": f"ORT profiler kernel time through stage 01's attribution; target {target}: " + (
            "median over the runs of the kernel time x the run's CPU share (calling thread CPU time / wall "
            "time): the time with the cores to itself, on a machine shared with other work" if target == "cpu"
            else f"the {target} of the runs"),
        "quick": bool(quick),
        "fitted_against": {"peak_flops_per_s": {k: float(v) for k, v in peaks.items()},
                           "mem_bw_bytes_per_s": bw},
        "micro_benchmarks": {"source": str(bench_csv) if bench_csv else "measured by this run",
                             "rows": int(len(bench)),
                             "passes": int(bench["passes"].iloc[0]) if "passes" in bench else 1,
                             "train_rows": int(report.get("all", {}).get("train", {}).get("n", 0)),
                             "heldout_rows": int(report.get("all", {}).get("heldout", {}).get("n", 0)),
                             "wall_s": round(wall_bench, 1)},
        "fit_errors": {"all": report.get("all", {}), "by_class": report["by_class"]},
    }


def _warn_faster_than_peak(model) -> None:
    fast = sorted(k for k, p in model.params.items()
                  if p["e_max"] > 1.5 and k.split("/")[0].split("@")[0] in ("conv", "gemm", "matmul"))
    if fast:
        print(f"warning: {', '.join(fast)} compute faster than the host's peak FLOP/s (e_max > 1.5): the peak was "
              f"under-measured (other work on the cores?). Predictions for this host stay right (the efficiencies "
              f"are relative to the same figure); for another device re-measure the host's peak when it is idle.")


def calibrate_latency_model(host: dict, out: Path | None, *, quick: bool = False, budget_s: float = 80.0,
                            target: str = "cpu", threads: int = 0, save_bench: str | None = None,
                            bench_csv: str | None = None, passes: int = 1, in_model: bool = True) -> tuple[dict, dict]:
    """Micro-benchmarks (or a saved table of them) -> fitted latency model; writes `out` unless None.
    Returns (the YAML document, the fit report)."""
    peaks, bw = host["peak_flops_per_s"], float(host["mem_bw_bytes_per_s"])
    t0 = time.perf_counter()
    with InModelRuns(threads) if in_model else contextlib.nullcontext() as whole:
        if bench_csv:
            bench, dispatch, threads = _saved_bench(bench_csv, threads)
            if whole is not None:
                whole.round()
        else:   # a round of the whole models after each pass: both see the same spells of a shared machine
            bench, dispatch = _measured_bench(quick, budget_s, threads, passes, save_bench,
                                              after_pass=whole.round if whole is not None else None)
        col = TARGETS[target]
        if col not in bench:
            raise StageError(f"the micro-benchmark table has no {col} column (re-measure)")
        bench["t_fit_us"] = bench[col]
        wall_bench = time.perf_counter() - t0
        model, report = lm.fit(bench, peaks, bw, dispatch={k: dispatch[k] for k in ("fixed_us", "per_kernel_us")})
        if whole is not None:
            model.in_model = whole.factors(model, host)
    doc = lm.model_document(model, _model_meta(host, bench, report, target=target, threads=threads, quick=quick,
                                               bench_csv=bench_csv, wall_bench=wall_bench))
    print_report(report)
    _warn_faster_than_peak(model)
    if out is not None:
        lm.dump_yaml(doc, out, HEADER)
        print(f"wrote {out}")
    return doc, report


# never the models the prediction is checked on; small CNN kernels and transformer MatMuls from 8 MFLOP (the
# 256-wide encoder) to 4 GFLOP (the 1024-wide one): the in-model correction is pooled over the sizes real models have
CALIBRATION_MODELS = ["squeezenet1_1", "mnasnet0_5", "regnet_y_400mf", "torch-encoder", "torch-encoder-wide"]
ENCODERS = {"torch-encoder": {}, "torch-encoder-wide": {"hidden": 1024, "layers": 2, "heads": 16, "seq": 256}}


class InModelRuns:
    """Whole models other than those the prediction is checked on (bench/predict_vs_measured.py): stage 02 on
    each once, then rounds of stage 01 over all of them (calibration runs one after each micro-benchmark pass),
    each node's best round kept, as the micro-benchmarks keep their best pass; then per op class measured /
    predicted kernel time (lib.latency.latency_model.in_model_factors)."""

    def __init__(self, threads: int):
        self.threads, self.latency = threads, {name: [] for name in CALIBRATION_MODELS}

    def __enter__(self):
        self._tmp = tempfile.TemporaryDirectory(prefix="calib_")
        self.paths = {}
        for name in CALIBRATION_MODELS:
            path = self.paths[name] = REPO / "models" / "calib" / f"{name}.onnx"
            if not path.exists():
                print(f"building calibration model {name} (random weights) ...", flush=True)
                export_encoder(path, **ENCODERS[name]) if name in ENCODERS else export_torchvision(name, path)
            run_stages(path, f"{self._tmp.name}/{name}", [], profile=False)
        return self

    def __exit__(self, *exc):
        self._tmp.cleanup()

    def round(self, k: int = 0) -> None:
        for name in CALIBRATION_MODELS:
            run_stages(self.paths[name], f"{self._tmp.name}/{name}", [], runs=10, threads=self.threads, costs=False,
                       profile_args=("--sessions", "1", "--no-host-reference"))     # the baseline's own protocol
            self.latency[name].append(read_csv(f"{self._tmp.name}/{name}", "ops_latency.csv", ("node", "latency_us")))
        print(f"  whole calibration models, round {len(self.latency[CALIBRATION_MODELS[0]])}: "
              f"{', '.join(CALIBRATION_MODELS)}", flush=True)

    def factors(self, model, host: dict) -> dict[str, float]:
        runs = []
        for name in CALIBRATION_MODELS:
            lat = self.latency[name][0].copy()
            best = pd.concat([t.set_index("node")["latency_us"] for t in self.latency[name]], axis=1).min(axis=1)
            lat["latency_us"] = lat["node"].map(best)
            runs.append((read_csv(f"{self._tmp.name}/{name}", "ops_metrics.csv", ("node", "op_type", "flops")), lat))
        factors = lm.in_model_factors(model, runs, host)
        print("in-model factors (whole-model / micro-benchmark time, per op class): "
              + ", ".join(f"{k} {v:.2f}" for k, v in sorted(factors.items())))
        return factors


HEADER = """\
# Latency model of this host, written by `make calibrate` (python -m lib.latency.calibrate); see lib/latency/latency_model.py.
# Per node:  t_us = overhead_us + max(F / (P * e(F)), B / (W * m)),   e(F) = e_max / (1 + (f_half / F)^gamma)
#   F = FLOPs, B = bytes moved (stage 02's ops_metrics.csv), P = peak FLOP/s of the node's element type,
#   W = memory bandwidth (the device's: host.yaml here, a device of system.yaml for another one).
# A node uses the most specific key below: <class>/<op_type>+fused (a node other nodes are fused into: ORT runs
# its fused kernel), <class>/<op_type>, <class>@int8, <class>, fallback[class], default.
# Session latency = sum over nodes that run (fused and removed ones: 0) of t_us + dispatch.per_kernel_us,
# plus dispatch.fixed_us. fit_error: |predicted/measured - 1| on micro-benchmark shapes (train / held-out).
# A device profile for another device is a file of the same format.
"""


def print_report(report: dict) -> None:
    def f(d):
        return f"{d['n']:>4} {100 * d['median']:>6.1f}% {100 * d['worst']:>7.1f}%" if d.get("n") else f"{0:>4} {'-':>7} {'-':>8}"
    print(f"{'class':<22} {'train: n  median   worst':>25}   {'held-out: n  median   worst':>28}")
    for c in sorted(report["by_class"]):
        v = report["by_class"][c]
        print(f"{c:<22} {f(v.get('train', {})):>25}   {f(v.get('heldout', {})):>28}")
    a = report.get("all", {})
    print(f"{'all':<22} {f(a.get('train', {})):>25}   {f(a.get('heldout', {})):>28}")
    for name in ("heldout",):
        for w in report.get("worst", {}).get(name, [])[:3]:
            print(f"  worst {name}: {w['label']} ({w['key']}): measured {w['measured_us']} us, off by {100 * w['err']:.0f}%")


def _parser():
    p = cli.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default=str(CONFIGS / "host.yaml"), help="host file to update (default: %(default)s)")
    p.add_argument("--system", metavar="YAML",
                   help="a split system whose device A is this host: its lines marked (calibrated) are updated too "
                        "(make calibrate passes configs/system.yaml)")
    p.add_argument("--matmul-n", type=int, default=None, help="matrix size of the fp32 matmul (default 2048; 1024 with --quick)")
    p.add_argument("--triad-mib", type=int, default=None,
                   help="MiB per triad array (default 256, far above any LLC; 64 with --quick)")
    p.add_argument("--dry-run", action="store_true", help="measure and print, do not write")
    p.add_argument("--skip-micro", action="store_true",
                   help="peak FLOP/s and bandwidth only (the old behaviour): no micro-benchmarks, no latency model")
    p.add_argument("--quick", action="store_true", help="a few small micro-benchmarks (~20 s; for tests, not for use)")
    p.add_argument("--out", default=str(CONFIGS / "latency_model.yaml"),
                   help="latency model file to write (default: %(default)s)")
    p.add_argument("--budget-s", type=float, default=None,
                   help="seconds of measured micro-benchmark runs, spread over the cases (default 80; 6 with --quick)")
    p.add_argument("--passes", type=int, default=None,
                   help="measure every case this many times, at different moments, and keep each node's best; the "
                        "whole calibration models run one round after each pass, each node's best kept (default 3, "
                        "as a shared machine's speed drifts within minutes; 1 with --quick)")
    p.add_argument("--target", choices=sorted(TARGETS), default="cpu",
                   help="which statistic of a node's runs the fit targets (default cpu: kernel time scaled by the "
                        "run's CPU share, robust to other work on the cores; median: plain median)")
    p.add_argument("--threads", type=int, default=0, help="ORT intra-op threads; 0 = ORT's default, all cores (as stage 01)")
    p.add_argument("--skip-in-model", action="store_true",
                   help="no whole-model correction (its calibration models: " + ", ".join(CALIBRATION_MODELS) + ")")
    p.add_argument("--save-bench", metavar="CSV", help="also write the raw micro-benchmark table here")
    p.add_argument("--fit-only", metavar="CSV", help="no measurement at all: refit from a table saved with --save-bench, "
                   "against the host file's peaks")
    p.add_argument("--skip-baseline", action="store_true",
                   help="no efficiency model (the explainable baseline): the kernel model only")
    p.add_argument("--skip-kernel-model", action="store_true",
                   help="no kernel model (host probe, training models, leave-one-family-out, LightGBM fit)")
    g = p.add_argument_group("another device, through a Dask worker running on it (make calibrate-device)")
    g.add_argument("--scheduler", metavar="ADDR", help="run the calibration as a task of this Dask scheduler, on a "
                   "worker offering --resources, and write what it made into --device-dir (this host's files and "
                   "system.yaml are not touched)")
    g.add_argument("--device-dir", metavar="DIR", help="with --scheduler: where the device's host.yaml, "
                   "latency_model.yaml and latency_kernel_model.txt go (name DIR/latency_model.yaml as the device's "
                   "latency_model: in configs/system.yaml)")
    g.add_argument("--resources", default="host_cpu=1", metavar="K=V[,K=V]",
                   help="the worker resources that select the device (default: %(default)s)")
    g.add_argument("--work-root", default="results/.zoo-work", metavar="DIR",
                   help="where the worker calibrates, relative to its project root (default: %(default)s)")
    return p


DEVICE_FILES = ("host.yaml", "latency_model.yaml", ck.KERNEL_MODEL_FILE)


def resources_of(text: str) -> dict[str, float]:
    """'npu=1,host_cpu=1' -> {'npu': 1.0, 'host_cpu': 1.0}; anything else a one-line StageError."""
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        k, sep, v = item.partition("=")
        try:
            out[k.strip()] = float(v)
        except ValueError:
            sep = ""
        if not sep or not k.strip():
            raise StageError(f"--resources {text!r}: expected NAME=NUMBER[,NAME=NUMBER], e.g. npu=1")
    if not out:
        raise StageError("--resources is empty: name the device's worker resource, e.g. npu=1")
    return out


def on_device(a) -> None:
    """--scheduler: the calibration on the Dask worker that offers --resources; its files into --device-dir."""
    resources = resources_of(a.resources)
    passed = [f for f, on in (("--quick", a.quick), ("--skip-baseline", a.skip_baseline),
                              ("--skip-kernel-model", a.skip_kernel_model)) if on]
    print(f"calibrating on a Dask worker of {a.scheduler} offering {a.resources} ...", flush=True)
    client = connect(a.scheduler)
    try:
        rec = calibrate_on(client, resources, a.work_root, passed)
    finally:
        client.close()
    if rec["rc"] != 0:
        raise StageError(f"the calibration on {rec['host']} failed: {rec['error']}")
    out = Path(a.device_dir)
    out.mkdir(parents=True, exist_ok=True)
    unzip_into(rec["zip"], out)
    print(f"calibrated {rec['host']} in {rec['seconds']:.0f} s: wrote {', '.join(DEVICE_FILES)} and calibrate.log "
          f"into {out}; name {out / 'latency_model.yaml'} as the device's latency_model: in configs/system.yaml")


def main(argv=None):
    a = _parser().parse_args(argv)
    t_start = time.perf_counter()
    if bool(a.scheduler) != bool(a.device_dir):
        raise StageError("--scheduler and --device-dir go together: the device's worker, and where its files go")
    if a.scheduler:
        return on_device(a)
    if not Path(a.host).exists():
        raise StageError(f"host file {a.host} not found (restore configs/host.yaml from git)")
    if a.system and not Path(a.system).exists():
        raise StageError(f"--system {a.system} not found")
    if a.passes is not None and a.passes < 1:
        raise StageError("--passes must be >= 1")
    previous = load_host(a.host)      # before step 1 rewrites its fp32 peak: what best_of_before compares with
    matmul_n = a.matmul_n or (1024 if a.quick else 2048)
    triad_mib = a.triad_mib or (64 if a.quick else 256)
    if a.fit_only:
        calibrate_latency_model(load_host(a.host), None if a.dry_run else Path(a.out), target=a.target,
                                bench_csv=a.fit_only, in_model=False)
        return
    print(f"measuring fp32 matmul {matmul_n}x{matmul_n} on {os.cpu_count()} cores ...", flush=True)
    flops = measure_matmul(matmul_n)
    print(f"  peak fp32: {flops / 1e9:.1f} GFLOP/s")
    print(f"measuring STREAM triad on 3 x {triad_mib} MiB arrays ...", flush=True)
    bw = measure_triad(triad_mib)
    print(f"  bandwidth: {bw / 1e9:.1f} GB/s")
    if not a.dry_run:
        update_host_file(Path(a.host), {"float": flops, "default": flops, "mem_bw_bytes_per_s": bw})
        print(f"updated {a.host} (lines marked '# (calibrated)'; other hand edits kept)")
        if a.system:   # device A of the split system is this host
            update_host_file(Path(a.system), {"peak_flops_per_s": flops, "mem_bw_bytes_per_s": bw})
            print(f"updated device A in {a.system} (its lines marked '# (calibrated)')")
    if a.skip_micro:
        return
    host = load_host(a.host)
    if a.dry_run:   # the figures just measured, as the host file would have them
        host["peak_flops_per_s"] = {**host["peak_flops_per_s"], "float": flops, "default": flops}
        host["mem_bw_bytes_per_s"] = bw
    t0 = time.perf_counter()
    if not a.skip_baseline:
        calibrate_latency_model(host, None if a.dry_run else Path(a.out), quick=a.quick,
                                budget_s=a.budget_s if a.budget_s is not None else (6.0 if a.quick else 80.0),
                                target=a.target, threads=a.threads, save_bench=a.save_bench,
                                passes=a.passes if a.passes is not None else (1 if a.quick else 3),
                                in_model=not (a.quick or a.skip_in_model))
        print(f"[baseline efficiency model] {time.perf_counter() - t0:.1f} s", flush=True)
    if not a.skip_kernel_model:
        kernel_step(a, host, previous)
    print(f"make calibrate: {time.perf_counter() - t_start:.0f} s in all", flush=True)


def kernel_step(a, host: dict, previous: dict) -> None:
    """The kernel model (lib/latency/calibrate_kernels.py): host probe, training models, LOFO, fit; host.yaml's
    calibrated lines and the latency model file's kernel_model section written."""
    res = ck.calibrate_kernels(host, quick=a.quick, threads=a.threads, before=previous)
    spell = host_reference.against_previous(res["records"], a.out)
    if spell:
        print(f"warning: {spell}")
    for k, (old, new) in res["raised"].items():
        print(f"  {k} raised to what a kernel reached: {old:.4g} -> {new:.4g}")
    for k, (now, kept) in res["kept"].items():
        print(f"  {k} kept at the previous calibration's {kept:.4g} on this CPU (measured {now:.4g} now)")
    if a.dry_run:
        return
    update_host_file(Path(a.host), ck.host_values(res["host"]))
    print(f"updated {a.host}: CPU, caches, peaks per dtype, bandwidth per memory level")
    if a.system:    # device A is this host: its fp32 peak as host.yaml's (step 1's matmul figure stayed: 186 GFLOP/s
        # on the report's what-if panel beside 263 in its summary)
        update_host_file(Path(a.system), {"peak_flops_per_s": float(res["host"]["peak_flops_per_s"]["float"])})
        print(f"updated device A's peak in {a.system}")
    ck.write_kernel_model(res, Path(a.out), HEADER)
    print(f"wrote the kernel model into {a.out} (kernel_model) and {Path(a.out).parent / ck.KERNEL_MODEL_FILE}")


if __name__ == "__main__":
    cli.run(main)
