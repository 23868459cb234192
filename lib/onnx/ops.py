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

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from onnx import helper, numpy_helper

from lib.onnx.control_flow import control_flow_cost
from lib.onnx.ops_ml import OPS as ML_OPS
from lib.onnx.reader import attr as _attr

Cost = tuple[float, float]          # (flops, macs)
# g below: the indexed graph (lib.onnx.graph.Graph: .tensors name -> TensorInfo with .shape, .value_of(name))


@dataclass(frozen=True)
class Op:
    key: str
    op_class: str | Callable        # a class name, or f(node, g) -> class name (conv depthwise/grouped)
    cost: Callable                  # f(node, g) -> (flops, macs), or None when a shape it needs is unknown;
    #                                 control flow: f(node, g, bodies), bodies walked by lib/onnx/costs.py
    per_element: float | None = None    # FLOPs per output element, for ops costed that way (the FX side reads it)
    weight_input: int | None = None     # MAC ops: the operand whose element type the MACs are done in
    weight_axis: Callable | None = None  # f(node) -> the axis of that operand a CPU kernel loads in vectors (a
    #                                     conv's output channels, a MatMul's columns: lib/onnx/underflow.py)
    evaluate: Callable | None = None    # f(node, input values, input shape) -> output values (shapes.py's
    #                                     static value propagation; None: onnx's reference evaluator)
    made_elements: Callable | None = None   # f(input values) -> elements evaluate() would build (checked first)
    view: bool = False              # moves no data (its output is its input, reshaped): no traffic
    pick: bool = False              # reads about what it writes (Gather, Slice): traffic 2 x output
    int8: bool = False              # an integer kernel (the latency model's '<class>@int8' keys)
    stored_chain: bool = False      # on constants, a no-op link of a quantized weight's chain: stored bytes
    random: bool = False            # draws random numbers: never folded into a constant or propagated
    control_flow: bool = False      # runs subgraph bodies (If, Loop, Scan)
    reads_shape: bool = False       # reads its input's shape alone, never its values (Shape, Size)
    dtype_attribute: bool = False   # its attribute `dtype` is its output's element type (validate checks it)
    rearranges: bool = False        # moves or reshapes elements, no arithmetic, same element type
    reduces: bool = False           # folds its input along axes (Reduce*, global pools)
    along_axis: bool = False        # works along the one axis its `axis` attribute names (Softmax, ArgMax)
    softmax_exp: bool = False       # takes exp(x - max) along its axis (Softmax, LogSoftmax)
    exponential: bool = False       # its kernel computes exponentials (Exp, Softmax, LogSoftmax)
    typed_by_input: bool = False    # its output's element type is not the one it computes in: its input's is
    qdq_fused: bool = False         # DequantizeLinear -> op -> QuantizeLinear runs as one integer kernel in ORT
    shape_by_run: bool = False      # ORT's symbolic inference gets its output's shape wrong: take a run's
    like: bool = False              # its input gives its output's shape and type alone (RandomNormalLike): no read
    quantizes: bool = False         # (de)quantizes 8-bit tensors around an op ORT runs as an integer kernel


FLAGS = {   # flag -> what it tells its users (docs/op-registry.md's table is generated from this)
    "view": "moves no data: the latency model counts no traffic",
    "pick": "reads about what it writes: the latency model counts 2 x its output",
    "int8": "an integer kernel: the latency model's '<class>@int8' parameters",
    "stored_chain": "on weights, a link of a quantized weight's no-op chain: its output counts as stored bytes",
    "random": "draws random numbers: never folded into a constant or propagated as a value",
    "control_flow": "runs subgraph bodies: the walk (lib/onnx/costs.py) costs them and hands over their totals",
    "reads_shape": "reads its input's shape alone: a source of shape arithmetic",
    "dtype_attribute": "its attribute dtype is its output's element type: validation checks the op can make it",
    "rearranges": "moves or reshapes elements, no arithmetic: ORT may run one as another (attribution)",
    "reduces": "folds its input along axes: the longest such sum bounds a split's exactness check",
    "along_axis": "works along the axis its attribute names: the kernel model's stride feature (with reduces)",
    "softmax_exp": "takes exp(x - max) along its axis: 02 measures the share that underflows (exp_underflow)",
    "exponential": "its kernel computes exponentials: it carries its node's exp_underflow (the Exp of an fp16 "
                   "Softmax ORT inlines, not its ReduceMax)",
    "typed_by_input": "computes in its input's element type, not its output's: the node's dtype column",
    "qdq_fused": "fed by DequantizeLinear of 8-bit tensors, ORT runs it as an integer kernel (QLinearConv ...)",
    "shape_by_run": "ORT's symbolic shape inference gets its output's shape wrong: 02 takes it from a run",
    "like": "its input gives its output's shape (and type) alone: its values are not read, no bytes in",
    "quantizes": "(de)quantizes around the op ORT runs as an integer kernel: never that kernel's anchor (attribution)",
}
REGISTRY: dict[str, Op] = {}


def unknown_cost(node, g) -> None:
    """The cost of an op registered for its flags alone (no formula yet): unknown."""
    return None


def register(*keys: str, op_class, per_element: float | None = None, weight_input: int | None = None, **flags):
    """Decorator: register a cost formula under one or more op keys; flags: FLAGS (and weight_axis) as keywords.
    An entry registered for its flags alone (cost unknown_cost) may be given its formula later: its flags stay."""
    def deco(cost):
        for k in keys:
            old = REGISTRY.get(k)
            if old is not None and old.cost is not unknown_cost:
                raise ValueError(f"op {k} is registered twice")
            kept = {f: True for f in FLAGS if old is not None and getattr(old, f)}
            REGISTRY[k] = Op(k, op_class, cost, per_element, weight_input, **{**kept, **flags})
        return cost
    return deco


def flag(*keys: str, **flags) -> None:
    """Set flags on registered ops (registering an op of unknown cost, class 'other', that is not there)."""
    for k in keys:
        op = REGISTRY.get(k) or Op(k, "other", unknown_cost)
        REGISTRY[k] = dataclasses.replace(op, **flags)


def evaluates(*keys: str):
    """Decorator: the value evaluator of registered ops (static value propagation, lib/onnx/shapes.py)."""
    def deco(fn):
        for k in keys:
            REGISTRY[k] = dataclasses.replace(REGISTRY[k], evaluate=fn)
        return fn
    return deco


def alias(key: str, of: str) -> None:
    """A contrib op that is a standard op under another name: same formula, class and flags (its inputs differ:
    no value evaluator)."""
    if key in REGISTRY:
        raise ValueError(f"op {key} is registered twice")
    REGISTRY[key] = dataclasses.replace(REGISTRY[of], key=key, evaluate=None, made_elements=None)


def names_with(flag_name: str) -> frozenset[str]:
    """Op types (any domain) whose entry carries the flag: the sets that membership tests over op-type columns
    and node tables use (e.g. `CONTROL_FLOW.isdisjoint(table.ops)`, in C at 200k nodes). Complete once this
    module is imported (it imports the modules that register more ops, lib/onnx/ops_ml.py, at its end)."""
    return frozenset(k.rpartition(":")[2] for k, op in REGISTRY.items() if getattr(op, flag_name))


def op_key(node) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"


def lookup(node) -> Op | None:
    return REGISTRY.get(op_key(node))


def op_class(node, g) -> str:
    op = lookup(node)
    if op is None:
        return "other"
    return op.op_class(node, g) if callable(op.op_class) else op.op_class


def is_mac_op(node) -> bool:
    op = lookup(node)
    return op is not None and op.weight_input is not None


# ---------------------------------------------------------------- helpers

def _shape(g, node, idx: int, outputs: bool = False):
    names = node.output if outputs else node.input
    if idx >= len(names) or not names[idx]:
        return None
    t = g.tensors.get(names[idx])
    return None if t is None else t.shape


def _numel(shape) -> int:
    return math.prod(shape)


def _out_numel(node, g) -> int | None:
    s = _shape(g, node, 0, outputs=True)
    return None if s is None else _numel(s)


def _macs(m: int | None) -> Cost | None:
    return None if m is None else (2.0 * m, float(m))


# ---------------------------------------------------------------- MAC ops

def _conv_class(w_idx: int):
    def cls(node, g) -> str:
        group = _attr(node, "group", 1)
        w = _shape(g, node, w_idx)
        if group > 1 and w is not None and len(w) > 1 and w[1] == 1:
            return "conv_depthwise"
        return "conv_grouped" if group > 1 else "conv"
    return cls


def conv_macs(node, g, w_idx: int = 1) -> int | None:
    """N * Cout * prod(out spatial) * (Cin / group) * prod(kernel): any rank, grouped, depthwise, dilated."""
    w, y = _shape(g, node, w_idx), _shape(g, node, 0, outputs=True)
    if w is None or y is None:
        return None
    return _numel(y) * _numel(w[1:])        # W is (Cout, Cin/group, k...); Y is (N, Cout, spatial...)


def _conv_at(w_idx: int):
    return lambda node, g: _macs(conv_macs(node, g, w_idx))


register("Conv", "ConvInteger", "com.microsoft:FusedConv", op_class=_conv_class(1), weight_input=1,
         weight_axis=lambda node: 0)(_conv_at(1))
register("QLinearConv", op_class=_conv_class(3), weight_input=3)(_conv_at(3))


@register("ConvTranspose", op_class=_conv_class(1), weight_input=1, weight_axis=lambda node: 1)
def conv_transpose(node, g):
    """Every input element is multiplied with Cout/group * prod(kernel) weights."""
    x, w = _shape(g, node, 0), _shape(g, node, 1)
    return None if x is None or w is None else _macs(_numel(x) * _numel(w[1:]))


def matmul_macs(node, g, b_idx: int = 1) -> int | None:
    """numpy matmul semantics: 1-D operands promoted, batch dims broadcast; MACs = batch * M * N * K."""
    return _matmul_of(_shape(g, node, 0), _shape(g, node, b_idx))


def _matmul_of(a, b) -> int | None:
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


register("MatMul", "MatMulInteger", "com.microsoft:DynamicQuantizeMatMul",
         "com.microsoft:MatMulIntegerToFloat", op_class="matmul", weight_input=1,
         weight_axis=lambda node: -1)(_matmul_at(1))


@register("com.microsoft:FusedMatMul", op_class="matmul", weight_input=1,
          weight_axis=lambda node: -2 if _attr(node, "transB", 0) else -1)
def fused_matmul(node, g):
    """ORT's MatMul with its operands' transposes folded in (q @ k^T of attention: transB = 1): transBatch moves
    the first dim behind the other batch dims, trans swaps the last two; then MatMul's count."""
    def operand(i, side):
        s = _shape(g, node, i)
        if s is None:
            return None
        s = list(s)
        if len(s) >= 3 and _attr(node, f"transBatch{side}", 0):
            s = s[1:-1] + [s[0], s[-1]]
        if len(s) >= 2 and _attr(node, f"trans{side}", 0):
            s[-2], s[-1] = s[-1], s[-2]
        return s
    return _macs(_matmul_of(operand(0, "A"), operand(1, "B")))
register("QLinearMatMul", op_class="matmul", weight_input=3)(_matmul_at(3))


def _gemm_at(b_idx: int):
    def cost(node, g):
        a, b = _shape(g, node, 0), _shape(g, node, b_idx)
        if a is None or b is None or len(a) != 2 or len(b) != 2:
            return None
        m, k = (a[1], a[0]) if _attr(node, "transA", 0) else (a[0], a[1])
        n = b[0] if _attr(node, "transB", 0) else b[1]
        return _macs(m * n * k)
    return cost


register("Gemm", "com.microsoft:FusedGemm", op_class="gemm", weight_input=1,
         weight_axis=lambda node: 0 if _attr(node, "transB", 0) else -1)(_gemm_at(1))
register("com.microsoft:QGemm", op_class="gemm", weight_input=3)(_gemm_at(3))


@register("Einsum", op_class="matmul", weight_input=1)
def einsum(node, g):
    """MACs of the contraction as ONNX Runtime runs it: operands taken left to right in pairs, each pair costing
    the product of the sizes of the indices the two hold (an index no later operand or the output needs is summed
    out of its operand first, without multiplies); one operand (a transpose, a trace) multiplies nothing."""
    eq = _attr(node, "equation")
    shapes = [_shape(g, node, i) for i in range(len(node.input))]
    if eq is None or any(s is None for s in shapes):
        return None
    terms = _einsum_terms(eq.decode() if isinstance(eq, bytes) else eq, shapes)
    if terms is None:
        return None
    lhs, out, sizes = terms
    if len(lhs) == 1:
        return _macs(0)
    macs, held = 0, set(lhs[0]) & set(out).union(*lhs[1:])
    for i, term in enumerate(lhs[1:], start=1):
        later = set(out).union(*lhs[i + 1:])
        own = set(term) & (later | held)
        both = held | own
        macs += math.prod(sizes[ch] for ch in both)
        held = both & later
    return _macs(macs)


def _einsum_terms(eq: str, shapes: list) -> tuple[list[str], str, dict[str, int]] | None:
    """(input terms, output term, size per index) of an Einsum equation with its operands' shapes; '...' spelled
    out as index letters of their own (broadcast from the right, as numpy does). None where the equation does not
    fit the shapes."""
    eq = eq.replace(" ", "")
    lhs_text, arrow, out = eq.partition("->")
    lhs = lhs_text.split(",")
    if len(lhs) != len(shapes):
        return None
    ell_rank = max([len(sh) - len(t.replace("...", "")) for t, sh in zip(lhs, shapes) if "..." in t], default=0)
    spare = "".join(map(chr, range(0x100, 0x100 + ell_rank)))      # letters no equation uses
    terms = [t.replace("...", spare[ell_rank - (len(sh) - len(t) + 3):]) if "..." in t else t
             for t, sh in zip(lhs, shapes)]
    if not arrow:       # implicit output: the broadcast dims, then the indices seen once, in alphabetical order
        once = sorted(ch for ch in set(lhs_text) if lhs_text.count(ch) == 1 and ch.isalpha())
        out = spare + "".join(once)
    out = out.replace("...", spare)
    sizes: dict[str, int] = {}
    for term, shape in zip(terms, shapes):
        if len(term) != len(shape):
            return None
        for ch, d in zip(term, shape):
            sizes[ch] = max(sizes.get(ch, 1), d)
    return terms, out, sizes


def _attention(b: int, heads: int, s_q: int, s_kv: int, d_qk: int, d_v: int, proj: int = 0) -> Cost:
    """Scaled dot-product attention: Q K^T and the weighted sum of V (MACs), softmax over each score (its
    per-element FLOPs), plus `proj` MACs of a fused input projection."""
    scores = b * heads * s_q * s_kv
    macs = proj + scores * (d_qk + d_v)
    return 2.0 * macs + SOFTMAX["Softmax"] * scores, float(macs)


@register("com.microsoft:Attention", "com.microsoft:QAttention", op_class="matmul", weight_input=1)
def ms_attention(node, g):
    """ORT's fused BERT attention (QAttention: its int8 form, quantize_dynamic's): input (B, S, in) x weights (in,
    q + k + v hidden) (+ bias), num_heads heads over the past (input 4, QAttention's 8: 2 x B x heads x past x
    head size) and the S new positions."""
    x, w = _shape(g, node, 0), _shape(g, node, 1)
    heads = _attr(node, "num_heads")
    if x is None or w is None or len(x) != 3 or len(w) != 2 or not heads:
        return None
    sizes = list(_attr(node, "qkv_hidden_sizes") or []) or [w[1] // 3] * 3
    past = _shape(g, node, 8 if node.op_type == "QAttention" else 4)
    total = x[1] + (past[3] if past is not None and len(past) == 5 else 0)
    return _attention(x[0], heads, x[1], total, sizes[0] // heads, sizes[2] // heads, proj=x[0] * x[1] * x[2] * w[1])


@register("Attention", "com.microsoft:MultiHeadAttention", op_class="matmul")
def sdpa(node, g):
    """ONNX Attention (opset 23) and ORT's MultiHeadAttention: Q, K, V given (no projection); 4-D (B, heads, S,
    head size) or 3-D (B, S, hidden) with the head counts as attributes, key and value 3-D or 4-D (a 3-D query
    over a 4-D cross-attention cache: ORT's Whisper and BART decoders); a past key (input 4 of Attention, 6 of
    MultiHeadAttention: B x kv heads x past x head size) adds to the positions attended."""
    q, k, v = (_shape(g, node, i) for i in range(3))
    if q is None or k is None or v is None or len(q) not in (3, 4) or len(k) not in (3, len(q), 4) \
            or len(v) != len(k):
        return None
    past = _shape(g, node, 4 if node.op_type == "Attention" else 6)
    past_len = past[2] if past is not None and len(past) == 4 else 0
    if len(q) == 4:
        return _attention(q[0], q[1], q[2], k[2] + past_len, q[3], v[3])
    heads = _attr(node, "q_num_heads") or _attr(node, "num_heads")
    kv_heads = _attr(node, "kv_num_heads") or heads
    if not heads:
        return None
    if len(k) == 4:
        return _attention(q[0], heads, q[1], k[2] + past_len, q[2] // heads, v[3])
    return _attention(q[0], heads, q[1], k[1] + past_len, q[2] // heads, v[2] // kv_heads)


@register("com.microsoft:MatMulNBits", op_class="matmul", weight_input=1)
def matmul_nbits(node, g):
    """A (..., K) x B quantized to `bits` in blocks (onnxruntime's 4-bit LLM weights): rows of A x N x K, N and K
    its attributes."""
    a, n, k = _shape(g, node, 0), _attr(node, "N"), _attr(node, "K")
    return None if a is None or not n or not k else _macs(_numel(a[:-1]) * n * k)


@register("com.microsoft:GroupQueryAttention", op_class="matmul")
def group_query_attention(node, g):
    """onnxruntime-genai's attention: query (B, S, heads x head size), or Q, K and V packed in it (no key input);
    num_heads query heads over the total sequence, present_key's (output 1: B x kv heads x total x head size)."""
    q, present = _shape(g, node, 0), _shape(g, node, 1, outputs=True)
    heads, kv_heads = _attr(node, "num_heads"), _attr(node, "kv_num_heads")
    if q is None or present is None or len(q) != 3 or len(present) != 4 or not heads:
        return None
    packed = not (len(node.input) > 1 and node.input[1])
    head = q[2] // (heads + 2 * (kv_heads or heads)) if packed else q[2] // heads
    return _attention(q[0], heads, q[1], present[2], head, head)


@register("RoiAlign", op_class="pool")
def roi_align(node, g):
    """Per output element, sampling_ratio^2 samples (2 x 2 when adaptive, 0) of 4-tap bilinear interpolation
    (8 FLOPs each), averaged (a documented convention)."""
    n = _out_numel(node, g)
    s = _attr(node, "sampling_ratio", 0) or 2
    return None if n is None else (float(n * s * s * 9), 0.0)


GRID_SAMPLE = {"bilinear": 8, "linear": 8, "nearest": 1, "bicubic": 32, "cubic": 32}   # taps x (multiply, add)


@register("GridSample", op_class="data_movement")
def grid_sample(node, g):
    """Per output element, its interpolation: 4 taps bilinear, 16 bicubic, a copy nearest."""
    n = _out_numel(node, g)
    mode = _attr(node, "mode", "bilinear")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    return None if n is None else (float(n * GRID_SAMPLE.get(mode, 8)), 0.0)


@register("STFT", op_class="reduce")         # sums over each frame: its FLOPs, no MACs
def stft(node, g):
    """A DFT of frame_length samples per frame and output bin, as ONNX Runtime computes it: radix-2 FFT for a
    power-of-two length (5 n log2 n FLOPs per transform, the usual count), else the direct sum (8 FLOPs per
    sample and bin: a complex multiply-add). Output (B, frames, bins, 2); no MACs (counted as FLOPs)."""
    y = _shape(g, node, 0, outputs=True)
    if y is None or len(y) != 4:
        return None
    n = (_shape(g, node, 2) or [None])[0] if len(node.input) > 2 and node.input[2] else None
    length = g.value_of(node.input[3]) if len(node.input) > 3 and node.input[3] else None
    n = int(length) if length is not None else n
    if not n:
        return None
    return y[0] * y[1] * _fft_flops(n, y[2]), 0.0


def _fft_flops(n: int, bins: int) -> float:
    """One transform of n samples into `bins` outputs as ONNX Runtime computes it: radix-2 FFT for a power-of-two
    length (5 n log2 n, the usual count), else the direct sum (8 FLOPs per sample and bin)."""
    return 5.0 * n * math.log2(n) if n & (n - 1) == 0 else 8.0 * n * bins


@register("DFT", op_class="reduce")
def dft(node, g):
    """One transform per signal along `axis` (opset 20: input 2, default -2; before: the attribute, default 1) of
    dft_length samples (input 1, else the axis' length): input (..., n, 1 or 2), output (..., bins, 2)."""
    x, y = _shape(g, node, 0), _shape(g, node, 0, outputs=True)
    if x is None or y is None or len(x) != len(y) or len(x) < 3:
        return None
    opset = next((o.version for o in g.model.opset_import if o.domain in ("", "ai.onnx")), 17)
    axis = g.value_of(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    axis = int(axis) if axis is not None else _attr(node, "axis", -2 if opset >= 20 else 1)
    axis %= len(x)
    length = g.value_of(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    n = int(length) if length is not None else x[axis]
    if not n:
        return None
    transforms = _numel(x) // (x[axis] * x[-1])
    return transforms * _fft_flops(n, y[axis]), 0.0


register("Col2Im", op_class="data_movement")(lambda node, g: None if _shape(g, node, 0) is None
                                              else (float(_numel(_shape(g, node, 0))), 0.0))   # adds each patch value


@register("DeformConv", op_class=_conv_class(1), weight_input=1, weight_axis=lambda node: 0)
def deform_conv(node, g):
    """A convolution's MACs over samples taken at learned offsets: per output position, input channel and kernel
    tap one bilinear sample (4 taps: 8 FLOPs) and its mask multiply, 9 FLOPs."""
    x, w, y = _shape(g, node, 0), _shape(g, node, 1), _shape(g, node, 0, outputs=True)
    macs = conv_macs(node, g, 1)
    if macs is None or x is None or len(x) < 3:
        return None
    samples = y[0] * _numel(y[2:]) * x[1] * _numel(w[2:])
    return 2.0 * macs + 9.0 * samples, float(macs)


@register("Det", op_class="reduce")
def det(node, g):
    """An LU decomposition per (..., n, n) matrix: 2/3 n^3."""
    x = _shape(g, node, 0)
    return None if x is None or len(x) < 2 else (_numel(x[:-2]) * 2.0 * x[-1] ** 3 / 3.0, 0.0)


@register("TfIdfVectorizer", op_class="reduce")
def tfidf(node, g):
    """Each input token starts up to max_gram_length n-gram lookups; each output count is weighted once."""
    x, n = _shape(g, node, 0), _out_numel(node, g)
    return None if x is None or n is None else (float(_numel(x) * _attr(node, "max_gram_length", 1) + n), 0.0)


# gates and gate arithmetic per hidden unit and step (README "Cost model"): LSTM 3 sigmoid + 2 tanh + 4
# elementwise + 8 bias adds; GRU 2 sigmoid + 1 tanh + 5 elementwise + 6 bias adds; RNN 1 tanh + 2 bias adds
RECURRENT = {"LSTM": (4, 3 * 4 + 2 * 5 + 4 + 8), "GRU": (3, 2 * 4 + 5 + 5 + 6), "RNN": (1, 5 + 2),
             "DynamicQuantizeLSTM": (4, 3 * 4 + 2 * 5 + 4 + 8)}


def _recurrent(node, g):
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
    def cost(node, g):
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
    # x * cos + rotate(x) * sin (opset 23, and ORT's contrib form that LLM exports carry)
    "RotaryEmbedding": 3, "com.microsoft:RotaryEmbedding": 3, "com.microsoft:BiasDropout": 2,
    # window functions: a cosine term or two per sample (audio front ends); the mel filter bank: a triangle
    "HannWindow": 3, "HammingWindow": 3, "BlackmanWindow": 5, "MelWeightMatrix": 2,
    "AffineGrid": 6,            # per output coordinate: a row of the 2x3 (3x4) affine matrix
}
VARIADIC = {"Sum": 1, "Mean": 1, "Max": 1, "Min": 1}
ACTIVATIONS = {
    "Relu": 1, "ThresholdedRelu": 1, "Clip": 2, "LeakyRelu": 2, "PRelu": 2, "Elu": 3, "Selu": 4, "Celu": 4,
    "Sigmoid": 4, "HardSigmoid": 3, "HardSwish": 4, "Tanh": 5, "Softplus": 3, "Softsign": 3, "Mish": 8, "Erf": 5,
    "Gelu": 8, "Shrink": 2, "com.microsoft:FastGelu": 8, "com.microsoft:BiasGelu": 9, "com.microsoft:QuickGelu": 5,
    "Swish": 5, "com.microsoft:BiasSplitGelu": 11,    # bias add on both halves, Gelu on one, their product
}
NORMS = {"BatchNormalization": 2,           # inference: y = x * scale' + shift'
         "InstanceNormalization": 8, "LayerNormalization": 8, "GroupNormalization": 8,   # mean, var, normalise,
         "RMSNormalization": 6, "com.microsoft:SimplifiedLayerNormalization": 6,       # scale, shift
         "com.microsoft:SkipLayerNormalization": 9, "com.microsoft:SkipSimplifiedLayerNormalization": 7,
         "com.microsoft:EmbedLayerNormalization": 10,       # word + position (+ segment) embeddings, then LayerNorm
         "SimplifiedLayerNormalization": 6,                 # onnxruntime-genai writes it in the default domain
         "MeanVarianceNormalization": 8, "LpNormalization": 4,
         "com.microsoft:GroupNorm": 8, "com.microsoft:SkipGroupNorm": 9}   # ORT's fusions of diffusion UNets
QUANT = {"QuantizeLinear": 2, "DequantizeLinear": 2, "DynamicQuantizeLinear": 4,   # scale, round/saturate; min/max
         "com.microsoft:GatherBlockQuantized": 2}       # the rows it gathers, dequantized
SOFTMAX = {"Softmax": 5, "LogSoftmax": 5}   # max, subtract, exp, sum, divide

for _table, _cls in ((ELEMENTWISE, "elementwise"), (ACTIVATIONS, "activation"), (NORMS, "norm"),
                     (QUANT, "quantize"), (SOFTMAX, "softmax")):
    for _key, _k in _table.items():
        register(_key, op_class=_cls, per_element=_k)(_per_element(_k))
for _key, _k in VARIADIC.items():
    register(_key, op_class="elementwise", per_element=_k)(_per_element(_k, variadic=True))

@register("LRN", op_class="norm")
def lrn(node, g):
    n = _out_numel(node, g)
    return None if n is None else (float(n * (2 * _attr(node, "size", 1) + 3)), 0.0)


@register("MaxPool", "AveragePool", "LpPool", op_class="pool")
def window_pool(node, g):
    """Outputs x the window's taps."""
    n, ks = _out_numel(node, g), _attr(node, "kernel_shape")
    return None if n is None or not ks else (float(n * math.prod(ks)), 0.0)


def _in_plus_out(node, g):
    x, n = _shape(g, node, 0), _out_numel(node, g)
    return None if x is None or n is None else (float(_numel(x) + n), 0.0)


register("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", op_class="pool")(_in_plus_out)  # reduce in, scale out
register("ReduceMean", op_class="reduce")(_in_plus_out)


@register("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare",
          "ReduceLogSumExp", "ReduceLogSum", "ArgMax", "ArgMin", op_class="reduce")
def reduce_(node, g):
    x = _shape(g, node, 0)
    return None if x is None else (float(_numel(x)), 0.0)


register("Resize", "Upsample", op_class="data_movement", per_element=4)(_per_element(4))   # up to bilinear: 4 taps
register("Hardmax", op_class="reduce")(_per_element(2))       # the maximum along the axis, then the one-hot


# ---------------------------------------------------------------- zero-FLOP ops (bytes still count)

def _free(node, g) -> Cost:
    return 0.0, 0.0


register("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose", "Concat", "Split", "Slice",
         "Gather", "GatherElements", "GatherND", "ScatterND", "ScatterElements", "Scatter", "Expand", "Tile",
         "Pad", "Cast", "CastLike", "Dropout", "NonZero", "DepthToSpace", "SpaceToDepth", "Trilu", "OneHot",
         "Compress", "ReverseSequence", "EyeLike", "SequenceAt", "SequenceConstruct", "SplitToSequence",
         "ConcatFromSequence", "SequenceInsert", "SequenceEmpty", "SequenceLength", "TopK", "NonMaxSuppression",
         "Optional", "OptionalGetElement", "OptionalHasElement", "CumSum", "Unique",
         "CumProd", "MaxUnpool", "CenterCropPad", "BitCast", "SequenceErase", "com.microsoft:Trilu",
         "com.microsoft:Unique", "StringConcat", "StringNormalizer", "StringSplit", "RegexFullMatch",
         "TensorScatter",       # opset 24: a KV cache's rows written in place (ORT copies the cache)
         op_class="data_movement", per_element=0)(_free)
register("Shape", "Size", "Constant", "ConstantOfShape", "Range", op_class="shape", per_element=0)(_free)
SHAPE_OPS = {k for k, op in REGISTRY.items() if op.op_class == "shape"}


# ---------------------------------------------------------------- control flow

# the cost of the body that runs: lib/onnx/costs.py walks the bodies, lib/onnx/control_flow.py decides which
# branch runs and how many iterations
register("If", "Loop", "Scan", op_class="control_flow", control_flow=True)(control_flow_cost)


# ---------------------------------------------------------------- flags

flag("Reshape", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Dropout", "Shape", "Size", view=True)
flag("Shape", "Size", reads_shape=True)
flag("Gather", "GatherElements", "GatherND", "Slice", pick=True)
flag("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity", "Flatten", rearranges=True, stored_chain=True)
flag("DequantizeLinear", "QuantizeLinear", "Cast", stored_chain=True)
flag("DequantizeLinear", "QuantizeLinear", quantizes=True)
flag("QuantizeLinear", "Cast", typed_by_input=True)
flag("Conv", "MatMul", "Gemm", qdq_fused=True)
flag("ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp",
     "ReduceLogSum", "ReduceMean", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", reduces=True)
flag("ConvInteger", "QLinearConv", "MatMulInteger", "QLinearMatMul", "com.microsoft:QGemm",
     "com.microsoft:DynamicQuantizeMatMul", "com.microsoft:MatMulIntegerToFloat", "com.microsoft:QAttention",
     "com.microsoft:DynamicQuantizeLSTM", int8=True)
flag("RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli", random=True,
     dtype_attribute=True)
flag("EyeLike", dtype_attribute=True)
flag("RandomNormalLike", "RandomUniformLike", "EyeLike", like=True)
flag("Softmax", "LogSoftmax", "ArgMax", "ArgMin", along_axis=True)
flag("Softmax", "LogSoftmax", softmax_exp=True)
flag("Softmax", "LogSoftmax", "Exp", exponential=True)


# ---------------------------------------------------------------- value evaluators
# Static value propagation (lib/onnx/shapes.py) of shape arithmetic with numpy, as onnx-tool does:
# f(node, input values, the first input's shape) -> output values.

def _slice(x, starts, ends, axes=None, steps=None):
    axes = list(range(len(starts))) if axes is None else [int(a) for a in axes]
    steps = [1] * len(starts) if steps is None else steps
    idx = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        idx[a] = slice(int(s), int(max(min(e, 2**62), -2**62)), int(st))
    return x[tuple(idx)]


def _unsqueeze(x, axes):
    for a in sorted(int(a) % (x.ndim + len(axes)) for a in axes):
        x = np.expand_dims(x, a)
    return x


def _squeeze(node, ins):
    axes = ins[1] if len(ins) > 1 else _attr(node, "axes")
    return np.squeeze(ins[0], axis=tuple(int(a) for a in axes)) if (len(ins) > 1 or axes) else np.squeeze(ins[0])


def _reshape(x, shape, allowzero=0):
    shape = [int(s) for s in shape]
    if not allowzero:
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return x.reshape(shape)


def _fill(node, shape):
    value = _attr(node, "value")
    return np.full([int(d) for d in shape], numpy_helper.to_array(value).reshape(-1)[0] if value is not None
                   else np.float32(0))


def _binary(fn, same_type: bool):
    """Two operands; the result keeps the first one's type (arithmetic) or is bool (comparisons, logic)."""
    return lambda node, ins, shape: [fn(ins[0], ins[1]).astype(np.result_type(ins[0]) if same_type else bool)]


def _unary(fn):
    return lambda node, ins, shape: [fn(ins[0])]


@evaluates("Div")
def _div(node, ins, shape):
    r = ins[0] / ins[1] if np.issubdtype(ins[0].dtype, np.floating) else np.trunc(ins[0] / ins[1])
    return [r.astype(ins[0].dtype)]


for _key, _fn in {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Max": np.maximum, "Min": np.minimum,
                  "Mod": np.mod, "Pow": np.power}.items():
    evaluates(_key)(_binary(_fn, True))
for _key, _fn in {"Equal": np.equal, "Less": np.less, "Greater": np.greater, "LessOrEqual": np.less_equal,
                  "GreaterOrEqual": np.greater_equal, "And": np.logical_and, "Or": np.logical_or}.items():
    evaluates(_key)(_binary(_fn, False))
for _key, _fn in {"Identity": lambda x: x, "Neg": np.negative, "Not": np.logical_not, "Abs": np.abs,
                  "Floor": np.floor, "Ceil": np.ceil, "Sqrt": np.sqrt}.items():
    evaluates(_key)(_unary(_fn))
def _sizes(key: str):
    """Decorator: the elements an op that builds a tensor from a shape would allocate, from its input values
    (static value propagation checks it before evaluating: a huge ConstantOfShape is not built to be dropped)."""
    def deco(fn):
        REGISTRY[key] = dataclasses.replace(REGISTRY[key], made_elements=fn)
        return fn
    return deco


@_sizes("ConstantOfShape")
def _fill_elements(ins) -> int:
    return math.prod(int(d) for d in np.ravel(ins[0]))


@_sizes("Expand")
def _expand_elements(ins) -> int:
    return math.prod(np.broadcast_shapes(np.shape(ins[0]), tuple(int(d) for d in ins[1])))


@_sizes("Tile")
def _tile_elements(ins) -> int:
    return int(np.size(ins[0])) * math.prod(int(r) for r in np.ravel(ins[1])) if len(ins) == 2 else 0


@_sizes("Range")
def _range_elements(ins) -> int:
    if len(ins) != 3 or float(ins[2]) == 0:
        return 0
    return max(0, math.ceil((float(ins[1]) - float(ins[0])) / float(ins[2])))


for _key, _fn in {
    "Shape": lambda n, ins, shape: [np.array(shape, dtype=np.int64)[_attr(n, "start", 0):_attr(n, "end", None)]],
    "Size": lambda n, ins, shape: [np.array(math.prod(shape), dtype=np.int64)],
    "Cast": lambda n, ins, shape: [ins[0].astype(helper.tensor_dtype_to_np_dtype(_attr(n, "to")))],
    "Gather": lambda n, ins, shape: [np.take(ins[0], ins[1].astype(np.int64), axis=_attr(n, "axis", 0))],
    "Unsqueeze": lambda n, ins, shape: [_unsqueeze(ins[0], ins[1] if len(ins) > 1 else _attr(n, "axes"))],
    "Squeeze": lambda n, ins, shape: [_squeeze(n, ins)],
    "Concat": lambda n, ins, shape: [np.concatenate([np.atleast_1d(i) for i in ins], axis=_attr(n, "axis", 0))],
    "Slice": lambda n, ins, shape: [_slice(ins[0], *ins[1:]) if len(ins) > 1 else
                                    _slice(ins[0], _attr(n, "starts"), _attr(n, "ends"), _attr(n, "axes"))],
    "Reshape": lambda n, ins, shape: [_reshape(ins[0], ins[1], _attr(n, "allowzero", 0))],
    "Range": lambda n, ins, shape: [np.arange(ins[0], ins[1], ins[2]).astype(ins[0].dtype)],
    "ConstantOfShape": lambda n, ins, shape: [_fill(n, ins[0])],
    "Expand": lambda n, ins, shape: [ins[0] * np.ones([int(d) for d in ins[1]], dtype=ins[0].dtype)],
    "Where": lambda n, ins, shape: [np.where(ins[0], ins[1], ins[2])],
    "ReduceProd": lambda n, ins, shape: [np.prod(ins[0], keepdims=bool(_attr(n, "keepdims", 1)))],
    "Transpose": lambda n, ins, shape: [np.transpose(ins[0], _attr(n, "perm"))],
    "Tile": lambda n, ins, shape: [np.tile(ins[0], [int(r) for r in ins[1]])],
}.items():
    evaluates(_key)(_fn)


# com.microsoft contrib ops that are a standard op under another name (ORT fusions and quantization emit them)
for _key, _of in {"com.microsoft:Gelu": "Gelu", "com.microsoft:QLinearAdd": "Add", "com.microsoft:QLinearMul": "Mul",
                  "com.microsoft:QLinearSigmoid": "Sigmoid", "com.microsoft:QLinearLeakyRelu": "LeakyRelu",
                  "com.microsoft:QLinearSoftmax": "Softmax", "com.microsoft:BiasAdd": "Add",
                  "com.microsoft:QLinearConcat": "Concat", "com.microsoft:QLinearGlobalAveragePool": "GlobalAveragePool",
                  "com.microsoft:QLinearAveragePool": "AveragePool",
                  # quantize_static's 4-bit QDQ nodes (QInt4 weights) and quantize_dynamic's fused BERT embedding
                  "com.microsoft:QuantizeLinear": "QuantizeLinear", "com.microsoft:DequantizeLinear": "DequantizeLinear",
                  "com.microsoft:QEmbedLayerNormalization": "com.microsoft:EmbedLayerNormalization"}.items():
    alias(_key, _of)
flag("com.microsoft:QLinearSoftmax", softmax_exp=False)     # its exponential: a lookup table of the 256 codes

# classical ML (ai.onnx.ml) and random ops: their formulas live in lib/onnx/ops_ml.py
for _key, (_cls, _cost) in ML_OPS.items():
    register(_key, op_class=_cls)(_cost)
# ORT's inference: data.shape[:-1] + the indices' shape; its kernel: [1, n indices] for 1-D data (skl2onnx's KNN:
# 4x5 inferred, 1x20 run, and a split cut there failed with ORT's error)
flag("ai.onnx.ml:ArrayFeatureExtractor", shape_by_run=True)
# ORT's inference: present key = the past key's shape (a shared buffer); its kernel: past + new positions
flag("com.microsoft:GroupQueryAttention", shape_by_run=True)


def markdown_table() -> str:
    """docs/cost-model.md's table of per-element costs, generated from the registry (a test checks the page)."""
    rows: dict[tuple[str, float], list[str]] = {}
    for key, op in REGISTRY.items():
        if op.per_element is not None and op.per_element > 0:
            rows.setdefault((op.op_class, op.per_element), []).append(key.split(":")[-1])
    lines = ["| op class | FLOPs per output element | ops |", "| --- | --- | --- |"]
    for (cls, k), ops in sorted(rows.items()):
        lines.append(f"| {cls} | {k:g} | {', '.join(sorted(set(ops)))} |")
    return "\n".join(lines)


def op_classes() -> set[str]:
    """Every op class a node can have (the op_class column): the registry's, the three a Conv's group decides, and
    'other' (an op of unknown cost)."""
    return {o.op_class for o in REGISTRY.values() if isinstance(o.op_class, str)} | \
        {"conv", "conv_grouped", "conv_depthwise", "other"}


def flags_table() -> str:
    """docs/op-registry.md's table of the ops each flag is set on, and of the ops with a value evaluator."""
    lines = ["| flag | meaning | ops |", "| --- | --- | --- |"]
    for f, meaning in FLAGS.items():
        lines.append(f"| {f} | {meaning} | {', '.join(sorted(k for k, op in REGISTRY.items() if getattr(op, f)))} |")
    evaluated = sorted(k for k, op in REGISTRY.items() if op.evaluate is not None)
    lines.append(f"| (evaluate) | a value evaluator for static value propagation | {', '.join(evaluated)} |")
    sized = sorted(k for k, op in REGISTRY.items() if op.made_elements is not None)
    lines.append(f"| (made_elements) | the elements its evaluator would build, checked first | {', '.join(sized)} |")
    return "\n".join(lines)
