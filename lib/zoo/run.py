"""A zoo run: check the zoo file, skip every entry whose content key is unchanged since its last good run, run the
others (local processes or Dask), then write results/zoo.csv and results/index.html.

An entry's key (lib/zoo/spec.py entry_key) hashes the model and npz bytes, the input spec, every config, the code
(stage scripts, lib/, Makefile) and RUNS/SPLITS; it is kept in results/<stem>/zoo_entry.json with the entry's
status. A changed key runs `make all` again, and make's own stamps redo only the stages the change affects.
"""
from __future__ import annotations

import json
from pathlib import Path

from lib.artifacts import REPO, atomic_path, write_json
from lib.errors import StageError
from lib.latency.sweep import batch_overrides
from lib.progress import Progress
from lib.report.page import build_index
from lib.zoo import engines
from lib.zoo.spec import Entry, code_version, configs_version, content_id, entry_key, load_zoo
from lib.zoo.table import figures, write_table

RECORD = "zoo_entry.json"


def cached(rdir: Path, key: str) -> dict | None:
    """The record of the entry's last run when it was good and had this key (its report is there), else None."""
    try:
        rec = json.loads((rdir / RECORD).read_text())
    except (OSError, ValueError):
        return None
    ok = rec.get("key") == key and rec.get("status") == "ok" and (rdir / "report.html").exists()
    return rec if ok else None


def shape_args(e: Entry) -> str:
    """The --shape-override text of an entry: its own, or (batch list) each input's batch axis set to the batch
    (lib/latency/sweep.py batch_axes)."""
    if e.batch is None:
        return e.shape_override
    return batch_overrides(REPO / e.model, e.batch, [e.shape_override] if e.shape_override else [],
                           str(REPO / "configs" / "workload.yaml"), e.preset or None)[0]


def plan(entries: list[Entry], root: Path, settings: str) -> tuple[list[dict], dict[str, dict]]:
    """(jobs to run, records of the entries that need no run: failed before running, or unchanged)."""
    jobs, records = [], {}
    for e in entries:
        if e.problem:
            records[e.stem] = {"status": "failed", "error": e.problem, "cached": False}
            _mark(root / e.stem, records[e.stem])
            continue
        content = content_id(e)
        key = entry_key(e, settings, content=content)
        rec = cached(root / e.stem, key)
        if rec is not None:
            records[e.stem] = {**rec, "cached": True, "seconds": 0.0}
            continue
        try:
            args = shape_args(e)
        except StageError as err:
            records[e.stem] = {"status": "failed", "error": str(err), "key": key, "cached": False}
            _mark(root / e.stem, records[e.stem])
            continue
        entry = {"model": e.model, "shape_args": args, "preset": e.preset, "inputs_npz": e.inputs_npz,
                 "stem": e.stem, "resources": e.resources, "content": content}
        jobs.append({"entry": entry, "key": key, "rdir": root / e.stem})
    return jobs, records


def _mark(rdir: Path, record: dict) -> None:
    """An entry that failed before running: its record in the folder an earlier model's results may hold under
    the same name, so that the index does not list those figures as this entry's."""
    if rdir.is_dir():
        write_json(record, rdir / RECORD)


class Tracker:
    """Progress on the terminal (done / failed / running, per model), and each finished entry's record kept in
    results/<stem>/zoo_entry.json."""

    def __init__(self, jobs: list[dict], root: Path, records: dict, stream=None):
        self.keys = {j["entry"]["stem"]: j["key"] for j in jobs}
        self.root, self.records, self.running = root, records, set()
        self.total = len(jobs)
        self.progress = Progress("zoo", total=self.total, stream=stream)

    def _show(self) -> None:
        done = [s for s in self.keys if s in self.records]
        failed = sum(self.records[s]["status"] != "ok" for s in done)
        self.progress.update(len(done), f"{len(done) - failed} done, {failed} failed, running: "
                                        f"{', '.join(sorted(self.running)) or '-'}")

    def start(self, stem: str) -> None:
        self.running.add(stem)
        self._show()

    def done(self, stem: str, rec: dict) -> None:
        self.running.discard(stem)
        self.records[stem] = {**rec, "key": self.keys[stem], "cached": False}
        if (self.root / stem).is_dir():
            write_json(self.records[stem], self.root / stem / RECORD)
        self._show()


def rows_of(entries: list[Entry], root: Path, records: dict) -> list[dict]:
    rows = []
    for e in entries:
        rec = records[e.stem]
        row = {"stem": e.stem, "model": e.model, "input_spec": e.spec_text(), "status": rec["status"],
               "error": rec.get("error") or "", "key": (rec.get("key") or "")[:16], "cached": rec.get("cached"),
               "seconds": rec.get("seconds"), "host": rec.get("host")}
        rows.append({**row, **(figures(root / e.stem) if rec["status"] == "ok" else {})})
    return rows


def run_zoo(zoo: str, root: Path, engine: str = "local", scheduler: str | None = None, jobs_n: int = 2,
            runs: int = 10, splits: int = 3, work_root: str = "results/.zoo-work", stream=None) -> list[dict]:
    """Run the zoo into root (results/): returns the rows written to root/zoo.csv."""
    entries = load_zoo(zoo)
    client = engines.connect(scheduler) if engine == "dask" else None    # an unreachable scheduler: before anything
    settings = f"code={code_version()} configs={configs_version()} runs={runs} splits={splits}"
    jobs, records = plan(entries, root, settings)
    t = Tracker(jobs, root, records, stream)
    try:
        if client is not None:
            engines.run_dask(jobs, root, client, work_root, runs, splits, t.start, t.done)
        else:
            engines.run_local(jobs, root, jobs_n, runs, splits, t.start, t.done)
    finally:
        if client is not None:
            client.close()
    unchanged = sum(bool(r.get("cached")) for r in records.values())
    t.progress.done(f"{len(jobs)} run, {unchanged} unchanged, {len(entries) - len(jobs) - unchanged} refused before running")
    rows = rows_of(entries, root, records)
    write_table(rows, root)
    page, _ = build_index(root)
    with atomic_path(root / "index.html") as tmp:
        tmp.write_text(page, encoding="utf-8")
    return rows
