"""Running one zoo entry: `make all` for it in its own results folder, and (Dask) the same on a worker, returned as
the bytes of a zip of the folder.

Standard library only, on purpose: a Dask worker started from the project root (`.venv/bin/dask worker ...`) does
not have the root on its sys.path, so the client ships these functions by value (cloudpickle) and nothing of
lib/ needs importing on the worker. An entry travels as a plain dict (model, shape_args, preset, inputs_npz, stem).
"""
from __future__ import annotations

import fcntl
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from contextlib import contextmanager
from pathlib import Path

# per host, every zoo run (local or a Dask worker) passes this lock to make: stage 01 holds it exclusively, the
# other stages shared, so a profile never shares the cores with another entry's stage
PROFILE_LOCK = os.path.join(tempfile.gettempdir(), "nn-perf-profile.lock")
# what a Dask nanny puts in its worker's environment (distributed.nanny.pre-spawn-environ: one thread for numpy and
# OpenMP): not passed on to make, so that a profile on a worker runs as `make all` from a shell does (it ran 2-4x
# slower on the bench's vision models with them)
NANNY_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MALLOC_TRIM_THRESHOLD_")
MANIFEST = ".zoo_mtimes.json"      # zip keeps mtimes to 2 s: the exact ones, so make's stamps survive the trip
LOG = "zoo.log"


def make_command(entry: dict, rdir: str, runs: int, splits: int) -> list[str]:
    """`make all` for one entry, in the Makefile's spellings (MODEL, R, SHAPE_ARGS, PRESET, INPUTS)."""
    cmd = ["make", "--no-print-directory", "all", f"MODEL={entry['model']}", f"R={rdir}", f"RUNS={runs}",
           f"SPLITS={splits}", f"PROFILE_LOCK={PROFILE_LOCK}"]
    if entry.get("shape_args"):
        cmd.append(f"SHAPE_ARGS=--shape-override '{entry['shape_args']}'")
    if entry.get("preset"):
        cmd.append(f"PRESET={entry['preset']}")
    if entry.get("inputs_npz"):
        cmd.append(f"INPUTS={entry['inputs_npz']}")
    if entry.get("content"):        # the model's bytes: make's file stamp misses a same-size copy with its times
        cmd.append(f"CONTENT_ID={entry['content']}")
    return cmd


def error_line(log: str) -> str:
    """The one-line error of the stage that refused the entry: its last `error:` line, else the last line of a
    traceback, else make's own last word."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.startswith("error: "):
            return ln[len("error: "):]
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].startswith("internal error") and i > 0:
            return "internal error: " + lines[i - 1]
    rest = [ln for ln in lines if not ln.startswith("make: ***")]
    return (rest or lines or ["make failed with no output"])[-1][:300]


def run_make(entry: dict, rdir: str, runs: int, splits: int, cwd: str = ".", drop: tuple = ()) -> tuple[int, str, float]:
    """make all for the entry into rdir (relative to cwd or absolute); its output in rdir/zoo.log; the variables
    in drop (and a calling make's flags) are not passed on. Returns (exit code, one-line error or "", seconds)."""
    out = Path(cwd, rdir)
    out.mkdir(parents=True, exist_ok=True)
    return run_logged(make_command(entry, rdir, runs, splits), out / LOG, cwd,
                      ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", *drop))


def run_logged(cmd: list[str], log: Path, cwd: str = ".", drop: tuple = ()) -> tuple[int, str, float]:
    """cmd in cwd, its output into log, the environment variables in drop not passed on. Returns (exit code,
    one-line error or "", seconds)."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    t0 = time.perf_counter()
    with open(log, "w") as f:
        rc = subprocess.run(cmd, cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    seconds = time.perf_counter() - t0
    return rc, "" if rc == 0 else error_line(Path(log).read_text(errors="replace")), seconds


def zip_folder(folder: Path) -> bytes:
    buf = io.BytesIO()
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    mtimes = {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in files}
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        for p in files:
            z.write(p, str(p.relative_to(folder)))
        z.writestr(MANIFEST, json.dumps(mtimes))
    return buf.getvalue()


def unzip_into(data: bytes, dest: Path) -> None:
    """Extract into dest (a fresh folder), restoring every file's exact mtime."""
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        z.extractall(dest)
    manifest = dest / MANIFEST
    for rel, ns in json.loads(manifest.read_text()).items():
        os.utime(dest / rel, ns=(ns, ns))
    manifest.unlink()


@contextmanager
def locked(path: Path):
    """An exclusive lock on path (waits): a retried entry never runs beside a dying attempt's leftover make."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run_on_worker(entry: dict, work_root: str, runs: int, splits: int) -> dict:
    """A Dask task: make all for the entry in work_root/<stem>/ (kept on the worker, so a later run with a changed
    config redoes only what it affects), then the folder as zip bytes, with the exit code and error line."""
    rdir = str(Path(work_root) / entry["stem"])
    with locked(Path(work_root) / f".{entry['stem']}.lock"):
        rc, error, seconds = run_make(entry, rdir, runs, splits, drop=NANNY_ENV)
        data = zip_folder(Path(rdir))
    return {"rc": rc, "error": error, "seconds": seconds, "host": socket.gethostname(), "zip": data}


def calibrate_on_worker(work_root: str, args: list[str]) -> dict:
    """A Dask task: make calibrate's calibration (python -m lib.latency.calibrate) on this worker's device into
    work_root/calibration/, its host file started from the worker's configs/host.yaml; the folder (host.yaml,
    latency_model.yaml, latency_kernel_model.txt, calibrate.log) as zip bytes, with exit code and error line."""
    out = Path(work_root) / "calibration"
    with locked(Path(work_root) / ".calibration.lock"):
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        shutil.copy(Path("configs") / "host.yaml", out / "host.yaml")
        cmd = [sys.executable, "-m", "lib.latency.calibrate", "--host", str(out / "host.yaml"),
               "--out", str(out / "latency_model.yaml"), *args]
        rc, error, seconds = run_logged(cmd, out / "calibrate.log", drop=NANNY_ENV)
        data = zip_folder(out)
    return {"rc": rc, "error": error, "seconds": seconds, "host": socket.gethostname(), "zip": data}


def replace_folder(data: bytes, dest: Path) -> None:
    """results/<stem>/ becomes the zip's content: unpacked beside it first, then swapped in by rename, so the
    folder is the old one or the new one, never half of either."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".zoo-tmp-{dest.name}-", dir=dest.parent))
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(tmp, 0o777 & ~mask)        # mkdtemp's 0700 would outlive the rename
    try:
        unzip_into(data, tmp)
        old = None
        if dest.exists():
            old = Path(tempfile.mkdtemp(prefix=f".zoo-old-{dest.name}-", dir=dest.parent))
            os.rename(dest, old / "x")
        os.rename(tmp, dest)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
