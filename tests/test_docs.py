"""docs/artifacts.md against the writers: the stages run on a small model and every CSV's header (and every
JSON's top-level keys) must be what the page documents, in the writer's order; every file written has a
section. README.md stays a page for users (<= 250 lines) whose links point at files that exist."""
from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from conftest import REPO, run_stage, small_cnn
from lib.latency.sweep import SWEEP_COLUMNS

DOC = REPO / "docs" / "artifacts.md"
SECTION = re.compile(r"^### `([^`]+)`", re.M)
ROW = re.compile(r"^\| `(\w+)` \|", re.M)
PROVENANCE = {"run_id", "identity", "upstream", "absent", "versions", "tables"}
# documented, but written by runs this test does not make (06's plots, 11's page, 08's --benchmark-set,
# make sweep): sweep.csv is checked against its writer's column list instead
NOT_RUN_HERE = {"plots_meta.json", "report_meta.json", "benchmark_results.csv", "sweep.csv", "sweep_meta.json"}


def documented() -> dict[str, list[str]]:
    """file name -> the names in its section's table, in order (the page's provenance table excluded)."""
    text = DOC.read_text()
    heads = list(SECTION.finditer(text))
    return {m[1]: ROW.findall(text[m.end():heads[i + 1].start() if i + 1 < len(heads) else len(text)])
            for i, m in enumerate(heads)}


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Stages 01-05, 07, 08, 10 on a small CNN and 09 on a small FX model: section name -> the file."""
    d = tmp_path_factory.mktemp("docs")
    model, rdir = d / "cnn.onnx", d / "res"
    small_cnn(model)
    for stage, extra in (("02_shapes_flops_bytes.py", []), ("01_profile_onnx.py", ["--runs", "2", "--warmup", "1"]),
                         ("03_merge_profile_metrics.py", []), ("04_critical_path.py", []),
                         ("05_energy_estimate.py", []), ("07_split_candidates.py", []),
                         ("08_export_splits.py", ["--top-k", "1", "--diagram", "none"]),
                         ("10_hailo_parse.py", ["--boundary", "0", "1", "--backend", "static"])):   # one part 10 exports
        r = run_stage(stage, "--model", model, "--results", rdir, *extra, env={"NN_PERF_CACHE_DIR": str(d / "cache")})
        assert r.returncode == 0, f"{stage}: {r.stderr}"
    r = run_stage("09_fx_partition.py", "--model", "tests.fx_models:fork_join", "--input-shape", "1x3x8x8",
                  "--results", d / "fx")
    assert r.returncode == 0, r.stderr
    out = {p.name: p for p in (*rdir.iterdir(), *(d / "fx").iterdir()) if p.suffix in (".csv", ".json")}
    out.update({f"splits/b<B>/{p.name}": p for p in rdir.glob("splits/b*/*") if p.suffix in (".csv", ".json")})
    return out


def names(path: Path) -> list[str]:
    if path.suffix == ".csv":
        with path.open(newline="") as f:
            return next(csv.reader(f))
    return list(json.loads(path.read_text()))


def test_every_file_written_is_documented_with_its_columns(written):
    doc = documented()
    for key, path in written.items():
        assert key in doc, f"{key} is written but has no section in docs/artifacts.md"
        got = [n for n in names(path) if path.suffix == ".csv" or n not in PROVENANCE or n in doc[key]]
        assert got == doc[key], f"docs/artifacts.md, {key}: the writer has {got}"
    missing = set(doc) - set(written) - NOT_RUN_HERE
    assert not missing, f"sections for files no stage wrote here: {missing}"


def test_sweep_columns_match_the_writer():
    assert documented()["sweep.csv"] == SWEEP_COLUMNS


def test_readme_is_short_and_its_links_exist():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        assert (REPO / link).exists(), f"README links to {link}, which does not exist"
    for page in (REPO / "docs").glob("*.md"):
        for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text()):
            assert (page.parent / link).exists(), f"{page.name} links to {link}, which does not exist"
