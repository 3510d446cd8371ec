"""The Python example in docs/python.md runs as written and produces real numbers."""

import re

import pandas as pd

from tests.conftest import REPO


def test_the_documented_python_pipeline_runs(tmp_path, monkeypatch):
    text = (REPO / "docs" / "python.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 2  # the files pipeline, then cellica.run on its embeddings
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__main__"}
    for code in blocks:  # in order, in one namespace, as a reader pasting them would
        exec(compile(code, "docs/python.md", "exec"), namespace)
    out = tmp_path / "python-demo"
    pg = pd.read_parquet(out / "pca_ica.per_gene.parquet")
    assert len(pg) == 4 and pg["auroc_mean"].notna().all() and (pg["auroc_mean"] != 0.5).any()
    summary = pd.read_parquet(out / "summary.parquet")
    assert {"claim", "per_variant"} <= set(summary["table"])
    assert {"recall", "recall_null", "guide_consistent_fraction"} <= set(summary["metric"])
    recall = pd.read_parquet(out / "recall.parquet")
    assert (recall.loc[recall["source"] == "CORUM", "n_pairs"] > 0).all()  # complex members are CORUM pairs
    index = (out / "report" / "index.html").read_text()
    assert "Gene maps" in index and "Plate layout" in index and "CORUM: recall of" in index

    # cellica.run computed what the files path computed, number for number (same transform,
    # same classifiers; the files path also had the ground truth, which adds columns only)
    result = namespace["result"]
    assert set(result.features) == {"pca", "pca_ica"} and result.features["pca_ica"].n_vars == 8
    mem = result.per_gene[result.per_gene["variant"] == "pca_ica"].set_index("gene").sort_index()
    files = pg.set_index("gene").sort_index()
    for column in ("auroc_mean", "auroc_sd", "sparsity", "concentration", "roc_mean", "n_samples"):
        pd.testing.assert_series_equal(mem[column], files[column], check_exact=True, check_dtype=False)
    claims = result.summary[result.summary["table"] == "claim"]
    assert len(claims) and set(claims["verdict"]) <= {"holds", "fails", "inconclusive", "not tested"}
