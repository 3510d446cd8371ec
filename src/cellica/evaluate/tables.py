"""The evaluation stage on files: what each ``cellica`` evaluation command does, as plain
functions (features .h5ad in, parquet tables out, written atomically)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from cellica.core.adata import stored_variant
from cellica.core.atomic import read_parquet, write_parquet, write_parquets
from cellica.core.errors import CellicaError
from cellica.core.lineage import lineage_for, merge, tag
from cellica.core.logs import get_logger
from cellica.evaluate.params import EvalParams

TRUTH_STORE = "truth_store"  # a per-gene table's attrs: the simulated store whose truth it was evaluated against
log = get_logger("evaluate")
PathLike = str | os.PathLike


def evaluate_files(features: Sequence[PathLike], out: PathLike, importances_out: PathLike,
                   *, params: EvalParams | None = None, chunk: str | None = None, variant: str | None = None,
                   truth: PathLike | None = None, threads: int = 1) -> pd.DataFrame:
    """Per-gene classifiers of one variant: one features file, or one per evaluation seed.

    ``truth`` (a simulated screen's truth tables, from ``cellica export-truth``) adds the
    ground-truth alignment columns; a table of true factors has no per-gene effects and adds
    none. Returns the per-gene table.

    Parameters
    ----------
    features : sequence of PathLike
        One features file, or one per evaluation seed.
    out : PathLike
        The per-gene table to write.
    importances_out : PathLike
        The importance table to write.
    params : EvalParams, optional
        The evaluation's parameters.
    chunk : str, optional
        ``i/n``: only that chunk of the genes.
    variant : str, optional
        The name the tables record (default: the one the features file records).
    truth : PathLike, optional
        A simulated screen's truth tables (ground-truth alignment columns).
    threads : int, default 1
        LightGBM's threads.

    Returns
    -------
    pandas.DataFrame
        The per-gene table.
    """
    from cellica.evaluate.genes import evaluate_genes, read_evaluation_rows

    params = params or EvalParams()
    paths = [Path(f) for f in features]
    variant = variant or stored_variant(paths[0], "features")
    gene_truth, truth_store = None, ""
    if truth:
        from cellica.evaluate.recovery import read_truth

        gt = read_truth(truth)
        if gt["effects"] is not None:  # which factors each gene moves: only simulated stores know
            gene_truth = gt["latents"], gt["effects"]
            truth_store = str(gt["effects"].attrs.get("store_content_sha256", ""))
    # One file serves every seed (read once); per-seed files are read one at a time, as each seed comes.
    data = paths if len(paths) > 1 else read_evaluation_rows(paths[0])
    per_gene, imps = evaluate_genes(data, params, chunk, variant=variant, threads=threads, truth=gene_truth)
    lineage = lineage_for(paths[0], variant)  # the variant's own file (further seeds are re-fits of it)
    if truth_store:  # the simulated screen whose truth the table's columns compare with (cellica truth-genes)
        per_gene.attrs[TRUTH_STORE] = truth_store
    write_parquets([tag(per_gene, lineage), tag(imps, lineage)], [out, importances_out])
    return per_gene


def gather_evaluations(per_gene: Sequence[PathLike], importances: Sequence[PathLike], out: PathLike,
                       *, importances_out: PathLike) -> pd.DataFrame:
    """Merge the gene chunks of one variant; a gene evaluated twice (same seed) is an error.

    Parameters
    ----------
    per_gene : sequence of PathLike
        The chunks' per-gene tables.
    importances : sequence of PathLike
        The chunks' importance tables.
    out : PathLike
        The merged per-gene table to write.
    importances_out : PathLike
        The merged importance table to write.

    Returns
    -------
    pandas.DataFrame
        The merged per-gene table.
    """
    parts = [(str(p), read_parquet(p, "per-gene table")) for p in per_gene]
    parts += [(str(p), read_parquet(p, "importances")) for p in importances]
    lineage = merge(parts, "gather-eval")  # chunks of one run only
    table = pd.concat([t for _, t in parts[:len(per_gene)]], ignore_index=True)
    keys = ["variant", "gene", "seed"] if "seed" in table else ["variant", "gene"]
    dup = table.duplicated(keys)
    if dup.any():
        raise CellicaError(f"gather-eval: genes evaluated twice, e.g. {table.loc[dup, 'gene'].head(3).tolist()}")
    imps = pd.concat([t for _, t in parts[len(per_gene):]], ignore_index=True)
    table = table.sort_values(keys).reset_index(drop=True)
    truths = {t.attrs.get(TRUTH_STORE, "") for _, t in parts[:len(per_gene)]}
    if len(truths) > 1:
        raise CellicaError(f"gather-eval: the chunks were evaluated against different ground truths ({len(truths)})")
    table.attrs = {TRUTH_STORE: truths.pop()} if truths and "" not in truths else {}
    write_parquets([tag(table, lineage), tag(imps, lineage)], [out, importances_out])
    return table


def batch_metrics_files(features: Sequence[PathLike], out: PathLike, activity_out: PathLike,
                        *, params: EvalParams | None = None, truth: PathLike | None = None) -> pd.DataFrame:
    """Batch signal on the held-back controls, replicate mAP, and (with ``truth``: a simulated
    screen's truth tables, or a table of true factors) ground-truth recovery, for every variant's features.

    Parameters
    ----------
    features : sequence of PathLike
        Every variant's features (``.h5ad``).
    out : PathLike
        The batch metrics table to write.
    activity_out : PathLike
        The replicate mAP table to write.
    params : EvalParams, optional
        The evaluation's parameters.
    truth : PathLike, optional
        A simulated screen's truth tables, or a table of true factors.

    Returns
    -------
    pandas.DataFrame
        The batch metrics, one row per variant.
    """
    from cellica.evaluate.batch import variant_metrics

    gt = None
    if truth:
        from cellica.evaluate.recovery import read_truth

        read = read_truth(truth)
        gt = read["latents"], read["batches"]
    # Variant -> path: variant_metrics reads one variant's matrix at a time.
    paths = {stored_variant(path, str(path)): Path(path) for path in features}
    batch, activity = variant_metrics(paths, params or EvalParams(), gt)
    lineage = merge([(str(path), lineage_for(path, v)) for v, path in paths.items()], "batch-metrics")
    write_parquets([tag(batch, lineage), tag(activity, lineage)], [out, activity_out])
    return batch


def summarize_files(per_gene: Sequence[PathLike], batch: PathLike, activity: PathLike, *, out: PathLike,
                    params: EvalParams | None = None, config_hash: str = "", recall: PathLike | None = None,
                    recall_differences: PathLike | None = None,
                    consistency: Sequence[PathLike] = (), entity: str = "gene") -> pd.DataFrame:
    """The summary and claims table (``summary.parquet``) from the evaluation outputs, plus the
    gene maps' recall and guide consistency when their tables are given. ``entity`` (what the
    perturbations are called) words the notes, as on the report's pages.

    Parameters
    ----------
    per_gene : sequence of PathLike
        Every variant's and baseline's per-gene table.
    batch : PathLike
        The batch metrics table.
    activity : PathLike
        The replicate mAP table.
    out : PathLike
        The summary to write (``summary.parquet``).
    params : EvalParams, optional
        The evaluation's parameters (bootstrap draws and seed).
    config_hash : str, optional
        The run's config hash, recorded in the provenance.
    recall : PathLike, optional
        The gene maps' recall table.
    recall_differences : PathLike, optional
        Its paired differences (with ``recall``).
    consistency : sequence of PathLike, optional
        The guide consistency tables, one per variant.
    entity : str, default "gene"
        What the perturbations are called.

    Returns
    -------
    pandas.DataFrame
        The summary table.
    """
    from cellica.evaluate.summary import summary_table

    params = params or EvalParams()
    named = [(str(p), read_parquet(p, "per-gene table")) for p in per_gene]
    genes = pd.concat([t for _, t in named], ignore_index=True)
    batch_table, activity_table = read_parquet(batch, "batch metrics"), read_parquet(activity, "activity table")
    named += [(str(batch), batch_table), (str(activity), activity_table)]
    maps = None
    if recall:
        cons = [read_parquet(p, "guide consistency table") for p in consistency]
        maps = (read_parquet(recall, "recall table"), read_parquet(recall_differences, "recall differences"),
                pd.concat(cons, ignore_index=True) if cons else pd.DataFrame(columns=["variant", "consistent"]))
        named += [(str(recall), maps[0]), (str(recall_differences), maps[1]),
                  *zip(map(str, consistency), cons, strict=True)]
    lineage = merge(named, "summarize")  # every table of one run
    table = summary_table(genes, batch_table, activity_table, n_boot=params.n_boot, seed=params.seed, maps=maps,
                          entity=entity)
    for claim in table[table["table"] == "claim"].itertuples():
        log.info("claim %s: %s (%s)", claim.verdict.upper(), claim.row, claim.detail)
    table.attrs["provenance"] = json.dumps({"per_gene": [str(p) for p in per_gene], "batch": str(batch),
                                            "config_hash": config_hash})
    write_parquet(tag(table, lineage), out)
    return table


def truth_genes_file(per_gene: Sequence[PathLike], truth: PathLike, out: PathLike) -> pd.DataFrame:
    """The ground truth of each evaluated gene and the verdict on it (:func:`cellica.evaluate._truth.truth_genes`)
    from the per-gene tables of every variant and baseline and a simulated screen's truth tables
    (the folder ``cellica export-truth`` writes), written to ``out``.

    Parameters
    ----------
    per_gene : sequence of PathLike
        Every variant's and baseline's per-gene table, evaluated with ``--truth``.
    truth : PathLike
        The simulated screen's truth tables.
    out : PathLike
        The table to write (``eval/truth_genes.parquet``).

    Returns
    -------
    pandas.DataFrame
        One row per evaluated gene with a true effect.
    """
    from cellica.evaluate._truth import truth_genes

    folder = Path(truth)
    if not (folder / "effects.parquet").is_file():
        raise CellicaError(f"truth-genes: {truth} is not a folder of a simulated screen's truth tables (no "
                           "effects.parquet); `cellica export-truth STORE --out FOLDER` writes them")
    import pyarrow.parquet as pq

    def needed(path) -> list[str] | None:  # only what the verdict reads: a genome-wide table stays on disk
        try:
            names = pq.read_schema(path).names
        except (OSError, ValueError):
            return None  # read_parquet names the file and the problem
        return [c for c in ("gene", "variant", "seed", "auroc_mean") if c in names]

    named = [(str(p), read_parquet(p, "per-gene table", columns=needed(p))) for p in per_gene]
    effects = read_parquet(folder / "effects.parquet", "ground-truth table effects")
    store = effects.attrs.get("store_content_sha256", "")
    for label, t in named:  # a per-gene table of another screen would pair its AUROCs with these effects
        if t.attrs.get(TRUTH_STORE) != store:
            raise CellicaError(f"truth-genes: {label} was not evaluated against the screen of {truth} (another "
                               f"run, or evaluated without --truth); re-run `cellica evaluate ... --truth {truth}`")
    complexes = folder / "complexes.parquet"
    table = truth_genes(pd.concat([t for _, t in named], ignore_index=True), effects,
                        read_parquet(complexes, "ground-truth table complexes") if complexes.is_file() else None)
    log.info("%d gene(s) with a true effect, %d strong one(s) missed by every feature set", len(table),
             int((table["missed"] != "").sum()))
    write_parquet(tag(table, merge(named, "truth-genes")), out)
    return table
