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
