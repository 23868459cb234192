#!/usr/bin/env python3
"""The pipeline over a zoo of models: `make all` for every entry of a zoo file (model x input spec), each in its own
results/<stem>/, then results/zoo.csv (one row per entry: status and the one-line error of the stage that refused
it, session and predicted latency, MACs, weights, peak activation memory, kernel-time coverage, best split and
its gain, the DAG optimum, run ids) and the zoo's sortable table on results/index.html.

An entry whose model, npz, code and configs are unchanged since its last good run is not run again. Entries run
in parallel local processes (--jobs, profiles one at a time per host), or with --engine dask as tasks of a Dask
cluster (--scheduler tcp://host:8786; workers started from the project root as
`.venv/bin/dask worker tcp://host:8786 --resources host_cpu=1`). Paths in the zoo file are relative to the
project root. The format and cluster set-ups: docs/zoo.md.
"""
from pathlib import Path

from lib import cli
from lib.artifacts import REPO
from lib.zoo.run import run_zoo


def main(argv=None):
    p = cli.parser(__doc__, model="none",
                   results_help="results root: zoo.csv, index.html and one <stem>/ per entry (default: results/)")
    p.add_argument("--zoo", required=True, metavar="YAML", help="the zoo file (docs/zoo.md)")
    p.add_argument("--engine", choices=["local", "dask"], default="local", help="where entries run (default: local)")
    p.add_argument("--scheduler", metavar="ADDR", help="the Dask scheduler, e.g. tcp://127.0.0.1:8786 (--engine dask)")
    p.add_argument("--jobs", type=int, default=2, help="local engine: entries at a time (default: %(default)s)")
    p.add_argument("--runs", type=int, default=10, help="profiling runs per entry (make's RUNS; default: %(default)s)")
    p.add_argument("--splits", type=int, default=3, help="splits exported per entry (make's SPLITS; default: "
                   "%(default)s)")
    p.add_argument("--work-root", default="results/.zoo-work", metavar="DIR", help="Dask workers: where each worker "
                   "keeps the entries it ran, relative to its project root (default: %(default)s)")
    a = cli.parse(p, argv)
    if a.engine == "dask" and not a.scheduler:
        p.error("--engine dask needs --scheduler tcp://HOST:PORT (make zoo ENGINE=dask SCHEDULER=...)")
    if a.jobs < 1 or a.runs < 1 or a.splits < 0:
        p.error("--jobs and --runs must be >= 1, --splits >= 0")
    root = Path(a.results) if a.results else REPO / "results"
    rows = run_zoo(a.zoo, root, a.engine, a.scheduler, a.jobs, a.runs, a.splits, a.work_root)
    failed = [r for r in rows if r["status"] != "ok"]
    ran = sum(not r["cached"] and r["status"] == "ok" for r in rows)
    print(f"wrote {root / 'zoo.csv'} and {root / 'index.html'}: {len(rows) - len(failed)} of {len(rows)} ok "
          f"({ran} run now, {sum(bool(r['cached']) for r in rows)} unchanged)")
    for r in failed:
        print(f"  failed {r['stem']}: {r['error']}")


if __name__ == "__main__":
    cli.run(main)
