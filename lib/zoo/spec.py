"""The zoo file: models, each with its optional input spec and batch list, checked and expanded into one entry per
model x input spec, each with its own results folder (results/<stem>/) and its content key.

    models:
      - model: models/audio/pitch.onnx
        shape_override: "audio=1x16000"
        inputs_npz: models/audio/pitch_values.npz
      - model: models/bert.onnx
        preset: llm-128
      - model: models/resnet50_dyn.onnx
        batches: [1, 8]
        resources: {host_cpu: 1}      # Dask resources of the worker that must run it (default host_cpu: 1)

A malformed zoo file is refused as a whole (StageError); a missing model, npz or bad shape spec fails only its
own entry (Entry.problem), when the zoo runs.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from lib.artifacts import REPO, load_yaml
from lib.errors import StageError
from lib.latency.sweep import batch_overrides
from lib.onnx.inputs import parse_shape_overrides

KEYS = {"model", "shape_override", "inputs_npz", "preset", "batches", "resources"}
DEFAULT_RESOURCES = {"host_cpu": 1}     # stage 01 profiles on the host CPU of the worker that runs the entry
# what the code version hashes: every stage script, lib/ (templates included), the Makefile
CODE_GLOBS = ("[0-9][0-9]_*.py", "lib/**/*.py", "lib/**/*.j2", "Makefile")


@dataclass
class Entry:
    model: str
    shape_override: str = ""
    inputs_npz: str = ""
    preset: str = ""
    batch: int | None = None
    resources: dict = field(default_factory=lambda: dict(DEFAULT_RESOURCES))
    stem: str = ""
    problem: str = ""           # why this entry cannot run (its row fails with it), "" when it can

    def spec_text(self) -> str:
        """The input spec in the Makefile's spellings, for the table."""
        parts = [f"shape_override={self.shape_override}" if self.shape_override else "",
                 f"preset={self.preset}" if self.preset else "", f"inputs_npz={self.inputs_npz}" if self.inputs_npz else "",
                 f"batch={self.batch}" if self.batch is not None else ""]
        return " ".join(p for p in parts if p)


def _entry_fields(i: int, item, where: str) -> dict:
    if not isinstance(item, dict):
        raise StageError(f"{where}: models[{i}] must be a mapping with a 'model' key, not {type(item).__name__}")
    unknown = sorted(set(item) - KEYS)
    if unknown:
        raise StageError(f"{where}: models[{i}] has unknown key(s) {unknown}; known: {sorted(KEYS)}")
    if not isinstance(item.get("model"), str) or not item["model"].strip():
        raise StageError(f"{where}: models[{i}] needs 'model: path/to/model.onnx'")
    for k in ("shape_override", "inputs_npz", "preset"):
        if item.get(k) is not None and not isinstance(item[k], str):
            raise StageError(f"{where}: models[{i}].{k} must be a string")
    batches = item.get("batches")
    if batches is not None and (not isinstance(batches, list) or not batches
                                or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in batches)):
        raise StageError(f"{where}: models[{i}].batches must be a list of positive integers, e.g. [1, 8]")
    res = item.get("resources", DEFAULT_RESOURCES)
    if not isinstance(res, dict) or not all(isinstance(k, str) and isinstance(v, (int, float)) and v > 0
                                            for k, v in res.items()):
        raise StageError(f"{where}: models[{i}].resources must map resource names to positive numbers, e.g. {{npu: 1}}")
    return {**item, "batches": batches, "resources": res}


def problem_of(e: Entry, root: Path = REPO) -> str:
    """The one-line reason this entry cannot run, checked before anything runs ("" when none)."""
    if not (root / e.model).is_file():
        return f"model {e.model} not found"
    if e.inputs_npz and not (root / e.inputs_npz).is_file():
        return f"inputs_npz {e.inputs_npz} not found"
    try:    # with a batch list, the override with its batch dim B filled in (batch_overrides: B is required)
        parse_shape_overrides(batch_overrides(root / e.model, e.batch, [e.shape_override], None, None)
                              if e.batch is not None and e.shape_override else [e.shape_override])
    except StageError as err:
        return str(err).replace("--shape-override", "shape_override")
    return ""


def _slug(e: Entry) -> str:
    """A readable suffix of the stem for a non-default input spec ("" for none)."""
    bits = [e.preset, e.shape_override.replace("=", "").replace(" ", "_"),
            Path(e.inputs_npz).stem if e.inputs_npz else "", f"b{e.batch}" if e.batch is not None else ""]
    return re.sub(r"[^A-Za-z0-9_.-]", "", "_".join(b for b in bits if b))


def assign_stems(entries: list[Entry]) -> None:
    """results/<stem>/ per entry: the model's stem, plus the input spec's slug when it has one; a short hash of
    (model path, spec) where two entries would still share a folder (or the slug is unreadably long)."""
    for e in entries:
        slug = _slug(e)
        e.stem = Path(e.model).stem + (f"@{slug}" if slug and len(slug) <= 40 else "")
    clash = {e.stem for e in entries if sum(x.stem == e.stem for x in entries) > 1}
    for e in entries:
        if e.stem in clash or len(_slug(e)) > 40:
            h = hashlib.sha256(f"{e.model}|{e.spec_text()}".encode()).hexdigest()[:8]
            e.stem = f"{e.stem}-{h}"
    seen = set()
    for e in entries:
        if e.stem in seen:
            raise StageError(f"the zoo lists {e.model} twice with the same input spec ({e.spec_text() or 'none'})")
        seen.add(e.stem)


def load_zoo(path: str | Path, root: Path = REPO) -> list[Entry]:
    """The checked entries of a zoo file, one per model x input spec (a batch list gives one per batch)."""
    doc = load_yaml(path, "zoo file")
    models = doc.get("models")
    if not isinstance(models, list) or not models:
        raise StageError(f"zoo file {path} needs a non-empty 'models:' list (see docs/zoo.md)")
    entries = []
    for i, item in enumerate(models):
        f = _entry_fields(i, item, f"zoo file {path}")
        for b in f["batches"] or [None]:
            entries.append(Entry(f["model"].strip(), (f.get("shape_override") or "").strip(),
                                 (f.get("inputs_npz") or "").strip(), (f.get("preset") or "").strip(), b,
                                 dict(f["resources"])))
    assign_stems(entries)
    for e in entries:
        e.problem = problem_of(e, root)
    return entries


def _sha(paths: list[Path], root: Path) -> str:
    """The bytes of the files, each after its name relative to root (the same tree hashes the same anywhere)."""
    h = hashlib.sha256()
    for p in paths:
        h.update(str(Path(p).relative_to(root) if Path(p).is_relative_to(root) else p).encode() + b"\0")
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def code_version(root: Path = REPO) -> str:
    """A hash of the code that makes the results (stage scripts, lib/, templates, the Makefile): uncommitted
    edits count too, which git HEAD alone would miss."""
    files = sorted({p.relative_to(root) for g in CODE_GLOBS for p in root.glob(g) if "__pycache__" not in p.parts})
    return _sha([root / p for p in files], root)


def configs_version(root: Path = REPO) -> str:
    """A hash of every config file (host, workload, system, offload, latency model, hardware profiles)."""
    return _sha(sorted((root / "configs").rglob("*.yaml")), root)


def content_id(e: Entry, root: Path = REPO) -> str:
    """A hash of the entry's model and npz bytes."""
    return _sha([root / e.model] + ([root / e.inputs_npz] if e.inputs_npz else []), root)


def entry_key(e: Entry, settings: str, root: Path = REPO, content: str | None = None) -> str:
    """The content key of an entry: model bytes, npz bytes (content: content_id(e), when known), input spec,
    settings (code, configs, runs ...)."""
    content = content or content_id(e, root)
    return hashlib.sha256(f"{e.model}|{content}|{e.spec_text()}|{settings}".encode()).hexdigest()
