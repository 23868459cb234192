"""Profile models in-process with ONNX Runtime, as stage 01 does, into the kernel model's training records.

A record: {"model", "family", "kernels" (lib/latency/kernels.py's table with measured t_us), "session_us" (median
session wall time, stage 01's session_latency; None for a micro-benchmark graph: its kernels train, its session
is not a model's), "profile" (an ops_profile-like node table for the baseline efficiency model, with ORT's
fusions from its optimized graph, never from the measured kernel times)}.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import pandas as pd

from lib.analysis.roofline import merge, roofline
from lib.artifacts import CONFIGS
from lib.errors import StageError
from lib.latency.kernels import kernel_table
from lib.latency.microbench import _build, _fix_inputs, _graph_and_feeds_of_path, _graph_of
from lib.latency.profiling import calling_thread_pinned, latency_table, name_nodes, profile_model
from lib.onnx.metrics import node_metrics
from lib.onnx.underflow import measure


def fusion_roles(g, optimized: onnx.ModelProto) -> pd.DataFrame:
    """Per original node: attribution and fused_into from ORT's optimized graph alone (no times)."""
    names = [n.name for n in name_nodes(optimized).graph.node]
    df, _ = latency_table(g, {"per_run": [{k: 1.0 for k in names}], "optimized": optimized})
    return df[["node", "attribution", "fused_into"]]


def training_inputs(path) -> tuple:
    """(graph, feeds) of a training model as make calibrate profiles it (stage 01's seeded inputs, the workload's
    shapes): a bench comparing its own measurement with calibration's must feed the same inputs."""
    return _graph_and_feeds_of_path(path, None, str(CONFIGS / "workload.yaml"))


def costs(path: str | Path, graph, feeds) -> pd.DataFrame:
    """Stage 02's table of a model run on `feeds`: node_metrics, each Softmax's exp_underflow and each node's
    subnormal."""
    metrics = node_metrics(graph)
    for c, v in measure(path, graph, feeds)[0].items():
        metrics[c] = v
    return metrics


def profile_record(path: str | Path, name: str, family: str, host: dict, *, runs: int = 10, warmup: int = 3,
                   threads: int = 0, graph=None, feeds=None, session: bool = True, metrics=None) -> dict:
    """One model (or micro graph) profiled: its training record (see the module docstring). metrics: costs() of
    graph and feeds, when the caller has them."""
    if graph is None:
        graph, feeds = training_inputs(path)
    if metrics is None:
        metrics = costs(path, graph, feeds)
    with tempfile.TemporaryDirectory(prefix="ktrain_") as tmp:
        prof = profile_model(str(path), feeds, runs=runs, warmup=warmup, threads=threads, progress=False,
                             keep_dir=Path(tmp))
        events = json.loads((Path(tmp) / "ort_trace.json").read_text())
    kt = kernel_table(graph, metrics, prof["optimized"], events, warmup)
    node_profile = roofline(merge(metrics, None), host)
    roles = fusion_roles(graph, prof["optimized"]).set_index("node")
    for c in ("attribution", "fused_into"):
        node_profile[c] = node_profile["node"].map(roles[c]).fillna("").to_numpy(object)
    return {"model": name, "family": family, "kernels": kt, "profile": node_profile,
            "session_us": float(np.median(prof["wall_us"])) if session else None, "optimized": prof["optimized"],
            "graph": graph, "metrics": metrics}


def profile_models(models: list[tuple[str, str, Path]], host: dict, *, runs: int = 10, threads: int = 0,
                   rounds: int = 1, progress=None) -> list[dict]:
    """[(name, family, path)] -> records; a model ORT or the analysis cannot take is skipped with a note.
    rounds: every model profiled this many times, the models in turn, and its rounds merged (merge_rounds): a
    shared machine's speed drifts by tens of percent within minutes, and one slow spell then lands on no model
    whole."""
    done: dict[str, list[dict]] = {}
    graphs: dict[str, tuple] = {}
    skipped: set[str] = set()
    for rnd in range(rounds):
        for k, (name, family, path) in enumerate(models):
            if name in skipped:
                continue
            t0 = time.perf_counter()
            try:
                if name not in graphs:      # inferred and costed once, profiled every round
                    g, feeds = training_inputs(path)
                    graphs[name] = (g, feeds, costs(path, g, feeds))
                g, feeds, metrics = graphs[name]
                done.setdefault(name, []).append(profile_record(path, name, family, host, runs=runs, threads=threads,
                                                                graph=g, feeds=feeds, metrics=metrics))
            except StageError as e:
                print(f"  note: {name} skipped: {e}", flush=True)
                skipped.add(name)
                done.pop(name, None)
                continue
            if progress is not None:
                progress(rnd * len(models) + k + 1, rounds * len(models),
                         f"round {rnd + 1}/{rounds}, {name}: {len(done[name][-1]['kernels'])} kernels, "
                         f"{done[name][-1]['session_us'] / 1e3:.2f} ms, {time.perf_counter() - t0:.1f} s")
    return [merge_rounds(r) for r in done.values()]


def kernel_identity(kt: pd.DataFrame) -> pd.Series:
    """A kernel's identity across sessions of one model: its op, node and shapes (and its rank among kernels
    alike). Not its name: ORT numbers the NCHWc Reorder kernels it inserts anew in each session
    (ReorderOutput_token_229 was another tensor's reorder in the next session: 51 of ppocrv4_det's 395 kernels)."""
    key = kt["op"].astype(str) + "|" + kt["node"].astype(str) + "|" + kt["in_shapes"].astype(str) + "|" + \
        kt["out_shapes"].astype(str)
    return key + "|" + key.groupby(key).cumcount().astype(str)


def merge_rounds(recs: list[dict]) -> dict:
    """One record from a model's rounds (sessions): each kernel's time (kernel_identity()) and the session are
    the medians over the rounds; names and graphs are the first round's."""
    if len(recs) == 1:
        return recs[0]
    kt = recs[0]["kernels"].copy()
    ids = kernel_identity(kt)
    times = np.array([r["kernels"].set_index(kernel_identity(r["kernels"]))["t_us"].reindex(ids).to_numpy(float)
                      for r in recs])
    kt["t_us"] = np.nanmedian(times, axis=0)

    sessions = [r["session_us"] for r in recs]      # None: a micro-benchmark graph's, whose session is not a model's
    return {**recs[0], "kernels": kt, "session_us": None if None in sessions else float(np.median(sessions))}


MICRO_SESSIONS = 3


def micro_records(case_list, host: dict, *, runs: int = 8, threads: int = 0,
                  sessions: int = MICRO_SESSIONS) -> list[dict]:
    """The micro-benchmark cases (lib/latency/microbench.py), one graph each, as kernel-only records.

    Each case runs in `sessions` sessions, one after the other, merged as a model's rounds are (merge_rounds: each
    kernel's median): one session can run a memory-bound kernel about 3x slower in every one of its runs (a
    1x32x112x112 Mul took 110 us in all 20 runs of one session, 33-36 us in three others; 36% of the cases moved
    more than 1.5x between three sessions), a mode that a single session samples at random. The calling thread is
    pinned while they run (lib.latency.profiling.calling_thread_pinned: on a worker's core it halved a lone
    kernel's threads)."""
    out = []
    with tempfile.TemporaryDirectory(prefix="kmicro_") as tmp:
        for i, c in enumerate(case_list):
            b = _build([(f"mb{i:04d}", c)])
            model = _fix_inputs(b.model(), b.shapes)
            path = os.path.join(tmp, f"mb{i:04d}.onnx")
            onnx.save(model, path)
            try:
                g = _graph_of(model)
                metrics = costs(path, g, b.feeds)
                with calling_thread_pinned():
                    recs = [profile_record(path, c.label, "micro", host, runs=runs, warmup=2, threads=threads,
                                           graph=g, feeds=b.feeds, session=False, metrics=metrics)
                            for _ in range(sessions)]
            except StageError:
                continue
            rec = merge_rounds(recs)
            rec["case_family"] = c.family
            out.append(rec)
    return out
