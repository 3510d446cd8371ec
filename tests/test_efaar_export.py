"""Gene maps and recall in EFAAR_benchmarking's layout (cellica.maps._efaar): by hand, and
against EFAAR's own ``known_relationship_benchmark`` on the exported files."""

from __future__ import annotations

import sys
import types

import anndata as ad
import numpy as np
import pandas as pd
import pytest

from cellica.maps._efaar import PERT_COL, efaar_recall, map_tables, recall_columns
from cellica.maps.annotations import load_pair_file


def _map(x, genes):
    return ad.AnnData(np.asarray(x, np.float32), obs=pd.DataFrame({"n_guides": 2}, index=genes))


def efaar_benchmark():
    """EFAAR's function, unchanged: its module imports geomloss (for another benchmark) at the
    top, which the wheel installed without dependencies lacks, so a stand-in is put first."""
    pytest.importorskip("efaar_benchmarking", reason="efaar-benchmarking is installed by the README's commands")
    sys.modules.setdefault("geomloss", types.SimpleNamespace(SamplesLoss=None))
    from efaar_benchmarking.benchmarking import known_relationship_benchmark

    return known_relationship_benchmark


def test_recall_by_hand_on_four_genes():
    # Unit profiles at 0, 10, 90 and 180 degrees: the six cosines, sorted, are
    # -1 (A-D), -0.985 (B-D), 0 (A-C), 0 (C-D), 0.174 (B-C), 0.985 (A-B).
    angles = np.deg2rad([0, 10, 90, 180])
    m = _map(np.c_[np.cos(angles), np.sin(angles)], ["A", "B", "C", "D"])
    pairs = pd.DataFrame({"source": "S", "gene_a": ["A", "A", "A"], "gene_b": ["B", "C", "D"]})
    table = efaar_recall(m, pairs, thresholds=((0.2, 0.8),))
    # A-B ranks 5/6 (left) >= 0.8: recalled; A-D ranks 1/6 (right) <= 0.2: recalled;
    # A-C ranks 2/6 to 4/6: not. Recall 2/3 of 3 queries, null of 6 pairs.
    assert table.to_dict("records") == [{"source": "S", "null_distribution_size": 6, "query_distribution_size": 3,
                                         "recall_0.2_0.8": pytest.approx(2 / 3)}]
    assert list(table.columns) == recall_columns(((0.2, 0.8),))


def test_the_layout_is_one_row_per_gene_with_its_name_in_the_metadata():
    m = _map([[1, 2], [3, 4]], ["G1", "G2"])
    features, metadata = map_tables(m)
    assert features.to_numpy().tolist() == [[1, 2], [3, 4]] and list(features.columns) == ["0", "1"]
    assert metadata[PERT_COL].tolist() == ["G1", "G2"] and metadata["n_guides"].tolist() == [2, 2]


def test_equals_efaar_s_own_benchmark_across_row_blocks(tmp_path):
    """1,100 genes (three blocks of the null) and a pair list of 400 known pairs: EFAAR's own
    function on the exported tables gives exactly the table cellica computes."""
    benchmark = efaar_benchmark()
    rng = np.random.default_rng(0)
    genes = [f"G{i:04d}" for i in range(1100)]
    m = _map(rng.standard_normal((1100, 12)) + 0.3 * rng.standard_normal(12), genes)
    a, b = rng.choice(genes, 400), rng.choice(genes, 400)
    pd.DataFrame({"entity1": a, "entity2": b}).to_csv(tmp_path / "TOY.txt", index=False)
    ours = efaar_recall(m, load_pair_file(tmp_path / "TOY.txt"))
    features, metadata = map_tables(m)
    from sklearn.utils import Bunch

    theirs = benchmark(Bunch(features=features, metadata=metadata), pert_col=PERT_COL, benchmark_sources=["TOY"],
                       benchmark_data_dir=str(tmp_path))
    pd.testing.assert_frame_equal(ours, theirs[ours.columns], check_exact=True)
    assert 0 < ours["recall_0.1_0.9"].iloc[0] < 1


def test_two_maps_of_one_variant_are_refused_not_one_dropped(tmp_path):
    from cellica.cli import main

    m = _map(np.random.default_rng(0).standard_normal((6, 3)), [f"G{i}" for i in range(6)])
    m.uns["transform"] = {"variant": "pca"}
    m.write_h5ad(tmp_path / "a.h5ad")
    m.write_h5ad(tmp_path / "b.h5ad")
    (tmp_path / "pairs.csv").write_text("entity1,entity2\nG0,G1\n")
    for second in ("a.h5ad", "b.h5ad"):  # the same file twice, or two files of one variant
        code = main(["export-efaar", str(tmp_path / "a.h5ad"), str(tmp_path / second), "--out", str(tmp_path / "e"),
                     "--annotation-file", str(tmp_path / "pairs.csv")])
        assert code == 2 and not (tmp_path / "e").exists()
    assert main(["export-efaar", str(tmp_path / "a.h5ad"), "--out", str(tmp_path / "e"),
                 "--annotation-file", str(tmp_path / "pairs.csv")]) == 0
    assert pd.read_parquet(tmp_path / "e" / "recall.parquet")["variant"].tolist() == ["pca"]
