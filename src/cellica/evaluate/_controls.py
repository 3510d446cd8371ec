"""The control budget: a seeded subsample of a fit's training controls, stratified by batch.

Every per-gene classifier trains on all controls of the batches it does not hold out,
so its cost grows with the number of controls; ``evaluate.max_controls`` caps the
controls one fit trains on. The subsample is drawn per fit (gene, fold), keyed on the
seed, the gene's place among the file's perturbations and the held-out batch's place
among its batches, so it does not depend on the thread count, on which chunk the gene
falls in, or on any name, and every variant's classifiers of a gene see the same
controls (their rows are the same). Test rows are never subsampled: AUROC is always measured
against every held-out control. ``benchmarks/controls.py`` measures what a budget
changes.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from cellica.core.errors import CellicaError


def allocate(counts: np.ndarray, budget: int, floor: int) -> np.ndarray:
    """How many controls to draw from each batch: ``floor`` each (all of a batch's controls
    when it has fewer), the rest of ``budget`` in proportion to what each batch has above
    its floor (largest remainders, ties to the earlier batch), never more than a batch has.

    Parameters
    ----------
    counts
        Controls available per batch.
    budget
        Controls to draw in all.
    floor
        The least drawn from any batch that has that many.

    Returns
    -------
    numpy.ndarray
        Integer draws per batch, summing to ``min(budget, counts.sum())``.
    """
    counts = np.asarray(counts, np.int64)
    if budget >= counts.sum():
        return counts.copy()
    floors = np.minimum(counts, floor)
    if budget < floors.sum():
        raise CellicaError(f"control budget: {budget} controls cannot give each of {counts.size} batches its "
                           f"floor of {floor} ({int(floors.sum())} needed)")
    spare = counts - floors
    share = (budget - floors.sum()) * spare / spare.sum()
    take = np.floor(share).astype(np.int64)
    left = int(budget - floors.sum() - take.sum())
    order = np.lexsort((np.arange(counts.size), -(share - take)))  # largest remainder, then batch order
    take[order[:left]] += 1
    return floors + take


def check_batches(batch: np.ndarray, ctrl: np.ndarray, budget: int | None, floor: int) -> None:
    """Refuse a budget the screen cannot honour, before any fit: a batch with fewer controls
    than the floor, or a budget below the floor times the number of batches."""
    if budget is None:
        return
    names, counts = np.unique(batch[ctrl], return_counts=True)
    short = [f"{n} ({c})" for n, c in zip(names, counts, strict=True) if c < floor]
    if short:
        raise CellicaError(f"evaluate.max_controls: batch(es) {', '.join(short[:5])} have fewer controls than "
                           f"evaluate.min_controls_per_batch={floor}; lower the floor, or set max_controls: null "
                           "to train on every control")
    if budget < floor * names.size:
        raise CellicaError(f"evaluate.max_controls={budget} is below min_controls_per_batch={floor} x "
                           f"{names.size} batches = {floor * names.size}")


def fit_key(seed: int, gene: int, fold: int) -> list[int]:
    """The random stream of one fit: the same for a gene whatever the chunk, thread or variant.
    ``gene`` is the gene's place among the file's perturbations in order of first appearance
    (:func:`gene_numbers`), never its name: renaming genes leaves every draw as it was."""
    return [int(seed) & 0xFFFFFFFF, int(gene), int(fold)]


def gene_numbers(perts: np.ndarray, ctrl: np.ndarray) -> dict[str, int]:
    """Each perturbation's number: its place in order of first appearance among the perturbed
    rows (the file's row order: content order for imported tables, the store's for tiles)."""
    return {str(g): i for i, g in enumerate(pd.unique(np.asarray(perts)[~np.asarray(ctrl, bool)]))}


def subsample_training(train: np.ndarray, ctrl: np.ndarray, batch: np.ndarray, budget: int | None, floor: int,
                       key: list[int]) -> np.ndarray:
    """The training rows of one fit with its controls cut to ``budget`` (stratified by batch).

    Parameters
    ----------
    train
        Row indices of the fit's training set (perturbed and control rows).
    ctrl, batch
        Per-row control flag and batch of the whole table.
    budget
        Most controls to keep (``None``: keep all).
    floor
        Least controls kept per batch present in the training set.
    key
        Seed sequence of this fit (:func:`fit_key`).

    Returns
    -------
    numpy.ndarray
        Sorted row indices: every perturbed row of ``train`` and the drawn controls.
    """
    train = np.asarray(train)
    is_ctrl = ctrl[train]
    if budget is None or is_ctrl.sum() <= budget:
        return train
    controls = train[is_ctrl]
    # batches in order of first appearance (not of their names: renaming one changes no draw)
    inverse, names = pd.factorize(batch[controls])
    counts = np.bincount(inverse, minlength=len(names))
    take = allocate(counts, budget, floor)
    rng = np.random.default_rng(key)
    kept = [rng.choice(controls[inverse == i], int(k), replace=False) for i, k in enumerate(take)]
    return np.sort(np.concatenate([train[~is_ctrl], *kept]))
