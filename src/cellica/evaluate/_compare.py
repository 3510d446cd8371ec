"""Uncertainty and verdicts: means over genes with bootstrap intervals, paired variant
comparisons, and the paper's claims marked holds / fails / inconclusive.

Statistics (documented in the README, "Uncertainty and claims"):

* A gene's value of a metric is its mean over the evaluation seeds.
* Mean over genes with a 95% percentile bootstrap interval (genes resampled with
  replacement, ``n_boot`` times).
* Paired comparison of two variants on the genes both scored: the mean of the
  per-gene differences with a 95% paired bootstrap interval, and the two-sided
  Wilcoxon signed-rank p-value; p-values are Holm-corrected over every comparison
  of the table (all pairs x metrics).
* Seed noise, apart from gene sampling: the standard deviation over seeds of the
  per-seed mean (or mean difference), and in how many seeds the point estimate
  points the claimed way.
* A comparison is *higher* (or *lower*) when its interval excludes 0 and its
  Holm-corrected p-value is below 0.05; otherwise *inconclusive*. A claim holds
  when each of its comparisons goes the claimed way, fails when any goes
  significantly the other way, and is inconclusive otherwise.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.evaluate._power import power_note
from cellica.registry import BASELINES, CLAIM_WINNER, COMPARED_METRICS, METRICS, PAIRS

log = get_logger("compare")

ALPHA = 0.05
MIN_GENES = 3


def bootstrap_ci(values, n_boot: int = 2000, seed: int = 0, level: float = 0.95) -> tuple[float, float, float]:
    """Mean and percentile bootstrap interval of the mean of ``values`` (NaN dropped).

    Raises
    ------
    CellicaError
        With fewer than :data:`MIN_GENES` finite values: an interval from so few genes means nothing.
    """
    v = np.asarray(values, np.float64)
    v = v[np.isfinite(v)]
    if v.size < MIN_GENES:
        raise CellicaError(f"a confidence interval needs >= {MIN_GENES} genes with a value, got {v.size}")
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, v.size, (n_boot, v.size))].mean(axis=1)
    lo, hi = np.percentile(means, [50 * (1 - level), 50 * (1 + level)])
    return float(v.mean()), float(lo), float(hi)


def wilcoxon_p(diffs) -> float:
    """Two-sided Wilcoxon signed-rank p-value of paired differences (1 when all are zero)."""
    from scipy.stats import wilcoxon

    d = np.asarray(diffs, np.float64)
    d = d[np.isfinite(d)]
    if d.size == 0 or not np.any(d != 0):
        return 1.0
    return float(wilcoxon(d, zero_method="wilcox", alternative="two-sided").pvalue)


def holm(pvalues) -> np.ndarray:
    """Holm-Bonferroni adjusted p-values (NaN stays NaN)."""
    p = np.asarray(pvalues, np.float64)
    out = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    order = ok[np.argsort(p[ok], kind="stable")]
    m = order.size
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        out[i] = running
    return out


def gene_values(per_gene: pd.DataFrame) -> pd.DataFrame:
    """Long table ``variant, gene, seed, metric, value`` of the per-gene metrics (skipped genes dropped).

    ``auroc_heldout`` holds only genes evaluated on held-out batches, ``auroc_random_split``
    only those that fell back to a random split.
    """
    ok = per_gene[~per_gene["skipped"].astype(bool)].copy()
    if "seed" not in ok:
        ok["seed"] = 0
    split = ok["split"] if "split" in ok else pd.Series("batch", index=ok.index)
    parts = []
    for metric, m in METRICS.items():  # the registry's, read live: a metric added is a metric computed
        column = m.column
        if column is None or column not in ok:
            continue
        rows = ok if m.split is None else ok[split == m.split]
        parts.append(pd.DataFrame({"variant": rows["variant"].astype(str), "gene": rows["gene"].astype(str),
                                   "seed": rows["seed"].astype(int), "metric": metric,
                                   "value": rows[column].astype(float)}))
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["variant", "gene", "seed", "metric", "value"])


def _seed_sd(by_seed: pd.Series) -> float:
    return float(by_seed.std(ddof=1)) if by_seed.size > 1 else float("nan")


def variant_means(values: pd.DataFrame, n_boot: int, seed: int) -> pd.DataFrame:
    """Per variant and metric: mean over genes (of the seed means), 95% bootstrap CI, n genes, seed sd."""
    rows = []
    for (variant, metric), t in values.groupby(["variant", "metric"], sort=True):
        per_gene = t.groupby("gene")["value"].mean()
        row = {"variant": variant, "metric": metric, "n": int(per_gene.notna().sum()),
               "seed_sd": _seed_sd(t.groupby("seed")["value"].mean()), "detail": ""}
        try:
            row["value"], row["ci_low"], row["ci_high"] = bootstrap_ci(per_gene, n_boot, seed)
        except CellicaError as exc:
            row["value"], row["ci_low"], row["ci_high"] = float(per_gene.mean()), np.nan, np.nan
            row["detail"] = f"no interval: {exc}"
        rows.append(row)
    return pd.DataFrame(rows)


def compare_variants(values: pd.DataFrame, n_features: dict[str, int], n_boot: int, seed: int,
                     pairs=PAIRS, metrics=COMPARED_METRICS, entity: str = "gene") -> pd.DataFrame:
    """Paired differences ``a - b`` per metric over the genes both variants scored.

    Sparsity is compared only between variants with the same number of features (Hoyer
    sparsity depends on the length of the vector); other pairs are kept with a reason.
    ``entity`` (what the perturbations are called) words the reasons and power notes.
    """
    return _with_verdicts(_comparison_rows(values, n_features, n_boot, seed, pairs, metrics, entity), entity)


def compare_baselines(values: pd.DataFrame, n_features: dict[str, int], n_boot: int, seed: int,
                      baselines, entity: str = "gene") -> pd.DataFrame:
    """Paired differences ``winner - baseline``: the claims' winner (:data:`cellica.registry.CLAIM_WINNER`)
    against each baseline, on the baseline's metrics (:data:`cellica.registry.BASELINES`).

    Holm-corrected over these comparisons alone, a family of their own: the paper's
    comparisons (:func:`compare_variants`) keep their p-values whether baselines run or not.
    """
    parts = [_comparison_rows(values, n_features, n_boot, seed, [(CLAIM_WINNER, b)], BASELINES[b].metrics, entity)
             for b in baselines]
    if not parts:
        return pd.DataFrame(columns=["metric", "variant", "other", "row", "verdict"])
    return _with_verdicts(pd.concat(parts, ignore_index=True), entity)


def _comparison_rows(values: pd.DataFrame, n_features: dict[str, int], n_boot: int, seed: int, pairs, metrics,
                     entity: str) -> pd.DataFrame:
    present = set(values["variant"])
    rows = []
    for metric in metrics:
        m = values[values["metric"] == metric]
        for a, b in pairs:
            row = {"metric": metric, "variant": a, "other": b, "row": f"{a} - {b}", "n": 0, "value": np.nan,
                   "ci_low": np.nan, "ci_high": np.nan, "p_value": np.nan, "seed_sd": np.nan, "diff_sd": np.nan,
                   "seeds_positive": 0, "n_seeds": 0, "by_seed": "{}", "detail": ""}
            if a not in present or b not in present:
                row["detail"] = f"not run: variant {a if a not in present else b} is not in the results"
            elif metric == "sparsity" and n_features.get(a) != n_features.get(b):
                row["detail"] = (f"not comparable: {a} has {n_features.get(a)} features, {b} {n_features.get(b)} "
                                 "(Hoyer sparsity depends on the number of features)")
            elif metric == "auroc_heldout" and m.empty:
                # Every perturbation was seen in one batch: its AUROC is the random-split row's.
                row["detail"] = (f"no {entity} was evaluated on held-out batches (each was seen in one batch "
                                 "only; their AUROC is in the random-split row)")
            else:
                row.update(_paired(m, a, b, n_boot, seed, entity))
            rows.append(row)
    return pd.DataFrame(rows)


def _with_verdicts(out: pd.DataFrame, entity: str) -> pd.DataFrame:
    """Holm over the table's comparisons, each one's verdict, and what would decide an inconclusive one."""
    out["p_holm"] = holm(out["p_value"])
    out["verdict"] = [direction(r) for r in out.itertuples()]
    # An inconclusive comparison says what would decide it (cellica.evaluate._power).
    level = ALPHA / max(1, int(np.isfinite(out["p_value"]).sum()))
    out["power"] = [power_note(r.value, r.diff_sd, r.n, r.seed_sd, r.n_seeds, level, entity)
                    if r.verdict == "inconclusive" and "diff_sd" in out else "" for r in out.itertuples()]
    inconclusive = out["verdict"] == "inconclusive"
    out.loc[inconclusive, "detail"] = out.loc[inconclusive, "power"]
    return out


def direction(r) -> str:
    if not np.isfinite(r.ci_low) or not np.isfinite(r.p_holm):
        return "not tested"
    if r.ci_low > 0 and r.p_holm < ALPHA:
        return "higher"
    if r.ci_high < 0 and r.p_holm < ALPHA:
        return "lower"
    return "inconclusive"


def _paired(m: pd.DataFrame, a: str, b: str, n_boot: int, seed: int, entity: str = "gene") -> dict:
    wide = m[m["variant"].isin([a, b])].pivot_table(index=["gene", "seed"], columns="variant", values="value")
    wide = wide.dropna(subset=[a, b]) if {a, b} <= set(wide.columns) else wide.iloc[0:0]
    if wide.empty:
        return {"detail": f"no {entity} scored by both"}
    diff = (wide[a] - wide[b]).rename("d").reset_index()
    per_gene = diff.groupby("gene")["d"].mean()
    if (diff["d"] == 0).all():  # equal on every gene and seed: nothing to test (not "inconclusive")
        return {"n": int(per_gene.size), "value": 0.0,
                "detail": f"not tested: {a} and {b} are identical on every {entity} and seed (by construction)"}
    by_seed = diff.groupby("seed")["d"].mean()
    out = {"n": int(per_gene.size), "seed_sd": _seed_sd(by_seed), "seeds_positive": int((by_seed > 0).sum()),
           "diff_sd": float(per_gene.std(ddof=1)) if per_gene.size > 1 else np.nan,
           "n_seeds": int(by_seed.size), "p_value": wilcoxon_p(per_gene),
           "by_seed": json.dumps({str(k): float(v) for k, v in by_seed.items()})}
    try:
        out["value"], out["ci_low"], out["ci_high"] = bootstrap_ci(per_gene, n_boot, seed)
    except CellicaError as exc:
        out["value"], out["detail"] = float(per_gene.mean()), f"no interval: {exc}"
    return out


