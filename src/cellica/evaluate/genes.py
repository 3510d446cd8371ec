"""Per-gene LightGBM classifiers against one shared set of controls, and batch metrics.

For every perturbation (gene) of a features file, a binary LightGBM classifier
separates its samples from the controls (the same controls for every gene).

* Held-out-batch AUROC (the headline): one fold per batch that contains the gene;
  the fold's test side is the gene's samples *and* the controls of that batch,
  the training side everything else. AUROC is computed per fold and per guide,
  and averaged per gene (mean and sd over folds); column ``split`` is ``batch``.
  Genes seen in a single batch fall back to a stratified 3-fold random split
  (``split`` is ``random``, flagged ``single_batch``): their AUROC is not a
  held-out-batch figure and the summary keeps them in a row of their own.
* Within-batch AUROC: a stratified 3-fold random split that ignores batches,
  reported beside it so the gap (how much of the signal was batch) is visible.
* Sparsity: Hoyer sparsity of the feature importances (``gain`` by default),
  averaged over the held-out folds' classifiers.
* Concentration: features ranked by the training fold's importances, ties at the
  top-25% cut sharing it (the expectation over random tie-breaking), biological
  variation measured on the held-out fold (:func:`cellica.evaluate.metrics.concentration`).
* ``no_split``: no classifier of the gene made a single split (every importance
  zero), with the reason; such a gene's AUROC is 0.5 by construction.

Classifiers (``binning``): ``lightgbm`` (default) is the paper's recipe, a fresh
LightGBM ``Dataset`` per fit that bins its own training set (``max_bin`` 255).
``controls`` is a faster path that cuts every feature once at quantiles of the
controls and trains on row subsets of one binned ``Dataset``; it changes AUROC
and sparsity (``benchmarks/evaluate.py`` measures by how much) and is flagged in
the tables' provenance and the logs.

Every fit uses one LightGBM thread with ``deterministic``; genes run in parallel
threads, so the numbers do not depend on the thread count. ``seeds`` repeats all
fits with each seed (LightGBM's seed and the random splits); the tables carry a
``seed`` column.
"""

from __future__ import annotations

import functools
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

import numpy as np
import pandas as pd

from cellica import __version__
from cellica.core.adata import aggregate_wells, read_h5ad
from cellica.core.chunks import gene_chunk
from cellica.core.contracts import FIT_COL, held_back_mask
from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger, progress
from cellica.evaluate._classifiers import GeneClassifiers
from cellica.evaluate._truth import truth_alignment
from cellica.evaluate.params import EvalParams

log = get_logger("evaluate")


def evaluation_rows(obs: pd.DataFrame, warn: bool = True) -> np.ndarray:
    """The rows the classifiers see: all but the controls that fitted the transform (so
    :func:`cellica.core.adata.read_h5ad` can load only these), or every row when every
    control fitted it (with a loud warning, unless ``warn`` is false: the evaluation then
    reuses them, and :func:`prepare` warns)."""
    rows = held_back_mask(obs)  # the one rule (cellica.core.contracts); here it is logged
    ctrl = obs["is_control"].to_numpy(dtype=bool)
    if not rows.all():
        log.info("evaluating against %d held-back controls (%d controls fitted the transform and are left out)",
                 int((ctrl & rows).sum()), int((~rows).sum()))
        return rows
    if FIT_COL in obs and obs[FIT_COL].any() and warn:
        log.warning("every control fitted the transform (fit_fraction 1.0): the evaluation REUSES these %d "
                    "controls, so it compares perturbations with the controls the transform was fit on "
                    "(optimistic: leakage)", int(ctrl.sum()))
    return np.ones(len(obs), bool)


def read_evaluation_rows(path):
    """A features file with only the rows the classifiers see (see :func:`evaluation_rows`)."""
    return read_h5ad(path, rows=functools.partial(evaluation_rows, warn=False))


def prepare(adata, p: EvalParams):
    """Features at the configured level, without the controls that fitted the transform.

    When every control fitted the transform (``transform.fit_fraction: 1.0``) there is
    nothing to hold back: the evaluation reuses them, with a loud warning (the
    classifiers then compare perturbations with controls the transform was fit on).
    """
    keep = evaluation_rows(adata.obs)
    if not keep.all():
        adata = adata[keep].copy()
    if p.level == "wells" and "tile_id" in adata.obs:
        adata = aggregate_wells(adata)
        log.info("evaluating well means: %d wells (aggregated from tiles)", adata.n_obs)
    else:
        log.info("evaluating %d %s", adata.n_obs, _level_name(adata.obs))
    obs = adata.obs
    if p.batch_key not in obs:
        raise CellicaError(f"evaluate: batch_key {p.batch_key!r} is not a metadata column")
    if not obs["is_control"].any():
        raise CellicaError("evaluate: no control samples to compare the perturbations with")
    if p.split == "batch" and obs[p.batch_key].nunique() < 2:
        log.warning("only one batch (%s): held-out-batch evaluation is impossible; every gene falls back to a "
                    "stratified random split (flagged single_batch)", obs[p.batch_key].iloc[0])
    x = np.asarray(adata.X, np.float32)
    if (x.max(axis=0) == x.min(axis=0)).all():  # no temporary copy, unlike std
        raise CellicaError("evaluate: every feature is constant; nothing to classify")
    return adata


def _level_name(obs: pd.DataFrame) -> str:
    """What one sample is: tiles, or (imported profiles without tile ids) wells or other samples."""
    if "tile_id" in obs:
        return "tiles"
    if {"plate", "well"} <= set(obs.columns) and not obs.duplicated(["plate", "well"]).any():
        return "wells (imported profiles, one per well)"
    return "samples as imported (several per well; no tile_id column)"


def evaluate_genes(adata, params: EvalParams | None = None, chunk: str | None = None,
                   *, variant: str = "features", threads: int = 1, shared_dataset: bool = True,
                   truth: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-gene classifiers for the genes of ``chunk``, once per seed (``threads`` genes at a time).

    Parameters
    ----------
    adata
        Features of one variant (AnnData), or a list with one AnnData (or the path of its
        ``.h5ad``, read when its seed comes) per seed of ``params.seeds`` (variants whose
        transform is itself seeded: the rotation of ``pca_rand``, the ICA of ``pca_ica``).
    params
        Classifier settings; ``params.seeds`` lists the seeds.
    chunk
        ``i/n``: only the genes of that chunk (:func:`gene_chunk`).
    variant
        Name in the tables.
    threads
        Genes fitted in parallel, one LightGBM thread each (the numbers do not depend on it).
    shared_dataset
        ``controls`` binning only: see :class:`GeneClassifiers`.
    truth
        Simulated ground truth ``(latents, effects)``: adds :func:`truth_alignment` columns.

    Returns
    -------
    per_gene : pandas.DataFrame
        One row per gene and seed (see the module docstring); skipped genes keep a reason.
    importances : pandas.DataFrame
        Long table seed, gene, feature, importance (mean over held-out folds).
    """
    p = params or EvalParams()
    p.validate()
    per_seed = list(adata) if isinstance(adata, list | tuple) else [adata] * len(p.seeds)
    if len(per_seed) != len(p.seeds):
        raise CellicaError(f"evaluate: {len(per_seed)} features files for {len(p.seeds)} seeds {p.seeds}; give one "
                           "file, or one per seed")
    if p.binning == "controls":
        log.warning("binning: controls (the fast path): bins fixed once at control quantiles, not LightGBM's own "
                    "binning of each training set; AUROC and sparsity differ from the paper's recipe")
    tables, imp_tables = [], []
    for seed, data in zip(p.seeds, per_seed, strict=True):
        if isinstance(data, str | os.PathLike):  # read when its seed comes: one seed's matrix in memory
            data = read_evaluation_rows(data)
        pg, imps = _evaluate_seed(data, p, int(seed), chunk, variant, threads, shared_dataset)
        if truth is not None:
            pg = truth_alignment(pg, imps, prepare(data, p), *truth)
        tables.append(pg)
        imp_tables.append(imps)
    per_gene = pd.concat(tables, ignore_index=True)
    importances = pd.concat(imp_tables, ignore_index=True)
    per_gene.attrs["provenance"] = json.dumps({"params": asdict(p), "cellica_version": __version__, "chunk": chunk,
                                               "variant": variant, "importance_type": p.importance_type,
                                               "binning": p.binning})
    return per_gene, importances


def _evaluate_seed(adata, p: EvalParams, seed: int, chunk, variant: str, threads: int, shared_dataset: bool):
    """The per-gene table and importances of one seed."""
    t0 = time.perf_counter()
    adata = prepare(adata, p)
    obs = adata.obs
    genes = gene_chunk(sorted(set(obs.loc[~obs["is_control"], "perturbation"].astype(str))), chunk)
    clf = GeneClassifiers(np.asarray(adata.X), obs, p, seed=seed, shared_dataset=shared_dataset)
    # LightGBM releases the GIL: one single-threaded model per worker thread, genes in parallel;
    # pool.map keeps the genes' order, so the tables do not depend on the thread count.
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        results = list(progress(pool.map(clf.evaluate_gene, genes), total=len(genes),
                            desc=f"evaluate {variant} seed {seed}", unit="gene"))
    rows, imps = [], []
    names = list(map(str, adata.var_names))
    for row, imp in results:
        row["variant"] = variant
        rows.append(row)
        if imp is not None:
            order = np.argsort(-imp, kind="stable")
            row["top_features"] = ",".join(names[j] for j in order[:5] if imp[j] > 0)
            imps.append(pd.DataFrame({"seed": seed, "gene": row["gene"], "feature": names, "importance": imp}))
    per_gene = pd.DataFrame(rows, columns=None if rows else ["gene", "seed", "variant", "skipped", "no_split"])
    if not genes:
        log.warning("%s: chunk %s holds no gene (more chunks than genes): empty table", variant, chunk)
    n_skipped = int(per_gene["skipped"].astype(bool).sum()) if len(per_gene) else 0
    n_no_split = int(per_gene["no_split"].sum()) if len(per_gene) else 0
    bins = f"{clf.levels} bins at control quantiles" if clf.levels else f"LightGBM's own bins (max_bin {p.max_bin})"
    log.info("%s seed %d: %d genes (%d skipped, %d without any split), %d samples x %d features, %s, in %.1f s",
             variant, seed, len(genes), n_skipped, n_no_split, adata.n_obs, adata.n_vars, bins,
             time.perf_counter() - t0)
    if n_no_split:
        log.warning("%s seed %d: %d gene(s) whose classifiers made no split (AUROC 0.5 by construction): %s",
                    variant, seed, n_no_split, ", ".join(per_gene.loc[per_gene["no_split"], "gene"].head(10)))
    columns = ["seed", "gene", "feature", "importance"]
    importances = pd.concat(imps, ignore_index=True) if imps else pd.DataFrame(columns=columns)
    return per_gene, importances


