"""Do a gene's guides agree? Mean pairwise correlation of its guide profiles against random
guide sets, and copairs mAP of retrieving its other guides among all guides."""

from __future__ import annotations

import tempfile

import numpy as np
import pandas as pd

from cellica.core.logs import get_logger
from cellica.maps.params import MapParams

log = get_logger("maps")

# copairs enumerates every pair of guides of different genes (8 bytes of indices and 4 of
# similarity each): above this many guides (~18 million pairs, ~0.5 GB) the guide mAP is skipped.
MAX_MAP_GUIDES = 6000
COLUMN_TYPES = {"perturbation": str, "n_guides": int, "guide_corr": float, "corr_p_value": float, "corr_fdr": float,
                "guide_map": float, "map_p_value": float, "map_fdr": float, "consistent": bool}
COLUMNS = list(COLUMN_TYPES)


def mean_pairwise_corr(x: np.ndarray) -> float:
    """Mean Pearson correlation over the distinct pairs of rows of ``x`` (NaN for < 2 rows)."""
    if len(x) < 2:
        return float("nan")
    c = np.corrcoef(x)
    return float(c[np.triu_indices(len(x), 1)].mean())


def bh_fdr(p: np.ndarray) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values (NaN stays NaN)."""
    p = np.asarray(p, float)
    out = np.full(p.shape, np.nan)
    ok = ~np.isnan(p)
    if not ok.any():
        return out
    q = p[ok]
    order = np.argsort(q)
    ranked = q[order] * len(q) / np.arange(1, len(q) + 1)
    adjusted = np.minimum.accumulate(ranked[::-1])[::-1]
    res = np.empty_like(q)
    res[order] = np.minimum(adjusted, 1.0)
    out[ok] = res
    return out


def _null_corr(x: np.ndarray, genes: np.ndarray, k: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """The statistic on ``n`` random sets of ``k`` guides, each from a different gene."""
    by_gene = pd.Series(np.arange(len(genes))).groupby(genes).apply(list).tolist()
    out = np.empty(n)
    for i in range(n):
        chosen = rng.choice(len(by_gene), size=k, replace=False)
        out[i] = mean_pairwise_corr(x[[by_gene[g][rng.integers(len(by_gene[g]))] for g in chosen]])
    return out


def guide_correlation(guides, p: MapParams) -> pd.DataFrame:
    """Per gene: mean pairwise correlation of its guides, permutation p-value and FDR."""
    x = np.asarray(guides.X, np.float64)
    genes = guides.obs["perturbation"].astype(str).to_numpy()
    rng = np.random.default_rng(p.seed)
    rows, nulls = [], {}
    n_genes = len(np.unique(genes))
    for gene, idx in pd.Series(np.arange(len(genes))).groupby(genes, sort=False).indices.items():
        k = len(idx)
        stat = mean_pairwise_corr(x[idx])
        pval = float("nan")
        if k >= 2 and n_genes >= k:
            if k not in nulls:
                nulls[k] = _null_corr(x, genes, k, p.consistency_permutations, rng)
            pval = (1 + np.sum(nulls[k] >= stat)) / (1 + len(nulls[k]))
        rows.append({"perturbation": gene, "n_guides": k, "guide_corr": stat, "corr_p_value": pval})
    table = pd.DataFrame(rows)
    table["corr_fdr"] = bh_fdr(table["corr_p_value"].to_numpy())
    return table


def guide_map(guides, p: MapParams) -> pd.DataFrame:
    """Per gene: copairs mAP of retrieving its other guides among every guide (cosine), with
    copairs' permutation p-value and FDR."""
    from copairs.map import average_precision, mean_average_precision

    obs = guides.obs.reset_index(drop=True)
    meta = pd.DataFrame({"perturbation": obs["perturbation"].astype(str)})
    if (meta["perturbation"].value_counts() >= 2).sum() == 0 or meta["perturbation"].nunique() < 2:
        return pd.DataFrame(columns=["perturbation", "guide_map", "map_p_value", "map_fdr"])
    if len(meta) > MAX_MAP_GUIDES:
        log.info("guide consistency: %d guides: copairs would hold ~%.0e guide pairs, so the guide mAP is left out "
                 "(above %d guides) and the correlation test alone decides", len(meta), len(meta) ** 2 / 2,
                 MAX_MAP_GUIDES)
        return pd.DataFrame(columns=["perturbation", "guide_map", "map_p_value", "map_fdr"])
    from cellica.core.threads import pool_size

    # copairs caches its nulls under ~/.copairs unless told otherwise: a throw-away folder.
    with pool_size(), tempfile.TemporaryDirectory(prefix="cellica-copairs-") as cache:
        ap = average_precision(meta, np.asarray(guides.X, np.float64), pos_sameby=["perturbation"], pos_diffby=[],
                               neg_sameby=[], neg_diffby=["perturbation"], progress_bar=False)
        m = mean_average_precision(ap, sameby=["perturbation"], null_size=p.consistency_permutations,
                                   threshold=p.consistency_fdr, seed=p.seed, progress_bar=False, cache_dir=cache)
    return m.rename(columns={"mean_average_precision": "guide_map", "p_value": "map_p_value",
                             "corrected_p_value": "map_fdr"})[["perturbation", "guide_map", "map_p_value",
                                                              "map_fdr"]]


def guide_consistency(guides, p: MapParams | None = None) -> pd.DataFrame:
    """Guide agreement per gene; ``consistent`` is False when neither the correlation nor the
    mAP is significant at ``p.consistency_fdr`` (NA for genes with a single guide).

    Parameters
    ----------
    guides
        Guide-level map (:func:`cellica.maps._aggregate.guide_profiles`).
    p
        Permutations, FDR threshold and seed.

    Returns
    -------
    pandas.DataFrame
        One row per gene, columns :data:`COLUMNS`.
    """
    p = p or MapParams()
    table = guide_correlation(guides, p).merge(guide_map(guides, p), on="perturbation", how="left")
    # numbers even when no gene has two guides (an empty merge leaves object columns of NaN,
    # which the map's .h5ad cannot store)
    for col in ("guide_corr", "corr_p_value", "corr_fdr", "guide_map", "map_p_value", "map_fdr"):
        table[col] = pd.to_numeric(table[col], errors="coerce").astype(float)
    significant = (table["corr_fdr"] <= p.consistency_fdr) | (table["map_fdr"] <= p.consistency_fdr)
    table["consistent"] = pd.array(np.where(table["n_guides"] >= 2, significant, pd.NA), dtype="boolean")
    n_bad = int((table["consistent"] == False).sum())  # noqa: E712 (a nullable column)
    log.info("guide consistency: %d of %d genes with >= 2 guides do not agree (FDR > %g)", n_bad,
             int((table["n_guides"] >= 2).sum()), p.consistency_fdr)
    return table[COLUMNS]
