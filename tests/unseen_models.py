"""Small models of the classes issue 29 found in models nobody here had seen, built locally with random weights
(tests/wild_models.py's conventions: ``build_<class>(path) -> facts``; bench/corpus.py lists them too):

- gru_state: a GRU whose zero initial state is an input, with an npz that holds only that state (the sequence is
  drawn at random: partial input files);
- conv_transformer: a conv stem + a 2-layer transformer encoder (TorchScript exporter), split inside its encoder;
- fp16_cnn: a residual conv net converted by onnxconverter-common's float16 with fp32 inputs/outputs kept;
- randn_like_ts / randn_like_dynamo: a conv net adding torch.randn_like noise, through both exporters.

No lib/ import: these are inputs to the product, not part of it.
"""
from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnx

from tests.wild_models import _facts, _rand


def _torch():
    import torch         # optional dependency: only the builders need it
    return torch


def _export(model, args, path, dynamo=False, **kw):
    torch = _torch()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model.eval(), args, str(path), dynamo=dynamo, **kw)
    return f"torch {torch.__version__} {'dynamo' if dynamo else 'TorchScript'} exporter"


def build_gru_state(path, seq=128, batch=3):
    """GRU(8 -> 16) + Linear(16 -> 4); inputs x [seq_len, batch, 8] and h0 [1, batch, 16]. The npz holds h0 only."""
    torch = _torch()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gru, self.fc = torch.nn.GRU(8, 16), torch.nn.Linear(16, 4)

        def forward(self, x, h0):
            y, h = self.gru(x, h0)
            return self.fc(y), h
    torch.manual_seed(0)
    exporter = _export(Net(), (torch.randn(5, 2, 8), torch.zeros(1, 2, 16)), path, input_names=["x", "h0"],
                       output_names=["y", "h"], dynamic_axes={"x": {0: "seq_len", 1: "batch"}, "h0": {1: "batch"}})
    facts = _facts(path, "partial_inputs", exporter, {"h0": np.zeros((1, batch, 16), np.float32)},
                   3 * 16 * (8 + 16) * seq * batch + 16 * 4 * seq * batch,
                   "the npz holds only the zero initial state h0: x is drawn at random, its batch fixed by h0's "
                   "(seq_len from configs/workload.yaml: 128)")
    facts["feeds_obj"] = {"x": _rand(128, batch, 8), "h0": np.zeros((1, batch, 16), np.float32)}
    return facts


def build_conv_transformer(path):
    """Conv stem (3 -> 32, two stride-2 convs) -> 64 tokens -> TransformerEncoder(32, 4 heads, 2 layers) -> Linear."""
    torch = _torch()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
                                            torch.nn.Conv2d(32, 32, 3, stride=2, padding=1))
            layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
            self.encoder = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
            self.head = torch.nn.Linear(32, 10)

        def forward(self, x):
            return self.head(self.encoder(self.stem(x).flatten(2).transpose(1, 2)))
    torch.manual_seed(0)
    exporter = _export(Net(), (torch.randn(1, 3, 32, 32),), path, input_names=["x"], output_names=["logits"])
    return _facts(path, "conv_transformer", exporter, {"x": _rand(1, 3, 32, 32)}, None,
                  "conv stem + transformer encoder (MatMul attention, LayerNormalization); split inside the encoder")


def build_fp16_cnn(path):
    """Conv -> Relu -> Conv -> Relu -> Add(skip) -> mean -> Linear, fp16 inside, fp32 input and output."""
    torch = _torch()
    from onnxconverter_common import float16   # optional dependency of the builder

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.Conv2d(16, 16, 3, padding=1)
            self.fc = torch.nn.Linear(16, 5)

        def forward(self, x):
            y = torch.relu(self.c1(x))
            return self.fc((torch.relu(self.c2(y)) + y).mean((2, 3)))
    torch.manual_seed(0)
    exporter = _export(Net(), (torch.randn(1, 3, 16, 16),), path, input_names=["x"], output_names=["y"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = float16.convert_float_to_float16(onnx.load(str(path)), keep_io_types=True)
    onnx.save(m, str(path))
    macs = 16 * 16 * (3 * 9 * 16 + 16 * 9 * 16) + 16 * 5
    return _facts(path, "fp16", exporter + " + onnxconverter-common float16 (keep_io_types)", {"x": _rand(1, 3, 16, 16)},
                  macs, "fp16 weights and compute, fp32 input/output (Cast at both ends)")


def _randn_like(path, dynamo):
    torch = _torch()

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.c2 = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 3, padding=1)

        def forward(self, x):
            y = torch.relu(self.c1(x))
            return self.c2(y + 0.1 * torch.randn_like(y)).mean((2, 3))
    torch.manual_seed(0)
    exporter = _export(Net(), (torch.randn(1, 3, 16, 16),), path, dynamo, input_names=["x"], output_names=["y"])
    return _facts(path, "random_ops", exporter, {"x": _rand(1, 3, 16, 16)}, 16 * 16 * 8 * 9 * (3 + 8),
                  "torch.randn_like -> RandomNormalLike (no seed attribute): the model draws random numbers")


def build_randn_like_ts(path):
    return _randn_like(path, False)


def build_randn_like_dynamo(path):
    return _randn_like(path, True)


def build_dropout_train(path):
    """An MLP with nn.Dropout exported in torch.onnx.TrainingMode.TRAINING: Dropout nodes whose training_mode is
    true and that carry no seed (each run draws another mask)."""
    torch = _torch()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 32),
                              torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(32, 4)).train()
    torch.onnx.export(net, (torch.randn(8, 16),), str(path), input_names=["x"], output_names=["y"], dynamo=False,
                      opset_version=17, training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    return _facts(path, "random_ops", f"torch.onnx.export(dynamo=False, training=TRAINING) torch=={torch.__version__}",
                  {"x": _rand(8, 16)}, 8 * (16 * 32 + 32 * 32 + 32 * 4), "Dropout in training mode, no seed")


BUILDERS = {"gru_state": build_gru_state, "conv_transformer": build_conv_transformer, "fp16_cnn": build_fp16_cnn,
            "randn_like_ts": build_randn_like_ts, "randn_like_dynamo": build_randn_like_dynamo,
            "dropout_train": build_dropout_train}


def build_all(outdir, only=None):
    outdir = Path(outdir)
    return {n: b(outdir / f"{n}.onnx") for n, b in BUILDERS.items() if not only or n in only}
