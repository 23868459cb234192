"""Shapes that cannot miss: every node output's shape, and where it came from (shape_source).

1. onnx      onnx's shape inference with data propagation;
2. values    static value propagation through shape arithmetic (Shape/Gather/Slice/Concat/Unsqueeze/
             Reshape/Cast/arithmetic ... evaluated with numpy, as onnx-tool does): tensors whose values
             become known are folded into constants and onnx's inference runs again;
3. ort       ONNX Runtime's symbolic shape inference, for what 1 and 2 left (symbolic mask arithmetic);
4. executed  the last resort: one ONNX Runtime run on the workload's inputs with every intermediate tensor
             exposed (exact for those inputs). It also tells which If branch ran and small values
             (conditions, trip counts).
Nothing here writes outside a temporary folder of ours (ORT's symbolic inference would drop
sym_shape_infer_temp.onnx into the working directory; we drive it ourselves).
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import re
import signal
import subprocess
import sys
import tempfile
import threading
from itertools import chain, filterfalse
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper, shape_inference

from lib.errors import StageError
from lib.onnx.graph import CONTROL_FLOW, MAX_VALUE_ELEMENTS, RANDOM_OPS, SHAPE_READERS, NodeTable
from lib.onnx.graph import TensorInfo, _small_values, _tensor_infos, add_constant_infos, outer_reads
from lib.onnx.ops import lookup, names_with
from lib.onnx.reader import attribute_subgraphs, with_metadata

EXECUTE_MAX_FILE_BYTES = 1_800_000_000    # a single protobuf holds < 2 GB: bigger models are not executed
EXECUTE_TIMEOUT_S = 60                    # the one run of the last resort; longer is reported, not waited for


def _complete(vi) -> bool:
    t = vi.type.tensor_type
    return (vi.type.HasField("tensor_type") and t.HasField("shape")
            and all(d.HasField("dim_value") and d.dim_value >= 0 for d in t.shape.dim))


def known_shapes(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    g = model.graph
    return {vi.name: vi for vi in list(g.input) + list(g.value_info) + list(g.output) if _complete(vi)}


def _onnx_infer(model: onnx.ModelProto) -> onnx.ModelProto:
    try:
        return shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=True)
    except Exception as e:  # noqa: BLE001
        msg = " ".join(str(e).split())[:300]
        raise StageError(f"ONNX shape inference rejects the model: {msg}") from None


ORT_SYMBOLIC_MAX_NESTING = 4   # ORT's symbolic inference re-infers every branch per level: exponential in depth


def _nesting_depth(g: onnx.GraphProto) -> int:
    """How deep control-flow bodies nest (0: none)."""
    subs = [sub for n in g.node for a in n.attribute for sub in attribute_subgraphs(a)]
    return 1 + max(map(_nesting_depth, subs)) if subs else 0


def _strict_infer(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnx's strict inference with data propagation (check_type, strict_mode, data_prop)."""
    return onnx.ModelProto.FromString(shape_inference.C.infer_shapes(model.SerializeToString(), True, True, True))


def _checked_infer(model: onnx.ModelProto, full_fn) -> onnx.ModelProto:
    """onnx's inference in strict mode; where it finds an error (a type or attribute an op cannot take), the
    model is refused when ONNX Runtime refuses to load it too, else (an export that is not checker-clean but
    runs) analysed with the lenient inference."""
    try:
        return _strict_infer(model)
    except Exception as e:  # noqa: BLE001
        strict = " ".join(str(e).split())[:300]
    lenient = _onnx_infer(model)
    refused = ort_refusal(full_fn())
    if refused:
        raise StageError(f"the model is invalid: {strict} (ONNX Runtime refuses it too: {refused[:200]})")
    return lenient


def _ort_symbolic(model: onnx.ModelProto) -> onnx.ModelProto | None:
    """ORT's SymbolicShapeInference driven here: its own infer_shapes() saves a file into the working directory
    and raises when shapes remain; we keep the partial result instead. Loaded from its file: importing
    onnxruntime.tools imports torch (about 550 MB of resident memory for nothing)."""
    if not any(o.domain in ("", "ai.onnx") and o.version >= 7 for o in model.opset_import):
        return None
    if _nesting_depth(model.graph) > ORT_SYMBOLIC_MAX_NESTING:
        return None
    spec = importlib.util.find_spec("onnxruntime")
    path = Path(spec.origin).parent / "tools" / "symbolic_shape_infer.py"
    mod_spec = importlib.util.spec_from_file_location("_ort_symbolic_shape_infer", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    logging.getLogger("_ort_symbolic_shape_infer").setLevel(logging.CRITICAL)
    mod.logger.setLevel(logging.CRITICAL)
    try:
        with _time_limit(ORT_SYMBOLIC_TIMEOUT_S):
            ssi = mod.SymbolicShapeInference(2**31 - 1, True, False, 0)
            ssi._preprocess(model)
            while ssi.run_:
                ssi._infer_impl()
            ssi._update_output_from_vi()
            return ssi.out_mp_
    except Exception:  # noqa: BLE001 - keep what the other methods found (past the time limit too)
        return None


# ORT's symbolic inference simplifies Slice bounds with sympy: 8 minutes on a torchvision Faster R-CNN, finding
# nothing that the one run of the last resort did not (02 and 01 each paid it); past this, that run decides
ORT_SYMBOLIC_TIMEOUT_S = 60


@contextlib.contextmanager
def _time_limit(seconds: float):
    """A TimeoutError raised in the block after `seconds` (SIGALRM: the main thread of a POSIX process only;
    elsewhere no limit)."""
    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "setitimer"):
        yield
        return

    armed = [True]

    def expire(signum, frame):
        if armed[0]:        # one shot, never once the block is left
            raise TimeoutError(f"over {seconds:g} s")
    previous = signal.signal(signal.SIGALRM, expire)
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        yield
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ---------------------------------------------------------------- static value propagation

PROPAGATE_MAX_ELEMENTS = 1 << 18     # values propagated through shape arithmetic (index tables of attention)


def _eval(node, ins: list, shape):
    """Outputs of one node from known input values: its registry entry's evaluator (numpy), else onnx's
    reference implementation. shape: the first input's (Shape, Size)."""
    op = lookup(node)
    if op is not None and op.made_elements is not None and op.made_elements(ins) > PROPAGATE_MAX_ELEMENTS:
        raise ValueError("too large to propagate")
    return op.evaluate(node, ins, shape) if op is not None and op.evaluate is not None else _reference(node, ins)


def _reference(node, ins: list):
    """Any other op, by onnx's reference implementation (slow to set up, so only for the rare leftovers)."""
    from onnx.reference import ReferenceEvaluator
    feeds = {t: v for t, v in zip(node.input, ins) if t}
    return ReferenceEvaluator(node).run(None, feeds)


def propagate_values(model: onnx.ModelProto, shapes: dict[str, list[int]], values: dict[str, np.ndarray],
                     given_up: set | None = None) -> dict:
    """Values of small tensors computable from constants and known shapes (shape arithmetic). Nodes that
    failed or were too large go in `given_up` (their inputs do not change between rounds: not tried again)."""
    new, given_up = {}, set() if given_up is None else given_up
    for k, node in enumerate(model.graph.node):
        if node.op_type in CONTROL_FLOW or node.op_type in RANDOM_OPS or not node.output or k in given_up \
                or all(o in values for o in node.output if o):
            continue
        ins = [t for t in node.input]
        if node.op_type in SHAPE_READERS:
            if ins[0] not in shapes:
                continue
            args, shp = [], shapes[ins[0]]
        else:
            if not ins or any(t and t not in values for t in ins):
                continue
            args, shp = [values[t] if t else None for t in ins], None
            while args and args[-1] is None:
                args.pop()
        try:
            # a log(0) or a cast of inf is the value the model computes: not a warning for the user's console
            with np.errstate(all="ignore"):
                outs = _eval(node, args, shp)
        except Exception:  # noqa: BLE001 - values we cannot evaluate stay unknown
            given_up.add(k)
            continue
        for name, v in zip(node.output, outs or []):
            v = np.asarray(v)
            if name and v.size <= PROPAGATE_MAX_ELEMENTS:
                values[name] = new[name] = v
            elif name:
                given_up.add(k)
    return new


def _fold(model: onnx.ModelProto, values: dict[str, np.ndarray], cache: dict, tensors: dict) -> onnx.ModelProto:
    """A copy where nodes whose one output has a known value become Constant nodes (same tensor names), with
    the shapes known so far as value_info (onnx keeps them where its own inference of an op fails); `cache`
    keeps the Constant nodes and value_info made in earlier rounds."""
    nodes = []
    for n in model.graph.node:
        outs = n.output
        if len(outs) == 1 and outs[0] in values and n.op_type != "Constant":
            c = cache.get(outs[0])
            if c is None:
                c = cache[outs[0]] = helper.make_node("Constant", [], [outs[0]], name=n.name, value=numpy_helper.from_array(
                    np.ascontiguousarray(values[outs[0]]), outs[0]))
            nodes.append(c)
        else:
            nodes.append(n)
    m = _copy(model)
    g = m.graph
    del g.node[:]
    g.node.extend(nodes)
    inputs = {i.name for i in g.input}
    keep = [vi for vi in g.value_info if not (vi.name in tensors and tensors[vi.name].shape is not None)]
    del g.value_info[:]
    g.value_info.extend(keep)
    for t, info in tensors.items():
        if info.shape is not None and t not in inputs:
            vi = cache.get(("vi", t))
            if vi is None:
                vi = cache[("vi", t)] = helper.make_tensor_value_info(t, info.elem_type, info.shape)
            g.value_info.append(vi)
    return m


# ---------------------------------------------------------------- the last resort: one execution

def load_full(path: Path) -> onnx.ModelProto:
    """The model with its weights (for the execution step only)."""
    if path.stat().st_size > EXECUTE_MAX_FILE_BYTES:
        raise ExecutionFailed("the model file is too large to run in one protobuf")
    try:
        return onnx.load(str(path))
    except Exception as e:  # noqa: BLE001
        raise ExecutionFailed(f"cannot read its weights: {type(e).__name__}") from None


def execute(full: onnx.ModelProto, feeds: dict, want: list[str], timeout_s: float = EXECUTE_TIMEOUT_S
            ) -> tuple[dict, dict]:
    """Shapes, element types and small values of the `want` tensors (and of If conditions / Loop counts) from
    one ORT run of the real model with every intermediate tensor exposed as an output, in a separate process
    with a time limit (lib/onnx/shape_worker.py): ({name: (shape, elem_type)}, {name: small integer/bool value})."""
    full = _copy(full)
    have = {o.name for o in full.graph.output} | {i.name for i in full.graph.input}
    extra = [t for t in dict.fromkeys(list(want) + _control_inputs(full)) if t and t not in have]
    full.graph.output.extend(helper.ValueInfoProto(name=t) for t in extra)
    with tempfile.TemporaryDirectory(prefix="nnperf_exec_") as tmp:
        npz = Path(tmp) / "feeds.npz"
        probe = _write_probe(full, tmp)
        del full                    # the weights are not held while the worker runs
        np.savez(npz, **feeds)
        r = _run_worker(probe, str(npz), tmp, timeout_s=timeout_s)
        if r is None:
            raise ExecutionFailed(f"it did not finish in {timeout_s:.0f} s")
        if r.returncode != 0:
            raise ExecutionFailed(_last_line(r)[:300])
        shapes = {k: (v[0], v[1]) for k, v in json.loads((Path(tmp) / "shapes.json").read_text()).items()}
        with np.load(Path(tmp) / "values.npz", allow_pickle=False) as d:
            vals = {str(n): d[f"v{k}"] for k, n in enumerate(d["__names__"])}
    return shapes, vals


def ort_refusal(full: onnx.ModelProto, timeout_s: float = EXECUTE_TIMEOUT_S) -> str | None:
    """Why ONNX Runtime refuses to load the model (None when it loads), in a separate process (lib/onnx/shape_worker.py)."""
    with tempfile.TemporaryDirectory(prefix="nnperf_load_") as tmp:
        r = _run_worker(_write_probe(full, tmp), "-", timeout_s=timeout_s)
    if r is None or r.returncode != 3:      # loaded, timed out, or the worker died (memory): no verdict
        return None
    return re.sub(r"Load model from \S+ failed: ?", "", _last_line(r))


def _write_probe(full: onnx.ModelProto, tmp: str) -> Path:
    probe = Path(tmp) / "probe.onnx"
    probe.write_bytes(full.SerializeToString())
    return probe


def _run_worker(probe: Path, *args: str, timeout_s: float):
    """lib/onnx/shape_worker.py on the saved model; None when it ran past timeout_s."""
    try:
        return subprocess.run([sys.executable, str(Path(__file__).with_name("shape_worker.py")), str(probe), *args],
                              capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None


def _last_line(r: subprocess.CompletedProcess) -> str:
    return (r.stderr.strip().splitlines() or [f"exit {r.returncode}"])[-1]


class ExecutionFailed(Exception):
    pass


SHAPE_BY_RUN = names_with("shape_by_run")     # their output shapes come from the execution step


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    return m


def _shape_of(vi) -> list[int]:
    return [d.dim_value for d in vi.type.tensor_type.shape.dim]


# ---------------------------------------------------------------- the chain

class Inferred:
    """The shape-inferred graph (weights stripped), its tensors' types and shapes, and what the chain learnt on
    the way: where each shape not from onnx's inference came from, small values, a note on the execution.
    `model` may come serialized: it is parsed when first asked for (stage 02 saves it as it is: tagged_bytes)."""
    def __init__(self, model: onnx.ModelProto | bytes, tensors, source, values, executed_note=""):
        self._model, self.tensors, self.source, self.values = model, tensors, source, values
        self.executed_note = executed_note

    @property
    def model(self) -> onnx.ModelProto:
        self._model = _parsed(self._model)
        return self._model

    def tagged_bytes(self, key: str, value: str) -> bytes:
        """The inferred model serialized, with metadata_props the one entry key = value (not parsed for it)."""
        data = self._model if isinstance(self._model, bytes) else self._model.SerializeToString()
        return with_metadata(data, key, value)


def _parsed(model: onnx.ModelProto | bytes) -> onnx.ModelProto:
    return onnx.ModelProto.FromString(model) if isinstance(model, bytes) else model


def _parse(model: onnx.ModelProto, constants: bool = True) -> tuple[dict, set[str]]:
    """TensorInfo of every typed tensor of the main graph, and the names typed as something else (sequences)."""
    other: set[str] = set()
    tensors = _tensor_infos(model.graph, other, constants)
    return tensors, other


def _wanted(model: onnx.ModelProto, table=None) -> list[str]:
    """Node outputs that need a shape: read by a node or a graph output (a dead optional output, such as an
    unused Dropout mask, is never computed; of a node none of whose outputs is read, which runs all the same, its
    first), not Constant outputs (infer() leaves out the sequence typed ones).
    `table`: the graph's NodeTable when the caller read it (200k protobuf nodes are not walked twice)."""
    g = model.graph
    table = table or NodeTable.of(g)
    used = set(chain.from_iterable(table.inputs))      # sets and filters in C: 200k nodes
    used.update(o.name for o in g.output)
    if not CONTROL_FLOW.isdisjoint(table.ops):
        used.update(t for n, op in zip(table.protos, table.ops) if op in CONTROL_FLOW for t in outer_reads(n))
    used.discard("")
    outs = table.outputs if "Constant" not in table.ops else [os_ for op, os_ in zip(table.ops, table.outputs)
                                                               if op != "Constant"]
    # a node nothing reads runs all the same (ONNX Runtime keeps it): its first output needs a shape too
    used.update(os_[0] for os_ in outs if os_ and os_[0] and not any(map(used.__contains__, os_)))
    return list(filter(used.__contains__, chain.from_iterable(outs)))


# attributes onnx's inference reads with another default than the operator's spec (onnx 1.23: STFT's onesided as
# 0, 16 bins of a 16-sample window where ONNX Runtime writes 9): written out before it runs
SPEC_DEFAULTS = {"STFT": {"onesided": 1}}


def _spec_defaults(model: onnx.ModelProto, table=None) -> None:
    """SPEC_DEFAULTS set on the main graph's nodes that leave them out (in place)."""
    ops = table.ops if table is not None else [n.op_type for n in model.graph.node]
    if SPEC_DEFAULTS.keys().isdisjoint(ops):       # (in C: 200k nodes)
        return
    for n in model.graph.node:
        for k, v in SPEC_DEFAULTS.get(n.op_type, {}).items():
            if all(a.name != k for a in n.attribute):
                n.attribute.append(helper.make_attribute(k, v))


def infer(model: onnx.ModelProto, full_fn, feeds_fn, depth: int = 4, table=None) -> Inferred:
    """Run the chain on a model whose inputs are fixed. For the execution step only: full_fn() gives the model
    with its weights, feeds_fn() its inputs. table: the model's NodeTable, when the caller has it."""
    table = table if table is not None and len(table.ops) == len(model.graph.node) else None   # the model's own
    _spec_defaults(model, table)
    want = _wanted(model, table)
    values = _small_values(model.graph, table)
    control_flow = _needs_values(model, table)
    m1 = _checked_infer(model, full_fn)
    tensors, other = _parse(m1)
    if other:       # the nodes and outputs inference leaves as they are, without the sequence typed ones
        want = list(filterfalse(other.__contains__, want))

    def missing() -> list[str]:
        """The wanted tensors without a shape yet. In C when every TensorInfo has a shape (they are shared per
        type: few distinct ones), as after onnx's inference of most graphs."""
        if any(i is None or i.shape is None for i in set(tensors.values())):
            return [t for t, i in zip(want, map(tensors.get, want)) if i is None or i.shape is None]
        return list(filterfalse(tensors.__contains__, want))

    source: dict[str, str] = {}
    resolved: dict[str, onnx.ValueInfoProto] = {}

    def add(vis: dict, how: str) -> None:
        for t in missing():
            vi = vis.get(t)
            if vi is not None and _complete(vi):
                tensors[t], source[t], resolved[t] = TensorInfo(_shape_of(vi), vi.type.tensor_type.elem_type), how, vi

    gaps = missing()        # asked again only after a step that may have filled some
    if gaps or control_flow:
        _propagate(model, tensors, values, add)
        gaps = missing()
    if gaps:
        m2 = _ort_symbolic(model)
        ops = table.ops if table is not None else [n.op_type for n in model.graph.node]
        wrong = set() if SHAPE_BY_RUN.isdisjoint(ops) else \
            {o for n in model.graph.node if n.op_type in SHAPE_BY_RUN for o in n.output}
        add({t: vi for t, vi in known_shapes(m2).items() if t not in wrong} if m2 is not None else {}, "ort")
        gaps = missing()
    note = ""
    if gaps or control_flow and _unknown_conditions(model, values):
        note = _execute_step(full_fn, feeds_fn, values, gaps, add)
    if resolved:
        m1 = _parsed(m1)
        keep = [vi for vi in m1.graph.value_info if vi.name not in resolved]
        del m1.graph.value_info[:]
        m1.graph.value_info.extend(keep + list(resolved.values()))
    if control_flow:        # (a graph without If has no branch to take: 200k protobuf nodes not walked again)
        reused = _taken_branches(model, full_fn, feeds_fn, tensors, source, values, depth)
        fixed = {t: tensors[t] for t in reused if t in tensors and tensors[t].shape is not None}
        if fixed:
            m1 = _parsed(m1)
            _retype_taken(m1, values, fixed)
    return Inferred(m1, tensors, source, values, note)


def _taken_branches(model, full_fn, feeds_fn, tensors, source, values, depth: int = 4) -> set[str]:
    """Shapes inside the If branches these inputs take: the branches are inlined into a copy of the graph and
    the chain runs on it (the tensors of a body keep their names). Where the taken branch shares names with the
    other (optimum's merged decoders reuse 66-125 names across use_cache_branch's two branches), every tensor of
    the taken branch takes the inlined run's shape and value: the first pass shaped such a name from either
    branch, and what follows it from that (T5's prefill got 0.8% too few MACs, Whisper's 8.7% too many).
    Returns the names so retyped."""
    inlined = _inline_taken(model, values)
    reused = _reused_names(model, values)
    if inlined is None or depth == 0 or (not reused and _already_shaped(model, inlined, tensors, values)):
        return set()
    sub = infer(inlined, lambda: _inline_taken(full_fn(), values), feeds_fn, depth - 1)
    for t, info in sub.tensors.items():
        if t not in tensors or tensors[t].shape is None or t in reused:
            tensors[t] = info
            source[t] = sub.source.get(t, "onnx")
    for t, v in sub.values.items():
        if t in reused:
            values[t] = v
        else:
            values.setdefault(t, v)
    return reused


def _branches(node, values: dict) -> tuple | None:
    """(taken branch, other branch) of an If whose condition's value is known, else None (a branch absent: None)."""
    cond = values.get(node.input[0]) if node.op_type == "If" and node.input else None
    if cond is None:
        return None
    got = {a.name: a.g for a in node.attribute if a.name in ("then_branch", "else_branch")}
    return (got.get("then_branch"), got.get("else_branch"))[::1 if bool(cond) else -1]


def _retype_taken(model: onnx.ModelProto, values: dict, fixed: dict) -> None:
    """The taken If branches' value_info of the `fixed` tensors ({name: TensorInfo}) replaced, in place: the costs
    read a body's shapes from its value_info, where onnx's inference of the whole model wrote them."""
    for node in model.graph.node:
        body = (_branches(node, values) or (None,))[0]
        if body is None:
            continue
        mine = {o for n in body.node for o in n.output} & set(fixed)
        typed = {t: helper.make_tensor_value_info(t, fixed[t].elem_type, fixed[t].shape) for t in sorted(mine)}
        keep = [vi for vi in body.value_info if vi.name not in mine]
        del body.value_info[:]
        body.value_info.extend(keep + list(typed.values()))
        for o in body.output:       # the branch's outputs as well (inference typed them from the other branch)
            if o.name in typed:
                o.CopyFrom(typed[o.name])


def _reused_names(model, values) -> set[str]:
    """Every tensor a taken If branch computes, where that branch shares a name with the other one (else none):
    whatever the first pass shaped from such a name, downstream in the branch, may hold the other's shapes."""
    out = set()
    for node in model.graph.node:
        taken, other = _branches(node, values) or (None, None)
        if taken is not None and other is not None:
            mine = _produced(taken)
            if mine & _produced(other):
                out |= mine
    return out


def _produced(graph) -> set[str]:
    """Tensor names the nodes of a graph and of its nested bodies write."""
    names = set()
    for n in graph.node:
        names.update(o for o in n.output if o)
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                names |= _produced(a.g)
    return names


def _already_shaped(model, inlined, tensors, values) -> bool:
    """Nothing to gain from running the chain on the inlined graph: every tensor has a shape already and the
    taken branches hold no control flow of their own (whose bodies only that run would reach)."""
    n_cf = lambda m: sum(n.op_type in CONTROL_FLOW for n in m.graph.node)  # noqa: E731
    taken = sum(n.op_type == "If" and bool(n.input) and n.input[0] in values for n in model.graph.node)
    return n_cf(inlined) == n_cf(model) - taken and all(
        o in tensors and tensors[o].shape is not None for n in inlined.graph.node for o in n.output if o)


def _inline_taken(model: onnx.ModelProto, values: dict) -> onnx.ModelProto | None:
    """A copy of the model with every If whose condition is known replaced by the nodes of its taken branch
    (Identity nodes carry the branch outputs onto the If's outputs); None when there is no such If."""
    nodes, inits, infos, n = [], [], [], 0
    for node in model.graph.node:
        body = (_branches(node, values) or (None,))[0]
        if body is None:
            nodes.append(node)
            continue
        nodes.extend(body.node)
        inits.extend(body.initializer)
        infos.extend(body.value_info)
        nodes.extend(helper.make_node("Identity", [bo.name], [o], name=f"{node.name}__out{k}")
                     for k, (bo, o) in enumerate(zip(body.output, node.output)) if o)
        n += 1
    if not n:
        return None
    m = _copy(model)
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    m.graph.initializer.extend(inits)
    # the enclosing graph's types of the branches' tensors: a name both branches use may carry the other's
    inlined = {o for b in nodes for o in b.output}
    keep = [vi for vi in m.graph.value_info if vi.name not in inlined]
    del m.graph.value_info[:]
    m.graph.value_info.extend(keep + infos)
    return m


def _needs_values(model: onnx.ModelProto, table=None) -> bool:
    """The graph has control flow (its conditions and trip counts need values); from `table` when given."""
    ops = table.ops if table is not None else [n.op_type for n in model.graph.node]
    return not CONTROL_FLOW.isdisjoint(ops)     # (in C: 200k nodes)


def _propagate(model, tensors, values, add, rounds: int = 64) -> None:
    """Rounds of value propagation and onnx inference on the folded graph, while they find new shapes (each
    round gets one more Shape -> arithmetic -> Reshape -> Shape link further down the graph)."""
    cache: dict = {}
    given_up: set = set()
    for _ in range(rounds):
        shapes = {n: t.shape for n, t in tensors.items() if t.shape is not None}
        if not propagate_values(model, shapes, values, given_up):
            return
        try:
            m3 = _onnx_infer(_fold(model, values, cache, tensors))
        except StageError:
            return
        n_known = len(shapes)
        add({vi.name: vi for vi in chain(m3.graph.value_info, m3.graph.output)}, "values")
        if sum(1 for t in tensors.values() if t.shape is not None) == n_known:
            return


def _control_inputs(model: onnx.ModelProto) -> list[str]:
    """If conditions and Loop trip counts / initial conditions of the main graph."""
    return [t for n in model.graph.node if n.op_type in ("If", "Loop") for t in n.input[:2 if n.op_type == "Loop" else 1] if t]


def _unknown_conditions(model, values) -> bool:
    return any(t not in values for t in _control_inputs(model))


def _execute_step(full_fn, feeds_fn, values, missing, add) -> str:
    try:
        feeds = feeds_fn()
        shapes, vals = execute(full_fn(), feeds, missing)
    except ExecutionFailed as e:
        return f"the shape-resolving run of ONNX Runtime failed: {e}"
    add({t: helper.make_tensor_value_info(t, shapes[t][1], shapes[t][0]) for t in missing if t in shapes}, "executed")
    for t, v in {**vals, **{k: v for k, v in feeds.items() if v.size <= MAX_VALUE_ELEMENTS and v.dtype.kind in "biu"}}.items():
        values.setdefault(t, v)
    return ""
