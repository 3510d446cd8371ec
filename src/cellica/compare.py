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
from dataclasses import dataclass

import numpy as np
import pandas as pd

from cellica.errors import CellicaError
from cellica.logs import get_logger

log = get_logger("compare")

ALPHA = 0.05
MIN_GENES = 3
# Per-gene metrics: the column of the per-gene table, and whether higher is better.
GENE_METRICS = {
    "auroc_heldout": ("auroc_mean", True),  # genes evaluated on held-out batches only
    "auroc_random_split": ("auroc_mean", True),  # genes that fell back to a random split
    "auroc_within": ("auroc_within", True),
    "sparsity": ("sparsity", True),
    "concentration": ("concentration", True),
}
PAIRS = [("pca_ica", "pca"), ("pca_ica", "pca_rand"), ("pca_ica", "base"), ("pca", "pca_rand"), ("pca", "base"),
         ("pca_rand", "base")]
COMPARED_METRICS = ("auroc_heldout", "sparsity", "concentration")


@dataclass(frozen=True)
class Claim:
    """One of the paper's claims: every (metric, better, worse) comparison must go that way."""

    name: str
    parts: tuple[tuple[str, str, str], ...]


CLAIMS = (
    Claim("AUROC (held-out batches): PCA+ICA > PCA > PCA+Rand, Base",
          (("auroc_heldout", "pca_ica", "pca"), ("auroc_heldout", "pca", "pca_rand"), ("auroc_heldout", "pca", "base"))),
    Claim("Sparsity: PCA+ICA highest",
          (("sparsity", "pca_ica", "pca"), ("sparsity", "pca_ica", "pca_rand"), ("sparsity", "pca_ica", "base"))),
    Claim("Concentration: Base < PCA+Rand < PCA < PCA+ICA",
          (("concentration", "pca_rand", "base"), ("concentration", "pca", "pca_rand"),
           ("concentration", "pca_ica", "pca"))),
)
BATCH_CLAIM = "Batch signal removed: batch classifiers on controls less accurate on PCA+ICA than on Base"


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
    for metric, (column, _) in GENE_METRICS.items():
        if column not in ok:
            continue
        rows = ok
        if metric == "auroc_heldout":
            rows = ok[split == "batch"]
        elif metric == "auroc_random_split":
            rows = ok[split == "random"]
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
                     pairs=PAIRS, metrics=COMPARED_METRICS) -> pd.DataFrame:
    """Paired differences ``a - b`` per metric over the genes both variants scored.

    Sparsity is compared only between variants with the same number of features (Hoyer
    sparsity depends on the length of the vector); other pairs are kept with a reason.
    """
    present = set(values["variant"])
    rows = []
    for metric in metrics:
        m = values[values["metric"] == metric]
        for a, b in pairs:
            row = {"metric": metric, "variant": a, "other": b, "row": f"{a} - {b}", "n": 0, "value": np.nan,
                   "ci_low": np.nan, "ci_high": np.nan, "p_value": np.nan, "seed_sd": np.nan,
                   "seeds_positive": 0, "n_seeds": 0, "by_seed": "{}", "detail": ""}
            if a not in present or b not in present:
                row["detail"] = f"not run: variant {a if a not in present else b} is not in the results"
            elif metric == "sparsity" and n_features.get(a) != n_features.get(b):
                row["detail"] = (f"not comparable: {a} has {n_features.get(a)} features, {b} {n_features.get(b)} "
                                 "(Hoyer sparsity depends on the number of features)")
            else:
                row.update(_paired(m, a, b, n_boot, seed))
            rows.append(row)
    out = pd.DataFrame(rows)
    out["p_holm"] = holm(out["p_value"])
    out["verdict"] = [_direction(r) for r in out.itertuples()]
    return out


def _paired(m: pd.DataFrame, a: str, b: str, n_boot: int, seed: int) -> dict:
    wide = m[m["variant"].isin([a, b])].pivot_table(index=["gene", "seed"], columns="variant", values="value")
    wide = wide.dropna(subset=[a, b]) if {a, b} <= set(wide.columns) else wide.iloc[0:0]
    if wide.empty:
        return {"detail": "no gene scored by both"}
    diff = (wide[a] - wide[b]).rename("d").reset_index()
    per_gene = diff.groupby("gene")["d"].mean()
    by_seed = diff.groupby("seed")["d"].mean()
    out = {"n": int(per_gene.size), "seed_sd": _seed_sd(by_seed), "seeds_positive": int((by_seed > 0).sum()),
           "n_seeds": int(by_seed.size), "p_value": wilcoxon_p(per_gene),
           "by_seed": json.dumps({str(k): float(v) for k, v in by_seed.items()})}
    try:
        out["value"], out["ci_low"], out["ci_high"] = bootstrap_ci(per_gene, n_boot, seed)
    except CellicaError as exc:
        out["value"], out["detail"] = float(per_gene.mean()), f"no interval: {exc}"
    return out


def _direction(r) -> str:
    if not np.isfinite(r.ci_low) or not np.isfinite(r.p_holm):
        return "not tested"
    if r.ci_low > 0 and r.p_holm < ALPHA:
        return "higher"
    if r.ci_high < 0 and r.p_holm < ALPHA:
        return "lower"
    return "inconclusive"


def claims_table(comparisons: pd.DataFrame, batch: pd.DataFrame | None = None) -> pd.DataFrame:
    """The paper's claims, each ``holds`` / ``fails`` / ``inconclusive`` / ``not tested``, with the numbers."""
    idx = comparisons.set_index(["metric", "variant", "other"])
    rows = []
    for claim in CLAIMS:
        parts, verdicts, per_seed = [], [], []
        for metric, better, worse in claim.parts:
            if (metric, better, worse) not in idx.index:
                verdicts.append("not tested")
                parts.append(f"{better} > {worse}: not compared")
                continue
            r = idx.loc[(metric, better, worse)]
            verdicts.append(r["verdict"])
            parts.append(_part_text(better, worse, r))
            if r["verdict"] != "not tested":
                per_seed.append(json.loads(r["by_seed"]))
        tested = [v for v in verdicts if v != "not tested"]
        if any(v == "lower" for v in tested):
            verdict = "fails"
        elif tested and all(v == "higher" for v in tested):
            verdict = "holds"
        elif tested:
            verdict = "inconclusive"
        else:
            verdict = "not tested"
        rows.append({"claim": claim.name, "verdict": verdict, "detail": "; ".join(parts) + _seed_text(per_seed)})
    rows.append(_batch_claim(batch))
    return pd.DataFrame(rows)


def _seed_text(per_seed: list[dict[str, float]]) -> str:
    """In how many seeds every tested part's point estimate goes the claimed way."""
    seeds = set.intersection(*(set(d) for d in per_seed)) if per_seed else set()
    if not seeds:
        return ""
    ok = sum(all(d[s] > 0 for d in per_seed) for s in seeds)
    return f"; every tested part's point estimate the claimed way in {ok} of {len(seeds)} seed(s)"


def _part_text(better: str, worse: str, r) -> str:
    if r["verdict"] == "not tested":
        return f"{better} > {worse}: {r['detail'] or 'not tested'}"
    return (f"{better} - {worse} = {r['value']:+.3g} [{r['ci_low']:+.3g}, {r['ci_high']:+.3g}], "
            f"n={int(r['n'])}, Holm p={r['p_holm']:.2g} ({r['verdict']})")


def _batch_claim(batch: pd.DataFrame | None) -> dict:
    """Holds when each batch classifier's interval on pca_ica lies below base's, fails when above."""
    name = BATCH_CLAIM
    if batch is None or batch.empty or not {"base", "pca_ica"} <= set(batch["variant"]):
        return {"claim": name, "verdict": "not tested", "detail": "needs the base and pca_ica batch metrics"}
    b = batch.set_index("variant")
    verdicts, parts = [], []
    for col in ("batch_accuracy", "batch_accuracy_lgbm"):
        if f"{col}_ci_low" not in b or not np.isfinite(b.loc[["base", "pca_ica"], f"{col}_ci_low"]).all():
            continue
        lo_i, hi_i = b.loc["pca_ica", [f"{col}_ci_low", f"{col}_ci_high"]]
        lo_b, hi_b = b.loc["base", [f"{col}_ci_low", f"{col}_ci_high"]]
        v = "holds" if hi_i < lo_b else "fails" if lo_i > hi_b else "inconclusive"
        verdicts.append(v)
        parts.append(f"{col}: pca_ica {b.loc['pca_ica', col]:.3f} [{lo_i:.3f}, {hi_i:.3f}] vs base "
                     f"{b.loc['base', col]:.3f} [{lo_b:.3f}, {hi_b:.3f}] (chance {b.loc['base', 'chance_accuracy']:.3f})")
    if not verdicts:
        return {"claim": name, "verdict": "not tested", "detail": "no batch classifier could be cross-validated"}
    verdict = "holds" if all(v == "holds" for v in verdicts) else "fails" if "fails" in verdicts else "inconclusive"
    return {"claim": name, "verdict": verdict, "detail": "; ".join(parts) + " (95% bootstrap intervals over controls)"}


SUMMARY_COLUMNS = ["table", "row", "variant", "metric", "value", "ci_low", "ci_high", "n", "seed_sd", "p_value",
                   "p_holm", "verdict", "detail"]
BATCH_COLUMNS = ["batch_accuracy", "batch_accuracy_lgbm", "chance_accuracy", "silhouette", "knn_mixing"]


def summary_table(per_gene: pd.DataFrame, batch: pd.DataFrame, activity: pd.DataFrame, n_boot: int = 2000,
                  seed: int = 0) -> pd.DataFrame:
    """The paper's Tables 3-4 with uncertainty, the variant comparisons and the claims, as one tidy table.

    ``table`` is ``per_gene`` (each gene's metric, mean over seeds), ``per_variant``
    (means over genes with 95% bootstrap intervals, counts, batch metrics, mAP),
    ``comparison`` (paired differences, Wilcoxon and Holm-corrected p-values) or
    ``claim`` (verdict and the numbers behind it). Columns: :data:`SUMMARY_COLUMNS`.
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
        cols = [c for c in batch.columns if c in BATCH_COLUMNS or c.startswith(("truth_", "batch_accuracy"))]
        extra.append(batch.set_index("variant")[cols])
    for t in extra:
        means = pd.concat([means, _with_intervals(t)], ignore_index=True)
    n_features = per_gene.groupby("variant")["n_features"].first().to_dict() if "n_features" in per_gene else {}
    comps = compare_variants(values, n_features, n_boot, seed).assign(table="comparison")
    claims = claims_table(comps, batch).rename(columns={"claim": "row"}).assign(table="claim", metric="claim")
    out = pd.concat([genes, means, counts, comps, claims], ignore_index=True)
    out = out.reindex(columns=SUMMARY_COLUMNS)
    for c in ("value", "ci_low", "ci_high", "seed_sd", "p_value", "p_holm"):
        out[c] = out[c].astype(float)
    out["n"] = out["n"].fillna(0).astype(int)
    for c in ("row", "variant", "metric", "verdict", "detail"):
        out[c] = out[c].fillna("").astype(str)
    return out


def _with_intervals(t: pd.DataFrame) -> pd.DataFrame:
    """Per-variant columns as long rows; ``X_ci_low`` / ``X_ci_high`` columns become X's interval."""
    long = t.reset_index().melt(id_vars="variant", var_name="metric")
    bounds = long["metric"].str.extract(r"^(?P<base>.+)_ci_(?P<side>low|high)$")
    is_bound = bounds["base"].notna()
    out = long[~is_bound].assign(table="per_variant", row="mean")
    for side in ("low", "high"):
        b = long[is_bound & (bounds["side"] == side)].assign(metric=bounds["base"])
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
