"""The package's layout is the DAG: stage packages whose imports only point down.

core, registry <- store <- embed <- transform <- evaluate <- maps, qc, stability <- report <- config
<- plan, launch <- cli.
No stage imports another's private names; only ``embed`` imports timm, only ``store``
imports zarr; modules and functions stay small enough to read.
"""

import ast
import itertools
from pathlib import Path

import pytest

from tests.conftest import REPO

PKG = REPO / "src" / "cellica"
RANK = {"core": 0, "registry": 0, "store": 1, "embed": 2, "transform": 3, "evaluate": 5, "maps": 6, "stability": 6,
        "qc": 6, "report": 7, "config": 8, "_plan_sets": 8, "plan": 9, "_launch": 9, "pipeline": 9, "cli": 10}
MODULES = sorted(PKG.rglob("*.py"))


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "cellica" and parts[1] in RANK else None


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, []


def _own_stage(path: Path) -> str | None:
    rel = path.relative_to(PKG).with_suffix("")
    return rel.parts[0] if rel.parts[0] in RANK else None


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_imports_point_down_and_stay_public(path):
    own = _own_stage(path)
    for module, names in _imports(path):
        target = _stage(module)
        if own is None or target is None or target == own:
            continue
        assert RANK[target] <= RANK[own], f"{path.name}: stage {own} imports {module} (a later stage)"
        private = [n for n in names if n.startswith("_")]
        assert not private, f"{path.name} imports private {private} from {module}"


@pytest.mark.parametrize("library, stage", [("timm", "embed"), ("zarr", "store")])
def test_only_one_stage_imports_a_heavy_format_library(library, stage):
    users = {_own_stage(p) or p.name for p in MODULES for m, _ in _imports(p) if m.split(".")[0] == library}
    assert users == {stage}, f"{library} is imported by {users}"


def test_modules_and_functions_stay_small():
    """Targets are ~300 lines per module and ~60 per function; these are the hard limits."""
    for path in MODULES:
        lines = len(path.read_text().splitlines())
        assert lines <= 380, f"{path.relative_to(PKG)}: {lines} lines"
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                size = node.end_lineno - node.lineno + 1
                assert size <= 80, f"{path.relative_to(PKG)}:{node.name}: {size} lines"


# What the report may take from other stages: their file readers, nothing that computes.
REPORT_READS = {"cellica.qc.read": {"read_qc"}}


def test_the_report_only_draws():
    """The report imports the core, the registry and itself, plus the qc tables' reader (which
    imports nothing that computes them): every number, picture and verdict it shows (example
    tiles, a simulated gene's truth, whether a strong effect was missed, the maps' complexes)
    was written as a table by the stage that computed it; it never opens the tile store."""
    for path in sorted((PKG / "report").rglob("*.py")):
        for module, names in _imports(path):
            stage = _stage(module)
            if stage is None or stage in ("core", "registry", "report"):
                continue
            allowed = REPORT_READS.get(module, set())
            assert set(names) <= allowed and allowed, f"report/{path.name} imports {names} from {module}"
    for module in REPORT_READS:  # a reader stays a reader: nothing of another stage below it
        path = PKG / (module.removeprefix("cellica.").replace(".", "/") + ".py")
        assert {_stage(m) for m, _ in _imports(path)} - {None} <= {"core", "registry"}, module


def test_stage_packages_export_their_public_names_lazily():
    """Each stage's __init__ names its public functions and parameter classes; importing a
    package (or its params, as the CLI and the run plan do) loads no heavy library."""
    import importlib
    import pkgutil
    import subprocess
    import sys

    for stage in ("store", "embed", "transform", "evaluate", "maps", "stability", "qc", "report"):
        package = importlib.import_module(f"cellica.{stage}")
        assert package.__all__, stage
        submodules = {m.name for m in pkgutil.iter_modules(package.__path__)}
        assert not submodules & set(package.__all__), f"cellica.{stage}: {submodules & set(package.__all__)}"
        for name in package.__all__:
            assert callable(getattr(package, name)), f"cellica.{stage}.{name}"
    code = ("import sys, cellica, cellica.store, cellica.embed, cellica.transform, cellica.evaluate, cellica.maps, "
            "cellica.qc, cellica.report, cellica.plan; "
            "print(sorted(m for m in ('torch', 'timm', 'lightgbm', 'scanpy', 'zarr') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]", loaded
    assert callable(importlib.import_module("cellica").run)


def test_the_code_map_is_the_code_s():
    """docs/stages.md's picture is written from the code (benchmarks/code_map.py): every
    module is in it under its package, each package's imports are the ones its modules make,
    and a package is listed only below everything it imports."""
    from cellica.core.docs import code_map

    picture = code_map(PKG)
    text = (REPO / "docs" / "stages.md").read_text()
    block = text.split("<!-- code-map:start -->\n")[1].split("\n<!-- code-map:end -->")[0]
    assert block == picture, "run `python benchmarks/code_map.py --docs`"
    heads = [line for line in picture.splitlines() if line and not line.startswith((" ", "`"))]
    listed = [h.split()[0].rstrip("/").removesuffix(".py") for h in heads]
    for i, head in enumerate(heads):
        deps = head.split(" imports ")[1]
        for dep in ([] if deps == "nothing of cellica" else deps.split(", ")):
            assert listed.index(dep) < i, head
    for path in MODULES:
        if path.name in ("__init__.py", "__main__.py"):
            continue
        if path.parent == PKG:
            assert path.stem in listed, path.name
        else:
            after = picture.split(f"\n{path.parent.name}/")[1].split("\n")[1:]
            own = list(itertools.takewhile(lambda line: line.startswith("  "), after))
            assert any(line.startswith(f"  {path.name} ") for line in own), path


def test_the_readme_stays_short():
    """The README is read first: 200 lines at most, details in docs/ (issue #46)."""
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 200, len(lines)


def _cellica_names(tree: ast.AST) -> set[str]:
    return {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
            and n.module.startswith("cellica") for a in n.names}


def self_comparisons(source: str) -> list[int]:
    """Lines of assertions that compare a cellica call with the very same call (same function,
    receiver and arguments) on the other side: such a test holds whatever the code computes."""
    tree = ast.parse(source)
    names = _cellica_names(tree)

    def cellica_calls(node):
        return {ast.dump(c) for c in ast.walk(node) if isinstance(c, ast.Call)
                and {n.id for n in ast.walk(c.func) if isinstance(n, ast.Name)} & names}

    lines = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Assert) and isinstance(n.test, ast.Compare) and len(n.test.ops) == 1 \
                and isinstance(n.test.ops[0], ast.Eq):
            sides = (n.test.left, n.test.comparators[0])
        elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr.startswith("assert_") \
                and len(n.args) >= 2:
            sides = (n.args[0], n.args[1])
        else:
            continue
        if cellica_calls(sides[0]) & cellica_calls(sides[1]):
            lines.append(n.lineno)
    return lines


def test_no_test_compares_a_call_with_itself():
    found = {f"{p.name}:{line}" for p in (REPO / "tests").rglob("test_*.py")
             for line in self_comparisons(p.read_text())}
    assert not found, sorted(found)
    tautology = ("from cellica.evaluate import evaluate_genes\n"
                 "def test_x(a):\n"
                 "    assert evaluate_genes(a).auroc.sum() == evaluate_genes(a).auroc.sum()\n"
                 "    np.testing.assert_array_equal(evaluate_genes(a), evaluate_genes(a))\n"
                 "    np.testing.assert_array_equal(evaluate_genes(a), evaluate_genes(a[::-1]))\n"  # invariance: fine
                 "    assert evaluate_genes(a) != evaluate_genes(a)\n")
    assert self_comparisons(tautology) == [3, 4]
