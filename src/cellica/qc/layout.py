"""Plate-layout quality control as tables: tiles per well, the controls' offset per plate
position, the controls' pixel intensity per position, and each variant's wells placed in 2-D.

The report draws these tables (``results/qc/*.parquet``, written by ``cellica qc``); it
computes none of them. Every table is long (one row per plate position or well) so that a
user can read it back without cellica. A table that cannot be computed for the data (well
names that are not plate positions; no tile store) has no rows and says why in
``attrs["note"]``.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from cellica.core.contracts import empty_table
from cellica.core.coords2d import coords_2d

WELL = re.compile(r"^([A-Pa-p])(0?[1-9]|[1-4]\d)$")  # A01 .. P24 (96-, 384-well plates)
NOT_POSITIONS = "well names are not plate positions (A01 ...)"
MAX_WELLS = 3000  # wells per variant placed in 2-D (a seeded sample beyond it: the same for every variant)
TILES_PER_WELL = 4  # control tiles read per well for the intensity table


def plate_positions(obs: pd.DataFrame) -> pd.DataFrame | None:
    """``plate``, ``well``, ``is_control`` with each well's ``row`` (letter) and ``col`` (number),
    in the order of ``obs``; None unless every well name is a plate position (A01 ...)."""
    obs = obs[["plate", "well", "is_control"]].astype({"plate": str, "well": str})
    parsed = obs["well"].str.extract(WELL)
    if obs.empty or parsed.isna().any().any():
        return None
    return obs.assign(row=parsed[0].str.upper().to_numpy(), col=parsed[1].astype(int).to_numpy())


PLATE_WELLS = {"plate": "str", "row": "str", "col": "int64", "n_tiles": "int64"}
OFFSETS = {"row": "str", "col": "int64", "offset": "float64", "n_plates": "int64"}
INTENSITY = {"plate": "str", "row": "str", "col": "int64", "intensity": "float64", "n_tiles": "int64"}
WELL_LAYOUT = {"variant": "str", "batch": "str", "plate": "str", "well": "str", "x": "float64", "y": "float64",
               "method": "str"}


def plate_wells(obs: pd.DataFrame) -> pd.DataFrame:
    """Tiles per well of every plate: one row per (plate, row, col) that holds any.

    Parameters
    ----------
    obs : pandas.DataFrame
        The samples' metadata (``plate``, ``well``).

    Returns
    -------
    pandas.DataFrame
        ``plate, row, col, n_tiles``.
    """
    pos = plate_positions(obs)
    if pos is None:
        return empty_table(PLATE_WELLS, NOT_POSITIONS)
    counts = pos.groupby(["plate", "row", "col"], sort=False).size().rename("n_tiles").reset_index()
    return counts.astype({"n_tiles": "int64", "col": "int64"})


def position_offsets(x: np.ndarray, obs: pd.DataFrame) -> pd.DataFrame:
    """Per plate position, the norm of the controls' mean offset from their plate's control mean
    (the mean over the position's control tiles on every plate; a per-position batch signal: what
    ``transform.position_correction`` removes). ``x`` holds the rows of ``obs`` (the controls'
    rows suffice: the others are not used).

    Parameters
    ----------
    x : numpy.ndarray
        The features of the rows of ``obs``.
    obs : pandas.DataFrame
        The samples' metadata.

    Returns
    -------
    pandas.DataFrame
        ``row, col, offset, n_plates``.
    """
    pos = plate_positions(obs)
    if pos is None:
        return empty_table(OFFSETS, NOT_POSITIONS)
    ctrl = pos["is_control"].to_numpy(bool)
    if not ctrl.any():
        return empty_table(OFFSETS, "no control tiles")
    from cellica.transform.positions import (
        position_offsets as offsets_of,  # the offsets the correction removes
    )

    keys = (pos["row"] + "-" + pos["col"].astype(str)).to_numpy()
    offsets, _ = offsets_of(np.asarray(x), pos, keys, ctrl)
    plates = pos[ctrl].groupby(keys[ctrl])["plate"].nunique()
    out = pd.DataFrame({"row": [k.split("-")[0] for k in offsets], "col": [int(k.split("-")[1]) for k in offsets],
                        "offset": [float(np.linalg.norm(v)) for v in offsets.values()],
                        "n_plates": [int(plates[k]) for k in offsets]})
    return out.sort_values(["row", "col"], kind="stable").reset_index(drop=True).astype({"col": "int64"})


def control_intensity(store: Path, tiles_per_well: int = TILES_PER_WELL, seed: int = 0) -> pd.DataFrame:
    """Per control well, the mean pixel intensity of at most ``tiles_per_well`` seeded tiles,
    relative to its plate (1 = the mean of the plate's control wells; each channel first
    scaled by its mean over the tiles read, so that every channel counts alike): illumination,
    edge and dispensing artefacts, before any model sees them.

    Parameters
    ----------
    store : Path
        The tile store.
    tiles_per_well : int, default 4
        Tiles read per control well.
    seed : int, default 0
        The draw of the tiles.

    Returns
    -------
    pandas.DataFrame
        ``plate, row, col, intensity, n_tiles``.
    """
    from cellica.store.tilestore import TileStore

    ts = TileStore.open(store)
    md = ts.metadata.reset_index(drop=True)
    pos = plate_positions(md[md["is_control"].to_numpy(bool)])
    if pos is None:
        return empty_table(INTENSITY, NOT_POSITIONS if len(md) else "no tiles")
    order = np.random.default_rng(seed).permutation(len(pos))  # shuffled, then the first few per well
    picked = pos.iloc[order].groupby(["plate", "row", "col"], sort=False).head(tiles_per_well).sort_index()
    per_channel = ts.read(picked.index.to_numpy()).astype(np.float64).mean(axis=(2, 3))  # tiles x channels
    picked = picked.assign(intensity=(per_channel / np.maximum(per_channel.mean(axis=0), 1e-12)).mean(axis=1))
    wells = picked.groupby(["plate", "row", "col"], sort=False).agg(intensity=("intensity", "mean"),
                                                                     n_tiles=("intensity", "size")).reset_index()
    wells["intensity"] /= wells.groupby("plate", sort=False)["intensity"].transform("mean")
    out = wells.astype({"col": "int64", "n_tiles": "int64"})
    out.attrs["note"] = f"{tiles_per_well} tiles per control well at most"
    return out


def well_layouts(features: dict[str, Path], seed: int = 0, max_wells: int = MAX_WELLS) -> pd.DataFrame:
    """Each variant's well profiles (mean of each well's tiles) placed in 2-D (UMAP, euclidean
    as the features are; the first two PCs for few wells): how much batch structure each
    variant leaves. Beyond ``max_wells`` wells a seeded sample, the same wells for every variant.

    Parameters
    ----------
    features : dict of str to Path
        Each variant's features.
    seed : int, default 0
        The sample of wells and the UMAP's seed.
    max_wells : int, default 3000
        Wells placed at most.

    Returns
    -------
    pandas.DataFrame
        ``variant, batch, plate, well, x, y, method``.
    """
    from cellica.core.adata import aggregate_wells, check_obs, read_sealed

    parts, names, total = [], None, 0
    for variant, path in features.items():
        a = read_sealed(path, backed=True)
        try:
            check_obs(a.obs, str(path))  # the contract's metadata and label rules, naming this file
            wells = aggregate_wells(a)  # block by block: never the whole matrix in memory
        finally:
            a.file.close()
        if names is None:
            rng = np.random.default_rng(seed)
            total = wells.n_obs
            names = wells.obs_names[np.sort(rng.choice(total, min(total, max_wells), replace=False))]
        wells = wells[wells.obs_names.isin(names)]
        xy, how = coords_2d(wells.X, "euclidean", seed)
        parts.append(pd.DataFrame({"variant": variant, "batch": wells.obs["batch"].astype(str).to_numpy(),
                                   "plate": wells.obs["plate"].astype(str).to_numpy(),
                                   "well": wells.obs["well"].astype(str).to_numpy(),
                                   "x": xy[:, 0].astype(np.float64), "y": xy[:, 1].astype(np.float64),
                                   "method": how}))
    if not parts:
        return empty_table(WELL_LAYOUT, "no features")
    out = pd.concat(parts, ignore_index=True)
    out.attrs["n_wells"] = int(total)
    return out
