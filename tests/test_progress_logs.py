"""Progress of long work in a log: whole lines, never fragments joined on one line; on a terminal one line
rewritten in place. Checked on the real micro-benchmark runner (make calibrate's long part) and on Progress."""
import io

from lib.latency import microbench as mb
from lib.progress import Progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_micro_benchmarks_write_whole_lines_to_a_log(capsys):
    cases = mb.cases(quick=True)[:3]
    table = mb.run_cases(cases, budget_s=0.3, min_runs=2, max_runs=3)
    assert set(table["case"]) == {"mb0000", "mb0001", "mb0002"}
    err = capsys.readouterr().err                       # pytest's capture: not a terminal
    assert "\r" not in err and err.endswith("\n")
    lines = err.splitlines()
    assert lines[0].startswith("  micro-benchmarks: 3/3, ") and lines[-1].startswith("  micro-benchmarks: 3 cases in")
    assert len(lines) == 2                              # within 10 s: the last count and the summary only


def test_progress_on_a_terminal_and_in_a_log():
    tty = Terminal()
    p = Progress("sweep", total=2, stream=tty)
    p.update(0, "batch 1")
    p.line("batch 1: measured 1.00 ms")
    p.update(1, "batch 2")
    p.done("2 batches")
    out = tty.getvalue()
    assert out.startswith("\r  sweep: 0/2, batch 1") and "\r" + " " * len("  sweep: 0/2, batch 1 (0 s)") in out
    assert "  batch 1: measured 1.00 ms\n\r  sweep: 1/2, batch 2" in out and out.endswith("  sweep: 2 batches\n")
    log = io.StringIO()
    p = Progress("sweep", total=3, stream=log, every_s=3600)
    for k in range(3):
        p.update(k + 1, f"batch {k}")
        p.line(f"batch {k}: done")
    assert log.getvalue().splitlines() == ["  batch 0: done", "  batch 1: done", "  sweep: 3/3, batch 2 (0 s)",
                                           "  batch 2: done"]
