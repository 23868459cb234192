"""Helpers: tiny onnx.helper graphs, running stage scripts as a user would, torchvision exports."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

REPO = Path(__file__).resolve().parent.parent


def tensor(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def weight(name, shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array(rng.standard_normal(shape).astype(dtype), name)


def make_model(nodes, inputs, outputs, initializers=(), opset=17, path=None):
    g = helper.make_graph(nodes, "tiny", inputs, outputs, initializer=list(initializers))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    if path is not None:
        onnx.save(m, str(path))
    return m


# Stage 01 in the tests: one session and no host reference unless a test names --sessions (test_host_reference
# does). The default 5 sessions, each followed by the 4 reference models, cost ~9 s per call on 2 cores, and the
# tests make ~60 such calls. make (test_make, the zoo) reads the same from the environment.
QUICK_PROFILE = ("--sessions", "1", "--no-host-reference")
os.environ.setdefault("PROFILE_ARGS", " ".join(QUICK_PROFILE))


def run_stage(script, *args, cwd=REPO, env=None):
    """Run a stage script in a subprocess; returns CompletedProcess with text stdout/stderr. env: variables set
    on top of this process's environment."""
    if script == "01_profile_onnx.py" and "--sessions" not in map(str, args):
        args = (*args, *QUICK_PROFILE)
    return subprocess.run([sys.executable, str(REPO / script), *map(str, args)], cwd=cwd,
                          env=None if env is None else {**os.environ, **env},
                          capture_output=True, text=True, timeout=600)


def system_yaml(path, a_model=None, **ranking):
    """A two-device system of the tests' own (not the shipped configs/system.yaml): A and B plain rooflines
    unless `a_model` names a latency model file for A."""
    import yaml
    a = {"name": "A", "source": "model", "peak_flops_per_s": 2e11, "mem_bw_bytes_per_s": 2e10, "power_w": 10.0}
    if a_model:
        a["latency_model"] = str(a_model)
    doc = {"devices": {"A": a, "B": {"name": "B", "source": "model", "peak_flops_per_s": 4e12,
                                     "mem_bw_bytes_per_s": 1e10, "power_w": 2.0}},
           "link": {"bandwidth_bytes_per_s": 1e9, "latency_us": 10.0, "energy_per_byte_j": 1e-10},
           "constraints": {}, "ranking": {"by": "score", "top_k": 10, "min_compute_share": 0.05, "dedup_window": 3,
                                          "skip_block_min_span": 4, "skip_block_max_share": 0.25,
                                          "weights": {"comm": 1.0, "imbalance": 1.0, "latency": 0.5}, **ranking}}
    Path(path).write_text(yaml.safe_dump(doc))
    return path


def latency_model_copy(folder, kernel_model: bool = True):
    """configs/latency_model.yaml copied into folder: with its kernel model (the LightGBM file beside it, its
    host figures those of configs/host.yaml, which 03 predicts this host with), or without (a device file of the
    efficiency model only)."""
    import shutil
    import yaml
    from lib.host import load_host
    from lib.latency.kernel_model import HOST_FIGURES
    doc = yaml.safe_load((REPO / "configs" / "latency_model.yaml").read_text())
    if kernel_model:
        shutil.copy(REPO / "configs" / doc["kernel_model"]["file"], Path(folder) / doc["kernel_model"]["file"])
        host = load_host(REPO / "configs" / "host.yaml")
        doc["kernel_model"]["host"] = {k: host[k] for k in HOST_FIGURES if k in host}
    else:
        doc.pop("kernel_model", None)
    out = Path(folder) / "latency_model.yaml"
    out.write_text(yaml.safe_dump(doc))
    return out


def costs(model, rdir, *args):
    """Stages 02 and 03 (roofline only) on a model: what 04-10 need first."""
    for stage, extra in (("02_shapes_flops_bytes.py", ["--model", model, *args]), ("03_merge_profile_metrics.py", [])):
        r = run_stage(stage, *extra, "--results", rdir)
        assert r.returncode == 0, f"{stage}: {r.stderr}"


def small_cnn(path):
    """Conv -> BN -> Relu -> Conv -> Add(skip) -> Relu -> GlobalAveragePool -> Flatten -> Gemm."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "s", "bb", "m", "v"], ["n1"], name="bn1"),
        helper.make_node("Relu", ["n1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a"], name="add"),
        helper.make_node("Relu", ["a"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"], name="gap"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], name="fc", transB=1),
    ]
    inits = [weight("w1", (16, 3, 3, 3)), weight("b1", (16,)), weight("s", (16,), seed=1),
             weight("bb", (16,), seed=2), weight("m", (16,), seed=3),
             numpy_helper.from_array(np.ones(16, np.float32), "v"),
             weight("w2", (16, 16, 3, 3), seed=4), weight("wf", (10, 16), seed=5), weight("bf", (10,), seed=6)]
    return make_model(nodes, [tensor("x", [1, 3, 32, 32])], [tensor("y", [1, 10])], inits, path=path)


@pytest.fixture(scope="session")
def tv_models(tmp_path_factory):
    """torchvision exports, built once per session (random weights, nothing downloaded)."""
    from lib.onnx.export_models import export_torchvision
    cache = Path(os.environ.get("TV_MODEL_CACHE", tmp_path_factory.mktemp("tv")))
    built = {}

    def get(name):
        if name not in built:
            path = cache / f"{name}.onnx"
            if not path.exists():
                export_torchvision(name, path)
            built[name] = path
        return built[name]
    return get


def bert_style(path):
    """A small BERT-style encoder (embedding, 2 pre-LN-free encoder layers with GELU, pooled head), exported
    by the dynamo exporter: Gather, MatMul, Softmax, LayerNormalization, Erf, Reshape/Transpose ..."""
    import warnings

    import torch
    from torch import nn

    class Bert(nn.Module):
        def __init__(self, vocab=1000, d=64, heads=4, layers=2):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.pos = nn.Parameter(torch.randn(1, 16, d) * 0.02)
            layer = nn.TransformerEncoderLayer(d, heads, 4 * d, activation="gelu", batch_first=True, dropout=0.0)
            self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(d)
            self.head = nn.Linear(d, 2)

        def forward(self, ids):
            return self.head(self.norm(self.enc(self.emb(ids) + self.pos))[:, 0])

    torch.manual_seed(0)
    torch.backends.mha.set_fastpath_enabled(False)
    with warnings.catch_warnings(), open(os.devnull, "w") as devnull:
        warnings.simplefilter("ignore")
        stdout, sys.stdout = sys.stdout, devnull
        try:
            prog = torch.onnx.export(Bert().eval(), (torch.randint(0, 1000, (1, 16)),), dynamo=True, opset_version=18,
                                     input_names=["input_ids"], output_names=["logits"])
        finally:
            sys.stdout = stdout
    prog.save(str(path))
    return path
