"""The front door of every stage that reads a model: read (no weights' bytes), validate, fix the input shapes,
infer every shape, index. Stage 02 does it once and saves the inferred graph (graph.onnx, weights stripped);
the later stages (04, 05, 07, 08, 10) load that instead of inferring again, after checking that it belongs to
the model and input spec they were given."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import onnx

from lib.artifacts import atomic_path, load_yaml
from lib.errors import StageError
from lib.onnx.graph import CONTROL_FLOW, Graph, GraphArrays, NodeTable, build_graph, constant_tensors, graph_arrays
from lib.onnx.inputs import (InputSpec, dim_conflicts, fix_input_shapes, make_feeds, parse_shape_overrides,
                             resolve_input_shapes)
from lib.onnx.reader import LightModel, read_light
from lib.provenance import Results, identity
from lib.onnx.shapes import Inferred, infer, load_full
from lib.onnx.validate import validate

GRAPH_FILE = "graph.onnx"
ARRAYS_FILE = "graph.npz"


@dataclass
class Analysis:
    graph: Graph
    shapes: dict[str, list[int]]
    light: LightModel
    spec: InputSpec
    inferred: Inferred | None = None
    consts: set[str] | None = None      # constant_tensors(graph): see constants()
    dim_conflicts: tuple[str, ...] = ()     # inputs.dim_conflicts, read before the shapes were fixed into the model

    def constants(self) -> set[str]:
        """The graph's constant tensors (lib/onnx/graph.py constant_tensors), computed once (by prepare(), from
        the structure, when the graph has no control flow)."""
        if self.consts is None:
            self.consts = constant_tensors(self.graph)
        return self.consts

    @property
    def identity(self) -> dict:
        return identity(self.light, self.spec.describe(self.shapes))

    def feeds(self):
        return make_feeds(self.light.model, self.shapes, self.spec)


def read_validated(path) -> LightModel:
    """The light model, validated."""
    light = read_light(path)
    validate(light.model, NodeTable.of(light.model.graph))
    return light


def prepare(path, spec: InputSpec) -> Analysis:
    """Load, validate, fix input shapes (overrides > preset > workload > the file's own), infer, index."""
    light = read_light(path)
    nodes = NodeTable.of(light.model.graph)
    validate(light.model, nodes)
    shapes = resolve_input_shapes(light.model, spec)
    clash = tuple(dim_conflicts(light.model, shapes, spec))
    for c in clash:
        print(f"warning: {c}: the given input shapes may not run", file=sys.stderr)
    fix_input_shapes(light.model, shapes)
    skeleton = _skeleton(light.model, nodes)
    consts = constant_tensors(skeleton) if skeleton is not None else None
    inf = infer(light.model, lambda: load_full(light.path), lambda: make_feeds(light.model, shapes, spec), table=nodes)
    return Analysis(_indexed(inf, skeleton), shapes, light, spec, inf, consts, clash)


def spec_from(overrides: list[str] | None = None, workload=None, preset: str | None = None) -> InputSpec:
    """The input spec the stages build from --shape-override, --workload and --preset (for callers without
    argparse: the micro-benchmarks, the latency model, sweeps)."""
    wl = load_yaml(workload, "workload config") if workload else {}
    return InputSpec(parse_shape_overrides(overrides or []), preset, wl, str(workload) if workload else None)


def graph_of_path(path, overrides: list[str] | None = None, workload=None, preset: str | None = None) -> Graph:
    """The pipeline's Graph of a model file under an input spec (what stages 01 and 02 build)."""
    return prepare(path, spec_from(overrides, workload, preset)).graph


def _skeleton(model: onnx.ModelProto, nodes: NodeTable) -> Graph | None:
    """The graph's structure (order, producers, consumers, node views, small constants), which inference does
    not change (it adds value_info only), built from the light model; _indexed() attaches the inferred tensors
    (its `model` stays the light one: save_graph writes the inferred model). None with control flow: the
    costs need the bodies' inferred value_info."""
    if any(op in CONTROL_FLOW for op in nodes.ops):
        return None
    return build_graph(model, tensors={}, table=nodes)


def _indexed(inf: Inferred, skeleton: Graph | None = None) -> Graph:
    """The Graph of the inferred model: the skeleton given, with the inferred tensors, or built here from the
    inferred model (with control flow: the bodies' inferred value_info)."""
    if skeleton is not None:
        g = skeleton
        g.tensors = inf.tensors
    else:
        g = build_graph(inf.model, tensors=inf.tensors)
    g.shape_source = inf.source
    g.values.update(inf.values)
    return g


def graph_of(model: onnx.ModelProto, spec: InputSpec | None = None) -> Graph:
    """The analysed Graph of an in-memory model (weights included): tests, micro-benchmarks."""
    validate(model)
    light = onnx.ModelProto()
    light.CopyFrom(model)
    spec = spec or InputSpec()
    shapes = resolve_input_shapes(light, spec)
    fix_input_shapes(light, shapes)
    return _indexed(infer(light, lambda: light, lambda: make_feeds(light, shapes, spec)))


def save_graph(an: Analysis, rdir: Path, run_id: str, consts: set[str]) -> None:
    """The inferred graph (weights stripped, tagged with the run of stage 02 that made it) for 08 and 10, and
    its structure as arrays for 04, 05 and 07: both put in place, or neither."""
    with atomic_path(Path(rdir) / GRAPH_FILE) as graph_tmp, atomic_path(Path(rdir) / ARRAYS_FILE) as arrays_tmp:
        graph_tmp.write_bytes(an.inferred.tagged_bytes("nn-perf:run_id", run_id))
        with open(arrays_tmp, "wb") as f:
            graph_arrays(an.graph, consts, run_id).save(f)


def checked(rdir: Path, model_path, spec: InputSpec | None = None) -> tuple[Results, InputSpec]:
    """Stage 02's results, checked to belong to `model_path` and to `spec` (when the user gave one: else 02's
    spec is inherited)."""
    res = Results(rdir)
    recorded = res.meta("metrics_meta.json")["identity"]["inputs"]
    if spec is not None and spec.explicit():
        light = read_light(model_path)
        res.require("metrics_meta.json", light=light, inputs=spec.describe(resolve_input_shapes(light.model, spec)))
        return res, spec
    res.require("metrics_meta.json", light=model_path)
    return res, (spec or InputSpec()).inherit(recorded)


def analysed_arrays(rdir: Path, model_path, spec: InputSpec | None = None) -> tuple[GraphArrays, Results, InputSpec]:
    """Stage 02's graph structure as arrays (graph.npz), checked to belong to the model and spec."""
    res, spec = checked(rdir, model_path, spec)
    path = Path(rdir) / ARRAYS_FILE
    try:
        arrays = GraphArrays.load(path)
    except Exception:  # noqa: BLE001
        raise StageError(f"{path} is missing or unreadable: re-run 02_shapes_flops_bytes.py") from None
    if arrays.run_id != res.meta("metrics_meta.json")["run_id"]:
        raise StageError(f"{path} is not from the last run of 02_shapes_flops_bytes.py: re-run it")
    return arrays, res, spec


def analysed(rdir: Path, model_path, spec: InputSpec | None = None) -> tuple[Analysis, Results]:
    """Stage 02's inferred graph of `model_path` (graph.onnx), checked to belong to it (and to `spec`)."""
    res, spec = checked(rdir, model_path, spec)
    meta = res.meta("metrics_meta.json")
    recorded = meta["identity"]["inputs"]
    light = read_validated(model_path)
    path = Path(rdir) / GRAPH_FILE
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001
        raise StageError(f"{path} is missing or unreadable: re-run 02_shapes_flops_bytes.py") from None
    tag = {p.key: p.value for p in model.metadata_props}.get("nn-perf:run_id")
    if tag != meta["run_id"]:
        raise StageError(f"{path} is not from the last run of 02_shapes_flops_bytes.py: re-run it")
    return Analysis(build_graph(model), recorded["input_shapes"], light, spec), res
