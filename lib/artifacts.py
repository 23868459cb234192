"""Where artifacts live, how they are written (atomically) and read (with the "run stage NN first" error)."""
from __future__ import annotations

import csv
import datetime
import json
import math
import os
import platform
import sys
import tempfile
from contextlib import contextmanager, suppress
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
import polars as pl
import yaml

from lib.errors import StageError

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "configs"

# artifact file -> the stage script that writes it (for the "run stage NN first" message)
PRODUCER = {
    "ops_latency.csv": "01_profile_onnx.py",
    "profile_meta.json": "01_profile_onnx.py",
    "ops_metrics.csv": "02_shapes_flops_bytes.py",
    "metrics_meta.json": "02_shapes_flops_bytes.py",
    "graph.onnx": "02_shapes_flops_bytes.py",
    "ops_profile.csv": "03_merge_profile_metrics.py",
    "merge_meta.json": "03_merge_profile_metrics.py",
    "energy_meta.json": "05_energy_estimate.py",
    "workload_profile.json": "07_split_candidates.py",
    "split_summary.json": "07_split_candidates.py",
    "split_model.json": "07_split_candidates.py",
    "report_meta.json": "11_report.py",
    "candidate_pruning.json": "07_split_candidates.py",
    "critical_path.csv": "04_critical_path.py",
    "critical_path_meta.json": "04_critical_path.py",
    "energy.csv": "05_energy_estimate.py",
    "kernel_candidates.csv": "05_energy_estimate.py",
    "amdahl.csv": "05_energy_estimate.py",
    "boundaries.csv": "07_split_candidates.py",
    "pareto_export.csv": "07_split_candidates.py",
    "system_config.json": "07_split_candidates.py",
    "validation_report.json": "08_export_splits.py",
    "fx_hardware.csv": "09_fx_partition.py",
    "hailo_feasibility.csv": "10_hailo_parse.py",
    "hailo_meta.json": "10_hailo_parse.py",
    "plots_meta.json": "06_plots.py",
}


TEXT_COLUMNS = ("node", "after_node", "after_layer", "op_type", "fused_into", "layer", "cut_tensors", "kernel",
                "ort_kernels", "reason", "pruned_by", "skip_block", "cost_note", "shape_source", "dtype", "mac_dtype",
                "out_shapes", "op_class", "attribution", "inserted", "compute_dtype", "mem_level")


def results_dir(model: str | None, results: str | None) -> Path:
    """results/<model-stem>/ from --model, or --results DIR as given."""
    if results:
        return Path(results)
    if not model:
        raise StageError("give --model PATH (or --results DIR)")
    return REPO / "results" / Path(model).stem


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


UMASK = _umask()


@contextmanager
def atomic_path(path: Path):
    """Yield a temp path in the same folder; rename onto `path` only if the block succeeds (when it fails,
    nothing is left: not the folder either, if this made it). The file gets the permissions any new file gets
    under the user's umask (mkstemp's own are 0600)."""
    path = Path(path)
    fresh = not path.parent.exists()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix or ".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~UMASK)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if fresh:
            with suppress(OSError):     # empty unless another writer put something there meanwhile
                path.parent.rmdir()
        raise


def write_csv(df: pd.DataFrame, path: Path) -> None:
    """The table as CSV, written by polars (its Rust writer: 2-2.5x faster than the hand-written one this
    replaced, itself 5-6x faster than pandas' to_csv, on a 200k-node graph's tables). Floats get their shortest
    round-trip digits, NaN and missing values an empty cell, an empty text "" (quoted). The contract is the
    round trip: read_csv() of the file gives the frame back (tests/test_integrity.py), not given bytes."""
    frame = pl.DataFrame([_series(str(c), df[c]) for c in df.columns])
    with atomic_path(path) as tmp:
        frame.with_columns(pl.col(pl.Float32, pl.Float64).fill_nan(None)).write_csv(tmp)


def _series(name: str, col: pd.Series) -> pl.Series:
    """A pandas column as a polars one, without pyarrow (pandas would then import it in every stage): numpy's
    numbers and bools as they are; text and everything else (objects, nullable ints, categoricals) as text,
    missing values null."""
    if not isinstance(col.dtype, pd.api.extensions.ExtensionDtype) and col.dtype.kind in "biuf":
        return pl.Series(name, col.to_numpy())
    values = col.to_numpy(dtype=object, na_value=None)
    if set(map(type, values)) <= {str, type(None)}:     # text throughout (None where missing): converted in Rust
        # as a list: polars refuses an object array whose first value is None ("cannot cast 'Object' type")
        return pl.Series(name, values.tolist(), dtype=pl.String)
    return pl.Series(name, [None if v is None or v is pd.NA or (isinstance(v, float) and v != v)
                            else v if type(v) is str else str(v) for v in values], dtype=pl.String)


def write_json(obj, path: Path, indent: int | None = 2) -> None:
    """indent=None for the large ones (a 200k-boundary pruning list, the report's what-if model): compact,
    through orjson (~10x faster than json; numpy arrays as lists; NaN and inf become null, as a browser's
    JSON.parse needs)."""
    with atomic_path(path) as tmp:
        if indent is None:
            tmp.write_bytes(orjson.dumps(obj, default=_json_default, option=orjson.OPT_SERIALIZE_NUMPY
                                         | orjson.OPT_NON_STR_KEYS | orjson.OPT_APPEND_NEWLINE))
        else:
            tmp.write_text(json.dumps(obj, indent=indent, default=_json_default) + "\n")


def _json_default(o):
    if isinstance(o, np.ndarray):       # one orjson does not take natively (not contiguous, object dtype)
        return o.tolist()
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, (Path, datetime.date)):
        return str(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def read_csv(rdir: Path, name: str, required_columns: tuple[str, ...] = (),
             only: frozenset[str] | None = None) -> pd.DataFrame:
    """Read an earlier stage's CSV, or fail with the stage to run first. only: the columns to read, of those
    the file has (each column parsed costs: 33 columns of 200k rows)."""
    path = Path(rdir) / name
    if not path.exists():
        raise StageError(f"{path} not found: run {PRODUCER.get(name, 'the earlier stage')} first")
    try:
        with open(path, newline="") as f:
            header = next(csv.reader(f), [])
        # names are text: a node called NA, null, None or nan stays that name, and an empty text cell is "", never
        # NaN (a NaN layer would print as "nan"); only a number's empty cell is missing. Text is kept as Python
        # str objects (object dtype), not pandas 3's str dtype: converting 8 text columns of 200k rows costs
        # 0.15-0.2 s, and the stages only compare, group and write them
        df = pd.read_csv(path, keep_default_na=False, na_values={c: [""] for c in header if c not in TEXT_COLUMNS},
                         dtype={c: object for c in TEXT_COLUMNS}, usecols=None if only is None else only.__contains__)
    except Exception as e:  # noqa: BLE001 - any parse failure is bad input
        raise StageError(f"{path} is unreadable ({e}): re-run {PRODUCER.get(name, 'its stage')}") from None
    return require_columns(df, path, required_columns)


def require_columns(df: pd.DataFrame, path: Path, columns) -> pd.DataFrame:
    """df, or StageError naming the stage that writes `path` when it lacks any of `columns`."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise StageError(f"{path} lacks columns {missing}: re-run {PRODUCER.get(Path(path).name, 'its stage')}")
    return df


def read_json(rdir: Path, name: str) -> dict:
    path = Path(rdir) / name
    if not path.exists():
        raise StageError(f"{path} not found: run {PRODUCER.get(name, 'the earlier stage')} first")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise StageError(f"{path} is not valid JSON ({e}): re-run {PRODUCER.get(name, 'its stage')}") from None


YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)    # libyaml's: 10x faster on latency_model.yaml


def load_yaml(path: str | Path, what: str) -> dict:
    """A YAML config as a mapping, or StageError naming the file and the problem."""
    path = Path(path)
    if not path.exists():
        raise StageError(f"{what} {path} not found")
    try:
        data = yaml.load(path.read_text(), Loader=YAML_LOADER)
    except yaml.YAMLError as e:
        raise StageError(f"{what} {path} is not valid YAML: {str(e).splitlines()[0]}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise StageError(f"{what} {path} must be a mapping of keys to values")
    return data


def number(v, what: str, *, zero: bool = False, high: float | None = None, integer: bool = False):
    """A figure of a config file, checked: a finite number > 0 (>= 0 with `zero`), at most `high`, whole where
    `integer`; StageError "<what> must be ..." otherwise (a string, NaN, a negative bandwidth went through to
    tracebacks or negative times). YAML 1.1 (PyYAML) reads 5e11, without a dot, as a string: a string that is a
    number counts as one."""
    try:
        x = float(v) if not isinstance(v, bool) else math.nan
    except (TypeError, ValueError):
        x = math.nan
    if not (math.isfinite(x) and (x >= 0 if zero else x > 0) and (high is None or x <= high)
            and (not integer or x.is_integer())):
        kind = f"{'a non-negative' if zero else 'a positive'} {'integer' if integer else 'number'}"
        raise StageError(f"{what} must be {kind}{f' at most {high:g}' if high is not None else ''}, got {v!r}")
    return int(x) if integer else x


def versions() -> dict:
    """Versions recorded next to every result, so a figure can be traced to its tools."""
    out = {"python": sys.version.split()[0], "platform": platform.platform(), "machine": platform.machine()}
    for mod in ("numpy", "pandas", "onnx", "onnxruntime", "torch", "torchvision", "matplotlib"):
        m = sys.modules.get(mod)
        if m is not None:
            out[mod] = getattr(m, "__version__", "?")
    return out
