"""Progress of long work (profiling runs, micro-benchmarks, sweeps, zoo runs) on stderr.

On a terminal: one line, rewritten in place. Anywhere else (a log file, CI, a pipe): a whole line now and
then (at most one every `every_s` seconds, and the last one), never hundreds of fragments on one line.
"""
from __future__ import annotations

import sys
import time


class Progress:
    """p = Progress("micro-benchmarks", total=120); p.update(k, "conv 3x3"); p.done("120 cases in 80 s")."""

    def __init__(self, what: str, total: int | None = None, stream=None, every_s: float = 10.0):
        self.what, self.total, self.every_s = what, total, every_s
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.start = self.last = time.perf_counter()
        self.width = 0

    def _text(self, k: int, note: str) -> str:
        count = f"{k}/{self.total}" if self.total else f"{k}"
        elapsed = time.perf_counter() - self.start
        return f"  {self.what}: {count}{', ' + note if note else ''} ({elapsed:.0f} s)"

    def update(self, k: int, note: str = "") -> None:
        """k items done (of total); note: what runs now."""
        now = time.perf_counter()
        text = self._text(k, note)
        if self.tty:
            self.stream.write("\r" + text.ljust(self.width))
            self.width = len(text)
        elif now - self.last >= self.every_s or (self.total and k >= self.total):
            self.stream.write(text + "\n")
            self.last = now
        else:
            return
        self.stream.flush()

    def line(self, text: str) -> None:
        """A whole line of its own (a result), below the updating line on a terminal, which goes on after it."""
        if self.tty and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.width = 0
        self.stream.write(f"  {text}\n")
        self.stream.flush()

    def done(self, summary: str = "") -> None:
        """Ends the updating line (a terminal) and prints the summary, if any, as a whole line."""
        if self.tty and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
        if summary:
            self.stream.write(f"  {self.what}: {summary}\n")
        self.stream.flush()
