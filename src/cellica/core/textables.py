"""Small user tables (CSV or TSV, the delimiter sniffed): position tables, gene tables, pair
lists. Every cell is read as text; a file that cannot be read or lacks a column is a one-line
error naming it."""

from __future__ import annotations

import os

import pandas as pd

from cellica.core.errors import CellicaError


def read_text_table(path: str | os.PathLike, columns: tuple[str, ...], what: str = "") -> pd.DataFrame:
    """The table at ``path`` (all columns as text, empty cells as ''); ``columns`` must be present.
    ``what`` names the table in the errors."""
    label = f"{what} " if what else ""
    try:
        table = pd.read_csv(path, sep=None, engine="python", dtype=str, keep_default_na=False)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise CellicaError(f"{path}: cannot read the {what or 'table'} ({exc})") from None
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise CellicaError(f"{path}: {label}lacks column(s) {', '.join(missing)} (columns: "
                           f"{', '.join(map(str, table.columns))})")
    if table.empty:
        raise CellicaError(f"{path}: the {what or 'table'} has a header but no rows")
    return table
