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
  variation measured on the held-out fold (:func:`cellica.metrics.concentration`).
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

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from cellica import __version__
from cellica.adata import aggregate_wells
from cellica.contracts import FIT_COL
from cellica.errors import CellicaError
from cellica.logs import get_logger
from cellica.metrics import biological_variation, concentration, hoyer_sparsity
from cellica.params import EvalParams

log = get_logger("evaluate")
_LGB_LOCK = threading.Lock()  # see GeneClassifiers.fit_predict


def lgb_params(p: EvalParams, seed: int) -> dict[str, Any]:
    """LightGBM parameters (the paper's Table 6), one thread, deterministic."""
    return {
        "objective": "binary", "is_unbalance": p.is_unbalance, "learning_rate": p.learning_rate,
        "num_leaves": p.num_leaves, "feature_fraction": p.feature_fraction, "reg_alpha": p.reg_alpha,
        "reg_lambda": p.reg_lambda, "min_data_in_leaf": p.min_data_in_leaf, "max_bin": p.max_bin,
        "num_threads": 1, "seed": seed, "deterministic": True, "force_col_wise": True, "verbose": -1,
    }


def _auroc(y: np.ndarray, score: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, score)) if 0 < y.sum() < y.size else float("nan")


def quantise(x: np.ndarray, reference: np.ndarray, levels: int) -> np.ndarray:
    """Each feature's bin code, 0 .. ``levels`` - 1, at quantiles of the reference rows.

    Used by the ``controls`` binning only: every fit of every gene then sees the
    same bins, so training on row subsets of one binned ``Dataset`` gives exactly
    the classifier that a fresh ``Dataset`` of the codes gives. This is *not*
    LightGBM's own binning of each training set (the paper's recipe), and it
    changes the numbers. Only feature values are used, never labels.

    Parameters
    ----------
    x
        Features, samples x dims.
    reference
        Boolean mask or indices of the rows whose quantiles define the bins (the controls).
    levels
        Number of bins per feature; tied quantiles merge bins (features with few distinct
        values get fewer codes).

    Returns
    -------
    numpy.ndarray
        float32 codes with the shape of ``x``.
    """
    if levels < 2:
        raise CellicaError(f"quantise: levels must be >= 2, got {levels}")
    ref = np.asarray(x[reference], np.float64)
    if ref.shape[0] == 0:
        raise CellicaError("quantise: no reference rows to take quantiles from")
    edges = np.quantile(ref, np.arange(1, levels) / levels, axis=0)
    codes = np.empty(x.shape, np.float32)
    for j in range(x.shape[1]):
        codes[:, j] = np.searchsorted(np.unique(edges[:, j]), x[:, j], side="right")
    return codes


def bin_levels(n_controls: int, max_bin: int) -> int:
    """Bins per feature of the ``controls`` binning: ``max_bin``, fewer when there are
    under 3 controls per bin (LightGBM's own ``min_data_in_bin``)."""
    return int(np.clip(n_controls // 3, 2, max_bin))


class GeneClassifiers:
    """Fits the classifiers of many genes against one shared set of controls.

    Parameters
    ----------
    x
        Features, samples x dims.
    obs
        Metadata with ``perturbation``, ``is_control``, ``batch`` (and ``guide`` if any).
    params
        LightGBM and cross-validation settings; ``params.binning`` picks the path.
    seed
        LightGBM's seed and the seed of the random splits.
    shared_dataset
        ``controls`` binning only: ``True`` trains on row subsets of one binned
        Dataset (fast), ``False`` builds a Dataset of the same codes per fit
        (identical classifiers; for the tests and benchmarks).
    """

    def __init__(self, x: np.ndarray, obs: pd.DataFrame, params: EvalParams, seed: int = 0,
                 shared_dataset: bool = True):
        import lightgbm as lgb

        self.lgb = lgb
        self.x = np.ascontiguousarray(x, dtype=np.float32)  # biological variation is measured on these
        self.obs = obs
        self.p = params
        self.seed = int(seed)
        self.params = lgb_params(params, self.seed)
        self.ctrl = obs["is_control"].to_numpy(dtype=bool)
        self.batch = obs[params.batch_key].astype(str).to_numpy()
        self.perts = obs["perturbation"].astype(str).to_numpy()
        self.guide = obs["guide"].astype(str).to_numpy() if "guide" in obs else self.perts
        self.levels = None
        self.full = None
        self.inputs = self.x  # what the classifiers see
        if params.binning == "controls":
            self.levels = bin_levels(int(self.ctrl.sum()), params.max_bin)
            self.inputs = quantise(self.x, self.ctrl, self.levels)
            if shared_dataset:
                self.full = lgb.Dataset(self.inputs, label=np.zeros(len(self.x)), params=self._ds_params(),
                                        free_raw_data=False).construct()

    def _ds_params(self) -> dict[str, Any]:
        keys = ("max_bin", "min_data_in_leaf", "verbose", "seed")
        ds = {k: self.params[k] for k in keys}
        if self.p.binning == "controls":
            ds["min_data_in_bin"] = 1  # one LightGBM bin per code: rare codes are never merged
        return ds

    def fit_predict(self, train: np.ndarray, y_train: np.ndarray, test: np.ndarray):
        """Train on rows ``train`` with labels, predict rows ``test``; returns (scores, importances).

        Equal to ``lightgbm.train(params, Dataset(...), n_trees)``. LightGBM's C API crashed
        (segmentation fault) when one thread created a Dataset while another freed a Booster,
        so creation, prediction and freeing hold one process-wide lock; only the boosting
        rounds, nearly all of the time, run in parallel.
        """
        with _LGB_LOCK:
            if self.full is not None:
                ds = self.full.subset(np.sort(train)).construct()
                order = np.argsort(np.argsort(train))  # labels follow the sorted row order
                y_sorted = np.empty_like(y_train)
                y_sorted[order] = y_train
                ds.set_label(y_sorted.astype(float))
            else:
                ds = self.lgb.Dataset(self.inputs[train], label=y_train.astype(float),
                                      params=self._ds_params()).construct()
            booster = self.lgb.Booster(params=self.params, train_set=ds)
        for _ in range(self.p.n_trees):  # as lightgbm.train: every round, even after no split is left
            booster.update()
        with _LGB_LOCK:
            # As lightgbm.train returns it: the model re-read from its text (rounded split gains).
            booster.model_from_string(booster.model_to_string())
            score = booster.predict(self.inputs[test])
            imp = booster.feature_importance(importance_type=self.p.importance_type).astype(np.float64)
            del booster, ds  # the last references: freed here, under the lock
        return score, imp

    # ------------------------------------------------------------------ one gene
    def evaluate_gene(self, gene: str) -> tuple[dict[str, Any], np.ndarray | None]:
        """All metrics of one gene; returns (row of the per-gene table, mean importances)."""
        p = self.p
        pert = (self.perts == gene) & ~self.ctrl
        batches = sorted(set(self.batch[pert]))
        row: dict[str, Any] = {
            "gene": gene, "seed": self.seed, "n_samples": int(pert.sum()), "n_controls": int(self.ctrl.sum()),
            "n_features": int(self.x.shape[1]), "guides": ",".join(sorted(set(self.guide[pert]))),
            "batches": ",".join(batches), "n_batches": len(batches), "single_batch": len(batches) == 1,
            "split": "", "skipped": "", "no_split": False, "no_split_reason": "",
        }
        if pert.sum() < p.min_samples:
            row["skipped"] = f"only {int(pert.sum())} sample(s) (< min_samples {p.min_samples})"
            return row, None
        folds, split, notes = self._folds(pert, batches)
        if not folds:
            row["skipped"] = "; ".join(notes) or "no usable fold"
            return row, None
        aurocs, guide_auc, sparsities, concs, imps, curves = [], {}, [], [], [], []
        for train, test in folds:
            y_train, y_test = pert[train], pert[test]
            score, imp = self.fit_predict(train, y_train, test)
            aurocs.append(_auroc(y_test, score))
            curves.append(_roc_points(y_test, score))
            for g in sorted(set(self.guide[test][y_test])):
                keep = ~y_test | (self.guide[test] == g)
                guide_auc.setdefault(g, []).append(_auroc(y_test[keep], score[keep]))
            imps.append(imp)
            sparsities.append(hoyer_sparsity(imp))
            bio_test = biological_variation(self.x[test][y_test], self.x[test][~y_test])
            concs.append(concentration(imp, bio_test, p.top_fraction))
        within = self._within_batch_auroc(pert)
        mean_imp = np.mean(imps, axis=0)
        no_split = not any(i.sum() > 0 for i in imps)
        row.update(
            split=split, auroc_mean=float(np.nanmean(aurocs)), auroc_sd=float(np.nanstd(aurocs)), n_folds=len(folds),
            auroc_within=within, auroc_gap=within - float(np.nanmean(aurocs)),
            auroc_by_guide=json.dumps({g: round(float(np.nanmean(v)), 4) for g, v in guide_auc.items()}),
            sparsity=_nanmean(sparsities), concentration=_nanmean(concs), no_split=no_split,
            no_split_reason=self._no_split_reason(pert, folds) if no_split else "",
            notes="; ".join(notes), roc_folds=json.dumps(curves),
        )
        return row, mean_imp

    def _no_split_reason(self, pert: np.ndarray, folds) -> str:
        """Why no tree split: the usual causes, with the numbers of the smallest training set."""
        n_pos = min(int(pert[train].sum()) for train, _ in folds)
        p = self.p
        return (f"no classifier made a split: at most {n_pos} perturbed training samples per fold against "
                f"min_data_in_leaf={p.min_data_in_leaf}, reg_alpha={p.reg_alpha}, {p.n_trees} trees at "
                f"learning_rate={p.learning_rate}; AUROC is 0.5 by construction")

    def _folds(self, pert: np.ndarray, batches: list[str]):
        notes = []
        if len(batches) == 1 or self.p.split == "random":
            if len(batches) == 1 and self.p.split == "batch":
                notes.append(f"single batch {batches[0]}: stratified random split instead of held-out batch")
            return self._random_folds(pert), "random", notes
        folds = []
        for b in batches:
            held = self.batch == b
            test = np.flatnonzero(held & (pert | self.ctrl))
            train = np.flatnonzero(~held & (pert | self.ctrl))
            if not (self.ctrl & held).any():
                notes.append(f"batch {b} has no controls: fold skipped")
                continue
            if pert[train].sum() < 2:
                notes.append(f"holding out batch {b} leaves < 2 perturbed training samples: fold skipped")
                continue
            folds.append((train, test))
        return folds, "batch", notes

    def _random_folds(self, pert: np.ndarray, n_splits: int = 3):
        from sklearn.model_selection import StratifiedKFold

        rows = np.flatnonzero(pert | self.ctrl)
        y = pert[rows]
        n_splits = min(n_splits, int(y.sum()))
        if n_splits < 2:
            return []
        skf = StratifiedKFold(n_splits=n_splits, shuffle=True, random_state=self.seed)
        return [(rows[a], rows[b]) for a, b in skf.split(rows, y)]

    def _within_batch_auroc(self, pert: np.ndarray) -> float:
        scores = []
        for train, test in self._random_folds(pert):
            score, _ = self.fit_predict(train, pert[train], test)
            scores.append(_auroc(pert[test], score))
        return float(np.nanmean(scores)) if scores else float("nan")


def _nanmean(values: list[float]) -> float:
    """Mean ignoring NaN (e.g. the sparsity of a model that used no feature); NaN if all are."""
    arr = np.asarray(values, np.float64)
    return float(arr[np.isfinite(arr)].mean()) if np.isfinite(arr).any() else float("nan")


def _roc_points(y: np.ndarray, score: np.ndarray, n_points: int = 40) -> list[list[float]]:
    """One fold's ROC curve, thinned for the reports: ``[fpr, tpr]`` (empty without both classes)."""
    from sklearn.metrics import roc_curve

    if not 0 < y.sum() < y.size:
        return [[], []]
    fpr, tpr, _ = roc_curve(y, score)
    keep = np.unique(np.linspace(0, fpr.size - 1, min(n_points, fpr.size)).round().astype(int))
    return [np.round(fpr[keep], 4).tolist(), np.round(tpr[keep], 4).tolist()]


def mean_roc(curves: list[list[list[float]]], grid: int = 101) -> tuple[np.ndarray, np.ndarray]:
    """Vertical average of per-fold ROC curves on an FPR grid.

    The area under it is the mean of the folds' areas (to the grid's resolution), so
    it agrees with the mean held-out AUROC of the tables, unlike a curve of scores
    pooled over folds (which mixes the folds' score scales).
    """
    fpr = np.linspace(0, 1, grid)
    tprs = [np.interp(fpr, f, t) for f, t in curves if len(f) > 1]
    if not tprs:
        return fpr, np.full(grid, np.nan)
    return fpr, np.mean(tprs, axis=0)


def gene_chunk(genes: list[str], chunk: str | None) -> list[str]:
    """The genes of chunk ``i/n`` (sorted genes, every n-th from i)."""
    if not chunk or chunk == "none":
        return genes
    try:
        i, n = (int(v) for v in chunk.split("/"))
    except ValueError:
        raise CellicaError(f"chunk {chunk!r} is not of the form i/n") from None
    if n < 1 or not 0 <= i < n:
        raise CellicaError(f"chunk {chunk!r} is out of range")
    return genes[i::n]


def prepare(adata, p: EvalParams):
    """Features at the configured level, without the controls that fitted the transform.

    When every control fitted the transform (``transform.fit_fraction: 1.0``) there is
    nothing to hold back: the evaluation reuses them, with a loud warning (the
    classifiers then compare perturbations with controls the transform was fit on).
    """
    obs = adata.obs
    ctrl = obs["is_control"].to_numpy(dtype=bool)
    if FIT_COL in obs and obs[FIT_COL].any():
        fitted = obs[FIT_COL].to_numpy(dtype=bool)
        if (ctrl & ~fitted).any():
            log.info("evaluating against %d held-back controls (%d controls fitted the transform and are left out)",
                     int((ctrl & ~fitted).sum()), int(fitted.sum()))
            adata = adata[~fitted].copy()
        else:
            log.warning("every control fitted the transform (fit_fraction 1.0): the evaluation REUSES these %d "
                        "controls, so it compares perturbations with the controls the transform was fit on "
                        "(optimistic: leakage)", int(ctrl.sum()))
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
    const = x.std(axis=0) == 0
    if const.all():
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
                   variant: str = "features", threads: int = 1, shared_dataset: bool = True,
                   truth: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-gene classifiers for the genes of ``chunk``, once per seed (``threads`` genes at a time).

    Parameters
    ----------
    adata
        Features of one variant (AnnData), or a list with one AnnData per seed of
        ``params.seeds`` (variants whose transform is itself seeded: the rotation
        of ``pca_rand``, the ICA of ``pca_ica``).
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
        results = list(tqdm(pool.map(clf.evaluate_gene, genes), total=len(genes),
                            desc=f"evaluate {variant} seed {seed}", unit="gene", disable=None))
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


def variant_metrics(features: dict[str, Any], params: EvalParams | None = None,
                    truth: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Batch metrics, replicate mAP and (simulated screens) ground-truth recovery of every variant.

    Parameters
    ----------
    features
        Variant name -> its features (AnnData).
    params
        Evaluation settings (the first seed seeds the subsamples and the mAP null).
    truth
        ``(latents, batches)`` of a simulated store: adds MCC and probe R^2 columns.

    Returns
    -------
    batch : pandas.DataFrame
        One row per variant (:func:`batch_metrics`, plus ``truth_*`` columns).
    activity : pandas.DataFrame
        mAP per variant and perturbation (:func:`phenotypic_activity`).
    """
    from cellica.threads import fixed_threads

    p = params or EvalParams()
    p.validate()
    rows, activity = [], []
    with fixed_threads():  # BLAS reductions split by thread count: fix it so the numbers do not move
        for variant, adata in features.items():
            row = batch_metrics(adata, variant, p)
            if truth is not None:
                from cellica.recovery import truth_recovery

                row.update(truth_recovery(adata, *truth, seed=p.seed))
                log.info("%s: ground truth MCC %.3f, factor probe R2 %.3f, batch-parameter probe R2 %.3f", variant,
                         row["truth_mcc"], row["truth_factor_r2"], row["truth_batch_r2"])
            act = phenotypic_activity(adata, variant, p)
            log.info("%s: batch accuracy logistic %.3f, LightGBM %.3f (chance %.3f), silhouette %.3f, kNN mixing "
                     "%.3f; %d of %d active", variant, row["batch_accuracy"], row["batch_accuracy_lgbm"],
                     row["chance_accuracy"], row["silhouette"], row["knn_mixing"], int(act["significant"].sum()),
                     len(act))
            rows.append(row)
            activity.append(act)
    return pd.DataFrame(rows), pd.concat(activity, ignore_index=True)


def batch_metrics(adata, variant: str, p: EvalParams | None = None) -> dict[str, Any]:
    """Batch signal left in the controls: batch classifier, silhouette, kNN mixing."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import balanced_accuracy_score, silhouette_score
    from sklearn.model_selection import StratifiedKFold, cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    p = p or EvalParams()
    adata = prepare(adata, p)
    ctrl = adata.obs["is_control"].to_numpy(dtype=bool)
    x = np.asarray(adata.X, np.float64)[ctrl]
    b = adata.obs[p.batch_key].astype(str).to_numpy()[ctrl]
    rng = np.random.default_rng(p.seed)
    if len(x) > p.max_batch_samples:
        pick = np.sort(rng.choice(len(x), p.max_batch_samples, replace=False))
        x, b = x[pick], b[pick]
    n_batches = len(np.unique(b))
    out = {"variant": variant, "n_controls": int(len(x)), "n_batches": n_batches, "chance_accuracy": 1.0 / max(n_batches, 1)}
    if n_batches < 2:
        nan = float("nan")
        return {**out, "batch_accuracy": nan, "batch_accuracy_lgbm": nan, "silhouette": nan, "knn_mixing": nan}
    from cellica.metrics import knn_batch_mixing

    folds = min(5, int(pd.Series(b).value_counts().min()))
    cv = StratifiedKFold(folds, shuffle=True, random_state=p.seed) if folds >= 2 else None
    # Both classifiers weight batches equally (class_weight balanced) and are scored by
    # balanced accuracy, with a 95% bootstrap interval over the controls.
    models = {"batch_accuracy": make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, C=1.0,
                                                                                      class_weight="balanced")),
              "batch_accuracy_lgbm": _lgbm_batch_classifier(p)}
    for name, model in models.items():
        if cv is None:
            out[name], out[f"{name}_ci_low"], out[f"{name}_ci_high"] = (float("nan"),) * 3
            continue
        pred = cross_val_predict(model, x, b, cv=cv)
        out[name] = float(balanced_accuracy_score(b, pred))
        out[f"{name}_ci_low"], out[f"{name}_ci_high"] = _bootstrap_balanced_accuracy(b, pred, p.n_boot, p.seed)
    out["silhouette"] = float(silhouette_score(x, b))
    out["knn_mixing"] = knn_batch_mixing(x, b)
    return out


def _lgbm_batch_classifier(p: EvalParams):
    """A balanced multi-class LightGBM batch classifier (the evaluation's own tree settings)."""
    from lightgbm import LGBMClassifier

    return LGBMClassifier(n_estimators=p.n_trees, learning_rate=p.learning_rate, num_leaves=p.num_leaves,
                          colsample_bytree=p.feature_fraction, reg_alpha=p.reg_alpha, reg_lambda=p.reg_lambda,
                          min_child_samples=p.min_data_in_leaf, class_weight="balanced", n_jobs=1,
                          random_state=p.seed, deterministic=True, force_col_wise=True, verbose=-1)


def _bootstrap_balanced_accuracy(y: np.ndarray, pred: np.ndarray, n_boot: int, seed: int) -> tuple[float, float]:
    """95% percentile interval of the balanced accuracy (mean recall over batches) over
    controls resampled with replacement; resamples that miss a batch are redrawn."""
    rng = np.random.default_rng(seed)
    _, yi = np.unique(y, return_inverse=True)
    k = int(yi.max()) + 1
    correct = (np.asarray(y) == np.asarray(pred)).astype(np.float64)
    stats = []
    for _ in range(n_boot):
        i = rng.integers(0, len(yi), len(yi))
        n = np.bincount(yi[i], minlength=k)
        if (n > 0).all():
            stats.append(float((np.bincount(yi[i], weights=correct[i], minlength=k) / n).mean()))
    lo, hi = np.percentile(stats, [2.5, 97.5]) if stats else (np.nan, np.nan)
    return float(lo), float(hi)


def phenotypic_activity(adata, variant: str, p: EvalParams | None = None) -> pd.DataFrame:
    """mAP of retrieving each perturbation's replicates against controls (copairs), per perturbation.

    Computed on well means (replicate wells), cosine distance; ``p_value`` from
    copairs' permutation null, ``significant`` at ``p.map_threshold`` after FDR.
    """
    from copairs.map import average_precision, mean_average_precision

    p = p or EvalParams()
    adata = prepare(adata, EvalParams(**{**asdict(p), "level": "tiles"}))
    wells = aggregate_wells(adata) if "tile_id" in adata.obs else adata
    obs = wells.obs.reset_index(drop=True)
    columns = ["variant", "perturbation", "map", "p_value", "p_value_fdr", "significant"]
    replicated = obs.loc[~obs["is_control"], "perturbation"].value_counts()
    if (replicated >= 2).sum() == 0:
        log.info("%s: no perturbation with >= 2 replicate wells: no mAP to compute", variant)
        return pd.DataFrame(columns=columns)
    meta = pd.DataFrame({"perturbation": obs["perturbation"].astype(str),
                         "ref": np.where(obs["is_control"], np.arange(len(obs)), -1)})
    feats = np.asarray(wells.X, np.float64)
    ap = average_precision(meta, feats, pos_sameby=["perturbation", "ref"], pos_diffby=[], neg_sameby=[],
                           neg_diffby=["perturbation", "ref"], progress_bar=False)
    ap = ap[ap["ref"] == -1]
    import tempfile

    # copairs caches its null distributions under ~/.copairs by default: keep them out of the
    # user's home (a throw-away folder; the null is seeded, so nothing is lost).
    with tempfile.TemporaryDirectory(prefix="cellica-copairs-") as cache:
        m = mean_average_precision(ap, sameby=["perturbation"], null_size=p.map_null_size,
                                   threshold=p.map_threshold, seed=p.seed, progress_bar=False, cache_dir=cache)
    m = m.rename(columns={"mean_average_precision": "map", "corrected_p_value": "p_value_fdr",
                          "below_corrected_p": "significant"})
    m["variant"] = variant
    return m[columns]


def truth_alignment(per_gene: pd.DataFrame, importances: pd.DataFrame, adata, latents: pd.DataFrame,
                    effects: pd.DataFrame) -> pd.DataFrame:
    """Synthetic screens: does each gene's classifier lean on features that track the factors it moves?

    For the gene's most important feature, the latent factor it correlates with
    most (|Pearson r| over all samples) is compared with the factors the gene
    truly shifts (non-zero entries of the simulator's effect matrix).
    """
    factors = [c for c in effects.columns if c not in ("gene", "effect_class")]
    z = latents.set_index("tile_id").reindex(adata.obs_names)[factors]
    if z.isna().any().any():
        raise CellicaError("truth alignment: the features' samples are not the simulated store's tiles")
    x = pd.DataFrame(np.asarray(adata.X, np.float64), index=adata.obs_names, columns=list(map(str, adata.var_names)))
    xs = (x - x.mean()) / x.std().replace(0, np.nan)
    zs = (z - z.mean()) / z.std()
    corr = (xs.T @ zs) / (len(x) - 1)  # features x factors
    eff = effects.set_index("gene")
    out = per_gene.copy()
    cols = {"true_factors": [], "top_feature_factor": [], "top_feature_factor_corr": [], "top_feature_hits_truth": []}
    for gene in out["gene"]:
        truth = [f for f in factors if gene in eff.index and eff.loc[gene, f] != 0]
        imp = importances[importances["gene"] == gene]
        if imp.empty or imp["importance"].max() <= 0:
            best, r = "", float("nan")
        else:
            top = str(imp.loc[imp["importance"].idxmax(), "feature"])
            row = corr.loc[top].abs()
            best, r = str(row.idxmax()), float(row.max())
        cols["true_factors"].append(",".join(truth))
        cols["top_feature_factor"].append(best)
        cols["top_feature_factor_corr"].append(r)
        cols["top_feature_hits_truth"].append(bool(best) and best in truth)
    for k, v in cols.items():
        out[k] = v
    return out
