"""The code's structure (issue 28 "Done when"), read from the source with ast: no import cycle among lib modules
(an import anywhere in a file counts, inside functions too), no lib-to-lib import inside a function (only
optional dependencies are imported where they are used), no function over 60 lines (lib and stage scripts), no
stage script over 80 code lines, no table of op names outside the op registry."""
import ast
from pathlib import Path

import networkx as nx

from conftest import REPO
from lib.onnx.ops import REGISTRY

LIB = REPO / "lib"


def _modules() -> dict[str, Path]:
    mods = {}
    for p in sorted(LIB.rglob("*.py")):
        parts = p.relative_to(REPO).with_suffix("").parts
        mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return mods


MODULES = _modules()


def _imported(node: ast.AST, here: str) -> list[str]:
    """The lib modules an import statement loads (`from lib.onnx import ops` loads lib.onnx.ops)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names if a.name.split(".")[0] == "lib"]
    if not isinstance(node, ast.ImportFrom):
        return []
    module = node.module or ""
    if node.level:      # relative: resolved against the importing module's package
        pkg = here.split(".") if MODULES[here].name == "__init__.py" else here.split(".")[:-1]
        module = ".".join(pkg[:len(pkg) - node.level + 1] + ([module] if module else []))
    if module.split(".")[0] != "lib":
        return []
    return [f"{module}.{a.name}" if f"{module}.{a.name}" in MODULES else module for a in node.names]


MAX_FUNCTION_LINES = 60
MAX_STAGE_CODE_LINES = 80
STAGES = sorted(REPO.glob("[01][0-9]_*.py"))


def _check(offenders: list[tuple], what: str) -> None:
    assert not offenders, f"{what}: {offenders}"


def _trees() -> dict[str, ast.Module]:
    return {name: ast.parse(p.read_text(), str(p)) for name, p in MODULES.items()}


def test_no_import_cycle_among_lib_modules():
    g = nx.DiGraph()
    for name, tree in _trees().items():
        g.add_node(name)
        for node in ast.walk(tree):
            for target in _imported(node, name):
                # a package's __init__ runs first whatever is imported from it: not an edge of its own
                if target != name and target in MODULES and MODULES[target].name != "__init__.py":
                    g.add_edge(name, target)
    cycles = list(nx.simple_cycles(g))
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c + c[:1]) for c in cycles[:5])
    assert g.number_of_edges() > 50        # the walk found the imports


def test_no_lib_import_inside_a_function():
    """In lib and in the stage scripts."""
    files = {**_trees(), **{p.name: ast.parse(p.read_text(), str(p)) for p in STAGES}}
    inside = set()
    for name, tree in files.items():
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inside |= {(name, f"{fn.name} line {node.lineno}") for node in ast.walk(fn) if _imported(node, name)}
    _check(sorted(inside), "lib imports inside functions")


def test_the_registry_imports_nothing_that_walks_graphs():
    """The op registry is facts and formulas: the walk that recurses into control-flow bodies (lib/onnx/costs.py)
    calls it, never the reverse."""
    tree = _trees()["lib.onnx.ops"]
    loaded = {t for node in ast.walk(tree) for t in _imported(node, "lib.onnx.ops")}
    assert not loaded & {"lib.onnx.costs", "lib.onnx.graph", "lib.onnx.metrics", "lib.onnx.shapes"}


def _long_functions() -> list[tuple[str, int]]:
    out = []
    files = {**MODULES, **{p.name: p for p in STAGES}}
    for name, p in files.items():
        for fn in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = fn.end_lineno - fn.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    out.append((f"{name}.{fn.name}", lines))
    return out


def _code_lines(path: Path) -> int:
    """Non-blank lines that are not comments (docstrings count)."""
    return sum(1 for line in path.read_text().splitlines() if line.strip() and not line.strip().startswith("#"))


def test_no_function_over_60_lines():
    _check(_long_functions(), f"functions over {MAX_FUNCTION_LINES} lines")


def test_no_stage_script_over_80_code_lines():
    assert len(STAGES) == 11
    _check([(p.name, n) for p in STAGES if (n := _code_lines(p)) > MAX_STAGE_CODE_LINES],
           f"stage scripts over {MAX_STAGE_CODE_LINES} code lines")


# Literals of op names outside the registry that are not facts about ops: FX module kinds and FX's own cost cases
# (lib/fx/analysis.py maps FX kinds onto registry entries), the micro-benchmarks' choice of cases, and the
# inputs If / Loop read as conditions and trip counts (lib/onnx/shapes.py).
NOT_OP_FACTS = {"lib.fx.analysis": None, "lib.latency.microbench": None, "lib.onnx.shapes": [["If", "Loop"]]}


def test_op_facts_live_in_the_registry():
    """No module keeps its own table of op names (two or more registered ops in a set, tuple, list or dict's
    keys): it asks the registry (lookup, names_with) instead."""
    names = {k.rpartition(":")[2] for k in REGISTRY}
    files = {**_trees(), **{p.name: ast.parse(p.read_text(), str(p)) for p in STAGES}}
    found = []
    for name, tree in files.items():
        if name in ("lib.onnx.ops", "lib.onnx.ops_ml") or NOT_OP_FACTS.get(name, []) is None:
            continue
        for node in ast.walk(tree):
            elts = node.elts if isinstance(node, (ast.Set, ast.Tuple, ast.List)) else \
                node.keys if isinstance(node, ast.Dict) else []
            ops = [e.value for e in elts if isinstance(e, ast.Constant) and e.value in names]
            if len(ops) >= 2 and ops not in NOT_OP_FACTS.get(name, []):
                found.append(f"{name} line {node.lineno}: {ops}")
    assert not found, "op tables outside the registry (lib/onnx/ops.py): " + "; ".join(found)
