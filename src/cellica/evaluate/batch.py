"""Batch signal left on the held-back controls (balanced logistic and LightGBM batch
classifiers with bootstrap intervals, silhouette, kNN mixing), replicate mAP per
perturbation (copairs), and ground-truth recovery, per variant.
"""

from __future__ import annotations

import os
from dataclasses import asdict
from typing import Any

import numpy as np
import pandas as pd

from cellica.core.adata import aggregate_wells, read_h5ad
from cellica.core.logs import get_logger
from cellica.evaluate.genes import prepare, read_evaluation_rows
from cellica.evaluate.params import EvalParams

log = get_logger("evaluate")


def variant_metrics(features: dict[str, Any], params: EvalParams | None = None,
                    truth: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Batch metrics, replicate mAP and (simulated screens) ground-truth recovery of every variant.

    Parameters
    ----------
    features
        Variant name -> its features (AnnData, or the path of its ``.h5ad``, read in turn).
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
    from cellica.core.threads import fixed_threads

    p = params or EvalParams()
    p.validate()
    rows, activity = [], []
    with fixed_threads():  # BLAS reductions split by thread count: fix it so the numbers do not move
        for variant, adata in features.items():
            if isinstance(adata, str | os.PathLike):  # read when its turn comes: one matrix in memory
                # Without ground truth (which reads every row) only the evaluation's rows are loaded.
                adata = read_h5ad(adata) if truth is not None else read_evaluation_rows(adata)
            row = batch_metrics(adata, variant, p)
            if truth is not None:
                from cellica.evaluate.recovery import truth_recovery

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
    ctrl = np.flatnonzero(adata.obs["is_control"].to_numpy(dtype=bool))
    rng = np.random.default_rng(p.seed)
    if len(ctrl) > p.max_batch_samples:  # subsample first: only the subsample becomes float64
        ctrl = ctrl[np.sort(rng.choice(len(ctrl), p.max_batch_samples, replace=False))]
    x = np.asarray(adata.X[ctrl], np.float64)
    # batches numbered in order of first appearance, not by name: the multi-class classifiers
    # sample features class by class, so a renamed batch must keep its class number
    b = pd.factorize(adata.obs[p.batch_key].astype(str).to_numpy()[ctrl])[0]
    n_batches = len(np.unique(b))
    out = {
        "variant": variant,
        "n_controls": int(len(x)),
        "n_batches": n_batches,
        "chance_accuracy": 1.0 / max(n_batches, 1),
    }
    if n_batches < 2:
        nan = float("nan")
        return {**out, "batch_accuracy": nan, "batch_accuracy_lgbm": nan, "silhouette": nan, "knn_mixing": nan}
    from cellica.evaluate.metrics import knn_batch_mixing

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
    """The mAP of retrieving each perturbation's replicates against controls (copairs), per perturbation.

    Computed on well means (replicate wells), cosine distance; ``p_value`` from
    copairs' permutation null, ``significant`` at ``p.map_threshold`` after FDR.
    """
    from copairs.map import mean_average_precision

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
    import tempfile

    from cellica.core.threads import pool_size

    # copairs caches its null distributions under ~/.copairs by default: keep them out of the
    # user's home (a throw-away folder; the null is seeded, so nothing is lost).
    with pool_size(), tempfile.TemporaryDirectory(prefix="cellica-copairs-") as cache:
        ap = _replicate_ap(meta, np.asarray(wells.X, np.float64))
        m = mean_average_precision(ap, sameby=["perturbation"], null_size=p.map_null_size,
                                   threshold=p.map_threshold, seed=p.seed, progress_bar=False, cache_dir=cache)
    m = m.rename(columns={"mean_average_precision": "map", "corrected_p_value": "p_value_fdr",
                          "below_corrected_p": "significant"})
    m["variant"] = variant
    return m[columns]


# Each perturbation well is paired with every control well; copairs holds all pairs of a call
# at once, so the perturbations are taken in groups of at most this many pairs.
AP_PAIRS_PER_CALL = 2_000_000
# copairs computes the pairs' cosines in batches, one per thread of its pool (core.threads.pool_size),
# each holding ~5 float64 copies of its rows: the batch size keeps all threads' copies under this.
AP_BATCH_BYTES = 256 * 2**20


def _replicate_ap(meta: pd.DataFrame, feats: np.ndarray) -> pd.DataFrame:
    """The average precision (copairs) of every perturbation well against the controls, by groups of
    perturbations. A well's AP depends only on its own replicates and the controls, and each pair's
    cosine is computed row by row, so the groups give the bits of one call (rows in input order)
    with memory bounded by :data:`AP_PAIRS_PER_CALL` instead of growing with the number of genes."""
    from copairs.map import average_precision

    control = (meta["ref"] >= 0).to_numpy()
    wells_per = meta.loc[~control, "perturbation"].value_counts(sort=False)
    per_call = max(1, AP_PAIRS_PER_CALL // max(int(control.sum()), 1))
    groups, size = [[]], 0
    for pert, n in wells_per.items():
        # copairs refuses a call without positive pairs, so a group closes only once it holds
        # a replicated perturbation (unreplicated ones ride along: their AP is NaN either way).
        if size + n > per_call and (wells_per[groups[-1]] >= 2).any():
            groups.append([])
            size = 0
        groups[-1].append(pert)
        size += int(n)
    if len(groups) > 1 and not (wells_per[groups[-1]] >= 2).any():
        groups[-2] += groups.pop()
    batch = max(1, AP_BATCH_BYTES // (5 * 8 * feats.shape[1] * (os.cpu_count() or 1)))
    parts = []
    for group in groups:
        rows = np.flatnonzero(control | meta["perturbation"].isin(group).to_numpy())
        ap = average_precision(meta.iloc[rows], feats[rows], pos_sameby=["perturbation", "ref"], pos_diffby=[],
                               neg_sameby=[], neg_diffby=["perturbation", "ref"], batch_size=batch,
                               progress_bar=False)
        ap.index = rows  # copairs numbers the rows it was given: back to positions in meta
        parts.append(ap[ap["ref"] == -1])
    return pd.concat(parts).sort_index() if len(parts) > 1 else parts[0]
