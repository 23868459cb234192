"""`make calibrate`: measure this host's peak fp32 FLOP/s and memory bandwidth, record them in host.yaml.

Peak FLOP/s: a large fp32 matmul (torch, all cores), best of several. Bandwidth: a STREAM-style triad
a = b + s*c (one fused pass; 24 bytes moved per element, STREAM's counting) on arrays far larger than the
last-level cache, best of several. Only the lines marked `# (calibrated)` in the host file are rewritten;
every other hand edit stays.
"""
from __future__ import annotations

import argparse
import os
import re
import time
from datetime import datetime, timezone
from pathlib import Path

from .artifacts import CONFIGS, atomic_path


def measure_matmul(n: int = 2048, repeats: int = 5) -> float:
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2.0 * n ** 3 / best


def measure_triad(mib_per_array: int = 256, repeats: int = 5) -> float:
    import torch
    torch.set_num_threads(os.cpu_count() or 1)
    n = mib_per_array * 2 ** 20 // 8
    a, b, c = torch.empty(n, dtype=torch.float64), torch.rand(n, dtype=torch.float64), torch.rand(n, dtype=torch.float64)
    torch.add(b, c, alpha=3.0, out=a)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.add(b, c, alpha=3.0, out=a)
        best = min(best, time.perf_counter() - t0)
    return 3 * 8 * n / best


def update_host_file(path: Path, values: dict[str, float]) -> None:
    """Rewrite `key: value  # (calibrated)` lines in place, keeping comments and every other line."""
    text = path.read_text()
    for key, val in values.items():
        pat = re.compile(rf"^(\s*{re.escape(key)}:\s*)([^#\n]*?)(\s*#\s*\(calibrated\).*)$", re.M)
        if not pat.search(text):
            raise SystemExit(f"error: {path} has no '{key}: ...  # (calibrated)' line to update")
        text = pat.sub(lambda m: f"{m.group(1)}{val:.4g}{m.group(3)}", text, count=1)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    text = re.sub(r"^calibrated_at:.*$", f"calibrated_at: {stamp}", text, flags=re.M)
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default=str(CONFIGS / "host.yaml"), help="host file to update (default: %(default)s)")
    p.add_argument("--matmul-n", type=int, default=2048, help="matrix size of the fp32 matmul (default 2048)")
    p.add_argument("--triad-mib", type=int, default=256, help="MiB per triad array (default 256, far above any LLC)")
    p.add_argument("--dry-run", action="store_true", help="measure and print, do not write")
    a = p.parse_args(argv)
    if not a.dry_run and not Path(a.host).exists():
        raise SystemExit(f"error: host file {a.host} not found (restore configs/host.yaml from git)")
    print(f"measuring fp32 matmul {a.matmul_n}x{a.matmul_n} on {os.cpu_count()} cores ...", flush=True)
    flops = measure_matmul(a.matmul_n)
    print(f"  peak fp32: {flops / 1e9:.1f} GFLOP/s")
    print(f"measuring STREAM triad on 3 x {a.triad_mib} MiB arrays ...", flush=True)
    bw = measure_triad(a.triad_mib)
    print(f"  bandwidth: {bw / 1e9:.1f} GB/s")
    if not a.dry_run:
        update_host_file(Path(a.host), {"float": flops, "default": flops, "mem_bw_bytes_per_s": bw})
        print(f"updated {a.host} (lines marked '# (calibrated)'; other hand edits kept)")


if __name__ == "__main__":
    main()
