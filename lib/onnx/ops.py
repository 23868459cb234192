"""The op registry: every ONNX op (with its domain and aliases) registered once, with its cost formula and class.

As in PyTorch's torch/utils/flop_counter.py: one small formula per op, registered by a decorator, shapes in,
(FLOPs, MACs) out; a second registration of the same op is an error. Conventions (README "Cost model"):
- MACs: multiply-accumulates of Conv/ConvTranspose/Gemm/MatMul/Einsum/LSTM/GRU/RNN-class ops; FLOPs = 2 x MACs
  for them (bias additions are not counted, as in FlopCounterMode and torchvision's figures); recurrent ops
  add their gate arithmetic as FLOPs.
- Other ops: MACs = 0 and FLOPs = output (or input) elements x a per-element cost.
- Data-movement and shape ops cost 0 FLOPs but are *known* (their bytes still count).
- An op missing here is *unknown*: flops/macs stay empty (NaN), never silently 0.
Ops are keyed "OpType" for the default domain and "domain:OpType" for the others (com.microsoft ...).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable


from lib.onnx.graph import Graph
from lib.onnx.graph import attr as _attr
from lib.onnx.ops_ml import OPS as ML_OPS

Cost = tuple[float, float]          # (flops, macs)


@dataclass(frozen=True)
class Op:
    key: str
    op_class: str | Callable        # a class name, or f(node, g) -> class name (conv depthwise/grouped)
    cost: Callable                  # f(node, g) -> (flops, macs), or None when a shape it needs is unknown
    per_element: float | None = None    # FLOPs per output element, for ops costed that way (the FX side reads it)
    weight_input: int | None = None     # MAC ops: the operand whose element type the MACs are done in


REGISTRY: dict[str, Op] = {}


def register(*keys: str, op_class, per_element: float | None = None, weight_input: int | None = None):
    """Decorator: register a cost formula under one or more op keys."""
    def deco(cost):
        for k in keys:
            if k in REGISTRY:
                raise ValueError(f"op {k} is registered twice")
            REGISTRY[k] = Op(k, op_class, cost, per_element, weight_input)
        return cost
    return deco


def alias(key: str, of: str) -> None:
    """A contrib op that is a standard op under another name: same formula and class."""
    if key in REGISTRY:
        raise ValueError(f"op {key} is registered twice")
    REGISTRY[key] = Op(key, *(getattr(REGISTRY[of], f) for f in ("op_class", "cost", "per_element", "weight_input")))


def op_key(node) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"


def lookup(node) -> Op | None:
    return REGISTRY.get(op_key(node))


def node_cost(node, g: Graph) -> Cost | None:
    """(flops, macs) of one node, or None when the op (or a shape it needs) is unknown."""
    op = lookup(node)
    return None if op is None else op.cost(node, g)


def op_class(node, g: Graph) -> str:
    op = lookup(node)
    if op is None:
        return "other"
    return op.op_class(node, g) if callable(op.op_class) else op.op_class


def is_mac_op(node) -> bool:
    op = lookup(node)
    return op is not None and op.weight_input is not None


# ---------------------------------------------------------------- helpers

def _shape(g: Graph, node, idx: int, outputs: bool = False):
    names = node.output if outputs else node.input
    if idx >= len(names) or not names[idx]:
        return None
    t = g.tensors.get(names[idx])
    return None if t is None else t.shape


def _numel(shape) -> int:
    return math.prod(shape)


def _out_numel(node, g: Graph) -> int | None:
    s = _shape(g, node, 0, outputs=True)
    return None if s is None else _numel(s)


def _macs(m: int | None) -> Cost | None:
    return None if m is None else (2.0 * m, float(m))


# ---------------------------------------------------------------- MAC ops

def _conv_class(w_idx: int):
    def cls(node, g: Graph) -> str:
        group = _attr(node, "group", 1)
        w = _shape(g, node, w_idx)
        if group > 1 and w is not None and len(w) > 1 and w[1] == 1:
            return "conv_depthwise"
        return "conv_grouped" if group > 1 else "conv"
    return cls


def conv_macs(node, g: Graph, w_idx: int = 1) -> int | None:
    """N * Cout * prod(out spatial) * (Cin / group) * prod(kernel): any rank, grouped, depthwise, dilated."""
    w, y = _shape(g, node, w_idx), _shape(g, node, 0, outputs=True)
    if w is None or y is None:
        return None
    return _numel(y) * _numel(w[1:])        # W is (Cout, Cin/group, k...); Y is (N, Cout, spatial...)


def _conv_at(w_idx: int):
    return lambda node, g: _macs(conv_macs(node, g, w_idx))


register("Conv", "ConvInteger", "com.microsoft:FusedConv", op_class=_conv_class(1), weight_input=1)(_conv_at(1))
register("QLinearConv", op_class=_conv_class(3), weight_input=3)(_conv_at(3))


@register("ConvTranspose", op_class=_conv_class(1), weight_input=1)
def conv_transpose(node, g: Graph):
    """Every input element is multiplied with Cout/group * prod(kernel) weights."""
    x, w = _shape(g, node, 0), _shape(g, node, 1)
    return None if x is None or w is None else _macs(_numel(x) * _numel(w[1:]))


def matmul_macs(node, g: Graph, b_idx: int = 1) -> int | None:
    """numpy matmul semantics: 1-D operands promoted, batch dims broadcast; MACs = batch * M * N * K."""
    a, b = _shape(g, node, 0), _shape(g, node, b_idx)
    if a is None or b is None or not a or not b:
        return None
    a = [1] + list(a) if len(a) == 1 else list(a)
    b = list(b) + [1] if len(b) == 1 else list(b)
    m, k, n = a[-2], a[-1], b[-1]
    ba, bb = a[:-2], b[:-2]
    if ba == bb or not bb or not ba:    # the common cases: same batch dims, or one operand 2-D (broadcast)
        return math.prod(ba or bb) * m * n * k
    nb = max(len(ba), len(bb))
    ba, bb = [1] * (nb - len(ba)) + ba, [1] * (nb - len(bb)) + bb
    return math.prod(max(x, y) for x, y in zip(ba, bb)) * m * n * k


def _matmul_at(b_idx: int):
    return lambda node, g: _macs(matmul_macs(node, g, b_idx))


register("MatMul", "MatMulInteger", "com.microsoft:FusedMatMul", "com.microsoft:DynamicQuantizeMatMul",
         "com.microsoft:MatMulIntegerToFloat", op_class="matmul", weight_input=1)(_matmul_at(1))
register("QLinearMatMul", op_class="matmul", weight_input=3)(_matmul_at(3))


def _gemm_at(b_idx: int):
    def cost(node, g: Graph):
        a, b = _shape(g, node, 0), _shape(g, node, b_idx)
        if a is None or b is None or len(a) != 2 or len(b) != 2:
            return None
        m, k = (a[1], a[0]) if _attr(node, "transA", 0) else (a[0], a[1])
        n = b[0] if _attr(node, "transB", 0) else b[1]
        return _macs(m * n * k)
    return cost


register("Gemm", op_class="gemm", weight_input=1)(_gemm_at(1))
register("com.microsoft:QGemm", op_class="gemm", weight_input=3)(_gemm_at(3))


@register("Einsum", op_class="matmul", weight_input=1)
def einsum(node, g: Graph):
    """Product of the sizes of every distinct index (output and contracted) = MACs of the contraction."""
    eq = _attr(node, "equation")
    shapes = [_shape(g, node, i) for i in range(len(node.input))]
    if eq is None or any(s is None for s in shapes):
        return None
    eq = eq.decode() if isinstance(eq, bytes) else eq
    lhs = eq.replace(" ", "").split("->")[0].split(",")
    sizes: dict[str, int] = {}
    for term, shape in zip(lhs, shapes):
        if "..." in term or len(term) != len(shape):
            return None
        for ch, d in zip(term, shape):
            sizes[ch] = max(sizes.get(ch, 1), d)
    return _macs(math.prod(sizes.values()))


# gates and gate arithmetic per hidden unit and step (README "Cost model"): LSTM 3 sigmoid + 2 tanh + 4
# elementwise + 8 bias adds; GRU 2 sigmoid + 1 tanh + 5 elementwise + 6 bias adds; RNN 1 tanh + 2 bias adds
RECURRENT = {"LSTM": (4, 3 * 4 + 2 * 5 + 4 + 8), "GRU": (3, 2 * 4 + 5 + 5 + 6), "RNN": (1, 5 + 2),
             "DynamicQuantizeLSTM": (4, 3 * 4 + 2 * 5 + 4 + 8)}


def _recurrent(node, g: Graph):
    """MACs per direction and step = gates x hidden x (input + hidden), times steps x batch x directions.
    (ORT's DynamicQuantizeLSTM stores W as [directions, input, 4 x hidden]: the same loops, int8 weights.)"""
    x, w = _shape(g, node, 0), _shape(g, node, 1)
    if x is None or w is None or len(x) != 3 or len(w) != 3:
        return None
    gates, gate_flops = RECURRENT[node.op_type]
    hidden = _attr(node, "hidden_size") or w[1] // gates
    seq, batch = (x[1], x[0]) if _attr(node, "layout", 0) else (x[0], x[1])
    dirs = w[0]
    steps = seq * batch * dirs
    macs = steps * gates * hidden * (x[2] + hidden)
    return 2.0 * macs + float(steps * hidden * gate_flops), float(macs)


register("LSTM", "GRU", "RNN", "com.microsoft:DynamicQuantizeLSTM", op_class="recurrent", weight_input=1)(_recurrent)


# ---------------------------------------------------------------- per-element ops

def _per_element(k: float, variadic: bool = False):
    def cost(node, g: Graph):
        n = _out_numel(node, g)
        if n is None:
            return None
        # variadic ops (Sum/Max/Min/Mean) do (inputs - 1) operations per element
        ops = max(1, len([i for i in node.input if i]) - 1) if variadic else 1
        return float(k * ops * n), 0.0
    return cost


ELEMENTWISE = {  # FLOPs per output element (a documented convention, not a measurement)
    "Add": 1, "Sub": 1, "Mul": 1, "Div": 1, "Neg": 1, "Abs": 1, "Pow": 1, "Sqrt": 1, "Reciprocal": 1, "Exp": 1,
    "Log": 1, "Floor": 1, "Ceil": 1, "Round": 1, "Sign": 1, "Mod": 1, "Equal": 1, "Greater": 1, "Less": 1,
    "GreaterOrEqual": 1, "LessOrEqual": 1, "And": 1, "Or": 1, "Xor": 1, "Not": 1, "Where": 1, "BitShift": 1,
    "IsNaN": 1, "IsInf": 1, "Sin": 1, "Cos": 1, "Tan": 1, "Asin": 1, "Acos": 1, "Atan": 1, "Sinh": 1, "Cosh": 1,
    "Asinh": 1, "Acosh": 1, "Atanh": 1, "BitwiseAnd": 1, "BitwiseOr": 1, "BitwiseXor": 1, "BitwiseNot": 1,
}
VARIADIC = {"Sum": 1, "Mean": 1, "Max": 1, "Min": 1}
ACTIVATIONS = {
    "Relu": 1, "ThresholdedRelu": 1, "Clip": 2, "LeakyRelu": 2, "PRelu": 2, "Elu": 3, "Selu": 4, "Celu": 4,
    "Sigmoid": 4, "HardSigmoid": 3, "HardSwish": 4, "Tanh": 5, "Softplus": 3, "Softsign": 3, "Mish": 8, "Erf": 5,
    "Gelu": 8, "Shrink": 2, "com.microsoft:FastGelu": 8, "com.microsoft:BiasGelu": 9, "com.microsoft:QuickGelu": 5,
    "Swish": 5,
}
NORMS = {"BatchNormalization": 2,           # inference: y = x * scale' + shift'
         "InstanceNormalization": 8, "LayerNormalization": 8, "GroupNormalization": 8,   # mean, var, normalise,
         "RMSNormalization": 6, "com.microsoft:SimplifiedLayerNormalization": 6,       # scale, shift
         "com.microsoft:SkipLayerNormalization": 9, "com.microsoft:SkipSimplifiedLayerNormalization": 7}
QUANT = {"QuantizeLinear": 2, "DequantizeLinear": 2, "DynamicQuantizeLinear": 4}   # scale, round/saturate; min/max
SOFTMAX = {"Softmax": 5, "LogSoftmax": 5}   # max, subtract, exp, sum, divide

for _table, _cls in ((ELEMENTWISE, "elementwise"), (ACTIVATIONS, "activation"), (NORMS, "norm"),
                     (QUANT, "quantize"), (SOFTMAX, "softmax")):
    for _key, _k in _table.items():
        register(_key, op_class=_cls, per_element=_k)(_per_element(_k))
for _key, _k in VARIADIC.items():
    register(_key, op_class="elementwise", per_element=_k)(_per_element(_k, variadic=True))

@register("LRN", op_class="norm")
def lrn(node, g: Graph):
    n = _out_numel(node, g)
    return None if n is None else (float(n * (2 * _attr(node, "size", 1) + 3)), 0.0)


@register("MaxPool", "AveragePool", "LpPool", op_class="pool")
def window_pool(node, g: Graph):
    """Outputs x the window's taps."""
    n, ks = _out_numel(node, g), _attr(node, "kernel_shape")
    return None if n is None or not ks else (float(n * math.prod(ks)), 0.0)


def _in_plus_out(node, g: Graph):
    x, n = _shape(g, node, 0), _out_numel(node, g)
    return None if x is None or n is None else (float(_numel(x) + n), 0.0)


register("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", op_class="pool")(_in_plus_out)  # reduce in, scale out
register("ReduceMean", op_class="reduce")(_in_plus_out)


@register("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
          "ReduceLogSumExp", "ReduceLogSum", "ArgMax", "ArgMin", op_class="reduce")
def reduce_(node, g: Graph):
    x = _shape(g, node, 0)
    return None if x is None else (float(_numel(x)), 0.0)


register("Resize", "Upsample", op_class="data_movement", per_element=4)(_per_element(4))   # up to bilinear: 4 taps


# ---------------------------------------------------------------- zero-FLOP ops (bytes still count)

def _free(node, g: Graph) -> Cost:
    return 0.0, 0.0


register("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose", "Concat", "Split", "Slice",
         "Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements", "Scatter", "Expand", "Tile",
         "Pad", "Cast", "CastLike", "Dropout", "NonZero", "DepthToSpace", "SpaceToDepth", "Trilu", "OneHot",
         "Compress", "ReverseSequence", "EyeLike", "SequenceAt", "SequenceConstruct", "SplitToSequence",
         "ConcatFromSequence", "SequenceInsert", "SequenceEmpty", "SequenceLength", "TopK", "NonMaxSuppression",
         "Optional", "OptionalGetElement", "OptionalHasElement", "CumSum", "Unique",
         op_class="data_movement", per_element=0)(_free)
register("Shape", "Size", "Constant", "ConstantOfShape", "Range", op_class="shape", per_element=0)(_free)
SHAPE_OPS = {k for k, op in REGISTRY.items() if op.op_class == "shape"}


# ---------------------------------------------------------------- control flow

@register("If", "Loop", "Scan", op_class="control_flow")
def control_flow(node, g: Graph):
    """Cost of the body that runs (lib/onnx/control_flow.py decides which branch, how many iterations)."""
    from lib.onnx.control_flow import control_flow_cost
    return control_flow_cost(node, g)


# com.microsoft contrib ops that are a standard op under another name (ORT fusions and quantization emit them)
for _key, _of in {"com.microsoft:Gelu": "Gelu", "com.microsoft:QLinearAdd": "Add", "com.microsoft:QLinearMul": "Mul",
                  "com.microsoft:QLinearSigmoid": "Sigmoid", "com.microsoft:QLinearLeakyRelu": "LeakyRelu",
                  "com.microsoft:QLinearSoftmax": "Softmax", "com.microsoft:BiasAdd": "Add",
                  "com.microsoft:QLinearConcat": "Concat", "com.microsoft:QLinearGlobalAveragePool": "GlobalAveragePool",
                  "com.microsoft:QLinearAveragePool": "AveragePool"}.items():
    alias(_key, _of)

# classical ML (ai.onnx.ml) and random ops: their formulas live in lib/onnx/ops_ml.py
for _key, (_cls, _cost) in ML_OPS.items():
    register(_key, op_class=_cls)(_cost)


def markdown_table() -> str:
    """The README's table of per-element costs, generated from the registry (tests check the README has it)."""
    rows: dict[tuple[str, float], list[str]] = {}
    for key, op in REGISTRY.items():
        if op.per_element is not None and op.per_element > 0:
            rows.setdefault((op.op_class, op.per_element), []).append(key.split(":")[-1])
    lines = ["| op class | FLOPs per output element | ops |", "| --- | --- | --- |"]
    for (cls, k), ops in sorted(rows.items()):
        lines.append(f"| {cls} | {k:g} | {', '.join(sorted(set(ops)))} |")
    return "\n".join(lines)
