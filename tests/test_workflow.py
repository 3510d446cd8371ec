"""End-to-end: the real Snakefile on a tiny config, in a scratch working directory."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from cellica._launch import run_snakemake
from cellica.core.names import safe_filename
from cellica.registry import BASELINE_NAMES, COMPARED_METRICS, PAPER_VARIANTS, metrics_of
from cellica.store.tilestore import TileStore
from tests.conftest import REPO
from tests.report_checks import check_index_numbers, check_table_numbers

pytestmark = pytest.mark.e2e
TINY = REPO / "tests" / "configs" / "tiny.yaml"


def snakemake(
    workdir: Path, *args: str, configfile: Path = TINY, env: dict | None = None
) -> subprocess.CompletedProcess:
    return run_snakemake(*args, directory=workdir, configfile=configfile, env=env, timeout=900)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("wf")
    # As in a fresh clone, whose reports/ holds the repository's README.md beside the report.
    (workdir / "reports").mkdir()
    shutil.copyfile(REPO / "reports" / "README.md", workdir / "reports" / "README.md")
    run = snakemake(workdir)
    assert run.returncode == 0, run.stderr[-4000:]
    (workdir / "run.log").write_text(run.stderr)
    return workdir


def _job_counts(run: subprocess.CompletedProcess) -> dict[str, int]:
    """The dry run's "Job stats" table as {rule: count}."""
    text = run.stdout + run.stderr
    stats = text.split("Job stats:")[-1].split("Reasons:")[0]
    out = {}
    for line in stats.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


def test_dag_trains_embeds_in_shards_and_gathers(tiny_run):
    import anndata as ad

    res = tiny_run / "results"
    emb = ad.read_h5ad(res / "embeddings" / "seed0" / "embeddings.h5ad")
    store = TileStore.open(res / "tiles.zarr")
    assert emb.obs_names.tolist() == store.metadata["tile_id"].tolist()
    assert emb.uns["provenance"]["shard"]["gathered_from"] == 2
    assert (res / "mae" / "seed0" / "model.safetensors").is_file() and (res / "mae" / "seed0" / "model.json").is_file()
    wells = ad.read_h5ad(res / "embeddings" / "seed0" / "wells.h5ad")
    assert wells.n_obs == store.metadata.groupby(["batch", "plate", "well"]).ngroups
    shards = res / "embeddings" / "seed0" / "shards"
    assert not shards.exists() or not any(shards.iterdir())
    for name in ("train_mae/seed0", "embed/seed0/0-of-2", "embed/seed0/1-of-2", "gather_embeddings/seed0"):
        assert (res / "benchmarks" / f"{name}.tsv").is_file()


def test_dag_transforms_every_variant(tiny_run):
    import anndata as ad

    from cellica.registry import VARIANTS
    from cellica.transform.base import Transform

    res = tiny_run / "results"
    emb = ad.read_h5ad(res / "embeddings" / "seed0" / "embeddings.h5ad")
    for variant in VARIANTS:
        out = ad.read_h5ad(res / "features" / f"{variant}.h5ad")
        assert out.obs_names.tolist() == emb.obs_names.tolist()
        assert out.uns["transform"]["variant"] == variant
        assert out.n_vars == (8 if "n_components" in VARIANTS[variant].uses else emb.n_vars)
        assert (res / "features" / f"{variant}.npz").is_file()
    ica = ad.read_h5ad(res / "features" / "pca_ica.h5ad").uns["transform"]["diagnostics"]["ica"]
    assert {"converged", "n_iter", "gradient_norm", "contrast"} <= set(ica)
    fitted = ad.read_h5ad(res / "features" / "pca_ica.h5ad")
    emb.obs["transform_fit"] = fitted.obs["transform_fit"]  # the same controls give the batch statistics
    reapplied = Transform.load(res / "features" / "pca_ica.npz").transform(emb)
    np.testing.assert_allclose(reapplied.X, fitted.X, rtol=1e-4, atol=1e-4)


def test_the_report_is_written_beside_the_repository_s_own_reports_readme(tiny_run):
    assert (tiny_run / "reports" / "README.md").read_bytes() == (REPO / "reports" / "README.md").read_bytes()
    assert (tiny_run / "reports" / "index.html").is_file()


def test_dag_evaluates_and_reports(tiny_run):

    from cellica.registry import VARIANTS

    res = tiny_run / "results"
    summary = pd.read_parquet(res / "eval" / "summary.parquet")
    means = summary[(summary.table == "per_variant") & (summary.row == "mean")]
    per_variant = means.pivot(index="metric", columns="variant", values="value")
    assert set(per_variant.columns) == set(VARIANTS) | set(BASELINE_NAMES)  # tiny.yaml names every baseline
    assert {*COMPARED_METRICS, *metrics_of("activity", "batch", "truth")} <= set(per_variant.index)
    # Intervals over genes exist and contain the mean.
    auroc = means[means.metric == "auroc_heldout"]
    assert (auroc["ci_low"] <= auroc["value"]).all() and (auroc["value"] <= auroc["ci_high"]).all()
    claims = summary[summary.table == "claim"]
    assert len(claims) == 5 and set(claims["verdict"]) <= {"holds", "fails", "inconclusive", "not tested"}
    assert claims["row"].str.startswith("Known relationships").any()  # the gene maps' claim
    comps = summary[summary.table == "comparison"]
    assert {"pca_ica - pca", "pca_ica - pca_rand"} <= set(comps["row"]) and comps["p_holm"].notna().any()
    pg = pd.read_parquet(res / "eval" / "pca_ica" / "per_gene.parquet")
    # Both chunks and both seeds gathered; the second seed re-fit the ICA.
    named = TileStore.open(res / "tiles.zarr").ground_truth("complexes")  # simulate.complexes: shared
    assert sorted(pg["gene"].unique()) == sorted(named["gene"]) and sorted(pg["seed"].unique()) == [0, 1]
    assert (res / "features" / "seeds" / "pca_ica-1.h5ad").is_file()
    assert not (res / "features" / "seeds" / "pca-1.h5ad").exists()  # pca has no seed to vary
    # Real classifiers: every gene's trees split, and AUROCs are not all 0.5.
    assert not pg["no_split"].any() and (pg["auroc_mean"] != 0.5).any() and pg["sparsity"].notna().all()
    assert {"true_factors", "top_feature_factor", "top_feature_hits_truth"} <= set(pg.columns)
    index = (tiny_run / "reports" / "index.html").read_text()
    assert "Per variant (the paper's Table 4)" in index and "Per gene (the paper's Table 3)" in index
    assert "The paper's claims on this run" in index and "Paired comparisons between variants" in index
    for gene in pg["gene"].unique():
        assert f'href="genes/0-of-1/{safe_filename(gene)}.html"' in index
        page = (tiny_run / "reports" / "genes" / "0-of-1" / f"{safe_filename(gene)}.html").read_text()
        assert "Ground truth (synthetic screen)" in page and "data:image/png;base64" in page
        assert "AUROC per guide" in page and "true positive rate" in page
    # The pictures and the verdicts on the pages are the stages' tables, shown as written.
    import base64
    import html

    examples = pd.read_parquet(res / "qc" / "examples" / "0-of-1.parquet")
    truth = pd.read_parquet(res / "eval" / "truth_genes.parquet").set_index("gene")
    assert set(examples["gene"]) == set(pg["gene"]) == set(truth.index)
    for r in examples.itertuples():
        page = html.unescape((tiny_run / "reports" / "genes" / "0-of-1" / f"{safe_filename(r.gene)}.html").read_text())
        assert "data:image/png;base64," + base64.b64encode(r.png).decode() in page
        missed = truth.loc[r.gene, "missed"]
        assert (missed in page) if missed else "a strong true effect, but no variant" not in page
    assert (res / "benchmarks" / "report.tsv").is_file()


def test_dag_evaluates_the_baselines_beside_the_variants(tiny_run):
    """The three baselines of tiny.yaml: made as the library makes them, evaluated by the same
    classifiers (real ones), with intervals, compared with PCA+ICA, and the claims' column."""
    import anndata as ad
    import torch
    from safetensors.torch import load_file

    from cellica.embed._mae import MaskedAutoencoder
    from cellica.embed.cell_count import count_nuclei
    from cellica.embed.params import ProfileParams, TrainParams

    res = tiny_run / "results"
    config = yaml.safe_load(TINY.read_text())
    counts = count_nuclei(res / "tiles.zarr", params=ProfileParams(**config.get("profiles", {}))).X
    np.testing.assert_array_equal(ad.read_h5ad(res / "embeddings" / "cell_count" / "embeddings.h5ad").X, counts)
    cell_count = ad.read_h5ad(res / "features" / "cell_count.h5ad")
    np.testing.assert_array_equal(cell_count.X, counts)  # the base variant leaves one count as it is
    assert cell_count.uns["transform"]["variant"] == "cell_count" and counts.max() > counts.min()
    p = TrainParams(**config["mae"])
    torch.manual_seed(p.seed)
    store = TileStore.open(res / "tiles.zarr")
    fresh = MaskedAutoencoder(p.mae_config(store.n_channels, store.tile_shape[0])).state_dict()
    saved = load_file(res / "mae" / "untrained" / "model.safetensors")
    assert set(saved) == set(fresh) and all(torch.equal(saved[k], fresh[k]) for k in fresh)
    untrained = ad.read_h5ad(res / "embeddings" / "untrained" / "embeddings.h5ad")
    assert untrained.obs_names.tolist() == store.metadata["tile_id"].tolist()
    assert untrained.uns["provenance"]["shard"]["gathered_from"] == config["embed"]["shards"]
    assert ad.read_h5ad(res / "features" / "classical.h5ad").n_vars > 10  # cp_measure's profiles
    summary = pd.read_parquet(res / "eval" / "summary.parquet")
    for name in BASELINE_NAMES:
        pg = pd.read_parquet(res / "eval" / name / "per_gene.parquet")
        assert sorted(pg["seed"].unique()) == [0, 1] and not pg["no_split"].all() and pg["auroc_mean"].nunique() > 1
        row = summary[
            (summary.table == "per_variant") & (summary.variant == name) & (summary.metric == "auroc_heldout")
        ]
        assert len(row) == 1 and row["ci_low"].iloc[0] <= row["value"].iloc[0] <= row["ci_high"].iloc[0]
        comps = summary[(summary.table == "comparison") & (summary.row == f"pca_ica - {name}")]
        assert "auroc_heldout" in set(comps["metric"]) and comps["verdict"].ne("").all()
    claims = summary[summary.table == "claim"].set_index("row")["baselines"]
    assert set(claims.iloc[:3]) <= {"yes", "no", "inconclusive", "not tested"} and set(claims.iloc[3:]) == {"n/a"}
    index = (tiny_run / "reports" / "index.html").read_text()
    assert '<th class="baseline"' in index and "beats every baseline" in index


def test_dag_builds_gene_maps_and_scores_their_recall_of_known_pairs(tiny_run):
    import anndata as ad

    from cellica.registry import VARIANTS

    res = tiny_run / "results"
    named = TileStore.open(res / "tiles.zarr").ground_truth("complexes")
    for variant in VARIANTS:
        genes = ad.read_h5ad(res / "maps" / f"{variant}.h5ad")
        assert sorted(genes.obs_names) == sorted(named["gene"]) and genes.uns["transform"]["variant"] == variant
        consistency = pd.read_parquet(res / "maps" / f"{variant}_consistency.parquet")
        assert consistency["guide_corr"].between(-1, 1).all() and (consistency["n_guides"] == 2).all()
    recall = pd.read_parquet(res / "maps" / "recall.parquet")
    assert set(recall["variant"]) == set(VARIANTS)
    assert set(recall["source"]) == {"CORUM", "HuMAP", "Reactome", "SIGNOR", "StringDB", "all"}
    corum = recall[recall["source"] == "CORUM"]
    # The tiny screen's genes come from CORUM complexes: their pairs are in the map and scored.
    assert (corum["n_pairs"] > 0).all() and corum["recall"].between(0, 1).all()
    assert (recall.loc[recall["source"] != "all", "symbols_unknown"] > 0).all()  # counted per source
    diff = pd.read_parquet(res / "maps" / "recall_differences.parquet")
    assert {("pca_ica", "pca"), ("pca_ica", "pca_rand")} <= set(zip(diff["variant"], diff["baseline"], strict=False))


def test_dag_measures_ground_truth_recovery_and_stability(tiny_run):

    res = tiny_run / "results"
    batch = pd.read_parquet(res / "eval" / "batch_metrics.parquet").set_index("variant")
    for col in ("truth_mcc", "truth_factor_r2", "truth_batch_r2"):
        assert batch[col].between(-1, 1).all(), col
    align = pd.read_parquet(res / "stability" / "alignment.parquet")
    assert list(align["map"]) == ["permutation", "rigid", "linear", "ica"]
    assert align["n_common"].iloc[0] == 72
    rows = align.set_index("map")
    # 36 training tiles for 192 dims: the linear map is not estimable and says so.
    assert np.isnan(rows.loc["linear", "error"]) and "36 training samples" in rows.loc["linear", "note"]
    assert (rows.drop("linear")["error"] > 0).all()
    # Both trainings saw the same store with different seeds: different weights.
    assert (res / "mae" / "seed1" / "model.safetensors").read_bytes() != \
        (res / "mae" / "seed2" / "model.safetensors").read_bytes()
    index = (tiny_run / "reports" / "index.html").read_text()
    assert "Stability: two MAE training seeds aligned" in index and "ICA efficiency" in index
    assert "Ground truth: MCC features vs true factors" in index


def test_stability_needs_an_image_source(tmp_path):
    cfg = yaml.safe_load((REPO / "config" / "examples" / "cellprofiler_profiles.yaml").read_text())
    cfg["stability"] = {"enabled": True}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    run = snakemake(tmp_path, "--dry-run", configfile=bad)
    assert run.returncode != 0 and "stability.enabled needs an image source" in run.stdout + run.stderr


def test_dag_builds_the_tile_store(tiny_run):
    store = TileStore.open(tiny_run / "results" / "tiles.zarr")
    assert store.n_tiles == (4 + 4 * 2) * 2 * 3
    assert store.attrs["provenance"]["params"]["tile_size"] == 32
    summary = (tiny_run / "results" / "qc" / "tiles_summary.txt").read_text()
    assert "tiles per batch" in summary and "EXP2" in summary
    for rule in ("simulate", "inspect_tiles"):  # each job's time and memory, as Snakemake measured them
        bench = pd.read_csv(tiny_run / "results" / "benchmarks" / f"{rule}.tsv", sep="\t")
        assert len(bench) == 1 and float(bench["s"].iloc[0]) > 0
    assert "simulated" in (tiny_run / "results" / "logs" / "simulate.log").read_text()


def test_snakemake_report_packs_the_outputs(tiny_run):
    run = snakemake(tiny_run, "--report", str(tiny_run / "report.zip"))
    assert run.returncode == 0, run.stderr[-3000:]
    import zipfile

    packed = zipfile.ZipFile(tiny_run / "report.zip")
    names = packed.namelist()
    gene = TileStore.open(tiny_run / "results" / "tiles.zarr").ground_truth("complexes")["gene"].iloc[0]
    # what is packed is what the run wrote, byte for byte: the summary table and a gene's page
    summary = next(n for n in names if n.endswith("/summary.parquet"))
    assert packed.read(summary) == (tiny_run / "results" / "eval" / "summary.parquet").read_bytes()
    page = next(n for n in names if n.endswith(f"/{safe_filename(gene)}.html"))
    assert packed.read(page) == (tiny_run / "reports" / "genes" / "0-of-1" / f"{safe_filename(gene)}.html").read_bytes()
    assert "report/report.html" in names and b"summary.parquet" in packed.read("report/report.html")


def test_rerun_has_nothing_to_do(tiny_run):
    run = snakemake(tiny_run, "--dry-run")
    assert run.returncode == 0 and "Nothing to be done" in run.stdout + run.stderr


def test_a_user_config_does_not_inherit_the_demo_and_the_log_says_what_is_set(tiny_run):
    """--configfile starts from the defaults (the demo's n_components 16 and seeds [0, 1, 2] are
    not used), and the run log names every non-default value with the file it came from."""
    log = (tiny_run / "run.log").read_text()
    assert f"transform.n_components = 8  ({TINY})" in log
    assert f"evaluate.seeds = [0, 1]  ({TINY})" in log
    assert "config/config.yaml" not in log.split("Job stats")[0].split("cellica config")[-1]
    assert "simulate.n_genes = 4" in log and "mae.seed" not in log  # default: not listed


def test_a_changed_key_reruns_only_the_variants_that_use_it(tiny_run):
    """Nested overrides from the command line (`--config section='{key: value}'`), typed by the key;
    each variant's rule sees only the parameters it uses."""
    ica = _job_counts(snakemake(tiny_run, "--dry-run", "--config", "transform={ica_max_iter: 999}"))
    assert ica["transform"] == 1 and ica["transform_seed"] == 1  # pca_ica, and its seed-1 refit
    assert ica["evaluate_chunk"] == 2 and ica["gather_eval"] == 1  # 2 chunks of one variant
    components = _job_counts(snakemake(tiny_run, "--dry-run", "--config", "transform={n_components: 6}"))
    assert components["transform"] == 4  # pca, pca_ica, pca_rand, harmony; not base, sphering, combat
    bad = snakemake(tiny_run, "--dry-run", "--config", "transform={n_components: many}")
    assert bad.returncode != 0 and "config key transform.n_components" in bad.stdout + bad.stderr


def test_unknown_config_key_fails_before_running(tmp_path):
    cfg = yaml.safe_load(TINY.read_text())
    cfg["simulate"]["n_gene"] = 3
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    run = snakemake(tmp_path, configfile=bad)
    assert run.returncode != 0
    assert "unknown config key 'simulate.n_gene': did you mean 'n_genes'?" in run.stderr
    assert len(run.stderr.splitlines()) < 15, run.stderr  # a few lines, not the schema
    assert not (tmp_path / "results").exists()


def test_lint_is_clean():
    run = run_snakemake("--lint", directory=REPO, configfile=TINY, cores=None)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Lints for" not in run.stdout + run.stderr


def test_same_numbers_whatever_the_thread_count(tiny_run):
    """Transforms and evaluation re-run with one core and one BLAS/torch thread: bit for bit."""

    res = tiny_run / "results"
    tables = sorted(res.glob("eval/*/per_gene.parquet")) + sorted(res.glob("eval/*/importances.parquet"))
    before = {p: pd.read_parquet(p) for p in tables + [res / "eval" / "batch_metrics.parquet"]}
    env = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    # only as far as the compared tables: the maps and reports downstream add nothing here
    run = snakemake(tiny_run, "--forcerun", "transform", "transform_seed", "--until", "gather_eval", "batch_metrics",
                    "--cores", "1", env=env)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "transform" in run.stdout + run.stderr  # it really ran again
    for path, table in before.items():
        pd.testing.assert_frame_equal(pd.read_parquet(path), table, check_exact=True, obj=str(path))


def test_new_data_reruns_give_a_fresh_runs_results(tiny_run, tmp_path):
    """Change the screen (simulate.seed) and rerun: no old model is resumed; every output equals a
    fresh run's, bit for bit (stability off, one seeded variant and one evaluation seed, and both
    runs only as far as the per-gene tables, to keep the test short: every stage still runs)."""
    cfg = yaml.safe_load(TINY.read_text())
    cfg["simulate"]["seed"] = 1
    cfg["stability"] = {"enabled": False}
    cfg["baselines"] = {"names": []}
    cfg["transform"]["variants"] = [PAPER_VARIANTS[2]]  # pca_ica: whitening and the ICA both re-fit
    cfg["evaluate"]["seeds"] = [0]
    config = tmp_path / "seed1.yaml"
    config.write_text(yaml.safe_dump(cfg))
    rerun_dir = tmp_path / "rerun"
    shutil.copytree(tiny_run, rerun_dir, symlinks=True)
    rerun = snakemake(rerun_dir, "--until", "gather_eval", configfile=config)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    fresh_dir = tmp_path / "fresh"
    fresh = snakemake(fresh_dir, "--until", "gather_eval", configfile=config)
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    log = (rerun_dir / "results" / "logs" / "train_mae" / "seed0.log").read_text()
    assert "resuming" not in log.split("training ")[-1]
    a, b = rerun_dir / "results", fresh_dir / "results"
    model = Path("mae") / "seed0" / "model.safetensors"
    assert (a / model).read_bytes() == (b / model).read_bytes()
    tables = sorted(b.glob("eval/*/per_gene.parquet"))
    assert [t.parent.name for t in tables] == [PAPER_VARIANTS[2]]
    for table in tables:
        pd.testing.assert_frame_equal(pd.read_parquet(a / table.relative_to(b)), pd.read_parquet(table),
                                      check_exact=True, obj=str(table))


# Parts the run gained since tests/golden/tiny_run.json was recorded, on purpose (file pattern:
# columns; "*": a whole new file). Every recorded number must still be as recorded. Re-recorded
# when the PCA's component signs became scikit-learn's (#32), and when the baselines joined the
# tiny run (#33): before re-recording, the run with `baselines: {names: []}` equalled the old
# record with only the maps in EFAAR's layout and the summary's `baselines` column added, and the
# run with baselines kept every row of the summary that names no baseline bit for bit. Re-recorded
# for #43 on an AMD EPYC (OpenBLAS Haswell kernels): the record now names the processor and the
# BLAS kernels, whose last bits differ between machines. Against the code before #43, on this
# machine, every digest was the same but the classical baseline's concentration and the summary
# rows built on it (classical mean concentration 0.0612 -> 0.0506, per gene by up to 0.052; the
# verdict of pca_ica vs classical still inconclusive): 4 of its 162 cp_measure features vary on
# the controls by less than 1e-6 in their raw units, and the old absolute floor (variance 1e-12)
# cut their biological variation.
# #46 (no number moves): the tables the report used to compute from the tile store and the truth
# itself, now written by the stages that own them.
ADDITIONS: dict[str, set[str]] = {"eval/truth_genes.parquet": {"*"}, "qc/examples/*.parquet": {"*"}}


def test_the_tiny_run_s_numbers_are_those_recorded_bit_for_bit(tiny_run):
    """Every table, features file, map and transform of the tiny run equals, bit for bit, what
    tests/golden/tiny_run.json recorded before the last refactors (`python -m tests.golden`),
    column by column; only the ADDITIONS above may be new.
    The last bits belong to the numeric libraries: with other versions, this says so and skips."""
    import json

    from tests.golden import compare, digests, versions

    golden = json.loads((REPO / "tests" / "golden" / "tiny_run.json").read_text())
    if versions() != golden["versions"]:
        changed = {k: (golden["versions"].get(k), v) for k, v in versions().items() if golden["versions"].get(k) != v}
        pytest.skip(f"recorded with other library versions or on another processor {changed}: re-record with "
                    "python -m tests.golden")
    problems = compare(digests(tiny_run / "results"), golden["digests"], ADDITIONS)
    assert not problems, "numbers changed:\n" + "\n".join(problems)


def test_every_number_on_the_index_equals_its_table(tiny_run):
    """The per-variant table (mean [95% CI]) and the claims on the rendered index, number by
    number, against summary.parquet."""
    check_index_numbers(tiny_run / "results", tiny_run / "reports")


def test_the_index_shows_the_software_the_run_recorded(tiny_run):
    """results/environment.json is this environment, and the index's Software section shows
    its digest, its verdict on the lock and the key packages' versions, as rendered."""
    import html
    import json

    from cellica.core.environment import KEY_PACKAGES, digest, installed

    record = json.loads((tiny_run / "results" / "environment.json").read_text())
    assert record["packages"] == installed() and record["software_digest"] == digest(installed())
    page = html.unescape((tiny_run / "reports" / "index.html").read_text())
    section = page.split('<h3 id="software">Software</h3>')[1].split("</table>")[0]
    assert f"software digest {record['software_digest'][:16]}" in section
    assert ("every package at the version of the lock" in section) == bool(record["matches_lock"])
    shown = dict(re.findall(r"<tr><td>([^<]+)</td><td>([^<]+)</td></tr>", section))
    assert shown == {n: record["packages"][n] for n in KEY_PACKAGES if n in record["packages"]}
    assert {"torch", "lightgbm", "snakemake"} <= set(shown)


def test_the_exported_maps_score_with_efaar_s_own_code_to_the_exported_recall(tiny_run):
    """results/maps/efaar: every variant's map in EFAAR_benchmarking's layout, scored by their
    unchanged known_relationship_benchmark, gives exactly the recall table written beside it."""
    from sklearn.utils import Bunch

    from tests.test_efaar_export import efaar_benchmark

    benchmark = efaar_benchmark()
    root = tiny_run / "results" / "maps" / "efaar"
    recall = pd.read_parquet(root / "recall.parquet")
    assert set(recall["variant"]) == set(pd.read_parquet(tiny_run / "results" / "maps" / "recall.parquet")["variant"])
    for (variant, folder), ours in recall.groupby(["variant", "folder"]):
        features = pd.read_parquet(root / folder / "features.parquet")
        metadata = pd.read_parquet(root / folder / "metadata.parquet")
        assert len(features) == len(metadata) > 2
        theirs = benchmark(Bunch(features=features, metadata=metadata), pert_col="perturbation")
        ours = ours.drop(columns=["variant", "folder"]).reset_index(drop=True)
        pd.testing.assert_frame_equal(ours, theirs[ours.columns], check_exact=True, obj=variant)
    # docs/maps.md's snippet, as written, from the run's folder.
    snippet = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "maps.md").read_text(), re.S)
    code = next(s for s in snippet if "known_relationship_benchmark" in s)
    namespace: dict = {}
    cwd = Path.cwd()
    try:
        os.chdir(tiny_run)
        exec(compile(code, "docs/maps.md", "exec"), namespace)
    finally:
        os.chdir(cwd)
    ours = recall[recall["variant"] == "pca_ica"].drop(columns=["variant", "folder"]).reset_index(drop=True)
    pd.testing.assert_frame_equal(ours, namespace["recall"][ours.columns], check_exact=True)


def test_every_anndata_output_reads_in_scanpy_without_cellica(tiny_run):
    """Every .h5ad the run wrote loads with scanpy in a fresh interpreter where importing
    cellica fails: no file needs cellica's code to be read; each keeps its provenance in .uns."""
    import json
    import sys

    files = sorted(str(p) for p in (tiny_run / "results").rglob("*.h5ad"))
    assert len(files) > 20
    script = (
        "import json, sys\n"
        "sys.modules['cellica'] = None  # any import of cellica now fails\n"
        "import scanpy as sc\n"
        "out = {}\n"
        "for path in json.loads(sys.argv[1]):\n"
        "    a = sc.read_h5ad(path)\n"
        "    out[path] = [a.n_obs, a.n_vars, sorted(a.uns.keys())]\n"
        "    if path.endswith('features/pca_ica.h5ad'):  # .X is the embedding scanpy's tools take\n"
        "        sc.pp.neighbors(a, use_rep='X', n_neighbors=5)\n"
        "        sc.tl.umap(a)\n"
        "        out['umap'] = list(a.obsm['X_umap'].shape)\n"
        "print(json.dumps(out))\n")
    run = subprocess.run([sys.executable, "-c", script, json.dumps(files)], capture_output=True, text=True,
                         timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    shapes = json.loads(run.stdout.strip().splitlines()[-1])
    import anndata as ad

    assert shapes.pop("umap") == [ad.read_h5ad(tiny_run / "results" / "features" / "pca_ica.h5ad").n_obs, 2]
    assert set(shapes) == set(files)
    assert all(n_obs > 0 and n_vars > 0 for n_obs, n_vars, _ in shapes.values())
    assert [p for p, (_, _, uns) in shapes.items() if not {"provenance", "lineage"} & set(uns)] == []


def test_every_number_of_the_comparisons_gene_index_and_gene_pages_equals_its_table(tiny_run):
    """The paired comparisons, the paged gene index and three gene pages, number by number."""
    check_table_numbers(tiny_run / "results", tiny_run / "reports")


def test_a_second_run_on_the_same_results_folder_stops_before_any_job(tmp_path):
    from tests.test_ownership import lock_held_elsewhere

    with lock_held_elsewhere(tmp_path / "results") as pid:
        run = snakemake(tmp_path)
    assert run.returncode != 0
    assert f"results is in use by another cellica run (process {pid} on " in run.stderr, run.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == [".cellica-run.lock"]
    assert not (tmp_path / "logs").exists() or not any((tmp_path / "logs").rglob("*.log"))


def test_a_config_key_given_twice_stops_the_dry_run(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text(TINY.read_text() + "\ntransform:\n  n_components: 5\n")
    run = snakemake(tmp_path, "-n", configfile=bad)
    out = run.stdout + run.stderr  # a dry run prints to stdout
    assert run.returncode != 0 and "c.yaml: key 'transform' is given twice in one mapping" in out, out


def test_a_config_error_is_cellica_s_lines_without_snakemake_s_wrapper(tmp_path):
    """The dry run of a config the embed job would refuse: exit 2, cellica's lines only (no
    `WorkflowError in file .../common.smk` and no `File "...", line N` around them)."""
    cfg = yaml.safe_load(TINY.read_text())
    cfg["embed"]["shards"] = 40
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(cfg))
    run = snakemake(tmp_path, "-n", configfile=bad)
    out = run.stdout + run.stderr
    assert run.returncode == 2, out[-3000:]
    assert "cellica: invalid configuration:\nconfig key embed.shards: 40 embedding jobs" in run.stderr, out[-3000:]
    assert "WorkflowError" not in out and 'File "' not in out and "common.smk" not in out, out[-3000:]


def test_the_slurm_profile_s_dry_run_warns_of_its_unset_account_before_anything_is_submitted(tmp_path):
    run = run_snakemake("-n", "--workflow-profile", str(REPO / "workflow" / "profiles" / "slurm"),
                        directory=tmp_path, configfile=TINY, cores=None, timeout=600)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert ("cellica: warning: slurm_account and slurm_partition still SET_ME under default-resources "
            "(workflow/profiles/slurm/config.yaml or your copy): a SLURM run will stop before submitting anything"
            in out), out[-3000:]
    assert "This was a dry-run" in out


def test_the_report_reads_right_in_a_browser(tiny_run, tmp_path):
    """Every page of the tiny run's report, laid out by headless Chromium at 1400 px: no chart text
    clipped or drawn over another, no text cut by its box; each feature set in one colour of its
    own on every page; every chart of an estimate with its intervals and its chance/null line; a
    no-split flag names its feature sets, and a gene page's flags sit in the first screen."""
    import re

    import pandas as pd

    from tests.browser_checks import charts_without_intervals, layout, set_colours

    reports = tiny_run / "reports"
    pages = [reports / "index.html", *sorted((reports / "gene_index").glob("*.html")),
             *sorted(p for p in (reports / "genes").rglob("*.html") if p.name != "index.html")]
    sets = sorted(set(pd.read_parquet(tiny_run / "results" / "eval" / "summary.parquet")["variant"].dropna()))
    assert len(pages) >= 6 and len(sets) >= 7
    for page in pages:
        seen = layout(page, tmp_path)
        assert seen["clipped"] == [] and seen["overlaps"] == [] and seen["boxes"] == [], (page.name, seen)
        if page.parent.parent.name == "genes":
            flags = [w for w in seen["warnings"] if w["text"].startswith("No split in ")]
            assert all(w["top"] < 900 and w["right"] <= 1400 for w in flags), (page.name, flags)
        assert charts_without_intervals(page) == [], page.name
        for named in re.findall(r"\(no split: ([^)]+)\)", page.read_text()):
            assert set(named.split(", ")) <= set(sets), named
    colours = set_colours(pages, sets)
    drawn = {s: c for s, c in colours.items() if c}
    assert len(drawn) >= 7 and all(len(c) == 1 for c in drawn.values()), colours
    assert len({next(iter(c)) for c in drawn.values()}) == len(drawn), colours  # no two sets share one
