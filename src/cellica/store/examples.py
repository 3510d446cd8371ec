"""Example tiles of every perturbation, as a table (``cellica example-tiles``): the report shows
them without opening the tile store.

Per perturbation, up to :data:`N_EXAMPLES` of its tiles and as many control tiles, drawn with a
seeded generator, composited (one colour per channel) into one PNG montage each.
"""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import numpy as np
import pandas as pd

from cellica.core.atomic import write_parquet
from cellica.core.chunks import gene_chunk
from cellica.core.logs import get_logger, progress

log = get_logger("store")
N_EXAMPLES = 8  # tiles per montage (one row of the montage)
COLUMNS = ["gene", "label", "n_tiles", "png"]


def _png(rgb: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG", optimize=True)
    return buf.getvalue()


def example_tiles(store, chunk: str | None = None, *, seed: int = 0) -> pd.DataFrame:
    """The example montages of the store's perturbations (those of ``chunk`` ``i/n`` of them).

    Parameters
    ----------
    store : TileStore
        An open tile store.
    chunk : str, optional
        ``i/n``: every n-th perturbation from the i-th, sorted (the report's chunks of pages).
    seed : int, default 0
        The draw of each perturbation's tiles and its control tiles (one generator per
        perturbation, so a perturbation's montages do not depend on the others).

    Returns
    -------
    pandas.DataFrame
        One row per perturbation and label (``perturbed``, ``control``): ``gene``, ``label``,
        ``n_tiles`` shown and ``png``, the montage's PNG bytes.
    """
    from cellica.store._thumbnails import montage

    md = store.metadata
    perturbation = md["perturbation"].astype(str).to_numpy()
    control = md["is_control"].to_numpy(bool)
    genes = gene_chunk(sorted(set(perturbation[~control])), chunk)
    rows = []
    for gene in progress(genes, desc="example tiles", unit="perturbation"):
        rng = np.random.default_rng(seed)
        for label, mask in (("perturbed", perturbation == gene), ("control", control)):
            idx = np.flatnonzero(mask)
            if idx.size:
                pick = np.sort(rng.choice(idx, min(N_EXAMPLES, idx.size), replace=False))
                rows.append({"gene": gene, "label": label, "n_tiles": len(pick),
                             "png": _png(montage(store.read(pick), ncols=N_EXAMPLES))})
    return pd.DataFrame(rows, columns=COLUMNS)


def write_example_tiles(store: str | os.PathLike, out: str | os.PathLike, chunk: str | None = None, *,
                        seed: int = 0) -> Path:
    """Write :func:`example_tiles` of the store at ``store`` to the parquet table ``out``.

    Parameters
    ----------
    store : str or PathLike
        The tile store.
    out : str or PathLike
        The parquet table to write (``qc/examples/<i>-of-<n>.parquet`` in the DAG).
    chunk : str, optional
        ``i/n``: only every n-th perturbation from the i-th, sorted.
    seed : int, default 0
        The draw of the tiles (:func:`example_tiles`).

    Returns
    -------
    pathlib.Path
        ``out``.
    """
    from cellica.store.tilestore import TileStore

    ts = TileStore.open(store)
    table = example_tiles(ts, chunk, seed=seed)
    ts.check_unchanged()
    table.attrs["provenance"] = json.dumps({"store": ts.label, "seed": int(seed), "chunk": chunk or "all"})
    log.info("example tiles of %d perturbation(s) -> %s", table["gene"].nunique(), out)
    return write_parquet(table, out)
