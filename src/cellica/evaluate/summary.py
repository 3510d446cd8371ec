"""The summary table (``summary.parquet``): the paper's Tables 3-4 with uncertainty, the
paired comparisons between variants and the claims, as one tidy table.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from cellica.core.logs import get_logger
from cellica.evaluate._claims import claims_table, recall_claim
from cellica.evaluate._compare import compare_baselines, compare_variants, gene_values, variant_means
from cellica.registry import BASELINES, metrics_of

log = get_logger("compare")


SUMMARY_COLUMNS = ["table", "row", "variant", "metric", "value", "ci_low", "ci_high", "n", "seed_sd", "p_value",
                   "p_holm", "verdict", "detail", "baselines", "sentence", "decides"]


def summary_table(per_gene: pd.DataFrame, batch: pd.DataFrame, activity: pd.DataFrame, *, n_boot: int = 2000,
                  seed: int = 0, maps: tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame] | None = None,
                  entity: str = "gene") -> pd.DataFrame:
    """The paper's Tables 3-4 with uncertainty, the variant comparisons and the claims, as one tidy table.

    ``table`` is ``per_gene`` (each gene's metric, mean over seeds), ``per_variant``
    (means over genes with 95% bootstrap intervals, counts, batch metrics, mAP),
    ``comparison`` (paired differences, Wilcoxon and Holm-corrected p-values) or
    ``claim`` (verdict and the numbers behind it). Columns: :data:`SUMMARY_COLUMNS`.
    ``maps`` (the gene maps' recall, recall differences and guide consistency tables) adds
    their per-variant rows and the recall comparisons (:func:`map_rows`). Per-gene tables of
    baselines (their ``variant`` a name of :data:`cellica.registry.BASELINES`) get per-variant
    rows like the variants, comparisons with the claims' winner (a Holm family of their own,
    :func:`cellica.evaluate._compare.compare_baselines`) and the claims' ``baselines`` column
    (:func:`cellica.evaluate._claims.beats_baselines`). ``entity`` (what
    the perturbations are called: gene, compound, ...) words the reasons and notes.

    Parameters
    ----------
    per_gene : pandas.DataFrame
        Every variant's and baseline's per-gene rows.
    batch : pandas.DataFrame
        The batch metrics.
    activity : pandas.DataFrame
        The replicate mAP table.
    n_boot : int, default 2000
        Bootstrap draws of every interval.
    seed : int, default 0
        The bootstrap's seed.
    maps : tuple of three pandas.DataFrame, optional
        Recall, recall differences and guide consistency.
    entity : str, default "gene"
        What the perturbations are called.

    Returns
    -------
    pandas.DataFrame
        The summary (:data:`SUMMARY_COLUMNS`).
    """
    values = gene_values(per_gene)
    genes = values.groupby(["variant", "gene", "metric"])["value"].mean().reset_index()
    genes = genes.rename(columns={"gene": "row"}).assign(table="per_gene")
    means = variant_means(values, n_boot, seed).assign(table="per_variant", row="mean")
    counts = _counts(per_gene).assign(table="per_variant", row="count")
    extra = []
    if not activity.empty:
        act = activity.groupby("variant").agg(map_mean=("map", "mean"), active_fraction=("significant", "mean"))
        extra.append(act)
    if not batch.empty:
        # The batch table's metrics (and their intervals, X_ci_low / X_ci_high) as the registry names them.
        cols = [c for c in batch.columns if re.sub(r"_ci_(low|high)$", "", c) in metrics_of("batch", "truth")]
        extra.append(batch.set_index("variant")[cols])
    for t in extra:
        means = pd.concat([means, _with_intervals(t)], ignore_index=True)
    n_features = per_gene.groupby("variant")["n_features"].first().to_dict() if "n_features" in per_gene else {}
    comps = compare_variants(values, n_features, n_boot, seed, entity=entity).assign(table="comparison")
    # Baselines: the per-gene tables' names that are not variants (registry order).
    present = set(per_gene["variant"])
    baselines = [b for b in BASELINES if b in present]
    base_comps = compare_baselines(values, n_features, n_boot, seed, baselines, entity).assign(table="comparison")
    claims = claims_table(comps, batch, base_comps, baselines)
    if maps:
        claims = pd.concat([claims, pd.DataFrame([recall_claim(maps[1], entity)])], ignore_index=True)
    if baselines:  # the recall claim too has no baseline to compare (maps are the variants' only)
        claims["baselines"] = claims["baselines"].fillna("n/a")
    claims = claims.rename(columns={"claim": "row"}).assign(table="claim", metric="claim")
    out = pd.concat([genes, means, counts, comps, *([base_comps] if baselines else []), claims,
                     *([map_rows(*maps)] if maps else [])], ignore_index=True)
    out = out.reindex(columns=SUMMARY_COLUMNS)
    for c in ("value", "ci_low", "ci_high", "seed_sd", "p_value", "p_holm"):
        out[c] = out[c].astype(float)
    out["n"] = out["n"].fillna(0).astype(int)
    for c in ("row", "variant", "metric", "verdict", "detail", "baselines", "sentence", "decides"):
        out[c] = out[c].fillna("").astype(str)
    return out


def _with_intervals(t: pd.DataFrame) -> pd.DataFrame:
    """Per-variant columns as long rows; ``X_ci_low`` / ``X_ci_high`` columns become X's interval."""
    long = t.reset_index().melt(id_vars="variant", var_name="metric")
    bounds = long["metric"].str.extract(r"^(?P<name>.+)_ci_(?P<side>low|high)$")
    is_bound = bounds["name"].notna()
    out = long[~is_bound].assign(table="per_variant", row="mean")
    for side in ("low", "high"):
        b = long[is_bound & (bounds["side"] == side)].assign(metric=bounds["name"])
        out = out.merge(b.rename(columns={"value": f"ci_{side}"}), on=["variant", "metric"], how="left")
    return out


def _counts(per_gene: pd.DataFrame) -> pd.DataFrame:
    """Per variant: genes evaluated, on held-out batches, on a random split, without a split, skipped."""
    first = per_gene[per_gene["seed"] == per_gene["seed"].min()] if "seed" in per_gene else per_gene
    rows = []
    for variant, t in first.groupby("variant"):
        ok = ~t["skipped"].astype(bool)
        split = t["split"] if "split" in t else pd.Series("batch", index=t.index)
        no_split = t["no_split"].astype(bool) if "no_split" in t else pd.Series(False, index=t.index)
        counts = {"n_genes": ok.sum(), "n_genes_heldout": (ok & (split == "batch")).sum(),
                  "n_genes_random_split": (ok & (split == "random")).sum(), "n_genes_no_split": (ok & no_split).sum(),
                  "n_genes_skipped": (~ok).sum()}
        if "n_features" in t:
            counts["n_features"] = t["n_features"].iloc[0]
        rows += [{"variant": variant, "metric": k, "value": float(v)} for k, v in counts.items()]
    return pd.DataFrame(rows)


def map_rows(recall: pd.DataFrame, differences: pd.DataFrame, consistency: pd.DataFrame) -> pd.DataFrame:
    """Gene-map rows of the summary: recall of known pairs (all sources pooled) and its null per
    variant, the share of genes whose guides agree (Wilson 95% interval), and the recall
    differences between variants (paired gene bootstrap; a difference is higher or lower when
    its interval excludes 0)."""
    pooled = recall[recall["source"] == "all"]
    rows = [pooled.assign(metric="recall", value=pooled["recall"], n=pooled["n_pairs"]),
            pooled.assign(metric="recall_null", value=pooled["null_recall"], ci_low=np.nan, ci_high=np.nan,
                          n=pooled["n_pairs"])]
    for variant, t in consistency.groupby("variant"):
        scored = t["consistent"].dropna().astype(bool)
        lo, hi = wilson(int(scored.sum()), len(scored))
        rows.append(pd.DataFrame([{"variant": variant, "metric": "guide_consistent_fraction", "n": len(scored),
                                   "value": scored.mean() if len(scored) else np.nan, "ci_low": lo, "ci_high": hi}]))
    per_variant = pd.concat(rows, ignore_index=True).assign(table="per_variant", row="mean")
    diff = differences[differences["source"] == "all"]
    comps = diff.assign(table="comparison", metric="recall", row=diff["variant"] + " - " + diff["baseline"],
                        value=diff["difference"], n=diff["n_pairs"],
                        verdict=np.where(diff["ci_low"] > 0, "higher", np.where(
                            diff["ci_high"] < 0, "lower", np.where(np.isfinite(diff["ci_low"]), "inconclusive",
                                                                   "not tested"))),
                        detail=np.where(diff["n_pairs"] == 0, "no known pair has both members in the map", ""))
    return pd.concat([per_variant, comps], ignore_index=True)[["table", "row", "variant", "metric", "value",
                                                                "ci_low", "ci_high", "n", "verdict", "detail"]]


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """Wilson score 95% interval of a proportion k / n (NaN for n = 0)."""
    if n == 0:
        return float("nan"), float("nan")
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return float(centre - half), float(centre + half)
