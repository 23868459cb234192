"""ONNX Runtime profiling, and attribution of every executed kernel's time back to the original ONNX nodes.

ORT rewrites the graph before running it (at its default level: constant folding, Conv+BN/activation/Add
fusion, NCHWc layout with Reorder nodes...). Kernel events name *optimized* nodes, so we also save ORT's
optimized graph and map each optimized node onto original nodes:
0. the views ORT inserts around a MAC kernel (a 3-D MatMul+Add runs as Reshape -> Gemm -> Reshape) belong to
   that kernel: the original tensor the output Reshape writes is the Gemm's (it ran the MatMul and the Add), and
   both Reshapes take the Gemm's anchor (listed in `inserted`). lib/latency/kernels.py's table uses the same
   mapping, so 01's node times and the kernel model's kernels agree;
1. its original output tensor: an output whose name exists in the original graph, else the longest
   prefix of its node name that is an original tensor or node name (ORT names fused nodes
   "<original>_<suffix>", e.g. "relu_nchwc");
2. the original nodes it *covers*: walking back from that tensor through the original graph until a tensor
   that some kernel materializes (or a weight/graph input), never into a node ORT's common-subexpression
   elimination removed (an identical node computes its value; lib/latency/cse.py). Its anchor is the covered
   node doing the most work (MACs, then FLOPs; on a tie the node whose tensor it writes); the others are
   recorded as fused into it and get 0 us of their own;
3. kernels with no original tensor (layout Reorder*, inserted casts/copies) take the anchor of a neighbour
   they feed or are fed by; the nodes of a function ORT inlined (HardSwish, an fp16 Softmax: unnamed, their
   tensors named _inlfunc_*) that of the one they feed, down to the node whose output the last one writes.
   Unnamed nodes are named <op>_<position> in the saved graph and in the trace (name_unnamed_kernels);
4. kernels ORT inserted or rewrote beyond that (transpose-optimizer `Reshape_token_*` nodes, a FusedConv of
   nodes it renamed first, a kernel the saved optimized graph does not hold) go to the original node whose
   tensor they serve, by the optimized graph's tensor names: a computing kernel to the first original node of
   its own op that no kernel ran, between the original tensors upstream and downstream of it (before step 3);
   what is left after step 3 to the producer of the original tensor it writes, else of the nearest original
   tensor upstream, else to the consumer of the nearest one downstream; with no graph to walk (a kernel the
   saved graph lacks), the kernel that runs next (an inserted kernel prepares its consumer's input), else the
   one before. Every kernel mapped in 3 or 4 is listed in ops_latency.csv's `inserted`
   column of the node it is attributed to.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from contextlib import contextmanager
from collections import defaultdict
from pathlib import Path

import numpy as np
import onnx
import pandas as pd

from lib.artifacts import atomic_path
from lib.errors import StageError
from lib.latency.cse import merged_away
from lib.onnx.costs import node_cost
from lib.onnx.graph import CONTROL_FLOW, Graph, constant_tensors, unique_names
from lib.onnx.ops import REGISTRY, is_mac_op, names_with, op_key
from lib.onnx.reader import attribute_subgraphs, read_light, strip_external_references

PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider",
             "tensorrt": "TensorrtExecutionProvider", "dml": "DmlExecutionProvider",
             "openvino": "OpenVINOExecutionProvider", "coreml": "CoreMLExecutionProvider"}
OPT_LEVELS = {"disable": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC", "extended": "ORT_ENABLE_EXTENDED",
              "layout": "ORT_ENABLE_LAYOUT", "all": "ORT_ENABLE_ALL"}


def _session(model_path: str, provider: str, threads: int, opt_level: str, profile_prefix: str,
             optimized_path: str):
    import onnxruntime as ort
    ort.set_default_logger_severity(4)   # ORT's own log lines would break the one-line error contract
    if provider not in PROVIDERS:
        raise StageError(f"unknown --provider {provider}: choose from {', '.join(PROVIDERS)}")
    ep = PROVIDERS[provider]
    if ep not in ort.get_available_providers():
        raise StageError(f"provider {provider} ({ep}) is not available in this onnxruntime build "
                         f"(available: {', '.join(ort.get_available_providers())})")
    so = ort.SessionOptions()
    so.enable_profiling = True
    so.profile_file_prefix = profile_prefix
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, OPT_LEVELS[opt_level])
    so.optimized_model_filepath = optimized_path
    so.log_severity_level = 4   # fatal only: a failed load must print our one line, not ORT's log
    if threads:
        so.intra_op_num_threads = threads
    try:
        return ort.InferenceSession(model_path, so, providers=[ep])
    except Exception as e:  # noqa: BLE001 - ORT raises its own Fail/InvalidGraph/NotImplemented types
        msg = " ".join(str(e).split())
        raise StageError(f"ONNX Runtime cannot load the model: {msg[:400]}") from None


@contextmanager
def calling_thread_pinned():
    """The block with the calling thread on the first CPU it may use (Linux), then as before: for micro-benchmarks.

    With its default thread count ORT pins its intra-op workers to the other cores and leaves the calling thread,
    which runs its share of every parallel loop, to the OS. ORT's profiler (thread_scheduling_stats) showed a
    micro-benchmark session with the calling thread on the worker's core run its lone QLinearConv 64->64 56x56 at
    305 us in every run, the sessions with it on core 0 at 163 us (resnet18_qdq's same conv: 167-197 us in six
    sessions); two such sessions of three made the case's record, and resnet18_qdq was predicted +75% held out.
    A whole model is timed as the OS places it: pinning did not make models measure steadier
    (bench/thread_pinning.py)."""
    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    try:
        if before:
            os.sched_setaffinity(0, {min(before)})
    except OSError:
        before = None
    try:
        yield
    finally:
        if before:
            os.sched_setaffinity(0, before)


def profile_model(model_path: str, feeds: dict[str, np.ndarray], *, provider="cpu", runs=10, warmup=3,
                  threads=0, opt_level="all", progress=True, keep_dir: Path | None = None) -> dict:
    """Run the model `warmup + runs` times with ORT's profiler (raw kernel events per measured run), then `runs`
    times with the profiler off in the same session: those give the session latency (`wall_us`). The profiler
    records every kernel's event: mobilenet_v3_small's runs took 1.86 ms with it, 1.08 ms without; bert_small
    5.57 and 4.44 ms; resnet18 5% more; a 40 us tree model 9.6x. `profiled_wall_us`: the runs with it.
    keep_dir: where ORT's own trace (Chrome trace JSON) and optimized model are kept for the user."""
    with tempfile.TemporaryDirectory(prefix="ortprof_") as tmp:
        opt_path = os.path.join(tmp, "optimized.onnx")
        sess = _session(model_path, provider, threads, opt_level, os.path.join(tmp, "prof"), opt_path)
        profiled, wall, prof_file = [], [], None
        total = warmup + 2 * runs
        try:
            for r in range(total):
                if r == warmup + runs:
                    prof_file = sess.end_profiling()        # the session runs on, unprofiled
                t0 = time.perf_counter()
                sess.run(None, feeds)
                dt = (time.perf_counter() - t0) * 1e6
                if r >= warmup:
                    (profiled if r < warmup + runs else wall).append(dt)
                if progress:
                    print(f"\r  run {r + 1}/{total}{' (warm-up)' if r < warmup else ''}",
                          end="", file=sys.stderr, flush=True)
        except Exception as e:  # noqa: BLE001
            raise StageError(f"ONNX Runtime failed while running the model: {' '.join(str(e).split())[:400]}") from None
        finally:
            if progress:
                print(file=sys.stderr)
            if prof_file is None:
                prof_file = sess.end_profiling()
        optimized = onnx.load(opt_path, load_external_data=False) if os.path.exists(opt_path) else None
        events = name_unnamed_kernels(json.loads(Path(prof_file).read_text()), optimized)
        if keep_dir is not None:
            _keep(Path(prof_file), Path(opt_path), Path(keep_dir))
    per_run, inside = kernel_times(events, warmup)
    return {"per_run": per_run, "wall_us": wall, "profiled_wall_us": profiled, "optimized": optimized,
            "inside": inside,
            "kernel_ops": {e["name"][: -len("_kernel_time")]: e.get("args", {}).get("op_name", "")
                           for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")}}


# Stage 01's sessions: 5, because two passes of a model minutes apart, each divided by the host factor of its
# sessions, agreed within 10% for 57-75% of pairs with 3 sessions and 73-86% with 5; 7 and 9 added nothing
# (bench/session_count.py, two runs on a 2-core VM).
SESSIONS = 5


def add_profile_arguments(p) -> None:
    """Stage 01's options for how the model is run and measured."""
    p.add_argument("--provider", default="cpu", choices=sorted(PROVIDERS), help="execution provider (default: cpu)")
    p.add_argument("--runs", type=int, default=10, help="measured runs per session (default: %(default)s)")
    p.add_argument("--sessions", type=int, default=SESSIONS,
                   help="ORT sessions, one after the other, the host reference after each (default: %(default)s): on a "
                        "shared machine one session can run its kernels 1.5-3x slower in all its runs; the figures are "
                        "the medians over the sessions")
    p.add_argument("--warmup", type=int, default=3, help="unmeasured warm-up runs (default: %(default)s)")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads; 0 = ORT default, all cores")
    p.add_argument("--opt-level", default="all", choices=list(OPT_LEVELS),
                   help="ORT graph optimization level (default: all, ORT's own default)")


def profile_sessions(model_path: str, light, feeds: dict[str, np.ndarray], sessions: int, keep_dir: Path,
                     between=None, **kw) -> list[dict]:
    """profile_model in `sessions` sessions one after the other (ORT's trace and optimized graph kept from the
    first); between(): called after each session (stage 01's host reference). light: the model's read_light().
    A model with unnamed nodes is run as a copy with every node named as the tables name it (named_copy): ORT's
    trace names an unnamed node <op>_<its index in ORT's graph>, which its saved graph does not keep. A node the
    user named MatMul_0 beside an unnamed MatMul traced as one kernel; with two Identities removed before them,
    an unnamed 512^3 MatMul's 3.6 ms went to an 8x8 one."""
    out = []
    with tempfile.TemporaryDirectory(prefix="named_") as tmp:
        if any(not n.name for n in light.model.graph.node):
            model_path = named_copy(model_path, tmp, external=light.external_refs)
        for s in range(sessions):
            out.append(profile_model(model_path, feeds, keep_dir=keep_dir if s == 0 else None, **kw))
            if between is not None:
                between()
    return out


def named_copy(model_path: str, folder: str, external: bool) -> str:
    """A copy of the model in folder with every top-level node named as unique_names() names it (the tables' names,
    so ORT names no kernel itself); its weights, external ones too, saved beside it."""
    model = onnx.load(model_path)
    nodes = model.graph.node
    for n, name in zip(nodes, unique_names([n.name for n in nodes], [n.op_type for n in nodes])):
        n.name = name
    out = os.path.join(folder, "named.onnx")
    onnx.save_model(model, out, save_as_external_data=external, all_tensors_to_one_file=True, location="named.data")
    return out


KERNEL_EVENT = "_kernel_time"
INLINED = "_inlfunc_"       # ORT's prefix for the tensors inside a function it inlined


def name_nodes(optimized: onnx.ModelProto | None) -> onnx.ModelProto | None:
    """The optimized graph with each unnamed node named <op>_<position in the file>, in place (idempotent): the
    nodes of a function ORT inlines (HardSwish as HardSigmoid and Mul, an fp16 Softmax as ReduceMax, Sub, Exp,
    ReduceSum, Div) have no name, and every mapping looks optimized nodes up by name."""
    if optimized is not None:
        for i, n in enumerate(optimized.graph.node):
            if not n.name:
                n.name = f"{n.op_type}_{i}"
    return optimized


def name_unnamed_kernels(events: list[dict], optimized: onnx.ModelProto | None) -> list[dict]:
    """The events with each unnamed node's kernel renamed as name_nodes() names it.

    ORT's profiler names a node without a name <op>_<its index in ORT's graph>, which the saved graph does not
    keep: traced as Exp_262, listed as Exp_41, bert_small_fp16's inlined Softmax kernels were taken for kernels the
    graph lacks and attributed to its last node. Per op, the trace's unknown <op>_<index> kernels are matched, in
    index order, to the graph's unnamed nodes of that op, in graph order, when both count the same."""
    if optimized is None:
        return events
    unnamed = defaultdict(list)
    for i, n in enumerate(optimized.graph.node):
        if not n.name or n.name == f"{n.op_type}_{i}":      # or named so by an earlier call
            unnamed[n.op_type].append(f"{n.op_type}_{i}")
    name_nodes(optimized)
    traced = {e["name"][: -len(KERNEL_EVENT)] for e in events
              if e.get("cat") == "Node" and e.get("name", "").endswith(KERNEL_EVENT)}
    listed = {n.name for n in optimized.graph.node}
    rename = {}
    for op, names in unnamed.items():
        names = [k for k in names if k not in traced]
        unknown = sorted((k for k in traced - listed if k.startswith(f"{op}_") and k[len(op) + 1:].isdigit()),
                         key=lambda k: int(k[len(op) + 1:]))
        if names and len(names) == len(unknown):
            rename.update(zip(unknown, names))
    if not rename:
        return events
    out = []
    for e in events:
        k = e.get("name", "")[: -len(KERNEL_EVENT)]
        out.append({**e, "name": rename[k] + KERNEL_EVENT} if e.get("cat") == "Node" and k in rename else e)
    return out


def kernel_times(events: list[dict], warmup: int) -> tuple[list[dict[str, float]], dict]:
    """Kernel time per measured run (us per kernel name) from ORT's profiler events.

    A kernel that runs inside an If/Loop/Scan body appears under the body node's name, during the enclosing
    control-flow kernel (same thread), whose own duration already includes it: it is not counted again, and
    {"of": {body kernel: enclosing top-level kernel}, "us": [per run: {enclosing kernel: time of its body
    kernels}]} says which top-level kernel ran it (a nested If inside a body counts for the outermost)."""
    runs_ev = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                     key=lambda e: e["ts"])
    windows = [(e["ts"], e["ts"] + e["dur"]) for e in runs_ev][warmup:]
    kernels = sorted((e for e in events if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time")),
                     key=lambda e: (e["ts"], -e["dur"]))
    per_run: list[dict[str, float]] = [defaultdict(float) for _ in windows]
    inside_us: list[dict[str, float]] = [defaultdict(float) for _ in windows]
    of: dict[str, str] = {}
    starts = np.array([w[0] for w in windows])
    open_cf: dict = {}                      # thread -> (end, name) of the outermost control-flow kernel running
    for e in kernels:
        k = int(np.searchsorted(starts, e["ts"], side="right")) - 1
        if not (0 <= k < len(windows) and e["ts"] <= windows[k][1]):
            continue
        name, tid = e["name"][: -len("_kernel_time")], e.get("tid")
        cur = open_cf.get(tid)
        if cur is not None and e["ts"] < cur[0]:
            of[name] = cur[1]
            inside_us[k][cur[1]] += float(e["dur"])
            continue
        per_run[k][name] += float(e["dur"])
        if e.get("args", {}).get("op_name") in CONTROL_FLOW:
            open_cf[tid] = (e["ts"] + e["dur"], name)
    return [dict(d) for d in per_run], {"of": of, "us": [dict(d) for d in inside_us]}


def _keep(trace: Path, optimized: Path, dest: Path) -> None:
    """ORT's trace, and its optimized graph with the weights' bytes stripped (lib/onnx/reader.py): the graph is what
    checking the kernel-to-node mapping needs, and a copy of every weight would double the results' size."""
    with atomic_path(dest / "ort_trace.json") as tmp:
        shutil.copyfile(trace, tmp)
    if optimized.exists():
        with atomic_path(dest / "ort_optimized.onnx") as tmp:
            graph = read_light(optimized, check_data=False).model
            strip_external_references(graph)
            tmp.write_bytes(graph.SerializeToString())


LAYOUT_KERNELS = {"ReorderInput", "ReorderOutput", "MemcpyFromHost", "MemcpyToHost"}
MOVES = names_with("rearranges")     # data movement, no arithmetic (the registry's flag)
VIEW_KERNELS = names_with("view")
MAC_OPS = frozenset(k.rpartition(":")[2] for k, op in REGISTRY.items() if op.weight_input is not None)


def base_op(kernel_op: str) -> str:
    """The op a kernel runs: ORT's Fused*/Nhwc* forms as their op (Nchwc*: the kernel table's name of a kernel
    ORT runs in its blocked layout)."""
    return kernel_op.removeprefix("Nchwc").removeprefix("Nhwc").removeprefix("Fused")


def is_mac_kernel(op: str) -> bool:
    """A kernel op that does MACs: a registered MAC op, or one of its forms (base_op)."""
    return base_op(op) in MAC_OPS


# ORT's InsertCastTransformer runs an fp16 node without an fp16 kernel in fp32 between Casts; when it folds a
# Cast pair away the fp32 node's output keeps the original tensor's name behind this prefix
INSERTED_CAST = "InsertedPrecisionFreeCast_"


def _original_tensor(name: str, outputs: list[str], g: Graph, node_index: dict[str, int]) -> tuple[str | None, bool]:
    """(original tensor a kernel produces, whether it was found exactly by output name)."""
    name = name.removeprefix(INSERTED_CAST)
    outputs = [o.removeprefix(INSERTED_CAST) for o in outputs]
    for o in outputs:
        if o in g.producer:
            return o, True
    # ORT names a fusion's node "<original node>/<FusionName>/" (node_silu_1/QuickGeluFusion/)
    head = name.split("/")[0]
    if head != name and head in node_index and g.nodes[node_index[head]].output:
        return g.nodes[node_index[head]].output[0], False
    parts = name.split("_")
    for k in range(len(parts) - 1, 0, -1):
        cand = "_".join(parts[:k])
        if cand in g.producer:
            return cand, False
        if cand in node_index and g.nodes[node_index[cand]].output:
            return g.nodes[node_index[cand]].output[0], False
    return None, False


QDQ = names_with("quantizes")


def _work(node, g: Graph) -> tuple[float, float]:
    """A node's claim to anchor its kernel: its (MACs, FLOPs); none for a QuantizeLinear / DequantizeLinear
    around the op ORT runs as an integer kernel (a QLinearAdd's, a MaxPool's time was booked to a QuantizeLinear:
    its per-element FLOPs outnumber a pool's)."""
    c = None if node.op_type in QDQ else node_cost(node, g)
    return (0.0, 0.0) if c is None else (c[1], c[0])


def _same_op(kernel_op: str, node_op: str) -> bool:
    """The kernel ORT runs for a node of node_op under its name: the op itself, or its integer form (QLinearAdd,
    QLinearGlobalAveragePool, QGemm for a QDQ Add, GlobalAveragePool, Gemm)."""
    return kernel_op == node_op or (kernel_op.startswith("Q") and kernel_op.endswith(node_op)
                                    and node_op not in QDQ)


MATMUL_ADD_KERNEL = "Gemm"      # the kernel a 3-D MatMul+Add runs as, between two inserted Reshapes


class _Attribution:
    """The state of one mapping of kernels onto original node positions (see attribute())."""

    def __init__(self, g: Graph, optimized: onnx.ModelProto | None, kernel_names: list[str]):
        self.g, self.kernels = g, kernel_names
        self.node_index = {n: i for i, n in enumerate(g.names)}
        self.opt_nodes = {n.name: n for n in optimized.graph.node} if optimized is not None else {}
        self.opt_order = {n.name: i for i, n in enumerate(optimized.graph.node)} if optimized is not None else {}
        self.tensor_of: dict[str, str | None] = {}
        self.exact: dict[str, bool] = {}
        for k in kernel_names:
            n = self.opt_nodes.get(k)
            if k in self.node_index and (n is None or _same_op(n.op_type, g.nodes[self.node_index[k]].op_type)):
                self.tensor_of[k] = next((o for o in g.nodes[self.node_index[k]].output if o), None)
                self.exact[k] = True
            else:
                self.tensor_of[k], self.exact[k] = _original_tensor(k, list(n.output) if n is not None else [], g,
                                                                    self.node_index)
        self.owner: dict[int, str] = {}          # original node position -> kernel that ran it
        self.anchor: dict[str, int | None] = {k: None for k in kernel_names}
        self.fused_into: dict[int, int] = {}
        self.inserted: set[str] = set()          # kernels ORT inserted or rewrote (steps 3 and 4)
        self.merged: set[int] = set()            # nodes ORT's CSE removed (step 1; lib/latency/cse.py)
        self.view_of = self._mac_views(optimized) if optimized is not None else {}

    # only ORT's MatMulAddFusion wraps its kernel in Reshapes of its own; a Reshape next to another MAC kernel
    # (a FusedConv) is a rewrite of an original node (a Transpose the transpose optimizer turned into Reshape_token_*)
    # and goes to that node (steps 3 and 4)
    def _mac_views(self, optimized: onnx.ModelProto) -> dict[str, str]:
        """Step 0: ORT runs a 3-D MatMul(+Add) as Reshape -> Gemm -> Reshape. The Reshapes it inserted are views
        of the MAC kernel between them: the output one's original tensor is the MAC kernel's (it ran the MatMul
        and the Add), and both are second kernels on its group. {view kernel: MAC kernel}."""
        prod = {o: n for n in optimized.graph.node for o in n.output}
        cons = defaultdict(list)
        for n in optimized.graph.node:
            for i in n.input:
                cons[i].append(n)
        views, kernels = {}, set(self.kernels)
        for k in self.kernels:
            n = self.opt_nodes.get(k)
            if n is None or n.op_type not in VIEW_KERNELS or k in self.node_index or not n.input or not n.output:
                continue
            p = prod.get(n.input[0])
            mac = [c for c in cons.get(n.output[0], ()) if c.op_type == MATMUL_ADD_KERNEL and c.name in kernels]
            if p is not None and p.op_type == MATMUL_ADD_KERNEL and p.name in kernels:
                views[k] = p.name
                if self.tensor_of.get(k):      # the original tensor the view writes is the MAC kernel's
                    self.tensor_of[p.name], self.exact[p.name] = self.tensor_of[k], True
            elif len(mac) == 1:
                views[k] = mac[0].name
            self.tensor_of[k] = None if k in views else self.tensor_of[k]
        return views

    def views(self) -> None:
        """Step 0, after step 2: each view kernel of step 0 takes its MAC kernel's anchor."""
        for k, m in self.view_of.items():
            if self.anchor.get(k) is None and self.anchor.get(m) is not None:
                self.anchor[k] = self.anchor[m]
                self.inserted.add(k)

    def cover(self, k: str, group: list[int]) -> None:
        # the most work; on a tie the node whose output the kernel writes (group[0]): a Reshape, not its shape
        best = max(group, key=lambda p: (_work(self.g.nodes[p], self.g), p == group[0], -p))
        self.anchor[k] = best
        for pos in group:
            self.owner[pos] = k
            if pos != best:
                self.fused_into[pos] = best

    def computing(self) -> None:
        """Kernels with an original tensor: exactly named ones first (their walk back is precise), then
        name-derived ones; each covers the nodes back to a tensor another kernel materializes."""
        g, opt = self.g, self.opt_nodes
        materialized = {t for t in self.tensor_of.values() if t}
        # an exactly named kernel writes every output of its node (a Split's k and v, EmbedLayerNormalization's
        # mask index): a kernel reading one of them stops there, not at the node (which it took when its name
        # sorted first)
        materialized.update(o for k in self.kernels if self.exact.get(k) and k in self.node_index
                            and g.producer.get(self.tensor_of.get(k) or "") == self.node_index[k]
                            for o in g.nodes[self.node_index[k]].output if o)
        # a tensor computed from constants alone was folded into a weight when the session loaded: the walk stops
        # there (a merged LoRA weight's A @ B took its consumer's 326 us, the consumer shown as fused into it); a
        # Constant node stays in the group of the kernel that reads it (its bytes are that kernel's)
        stop = set(g.initializers) | set(g.graph_inputs) | {
            t for t in constant_tensors(g) if t in g.producer and g.op_types[g.producer[t]] != "Constant"}
        todo = [k for k in self.kernels if self.tensor_of[k] and (k not in opt or opt[k].op_type not in LAYOUT_KERNELS)]
        self.merged = merged_away(g, {g.producer[self.tensor_of[k]] for k in todo})
        for k in sorted(todo, key=lambda k: not self.exact[k]):
            start = g.producer[self.tensor_of[k]]
            if start in self.owner:            # a second kernel for the same tensor: share its anchor
                self.anchor[k] = self.anchor[self.owner[start]]
                continue
            if k in opt and opt[k].op_type in MOVES and opt[k].op_type != g.nodes[start].op_type:
                self.cover(k, [start])     # a rewrite (a Transpose run as Reshape_token_*): that node alone
                self.inserted.add(k)
                continue
            group, stack = [], [start]
            while stack:
                pos = stack.pop()
                if pos in self.owner or pos in group or pos in self.merged:
                    continue
                group.append(pos)
                # a name-derived kernel is one heavy op plus its epilogue: never walk back past the heavy op
                if not self.exact[k] and is_mac_op(g.nodes[pos]):
                    continue
                for inp in g.nodes[pos].input:
                    if inp and inp not in stop and inp not in materialized and inp in g.producer:
                        stack.append(g.producer[inp])
            self.cover(k, group)

    def epilogues(self) -> None:
        """Relu/Add/BN fused after a kernel whose name gave only its first tensor: forward fill; the kernel that
        ran last among the producers is the one that consumed the others (Conv+Sum)."""
        g = self.g
        for pos in range(len(g.nodes)):
            if pos in self.owner or pos in self.merged:
                continue
            preds = [p for p in g.preds(pos) if p in self.owner]
            if preds:
                k = max((self.owner[p] for p in preds),
                        key=lambda kk: (self.opt_order.get(kk, -1), g.producer[self.tensor_of[kk]]))
                self.owner[pos] = k
                self.fused_into[pos] = self.anchor[k]

    def neighbours(self, optimized: onnx.ModelProto) -> None:
        """Kernels with no original tensor of their own (layout Reorder*, copies): a neighbour's anchor,
        producers first (a ReorderOutput converts what its producer computed), then consumers; only consumers for
        a node of a function ORT inlined (an fp16 Softmax's ReduceMax, Sub, Exp, ReduceSum: the node whose output
        its last one writes)."""
        prod = {o: n.name for n in optimized.graph.node for o in n.output}
        cons = defaultdict(list)
        for n in optimized.graph.node:
            for i in n.input:
                cons[i].append(n.name)
        for _ in range(len(self.kernels)):
            changed = False
            for k in self.kernels:
                if self.anchor.get(k) is not None or k not in self.opt_nodes:
                    continue
                n = self.opt_nodes[k]
                near = [c for o in n.output for c in cons.get(o, ())]
                if not any(INLINED in o for o in n.output):
                    near = [prod[i] for i in n.input if i in prod] + near
                got = next((self.anchor[m] for m in near if self.anchor.get(m) is not None), None)
                if got is not None:
                    self.anchor[k], changed = got, True
                    self.inserted.add(k)
            if not changed:
                break

    def bodies(self) -> None:
        """Kernels still unmapped whose name is a node of an If/Loop/Scan body (ORT ran it outside the
        control-flow kernel, e.g. a branch it inlined): the enclosing top-level node."""
        owners = body_nodes(self.g)
        for k in self.kernels:
            if self.anchor.get(k) is None:
                pos = next((owners[c] for c in _name_candidates(k) if c in owners), None)
                if pos is not None:
                    self.anchor[k] = pos


    def _walks(self, optimized: onnx.ModelProto):
        """(up, down) for an optimized node: the original positions producing the nearest original tensor
        upstream of it and consuming the nearest one downstream (by the optimized graph's tensor names)."""
        g = self.g
        prod = {o: n for n in optimized.graph.node for o in n.output}
        cons = defaultdict(list)
        for n in optimized.graph.node:
            for i in n.input:
                cons[i].append(n)
        return lambda n: (_nearest(n, g.producer.get, lambda t: [prod[t]] if t in prod else [], "input"),
                          _nearest(n, lambda t: min(g.consumers[t]) if g.consumers.get(t) else None,
                                   lambda t: cons.get(t, []), "output"))

    def renamed(self, optimized: onnx.ModelProto) -> None:
        """Step 4, first: a computing kernel with no original tensor or name (a FusedConv of nodes the transpose
        optimizer rewrote, a Transpose it turned into Reshape_token_*): the first original node of its op that
        no kernel ran, between the original tensors upstream and downstream of it (it then owns that node)."""
        walks = self._walks(optimized)
        for k in self.kernels:
            n = self.opt_nodes.get(k)
            if (self.anchor.get(k) is not None or n is None or n.op_type in LAYOUT_KERNELS or self.tensor_of.get(k)
                    or k in self.view_of):
                continue
            up, down = walks(n)
            pos = self._same_op(n.op_type, up, down)
            if pos is not None:
                self.cover(k, [pos])
                self.inserted.add(k)
                self.tensor_of[k] = next((o for o in self.g.nodes[pos].output if o), None)

    def by_tensors(self, optimized: onnx.ModelProto) -> None:
        """Step 4, last: kernels still unmapped go to the producer of the original tensor they write, else of the
        nearest one upstream, else to the consumer of the nearest one downstream."""
        walks = self._walks(optimized)
        for k in self.kernels:
            if self.anchor.get(k) is not None or k not in self.opt_nodes:
                continue
            n = self.opt_nodes[k]
            own = next((self.g.producer[o] for o in n.output if o in self.g.producer), None)
            pos = next((p for p in (own, *walks(n)) if p is not None), None)
            if pos is not None:
                self.anchor[k] = self.fused_into.get(pos, pos)
                self.inserted.add(k)

    def _same_op(self, op: str, up: int | None, down: int | None) -> int | None:
        """The first original node of the kernel's op (FusedConv -> Conv; Reshape also for a Transpose) that no
        kernel ran, after up and before down."""
        base = op[len("Fused"):] if op.startswith("Fused") else op
        ops = {base, "Transpose"} if base == "Reshape" else {base}
        lo, hi = (up if up is not None else -1), (down if down is not None else len(self.g.nodes))
        return next((p for p in range(lo + 1, hi)
                     if p not in self.owner and p not in self.merged and self.g.nodes[p].op_type in ops), None)

    def by_order(self, order: list[str]) -> None:
        """Kernels the saved optimized graph does not hold: the kernel that runs next, else the one before."""
        for i, k in enumerate(order):
            if self.anchor.get(k) is not None or k in self.opt_nodes:
                continue
            near = order[i + 1:] + order[:i][::-1]
            got = next((self.anchor[m] for m in near if self.anchor.get(m) is not None and m not in self.inserted), None)
            if got is not None:
                self.anchor[k] = got
                self.inserted.add(k)


def _nearest(n: onnx.NodeProto, original, step, side: str) -> int | None:
    """Walk the optimized graph from node n through its inputs (side="input") or outputs until a tensor of the
    original graph: original(tensor) -> position, or None; step(tensor) -> the optimized nodes to go on through."""
    seen, frontier = set(), [n]
    while frontier:
        nxt = []
        for m in frontier:
            for t in getattr(m, side):
                if not t or t in seen:
                    continue
                seen.add(t)
                pos = original(t)
                if pos is not None:
                    return pos
                nxt.extend(step(t))
        frontier = nxt
    return None


def body_nodes(g: Graph) -> dict[str, int]:
    """Every node name inside a control-flow node's bodies (nested bodies too) -> the top-level position."""
    out: dict[str, int] = {}

    def walk(graph: onnx.GraphProto, pos: int) -> None:
        for n in graph.node:
            if n.name:
                out.setdefault(n.name, pos)
            for a in n.attribute:
                for sub in attribute_subgraphs(a):
                    walk(sub, pos)
    for pos, n in enumerate(g.nodes):
        if n.op_type in CONTROL_FLOW:
            for a in n.attribute:
                for sub in attribute_subgraphs(a):
                    walk(sub, pos)
    return out


def _name_candidates(k: str) -> list[str]:
    """A kernel's name, without ORT's 'fused ' prefix and '/<Fusion>' suffix, and its '_'-prefixes."""
    base = k[len("fused "):] if k.startswith("fused ") else k
    base = base.split("/")[0] if "/" in base and base.rsplit("/", 1)[-1].endswith("Fusion") else base
    parts = base.split("_")
    return [k, base] + ["_".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]


def attribute(g: Graph, optimized: onnx.ModelProto | None, kernel_names: list[str],
              order: list[str] | None = None) -> dict:
    """Map optimized-graph kernels onto original node positions (see the module docstring). order: the kernels
    in the order they ran (default: kernel_names).

    Returns {"anchor": {kernel: pos or None}, "fused_into": {pos: anchor pos}, "inserted": {kernels ORT
    inserted or rewrote}, "merged": {positions ORT's CSE removed}}.
    """
    att = _Attribution(g, name_nodes(optimized), kernel_names)
    att.computing()
    att.views()
    if optimized is not None:
        att.renamed(optimized)
    att.epilogues()
    att.bodies()
    if optimized is not None:
        att.neighbours(optimized)
        att.by_tensors(optimized)
    att.by_order(order or kernel_names)
    return {"anchor": att.anchor, "fused_into": att.fused_into, "inserted": att.inserted, "merged": att.merged}


def latency_table(g: Graph, prof: dict) -> tuple[pd.DataFrame, dict]:
    """ops_latency rows (one per original node) and the attribution summary."""
    per_run = prof["per_run"]
    kernels = sorted({k for run in per_run for k in run})
    order = list(dict.fromkeys(k for run in per_run for k in run))     # per run in execution order (kernel_times)
    att = attribute(g, prof["optimized"], kernels, order)
    n_nodes, n_runs = len(g.nodes), len(per_run)
    times = np.zeros((n_runs, n_nodes))
    attributed = np.zeros(n_runs)
    total = np.zeros(n_runs)
    unattributed: dict[str, float] = defaultdict(float)
    kernels_of = defaultdict(list)
    for k in kernels:
        a = att["anchor"].get(k)
        if a is not None:
            kernels_of[a].append(k)
    for r, run in enumerate(per_run):
        for k, us in run.items():
            total[r] += us
            a = att["anchor"].get(k)
            if a is None:
                unattributed[k] += us / max(n_runs, 1)
            else:
                times[r, a] += us
                attributed[r] += us
    med = np.median(times, axis=0) if n_runs else np.full(n_nodes, np.nan)
    p10 = np.percentile(times, 10, axis=0) if n_runs else med
    p90 = np.percentile(times, 90, axis=0) if n_runs else med
    rows = []
    for pos in range(n_nodes):
        if kernels_of.get(pos):
            how = "kernel"
        elif pos in att["fused_into"]:
            how = "fused"
        else:
            how = "not_run"  # constant-folded or removed by ORT (Identity, Dropout, shape arithmetic, CSE)
        rows.append({
            "node": g.names[pos], "op_type": op_key(g.nodes[pos]),
            "latency_us": float(med[pos]), "p10_us": float(p10[pos]), "p90_us": float(p90[pos]), "runs": n_runs,
            "attribution": how,
            "fused_into": g.names[att["fused_into"][pos]] if pos in att["fused_into"] else "",
            "ort_kernels": ";".join(kernels_of.get(pos, [])),
            "inserted": ";".join(k for k in kernels_of.get(pos, []) if k in att["inserted"]),
        })
    cov = float(attributed.sum() / total.sum()) if total.sum() > 0 else float("nan")
    summary = {
        "kernel_time_coverage": cov,
        "kernel_time_per_run_us": {"median": float(np.median(total)) if n_runs else None},
        "kernels": len(kernels),
        "unattributed_kernels_us": dict(sorted(unattributed.items(), key=lambda kv: -kv[1])),
        "nodes_with_kernel": int(sum(1 for r in rows if r["attribution"] == "kernel")),
        "nodes_fused": int(sum(1 for r in rows if r["attribution"] == "fused")),
        "nodes_not_run": int(sum(1 for r in rows if r["attribution"] == "not_run")),
        "nodes_merged": len(att["merged"]),          # removed by ORT's CSE (counted in nodes_not_run)
        "inside_control_flow": _inside(g, att["anchor"], prof.get("inside")),
    }
    return pd.DataFrame(rows), summary


def merge_sessions(tables: list[tuple[pd.DataFrame, dict]]) -> tuple[pd.DataFrame, dict]:
    """One latency_table from those of several sessions of a model: per node the median of the sessions' medians,
    p10 and p90 the lowest and highest of theirs, the runs summed; the attribution summary the first session's, its
    kernel time per run the sessions' median. Tables, not runs, are merged: ORT names the layout Reorder kernels it
    inserts anew in each session, and each session's own optimized graph attributes its kernels."""
    if len(tables) == 1:
        return tables[0]
    df, att = tables[0][0].copy(), dict(tables[0][1])
    cols = {c: np.array([t[c].to_numpy(float) for t, _ in tables]) for c in ("latency_us", "p10_us", "p90_us", "runs")}
    df["latency_us"] = np.median(cols["latency_us"], axis=0)
    df["p10_us"], df["p90_us"] = cols["p10_us"].min(axis=0), cols["p90_us"].max(axis=0)
    df["runs"] = cols["runs"].sum(axis=0).astype(int)
    per_run = [a["kernel_time_per_run_us"]["median"] for _, a in tables]
    att["kernel_time_per_run_us"] = {"median": None if None in per_run else float(np.median(per_run))}
    return df, att


def _inside(g: Graph, anchor: dict, inside: dict | None) -> dict:
    """Per control-flow node: the kernels ORT ran inside its bodies and their median time per run (already
    part of the node's own kernel time, never counted twice)."""
    if not inside or not inside.get("of"):
        return {}
    out: dict[str, dict] = {}
    for body_kernel, container in sorted(inside["of"].items()):
        pos = anchor.get(container)
        node = g.names[pos] if pos is not None else container
        out.setdefault(node, {"kernels": [], "container_kernels": set()})
        out[node]["kernels"].append(body_kernel)
        out[node]["container_kernels"].add(container)
    for node, d in out.items():
        per_run = [sum(r.get(c, 0.0) for c in d["container_kernels"]) for r in inside["us"]]
        d["median_us"] = float(np.median(per_run)) if per_run else 0.0
        d["container_kernels"] = sorted(d["container_kernels"])
    return out


def percentiles(values: list[float]) -> dict:
    if not values:
        return {}
    a = np.asarray(values)
    return {"median_us": float(np.median(a)), "mean_us": float(a.mean()), "p10_us": float(np.percentile(a, 10)),
            "p90_us": float(np.percentile(a, 90)), "min_us": float(a.min()), "runs": int(len(a))}
