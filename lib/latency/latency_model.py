"""Predict a node's latency before running it: the roofline, corrected per op class by efficiencies that
`make calibrate` fits on micro-benchmarks run through ONNX Runtime (lib/latency/microbench.py).

The model of one node (FLOPs F, bytes B as stage 02 counts them; the device's peak P for the node's element
type and its memory bandwidth W):

    t = overhead + max( F / (P * e(F)),  B / (W * m) )         e(F) = e_max / (1 + (f_half / F) ** gamma)

- overhead (us): what a kernel costs however small it is (launch, thread-pool fan-out, profiler);
- e(F): the fraction of the compute peak the kernel reaches. It saturates with the work: half of e_max at
  f_half FLOPs, e_max for large kernels; gamma sets how sharply (gamma = 1 is exactly "a fixed start-up
  cost plus a rate", smaller is a slower rise, as with thread-level parallelism that grows with the work);
- m: the fraction of the memory bandwidth the kernel reaches when it is bound by data movement.
The compute time F / (P e(F)) never falls as F grows: with gamma > 1 it has its minimum at
F* = f_half (gamma - 1)^(1/gamma) and rises again below it, without bound (a steep QuantizeLinear fit, gamma
2.6, put a 1,024-FLOP node of a QDQ ResNet at 150 ms and the whole model at 20x its time), so below F* it is
the time at F*.
Five numbers per key, fitted by least squares on log time (relative error; a robust Huber loss, since
timings on a shared machine have outliers) with weak priors that keep a parameter the data cannot see
(e.g. e_max of a pure copy) at a neutral value.

Keys: one model per op class (ops_metrics.csv `op_class`), int8 MAC classes apart (`conv@int8`,
`matmul@int8`: ORT's integer kernels have nothing in common with its fp32 ones), refined per op type
(`activation/Erf`, `conv/ConvInteger`) where the op type has enough micro-benchmarks and the class model
misses it by more than 25% (the per-element FLOP counts of stage 02 are conventions: Erf is not 5x a Relu).
The anchor of a pattern ORT fuses into one kernel (a node other nodes are `fused_into`) first tries
`class/op+fused`: ORT then runs another kernel than the op alone (Add+Add+LayerNormalization runs as
SkipLayerNormalization, ~5x a LayerNormalization here; Conv+Add+Relu as one NCHWc conv), and the
micro-benchmarks time those patterns too. A node takes the most specific key the file has:
`class/op+fused` (anchors only), `class/op`, `class@int8`, `class`, then the file's `fallback` for its
class (e.g. `recurrent -> matmul`), then `default`.

Traffic bytes B: act_in + act_out + weight bytes (stage 02), except views and shape reads (Reshape,
Squeeze, Unsqueeze, Flatten, Identity, Dropout, Shape, Size: ORT reuses the buffer or reads no data,
B = 0) and gathers/slices (Gather*, Slice: only what is picked is read, B = 2 x act_out; an embedding
table is not streamed).

Unknown costs (documented contract of predict()): a NaN FLOP count drops the compute term, NaN byte
columns count as 0 (the known ones still count), and a node with neither gets the overhead alone; such rows
are flagged in `predict_detail()` (`cost_complete = False`). Nodes ORT fuses into a neighbour's kernel or
removes (`fused[i]`) get 0: their anchor's time covers them.

Another device: call predict() with that device's peaks and bandwidth; the efficiencies come from the file
given for that device (`load_latency_model(device_file)`, or `model_for_device(device_cfg)`: a device entry
of configs/system.yaml may name its own `latency_model:` file; default the host's).
"""
from __future__ import annotations

import math
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import pandas as pd
import yaml

from lib.analysis.device_time import device_terms, with_overhead
from lib.analysis.roofline import known_or_zero, node_bytes
from lib.artifacts import REPO, atomic_path, load_yaml
from lib.errors import StageError
from lib.latency.profiling import _session, latency_table, name_nodes
from lib.onnx.loading import graph_of_path
from lib.onnx.ops import names_with

FORMAT = "nn-perf/latency-model/1"
PARAMS = ("overhead_us", "e_max", "f_half", "gamma", "m")
PRIOR = {"overhead_us": 5.0, "e_max": 0.3, "f_half": 1e6, "gamma": 1.0, "m": 0.5}
PRIOR_SIGMA = {"overhead_us": 30.0, "e_max": 30.0, "f_half": 40.0, "gamma": 10.0, "m": 30.0}   # natural-log units: weak
# wide on purpose: e_max or m above 1 means the host figures it is relative to were under-measured (e.g.
# calibrated while other work held the cores), and the fit must still follow the data (calibrate warns)
BOUNDS = {"overhead_us": (0.05, 5e4), "e_max": (1e-5, 1e3), "f_half": (1.0, 1e13), "gamma": (0.2, 4.0),
          "m": (1e-5, 1e4)}
INT8_OPS = names_with("int8")       # op facts live in the registry (lib/onnx/ops.py)
INT8_TYPES = {"int8", "uint8"}
VIEW_OPS = names_with("view")
PICK_OPS = names_with("pick")
DEFAULT_FALLBACK = {"recurrent": "matmul", "control_flow": "default", "other": "default",
                    "conv_grouped": "conv", "gemm": "matmul", "reduce": "softmax", "shape": "data_movement"}
REFINE_MIN_POINTS = 4
REFINE_MISS = 0.25


# ------------------------------------------------------------------ per-row quantities

def per_distinct(fn, *columns) -> np.ndarray:
    """fn(*values) per row, computed once per distinct combination of the columns' values (a 200k-node table
    has a few dozen): factorized in C, broadcast back as an object array. Values are told apart by type too
    (factorize alone takes None for NaN, and True for 1)."""
    n = len(columns[0])
    if n == 0:
        return np.empty(0, dtype=object)
    code = np.zeros(n, dtype=np.int64)
    for c in columns:
        c = np.asarray(c, dtype=object)
        one_type = pd.api.types.infer_dtype(c, skipna=False) in ("string", "boolean", "integer", "floating")
        for k, u in [pd.factorize(c, use_na_sentinel=False)] + \
                ([] if one_type else [pd.factorize(np.fromiter(map(type, c), object, n))]):
            code = code * max(len(u), 1) + k
    inv, uniq = pd.factorize(code)
    row = np.empty(len(uniq), dtype=np.int64)
    row[inv] = np.arange(n)         # a row of each combination (all of its rows hold the same values)
    out = np.empty(len(uniq), dtype=object)
    out[:] = [fn(*(c[i] for c in columns)) for i in row.tolist()]
    return out[inv]


def _op_name(op_type: str) -> str:
    return str(op_type).split(":")[-1]


def _is_int8(op: str, mac_dtype) -> bool:
    return op in INT8_OPS or (isinstance(mac_dtype, str) and mac_dtype in INT8_TYPES)


def row_keys(op_class: str, op_type: str, mac_dtype=None, anchor: bool = False) -> list[str]:
    """Candidate keys of a node, most specific first (the first one present in the file is used).
    anchor: ORT fused other nodes into this one's kernel (it runs another kernel than the op alone, e.g.
    SkipLayerNormalization for Add+Add+LayerNormalization): '<class>/<op>+fused' comes first."""
    cls = op_class if isinstance(op_class, str) and op_class else "other"
    op = _op_name(op_type)
    keys = [f"{cls}/{op}+fused"] if anchor else []
    keys.append(f"{cls}/{op}")
    if _is_int8(op, mac_dtype):
        keys.append(f"{cls}@int8")
    keys.append(cls)
    return keys


def traffic_bytes(df: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(bytes the kernel moves, whether every byte column was known) per row; NaN columns count as 0."""
    cols = [df[c].astype(float).to_numpy() if c in df else np.full(len(df), np.nan)
            for c in ("act_in_bytes", "act_out_bytes", "weight_bytes")]
    known = ~np.isnan(cols[0]) & ~np.isnan(cols[1]) & ~np.isnan(cols[2])
    a_in, a_out, w = (np.nan_to_num(c) for c in cols)
    def role(op) -> str:      # views move no data; picks read about what they write
        name = _op_name(str(op))
        return "view" if name in VIEW_OPS else "pick" if name in PICK_OPS else ""
    roles = per_distinct(role, df["op_type"].to_numpy(object)) if "op_type" in df else np.full(len(df), "")
    b = a_in + a_out + w
    b = np.where(roles == "view", 0.0, b)
    b = np.where(roles == "pick", 2.0 * a_out, b)
    any_known = ~(np.isnan(cols[0]) & np.isnan(cols[1]) & np.isnan(cols[2]))
    b = np.where(any_known, b, np.nan)
    return b, known


def peak_per_row(df: pd.DataFrame, peak_flops_per_s) -> np.ndarray:
    """Peak FLOP/s of each row: a scalar, or a per-element-type table (host.yaml's peak_flops_per_s) looked
    up with the node's MAC element type when it has one (int8 MACs), else its dtype, else 'default'."""
    if isinstance(peak_flops_per_s, (int, float, np.floating, np.integer)):
        return np.full(len(df), float(peak_flops_per_s))
    table = dict(peak_flops_per_s)
    if "default" not in table:
        raise StageError("peak_flops_per_s needs a 'default' entry (or pass one number)")
    mac = df["mac_dtype"].to_numpy(object) if "mac_dtype" in df else np.full(len(df), "", dtype=object)
    dt = df["dtype"].to_numpy(object) if "dtype" in df else np.full(len(df), "default", dtype=object)

    def peak(m, d) -> float:
        k = m if isinstance(m, str) and m and m in table else d
        return float(table.get(k, table["default"]))
    return per_distinct(peak, mac, dt).astype(float)


def _terms(p: dict, flops, nbytes, peak, bw: float) -> tuple[np.ndarray, np.ndarray]:
    """(compute time F / (P e(F)), memory time B / (W m)) in us of the module docstring's formula; NaN
    flops/bytes drop their term."""
    f = np.nan_to_num(np.asarray(flops, float))
    b = np.nan_to_num(np.asarray(nbytes, float))
    g = p["gamma"]
    fc = np.maximum(f, p["f_half"] * (g - 1.0) ** (1.0 / g) if g > 1.0 else 1e-30)   # F* (module docstring)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        eff = p["e_max"] / (1.0 + np.power(p["f_half"] / fc, g))
        tc, tm = device_terms(fc, b, peak, bw, eff, p["m"], scale=1e6)    # lib/analysis/device_time.py
    return np.where(f > 0, tc, 0.0), tm


def model_time(p: dict, flops: np.ndarray, nbytes: np.ndarray, peak: np.ndarray, bw: float) -> np.ndarray:
    """The formula of the module docstring (us), vectorised; NaN flops/bytes drop their term."""
    return with_overhead(*_terms(p, flops, nbytes, peak, bw), p["overhead_us"])


def anchors_of(df: pd.DataFrame, fused_into) -> np.ndarray:
    """Per row: does some other row run inside this node's kernel (its name appears in fused_into)?"""
    if fused_into is None:
        return np.zeros(len(df), dtype=bool)
    f = pd.Series(np.asarray(fused_into, dtype=object)).dropna().astype(str)
    names = set(f[f != ""])
    return df["node"].astype(str).isin(names).to_numpy() if "node" in df else np.zeros(len(df), dtype=bool)


# ------------------------------------------------------------------ the model object

@dataclass
class LatencyModel:
    params: dict[str, dict]                       # key -> {overhead_us, e_max, f_half, gamma, m, ...}
    fallback: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_FALLBACK))
    dispatch: dict = field(default_factory=lambda: {"fixed_us": 0.0, "per_kernel_us": 0.0})
    meta: dict = field(default_factory=dict)
    path: str | None = None
    in_model: dict[str, float] = field(default_factory=dict)   # op class -> in-model / micro-benchmark time

    # -- which parameters a node uses
    def resolve(self, op_class: str, op_type: str, mac_dtype=None, anchor: bool = False) -> str:
        seen = set()
        for k in row_keys(op_class, op_type, mac_dtype, anchor):
            if k in self.params:
                return k
        cls = op_class if isinstance(op_class, str) and op_class else "other"
        k = cls
        while k not in self.params and k not in seen:
            seen.add(k)
            k = self.fallback.get(k, "default")
        return k if k in self.params else "default"

    def predict_detail(self, df: pd.DataFrame, peak_flops_per_s, mem_bw_bytes_per_s: float,
                       fused: np.ndarray | None = None, fused_into=None, *,
                       include_dispatch: bool = True) -> pd.DataFrame:
        """predict() with its workings: key, t_compute_us, t_mem_us, overhead_us, cost_complete, t_pred_us."""
        n = len(df)
        if n == 0:
            return pd.DataFrame(columns=["key", "t_compute_us", "t_mem_us", "overhead_us", "cost_complete", "t_pred_us"])
        bw = float(mem_bw_bytes_per_s)
        if not bw > 0:
            raise StageError(f"mem_bw_bytes_per_s must be a positive number, got {mem_bw_bytes_per_s!r}")
        peak = peak_per_row(df, peak_flops_per_s)
        flops = df["flops"].astype(float).to_numpy() if "flops" in df else np.full(n, np.nan)
        nbytes, bytes_known = traffic_bytes(df)
        cls = df["op_class"] if "op_class" in df else pd.Series(["other"] * n, index=df.index)
        ops = df["op_type"] if "op_type" in df else pd.Series([""] * n, index=df.index)
        mac = df["mac_dtype"] if "mac_dtype" in df else pd.Series([""] * n, index=df.index)
        anchor = anchors_of(df, fused_into)
        # a few distinct (class, op, dtype, anchor) among up to 200k rows
        keys = per_distinct(self.resolve, cls.to_numpy(object), ops.to_numpy(object), mac.to_numpy(object), anchor)
        codes, uniq = pd.factorize(keys)
        tc = np.zeros(n)
        tm = np.zeros(n)
        ov = np.zeros(n)
        for j, k in enumerate(uniq):
            idx = np.flatnonzero(codes == j)
            p = self.params[k]
            tc[idx], tm[idx] = _terms(p, flops[idx], nbytes[idx], peak[idx], bw)
            ov[idx] = p["overhead_us"]
        # in a whole model an op class runs slower than alone in a micro-benchmark (cold caches, masks, small
        # batched shapes): the factors fitted on calibration models (never the model predicted)
        f = per_distinct(lambda c: self.in_model.get(c, 1.0), cls.to_numpy(object)).astype(float)
        tc, tm, ov = tc * f, tm * f, ov * f
        t = with_overhead(tc, tm, ov)
        if include_dispatch:
            t = t + float(self.dispatch.get("per_kernel_us", 0.0))
        if fused is not None:
            fz = np.asarray(fused, dtype=bool)
            if fz.shape != (n,):
                raise StageError(f"fused has shape {fz.shape}, the table has {n} rows")
            t = np.where(fz, 0.0, t)
        return pd.DataFrame({"key": keys, "t_compute_us": tc, "t_mem_us": tm, "overhead_us": ov,
                             "cost_complete": ~np.isnan(flops) & bytes_known, "t_pred_us": t}, index=df.index)

    def predict(self, df: pd.DataFrame, peak_flops_per_s, mem_bw_bytes_per_s: float,
                fused: np.ndarray | None = None, fused_into=None, *, include_dispatch: bool = True) -> np.ndarray:
        """Predicted latency (us) of every row of a stage-02 table (op_class, op_type, flops, act_in_bytes,
        act_out_bytes, weight_bytes, dtype; mac_dtype when present).

        peak_flops_per_s: one number, or a per-element-type table with a 'default' entry (host.yaml's);
        mem_bw_bytes_per_s: bytes/s. fused: a boolean array; True rows get 0 (ORT runs them inside a
        neighbour's kernel, or removed them: their anchor's time covers them).
        fused_into (optional, strongly advised with `fused`): per row the anchor node a fused node runs
        inside ('' or NaN for the others), as ops_latency.csv's `fused_into` column or ort_node_roles()
        give it; anchors then use their '+fused' parameters when the file has them (ORT runs another kernel
        for the fused pattern: SkipLayerNormalization is ~5x a plain LayerNormalization here).
        Unknown costs: NaN flops drop the compute term; NaN byte columns count as 0 (the others still
        count); a row with neither known gets the overhead alone. Classes the file has no parameters for
        use its fallback chain (e.g. recurrent -> matmul), then 'default'.
        include_dispatch: add ORT's per-kernel dispatch time (session wall time minus kernel time, per
        kernel) to each row that runs, so that sum(predict()) + dispatch['fixed_us'] estimates the session
        latency; False gives kernel time alone (what stage 01 reports per node)."""
        return self.predict_detail(df, peak_flops_per_s, mem_bw_bytes_per_s, fused, fused_into,
                                   include_dispatch=include_dispatch)["t_pred_us"].to_numpy()

    def factors(self, df: pd.DataFrame, peak_flops_per_s: float, mem_bw_bytes_per_s: float, fused=None,
                fused_into=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The prediction as per-node (ec, em, ovh) of lib/split/ranking.py's device model, t = ovh + max(F / (P ec),
        B / (W em)) with B = node_bytes (lib/analysis/roofline.py): efficiencies and overheads that do not depend on the
        device's peak P and bandwidth W, so the report's what-if panel can change those. Nodes that do not
        run (fused) get ovh 0 and efficiencies so large both terms vanish."""
        d = self.predict_detail(df, peak_flops_per_s, mem_bw_bytes_per_s, fused, fused_into)
        flops = np.nan_to_num(df["flops"].astype(float).to_numpy())
        nb = np.nan_to_num(node_bytes(df).to_numpy(float))
        tc, tm = d["t_compute_us"].to_numpy() * 1e-6, d["t_mem_us"].to_numpy() * 1e-6
        with np.errstate(divide="ignore", invalid="ignore"):
            ec = np.where(tc > 0, flops / (float(peak_flops_per_s) * tc), HUGE)
            em = np.where(tm > 0, nb / (float(mem_bw_bytes_per_s) * tm), HUGE)
        ovh = d["t_pred_us"].to_numpy() - np.maximum(tc, tm) * 1e6
        off = d["t_pred_us"].to_numpy() == 0
        return np.where(off | (ec <= 0), HUGE, ec), np.where(off | (em <= 0), HUGE, em), np.where(off, 0.0, ovh)

    def fitted_roofline(self) -> tuple[dict, float] | None:
        """(peak_flops_per_s table, mem_bw_bytes_per_s) the efficiencies were fitted against: the host's
        figures at calibration time. Predicting for the host itself, pass these (or host.yaml's, which are
        the same until someone edits it); for another device, pass that device's."""
        fa = self.meta.get("fitted_against")
        if not isinstance(fa, dict) or "peak_flops_per_s" not in fa or "mem_bw_bytes_per_s" not in fa:
            return None
        return dict(fa["peak_flops_per_s"]), float(fa["mem_bw_bytes_per_s"])

    def roofline_mismatch(self, peak_flops_per_s, mem_bw_bytes_per_s: float, tol: float = 0.01) -> str | None:
        """A one-line warning when the host figures given differ from those the model was fitted against
        (host.yaml edited or re-measured since `make calibrate`): predictions for the host then scale with
        the difference. None when they agree (or the file does not record them)."""
        fr = self.fitted_roofline()
        if fr is None:
            return None
        peaks, bw = fr
        given = peak_flops_per_s if isinstance(peak_flops_per_s, dict) else {"default": float(peak_flops_per_s)}
        off = [f"peak_flops_per_s.{k}" for k in ("default", "float") if k in given and k in peaks
               and abs(float(given[k]) / float(peaks[k]) - 1) > tol]
        if abs(float(mem_bw_bytes_per_s) / bw - 1) > tol:
            off.append("mem_bw_bytes_per_s")
        if not off:
            return None
        return (f"the latency model {self.path or ''} was fitted against other host figures ({', '.join(off)} "
                f"differ): re-run `make calibrate`, or predict with the model's own (LatencyModel.fitted_roofline())")

    def predict_total(self, df: pd.DataFrame, peak_flops_per_s, mem_bw_bytes_per_s: float,
                      fused: np.ndarray | None = None, fused_into=None) -> float:
        """Predicted session latency (us): the rows' sum with dispatch, plus the fixed per-run cost."""
        return float(self.predict(df, peak_flops_per_s, mem_bw_bytes_per_s, fused, fused_into).sum()
                     + float(self.dispatch.get("fixed_us", 0.0)))


# ------------------------------------------------------------------ reading and writing the file

HUGE = 1e30     # an efficiency that makes a term vanish (a node that does not run, or moves no modelled bytes)


def _bad(path, what: str) -> StageError:
    return StageError(f"latency model {path}: {what} (re-run `make calibrate`, or fix the file)")


def load_latency_model(path: str | Path) -> LatencyModel:
    """Read configs/latency_model.yaml (or a device's file of the same format); one-line StageError if bad."""
    path = Path(path)
    if not path.exists():
        raise StageError(f"latency model {path} not found: run `make calibrate` (python -m lib.latency.calibrate) first")
    try:
        data = load_yaml(path, "latency model")      # StageError unless valid YAML and a mapping
    except StageError as e:
        raise StageError(f"{e} (re-run `make calibrate`, or fix the file)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise _bad(path, f"unreadable ({type(e).__name__})") from None
    if data.get("format") != FORMAT:
        raise _bad(path, f"format is {data.get('format')!r}, expected {FORMAT!r}")
    params = data.get("params")
    if not isinstance(params, dict) or not params:
        raise _bad(path, "has no 'params' mapping of op-class keys")
    if "default" not in params:
        raise _bad(path, "params lack the 'default' key")
    clean = {}
    for k, p in params.items():
        if not isinstance(p, dict):
            raise _bad(path, f"params.{k} must be a mapping")
        q = {}
        for name in PARAMS:
            v = p.get(name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise _bad(path, f"params.{k}.{name} must be a number, got {v!r}")
            lo, hi = BOUNDS[name]
            if name == "overhead_us":
                lo = 0.0
            if not (lo <= v <= hi) or (name != "overhead_us" and v <= 0):
                raise _bad(path, f"params.{k}.{name} = {v} is outside [{lo:g}, {hi:g}]")
            q[name] = float(v)
        clean[str(k)] = {**p, **q}
    fallback = data.get("fallback", {}) or {}
    if not isinstance(fallback, dict) or not all(isinstance(v, str) for v in fallback.values()):
        raise _bad(path, "fallback must map class names to keys")
    dispatch = data.get("dispatch", {}) or {}
    if not isinstance(dispatch, dict):
        raise _bad(path, "dispatch must be a mapping (fixed_us, per_kernel_us)")
    disp = {}
    for name in ("fixed_us", "per_kernel_us"):
        v = dispatch.get(name, 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
            raise _bad(path, f"dispatch.{name} must be a number >= 0, got {v!r}")
        disp[name] = float(v)
    in_model = data.get("in_model", {}) or {}
    if not isinstance(in_model, dict) or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                                                 for v in in_model.values()):
        raise _bad(path, "in_model must map op classes to positive factors")
    meta = {k: v for k, v in data.items() if k not in ("params", "fallback", "dispatch", "in_model")}
    return LatencyModel(clean, {**DEFAULT_FALLBACK, **fallback}, disp, meta, str(path),
                        {str(k): float(v) for k, v in in_model.items()})


def model_for_device(device: dict, host_model: str | Path, base: str | Path | None = None) -> LatencyModel:
    """The efficiency file for a device entry of system.yaml: its own `latency_model:` path when it names one
    (relative to `base`, default the repo), else the host's file."""
    own = device.get("latency_model") if isinstance(device, dict) else None
    return load_latency_model(device_file(own, base) if own else host_model)


def device_file(path: str | Path, base: str | Path | None = None) -> Path:
    """A device's `latency_model:` path of system.yaml: as given when absolute, else relative to `base` (the repo)."""
    p = Path(path)
    return p if p.is_absolute() else Path(base or REPO) / p


def _num(v: float) -> float:
    return float(f"{v:.4g}")


def dump_yaml(model_doc: dict, path: str | Path, header: str = "") -> None:
    text = header + yaml.safe_dump(model_doc, sort_keys=False, default_flow_style=None, width=120)
    with atomic_path(Path(path)) as tmp:
        tmp.write_text(text)


# ------------------------------------------------------------------ fitting

def _lm(fun, x0: np.ndarray, max_iter: int = 200) -> np.ndarray:
    """Levenberg-Marquardt on a residual vector function (numeric Jacobian); returns the best x."""
    x = np.asarray(x0, float).copy()
    r = fun(x)
    cost = float(r @ r)
    lam = 1e-2
    for _ in range(max_iter):
        h = 1e-6 * (1.0 + np.abs(x))
        J = np.empty((r.size, x.size))
        for j in range(x.size):
            xp = x.copy()
            xp[j] += h[j]
            J[:, j] = (fun(xp) - r) / h[j]
        A = J.T @ J
        g = J.T @ r
        improved = False
        while lam < 1e10:
            try:
                dx = -np.linalg.solve(A + lam * (np.diag(np.diag(A)) + 1e-9 * np.eye(x.size)), g)
            except np.linalg.LinAlgError:
                lam *= 10
                continue
            rn = fun(x + dx)
            cn = float(rn @ rn)
            if np.isfinite(cn) and cn < cost:
                rel = (cost - cn) / max(cost, 1e-300)
                x, r, cost = x + dx, rn, cn
                lam = max(lam / 3, 1e-12)
                improved = True
                break
            lam *= 4
        if not improved or rel < 1e-10:
            break
    return x


def fit_key(flops: np.ndarray, nbytes: np.ndarray, peak: np.ndarray, bw: float, t_us: np.ndarray,
            huber: float = 0.25, fixed: dict | None = None) -> dict:
    """Fit the five parameters of one key to measured times (us) by robust least squares on log time.
    `fixed` pins parameters (e.g. nothing about compute can be learned from zero-FLOP ops)."""
    flops = np.nan_to_num(np.asarray(flops, float))
    nbytes = np.nan_to_num(np.asarray(nbytes, float))
    peak = np.asarray(peak, float)
    t_us = np.asarray(t_us, float)
    ok = t_us > 0
    flops, nbytes, peak, t_us = flops[ok], nbytes[ok], peak[ok], t_us[ok]
    fixed = dict(fixed or {})
    if not (flops > 0).any():
        fixed.update({"e_max": PRIOR["e_max"], "f_half": PRIOR["f_half"], "gamma": PRIOR["gamma"]})
    free = [k for k in PARAMS if k not in fixed]
    prior = np.log([PRIOR[k] for k in free])
    sig = np.array([PRIOR_SIGMA[k] for k in free])
    logt = np.log(t_us)
    w = np.ones_like(t_us)

    def params_of(z):
        p = dict(fixed)
        p.update({k: float(np.clip(np.exp(np.clip(v, -700, 700)), *BOUNDS[k])) for k, v in zip(free, z)})
        return p

    def resid(z):
        p = params_of(z)
        pred = model_time(p, flops, nbytes, peak, bw)
        return np.concatenate([np.sqrt(w) * (np.log(pred) - logt), (z - prior) / sig])

    # starting points from the data: small kernels give the overhead, large ones the rates
    big = t_us >= np.percentile(t_us, 60)
    o0 = max(float(np.min(t_us)) * 0.7, 0.1)
    with np.errstate(divide="ignore", invalid="ignore"):
        m0 = float(np.nanmedian(np.where(nbytes[big] > 0, nbytes[big] / (bw * t_us[big] * 1e-6), np.nan))) \
            if (nbytes[big] > 0).any() else PRIOR["m"]
        e0 = float(np.nanmax(np.where(flops > 0, flops / (peak * t_us * 1e-6), np.nan))) if (flops > 0).any() else PRIOR["e_max"]
    fh0 = float(np.median(flops[flops > 0])) if (flops > 0).any() else PRIOR["f_half"]
    starts = {}
    for e_mult in (1.0, 3.0):
        for fh_mult in (0.1, 10.0):
            s = {"overhead_us": o0, "e_max": np.clip(e0 * e_mult, 1e-3, 2.0), "f_half": max(fh0 * fh_mult, 1.0),
                 "gamma": 1.0, "m": np.clip(m0 if np.isfinite(m0) else PRIOR["m"], 1e-3, 20.0)}
            z0 = np.log([s[k] for k in free])
            starts[tuple(np.round(z0, 6))] = z0
    best, best_cost = None, np.inf
    for z0 in starts.values():
        w = np.ones_like(t_us)
        z = z0
        for _ in range(3):                   # IRLS: Huber weights on the log residuals
            z = _lm(resid, z)
            r = np.abs(np.log(model_time(params_of(z), flops, nbytes, peak, bw)) - logt)
            w = np.where(r <= huber, 1.0, huber / np.maximum(r, 1e-12))
        c = float(np.sum(np.minimum(r, huber) ** 2 + np.where(r > huber, 2 * huber * (r - huber), 0.0)))
        if c < best_cost:
            best, best_cost = z, c
    return params_of(best)


def rel_errors(pred: np.ndarray, meas: np.ndarray) -> np.ndarray:
    return np.abs(np.asarray(pred, float) / np.asarray(meas, float) - 1.0)


def _err_summary(e: np.ndarray) -> dict:
    if len(e) == 0:
        return {"n": 0}
    return {"n": int(len(e)), "median": round(float(np.median(e)), 3), "worst": round(float(np.max(e)), 3)}


def training_rows(bench: pd.DataFrame, target: str = "t_fit_us") -> pd.DataFrame:
    """The micro-benchmark rows a fit can use: nodes that ran their own kernel with a known cost and time."""
    d = bench[(bench["attribution"] == "kernel") & (bench[target] > 0)].copy()
    d = d[d["flops"].notna()]
    return d


def fit_rows_(d: pd.DataFrame, target: str, bw: float) -> dict:
    p = fit_key(d["flops"].to_numpy(float), d["_bytes"].to_numpy(float), d["_peak"].to_numpy(float), bw,
                d[target].to_numpy(float))
    p["n_train"] = int(len(d))
    return p


def _fit_tables(bench: pd.DataFrame, target: str, peak_flops_per_s) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The training and the held-out rows, with what the fit keys them by: _bytes, _peak, _cls, _int8,
    _ckey (the class key, int8 apart), _op, _anchor (some node is fused into it) and _fkey (an anchor's
    '<class>/<op>+fused' key, '' for the others)."""
    rows = training_rows(bench, target)
    train = rows[rows["split"] == "train"].copy()
    held = rows[rows["split"] != "train"].copy()
    for d in (train, held):
        d["_bytes"], _ = traffic_bytes(d)
        d["_peak"] = peak_per_row(d, peak_flops_per_s)
        d["_cls"] = d["op_class"].fillna("other")
        d["_int8"] = [_is_int8(_op_name(o), m) for o, m in zip(d["op_type"], d.get("mac_dtype", [""] * len(d)))]
        d["_ckey"] = [f"{c}@int8" if i else c for c, i in zip(d["_cls"], d["_int8"])]
        d["_op"] = d["op_type"].astype(str).map(_op_name)
        d["_anchor"] = anchors_of(d, bench["fused_into"] if "fused_into" in bench else None)
        d["_fkey"] = np.where(d["_anchor"], d["_cls"] + "/" + d["_op"] + "+fused", "")
    return train, held


def _fit_fused(train: pd.DataFrame, held: pd.DataFrame, target: str, bw: float,
               min_points: int) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """Anchors of a fused pattern run ORT's fused kernel: their own key when there are enough of them, which
    then is those rows' class key. Returns (the fused keys' parameters, train, held)."""
    params: dict[str, dict] = {}
    counts = train.loc[train["_fkey"] != "", "_fkey"].value_counts()
    for key, cnt in counts.items():
        if cnt >= min_points:
            params[key] = fit_rows_(train[train["_fkey"] == key], target, bw)
    fused = set(params)
    train = train.assign(_ckey=np.where(train["_fkey"].isin(fused), train["_fkey"], train["_ckey"]))
    held = held.assign(_ckey=np.where(held["_fkey"].isin(fused), held["_fkey"], held["_ckey"]))
    return params, train, held


def _fit_classes(params: dict, train: pd.DataFrame, target: str, bw: float, min_points: int) -> None:
    """Into `params` (the fused keys already there): every class key with enough rows, the per-op
    refinements, and the default."""
    fused_keys = set(params)
    for key, d in train.groupby("_ckey"):
        if len(d) >= min_points and key not in params:
            params[key] = fit_rows_(d, target, bw)
    # refinements: an op type the class model misses by more than REFINE_MISS (median) gets its own model
    for (key, op), d in train.groupby(["_ckey", "_op"]):
        if key not in params or key in fused_keys or len(d) < REFINE_MIN_POINTS:
            continue
        if train.loc[train["_ckey"] == key, "_op"].nunique() == 1:
            continue
        pred = model_time(params[key], d["flops"].to_numpy(float), d["_bytes"].to_numpy(float),
                          d["_peak"].to_numpy(float), bw)
        if np.median(rel_errors(pred, d[target])) > REFINE_MISS:
            params[f"{key.split('@')[0]}/{op}"] = fit_rows_(d, target, bw)
    # default: every fp32 non-MAC row (what an op of unknown class most likely is: a memory-bound kernel)
    pool = train[~train["_int8"] & ~train["_anchor"]
                 & ~train["_cls"].isin(["conv", "conv_depthwise", "conv_grouped", "gemm", "matmul"])]
    params["default"] = fit_rows_(pool if len(pool) >= min_points else train, target, bw)


def _fit_report(model: LatencyModel, tables: dict[str, pd.DataFrame], target: str, peak_flops_per_s, bw: float,
                fused_into) -> dict:
    """The fit's error per class key and per key used, overall, and the worst rows, of each table."""
    report = {"by_class": {}, "by_key": {}}
    for name, d in tables.items():
        if not len(d):
            continue
        det = model.predict_detail(d, peak_flops_per_s, bw, None, fused_into, include_dispatch=False)
        d = d.assign(_key=det["key"].to_numpy(), _err=rel_errors(det["t_pred_us"].to_numpy(), d[target].to_numpy()))
        for c, g in d.groupby("_ckey"):
            report["by_class"].setdefault(c, {})[name] = _err_summary(g["_err"].to_numpy())
        for k, g in d.groupby("_key"):
            report["by_key"].setdefault(k, {})[name] = _err_summary(g["_err"].to_numpy())
        report.setdefault("all", {})[name] = _err_summary(d["_err"].to_numpy())
        worst = d.sort_values("_err", ascending=False).head(5)
        report.setdefault("worst", {})[name] = [
            {"label": str(r["label"]), "op_type": str(r["op_type"]), "key": str(r["_key"]),
             "measured_us": round(float(r[target]), 1), "err": round(float(r["_err"]), 3)} for _, r in worst.iterrows()]
    return report


def fit(bench: pd.DataFrame, peak_flops_per_s, mem_bw_bytes_per_s: float, target: str = "t_fit_us",
        dispatch: dict | None = None, min_points: int = 3) -> tuple[LatencyModel, dict]:
    """Fit every key on the training rows of a micro-benchmark table (microbench.run_cases output) and
    report the fit's error per class and key on the training rows and on the held-out rows."""
    bw = float(mem_bw_bytes_per_s)
    train, held = _fit_tables(bench, target, peak_flops_per_s)
    params, train, held = _fit_fused(train, held, target, bw, min_points)
    _fit_classes(params, train, target, bw, min_points)
    model = LatencyModel({k: {**v} for k, v in params.items()}, dict(DEFAULT_FALLBACK),
                         dispatch or {"fixed_us": 0.0, "per_kernel_us": 0.0})
    report = _fit_report(model, {"train": train, "heldout": held}, target, peak_flops_per_s, bw,
                         bench["fused_into"] if "fused_into" in bench else None)
    for k in model.params:
        model.params[k]["fit_error"] = report["by_key"].get(k, {})
    return model, report


def model_document(model: LatencyModel, meta: dict) -> dict:
    """The YAML document of a fitted model (params rounded to 4 significant digits)."""
    params = {}
    for k in sorted(model.params, key=lambda s: (s == "default", s)):
        p = model.params[k]
        params[k] = {**{n: _num(p[n]) for n in PARAMS}, "n_train": int(p.get("n_train", 0)),
                     "fit_error": p.get("fit_error", {})}
    return {"format": FORMAT, **meta, "dispatch": {k: _num(float(v)) for k, v in model.dispatch.items()
                                                   if k in ("fixed_us", "per_kernel_us")},
            "in_model": {k: _num(float(v)) for k, v in sorted(model.in_model.items())},
            "fallback": dict(model.fallback), "params": params}


def in_model_factors(model: "LatencyModel", runs: list[tuple[pd.DataFrame, pd.DataFrame]], host: dict,
                     lo: float = 0.5, hi: float = 8.0, min_nodes: int = 5) -> dict[str, float]:
    """Per op class: measured / predicted kernel time, pooled over whole calibration models (stage 02's table
    and stage 01's latency of each), the nodes ORT fuses counted in their anchor's class. A class needs
    `min_nodes` kernels that run and 100 us of predicted time: one classifier Gemm says nothing about GPT-2's."""
    meas, pred, count = {}, {}, {}
    for metrics, latency in runs:
        df = metrics.merge(latency[["node", "latency_us", "attribution", "fused_into"]], on="node")
        fused = df["attribution"].isin(["fused", "not_run"]).to_numpy()
        t = model.predict(df, host["peak_flops_per_s"], host["mem_bw_bytes_per_s"], fused, df["fused_into"],
                          include_dispatch=False)
        for cls, m, p, f in zip(df["op_class"], df["latency_us"].fillna(0.0), t, fused):
            meas[cls] = meas.get(cls, 0.0) + float(m)
            pred[cls] = pred.get(cls, 0.0) + float(p)
            count[cls] = count.get(cls, 0) + int(not f)
    return {c: float(np.clip(meas[c] / pred[c], lo, hi)) for c in meas if pred[c] >= 100.0 and count[c] >= min_nodes}


# ------------------------------------------------------------------ which nodes ORT fuses away

def ort_node_roles(model_path: str | Path, overrides: list[str] | None = None, workload: str | Path | None = None,
                   preset: str | None = None, *, threads: int = 0, opt_level: str = "all", graph=None) -> pd.DataFrame:
    """Per original node: attribution (kernel / fused / not_run) and fused_into, as stage 01 would record
    them, from ORT's optimized graph alone (no profiling run): the session is created with stage 01's
    options, its optimized model saved, and stage 01's attribution code (lib.latency.profiling.latency_table) maps
    every optimized node onto the original ones."""
    g = graph if graph is not None else graph_of_path(model_path, overrides, workload, preset)
    with tempfile.TemporaryDirectory(prefix="ortopt_") as tmp:
        opt_path = os.path.join(tmp, "optimized.onnx")
        sess = _session(str(model_path), "cpu", threads, opt_level, os.path.join(tmp, "prof"), opt_path)
        try:
            sess.end_profiling()
        except Exception:  # noqa: BLE001 - nothing was profiled; the file may not exist
            pass
        del sess
        optimized = onnx.load(opt_path, load_external_data=False)
    names = [n.name for n in name_nodes(optimized).graph.node]
    prof = {"per_run": [{k: 1.0 for k in names}], "optimized": optimized}
    df, _ = latency_table(g, prof)
    return df[["node", "op_type", "attribution", "fused_into"]]


def fused_from_ort(model_path: str | Path, feeds=None, overrides: list[str] | None = None,
                   workload: str | Path | None = None, preset: str | None = None, *, threads: int = 0,
                   include_removed: bool = True) -> set[str]:
    """Original node names ORT would fuse away (run inside a neighbour's kernel), and with include_removed
    also those it removes (constant folding, Identity/Dropout elimination): the nodes that predict() must
    give 0. From ORT's optimized graph without profiling (see ort_node_roles). `feeds` is accepted for
    symmetry with stage 01 and unused: ORT optimizes at session creation, before any input is seen; input
    shapes come from overrides / preset / workload as in stages 01-02."""
    roles = ort_node_roles(model_path, overrides, workload, preset, threads=threads)
    keep = {"fused", "not_run"} if include_removed else {"fused"}
    return set(roles.loc[roles["attribution"].isin(keep), "node"])


def predict_profile(df: pd.DataFrame, host: dict, model_file: str | Path) -> tuple[np.ndarray, dict]:
    """Stage 03's prediction: t_pred_us per node of an ops_profile table on this host (fused nodes, known from
    its attribution column, 0) and the session latency it adds up to; without a latency model file, the
    roofline (a lower bound), said so in the summary."""
    att = df["attribution"].fillna("").astype(str)
    fused = att.isin(["fused", "not_run"]).to_numpy()
    if not Path(model_file).exists():
        t = np.where(fused, 0.0, known_or_zero(df["t_roofline_us"])[0])
        return t, {"model": None, "predicted_latency_us": float(t.sum()),
                   "note": f"no latency model ({model_file}: run make calibrate): roofline time, a lower bound"}
    lm = load_latency_model(model_file)
    t = lm.predict(df, host["peak_flops_per_s"], host["mem_bw_bytes_per_s"], fused, df["fused_into"])
    return t, {"model": str(model_file), "predicted_latency_us": float(t.sum() + lm.dispatch.get("fixed_us", 0.0)),
               "note": lm.roofline_mismatch(host["peak_flops_per_s"], host["mem_bw_bytes_per_s"]) or ""}
