"""Build ONNX models locally from torchvision constructors (random weights: nothing is downloaded).

    python -m lib.onnx.export_models resnet50 models/resnet50.onnx [--opset 18] [--batch 1] [--dynamic-batch] [--fp16]
    python -m lib.onnx.export_models hf-bert models/bert.onnx [--hidden 256 --layers 4 --heads 4] [--external-data]
    python -m lib.onnx.export_models hf-gpt2 models/gpt2.onnx [--hidden 256 --layers 4 --heads 4] [--external-data]
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from pathlib import Path


def calibrate_batchnorm(model, size: int, batches: int = 2, batch: int = 4) -> None:
    """Set BatchNorm running statistics from a few random batches. With torchvision's fresh statistics
    (mean 0, var 1) activations of a random-weight MobileNet/EfficientNet shrink layer after layer to ~1e-9,
    which makes numerical checks of exported models (stage 08) vacuous; calibrated, they stay O(1)."""
    import torch
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative average over the calibration batches
    model.train()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn(batch, 3, size, size))
    model.eval()


def _save_export(model, args, out: Path, input_names, output_names, opset: int, dynamic_shapes=None,
                 external_data: bool = False) -> Path:
    """torch.onnx.export (dynamo) quietly, written atomically; external_data puts weights in <out>.data."""
    import torch
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp.onnx")
    with warnings.catch_warnings(), open(os.devnull, "w") as devnull:
        warnings.simplefilter("ignore")
        stdout, sys.stdout = sys.stdout, devnull  # the exporter prints its progress to stdout
        try:
            prog = torch.onnx.export(model, args, input_names=input_names, output_names=output_names,
                                     opset_version=opset, dynamo=True, dynamic_shapes=dynamic_shapes)
        finally:
            sys.stdout = stdout
    if external_data:
        prog.save(str(out), external_data=True)
        return out
    prog.save(str(tmp))
    os.replace(tmp, out)
    return out


def export_hf(kind: str, out: str | Path, *, hidden: int = 256, layers: int = 4, heads: int = 4, seq: int = 128,
              opset: int = 18, external_data: bool = False, seed: int = 0) -> Path:
    """A BERT-style encoder or GPT-2-style decoder built by Hugging Face transformers from a config (random
    weights, nothing downloaded), exported with dynamic batch and sequence axes (dims 'batch', 'sequence')."""
    import torch
    from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel
    torch.manual_seed(seed)
    if kind == "bert":
        net = BertModel(BertConfig(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                                   intermediate_size=4 * hidden, vocab_size=30522)).eval()

        class Wrap(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask):
                return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    elif kind == "gpt2":
        net = GPT2LMHeadModel(GPT2Config(n_embd=hidden, n_layer=layers, n_head=heads, vocab_size=50257,
                                         n_positions=1024)).eval()

        class Wrap(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids, attention_mask):
                return self.m(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
    else:
        raise SystemExit(f"error: unknown Hugging Face model kind '{kind}' (bert or gpt2)")
    ids = torch.randint(0, 1000, (1, seq))
    mask = torch.ones(1, seq, dtype=torch.long)
    b, s = torch.export.Dim("batch"), torch.export.Dim("sequence", max=1024)
    return _save_export(Wrap(net), (ids, mask), Path(out), ["input_ids", "attention_mask"], ["output"], opset,
                        ({0: b, 1: s}, {0: b, 1: s}), external_data)


def export_encoder(out: str | Path, *, hidden: int = 256, layers: int = 4, heads: int = 4, seq: int = 128,
                   opset: int = 18, seed: int = 0) -> Path:
    """A causal pre-norm transformer written with plain torch ops (not Hugging Face's: the latency model
    calibrates on it and is checked on the Hugging Face exports): embedding, attention with a -inf causal
    mask (the masked softmax of a decoder), GELU MLP, LayerNorm, a vocabulary head."""
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
            self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))
            self.register_buffer("mask", torch.triu(torch.full((seq, seq), float("-inf")), diagonal=1))

        def forward(self, x):
            b, s, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            att = torch.softmax(q @ k.transpose(-1, -2) / (d // heads) ** 0.5 + self.mask, dim=-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(b, s, d))
            return x + self.mlp(self.ln2(x))

    class Encoder(nn.Module):
        def __init__(self, vocab=8000):
            super().__init__()
            self.emb = nn.Embedding(vocab, hidden)
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.head = nn.Linear(hidden, vocab)

        def forward(self, ids):
            return self.head(self.blocks(self.emb(ids)))

    torch.manual_seed(seed)
    return _save_export(Encoder().eval(), (torch.randint(0, 8000, (1, seq)),), Path(out), ["input_ids"],
                        ["logits"], opset)


def export_torchvision(name: str, out: str | Path, *, opset: int = 18, batch: int = 1, size: int = 224,
                       dynamic_batch: bool = False, seed: int = 0, fp16: bool = False) -> Path:
    import torch
    import torchvision

    if name not in torchvision.models.list_models(module=torchvision.models):
        raise SystemExit(f"error: unknown torchvision classification model '{name}'")
    torch.manual_seed(seed)
    model = torchvision.models.get_model(name, weights=None).eval()
    # torchvision zero-initialises some heads (ViT's classifier): the logits would be identically 0, which
    # makes any numerical comparison of the exported model vacuous. Give such weights small random values.
    with torch.no_grad():
        for prm in model.parameters():
            if prm.dim() > 1 and not prm.any():
                prm.normal_(0.0, 0.02)
    calibrate_batchnorm(model, size)
    x = torch.randn(batch, 3, size, size)
    if fp16:
        model, x = model.half(), x.half()
    dyn = {"x": {0: torch.export.Dim("batch")}} if dynamic_batch else None
    return _save_export(model, (x,), Path(out), ["input"], ["logits"], opset, dyn)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", help="torchvision model name (resnet50, mobilenet_v2, vit_b_16, swin_t ...), hf-bert / "
                   "hf-gpt2, or torch-encoder (a causal nn.TransformerEncoder)")
    p.add_argument("out", help="output .onnx path")
    p.add_argument("--opset", type=int, default=18)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--size", type=int, default=224, help="input height = width (default 224)")
    p.add_argument("--dynamic-batch", action="store_true", help="export with a symbolic batch dim")
    p.add_argument("--fp16", action="store_true", help="torchvision: export in float16")
    p.add_argument("--hidden", type=int, default=256, help="hf-*: hidden size (default 256)")
    p.add_argument("--layers", type=int, default=4, help="hf-*: layers (default 4)")
    p.add_argument("--heads", type=int, default=4, help="hf-*: attention heads (default 4)")
    p.add_argument("--external-data", action="store_true", help="hf-*: weights in <out>.data (external data)")
    a = p.parse_args(argv)
    if a.name == "torch-encoder":
        path = export_encoder(a.out, hidden=a.hidden, layers=a.layers, heads=a.heads, opset=a.opset)
    elif a.name.startswith("hf-"):
        path = export_hf(a.name[3:], a.out, hidden=a.hidden, layers=a.layers, heads=a.heads, opset=a.opset,
                         external_data=a.external_data)
    else:
        path = export_torchvision(a.name, a.out, opset=a.opset, batch=a.batch, size=a.size,
                                  dynamic_batch=a.dynamic_batch, fp16=a.fp16)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB, {a.name}, random weights, opset {a.opset})")


if __name__ == "__main__":
    main()
