"""Where artifacts live, how they are written (atomically) and read (with the "run stage NN first" error)."""
from __future__ import annotations

import csv
import datetime
import json
import os
import platform
import re
import shutil
import sys
import tempfile
from contextlib import contextmanager, suppress
from itertools import repeat
from pathlib import Path

import numpy as np
import orjson
import yaml

from lib import lazy_import, parallel
from lib.errors import StageError

pd = lazy_import("pandas")      # loaded at first use: see lib/__init__.py

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
                "out_shapes", "op_class", "attribution", "inserted")


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


def write_csv(df: pd.DataFrame, path: Path, along: parallel.Task | None = None, child_share: float = 0.5,
              head: tuple[list[str], list[str]] | None = None, done: tuple[list, list[str]] | None = None) -> None:
    """The bytes pandas' to_csv(index=False) writes, 8-9x faster on a 200k-node graph's tables: float repr is
    ~1 us a cell in Python, so numeric columns are formatted by orjson (Rust; the same shortest round-trip
    digits as repr), text is quoted as the csv module does, and rows are joined in slices of 50k. A large
    table (5M cells; MIN_ITEMS rows with `along`) is formatted in two parts, child_share of the rows by a
    forked child that first does `along` (other files to write), if given; `along` is done here otherwise,
    before this returns. head: (the table's first columns, each row's text of them): formatted ahead
    (csv_row_texts: 07's child, while the rest of the table was computed) or the lines of the file they were
    read from (read_csv_verbatim: 03). done: (the column types of a frame of the table's first rows,
    csv_row_texts() of it), formatted ahead (02, while its child computed the other rows); unused when the
    table's types differ (a NaN in the other rows makes a column of ints float); never with a head."""
    if head is not None and (list(df.columns[:len(head[0])]) != list(head[0]) or len(head[1]) != len(df)
                             or done is not None):
        raise ValueError(f"{path.name}: the formatted head is not of this table, or comes with rows done")  # a bug
    first = done[1] if done is not None and done[0] == list(df.dtypes) and len(done[1]) <= len(df) else []
    cells = len(df) * (df.shape[1] - (len(head[0]) if head else 0))     # to format here
    if df.shape[1] < 2:     # the csv module quotes a lone empty field; too small to matter
        with atomic_path(path) as tmp:
            df.to_csv(tmp, index=False)
    else:
        with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
            f.write(",".join(_text_cells(list(df.columns))) + "\n")
            big = cells >= CSV_PARTS_PER_ITEM * parallel.MIN_ITEMS
            if first:       # the rest of the rows formatted here
                f.write("\n".join(first) + "\n")
                _write_rows(df, len(first), len(df), f)
            elif (big or along is not None and len(df) >= parallel.MIN_ITEMS) and parallel.available():
                _write_parts(df, f, tmp, along, child_share, head)
            else:
                _write_rows(df, 0, len(df), f, head)
    if along is not None:
        along.finish()


def csv_row_texts(df: pd.DataFrame) -> list[str]:
    """Each row of df as write_csv formats it (no line break): a table's first columns, formatted ahead for
    write_csv's `head`."""
    return [t for s in range(0, len(df), CSV_SLICE) for t in _slice_rows(df.iloc[s:s + CSV_SLICE], None, 0)]


def _write_parts(df: pd.DataFrame, f, tmp: Path, along: parallel.Task | None, child_share: float,
                 head: tuple[list[str], list[str]] | None) -> None:
    """The first rows formatted here while a forked child (parallel.split) formats the rest into a file beside,
    copied in after them (formatted here too, when the child failed)."""
    part = tmp.with_name(tmp.name + ".part")

    def rows(lo: int, hi: int) -> list:
        if lo == 0:         # the parent's part (child_share < 1: the child's starts past row 0)
            _write_rows(df, 0, hi, f, head)
        else:
            with open(part, "w", newline="") as g:
                _write_rows(df, lo, hi, g, head)
        return []
    try:
        parallel.split(rows, len(df), child_share, task=along, min_n=0)
        with open(part, newline="") as g:
            shutil.copyfileobj(g, f, 1 << 20)
    finally:
        part.unlink(missing_ok=True)


def _write_rows(df: pd.DataFrame, start: int, end: int, out, head: tuple[list[str], list[str]] | None = None) -> None:
    """Rows start..end as CSV lines onto the open file `out`, in slices of CSV_SLICE rows (_slice_rows); the
    first columns from `head`'s texts when given."""
    k = 0 if head is None else len(head[0])
    for s in range(start, end, CSV_SLICE):
        e = min(s + CSV_SLICE, end)
        out.write("\n".join(_slice_rows(df.iloc[s:e], None if head is None else head[1][s:e], k)) + "\n")


def _slice_rows(part: pd.DataFrame, head: list[str] | None, k: int) -> list[str]:
    """The rows' CSV texts, from column k on after `head` (each row's text of columns 0..k-1), if given. Each row
    is joined from items: a column's cells; one text for a column whose cells in the slice are all that text (a
    profile's columns when there is none, a flag no row sets), a run of them as one; the row texts of a run of
    float columns that orjson writes as repr does (one orjson call, one item per row)."""
    items, floats = ([] if head is None else [head]), []

    def add(cells):
        if type(cells) is str and items and type(items[-1]) is str:
            items[-1] += "," + cells
        else:
            items.append(cells)

    for i in range(k, part.shape[1]):
        col = part.iloc[:, i]
        if _plain_floats(col):
            floats.append(col.to_numpy())
            continue
        if floats:
            add(_float_rows(floats))
            floats = []
        add(_csv_cells(col))
    if floats:
        add(_float_rows(floats))
    if all(type(c) is str for c in items):
        return [",".join(items)] * len(part)
    return list(map(",".join, zip(*[repeat(c) if type(c) is str else c for c in items])))


def _plain_floats(col: pd.Series) -> bool:
    """A float64 column whose cells orjson writes as repr does (no exponent, not in [1e-5, 1e-4), not inf;
    NaN allowed), that is not one text throughout."""
    if col.dtype != np.float64:
        return False
    a = col.to_numpy()
    mag = np.abs(a)
    with np.errstate(invalid="ignore"):
        if ((mag < 1e-4) & (mag > 0)).any() or (mag >= 1e16).any():
            return False
    return _one_number(a) is None


def _float_rows(arrays: list[np.ndarray]) -> list[str]:
    """Per row, the cells of _plain_floats columns joined by commas: orjson on the 2D block ('[[1.0,null],[..'),
    NaN emptied, split at the row breaks."""
    if len(arrays) == 1:
        return _numeric_cells(np.ascontiguousarray(arrays[0]))
    text = orjson.dumps(np.column_stack(arrays), option=orjson.OPT_SERIALIZE_NUMPY).decode()
    return text[2:-2].replace("null", "").split("],[")


CSV_SLICE = 50_000
# cells (x parallel.MIN_ITEMS: 5M) from which a CSV is formatted in two parts: below, forking the stage and
# the copy-on-write pages it brings cost about what the second part saves (02's 200k x 18 table: the same wall time
# for 0.5 s more CPU; 03's 200k x 33, 2.37 -> 2.16 s)
CSV_PARTS_PER_ITEM = 500
_CSV_SPECIAL = re.compile(r'[,"\r\n]')


def _csv_cells(col: pd.Series) -> list[str] | str:
    """The column's cells as text, or one text when every cell is the same (checked on the values, in C)."""
    if isinstance(col.dtype, pd.StringDtype):      # its objects as they are (NaN or None where missing)
        return _one_text(_text_cells(col.to_numpy().tolist()))
    if isinstance(col.dtype, pd.api.extensions.ExtensionDtype):    # nullable ints, categoricals
        return _one_text(_text_cells(col.to_numpy(dtype=object, na_value=None).tolist()))
    a = np.ascontiguousarray(col.to_numpy())
    kind = a.dtype.kind
    if kind == "b":
        return "True" if a.all() else "False" if not a.any() else np.where(a, "True", "False").tolist()
    if kind in "iu" or (kind == "f" and a.dtype.itemsize == 8):
        one = _one_number(a)
        return _numeric_cells(a) if one is None else one
    if kind == "O":
        return _one_text(_text_cells(col.tolist()))
    return _one_text(_text_cells(col.astype(str).where(col.notna(), None).tolist()))   # float32, dates


def _one_number(a: np.ndarray) -> str | None:
    """The text of every cell of a non-empty int or float64 column when it is the same for all (NaN: empty),
    else None. Compared bitwise: -0.0 is not written as 0.0."""
    if a.dtype.kind == "f" and np.isnan(a).all():
        return ""
    bits = a.view(np.int64) if a.dtype.kind == "f" else a
    return _numeric_cells(a[:1])[0] if (bits == bits[0]).all() else None


def _numeric_cells(a: np.ndarray) -> list[str]:
    """str() of each number, as pandas writes it ('' for NaN). orjson matches repr digit for digit, but writes
    exponents its own way (1e-7, 1e16 where repr has 1e-07, 1e+16), the decade [1e-5, 1e-4) without one
    (0.00002 where repr has 2e-05), and NaN and inf as null. Those cells take repr() (found in C: exponents by
    the position of their 'e'); where a third or more of the column has an exponent, they are mended on the
    whole text instead (str.replace in C: 18 passes cost about 0.5 us a cell, repr() 1.2 us). NaN's cell is
    emptied on the whole text."""
    if len(a) == 0:
        return []
    raw = orjson.dumps(a, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1]
    text = raw.decode()
    if a.dtype.kind in "iu":
        return text.split(",")
    n_exp = text.count("e")
    if n_exp * 3 >= len(a):
        text += ","
        for d in "123456789":
            text = text.replace(f"e-{d},", f"e-0{d},").replace(f"e{d}", f"e+{d}")
        text = text[:-1]
    cells = text.replace("null", "").split(",")
    mag = np.abs(a)
    with np.errstate(invalid="ignore"):
        odd = np.isinf(a) | ((mag < 1e-4) & (mag >= 1e-5))
    if 0 < n_exp * 3 < len(a):      # cell index of an 'e' = the commas before it
        b = np.frombuffer(raw, np.uint8)
        odd[np.searchsorted(np.flatnonzero(b == ord(",")), np.flatnonzero(b == ord("e")))] = True
    for i, v in zip(np.flatnonzero(odd).tolist(), a[odd].tolist()):
        cells[i] = repr(v)
    return cells


def _text_cells(values: list) -> list[str]:
    """Each cell as the csv module writes it (QUOTE_MINIMAL): missing values empty, str() of the rest,
    quoted (with doubled quotes) when it holds a comma, a quote or a line break (one search per column
    first: names rarely do)."""
    if set(map(type, values)) <= {str}:      # every cell text already: checked in C (a third of the loop's time)
        cells = values
    else:
        cells = [v if type(v) is str else "" if v is None or v is pd.NA or (isinstance(v, float) and v != v)
                 else str(v) for v in values]
    joined = "\x00".join(cells)
    if any(c in joined for c in ',"\r\n'):      # `in` scans at memory speed, the regex at 5 ns a character
        cells = ['"' + t.replace('"', '""') + '"' if _CSV_SPECIAL.search(t) else t for t in cells]
    return cells


def _one_text(cells: list[str]) -> list[str] | str:
    """cells, or their one text when they are all the same (list.count compares in C)."""
    return cells[0] if cells and cells.count(cells[0]) == len(cells) else cells


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
    missing = [c for c in required_columns if c not in df.columns]
    if missing:
        raise StageError(f"{path} lacks columns {missing}: re-run {PRODUCER.get(name, 'its stage')}")
    return df


def read_csv_verbatim(rdir: Path, name: str, required_columns: tuple[str, ...] = ()) -> tuple[pd.DataFrame, tuple | None]:
    """read_csv(), and the file's lines as they are, as write_csv's `head` for a table that keeps the file's
    columns first, unchanged and in row order (stage 03 adds its columns to 02's): (columns, lines), or None
    when lines are not rows (a quoted cell with a line break, blank lines) or the file changed while read."""
    path = Path(rdir) / name
    before = path.stat() if path.exists() else None
    df = read_csv(rdir, name, required_columns)
    with open(path, newline="") as f:
        text = f.read()
    after = path.stat()
    lines = [] if "\r" in text else text.split("\n")    # \r\n or \r line ends (an edited file): formatted again
    header, lines = (lines[0], lines[1:-1]) if lines else ("", [])    # the last: "" after the final line break
    same = before is not None and (before.st_ino, before.st_size, before.st_mtime_ns) == \
        (after.st_ino, after.st_size, after.st_mtime_ns)
    # a row spanning lines (a quoted line break) or a blank line (skipped) makes more lines than rows, and
    # without \r no line holds two rows: as many lines as rows means line k is row k
    if not same or header.split(",") != list(df.columns) or len(lines) != len(df):
        return df, None
    return df, (list(df.columns), lines)


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


def versions() -> dict:
    """Versions recorded next to every result, so a figure can be traced to its tools."""
    out = {"python": sys.version.split()[0], "platform": platform.platform(), "machine": platform.machine()}
    for mod in ("numpy", "pandas", "onnx", "onnxruntime", "torch", "torchvision", "matplotlib"):
        m = sys.modules.get(mod)
        if m is not None:
            out[mod] = getattr(m, "__version__", "?")
    return out
