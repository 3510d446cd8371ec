"""The tile store's metadata contract: required columns, their types, unique tile ids.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cellica.core.contracts import as_bool, check_labels
from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.core.names import check_case_collisions

log = get_logger("tilestore")


SCHEMA_VERSION = 1


REQUIRED_COLUMNS = ("tile_id", "plate", "well", "site", "batch", "perturbation", "is_control")


STRING_COLUMNS = ("tile_id", "plate", "well", "batch", "perturbation")


ALLOWED_DTYPES = ("uint8", "uint16")


METADATA_FILE = "metadata.parquet"


GROUND_TRUTH_DIR = "ground_truth"


def normalise_metadata(metadata: pd.DataFrame, source: str = "metadata") -> pd.DataFrame:
    """Check the required columns and coerce them to the contract's types.

    Parameters
    ----------
    metadata
        One row per tile.
    source
        Where the table came from, for error messages.

    Returns
    -------
    pandas.DataFrame
        A copy with string identifiers, integer ``site`` and boolean ``is_control``
        and a fresh RangeIndex. Optional columns are kept unchanged.
    """
    missing = [c for c in REQUIRED_COLUMNS if c not in metadata.columns]
    if missing:
        raise CellicaError(
            f"{source}: missing required column(s) {missing}; "
            f"the tile store needs {list(REQUIRED_COLUMNS)}"
        )
    out = metadata.reset_index(drop=True).copy()
    for col in REQUIRED_COLUMNS:
        nulls = out[col].isna()
        if nulls.any():
            raise CellicaError(
                f"{source}: column {col!r} has {int(nulls.sum())} empty value(s), "
                f"first at row {int(np.flatnonzero(nulls.to_numpy())[0])}"
            )
    for col in STRING_COLUMNS:
        out[col] = out[col].astype(str)
    try:
        out["site"] = pd.to_numeric(out["site"], downcast=None).astype("int64")
    except (ValueError, TypeError) as exc:
        raise CellicaError(f"{source}: column 'site' must be integers ({exc})") from None
    out["is_control"] = as_bool(out["is_control"], source)
    check_labels(out, source)
    check_case_collisions(out["perturbation"].unique(), source)
    return out


def duplicated_ids(tile_ids: pd.Series) -> list[str]:
    """Return (up to five) tile ids that occur more than once."""
    dup = tile_ids[tile_ids.duplicated()]
    return list(dict.fromkeys(dup.tolist()))[:5]
