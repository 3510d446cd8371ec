"""Names and parsers every stage shares (the bottom of the import graph: no stage imported).

``FIT_COL`` marks, in a features file's ``.obs``, the controls that fitted the
transforms; the evaluation holds them out. ``as_bool`` reads the ``is_control``
column of a table or manifest.
"""

from __future__ import annotations

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
