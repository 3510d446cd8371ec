import math

import numpy as np
import pytest

from cellica.metrics import (
    biological_variation,
    concentration,
    hoyer_sparsity,
    knn_batch_mixing,
    rank_features,
)


def test_hoyer_by_hand():
    assert hoyer_sparsity([0, 0, 5, 0]) == pytest.approx(1.0)
    assert hoyer_sparsity([2, 2, 2, 2]) == pytest.approx(0.0)
    # [3, 4]: L1 = 7, L2 = 5, n = 2: (sqrt 2 - 7/5) / (sqrt 2 - 1)
    assert hoyer_sparsity([3, -4]) == pytest.approx((math.sqrt(2) - 1.4) / (math.sqrt(2) - 1))
    assert math.isnan(hoyer_sparsity([0, 0, 0]))


def test_biological_variation_by_hand():
    pert = np.array([[2.0, 0.0], [4.0, 0.0]])
    ctrl = np.array([[0.0, 1.0], [2.0, -1.0]])
    # feature 0: means 3 vs 1, control variance 1 -> 4; feature 1: means 0 vs 0 -> 0
    np.testing.assert_allclose(biological_variation(pert, ctrl), [4.0, 0.0])


def test_rank_features_breaks_ties_by_training_variation():
    imp = np.array([0.0, 5.0, 0.0, 0.0])
    bio_train = np.array([0.1, 0.0, 0.9, 0.1])
    assert rank_features(imp, bio_train).tolist() == [1, 2, 0, 3]


def test_concentration_by_hand():
    order = np.arange(8)  # top quarter = features 0 and 1
    assert concentration(order, np.ones(8)) == pytest.approx(0.0)  # uniform spread
    assert concentration(order, np.array([1, 1, 0, 0, 0, 0, 0, 0.0])) == pytest.approx(1.0)
    # half the variation in the top quarter: (0.5 - 0.25) / 0.75
    assert concentration(order, np.array([1, 0, 1, 0, 0, 0, 0, 0.0])) == pytest.approx((0.5 - 0.25) / 0.75)
    assert concentration(order, np.array([0, 0, 1, 1, 1, 1, 1, 1.0])) == pytest.approx(-1 / 3)
    assert math.isnan(concentration(order, np.zeros(8)))
    # 10 features: top ceil(2.5) = 3, f = 0.3
    assert concentration(np.arange(10), np.r_[np.ones(3), np.zeros(7)]) == pytest.approx(1.0)


def test_knn_mixing_extremes():
    rng = np.random.default_rng(0)
    apart = np.r_[rng.normal(0, 0.1, (50, 2)), rng.normal(10, 0.1, (50, 2))]
    b = np.r_[np.zeros(50), np.ones(50)]
    assert knn_batch_mixing(apart, b, k=10) == pytest.approx(0.0)
    mixed = rng.normal(size=(400, 2))
    assert knn_batch_mixing(mixed, rng.integers(0, 2, 400), k=15) == pytest.approx(1.0, abs=0.1)
