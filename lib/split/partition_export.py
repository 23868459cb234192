"""Stage 08's exports past one boundary: any node set as part1/part2 (the DAG optimum of 07's
dag_partition.json, in splits/dag/) and a K-device pipeline as part1..partK (07's split_summary.json
`pipeline`, in pipeline/<id>/), each proven to compose to the whole model with ONNX Runtime.

A two-part node set is validated exactly as a boundary split (lib/split/export.py's validate: the folder has
the same run_split.py). The K parts of a pipeline run in turn, each fed from what the graph inputs and the
earlier parts produced (a tensor that skips a device is forwarded by the runner, as the middle device would
pass it on), and every graph output is compared with the full model's by runner.py's exactness check.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx

from lib.artifacts import read_json, write_json
from lib.errors import StageError
from lib.onnx.graph import Graph
from lib.provenance import same_inputs
from lib.split.export import (ModelRunError, SplitExporter, _full_session, _link_or_copy, _ort_error, check_part,
                              cut_bytes, export_one, link_external_data, progress, pruned_note, split_line, validate, write_runner)
from lib.split.runner import compare_output, outputs, session, stored_eps


def set_interface(g: Graph, left: np.ndarray, consts: set[str]) -> dict:
    """The tensors the parts of a partition exchange (`left`: bool per position, predecessor-closed): 07's
    definition, with a node set for the prefix."""
    outputs, cut, left_outs = set(g.graph_outputs), [], []
    for pos in np.flatnonzero(left).tolist():
        for t in g.nodes[pos].output:
            if not t or t in consts:
                continue
            if any(not left[c] for c in g.consumers.get(t, ())):
                cut.append(t)
            elif t in outputs:
                left_outs.append(t)
    ins = lambda side: [t for t in g.graph_inputs if any(left[c] == side for c in g.consumers.get(t, ()))]  # noqa: E731
    return {"cut_tensors": cut, "left_graph_outputs": left_outs, "right_graph_inputs": ins(False),
            "left_graph_inputs": ins(True), "n_left": int(left.sum()), **cut_bytes(g, cut)}


def _save(exporter: SplitExporter, parts: dict, out_dir: Path) -> dict:
    """Write the parts (checked like a boundary split's) and full.onnx beside them; returns how external data
    was reached."""
    out_dir.mkdir(parents=True, exist_ok=True)
    links: dict[str, str] = {}
    for name, m in parts.items():
        for loc, how in link_external_data(m, exporter.path.parent, out_dir, exporter.mode, exporter.shared).items():
            links.setdefault(loc, how)
        check_part(m, f"{out_dir.name}: {name}.onnx")
        onnx.save(m, str(out_dir / f"{name}.onnx"))
    exporter._full_beside(out_dir, links, parts)
    return links


def export_set(exporter: SplitExporter, left: np.ndarray, out_dir: Path, label: str) -> dict:
    """part1 (the nodes in `left`) and part2 (the rest) of any predecessor-closed node set."""
    iface = set_interface(exporter.g, left, exporter.consts)
    p1_out = iface["cut_tensors"] + iface["left_graph_outputs"]
    p2_out = [t for t in exporter.g.graph_outputs if t not in set(p1_out)]
    if not p1_out or not p2_out:
        raise StageError(f"{label}: nothing crosses the partition, or the right part computes no graph output")
    parts = {"part1": exporter.part(label, "part1", iface["left_graph_inputs"], p1_out),
             "part2": exporter.part(label, "part2", iface["cut_tensors"] + iface["right_graph_inputs"], p2_out)}
    iface.update(external_data=_save(exporter, parts, out_dir), reduction_size=exporter.reduction_size,
                 random_nodes_seeded=exporter.seeded)
    return iface


def left_mask(g: Graph, names: list[str], source: str = "dag_partition.json",
              remedy: str = "re-run 07_split_candidates.py") -> np.ndarray:
    pos = {n: i for i, n in enumerate(g.names)}
    missing = [n for n in names if n not in pos]
    if missing:
        raise StageError(f"{source} names nodes the graph lacks ({missing[:3]}): {remedy}")
    left = np.zeros(len(g.names), bool)
    left[[pos[n] for n in names]] = True
    return left


def export_dag(exporter: SplitExporter, rdir: Path, feeds: dict, opts: dict, meta: dict) -> dict | None:
    """splits/dag/: 07's latency-optimal DAG partition, exported and validated like a boundary split (None
    when 07 wrote no dag_partition.json; a partition of another model or input spec is refused)."""
    if not (rdir / "dag_partition.json").exists():
        return None
    doc = read_json(rdir, "dag_partition.json")
    _same_run(doc, meta, "dag_partition.json")
    part = doc["partitions"].get("latency")
    if part is None:
        return None
    iface = set_interface(exporter.g, left_mask(exporter.g, part["left_nodes"]), exporter.consts)
    if not iface["cut_tensors"] and not iface["left_graph_outputs"]:
        # ppocrv4_det's optimum put 234 nodes on A that compute constants only: a whole-model run on B, not a split
        shutil.rmtree(rdir / "splits" / "dag", ignore_errors=True)
        print(f"  splits/dag: not exported: the DAG optimum sends nothing between the devices (its {iface['n_left']} "
              f"node{'s' if iface['n_left'] != 1 else ''} on A feed no tensor to B and compute no output): the model runs whole on B")
        return None
    return export_node_set(exporter, part["left_nodes"], rdir / "splits" / "dag", "dag", feeds, opts, meta)


def export_node_set(exporter: SplitExporter, names: list[str], out: Path, label: str, feeds: dict, opts: dict,
                    meta: dict) -> dict:
    """Any node set on device A (names; predecessor-closed) as part1/part2 in `out`, validated like a boundary
    split; an export failure is the report's error."""
    shutil.rmtree(out, ignore_errors=True)
    try:
        left = left_mask(exporter.g, names)
        iface = export_set(exporter, left, out, label)
        write_runner(out, {**iface, **meta, "boundary": label}, opts.get("inputs_npz"))
        rep = {"split": label, **validate(out, feeds, opts["atol"], opts["rtol"], opts["runs"], iface["cut_tensors"],
                                          exporter, opts.get("hint", ""))}
        rep.update(n_left=iface["n_left"], comm_bytes=iface["comm_bytes"], cut_unknown_size=iface["cut_unknown_size"])
    except ModelRunError:
        raise
    except StageError as e:
        out.mkdir(parents=True, exist_ok=True)
        rep = {"split": label, "pass": False, "max_abs_diff": None, "error": str(e)}
    write_json(rep, out / "validation_report.json")
    return rep


def read_node_set(path: str, g: Graph) -> list[str]:
    """--left-nodes: a JSON list of node names (or {"left_nodes": [...]}, as dag_partition.json's entries),
    predecessor-closed; a bad file is refused (exit 2) before anything is exported."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise StageError(f"--left-nodes {path}: not a readable JSON file ({type(e).__name__})") from None
    names = doc.get("left_nodes") if isinstance(doc, dict) else doc
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise StageError(f"--left-nodes {path}: expected a non-empty JSON list of node names")
    left = left_mask(g, names, f"--left-nodes {path}", "give node names as ops_profile.csv's node column has them")
    open_ = [g.names[i] for i in np.flatnonzero(left) for p in g.preds(int(i)) if not left[p]]
    if open_:
        raise StageError(f"--left-nodes {path}: not closed under predecessors ({open_[0]} needs a node left out)")
    if left.all():
        raise StageError(f"--left-nodes {path}: names every node of the graph, leaving nothing for the second part")
    return names


def _same_run(doc: dict, meta: dict, name: str) -> None:
    ident, mine = doc.get("identity") or {}, meta.get("identity") or {}
    sha = lambda i: (i.get("model") or {}).get("graph_sha256")  # noqa: E731
    if sha(ident) != sha(mine) or not same_inputs(ident.get("inputs"), mine.get("inputs")):
        raise StageError(f"{name} belongs to another model or input spec: re-run 07_split_candidates.py")


# ---------------------------------------------------------------- K-device pipelines

PIPELINE_IDS = ("latency", "throughput")    # 07's two pipelines: latency-optimal, throughput-optimal

def chain_parts(exporter: SplitExporter, bounds: list[int], label: str) -> list:
    """The K models of a pipeline cut after positions `bounds` (K - 1 of them, increasing): part k computes
    its nodes' outputs that a later part reads or the model returns, from the tensors earlier parts made."""
    g = exporter.g
    n = len(g.names)
    edges = [-1, *bounds, n - 1]
    outputs, models, given = set(g.graph_outputs), [], set()
    for k in range(len(edges) - 1):
        lo, hi = edges[k] + 1, edges[k + 1]
        outs = [t for p in range(lo, hi + 1) for t in g.nodes[p].output if t and t not in exporter.consts and
                (t in outputs or any(c > hi for c in g.consumers.get(t, ())))]
        if k == len(edges) - 2:     # the last part also returns the graph outputs no part computes (constants, as a
            # buffer a torch module returns: no pipeline composed them, and each failed its validation)
            outs += [t for t in g.graph_outputs if t not in given and t not in outs]
        given.update(outs)
        ins = list(dict.fromkeys(t for p in range(lo, hi + 1) for t in g.inputs(p)
                                 if t in g.producer and g.producer[t] < lo and t not in exporter.consts))
        if not outs:
            raise StageError(f"{label}: part{k + 1} computes nothing a later part or the model needs")
        models.append(exporter.part(label, f"part{k + 1}", ins, outs))
    return models


def check_chain(out_dir: Path, k: int, feeds: dict, reduction_size: int, hint: str = "") -> dict:
    """The parts run in turn against full.onnx, graph optimizations off: runner.py's exactness check (each
    output within the bound its dtype and the model's longest reduction allow, relative to its scale)."""
    import onnxruntime as ort
    _full_session(out_dir, feeds, ort, hint)
    full = session("full.onnx", "cpu", ort, out_dir, optimize=False)
    ref = outputs(full, feeds)
    env, stored = dict(feeds), []
    for i in range(1, k + 1):
        sess = session(f"part{i}.onnx", "cpu", ort, out_dir, optimize=False)
        try:
            got = outputs(sess, env)
        except Exception as e:  # noqa: BLE001 - ORT raises its own types: this partition fails, 08 goes on
            raise StageError(f"ONNX Runtime fails running part{i}: {_ort_error(e)}") from None
        stored += stored_eps(sess, got) if i < k else []
        env.update(got)
    outs = {name: compare_output(env.get(name), r, stored, reduction_size) for name, r in ref.items()}
    return {"pass": all(o["pass"] for o in outs.values()), "graph_optimizations": "off (ORT_DISABLE_ALL)",
            "max_abs_diff": max((o.get("max_abs_diff") or 0.0 for o in outs.values()), default=0.0), "outputs": outs}


def export_pipelines(exporter: SplitExporter, rdir: Path, pipelines: dict, feeds: dict, opts: dict) -> dict:
    """pipeline/<id>/part1..partK.onnx (+ full.onnx) for each of 07's pipelines, validated in turn."""
    reports = {}
    for pid, p in pipelines.items():
        out = rdir / "pipeline" / pid
        shutil.rmtree(out, ignore_errors=True)
        twin = next((q for q, r in reports.items() if r["boundaries"] == p["boundaries"]), None)
        if twin is not None:        # the same cuts: the twin's files, hardlinked (no second export, no disk)
            shutil.copytree(rdir / "pipeline" / twin, out, copy_function=_link_or_copy)
            reports[pid] = {**reports[twin], "pipeline": pid, "same_as": twin}
            write_json(reports[pid], out / "validation_report.json")    # atomic: replaces the link, not the twin's
            continue
        try:
            models = chain_parts(exporter, p["boundaries"], f"pipeline {pid}")
            _save(exporter, {f"part{i + 1}": m for i, m in enumerate(models)}, out)
            rep = {"pipeline": pid, "boundaries": p["boundaries"], "parts": len(models),
                   **check_chain(out, len(models), feeds, exporter.reduction_size, opts.get("hint", ""))}
        except ModelRunError:
            raise
        except (StageError, RuntimeError) as e:
            out.mkdir(parents=True, exist_ok=True)
            rep = {"pipeline": pid, "boundaries": p["boundaries"], "pass": False, "max_abs_diff": None, "error": str(e)}
        write_json(rep, out / "validation_report.json")
        reports[pid] = rep
    return reports


def export_beyond(exporter: SplitExporter, rdir: Path, feeds: dict, opts: dict, meta: dict,
                  left_nodes: list[str] | None = None) -> dict:
    """08's exports past the boundaries: the DAG optimum, 07's pipelines and a user's node set (splits/custom/,
    from --left-nodes), each line printed."""
    summ = read_json(rdir, "split_summary.json") if (rdir / "split_summary.json").exists() else {}
    out = {"dag": export_dag(exporter, rdir, feeds, opts, meta)}
    if left_nodes:
        out["custom"] = export_node_set(exporter, left_nodes, rdir / "splits" / "custom", "custom", feeds, opts, meta)
    if summ.get("pipeline"):
        _same_run(summ, meta, "split_summary.json")
        chosen = {k: summ["pipeline"][k] for k in PIPELINE_IDS if summ["pipeline"].get(k)}
        out["pipelines"] = export_pipelines(exporter, rdir, chosen, feeds, opts)
    for name, r in named_reports(out):
        print(f"  {name}: " + (f"not validated: {r['error']}" if r.get("error") else
                               f"{'PASS' if r['pass'] else 'FAIL'} max|diff| {r['max_abs_diff']:.2e}"))
    return out


def named_reports(beyond: dict) -> list[tuple[str, dict]]:
    """(folder, report) of each partition in export_beyond's result: splits/dag, splits/custom, pipeline/<id>."""
    pairs = [("splits/dag", beyond.get("dag")), ("splits/custom", beyond.get("custom"))] + \
        [(f"pipeline/{k}", v) for k, v in (beyond.get("pipelines") or {}).items()]
    return [(name, r) for name, r in pairs if r is not None]


def beyond_failures(beyond: dict) -> list[str]:
    """The folders of export_beyond's validated partitions that failed (08's exit code needs each to pass). A
    partition that could not be exported (its error is in the report and printed) does not fail the stage: the
    boundary splits are 08's contract, these are extras."""
    return [name for name, r in named_reports(beyond) if not r.get("error") and r["pass"] is not True]


def export_boundaries(exporter: SplitExporter, bd, chosen: list[int], rdir: Path, feeds: dict, opts: dict,
                      meta: dict) -> list[dict]:
    """splits/b<B>/ for each chosen boundary (lib/split/export.py's export_one), one line printed per split."""
    reports = []
    for k, b in enumerate(chosen, 1):
        note = pruned_note(bd, b)
        if note:
            print(f"note: 07 pruned boundary {b} ({note}); exported because --boundary asked for it")
        progress(k, len(chosen), f"boundary {b} (after {exporter.g.names[b]}): export, validate")
        reports.append({**export_one(exporter, b, rdir / "splits" / f"b{b}", feeds, opts, meta),
                        **({"pruned_by_07": note} if note else {})})
        print(split_line(reports[-1]))
    return reports
