"""``cellica align`` on files: two embeddings of the same samples in, the table out."""

from __future__ import annotations

import os

import pandas as pd

from cellica.core.adata import read_h5ad
from cellica.core.atomic import write_parquet
from cellica.core.errors import CellicaError
from cellica.stability.align import align
from cellica.stability.params import AlignParams


def align_files(a: str | os.PathLike, b: str | os.PathLike, params: AlignParams | None = None,
                *, out: str | os.PathLike | None = None) -> pd.DataFrame:
    """Held-out alignment error of embedding ``a`` onto ``b`` per class of map (see
    :func:`cellica.stability.align.align`); written to ``out`` when given.

    Parameters
    ----------
    a : str or PathLike
        Embedding A (``.h5ad``).
    b : str or PathLike
        Embedding B, its samples paired with A's by ``obs_names``.
    params : AlignParams, optional
        Whitening and split settings.
    out : str or PathLike, optional
        The table to write.

    Returns
    -------
    pandas.DataFrame
        One row per class of map.
    """
    params = params or AlignParams()
    ea, eb = read_h5ad(a), read_h5ad(b)
    ga, gb = (e.uns.get("provenance", {}).get("store_generation") for e in (ea, eb))
    if ga and gb and ga != gb:  # paired by tile id: ids of two different stores would pair unrelated tiles
        raise CellicaError(f"align: {a} and {b} embed different tile stores (generations {ga} and {gb}); align "
                           "two embeddings of the same store")
    table = align(ea, eb, params, names=(str(a), str(b)))
    table["n_components"] = params.n_components if params.n_components is not None else 0
    table["a"], table["b"] = str(a), str(b)
    if out:
        write_parquet(table, out)
    return table
