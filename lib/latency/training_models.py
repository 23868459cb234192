"""The kernel model's training corpus: small models of many families, built locally (random weights, nothing
downloaded), so that every kind of kernel a real model runs is seen in real surroundings (ORT's fusions, layouts).

    python -m lib.latency.training_models --build DIR [--only NAME ...] [--list]

Families (leave-one-family-out holds a whole family out): cnn_standard, cnn_depthwise, vit, hf_encoder,
hf_decoder, quant_qdq (ORT quantize_static, QDQ, uint8 activations and its default int8 ones), quant_dynamic (quantize_dynamic), fp16 (onnxconverter-common,
keep_io_types), recurrent (LSTM/GRU, a CRNN), segmentation, detection (a small one-stage head), nhwc (keras-style:
NHWC input, transposes around the convolutions as tf2onnx emits); <model>_b<N> is a model at batch N. Exports
use TorchScript's exporter (fast, and what many public models were made with) with static shapes, so that stages
01/02 need no shape arguments; bert_dynamo_h384 uses the dynamo exporter with dynamic batch and sequence axes, as
`python -m lib.onnx.export_models hf-bert` writes it (its shape arithmetic runs as int64 kernels).
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path

import numpy as np

from lib.onnx.export_models import calibrate_batchnorm, export_hf

FAMILIES = {
    "cnn_standard": ["resnet18", "googlenet", "densenet121_128", "resnet34_160", "resnet18_b4",
                     "resnet18_b16"],
    "cnn_depthwise": ["mobilenet_v2", "mobilenet_v3_small", "efficientnet_b0", "mnasnet0_5", "mobilenet_v2_b4",
                      "lcnet_decomposed"],
    "vit": ["vit_tiny", "vit_tiny_p32", "swin_tiny_small"],
    "hf_encoder": ["bert_small", "distilbert_small", "bert_small_s64", "bert_small_b4", "bert_dynamo_h384"],
    "hf_decoder": ["gpt2_small", "gpt2_s64"],
    "quant_qdq": ["resnet18_qdq", "mobilenet_v2_qdq", "resnet18_qdq_s8"],
    "quant_dynamic": ["bert_small_dyn", "gpt2_small_dyn", "resnet18_dynu8", "crnn_dyn"],
    "fp16": ["resnet18_fp16", "bert_small_fp16"],
    "recurrent": ["lstm2", "gru2", "crnn", "lstm_h512", "gru_h384"],
    "segmentation": ["lraspp_mbv3", "unet_small"],
    "detection": ["yolo_tiny"],
    "nhwc": ["keras_cnn", "keras_mbv2"],
}
QUICK = ["resnet18", "bert_small", "lstm2"]
FAMILY_OF = {m: f for f, ms in FAMILIES.items() for m in ms}
SPECS = {  # derived models: (source model, transform)
    "resnet18_qdq": ("resnet18", "qdq"), "mobilenet_v2_qdq": ("mobilenet_v2", "qdq"),
    # quantize_static's defaults (int8 activations): ORT runs 11 of its 20 convs in fp32 after DequantizeLinear
    "resnet18_qdq_s8": ("resnet18", "qdq_s8"),
    "bert_small_dyn": ("bert_small", "dynamic"), "gpt2_small_dyn": ("gpt2_small", "dynamic"),
    "resnet18_dynu8": ("resnet18", "dynamic_u8"),      # uint8 weights: ORT's u8u8 ConvInteger (older exports)
    "crnn_dyn": ("crnn", "dynamic"),    # ORT's DynamicQuantizeLSTM (a dynamically quantized OCR CRNN runs one)
    "resnet18_fp16": ("resnet18", "fp16"), "bert_small_fp16": ("bert_small", "fp16"),
    # not a training model: bench/qdq_weights.py checks the prediction of a QDQ model with uint8 weights on it
    "resnet18_qdq_u8": ("resnet18", "qdq_u8"),
}


def _export(model, args: tuple, out: Path, names: list[str]) -> Path:
    import torch
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    with warnings.catch_warnings(), open(os.devnull, "w") as devnull:
        warnings.simplefilter("ignore")
        stdout, sys.stdout = sys.stdout, devnull
        try:
            torch.onnx.export(model.eval(), args, str(tmp), input_names=names, opset_version=17, dynamo=False)
        finally:
            sys.stdout = stdout
    os.replace(tmp, out)
    return out


def _vision(name: str, size: int = 224):
    import torchvision
    from torchvision.models import swin_transformer, vision_transformer
    if name == "vit_tiny":
        return vision_transformer.VisionTransformer(224, 16, 4, 3, 192, 768), size
    if name == "vit_tiny_p32":
        return vision_transformer.VisionTransformer(224, 32, 6, 4, 256, 1024), size
    if name == "swin_tiny_small":
        return swin_transformer.SwinTransformer([4, 4], 48, [2, 2, 2, 2], [3, 6, 12, 24], [7, 7]), size
    if name == "lraspp_mbv3":
        return torchvision.models.segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None), size
    base, _, px = name.rpartition("_")
    if px.isdigit() and len(px) == 3:       # <torchvision name>_<input size>
        return torchvision.models.get_model(base, weights=None), int(px)
    kw = {"aux_logits": False, "init_weights": True} if name == "googlenet" else {}
    return torchvision.models.get_model(name, weights=None, **kw), size


def _hf(name: str):
    import torch
    from transformers import BertConfig, BertModel, DistilBertConfig, DistilBertModel, GPT2Config, GPT2LMHeadModel
    seq = 64 if name.endswith("s64") else 128
    if name.startswith("bert"):
        net = BertModel(BertConfig(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024))
    elif name.startswith("distil"):
        net = DistilBertModel(DistilBertConfig(dim=256, n_layers=3, n_heads=4, hidden_dim=1024))
    else:
        net = GPT2LMHeadModel(GPT2Config(n_embd=256 if seq == 128 else 384, n_layer=4, n_head=4, vocab_size=8000))
    net.config.use_cache = False

    class Wrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, ids, mask):
            out = self.m(input_ids=ids, attention_mask=mask)
            return out.logits if hasattr(out, "logits") else out.last_hidden_state
    return Wrap(net.eval()), (torch.randint(0, 1000, (1, seq)), torch.ones(1, seq, dtype=torch.long))


def _cbr(cin, cout, s=1, k=3, groups=1):
    from torch import nn
    return nn.Sequential(nn.Conv2d(cin, cout, k, s, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


def _recurrent(name: str):
    """LSTM/GRU stacks and a CRNN (conv features -> bidirectional LSTM)."""
    from torch import nn

    class Rnn(nn.Module):
        def __init__(self, cell, inp=64, hidden=128, layers=2, bidirectional=False):
            super().__init__()
            self.rnn = cell(inp, hidden, num_layers=layers, batch_first=True, bidirectional=bidirectional)
            self.fc = nn.Linear(hidden * (1 + bidirectional), 32)

        def forward(self, x):
            return self.fc(self.rnn(x)[0])

    class Crnn(nn.Module):
        def __init__(self):
            super().__init__()
            self.cnn = nn.Sequential(_cbr(1, 32), nn.MaxPool2d(2), _cbr(32, 64), nn.MaxPool2d(2), _cbr(64, 128),
                                     nn.MaxPool2d((2, 1)))
            self.rnn = nn.LSTM(128 * 4, 128, bidirectional=True, batch_first=True)
            self.fc = nn.Linear(256, 40)

        def forward(self, x):
            f = self.cnn(x)
            b, c, h, w = f.shape
            return self.fc(self.rnn(f.permute(0, 3, 1, 2).reshape(b, w, c * h))[0])
    # wide ones: R past the L2 cache, read again at every step (an OCR model's bidirectional LSTM has hidden 512)
    return {"lstm2": (lambda: Rnn(nn.LSTM), (1, 50, 64)), "gru2": (lambda: Rnn(nn.GRU), (1, 50, 64)),
            "crnn": (Crnn, (1, 1, 32, 128)),
            "lstm_h512": (lambda: Rnn(nn.LSTM, 256, 512, 1, True), (1, 40, 256)),
            "gru_h384": (lambda: Rnn(nn.GRU, 128, 384), (1, 24, 128))}[name]


def _dense(name: str):
    """A U-Net with ConvTranspose, a one-stage detector with an upsampled second head, keras-style NHWC nets."""
    import torch
    from torch import nn

    class UNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.d1, self.d2, self.d3 = _cbr(3, 16), _cbr(16, 32, 2), _cbr(32, 64, 2)
            self.u2, self.u1 = nn.ConvTranspose2d(64, 32, 2, 2), nn.ConvTranspose2d(32, 16, 2, 2)
            self.c2, self.c1, self.out = _cbr(64, 32), _cbr(32, 16), nn.Conv2d(16, 2, 1)

        def forward(self, x):
            a = self.d1(x)
            b = self.d2(a)
            b = self.c2(torch.cat([self.u2(self.d3(b)), b], 1))
            return self.out(self.c1(torch.cat([self.u1(b), a], 1)))

    class Yolo(nn.Module):
        def __init__(self):
            super().__init__()
            self.s1 = nn.Sequential(_cbr(3, 16, 2), _cbr(16, 32, 2), _cbr(32, 64, 2), _cbr(64, 128, 2))
            self.s3, self.lat = _cbr(128, 256, 2), nn.Conv2d(256, 128, 1)
            self.h1, self.h2 = nn.Conv2d(256, 85 * 3, 1), nn.Conv2d(256, 85 * 3, 1)

        def forward(self, x):
            a = self.s1(x)
            b = self.s3(a)
            up = nn.functional.interpolate(self.lat(b), scale_factor=2.0, mode="nearest")
            return torch.sigmoid(self.h1(b)), torch.sigmoid(self.h2(torch.cat([up, a], 1)))

    class Nhwc(nn.Module):
        """tf2onnx-style: NHWC in, a Transpose to NCHW around each block and back."""
        def __init__(self, dw: bool):
            super().__init__()
            chans = [(3, 32, 2), (32, 64, 1), (64, 64, 2), (64, 128, 1), (128, 128, 2)]
            self.blocks = nn.ModuleList([nn.Sequential(_cbr(ci, ci, s, groups=ci), _cbr(ci, co, k=1)) if dw and ci > 3
                                         else _cbr(ci, co, s) for ci, co, s in chans])
            self.fc = nn.Linear(128, 10)

        def forward(self, x):
            for b in self.blocks:
                x = b(x.permute(0, 3, 1, 2)).permute(0, 2, 3, 1)
            return self.fc(x.mean((1, 2)))
    return {"unet_small": (UNet, (1, 3, 128, 128)), "yolo_tiny": (Yolo, (1, 3, 256, 256)),
            "keras_cnn": (lambda: Nhwc(False), (1, 160, 160, 3)), "keras_mbv2": (lambda: Nhwc(True), (1, 160, 160, 3))}[name]


def _lcnet(name: str):
    import torch
    from torch import nn

    class Lcnet(nn.Module):
        """Depthwise-separable blocks (3x3, then 5x5 with squeeze-excite) whose hard-swish and hard-sigmoid are
        written out as paddle2onnx emits them (x * clip(x + 3, 0, 6) / 6: Add, Clip, Div, Mul), so that chains
        of elementwise kernels on one tensor are seen (PP-OCR's ran at 0.2 ns per element, half a lone one's)."""
        def __init__(self):
            super().__init__()
            cfg = [(16, 32, 3, 1, 0), (32, 64, 3, 2, 0), (64, 64, 3, 1, 0), (64, 128, 3, 2, 0), (128, 128, 3, 1, 0),
                   (128, 256, 3, 2, 0), (256, 256, 5, 1, 0), (256, 256, 5, 1, 0), (256, 512, 5, 2, 1),
                   (512, 512, 5, 1, 1)]
            self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16))
            self.blocks = nn.ModuleList([nn.ModuleList([
                nn.Sequential(nn.Conv2d(ci, ci, k, s, k // 2, groups=ci, bias=False), nn.BatchNorm2d(ci)),
                nn.Sequential(nn.Conv2d(ci, ci // 4, 1), nn.ReLU(), nn.Conv2d(ci // 4, ci, 1)) if se else None,
                nn.Sequential(nn.Conv2d(ci, co, 1, bias=False), nn.BatchNorm2d(co))]) for ci, co, k, s, se in cfg])
            self.head, self.fc = nn.Conv2d(512, 1280, 1), nn.Linear(1280, 100)

        @staticmethod
        def hswish(x):
            return x * torch.clamp(x + 3.0, 0.0, 6.0) / 6.0

        def forward(self, x):
            x = self.hswish(self.stem(x))
            for dw, se, pw in self.blocks:
                x = self.hswish(dw(x))
                if se is not None:
                    x = x * torch.clamp(se(x.mean((2, 3), keepdim=True)) / 6.0 + 0.5, 0.0, 1.0)
                x = self.hswish(pw(x))
            return self.fc(self.hswish(self.head(x.mean((2, 3), keepdim=True))).flatten(1))
    return Lcnet, (1, 3, 224, 224)


# the models defined here (the others come from torchvision and transformers): name -> its (class, input shape)
CUSTOM = {**dict.fromkeys(("lstm2", "gru2", "crnn", "lstm_h512", "gru_h384"), _recurrent),
          **dict.fromkeys(("unet_small", "yolo_tiny", "keras_cnn", "keras_mbv2"), _dense), "lcnet_decomposed": _lcnet}


def _custom(name: str):
    import torch
    make, shape = CUSTOM[name](name)
    return make(), (torch.randn(*shape),)


def _transform(src: Path, dst: Path, how: str) -> Path:
    import onnx
    if how == "fp16":
        from onnxconverter_common import float16
        onnx.save(float16.convert_float_to_float16(onnx.load(str(src)), keep_io_types=True), str(dst))
        return dst
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static
    tmp = dst.with_suffix(".pre.onnx")
    m = onnx.load(str(src))
    m.graph.ClearField("value_info")
    onnx.save(m, str(tmp))
    if how.startswith("dynamic"):
        quantize_dynamic(str(tmp), str(dst), weight_type=QuantType.QUInt8 if how == "dynamic_u8" else QuantType.QInt8)
    else:
        inp = m.graph.input[0]
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]

        class Reader(CalibrationDataReader):
            def __init__(self):
                rng = np.random.default_rng(0)
                self.data = iter([{inp.name: rng.standard_normal(shape).astype(np.float32)} for _ in range(4)])

            def get_next(self):
                return next(self.data, None)
        quantize_static(str(tmp), str(dst), Reader(), quant_format=QuantFormat.QDQ,
                        weight_type=QuantType.QUInt8 if how == "qdq_u8" else QuantType.QInt8,
                        activation_type=QuantType.QInt8 if how == "qdq_s8" else QuantType.QUInt8)
    tmp.unlink()
    return dst


def _batch(name: str) -> tuple[str, int]:
    """(model, batch) of a name: <model>_b<batch> is a training model at that batch (the batch sweeps' kernels
    are seen in real surroundings too), else batch 1 (efficientnet_b0 is a model of its own, not efficientnet at
    batch 0)."""
    base, _, b = name.rpartition("_b")
    return (base, int(b)) if b.isdigit() and base in names() else (name, 1)


def build(name: str, out_dir: str | Path) -> Path:
    """The model `name` as out_dir/<name>.onnx, built unless it exists."""
    import torch
    out = Path(out_dir) / f"{name}.onnx"
    if out.exists():
        return out
    torch.manual_seed(0)
    if name in SPECS:
        src, how = SPECS[name]
        return _transform(build(src, out_dir), out, how)
    name, batch = _batch(name)
    if name == "bert_dynamo_h384":      # the dynamo exporter, dynamic axes: shape arithmetic runs as int64 kernels
        return export_hf("bert", out, hidden=384, layers=3, heads=6)
    if name.startswith(("bert", "distil", "gpt2")):
        model, args = _hf(name)
        return _export(model, tuple(a.repeat(batch, 1) for a in args), out, ["input_ids", "attention_mask"])
    if name in CUSTOM:
        model, args = _custom(name)
        return _export(model, args, out, ["input"])
    model, size = _vision(name)
    calibrate_batchnorm(model, size)
    return _export(model, (torch.randn(batch, 3, size, size),), out, ["input"])


def names(quick: bool = False) -> list[str]:
    return list(QUICK) if quick else [m for ms in FAMILIES.values() for m in ms]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", metavar="DIR", required=True, help="where the models go (built unless present)")
    p.add_argument("--only", nargs="*", help="these models only")
    p.add_argument("--quick", action="store_true", help="the few models of the tests: " + ", ".join(QUICK))
    a = p.parse_args(argv)
    for n in a.only or names(a.quick):
        if n not in FAMILY_OF:
            raise SystemExit(f"error: unknown training model {n} (known: {', '.join(FAMILY_OF)})")
        try:
            print(f"{FAMILY_OF[n]:<14} {n:<20} {build(n, a.build)}", flush=True)
        except Exception as e:  # noqa: BLE001 - an exporter's failure on one model leaves the others
            print(f"{FAMILY_OF[n]:<14} {n:<20} not built: {type(e).__name__}: {str(e)[:200]}", flush=True)


if __name__ == "__main__":
    main()
