"""LightGBM classifiers of one gene against the shared controls: the paper's recipe
(a fresh Dataset per fit, LightGBM's own binning) or the faster fixed-bin path, their
folds, AUROC, importances, sparsity and concentration.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import numpy as np
import pandas as pd

from cellica.core.errors import CellicaError
from cellica.core.logs import get_logger
from cellica.evaluate._controls import check_batches, fit_key, gene_numbers, subsample_training
from cellica.evaluate.metrics import biological_variation, concentration, hoyer_sparsity, mean_roc
from cellica.evaluate.params import EvalParams

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
        # the control budget's streams: genes and batches numbered by first appearance, not by name
        self.gene_number = gene_numbers(self.perts, self.ctrl)
        self.batch_number = {b: i for i, b in enumerate(pd.unique(self.batch))}
        check_batches(self.batch, self.ctrl, params.max_controls, params.min_controls_per_batch)
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
        # each fit's control-budget stream: a held-out batch's place in the file (not its name)
        streams = ([self.batch_number[self.batch[test[0]]] for _, test in folds] if split == "batch"
                   else list(range(len(folds))))
        if not folds:
            row["skipped"] = "; ".join(notes) or "no usable fold"
            return row, None
        aurocs, guide_auc, sparsities, concs, imps, curves, n_train = [], {}, [], [], [], [], []
        for k, (train, test) in zip(streams, folds, strict=True):
            train = self._budget(train, gene, k)
            n_train.append(int(self.ctrl[train].sum()))
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
        within = self._within_batch_auroc(pert, gene)
        mean_imp = np.mean(imps, axis=0)
        no_split = not any(i.sum() > 0 for i in imps)
        row.update(
            split=split, auroc_mean=float(np.nanmean(aurocs)), auroc_sd=float(np.nanstd(aurocs)), n_folds=len(folds),
            auroc_within=within, auroc_gap=within - float(np.nanmean(aurocs)),
            auroc_by_guide=json.dumps({g: round(float(np.nanmean(v)), 4) for g, v in guide_auc.items()}),
            sparsity=_nanmean(sparsities), concentration=_nanmean(concs), no_split=no_split,
            no_split_reason=self._no_split_reason(pert, folds) if no_split else "",
            notes="; ".join(notes), roc_folds=json.dumps(curves), n_train_controls=int(np.median(n_train)),
            roc_mean=json.dumps([v.tolist() for v in mean_roc(curves)]),
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

    def _budget(self, train: np.ndarray, gene: str, fold: int) -> np.ndarray:
        """The fit's training rows with its controls cut to ``max_controls`` (all when null)."""
        return subsample_training(train, self.ctrl, self.batch, self.p.max_controls, self.p.min_controls_per_batch,
                                  fit_key(self.seed, self.gene_number[gene], fold))

    def _within_batch_auroc(self, pert: np.ndarray, gene: str) -> float:
        scores = []
        for k, (train, test) in enumerate(self._random_folds(pert)):
            train = self._budget(train, gene, 1000 + k)  # its own stream, apart from the held-out folds'
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
