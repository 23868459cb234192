"""Independent MAC reference: multiply-accumulates of what ONNX Runtime really executed.

Shares no code with lib/ (it must not import it): it is what the pipeline's static MAC counts are
checked against. Method: ONE inference under ORT's profiler with graph optimizations disabled, so
that kernels are 1:1 with the model's own nodes, including the nodes of If/Loop/Scan bodies that
actually ran (a Loop body's nodes appear once per iteration, an If's untaken branch not at all).
Each profiler "Node" event carries the op type and the input/output shapes that flowed; MACs are
computed from those shapes plus the node's attributes, looked up by name in the model (and its
subgraph bodies).

Counted (FLOPs = 2 x MACs for these; bias additions are not MACs):
  Conv, ConvInteger, QLinearConv     N * Cout * prod(out spatial) * Cin/group * prod(kernel)
  ConvTranspose                       N * Cin * prod(in spatial) * Cout/group * prod(kernel)
  Gemm                                M * N * K (transA / transB honoured)
  MatMul, MatMulInteger, QLinearMatMul  batch(broadcast) * M * N * K, 1-D operands as numpy does
  Einsum                              pairwise left to right: product of the sizes of every index
                                      of the pair (ellipsis dims broadcast); one operand: 0
  LSTM / GRU / RNN                    dirs * seq * batch * gates * hidden * (input + hidden),
                                      gates 4 / 3 / 1 (sequence_lens is ignored: full seq_len)
  com.microsoft DynamicQuantizeLSTM (as LSTM), DynamicQuantizeMatMul, MatMulIntegerToFloat,
  FusedMatMul (transA/transB), QGemm (as Gemm), MatMulNBits (rows of A x the N and K attributes)
  DeformConv                          as Conv (its offset sampling is not MACs)
Everything else counts 0 MACs.

Notes found on real runs (onnxruntime 1.31):
  * event name is "<node name>_kernel_time"; an unnamed node is "<op_type>_<node index>", the index
    counting the graph's nodes without its Constant nodes (ORT turns those into initializers);
  * weight pre-packing frees a constant MatMul/Conv operand and then drops it from
    ``input_type_shape``: it is switched off (``session.disable_prepacking``); absent optional
    inputs ("") are never listed.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections import defaultdict

import numpy as np
import onnx
import onnxruntime as ort

MAC_OPS = {"Conv", "ConvInteger", "QLinearConv", "ConvTranspose", "Gemm", "MatMul", "MatMulInteger",
           "QLinearMatMul", "Einsum", "LSTM", "GRU", "RNN",
           # com.microsoft forms that appear in files (quantize_dynamic, older ORT-optimized exports)
           "DynamicQuantizeLSTM", "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "FusedMatMul", "QGemm",
           "MatMulNBits", "DeformConv",
           "Attention"}      # ONNX opset 23 (Q, K, V given); ORT's com.microsoft form (a 2-D weight) counts 0
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1, "DynamicQuantizeLSTM": 4}


# ----------------------------------------------------------------------------------- model index
class _Node:
    __slots__ = ("node", "key", "index", "consts")

    def __init__(self, node, key, index, consts):
        self.node, self.key, self.index, self.consts = node, key, index, consts


def _index_model(model: onnx.ModelProto):
    """name -> [_Node]; also "<op>_<ort index>" -> [_Node] for unnamed nodes. Walks subgraph bodies."""
    by_name: dict[str, list[_Node]] = defaultdict(list)

    def walk(graph, prefix, outer_consts):
        consts = dict(outer_consts)
        for t in graph.initializer:
            consts[t.name] = list(t.dims)
        for n in graph.node:
            if n.op_type == "Constant" and n.domain in ("", "ai.onnx"):
                for a in n.attribute:
                    if a.name == "value":
                        consts[n.output[0]] = list(a.t.dims)
        ort_idx = 0
        for i, n in enumerate(graph.node):
            is_const = n.op_type == "Constant" and n.domain in ("", "ai.onnx")
            key = n.name or f"{prefix}{n.op_type}_{i}"
            rec = _Node(n, key, None if is_const else ort_idx, consts)
            if n.name:
                by_name[n.name].append(rec)
            if not is_const:
                by_name[f"\0{n.op_type}_{ort_idx}"].append(rec)
                ort_idx += 1
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g, f"{key}/{a.name}/", consts)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for j, sg in enumerate(a.graphs):
                        walk(sg, f"{key}/{a.name}{j}/", consts)

    walk(model.graph, "", {})
    return by_name


def _find(by_name, event_name, op_type, node_index):
    base = event_name[: -len("_kernel_time")] if event_name.endswith("_kernel_time") else event_name
    cands = [c for c in by_name.get(base, []) if c.node.op_type == op_type]
    if not cands:  # unnamed node: ORT calls it <op_type>_<node index>
        cands = [c for c in by_name.get("\0" + base, []) if not c.node.name]
    if len(cands) > 1 and node_index is not None:
        narrowed = [c for c in cands if c.index == node_index]
        cands = narrowed or cands
    return cands[0] if cands else None


def _attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute} if node is not None else {}


# ----------------------------------------------------------------------------------- formulas
def _shapes(type_shape_list):
    """[{'float': [2, 4]}, ...] -> [[2, 4], ...]"""
    return [list(next(iter(d.values()))) for d in (type_shape_list or [])]


def _conv(x, w, y):
    # y: [N, Cout, *out]; w: [Cout, Cin/group, *k]
    return math.prod(y) * math.prod(w[1:])


def _conv_transpose(x, w):
    # x: [N, Cin, *in]; w: [Cin, Cout/group, *k]
    return math.prod(x) * math.prod(w[1:])


def _matmul(a, b):
    a, b = list(a), list(b)
    if len(a) == 1:
        a = [1] + a
    if len(b) == 1:
        b = b + [1]
    m, k = a[-2], a[-1]
    n = b[-1]
    batch = np.broadcast_shapes(tuple(a[:-2]), tuple(b[:-2]))
    return math.prod(batch) * m * n * k


def _gemm(a, b, attrs):
    m, k = (a[1], a[0]) if attrs.get("transA", 0) else (a[0], a[1])
    n = b[0] if attrs.get("transB", 0) else b[1]
    return m * n * k


def _einsum(equation, shapes):
    eq = equation.replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) < 2:
        return 0
    sizes: dict[str, int] = {}
    ell = ()
    letters_of = []
    for term, shp in zip(terms, shapes):
        if "..." in term:
            pre, post = term.split("...")
            n_ell = len(shp) - len(pre) - len(post)
            ell = np.broadcast_shapes(ell, tuple(shp[len(pre): len(pre) + n_ell]))
            dims = list(shp[: len(pre)]) + list(shp[len(shp) - len(post):])
            letters = pre + post
        else:
            dims, letters = list(shp), term
        for c, d in zip(letters, dims):
            sizes[c] = max(sizes.get(c, 1), d)
        letters_of.append(set(letters))
    if not rhs and "->" not in eq:  # implicit output: letters that appear once, sorted
        counts = defaultdict(int)
        for t in terms:
            for c in t.replace("...", ""):
                counts[c] += 1
        rhs = "".join(sorted(c for c, k in counts.items() if k == 1))
    out = set(rhs.replace("...", ""))
    ell_size = math.prod(ell)
    total, cur = 0, letters_of[0]
    for i in range(1, len(letters_of)):
        pair = cur | letters_of[i]
        total += math.prod(sizes[c] for c in pair) * ell_size
        later = set().union(*letters_of[i + 1:]) if i + 1 < len(letters_of) else set()
        cur = {c for c in pair if c in out or c in later}
    return total


def _rnn(op, shapes, attrs):
    # W: [dirs, gates*H, input] (DynamicQuantizeLSTM: [dirs, input, 4H], hence hidden_size first)
    x, w, r = shapes[0], shapes[1], shapes[2]
    dirs, hidden = w[0], attrs.get("hidden_size") or r[-1]
    inp = x[2]
    seq, batch = (x[1], x[0]) if attrs.get("layout", 0) == 1 else (x[0], x[1])
    return dirs * seq * batch * _GATES[op] * hidden * (inp + hidden)


def node_macs(op, in_shapes, out_shapes, attrs) -> int:
    """MACs of one executed kernel from its shapes (list of dims lists) and attributes."""
    if op in ("Conv", "ConvInteger", "DeformConv"):
        return _conv(in_shapes[0], in_shapes[1], out_shapes[0])
    if op == "QLinearConv":
        return _conv(in_shapes[0], in_shapes[3], out_shapes[0])
    if op == "ConvTranspose":
        return _conv_transpose(in_shapes[0], in_shapes[1])
    if op == "Gemm":
        return _gemm(in_shapes[0], in_shapes[1], attrs)
    if op in ("MatMul", "MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat"):
        return _matmul(in_shapes[0], in_shapes[1])
    if op == "FusedMatMul":
        a, b = list(in_shapes[0]), list(in_shapes[1])
        if attrs.get("transA", 0) and len(a) > 1:
            a[-1], a[-2] = a[-2], a[-1]
        if attrs.get("transB", 0) and len(b) > 1:
            b[-1], b[-2] = b[-2], b[-1]
        return _matmul(a, b)
    if op == "QGemm":
        return _gemm(in_shapes[0], in_shapes[3], attrs)
    if op == "MatMulNBits":     # A (..., K) x B packed in blocks: N and K are attributes; rows of A x N x K
        return math.prod(in_shapes[0][:-1]) * attrs["N"] * attrs["K"]
    if op == "QLinearMatMul":
        return _matmul(in_shapes[0], in_shapes[3])
    if op == "Einsum":
        eq = attrs.get("equation", b"")
        return _einsum(eq.decode() if isinstance(eq, bytes) else eq, in_shapes)
    if op in _GATES:
        return _rnn(op, in_shapes, attrs)
    if op == "Attention" and len(in_shapes[1]) >= 3:     # ONNX's (K 3-D or 4-D), not ORT's (a 2-D weight)
        return _attention(in_shapes, attrs)
    return 0


def _attention(shapes, attrs):
    """ONNX Attention (opset 23): Q K^T and the weights times V, over the positions of K (plus a past key, input 4).
    Q, K, V are 4-D (B, heads, S, head size) or 3-D (B, S, heads x head size; the head counts are attributes)."""
    q, k, v = shapes[0], shapes[1], shapes[2]
    if len(q) == 4:
        batch, heads, seq, dk = q
        kv_len, dv = k[2], v[3]
    else:
        batch, seq, heads = q[0], q[1], attrs["q_num_heads"]
        dk, kv_len, dv = q[2] // heads, k[1], v[2] // attrs["kv_num_heads"]
    past = shapes[4] if len(shapes) > 4 and shapes[4] is not None else None
    return batch * heads * seq * (kv_len + (past[2] if past else 0)) * (dk + dv)


# ----------------------------------------------------------------------------------- profiling
def _align_inputs(rec, listed):
    """Give each present input of the node its shape: listed shapes, static shapes of constants
    for those the profiler left out. Returns a list indexed like node.input (absent -> None)."""
    present = [i for i, name in enumerate(rec.node.input) if name]
    out = [None] * len(rec.node.input)
    if len(listed) == len(present):
        for i, s in zip(present, listed):
            out[i] = s
        return out
    dynamic = [i for i in present if rec.node.input[i] not in rec.consts]
    if len(listed) == len(dynamic):
        it = iter(listed)
        for i in present:
            out[i] = rec.consts[rec.node.input[i]] if i not in dynamic else next(it)
        return out
    raise RuntimeError(f"{rec.key}: profiler listed {len(listed)} input shapes for {len(present)} inputs")


def profile_events(model_path, feeds):
    """Run one inference with the profiler on; return the list of 'Node' events."""
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.add_session_config_entry("session.disable_prepacking", "1")
    tmp = tempfile.mkdtemp(prefix="executed_macs_")
    try:
        so.profile_file_prefix = os.path.join(tmp, "ort_profile")
        sess = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
        sess.run(None, feeds)
        prof = sess.end_profiling()
        with open(prof) as f:
            events = json.load(f)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [e for e in events if e.get("cat") == "Node" and "op_name" in e.get("args", {})]


def executed_macs(model_path, feeds: dict) -> dict:
    """{"total", "by_op": {op_type: macs}, "by_node": {node: macs}, "kernels": n, "unmatched": [...]}

    by_node holds every executed MAC-class node (summed over loop iterations); nodes are keyed by
    their name, an unnamed one by "<op_type>_<index in its graph>" (prefixed with its parent's key
    and attribute name inside a subgraph)."""
    model = onnx.load(str(model_path), load_external_data=False)
    by_name = _index_model(model)
    events = profile_events(model_path, feeds)
    by_op: dict[str, int] = defaultdict(int)
    by_node: dict[str, int] = defaultdict(int)
    unmatched = []
    for e in events:
        a = e["args"]
        op = a["op_name"]
        if op not in MAC_OPS:
            continue
        idx = a.get("node_index")
        rec = _find(by_name, e["name"], op, int(idx) if idx is not None else None)
        listed = _shapes(a.get("input_type_shape"))
        if rec is None:
            unmatched.append(e["name"])
            ins, attrs, key = listed, {}, e["name"][: -len("_kernel_time")]
        else:
            ins, attrs, key = _align_inputs(rec, listed), _attrs(rec.node), rec.key
        macs = int(node_macs(op, ins, _shapes(a.get("output_type_shape")), attrs))
        by_op[op] += macs
        by_node[key] += macs
    return {"total": int(sum(by_op.values())), "by_op": dict(by_op), "by_node": dict(by_node),
            "kernels": len(events), "unmatched": unmatched}


def random_feeds(model_path, shapes: dict | None = None, seed: int = 0, dim_values: dict | None = None):
    """Seeded random feeds for every graph input (initializers listed as inputs excluded).
    shapes: {input: dims} wins; dim_values: {dim_param: value}; other symbolic dims -> 1."""
    model = onnx.load(str(model_path), load_external_data=False)
    inits = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(seed)
    feeds = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        if shapes and vi.name in shapes:
            dims = list(shapes[vi.name])
        else:
            dims = [d.dim_value if d.HasField("dim_value") else (dim_values or {}).get(d.dim_param, 1)
                    for d in tt.shape.dim]
        dt = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if dt == np.bool_:
            feeds[vi.name] = rng.integers(0, 2, dims).astype(bool)
        elif np.issubdtype(dt, np.integer):
            feeds[vi.name] = rng.integers(0, 10, dims).astype(dt)
        else:
            feeds[vi.name] = rng.standard_normal(dims).astype(dt)
    return feeds
