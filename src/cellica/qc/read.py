"""Reading the qc tables back (what the report draws): where ``cellica qc`` writes each one, and
the tables themselves, seals checked. Imports nothing that computes them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from cellica.core.errors import CellicaError

if TYPE_CHECKING:
    import pandas as pd

TABLES = ("plate_wells", "position_offsets", "control_intensity", "well_layouts")


def qc_paths(out_dir: str | os.PathLike) -> dict[str, Path]:
    """Where :func:`cellica.qc.write.qc_tables` writes each table (``<out_dir>/<name>.parquet``).

    Parameters
    ----------
    out_dir : str or PathLike
        The folder of the tables.

    Returns
    -------
    dict of str to pathlib.Path
        Each table's path, by name.
    """
    return {name: Path(out_dir) / f"{name}.parquet" for name in TABLES}


def read_qc(paths) -> dict[str, pd.DataFrame]:
    """The tables :func:`cellica.qc.write.qc_tables` wrote, by name (their file names' stems), seals checked.

    Parameters
    ----------
    paths : iterable of PathLike
        The tables, named ``<name>.parquet``.

    Returns
    -------
    dict of str to pandas.DataFrame
        Each table, by name.
    """
    from cellica.core.atomic import read_parquet

    tables = {Path(p).stem: read_parquet(p, "qc table") for p in paths}
    unknown = sorted(set(tables) - set(TABLES))
    if unknown:
        raise CellicaError(f"qc: {unknown} are not qc tables (expected {', '.join(t + '.parquet' for t in TABLES)})")
    return tables
