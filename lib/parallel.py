"""Python-bound work of large graphs on the machine's second core: a forked child, since the GIL rules out
threads (half of a 200k-row table or CSV, onnx's shape inference ahead, files written meanwhile). Each use has
a way back when the child fails: the parent does the work itself, so a child is only ever a speed-up, never a
different result. Below MIN_ITEMS nodes or rows, without fork (Windows, macOS), with one core, or with
NNPERF_SERIAL=1 the work runs inline, in the one process."""
from __future__ import annotations

import os
import pickle
import sys
import tempfile
from collections.abc import Callable
from contextlib import contextmanager


MIN_ITEMS = 10_000      # nodes or rows below which forking a large process costs more than it saves


def available() -> bool:
    """Linux (fork is unsafe on macOS once system frameworks are loaded), two usable cores, and not turned off
    with NNPERF_SERIAL=1 (one process: for measuring, debugging, or a machine shared with other work)."""
    return (sys.platform.startswith("linux") and os.environ.get("NNPERF_SERIAL", "") in ("", "0")
            and len(os.sched_getaffinity(0)) >= 2)


class Child:
    """fn() run in a forked child (its return value is dropped: it writes what it makes to a file); wait()
    says whether it succeeded. Inline (an exception propagates) when asked (small work, where forking a large
    process costs more) or when fork is not available."""

    def __init__(self, fn: Callable[[], None], inline: bool = False):
        self.pid = None
        if inline or not available():
            fn()
            return
        pid = os.fork()
        if pid == 0:        # the child: never return into the parent's code, never run its exit handlers
            code = 1
            try:
                fn()
                code = 0
            finally:
                os._exit(code)
        self.pid = pid

    def wait(self) -> bool:
        if self.pid is None:
            return True
        _, status = os.waitpid(self.pid, 0)
        self.pid = None
        return os.waitstatus_to_exitcode(status) == 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):   # the parent failed while the child ran: reap it, never leave it behind
        self.wait()


def halves(fn: Callable[[int, int], list], n: int, min_n: int | None = None) -> list:
    """fn(0, n) computed as fn(0, n // 2) here and fn(n // 2, n) in a forked child, whose list comes back
    pickled through a temporary file; inline below min_n items (MIN_ITEMS), without a second core, or when the
    child fails."""
    if n < (MIN_ITEMS if min_n is None else min_n) or not available():
        return fn(0, n)
    half = n // 2
    fd, path = tempfile.mkstemp(prefix="nnperf_half_", suffix=".pkl")
    os.close(fd)
    try:
        def child():
            with open(path, "wb") as f:
                pickle.dump(fn(half, n), f, protocol=pickle.HIGHEST_PROTOCOL)
        with Child(child) as c:
            first = fn(0, half)
            ok = c.wait()
        if not ok:
            return first + fn(half, n)
        with open(path, "rb") as f:
            return first + pickle.load(f)
    finally:
        os.unlink(path)


@contextmanager
def meanwhile(fn: Callable[[], None], inline: bool = False):
    """fn() (which writes files) in a forked child while the block runs; at the block's end, wait for it and
    run fn() here if the child failed, so that its files are written either way and its errors surface here."""
    with Child(fn, inline) as child:
        yield
        if not child.wait():
            fn()
