"""The Python example in docs/python.md runs as written and produces real numbers."""

import re

import pandas as pd

from tests.conftest import REPO


def test_the_documented_python_pipeline_runs(tmp_path, monkeypatch):
    text = (REPO / "docs" / "python.md").read_text()
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "docs/python.md", "exec"), {"__name__": "__main__"})
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
