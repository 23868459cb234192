"""Stage 10: Hailo parse-only feasibility of split partitions: backends, cache, static fallback, provisioning."""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import onnx

from lib.artifacts import REPO, atomic_path, load_yaml, write_json
from lib.errors import StageError
from lib.split.export import read_meta, same_identity

ARCHS = ("hailo8", "hailo10")
WORKER = Path(__file__).with_name("hailo_worker.py")
WHEELS = REPO / "vendor" / "hailo"            # vendor wheels go in vendor/hailo/<arch>/*.whl (git-ignored)
PART_IDENTITY = "hailo_part.json"   # the identity of a part stage 10 exported itself (08 writes split_meta.json)


def venv_root() -> Path:
    return Path(os.environ.get("NN_PERF_HAILO_VENVS", Path.home() / ".nn-perf" / "hailo"))


def cache_path() -> Path:
    base = os.environ.get("NN_PERF_CACHE_DIR") or os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "nn-perf" / "hailo_parse_cache.json"


# ---------------------------------------------------------------- partitions

def partition_model(part: onnx.ModelProto, resolved: dict[str, list[int]] | None = None) -> dict:
    """What a parse needs of an exported part: its inputs (with shapes: `resolved`, the input spec's, for the dims
    the part keeps symbolic, which read 0), end nodes, and op list."""
    inits = {t.name for t in part.graph.initializer}
    inputs = [i for i in part.graph.input if i.name not in inits]
    shapes = {i.name: (resolved or {}).get(i.name) or [d.dim_value for d in i.type.tensor_type.shape.dim]
              for i in inputs}
    produced = {o: n.name for n in part.graph.node for o in n.output}
    ends = [produced[o.name] for o in part.graph.output if o.name in produced]
    return {"start_node_names": [i.name for i in inputs], "end_node_names": list(dict.fromkeys(ends)),
            "net_input_shapes": shapes, "nodes": [(n.name, n.op_type) for n in part.graph.node]}


def partition_hash(part: onnx.ModelProto, input_shapes: dict) -> str:
    """Graph structure, attributes, shapes (the input shapes the parse is given too) and weight names/dims; never
    the weight bytes (they do not change whether a graph parses, and hashing them would read every weight of a
    large model)."""
    h = hashlib.sha256(json.dumps(input_shapes, sort_keys=True).encode())
    for n in part.graph.node:
        h.update(n.SerializeToString(deterministic=True))
    for vi in list(part.graph.input) + list(part.graph.output):
        h.update(vi.SerializeToString(deterministic=True))
    for t in part.graph.initializer:
        h.update(f"{t.name}:{t.data_type}:{list(t.dims)}".encode())
    return h.hexdigest()


# ---------------------------------------------------------------- static check

def load_op_table(path: str | Path) -> dict[str, set[str]]:
    cfg = load_yaml(path, "Hailo op-support table")
    targets = cfg.get("targets")
    if not isinstance(targets, dict):
        raise StageError(f"Hailo op-support table {path} lacks 'targets'")
    return {arch: set(t.get("supported") or []) | set(t.get("extra") or []) for arch, t in targets.items()}


def static_check(info: dict, supported: set[str]) -> dict:
    bad = [(n, op) for n, op in info["nodes"] if op not in supported]
    if not bad:
        return {"status": "ok", "node": None, "op": None, "ops": [], "reason": "every op is in the static support table"}
    ops = sorted({op for _, op in bad})
    return {"status": "unsupported", "node": bad[0][0], "op": bad[0][1], "ops": ops,
            "reason": f"{len(bad)} nodes of ops not in the static table: {', '.join(ops)}"}


# ---------------------------------------------------------------- backends

def backend_python(backend: str, arch: str) -> list[str] | None:
    """The command prefix that runs the worker for this arch, or None when the backend is not available."""
    if backend == "local":
        return [sys.executable] if importlib.util.find_spec("hailo_sdk_client") else None
    if backend == "venv":
        py = venv_root() / arch / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
        return [str(py)] if py.exists() else None
    if backend == "wsl":
        wsl = shutil.which("wsl")
        if not wsl:
            return None
        # no shell inside WSL to expand "~": ask WSL for its $HOME, then name the venv's python absolutely
        try:
            home = subprocess.run([wsl, "-e", "printenv", "HOME"], capture_output=True, text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            return None
        return [wsl, "-e", f"{home}/.nn-perf/hailo/{arch}/bin/python"] if home else None
    if backend == "auto":
        for b in ("local", "venv", "wsl"):
            cmd = backend_python(b, arch)
            if cmd:
                return cmd
        return None
    raise StageError(f"unknown backend {backend}: choose local, venv, wsl, auto or static")


def _wsl_path(path: Path, cmd: list[str]) -> str:
    if not cmd or not cmd[0].endswith(("wsl", "wsl.exe")):
        return str(path)
    r = subprocess.run([cmd[0], "wslpath", "-a", str(path)], capture_output=True, text=True, timeout=60)
    return r.stdout.strip() or str(path)


def run_worker(cmd: list[str], args: list[str], timeout: int = 1800) -> dict:
    """Run the worker with an argument list (never a shell string) and read its last JSON line."""
    try:
        r = subprocess.run(cmd + [_wsl_path(WORKER, cmd)] + args, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return {"status": "error", "reason": f"{type(e).__name__}: {e}"}
    for line in reversed(r.stdout.strip().splitlines()):
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            continue
    return {"status": "error", "reason": f"worker exited {r.returncode}: {' '.join(r.stderr.split())[-300:]}"}


def compiler_version(cmd: list[str]) -> str:
    return str(run_worker(cmd, ["--version"], timeout=300).get("version", "unknown"))


def parse(cmd: list[str], part_path: Path, name: str, arch: str, info: dict) -> dict:
    req = {"model": _wsl_path(part_path, cmd), "name": name, "arch": arch,
           "start_node_names": info["start_node_names"], "end_node_names": info["end_node_names"],
           "net_input_shapes": info["net_input_shapes"]}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(req, f)
    try:
        return run_worker(cmd, ["--request", _wsl_path(Path(f.name), cmd)])
    finally:
        os.unlink(f.name)


# ---------------------------------------------------------------- cache

class ParseCache:
    def __init__(self, path: Path | None = None):
        self.path = path or cache_path()
        try:
            self.data = json.loads(self.path.read_text()) if self.path.exists() else {}
        except json.JSONDecodeError:
            self.data = {}  # a damaged cache is rebuilt, never fatal

    @staticmethod
    def key(part_hash: str, arch: str, version: str) -> str:
        return f"{part_hash}:{arch}:{version}"

    def get(self, key: str):
        return self.data.get(key)

    def put(self, key: str, value: dict) -> None:
        self.data[key] = value

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(self.path) as tmp:
            tmp.write_text(json.dumps(self.data, indent=1))

    def clear(self) -> int:
        n = len(self.data)
        self.data = {}
        if self.path.exists():
            self.path.unlink()
        return n


# ---------------------------------------------------------------- provisioning

def provision(archs: list[str], python: str) -> list[str]:
    """Create one venv per arch from the vendor wheels in vendor/hailo/<arch>/ (Python >= 3.10 required)."""
    try:
        r = subprocess.run([python, "-c", "import sys; print(sys.version_info[0], sys.version_info[1])"],
                           capture_output=True, text=True, timeout=60)
        major, minor = (int(x) for x in r.stdout.split())
    except (OSError, ValueError, subprocess.TimeoutExpired):
        raise StageError(f"cannot run {python} to create the Hailo venvs (pass --python /path/to/python3.10)") from None
    if (major, minor) < (3, 10):
        raise StageError(f"{python} is Python {major}.{minor}: the Hailo DFC needs Python >= 3.10 "
                         f"(e.g. apt install python3.10 python3.10-venv; then --python python3.10)")
    done = []
    for arch in archs:
        wheels = sorted((WHEELS / arch).glob("*.whl"))
        if not wheels:
            raise StageError(f"no vendor wheels in {WHEELS / arch}/: download the DFC wheel(s) for {arch} from "
                             f"Hailo's developer zone and put them there")
        target = venv_root() / arch
        subprocess.run([python, "-m", "venv", str(target)], check=True)
        pip = target / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
        subprocess.run([str(pip), "-m", "pip", "install", *map(str, wheels)], check=True)
        done.append(str(target))
    return done


# ---------------------------------------------------------------- one run of stage 10

def partition_file(rdir: Path, b: int, side: str, ident: dict, exporter_fn) -> Path:
    """The part for boundary b and side, where its folder is of this model and input spec (08's split_meta.json,
    or the identity 10 wrote when it exported the part itself); exported again otherwise: a part another model
    left under the same path (copied over with its old time kept) was parsed in its place."""
    folder = Path(rdir) / "splits" / f"b{b}"
    part = folder / ("part2.onnx" if side == "right" else "part1.onnx")
    meta = read_meta(folder) or read_meta(folder, PART_IDENTITY)
    if not part.exists() or not same_identity((meta or {}).get("identity"), ident):
        shutil.rmtree(folder, ignore_errors=True)
        exporter_fn().export(b, folder)
        write_json({"identity": ident}, folder / PART_IDENTITY)
    return part


def check_partitions(parts: dict[int, Path], rdir: Path, side: str, archs: list[str], cmds: dict, table: dict,
                     cache: ParseCache, shapes: dict[str, list[int]]) -> list[dict]:
    """One row per partition x arch: the compiler's parse (cached) where a backend has one, else the static table.
    shapes: every tensor's shape under the input spec (the parts keep the model's symbolic dims)."""
    versions = {arch: compiler_version(c) for arch, c in cmds.items() if c}
    rows = []
    for k, (b, path) in enumerate(parts.items(), 1):
        part = onnx.load(str(path), load_external_data=False)
        info = partition_model(part, shapes)
        h = partition_hash(part, info["net_input_shapes"])
        for arch in archs:
            base = {"boundary": b, "side": side, "partition": str(path.relative_to(rdir)), "arch": arch}
            if not cmds[arch]:
                rows.append({**base, **static_check(info, table.get(arch, set())), "source": "static",
                             "compiler_version": "", "cached": False})
                continue
            key = ParseCache.key(h, arch, versions[arch])
            res, cached = cache.get(key), True
            if res is None:
                print(f"[{k}/{len(parts)}] b{b} {arch}: parsing with the DFC {versions[arch]}", flush=True)
                res, cached = parse(cmds[arch], path, f"b{b}_{side}", arch, info), False
                if res.get("status") in ("ok", "unsupported"):
                    cache.put(key, res)   # errors (crashes, time-outs) are retried next time
            ops = [res["op"]] if res.get("status") != "ok" and res.get("op") else []
            rows.append({**base, **res, "ops": ops, "source": "dfc", "compiler_version": versions[arch],
                         "cached": cached})
    return rows


def backends(backend: str, archs: list[str]) -> dict:
    """The worker command per arch (None: static check), or StageError when an explicit backend has none."""
    cmds = {arch: (None if backend == "static" else backend_python(backend, arch)) for arch in archs}
    if backend not in ("auto", "static") and not all(cmds.values()):
        missing = [arch for arch, c in cmds.items() if not c]
        raise StageError(f"backend {backend} has no Hailo compiler for {missing}" +
                         (": run 10_hailo_parse.py --provision" if backend == "venv" else ""))
    return cmds


def print_report(rows: list[dict], archs: list[str]) -> None:
    """Stage 10's summary: per arch, partitions ok, the unsupported ops, compiler failures; whether the compiler ran."""
    for arch in archs:
        sub = [r for r in rows if r["arch"] == arch]
        ops = sorted({op for r in sub for op in r["ops"]})
        errors = sum(r["status"] == "error" for r in sub)
        print(f"{arch}: {sum(r['status'] == 'ok' for r in sub)}/{len(sub)} partitions ok"
              + (f"; unsupported ops: {', '.join(ops)}" if ops else "")
              + (f"; WARNING: the compiler failed on {errors} (status error, reason in the CSV): not a verdict, "
                 f"07 does not prune them and the next run parses them again" if errors else ""))
    static = sorted({r["arch"] for r in rows if r["source"] == "static"})
    if static:
        print(f"NOTE: no Hailo Dataflow Compiler found for {', '.join(static)}: these rows come from the static "
              f"op-support table (configs/hailo_ops.yaml); the compiler was not run")
