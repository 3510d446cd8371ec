import json

import anndata as ad
import numpy as np
import pandas as pd
import pytest

from cellica.core.chunks import gene_chunk
from cellica.core.errors import CellicaError
from cellica.evaluate._classifiers import bin_levels, quantise
from cellica.evaluate.batch import batch_metrics, phenotypic_activity
from cellica.evaluate.genes import evaluate_genes
from cellica.evaluate.metrics import mean_roc
from cellica.evaluate.params import EvalParams

FAST = EvalParams(n_trees=20, min_data_in_leaf=5, map_null_size=200)


def screen(n=40, d=6, batches=("B1", "B2", "B3"), seed=0, batch_shift=0.0):
    """Controls + STRONG (moves feature 0), NULL (no effect) and ONEB (one batch only)."""
    rng = np.random.default_rng(seed)
    rows, xs = [], []
    for bi, b in enumerate(batches):
        genes = [("ctrl", True), ("STRONG", False), ("NULL", False)] + ([("ONEB", False)] if bi == 0 else [])
        for w, (gene, ctrl) in enumerate(genes):
            x = rng.normal(size=(n, d)) + batch_shift * bi
            if gene in ("STRONG", "ONEB"):
                x[:, 0] += 3.0
            xs.append(x)
            rows += [
                {
                    "plate": f"{b}-P1",
                    "well": f"W{w:02d}{k % 4}",
                    "batch": b,
                    "perturbation": gene,
                    "is_control": ctrl,
                    "guide": f"{gene}_g{k % 2 + 1}",
                }
                for k in range(n)
            ]
    obs = pd.DataFrame(rows, index=[f"t{i}" for i in range(len(rows))])
    return ad.AnnData(np.vstack(xs).astype(np.float32), obs=obs, var=pd.DataFrame(index=[f"f{i}" for i in range(d)]))


def test_per_gene_metrics_find_the_true_signal():
    pg, imps = evaluate_genes(screen(), FAST, variant="toy")
    pg = pg.set_index("gene")
    assert pg.loc["STRONG", "auroc_mean"] > 0.95 and pg.loc["STRONG", "n_folds"] == 3
    assert 0.3 < pg.loc["NULL", "auroc_mean"] < 0.7
    assert pg.loc["STRONG", "top_features"].split(",")[0] == "f0"
    assert pg.loc["STRONG", "concentration"] > 0.9  # the one informative feature is ranked first
    assert pg.loc["STRONG", "sparsity"] > pg.loc["NULL", "sparsity"]
    assert set(json.loads(pg.loc["STRONG", "auroc_by_guide"])) == {"STRONG_g1", "STRONG_g2"}
    # A gene in one batch falls back to a random split and says so.
    assert bool(pg.loc["ONEB", "single_batch"]) and "stratified random split" in pg.loc["ONEB", "notes"]
    assert pg.loc["ONEB", "split"] == "random" and pg.loc["STRONG", "split"] == "batch"
    assert set(imps["gene"]) == {"STRONG", "NULL", "ONEB"} and imps.groupby("gene").size().eq(6).all()
    assert pg["variant"].eq("toy").all()


def test_held_out_batches_expose_batch_confounding():
    data = screen(batch_shift=2.0)
    # NULL has no biology; with the batch effect a random split still cannot cheat because
    # controls share the batches, but held-out AUROC is what generalises: both near chance.
    pg, _ = evaluate_genes(data, FAST)
    pg = pg.set_index("gene")
    assert abs(pg.loc["NULL", "auroc_mean"] - 0.5) < 0.2
    assert not np.isnan(pg.loc["NULL", "auroc_within"])


def test_default_is_lightgbms_own_binning_per_training_set():
    # The paper's recipe: a fresh Dataset per fit, binned by LightGBM itself. Equal to
    # a hand-written loop of lgb.train calls with the Table 6 parameters.
    import lightgbm as lgb

    assert EvalParams().binning == "lightgbm" and EvalParams().max_bin == 255
    data = screen(n=60, seed=4)
    p = EvalParams(n_trees=15, min_data_in_leaf=5)
    pg, _ = evaluate_genes(data, p)
    obs = data.obs
    pert = (obs.perturbation == "STRONG").to_numpy()
    ctrl = obs.is_control.to_numpy()
    x = np.asarray(data.X)
    aucs = []
    from sklearn.metrics import roc_auc_score

    for b in ("B1", "B2", "B3"):
        held = (obs.batch == b).to_numpy()
        tr, te = ~held & (pert | ctrl), held & (pert | ctrl)
        params = {"objective": "binary", "is_unbalance": True, "learning_rate": 0.05, "num_leaves": 31,
                  "feature_fraction": 0.6, "reg_alpha": 5.0, "reg_lambda": 1.0, "min_data_in_leaf": 5, "max_bin": 255,
                  "num_threads": 1, "seed": 0, "deterministic": True, "force_col_wise": True, "verbose": -1}
        ds = lgb.Dataset(
            x[tr],
            label=pert[tr].astype(float),
            params={k: params[k] for k in ("max_bin", "min_data_in_leaf", "verbose", "seed")},
        )
        booster = lgb.train(params, ds, num_boost_round=15)
        aucs.append(roc_auc_score(pert[te], booster.predict(x[te])))
    assert pg.set_index("gene").loc["STRONG", "auroc_mean"] == pytest.approx(np.mean(aucs), abs=1e-12)


def test_controls_binning_shared_dataset_equals_per_fit_datasets():
    # The fast path: bins fixed on the controls, so row subsets of one Dataset give the
    # classifiers a fresh Dataset of the same codes gives.
    data = screen(n=300, seed=3)
    p = EvalParams(n_trees=20, min_data_in_leaf=5, binning="controls", max_bin=63)
    fast, imp_fast = evaluate_genes(data, p, threads=2)
    slow, imp_slow = evaluate_genes(data, p, shared_dataset=False)
    for col in ("auroc_mean", "auroc_within", "sparsity", "concentration"):
        np.testing.assert_array_equal(fast[col], slow[col])
    np.testing.assert_array_equal(imp_fast["importance"], imp_slow["importance"])


def test_seeds_repeat_the_fits_and_thread_count_changes_nothing():
    data = screen(n=50, seed=5)
    p = EvalParams(n_trees=20, min_data_in_leaf=5, seeds=[3, 7])
    one, imp_one = evaluate_genes(data, p, threads=1)
    two, imp_two = evaluate_genes(data, p, threads=2)
    pd.testing.assert_frame_equal(one, two)
    pd.testing.assert_frame_equal(imp_one, imp_two)
    assert sorted(one["seed"].unique()) == [3, 7] and len(one) == 2 * 3
    by_seed = one.pivot(index="gene", columns="seed", values="auroc_within")
    assert (by_seed[3] != by_seed[7]).any()  # the random splits differ per seed


def test_seed_lists_and_per_seed_files_are_checked():
    data = screen()
    for seeds, msg in (([], "seeds: give at least 1"), ([1, 1], r"seeds: values are repeated in \[1, 1\]")):
        with pytest.raises(CellicaError, match=msg):
            evaluate_genes(data, EvalParams(n_trees=5, seeds=seeds))
    with pytest.raises(CellicaError, match="2 features files for 3 seeds"):
        evaluate_genes([data, data], EvalParams(n_trees=5, seeds=[0, 1, 2]))


def test_a_gene_without_any_split_is_flagged_with_the_reason():
    # min_data_in_leaf above half of any training set: no leaf can be split off.
    pg, _ = evaluate_genes(screen(n=40), EvalParams(n_trees=10, min_data_in_leaf=200))
    row = pg.set_index("gene").loc["NULL"]
    assert bool(row["no_split"]) and "no classifier made a split" in row["no_split_reason"]
    assert "min_data_in_leaf=200" in row["no_split_reason"]
    assert row["auroc_mean"] == pytest.approx(0.5) and row["concentration"] == pytest.approx(0.0)
    assert np.isnan(row["sparsity"])
    used, _ = evaluate_genes(screen(n=40), FAST)
    assert not used["no_split"].any()


def test_fold_roc_curves_average_to_the_table_auroc():
    pg, _ = evaluate_genes(screen(n=60, seed=2), FAST)
    for row in pg[pg["skipped"] == ""].itertuples():
        curves = json.loads(row.roc_folds)
        assert len(curves) == row.n_folds
        fpr, tpr = mean_roc(curves)
        assert np.trapezoid(tpr, fpr) == pytest.approx(row.auroc_mean, abs=0.03)
        assert json.loads(row.roc_mean) == [fpr.tolist(), tpr.tolist()]  # stored: the report only draws it


def test_quantise_codes_at_control_quantiles():
    x = np.array([[0.0, 5.0], [1.0, 5.0], [2.0, 5.0], [3.0, 5.0], [10.0, -1.0]], np.float32)
    ref = np.array([True, True, True, True, False])
    codes = quantise(x, ref, levels=2)
    # Median of 0..3 is 1.5: 0,1 -> 0; 2,3 and the out-of-range 10 -> 1. A constant column has a
    # single edge (5): the controls sit on it (code 1), a value below it gets code 0.
    np.testing.assert_array_equal(codes[:, 0], [0, 0, 1, 1, 1])
    np.testing.assert_array_equal(codes[:, 1], [1, 1, 1, 1, 0])
    assert bin_levels(30, 63) == 10 and bin_levels(22000, 63) == 63 and bin_levels(5, 63) == 2
    with pytest.raises(CellicaError, match="levels"):
        quantise(x, ref, levels=1)


def test_too_few_samples_is_skipped_with_a_reason():
    data = screen()
    keep = ~((data.obs.perturbation == "NULL").to_numpy() & (np.arange(data.n_obs) % 40 >= 1))
    pg, _ = evaluate_genes(data[keep].copy(), FAST)
    row = pg.set_index("gene").loc["NULL"]
    assert "only 3 sample(s)" in row["skipped"]


def test_one_batch_only_falls_back_and_missing_controls_fold(caplog):
    one = screen(batches=("B1",))
    pg, _ = evaluate_genes(one, FAST)
    assert pg["single_batch"].all() and "only one batch" in caplog.text
    data = screen()
    drop = (data.obs.batch == "B2").to_numpy() & data.obs.is_control.to_numpy()
    pg, _ = evaluate_genes(data[~drop].copy(), FAST)
    row = pg.set_index("gene").loc["STRONG"]
    assert row["n_folds"] == 2 and "batch B2 has no controls: fold skipped" in row["notes"]


def test_bad_inputs():
    data = screen()
    data.obs["is_control"] = False
    with pytest.raises(CellicaError, match="no control samples"):
        evaluate_genes(data, FAST)
    flat = screen()
    flat.X = np.zeros_like(flat.X)
    with pytest.raises(CellicaError, match="every feature is constant"):
        evaluate_genes(flat, FAST)
    with pytest.raises(CellicaError, match="out of range"):
        gene_chunk(["a"], "2/2")


def test_chunks_partition_the_genes():
    genes = [f"g{i}" for i in range(7)]
    parts = [gene_chunk(genes, f"{i}/3") for i in range(3)]
    assert sorted(sum(parts, [])) == genes


def test_batch_metrics_and_activity():
    clean = batch_metrics(screen(), "clean", FAST)
    shifted = batch_metrics(screen(batch_shift=3.0), "shifted", FAST)
    assert clean["chance_accuracy"] == pytest.approx(1 / 3)
    assert shifted["batch_accuracy"] > 0.9 > clean["batch_accuracy"]
    assert shifted["batch_accuracy_lgbm"] > 0.9 > clean["batch_accuracy_lgbm"]
    assert shifted["batch_accuracy_ci_low"] <= shifted["batch_accuracy"] <= shifted["batch_accuracy_ci_high"]
    assert clean["batch_accuracy_ci_low"] < 1 / 3 + 0.15 < shifted["batch_accuracy_ci_low"]
    assert shifted["silhouette"] > clean["silhouette"]
    assert shifted["knn_mixing"] < 0.2 < clean["knn_mixing"]
    act = phenotypic_activity(screen(), "clean", FAST).set_index("perturbation")
    assert act.loc["STRONG", "map"] > act.loc["NULL", "map"]
    assert bool(act.loc["STRONG", "significant"])


def test_activity_without_perturbations_is_empty_not_an_error():
    controls_only = screen()
    controls_only = controls_only[controls_only.obs.is_control.to_numpy()].copy()
    assert phenotypic_activity(controls_only, "c", FAST).empty


def test_a_gene_without_any_usable_held_out_fold_is_skipped_with_the_reasons():
    # NULL's samples only in B2 and B3, whose controls are gone: every fold is skipped.
    data = screen()
    obs = data.obs
    drop = (obs.batch.isin(["B2", "B3"]) & obs.is_control).to_numpy() | \
        ((obs.perturbation == "NULL") & (obs.batch == "B1")).to_numpy()
    pg, _ = evaluate_genes(data[~drop].copy(), FAST)
    row = pg.set_index("gene").loc["NULL"]
    assert "batch B2 has no controls: fold skipped" in row["skipped"] and "batch B3" in row["skipped"]


def test_activity_by_groups_of_perturbations_gives_the_bits_of_one_copairs_call(monkeypatch):
    """AP is computed per group of perturbations to bound memory; a perturbation with one well
    (no positive pair) must ride along without breaking a group, and nothing may move."""
    import cellica.evaluate.batch as batch

    data = screen()
    one = data[~data.obs.is_control.to_numpy()].obs.index[:1]
    data.obs.loc[one, "perturbation"] = "SINGLE"
    data.obs.loc[one, "well"] = "Z99"
    whole = phenotypic_activity(data, "v", FAST)
    monkeypatch.setattr(batch, "AP_PAIRS_PER_CALL", 1)  # one perturbation per group
    monkeypatch.setattr(batch, "AP_BATCH_BYTES", 1)  # one pair per cosine batch
    pd.testing.assert_frame_equal(phenotypic_activity(data, "v", FAST), whole, check_exact=True)
    assert set(whole["perturbation"]) >= {"STRONG", "NULL"}
