"""Results always belong to the model and the inputs that made them.

Every stage's meta file records its identity (the model's path and graph hash, lib/onnx/reader.py; the resolved
input shapes and the --inputs-npz hash, lib/onnx/inputs.py), a run id, and the run ids of the artifacts it was
made from. A stage that combines artifacts calls require(): they must share one identity, match the model
and inputs it was given, and none may be older than what it was made from. Any mismatch is one StageError
that names both sides and the command that fixes it.
"""
from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

from lib.artifacts import PRODUCER, read_json
from lib.errors import StageError
from lib.onnx.reader import read_light


def identity(light, inputs: dict | None) -> dict:
    """light: lib.onnx.reader.LightModel; inputs: InputSpec.describe(shapes), or None for stages without inputs.
    The file's size and mtime let a later stage trust the hash without reading the model again."""
    st = Path(light.path).stat()
    return {"model": {"path": str(Path(light.path).resolve()), "graph_sha256": light.graph_sha256,
                      "size": st.st_size, "mtime_ns": st.st_mtime_ns}, "inputs": inputs}


def graph_hash(model, recorded: dict) -> str:
    """The graph hash of `model` (a LightModel, or a path: the recorded hash is trusted when the file's path,
    size and mtime are the recorded ones, else the file is read again)."""
    if hasattr(model, "graph_sha256"):
        return model.graph_sha256
    p = Path(model)
    if not p.exists():
        raise StageError(f"model file {p} not found")
    st = p.stat()
    if (recorded.get("path"), recorded.get("size"), recorded.get("mtime_ns")) == (str(p.resolve()), st.st_size,
                                                                                 st.st_mtime_ns):
        return recorded["graph_sha256"]
    return read_light(p).graph_sha256


def new_run_id() -> str:
    return uuid.uuid4().hex


def stamp(meta: dict, ident: dict, upstream: dict[str, dict] | None = None, absent: list[str] = (),
          run_id: str | None = None) -> dict:
    """meta + run id (a new one unless given), identity and the run ids of the metas it was made from; `absent`:
    artifacts it would have used but that did not exist (when one appears later, this meta is stale)."""
    return {"run_id": run_id or new_run_id(), "identity": ident,
            "upstream": {name: m["run_id"] for name, m in (upstream or {}).items()}, "absent": list(absent), **meta}


def with_tables(meta: dict, rdir: Path, *names: str) -> dict:
    """meta + `tables`: a digest of each CSV the stage wrote beside it (written first), so that a later stage
    refuses a table that is not the one this meta describes (another input spec's or model's copied in, one cut
    short)."""
    return {**meta, "tables": {n: table_digest(Path(rdir) / n) for n in names}}


def table_digest(path: Path) -> str:
    """SHA-256 (16 hex digits) of a CSV's bytes less its carriage returns: a spreadsheet that saves it again with
    \\r\\n line ends changes no figure."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk.replace(b"\r", b""))
    return h.hexdigest()[:16]


def _who(ident: dict) -> str:
    m = ident["model"]
    return f"{m['path']} (graph {m['graph_sha256'][:12]})"


def _inputs(ident: dict) -> str:
    inp = ident.get("inputs") or {}
    shapes = " ".join(f"{k}={'x'.join(map(str, v))}" for k, v in (inp.get("input_shapes") or {}).items())
    npz = inp.get("inputs_npz")
    return shapes + (f" from {npz['path']}" if npz else "")


def same_inputs(a: dict | None, b: dict | None) -> bool:
    if not a or not b:
        return True          # a stage without inputs (03, 04, 05) inherits them
    npz = lambda x: (x.get("inputs_npz") or {}).get("sha256")  # noqa: E731
    return a.get("input_shapes") == b.get("input_shapes") and npz(a) == npz(b)


class Results:
    """A results folder's meta files, read once."""

    def __init__(self, rdir: Path):
        self.rdir = Path(rdir)
        self._metas: dict[str, dict] = {}
        self._digests: dict[Path, str] = {}

    def meta(self, name: str) -> dict:
        if name not in self._metas:
            m = read_json(self.rdir, name)
            if "identity" not in m or "run_id" not in m:
                raise StageError(f"{self.rdir / name} comes from an older version of this tool: "
                                 f"re-run {PRODUCER.get(name, 'its stage')}")
            self._metas[name] = m
        return self._metas[name]

    def _digest(self, path: Path) -> str:
        if path not in self._digests:           # once per stage run (a 200k-node table: ~0.1 s)
            self._digests[path] = table_digest(path)
        return self._digests[path]

    def has(self, name: str) -> bool:
        return (self.rdir / name).exists()

    def require(self, *names: str, light=None, inputs: dict | None = None) -> dict[str, dict]:
        """The metas, checked to belong together (and to the model `light` (a LightModel or a path) and the
        inputs when given)."""
        metas = {n: self.meta(n) for n in names}
        first_name, first = next(iter(metas.items()))
        for name, m in metas.items():
            a, b = first["identity"], m["identity"]
            if a["model"]["graph_sha256"] != b["model"]["graph_sha256"]:
                raise StageError(f"{self.rdir / first_name} belongs to {_who(a)} but {name} to {_who(b)}: "
                                 f"re-run the stages on one model (make all MODEL=...)")
            if not same_inputs(a.get("inputs"), b.get("inputs")):
                # which of the two is off the spec wanted is not known here, and make cannot see a stage run by hand
                raise StageError(f"{self.rdir / first_name} was made for inputs {_inputs(a)} but {name} for "
                                 f"{_inputs(b)}: re-run {PRODUCER.get(first_name, 'its stage')} and "
                                 f"{PRODUCER.get(name, 'its stage')} with one input spec, or remove {self.rdir} and "
                                 f"run make all")
            for up, run_id in m.get("upstream", {}).items():
                if self.has(up) and self.meta(up)["run_id"] != run_id:
                    raise StageError(f"{self.rdir / name} was made from an earlier run of {PRODUCER.get(up, up)}: "
                                     f"re-run {PRODUCER.get(name, 'its stage')} (make all does this)")
            for table, digest in m.get("tables", {}).items():
                path = self.rdir / table
                if path.exists() and self._digest(path) != digest:
                    raise StageError(f"{path} is not the table {name} was written with (its content differs): "
                                     f"re-run {PRODUCER.get(name, 'its stage')}")
            for up in m.get("absent", []):
                if self.has(up):
                    raise StageError(f"{self.rdir / name} was made before {PRODUCER.get(up, up)} ran: re-run "
                                     f"{PRODUCER.get(name, 'its stage')} (make all does this)")
        ident = first["identity"]
        if light is not None and (h := graph_hash(light, ident["model"])) != ident["model"]["graph_sha256"]:
            path = Path(getattr(light, "path", light)).resolve()
            raise StageError(f"{self.rdir} holds results of {_who(ident)}, not of {path} (graph {h[:12]}): run 02 "
                             f"and the stages after it on this model (make all MODEL=...), or give --results DIR")
        if inputs is not None and not same_inputs(ident.get("inputs"), inputs):
            raise StageError(f"{self.rdir / first_name} was made for inputs {_inputs(ident)}, this run asks for "
                             f"{_inputs({'inputs': inputs})}: re-run 02 (and 01) with this input spec first "
                             f"(make all does this)")
        return metas

    def identity(self, *names: str) -> dict:
        return self.require(*names)[names[0]]["identity"]
