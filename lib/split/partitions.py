"""What stage 07 adds past the boundary sweep: the DAG optimum (lib/split/dag.py) into split_summary.json and
dag_partition.json (the node sets stage 08 exports), and the K-device pipelines (lib/split/pipeline.py) when
the system has three or more devices."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from lib.artifacts import write_csv, write_json
from lib.onnx.graph import GraphArrays
from lib.split.bandwidth import bandwidth_crossover, plot, precision_columns, precision_summary, sweep
from lib.split.dag import cut_graph, dag_optima, real_ops
from lib.split.pipeline import best_pipelines
from lib.split.ranking import device_times
from lib.split.system import chain


def beyond_boundaries(df, prof, latency, system: dict, a: GraphArrays, base: dict, rdir: Path, ident: dict) -> dict:
    """The DAG optima (latency, energy; their node sets to dag_partition.json), the K-device pipelines, the cut
    priced at fp16/int8 (columns added to `df`: boundaries.csv), the bandwidth crossover and sweep
    (bandwidth_sweep.csv, bandwidth_sweep.png); returns split_summary.json's entries."""
    ta, tb = (np.asarray(device_times(prof, latency, system["devices"][k]), float) for k in ("A", "B"))
    cg = cut_graph(a)
    summ, parts = dag_optima(a, cg, ta, tb, system, df, base)
    write_json({**ident, "partitions": parts}, rdir / "dag_partition.json", indent=None)
    summ["pipeline"] = pipelines(df, prof, latency, system, a)
    precision_columns(df, a, prof["dtype"].to_numpy(object) if "dtype" in prof else np.full(len(prof), ""))
    summ["cut_precision"] = precision_summary(df, base, system)
    summ["bandwidth_crossover"] = bandwidth_crossover(df, summ["dag_optimum"], base, system,
                                                      int(system.get("ranking", {}).get("top_k", 10)))
    sw = sweep(df, a, cg, ta, tb, system, base)
    write_csv(sw, rdir / "bandwidth_sweep.csv")
    plot(sw, rdir / "bandwidth_sweep.png", f"{rdir.name}: best partition against link bandwidth")
    summ["bandwidth_sweep"] = {"csv": "bandwidth_sweep.csv", "plot": "bandwidth_sweep.png", "points": len(sw),
                               "dag_included": "dag_latency_us" in sw}
    return summ


def pipelines(df, prof, latency, system: dict, a: GraphArrays) -> dict | None:
    """The K-device pipelines (None for a two-device system), with the nodes after which each cut falls."""
    keys, links = chain(system)
    if len(keys) < 3:
        return None
    devs = [system["devices"][k] for k in keys]
    out = best_pipelines([np.asarray(device_times(prof, latency, d), float) for d in devs],
                         df["n_cut_tensors"].to_numpy(float), df["comm_bytes"].to_numpy(float), links,
                         [float(d["power_w"]) for d in devs], [d.get("name", k) for k, d in zip(keys, devs)],
                         real_ops(a))
    for pid in ("latency", "throughput"):
        if out is not None:
            out[pid]["after_nodes"] = a.names[out[pid]["boundaries"]].tolist()
    return out and {"device_keys": keys, **out}


def pipeline_line(p: dict | None) -> str:
    """07's lines on the pipelines."""
    if p is None:
        return ""
    rows = [f"{len(p['devices'])}-device pipeline ({' -> '.join(p['device_keys'])}; split_summary.json pipeline):"]
    for pid in ("latency", "throughput"):
        q = p[pid]
        rows.append(f"  {pid}-optimal: cuts after {q['after_nodes']}, {q['est_latency_us'] / 1e3:.3f} ms end to end, "
                    f"period {q['period_us'] / 1e3:.3f} ms ({q['throughput_per_s'] or 0:.1f}/s), {q['est_energy_j'] * 1e3:.3f} mJ; "
                    f"speed-up over the fastest single device x{q['latency_ratio_vs_best_single'] or 0:.3f} (latency), "
                    f"x{q['throughput_ratio_vs_best_single'] or 0:.3f} (throughput); below 1: slower")
    return "\n".join(rows)


def dag_line(d: dict | None, skipped: str | None = None) -> str:
    """07's line on the DAG optimum."""
    if d is None:
        return f"DAG optimum: skipped ({skipped})" if skipped else "DAG optimum: none (fewer than two real nodes)"
    g = d["gain_vs_best_boundary"]
    if d.get("runs_whole_on"):
        other = "A" if d["runs_whole_on"] == "B" else "B"
        n = d['n_left'] if other == 'A' else d['n_right']
        return (f"DAG optimum (min cut): the model runs whole on {d['runs_whole_on']}, {d['est_latency_us'] / 1e3:.3f} ms "
                f"({n} node{'s' if n != 1 else ''} on {other}, which {'send' if n != 1 else 'sends'} nothing and "
                f"{'compute' if n != 1 else 'computes'} no output; nothing to export); best boundary b{g['boundary']} "
                f"{g['est_latency_us'] / 1e3:.3f} ms")
    return (f"DAG optimum (min cut): {d['est_latency_us'] / 1e3:.3f} ms, {d['n_left']} nodes on A, {d['n_cut_tensors']} "
            f"cut tensors ({d['comm_bytes'] / 1024:.1f} KiB), {'a prefix (b%d)' % d['prefix_boundary'] if d['is_prefix'] else 'not a prefix'}; "
            f"vs best boundary b{g['boundary']} {g['est_latency_us'] / 1e3:.3f} ms (x{g['ratio'] or 0:.3f}), "
            f"vs all on A x{d['gain_vs_all_on_a']['ratio'] or 0:.3f}, vs all on B x{d['gain_vs_all_on_b']['ratio'] or 0:.3f}")


def bandwidth_line(summ: dict) -> str:
    """07's lines on the bandwidth crossover and the cut precision."""
    cross = ", ".join(f"{k if k == 'dag' else 'b' + k} " + ("never" if v is None else f"{v * 8 / 1e6:.3g} Mbit/s")
                      for k, v in (summ.get("bandwidth_crossover") or {}).items())
    p = summ["cut_precision"]
    return (f"bandwidth above which a split beats the better single device: {cross or 'no candidate'}\n"
            f"boundaries that pay at fp32 / fp16 / int8 cut tensors: {p['boundaries_paying_fp32']} / "
            f"{p['boundaries_paying_fp16']} / {p['boundaries_paying_int8']} ({p['int8_only_count']} only with int8)")


def beyond_lines(summ: dict) -> str:
    """07's summary lines past the boundaries."""
    return "\n".join(x for x in (dag_line(summ.get("dag_optimum"), summ.get("dag_skipped")), pipeline_line(summ.get("pipeline")),
                                 bandwidth_line(summ)) if x)
