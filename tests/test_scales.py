"""Every per-feature statistic on each feature's own scale (cellica.core.scales): by hand on tiny
arrays, then metamorphically, stage by stage, on a table with real-like units (1e-4 to 1e4):
a feature's unit, the columns' and rows' order and the labels' names must not move a number.
The whole DAG under the same transformations: tests/test_invariance.py."""

import anndata as ad
import numpy as np
import pandas as pd
import pytest

from cellica.core.errors import CellicaError
from cellica.core.scales import CONSTANT_RTOL, constant, inverse_scale, moments, spread_orders
from cellica.evaluate.metrics import biological_variation, cross_correlation
from cellica.maps._aggregate import normalize_plates
from cellica.registry import VARIANTS
from cellica.transform.params import TransformParams
from cellica.transform.steps import check_constant
from cellica.transform.variants import make_transform
from tests import invariance as inv


# ------------------------------------------------------------------------------ by hand
def test_constant_is_judged_on_each_feature_s_own_magnitude():
    # columns: area-like (sd ~ 700), Zernike-like (sd 3e-4), varying at 1e-9, constant at 1e4, constant
    # at 0, and one that differs by one float32 ulp in one of four rows (the least a stored value can)
    ulp = float(np.spacing(np.float32(5.0)))
    x = np.array([[1000.0, 1e-3, 0e-9, 1e4, 0.0, 5.0],
                  [2400.0, 1.6e-3, 2e-9, 1e4, 0.0, 5.0],
                  [1700.0, 1.3e-3, 4e-9, 1e4, 0.0, 5.0],
                  [300.0, 0.7e-3, 6e-9, 1e4, 0.0, 5.0 + ulp]])
    mean, sd = moments(x)
    np.testing.assert_allclose(mean[:2], [1350.0, 1.15e-3])
    np.testing.assert_allclose(sd[0], np.sqrt(((x[:, 0] - 1350.0) ** 2).mean()))
    assert constant(mean, sd).tolist() == [False, False, False, True, True, False]
    # the rule: sd <= 1e-12 |mean|; exactly at the boundary counts as constant
    assert constant(np.array([1.0, 1.0]), np.array([CONSTANT_RTOL, 2 * CONSTANT_RTOL])).tolist() == [True, False]
    np.testing.assert_allclose(inverse_scale(mean, sd), [1 / sd[0], 1 / sd[1], 1 / sd[2], 1.0, 1.0, 1 / sd[5]])
    assert inverse_scale(mean, sd, fill=0.0)[3] == 0.0
    assert spread_orders(np.array([1e-4, 1e3, 0.0])) == pytest.approx(7.0)
    assert spread_orders(np.array([5.0])) == 0.0


def test_statistics_are_float64_whatever_the_stored_dtype():
    x = np.full((3, 1), 16777216.0, np.float32)  # 2**24: float32 sums would lose the +1s
    x[1:] += np.float32(2.0)
    mean, sd = moments(x)
    assert mean.dtype == sd.dtype == np.float64
    assert mean[0] == pytest.approx(16777216.0 + 4 / 3, abs=1e-9)


def test_check_constant_keeps_a_tiny_unit_next_to_a_huge_one():
    """On the old rule (std <= 1e-12 x the largest |value| of any feature) the feature varying
    at 1e-9 next to a 1e4 feature was called constant and refused."""
    rng = np.random.default_rng(0)
    x = np.column_stack([1e4 + 700 * rng.normal(size=50), 1e-9 * rng.normal(size=50), np.full(50, 1e4)])
    keep = check_constant(x, ["area", "tiny", "const"], True, None, "t")
    assert keep.tolist() == [True, True, False]
    with pytest.raises(CellicaError, match=r"1 feature\(s\) are constant on the fit set, e.g. \['const'\]"):
        check_constant(x, ["area", "tiny", "const"], False, None, "t")


def test_biological_variation_and_correlation_are_unit_free():
    rng = np.random.default_rng(1)
    pert, ctrl = rng.normal(1, 1, (20, 3)), rng.normal(0, 1, (30, 3))
    ref = biological_variation(pert, ctrl)
    k = np.array([1e-8, 1.0, 1e6])  # a variance of 1e-16 was floored at 1e-12 before
    np.testing.assert_allclose(biological_variation(pert * k + 5, ctrl * k + 5), ref, rtol=1e-6)
    # controls that do not vary (on the feature's own scale) give no spread to measure in: 0, in any unit
    for unit in (1.0, 1e-9):
        assert biological_variation(np.array([[2.0], [2.0]]) * unit, np.array([[1.0], [1.0]]) * unit).tolist() == [0.0]
    assert biological_variation(np.zeros((2, 1)), np.zeros((3, 1))).tolist() == [0.0]  # not 0/0
    # a feature in a tiny unit keeps its effect (var 1e-16 < the old absolute floor of 1e-12)
    tiny = biological_variation(np.array([[3e-8], [5e-8]]), np.array([[0.0], [2e-8]]))
    assert tiny == pytest.approx(biological_variation(np.array([[3.0], [5.0]]), np.array([[0.0], [2.0]])))
    c = cross_correlation(pert, ctrl[:20])
    np.testing.assert_allclose(cross_correlation(pert * k, ctrl[:20] * k[::-1] + 3), c, atol=1e-12)
    assert (cross_correlation(pert, np.full((20, 1), 7.0)) == 0).all()


def test_map_normalisation_scales_each_plate_on_its_own_units():
    """center_scale used to leave a feature unscaled whenever its plate's control sd was below 1e-6
    in raw units; now a feature is left out (zeroed) only when its controls do not vary at all."""
    rng = np.random.default_rng(2)
    obs = pd.DataFrame({"plate": ["P1"] * 6 + ["P2"] * 6, "is_control": [True] * 4 + [False] * 2 + [True] * 4
                        + [False] * 2})
    x = rng.normal(size=(12, 3))
    x[obs["is_control"].to_numpy() & (obs["plate"] == "P2").to_numpy(), 2] = 4.0  # constant on P2's controls
    ref = normalize_plates(x, obs, "center_scale")
    k = np.array([1e-9, 1e3, 1e-5])
    np.testing.assert_allclose(normalize_plates((x + 11) * k, obs, "center_scale"), ref, rtol=1e-9, atol=1e-12)
    assert (ref[6:, 2] == 0).all() and (ref[:6, 2] != 0).all()


# ------------------------------------------------------------------------------ stage by stage
def _features(table: pd.DataFrame) -> ad.AnnData:
    """A table as `cellica import-features` makes it: features in name order, rows in content order."""
    from cellica.core.names import natural_key
    from cellica.embed.features import content_order

    names = sorted(inv.features_of(table), key=natural_key)
    x = table[names].to_numpy(np.float32)
    order = content_order(x)
    obs = pd.DataFrame({k: table[v].to_numpy() for k, v in inv.META.items()})
    obs.index = table[inv.SAMPLE].astype(str).to_numpy()  # the samples' own ids (features.id_column)
    obs = obs.iloc[order]
    return ad.AnnData(x[order], obs=obs, var=pd.DataFrame(index=names))


# Settings that put every feature on its own scale first (PCA, ZCA and Harmony mix features, so
# without one their results depend on the units by definition: cellica warns, see below).
SCALED = {"standardize": {"standardize": "controls", "batch_correction": None},
          "center_scale_before": {"batch_correction": "center_scale", "drop_constant": True},
          "standardize_tvn": {"standardize": "controls", "batch_correction": "center_scale", "batch_stage": "after"}}


# Six components of eight factors, fit on 36 controls: with ten, the ICA has several nearly equal
# optima at 3.6 rows a dimension, and a change at float32's resolution moves it to another one
# (a property of so few rows, measured: the same data gave 8.4 apart at ten components, 3e-5 at six).
def _transformed(table, variant, settings):
    return make_transform(variant, TransformParams(n_components=6, **settings)).fit_transform(_features(table))


# Which variants each setting puts on unit scales: batch_correction reaches only the variants with
# a batch-centring step (the PCA family and Harmony); base, sphering and ComBat see the features as
# standardised (standardize: controls) or as they are.
def _invariant_cases():
    for setting in SCALED:
        for variant, v in VARIANTS.items():
            if setting.startswith("standardize") or any(s.startswith("centre_batches") for s in v.steps):
                yield variant, setting


# Float tolerance: the input is float32 (a shift of up to 1e3 sds is stored to ~6e-5 sd), ICA stops
# at its gradient tolerance (1e-4), and ZCA's smallest eigenvalues amplify the input's rounding.
ATOL = {"pca_ica": 1e-2, "sphering": 1e-2}


@pytest.mark.parametrize(("variant", "setting"), list(_invariant_cases()))
def test_each_variant_s_features_ignore_every_feature_s_unit(variant, setting):
    """Every feature x 10^k (k in -6..6) plus a constant of up to 1e3 of its sds: each variant's
    output is the same up to float rounding (the old 1e-6 x max-sd floor left the Zernike-like
    features unscaled, which moved every PCA-family number)."""
    table = inv.screen()
    a = _transformed(table, variant, SCALED[setting])
    b = _transformed(inv.change_units(table), variant, SCALED[setting])
    assert a.obs_names.tolist() == b.obs_names.tolist() and a.var_names.tolist() == b.var_names.tolist()
    np.testing.assert_allclose(np.asarray(b.X, np.float64), np.asarray(a.X, np.float64),
                               atol=ATOL.get(variant, 1e-3), rtol=0)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_each_variant_s_features_ignore_row_and_column_order(variant):
    """The same table with its rows and columns shuffled gives the same features file: import's
    canonical orders (features by name, rows by their values), then nothing depends on order."""
    table = inv.screen()
    a = _transformed(table, variant, SCALED["standardize"])
    b = _transformed(inv.permute_rows(inv.permute_columns(table)), variant, SCALED["standardize"])
    assert a.obs_names.tolist() == b.obs_names.tolist()
    np.testing.assert_array_equal(np.asarray(b.X), np.asarray(a.X))


def test_mixed_units_without_scaling_warn_before_a_pca(caplog):
    table = inv.screen()
    make_transform("pca", TransformParams(n_components=10, batch_correction=None)).fit(_features(table))
    assert "span 7.6 orders of magnitude" in caplog.text and "transform.standardize: controls" in caplog.text
    caplog.clear()
    make_transform("pca", TransformParams(n_components=10, **SCALED["standardize"])).fit(_features(table))
    make_transform("pca", TransformParams(n_components=10, **SCALED["center_scale_before"])).fit(_features(table))
    assert "orders of magnitude" not in caplog.text
    # center_scale reaches only the variants that centre batches: ZCA on raw units is warned about
    make_transform("sphering", TransformParams(**SCALED["center_scale_before"])).fit(_features(table))
    assert "span 7.6 orders of magnitude" in caplog.text and "the sphering step" in caplog.text


def test_a_feature_constant_on_one_batch_s_controls_is_dropped_or_refused_under_center_scale():
    table = inv.screen()
    on = (table["Metadata_Batch"] == "Week2") & table["Metadata_is_control"]
    table.loc[on, "Cells_AreaShape_Area_0"] = 1234.0
    with pytest.raises(CellicaError, match=r"constant on the fit set or on one batch's controls.*Area_0"):
        _transformed(table, "pca", {"batch_correction": "center_scale"})
    out = _transformed(table, "pca", {"batch_correction": "center_scale", "drop_constant": True})
    assert out.uns["transform"]["diagnostics"]["dropped_constant"] == 1


def test_labels_renamed_in_another_order_change_no_per_gene_number_nor_batch_metric():
    """Batches, plates, wells and compounds renamed in reverse order (with the samples' own ids):
    the same transforms, the same per-gene AUROC, sparsity, concentration and importances (the
    control budget draws per gene and batch by their place in the file, not their names), the
    same batch classifiers (batches numbered by first appearance)."""
    from cellica.evaluate.batch import batch_metrics
    from cellica.evaluate.genes import evaluate_genes
    from cellica.evaluate.params import EvalParams

    table = inv.screen()
    renamed, back = inv.rename_labels(table, reverse=True)
    ep = EvalParams(min_samples=3, min_data_in_leaf=3, reg_alpha=0.0, n_trees=20, seeds=[0], max_controls=20,
                    min_controls_per_batch=5, n_boot=100)
    for variant in ("base", "pca_ica"):
        a = _transformed(table, variant, SCALED["standardize"])
        b = _transformed(renamed, variant, SCALED["standardize"])
        np.testing.assert_array_equal(np.asarray(b.X), np.asarray(a.X))
        pa, ia = evaluate_genes(a, ep, variant=variant)
        pb, ib = evaluate_genes(b, ep, variant=variant)
        pb["gene"] = pb["gene"].map(back)
        pa, pb = pa.sort_values("gene").reset_index(drop=True), pb.sort_values("gene").reset_index(drop=True)
        for col in ("auroc_mean", "auroc_within", "sparsity", "concentration", "n_train_controls"):
            np.testing.assert_array_equal(pb[col].to_numpy(), pa[col].to_numpy(), err_msg=f"{variant} {col}")
        ma, mb = batch_metrics(a, variant, ep), batch_metrics(b, variant, ep)
        assert {k: v for k, v in ma.items()} == {k: v for k, v in mb.items()}
