"""A simulated store's ground truth as plain tables (``cellica export-truth``).

The simulator keeps its truth inside the store (``ground_truth/*.parquet``: each tile's
latent factors, each gene's effects, each plate's technical parameters, the genes'
complexes). Exported as a folder of tables, it is what evaluation reads (``--truth``): the
evaluation never opens the tile store. Each table records the store it came from
(``attrs["store_content_sha256"]``).
"""

from __future__ import annotations

import os
from pathlib import Path

from cellica.core.atomic import write_parquets
from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger

log = get_logger("store")
TRUTH_TABLES = ("latents", "effects", "batches", "complexes")  # complexes: only with simulate.complexes


def export_truth(store: str | os.PathLike, out_dir: str | os.PathLike) -> dict[str, Path]:
    """Write the store's ground-truth tables into ``out_dir`` (``<name>.parquet``), all or none.

    Parameters
    ----------
    store : path
        A tile store written by ``cellica simulate``.
    out_dir : path
        The folder of the tables (``results/truth``).

    Returns
    -------
    dict of str to Path
        Each table written, by name.
    """
    from cellica.store.tilestore import TileStore

    ts = TileStore.open(store)
    if not ts.has_ground_truth:
        raise CellicaError(f"{ts.label}: no ground truth (only a store written by cellica simulate has one)")
    found = {name: ts.ground_truth(name) for name in TRUTH_TABLES
             if (ts.path / "ground_truth" / f"{name}.parquet").is_file()}  # each checked against the manifest
    missing = [n for n in ("latents", "effects", "batches") if n not in found]
    if missing:
        raise CellicaError(f"{ts.label}: its ground truth lacks {missing}")
    paths = {name: Path(out_dir) / f"{name}.parquet" for name in found}
    for table in found.values():
        table.attrs = {"store_content_sha256": ts.content_sha256}
    write_parquets(list(found.values()), list(paths.values()))
    log.info("ground truth of %s: %s -> %s", ts.label, ", ".join(f"{n} ({len(t)} rows)" for n, t in found.items()),
             out_dir)
    return paths
