"""One input spec for the whole pipeline: shape overrides > preset > workload symbolic dims > the file's own dims,
or the arrays of an --inputs-npz file (whose shapes then fix the symbolic dims). The same spec shapes every
stage (01, 02, 07, 08, 10) and feeds the stages that run the model (01, 08).

The npz may hold any subset of the graph inputs (a GRU's zero state, a pitch model's frequency bounds): those
are fed as given, the others drawn at random from the shape spec, and the meta JSON says which is which."""
from __future__ import annotations

import ast
import hashlib
import operator
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from lib.artifacts import load_yaml
from lib.errors import StageError
from lib.onnx.graph import real_inputs

MAX_INPUT_BYTES = 4 * 2**30      # random feeds bigger than this (all inputs together) are refused: a dim of 2^31 is not a workload


@dataclass
class InputSpec:
    overrides: dict[str, list[int]] = field(default_factory=dict)
    preset: str | None = None
    workload: dict = field(default_factory=dict)
    workload_path: str | None = None
    inputs_npz: str | None = None
    seed: int | None = None
    arrays: dict[str, np.ndarray] | None = None    # in-memory inputs (tests, micro-benchmarks), like an npz

    @classmethod
    def from_args(cls, a) -> "InputSpec":
        wl = load_yaml(a.workload, "workload config") if getattr(a, "workload", None) else {}
        spec = cls(parse_shape_overrides(getattr(a, "shape_override", None) or []), getattr(a, "preset", None), wl,
                   getattr(a, "workload", None), getattr(a, "inputs_npz", None), getattr(a, "seed", None))
        spec.feed_seed()        # checked where it is read, before any work
        return spec

    def explicit(self) -> bool:
        """Did the user give an input spec (else a stage after 02 inherits 02's)?"""
        return bool(self.overrides or self.preset or self.inputs_npz or self.arrays is not None)

    def inherit(self, inputs: dict) -> "InputSpec":
        """The spec stage 02 recorded (its resolved shapes, and its --inputs-npz when it still matches)."""
        npz = inputs.get("inputs_npz")
        if npz and (not Path(npz["path"]).exists()
                    or hashlib.sha256(Path(npz["path"]).read_bytes()).hexdigest() != npz["sha256"]):
            raise StageError(f"--inputs-npz {npz['path']} used by stage 02 is gone or changed: re-run 02")
        return InputSpec({k: list(v) for k, v in inputs["input_shapes"].items()}, inputs.get("preset"), self.workload,
                         self.workload_path, npz["path"] if npz else None, self.seed)

    def symbolic(self) -> dict[str, int]:
        where = self.workload_path or "the workload config"
        sections = [("symbolic_dims", self.workload.get("symbolic_dims") or {})]
        if self.preset:
            presets = self.workload.get("presets") or {}
            if not isinstance(presets, dict) or self.preset not in presets:
                raise StageError(f"unknown --preset {self.preset}: the workload file has "
                                 f"{sorted(presets) if isinstance(presets, dict) and presets else 'none'}")
            sections.append((f"presets.{self.preset}", presets[self.preset] or {}))
        dims = {}
        for name, section in sections:
            if not isinstance(section, dict):
                raise StageError(f"{where}: {name} must map dim names to integers")
            dims.update(section)
        bad = {k: v for k, v in dims.items() if isinstance(v, bool) or not isinstance(v, int) or v < 0}
        if bad:
            raise StageError(f"symbolic dim values must be integers >= 0; {where} gives "
                             + ", ".join(f"{k}={v!r}" for k, v in bad.items()))
        return dims

    def feed_seed(self) -> int:
        seed = self.seed if self.seed is not None else self.workload.get("seed", 0)
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:     # 'abc' was a traceback in 01, 1.7 cut to 1
            raise StageError(f"{self.workload_path or 'the workload config'}: seed must be an integer >= 0, not {seed!r}")
        return seed

    def npz_arrays(self) -> dict[str, np.ndarray] | None:
        if self.arrays is not None:
            return self.arrays
        if not self.inputs_npz:
            return None
        p = Path(self.inputs_npz)
        if not p.exists():
            raise StageError(f"--inputs-npz {p} not found")
        try:
            with np.load(p, allow_pickle=False) as data:
                return {k: data[k] for k in data.files}
        except ValueError as e:
            if "Object arrays" in str(e):     # np.savez of Python strings: a pickled object array
                raise StageError(f"--inputs-npz {p} holds an object array (Python strings?): save strings as a "
                                 f"unicode array, np.array(values, dtype=str), which loads without pickle") from None
            raise StageError(f"--inputs-npz {p} is not a readable .npz file (ValueError)") from None
        except Exception as e:  # noqa: BLE001
            raise StageError(f"--inputs-npz {p} is not a readable .npz file ({type(e).__name__})") from None

    def given_names(self) -> set[str]:
        """The names the npz (or in-memory arrays) holds, without reading its arrays."""
        if self.arrays is not None:
            return set(self.arrays)
        if not self.inputs_npz or not Path(self.inputs_npz).exists():
            return set()
        try:
            with np.load(self.inputs_npz, allow_pickle=False) as data:
                return set(data.files)
        except Exception:  # noqa: BLE001 - npz_arrays() says what is wrong with the file
            return set()

    def describe(self, shapes: dict[str, list[int]]) -> dict:
        """What identifies the inputs in every meta file: resolved shapes and where values came from (the
        inputs fed from the npz file, and those drawn at random with the seed)."""
        npz = None
        if self.inputs_npz:
            npz = {"path": str(self.inputs_npz), "sha256": hashlib.sha256(Path(self.inputs_npz).read_bytes()).hexdigest()}
        given = self.given_names()
        return {"input_shapes": {k: list(map(int, v)) for k, v in shapes.items()}, "preset": self.preset,
                "inputs_npz": npz, "from_file": [k for k in shapes if k in given],
                "drawn": [k for k in shapes if k not in given]}


def parse_shape_overrides(items: list[str]) -> dict[str, list[int]]:
    """'input=1x3x224x224 mask=1x128' (possibly repeated) -> {name: dims}."""
    out: dict[str, list[int]] = {}
    for item in items or []:
        if re.search(r"=\d+,\d", item):       # 'input=1,3,224,224': the commas read as pair separators
            raise StageError(f"bad --shape-override '{item}': separate the dims with x (input=1x3x224x224); commas "
                             f"or spaces separate NAME=DIMS pairs")
        for tok in item.replace(",", " ").split():
            name, sep, dims = tok.rpartition("=")
            if not sep or not name or not re.fullmatch(r"\d+(x\d+)*", dims):
                raise StageError(f"bad --shape-override '{tok}': expected NAME=DIMS like input=1x3x224x224")
            out[name] = [int(d) for d in dims.split("x")]
    return out


_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
        ast.Div: operator.floordiv, ast.Mod: operator.mod}


def eval_dim(expr: str, dims: dict[str, int]) -> int | None:
    """A dim_param as a value: a name ('batch') or an expression of names ('past_sequence_length +
    sequence_length', as optimum writes them); None when a name has no value."""
    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return node.value
        if isinstance(node, ast.Name):
            return dims.get(node.id)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            a, b = ev(node.left), ev(node.right)
            return None if a is None or b is None else _OPS[type(node.op)](a, b)
        raise ValueError
    if expr in dims:
        return int(dims[expr])
    try:
        v = ev(ast.parse(expr, mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError):
        return None
    return None if v is None else int(v)


def _named_dims(inputs: list[onnx.ValueInfoProto], given: dict[str, list[int]], symbolic: dict[str, int]) -> dict:
    """Dims named by a given input's shape fix that name for the others (npz batch 3); one name given two values
    is refused here (ids=1x64 mask=1x32 sharing 'seq' ran into a failure far from its cause)."""
    fixed_by: dict[str, str] = {}
    for inp in inputs:
        if inp.name in given and inp.type.tensor_type.HasField("shape"):
            for d, v in zip(inp.type.tensor_type.shape.dim, given[inp.name]):
                if d.HasField("dim_param") and d.dim_param and re.fullmatch(r"\w+", d.dim_param):
                    name = d.dim_param
                    if name in fixed_by and symbolic[name] != v:
                        raise StageError(f"dim {name!r} is {symbolic[name]} in {fixed_by[name]}'s given shape and {v} "
                                         f"in {inp.name}'s: the model uses one value for both")
                    symbolic[name], fixed_by[name] = v, inp.name
    return symbolic


def resolve_input_shapes(model: onnx.ModelProto, spec: InputSpec) -> dict[str, list[int]]:
    """Concrete shape for every fed input; unresolved dims give one error that lists them all."""
    inputs = real_inputs(model)
    names = {i.name for i in inputs}
    arrays = spec.npz_arrays()
    if arrays is not None:
        _check_arrays(inputs, arrays, spec.inputs_npz or "the given arrays")
    given = {n: list(a.shape) for n, a in (arrays or {}).items() if n in names}
    for n, dims in spec.overrides.items():
        if n not in names:
            raise StageError(f"--shape-override names {n!r}, not a graph input (inputs: {sorted(names)})")
        if n in given and given[n] != dims:
            raise StageError(f"--shape-override {n}={'x'.join(map(str, dims))} disagrees with --inputs-npz's "
                             f"{'x'.join(map(str, given[n]))}: give one or the other")
        given[n] = dims
    symbolic = _named_dims(inputs, given, spec.symbolic())
    shapes, unresolved = {}, []
    for inp in inputs:
        kind = inp.type.WhichOneof("value")
        if kind not in (None, "tensor_type"):      # an npz holds arrays only, random values cannot stand for one
            raise StageError(f"input {inp.name} is a {kind.replace('_type', '')}, not a tensor: the pipeline takes "
                             f"tensor inputs only (a DictVectorizer's map, a sequence of tensors)")
        t = inp.type.tensor_type
        if inp.name in given:
            dims = given[inp.name]
            if t.HasField("shape") and len(t.shape.dim) != len(dims):
                raise StageError(f"input {inp.name} has rank {len(dims)} in the given spec, the model says {len(t.shape.dim)}")
            fixed = [(k, d.dim_value) for k, d in enumerate(t.shape.dim) if d.HasField("dim_value") and d.dim_value > 0]
            bad = [k for k, v in fixed if dims[k] != v]
            if bad:
                raise StageError(f"input {inp.name}: dim {bad[0]} is fixed to {dict(fixed)[bad[0]]} in the model, "
                                 f"the given spec says {dims[bad[0]]}")
            shapes[inp.name] = dims
            continue
        if not t.HasField("shape"):
            unresolved.append(f"{inp.name}: rank unknown")
            continue
        dims = []
        for k, d in enumerate(t.shape.dim):
            v = d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else \
                eval_dim(d.dim_param, symbolic) if d.HasField("dim_param") and d.dim_param else None
            if v is None or v < 0:
                shown = d.dim_param or ({0: "0 (zero-size)", -1: "-1 (dynamic)"}.get(d.dim_value, str(d.dim_value))
                                        if d.HasField("dim_value") else "?")
                unresolved.append(f"{inp.name}[{k}]={shown}")
            dims.append(v)
        shapes[inp.name] = dims
    if unresolved:
        example = " ".join(f"{i.name}=..." for i in inputs)
        raise StageError(f"unresolved dynamic dims {', '.join(unresolved)}: pass --shape-override "
                         f"'{example}', a --preset, --inputs-npz, or symbolic_dims in configs/workload.yaml")
    return shapes


# numpy has no bfloat16, float8, int4 ... (ml_dtypes' types): an npz cannot hold one (it saves them as raw |V2 or
# |V1 bytes), nor can ORT's run take one (a float8 input said "pass --inputs-npz", which no npz could satisfy)
LOW_BIT_INPUT = ("input {} is {}, which numpy has no type for (an npz saves it as raw bytes, ORT's Python run takes "
                 "none): not supported as a graph input; export the model with float32 inputs (a Cast or a "
                 "QuantizeLinear inside, as onnxconverter-common's keep_io_types does)")


def low_bit_type(elem_type: int) -> str | None:
    """The name of an element type that numpy lacks (bfloat16, float8_e4m3fn, int4 ...: ml_dtypes' types)."""
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except Exception:  # noqa: BLE001 - an element type onnx does not know
        return None
    return dtype.name if dtype.type.__module__.startswith("ml_dtypes") else None


def _check_arrays(inputs: list[onnx.ValueInfoProto], arrays: dict[str, np.ndarray], where: str) -> None:
    """Every npz entry names a graph input and has its element type (its rank is checked with the shapes)."""
    types = {i.name: i.type.tensor_type.elem_type for i in inputs}
    stray = sorted(n for n in arrays if n not in types)
    if stray:
        raise StageError(f"--inputs-npz {where} has {stray}, which name no graph input (inputs: {sorted(types)})")
    for n, a in arrays.items():
        if low := low_bit_type(types[n]):
            raise StageError(LOW_BIT_INPUT.format(n, low))
        try:
            want = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(types[n])) if types[n] else None
        except Exception:  # noqa: BLE001 - an element type numpy has no dtype for: ORT judges
            want = None
        text = want == object and a.dtype.kind in "US"     # tensor(string): numpy's str arrays (npz holds no objects)
        if want is not None and a.dtype != want and not text:
            raise StageError(f"--inputs-npz {where}: {n} is {a.dtype}, the model's input is {want} "
                             f"(save it as {want})")


def fix_input_shapes(model: onnx.ModelProto, shapes: dict[str, list[int]]) -> None:
    for inp in real_inputs(model):
        tt = inp.type.tensor_type
        tt.shape.Clear()
        for d in shapes[inp.name]:
            tt.shape.dim.add().dim_value = int(d)


def make_feeds(model: onnx.ModelProto, shapes: dict[str, list[int]], spec: InputSpec) -> dict[str, np.ndarray]:
    """The arrays of --inputs-npz, and seeded random feeds matching each other input's element type and shape
    (drawn in input order, the given ones skipped: the split runner draws the same values)."""
    arrays = spec.npz_arrays() or {}
    rng = np.random.default_rng(spec.feed_seed())
    feeds, total = {}, 0
    for inp in real_inputs(model):
        if inp.name in arrays:
            feeds[inp.name] = arrays[inp.name]
            continue
        et = inp.type.tensor_type.elem_type
        if low := low_bit_type(et):
            raise StageError(LOW_BIT_INPUT.format(inp.name, low))
        try:
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(et))
        except Exception:  # noqa: BLE001 - an element type onnx does not know
            raise StageError(f"input {inp.name} has unknown element type {et}: pass --inputs-npz") from None
        shape = shapes[inp.name]
        # random values are drawn in 64 bits, then cast: that temporary counts too
        total += int(np.prod(shape, dtype=object)) * max(dtype.itemsize, 8)
        if total > MAX_INPUT_BYTES:
            raise StageError(f"input {inp.name} of shape {'x'.join(map(str, shape))}: random inputs would need more "
                             f"than {MAX_INPUT_BYTES >> 30} GiB: give a smaller --shape-override")
        try:
            arr = _random_array(rng, shape, dtype, inp.name)
        except MemoryError:
            raise StageError(f"input {inp.name} of shape {'x'.join(map(str, shape))} does not fit in memory: "
                             "give a smaller --shape-override") from None
        feeds[inp.name] = arr
    return feeds


def _random_array(rng: np.random.Generator, shape: list[int], dtype: np.dtype, name: str) -> np.ndarray:
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 2, shape).astype(dtype)  # small ids/masks are valid for any vocabulary
    if dtype == np.object_:
        raise StageError(f"input {name} is a string tensor: random values cannot stand for it; pass its values with "
                         f"--inputs-npz (a unicode array, np.array(values, dtype=str))")
    raise StageError(f"input {name} has element type {dtype}: pass --inputs-npz")


def dim_conflicts(model: onnx.ModelProto, shapes: dict[str, list[int]], spec: InputSpec) -> list[str]:
    """The dims of the resolved shapes that contradict a dim the model writes as an expression of named dims
    ('past_sequence_length + sequence_length': an attention mask of 1x7 beside 128 past positions and 3 new ones).
    Not refused: ORT does not check dim names, and an exporter's expression can be narrower than what runs
    (optimum's 'past_sequence_length + 1' beside 3 new tokens)."""
    inputs = [i for i in real_inputs(model) if i.name in shapes and i.type.tensor_type.HasField("shape")]
    named = dict(spec.symbolic())
    for inp in inputs:
        for d, v in zip(inp.type.tensor_type.shape.dim, shapes[inp.name]):
            if d.dim_param and re.fullmatch(r"\w+", d.dim_param):
                named[d.dim_param] = v
    out = []
    for inp in inputs:
        for k, (d, v) in enumerate(zip(inp.type.tensor_type.shape.dim, shapes[inp.name])):
            want = eval_dim(d.dim_param, named) if d.dim_param and not re.fullmatch(r"\w+", d.dim_param) else None
            if want is not None and want != v:
                out.append(f"{inp.name} dim {k} is {v}, the model writes it {d.dim_param!r} = {want}")
    return out


def value_hint(model: onnx.ModelProto, spec: InputSpec, clash: tuple[str, ...] = ()) -> str:
    """When a run on random inputs fails: the given shapes that contradict the model's own dims (dim_conflicts),
    else the inputs that probably need real values (integer or bool scalars and tiny tensors: sample rates, flags,
    lengths) and how to pass them."""
    if clash:
        return f" The given shapes disagree with the model's: {'; '.join(clash)}: check --inputs-npz / --shape-override"
    given = spec.given_names()
    drawn = [i for i in real_inputs(model) if i.name not in given]
    if not drawn:
        return ""
    names = []
    for inp in drawn:
        tt = inp.type.tensor_type
        small = tt.HasField("shape") and all(d.HasField("dim_value") and d.dim_value <= 4 for d in tt.shape.dim)
        if tt.elem_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.BOOL) and small:
            names.append(inp.name)
    who = f"input {', '.join(repr(n) for n in names)} probably needs a real value" if names else \
        "some input probably needs real values"
    which = "The inputs were random" if not given else f"Inputs {', '.join(i.name for i in drawn)} were random"
    return f" {which}: {who}: pass them with --inputs-npz FILE.npz (make all INPUTS=FILE.npz; the npz may hold " \
        "only the inputs whose values matter)"
