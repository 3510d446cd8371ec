from pathlib import Path

import anndata as ad
import numpy as np
import pandas as pd
import pytest

from cellica.core.errors import CellicaError
from cellica.registry import PAPER_VARIANTS, VARIANTS
from cellica.transform.base import Transform
from cellica.transform.ica import (
    amari_distance,
    canonicalise,
    fit_rotation,
    haar_rotation,
    whiteness_error,
)
from cellica.transform.params import IcaParams, TransformParams
from cellica.transform.variants import make_transform


def screen(n_per=200, d=4, seed=0, shift=3.0):
    """Two batches (additive offsets), controls and one perturbation, Laplace sources mixed."""
    rng = np.random.default_rng(seed)
    rows, xs = [], []
    mix = rng.normal(size=(d, d))
    for b, offset in (("B1", 0.0), ("B2", shift)):
        for pert, ctrl in (("ctrl", True), ("G1", False)):
            s = rng.laplace(size=(n_per, d))
            if not ctrl:
                s[:, 0] += 2.0
            xs.append(s @ mix.T + offset)
            rows += [{"plate": f"{b}-P1", "well": "A01", "batch": b, "perturbation": pert, "is_control": ctrl}] * n_per
    obs = pd.DataFrame(rows, index=[f"s{i}" for i in range(len(rows))])
    return ad.AnnData(
        np.vstack(xs).astype(np.float32), obs=obs, var=pd.DataFrame(index=[f"f{i}" for i in range(d)])
    ), mix


def fitc(out):
    """The controls that fitted the transform (the statistics hold exactly on them)."""
    return (out.obs["is_control"] & out.obs["transform_fit"]).to_numpy()


def cov(x):
    return np.cov(np.asarray(x, np.float64), rowvar=False)


def test_pca_whitens_controls_and_removes_batch_offsets():
    data, _ = screen()
    out = make_transform("pca").fit_transform(data)
    ctrl = fitc(out)
    z = np.asarray(out.X, np.float64)
    # Controls of each batch are centred on their own mean, and white together.
    for b in ("B1", "B2"):
        rows = ctrl & (out.obs["batch"] == b).to_numpy()
        np.testing.assert_allclose(z[rows].mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(cov(z[ctrl]), np.eye(4), atol=1e-4)
    assert out.var_names.tolist() == ["PC1", "PC2", "PC3", "PC4"]
    assert out.uns["transform"]["variant"] == "pca"
    # Without batch correction the 3-unit batch offset survives.
    raw = make_transform("pca", TransformParams(batch_correction=None)).fit_transform(data)
    zr = np.asarray(raw.X)
    gap = zr[ctrl & (raw.obs.batch == "B2").to_numpy()].mean(0) - zr[ctrl & (raw.obs.batch == "B1").to_numpy()].mean(0)
    assert np.linalg.norm(gap) > 1.0


def test_pca_equals_scikit_learn_s_whitened_pca_signs_included():
    """The pca variant on one batch without batch handling is scikit-learn's PCA(whiten=True)
    fit on the fitting controls, component signs included (the largest loading positive:
    LAPACK's own sign would make LightGBM's numbers depend on the BLAS library)."""
    from sklearn.decomposition import PCA

    data, _ = screen(n_per=150, d=5)
    data.obs["batch"] = "B1"
    p = TransformParams(batch_correction=None, n_components=4, fit_fraction=1.0)
    ours = make_transform("pca", p).fit(data)
    x = np.asarray(data.X, np.float64)
    ref = PCA(n_components=4, whiten=True, svd_solver="full").fit(x[data.obs["is_control"].to_numpy()])
    np.testing.assert_allclose(ours.transform(data).X, ref.transform(x), rtol=1e-4, atol=1e-4)
    comps = ours.named_steps["pca"].arrays["components"]
    assert (comps[np.arange(4), np.abs(comps).argmax(axis=1)] > 0).all()


def test_n_components_fraction_and_floor():
    data, _ = screen()
    x = np.asarray(data.X).copy()
    x[:, 3] = x[:, 0] * 2.0  # rank 3: one direction without variance
    data.X = x
    t = make_transform("pca")
    assert t.fit_transform(data).n_vars == 3
    t2 = make_transform("pca", TransformParams(n_components=0.5))
    assert 1 <= t2.fit_transform(data).n_vars <= 3
    t3 = make_transform("pca", TransformParams(n_components=4))  # explicit: the null direction is floored
    out = t3.fit_transform(data)
    assert out.n_vars == 4 and np.isfinite(out.X).all() and t3.info["floored_components"] == 1


def test_center_scale_after_and_missing_batch_controls():
    data, _ = screen()
    out = make_transform("pca", TransformParams(batch_correction="center_scale", batch_stage="after")).fit_transform(
        data
    )
    ctrl = fitc(out)
    for b in ("B1", "B2"):
        rows = ctrl & (out.obs.batch == b).to_numpy()
        np.testing.assert_allclose(np.asarray(out.X)[rows].std(axis=0), 1, atol=1e-4)
    bad = data[~(data.obs.is_control & (data.obs.batch == "B2"))].copy()
    with pytest.raises(CellicaError, match="batch 'B2' has no control samples"):
        make_transform("pca").fit(bad)


def test_whitening_impossible_and_no_controls():
    data, _ = screen(n_per=3, d=8)
    with pytest.raises(
        CellicaError, match=r"6 fit rows for 8 features: whitening impossible .* set n_components to at most 5"
    ):
        make_transform("pca", TransformParams(fit_fraction=1.0)).fit(data)
    assert make_transform("pca", TransformParams(n_components=3)).fit_transform(data).n_vars == 3
    none = data.copy()
    none.obs["is_control"] = False
    with pytest.raises(CellicaError, match="no control samples"):
        make_transform("pca", TransformParams(batch_correction=None)).fit(none)


def test_constant_features_and_unknown_variant():
    data, _ = screen()
    x = np.asarray(data.X).copy()
    x[:, 2] = 7.0
    data.X = x
    with pytest.raises(CellicaError, match=r"1 feature\(s\) are constant .*\['f2'\].*drop_constant"):
        make_transform("pca").fit(data)
    out = make_transform("sphering", TransformParams(drop_constant=True)).fit_transform(data)
    assert out.var_names.tolist() == ["f0", "f1", "f3"]
    with pytest.raises(CellicaError, match="unknown transform variant 'ica'"):
        make_transform("ica")


def test_robust_z_max_by_hand():
    from cellica.transform.steps import robust_z_max

    x = np.array([[1, 0, 5], [2, 0, 5], [3, 0, 5], [4, 0, 5], [100, 1, 5]], dtype=float)
    # column 0: median 3, deviations 2 1 0 1 97, MAD 1 -> 97 / 1.4826; column 1: MAD 0 but a 1 -> inf;
    # column 2: constant -> 0
    np.testing.assert_allclose(robust_z_max(x), [97 / 1.4826, np.inf, 0.0])


def test_outlier_cutoff_drops_heavy_tailed_features():
    data, _ = screen()
    x = np.asarray(data.X).copy()
    ctrl = np.flatnonzero(data.obs["is_control"].to_numpy())
    x[ctrl[::10], 1] = 1e6  # a tenth of the controls: median and MAD unmoved, the maximum far beyond
    data.X = x
    kept = make_transform("pca", TransformParams(outlier_cutoff=500)).fit(data)
    assert kept.arrays["keep"].tolist() == [True, False, True, True]
    assert make_transform("pca").fit(data).arrays["keep"].all()  # the default keeps every feature
    assert make_transform("sphering", TransformParams(outlier_cutoff=500)).fit_transform(data).var_names.tolist() \
        == ["f0", "f2", "f3"]
    with pytest.raises(CellicaError, match="every feature is beyond outlier_cutoff"):
        make_transform("pca", TransformParams(outlier_cutoff=1e-9)).fit(data)
    with pytest.raises(CellicaError, match="outlier_cutoff"):
        TransformParams(outlier_cutoff=0)


def test_save_load_apply_and_dimension_mismatch(tmp_path):
    data, _ = screen()
    for variant in (v for v in VARIANTS if v not in ("harmony", "combat")):  # the inductive ones
        t = make_transform(variant)
        first = t.fit_transform(data)
        t.save(tmp_path / f"{variant}.npz")
        # New data brings its own controls for the per-batch statistics; marking the
        # same controls as the first fit did reproduces the fitted output exactly.
        marked = data.copy()
        marked.obs["transform_fit"] = first.obs["transform_fit"]
        again = Transform.load(tmp_path / f"{variant}.npz").transform(marked)
        np.testing.assert_allclose(again.X, first.X, rtol=1e-5, atol=1e-5)
    wrong = ad.AnnData(np.zeros((4, 3), np.float32), obs=data.obs.iloc[:4].copy())
    with pytest.raises(CellicaError, match="has 3 features but the pca transform was fitted on 4"):
        Transform.load(tmp_path / "pca.npz").transform(wrong)


def test_random_rotation_keeps_whiteness_and_ica_finds_the_sources():
    data, mix = screen(n_per=1500, shift=0.0)
    rand = make_transform("pca_rand").fit_transform(data)
    ctrl = fitc(rand)
    np.testing.assert_allclose(cov(np.asarray(rand.X)[ctrl]), np.eye(4), atol=1e-3)
    t = make_transform("pca_ica")
    ica = t.fit_transform(data)
    assert t.info["ica"]["converged"] and t.info["ica"]["rewhitened"] is False
    # The unmixing chain maps the (control-centred) data back to independent sources: Amari vs the mixing.
    pca = make_transform("pca")
    pca.fit(data)
    full = t.arrays["unmixing"] @ (t.arrays["components"] * t.arrays["scale"][:, None])
    assert amari_distance(full, mix) < 0.08
    np.testing.assert_allclose(cov(np.asarray(ica.X)[ctrl]), np.eye(4), atol=1e-3)


def test_comparators_reduce_batch_offsets_and_are_transductive():
    data, _ = screen(shift=5.0)
    for variant in ("harmony", "combat"):
        t = make_transform(variant)
        out = t.fit_transform(data)
        ctrl = out.obs.is_control.to_numpy()
        x = np.asarray(out.X)
        gap = x[ctrl & (out.obs.batch == "B2").to_numpy()].mean(0) - x[ctrl & (out.obs.batch == "B1").to_numpy()].mean(
            0
        )
        raw = np.asarray(data.X)
        raw_gap = raw[ctrl & (data.obs.batch == "B2").to_numpy()].mean(0) - raw[
            ctrl & (data.obs.batch == "B1").to_numpy()
        ].mean(0)
        assert np.linalg.norm(gap) < 0.5 * np.linalg.norm(raw_gap), variant
        with pytest.raises(CellicaError, match="cannot be applied to other samples"):
            t.transform(data[:10].copy())


def test_held_back_controls_are_the_same_for_every_variant():
    data, _ = screen()
    masks = {v: make_transform(v).fit_transform(data).obs["transform_fit"].to_numpy() for v in PAPER_VARIANTS[:3]}
    assert all(np.array_equal(masks["base"], m) for m in masks.values())
    ctrl = data.obs.is_control.to_numpy()
    assert masks["base"][ctrl].mean() == pytest.approx(0.5) and not masks["base"][~ctrl].any()
    everything = make_transform("pca", TransformParams(fit_fraction=1.0)).fit_transform(data)
    assert everything.obs["transform_fit"].to_numpy()[ctrl].all()


def test_every_registered_variant_has_its_estimator():
    from cellica.transform.base import Transform

    for name in VARIANTS:
        model = make_transform(name)
        assert isinstance(model, Transform) and model.variant == name
    with pytest.raises(CellicaError, match="unknown transform variant 'ica'; choose from base, pca"):
        make_transform("ica")


# ---------------------------------------------------------------------- ICA core
def test_amari_distance_by_hand():
    eye = np.eye(3)
    assert amari_distance(eye, eye) == 0.0
    perm_scale = np.array([[0, 2.0, 0], [0, 0, -3.0], [0.5, 0, 0]])
    assert amari_distance(perm_scale, eye) == pytest.approx(0.0)
    # Every entry equal: each row and column sums to n x its max -> (n - 1) per row / col.
    assert amari_distance(np.ones((3, 3)), eye) == pytest.approx(1.0)


def test_haar_rotation_and_whiteness_error():
    q = haar_rotation(5, 3)
    np.testing.assert_allclose(q @ q.T, np.eye(5), atol=1e-12)
    np.testing.assert_array_equal(q, haar_rotation(5, 3))
    assert whiteness_error(np.random.default_rng(0).normal(size=(20000, 3))) < 0.05


def test_backends_recover_a_known_mixing_and_agree():
    rng = np.random.default_rng(0)
    s = np.column_stack(
        [rng.laplace(size=4000), rng.uniform(-1, 1, 4000), rng.laplace(size=4000), rng.exponential(size=4000)]
    )
    s = (s - s.mean(0)) / s.std(0)
    a = haar_rotation(4, 1)
    dist = {}
    for backend in ("cellica", "sklearn", "picard"):
        res = fit_rotation((s @ a.T).astype(np.float32), IcaParams(backend=backend, max_iter=500, tol=1e-5))
        assert res.diagnostics["converged"], res.diagnostics
        assert {"backend", "contrast", "n_iter", "gradient_norm", "seconds"} <= set(res.diagnostics)
        dist[backend] = amari_distance(res.rotation, a)
    # 4,000 samples limit every method to ~0.05; ours lands on the same optimum as the references.
    assert max(dist.values()) < 0.08
    assert abs(dist["cellica"] - dist["sklearn"]) < 0.005 and abs(dist["cellica"] - dist["picard"]) < 0.005


def test_non_convergence_is_reported(caplog):
    rng = np.random.default_rng(0)
    x = rng.laplace(size=(2000, 6)) @ haar_rotation(6, 2).T
    res = fit_rotation(x.astype(np.float32), IcaParams(max_iter=2, tol=1e-9))
    assert res.diagnostics["converged"] is False
    assert "did NOT converge in 2 iterations" in caplog.text


def test_canonical_sign_and_order():
    rng = np.random.default_rng(0)
    s = np.column_stack([rng.normal(size=5000), -rng.exponential(size=5000), rng.laplace(size=5000)])
    s = (s - s.mean(0)) / s.std(0)
    rot, info = canonicalise(np.eye(3), s)
    y = s @ rot.T
    assert (np.mean(y**3, axis=0)[:2] > 0).all()  # the skewed component is flipped to positive skew
    assert np.all(np.diff(info["negentropy"]) <= 0)  # most non-Gaussian first
    assert np.abs(np.corrcoef(y[:, -1], s[:, 0])[0, 1]) > 0.99  # the Gaussian one comes last


def test_contrast_and_gradient_of_our_ica_by_hand():
    import torch

    from cellica.transform._ica_solver import _cayley, _Problem, _skew_dot

    # log cosh and tanh at hand-checkable points, including one where cosh overflows float32.
    y = torch.tensor([[0.0, 1.0, -1.0, 50.0], [0.5, -0.5, 2.0, -2.0]])
    prob = _Problem(torch.eye(2), torch)
    logcosh, psi = prob.evaluate(y)
    expected = np.log(np.cosh(np.array([[0.0, 1.0, -1.0, 0.0], [0.5, -0.5, 2.0, -2.0]]))).mean(axis=1)
    expected[0] += (50 - np.log(2)) / 4  # log cosh 50 = 50 - log 2 (+ e^-100)
    np.testing.assert_allclose(logcosh.numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(psi.numpy(), np.tanh(y.numpy()), rtol=1e-6)

    # The skew gradient is the derivative of the contrast along a rotation W <- expm(tE) W.
    rng = np.random.default_rng(0)
    x = torch.tensor((rng.laplace(size=(500, 3)) @ haar_rotation(3, 1).T).T, dtype=torch.float32)
    prob = _Problem(x, torch)
    w = torch.tensor(haar_rotation(3, 2))
    signs = torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64)
    yw = prob.rotate(w.float())
    grad, _, stat = prob.grad(yw, prob.evaluate(yw)[1], signs)
    yd = yw.double().numpy()
    t = np.tanh(yd)
    np.testing.assert_allclose(stat.numpy(), (1 - t**2).mean(1) - (t * yd).mean(1), rtol=1e-4, atol=1e-6)
    e = torch.tensor([[0.0, 0.3, -0.2], [-0.3, 0.0, 0.5], [0.2, -0.5, 0.0]], dtype=torch.float64)

    def contrast(t):
        return float((prob.evaluate(prob.rotate((_cayley(t * e) @ w).float()))[0] * signs).sum())

    eps = 1e-2
    numeric = (contrast(eps) - contrast(-eps)) / (2 * eps)
    assert numeric == pytest.approx(_skew_dot(e, grad), rel=1e-2, abs=1e-5)


def test_batch_correction_none_from_the_command_line_and_global_standardisation(tmp_path):
    from cellica.cli.app import main

    data, _ = screen()
    data.write_h5ad(tmp_path / "in.h5ad")
    # "none" is the word none for batch_correction (not null): one global fit.
    assert main(["transform", "--variant", "pca", "--input", str(tmp_path / "in.h5ad"), "--out",
                 str(tmp_path / "out.h5ad"), "--batch-correction", "null"]) == 0
    out = ad.read_h5ad(tmp_path / "out.h5ad")
    assert out.uns["transform"]["params"]["batch_correction"] == "null"
    # standardize: controls z-scores every feature once on all fitting controls (base included).
    base = make_transform("base", TransformParams(standardize="controls")).fit_transform(data)
    fit = fitc(base)
    np.testing.assert_allclose(np.asarray(base.X)[fit].mean(axis=0), 0, atol=1e-5)
    np.testing.assert_allclose(np.asarray(base.X)[fit].std(axis=0), 1, atol=1e-4)
    with pytest.raises(CellicaError, match="transform.standardize: .plate. is not allowed; choose one of controls"):
        make_transform("base", TransformParams(standardize="plate"))


def test_fit_fraction_one_warns_and_evaluation_reuses_the_controls(caplog):
    from cellica.evaluate.genes import prepare
    from cellica.evaluate.params import EvalParams

    data, _ = screen()
    out = make_transform("pca", TransformParams(fit_fraction=1.0)).fit_transform(data)
    assert "fit_fraction 1.0" in caplog.text
    kept = prepare(out, EvalParams())
    assert int(kept.obs["is_control"].sum()) == int(data.obs["is_control"].sum())
    assert "REUSES these" in caplog.text


def test_a_warm_started_ica_writes_its_stages_into_the_h5ad(tmp_path):
    """Over 20,000 fit rows the ICA starts on a 10,000-row subsample; its stages (a list of
    records) must survive writing the features file (a genome-scale screen crashed here)."""
    from cellica.core.adata import write_h5ad

    data, _ = screen(n_per=22000, d=3)  # 44,000 controls, half of them fit: 22,000 rows
    out = make_transform("pca_ica").fit_transform(data)
    stages = out.uns["transform"]["diagnostics"]["ica"]["warm_start"]
    assert stages["0"]["samples"] == 10000 and stages["0"]["n_iter"] >= 1
    write_h5ad(out, tmp_path / "pca_ica.h5ad")
    back = ad.read_h5ad(tmp_path / "pca_ica.h5ad")
    assert back.uns["transform"]["diagnostics"]["ica"]["warm_start"]["0"]["samples"] == 10000


def test_transforms_are_scikit_learn_estimators():
    """get_params/set_params, clone (an unfitted copy with equal parameters) and a Pipeline step
    whose output equals the estimator's own fit_transform, bit for bit; its steps are estimators
    too, and a variant is their composition."""
    from dataclasses import replace

    from sklearn.base import clone
    from sklearn.pipeline import Pipeline

    data, _ = screen()
    p = TransformParams(n_components=3)
    fitted = make_transform("pca_ica", p).fit(data)
    assert fitted.get_params() == {"params": p, "variant": "pca_ica"}
    copy = clone(fitted)
    assert copy is not fitted and copy.params == p and copy.in_features is None and not copy.arrays
    assert clone(fitted).set_params(params=replace(p, n_components=2)).params.n_components == 2
    piped = Pipeline([("pca_ica", make_transform("pca_ica", p))]).fit_transform(data)
    np.testing.assert_array_equal(piped.X, make_transform("pca_ica", p).fit_transform(data).X)
    assert list(fitted.named_steps) == ["drop_features", "centre_batches", "pca", "ica"]
    assert fitted.named_steps["pca"].get_params() == {"whiten": True, "fit_on": "controls", "n_components": 3,
                                                      "eig_floor": 1e-6}
    assert not clone(fitted.named_steps["ica"]).arrays and fitted.named_steps["ica"].arrays["unmixing"].shape == (3, 3)


def test_each_step_is_the_operation_it_names_by_hand():
    """The composition step by step on a tiny screen, each step's output computed here with
    plain numpy from the fitted arrays: centring by each batch's fitting-control mean, the
    whitening's projection and scale, the rotation; and the composed output equals the last."""
    data, _ = screen(n_per=40, d=3)
    model = make_transform("pca_rand", TransformParams(fit_fraction=1.0)).fit(data)
    out = model.transform(data)
    x = np.asarray(data.X, np.float64)
    obs = data.obs
    ctrl = obs["is_control"].to_numpy()
    centred = x.copy()
    for b in obs["batch"].unique():
        rows = (obs["batch"] == b).to_numpy()
        centred[rows] -= x[rows & ctrl].mean(axis=0)
    pca, rot = model.named_steps["pca"].arrays, model.named_steps["random_rotation"].arrays["rotation"]
    white = (centred - pca["mean"]) @ pca["components"].T * pca["scale"]
    np.testing.assert_allclose(np.cov(white[ctrl], rowvar=False), np.eye(3), atol=1e-8)
    np.testing.assert_allclose(out.X, white @ rot.T, rtol=1e-5, atol=1e-5)
    assert list(out.var_names) == ["RC1", "RC2", "RC3"] and out.uns["transform"]["steps"] == [
        "drop_features", "centre_batches", "pca", "random_rotation"]


def test_every_variant_under_every_switch_is_bit_for_bit_as_recorded(tmp_path):
    """tests/golden/transforms.json holds, for 14 settings of the transform stage (standardise,
    position correction, each batch handling at both stages, fit sets, component counts,
    feature dropping, the ICA's subsample) x every variant, digests of the fitted file, the
    model's arrays and the model re-applied to another screen (python -m tests.golden_transforms).
    Recorded before the variants became compositions of steps, which left every bit as it was
    (Harmony's model gained the PCA arrays it builds on); re-recorded when the PCA's component
    signs became scikit-learn's (#32)."""
    import json

    from tests.golden import versions
    from tests.golden_transforms import record

    golden = json.loads((Path(__file__).parent / "golden" / "transforms.json").read_text())
    if versions() != golden["versions"]:
        pytest.skip(f"recorded with other library versions or on another processor ({golden['versions']}): "
                    "re-record with python -m tests.golden_transforms")
    found = record(tmp_path)
    problems = [f"{key}: {part}" for key, parts in golden["digests"].items() for part, value in parts.items()
                if found[key].get(part) != value]
    problems += [f"{key}: new {part}" for key, parts in found.items() for part in parts
                 if part not in golden["digests"][key]]
    assert set(found) == set(golden["digests"]) and not problems, problems
