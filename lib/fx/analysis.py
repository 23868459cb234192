"""Stage 09, part 1: trace a PyTorch model with torch.fx, propagate shapes, characterize every node.

Matmul/conv-class FLOPs come from PyTorch's own counter (FlopCounterMode, 2 FLOPs per MAC) run on each node;
elementwise, normalization, pooling and data-movement ops map onto lib/onnx/ops.py's registry (FX_TO_ONNX):
the same op classes and per-element FLOPs as the ONNX side.
"""
from __future__ import annotations

import importlib
import math
import os
import sys
import warnings
from collections.abc import Mapping

import pandas as pd

from lib.errors import StageError
from lib.onnx.ops import RECURRENT, REGISTRY

# FX node kinds (module types, functions, methods) -> the ONNX op of lib/onnx/ops.py's registry whose op class
# and per-element FLOPs they share: one set of conventions for both sides
FX_TO_ONNX = {
    "BatchNorm1d": "BatchNormalization", "BatchNorm2d": "BatchNormalization", "BatchNorm3d": "BatchNormalization",
    "LayerNorm": "LayerNormalization", "GroupNorm": "GroupNormalization", "InstanceNorm2d": "InstanceNormalization",
    "InstanceNorm1d": "InstanceNormalization", "InstanceNorm3d": "InstanceNormalization", "RMSNorm": "RMSNormalization",
    # the functional forms timm's norm layers and torchvision's LayerNorm2d trace into (they were of unknown cost, never fused)
    "batch_norm": "BatchNormalization", "layer_norm": "LayerNormalization", "group_norm": "GroupNormalization",
    "instance_norm": "InstanceNormalization", "rms_norm": "RMSNormalization", "unbind": "Split",
    "ReLU": "Relu", "relu": "Relu", "ReLU6": "Clip", "relu6": "Clip", "Hardtanh": "Clip", "hardtanh": "Clip",
    "SiLU": "Swish", "silu": "Swish", "Sigmoid": "Sigmoid", "sigmoid": "Sigmoid", "Hardsigmoid": "HardSigmoid",
    "hardsigmoid": "HardSigmoid", "Hardswish": "HardSwish", "hardswish": "HardSwish", "GELU": "Gelu", "gelu": "Gelu",
    "Tanh": "Tanh", "tanh": "Tanh", "LeakyReLU": "LeakyRelu", "ELU": "Elu", "Mish": "Mish",
    "Softmax": "Softmax", "softmax": "Softmax", "log_softmax": "LogSoftmax",
    "add": "Add", "iadd": "Add", "sub": "Sub", "mul": "Mul", "imul": "Mul", "truediv": "Div", "div": "Div",
    "neg": "Neg", "exp": "Exp", "sqrt": "Sqrt", "pow": "Pow", "rsqrt": "Reciprocal",
    "mean": "ReduceMean", "sum": "ReduceSum",
    "MaxPool2d": "MaxPool", "AvgPool2d": "AveragePool", "MaxPool1d": "MaxPool", "AvgPool1d": "AveragePool",
    "max_pool2d": "MaxPool", "avg_pool2d": "AveragePool", "AdaptiveAvgPool2d": "GlobalAveragePool",
    "AdaptiveAvgPool1d": "GlobalAveragePool", "AdaptiveMaxPool2d": "GlobalMaxPool", "adaptive_avg_pool2d": "GlobalAveragePool",
    "Flatten": "Flatten", "Identity": "Identity", "Dropout": "Dropout", "StochasticDepth": "Identity",
    "flatten": "Flatten", "reshape": "Reshape", "view": "Reshape", "permute": "Transpose", "transpose": "Transpose",
    "contiguous": "Identity", "cat": "Concat", "concat": "Concat", "stack": "Concat", "getitem": "Gather",
    "unsqueeze": "Unsqueeze", "squeeze": "Squeeze", "expand": "Expand", "chunk": "Split", "split": "Split",
    "stochastic_depth": "Identity", "dropout": "Dropout", "clone": "Identity", "to": "Cast", "type_as": "Cast",
    "repeat": "Tile", "narrow": "Slice", "select": "Gather", "size": "Shape", "dim": "Shape", "getattr": "Identity",
    "_assert": "Identity", "eq": "Equal", "floordiv": "Div", "floor_divide": "Div",
}
MAC_KINDS = {"Linear": "gemm", "linear": "gemm", "MultiheadAttention": "attention", "scaled_dot_product_attention":
             "attention", "matmul": "matmul", "bmm": "matmul", "mm": "matmul", "einsum": "matmul", "baddbmm": "matmul",
             "addmm": "matmul", "conv1d": "conv", "conv2d": "conv", "conv3d": "conv", "conv_transpose1d": "conv",
             "conv_transpose2d": "conv", "conv_transpose3d": "conv"}     # F.conv* (a conv subclass outside torch.nn)
MAC_CLASSES = {"conv", "conv_depthwise", "conv_grouped", "gemm", "matmul", "attention", "recurrent"}


def load_torch_model(spec: str):
    """`resnet18` (any torchvision model) or `pkg.module:factory` -> an eval-mode nn.Module."""
    import torch
    if ":" in spec:
        mod, _, fn = spec.partition(":")
        if os.getcwd() not in sys.path:     # a module of the folder 09 runs in (run by path, sys.path has the repo's)
            sys.path.append(os.getcwd())
        try:
            factory = getattr(importlib.import_module(mod), fn)
        except Exception as e:  # noqa: BLE001 - the user's module may raise anything on import (a SyntaxError)
            raise StageError(f"cannot import {spec}: {type(e).__name__}: {' '.join(str(e).split())[:200]}") from None
        try:
            model = factory()
        except Exception as e:  # noqa: BLE001 - the user's factory: its error, in one line
            raise StageError(f"{spec}() failed: {type(e).__name__}: {' '.join(str(e).split())[:200]}") from None
    else:
        import torchvision
        names = torchvision.models.list_models()      # classification, segmentation, detection, video, flow
        if spec not in names:
            raise StageError(f"unknown model '{spec}': give a torchvision model name (e.g. resnet18) or pkg.module:factory")
        torch.manual_seed(0)
        import inspect
        # random weights throughout: a segmentation or detection builder would download its backbone's otherwise
        kw = {"weights_backbone": None} if "weights_backbone" in inspect.signature(
            torchvision.models.get_model_builder(spec)).parameters else {}
        model = torchvision.models.get_model(spec, weights=None, **kw)
    if not isinstance(model, torch.nn.Module):
        raise StageError(f"{spec} did not return a torch.nn.Module")
    return model.eval()


def trace(model):
    """torch.fx.symbolic_trace; on failure, retry with every non-torch.nn submodule as a leaf (say so)."""
    import torch.fx
    try:
        return torch.fx.symbolic_trace(model), "symbolic_trace"
    except Exception as e:  # noqa: BLE001 - fx raises many types for untraceable Python
        first = _reason(e)

    class LeafCustom(torch.fx.Tracer):
        def is_leaf_module(self, m, qualname):
            return super().is_leaf_module(m, qualname) or not type(m).__module__.startswith("torch.nn")

    try:
        graph = LeafCustom().trace(model)
        warnings.warn(f"symbolic tracing failed ({first}); traced again with custom submodules as leaves")
        return torch.fx.GraphModule(model, graph), "leaf-custom-modules"
    except Exception as e:  # noqa: BLE001
        again = _reason(e)
        raise StageError(f"torch.fx cannot trace this model ({first})" + (
            "" if again == first else f"; with custom submodules as leaves: {again}")) from None


def _reason(e: Exception) -> str:
    """An FX error's first sentence: its text runs on for hundreds of characters (cut mid-word at 200)."""
    text = " ".join(str(e).split())
    return text if len(text) <= 200 else text[:text.rfind(". ", 0, 200) + 1 or 200]


def _kind(node, modules) -> str:
    if node.op == "call_module":
        return type(modules[node.target]).__name__
    if node.op == "call_function":
        return getattr(node.target, "__name__", str(node.target))
    if node.op == "call_method":
        return str(node.target)
    return node.op


def _tensors(value, depth: int = 0):
    import torch
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v, depth)]
    if isinstance(value, Mapping):      # Hugging Face's ModelOutput, a dict of tensors: its submodule was dropped
        return [t for v in value.values() for t in _tensors(v, depth)]
    if depth < 2 and hasattr(value, "__dict__") and not isinstance(value, (type, torch.nn.Module)):
        # an object a custom leaf module returns (out.hidden): counted as no output, its Linear ran 3.9 s
        return [t for v in vars(value).values() for t in _tensors(v, depth + 1)]
    return []


def rnn_flops(module, x_shape: list[int]) -> tuple[float, float] | None:
    """(FLOPs, MACs) of an nn.LSTM / GRU / RNN on an input of x_shape (a batch of sequences, or one unbatched
    sequence), as stage 02 counts the ONNX op (per layer and direction and step: gates x hidden x (input + hidden)
    MACs, plus the gate arithmetic; an LSTM's proj_size p: its recurrence reads p values and h x p more MACs
    project each step's output). FlopCounterMode sees some of it on the CPU (a GRU's and RNN's matmuls), not all
    (an LSTM read 0 FLOPs): _node_cost puts this formula in place of what it saw."""
    kind = type(module).__name__
    if kind not in ("LSTM", "GRU", "RNN") or len(x_shape) not in (2, 3):
        return None
    gates, gate_flops = RECURRENT[kind]
    if len(x_shape) == 2:
        steps, batch = x_shape[0], 1
    else:
        steps, batch = (x_shape[1], x_shape[0]) if module.batch_first else (x_shape[0], x_shape[1])
    dirs, h = 2 if module.bidirectional else 1, module.hidden_size
    p = getattr(module, "proj_size", 0) or h                   # the width of each step's output (h_t)
    macs = flops = 0.0
    for layer in range(module.num_layers):
        width = module.input_size if layer == 0 else p * dirs
        m = dirs * steps * batch * (gates * h * (width + p) + (h * p if p != h else 0))
        macs += m
        flops += 2.0 * m + dirs * steps * batch * h * gate_flops
    return flops, macs


def _nbytes(ts) -> int:
    return int(sum(t.numel() * t.element_size() for t in ts))


def _in_place_method(kind: str) -> bool:
    return kind.endswith("_") and not kind.endswith("__")      # mul_, add_ (not __call__)


def onnx_op(kind: str) -> str | None:
    """The registry op of an FX node kind; an in-place method (mul_, add_) as its out-of-place twin."""
    return FX_TO_ONNX.get(kind) or (FX_TO_ONNX.get(kind[:-1]) if _in_place_method(kind) else None)


IN_PLACE_FUNCTIONS = {"iadd", "isub", "imul", "itruediv"}      # x += y in a forward


def _view(outs: list, ins: list) -> bool:
    """Every output shares storage with an input (a reshape, permute, unbind and its getitem, nn.Identity): no
    kernel runs (in timm's vit_tiny such nodes were 72 of 185 subgraphs, each charged a launch and a DRAM trip)."""
    ptrs = {t.untyped_storage().data_ptr() for t in ins if t.numel()}
    return bool(outs) and all(o.numel() == 0 or o.untyped_storage().data_ptr() in ptrs for o in outs)


def mutates(n, kind: str, module) -> bool:
    """The node writes into its first input (y.mul_(2), F.relu(y, inplace=True), nn.ReLU(inplace=True), y += x)."""
    if n.op in ("call_method", "call_function") and _in_place_method(kind):     # y.relu_(), torch.relu_(y)
        return True
    return kind in IN_PLACE_FUNCTIONS or n.kwargs.get("inplace") is True or getattr(module, "inplace", False) is True


def op_class(kind: str, module) -> str:
    """The registry's op class of the ONNX op an FX node corresponds to (conv classes from the module)."""
    import torch
    if isinstance(module, torch.nn.modules.conv._ConvNd):
        if module.groups > 1 and module.groups == module.in_channels:
            return "conv_depthwise"
        return "conv_grouped" if module.groups > 1 else "conv"
    if isinstance(module, torch.nn.RNNBase):
        return "recurrent"
    if kind in MAC_KINDS:
        return MAC_KINDS[kind]
    op = REGISTRY.get(onnx_op(kind) or "")
    if op is None or callable(op.op_class):
        return "other"
    return op.op_class


def fx_cost(kind: str, module, n, numel_in: int, numel_out: int) -> tuple[float, bool]:
    """FLOPs of a non-MAC FX node n by the registry's conventions: per-element ops x output elements, window
    pools x the window, global pools and reductions by their inputs (and outputs)."""
    key = onnx_op(kind)
    op = REGISTRY.get(key or "")
    if op is None:
        return float("nan"), False
    if key in ("MaxPool", "AveragePool"):
        k = module.kernel_size if module is not None else (n.args[1] if len(n.args) > 1 else n.kwargs.get("kernel_size"))
        if k is None:
            return float("nan"), False
        rank = 1 if kind.endswith("1d") else 2        # an int kernel_size is k per spatial dim
        return float(numel_out * (math.prod(k) if isinstance(k, (tuple, list)) else k ** rank)), True
    if key in ("GlobalAveragePool", "GlobalMaxPool", "ReduceMean"):
        return float(numel_in + numel_out), True
    if key == "ReduceSum":
        return float(numel_in), True
    return float(op.per_element * numel_out), op.per_element is not None


def _node_cost(n, kind: str, cls: str, module, counted: float, rnns: list, acts: list, outs: list) -> tuple:
    """(FLOPs, MACs, known, op class) of one FX node run once: FlopCounterMode's count where it saw MACs
    (matmuls, convs, attention: 2 per MAC, whatever the class), with stage 02's recurrent formula in place of what it
    saw of each nn.LSTM & co that ran inside it (rnns: (rnn_flops() of each, None where its input was no sequence;
    the counter's FLOPs during it)), unknown for another MAC op it saw nothing of, else the registry's per-element
    counts."""
    if n.op == "get_attr":
        return 0.0, 0.0, True, "weight"
    if rnns:        # the node is an nn.LSTM, or a custom leaf module holding one: the formula, for what the counter saw
        if any(r is None for r, _ in rnns):
            return float("nan"), float("nan"), False, cls
        rest = counted - sum(seen for _, seen in rnns)          # the counter's FLOPs outside the recurrent modules
        return rest + sum(r[0] for r, _ in rnns), rest / 2 + sum(r[1] for r, _ in rnns), True, cls
    if counted:
        return float(counted), float(counted) / 2, True, cls
    if not outs:
        return 0.0, 0.0, True, "shape"
    if cls in MAC_CLASSES:
        return float("nan"), float("nan"), False, cls
    flops, known = fx_cost(kind, module, n, sum(t.numel() for t in acts), sum(t.numel() for t in outs))
    return flops, 0.0 if known else float("nan"), known, cls


def _rnn_hooks(module, found: list, seen) -> list:
    """Hooks on every nn.LSTM / GRU / RNN in module (itself included) that append (rnn_flops() of each run, the
    FLOPs the counter saw during it: seen() is its running total; a GRU's matmuls were counted twice)."""
    import torch

    start: list[float] = []

    def pre(m, inp):
        start.append(seen())

    def post(m, inp, out):
        x = inp[0] if inp else None
        found.append((rnn_flops(m, list(x.shape)) if isinstance(x, torch.Tensor) else None, seen() - start.pop()))
    mods = [] if module is None else [m for m in module.modules() if isinstance(m, torch.nn.RNNBase)]
    return [h for m in mods for h in (m.register_forward_pre_hook(pre), m.register_forward_hook(post))]


class _Order:
    """Producers of each node, with the order in-place ops impose: a node reading a tensor after y.mul_(2)
    depends on it, and the in-place op on every earlier reader of y (FX's graph has no edge for a mutation:
    mul_ and a later relu(y) read as parallel)."""

    def __init__(self):
        self.writer, self.readers = {}, {}

    def inputs(self, n, writes: bool) -> list[str]:
        deps = [a.name for a in n.all_input_nodes if a.op != "get_attr"]
        out = deps + [self.writer[d] for d in deps if d in self.writer]
        target = n.args[0].name if writes and n.args and hasattr(n.args[0], "name") else None
        if target is not None:
            out += self.readers.get(target, [])
            self.writer[target] = n.name
        for d in deps:
            self.readers.setdefault(d, []).append(n.name)
        return list(dict.fromkeys(x for x in out if x != n.name))


def _shape_row(outs: list, numel_out: int) -> dict:
    shape = list(outs[0].shape) if outs else []
    return {"out_shape": "x".join(map(str, shape)), "dtype": str(outs[0].dtype).replace("torch.", "") if outs else "",
            "threads": numel_out, "batch_par": shape[0] if len(shape) >= 1 else 1,
            "channel_par": (shape[1] if len(shape) == 4 else shape[-1]) if len(shape) >= 2 else 1,
            "spatial_par": math.prod(shape[2:]) if len(shape) == 4 else (shape[1] if len(shape) == 3 else 1)}


def characterize(gm, example) -> pd.DataFrame:
    """Run the traced model once, node by node, and record each node's costs and shapes."""
    import torch
    from torch.fx import Interpreter
    from torch.utils.flop_counter import FlopCounterMode

    modules = dict(gm.named_modules())
    rows: list[dict] = []
    order = _Order()

    class Recorder(Interpreter):
        def run_node(self, n):
            module = modules.get(n.target) if n.op == "call_module" else None
            rnns: list = []
            fc = FlopCounterMode(display=False)
            hooks = _rnn_hooks(module, rnns, fc.get_total_flops)
            try:
                with fc:
                    out = super().run_node(n)
            finally:
                for h in hooks:
                    h.remove()
            if n.op in ("placeholder", "output"):
                return out
            outs = _tensors(out)
            ins = [t for a in n.all_input_nodes for t in _tensors(self.env.get(a))]
            weights = [t for a in n.all_input_nodes if a.op == "get_attr" for t in _tensors(self.env.get(a))]
            if module is not None:
                weights += list(module.parameters()) + [b for b in module.buffers()]
            acts = [t for t in ins if not any(t is w for w in weights)]
            kind = _kind(n, modules)
            flops, macs, known, cls = _node_cost(n, kind, op_class(kind, module), module, fc.get_total_flops(), rnns,
                                                 acts, outs)
            op = REGISTRY.get(onnx_op(kind) or "")
            rows.append({
                "node": n.name, "op": n.op, "kind": kind, "op_class": cls, "flops": flops, "macs": macs,
                "cost_known": known, "in_bytes": _nbytes(outs if op is not None and op.pick else acts),
                "out_bytes": _nbytes(outs), "weight_bytes": _nbytes(weights),
                **_shape_row(outs, sum(t.numel() for t in outs)), "depthwise": cls == "conv_depthwise",
                "inputs": ";".join(order.inputs(n, writes := mutates(n, kind, module))), "users": len(n.users),
                "view": not writes and _view(outs, ins),
                "returned": any(u.op == "output" for u in n.users),
            })
            return out

    fast = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)   # else FlopCounterMode misses nn.MultiheadAttention
    try:
        with torch.no_grad():
            Recorder(gm).run(example)
    finally:
        torch.backends.mha.set_fastpath_enabled(fast)
    if not rows:
        raise StageError("the model computes nothing from its input (no node to analyse)")
    df = pd.DataFrame(rows)
    nb = df["in_bytes"] + df["out_bytes"] + df["weight_bytes"]
    df["ai_flop_per_byte"] = df["flops"] / nb.where(nb > 0)
    return df
