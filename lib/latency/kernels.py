"""One row per ONNX Runtime kernel: what ORT really runs, mapped onto the original nodes it covers.

A profiled model gives hundreds of measured kernels (ORT's profiler trace: one `<name>_kernel_time` event per
kernel per run, with its op and its input/output shapes). ORT fuses several original nodes into one kernel
(Conv+Relu, Add+Add+LayerNormalization as SkipLayerNormalization) and inserts kernels of its own (NCHWc
Reorder*, copies). Each kernel is mapped onto its *group* of original nodes by stage 01's attribution
(lib.latency.profiling.attribute); the group's FLOPs/MACs/weight bytes are summed from stage 02's table, its
traffic is what the fused kernel reads and writes (the first node's activations in, skipping a Constant it folded;
the last node's out; the group's weights), its anchor is the node whose op the kernel's op names, else the
MAC-heaviest, else the first.
A second kernel on the same group (a layout Reorder, a copy, the Mul of an inlined HardSwish) carries no FLOPs: it
moves its own tensors, in and out (sizes from the original graph by name; the group's output twice where the names
are not there); so does a kernel ORT inserted with no group. A view (Reshape, Flatten, Squeeze...) moves nothing,
except where its output is a graph output: ORT then copies its tensor (output_copies).

Without a profile (prediction), the kernels are the nodes of ORT's optimized graph (it saves one at session
creation): the same table without times, so that a model's prediction never uses its own measured kernels.

A kernel's compute dtype is what ORT runs, not what the model declares: an fp16 model on a CPU without fp16
kernels runs its convolutions and GEMMs in fp32 between Cast nodes ORT inserts (and folds into the weights), so
a kernel whose first input ORT types as float computes in float whatever the original node said (and moves
4-byte elements: its bytes count twice those of the fp16 node).
"""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import onnx
import pandas as pd

from lib.analysis.roofline import kernel_node_bytes
from lib.latency.profiling import (LAYOUT_KERNELS, VIEW_KERNELS, attribute, base_op, is_mac_kernel, kernel_times,
                                    name_nodes, name_unnamed_kernels)
from lib.onnx.control_flow import if_branch, loop_trips
from lib.onnx.graph import CONTROL_FLOW, dtype_name, subgraph_view
from lib.onnx.metrics import INT_MAC_OPS, INT_TYPES, QDQ_FUSED, dequantized, node_metrics
from lib.onnx.ops import REGISTRY, names_with
from lib.onnx.reader import elem_size
from lib.onnx.underflow import exp_nodes

KERNEL_COLUMNS = ["kernel", "op", "pattern", "node", "nodes", "n_nodes", "flops", "macs", "weight_bytes",
                  "act_in_bytes", "act_out_bytes", "bytes", "compute_dtype", "dims", "out_numel", "layout",
                  "axis_stride", "exp_underflow", "subnormal", "in_shapes", "out_shapes", "t_us", "p10_us",
                  "p90_us", "runs"]
FP32_BYTES = ("weight_bytes", "act_in_bytes", "act_out_bytes", "bytes")    # an fp16 kernel run in fp32 moves twice
READS_SHAPE = names_with("reads_shape")     # Shape, Size: read a tensor's shape, not its data
EXPONENTIAL = names_with("exponential")     # the kernels that carry their node's exp_underflow
__all__ = ["KERNEL_COLUMNS", "is_mac_kernel", "kernel_table", "group_row", "optimized_kernels", "trace_kernels"]


def _shape_text(shapes) -> str:
    """'1x3x16x16;16x3x3x3' from ORT's [{'float': [1, 3, 16, 16]}, ...]."""
    out = []
    for s in shapes or []:
        dims = next(iter(s.values()), []) if isinstance(s, dict) else []
        out.append("x".join(str(d) for d in dims))
    return ";".join(out)


def trace_kernels(events: list[dict], warmup: int) -> tuple[list[dict[str, float]], dict[str, str], dict]:
    """(per measured run {kernel: us}, {kernel: op}, {kernel: (input shapes, output shapes)}) of ORT's trace."""
    per_run, _ = kernel_times(events, warmup)
    ops, shapes = {}, {}
    for e in events:
        name = e.get("name", "")
        if e.get("cat") == "Node" and name.endswith("_kernel_time"):
            k, args = name[: -len("_kernel_time")], e.get("args", {})
            ops.setdefault(k, args.get("op_name", ""))
            shapes.setdefault(k, (_shape_text(args.get("input_type_shape")), _shape_text(args.get("output_type_shape"))))
    return per_run, ops, shapes


NCHWC_DOMAIN = "com.microsoft.nchwc"


def nchwc_kernels(optimized: onnx.ModelProto | None) -> set[str]:
    """The kernels ORT runs in its blocked NCHWc layout (domain com.microsoft.nchwc), its layout Reorders aside:
    their op is prefixed "Nchwc" in the kernel table. A plain NCHW Conv is another kernel: quantize_static's convs
    that ORT left unfused ran that way, and taken for the NCHWc ones they made every fp32 conv look slower."""
    if optimized is None:
        return set()
    return {n.name for n in name_nodes(optimized).graph.node
            if n.domain == NCHWC_DOMAIN and n.op_type not in LAYOUT_KERNELS}


def optimized_kernels(optimized: onnx.ModelProto) -> tuple[list[str], dict[str, str]]:
    """Kernel names and ops of ORT's optimized graph, unnamed nodes named as the trace is (profiling.name_nodes)."""
    nodes = name_nodes(optimized).graph.node
    return [n.name for n in nodes], {n.name: n.op_type for n in nodes}


def executed_types(optimized: onnx.ModelProto | None) -> dict[str, tuple[str, str]]:
    """{kernel: (its first input's type, its first output's type)} for each kernel of the optimized graph, as ORT
    types them ('float', 'uint8' ...; ORT infers every tensor's type when it loads the graph with each one declared
    as an output). Empty when ORT cannot load it (the declared dtypes then stand)."""
    import onnxruntime as ort
    if optimized is None:
        return {}
    m = onnx.ModelProto()
    m.CopyFrom(optimized)
    # weights whose bytes are not here (01's kept copy has them stripped: ORT refused it, and an fp16 model's
    # kernels were all typed fp16 and flagged never seen) enter as inputs of their type and shape
    inputs = {i.name for i in m.graph.input}
    stripped = [t for t in m.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    m.graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
                         for t in stripped if t.name not in inputs)
    kept = [t for t in m.graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL]
    del m.graph.initializer[:]
    m.graph.initializer.extend(kept)
    have = {o.name for o in m.graph.output}
    for n in m.graph.node:
        m.graph.output.extend(onnx.ValueInfoProto(name=t) for t in n.output if t and t not in have)
        have.update(n.output)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        types = {o.name: o.type for o in ort.InferenceSession(m.SerializeToString(), so,
                                                              providers=["CPUExecutionProvider"]).get_outputs()}
    except Exception:  # noqa: BLE001 - an optimized graph this ORT cannot reload (another host's NCHWc ops)
        return {}
    # ORT's names ('tensor(float16)') are TensorProto's in lower case (dtype_name)
    elem = {t: v.removeprefix("tensor(").removesuffix(")") for t, v in types.items()}
    elem.update({t.name: dtype_name(t.data_type) for t in kept})
    elem.update({i.name: dtype_name(i.type.tensor_type.elem_type) for i in m.graph.input
                 if i.type.tensor_type.elem_type})
    names, _ = optimized_kernels(optimized)
    return {k: (elem.get(n.input[0], "") if n.input else "", elem.get(n.output[0], "") if n.output else "")
            for k, n in zip(names, optimized.graph.node)}


def _as_run(row: dict, op: str, types: tuple[str, str], own: tuple[str, float, float] | None) -> dict:
    """What a kernel row changes to as ORT runs it (module docstring): an fp16 kernel ORT runs on fp32 tensors
    moves twice its bytes in float; a kernel on 8-bit tensors in and out (a QDQ model's QLinearAdd, NhwcMaxPool, a
    Transpose ORT inserts) is of that integer type and moves 8-bit elements (it was typed by the float Add it
    anchors on, at 4 bytes per element, and flagged never seen, while a QOperator export's same kernel is uint8)."""
    if row["compute_dtype"] == "float16" and types[0] == "float":
        return {"compute_dtype": "float", **{c: 2 * row[c] for c in FP32_BYTES}}
    if types[0] in INT_TYPES and types[1] in INT_TYPES and row["compute_dtype"] != types[0] and not is_mac_kernel(op):
        if op in VIEW_KERNELS:
            return {"compute_dtype": types[0]}
        if own is not None and own[0]:      # tensors ORT kept the names of: their own sizes
            return {"compute_dtype": types[0], "act_in_bytes": own[1], "act_out_bytes": own[2],
                    "bytes": own[1] + own[2]}
        # renamed ones (a QLinearAdd's inputs come from kernels ORT fused): the float nodes' bytes at 1 per element
        size = elem_size(getattr(onnx.TensorProto, row["compute_dtype"].upper(), onnx.TensorProto.FLOAT)) or 4
        return {"compute_dtype": types[0], **{c: row[c] / size for c in FP32_BYTES}}
    return {}


def output_copies(optimized: onnx.ModelProto | None) -> set[str]:
    """View kernels of the optimized graph whose output is a graph output: ORT copies those (its output cannot alias
    a buffer the session owns). A 4 MB Reshape ran 3 us between two nodes and 76-82 us as the graph's output."""
    if optimized is None:
        return set()
    outs = {o.name for o in optimized.graph.output}
    return {n.name for n in name_nodes(optimized).graph.node
            if n.op_type in VIEW_KERNELS and any(t in outs for t in n.output)}


def _own_tensors(g, optimized: onnx.ModelProto | None) -> dict[str, tuple[str, float, float]]:
    """{kernel of the optimized graph: (dims, bytes in, bytes out)} from the tensors of its node that the original
    graph knows (ORT keeps the original names of the tensors it does not fuse): in, its inputs'; out, its first
    output's, else its first input's (a layout Reorder or a copy writes the tensor it reads; an op ORT decomposed,
    HardSwish as HardSigmoid and Mul, writes its input's shape). Kernels with none known are left out."""
    if optimized is None:
        return {}
    out = {}
    for n in name_nodes(optimized).graph.node:
        ins = [g.tensors[t] for t in n.input if t in g.tensors and g.tensors[t].nbytes is not None]
        o = g.tensors.get(n.output[0]) if n.output else None
        o = o if o is not None and o.nbytes is not None else (ins[0] if ins else None)
        if o is None:
            continue
        known = o.shape and all(isinstance(d, (int, np.integer)) for d in o.shape)
        dims = "x".join(str(d) for d in o.shape) if known else ""
        out[n.name] = (dims, float(sum(t.nbytes for t in ins) or o.nbytes), float(o.nbytes))
    return out


def _groups(att: dict, n_nodes: int) -> dict[int, list[int]]:
    members = defaultdict(list)
    for pos, anchor in att["fused_into"].items():
        members[anchor].append(pos)
    return {a: sorted([a] + members.get(a, [])) for a in range(n_nodes)}


def _anchor(group: list[int], op: str, ops: np.ndarray, macs: np.ndarray, flops: np.ndarray) -> int:
    """The node whose op the kernel's op names, else the one doing the most work (MACs, then FLOPs), else the last
    (whose tensor the kernel writes): a Gelu fused from Div+Erf+Add+Mul+Mul and a folded Constant was anchored on
    the Constant, its dims unknown."""
    same = [p for p in group if ops[p] == op]
    if same:
        return same[0]
    return max(reversed(group), key=lambda p: (np.nan_to_num(macs[p]), np.nan_to_num(flops[p])))


def runs_in(op: str, dt: str, declared: str, int_weight: str) -> str:
    """The type a MAC kernel computes in, as ORT runs it: stage 02 guesses whether ORT fuses a Conv/Gemm/MatMul
    between DequantizeLinear and QuantizeLinear nodes into an integer kernel; the kernel's op says it (resnet18
    quantized by quantize_static: 14 of its 20 convs ran as fp32 Conv kernels, 11.6 ms on a loaded host, predicted
    as int8 ones at 1.9 ms; a Gemm that 02 left in float ran as QGemm)."""
    if not is_mac_kernel(op):
        return dt
    if base_op(op) in INT_MAC_OPS:
        return dt if dt in INT_TYPES else (int_weight or "int8")
    return declared if dt in INT_TYPES else dt


def group_row(group: list[int], op: str, m: dict) -> dict:
    """Costs of one kernel that runs the original nodes `group` (positions, topological order)."""
    a = _anchor(group, op, m["op"], m["macs"], m["flops"])
    # a Constant ORT folded into the kernel reads nothing at run time: the group's input is its first other node's
    # (Paddle's x + 3 as [Constant, Add] was charged its output only, half its traffic)
    first = next((p for p in group if not str(m["op"][p]).startswith("Constant")), group[0])
    last = group[-1]
    w = float(np.nansum(m["weight_bytes"][group]))
    # a group that starts with a Shape reads the shape vector (Shape -> Gather: 32 bytes, not a 1.2 MB tensor)
    side = "act_out" if m["op"][first] in READS_SHAPE else "act_in"
    act_in, act_out = float(np.nan_to_num(m[side][first])), float(np.nan_to_num(m["act_out"][last]))
    # ORT's Reshape (any view kernel) moves nothing, whatever nodes its group holds
    own = 0.0 if op in VIEW_KERNELS else m["kbytes"][group[0]] if len(group) == 1 else w + act_in + act_out
    dt = runs_in(op, m["compute_dtype"][a], m["dtype"][a], m["int_weight"][a])
    shown = [p for p in group if not m["shape_op"][p]] or [a]     # shape arithmetic ORT folds away: not the pattern
    return {"pattern": "+".join(str(m["op"][p]) for p in shown), "node": m["node"][a],
            "nodes": ";".join(str(m["node"][p]) for p in group), "n_nodes": len(group),
            "flops": float(np.nansum(m["flops"][group])), "macs": float(np.nansum(m["macs"][group])),
            "weight_bytes": w, "act_in_bytes": act_in, "act_out_bytes": act_out, "bytes": float(own),
            "compute_dtype": dt, "dims": m["dims"][a], "layout": False, "axis_stride": m["axis_stride"][a],
            # the kernel that takes the exponentials: not the Cast or ReduceMax that runs first of a Softmax ORT inlines
            "exp_underflow": float(np.max(m["exp_underflow"][group])) if op in EXPONENTIAL else 0.0,
            # the anchor's: a bias Add fused into a Conv adds a few hundred values (PP-OCRv6's Conv+Add with 62% of
            # its bias subnormal ran at its normal speed, one with 24% of its conv weights subnormal 90x)
            "subnormal": float(m["subnormal"][a])}


# ops that work along one axis (or several, Reduce*) read strided when it is not the last: ORT's Softmax over
# axis 1 of 1x16x4x2100 (YOLOv8's DFL head) ran 2.1 ms, over the last axis 0.07 ms; ReduceMean over channels 8x
# its time over the last axis
ALONG_AXIS, REDUCES = names_with("along_axis"), names_with("reduces")


def axis_strides(g) -> np.ndarray:
    """Per node: the elements between two neighbours along the axis it works on (1: the last axis, contiguous;
    1 for ops that work along no axis, or where the shape is not known). Reduce*: its last reduced axis. A
    Softmax before opset 13 works on 2-D rows flattened at its axis (contiguous)."""
    opset = next((o.version for o in g.model.opset_import if o.domain in ("", "ai.onnx")), 13)
    out = np.ones(len(g.nodes))
    wanted = ALONG_AXIS | REDUCES
    for pos in (p for p, op in enumerate(g.op_types) if op in wanted):
        n, op = g.nodes[pos], g.op_types[pos]
        if n.domain not in ("", "ai.onnx") or not n.input:
            continue
        info = g.tensors.get(n.input[0])
        shape = info.shape if info is not None else None
        softmax = REGISTRY[op].op_class == "softmax"
        if not shape or not all(isinstance(d, (int, np.integer)) and d > 0 for d in shape) or (softmax and opset < 13):
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        if op in ALONG_AXIS:
            axes = [attrs.get("axis", -1 if softmax else 0)]
        else:
            axes = attrs.get("axes")
            if axes is None and len(n.input) > 1 and n.input[1] in g.values:
                axes = np.asarray(g.values[n.input[1]]).ravel().tolist()
        if not axes:        # all axes (or a global pool): one contiguous pass
            continue
        last = max(int(x) % len(shape) for x in axes)
        out[pos] = float(np.prod(shape[last + 1:], dtype=float))
    return out


def _metric_arrays(g, metrics: pd.DataFrame) -> dict:
    df = metrics.set_index("node").reindex(list(g.names))
    cdt = df["compute_dtype"] if "compute_dtype" in df else df["dtype"]
    return {"node": np.asarray(g.names, dtype=object), "op": np.asarray([n.op_type for n in g.nodes], dtype=object),
            "flops": df["flops"].to_numpy(float), "macs": df["macs"].to_numpy(float),
            "weight_bytes": df["weight_bytes"].to_numpy(float), "act_in": df["act_in_bytes"].to_numpy(float),
            "act_out": df["act_out_bytes"].to_numpy(float), "kbytes": kernel_node_bytes(df.reset_index()),
            "compute_dtype": cdt.fillna("float").astype(str).to_numpy(object),
            "dtype": df["dtype"].fillna("float").astype(str).to_numpy(object),
            # the 8-bit type of a Conv/Gemm/MatMul's DequantizeLinear weight (its integer kernel's, where ORT fuses)
            "int_weight": np.array([(dequantized(g, n.input[1]) or "") if n.op_type in QDQ_FUSED and len(n.input) > 1
                                    else "" for n in g.nodes], dtype=object),
            "shape_op": (df["shape_op"].fillna(False).astype(bool).to_numpy() if "shape_op" in df else np.zeros(len(df), bool))
            | np.array([n.op_type.startswith("Constant") or n.op_type in VIEW_KERNELS for n in g.nodes], dtype=bool),
            "dims": df["out_shapes"].fillna("").astype(str).str.split(";").str[0].to_numpy(object),
            "axis_stride": axis_strides(g), "exp_underflow": _exp_underflow(g, df),
            "subnormal": _measured(df, "subnormal", len(g.nodes)),
            # computed from constants alone: 02 takes it as folded at load time (0 bytes)
            "folded": (df["shape_source"].astype(str).to_numpy() == "constant") if "shape_source" in df
            else np.zeros(len(df), bool)}


def _measured(df: pd.DataFrame, column: str, n: int) -> np.ndarray:
    """Stage 02's measured column (lib/onnx/underflow.py), NaN where not measured: a table written before 02 did."""
    return df[column].to_numpy(float) if column in df else np.full(n, np.nan)


def _exp_underflow(g, df: pd.DataFrame) -> np.ndarray:
    """Per node: stage 02's exp_underflow of a Softmax (its 16-value runs holding an underflow), 0 for the nodes that
    take no exponential."""
    out = np.zeros(len(g.nodes))
    pos = exp_nodes(g)
    out[pos] = _measured(df, "exp_underflow", len(g.nodes))[pos]
    return out


def _group_owners(names: list[str], ops: dict, anchor: dict) -> dict[int, str]:
    """{anchor: the kernel that runs its group}: its MAC kernel (a QLinearConv ORT runs channels-last comes after
    the input Transpose it inserted), else the first one that is no view or layout kernel (an input Reshape ORT
    inserted before a Gemm comes first, lib.latency.profiling's step 0), else the first view."""
    owner: dict[int, str] = {}
    for mac_only, skip in ((True, VIEW_KERNELS | LAYOUT_KERNELS), (False, VIEW_KERNELS | LAYOUT_KERNELS),
                           (False, LAYOUT_KERNELS)):
        for k in names:
            op = ops.get(k, "")
            if anchor.get(k) is not None and op not in skip and (is_mac_kernel(op) or not mac_only):
                owner.setdefault(anchor[k], k)
    return owner


def _numel(dims: str) -> float:
    try:
        return float(np.prod([int(d) for d in dims.split("x")])) if dims else 0.0
    except ValueError:
        return float("nan")


def kernel_table(g, metrics: pd.DataFrame, optimized: onnx.ModelProto | None, events: list[dict] | None = None,
                 warmup: int = 0) -> pd.DataFrame:
    """KERNEL_COLUMNS per kernel. `events`: ORT's profiler trace (times: median over the runs after `warmup`);
    None: the kernels of the optimized graph, without times."""
    if events is not None:
        per_run, ops, shapes = trace_kernels(name_unnamed_kernels(events, optimized), warmup)
        order = {n: i for i, n in enumerate(optimized_kernels(optimized)[0])} if optimized is not None else {}
        names = sorted({k for r in per_run for k in r}, key=lambda k: (order.get(k, len(order)), k))
    else:
        names, ops = optimized_kernels(optimized)
        per_run, shapes = [], {}
    att = attribute(g, optimized, names)
    m = _metric_arrays(g, metrics)
    runs = executed_types(optimized) if np.isin(m["compute_dtype"], ["float16", *INT_TYPES]).any() else {}
    groups = _groups(att, len(g.nodes))
    owner = _group_owners(names, ops, att["anchor"])
    own = _own_tensors(g, optimized)
    copies, blocked, rows = output_copies(optimized), nchwc_kernels(optimized), []
    for k in names:
        a, op = att["anchor"].get(k), ops.get(k, "")
        if a is None:       # a kernel ORT inserted: its own tensors, where the original graph knows them
            dims, nb_in, nb_out = own.get(k, ("", 0.0, 0.0))
            nb_in, nb_out = (0.0, 0.0) if op in VIEW_KERNELS else (nb_in, nb_out)
            row = {"pattern": op, "node": "", "nodes": "", "n_nodes": 0, "flops": 0.0, "macs": 0.0, "weight_bytes": 0.0,
                   "act_in_bytes": nb_in, "act_out_bytes": nb_out, "bytes": nb_in + nb_out, "compute_dtype": "float",
                   "dims": dims, "layout": op in LAYOUT_KERNELS, "axis_stride": 1.0, "exp_underflow": 0.0,
                   "subnormal": 0.0}
        elif owner.get(a) != k:    # a second kernel on a group: a view, a layout or a copy of its output
            # a view moves no data; a layout kernel its own tensor (of the group's input or output: which, only
            # its node says); else the group's output
            nb = float(np.nan_to_num(m["act_out"][a]))
            nb_in, nb_out = (0.0, 0.0) if op in VIEW_KERNELS else own.get(k, ("", nb, nb))[1:]
            row = {"pattern": op, "node": m["node"][a], "nodes": "", "n_nodes": 0, "flops": 0.0, "macs": 0.0,
                   "weight_bytes": 0.0, "act_in_bytes": nb_in, "act_out_bytes": nb_out, "bytes": nb_in + nb_out,
                   "compute_dtype": m["compute_dtype"][a], "dims": m["dims"][a], "layout": True, "axis_stride": 1.0,
                   # the Exp of a Softmax ORT runs as its function's nodes (fp16) takes the exponentials
                   "exp_underflow": float(np.max(m["exp_underflow"][groups[a]])) if op in EXPONENTIAL else 0.0,
                   "subnormal": 0.0}
        else:
            row = group_row(groups[a], op, m)
            if all(m["folded"][p] for p in groups[a]) and k in own:
                # ORT runs it at every inference all the same (a DequantizeLinear of weights whose consumer has no
                # integer kernel: EfficientWord-Net's 2048x1024 one ran 295 us, charged 0 bytes): its stored
                # inputs in, its tensor out
                _, nb_in, nb_out = own[k]
                row.update(weight_bytes=nb_in, act_in_bytes=0.0, act_out_bytes=nb_out, bytes=nb_in + nb_out)
        if k in copies:     # reads its tensor and writes it
            nb = row["act_out_bytes"] or own.get(k, ("", 0.0, 0.0))[2]
            row.update(act_in_bytes=nb, act_out_bytes=nb, bytes=2 * nb)
        row.update(_as_run(row, op, runs.get(k, ("", "")), own.get(k)))
        ts = np.array([r.get(k, 0.0) for r in per_run], dtype=float)
        ins, outs = shapes.get(k, ("", ""))
        rows.append({"kernel": k, "op": f"Nchwc{op}" if k in blocked else op, **row, "out_numel": _numel(row["dims"]),
                     "in_shapes": ins, "out_shapes": outs, "t_us": float(np.median(ts)) if ts.size else np.nan,
                     "p10_us": float(np.percentile(ts, 10)) if ts.size else np.nan,
                     "p90_us": float(np.percentile(ts, 90)) if ts.size else np.nan, "runs": int(ts.size)})
    table = pd.DataFrame(rows, columns=KERNEL_COLUMNS)
    return table if events is not None else with_taken_branches(g, metrics, table, optimized)


MAX_UNROLLED_TRIPS = 1000      # a Loop of more iterations stays one kernel (its table would hold trips x body)


def with_taken_branches(g, metrics: pd.DataFrame, kt: pd.DataFrame, optimized: onnx.ModelProto | None) -> pd.DataFrame:
    """The kernel table (without times) with each If whose branch the workload's inputs take (02's cost_note:
    'then_branch taken') replaced by the kernels of that branch: the kernel table of ORT's optimized branch over
    the original one (optimum's merged decoders hold the whole model in one If: predicted as one 'If' kernel,
    -97%). Nested Ifs the same way (their conditions from the values the Graph knows). A Loop of known trip count
    the same, its body's kernels once per iteration (as one never-seen 'Loop' kernel: 10.06 ms for 3 iterations of
    a conv measured 4.71 ms)."""
    cf = np.flatnonzero(np.isin(kt["op"].to_numpy(object), list(CONTROL_FLOW)))
    if not len(cf) or optimized is None:
        return kt
    opt = {n.name: n for n in name_nodes(optimized).graph.node}
    where = {name: pos for pos, name in enumerate(g.names)}
    notes = dict(zip(metrics["node"], metrics["cost_note"].fillna("").astype(str))) if "cost_note" in metrics else {}
    parts, last = [], 0
    for i in cf:
        node = g.nodes[where[kt.at[i, "node"]]] if kt.at[i, "node"] in where else None
        if node is None or node.op_type != kt.at[i, "op"]:
            continue
        if node.op_type == "If":
            note = notes.get(kt.at[i, "node"], "")
            times, branch = 1, (if_branch(node, g)
                                or next((b for b in ("then_branch", "else_branch") if note == f"{b} taken"), None))
        else:       # a Scan stays one kernel
            times, branch = (loop_trips(node, g), "body") if node.op_type == "Loop" else (None, None)
        ran = opt.get(kt.at[i, "kernel"])
        if branch is None or ran is None or times is None or times > MAX_UNROLLED_TRIPS:
            continue
        sub = subgraph_view(next(a.g for a in node.attribute if a.name == branch), g)
        body = onnx.ModelProto(ir_version=optimized.ir_version)
        body.graph.CopyFrom(next(a.g for a in ran.attribute if a.name == branch))
        body.opset_import.extend(optimized.opset_import)
        parts += [kt.iloc[last:i]] + [kernel_table(sub, node_metrics(sub), body)] * times
        last = i + 1
    return pd.concat(parts + [kt.iloc[last:]], ignore_index=True) if parts else kt

