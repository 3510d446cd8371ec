"""Recall of known gene-gene relationships by a gene map (EFAAR's benchmark, written here).

A known pair is recalled when the cosine similarity of its two genes' profiles lies in either
tail of the similarities of random gene pairs (below the ``p``-th or above the ``100 - p``-th
percentile): a map with no biology recalls ``2p`` % of them. Similarities are computed only for
the known pairs and a sample of random pairs, never the whole genes x genes matrix, so a
genome-wide map costs what its pair lists cost.

Uncertainty: genes are resampled with replacement (the same resamples for every variant, so
differences between variants are paired); a pair then counts ``w_a * w_b`` times, where ``w``
is how often each gene was drawn. The null's thresholds are held fixed (estimated on
``null_pairs`` random pairs, their own sampling error is far smaller than the known pairs').
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.core.names import check_case_collisions
from cellica.maps.params import MapParams

log = get_logger("maps")

ALL = "all"  # the row pooling every source (each distinct pair once)
RECALL_COLUMNS = ["variant", "source", "n_pairs", "recall", "ci_low", "ci_high", "null_recall", "fold",
                  "threshold_low", "threshold_high", "n_genes"]
DIFF_COLUMNS = ["variant", "baseline", "source", "difference", "ci_low", "ci_high", "n_pairs"]
PAIR_BLOCK = 8192  # pairs per block of the row-wise products: 2 x 8192 x dims float64 (50 MB at 384 dims)


def check_gene_names(genes, where: str) -> list[str]:
    """The map's gene names, refused when two differ only by case (or repeat exactly): symbols are
    case-sensitive, so such a map would match pair lists ambiguously."""
    genes = [str(g) for g in genes]
    check_case_collisions(genes, where, "gene names")
    if len(set(genes)) < len(genes):
        dup = pd.Index(genes)[pd.Index(genes).duplicated()][0]
        raise CellicaError(f"{where}: gene {dup!r} appears more than once")
    return genes


def unit_rows(x: np.ndarray, genes: list[str], where: str) -> np.ndarray:
    """Rows scaled to unit length (float64); a zero or non-finite profile is an error naming its gene."""
    x = np.asarray(x, np.float64)
    norm = np.linalg.norm(x, axis=1)
    bad = ~np.isfinite(norm) | (norm == 0)
    if bad.any():
        raise CellicaError(f"{where}: gene {genes[int(bad.argmax())]!r} has a zero or non-finite profile "
                           "(no cosine similarity)")
    return x / norm[:, None]


def pair_cosines(unit: np.ndarray, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """Cosine similarity of each pair (rows ``i[k]``, ``j[k]`` of unit rows), block by block."""
    out = np.empty(len(i))
    for s in range(0, len(i), PAIR_BLOCK):
        out[s:s + PAIR_BLOCK] = np.einsum("ij,ij->i", unit[i[s:s + PAIR_BLOCK]], unit[j[s:s + PAIR_BLOCK]])
    return out


def random_pairs(n: int, k: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``k`` distinct unordered pairs of ``n`` genes drawn without replacement (every pair when
    there are no more than ``k``)."""
    total = n * (n - 1) // 2
    if total <= k:
        i, j = np.triu_indices(n, 1)
        return i, j
    codes = np.sort(rng.choice(total, size=k, replace=False))
    # Pair number c -> (i, j), i < j, in the row-major order of the upper triangle.
    starts = np.cumsum(np.r_[0, np.arange(n - 1, 0, -1)])
    i = np.searchsorted(starts, codes, side="right") - 1
    return i, codes - starts[i] + i + 1


def gene_weights(n: int, n_boot: int, seed: int):
    """The bootstrap's gene weights, resample by resample (seeded per resample: order-free)."""
    for b in range(n_boot):
        yield np.random.default_rng([seed, b]).multinomial(n, np.full(n, 1.0 / n)).astype(np.float64)


def known_pair_index(pairs: pd.DataFrame, genes: list[str],
                     sources: list[str] = ()) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per source (``sources`` first, even without pairs in the map), and pooled under :data:`ALL`
    (each distinct pair once), the rows of each pair's two genes."""
    pos = {g: k for k, g in enumerate(genes)}
    index = {str(s): (np.zeros(0, int), np.zeros(0, int)) for s in sources}
    for source, g in pairs.groupby("source", sort=True):
        index[str(source)] = (g["gene_a"].map(pos).to_numpy(int), g["gene_b"].map(pos).to_numpy(int))
    pooled = pairs.drop_duplicates(["gene_a", "gene_b"])
    index[ALL] = (pooled["gene_a"].map(pos).to_numpy(int), pooled["gene_b"].map(pos).to_numpy(int))
    return index


def recall_tables(
    maps: dict,
    pairs: pd.DataFrame,
    p: MapParams | None = None,
    comparisons: list[tuple[str, str]] | None = None,
    sources: list[str] = (),
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Recall of known pairs per variant and source, with bootstrap intervals, and paired differences.

    Parameters
    ----------
    maps
        Variant -> gene-level map (AnnData, genes as ``obs_names``); every map holds the same genes.
    pairs
        Known pairs (:data:`cellica.maps.annotations.PAIR_COLUMNS`) with both genes in the maps
        (:func:`cellica.maps.annotations.match_genes`).
    p
        Percentile, null size, bootstrap size, seed and the least number of genes.
    comparisons
        ``(variant, baseline)`` pairs for the differences (those with both variants present).
    sources
        Sources to report even when none of their pairs has both genes in the map (n_pairs 0).

    Returns
    -------
    recall : pandas.DataFrame
        :data:`RECALL_COLUMNS`, one row per variant and source (plus :data:`ALL`).
    differences : pandas.DataFrame
        :data:`DIFF_COLUMNS`: recall of ``variant`` minus ``baseline``, paired bootstrap interval.
    """
    p = p or MapParams()
    p.validate()
    genes = _common_genes(maps, p)
    if len(genes) < p.min_genes:  # an optional product: said, never the end of the run
        return not_computed_tables(list(maps), len(genes), f"not computed: the map has {len(genes)} genes; recall "
                                                           f"needs at least {p.min_genes} (maps.min_genes)")
    index = known_pair_index(pairs, genes, sources)
    ni, nj = random_pairs(len(genes), p.null_pairs, np.random.default_rng(p.seed))
    hits, rows = {}, []
    for variant, m in maps.items():
        unit = unit_rows(np.asarray(m[genes].X), genes, f"map {variant}")
        null = pair_cosines(unit, ni, nj)
        lo, hi = np.percentile(null, [p.recall_percentile, 100 - p.recall_percentile])
        null_recall = float(np.mean((null <= lo) | (null >= hi)))
        for source, (i, j) in index.items():
            s = pair_cosines(unit, i, j)
            hits[variant, source] = (s <= lo) | (s >= hi)
            rows.append({"variant": variant, "source": source, "n_pairs": len(i),
                         "recall": float(hits[variant, source].mean()) if len(i) else np.nan,
                         "null_recall": null_recall, "threshold_low": float(lo), "threshold_high": float(hi),
                         "n_genes": len(genes)})
    recall = pd.DataFrame(rows, columns=[c for c in RECALL_COLUMNS if c not in ("ci_low", "ci_high", "fold")])
    return _with_intervals(recall, hits, index, len(genes), p, comparisons or [])


def not_computed_tables(variants: list[str], n_genes: int, note: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The recall tables of maps the recall cannot be computed on: one pooled row per variant
    saying why (``note``), no differences; logged."""
    log.warning("recall %s", note)
    recall = pd.DataFrame([{"variant": v, "source": ALL, "n_pairs": 0, "n_genes": n_genes, "note": note}
                           for v in variants], columns=[*RECALL_COLUMNS, "note"])
    numbers = [c for c in RECALL_COLUMNS if c not in ("variant", "source", "n_pairs", "n_genes")]
    recall[numbers] = recall[numbers].astype(float)
    differences = pd.DataFrame({c: pd.Series(dtype=str if c in ("variant", "baseline", "source") else
                                             int if c == "n_pairs" else float) for c in DIFF_COLUMNS})
    return recall, differences


def _common_genes(maps: dict, p: MapParams) -> list[str]:
    if not maps:
        raise CellicaError("recall: no maps given")
    names = {v: check_gene_names(m.obs_names, f"map {v}") for v, m in maps.items()}
    first, genes = next(iter(names.items()))
    for v, g in names.items():
        if set(g) != set(genes):
            raise CellicaError(f"recall: maps {first!r} and {v!r} hold different genes "
                               f"(e.g. {sorted(set(g) ^ set(genes))[0]!r})")
    return sorted(genes)


def _with_intervals(recall: pd.DataFrame, hits: dict, index: dict, n: int, p: MapParams,
                    comparisons: list[tuple[str, str]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Add the bootstrap intervals of every recall and of the paired differences."""
    variants = list(dict.fromkeys(recall["variant"]))
    pairs = [(a, b) for a, b in comparisons if a in variants and b in variants]
    boots = {key: np.empty(p.n_boot) for key in hits}
    for b, w in enumerate(gene_weights(n, p.n_boot, p.seed)):
        for source, (i, j) in index.items():
            pw = w[i] * w[j]
            total = pw.sum()
            for v in variants:
                boots[v, source][b] = (pw @ hits[v, source]) / total if total else np.nan
    ci = {key: np.nanpercentile(s, [2.5, 97.5]) if np.isfinite(s).any() else (np.nan, np.nan)
          for key, s in boots.items()}
    recall["ci_low"] = [
        ci.get((v, s), (np.nan,) * 2)[0] for v, s in zip(recall["variant"], recall["source"], strict=False)
    ]
    recall["ci_high"] = [
        ci.get((v, s), (np.nan,) * 2)[1] for v, s in zip(recall["variant"], recall["source"], strict=False)
    ]
    recall["fold"] = recall["recall"] / recall["null_recall"]
    rows = []
    for a, base in pairs:
        for source, (i, _) in index.items():
            d = boots[a, source] - boots[base, source]
            lo, hi = np.nanpercentile(d, [2.5, 97.5]) if np.isfinite(d).any() else (np.nan, np.nan)
            rows.append({"variant": a, "baseline": base, "source": source, "n_pairs": len(i),
                         "difference": float(hits[a, source].mean() - hits[base, source].mean()) if len(i) else np.nan,
                         "ci_low": float(lo), "ci_high": float(hi)})
    return recall[RECALL_COLUMNS], pd.DataFrame(rows, columns=DIFF_COLUMNS)
