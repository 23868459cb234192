"""The two ways to run a zoo's entries: local processes (the default; `make all` per entry, JOBS at a time) and
Dask distributed (one task per entry on the workers offering its resources; results come back as zip bytes and
replace results/<stem>/ by rename). Each calls on_done(stem, record) as an entry finishes; a record is
{status, error, seconds, host}."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import cloudpickle
from distributed import Client
from distributed import as_completed as dask_completed

from lib.artifacts import REPO
from lib.errors import StageError
from lib.zoo import remote

CONNECT_TIMEOUT = "5s"


def stop_process_group(p: subprocess.Popen, timeout: float = 20.0) -> None:
    """Stop a process started with start_new_session=True (a Dask scheduler or worker) and its children: SIGTERM
    to its group, SIGKILL when it has not ended after `timeout` seconds."""
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _record(rc: int, error: str, seconds: float, host: str) -> dict:
    return {"status": "ok" if rc == 0 else "failed", "error": error, "seconds": round(seconds, 2), "host": host}


def run_local(jobs: list[dict], root: Path, n: int, runs: int, splits: int, on_start, on_done) -> None:
    """make all for every job ({entry, rdir}), n at a time (threads wait on the make processes; the host's profile
    lock keeps every other stage off the cores while a stage 01 runs)."""
    host = socket.gethostname()

    def one(job):
        stem = job["entry"]["stem"]
        on_start(stem)
        rc, error, seconds = remote.run_make(job["entry"], str(job["rdir"]), runs, splits, cwd=str(REPO))
        on_done(stem, _record(rc, error, seconds, host))

    with ThreadPoolExecutor(max_workers=max(1, n)) as pool:
        for f in as_completed([pool.submit(one, j) for j in jobs]):
            f.result()      # a bug in one() surfaces here


def connect(scheduler: str):
    """A Dask client of the scheduler, or StageError with one line saying why not."""
    try:
        client = Client(scheduler, timeout=CONNECT_TIMEOUT)
    except (OSError, TimeoutError, ValueError) as e:
        raise StageError(f"cannot reach the Dask scheduler at {scheduler} ({type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else 'no answer'}); start one with "
                         f"`.venv/bin/dask scheduler` and workers with `.venv/bin/dask worker {scheduler} "
                         f"--resources host_cpu=1` from the project root") from None
    try:
        client.wait_for_workers(1, timeout=30)
    except TimeoutError:
        client.close()
        raise StageError(f"the Dask scheduler at {scheduler} has no worker (start one with `.venv/bin/dask worker "
                         f"{scheduler} --resources host_cpu=1` from the project root)") from None
    return client


# Dask pickles a plain function by reference (the scheduler and workers would import lib.zoo.remote, which
# is not on their sys.path); a lambda goes through cloudpickle, which ships remote's functions by value
_task = lambda entry, work_root, runs, splits: remote.run_on_worker(entry, work_root, runs, splits)  # noqa: E731


_calibrate_task = lambda work_root, args: remote.calibrate_on_worker(work_root, args)  # noqa: E731


def calibrate_on(client, resources: dict[str, float], work_root: str, args: list[str]) -> dict:
    """The calibration as one task on a worker offering `resources` (the device's): remote.calibrate_on_worker's
    record. A resource no worker offers is a one-line StageError."""
    cloudpickle.register_pickle_by_value(remote)
    lacking = _lacking(resources, _offered(client))
    if lacking:
        raise StageError(lacking)
    return client.submit(_calibrate_task, work_root, args, resources=resources, pure=False).result()


def _offered(client) -> set[str]:
    return {r for w in client.scheduler_info(n_workers=-1)["workers"].values() for r in (w.get("resources") or {})}


def _lacking(resources, offered: set[str]) -> str:
    """The one-line reason no worker can take a task needing `resources` ("" when one can)."""
    lacking = sorted(set(resources) - offered)
    return (f"no Dask worker offers resource {', '.join(lacking)} (start one with --resources {lacking[0]}=1)"
            if lacking else "")


def run_dask(jobs: list[dict], root: Path, client, work_root: str, runs: int, splits: int, on_start, on_done) -> None:
    """One task per job on a worker with its resources; its results folder replaces root/<stem>/ atomically.
    A worker that dies mid-task: the scheduler gives the task to another (its distributed.scheduler.allowed-failures
    times, 3 by default), then the row fails with KilledWorker."""
    cloudpickle.register_pickle_by_value(remote)    # workers need nothing of lib/ on their sys.path
    offered, futures = _offered(client), {}
    for j in jobs:
        e = j["entry"]
        lacking = _lacking(e["resources"], offered)
        if lacking:
            on_done(e["stem"], _record(1, lacking, 0.0, ""))
            continue
        f = client.submit(_task, e, work_root, runs, splits, resources=e["resources"], pure=False,
                          key=f"zoo-{e['stem']}-{j['key'][:12]}")
        futures[f] = e["stem"]
        on_start(e["stem"])
    for f in dask_completed(list(futures)):
        stem = futures[f]
        try:
            res = f.result()
        except Exception as err:  # noqa: BLE001 - KilledWorker, a lost connection ...: this row fails, not the zoo
            on_done(stem, _record(1, f"Dask: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}",
                                  0.0, ""))
            continue
        remote.replace_folder(res["zip"], root / stem)
        on_done(stem, _record(res["rc"], res["error"], res["seconds"], res["host"]))
