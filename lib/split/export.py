"""Stage 08: cut the two halves of a split out of the pipeline's own Graph, wire their weights, and prove that
part2(part1(x)) == full(x).

The parts are built from stage 02's analysed Graph (lib/onnx/graph.py, from results/<stem>/graph.onnx): its
topological order, its producer/consumer index (which counts the tensors an If/Loop/Scan body reads from the
enclosing graph as that node's inputs, exactly as stage 07's Comm(b) does) and its tensor types (onnx
inference, ORT symbolic inference, value propagation or one execution). Nodes and weights come from the model
file itself (graph.onnx has its weights stripped):

- part1 = the nodes 0..b needed for the cut tensors and for the graph outputs finished on the left;
- part2 = the nodes needed for the other graph outputs, fed by the cut tensors and the original inputs it reads;
  weights computed from constants alone (Constant, ConstantOfShape, Tile ... chains) travel with the part that
  uses them, recomputed there, never sent over the link;
- every input and output is typed: element type and rank from the Graph; dims as the full model has them
  (onnx's inference over the model as declared: a dim the model leaves symbolic stays symbolic, so the parts
  accept what full.onnx accepts, and ONNX Runtime infers their bodies as it does the full model's: a
  value-dependent If whose dead branch is shape-invalid for the concrete inputs still loads), the Graph's
  concrete dims where that inference knows nothing (the tensors it leaves untyped);
- IR version < 4 (Model Zoo era): that IR requires every initializer to be listed as a graph input too, so the
  parts list them (as the full model does). The IR is kept rather than raised: the parts then behave in ONNX
  Runtime exactly like the full model (overridable initializers, the same optimizations), so their latencies
  compare, and no IR/opset pairing is claimed that the exporter never wrote.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, shape_inference

from lib.artifacts import write_json
from lib.errors import StageError
from lib.onnx.graph import Graph, _unique_names, constant_tensors
from lib.onnx.random_ops import seed_random_nodes
from lib.onnx.reader import all_tensors, read_light
from lib.provenance import same_inputs
from lib.split.diagram import render
from lib.split.runner import EXACT_REFERENCE, as_array, check, compare, rel_bound, run, session, stored_eps
from lib.split.validation import reduction_size


class ModelRunError(StageError):
    """The full model itself cannot be loaded or run on the given inputs: no split can validate (exit 2)."""


def split_interface(g: Graph, b: int, consts: set[str]) -> dict:
    """The tensors each part exchanges at boundary b (same definition as stage 07's sweep)."""
    cut, left_outs, right_ins = [], [], []
    outputs = set(g.graph_outputs)
    for pos in range(b + 1):
        for t in g.nodes[pos].output:
            if not t or t in consts:
                continue
            if any(c > b for c in g.consumers.get(t, ())):
                cut.append(t)
            elif t in outputs:
                left_outs.append(t)  # a graph output finished on the left: part1 returns it directly
    for t in g.graph_inputs:
        if any(c > b for c in g.consumers.get(t, ())):
            right_ins.append(t)
    left_ins = [t for t in g.graph_inputs if any(c <= b for c in g.consumers.get(t, ()))]
    return {"boundary": b, "after_node": g.names[b], "cut_tensors": cut, "left_graph_outputs": left_outs,
            "right_graph_inputs": right_ins, "left_graph_inputs": left_ins, **cut_bytes(g, cut)}


def cut_bytes(g: Graph, cut: list[str]) -> dict:
    """comm_bytes: the cut tensors' bytes where known; cut_unknown_size: how many have no size from their shape (a
    string tensor, a sequence), which 08's line said were 0.0 KiB."""
    sizes = [g.tensors[t].nbytes if t in g.tensors else None for t in cut]
    return {"comm_bytes": int(sum(s for s in sizes if s is not None)),
            "cut_unknown_size": sum(s is None for s in sizes)}


def closure(g: Graph, outputs: list[str], stop: set[str]) -> tuple[list[int], list[str]]:
    """The node positions needed to compute `outputs` from the tensors in `stop` (walking back through every
    input, a body's outer-scope reads included), in topological order, and the tensors the walk ended on that
    no included node produces (inputs, weights)."""
    seen: set[int] = set()
    stack: list[int] = []
    leaves: dict[str, None] = {}

    def visit(t: str) -> None:
        if not t:
            return
        if t in stop or t not in g.producer:
            leaves[t] = None
        elif g.producer[t] not in seen:
            seen.add(g.producer[t])
            stack.append(g.producer[t])

    for t in outputs:
        visit(t)
    while stack:
        for t in g.inputs(stack.pop()):
            visit(t)
    return sorted(seen), list(leaves)


def _typed(vi: onnx.ValueInfoProto) -> bool:
    """A type onnx.checker accepts on a graph input/output (a tensor needs its element type and a shape)."""
    kind = vi.type.WhichOneof("value")
    if kind == "tensor_type":
        return vi.type.tensor_type.elem_type != 0 and vi.type.tensor_type.HasField("shape")
    return kind is not None


def _value_infos(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    gm = model.graph
    return {vi.name: vi for vi in list(gm.input) + list(gm.value_info) + list(gm.output)}


def _declared_types(path: Path) -> dict[str, onnx.ValueInfoProto]:
    """onnx's shape inference over the model as its file declares it (weights not read)."""
    light = read_light(path).model
    try:
        light = shape_inference.infer_shapes(light, check_type=False, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - the Graph's types stand in
        pass
    return _value_infos(light)


def _same_kind(a: onnx.ValueInfoProto, b: onnx.ValueInfoProto) -> bool:
    """Same element type and rank (tensors), or the same kind of type (sequences, maps, optionals)."""
    if a.type.WhichOneof("value") != b.type.WhichOneof("value"):
        return False
    if a.type.WhichOneof("value") != "tensor_type":
        return True
    ta, tb = a.type.tensor_type, b.type.tensor_type
    return ta.elem_type == tb.elem_type and len(ta.shape.dim) == len(tb.shape.dim)


def _clean(vi: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
    """A declared type with the dims some exporters write as -1 (meaning dynamic) made unknown."""
    if vi.type.WhichOneof("value") != "tensor_type" or \
            all(d.dim_value >= 0 for d in vi.type.tensor_type.shape.dim):
        return vi
    c = onnx.ValueInfoProto()
    c.CopyFrom(vi)
    for d in c.type.tensor_type.shape.dim:
        if d.HasField("dim_value") and d.dim_value < 0:
            d.Clear()
    return c


def original_nodes(g: Graph, model: onnx.ModelProto, path: Path) -> list[onnx.NodeProto]:
    """The model file's nodes (weights and bodies intact) in the Graph's topological order. graph.onnx keeps the
    file's node list, so the Graph's unique node ids name the same nodes in both."""
    by_name = dict(zip(_unique_names(model.graph.node), model.graph.node))
    out = []
    for pos, name in enumerate(g.names):
        n = by_name.get(name)
        if n is None or n.op_type != g.nodes[pos].op_type:
            raise StageError(f"{path} no longer matches stage 02's graph.onnx (node {name!r}): re-run "
                             f"02_shapes_flops_bytes.py and the stages after it")
        out.append(n)
    return out


class SplitExporter:
    """The model file read once (weights inline; external data stays external), cut at any boundary."""

    def __init__(self, model_path: str | Path, g: Graph, external_data: str = "link"):
        self.path = Path(model_path)
        self.mode = external_data
        self.shared: dict[str, Path] = {}    # {external-data location: the first folder's copy} (link_external_data)
        self.g = g
        self.consts = constant_tensors(g)
        try:
            self.model = onnx.load(str(self.path), load_external_data=False)
        except Exception as e:  # noqa: BLE001
            raise StageError(f"cannot read {self.path}: {type(e).__name__}: {str(e)[:200]}") from None
        self.nodes = original_nodes(g, self.model, self.path)
        # in self.model too: full.onnx is then written seeded
        self.seeded = seed_random_nodes(self.nodes, self.model.graph)
        if self.seeded:     # said: a deployed part would repeat its draws at every process start (hunt17 #1, #6)
            print(f"note: random nodes {', '.join(self.seeded[:5])}{' ...' if len(self.seeded) > 5 else ''} get a fixed "
                  f"seed in full.onnx and the parts, so that a split validates exactly (split_meta.json "
                  f"random_nodes_seeded): each new session then draws the same numbers; remove their seed attribute to "
                  f"deploy clock-seeded draws as your model has them. Their deployment difference includes ORT's "
                  f"optimizer changing the draws (the whole model differs as much between optimization levels)")
        # ONNX Runtime refuses a model with two nodes of one name, as stage 01 would without its renamed copy: the
        # parts and full.onnx take the Graph's unique node ids (conv__2), so that they load and validate
        named = [n.name for n in self.nodes if n.name]
        self.renamed = len(set(named)) < len(named)
        if self.renamed:
            for n, name in zip(self.nodes, g.names):
                n.name = name
            print("note: the model has nodes of one name, which ONNX Runtime refuses: full.onnx and the parts name "
                  "them as the tables do (a repeated name gets __<index>)")
        self.reduction_size = reduction_size(g)
        self.weights = {t.name: t for t in self.model.graph.initializer}
        self.sparse = {t.values.name: t for t in self.model.graph.sparse_initializer}
        self.types = _value_infos(g.model)              # the Graph's: concrete, complete
        self.declared = _declared_types(self.path)       # the model as declared: symbolic where it is

    @property
    def initializers_as_inputs(self) -> bool:
        return self.model.ir_version < 4

    def export(self, b: int, out_dir: Path) -> dict:
        iface = split_interface(self.g, b, self.consts)
        if not iface["cut_tensors"] and not iface["left_graph_outputs"]:
            raise StageError(f"boundary {b}: nothing crosses it (the right part needs nothing the left computes: "
                             f"weights and constants travel with the part that uses them; 07 counts 0 cut tensors)")
        p1_out = iface["cut_tensors"] + iface["left_graph_outputs"]
        p2_out = [t for t in self.g.graph_outputs if t not in set(p1_out)]
        if not p2_out:
            raise StageError(f"boundary {b}: every graph output is finished on the left (the right part computes "
                             f"nothing the model returns)")
        parts = {"part1": self.part(b, "part1", iface["left_graph_inputs"], p1_out),
                 "part2": self.part(b, "part2", iface["cut_tensors"] + iface["right_graph_inputs"], p2_out)}
        out_dir.mkdir(parents=True, exist_ok=True)
        links: dict[str, str] = {}
        for name, m in parts.items():
            for loc, how in link_external_data(m, self.path.parent, out_dir, self.mode, self.shared).items():
                links.setdefault(loc, how)   # the first part to need a file says how it was linked
            check_part(m, f"boundary {b}: {name}.onnx")
            tmp = out_dir / f".{name}.onnx.tmp"
            onnx.save(m, str(tmp))
            os.replace(tmp, out_dir / f"{name}.onnx")
        self._full_beside(out_dir, links, parts)
        iface.update(external_data=links, ir_version=int(self.model.ir_version),
                     initializers_as_inputs=self.initializers_as_inputs, reduction_size=self.reduction_size,
                     random_nodes_seeded=self.seeded)
        return iface

    def part(self, b: int, name: str, inputs: list[str], outputs: list[str]) -> onnx.ModelProto:
        """One part: the nodes that compute `outputs` from `inputs`, with their weights and types."""
        g = self.g
        graph_inputs = set(g.graph_inputs)
        positions, leaves = closure(g, outputs, set(inputs) | graph_inputs)
        inputs = list(inputs) + [t for t in leaves if t in graph_inputs and t not in inputs]   # a pass-through
        weights = [t for t in leaves if t in self.weights or t in self.sparse]
        lost = [t for t in leaves if t not in inputs and t not in weights]
        if lost:
            raise StageError(f"boundary {b}: {name} needs {lost[:3]}, which no node, input or weight provides")
        io = {}
        for t in inputs + outputs:
            vi = self._vi(t)
            if vi is None:
                raise StageError(f"boundary {b}: {name}'s {'input' if t in inputs else 'output'} {t!r} has no known "
                                 f"type in stage 02's graph.onnx (its shape-resolving run failed?): re-run 02, with "
                                 f"the real inputs (--inputs-npz) if the model needs them")
            io[t] = vi
        internal = [o for p in positions for o in self.g.nodes[p].output if o and o not in io and o in self.declared]
        return self._assemble(name, positions, [io[t] for t in inputs], [io[t] for t in outputs], weights,
                              [self.declared[t] for t in internal if _typed(self.declared[t])])

    def _vi(self, t: str) -> onnx.ValueInfoProto | None:
        """The declared type when it agrees with the Graph's (element type, rank), else the Graph's."""
        if t in self.weights:
            w = self.weights[t]
            return helper.make_tensor_value_info(t, w.data_type, list(w.dims))
        vi, decl = self.types.get(t), self.declared.get(t)
        if vi is None or not _typed(vi):
            return _clean(decl) if decl is not None and _typed(decl) else None
        if decl is not None and _typed(decl) and _same_kind(decl, vi):
            return _clean(decl)
        return vi

    def _assemble(self, name, positions, inputs, outputs, weights, value_info) -> onnx.ModelProto:
        src = self.model
        graph = onnx.GraphProto(name=f"{src.graph.name or 'model'}_{name}")
        graph.node.extend(self.nodes[p] for p in positions)
        graph.input.extend(inputs)
        graph.output.extend(outputs)
        graph.initializer.extend(self.weights[t] for t in weights if t in self.weights)
        graph.sparse_initializer.extend(self.sparse[t] for t in weights if t in self.sparse)
        graph.value_info.extend(value_info)
        if self.initializers_as_inputs:    # IR < 4: every initializer is also a graph input
            have = {i.name for i in inputs}
            graph.input.extend(helper.make_tensor_value_info(t, self.weights[t].data_type, list(self.weights[t].dims))
                               for t in weights if t in self.weights and t not in have)
        m = onnx.ModelProto(ir_version=src.ir_version, producer_name="nn-perf 08_export_splits", graph=graph,
                            domain=src.domain, model_version=src.model_version)
        m.opset_import.extend(src.opset_import)
        m.functions.extend(src.functions)
        return m

    def _full_beside(self, out_dir: Path, links: dict, parts: dict[str, onnx.ModelProto]) -> None:
        """The full model beside the parts, so that the folder validates on its own (a link to the model file;
        a copy with the seeds given to its random nodes when it has unseeded ones, or its nodes renamed), and full_exact.onnx, the
        exactness check's reference, when a cut tensor is stored in a narrow float (store_cut_tensors)."""
        full, exact = out_dir / "full.onnx", out_dir / EXACT_REFERENCE
        exact.unlink(missing_ok=True)
        rewritten = self.seeded or self.renamed
        if full.exists() and (rewritten or not full.samefile(self.path)):
            full.unlink()  # the model was re-exported since: a stale full.onnx would validate the wrong model
        if rewritten:
            tmp = out_dir / ".full.onnx.tmp"
            onnx.save(self.model, str(tmp))
            os.replace(tmp, full)
        if not full.exists():
            try:
                os.link(self.path, full)
            except OSError:
                shutil.copy2(self.path, full)
        narrow = self.narrow_cut_tensors(parts)
        if narrow:
            tmp = out_dir / f".{EXACT_REFERENCE}.tmp"
            onnx.save(store_cut_tensors(self.model, narrow), str(tmp))
            os.replace(tmp, exact)
        for loc, how in link_external_data(self.model, self.path.parent, out_dir, self.mode, self.shared).items():
            links.setdefault(loc, how)

    def narrow_cut_tensors(self, parts: dict[str, onnx.ModelProto]) -> dict[str, int]:
        """{tensor: element type} of the tensors a part reads from another part (not model inputs or weights)
        stored as fp16 or bf16."""
        given = {i.name for i in self.model.graph.input} | set(self.weights)
        return {i.name: i.type.tensor_type.elem_type for m in parts.values() for i in m.graph.input
                if i.name not in given and i.type.tensor_type.elem_type in NARROW_FLOATS}


NARROW_FLOATS = (onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16)


def store_cut_tensors(model: onnx.ModelProto, narrow: dict[str, int]) -> onnx.ModelProto:
    """The model with each tensor of `narrow` ({name: element type}) passed through an Identity and returned as a
    graph output too (the model itself when there is none). ONNX Runtime runs most fp16 ops on the CPU in fp32
    between Casts it inserts and drops each fp32 -> fp16 -> fp32 Cast pair it then meets, even with graph
    optimizations off; it also runs in fp32 a node that has an fp16 kernel when all its neighbours need Casts,
    unless it writes a graph output. So the whole model skips the rounding of such a tensor to fp16, while the
    parts exchange it in the type the model declares. An Identity that writes a graph output keeps the rounding
    (fp16 DNSMOS, a Cast then a Log: 2 fp16 ulps of its output's scale away without it; a BERT in .half(), an Add
    then an Add: 3.9e-3; identical with it): the exactness check compares the parts with the model as declared,
    the deployment difference (full.onnx, the default level) shows what skipping the rounding changes."""
    if not narrow:
        return model
    m = onnx.ModelProto()
    m.CopyFrom(model)
    nodes, outputs = [], {o.name for o in m.graph.output}
    for n in m.graph.node:
        nodes.append(n)
        for k, t in enumerate(n.output):
            if t in narrow:
                n.output[k] = f"{t}__before_cut"
                nodes.append(helper.make_node("Identity", [n.output[k]], [t], name=f"{t}__stored_at_cut"))
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    m.graph.output.extend(helper.make_tensor_value_info(t, et, None) for t, et in narrow.items() if t not in outputs)
    return m


# ---------------------------------------------------------------- weights stored outside the model file

def _location(t: onnx.TensorProto) -> str | None:
    if t.data_location != onnx.TensorProto.EXTERNAL:
        return None
    return next((e.value for e in t.external_data if e.key == "location"), None)


def link_external_data(model: onnx.ModelProto, src_dir: Path, dst_dir: Path, mode: str = "link",
                       shared: dict[str, Path] | None = None) -> dict[str, str]:
    """Make each external-data file reachable from dst_dir: a copy, that the other folders of the run hardlink to
    (mode 'link': `shared` holds the first copy of each location; no extra disk past one copy), else a copy of
    their own; last resort rewrite the location to an absolute path (not portable). Returns {location: how}.

    Never a hardlink to the user's own file: onnx >= 1.19's loader refuses external data with several links as a
    "hardlink attack", and after make all onnx.load refused the user's model itself (hunt19). No symlinks: ONNX
    Runtime 1.31 refuses external data behind one ("External data path validation failed"). The split folders'
    files are hardlinked to each other: `--external-data copy` gives folders that onnx.load accepts too."""
    how, shared = {}, {} if shared is None else shared
    for loc in sorted({loc for t in all_tensors(model.graph) if (loc := _location(t))}):
        src, dst = src_dir / loc, dst_dir / loc
        if not src.exists():
            raise StageError(f"external data file {src} (referenced by the model) not found")
        first = shared.get(loc) if mode == "link" else None
        if first is not None and dst.exists() and dst.samefile(first):
            how[loc] = "hardlink"
            continue
        if dst.exists() and not dst.samefile(src) and _same_file_bytes(dst, src) and first is None \
                and (mode == "link" or dst.stat().st_nlink == 1):
            how[loc] = "copy"           # this copy from an earlier run: the same size and time as the model's
            shared[loc] = dst
            continue
        if dst.exists() or dst.is_symlink():
            dst.unlink()  # a re-export, or an older run's hardlink to the user's file: never a stale copy
        dst.parent.mkdir(parents=True, exist_ok=True)
        for method, fn in ((("hardlink", lambda _, d: os.link(first, d)),) if first is not None else ()) + \
                (("copy", shutil.copy2),):
            try:
                fn(src, dst)
                how[loc] = method
                shared.setdefault(loc, dst)
                break
            except OSError:
                continue
        else:
            warnings.warn(f"could not link or copy {src}: the split refers to it by absolute path (not portable)")
            for t in all_tensors(model.graph):
                for e in t.external_data:
                    if e.key == "location" and e.value == loc:
                        e.value = str(src.resolve())
            how[loc] = "absolute"
    return how


def _same_file_bytes(a: Path, b: Path) -> bool:
    """A copy made by shutil.copy2 of b that is still current: the same size and modification time (rsync's test)."""
    sa, sb = a.stat(), b.stat()
    return sa.st_size == sb.st_size and sa.st_mtime_ns == sb.st_mtime_ns


def check_part(m: onnx.ModelProto, what: str) -> None:
    """onnx.checker on a part. An op the checker has no schema for in its domain (onnxruntime-genai writes
    SimplifiedLayerNormalization in the default one) is left to ONNX Runtime, which loads the part to validate
    it: the model itself was accepted that way, and its splits failed here although they composed exactly."""
    try:
        onnx.checker.check_model(for_checker(m))
    except onnx.checker.ValidationError as e:
        first = str(e).strip().splitlines()[0]
        if not first.startswith("No Op registered for"):
            raise StageError(f"{what} fails onnx.checker: {first}") from None


def for_checker(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose externally stored initializers are declared as graph inputs, for onnx.checker: its own
    external-data check refuses hardlinked files, and the weights need no reading to check the graph."""
    ext = [t for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    if not ext:
        return model
    c = onnx.ModelProto()
    c.CopyFrom(model)
    keep = [t for t in c.graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL]
    del c.graph.initializer[:]
    c.graph.initializer.extend(keep)
    have = {i.name for i in c.graph.input}      # IR < 4 lists them as inputs already
    c.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in ext
                         if t.name not in have)
    return c


# ---------------------------------------------------------------- validation with ONNX Runtime

def _ort_error(e: Exception) -> str:
    return " ".join(str(e).split())[:300]


def _full_session(split_dir: Path, feeds: dict, ort, hint: str):
    """The full model's session, run once on the feeds: a failure here is the model's or the inputs', not the
    split's (ModelRunError: the stage stops with exit 2 and says which inputs probably need real values)."""
    try:
        full = session("full.onnx", "cpu", ort, split_dir)
    except RuntimeError as e:
        raise ModelRunError(f"ONNX Runtime cannot load the model: {e}") from None
    try:
        run(full, {i.name: feeds[i.name] for i in full.get_inputs()})
    except Exception as e:  # noqa: BLE001 - ORT raises its own Fail/InvalidArgument types
        raise ModelRunError(f"ONNX Runtime fails running the full model on the validation inputs: {_ort_error(e)}."
                            f"{hint}") from None
    return full


def validate(split_dir: Path, feeds: dict[str, np.ndarray], atol: float, rtol: float, runs: int,
             cut: list[str], exporter: SplitExporter, hint: str = "") -> dict:
    """full(x) against part2(part1(x)) with ONNX Runtime (the check run_split.py does: exactness with graph
    optimizations off decides, the deployment difference at the default level is reported), and part1's cut
    tensors against the same tensors inside the full model, optimizations off too: random-weight models can
    have near-zero logits (torchvision zero-initialises some heads), the cut tensors never are. atol, rtol:
    recorded by the caller, no longer the criterion (a bound from the output's dtype is, runner.py)."""
    import onnxruntime as ort
    _full_session(split_dir, feeds, ort, hint)
    try:
        for n in ("part1", "part2"):
            session(f"{n}.onnx", "cpu", ort, split_dir)
    except RuntimeError as e:
        raise StageError(str(e)) from None
    k = (read_meta(split_dir) or {}).get("reduction_size") or exporter.reduction_size
    try:
        report, mid, _ = check(lambda n, opt: session(n, "cpu", ort, split_dir, optimize=opt), feeds, runs, k)
    except Exception as e:  # noqa: BLE001
        raise StageError(f"ONNX Runtime fails running the parts: {_ort_error(e)}") from None
    ref, eps = _cut_reference(split_dir, exporter, cut, feeds, ort)
    cut_report = {}
    for t, r in zip(cut, ref):
        r = as_array(r)     # a sequence or map as an array
        dt = getattr(r, "dtype", np.dtype(np.int8))
        c = compare(as_array(mid[t]) if t in mid else None, r, rel_bound(dt, eps[t], k))
        cut_report[t] = {**c, "max_abs_value": c.get("scale")}
    report["cut_tensors"] = cut_report
    report["pass"] = report["pass"] and all(c["pass"] for c in cut_report.values())
    report["max_abs_diff"] = max([report["max_abs_diff"]] + [c.get("max_abs_diff") or 0.0 for c in cut_report.values()])
    return report


def _cut_reference(split_dir: Path, exporter: SplitExporter, cut: list[str], feeds, ort) -> list:
    """The cut tensors as the full model computes them (the model already in memory, exposing them as outputs,
    typed as the parts type them: a sequence as a sequence), graph optimizations off and a fresh session run
    once, as the exactness check runs the parts. Returns (the tensors, {tensor: [eps of the type it is stored in]})."""
    if not cut:
        return [], {}
    probe = onnx.ModelProto()
    probe.CopyFrom(exporter.model)
    have = {o.name for o in probe.graph.output}
    probe.graph.output.extend(exporter._vi(t) or helper.make_tensor_value_info(t, 0, None) for t in cut if t not in have)
    tmp = split_dir / ".full_with_cut.onnx"
    onnx.save(probe, str(tmp))
    try:
        sess = session(tmp.name, "cpu", ort, split_dir, optimize=False)
        vals = run(sess, {i.name: feeds[i.name] for i in sess.get_inputs()}, cut)
        return vals, {t: stored_eps(sess, {t: v}) for t, v in zip(cut, vals)}
    except Exception as e:  # noqa: BLE001
        raise StageError(f"ONNX Runtime fails computing the cut tensors in the full model: {_ort_error(e)}") from None
    finally:
        tmp.unlink(missing_ok=True)


# ---------------------------------------------------------------- the split folder

RUNNER = Path(__file__).with_name("runner.py")
SUITE = Path(__file__).with_name("benchmark_suite.py")
META = "split_meta.json"


def write_runner(split_dir: Path, meta: dict, inputs_npz: str | None = None) -> None:
    """run_split.py and split_meta.json; with the input spec's --inputs-npz, a copy of it as inputs.npz so that
    the folder validates on its own with the values 08 used (a copy, not a link: the runner's
    --save-inputs-npz writing there must never rewrite the user's file)."""
    shutil.copy2(RUNNER, split_dir / "run_split.py")
    npz = split_dir / "inputs.npz"
    npz.unlink(missing_ok=True)
    if inputs_npz:
        shutil.copyfile(inputs_npz, npz)
    meta = {**meta, "inputs_npz": npz.name if inputs_npz else None}
    tmp = split_dir / f".{META}.tmp"
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    os.replace(tmp, split_dir / META)


def read_meta(split_dir: Path, name: str = META) -> dict | None:
    try:
        return json.loads((split_dir / name).read_text())
    except (OSError, ValueError):
        return None


def same_identity(a: dict | None, b: dict | None) -> bool:
    """Same model graph and the same input spec (lib/provenance's rule)."""
    if not a or not b or "model" not in a or "model" not in b:
        return False
    return a["model"].get("graph_sha256") == b["model"].get("graph_sha256") and \
        same_inputs(a.get("inputs"), b.get("inputs")) and bool(a.get("inputs")) == bool(b.get("inputs"))


def split_folders(rdir: Path) -> dict[int, Path]:
    base = Path(rdir) / "splits"
    if not base.is_dir():
        return {}
    return {int(d.name[1:]): d for d in base.iterdir() if d.is_dir() and d.name[1:].isdigit() and d.name[0] == "b"}


def sweep_stale(rdir: Path, ident: dict) -> dict:
    """Remove split folders 08 exported for another model or input spec (or by a version that recorded none);
    folders without split_meta.json (stage 10 exports parts there too) are left alone and listed."""
    removed, foreign = [], []
    for b, d in sorted(split_folders(rdir).items()):
        meta = read_meta(d)
        if meta is None:
            foreign.append(d.name)
        elif not same_identity(meta.get("identity"), ident):
            shutil.rmtree(d)
            removed.append(d.name)
    return {"removed": removed, "without_meta": foreign}


def earlier_splits(rdir: Path, ident: dict, previous: dict | None, now: set[int]) -> list[dict]:
    """The reports of the splits still on disk that this run did not export: from the previous report when it
    belongs to the same identity, else from the folder's own validation_report.json."""
    prev = {s["boundary"]: s for s in (previous or {}).get("splits", [])
            if same_identity((previous or {}).get("identity"), ident)}
    out = []
    for b, d in sorted(split_folders(rdir).items()):
        meta = read_meta(d)
        if b in now or meta is None or not same_identity(meta.get("identity"), ident):
            continue
        rep = prev.get(b) if not meta.get("error") else \
            {"boundary": b, "pass": False, "max_abs_diff": None, "error": meta["error"]}
        if rep is not None and rep.get("exported_by_run") not in (None, meta.get("run_id")):
            rep = None         # the folder was exported again since that report: its own report says more
        if rep is None:
            try:
                rep = {"boundary": b, **json.loads((d / "validation_report.json").read_text())}
            except (OSError, ValueError):
                rep = {"boundary": b, "pass": False, "max_abs_diff": None, "error": "no readable validation report"}
        out.append({"after_node": meta.get("after_node"), **rep, "this_run": False, "exported_by_run": meta.get("run_id")})
    return out


def pruned_note(bd, b: int) -> str | None:
    """07's reason when boundary b was pruned (08 exports it anyway when asked by --boundary)."""
    row = bd[bd["boundary"] == b]
    if row.empty or "pruned" not in row or not bool(row["pruned"].iloc[0]):
        return None
    reason = row["reason"].iloc[0] if "reason" in row else ""
    return str(reason) if isinstance(reason, str) and reason else "pruned (no reason recorded)"


def export_one(exporter: SplitExporter, b: int, out: Path, feeds: dict, opts: dict, meta: dict) -> dict:
    """Export boundary b into `out`, write its runner, validate it, draw it: the split's report. A failure of
    this split is recorded (pass False, error) and the folder says so; ModelRunError (the full model cannot
    run on these inputs) stops the stage. opts: atol, rtol, runs, hops, diagram, hint, inputs_npz."""
    g = exporter.g
    try:
        iface = exporter.export(b, out)
        write_runner(out, {**iface, **meta}, opts.get("inputs_npz"))
        rep = {"boundary": b, "after_node": g.names[b],
               **validate(out, feeds, opts["atol"], opts["rtol"], opts["runs"], iface["cut_tensors"], exporter,
                          opts.get("hint", ""))}
    except StageError as e:
        rep = {"boundary": b, "after_node": g.names[b], "pass": False, "max_abs_diff": None, "error": str(e)}
        out.mkdir(parents=True, exist_ok=True)
        write_json({"boundary": b, **meta, "error": str(e)}, out / META)
        write_json(rep, out / "validation_report.json")
        if isinstance(e, ModelRunError):
            raise
        return {**rep, "this_run": True, "exported_by_run": meta.get("run_id")}
    if opts.get("diagram", "none") != "none":
        rep["diagram"] = [f.name for f in render(g, b, iface["cut_tensors"], out, opts.get("hops", 1), opts["diagram"])]
    write_json(rep, out / "validation_report.json")
    return {**rep, "comm_bytes": iface["comm_bytes"], "cut_unknown_size": iface["cut_unknown_size"],
            "external_data": iface["external_data"], "this_run": True, "exported_by_run": meta.get("run_id")}


def summary(reports: list[dict]) -> dict:
    diffs = [r["max_abs_diff"] for r in reports if r.get("max_abs_diff") is not None]
    return {"all_pass": all(r.get("pass") is True for r in reports), "worst_max_abs_diff": max(diffs, default=0.0),
            "failed": [r["boundary"] for r in reports if r.get("pass") is not True]}


def split_line(r: dict) -> str:
    if r.get("error"):
        return f"  b{r['boundary']}: FAIL {r['error']}"
    lat = r["latency_median"]
    dep = r.get("deployment") or {}
    unknown = f" + {r['cut_unknown_size']} of unknown size (strings, sequences)" if r.get("cut_unknown_size") else ""
    return (f"  b{r['boundary']}: {'PASS' if r['pass'] else 'FAIL'} exactness check, max|diff| {r['max_abs_diff']:.2e} "
            f"(optimizations off); deployment max|diff| {dep.get('max_abs_diff', float('nan')):.2e} "
            f"({dep.get('max_rel_to_scale', float('nan')):.1e} of scale); "
            f"{len(r['cut_tensors'])} cut tensors, {r['comm_bytes'] / 1024:.1f} KiB"
            f"{unknown}; "
            f"full {lat['full_us'] / 1e3:.2f} ms, "
            f"part1 {lat['part1_us'] / 1e3:.2f} ms + part2 {lat['part2_us'] / 1e3:.2f} ms "
            f"(run back to back: {lat['composed_us'] / 1e3:.2f} ms)")


def closing_line(reports: list[dict], kept: list[dict], s: dict, atol: float, path: Path, small: str | None = None) -> str:
    """What the stage did and what the report holds; `small`: the advice for a model too small to split
    (lib/split/ranking.py small_model_note), said first."""
    earlier = f"{len(kept)} earlier splits ({', '.join('b%d' % r['boundary'] for r in kept)})"
    first = f"{small}\n" if small else ""
    if not reports:
        why = "" if small else " (07 pruned them all: see candidate_pruning.json, or pass --boundary B)"
        return (f"{first}nothing to split: no boundary is ranked{why}; "
                + (f"{path} keeps {earlier}" if kept else f"wrote an empty report {path}"))
    beyond = s.get("worst_max_abs_diff_all", s["worst_max_abs_diff"])
    return first + (f"{len(reports)} splits exported, {sum(r['pass'] is True for r in reports)} pass the exactness check; worst max "
            f"|diff| {s['worst_max_abs_diff']:.2e} (graph optimizations off)"
            + (f", {beyond:.2e} with the DAG and pipeline partitions" if beyond != s["worst_max_abs_diff"] else "")
            + f"; wrote {path}" + (f", which also keeps {earlier}" if kept else ""))


# ---------------------------------------------------------------- benchmark set

ASSETS = ["split_candidates.tex", "system_config.json", "workload_profile.json", "pareto_export.csv",
          "candidate_pruning.json"]


def benchmark_set(dest: Path, rdir: Path, dirs: list[Path]) -> None:
    """The split folders, a benchmark_suite.py that runs them all, and the paper assets, gathered in dest."""
    dest.mkdir(parents=True, exist_ok=True)
    for d in dirs:
        target = dest / d.name
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(d, target, copy_function=_link_or_copy, symlinks=True)
    shutil.copy2(SUITE, dest / "benchmark_suite.py")
    for name in ASSETS:
        if (rdir / name).exists():
            shutil.copy2(rdir / name, dest / name)
    for f in sorted((rdir / "plots").glob("split_*")):
        if f.suffix in (".pdf", ".svg"):
            shutil.copy2(f, dest / f"analysis_{f.name[len('split_'):]}")


def _link_or_copy(src, dst):
    try:
        Path(dst).hardlink_to(src)
    except OSError:
        shutil.copy2(src, dst)


def progress(i: int, n: int, text: str) -> None:
    print(f"[{i}/{n}] {text}", file=sys.stderr, flush=True)
