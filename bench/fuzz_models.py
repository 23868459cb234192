#!/usr/bin/env python3
"""Seeded mutation fuzzer for the stage contract (DESIGN.md, "Stage contract").

Builds a handful of small valid seed models with onnx.helper, mutates them (byte-level and structural
mutations, each a named KIND), and runs the stages on every mutant as black boxes (subprocesses, never
`import lib`):

    02_shapes_flops_bytes.py --model M --results R
    07_split_candidates.py   --model M --results R      (when 02 exited 0)
    01_profile_onnx.py       --model M --results R01 --runs 1 --warmup 0   (on a --stage01-count subset)

each with a timeout, cwd = a fresh empty folder, TMPDIR = a fresh empty folder, under an address-space limit.
Every run is classified strictly:

    ok               exit 0, artifacts complete and sane
    clean_refusal    exit 2, exactly one non-empty stderr line starting with "error: ", no traceback
    crash            exit 1, any other exit code or signal, or a traceback anywhere on stderr
    hang             no exit within --timeout seconds (killed)
    multi_line_error exit 2 but more than one non-empty stderr line (or one not starting with "error: ")
    noisy_ok         exit 0 with a library warning on stderr
    stray_files      a file written to the cwd, TMPDIR, the model's folder or the repository's results/<stem>/
    bad_figure       exit 0 but a CSV/JSON figure is negative, > 2^63, NaN/inf where it must be known, an unknown
                     cost not flagged consistently, or node names that differ from the model's
    invalid_accepted a structurally invalid mutant analysed with exit 0
    valid_refused    a mutant valid by construction (e.g. node names "NA", "null") refused with exit 2
    half_written     files left in the results folder after exit != 0, temp files left, or a missing artifact
                     after exit 0

Whether a mutant is structurally invalid comes from its construction (each KIND declares invalid / valid /
either) and from an independent structural validator in this file (dangling inputs, duplicate producers,
cycles, bad If/Loop bodies, negative dims, unknown element types, initializer data that does not match its
dims, external data outside the model folder or missing, required inputs missing, attribute types that
contradict the op schema); onnx.checker.check_model(full_check=True) and onnxruntime.InferenceSession are run
too (in a separate worker process, so that a native crash cannot take the fuzzer down) and recorded next to
it as a double check.

Mutant ids are KIND.SEED.N (e.g. dangling_input.cnn.3); a mutant is a pure function of (--seed, id), so

    .venv/bin/python bench/fuzz_models.py --seed 0 --only dangling_input.cnn.3 --save-dir /tmp/fz -v

regenerates it, saves it (model folder + mutant.json) and shows every stage's command, exit code and stderr.

    .venv/bin/python bench/fuzz_models.py --count 300 --stage01-count 30 --jobs 2 --json /tmp/fuzz.json
    .venv/bin/python bench/fuzz_models.py --list-kinds
    .venv/bin/python bench/fuzz_models.py --count 300 --stage01-count 30 --record   # the summary into bench/RESULTS.md

Exit code: 0 when no failure class has a member, 1 otherwise (2 for bad arguments).
"""
from __future__ import annotations

import argparse
import copy
import fnmatch
import json
import math
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from record import record

REPO = Path(__file__).resolve().parent.parent
STAGES = {"01": "01_profile_onnx.py", "02": "02_shapes_flops_bytes.py", "07": "07_split_candidates.py"}
ARTIFACTS = {
    "01": ["ops_latency.csv", "profile_meta.json"],
    "02": ["ops_metrics.csv", "metrics_meta.json"],
    "03": ["ops_profile.csv", "merge_meta.json"],
    "07": ["boundaries.csv", "pareto_export.csv", "candidate_pruning.json", "split_candidates.tex",
           "system_config.json", "workload_profile.json"],
}
PREREQ_RE = re.compile(r"run (\d\d_[A-Za-z0-9_]+\.py) first")
# ONNX Runtime's telemetry SDK writes $TMPDIR/.ses when onnxruntime is imported (even after
# disable_telemetry_events()): reported as a note, not as a stage's stray file
ORT_TELEMETRY_FILES = {".ses"}
FAILURE_CLASSES = ["crash", "hang", "invalid_accepted", "bad_figure", "half_written", "stray_files",
                   "multi_line_error", "noisy_ok", "valid_refused"]
ALL_CLASSES = ["ok", "clean_refusal"] + FAILURE_CLASSES
TWO63 = 2 ** 63
WARNING_RE = re.compile(r"(?i)\bwarn(ing)?s?\b|\[[WE]:onnxruntime|UserWarning|DeprecationWarning|FutureWarning|"
                        r"RuntimeWarning|SettingWithCopy")


# ============================================================================ seed models

def _w(name, shape, seed, scale=0.1, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(dtype), name)


def _vi(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _finish(graph, opset=17, ir=8, infer=True):
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="nn-perf-fuzz")
    m.ir_version = ir
    if infer:
        m = onnx.shape_inference.infer_shapes(m, data_prop=True)
    return m


def seed_cnn():
    """Conv -> BN -> Relu -> Conv -> Add(skip) -> Relu -> GlobalAveragePool -> Flatten -> Gemm."""
    pads = {"pads": [1, 1, 1, 1]}
    spec = [("conv1", "Conv", "x w1 b1", "c1", pads), ("bn1", "BatchNormalization", "c1 s bb m v", "n1", {}),
            ("relu1", "Relu", "n1", "r1", {}), ("conv2", "Conv", "r1 w2", "c2", pads), ("add", "Add", "c2 r1", "a", {}),
            ("relu2", "Relu", "a", "r2", {}), ("gap", "GlobalAveragePool", "r2", "p", {}),
            ("flatten", "Flatten", "p", "f", {}), ("fc", "Gemm", "f wf bf", "y", {"transB": 1})]
    nodes = [helper.make_node(op, ins.split(), [out], name=name, **attrs) for name, op, ins, out, attrs in spec]
    inits = [_w("w1", (8, 3, 3, 3), 1), _w("b1", (8,), 2), _w("s", (8,), 3), _w("bb", (8,), 4), _w("m", (8,), 5),
             numpy_helper.from_array(np.ones(8, np.float32), "v"), _w("w2", (8, 8, 3, 3), 6),
             _w("wf", (10, 8), 7), _w("bf", (10,), 8)]
    g = helper.make_graph(nodes, "cnn", [_vi("x", [1, 3, 16, 16])], [_vi("y", [1, 10])], inits)
    return _finish(g), {}


def seed_xfmr():
    """Pre-LN self-attention block, 2 heads, symbolic batch (resolved by workload.yaml's `batch`), with the
    head Reshape's target computed from Shape(x) -> Gather -> Concat."""
    d, s, h = 16, 8, 2
    inits = [_w("ln_g", (d,), 10, 1.0), _w("ln_b", (d,), 11), _w("wq", (d, d), 12), _w("bq", (d,), 13),
             _w("wk", (d, d), 14), _w("wv", (d, d), 15), _w("wo", (d, d), 16),
             numpy_helper.from_array(np.array([0], np.int64), "idx0"),
             numpy_helper.from_array(np.array([s, h, d // h], np.int64), "heads_shape"),
             numpy_helper.from_array(np.array([s, d], np.int64), "model_shape"),
             numpy_helper.from_array(np.array(1 / math.sqrt(d // h), np.float32), "scale")]
    nodes = [
        helper.make_node("LayerNormalization", ["x", "ln_g", "ln_b"], ["h"], name="ln", axis=-1),
        helper.make_node("MatMul", ["h", "wq"], ["q0"], name="q_proj"),
        helper.make_node("Add", ["q0", "bq"], ["q"], name="q_bias"),
        helper.make_node("MatMul", ["h", "wk"], ["k"], name="k_proj"),
        helper.make_node("MatMul", ["h", "wv"], ["v"], name="v_proj"),
        helper.make_node("Shape", ["x"], ["xs"], name="shape_x"),
        helper.make_node("Gather", ["xs", "idx0"], ["bsz"], name="gather_batch", axis=0),
        helper.make_node("Concat", ["bsz", "heads_shape"], ["s4"], name="concat_s4", axis=0),
        helper.make_node("Concat", ["bsz", "model_shape"], ["s3"], name="concat_s3", axis=0),
        helper.make_node("Reshape", ["q", "s4"], ["q4"], name="q_reshape"),
        helper.make_node("Transpose", ["q4"], ["qt"], name="q_t", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["k", "s4"], ["k4"], name="k_reshape"),
        helper.make_node("Transpose", ["k4"], ["kt"], name="k_t", perm=[0, 2, 3, 1]),
        helper.make_node("Reshape", ["v", "s4"], ["v4"], name="v_reshape"),
        helper.make_node("Transpose", ["v4"], ["vt"], name="v_t", perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["qt", "kt"], ["sc"], name="qk"),
        helper.make_node("Mul", ["sc", "scale"], ["scs"], name="scale_mul"),
        helper.make_node("Softmax", ["scs"], ["p"], name="softmax", axis=-1),
        helper.make_node("MatMul", ["p", "vt"], ["o"], name="pv"),
        helper.make_node("Transpose", ["o"], ["ot"], name="o_t", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["ot", "s3"], ["o3"], name="o_reshape"),
        helper.make_node("MatMul", ["o3", "wo"], ["proj"], name="o_proj"),
        helper.make_node("Add", ["proj", "x"], ["y"], name="residual"),
    ]
    g = helper.make_graph(nodes, "xfmr", [_vi("x", ["batch", s, d])], [_vi("y", ["batch", s, d])], inits)
    return _finish(g), {}


def seed_ctrl():
    """If (branches read the outer x and initializers) and Loop (3 trips, body reads the outer x)."""
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "two"], ["t_out"], name="then_mul")], "then",
                               [], [_vi("t_out", [1, 4])])
    else_g = helper.make_graph([helper.make_node("Sub", ["x", "one"], ["e_out"], name="else_sub")], "else",
                               [], [_vi("e_out", [1, 4])])
    body = helper.make_graph(
        [helper.make_node("Add", ["v_in", "x"], ["v_out"], name="body_add"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond")],
        "body", [_vi("iter", [], TensorProto.INT64), _vi("cond_in", [], TensorProto.BOOL), _vi("v_in", [1, 4])],
        [_vi("cond_out", [], TensorProto.BOOL), _vi("v_out", [1, 4])])
    inits = [numpy_helper.from_array(np.array([2.0], np.float32), "two"),
             numpy_helper.from_array(np.array([1.0], np.float32), "one"),
             numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
             numpy_helper.from_array(np.array(3, np.int64), "trips"),
             numpy_helper.from_array(np.array(True), "keep_going")]
    nodes = [
        helper.make_node("ReduceSum", ["x"], ["sx"], name="sum_x", keepdims=0),
        helper.make_node("Greater", ["sx", "zero"], ["c"], name="positive"),
        helper.make_node("If", ["c"], ["y1"], name="branch", then_branch=then_g, else_branch=else_g),
        helper.make_node("Loop", ["trips", "keep_going", "y1"], ["v_final"], name="loop", body=body),
        helper.make_node("Relu", ["v_final"], ["y"], name="relu_out"),
    ]
    g = helper.make_graph(nodes, "ctrl", [_vi("x", [1, 4])], [_vi("y", [1, 4])], inits)
    return _finish(g), {}


def seed_extdata():
    """A small CNN whose weights live in weights.data next to the model (ONNX external data)."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("GlobalAveragePool", ["r1"], ["p"], name="gap"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], name="fc", transB=1),
    ]
    inits = [_w("w1", (8, 3, 3, 3), 21), _w("b1", (8,), 22), _w("wf", (10, 8), 23), _w("bf", (10,), 24)]
    g = helper.make_graph(nodes, "extdata", [_vi("x", [1, 3, 16, 16])], [_vi("y", [1, 10])], inits)
    m = _finish(g)
    with tempfile.TemporaryDirectory(prefix="nnperf_fuzz_seed_") as d:
        onnx.save(m, os.path.join(d, "s.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                  location="weights.data", size_threshold=0)
        m2 = onnx.load(os.path.join(d, "s.onnx"), load_external_data=False)
        data = Path(d, "weights.data").read_bytes()
    return m2, {"weights.data": data}


def seed_ir3():
    """IR 3 / opset 8, unnamed nodes (as old exporters wrote them), every initializer also a graph input."""
    inits = [_w("w", (4, 3, 3, 3), 31), _w("b", (4,), 32), _w("wf", (5, 64), 33), _w("bf", (5,), 34)]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["mp"], ["f"]),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1),
    ]
    inputs = [_vi("x", [1, 3, 8, 8])] + [_vi(t.name, list(t.dims)) for t in inits]
    g = helper.make_graph(nodes, "ir3", inputs, [_vi("y", [1, 5])], inits)
    return _finish(g, opset=8, ir=3), {}


SEEDS = {"cnn": seed_cnn, "xfmr": seed_xfmr, "ctrl": seed_ctrl, "extdata": seed_extdata, "ir3": seed_ir3}
_SEED_CACHE: dict = {}
_SEED_LOCK = threading.Lock()


def get_seed(name):
    with _SEED_LOCK:
        if name not in _SEED_CACHE:
            m, files = SEEDS[name]()
            _SEED_CACHE[name] = (m.SerializeToString(), files)
        raw, files = _SEED_CACHE[name]
    m = onnx.ModelProto()
    m.ParseFromString(raw)
    return m, dict(files)


# ============================================================================ mutation kinds

class NotApplicable(Exception):
    pass


@dataclass
class Symlink:
    target: str


@dataclass
class Ctx:
    rng: random.Random
    model: onnx.ModelProto
    seed_name: str
    files: dict            # extra files in the model folder: name -> bytes | Symlink
    outside: dict = field(default_factory=dict)   # files in the folder *above* the model folder
    expect: str = "invalid"
    raw_replace: list = field(default_factory=list)  # (placeholder bytes, replacement bytes) after serialising
    model_bytes: bytes | None = None
    check_nodes: dict = field(default_factory=dict)  # extra expectations checked on a successful 02


@dataclass
class Kind:
    name: str
    fn: object
    expect: str            # invalid | valid | either | checker | auto (byte level: the validator decides)
    seeds: list
    doc: str
    byte_level: bool = False


KINDS: dict[str, Kind] = {}
ALL_SEEDS = list(SEEDS)


def kind(name, expect, seeds=None, byte_level=False):
    def deco(fn):
        KINDS[name] = Kind(name, fn, expect, list(seeds or ALL_SEEDS), (fn.__doc__ or "").strip().splitlines()[0],
                           byte_level)
        return fn
    return deco


# ---------------------------------------------------------------- helpers on the proto

def _ghost(rng):
    return f"ghost_{rng.randrange(10 ** 6)}"


def _inits(g):
    return {t.name for t in g.initializer}


def _producers(g):
    """tensor -> index of the node that writes it (top level)."""
    return {o: i for i, n in enumerate(g.node) for o in n.output if o}


def _edges(g):
    """(producer index, consumer index, input position) for node->node edges."""
    prod = _producers(g)
    return [(prod[t], i, k) for i, n in enumerate(g.node) for k, t in enumerate(n.input) if t in prod and prod[t] != i]


def _runtime_inputs(g):
    inits = _inits(g)
    return [i for i in g.input if i.name not in inits]


def _value_infos(g, where=("input", "value_info", "output")):
    out = []
    if "input" in where:
        out += [("input", v) for v in _runtime_inputs(g)]
    if "value_info" in where:
        out += [("value_info", v) for v in g.value_info]
    if "output" in where:
        out += [("output", v) for v in g.output]
    return [(w, v) for w, v in out if v.type.HasField("tensor_type")]


def _with_dims(vis):
    return [(w, v) for w, v in vis if v.type.tensor_type.HasField("shape") and len(v.type.tensor_type.shape.dim)]


def _subgraphs(g, path="graph"):
    """(path, GraphProto, owning node) for every If/Loop/Scan body, recursively."""
    out = []
    for n in g.node:
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                p = f"{path}/{n.name or n.op_type}.{a.name}"
                out.append((p, a.g, n))
                out += _subgraphs(a.g, p)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for k, sg in enumerate(a.graphs):
                    p = f"{path}/{n.name or n.op_type}.{a.name}[{k}]"
                    out.append((p, sg, n))
                    out += _subgraphs(sg, p)
    return out


def _rename_tensor(g, old, new):
    """Rename a tensor everywhere in g (and inside the bodies that read it from the outer scope)."""
    for n in g.node:
        for k, t in enumerate(n.input):
            if t == old:
                n.input[k] = new
        for k, t in enumerate(n.output):
            if t == old:
                n.output[k] = new
        for a in n.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                _rename_tensor(a.g, old, new)
    for coll in (g.input, g.output, g.value_info):
        for v in coll:
            if v.name == old:
                v.name = new
    for t in g.initializer:
        if t.name == old:
            t.name = new


def _pick(rng, seq, what="target"):
    seq = list(seq)
    if not seq:
        raise NotApplicable(f"no {what}")
    return seq[rng.randrange(len(seq))]


def _nu_placeholder(ctx):
    """A same-length ASCII placeholder swapped for invalid UTF-8 bytes after serialising (protobuf's Python
    API refuses to set them)."""
    k = len(ctx.raw_replace)
    ph = f"@@NU{k:02d}@@@@".encode()
    rep = b"\xff\xfe" + f"{k:02d}".encode() + b"\xc3(\x80a\xe9!"
    assert len(ph) == len(rep)
    ctx.raw_replace.append((ph, rep))
    return ph.decode()


def _schema(node, opsets):
    dom = "" if node.domain in ("", "ai.onnx") else node.domain
    ver = opsets.get(dom, opsets.get("ai.onnx") if dom == "" else None)
    if ver is None or not isinstance(node.op_type, str):
        return None
    try:
        return onnx.defs.get_schema(node.op_type, int(ver), dom)
    except Exception:  # noqa: BLE001 - unknown op or opset
        return None


def _opsets(m):
    return {o.domain: o.version for o in m.opset_import}


# ---------------------------------------------------------------- byte level

@kind("bytes_bitflip", "auto", byte_level=True)
def k_bitflip(ctx):
    """flip 1-8 random bits of the model file"""
    b = bytearray(ctx.model_bytes)
    pos = []
    for _ in range(ctx.rng.randint(1, 8)):
        i = ctx.rng.randrange(len(b))
        bit = ctx.rng.randrange(8)
        b[i] ^= 1 << bit
        pos.append(f"{i}:{bit}")
    ctx.model_bytes = bytes(b)
    return "flipped bits " + ",".join(pos)


@kind("bytes_truncate", "auto", byte_level=True)
def k_truncate(ctx):
    """cut the model file at a random offset"""
    n = ctx.rng.randrange(0, len(ctx.model_bytes))
    ctx.model_bytes = ctx.model_bytes[:n]
    return f"truncated to {n} bytes"


@kind("bytes_insert", "auto", byte_level=True)
def k_insert(ctx):
    """insert 1-64 random bytes at a random offset"""
    i = ctx.rng.randrange(len(ctx.model_bytes) + 1)
    ins = bytes(ctx.rng.randrange(256) for _ in range(ctx.rng.randint(1, 64)))
    ctx.model_bytes = ctx.model_bytes[:i] + ins + ctx.model_bytes[i:]
    return f"inserted {len(ins)} bytes at {i}"


@kind("bytes_delete", "auto", byte_level=True)
def k_delete(ctx):
    """delete a random range of 1-64 bytes"""
    i = ctx.rng.randrange(len(ctx.model_bytes))
    n = ctx.rng.randint(1, 64)
    ctx.model_bytes = ctx.model_bytes[:i] + ctx.model_bytes[i + n:]
    return f"deleted bytes {i}..{i + n}"


@kind("bytes_overwrite", "auto", byte_level=True)
def k_overwrite(ctx):
    """overwrite a random range of 1-32 bytes with random bytes"""
    b = bytearray(ctx.model_bytes)
    i = ctx.rng.randrange(len(b))
    n = min(ctx.rng.randint(1, 32), len(b) - i)
    b[i:i + n] = bytes(ctx.rng.randrange(256) for _ in range(n))
    ctx.model_bytes = bytes(b)
    return f"overwrote bytes {i}..{i + n}"


# ---------------------------------------------------------------- graph structure

@kind("dangling_input", "invalid")
def k_dangling(ctx):
    """a node input renamed to a tensor nothing produces"""
    g = ctx.model.graph
    i, n = _pick(ctx.rng, [(i, n) for i, n in enumerate(g.node) if any(n.input)], "node with inputs")
    k = _pick(ctx.rng, [k for k, t in enumerate(n.input) if t])
    old, n.input[k] = n.input[k], _ghost(ctx.rng)
    return f"node #{i} {n.op_type} input {k} '{old}' -> '{n.input[k]}'"


@kind("delete_node", "invalid")
def k_delete_node(ctx):
    """delete a node whose output is consumed (its consumers dangle)"""
    g = ctx.model.graph
    used = {t for n in g.node for t in n.input} | {o.name for o in g.output}
    cands = [i for i, n in enumerate(g.node) if any(o in used for o in n.output)]
    i = _pick(ctx.rng, cands)
    n = g.node[i]
    desc = f"deleted node #{i} {n.op_type} '{n.name}' (outputs {list(n.output)})"
    del g.node[i]
    return desc


@kind("duplicate_producer", "invalid")
def k_dup_producer(ctx):
    """two producers of one tensor (a copied node, a renamed output, or a node writing a graph input)"""
    g = ctx.model.graph
    v = ctx.rng.randrange(3)
    if v == 0:
        i = ctx.rng.randrange(len(g.node))
        dup = copy.deepcopy(g.node[i])
        dup.name = (dup.name or dup.op_type) + "_dup"
        g.node.insert(i + 1, dup)
        return f"node #{i} {dup.op_type} copied (same outputs {list(dup.output)})"
    if v == 1 and len(g.node) >= 2:
        a, b = sorted(ctx.rng.sample(range(len(g.node)), 2))
        old = g.node[b].output[0]
        g.node[b].output[0] = g.node[a].output[0]
        return f"node #{b} output '{old}' renamed to node #{a}'s output '{g.node[a].output[0]}'"
    inp = _pick(ctx.rng, _runtime_inputs(g), "graph input")
    i = ctx.rng.randrange(len(g.node))
    old = g.node[i].output[0]
    g.node[i].output[0] = inp.name
    return f"node #{i} output '{old}' renamed to graph input '{inp.name}'"


@kind("remove_initializer", "invalid")
def k_remove_init(ctx):
    """remove an initializer a node still reads (valid when it is also a graph input, IR-3 style)"""
    g = ctx.model.graph
    used = {t for n in g.node for t in n.input} | {t for _, sg, _ in _subgraphs(g) for n in sg.node for t in n.input}
    k = _pick(ctx.rng, [k for k, t in enumerate(g.initializer) if t.name in used], "used initializer")
    name = g.initializer[k].name
    del g.initializer[k]
    if name in {i.name for i in g.input}:
        ctx.expect = "valid"
        return f"removed initializer '{name}' (still a graph input: now fed at run time)"
    return f"removed initializer '{name}'"


@kind("self_loop", "invalid")
def k_self_loop(ctx):
    """a node reads its own output"""
    g = ctx.model.graph
    i, n = _pick(ctx.rng, [(i, n) for i, n in enumerate(g.node) if any(n.input) and n.output], "node")
    k = _pick(ctx.rng, [k for k, t in enumerate(n.input) if t])
    n.input[k] = n.output[0]
    return f"node #{i} {n.op_type} input {k} := its own output '{n.output[0]}'"


@kind("cycle2", "invalid")
def k_cycle2(ctx):
    """2-node cycle: a producer reads its consumer's output"""
    g = ctx.model.graph
    p, c, _ = _pick(ctx.rng, _edges(g), "edge")
    pn = g.node[p]
    k = _pick(ctx.rng, [k for k, t in enumerate(pn.input) if t] or [None], "producer input")
    if k is None:
        pn.input.append(g.node[c].output[0])
    else:
        pn.input[k] = g.node[c].output[0]
    return f"node #{p} {pn.op_type} now reads '{g.node[c].output[0]}' of its consumer #{c}"


@kind("break_subgraph", "invalid", seeds=["ctrl"])
def k_break_subgraph(ctx):
    """a node inside an If/Loop body reads a tensor nothing produces"""
    path, sg, _ = _pick(ctx.rng, [(p, sg, n) for p, sg, n in _subgraphs(ctx.model.graph) if sg.node], "body")
    n = _pick(ctx.rng, [n for n in sg.node if any(n.input)], "body node")
    k = _pick(ctx.rng, [k for k, t in enumerate(n.input) if t])
    old, n.input[k] = n.input[k], _ghost(ctx.rng)
    return f"{path}: {n.op_type} input '{old}' -> '{n.input[k]}'"


@kind("subgraph_bad_output", "invalid", seeds=["ctrl"])
def k_subgraph_output(ctx):
    """an If/Loop body's output names a tensor that does not exist"""
    path, sg, _ = _pick(ctx.rng, [(p, sg, n) for p, sg, n in _subgraphs(ctx.model.graph) if sg.output], "body")
    o = _pick(ctx.rng, sg.output)
    old, o.name = o.name, _ghost(ctx.rng)
    return f"{path}: output '{old}' -> '{o.name}'"


@kind("control_flow_arity", "invalid", seeds=["ctrl"])
def k_cf_arity(ctx):
    """a Loop body with a missing or extra input/output, or an If branch with an extra output"""
    g = ctx.model.graph
    v = ctx.rng.randrange(4)
    loop = next(n for n in g.node if n.op_type == "Loop")
    body = next(a.g for a in loop.attribute if a.name == "body")
    if v == 0:
        body.input.append(_vi("extra_in", [1, 4]))
        return "Loop body: extra input"
    if v == 1:
        body.output.append(_vi("v_in", [1, 4]))
        return "Loop body: extra output (passes v_in through)"
    if v == 2:
        loop.output.append("loop_extra_out")
        return "Loop node: one more output than the body produces"
    iff = next(n for n in g.node if n.op_type == "If")
    then = next(a.g for a in iff.attribute if a.name == "then_branch")
    then.output.append(_vi("x", [1, 4]))
    return "If then_branch: two outputs, else_branch one"


# ---------------------------------------------------------------- dims and types

def _set_dim(v, k, val):
    d = v.type.tensor_type.shape.dim[k]
    d.Clear()
    d.dim_value = val


@kind("dim_huge", "either")
def k_dim_huge(ctx):
    """dim 2^62 / 2^63-1 / 2^40 / 2^31 / 2^32+1 on a graph input or value_info (figures must not wrap)"""
    where = ("input",) if ctx.rng.random() < 0.7 else ("value_info",)
    where, v = _pick(ctx.rng, _with_dims(_value_infos(ctx.model.graph, where)), "dim")
    k = ctx.rng.randrange(len(v.type.tensor_type.shape.dim))
    val = ctx.rng.choice([2 ** 62, 2 ** 63 - 1, 2 ** 40, 2 ** 31, 2 ** 32 + 1])
    _set_dim(v, k, val)
    return f"{where} '{v.name}' dim {k} = {val}"


@kind("dim_negative", "either")
def k_dim_negative(ctx):
    """dim -1 / -7 / -2^62 on a graph input, output or value_info (ONNX Runtime reads it as a dynamic dim, as
    Paddle exports write them: analysing with the dim unresolved or refusing are both fine)"""
    where, v = _pick(ctx.rng, _with_dims(_value_infos(ctx.model.graph)), "dim")
    k = ctx.rng.randrange(len(v.type.tensor_type.shape.dim))
    val = ctx.rng.choice([-1, -7, -2 ** 62])
    _set_dim(v, k, val)
    return f"{where} '{v.name}' dim {k} = {val}"


@kind("dim_zero", "either")
def k_dim_zero(ctx):
    """dim 0 on a graph input (a legal empty tensor; analysing or refusing are both fine)"""
    where, v = _pick(ctx.rng, _with_dims(_value_infos(ctx.model.graph, ("input",))), "dim")
    k = ctx.rng.randrange(len(v.type.tensor_type.shape.dim))
    _set_dim(v, k, 0)
    return f"{where} '{v.name}' dim {k} = 0"


@kind("symbolic_unresolved", "either")
def k_symbolic(ctx):
    """a graph input dim becomes a symbolic dim no config resolves (expect the clean 'unresolved' error)"""
    where, v = _pick(ctx.rng, _with_dims(_value_infos(ctx.model.graph, ("input",))), "dim")
    k = ctx.rng.randrange(len(v.type.tensor_type.shape.dim))
    d = v.type.tensor_type.shape.dim[k]
    d.Clear()
    d.dim_param = ctx.rng.choice(["frobs", "unk__0", "N?", "batch x"])
    return f"{where} '{v.name}' dim {k} = '{d.dim_param}'"


@kind("init_dims_negative", "invalid")
def k_init_neg(ctx):
    """an initializer's dims contain -1"""
    t = _pick(ctx.rng, [t for t in ctx.model.graph.initializer if len(t.dims)], "initializer with dims")
    k = ctx.rng.randrange(len(t.dims))
    t.dims[k] = -1
    return f"initializer '{t.name}' dims {list(t.dims)}"


@kind("init_dims_mismatch", "invalid")
def k_init_mismatch(ctx):
    """an initializer's dims do not match its data"""
    t = _pick(ctx.rng, [t for t in ctx.model.graph.initializer if len(t.dims)], "initializer with dims")
    v = ctx.rng.randrange(3)
    if v == 0:
        t.dims[ctx.rng.randrange(len(t.dims))] += ctx.rng.choice([1, 5, 1000])
    elif v == 1:
        t.dims.append(3)
    else:
        t.dims[ctx.rng.randrange(len(t.dims))] = 2 ** 40
    return f"initializer '{t.name}' dims {list(t.dims)}"


@kind("elem_type_unknown", "invalid")
def k_elem_type(ctx):
    """unknown element type (-3, 99, 0 = UNDEFINED) on an input, output, value_info or initializer"""
    g = ctx.model.graph
    val = ctx.rng.choice([-3, 99, 0, 1000])
    vis = _value_infos(g)
    if ctx.rng.random() < 0.3 and len(g.initializer):
        t = _pick(ctx.rng, g.initializer)
        t.data_type = val
        return f"initializer '{t.name}' data_type = {val}"
    where, v = _pick(ctx.rng, vis)
    v.type.tensor_type.elem_type = val
    return f"{where} '{v.name}' elem_type = {val}"


@kind("type_mismatch", "checker")
def k_type_mismatch(ctx):
    """a graph input becomes INT64/STRING/BOOL/UINT8 (ops do not accept it; invalid when the checker says so)"""
    where, v = _pick(ctx.rng, _value_infos(ctx.model.graph, ("input",)))
    val = ctx.rng.choice([TensorProto.INT64, TensorProto.STRING, TensorProto.BOOL, TensorProto.UINT8])
    v.type.tensor_type.elem_type = val
    return f"{where} '{v.name}' elem_type = {TensorProto.DataType.Name(val)}"


@kind("int_constant_values", "either", seeds=["xfmr", "ctrl"])
def k_int_constants(ctx):
    """an int64 constant (Reshape target, Gather index, Loop trip count) gets -5 / 0 / 2^40 / 2^62 / 3"""
    g = ctx.model.graph
    t = _pick(ctx.rng, [t for t in g.initializer if t.data_type == TensorProto.INT64 and t.data_location == 0],
              "int64 initializer")
    arr = numpy_helper.to_array(t).copy()
    flat = arr.reshape(-1)
    k = ctx.rng.randrange(max(flat.size, 1))
    val = ctx.rng.choice([-5, 0, 2 ** 40, 2 ** 62, 3])
    if flat.size:
        flat[k] = val
    t.CopyFrom(numpy_helper.from_array(flat.reshape(arr.shape), t.name))
    return f"initializer '{t.name}'[{k}] = {val}"


# ---------------------------------------------------------------- names

@kind("non_utf8_op_type", "either")
def k_nu_op(ctx):
    """non-UTF-8 bytes in a node's op_type (set in the serialized form)"""
    n = _pick(ctx.rng, ctx.model.graph.node)
    n.op_type = _nu_placeholder(ctx)
    return f"node '{n.name}' op_type := invalid UTF-8"


@kind("non_utf8_tensor_name", "either")
def k_nu_tensor(ctx):
    """non-UTF-8 bytes in a tensor name (renamed consistently at producer and consumers)"""
    g = ctx.model.graph
    names = sorted({o for n in g.node for o in n.output if o} | {i.name for i in g.input} | _inits(g))
    old = _pick(ctx.rng, names)
    _rename_tensor(g, old, _nu_placeholder(ctx))
    return f"tensor '{old}' := invalid UTF-8 name"


@kind("non_utf8_node_name", "either")
def k_nu_node(ctx):
    """non-UTF-8 bytes in a node name"""
    n = _pick(ctx.rng, ctx.model.graph.node)
    old = n.name
    n.name = _nu_placeholder(ctx)
    return f"node '{old}' ({n.op_type}) name := invalid UTF-8"


ODD_NAMES = ["NA", "null", "None", "nan", "NaN", "N/A", "#N/A", "NULL", "-nan", "inf", "-inf", "1e400", "0x10",
             "TRUE", "false", " ", "n,1", 'q"uote', "new\nline", "täst_ü", "名前", "-1", "<NA>", "nil", "#",
             "'", "=1+1", "a;b", "1.0"]


@kind("odd_node_names", "valid")
def k_odd_names(ctx):
    """node names 'NA', 'null', 'None', 'nan', '#N/A', 'inf', ',', newline, quotes... (valid: must survive intact)"""
    g = ctx.model.graph
    k = ctx.rng.randint(1, len(g.node))
    idx = ctx.rng.sample(range(len(g.node)), k)
    names = ctx.rng.sample(ODD_NAMES, min(k, len(ODD_NAMES)))
    out = []
    for i, name in zip(idx, names):
        g.node[i].name = name
        out.append(f"#{i}={name!r}")
    return "node names " + ", ".join(out)


@kind("odd_tensor_names", "valid")
def k_odd_tensor_names(ctx):
    """tensor names 'NA', 'null', 'nan', 'None'... renamed consistently (valid)"""
    g = ctx.model.graph
    names = sorted({o for n in g.node for o in n.output if o} | {i.name for i in g.input} | _inits(g))
    olds = ctx.rng.sample(names, min(len(names), ctx.rng.randint(1, 4)))
    news = ctx.rng.sample([n for n in ODD_NAMES if n not in names], len(olds))
    for o, n in zip(olds, news):
        _rename_tensor(g, o, n)
    return "tensors " + ", ".join(f"{o!r}->{n!r}" for o, n in zip(olds, news))


@kind("duplicate_node_names", "valid")
def k_dup_names(ctx):
    """several nodes share one name (or all are empty): valid, each row still needs a unique id"""
    g = ctx.model.graph
    if ctx.rng.random() < 0.3:
        for n in g.node:
            n.name = ""
        return "all node names empty"
    k = ctx.rng.randint(2, max(2, len(g.node)))
    idx = ctx.rng.sample(range(len(g.node)), min(k, len(g.node)))
    name = ctx.rng.choice(["dup", "NA", "", g.node[idx[0]].name or "x", "conv1"])
    for i in idx:
        g.node[i].name = name
    # a generated-looking clash: a real node named like the id an unnamed node would get
    if ctx.rng.random() < 0.5 and len(g.node) > 2:
        j = ctx.rng.randrange(len(g.node))
        g.node[j].name = f"{g.node[(j + 1) % len(g.node)].op_type}_{(j + 1) % len(g.node)}"
        g.node[(j + 1) % len(g.node)].name = ""
    return f"nodes {sorted(idx)} named {name!r}"


# ---------------------------------------------------------------- schema violations

@kind("conv_missing_input", "invalid")
def k_conv_missing(ctx):
    """Conv (else any op needing >= 2 inputs) left with one input"""
    g = ctx.model.graph
    ops = _opsets(ctx.model)
    convs = [n for n in g.node if n.op_type == "Conv"]
    if not convs:
        convs = [n for n in g.node if (s := _schema(n, ops)) is not None and s.min_input >= 2]
    n = _pick(ctx.rng, convs, "op with >= 2 inputs")
    del n.input[1:]
    return f"{n.op_type} '{n.name}' keeps only input '{n.input[0]}'"


@kind("empty_required_input", "invalid")
def k_empty_required(ctx):
    """a required input position set to '' (an absent optional input is legal, a required one is not)"""
    g = ctx.model.graph
    ops = _opsets(ctx.model)
    cands = []
    for n in g.node:
        s = _schema(n, ops)
        if s is None:
            continue
        for k, t in enumerate(n.input):
            formal = s.inputs[min(k, len(s.inputs) - 1)] if s.inputs else None
            if t and formal is not None and formal.option == onnx.defs.OpSchema.FormalParameterOption.Single:
                cands.append((n, k))
    n, k = _pick(ctx.rng, cands, "required input")
    old, n.input[k] = n.input[k], ""
    return f"{n.op_type} '{n.name}' input {k} '{old}' -> ''"


@kind("wrong_attr_type", "invalid")
def k_wrong_attr(ctx):
    """an attribute of the wrong type (strides as FLOAT, axis as STRING, perm as INT, body as INT...)"""
    g = ctx.model.graph
    ops = _opsets(ctx.model)
    cands = [(n, s) for n in g.node if (s := _schema(n, ops)) is not None and s.attributes]
    n, s = _pick(ctx.rng, cands, "node with attributes")
    name = ctx.rng.choice(sorted(s.attributes))
    want = int(s.attributes[name].type)
    A = onnx.AttributeProto
    choices = {A.FLOAT: 1.5, A.INT: 7, A.STRING: b"seven", A.FLOATS: [1.5, 2.5], A.INTS: [1, 2],
               A.STRINGS: [b"a", b"b"]}
    bad_type = ctx.rng.choice([t for t in sorted(choices) if t != want])
    for k, a in enumerate(n.attribute):
        if a.name == name:
            del n.attribute[k]
            break
    n.attribute.append(helper.make_attribute(name, choices[bad_type]))
    return (f"{n.op_type} '{n.name}' attribute {name}: {A.AttributeType.Name(want)} -> "
            f"{A.AttributeType.Name(bad_type)}")


@kind("huge_attr", "either")
def k_huge_attr(ctx):
    """an attribute with 200k-2M repeated values (an unrecognised one, or a real one of the wrong length)"""
    g = ctx.model.graph
    n = _pick(ctx.rng, g.node)
    size = ctx.rng.choice([200_000, 2_000_000])
    if ctx.rng.random() < 0.5:
        n.attribute.append(helper.make_attribute("fuzz_junk", list(range(size))))
        return f"{n.op_type} '{n.name}': unrecognised attribute with {size} ints"
    ctx.expect = "checker"
    for k, a in enumerate(n.attribute):
        if a.type == onnx.AttributeProto.INTS:
            a.ints.extend([1] * size)
            return f"{n.op_type} '{n.name}': attribute {a.name} grows by {size} ints"
    ctx.expect = "either"
    n.attribute.append(helper.make_attribute("fuzz_junk", [0.5] * size))
    return f"{n.op_type} '{n.name}': unrecognised attribute with {size} floats"


# ---------------------------------------------------------------- graph outputs, opsets, empty

@kind("missing_graph_output", "either")
def k_no_output(ctx):
    """the graph lists no outputs (or drops one of several)"""
    del ctx.model.graph.output[:]
    return "graph.output cleared"


@kind("output_nonexistent", "invalid")
def k_output_ghost(ctx):
    """a graph output names a tensor that nothing produces"""
    o = _pick(ctx.rng, ctx.model.graph.output)
    if ctx.rng.random() < 0.5:
        old, o.name = o.name, _ghost(ctx.rng)
        return f"graph output '{old}' -> '{o.name}'"
    ctx.model.graph.output.append(_vi(_ghost(ctx.rng), [1]))
    return f"extra graph output '{ctx.model.graph.output[-1].name}'"


@kind("output_is_input", "valid")
def k_output_is_input(ctx):
    """a graph input or an initializer also listed as a graph output (legal pass-through)"""
    g = ctx.model.graph
    if ctx.rng.random() < 0.5 or not len(g.initializer):
        src = _pick(ctx.rng, _runtime_inputs(g))
        g.output.append(copy.deepcopy(src))
        return f"graph input '{src.name}' is also a graph output"
    t = _pick(ctx.rng, g.initializer)
    g.output.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return f"initializer '{t.name}' is also a graph output"


@kind("opset_odd", "either")
def k_opset(ctx):
    """default-domain opset 1 / 0 / 99 / -5, or no default-domain opset import at all"""
    v = ctx.rng.choice([1, 99, 0, -5, None])
    for k, o in enumerate(ctx.model.opset_import):
        if o.domain in ("", "ai.onnx"):
            if v is None:
                del ctx.model.opset_import[k]
                return "default-domain opset import removed"
            o.version = v
            return f"opset {v}"
    return "no default opset"


@kind("ir_version_odd", "either")
def k_ir(ctx):
    """ir_version 0 / 1 / 2 / 99 / -1"""
    v = ctx.rng.choice([0, 1, 2, 99, -1])
    ctx.model.ir_version = v
    return f"ir_version {v}"


@kind("empty_graph", "either")
def k_empty(ctx):
    """no nodes at all: outputs pass the input through (legal) or dangle (invalid)"""
    g = ctx.model.graph
    del g.node[:]
    del g.value_info[:]
    if ctx.rng.random() < 0.5:
        del g.output[:]
        g.output.append(copy.deepcopy(_runtime_inputs(g)[0]))
        return "all nodes removed, output = input"
    ctx.expect = "invalid"
    return "all nodes removed, outputs dangle"


@kind("unknown_op", "valid")
def k_unknown_op(ctx):
    """a node becomes an op nobody knows (com.fuzz:Frobnicate, or an unknown default-domain op): flagged, not fatal"""
    g = ctx.model.graph
    n = _pick(ctx.rng, [n for n in g.node if n.op_type not in ("If", "Loop")])
    old = n.op_type
    del n.attribute[:]
    if ctx.rng.random() < 0.6:
        n.op_type, n.domain = "Frobnicate", "com.fuzz"
        ctx.model.opset_import.append(helper.make_opsetid("com.fuzz", 1))
    else:
        n.op_type = "Frobnicate"
    ctx.check_nodes["unknown_cost"] = n.name
    return f"{old} '{n.name}' -> {n.domain + ':' if n.domain else ''}{n.op_type}"


@kind("duplicate_graph_input", "invalid")
def k_dup_input(ctx):
    """the same graph input listed twice"""
    g = ctx.model.graph
    src = _pick(ctx.rng, _runtime_inputs(g))
    g.input.append(copy.deepcopy(src))
    return f"graph input '{src.name}' listed twice"


@kind("init_shadows_tensor", "invalid")
def k_init_shadow(ctx):
    """an initializer named like a node output (the tensor gets two producers)"""
    g = ctx.model.graph
    n = _pick(ctx.rng, [n for n in g.node if n.output and n.output[0] not in {o.name for o in g.output}])
    g.initializer.append(numpy_helper.from_array(np.zeros((1,), np.float32), n.output[0]))
    return f"initializer named '{n.output[0]}', the output of {n.op_type} '{n.name}'"


@kind("shuffle_nodes", "valid")
def k_shuffle(ctx):
    """node list shuffled out of topological order (DESIGN: a stable Kahn order is used then)"""
    g = ctx.model.graph
    if len(g.node) < 2:
        raise NotApplicable("one node")
    nodes = list(g.node)
    order = list(range(len(nodes)))
    while order == sorted(order):
        ctx.rng.shuffle(order)
    del g.node[:]
    g.node.extend(copy.deepcopy(nodes[i]) for i in order)
    return f"node order {order}"


@kind("drop_value_info", "valid")
def k_drop_vi(ctx):
    """all value_info removed and the output dims made unknown (shapes must be inferred again)"""
    g = ctx.model.graph
    del g.value_info[:]
    for o in g.output:  # dims unknown (rank kept: the checker wants a shape field on graph outputs)
        for d in o.type.tensor_type.shape.dim:
            d.Clear()
    return "value_info dropped, output dims unknown"


# ---------------------------------------------------------------- external data

def _ext_tensors(m):
    return [t for t in m.graph.initializer if t.data_location == TensorProto.EXTERNAL]


def _set_ext(t, **kv):
    entries = {e.key: e.value for e in t.external_data}
    entries.update({k: str(v) for k, v in kv.items() if v is not None})
    for k in [k for k, v in kv.items() if v is None]:
        entries.pop(k, None)
    del t.external_data[:]
    for k, v in entries.items():
        e = t.external_data.add()
        e.key, e.value = k, v


@kind("extdata_escape", "invalid", seeds=["extdata"])
def k_ext_escape(ctx):
    """external-data location outside the model folder: ../../etc/passwd, /etc/passwd, ../outside.data, a symlink out"""
    v = ctx.rng.randrange(5)
    ts = _ext_tensors(ctx.model)
    data = ctx.files["weights.data"]
    if v == 0:
        for t in ts:
            _set_ext(t, location="../" * 16 + "etc/passwd", offset=0, length=None)
        return "location ../../(x16)etc/passwd"
    if v == 1:
        for t in ts:
            _set_ext(t, location="/etc/passwd", offset=0, length=None)
        return "location /etc/passwd (absolute)"
    if v == 2:
        ctx.outside["outside.data"] = data
        del ctx.files["weights.data"]
        for t in ts:
            _set_ext(t, location="../outside.data")
        return "location ../outside.data (a real weights file one folder up)"
    if v == 3:
        ctx.outside["outside.data"] = data
        ctx.files["weights.data"] = Symlink("../outside.data")
        return "weights.data is a symlink to ../outside.data"
    ctx.files["weights.data"] = Symlink("/etc/passwd")
    return "weights.data is a symlink to /etc/passwd"


@kind("extdata_missing", "invalid", seeds=["extdata"])
def k_ext_missing(ctx):
    """external data missing: no .data file, a truncated one, offset/length past its end, a bogus location"""
    v = ctx.rng.randrange(5)
    ts = _ext_tensors(ctx.model)
    if v == 0:
        del ctx.files["weights.data"]
        return "weights.data removed"
    if v == 1:
        ctx.files["weights.data"] = ctx.files["weights.data"][: len(ctx.files["weights.data"]) // 3]
        return "weights.data truncated to a third"
    t = _pick(ctx.rng, ts)
    if v == 2:
        _set_ext(t, offset=10 ** 9)
        return f"'{t.name}' offset 1e9"
    if v == 3:
        _set_ext(t, length=10 ** 9)
        return f"'{t.name}' length 1e9"
    _set_ext(t, location="no_such_file.data")
    return f"'{t.name}' location no_such_file.data"


# ---------------------------------------------------------------- size

@kind("huge_chain", "valid")
def k_huge_chain(ctx):
    """2k-10k Relu nodes appended after the output (linear-time stages must cope; 07 gets that many boundaries)"""
    g = ctx.model.graph
    out = copy.deepcopy(g.output[0])
    n = ctx.rng.choice([2000, 5000, 10000])
    prev = out.name
    for i in range(n):
        nxt = f"chain_{i}"
        g.node.append(helper.make_node("Relu", [prev], [nxt], name=f"chain_relu_{i}"))
        prev = nxt
    new = copy.deepcopy(out)
    new.name = prev
    g.output[0].CopyFrom(new)
    return f"{n} Relu nodes appended after '{out.name}'"


@kind("huge_fanin", "valid")
def k_huge_fanin(ctx):
    """a Sum reading one tensor 1k-5k times"""
    g = ctx.model.graph
    out = copy.deepcopy(g.output[0])
    n = ctx.rng.choice([1000, 5000])
    g.node.append(helper.make_node("Sum", [out.name] * n, ["fanin_sum"], name="fanin_sum"))
    new = copy.deepcopy(out)
    new.name = "fanin_sum"
    g.output[0].CopyFrom(new)
    return f"Sum of '{out.name}' x{n}"


@kind("huge_rank", "either")
def k_huge_rank(ctx):
    """a value_info (or graph output) with rank 10k-100k"""
    g = ctx.model.graph
    where, v = _pick(ctx.rng, _value_infos(g, ("value_info", "output")))
    r = ctx.rng.choice([10_000, 100_000])
    tt = v.type.tensor_type
    tt.shape.Clear()
    for _ in range(r):
        tt.shape.dim.add().dim_value = 1
    return f"{where} '{v.name}' rank {r}"


def _varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def _ld(fieldno, payload):
    """One length-delimited protobuf field."""
    return _varint((fieldno << 3) | 2) + _varint(len(payload)) + payload


@kind("deep_nesting", "either")
def k_deep(ctx):
    """If nested 8 / 30 / 120 deep, written as raw protobuf (upb's recursion limit is 100 messages)"""
    depth = ctx.rng.choice([8, 30, 120])
    g = ctx.model.graph
    src = _runtime_inputs(g)[0]
    et = src.type.tensor_type.elem_type
    dims = [d.dim_value if d.HasField("dim_value") else d.dim_param for d in src.type.tensor_type.shape.dim]
    g.initializer.append(numpy_helper.from_array(np.array(True), "fz_cond"))
    g.output.append(helper.make_tensor_value_info(f"lvl{depth}", et, dims))

    def leaf(name):
        return helper.make_graph([helper.make_node("Identity", [src.name], [name], name=f"id_{name}")], f"g_{name}",
                                 [], [helper.make_tensor_value_info(name, et, dims)]).SerializeToString()

    def attr(name, graph_bytes):  # AttributeProto: name = 1, g = 6, type = 20 (GRAPH = 5)
        return _ld(1, name.encode()) + _ld(6, graph_bytes) + _varint(20 << 3) + _varint(5)
    graph_bytes = leaf("lvl0")
    node = b""
    for d in range(1, depth + 1):  # NodeProto: input 1, output 2, name 3, op_type 4, attribute 5
        node = (_ld(1, b"fz_cond") + _ld(2, f"lvl{d}".encode()) + _ld(3, f"if{d}".encode()) + _ld(4, b"If")
                + _ld(5, attr("then_branch", graph_bytes)) + _ld(5, attr("else_branch", leaf(f"lvl{d}e"))))
        if d < depth:  # GraphProto: node 1, name 2, output 12
            vi = helper.make_tensor_value_info(f"lvl{d}", et, dims).SerializeToString()
            graph_bytes = _ld(1, node) + _ld(2, f"g{d}".encode()) + _ld(12, vi)
    gb = g.SerializeToString() + _ld(1, node)       # repeated fields concatenate: one more top-level node
    m = onnx.ModelProto()
    m.CopyFrom(ctx.model)
    m.ClearField("graph")
    ctx.model_bytes = m.SerializeToString() + _ld(7, gb)  # ModelProto.graph = 7
    return f"If nested {depth} deep"


# ============================================================================ structural validator (oracle)

_VALID_ELEM = set(TensorProto.DataType.values()) - {TensorProto.UNDEFINED}
_Opt = onnx.defs.OpSchema.FormalParameterOption


def _decoded(s):
    return s if isinstance(s, str) else repr(s)


def _dims_ok(v, path, probs):
    if not v.type.HasField("tensor_type"):
        return
    tt = v.type.tensor_type
    if tt.elem_type not in _VALID_ELEM:
        probs.append(f"elem_type: {path} '{_decoded(v.name)}' has element type {tt.elem_type}")
    # a negative dim_value on a value_info, input or output is a dynamic dim to ONNX Runtime (Paddle writes
    # them): not a structural defect; negative initializer dims are (_check_initializer)


def _expected_bytes(t):
    numel = 1
    for d in t.dims:
        numel *= int(d)
    if t.data_type in (TensorProto.INT4, TensorProto.UINT4) or t.data_type == getattr(TensorProto, "FLOAT4E2M1", -99):
        return numel, (numel + 1) // 2
    try:
        size = np.dtype(helper.tensor_dtype_to_np_dtype(t.data_type)).itemsize
    except Exception:  # noqa: BLE001
        return numel, None
    if t.data_type == TensorProto.STRING:
        return numel, None
    return numel, numel * size


def _check_initializer(t, path, model_dir, probs):
    name = _decoded(t.name)
    if t.data_type not in _VALID_ELEM:
        probs.append(f"elem_type: initializer '{name}' data_type {t.data_type}")
        return
    if any(d < 0 for d in t.dims):
        probs.append(f"negative_dim: initializer '{name}' dims {list(t.dims)}")
        return
    numel, nbytes = _expected_bytes(t)
    if t.data_location == TensorProto.EXTERNAL:
        ext = {e.key: e.value for e in t.external_data}
        loc = ext.get("location")
        if not loc:
            probs.append(f"external_data: initializer '{name}' has no location")
            return
        if os.path.isabs(loc):
            probs.append(f"external_data: initializer '{name}' location '{loc}' is absolute")
            return
        base = os.path.realpath(model_dir)
        full = os.path.realpath(os.path.join(model_dir, loc))
        if not full.startswith(base + os.sep):
            probs.append(f"external_data: initializer '{name}' location '{loc}' resolves outside the model folder")
            return
        if not os.path.isfile(full):
            probs.append(f"external_data: initializer '{name}' file '{loc}' missing")
            return
        try:
            off, length = int(ext.get("offset", 0)), ext.get("length")
        except ValueError:
            probs.append(f"external_data: initializer '{name}' offset is not an integer")
            return
        size = os.path.getsize(full)
        length = int(length) if length is not None else size - off
        if off < 0 or off + length > size:
            probs.append(f"external_data: initializer '{name}' range {off}+{length} past the end of '{loc}' ({size} bytes)")
        elif nbytes is not None and length != nbytes:
            probs.append(f"init_data: initializer '{name}' has {length} external bytes, dims {list(t.dims)} need {nbytes}")
        return
    if t.HasField("raw_data"):
        if nbytes is not None and len(t.raw_data) != nbytes:
            probs.append(f"init_data: initializer '{name}' has {len(t.raw_data)} raw bytes, dims {list(t.dims)} need {nbytes}")
        return
    try:
        fld = helper.tensor_dtype_to_field(t.data_type)
    except Exception:  # noqa: BLE001
        return
    have = len(getattr(t, fld))
    want = numel * (2 if t.data_type in (TensorProto.COMPLEX64, TensorProto.COMPLEX128) else 1)
    if have != want:
        probs.append(f"init_data: initializer '{name}' has {have} values, dims {list(t.dims)} need {want}")


def _check_graph(g, outer, opsets, path, model_dir, probs, top):
    in_names = [i.name for i in g.input]
    for n, c in Counter(in_names).items():
        if c > 1:
            probs.append(f"duplicate_input: {path} input '{_decoded(n)}' listed {c} times")
    init_names = [t.name for t in g.initializer]
    for n, c in Counter(init_names).items():
        if c > 1:
            probs.append(f"duplicate_producer: {path} initializer '{_decoded(n)}' defined {c} times")
    for v in list(g.input) + list(g.output) + list(g.value_info):
        _dims_ok(v, path, probs)
    for t in g.initializer:
        _check_initializer(t, path, model_dir, probs)
    defined = set(in_names) | set(init_names)
    produced: dict = {}
    for i, n in enumerate(g.node):
        for o in n.output:
            if not o:
                continue
            if o in produced:
                probs.append(f"duplicate_producer: {path} tensor '{_decoded(o)}' written by nodes #{produced[o]} and #{i}")
            elif o in defined:
                probs.append(f"duplicate_producer: {path} tensor '{_decoded(o)}' is a graph input/initializer and "
                             f"written by node #{i}")
            else:
                produced[o] = i
    visible = outer | defined | set(produced)
    for i, n in enumerate(g.node):
        for t in n.input:
            if t and t not in visible:
                probs.append(f"dangling_input: {path} node #{i} {_decoded(n.op_type)} '{_decoded(n.name)}' "
                             f"reads '{_decoded(t)}', which nothing produces")
            if t and produced.get(t) == i:
                probs.append(f"cycle: {path} node #{i} {_decoded(n.op_type)} reads its own output '{_decoded(t)}'")
    # cycles (Kahn, ignoring the file order)
    indeg = [0] * len(g.node)
    succ = [[] for _ in g.node]
    for i, n in enumerate(g.node):
        preds = {produced[t] for t in n.input if t in produced and produced[t] != i}
        indeg[i] = len(preds)
        for p in preds:
            succ[p].append(i)
    stack = [i for i, d in enumerate(indeg) if d == 0]
    seen = 0
    while stack:
        i = stack.pop()
        seen += 1
        for s in succ[i]:
            indeg[s] -= 1
            if indeg[s] == 0:
                stack.append(s)
    if seen != len(g.node):
        probs.append(f"cycle: {path} {len(g.node) - seen} nodes lie on or behind a cycle")
    for o in g.output:
        if o.name not in visible:
            probs.append(f"dangling_output: {path} output '{_decoded(o.name)}' is produced by nothing")
    # schemas: arity, required inputs, attribute types; control-flow bodies
    for i, n in enumerate(g.node):
        s = _schema(n, opsets)
        where = f"{path} node #{i} {_decoded(n.op_type)} '{_decoded(n.name)}'"
        if s is not None:
            ins = list(n.input)
            while ins and ins[-1] == "":
                ins.pop()
            if len(ins) < s.min_input or len(ins) > s.max_input:
                probs.append(f"arity: {where} has {len(ins)} inputs, the schema wants {s.min_input}..{s.max_input}")
            for k, t in enumerate(ins):
                if t == "" and s.inputs and s.inputs[min(k, len(s.inputs) - 1)].option == _Opt.Single:
                    probs.append(f"arity: {where} required input {k} is empty")
            outs = list(n.output)
            if len(outs) < s.min_output or len(outs) > s.max_output:
                probs.append(f"arity: {where} has {len(outs)} outputs, the schema wants {s.min_output}..{s.max_output}")
            have = {a.name: a for a in n.attribute}
            for an, sa in s.attributes.items():
                if an in have and have[an].type != int(sa.type) and not have[an].ref_attr_name:
                    probs.append(f"attr_type: {where} attribute {an} is "
                                 f"{onnx.AttributeProto.AttributeType.Name(have[an].type)}, the schema wants "
                                 f"{onnx.AttributeProto.AttributeType.Name(int(sa.type))}")
                if sa.required and an not in have:
                    probs.append(f"attr_missing: {where} lacks required attribute {an}")
        bodies = {a.name: a.g for a in n.attribute if a.type == onnx.AttributeProto.GRAPH}
        if n.op_type == "Loop" and n.domain in ("", "ai.onnx") and "body" in bodies:
            b = bodies["body"]
            nc = len(n.input) - 2
            if nc >= 0 and (len(b.input) != nc + 2 or len(b.output) < nc + 1 or len(n.output) < nc
                            or len(b.output) != 1 + nc + (len(n.output) - nc)):
                probs.append(f"body_arity: {where}: {len(n.input)} inputs / {len(n.output)} outputs vs body "
                             f"{len(b.input)} inputs / {len(b.output)} outputs")
        if n.op_type == "If" and n.domain in ("", "ai.onnx"):
            for bn in ("then_branch", "else_branch"):
                if bn in bodies and len(bodies[bn].output) != len(n.output):
                    probs.append(f"body_arity: {where} {bn} has {len(bodies[bn].output)} outputs, the node {len(n.output)}")
        for a in n.attribute:
            subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []
            for sg in subs:
                _check_graph(sg, visible, opsets, f"{where}.{a.name}", model_dir, probs, False)


def structural_problems(model_path: Path):
    """(parsed model or None, list of 'code: message' problems). Independent of lib/ and of onnx.checker."""
    raw = Path(model_path).read_bytes()
    m = onnx.ModelProto()
    try:
        m.ParseFromString(raw)
    except Exception as e:  # noqa: BLE001
        return None, [f"unparseable: protobuf refuses the file ({type(e).__name__}: {str(e)[:100]})"]
    probs: list[str] = []
    try:
        _check_graph(m.graph, set(), _opsets(m), "graph", str(Path(model_path).parent), probs, True)
    except RecursionError:
        probs.append("too_deep: subgraphs nested beyond Python's recursion limit")
    return m, probs


# ============================================================================ oracle worker (checker + ORT)

def oracle_worker():
    """--_oracle: read model paths on stdin, answer one JSON line each with the checker's and ORT's verdicts."""
    import warnings
    warnings.filterwarnings("ignore")
    proto = os.fdopen(os.dup(1), "w")          # the answers; fd 1 itself goes to /dev/null (native prints)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    sys.stdout = sys.stderr
    import onnxruntime as ort
    ort.set_default_logger_severity(4)
    for line in sys.stdin:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        path = req["path"]
        out = {"id": req["id"], "checker": None, "ort": None}
        try:
            onnx.checker.check_model(path, full_check=True)
        except Exception as e:  # noqa: BLE001
            out["checker"] = f"{type(e).__name__}: " + (str(e).strip().splitlines() or [""])[0][:300]
        try:
            so = ort.SessionOptions()
            so.intra_op_num_threads = 1
            so.inter_op_num_threads = 1
            so.log_severity_level = 4
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001
            out["ort"] = f"{type(e).__name__}: " + (str(e).strip().splitlines() or [""])[0][:300]
        proto.write("@@ORACLE " + json.dumps(out) + "\n")
        proto.flush()


class Oracle:
    """One worker process per fuzzing thread; restarted when it dies or hangs on a mutant."""

    def __init__(self, timeout, mem_bytes):
        self.timeout, self.mem_bytes, self.p, self.n = timeout, mem_bytes, None, 0

    def _start(self):
        self.p = subprocess.Popen(_limited([sys.executable, str(Path(__file__).resolve()), "--_oracle"], self.mem_bytes),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True, start_new_session=True)

    def check(self, path):
        if self.p is None or self.p.poll() is not None:
            self._start()
        result = {}
        self.n += 1
        rid = self.n

        def talk():
            try:
                self.p.stdin.write(json.dumps({"id": rid, "path": str(path)}) + "\n")
                self.p.stdin.flush()
                while True:
                    line = self.p.stdout.readline()
                    if not line:
                        return
                    if line.startswith("@@ORACLE "):
                        ans = json.loads(line[len("@@ORACLE "):])
                        if ans.get("id") == rid:
                            result["ans"] = ans
                            return
            except Exception as e:  # noqa: BLE001
                result["err"] = repr(e)
        t = threading.Thread(target=talk, daemon=True)
        t.start()
        t.join(self.timeout)
        if t.is_alive() or "ans" not in result:
            rc = self.p.poll()
            self.close()
            why = f"oracle worker timed out after {self.timeout} s" if rc is None else f"oracle worker died (exit {rc})"
            return {"checker": why, "ort": why, "oracle_failed": True}
        return result["ans"]

    def close(self):
        if self.p is not None:
            if self.p.poll() is None:
                try:
                    os.killpg(self.p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.p.wait()
            self.p = None


# ============================================================================ mutant generation

@dataclass
class Mutant:
    mid: str
    kind: str
    seed_model: str
    note: str
    expect: str
    model_bytes: bytes
    files: dict
    outside: dict
    check_nodes: dict
    skipped: str | None = None


def parse_id(mid):
    parts = mid.split(".")
    if len(parts) != 3 or parts[0] not in KINDS or parts[1] not in SEEDS or not parts[2].isdigit():
        raise ValueError(f"bad mutant id '{mid}': expected KIND.SEED.N, e.g. dangling_input.cnn.3")
    return parts[0], parts[1], int(parts[2])


def generate(seed: int, mid: str) -> Mutant:
    kname, sname, _ = parse_id(mid)
    K = KINDS[kname]
    rng = random.Random(f"nn-perf-fuzz/{seed}/{mid}")
    model, files = get_seed(sname)
    ctx = Ctx(rng=rng, model=model, seed_name=sname, files=files, expect=K.expect)
    try:
        if K.byte_level:
            ctx.model_bytes = model.SerializeToString()
            note = K.fn(ctx)
        else:
            note = K.fn(ctx)
            b = ctx.model_bytes if ctx.model_bytes is not None else ctx.model.SerializeToString()
            for ph, rep in ctx.raw_replace:
                assert b.count(ph) >= 1, ph
                b = b.replace(ph, rep)
            ctx.model_bytes = b
    except NotApplicable as e:
        return Mutant(mid, kname, sname, f"not applicable: {e}", "skip", b"", {}, {}, {}, skipped=str(e))
    return Mutant(mid, kname, sname, note, ctx.expect, ctx.model_bytes, ctx.files, ctx.outside, ctx.check_nodes)


def plan(seed, count, kinds):
    """The first `count` mutant ids: kinds round-robin, seeds round-robin within a kind."""
    ids = []
    for i in range(count):
        k = kinds[i % len(kinds)]
        j = i // len(kinds)
        seeds = KINDS[k].seeds
        ids.append(f"{k}.{seeds[j % len(seeds)]}.{j}")
    return ids


def write_mutant(m: Mutant, root: Path) -> Path:
    """root/model/<stem>.onnx (+ its extra files), root/<outside files>; returns the model path."""
    mdir = root / "model"
    mdir.mkdir(parents=True, exist_ok=True)
    stem = "fz_" + re.sub(r"[^A-Za-z0-9]+", "_", m.mid)
    path = mdir / f"{stem}.onnx"
    path.write_bytes(m.model_bytes)
    for name, content in m.files.items():
        if isinstance(content, Symlink):
            os.symlink(content.target, mdir / name)
        else:
            (mdir / name).write_bytes(content)
    for name, content in m.outside.items():
        (root / name).write_bytes(content)
    return path


# ============================================================================ running and classifying

def _limited(cmd, mem_bytes):
    """cmd under an address-space limit (so that a stage allocating a 2^40-element input fails, not the host)."""
    if not mem_bytes:
        return cmd
    return [sys.executable, "-c",
            "import os, resource, sys; resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1]))); "
            "os.execv(sys.argv[2], sys.argv[2:])", str(mem_bytes), *cmd]


def snapshot(root: Path, skip=()):
    out = {}
    if not root.exists():
        return out
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel = os.path.relpath(dirpath, root)
        if rel != "." and rel.split(os.sep)[0] in skip:
            dirnames[:] = []
            continue
        dirnames[:] = [d for d in dirnames if not (rel == "." and d in skip)]
        for f in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = os.path.join(dirpath, f)
            try:
                st = os.lstat(p)
                out[os.path.normpath(os.path.join(rel, f))] = (st.st_size, st.st_mtime_ns)
            except OSError:
                pass
    return out


def _nonempty_lines(s):
    return [ln for ln in s.splitlines() if ln.strip()]


def crash_signature(stderr):
    """(exception line, innermost frame in the repo) of a traceback, for the report and deduplication."""
    lines = stderr.splitlines()
    exc, frame = None, None
    for k, ln in enumerate(lines):
        m = re.match(r'\s*File "([^"]+)", line (\d+), in (\S+)', ln)
        if m and str(REPO) in m.group(1) and "/.venv/" not in m.group(1):
            frame = f"{os.path.relpath(m.group(1), REPO)}:{m.group(2)} in {m.group(3)}"
    tb_ends = [k for k, ln in enumerate(lines) if ln and not ln.startswith((" ", "Traceback", "During handling", "The above"))]
    for k in tb_ends:
        if not lines[k].startswith("internal error") and ("Error" in lines[k] or "Exception" in lines[k] or ":" in lines[k]):
            exc = lines[k].strip()
            if "Traceback (most recent call last)" in "\n".join(lines[:k]):
                break
    return exc or (lines[-1].strip() if lines else ""), frame


def _num(cell):
    """float of a CSV cell; None for empty; raises ValueError for junk."""
    if cell == "":
        return None
    return float(cell)


def _bool(cell):
    """A CSV boolean cell (True/true/1, False/false/0); None for anything else."""
    c = str(cell).strip().lower()
    return True if c in ("true", "1") else False if c in ("false", "0") else None


def _model_names(model):
    if model is None:
        return None
    return [n.name for n in model.graph.node]


def check_names(csv_names, model_names, what):
    """Node ids in a CSV vs the model's nodes: one row per node, unique, the model's own (unique, non-empty,
    text) names verbatim, no Python bytes repr."""
    probs = []
    if model_names is None:
        return probs
    if len(csv_names) != len(model_names):
        probs.append(f"{what}: {len(csv_names)} rows for {len(model_names)} nodes")
    dup = [n for n, c in Counter(csv_names).items() if c > 1]
    if dup:
        probs.append(f"{what}: duplicate node ids {dup[:3]}")
    if any(n == "" for n in csv_names):
        probs.append(f"{what}: an empty node id")
    counts = Counter(model_names)
    have = set(csv_names)
    lost = [n for n in model_names if isinstance(n, str) and n and counts[n] == 1 and n not in have]
    if lost:
        probs.append(f"{what}: model node names missing or altered: {lost[:4]!r}")
    if any(not isinstance(n, str) for n in model_names):
        reprs = [n for n in csv_names if re.match(r"^b['\"]", n)]
        if reprs:
            probs.append(f"{what}: a node id is a Python bytes repr ({reprs[0]!r})")
    return probs


def _read_csv(path):
    import pandas as pd
    return pd.read_csv(path, dtype=str, keep_default_na=False)


def check_02(rdir, model, mutant):
    probs = []
    try:
        df = _read_csv(rdir / "ops_metrics.csv")
    except Exception as e:  # noqa: BLE001
        return [f"ops_metrics.csv unreadable: {type(e).__name__}: {str(e)[:100]}"], None
    need = ["node", "flops", "macs", "act_in_bytes", "act_out_bytes", "weight_bytes", "cost_known"]
    miss = [c for c in need if c not in df.columns]
    if miss:
        return [f"ops_metrics.csv lacks columns {miss}"], None
    has_sizes = "bytes_known" in df.columns
    for r in df.itertuples(index=False):
        known = _bool(r.cost_known)
        sized = _bool(r.bytes_known) if has_sizes else known
        if known is None:
            probs.append(f"row '{r.node}': cost_known = {r.cost_known!r} is not a boolean")
            continue
        for col in ("flops", "macs", "act_in_bytes", "act_out_bytes", "weight_bytes"):
            cell = getattr(r, col)
            try:
                v = _num(cell)
            except ValueError:
                probs.append(f"row '{r.node}': {col} = {cell!r} is not a number")
                continue
            if v is None or math.isnan(v):
                flag, flag_name = (sized, "bytes_known") if col.endswith("_bytes") else (known, "cost_known")
                if flag:
                    probs.append(f"row '{r.node}': {col} empty/NaN but {flag_name}=True")
                continue
            if math.isinf(v) or v < 0 or v > TWO63:
                probs.append(f"row '{r.node}': {col} = {cell}")
            elif col in ("flops", "macs") and not known:
                probs.append(f"row '{r.node}': {col} = {cell} but cost_known=False (unknown cost not left empty)")
        if len(probs) > 8:
            break
    names = list(df["node"])
    probs += check_names(names, _model_names(model), "ops_metrics.csv")
    if "topo_idx" in df.columns:
        try:
            idx = sorted(int(x) for x in df["topo_idx"])
            if idx != list(range(len(df))):
                probs.append("topo_idx is not 0..n-1")
        except ValueError:
            probs.append("topo_idx not integers")
    want = mutant.check_nodes.get("unknown_cost")
    if want is not None and want in set(names):
        row = df[df["node"] == want].iloc[0]
        if _bool(row["cost_known"]) is not False or row["flops"] != "":
            probs.append(f"unknown op '{want}' not flagged (cost_known={row['cost_known']}, flops={row['flops']!r})")
    try:
        meta = json.loads((rdir / "metrics_meta.json").read_text())
        for k in ("total_macs", "total_flops", "conv_gemm_matmul_macs", "weight_bytes", "act_out_bytes"):
            v = meta.get(k)
            if isinstance(v, (int, float)) and (math.isnan(v) or math.isinf(v) or v < 0 or v > TWO63):
                probs.append(f"metrics_meta.json {k} = {v}")
    except Exception as e:  # noqa: BLE001
        probs.append(f"metrics_meta.json unreadable: {type(e).__name__}")
    return probs, names


def _table(path):
    """(DataFrame, []) or (None, [the problem reading it])."""
    try:
        return _read_csv(path), []
    except Exception as e:  # noqa: BLE001
        return None, [f"{path.name} unreadable: {type(e).__name__}: {str(e)[:100]}"]


def check_07(rdir, names02):
    df, probs = _table(rdir / "boundaries.csv")
    if df is None:
        return probs
    cols = [c for c in df.columns if c.endswith(("_bytes", "_us", "_j")) or c.startswith("flops_") or c == "n_cut_tensors"]
    for r in df.to_dict("records"):
        for c in cols:
            cell = r[c]
            try:
                v = _num(cell)
            except ValueError:
                probs.append(f"boundary {r.get('boundary')}: {c} = {cell!r} is not a number")
                continue
            if v is None:
                continue
            if math.isnan(v):
                if c == "comm_bytes" and _bool(r.get("cut_unknown_size", "")) is False:
                    probs.append(f"boundary {r.get('boundary')}: comm_bytes NaN but cut_unknown_size=False")
                continue
            if math.isinf(v) or v < 0 or v > TWO63:
                probs.append(f"boundary {r.get('boundary')}: {c} = {cell}")
        if len(probs) > 8:
            break
    if names02 is not None and "after_node" in df.columns:
        stray = sorted(set(df["after_node"]) - set(names02))
        if stray:
            probs.append(f"boundaries.csv after_node not in ops_metrics.csv: {stray[:3]!r}")
        if len(df) != max(len(names02) - 1, 0):
            probs.append(f"boundaries.csv has {len(df)} rows for {len(names02)} nodes")
    return probs


def check_01(rdir, model):
    df, probs = _table(rdir / "ops_latency.csv")
    if df is None:
        return probs
    for r in df.to_dict("records"):
        for c in ("latency_us", "p10_us", "p90_us"):
            if c not in r:
                continue
            try:
                v = _num(r[c])
            except ValueError:
                probs.append(f"row '{r.get('node')}': {c} = {r[c]!r}")
                continue
            if v is None or math.isnan(v):
                if r.get("attribution") == "kernel":
                    probs.append(f"row '{r.get('node')}': {c} empty but attribution=kernel")
                continue
            if math.isinf(v) or v < 0 or v > TWO63:
                probs.append(f"row '{r.get('node')}': {c} = {r[c]}")
    if "node" in df.columns:
        probs += check_names(list(df["node"]), _model_names(model), "ops_latency.csv")
    return probs


@dataclass
class RunResult:
    stage: str
    rc: int | None
    secs: float
    classes: list
    reasons: dict
    stderr_first: str
    cmd: list
    stdout: str = ""
    stderr: str = ""
    notes: list = field(default_factory=list)
    confirmed: bool | None = None


def run_stage(stage, model_path, rdir, run_root, opts, mutant, model, invalid, ort_ok, names02=None, script=None):
    cwd = run_root / f"cwd{stage}"
    tmpd = run_root / f"tmp{stage}"
    for d in (cwd, tmpd):
        if d.exists():
            shutil.rmtree(d)
        d.mkdir()
    cmd = [sys.executable, str(REPO / (script or STAGES[stage])), "--model", str(model_path), "--results", str(rdir)]
    if stage == "01":
        cmd += ["--runs", "1", "--warmup", "0"]
    env = dict(os.environ, TMPDIR=str(tmpd), TEMP=str(tmpd), TMP=str(tmpd))
    before_model = snapshot(run_root, skip={f"cwd{stage}", f"tmp{stage}", "res", "res01"} | {p.name for p in run_root.iterdir() if p.name.startswith(("cwd", "tmp"))})
    before_res = snapshot(rdir)
    repo_res = REPO / "results" / model_path.stem
    repo_before = snapshot(repo_res)
    repo_root_before = {p.name for p in REPO.iterdir()}
    t0 = time.time()
    p = subprocess.Popen(_limited(cmd, opts.mem_bytes), cwd=cwd, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, start_new_session=True)
    timed_out = False
    try:
        out, err = p.communicate(timeout=opts.timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = p.communicate()
    secs = time.time() - t0
    rc = None if timed_out else p.returncode
    out = out.decode("utf-8", "replace")
    err = err.decode("utf-8", "replace")
    lines = _nonempty_lines(err)
    classes, reasons = [], {}

    def add(c, why):
        if c not in classes:
            classes.append(c)
            reasons[c] = why
    first = lines[0][:300] if lines else ""
    if timed_out:
        add("hang", f"no exit after {opts.timeout:.0f} s (killed)")
    elif rc not in (0, 2) or "Traceback (most recent call last)" in err:
        exc, frame = crash_signature(err)
        sig = f"signal {-rc} ({signal.Signals(-rc).name})" if rc is not None and rc < 0 else f"exit {rc}"
        add("crash", f"{sig}: {exc[:200]}" + (f" @ {frame}" if frame else ""))
        first = exc[:300] or first
    elif rc == 2:
        if len(lines) == 1 and lines[0].startswith("error: "):
            add("clean_refusal", lines[0][:300])
        else:
            add("multi_line_error", "exit 2 with an empty stderr" if not lines else
                f"exit 2 with {len(lines)} non-empty stderr lines; first: {first[:200]!r}"
                + (f"; last: {lines[-1][:150]!r}" if len(lines) > 1 else ""))
        if mutant.expect == "valid" and (stage != "01" or ort_ok):
            add("valid_refused", f"exit 2 on a valid mutant: {(lines[-1] if lines else '')[:200]}")
    else:
        add("ok", "exit 0")
        noisy = [ln for ln in lines if WARNING_RE.search(ln)]
        if noisy:
            add("noisy_ok", f"exit 0 with library output on stderr: {noisy[0][:200]!r}")
        if invalid:
            add("invalid_accepted", f"exit 0 on an invalid mutant ({invalid[0][:200]})")
        missing = [a for a in ARTIFACTS.get(stage, []) if not (rdir / a).exists()]
        if missing:
            add("half_written", f"exit 0 but {missing} missing")
        else:
            probs = []
            if stage == "02":
                probs, names02 = check_02(rdir, model, mutant)
            elif stage == "07":
                probs = check_07(rdir, names02)
            elif stage == "01":
                probs = check_01(rdir, model)
            if probs:
                add("bad_figure", "; ".join(probs[:3])[:400])
    # what the stage left behind
    after_res = snapshot(rdir)
    new_res = sorted(k for k, v in after_res.items() if before_res.get(k) != v)
    temps = sorted(k for k in after_res if os.path.basename(k).startswith(".") or k.endswith(".tmp"))
    if rc not in (0, None) and new_res:
        add("half_written", f"exit {rc} but left/changed in the results folder: {new_res[:5]}")
    elif temps:
        add("half_written", f"temp files left in the results folder: {temps[:5]}")
    stray = []
    stray += [f"cwd/{k}" for k in sorted(snapshot(cwd))]
    tmp_left = sorted(snapshot(tmpd))
    notes = [f"TMPDIR/{k} (ONNX Runtime telemetry)" for k in tmp_left if k in ORT_TELEMETRY_FILES]
    stray += [f"TMPDIR/{k}" for k in tmp_left if k not in ORT_TELEMETRY_FILES]
    after_model = snapshot(run_root, skip={f"cwd{stage}", f"tmp{stage}", "res", "res01"} | {p.name for p in run_root.iterdir() if p.name.startswith(("cwd", "tmp"))})
    stray += [f"model folder: {k} ({'new' if k not in before_model else 'changed'})"
              for k, v in sorted(after_model.items()) if before_model.get(k) != v]
    stray += [f"model folder: {k} (deleted)" for k in sorted(set(before_model) - set(after_model))]
    repo_after = snapshot(repo_res)
    if repo_after != repo_before:
        stray.append(f"{os.path.relpath(repo_res, REPO)}/ ({len(repo_after)} files)")
    new_root = sorted({p.name for p in REPO.iterdir()} - repo_root_before)
    new_root = [n for n in new_root if n.startswith("sym_shape_infer_temp") or re.fullmatch(r"[0-9a-f-]{32,36}\.data", n)
                or n.endswith((".onnx", ".data", ".json"))]
    stray += [f"repo root: {n}" for n in new_root]
    if stray:
        add("stray_files", "wrote outside the results folder: " + ", ".join(stray[:5]))
    if not classes:
        add("ok", "exit 0")
    shutil.rmtree(cwd, ignore_errors=True)
    shutil.rmtree(tmpd, ignore_errors=True)
    return RunResult(stage, rc, secs, classes, reasons, first, cmd, out, err, notes), names02


def process(mid, opts, oracle, run01, work_root):
    m = generate(opts.seed, mid)
    rec = {"id": mid, "kind": m.kind, "seed_model": m.seed_model, "note": m.note, "expect": m.expect, "stages": {}}
    if m.skipped:
        rec["skipped"] = m.skipped
        return rec
    run_root = work_root / re.sub(r"[^A-Za-z0-9_.-]+", "_", mid)
    if run_root.exists():
        shutil.rmtree(run_root)
    run_root.mkdir(parents=True)
    try:
        model_path = write_mutant(m, run_root)
        if opts.save_dir:
            dest = Path(opts.save_dir) / run_root.name
            if dest.exists():
                shutil.rmtree(dest)
            write_mutant(m, dest)
        model, probs = structural_problems(model_path)
        verdict = oracle.check(model_path) if model is not None else {"checker": "unparseable", "ort": "unparseable"}
        rec.update({"validator": probs, "checker": verdict.get("checker"), "ort": verdict.get("ort"),
                    "bytes": len(m.model_bytes)})
        if m.expect == "invalid":
            invalid = probs or [f"invalid by construction: {m.note}"]
            if not probs:
                rec["oracle_note"] = "constructed invalid but the validator found nothing"
        elif m.expect == "valid":
            invalid = []
            if probs:
                rec["oracle_note"] = f"constructed valid but the validator says: {probs[0]}"
        elif m.expect == "checker":
            invalid = [f"checker: {verdict['checker']}"] if verdict.get("checker") and not verdict.get("oracle_failed") else []
            invalid = probs or invalid
        else:  # either / auto
            invalid = probs
        rec["invalid"] = bool(invalid)
        rec["invalid_reason"] = invalid[0] if invalid else None
        ort_ok = verdict.get("ort") is None
        if opts.save_dir:
            (Path(opts.save_dir) / run_root.name / "mutant.json").write_text(
                json.dumps({k: v for k, v in rec.items() if k != "stages"}, indent=2, default=str) + "\n")
        if opts.dry_run:
            return rec
        r02, names02 = run_stage("02", model_path, run_root / "res", run_root, opts, m, model, invalid, ort_ok)
        rec["stages"]["02"] = r02
        if r02.rc == 0:
            args = (model_path, run_root / "res", run_root, opts, m, model, invalid, ort_ok)
            r07, _ = run_stage("07", *args, names02)
            # the pipeline evolves: when 07 names another prerequisite stage ("run 03_... first"), run that
            # one too (classified under its own number) and try 07 again
            for _ in range(3):
                hit = PREREQ_RE.search(r07.stderr) if r07.rc == 2 else None
                if not hit or not (REPO / hit.group(1)).exists() or hit.group(1)[:2] in rec["stages"]:
                    break
                key = hit.group(1)[:2]
                rp, _ = run_stage(key, *args, script=hit.group(1))
                rec["stages"][key] = rp
                rec.setdefault("prereqs", []).append(hit.group(1))
                if rp.rc != 0:
                    r07 = None  # its refusal only repeats that the prerequisite failed (recorded above)
                    break
                r07, _ = run_stage("07", *args, names02)
            if r07 is not None:
                rec["stages"]["07"] = r07
        if run01:
            r01, _ = run_stage("01", model_path, run_root / "res01", run_root, opts, m, model, invalid, ort_ok)
            rec["stages"]["01"] = r01
    finally:
        if not opts.keep:
            shutil.rmtree(run_root, ignore_errors=True)
    return rec


# ============================================================================ report

def _norm(s):
    s = re.sub(r"ghost_\d+", "ghost_N", s)
    s = re.sub(r"/tmp/\S+", "<tmp>", s)
    s = re.sub(r"fz_[A-Za-z0-9_]+", "<model>", s)
    s = re.sub(r"'[^']*'", "'…'", s)
    s = re.sub(r"\d+", "N", s)
    return s[:160]


def signature(stage, cls, rr: RunResult, rec):
    """Deduplication key: the class and the normalised reason, across stages (a downstream stage that accepts
    what 02 accepted, or a crash in shared lib code, is one root cause)."""
    why = rr.reasons.get(cls, "")
    if cls == "invalid_accepted":  # by the validator's problem code (arity, attr_type, init_data ...)
        return f"invalid_accepted {(rec.get('invalid_reason') or '').split(':')[0]}"
    if cls == "bad_figure":
        return "bad_figure " + ";".join(sorted({_norm(re.sub(r"^row '[^']*': |^boundary \S+: ", "", p))
                                               for p in why.split("; ")}))
    if cls == "crash":
        return f"crash {_norm(why)}"
    return f"{cls} {_norm(why)}"


def report(recs, opts, elapsed, kinds):
    out = []
    runs = [(rec, st, rr) for rec in recs for st, rr in rec["stages"].items()]
    per_stage = defaultdict(Counter)
    per_kind = defaultdict(Counter)
    examples = defaultdict(list)
    distinct = {}
    for rec, st, rr in runs:
        for c in rr.classes:
            per_stage[st][c] += 1
            per_kind[rec["kind"]][c] += 1
            if c in FAILURE_CLASSES:
                examples[(st, c)].append((rec["id"], rr.reasons[c], rr.rc))
                sig = signature(st, c, rr, rec)
                d = distinct.setdefault(sig, {"count": 0, "ids": [], "kinds": Counter(), "stages": Counter(),
                                              "class": c, "reason": rr.reasons[c], "rc": rr.rc,
                                              "first": rr.stderr_first})
                d["count"] += 1
                d["stages"][st] += 1
                d["kinds"][rec["kind"]] += 1
                if len(d["ids"]) < 3 and rec["id"] not in d["ids"]:
                    d["ids"].append(rec["id"])
    skipped = [r for r in recs if r.get("skipped")]
    out.append(f"nn-perf fuzz: seed {opts.seed}, {len(recs)} mutants ({len(kinds)} kinds, {len(skipped)} not applicable), "
               f"{len(runs)} stage runs, {elapsed:.0f} s")
    inval = sum(1 for r in recs if r.get("invalid"))
    out.append(f"mutants structurally invalid: {inval}; valid by construction: "
               f"{sum(1 for r in recs if r['expect'] == 'valid')}; checker refused {sum(1 for r in recs if r.get('checker'))}, "
               f"ORT refused {sum(1 for r in recs if r.get('ort'))}")
    tele = sum(1 for _, _, rr in runs if rr.notes)
    if tele:
        out.append(f"note: {tele} of {len(runs)} runs left ONNX Runtime's telemetry file .ses in their fresh TMPDIR "
                   "(onnxruntime writes it on import, even with disable_telemetry_events(); normally /tmp/.ses): "
                   "not counted as stray_files")
    prq = Counter(p for r in recs for p in r.get("prereqs", []))
    if prq:
        out.append("prerequisite stages run because 07 asked for them: " + ", ".join(f"{k} x{v}" for k, v in prq.items()))
    notes = [r for r in recs if r.get("oracle_note")]
    if notes:
        out.append(f"oracle disagreements ({len(notes)}): " + "; ".join(f"{r['id']}: {r['oracle_note'][:100]}" for r in notes[:5]))
    out.append("")
    cls_cols = [c for c in ALL_CLASSES if any(per_stage[s][c] for s in per_stage)]
    out.append("per stage (a run counts in every class it falls in):")
    out.append(f"  {'stage':<6}{'runs':>6}  " + "  ".join(f"{c:>{len(c)}}" for c in cls_cols))
    for st in sorted(per_stage):
        n = sum(1 for _, s, _ in runs if s == st)
        out.append(f"  {st:<6}{n:>6}  " + "  ".join(f"{per_stage[st][c]:>{len(c)}}" for c in cls_cols))
    out.append("")
    out.append("per kind (all stages):")
    for k in kinds:
        c = per_kind.get(k)
        if not c:
            continue
        out.append(f"  {k:<24} " + ", ".join(f"{cl} {c[cl]}" for cl in ALL_CLASSES if c[cl]))
    out.append("")
    fails = [(k, v) for k, v in examples.items() if v]
    if fails:
        out.append("failures, first ids per stage and class:")
        for (st, c), ex in sorted(fails, key=lambda kv: (FAILURE_CLASSES.index(kv[0][1]), kv[0][0])):
            out.append(f"  [{st} {c}] {len(ex)} runs")
            for mid, why, rc in ex[:opts.examples]:
                out.append(f"      {mid}  (exit {rc}) {why[:220]}")
        out.append("")
        out.append(f"distinct failures ({len(distinct)} signatures; repro: {sys.executable} {os.path.relpath(__file__, os.getcwd())} "
                   f"--seed {opts.seed} --only ID --save-dir /tmp/fz_repro -v):")
        for sig, d in sorted(distinct.items(), key=lambda kv: (FAILURE_CLASSES.index(kv[1]["class"]), -kv[1]["count"])):
            ks = ", ".join(f"{k} {n}" for k, n in d["kinds"].most_common(4))
            sts = ",".join(f"{k}" for k in sorted(d["stages"]))
            out.append(f"  - [{d['class']} in {sts}] x{d['count']} runs ({ks}) e.g. {', '.join(d['ids'][:2])}")
            why = d["reason"] if re.match(r"(exit|no exit|signal)", d["reason"]) else f"exit {d['rc']}: {d['reason']}"
            out.append(f"      {why[:280]}")
    else:
        out.append("no failures")
    return "\n".join(out), distinct


def to_json(rec):
    r = dict(rec)
    r["stages"] = {st: {"rc": rr.rc, "secs": round(rr.secs, 2), "classes": rr.classes, "reasons": rr.reasons,
                        "stderr_first": rr.stderr_first, "stderr_tail": rr.stderr[-2000:], "notes": rr.notes,
                        "confirmed": rr.confirmed}
                   for st, rr in rec["stages"].items()}
    return r


# ============================================================================ main

def main(argv=None):
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--_oracle":
        oracle_worker()
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=0, help="fuzzing seed: with a mutant id, fixes the mutant (default 0)")
    p.add_argument("--count", type=int, default=1000, help="mutants through 02 (and 07 when 02 succeeds) (default 1000)")
    p.add_argument("--stage01-count", type=int, default=100,
                   help="of those, how many also go through 01_profile_onnx.py --runs 1 --warmup 0 (default 100)")
    p.add_argument("--jobs", type=int, default=1, help="mutants in parallel (default 1; the machine has 2 cores)")
    p.add_argument("--kinds", help="comma-separated KIND names or globs (e.g. 'bytes_*,dangling_input')")
    p.add_argument("--only", help="comma-separated mutant ids (KIND.SEED.N) to regenerate and run (01 included)")
    p.add_argument("--save-dir", metavar="DIR", help="save every mutant run (model folder + mutant.json) under DIR/<id>/")
    p.add_argument("--json", metavar="OUT", help="write every run's record and the summary as JSON")
    p.add_argument("--timeout", type=float, default=120, help="seconds before a stage run counts as a hang (default 120; the last-resort ORT run of stage 02 stops itself at 60)")
    p.add_argument("--oracle-timeout", type=float, default=60, help="seconds for the checker + ORT double check")
    p.add_argument("--mem-gb", type=float, default=8, help="address-space limit per stage run in GiB, 0 = none (default 8)")
    p.add_argument("--progress-every", type=int, default=20, help="progress line on stderr every N mutants (default 20)")
    p.add_argument("--examples", type=int, default=4, help="ids listed per failure class (default 4)")
    p.add_argument("--keep", action="store_true", help="keep the work folder (mutants, results) for inspection")
    p.add_argument("--no-confirm", dest="confirm", action="store_false",
                   help="do not re-run crashing mutants to check that the crash reproduces (default: re-run up to 20)")
    p.add_argument("--work-dir", help="work folder (default: a fresh one under /tmp)")
    p.add_argument("--list-kinds", action="store_true", help="list the mutation kinds and exit")
    p.add_argument("--dry-run", action="store_true",
                   help="generate and judge the mutants (validator, checker, ORT) without running any stage")
    p.add_argument("-v", "--verbose", action="store_true", help="print each mutant, each stage command, exit code and stderr")
    p.add_argument("--record", action="store_true", help="also write the summary to its section of bench/RESULTS.md")
    opts = p.parse_args(argv)
    if opts.list_kinds:
        for k in KINDS.values():
            print(f"{k.name:<24} {k.expect:<8} seeds={','.join(k.seeds) if k.seeds != ALL_SEEDS else 'all':<8} {k.doc}")
        return 0
    opts.mem_bytes = int(opts.mem_gb * 2 ** 30) if opts.mem_gb > 0 else 0
    if opts.mem_bytes:  # the fuzzer itself too: a runaway mutant builder must fail here, not take the host down
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (opts.mem_bytes, resource.getrlimit(resource.RLIMIT_AS)[1]))
    kinds = list(KINDS)
    if opts.kinds:
        pats = [s.strip() for s in opts.kinds.split(",") if s.strip()]
        kinds = [k for k in KINDS if any(fnmatch.fnmatchcase(k, pt) for pt in pats)]
        if not kinds:
            p.error(f"--kinds {opts.kinds} matches none of: {', '.join(KINDS)}")
    if opts.only:
        ids = [s.strip() for s in opts.only.split(",") if s.strip()]
        for mid in ids:
            try:
                parse_id(mid)
            except ValueError as e:
                p.error(str(e))
        run01 = set(ids) if opts.stage01_count > 0 else set()
    else:
        ids = plan(opts.seed, opts.count, kinds)
        n01 = min(opts.stage01_count, len(ids))
        run01 = set(random.Random(f"stage01/{opts.seed}").sample(ids, n01)) if n01 else set()
    work_root = Path(opts.work_dir or tempfile.mkdtemp(prefix="nnperf_fuzz_"))
    work_root.mkdir(parents=True, exist_ok=True)
    if opts.save_dir:
        Path(opts.save_dir).mkdir(parents=True, exist_ok=True)
    for s in SEEDS:  # build the seeds once, before the threads start
        get_seed(s)
    local = threading.local()
    oracles = []
    lock = threading.Lock()

    def task(mid):
        if not hasattr(local, "oracle"):
            local.oracle = Oracle(opts.oracle_timeout, opts.mem_bytes)
            with lock:
                oracles.append(local.oracle)
        try:
            return process(mid, opts, local.oracle, mid in run01, work_root)
        except Exception:  # noqa: BLE001 - a fuzzer bug must not hide the other mutants' results
            return {"id": mid, "kind": mid.split(".")[0], "seed_model": mid.split(".")[1], "note": "",
                    "expect": "?", "stages": {}, "skipped": "fuzzer error: " + traceback.format_exc(limit=3)}

    t0 = time.time()
    tree_before = tree_fingerprint()
    recs = []
    done = 0
    fail_counts = Counter()
    try:
        with ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as ex:
            futs = {ex.submit(task, mid): mid for mid in ids}
            for f in as_completed(futs):
                rec = f.result()
                recs.append(rec)
                done += 1
                for st, rr in rec["stages"].items():
                    for c in rr.classes:
                        if c in FAILURE_CLASSES:
                            fail_counts[c] += 1
                if opts.verbose:
                    print_verbose(rec)
                if done % max(1, opts.progress_every) == 0 or done == len(ids):
                    print(f"[fuzz] {done}/{len(ids)} mutants, {time.time() - t0:.0f} s; failures: "
                          + (", ".join(f"{c} {n}" for c, n in fail_counts.most_common()) or "none"),
                          file=sys.stderr, flush=True)
        if opts.confirm:
            confirm_crashes(recs, opts, run01, work_root)
    finally:
        for o in oracles:
            o.close()
        if not opts.keep and not opts.work_dir:
            shutil.rmtree(work_root, ignore_errors=True)
    tree_after = tree_fingerprint()
    changed = sorted(k for k in set(tree_before) | set(tree_after) if tree_before.get(k) != tree_after.get(k))
    order = {mid: i for i, mid in enumerate(ids)}
    recs.sort(key=lambda r: order[r["id"]])
    text, distinct = report(recs, opts, time.time() - t0, kinds)
    print(text)
    if changed:
        print(f"\nWARNING: {len(changed)} stage/lib files changed while the fuzzer ran ({', '.join(changed[:6])}"
              f"{' ...' if len(changed) > 6 else ''}): runs may mix code versions; re-run failures with --only")
    errs = [r for r in recs if str(r.get("skipped", "")).startswith("fuzzer error")]
    if errs:
        print(f"\nfuzzer errors ({len(errs)}): " + "; ".join(f"{r['id']}: {r['skipped'].splitlines()[-1]}" for r in errs[:5]))
    if opts.keep:
        print(f"work folder kept: {work_root}")
    if opts.json:
        Path(opts.json).write_text(json.dumps({
            "seed": opts.seed, "count": len(ids), "kinds": kinds, "elapsed_s": round(time.time() - t0, 1),
            "distinct_failures": distinct, "runs": [to_json(r) for r in recs]}, indent=1, default=str) + "\n")
    if opts.record:  # the summary as printed, with the command that regenerates it
        record("fuzz_models", "```\n" + text.rstrip("\n") + "\n```\n", command=shlex.join(["python", "bench/fuzz_models.py", *sys.argv[1:]]))
    failed = any(c in FAILURE_CLASSES for r in recs for rr in r["stages"].values() for c in rr.classes)
    return 1 if failed or errs else 0


def tree_fingerprint():
    """(mtime, size) of the stage scripts and lib/: the tree is edited concurrently, say so when it changed."""
    out = {}
    for pth in list(REPO.glob("[0-9][0-9]_*.py")) + list((REPO / "lib").glob("*.py")):
        try:
            st = pth.stat()
            out[str(pth.relative_to(REPO))] = (st.st_mtime_ns, st.st_size)
        except OSError:
            pass
    return out


def confirm_crashes(recs, opts, run01, work_root, limit=20):
    """Re-run each crashing mutant once: a crash that does not come back (the lib was mid-edit, say an
    ImportError) is marked '[not reproduced on re-run]'."""
    todo = [r for r in recs if any("crash" in rr.classes for rr in r["stages"].values())][:limit]
    if not todo:
        return
    print(f"[fuzz] re-running {len(todo)} crashing mutants to confirm", file=sys.stderr, flush=True)
    oracle = Oracle(opts.oracle_timeout, opts.mem_bytes)
    try:
        for rec in todo:
            again = process(rec["id"], opts, oracle, rec["id"] in run01, work_root)
            for st, rr in rec["stages"].items():
                if "crash" not in rr.classes:
                    continue
                rr2 = again["stages"].get(st)
                same = rr2 is not None and "crash" in rr2.classes and \
                    crash_signature(rr2.stderr)[0] == crash_signature(rr.stderr)[0]
                rr.confirmed = same
                if not same:
                    rr.reasons["crash"] += " [not reproduced on re-run: " + \
                        (f"now {', '.join(rr2.classes)}" if rr2 is not None else "stage not reached") + "]"
    finally:
        oracle.close()


def print_verbose(rec):
    print(f"== {rec['id']}: {rec['note']}")
    if rec.get("skipped"):
        print(f"   skipped: {rec['skipped']}")
        return
    if rec.get("oracle_note"):
        print(f"   ORACLE NOTE: {rec['oracle_note']}")
    print(f"   expect={rec['expect']} invalid={rec.get('invalid')} ({rec.get('invalid_reason')})")
    print(f"   validator: {rec.get('validator')[:3] if rec.get('validator') else 'no problems'}")
    print(f"   checker: {rec.get('checker') or 'ok'} | ORT: {rec.get('ort') or 'ok'}")
    for st, rr in rec["stages"].items():
        print(f"   [{st}] $ {' '.join(rr.cmd)}")
        print(f"   [{st}] exit {rr.rc} in {rr.secs:.1f} s -> {', '.join(rr.classes)}")
        for c in rr.classes:
            print(f"        {c}: {rr.reasons[c]}")
        for ln in rr.stderr.strip().splitlines()[-15:]:
            print(f"        stderr| {ln}")
        for ln in rr.stdout.strip().splitlines()[-5:]:
            print(f"        stdout| {ln}")
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main())
