"""Transforms applied block by block: the same numbers as on the whole matrix, at a bounded memory."""

import anndata as ad
import numpy as np
import pandas as pd
import pytest

from cellica.transform import _rows as rows
from cellica.transform.ica import canonicalise
from cellica.transform.params import TransformParams
from cellica.transform.variants import make_transform


def test_row_blocks_cover_every_row_and_no_block_is_small():
    assert rows.row_blocks(9, 4) == [slice(0, 4), slice(4, 9)]  # a tail of 1 < 4 // 2 joins
    assert rows.row_blocks(10, 4) == [slice(0, 4), slice(4, 8), slice(8, 10)]
    assert rows.row_blocks(3, 4) == [slice(0, 3)]
    assert rows.row_blocks(0, 4) == [slice(0, 0)]
    for n in (1, 999, 1000, 1001, 2500):
        blocks = rows.row_blocks(n, 1000)
        assert np.array_equal(np.concatenate([np.arange(n)[b] for b in blocks]), np.arange(n))
        assert min(b.stop - b.start for b in blocks) >= min(n, 500)


def test_covariance_and_column_means_are_numpys_to_the_last_bit():
    x = np.random.default_rng(0).normal(3.0, 2.0, (5000, 7))
    assert np.array_equal(rows.covariance(x - x.mean(axis=0)), np.cov(x - x.mean(axis=0), rowvar=False))
    blocks = rows.row_blocks(5000, 1024)
    assert np.array_equal(rows.column_means(blocks, lambda sl: x[sl] ** 3), (x**3).mean(axis=0))


def test_correct_by_hand_and_batch_without_controls():
    x = np.array([[1.0, 2.0], [3.0, 6.0], [10.0, 0.0]])
    keys = np.array(["a", "a", "b"])
    stats = rows.batch_stats(x[:2], keys[:2], ["a"], True, "t")
    assert np.allclose(stats["a"][0], [2.0, 4.0]) and np.allclose(stats["a"][1], [1.0, 2.0])
    assert np.allclose(rows.correct(x[:2], keys[:2], stats, True), [[-1, -1], [1, 1]])
    with pytest.raises(Exception, match="batch 'b' has one control sample"):
        rows.batch_stats(x, keys, ["a", "b"], True, "t")
    stats = rows.batch_stats(x, keys, ["a", "b"], False, "t")
    assert np.allclose(rows.correct(x, keys, stats, False), [[-1, -2], [1, 2], [0, 0]])
    with pytest.raises(Exception, match="batch 'c' has no control samples"):
        rows.batch_stats(x, keys, ["a", "b", "c"], False, "t")


def _screen(n=9000, d=24, seed=1):
    rng = np.random.default_rng(seed)
    batch = rng.integers(0, 3, n)
    ctrl = rng.random(n) < 0.6
    x = rng.laplace(size=(n, d)) @ rng.normal(size=(d, d)) + batch[:, None] * 2.0
    x[~ctrl, 0] += 1.5
    obs = pd.DataFrame({"plate": "P1", "well": "A01", "batch": [f"B{b}" for b in batch],
                        "perturbation": np.where(ctrl, "ctrl", "G1"), "is_control": ctrl},
                       index=[f"s{i}" for i in range(n)])
    return ad.AnnData(x.astype(np.float32), obs=obs, var=pd.DataFrame(index=[f"f{i}" for i in range(d)]))


@pytest.mark.parametrize("variant,extra", [
    ("base", {"standardize": "controls"}),
    ("pca", {}),
    ("pca", {"batch_correction": "center_scale", "batch_stage": "after", "standardize": "controls"}),
    ("pca_ica", {}),
    ("pca_ica", {"batch_stage": "after", "ica_fit_on": "all"}),
    ("pca_rand", {"fit_on": "all", "batch_correction": "center_scale"}),
    ("sphering", {}),
])
def test_blocks_give_the_numbers_of_the_whole_matrix(monkeypatch, variant, extra):
    adata = _screen()
    whole = make_transform(variant, TransformParams(**extra)).fit_transform(adata)
    monkeypatch.setattr(rows, "BLOCK_ROWS", 2048)  # 4 blocks of 2048 rows, then 809 joined to the last
    blocked = make_transform(variant, TransformParams(**extra)).fit_transform(adata)
    assert np.array_equal(whole.X, blocked.X)
    assert whole.X.dtype == np.float32 and whole.uns["transform"]["diagnostics"].keys() == \
        blocked.uns["transform"]["diagnostics"].keys()


def test_canonicalise_by_blocks_matches_the_whole(monkeypatch):
    x = np.random.default_rng(2).laplace(size=(7000, 5))
    rot = np.linalg.qr(np.random.default_rng(3).normal(size=(5, 5)))[0]
    whole = canonicalise(rot, x)
    monkeypatch.setattr(rows, "BLOCK_ROWS", 1500)
    blocked = canonicalise(rot, x)
    assert np.array_equal(whole[0], blocked[0]) and whole[1] == blocked[1]
