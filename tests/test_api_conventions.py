"""scanpy's discipline on the public surface: what each package exports (its ``__all__``) takes
at most three positional arguments, booleans only by keyword, and says what every parameter is
(a numpydoc ``Parameters`` section naming each one, and ``Returns`` when it returns a value)."""

import importlib
import inspect
import pkgutil
import re

import pytest

import cellica
from tests.conftest import REPO

PACKAGES = ["cellica", *sorted(f"cellica.{m.name}" for m in pkgutil.iter_modules(cellica.__path__) if m.ispkg)]
MAX_POSITIONAL = 3


def _exports():
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            if callable(obj):
                yield f"{package}.{name}", obj


def _signature(obj) -> inspect.Signature:
    return inspect.signature(obj.__init__ if inspect.isclass(obj) else obj)


def convention_problems(obj) -> list[str]:
    """What breaks the conventions in one exported function or class (its constructor)."""
    params = [p for p in _signature(obj).parameters.values() if p.name != "self"]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    problems = []
    if len(positional) > MAX_POSITIONAL:
        problems.append(f"{len(positional)} positional parameters (at most {MAX_POSITIONAL}; the rest keyword-only)")
    flags = [p.name for p in positional if p.annotation in (bool, "bool") or isinstance(p.default, bool)]
    if flags:
        problems.append(f"boolean {flags} not keyword-only")
    if inspect.isclass(obj):
        return problems
    doc = inspect.getdoc(obj) or ""
    section = re.search(r"^Parameters\n-{3,}\n(.*?)(?=^\w[\w ]*\n-{3,}\n|\Z)", doc, re.S | re.M)
    named = set()
    for line in (section.group(1).splitlines() if section else []):
        if line and not line.startswith(" "):
            named |= {n.strip().lstrip("*") for n in line.split(" : ")[0].split(",")}
    missing = [p.name for p in params if p.name not in named]
    if missing:
        problems.append(f"parameters {missing} not in a numpydoc Parameters section")
    returns = _signature(obj).return_annotation
    if returns not in (None, "None", inspect.Signature.empty) and not re.search(r"^Returns\n-{3,}\n", doc, re.M):
        problems.append("no Returns section")
    return problems


def test_every_package_declares_its_public_names():
    for package in PACKAGES:
        module = importlib.import_module(package)
        assert isinstance(getattr(module, "__all__", None), list | tuple) and module.__all__, package


@pytest.mark.parametrize("name, obj", list(_exports()), ids=[n for n, _ in _exports()])
def test_the_public_surface_keeps_scanpy_s_conventions(name, obj):
    assert not convention_problems(obj), f"{name}: " + "; ".join(convention_problems(obj))


def test_the_convention_check_can_fail():
    """Each rule catches what it is for (a check that passed everything would prove nothing)."""
    def many(a, b, c, d):
        """Four positional.

        Parameters
        ----------
        a, b, c, d : int
            Numbers.
        """

    def flag(a, overwrite=False):
        """A positional boolean.

        Parameters
        ----------
        a : int
            A number.
        overwrite : bool
            Whether to.
        """

    def undocumented(a, *, b=1) -> int:
        """Says nothing of ``b`` and nothing of what it returns.

        Parameters
        ----------
        a : int
            A number.
        """

    def good(a, b, c, *, d=1, flag=False) -> int:
        """All in order.

        Parameters
        ----------
        a, b, c : int
            Numbers.
        d : int
            Another.
        flag : bool
            A switch.

        Returns
        -------
        int
            A number.
        """

    assert convention_problems(many) == ["4 positional parameters (at most 3; the rest keyword-only)"]
    assert convention_problems(flag) == ["boolean ['overwrite'] not keyword-only"]
    assert convention_problems(undocumented) == ["parameters ['b'] not in a numpydoc Parameters section",
                                                 "no Returns section"]
    assert convention_problems(good) == []


def test_no_two_modules_share_a_name_for_what_a_stage_does_on_files():
    """Five stage modules were all called files.py; a module is named for what it does."""
    names = [p.relative_to(REPO / "src").as_posix() for p in (REPO / "src" / "cellica").rglob("files.py")]
    assert names == [], names


def module_visibility(exported: set[str], referrers: dict[str, set[str]]) -> list[str]:
    """Modules whose name says the wrong thing about who may import them.

    A module is public (no leading underscore) when its package exports a name from it, or when
    code outside its package (another stage package, the run plan's rules, the Snakefile) refers
    to it; otherwise it is an internal of its package and is named ``_module``. ``referrers``
    maps each module to the modules (or ``"workflow"``) naming it; a top-level module's package
    is ``cellica`` alone.
    """

    def package(module: str) -> str:
        return module.rsplit(".", 1)[0]

    def inside(module: str, referrer: str) -> bool:
        if package(module) == "cellica":
            return referrer.count(".") == 1
        return referrer.startswith(package(module) + ".")

    problems = []
    for module, named_by in sorted(referrers.items()):
        leaf = module.rsplit(".", 1)[1]
        outside = sorted(r for r in named_by if r != module and not inside(module, r))
        if leaf.startswith("_") and outside:
            problems.append(f"{module} is named private but {outside[0]} refers to it")
        if not leaf.startswith("_") and module not in exported and not outside:
            problems.append(f"{module} is used only inside {package(module)}: name it _{leaf}")
    return problems


def _references() -> tuple[set[str], dict[str, set[str]]]:
    src = REPO / "src"
    modules = {p.relative_to(src).with_suffix("").as_posix().replace("/", "."): p
               for p in (src / "cellica").rglob("*.py") if p.stem not in ("__init__", "__main__")}
    exported = set()
    for init in (src / "cellica").rglob("__init__.py"):
        exported |= set(re.findall(r'(cellica(?:\.\w+)+?)(?::\w+)?"', init.read_text()))
        exported |= set(re.findall(r"from (cellica(?:\.\w+)+) import", init.read_text()))
    texts = {name: path.read_text() for name, path in modules.items()}
    texts |= {f"cellica.{p.parent.name}.__init__": p.read_text() for p in (src / "cellica").glob("*/__init__.py")}
    texts["workflow"] = "\n".join(p.read_text() for p in [REPO / "Snakefile", *(REPO / "workflow").rglob("*.smk")])
    referrers = {m: {name for name, text in texts.items() if re.search(re.escape(m) + r"\b", text)} for m in modules}
    return exported, referrers


def test_internal_modules_are_private_and_private_ones_stay_inside():
    """scanpy's layout: what a package keeps to itself lives in ``_module``; so the public
    surface is the modules without an underscore (ruff's D rules check their docstrings)."""
    exported, referrers = _references()
    assert not module_visibility(exported, referrers)
    assert any(m.rsplit(".", 1)[1].startswith("_") for m in referrers)  # the check saw some


def test_the_visibility_check_can_fail():
    referrers = {"cellica.maps.helper": {"cellica.maps.gene_maps"}, "cellica.maps._inner": {"cellica.report.pages"},
                 "cellica.maps.gene_maps": {"cellica.cli._commands"}, "cellica.plan_x": {"cellica.plan"},
                 "cellica.maps._fine": {"cellica.maps.gene_maps"}}
    assert module_visibility(set(), referrers) == [
        "cellica.maps._inner is named private but cellica.report.pages refers to it",
        "cellica.maps.helper is used only inside cellica.maps: name it _helper",
        "cellica.plan_x is used only inside cellica: name it _plan_x"]
    assert module_visibility({"cellica.maps.helper", "cellica.plan_x"}, referrers) == [
        "cellica.maps._inner is named private but cellica.report.pages refers to it"]


REFERENCE = re.compile(r"`(cellica(?:\.[A-Za-z_]\w*)+)`")


def _resolves(ref: str) -> bool:
    parts = ref.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_every_dotted_reference_names_something_that_exists():
    """A docstring or doc naming ``cellica.x.y`` names a module, function or constant that is
    there (three had gone stale: a function moved, two modules renamed)."""
    files = [*(REPO / "src").rglob("*.py"), *(REPO / "docs").glob("*.md"), REPO / "README.md"]
    stale = sorted({f"{path.relative_to(REPO)}: {m.group(1)}" for path in files
                    for m in REFERENCE.finditer(path.read_text()) if not _resolves(m.group(1))})
    assert not stale, stale
    assert not _resolves("cellica.names.safe_filename") and _resolves("cellica.core.names.safe_filename")


def test_the_configured_lint_and_line_length_hold():
    """pyproject's ruff settings are enforced, the line length (120) included: ruff passes on
    the library, the tests and the benchmarks (E501 is not ignored), and its docstring rules
    (D, numpy convention) hold on every public module."""
    import shutil
    import subprocess
    import sys
    import tomllib

    lint = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["ruff"]
    assert lint["line-length"] == 120 and "E501" not in lint["lint"].get("ignore", [])
    # pydocstyle (numpy convention) on the public surface: only internals, tests and benchmarks are exempt
    assert "D" in lint["lint"]["select"] and lint["lint"]["pydocstyle"]["convention"] == "numpy"
    exempt = {glob for glob, rules in lint["lint"]["per-file-ignores"].items() if "D" in rules}
    assert exempt == {"src/cellica/_[a-z]*.py", "src/cellica/**/_[a-z]*.py", "tests/**", "benchmarks/**"}
    assert not {"D100", "D101", "D102", "D103", "D104", "D105", "D106"} & set(lint["lint"]["ignore"])
    ruff = [shutil.which("ruff")] if shutil.which("ruff") else [sys.executable, "-m", "ruff"]
    done = subprocess.run([*ruff, "check", "src", "tests", "benchmarks"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]
