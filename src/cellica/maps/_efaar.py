"""Gene maps and their recall in EFAAR_benchmarking's layout, so a map made here can be scored
with their code unchanged and their numbers read beside ours (docs/maps.md).

EFAAR's map is a ``Bunch(features=DataFrame, metadata=DataFrame)``: one row per perturbation,
the features' columns, and the perturbation's name in a metadata column
(``known_relationship_benchmark(map, pert_col="perturbation")``). Their recall is not
cellica's (:mod:`cellica.maps.recall`). Their null is every pair of the map's perturbations,
not a sample of random pairs, and a known pair counts as recalled when its cosine similarity
ranks at or below ``left`` or at or above ``right`` of that null. The ranks are ``searchsorted``
left and right, as a fraction, for the pairs ``(left, right)`` of ``RECALL_PERC_THRS``. That
recall is computed here exactly, with the null counted block by block, so a genome-wide map
never holds the genes x genes matrix.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cellica.core.logs import get_logger
from cellica.maps.recall import ALL, check_gene_names, known_pair_index, unit_rows

log = get_logger("maps")

# efaar_benchmarking.constants.RECALL_PERC_THRS (written here: cellica never imports their code).
THRESHOLDS = ((0.05, 0.95), (0.1, 0.9))
PERT_COL = "perturbation"
ROW_BLOCK = 512  # rows of the similarity matrix at a time: 512 x genes float64 (80 MB at 20,000 genes)


def map_tables(adata) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A gene map (genes as ``obs_names``) as EFAAR's ``features`` and ``metadata`` tables.

    Returns
    -------
    features : pandas.DataFrame
        One row per gene, one column per feature (named as the map's ``var_names``).
    metadata : pandas.DataFrame
        The same rows: ``perturbation`` (the gene) first, then the map's other ``obs`` columns.
    """
    genes = check_gene_names(adata.obs_names, "gene map")
    features = pd.DataFrame(np.asarray(adata.X), columns=[str(v) for v in adata.var_names])
    metadata = adata.obs.drop(columns=[PERT_COL], errors="ignore").reset_index(drop=True)
    metadata.insert(0, PERT_COL, genes)
    return features, metadata


def recall_columns(thresholds=THRESHOLDS) -> list[str]:
    """EFAAR's recall table's columns: ``source``, the two sizes, ``recall_{left}_{right}``."""
    return ["source", "null_distribution_size", "query_distribution_size",
            *[f"recall_{min(t)}_{max(t)}" for t in thresholds]]


def efaar_recall(adata, pairs: pd.DataFrame, thresholds=THRESHOLDS) -> pd.DataFrame:
    """EFAAR's ``known_relationship_benchmark`` of one map: a row per source with a known pair
    in the map (sources without one are left out, as theirs are).

    Parameters
    ----------
    adata
        The gene map (genes as ``obs_names``).
    pairs
        Known pairs (:data:`cellica.maps.annotations.PAIR_COLUMNS`, unordered, ``gene_a < gene_b``).
    thresholds
        ``(left, right)`` pairs of null percentage ranks.
    """
    genes = check_gene_names(adata.obs_names, "gene map")
    unit = unit_rows(np.asarray(adata.X), genes, "gene map")
    known = pairs[pairs["gene_a"].isin(genes) & pairs["gene_b"].isin(genes)]
    index = {s: ij for s, ij in known_pair_index(known, genes).items() if s != ALL and len(ij[0])}
    qi = np.concatenate([i for i, _ in index.values()]) if index else np.zeros(0, int)
    qj = np.concatenate([j for _, j in index.values()]) if index else np.zeros(0, int)
    n = len(genes)
    blocks = range(0, n, ROW_BLOCK)
    # Two passes over the same blocks: the queries' similarities (entries of the very matrix the
    # null comes from, as EFAAR reads theirs), then their ranks among the whole null.
    query = np.empty(len(qi))
    for r0 in blocks:
        mine = (qi >= r0) & (qi < r0 + ROW_BLOCK)
        if mine.any():
            query[mine] = (unit[r0:r0 + ROW_BLOCK] @ unit.T)[qi[mine] - r0, qj[mine]]
    below, at_or_below = np.zeros(len(qi), np.int64), np.zeros(len(qi), np.int64)
    for r0 in blocks:
        sims = unit[r0:r0 + ROW_BLOCK] @ unit.T
        upper = np.arange(r0, min(r0 + ROW_BLOCK, n))[:, None] < np.arange(n)[None, :]
        null = np.sort(sims[upper])  # this block's part of the upper triangle
        below += np.searchsorted(null, query, side="left")
        at_or_below += np.searchsorted(null, query, side="right")
    size = n * (n - 1) // 2
    rows_out, start = [], 0
    for source, (i, _) in index.items():
        part = slice(start, start + len(i))
        start += len(i)
        row = {"source": source, "null_distribution_size": size, "query_distribution_size": len(i)}
        for t in thresholds:
            lo, hi = min(t), max(t)
            hit = (at_or_below[part] / size <= lo) | (below[part] / size >= hi)
            row[f"recall_{lo}_{hi}"] = float(hit.sum() / len(i))
        rows_out.append(row)
    return pd.DataFrame(rows_out, columns=recall_columns(thresholds))
