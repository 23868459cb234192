"""What this host is and what ONNX Runtime reaches on it: the figures the roofline bound stands on.

- cpu_description(): CPU model and usable cores (/proc/cpuinfo, the affinity mask);
- cache_sizes(): L1 data, L2, L3 sizes from sysfs (/sys/devices/system/cpu/cpu0/cache);
- fma_ceiling(): the ISA's FMA rate as a ceiling (cores x maximum clock x FLOP/cycle from the CPU's flags:
  AVX-512 two FMA ports x 16 lanes x 2, AVX2 x 8 lanes, SSE x 4; VNNI int8 4x fp32), None when the maximum clock
  is unknown: /proc/cpuinfo's "cpu MHz" is the current or nominal one (2445 MHz on a 2-core EPYC VM whose
  convs reached 166 GFLOP/s, past the 156.5 it gives), so only cpufreq's cpuinfo_max_freq counts;
- measure_peaks(): the best GFLOP/s of ORT's own kernels (fp32 MatMul and Conv over sizes, int8
  MatMulInteger, fp16 MatMul where ORT runs it), kernel time from ORT's profiler as stage 01 measures it;
- measure_bandwidths(): an ORT Add working-set sweep, one working set per cache level (half its size) and
  DRAM (4x the L3), bytes read and written per kernel time.
Peaks and bandwidths are what a kernel can reach at best (the minimum time over runs): the roofline built on
them is a bound (lib/analysis/roofline.py).
"""
from __future__ import annotations

import os
import platform
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lib.errors import StageError
from lib.latency.microbench import profile_runs

CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
MAX_FREQ = Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")     # kHz
ONNX_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
              np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if ":" in line:
                k, v = line.split(":", 1)
                info.setdefault(k.strip(), v.strip())
    except OSError:
        pass
    return info


def max_mhz(path: Path = MAX_FREQ) -> float | None:
    """The CPU's maximum clock (cpufreq), None where the kernel does not expose it (most VMs)."""
    try:
        return int(path.read_text().strip()) / 1000.0
    except (OSError, ValueError):
        return None


def cpu_description() -> dict:
    info = _cpuinfo()
    return {"model": info.get("model name") or platform.processor() or platform.machine(),
            "cores": len(os.sched_getaffinity(0)), "mhz": max_mhz(),
            "flags": sorted(set(info.get("flags", "").split()) & {"fma", "avx", "avx2", "avx512f", "avx512_vnni",
                                                                   "avx_vnni", "avx512_fp16", "f16c", "amx_int8"})}


def _size(text: str) -> int:
    text = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * mult


def cache_sizes(root: Path = CACHE_DIR) -> dict[str, int]:
    """{"L1": data cache bytes, "L2": ..., "L3": ...} of the first CPU (the levels sysfs lists)."""
    out: dict[str, int] = {}
    for d in sorted(root.glob("index*")) if root.exists() else []:
        try:
            level, kind, size = ((d / f).read_text().strip() for f in ("level", "type", "size"))
        except OSError:
            continue
        if kind in ("Data", "Unified"):
            out[f"L{level}"] = _size(size)
    return out


def fma_ceiling(cpu: dict) -> dict[str, float] | None:
    """FLOP/s the vector units can issue at most, per dtype; None without a clock."""
    if not cpu.get("mhz"):
        return None
    flags = set(cpu["flags"])
    lanes = 16 if "avx512f" in flags else 8 if "avx2" in flags or "avx" in flags else 4
    per_cycle = 2 * lanes * (2 if "fma" in flags else 1)        # two FMA ports, 2 FLOPs per FMA
    fp32 = cpu["cores"] * cpu["mhz"] * 1e6 * per_cycle
    int8 = fp32 * (4 if flags & {"avx512_vnni", "avx_vnni", "amx_int8"} else 2)
    return {"float": fp32, "int8": int8, "float16": fp32 * (2 if "avx512_fp16" in flags else 1)}


def _model(nodes, inputs: dict[str, np.ndarray], weights: dict[str, np.ndarray], out: str,
           out_type: int = TensorProto.FLOAT) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "probe", [helper.make_tensor_value_info(k, ONNX_TYPES[v.dtype], v.shape)
                                            for k, v in inputs.items()],
                          [helper.make_tensor_value_info(out, out_type, None)],
                          [numpy_helper.from_array(v, k) for k, v in weights.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def best_kernel_us(model: onnx.ModelProto, feeds: dict, runs: int = 8, threads: int = 0) -> float | None:
    """The smallest per-run kernel time (the sum of the run's kernels) over `runs`, as ORT's profiler records it;
    None when ORT cannot run the model (an fp16 op without a CPU kernel)."""
    with tempfile.TemporaryDirectory(prefix="probe_") as tmp:
        path = os.path.join(tmp, "m.onnx")
        onnx.save(model, path)
        try:
            prof = profile_runs(path, feeds, threads=threads, warmup=2, min_runs=runs, max_runs=runs)
        except StageError:
            return None
    return min(sum(r.values()) for r in prof["per_run"]) if prof["per_run"] else None


def _matmul(m: int, k: int, n: int, dtype=np.float32):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((m, k)).astype(dtype), rng.standard_normal((k, n)).astype(dtype)
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], {"x": x}, {"w": w}, "y", ONNX_TYPES[np.dtype(dtype)])
    return model, {"x": x}, 2.0 * m * k * n


def _conv(c: int, hw: int, k: int):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, c, hw, hw)).astype(np.float32)
    w = rng.standard_normal((c, c, k, k)).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[k // 2] * 4)
    return _model([node], {"x": x}, {"w": w}, "y"), {"x": x}, 2.0 * c * c * k * k * hw * hw


def _matmul_integer(m: int, k: int, n: int):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 255, (m, k)).astype(np.uint8)
    w = rng.integers(-64, 64, (k, n)).astype(np.int8)
    model = _model([helper.make_node("MatMulInteger", ["x", "w"], ["y"])], {"x": x}, {"w": w}, "y", TensorProto.INT32)
    return model, {"x": x}, 2.0 * m * k * n


PEAK_CASES = {"float": [("matmul", (512, 512, 512)), ("matmul", (1024, 1024, 1024)), ("matmul", (256, 2048, 2048)),
                        ("conv", (64, 56, 3)), ("conv", (256, 14, 3)), ("conv", (128, 28, 3))],
              "int8": [("int", (512, 512, 512)), ("int", (1024, 1024, 1024)), ("int", (256, 2048, 2048))],
              "float16": [("fp16", (512, 512, 512)), ("fp16", (1024, 1024, 1024))]}
QUICK_PEAK_CASES = {"float": [("matmul", (256, 256, 256)), ("conv", (32, 28, 3))], "int8": [("int", (256, 256, 256))],
                    "float16": [("fp16", (256, 256, 256))]}


def _peak_case(kind: str, args: tuple):
    if kind == "matmul":
        return _matmul(*args)
    if kind == "fp16":
        return _matmul(*args, dtype=np.float16)
    if kind == "conv":
        return _conv(*args)
    return _matmul_integer(*args)


def measure_peaks(quick: bool = False, threads: int = 0) -> dict[str, float]:
    """Best FLOP/s per dtype over ORT's own kernels (see PEAK_CASES); a dtype ORT cannot run is left out."""
    peaks: dict[str, float] = {}
    for dtype, cases in (QUICK_PEAK_CASES if quick else PEAK_CASES).items():
        for kind, args in cases:
            model, feeds, flops = _peak_case(kind, args)
            t = best_kernel_us(model, feeds, runs=3 if quick else 8, threads=threads)
            if t:
                peaks[dtype] = max(peaks.get(dtype, 0.0), flops / (t * 1e-6))
    return peaks


def _add_chain(n: int, k: int):
    """x -> Add(x, y) k times on n floats: each Add reads 2n and writes n floats (the working set: 3n)."""
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    nodes = [helper.make_node("Add", ["x" if i == 0 else f"t{i - 1}", "y"], [f"t{i}"]) for i in range(k)]
    return _model(nodes, {"x": x, "y": y}, {}, f"t{k - 1}"), {"x": x, "y": y}


def measure_bandwidths(caches: dict[str, int], quick: bool = False, threads: int = 0) -> dict[str, float]:
    """Bytes/s of ORT's Add per memory level: working set half a cache level (L1, L2, L3), and DRAM (4x the
    last level, at least 64 MiB, at most 768 MiB). A chain of Adds on small tensors makes the kernel time
    long enough for the profiler's 1 us resolution."""
    sets = {lv: size // 2 for lv, size in sorted(caches.items())}
    sets["DRAM"] = int(min(max(4 * max(caches.values(), default=0), 64 << 20), 768 << 20)) // (8 if quick else 1)
    out = {}
    for lv, ws in sets.items():
        n = max(ws // 12, 256)
        k = int(np.clip(2e6 // (12 * n), 1, 64))    # ~2 MB moved per run at least
        model, feeds = _add_chain(n, k)
        t = best_kernel_us(model, feeds, runs=3 if quick else 10, threads=threads)
        if t:
            out[lv] = 12.0 * n * k / (t * 1e-6)
    # a nearer level is never slower than a farther one (an L1 Add lasts under the profiler's 1 us resolution)
    names = [lv for lv in ("DRAM", "L3", "L2", "L1") if lv in out]
    for near, far in zip(names[1:], names[:-1]):
        out[near] = max(out[near], out[far])
    return out


def probe(quick: bool = False, threads: int = 0) -> dict:
    """Everything above, as host.yaml keeps it."""
    cpu = cpu_description()
    caches = cache_sizes()
    return {"cpu": cpu, "caches_bytes": caches, "fma_ceiling_flops_per_s": fma_ceiling(cpu),
            "peak_flops_per_s": measure_peaks(quick, threads),
            "bandwidth_bytes_per_s": measure_bandwidths(caches, quick, threads)}
