"""bench/RESULTS.md: each bench script that records its figures owns one section, rewritten by its last run.

    from bench.record import record
    record("peer_onnx_tool", markdown_table_text, command="python bench/peer_onnx_tool.py --models vit_b_16")

A section carries the date, the host (CPU model, cores), the commit and the command that produced it, so a
figure is never copied by hand: run the command again to regenerate it. Sections are kept in name order.
"""
from __future__ import annotations

import datetime
import os
import platform
import re
import subprocess
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HEAD = ("# Benchmark results\n\nGenerated: every section is written by the bench command it names (`--record`),"
        " never by hand.\nRe-run the command to regenerate a section. Machines are 2-core shared VMs: timings move"
        " +-30% between runs;\nthe figures are medians.\n")
SECTION = re.compile(r"<!-- bench:(?P<name>[\w.-]+) -->\n(?P<body>.*?)<!-- /bench:(?P=name) -->\n", re.S)


def host() -> str:
    """CPU model and usable cores of this machine."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {len(os.sched_getaffinity(0))} cores"


def commit() -> str:
    try:
        out = subprocess.run(["git", "-C", str(RESULTS.parent), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(RESULTS.parent), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return out + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def record(name: str, body: str, command: str, path: Path = RESULTS) -> None:
    """Write (or replace) section `name` of RESULTS.md with `body` (markdown), stamped with date, host,
    commit and the command that regenerates it."""
    sections = {m["name"]: m["body"] for m in SECTION.finditer(path.read_text())} if path.exists() else {}
    stamp = (f"## {name}\n\n{datetime.datetime.now().strftime('%Y-%m-%d %H:%M')} on {host()}, commit {commit()}\n"
             f"Regenerate: `{command}`\n\n")
    sections[name] = stamp + body.rstrip("\n") + "\n"
    text = HEAD + "".join(f"\n<!-- bench:{k} -->\n{v}<!-- /bench:{k} -->\n" for k, v in sorted(sections.items()))
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
