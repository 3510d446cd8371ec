"""The report's gene-map and plate-layout figures: a UMAP of each variant's gene map (coloured
by known complex when the store records one), a UMAP of each variant's wells coloured by batch,
and per-plate heatmaps of the layout (tiles per well, control intensity, control offset)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cellica.core.atomic import read_parquet
from cellica.core.logs import get_logger
from cellica.report.svg import bar_chart, heatmap, scatter

log = get_logger("report")
WELL = re.compile(r"^([A-Pa-p])(0?[1-9]|[1-4]\d)$")  # A01 .. P24 (96-, 384-well plates)
MAX_PLATES = 8  # plates drawn (the first, in order); the rest are counted
# UMAP's 15 neighbours need more points than that; fewer are drawn on their first two PCs.
MIN_UMAP_POINTS = 16
MAX_WELLS = 3000  # wells per variant in the batch UMAP (a seeded sample beyond it)
TILES_PER_WELL = 4  # control tiles read per well for the intensity heatmap


def layout_2d(x: np.ndarray, metric: str = "euclidean", seed: int = 0) -> tuple[np.ndarray, str]:
    """Two coordinates per row: scanpy's UMAP (seeded kNN graph of ``metric``), or the first two
    principal components below :data:`MIN_UMAP_POINTS` rows. Returns them and the method's name."""
    x = np.asarray(x, np.float32)
    if len(x) < MIN_UMAP_POINTS:
        u, s, _ = np.linalg.svd(x - x.mean(axis=0), full_matrices=False)
        xy = np.zeros((len(x), 2))
        k = min(2, s.size)
        xy[:, :k] = u[:, :k] * s[:k]
        return xy, "PC"
    import anndata as ad
    import scanpy as sc

    a = ad.AnnData(X=x)
    sc.pp.neighbors(a, n_neighbors=MIN_UMAP_POINTS - 1, use_rep="X", metric=metric, random_state=seed)
    sc.tl.umap(a, random_state=seed)
    return a.obsm["X_umap"], "UMAP"


def map_umaps(maps: dict[str, Path], store: Path | None = None, seed: int = 0,
              entity: str = "gene") -> list[dict[str, Any]]:
    """One UMAP per variant's gene map (scanpy: cosine kNN graph, seeded; the first two PCs for
    very small maps), genes coloured by their complex (the simulated store's ``complexes`` table)
    or all alike; ``entity`` names the points (gene, compound, ...)."""
    from cellica.core.adata import read_sealed

    group = _complexes(store)
    out = []
    for variant, path in maps.items():
        genes = read_sealed(path)
        if genes.n_obs < 4:
            continue
        xy, how = layout_2d(genes.X, "cosine", seed)
        points = [(float(x), float(y), group.get(g, entity)) for (x, y), g in zip(xy, genes.obs_names, strict=True)]
        out.append({"variant": variant, "svg": scatter(points, f"{variant}: {entity} map {how}", f"{how} 1", f"{how} 2",
                                                       size=260, radius=_radius(len(points)),
                                                       names=list(map(str, genes.obs_names)))})
    return out


def well_umaps(features: dict[str, Path], seed: int = 0) -> list[dict[str, Any]]:
    """One UMAP per variant of its well profiles (mean of each well's tiles; euclidean, as the
    variant's features are), coloured by batch: how much batch structure each variant leaves.
    Beyond :data:`MAX_WELLS` wells a seeded sample (the same wells for every variant) is drawn."""
    import anndata as ad

    from cellica.core.adata import aggregate_wells

    out, names = [], None
    for variant, path in features.items():
        a = ad.read_h5ad(path, backed="r")
        try:
            wells = aggregate_wells(a)  # block by block: never the whole matrix in memory
        finally:
            a.file.close()
        if names is None:
            rng = np.random.default_rng(seed)
            names = wells.obs_names[np.sort(rng.choice(wells.n_obs, min(wells.n_obs, MAX_WELLS), replace=False))]
            total = wells.n_obs
        wells = wells[wells.obs_names.isin(names)]
        xy, how = layout_2d(wells.X, "euclidean", seed)
        points = [(float(x), float(y), b) for (x, y), b in zip(xy, wells.obs["batch"].astype(str), strict=True)]
        title = f"{variant}: wells by batch ({how}" + (f", {wells.n_obs} of {total})" if wells.n_obs < total else ")")
        out.append({"variant": variant, "svg": scatter(points, title, f"{how} 1", f"{how} 2", size=260,
                                                       radius=_radius(len(points)))})
    return out


def _radius(n: int) -> float:
    """Dots big enough to see in a small map, small enough not to hide each other in a large one."""
    return 3.5 if n < 200 else 2.5 if n < 1000 else 1.8


def _complexes(store: Path | None) -> dict[str, str]:
    if store is None:
        return {}
    from cellica.store.tilestore import TileStore

    try:
        table = TileStore.open(store).ground_truth("complexes")
    except Exception:  # no such table: a real screen, or a simulation without complexes
        return {}
    return dict(zip(table["gene"], table["complex"], strict=True))  # whole: legends wrap


def plate_heatmaps(features: Path) -> dict[str, Any]:
    """Tiles per well on each plate (the first :data:`MAX_PLATES`), and per position the size of
    the controls' offset from their plate's control mean, averaged over plates (a per-position
    batch signal: what ``transform.position_correction`` removes)."""
    import anndata as ad

    a = ad.read_h5ad(features, backed="r")
    obs, rows, cols = _positions(a.obs)
    if obs is None:
        a.file.close()
        return {"note": "well names are not plate positions (A01 ...): no plate heatmaps", "plates": []}
    plates = list(dict.fromkeys(obs["plate"]))
    figures = []
    for plate in plates[:MAX_PLATES]:
        counts = obs[obs["plate"] == plate].groupby(["row", "col"]).size()
        figures.append(heatmap(_grid(counts, rows, cols), rows, [str(c) for c in cols], f"{plate}: tiles per well"))
    ctrl = obs["is_control"].to_numpy(bool)
    x = np.asarray(a.X[np.flatnonzero(ctrl)], np.float64)
    a.file.close()
    c = obs[ctrl].reset_index(drop=True)
    for _, idx in c.groupby("plate").indices.items():
        x[idx] -= x[idx].mean(axis=0)
    offset = pd.DataFrame(x).groupby([c["row"], c["col"]]).mean()
    signal = pd.Series(np.linalg.norm(offset.to_numpy(), axis=1), index=offset.index)
    figures.append(heatmap(_grid(signal, rows, cols), rows, [str(c) for c in cols],
                           "controls' offset from their plate, per position (norm, mean over plates)"))
    note = f"{len(plates) - MAX_PLATES} more plate(s) not drawn" if len(plates) > MAX_PLATES else ""
    return {"note": note, "plates": figures}


def control_intensity(store: Path, seed: int = 0) -> dict[str, Any]:
    """Per plate (the first :data:`MAX_PLATES`), the mean pixel intensity of its control wells
    relative to the plate's controls (1 = the plate's mean; each channel scaled by its own mean
    so that every channel counts alike), from at most :data:`TILES_PER_WELL` seeded tiles per well:
    illumination, edge and dispensing artefacts show before any model sees them."""
    from cellica.store.tilestore import TileStore

    ts = TileStore.open(store)
    controls = ts.metadata.reset_index(drop=True)
    md, rows, cols = _positions(controls[controls["is_control"].to_numpy(bool)])
    if md is None:
        return {"note": "no control wells at plate positions (A01 ...): no intensity heatmaps", "plates": []}
    plates = list(dict.fromkeys(md["plate"]))[:MAX_PLATES]
    md = md[md["plate"].isin(plates)]
    # a seeded sample of each well's tiles (shuffled, then the first few per well)
    order = np.random.default_rng(seed).permutation(len(md))
    picked = md.iloc[order].groupby(["plate", "row", "col"], sort=False).head(TILES_PER_WELL).sort_index()
    tiles = ts.read(picked.index.to_numpy()).astype(np.float64)
    per_channel = tiles.mean(axis=(2, 3))  # tiles x channels
    picked = picked.assign(intensity=(per_channel / np.maximum(per_channel.mean(axis=0), 1e-12)).mean(axis=1))
    figures = []
    for plate, g in picked.groupby("plate", sort=False):
        well = g.groupby(["row", "col"])["intensity"].mean()
        figures.append(heatmap(_grid(well / well.mean(), rows, cols), rows, [str(c) for c in cols],
                               f"{plate}: control intensity (plate mean = 1)"))
    return {"note": f"{TILES_PER_WELL} tiles per control well at most", "plates": figures}


def _positions(obs: pd.DataFrame) -> tuple[pd.DataFrame | None, list[str], list[int]]:
    """``plate``, ``well``, ``is_control`` plus each well's ``row`` and ``col``, and the plate's
    row letters and column numbers; (None, [], []) unless every well is a position (A01 ...)."""
    obs = obs[["plate", "well", "is_control"]].astype({"plate": str, "well": str})
    parsed = obs["well"].str.extract(WELL)
    if obs.empty or parsed.isna().any().any():
        return None, [], []
    obs = obs.assign(row=parsed[0].str.upper(), col=parsed[1].astype(int))
    return (obs, [chr(c) for c in range(ord("A"), ord(obs["row"].max()) + 1)],
            list(range(1, int(obs["col"].max()) + 1)))


def _grid(values: pd.Series, rows: list[str], cols: list[int]) -> np.ndarray:
    grid = np.full((len(rows), len(cols)), np.nan)
    for (r, c), v in values.items():
        grid[rows.index(r), cols.index(int(c))] = v
    return grid


def recall_bars(path: Path, variants: list[str]) -> tuple[list[str], str]:
    """Recall of known pairs per variant, one chart per source, its null in the title; and one
    line naming the sources that have no known pair in the map (no chart of n/a for them)."""
    t = read_parquet(path, "recall table")
    charts, empty = [], []
    for source, g in t.groupby("source", sort=False):
        g = g.set_index("variant").loc[[v for v in variants if v in set(g["variant"])]]
        if g.empty:
            continue
        if not np.isfinite(g["recall"].astype(float)).any():
            empty.append(str(source))
            continue
        title = f"{source}: recall of {int(g['n_pairs'].iloc[0])} known pairs (null {g['null_recall'].iloc[0]:.2f})"
        charts.append(bar_chart(list(g.index), g["recall"].tolist(), title, vmax=max(1e-9, float(g["recall"].max()))))
    note = (f"No chart for {', '.join(empty)}: none of {'its' if len(empty) == 1 else 'their'} known pairs has both "
            "members in the map, so there is nothing to recall." if empty else "")
    return charts, note
