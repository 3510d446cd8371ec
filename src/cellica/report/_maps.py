"""The report's gene-map and plate-layout figures, drawn from the tables of the stages that
computed them: a UMAP of each variant's gene map (coloured by known complex when the
simulation made complexes), each variant's wells coloured by batch, and per-plate heatmaps of the layout
(tiles per well, control offset, control intensity: ``results/qc``, written by ``cellica qc``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from cellica.core.atomic import read_parquet
from cellica.core.logs import get_logger
from cellica.report._svg import bar_chart, heatmap, scatter, set_colour

log = get_logger("report")
MAX_PLATES = 8  # plates drawn (the first, in order); the rest are counted


def map_umaps(maps: dict[str, Path], complexes: dict[str, str] | None = None,
              entity: str = "gene") -> list[dict[str, Any]]:
    """One picture per variant's gene map, from the layout its stage stored (``obsm["X_layout"]``:
    seeded UMAP of the cosine kNN graph, or the first two PCs of a small map), genes coloured by
    their complex (a simulated screen's, from its truth per gene) or all alike; ``entity`` names
    the points (gene, compound, ...)."""
    from cellica.core.adata import read_sealed

    group = complexes or {}
    out = []
    for variant, path in maps.items():
        genes = read_sealed(path)
        if "X_layout" not in genes.obsm:  # too few genes for a picture
            continue
        how = str(genes.uns.get("layout", {}).get("method", "UMAP"))
        xy = np.asarray(genes.obsm["X_layout"])
        points = [(float(x), float(y), group.get(g, entity)) for (x, y), g in zip(xy, genes.obs_names, strict=True)]
        out.append({"variant": variant, "svg": scatter(points, f"{variant}: {entity} map {how}", f"{how} 1", f"{how} 2",
                                                       size=260, radius=_radius(len(points)),
                                                       names=list(map(str, genes.obs_names)))})
    return out


def not_computed_note(maps: dict[str, Path]) -> str:
    """The reason the gene-map stage wrote for maps the data could not make (``uns["not_computed"]``),
    one sentence naming the variants, or empty."""
    from cellica.core.adata import uns_text

    reasons: dict[str, list[str]] = {}
    for variant, path in maps.items():
        reason = uns_text(path, "not_computed")  # the reason alone, not the map
        if reason is not None:
            reasons.setdefault(str(reason), []).append(variant)
    return " ".join(f"Gene maps of {', '.join(vs)}: {r}." for r, vs in reasons.items())


def well_umaps(layouts: pd.DataFrame) -> list[dict[str, Any]]:
    """One picture per variant of its wells in 2-D (``qc/well_layouts.parquet``), coloured by batch:
    how much batch structure each variant leaves."""
    out = []
    total = int(layouts.attrs.get("n_wells", 0)) or None
    for variant, g in layouts.groupby("variant", sort=False):
        how = str(g["method"].iloc[0])
        points = [(float(x), float(y), b) for x, y, b in zip(g["x"], g["y"], g["batch"].astype(str), strict=True)]
        shown = f", {len(g)} of {total})" if total and len(g) < total else ")"
        out.append({"variant": variant, "svg": scatter(points, f"{variant}: wells by batch ({how}{shown}", f"{how} 1",
                                                       f"{how} 2", size=260, radius=_radius(len(points)))})
    return out


def _radius(n: int) -> float:
    """Dots big enough to see in a small map, small enough not to hide each other in a large one."""
    return 3.5 if n < 200 else 2.5 if n < 1000 else 1.8


def _axes(*tables: pd.DataFrame) -> tuple[list[str], list[int]]:
    """A plate's row letters (A to the last used) and column numbers (1 to the last used)."""
    rows = max((str(r) for t in tables for r in t["row"]), default="A")
    cols = max((int(c) for t in tables for c in t["col"]), default=1)
    return [chr(c) for c in range(ord("A"), ord(rows) + 1)], list(range(1, cols + 1))


def _grid(table: pd.DataFrame, value: str, rows: list[str], cols: list[int]) -> np.ndarray:
    grid = np.full((len(rows), len(cols)), np.nan)
    for r, c, v in zip(table["row"], table["col"], table[value], strict=True):
        grid[rows.index(str(r)), cols.index(int(c))] = v
    return grid


def plate_heatmaps(wells: pd.DataFrame, offsets: pd.DataFrame) -> dict[str, Any]:
    """Tiles per well on each plate (the first :data:`MAX_PLATES`) and, per position, the
    controls' offset from their plate (``qc/plate_wells`` and ``qc/position_offsets``)."""
    if wells.empty:
        return {"note": f"{wells.attrs.get('note', 'no wells')}: no plate heatmaps", "plates": []}
    rows, cols = _axes(wells, offsets)
    labels = [str(c) for c in cols]
    plates = list(dict.fromkeys(wells["plate"]))
    figures = [heatmap(_grid(wells[wells["plate"] == p], "n_tiles", rows, cols), rows, labels, f"{p}: tiles per well")
               for p in plates[:MAX_PLATES]]
    if not offsets.empty:
        figures.append(heatmap(_grid(offsets, "offset", rows, cols), rows, labels,
                               "controls' offset from their plate, per position (norm, mean over plates)"))
    note = f"{len(plates) - MAX_PLATES} more plate(s) not drawn" if len(plates) > MAX_PLATES else ""
    return {"note": note, "plates": figures}


def control_intensity(table: pd.DataFrame) -> dict[str, Any]:
    """Per plate (the first :data:`MAX_PLATES`), its control wells' intensity relative to the
    plate's mean (``qc/control_intensity.parquet``)."""
    if table.empty:
        return {"note": f"{table.attrs.get('note', 'no control tiles')}: no intensity heatmaps", "plates": []}
    rows, cols = _axes(table)
    figures = [heatmap(_grid(g, "intensity", rows, cols), rows, [str(c) for c in cols],
                       f"{plate}: control intensity (plate mean = 1)")
               for plate, g in list(table.groupby("plate", sort=False))[:MAX_PLATES]]
    return {"note": table.attrs.get("note", ""), "plates": figures}


def recall_bars(path: Path, variants: list[str]) -> tuple[list[str], str]:
    """Recall of known pairs per variant, one chart per source on one shared axis, each bar with
    its 95% interval over pairs and the source's null recall as a dashed line (so a source of 4
    pairs shows its wide interval beside one of 400); and one line naming the sources that have
    no known pair in the map (no chart of n/a for them)."""
    t = read_parquet(path, "recall table")
    notes = t["note"].dropna().unique() if "note" in t else []
    if len(notes):  # the stage could not compute it, and said why
        return [], f"Recall of known pairs {notes[0]}."
    values = t[[c for c in ("recall", "ci_low", "ci_high", "null_recall") if c in t]].to_numpy(float)
    top = float(np.nanmax(values)) if np.isfinite(values).any() else 1.0
    charts, empty = [], []
    for source, g in t.groupby("source", sort=False):
        g = g.set_index("variant").loc[[v for v in variants if v in set(g["variant"])]]
        if g.empty:
            continue
        if not np.isfinite(g["recall"].astype(float)).any():
            empty.append(str(source))
            continue
        null = float(g["null_recall"].median())
        title = f"{source}: recall of {int(g['n_pairs'].iloc[0])} known pairs, 95% interval (null {null:.2f})"
        intervals = list(zip(g.get("ci_low", g["recall"] * np.nan).astype(float),
                             g.get("ci_high", g["recall"] * np.nan).astype(float), strict=True))
        charts.append(bar_chart(list(g.index), g["recall"].astype(float).tolist(), title, vmax=max(1e-9, top),
                                colors=[set_colour(v) for v in g.index], intervals=intervals, reference=null,
                                reference_label="null"))
    note = (f"No chart for {', '.join(empty)}: none of {'its' if len(empty) == 1 else 'their'} known pairs has both "
            "members in the map, so there is nothing to recall." if empty else "")
    return charts, note


def borrowed_controls_note(maps: dict[str, Path]) -> str:
    """One line when the maps normalised plates on their batch's control wells (plates without
    controls of their own, as the gene-map stage recorded in each map's provenance); else ''."""
    from cellica.core.adata import uns_text

    borrowed: dict[str, str] = {}
    for path in maps.values():
        borrowed.update(uns_text(path, "provenance/map/controls_of_batch") or {})
    if not borrowed:
        return ""
    shown = ", ".join(f"{p} ({b})" for p, b in sorted(borrowed.items())[:8])
    more = f" and {len(borrowed) - 8} more" if len(borrowed) > 8 else ""
    return (f"{len(borrowed)} plate(s) have too few control wells of their own and were normalised on their batch's "
            f"control wells (plate (batch)): {shown}{more}. Plate effects within a batch stay in their maps.")
