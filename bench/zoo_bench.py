#!/usr/bin/env python3
"""make zoo over eight real models (audio, vision, text; shape overrides, a preset, a batch list, npz inputs):
the first and the second run (nothing changed) on the local engine and on a local Dask cluster of two
workers (a scheduler and two `dask worker --resources host_cpu=1` started from the project root, stopped by pid).

    .venv/bin/python bench/zoo_bench.py [--runs 5] [--record]

Models are built into models/zoo/ with random weights (nothing downloaded); results go to results/zoo-bench-local/
and results/zoo-bench-dask/ (each run from scratch: the folders are removed first).
"""
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import yaml

from _models import Printed, parser, REPO

sys.path.insert(0, str(REPO))
from lib.onnx.export_models import export_encoder, export_hf, export_torchvision  # noqa: E402
from lib.zoo.engines import stop_process_group  # noqa: E402
from tests import wild_models as wm  # noqa: E402

OUT = REPO / "models" / "zoo"


def _torchscript(module, args, path, names, dyn):
    import torch
    torch.onnx.export(module.eval(), args, str(path), dynamo=False, opset_version=17, input_names=names,
                      output_names=["y"], dynamic_axes=dyn)


def kws_m5(path):
    """Audio: an M5-style keyword spotter on the raw 16 kHz waveform (Conv1d stack), symbolic length."""
    from torch import nn
    import torch
    torch.manual_seed(0)
    layers, ch = [nn.Conv1d(1, 32, 80, stride=16), nn.BatchNorm1d(32), nn.ReLU(), nn.MaxPool1d(4)], 32
    for out in (32, 64, 64):
        layers += [nn.Conv1d(ch, out, 3), nn.BatchNorm1d(out), nn.ReLU(), nn.MaxPool1d(4)]
        ch = out
    net = nn.Sequential(*layers, nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(ch, 35))
    _torchscript(net, (torch.randn(1, 1, 16000),), path, ["audio"], {"audio": {0: "batch", 2: "samples"}})


def crnn_mel(path):
    """Audio: a CRNN on a log-mel spectrogram (Conv2d, then a GRU over time), symbolic frames."""
    from torch import nn
    import torch
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d((4, 1)),
                                      nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d((4, 1)))
            self.gru, self.head = nn.GRU(32 * 4, 64, batch_first=True), nn.Linear(64, 10)

        def forward(self, mel):
            x = self.conv(mel)                                  # B, 32, 4, T
            x = x.flatten(1, 2).transpose(1, 2)                 # B, T, 128
            return self.head(self.gru(x)[0][:, -1])

    _torchscript(Net(), (torch.randn(1, 1, 64, 101),), path, ["mel"], {"mel": {0: "batch", 3: "frames"}})


def build(name: str) -> tuple[Path, dict]:
    """The model (built once) and its zoo entry."""
    path = OUT / f"{name}.onnx"
    entry = {"model": str(path.relative_to(REPO))}
    npz = OUT / f"{name}.npz"
    if name == "kws_m5":
        entry["shape_override"] = "audio=1x1x16000"
    elif name == "crnn_mel":
        entry["inputs_npz"] = str(npz.relative_to(REPO))
    elif name == "mobilenet_v2":
        entry["batches"] = [1, 4]
    elif name == "squeezenet1_0":
        entry["shape_override"] = "input=2x3x224x224"
    elif name == "hf_bert":
        entry["preset"] = "llm-128"
    elif name == "kv_decoder":
        entry["inputs_npz"] = str(npz.relative_to(REPO))
    if not path.exists():
        OUT.mkdir(parents=True, exist_ok=True)
        if name in ("kws_m5", "crnn_mel"):
            globals()[name](path)
        elif name == "hf_bert":
            export_hf("bert", path, hidden=128, layers=2, heads=2)
        elif name == "torch_encoder":
            export_encoder(path, hidden=128, layers=2, heads=2)
        elif name == "kv_decoder":
            wm.build_kv_decoder(path)
        else:
            export_torchvision(name, path, dynamic_batch=name in ("mobilenet_v2", "squeezenet1_0"))
    if name == "crnn_mel" and not npz.exists():
        np.savez(npz, mel=np.random.default_rng(0).standard_normal((1, 1, 64, 101)).astype(np.float32))
    if name == "kv_decoder" and not npz.exists():
        np.savez(npz, **wm.decoder_feeds())
    return path, entry


MODELS = ["kws_m5", "crnn_mel", "mobilenet_v2", "resnet18", "squeezenet1_0", "hf_bert", "torch_encoder", "kv_decoder"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_cluster(logdir: Path) -> tuple[str, list[subprocess.Popen]]:
    """A scheduler and two workers (host_cpu=1 each) on 127.0.0.1, each in its own session (stopped by pid)."""
    dask = str(REPO / ".venv" / "bin" / "dask")
    port = free_port()
    addr = f"tcp://127.0.0.1:{port}"
    logdir.mkdir(parents=True, exist_ok=True)
    cmds = [["scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"]] + \
        [["worker", addr, "--resources", "host_cpu=1", "--nthreads", "1", "--no-dashboard"]] * 2
    procs = []
    for i, c in enumerate(cmds):
        procs.append(subprocess.Popen([dask, *c], cwd=REPO, stdout=open(logdir / f"dask{i}.log", "w"),
                                      stderr=subprocess.STDOUT, start_new_session=True))
        time.sleep(3 if i == 0 else 0)
    return addr, procs


def stop_cluster(procs: list[subprocess.Popen]) -> None:
    for p in reversed(procs):
        stop_process_group(p)


def run_zoo(zoo: Path, results: Path, runs: int, *extra: str) -> tuple[float, str, str]:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "zoo.py", "--zoo", str(zoo), "--results", str(results), "--runs", str(runs),
                        "--splits", "1", *extra], cwd=REPO, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"zoo.py failed ({r.returncode}): {r.stderr.strip().splitlines()[-1:]}")
    return time.perf_counter() - t0, r.stdout.strip().splitlines()[0], r.stdout


def main(argv=None):
    p = parser(__doc__, recorded=True)
    p.add_argument("--runs", type=int, default=5, help="profiling runs per entry (default: %(default)s)")
    a = p.parse_args(argv)
    out = Printed()
    entries = [build(m)[1] for m in MODELS]
    zoo = OUT / "zoo_bench.yaml"
    zoo.write_text(yaml.safe_dump({"models": entries}, sort_keys=False))
    out(f"zoo: {zoo.relative_to(REPO)}, {len(MODELS)} models, RUNS={a.runs} SPLITS=1: " + ", ".join(MODELS))
    out("| engine | run | wall s | rows |")
    out("| --- | --- | ---: | --- |")
    local, dask_root = REPO / "results" / "zoo-bench-local", REPO / "results" / "zoo-bench-dask"
    for d in (local, dask_root):
        shutil.rmtree(d, ignore_errors=True)
    failed = []
    for engine, root in (("local", local), ("dask", dask_root)):
        procs, extra = [], []
        if engine == "dask":
            addr, procs = start_cluster(root / "_logs")
            extra = ["--engine", "dask", "--scheduler", addr, "--work-root", str(root / "_work")]
        try:
            times = []
            for which in ("first", "second"):
                s, summary, text = run_zoo(zoo, root, a.runs, *extra)
                times.append(s)
                failed += [ln for ln in text.splitlines() if ln.strip().startswith("failed ")]
                out(f"| {engine} (2 {'workers' if engine == 'dask' else 'processes'}) | {which} | {s:.1f} | "
                    f"{summary.split(': ', 1)[1]} |")
            out(f"| {engine} | second / first | {times[1] / times[0]:.3f} | |")
        finally:
            stop_cluster(procs)
    for ln in failed:
        out(ln)
    out.record("zoo_bench", a.record)


if __name__ == "__main__":
    main()
