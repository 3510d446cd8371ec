"""Generated blocks in the docs: text between ``<!-- name:start -->`` and ``<!-- name:end -->``
markers is written by a script (a benchmark, ``cellica schema --docs``), never by hand."""

from __future__ import annotations

from pathlib import Path

import pandas as pd


def write_block(path: str | Path, name: str, text: str) -> None:
    """Replace the lines between ``<!-- name:start -->`` and ``<!-- name:end -->`` of ``path``
    (appending the block if the markers are absent) with ``text``."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{text.rstrip()}\n{end}"
    path = Path(path)
    old = path.read_text() if path.is_file() else ""
    if start in old and end in old:
        new = old[: old.index(start)] + block + old[old.index(end) + len(end):]
    else:
        new = old.rstrip() + ("\n\n" if old else "") + block + "\n"
    path.write_text(new)
    print(f"wrote the {name!r} table into {path}", flush=True)


def markdown(table: pd.DataFrame, floatfmt: str = ".3f") -> str:
    """A DataFrame as a GitHub markdown table (numbers formatted, NaN as n/a)."""
    cols = [str(c).replace("|", "\\|") for c in table.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for row in table.itertuples(index=False):
        cells = []
        for v in row:
            if isinstance(v, float):
                cells.append("n/a" if v != v else format(v, floatfmt))
            else:
                cells.append(str(v).replace("|", "\\|"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def code_map(package: str | Path) -> str:
    """The package's picture for docs/stages.md, read from the code itself: each sub-package and
    top-level module in import order (a package only imports those above it), with the cellica
    packages it imports, and each module with the first sentence of its docstring."""
    import ast

    root = Path(package)

    def unit(path: Path) -> str:
        rel = path.relative_to(root)
        return rel.parts[0] if len(rel.parts) > 1 else rel.stem

    modules = sorted(p for p in root.rglob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    units = sorted({unit(p) for p in modules})
    imports: dict[str, set[str]] = {u: set() for u in units}
    for path in modules:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([node.module] if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                     else [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                parts = name.split(".")
                if parts[0] == root.name and len(parts) > 1 and parts[1] in imports and parts[1] != unit(path):
                    imports[unit(path)].add(parts[1])
    order: list[str] = []
    while len(order) < len(units):  # import order; a cycle would show as the alphabetical rest
        ready = [u for u in units if u not in order and imports[u] <= set(order)] or \
            [next(u for u in units if u not in order)]
        order += ready
    lines = []
    for u in order:
        deps = ", ".join(d for d in order if d in imports[u]) or "nothing of cellica"
        own = [p for p in modules if unit(p) == u]
        lines.append(f"{u + ('/' if (root / u).is_dir() else '.py'):13} imports {deps}")
        for path in own:
            doc = (ast.get_docstring(ast.parse(path.read_text())) or "").split("\n\n")[0].replace("\n", " ")
            first = doc.split(". ")[0].rstrip(".")
            first = first if len(first) <= 96 else first[:95].rsplit(" ", 1)[0] + " \u2026"
            name = path.relative_to(root / u).as_posix() if (root / u).is_dir() else ""
            lines.append(f"  {name:22} {first}" if name else f"  {first}")
    return "```\n" + "\n".join(lines) + "\n```"
