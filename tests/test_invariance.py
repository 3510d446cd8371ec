"""Invariance of the whole DAG (metamorphic): the real Snakefile on a compound screen of well
profiles whose features span 1e-4 to 1e4 in their raw units (tests/invariance.py), run once as
a CSV and once transformed every way a user's table can differ without its biology changing:

* every feature multiplied by 10^k (k from -6 to 6) and shifted by up to 1e3 of its sds;
* the columns (metadata and features) in another order, the rows in another order;
* batches, plates, wells and compounds renamed consistently;
* saved as parquet instead of CSV.

Every table the run writes (per-gene AUROC, sparsity and concentration, importances, batch
metrics, replicate mAP, gene maps and their consistency, recall, the summary's intervals,
p-values and claims) must be the same, labels mapped back, within FLOAT_TOL: the inputs are
stored as float32, so a shifted feature is only known to ~1e-7 of its magnitude, and the
transforms' float64 sums run in another order. What legitimately differs is in LEGITIMATE, with
the reason. On the old code (a scale floor at 1e-6 of the largest feature's sd) every PCA-family
number moved.

Unit by unit, step by step (and quicker to read when this fails): tests/test_scales.py.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import yaml

from cellica.registry import VARIANTS
from tests import invariance as inv
from tests.test_workflow import snakemake

pytestmark = pytest.mark.e2e

# What two runs may differ by (absolute). Every number but PCA+ICA's came out identical or within
# float rounding (1e-5); the ICA stops at a relative gradient of 1e-4 (transform.ica_tol), so its
# rotation, and what is computed from its feature values (concentration's biological variation,
# map correlations, the summary rows of pca_ica), are known to that order: measured 6.6e-5.
FLOAT_TOL = 1e-5
ICA_TOL = 5e-4
# Tables (results-relative glob) and columns that legitimately differ, and why.
# Renaming keeps the names' sorted order here: the Monte Carlo draws over genes (the summary's
# bootstrap intervals, the guide-consistency and recall nulls) take the genes in name order, so a
# renaming that reorders them is another draw of the same null (tests/test_scales.py renames in
# reverse order and checks every per-gene number, transform and batch metric exactly).
LEGITIMATE = {
    "qc/*": "plate-layout QC places each well by its name (row letter, column number): renamed wells "
            "are other positions",
    "maps/efaar/*/features.parquet": "EFAAR's layout names rows by position only: compared through "
                                     "maps/efaar/*/metadata.parquet and the gene maps themselves",
}
# Free text: sentences, paths and timings (their numbers are the tables' numbers).
TEXT = {"detail", "notes", "no_split_reason", "note", "folder", "roc_folds", "roc_mean", "by_seed",
        "auroc_by_guide", "top_features", "sentence", "decides"}


def _config(table_path: str) -> dict:
    return {"results_dir": "results", "reports_dir": "reports", "source": "features",
            "features": {"path": table_path, "column_map": dict(inv.META), "id_column": inv.SAMPLE},
            "report": {"entity": "compound"},
            "transform": {"standardize": "controls", "batch_correction": None, "n_components": 6,
                          "drop_constant": True,
                          "variants": list(VARIANTS)},
            "evaluate": {"min_samples": 3, "min_data_in_leaf": 3, "reg_alpha": 0.0, "n_trees": 20, "seeds": [0],
                         "map_null_size": 100, "n_boot": 200, "max_controls": 20, "min_controls_per_batch": 5},
            "maps": {"min_genes": 3, "consistency_permutations": 100, "null_pairs": 100, "n_boot": 100}}


def _run(workdir, table: pd.DataFrame, fmt: str, **sections):
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"profiles.{fmt}"
    table.to_csv(path, index=False) if fmt == "csv" else table.to_parquet(path, index=False)
    config = _config(str(path))
    for section, values in sections.items():
        config[section] = {**config.get(section, {}), **values}
    (workdir / "config.yaml").write_text(yaml.safe_dump(config))
    run = snakemake(workdir, configfile=workdir / "config.yaml")
    assert run.returncode == 0, run.stderr[-4000:]
    return workdir / "results"


def _tables(results) -> dict[str, pd.DataFrame]:
    from fnmatch import fnmatch

    return {p.relative_to(results).as_posix(): pd.read_parquet(p) for p in sorted(results.rglob("*.parquet"))
            if "benchmarks" not in p.parts and not any(fnmatch(p.relative_to(results).as_posix(), g)
                                                       for g in LEGITIMATE)}


def differences(a: dict[str, pd.DataFrame], b: dict[str, pd.DataFrame], back: dict[str, str],
                tol: float = FLOAT_TOL, ica_tol: float = ICA_TOL) -> list[str]:
    """Each table of ``b`` with its labels mapped back (``back``: new name -> old), rows in one
    order, against ``a``: one line per table that differs (a missing table, other rows or
    labels, a number further than ``tol``; ``ica_tol`` for PCA+ICA's tables and rows)."""
    out = [f"{name}: missing" for name in sorted(set(a) ^ set(b))]
    for name in sorted(set(a) & set(b)):
        x, y = a[name], b[name].copy()
        if list(x.columns) != list(y.columns) or len(x) != len(y):
            out.append(f"{name}: columns or rows differ ({len(x)} vs {len(y)} rows)")
            continue
        for c in y.columns:
            if y[c].dtype == object:  # labels, and lists of labels ("Week1,Week2")
                y[c] = y[c].map(lambda v: ",".join(back.get(t, t) for t in v.split(",")) if isinstance(v, str) else v)
        keys = [c for c in x.columns if x[c].dtype == object and c not in TEXT] or list(x.columns[:1])
        x = x.sort_values(keys, kind="stable").reset_index(drop=True)
        y = y.sort_values(keys, kind="stable").reset_index(drop=True)
        ica = x[keys].astype(str).apply(lambda r: r.str.contains("pca_ica")).any(axis=1).to_numpy()
        limit = np.where(ica | ("pca_ica" in name), ica_tol, tol)
        for c in x.columns:
            if c in TEXT:
                continue
            u, v = x[c], y[c]
            if pd.api.types.is_float_dtype(u) and pd.api.types.is_float_dtype(v):
                uu, vv = u.to_numpy(np.float64), v.to_numpy(np.float64)
                nan = np.isnan(uu) != np.isnan(vv)
                gap = np.abs(uu - vv)
                worst = np.nanmax(gap) if np.isfinite(gap).any() else 0.0
                if nan.any() or (np.nan_to_num(gap) > limit).any():
                    out.append(f"{name}: {c} differs by {worst:.3g}" + (" (NaN in one run)" if nan.any() else ""))
            elif not u.astype(str).equals(v.astype(str)):
                at = int(np.flatnonzero(u.astype(str).to_numpy() != v.astype(str).to_numpy())[0])
                out.append(f"{name}: {c} differs, e.g. {u.iloc[at]!r} vs {v.iloc[at]!r}")
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    table = inv.screen()
    return table, _tables(_run(tmp_path_factory.mktemp("as_is"), table, "csv"))


def test_units_orders_names_and_format_change_no_number(reference, tmp_path):
    """One run with all of it at once: new units, columns and rows shuffled, every label renamed
    (another order), parquet. Every number of every table equals the reference run's."""
    table, before = reference
    renamed, back = inv.rename_labels(inv.change_units(table), reverse=False)
    changed = inv.permute_rows(inv.permute_columns(renamed))
    after = _tables(_run(tmp_path, changed, "parquet"))
    problems = differences(before, after, back)
    assert not problems, "\n".join(problems)
    # and the numbers compared are real: classifiers that separate, maps that recall their compounds
    pg = before["eval/pca_ica/per_gene.parquet"]
    assert pg["auroc_mean"].mean() > 0.7 and pg["auroc_mean"].max() > 0.85 and not pg["no_split"].any()
    assert math.isfinite(before["eval/batch_metrics.parquet"]["silhouette"].iloc[0])


def test_the_comparison_sees_a_changed_number(reference):
    """The check itself can fail: one AUROC moved by 1e-4 or a compound's label swapped is found."""
    _, before = reference
    moved = {k: v.copy() for k, v in before.items()}
    moved["eval/pca/per_gene.parquet"].loc[0, "auroc_mean"] += 1e-4
    assert differences(before, moved, {}) == ["eval/pca/per_gene.parquet: auroc_mean differs by 0.0001"]
    swapped = {k: v.copy() for k, v in before.items()}
    genes = swapped["eval/pca/per_gene.parquet"]["gene"]
    swapped["eval/pca/per_gene.parquet"]["gene"] = genes.iloc[::-1].to_numpy()
    assert any(p.startswith("eval/pca/per_gene.parquet") for p in differences(before, swapped, {}))


def test_a_screen_whose_controls_sit_on_plates_of_their_own_runs_to_the_report(tmp_path):
    """Each week's DMSO wells moved to a plate of their own (the compounds' plates hold none): the
    default DAG normalises the compounds' plates on their week's controls, records it in every
    map, says so in the report, and completes evaluation, maps and report. (Before, gene_map
    stopped the run: `plate 'Week1_P0' has 0 control well(s)`.)"""
    import html

    import anndata as ad

    table = inv.screen()
    ctrl = table[inv.META["is_control"]].astype(bool)
    table.loc[ctrl, inv.META["plate"]] = table.loc[ctrl, inv.META["batch"]] + "_DMSO"
    assert not table[~ctrl][inv.META["plate"]].isin(table[ctrl][inv.META["plate"]]).any()
    # Six compounds under a recall floor of 10: the recall, an optional product, cannot be made.
    results = _run(tmp_path, table, "csv", maps={"min_genes": 10})
    per_gene = pd.read_parquet(results / "eval" / "pca_ica" / "per_gene.parquet")
    assert per_gene["auroc_mean"].notna().all() and per_gene["auroc_mean"].mean() > 0.7
    gene_plates = sorted(table[~ctrl][inv.META["plate"]].unique())
    maps = sorted((results / "maps").glob("*.h5ad"))
    assert len(maps) >= 4
    for path in maps:
        made = ad.read_h5ad(path).uns["provenance"]["map"]
        assert made["controls_of_batch"] == {p: p.split("_")[0] for p in gene_plates}, path
    recall = pd.read_parquet(results / "maps" / "recall.parquet")
    note = "not computed: the map has 6 genes; recall needs at least 10 (maps.min_genes)"
    assert set(recall["variant"]) == set(VARIANTS) and (recall["note"] == note).all()
    index = html.unescape((tmp_path / "reports" / "index.html").read_text())
    assert (f"{len(gene_plates)} plate(s) have too few control wells of their own and were normalised on their "
            "batch's control wells") in index
    assert f"Recall of known pairs {note}." in index
