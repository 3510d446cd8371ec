"""Baselines (docs/evaluation.md, "Baselines"): the cell count by hand, the untrained encoder's
weights, a baseline's features, which baselines a run plans, their comparisons with the claims'
winner (a Holm family of their own) and the claims' ``baselines`` column."""

import json
import shlex

import numpy as np
import pandas as pd
import pytest

from cellica.cli.app import main
from cellica.core.errors import CellicaError
from cellica.registry import (
    BASELINE_NAMES,
    BASELINES,
    CLAIMS,
    COMPARED_METRICS,
    PAPER_VARIANTS,
    VARIANTS,
)
from tests.conftest import disks


@pytest.fixture
def disk_store(tmp_path):
    """Four tiles whose DNA channel holds 2, 0 (flat), 3 and 0 (a spot below min_area) nuclei,
    and whose ER channel holds 1 in every tile."""
    from cellica.store.tilestore import TileStore

    dna = [disks([(8, 8), (22, 22)]), np.full((32, 32), 100), disks([(6, 6), (6, 24), (24, 15)]),
           disks([(8, 8)], radius=1)]
    tiles = np.stack([np.stack([d, disks([(16, 16)])]) for d in dna]).astype(np.uint16)
    meta = pd.DataFrame({"tile_id": [f"t{i}" for i in range(4)], "plate": "P1", "well": ["A01", "A01", "A02", "A02"],
                         "site": [0, 1, 0, 1], "batch": "b0", "perturbation": ["ctrl", "ctrl", "G1", "G1"],
                         "is_control": [True, True, False, False]})
    with TileStore.create(tmp_path / "disks.zarr", ["DNA", "ER"], (32, 32), "uint16", {"source": "test"}, 2) as w:
        w.append(tiles, meta)
    return tmp_path / "disks.zarr"


def test_registry_baselines_are_compared_on_compared_metrics_only():
    assert not set(BASELINES) & set(VARIANTS)  # their names share the {variant} wildcard
    for b in BASELINES.values():
        assert b.metrics and set(b.metrics) <= set(COMPARED_METRICS), b.name
        assert set(b.sources) <= {"simulate", "ingest", "features"}
    assert BASELINES["cell_count"].metrics == ("auroc_heldout",)  # one feature: no importance profile


def test_nuclei_counted_by_hand(disk_store, tmp_path):
    from cellica.embed.cell_count import count_nuclei
    from cellica.embed.params import ProfileParams

    p = ProfileParams(nuclei_channel="DNA", smoothing=0, min_area=8, batch_size=3)
    a = count_nuclei(disk_store, params=p)
    assert a.X.ravel().tolist() == [2, 0, 3, 0] and list(a.var_names) == ["nuclei_count"]
    assert a.obs["perturbation"].tolist() == ["ctrl", "ctrl", "G1", "G1"]
    assert a.uns["provenance"]["tiles_without_nuclei"] == 2 and a.uns["provenance"]["nuclei_channel"] == "DNA"
    assert count_nuclei(disk_store, params=ProfileParams(nuclei_channel="1", smoothing=0)).X.ravel().tolist() == [1] * 4
    # shards gather to the whole, as embeddings do
    from cellica.embed.extract import gather_embeddings

    parts = [tmp_path / f"{i}.h5ad" for i in range(2)]
    for i, path in enumerate(parts):
        code = main(["count-nuclei", "--store", str(disk_store), "--out", str(path), "--shard", f"{i}/2",
                     "--nuclei-channel", "DNA", "--smoothing", "0"])
        assert code == 0
    assert gather_embeddings(parts[::-1]).X.ravel().tolist() == [2, 0, 3, 0]


def test_an_unknown_nuclei_channel_is_one_line(disk_store, tmp_path, capsys):
    code = main(["count-nuclei", "--store", str(disk_store), "--out", str(tmp_path / "n.h5ad"),
                 "--nuclei-channel", "Hoechst"])
    err = capsys.readouterr().err
    assert code == 2 and "'Hoechst'" in err and not (tmp_path / "n.h5ad").exists()


def test_the_untrained_encoder_is_the_seeded_initialisation(tiny_store, tiny_model, tmp_path):
    import torch
    from safetensors.torch import load_file

    from cellica.embed._checkpoints import read_sidecar
    from cellica.embed._mae import MaskedAutoencoder
    from cellica.embed.params import TrainParams
    from cellica.embed.train import train_mae
    from tests.conftest import TINY_MAE

    p = TrainParams(**TINY_MAE)
    summary = train_mae(tiny_store.path, tmp_path / "u.safetensors", p, untrained=True)
    assert summary["untrained"] and summary["history"] == [] and summary["final_loss"] is None
    torch.manual_seed(p.seed)
    fresh = MaskedAutoencoder(p.mae_config(tiny_store.n_channels, tiny_store.tile_shape[0])).state_dict()
    saved, trained = load_file(tmp_path / "u.safetensors"), load_file(tiny_model)
    assert set(saved) == set(fresh) == set(trained)
    assert all(torch.equal(saved[k], fresh[k]) for k in fresh)
    assert any(not torch.equal(saved[k], trained[k]) for k in fresh)
    assert read_sidecar(tmp_path / "u.safetensors")["training"]["untrained"] is True


def _embeddings(tmp_path, obs_extra=None, features=None):
    from cellica.core.adata import make_adata, write_h5ad

    n = 12
    obs = pd.DataFrame({"tile_id": [f"t{i}" for i in range(n)], "plate": "P1", "well": [f"A{i:02d}" for i in range(n)],
                        "site": 0, "batch": ["b0", "b1"] * 6, "perturbation": ["ctrl"] * 6 + ["G1"] * 6,
                        "is_control": [True] * 6 + [False] * 6, **(obs_extra or {})}).set_index("tile_id", drop=False)
    x = features if features is not None else np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    path = tmp_path / "emb.h5ad"
    write_h5ad(make_adata(x, obs, ["f0", "f1", "f2"], {}, "test"), path)
    return path


def test_a_baseline_is_the_base_variant_under_its_own_name(tmp_path):
    from cellica.core.adata import read_h5ad, stored_variant
    from cellica.core.lineage import features_id, lineage_for
    from cellica.transform.apply import baseline_file
    from cellica.transform.params import TransformParams
    from cellica.transform.variants import make_transform

    counts = [float(c) for c in range(3, 15)]
    emb = _embeddings(tmp_path, {"Metadata_Count_Cells": counts})
    out = tmp_path / "cell_count.h5ad"
    made = baseline_file("cell_count", emb, out, column="Metadata_Count_Cells")
    assert made.X.ravel().tolist() == counts and list(made.var_names) == ["Metadata_Count_Cells"]  # base: unchanged
    assert stored_variant(out, "?") == "cell_count"
    assert lineage_for(out, "cell_count") == {
        "cell_count": features_id(out),
        "(source of cell_count)": features_id(emb),
    }
    whole = baseline_file("untrained", emb, tmp_path / "u.h5ad")  # every feature, as base makes them
    np.testing.assert_array_equal(whole.X, make_transform("base", TransformParams()).fit_transform(read_h5ad(emb)).X)
    assert baseline_file("cell_count", emb, tmp_path / "f1.h5ad", column="f1").X.ravel().tolist() == \
        read_h5ad(emb).X[:, 1].tolist()  # a feature column


@pytest.mark.parametrize("column, values, message", [
    ("Count_Nuclei", None, "no column 'Count_Nuclei'"),
    ("Metadata_Count_Cells", ["3"] * 11 + ["n/a"], "not a number in 1 sample(s), e.g. ['t11']"),
])
def test_a_bad_count_column_is_one_line_and_writes_nothing(tmp_path, capsys, column, values, message):
    emb = _embeddings(tmp_path, {"Metadata_Count_Cells": values or [1.0] * 12})
    out = tmp_path / "cell_count.h5ad"
    code = main(["baseline", "--name", "cell_count", "--input", str(emb), "--column", column, "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0] and str(emb) in err[0] and not out.exists()
    with pytest.raises(CellicaError, match="unknown name 'shuffled'"):
        from cellica.transform.apply import baseline_file

        baseline_file("shuffled", emb, out)


# ------------------------------------------------------------------------------- the plan
def _plan(tmp_path, **sections):
    from cellica.plan import RunPlan

    return RunPlan({"results_dir": "out", **sections})


def test_the_plan_keeps_the_baselines_that_apply_and_says_why_not(tmp_path):
    plan = _plan(tmp_path, baselines={"names": list(BASELINE_NAMES)})
    assert plan.baselines == list(BASELINE_NAMES) and plan.baseline_notes == []
    assert plan.evaluated == plan.variants + plan.baselines
    assert plan.baseline_input("classical") == "out/embeddings/cp_measure/embeddings.h5ad"
    assert plan.baseline_input("cell_count") == "out/embeddings/cell_count/embeddings.h5ad"
    assert "cell_count" in plan.wildcard_constraints()["variant"].split("|")
    assert plan.summarize_inputs()["per_gene"][-3:] == [f"out/eval/{b}/per_gene.parquet" for b in plan.baselines]
    wells = _plan(tmp_path, transform={"level": "wells"})
    assert wells.baseline_input("untrained") == "out/embeddings/untrained/wells.h5ad"
    model = tmp_path / "m.safetensors"
    model.write_bytes(b"x")
    ckpt = _plan(tmp_path, mae={"checkpoint": str(model)})
    assert ckpt.baselines == ["cell_count"] and "untrained left out" in ckpt.baseline_notes[0]
    profiles = _plan(tmp_path, profiles={"enabled": True}, baselines={"names": ["untrained", "classical"]})
    assert profiles.baselines == [] and len(profiles.baseline_notes) == 2


def test_imported_features_count_cells_from_the_named_column(tmp_path):
    table = tmp_path / "t.csv"
    table.write_text("a\n1\n")
    features = {"source": "features", "features": {"path": str(table)}}
    plan = _plan(tmp_path, **features)
    assert plan.baselines == [] and "cell_count_column" in plan.baseline_notes[0]
    assert "untrained left out: it needs images" in plan.baseline_notes[1]
    named = _plan(tmp_path, **features, baselines={"cell_count_column": "Metadata Count; rm -rf"})
    assert named.baselines == ["cell_count"] and named.baseline_input("cell_count") == named.emb
    args = shlex.split(named.baseline_args("cell_count"))
    assert args[args.index("--column") + 1] == "Metadata Count; rm -rf"  # quoted: one argument


# ------------------------------------------------------------------ comparisons and claims
def _values(rows):
    return pd.DataFrame(rows, columns=["variant", "gene", "seed", "metric", "value"])


def test_the_winner_against_a_baseline_by_hand():
    from cellica.evaluate._compare import compare_baselines

    auroc = {"pca_ica": [0.9, 0.8, 0.7, 0.6], "cell_count": [0.5, 0.5, 0.5, 0.5]}
    values = _values([(v, f"g{i}", 0, "auroc_heldout", x) for v, xs in auroc.items() for i, x in enumerate(xs)])
    out = compare_baselines(values, {"pca_ica": 8, "cell_count": 1}, 200, 0, ["cell_count"])
    assert out[["metric", "variant", "other"]].values.tolist() == [["auroc_heldout", "pca_ica", "cell_count"]]
    r = out.iloc[0]
    assert r["value"] == pytest.approx(0.25) and r["n"] == 4
    assert r["p_value"] == pytest.approx(0.125)  # exact Wilcoxon: 4 positive differences, 2 / 2**4
    assert r["p_holm"] == pytest.approx(0.125) and r["verdict"] == "inconclusive"  # a family of one


def _comparisons(verdicts):
    rows = [{"metric": m, "variant": "pca_ica", "other": b, "verdict": v, "value": 0.1, "ci_low": 0.05,
             "ci_high": 0.15, "n": 30, "p_holm": 0.01, "detail": ""} for (m, b), v in verdicts.items()]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("verdicts, want", [
    ({("auroc_heldout", "cell_count"): "higher", ("auroc_heldout", "untrained"): "higher"}, "yes"),
    ({("auroc_heldout", "cell_count"): "higher", ("auroc_heldout", "untrained"): "inconclusive"}, "inconclusive"),
    ({("auroc_heldout", "cell_count"): "lower", ("auroc_heldout", "untrained"): "higher"}, "no"),
    ({("auroc_heldout", "cell_count"): "higher", ("auroc_heldout", "untrained"): "not tested"}, "inconclusive"),
    ({("auroc_heldout", "cell_count"): "not tested", ("auroc_heldout", "untrained"): "not tested"}, "not tested"),
])
def test_beats_every_baseline_by_hand(verdicts, want):
    from cellica.evaluate._claims import beats_baselines

    verdict, text = beats_baselines(CLAIMS[0], _comparisons(verdicts), ["cell_count", "untrained"])
    assert verdict == want
    assert text.count("auroc_heldout: pca_ica") == 2


def test_a_baseline_without_the_claims_metrics_takes_no_part():
    from cellica.evaluate._claims import beats_baselines

    sparsity = next(c for c in CLAIMS if c.parts[0][0] == "sparsity")
    verdict, text = beats_baselines(sparsity, _comparisons({("sparsity", "untrained"): "higher"}),
                                    ["cell_count", "untrained"])
    assert verdict == "yes" and "cell_count: compared on auroc_heldout only" in text


def _per_gene(rng, variants, n_genes=12):
    rows = []
    for v in variants:
        shift = 0.1 * (len(v) % 3)
        for g in range(n_genes):
            for seed in (0, 1):
                rows.append({"variant": v, "gene": f"g{g}", "seed": seed, "skipped": False, "split": "batch",
                             "no_split": False, "n_features": 1 if v == "cell_count" else 8,
                             "auroc_mean": 0.6 + shift + rng.normal(0, 0.05), "auroc_within": 0.7,
                             "sparsity": 0.3 + rng.normal(0, 0.05), "concentration": 0.4 + rng.normal(0, 0.05)})
    return pd.DataFrame(rows)


def test_the_papers_comparisons_do_not_depend_on_the_baselines():
    from cellica.evaluate.summary import summary_table

    per_gene = _per_gene(np.random.default_rng(0), [*PAPER_VARIANTS, "cell_count", "untrained"])
    empty = pd.DataFrame()
    alone = summary_table(per_gene[per_gene["variant"].isin(PAPER_VARIANTS)], empty, empty, n_boot=200)
    both = summary_table(per_gene, empty, empty, n_boot=200)
    paper = lambda t: t[(t["table"] == "comparison") & t["variant"].isin(PAPER_VARIANTS)  # noqa: E731
                        & ~t["row"].str.contains("cell_count|untrained")].reset_index(drop=True)
    pd.testing.assert_frame_equal(paper(alone).drop(columns="baselines"), paper(both).drop(columns="baselines"))
    claims = both[both["table"] == "claim"]
    assert set(claims["baselines"]) <= {"yes", "no", "inconclusive", "not tested", "n/a"}
    assert (alone.loc[alone["table"] == "claim", "baselines"] == "").all()  # no baselines: no column value
    rows = both[(both["table"] == "comparison") & both["row"].str.contains("cell_count")]
    assert rows["metric"].tolist() == ["auroc_heldout"]
    means = both[(both["table"] == "per_variant") & (both["row"] == "mean") & (both["metric"] == "auroc_heldout")]
    assert {"cell_count", "untrained"} <= set(means["variant"]) and means["ci_low"].notna().all()
    assert json.loads(json.dumps(claims["baselines"].tolist()))  # plain strings in the parquet
