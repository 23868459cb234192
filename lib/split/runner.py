#!/usr/bin/env python3
"""Standalone runner for one exported split (needs only onnxruntime and numpy).

Runs full.onnx, part1.onnx, part2.onnx and the composition part2(part1(x)) on the same inputs, checks that
the composition reproduces the full model, times each, and writes validation_report.json here. Two checks:

- exactness (pass/fail): every model with ONNX Runtime's graph optimizations off (the same kernels run in the
  whole model and in the parts), each session fresh and run once (seeded random ops then draw the same numbers).
  An output passes when max|composed - full| <= bound x scale, scale = max|full output| (never element by
  element: a value near zero makes any rounding look huge), bound = the larger of
  (1) max(4, 2 sqrt(K)) ulps of the accumulation type (fp64 for fp64 outputs, else fp32; K: the model's largest
      reduction length, split_meta.json's reduction_size): with identical kernels only a sum reordered by the
      thread pool can differ, and a sum of K terms moves by ~sqrt(K) ulps of its scale (a random walk);
  (2) 1 ulp of the narrowest float type the values are stored in (the output's, or a cut tensor's: a sum
      reordered as in (1) can round to the neighbouring fp16 value there).
  Where a cut tensor is fp16 or bf16, the reference is full_exact.onnx: full.onnx with that tensor passed
  through an Identity and returned too (ONNX Runtime would otherwise skip its rounding inside the whole model,
  which the parts cannot: stage 08's lib/split/export.py store_cut_tensors), so those tensors are compared too.
  fp32: ~1e-6 of the scale; fp16: ~1e-3. Integer and bool outputs must be equal. A tensor fed from the wrong
  place or a missing output fails by orders of magnitude.
- deployment difference (figures only, never a failure): the same at ONNX Runtime's default optimization level,
  where the parts may run other fused kernels than the whole model: max abs, and max abs / scale.
The inputs: inputs.npz when the folder has one (the real values stage 08 validated with) and neither --seed
nor --shape-override is given, else seeded random ones shaped as split_meta.json's input_shapes (or
--shape-override: the parts keep the dims the model declares symbolic).

    python run_split.py --provider cpu --runs 20
    python run_split.py --seed 0 --save-inputs-npz my_inputs.npz   # reproducible inputs ...
    python run_split.py --inputs-npz my_inputs.npz                  # ... fed back later
    python run_split.py --dump-interface right --dump-interface-out iface   # -> iface_right.npz
    python run_split.py --shape-override "input_ids=1x128 attention_mask=1x128"

--dump-interface: left = part1's outputs (the cut tensors, plus graph outputs finished on the left);
right = part2's inputs (the cut tensors plus the original inputs part2 needs); min = the cut tensors only;
either = everything either part exchanges. Metadata (names, shapes, dtypes, boundary) is in __meta__.
"""
import argparse
import json
import os
import sys
import time
import zlib
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}
DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
          "tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8, "tensor(uint8)": np.uint8,
          "tensor(bool)": np.bool_}


# types numpy lacks: ORT's run cannot return them as numpy arrays (a split whose cut tensor was bfloat16 failed "No
# corresponding Numpy type"; a float8 one came back as uint8 bits and was refused by the next part, an int4 one failed:
# the parts composed exactly all the same). {ORT type: (ONNX element type, ml_dtypes type, bits per element)}; here
# their tensors are arrays of their values (float32; int8/uint8 for the 4-bit integers), moved as OrtValues
NO_NUMPY = {"tensor(bfloat16)": (16, "bfloat16", 16), "tensor(float8e4m3fn)": (17, "float8_e4m3fn", 8),
            "tensor(float8e4m3fnuz)": (18, "float8_e4m3fnuz", 8), "tensor(float8e5m2)": (19, "float8_e5m2", 8),
            "tensor(float8e5m2fnuz)": (20, "float8_e5m2fnuz", 8), "tensor(uint4)": (21, "uint4", 4),
            "tensor(int4)": (22, "int4", 4), "tensor(float4e2m1)": (23, "float4_e2m1fn", 4)}


def runner_for(sess):
    """feeds, names=None -> sess.run(names, feeds), with tensors of the types numpy lacks (NO_NUMPY) fed and read
    back as OrtValues of their bits. The session's types are read once here, not at every timed run."""
    ins = {i.name: i.type for i in sess.get_inputs()}
    if not any(t in NO_NUMPY for t in [*ins.values(), *(o.type for o in sess.get_outputs())]):
        return lambda feeds, names=None: sess.run(names, feeds)
    import onnxruntime as ort

    def run_bits(feeds, names=None):
        vals = {k: _to_ortvalue(v, ins[k]) if ins.get(k) in NO_NUMPY
                else ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(v)) for k, v in feeds.items()}
        return [_values(r) if r.data_type() in NO_NUMPY else r.numpy() for r in sess.run_with_ort_values(names, vals)]
    return run_bits


def run(sess, feeds, names=None):
    """One run of sess (runner_for)."""
    return runner_for(sess)(feeds, names)


def outputs(sess, env) -> dict:
    """{output name: value} of one run of sess, its inputs taken from env by name."""
    return dict(zip([o.name for o in sess.get_outputs()], run(sess, {i.name: env[i.name] for i in sess.get_inputs()})))


def _ml_dtypes(name):
    """The ml_dtypes package (onnx's dependency: the types numpy lacks), for a tensor of type `name`."""
    try:
        import ml_dtypes
    except ImportError:
        fail(f"a tensor of type {name} needs the ml_dtypes package (pip install ml_dtypes)")
    return ml_dtypes


def _ml_dtype(name):
    return getattr(_ml_dtypes(name), name)


def _to_ortvalue(v, ort_type):
    """An array of values as an OrtValue of ort_type's bits (rounded to nearest even; 4-bit ones packed two per
    byte, the first in the low nibble)."""
    import ctypes
    import onnxruntime as ort
    et, name, bits = NO_NUMPY[ort_type]
    v = np.asarray(v)
    code = np.ascontiguousarray(v.astype(_ml_dtype(name))).view(np.uint16 if bits == 16 else np.uint8).ravel()
    if bits == 4:
        code = np.pad(code & 0xF, (0, code.size % 2))
        code = (code[0::2] | (code[1::2] << 4)).astype(np.uint8)
    out = ort.OrtValue.ortvalue_from_shape_and_type(list(v.shape), et)
    if code.nbytes:
        ctypes.memmove(out.data_ptr(), code.ctypes.data, code.nbytes)
    return out


def _values(ortvalue):
    """The values of an OrtValue of a type numpy lacks: float32 (int8/uint8 for int4/uint4)."""
    import ctypes
    _, name, bits = NO_NUMPY[ortvalue.data_type()]
    shape = ortvalue.shape()
    n = int(np.prod(shape, dtype=np.int64))
    nbytes = (n * bits + 7) // 8
    raw = np.ctypeslib.as_array(ctypes.cast(ortvalue.data_ptr(), ctypes.POINTER(ctypes.c_uint8)), shape=(nbytes,)) \
        .copy() if nbytes else np.zeros(0, np.uint8)
    if bits == 4:
        raw = np.stack([raw & 0xF, raw >> 4], axis=1).ravel()[:n]
    vals = raw.view(np.uint16 if bits == 16 else np.uint8).view(_ml_dtype(name))
    wide = np.int8 if name == "int4" else np.uint8 if name == "uint4" else np.float32
    return vals.astype(wide).reshape(shape)


def stored_eps(sess, values):
    """The float types part outputs are stored in (eps of each; those of the types numpy lacks are float32 arrays
    here: their own type's eps)."""
    types = {o.name: o.type for o in sess.get_outputs()}
    eps = []
    for k, v in values.items():
        t = NO_NUMPY.get(types.get(k))
        if t is not None and t[1] not in ("int4", "uint4"):
            eps.append(float(_ml_dtypes(t[1]).finfo(_ml_dtype(t[1])).eps))
        elif t is None and isinstance(v, np.ndarray) and np.issubdtype(v.dtype, np.floating):
            eps.append(float(np.finfo(v.dtype).eps))
    return eps


def fail(msg):
    print(f"error: {msg}", file=sys.stderr)
    sys.exit(2)


EXACT_REFERENCE = "full_exact.onnx"


def session(name, provider, ort, folder=HERE, optimize=True):
    """An ORT session; optimize=False: graph optimizations off (ORT_DISABLE_ALL), the kernels of the graph as
    written, and full.onnx read from full_exact.onnx where the folder has one (module docstring, (2))."""
    path = Path(folder) / name
    if not optimize and name == "full.onnx" and (Path(folder) / EXACT_REFERENCE).exists():
        path = Path(folder) / EXACT_REFERENCE
    if not path.exists():
        raise RuntimeError(f"{path} not found (run this script inside its split folder)")
    opts = ort.SessionOptions()
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 4    # fatal only: a failed run prints our one line, not ORT's log
    # three sessions share the cores: idle ORT threads must not spin and steal time from the one running
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    providers = [PROVIDERS[provider]]
    if provider == "tensorrt":
        cache = HERE / "trt_cache"
        cache.mkdir(exist_ok=True)
        providers = [("TensorrtExecutionProvider", {"trt_engine_cache_enable": True,
                                                    "trt_engine_cache_path": str(cache),
                                                    "trt_builder_optimization_level": 1}),
                     "CUDAExecutionProvider", "CPUExecutionProvider"]
    try:
        return ort.InferenceSession(str(path), opts, providers=providers)
    except Exception as e:  # noqa: BLE001
        raise RuntimeError(f"cannot load {path}: {' '.join(str(e).split())[:300]}") from None


def parse_overrides(text):
    out = {}
    for item in text or []:
        for tok in item.split():
            name, _, dims = tok.rpartition("=")
            try:
                out[name] = [int(d) for d in dims.split("x")]
            except ValueError:
                fail(f"bad --shape-override '{tok}': expected NAME=DIMS like input=1x3x224x224")
    return out


def make_inputs(sess, meta, seed, overrides, given=None):
    """The given arrays, and seeded random ones for the other inputs (drawn in input order, the given ones
    skipped: the values stage 08 drew)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in sess.get_inputs():
        if given and i.name in given:
            feeds[i.name] = given[i.name]
            continue
        shape = overrides.get(i.name) or meta["input_shapes"].get(i.name)
        if shape is None or any(not isinstance(d, int) for d in shape):
            fail(f"input {i.name} has dynamic dims {i.shape}: pass --shape-override '{i.name}=...'")
        dtype = DTYPES.get(i.type)
        if dtype is None:
            fail(f"input {i.name} has type {i.type}: pass --inputs-npz")
        if np.issubdtype(dtype, np.floating):
            feeds[i.name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[i.name] = rng.integers(0, 2, shape).astype(dtype)
    return feeds


def value_inputs(sess):
    """Inputs that probably need real values when random ones fail: integer/bool scalars and tiny tensors."""
    small = lambda shape: all(isinstance(d, int) and d <= 4 for d in shape)  # noqa: E731
    return [i.name for i in sess.get_inputs() if i.type in ("tensor(int64)", "tensor(int32)", "tensor(bool)")
            and small(i.shape)]


def load_npz(path, sess):
    try:
        data = dict(np.load(path, allow_pickle=False))
    except Exception as e:  # noqa: BLE001
        fail(f"--inputs-npz {path} is not a readable .npz ({type(e).__name__})")
    names = [i.name for i in sess.get_inputs()]
    stray = sorted(set(data) - set(names))
    if stray:
        fail(f"--inputs-npz {path} has {stray}, which name no input of full.onnx (inputs: {names})")
    return data


def choose_inputs(a, meta, full):
    """(feeds, where they came from): the npz's arrays, the inputs it lacks drawn at random (seeded)."""
    npz = a.inputs_npz
    if npz is None and a.seed is None and not a.shape_override and meta.get("inputs_npz") \
            and (HERE / meta["inputs_npz"]).exists():
        npz = str(HERE / meta["inputs_npz"])
    given = load_npz(npz, full) if npz else {}
    a.seed = meta.get("seed", 0) if a.seed is None else a.seed
    feeds = make_inputs(full, meta, a.seed, parse_overrides(a.shape_override), given)
    drawn = [n for n in feeds if n not in given]
    return feeds, (npz if not drawn else f"{npz} + random {drawn} (seed {a.seed})") if npz else None


def as_array(v):
    """An ORT output as an array to compare: a tensor as it is; a sequence of maps (ZipMap's class
    probabilities) as a 2-D array, one row per map, its values by sorted key; a map as its values by sorted key;
    a sequence of tensors stacked (flattened and concatenated when their shapes differ)."""
    if isinstance(v, dict):
        return np.array([v[k] for k in sorted(v)])
    if isinstance(v, list):
        if not v:
            return np.zeros(0)
        rows = [as_array(x) for x in v]
        if len({r.shape for r in rows}) == 1:
            return np.stack(rows)
        return np.concatenate([r.ravel() for r in rows])
    v = np.asarray(v)
    if v.dtype.kind in "OSU":       # string labels: a checksum of each, an integer (its bound is 0: equal or not)
        return np.array([zlib.crc32(str(x).encode()) for x in v.ravel()], dtype=np.int64).reshape(v.shape)
    return v


def median_us(fn, runs):
    ts = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        ts.append((time.perf_counter() - t0) * 1e6)
    return float(np.median(ts))


def bound_ulps(reduction_size):
    """How many ulps of the accumulation type a K-term sum may move when reordered (module docstring, (1))."""
    return max(4.0, 2.0 * float(np.sqrt(max(int(reduction_size or 1), 1))))


def rel_bound(dtype, stored, reduction_size):
    """The exactness bound relative to the output's scale (module docstring): 0 for integer and bool outputs."""
    dtype = np.dtype(dtype)
    if not np.issubdtype(dtype, np.floating):
        return 0.0
    acc = np.float64 if dtype == np.float64 else np.float32
    narrow = max([float(np.finfo(dtype).eps), *stored])     # stored: stored_eps()
    return max(bound_ulps(reduction_size) * float(np.finfo(acc).eps), narrow)


def map_keys(v):
    """The keys of a map output (ZipMap's class labels), of each map of a sequence; None for a tensor."""
    if isinstance(v, dict):
        return sorted(map(str, v))
    if isinstance(v, list) and v and isinstance(v[0], dict):
        return [map_keys(x) for x in v]
    return None


def compare_output(x, r, stored, reduction_size):
    """One output as ORT returned it (tensors; sequences and maps as arrays, their keys equal): compare()."""
    if x is not None and map_keys(x) != map_keys(r):
        return {"pass": False, "error": f"the composed parts' map keys differ: {str(map_keys(x))[:80]}, full model "
                                        f"{str(map_keys(r))[:80]}"}
    r = as_array(r)
    return compare(None if x is None else as_array(x), r, rel_bound(r.dtype, stored, reduction_size))


def compare(x, r, rel):
    """One output: composed x against the full model's r. Differences relative to the output's scale
    (max |r|), never element by element (a value near zero would make any rounding look huge)."""
    if x is None:
        return {"pass": False, "error": "the composed parts do not produce this output"}
    x, r = np.asarray(x), np.asarray(r)
    if x.shape != r.shape or x.dtype != r.dtype:
        return {"pass": False, "error": f"composed {x.dtype}{list(x.shape)}, full model {r.dtype}{list(r.shape)}",
                "shape": list(r.shape)}
    if not (np.issubdtype(r.dtype, np.number) or r.dtype == np.bool_):
        same = bool(np.array_equal(x, r))
        return {"pass": same, "max_abs_diff": 0.0 if same else None, "scale": None, "bound": 0.0, "shape": list(r.shape)}
    a, b = x.astype(np.float64), r.astype(np.float64)
    equal = (np.isnan(a) & np.isnan(b)) | (a == b)     # NaN on both sides, or the same infinity
    with np.errstate(invalid="ignore"):
        diff = np.where(equal, 0.0, np.abs(a - b))
    diff = np.where(np.isnan(diff), np.inf, diff)       # NaN on one side only
    finite = np.abs(b[np.isfinite(b)])
    scale = float(finite.max()) if finite.size else 0.0
    bound = rel * scale
    worst = float(diff.max()) if diff.size else 0.0
    if np.issubdtype(r.dtype, np.integer) and not np.array_equal(x, r):
        worst = max(worst, 1.0)     # exact: as float64, int64 ids past 2**53 that differ by 1 compared equal
    return {"max_abs_diff": worst, "scale": scale, "rel_to_scale": worst / scale if scale else (0.0 if not worst else
            float("inf")), "bound": bound, "dtype": str(r.dtype), "shape": list(r.shape), "pass": bool(worst <= bound)}


def compose(p1, p2, feeds):
    """part2(part1(x)): (part1's outputs, part2's feeds, every output the parts produce)."""
    mid = outputs(p1, feeds)
    feed2 = {i.name: (mid[i.name] if i.name in mid else feeds[i.name]) for i in p2.get_inputs()}
    return mid, feed2, {**mid, **outputs(p2, feed2)}


def differences(open_session, feeds, optimize, reduction_size):
    """Fresh sessions of the three models at one optimization level, each run once: the per-output comparison,
    part1's outputs and part2's feeds."""
    full, p1, p2 = (open_session(n, optimize) for n in ("full.onnx", "part1.onnx", "part2.onnx"))
    ref = outputs(full, feeds)
    mid, feed2, got = compose(p1, p2, feeds)
    stored = stored_eps(p1, mid)
    out = {name: compare_output(got.get(name), r, stored, reduction_size) for name, r in ref.items()}
    return out, mid, feed2, (full, p1, p2)


def deployment(open_session, feeds, reduction_size):
    """The deployment difference (default optimization level): figures, never a failure, even when the
    optimized models cannot run (then the error, and None for the sessions)."""
    what = {"graph_optimizations": "default (ORT_ENABLE_ALL)"}
    try:
        out, _, feed2, sessions = differences(open_session, feeds, True, reduction_size)
    except Exception as e:  # noqa: BLE001 - ORT raises its own types; the exactness check stands alone
        return {**what, "error": " ".join(str(e).split())[:300]}, None, None
    worst = max((o.get("max_abs_diff") or 0.0 for o in out.values()), default=0.0)
    return {**what, "max_abs_diff": worst, "max_rel_to_scale": max((o.get("rel_to_scale") or 0.0 for o in out.values()),
                                                                   default=0.0),
            "outputs": {k: {f: v.get(f) for f in ("max_abs_diff", "rel_to_scale", "scale")} for k, v in out.items()}}, \
        feed2, sessions


def check(open_session, feeds, runs, reduction_size=1):
    """Exactness (graph optimizations off: pass/fail) and deployment difference (default level: figures), and
    median latencies at the default level (optimizations off when the optimized models cannot run).
    open_session(name, optimize) -> an ORT session. Returns (report, part1's outputs with optimizations off,
    part2's feeds)."""
    exact, mid, feed2, sessions = differences(open_session, feeds, False, reduction_size)
    dep, dfeed2, optimized = deployment(open_session, feeds, reduction_size)
    full, p1, p2 = optimized or sessions
    dfeed2 = dfeed2 or feed2
    f1 = {i.name: feeds[i.name] for i in p1.get_inputs()}
    f_full = {i.name: feeds[i.name] for i in full.get_inputs()}
    run_full, run_p1, run_p2 = (runner_for(x) for x in (full, p1, p2))
    lat = {"full_us": median_us(lambda: run_full(f_full), runs),
           "part1_us": median_us(lambda: run_p1(f1), runs),
           "part2_us": median_us(lambda: run_p2(dfeed2), runs),
           "composed_us": median_us(lambda: compose(p1, p2, feeds), runs)}
    report = {"pass": all(o["pass"] for o in exact.values()),
              "max_abs_diff": max((o.get("max_abs_diff") or 0.0 for o in exact.values()), default=0.0),
              "exactness": {"graph_optimizations": "off (ORT_DISABLE_ALL)", "bound_ulps": bound_ulps(reduction_size),
                            "reduction_size": int(reduction_size or 1), "outputs": exact},
              "deployment": dep, "outputs": exact, "latency_median": lat, "runs": runs}
    return report, mid, feed2


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--provider", choices=sorted(PROVIDERS), default="cpu")
    p.add_argument("--runs", type=int, default=10, help="timed runs of each model (default 10)")
    p.add_argument("--seed", type=int, default=None, help="seed of random inputs (default: inputs.npz when the "
                   "folder has one, else random inputs with split_meta.json's seed)")
    p.add_argument("--inputs-npz", help="feed these arrays instead of random ones")
    p.add_argument("--save-inputs-npz", help="save the inputs used to this .npz")
    p.add_argument("--dump-interface", choices=["right", "left", "min", "either"], help="save the split interface as NPZ")
    p.add_argument("--dump-interface-out", default="interface", help="prefix of the interface NPZ (default: interface)")
    p.add_argument("--shape-override", action="append", default=[], help="NAME=DIMS pairs for dynamic inputs")
    p.add_argument("--report", default=str(HERE / "validation_report.json"))
    a = p.parse_args()
    if a.runs < 1:      # 0 wrote NaN latencies into a report no JSON reader takes
        p.error("--runs must be >= 1")
    return a


def dump_interface(a, meta, names1, mid, feed2):
    cut = meta["cut_tensors"]
    pick = {"left": names1, "right": list(feed2), "min": cut,
            "either": list(dict.fromkeys(names1 + list(feed2)))}[a.dump_interface]
    arrays = {n: as_array(mid[n] if n in mid else feed2[n]) for n in pick}
    info = {"boundary": meta["boundary"], "side": a.dump_interface, "cut_tensors": cut,
            "tensors": {n: {"shape": list(v.shape), "dtype": str(v.dtype)} for n, v in arrays.items()}}
    out = f"{a.dump_interface_out}_{a.dump_interface}.npz"
    np.savez(out, __meta__=np.array(json.dumps(info)), **arrays)
    print(f"wrote {out} ({len(arrays)} tensors)")


def run_check(a, meta, ort, full, feeds, npz):
    try:
        return check(lambda n, opt: session(n, a.provider, ort, optimize=opt), feeds, a.runs,
                     meta.get("reduction_size", 1))
    except Exception as e:  # noqa: BLE001 - ORT raises its own types
        msg = " ".join(str(e).split())[:300]
        if npz:
            fail(f"ONNX Runtime failed on the inputs of {npz}: {msg}")
        need = value_inputs(full)
        fail(f"ONNX Runtime failed on random inputs: {msg}. "
             + (f"Input {', '.join(need)} probably needs a real value: " if need else "Some input probably needs "
                "real values: ") + "pass real values with --inputs-npz FILE.npz")


def main():
    a = parse_args()
    try:
        import onnxruntime as ort
    except ImportError:
        fail("onnxruntime is not installed (pip install onnxruntime)")
    if PROVIDERS[a.provider] not in ort.get_available_providers():
        fail(f"provider {a.provider} is not available in this onnxruntime build "
             f"(available: {', '.join(ort.get_available_providers())})")
    meta = json.loads((HERE / "split_meta.json").read_text())
    if meta.get("error"):
        fail(f"stage 08 could not export this split: {meta['error']}")
    try:
        full, p1, _ = (session(n, a.provider, ort) for n in ("full.onnx", "part1.onnx", "part2.onnx"))
    except RuntimeError as e:
        fail(str(e))
    feeds, npz = choose_inputs(a, meta, full)
    if a.save_inputs_npz:
        np.savez(a.save_inputs_npz, **feeds)
    report, mid, feed2 = run_check(a, meta, ort, full, feeds, npz)
    if a.dump_interface:
        dump_interface(a, meta, [o.name for o in p1.get_outputs()], mid, feed2)
    report = {"boundary": meta["boundary"], "provider": a.provider, "inputs": npz or f"random (seed {a.seed})",
              **report}
    tmp = a.report + ".tmp"
    Path(tmp).write_text(json.dumps(report, indent=2) + "\n")
    os.replace(tmp, a.report)
    lat = report["latency_median"]
    dep = report["deployment"]
    dep_text = f"error {dep['error']}" if "error" in dep else \
        f"max |diff| {dep['max_abs_diff']:.2e}, {dep['max_rel_to_scale']:.2e} of the output's scale"
    print(f"boundary {meta['boundary']}: {'PASS' if report['pass'] else 'FAIL'} (exactness, optimizations off: max |diff| "
          f"{report['max_abs_diff']:.2e}; deployment, default optimizations: {dep_text}); "
          f"full {lat['full_us'] / 1e3:.2f} ms, part1 {lat['part1_us'] / 1e3:.2f} ms, part2 {lat['part2_us'] / 1e3:.2f} ms, "
          f"composed {lat['composed_us'] / 1e3:.2f} ms")
    sys.exit(0 if report["pass"] else 1)


if __name__ == "__main__":
    main()
