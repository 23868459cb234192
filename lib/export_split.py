"""Stage 08: export the two halves of a split, wire their weights, and prove part2(part1(x)) == full(x)."""
from __future__ import annotations

import json
import os
import shutil
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import shape_inference
from onnx.utils import Extractor

from .errors import StageError
from .graph import Graph, constant_tensors
from .split_runner import check, session


def split_interface(g: Graph, b: int, consts: set[str]) -> dict:
    """The tensors each part exchanges at boundary b (same definition as stage 07's sweep)."""
    cut, left_outs, right_ins = [], [], []
    outputs = set(g.graph_outputs)
    for pos in range(b + 1):
        for t in g.nodes[pos].output:
            if not t or t in consts:
                continue
            if any(c > b for c in g.consumers.get(t, ())):
                cut.append(t)
            elif t in outputs:
                left_outs.append(t)  # a graph output finished on the left: part1 returns it directly
    for t in g.graph_inputs:
        if any(c > b for c in g.consumers.get(t, ())):
            right_ins.append(t)
    left_ins = [t for t in g.graph_inputs if any(c <= b for c in g.consumers.get(t, ()))]
    return {"boundary": b, "after_node": g.names[b], "cut_tensors": cut, "left_graph_outputs": left_outs,
            "right_graph_inputs": right_ins, "left_graph_inputs": left_ins,
            "comm_bytes": int(sum(g.tensors[t].nbytes or 0 for t in cut if t in g.tensors))}


def _external_locations(model: onnx.ModelProto) -> set[str]:
    locs = set()
    for t in model.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL:
            for e in t.external_data:
                if e.key == "location":
                    locs.add(e.value)
    return locs


def link_external_data(model: onnx.ModelProto, src_dir: Path, dst_dir: Path, mode: str = "link") -> dict[str, str]:
    """Make each external-data file reachable from dst_dir: hardlink (no extra disk), else copy; last resort
    rewrite the location to an absolute path (not portable). Returns {location: how}.

    No symlinks: ONNX Runtime 1.31 refuses external data behind a symlink ("External data path validation
    failed"), and onnx >= 1.19's Python loader refuses both symlinks and hardlinks; `--external-data copy`
    gives a folder that onnx.load accepts too."""
    how = {}
    for loc in sorted(_external_locations(model)):
        src, dst = src_dir / loc, dst_dir / loc
        if not src.exists():
            raise StageError(f"external data file {src} (referenced by the model) not found")
        if dst.exists() or dst.is_symlink():
            if dst.samefile(src):
                how[loc] = "hardlink"
                continue
            dst.unlink()  # a re-export: never keep a stale copy of re-exported weights
        dst.parent.mkdir(parents=True, exist_ok=True)
        for method, fn in ((("hardlink", os.link),) if mode == "link" else ()) + (("copy", shutil.copy2),):
            try:
                fn(src, dst)
                how[loc] = method
                break
            except OSError:
                continue
        else:
            warnings.warn(f"could not link or copy {src}: the split refers to it by absolute path (not portable)")
            for t in model.graph.initializer:
                for e in t.external_data:
                    if e.key == "location" and e.value == loc:
                        e.value = str(src.resolve())
            how[loc] = "absolute"
    return how


def _without_external_data(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy whose externally stored weights are declared as graph inputs, for onnx.checker: its own
    external-data check refuses hardlinked files, and the weights need no reading to check the graph."""
    c = onnx.ModelProto()
    c.CopyFrom(model)
    ext = [t for t in c.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
    if ext:
        keep = [t for t in c.graph.initializer if t.data_location != onnx.TensorProto.EXTERNAL]
        del c.graph.initializer[:]
        c.graph.initializer.extend(keep)
        c.graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in ext)
    return c


class SplitExporter:
    """One Extractor over the shape-inferred model (weights not loaded), reused for every boundary."""

    def __init__(self, model_path: str | Path, g: Graph, external_data: str = "link"):
        self.path = Path(model_path)
        self.mode = external_data
        self.g = g
        self.consts = constant_tensors(g)
        self.model = onnx.load(str(self.path), load_external_data=False)
        try:
            inferred = shape_inference.infer_shapes(self.model, data_prop=True)
        except Exception:  # noqa: BLE001 - parts still export without intermediate shapes
            inferred = self.model
        self.extractor = Extractor(inferred)

    def export(self, b: int, out_dir: Path) -> dict:
        iface = split_interface(self.g, b, self.consts)
        if not iface["cut_tensors"] and not iface["left_graph_outputs"]:
            raise StageError(f"boundary {b}: nothing crosses it (the right part does not depend on the left)")
        out_dir.mkdir(parents=True, exist_ok=True)
        p1_out = iface["cut_tensors"] + iface["left_graph_outputs"]
        p2_in = iface["cut_tensors"] + iface["right_graph_inputs"]
        p2_out = [t for t in self.g.graph_outputs if t not in iface["left_graph_outputs"]]
        parts = {"part1": (iface["left_graph_inputs"], p1_out), "part2": (p2_in, p2_out)}
        links = {}
        for name, (ins, outs) in parts.items():
            m = self.extractor.extract_model(ins, outs)
            m.producer_name = "nn-perf 08_export_splits"
            for loc, how in link_external_data(m, self.path.parent, out_dir, self.mode).items():
                links.setdefault(loc, how)   # the first part to need a file says how it was linked
            try:
                onnx.checker.check_model(_without_external_data(m))
            except onnx.checker.ValidationError as e:
                raise StageError(f"boundary {b}: {name}.onnx fails onnx.checker: {str(e).splitlines()[0]}") from None
            tmp = out_dir / f".{name}.onnx.tmp"
            onnx.save(m, str(tmp))
            os.replace(tmp, out_dir / f"{name}.onnx")
        # the full model beside the parts, so that the folder validates on its own
        full = out_dir / "full.onnx"
        if full.exists() and not full.samefile(self.path):
            full.unlink()  # the model was re-exported since: a stale full.onnx would validate the wrong model
        if not full.exists():
            try:
                os.link(self.path, full)
            except OSError:
                shutil.copy2(self.path, full)
        for loc, how in link_external_data(self.model, self.path.parent, out_dir, self.mode).items():
            links.setdefault(loc, how)
        iface["external_data"] = links
        return iface


def validate(split_dir: Path, feeds: dict[str, np.ndarray], atol: float, rtol: float, runs: int,
             cut: list[str], g: Graph) -> dict:
    """full(x) against part2(part1(x)) with ONNX Runtime (the check run_split.py does), and part1's cut
    tensors against the same tensors inside the full model: random-weight models can have near-zero logits
    (torchvision zero-initialises some heads), the cut tensors never are."""
    import onnxruntime as ort
    try:
        full, p1, p2 = (session(f"{n}.onnx", "cpu", ort, split_dir) for n in ("full", "part1", "part2"))
    except RuntimeError as e:
        raise StageError(str(e)) from None
    report, mid, _ = check(full, p1, p2, feeds, atol, rtol, runs)
    probe = onnx.ModelProto()
    probe.CopyFrom(g.model)     # the model already in memory (weights not loaded), never read again per split
    have = {o.name for o in probe.graph.output}
    probe.graph.output.extend(onnx.helper.make_tensor_value_info(t, g.tensors[t].elem_type, None)
                              for t in cut if t not in have)
    tmp = split_dir / ".full_with_cut.onnx"
    onnx.save(probe, str(tmp))
    try:
        ref = session(tmp.name, "cpu", ort, split_dir).run(cut, feeds)
    except RuntimeError as e:
        raise StageError(str(e)) from None
    finally:
        tmp.unlink(missing_ok=True)
    cut_report = {}
    for t, r in zip(cut, ref):
        diff = np.abs(mid[t].astype(np.float64) - r.astype(np.float64))
        cut_report[t] = {"max_abs_diff": float(diff.max()) if diff.size else 0.0,
                         "max_abs_value": float(np.abs(r).max()) if r.size else 0.0,
                         "pass": bool(np.allclose(mid[t], r, atol=atol, rtol=rtol))}
    report["cut_tensors"] = cut_report
    report["pass"] = report["pass"] and all(c["pass"] for c in cut_report.values())
    report["max_abs_diff"] = max([report["max_abs_diff"]] + [c["max_abs_diff"] for c in cut_report.values()])
    return report


RUNNER = Path(__file__).with_name("split_runner.py")
SUITE = Path(__file__).with_name("benchmark_suite.py")


def write_runner(split_dir: Path, meta: dict) -> None:
    shutil.copy2(RUNNER, split_dir / "run_split.py")
    (split_dir / "split_meta.json").write_text(json.dumps(meta, indent=2) + "\n")


def progress(i: int, n: int, text: str) -> None:
    print(f"[{i}/{n}] {text}", file=sys.stderr, flush=True)
