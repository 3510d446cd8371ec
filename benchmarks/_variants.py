"""The DAG's transforms, classifiers and summary on one embedding, in this process: every
paper variant fitted (once per seed where the variant is seeded), per-gene classifiers where
the embedding has perturbations, batch metrics on the held-back controls, and the summary
table with its intervals. For benchmarks that compare many embeddings without a DAG each."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from cellica.evaluate.batch import variant_metrics
from cellica.evaluate.genes import evaluate_genes
from cellica.evaluate.params import EvalParams
from cellica.evaluate.summary import summary_table
from cellica.registry import PAPER_VARIANTS, VARIANTS, seeded_variants
from cellica.transform.params import TransformParams
from cellica.transform.variants import make_transform


def evaluate_variants(emb, seeds: list[int], transform: TransformParams, truth=None, genes: bool = True,
                      threads: int = 2, variants: list[str] | None = None) -> pd.DataFrame:
    """Summary table (:func:`cellica.evaluate.summary.summary_table`) of the paper's variants of
    ``emb``; ``.attrs["dims"]`` holds each variant's feature count (a variance share of
    ``n_components`` keeps as many components as it needs).

    ``transform`` holds every transform setting but the rotation seed, which follows ``seeds``;
    ``genes=False`` skips the per-gene classifiers (a screen of controls only); ``truth`` is a
    simulated store's ``(latents, batches)``; ``variants`` a subset of :data:`PAPER_VARIANTS`.
    """
    params = EvalParams(seeds=seeds)
    per_gene, features = [], {}
    for variant in variants or PAPER_VARIANTS:
        fits = [make_transform(variant, replace(transform, rotation_seed=s)).fit_transform(emb)
                for s in (seeds if variant in seeded_variants() else seeds[:1])]
        if genes:
            pg, _ = evaluate_genes(fits if len(fits) > 1 else fits[0], params, variant=variant, threads=threads)
            per_gene.append(pg)
        features[variant] = fits[0]
    batch, activity = variant_metrics(features, params, truth)
    per_gene = pd.concat(per_gene, ignore_index=True) if per_gene else \
        pd.DataFrame(columns=["variant", "gene", "seed", "skipped", "split", "auroc_mean", "n_features"])
    summary = summary_table(per_gene, batch, activity, params.n_boot, params.seed)
    summary.attrs["dims"] = {variant: fit.n_vars for variant, fit in features.items()}
    return summary


def variant_text(s: pd.DataFrame, metrics: list[str]) -> pd.DataFrame:
    """Per-variant means as 'value [low, high]' strings, one column per metric."""
    m = s[(s["table"] == "per_variant") & (s["row"] == "mean") & s["metric"].isin(metrics)].copy()
    ci = m["ci_low"].notna()
    m["text"] = m["value"].map(lambda v: f"{v:.3f}")
    m.loc[ci, "text"] += " [" + m.loc[ci, "ci_low"].map(lambda v: f"{v:.3f}") + ", " + \
        m.loc[ci, "ci_high"].map(lambda v: f"{v:.3f}") + "]"
    wide = m.pivot(index="variant", columns="metric", values="text")
    wide = wide.reindex(index=[v for v in VARIANTS if v in wide.index])
    return wide.reindex(columns=[c for c in metrics if c in wide.columns]).fillna("n/a").reset_index()
