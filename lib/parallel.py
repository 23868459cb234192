"""Python-bound work of large graphs on the machine's second core: a forked child, since the GIL rules out
threads (part of a 200k-row table or CSV, after other files to write; onnx's shape inference ahead). Each use
has a way back when the child fails: the parent does the work itself, so a child is only ever a speed-up,
never a different result. Below MIN_ITEMS nodes or rows, without fork (Windows, macOS), with one core, or with
NNPERF_SERIAL=1 the work runs inline, in the one process."""
from __future__ import annotations

import os
import pickle
import signal
import sys
import tempfile
from collections.abc import Callable


MIN_ITEMS = 10_000      # nodes or rows below which forking a large process costs more than it saves


def available() -> bool:
    """Linux (fork is unsafe on macOS once system frameworks are loaded), two usable cores, and not turned off
    with NNPERF_SERIAL=1 (one process: for measuring, debugging, or a machine shared with other work)."""
    return (sys.platform.startswith("linux") and os.environ.get("NNPERF_SERIAL", "") in ("", "0")
            and len(os.sched_getaffinity(0)) >= 2)


class Child:
    """fn() run in a forked child (its return value is dropped: it writes what it makes to a file); wait()
    says whether it succeeded. Inline (an exception propagates) when fork is not available."""

    def __init__(self, fn: Callable[[], None]):
        self.pid = None
        if not available():
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

    def kill(self) -> None:
        if self.pid is not None:
            os.kill(self.pid, signal.SIGKILL)

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


class Future:
    """fn() computed in a forked child while the parent goes on; result() waits for it and returns its value,
    pickled through a temporary file, or `fallback()` (default: fn() here) when the child failed or did not run.
    Use it as a context manager, so that the child is reaped and its file removed whatever happens."""

    def __init__(self, fn: Callable, inline: bool = False, fallback: Callable | None = None):
        self.fallback = fallback or fn
        self.path = self.child = None
        if inline or not available():
            return
        fd, self.path = tempfile.mkstemp(prefix="nnperf_future_", suffix=".pkl")
        os.close(fd)

        def run():
            with open(self.path, "wb") as f:
                pickle.dump(fn(), f, protocol=pickle.HIGHEST_PROTOCOL)
        self.child = Child(run)

    def result(self):
        if self.child is not None and self.child.wait():
            with open(self.path, "rb") as f:
                return pickle.load(f)
        return self.fallback()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if self.child is not None:
            if exc_type is not None:    # the parent failed (a refused model): the value is not needed
                self.child.kill()
            self.child.wait()
        if self.path is not None:
            os.unlink(self.path)
            self.path = None


class Task:
    """fn() (which writes files) run once: taken along by the child of split(), or by finish() here when no
    child ran it (small work, no second core, a child that failed)."""

    def __init__(self, fn: Callable[[], None]):
        self.fn, self.done = fn, False

    def finish(self) -> None:
        if not self.done:
            self.fn()
            self.done = True


def split(fn: Callable[[int, int], list], n: int, child_share: float = 0.5, task: Task | None = None,
          min_n: int | None = None) -> list:
    """fn(0, n) computed as fn(0, k) here and fn(k, n) in a forked child (a Future) that takes child_share of
    the items, after running `task` first when one is given (three pieces of work in two processes on the two
    cores, not three). In one process below min_n items (MIN_ITEMS) or without a second core: the task is then
    left to its owner's finish(), as it is when the child fails."""
    if n < (MIN_ITEMS if min_n is None else min_n) or not available():
        return fn(0, n)
    k = n - int(n * child_share)

    def child():
        if task is not None:
            task.fn()
        return True, fn(k, n)
    with Future(child, fallback=lambda: (False, fn(k, n))) as rest:
        head = fn(0, k)
        by_child, tail = rest.result()
    if by_child and task is not None:
        task.done = True
    return head + tail
