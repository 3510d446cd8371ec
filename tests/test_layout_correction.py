"""Well-position correction: offsets from the fitting controls, the same-position mAP
diagnostic, and a position table that misses a well."""

import anndata as ad
import numpy as np
import pandas as pd
import pytest

from cellica.core.errors import CellicaError
from cellica.transform.positions import (
    correct_positions,
    position_offsets,
    read_positions,
    well_positions,
)


def plates(n_plates=6, d=4, position_shift=4.0, seed=0):
    """Plates of 8 control wells and 4 gene wells (2 tiles each); every position has its own offset
    (the same on every plate), gene well W8 one of ``position_shift`` on feature 0; plates have
    their own offsets too."""
    rng = np.random.default_rng(seed)
    by_position = rng.normal(0, 1, (12, d))
    by_position[8] = 0
    rows, xs = [], []
    for k in range(n_plates):
        offset = rng.normal(0, 2, d)
        for w in range(12):
            for _ in range(2):
                x = offset + by_position[w] + rng.normal(0, 0.3, d)
                x[0] += position_shift * (w == 8)
                rows.append({"batch": f"B{k % 2}", "plate": f"P{k}", "well": f"W{w}", "is_control": w < 8,
                             "perturbation": "non-targeting" if w < 8 else f"G{w}"})
                xs.append(x)
    obs = pd.DataFrame(rows)
    obs.index = [f"t{i}" for i in range(len(obs))]
    obs["tile_id"] = obs.index
    return ad.AnnData(np.asarray(xs, np.float32), obs=obs)


def test_offsets_by_hand():
    obs = pd.DataFrame({"plate": ["P1", "P1", "P2", "P2"], "is_control": True})
    x = np.array([[3.0], [1.0], [10.0], [8.0]])  # plate means 2 and 9: residuals +1, -1, +1, -1
    offsets, uncovered = position_offsets(x, obs, np.array(["A", "B", "A", "C"]), np.ones(4, bool))
    assert offsets["A"] == pytest.approx([1.0]) and offsets["B"] == pytest.approx([-1.0]) and uncovered == 0
    offsets, uncovered = position_offsets(x, obs, np.array(["A", "B", "A", "C"]), np.array([1, 1, 1, 0], bool))
    # P2 keeps one fitting control: its residual is 0, so A's offset is (1 + 0) / 2.
    assert "C" not in offsets and uncovered == 1 and offsets["A"] == pytest.approx([0.5])


def test_correction_removes_the_position_offset_and_the_diagnostic_sees_it():
    data = plates()
    fit = data.obs["is_control"].to_numpy(bool)
    out = correct_positions(data, fit)
    info = out.uns["position_correction"]
    assert info["positions"] == 12 and info["positions_without_controls"] == 4
    assert info["same_position_map_before"] > 0.9 and info["same_position_map_after"] < 0.4
    # Control positions are back in line with their plate; W8 (no control there) keeps its shift.
    x = pd.DataFrame(out.X[:, 0], index=out.obs_names).join(out.obs)
    centred = x[0] - x.groupby("plate")[0].transform(lambda v: v[x.loc[v.index, "is_control"]].mean())
    assert centred[x["is_control"]].groupby(x["well"]).mean().abs().max() < 0.3
    assert centred[x["well"] == "W8"].mean() > 3


def test_a_position_table_that_misses_a_well_names_it(tmp_path):
    data = plates(n_plates=2)
    path = tmp_path / "positions.csv"
    pd.DataFrame({"well": [f"W{w}" for w in range(11)], "position": [f"R{w}" for w in range(11)]}).to_csv(
        path, index=False
    )
    with pytest.raises(CellicaError, match=r"does not cover \{'well': 'W11'\} \(4 sample\(s\) without a position\)"):
        well_positions(data.obs, read_positions(path))
    pd.DataFrame({"well": ["W1", "W1"], "position": ["a", "b"]}).to_csv(path, index=False)
    with pytest.raises(CellicaError, match="lists {'well': 'W1'} twice"):
        read_positions(path)


def test_the_transform_stage_applies_it_before_every_variant_and_records_it(tmp_path):
    from cellica.transform.apply import transform_file
    from cellica.transform.params import TransformParams

    data = plates()
    data.write_h5ad(tmp_path / "in.h5ad")
    p = TransformParams(position_correction=True, n_components=3)
    base = transform_file(tmp_path / "in.h5ad", tmp_path / "base.h5ad", "base", params=p)
    pca = transform_file(tmp_path / "in.h5ad", tmp_path / "pca.h5ad", "pca", params=p)
    for out in (base, pca):
        assert out.uns["position_correction"]["same_position_map_after"] < 0.4
    plain = transform_file(tmp_path / "in.h5ad", tmp_path / "plain.h5ad", "base", params=TransformParams())
    assert "position_correction" not in plain.uns and not np.allclose(plain.X, base.X)


def test_the_estimator_itself_corrects_positions_so_every_way_in_does(tmp_path):
    """Position correction is a step of every variant, not a pre-pass of the command: the
    in-memory estimator (what cellica.run uses) and `cellica transform` give the same bits, and
    the diagnostics reach the file. (Before the steps, cellica.run silently skipped it.)"""
    from cellica.core.adata import read_h5ad, write_h5ad
    from cellica.transform.apply import transform_file
    from cellica.transform.params import TransformParams
    from cellica.transform.variants import make_transform

    data = plates()
    write_h5ad(data, tmp_path / "in.h5ad")
    p = TransformParams(position_correction=True, n_components=3)
    in_memory = make_transform("pca", params=p).fit_transform(read_h5ad(tmp_path / "in.h5ad"))
    transform_file(tmp_path / "in.h5ad", tmp_path / "out.h5ad", "pca", params=p)
    on_disk = read_h5ad(tmp_path / "out.h5ad")
    np.testing.assert_array_equal(in_memory.X, on_disk.X)
    assert on_disk.uns["position_correction"]["positions_without_controls"] == 4
    assert on_disk.uns["transform"]["steps"][0] == "correct_positions"
    plain = make_transform("pca", TransformParams(n_components=3)).fit_transform(data)
    assert np.abs(plain.X - in_memory.X).max() > 0.1
