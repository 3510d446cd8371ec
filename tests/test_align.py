"""cellica align: per-class maps between two representations, MCC, ground-truth recovery."""

import anndata as ad
import numpy as np
import pandas as pd
import pytest

from cellica.core.errors import CellicaError
from cellica.evaluate.metrics import mcc
from cellica.stability.align import align, ica_efficiency, latent_diameter
from cellica.stability.params import AlignParams
from cellica.transform.ica import haar_rotation


def _ad(x, ids=None):
    ids = ids if ids is not None else [f"t{i}" for i in range(len(x))]
    return ad.AnnData(np.asarray(x, np.float32), obs=pd.DataFrame(index=ids))


@pytest.fixture
def sources():
    rng = np.random.default_rng(0)
    return rng.laplace(size=(1200, 5))


def _errors(a, b, **kw):
    t = align(_ad(a), _ad(b), **kw)
    return t.set_index("map")["error"], t


def test_signed_permutation_is_recovered_by_every_map(sources):
    b = -3.0 * sources[:, [2, 0, 4, 1, 3]] + 5.0  # permuted, flipped, scaled, shifted
    err, t = _errors(sources, b)
    assert err["permutation"] < 1e-5 and err["rigid"] < 1e-5 and err["linear"] < 1e-5
    assert err["ica"] < 0.02  # ICA is estimated, so only close
    assert set(t["n_test"]) == {600}


def test_rotation_needs_a_rigid_map_and_ica_finds_it_unsupervised(sources):
    b = sources @ haar_rotation(5, 3).T
    err, t = _errors(sources, b)
    assert err["rigid"] < 1e-5 and err["linear"] < 1e-5
    assert err["permutation"] > 0.05
    assert err["ica"] < 0.25 * err["permutation"]
    eff = t.attrs["ica_efficiency"]
    assert eff == pytest.approx(100 * (err["permutation"] - err["ica"]) / (err["permutation"] - err["rigid"]))
    assert eff > 75


def test_general_linear_map_only_linear_and_ica_fit(sources):
    rng = np.random.default_rng(1)
    m = rng.normal(size=(5, 5)) + np.diag([3.0, 0.3, 1.0, 2.0, 0.5])
    err, _ = _errors(sources, sources @ m)
    assert err["linear"] < 1e-5
    assert err["rigid"] > 10 * err["linear"] + 0.01
    assert err["ica"] < err["rigid"]  # ICA undoes any invertible mixing on both sides


def test_pairs_by_sample_id_not_by_row_order(sources):
    b = sources @ haar_rotation(5, 3).T
    ids = [f"t{i}" for i in range(len(sources))]
    order = np.random.default_rng(2).permutation(len(b))
    t1 = align(_ad(sources, ids), _ad(b, ids), maps=("rigid", "linear"))
    t2 = align(_ad(sources, ids), _ad(b[order], [ids[i] for i in order]), maps=("rigid", "linear"))
    np.testing.assert_allclose(t1["error"], t2["error"], atol=1e-9)


def test_partial_overlap_is_counted_and_no_overlap_is_an_error(sources):
    a = _ad(sources)
    b = _ad(sources[:1000])
    t = align(a, b, maps=("rigid",))
    assert t.attrs["n_common"] == 1000 and t.attrs["only_in_A"] == 200 and t.attrs["only_in_B"] == 0
    with pytest.raises(CellicaError, match="share no sample ids"):
        align(a, _ad(sources, [f"x{i}" for i in range(len(sources))]))
    with pytest.warns(UserWarning, match="not unique"), pytest.raises(CellicaError, match="duplicated sample ids"):
        align(ad.AnnData(sources[:3], obs=pd.DataFrame(index=["a", "a", "b"])), a)


def test_different_dimensionalities_map_into_the_smaller(sources):
    b = sources[:, :3] * 2.0
    err, t = _errors(sources, b)
    assert t["dims"].iloc[0] == "5->3"
    assert "dims differ" in t.set_index("map").loc["rigid", "note"]
    assert err["permutation"] < 1e-5 and err["linear"] < 1e-5
    assert err["rigid"] < 0.02  # the semi-orthogonal fit picks up sample correlations of the dropped dims
    err2, _ = _errors(b, sources)  # 3 -> 5: two of B's dims have nothing mapped onto them
    assert err2["rigid"] > 0.05


def test_linear_map_needs_more_samples_than_dimensions():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(12, 10))
    t = align(_ad(x), _ad(x), maps=("rigid", "linear")).set_index("map")
    assert np.isnan(t.loc["linear", "error"])
    assert "6 training samples for 10 dimensions" in t.loc["linear", "note"]
    assert np.isfinite(t.loc["rigid", "error"])  # the other maps still report
    with pytest.raises(CellicaError, match="unknown map"):
        align(_ad(x), _ad(x), maps=("affine",))


def test_efficiency_and_diameter_by_hand():
    t = pd.DataFrame({"map": ["permutation", "rigid", "linear", "ica"], "error": [0.2, 0.1, 0.04, 0.14]})
    assert ica_efficiency(t) == pytest.approx(60.0)
    assert np.isnan(ica_efficiency(t[t["map"] != "ica"]))
    assert latent_diameter(np.array([[0.0, 0.0], [3.0, 4.0], [1.0, 1.0]])) == pytest.approx(5.0)


def test_mcc_by_hand():
    rng = np.random.default_rng(0)
    z = rng.normal(size=(500, 3))
    assert mcc(np.column_stack([-z[:, 2], z[:, 0], rng.normal(size=500), 2 * z[:, 1]]), z) == pytest.approx(1.0)
    # one factor mixed 50/50 with noise of equal variance: |r| = 1/sqrt(2)
    noise = rng.normal(size=500)
    f = np.column_stack([z[:, 0], z[:, 1], z[:, 2] + noise])
    expected = (1 + 1 + abs(np.corrcoef(z[:, 2], z[:, 2] + noise)[0, 1])) / 3
    assert mcc(f, z) == pytest.approx(expected)


def test_truth_recovery_on_the_simulated_store(tiny_store):
    from cellica.evaluate.recovery import truth_recovery

    store = tiny_store
    lat, batches = store.ground_truth("latents"), store.ground_truth("batches")
    meta = store.metadata
    factors = lat.set_index("tile_id").loc[meta["tile_id"]]
    adata = ad.AnnData(factors.to_numpy(np.float32), obs=pd.DataFrame({"plate": meta["plate"].astype(str).to_numpy()},
                                                                       index=meta["tile_id"].to_numpy()))
    out = truth_recovery(adata, lat, batches)
    assert out["truth_mcc"] == pytest.approx(1.0)
    assert out["truth_factor_r2"] > 0.99
    assert out["truth_batch_r2"] < 0.5  # the factors carry no batch information
    adata.obs_names = [f"x{i}" for i in range(adata.n_obs)]
    with pytest.raises(CellicaError, match="not the simulated store's tiles"):
        truth_recovery(adata, lat, batches)


def test_ica_map_on_the_leading_components(sources):
    rng = np.random.default_rng(4)
    # 5 sources plus 20 dims of weak Gaussian noise, rotated differently on each side
    a = np.hstack([sources, 0.05 * rng.normal(size=(len(sources), 20))]) @ haar_rotation(25, 1).T
    b = np.hstack([sources, 0.05 * rng.normal(size=(len(sources), 20))]) @ haar_rotation(25, 2).T
    full = align(_ad(a), _ad(b), maps=("ica",))["error"].iloc[0]
    lead = align(_ad(a), _ad(b), AlignParams(n_components=5), maps=("ica",))["error"].iloc[0]
    assert lead < 0.05 and lead < full  # the noise dims no longer blur the unmixing
