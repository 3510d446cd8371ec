"""The control budget (evaluate.max_controls): seeded, stratified by batch, with a floor."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from cellica.core.errors import CellicaError
from cellica.evaluate._classifiers import GeneClassifiers
from cellica.evaluate._controls import (
    allocate,
    check_batches,
    fit_key,
    gene_numbers,
    subsample_training,
)
from cellica.evaluate.genes import evaluate_genes
from tests.test_evaluate import FAST, screen


def test_allocate_by_hand():
    # floor 2 each, 6 spare in proportion to 8:2 above the floor -> 4.8, 1.2 -> 5, 1
    assert allocate(np.array([10, 4]), 10, 2).tolist() == [7, 3]
    # a batch below the floor keeps all it has; the budget covers everything -> all
    assert allocate(np.array([10, 1]), 5, 2).tolist() == [4, 1]
    assert allocate(np.array([3, 4]), 50, 2).tolist() == [3, 4]
    # equal remainders go to the earlier batch
    assert allocate(np.array([5, 5, 5]), 4, 1).tolist() == [2, 1, 1]
    with pytest.raises(CellicaError, match="floor of 3"):
        allocate(np.array([10, 10, 10]), 8, 3)


def test_subsample_is_seeded_stratified_and_keeps_every_perturbed_row():
    batch = np.repeat(["A", "B", "C"], [600, 300, 100])
    ctrl = np.ones(1000, bool)
    ctrl[::10] = False  # every tenth row is perturbed
    train = np.arange(1000)
    kept = subsample_training(train, ctrl, batch, 200, 30, fit_key(0, 1, 0))
    assert np.array_equal(kept, np.sort(kept)) and np.unique(kept).size == kept.size
    assert np.isin(np.flatnonzero(~ctrl), kept).all()  # perturbed rows all kept
    per_batch = {b: int((ctrl[kept] & (batch[kept] == b)).sum()) for b in "ABC"}
    assert sum(per_batch.values()) == 200
    assert min(per_batch.values()) >= 30 and per_batch["A"] > per_batch["B"] > per_batch["C"]
    again = subsample_training(train, ctrl, batch, 200, 30, fit_key(0, 1, 0))
    other = subsample_training(train, ctrl, batch, 200, 30, fit_key(1, 1, 0))
    assert np.array_equal(kept, again) and not np.array_equal(kept, other)
    # the draw follows which rows share a batch, never the batches' names (renamed: the same rows)
    renamed = np.array([{"A": "zz", "B": "aa", "C": "mm"}[b] for b in batch])
    assert np.array_equal(subsample_training(train, ctrl, renamed, 200, 30, fit_key(0, 1, 0)), kept)
    assert subsample_training(train, ctrl, batch, None, 30, [0]) is train  # no budget: untouched
    assert subsample_training(train, ctrl, batch, 5000, 30, [0]) is train  # budget above the controls


def test_a_batch_with_too_few_controls_is_refused_naming_it():
    batch = np.repeat(["A", "B"], [100, 20])
    ctrl = np.ones(120, bool)
    with pytest.raises(CellicaError, match=r"B \(20\).*min_controls_per_batch=50"):
        check_batches(batch, ctrl, 80, 50)
    with pytest.raises(CellicaError, match="below min_controls_per_batch=10 x 2 batches"):
        check_batches(batch, ctrl, 15, 10)
    check_batches(batch, ctrl, None, 50)  # no budget: nothing to check
    data = screen(n=40)
    with pytest.raises(CellicaError, match="fewer controls than"):
        GeneClassifiers(data.X, data.obs, replace(FAST, max_controls=60, min_controls_per_batch=41))


def test_budget_trains_on_fewer_controls_and_is_thread_and_chunk_independent():
    data = screen(n=120)
    p = replace(FAST, max_controls=90, min_controls_per_batch=20, seeds=[0, 1])
    one, _ = evaluate_genes(data, p, threads=1)
    two, _ = evaluate_genes(data, p, threads=2)
    cols = ["gene", "seed", "auroc_mean", "sparsity", "concentration", "auroc_within"]
    assert one[cols].equals(two[cols])
    # chunking the genes changes nothing: the draw is keyed on the gene, not its position
    parts = [evaluate_genes(data, p, chunk=f"{i}/2")[0] for i in range(2)]
    merged = pd.concat(parts).sort_values(["seed", "gene"]).reset_index(drop=True)
    assert merged[cols].equals(one.sort_values(["seed", "gene"]).reset_index(drop=True)[cols])
    full, _ = evaluate_genes(data, replace(p, max_controls=None))
    strong = one.set_index(["gene", "seed"]).loc[("STRONG", 0)]
    assert strong["n_train_controls"] == 90  # the two training batches give 90 controls in all
    assert full.set_index(["gene", "seed"]).loc[("STRONG", 0), "n_train_controls"] == 240
    assert strong["auroc_mean"] > 0.95  # the signal survives the budget


def test_genes_are_numbered_by_first_appearance_not_by_name():
    perts = np.array(["ctrl", "TP53", "ctrl", "ACTB", "TP53", "ZZZ"])
    ctrl = perts == "ctrl"
    assert gene_numbers(perts, ctrl) == {"TP53": 0, "ACTB": 1, "ZZZ": 2}
