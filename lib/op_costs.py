"""One registry: ONNX op type -> FLOPs and MACs of one node, from inferred shapes.

Conventions (README "Cost model"):
- MACs: multiply-accumulates of Conv/ConvTranspose/Gemm/MatMul/Einsum-class ops; FLOPs = 2 x MACs for them
  (bias additions are not counted, as in PyTorch's FlopCounterMode and torchvision's figures).
- Other ops: MACs = 0 and FLOPs = output (or input) elements x a per-element cost from ELEMENTWISE.
- Data-movement and shape ops cost 0 FLOPs but are *known* (their bytes still count).
- An op missing here is *unknown*: flops/macs stay empty (NaN), never silently 0.
"""
from __future__ import annotations

import math

from onnx import helper

from .graph import Graph

# FLOPs per output element (a documented convention, not a measurement)
ELEMENTWISE = {
    # one arithmetic operation per element
    "Add": 1, "Sub": 1, "Mul": 1, "Div": 1, "Neg": 1, "Abs": 1, "Max": 1, "Min": 1, "Relu": 1,
    "Sum": 1, "Mean": 1, "Pow": 1, "Sqrt": 1, "Reciprocal": 1, "Exp": 1, "Log": 1, "Floor": 1, "Ceil": 1,
    "Round": 1, "Sign": 1, "Mod": 1, "Equal": 1, "Greater": 1, "Less": 1, "GreaterOrEqual": 1,
    "LessOrEqual": 1, "And": 1, "Or": 1, "Xor": 1, "Not": 1, "Where": 1, "BitShift": 1, "IsNaN": 1, "IsInf": 1,
    # activations: a small fixed number of operations per element
    "Clip": 2, "LeakyRelu": 2, "PRelu": 2, "ThresholdedRelu": 1, "Elu": 3, "Selu": 4, "Celu": 4,
    "Sigmoid": 4, "HardSigmoid": 3, "HardSwish": 4, "Tanh": 5, "Softplus": 3, "Softsign": 3, "Mish": 8,
    "Erf": 5, "Gelu": 8, "FastGelu": 8, "BiasGelu": 9, "QuickGelu": 5, "Swish": 5, "Sin": 1, "Cos": 1,
}

# Data movement / shape bookkeeping: zero FLOPs, bytes moved still counted
ZERO_FLOP = {
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose", "Concat", "Split", "Slice", "Gather",
    "GatherElements", "GatherND", "ScatterND", "ScatterElements", "Expand", "Tile", "Pad", "Shape", "Size",
    "Constant", "ConstantOfShape", "Cast", "CastLike", "Dropout", "Range", "NonZero", "DepthToSpace",
    "SpaceToDepth", "Trilu", "OneHot", "Compress", "ReverseSequence", "EyeLike",
}
SHAPE_OPS = {"Shape", "Size", "Constant", "ConstantOfShape", "Range"}


def _attr(node, name, default=None):
    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _shape(g: Graph, name: str):
    t = g.tensors.get(name) if name else None
    return None if t is None else t.shape


def _numel(shape) -> int:
    return int(math.prod(shape)) if shape is not None else 0


def conv_macs(node, g: Graph, w_idx: int = 1):
    """N * Cout * prod(out spatial) * (Cin / group) * prod(kernel): any rank, grouped, depthwise, dilated."""
    w, y = _shape(g, node.input[w_idx]), _shape(g, node.output[0])
    if w is None or y is None:
        return None
    # W is (Cout, Cin/group, k...) ; Y is (N, Cout, spatial...)
    return _numel(y) * int(math.prod(w[1:]))


def conv_transpose_macs(node, g: Graph):
    x, w = _shape(g, node.input[0]), _shape(g, node.input[1])
    if x is None or w is None:
        return None
    # every input element is multiplied with Cout/group * prod(kernel) weights
    return _numel(x) * int(math.prod(w[1:]))


def gemm_macs(node, g: Graph):
    return gemm_macs_at(node, g, 1)


def matmul_macs(node, g: Graph, b_idx: int = 1):
    """numpy matmul semantics: 1-D operands promoted, batch dims broadcast; MACs = batch * M * N * K."""
    a, b = _shape(g, node.input[0]), _shape(g, node.input[b_idx])
    if a is None or b is None:
        return None
    a = [1] + list(a) if len(a) == 1 else list(a)
    b = list(b) + [1] if len(b) == 1 else list(b)
    m, k, n = a[-2], a[-1], b[-1]
    ba, bb = a[:-2], b[:-2]
    nb = max(len(ba), len(bb))
    ba, bb = [1] * (nb - len(ba)) + ba, [1] * (nb - len(bb)) + bb
    batch = math.prod(max(x, y) for x, y in zip(ba, bb))
    return batch * m * n * k


def einsum_macs(node, g: Graph):
    """Product of the sizes of every distinct index (output and contracted) = MACs of the contraction."""
    eq = _attr(node, "equation")
    shapes = [_shape(g, t) for t in node.input]
    if eq is None or any(s is None for s in shapes):
        return None
    eq = eq.decode() if isinstance(eq, bytes) else eq
    lhs = eq.replace(" ", "").split("->")[0].split(",")
    sizes: dict[str, int] = {}
    for term, shape in zip(lhs, shapes):
        if "..." in term:
            return None
        for ch, d in zip(term, shape):
            sizes[ch] = max(sizes.get(ch, 1), d)
    return int(math.prod(sizes.values()))


def gemm_macs_at(node, g: Graph, b_idx: int):
    a, b = _shape(g, node.input[0]), _shape(g, node.input[b_idx])
    if a is None or b is None:
        return None
    m, k = (a[1], a[0]) if _attr(node, "transA", 0) else (a[0], a[1])
    n = b[0] if _attr(node, "transB", 0) else b[1]
    return m * n * k


def _pool_kernel(node, g: Graph):
    ks = _attr(node, "kernel_shape")
    return int(math.prod(ks)) if ks else None


MAC_OPS = {"Conv": conv_macs, "ConvTranspose": conv_transpose_macs, "Gemm": gemm_macs,
           "MatMul": matmul_macs, "Einsum": einsum_macs,
           # integer / quantized forms: the same loops, weights at another input position
           "ConvInteger": conv_macs, "QLinearConv": lambda n, g: conv_macs(n, g, 3),
           "MatMulInteger": matmul_macs, "QLinearMatMul": lambda n, g: matmul_macs(n, g, 3),
           "com.microsoft:FusedMatMul": matmul_macs, "com.microsoft:FusedConv": conv_macs,
           "com.microsoft:QGemm": lambda n, g: gemm_macs_at(n, g, 3),
           "com.microsoft:DynamicQuantizeMatMul": matmul_macs, "com.microsoft:MatMulIntegerToFloat": matmul_macs}
# com.microsoft contrib ops that are a standard op under another name (ORT fusions and quantization emit them)
CONTRIB_ALIASES = {"com.microsoft:Gelu": "Gelu", "com.microsoft:FastGelu": "FastGelu", "com.microsoft:BiasGelu": "BiasGelu",
                   "com.microsoft:QuickGelu": "QuickGelu", "com.microsoft:QLinearAdd": "Add", "com.microsoft:QLinearMul": "Mul",
                   "com.microsoft:QLinearSigmoid": "Sigmoid", "com.microsoft:QLinearLeakyRelu": "LeakyRelu",
                   "com.microsoft:QLinearGlobalAveragePool": "GlobalAveragePool", "com.microsoft:QLinearConcat": "Concat",
                   "com.microsoft:QLinearAveragePool": "AveragePool", "com.microsoft:QLinearSoftmax": "Softmax",
                   "com.microsoft:SkipLayerNormalization": "LayerNormalization", "com.microsoft:BiasAdd": "Add"}
# per-element FLOPs of (de)quantization: scale and round/saturate; dynamic quantization also finds min/max
QUANT = {"QuantizeLinear": 2, "DequantizeLinear": 2, "DynamicQuantizeLinear": 4}


def node_cost(node, g: Graph) -> tuple[float, float] | None:
    """(flops, macs) of one node, or None when the op (or a shape it needs) is unknown."""
    op = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"
    op = CONTRIB_ALIASES.get(op, op)
    out = _shape(g, node.output[0]) if node.output else None
    if op in MAC_OPS:
        macs = MAC_OPS[op](node, g)
        return None if macs is None else (2.0 * macs, float(macs))
    if op in ZERO_FLOP:
        return 0.0, 0.0
    if op in CONTROL_FLOW:
        return control_flow_cost(node, g)
    if out is None:
        return None
    n_out = _numel(out)
    if op in QUANT:
        return float(QUANT[op] * n_out), 0.0
    if op in ELEMENTWISE:
        # variadic ops (Sum/Max/Min/Mean) do (inputs - 1) operations per element
        k = max(1, len([i for i in node.input if i]) - 1) if op in ("Sum", "Max", "Min", "Mean") else 1
        return float(ELEMENTWISE[op] * k * n_out), 0.0
    x = _shape(g, node.input[0]) if node.input else None
    n_in = _numel(x) if x is not None else None
    if op == "BatchNormalization":
        return 2.0 * n_out, 0.0            # inference: y = x * scale' + shift'
    if op in ("InstanceNormalization", "LayerNormalization", "GroupNormalization"):
        return 8.0 * n_out, 0.0            # mean, var, normalise, scale, shift
    if op == "LRN":
        return float(n_out * (2 * (_attr(node, "size", 1)) + 3)), 0.0
    if op in ("MaxPool", "AveragePool", "LpPool"):
        k = _pool_kernel(node, g)
        return (None if k is None else (float(n_out * k), 0.0))
    if op in ("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"):
        return (None if n_in is None else (float(n_in + n_out), 0.0))
    if op in ("ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceSumSquare", "ReduceLogSumExp", "ReduceLogSum", "ArgMax", "ArgMin"):
        return (None if n_in is None else (float(n_in + (n_out if op == "ReduceMean" else 0)), 0.0))
    if op in ("Softmax", "LogSoftmax"):
        return 5.0 * n_out, 0.0            # max, subtract, exp, sum, divide
    if op == "Resize":
        return 4.0 * n_out, 0.0            # up to bilinear: 4 weighted taps
    return None


ACTIVATIONS = {"Relu", "Clip", "LeakyRelu", "PRelu", "ThresholdedRelu", "Elu", "Selu", "Celu", "Sigmoid",
               "HardSigmoid", "HardSwish", "Tanh", "Softplus", "Softsign", "Mish", "Erf", "Gelu", "FastGelu",
               "BiasGelu", "QuickGelu", "Swish"}
NORMS = {"BatchNormalization", "InstanceNormalization", "LayerNormalization", "GroupNormalization", "LRN"}
POOLS = {"MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}


CONTROL_FLOW = {"If", "Loop", "Scan"}


def control_flow_cost(node, g: Graph):
    """If: the dearer branch (an upper bound); Loop: body x trip count when the count is a constant, else
    unknown; Scan: body x the scanned length. A body op of unknown cost makes the whole node unknown."""
    from .graph import subgraph_view
    bodies = {a.name: a.g for a in node.attribute if a.type == a.GRAPH}
    costs = {}
    for name, body in bodies.items():
        sub = subgraph_view(body, g)
        total = [0.0, 0.0]
        for n in sub.nodes:
            c = node_cost(n, sub)
            if c is None:
                return None
            total[0] += c[0]
            total[1] += c[1]
        costs[name] = total
    if node.op_type == "If":
        return tuple(max(costs.values(), key=lambda c: c[0])) if costs else None
    if node.op_type == "Loop":
        trips = g.const_values.get(node.input[0]) if node.input and node.input[0] else None
        if trips is None:
            return None          # trip count only known at run time: flagged, never guessed
        return costs["body"][0] * float(trips), costs["body"][1] * float(trips)
    # Scan: the scan inputs' leading (or scan_input_axes) dimension
    n_state = len(node.input) - int(_attr(node, "num_scan_inputs", 0))
    x = _shape(g, node.input[n_state]) if len(node.input) > n_state else None
    axes = _attr(node, "scan_input_axes", [0]) or [0]
    if x is None:
        return None
    steps = x[axes[0]]
    return costs["body"][0] * steps, costs["body"][1] * steps


def op_class(node, g: Graph) -> str:
    """Coarse class used for offload kernels and hardware speed-ups (conv, conv_depthwise, gemm, matmul ...)."""
    op = node.op_type
    if op in ("Conv", "ConvTranspose"):
        group = _attr(node, "group", 1)
        w = _shape(g, node.input[1])
        if group > 1 and w is not None and w[1] == 1:
            return "conv_depthwise"
        return "conv_grouped" if group > 1 else "conv"
    if op == "Gemm":
        return "gemm"
    if op in ("MatMul", "Einsum", "MatMulInteger", "QLinearMatMul", "FusedMatMul", "DynamicQuantizeMatMul"):
        return "matmul"
    if op in ("ConvInteger", "QLinearConv"):
        return "conv"
    if op in QUANT:
        return "quantize"
    if op in CONTROL_FLOW:
        return "control_flow"
    if op in POOLS:
        return "pool"
    if op in NORMS:
        return "norm"
    if op in ACTIVATIONS:
        return "activation"
    if op in ("Softmax", "LogSoftmax"):
        return "softmax"
    if op in ELEMENTWISE:
        return "elementwise"
    if op.startswith("Reduce") or op in ("ArgMax", "ArgMin"):
        return "reduce"
    if op in ZERO_FLOP:
        return "shape" if op in SHAPE_OPS else "data_movement"
    return "other"
