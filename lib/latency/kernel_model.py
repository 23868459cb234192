"""The kernel model: per ORT kernel, time = its roofline bound x a learned slowdown >= 1; a session = the kernels'
sum plus what happens between them.

Per kernel (lib/latency/kernels.py's table): bounds() gives the cache-aware roofline bound (lib/analysis/roofline.py:
FLOPs at the compute dtype's peak, bytes through the memory levels, each serving at most its size). features() are
what a kernel's time depends on: its op, the number of nodes fused into it, compute dtype, dims, FLOPs, bytes,
weight bytes, arithmetic intensity, memory level, threads, the stride of the axis a Softmax or Reduce* works along,
the share of a Softmax's 16-value runs holding an exponential that underflows float32 and the share of subnormal
values a kernel reads or writes (stage 02 measures both on the inputs: masks make ORT's exp ~10x slower; a multiply-add on a subnormal can
take ~100x).
A LightGBM regressor (gradient-boosted trees, as nn-Meter keeps per kernel type; categorical splits on op/dtype/
memory level, so one model serves all types) learns
y = log(t / max(bound, 1 us x steps)); the prediction max(bound, max(bound, 1 us x steps) x e^y) is never below the
bound (the utilisation stays in (0, 1], as in NeuSight). steps is 1, except for an RNN: its sequence length x
directions, the steps it runs one after another.

Kernel types (op/compute dtype) the training never saw are flagged `seen = False`. The interval of a kernel
comes from the held-out (leave-one-family-out) residual quantiles of its type (of all kernels for a type with
few residuals); a session's interval adds the kernels' ends.

Session latency = (1 + a) x sum(kernels) + b x n_kernels, a and b fitted by least squares on the training models'
sessions (scipy lsq_linear): the thread-pool start, dispatch and session overhead between kernels, less what ORT's
profiler adds to each kernel it times (the session is timed with the profiler off, the kernels with it on).
The target is each model's median session latency, the figure stage 01 reports and a prediction is scored
against: a run's kernels are not all at their median at once, and the medians of the runs' sums ran 1-6% above the
sums of the kernels' medians (plus the median time outside the kernels) on 19 unseen models; `a` holds that skew.

The model is saved with the host figures its bounds were computed from (`host`): a model `make calibrate` wrote on
another device predicts that device's kernels here (stage 07, lib/split/ranking.py).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

from lib import cli
from lib.analysis.roofline import LEVELS, bound_us, recurrent_reread_us, rnn_dims
from lib.artifacts import atomic_path, load_yaml
from lib.errors import StageError
from lib.host import per_dtype

# not the fused pattern: its strings are model-specific (Conv+Sigmoid, MatMul+Add+Mod+Add), an unseen one falls on an
# arbitrary side of every categorical split (held out by family, such models were predicted tens of percent off)
CATEGORICAL = ["op", "compute_dtype", "mem_level"]
NUMERIC = ["log_flops", "log_bytes", "log_weight", "log_numel", "log_ai", "log_bound", "n_nodes", "rank",
           "d1", "d2", "d3", "d4", "layout", "threads", "level", "micro", "log_stride", "exp_underflow",
           "subnormal"]
FLOOR_US = 1.0          # the profiler's resolution: the base of the target for kernels whose bound is below it
MIN_T_US = 0.5          # a kernel recorded as 0 us ran for under a microsecond
PARAMS = {"objective": "regression", "learning_rate": 0.05, "num_leaves": 31, "min_data_in_leaf": 20,
          "feature_fraction": 0.9, "bagging_fraction": 0.9, "bagging_freq": 1, "lambda_l2": 1.0,
          "max_cat_to_onehot": 8, "cat_smooth": 5, "min_data_per_group": 5, "verbose": -1, "num_threads": 1,
          "deterministic": True, "seed": 0}
ROUNDS = 400
# one thread: LightGBM's OpenMP threads spin-wait, and on a machine shared with other work 2 threads were
# measured 25x slower than 1 (127 s against 5.5 s for one fit)
QUANTILES = (0.1, 0.9)
# the host figures the bounds (so the features) are computed from: saved with the model, so that a model made by
# `make calibrate` on another device predicts that device's kernels (lib/split/ranking.py)
HOST_FIGURES = ("peak_flops_per_s", "caches_bytes", "bandwidth_bytes_per_s", "mem_bw_bytes_per_s")
RESIDUAL_CAP = float(np.log(4.0))   # a held-out residual past 4x is a descheduled run on a shared machine, not the type


def kernel_type(kt: pd.DataFrame) -> pd.Series:
    return kt["op"].astype(str) + "/" + kt["compute_dtype"].astype(str)


def kernel_kind(kt: pd.DataFrame) -> pd.Series:
    """Op, and whether it works along a strided axis (a Softmax over channels is another kernel than over rows)."""
    return kt["op"].astype(str) + np.where(kt["axis_stride"].to_numpy(float) > 1, "/strided", "")


def bounds(kt: pd.DataFrame, host: dict) -> tuple[np.ndarray, np.ndarray]:
    """(bound in us, memory level) per kernel: no kernel can run faster on this host."""
    peaks = host["peak_flops_per_s"]
    peak = np.array([per_dtype(peaks, d) for d in kt["compute_dtype"].astype(str)], dtype=float)
    flops = np.nan_to_num(kt["flops"].to_numpy(float))
    nbytes = np.nan_to_num(kt["bytes"].to_numpy(float))
    reread = recurrent_reread_us(kt["op"].to_numpy(object), kt["dims"].fillna("").to_numpy(object), host)
    return bound_us(flops, nbytes, peak, host, reread)


def _dims(text: str) -> list[float]:
    try:
        d = [float(x) for x in str(text).split("x") if x]
    except ValueError:
        d = []
    return [len(d)] + ([1.0] * 4 + d)[-4:]


def _lightgbm():
    """LightGBM, imported when a model is fitted or loaded (stages that use no kernel model need not pay for it);
    in a stage process without its scikit-learn API, which this module does not use: LightGBM imports
    scikit-learn when it can (and scikit-learn scipy.stats), 2 of the 3 s its import took, paid by every stage 03
    and 07 on every model. Not in other processes: LightGBM's LGBMClassifier & co. would then refuse to work."""
    if cli.IN_STAGE and "lightgbm" not in sys.modules and "sklearn" not in sys.modules:
        sys.modules["sklearn"] = None        # import sklearn raises ImportError: LightGBM goes on without it
        try:
            import lightgbm  # noqa: F401
        finally:
            del sys.modules["sklearn"]
    import lightgbm
    return lightgbm


def features(kt: pd.DataFrame, host: dict, threads: int) -> tuple[pd.DataFrame, np.ndarray]:
    """(the feature table, the bound in us) of a kernel table with its `micro` column (1: a kernel run alone)."""
    b, level = bounds(kt, host)
    flops = np.nan_to_num(kt["flops"].to_numpy(float))
    nbytes = np.nan_to_num(kt["bytes"].to_numpy(float))
    dims = np.array([_dims(d) for d in kt["dims"].fillna("")], dtype=float).reshape(len(kt), 5)
    f = pd.DataFrame({
        "op": kt["op"].astype(str).to_numpy(), "pattern": kt["pattern"].astype(str).to_numpy(),
        "compute_dtype": kt["compute_dtype"].astype(str).to_numpy(), "mem_level": level,
        "log_flops": np.log1p(flops), "log_bytes": np.log1p(nbytes),
        "log_weight": np.log1p(np.nan_to_num(kt["weight_bytes"].to_numpy(float))),
        "log_numel": np.log1p(np.nan_to_num(kt["out_numel"].to_numpy(float))),
        "log_ai": np.log1p(flops / np.maximum(nbytes, 1.0)), "log_bound": np.log(np.maximum(b, 1e-3)),
        "n_nodes": kt["n_nodes"].to_numpy(float), "rank": dims[:, 0], "d1": np.log1p(dims[:, 1]),
        "d2": np.log1p(dims[:, 2]), "d3": np.log1p(dims[:, 3]), "d4": np.log1p(dims[:, 4]),
        "layout": kt["layout"].astype(bool).to_numpy(float), "threads": float(threads),
        "level": np.array([LEVELS.index(x) for x in level], dtype=float),
        # a micro-benchmark's kernel runs alone (caches warm, no neighbours): the trees learn the offset; a
        # prediction is for a kernel inside a model (0) where models ran its kind (KernelModel.predict_kernels)
        "micro": kt["micro"].to_numpy(float),
        # a Softmax or Reduce* along a non-last axis reads strided (up to 30x the time of the last axis)
        "log_stride": np.log(np.maximum(kt["axis_stride"].to_numpy(float), 1.0)),
        # the share of a Softmax's 16-value runs whose exponential underflows (lib/onnx/underflow.py: ~10x per
        # vector; NaN, LightGBM's missing, where not measured) and of subnormal values it reads or writes
        "exp_underflow": kt["exp_underflow"].to_numpy(float), "subnormal": kt["subnormal"].to_numpy(float)})
    return f, b


def _categorize(f: pd.DataFrame, categories: dict[str, list[str]]) -> pd.DataFrame:
    f = f.copy()
    for c in CATEGORICAL:
        known = f[c].where(f[c].isin(categories[c]))          # unseen values: NaN (LightGBM's missing)
        f[c] = pd.Categorical(known, categories=categories[c])
    return f[CATEGORICAL + NUMERIC]


def sequential_steps(kt: pd.DataFrame) -> np.ndarray:
    """Per kernel, the steps it runs one after another: an RNN's sequence length x directions (rnn_dims), 1 for
    any other kernel. An RNN runs its steps one after another, each a few small GEMMs: its base is FLOOR_US per
    step, so the trees learn its time per step (held out by family, a GRU was predicted 2.2x its time as a multiple
    of its FLOP bound)."""
    steps, dirs, _ = rnn_dims(kt["op"].to_numpy(object), kt["dims"].fillna("").to_numpy(object))
    return np.where(steps > 0, steps * dirs, 1.0)


def target(t_us, bound, steps=1.0) -> np.ndarray:
    return np.log(np.maximum(np.asarray(t_us, float), MIN_T_US) / np.maximum(bound, FLOOR_US * steps))


def from_target(y, bound, steps=1.0) -> np.ndarray:
    return np.maximum(bound, np.maximum(bound, FLOOR_US * steps) * np.exp(y))


def fit_overhead(kernel_sum_us, n_kernels, session_us) -> dict[str, float]:
    """a, b of session = (1 + a) x sum + b x n (least squares, relative weights; a >= -0.5). The kernel times are
    the profiler's, the session is timed with the profiler off (lib/latency/profiling.py): b is what happens between
    kernels less what the profiler adds to each, and can be negative. No constant: the training models pin it down
    poorly (on one set of records 7.9 us, and 56 us with the recurrent family held out, which put lstm2 and gru2,
    0.4-0.5 ms, 12-16% over their sessions on their own kernel times; 2% without)."""
    from scipy.optimize import lsq_linear   # here: scipy.optimize's import is 0.4 s of every stage that predicts
    s, n, y = (np.asarray(v, float) for v in (kernel_sum_us, n_kernels, session_us))
    w = 1.0 / np.maximum(y, 1.0)        # relative error: a 50 ms model does not drown a 1 ms one
    fit = lsq_linear(np.column_stack([s, n]) * w[:, None], (y - s) * w, bounds=([-0.5, -np.inf], [np.inf, np.inf]))
    return {"a": float(fit.x[0]), "b_us": float(fit.x[1])}


class KernelModel:
    """A fitted kernel model (see the module docstring); `families`: those it was trained on."""

    def __init__(self, booster, categories: dict, seen: list[str], residuals: dict,
                 overhead: dict, families: list[str], threads: int, host: dict | None = None,
                 model_kinds: list[str] | None = None):
        self.booster, self.categories, self.seen = booster, categories, set(seen)
        self.residuals, self.overhead, self.families, self.threads = residuals, overhead, families, threads
        self.host = host        # HOST_FIGURES it was fitted with (None: a file written before they were saved)
        # kernel_kind()s the training models ran (None, a file written before they were saved: all of them)
        self.model_kinds = None if model_kinds is None else set(model_kinds)

    @classmethod
    def fit(cls, records: list[dict], host: dict, threads: int = 0, rounds: int = ROUNDS) -> "KernelModel":
        """records: {"model", "family", "kernels" (a kernel table with t_us), "session_us" (None for micro-
        benchmarks: kernels only)}."""
        kt = pd.concat([r["kernels"].assign(micro=float(r["family"] == "micro")) for r in records], ignore_index=True)
        kt = kt[kt["t_us"].notna()]
        f, b = features(kt, host, threads)
        categories = {c: sorted(set(f[c].astype(str))) for c in CATEGORICAL}
        y = target(kt["t_us"], b, sequential_steps(kt))
        w = np.sqrt(np.maximum(kt["t_us"].to_numpy(float), 1.0))   # the kernels that make a session's time count more
        lgb = _lightgbm()
        booster = lgb.train(PARAMS, lgb.Dataset(_categorize(f, categories), y, weight=w,
                                                categorical_feature=CATEGORICAL), num_boost_round=rounds)
        model = cls(booster, categories, sorted(set(kernel_type(kt))), {}, {"a": 0.0, "b_us": 0.0},
                    sorted({r["family"] for r in records}), threads,
                    {k: host[k] for k in HOST_FIGURES if k in host}, sorted(set(kernel_kind(kt[kt["micro"] == 0]))))
        model.residuals = residual_quantiles(kernel_type(kt), y - booster.predict(_categorize(f, categories)))
        sessions = [r for r in records if r.get("session_us")]
        if sessions:
            model.overhead = fit_overhead([r["kernels"]["t_us"].sum() for r in sessions],
                                          [len(r["kernels"]) for r in sessions], [r["session_us"] for r in sessions])
        return model

    def predict_kernels(self, kt: pd.DataFrame, host: dict) -> pd.DataFrame:
        """Per kernel: bound_us, mem_level, pred_us, lo_us, hi_us, seen. A kernel of a kind no training model ran
        (LRN, a Softmax over channels: micro-benchmarks only) is predicted as its micro-benchmarks ran: the
        in-model offset the trees learned from other kinds put GoogLeNet's LRN at 0.5x of its measured time."""
        alone = np.zeros(len(kt)) if self.model_kinds is None else (~kernel_kind(kt).isin(self.model_kinds)).astype(float)
        f, b = features(kt.assign(micro=alone), host, self.threads)
        y = self.booster.predict(_categorize(f, self.categories)) if len(kt) else np.zeros(0)
        steps = sequential_steps(kt)
        types = kernel_type(kt)
        q = np.array([self.residuals.get(t, self.residuals.get("*", [0.0, 0.0])) for t in types], float).reshape(-1, 2)
        return pd.DataFrame({"kernel": kt["kernel"].to_numpy(), "type": types.to_numpy(), "bound_us": b,
                             "mem_level": f["mem_level"].to_numpy(), "pred_us": from_target(y, b, steps),
                             # the interval always holds the prediction (held-out residuals of a type can all
                             # lie on one side of it)
                             "lo_us": from_target(y + np.minimum(q[:, 0], 0.0), b, steps),
                             "hi_us": from_target(y + np.maximum(q[:, 1], 0.0), b, steps),
                             "seen": types.isin(self.seen).to_numpy()})

    def with_overhead(self, kernel_us, n_kernels=1):
        """Kernel time with what happens between kernels: (1 + a) x kernel_us + b x n_kernels (a session from its
        kernels' sum and count; per kernel, n_kernels = 1, element-wise)."""
        return (1 + self.overhead["a"]) * kernel_us + self.overhead["b_us"] * n_kernels

    def session(self, per_kernel: pd.DataFrame) -> dict:
        """The session's predicted latency and interval from predict_kernels()' table, never below the kernels'
        bounds: the overhead per kernel is negative (the profiler's own share of each kernel time), and 3,000 tiny
        kernels gave an interval from -3.3 ms."""
        n, bound = len(per_kernel), float(per_kernel["bound_us"].sum())

        def total(s):
            return max(float(self.with_overhead(s, n)), bound)
        unseen = sorted(set(per_kernel.loc[~per_kernel["seen"], "type"]))
        return {"predicted_latency_us": total(per_kernel["pred_us"].sum()),
                "interval_us": [total(per_kernel["lo_us"].sum()), total(per_kernel["hi_us"].sum())],
                "bound_us": bound, "kernels": n, "unseen_kernel_types": unseen}

    def predict_session(self, kt: pd.DataFrame, host: dict) -> dict:
        return self.session(self.predict_kernels(kt, host))

    def document(self, model_file: str) -> dict:
        return {"file": model_file, "families": self.families, "threads": self.threads, "overhead": self.overhead,
                "host": _plain(self.host),
                "categories": self.categories, "seen_kernel_types": sorted(self.seen),
                "model_kernel_kinds": None if self.model_kinds is None else sorted(self.model_kinds),
                "residual_quantiles": {k: [round(float(x), 4) for x in v] for k, v in sorted(self.residuals.items())}}

    def save(self, path: str | Path) -> None:
        with atomic_path(Path(path)) as tmp:
            self.booster.save_model(str(tmp))

    @classmethod
    def load(cls, doc: dict, base: str | Path) -> "KernelModel":
        booster = _lightgbm().Booster(model_file=str(Path(base) / doc["file"]))
        if booster.feature_name() != CATEGORICAL + NUMERIC:
            raise StageError(f"{doc['file']} was fitted on other features ({len(booster.feature_name())}) than this "
                             f"version computes: re-run make calibrate")
        kinds = doc.get("model_kernel_kinds")
        if kinds is not None and not (isinstance(kinds, list) and all(isinstance(k, str) for k in kinds)):
            raise TypeError(f"model_kernel_kinds is {kinds!r}, not a list of kernel kinds")
        return cls(booster, doc["categories"], doc["seen_kernel_types"],
                   {k: list(v) for k, v in doc["residual_quantiles"].items()}, doc["overhead"], doc["families"],
                   int(doc.get("threads", 0)), doc.get("host"), kinds)


def _plain(v, key: str = ""):
    """YAML-safe copy of host figures as the host file writes them (03 predicts this host from that file: the same
    figures): cache sizes exact, the others to 4 significant digits."""
    if isinstance(v, dict):
        return {str(k): _plain(x, key or str(k)) for k, x in v.items()}
    if v is None:
        return None
    return int(v) if key == "caches_bytes" else float(f"{float(v):.4g}")


def residual_quantiles(types: pd.Series, resid: np.ndarray, min_n: int = 8) -> dict[str, list[float]]:
    """Per kernel type the QUANTILES of log residuals (measured / predicted), "*" for all of them; a type with
    fewer than min_n residuals takes "*"."""
    d = pd.DataFrame({"t": np.asarray(types), "r": np.clip(np.asarray(resid, float), -RESIDUAL_CAP, RESIDUAL_CAP)})
    out = {"*": [float(np.quantile(d["r"], q)) for q in QUANTILES] if len(d) else [0.0, 0.0]}
    for t, g in d.groupby("t"):
        if len(g) >= min_n:
            out[str(t)] = [float(np.quantile(g["r"], q)) for q in QUANTILES]
    return out


def leave_one_family_out(records: list[dict], host: dict, threads: int = 0,
                         rounds: int = ROUNDS) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Each family's models predicted by a model trained on the other families (micro-benchmark records, with
    no session, always train). Returns (per model: model, family, measured_us, predicted_us, lo_us, hi_us,
    unseen, the kernel sums measured and predicted, and overhead_only_us: the session model alone, on the kernel
    times measured; per held-out kernel: type, log residual). A family's interval, as make calibrate's model
    gives it, comes from the held-out residuals of the other families (a fit's own residuals are its training
    fit: those intervals held 28 of 41 models)."""
    families = sorted({r["family"] for r in records if r.get("session_us")})
    rows, resid, fitted, held = [], [], {}, []
    for fam in families:
        train = [r for r in records if r["family"] != fam]
        if not any(r.get("session_us") for r in train):
            continue
        fitted[fam] = km = KernelModel.fit(train, host, threads, rounds)
        for r in records:
            if r["family"] != fam or not r.get("session_us"):
                continue
            per = km.predict_kernels(r["kernels"], host)
            s = km.session(per)
            held.append(r)
            rows.append({"model": r["model"], "family": fam, "measured_us": r["session_us"],
                         "predicted_us": s["predicted_latency_us"], "unseen": len(s["unseen_kernel_types"]),
                         "measured_kernel_us": float(r["kernels"]["t_us"].sum()),
                         "predicted_kernel_us": float(per["pred_us"].sum()),
                         "overhead_only_us": float(km.with_overhead(r["kernels"]["t_us"].sum(), len(per)))})
            t = r["kernels"]["t_us"].to_numpy(float)
            ok = ~np.isnan(t)
            resid.append(pd.DataFrame({"type": per["type"][ok], "family": fam, "model": r["model"],
                                       "r": np.log(np.maximum(t[ok], MIN_T_US) / per["pred_us"].to_numpy()[ok])}))
    resid = pd.concat(resid, ignore_index=True) if resid else pd.DataFrame(columns=["type", "family", "model", "r"])
    for fam, km in fitted.items():
        other = resid[resid["family"] != fam]
        if len(other):
            km.residuals = residual_quantiles(other["type"], other["r"].to_numpy(float))
    for row, r in zip(rows, held):
        km = fitted[r["family"]]
        row["lo_us"], row["hi_us"] = km.session(km.predict_kernels(r["kernels"], host))["interval_us"]
    return pd.DataFrame(rows), resid


def _score(err: np.ndarray, inside: np.ndarray | None) -> dict:
    e = np.abs(err)
    sc = {"n": int(len(e)), "within_5": float(np.mean(e <= 0.05)) if len(e) else None,
          "within_10": float(np.mean(e <= 0.10)) if len(e) else None,
          "mape": float(np.mean(e)) if len(e) else None,
          "rmspe": float(np.sqrt(np.mean(err ** 2))) if len(e) else None,
          "median_abs": float(np.median(e)) if len(e) else None}
    if inside is not None:      # how sure the interval says it is, checked: the share measured inside it
        sc["in_interval"] = float(np.mean(inside)) if len(e) else None
    return sc


def scores(df: pd.DataFrame, column: str = "predicted_us", measured: str = "measured_us") -> dict:
    """Share within 5% and 10%, MAPE, RMSPE, median |error| of `column` against `measured`: all, per family; for
    the session prediction with its interval (lo_us, hi_us), the share measured inside the interval."""
    m = df[measured].to_numpy(float)
    err = df[column].to_numpy(float) / m - 1
    inside = ((df["lo_us"].to_numpy(float) <= m) & (m <= df["hi_us"].to_numpy(float))
              if column == "predicted_us" and {"lo_us", "hi_us"} <= set(df.columns) else None)
    return {"all": _score(err, inside), "by_family": {
        str(f): _score(err[sel], None if inside is None else inside[sel])
        for f in sorted(df["family"].unique()) for sel in [(df["family"] == f).to_numpy()]}}


def load_kernel_model(latency_model_file: str | Path) -> KernelModel | None:
    """The kernel model a latency model file names in its `kernel_model` section (its LightGBM text file beside
    it); None when the file or the section is missing (a file calibrated before the kernel model)."""
    path = Path(latency_model_file)
    if not path.exists():
        return None
    doc = load_yaml(path, "latency model").get("kernel_model")
    if not doc:
        return None
    if not (path.parent / str(doc.get("file", ""))).exists():
        raise StageError(f"{path}: its kernel model file {doc.get('file')} is missing beside it: re-run make calibrate")
    try:
        return KernelModel.load(doc, path.parent)
    except (KeyError, TypeError, _lightgbm().basic.LightGBMError) as e:
        raise StageError(f"{path}: kernel_model section unreadable ({type(e).__name__}: {e}): re-run make calibrate") from None
