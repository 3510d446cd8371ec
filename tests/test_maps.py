"""Gene maps: aggregation, guide consistency, known-relationship recall and their bad inputs."""

import anndata as ad
import numpy as np
import pandas as pd
import pytest

from cellica.core.errors import CellicaError
from cellica.core.relationships import LICENCES
from cellica.maps._aggregate import guide_profiles, normalize_plates
from cellica.maps._consistency import COLUMNS, bh_fdr, mean_pairwise_corr
from cellica.maps.annotations import load_pair_file, load_sources, match_genes, unordered_pairs
from cellica.maps.gene_maps import gene_map, read_map, recall_files
from cellica.maps.params import MapParams
from cellica.maps.recall import random_pairs, recall_tables

FAST = MapParams(consistency_permutations=100, null_pairs=1000, n_boot=200)


def gene_matrix(x, names):
    m = ad.AnnData(np.asarray(x, np.float32))
    m.obs_names = list(names)
    return m


def screen(n_genes=20, d=12, shared=True, seed=0, tiles=2):
    """Tiles of 2 batches x 2 plates (each with its own offset); genes in groups of 3 share an
    effect when ``shared``; 2 guides per gene, one well each per plate."""
    rng = np.random.default_rng(seed)
    groups = np.arange(n_genes) // 3
    effects = rng.normal(0, 2, (groups.max() + 1, d))[groups] if shared else rng.normal(0, 2, (n_genes, d))
    rows, xs = [], []
    for plate in ["B0P0", "B0P1", "B1P0", "B1P1"]:
        offset = rng.normal(0, 3, d)
        wells = [("non-targeting", "nt", True, np.zeros(d))] * 6
        wells += [(f"GENE{g}", f"GENE{g}_g{k}", False, effects[g]) for g in range(n_genes) for k in range(2)]
        for w, (pert, guide, ctrl, effect) in enumerate(wells):
            for _ in range(tiles):
                rows.append({"batch": plate[:2], "plate": plate, "well": f"W{w:03d}", "perturbation": pert,
                             "guide": guide, "is_control": ctrl})
                xs.append(offset + effect + rng.normal(0, 1, d))
    obs = pd.DataFrame(rows)
    obs.index = [f"t{i}" for i in range(len(obs))]
    obs["tile_id"] = obs.index
    return ad.AnnData(np.asarray(xs, np.float32), obs=obs), groups


def group_pairs(groups, source="toy"):
    names = np.array([f"GENE{g}" for g in range(len(groups))])
    a, b = np.triu_indices(len(groups), 1)
    same = groups[a] == groups[b]
    return unordered_pairs(pd.Series(names[a[same]]), pd.Series(names[b[same]]), source)


# ------------------------------------------------------------------ hand-checkable pieces
def test_mean_pairwise_corr_and_bh_fdr_by_hand():
    x = np.array([[1.0, 2, 3], [2, 4, 6], [3, 2, 1]])
    assert mean_pairwise_corr(x) == pytest.approx((1 - 1 - 1) / 3)
    assert np.isnan(mean_pairwise_corr(x[:1]))
    # p = .01, .04, .03, NaN: ranked .01*3/1, .03*3/2, .04*3/3 -> .03, .045, .04 -> monotone .03, .04, .04
    np.testing.assert_allclose(bh_fdr(np.array([0.01, 0.04, 0.03, np.nan])), [0.03, 0.04, 0.04, np.nan])


def test_random_pairs_are_distinct_ordered_and_all_pairs_when_few():
    i, j = random_pairs(5, 100, np.random.default_rng(0))
    assert sorted(zip(i, j, strict=False)) == [(a, b) for a in range(5) for b in range(a + 1, 5)]
    i, j = random_pairs(300, 2000, np.random.default_rng(1))
    assert len(set(zip(i.tolist(), j.tolist(), strict=False))) == 2000 and (i < j).all() and (j < 300).all()


def test_recall_matches_the_definition_on_a_tiny_map():
    """Known pairs in either 5% tail of all gene pairs' cosines count; 12 genes: all 66 pairs are the null."""
    rng = np.random.default_rng(3)
    x = rng.normal(size=(12, 5))
    x[1] = x[0] * 2  # cosine 1: in the top tail
    x[3] = -x[2]  # cosine -1: in the bottom tail
    names = [f"G{k:02d}" for k in range(12)]
    pairs = pd.DataFrame(
        {"source": "S", "gene_a": ["G00", "G02", "G04", "G06"], "gene_b": ["G01", "G03", "G05", "G07"]}
    )
    recall, _ = recall_tables({"v": gene_matrix(x, names)}, pairs, FAST)
    unit = x / np.linalg.norm(x, axis=1, keepdims=True)
    cos = unit @ unit.T
    null = cos[np.triu_indices(12, 1)]
    lo, hi = np.percentile(null, [5, 95])
    expect = np.mean([(c <= lo) | (c >= hi) for c in (cos[0, 1], cos[2, 3], cos[4, 5], cos[6, 7])])
    row = recall.set_index("source").loc["S"]
    assert row["recall"] == pytest.approx(expect) and expect >= 0.5
    assert row["null_recall"] == pytest.approx(np.mean((null <= lo) | (null >= hi)))
    assert row["ci_low"] <= row["recall"] <= row["ci_high"] and row["n_genes"] == 12


def test_paired_differences_of_a_map_with_itself_are_exactly_zero():
    rng = np.random.default_rng(0)
    m = gene_matrix(rng.normal(size=(15, 4)), [f"G{k}" for k in range(15)])
    pairs = pd.DataFrame({"source": "S", "gene_a": ["G0", "G1", "G2"], "gene_b": ["G3", "G4", "G5"]})
    _, diff = recall_tables({"a": m, "b": m}, pairs, FAST, [("a", "b"), ("a", "missing")])
    assert list(diff["source"]) == ["S", "all"]
    assert (diff[["difference", "ci_low", "ci_high"]].to_numpy() == 0).all()


# ------------------------------------------------------------------ the map and its recall
def test_gene_map_of_a_screen_and_recall_above_the_null_only_with_shared_effects():
    data, groups = screen(n_genes=48, shared=True)
    genes, table = gene_map(data, FAST)
    assert genes.n_obs == 48 and "non-targeting" not in genes.obs_names
    assert (genes.obs["n_guides"] == 2).all() and (genes.obs["n_wells"] == 8).all()
    assert table["guide_corr"].min() > 0.8  # guides of one gene share its effect
    pairs = group_pairs(groups)
    shared, _ = recall_tables({"shared": genes}, pairs, FAST)
    noise, _ = recall_tables({"independent": gene_map(screen(48, shared=False)[0], FAST)[0]}, pairs, FAST)
    s, n = shared.iloc[-1], noise.iloc[-1]
    assert s["ci_low"] > s["null_recall"]  # well above the null
    assert n["ci_low"] <= n["null_recall"] <= n["ci_high"]  # at the null without shared effects


def test_plate_centring_removes_plate_offsets_and_names_a_plate_without_controls():
    obs = pd.DataFrame({"plate": ["P1", "P1", "P2", "P2"], "is_control": [True, False, True, False]})
    x = np.array([[10.0, 1], [12, 3], [-5, 0], [-4, 2]])
    np.testing.assert_allclose(normalize_plates(x, obs, "center"), [[0, 0], [2, 2], [0, 0], [1, 2]])
    obs.loc[2, "is_control"] = False
    with pytest.raises(CellicaError, match="plate 'P2' has 0 control well"):
        normalize_plates(x, obs, "center")
    with pytest.raises(CellicaError, match="plate 'P1' has 1 control well"):
        normalize_plates(x, obs.assign(is_control=[True, False, True, False]), "center_scale")
    # Controls on a plate of their own: P2 (none) is centred on its batch's controls, and says so.
    obs = obs.assign(batch=["B1", "B1", "B1", "B1"])
    borrowed = {}
    np.testing.assert_allclose(normalize_plates(x, obs, "center", borrowed), [[0, 0], [2, 2], [-15, -1], [-14, 1]])
    assert borrowed == {"P2": "B1"}
    with pytest.raises(CellicaError, match="plate 'P2' has 0 control well\\(s\\) and its batch 'B2' 0, needs 1"):
        normalize_plates(x, obs.assign(batch=["B1", "B1", "B2", "B2"]), "center")


def test_a_screen_with_its_controls_on_plates_of_their_own_gets_a_map_that_says_so():
    """Every control well on plate C of each batch, the genes on P1/P2: each gene plate is centred
    on its batch's controls (their mean removed: a batch offset leaves the map), recorded in the
    map's provenance at both levels."""
    rng = np.random.default_rng(0)
    rows, xs = [], []
    for b, offset in (("B1", 0.0), ("B2", 5.0)):
        for plate, genes in ((f"{b}-C", ["NTC"] * 6), (f"{b}-P1", ["G1", "G2", "G3"]), (f"{b}-P2", ["G1", "G2", "G3"])):
            for k, g in enumerate(genes):
                rows.append({"plate": plate, "well": f"W{k}", "batch": b, "perturbation": g, "is_control": g == "NTC",
                             "guide": f"{g}_{plate[-1]}"})
                xs.append(rng.normal(offset, 0.1, 4) + (np.arange(4) == int(g[-1]) if g != "NTC" else 0))
    adata = ad.AnnData(np.array(xs, np.float32), obs=pd.DataFrame(rows, index=[f"s{i}" for i in range(len(rows))]))
    genes, _ = gene_map(adata, FAST)
    made = genes.uns["provenance"]["map"]
    assert made["controls_of_batch"] == {"B1-P1": "B1", "B1-P2": "B1", "B2-P1": "B2", "B2-P2": "B2"}
    assert np.abs(genes.X).max() < 2  # the batch offset of 5 is gone


def test_median_and_mean_maps_agree_on_guide_counts():
    data, _ = screen(n_genes=8)
    med = guide_profiles(data, MapParams(aggregate="median"))
    mean = guide_profiles(data, MapParams(aggregate="mean"))
    assert list(med.obs_names) == list(mean.obs_names) and (med.obs["n_tiles"] == 8).all()


# ------------------------------------------------------------------ bad inputs
def test_a_map_with_fewer_genes_than_the_floor_is_reported_not_computed_and_the_run_goes_on(tmp_path):
    """A pilot of 9 genes under the floor of 10: recall is an optional product, so its table says
    "not computed: <reason>" for every variant (no number, no difference) and the report prints
    that line where the charts would be."""
    from cellica.report._maps import recall_bars

    m = gene_matrix(np.eye(9), [f"G{k}" for k in range(9)])
    recall, differences = recall_tables({"v": m, "w": m}, pd.DataFrame(columns=["source", "gene_a", "gene_b"]),
                                        FAST)
    note = "not computed: the map has 9 genes; recall needs at least 10 (maps.min_genes)"
    assert recall["variant"].tolist() == ["v", "w"] and (recall["note"] == note).all()
    assert recall["recall"].isna().all() and (recall["n_pairs"] == 0).all() and differences.empty
    from cellica.evaluate.summary import map_rows

    # The summary reads them as it reads computed ones.
    rows = map_rows(recall, differences, pd.DataFrame(columns=["variant", "consistent"]))
    assert rows.loc[rows["metric"] == "recall", "value"].isna().all() and len(rows) == 4
    recall.to_parquet(tmp_path / "recall.parquet")
    assert recall_bars(tmp_path / "recall.parquet", ["v", "w"]) == ([], f"Recall of known pairs {note}.")


def test_a_map_the_data_cannot_make_is_written_not_computed_and_recall_says_why(tmp_path, capsys):
    """A batch with no control well at all (its plates cannot be centred on anything): the
    gene-map command writes an empty map that says why and exits 0; recall and the EFAAR export
    carry that reason instead of numbers; the summary reads them as it reads computed ones."""
    from cellica.cli.app import main
    from cellica.core.adata import write_h5ad
    from cellica.evaluate.summary import map_rows

    data, _ = screen(n_genes=12)
    no_controls = data.obs["batch"] == "B1"
    data.obs.loc[no_controls, "is_control"] = False
    data.obs.loc[no_controls & (data.obs["perturbation"] == "non-targeting"), "perturbation"] = "GENE0"
    data.obs.loc[no_controls & (data.obs["guide"] == "nt"), "guide"] = "GENE0_g0"
    data.uns["transform"] = {"variant": "pca"}
    write_h5ad(data, tmp_path / "pca.h5ad")
    assert main(["gene-map", str(tmp_path / "pca.h5ad"), "--out", str(tmp_path / "map.h5ad"), "--consistency-out",
                 str(tmp_path / "c.parquet")]) == 0
    reason = ("not computed: maps.normalize=center: plate 'B1P0' has 0 control well(s) and its batch 'B1' 0, "
              "needs 1")
    assert reason in capsys.readouterr().err
    made = read_map(tmp_path / "map.h5ad")
    assert made.n_obs == 0 and made.n_vars == data.n_vars and made.uns["not_computed"] == reason
    consistency = pd.read_parquet(tmp_path / "c.parquet")
    assert consistency.empty and list(consistency.columns) == ["variant", *COLUMNS]
    assert main(["recall", str(tmp_path / "map.h5ad"), "--out", str(tmp_path / "r.parquet"), "--differences-out",
                 str(tmp_path / "d.parquet")]) == 0
    recall, differences = pd.read_parquet(tmp_path / "r.parquet"), pd.read_parquet(tmp_path / "d.parquet")
    assert recall[["variant", "source", "note"]].values.tolist() == [["pca", "all", reason]] and differences.empty
    assert recall["recall"].isna().all()
    rows = map_rows(recall, differences, consistency)
    assert rows.loc[rows["metric"] == "recall", "value"].isna().all()
    assert main(["export-efaar", str(tmp_path / "map.h5ad"), "--out", str(tmp_path / "efaar")]) == 0
    assert pd.read_parquet(tmp_path / "efaar" / "recall.parquet")["note"].tolist() == [reason]
    from cellica.report._maps import map_umaps, not_computed_note

    assert map_umaps({"pca": tmp_path / "map.h5ad"}) == []  # no picture of no genes; the index says why:
    assert not_computed_note({"pca": tmp_path / "map.h5ad"}) == f"Gene maps of pca: {reason}."


def test_gene_names_differing_only_by_case_are_refused():
    m = gene_matrix(np.random.default_rng(0).normal(size=(12, 3)), ["TP53", "tp53"] + [f"G{k}" for k in range(10)])
    with pytest.raises(CellicaError, match="'TP53' and 'tp53' differ only by case"):
        recall_tables({"v": m}, pd.DataFrame(columns=["source", "gene_a", "gene_b"]), FAST)


def test_unknown_symbols_of_a_pair_file_are_counted_and_reported(tmp_path):
    data, groups = screen()
    genes, _ = gene_map(data, FAST)
    genes.write_h5ad(tmp_path / "v.h5ad")
    listed = group_pairs(groups).rename(columns={"gene_a": "entity1", "gene_b": "entity2"})
    extra = pd.DataFrame({"source": "toy", "entity1": ["GENE0", "NOTAGENE"], "entity2": ["ALSONOT", "GENE1"]})
    pd.concat([listed, extra])[["entity1", "entity2", "source"]].to_csv(tmp_path / "pairs.csv", index=False)
    p = MapParams(annotation_file=str(tmp_path / "pairs.csv"), consistency_permutations=100, null_pairs=1000,
                  n_boot=100)
    recall = recall_files([tmp_path / "v.h5ad"], tmp_path / "r.parquet", tmp_path / "d.parquet", params=p)
    row = recall.set_index("source").loc["toy"]
    assert row["symbols_unknown"] == 2 and row["pairs"] == len(listed) + 2 and row["n_pairs"] == len(listed)
    assert pd.read_parquet(tmp_path / "r.parquet").equals(recall)


def test_a_pair_file_without_its_columns_names_them(tmp_path):
    (tmp_path / "bad.csv").write_text("gene1,gene2\nA,B\n")
    with pytest.raises(CellicaError, match=r"bad.csv: pair list lacks column\(s\) entity1, entity2"):
        load_pair_file(tmp_path / "bad.csv")


# ------------------------------------------------------------------ the shipped sources
def test_shipped_sources_load_as_unordered_distinct_pairs():
    pairs = load_sources(["CORUM", "Reactome"])
    assert set(pairs["source"]) == {"CORUM", "Reactome"} and set(LICENCES) >= set(pairs["source"])
    assert (pairs["gene_a"] < pairs["gene_b"]).all() and not pairs.duplicated().any()
    kept, coverage = match_genes(pairs, ["POLR2A", "POLR2B", "GENE0"])
    assert ("POLR2A", "POLR2B") in set(zip(kept["gene_a"], kept["gene_b"], strict=False))
    assert coverage["CORUM"]["symbols_unknown"] == coverage["CORUM"]["symbols"] - 2


# ------------------------------------------------------------------ chromosome-arm correction
def test_arm_correction_subtracts_the_unexpressed_genes_mean_per_arm_by_hand():
    from cellica.maps.arms import arm_correction

    m = gene_matrix([[1.0, 0], [3, 2], [5, 4], [10, 10], [7, 7]], ["A", "B", "U", "C", "D"])
    arms = pd.DataFrame({"gene": ["A", "B", "U", "C"], "arm": ["1p", "1p", "1p", "2q"]})
    out = arm_correction(m, arms, {"U"})
    # Arm 1p loses U's profile (5, 4); C's arm has no unexpressed gene; D has no arm.
    np.testing.assert_allclose(out.X, [[-4, -4], [-2, -2], [0, 0], [10, 10], [7, 7]])
    assert out.uns["arm_correction"] == {"arms_corrected": 1, "genes_without_arm": 1,
                                         "genes_on_arms_without_reference": 1, "unexpressed_in_map": 1}
    with pytest.raises(CellicaError, match="gene 'A' is listed twice"):
        arm_correction(m, pd.concat([arms, arms.iloc[:1]]), {"U"})


def test_arm_correction_needs_both_tables_and_named_columns(tmp_path):
    from cellica.maps.arms import read_gene_table

    with pytest.raises(CellicaError, match="needs both arm_table and unexpressed_genes"):
        MapParams(arm_table="arms.csv").validate()
    (tmp_path / "arms.csv").write_text("symbol,arm\nA,1p\n")
    with pytest.raises(CellicaError, match=r"arms.csv: lacks column\(s\) gene"):
        read_gene_table(tmp_path / "arms.csv", ("gene", "arm"))


# ------------------------------------------------------------------ into the summary
def test_summary_rows_of_the_maps_with_a_wilson_interval():
    from cellica.evaluate.summary import map_rows, wilson

    lo, hi = wilson(5, 10)  # the textbook value
    assert lo == pytest.approx(0.2366, abs=1e-4) and hi == pytest.approx(0.7634, abs=1e-4)
    recall = pd.DataFrame(
        {
            "variant": ["a", "a"],
            "source": ["CORUM", "all"],
            "n_pairs": [4, 6],
            "recall": [0.5, 0.4],
            "ci_low": [0.1, 0.2],
            "ci_high": [0.9, 0.6],
            "null_recall": [0.1, 0.1],
        }
    )
    diff = pd.DataFrame({"variant": ["a"], "baseline": ["b"], "source": ["all"], "difference": [0.2],
                         "ci_low": [0.05], "ci_high": [0.3], "n_pairs": [6]})
    cons = pd.DataFrame({"variant": "a", "consistent": pd.array([True, True, False, None], dtype="boolean")})
    rows = map_rows(recall, diff, cons).set_index(["table", "metric"])
    assert rows.loc[("per_variant", "recall"), "value"] == 0.4 and rows.loc[("per_variant", "recall"), "n"] == 6
    assert rows.loc[("per_variant", "guide_consistent_fraction"), "value"] == pytest.approx(2 / 3)
    assert rows.loc[("per_variant", "guide_consistent_fraction"), "n"] == 3
    assert (
        rows.loc[("comparison", "recall"), "verdict"] == "higher"
        and rows.loc[("comparison", "recall"), "row"] == "a - b"
    )


# ------------------------------------------------------------------ report figures
def test_report_figures_umap_per_map_and_plate_heatmaps(tmp_path):
    from cellica.qc.layout import plate_wells, position_offsets
    from cellica.report._maps import map_umaps, plate_heatmaps

    data, _ = screen(n_genes=12)
    genes, _ = gene_map(data, FAST)
    assert genes.uns["layout"]["method"] == "PC" and genes.obsm["X_layout"].shape == (12, 2)  # stored by the stage
    genes.obs_names = [f"<b>{g}" for g in genes.obs_names]  # names reach the SVG escaped
    genes.write_h5ad(tmp_path / "map.h5ad")
    umaps = map_umaps({"pca": tmp_path / "map.h5ad"})
    assert [u["variant"] for u in umaps] == ["pca"] and umaps[0]["svg"].count("<circle") == 12
    # wells W000 ...: not plate positions
    assert plate_heatmaps(plate_wells(data.obs), position_offsets(data.X, data.obs)) == {
        "note": "well names are not plate positions (A01 ...): no plate heatmaps", "plates": []}
    data.obs["well"] = [f"{'ABCD'[k % 4]}{k // 4 % 24 + 1:02d}" for k in pd.factorize(data.obs["well"])[0]]
    layout = plate_heatmaps(plate_wells(data.obs), position_offsets(data.X, data.obs))
    assert len(layout["plates"]) == 4 + 1 and all(svg.startswith("<svg") for svg in layout["plates"])
    assert "<b>" not in "".join(u["svg"] for u in umaps)
    assert "gene map PC" in umaps[0]["svg"]  # 12 genes: too few for UMAP's 15 neighbours


def test_plate_tables_by_hand():
    """Tiles per well and the controls' offset per position, on numbers small enough to check."""
    from cellica.qc.layout import plate_wells, position_offsets

    obs = pd.DataFrame(
        {
            "plate": ["P1", "P1", "P1", "P2", "P2", "P2"],
            "well": ["A01", "A01", "B02", "A01", "B02", "C03"],
            "is_control": [True, True, True, True, True, False],
        }
    )
    x = np.array([[1.0, 0], [3, 0], [0, 4], [2, 2], [0, 0], [9, 9]])
    wells = plate_wells(obs)
    assert wells.to_dict("list") == {"plate": ["P1", "P1", "P2", "P2", "P2"], "row": ["A", "B", "A", "B", "C"],
                                     "col": [1, 2, 1, 2, 3], "n_tiles": [2, 1, 1, 1, 1]}
    off = position_offsets(x, obs).set_index(["row", "col"])
    # P1's control mean (4/3, 4/3): A01's tiles sit at (-1/3, -4/3) and (5/3, -4/3), B02's at (-4/3, 8/3);
    # P2's (1, 1): A01's at (1, 1), B02's at (-1, -1). The mean over a position's control tiles, then the norm.
    np.testing.assert_allclose(off.loc[("A", 1), "offset"], np.hypot(7 / 9, -5 / 9))
    np.testing.assert_allclose(off.loc[("B", 2), "offset"], np.hypot(-7 / 6, 5 / 6))
    assert off["n_plates"].tolist() == [2, 2] and ("C", 3) not in off.index  # C03 holds no control
    assert plate_wells(obs.assign(well="well-1")).attrs["note"].startswith("well names are not plate positions")


def test_coords_2d_pcs_below_the_umap_floor_and_umap_above(tmp_path):
    from cellica.core.coords2d import MIN_UMAP_POINTS, coords_2d
    from cellica.qc.layout import well_layouts
    from cellica.report._maps import well_umaps

    x = np.array([[-2.0, 0, 0], [2, 0, 0], [0, 1, 0], [0, -1, 0]]) + 5  # spread 2 along x, 1 along y
    xy, how = coords_2d(x)
    assert how == "PC" and np.allclose(np.abs(xy), [[2, 0], [2, 0], [0, 1], [0, 1]], atol=1e-6)
    assert coords_2d(np.ones((1, 4)))[0].shape == (1, 2)  # one point: a degenerate layout, not an error
    data, _ = screen(n_genes=8)  # 4 plates x 22 wells
    data.write_h5ad(tmp_path / "f.h5ad")
    table = well_layouts({"base": tmp_path / "f.h5ad", "pca": tmp_path / "f.h5ad"})
    assert table.groupby("variant").size().to_dict() == {"base": 88, "pca": 88} and 88 >= MIN_UMAP_POINTS
    assert set(table["method"]) == {"UMAP"}
    base, pca = (table[table["variant"] == v][["x", "y"]].to_numpy() for v in ("base", "pca"))
    np.testing.assert_array_equal(base, pca)  # seeded: same features, same layout
    figures = well_umaps(table)
    assert [f["variant"] for f in figures] == ["base", "pca"]
    assert all("wells by batch (UMAP)" in f["svg"] and f["svg"].count("<circle") == 88 for f in figures)
    assert "B0" in figures[0]["svg"] and "B1" in figures[0]["svg"]  # the legend names the batches


def test_control_intensity_by_hand(tmp_path):
    """A store whose control tiles are flat images of known brightness: each well's intensity
    relative to its plate's control wells, every channel counting alike, is computed by hand."""
    from cellica.qc.layout import control_intensity
    from cellica.store.tilestore import TileStore

    wells = [("P1", "A01", True, (100, 10)), ("P1", "A02", True, (300, 30)), ("P1", "B01", False, (999, 999)),
             ("P2", "A01", True, (200, 40))]
    tiles = np.stack([np.stack([np.full((4, 4), c, np.uint16) for c in v]) for *_, v in wells])
    md = pd.DataFrame({"tile_id": [f"t{k}" for k in range(4)], "plate": [w[0] for w in wells],
                       "well": [w[1] for w in wells], "site": 0, "batch": "B", "is_control": [w[2] for w in wells],
                       "perturbation": ["ctrl" if w[2] else "g" for w in wells]})
    with TileStore.create(tmp_path / "s.zarr", ["dna", "er"], (4, 4), "uint16", {"source": "test"}, 2) as w:
        w.append(tiles, md)
    table = control_intensity(tmp_path / "s.zarr").set_index(["plate", "row", "col"])
    # channel means over the three control tiles read: dna 200, er 80/3; each tile's mean ratio:
    # A01 (0.5 + 0.375) / 2 = 0.4375, A02 (1.5 + 1.125) / 2 = 1.3125, P2 A01 (1 + 1.5) / 2 = 1.25
    np.testing.assert_allclose(table.loc[("P1", "A", 1), "intensity"], 0.4375 / ((0.4375 + 1.3125) / 2))
    np.testing.assert_allclose(table.loc[("P1", "A", 2), "intensity"], 1.3125 / ((0.4375 + 1.3125) / 2))
    np.testing.assert_allclose(table.loc[("P2", "A", 1), "intensity"], 1.0)  # a plate's only well is its mean
    assert ("P1", "B", 1) not in table.index and table["n_tiles"].tolist() == [1, 1, 1]  # no perturbed well


def test_the_recall_claim_by_hand():
    from cellica.evaluate._claims import recall_claim

    def diff(lows, highs):
        return pd.DataFrame({"variant": "pca_ica", "baseline": ["pca", "pca_rand"], "source": "all",
                             "difference": 0.1, "ci_low": lows, "ci_high": highs, "n_pairs": 30})

    assert recall_claim(diff([0.01, 0.02], [0.2, 0.2]))["verdict"] == "holds"
    assert recall_claim(diff([0.01, -0.3], [0.2, -0.1]))["verdict"] == "fails"
    assert recall_claim(diff([0.01, -0.1], [0.2, 0.1]))["verdict"] == "inconclusive"
    assert recall_claim(diff([0.01, -0.1], [0.2, 0.1]).iloc[:1])["verdict"] == "inconclusive"
    assert recall_claim(diff([0.01, 0.02], [0.2, 0.2]).iloc[0:0])["verdict"] == "not tested"
    same = diff([0.0, 0.0], [0.0, 0.0]).assign(difference=0.0)  # rotations of one whitened space
    assert recall_claim(same)["verdict"] == "not tested" and "by construction" in recall_claim(same)["detail"]


def test_recall_is_the_same_for_any_rotation_of_a_map():
    """Why the recall cannot separate PCA, PCA+ICA and PCA+Rand: cosines survive rotations."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(30, 6))
    q, _ = np.linalg.qr(rng.normal(size=(6, 6)))
    names = [f"G{k}" for k in range(30)]
    pairs = pd.DataFrame({"source": "S", "gene_a": [f"G{k}" for k in range(0, 20, 2)],
                          "gene_b": [f"G{k}" for k in range(1, 21, 2)]})
    r, d = recall_tables({"a": gene_matrix(x, names), "b": gene_matrix(x @ q, names)}, pairs, FAST, [("a", "b")])
    assert r.loc[r["variant"] == "a", "recall"].tolist() == r.loc[r["variant"] == "b", "recall"].tolist()
    assert (d["difference"] == 0).all()


def test_guide_map_is_left_out_above_its_guide_cap(monkeypatch):
    import cellica.maps._consistency as consistency

    data, _ = screen(n_genes=12)
    guides = guide_profiles(data, FAST)
    assert consistency.guide_map(guides, FAST)["guide_map"].notna().all()
    monkeypatch.setattr(consistency, "MAX_MAP_GUIDES", 10)
    assert consistency.guide_map(guides, FAST).empty
    table = consistency.guide_consistency(guides, FAST)  # the correlation test alone decides
    assert table["guide_map"].isna().all() and table["consistent"].notna().all()


def test_heatmap_titles_fit_and_small_maps_have_visible_dots():
    import re

    from cellica.report._maps import _radius
    from cellica.report._svg import heatmap, scatter

    title = "EXP2-P1: control intensity (plate mean = 1)"
    svg = heatmap(np.ones((1, 12)), ["A"], [str(c) for c in range(1, 13)], title)
    width = int(re.search(r'width="(\d+)"', svg).group(1))
    assert width >= 5.6 * len(title)  # a 12-column grid alone is 154 px: the title set the width
    assert 'r="3.5"' in scatter([(0, 0, "a"), (1, 1, "b")], "t", "x", "y", radius=_radius(2))
    assert _radius(150) > _radius(500) > _radius(5000)


def test_a_pooled_screen_with_one_guide_per_gene_maps_and_writes(tmp_path):
    """Control tiles in every well (a pooled screen: no all-control well) give each plate its
    control profiles per well; one guide per gene leaves the guide consistency undefined (NaN
    numbers, not objects the .h5ad cannot store)."""
    import numpy as np
    import pandas as pd

    from cellica.core.adata import make_adata, read_sealed
    from cellica.maps.gene_maps import gene_map_files

    rows = []
    for plate in ("B0P0", "B0P1"):
        for w in range(6):
            for t in range(8):
                ctrl = t < 3
                rows.append(
                    {
                        "plate": plate,
                        "well": f"A{w:02d}",
                        "batch": "B0",
                        "is_control": ctrl,
                        "perturbation": "NTC" if ctrl else f"G{w % 3}",
                        "guide": "NTC_1" if ctrl else f"G{w % 3}_g1",
                    }
                )
    obs = pd.DataFrame(rows, index=[f"t{i}" for i in range(len(rows))])
    # a plate offset (0 or 5) on every tile, and gene g shifted by 1 + g/10 from its plate's controls
    offset = np.where(obs["plate"] == "B0P1", 5.0, 0.0)
    shift = np.where(obs["is_control"], 0.0, 1.0 + obs["perturbation"].str[1:].replace("TC", "0").astype(float) / 10)
    x = np.repeat((offset + shift)[:, None], 4, axis=1).astype(np.float32)
    from cellica.core.adata import write_h5ad

    write_h5ad(make_adata(x, obs, None, {}, "pooled"), tmp_path / "f.h5ad")
    table = gene_map_files(tmp_path / "f.h5ad", tmp_path / "m.h5ad", tmp_path / "c.parquet")
    genes = read_sealed(tmp_path / "m.h5ad")
    assert list(genes.obs_names) == ["G0", "G1", "G2"] and table["guide_map"].isna().all()
    # each plate's well profiles were centred on that plate's own control profiles: offsets gone
    np.testing.assert_allclose(genes.X[:, 0], [1.0, 1.1, 1.2], atol=1e-6)


def test_heatmaps_have_a_scale_and_counts_read_as_integers_and_map_points_name_themselves():
    import re

    from cellica.report._svg import heatmap, scatter

    svg = heatmap(np.array([[8.0, 8.0, 12.0]]), ["A"], ["1", "2", "3"], "P1: tiles per well")
    assert "<title>A1: 8</title>" in svg and "8.000" not in svg  # whole counts as integers
    scale = re.findall(r'font-size="8"[^>]*>([^<]+)</text>', svg)
    assert scale == ["8", "12"]  # the colour scale's two ends
    assert len(re.findall(r'<rect x="\d+" y="\d+" width="14" height="8"', svg)) == 5
    ratio = heatmap(np.array([[0.95, 1.05]]), ["A"], ["1", "2"], "intensity")
    assert "<title>A1: 0.950</title>" in ratio
    long = "Retromer complex (SNX1, SNX2, VPS35, VPS26A, VPS29)"
    pts = [(0.0, 0.0, long), (1.0, 1.0, "other"), (0.5, 0.2, long)]
    svg = scatter(pts, "map", "x", "y", size=200, names=["SNX1", "OTHER1", "VPS35"])
    assert "<title>SNX1 (Retromer complex" in svg and ">VPS35</text>" in svg  # hover and label
    legend = re.findall(r'font-size="10" fill="#[0-9a-f]+">([^<]+)</text>', svg)
    visible = [re.sub(r"&#\d+;", "x", t) for t in legend]  # a bullet or an indent is one character wide
    assert "VPS29)" in "".join(legend) and len(visible) == 3 and all(len(t) <= 31 for t in visible)  # wrapped
    xs = [float(x) for x in re.findall(r'<circle cx="([\d.]+)"', svg)]
    assert min(xs) > 28 and max(xs) < 200 - 28  # inside the frame


def test_a_map_without_known_pairs_is_not_tested_and_says_why():
    """No known pair with both members in the map (a compound screen against gene databases):
    the recall comparisons and the claim are 'not tested' with the reason, never 'inconclusive'."""
    from cellica.evaluate._claims import recall_claim
    from cellica.evaluate.summary import map_rows

    recall = pd.DataFrame({"variant": ["pca_ica"], "source": ["all"], "n_pairs": [0], "recall": [np.nan],
                           "ci_low": [np.nan], "ci_high": [np.nan], "null_recall": [0.1]})
    diff = pd.DataFrame({"variant": "pca_ica", "baseline": ["pca", "pca_rand"], "source": "all",
                         "difference": np.nan, "ci_low": np.nan, "ci_high": np.nan, "n_pairs": 0})
    rows = map_rows(recall, diff, pd.DataFrame(columns=["variant", "consistent"]))
    comps = rows[rows["table"] == "comparison"]
    assert list(comps["verdict"]) == ["not tested"] * 2
    assert set(comps["detail"]) == {"no known pair has both members in the map"}
    claim = recall_claim(diff, entity="compound")
    assert claim["verdict"] == "not tested" and claim["claim"].startswith("Known relationships: PCA+ICA's compound map")
    assert claim["detail"] == ("pca_ica > pca: not compared (no known pair has both members in the map); "
                               "pca_ica > pca_rand: not compared (no known pair has both members in the map)")
