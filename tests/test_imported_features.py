"""Bring-your-own tile-level embeddings of pooled screens through the default DAG to the report
(a way in of the README's; its own file so that the e2e tier spreads its files evenly over
both workers: pytest -n 2 --dist loadfile)."""

import numpy as np
import pandas as pd
import pytest
import yaml

from cellica.registry import PAPER_VARIANTS
from tests.test_workflow import snakemake

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("controls_in_every_well", [False, True], ids=["control-wells", "controls-in-every-well"])
def test_imported_tile_embeddings_with_pooled_wells_truth_and_no_batch_correction(tmp_path, controls_in_every_well):
    """Bring-your-own tile-level embeddings: several genes per well, guide and site columns, a
    truth table of factors, batch_correction none; the whole DAG runs to the report, also for a
    pooled screen with control tiles in every well and no all-control well (the gene maps
    centre each plate on its control profiles per well)."""

    rng = np.random.default_rng(0)
    counts = np.random.default_rng(1)  # the cell counts' own stream: the embeddings stay those of rng alone
    rows, z = [], []
    for b in range(3):
        for w in range(8):
            if controls_in_every_well:
                genes = ["ctrl", f"G{w % 4}", f"G{(w + 1) % 4}"]
            else:
                genes = ["ctrl"] if w < 4 else [f"G{w % 4}", f"G{(w + 1) % 4}"]  # pooled wells hold two genes
            for gene in genes:
                for k in range(12):
                    f = rng.laplace(size=4)
                    if gene != "ctrl":
                        f[int(gene[1])] += 1.5
                    z.append(f)
                    rows.append(
                        {
                            "tile_id": f"b{b}w{w}{gene}{k}",
                            "plate": f"P{b}",
                            "well": f"W{w}",
                            "batch": f"B{b}",
                            "gene": gene,
                            "ctrl": gene == "ctrl",
                            "guide": f"{gene}_{k % 2}",
                            "site": k % 3,
                            "n_cells": counts.poisson(20 if gene == "G0" else 40),
                        }
                    )  # G0 kills cells
    z = np.asarray(z)
    offsets = np.repeat(rng.normal(0, 0.3, (3, 12)), [sum(r["batch"] == f"B{b}" for r in rows) for b in range(3)], 0)
    emb = z @ rng.normal(size=(4, 12)) + offsets + 0.05 * rng.normal(size=(len(z), 12))
    table = pd.DataFrame(rows).join(pd.DataFrame(emb, columns=[f"e{i}" for i in range(12)]))
    table.to_csv(tmp_path / "tiles.csv", index=False)
    pd.DataFrame(z, columns=[f"z{i}" for i in range(4)]).assign(sample_id=table["tile_id"]).to_parquet(
        tmp_path / "truth.parquet")
    cfg = {
        "results_dir": "results",
        "reports_dir": "reports",
        "source": "features",
        "features": {
            "path": str(tmp_path / "tiles.csv"),
            "id_column": "tile_id",
            "extra_metadata": ["guide", "site", "n_cells"],
            "column_map": {"plate": "plate", "well": "well", "batch": "batch", "perturbation": "gene",
                           "is_control": "ctrl"},
            "truth": str(tmp_path / "truth.parquet"),
        },
        "baselines": {"cell_count_column": "n_cells"},  # the cell-count baseline of imported features
        "transform": {"n_components": 4, "batch_correction": None, "variants": list(PAPER_VARIANTS)},
        "evaluate": {"n_trees": 20, "min_data_in_leaf": 5, "map_null_size": 100, "n_boot": 200},
        "maps": {"min_genes": 3, "consistency_permutations": 100, "null_pairs": 100, "n_boot": 100},
    }
    config = tmp_path / "byo.yaml"
    config.write_text(yaml.safe_dump(cfg))
    run = snakemake(tmp_path, configfile=config)
    assert run.returncode == 0, run.stderr[-4000:]
    res = tmp_path / "results"
    feats = __import__("anndata").read_h5ad(res / "features" / "pca.h5ad")
    assert feats.n_vars == 4 and {"tile_id", "site", "guide"} <= set(feats.obs.columns)
    assert feats.uns["transform"]["params"]["batch_correction"] == "null"
    batch = pd.read_parquet(res / "eval" / "batch_metrics.parquet").set_index("variant")
    assert (
        batch.loc["pca_ica", "truth_mcc"] > 0.8
        and batch.loc["pca_ica", "truth_infom"] > batch.loc["pca", "truth_infom"]
    )
    assert np.isnan(batch.loc["pca", "truth_batch_r2"])  # a table of factors has no plate parameters
    act = pd.read_parquet(res / "eval" / "activity.parquet")
    assert set(act["perturbation"]) == {"G0", "G1", "G2", "G3"}
    pg = pd.read_parquet(res / "eval" / "pca_ica" / "per_gene.parquet")
    assert (pg["auroc_mean"] > 0.7).all() and not pg["no_split"].any()
    log = (res / "logs" / "evaluate" / "pca_ica-0-of-1.log").read_text()
    assert "evaluating" in log and "tiles" in log
    # The cell count, the one baseline imported features can have: it finds the gene that kills cells only.
    counts = __import__("anndata").read_h5ad(res / "features" / "cell_count.h5ad")
    np.testing.assert_array_equal(counts.X.ravel(), table.set_index("tile_id").loc[counts.obs_names, "n_cells"])
    cc = pd.read_parquet(res / "eval" / "cell_count" / "per_gene.parquet").groupby("gene")["auroc_mean"].mean()
    assert cc["G0"] > 0.8 and cc.drop("G0").max() < cc["G0"] - 0.2
    summary = pd.read_parquet(res / "eval" / "summary.parquet")
    assert "pca_ica - cell_count" in set(summary.loc[summary["table"] == "comparison", "row"])
    assert summary.loc[summary["table"] == "claim", "baselines"].iloc[0] in {"yes", "no", "inconclusive"}
    assert "baseline untrained left out: it needs images" in run.stderr
