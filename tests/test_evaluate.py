import json

import anndata as ad
import numpy as np
import pandas as pd
import pytest

from cellica.errors import CellicaError
from cellica.evaluate import (
    batch_metrics,
    bin_levels,
    evaluate_genes,
    gene_chunk,
    phenotypic_activity,
    quantise,
    summary_table,
)
from cellica.params import EvalParams

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
            rows += [{"plate": f"{b}-P1", "well": f"W{w:02d}{k % 4}", "batch": b, "perturbation": gene, "is_control": ctrl,
                      "guide": f"{gene}_g{k % 2 + 1}"} for k in range(n)]
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


def test_shared_bins_match_the_straightforward_way():
    # The bins are fixed on the controls before any fit, so a fresh Dataset per fit
    # finds the same bins: identical classifiers, not merely close ones.
    data = screen(n=300, seed=3)
    fast, imp_fast = evaluate_genes(data, FAST, shared_bins=True, threads=2)
    slow, imp_slow = evaluate_genes(data, FAST, shared_bins=False)
    for col in ("auroc_mean", "auroc_within", "sparsity", "concentration"):
        np.testing.assert_array_equal(fast[col], slow[col])
    np.testing.assert_array_equal(imp_fast["importance"], imp_slow["importance"])


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
    assert shifted["silhouette"] > clean["silhouette"]
    assert shifted["knn_mixing"] < 0.2 < clean["knn_mixing"]
    act = phenotypic_activity(screen(), "clean", FAST).set_index("perturbation")
    assert act.loc["STRONG", "map"] > act.loc["NULL", "map"]
    assert bool(act.loc["STRONG", "significant"])


def test_summary_table_shapes():
    pg, _ = evaluate_genes(screen(), FAST, variant="a")
    pg2 = pg.assign(variant="b")
    batch = pd.DataFrame([batch_metrics(screen(), v, FAST) for v in ("a", "b")])
    act = pd.concat([phenotypic_activity(screen(), v, FAST) for v in ("a", "b")])
    table = summary_table(pd.concat([pg, pg2]), batch, act)
    per_variant = table[table.table == "per_variant"].pivot(index="metric", columns="variant", values="value")
    assert {"auroc_mean", "sparsity", "concentration", "batch_accuracy", "map_mean", "active_fraction"} <= set(per_variant.index)
    assert set(table[table.table == "per_gene"]["row"]) == {"STRONG", "NULL", "ONEB"}


def test_activity_without_perturbations_is_empty_not_an_error():
    controls_only = screen()
    controls_only = controls_only[controls_only.obs.is_control.to_numpy()].copy()
    assert phenotypic_activity(controls_only, "c", FAST).empty
