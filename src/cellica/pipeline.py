"""The whole recipe in memory: transforms, per-gene classifiers, batch metrics and the summary
of one embedding, without files or a DAG (``cellica.run``).

It computes what the DAG's transform, evaluate, batch-metrics and summarize jobs compute, with
the same functions and parameters (``tests/test_pipeline.py`` holds it equal to the files
path, number for number); for notebooks and for benchmarks that compare many embeddings.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd

from cellica.core.errors import CellicaError


@dataclass(kw_only=True)
class RunResult:
    """What :func:`run` computed.

    Attributes
    ----------
    features : dict of str to AnnData
        Each variant's transformed features (the first evaluation seed's fit).
    per_gene, importances : pandas.DataFrame
        The classifiers' tables of every variant and seed (``evaluate_genes``).
    batch, activity : pandas.DataFrame
        Batch metrics and replicate mAP per variant (``variant_metrics``).
    summary : pandas.DataFrame
        The summary with intervals, comparisons and claims (``summary_table``);
        ``attrs["dims"]`` holds each variant's feature count.
    """

    features: dict[str, Any] = field(default_factory=dict)
    per_gene: pd.DataFrame = field(default_factory=pd.DataFrame)
    importances: pd.DataFrame = field(default_factory=pd.DataFrame)
    batch: pd.DataFrame = field(default_factory=pd.DataFrame)
    activity: pd.DataFrame = field(default_factory=pd.DataFrame)
    summary: pd.DataFrame = field(default_factory=pd.DataFrame)


def run(adata, variants=None, transform=None, *, evaluate=None, truth=None, genes: bool = True,
        threads: int = 2) -> RunResult:
    """Transform, classify and summarise one embedding in memory.

    Parameters
    ----------
    adata : AnnData
        Features with the contract's metadata (``plate, well, batch, perturbation,
        is_control``), as ``cellica embed`` or ``import-features`` write them.
    variants : list of str, optional
        Registry variants (default: the paper's four, :data:`cellica.registry.PAPER_VARIANTS`).
    transform : TransformParams, optional
        Every transform setting but the rotation seed, which follows ``evaluate.seeds``.
    evaluate : EvalParams, optional
        Classifier, batch-metric and summary settings; each seed after the first re-fits the
        seeded variants (ICA start, random rotation), as the DAG does.
    truth : optional
        Ground truth for the recovery metrics: a simulated store's ``(latents, batches)``
        or a factors table.
    genes : bool, default True
        Train the per-gene classifiers (False: a screen of controls only).
    threads : int, default 2
        Threads of the classifiers (the numbers do not depend on it).

    Returns
    -------
    RunResult
        Each variant's features, the per-gene and importance tables, the batch metrics, the
        activity table and the summary, as the DAG's files hold them.
    """
    from cellica.evaluate.batch import variant_metrics
    from cellica.evaluate.genes import evaluate_genes
    from cellica.evaluate.params import EvalParams
    from cellica.evaluate.summary import summary_table
    from cellica.registry import PAPER_VARIANTS, VARIANT_NAMES, seeded_variants
    from cellica.transform.params import TransformParams
    from cellica.transform.variants import make_transform

    params = evaluate or EvalParams()
    transform = transform or TransformParams()
    variants = list(variants or PAPER_VARIANTS)
    unknown = [v for v in variants if v not in VARIANT_NAMES]
    if unknown:
        raise CellicaError(f"run: unknown variant(s) {unknown}; choose from {', '.join(VARIANT_NAMES)}")
    result = RunResult()
    per_gene, importances = [], []
    for variant in variants:
        seeds = params.seeds if variant in seeded_variants() else params.seeds[:1]
        fits = [make_transform(variant, replace(transform, rotation_seed=s)).fit_transform(adata) for s in seeds]
        if genes:
            pg, imp = evaluate_genes(fits if len(fits) > 1 else fits[0], params, variant=variant, threads=threads)
            per_gene.append(pg)
            importances.append(imp.assign(variant=variant))
        result.features[variant] = fits[0]
    result.batch, result.activity = variant_metrics(result.features, params, truth)
    result.per_gene = pd.concat(per_gene, ignore_index=True) if per_gene else \
        pd.DataFrame(columns=["variant", "gene", "seed", "skipped", "split", "auroc_mean", "n_features"])
    result.importances = pd.concat(importances, ignore_index=True) if importances else pd.DataFrame()
    result.summary = summary_table(result.per_gene, result.batch, result.activity, n_boot=params.n_boot,
                                   seed=params.seed)
    result.summary.attrs["dims"] = {variant: fit.n_vars for variant, fit in result.features.items()}
    return result
