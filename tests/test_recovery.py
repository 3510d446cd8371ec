import anndata as ad
import numpy as np
import pandas as pd
import pytest

from cellica.core.errors import CellicaError
from cellica.evaluate.recovery import discretise, infomec, normalised_mi, read_truth, truth_recovery


def _balanced_sources():
    """Two binary sources, every combination equally often: exactly independent."""
    return np.array([[a, b] for a in (0.0, 1.0) for b in (0.0, 1.0)] * 50)


def test_discretise_and_normalised_mi_by_hand():
    np.testing.assert_array_equal(discretise(np.array([1.0, 2, 3, 4]), 2)[:, 0], [0, 0, 1, 1])
    assert np.unique(discretise(np.array([5.0, 5, 5]), 4)).size == 1  # constant: one bin
    s = _balanced_sources()
    # Each source tells everything about itself (NMI 1) and nothing about the other (0).
    np.testing.assert_allclose(normalised_mi(s, s), np.eye(2), atol=1e-12)


def test_infomec_by_hand():
    s = _balanced_sources()
    perfect = infomec(s, s)
    assert perfect["infom"] == pytest.approx(1.0) and perfect["infoc"] == pytest.approx(1.0)
    assert perfect["infoe"] == pytest.approx(1.0, abs=1e-3)
    # Both latents copy source 0: each latent informs about one source (InfoM 1), but source 0
    # is spread over two latents (max/sum = 1/2 -> InfoC 0) and source 1 is not captured:
    # InfoE = (1 + 0) / 2.
    copy = infomec(np.c_[s[:, 0], s[:, 0]], s)
    assert copy["infom"] == pytest.approx(1.0) and copy["infoc"] == pytest.approx(0.0)
    assert copy["infoe"] == pytest.approx(0.5, abs=1e-3)
    # A latent mixing both sources (their sum, 3 levels) informs about both: InfoM below 1.
    mixed = infomec(np.c_[s[:, 0] + s[:, 1], s[:, 0] - s[:, 1]], s)
    assert mixed["infom"] < 0.5
    # An inactive latent (constant, on its own scale) is ignored; a latent in a tiny unit is not
    # inactive (until #43 a range under 1/20 of the largest latent's counted as inactive).
    assert infomec(np.c_[s, np.full(len(s), 3.0)], s)["infoc"] == pytest.approx(1.0)
    tiny, same = infomec(np.c_[s, 1e-4 * s[:, :1]], s), infomec(np.c_[s, s[:, :1]], s)
    assert tiny == pytest.approx(same) and tiny["infoc"] < 1
    assert np.isnan(infomec(s[:, :1], s)["infom"])  # one active latent: undefined


def test_truth_table_for_imported_features(tmp_path):
    rng = np.random.default_rng(0)
    z = rng.laplace(size=(3000, 3))  # the plug-in MI of independent columns is biased up at small n
    ids = [f"s{i}" for i in range(3000)]
    table = pd.DataFrame(z, columns=["f0", "f1", "f2"]).assign(sample_id=ids)
    table.to_parquet(tmp_path / "truth.parquet")
    truth = read_truth(tmp_path / "truth.parquet")
    assert truth["effects"] is None and truth["batches"] is None
    adata = ad.AnnData((z @ np.diag([2.0, -1.0, 0.5])).astype(np.float32), obs=pd.DataFrame(index=ids))
    out = truth_recovery(adata, truth["latents"])
    assert out["truth_mcc"] == pytest.approx(1.0, abs=1e-6) and np.isnan(out["truth_batch_r2"])
    assert out["truth_infom"] > 0.9 and out["truth_infoc"] > 0.9
    for bad, msg in ((table.drop(columns="sample_id"), "no sample_id column"),
                     (table.assign(f1="x"), "factor columns must be numeric"),
                     (pd.concat([table, table.head(1)]), "repeated sample ids")):
        bad.to_csv(tmp_path / "bad.csv", index=False)
        with pytest.raises(CellicaError, match=msg):
            read_truth(tmp_path / "bad.csv")
    (tmp_path / "truth.npz").write_bytes(b"x")
    with pytest.raises(CellicaError, match="expected a tile store or a .parquet/.csv/.tsv table"):
        read_truth(tmp_path / "truth.npz")
    with pytest.raises(CellicaError, match="does not exist"):
        read_truth(tmp_path / "none.csv")


def test_the_store_exports_its_truth_and_the_evaluation_reads_only_the_tables(tiny_store, tmp_path):
    """cellica export-truth writes each ground-truth table as the store holds it; read_truth takes
    that folder (or a user's table) and refuses a tile store, naming the command that exports it."""
    from cellica.store.truth import export_truth

    paths = export_truth(tiny_store.path, tmp_path / "truth")
    assert set(paths) == {"latents", "effects", "batches"}  # no complexes: TINY_SIM sets none
    got = read_truth(tmp_path / "truth")
    for name in ("latents", "effects", "batches"):
        pd.testing.assert_frame_equal(got[name], tiny_store.ground_truth(name), check_exact=True)
        assert got[name].attrs["store_content_sha256"] == tiny_store.content_sha256
    with pytest.raises(CellicaError, match="cellica export-truth"):
        read_truth(tiny_store.path)
