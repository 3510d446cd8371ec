"""Well-position correction: plates share a layout, and edge wells, dispensing order or
evaporation give each position its own offset. The offset of a position is the mean, over the
fitting controls at that position on every plate, of their profile minus their plate's fitting-
control mean (so plate offsets are not mistaken for position offsets); every sample at that
position then loses it. Positions without a fitting control keep their profiles (counted).

The diagnostic is the one JUMP reports: mAP of retrieving a control well's same-position wells
on other plates among the other positions' control wells, before and after: near the share of
same-position wells when position carries no signal, towards 1 when controls cluster by position.
"""

from __future__ import annotations

import os

import anndata as ad
import numpy as np
import pandas as pd

from cellica.core.adata import aggregate_wells, make_adata
from cellica.core.contracts import FIT_COL
from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.core.textables import read_text_table
from cellica.transform._rows import row_blocks
from cellica.transform.steps import Rows, Step, controls_mask

log = get_logger("transforms")


def read_positions(path: str | os.PathLike) -> pd.DataFrame:
    """A position table: columns ``well`` and ``position``, optionally ``plate`` (per-plate layouts)."""
    table = read_text_table(path, ("well", "position"), "position table")
    keys = [c for c in ("plate", "well") if c in table.columns]
    if table.duplicated(keys).any():
        raise CellicaError(f"{path}: position table lists {dict(table[table.duplicated(keys)].iloc[0][keys])} twice")
    return table


def well_positions(obs: pd.DataFrame, table: pd.DataFrame | None = None, source: str = "features") -> np.ndarray:
    """Each sample's well position: its well name, or its (plate, well)'s row of ``table``; a well
    the table does not cover is an error naming it."""
    if table is None:
        return obs["well"].astype(str).to_numpy()
    keys = [c for c in ("plate", "well") if c in table.columns]
    index = pd.MultiIndex.from_frame(table[keys].astype(str))
    wanted = pd.MultiIndex.from_frame(obs[keys].astype(str))
    at = index.get_indexer(wanted)
    if (at < 0).any():
        first = dict(zip(keys, wanted[int(np.argmax(at < 0))], strict=True))
        raise CellicaError(f"{source}: the position table does not cover {first} "
                           f"({int((at < 0).sum())} sample(s) without a position)")
    return table["position"].astype(str).to_numpy()[at]


def position_offsets(x: np.ndarray, obs: pd.DataFrame, positions: np.ndarray, fit: np.ndarray) -> tuple[dict, int]:
    """Per position, the mean over the fitting controls (``fit``) there of their profile minus
    their plate's fitting-control mean; and how many positions have no fitting control."""
    rows = np.flatnonzero(fit)
    if not len(rows):
        raise CellicaError("position correction: no fitting controls")
    resid = np.asarray(x[rows], np.float64)
    plates = obs["plate"].astype(str).to_numpy()[rows]
    for plate in np.unique(plates):
        on = plates == plate
        resid[on] -= resid[on].mean(axis=0)
    pos = positions[rows]
    offsets = {q: resid[pos == q].mean(axis=0) for q in np.unique(pos)}
    return offsets, len(set(positions) - set(offsets))


def same_position_map(adata, positions: np.ndarray, seed: int = 0) -> float:
    """The mAP of same-position control wells on other plates (cosine, after centring each plate's
    control wells; NaN without such pairs)."""
    from copairs.map import average_precision

    ctrl = adata[adata.obs["is_control"].to_numpy(bool)]
    ctrl = ctrl.copy()
    ctrl.obs["position"] = positions[adata.obs["is_control"].to_numpy(bool)]
    wells = aggregate_wells(ctrl) if "tile_id" in ctrl.obs else ctrl
    meta = wells.obs[["plate", "position"]].astype(str).reset_index(drop=True)
    if not meta.duplicated("position", keep=False).any() or meta["position"].nunique() < 2:
        return float("nan")
    x = np.asarray(wells.X, np.float64)
    for rows in meta.groupby("plate").indices.values():  # plate offsets would swamp the cosines
        x[rows] -= x[rows].mean(axis=0)
    from cellica.core.threads import pool_size

    with pool_size():
        ap = average_precision(meta, x, pos_sameby=["position"], pos_diffby=["plate"], neg_sameby=[],
                               neg_diffby=["position"], progress_bar=False)
    return float(ap["average_precision"].mean())


class PositionCorrection(Step):
    """Well-position correction (the module's text): the offsets come from the fitting controls
    of the data being transformed, so a new screen is corrected by its own controls. The
    corrected rows are rounded to float32, as a features file stores them."""

    name = "correct_positions"
    uses = ("position_correction", "position_table")
    uns_key = "position_correction"

    def __init__(self, table: str | pd.DataFrame | None = None):
        self.table = table

    @classmethod
    def from_params(cls, p, arg=None):
        """The step when ``position_correction`` is on (None: off)."""
        return cls(p.position_table) if p.position_correction else None

    def context(self, rows):
        """Each well position's offset, estimated on this data's fitting controls."""
        table = read_positions(self.table) if isinstance(self.table, str | os.PathLike) else self.table
        positions = well_positions(rows.obs, table, rows.source)
        fit = controls_mask(rows.obs)
        offsets, _ = position_offsets(rows.rows(fit), rows.obs[fit], positions[fit], np.ones(int(fit.sum()), bool))
        names = pd.Index(sorted(set(positions)))
        uncovered = len(names.difference(list(offsets)))
        shift = np.stack([offsets.get(q, np.zeros(rows.n_features)) for q in names])
        ctx = {"table": table, "names": names, "shift": shift}
        # The step's input for the diagnostic: the stored float32 matrix itself when it comes first
        # (no float64 copy of a genome-scale matrix), else the rows through the steps before it.
        before = np.asarray(rows.x, np.float32) if not rows.steps else rows.all().astype(np.float32)
        after = np.empty_like(before)
        for sl in row_blocks(len(after)):
            after[sl] = self.apply(before[sl].astype(np.float64), rows.obs.iloc[sl], ctx)
        obs = rows.obs.copy()
        obs.index = obs.index.astype(str)
        ctx["report"] = {"positions": len(names), "positions_without_controls": uncovered,
                         "same_position_map_before": same_position_map(ad.AnnData(before, obs=obs), positions),
                         "same_position_map_after": same_position_map(ad.AnnData(after, obs=obs), positions)}
        log.info("well-position correction: %d positions (%d without fitting controls, left as they were); "
                 "same-position control mAP %.3f -> %.3f", len(names), uncovered,
                 ctx["report"]["same_position_map_before"], ctx["report"]["same_position_map_after"])
        return ctx

    def apply(self, x, obs, ctx):
        """Subtract each row's position offset."""
        at = ctx["names"].get_indexer(well_positions(obs, ctx["table"]))
        return np.asarray(x - ctx["shift"][at], np.float32).astype(np.float64)

    def report(self, ctx):
        """The positions corrected and the same-position control mAP before and after."""
        return ctx["report"]


def correct_positions(adata, fit: np.ndarray, table: pd.DataFrame | None = None):
    """The features with each position's offset (estimated on the fitting controls ``fit``)
    removed (:class:`PositionCorrection`), and the diagnostics in ``uns['position_correction']``:
    positions, positions left as they were, same-position control mAP before and after."""
    source = str(adata.uns.get("provenance", {}).get("store", "features"))
    obs = adata.obs.copy()
    obs[FIT_COL] = np.asarray(fit, bool)
    step = PositionCorrection(table)
    rows = Rows(adata.X, obs, source, list(map(str, adata.var_names)))
    ctx = step.context(rows)
    x = rows.then(step, ctx).all().astype(np.float32)
    out = make_adata(x, adata.obs, list(adata.var_names), dict(adata.uns), source)
    out.uns["position_correction"] = step.report(ctx)
    return out
