import numpy as np
import pandas as pd
import pytest

from cellica.core.errors import CellicaError
from cellica.embed.features import import_features
from cellica.embed.params import FeatureTableParams
from tests.conftest import shared


def _table():
    return pd.DataFrame({
        "Metadata_Plate": ["P1", "P1", "P2", "P2"], "Metadata_Well": ["A01", "A02", "A01", "A01"],
        "Metadata_Batch": ["W1", "W1", "W2", "W2"], "Metadata_Pert": ["DMSO", "taxol", "DMSO", "taxol"],
        "Metadata_Ctrl": [True, False, True, False], "n_images": [4, 4, 4, 3],
        "Cells_Area": [1.0, 2.0, 3.0, 4.0], "Nuclei_Intensity": [0.5, 0.25, 0.125, 0.0625],
    })


PARAMS = FeatureTableParams(column_map={"plate": "Metadata_Plate", "well": "Metadata_Well", "batch": "Metadata_Batch",
                                        "perturbation": "Metadata_Pert", "is_control": "Metadata_Ctrl"},
                            extra_metadata=["n_images"])


@pytest.mark.parametrize("suffix", [".csv", ".tsv.gz", ".parquet"])
def test_import_table_formats(tmp_path, suffix):
    path = tmp_path / f"profiles{suffix}"
    t = _table()
    if suffix == ".parquet":
        t.to_parquet(path)
    else:
        t.to_csv(path, sep="\t" if ".tsv" in suffix else ",", index=False)
    adata = import_features(path, tmp_path / "f.h5ad", PARAMS)
    assert adata.var_names.tolist() == ["Cells_Area", "Nuclei_Intensity"]
    np.testing.assert_allclose(adata.X[:, 0], [1, 2, 3, 4])
    # plate/well repeats (P2/A01 twice) get numbered ids; n_images stays metadata.
    assert adata.obs_names.tolist() == ["P1/A01/0", "P1/A02/0", "P2/A01/0", "P2/A01/1"]
    assert adata.obs["is_control"].tolist() == [True, False, True, False]
    assert adata.obs["n_images"].tolist() == [4, 4, 4, 3]
    assert adata.uns["provenance"]["source"] == "features"
    assert import_features(tmp_path / "f.h5ad").shape == (4, 2)  # an .h5ad passes through


def test_bad_tables(tmp_path):
    path = tmp_path / "p.csv"
    _table().drop(columns="Metadata_Batch").to_csv(path, index=False)
    with pytest.raises(CellicaError, match=r"missing column\(s\) \['Metadata_Batch'\]"):
        import_features(path, params=PARAMS)
    _table().to_csv(path, index=False)
    with pytest.raises(
        CellicaError, match=r"missing metadata column\(s\) \['plate', 'well', 'batch', 'perturbation', 'is_control'\]"
    ):
        import_features(path)
    t = _table()
    t.loc[2, "Cells_Area"] = np.nan
    t.to_csv(path, index=False)
    with pytest.raises(CellicaError, match=r"NaN/Inf in feature column\(s\) \['Cells_Area'\] \(1 row"):
        import_features(path, params=PARAMS)
    t = _table().assign(Comment="x")
    t.to_csv(path, index=False)
    with pytest.raises(CellicaError, match=r"non-numeric feature column\(s\) \['Comment'\]"):
        import_features(path, params=PARAMS)
    assert not (tmp_path / "f.h5ad").exists()


def test_real_bbbc021_profiles(tmp_path):
    path = shared("bbbc021_profiles_weeks1-5") / "bbbc021_weeks1-5_well_profiles.csv.gz"
    params = FeatureTableParams(
        column_map={
            "plate": "Metadata_Plate",
            "well": "Metadata_Well",
            "batch": "Metadata_Batch",
            "perturbation": "Metadata_Perturbation",
            "is_control": "Metadata_is_control",
        },
        extra_metadata=["n_images"],
    )
    adata = import_features(path, tmp_path / "bbbc021.h5ad", params)
    assert adata.shape == (387, 516)
    assert adata.obs["batch"].nunique() == 5
    assert int(adata.obs["is_control"].sum()) == 36 * 5
    assert "Metadata_MoA" in adata.obs and "n_images" in adata.obs


def test_id_column_is_metadata_even_when_numeric(tmp_path):
    path = tmp_path / "p.csv"
    _table().assign(tile_id=[10, 11, 12, 13]).to_csv(path, index=False)
    params = FeatureTableParams(**{**PARAMS.__dict__, "id_column": "tile_id"})
    adata = import_features(path, params=params)
    assert adata.var_names.tolist() == ["Cells_Area", "Nuclei_Intensity"]
    assert adata.obs_names.tolist() == ["10", "11", "12", "13"]


def test_tiles_of_several_perturbations_per_well_aggregate_by_well_and_perturbation():
    import anndata as ad

    from cellica.core.adata import aggregate_wells

    # A pooled well: two genes (and their guides) in W1, tiles from two sites.
    obs = pd.DataFrame({"plate": "P1", "well": ["W1"] * 4 + ["W2"] * 2, "batch": "B1",
                        "perturbation": ["g1", "g1", "g2", "g2", "ctrl", "ctrl"],
                        "is_control": [False] * 4 + [True] * 2, "guide": ["g1a", "g1b", "g2a", "g2a", "c", "c"],
                        "site": [1, 2, 1, 2, 1, 2]}, index=[f"t{i}" for i in range(6)])
    x = np.arange(12, dtype=np.float32).reshape(6, 2)
    wells = aggregate_wells(ad.AnnData(x, obs=obs))
    assert wells.obs_names.tolist() == ["B1/P1/W1/g1", "B1/P1/W1/g2", "B1/P1/W2/ctrl"]
    np.testing.assert_allclose(wells.X, [[1, 2], [5, 6], [9, 10]])
    assert wells.obs["is_control"].tolist() == [False, False, True] and wells.obs["n_tiles"].tolist() == [2, 2, 2]


def test_feature_twins_by_hand():
    """Rows equal in every feature to an earlier row: counted, the first named with its twin; -0.0
    is 0.0; a difference in the last bit of one feature makes two rows distinct."""
    from cellica.embed._tables import feature_twins

    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 3)).astype(np.float32)
    x[10] = x[3]
    x[20], x[20, 1] = x[5], -0.0
    x[5, 1] = 0.0
    x[30], x[30, 2] = x[7], np.nextafter(x[7, 2], np.float32(9))  # one last bit apart: distinct
    assert feature_twins(x) == (2, 10, 3)
    assert feature_twins(np.delete(x, [10, 20], axis=0)) == (0, -1, -1)
    assert feature_twins(x[:1]) == (0, -1, -1)
    # Counts by hand: n = 40 rows, a repeat whose values each occur in c_j rows is expected to match
    # (n - 1) * prod (c_j - 1) / (n - 1) rows by chance. One feature: c - 1 >= 1, never a copy.
    counts = np.repeat(np.arange(8.0), 5)[:, None].astype(np.float32)
    assert feature_twins(counts) == (0, -1, -1)
    # Two coarse features (5 levels each, 8 rows per level): 39 * (7/39) * (7/39) = 1.26 expected.
    coarse = np.stack([np.arange(40) % 5, np.arange(40) // 8], axis=1).astype(np.float32)
    assert feature_twins(coarse) == (0, -1, -1)
    # Row 0 copied onto row 1, with three continuous features: column 0's value 0 is in 9 rows, column
    # 1's in 8, each continuous value in 2: 39 * (8/39) * (7/39) * (1/39)**3 = 2.4e-5 expected.
    twin = np.column_stack([coarse, rng.normal(size=(40, 3))]).astype(np.float32)
    twin[1] = twin[0]
    assert feature_twins(twin) == (1, 1, 0)
    assert feature_twins(twin, chance=2.3e-5) == (0, -1, -1)
    assert feature_twins(twin, chance=2.5e-5) == (1, 1, 0)


@pytest.mark.parametrize("suffix", [".csv", ".h5ad"])
def test_a_row_copied_under_another_well_is_refused_unless_kept(tmp_path, suffix, caplog):
    """One sample counted twice under a new id (its features copied to another well) is an error
    naming both ids; ``duplicate_features: keep`` keeps both and says so."""
    t = _table().assign(**{f"f{j}": np.random.default_rng(j).normal(size=4) for j in range(6)})
    t.loc[4] = ["P2", "B07", "W2", "taxol", False, 4, *t.iloc[1, 6:]]  # P1/A02's features under P2/B07
    path = tmp_path / "t.csv"
    t.to_csv(path, index=False)
    if suffix == ".h5ad":
        import_features(path, tmp_path / "t.h5ad", FeatureTableParams(**{**PARAMS.__dict__,
                                                                        "duplicate_features": "keep"}))
        path = tmp_path / "t.h5ad"
    with pytest.raises(CellicaError, match=r"1 row\(s\) repeat another row's features exactly under other metadata, "
                                           r"e.g. 'P2/B07/0' repeats 'P1/A02/0'; .*duplicate_features: keep"):
        import_features(path, params=PARAMS)
    keep = FeatureTableParams(**{**PARAMS.__dict__, "duplicate_features": "keep"})
    assert import_features(path, params=keep).n_obs == 5
    assert "kept as distinct samples (features.duplicate_features: keep)" in caplog.text


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_columns_read_in_groups_give_the_whole_tables_matrix(tmp_path, monkeypatch, suffix):
    """The matrix is filled a few columns at a time; duplicates and NaN are still found across groups."""
    from cellica.embed import _tables as tables

    rng = np.random.default_rng(0)
    t = pd.concat([_table()] * 3, ignore_index=True).assign(Metadata_Well=[f"W{i}" for i in range(12)])
    for j in range(5):
        t[f"f{j}"] = rng.normal(size=12)
    t["i0"] = rng.integers(-(2**40), 2**40, 12)  # integers beyond float32 take the float64 road, as before
    path = tmp_path / f"t{suffix}"
    write = (lambda f: f.to_parquet(path)) if suffix == ".parquet" else (lambda f: f.to_csv(path, index=False))
    write(t)
    monkeypatch.setattr(tables, "GROUP_COLUMNS", 2)
    adata = import_features(path, params=PARAMS)
    cols = ["Cells_Area", "Nuclei_Intensity", *[f"f{j}" for j in range(5)], "i0"]
    assert adata.var_names.tolist() == cols
    expect = (pd.read_csv(path) if suffix == ".csv" else pd.read_parquet(path))[cols].to_numpy(np.float64)
    expect = expect.astype(np.float32)
    rows = np.lexsort(expect[:, ::-1].T)  # rows in the order of their values (first column first)
    assert np.array_equal(adata.X, expect[rows])
    # A row repeating another (here 0.0 and -0.0 count as equal, as pandas compares them) is refused.
    t.loc[7] = t.loc[2]
    t.loc[2, "f1"], t.loc[7, "f1"] = 0.0, -0.0
    write(t)
    with pytest.raises(CellicaError, match=r"1 row\(s\) repeat another row exactly .* first at row 9"):
        import_features(path, params=PARAMS)
    t.loc[7, "f1"] = 1.5  # no longer a repeat; two NaN cells in different column groups, one row
    t.loc[4, "f0"], t.loc[4, "f4"] = np.nan, np.inf
    write(t)
    with pytest.raises(CellicaError, match=r"NaN/Inf in feature column\(s\) \['f0', 'f4'\] \(1 row"):
        import_features(path, params=PARAMS)
