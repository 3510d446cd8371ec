"""Per-gene LightGBM classifiers against one shared set of controls, and batch metrics.

For every perturbation (gene) of a features file, a binary LightGBM classifier
separates its samples from the controls (the same controls for every gene).

* Held-out-batch AUROC (the headline): one fold per batch that contains the gene;
  the fold's test side is the gene's samples *and* the controls of that batch,
  the training side everything else. AUROC is computed per fold and per guide,
  and averaged per gene (mean and sd over folds). Genes seen in a single batch
  fall back to a stratified 3-fold random split and are flagged ``single_batch``.
* Within-batch AUROC: a stratified 3-fold random split that ignores batches,
  reported beside it so the gap (how much of the signal was batch) is visible.
* Sparsity: Hoyer sparsity of the feature importances (``gain`` by default),
  averaged over the held-out folds' classifiers.
* Concentration: features ranked by the training fold's importances (ties by
  the training fold's biological variation), biological variation measured on
  the held-out fold (:func:`cellica.metrics.concentration`).

Speed: the features are binned once, at quantiles of the controls
(:func:`quantise`), into one LightGBM ``Dataset``; every fold of every gene
trains on a row subset of it (no re-binning of the 22k shared controls), one
thread per model, genes in parallel. Because the bins are fixed before any fit,
a fresh ``Dataset`` per fit (the straightforward way) finds exactly the same
bins and gives exactly the same classifiers and AUROCs (tested, and measured by
``benchmarks/evaluate.py``).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from cellica import __version__
from cellica.adata import aggregate_wells
from cellica.errors import CellicaError
from cellica.logs import get_logger
from cellica.metrics import biological_variation, concentration, hoyer_sparsity, rank_features
from cellica.params import EvalParams

log = get_logger("evaluate")


def lgb_params(p: EvalParams) -> dict[str, Any]:
    """LightGBM parameters (the paper's defaults), one thread, deterministic."""
    return {
        "objective": "binary", "is_unbalance": p.is_unbalance, "learning_rate": p.learning_rate,
        "num_leaves": p.num_leaves, "feature_fraction": p.feature_fraction, "reg_alpha": p.reg_alpha,
        "reg_lambda": p.reg_lambda, "min_data_in_leaf": p.min_data_in_leaf, "max_bin": p.max_bin,
        "num_threads": 1, "seed": p.seed, "deterministic": True, "force_col_wise": True, "verbose": -1,
    }


def _auroc(y: np.ndarray, score: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(y, score)) if 0 < y.sum() < y.size else float("nan")


def quantise(x: np.ndarray, reference: np.ndarray, levels: int) -> np.ndarray:
    """Each feature's bin code, 0 .. ``levels`` - 1, at quantiles of the reference rows.

    LightGBM bins every feature into at most ``max_bin`` histogram bins anyway, at
    quantiles of each training set, so a classifier only ever sees bin codes. Fixing
    the bins once, on the shared controls, means every fit of every gene sees the
    same bins: training on row subsets of one binned ``Dataset`` then gives exactly
    the classifier that a fresh ``Dataset`` per fit gives (each code is its own
    LightGBM bin when ``levels <= max_bin``), and split thresholds mean the same
    thing for every gene and fold. Only feature values are used, never labels.

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
    """Bins per feature: ``max_bin``, fewer when there are under 3 controls per bin.

    The same resolution LightGBM's own binning allows (it merges bins holding fewer
    than 3 rows, ``min_data_in_bin``). The codes are then binned with
    ``min_data_in_bin=1``, so no code is ever merged, whichever rows a fold trains on.
    """
    return int(np.clip(n_controls // 3, 2, max_bin))


class GeneClassifiers:
    """Fits the classifiers of many genes on one shared, pre-binned matrix.

    Parameters
    ----------
    x
        Features, samples x dims.
    obs
        Metadata with ``perturbation``, ``is_control``, ``batch`` (and ``guide`` if any).
    params
        LightGBM and cross-validation settings.
    shared_bins
        ``True``: one binned Dataset, trained on row subsets (fast). ``False``: a new
        LightGBM Dataset for every fit (the straightforward way; for benchmarks). Both
        see the same :func:`quantise` codes and give the same classifiers.
    model_threads
        LightGBM threads per model (1: the pipeline runs genes in parallel instead).
    """

    def __init__(self, x: np.ndarray, obs: pd.DataFrame, params: EvalParams, shared_bins: bool = True,
                 model_threads: int = 1):
        import lightgbm as lgb

        self.lgb = lgb
        self.x = np.ascontiguousarray(x, dtype=np.float32)  # biological variation is measured on these
        self.obs = obs
        self.p = params
        self.params = {**lgb_params(params), "num_threads": model_threads}
        self.ctrl = obs["is_control"].to_numpy(dtype=bool)
        self.levels = bin_levels(int(self.ctrl.sum()), params.max_bin)
        self.codes = quantise(self.x, self.ctrl, self.levels)  # what every classifier sees
        self.batch = obs[params.batch_key].astype(str).to_numpy()
        self.guide = obs["guide"].astype(str).to_numpy() if "guide" in obs else obs["perturbation"].astype(str).to_numpy()
        self.shared_bins = shared_bins
        if shared_bins:
            self.full = lgb.Dataset(self.codes, label=np.zeros(len(self.x)), params=self._ds_params(),
                                    free_raw_data=False).construct()

    def _ds_params(self) -> dict[str, Any]:
        # One LightGBM bin per code: min_data_in_bin=1 so rare codes are never merged.
        return {**{k: self.params[k] for k in ("max_bin", "min_data_in_leaf", "verbose")}, "min_data_in_bin": 1}

    def fit_predict(self, train: np.ndarray, y_train: np.ndarray, test: np.ndarray):
        """Train on rows ``train`` with labels, predict rows ``test``; returns (scores, booster)."""
        if self.shared_bins:
            ds = self.full.subset(np.sort(train)).construct()
            order = np.argsort(np.argsort(train))  # labels follow the sorted row order
            y_sorted = np.empty_like(y_train)
            y_sorted[order] = y_train
            ds.set_label(y_sorted.astype(float))
        else:
            ds = self.lgb.Dataset(self.codes[train], label=y_train.astype(float), params=self._ds_params())
        booster = self.lgb.train(self.params, ds, num_boost_round=self.p.n_trees)
        return booster.predict(self.codes[test]), booster

    # ------------------------------------------------------------------ one gene
    def evaluate_gene(self, gene: str) -> tuple[dict[str, Any], np.ndarray | None]:
        """All metrics of one gene; returns (row of the per-gene table, mean importances)."""
        p = self.p
        pert = (self.obs["perturbation"].astype(str).to_numpy() == gene) & ~self.ctrl
        batches = sorted(set(self.batch[pert]))
        row: dict[str, Any] = {
            "gene": gene, "n_samples": int(pert.sum()), "n_controls": int(self.ctrl.sum()),
            "guides": ",".join(sorted(set(self.guide[pert]))), "batches": ",".join(batches),
            "n_batches": len(batches), "single_batch": len(batches) == 1, "skipped": "",
        }
        if pert.sum() < p.min_samples:
            row["skipped"] = f"only {int(pert.sum())} sample(s) (< min_samples {p.min_samples})"
            return row, None
        folds, notes = self._folds(pert, batches)
        if not folds:
            row["skipped"] = "; ".join(notes) or "no usable fold"
            return row, None
        aurocs, guide_auc, sparsities, concs, imps, pooled = [], {}, [], [], [], []
        for train, test in folds:
            y_train, y_test = pert[train], pert[test]
            score, booster = self.fit_predict(train, y_train, test)
            aurocs.append(_auroc(y_test, score))
            pooled.append((y_test, score))
            for g in sorted(set(self.guide[test][y_test])):
                keep = ~y_test | (self.guide[test] == g)
                guide_auc.setdefault(g, []).append(_auroc(y_test[keep], score[keep]))
            imp = booster.feature_importance(importance_type=p.importance_type).astype(np.float64)
            imps.append(imp)
            sparsities.append(hoyer_sparsity(imp))
            bio_train = biological_variation(self.x[train][y_train], self.x[train][~y_train])
            bio_test = biological_variation(self.x[test][y_test], self.x[test][~y_test])
            concs.append(concentration(rank_features(imp, bio_train), bio_test, p.top_fraction))
        within = self._within_batch_auroc(pert)
        mean_imp = np.mean(imps, axis=0)
        row.update(
            auroc_mean=float(np.nanmean(aurocs)), auroc_sd=float(np.nanstd(aurocs)), n_folds=len(folds),
            auroc_within=within, auroc_gap=within - float(np.nanmean(aurocs)),
            auroc_by_guide=json.dumps({g: round(float(np.nanmean(v)), 4) for g, v in guide_auc.items()}),
            sparsity=_nanmean(sparsities), concentration=_nanmean(concs),
            notes="; ".join(notes), **_roc_points(pooled),
        )
        return row, mean_imp

    def _folds(self, pert: np.ndarray, batches: list[str]):
        notes = []
        if len(batches) == 1 or self.p.split == "random":
            if len(batches) == 1 and self.p.split == "batch":
                notes.append(f"single batch {batches[0]}: stratified random split instead of held-out batch")
            return self._random_folds(pert), notes
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
        return folds, notes

    def _random_folds(self, pert: np.ndarray, n_splits: int = 3):
        from sklearn.model_selection import StratifiedKFold

        rows = np.flatnonzero(pert | self.ctrl)
        y = pert[rows]
        n_splits = min(n_splits, int(y.sum()))
        if n_splits < 2:
            return []
        skf = StratifiedKFold(n_splits=n_splits, shuffle=True, random_state=self.p.seed)
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


def _roc_points(pooled: list[tuple[np.ndarray, np.ndarray]], n_points: int = 40) -> dict[str, str]:
    """The ROC curve of the held-out scores pooled over folds, thinned for the reports (JSON)."""
    from sklearn.metrics import roc_curve

    y = np.concatenate([p[0] for p in pooled])
    s = np.concatenate([p[1] for p in pooled])
    if not 0 < y.sum() < y.size:
        return {"roc_fpr": "[]", "roc_tpr": "[]"}
    fpr, tpr, _ = roc_curve(y, s)
    keep = np.unique(np.linspace(0, fpr.size - 1, min(n_points, fpr.size)).round().astype(int))
    return {"roc_fpr": json.dumps(np.round(fpr[keep], 4).tolist()), "roc_tpr": json.dumps(np.round(tpr[keep], 4).tolist())}


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
    """Features at the configured level, without the controls that fitted the transform."""
    from cellica.transforms import FIT_COL

    if FIT_COL in adata.obs and adata.obs[FIT_COL].any():
        held = ~adata.obs[FIT_COL].to_numpy(dtype=bool)
        log.info("evaluating against %d held-back controls (%d controls fitted the transform and are left out)",
                 int((held & adata.obs["is_control"].to_numpy()).sum()), int((~held).sum()))
        adata = adata[held].copy()
    if p.level == "wells" and "tile_id" in adata.obs:
        adata = aggregate_wells(adata)
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


def evaluate_genes(adata, params: EvalParams | None = None, chunk: str | None = None,
                   variant: str = "features", shared_bins: bool = True,
                   threads: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-gene classifiers for the genes of ``chunk`` (``threads`` genes at a time).

    Returns
    -------
    per_gene : pandas.DataFrame
        One row per gene (see the module docstring); skipped genes keep a reason.
    importances : pandas.DataFrame
        Long table gene, feature, importance (mean over held-out folds).
    """
    p = params or EvalParams()
    t0 = time.perf_counter()
    adata = prepare(adata, p)
    obs = adata.obs
    genes = sorted(set(obs.loc[~obs["is_control"], "perturbation"].astype(str)))
    genes = gene_chunk(genes, chunk)
    clf = GeneClassifiers(np.asarray(adata.X), obs, p, shared_bins=shared_bins)
    rows, imps = [], []
    # LightGBM releases the GIL: one single-threaded model per worker thread, genes in parallel.
    with ThreadPoolExecutor(max_workers=max(1, threads)) as pool:
        results = list(tqdm(pool.map(clf.evaluate_gene, genes), total=len(genes), desc=f"evaluate {variant}",
                            unit="gene", disable=None))
    for row, imp in results:
        gene = row["gene"]
        row["variant"] = variant
        rows.append(row)
        if imp is not None:
            order = np.argsort(-imp)
            row["top_features"] = ",".join(str(adata.var_names[j]) for j in order[:5] if imp[j] > 0)
            imps.append(pd.DataFrame({"gene": gene, "feature": list(map(str, adata.var_names)), "importance": imp}))
    per_gene = pd.DataFrame(rows)
    skipped = per_gene["skipped"].astype(bool).sum() if len(per_gene) else 0
    log.info("%s: %d genes (%d skipped) at %s level, %d samples x %d features (%d bins at control quantiles), "
             "in %.1f s", variant, len(genes), skipped, p.level, adata.n_obs, adata.n_vars, clf.levels,
             time.perf_counter() - t0)
    importances = pd.concat(imps, ignore_index=True) if imps else pd.DataFrame(columns=["gene", "feature", "importance"])
    per_gene.attrs["provenance"] = json.dumps({"params": asdict(p), "cellica_version": __version__, "chunk": chunk,
                                               "variant": variant, "importance_type": p.importance_type,
                                               "bins_per_feature": clf.levels})
    return per_gene, importances


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
        return {**out, "batch_accuracy": float("nan"), "silhouette": float("nan"), "knn_mixing": float("nan")}
    from cellica.metrics import knn_batch_mixing

    folds = min(5, int(pd.Series(b).value_counts().min()))
    if folds >= 2:
        model = make_pipeline(StandardScaler(), LogisticRegression(max_iter=2000, C=1.0))
        pred = cross_val_predict(model, x, b, cv=StratifiedKFold(folds, shuffle=True, random_state=p.seed))
        out["batch_accuracy"] = float(balanced_accuracy_score(b, pred))
    else:
        out["batch_accuracy"] = float("nan")
    out["silhouette"] = float(silhouette_score(x, b))
    out["knn_mixing"] = knn_batch_mixing(x, b)
    return out


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
    m = mean_average_precision(ap, sameby=["perturbation"], null_size=p.map_null_size,
                               threshold=p.map_threshold, seed=p.seed, progress_bar=False)
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


def summary_table(per_gene: pd.DataFrame, batch: pd.DataFrame, activity: pd.DataFrame) -> pd.DataFrame:
    """The paper's Tables 3-4 as one tidy table: ``table, row, variant, metric, value``.

    ``table == "per_gene"``: each gene's AUROC (held-out and within-batch), sparsity
    and concentration per variant (Table 3). ``table == "per_variant"``: their means
    over genes (Table 4), the batch metrics on controls and the mAP / fraction of
    active perturbations.
    """
    metrics = ["auroc_mean", "auroc_within", "sparsity", "concentration"]
    ok = per_gene[~per_gene["skipped"].astype(bool)]
    genes = ok.melt(id_vars=["gene", "variant"], value_vars=metrics, var_name="metric").rename(columns={"gene": "row"})
    genes.insert(0, "table", "per_gene")
    means = ok.groupby("variant")[metrics].mean()
    if not activity.empty:
        means = means.join(activity.groupby("variant").agg(map_mean=("map", "mean"),
                                                           active_fraction=("significant", "mean")))
    if not batch.empty:
        cols = ["batch_accuracy", "chance_accuracy", "silhouette", "knn_mixing"]
        cols += [c for c in ("truth_mcc", "truth_factor_r2", "truth_batch_r2") if c in batch.columns]
        means = means.join(batch.set_index("variant")[cols])
    variants = means.reset_index().melt(id_vars="variant", var_name="metric")
    variants.insert(0, "row", "mean")
    variants.insert(0, "table", "per_variant")
    out = pd.concat([genes, variants], ignore_index=True)
    out["value"] = out["value"].astype(float)
    return out[["table", "row", "variant", "metric", "value"]]
