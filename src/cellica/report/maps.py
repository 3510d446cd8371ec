"""The report's gene-map and plate-layout figures: a UMAP of each variant's gene map (coloured
by known complex when the store records one) and per-plate heatmaps of the layout."""

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


def map_umaps(maps: dict[str, Path], store: Path | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """One UMAP per variant's gene map (scanpy: cosine kNN graph, seeded), genes coloured by
    their complex (the simulated store's ``complexes`` table) or all alike."""
    import anndata as ad
    import scanpy as sc

    group = _complexes(store)
    out = []
    for variant, path in maps.items():
        genes = ad.read_h5ad(path)
        if genes.n_obs < 4:
            continue
        sc.pp.neighbors(genes, n_neighbors=min(15, genes.n_obs - 1), use_rep="X", metric="cosine", random_state=seed)
        sc.tl.umap(genes, random_state=seed)
        xy = genes.obsm["X_umap"]
        points = [(float(x), float(y), group.get(g, "gene")) for (x, y), g in zip(xy, genes.obs_names, strict=True)]
        out.append({"variant": variant, "svg": scatter(points, f"{variant}: gene map UMAP", "UMAP 1", "UMAP 2",
                                                       size=260)})
    return out


def _complexes(store: Path | None) -> dict[str, str]:
    if store is None:
        return {}
    from cellica.store.tilestore import TileStore

    try:
        table = TileStore.open(store).ground_truth("complexes")
    except Exception:  # no such table: a real screen, or a simulation without complexes
        return {}
    return dict(zip(table["gene"], table["complex"].str.slice(0, 40), strict=True))


def plate_heatmaps(features: Path) -> dict[str, Any]:
    """Tiles per well on each plate (the first :data:`MAX_PLATES`), and per position the size of
    the controls' offset from their plate's control mean, averaged over plates (a per-position
    batch signal: what ``transform.position_correction`` removes)."""
    import anndata as ad

    a = ad.read_h5ad(features, backed="r")
    obs = a.obs[["plate", "well", "is_control"]].astype({"plate": str, "well": str})
    parsed = obs["well"].str.extract(WELL)
    if parsed.isna().any().any():
        a.file.close()
        return {"note": "well names are not plate positions (A01 ...): no plate heatmaps", "plates": []}
    obs = obs.assign(row=parsed[0].str.upper(), col=parsed[1].astype(int))
    rows = [chr(c) for c in range(ord("A"), ord(obs["row"].max()) + 1)]
    cols = list(range(1, int(obs["col"].max()) + 1))
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


def _grid(values: pd.Series, rows: list[str], cols: list[int]) -> np.ndarray:
    grid = np.full((len(rows), len(cols)), np.nan)
    for (r, c), v in values.items():
        grid[rows.index(r), cols.index(int(c))] = v
    return grid


def recall_bars(path: Path, variants: list[str]) -> list[str]:
    """Recall of known pairs per variant, one chart per source, its null in the title."""
    t = read_parquet(path, "recall table")
    charts = []
    for source, g in t.groupby("source", sort=False):
        g = g.set_index("variant").loc[[v for v in variants if v in set(g["variant"])]]
        if g.empty:
            continue
        title = f"{source}: recall of {int(g['n_pairs'].iloc[0])} known pairs (null {g['null_recall'].iloc[0]:.2f})"
        charts.append(bar_chart(list(g.index), g["recall"].tolist(), title, vmax=max(1e-9, float(g["recall"].max()))))
    return charts
