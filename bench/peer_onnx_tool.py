#!/usr/bin/env python3
"""This project against onnx-tool (PyPI `onnx-tool`), side by side, in one run: wall time, peak RSS and
MACs per op type on the same model files.

    .venv/bin/python bench/peer_onnx_tool.py [--models vit_b_16 resnet50 ...] [--repeats 3] [--skip-peer]
                                             [--skip-big] [--big] [--peer-timeout 900] [--json OUT]
                                             [--project-dir DIR] [--baseline REV|DIR] [--no-macs] [--record]
    .venv/bin/python bench/peer_onnx_tool.py --report OUT.json     # print the tables again, measure nothing

Per model, each measured as its own process under /usr/bin/time -v (wall = median of --repeats runs, peak RSS
= median of the runs' "Maximum resident set size"), the runs of the three interleaved:
  - this project: `02_shapes_flops_bytes.py --model M --results <tmp>` (+ `--preset llm-128` for the Hugging
    Face exports); on the synthetic graphs also `03_merge_profile_metrics.py` and `07_split_candidates.py` after it
    (07 reads 03's table; "07" below is 03 + 07, with 03's part and 07 alone shown), summed with 02; one process
    per stage. With --baseline REV (a commit of this repository, extracted with `git archive`, or a checkout's
    folder), the same stages of that code are timed in the same runs, interleaved, and shown side by side with
    this one's ("before and after");
  - onnx-tool: the body of `onnx_tool.model_profile` (load, reorder, shape_infer, profile, per-node CSV),
    inlined in a small driver so that its phases are timed too, run in its own venv bench/.venv-onnx-tool
    (created on first use, pinned below; never a project dependency); killed after --peer-timeout seconds;
  - the floor: `onnx.load(path)` + `onnx.shape_inference.infer_shapes(model)` in the project's venv.
Then MACs per op type of both tools (ours: `macs` of ops_metrics.csv; onnx-tool: its per-node Forward_MACs),
side by side, with a verdict and the arithmetic where they disagree; the verdicts rest on tiny onnx.helper
graphs (ConvTranspose stride 2 with a 2x2 kernel, Conv and Gemm with bias, batched and broadcast MatMul,
LayerNormalization, Softmax) computed by hand, by both tools and by PyTorch's FlopCounterMode (2 FLOPs/MAC).
Last, one markdown summary table.

Models are built into models/ when missing (random weights, nothing downloaded): torchvision vit_b_16,
resnet50, swin_t (dynamo export via lib.onnx.export_models, and swin_t_ts: a TorchScript export, dynamo=False,
opset 17), Hugging Face BERT (hf-bert), the synthetic graphs of bench/synthetic_graphs.py at 10k, 50k and
200k nodes, and with --big models/gpt2_wide.onnx (h=1536, 12 layers, ~1.7 GB external data).
Timings on a shared machine are noisy: treat them as provisional.
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _models import REPO, ensure_model  # noqa: E402
from record import record  # noqa: E402

PY = str(REPO / ".venv" / "bin" / "python") if (REPO / ".venv" / "bin" / "python").exists() else sys.executable
PEER_VENV = REPO / "bench" / ".venv-onnx-tool"
PEER_PY = PEER_VENV / "bin" / "python"
# onnx-tool declares onnx, numpy and tabulate without versions; this set installs and works (Python 3.11)
PEER_PINS = ["onnx-tool==1.0.1", "onnx==1.23.2", "numpy==2.4.6", "tabulate==0.10.0", "protobuf==7.36.2",
             "ml_dtypes==0.6.0"]
PEER_VERSION = "1.0.1"
MODELS_DIR = REPO / "models"
LLM_PRESET = ["--preset", "llm-128"]
LLM_FEEDS = {"input_ids": [[1, 128], "int64", 0], "attention_mask": [[1, 128], "int64", 1]}

# name -> how to build it, stage-02 extra flags, onnx-tool feeds for symbolic inputs, synthetic node count
MODELS = {
    "vit_b_16": dict(build=("export", "vit_b_16")),
    "resnet50": dict(build=("export", "resnet50")),
    "swin_t": dict(build=("export", "swin_t")),
    "swin_t_ts": dict(build=("torchscript", "swin_t")),
    "bert": dict(build=("export", "hf-bert"), extra=LLM_PRESET, feeds=LLM_FEEDS),
    "synth_10k": dict(build=("synthetic", 10_000), synthetic=True),
    "synth_50k": dict(build=("synthetic", 50_000), synthetic=True),
    "synth_200k": dict(build=("synthetic", 200_000), synthetic=True),
    "gpt2_wide": dict(build=("export", "hf-gpt2", "--hidden", "1536", "--layers", "12", "--heads", "12",
                             "--external-data"), extra=LLM_PRESET, feeds=LLM_FEEDS, big=True),
}
DEFAULT_MODELS = [m for m in MODELS if not MODELS[m].get("big")]
MAC_OPS = {"Conv", "ConvTranspose", "Gemm", "MatMul", "Einsum", "ConvInteger", "QLinearConv", "MatMulInteger",
           "QLinearMatMul"}

# ---------------------------------------------------------------------------------------------- onnx-tool

PEER_DRIVER = r'''
import json, sys, time
import numpy as np
import onnx_tool
from onnx_tool import NoMacsOps

path, csv_out, feeds = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
dyn = {k: np.full(shape, fill, dtype=dt) for k, (shape, dt, fill) in feeds.items()} or None
t = {}
s = time.perf_counter()
model = onnx_tool.loadmodel(path, {"verbose": False})      # onnx.load_model + Graph(...)
g = model.graph
t["load_s"] = time.perf_counter() - s
s = time.perf_counter()
g.graph_reorder_nodes()                                    # topological sort
t["reorder_s"] = time.perf_counter() - s
s = time.perf_counter()
g.shape_infer(dyn)
t["shape_infer_s"] = time.perf_counter() - s
s = time.perf_counter()
g.profile(exclude_ops=NoMacsOps)                           # as model_profile: its hidden_ops default
t["profile_s"] = time.perf_counter() - s
s = time.perf_counter()
g.print_node_map(csv_out, exclude_ops=NoMacsOps)           # per-node table (CSV)
t["write_s"] = time.perf_counter() - s
t["nodes"] = len(g.nodemap)
t["total_macs"] = float(g.macs[0])
t["version"] = onnx_tool.VERSION
print("@@PEER@@" + json.dumps(t), flush=True)
'''

FLOOR_DRIVER = r'''
import sys, onnx
m = onnx.load(sys.argv[1])
onnx.shape_inference.infer_shapes(m)
'''


PROJECT_VERSIONS = r'''
import importlib, sys
v = [f"Python {sys.version.split()[0]}"]
for m in ("onnx", "numpy", "pandas", "polars", "pyarrow", "onnxruntime"):
    try:
        v.append(f"{m} {importlib.import_module(m).__version__}")
    except Exception:
        v.append(f"{m} absent")
print(", ".join(v))
'''


def ensure_peer_venv() -> dict:
    """Create bench/.venv-onnx-tool with the pinned onnx-tool once; returns its package versions."""
    ok = PEER_PY.exists() and subprocess.run(
        [str(PEER_PY), "-c", f"import onnx_tool, sys; sys.exit(onnx_tool.VERSION != {PEER_VERSION!r})"],
        capture_output=True).returncode == 0
    if not ok:
        print(f"creating {PEER_VENV.relative_to(REPO)} with {' '.join(PEER_PINS)} ...", flush=True)
        base = getattr(sys, "_base_executable", None) or sys.executable
        subprocess.run([base, "-m", "venv", "--clear", str(PEER_VENV)], check=True)
        r = subprocess.run([str(PEER_PY), "-m", "pip", "install", "-q", "--disable-pip-version-check", *PEER_PINS],
                           capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"error: could not install onnx-tool into {PEER_VENV}: {r.stderr.strip()[-1500:]}")
    r = subprocess.run([str(PEER_PY), "-m", "pip", "freeze", "--disable-pip-version-check"],
                       capture_output=True, text=True, check=True)
    vers = dict(line.split("==", 1) for line in r.stdout.split() if "==" in line)
    vers["python"] = subprocess.run([str(PEER_PY), "-c", "import platform; print(platform.python_version())"],
                                    capture_output=True, text=True).stdout.strip()
    return vers


# ---------------------------------------------------------------------------------------------- models

TORCHSCRIPT_EXPORT = r'''
import os, sys, warnings, torch, torchvision
warnings.simplefilter("ignore")
torch.manual_seed(0)
m = torchvision.models.get_model(sys.argv[1], weights=None).eval()
tmp = sys.argv[2] + ".tmp.onnx"
torch.onnx.export(m, (torch.randn(1, 3, 224, 224),), tmp, dynamo=False, opset_version=17,
                  input_names=["input"], output_names=["logits"])
os.replace(tmp, sys.argv[2])
'''


def build_model(name: str) -> Path:
    path = MODELS_DIR / f"{name}.onnx"
    if path.exists():
        return path
    kind, *args = MODELS[name]["build"]
    print(f"building {path.relative_to(REPO)} ({kind} {' '.join(map(str, args))}) ...", flush=True)
    t0 = time.perf_counter()
    MODELS_DIR.mkdir(exist_ok=True)
    try:
        if kind == "export":
            ensure_model(args[0], path, *args[1:])
        elif kind == "torchscript":
            subprocess.run([PY, "-c", TORCHSCRIPT_EXPORT, args[0], str(path)], cwd=REPO, check=True,
                           capture_output=True, text=True)
        else:
            subprocess.run([PY, str(REPO / "bench" / "synthetic_graphs.py"), "--nodes", str(args[0]), "--out",
                            str(path)], cwd=REPO, check=True, capture_output=True, text=True)
    except subprocess.CalledProcessError as e:
        err = (e.stderr or b"")
        err = err.decode(errors="replace") if isinstance(err, bytes) else err
        raise RuntimeError(f"building {name} failed: {err.strip()[-800:]}") from None
    print(f"  built in {time.perf_counter() - t0:.0f} s ({path.stat().st_size / 2**20:,.0f} MiB)", flush=True)
    return path


# ---------------------------------------------------------------------------------------------- timing

def timed(cmd: list[str], timeout: float | None = None, cwd=REPO) -> dict:
    """Run cmd under /usr/bin/time -v in its own process group; wall (s), peak RSS (MiB), rc, stdout, killed."""
    load1 = os.getloadavg()[0]    # how busy the shared machine was (2 cores here)
    t0 = time.perf_counter()
    p = subprocess.Popen(["/usr/bin/time", "-v", *cmd], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)   # the group we started: /usr/bin/time and the python under it
        out, err = p.communicate()
        return {"wall_s": time.perf_counter() - t0, "rss_mib": None, "rc": None, "killed": True, "load1": load1,
                "stdout": out, "stderr": err[-2000:]}
    wall = time.perf_counter() - t0
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", err)
    st = re.search(r"Exit status: (\d+)", err)
    rc = int(st.group(1)) if st else p.returncode
    return {"wall_s": wall, "rss_mib": int(m.group(1)) / 1024 if m else None, "rc": rc, "killed": False, "load1": load1,
            "stdout": out, "stderr": "" if rc == 0 else err[-2000:]}


def _brief(run: dict) -> dict:
    return {k: run[k] for k in ("wall_s", "rss_mib", "rc", "killed", "load1")} | (
        {"error": last_line(run["stderr"])} if run.get("rc") not in (0, None) else {})


def last_line(text: str) -> str:
    lines = [ln for ln in (text or "").splitlines() if ln.strip() and not ln.startswith(("\t", "Command exited"))]
    return lines[-1].strip() if lines else ""


def med(runs: list[dict], key: str):
    vals = [r[key] for r in runs if r.get(key) is not None and r.get("rc") == 0]
    return statistics.median(vals) if vals else None


def time_stages(proj: Path, path: Path, res: Path, extra: list, synthetic: bool) -> tuple[dict, dict | None]:
    """One run of the checkout proj's stage 02 on the model, and on the synthetic graphs 03 + 07 after it (07 reads
    03's ops_profile.csv: 03, roofline and prediction without a profile, is timed with it, its part shown apart)."""
    run = timed([PY, str(proj / "02_shapes_flops_bytes.py"), "--model", str(path), "--results", str(res), *extra],
                cwd=proj)
    if run["rc"] != 0:
        print(f"  stage 02 of {proj} failed: {last_line(run['stderr'])}", flush=True)
    if run["rc"] != 0 or not synthetic:
        return _brief(run), None
    r03 = timed([PY, str(proj / "03_merge_profile_metrics.py"), "--results", str(res)], cwd=proj)
    r07 = timed([PY, str(proj / "07_split_candidates.py"), "--model", str(path), "--results", str(res), *extra],
                cwd=proj) if r03["rc"] == 0 else r03
    if r07 is not r03:
        r07 = {**r07, "wall_s": r07["wall_s"] + r03["wall_s"],
               "rss_mib": max(x for x in (r07["rss_mib"], r03["rss_mib"], 0) if x is not None)}
    if r07["rc"] != 0:
        print(f"  stage 03/07 of {proj} failed: {last_line(r07['stderr'])}", flush=True)
        return _brief(run), _brief(r07)
    return _brief(run), _brief(r07) | {"s03_wall_s": r03["wall_s"], "s07_alone_wall_s": r07["wall_s"] - r03["wall_s"]}


def time_peer(rec: dict, path: Path, spec: dict, a, tmp: Path) -> bool:
    """One onnx-tool run into rec; False when it was killed or failed (no further repeats)."""
    run = timed([str(PEER_PY), str(tmp / "peer_driver.py"), str(path), str(tmp / f"peer_{path.stem}.csv"),
                 json.dumps(spec.get("feeds", {}))], timeout=a.peer_timeout)
    rec["peer"].append(_brief(run))
    if run["killed"]:
        print(f"  onnx-tool: > {a.peer_timeout:.0f} s (killed); no further repeats", flush=True)
        return False
    if run["rc"] != 0:
        print(f"  onnx-tool failed: {last_line(run['stderr'])}", flush=True)
        return False
    m = re.search(r"@@PEER@@(.*)", run["stdout"])
    if m:
        rec["peer_phases"].append(json.loads(m.group(1)))
    return True


KINDS = ("s02", "s07", "b02", "b07", "peer", "floor")     # this checkout's 02 and 03+07, the baseline's, peer, floor


def measure_model(name: str, path: Path, a, peer_ok: bool, tmp: Path) -> dict:
    spec = MODELS[name]
    res = tmp / f"res_{name}"
    rec = {"model": str(path.relative_to(REPO)), "file_mib": path.stat().st_size / 2**20, "peer_phases": [],
           **{k: [] for k in KINDS}}
    data = path.with_name(path.name + ".data")
    if data.exists():
        rec["external_data_gb"] = data.stat().st_size / 1e9
    peer_alive = peer_ok
    for r in range(a.repeats):
        checkouts = [("s", Path(a.project_dir), res)] + ([("b", a.baseline_dir, tmp / f"base_{name}")]
                                                         if a.baseline_dir else [])
        for prefix, proj, out in checkouts[::1 if r % 2 == 0 else -1]:      # alternate which goes first
            r02, r07 = time_stages(proj, path, out, spec.get("extra", []), bool(spec.get("synthetic")))
            rec[prefix + "02"].append(r02)
            if r07 is not None:
                rec[prefix + "07"].append(r07)
        if peer_alive:
            peer_alive = time_peer(rec, path, spec, a, tmp)
        run = timed([PY, str(tmp / "floor_driver.py"), str(path)])
        rec["floor"].append(_brief(run))
        if run["rc"] != 0:
            print(f"  floor failed: {last_line(run['stderr'])}", flush=True)
        print(f"  repeat {r + 1}/{a.repeats}: " + ", ".join(
            f"{k} {rec[k][-1]['wall_s']:.2f} s / {fmt_mib(rec[k][-1]['rss_mib'])}"
            for k in KINDS if len(rec[k]) > r), flush=True)
    summarize_runs(rec, res, tmp / f"peer_{path.stem}.csv")
    return rec


def summarize_runs(rec: dict, res: Path, peer_csv: Path) -> None:
    """Medians of the runs, and the per-node tables of the last run (for the MAC comparison)."""
    for k in KINDS:
        rec[k + "_wall_s"] = med(rec[k], "wall_s")
        rec[k + "_rss_mib"] = med(rec[k], "rss_mib")
    for k in ("s07", "b07"):
        rec[k[0] + "03_wall_s"], rec[k[0] + "07_alone_wall_s"] = med(rec[k], "s03_wall_s"), med(rec[k], "s07_alone_wall_s")
    rec["peer_killed"] = any(r["killed"] for r in rec["peer"])
    if rec["peer_phases"]:
        rec["peer_phase_median"] = {k: statistics.median(p[k] for p in rec["peer_phases"])
                                    for k in ("load_s", "reorder_s", "shape_infer_s", "profile_s", "write_s")}
    if (res / "ops_metrics.csv").exists():
        rec["ours_ops"] = read_ours(res / "ops_metrics.csv")
        meta = res / "metrics_meta.json"
        if meta.exists():
            rec["nodes"] = json.loads(meta.read_text()).get("nodes")
    if peer_csv.exists():
        rec["peer_ops"] = read_peer(peer_csv)


# ---------------------------------------------------------------------------------------------- MACs

def _num(x: str) -> float | None:
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def read_ours(path: Path) -> dict:
    nodes = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            nodes[row["node"]] = {"op": row["op_type"], "macs": _num(row["macs"]), "flops": _num(row["flops"]),
                                  "out": (row.get("out_shapes") or "").split(";")[0]}
    return nodes


def read_peer(path: Path) -> dict:
    nodes = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row["Name"] == "Total":
                continue
            nodes[row["Name"]] = {"op": row["Type"], "macs": _num(row["Forward_MACs"]), "in": row["InShape"],
                                  "out": row["OutShape"]}
    return nodes


def _vol(shape: str) -> int:
    return math.prod(int(d) for d in shape.split("x")) if shape and re.fullmatch(r"\d+(x\d+)*", shape) else 0


def node_inputs(path: Path) -> dict[str, int]:
    """node name -> number of non-empty inputs (to spot biased Conv/Gemm), read without external data."""
    import onnx
    m = onnx.load(str(path), load_external_data=False)
    out = {}
    for i, n in enumerate(m.graph.node):
        out[n.name or f"{n.op_type}_{i}"] = len([x for x in n.input if x])
    return out


def compare_macs(rec: dict, path: Path) -> list[dict]:
    """Per op type: MACs of the nodes both tools costed (ours, onnx-tool, difference, our FLOPs), the nodes
    only onnx-tool costed (ours unknown), the nodes onnx-tool hides; a verdict and the reason."""
    ours, peer = rec.get("ours_ops", {}), rec.get("peer_ops", {})
    n_in = node_inputs(path) if any(n["op"] in MAC_OPS for n in ours.values()) else {}
    by = defaultdict(lambda: {"nodes": 0, "both": 0, "ours_macs": 0.0, "ours_flops": 0.0, "peer_macs": 0.0,
                              "out_elems": 0, "ours_unknown": 0, "peer_macs_on_unknown": 0.0, "peer_hidden": 0,
                              "bias_adds": 0.0, "bias_nodes": 0, "mismatch": []})
    for name, o in ours.items():
        b = by[o["op"]]
        b["nodes"] += 1
        p = peer.get(name)
        if p is None:
            b["peer_hidden"] += 1
            if o["macs"] is None:
                b["ours_unknown"] += 1
            continue
        if o["macs"] is None:
            b["ours_unknown"] += 1
            b["peer_macs_on_unknown"] += p["macs"] or 0.0
            continue
        b["both"] += 1
        b["ours_macs"] += o["macs"]
        b["ours_flops"] += o["flops"] or 0.0
        b["peer_macs"] += p["macs"] or 0.0
        b["out_elems"] += _vol(p["out"])
        if o["op"] in ("Conv", "Gemm", "ConvTranspose") and n_in.get(name, 0) >= 3:
            b["bias_adds"] += _vol(p["out"])
            b["bias_nodes"] += 1
        if o["op"] in MAC_OPS and o["macs"] != p["macs"] and o["out"] != p["out"]:
            b["mismatch"].append({"node": name, "ours_out": o["out"], "peer_out": p["out"], "ours_macs": o["macs"],
                                  "peer_macs": p["macs"]})
    rows = []
    for op, b in sorted(by.items(), key=lambda kv: -max(kv[1]["ours_macs"], kv[1]["peer_macs"],
                                                       kv[1]["peer_macs_on_unknown"])):
        diff = b["peer_macs"] - b["ours_macs"]
        verdict, why = verdict_for(op, b, diff)
        rows.append({"op": op, **{k: v for k, v in b.items() if k != "mismatch"}, "diff": diff,
                     "verdict": verdict, "why": why, "shape_mismatch": len(b["mismatch"]),
                     "mismatch_examples": b["mismatch"][:3]})
    return rows


def verdict_for(op: str, b: dict, diff: float) -> tuple[str, str]:
    notes = []
    if b["ours_unknown"]:
        notes.append(f"{b['ours_unknown']} of {b['nodes']} node(s) have no cost in this project (shape not inferred)"
                     + (f"; onnx-tool gives them {b['peer_macs_on_unknown']:,.0f}" if b["peer_macs_on_unknown"]
                        else ""))
    unknown_note = ("; " + notes[0]) if notes else ""
    if b["both"] == 0:
        if b["ours_unknown"]:
            return ("ours unknown", notes[0])
        return ("n/a", "")    # hidden by onnx-tool (model_profile's hidden_ops): no compute in either tool
    if abs(diff) < 0.5:
        return ("agree" + (" (known nodes)" if b["ours_unknown"] else ""), unknown_note.lstrip("; "))
    if op in ("Conv", "Gemm"):
        rest = diff - b["bias_adds"]
        why = (f"{b['bias_nodes']} {op} node(s) with a bias: onnx-tool adds one 'MAC' per output element for the "
               f"bias, {b['bias_adds']:,.0f} in all ({'N*Cout*Ho*Wo per Conv' if op == 'Conv' else 'M*N per Gemm'}); "
               f"a bias add is an addition, not a multiply-accumulate, and PyTorch's FlopCounterMode and "
               f"torchvision's published GMACs leave it out (tiny graphs above)")
        if abs(rest) >= 0.5:
            return ("ours (bias) / check the rest", why + f"; {rest:+,.0f} left unexplained" + unknown_note)
        return ("ours", why + unknown_note)
    if op == "ConvTranspose":
        return ("ours", "onnx-tool: output elements x (Cout/group) x kernel (+ bias) = (Ho*Wo)/(Hi*Wi) x Cout/Cin "
                        "times too many; a transposed conv does input elements x (Cout/group) x kernel MACs (tiny "
                        "graphs above; PyTorch's FlopCounterMode agrees with ours)" + unknown_note)
    if op == "MatMul":
        if b["mismatch"]:
            e = b["mismatch"][0]
            return ("ours", f"{len(b['mismatch'])} MatMul node(s) whose output shape onnx-tool gets wrong: it keeps "
                            f"the batch dims of the operand with more batch elements instead of broadcasting both "
                            f"(numpy rule), e.g. {e['node']}: {e['peer_out']} instead of {e['ours_out']}, "
                            f"{e['peer_macs']:,.0f} MACs instead of {e['ours_macs']:,.0f}" + unknown_note)
        return ("check", f"difference {diff:+,.0f} with identical output shapes" + unknown_note)
    if op in MAC_OPS:
        return ("check", f"difference {diff:+,.0f}" + unknown_note)
    # not a multiply-accumulate op: ours has macs = 0 and counts the work in flops
    e = b["out_elems"]
    rule = PEER_RULES.get(op, "its per-element cost table in node.py")
    return ("definition (ours)",
            f"not a MAC op: onnx-tool's 'MACs' are cost units ({rule}): {b['peer_macs'] / e if e else 0:,.2f} per "
            f"output element x {e:,} elements; this project: 0 MACs, {b['ours_flops']:,.0f} FLOPs "
            f"({b['ours_flops'] / e if e else 0:,.2f} per output element)" + unknown_note)


# causes of onnx-tool 1.0.1 failures seen on this project's models, by a piece of the error message
PEER_FAILURE_HINTS = {
    "cannot select an axis to squeeze out": "its Shape node ignores the start/end attributes of opset 15+, which "
                                            "the dynamo exporter emits for dynamic axes (Shape(start=0, end=1) "
                                            "-> Squeeze); both Hugging Face exports here trip on it",
}
# torchvision's model docs ("GFLOPS", which are multiply-accumulates of conv/linear/matmul, fvcore's convention)
TORCHVISION_GMACS = {"resnet50": 4.09, "vit_b_16": 17.56, "swin_t": 4.49, "swin_t_ts": 4.49}
# onnx-tool 1.0.1's node.py: ADD/MUL/CMP_MACS = 1, DIV_MACS = 4, SQRT_MACS = 24, EXP_MACS = 32
PEER_RULES = {
    "Add": "1 per output element (ADD_MACS)", "Sub": "1 per output element", "Mul": "1 per output element",
    "Div": "4 per output element (DIV_MACS, 'vrcp14ps')", "Relu": "1 compare per element",
    "Softmax": "EXP 32 + DIV 4 = 36 per element", "Sigmoid": "EXP 32 per element",
    "Tanh": "2 x (EXP 32 + 2 ADD + DIV 4) = 76 per element", "Sqrt": "24 per element (SQRT_MACS, 'vsqrtps')",
    "Pow": "32 per element (POW_MACS = EXP_MACS)", "Erf": "0 (a 'fused' op for onnx-tool)",
    "Gelu": "EXP 32 + 2 MUL = 34 per element",
    "LayerNormalization": "7 per element + 29 (ADD + SQRT 24 + DIV 4) per normalised row",
    "BatchNormalization": "31 per element (ADD + SQRT 24 + DIV 4 + ADD + MUL)",
    "ReduceMean": "1 per *input* element", "ReduceSum": "1 per input element",
    "GlobalAveragePool": "1 per input element + 4 per output element",
    "MaxPool": "kh x kw compares per output element", "AveragePool": "kh x kw adds per output element",
    "Where": "1 per element", "Equal": "1 compare per element", "Neg": "1 per element",
}
NO_MACS_OPS = {'Identity', 'Constant', 'Shape', 'Squeeze', 'Unsqueeze', 'Reshape', 'ConstantOfShape', 'Cast',
               'Pad', 'Concat', 'Slice', 'Gather'}


# ---------------------------------------------------------------------------------------------- tiny graphs

def tiny_graphs(d: Path) -> list[dict]:
    """Disputed ops on tiny onnx.helper graphs whose MACs are computed by hand (and, where PyTorch has a
    formula, by FlopCounterMode: `torch` is the expression run under it)."""
    import numpy as np
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh
    rng = np.random.default_rng(0)

    def vi(n, s):
        return h.make_tensor_value_info(n, T.FLOAT, s)

    def w(n, s):
        return nh.from_array(rng.standard_normal(s).astype(np.float32), n)

    specs = [
        dict(name="convT_s2k2", what="ConvTranspose x[1,8,5,5] W[8,8,2,2] stride 2, no bias -> y[1,8,10,10]",
             node=h.make_node("ConvTranspose", ["x", "W"], ["y"], strides=[2, 2], kernel_shape=[2, 2]),
             ins=[vi("x", [1, 8, 5, 5])], outs=[vi("y", [1, 8, 10, 10])], inits=[w("W", [8, 8, 2, 2])],
             hand=1 * 8 * 5 * 5 * 8 * 2 * 2,
             formula="each input element meets Cout/g*kh*kw weights: N*Cin*Hi*Wi * (Cout/g)*kh*kw = 1*8*5*5 * 8*2*2",
             peer_formula="N*Cout*Ho*Wo * (Cout/g)*kh*kw = 1*8*10*10 * 8*2*2 = 25,600 (4x: (Ho*Wo)/(Hi*Wi) = 4)",
             torch="F.conv_transpose2d(torch.randn(1,8,5,5), torch.randn(8,8,2,2), stride=2)"),
        dict(name="convT_s2k2_cout16_bias", what="ConvTranspose x[1,8,5,5] W[8,16,2,2] stride 2, bias -> y[1,16,10,10]",
             node=h.make_node("ConvTranspose", ["x", "W", "b"], ["y"], strides=[2, 2], kernel_shape=[2, 2]),
             ins=[vi("x", [1, 8, 5, 5])], outs=[vi("y", [1, 16, 10, 10])],
             inits=[w("W", [8, 16, 2, 2]), w("b", [16])], hand=1 * 8 * 5 * 5 * 16 * 2 * 2,
             formula="N*Cin*Hi*Wi * (Cout/g)*kh*kw = 1*8*5*5 * 16*2*2 (bias adds are not MACs)",
             peer_formula="N*Cout*Ho*Wo * (Cout/g)*kh*kw + N*Cout*Ho*Wo = 1,600*64 + 1,600 = 104,000 "
                          "(8x + bias: the factor is (Ho*Wo/Hi*Wi) * Cout/Cin = 4*2, it uses output channels where "
                          "the input channels belong)",
             torch="F.conv_transpose2d(torch.randn(1,8,5,5), torch.randn(8,16,2,2), torch.randn(16), stride=2)"),
        dict(name="conv_bias", what="Conv x[1,8,5,5] W[16,8,3,3] pad 1, bias -> y[1,16,5,5]",
             node=h.make_node("Conv", ["x", "W", "b"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             ins=[vi("x", [1, 8, 5, 5])], outs=[vi("y", [1, 16, 5, 5])],
             inits=[w("W", [16, 8, 3, 3]), w("b", [16])], hand=1 * 16 * 5 * 5 * 8 * 3 * 3,
             formula="N*Cout*Ho*Wo * (Cin/g)*kh*kw = 1*16*5*5 * 8*3*3 (bias adds are not MACs)",
             peer_formula="N*Cout*Ho*Wo * (Cin/g)*kh*kw + N*Cout*Ho*Wo (bias) = 28,800 + 400",
             torch="F.conv2d(torch.randn(1,8,5,5), torch.randn(16,8,3,3), torch.randn(16), padding=1)"),
        dict(name="gemm_bias", what="Gemm A[4,32] B[16,32] transB=1, C[16] -> y[4,16]",
             node=h.make_node("Gemm", ["a", "W", "b"], ["y"], transB=1),
             ins=[vi("a", [4, 32])], outs=[vi("y", [4, 16])], inits=[w("W", [16, 32]), w("b", [16])],
             hand=4 * 16 * 32, formula="M*N*K = 4*16*32 (the C add is not a MAC)",
             peer_formula="M*N*K + M*N (C add) = 2,048 + 64",
             torch="F.linear(torch.randn(4,32), torch.randn(16,32), torch.randn(16))"),
        dict(name="matmul_batched", what="MatMul A[4,6,8] B[4,8,5] -> y[4,6,5]",
             node=h.make_node("MatMul", ["a", "b"], ["y"]),
             ins=[vi("a", [4, 6, 8]), vi("b", [4, 8, 5])], outs=[vi("y", [4, 6, 5])], inits=[],
             hand=4 * 6 * 5 * 8, formula="batch*M*N*K = 4*6*5*8",
             peer_formula="volume(Y)*K = 120*8",
             torch="torch.matmul(torch.randn(4,6,8), torch.randn(4,8,5))"),
        dict(name="matmul_broadcast", what="MatMul A[2,1,4,8] B[3,8,5] -> y[2,3,4,5] (batch dims broadcast)",
             node=h.make_node("MatMul", ["a", "b"], ["y"]),
             ins=[vi("a", [2, 1, 4, 8]), vi("b", [3, 8, 5])], outs=[vi("y", [2, 3, 4, 5])], inits=[],
             hand=2 * 3 * 4 * 5 * 8, formula="broadcast batch 2x3 * M*N*K = 6*4*5*8",
             peer_formula="its shape inference keeps the batch dims of the operand with the larger batch "
                          "volume ([3] over [2,1]) -> Y[3,4,5], volume(Y)*K = 60*8 = 480 (half)",
             torch="torch.matmul(torch.randn(2,1,4,8), torch.randn(3,8,5))"),
        dict(name="layernorm", what="LayerNormalization x[2,10,16] axis -1 (scale, bias)",
             node=h.make_node("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1),
             ins=[vi("x", [2, 10, 16])], outs=[vi("y", [2, 10, 16])], inits=[w("g", [16]), w("b", [16])],
             hand=0, formula="no multiply-accumulate: MACs 0 (its work is per-element FLOPs)",
             peer_formula="7*320 + 29*20 = 2,820 cost units (3 MUL + 4 ADD per element; ADD + SQRT 24 + DIV 4 "
                          "per row)",
             torch="F.layer_norm(torch.randn(2,10,16), (16,), torch.randn(16), torch.randn(16))"),
        dict(name="softmax", what="Softmax x[2,4,10,10] axis -1",
             node=h.make_node("Softmax", ["x"], ["y"], axis=-1),
             ins=[vi("x", [2, 4, 10, 10])], outs=[vi("y", [2, 4, 10, 10])], inits=[],
             hand=0, formula="no multiply-accumulate: MACs 0 (its work is per-element FLOPs)",
             peer_formula="(EXP 32 + DIV 4) * 800 = 28,800 cost units",
             torch="torch.softmax(torch.randn(2,4,10,10), -1)"),
    ]
    for s in specs:
        g = h.make_graph([s["node"]], s["name"], s["ins"], s["outs"], initializer=s["inits"])
        m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
        m.ir_version = 8
        onnx.checker.check_model(m, full_check=True)
        s["path"] = d / f"tiny_{s['name']}.onnx"
        onnx.save(m, str(s["path"]))
    return specs


TORCH_FLOPS = r'''
import json, sys, torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode
out = {}
for name, expr in json.loads(sys.argv[1]).items():
    with FlopCounterMode(display=False) as c:
        eval(expr)
    out[name] = c.get_total_flops()
print(json.dumps(out))
'''


def run_tiny(tmp: Path, peer_ok: bool, proj: Path) -> list[dict]:
    d = tmp / "tiny"
    d.mkdir()
    specs = tiny_graphs(d)
    r = subprocess.run([PY, "-c", TORCH_FLOPS, json.dumps({s["name"]: s["torch"] for s in specs})],
                       capture_output=True, text=True)
    torch_flops = json.loads(r.stdout) if r.returncode == 0 else {}
    if r.returncode != 0:
        print(f"  FlopCounterMode check failed: {last_line(r.stderr)}")
    rows = []
    for s in specs:
        res = d / f"res_{s['name']}"
        run = subprocess.run([PY, str(proj / "02_shapes_flops_bytes.py"), "--model", str(s["path"]), "--results",
                              str(res)], cwd=proj, capture_output=True, text=True)
        if run.returncode != 0:
            print(f"  stage 02 failed on tiny graph {s['name']}: {last_line(run.stderr)}")
        ours = read_ours(res / "ops_metrics.csv") if run.returncode == 0 else {}
        ours_macs = sum(n["macs"] or 0 for n in ours.values()) if ours else None
        ours_flops = sum(n["flops"] or 0 for n in ours.values()) if ours else None
        peer_macs, peer_out = None, None
        if peer_ok:
            csv_out = d / f"peer_{s['name']}.csv"
            pr = subprocess.run([str(PEER_PY), str(tmp / "peer_driver.py"), str(s["path"]), str(csv_out), "{}"],
                                capture_output=True, text=True)
            if pr.returncode == 0:
                pn = read_peer(csv_out)
                peer_macs = sum(n["macs"] or 0 for n in pn.values())
                peer_out = ";".join(n["out"] for n in pn.values())
            else:
                peer_out = "error: " + last_line(pr.stderr)
        tf = torch_flops.get(s["name"])
        rows.append({"name": s["name"], "what": s["what"], "hand_macs": s["hand"], "formula": s["formula"],
                     "ours_macs": ours_macs, "ours_flops": ours_flops, "peer_macs": peer_macs,
                     "peer_out": peer_out, "peer_formula": s["peer_formula"],
                     "torch_macs": None if tf is None else tf / 2})
    return rows


# ---------------------------------------------------------------------------------------------- printing

def fmt_mib(x) -> str:
    return "—" if x is None else f"{x:,.0f} MiB"


def fmt_s(x) -> str:
    if x is None:
        return "—"
    return f"{x:,.2f} s" if x < 100 else f"{x:,.0f} s"


def fmt_n(x) -> str:
    return "—" if x is None else f"{x:,.0f}"


def print_tiny(rows: list[dict]) -> None:
    print("\n## Disputed ops on tiny graphs: MACs by hand, this project, onnx-tool, PyTorch FlopCounterMode/2\n")
    print("| graph | by hand | this project | onnx-tool | FlopCounterMode / 2 | right |")
    print("| --- | ---: | ---: | ---: | ---: | --- |")
    for r in rows:
        right = [who for who, v in (("this project", r["ours_macs"]), ("onnx-tool", r["peer_macs"]))
                 if v == r["hand_macs"]]
        if not right and (r["ours_macs"] is None or r["peer_macs"] is None):
            right = ["(no result to compare)"]
        tm = "—" if r["torch_macs"] is None else fmt_n(r["torch_macs"])
        if r["torch_macs"] == 0 and r["hand_macs"] == 0:
            tm = "0 (no formula)"
        print(f"| {r['what']} | {fmt_n(r['hand_macs'])} | {fmt_n(r['ours_macs'])} | {fmt_n(r['peer_macs'])} | {tm} | "
              f"{' and '.join(right) or 'neither'} |")
    print()
    for r in rows:
        print(f"- **{r['name']}**: by hand {r['formula']} = {r['hand_macs']:,}. onnx-tool: {r['peer_formula']}"
              + (f" -> {fmt_n(r['peer_macs'])} (its output shape {r['peer_out']})" if r['peer_macs'] is not None else "")
              + (f"; this project's FLOPs {fmt_n(r['ours_flops'])}" if r["hand_macs"] == 0 else "") + ".")


def print_macs(name: str, rows: list[dict]) -> None:
    print(f"\n### MACs per op type on {name}\n")
    print("| op type | nodes | this project MACs | onnx-tool MACs | onnx-tool − ours | this project FLOPs | verdict |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    tot_o = tot_p = tot_u = 0.0
    for r in rows:
        if r["verdict"] == "n/a" or (r["verdict"] == "agree" and r["ours_macs"] == 0):
            continue
        tot_o += r["ours_macs"]
        tot_p += r["peer_macs"]
        tot_u += r["peer_macs_on_unknown"]
        unk = (f" + {r['ours_unknown']} unknown" if r["ours_unknown"] else "")
        punk = (f" + {fmt_n(r['peer_macs_on_unknown'])} on those" if r["ours_unknown"] and r["peer_macs_on_unknown"]
                else "")
        print(f"| {r['op']} | {r['both']}{unk} | {fmt_n(r['ours_macs'])} | {fmt_n(r['peer_macs'])}{punk} | "
              f"{r['diff']:+,.0f} | {fmt_n(r['ours_flops'])} | {r['verdict']} |")
    print(f"| **all** | | {fmt_n(tot_o)} | {fmt_n(tot_p)}" + (f" + {fmt_n(tot_u)}" if tot_u else "")
          + f" | {tot_p - tot_o:+,.0f} | | |")
    mac_o = sum(r["ours_macs"] for r in rows if r["op"] in MAC_OPS)
    mac_p = sum(r["peer_macs"] + r["peer_macs_on_unknown"] for r in rows if r["op"] in MAC_OPS)
    ref = TORCHVISION_GMACS.get(name)
    print(f"\nConv/Gemm/MatMul-class total: this project {mac_o / 1e9:.3f} G, onnx-tool {mac_p / 1e9:.3f} G"
          + (f", torchvision's published figure {ref} G (its 'GFLOPS' column counts MACs; fvcore convention)"
             if ref else ""))
    hidden = sorted(r["op"] for r in rows if r["verdict"] == "n/a")
    if hidden:
        print(f"\n(not shown: ops onnx-tool's model_profile hides by default, 0 MACs in both: {', '.join(hidden)})")
    print("\n`nodes` counts the nodes both tools costed (+ those this project left unknown); MACs and the difference "
          "are over the nodes both costed.")
    for r in rows:
        if r["why"] and r["verdict"] != "n/a":
            print(f"- {r['op']}: {r['why']}")


def summary_table(recs: dict, peer_ok: bool) -> list[str]:
    lines = ["| work | this project | onnx-tool | floor (onnx.load + infer_shapes) | ours / floor | ours / onnx-tool |",
             "| --- | --- | --- | --- | ---: | ---: |"]

    def peer_cell(rec):
        if not peer_ok or not rec.get("peer"):
            return "skipped"
        if rec.get("peer_killed") and rec.get("peer_wall_s") is None:
            return f"> {rec['peer'][0]['wall_s']:.0f} s (killed)"
        if rec.get("peer_wall_s") is None:
            err = rec["peer"][0].get("error", "")
            hint = next((h for k, h in PEER_FAILURE_HINTS.items() if k in err), "")
            return "failed: " + err[:90] + (f" ({hint})" if hint else "")
        return f"{fmt_s(rec['peer_wall_s'])}, {fmt_mib(rec['peer_rss_mib'])}"

    def ratio(ours, rec, key):
        if ours is None:
            return "—"
        if key == "peer" and rec.get("peer_killed") and rec.get("peer_wall_s") is None:
            return f"< {ours / rec['peer'][0]['wall_s']:.2f}×"
        other = rec.get(f"{key}_wall_s")
        return "—" if not other else f"{ours / other:.1f}×"

    for name, rec in recs.items():
        if "error" in rec:
            lines.append(f"| {name} | error: {rec['error'][:100]} | | | | |")
            continue
        floor = f"{fmt_s(rec['floor_wall_s'])}, {fmt_mib(rec['floor_rss_mib'])}"
        if MODELS[name].get("synthetic"):
            s02, s07 = rec["s02_wall_s"], rec["s07_wall_s"]
            tot = s02 + s07 if s02 is not None and s07 is not None else None
            rss = max([x for x in (rec["s02_rss_mib"], rec["s07_rss_mib"]) if x is not None], default=None)
            n = rec.get("nodes")
            per10k = f", {tot / n * 1e4:.2f} s / 10k nodes" if tot is not None and n else ""
            s03, alone = rec.get("s03_wall_s"), rec.get("s07_alone_wall_s")
            split = f" (03 {fmt_s(s03)}, 07 alone {fmt_s(alone)})" if s03 is not None and alone is not None else ""
            ours = (f"02 {fmt_s(s02)} + 07 {fmt_s(s07)}{split} = {fmt_s(tot)}{per10k}; peak {fmt_mib(rss)} "
                    f"(02 {fmt_mib(rec['s02_rss_mib'])}, 07 {fmt_mib(rec['s07_rss_mib'])})")
            work = f"02+07 on synthetic {n:,} nodes" if n else f"02+07 on {name}"
            lines.append(f"| {work} | {ours} | {peer_cell(rec)} | {floor} | {ratio(tot, rec, 'floor')} | "
                         f"{ratio(tot, rec, 'peer')} |")
        else:
            big = ""
            ours = f"{fmt_s(rec['s02_wall_s'])}, {fmt_mib(rec['s02_rss_mib'])}"
            if MODELS[name].get("big"):
                big = f" ({rec.get('external_data_gb', 0):.2f} GB external data)"
                ok = rec["s02_rss_mib"] is not None and rec["s02_rss_mib"] < 200
                ours += f" (target < 200 MiB: {'met' if ok else 'NOT met'})"
            lines.append(f"| stage 02 on {name}{big} | {ours} | {peer_cell(rec)} | {floor} | "
                         f"{ratio(rec['s02_wall_s'], rec, 'floor')} | {ratio(rec['s02_wall_s'], rec, 'peer')} |")
    return lines


def before_after(recs: dict, baseline: str | None) -> list[str]:
    """This checkout against --baseline's, timed in the same runs (medians; 02, and 02 + 03 + 07 on the
    synthetic graphs)."""
    rows = []
    for name, rec in recs.items():
        if "error" in rec or not rec.get("b02"):
            continue
        for what, keys in (("02", ("02",)), ("02+03+07", ("02", "07"))):
            if what != "02" and not MODELS[name].get("synthetic"):
                continue
            now = [rec.get(f"s{k}_wall_s") for k in keys]
            base = [rec.get(f"b{k}_wall_s") for k in keys]
            if None in now or None in base:
                rows.append(f"| {what} on {name} | — | — | — |")
                continue
            rss = lambda p: max(rec.get(f"{p}{k}_rss_mib") or 0 for k in keys)  # noqa: E731
            rows.append(f"| {what} on {name} | {fmt_s(sum(base))}, {fmt_mib(rss('b'))} | {fmt_s(sum(now))}, "
                        f"{fmt_mib(rss('s'))} | {sum(now) / sum(base):.2f}× |")
    if not rows:
        return []
    return [f"| work | baseline ({baseline}) | this checkout | this / baseline |", "| --- | --- | --- | ---: |", *rows]


def linearity(recs: dict) -> list[str]:
    """Seconds per 10k nodes on the synthetic graphs: flat = linear."""
    rows, prev = [], None
    for name, rec in sorted(recs.items(), key=lambda kv: kv[1].get("nodes") or 0):
        if not MODELS.get(name, {}).get("synthetic") or "error" in rec or not rec.get("nodes"):
            continue
        n = rec["nodes"] / 1e4

        def per(x):
            return "—" if x is None else f"{x / n:.2f}"
        tot = (rec["s02_wall_s"] + rec["s07_wall_s"]) if rec["s02_wall_s"] is not None and rec["s07_wall_s"] \
            is not None else None
        peer = per(rec.get("peer_wall_s"))
        if rec.get("peer_killed") and rec.get("peer_wall_s") is None:
            peer = f"> {rec['peer'][0]['wall_s'] / n:.1f}"
        # marginal cost from the previous size: process start-up and imports (seconds) cancel out
        marg = "—"
        if prev and tot is not None and prev[1] is not None and n > prev[0]:
            marg = f"{(tot - prev[1]) / (n - prev[0]):.2f}"
        prev = (n, tot)
        rows.append(f"| {rec['nodes']:,} | {per(rec['s02_wall_s'])} | {per(rec['s07_wall_s'])} | {per(tot)} | "
                    f"{marg} | {peer} | {per(rec['floor_wall_s'])} |")
    if not rows:
        return []
    return ["| nodes | 02 s/10k | 07 s/10k | 02+07 s/10k | 02+07 marginal s/10k (from the size above) | "
            "onnx-tool s/10k | floor s/10k |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |", *rows]


def report(out: dict, tiny_printed: bool = False) -> list[str]:
    """Print the MAC comparisons and the summary from the collected figures (also used by --report)."""
    peer_ok = bool(out.get("onnx_tool_venv"))
    if out.get("tiny_graphs") and not tiny_printed:
        print_tiny(out["tiny_graphs"])
    for name, rec in out["models"].items():
        if rec.get("macs_by_op"):
            print_macs(name, rec["macs_by_op"])
    loads = [r["load1"] for rec in out["models"].values() for k in KINDS
             for r in rec.get(k, []) if r.get("load1") is not None]
    busy = (f"; 1-min load average when the runs started: median {statistics.median(loads):.1f}, max "
            f"{max(loads):.1f} on {out.get('cpus')} CPUs" if loads else "")
    head = "Summary (medians of %d runs; wall time, peak RSS%s)" % (out["repeats"], busy)
    print(f"\n## {head}\n")
    lines = summary_table(out["models"], peer_ok)
    print("\n".join(lines))
    lines = [head + ":", ""] + lines
    ba = before_after(out["models"], out.get("baseline") or out.get("baseline_dir"))
    if ba:
        print("\nBefore and after, in the same runs (wall time, peak RSS; medians):\n")
        print("\n".join(ba))
        lines += ["", "Before and after, in the same runs (wall time, peak RSS; medians):", ""] + ba
    lin = linearity(out["models"])
    if lin:
        print("\nLinearity on the synthetic graphs (seconds per 10k nodes; flat = linear):\n")
        print("\n".join(lin))
    phases = {n: r["peer_phase_median"] for n, r in out["models"].items() if r.get("peer_phase_median")}
    if phases:
        print("\nonnx-tool phases (median s): " + "; ".join(
            f"{n}: load {p['load_s']:.2f}, reorder {p.get('reorder_s', 0):.2f}, shape_infer {p['shape_infer_s']:.2f}, "
            f"profile {p['profile_s']:.2f}, csv {p['write_s']:.2f}" for n, p in phases.items()))
    return lines + ([""] + lin if lin else [])


# ---------------------------------------------------------------------------------------------- main

def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", nargs="+", choices=list(MODELS), default=None,
                   help=f"models to run (default: {' '.join(DEFAULT_MODELS)}; gpt2_wide only with --big)")
    p.add_argument("--repeats", type=int, default=3, help="runs per measurement; the median is reported (default 3)")
    p.add_argument("--skip-peer", action="store_true", help="do not run onnx-tool (no venv is created)")
    p.add_argument("--skip-big", action="store_true", help="leave out the 200k-node synthetic graph")
    p.add_argument("--big", action="store_true",
                   help="add models/gpt2_wide.onnx (~1.7 GB external data; built when missing, minutes)")
    p.add_argument("--peer-timeout", type=float, default=900.0,
                   help="seconds before an onnx-tool run is killed and reported as '> N s (killed)' (default 900)")
    p.add_argument("--project-dir", default=str(REPO), metavar="DIR",
                   help="checkout whose 02/03/07 stage scripts are timed (default: this one); run with this repo's .venv")
    p.add_argument("--baseline", metavar="REV|DIR",
                   help="a commit of this repository (or a checkout's folder) whose 02/03/07 are timed in the same runs, "
                        "interleaved with this one's: the before-and-after table")
    p.add_argument("--no-macs", action="store_true", help="skip the MAC comparison (timings only)")
    p.add_argument("--json", metavar="OUT", help="save every figure (all runs, medians, MAC tables) as JSON")
    p.add_argument("--record", action="store_true",
                   help="write the summary tables to bench/RESULTS.md (bench/record.py), with date, commit and command")
    p.add_argument("--report", metavar="JSON", help="measure nothing: print the tables again from a saved --json")
    return p.parse_args()


def baseline_checkout(rev: str | None, tmp: Path) -> Path | None:
    """--baseline as a folder of stage scripts: the folder given, or the commit extracted with `git archive`."""
    if rev is None or Path(rev).is_dir():
        return rev and Path(rev).resolve()
    out = tmp / "baseline"
    out.mkdir()
    arch = subprocess.run(["git", "-C", str(REPO), "archive", rev], capture_output=True)
    if arch.returncode != 0:
        sys.exit(f"error: --baseline {rev}: neither a folder nor a commit ({last_line(arch.stderr.decode())})")
    subprocess.run(["tar", "-x", "-C", str(out)], input=arch.stdout, check=True)
    return out


def setup(a) -> dict:
    """The run's record, with the versions of both tools, the onnx-tool venv made when missing."""
    out = {"repeats": a.repeats, "peer_timeout_s": a.peer_timeout, "host": os.uname().nodename,
           "cpus": os.cpu_count(), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "models": {}}
    if not a.skip_peer:
        out["onnx_tool_venv"] = ensure_peer_venv()
        v = out["onnx_tool_venv"]
        print(f"onnx-tool {v.get('onnx-tool')} in {PEER_VENV.relative_to(REPO)} (Python {v.get('python')}, onnx "
              f"{v.get('onnx')}, numpy {v.get('numpy')}, protobuf {v.get('protobuf')}, tabulate {v.get('tabulate')})")
    r = subprocess.run([PY, "-c", PROJECT_VERSIONS], capture_output=True, text=True)
    out["project_versions"] = r.stdout.strip()
    out["pythonpath"] = os.environ.get("PYTHONPATH")
    out["project_dir"] = str(Path(a.project_dir).resolve())
    out["baseline_dir"] = a.baseline_dir and str(a.baseline_dir)
    out["baseline"] = a.baseline
    # our modules load from bytecode, as the installed libraries (onnx, pandas) and the floor's do: under
    # PYTHONDONTWRITEBYTECODE=1 Python never writes lib/'s .pyc itself, and compiles it at every start
    for d in filter(None, (a.project_dir, a.baseline_dir)):
        subprocess.run([PY, "-m", "compileall", "-q", str(Path(d) / "lib")], check=False)
    print(f"this project: stages of {out['project_dir']}, run by {PY} ({out['project_versions']}"
          + (f", PYTHONPATH={out['pythonpath']}" if out["pythonpath"] else "")
          + (f"; baseline: stages of {out['baseline_dir']}" if a.baseline_dir else "")
          + f"); repeats {a.repeats}; timings on a shared machine are noisy (provisional)", flush=True)
    return out


def measure_all(a, out: dict, models: list[str], tmp: Path) -> None:
    """The tiny graphs, then each model's timings and MAC comparison, into out (saved as it goes with --json)."""
    peer_ok = not a.skip_peer
    (tmp / "peer_driver.py").write_text(PEER_DRIVER)
    (tmp / "floor_driver.py").write_text(FLOOR_DRIVER)
    if not a.no_macs:
        out["tiny_graphs"] = run_tiny(tmp, peer_ok, Path(a.project_dir))
        print_tiny(out["tiny_graphs"])
    print("\n## Timings\n", flush=True)
    for name in models:
        try:
            path = build_model(name)
        except RuntimeError as e:
            print(f"{name}: {e}")
            out["models"][name] = {"error": str(e)}
            continue
        print(f"{name}: {path.relative_to(REPO)} ({path.stat().st_size / 2**20:,.0f} MiB)", flush=True)
        rec = measure_model(name, path, a, peer_ok, tmp)
        if not a.no_macs and rec.get("ours_ops") and rec.get("peer_ops"):
            rec["macs_by_op"] = compare_macs(rec, path)
        out["models"][name] = rec
        if a.json:   # keep what is done so far
            save_json(a.json, out)


def main():
    a = parse_args()
    if a.report:
        report(json.loads(Path(a.report).read_text()))
        return
    models = list(a.models or DEFAULT_MODELS)
    if a.skip_big and "synth_200k" in models:
        models.remove("synth_200k")
    if a.big and "gpt2_wide" not in models:
        models.append("gpt2_wide")
    with tempfile.TemporaryDirectory(prefix="peer_onnx_tool_") as td:
        a.baseline_dir = baseline_checkout(a.baseline, Path(td))
        out = setup(a)
        measure_all(a, out, models, Path(td))
    for rec in out["models"].values():
        rec.pop("ours_ops", None)
        rec.pop("peer_ops", None)
    lines = report(out, tiny_printed=True)
    out["summary_markdown"] = lines
    if a.json:
        save_json(a.json, out)
        print(f"\nwrote {a.json}")
    if a.record:
        command = " ".join([".venv/bin/python", os.path.relpath(sys.argv[0], REPO), *sys.argv[1:]])
        record("peer_onnx_tool", "\n".join(lines), command=command)


def save_json(path, out) -> None:
    def clean(o):
        if isinstance(o, dict):
            return {k: clean(v) for k, v in o.items() if k not in ("ours_ops", "peer_ops")}
        if isinstance(o, (list, tuple)):
            return [clean(v) for v in o]
        return o
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(json.dumps(clean(out), indent=1, default=str))
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
