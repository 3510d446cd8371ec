"""Tiles -> wells -> guides -> genes: one profile per gene, per variant.

Wells are the unit of normalisation: each plate's control wells give the mean (and
standard deviation) that ``normalize`` removes, so plate offsets do not reach the map. The
controls then leave: a map holds perturbed genes only.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cellica.core.adata import WELL_KEYS, aggregate_wells
from cellica.core.errors import CellicaError, NotComputable
from cellica.core.logs import get_logger
from cellica.core.scales import constant, moments
from cellica.maps.params import MapParams

log = get_logger("maps")


def group_profiles(x: np.ndarray, obs: pd.DataFrame, keys: list[str], how: str) -> tuple[np.ndarray, pd.DataFrame]:
    """Combine the rows of ``x`` that share ``keys`` (mean or median, in float64).

    Returns the combined matrix and one ``obs`` row per group: the keys, the columns constant
    within every group, and ``n_rows`` (rows combined).
    """
    codes, uniques = pd.MultiIndex.from_frame(obs[keys].astype(str)).factorize()
    frame = pd.DataFrame(np.asarray(x, np.float64))
    grouped = frame.groupby(codes, sort=False)
    out = (grouped.mean() if how == "mean" else grouped.median()).sort_index().to_numpy()
    counts = np.bincount(codes, minlength=len(uniques))
    constant = [c for c in obs.columns if c not in keys
                and (obs.groupby(codes, observed=True)[c].nunique(dropna=False) <= 1).all()]
    group_obs = obs[keys + constant].groupby(codes, observed=True).first().sort_index()
    group_obs["n_rows"] = counts
    return out, group_obs.reset_index(drop=True)


def normalize_plates(x: np.ndarray, obs: pd.DataFrame, how: str | None,
                     borrowed: dict[str, str] | None = None) -> np.ndarray:
    """Well profiles minus their plate's control-well mean (``center``), also divided by the
    control-well standard deviation (``center_scale``).

    A plate with too few control wells of its own (none; one under ``center_scale``) is
    normalised on the control wells of its whole batch, as screens whose controls sit on plates
    of their own need: each such plate is logged and recorded in ``borrowed`` (plate -> batch).
    A batch without enough control wells either cannot be normalised: :class:`NotComputable`
    naming the plate and its batch (the map is then written as not computed).

    Under ``center_scale`` a feature whose reference controls do not vary (judged on that
    feature's own magnitude, :func:`cellica.core.scales.constant`, never against another
    feature) has no unit to express it in: it is zeroed on that plate (it adds nothing to the
    map's similarities), and the log says how many such (plate, feature) pairs there were."""
    if how is None:
        return x
    x = np.array(x, np.float64)
    ctrl = obs["is_control"].to_numpy(bool)
    need = 2 if how == "center_scale" else 1
    batches = obs["batch"].astype(str).to_numpy() if "batch" in obs else None
    references = []
    for plate, rows in obs.groupby("plate", sort=False).indices.items():
        ref = rows[ctrl[rows]]
        if len(ref) < need:
            batch = None if batches is None else batches[rows[0]]
            pool = np.flatnonzero(ctrl & (batches == batch)) if batch is not None else ref
            if len(pool) < need:
                where = f" and its batch {batch!r} {len(pool)}" if batch is not None else ""
                raise NotComputable(f"maps.normalize={how}: plate {plate!r} has {len(ref)} control well(s){where}, "
                                    f"needs {need}")
            if borrowed is not None:
                borrowed[str(plate)] = str(batch)
            ref = pool
        references.append((rows, x[ref]))  # the references before any plate is normalised
    if borrowed:
        log.warning("maps.normalize=%s: %d plate(s) with too few control wells of their own normalised on their "
                    "batch's control wells: %s", how, len(borrowed),
                    ", ".join(f"{p} ({b})" for p, b in list(borrowed.items())[:10]))
    zeroed = 0
    for rows, ref in references:
        mean, sd = moments(ref, ddof=1 if how == "center_scale" else 0)
        x[rows] -= mean
        if how == "center_scale":
            const = constant(mean, sd)
            x[rows] /= np.where(const, 1.0, sd)
            x[np.ix_(rows, np.flatnonzero(const))] = 0.0
            zeroed += int(const.sum())
    if zeroed:
        log.warning("maps.normalize=center_scale: %d (plate, feature) pair(s) do not vary on the plate's control "
                    "wells and were zeroed there", zeroed)
    return x


def guide_profiles(adata, p: MapParams | None = None):
    """One profile per guide (or per well without a guide column), controls removed.

    Parameters
    ----------
    adata
        A features file's AnnData (tiles or wells) with the contract's metadata.
    p
        Aggregation and normalisation settings.

    Returns
    -------
    AnnData
        Guides x features; ``obs``: ``perturbation``, ``guide``, ``n_wells``, ``n_tiles``.
    """
    p = p or MapParams()
    if p.aggregate == "mean":  # block by block, without a float64 copy of the whole matrix
        means = aggregate_wells(adata)
        x, wells = (
            np.asarray(means.X, np.float64),
            means.obs.reset_index(drop=True).rename(columns={"n_tiles": "n_rows"}),
        )
    else:
        obs = adata.obs.reset_index(drop=True)
        x, wells = group_profiles(adata.X, obs, [*WELL_KEYS, "perturbation"], p.aggregate)
    borrowed: dict[str, str] = {}
    x = normalize_plates(x, wells, p.normalize, borrowed)
    keep = ~wells["is_control"].to_numpy(bool)
    x, wells = x[keep], wells[keep].reset_index(drop=True)
    if not len(wells):
        raise CellicaError("gene map: no perturbed (non-control) wells")
    wells["n_tiles"] = wells["n_rows"]
    if p.guide_key in wells.columns:
        guide = wells[p.guide_key].astype(str)
    else:
        log.info("gene map: no %r column: each well is a replicate of its gene", p.guide_key)
        guide = wells["batch"] + "/" + wells["plate"] + "/" + wells["well"]
    wells = wells.assign(guide=guide.to_numpy())
    gx, guides = group_profiles(x, wells[["perturbation", "guide", "n_tiles"]], ["perturbation", "guide"], p.aggregate)
    tiles = wells.groupby(["perturbation", "guide"], sort=False)["n_tiles"].sum().to_numpy()
    guides = guides[["perturbation", "guide"]].assign(n_wells=guides["n_rows"], n_tiles=tiles)
    return _map_adata(gx, guides, adata, "guide", p, borrowed)


def gene_profiles(guides, p: MapParams | None = None, drop: list[str] | None = None):
    """One profile per gene from its guides' profiles (leaving out the genes in ``drop``)."""
    p = p or MapParams()
    obs = guides.obs.reset_index(drop=True)
    keep = ~obs["perturbation"].isin(drop or []).to_numpy()
    obs = obs[keep].reset_index(drop=True)
    x, genes = group_profiles(np.asarray(guides.X)[keep], obs[["perturbation"]], ["perturbation"], p.aggregate)
    sums = obs.groupby("perturbation", sort=False)[["n_wells", "n_tiles"]].sum().to_numpy()
    genes = genes.assign(n_guides=genes["n_rows"], n_wells=sums[:, 0], n_tiles=sums[:, 1])
    borrowed = dict(guides.uns.get("provenance", {}).get("map", {}).get("controls_of_batch", {}))
    return _map_adata(x, genes[["perturbation", "n_guides", "n_wells", "n_tiles"]], guides, "gene", p, borrowed)


def _map_adata(x: np.ndarray, obs: pd.DataFrame, source, level: str, p: MapParams,
               borrowed: dict[str, str] | None = None):
    """A map AnnData: obs indexed by the profile's name; provenance says how it was made (and
    which plates were normalised on their batch's controls, ``controls_of_batch``)."""
    import anndata as ad

    obs = obs.copy()
    obs.index = pd.Index((obs["guide"] if level == "guide" else obs["perturbation"]).to_numpy(), dtype=str)
    made = {"level": level, "aggregate": p.aggregate, "normalize": p.normalize}
    if borrowed:
        made["controls_of_batch"] = dict(borrowed)
    uns = {"provenance": {**dict(source.uns.get("provenance", {})), "map": made}}
    if "transform" in source.uns:  # which variant the map is of
        uns["transform"] = source.uns["transform"]
    var = pd.DataFrame(index=pd.Index(source.var_names, dtype=str))
    return ad.AnnData(X=np.asarray(x, np.float32), obs=obs, var=var, uns=uns)


