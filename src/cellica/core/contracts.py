"""Names and parsers every stage shares (the bottom of the import graph: no stage imported).

``FIT_COL`` marks, in a features file's ``.obs``, the controls that fitted the
transforms; the evaluation holds them out. ``as_bool`` reads the ``is_control``
column of a table or manifest. ``empty_table`` is the typed, empty table a stage writes when
it has nothing to put in one, with the reason.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from cellica.core.errors import CellicaError

FIT_COL = "transform_fit"

_TRUE = {"true", "1", "yes", "t", "y"}
_FALSE = {"false", "0", "no", "f", "n"}


def as_bool(col: pd.Series, source: str, name: str = "is_control") -> pd.Series:
    """A boolean column from booleans or the words true/false, 1/0, yes/no (any case)."""
    if col.dtype == bool:
        return col
    text = col.astype(str).str.strip().str.lower()
    bad = ~text.isin(_TRUE | _FALSE)
    if bad.any():
        raise CellicaError(f"{source}: column {name!r} has value {col[bad].iloc[0]!r}; use true/false")
    return text.isin(_TRUE)


def held_back_mask(obs: pd.DataFrame):
    """Rows the evaluation compares: everything except the controls that fitted the transform.

    When every control fitted it (``transform.fit_fraction: 1.0``) nothing is held back and
    every row is kept (the evaluation then reuses the fitting controls, and says so).
    """
    import numpy as np

    ctrl = obs["is_control"].to_numpy(dtype=bool)
    if FIT_COL not in obs or not obs[FIT_COL].any():
        return np.ones(len(obs), dtype=bool)
    fitted = obs[FIT_COL].to_numpy(dtype=bool)
    return ~fitted if (ctrl & ~fitted).any() else np.ones(len(obs), dtype=bool)


RESERVED_COLUMNS = ("_index",)  # AnnData's writer keeps the index under this name


def check_labels(obs: pd.DataFrame, source: str) -> None:
    """A label means one thing: no perturbation label on both rows marked ``is_control`` and rows not
    marked (a control label on treated rows, or a gene's rows marked control), and no column name
    twice or reserved by AnnData. One line naming the file, the label and how many rows of each."""
    dup = sorted({str(c) for c in obs.columns[obs.columns.duplicated()]})
    if dup:
        raise CellicaError(f"{source}: column name(s) {dup} appear more than once; give each column its own name")
    reserved = [c for c in obs.columns if str(c) in RESERVED_COLUMNS]
    if reserved:
        raise CellicaError(f"{source}: column name {reserved[0]!r} is reserved by AnnData (.h5ad); rename it")
    ctrl = obs["is_control"].to_numpy(bool)
    labels = obs["perturbation"].astype(str)
    both = sorted(set(labels[ctrl]) & set(labels[~ctrl]))
    if both:
        label = both[0]
        n_ctrl, n_other = int((labels[ctrl] == label).sum()), int((labels[~ctrl] == label).sum())
        raise CellicaError(f"{source}: perturbation {label!r} marks {n_ctrl} control row(s) and {n_other} row(s) not "
                           "marked is_control; a label means one thing: fix is_control or the label of those rows"
                           + (f" ({len(both)} such labels)" if len(both) > 1 else ""))


def empty_table(columns: dict[str, Any], note: str) -> pd.DataFrame:
    """An empty table with these columns (name -> dtype) that says why in ``attrs['note']``.

    Parameters
    ----------
    columns
        Each column's name and dtype, in order.
    note
        Why the table is empty, as the readers show it.

    Returns
    -------
    pandas.DataFrame
        No rows, the columns typed, ``attrs["note"]`` set.
    """
    table = pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})
    table.attrs["note"] = note
    return table
