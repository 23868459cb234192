"""Stage 09, part 1: trace a PyTorch model with torch.fx, propagate shapes, characterize every node.

Matmul/conv-class FLOPs come from PyTorch's own counter (FlopCounterMode, 2 FLOPs per MAC) run on each node;
elementwise, normalization, pooling and data-movement ops use the per-element counts of lib/op_costs.py.
"""
from __future__ import annotations

import importlib
import math
import warnings

import pandas as pd

from .errors import StageError

# per-element FLOPs of module types / functions / methods, by name (same conventions as lib/op_costs.py)
PER_ELEMENT = {
    "BatchNorm1d": 2, "BatchNorm2d": 2, "BatchNorm3d": 2, "LayerNorm": 8, "GroupNorm": 8, "InstanceNorm2d": 8,
    "ReLU": 1, "relu": 1, "ReLU6": 2, "Hardtanh": 2, "relu6": 2, "hardtanh": 2, "SiLU": 5, "silu": 5, "Sigmoid": 4,
    "sigmoid": 4, "Hardsigmoid": 3, "hardsigmoid": 3, "Hardswish": 4, "hardswish": 4, "GELU": 8, "gelu": 8,
    "Tanh": 5, "tanh": 5, "LeakyReLU": 2, "ELU": 3, "Mish": 8, "Softmax": 5, "softmax": 5, "log_softmax": 5,
    "add": 1, "iadd": 1, "sub": 1, "mul": 1, "imul": 1, "truediv": 1, "div": 1, "neg": 1, "exp": 1, "sqrt": 1,
    "pow": 1, "rsqrt": 1, "mean": 1, "sum": 1,
}
ZERO = {"Flatten", "Identity", "Dropout", "StochasticDepth", "flatten", "reshape", "view", "permute", "transpose",
        "contiguous", "cat", "concat", "stack", "getitem", "unsqueeze", "squeeze", "expand", "chunk", "split",
        "stochastic_depth", "dropout", "clone", "to", "type_as", "repeat", "narrow", "select", "size", "dim",
        "getattr", "_assert", "eq", "floordiv", "floor_divide"}
POOL_WINDOW = {"MaxPool2d", "AvgPool2d", "MaxPool1d", "AvgPool1d", "max_pool2d", "avg_pool2d"}
POOL_GLOBAL = {"AdaptiveAvgPool2d", "AdaptiveAvgPool1d", "AdaptiveMaxPool2d", "adaptive_avg_pool2d"}
ACT = {"ReLU", "relu", "ReLU6", "relu6", "Hardtanh", "hardtanh", "SiLU", "silu", "Sigmoid", "sigmoid", "Hardsigmoid",
       "hardsigmoid", "Hardswish", "hardswish", "GELU", "gelu", "Tanh", "tanh", "LeakyReLU", "ELU", "Mish"}
NORM = {"BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "LayerNorm", "GroupNorm", "InstanceNorm2d"}
MATMUL_FN = {"matmul", "bmm", "mm", "linear", "conv2d", "conv1d", "einsum", "baddbmm", "addmm",
             "scaled_dot_product_attention"}


def load_torch_model(spec: str):
    """`resnet18` (any torchvision model) or `pkg.module:factory` -> an eval-mode nn.Module."""
    import torch
    if ":" in spec:
        mod, _, fn = spec.partition(":")
        try:
            factory = getattr(importlib.import_module(mod), fn)
        except (ImportError, AttributeError) as e:
            raise StageError(f"cannot import {spec}: {e}") from None
        model = factory()
    else:
        import torchvision
        names = torchvision.models.list_models(module=torchvision.models)
        if spec not in names:
            raise StageError(f"unknown model '{spec}': give a torchvision model name (e.g. resnet18) or pkg.module:factory")
        torch.manual_seed(0)
        model = torchvision.models.get_model(spec, weights=None)
    if not isinstance(model, torch.nn.Module):
        raise StageError(f"{spec} did not return a torch.nn.Module")
    return model.eval()


def trace(model):
    """torch.fx.symbolic_trace; on failure, retry with every non-torch.nn submodule as a leaf (say so)."""
    import torch.fx
    try:
        return torch.fx.symbolic_trace(model), "symbolic_trace"
    except Exception as e:  # noqa: BLE001 - fx raises many types for untraceable Python
        first = " ".join(str(e).split())[:200]

    class LeafCustom(torch.fx.Tracer):
        def is_leaf_module(self, m, qualname):
            return super().is_leaf_module(m, qualname) or not type(m).__module__.startswith("torch.nn")

    try:
        graph = LeafCustom().trace(model)
        warnings.warn(f"symbolic tracing failed ({first}); traced again with custom submodules as leaves")
        return torch.fx.GraphModule(model, graph), "leaf-custom-modules"
    except Exception as e:  # noqa: BLE001
        raise StageError(f"torch.fx cannot trace this model ({first}); the fallback failed too: "
                         f"{' '.join(str(e).split())[:200]}") from None


def _kind(node, modules) -> str:
    if node.op == "call_module":
        return type(modules[node.target]).__name__
    if node.op == "call_function":
        return getattr(node.target, "__name__", str(node.target))
    if node.op == "call_method":
        return str(node.target)
    return node.op


def _tensors(value):
    import torch
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def _nbytes(ts) -> int:
    return int(sum(t.numel() * t.element_size() for t in ts))


def op_class(kind: str, module) -> str:
    import torch
    if isinstance(module, torch.nn.modules.conv._ConvNd):
        if module.groups > 1 and module.groups == module.in_channels:
            return "conv_depthwise"
        return "conv_grouped" if module.groups > 1 else "conv"
    if kind == "Linear" or kind == "linear":
        return "gemm"
    if kind == "MultiheadAttention" or kind == "scaled_dot_product_attention":
        return "attention"
    if kind in ("matmul", "bmm", "mm", "einsum", "baddbmm", "addmm"):
        return "matmul"
    if kind in POOL_WINDOW or kind in POOL_GLOBAL:
        return "pool"
    if kind in NORM:
        return "norm"
    if kind in ACT:
        return "activation"
    if kind in ("Softmax", "softmax", "log_softmax"):
        return "softmax"
    if kind in PER_ELEMENT:
        return "elementwise"
    if kind in ZERO:
        return "data_movement"
    return "other"


def characterize(gm, example) -> pd.DataFrame:
    """Run the traced model once, node by node, and record each node's costs and shapes."""
    import torch
    from torch.fx import Interpreter
    from torch.utils.flop_counter import FlopCounterMode

    modules = dict(gm.named_modules())
    rows: list[dict] = []
    torch.backends.mha.set_fastpath_enabled(False)   # else FlopCounterMode misses nn.MultiheadAttention

    class Recorder(Interpreter):
        def run_node(self, n):
            with FlopCounterMode(display=False) as fc:
                out = super().run_node(n)
            if n.op in ("placeholder", "output"):
                return out
            outs = _tensors(out)
            ins = [t for a in n.all_input_nodes for t in _tensors(self.env.get(a))]
            weights = [t for a in n.all_input_nodes if a.op == "get_attr" for t in _tensors(self.env.get(a))]
            module = modules.get(n.target) if n.op == "call_module" else None
            if module is not None:
                weights += list(module.parameters()) + [b for b in module.buffers()]
            acts = [t for t in ins if not any(t is w for w in weights)]
            kind = _kind(n, modules)
            cls = op_class(kind, module)
            counted = fc.get_total_flops()
            numel_out = sum(t.numel() for t in outs)
            numel_in = sum(t.numel() for t in acts)
            if n.op == "get_attr" or not outs:
                flops, macs, known, cls = 0.0, 0.0, True, "shape" if not outs else "weight"
            elif counted or cls in ("conv", "conv_depthwise", "conv_grouped", "gemm", "matmul", "attention"):
                flops, macs, known = float(counted), float(counted) / 2, True
            elif kind in POOL_WINDOW:
                k = module.kernel_size if module is not None else n.args[1]
                k = math.prod(k) if isinstance(k, (tuple, list)) else k ** 2
                flops, macs, known = float(numel_out * k), 0.0, True
            elif kind in POOL_GLOBAL:
                flops, macs, known = float(numel_in + numel_out), 0.0, True
            elif kind in PER_ELEMENT:
                flops, macs, known = float(PER_ELEMENT[kind] * numel_out), 0.0, True
            elif kind in ZERO:
                flops, macs, known = 0.0, 0.0, True
            else:
                flops, macs, known = float("nan"), float("nan"), False
            shape = list(outs[0].shape) if outs else []
            rows.append({
                "node": n.name, "op": n.op, "kind": kind, "op_class": cls, "flops": flops, "macs": macs,
                "cost_known": known, "in_bytes": _nbytes(acts), "out_bytes": _nbytes(outs),
                "weight_bytes": _nbytes(weights), "out_shape": "x".join(map(str, shape)),
                "dtype": str(outs[0].dtype).replace("torch.", "") if outs else "",
                "threads": numel_out, "batch_par": shape[0] if len(shape) >= 1 else 1,
                "channel_par": (shape[1] if len(shape) == 4 else shape[-1]) if len(shape) >= 2 else 1,
                "spatial_par": math.prod(shape[2:]) if len(shape) == 4 else (shape[1] if len(shape) == 3 else 1),
                "depthwise": cls == "conv_depthwise",
                "inputs": ";".join(a.name for a in n.all_input_nodes if a.op != "get_attr"),
                "users": len(n.users),
            })
            return out

    with torch.no_grad():
        Recorder(gm).run(example)
    df = pd.DataFrame(rows)
    nb = df["in_bytes"] + df["out_bytes"] + df["weight_bytes"]
    df["ai_flop_per_byte"] = df["flops"] / nb.where(nb > 0)
    return df
