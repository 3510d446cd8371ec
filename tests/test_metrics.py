import math

import numpy as np
import pytest

from cellica.evaluate.metrics import (
    biological_variation,
    concentration,
    hoyer_sparsity,
    knn_batch_mixing,
    top_weights,
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


def test_top_weights_share_ties_at_the_cut():
    # 8 features, top quarter = 2 places: feature 1 takes one; the 7 tied zeros share
    # the other, 1/7 each (the expectation over random tie-breaking).
    w = top_weights(np.array([0.0, 5.0, 0.0, 0.0, 0, 0, 0, 0]))
    np.testing.assert_allclose(w, [1 / 7, 1, 1 / 7, 1 / 7, 1 / 7, 1 / 7, 1 / 7, 1 / 7])
    np.testing.assert_allclose(top_weights(np.array([3.0, 2, 1, 0, 0, 0, 0, 0])), [1, 1, 0, 0, 0, 0, 0, 0])
    # Three tied at the cut for one place.
    np.testing.assert_allclose(top_weights(np.array([9.0, 1, 1, 1, 0, 0, 0, 0])), [1, 1 / 3, 1 / 3, 1 / 3, 0, 0, 0, 0])
    assert top_weights(np.ones(3), 1.0).tolist() == [1, 1, 1]


def test_concentration_by_hand():
    imp = np.arange(8, 0, -1.0)  # top quarter = features 0 and 1
    assert concentration(imp, np.ones(8)) == pytest.approx(0.0)  # uniform spread
    assert concentration(imp, np.array([1, 1, 0, 0, 0, 0, 0, 0.0])) == pytest.approx(1.0)
    # half the variation in the top quarter: (0.5 - 0.25) / 0.75
    assert concentration(imp, np.array([1, 0, 1, 0, 0, 0, 0, 0.0])) == pytest.approx((0.5 - 0.25) / 0.75)
    assert concentration(imp, np.array([0, 0, 1, 1, 1, 1, 1, 1.0])) == pytest.approx(-1 / 3)
    assert math.isnan(concentration(imp, np.zeros(8)))
    # 10 features: top ceil(2.5) = 3, f = 0.3
    assert concentration(np.arange(10, 0, -1.0), np.r_[np.ones(3), np.zeros(7)]) == pytest.approx(1.0)


def test_concentration_shares_tied_zero_importances():
    # One used feature (0) carries no held-out variation; feature 2 carries all of it
    # but is tied at zero importance with 6 others for the one place left: expected
    # share 1/7, so (1/7 - 1/4) / (3/4). Breaking the tie by effect size would give 1.
    imp = np.array([5.0, 0, 0, 0, 0, 0, 0, 0])
    bio = np.array([0.0, 0, 1, 0, 0, 0, 0, 0])
    assert concentration(imp, bio) == pytest.approx((1 / 7 - 0.25) / 0.75)
    # A classifier that used no feature scores exactly 0: every feature shares the cut.
    assert concentration(np.zeros(8), bio) == pytest.approx(0.0)


def test_knn_mixing_extremes():
    rng = np.random.default_rng(0)
    apart = np.r_[rng.normal(0, 0.1, (50, 2)), rng.normal(10, 0.1, (50, 2))]
    b = np.r_[np.zeros(50), np.ones(50)]
    assert knn_batch_mixing(apart, b, k=10) == pytest.approx(0.0)
    mixed = rng.normal(size=(400, 2))
    assert knn_batch_mixing(mixed, rng.integers(0, 2, 400), k=15) == pytest.approx(1.0, abs=0.1)
