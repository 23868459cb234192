"""Refuse a structurally invalid graph before analysing it: figures computed on a graph ONNX Runtime would refuse
mean nothing. One StageError naming the node (or tensor) and the rule.

onnx.checker is not the gate: real exports are often not checker-clean (Model Zoo IR-3 files, contrib ops,
missing value_info types) yet run fine in ONNX Runtime. These are the rules both agree on, checked in
O(nodes + edges), recursively into If/Loop/Scan bodies with their outer scope:
- every node input is produced by a node, an initializer or a graph input (outer scope for bodies);
- one producer per tensor; every graph output is produced;
- names, op types and domains are text (valid UTF-8);
- known element types; initializer dims >= 0 (a negative dim on an input or value_info means "dynamic" to
  some exporters and to ONNX Runtime: it is left unresolved, not refused); no tensor whose size is beyond
  any real machine (a dim of 2^62 is a corrupt file, not a model); initializer data as long as its dims say;
- what each op's schema requires (onnx.defs): required inputs present, attributes of the declared type,
  required attributes (an If's branches) there, If/Loop bodies with as many inputs/outputs as the node, and
  the element types a schema allows for the graph inputs and weights a node reads directly.
Cycles (self-loops included) are refused when the graph is ordered (lib/onnx/graph.py).
A graph that calls the model's local functions is refused too, with the command that inlines them: the stages cost
and attribute the nodes of the graph, and a call's body would go uncosted while ONNX Runtime's inlined kernels were
booked onto a neighbour (a residual CNN exported with export_modules_as_functions: 1% of its MACs, -88% predicted).
"""
from __future__ import annotations

import functools
import math
from itertools import chain
from typing import NamedTuple

import onnx
from onnx import TensorProto

from lib.errors import StageError
from lib.onnx.graph import NodeTable
from lib.onnx.ops import names_with
from lib.onnx.reader import STRIPPED, attribute_subgraphs, elem_size

MAX_ELEMENTS = 2**48            # 256 Ti elements: larger than any accelerator's memory by orders of magnitude
KNOWN_TYPES = set(TensorProto.DataType.values()) - {TensorProto.UNDEFINED}


def _label(g: onnx.GraphProto, i: int) -> str:
    n = g.node[i]
    name = n.name if isinstance(n.name, str) and n.name else f"#{i}"
    return f"node {name} ({n.op_type if isinstance(n.op_type, str) else repr(n.op_type)})"


def _check_text(g: onnx.GraphProto, where: str, lists) -> None:
    """Protobuf hands back bytes for a string field that is not valid UTF-8: a corrupt file."""
    for what, values in lists:
        values = values if isinstance(values, list) else list(values)
        if bytes not in set(map(type, values)):     # one pass in C; the loop below only says where
            continue
        for i, v in enumerate(values):
            if type(v) is bytes:
                raise StageError(f"{where}{what} #{i} is not valid UTF-8 text ({v[:40]!r}): the model file is corrupt")


def _check_dims(dims, what: str) -> None:
    if any(d < 0 for d in dims):
        raise StageError(f"{what} has a negative dim {list(dims)}: the model file is corrupt")
    if dims and math.prod(dims) > MAX_ELEMENTS:
        raise StageError(f"{what} has {math.prod(dims):.3g} elements (dims {list(dims)}): not a real model")


def _check_value_infos(vis, where: str) -> None:
    for vi in vis:
        if not vi.type.HasField("tensor_type"):
            continue
        tt = vi.type.tensor_type
        if tt.elem_type not in KNOWN_TYPES:
            raise StageError(f"{where}tensor {vi.name!r} has unknown element type {tt.elem_type}")
        if tt.HasField("shape"):
            # negative dims mean "dynamic" to some exporters (Paddle) and to ONNX Runtime: left unresolved
            _check_dims([d.dim_value for d in tt.shape.dim if d.dim_value > 0], f"{where}tensor {vi.name!r}")


def _two_producers(g: onnx.GraphProto, outs: list[list[str]], defined: set[str], where: str) -> None:
    produced: dict[str, int] = {}
    for i, os_ in enumerate(outs):
        for o in os_:
            if o and (o in produced or o in defined):
                other = _label(g, produced[o]) if o in produced else "an initializer or graph input"
                raise StageError(f"{where}tensor {o!r} has two producers ({_label(g, i)} and {other})")
            produced[o] = i


def _check_graph(g: onnx.GraphProto, outer: set[str], where: str, table: NodeTable | None = None,
                 opsets: dict | None = None) -> None:
    table = table or NodeTable.of(g)
    ins, outs = table.inputs, table.outputs
    _check_text(g, where, (("op type of node", table.ops), ("domain of node", table.domains),
                           ("name of node", table.names), ("tensor name", chain.from_iterable(ins + outs)),
                           ("value name", [vi.name for vi in chain(g.input, g.output, g.value_info)]),
                           ("initializer name", [t.name for t in g.initializer])))
    _check_value_infos(chain(g.input, g.output, g.value_info), where)
    for t in g.initializer:
        if t.data_type not in KNOWN_TYPES:
            raise StageError(f"{where}initializer {t.name!r} has unknown element type {t.data_type}")
        _check_dims(list(t.dims), f"{where}initializer {t.name!r}")
        _check_data_length(t, where)
    names = [vi.name for vi in g.input]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        raise StageError(f"{where}graph input {dup!r} is declared twice")
    defined = {vi.name for vi in g.input} | {t.name for t in g.initializer}
    # set operations in C first; the loops that name the node run only when there is something to name
    flat = list(chain.from_iterable(outs))
    produced = set(flat) - {""}
    if len(produced) != len(flat) - flat.count("") or not produced.isdisjoint(defined):
        _two_producers(g, outs, defined, where)
    everything = defined | produced | outer
    if not (everything | {""}).issuperset(chain.from_iterable(ins)):     # "": an absent optional input
        for i, is_ in enumerate(ins):
            for t in is_:
                if t and t not in everything:
                    raise StageError(f"{where}{_label(g, i)} reads {t!r}, which no node, initializer or input produces")
    for o in g.output:
        if o.name not in everything:
            raise StageError(f"{where}graph output {o.name!r} is not produced by any node")
    types = {vi.name: vi.type.tensor_type.elem_type for vi in g.input if vi.type.HasField("tensor_type")}
    types.update({t.name: t.data_type for t in g.initializer})
    opsets = opsets or {}
    rules: dict = {}        # (op, domain) -> _rules(): a dict lookup per node instead of a cached call
    for i, (n, op, domain) in enumerate(zip(table.protos, table.ops, table.domains)):
        if (op, domain) not in rules:
            rules[op, domain] = _node_rules(op, domain, opsets)
        r = rules[op, domain]
        if r is not None:
            label = lambda: f"{where}{_label(g, i)}"    # noqa: E731
            _check_inputs(r, op, ins[i], types, label)
            if not r.attr_types and not r.required_attrs:   # a schema without attributes (MatMul, Add, Relu):
                continue    # none is read, none checked (reading the field of 200k nodes costs more than the rest)
            _check_attributes(r, n.attribute, op, len(ins[i]), len(outs[i]), label)
        for a in n.attribute:
            for sub in attribute_subgraphs(a):
                _check_graph(sub, everything, f"{where}{_label(g, i)} body {a.name}: ", opsets=opsets)
            if a.type == onnx.AttributeProto.TENSOR:
                _check_dims(list(a.t.dims), f"{where}attribute tensor of {_label(g, i)}")


def validate(model: onnx.ModelProto, table: NodeTable | None = None) -> None:
    """StageError on the first structural defect (see the module docstring); `table`: the graph's nodes,
    when the caller already read them."""
    # no default-domain opset is valid (IR-3 classical-ML exports import only ai.onnx.ml, and ONNX Runtime
    # runs them): the default domain's nodes then have no schema version to be checked against
    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    _check_graph(model.graph, set(), "", table, opsets)
    _check_no_function_calls(model)


def _check_no_function_calls(model: onnx.ModelProto) -> None:
    functions = {(f.domain, f.name) for f in model.functions}
    if not functions:
        return
    graphs, called = [model.graph], set()
    while graphs:
        g = graphs.pop()
        for n in g.node:
            if (n.domain, n.op_type) in functions:
                called.add(f"{n.domain}:{n.op_type}" if n.domain else n.op_type)
            graphs.extend(b for a in n.attribute for b in attribute_subgraphs(a))
    if called:
        names = ", ".join(sorted(called)[:3])
        raise StageError(f"the graph calls {len(called)} local function(s) of the model ({names}), which this "
                         "pipeline does not analyse: inline them first, e.g. python -c \"import onnx, "
                         "onnx.inliner; onnx.save(onnx.inliner.inline_local_functions(onnx.load('in.onnx')), "
                         "'out.onnx')\"")


TYPE_IDS = {f"tensor({name.lower()})": value for name, value in TensorProto.DataType.items()}


class Rules(NamedTuple):
    """What a node of an op must satisfy, compiled from its onnx schema."""
    schema: onnx.defs.OpSchema
    required: list[int]             # required input positions
    attr_types: dict[str, int]      # attribute name -> AttributeProto type
    required_attrs: list[str]
    allowed: list                   # per input position: the element types allowed (None: anything)


@functools.cache
def _rules(op: str, domain: str, version: int) -> Rules | None:
    """The Rules of an op, compiled once per op. None: no onnx schema (custom and contrib ops: nothing to
    check)."""
    try:
        s = onnx.defs.get_schema(op, version, domain)
    except Exception:  # noqa: BLE001
        return None
    opt = onnx.defs.OpSchema.FormalParameterOption
    required = [k for k, f in enumerate(s.inputs) if f.option == opt.Single]
    constraints = {c.type_param_str: c.allowed_type_strs for c in s.type_constraints}
    allowed = []
    for f in s.inputs:
        strs = constraints.get(f.type_str, [f.type_str])
        ok = f.option != opt.Variadic and all(t in TYPE_IDS for t in strs)
        allowed.append(frozenset(TYPE_IDS[t] for t in strs) if ok else None)
    attr_types = {name: int(spec.type.value) for name, spec in s.attributes.items()}
    return Rules(s, required, attr_types, [n for n, spec in s.attributes.items() if spec.required], allowed)


def _node_rules(op_type: str, domain: str, opsets: dict) -> Rules | None:
    """_rules() of a node's op under the model's opsets (None: nothing to check)."""
    domain = "" if domain == "ai.onnx" else domain
    return _rules(op_type, domain, opsets[domain]) if domain in opsets else None


def _check_inputs(rules: Rules, op_type: str, ins: list[str], types: dict, label) -> None:
    """A node's inputs against its op's rules: the required ones present, and the element types of the graph
    inputs and weights it reads (`types`) allowed."""
    s, required, _, _, allowed = rules
    for k in required:
        if k >= len(ins) or not ins[k]:
            raise StageError(f"{label()} lacks its required input {s.inputs[k].name!r} ({op_type} needs at "
                             f"least {s.min_input} inputs)")
    if types.keys().isdisjoint(ins):
        return
    for k, t in enumerate(ins[:len(allowed)]):
        if t in types and allowed[k] is not None and types[t] and types[t] not in allowed[k]:
            got = TensorProto.DataType.Name(types[t]).lower()
            raise StageError(f"{label()}: input {t!r} is tensor({got}), which {s.name} does not take")


def _check_attributes(rules: Rules, attrs, op_type: str, n_in: int, n_out: int, label) -> None:
    """A node's attributes (as read once: each protobuf field access costs) against its op's rules."""
    _, _, attr_types, required_attrs, _ = rules
    given = {a.name: a for a in attrs}
    for name in required_attrs:
        if name not in given:
            raise StageError(f"{label()} lacks its required attribute {name!r}")
    for name, a in given.items():
        want = attr_types.get(name)
        if want is not None and a.type != want:
            raise StageError(f"{label()}: attribute {name!r} has type {onnx.AttributeProto.AttributeType.Name(a.type)}, "
                             f"the {op_type} schema says {onnx.AttributeProto.AttributeType.Name(want)}")
    if "dtype" in given and op_type in DTYPE_OPS:
        _check_dtype(rules.schema, given["dtype"].i, label)
    _check_bodies(op_type, given, n_in, n_out, label)


DTYPE_OPS = names_with("dtype_attribute")     # ops whose attribute `dtype` is the element type of their output


def _check_dtype(schema: onnx.defs.OpSchema, dtype: int, label) -> None:
    """A `dtype` attribute naming an element type the op's output can have."""
    allowed = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}.get(schema.outputs[0].type_str, [])
    if allowed and dtype not in {TYPE_IDS.get(t) for t in allowed}:
        name = TensorProto.DataType.Name(dtype).lower() if dtype in KNOWN_TYPES else "no element type"
        kinds = ", ".join(t[7:-1] for t in allowed)
        raise StageError(f"{label()}: attribute dtype = {dtype} ({name}) is not a type {schema.name} generates ({kinds})")


def _check_bodies(op_type: str, given: dict, n_in: int, n_out: int, label) -> None:
    """If branches with as many outputs as the node; a Loop body with 2 + N inputs and 1 + N + K outputs for
    the node's N + K."""
    if op_type == "If":
        for b in ("then_branch", "else_branch"):
            if b in given and len(given[b].g.output) != n_out:
                raise StageError(f"{label()}: {b} has {len(given[b].g.output)} outputs, the If has {n_out}")
    elif op_type == "Loop" and "body" in given:
        body, carried = given["body"].g, n_in - 2
        if len(body.input) != 2 + carried or len(body.output) != 1 + n_out or n_out < carried:
            raise StageError(f"{label()}: its body has {len(body.input)} inputs and {len(body.output)} outputs for "
                             f"{carried} loop-carried values")


def _check_data_length(t: onnx.TensorProto, where: str) -> None:
    """The payload holds as many elements as the dims say (raw bytes, or the typed field's count)."""
    n = math.prod(t.dims)
    size = elem_size(t.data_type)
    if t.data_location == TensorProto.EXTERNAL:
        ext = {e.key: e.value for e in t.external_data}
        have = int(ext["length"]) if "offset" in ext and "length" in ext and ext.get("location") == STRIPPED else None
    elif t.raw_data:
        have = len(t.raw_data)
    else:
        field = {TensorProto.FLOAT: t.float_data, TensorProto.DOUBLE: t.double_data, TensorProto.INT64: t.int64_data}
        data = field.get(t.data_type)
        have = None if data is None or size is None else len(data) * size
    if have is not None and size is not None and have != n * size:
        raise StageError(f"{where}initializer {t.name!r} holds {have} bytes of data, its dims {list(t.dims)} need "
                         f"{n * size}: the model file is corrupt")
