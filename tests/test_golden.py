"""The golden-number check itself can fail: tests/golden.py's digests and their comparison."""

import numpy as np
import pandas as pd

from tests.golden import compare, digests


def test_a_changed_number_a_new_column_and_a_new_file_are_each_caught(tmp_path):
    res = tmp_path / "results"
    (res / "eval" / "pca").mkdir(parents=True)
    table = pd.DataFrame({"gene": ["a", "b"], "auroc_mean": [0.5, 0.75], "notes": ["x", "y"]})
    table.to_parquet(res / "eval" / "pca" / "per_gene.parquet")
    recorded = digests(res)
    assert compare(digests(res), recorded, {}) == []
    table.assign(notes=["other", "words"]).to_parquet(res / "eval" / "pca" / "per_gene.parquet")
    assert compare(digests(res), recorded, {}) == []  # free text is not a number
    table.assign(auroc_mean=[0.5, np.nextafter(0.75, 1)]).to_parquet(res / "eval" / "pca" / "per_gene.parquet")
    assert compare(digests(res), recorded, {}) == ["eval/pca/per_gene.parquet: auroc_mean changed"]  # one ulp
    table.assign(roc_mean="[]").to_parquet(res / "eval" / "pca" / "per_gene.parquet")
    assert "eval/pca/per_gene.parquet: a new part roc_mean" in compare(digests(res), recorded, {})
    assert compare(digests(res), recorded, {"eval/*/per_gene.parquet": {"roc_mean"}}) == []
    table[["auroc_mean", "gene"]].to_parquet(res / "eval" / "pca" / "per_gene.parquet")
    assert compare(digests(res), recorded, {}) == [
        "eval/pca/per_gene.parquet: columns ['auroc_mean', 'gene'] recorded as ['gene', 'auroc_mean']"]
    table.to_parquet(res / "eval" / "pca" / "per_gene.parquet")
    (res / "qc").mkdir()
    table.to_parquet(res / "qc" / "plate_wells.parquet")
    assert compare(digests(res), recorded, {}) == ["qc/plate_wells.parquet: a new file"]
    assert compare(digests(res), recorded, {"qc/*.parquet": {"*"}}) == []
    (res / "eval" / "pca" / "per_gene.parquet").unlink()
    assert "eval/pca/per_gene.parquet: missing" in compare(digests(res), recorded, {"qc/*.parquet": {"*"}})
